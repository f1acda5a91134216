# SPDX-License-Identifier: MIT
"""Integration test of coordfs failures and shutdown (coordfs(1): OPTIONS, THE MOUNT, STATISTICS).

- Bad command lines (missing or wrong SOURCE/MOUNTPOINT, already mounted,
  bad SIZE values, unknown option, --peers without --node) must exit
  non-zero with exactly one stderr line naming the problem, and leave
  nothing mounted and no daemon running.
- SIGTERM, SIGINT and `fusermount3 -u` unmount cleanly and end the daemon.
- A SOURCE file deleted, truncated, grown, replaced, or swapped for a
  directory, a FIFO or a symlink leading outside SOURCE after the mount
  gives EIO for that file only; other files still read correctly and
  source.errors counts the failures.
"""

import errno
import os
import random
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
CHUNK = 64 * KIB


def expect_failure(c, label, args, must_name, td, keep_mounts=0):
	"""Run coordfs with args; it must fail with one line naming must_name
	and leave no new mount and no daemon under td.root."""
	rc, out, err = ct.run_coordfs(args, timeout=20)
	lines = err.rstrip('\n').split('\n') if err.strip() else []
	ok_rc = rc is not None and rc != 0
	c.check(f'{label}: exits non-zero', ok_rc,
		'timed out (still running after 20s)' if rc is None
		else f'rc={rc}, stderr={err!r}')
	c.check(f'{label}: exactly one line on stderr', len(lines) == 1,
		f'{len(lines)} lines: {err!r}')
	names = [must_name] if isinstance(must_name, str) else must_name
	c.check(f'{label}: stderr names {" or ".join(map(repr, names))}',
		any(n.lower() in err.lower() for n in names), f'stderr={err!r}')
	left = ct.fuse_mounts_under(td.root)
	c.eq(f'{label}: nothing (new) mounted', len(left), keep_mounts)
	# a daemon that forked before failing must not linger
	stray = []
	ct.wait_until(lambda: not [p for p in _coordfs_pids(td.root)
				   if p not in td.known_pids], 2.0)
	stray = [p for p in _coordfs_pids(td.root) if p not in td.known_pids]
	c.check(f'{label}: no daemon left running', not stray,
		f'pids {stray}')
	for p in stray:
		ct.kill_and_wait(p, 1.0)
	for m in left:
		if m['mountpoint'] not in getattr(td, 'known_mounts', ()):
			ct.force_unmount(m['mountpoint'])


def _coordfs_pids(root):
	"""coordfs processes whose command line mentions a path under root."""
	pids = []
	for entry in os.listdir('/proc'):
		if not entry.isdigit():
			continue
		try:
			with open(f'/proc/{entry}/cmdline', 'rb') as f:
				argv = f.read().decode('utf-8', 'replace').split('\0')
		except OSError:
			continue
		if argv and os.path.basename(argv[0]) == 'coordfs' and \
		   any(a.startswith(root) for a in argv[1:]) and \
		   ct.pid_alive(int(entry)):
			pids.append(int(entry))
	return pids


def test_bad_command_lines(c):
	with ct.TempDirs() as td:
		td.known_pids = []
		missing = os.path.join(td.root, 'no_such_source')
		expect_failure(c, 'missing SOURCE', [missing, td.mnt],
			       missing, td)
		a_file = os.path.join(td.root, 'source_is_a_file')
		ct.write_file(a_file, b'hello')
		expect_failure(c, 'SOURCE is a file', [a_file, td.mnt],
			       a_file, td)
		no_mnt = os.path.join(td.root, 'no_such_mountpoint')
		expect_failure(c, 'MOUNTPOINT missing', [td.src, no_mnt],
			       no_mnt, td)
		expect_failure(c, 'MOUNTPOINT is a file', [td.src, a_file],
			       a_file, td)
		ct.write_file(os.path.join(td.src, 'data.bin'), b'x' * 100)
		full = os.path.join(td.root, 'nonempty_mnt')
		ct.write_file(os.path.join(full, 'already_here'), b'y')
		expect_failure(c, 'MOUNTPOINT not empty', [td.src, full],
			       full, td)
		c.check('MOUNTPOINT not empty: its file untouched',
			os.path.exists(os.path.join(full, 'already_here')))
		for opt in ('--cache-size', '--chunk-size'):
			for bad in ('12Q', '-1', '200%'):
				expect_failure(c, f'{opt}={bad}',
					       [f'{opt}={bad}', td.src, td.mnt],
					       bad, td)
		# Counts and the seed are decimal digits: strtol/strtoull took
		# blanks, signs (' -1' was seed 2^64-1) and, for the seed and
		# --prep-ahead-idle, hexadecimal ('0x10'; '010' was seed 8).
		for arg in ('--seed=0x10', '--seed= -1', '--seed=+1', '--prep-threads=+4',
			    '--prep-threads= 4', '--prep-ahead-idle=0x1p1',
			    '--prep-ahead-idle=1e0'):
			expect_failure(c, arg, [arg, td.src, td.mnt], arg.split('=')[0], td)
		# A --prep-mem no sample fits in: every open of the view failed
		# with ENOMEM on a mount that came up as if serving.
		for arg in ('--prep-mem=0', '--prep-mem=512K'):
			expect_failure(c, arg, ['--prepared', arg, td.src, td.mnt], '1M or more', td)
		# A comma too many in -o names itself (it said "unknown mount option ''").
		expect_failure(c, '-o cache_size=1M,', ['-o', 'cache_size=1M,', td.src, td.mnt],
			       'comma too many', td)
		# getopt's form, the value as the next argument: the line says
		# how to give it, not that the option does not exist
		expect_failure(c, '--cache-size 1M', ['--cache-size', '1M', td.src, td.mnt],
			       '--cache-size=VALUE', td)
		expect_failure(c, '-o cache_size', ['-o', 'cache_size', td.src, td.mnt],
			       'cache_size=VALUE', td)
		expect_failure(c, 'unknown option',
			       ['--no-such-option', td.src, td.mnt],
			       'no-such-option', td)
		p1, p2 = ct.free_port(), ct.free_port()
		peers = f'--peers=http://127.0.0.1:{p1},http://127.0.0.1:{p2}'
		expect_failure(c, '--peers without --node',
			       [peers, td.src, td.mnt], '--node', td)
		expect_failure(c, '--listen port 0', [peers, '--node=0', '--listen=127.0.0.1:0',
						     td.src, td.mnt], '--listen', td)
		expect_failure(c, '--node out of range',
			       [peers, '--node=2', td.src, td.mnt],
			       'node', td)
		# with slurm, SLURM_NODEID names this node: a --node-name was ignored
		expect_failure(c, '--peers=slurm --node-name',
			       ['--peers=slurm', '--node-name=127.0.0.1', td.src, td.mnt],
			       '--node-name applies', td)
		# a peers file's URLs carry their ports: --peer-port was ignored
		pf = os.path.join(td.root, 'peers.txt')
		ct.write_file(pf, f'http://127.0.0.1:{p1}\n'.encode())
		expect_failure(c, '--peers=file: --peer-port',
			       [f'--peers=file:{pf}', f'--listen=127.0.0.1:{p1}', f'--peer-port={p2}',
				td.src, td.mnt], '--peer-port applies', td)
		expect_failure(c, 'missing MOUNTPOINT argument', [td.src],
			       ['mountpoint', 'usage', 'argument'], td)


def test_help_version(c):
	rc, out, err = ct.run_coordfs(['--help'], timeout=10)
	c.eq('--help: exit status', rc, 0)
	wide = [ln for ln in out.splitlines() if len(ln) > 80]
	c.check('--help: fits 80 columns', not wide, wide)
	man = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'fs',
			   'coordfs.1')
	with open(man, encoding='utf-8') as f:
		text = f.read()
	section = text[text.index('\n.SH OPTIONS'):text.index('\n.SH THE MOUNT')]
	documented = set(re.findall(r'^\.B[IR]? \\-\\-([a-z0-9\\-]+)', section, re.M))
	documented = {'--' + o.replace('\\-', '-') for o in documented}
	missing = sorted(o for o in documented if o not in out)
	c.check(f'--help: names each of the {len(documented)} options of coordfs(1)',
		len(documented) > 30 and not missing, missing)
	c.check('--help: prints usage with every documented option',
		'usage' in (out + err).lower() and all(
			o in out + err for o in (
				'--foreground', '--cache-size', '--chunk-size',
				'--peers', '--node', '--listen', '--secret-file',
				'--prepared', '-o')), f'{(out + err)[:300]!r}')
	c.check('--help: no printf escapes left (%%)', '%%' not in out + err,
		[line for line in (out + err).splitlines() if '%%' in line])
	rc, out, err = ct.run_coordfs(['--version'], timeout=10)
	c.check('--version: exit 0 and prints a version',
		rc == 0 and any(ch.isdigit() for ch in out + err),
		f'rc={rc} {out + err!r}')


def test_already_mounted(c):
	with ct.Mount() as m:	# empty SOURCE: the mount looks empty
		c.eq('daemon pid found via the mount', len(m.pids), 1)
		with ct.TempDirs() as td2:
			ct.write_file(os.path.join(td2.src, 'f'), b'z')
			td2.known_pids = list(m.pids)
			td2.known_mounts = [m.mnt]
			rc, out, err = ct.run_coordfs([td2.src, m.mnt],
						      timeout=20)
			lines = err.rstrip('\n').split('\n') if err.strip() \
				else []
			c.check('already mounted: exits non-zero',
				rc is not None and rc != 0,
				f'rc={rc}, stderr={err!r}')
			c.check('already mounted: one stderr line naming it',
				len(lines) == 1 and m.mnt in err,
				f'stderr={err!r}')
			c.eq('already mounted: still exactly one mount there',
			     len(ct.mounts_at(m.mnt)), 1)
			c.eq('already mounted: no daemon for the second source',
			     [p for p in _coordfs_pids(td2.root)], [])
		c.check('already mounted: first daemon still alive',
			all(ct.pid_alive(p) for p in m.pids), f'{m.pids}')
		c.eq('already mounted: first mount still answers',
		     ct.stats(m.mnt)['version'], 1)
		c.eq('already mounted: first mount still shows its source',
		     os.listdir(m.mnt), [])


def populate_small(src):
	rng = random.Random(7)
	for i in range(5):
		ct.write_file(os.path.join(src, f'd/f{i}.bin'),
			      ct.random_bytes(rng, 1000 + 3000 * i))


def check_shutdown(c, label, how):
	with ct.Mount(populate=populate_small) as m:
		c.eq(f'{label}: one daemon found via the mount', len(m.pids), 1)
		c.eq(f'{label}: mount readable before',
		     ct.sha256_file(os.path.join(m.mnt, 'd/f3.bin')),
		     ct.sha256_file(os.path.join(m.src, 'd/f3.bin')))
		how(m)
		c.check(f'{label}: mount gone within 5s',
			ct.wait_until(lambda: not ct.is_mounted(m.mnt), 5.0),
			f'{ct.mounts_at(m.mnt)}')
		c.check(f'{label}: daemon exited within 5s',
			ct.wait_until(lambda: not any(ct.pid_alive(p)
						      for p in m.pids), 5.0),
			f'pids {m.pids} still alive')
		try:
			listing = os.listdir(m.mnt)
		except OSError as e:
			listing = f'OSError {e}'
		c.eq(f'{label}: mountpoint is a plain empty directory again',
		     listing, [])
		c.eq(f'{label}: SOURCE untouched', sorted(os.listdir(
		     os.path.join(m.src, 'd'))), [f'f{i}.bin' for i in range(5)])


def test_shutdown(c):
	def sigterm(m):
		for p in m.pids:
			os.kill(p, signal.SIGTERM)

	def sigint(m):
		for p in m.pids:
			os.kill(p, signal.SIGINT)

	def fusermount(m):
		rc, out, err = _run(['fusermount3', '-u', m.mnt])
		c.eq('fusermount3 -u: exit status', rc, 0)
	check_shutdown(c, 'SIGTERM', sigterm)
	check_shutdown(c, 'SIGINT', sigint)
	check_shutdown(c, 'fusermount3 -u', fusermount)


def _run(cmd):
	import subprocess
	p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
	return p.returncode, p.stdout, p.stderr


# files changed after the mount, name -> how
CHANGES = ['deleted', 'truncated', 'grown', 'replaced_size',
	   'replaced_mtime', 'as_dir', 'as_symlink_outside',
	   'big_truncated', 'dirswap/inner', 'as_fifo']


def populate_changes(src):
	rng = random.Random(11)
	for i in range(6):
		ct.write_file(os.path.join(src, f'good/g{i}.bin'),
			      ct.random_bytes(rng, 500 + 7000 * i))
	ct.write_file(os.path.join(src, 'good/big_good.bin'),
		      ct.random_bytes(rng, 4 * CHUNK + 99))
	for name in CHANGES:
		size = 5 * CHUNK + 17 if name.startswith('big') else 20000
		ct.write_file(os.path.join(src, f'{name}.bin'),
			      ct.random_bytes(rng, size),
			      mtime_ns=1_650_000_000_000_000_000)


def apply_changes(src, outside):
	"""Change every CHANGES file behind the daemon's back."""
	rng = random.Random(12)
	tmp = os.path.join(src, '.tmp_new')
	snap_mtime = 1_650_000_000_000_000_000

	def p(name):
		return os.path.join(src, f'{name}.bin')

	def replaced_size():
		ct.write_file(tmp, ct.random_bytes(rng, 12345))
		os.rename(tmp, p('replaced_size'))

	def replaced_mtime():
		ct.write_file(tmp, ct.random_bytes(rng, 20000),
			      mtime_ns=snap_mtime + 99_000_000_000)
		os.rename(tmp, p('replaced_mtime'))

	def as_dir():
		os.unlink(p('as_dir'))
		os.mkdir(p('as_dir'))

	def as_fifo():
		os.unlink(p('as_fifo'))
		os.mkfifo(p('as_fifo'))

	def as_symlink_outside():
		# outside SOURCE, same size and mtime as the snapshot
		secret = os.path.join(outside, 'secret.bin')
		ct.write_file(secret, b'S' * 20000, mtime_ns=snap_mtime)
		os.unlink(p('as_symlink_outside'))
		os.symlink(secret, p('as_symlink_outside'))

	def dirswap():
		# a directory on the path swapped for a symlink to an
		# outside copy with the snapshot's size and mtime
		outdir = os.path.join(outside, 'dirswap')
		os.mkdir(outdir)
		ct.write_file(os.path.join(outdir, 'inner.bin'), b'S' * 20000,
			      mtime_ns=snap_mtime)
		os.rename(os.path.join(src, 'dirswap'),
			  os.path.join(src, '.dirswap_old'))
		os.symlink(outdir, os.path.join(src, 'dirswap'))

	def grown():
		with open(p('grown'), 'ab') as f:
			f.write(b'more bytes')

	how = {
		'deleted': lambda: os.unlink(p('deleted')),
		'truncated': lambda: os.truncate(p('truncated'), 100),
		'grown': grown,
		'replaced_size': replaced_size,
		'replaced_mtime': replaced_mtime,
		'as_dir': as_dir,
		'as_fifo': as_fifo,
		'as_symlink_outside': as_symlink_outside,
		'big_truncated': lambda: os.truncate(p('big_truncated'),
						     2 * CHUNK + CHUNK // 2),
		'dirswap/inner': dirswap,
	}
	for name in CHANGES:
		how[name]()


def test_changed_source(c):
	with ct.Mount(['--chunk-size=64K', '--cache-size=64M'],
		      populate=populate_changes) as m:
		good = sorted(os.listdir(os.path.join(m.src, 'good')))
		want = {g: ct.sha256_file(os.path.join(m.src, 'good', g))
			for g in good}
		outside = os.path.join(m.root, 'outside')
		os.mkdir(outside)
		# Attributes are taken at a file's first lookup: look every one
		# up first, so that each change comes after the snapshot.
		for name in CHANGES:
			os.stat(os.path.join(m.mnt, f'{name}.bin'))
		s0 = m.stats()
		apply_changes(m.src, outside)
		for name in CHANGES:
			path = os.path.join(m.mnt, f'{name}.bin')
			res = ct.read_in_child(path, timeout=10)
			c.check(f'{name}: read fails with EIO',
				res[0] == 'errno' and res[1] == errno.EIO,
				'read hung for 10s' if res[0] == 'timeout'
				else f'got {res}')
			if res[0] == 'timeout' and name == 'as_fifo':
				# the daemon opened the FIFO without
				# O_NONBLOCK: let it go so the rest can run
				_release_fifo(os.path.join(m.src, 'as_fifo.bin'))
		c.check('daemon still alive after the errors',
			all(ct.pid_alive(p) for p in m.pids)
			and ct.is_mounted(m.mnt), f'pids {m.pids}')
		bad = [g for g in good if ct.read_in_child(
			os.path.join(m.mnt, 'good', g))[1] != want[g]]
		c.check('unchanged files still read correctly', not bad,
			f'wrong: {bad}')
		s1 = m.stats()
		c.ge('source.errors counts every failed file',
		     s1['source']['errors'] - s0['source']['errors'],
		     len(CHANGES))
		res = ct.read_in_child(os.path.join(m.mnt, 'truncated.bin'))
		c.check('a failed file fails again on a second read',
			res[0] == 'errno' and res[1] == errno.EIO, f'got {res}')
		small = [n for n in CHANGES if not n.startswith('big')]
		c.check('no changed small file got cached',
			all(_cached_or_none(os.path.join(m.mnt, f'{n}.bin'))
			    != b'1' for n in small),
			str({n: _cached_or_none(os.path.join(m.mnt, f'{n}.bin'))
			     for n in small}))


def test_changed_before_lookup(c):
	"""The mount takes names; a file's attributes come at its first
	lookup. A file changed between the two shows its new attributes and
	bytes, one gone is ENOENT, one whose type changed (or that now lies
	behind a symlink) is EIO; a file created after the mount is not
	listed."""
	with ct.Mount(['--chunk-size=64K', '--cache-size=64M'],
		      populate=populate_changes) as m:
		outside = os.path.join(m.root, 'outside')
		os.mkdir(outside)
		listed = sorted(os.listdir(m.mnt))  # a listing takes no attributes
		s0 = m.stats()
		c.eq('stats: no file looked up yet',
		     s0['namespace']['attrs_known'], 0)
		c.eq('stats: dataset_bytes counts looked-up files only',
		     s0['dataset_bytes'], 0)
		apply_changes(m.src, outside)
		ct.write_file(os.path.join(m.src, 'created.bin'), b'new' * 100)
		ct.write_file(os.path.join(m.src, 'good', 'created.bin'), b'x')
		c.eq('a file created after the mount is not listed',
		     sorted(os.listdir(m.mnt)), listed)
		c.check('... nor in a subdirectory',
			'created.bin' not in os.listdir(os.path.join(m.mnt, 'good')))
		for rel in ('created.bin', 'good/created.bin'):
			try:
				os.stat(os.path.join(m.mnt, rel))
				got = 'found'
			except OSError as e:
				got = errno.errorcode.get(e.errno, e.errno)
			c.eq(f'{rel}: created after the mount: ENOENT', got, 'ENOENT')
		for name in ('truncated', 'grown', 'replaced_size', 'replaced_mtime',
			     'big_truncated'):
			src, mnt = (os.path.join(d, f'{name}.bin') for d in (m.src, m.mnt))
			want = os.stat(src)
			got = os.stat(mnt)
			c.eq(f'{name}: changed before its first lookup: new size',
			     got.st_size, want.st_size)
			c.eq(f'{name}: new mtime', got.st_mtime_ns, want.st_mtime_ns)
			c.eq(f'{name}: new bytes', ct.sha256_file(mnt), ct.sha256_file(src))
		want_err = {'deleted': errno.ENOENT, 'as_dir': errno.EIO,
			    'as_fifo': errno.EIO, 'as_symlink_outside': errno.EIO,
			    'dirswap/inner': errno.EIO}
		for name, e in want_err.items():
			try:
				os.stat(os.path.join(m.mnt, f'{name}.bin'))
				got = 'no error'
			except OSError as err:
				got = errno.errorcode.get(err.errno, err.errno)
			c.eq(f'{name}: changed before its first lookup', got,
			     errno.errorcode[e])
		c.check('daemon still alive', all(ct.pid_alive(p) for p in m.pids)
			and ct.is_mounted(m.mnt), f'pids {m.pids}')
		s1 = m.stats()
		c.eq('stats: attrs_known counts the files looked up',
		     s1['namespace']['attrs_known'], 5)
		c.ge('stats: source.errors counts the refused lookups',
		     s1['source']['errors'] - s0['source']['errors'], len(want_err))


def _release_fifo(path):
	try:
		fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
		os.close(fd)
		print('# note: released a daemon thread blocked on the FIFO')
	except OSError as e:
		print(f'# note: could not open the FIFO for writing: {e}')


def _cached_or_none(path):
	try:
		return ct.cached(path)
	except OSError as e:
		return f'errno {e.errno}'


def main():
	c = ct.Checker('test_mount_errors', timeout=170)
	c.group(test_bad_command_lines, c)
	c.group(test_help_version, c)
	c.group(test_already_mounted, c)
	c.group(test_shutdown, c)
	c.group(test_changed_source, c)
	c.group(test_changed_before_lookup, c)
	c.finish()


if __name__ == '__main__':
	main()
