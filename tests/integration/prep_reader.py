# SPDX-License-Identifier: MIT
"""A reading job for the prepared-view integration tests (test_prepared_jobs).

Plain mode, one job (its identity is the COORDFS_JOB of its environment):
    prep_reader.py files LIST OUT --epochs N [--warm PATH] [--ready FILE
        --go FILE] [--pause-at E:I] [--wait-at E:I:FILE]
  reads every path of LIST (one per line) once per epoch, in that order
  (open, read to the end, close), after an optional warm-up read of PATH
  (which makes the job known to the daemon) and a start barrier (touch
  --ready, wait for --go). --pause-at E:I opens file I of epoch E, reads a
  few bytes and sleeps with it open, printing "paused" (to be killed).
  --wait-at E:I:FILE waits for FILE before file I of epoch E.
  --thread-per-epoch reads each epoch in a new thread of the process.
  Prints "E I" per file read, and writes OUT (JSON, atomically):
  {"pid", "epochs": [[sha256 per file], ...], "sizes": [[...], ...],
   "tids": [thread id of each epoch]}.

DataLoader mode, one training process and its workers:
    prep_reader.py dataloader ROOT OUT --epochs N [--context fork|spawn|forkserver]
        [--persistent-workers]
  ImageFolder(ROOT) with a loader returning (sha256 of the file, pid),
  DataLoader(num_workers=2, shuffle=True) for N epochs, its workers started
  with --context (the platform's default otherwise); OUT holds
  {"pid", "epochs": [{relpath: sha256}, ...], "worker_pids": [...]}.

Sweep mode, a Python driver launching concurrent trials in DataLoader mode:
    prep_reader.py sweep popen|mp-fork|mp-spawn ROOT OUTDIR --trials T
        --epochs N [--context ...]
  starts T trials at once with subprocess.Popen or multiprocessing (fork or
  spawn), each writing OUTDIR/trial-K.json (and touching trial-K.json.ready
  at the --go barrier), and fails if any trial fails. --warm, --go and
  --context are passed on to each trial.
Exit status 0 on success, 1 with a message on any error.
"""

import hashlib
import json
import os
import sys
import threading
import time

WAIT_MAX = 120.0	# seconds any barrier waits at most


def wait_for(path):
	deadline = time.monotonic() + WAIT_MAX
	while not os.path.exists(path):
		if time.monotonic() > deadline:
			raise TimeoutError(f'waited {WAIT_MAX}s for {path}')
		time.sleep(0.005)


def read_all(path):
	h = hashlib.sha256()
	n = 0
	with open(path, 'rb', buffering=0) as f:
		while True:
			block = f.read(1 << 20)
			if not block:
				break
			h.update(block)
			n += len(block)
	return h.hexdigest(), n


def write_json(path, obj):
	tmp = path + '.tmp'
	with open(tmp, 'w') as f:
		json.dump(obj, f)
	os.rename(tmp, path)


def parse_opts(args):
	opts = {'epochs': 1, 'warm': None, 'ready': None, 'go': None,
		'pause': None, 'wait': {}, 'threads': False, 'context': None,
		'trials': 1, 'persistent': False}
	i = 0
	while i < len(args):
		a, v = args[i], args[i + 1] if i + 1 < len(args) else None
		if a == '--thread-per-epoch':
			opts['threads'] = True
			i += 1
			continue
		if a == '--persistent-workers':
			opts['persistent'] = True
			i += 1
			continue
		if v is None:
			raise ValueError(f'{a} needs a value')
		if a == '--epochs':
			opts['epochs'] = int(v)
		elif a == '--context':
			opts['context'] = v
		elif a == '--trials':
			opts['trials'] = int(v)
		elif a == '--warm':
			opts['warm'] = v
		elif a == '--ready':
			opts['ready'] = v
		elif a == '--go':
			opts['go'] = v
		elif a == '--pause-at':
			e, k = v.split(':')
			opts['pause'] = (int(e), int(k))
		elif a == '--wait-at':
			e, k, path = v.split(':', 2)
			opts['wait'][(int(e), int(k))] = path
		else:
			raise ValueError(f'unknown option {a}')
		i += 2
	return opts


def start_barrier(opts):
	"""The warm-up read, then ready/go."""
	if opts['warm']:
		read_all(opts['warm'])
	if opts['ready']:
		open(opts['ready'], 'w').close()
	if opts['go']:
		wait_for(opts['go'])


def files_mode(list_path, out, opts):
	with open(list_path) as f:
		files = [line.rstrip('\n') for line in f if line.strip()]
	start_barrier(opts)
	epochs, sizes, tids = [], [], []

	def epoch(e):
		tids.append(threading.get_native_id())
		hashes, lens = [], []
		for i, path in enumerate(files):
			if (e, i) in opts['wait']:
				wait_for(opts['wait'][(e, i)])
			if opts['pause'] == (e, i):
				f = open(path, 'rb', buffering=0)
				f.read(100)
				print('paused', flush=True)
				time.sleep(WAIT_MAX)
				raise TimeoutError('paused job was not killed')
			digest, n = read_all(path)
			hashes.append(digest)
			lens.append(n)
			print(e, i, flush=True)
		epochs.append(hashes)
		sizes.append(lens)

	for e in range(opts['epochs']):
		if opts['threads']:
			t = threading.Thread(target=epoch, args=(e,))
			t.start()
			t.join()
			if len(epochs) != e + 1:
				raise RuntimeError(f'epoch {e} failed in its thread')
		else:
			epoch(e)
	write_json(out, {'pid': os.getpid(), 'epochs': epochs,
			 'sizes': sizes, 'tids': tids})


def hash_loader(path):
	"""ImageFolder loader: the sample is (path, sha256 of the file, pid)."""
	return path, read_all(path)[0], os.getpid()


def dataloader_mode(root, out, opts):
	import torch
	from torchvision import datasets
	torch.set_num_threads(1)
	ds = datasets.ImageFolder(root, loader=hash_loader)
	gen = torch.Generator()
	gen.manual_seed(5)
	loader = torch.utils.data.DataLoader(
		ds, batch_size=4, num_workers=2, shuffle=True, generator=gen,
		collate_fn=list, multiprocessing_context=opts['context'],
		persistent_workers=opts['persistent'])
	start_barrier(opts)
	epochs, workers = [], set()
	for _ in range(opts['epochs']):
		got = {}
		for batch in loader:
			for (path, digest, pid), _label in batch:
				got[os.path.relpath(path, root)] = digest
				workers.add(pid)
		epochs.append(got)
	write_json(out, {'pid': os.getpid(), 'epochs': epochs,
			 'worker_pids': sorted(workers)})


def trial(root, out, opts):
	"""One trial of a sweep (a multiprocessing target)."""
	dataloader_mode(root, out, opts)


def sweep_mode(launcher, root, outdir, opts):
	import multiprocessing
	import subprocess
	outs = [os.path.join(outdir, f'trial-{k}.json') for k in range(opts['trials'])]
	args = ['--epochs', str(opts['epochs'])]
	for k in ('context', 'warm', 'go'):
		if opts[k]:
			args += ['--' + k, opts[k]]
	if opts['persistent']:
		args.append('--persistent-workers')
	if launcher == 'popen':
		procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__),
					   'dataloader', root, out] + args
					  + ['--ready', out + '.ready'] * bool(opts['go']))
			 for out in outs]
		codes = [p.wait() for p in procs]
	elif launcher in ('mp-fork', 'mp-spawn'):
		ctx = multiprocessing.get_context(launcher[3:])
		procs = [ctx.Process(target=trial, args=(root, out, dict(
			opts, ready=out + '.ready' if opts['go'] else None))) for out in outs]
		for p in procs:
			p.start()
		for p in procs:
			p.join()
		codes = [p.exitcode for p in procs]
	else:
		raise ValueError(f'unknown launcher {launcher}')
	if any(codes) or not all(os.path.exists(o) for o in outs):
		raise RuntimeError(f'trials exited {codes}')


def main():
	try:
		mode = sys.argv[1]
		if mode == 'files':
			files_mode(sys.argv[2], sys.argv[3],
				   parse_opts(sys.argv[4:]))
		elif mode == 'sweep':
			sweep_mode(sys.argv[2], sys.argv[3], sys.argv[4],
				   parse_opts(sys.argv[5:]))
		elif mode == 'dataloader':
			dataloader_mode(sys.argv[2], sys.argv[3],
					parse_opts(sys.argv[4:]))
		else:
			raise ValueError(f'unknown mode {mode}')
	except Exception as e:	# noqa: BLE001 - reported, exit 1
		print(f'prep_reader: {type(e).__name__}: {e}', flush=True)
		sys.exit(1)


if __name__ == '__main__':
	main()
