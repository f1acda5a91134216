# SPDX-License-Identifier: MIT
"""Integration test of the basic read-only mount (coordfs(1): OPTIONS, THE MOUNT, STATISTICS).

Builds a SOURCE tree with nested and empty directories, empty files,
names with spaces and non-ASCII characters, symlinks, and files of many
sizes (odd sizes, chunk boundaries, several chunks at --chunk-size=64K),
mounts it with coordfs and checks: listing, stat, contents (sha256, first
and second read, random partial reads), EROFS for every write-like call,
the statistics counters, the per-file `user.coordfs.cached` xattr, and a
tiny cache that must never exceed its budget.
"""

import ctypes
import errno
import json
import mmap
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
MIB = 1024 * 1024
CHUNK = 64 * KIB
MTIME_BASE = 1_600_000_000_123_456_789

FILE_MODES = [0o644, 0o600, 0o755, 0o444, 0o640, 0o700]

# relpath -> size of regular files in the basic tree
SIZED = {
	'sizes/one.bin': 1,
	'sizes/seven.bin': 7,
	'sizes/page_minus_1.bin': 4095,
	'sizes/page.bin': 4096,
	'sizes/page_plus_1.bin': 4097,
	'sizes/chunk_minus_1.bin': CHUNK - 1,
	'sizes/chunk.bin': CHUNK,
	'sizes/chunk_plus_1.bin': CHUNK + 1,
	'sizes/odd_12345.bin': 12345,
	'big/two_chunks_plus.bin': 2 * CHUNK + 3,
	'big/exact_3_chunks.bin': 3 * CHUNK,
	'big/multi_chunk.bin': 5 * CHUNK + 1234,	# ~321 KiB
	'big/odd_333333.bin': 333333,
	'a/b/c/deep.bin': 1000,
	'a/b/file.txt': 321,
	'name with spaces.txt': 77,
	'ünïcødé 日本語.bin': 4321,
	'dïr ünï/ñ file.dat': 9999,
	'dïr ünï/sub dir/x': 5,
}
EMPTY_FILES = ['empty.bin', 'a/b/empty2', 'dïr ünï/vide']
EMPTY_DIRS = ['empty_top', 'a/empty_dir', 'a/b/c/empty_deep',
	      'dïr ünï/sub dir/leer']
SYMLINKS = {
	'link_to_file': 'a/b/file.txt',
	'a/link_up': '../name with spaces.txt',
	'link_to_dir': 'a/b',
	'dïr ünï/lïnk': '../ünïcødé 日本語.bin',
}


def populate_basic(src):
	rng = random.Random(1234)
	for i, (rel, size) in enumerate(sorted(SIZED.items())):
		ct.write_file(os.path.join(src, rel), ct.random_bytes(rng, size),
			      mode=FILE_MODES[i % len(FILE_MODES)],
			      mtime_ns=MTIME_BASE + i * 1_000_000_007)
	for i, rel in enumerate(EMPTY_FILES):
		ct.write_file(os.path.join(src, rel), b'', mode=0o644,
			      mtime_ns=MTIME_BASE - i * 3_000_000_011)
	for rel in EMPTY_DIRS:
		os.makedirs(os.path.join(src, rel), exist_ok=True)
	for rel, target in SYMLINKS.items():
		os.symlink(target, os.path.join(src, rel))
	# a directory larger than one readdir buffer, long names
	for i in range(1200):
		ct.write_file(os.path.join(src, 'many',
					   f'entry_{i:04d}_' + 'x' * 80),
			      bytes([i % 251]) * (i % 7))
	ct.write_file(os.path.join(src, 'L' * 255), b'longest name')
	ct.write_file(os.path.join(src, 'per%cent #hash ?q&a=b.bin'),
		      b'special characters')
	ct.write_file(os.path.join(src, 'tab\there\nnewline'), b'odd name')
	os.link(os.path.join(src, 'a/b/file.txt'),
		os.path.join(src, 'a/hardlink.txt'))
	os.symlink('/etc/hostname', os.path.join(src, 'abs_link'))
	os.symlink('does/not/exist', os.path.join(src, 'dangling'))
	os.chmod(os.path.join(src, 'a/empty_dir'), 0o700)
	os.chmod(os.path.join(src, 'empty_top'), 0o750)
	# directory mtimes last, deepest first, so nothing changes them later
	dirs = [d for d, _, _ in os.walk(src)]
	for i, d in enumerate(sorted(dirs, key=lambda p: -p.count('/'))):
		t = MTIME_BASE + 500_000_000_000 + i * 777_777_777
		os.utime(d, ns=(t, t))


def regular_files(src):
	"""Sorted relpaths of regular files (symlinks excluded)."""
	return sorted(rel for rel, (kind, _) in ct.tree_entries(src).items()
		      if kind == 'file')


def one_name_per_inode(src, files):
	"""files less the later names of hard links: what SOURCE and the cache
	hold once (hard links share units)."""
	seen, out = set(), []
	for r in files:
		st = os.stat(os.path.join(src, r))
		if (st.st_dev, st.st_ino) not in seen:
			seen.add((st.st_dev, st.st_ino))
			out.append(r)
	return out


def units_of(size):
	"""Cacheable units of a file at CHUNK (0 for an empty file)."""
	if size == 0:
		return 0
	if size <= CHUNK:
		return 1
	return (size + CHUNK - 1) // CHUNK


def check_listing(c, m):
	c.eq('os.walk listing equals SOURCE', ct.walk_listing(m.mnt),
	     ct.walk_listing(m.src))
	src_entries = ct.tree_entries(m.src)
	mnt_entries = ct.tree_entries(m.mnt)
	c.eq('same set of entries', sorted(mnt_entries), sorted(src_entries))
	bulk = []	# entries of many/: one line for all of them
	for rel in sorted(src_entries):
		kind, s = src_entries[rel]
		if rel not in mnt_entries:
			continue
		mkind, ms = mnt_entries[rel]
		diffs = []
		if mkind != kind:
			diffs.append(f'kind {mkind} != {kind}')
		elif kind == 'link':
			if not stat.S_ISLNK(ms.st_mode):
				diffs.append('not a symlink')
			got = os.readlink(os.path.join(m.mnt, rel))
			want = os.readlink(os.path.join(m.src, rel))
			if got != want:
				diffs.append(f'readlink {got!r} != {want!r}')
			if ms.st_size != s.st_size:
				diffs.append(f'size {ms.st_size} != {s.st_size}')
		else:
			if stat.S_IFMT(ms.st_mode) != stat.S_IFMT(s.st_mode):
				diffs.append('file type differs')
			want_mode = stat.S_IMODE(s.st_mode) & ~0o222
			if stat.S_IMODE(ms.st_mode) != want_mode:
				diffs.append(f'mode {oct(stat.S_IMODE(ms.st_mode))}'
					     f' != {oct(want_mode)}')
			if ms.st_mtime_ns != s.st_mtime_ns:
				diffs.append(f'mtime_ns {ms.st_mtime_ns} != '
					     f'{s.st_mtime_ns}')
			if kind == 'file' and ms.st_size != s.st_size:
				diffs.append(f'size {ms.st_size} != {s.st_size}')
		if rel.startswith('many/'):
			if diffs:
				bulk.append((rel, diffs))
			continue
		c.check(f'stat {kind} {rel!r}', not diffs, '; '.join(diffs))
	c.check('stat of the 1200 entries of many/', not bulk,
		f'{len(bulk)} differ, first: {bulk[:3]}')
	# symlinks resolve inside the mount
	c.eq('link_to_file reads its target',
	     open(os.path.join(m.mnt, 'link_to_file'), 'rb').read(),
	     open(os.path.join(m.src, 'a/b/file.txt'), 'rb').read())
	c.eq('hard-linked names read the same bytes',
	     open(os.path.join(m.mnt, 'a/hardlink.txt'), 'rb').read(),
	     open(os.path.join(m.src, 'a/b/file.txt'), 'rb').read())
	c.eq('directory of 1200 entries lists completely',
	     len(os.listdir(os.path.join(m.mnt, 'many'))), 1200)
	c.eq('listdir through link_to_dir',
	     sorted(os.listdir(os.path.join(m.mnt, 'link_to_dir'))),
	     sorted(os.listdir(os.path.join(m.src, 'a/b'))))
	c.errno_of('lookup of a missing name gives ENOENT',
		   lambda: os.stat(os.path.join(m.mnt, 'no such file')),
		   errno.ENOENT)


def read_pass(c, m, files, label):
	bad = []
	for rel in files:
		got = ct.sha256_file(os.path.join(m.mnt, rel))
		if got != ct.sha256_file(os.path.join(m.src, rel)):
			bad.append(rel)
	c.check(f'{label}: sha256 of all {len(files)} files equals SOURCE',
		not bad, f'differ: {bad}')


STATS_KEYS = {
	'cache': ['capacity_bytes', 'used_bytes', 'items', 'hits', 'misses',
		  'hit_bytes', 'miss_bytes', 'admitted', 'refused', 'fill_errors',
		  'failed_units', 'chunk_bytes'],
	'source': ['reads', 'bytes', 'errors', 'requests', 'retries', 'latency_ms',
		   'skipped_keys', 'kind'],
	'prefill': ['target_bytes', 'done_bytes', 'running'],
	'peers': ['fetches', 'bytes', 'errors', 'served', 'served_bytes', 'node',
		  'mismatches', 'unavailable', 'fallbacks', 'skipped', 'rejected',
		  'dropped', 'recycled', 'nodes'],
	'prep': ['decodes', 'shared', 'errors', 'staged_bytes', 'refused', 'jobs'],
	'fuse': ['opens', 'reads', 'read_bytes', 'kernel_cache'],
	'namespace': ['files', 'dirs', 'skipped', 'skipped_special',
		      'skipped_long_paths', 'skipped_unreadable'],
}


def check_stats_shape(c, s):
	c.eq('stats version', s.get('version'), 1)
	c.check('stats uptime_s is a number >= 0',
		isinstance(s.get('uptime_s'), (int, float))
		and s['uptime_s'] >= 0, f'uptime_s={s.get("uptime_s")!r}')
	missing = [f'{sec}.{k}' for sec, keys in STATS_KEYS.items()
		   for k in keys if k not in s.get(sec, {})]
	c.check('stats has every documented field (coordfs(1), STATISTICS)', not missing,
		f'missing {missing}')


def test_big_cache(c):
	"""Listing, stat, contents, stats and xattrs with everything fitting."""
	# --no-kernel-cache: this test counts an open per file, which the
	# default (FUSE no-open) never sends to the daemon.
	with ct.Mount(['--chunk-size=64K', '--cache-size=64M', '--no-kernel-cache'],
		      populate=populate_basic) as m:
		s0 = m.stats()
		check_stats_shape(c, s0)
		c.eq('capacity_bytes is --cache-size=64M',
		     s0['cache']['capacity_bytes'], 64 * MIB)
		c.eq('no misses before any read', s0['cache']['misses'], 0)
		c.eq('nothing used before any read', s0['cache']['used_bytes'], 0)
		check_listing(c, m)

		files = regular_files(m.src)
		sizes = {r: os.path.getsize(os.path.join(m.src, r))
			 for r in files}
		total = sum(sizes.values())
		nonempty = [r for r in files if sizes[r] > 0]
		inodes = one_name_per_inode(m.src, files)
		stored = sum(sizes[r] for r in inodes)
		units = sum(units_of(sizes[r]) for r in inodes)
		print(f'# {len(files)} files, {total} bytes, {len(inodes)} inodes, '
		      f'{stored} bytes, {units} units')

		read_pass(c, m, files, 'first read')
		s1 = m.stats()
		c.gt('first pass: cache.misses > 0', s1['cache']['misses'], 0)
		c.eq('first pass: source.bytes == bytes of all files, hard links once',
		     s1['source']['bytes'] - s0['source']['bytes'], stored)
		c.le('first pass: used_bytes <= capacity_bytes',
		     s1['cache']['used_bytes'], s1['cache']['capacity_bytes'])
		c.ge('first pass: used_bytes >= bytes of all files, hard links once',
		     s1['cache']['used_bytes'], stored)
		c.eq('first pass: nothing refused', s1['cache']['refused'], 0)
		c.ge('first pass: items >= one per file or 64K chunk',
		     s1['cache']['items'], units)
		c.ge('first pass: admitted >= one per file or 64K chunk',
		     s1['cache']['admitted'], units)
		c.ge('first pass: fuse.opens >= number of files',
		     s1['fuse']['opens'], len(files))
		c.ge('first pass: fuse.read_bytes >= bytes of all files',
		     s1['fuse']['read_bytes'], total)
		c.eq('first pass: source.errors', s1['source']['errors'], 0)

		not_cached = [r for r in nonempty
			      if ct.cached(os.path.join(m.mnt, r)) != b'1']
		c.check('user.coordfs.cached is 1 for every file read',
			not not_cached, f'not 1: {not_cached}')

		for r in files:
			ct.drop_page_cache(os.path.join(m.mnt, r))
		read_pass(c, m, files, 'second read')
		s2 = m.stats()
		c.ge('second pass: hits grew by >= one per non-empty file',
		     s2['cache']['hits'] - s1['cache']['hits'], len(nonempty))
		c.eq('second pass: no new misses', s2['cache']['misses'],
		     s1['cache']['misses'])
		c.eq('second pass: source.bytes unchanged',
		     s2['source']['bytes'], s1['source']['bytes'])
		c.ge('second pass: hit_bytes grew by >= bytes of all files',
		     s2['cache']['hit_bytes'] - s1['cache']['hit_bytes'], total)
		c.le('second pass: used_bytes <= capacity_bytes',
		     s2['cache']['used_bytes'], s2['cache']['capacity_bytes'])

		check_erofs(c, m)


def check_erofs(c, m):
	mnt = m.mnt
	f = os.path.join(mnt, 'a/b/file.txt')
	d = os.path.join(mnt, 'empty_top')
	before = ct.sha256_file(f)
	calls = [
		('create', lambda: os.open(os.path.join(mnt, 'new.txt'),
					   os.O_CREAT | os.O_WRONLY, 0o644)),
		('create in subdir', lambda: os.open(
			os.path.join(mnt, 'a/b/new.txt'),
			os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)),
		('open O_WRONLY', lambda: os.open(f, os.O_WRONLY)),
		('open O_RDWR', lambda: os.open(f, os.O_RDWR)),
		('open O_WRONLY|O_TRUNC', lambda: os.open(
			f, os.O_WRONLY | os.O_TRUNC)),
		('open O_WRONLY|O_APPEND', lambda: os.open(
			f, os.O_WRONLY | os.O_APPEND)),
		('mkdir', lambda: os.mkdir(os.path.join(mnt, 'newdir'))),
		('rmdir', lambda: os.rmdir(d)),
		('unlink', lambda: os.unlink(f)),
		('rename file', lambda: os.rename(
			f, os.path.join(mnt, 'a/b/renamed.txt'))),
		('rename dir', lambda: os.rename(
			d, os.path.join(mnt, 'renamed_dir'))),
		('chmod', lambda: os.chmod(f, 0o777)),
		('chown', lambda: os.chown(f, 1, 1)),
		('utime', lambda: os.utime(f, (1, 1))),
		('truncate', lambda: os.truncate(f, 0)),
		('setxattr', lambda: os.setxattr(f, 'user.test', b'x')),
		('setxattr on root', lambda: os.setxattr(
			mnt, ct.STATS_XATTR, b'{}')),
		('removexattr', lambda: os.removexattr(f, ct.CACHED_XATTR)),
		('symlink', lambda: os.symlink(
			'a/b/file.txt', os.path.join(mnt, 'newlink'))),
		('link', lambda: os.link(f, os.path.join(mnt, 'hardlink'))),
		('mkfifo', lambda: os.mkfifo(os.path.join(mnt, 'fifo'))),
	]
	for name, fn in calls:
		c.errno_of(f'{name} fails with EROFS', fn, errno.EROFS)
	c.eq('file unchanged after write attempts', ct.sha256_file(f), before)
	c.eq('SOURCE unchanged after write attempts',
	     ct.walk_listing(m.src), ct.walk_listing(m.mnt))
	ro = any('ro' in x['options'].split(',') for x in ct.mounts_at(mnt))
	print(f'# note: mount flagged ro in mountinfo: {ro}')


def test_partial_reads_cold(c):
	"""Random-offset reads on a cold cache, crossing chunk edges."""
	with ct.Mount(['--chunk-size=64K', '--cache-size=64M'],
		      populate=populate_basic) as m:
		rng = random.Random(99)
		files = [r for r in regular_files(m.src)
			 if os.path.getsize(os.path.join(m.src, r)) > 0]
		bad = []
		n = 0
		for rel in files:
			sp = os.path.join(m.src, rel)
			size = os.path.getsize(sp)
			with open(sp, 'rb') as sf, open(
					os.path.join(m.mnt, rel), 'rb',
					buffering=0) as mf:
				offsets = [(rng.randrange(size),
					    rng.randrange(1, 3 * CHUNK))
					   for _ in range(6)]
				# chunk edges, end of file, past the end
				for edge in range(CHUNK, size, CHUNK):
					offsets.append((edge - 7, 20))
					offsets.append((edge, 1))
				offsets += [(size - 1, 10), (size, 10),
					    (size + 12345, 100), (0, size + 50)]
				rng.shuffle(offsets)
				for off, ln in offsets:
					want = os.pread(sf.fileno(), ln, off)
					got = os.pread(mf.fileno(), ln, off)
					n += 1
					if got != want:
						bad.append((rel, off, ln, len(got),
							    len(want)))
		c.check(f'{n} random/edge partial reads equal SOURCE (cold)',
			not bad, f'mismatches (rel, off, len, got, want): '
			f'{bad[:10]}')
		s = m.stats()
		c.le('partial reads: used_bytes <= capacity',
		     s['cache']['used_bytes'], s['cache']['capacity_bytes'])
		# a second, warm round of random reads
		bad = []
		for rel in files:
			sp = os.path.join(m.src, rel)
			ct.drop_page_cache(os.path.join(m.mnt, rel))
			size = os.path.getsize(sp)
			with open(sp, 'rb') as sf, open(
					os.path.join(m.mnt, rel), 'rb',
					buffering=0) as mf:
				for _ in range(5):
					off = rng.randrange(size)
					ln = rng.randrange(1, 200000)
					if os.pread(mf.fileno(), ln, off) != \
					   os.pread(sf.fileno(), ln, off):
						bad.append((rel, off, ln))
		c.check('random partial reads equal SOURCE (warm)', not bad,
			f'mismatches: {bad[:10]}')


def test_misc(c):
	"""mmap, statvfs, access, and concurrent cold reads (single-flight)."""
	with ct.Mount(['--chunk-size=64K', '--cache-size=64M'],
		      populate=populate_basic) as m:
		rel = 'big/multi_chunk.bin'
		mp, sp = os.path.join(m.mnt, rel), os.path.join(m.src, rel)
		want = open(sp, 'rb').read()
		size = len(want)
		s0 = m.stats()
		barrier = threading.Barrier(8)
		results = []

		def reader():
			fd = os.open(mp, os.O_RDONLY | os.O_DIRECT)
			try:
				barrier.wait()
				data = bytearray()
				while True:
					block = os.pread(fd, 256 * KIB, len(data))
					if not block:
						break
					data += block
				results.append(bytes(data) == want)
			finally:
				os.close(fd)
		threads = [threading.Thread(target=reader) for _ in range(8)]
		for t in threads:
			t.start()
		for t in threads:
			t.join()
		c.eq('8 concurrent cold O_DIRECT readers all get the right bytes',
		     results, [True] * 8)
		s1 = m.stats()
		c.eq('concurrent cold readers: file read from SOURCE once',
		     s1['source']['bytes'] - s0['source']['bytes'], size)

		# threads reading every file in different orders
		files = [r for r in regular_files(m.src)
			 if not r.startswith('many/')]
		want_sha = {r: ct.sha256_file(os.path.join(m.src, r))
			    for r in files}
		bad = []

		def sweep(seed):
			order = list(files)
			random.Random(seed).shuffle(order)
			for r in order:
				if ct.sha256_file(os.path.join(m.mnt, r)) != \
				   want_sha[r]:
					bad.append(r)
		threads = [threading.Thread(target=sweep, args=(k,))
			   for k in range(4)]
		for t in threads:
			t.start()
		for t in threads:
			t.join()
		c.check('4 threads reading all files in random orders', not bad,
			f'wrong: {bad}')
		s2 = m.stats()
		total = sum(os.path.getsize(os.path.join(m.src, r))
			    for r in one_name_per_inode(m.src, files))
		c.eq('parallel sweeps: every file (hard links: their inode) read from SOURCE once',
		     s2['source']['bytes'] - s0['source']['bytes'], total)

		rel = 'big/odd_333333.bin'
		with open(os.path.join(m.mnt, rel), 'rb') as f, \
		     mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
			c.check('mmap of a multi-chunk file equals SOURCE',
				mm[:] == open(os.path.join(m.src, rel),
					      'rb').read())
		try:
			st = os.statvfs(m.mnt)
			c.check('statvfs reports a read-only file system',
				st.f_flag & os.ST_RDONLY, f'f_flag={st.f_flag}')
		except OSError as e:
			c.check('statvfs works', False, str(e))
		f = os.path.join(m.mnt, 'a/b/file.txt')
		c.check('access(R_OK) is true', os.access(f, os.R_OK))
		c.check('access(W_OK) is false', not os.access(f, os.W_OK))
		c.errno_of('faccessat(W_OK) fails with EROFS',
			   lambda: _access_errno(f, os.W_OK), errno.EROFS)


def _access_errno(path, mode):
	libc = ctypes.CDLL(None, use_errno=True)
	if libc.access(path.encode(), mode) != 0:
		e = ctypes.get_errno()
		raise OSError(e, os.strerror(e))


def test_fsstat(c):
	"""fsstat --json and the table read the same stats as the xattr."""
	fsstat = ct.fsstat_bin()
	if not c.check('FSSTAT_BIN names the built fsstat', fsstat is not None):
		return
	with ct.Mount(['--cache-size=8M'], populate=populate_tiny) as m:
		for r in regular_files(m.src)[:5]:
			ct.sha256_file(os.path.join(m.mnt, r))
		want = m.stats()
		p = subprocess.run([fsstat, '--json', m.mnt], capture_output=True,
				   text=True, timeout=20)
		c.eq('fsstat --json: exit status', (p.returncode, p.stderr), (0, ''))
		try:
			got = json.loads(p.stdout)
		except ValueError as e:
			got = f'not JSON: {e}: {p.stdout[:200]!r}'
		c.check('fsstat --json: same counters as the xattr',
			isinstance(got, dict) and
			got.get('cache', {}).get('misses') ==
			want['cache']['misses'] and
			got.get('source', {}).get('bytes') ==
			want['source']['bytes'], f'{got!r:.300}')
		p = subprocess.run([fsstat, m.mnt], capture_output=True,
				   text=True, timeout=20)
		c.eq('fsstat (table): exit status', (p.returncode, p.stderr),
		     (0, ''))
		c.check('fsstat (table): prints a table', len(
			p.stdout.splitlines()) >= 3, f'{p.stdout!r}')
		p = subprocess.run([fsstat, os.path.join(m.root, 'nowhere')],
				   capture_output=True, text=True, timeout=20)
		c.check('fsstat on a missing path: one line, exit non-zero',
			p.returncode != 0 and
			len(p.stderr.strip().splitlines()) == 1 and
			'nowhere' in p.stderr, f'rc={p.returncode} {p.stderr!r}')


def populate_tiny(src):
	rng = random.Random(4321)
	total = 0
	i = 0
	while total < 1000 * KIB:
		size = rng.choice([rng.randrange(1, 8 * KIB),
				   rng.randrange(8 * KIB, 40 * KIB),
				   rng.randrange(40 * KIB, 90 * KIB)])
		ct.write_file(os.path.join(src, f'd{i % 4}', f'f{i:03d}.bin'),
			      ct.random_bytes(rng, size))
		total += size
		i += 1


def test_tiny_cache(c):
	"""--cache-size=100K over ~1 MB: budget holds, MinIO never evicts."""
	with ct.Mount(['--cache-size=100K'], populate=populate_tiny) as m:
		files = regular_files(m.src)
		sizes = {r: os.path.getsize(os.path.join(m.src, r))
			 for r in files}
		total = sum(sizes.values())
		print(f'# tiny cache: {len(files)} files, {total} bytes')
		s0 = m.stats()
		cap = s0['cache']['capacity_bytes']
		c.eq('capacity_bytes is --cache-size=100K', cap, 100 * KIB)
		over = []
		bad = []
		for rel in files:
			mp = os.path.join(m.mnt, rel)
			if ct.sha256_file(mp) != \
			   ct.sha256_file(os.path.join(m.src, rel)):
				bad.append(rel)
			used = m.stats()['cache']['used_bytes']
			if used > cap:
				over.append((rel, used))
		c.check('tiny cache: content correct on first read', not bad,
			f'differ: {bad}')
		c.check('tiny cache: used_bytes never exceeded capacity '
			'(checked after every file)', not over, f'{over[:5]}')
		s1 = m.stats()
		c.gt('tiny cache: refused > 0', s1['cache']['refused'], 0)
		c.eq('tiny cache: source.bytes == bytes of all files',
		     s1['source']['bytes'] - s0['source']['bytes'], total)
		cached1 = {r for r in files
			   if ct.cached(os.path.join(m.mnt, r)) == b'1'}
		values = {ct.cached(os.path.join(m.mnt, r)) for r in files}
		c.check('tiny cache: cached xattr is b"1" or b"0"',
			values <= {b'0', b'1'}, f'values {values}')
		c.check('tiny cache: some files cached, some not',
			0 < len(cached1) < len(files),
			f'{len(cached1)} of {len(files)} cached')
		c.le('tiny cache: bytes of cached files <= capacity',
		     sum(sizes[r] for r in cached1), cap)

		for r in files:
			ct.drop_page_cache(os.path.join(m.mnt, r))
		read_pass(c, m, files, 'tiny cache second read')
		s2 = m.stats()
		c.le('tiny cache: used_bytes <= capacity after second pass',
		     s2['cache']['used_bytes'], cap)
		cached2 = {r for r in files
			   if ct.cached(os.path.join(m.mnt, r)) == b'1'}
		c.check('tiny cache: nothing evicted (cached set only grows)',
			cached1 <= cached2,
			f'evicted: {sorted(cached1 - cached2)}')
		c.ge('tiny cache: second pass hits >= files cached',
		     s2['cache']['hits'] - s1['cache']['hits'], len(cached1))
		c.eq('tiny cache: second pass read from SOURCE exactly the '
		     'uncached files',
		     s2['source']['bytes'] - s1['source']['bytes'],
		     total - sum(sizes[r] for r in cached1))


def populate_links(src):
	rng = random.Random(99)
	ct.write_file(os.path.join(src, 'x', 'a.bin'), ct.random_bytes(rng, 200 * KIB + 7))
	ct.write_file(os.path.join(src, 'y', 'b.bin'), ct.random_bytes(rng, 90 * KIB))
	os.link(os.path.join(src, 'x', 'a.bin'), os.path.join(src, 'y', 'a.bin'))
	os.link(os.path.join(src, 'x', 'a.bin'), os.path.join(src, 'z.bin'))


def test_hard_links(c):
	"""Three names of one file are cached, and read from SOURCE, once; with
	a disk tier (units named by path) each name has its own."""
	tier_root = tempfile.mkdtemp(prefix='coordfs-links-')
	try:
		for tier in (None, os.path.join(tier_root, 'tier')):
			opts = ['--chunk-size=64K', '--cache-size=8M', '--no-kernel-cache']
			opts += [f'--disk-cache={tier}'] if tier else []
			what = 'with a disk tier' if tier else 'memory only'
			with ct.Mount(opts, populate=populate_links) as m:
				files = {r: open(os.path.join(m.src, r), 'rb').read()
					 for r in ('x/a.bin', 'y/a.bin', 'z.bin', 'y/b.bin')}
				a, b = len(files['x/a.bin']), len(files['y/b.bin'])
				got = ct.epoch(c, f'{what}: epoch 1', m.mnt, files)
				shared = m.stats()['namespace']['hard_links_shared']
				if tier:
					c.eq(f'{what}: each name read from SOURCE', got, 3 * a + b)
					c.eq(f'{what}: no name shares units', shared, 0)
				else:
					c.eq(f'{what}: the three names read from SOURCE once', got, a + b)
					c.eq(f'{what}: two names share the first one\'s units', shared, 2)
					c.eq(f'{what}: their bytes are counted apart',
					     m.stats()['namespace']['hard_links_shared_bytes'], 2 * a)
					c.eq(f'{what}: the cache holds the file once (4 + 2 units of 64K)',
					     m.stats()['cache']['items'], 6)
				c.eq(f'{what}: epoch 2 reads nothing from SOURCE',
				     ct.epoch(c, f'{what}: epoch 2', m.mnt, files), 0)
	finally:
		shutil.rmtree(tier_root, ignore_errors=True)


def main():
	c = ct.Checker('test_mount_basic', timeout=170)
	c.group(test_big_cache, c)
	c.group(test_partial_reads_cold, c)
	c.group(test_misc, c)
	c.group(test_tiny_cache, c)
	c.group(test_fsstat, c)
	c.group(test_hard_links, c)
	c.finish()


if __name__ == '__main__':
	main()
