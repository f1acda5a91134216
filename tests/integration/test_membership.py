# SPDX-License-Identifier: MIT
"""Integration test: a cluster that finds itself (coordfs(1), PEERS,
membership sources).

The test runs in a mount namespace of its own (private propagation), where
it may bind its own /etc/resolv.conf and /etc/hosts, and a network
namespace of its own (ip netns) where its DNS server and its nodes live:
nothing of the machine's configuration is touched.

  - --peers=file:PATH: 3 nodes read one file of 3 URLs, each finds itself
    by --listen; every file read through two nodes is right, SOURCE is
    read once per cluster (the nodes' source.bytes add up to the dataset),
    stats say membership "file" and each node's index; a file that does
    not name the node, a missing file, a FIFO (nobody writing), another
    user's file and a world-writable one fail with one line, at once.
  - --peers=dns:NAME:PORT against a real DNS server (dnsmasq) answering
    NAME with 3 loopback addresses: the same checks with --node-name; a
    node that finds itself by its own interface address (lo holds one of
    the 3 addresses another name has); a name that does
    not resolve fails with one line.
  - --peers=slurm with a job's SLURM_JOB_NODELIST expanded by Slurm's own
    scontrol (a minimal slurm.conf; no controller needed for that) and
    SLURM_NODEID, the hosts resolved through the test's /etc/hosts: the
    same checks; outside a job it fails with one line.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

NFILES = 24


def populate(src):
	rng = __import__('random').Random(5)
	for i in range(NFILES):
		ct.write_file(os.path.join(src, f'd{i % 3}', f'f{i:02d}.bin'),
			      rng.randbytes(rng.randint(2000, 40000)))


def sh(*cmd, check=True):
	p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
	if check and p.returncode != 0:
		raise RuntimeError(f'{" ".join(cmd)}: exit {p.returncode}: {p.stderr.strip()}')
	return p


def read_cluster(c, label, cl, nodes):
	"""Read every file through nodes (several passes: a file another
	node owns comes from it); compare with SOURCE; SOURCE read once."""
	rels = sorted(os.path.relpath(os.path.join(d, f), cl.src)
		      for d, _, fs in os.walk(cl.src) for f in fs)
	want = {r: hashlib.sha256(open(os.path.join(cl.src, r), 'rb').read()).hexdigest()
		for r in rels}
	bad = []
	for k in nodes:
		for r in rels:
			if ct.sha256_file(cl.path(k, r)) != want[r]:
				bad.append((k, r))
	c.eq(f'{label}: every file right through nodes {nodes}', bad, [])
	total = sum(os.path.getsize(os.path.join(cl.src, r)) for r in rels)
	read = sum(cl.stats(k)['source']['bytes'] for k in range(cl.n))
	c.eq(f'{label}: SOURCE read once per cluster (bytes)', read, total)
	st = [cl.stats(k) for k in range(cl.n)]
	c.eq(f'{label}: each node knows its index', [s['peers']['node'] for s in st],
	     list(range(cl.n)))
	c.eq(f'{label}: membership source', {s['membership']['source'] for s in st},
	     {label.split()[0]})
	c.eq(f'{label}: 3 nodes, all up', [(s['peers']['node_count'], s['peers']['nodes_up'])
					   for s in st], [(3, 3)] * 3)
	p = subprocess.run([ct.fsstat_bin(), cl.mnts[0]], capture_output=True, text=True,
			   timeout=30)
	c.check(f'{label}: fsstat shows the membership',
		f'membership {label.split()[0]}  generation 1' in p.stdout, p.stdout[-800:])


def fails_one_line(c, label, args, env=None, prefix=()):
	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'x'), b'x')
		cmd = list(prefix[1:]) + [ct.coordfs_bin()] + args if prefix else args
		rc, _, err = ct.run_coordfs(cmd + [td.src, td.mnt], env=env,
					    binary=prefix[0] if prefix else None)
		lines = [ln for ln in err.splitlines() if ln.strip()]
		c.check(f'{label}: fails with one line, nothing mounted',
			rc not in (0, None) and len(lines) == 1 and not ct.is_mounted(td.mnt),
			f'rc {rc}, stderr {err.strip()!r}')
		return lines[0] if lines else ''


def test_file(c):
	with ct.Cluster(3, populate=populate) as cl:
		pf = os.path.join(cl.root, 'peers.txt')
		with open(pf, 'w') as f:
			f.write('# the job\'s nodes\n' + '\n'.join(cl.urls) + '\n\n')
		for k in range(3):
			cl.mount(k, [f'--listen=127.0.0.1:{cl.ports[k]}', '--cache-size=16M'],
				 peers=f'file:{pf}', with_node=False)
		read_cluster(c, 'file membership', cl, [0, 1])
		line = fails_one_line(c, 'file: this node not in it',
				      [f'--peers=file:{pf}', '--listen=127.0.0.1:1'])
		c.check('  the line says so', 'not among' in line, line)
		fails_one_line(c, 'file: missing', ['--peers=file:/nonexistent/peers'])
		# Whoever may write its directory can put a FIFO there: its open
		# (nobody writing) must not hold up the mount for good.
		fifo = os.path.join(cl.root, 'peers.fifo')
		os.mkfifo(fifo)
		line = fails_one_line(c, 'file: a FIFO', [f'--peers=file:{fifo}',
							  '--listen=127.0.0.1:1'])
		c.check('  the line says it is not a regular file', 'not a regular file' in line,
			line)
		# Whoever may write the list picks the nodes the dataset comes
		# from (answers are not signed): another user's list, or one
		# others may write, is refused.
		theirs = os.path.join(cl.root, 'peers-theirs.txt')
		shutil.copy(pf, theirs)
		for label, owner, mode, want in (('another user\'s', 65534, 0o644, 'another user'),
						 ('world-writable', 0, 0o666, 'others may write')):
			os.chown(theirs, owner, owner)
			os.chmod(theirs, mode)
			line = fails_one_line(c, f'file: {label}', [f'--peers=file:{theirs}',
								     f'--listen=127.0.0.1:{cl.ports[0]}'])
			c.check(f'  the line says {want}', want in line, line)
		fails_one_line(c, 'file: --node with a discovered source',
			       [f'--peers=file:{pf}', '--node=0'])


class Netns:
	"""A network namespace with lo up and a dnsmasq answering from a hosts
	file; run commands in it with prefix (nsenter, network only: the mount
	namespace, hence the FUSE mounts, stay the test's)."""

	def __init__(self, root, hosts):
		self.name = 'cfs' + uuid.uuid4().hex[:8]
		sh('ip', 'netns', 'add', self.name)
		self.prefix = ['nsenter', f'--net=/run/netns/{self.name}']
		self.dns = None
		try:
			sh(*self.prefix, 'ip', 'link', 'set', 'lo', 'up')
			# one of auto.coordfs.test's addresses is this host's own
			sh(*self.prefix, 'ip', 'addr', 'add', '10.213.0.3/32', 'dev', 'lo')
			hf = os.path.join(root, 'dns-hosts')
			with open(hf, 'w') as f:
				f.write(hosts)
			self.log = open(os.path.join(root, 'dnsmasq.log'), 'w')
			self.dns = subprocess.Popen(
				self.prefix + ['dnsmasq', '--keep-in-foreground', '--no-resolv',
					       '--no-hosts', f'--addn-hosts={hf}', '--listen-address=127.0.0.1',
					       '--bind-interfaces', '--port=53', '--user=root',
					       '--pid-file', '--log-queries', '--log-facility=-'],
				stdout=self.log, stderr=subprocess.STDOUT)
			ok = ct.wait_until(lambda: sh(*self.prefix, 'getent', 'ahostsv4', 'ready.coordfs.test',
						      check=False).returncode == 0, 10)
			if not ok:
				raise RuntimeError('dnsmasq did not answer within 10 s')
		except BaseException:
			self.close()
			raise

	def close(self):
		if self.dns:
			self.dns.terminate()
			try:
				self.dns.wait(5)
			except subprocess.TimeoutExpired:
				self.dns.kill()
		sh('ip', 'netns', 'del', self.name, check=False)


def test_dns(c, root):
	hosts = ''.join(f'127.0.0.{k + 2} peers.coordfs.test\n' for k in range(3)) + \
		''.join(f'10.213.0.{k + 2} auto.coordfs.test\n' for k in range(3)) + \
		'127.0.0.9 ready.coordfs.test\n'
	ns = Netns(root, hosts)
	try:
		port = ct.free_port()
		with ct.Cluster(3, populate=populate, ports=[port] * 3) as cl:
			cl.urls = [f'http://127.0.0.{k + 2}:{port}' for k in range(3)]
			for k in range(3):
				cl.mount(k, [f'--node-name=127.0.0.{k + 2}', '--cache-size=16M'],
					 peers=f'dns:peers.coordfs.test:{port}', with_node=False,
					 prefix=ns.prefix)
			read_cluster(c, 'dns membership', cl, [0, 2])
		with ct.Cluster(1, populate=populate) as cl:
			cl.mount(0, ['--cache-size=16M'], peers=f'dns:auto.coordfs.test:{port}',
				 with_node=False, prefix=ns.prefix)
			st = cl.stats(0)
			c.eq('dns: a node finds itself by its interface address (the 2nd of 3)',
			     (st['peers']['node'], st['peers']['node_count']), (1, 3))
			c.eq('  and reads right with its peers unreachable',
			     ct.sha256_file(cl.path(0, 'd0/f00.bin')),
			     hashlib.sha256(open(os.path.join(cl.src, 'd0/f00.bin'), 'rb').read())
			     .hexdigest())
		line = fails_one_line(c, 'dns: a name that does not resolve',
				      ['--peers=dns:nowhere.coordfs.test'], prefix=ns.prefix)
		c.check('  the line names it', 'nowhere.coordfs.test' in line, line)
		line = fails_one_line(c, 'dns: this node not among the addresses',
				      ['--peers=dns:peers.coordfs.test'], prefix=ns.prefix)
		c.check('  the line says so', 'not among' in line, line)
		# A port of more digits than any: atoi's overflow made it port 1.
		line = fails_one_line(c, 'dns: a port past 65535 by 2^32',
				      ['--peers=dns:peers.coordfs.test:4294967297',
				       '--node-name=127.0.0.2'], prefix=ns.prefix)
		c.check('  the line names the bad spec', 'bad --peers=dns' in line, line)
	finally:
		ns.close()


def test_slurm(c, root):
	conf = os.path.join(root, 'slurm.conf')
	with open(conf, 'w') as f:
		f.write('ClusterName=cfstest\nSlurmctldHost=localhost\n'
			'NodeName=cfsnode[1-3] CPUs=1 State=UNKNOWN\n'
			'PartitionName=p Nodes=cfsnode[1-3] Default=YES\n')
	port = ct.free_port()
	with ct.Cluster(3, populate=populate, ports=[port] * 3) as cl:
		for k in range(3):
			env = dict(os.environ, SLURM_CONF=conf, SLURM_JOB_NODELIST='cfsnode[1-3]',
				   SLURM_NODEID=str(k))
			cl.mount(k, [f'--peer-port={port}', '--cache-size=16M'], peers='slurm',
				 with_node=False, env=env)
		read_cluster(c, 'slurm membership', cl, [1, 2])
	env = {k: v for k, v in os.environ.items() if not k.startswith('SLURM_')}
	line = fails_one_line(c, 'slurm: outside a SLURM job', ['--peers=slurm'], env=env)
	c.check('  the line says so', 'SLURM' in line, line)
	# An index past int: cast before its check, 2^32 + 1 was node 1;
	# digits only (strtol also took ' 1' and '+1').
	for bad in ('4294967297', '-1', '1x', ' 1', '+1'):
		env = dict(os.environ, SLURM_CONF=conf, SLURM_JOB_NODELIST='cfsnode[1-3]',
			   SLURM_NODEID=bad)
		line = fails_one_line(c, f'slurm: SLURM_NODEID={bad}',
				      [f'--peer-port={port}', '--peers=slurm'], env=env)
		c.check('  the line names SLURM_NODEID', 'SLURM_NODEID' in line, line)


def test_file_relative(c):
	"""--peers=file:PATH relative to the caller's directory is followed once
	detached (the daemon changes to /): every re-read failed with ENOENT,
	keeping the list of the mount."""
	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'f'), b'x')
		port, other = ct.free_port(), ct.free_port()
		pf = os.path.join(td.root, 'peers.txt')
		with open(pf, 'w') as f:
			f.write(ct.peer_url(port) + '\n')
		rc, _, err = ct.run_coordfs(['--peers=file:peers.txt', f'--listen=127.0.0.1:{port}',
					     '--peers-refresh=1', '--cache-size=1M', td.src, td.mnt],
					    cwd=td.root)
		if not c.eq('relative file: mounts', (rc, 'error' in err), (0, False)):
			return
		with open(pf + '.new', 'w') as f:
			f.write(ct.peer_url(port) + '\n' + ct.peer_url(other) + '\n')
		os.rename(pf + '.new', pf)
		ct.wait_until(lambda: ct.stats(td.mnt)['peers']['node_count'] == 2, 10)
		st = ct.stats(td.mnt)
		c.eq('relative file: re-read once detached (nodes, refresh failures)',
		     (st['peers']['node_count'], st['membership']['refresh_failures']), (2, 0))


def main():
	# /etc/hosts and /etc/resolv.conf bound over for this test and its daemons only.
	ct.own_mount_namespace(__file__)
	c = ct.Checker('test_membership', timeout=280)
	missing = [t for t in ('dnsmasq', 'scontrol', 'nsenter', 'ip') if not shutil.which(t)]
	if missing:
		c.check(f'tools present ({", ".join(missing)} missing: tools/install-deps.sh)', False)
		c.finish()
	root = tempfile.mkdtemp(prefix='coordfs-membership-')
	try:
		with open(os.path.join(root, 'resolv.conf'), 'w') as f:
			f.write('nameserver 127.0.0.1\n')
		with open(os.path.join(root, 'hosts'), 'w') as f:
			f.write('127.0.0.1 localhost\n' +
				''.join(f'127.0.0.{k + 2} cfsnode{k + 1}\n' for k in range(3)))
		sh('mount', '--bind', os.path.join(root, 'resolv.conf'), '/etc/resolv.conf')
		sh('mount', '--bind', os.path.join(root, 'hosts'), '/etc/hosts')
		c.group(test_file, c)
		c.group(test_file_relative, c)
		c.group(test_dns, c, root)
		c.group(test_slurm, c, root)
	finally:
		shutil.rmtree(root, ignore_errors=True)
	c.finish()


if __name__ == '__main__':
	main()
