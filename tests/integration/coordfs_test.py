# SPDX-License-Identifier: MIT
"""Shared helpers for the coordfs integration tests.

Every test script imports this module. It provides:
  - Checker: prints one line per check ("ok   ..." / "FAIL ..."), catches
    exceptions of a test group as failures, prints "N passed, M failed"
    and exits non-zero on any failure; a watchdog tears down every mount
    and exits if the script runs past its deadline (so a hung FUSE request
    never leaves a mount behind).
  - Mount: a context manager making a fresh temp SOURCE and MOUNTPOINT,
    running `coordfs [opts] SOURCE MOUNTPOINT` (daemonizing mode) and
    always cleaning up: fusermount3 -u, kill the daemon found via the
    mount, remove the temp dirs.
  - stats(), mount table helpers, file helpers, free_port().

The binary is taken from $COORDFS_BIN (set by meson). Exit code 77 (skip)
is used only when /dev/fuse does not exist.
"""

import contextlib
import errno
import hashlib
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

STATS_XATTR = 'user.coordfs.stats'
CACHED_XATTR = 'user.coordfs.cached'

# Mountpoints currently owned by this process, for the watchdog.
_active_mounts = set()
_active_lock = threading.Lock()
# Readers left in uninterruptible FUSE waits; reaped after unmounts.
_stuck_children = []


# ---------------------------------------------------------------- setup

def require_fuse():
	"""Exit 77 (meson: skipped) only when /dev/fuse is truly missing."""
	if not os.path.exists('/dev/fuse'):
		print('SKIP: /dev/fuse does not exist, cannot mount FUSE')
		sys.exit(77)


def coordfs_bin():
	"""Path of the daemon: $COORDFS_BIN, else <repo>/build/fs/coordfs."""
	path = os.environ.get('COORDFS_BIN')
	if not path:
		path = os.path.join(REPO, 'build', 'fs', 'coordfs')
		print(f'note: COORDFS_BIN not set, using {path}')
	if not os.access(path, os.X_OK):
		print(f'FAIL setup: coordfs binary not executable: {path}')
		print('0 passed, 1 failed')
		sys.exit(1)
	return os.path.abspath(path)


def fsstat_bin():
	"""Path of fsstat from $FSSTAT_BIN, or None."""
	path = os.environ.get('FSSTAT_BIN')
	if path and os.access(path, os.X_OK):
		return os.path.abspath(path)
	return None


def free_port():
	"""A TCP port on 127.0.0.1 that was free a moment ago."""
	with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
		s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
		s.bind(('127.0.0.1', 0))
		return s.getsockname()[1]


# ---------------------------------------------------------------- checks

def _short(value, limit=300):
	text = repr(value)
	if len(text) > limit:
		text = text[:limit] + f'... ({len(text)} chars)'
	return text


class Checker:
	"""One line per check; summary and exit status at the end.

	timeout: seconds after which the watchdog unmounts everything this
	process mounted and exits 1 (keep it below the meson timeout)."""

	def __init__(self, name, timeout=100):
		self.name = name
		self.passed = 0
		self.failed = []
		self.start = time.monotonic()
		require_fuse()
		if shutil.which('fusermount3') is None:
			print('FAIL setup: fusermount3 not found on PATH')
			print('0 passed, 1 failed')
			sys.exit(1)
		self.bin = coordfs_bin()
		print(f'# {name}: coordfs = {self.bin}')
		sys.stdout.flush()
		signal.signal(signal.SIGTERM, self._on_sigterm)
		watchdog = threading.Thread(target=self._watchdog,
					    args=(timeout,), daemon=True)
		watchdog.start()

	def _on_sigterm(self, signum, frame):
		raise SystemExit('SIGTERM received')

	def _watchdog(self, timeout):
		time.sleep(timeout)
		print(f'FAIL watchdog: {self.name} still running after '
		      f'{timeout}s, tearing down mounts', flush=True)
		with _active_lock:
			mounts = list(_active_mounts)
		for mnt in mounts:
			force_unmount(mnt)
		print(f'{self.passed} passed, {len(self.failed) + 1} failed',
		      flush=True)
		os._exit(1)

	def check(self, label, cond, detail=''):
		if cond:
			self.passed += 1
			print(f'ok   {label}')
		else:
			self.failed.append(label)
			print(f'FAIL {label}' + (f': {detail}' if detail else ''))
		sys.stdout.flush()
		return bool(cond)

	def eq(self, label, got, want):
		return self.check(label, got == want,
				  f'got {_short(got)}, want {_short(want)}')

	def le(self, label, got, bound):
		return self.check(label, got <= bound,
				  f'got {_short(got)}, want <= {_short(bound)}')

	def gt(self, label, got, bound):
		return self.check(label, got > bound,
				  f'got {_short(got)}, want > {_short(bound)}')

	def ge(self, label, got, bound):
		return self.check(label, got >= bound,
				  f'got {_short(got)}, want >= {_short(bound)}')

	def errno_of(self, label, fn, want_errno):
		"""fn() must raise OSError with errno want_errno."""
		try:
			fn()
		except OSError as e:
			return self.check(label, e.errno == want_errno,
					  f'got {errno.errorcode.get(e.errno, e.errno)}'
					  f' ({e}), want '
					  f'{errno.errorcode[want_errno]}')
		return self.check(label, False,
				  f'succeeded, want '
				  f'{errno.errorcode[want_errno]}')

	def group(self, fn, *args, **kwargs):
		"""Run one test group; an exception counts as one failure."""
		name = getattr(fn, '__name__', str(fn))
		print(f'# {name}')
		sys.stdout.flush()
		try:
			fn(*args, **kwargs)
		except Exception as e:	# noqa: BLE001 - reported as failure
			traceback.print_exc(file=sys.stdout)
			self.check(f'{name} ran to the end', False,
				   f'{type(e).__name__}: {e}')

	def finish(self):
		took = time.monotonic() - self.start
		print(f'# {self.name} took {took:.1f}s')
		if self.failed:
			shown = self.failed[:15]
			more = len(self.failed) - len(shown)
			print('failed: ' + '; '.join(shown) +
			      (f'; and {more} more' if more else ''))
		if not self.passed and not self.failed:
			# a test that checked nothing has not passed
			self.failed.append('no check ran')
			print('FAIL no check ran')
		print(f'{self.passed} passed, {len(self.failed)} failed')
		sys.stdout.flush()
		sys.exit(1 if self.failed else 0)


# ---------------------------------------------------------------- mounts

def mounts():
	"""List of dicts (mountpoint, fstype, source, options, dev), from the
	kernel's mount table as util-linux's findmnt (libmount) reads it."""
	out = subprocess.run(
		['findmnt', '--kernel', '--json', '--list',
		 '-o', 'TARGET,FSTYPE,SOURCE,VFS-OPTIONS,MAJ:MIN'],
		check=True, stdout=subprocess.PIPE).stdout
	result = []
	for fs in json.loads(out.decode('utf-8', 'surrogateescape'))['filesystems']:
		result.append({
			'dev': fs.get('maj:min') or '',
			'mountpoint': fs.get('target') or '',
			'options': fs.get('vfs-options') or '',
			'fstype': fs.get('fstype') or '',
			'source': fs.get('source') or '',
		})
	return result


def mounts_at(path):
	path = os.path.realpath(path)
	return [m for m in mounts() if m['mountpoint'] == path]


def is_mounted(path):
	return bool(mounts_at(path))


def fuse_mounts_under(prefix):
	"""Every FUSE mount whose mountpoint starts with prefix."""
	prefix = os.path.realpath(prefix)
	return [m for m in mounts()
		if m['mountpoint'].startswith(prefix)
		and m['fstype'].startswith('fuse')]


def _proc_state(pid):
	try:
		with open(f'/proc/{pid}/stat') as f:
			data = f.read()
		return data[data.rindex(')') + 2]
	except (OSError, ValueError):
		return None


def pid_alive(pid):
	"""True while pid exists and is not a zombie."""
	state = _proc_state(pid)
	return state is not None and state not in ('Z', 'X')


def find_daemon_pids(mnt):
	"""Pids of live coordfs processes whose command line names mnt."""
	mnt_real = os.path.realpath(mnt)
	names = {mnt, mnt_real, mnt.rstrip('/'), mnt_real.rstrip('/')}
	found = []
	for entry in os.listdir('/proc'):
		if not entry.isdigit() or int(entry) == os.getpid():
			continue
		try:
			with open(f'/proc/{entry}/cmdline', 'rb') as f:
				argv = f.read().split(b'\0')
		except OSError:
			continue
		args = [a.decode('utf-8', 'surrogateescape') for a in argv if a]
		if not args:
			continue
		if os.path.basename(args[0]) != 'coordfs':
			try:
				exe = os.readlink(f'/proc/{entry}/exe')
			except OSError:
				continue
			if os.path.basename(exe) != 'coordfs':
				continue
		if any(a in names for a in args[1:]) and pid_alive(int(entry)):
			found.append(int(entry))
	return found


def wait_until(pred, timeout, step=0.05):
	deadline = time.monotonic() + timeout
	while True:
		if pred():
			return True
		if time.monotonic() >= deadline:
			return False
		time.sleep(step)


def kill_and_wait(pid, timeout=5.0):
	"""Wait for pid to exit; SIGTERM, then SIGKILL if it lingers."""
	if wait_until(lambda: not pid_alive(pid), timeout):
		return True
	for sig in (signal.SIGTERM, signal.SIGKILL):
		try:
			os.kill(pid, sig)
		except ProcessLookupError:
			return True
		if wait_until(lambda: not pid_alive(pid), 3.0):
			return True
	return False


def force_unmount(mnt, pids=None):
	"""Unmount mnt and make sure its daemon is gone. Never raises."""
	try:
		if pids is None:
			pids = find_daemon_pids(mnt)
		if is_mounted(mnt):
			subprocess.run(['fusermount3', '-u', mnt],
				       stdout=subprocess.DEVNULL,
				       stderr=subprocess.DEVNULL, timeout=10)
		if is_mounted(mnt):
			for pid in pids:
				with contextlib.suppress(OSError):
					os.kill(pid, signal.SIGKILL)
			subprocess.run(['fusermount3', '-uz', mnt],
				       stdout=subprocess.DEVNULL,
				       stderr=subprocess.DEVNULL, timeout=10)
		if is_mounted(mnt):
			subprocess.run(['umount', '-l', mnt],
				       stdout=subprocess.DEVNULL,
				       stderr=subprocess.DEVNULL, timeout=10)
		for pid in pids:
			kill_and_wait(pid, 5.0)
	except Exception as e:	# noqa: BLE001 - cleanup must not raise
		print(f'# warning: cleanup of {mnt} failed: {e}')
	with _active_lock:
		_active_mounts.discard(mnt)


class MountFailed(Exception):
	def __init__(self, cmd, rc, stderr):
		super().__init__(f'{" ".join(cmd)} exited {rc}: {stderr.strip()}')
		self.rc = rc
		self.stderr = stderr


def run_coordfs(args, cwd=None, timeout=30, env=None, binary=None):
	"""Run coordfs with args; returns (rc, stdout, stderr).

	Output goes through temp files, not pipes, so a daemon that keeps
	its stdio open cannot hang us. rc is None on timeout."""
	binary = binary or coordfs_bin()
	cmd = [binary] + list(args)
	with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
		try:
			proc = subprocess.run(cmd, stdin=subprocess.DEVNULL,
					      stdout=out, stderr=err, cwd=cwd,
					      timeout=timeout, env=env)
			rc = proc.returncode
		except subprocess.TimeoutExpired:
			rc = None
		out.seek(0)
		err.seek(0)
		return (rc, out.read().decode('utf-8', 'replace'),
			err.read().decode('utf-8', 'replace'))


class TempDirs:
	"""A fresh temp root with SOURCE (root/src) and MOUNTPOINT (root/mnt).

	On exit, anything mounted on the mountpoint is unmounted and its
	daemon killed before the tree is removed."""

	def __init__(self, prefix='coordfs-it-'):
		self.root = tempfile.mkdtemp(prefix=prefix)
		self.src = os.path.join(self.root, 'src')
		self.mnt = os.path.join(self.root, 'mnt')
		os.mkdir(self.src)
		os.mkdir(self.mnt)
		with _active_lock:
			_active_mounts.add(self.mnt)

	def __enter__(self):
		return self

	def __exit__(self, *exc):
		self.cleanup()
		return False

	def cleanup(self):
		for m in fuse_mounts_under(self.root):
			force_unmount(m['mountpoint'])
		for pid in find_daemon_pids(self.mnt):
			kill_and_wait(pid, 3.0)
		if fuse_mounts_under(self.root):
			print(f'# warning: {self.root} still has a mount, '
			      'leaving it in place')
			return
		with _active_lock:
			_active_mounts.discard(self.mnt)
		for proc in list(_stuck_children):
			with contextlib.suppress(subprocess.TimeoutExpired):
				proc.wait(timeout=2)
				_stuck_children.remove(proc)
		_rmtree(self.root)


def _rmtree(path):
	def onerror(func, p, exc):
		# make read-only dirs writable and retry once
		with contextlib.suppress(OSError):
			os.chmod(os.path.dirname(p), 0o755)
			os.chmod(p, 0o755)
			func(p)
	shutil.rmtree(path, onerror=onerror)


class Mount(TempDirs):
	"""Context manager: temp SOURCE + MOUNTPOINT, coordfs mounted on it.

	populate(src) fills SOURCE before mounting. opts go before SOURCE
	and MOUNTPOINT; extra_args go after them (e.g. ['-o', '...']).
	Raises MountFailed (after cleaning up) if the mount does not come up.
	"""

	def __init__(self, opts=(), populate=None, extra_args=(), timeout=30):
		super().__init__()
		self.opts = list(opts)
		self.extra_args = list(extra_args)
		self.pids = []
		try:
			if populate is not None:
				populate(self.src)
			self.mount(timeout)
		except BaseException:
			self.cleanup()
			raise

	def mount(self, timeout=30):
		args = self.opts + [self.src, self.mnt] + self.extra_args
		rc, out, err = run_coordfs(args, timeout=timeout)
		self.mount_stderr = err
		if rc != 0:
			raise MountFailed(['coordfs'] + args, rc, err)
		if not is_mounted(self.mnt):
			raise MountFailed(['coordfs'] + args, rc,
					  'command returned 0 but nothing is '
					  'mounted on ' + self.mnt)
		self.pids = find_daemon_pids(self.mnt)

	def __enter__(self):
		return self

	def cleanup(self):
		if os.path.isdir(self.root):
			force_unmount(self.mnt, self.pids or None)
		super().cleanup()

	def stats(self):
		return stats(self.mnt)


def stats(mnt):
	"""The JSON statistics object of the mount (coordfs(1), STATISTICS)."""
	return json.loads(os.getxattr(mnt, STATS_XATTR).decode('utf-8'))


def epoch(c, label, mnt, files):
	"""Read every file of {relpath: bytes} under mnt; one check that all
	match. Returns the SOURCE bytes the pass read (source.bytes)."""
	before = stats(mnt)['source']['bytes']
	bad = []
	for rel, want in files.items():
		try:
			got = read_bytes(os.path.join(mnt, rel))
		except OSError as e:
			bad.append(f'{rel}: {e}')
			continue
		if got != want:
			bad.append(f'{rel}: wrong bytes')
	c.eq(f'{label}: every file reads its bytes', bad, [])
	return stats(mnt)['source']['bytes'] - before


def disk_stats(mnt):
	"""The disk tier's counters (cache.disk)."""
	return stats(mnt)['cache']['disk']


def disk_settle(c, label, mnt):
	"""Wait for the tier's writer to empty its queue."""
	c.check(f'{label}: the writer catches up',
		wait_until(lambda: disk_stats(mnt)['queued'] == 0, 20))


def cached(path):
	"""Value of the file's user.coordfs.cached xattr (bytes)."""
	return os.getxattr(path, CACHED_XATTR)


# ---------------------------------------------------------------- files

def sha256_file(path, bufsize=1 << 20):
	h = hashlib.sha256()
	with open(path, 'rb', buffering=0) as f:
		while True:
			block = f.read(bufsize)
			if not block:
				break
			h.update(block)
	return h.hexdigest()


def drop_page_cache(path):
	"""Drop the kernel's cached pages of one file, so that the next
	read reaches the FUSE daemon (we test its cache, not the kernel's)."""
	fd = os.open(path, os.O_RDONLY)
	try:
		os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
	finally:
		os.close(fd)


def write_file(path, data, mode=None, mtime_ns=None):
	os.makedirs(os.path.dirname(path), exist_ok=True)
	with open(path, 'wb') as f:
		f.write(data)
	if mode is not None:
		os.chmod(path, mode)
	if mtime_ns is not None:
		os.utime(path, ns=(mtime_ns, mtime_ns))


def random_bytes(rng, n):
	return rng.randbytes(n) if n else b''


def tree_entries(root):
	"""{relpath: (kind, lstat)} of everything under root (not root)."""
	result = {}
	for dirpath, dirnames, filenames in os.walk(root):
		for name in dirnames + filenames:
			full = os.path.join(dirpath, name)
			rel = os.path.relpath(full, root)
			st = os.lstat(full)
			if os.path.islink(full):
				kind = 'link'
			elif os.path.isdir(full):
				kind = 'dir'
			elif os.path.isfile(full):
				kind = 'file'
			else:
				kind = 'other'
			result[rel] = (kind, st)
	return result


def walk_listing(root):
	"""os.walk of root as a sorted list of (reldir, dirs, files)."""
	out = []
	for dirpath, dirnames, filenames in os.walk(root):
		out.append((os.path.relpath(dirpath, root),
			    sorted(dirnames), sorted(filenames)))
	return sorted(out)


def read_in_child(path, timeout=10):
	"""Read a whole file in a child process (a hung FUSE request must
	not hang the test). Returns ('ok', sha256hex, size),
	('errno', errno_value, msg) or ('timeout', None, None)."""
	code = (
		'import hashlib, sys\n'
		'h = hashlib.sha256(); n = 0\n'
		'try:\n'
		'    with open(sys.argv[1], "rb", buffering=0) as f:\n'
		'        while True:\n'
		'            b = f.read(1 << 20)\n'
		'            if not b: break\n'
		'            h.update(b); n += len(b)\n'
		'except OSError as e:\n'
		'    print("errno", e.errno, e.strerror); sys.exit(0)\n'
		'print("ok", h.hexdigest(), n)\n'
	)
	with tempfile.TemporaryFile(mode='w+') as out:
		proc = subprocess.Popen([sys.executable, '-c', code, path],
					stdin=subprocess.DEVNULL, stdout=out,
					stderr=subprocess.STDOUT, text=True)
		try:
			proc.wait(timeout=timeout)
		except subprocess.TimeoutExpired:
			# A reader whose request the daemon is still handling
			# cannot be killed until the daemon answers or the
			# mount is torn down: do not wait for it here.
			proc.kill()
			with contextlib.suppress(subprocess.TimeoutExpired):
				proc.wait(timeout=1)
			if proc.returncode is None:
				_stuck_children.append(proc)
			return ('timeout', None, None)
		out.seek(0)
		stdout = out.read()
	parts = stdout.strip().split(' ', 2)
	if len(parts) == 3 and parts[0] == 'ok':
		return ('ok', parts[1], int(parts[2]))
	if len(parts) >= 2 and parts[0] == 'errno':
		return ('errno', int(parts[1]),
			parts[2] if len(parts) > 2 else '')
	return ('error', proc.returncode, stdout)


# ---------------------------------------------------------------- prepared view

GENDATA = os.path.join(REPO, 'tools', 'gendata.py')


def gendata(root, classes, per_class, seed, size=None, timeout=120):
	"""Generate a photo-like JPEG tree ROOT/train/<class>/... with
	tools/gendata.py (run by the interpreter running this test)."""
	cmd = [sys.executable, GENDATA, root, '--classes', str(classes),
	       '--per-class', str(per_class), '--seed', str(seed)]
	if size:
		cmd += ['--size', size]
	proc = subprocess.run(cmd, capture_output=True, text=True,
			      timeout=timeout)
	if proc.returncode != 0:
		raise RuntimeError(f'{" ".join(cmd)} exited {proc.returncode}: '
				   f'{proc.stderr.strip()}')
	return proc.stdout.strip()


def copy_tree_into(template):
	"""A populate function for Mount: copy template's contents into src."""
	def populate(src):
		shutil.copytree(template, src, dirs_exist_ok=True, symlinks=True)
	return populate


def read_bytes(path):
	with open(path, 'rb', buffering=0) as f:
		chunks = []
		while True:
			block = f.read(1 << 20)
			if not block:
				break
			chunks.append(block)
	return b''.join(chunks)


def parse_ppm_header(data):
	"""(magic, width, height, maxval, header_length) of a binary PNM.

	Raises ValueError on anything that is not a complete header."""
	fields = []
	i = 0
	while len(fields) < 4:
		while i < len(data) and data[i:i + 1] in b' \t\r\n':
			i += 1
		if data[i:i + 1] == b'#':
			while i < len(data) and data[i:i + 1] != b'\n':
				i += 1
			continue
		j = i
		while j < len(data) and data[j:j + 1] not in b' \t\r\n#':
			j += 1
		if j == i or j >= len(data):
			raise ValueError(f'short PNM header: {data[:32]!r}')
		fields.append(data[i:j])
		i = j
	if not data[i:i + 1].isspace():
		raise ValueError(f'bad PNM header end: {data[:32]!r}')
	try:
		w, h, maxval = int(fields[1]), int(fields[2]), int(fields[3])
	except ValueError:
		raise ValueError(f'bad PNM header: {data[:32]!r}') from None
	return fields[0].decode('latin-1'), w, h, maxval, i + 1


def read_ppm(data):
	"""A binary 8-bit PPM as a (height, width, 3) uint8 numpy array;
	ValueError if it is anything else or has the wrong length."""
	import numpy as np
	magic, w, h, maxval, off = parse_ppm_header(data)
	if magic != 'P6' or maxval != 255:
		raise ValueError(f'not an 8-bit P6: {magic} maxval {maxval}')
	if len(data) - off != w * h * 3:
		raise ValueError(f'P6 {w}x{h}: {len(data) - off} pixel bytes, '
				 f'want {w * h * 3}')
	return np.frombuffer(data, dtype=np.uint8, offset=off).reshape(h, w, 3)


def ppm_size(w, h):
	"""Bytes of the PPM coordfs serves for a w x h sample."""
	return len(f'P6\n{w} {h}\n255\n') + 3 * w * h


def psnr(a, b):
	"""PSNR in dB of two uint8 arrays; -1 if their shapes differ."""
	import numpy as np
	if a.shape != b.shape:
		return -1.0
	mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
	if mse == 0:
		return float('inf')
	return 10 * np.log10(255.0 ** 2 / mse)


__all__ = [
	'Checker', 'Mount', 'MountFailed', 'TempDirs', 'stats', 'cached',
	'mounts', 'mounts_at', 'is_mounted', 'fuse_mounts_under',
	'find_daemon_pids', 'pid_alive', 'kill_and_wait', 'force_unmount',
	'run_coordfs', 'free_port', 'sha256_file', 'drop_page_cache',
	'write_file', 'random_bytes', 'tree_entries', 'walk_listing',
	'read_in_child', 'wait_until', 'coordfs_bin', 'fsstat_bin',
	'require_fuse', 'random', 'STATS_XATTR', 'CACHED_XATTR',
	'gendata', 'copy_tree_into', 'read_bytes', 'parse_ppm_header',
	'read_ppm', 'ppm_size', 'psnr', 'GENDATA',
]


# ---------------------------------------------------------------- peers
# Helpers for the multi-node tests (test_peers*.py): several daemons over
# one SOURCE on loopback, a Python copy of the rendezvous ownership of
# remote/peer/peers.c, raw HTTP requests, the fake misbehaving peer.

_M64 = (1 << 64) - 1
PEER_URL_SEED = 0x636f6f7264667331	# "coordfs1", remote/peer/peers.c
UNIT_PATH_SEED = 0x7061746863686b31	# "pathchk1", remote/peer/peers.c
CACHE_ALIGN = 64			# cache/cache.c arena alignment


def hash_mix64(x):
	"""common/hash.h hash_mix64 (splitmix64 finalizer)."""
	x = (x + 0x9e3779b97f4a7c15) & _M64
	x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & _M64
	x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & _M64
	return x ^ (x >> 31)


def hash_bytes(data, seed):
	"""common/hash.c hash_bytes (FNV-1a folded through hash_mix64)."""
	h = 0xcbf29ce484222325 ^ hash_mix64(seed)
	for b in data:
		h ^= b
		h = (h * 0x100000001b3) & _M64
	return hash_mix64(h ^ len(data))


def unit_owner(urls, relpath, chunk=0):
	"""Owner node of (relpath, chunk) over the normalized peer URLs, as
	remote_owner(remote_unit_key()) computes it (coordfs(1), PEERS: rendezvous
	hashing; the hash is documented as stable across builds)."""
	raw = relpath.encode('utf-8', 'surrogateescape')
	key = hash_mix64(hash_bytes(raw, UNIT_PATH_SEED) ^
			 hash_mix64(chunk ^ 0x6368756e6b))
	best, best_w = 0, -1
	for k, url in enumerate(urls):
		w = hash_mix64(key ^ hash_bytes(url.encode(), PEER_URL_SEED))
		if w > best_w:
			best, best_w = k, w
	return best


def file_units(size, chunk_size):
	"""[(chunk index, unit length)] of a file of size bytes."""
	if size == 0:
		return []
	n = (size + chunk_size - 1) // chunk_size
	return [(k, min(chunk_size, size - k * chunk_size)) for k in range(n)]


def ownership(urls, sizes, chunk_size):
	"""Per node: {'units': n, 'bytes': b, 'arena': b rounded as the cache
	allocates} of the units it owns, for {relpath: size}."""
	own = [{'units': 0, 'bytes': 0, 'arena': 0} for _ in urls]
	for rel, size in sizes.items():
		for k, ln in file_units(size, chunk_size):
			o = own[unit_owner(urls, rel, k)]
			o['units'] += 1
			o['bytes'] += ln
			o['arena'] += (ln + CACHE_ALIGN - 1) // CACHE_ALIGN * \
				CACHE_ALIGN
	return own


def free_ports(n):
	"""n distinct TCP ports on 127.0.0.1 that were free a moment ago."""
	ports = []
	while len(ports) < n:
		p = free_port()
		if p not in ports:
			ports.append(p)
	return ports


def peer_url(port):
	return f'http://127.0.0.1:{port}'


class Cluster(TempDirs):
	"""n coordfs nodes over one SOURCE (root/src), node k mounted on
	root/mnt{k} and serving peers on 127.0.0.1:ports[k].

	populate(src) fills SOURCE. Nothing is mounted until mount(k).
	A slot may be left without a daemon (a dead peer) or given to a
	fake peer: pass its port in ports. stop(k)/cont(k) send
	SIGSTOP/SIGCONT; a stopped daemon is continued automatically after
	max_stop seconds and before any cleanup, so no unmount waits on it.
	"""

	def __init__(self, n, populate=None, ports=None, max_stop=60):
		super().__init__(prefix='coordfs-peers-')
		with _active_lock:
			_active_mounts.discard(self.mnt)
		os.rmdir(self.mnt)
		self.n = n
		self.ports = list(ports) if ports else free_ports(n)
		self.urls = [peer_url(p) for p in self.ports]
		self.mnts = [os.path.join(self.root, f'mnt{k}') for k in range(n)]
		self.pids = [None] * n
		self.mount_stderr = [''] * n
		self.stopped = set()
		self.max_stop = max_stop
		self.mnt = self.mnts[0]
		for m in self.mnts:
			os.mkdir(m)
		with _active_lock:
			_active_mounts.update(self.mnts)
		try:
			if populate is not None:
				populate(self.src)
		except BaseException:
			self.cleanup()
			raise

	def peers_arg(self):
		return '--peers=' + ','.join(self.urls)

	def mount(self, k, opts=(), timeout=30, peers=None, src=None, with_node=True,
		  prefix=(), env=None):
		"""Mount node k with --peers/--node and opts; MountFailed if
		it does not come up. Returns the daemon's stderr. peers: the
		--peers value to pass instead of self.urls (other spellings
		of the same addresses, or a membership source such as
		file:PATH, then with with_node=False). src: another SOURCE for
		this node (e.g. a copy that differs), inside self.root.
		prefix: a command to run coordfs under (e.g. nsenter)."""
		peers_arg = self.peers_arg() if peers is None else \
			'--peers=' + peers
		args = [peers_arg] + [f'--node={k}'] * with_node + list(opts) + \
			[src or self.src, self.mnts[k]]
		if prefix:
			rc, out, err = run_coordfs(list(prefix[1:]) + [coordfs_bin()] + args,
						   timeout=timeout, env=env, binary=prefix[0])
		else:
			rc, out, err = run_coordfs(args, timeout=timeout, env=env)
		self.mount_stderr[k] = err
		if rc != 0:
			raise MountFailed(['coordfs'] + args, rc, err)
		if not is_mounted(self.mnts[k]):
			raise MountFailed(['coordfs'] + args, rc,
					  'command returned 0 but nothing is '
					  'mounted on ' + self.mnts[k])
		pids = find_daemon_pids(self.mnts[k])
		self.pids[k] = pids[0] if len(pids) == 1 else None
		return err

	def stats(self, k):
		return stats(self.mnts[k])

	def path(self, k, rel):
		return os.path.join(self.mnts[k], rel)

	def signal(self, k, sig):
		os.kill(self.pids[k], sig)

	def kill9(self, k):
		"""SIGKILL node k's daemon and wait until it is gone (its
		mount stays, broken, until cleanup)."""
		pid = self.pids[k]
		os.kill(pid, signal.SIGKILL)
		wait_until(lambda: not pid_alive(pid), 5.0)
		self.stopped.discard(k)

	def stop(self, k):
		pid = self.pids[k]
		os.kill(pid, signal.SIGSTOP)
		self.stopped.add(k)
		t = threading.Timer(self.max_stop, self._auto_cont, args=(k, pid))
		t.daemon = True
		t.start()

	def _auto_cont(self, k, pid):
		if k in self.stopped and self.pids[k] == pid:
			print(f'# note: node {k} stopped longer than '
			      f'{self.max_stop}s, continuing it', flush=True)
			self.cont(k)

	def cont(self, k):
		with contextlib.suppress(OSError):
			os.kill(self.pids[k], signal.SIGCONT)
		self.stopped.discard(k)

	def cleanup(self):
		for k in list(self.stopped):
			self.cont(k)
		for k, m in enumerate(self.mnts):
			if os.path.isdir(self.root):
				force_unmount(m, [self.pids[k]] if self.pids[k]
					      else None)
		for m in self.mnts:
			for pid in find_daemon_pids(m):
				kill_and_wait(pid, 3.0)
		if os.path.isdir(self.root):
			super().cleanup()
		with _active_lock:
			_active_mounts.difference_update(self.mnts)


_SIGN_ID = int.from_bytes(os.urandom(8), 'little')
_SIGN_COUNTER = iter(range(1, 1 << 62))


def peer_signature(secret, method, target, range_value=None, t=None, client_id=None, n=None):
	"""The Authorization value of a signed peer request (coordfs(1),
	SECURITY): HMAC-SHA256 over method, target, Range, time, client id and
	counter, written here from the man page, independently of the C signer."""
	import hmac
	t = int(time.time()) if t is None else t
	client_id = _SIGN_ID if client_id is None else client_id
	n = next(_SIGN_COUNTER) if n is None else n
	msg = (f'coordfs-peer-v1\n{method}\n{target}\n{range_value or ""}\n{t}\n'
	       f'{client_id:016x}\n{n}')
	sig = hmac.new(secret.encode(), msg.encode(), hashlib.sha256).hexdigest()
	return f'Coordfs-HMAC-SHA256 t={t},id={client_id:016x},n={n},sig={sig}'


def signed(secret):
	"""headers for http_request: sign the request with secret."""
	return {'_sign': secret}


def http_request(port, path, headers=None, method='GET', timeout=10,
		 conn=None):
	"""One raw HTTP/1.1 request to 127.0.0.1:port; path is sent exactly
	as given (not normalized, not re-encoded). Returns (status,
	{lower-case header: value}, body). conn: an http.client connection
	to reuse (keep-alive). headers with '_sign': SECRET (signed()) get a
	signed Authorization for this method, path and Range."""
	import http.client
	headers = dict(headers or {})
	if '_sign' in headers:
		headers['Authorization'] = peer_signature(
			headers.pop('_sign'), method, path.split('?')[0], headers.get('Range'))
	own = conn is None
	if own:
		conn = http.client.HTTPConnection('127.0.0.1', port,
						  timeout=timeout)
	try:
		conn.putrequest(method, path, skip_accept_encoding=True)
		for name, value in (headers or {}).items():
			conn.putheader(name, value)
		conn.endheaders()
		resp = conn.getresponse()
		body = resp.read()
		hdrs = {k.lower(): v for k, v in resp.getheaders()}
		return resp.status, hdrs, body
	finally:
		if own:
			conn.close()


_READ_MANY = (
	'import hashlib, json, os, sys, time\n'
	'paths = json.loads(sys.argv[1]); pace = float(sys.argv[2])\n'
	'marker = sys.argv[3]\n'
	'for p in paths:\n'
	'    if pace and not os.path.exists(marker): time.sleep(pace)\n'
	'    h = hashlib.sha256(); n = 0\n'
	'    try:\n'
	'        with open(p, "rb", buffering=0) as f:\n'
	'            while True:\n'
	'                b = f.read(1 << 20)\n'
	'                if not b: break\n'
	'                h.update(b); n += len(b)\n'
	'        print(json.dumps([p, "ok", h.hexdigest(), n]), flush=True)\n'
	'    except OSError as e:\n'
	'        print(json.dumps([p, "errno", e.errno, e.strerror]),'
	' flush=True)\n'
)


class ManyReader:
	"""Read a list of files (sha256) in a child process, so that a hung
	FUSE request cannot hang the test. pace: seconds to sleep before
	each file while the file `marker` does not exist (lets a test
	inject faults in the middle of an epoch). results() waits up to
	timeout, kills the child if it is still running, and returns
	{path: ('ok', sha256hex, size) | ('errno', errno, msg)}, plus
	'timeout' for every path it did not reach."""

	def __init__(self, paths, pace=0.0, marker='/nonexistent'):
		self.paths = list(paths)
		self.out = tempfile.TemporaryFile()
		self.proc = subprocess.Popen(
			[sys.executable, '-c', _READ_MANY, json.dumps(self.paths),
			 str(pace), marker],
			stdin=subprocess.DEVNULL, stdout=self.out,
			stderr=subprocess.STDOUT)

	def done_count(self):
		self.out.flush()
		with open(f'/proc/self/fd/{self.out.fileno()}', 'rb') as f:
			return f.read().count(b'\n')

	def results(self, timeout):
		try:
			self.proc.wait(timeout=timeout)
		except subprocess.TimeoutExpired:
			self.proc.kill()
			self.proc.wait()
		self.out.seek(0)
		res = {}
		for line in self.out.read().decode('utf-8', 'replace').splitlines():
			try:
				item = json.loads(line)
			except ValueError:
				continue
			if isinstance(item, list) and len(item) == 4:
				res[item[0]] = tuple(item[1:])
		self.out.close()
		for p in self.paths:
			res.setdefault(p, ('timeout', None, None))
		return res


class FakePeer:
	"""tests/helpers/fake_peer.py MODE on a free loopback port
	(self.port), stopped on exit. directory: serve that tree's files
	(see fake_peer.py) instead of one pattern. env: more environment
	(FAKE_PEER_DELAY for "slow")."""

	def __init__(self, mode, timeout=10, directory=None, env=None):
		import select
		self.proc = subprocess.Popen(
			[sys.executable, os.path.join(HERE, '..', 'helpers', 'fake_peer.py'), mode,
			 '0'] + ([directory] if directory else []),
			stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
			stderr=subprocess.DEVNULL, env=dict(os.environ, **(env or {})))
		ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
		line = self.proc.stdout.readline() if ready else b''
		if not line.strip().isdigit():
			self.stop()
			raise RuntimeError(f'fake_peer.py {mode} did not start')
		self.port = int(line)

	def __enter__(self):
		return self

	def __exit__(self, *exc):
		self.stop()
		return False

	def stop(self):
		if self.proc.poll() is None:
			self.proc.kill()
		self.proc.wait()
		self.proc.stdout.close()


__all__ += [
	'hash_mix64', 'hash_bytes', 'unit_owner', 'file_units', 'ownership',
	'free_ports', 'peer_url', 'Cluster', 'http_request', 'ManyReader',
	'FakePeer',
]


# ---------------------------------------------------------------- other users

# Run as the test user: [["open"|"list", path], ...] -> [result, ...]
PROBE = r'''
import hashlib, json, os, sys
out = []
for op, path in json.loads(sys.argv[1]):
    try:
        if op == "list":
            out.append(["ok", sorted(os.listdir(path))])
        else:
            with open(path, "rb", buffering=0) as f:
                data = b""
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    data += b
            out.append(["ok", hashlib.sha256(data).hexdigest(), len(data)])
    except OSError as e:
        out.append(["errno", e.errno])
print(json.dumps(out))
'''


class TestUser:
	"""A system user made for a test and removed on exit; run(ops) runs
	PROBE as it."""

	def __init__(self, prefix='cfsuser'):
		self.name = prefix + uuid.uuid4().hex[:8]
		subprocess.run(['useradd', '--system', '--no-create-home',
				'--shell', '/usr/sbin/nologin', self.name],
			       check=True, capture_output=True, timeout=30)
		pw = pwd.getpwnam(self.name)
		self.uid, self.gid = pw.pw_uid, pw.pw_gid

	def __enter__(self):
		return self

	def __exit__(self, *exc):
		subprocess.run(['userdel', self.name], capture_output=True,
			       timeout=30)
		return False

	def run(self, ops, job=None, timeout=60):
		"""PROBE as this user; list of results, one per op."""
		env = {'PATH': '/usr/bin:/bin'}
		if job:
			env['COORDFS_JOB'] = job
		proc = subprocess.run([sys.executable, '-c', PROBE,
				       json.dumps(ops)], user=self.uid,
				      group=self.gid, extra_groups=[], env=env,
				      capture_output=True, text=True,
				      timeout=timeout, cwd='/')
		if proc.returncode != 0:
			raise RuntimeError(f'probe as {self.name} exited '
					   f'{proc.returncode}: {proc.stderr}')
		return json.loads(proc.stdout)


__all__ += ['PROBE', 'TestUser', 'peer_signature', 'signed']


def own_mount_namespace(script):
	"""Run the test script again in a mount namespace of its own (private
	propagation), unless it already runs in one: what it mounts or binds
	over (/etc files, a tmpfs) is seen by its own processes only. Call
	first thing in main()."""
	if os.environ.get('COORDFS_OWN_MOUNT_NS') == os.path.abspath(script):
		return
	env = dict(os.environ, COORDFS_OWN_MOUNT_NS=os.path.abspath(script))
	argv = ['unshare', '-m', '--propagation', 'private', sys.executable,
		os.path.abspath(script)] + sys.argv[1:]
	try:
		os.execvpe('unshare', argv, env)
	except OSError as e:
		print(f'FAIL setup: cannot run in a mount namespace of its own: {e}')
		print('0 passed, 1 failed')
		sys.exit(1)


__all__ += ['own_mount_namespace']
