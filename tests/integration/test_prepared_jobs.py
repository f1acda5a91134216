# SPDX-License-Identifier: MIT
"""Integration test: jobs in the prepared view (coordfs(1), THE PREPARED VIEW, Versions and
Coordination) on a real mount.

Readers are prep_reader.py subprocesses. Checks:
  - three concurrent jobs (COORDFS_JOB=a|b|c) reading every file of
    prepared/rrc224/train for 2 epochs in the same order get identical
    bytes per epoch, new samples each epoch, and share the decodes
    (prep.decodes close to files x epochs, not x 3);
  - a job killed with SIGKILL mid-epoch, holding a file open, does not
    stall the others (even with a small --prep-mem), and a later job still
    gets bit-identical samples;
  - without COORDFS_JOB, a PyTorch DataLoader(num_workers=2) process and
    its workers are one job: its two epochs give versions 0 and 1 of every
    file, the same bytes that COORDFS_JOB=x gets on its first and second
    read on a fresh mount with the same seed; another process is another
    job; the threads of one process are one job;
  - decode-ahead: a job stalled half way through its second epoch finds
    the rest of the epoch decoded ahead, reads it, and gets the bytes it
    gets with --prep-ahead=0.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
READER = os.path.join(HERE, 'prep_reader.py')
SEED = 7
CLASSES = 4
PER_CLASS = 10
EPOCHS = 2
NFILES = CLASSES * PER_CLASS
SAMPLE_LEN = ct.ppm_size(224, 224)
RUN_TIMEOUT = 90	# seconds a reader may take (generous: 2 shared cores)


def make_dataset(root):
	import shutil
	ct.gendata(root, CLASSES, PER_CLASS, SEED)
	# one image outside train/ that every job reads first, so that all
	# jobs are known to the daemon before the measured epochs start
	first = sorted(os.listdir(os.path.join(root, 'train')))[0]
	d = os.path.join(root, 'train', first)
	os.makedirs(os.path.join(root, 'warm'))
	shutil.copy(os.path.join(d, sorted(os.listdir(d))[0]),
		    os.path.join(root, 'warm', 'w.jpg'))


def train_files(m):
	"""Relative paths (under train/) of every image, sorted."""
	out = []
	base = os.path.join(m.src, 'train')
	for dirpath, _, files in os.walk(base):
		for name in files:
			out.append(os.path.relpath(os.path.join(dirpath, name),
						   base))
	return sorted(out)


def reader_env(job):
	env = dict(os.environ)
	env.pop('COORDFS_JOB', None)
	if job is not None:
		env['COORDFS_JOB'] = job
	return env


class Reader:
	"""One prep_reader.py subprocess, output in files under workdir."""

	def __init__(self, workdir, name, args, job, shell=False):
		self.name = name
		self.out = os.path.join(workdir, f'{name}.json')
		self.log = os.path.join(workdir, f'{name}.log')
		cmd = [sys.executable, READER] + list(args[:1]) + \
			[args[1], self.out] + list(args[2:])
		if shell:
			# a parent running another executable: the job guess
			# stops at the python process (no exec of the last
			# command thanks to the trailing exit)
			cmd = ['/bin/sh', '-c', ' '.join(
				f"'{a}'" for a in cmd) + '; exit $?']
		with open(self.log, 'w') as log:
			self.proc = subprocess.Popen(
				cmd, stdin=subprocess.DEVNULL, stdout=log,
				stderr=subprocess.STDOUT, env=reader_env(job))
		self.start = time.monotonic()

	def wait(self, timeout):
		try:
			return self.proc.wait(timeout=timeout)
		except subprocess.TimeoutExpired:
			return None

	def kill(self):
		if self.proc.poll() is None:
			self.proc.kill()
			self.proc.wait(timeout=10)

	def output(self):
		import json
		with open(self.out) as f:
			return json.load(f)

	def log_text(self):
		with open(self.log) as f:
			return f.read()


def start_jobs(m, workdir, jobs, files, extra=None):
	"""Start one files-mode reader per job behind a start barrier; return
	the readers once every one has done its warm-up read (not yet go)."""
	lst = os.path.join(workdir, 'files.txt')
	with open(lst, 'w') as f:
		for rel in files:
			f.write(os.path.join(m.mnt, 'prepared', 'rrc224', 'train',
					     rel) + '\n')
	warm = os.path.join(m.mnt, 'prepared', 'rrc224', 'warm', 'w.jpg')
	go = os.path.join(workdir, 'go')
	readers = []
	for job in jobs:
		args = ['files', lst, '--epochs', str(EPOCHS), '--warm', warm,
			'--ready', os.path.join(workdir, f'ready.{job}'),
			'--go', go] + list((extra or {}).get(job, []))
		readers.append(Reader(workdir, job, args, job))
	ready = ct.wait_until(lambda: all(
		os.path.exists(os.path.join(workdir, f'ready.{j}'))
		for j in jobs) or any(r.proc.poll() is not None
				      for r in readers), RUN_TIMEOUT)
	if not ready or any(r.proc.poll() is not None for r in readers):
		for r in readers:
			r.kill()
		raise RuntimeError('readers did not reach the start barrier: ' +
				   '; '.join(f'{r.name}: {r.log_text()[-300:]}'
					     for r in readers))
	return readers, go


def kill_all(readers):
	for r in readers:
		r.kill()


def test_three_jobs(c, template, results):
	files = None
	with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2'],
		      populate=ct.copy_tree_into(template)) as m:
		files = train_files(m)
		c.eq('dataset size', len(files), NFILES)
		readers, go = start_jobs(m, m.root, ['a', 'b', 'c'], files)
		try:
			s0 = m.stats()['prep']
			open(go, 'w').close()
			t0 = time.monotonic()
			rcs = [r.wait(RUN_TIMEOUT) for r in readers]
			took = time.monotonic() - t0
			s1 = m.stats()['prep']
		finally:
			kill_all(readers)
		print(f'# 3 jobs x {EPOCHS} epochs x {NFILES} files: '
		      f'{took:.2f}s, prep {s0} -> {s1}')
		for r, rc in zip(readers, rcs):
			c.eq(f'job {r.name} exits 0', rc, 0)
			if rc != 0:
				print(r.log_text()[-2000:])
		if any(rc != 0 for rc in rcs):
			return
		out = {r.name: r.output() for r in readers}
		for job, o in out.items():
			c.eq(f'job {job}: {EPOCHS} epochs of {NFILES} samples',
			     [len(e) for e in o['epochs']], [NFILES] * EPOCHS)
			c.eq(f'job {job}: every sample is a 224x224 PPM',
			     {n for e in o['sizes'] for n in e}, {SAMPLE_LEN})
		for e in range(EPOCHS):
			c.check(f'epoch {e}: jobs a, b, c read identical bytes '
				'(sha256 lists)',
				out['a']['epochs'][e] == out['b']['epochs'][e]
				== out['c']['epochs'][e])
		for job, o in out.items():
			same = sum(x == y for x, y in zip(o['epochs'][0],
							  o['epochs'][1]))
			c.eq(f'job {job}: epoch 1 differs from epoch 0 for every '
			     'file (count of equal samples)', same, 0)
			c.eq(f'job {job}: all samples of an epoch distinct',
			     len(set(o['epochs'][0])), NFILES)
		decodes = s1['decodes'] - s0['decodes']
		shared = s1['shared'] - s0['shared']
		opens = 3 * NFILES * EPOCHS
		c.ge('prep.decodes >= files x epochs (each version made once)',
		     decodes, NFILES * EPOCHS)
		c.le('prep.decodes <= files x epochs x 1.1 + 2 (shared, '
		     'not x 3)', decodes, int(NFILES * EPOCHS * 1.1) + 2)
		c.ge('prep.shared + prep.decodes >= opens', shared + decodes,
		     opens)
		c.eq('prep.errors unchanged', s1['errors'], s0['errors'])
		c.eq('prep.staged_bytes back to 0: every job read every sample '
		     '(decode-ahead is off by default)', s1['staged_bytes'], 0)
		results['abc'] = out['a']['epochs']
		results['files'] = files


def test_killed_job(c, template, results):
	with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2',
		       '--prep-mem=4M'],
		      populate=ct.copy_tree_into(template)) as m:
		files = train_files(m)
		gate = os.path.join(m.root, 'gate')
		extra = {'k': ['--pause-at', '0:15'],
			 'a2': ['--wait-at', f'0:25:{gate}'],
			 'b2': ['--wait-at', f'0:25:{gate}']}
		readers, go = start_jobs(m, m.root, ['a2', 'b2', 'k'], files,
					 extra)
		a2, b2, k = readers
		try:
			open(go, 'w').close()
			paused = ct.wait_until(lambda: 'paused' in k.log_text() or
					       k.proc.poll() is not None,
					       RUN_TIMEOUT)
			c.check('job k paused mid-epoch 0 with a file open',
				paused and 'paused' in k.log_text(),
				k.log_text()[-300:])
			k.proc.send_signal(signal.SIGKILL)
			c.eq('job k killed by SIGKILL', k.wait(10), -signal.SIGKILL)
			t0 = time.monotonic()
			open(gate, 'w').close()
			rcs = [r.wait(RUN_TIMEOUT) for r in (a2, b2)]
			took = time.monotonic() - t0
		finally:
			kill_all(readers)
		print(f'# after the kill, a2 and b2 finished in {took:.2f}s; '
		      f'prep {m.stats()["prep"]}')
		c.eq('jobs a2, b2 finish after k was killed (exit codes)', rcs,
		     [0, 0])
		c.le('prep.staged_bytes within --prep-mem=4M with a dead job',
		     m.stats()['prep']['staged_bytes'], 4 << 20)
		c.check('daemon alive after the kill',
			bool(m.pids) and all(ct.pid_alive(p) for p in m.pids))
		if rcs != [0, 0]:
			for r in (a2, b2):
				print(r.log_text()[-2000:])
			return
		oa, ob = a2.output(), b2.output()
		for e in range(EPOCHS):
			c.check(f'epoch {e}: a2 and b2 read identical bytes',
				oa['epochs'][e] == ob['epochs'][e])
		if 'abc' in results:
			c.check('a2 (4M staging, a job killed) got the same '
				'samples as job a on the first mount',
				oa['epochs'] == results['abc'])
		# a job started now still gets bit-identical samples
		lst = os.path.join(m.root, 'files.txt')
		late = Reader(m.root, 'late', ['files', lst, '--epochs', '1'],
			      'late')
		rc = late.wait(RUN_TIMEOUT)
		late.kill()
		c.eq('a later job reads every file (exit code)', rc, 0)
		if rc == 0:
			c.check('the later job gets version 0 as a2 did',
				late.output()['epochs'][0] == oa['epochs'][0])


def run_paused(c, m, label, files, gate_check):
	"""Job 'p' reads 2 epochs of files, waiting at the middle of the
	second until gate_check(m) (polled) lets it go. Its output."""
	gate = os.path.join(m.root, f'gate.{label}')
	lst = os.path.join(m.root, f'files.{label}.txt')
	with open(lst, 'w') as f:
		for rel in files:
			f.write(os.path.join(m.mnt, 'prepared', 'rrc224', 'train',
					     rel) + '\n')
	r = Reader(m.root, f'p.{label}', ['files', lst, '--epochs', '2',
					   '--wait-at', f'1:{NFILES // 2}:{gate}'], 'p')
	try:
		waiting = ct.wait_until(lambda: r.proc.poll() is not None or
					gate_check(m), RUN_TIMEOUT)
		open(gate, 'w').close()
		rc = r.wait(RUN_TIMEOUT)
	finally:
		r.kill()
	c.eq(f'{label}: reader exits 0', rc, 0)
	if rc != 0:
		print(r.log_text()[-2000:])
		return None, waiting
	return r.output(), waiting


def test_decode_ahead(c, template, results):
	"""A job that stalls half way through its second epoch: the idle
	decode-ahead thread decodes the rest of that epoch's samples; the job
	then reads them (prep.ahead), and gets exactly the bytes it gets with
	decode-ahead off (same seed, version k still its k-th open), within
	the memory that was free."""
	files = None
	# --prep-ahead-idle=0: the shared test machine may never have half a
	# core idle; the paused job leaves the work to nice 19 alone
	with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2',
		       '--prep-ahead=1', '--prep-ahead-idle=0'],
		      populate=ct.copy_tree_into(template)) as m:
		files = train_files(m)
		rest = NFILES - NFILES // 2
		out_on, waited = run_paused(
			c, m, 'ahead on', files,
			lambda m: m.stats()['prep']['ahead_bytes'] >= rest * SAMPLE_LEN)
		s = m.stats()['prep']
		print(f'# decode-ahead on: prep {s}')
		c.check('while the job waits, the rest of its epoch is decoded '
			'ahead (prep.ahead_bytes)', waited, f'prep {s}')
		c.ge('the job read the samples decoded ahead (prep.ahead)',
		     s['ahead'], rest)
		# an ahead decode that an open overtakes (the job reads in file
		# order before it pauses) is dropped: only those can be wasted
		c.le('dropped unread: only samples an open made first '
		     '(prep.ahead_wasted)', s['ahead_wasted'], NFILES // 2)
		c.eq('nothing waits decoded ahead after the last pass '
		     '(prep.ahead_bytes)', s['ahead_bytes'], 0)
		c.le('prep.staged_bytes within --prep-mem (1G)', s['staged_bytes'],
		     1 << 30)
	with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2',
		       '--prep-ahead=0'],
		      populate=ct.copy_tree_into(template)) as m:
		out_off, _ = run_paused(c, m, 'ahead off', files, lambda m: True)
		s = m.stats()['prep']
		c.eq('--prep-ahead=0: nothing decoded ahead', s['ahead'], 0)
	if out_on and out_off:
		for e in range(2):
			c.eq(f'epoch {e}: the same bytes with decode-ahead on and off '
			     '(files with equal sha256)',
			     sum(a == b for a, b in zip(out_on['epochs'][e],
							out_off['epochs'][e])), NFILES)
		c.eq('epochs differ (new versions)',
		     sum(a == b for a, b in zip(out_on['epochs'][0],
						out_on['epochs'][1])), 0)


def test_job_guess(c, template, results):
	with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2'],
		      populate=ct.copy_tree_into(template)) as m:
		files = train_files(m)
		root = os.path.join(m.mnt, 'prepared', 'rrc224', 'train')
		dl = Reader(m.root, 'dl', ['dataloader', root, '--epochs',
					   str(EPOCHS)], None, shell=True)
		rc = dl.wait(RUN_TIMEOUT * 2)
		dl.kill()
		c.eq('DataLoader process (no COORDFS_JOB) exits 0', rc, 0)
		if rc != 0:
			print(dl.log_text()[-3000:])
			return
		o = dl.output()
		c.check('DataLoader: workers did the reading (>= 2 worker pids, '
			'none the trainer\'s)', len(o['worker_pids']) >= 2 and
			o['pid'] not in o['worker_pids'],
			f'trainer {o["pid"]}, workers {o["worker_pids"]}')
		for e in range(EPOCHS):
			c.eq(f'DataLoader epoch {e + 1}: every file once',
			     sorted(o['epochs'][e]), files)

		lst = os.path.join(m.root, 'files.txt')
		with open(lst, 'w') as f:
			for rel in files:
				f.write(os.path.join(root, rel) + '\n')
		x = Reader(m.root, 'x', ['files', lst, '--epochs', str(EPOCHS)],
			   'x')
		rc = x.wait(RUN_TIMEOUT)
		x.kill()
		c.eq('COORDFS_JOB=x reader exits 0', rc, 0)
		if rc != 0:
			print(x.log_text()[-2000:])
			return
		ox = x.output()
		for e in range(EPOCHS):
			got = [o['epochs'][e].get(rel) for rel in files]
			same = sum(g == w for g, w in zip(got, ox['epochs'][e]))
			c.eq(f'DataLoader epoch {e + 1} == COORDFS_JOB=x read '
			     f'{e + 1} (files with equal bytes)', same, NFILES)
		same = sum(o['epochs'][0][rel] == o['epochs'][1][rel]
			   for rel in files)
		c.eq('DataLoader epochs 1 and 2 differ for every file', same, 0)
		if 'abc' in results:
			c.check('same seed on another mount: x reads what job a '
				'read', ox['epochs'] == results['abc'])

		# another process (not a child of the trainer) is another job
		other = Reader(m.root, 'other', ['files', lst, '--epochs', '1'],
			       None, shell=True)
		rc = other.wait(RUN_TIMEOUT)
		other.kill()
		c.eq('a second process without COORDFS_JOB exits 0', rc, 0)
		if rc == 0:
			c.check('it is a new job: its first read is version 0',
				other.output()['epochs'][0] == ox['epochs'][0])

		# the threads of one process are one job: FUSE names the
		# reading thread, the job is its process
		thr = Reader(m.root, 'threads', ['files', lst, '--epochs',
						 str(EPOCHS), '--thread-per-epoch'],
			     None, shell=True)
		rc = thr.wait(RUN_TIMEOUT)
		thr.kill()
		c.eq('a process reading each epoch in a new thread exits 0',
		     rc, 0)
		if rc != 0:
			print(thr.log_text()[-2000:])
			return
		ot = thr.output()
		c.check('its epochs ran in distinct threads, none the main one',
			len(set(ot['tids'])) == EPOCHS and
			ot['pid'] not in ot['tids'],
			f'pid {ot["pid"]}, tids {ot["tids"]}')
		for e in range(EPOCHS):
			same = sum(g == w for g, w in zip(ot['epochs'][e],
							  ox['epochs'][e]))
			c.eq(f'threads of one process are one job: epoch {e + 1} '
			     f'is version {e} (files equal to x\'s read {e + 1})',
			     same, NFILES)


def main():
	c = ct.Checker('test_prepared_jobs', timeout=270)
	results = {}
	with ct.TempDirs(prefix='coordfs-prepjobs-data-') as data:
		template = os.path.join(data.root, 'dataset')
		make_dataset(template)
		c.group(test_three_jobs, c, template, results)
		c.group(test_killed_job, c, template, results)
		c.group(test_job_guess, c, template, results)
		c.group(test_decode_ahead, c, template, results)
	c.finish()


if __name__ == '__main__':
	main()
