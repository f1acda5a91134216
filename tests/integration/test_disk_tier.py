# SPDX-License-Identifier: MIT
"""Integration test of the disk tier (coordfs(1): THE DISK TIER), real mounts.

A local SOURCE mounted with --disk-cache: a steady-state epoch reads
nothing from SOURCE when memory and disk hold the dataset; after
fusermount3 -u and after SIGTERM the next mount serves what the tier held
with 0 SOURCE bytes (and --prefill warms memory from the tier; three peers
restarted together read 0 SOURCE bytes in their first epoch); a file overwritten between mounts is dropped
(dropped_stale), never served; a flipped byte of the data file is caught
(dropped_corrupt) and read from SOURCE; a second daemon on the same DIR is
refused with the holder's PID and nothing mounted; DIR is 0700, its files
0600. SIGKILL during admission, 20 times, then every file's bytes are
checked. On loop devices made here: a tier file system that fills up (no
failed read, refused rises) and a tier device that turns to I/O errors
(dm-error through dmsetup: no failed read, disabled = 1).
"""

import fcntl
import grp
import os
import pwd
import random
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
MIB = 1024 * KIB
CHUNK = 64 * KIB


def populate(src, n, seed, max_size=200 * KIB):
	"""n files of random sizes (some of several chunks); relpath -> bytes."""
	rng = random.Random(seed)
	files = {}
	for i in range(n):
		rel = f'd{i % 4}/f{i:03d}.bin'
		data = ct.random_bytes(rng, rng.randint(1, max_size))
		ct.write_file(os.path.join(src, rel), data)
		files[rel] = data
	return files


def tier_opts(tier, cache='256K'):
	return [f'--cache-size={cache}', f'--chunk-size={CHUNK // KIB}K',
		'--no-kernel-cache', f'--disk-cache={tier}']


def unmount(m):
	subprocess.run(['fusermount3', '-u', m.mnt], check=False)
	for pid in m.pids:
		ct.kill_and_wait(pid, 10)


def test_remount_stale_corrupt_lock_modes(c):
	held = {}
	tier_root = tempfile.mkdtemp(prefix='coordfs-tier-')
	tier = os.path.join(tier_root, 'tier')

	def fill(src):
		held['files'] = populate(src, 40, 1)
		# Twins: the same size and mtime, other bytes (files extracted
		# from an archive that keeps sizes and mtimes, say).
		rng = random.Random(2)
		for rel in ('twins/a.bin', 'twins/b.bin'):
			data = ct.random_bytes(rng, 3 * CHUNK + 100)
			ct.write_file(os.path.join(src, rel), data, mtime_ns=1_600_000_000_123_456_789)
			held['files'][rel] = data
	try:
		with ct.Mount(tier_opts(tier), populate=fill) as m:
			run_remounts(c, m, tier, held['files'])
	finally:
		shutil.rmtree(tier_root)


def attrs_known(m):
	return ct.stats(m.mnt)['namespace']['attrs_known']


def list_and_stat(m, d):
	"""List directory d of the mount (readdirplus), then stat every file in
	it, as ImageFolder lists then opens. Returns (files, FUSE lookups this
	took)."""
	before = ct.stats(m.mnt)['fuse']['lookups']
	names = os.listdir(os.path.join(m.mnt, d))
	for n in names:
		os.stat(os.path.join(m.mnt, d, n))
	return len(names), ct.stats(m.mnt)['fuse']['lookups'] - before


def run_remounts(c, m, tier, files):
	total = sum(len(d) for d in files.values())
	# An empty tier (a first mount): attributes wait for each file's lookup.
	ct.disk_stats(m.mnt)  # the tier's index is loaded
	time.sleep(0.5)
	c.eq('first mount: no attributes taken before a lookup', attrs_known(m), 0)
	c.eq('first mount (an empty tier): listings take no attributes',
	     ct.stats(m.mnt)['namespace']['listing_attrs'], False)
	n, looked = list_and_stat(m, 'd1')
	c.eq(f'first mount: listing d1 and stat of its {n} files looks up d1 and each',
	     looked, 1 + n)
	c.eq('epoch 1 reads the dataset from SOURCE', ct.epoch(c, 'epoch 1', m.mnt, files), total)
	ct.disk_settle(c, 'epoch 1', m.mnt)
	d = ct.disk_stats(m.mnt)
	c.gt('the tier holds units', d['items'], 0)
	c.eq('nothing refused', d['refused'], 0)
	c.eq('steady state: epoch 2 reads nothing from SOURCE',
	     ct.epoch(c, 'epoch 2', m.mnt, files), 0)
	c.gt('disk hits in epoch 2', ct.disk_stats(m.mnt)['hits'], 0)

	# Modes: DIR 0700, its files 0600.
	c.eq('DIR is 0700', stat.S_IMODE(os.stat(tier).st_mode), 0o700)
	for name in sorted(os.listdir(tier)):
		c.eq(f'{name} is 0600', stat.S_IMODE(os.stat(os.path.join(tier, name)).st_mode),
		     0o600)

	# A second daemon on the same DIR: refused, with the PID, nothing mounted.
	other = os.path.join(m.root, 'mnt2')
	os.mkdir(other)
	rc, _, err = ct.run_coordfs(tier_opts(tier) + [m.src, other])
	c.check('a second daemon on DIR fails', rc not in (0, None), f'rc {rc}')
	c.check('its message names the holder\'s PID', f'pid {m.pids[0]}' in err, err)
	c.eq('its message is one line', len(err.strip().splitlines()), 1)
	c.check('nothing is mounted on its mountpoint', not ct.is_mounted(other))

	# fusermount3 -u, then a mount with the same DIR: 0 SOURCE bytes. The
	# tier holds units: every file's attributes are taken in the
	# background, before any lookup.
	unmount(m)
	m.mount()
	c.check('remount: every file\'s attributes taken in the background',
		ct.wait_until(lambda: attrs_known(m) == len(files), 20), f'{attrs_known(m)} of {len(files)}')
	# Then a listing gives the kernel their entries: only d1 is looked up.
	c.eq('remount: listing d1 and stat of its files looks up d1 alone',
	     list_and_stat(m, 'd1')[1], 1)
	c.eq('after fusermount3 -u: 0 SOURCE bytes in epoch 1',
	     ct.epoch(c, 'remount', m.mnt, files), 0)
	c.gt('after fusermount3 -u: served by the tier', ct.disk_stats(m.mnt)['hits'], 0)

	# SIGTERM, then again, without the background walk: the listing takes
	# the attributes of the files it lists.
	os.kill(m.pids[0], signal.SIGTERM)
	ct.kill_and_wait(m.pids[0], 10)
	ct.force_unmount(m.mnt)
	os.environ['COORDFS_NO_WARM'] = 'walk'
	try:
		m.mount()
	finally:
		del os.environ['COORDFS_NO_WARM']
	c.check('COORDFS_NO_WARM=walk: listings take attributes once the index is loaded',
		ct.wait_until(lambda: ct.stats(m.mnt)['namespace']['listing_attrs'], 20))
	c.eq('COORDFS_NO_WARM=walk: no attributes taken in the background', attrs_known(m), 0)
	before = ct.stats(m.mnt)['fuse']['lookups']
	names = os.listdir(os.path.join(m.mnt, 'd1'))
	c.eq('listing d1 took the attributes of its files', attrs_known(m), len(names))
	for n in names:
		os.stat(os.path.join(m.mnt, 'd1', n))
	c.eq('so the stat of each after the listing looks up d1 alone',
	     ct.stats(m.mnt)['fuse']['lookups'] - before, 1)
	c.eq('after SIGTERM: 0 SOURCE bytes in epoch 1',
	     ct.epoch(c, 'after SIGTERM', m.mnt, files), 0)

	# A file overwritten between mounts (same size, new bytes and mtime).
	unmount(m)
	rel = next(r for r, dd in files.items() if len(dd) > CHUNK)
	new = bytes(b ^ 0x5A for b in files[rel])
	path = os.path.join(m.src, rel)
	st = os.stat(path)
	ct.write_file(path, new, mtime_ns=st.st_mtime_ns + 1_000_000_000)
	files[rel] = new
	m.mount()
	got = ct.epoch(c, 'after an overwrite', m.mnt, files)
	c.eq('the overwritten file alone is read from SOURCE', got, len(new))
	c.ge('its units are dropped as stale', ct.disk_stats(m.mnt)['dropped_stale'], 1)
	ct.disk_settle(c, 'after an overwrite', m.mnt)
	c.eq('and then cached again', ct.epoch(c, 'after an overwrite, epoch 2', m.mnt, files), 0)

	# The twins swapped by renames between mounts: the same paths, sizes
	# and mtimes, each the other's bytes. The tier knows them as other
	# inodes: dropped, read from SOURCE, never served as the old file.
	unmount(m)
	a, b = (os.path.join(m.src, 'twins', n) for n in ('a.bin', 'b.bin'))
	os.rename(a, a + '.tmp')
	os.rename(b, a)
	os.rename(a + '.tmp', b)
	files['twins/a.bin'], files['twins/b.bin'] = files['twins/b.bin'], files['twins/a.bin']
	m.mount()
	got = ct.epoch(c, 'after the twins swapped', m.mnt, files)
	c.eq('the swapped twins alone are read from SOURCE', got,
	     len(files['twins/a.bin']) + len(files['twins/b.bin']))
	c.eq('their 8 units are dropped as stale', ct.disk_stats(m.mnt)['dropped_stale'], 8)
	ct.disk_settle(c, 'after the twins swapped', m.mnt)

	# A flipped byte in the data file: caught, read from SOURCE, counted.
	unmount(m)
	with open(os.path.join(tier, 'data'), 'r+b') as f:
		f.seek(100)
		b = f.read(1)
		f.seek(100)
		f.write(bytes([b[0] ^ 0x01]))
	m.mount()
	got = ct.epoch(c, 'after a flipped byte', m.mnt, files)
	c.eq('one unit is dropped as corrupt', ct.disk_stats(m.mnt)['dropped_corrupt'], 1)
	c.check('it alone is read from SOURCE', 0 < got <= CHUNK, f'{got} bytes')
	unmount(m)


def test_prefill_memory_then_disk(c):
	"""--prefill fills memory, then the tier; after a remount it warms
	memory from the tier, reading nothing from SOURCE."""
	with ct.TempDirs() as td:
		files = populate(td.src, 40, 6)
		tier = os.path.join(td.root, 'tier')
		opts = tier_opts(tier) + ['--prefill']
		total = sum(len(d) for d in files.values())
		units = sum(len(ct.file_units(len(d), CHUNK)) for d in files.values())
		for label, want_source in (('first mount', total), ('remount', 0)):
			rc, _, err = ct.run_coordfs(opts + [td.src, td.mnt])
			if not c.check(f'{label}: mounted with --prefill', rc == 0, err):
				return
			c.check(f'{label}: prefill ends',
				ct.wait_until(lambda: not ct.stats(td.mnt)['prefill']['running'], 60))
			ct.disk_settle(c, label, td.mnt)
			s = ct.stats(td.mnt)
			c.eq(f'{label}: prefill read from SOURCE', s['source']['bytes'], want_source)
			c.eq(f'{label}: the tier holds every unit', s['cache']['disk']['items'], units)
			c.gt(f'{label}: memory holds its share', s['cache']['items'], 0)
			c.eq(f'{label}: an epoch then reads nothing from SOURCE',
			     ct.epoch(c, label, td.mnt, files), 0)
			ct.force_unmount(td.mnt)


def test_three_peers_restart_together(c):
	"""Three nodes, each with its own tier, restarted together: the first
	epoch after the restart reads nothing from SOURCE on any node (each
	owner serves its partition from its tier)."""
	held = {}

	def fill(src):
		held['files'] = populate(src, 45, 7)
	with ct.Cluster(3, populate=fill) as cl:
		files = held['files']
		total = sum(len(d) for d in files.values())

		def mount_all():
			for k in range(3):
				cl.mount(k, tier_opts(os.path.join(cl.root, f'tier{k}'), cache='128K'))

		def source_bytes():
			return sum(cl.stats(k)['source']['bytes'] for k in range(3))

		def node_epoch(label):
			"""Every node reads the dataset; SOURCE bytes of all nodes
			(an owner reads for the others)."""
			before = source_bytes()
			for k in range(3):
				ct.epoch(c, f'{label}: node {k}', cl.mnts[k], files)
			return source_bytes() - before
		mount_all()
		c.eq('first epoch: the nodes read the dataset from SOURCE once',
		     node_epoch('first epoch'), total)
		for k in range(3):
			ct.disk_settle(c, f'node {k}', cl.mnts[k])
		items = [ct.disk_stats(cl.mnts[k])['items'] for k in range(3)]
		c.check('every node\'s tier holds its own partition', all(i > 0 for i in items),
			f'items {items}')
		for k in range(3):
			subprocess.run(['fusermount3', '-u', cl.mnts[k]], check=False)
			ct.kill_and_wait(cl.pids[k], 10)
		mount_all()
		c.eq('after restarting together: 0 SOURCE bytes on every node',
		     node_epoch('after the restart'), 0)
		status, _, body = ct.http_request(cl.ports[0], '/metrics')
		text = body.decode()
		hits = [l for l in text.splitlines() if l.startswith('coordfs_disk_hits_total ')]
		c.check('/metrics carries the disk tier (coordfs_disk_hits_total > 0)',
			status == 200 and len(hits) == 1 and int(hits[0].split()[1]) > 0, hits)
		for name in ('disk_capacity_bytes', 'disk_used_bytes', 'disk_items',
			     'disk_hit_bytes_total', 'disk_admitted_total', 'disk_refused_total',
			     'disk_dropped_stale_total', 'disk_dropped_corrupt_total', 'disk_disabled',
			     'disk_direct', 'disk_dropped_cut_total'):
			c.check(f'/metrics has coordfs_{name}', f'\ncoordfs_{name} ' in text)
		# Reads bypass the page cache where the tier's file system takes
		# O_DIRECT (found out here by opening its data file so).
		try:
			os.close(os.open(os.path.join(cl.root, 'tier0', 'data'), os.O_RDONLY | os.O_DIRECT))
			direct = 1
		except OSError:
			direct = 0
		c.eq('the tier reads direct where its file system can',
		     ct.disk_stats(cl.mnts[0])['direct'], direct)


def test_limit(c):
	"""--disk-cache-size is never passed; refused counts what did not fit."""
	with ct.TempDirs() as td:
		files = populate(td.src, 30, 8)
		tier = os.path.join(td.root, 'tier')
		limit = 1024 * KIB
		opts = tier_opts(tier, cache='0') + [f'--disk-cache-size={limit}']
		rc, _, err = ct.run_coordfs(opts + [td.src, td.mnt])
		if not c.check('mounted with a 1M tier', rc == 0, err):
			return
		ct.epoch(c, 'over the limit', td.mnt, files)
		ct.disk_settle(c, 'over the limit', td.mnt)
		d = ct.disk_stats(td.mnt)
		c.le('used_bytes <= --disk-cache-size', d['used_bytes'], limit)
		c.eq('capacity_bytes is the limit', d['capacity_bytes'], limit)
		c.gt('refused counts units over the limit', d['refused'], 0)
		ct.force_unmount(td.mnt)
		size = sum(os.path.getsize(os.path.join(tier, n)) for n in os.listdir(tier))
		c.le('the files in DIR stay within the limit (+ the lock file)', size, limit + 64)


def test_chunk_read_once_from_disk(c):
	"""With the kernel cache on (no handles), a chunk larger than a FUSE
	read is read from the tier once, not once per FUSE read."""
	with ct.TempDirs() as td:
		rng = random.Random(9)
		data = ct.random_bytes(rng, 8 * MIB)
		ct.write_file(os.path.join(td.src, 'big.bin'), data)
		tier = os.path.join(td.root, 'tier')
		rc, _, err = ct.run_coordfs(['--cache-size=0', '--chunk-size=4M',
					     f'--disk-cache={tier}', td.src, td.mnt])
		if not c.check('mounted with the kernel cache', rc == 0, err):
			return
		path = os.path.join(td.mnt, 'big.bin')
		c.eq('first read', ct.read_bytes(path), data)
		ct.disk_settle(c, 'first read', td.mnt)
		ct.drop_page_cache(path)
		before = ct.disk_stats(td.mnt)['hit_bytes']
		c.eq('read from the tier, not SOURCE', ct.epoch(c, 'again', td.mnt, {'big.bin': data}), 0)
		got = ct.disk_stats(td.mnt)['hit_bytes'] - before
		# A chunk still kept from the first read is served without disk.
		c.check('each 4M chunk read from disk at most about once', got <= 1.5 * len(data),
			f'{got} bytes from disk for {len(data)}')
		ct.force_unmount(td.mnt)


def test_data_cut_while_mounted(c):
	"""data cut to nothing under a mounted daemon: every byte still right
	(from SOURCE), every unit counted in dropped_corrupt, one log line for
	all of them, and the units admitted again."""
	with ct.TempDirs() as td:
		files = populate(td.src, 12, 11)
		tier = os.path.join(td.root, 'tier')
		log = os.path.join(td.root, 'log')
		opts = tier_opts(tier, cache='0') + [f'--log-file={log}']
		rc, _, err = ct.run_coordfs(opts + [td.src, td.mnt])
		if not c.check('mounted with memory 0', rc == 0, err):
			return
		try:
			ct.epoch(c, 'filling the tier', td.mnt, files)
			ct.disk_settle(c, 'filling the tier', td.mnt)
			items = ct.disk_stats(td.mnt)['items']
			c.gt('the tier holds units', items, 4)
			os.truncate(os.path.join(tier, 'data'), 0)
			ct.epoch(c, 'after the cut', td.mnt, files)
			d = ct.disk_stats(td.mnt)
			c.eq('every unit is dropped as corrupt', d['dropped_corrupt'], items)
			c.eq('the tier stays on', d['disabled'], 0)
			with open(log, encoding='utf-8', errors='replace') as f:
				lines = [ln for ln in f if 'disk cache' in ln and 'dropped' in ln]
			c.eq('one log line for all of them', len(lines), 1)
			ct.disk_settle(c, 'after the cut', td.mnt)
			c.eq('then served from the tier again',
			     ct.epoch(c, 'after the cut, epoch 2', td.mnt, files), 0)
		finally:
			ct.force_unmount(td.mnt)


def test_tier_without_direct_io(c):
	"""DIR on ramfs, which refuses O_DIRECT at open and reports no size:
	the default 50% (0 bytes) is refused in one line; with a size, reads
	go through the page cache, right, said once in the log."""
	with ct.TempDirs() as td:
		files = populate(td.src, 8, 12)
		ram = os.path.join(td.root, 'ram')
		os.mkdir(ram)
		if not c.check('ramfs mounted', subprocess.run(['mount', '-t', 'ramfs', 'ramfs', ram],
								check=False).returncode == 0):
			return
		try:
			tier = os.path.join(ram, 'tier')
			log = os.path.join(td.root, 'log')
			rc, _, err = ct.run_coordfs(tier_opts(tier) + [td.src, td.mnt])
			c.check('50% of no size is refused in one line',
				rc == 1 and '(the default)' in err and 'at least 1M' in err
				and len(err.strip().splitlines()) == 1, err)
			c.check('and nothing is mounted', not ct.is_mounted(td.mnt))
			opts = tier_opts(tier, cache='0') + ['--disk-cache-size=64M', f'--log-file={log}']
			rc, _, err = ct.run_coordfs(opts + [td.src, td.mnt])
			if not c.check('mounted with a size', rc == 0, err):
				return
			ct.epoch(c, 'ramfs epoch 1', td.mnt, files)
			ct.disk_settle(c, 'ramfs epoch 1', td.mnt)
			c.eq('ramfs epoch 2 reads nothing from SOURCE',
			     ct.epoch(c, 'ramfs epoch 2', td.mnt, files), 0)
			c.eq('reads are not direct', ct.disk_stats(td.mnt)['direct'], 0)
			ct.force_unmount(td.mnt)
			with open(log, encoding='utf-8', errors='replace') as f:
				lines = [ln for ln in f if 'direct reads refused' in ln]
			c.eq('one log line says so', len(lines), 1)
		finally:
			ct.force_unmount(td.mnt)
			subprocess.run(['umount', ram], check=False)


def test_option_errors(c):
	"""Bad disk-tier options: one line, exit 1, nothing mounted."""
	with ct.TempDirs() as td:
		tier = os.path.join(td.root, 'tier')
		cases = [
			(['--disk-cache-size=1G'], '--disk-cache-size needs --disk-cache'),
			([f'--disk-cache={tier}', '--disk-cache-size=lots'], "bad --disk-cache-size 'lots'"),
			([f'--disk-cache={tier}', '--disk-cache-size=150%'], "bad --disk-cache-size '150%'"),
			# A tier that can hold nothing is a mistake, not a tier.
			([f'--disk-cache={tier}', '--disk-cache-size=0'], 'want at least 1M'),
			([f'--disk-cache={tier}', '--disk-cache-size=1'], 'want at least 1M'),
			# Under the mount it would hide under the daemon's own mount;
			# in SOURCE its files would join the dataset.
			([f'--disk-cache={td.mnt}/tier'], 'is the mount point or inside it'),
			([f'--disk-cache={td.mnt}'], 'is the mount point or inside it'),
			([f'--disk-cache={td.src}/tier'], 'is SOURCE or inside it'),
		]
		for args, want in cases:
			rc, _, err = ct.run_coordfs(args + [td.src, td.mnt])
			c.eq(f'{" ".join(args)}: exit 1', rc, 1)
			c.check(f'{" ".join(args)}: says why in one line',
				want in err and len(err.strip().splitlines()) == 1, err)
			c.check(f'{" ".join(args)}: nothing mounted', not ct.is_mounted(td.mnt))
		os.makedirs(os.path.join(td.root, 'open'), mode=0o755)
		os.chmod(os.path.join(td.root, 'open'), 0o755)
		rc, _, err = ct.run_coordfs([f'--disk-cache={os.path.join(td.root, "open")}',
					     td.src, td.mnt])
		c.check('a DIR others can read is refused', rc == 1 and 'mode 0700' in err, err)
		c.check('and nothing is mounted', not ct.is_mounted(td.mnt))
		c.eq('a refused DIR is not left in MOUNTPOINT or SOURCE',
		     sorted(os.listdir(td.mnt)) + [n for n in os.listdir(td.src) if n == 'tier'], [])
		c.check('a refused size leaves no DIR behind', not os.path.exists(tier))

		# Another user's symbolic link as DIR, to a 0700 directory of this
		# user holding a file named data: never followed.
		victim = os.path.join(td.root, 'victim')
		os.mkdir(victim, 0o700)
		ct.write_file(os.path.join(victim, 'data'), b'precious')
		link = os.path.join(td.root, 'planted')
		os.symlink(victim, link)
		os.lchown(link, 65534, 65534)
		rc, _, err = ct.run_coordfs([f'--disk-cache={link}', td.src, td.mnt])
		c.check('a symbolic link of another user as DIR is refused',
			rc == 1 and 'belongs to another user (uid 65534)' in err
			and len(err.strip().splitlines()) == 1, err)
		c.check('and nothing is mounted through it', not ct.is_mounted(td.mnt))
		c.eq('and nothing is written where it points', sorted(os.listdir(victim)), ['data'])
		c.eq('its data is intact', ct.read_bytes(os.path.join(victim, 'data')), b'precious')
		# Nor through another user's directory, whose entries they may swap.
		theirs = os.path.join(td.root, 'theirs')
		os.mkdir(theirs)
		os.chown(theirs, 65534, 65534)
		rc, _, err = ct.run_coordfs([f'--disk-cache={theirs}/tier', td.src, td.mnt])
		c.check('DIR in another user\'s directory is refused',
			rc == 1 and f"'{theirs}' belongs to another user" in err, err)
		c.eq('and not made', os.listdir(theirs), [])
		# Nor in a directory anyone may write that is not sticky.
		everyone = os.path.join(td.root, 'everyone')
		os.mkdir(everyone)
		os.chmod(everyone, 0o777)
		rc, _, err = ct.run_coordfs([f'--disk-cache={everyone}/tier', td.src, td.mnt])
		c.check('DIR in a directory anyone may write is refused',
			rc == 1 and 'any user may change' in err, err)
		c.eq('and not made there', os.listdir(everyone), [])
		# Nor in one a group of other users may write (nogroup: nobody's
		# primary group); one of a group no one else is in mounts.
		group = os.path.join(td.root, 'group')
		os.mkdir(group)
		os.chown(group, 0, 65534)
		os.chmod(group, 0o775)
		rc, _, err = ct.run_coordfs([f'--disk-cache={group}/tier', td.src, td.mnt])
		c.check('DIR in a directory a shared group may write is refused',
			rc == 1 and 'other users in group 65534 may change' in err
			and len(err.strip().splitlines()) == 1, err)
		c.eq('and not made there either', os.listdir(group), [])
		# A group only root is in: no member but root, nobody else's primary.
		primary = {p.pw_gid for p in pwd.getpwall() if p.pw_uid != 0}
		alone = [g.gr_gid for g in grp.getgrall()
			 if g.gr_gid not in primary and set(g.gr_mem) <= {'root'}]
		if c.check('a group only root is in exists here', bool(alone),
			   'every group has another member'):
			os.chown(group, 0, alone[0])
			rc, _, err = ct.run_coordfs([f'--disk-cache={group}/tier', '--cache-size=1M',
						     td.src, td.mnt])
			c.check(f'DIR under a directory of group {alone[0]}, only root\'s, mounts',
				rc == 0 and ct.is_mounted(td.mnt), err)
			ct.force_unmount(td.mnt)


def test_sigkill_during_admission(c):
	"""No memory cache: every unit goes to the tier's writer; SIGKILL at a
	random moment, 20 times; then every file reads its bytes."""
	with ct.TempDirs() as td:
		files = populate(td.src, 60, 2, max_size=400 * KIB)
		tier = os.path.join(td.root, 'tier')
		opts = tier_opts(tier, cache='0')
		rng = random.Random(3)
		for i in range(20):
			rc, _, err = ct.run_coordfs(opts + [td.src, td.mnt])
			if not c.check(f'kill {i}: mounted', rc == 0, err):
				return
			pids = ct.find_daemon_pids(td.mnt)
			names = list(files)
			rng.shuffle(names)

			def reader():
				for rel in names:
					try:
						ct.read_bytes(os.path.join(td.mnt, rel))
					except OSError:
						return
			t = threading.Thread(target=reader, daemon=True)
			t.start()
			time.sleep(rng.uniform(0.01, 0.3))
			for pid in pids:
				os.kill(pid, signal.SIGKILL)
			ct.force_unmount(td.mnt, pids)
			t.join(10)
		rc, _, err = ct.run_coordfs(opts + [td.src, td.mnt])
		c.check('mounted after 20 kills', rc == 0, err)
		before = ct.disk_stats(td.mnt)['items']
		c.gt('the tier kept units across the kills', before, 0)
		ct.epoch(c, 'after 20 kills', td.mnt, files)
		c.eq('nothing served was corrupt', ct.disk_stats(td.mnt)['dropped_corrupt'], 0)
		ct.force_unmount(td.mnt)


# EXT4_IOC_SHUTDOWN (_IOR('X', 125, __u32)) with EXT4_GOING_FLAGS_NOLOGFLUSH.
EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def have_device_mapper():
	with open('/proc/devices') as f:
		return any(line.split()[-1:] == ['device-mapper'] for line in f)


class LoopFs:
	"""A small ext4 on a loop device, mounted at root/tierfs; with
	dm_name, through a dm linear target that fail() switches to dm-error."""

	def __init__(self, root, size, dm_name=None):
		self.dir = os.path.join(root, 'tierfs')
		self.img = os.path.join(root, 'tier.img')
		self.dm = None
		self.mounted = False
		self.sectors = size // 512
		with open(self.img, 'wb') as f:
			f.truncate(size)
		self.loop = subprocess.run(['losetup', '-f', '--show', self.img], check=True,
					   capture_output=True, text=True).stdout.strip()
		try:
			self.dev = self.loop
			if dm_name:
				subprocess.run(['dmsetup', 'create', dm_name, '--table',
						f'0 {self.sectors} linear {self.loop} 0'], check=True)
				self.dm = dm_name
				self.dev = f'/dev/mapper/{dm_name}'
			subprocess.run(['mkfs.ext4', '-q', '-F', self.dev], check=True)
			os.mkdir(self.dir)
			subprocess.run(['mount', self.dev, self.dir], check=True)
			self.mounted = True
		except BaseException:
			self.close()
			raise

	def fail(self):
		"""From now on I/O to the tier's file system gives EIO: dm-error
		under it, or (a kernel without device-mapper) ext4's shutdown,
		after which its every read and write is EIO."""
		if self.dm:
			subprocess.run(['dmsetup', 'reload', self.dm, '--table',
					f'0 {self.sectors} error'], check=True)
			subprocess.run(['dmsetup', 'resume', self.dm], check=True)
			return
		fd = os.open(self.dir, os.O_RDONLY)
		try:
			fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN,
				    struct.pack('I', EXT4_GOING_FLAGS_NOLOGFLUSH))
		finally:
			os.close(fd)

	def close(self):
		if self.mounted:
			subprocess.run(['umount', self.dir], check=False)
		if self.dm:
			subprocess.run(['dmsetup', 'remove', '--retry', self.dm], check=False)
		subprocess.run(['losetup', '-d', self.loop], check=False)


def test_tier_fs_fills_up(c):
	with ct.TempDirs() as td:
		lf = LoopFs(td.root, 8 * MIB)
		try:
			files = populate(td.src, 80, 4, max_size=300 * KIB)
			opts = tier_opts(os.path.join(lf.dir, 'tier'), cache='0') + \
			    ['--disk-cache-size=1G']
			logf = os.path.join(td.root, 'log')
			rc, _, err = ct.run_coordfs(opts + [f'--log-file={logf}', td.src, td.mnt])
			if not c.check('mounted with a tier larger than its file system', rc == 0, err):
				return
			ct.epoch(c, 'filling', td.mnt, files)
			ct.disk_settle(c, 'filling', td.mnt)
			ct.epoch(c, 'full', td.mnt, files)
			d = ct.disk_stats(td.mnt)
			c.gt('refused rises once the file system is full', d['refused'], 0)
			c.gt('what fitted is held', d['items'], 0)
			ct.force_unmount(td.mnt)
			with open(logf) as f:
				lines = f.readlines()
			c.eq('the tier stays on', d['disabled'], 0) or print(''.join(lines[-5:]))
			full = [l for l in lines if 'file system is full' in l]
			c.eq('one log line says the file system is full', len(full), 1)
		finally:
			lf.close()


def test_tier_device_errors(c):
	with ct.TempDirs() as td:
		dm = have_device_mapper()
		print(f'# EIO from {"dm-error (dmsetup)" if dm else "ext4 shutdown: no device-mapper in this kernel"}')
		lf = LoopFs(td.root, 32 * MIB, dm_name=f'coordfs-it-{os.getpid()}' if dm else None)
		try:
			files = populate(td.src, 30, 5)
			opts = tier_opts(os.path.join(lf.dir, 'tier'), cache='0')
			logf = os.path.join(td.root, 'log')
			rc, _, err = ct.run_coordfs(opts + [f'--log-file={logf}', td.src, td.mnt])
			if not c.check('mounted on the loop device', rc == 0, err):
				return
			vfs = os.statvfs(lf.dir)
			c.eq('--disk-cache-size defaults to 50% of DIR\'s file system',
			     ct.disk_stats(td.mnt)['capacity_bytes'], vfs.f_blocks * vfs.f_frsize // 2)
			ct.epoch(c, 'before the errors', td.mnt, files)
			ct.disk_settle(c, 'before the errors', td.mnt)
			c.gt('the tier holds units', ct.disk_stats(td.mnt)['items'], 0)
			lf.fail()
			ct.epoch(c, 'device failing', td.mnt, files)
			ct.epoch(c, 'device failed', td.mnt, files)
			c.eq('disabled = 1', ct.disk_stats(td.mnt)['disabled'], 1)
			ct.force_unmount(td.mnt)
			with open(logf) as f:
				off = [l for l in f if 'the disk tier is off' in l]
			c.eq('one log line says the tier is off', len(off), 1)
		finally:
			lf.close()


def main():
	c = ct.Checker('test_disk_tier', timeout=280)
	if os.geteuid() != 0:
		c.check('root, for loop devices and dmsetup', False)
		c.finish()
	c.group(test_remount_stale_corrupt_lock_modes, c)
	c.group(test_prefill_memory_then_disk, c)
	c.group(test_three_peers_restart_together, c)
	c.group(test_limit, c)
	c.group(test_chunk_read_once_from_disk, c)
	c.group(test_option_errors, c)
	c.group(test_data_cut_while_mounted, c)
	c.group(test_tier_without_direct_io, c)
	c.group(test_sigkill_during_admission, c)
	c.group(test_tier_fs_fills_up, c)
	c.group(test_tier_device_errors, c)
	c.finish()


if __name__ == '__main__':
	main()
