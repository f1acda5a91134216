# SPDX-License-Identifier: MIT
"""Integration test: the kernel page cache, on by default, and --no-kernel-cache.

  - default: the stats say kernel_cache is on and fsstat says that reads the
    kernel serves are not counted; a file read several times gives SOURCE's
    bytes each time; a source file changed after its first lookup gives
    EIO (it is checked when a read first misses the daemon's cache, since
    opens never reach the daemon); a source file created after the mount
    is not listed and not found;
  - --no-kernel-cache and -o no_kernel_cache: every open and every read
    of a file read K times reaches the daemon (fuse.opens, fuse.reads and
    fuse.read_bytes grow by K opens, K reads and K times its size), and
    a 3 MB file read at once reaches the daemon in 1 MiB pieces;
  - --kernel-cache, the old opt-in, is still accepted and changes nothing;
  - with --prepared, raw files read twice give SOURCE's bytes with no open
    reaching the daemon after the first (the view has a FUSE session of its
    own: MOUNTPOINT/prepared is a symlink to its private mount), and every
    rrc64 sample differs between two opens; an ioctl on either kind of file
    gives ENOTTY and is counted (fuse.ioctls);
  - that private mount goes with the main one, whichever way the main one
    ends (fusermount3 -u, umount, SIGTERM), its directory removed; one left
    by a daemon killed with SIGKILL is removed by the next daemon.
"""

import errno
import fcntl
import os
import random
import subprocess
import sys
import termios
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

SIZES = {'a/one.bin': 100_000, 'a/two.bin': 7_000, 'b/three.bin': 300_000,
	 'c/big.bin': 3_000_000}


def populate(src):
	rng = random.Random(10)
	for rel, size in SIZES.items():
		ct.write_file(os.path.join(src, rel), ct.random_bytes(rng, size),
			      mtime_ns=1_600_000_000_000_000_000)


def source_bytes(m, rel):
	with open(os.path.join(m.src, rel), 'rb') as f:
		return f.read()


def test_default(c):
	with ct.Mount(['--cache-size=16M'], populate=populate) as m:
		s = m.stats()
		c.check('stats: fuse.kernel_cache is true by default',
			s['fuse'].get('kernel_cache') is True, f'fuse={s["fuse"]}')
		fsstat = ct.fsstat_bin()
		c.check('FSSTAT_BIN is set (meson sets it)', fsstat is not None)
		if fsstat:
			p = subprocess.run([fsstat, m.mnt], capture_output=True,
					   text=True, timeout=30)
			c.check('fsstat says reads the kernel serves are not counted',
				p.returncode == 0 and 'not counted' in p.stdout,
				f'rc={p.returncode} out={p.stdout[-400:]!r}')

		want = source_bytes(m, 'a/one.bin')
		got = []
		for _ in range(3):
			with open(os.path.join(m.mnt, 'a/one.bin'), 'rb') as f:
				got.append(f.read())
		c.check('a file read 3 times gives SOURCE bytes each time',
			all(g == want for g in got), f'sizes {[len(g) for g in got]}')

		# First lookup of two.bin, then change it in SOURCE (other size
		# and mtime): reading it must fail with EIO, not serve new bytes.
		st = os.stat(os.path.join(m.mnt, 'a/two.bin'))
		c.eq('two.bin: size at first lookup', st.st_size, SIZES['a/two.bin'])
		ct.write_file(os.path.join(m.src, 'a/two.bin'), b'x' * 9000)
		res = ct.read_in_child(os.path.join(m.mnt, 'a/two.bin'))
		c.eq('changed after its first lookup: EIO', res[:2],
		     ('errno', errno.EIO))
		c.eq('its size stays the one taken at first lookup',
		     os.stat(os.path.join(m.mnt, 'a/two.bin')).st_size,
		     SIZES['a/two.bin'])
		res = ct.read_in_child(os.path.join(m.mnt, 'b/three.bin'))
		c.eq('an unchanged file still reads', res[0], 'ok')

		ct.write_file(os.path.join(m.src, 'a/new.bin'), b'n' * 100)
		c.check('a file created after mount is not listed',
			'new.bin' not in os.listdir(os.path.join(m.mnt, 'a')),
			str(os.listdir(os.path.join(m.mnt, 'a'))))
		c.errno_of('... and not found', lambda: os.stat(
			os.path.join(m.mnt, 'a/new.bin')), errno.ENOENT)


def every_read_counted(c, label, opts, extra_args=()):
	k = 5
	rel = 'b/three.bin'
	with ct.Mount(['--cache-size=16M'] + opts, populate=populate,
		      extra_args=extra_args) as m:
		c.check(f'{label}: stats: fuse.kernel_cache is false',
			m.stats()['fuse'].get('kernel_cache') is False)
		want = source_bytes(m, rel)
		s0 = m.stats()
		ok = True
		for _ in range(k):
			fd = os.open(os.path.join(m.mnt, rel), os.O_RDONLY)
			try:
				# one read(2) of the whole file, from offset 0
				ok = ok and os.pread(fd, len(want) + 1, 0) == want
			finally:
				os.close(fd)
		s1 = m.stats()
		c.check(f'{label}: {k} reads give SOURCE bytes', ok)
		d = {key: s1['fuse'][key] - s0['fuse'][key]
		     for key in ('opens', 'reads', 'read_bytes')}
		c.eq(f'{label}: fuse.opens grew by {k}', d['opens'], k)
		c.ge(f'{label}: fuse.reads grew by >= {k}', d['reads'], k)
		c.eq(f'{label}: fuse.read_bytes grew by {k} x the size',
		     d['read_bytes'], k * len(want))
		c.eq(f'{label}: SOURCE read once', s1['source']['bytes'], len(want))

		# Reads reach the daemon in pieces of up to 1 MiB (the daemon, as
		# root, raises the mount's read-ahead from the kernel's 128 KiB):
		# one read(2) of a 3 MB file is at most 4 FUSE reads, not 23.
		big = 'c/big.bin'
		c.check(f'{label}: tests run as root', os.geteuid() == 0)
		want = source_bytes(m, big)
		s0 = m.stats()
		fd = os.open(os.path.join(m.mnt, big), os.O_RDONLY)
		try:
			ok = os.pread(fd, len(want) + 1, 0) == want
		finally:
			os.close(fd)
		s1 = m.stats()
		c.check(f'{label}: {big} reads SOURCE bytes', ok)
		c.le(f'{label}: {len(want)} bytes in <= 4 FUSE reads',
		     s1['fuse']['reads'] - s0['fuse']['reads'], 4)


def test_no_kernel_cache(c):
	every_read_counted(c, '--no-kernel-cache', ['--no-kernel-cache'])


def test_no_kernel_cache_mount_option(c):
	every_read_counted(c, '-o no_kernel_cache', [], ['-o', 'no_kernel_cache'])


def test_kernel_cache_is_a_no_op(c):
	with ct.Mount(['--cache-size=16M', '--kernel-cache'], populate=populate) as m:
		c.check('--kernel-cache: accepted, kernel cache on',
			m.stats()['fuse'].get('kernel_cache') is True)
		with open(os.path.join(m.mnt, 'a/one.bin'), 'rb') as f:
			c.check('--kernel-cache: reads SOURCE bytes',
				f.read() == source_bytes(m, 'a/one.bin'))
	# the old opt-in does not undo --no-kernel-cache
	with ct.Mount(['--no-kernel-cache', '--kernel-cache'], populate=populate) as m:
		c.check('--no-kernel-cache --kernel-cache: kernel cache off',
			m.stats()['fuse'].get('kernel_cache') is False)


def populate_images(src):
	ct.gendata(src, 2, 3, 7)


def private_mount(c, m, what):
	"""MOUNTPOINT/prepared is a symlink to a live private mount: its path."""
	link = os.path.join(m.mnt, 'prepared')
	c.check(f'{what}: MOUNTPOINT/prepared is a symlink', os.path.islink(link))
	target = os.readlink(link) if os.path.islink(link) else ''
	c.check(f'{what}: it points to a private mount under /run/coordfs',
		target.startswith('/run/coordfs/prep-') and ct.is_mounted(target), target)
	st = os.stat('/run/coordfs')
	c.check(f'{what}: /run/coordfs is root\'s, 0755',
		st.st_uid == 0 and (st.st_mode & 0o7777) == 0o755, oct(st.st_mode))
	return target


def test_prepared_with_kernel_cache(c):
	"""--prepared with the kernel cache on (the default): raw files keep
	their pages and skip their opens (the view has its own session), and
	the prepared view still gives a new sample at every open."""
	with ct.Mount(['--cache-size=16M', '--prepared', '--seed=5'],
		      populate=populate_images) as m:
		private_mount(c, m, 'prepared')
		raw = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(m.src)
			     for f in fs)
		c.ge('prepared: the dataset has images', len(raw), 6)
		rels = [os.path.relpath(p, m.src) for p in raw]
		differ = []
		for rel in rels:
			want = source_bytes(m, rel)
			for _ in range(2):
				with open(os.path.join(m.mnt, rel), 'rb') as f:
					if f.read() != want:
						differ.append(rel)
		c.eq('prepared: raw files read twice give SOURCE bytes', differ, [])
		s = m.stats()
		c.check('prepared: the kernel cache is on',
			s['fuse'].get('kernel_cache') is True)
		c.le('prepared: raw files are open-free (one open: the ENOSYS answer)',
		     s['fuse']['opens'], 1)
		same = []
		for rel in rels:
			path = os.path.join(m.mnt, 'prepared', 'rrc64', rel)
			first = ct.read_bytes(path)
			second = ct.read_bytes(path)
			if not first.startswith(b'P6') or first == second:
				same.append(rel)
		c.eq('prepared: every rrc64 sample is a PPM and differs between '
		     'two opens', same, [])
		c.ge('prepared: every sample open reached the daemon',
		     m.stats()['fuse']['opens'] - s['fuse']['opens'], 2 * len(rels))
		# No file answers an ioctl (isatty: ENOTTY), and each one that
		# reaches the daemon is counted, raw file or sample alike.
		before = m.stats()['fuse'].get('ioctls')
		c.check('stats: fuse.ioctls is a number', isinstance(before, int), repr(before))
		for what, path in (('raw file', os.path.join(m.mnt, rels[0])),
				   ('sample', os.path.join(m.mnt, 'prepared', 'rrc64', rels[0]))):
			fd = os.open(path, os.O_RDONLY)
			try:
				c.check(f'{what}: isatty is false', os.isatty(fd) is False)
				try:
					fcntl.ioctl(fd, termios.TCGETS, bytes(64))
					got = 0
				except OSError as e:
					got = e.errno
				c.eq(f'{what}: TCGETS gives ENOTTY', got, errno.ENOTTY)
			finally:
				os.close(fd)
		after = m.stats()['fuse']['ioctls'] if isinstance(before, int) else 0
		c.eq('stats: fuse.ioctls counts the four', after - (before or 0), 4)


def test_prepared_unmount(c):
	"""The private mount ends with the main one, whichever way."""
	ways = {
		'fusermount3 -u': lambda m: subprocess.run(['fusermount3', '-u', m.mnt],
							   capture_output=True, timeout=30),
		'umount': lambda m: subprocess.run(['umount', m.mnt], capture_output=True,
						   timeout=30),
		'SIGTERM': lambda m: os.kill(m.pids[0], 15),
	}
	for way, end in ways.items():
		with ct.Mount(['--cache-size=16M', '--prepared'], populate=populate_images) as m:
			target = private_mount(c, m, way)
			sample = os.path.join(m.mnt, 'prepared', 'center64')
			holder = open(os.path.join(sample, sorted(
				os.path.relpath(os.path.join(d, f), sample)
				for d, _, fs in os.walk(sample) for f in fs)[0]), 'rb')
			t0 = time.monotonic()
			end(m)
			gone = ct.wait_until(lambda: not ct.is_mounted(m.mnt) and
					     not ct.is_mounted(target) and
					     not os.path.exists(target), 15)
			c.check(f'{way}: both mounts gone and the directory removed, '
				'a sample still held open', gone,
				f'main {ct.is_mounted(m.mnt)} private {ct.is_mounted(target)}')
			c.check(f'{way}: the daemon exited',
				ct.wait_until(lambda: not ct.pid_alive(m.pids[0]), 15))
			# The held sample's session is aborted through fusectl (which
			# root mounts when nothing did): the daemon does not wait out
			# its 5 s grace for a session that will not end.
			took = time.monotonic() - t0
			c.check(f'{way}: the view\'s session ended at once (not after the 5 s grace)',
				took < 4.5, f'{took:.1f} s')
			holder.close()
	# SIGKILL leaves a dead private mount; the next daemon removes it
	with ct.Mount(['--cache-size=16M', '--prepared'], populate=populate_images) as m:
		target = private_mount(c, m, 'SIGKILL')
		os.kill(m.pids[0], 9)
		ct.wait_until(lambda: not ct.pid_alive(m.pids[0]), 15)
		ct.force_unmount(m.mnt)
		c.check('SIGKILL: the private directory is left behind', os.path.lexists(target))
		with ct.Mount(['--cache-size=16M', '--prepared'],
			      populate=populate_images) as m2:
			c.check('the next daemon removed it',
				not os.path.lexists(target) and not ct.is_mounted(target), target)
			private_mount(c, m2, 'next daemon')


def main():
	c = ct.Checker('test_kernel_cache', timeout=110)
	c.group(test_default, c)
	c.group(test_no_kernel_cache, c)
	c.group(test_no_kernel_cache_mount_option, c)
	c.group(test_kernel_cache_is_a_no_op, c)
	c.group(test_prepared_with_kernel_cache, c)
	c.group(test_prepared_unmount, c)
	c.finish()


if __name__ == '__main__':
	main()
