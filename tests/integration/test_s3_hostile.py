# SPDX-License-Identifier: MIT
"""coordfs over an S3 endpoint that misbehaves (s3_fixture.FakeS3).

No radosgw: FakeS3 answers on loopback, anonymously (--no-sign-request),
so each mount comes up in well under a second. Checks:

- a stalled store (GETs taken, never answered): readers of stalled
  objects get EIO within --source-timeout (plus the time to notice); 70
  such readers at once leave FUSE threads free, so a cached file and
  metadata are still served within a second; SIGTERM with stalled GETs in
  flight unmounts within 5 s and the blocked readers get EIO, not a hang;
  so does fusermount3 -u with --prefill's GETs stalled.
- transient answers do not poison a file: 403 RequestTimeTooSkewed, 400
  RequestTimeout and 401 fail that read with EIO and the next read (a
  second later) succeeds; 400 ExpiredToken refreshes the (container)
  credentials and the same read succeeds; only snapshot answers (404, an
  object changed) are final: later reads fail without asking the store.
- listings that never end: continuation tokens A, B, A, B fail the mount
  with one line; endless pages of new keys and tokens fail it at
  --list-timeout (also -o list_timeout=), and so does a page whose body
  keeps trickling in; the client's key and byte caps
  stop such a listing with -EFBIG (s3_cli).
- odd keys and ETags: a key over 1024 bytes, an ETag over 128 bytes and
  one holding a line feed (it would add headers) are skipped and counted (source.skipped_keys), the rest mounts; an
  object listed with a weak ETag (W/"...") reads, compared as listed.
- listed sizes no file can have (2^64-1, 2^63) are skipped and counted:
  the next file's bytes are its own, through the mount and the peer port.
- a listing whose pages name keys outside the prefix asked for, one key
  on two pages, and keys with '..', '.' or empty components (some only
  once url-decoded, %2E%2E): only the plain keys become files, each once,
  with its own bytes; the rest is skipped and counted in
  source.skipped_keys, those outside the prefix told in one line.
- GET answers no honest store gives: a 307 to another host (never
  followed), a gzip-encoded range, an object replaced between two GETs of
  one read by a store that ignores If-Match: EIO, counted, never bytes of
  another host or of two versions; the file reads again once answered.
- two nodes over a store answering every GET 1.2 s late: the peer that
  reads through it for the other is not taken for slow (the reader has
  read nothing itself, only timed the mount's probe GET).
- a store that lists but refuses signed GETs (SignatureDoesNotMatch,
  AccessDenied) fails the mount with one line naming the code, instead
  of EIO on every read; a probe that meets anything else mounts, a
  stalled one after --source-timeout.
- an error answer (503) whose body never ends, on a GET or a listing
  page: the read fails with EIO within --source-timeout, the mount
  within --list-timeout (only 8 KiB of an error document is read).
- a credential document whose token holds CR LF is refused (the mount
  fails with one line): no header of the endpoint's choosing reaches the
  store.
- a shared credentials file readable by group or others mounts with one
  warning saying so (as ssh does for keys); a 0600 one without.
- a root mount whose HOME names a user's directory: that user's
  ~/.aws/config, or a config others may write, fails the mount with one
  line, and its credential_process never runs.
"""

import errno
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402
import s3_fixture as s3f	# noqa: E402

KIB = 1024


def mount_fake(c, td, fake, opts=(), label=''):
	"""Mount s3://fake at td.mnt from fake; True when it came up."""
	env = dict(os.environ)
	for k in list(env):
		if k.startswith('AWS_'):
			del env[k]
	rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint, '--no-sign-request',
				     '--log-file=' + os.path.join(td.root, 'log')] +
				    list(opts) + ['s3://' + fake.bucket, td.mnt], env=env)
	td.mount_stderr = err
	return c.check(f'{label}mounts', rc == 0 and ct.is_mounted(td.mnt),
		       f'rc={rc} {err.strip()}')


READER = (
	'import sys, time\n'
	't0 = time.monotonic()\n'
	'try:\n'
	'    with open(sys.argv[1], "rb", buffering=0) as f:\n'
	'        n = len(f.read())\n'
	'    print("ok", n, time.monotonic() - t0)\n'
	'except OSError as e:\n'
	'    print("errno", e.errno, time.monotonic() - t0)\n'
)


class Reader:
	"""A whole-file read in a child process (a read blocked in the daemon
	cannot block the test), timed by the child itself."""

	def __init__(self, path):
		self.out = tempfile.TemporaryFile(mode='w+')
		self.proc = subprocess.Popen([sys.executable, '-c', READER, path],
					     stdin=subprocess.DEVNULL, stdout=self.out,
					     stderr=subprocess.STDOUT, text=True)

	def result(self, timeout):
		"""('ok', size, secs), ('errno', n, secs) or ('timeout', None, None)."""
		try:
			self.proc.wait(timeout=timeout)
		except subprocess.TimeoutExpired:
			return ('timeout', None, None)
		self.out.seek(0)
		parts = self.out.read().split()
		if len(parts) == 3 and parts[0] in ('ok', 'errno'):
			return (parts[0], int(parts[1]), float(parts[2]))
		return ('error', self.proc.returncode, ' '.join(parts))

	def reap(self):
		"""Wait for a child left blocked (the mount is torn down by then)."""
		if self.proc.poll() is None:
			self.proc.kill()
			try:
				self.proc.wait(timeout=5)
			except subprocess.TimeoutExpired:
				pass
		self.out.close()


def timed(fn):
	t0 = time.monotonic()
	try:
		fn()
		return 'ok', time.monotonic() - t0
	except OSError as e:
		return errno.errorcode.get(e.errno, str(e.errno)), time.monotonic() - t0


def read_timed_in_child(path, limit):
	r = Reader(path)
	res = r.result(limit)
	r.reap()
	return res


def test_stalled_store(c):
	# more stalled readers than may wait on the source (56 of 64 threads)
	objs = {'cached.bin': os.urandom(100 * KIB)}
	for i in range(70):
		objs[f'slow/{i:02d}.bin'] = os.urandom(10 * KIB)
	objs['other/fresh.bin'] = os.urandom(5 * KIB)
	with s3f.FakeS3(objs) as fake, ct.TempDirs() as td:
		if not mount_fake(c, td, fake, ['--source-timeout=3', '--no-kernel-cache'],
				  'stalled store: '):
			return
		mnt = td.mnt
		res = read_timed_in_child(os.path.join(mnt, 'cached.bin'), 20)
		c.eq('cached.bin reads while the store answers', res[:2], ('ok', 100 * KIB))
		fake.stall('slow/')
		readers = [Reader(os.path.join(mnt, f'slow/{i:02d}.bin')) for i in range(70)]
		time.sleep(1.5)  # 56 now wait on the store, the rest were refused
		res = read_timed_in_child(os.path.join(mnt, 'cached.bin'), 20)
		c.check('a cached file reads within 1 s while 70 reads stall',
			res[0] == 'ok' and res[1] == 100 * KIB and res[2] < 1.0, f'{res}')
		st, took = timed(lambda: os.stat(os.path.join(mnt, 'other/fresh.bin')))
		c.check('metadata is served within 1 s meanwhile', st == 'ok' and took < 1.0,
			f'{st} after {took:.2f}s')
		st, took = timed(lambda: os.listdir(os.path.join(mnt, 'slow')))
		c.check('a directory lists within 1 s meanwhile', st == 'ok' and took < 1.0,
			f'{st} after {took:.2f}s')
		results = [r.result(30) for r in readers]
		kinds = sorted({(r[0], r[1]) for r in results})
		c.eq('every stalled read fails with EIO', kinds, [('errno', errno.EIO)])
		worst = max((r[2] for r in results if r[2] is not None), default=None)
		c.check('... within --source-timeout=3 plus 3 s', worst is not None and worst <= 6.0,
			f'slowest {worst}')
		for r in readers:
			r.reap()

		# SIGTERM with GETs in flight, the default --source-timeout (60 s):
		# only cancelling them lets the daemon go within 5 s.
		ct.force_unmount(mnt)
		if not mount_fake(c, td, fake, ['--no-kernel-cache'], 'SIGTERM: '):
			return
		pids = ct.find_daemon_pids(mnt)
		readers = [Reader(os.path.join(mnt, f'slow/{i:02d}.bin')) for i in range(8)]
		ct.wait_until(lambda: fake.gets('slow/') >= 8, 10)
		time.sleep(0.5)
		t0 = time.monotonic()
		for pid in pids:
			os.kill(pid, signal.SIGTERM)
		gone = ct.wait_until(lambda: not any(ct.pid_alive(p) for p in pids), 5.0)
		c.check('SIGTERM: the daemon exits within 5 s with stalled GETs in flight', gone,
			f'still alive after {time.monotonic() - t0:.1f}s')
		c.check('SIGTERM: unmounted', ct.wait_until(lambda: not ct.is_mounted(mnt), 2.0))
		results = [r.result(5) for r in readers]
		c.check('SIGTERM: blocked readers get an error, not a hang',
			all(r[0] == 'errno' for r in results), f'{results}')
		# EIO from the daemon, ECONNABORTED when the kernel ends the
		# request as the mount goes away, ENOTCONN for a late open
		c.check('SIGTERM: ... EIO, ECONNABORTED or ENOTCONN',
			all(r[1] in (errno.EIO, errno.ECONNABORTED, errno.ENOTCONN)
			    for r in results), f'{results}')
		for r in readers:
			r.reap()


def mount_fake_creds(c, td, fake, cs, opts=(), label=''):
	"""Mount with temporary container credentials from cs (FakeCredServer)."""
	env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
	env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=cs.container_uri,
		   AWS_CONTAINER_AUTHORIZATION_TOKEN=cs.auth_token,
		   AWS_EC2_METADATA_DISABLED='true')
	rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint,
				     '--log-file=' + os.path.join(td.root, 'log')] +
				    list(opts) + ['s3://' + fake.bucket, td.mnt], env=env)
	return c.check(f'{label}mounts', rc == 0 and ct.is_mounted(td.mnt),
		       f'rc={rc} {err.strip()}')


def test_hostile_credential_document(c):
	# a container endpoint whose token holds CR LF: taken as it is, it
	# would add a header of its choosing to every request to the bucket
	objs = {'a.bin': os.urandom(100)}
	with s3f.FakeS3(objs) as fake, s3f.FakeCredServer(
			'AKFAKE', 'secret', token='tok\r\nX-Injected: yes') as cs, ct.TempDirs() as td:
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=cs.container_uri,
			   AWS_CONTAINER_AUTHORIZATION_TOKEN=cs.auth_token,
			   AWS_EC2_METADATA_DISABLED='true')
		rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint, 's3://' + fake.bucket,
					     td.mnt], env=env)
		c.check('token with CR LF: the mount fails', rc not in (0, None), f'rc={rc}')
		c.check('... with one line: not a credentials document',
			'not a credentials document' in err and len(err.strip().splitlines()) == 1,
			err)
		c.eq('... no request reached the store', len(fake.requests), 0)
		c.check('... no header was injected',
			not any('x-injected' in h for h in fake.headers), f'{fake.headers}')


def test_relative_token_file(c):
	"""AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE relative to the caller's
	directory: read at mount, and again at each renewal once the daemon
	has changed to "/" (it was looked for there: the renewal failed and
	reads failed once the credentials expired)."""
	objs = {'a.bin': os.urandom(KIB)}
	with s3f.FakeS3(objs) as fake, s3f.FakeCredServer('AKFAKE', 'secret', ttl_s=4,
							   token='tok') as cs, ct.TempDirs() as td:
		with open(os.path.join(td.root, 'token'), 'w') as f:
			f.write(cs.auth_token + '\n')
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=cs.container_uri,
			   AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE='token',
			   AWS_EC2_METADATA_DISABLED='true')
		rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint, '--cache-size=0',
					     '--no-kernel-cache', 's3://' + fake.bucket, td.mnt],
					    env=env, cwd=td.root)
		if not c.check('relative token file: mounts', rc == 0, f'rc={rc} {err.strip()}'):
			return
		results = []
		for _ in range(12):  # 6 s: past the first renewal (2 s) and expiry (4 s)
			results.append(read_timed_in_child(os.path.join(td.mnt, 'a.bin'), 20)[:2])
			time.sleep(0.5)
		c.eq('relative token file: every read through the renewals succeeds',
		     set(results), {('ok', KIB)})
		c.check('... credentials were renewed', cs.fetches >= 2, f'{cs.fetches} fetches')


def test_unmount_with_stalled_prefill(c):
	objs = {f'p/{i:02d}.bin': os.urandom(10 * KIB) for i in range(8)}
	objs['a.bin'] = b'a' * 10  # the mount's probe GET: answered
	with s3f.FakeS3(objs) as fake, ct.TempDirs() as td:
		fake.stall('p/')
		if not mount_fake(c, td, fake, ['--prefill'], 'stalled prefill: '):
			return
		pids = ct.find_daemon_pids(td.mnt)
		c.check('prefill GETs are in flight', ct.wait_until(lambda: fake.gets('p/') >= 4, 20),
			f'{fake.gets("p/")} GETs')
		t0 = time.monotonic()
		subprocess.run(['fusermount3', '-u', td.mnt], capture_output=True, timeout=10)
		gone = ct.wait_until(lambda: not any(ct.pid_alive(p) for p in pids), 5.0)
		c.check('fusermount3 -u: the daemon exits within 5 s', gone,
			f'still alive after {time.monotonic() - t0:.1f}s')


def test_transient_answers(c):
	objs = {f'{n}.bin': os.urandom(20 * KIB) for n in
		('skewed', 'timeout', 'unauth', 'expired', 'gone', 'changed')}
	with s3f.FakeS3(objs) as fake, s3f.FakeCredServer('AKFAKE', 'secret', ttl_s=3600,
							   token='tok') as cs, ct.TempDirs() as td:
		if not mount_fake_creds(c, td, fake, cs, ['--no-kernel-cache'], 'transient: '):
			return
		mnt = td.mnt
		for name, status, code in (('skewed', 403, 'RequestTimeTooSkewed'),
					   ('timeout', 400, 'RequestTimeout'),
					   ('unauth', 401, 'Unauthorized')):
			fake.fail_next(f'{name}.bin', status, code)
			res = read_timed_in_child(os.path.join(mnt, f'{name}.bin'), 20)
			c.eq(f'{status} {code}: this read fails with EIO', res[:2],
			     ('errno', errno.EIO))
			time.sleep(1.2)
			res = read_timed_in_child(os.path.join(mnt, f'{name}.bin'), 20)
			c.eq(f'{status} {code}: the next read succeeds', res[:2], ('ok', 20 * KIB))
			with open(os.path.join(mnt, f'{name}.bin'), 'rb') as f:
				c.check(f'{status} {code}: ... with the right bytes',
					f.read() == objs[f'{name}.bin'])
		before = cs.fetches
		fake.fail_next('expired.bin', 400, 'ExpiredToken')
		res = read_timed_in_child(os.path.join(mnt, 'expired.bin'), 20)
		c.eq('400 ExpiredToken: the read succeeds after one refresh', res[:2],
		     ('ok', 20 * KIB))
		c.eq('... which fetched credentials once', cs.fetches - before, 1)
		# snapshot answers are final
		del fake.objects['gone.bin']
		fake.objects['changed.bin'] = os.urandom(20 * KIB)
		for name in ('gone', 'changed'):
			res = read_timed_in_child(os.path.join(mnt, f'{name}.bin'), 20)
			c.eq(f'{name}: EIO', res[:2], ('errno', errno.EIO))
			n = fake.gets(f'{name}.bin')
			time.sleep(1.2)
			res = read_timed_in_child(os.path.join(mnt, f'{name}.bin'), 20)
			c.eq(f'{name}: still EIO later', res[:2], ('errno', errno.EIO))
			c.eq(f'{name}: ... without asking the store again', fake.gets(f'{name}.bin'), n)


def test_endless_listings(c):
	objs = {'a.bin': b'a' * 100}
	with s3f.FakeS3(objs, mode='list_alternating_tokens') as fake, ct.TempDirs() as td:
		t0 = time.monotonic()
		ok = mount_fake_quiet(td, fake)
		took = time.monotonic() - t0
		c.check('tokens A, B, A, B: the mount fails', ok[0] not in (0, None), f'{ok}')
		c.check('... within 10 s', took < 10, f'{took:.1f}s')
		c.check('... with one line naming the repeated token',
			'repeats its continuation token' in ok[1] and len(ok[1].strip().splitlines()) == 1,
			ok[1])
		c.check('... nothing mounted', not ct.is_mounted(td.mnt))
	with s3f.FakeS3(objs, mode='list_endless') as fake, ct.TempDirs() as td:
		for opt in (['--list-timeout=3'], ['-o', 'list_timeout=3']):
			t0 = time.monotonic()
			ok = mount_fake_quiet(td, fake, opt)
			took = time.monotonic() - t0
			c.check(f'endless pages, {" ".join(opt)}: the mount fails',
				ok[0] not in (0, None), f'{ok}')
			c.check('... after 3 s, within 8 s', 3 <= took < 8, f'{took:.1f}s')
			c.check('... with one line naming --list-timeout',
				'--list-timeout' in ok[1] and len(ok[1].strip().splitlines()) == 1, ok[1])
			c.check('... nothing mounted', not ct.is_mounted(td.mnt))
	# a page that keeps arriving, faster than any low-speed limit, for 26 s:
	# --list-timeout bounds the whole listing, bodies included
	with s3f.FakeS3(objs, mode='list_trickle') as fake, ct.TempDirs() as td:
		t0 = time.monotonic()
		ok = mount_fake_quiet(td, fake, ['--list-timeout=3'])
		took = time.monotonic() - t0
		c.check('a page trickling in: the mount fails', ok[0] not in (0, None), f'{ok}')
		c.check('... after 3 s, within 8 s', 3 <= took < 8, f'{took:.1f}s')
		c.check('... with one line naming --list-timeout',
			'--list-timeout' in ok[1] and len(ok[1].strip().splitlines()) == 1, ok[1])
	with s3f.FakeS3(objs, mode='list_endless') as fake:
		cli = os.path.join(os.environ['COORDFS_BUILD_DIR'], 'tests', 'helpers', 's3_cli')
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		for cap in ('--list-max-keys=20000', '--list-max-bytes=1000000'):
			t0 = time.monotonic()
			p = subprocess.run([cli, '--endpoint=' + fake.endpoint, '--no-sign', cap, 'fake'],
					   input='list 1\nlist 4\nquit\n', capture_output=True, text=True,
					   env=env, timeout=60)
			lines = p.stdout.splitlines()
			c.check(f'endless pages, client {cap}: -EFBIG for flat and parallel listings',
				len(lines) >= 3 and all(ln.startswith(f'err -{errno.EFBIG} ')
							 for ln in lines[1:3]), p.stdout[:500])
			c.check('... quickly', time.monotonic() - t0 < 20)
	# endless pages of new directories and no key: what the walk keeps of
	# them counts against the same caps
	with s3f.FakeS3(objs, mode='list_endless_prefixes') as fake:
		cli = os.path.join(os.environ['COORDFS_BUILD_DIR'], 'tests', 'helpers', 's3_cli')
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		for cap in ('--list-max-keys=20000', '--list-max-bytes=10000000'):
			t0 = time.monotonic()
			try:
				p = subprocess.run([cli, '--endpoint=' + fake.endpoint, '--no-sign', cap,
						    'fake'], input='list 4\nquit\n', capture_output=True,
						   text=True, env=env, timeout=30)
				out = p.stdout
			except subprocess.TimeoutExpired:
				out = 'timed out'
			lines = out.splitlines()
			c.check(f'endless directories, client {cap}: -EFBIG',
				len(lines) >= 2 and lines[1].startswith(f'err -{errno.EFBIG} '),
				out[:300])
			c.check('... quickly', time.monotonic() - t0 < 20, f'{time.monotonic() - t0:.1f}s')


def test_odd_keys_and_etags(c):
	long_key = ('d' * 200 + '/') * 6 + 'f.bin'  # 1211 bytes, components of 200
	objs = {'ok/a.bin': os.urandom(3000), long_key: b'long', 'odd/big-etag.bin': b'big',
		'odd/weak.bin': os.urandom(5000), 'odd/lf-etag.bin': b'lf'}
	with s3f.FakeS3(objs) as fake, ct.TempDirs() as td:
		fake.etags['odd/big-etag.bin'] = '"' + 'e' * 200 + '"'
		fake.etags['odd/weak.bin'] = 'W/"5eb63bbbe01eeed093cb22bb8f5acdc3"'
		# an ETag goes into If-Match headers, to the store and to peers
		fake.etags['odd/lf-etag.bin'] = '"abc\nX-Injected: yes"'
		if not mount_fake(c, td, fake, ['--no-kernel-cache'], 'odd keys: '):
			return
		mnt = td.mnt
		c.eq('odd keys: the usable keys are listed', sorted(os.listdir(os.path.join(mnt, 'odd'))),
		     ['weak.bin'])
		c.check('odd keys: the long key is left out', not os.path.exists(os.path.join(mnt, 'd' * 200)))
		c.eq('odd keys: all three counted in source.skipped_keys',
		     ct.stats(mnt)['source']['skipped_keys'], 3)
		c.check('odd keys: no header was injected',
			not any('x-injected' in h for h in fake.headers), fake.headers)
		with open(os.path.join(mnt, 'ok/a.bin'), 'rb') as f:
			c.check('odd keys: an ordinary file reads', f.read() == objs['ok/a.bin'])
		res = read_timed_in_child(os.path.join(mnt, 'odd/weak.bin'), 20)
		c.eq('weak ETag: the file reads', res[:2], ('ok', 5000))
		with open(os.path.join(mnt, 'odd/weak.bin'), 'rb') as f:
			c.check('weak ETag: ... the right bytes', f.read() == objs['odd/weak.bin'])
		with fake.lock:
			hdrs = [h for (m, path, _), h in zip(fake.requests, fake.headers)
				if 'weak.bin' in path]
		c.check('weak ETag: no If-Match sent (it could never match)',
			hdrs and all('if-match' not in h for h in hdrs), hdrs[:1])


def test_open_credentials_file(c):
	objs = {'a.bin': b'a' * 100}
	with s3f.FakeS3(objs) as fake:
		for mode, warned in ((0o644, True), (0o640, True), (0o600, False)):
			with ct.TempDirs() as td:
				cred = os.path.join(td.root, 'credentials')
				with open(cred, 'w') as f:
					f.write('[default]\naws_access_key_id = AKFAKE\n'
						'aws_secret_access_key = fake-secret\n')
				os.chmod(cred, mode)
				env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
				env.update(AWS_SHARED_CREDENTIALS_FILE=cred, AWS_CONFIG_FILE='/nonexistent',
					   AWS_EC2_METADATA_DISABLED='true')
				log = os.path.join(td.root, 'log')
				rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint,
							     '--log-file=' + log,
							     's3://' + fake.bucket, td.mnt], env=env)
				c.check(f'credentials file {mode:04o}: mounts',
					rc == 0 and ct.is_mounted(td.mnt), err)
				lines = [ln for ln in err.splitlines() if 'readable by' in ln]
				if warned:
					c.eq(f'credentials file {mode:04o}: one warning', len(lines), 1)
					c.check('... naming the file and the fix',
						lines and cred in lines[0] and 'chmod 600' in lines[0], lines)
					c.check('... never the secret', 'fake-secret' not in err)
				else:
					c.eq(f'credentials file {mode:04o}: no warning', lines, [])
				with open(log, errors='replace') as f:
					c.eq(f'credentials file {mode:04o}: the daemon does not warn again',
					     sum('readable by' in ln for ln in f), 0)


def test_foreign_profile(c):
	"""root mounts with HOME still naming a user's directory (sudo -E, su
	without -): that user's ~/.aws/config must not have root run its
	credential_process, nor a group- or world-writable config of root's."""
	objs = {'a.bin': b'a' * 100}
	with s3f.FakeS3(objs) as fake, ct.TempDirs() as td:
		os.chmod(td.root, 0o755)
		home = os.path.join(td.root, 'home')
		aws = os.path.join(home, '.aws')
		ran = os.path.join(td.root, 'ran')
		os.makedirs(aws)
		conf = os.path.join(aws, 'config')
		with open(conf, 'w') as f:
			f.write(f'[default]\ncredential_process = touch {ran}\n')
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		env.update(HOME=home, AWS_EC2_METADATA_DISABLED='true')
		for label, owner, mode, want in (('another user\'s config', 65534, 0o644,
						  'belongs to another user'),
						 ('a world-writable config', 0, 0o666,
						  'others may write it'),
						 ('a group-writable config', 0, 0o664,
						  'others may write it')):
			os.chown(conf, owner, owner)
			os.chmod(conf, mode)
			rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint,
						     's3://' + fake.bucket, td.mnt], env=env)
			lines = [ln for ln in err.splitlines() if ln.strip()]
			c.check(f'{label}: the mount fails with one line naming it',
				rc not in (0, None) and len(lines) == 1 and want in lines[0]
				and conf in lines[0], f'rc {rc}: {err}')
			c.check(f'{label}: nothing mounted', not ct.is_mounted(td.mnt))
			c.check(f'{label}: its credential_process never ran', not os.path.exists(ran))
			if ct.is_mounted(td.mnt):
				ct.force_unmount(td.mnt)


def test_impossible_sizes(c):
	after = os.urandom(100)
	objs = {'w': b'w' * 100, 'v': b'v' * 100, 'z/after.bin': after}
	with s3f.FakeS3(objs) as fake, ct.TempDirs() as td:
		fake.sizes['w'] = 2**64 - 1
		fake.sizes['v'] = 2**63
		port = ct.free_port()
		if not mount_fake(c, td, fake, ['--no-kernel-cache', f'--peers=http://127.0.0.1:{port}',
						 '--node=0'], 'impossible sizes: '):
			return
		mnt = td.mnt
		c.eq('impossible sizes: w and v are left out', sorted(os.listdir(mnt)), ['z'])
		c.eq('... and counted', ct.stats(mnt)['source']['skipped_keys'], 2)
		import urllib.request
		import urllib.error
		for key in ('w', 'v'):
			try:
				urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/files/{key}', timeout=10)
				c.check(f'peer port: {key} is not served', False, 'served')
			except urllib.error.HTTPError as e:
				c.eq(f'peer port: {key} is not served', e.code, 404)
		with urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/files/z/after.bin',
					    timeout=10) as r:
			c.check('peer port: z/after.bin serves its own bytes', r.read() == after)
		with open(os.path.join(mnt, 'z/after.bin'), 'rb') as f:
			c.check('mount: z/after.bin reads its own bytes', f.read() == after)


def test_hostile_listing_keys(c):
	# A listing of s3://fake/pfx in two pages that names keys outside the
	# prefix, one key on both pages, and keys whose components, once
	# url-decoded, are '..', '.' or empty: only the plain keys become
	# files, each once, with its own bytes; the rest is skipped and
	# counted, never a path outside the mount.
	objs = {'pfx/good/a.bin': os.urandom(300), 'pfx/dup.bin': os.urandom(200),
		'pfx/x/y.bin': os.urandom(100), 'other/outside.bin': os.urandom(50)}
	with s3f.FakeS3(objs) as fake, ct.TempDirs() as td:
		fake.pages = [
			['other/outside.bin', 'pfx/dup.bin', 'pfx/good/a.bin', 'pfx/a/../b.bin'],
			['pfx/dup.bin', 'pfx/./c.bin', 'pfx/d//e.bin', 'pfx/%2E%2E/etc/passwd',
			 'pfx/%2e/f.bin', 'pfx/x%2Fy.bin', 'zzz/outside2.bin'],
		]
		env = dict(os.environ)
		for k in list(env):
			if k.startswith('AWS_'):
				del env[k]
		rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint, '--no-sign-request',
					     '--no-kernel-cache',
					     '--log-file=' + os.path.join(td.root, 'log'),
					     f's3://{fake.bucket}/pfx', td.mnt], env=env)
		if not c.check('hostile listing: mounts', rc == 0 and ct.is_mounted(td.mnt),
			       f'rc={rc} {err.strip()}'):
			return
		found = sorted(os.path.relpath(os.path.join(d, f), td.mnt)
			       for d, _, fs in os.walk(td.mnt) for f in fs)
		c.eq('hostile listing: only the plain keys, each once', found,
		     ['dup.bin', 'good/a.bin', 'x/y.bin'])
		for rel in found:
			with open(os.path.join(td.mnt, rel), 'rb') as f:
				c.check(f'hostile listing: {rel} reads its own bytes',
					f.read() == objs['pfx/' + rel])
		st = ct.stats(td.mnt)
		# '..', '.', '//', '%2E%2E', '%2e', the second dup.bin, and
		# the two outside pfx/
		c.eq('hostile listing: the keys outside the prefix counted too',
		     st['source']['skipped_keys'], 8)
		c.check('hostile listing: ... and told in one line',
			sum('outside the prefix' in ln for ln in err.splitlines()) == 1, err)


def test_hostile_gets(c):
	# GET answers no honest store gives: a 307 to another host (never
	# followed: its bytes are not the bucket's), a gzip-encoded range
	# (not the object's bytes), and an object replaced between two GETs
	# of one file by a store that ignores If-Match (never bytes of two
	# versions in one read). Each read fails with EIO, counted, one log
	# line; other objects still read.
	kib64 = 64 * KIB
	objs = {'a/ok.bin': os.urandom(10 * KIB), 'b/big.bin': os.urandom(4 * kib64),
		'c/small.bin': os.urandom(5 * KIB)}
	evil = {k: bytes(x ^ 0xFF for x in v) for k, v in objs.items()}
	with s3f.FakeS3(objs) as fake, s3f.FakeS3(evil) as other, ct.TempDirs() as td:
		if not mount_fake(c, td, fake, ['--no-kernel-cache', '--chunk-size=64K',
						'--source-timeout=5'], 'hostile GETs: '):
			return
		fake.redirect_to = other.endpoint
		for mode in ('redirect', 'gzip'):
			fake.mode = mode
			time.sleep(1.2)  # past the window a failed read is not retried in
			before = ct.stats(td.mnt)['source']['errors']
			res = read_timed_in_child(os.path.join(td.mnt, 'c/small.bin'), 20)
			c.check(f'GET answered {mode}: the read fails with EIO',
				res[:2] == ('errno', errno.EIO), f'{res}')
			c.gt(f'GET answered {mode}: counted in source.errors',
			     ct.stats(td.mnt)['source']['errors'], before)
		c.eq('the 307 was never followed', other.gets(), 0)
		fake.mode = 'ok'
		# the first GET of big.bin is answered, then the object is
		# replaced: the read must not mix the two versions
		new = os.urandom(4 * kib64)
		fake.replace_after['b/big.bin'] = new
		res = read_timed_in_child(os.path.join(td.mnt, 'b/big.bin'), 20)
		c.check('object replaced between GETs: EIO, never mixed bytes',
			res[:2] == ('errno', errno.EIO), f'{res}')
		c.ge('... (read in more than one GET)', fake.gets('b/'), 2)
		res = read_timed_in_child(os.path.join(td.mnt, 'a/ok.bin'), 20)
		c.eq('... another object still reads', res[:2], ('ok', 10 * KIB))
		time.sleep(1.2)
		with open(os.path.join(td.mnt, 'c/small.bin'), 'rb') as f:
			c.check('... and the redirected one, now answered', f.read() == objs['c/small.bin'])


def test_slow_store_cluster(c):
	# Two nodes over a store that answers every GET 1.2 s late: a peer
	# reading its units through it for the other node answers as late,
	# which is no slower than the store itself. The reader has read
	# nothing from the store yet (only the mount's probe GET, timed): its
	# peer must not be taken for slow and left for the store, which would
	# read objects twice.
	rng = random.Random(int(time.time()) ^ 77)
	with s3f.FakeS3({}) as fake, ct.Cluster(2) as cl:
		for i in range(400):
			key = f'f{i:03d}.bin'
			if ct.unit_owner(cl.urls, key) == 1:
				fake.objects[key] = rng.randbytes(2 * KIB)
			if len(fake.objects) == 5:
				break
		fake.get_delay = 1.2
		cl.src = 's3://' + fake.bucket
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		for k in range(2):
			cl.mount(k, ['--endpoint=' + fake.endpoint, '--no-sign-request',
				     '--no-kernel-cache'], env=env)
		for key in sorted(fake.objects):
			c.check(f'slow store, two nodes: node 0 reads {key}',
				ct.read_bytes(cl.path(0, key)) == fake.objects[key])
		st = cl.stats(0)['peers']
		c.eq('slow store: the peer is not taken for slow', st['slow_downs'], 0)
		c.eq('slow store: every file came through the peer', st['fallbacks'], 0)
		c.eq('slow store: ... its bytes', st['bytes'], 5 * 2 * KIB)


def test_signed_get_probe(c):
	objs = {'a/first.bin': os.urandom(100), 'b/second.bin': os.urandom(100)}
	with s3f.FakeS3(objs) as fake:
		for status, code in ((403, 'SignatureDoesNotMatch'), (403, 'AccessDenied')):
			fake.fail_next('a/first.bin', status, code)
			with ct.TempDirs() as td:
				rc, err = mount_fake_quiet(td, fake)
				c.check(f'GET refused ({code}): the mount fails', rc not in (0, None),
					f'rc={rc}')
				c.check(f'... with one line naming {code}',
					code in err and len(err.strip().splitlines()) == 1, err)
				c.check('... nothing mounted', not ct.is_mounted(td.mnt))
		# a passing failure of the probe is no verdict: the mount goes on
		fake.fail_next('a/first.bin', 503, 'SlowDown', n=7)
		with ct.TempDirs() as td:
			rc, err = mount_fake_quiet(td, fake, ['--no-kernel-cache'])
			c.check('probe meets 503s: mounts anyway', rc == 0 and ct.is_mounted(td.mnt), err)
			if rc == 0:
				with open(os.path.join(td.mnt, 'b/second.bin'), 'rb') as f:
					c.check('... and reads', f.read() == objs['b/second.bin'])
		# a store that takes GETs and never answers: the probe waits
		# --source-timeout, not minutes of low-speed periods and retries
		fake.stall('')
		with ct.TempDirs() as td:
			t0 = time.monotonic()
			rc, err = mount_fake_quiet(td, fake, ['--source-timeout=2'])
			took = time.monotonic() - t0
			c.check('probe stalls: mounts anyway', rc == 0 and ct.is_mounted(td.mnt),
				f'rc={rc} after {took:.1f}s {err}')
			c.check('... within --source-timeout=2 plus 3 s', took <= 5.0, f'{took:.1f}s')
		fake.unstall()


def test_endless_error_bodies(c):
	# A 503 whose body never ends but keeps moving: no low-speed limit
	# fires and the body is not the object's, so only a cap on what is
	# read of an error document bounds the read (--source-timeout) and
	# the listing (--list-timeout).
	objs = {'a/ok.bin': os.urandom(10 * KIB), 'z/bad.bin': os.urandom(10 * KIB)}
	with s3f.FakeS3(objs) as fake, ct.TempDirs() as td:
		if not mount_fake(c, td, fake, ['--source-timeout=2', '--no-kernel-cache'],
				  'endless error body: '):
			return
		fake.endless_error('z/')
		res = read_timed_in_child(os.path.join(td.mnt, 'z/bad.bin'), 30)
		c.check('endless 503 body: the read fails with EIO',
			res[:2] == ('errno', errno.EIO), f'{res}')
		c.check('... within --source-timeout=2 plus 3 s',
			res[2] is not None and res[2] <= 5.0, f'{res}')
		res = read_timed_in_child(os.path.join(td.mnt, 'a/ok.bin'), 20)
		c.eq('... another object still reads', res[:2], ('ok', 10 * KIB))
	with s3f.FakeS3(objs, mode='list_endless_error') as fake, ct.TempDirs() as td:
		t0 = time.monotonic()
		rc, err = mount_fake_quiet(td, fake, ['--list-timeout=2'])
		took = time.monotonic() - t0
		c.check('endless 503 body on a listing: the mount fails',
			rc not in (0, None), f'rc={rc} after {took:.1f}s')
		c.check('... within --list-timeout=2 plus 3 s, one line',
			took <= 5.0 and len(err.strip().splitlines()) == 1, f'{took:.1f}s {err!r}')


def mount_fake_quiet(td, fake, opts=()):
	"""Try to mount s3://fake; (rc, stderr)."""
	env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
	rc, _, err = ct.run_coordfs(['--endpoint=' + fake.endpoint, '--no-sign-request'] +
				    list(opts) + ['s3://' + fake.bucket, td.mnt], env=env, timeout=30)
	return rc, err


def main():
	c = ct.Checker('test_s3_hostile', timeout=240)
	c.group(test_stalled_store, c)
	c.group(test_unmount_with_stalled_prefill, c)
	c.group(test_hostile_credential_document, c)
	c.group(test_relative_token_file, c)
	c.group(test_transient_answers, c)
	c.group(test_endless_listings, c)
	c.group(test_odd_keys_and_etags, c)
	c.group(test_open_credentials_file, c)
	c.group(test_foreign_profile, c)
	c.group(test_impossible_sizes, c)
	c.group(test_signed_get_probe, c)
	c.group(test_endless_error_bodies, c)
	c.finish()


if __name__ == '__main__':
	sys.exit(main())
