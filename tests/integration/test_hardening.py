# SPDX-License-Identifier: MIT
"""The daemon against hostile names, descriptor pressure and failed starts.

Each group mounts for real and checks what a user or a calling script sees:
  - SOURCE paths with commas (one ending in ",suid,dev") and a backslash
    mount, /proc/self/mountinfo shows exactly "coordfs:SOURCE" as the
    source, and nosuid,nodev stay on;
  - a SOURCE path with bytes that are not UTF-8: the stats xattr,
    `fsstat --json` (decoded strictly as UTF-8, then json.loads) and the
    `fsstat` table all work, with U+FFFD for each bad byte;
  - a newline in a file name (a fifo skipped at scan, a regular file that
    changed after mount) never starts a line of its own in the log;
  - a path longer than PATH_MAX is skipped and counted, the rest mounts;
    fifos and sockets are counted in namespace.skipped_special;
  - the daemon raises its open-file soft limit to the hard limit
    (/proc/PID/limits), so 400 held opens do not make another process's
    open fail; held opens keep a SOURCE descriptor only up to half its
    limit (past it their reads open their own): under a hard limit of 64,
    150 held opens all succeed and read, another process's too;
  - readiness: when the FUSE worker threads cannot start (a huge stack
    rlimit makes every thread creation fail after the fork) and when
    --log-file cannot be opened, coordfs exits non-zero with one line of
    reason, and nothing is mounted or left running;
  - --log-file where another user could plant something (their directory,
    their link, FIFO or file in a sticky one) and a symbolic link, FIFO or
    hard link at the path are refused, with one line, before mounting:
    the file behind the links is untouched, nothing hangs; a new log is
    0600;
  - -o max_read=N mounts and serves with no read past N reaching the
    daemon; fsname=/subtype= leave the mount named coordfs:SOURCE, type
    fuse.coordfs; blksize= and a bad max_read are refused before mounting;
  - a root mount point that another user could swap before the mount (in
    their directory, or theirs in a sticky one) is refused with one line;
    theirs in root's own directory mounts;
  - a SOURCE file replaced, after its attributes were frozen, by another
    of the same size and mtime but another owner or mode (root's 0600
    file hard-linked in place of a user's 0644 one) gives EIO, not the
    other file's bytes under the frozen mode;
  - option checks: --secret-file without --peers and a --cache-size above
    physical memory are refused, --cache-size=0 warns;
  - a file that fails on every open is logged once, not once per open.
"""

import errno
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile

import coordfs_test as ct


def run(args, preexec=None, timeout=30, cwd=None):
	"""coordfs args -> (rc, stdout bytes, stderr bytes); rc None on timeout."""
	with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
		try:
			p = subprocess.run([ct.coordfs_bin()] + list(args),
					   stdin=subprocess.DEVNULL, stdout=out,
					   stderr=err, timeout=timeout,
					   preexec_fn=preexec, cwd=cwd)
			rc = p.returncode
		except subprocess.TimeoutExpired:
			rc = None
		out.seek(0)
		err.seek(0)
		return rc, out.read(), err.read()


def mount_src(c, td, src, opts=(), preexec=None, label=''):
	"""Mount src on td.mnt; True when the mount came up."""
	rc, _, err = run(list(opts) + [src, td.mnt], preexec=preexec)
	td.mount_stderr = err.decode('utf-8', 'replace')
	return c.check(f'{label}: mounts', rc == 0 and ct.is_mounted(td.mnt),
		       f'rc={rc} stderr={err[-600:]!r}')


def daemon_pid(td):
	pids = ct.find_daemon_pids(td.mnt)
	return pids[0] if len(pids) == 1 else None


# ---------------------------------------------------------------- names

def test_fsname_escaped(c):
	for name in ('src,suid,dev', 'a\\b,c'):
		with ct.TempDirs() as td:
			src = os.path.join(td.root, name)
			os.mkdir(src)
			ct.write_file(os.path.join(src, 'f'), b'hello')
			if not mount_src(c, td, src, ['--cache-size=1M'], label=name):
				continue
			m = ct.mounts_at(td.mnt)[0]
			c.eq(f'{name}: mountinfo source is coordfs:SOURCE', m['source'],
			     'coordfs:' + os.path.realpath(src))
			opts = m['options'].split(',')
			c.check(f'{name}: nosuid and nodev still set',
				'nosuid' in opts and 'nodev' in opts and 'ro' in opts,
				m['options'])
			with open(os.path.join(td.mnt, 'f'), 'rb') as f:
				c.eq(f'{name}: file reads', f.read(), b'hello')


def test_non_utf8_source(c):
	fsstat = ct.fsstat_bin()
	c.check('fsstat binary available', fsstat is not None, 'FSSTAT_BIN unset')
	with ct.TempDirs() as td:
		raw = os.fsencode(td.root) + b'/src\xff-\xc3(-\xe2\x82\xac'
		os.mkdir(raw)
		ct.write_file(os.fsdecode(raw + b'/f'), b'x' * 100)
		if not mount_src(c, td, os.fsdecode(raw), ['--cache-size=1M'],
				 label='non-UTF-8 SOURCE'):
			return
		want = os.fsencode(os.path.realpath(td.root)).decode() + \
			'/src\ufffd-\ufffd(-\u20ac'
		data = os.getxattr(td.mnt, ct.STATS_XATTR)
		try:
			doc = json.loads(data.decode('utf-8', 'strict'))
			c.eq('xattr JSON: source_dir with U+FFFD per bad byte',
			     doc.get('source_dir'), want)
		except ValueError as e:
			c.check('xattr JSON is valid UTF-8 JSON', False, f'{e}: {data[:200]!r}')
		if fsstat is None:
			return
		p = subprocess.run([fsstat, '--json', td.mnt], capture_output=True,
				   timeout=30)
		c.eq('fsstat --json: exit status', (p.returncode, p.stderr), (0, b''))
		try:
			doc = json.loads(p.stdout.decode('utf-8', 'strict'))
			c.eq('fsstat --json: parses, same source_dir', doc.get('source_dir'), want)
		except ValueError as e:
			c.check('fsstat --json output is valid UTF-8 JSON', False,
				f'{e}: {p.stdout[:200]!r}')
		p = subprocess.run([fsstat, td.mnt], capture_output=True, timeout=30)
		c.check('fsstat (table): exit 0 and output',
			p.returncode == 0 and len(p.stdout) > 0,
			f'rc={p.returncode} stderr={p.stderr[:300]!r}')


def forged(text, marker):
	"""Lines of text that begin with the forged marker."""
	return [ln for ln in text.splitlines() if ln.startswith(marker)]


def test_newline_in_names(c):
	fifo_marker = 'coordfs: error: forged by a fifo'
	file_marker = 'coordfs: error: forged by a file'
	with ct.TempDirs() as td:
		os.mkfifo(os.path.join(td.src, 'pipe\n' + fifo_marker))
		evil = os.path.join(td.src, 'img\n' + file_marker)
		ct.write_file(evil, b'a' * 1000)
		log = os.path.join(td.root, 'coordfs.log')
		if not mount_src(c, td, td.src, ['--cache-size=0', f'--log-file={log}'],
				 label='names with newlines'):
			return
		err = td.mount_stderr
		c.eq('mount stderr: no forged line from the fifo name',
		     forged(err, fifo_marker), [])
		c.check('mount stderr: the fifo is logged with \\x0a',
			'pipe\\x0a' + fifo_marker in err, err[-500:])
		os.stat(os.path.join(td.mnt, 'img\n' + file_marker))  # first lookup
		ct.write_file(evil, b'b' * 2000)	# changed after its first lookup
		res = ct.read_in_child(os.path.join(td.mnt, 'img\n' + file_marker))
		c.eq('changed file: EIO', res[:2], ('errno', errno.EIO))
		with open(log, encoding='utf-8', errors='replace') as f:
			text = f.read()
		c.eq('log file: no forged line from the file name',
		     forged(text, file_marker), [])
		c.check('log file: the file is logged with \\x0a',
			'img\\x0a' + file_marker in text, text[-500:])


def make_deep_tree(src, levels=25, name='d' * 200):
	"""levels nested directories of name below src, a file at the bottom:
	over PATH_MAX (4096) in all. Built relative to directory fds."""
	fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
	try:
		for _ in range(levels):
			os.mkdir(name, dir_fd=fd)
			nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
			os.close(fd)
			fd = nfd
		ffd = os.open('deep.bin', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
		os.write(ffd, b'deep')
		os.close(ffd)
	finally:
		os.close(fd)


def test_long_paths_and_special_files(c):
	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'ok.bin'), b'ok' * 50)
		make_deep_tree(td.src)
		os.mkfifo(os.path.join(td.src, 'a.fifo'))
		sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
		sock.bind(os.path.join(td.src, 'a.sock'))
		sock.close()
		if not mount_src(c, td, td.src, ['--cache-size=1M'],
				 label='tree deeper than PATH_MAX'):
			return
		s = ct.stats(td.mnt)
		ns = s.get('namespace', {})
		c.eq('namespace.skipped_long_paths', ns.get('skipped_long_paths'), 1)
		c.eq('namespace.skipped_special (fifo + socket)', ns.get('skipped_special'), 2)
		c.eq('namespace.skipped is the sum', ns.get('skipped'), 3)
		c.eq('namespace.files', ns.get('files'), 1)
		c.eq('namespace.dirs: the levels that fit', ns.get('dirs'), (4096 - 1) // 201)
		with open(os.path.join(td.mnt, 'ok.bin'), 'rb') as f:
			c.eq('the rest reads', f.read(), b'ok' * 50)
		c.eq('fifo and socket not shown',
		     sorted(n for n in os.listdir(td.mnt) if n.startswith('a.')), [])
		err = td.mount_stderr
		c.check('the long path is logged on a line of its own',
			any('skipping' in ln and 'PATH_MAX' in ln and 'ddddd' in ln
			    for ln in err.splitlines()), err[-500:])
		c.check('the fifo is logged', 'a.fifo' in err, err[-500:])


# ---------------------------------------------------------------- descriptors

def limits_of(pid):
	with open(f'/proc/{pid}/limits') as f:
		for line in f:
			if line.startswith('Max open files'):
				parts = line.split()
				return int(parts[3]), int(parts[4])
	return None


def test_nofile_limit(c):
	_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
	if hard == resource.RLIM_INFINITY:
		hard = 1 << 20
	c.check('setup: hard open-file limit above 1024', hard > 1024, hard)
	resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
	nfiles = 400

	def low_soft():
		resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

	with ct.TempDirs() as td:
		for i in range(nfiles + 1):
			ct.write_file(os.path.join(td.src, f'f{i:04d}'), b'%d' % i)
		# --no-kernel-cache: every held open must hold a SOURCE descriptor
		# in the daemon (the default skips opens: FUSE no-open).
		if not mount_src(c, td, td.src, ['--cache-size=0', '--no-kernel-cache'],
				 preexec=low_soft, label='started with a soft limit of 256'):
			return
		pid = daemon_pid(td)
		c.eq('daemon raised its soft limit to the hard limit',
		     limits_of(pid) if pid else None, (hard, hard))
		held, failures = [], []
		try:
			for i in range(nfiles):
				try:
					held.append(os.open(os.path.join(td.mnt, f'f{i:04d}'),
							    os.O_RDONLY))
				except OSError as e:
					failures.append((i, errno.errorcode.get(e.errno)))
			c.eq(f'{nfiles} uncached files held open', failures, [])
			res = ct.read_in_child(os.path.join(td.mnt, f'f{nfiles:04d}'))
			c.eq('another process opens and reads meanwhile', res[0], 'ok')
		finally:
			for fd in held:
				os.close(fd)

	def low_hard():
		resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

	with ct.TempDirs() as td:
		for i in range(150):
			ct.write_file(os.path.join(td.src, f'f{i:04d}'), b'%d' % i)
		# --no-kernel-cache: each open must reach the daemon and hold a
		# SOURCE descriptor there (the default skips opens: FUSE no-open).
		if not mount_src(c, td, td.src, ['--cache-size=0', '--no-kernel-cache'],
				 preexec=low_hard, label='hard limit of 64'):
			return
		# Held opens hold a descriptor only up to half the daemon's
		# limit (32): past it an open checks its file and the handle's
		# reads open their own, so 150 held opens (one user's) neither
		# run the daemon out of descriptors nor fail anyone's open.
		held, failures = [], []
		try:
			for i in range(150):
				try:
					held.append(os.open(os.path.join(td.mnt, f'f{i:04d}'),
							    os.O_RDONLY))
				except OSError as e:
					failures.append((i, e.errno))
			c.eq('150 opens held under a hard limit of 64: none refused', failures, [])
			pid = daemon_pid(td)
			nfds = len(os.listdir(f'/proc/{pid}/fd')) if pid else None
			c.le('  the daemon holds fewer descriptors than its limit', nfds, 63)
			res = ct.read_in_child(os.path.join(td.mnt, 'f0149'))
			c.eq('  another process opens and reads meanwhile', res[0], 'ok')
			got = [os.pread(fd, 16, 0) for fd in held]
			c.eq('  every held file reads its own bytes', got,
			     [b'%d' % i for i in range(len(held))])
		finally:
			for fd in held:
				os.close(fd)


# ---------------------------------------------------------------- start-up

def check_failed_start(c, label, td, rc, err, want_in_line):
	lines = [ln for ln in err.decode('utf-8', 'replace').splitlines()
		 if ln.strip() and 'notice:' not in ln and 'warning:' not in ln]
	c.check(f'{label}: exits non-zero', rc not in (0, None), f'rc={rc}')
	wants = want_in_line if isinstance(want_in_line, tuple) else (want_in_line,)
	c.check(f'{label}: one line of reason', len(lines) == 1 and
		any(w in lines[0].lower() for w in wants), lines)
	c.check(f'{label}: nothing mounted', not ct.is_mounted(td.mnt),
		ct.mounts_at(td.mnt))
	c.eq(f'{label}: no daemon left', ct.find_daemon_pids(td.mnt), [])


def test_readiness(c):
	def huge_stack():
		# Every pthread_create after the fork fails: the mount exists,
		# but its worker threads cannot start.
		resource.setrlimit(resource.RLIMIT_STACK,
				   (1 << 46, resource.RLIM_INFINITY))

	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'f'), b'z')
		port = ct.free_port()
		rc, _, err = run(['--cache-size=1M', f'--peers={ct.peer_url(port)}',
				  '--node=0', td.src, td.mnt], preexec=huge_stack)
		# Whichever part starts its threads first fails: the peer server
		# (its connection threads) or the FUSE loop (its workers, before
		# INIT is answered); either way one line says what could not start.
		check_failed_start(c, 'threads cannot start', td, rc, err,
				   ('init', 'cannot start'))

	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'f'), b'z')
		bad = os.path.join(td.root, 'no-such-dir', 'coordfs.log')
		rc, _, err = run(['--cache-size=1M', f'--log-file={bad}', td.src, td.mnt])
		check_failed_start(c, '--log-file cannot be opened', td, rc, err, 'log-file')
		os.mkdir(os.path.join(td.root, 'logdir'))
		rc, _, err = run(['--cache-size=1M', '--log-file=' +
				  os.path.join(td.root, 'logdir'), td.src, td.mnt])
		check_failed_start(c, '--log-file is a directory', td, rc, err, 'log-file')


def as_nobody(*cmd):
	"""Run cmd as uid/gid 65534, as a hostile local user would."""
	def drop():
		os.setgroups([])
		os.setgid(65534)
		os.setuid(65534)
	subprocess.run(cmd, check=True, preexec_fn=drop)


def test_log_file_planted(c):
	"""--log-file names a path a hostile user prepared: the daemon (root
	here) must neither follow their links, append to a file through a hard
	link, block on their FIFO, nor log into their file; one line, nothing
	mounted. A new log is 0600."""
	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'f'), b'z')
		victim = os.path.join(td.root, 'victim')
		ct.write_file(victim, b'precious\n', mode=0o600)
		os.chmod(td.root, 0o755)
		theirs = os.path.join(td.root, 'theirs')	# a user's own directory
		sticky = os.path.join(td.root, 'sticky')	# a /tmp of its own
		mine = os.path.join(td.root, 'mine')
		os.mkdir(theirs)
		os.chown(theirs, 65534, 65534)
		os.mkdir(sticky)
		os.chmod(sticky, 0o1777)
		os.mkdir(mine)

		def refused(label, log, want, cwd=None):
			rc, _, err = run(['--cache-size=1M', f'--log-file={log}', td.src, td.mnt],
					 timeout=10, cwd=cwd)
			check_failed_start(c, label, td, rc, err, want)
			if ct.is_mounted(td.mnt):
				ct.force_unmount(td.mnt)

		as_nobody('ln', '-s', victim, os.path.join(theirs, 'c.log'))
		refused('a link in another user\'s directory', os.path.join(theirs, 'c.log'),
			'another user')
		# A relative path: the directories above the current one count too
		# (only the relative part was checked, and a new log was made in
		# their directory, where they may swap it for a link).
		refused('a relative path in another user\'s directory', 'new.log', 'another user',
			cwd=theirs)
		c.check('and no log made there', not os.path.exists(os.path.join(theirs, 'new.log')))
		log = os.path.join(sticky, 'c.log')
		as_nobody('ln', '-s', victim, log)
		refused('another user\'s link in a sticky directory', log, 'another user')
		os.unlink(log)
		as_nobody('mkfifo', '-m', '666', log)
		refused('another user\'s FIFO in a sticky directory', log, 'another user')
		os.unlink(log)
		as_nobody('touch', log)
		refused('another user\'s file in a sticky directory', log, 'another user')
		os.unlink(log)
		# The same things made by root itself pass the path check and are
		# caught at the open: a link, a FIFO (nobody reading: no hang), a
		# second name of another file.
		os.symlink(victim, os.path.join(mine, 'link.log'))
		refused('a symbolic link', os.path.join(mine, 'link.log'), 'symbolic link')
		os.mkfifo(os.path.join(mine, 'fifo.log'))
		refused('a FIFO', os.path.join(mine, 'fifo.log'), 'regular file')
		os.link(victim, os.path.join(mine, 'hard.log'))
		refused('a hard link', os.path.join(mine, 'hard.log'), 'hard link')
		with open(victim, 'rb') as f:
			c.eq('the file behind the links is untouched', f.read(), b'precious\n')

		log = os.path.join(mine, 'new.log')
		old = os.umask(0)
		try:
			mounted = mount_src(c, td, td.src, ['--cache-size=1M', f'--log-file={log}'],
					    label='a new log')
		finally:
			os.umask(old)
		if mounted:
			c.eq('a new log is 0600', oct(os.stat(log).st_mode & 0o777), oct(0o600))
			ct.force_unmount(td.mnt)


def test_mountpoint_planted(c):
	"""A root daemon mounts MOUNTPOINT by path with mount(2), after the
	scan: a user who owns a directory on the way (or the mount point in a
	sticky one) could swap it for a link to /etc/profile.d meanwhile.
	Such mount points are refused with one line; a user's mount point in
	root's own directory, which nobody else can swap, mounts."""
	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'f'), b'z')
		os.chmod(td.root, 0o755)
		theirs = os.path.join(td.root, 'theirs')
		sticky = os.path.join(td.root, 'sticky')
		os.mkdir(theirs)
		os.chown(theirs, 65534, 65534)
		os.mkdir(sticky)
		os.chmod(sticky, 0o1777)
		mine = os.path.join(td.root, 'mine')
		os.mkdir(mine)
		os.chown(mine, 65534, 65534)
		for label, mnt, want in (('in another user\'s directory',
					  os.path.join(theirs, 'mnt'), 'another user'),
					 ('another user\'s, in a sticky directory',
					  os.path.join(sticky, 'mnt'), 'swap'),
					 ('another user\'s, in root\'s directory', mine, None)):
			if not os.path.exists(mnt):
				as_nobody('mkdir', mnt)
			rc, _, err = run(['--cache-size=1M', td.src, mnt], timeout=10)
			lines = [ln for ln in err.decode('utf-8', 'replace').splitlines()
				 if ln.strip() and 'notice:' not in ln and 'warning:' not in ln]
			if want:
				c.check(f'mount point {label}: refused with one line',
					rc not in (0, None) and len(lines) == 1 and want in lines[0],
					f'rc={rc} {lines}')
				c.check(f'mount point {label}: nothing mounted', not ct.is_mounted(mnt))
			else:
				c.check(f'mount point {label}: mounts', rc == 0 and ct.is_mounted(mnt),
					f'rc={rc} {lines}')
			if ct.is_mounted(mnt):
				ct.force_unmount(mnt)


def test_source_file_swapped(c):
	"""A user who may write in SOURCE makes a file of theirs, 0644, with
	the size and mtime of a 0600 file of root's (anyone can stat those),
	has the mount freeze its attributes, then puts root's file in its
	place (a hard link, where fs.protected_hardlinks is off; a rename by
	root here). Read under the frozen 0644, root's bytes must not come
	out: the swap is a change of the file (EIO)."""
	with ct.TempDirs() as td:
		os.chmod(td.root, 0o755)
		os.chmod(td.src, 0o755)
		os.chmod(td.mnt, 0o755)
		mine = os.path.join(td.src, 'mine')
		secret = os.path.join(td.root, 'secret')
		ct.write_file(mine, b'm' * 4096, mode=0o644)
		os.chown(mine, 65534, 65534)
		ct.write_file(secret, b's' * 4096, mode=0o600)
		st = os.stat(mine)
		os.utime(secret, ns=(st.st_atime_ns, st.st_mtime_ns))
		if not mount_src(c, td, td.src, ['--cache-size=0', '--no-kernel-cache',
						 '-o', 'allow_other'], label='swap'):
			return
		try:
			path = os.path.join(td.mnt, 'mine')
			c.eq('the file shows as the user\'s, 0444 (write bits cleared)',
			     (os.stat(path).st_uid, oct(os.stat(path).st_mode & 0o777)),
			     (65534, oct(0o444)))
			os.rename(secret, mine)
			got = ct.read_in_child(path)
			c.eq('read after root\'s file took its place: EIO', got[:2],
			     ('errno', errno.EIO))
		finally:
			ct.force_unmount(td.mnt)


def test_twin_files_swapped(c):
	"""Two files of the same size, mtime, owner and mode (as tar and cp -p
	leave them) swapped by renames while a reader is half way through one:
	the rest of it must not come from the other file. The first unit is
	cached (a one-unit cache), the swap is then a change of the file: EIO,
	never a file made of both."""
	with ct.TempDirs() as td:
		a, b = os.path.join(td.src, 'a'), os.path.join(td.src, 'b')
		ct.write_file(a, b'A' * (8 << 20))
		ct.write_file(b, b'B' * (8 << 20))
		st = os.stat(a)
		os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
		if not mount_src(c, td, td.src, ['--cache-size=4M', '--chunk-size=4M',
						 '--no-kernel-cache'], label='twins'):
			return
		try:
			path = os.path.join(td.mnt, 'a')
			with open(path, 'rb') as f:
				c.eq('the first unit of a', f.read(4 << 20), b'A' * (4 << 20))
			tmp = os.path.join(td.src, 't')
			os.rename(a, tmp)
			os.rename(b, a)
			os.rename(tmp, b)
			got = ct.read_in_child(path)
			c.eq('a after the swap: EIO, not a file made of both', got[:2],
			     ('errno', errno.EIO))
		finally:
			ct.force_unmount(td.mnt)


def test_option_checks(c):
	with ct.TempDirs() as td:
		secret = os.path.join(td.root, 'secret')
		ct.write_file(secret, b'0123456789abcdef0123456789', mode=0o600)
		rc, _, err = run(['--cache-size=1M', f'--secret-file={secret}', td.src, td.mnt])
		check_failed_start(c, '--secret-file without --peers', td, rc, err, '--peers')
		phys = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
		rc, _, err = run([f'--cache-size={phys * 2}', td.src, td.mnt])
		check_failed_start(c, '--cache-size twice the memory', td, rc, err, 'memory')
		# coordfs(1): without --prep-mem, it is 1G plus what the decoded
		# tier takes beyond half of that: a 1.5G tier needs no --prep-mem
		# (it was refused as "more than --prep-mem '1G'", never given)
		if mount_src(c, td, td.src, ['--cache-size=1M', '--prepared',
					     '--prep-decoded-mem=1536M'], label='--prep-decoded-mem=1536M'):
			c.eq('--prep-decoded-mem=1536M: the tier\'s share',
			     ct.stats(td.mnt)['prep']['decoded_mem'], 1536 << 20)
			ct.force_unmount(td.mnt)
		# What a mount that comes up says on stderr. Options of the
		# prepared view without --prepared are taken (scripts pass one set
		# to every mount), checked, and said to do nothing.
		said = [(['--cache-size=0'], '--cache-size=0', 'warns that nothing is cached',
			 lambda e: 'warning' in e and 'nothing' in e),
			(['--cache-size=1M', '--prep-mem=2G', '--seed=7'], '--prep-mem without --prepared',
			 'one warning naming it',
			 lambda e: e.count('warning') == 1 and '--prep-mem' in e and '--prepared' in e),
			(['--cache-size=1M', '--prepared', '--prep-mem=2G'], '--prep-mem with --prepared',
			 'no warning', lambda e: 'warning' not in e)]
		for opts, label, what, ok in said:
			if mount_src(c, td, td.src, opts, label=label):
				c.check(f'{label}: {what}', ok(td.mount_stderr), td.mount_stderr)
				ct.force_unmount(td.mnt)


def test_fuse_mount_options(c):
	"""-o max_read=N mounts and serves (libfuse ends a session whose init()
	asks for another largest read than the mount option: the daemon died
	at INIT after its parent had exited 0); fsname= and subtype= do not
	rename the mount; blksize= (fuseblk only) and a bad max_read are
	refused before mounting."""
	with ct.TempDirs() as td:
		data = os.urandom(3 << 20)
		ct.write_file(os.path.join(td.src, 'f.bin'), data)
		if mount_src(c, td, td.src, ['--cache-size=8M', '-o', 'max_read=65536'],
			     label='-o max_read=65536'):
			fsopts = subprocess.run(['findmnt', '--kernel', '-n', '-o', 'FS-OPTIONS',
						 td.mnt], stdout=subprocess.PIPE).stdout.decode()
			c.check('max_read=65536 in the super block options',
				'max_read=65536' in fsopts.strip().split(','), fsopts)
			with open(os.path.join(td.mnt, 'f.bin'), 'rb') as f:
				c.eq('max_read=65536: bytes match', f.read(), data)
			fuse = ct.stats(td.mnt)['fuse']
			c.check('max_read=65536: no read past 64 KiB reached the daemon',
				0 < fuse['read_bytes'] <= fuse['reads'] * 65536, fuse)
			c.eq('the daemon still serves after INIT', len(ct.find_daemon_pids(td.mnt)), 1)
	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'f'), b'hello')
		if mount_src(c, td, td.src, ['--cache-size=1M', '-o', 'fsname=other,subtype=x'],
			     label='-o fsname=,subtype='):
			m = ct.mounts_at(td.mnt)[0]
			c.eq('fsname= ignored: still coordfs:SOURCE', m['source'],
			     'coordfs:' + os.path.realpath(td.src))
			c.eq('subtype= ignored: still fuse.coordfs', m['fstype'], 'fuse.coordfs')
	for opt, word in (('blksize=4096', 'blksize'), ('max_read=0x10', 'max_read'),
			  ('max_read=0', 'max_read')):
		with ct.TempDirs() as td:
			rc, _, err = run(['--cache-size=1M', '-o', opt, td.src, td.mnt])
			check_failed_start(c, f'-o {opt}', td, rc, err, word)
	# A mount(2) that fails (an SELinux context= the kernel does not
	# take): one line with libfuse's reason, not its line and then "see
	# the message above" (with "fuse: fuse:").
	with ct.TempDirs() as td:
		rc, _, err = run(['--cache-size=1M', '-o', 'context=system_u:object_r:coordfs_no_t:s0',
				  td.src, td.mnt])
		if rc == 0:
			print('# note: the kernel took context= (SELinux): not checked')
			ct.force_unmount(td.mnt)
		else:
			check_failed_start(c, '-o context= refused by mount(2)', td, rc, err,
					   'cannot mount at')
			c.check('... the line gives the reason', b'mount failed' in err, err)


def test_source_errors_rate_limited(c):
	with ct.TempDirs() as td:
		path = os.path.join(td.src, 'changing.bin')
		ct.write_file(path, b'1' * 500)
		log = os.path.join(td.root, 'coordfs.log')
		# --no-kernel-cache: one failed open per reader, counted once; by
		# default the check runs at each FUSE read, which the kernel may
		# retry within one read(2).
		if not mount_src(c, td, td.src,
				 ['--cache-size=0', '--no-kernel-cache', f'--log-file={log}'],
				 label='rate limit'):
			return
		os.stat(os.path.join(td.mnt, 'changing.bin'))  # its attributes: now
		ct.write_file(path, b'2' * 700)
		results = [ct.read_in_child(os.path.join(td.mnt, 'changing.bin'))[:2]
			   for _ in range(20)]
		c.eq('20 reads of a changed file: EIO each time', set(results),
		     {('errno', errno.EIO)})
		c.eq('source.errors counts all 20', ct.stats(td.mnt)['source']['errors'], 20)
		with open(log, encoding='utf-8', errors='replace') as f:
			naming = [ln for ln in f if 'changing.bin' in ln]
		c.eq('the log names the file once', len(naming), 1)


def main():
	c = ct.Checker('test_hardening', timeout=240)
	c.group(test_fsname_escaped, c)
	c.group(test_non_utf8_source, c)
	c.group(test_newline_in_names, c)
	c.group(test_long_paths_and_special_files, c)
	c.group(test_nofile_limit, c)
	c.group(test_readiness, c)
	c.group(test_log_file_planted, c)
	c.group(test_mountpoint_planted, c)
	c.group(test_source_file_swapped, c)
	c.group(test_twin_files_swapped, c)
	c.group(test_option_checks, c)
	c.group(test_fuse_mount_options, c)
	c.group(test_source_errors_rate_limited, c)
	c.finish()


if __name__ == '__main__':
	sys.exit(main())
