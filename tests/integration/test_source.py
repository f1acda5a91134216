# SPDX-License-Identifier: MIT
"""Integration test of the source options and of --prefill on a local SOURCE.

- --prefill on one node: 40 files of 32 KiB (exactly 32 KiB each in the
  cache's arena) under a cache of 10 files. After the mount, prefill
  admits exactly 10 files' worth: cache.used_bytes == the budget,
  prefill.done_bytes == prefill.target_bytes == the budget, each admitted
  file read from SOURCE once (source.bytes == the budget), no read counted
  as a hit or miss; then every file reads back equal to SOURCE, the 10
  prefilled ones as hits with no new SOURCE bytes for them.
- --prefill on a cluster of three nodes (peers on loopback) with caches
  big enough for everything: each node admits exactly the units rendezvous
  hashing gives it, the sum of source.bytes is the dataset (each object
  fetched once per cluster), and reading everything through node 0
  afterwards reads nothing more from SOURCE.
- --prefill with a cache smaller than every file: it ends with nothing
  fetched and target_bytes == done_bytes == 0.
- Unmounting right after a mount with --prefill (prefill may still be
  running) stops the daemon cleanly.
- The stats JSON has source.{requests, retries, latency_ms, skipped_keys}
  and prefill.{target_bytes, done_bytes, running}.
- Option errors print one line and mount nothing: S3 options with a
  local SOURCE, a bad --s3-addressing, malformed s3:// URLs.
"""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
FILE = 32 * KIB			# a multiple of the arena alignment
NFILES = 40
IN_CACHE = 10


def make_files(rng, n, size_fn):
	return {f'c{i % 4}/s{i:03d}.bin': rng.randbytes(size_fn(i))
		for i in range(n)}


def populate_with(files):
	def populate(src):
		for rel, data in files.items():
			ct.write_file(os.path.join(src, rel), data)
	return populate


def wait_prefill(c, label, mnt, timeout=60):
	done = ct.wait_until(
		lambda: not ct.stats(mnt)['prefill']['running'], timeout)
	c.check(f'{label}: prefill finished', done)
	return ct.stats(mnt)


def test_prefill_single(c):
	rng = random.Random(11)
	files = make_files(rng, NFILES, lambda i: FILE)
	budget = IN_CACHE * FILE
	with ct.Mount([f'--cache-size={budget}', '--chunk-size=1M', '--prefill'],
		      populate=populate_with(files)) as m:
		st = wait_prefill(c, 'single', m.mnt)
		c.eq('cache full to the byte', st['cache']['used_bytes'], budget)
		c.eq('items admitted', st['cache']['items'], IN_CACHE)
		c.eq('prefill.target_bytes', st['prefill']['target_bytes'], budget)
		c.eq('prefill.done_bytes', st['prefill']['done_bytes'], budget)
		c.eq('each admitted file read once (source.bytes)',
		     st['source']['bytes'], budget)
		c.eq('source.reads', st['source']['reads'], IN_CACHE)
		c.eq('source.requests == reads for a local source',
		     st['source']['requests'], st['source']['reads'])
		c.eq('prefill moves no hit', st['cache']['hits'], 0)
		c.eq('prefill moves no miss', st['cache']['misses'], 0)
		held = [rel for rel in files
			if ct.cached(os.path.join(m.mnt, rel)) == b'1']
		c.eq('files marked cached', len(held), IN_CACHE)
		for rel, data in files.items():
			got = ct.read_bytes(os.path.join(m.mnt, rel))
			if not c.check(f'{rel} reads equal to SOURCE', got == data):
				break
		s2 = ct.stats(m.mnt)
		c.eq('prefilled files were hits', s2['cache']['hits'], IN_CACHE)
		c.eq('SOURCE read only for the others',
		     s2['source']['bytes'] - st['source']['bytes'],
		     (NFILES - IN_CACHE) * FILE)
		c.eq('no source errors', s2['source']['errors'], 0)
		lat = s2['source']['latency_ms']
		c.check('latency_ms has p50 <= p99',
			0 <= lat['p50'] <= lat['p99'], str(lat))
		c.eq('source.retries', s2['source']['retries'], 0)
		c.eq('source.skipped_keys', s2['source']['skipped_keys'], 0)


def test_prefill_nothing_fits(c):
	"""A cache smaller than every file: the prefill ends with nothing
	fetched and says so (done == target), not stuck short of its target."""
	files = {f'big{i}': bytes([i]) * (2 << 20) for i in range(3)}
	with ct.Mount(['--cache-size=1M', '--prefill'], populate=populate_with(files)) as m:
		st = wait_prefill(c, 'nothing fits', m.mnt)
		c.eq('nothing fits: prefill.done_bytes', st['prefill']['done_bytes'], 0)
		c.eq('nothing fits: prefill.target_bytes ends at done_bytes',
		     st['prefill']['target_bytes'], 0)
		c.eq('nothing fits: files still read right',
		     ct.read_bytes(os.path.join(m.mnt, 'big1')), files['big1'])


def test_prefill_off(c):
	with ct.Mount(['--cache-size=1M'],
		      populate=populate_with({'a': b'x' * 100})) as m:
		st = m.stats()
		c.eq('without --prefill: prefill section all zero',
		     st['prefill'], {'target_bytes': 0, 'done_bytes': 0,
				     'running': False})
		c.eq('without --prefill: nothing admitted', st['cache']['items'], 0)


def test_prefill_cluster(c):
	rng = random.Random(12)
	chunk = 64 * KIB
	files = make_files(rng, 60, lambda i: rng.randint(1 * KIB, 150 * KIB))
	files['big/shard.tar'] = rng.randbytes(7 * chunk + 999)
	sizes = {rel: len(d) for rel, d in files.items()}
	total = sum(sizes.values())
	cache = total		# every node could hold everything it owns
	with ct.Cluster(3, populate=populate_with(files)) as cl:
		own = ct.ownership(cl.urls, sizes, chunk)
		for k in range(3):
			cl.mount(k, [f'--cache-size={cache}', f'--chunk-size={chunk}',
				     '--prefill'])
		st = [wait_prefill(c, f'node {k}', cl.mnts[k]) for k in range(3)]
		for k in range(3):
			c.eq(f'node {k}: admitted exactly its own units',
			     st[k]['cache']['items'], own[k]['units'])
			c.eq(f'node {k}: arena bytes of its own units',
			     st[k]['cache']['used_bytes'], own[k]['arena'])
			c.eq(f'node {k}: prefill.done_bytes == owned bytes',
			     st[k]['prefill']['done_bytes'], own[k]['bytes'])
			c.eq(f'node {k}: prefill.target_bytes == owned bytes',
			     st[k]['prefill']['target_bytes'], own[k]['bytes'])
		c.eq('cluster read each object once',
		     sum(s['source']['bytes'] for s in st), total)
		for rel, data in files.items():
			if not c.check(f'node 0 reads {rel} equal to SOURCE',
				       ct.read_bytes(cl.path(0, rel)) == data):
				break
		st2 = [cl.stats(k) for k in range(3)]
		c.eq('reading everything after prefill read nothing from SOURCE',
		     sum(s['source']['bytes'] for s in st2), total)


def test_unmount_during_prefill(c):
	rng = random.Random(13)
	files = make_files(rng, 800, lambda i: 8 * KIB)
	with ct.Mount(['--cache-size=64M', '--prefill'],
		      populate=populate_with(files)) as m:
		pids = m.pids
		rc = os.spawnvp(os.P_WAIT, 'fusermount3', ['fusermount3', '-u', m.mnt])
		c.eq('fusermount3 -u while prefilling', rc, 0)
		gone = ct.wait_until(lambda: not any(ct.pid_alive(p) for p in pids), 30)
		c.check('daemon exited after unmount', gone and pids, str(pids))
		c.check('nothing mounted', not ct.is_mounted(m.mnt))


def test_option_errors(c):
	with ct.TempDirs() as d:
		cases = [
			(['--endpoint=http://127.0.0.1:1', d.src, d.mnt], '--endpoint'),
			(['-o', 'region=eu-west-1', d.src, d.mnt], '--region'),
			(['--profile=p', d.src, d.mnt], '--profile'),
			(['--no-sign-request', d.src, d.mnt], '--no-sign-request'),
			(['--s3-addressing=path', d.src, d.mnt], '--s3-addressing'),
			(['--s3-addressing=sideways', 's3://bucket', d.mnt],
			 "'sideways'"),
			(['s3://', d.mnt], 'bucket name'),
			(['s3://bad*bucket/x', d.mnt], 'bucket name'),
		]
		for args, word in cases:
			rc, out, err = ct.run_coordfs(args)
			lines = [ln for ln in err.splitlines() if ln.strip()]
			c.check(f'{" ".join(args[:-1])}: exits non-zero', rc not in (0, None),
				f'rc={rc}')
			c.check(f'{" ".join(args[:-1])}: one line naming {word}',
				len(lines) == 1 and word in lines[0], repr(err))
			c.check(f'{" ".join(args[:-1])}: nothing mounted',
				not ct.is_mounted(d.mnt))
	rc, out, err = ct.run_coordfs(['--help'])
	for opt in ('--prefill', '--endpoint', '--region', '--profile',
		    '--no-sign-request', '--s3-addressing'):
		c.check(f'--help documents {opt}', rc == 0 and opt in out)


def main():
	c = ct.Checker('source', timeout=280)
	c.group(test_option_errors, c)
	c.group(test_prefill_off, c)
	c.group(test_prefill_single, c)
	c.group(test_prefill_nothing_fits, c)
	c.group(test_prefill_cluster, c)
	c.group(test_unmount_during_prefill, c)
	c.finish()


if __name__ == '__main__':
	main()
