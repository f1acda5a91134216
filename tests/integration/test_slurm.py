# SPDX-License-Identifier: MIT
"""Integration test: coordfs under a real SLURM cluster (coordfs(1), PEERS,
--peers=slurm; tools/examples/slurm-job.sh).

Debian's slurmctld and three slurmd, each slurmd in a network namespace of
its own with its own address on a bridge (so each node's coordfs listens
on the default peer port of its own address), a munged of the test's own
(its own key and socket), all in the test's own mount namespace, where
/etc/hosts names the nodes. As the example job script does, one job step
runs coordfs in the foreground on every node (`srun -N3 coordfs -f
--peers=slurm ...`), for as long as the training; the test then checks:

  - every node's mount comes up, each node knows its index (SLURM_NODEID)
    and sees 3 nodes, all up (the statistics and fsstat);
  - every file read through every node is right, and SOURCE was read once
    per cluster (the nodes' source.bytes add up to the dataset);
  - `srun --overlap fusermount3 -u` unmounts every node, and the cache
    step then ends with status 0.
"""

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

NODES = 3
NFILES = 30


def sh(*cmd, check=True, env=None, timeout=30):
	p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
	if check and p.returncode != 0:
		raise RuntimeError(f'{" ".join(cmd)}: exit {p.returncode}: {p.stderr.strip()}')
	return p


class SlurmCluster:
	"""slurmctld in a hub namespace holding a bridge, one slurmd per node
	namespace (veth into the bridge), munged on a socket of root's."""

	def __init__(self, root):
		self.root = root
		self.tag = uuid.uuid4().hex[:6]
		self.hub = f'cfsh{self.tag}'
		self.nets = [f'cfsn{self.tag}{k}' for k in range(NODES)]
		self.procs = []
		self.conf = os.path.join(root, 'slurm.conf')
		self.env = dict(os.environ, SLURM_CONF=self.conf)
		try:
			self._network()
			self._munge()
			self._slurm()
		except BaseException:
			self.close()
			raise

	def ns(self, name):
		return ['nsenter', f'--net=/run/netns/{name}']

	def _network(self):
		sh('ip', 'netns', 'add', self.hub)
		sh('ip', '-n', self.hub, 'link', 'set', 'lo', 'up')
		sh('ip', '-n', self.hub, 'link', 'add', 'br0', 'type', 'bridge')
		sh('ip', '-n', self.hub, 'addr', 'add', '10.214.0.1/24', 'dev', 'br0')
		sh('ip', '-n', self.hub, 'link', 'set', 'br0', 'up')
		for k, n in enumerate(self.nets):
			sh('ip', 'netns', 'add', n)
			sh('ip', '-n', n, 'link', 'set', 'lo', 'up')
			sh('ip', '-n', self.hub, 'link', 'add', f'vh{k}', 'type', 'veth', 'peer', 'name',
			   'eth0', 'netns', n)
			sh('ip', '-n', self.hub, 'link', 'set', f'vh{k}', 'master', 'br0', 'up')
			sh('ip', '-n', n, 'addr', 'add', f'10.214.0.{k + 2}/24', 'dev', 'eth0')
			sh('ip', '-n', n, 'link', 'set', 'eth0', 'up')

	def _munge(self):
		key = os.path.join(self.root, 'munge.key')
		with open(key, 'wb') as f:
			f.write(os.urandom(1024))
		os.chmod(key, 0o600)
		self.munge_sock = os.path.join(self.root, 'munge.sock')
		self.procs.append(subprocess.Popen(
			['munged', '--foreground', '--force', f'--socket={self.munge_sock}',
			 f'--key-file={key}', f'--pid-file={self.root}/munged.pid',
			 f'--log-file={self.root}/munged.log', f'--seed-file={self.root}/munge.seed'],
			stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
		if not ct.wait_until(lambda: os.path.exists(self.munge_sock), 10):
			raise RuntimeError('munged did not start')

	def _slurm(self):
		r = self.root
		os.makedirs(f'{r}/state')
		for k in range(NODES):
			os.makedirs(f'{r}/spool/cfsnode{k + 1}')
		nodes = ''.join(f'NodeName=cfsnode{k + 1} NodeAddr=10.214.0.{k + 2} CPUs=1 '
				'State=UNKNOWN\n' for k in range(NODES))
		with open(self.conf, 'w') as f:
			f.write(f'''ClusterName=cfstest
SlurmctldHost={socket.gethostname()}(10.214.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_sock}
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
MpiDefault=none
{nodes}PartitionName=p Nodes=cfsnode[1-{NODES}] Default=YES MaxTime=INFINITE State=UP
''')
		with open(os.path.join(r, 'cgroup.conf'), 'w') as f:
			f.write('CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n')
		self.procs.append(subprocess.Popen(
			self.ns(self.hub) + ['slurmctld', '-D', '-i', '-f', self.conf], env=self.env,
			stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
		for k, n in enumerate(self.nets):
			self.procs.append(subprocess.Popen(
				self.ns(n) + ['slurmd', '-D', '-f', self.conf, '-N', f'cfsnode{k + 1}'],
				env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

		def idle():
			p = sh(*self.ns(self.hub), 'sinfo', '-h', '-o', '%t %D', check=False,
			       env=self.env)
			return p.returncode == 0 and p.stdout.split() == ['idle', str(NODES)]
		if not ct.wait_until(idle, 30):
			raise RuntimeError('the SLURM nodes did not come up idle within 30 s: ' +
					   self.logs())

	def allocate(self):
		"""A job of every node (salloc --no-shell, as a batch job's
		allocation): its id, for the steps that follow."""
		p = sh(*self.ns(self.hub), 'salloc', f'-N{NODES}', '--no-shell', '--immediate=20',
		       env=self.env, timeout=40)
		words = (p.stdout + p.stderr).split()
		self.job = words[words.index('allocation') + 1]
		return self.job

	def srun(self, args, **kw):
		return subprocess.Popen(self.ns(self.hub) + ['srun', f'--jobid={self.job}'] + args,
					env=self.env, **kw)

	def logs(self):
		out = []
		for name in ['slurmctld.log'] + [f'slurmd-cfsnode{k + 1}.log' for k in range(NODES)]:
			try:
				with open(os.path.join(self.root, name)) as f:
					out.append(f'{name}: ' + ' | '.join(f.read().splitlines()[-5:]))
			except OSError:
				pass
		return '\n'.join(out)

	def close(self):
		if getattr(self, 'job', None):
			sh(*self.ns(self.hub), 'scancel', self.job, check=False, env=self.env)
		for p in reversed(self.procs):
			p.send_signal(signal.SIGTERM)
		for p in reversed(self.procs):
			try:
				p.wait(10)
			except subprocess.TimeoutExpired:
				p.kill()
				p.wait()
		# A step daemon left by a slurmd that went first: ours carry
		# our SLURM_CONF (slurmd's environment).
		mark = f'SLURM_CONF={self.conf}'.encode()
		for pid in filter(str.isdigit, os.listdir('/proc')):
			try:
				with open(f'/proc/{pid}/environ', 'rb') as f:
					if mark in f.read().split(b'\0'):
						os.kill(int(pid), signal.SIGKILL)
			except OSError:
				pass
		for n in [self.hub] + self.nets:
			sh('ip', 'netns', 'del', n, check=False)


def test_srun(c, root):
	src = os.path.join(root, 'src')
	rng = __import__('random').Random(7)
	for i in range(NFILES):
		ct.write_file(os.path.join(src, f'c{i % 3}', f'f{i:02d}.bin'),
			      rng.randbytes(rng.randint(3000, 40000)))
	mnts = [os.path.join(root, f'mnt{k}') for k in range(NODES)]
	for m in mnts:
		os.mkdir(m)
	cl = SlurmCluster(root)
	step = None
	log = open(os.path.join(root, 'cache-step.log'), 'w')
	try:
		cl.allocate()
		# The cache step of tools/examples/slurm-job.sh: coordfs in the
		# foreground on every node, the default peer port.
		step = cl.srun([f'-N{NODES}', '--ntasks-per-node=1', 'bash', '-c',
				'exec "$0" -f --peers=slurm --cache-size=16M "$1" "$2/mnt$SLURM_NODEID"',
				ct.coordfs_bin(), src, root], stdout=log, stderr=subprocess.STDOUT)
		up = ct.wait_until(lambda: all(ct.is_mounted(m) for m in mnts) or
				   step.poll() is not None, 60)
		ok = up and step.poll() is None
		c.check('srun -N3 coordfs -f --peers=slurm: every node mounted', ok,
			open(log.name).read()[-1500:] + '\n' + cl.logs())
		if not ok:
			return
		rels = sorted(os.path.relpath(os.path.join(d, f), src)
			      for d, _, fs in os.walk(src) for f in fs)
		want = {r: hashlib.sha256(open(os.path.join(src, r), 'rb').read()).hexdigest()
			for r in rels}
		bad = [(k, r) for k in range(NODES) for r in rels
		       if ct.sha256_file(os.path.join(mnts[k], r)) != want[r]]
		c.eq('every file right through every node', bad, [])
		st = [ct.stats(m) for m in mnts]
		total = sum(os.path.getsize(os.path.join(src, r)) for r in rels)
		c.eq('SOURCE read once per cluster (bytes)', sum(s['source']['bytes'] for s in st),
		     total)
		c.check('some files came from peers', sum(s['peers']['bytes'] for s in st) > 0,
			[s['peers'] for s in st])
		c.eq('each node knows its index (SLURM_NODEID) and sees 3 nodes, all up',
		     [(s['peers']['node'], s['peers']['node_count'], s['peers']['nodes_up'],
		       s['membership']['source']) for s in st],
		     [(k, NODES, NODES, 'slurm') for k in range(NODES)])
		outs = [subprocess.run([ct.fsstat_bin(), m], capture_output=True, text=True,
				       timeout=30).stdout for m in mnts]
		c.check('fsstat on each node shows the slurm membership and 3 nodes',
			all('membership slurm' in o and o.count('cfsnode') >= NODES for o in outs),
			outs[0][-800:])
		um = cl.srun([f'-N{NODES}', '--ntasks-per-node=1', '--overlap', 'bash', '-c',
			      'fusermount3 -u "$0/mnt$SLURM_NODEID"', root],
			     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
		out, _ = um.communicate(timeout=60)
		c.check('srun --overlap fusermount3 -u on every node', um.returncode == 0, out[-800:])
		try:
			rc = step.wait(30)
		except subprocess.TimeoutExpired:
			rc = None
		c.check('the cache step then ends with status 0', rc == 0,
			f'rc {rc}: ' + open(log.name).read()[-800:])
		c.eq('nothing stays mounted', [m for m in mnts if ct.is_mounted(m)], [])
	finally:
		if step and step.poll() is None:
			step.send_signal(signal.SIGINT)  # srun passes it on: the step ends
			try:
				step.wait(10)
			except subprocess.TimeoutExpired:
				step.kill()
		for m in mnts:
			if ct.is_mounted(m):
				subprocess.run(['fusermount3', '-u', '-z', m], capture_output=True)
		cl.close()
		log.close()


def main():
	# /etc/hosts bound over for this test and its daemons only.
	ct.own_mount_namespace(__file__)
	c = ct.Checker('test_slurm', timeout=200)
	missing = [t for t in ('slurmctld', 'slurmd', 'srun', 'sinfo', 'munged', 'nsenter', 'ip')
		   if not shutil.which(t)]
	if missing:
		c.check(f'tools present ({", ".join(missing)} missing: tools/install-deps.sh)', False)
		c.finish()
	root = tempfile.mkdtemp(prefix='coordfs-slurm-')
	try:
		with open(os.path.join(root, 'hosts'), 'w') as f:
			f.write('127.0.0.1 localhost\n' + f'10.214.0.1 {socket.gethostname()}\n' +
				''.join(f'10.214.0.{k + 2} cfsnode{k + 1}\n' for k in range(NODES)))
		sh('mount', '--bind', os.path.join(root, 'hosts'), '/etc/hosts')
		t0 = time.monotonic()
		c.group(test_srun, c, root)
		print(f'# SLURM part took {time.monotonic() - t0:.1f}s')
	finally:
		shutil.rmtree(root, ignore_errors=True)
	c.finish()


if __name__ == '__main__':
	main()
