# SPDX-License-Identifier: MIT
"""Integration test: membership that changes while mounted (coordfs(1),
PEERS, --peers-refresh).

For a peers file (--peers=file:PATH, replaced by a rename and rewritten
in place mid-epoch) and for DNS (a real dnsmasq answering a name, its
hosts file changed and reloaded with SIGHUP), on a cluster of real
daemons:

  epoch 1, 3 nodes: every file right through every node; SOURCE read
      once per cluster;
  a 4th node joins (the file or the name gains it) and every node moves
      to generation 2; epoch 2 through all 4: every file right, SOURCE
      not read again at all (the units the new node owns now come from
      their previous owners: handoffs > 0), joined = 1;
  epoch 3: a node is removed from the file or the name in the middle of
      the epoch: no read fails, no wrong byte while the nodes disagree;
      then every node agrees (3 nodes; the removed one is not a member,
      reads still right through it), left = 1, and SOURCE was read at
      most once more for the bytes the removed node held (its partition),
      on top of the dataset once.
"""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402
from test_membership import Netns	# noqa: E402

NFILES = 60


def populate(src):
	rng = __import__('random').Random(11)
	for i in range(NFILES):
		ct.write_file(os.path.join(src, f'd{i % 4}', f'f{i:02d}.bin'),
			      rng.randbytes(rng.randint(2000, 30000)))


class Dataset:
	def __init__(self, src):
		self.rels = sorted(os.path.relpath(os.path.join(d, f), src)
				   for d, _, fs in os.walk(src) for f in fs)
		self.want = {r: hashlib.sha256(open(os.path.join(src, r), 'rb').read()).hexdigest()
			     for r in self.rels}
		self.bytes = sum(os.path.getsize(os.path.join(src, r)) for r in self.rels)


def epoch(cl, ds, nodes, midway=None):
	"""Read every file through every node in nodes (page cache dropped
	first, so that each read reaches the daemon); midway() is called
	after a third of the reads. Returns (wrong, failed) lists."""
	wrong, failed = [], []
	reads = [(k, r) for r in ds.rels for k in nodes]
	for i, (k, r) in enumerate(reads):
		if midway and i == len(reads) // 3:
			midway()
		p = cl.path(k, r)
		try:
			ct.drop_page_cache(p)
			if ct.sha256_file(p) != ds.want[r]:
				wrong.append((k, r))
		except OSError as e:
			failed.append((k, r, e.errno))
	return wrong, failed


def source_bytes(cl, nodes):
	return sum(cl.stats(k)['source']['bytes'] for k in nodes)


def wait_members(cl, nodes, count, gen_at_least, timeout=20):
	def ok():
		st = [cl.stats(k) for k in nodes]
		return all(s['peers']['node_count'] == count and
			   s['membership']['generation'] >= gen_at_least for s in st)
	return ct.wait_until(ok, timeout)


def scenario(c, label, cl, ds, join, remove, removed):
	"""The three epochs, with join() adding node 3 (mounting it) and
	remove() taking node `removed` out of the source."""
	all4 = list(range(4))
	wrong, failed = epoch(cl, ds, [0, 1, 2])
	c.eq(f'{label}: epoch 1 (3 nodes): every file right, no read failed', (wrong, failed),
	     ([], []))
	c.eq(f'{label}: epoch 1: SOURCE read once per cluster (bytes)',
	     source_bytes(cl, [0, 1, 2]), ds.bytes)

	join()
	c.check(f'{label}: a 4th node joins: every node sees 4 nodes',
		wait_members(cl, all4, 4, 1) and
		all(cl.stats(k)['membership']['generation'] == 2 for k in (0, 1, 2)),
		[(cl.stats(k)['membership'], cl.stats(k)['peers']['node_count']) for k in all4])
	wrong, failed = epoch(cl, ds, all4)
	c.eq(f'{label}: epoch 2 (4 nodes): every file right, no read failed', (wrong, failed),
	     ([], []))
	st = [cl.stats(k) for k in all4]
	c.eq(f'{label}: epoch 2: SOURCE not read again (the joiner\'s units came from '
	     'their previous owners)', source_bytes(cl, all4), ds.bytes)
	c.check(f'{label}: the new node got its units by handoff',
		st[3]['membership']['handoffs'] > 0 and st[3]['cache']['items'] ==
		st[3]['membership']['handoffs'], st[3]['membership'])
	c.eq(f'{label}: joined = 1 on the others', [s['membership']['joined'] for s in st[:3]],
	     [1, 1, 1])

	held = cl.stats(removed)['cache']['used_bytes']
	before = source_bytes(cl, all4)
	rest = [k for k in all4 if k != removed]
	wrong, failed = epoch(cl, ds, rest, midway=remove)
	c.eq(f'{label}: epoch 3, node {removed} removed midway: every file right, no read '
	     'failed', (wrong, failed), ([], []))
	c.check(f'{label}: then the others agree on 3 nodes, and node {removed} that it is out',
		wait_members(cl, rest, 3, 2) and
		ct.wait_until(lambda: not cl.stats(removed)['membership']['member'], 20),
		[cl.stats(k)['membership'] for k in all4])
	wrong, failed = epoch(cl, ds, all4)
	c.eq(f'{label}: epoch 4: every file right through all, the removed node too',
	     (wrong, failed), ([], []))
	st = [cl.stats(k) for k in all4]
	c.eq(f'{label}: the removed node knows it is out', (st[removed]['membership']['member'],
							      st[removed]['peers']['node']), (False, -1))
	c.eq(f'{label}: left = 1 on the others', [st[k]['membership']['left'] for k in rest],
	     [1, 1, 1])
	extra = source_bytes(cl, all4) - before
	c.check(f'{label}: SOURCE read again at most the removed node\'s partition once '
		f'({extra} bytes, it held {held})', 0 < extra <= held, (extra, held))
	p = subprocess.run([ct.fsstat_bin(), cl.mnts[0]], capture_output=True,
					 text=True, timeout=30)
	c.check(f'{label}: fsstat shows the generation and the changes',
		'generation 3' in p.stdout and 'joined 1' in p.stdout and 'left 1' in p.stdout,
		p.stdout[-800:])


def test_file(c):
	with ct.Cluster(4, populate=populate) as cl:
		ds = Dataset(cl.src)
		pf = os.path.join(cl.root, 'peers.txt')

		def write(urls, atomic):
			text = '\n'.join(urls) + '\n'
			if atomic:
				with open(pf + '.new', 'w') as f:
					f.write(text)
				os.rename(pf + '.new', pf)
			else:
				with open(pf, 'w') as f:
					f.write(text)

		write(cl.urls[:3], True)
		opts = ['--cache-size=16M', '--peers-refresh=1']
		for k in range(3):
			cl.mount(k, [f'--listen=127.0.0.1:{cl.ports[k]}'] + opts, peers=f'file:{pf}',
				 with_node=False)

		def join():
			write(cl.urls, True)
			cl.mount(3, [f'--listen=127.0.0.1:{cl.ports[3]}'] + opts, peers=f'file:{pf}',
				 with_node=False)

		scenario(c, 'file', cl, ds, join,
			 lambda: write([u for k, u in enumerate(cl.urls) if k != 1], False), 1)


def test_dns(c, root):
	hosts = ''.join(f'127.0.0.{k + 2} peers.coordfs.test\n' for k in range(3)) + \
		'127.0.0.9 ready.coordfs.test\n'
	ns = Netns(root, hosts)
	hf = os.path.join(root, 'dns-hosts')

	def set_hosts(addrs):
		with open(hf + '.new', 'w') as f:
			f.write(''.join(f'{a} peers.coordfs.test\n' for a in addrs) +
				'127.0.0.9 ready.coordfs.test\n')
		os.rename(hf + '.new', hf)
		ns.dns.send_signal(signal.SIGHUP)

	try:
		port = ct.free_port()
		with ct.Cluster(4, populate=populate, ports=[port] * 4) as cl:
			ds = Dataset(cl.src)
			cl.urls = [f'http://127.0.0.{k + 2}:{port}' for k in range(4)]
			opts = ['--cache-size=16M', '--peers-refresh=1']
			for k in range(3):
				cl.mount(k, [f'--node-name=127.0.0.{k + 2}'] + opts,
					 peers=f'dns:peers.coordfs.test:{port}', with_node=False,
					 prefix=ns.prefix)

			def join():
				set_hosts([f'127.0.0.{k + 2}' for k in range(4)])
				cl.mount(3, ['--node-name=127.0.0.5'] + opts,
					 peers=f'dns:peers.coordfs.test:{port}', with_node=False,
					 prefix=ns.prefix)

			scenario(c, 'dns', cl, ds, join,
				 lambda: set_hosts([f'127.0.0.{k + 2}' for k in (0, 1, 3)]), 2)
	finally:
		ns.close()


def main():
	# /etc/resolv.conf bound over for this test and its daemons only.
	ct.own_mount_namespace(__file__)
	c = ct.Checker('test_membership_changes', timeout=200)
	missing = [t for t in ('dnsmasq', 'nsenter', 'ip') if not shutil.which(t)]
	if missing:
		c.check(f'tools present ({", ".join(missing)} missing: tools/install-deps.sh)', False)
		c.finish()
	root = tempfile.mkdtemp(prefix='coordfs-membership-changes-')
	try:
		with open(os.path.join(root, 'resolv.conf'), 'w') as f:
			f.write('nameserver 127.0.0.1\n')
		subprocess.run(['mount', '--bind', os.path.join(root, 'resolv.conf'),
					      '/etc/resolv.conf'], check=True, timeout=30)
		c.group(test_file, c)
		c.group(test_dns, c, root)
	finally:
		shutil.rmtree(root, ignore_errors=True)
	c.finish()


if __name__ == '__main__':
	main()
