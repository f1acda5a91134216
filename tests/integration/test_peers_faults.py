# SPDX-License-Identifier: MIT
"""Integration test of peer failures (coordfs(1), PEERS: "a reader never sees an
error because a peer failed").

1. Four real nodes; nodes 0 and 3 read the whole dataset while, in the
   middle of that epoch, node 2 is killed with SIGKILL and node 1 is
   stopped with SIGSTOP. The readers finish with correct bytes and no
   errors, and mark both nodes down. After SIGCONT, node 1 is used again
   once its back-off (1 s, doubling up to 30 s) expires: its served
   counter grows and the readers' peers.bytes grows. Node 2 restarts on
   its port with an empty cache and is used again too.
   A node stopped with SIGTERM while serving exits cleanly; its reader
   never notices.
2. A fake misbehaving peer (fake_peer.py) in a peer slot, serving a copy
   of the dataset with the same sizes and mtimes (so the same snapshot
   ETags), in every failing mode (short body, wrong or short
   Content-Length, 500, hang, garbage, whole file instead of a range,
   shifted range, a body that trickles in slower than the timeout, a 307
   to an honest answer, never followed): the
   real node reads correct bytes, counts peer errors and marks the slot
   down. A fake whose copy differs (every byte inverted, its own mtimes)
   but frames its answers right: 0 wrong bytes, every mismatch counted,
   the slot stays up. With --secret-file, an impostor (the fake in a
   node's slot, same copy metadata, every byte inverted, no MAC of the
   secret on its answers): 0 wrong bytes, errors counted, marked down.
3. A peer slot with no server at all from the start: the mount comes up
   and reads correct bytes.
4. A slow peer (fake_peer.py "slow": right answers, each 1.5 s late, well
   inside the 5 s timeout): after three slow answers in a row it is marked
   down as slow (peers.slow_downs, its node "slow": true), reads of its
   files go to SOURCE at once, and its re-probe, slow again, puts it back
   in back-off. No errors, every byte right.

A stopped peer costs a reader the client's whole timeout (5 s) before it
is marked down, so file counts stay small.
"""

import hashlib
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
CHUNK = 64 * KIB
# --no-kernel-cache: the tests read the same files again and again to see
# the daemons go to their peers (or fail over); the kernel's page cache
# would answer those reads itself.
OPTS = ['--cache-size=16M', '--chunk-size=64K', '--no-kernel-cache']
FAKE_MODES = ['short', 'wronglen', 'shortlen', '500', 'hang', 'garbage',
	      'norange', 'badrange', 'trickle', 'redirect']


def make_files(rng, n, prefix='f'):
	files = {f'{prefix}{i % 4}/{prefix}_{i:03d}.bin':
		 rng.randbytes(rng.randint(1 * KIB, 40 * KIB)) for i in range(n)}
	files[f'{prefix}_big.bin'] = rng.randbytes(3 * CHUNK + 99)
	return files


def add_owned(cl, files, rng, node, want, prefix):
	"""Add files to cl's SOURCE (before any mount) until node owns at least
	want of them: ports are picked at run time, so ownership of a fixed set
	of names is chance (12 files over 3 nodes: none for a node ~1% of runs)."""
	for i in range(1000):
		if sum(ct.unit_owner(cl.urls, r) == node for r in files) >= want:
			return
		rel = f'{prefix}_owned_{i:03d}.bin'
		if ct.unit_owner(cl.urls, rel) == node:
			files[rel] = rng.randbytes(rng.randint(1 * KIB, 40 * KIB))
			ct.write_file(os.path.join(cl.src, rel), files[rel])


def populate_with(files):
	def populate(src):
		for rel, data in files.items():
			ct.write_file(os.path.join(src, rel), data)
	return populate


def bad_results(res, mnt, expect):
	"""[(relpath, result)] of reads that failed or gave wrong bytes."""
	bad = []
	for p, r in res.items():
		rel = os.path.relpath(p, mnt)
		if r[0] != 'ok' or r[1] != expect[rel]:
			bad.append((rel, r))
	return bad


def test_kill_and_stop(c):
	seed = int(time.time())
	rng = random.Random(seed)
	files = make_files(rng, 40)
	expect = {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()}
	rels = sorted(files)
	readers, victim_kill, victim_stop = (0, 3), 2, 1
	with ct.Cluster(4, populate=populate_with(files)) as cl:
		for k in range(4):
			cl.mount(k, OPTS)
		owner = {rel: ct.unit_owner(cl.urls, rel) for rel in rels}
		n_own = [sum(1 for r in rels if owner[r] == k) for k in range(4)]
		print(f'# seed {seed}; files owned per node {n_own}')
		if not c.check('nodes 1 and 2 own files', n_own[1] and n_own[2]
			       and any(owner[r] == victim_stop and
				       len(files[r]) <= CHUNK for r in rels),
			       str(n_own)):
			return
		# warm-up so that every node has served something
		marker = os.path.join(cl.root, 'faults_done')
		rds = {k: ct.ManyReader([cl.path(k, r) for r in
					 rng.sample(rels, len(rels))],
					pace=0.05, marker=marker)
		       for k in readers}
		ok = ct.wait_until(lambda: all(rd.done_count() >= len(rels) // 3
					       for rd in rds.values()), 30)
		c.check('readers are a third through the epoch', ok)
		mid = {k: rd.done_count() for k, rd in rds.items()}
		cl.kill9(victim_kill)
		cl.stop(victim_stop)
		t_fault = time.monotonic()
		with open(marker, 'w'):
			pass
		print(f'# faults injected after {mid} files')
		c.check(f'node {victim_kill} is dead',
			not ct.pid_alive(cl.pids[victim_kill]))
		for k, rd in rds.items():
			res = rd.results(60)
			bad = bad_results(res, cl.mnts[k], expect)
			c.check(f'node {k} finished the epoch: {len(rels)} files, '
				'correct bytes, no errors', not bad,
				f'{len(bad)} bad: {bad[:3]}')
			c.check(f'node {k} kept reading after the faults '
				f'({mid[k]} files before)', mid[k] < len(rels))
		took = time.monotonic() - t_fault
		print(f'# epoch finished {took:.1f}s after the faults')
		c.le('the faults cost the epoch less than 20 s', took, 20)
		for k in readers:
			st = cl.stats(k)
			nodes = st['peers']['nodes']
			c.eq(f'node {k}: killed node {victim_kill} is down',
			     nodes[victim_kill]['up'], False)
			c.eq(f'node {k}: stopped node {victim_stop} is down',
			     nodes[victim_stop]['up'], False)
			c.eq(f'node {k}: node {readers[1 - readers.index(k)]} '
			     'still up', nodes[readers[1 - readers.index(k)]]['up'],
			     True)
			c.gt(f'node {k}: peer errors counted', st['peers']['errors'],
			     0)
			c.eq(f'node {k}: no SOURCE errors', st['source']['errors'],
			     0)

		# SIGCONT: node 1 is used again once its back-off expires
		base_reader = cl.stats(0)['peers']['bytes']
		cl.cont(victim_stop)
		t_cont = time.monotonic()
		st1 = None
		try:
			base_served = cl.stats(victim_stop)['peers']['served']
		except OSError as e:
			c.check('continued node answers its stats xattr', False,
				str(e))
			return
		# single-unit files wholly owned by the stopped node, so
		# that node 0's peer bytes can only come from it
		its = [r for r in rels if owner[r] == victim_stop and
		       len(files[r]) <= CHUNK]
		i = 0
		used_again = False
		errors = []
		while time.monotonic() - t_cont < 40:
			rel = its[i % len(its)]
			i += 1
			r = ct.read_in_child(cl.path(0, rel), timeout=15)
			if r[0] != 'ok' or r[1] != expect[rel]:
				errors.append((rel, r))
			st0 = cl.stats(0)
			st1 = cl.stats(victim_stop)
			if (st0['peers']['nodes'][victim_stop]['up'] and
			    st1['peers']['served'] > base_served and
			    st0['peers']['bytes'] > base_reader):
				used_again = True
				break
			time.sleep(0.2)
		took = time.monotonic() - t_cont
		print(f'# node {victim_stop} used again after {took:.1f}s '
		      f'({i} reads)')
		c.check(f'after SIGCONT node {victim_stop} is up in node 0\'s '
			'stats, serves again and node 0 fetches bytes from it '
			'(within 40 s)', used_again,
			f'up={st0["peers"]["nodes"][victim_stop]["up"]}, served '
			f'{st1 and st1["peers"]["served"]} (was {base_served}), '
			f'node 0 peer bytes {st0["peers"]["bytes"]} (was '
			f'{base_reader})')
		c.check('reads during the recovery were correct', not errors,
			f'{errors[:3]}')
		# the continued node itself reads correctly too (dead peer 2)
		rd = ct.ManyReader([cl.path(victim_stop, r) for r in rels])
		bad = bad_results(rd.results(60), cl.mnts[victim_stop], expect)
		c.check(f'continued node {victim_stop} reads the dataset '
			'correctly', not bad, f'{bad[:3]}')

		# the killed node restarts on the same port with an empty
		# cache: node 0 uses it again once its back-off expires
		ct.force_unmount(cl.mnts[victim_kill])
		c.check(f'killed node {victim_kill}: stale mount removed',
			not ct.is_mounted(cl.mnts[victim_kill]))
		cl.mount(victim_kill, OPTS)
		its = [r for r in rels if owner[r] == victim_kill and
		       len(files[r]) <= CHUNK]
		t0 = time.monotonic()
		used_again, errors, i = False, [], 0
		while its and time.monotonic() - t0 < 40:
			rel = its[i % len(its)]
			i += 1
			r = ct.read_in_child(cl.path(0, rel), timeout=15)
			if r[0] != 'ok' or r[1] != expect[rel]:
				errors.append((rel, r))
			st0 = cl.stats(0)
			st2 = cl.stats(victim_kill)
			if (st0['peers']['nodes'][victim_kill]['up'] and
			    st2['peers']['served'] > 0):
				used_again = True
				break
			time.sleep(0.2)
		c.check(f'restarted node {victim_kill} serves node 0 again '
			f'(after {time.monotonic() - t0:.1f}s, {i} reads)',
			used_again, f'{len(its)} files it owns')
		c.check('reads around the restart were correct', not errors,
			f'{errors[:3]}')


def test_graceful_stop(c):
	"""SIGTERM a node while another reads through it: it unmounts and
	exits; the reader never notices."""
	rng = random.Random(int(time.time()) ^ 3)
	files = make_files(rng, 30, prefix='t')
	expect = {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()}
	rels = sorted(files)
	with ct.Cluster(2, populate=populate_with(files)) as cl:
		for k in range(2):
			cl.mount(k, OPTS)
		marker = os.path.join(cl.root, 'go')
		rd = ct.ManyReader([cl.path(0, r) for r in rels] * 2, pace=0.03,
				   marker=marker)
		ct.wait_until(lambda: rd.done_count() >= len(rels) // 2, 30)
		pid = cl.pids[1]
		cl.signal(1, signal.SIGTERM)
		gone = ct.wait_until(lambda: not ct.pid_alive(pid), 10)
		c.check('SIGTERM: the serving node exits within 10 s', gone)
		c.check('SIGTERM: its mount is gone',
			not ct.is_mounted(cl.mnts[1]))
		open(marker, 'w').close()
		bad = bad_results(rd.results(60), cl.mnts[0], expect)
		c.check('the reader on the other node saw only correct bytes '
			'(2 passes over the dataset)', not bad, f'{bad[:3]}')
		st = cl.stats(0)
		c.eq('the reader marks the stopped node down',
		     st['peers']['nodes'][1]['up'], False)
		c.gt('the reader fetched from it before', st['peers']['bytes'], 0)


# One mtime for SOURCE and the fake's copy: the same snapshot ETags.
MTIME_NS = 1_600_000_000_123_456_789


def port_apart(fake):
	"""A free port for the real node, other than the fake's."""
	port0 = ct.free_ports(1)[0]
	while port0 == fake.port:
		port0 = ct.free_ports(1)[0]
	return port0


def populate_at(files, mtime_ns):
	def populate(src):
		for rel, data in files.items():
			ct.write_file(os.path.join(src, rel), data, mtime_ns=mtime_ns)
	return populate


def fake_mode(c, mode, files, expect, fakedir):
	rels = sorted(files)
	with ct.FakePeer(mode, directory=fakedir) as fake:
		port0 = port_apart(fake)
		with ct.Cluster(2, populate=populate_at(files, MTIME_NS),
				ports=[port0, fake.port]) as cl:
			owned = [r for r in rels if any(
				ct.unit_owner(cl.urls, r, k) == 1 for k, _ in
				ct.file_units(len(files[r]), CHUNK))]
			cl.mount(0, OPTS)
			t0 = time.monotonic()
			rd = ct.ManyReader([cl.path(0, r) for r in rels])
			res = rd.results(60)
			took = time.monotonic() - t0
			bad = bad_results(res, cl.mnts[0], expect)
			c.check(f'fake peer "{mode}": {len(rels)} files correct, no '
				f'errors ({len(owned)} owned by the fake, '
				f'{took:.1f}s)', not bad, f'{bad[:3]}')
			st = cl.stats(0)
			c.gt(f'fake peer "{mode}": peers.errors counted',
			     st['peers']['errors'], 0)
			c.eq(f'fake peer "{mode}": no mismatch (same snapshot)',
			     st['peers']['mismatches'], 0)
			c.eq(f'fake peer "{mode}": marked down',
			     st['peers']['nodes'][1]['up'], False)
			if mode != 'norange':
				# (a whole small file asked whole is a right
				# answer even from a fake ignoring Range)
				c.eq(f'fake peer "{mode}": no bytes taken from it',
				     st['peers']['bytes'], 0)
				c.eq(f'fake peer "{mode}": every byte from SOURCE',
				     st['source']['bytes'],
				     sum(len(d) for d in files.values()))
			# read again: still right (the fake is in back-off or
			# probed again; either way SOURCE answers)
			res = ct.ManyReader([cl.path(0, r) for r in owned[:4]]
					    ).results(30)
			bad = bad_results(res, cl.mnts[0], expect)
			c.check(f'fake peer "{mode}": a second read is correct',
				not bad, f'{bad[:3]}')


def fake_flip(c, files, expect, fakedir):
	"""The fake's copy differs from SOURCE (same sizes, every byte
	inverted, other mtimes) and it frames every answer right, with the
	ETag of its own copy: the node takes none of its bytes."""
	rels = sorted(files)
	with ct.FakePeer('flip', directory=fakedir) as fake:
		port0 = port_apart(fake)
		with ct.Cluster(2, populate=populate_at(files, MTIME_NS),
				ports=[port0, fake.port]) as cl:
			owned = [r for r in rels if any(
				ct.unit_owner(cl.urls, r, k) == 1 for k, _ in
				ct.file_units(len(files[r]), CHUNK))]
			cl.mount(0, OPTS)
			for rnd in range(2):
				res = ct.ManyReader([cl.path(0, r) for r in rels]
						    ).results(60)
				bad = bad_results(res, cl.mnts[0], expect)
				c.check(f'fake peer "flip", pass {rnd + 1}: '
					f'{len(rels)} files, 0 wrong bytes '
					f'({len(owned)} owned by the fake)', not bad,
					f'{bad[:3]}')
			st = cl.stats(0)
			c.ge('fake peer "flip": every fetch was a counted '
			     'mismatch', st['peers']['mismatches'],
			     st['peers']['fetches'])
			c.gt('fake peer "flip": mismatches counted',
			     st['peers']['mismatches'], 0)
			c.eq('fake peer "flip": no bytes taken from it',
			     st['peers']['bytes'], 0)
			c.eq('fake peer "flip": it stays up (one version of a '
			     'file differs, the node did not fail)',
			     st['peers']['nodes'][1]['up'], True)
			c.eq('fake peer "flip": no SOURCE errors',
			     st['source']['errors'], 0)


def fake_impostor(c, files, expect, fakedir):
	"""With --secret-file, something on a node's address that does not
	know the secret (a local user's listener on a node whose daemon is
	down): same copy metadata, so the same ETags and framing, but every
	byte inverted. Its answers carry no MAC of the secret: the node takes
	none of its bytes, counts the errors and marks it down."""
	import tempfile
	rels = sorted(files)
	fd, secret = tempfile.mkstemp(prefix='coordfs-secret-')
	os.write(fd, b'impostor-test-secret-0123456789')
	os.close(fd)
	try:
		with ct.FakePeer('flip', directory=fakedir) as fake:
			port0 = port_apart(fake)
			with ct.Cluster(2, populate=populate_at(files, MTIME_NS),
					ports=[port0, fake.port]) as cl:
				cl.mount(0, OPTS + ['--secret-file=' + secret])
				res = ct.ManyReader([cl.path(0, r) for r in rels]).results(60)
				bad = bad_results(res, cl.mnts[0], expect)
				c.check(f'impostor without the secret: {len(rels)} files, 0 wrong '
					'bytes', not bad, f'{bad[:3]}')
				st = cl.stats(0)
				c.eq('impostor: no bytes taken from it', st['peers']['bytes'], 0)
				c.gt('impostor: its answers counted as errors',
				     st['peers']['errors'], 0)
				c.eq('impostor: marked down', st['peers']['nodes'][1]['up'], False)
	finally:
		os.unlink(secret)


def test_fake_peer(c):
	import shutil
	import tempfile
	rng = random.Random(int(time.time()) ^ 99)
	files = make_files(rng, 10, prefix='g')
	# more multi-chunk files: the fake surely owns a chunk that is
	# asked with a true range (what "norange" must get wrong)
	for i in range(3):
		files[f'g_big{i}.bin'] = rng.randbytes(3 * CHUNK + 99 + i)
	expect = {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()}
	fakedir = tempfile.mkdtemp(prefix='coordfs-fake-')
	flipdir = tempfile.mkdtemp(prefix='coordfs-flip-')
	try:
		populate_at(files, MTIME_NS)(fakedir)
		populate_at(files, MTIME_NS + 1_000_000_000)(flipdir)
		# control: the fake in "ok" mode, serving the same copy, is
		# trusted and right, which shows the fake is really asked
		with ct.FakePeer('ok', directory=fakedir) as fake:
			port0 = port_apart(fake)
			with ct.Cluster(2, populate=populate_at(files, MTIME_NS),
					ports=[port0, fake.port]) as cl:
				cl.mount(0, OPTS)
				res = ct.ManyReader([cl.path(0, r) for r in
						     sorted(files)]).results(60)
				bad = bad_results(res, cl.mnts[0], expect)
				c.check('control: correct bytes through the fake '
					'in "ok" mode', not bad, f'{bad[:3]}')
				st = cl.stats(0)
				c.gt('control: the fake peer in "ok" mode is '
				     'fetched from', st['peers']['bytes'], 0)
				c.eq('control: ... without errors',
				     st['peers']['errors'], 0)
		fake_flip(c, files, expect, flipdir)
		fake_impostor(c, files, expect, fakedir)
		for mode in FAKE_MODES:
			fake_mode(c, mode, files, expect, fakedir)
	finally:
		shutil.rmtree(fakedir, ignore_errors=True)
		shutil.rmtree(flipdir, ignore_errors=True)


def test_dead_at_start(c):
	rng = random.Random(int(time.time()) ^ 7)
	files = make_files(rng, 12, prefix='h')
	with ct.Cluster(3, populate=populate_with(files)) as cl:
		add_owned(cl, files, rng, 1, 3, 'h')
		expect = {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()}
		# nodes 1 and 2 never start: nothing listens on their ports
		cl.mount(0, OPTS)
		c.check('mount with two dead peers comes up',
			ct.is_mounted(cl.mnts[0]))
		rd = ct.ManyReader([cl.path(0, r) for r in sorted(files)])
		bad = bad_results(rd.results(60), cl.mnts[0], expect)
		c.check('dead peers at start: every file correct', not bad,
			f'{bad[:3]}')
		st = cl.stats(0)
		c.gt('dead peers at start: peer errors counted',
		     st['peers']['errors'], 0)
		c.eq('dead peers at start: both marked down',
		     [n['up'] for n in st['peers']['nodes']], [True, False, False])
		# a node that comes up later is used once its back-off expires
		cl.mount(1, OPTS)
		its = [r for r in sorted(files) if ct.unit_owner(cl.urls, r) == 1]
		c.ge('node 1 owns files to serve', len(its), 3)
		t0 = time.monotonic()
		used = False
		while its and time.monotonic() - t0 < 40:
			for r in its:
				if ct.sha256_file(cl.path(0, r)) != expect[r]:
					c.check(f'late node: {r} correct', False)
			if cl.stats(1)['peers']['served'] > 0:
				used = True
				break
			time.sleep(0.3)
		c.check(f'a peer started late is used within 40 s (after '
			f'{time.monotonic() - t0:.1f}s)', used, f'{len(its)} files')


def test_slow_peer(c):
	import shutil
	import tempfile
	rng = random.Random(int(time.time()) ^ 1234)
	fakedir = tempfile.mkdtemp(prefix='coordfs-slow-')
	try:
		with ct.FakePeer('slow', directory=fakedir,
				 env={'FAKE_PEER_DELAY': '1.5'}) as fake:
			port0 = port_apart(fake)
			with ct.Cluster(2, ports=[port0, fake.port]) as cl:
				# small files (one unit each) the fake owns, in
				# SOURCE and the fake's copy, with the same mtimes
				owned = {}
				for i in range(2000):
					rel = f's_{i:04d}.bin'
					if ct.unit_owner(cl.urls, rel) != 1:
						continue
					owned[rel] = rng.randbytes(rng.randint(KIB, 20 * KIB))
					for root in (cl.src, fakedir):
						ct.write_file(os.path.join(root, rel), owned[rel],
							      mtime_ns=MTIME_NS)
					if len(owned) == 10:
						break
				expect = {r: hashlib.sha256(d).hexdigest()
					  for r, d in owned.items()}
				rels = sorted(owned)
				cl.mount(0, OPTS)
				took = []
				for r in rels[:8]:
					t0 = time.monotonic()
					got = ct.sha256_file(cl.path(0, r))
					took.append(time.monotonic() - t0)
					c.check(f'slow peer: {r} correct', got == expect[r])
				c.check('slow peer: the first three reads waited on it',
					all(t >= 1.4 for t in took[:3]), f'{took}')
				c.check('slow peer: then reads stop waiting (SOURCE)',
					all(t < 0.5 for t in took[3:]), f'{took}')
				st = cl.stats(0)
				c.eq('slow peer: marked down once', st['peers']['slow_downs'], 1)
				c.eq('slow peer: three slow answers',
				     st['peers']['slow_answers'], 3)
				c.eq('slow peer: not up', st['peers']['nodes'][1]['up'], False)
				c.eq('slow peer: shown as slow',
				     st['peers']['nodes'][1].get('slow'), True)
				c.eq('slow peer: no errors (its answers were right)',
				     st['peers']['errors'], 0)
				c.ge('slow peer: its files counted as fallbacks',
				     st['peers']['fallbacks'], 5)
				# after the back-off (1 s) one read probes it: slow
				# again, it goes back down and the rest read SOURCE
				time.sleep(1.2)
				t0 = time.monotonic()
				for r in rels[8:]:
					c.check(f'slow peer: {r} correct after the probe',
						ct.sha256_file(cl.path(0, r)) == expect[r])
				st = cl.stats(0)
				c.eq('slow peer: its re-probe was slow: down again',
				     st['peers']['slow_downs'], 2)
				c.check('slow peer: only the probe waited',
					time.monotonic() - t0 < 2.5,
					f'{time.monotonic() - t0:.1f}s')
	finally:
		shutil.rmtree(fakedir, ignore_errors=True)


def main():
	c = ct.Checker('peers_faults', timeout=240)
	c.group(test_kill_and_stop, c)
	c.group(test_graceful_stop, c)
	c.group(test_fake_peer, c)
	c.group(test_dead_at_start, c)
	c.group(test_slow_peer, c)
	c.finish()


if __name__ == '__main__':
	main()
