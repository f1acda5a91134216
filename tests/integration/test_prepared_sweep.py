# SPDX-License-Identifier: MIT
"""Integration test: the trials of a hyper-parameter sweep are told apart
(coordfs(1): THE PREPARED VIEW, Jobs).

No reader sets COORDFS_JOB. Each case starts 3 concurrent trials, each an
ImageFolder + DataLoader(num_workers=2) process reading every file of
prepared/RECIPE/train for 2 epochs, through one launcher and one way of
starting DataLoader workers:
  - a bash loop (`python3 ... &`), workers by fork;
  - a Python driver with subprocess.Popen, workers by spawn (persistent);
  - a Python driver with multiprocessing (fork), workers by forkserver;
  - a Python driver with multiprocessing (spawn), workers by fork;
  - a bash loop of `unshare -p -f python3 ...` (each trial in its own pid
    namespace), workers by fork.
Each trial makes itself known with one warm-up read (outside train/), then
all start together. Checks, per case (one recipe each, so counters are its
own):
  - every trial read every file in each epoch, through >= 2 worker pids
    other than its own (its workers did the reading);
  - the 3 trials got the same bytes for every file in each epoch (each is
    its own job, at version k in epoch k+1: trials merged into one job
    would take versions 0..5 between them);
  - epoch 2 differs from epoch 1 for every file (workers belong to their
    trial: workers as jobs of their own would start at version 0 again);
  - prep.decodes for the case <= files x 2 x 1.1 (+ the warm-up file's
    versions): each version decoded once, shared by the 3 trials.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

SEED = 31
EPOCHS = 2
TRIALS = 3
READER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
		      'prep_reader.py')
PY = sys.executable
CASES = [
	# name, launcher, DataLoader workers' start method, recipe; spawn's
	# workers persist across epochs (each spawn imports torch anew: the
	# other cases make new workers every epoch)
	('bash loop', 'bash', 'fork', 'rrc48'),
	('Popen driver, persistent workers', 'popen', 'spawn', 'rrc56'),
	('multiprocessing fork driver', 'mp-fork', 'forkserver', 'rrc64'),
	('multiprocessing spawn driver', 'mp-spawn', 'fork', 'rrc72'),
	('pid namespaces (unshare -p -f)', 'unshare', 'fork', 'rrc80'),
]


def populate(src):
	ct.gendata(src, classes=2, per_class=6, seed=8, size='96x72')
	os.makedirs(os.path.join(src, 'warm'))
	shutil.copy(sorted(glob.glob(os.path.join(src, 'train', '*', '*')))[0],
		    os.path.join(src, 'warm', 'w.jpg'))


def run_case(c, m, files, name, launcher, context, recipe):
	root = os.path.join(m.mnt, 'prepared', recipe, 'train')
	warm = os.path.join(m.mnt, 'prepared', recipe, 'warm', 'w.jpg')
	out = os.path.join(m.root, recipe)
	os.makedirs(out)
	go = os.path.join(out, 'go')
	env = {k: v for k, v in os.environ.items() if k != 'COORDFS_JOB'}
	common = ['--epochs', str(EPOCHS), '--context', context, '--warm', warm,
		  '--go', go] + ['--persistent-workers'] * (context == 'spawn')
	if launcher in ('bash', 'unshare'):
		pre = 'unshare -p -f ' if launcher == 'unshare' else ''
		script = ' '.join(
			f'{pre}{PY} {READER} dataloader {root} {out}/trial-{k}.json '
			f'{" ".join(common)} --ready {out}/trial-{k}.json.ready &'
			for k in range(TRIALS)) + ' wait'
		cmd = ['bash', '-c', 'set -e; ' + script]
	else:
		cmd = [PY, READER, 'sweep', launcher, root, out, '--trials',
		       str(TRIALS)] + common
	before = m.stats()['prep']['decodes']
	log = open(os.path.join(out, 'log'), 'w')
	proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
	ready = [os.path.join(out, f'trial-{k}.json.ready') for k in range(TRIALS)]
	deadline = time.monotonic() + 90
	while not all(map(os.path.exists, ready)) and proc.poll() is None \
			and time.monotonic() < deadline:
		time.sleep(0.02)
	open(go, 'w').close()
	try:
		rc = proc.wait(120)
	except subprocess.TimeoutExpired:
		proc.kill()
		rc = proc.wait()
	log.close()
	if not c.eq(f'{name}: the trials exit 0', rc, 0):
		print(open(os.path.join(out, 'log')).read()[-3000:])
		return
	trials = [json.load(open(os.path.join(out, f'trial-{k}.json')))
		  for k in range(TRIALS)]
	decodes = m.stats()['prep']['decodes'] - before
	for k, t in enumerate(trials):
		c.check(f'{name}: trial {k}: read by >= 2 workers, not itself',
			len(t['worker_pids']) >= 2 and t['pid'] not in t['worker_pids'],
			f'trial {t["pid"]}, workers {t["worker_pids"]}')
		c.check(f'{name}: trial {k}: every file in every epoch',
			all(sorted(e) == files for e in t['epochs']))
	for e in range(EPOCHS):
		same = sum(all(t['epochs'][e].get(f) == trials[0]['epochs'][e].get(f)
			       for t in trials) for f in files)
		c.eq(f'{name}: epoch {e + 1}: the 3 trials got the same sample '
		     '(each its own job, same version)', same, len(files))
	differ = sum(trials[0]['epochs'][0].get(f) != trials[0]['epochs'][1].get(f)
		     for f in files)
	c.eq(f'{name}: epoch 2 differs from epoch 1 for every file (workers '
	     'in their trial\'s job)', differ, len(files))
	# the warm-up file: one version per trial, decoded once each at most
	c.le(f'{name}: decodes <= files x {EPOCHS} x 1.1 + warm-up (each '
	     'version once, shared)', decodes,
	     int(len(files) * EPOCHS * 1.1) + TRIALS)


def main():
	c = ct.Checker('test_prepared_sweep', timeout=560)
	if shutil.which('unshare') is None:
		c.check('unshare available (package util-linux)', False)
		c.finish()
	with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2'],
		      populate=populate) as m:
		train = os.path.join(m.mnt, 'train')
		files = sorted(os.path.relpath(os.path.join(d, f), train)
			       for d, _, fs in os.walk(train) for f in fs)
		c.eq('dataset: 12 training images', len(files), 12)
		for case in CASES:
			c.group(run_case, c, m, files, *case)
	c.finish()


if __name__ == '__main__':
	main()
