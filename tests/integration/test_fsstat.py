# SPDX-License-Identifier: MIT
"""Integration test of fsstat on a real mount: passes over the dataset.

A dataset of 40 files (D bytes, summed here) is mounted with a cache of
half of it. `fsstat --watch` runs while the test reads every file once in
a random order, waits until fsstat has seen the end of that pass, reads
everything again in another order, and waits again. The watch output
must then show pass 1 and pass 2 with the bytes the daemon's own
`source.bytes` counter (read by the test between the passes) gives for
each, against the MinIO optimum (D for the first pass, D minus the cache
after it); plain fsstat must report 2.00 passes and the dataset's size, also when
given a directory inside the mount.
Expected texts use fsstat's size format (common/size.c) on numbers this
test computed, never numbers copied from fsstat.

A node of a 1,024-node cluster with real-length host names: its stats
xattr (the kernel caps a value at 64 KiB) still reads, lists only the
nodes not up with node_count/nodes_up, fsstat shows the cluster, and the
peer port's GET /v1/stats keeps every node.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

NFILES = 40


def human(n):
	"""fsstat's size text (common/size.c size_format)."""
	units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
	v, u = float(n), 0
	while v >= 1024 and u < 4:
		v /= 1024
		u += 1
	return f'{int(n)} B' if u == 0 else f'{v:.1f} {units[u]}'


def populate(src):
	rng = random.Random(13)
	for i in range(NFILES):
		ct.write_file(os.path.join(src, f'class{i % 4}', f'f{i}.bin'),
			      ct.random_bytes(rng, rng.randint(20000, 200000)))


def dataset_bytes(src):
	return sum(os.path.getsize(os.path.join(d, f))
		   for d, _, fs in os.walk(src) for f in fs)


def read_pass(mnt, files, rng):
	order = list(files)
	rng.shuffle(order)
	n = 0
	for rel in order:
		with open(os.path.join(mnt, rel), 'rb') as f:
			while True:
				b = f.read(1 << 20)
				if not b:
					break
				n += len(b)
	return n


def last_block(text):
	"""The last complete table fsstat --watch printed."""
	blocks = [b for b in text.split('\n\n') if 'rates' in b]
	return blocks[-1] if blocks else ''


def wait_for(path, needle, timeout=15):
	"""Wait until the newest block of fsstat's output contains needle."""
	deadline = time.monotonic() + timeout
	while time.monotonic() < deadline:
		with open(path, encoding='utf-8', errors='replace') as f:
			if needle in last_block(f.read()):
				return True
		time.sleep(0.05)
	return False


def kernel_cache_off():
	"""--no-kernel-cache where the daemon has it: every read must reach it."""
	out = subprocess.run([ct.coordfs_bin(), '--help'], capture_output=True, text=True).stdout
	return ['--no-kernel-cache'] if '--no-kernel-cache' in out else []


def test_passes(c):
	fsstat = ct.fsstat_bin()
	if not c.check('FSSTAT_BIN names the built fsstat', fsstat is not None,
		       os.environ.get('FSSTAT_BIN', 'unset')):
		return
	with ct.TempDirs() as probe:
		populate(probe.src)
		total = dataset_bytes(probe.src)
	cache = total // 2
	with ct.Mount(opts=[f'--cache-size={cache}'] + kernel_cache_off(), populate=populate) as m:
		files = sorted(os.path.relpath(os.path.join(d, f), m.src)
			       for d, _, fs in os.walk(m.src) for f in fs)
		c.eq('dataset generated the same twice', dataset_bytes(m.src), total)
		s0 = m.stats()
		c.eq('stats: files', s0.get('files'), NFILES)
		# sizes are taken at each file's first lookup
		c.eq('stats: dataset_bytes before any lookup', s0.get('dataset_bytes'), 0)
		c.eq('stats: namespace.attrs_known before any lookup',
		     s0['namespace']['attrs_known'], 0)
		capacity = s0['cache']['capacity_bytes']
		optimum = max(total - capacity, 0)
		out_path = os.path.join(m.root, 'watch.txt')
		with open(out_path, 'w') as out:
			proc = subprocess.Popen([fsstat, '--watch=0.05', m.mnt], stdout=out,
						stderr=subprocess.STDOUT)
		try:
			c.check('fsstat --watch printed its first table',
				wait_for(out_path, 'rates'), 'no table in 15 s')
			rng = random.Random(7)
			c.eq('pass 1 read the dataset', read_pass(m.mnt, files, rng), total)
			st1 = m.stats()
			s1 = st1['source']['bytes']
			c.eq('stats: dataset_bytes after a pass', st1.get('dataset_bytes'), total)
			c.eq('stats: namespace.attrs_known after a pass',
			     st1['namespace']['attrs_known'], NFILES)
			c.check('fsstat saw the end of pass 1',
				wait_for(out_path, 'pass 2       from source 0 B so far, 0% read'),
				last_block(open(out_path).read()))
			c.eq('pass 2 read the dataset', read_pass(m.mnt, files, rng), total)
			s2 = m.stats()['source']['bytes']
			c.check('fsstat saw the end of pass 2',
				wait_for(out_path, 'pass 3       from source 0 B so far, 0% read'),
				last_block(open(out_path).read()))
		finally:
			proc.send_signal(signal.SIGINT)
			try:
				rc = proc.wait(timeout=10)
			except subprocess.TimeoutExpired:
				proc.kill()
				rc = proc.wait()
		c.eq('fsstat --watch exits 0 on SIGINT', rc, 0)
		with open(out_path, encoding='utf-8', errors='replace') as f:
			block = last_block(f.read())
		print('# last fsstat --watch table:\n# ' + block.replace('\n', '\n# '))
		want1 = f'pass 1       from source {human(s1)}  {s1 / total:.2f}x optimum'
		c.check('watch: pass 1 from source, against the whole dataset', want1 in block,
			f'want "{want1}"')
		p2 = s2 - s1
		if optimum > 0:
			want2 = f'pass 2       from source {human(p2)}  {p2 / optimum:.2f}x optimum'
		else:
			want2 = f'pass 2       from source {human(p2)}\n'
		c.check('watch: pass 2 from source, against the MinIO optimum', want2 in block,
			f'want "{want2}"')
		want = f'dataset {NFILES} files, {human(total)}  read 2.00 passes  optimum per pass {human(optimum)}'
		c.check('watch: dataset, passes read and optimum', want in block, f'want "{want}"')
		# The MinIO cache itself: pass 2 reads about what is not cached.
		c.le('pass 2 storage bytes near the optimum', p2, optimum + total // 10)
		r = subprocess.run([fsstat, m.mnt], capture_output=True, text=True, timeout=30)
		c.eq('fsstat exits 0', r.returncode, 0)
		c.check('fsstat: dataset and 2.00 passes', want in r.stdout, r.stdout + r.stderr)
		per = s2 / 2
		want = f'from source {human(s2)} in all, {human(per)} per pass on average'
		c.check('fsstat: storage bytes in all and per pass', want in r.stdout, f'want "{want}"')
		# A directory inside the mount: its mount's statistics, not "not a
		# coordfs mount" (only the root answers the xattr).
		r = subprocess.run([fsstat, os.path.join(m.mnt, 'class1')], capture_output=True,
				   text=True, timeout=30)
		c.check('fsstat on a directory inside the mount shows the mount',
			r.returncode == 0 and f'coordfs  {os.path.realpath(m.mnt)}  ' in r.stdout,
			r.stdout[:300] + r.stderr)


def test_prepared_passes(c):
	"""Decodes of the prepared view count as reads of the dataset: a job
	that reads every prepared sample once makes one pass, raw reads add
	theirs, header reads for sizes (resize views' stat) add nothing."""
	with ct.TempDirs(prefix='coordfs-fsstat-prep-') as data:
		template = os.path.join(data.root, 'dataset')
		ct.gendata(template, 2, 5, 17, size='160x120')
		with ct.Mount(opts=['--prepared', '--cache-size=64M'],
			      populate=ct.copy_tree_into(template)) as m:
			files = sorted(os.path.relpath(os.path.join(d, f), m.src)
				       for d, _, fs in os.walk(m.src) for f in fs)
			total = dataset_bytes(m.src)
			s0 = m.stats()
			c.eq('prepared: dataset_read_bytes starts at 0',
			     s0.get('dataset_read_bytes'), 0)
			for rel in files:	# stat of a resize view reads headers only
				os.stat(os.path.join(m.mnt, 'prepared', 'resize96', rel))
			c.eq('prepared: stat of resize samples reads no pass',
			     m.stats().get('dataset_read_bytes'), 0)
			for rel in files:
				ct.read_bytes(os.path.join(m.mnt, 'prepared', 'center64', rel))
			st = m.stats()
			c.eq('prepared: every sample decoded once', st['prep']['decodes'], len(files))
			c.eq('prepared: one pass of dataset bytes', st.get('dataset_read_bytes'), total)
			read_pass(m.mnt, files, random.Random(3))
			c.eq('prepared + a raw pass: two passes',
			     m.stats().get('dataset_read_bytes'), 2 * total)
			r = subprocess.run([ct.fsstat_bin(), m.mnt], capture_output=True, text=True,
					   timeout=30)
			c.check('fsstat: 2.00 passes', 'read 2.00 passes' in r.stdout,
				r.stdout + r.stderr)


def test_large_cluster(c):
	port = ct.free_port()
	urls = [f'http://127.0.0.1:{port}'] + [
		f'http://gpu-node-{k:04d}.rack-{k % 64:02d}.training-cluster.example.internal:7070'
		for k in range(1, 1024)]
	with ct.Mount(opts=['--cache-size=8M', '--peers=' + ','.join(urls), '--node=0'],
		      populate=populate) as m:
		try:
			raw = os.getxattr(m.mnt, ct.STATS_XATTR)
		except OSError as e:
			c.check('1,024 nodes: the stats xattr reads', False, str(e))
			return
		c.le('  within the kernel\'s 64 KiB', len(raw), 65536)
		peers = json.loads(raw)['peers']
		c.eq('  node_count, nodes_up', (peers.get('node_count'), peers.get('nodes_up')),
		     (1024, 1024))
		c.eq('  only the nodes not up are listed', (peers.get('nodes_listed'), peers['nodes']),
		     ('not_up', []))
		p = subprocess.run([ct.fsstat_bin(), m.mnt], capture_output=True, text=True,
				   timeout=30)
		c.check('  fsstat shows the cluster', p.returncode == 0 and
			'nodes 1024  up 1024  not up 0' in p.stdout, p.stdout + p.stderr)
		status, _, body = ct.http_request(port, '/v1/stats')
		full = json.loads(body)['peers'] if status == 200 else {}
		c.eq('  GET /v1/stats lists all 1,024 nodes', [n['url'] for n in full.get('nodes', [])],
		     urls)


def main():
	c = ct.Checker('test_fsstat', timeout=110)
	c.group(test_passes, c)
	c.group(test_prepared_passes, c)
	c.group(test_large_cluster, c)
	c.finish()


if __name__ == '__main__':
	main()
