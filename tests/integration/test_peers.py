# SPDX-License-Identifier: MIT
"""Integration test of the partitioned cache (coordfs(1), PEERS) with real daemons.

Three coordfs nodes over one SOURCE (about 150 files of random bytes,
1-200 KiB, plus one file of many chunks; --chunk-size=64K), peers on
loopback, each node with a cache of 40% of the dataset, so the cluster's
cache (120%) holds everything. Epoch 1: node k reads shard k (files i
with i % 3 == k), 4 reading threads per node. Epochs 2 and 3: every node
reads another shard, in a random order. Checks: every byte read equals
SOURCE; SOURCE is read once per cluster (the sum of source.bytes equals
the dataset after epoch 1 and does not grow after); each node's cache
admitted exactly the units that rendezvous hashing gives it and stays
within its budget; peers fetched and served bytes, and every fetched
byte was served by someone. After an idle pause longer than the
server's keep-alive timeout, epoch 4 still has no peer errors.

Ownership depends on the peer URLs, so on the ports: the test picks free
ports for which no node owns more than its cache can hold (a 3-way split
of ~300 units is within 40% almost always), otherwise the premise "the
cluster's cache holds everything" would not hold and the test would
measure the imbalance instead of the daemon.
"""

import hashlib
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
CHUNK = 64 * KIB
NODES = 3
NFILES = 150
CACHE_FRACTION = 0.40
READERS = 4		# reading threads per node
IDLE_S = 32		# > the peer server's 30 s keep-alive timeout


def make_tree(seed):
	"""{relpath: bytes} of the dataset."""
	rng = random.Random(seed)
	files = {}
	for i in range(NFILES):
		rel = f'class{i % 7:02d}/sample_{i:04d}.bin'
		files[rel] = rng.randbytes(rng.randint(1 * KIB, 200 * KIB))
	# larger than several chunks, with a partial last chunk
	files['shards/big_000.tar'] = rng.randbytes(9 * CHUNK + 4321)
	return files


def pick_ports(sizes, capacity):
	"""Free ports for which every node's owned units fit its cache."""
	for attempt in range(50):
		ports = ct.free_ports(NODES)
		urls = [ct.peer_url(p) for p in ports]
		own = ct.ownership(urls, sizes, CHUNK)
		if max(o['arena'] for o in own) <= capacity:
			return ports, own, attempt
	return None, None, 50


def read_shard(cl, k, rels, expect, results, slot):
	"""Node k reads rels from its mount: results[slot] = [(rel, ok, why)]."""
	out = []
	for rel in rels:
		try:
			with open(cl.path(k, rel), 'rb', buffering=0) as f:
				data = f.read()
			got = hashlib.sha256(data).hexdigest()
			out.append((rel, got == expect[rel],
				    f'sha {got[:12]} len {len(data)}'))
		except OSError as e:
			out.append((rel, False, f'{type(e).__name__}: {e}'))
	results[slot] = out


def epoch(c, cl, name, assignment, expect):
	"""Every node k reads assignment[k], with READERS threads per node
	(like DataLoader workers), all nodes at once; checks the bytes."""
	results = [None] * (NODES * READERS)
	threads = [threading.Thread(target=read_shard,
				    args=(cl, k, assignment[k][j::READERS],
					  expect, results, k * READERS + j))
		   for k in range(NODES) for j in range(READERS)]
	t0 = time.monotonic()
	for t in threads:
		t.start()
	for t in threads:
		t.join()
	took = time.monotonic() - t0
	for k in range(NODES):
		done = [r for j in range(READERS)
			for r in (results[k * READERS + j] or [])]
		bad = [(rel, why) for rel, ok, why in done if not ok]
		c.check(f'{name}: node {k} read {len(done)} files, all '
			f'bytes equal SOURCE', len(done) ==
			len(assignment[k]) and not bad, f'{len(bad)} bad, e.g. '
			f'{bad[:3]}')
	print(f'# {name} took {took:.2f}s')


def test_cluster(c):
	seed = int(time.time())
	print(f'# dataset seed {seed}')
	files = make_tree(seed)
	sizes = {rel: len(data) for rel, data in files.items()}
	expect = {rel: hashlib.sha256(data).hexdigest()
		  for rel, data in files.items()}
	dataset = sum(sizes.values())
	capacity = int(dataset * CACHE_FRACTION)
	ports, own, attempts = pick_ports(sizes, capacity)
	if not c.check('found ports whose ownership fits 40% caches',
		       ports is not None, f'no balanced split in {attempts} '
		       'tries: the rendezvous hash is badly skewed'):
		return
	print(f'# dataset {dataset} bytes, {len(files)} files, cache '
	      f'{capacity} bytes per node; owned bytes per node '
	      f'{[o["bytes"] for o in own]} (port tries: {attempts + 1})')

	def populate(src):
		for rel, data in files.items():
			ct.write_file(os.path.join(src, rel), data)

	rels = sorted(files)
	with ct.Cluster(NODES, populate=populate, ports=ports) as cl:
		for k in range(NODES):
			cl.mount(k, [f'--cache-size={capacity}',
				     '--chunk-size=64K'])
		c.check('3 nodes mounted', all(ct.is_mounted(m)
						for m in cl.mnts))
		st = [cl.stats(k) for k in range(NODES)]
		for k in range(NODES):
			c.eq(f'node {k}: cache capacity_bytes',
			     st[k]['cache']['capacity_bytes'], capacity)
			c.eq(f'node {k}: peers.nodes urls',
			     [n['url'] for n in st[k]['peers']['nodes']],
			     cl.urls)
			c.eq(f'node {k}: nothing read before epoch 1',
			     st[k]['source']['bytes'], 0)

		rng = random.Random(seed ^ 0x5eed)
		shards = [[rel for i, rel in enumerate(rels) if i % NODES == s]
			  for s in range(NODES)]
		epoch(c, cl, 'epoch 1', [rng.sample(shards[k], len(shards[k]))
					 for k in range(NODES)], expect)
		st1 = [cl.stats(k) for k in range(NODES)]
		src1 = sum(s['source']['bytes'] for s in st1)
		c.eq('epoch 1: SOURCE read once per cluster (sum of '
		     'source.bytes == dataset bytes)', src1, dataset)
		for k in range(NODES):
			c.eq(f'epoch 1: node {k} holds exactly the units it owns '
			     '(cache.items)', st1[k]['cache']['items'],
			     own[k]['units'])
			c.eq(f'epoch 1: node {k} cache used_bytes == its owned '
			     'units (64-byte aligned)',
			     st1[k]['cache']['used_bytes'], own[k]['arena'])
			c.eq(f'epoch 1: node {k} refused nothing',
			     st1[k]['cache']['refused'], 0)

		# epochs 2 and 3: each node reads the two shards it has not
		# read yet, in random orders
		rot = rng.sample([1, 2], 2)
		for e, r in zip((2, 3), rot):
			assign = []
			for k in range(NODES):
				sh = shards[(k + r) % NODES]
				assign.append(rng.sample(sh, len(sh)))
			epoch(c, cl, f'epoch {e}', assign, expect)

		st3 = [cl.stats(k) for k in range(NODES)]
		src3 = sum(s['source']['bytes'] for s in st3)
		c.eq('epochs 2-3: sum of source.bytes did not grow since '
		     'epoch 1', src3, src1)
		fetches = sum(s['peers']['fetches'] for s in st3)
		served = sum(s['peers']['served'] for s in st3)
		c.gt('peers.fetches > 0 somewhere', fetches, 0)
		c.gt('peers.served > 0 somewhere', served, 0)
		c.eq('sum of peers.bytes == sum of peers.served_bytes',
		     sum(s['peers']['bytes'] for s in st3),
		     sum(s['peers']['served_bytes'] for s in st3))
		for k in range(NODES):
			p = st3[k]['peers']
			ca = st3[k]['cache']
			c.eq(f'node {k}: peers.errors', p['errors'], 0)
			c.gt(f'node {k}: served other nodes', p['served'], 0)
			c.gt(f'node {k}: fetched from other nodes',
			     p['fetches'], 0)
			c.check(f'node {k}: every peer up',
				all(n['up'] for n in p['nodes']),
				str(p['nodes']))
			c.le(f'node {k}: cache used_bytes <= capacity',
			     ca['used_bytes'], ca['capacity_bytes'])
			c.gt(f'node {k}: cache hits in epochs 2-3', ca['hits'],
			     st1[k]['cache']['hits'])
			c.eq(f'node {k}: source.errors', st3[k]['source']['errors'],
			     0)
			c.eq(f'node {k}: stats pid is the daemon',
			     st3[k].get('pid'), cl.pids[k])

		# a pause longer than the server's keep-alive timeout (30 s,
		# like a validation phase between epochs): the clients'
		# cached connections are closed by now, and must be replaced
		# without a peer error or a SOURCE read
		time.sleep(IDLE_S)
		rot = rng.sample(range(NODES), NODES)
		epoch(c, cl, f'epoch 4 after {IDLE_S}s idle',
		      [rng.sample(shards[rot[k]], len(shards[rot[k]]))
		       for k in range(NODES)], expect)
		st5 = [cl.stats(k) for k in range(NODES)]
		c.eq('epoch 4 after idle: no peer errors',
		     [s['peers']['errors'] for s in st5], [0] * NODES)
		c.eq('epoch 4 after idle: SOURCE not read again',
		     sum(s['source']['bytes'] for s in st5), src1)
		c.check('epoch 4 after idle: every peer still up',
			all(n['up'] for s in st5 for n in s['peers']['nodes']))

		# the dataset as a whole, through one node, still exact
		bad = [rel for rel in rels
		       if ct.sha256_file(cl.path(1, rel)) != expect[rel]]
		c.check('node 1 reads the whole dataset exactly once more',
			not bad, f'{len(bad)} differ: {bad[:3]}')
		st4 = [cl.stats(k) for k in range(NODES)]
		c.eq('... still without reading SOURCE again',
		     sum(s['source']['bytes'] for s in st4), src1)


def main():
	c = ct.Checker('peers', timeout=240)
	c.group(test_cluster, c)
	c.finish()


if __name__ == '__main__':
	main()
