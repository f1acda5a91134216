# SPDX-License-Identifier: MIT
"""Integration test of the mount(8) / fstab paths (coordfs(1), OPTIONS, `-o`).

- `mount -t fuse.coordfs SOURCE MNT -o cache_size=64M,chunk_size=1M`:
  mount(8) runs /sbin/mount.fuse (mount.fuse3), which runs `coordfs` from
  PATH. mount(8) drops PATH from the helper's environment, so `/bin/sh`
  falls back to its default PATH: this form only works once coordfs is
  installed in a standard directory. The test runs in a mount namespace
  of its own, where a tmpfs on /usr/local/sbin holds a link to the binary
  under test, so this form always runs, and nothing is installed on the
  machine. It also runs the same helper directly (`mount.fuse3 SOURCE MNT
  -t coordfs -o ...` with the build directory on PATH) and the fstab form
  that names the program (`mount -t fuse /path/to/coordfs#SOURCE MNT -o
  ...`).
- `coordfs SOURCE MNT -o cache_size=1M,chunk_size=64K,ro` directly.
- `-o` with a bad size or an unknown key fails with one line.
"""

import errno
import filecmp
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
MIB = 1024 * 1024
SH_DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'


def populate(src, big_size):
	rng = random.Random(5)
	for i in range(6):
		ct.write_file(os.path.join(src, f'dir {i % 2}', f'f{i}.bin'),
			      ct.random_bytes(rng, 100 + 5000 * i))
	ct.write_file(os.path.join(src, 'big.bin'),
		      ct.random_bytes(rng, big_size))


def run(cmd, env=None, timeout=30):
	with open(os.devnull, 'rb') as devnull:
		try:
			p = subprocess.run(cmd, stdin=devnull,
					   capture_output=True, text=True,
					   env=env, timeout=timeout)
		except subprocess.TimeoutExpired:
			return None, '', 'timed out'
	return p.returncode, p.stdout, p.stderr


def env_with_build_dir(c):
	env = dict(os.environ)
	env['PATH'] = os.path.dirname(c.bin) + os.pathsep + env.get('PATH', '')
	return env


def verify_mount(c, label, td, capacity, chunk, big_size):
	"""Contents, capacity and chunking of a mount made by some path."""
	c.check(f'{label}: mounted', ct.is_mounted(td.mnt),
		f'nothing at {td.mnt}')
	if not ct.is_mounted(td.mnt):
		return
	c.eq(f'{label}: daemon found via the mount',
	     len(ct.find_daemon_pids(td.mnt)), 1)
	c.eq(f'{label}: listing equals SOURCE', ct.walk_listing(td.mnt),
	     ct.walk_listing(td.src))
	files = sorted(os.path.relpath(os.path.join(d, f), td.src)
		       for d, _, fs in os.walk(td.src) for f in fs)
	bad = [r for r in files if ct.sha256_file(os.path.join(td.mnt, r)) !=
	       ct.sha256_file(os.path.join(td.src, r))]
	c.check(f'{label}: sha256 of all files equals SOURCE', not bad,
		f'differ: {bad}')
	s = ct.stats(td.mnt)
	c.eq(f'{label}: capacity_bytes from cache_size',
	     s['cache']['capacity_bytes'], capacity)
	units = len(files) - 1 + (big_size + chunk - 1) // chunk
	c.ge(f'{label}: items >= files + chunks of big.bin at chunk_size',
	     s['cache']['items'], units)
	c.errno_of(f'{label}: create fails with EROFS',
		   lambda: os.open(os.path.join(td.mnt, 'new'),
				   os.O_CREAT | os.O_WRONLY, 0o644),
		   errno.EROFS)


def unmount(c, label, td):
	pids = ct.find_daemon_pids(td.mnt)
	rc, out, err = run(['fusermount3', '-u', td.mnt])
	c.eq(f'{label}: fusermount3 -u', (rc, err.strip()), (0, ''))
	c.check(f'{label}: daemon exited',
		ct.wait_until(lambda: not any(ct.pid_alive(p) for p in pids),
			      5.0), f'pids {pids}')


def test_mount_type_fuse_coordfs(c):
	big = 2 * MIB + MIB // 2
	opts = 'cache_size=64M,chunk_size=1M'
	# In this test's own mount namespace (main): the binary under test is
	# what /bin/sh finds first on its default PATH.
	rc, _, err = run(['mount', '-t', 'tmpfs', '-o', 'size=1M', 'tmpfs', '/usr/local/sbin'])
	if rc == 0:
		os.symlink(c.bin, '/usr/local/sbin/coordfs')
	installed = shutil.which('coordfs', path=SH_DEFAULT_PATH)
	if not c.check('the binary under test is first on /bin/sh\'s default PATH',
		       installed and filecmp.cmp(installed, c.bin, shallow=False),
		       f'tmpfs on /usr/local/sbin: rc {rc} {err.strip()}; found {installed}'):
		installed = None
	if installed:
		with ct.TempDirs() as td:
			populate(td.src, big)
			rc, out, err = run(['mount', '-t', 'fuse.coordfs',
					    td.src, td.mnt, '-o', opts],
					   env=env_with_build_dir(c))
			c.eq('mount -t fuse.coordfs: exit status',
			     (rc, err.strip()), (0, ''))
			print(f'# note: used installed {installed}')
			verify_mount(c, 'mount -t fuse.coordfs', td, 64 * MIB,
				     MIB, big)
			unmount(c, 'mount -t fuse.coordfs', td)

	with ct.TempDirs() as td:
		populate(td.src, big)
		helper = shutil.which('mount.fuse3') or '/sbin/mount.fuse3'
		rc, out, err = run([helper, td.src, td.mnt, '-t', 'coordfs',
				    '-o', 'rw,' + opts + ',dev,suid'],
				   env=env_with_build_dir(c))
		c.eq('mount.fuse3 -t coordfs (coordfs from PATH): exit status',
		     (rc, err.strip()), (0, ''))
		verify_mount(c, 'mount.fuse3 -t coordfs', td, 64 * MIB, MIB, big)
		unmount(c, 'mount.fuse3 -t coordfs', td)

	with ct.TempDirs() as td:
		populate(td.src, big)
		rc, out, err = run(['mount', '-t', 'fuse',
				    f'{c.bin}#{td.src}', td.mnt, '-o', opts])
		c.eq('mount -t fuse PROG#SOURCE (fstab form): exit status',
		     (rc, err.strip()), (0, ''))
		verify_mount(c, 'mount -t fuse PROG#SOURCE', td, 64 * MIB, MIB,
			     big)
		unmount(c, 'mount -t fuse PROG#SOURCE', td)


def test_fstab_disk_cache(c):
	"""The disk tier's options in the fstab form: DIR made 0700, the limit
	taken, and what one mount admitted served by the next, from the same
	line."""
	big = 300 * KIB + 7
	with ct.TempDirs() as td:
		populate(td.src, big)
		tier = os.path.join(td.root, 'tier')
		opts = f'cache_size=1M,chunk_size=64K,disk_cache={tier},disk_cache_size=16M'
		files = {os.path.relpath(os.path.join(d, f), td.src):
			 open(os.path.join(d, f), 'rb').read()
			 for d, _, fs in os.walk(td.src) for f in fs}
		for k in (1, 2):
			label = f'fstab form with disk_cache, mount {k}'
			rc, out, err = run(['mount', '-t', 'fuse', f'{c.bin}#{td.src}', td.mnt,
					    '-o', opts])
			c.eq(f'{label}: exit status', (rc, err.strip()), (0, ''))
			if rc != 0:
				return
			disk = ct.disk_stats(td.mnt)
			c.eq(f'{label}: disk_cache_size=16M is the limit', disk['capacity_bytes'],
			     16 * MIB)
			c.eq(f'{label}: DIR is 0700', os.stat(tier).st_mode & 0o777, 0o700)
			got = ct.epoch(c, label, td.mnt, files)
			if k == 1:
				c.eq(f'{label}: the dataset read from SOURCE', got,
				     sum(len(v) for v in files.values()))
				ct.disk_settle(c, label, td.mnt)
			else:
				c.eq(f'{label}: nothing read from SOURCE', got, 0)
			unmount(c, label, td)


def test_dash_o(c):
	big = 300 * KIB + 7
	with ct.Mount(extra_args=['-o', 'cache_size=1M,chunk_size=64K,ro'],
		      populate=lambda s: populate(s, big)) as m:
		verify_mount(c, '-o cache_size=1M,chunk_size=64K,ro', m,
			     MIB, 64 * KIB, big)
	# coordfs(1): an option given twice counts as given last (mount(8)'s rule)
	with ct.Mount(['--cache-size=7M', '-o', 'cache_size=2M', '-o', 'chunk_size=64K'],
		      populate=lambda s: populate(s, big)) as m:
		verify_mount(c, 'two -o before SOURCE, the last cache size counting', m,
			     2 * MIB, 64 * KIB, big)

	# A comma inside a value is written '\,' (coordfs(1), OPTIONS); a
	# lone one splits a peers list, and the line says how to write it.
	p1, p2 = ct.free_port(), ct.free_port()
	peers = f'peers=http://127.0.0.1:{p1}\\,http://127.0.0.1:{p2},node=0'
	with ct.Mount(['-o', peers], populate=lambda s: populate(s, 1000)) as m:
		c.eq('-o peers=URL\\,URL: both nodes', m.stats()['peers']['node_count'], 2)
	for args, must in ((['-o', peers.replace('\\,', ',')], '\\,'),
			   (['-o', 'cache_size=12Q'], '12Q'),
			   (['-o', 'chunk_size=-1'], '-1'),
			   (['-o', 'no_such_key=1'], 'no_such_key')):
		with ct.TempDirs() as td:
			ct.write_file(os.path.join(td.src, 'f'), b'data')
			label = ' '.join(args)
			rc, out, err = ct.run_coordfs([td.src, td.mnt] + args,
						      timeout=20)
			lines = err.rstrip('\n').split('\n') if err.strip() \
				else []
			c.check(f'{label}: exits non-zero',
				rc is not None and rc != 0, f'rc={rc}')
			c.check(f'{label}: one stderr line naming {must!r}',
				len(lines) == 1 and must in err,
				f'stderr={err!r}')
			c.eq(f'{label}: nothing mounted',
			     ct.fuse_mounts_under(td.root), [])


def main():
	# The tmpfs over /usr/local/sbin and the test's mounts are seen by no one else.
	ct.own_mount_namespace(__file__)
	c = ct.Checker('test_fstab', timeout=110)
	c.group(test_mount_type_fuse_coordfs, c)
	c.group(test_dash_o, c)
	c.group(test_fstab_disk_cache, c)
	c.finish()


if __name__ == '__main__':
	main()
