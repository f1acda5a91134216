# SPDX-License-Identifier: MIT
"""Integration test: the prepared view against local users (coordfs(1): THE MOUNT, THE PREPARED VIEW).

An unprivileged user is created for the test (useradd, removed at the
end, even on failure); its readers are subprocesses running with its uid.
Checks:
  - permissions: the user cannot read a root-owned 0600 image or list a
    0700 directory in any view (raw, prepared/center224, rrc224,
    resize64), nor read an image through a symlink whose target sits in
    that 0700 directory; it reads what is readable; mirrors carry the
    source's owner, group and mode without write bits;
  - symlinked images: ImageFolder over prepared/center224/train lists the
    same samples as over train (links included), a link's sample equals
    its target's; links leading out of SOURCE (relative or absolute) or
    nowhere are listed but every read fails with EIO, and a link to a
    file inside SOURCE by its absolute path is followed;
  - an undecodable file opens fine and fails read() with EIO, counts in
    prep.errors, and the log line names the file;
  - jobs are keyed by (uid, COORDFS_JOB): root and the user with the same
    COORDFS_JOB get independent version sequences;
  - filling the job table (300 one-open jobs of root) does not reset an
    active job holding an open file; root's surplus jobs are refused with
    EAGAIN, while the other user still gets a job.
"""

import errno
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

SEED = 99
VIEWS = ['', 'prepared/center224/', 'prepared/rrc224/', 'prepared/resize64/']

def run_root(ops, job=None, timeout=60):
	"""PROBE as root, in its own process (its own job)."""
	env = {'PATH': '/usr/bin:/bin'}
	if job:
		env['COORDFS_JOB'] = job
	proc = subprocess.run([sys.executable, '-c', ct.PROBE, json.dumps(ops)],
			      env=env, capture_output=True, text=True,
			      timeout=timeout)
	if proc.returncode != 0:
		raise RuntimeError(f'probe exited {proc.returncode}: '
				   f'{proc.stderr}')
	return json.loads(proc.stdout)


def save_jpeg(path, w, h, seed, mode=0o644):
	import numpy as np
	from PIL import Image
	os.makedirs(os.path.dirname(path), exist_ok=True)
	rng = np.random.default_rng(seed)
	arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
	Image.fromarray(arr).save(path, 'JPEG', quality=90)
	os.chmod(path, mode)


def populate(outside):
	def fill(src):
		# the user must reach the mount point: mkdtemp makes 0700
		os.chmod(os.path.dirname(src), 0o755)
		os.chmod(src, 0o755)
		pub = os.path.join(src, 'train', 'pub')
		priv = os.path.join(src, 'train', 'priv')
		save_jpeg(os.path.join(pub, 'a.jpg'), 120, 90, 1)
		save_jpeg(os.path.join(pub, 'secret.jpg'), 100, 80, 2, 0o600)
		save_jpeg(os.path.join(priv, 'c.jpg'), 90, 70, 3)
		os.chmod(priv, 0o700)
		os.symlink('a.jpg', os.path.join(pub, 'link_a.jpg'))
		os.symlink('link_a.jpg', os.path.join(pub, 'chain.jpg'))
		os.symlink('../priv/c.jpg', os.path.join(pub, 'link_c.jpg'))
		os.symlink(os.path.join(src, 'train', 'pub', 'a.jpg'),
			   os.path.join(pub, 'abs_in.jpg'))
		esc = os.path.join(src, 'escape')
		os.makedirs(esc)
		os.symlink(outside, os.path.join(esc, 'abs_out.jpg'))
		os.symlink(os.path.relpath(outside, esc),
			   os.path.join(esc, 'rel_out.jpg'))
		os.symlink('nothing.jpg', os.path.join(esc, 'dangling.jpg'))
		bad = os.path.join(src, 'bad')
		os.makedirs(bad)
		with open(os.path.join(bad, 'broken.jpg'), 'wb') as f:
			f.write(b'\xff\xd8\xff\xe0' + b'garbage' * 100)
	return fill


def test_permissions(c, m, user):
	ops = []
	for v in VIEWS:
		base = os.path.join(m.mnt, v)
		ops += [['open', base + 'train/pub/secret.jpg'],
			['list', base + 'train/priv'],
			['open', base + 'train/priv/c.jpg'],
			['open', base + 'train/pub/a.jpg'],
			['list', base + 'train/pub']]
	res = user.run(ops)
	for i, v in enumerate(VIEWS):
		r = res[i * 5:(i + 1) * 5]
		name = v or 'raw/'
		c.eq(f'{name}: user cannot read root\'s 0600 secret.jpg', r[0],
		     ['errno', errno.EACCES])
		c.eq(f'{name}: user cannot list the 0700 priv/', r[1],
		     ['errno', errno.EACCES])
		c.eq(f'{name}: user cannot read priv/c.jpg', r[2],
		     ['errno', errno.EACCES])
		c.eq(f'{name}: user reads the 0644 a.jpg', r[3][0], 'ok')
		c.check(f'{name}: user lists pub/', r[4][0] == 'ok' and
			'secret.jpg' in r[4][1], repr(r[4]))
	# through a link whose target is in the 0700 directory
	links = user.run([['open', os.path.join(m.mnt, v + 'train/pub/' + n)]
			  for v in VIEWS for n in ('link_c.jpg', 'link_a.jpg')])
	for i, v in enumerate(VIEWS):
		name = v or 'raw/'
		c.eq(f'{name}: user cannot read link_c.jpg (target in 0700 dir)',
		     links[2 * i], ['errno', errno.EACCES])
		c.eq(f'{name}: user reads link_a.jpg', links[2 * i + 1][0], 'ok')
	# root reads everything; attributes follow the source
	for v in VIEWS[1:]:
		for rel in ('train/pub/secret.jpg', 'train/priv/c.jpg',
			    'train/pub/a.jpg'):
			st = os.stat(os.path.join(m.mnt, v, rel))
			raw = os.stat(os.path.join(m.src, rel))
			c.eq(f'{v}{rel}: mode, uid, gid of the source (no write)',
			     (st.st_mode, st.st_uid, st.st_gid),
			     (raw.st_mode & ~0o222, raw.st_uid, raw.st_gid))
		st = os.stat(os.path.join(m.mnt, v, 'train/priv'))
		c.eq(f'{v}train/priv: directory mode of the source',
		     st.st_mode & 0o7777, 0o700 & ~0o222)
		c.eq(f'{v}train/pub/secret.jpg: root reads it',
		     ct.read_in_child(os.path.join(m.mnt, v,
						   'train/pub/secret.jpg'))[0],
		     'ok')


def test_symlinks(c, m):
	from torchvision import datasets
	raw = datasets.ImageFolder(os.path.join(m.mnt, 'train'))
	prep = datasets.ImageFolder(os.path.join(m.mnt, 'prepared/center224/'
						 'train'))
	rel = lambda ds, root: [(os.path.relpath(p, root), y)	# noqa: E731
				for p, y in ds.samples]
	got = rel(prep, os.path.join(m.mnt, 'prepared/center224/train'))
	want = rel(raw, os.path.join(m.mnt, 'train'))
	c.eq('ImageFolder(prepared) samples == ImageFolder(raw), links too',
	     got, want)
	c.check('the links are among them',
		('pub/link_a.jpg', 1) in got and ('pub/chain.jpg', 1) in got,
		repr(got))
	base = os.path.join(m.mnt, 'prepared/center224/train/pub')
	want = ct.sha256_file(os.path.join(base, 'a.jpg'))
	for name in ('link_a.jpg', 'chain.jpg', 'abs_in.jpg'):
		c.eq(f'{name}: the sample of its target a.jpg',
		     ct.sha256_file(os.path.join(base, name)), want)
	esc = os.path.join(m.mnt, 'prepared/center224/escape')
	c.eq('escape/: links out of SOURCE and dangling ones are listed',
	     sorted(os.listdir(esc)), sorted(os.listdir(os.path.join(m.src,
								  'escape'))))
	for name in ('abs_out.jpg', 'rel_out.jpg', 'dangling.jpg'):
		res = ct.read_in_child(os.path.join(esc, name))
		c.eq(f'escape/{name}: read fails with EIO (nothing outside '
		     'SOURCE is served)', res[:2], ('errno', errno.EIO))


def test_bad_file(c, m, log_path):
	path = os.path.join(m.mnt, 'prepared/center224/bad/broken.jpg')
	before = m.stats()['prep']['errors']
	fd = None
	try:
		fd = os.open(path, os.O_RDONLY)
		c.check('an undecodable file opens', True)
		c.errno_of('... and read() fails with EIO',
			   lambda: os.read(fd, 4096), errno.EIO)
	except OSError as e:
		c.check('an undecodable file opens', False, str(e))
	finally:
		if fd is not None:
			os.close(fd)
	c.ge('prep.errors grew', m.stats()['prep']['errors'] - before, 1)
	ok = ct.wait_until(lambda: os.path.exists(log_path) and
			   'bad/broken.jpg' in open(log_path,
						    errors='replace').read(), 5)
	c.check('the log line names the file (bad/broken.jpg)', ok,
		open(log_path, errors='replace').read()[-500:]
		if os.path.exists(log_path) else 'no log file')


def test_jobs_isolated(c, m, user):
	path = os.path.join(m.mnt, 'prepared/rrc224/train/pub/a.jpg')
	ref = run_root([['open', path]] * 3, job='reference')
	c.check('reference job: three different versions',
		len({r[1] for r in ref}) == 3, repr(ref))
	r01 = run_root([['open', path]] * 2, job='shared')
	u01 = user.run([['open', path]] * 2, job='shared')
	r2 = run_root([['open', path]], job='shared')
	c.eq('root job "shared": versions 0, 1', [r[1] for r in r01],
	     [r[1] for r in ref[:2]])
	c.eq('the user\'s job "shared" starts at its own version 0, 1',
	     [r[1] for r in u01], [r[1] for r in ref[:2]])
	c.eq('root\'s "shared" goes on with version 2, not advanced by the '
	     'user', r2[0][1], ref[2][1])


HOLD = r'''
import hashlib, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
print(hashlib.sha256(os.read(fd, 1 << 20)).hexdigest(), flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
os.close(fd)
'''


def test_job_table(c, m, user):
	path = os.path.join(m.mnt, 'prepared/rrc224/train/pub/a.jpg')
	ref = run_root([['open', path]] * 4, job='tref')
	keep = run_root([['open', path]] * 2, job='keep')
	c.eq('job "keep": versions 0, 1', [r[1] for r in keep],
	     [r[1] for r in ref[:2]])
	marker = os.path.join(m.root, 'release')
	holder = subprocess.Popen([sys.executable, '-c', HOLD, path, marker],
				  env={'PATH': '/usr/bin:/bin',
				       'COORDFS_JOB': 'keep'},
				  stdout=subprocess.PIPE, text=True)
	try:
		c.eq('job "keep" holds its file open (version 2)',
		     holder.stdout.readline().strip(), ref[2][1])
		# 300 one-shot jobs of root: more than root's share of the table
		results = {}
		for k in range(300):
			proc = subprocess.run(
				['head', '-c', '1', path],
				env={'PATH': '/usr/bin:/bin',
				     'COORDFS_JOB': f'filler{k}'},
				capture_output=True, timeout=60)
			err = proc.stderr.decode(errors='replace')
			key = 'ok' if proc.returncode == 0 else \
				('EAGAIN' if 'temporarily unavailable' in err
				 else err.strip())
			results[key] = results.get(key, 0) + 1
		print(f'# filler jobs: {results}')
		c.ge('filler jobs served until root\'s share is used',
		     results.get('ok', 0), 200)
		c.ge('further filler jobs refused with EAGAIN',
		     results.get('EAGAIN', 0), 1)
		c.eq('every filler job either served or refused with EAGAIN',
		     results.get('ok', 0) + results.get('EAGAIN', 0), 300)
		c.ge('prep.refused counts them', m.stats()['prep']['refused'],
		     results.get('EAGAIN', 0))
		u = user.run([['open', path]], job='keep')
		c.eq('another user still gets a job (its own version 0)',
		     u[0][1] if u[0][0] == 'ok' else u, ref[0][1])
		again = run_root([['open', path]], job='keep')
		c.eq('job "keep" was not reset: its next open is version 3',
		     again[0][1] if again[0][0] == 'ok' else again, ref[3][1])
	finally:
		open(marker, 'w').close()
		try:
			holder.wait(timeout=20)
		except subprocess.TimeoutExpired:
			holder.kill()
			holder.wait()


def main():
	c = ct.Checker('test_prepared_security', timeout=280)
	if shutil.which('useradd') is None:
		c.check('useradd available (package passwd)', False)
		c.finish()
	with ct.TempDirs(prefix='coordfs-prepsec-') as data, ct.TestUser('cfsprep') as user:
		outside = os.path.join(data.root, 'outside.jpg')
		save_jpeg(outside, 64, 48, 9)
		log_path = os.path.join(data.root, 'daemon.log')
		try:
			# other users read it: allow_other (coordfs(1): no one but
			# the mounting user by default, root's mounts included)
			m = ct.Mount(['--prepared', f'--seed={SEED}', '-o', 'allow_other',
				      '--prep-threads=2', '--cache-size=32M',
				      f'--log-file={log_path}'],
				     populate=populate(outside))
		except ct.MountFailed as e:
			c.check('mount with --prepared', False, str(e))
			c.finish()
		with m:
			c.group(test_permissions, c, m, user)
			c.group(test_symlinks, c, m)
			c.group(test_bad_file, c, m, log_path)
			c.group(test_jobs_isolated, c, m, user)
			c.group(test_job_table, c, m, user)
	c.finish()


if __name__ == '__main__':
	main()
