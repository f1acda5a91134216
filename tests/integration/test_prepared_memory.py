# SPDX-License-Identifier: MIT
"""Integration test: the prepared view's memory is bounded by the budget,
not by the number of open files.

With --prep-mem=64M --cache-size=64M, six processes (six jobs) each open
prepared/rrc1024/... 60 times (360 opens asking for 1 GiB of 3 MiB samples, every open a
new version and so a new decode) and hold every open file. Checks:
  - the daemon's peak RSS (VmHWM) stays <= cache + prep-mem + 96 MiB;
  - the samples held open at once fit in --prep-mem (not in the I/O
    buffers' allowance beside it);
  - every open is either served, with the right bytes, or refused cleanly
    with ENOMEM (prep.refused counts them); the right bytes: the k-th
    served open of a job is version k of the file, bit-identical to what a
    fresh job gets on its k-th open (a refused open consumes no version);
  - after the files are closed, the daemon's RSS is within prep-mem of
    where it started, and fresh jobs get every open they make.
"""

import errno
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

MIB = 1 << 20
CACHE = 64 * MIB
PREP_MEM = 64 * MIB
PROCS = 6
OPENS = 60
RECIPE = 'rrc1024'

HOLDER = r'''
import hashlib, json, os, sys, time
path, n, out, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
fds, res = [], []
for _ in range(n):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        res.append(["errno", e.errno])
        continue
    fds.append(fd)
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    data = b"".join(chunks)
    res.append(["ok", hashlib.sha256(data).hexdigest(), len(data)])
with open(out + ".tmp", "w") as f:
    json.dump(res, f)
os.rename(out + ".tmp", out)
while not os.path.exists(marker):
    time.sleep(0.05)
for fd in fds:
    os.close(fd)
'''

REFERENCE = r'''
import hashlib, json, sys
out = []
for _ in range(int(sys.argv[2])):
    with open(sys.argv[1], "rb", buffering=0) as f:
        out.append(hashlib.sha256(f.read()).hexdigest())
print(json.dumps(out))
'''


def proc_kib(pid, field):
	with open(f'/proc/{pid}/status') as f:
		for line in f:
			if line.startswith(field + ':'):
				return int(line.split()[1]) * 1024
	raise KeyError(field)


def run(c, m, files):
	pid = m.pids[0]
	rss_before = proc_kib(pid, 'VmRSS')
	marker = os.path.join(m.root, 'close-now')
	outs, procs = [], []
	try:
		for i in range(PROCS):
			out = os.path.join(m.root, f'holder{i}.json')
			path = os.path.join(m.mnt, 'prepared', RECIPE,
					    files[i % len(files)])
			env = {'PATH': '/usr/bin:/bin', 'COORDFS_JOB': f'mem{i}'}
			procs.append(subprocess.Popen(
				[sys.executable, '-c', HOLDER, path, str(OPENS),
				 out, marker], env=env))
			outs.append(out)
		done = ct.wait_until(lambda: all(os.path.exists(o)
						 for o in outs), 200, 0.2)
		c.check(f'{PROCS} processes made their {OPENS} opens each',
			done)
		peak = proc_kib(pid, 'VmHWM')
		rss_held = proc_kib(pid, 'VmRSS')
		results = []
		for o in outs:
			with open(o) as f:
				results.append(json.load(f))
	finally:
		open(marker, 'w').close()
		for p in procs:
			try:
				p.wait(timeout=30)
			except subprocess.TimeoutExpired:
				p.kill()
				p.wait()
	bound = CACHE + PREP_MEM + 96 * MIB
	print(f'# daemon RSS before {rss_before / MIB:.1f} MiB, held '
	      f'{rss_held / MIB:.1f} MiB, peak {peak / MIB:.1f} MiB '
	      f'(bound {bound / MIB:.0f} MiB)')
	c.le('daemon peak RSS (VmHWM) <= cache + prep-mem + 96 MiB', peak,
	     bound)

	want_len = ct.ppm_size(1024, 1024)
	served = sum(r[0] == 'ok' for res in results for r in res)
	refused = [r[1] for res in results for r in res if r[0] != 'ok']
	print(f'# {served} opens served, {len(refused)} refused')
	c.eq('every open was made', served + len(refused), PROCS * OPENS)
	c.ge('some opens were served', served, PROCS)
	c.ge('the budget refused some opens', len(refused), 1)
	c.eq('every refusal is ENOMEM',
	     sorted(set(refused)), [errno.ENOMEM] if refused else [])
	c.ge('prep.refused counts them', m.stats()['prep']['refused'],
	     len(refused))
	c.eq('every served sample has the size of a 1024x1024 PPM',
	     {r[2] for res in results for r in res if r[0] == 'ok'},
	     {want_len})
	# Every served open was still held when the daemon's memory was
	# measured, each pinning a sample of its own (a file per job): they
	# must all fit in --prep-mem. The 64 MiB of I/O buffers beside it are
	# not theirs: a user holding samples open took them from everyone's
	# reads, past the bound.
	c.le('samples held open at once fit in --prep-mem', served * want_len, PREP_MEM)

	# Once the files are closed their samples are no longer pinned: they
	# may stay staged for the other jobs, within --prep-mem (the held
	# samples never went past it, so RSS need not drop), and the budget
	# is free for others: the fresh jobs below get every open they make.
	ct.wait_until(
		lambda: proc_kib(pid, 'VmRSS') <= rss_before + PREP_MEM + 16 * MIB, 15, 0.2)
	rss_after = proc_kib(pid, 'VmRSS')
	print(f'# daemon RSS after closing {rss_after / MIB:.1f} MiB')
	c.le('daemon RSS after closing <= before + prep-mem + 16 MiB',
	     rss_after, rss_before + PREP_MEM + 16 * MIB)

	# the right bytes: a fresh job's k-th open gives version k
	for i, res in enumerate(results):
		got = [r[1] for r in res if r[0] == 'ok']
		path = os.path.join(m.mnt, 'prepared', RECIPE,
				    files[i % len(files)])
		proc = subprocess.run(
			[sys.executable, '-c', REFERENCE, path, str(len(got))],
			env={'PATH': '/usr/bin:/bin', 'COORDFS_JOB': f'ref{i}'},
			capture_output=True, text=True, timeout=120)
		want = json.loads(proc.stdout) if proc.returncode == 0 else \
			proc.stderr
		c.eq(f'job mem{i}: its {len(got)} served samples are versions '
		     f'0..{len(got) - 1}, bit-identical', got, want)


def main():
	c = ct.Checker('test_prepared_memory', timeout=280)
	with ct.TempDirs(prefix='coordfs-prepmem-data-') as data:
		template = os.path.join(data.root, 'dataset')
		ct.gendata(template, 2, 4, 11, size='400x300')
		files = []
		for d, _, names in os.walk(os.path.join(template, 'train')):
			files += [os.path.relpath(os.path.join(d, n), template)
				  for n in names]
		files.sort()
		# Under AddressSanitizer (a sanitized build), freed blocks wait in
		# a quarantine and the sanitizer's allocator keeps freed pages:
		# that is the sanitizer's memory, not the daemon's. Give both
		# back at once for this daemon. No effect on an ordinary build.
		os.environ['ASAN_OPTIONS'] = ':'.join(
			x for x in (os.environ.get('ASAN_OPTIONS'), 'quarantine_size_mb=0',
				    'allocator_release_to_os_interval_ms=50') if x)
		try:
			m = ct.Mount(['--prepared', '--seed=5', '--prep-threads=2',
				      f'--prep-mem={PREP_MEM}',
				      f'--cache-size={CACHE}'],
				     populate=ct.copy_tree_into(template))
		except ct.MountFailed as e:
			c.check('mount with --prepared', False, str(e))
			c.finish()
		with m:
			if c.eq('one daemon found', len(m.pids), 1):
				c.group(run, c, m, files)
	c.finish()


if __name__ == '__main__':
	main()
