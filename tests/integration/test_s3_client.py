# SPDX-License-Identifier: MIT
"""The S3 client library (remote/s3.h) against a real radosgw.

Drives tests/helpers/s3_cli (one client per process, commands on stdin) and
checks: listings (flat with >1000 keys over several pages, and parallel
over nested prefixes) return exactly the uploaded set; ranged GETs return
the uploaded bytes; an object overwritten since the listing gives EIO; a
wrong secret gives EACCES with a line naming the cause and never the
secret; anonymous reads of a public bucket; credentials from profile files,
from a fake IMDSv2 endpoint (expiring, refreshed: fetches counted) and from
a container endpoint; injected 503s retried (counted in the proxy's log);
an endpoint that goes down fails after the retries and works again when it
comes back.

radosgw must be installed (tools/install-deps.sh does it): without it
this test fails, it does not skip.
"""

import hashlib
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3_fixture as s3f  # noqa: E402

EIO, ENOENT, EACCES, EINVAL, ETIMEDOUT, EAGAIN, ESTALE, ELOOP = 5, 2, 13, 22, 110, 11, 116, 40

passed = 0
failed = []


def check(label, cond, detail=''):
	global passed
	if cond:
		passed += 1
		print(f'ok   {label}', flush=True)
	else:
		failed.append(label)
		print(f'FAIL {label}' + (f': {str(detail)[:400]}' if detail else ''), flush=True)
	return bool(cond)


def eq(label, got, want):
	return check(label, got == want, f'got {got!r}, want {want!r}')


def cli_path():
	p = os.environ.get('S3_CLI')
	if not p:
		here = os.path.dirname(os.path.abspath(__file__))
		p = os.path.join(here, '..', '..', 'build', 'tests', 'helpers', 's3_cli')
	if not os.access(p, os.X_OK):
		print(f'FAIL setup: s3_cli not executable: {p}\n0 passed, 1 failed')
		sys.exit(1)
	return p


CLI = cli_path()
# s3_cli runs that exited badly or printed a sanitizer report
bad_exits = []


class Cli:
	"""One s3_cli process: one client, commands over stdin."""

	def __init__(self, target, env, *opts):
		self.p = subprocess.Popen([CLI, *opts, target], env=env, text=True,
					  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
					  stderr=subprocess.PIPE)
		self.ready = self.p.stdout.readline().strip()

	def cmd(self, line):
		self.p.stdin.write(line + '\n')
		self.p.stdin.flush()
		return self.p.stdout.readline().strip()

	def list(self, parallel):
		head = self.cmd(f'list {parallel}')
		if not head.startswith('ok '):
			return head, None
		objs = {}
		for _ in range(int(head.split()[1])):
			key, size, etag, _mtime = self.p.stdout.readline().rstrip('\n').split('\t')
			objs[key] = (int(size), etag)
		return head, objs

	def get(self, key, etag, size, off, length):
		from urllib.parse import quote
		ans = self.cmd(f'get {quote(key, safe="")} {etag} {size} {off} {length}')
		parts = ans.split()
		if parts[0] == 'ok':
			return bytes.fromhex(parts[2]) if len(parts) > 2 else b''
		return int(parts[1])

	def stats(self):
		w = self.cmd('stats').split()
		return {w[i]: float(w[i + 1]) for i in range(1, len(w) - 1, 2)}

	def close(self):
		"""Quit; returns stderr (the client's log lines)."""
		try:
			_, err = self.p.communicate('quit\n', timeout=60)
		except subprocess.TimeoutExpired:
			self.p.kill()
			_, err = self.p.communicate()
		want = 0 if self.ready == 'ok ready' else 1
		if self.p.returncode != want or 'Sanitizer' in err or 'runtime error' in err:
			bad_exits.append((self.p.args, self.p.returncode, err[-2000:]))
		return err

	def __enter__(self):
		return self

	def __exit__(self, *exc):
		if self.p.poll() is None:
			self.close()


def make_dataset(rng):
	"""Nested prefixes, one with more than 1000 keys, odd names, one big object."""
	objs = {}
	for i in range(1100):
		objs[f'train/c000/img{i:05d}.jpg'] = rng.randbytes(rng.randint(1, 200))
	for c in range(1, 25):
		for i in range(8):
			objs[f'train/c{c:03d}/img{i:03d}.jpg'] = rng.randbytes(rng.randint(1, 300))
	for d in range(3):
		objs[f'val/deep/{d}/a/b/c/x{d}.bin'] = rng.randbytes(50)
	objs['top.txt'] = b'top level\n'
	objs['odd name + plus & amp/ü ñ.txt'] = b'odd key\n'
	# not representable in XML 1.0: listed only thanks to encoding-type=url
	objs['odd/ctl\x01key\x7f.txt'] = b'control bytes\n'
	objs['big.bin'] = rng.randbytes(700 * 1024 + 13)
	objs['train/c001/'] = b''  # a "directory marker" object
	objs['train/c010/'] = b''
	# names around the '/' byte: '-' < '.' < '/' < '0'
	for k in ('train/ab/y.jpg', 'train/ab./x.jpg', 'train/ab-/z.jpg', 'train/ab0',
		  'train/ab.', 'train/direct.txt', 'train/zz/last.jpg', 'train/zz0/a/b.jpg'):
		objs[k] = rng.randbytes(rng.randint(1, 50))
	return objs


def test_listing(rgw, objs, etags):
	env = rgw.env()
	want = {k: (len(v), etags[k]) for k, v in objs.items()}
	with s3f.S3Proxy(rgw.endpoint) as px:
		with Cli('data', env, f'--endpoint={px.endpoint}') as c:
			eq('client ready', c.ready, 'ok ready')
			head, got = c.list(1)
			check('flat listing succeeds', got is not None, head)
			eq('flat listing: exactly the uploaded set (keys, sizes, ETags)', got, want)
			flat = px.entries()
			check('flat listing used several pages (continuation-token)',
			      sum('continuation-token=' in e['query'] for e in flat) >= 1,
			      [e['query'] for e in flat])
			px.clear_log()
			head, got = c.list(8)
			check('parallel listing succeeds', got is not None, head)
			eq('parallel listing: exactly the uploaded set', got, want)
			reqs = [e['query'] for e in px.entries()]
			check('parallel listing: train/\'s 30 prefixes listed in ranges (start-after)',
			      sum('start-after=train%2F' in q for q in reqs) == 8, reqs)
			check('  not one request per class',
			      not any('prefix=train%2Fc0' in q for q in reqs), reqs)
			check('  a range longer than a page continued with its token',
			      any('continuation-token=' in q and 'delimiter' not in q for q in reqs),
			      reqs)
			check('  a level with few prefixes recursed (val/deep/0/a/b/)',
			      any('delimiter=%2F' in q and 'prefix=val%2Fdeep%2F0%2Fa%2Fb%2F' in q
				  for q in reqs), reqs)
			for par in (2, 3, 16, 64):
				head, got = c.list(par)
				eq(f'parallel {par}: exactly the uploaded set', got, want)
			# 503s on listing pages are retried transparently
			px.clear_log()
			px.fail_next(3, status=503, method='GET', key='')
			head, got = c.list(4)
			eq('listing with 3 injected 503s: exactly the uploaded set', got, want)
			eq('  the proxy saw the 3 injected 503s', px.count(status=503), 3)
		with Cli('data/train/c001', env, f'--endpoint={px.endpoint}') as c:
			head, got = c.list(4)
			want_sub = {k[len('train/c001/'):]: v for k, v in want.items()
				    if k.startswith('train/c001/') and k != 'train/c001/'}
			eq('listing of a prefix: keys relative to it, the prefix\'s own '
			   'marker object left out', got, want_sub)


def test_get(rgw, objs, etags, rng):
	env = rgw.env()
	big = objs['big.bin']
	with s3f.S3Proxy(rgw.endpoint) as px, \
			Cli('data', env, f'--endpoint={px.endpoint}', '--backoff-base-ms=10') as c:
		ok = True
		for _ in range(20):
			off = rng.randrange(len(big))
			ln = rng.randint(1, min(len(big) - off, 65536))
			got = c.get('big.bin', etags['big.bin'], len(big), off, ln)
			if got != big[off:off + ln]:
				ok = False
				check(f'ranged GET [{off}, +{ln}) bytes identical', False,
				      f'got {got!r:.60}')
		check('20 random ranged GETs: bytes identical', ok)
		eq('GET of the last byte', c.get('big.bin', etags['big.bin'], len(big),
						 len(big) - 1, 1), big[-1:])
		eq('GET of a whole object', c.get('top.txt', etags['top.txt'], len(objs['top.txt']),
						  0, len(objs['top.txt'])), objs['top.txt'])
		k = 'odd name + plus & amp/ü ñ.txt'
		eq('GET of a key with spaces, +, & and UTF-8', c.get(k, etags[k], len(objs[k]), 0,
									len(objs[k])), objs[k])
		k = 'odd/ctl\x01key\x7f.txt'
		eq('GET of a key with control bytes', c.get(k, etags[k], len(objs[k]), 0,
							    len(objs[k])), objs[k])
		eq('GET past the listed size: -EINVAL', c.get('top.txt', etags['top.txt'], 10, 5, 6),
		   -EINVAL)
		eq('GET with a wrong size for the snapshot: -ESTALE (final)',
		   c.get('big.bin', etags['big.bin'], len(big) + 1, 0, 10), -ESTALE)

		# many threads at once, one pool: every read identical to the object,
		# and the pool's connections shared (short-lived listing threads
		# leave theirs to the next ones)
		key = 'train/c007/img000.jpg'
		mid = objs['big.bin'][:20000]
		mkey = 'mid.bin'
		metag = rgw.put('data', mkey, mid)
		ans = c.cmd(f'pget 8 10 {mkey} {metag} {len(mid)}').split()
		eq('8 threads x 20 concurrent GETs: every read the uploaded bytes',
		   (ans[0], bytes.fromhex(ans[2]) if len(ans) > 2 else None), ('ok', mid))
		conns = px.connections
		for _ in range(3):
			head, got = c.list(8)
			check('  parallel listing again', got is not None, head)
		check('  3 listings by 8 new threads each reuse the pooled connections',
		      px.connections - conns <= 10, f'{px.connections - conns} new connections')

		# injected 503s are retried transparently, and counted
		key = 'train/c003/img001.jpg'
		px.clear_log()
		px.fail_next(3, status=503, method='GET', key=key)
		eq('GET through 3 injected 503s returns the bytes',
		   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), objs[key])
		eq('  proxy log: 4 GETs of the key', px.count(method='GET', key=key), 4)
		eq('  proxy log: 3 of them 503', px.count(method='GET', key=key, status=503), 3)
		st = c.stats()
		check('  stats count the retries', st['retries'] >= 3, st)

		# overwritten since the listing: same size, new content
		key = 'train/c004/img002.jpg'
		rgw.put('data', key, bytes(b ^ 0xFF for b in objs[key]))
		px.clear_log()
		eq('GET of an object overwritten since the listing: -ESTALE',
		   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), -ESTALE)
		eq('  one request, not retried (412)', px.count(method='GET', key=key), 1)
		eq('  radosgw answered 412', px.count(key=key, status=412), 1)
		errors_before = c.stats()['errors']
		rgw.delete('data', 'train/c005/img003.jpg')
		key = 'train/c005/img003.jpg'
		eq('GET of a deleted object: -ESTALE', c.get(key, etags[key], len(objs[key]), 0, 1),
		   -ESTALE)
		eq('  counted as an error', c.stats()['errors'], errors_before + 1)

		# down, then back: the same client recovers
		key = 'train/c006/img000.jpg'
		px.down()
		px.clear_log()
		eq('GET while the endpoint is down: -EAGAIN after the retries (not the object\'s fault)',
		   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), -EAGAIN)
		check('  it tried more than once', px.count(key=key) >= 2, px.entries())
		px.up()
		eq('GET after the endpoint came back: the bytes',
		   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), objs[key])
		px.down(refuse=True)
		eq('GET while connections are refused: -EAGAIN',
		   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), -EAGAIN)
		px.up()
		eq('GET after listening again: the bytes',
		   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), objs[key])
		log = c.close()
		check('the client logged the overwritten key by name',
		      'train/c004/img002.jpg' in log, log[-500:])
		check('no secret in the log', rgw.secret_key not in log)
	with s3f.S3Proxy(rgw.endpoint) as px:
		px.down(refuse=True)
		with Cli('data', env, f'--endpoint={px.endpoint}', '--retries=2',
			 '--backoff-base-ms=10') as c:
			head, got = c.list(4)
			check('listing with the endpoint down: -EIO with a line naming it',
			      got is None and head.startswith(f'err -{EIO} ') and
			      px.endpoint in head and 'after 3 attempts' in head, head)


def test_auth(rgw, objs, etags):
	env = rgw.env(AWS_SECRET_ACCESS_KEY='wrong-secret-1234')
	with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
		head, got = c.list(4)
		check('wrong secret: -EACCES', head.startswith(f'err -{EACCES} '), head)
		check('  the line names the cause', 'SignatureDoesNotMatch' in head and
		      'check the credentials' in head, head)
		check('  and not the secret', 'wrong-secret-1234' not in head, head)
		eq('  a GET with it: -EIO', c.get('top.txt', etags['top.txt'], 10, 0, 10), -EIO)
		log = c.close()
		check('  no secret in the log', 'wrong-secret-1234' not in log, log)
	with Cli('nosuchbucket', rgw.env(), f'--endpoint={rgw.endpoint}') as c:
		head, _ = c.list(4)
		check('missing bucket: -ENOENT naming it', head.startswith(f'err -{ENOENT} ') and
		      'nosuchbucket' in head, head)
	env = rgw.env()
	del env['AWS_ACCESS_KEY_ID'], env['AWS_SECRET_ACCESS_KEY']
	with Cli('pub', env, f'--endpoint={rgw.endpoint}', '--no-sign') as c:
		head, got = c.list(2)
		eq('anonymous listing of a public-read bucket', got,
		   {'p/one.txt': (4, etags['pub:p/one.txt'])})
		eq('anonymous GET of a public-read bucket',
		   c.get('p/one.txt', etags['pub:p/one.txt'], 4, 1, 3), b'ne\n')
	with Cli('data', env, f'--endpoint={rgw.endpoint}', '--no-sign') as c:
		head, _ = c.list(2)
		check('anonymous listing of a private bucket: -EACCES, says anonymous',
		      head.startswith(f'err -{EACCES} ') and 'anonymous' in head, head)


def test_profiles(rgw, etags):
	with tempfile.TemporaryDirectory(prefix='coordfs-s3prof-') as d:
		cred = os.path.join(d, 'credentials')
		conf = os.path.join(d, 'config')
		with open(cred, 'w') as f:
			f.write('# test\n[default]\naws_access_key_id = nobody\n'
				'aws_secret_access_key = nothing\n\n'
				f'[train]\naws_access_key_id = {rgw.access_key}\n'
				f'aws_secret_access_key={rgw.secret_key}\n')
		with open(conf, 'w') as f:
			f.write(f'[profile other]\nregion = us-east-1\n'
				f'aws_access_key_id = {rgw.access_key}\n'
				f'aws_secret_access_key = {rgw.secret_key}\n')
		env = rgw.env(AWS_SHARED_CREDENTIALS_FILE=cred, AWS_CONFIG_FILE=conf,
			      HOME=d)
		del env['AWS_ACCESS_KEY_ID'], env['AWS_SECRET_ACCESS_KEY']
		with Cli('pub', env, f'--endpoint={rgw.endpoint}', '--profile=train') as c:
			head, got = c.list(2)
			check('--profile from the credentials file', got is not None, head)
		with Cli('pub', dict(env, AWS_PROFILE='other'), f'--endpoint={rgw.endpoint}') as c:
			head, got = c.list(2)
			check('AWS_PROFILE from the config file ([profile NAME])', got is not None,
			      head)
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			head, got = c.list(2)
			check('the default profile is used (its keys are wrong: -EACCES)',
			      head.startswith(f'err -{EACCES} '), head)
		c = Cli('pub', env, f'--endpoint={rgw.endpoint}', '--profile=nope')
		check('a missing profile: create fails naming it',
		      c.ready.startswith(f'err -{EINVAL} ') and 'nope' in c.ready, c.ready)
		c.close()
		# ~/.aws/credentials by default
		os.makedirs(os.path.join(d, '.aws'))
		os.rename(cred, os.path.join(d, '.aws', 'credentials'))
		env2 = dict(env)
		del env2['AWS_SHARED_CREDENTIALS_FILE'], env2['AWS_CONFIG_FILE']
		with Cli('pub', env2, f'--endpoint={rgw.endpoint}', '--profile=train') as c:
			head, got = c.list(2)
			check('~/.aws/credentials is read by default', got is not None, head)


CRED_PROCESS = r'''
import datetime, json, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
with open(args['--count'], 'a') as f:
    f.write('x')
print('credential helper ran', file=sys.stderr)
doc = {'Version': 1, 'AccessKeyId': args['--ak'], 'SecretAccessKey': args['--sk'],
       'SessionToken': ''}
if args.get('--ttl'):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
        seconds=int(args['--ttl']))
    doc['Expiration'] = t.strftime('%Y-%m-%dT%H:%M:%SZ')
print(json.dumps(doc))
'''


def test_process(rgw, objs, etags):
	"""credential_process in a profile: run without a shell, quoted
	words kept, its stderr passed through, refreshed before expiry, and
	every way it can fail named in one line."""
	key = 'top.txt'
	with tempfile.TemporaryDirectory(prefix='coordfs-s3proc-') as d:
		script = os.path.join(d, 'cred helper.py')	# a space: quoting works
		count = os.path.join(d, 'count')
		with open(script, 'w') as f:
			f.write(CRED_PROCESS)
		conf = os.path.join(d, 'config')

		def profile(cmd):
			with open(conf, 'w') as f:
				f.write(f'[profile proc]\ncredential_process = {cmd}\n')

		env = rgw.env(AWS_CONFIG_FILE=conf, HOME=d, AWS_PROFILE='proc',
			      AWS_SHARED_CREDENTIALS_FILE=os.path.join(d, 'none'))
		del env['AWS_ACCESS_KEY_ID'], env['AWS_SECRET_ACCESS_KEY']
		base = (f'{sys.executable} "{script}" --count {count} '
			f"--ak '{rgw.access_key}' --sk \"{rgw.secret_key}\"")
		profile(base)
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			eq('credential_process: client ready', c.ready, 'ok ready')
			eq('  a GET with its credentials',
			   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), objs[key])
			eq('  run once', open(count).read(), 'x')
			log = c.close()
			check('  its stderr is passed through', 'credential helper ran' in log, log)
		# expiring credentials are refreshed by running it again
		open(count, 'w').close()
		profile(base + ' --ttl 4')
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			eq('  expiring: client ready', c.ready, 'ok ready')
			time.sleep(2.2)	# past the refresh time (half of 4 s)
			eq('  a GET after the refresh time',
			   c.get(key, etags[key], len(objs[key]), 0, 3), objs[key][:3])
			eq('  it ran again', open(count).read(), 'xx')
			eq('  the client counts both', c.stats()['fetches'], 2)
		failing = {
			f'{sys.executable} -c "import sys; sys.exit(3)"': 'exited with status 3',
			f'{sys.executable} -c "print(42)"': 'not a credentials document',
			f'{sys.executable} -c "print(1)" $(id)': 'command substitution',
			'/nonexistent/helper': 'cannot run /nonexistent/helper',
			f"{sys.executable} -c 'unbalanced": 'unbalanced quotes',
		}
		for cmd, want in failing.items():
			profile(cmd)
			c = Cli('data', env, f'--endpoint={rgw.endpoint}')
			check(f'  credential_process failing ({want}): -EACCES naming it',
			      c.ready.startswith(f'err -{EACCES} ') and want in c.ready and
			      'credential_process' in c.ready, c.ready)
			c.close()


def test_proxy_env(rgw, objs, etags):
	"""The bucket honours http_proxy / no_proxy (a real forward proxy,
	tinyproxy); the credential endpoints never use it."""
	key = 'top.txt'
	with s3f.Tinyproxy() as tp:
		env = rgw.env(http_proxy=tp.url)
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			head, got = c.list(2)
			check('http_proxy: listing through the proxy', got is not None, head)
			eq('  a GET through it',
			   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), objs[key])
		reqs = tp.requests()
		check('  the proxy forwarded the listing and the GET (signed requests pass)',
		      any('list-type=2' in r for r in reqs) and
		      any(f'/data/{key}' in r for r in reqs), reqs[-5:])
		n = len(reqs)
		env = rgw.env(http_proxy=tp.url, no_proxy='127.0.0.1,localhost')
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			eq('no_proxy naming the endpoint: a GET works',
			   c.get(key, etags[key], len(objs[key]), 0, 3), objs[key][:3])
		eq('  and bypassed the proxy', len(tp.requests()), n)
		base = rgw.env(http_proxy=tp.url, AWS_EC2_METADATA_DISABLED='false')
		del base['AWS_ACCESS_KEY_ID'], base['AWS_SECRET_ACCESS_KEY']
		with s3f.FakeCredServer(rgw.access_key, rgw.secret_key) as cs:
			env = dict(base, AWS_EC2_METADATA_SERVICE_ENDPOINT=cs.imds_endpoint)
			with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
				eq('  instance-role credentials with http_proxy set: ready',
				   c.ready, 'ok ready')
			check('  the credential endpoint was not asked through the proxy',
			      not any(str(cs.port) in r for r in tp.requests()), tp.requests()[-3:])


def test_temporary(rgw, objs, etags):
	base = rgw.env()
	del base['AWS_ACCESS_KEY_ID'], base['AWS_SECRET_ACCESS_KEY']
	key = 'top.txt'
	with s3f.FakeCredServer(rgw.access_key, rgw.secret_key, ttl_s=4,
						token='imds-session-token') as cs:
		env = dict(base, AWS_EC2_METADATA_DISABLED='false',
			   AWS_EC2_METADATA_SERVICE_ENDPOINT=cs.imds_endpoint)
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			eq('IMDSv2: client ready', c.ready, 'ok ready')
			eq('  one token PUT and one credential fetch at create',
			   (cs.token_requests, cs.fetches), (1, 1))
			results = []
			for _ in range(3):
				results.append(c.get(key, etags[key], len(objs[key]), 0, len(objs[key])))
				time.sleep(2.2)
			results.append(c.get(key, etags[key], len(objs[key]), 0, len(objs[key])))
			eq('  GETs over 3 credential lifetimes (4 s) all succeed', results,
			   [objs[key]] * 4)
			check('  expiring credentials were refreshed (fetched again)',
			      cs.fetches >= 3, f'fetches={cs.fetches}')
			st = c.stats()
			eq('  the client counts the same fetches', st['fetches'], cs.fetches)
		# 8 threads reading while the credentials fall due: one of them
		# refreshes (one fetch per refresh interval, not one per thread) and
		# no read fails
		mid = objs['big.bin'][:4096]
		metag = rgw.put('data', 'refresh.bin', mid)
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			time.sleep(2.2)  # past the refresh time of the first credentials
			cs.set_delay(0.5)  # a slow endpoint: every thread finds them due
			before = cs.fetches
			t0 = time.monotonic()
			ans = c.cmd(f'pget 8 15 refresh.bin {metag} {len(mid)}').split()
			took = time.monotonic() - t0
			cs.set_delay(0)
			eq('  8 threads reading through a refresh: every read right',
			   (ans[0], bytes.fromhex(ans[2]) if len(ans) > 2 else None), ('ok', mid))
			# refresh interval: half the 4 s life
			bound = 1 + int(took / 2.0) + 1
			check(f'  refreshed by one thread: 1..{bound} fetches in {took:.1f} s, not 8',
			      1 <= cs.fetches - before <= bound, f'fetches {cs.fetches - before}')
		# the endpoint fails when a refresh is due: the old credentials serve
		# until they expire; then reads fail; when it is back, they work again
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			cs.set_failing(True)
			time.sleep(2.2)
			eq('  refresh failing, old credentials still valid: GET works',
			   c.get(key, etags[key], len(objs[key]), 0, 3), objs[key][:3])
			time.sleep(2.3)
			eq('  refresh failing, credentials expired: GET fails (-EIO)',
			   c.get(key, etags[key], len(objs[key]), 0, 3), -EIO)
			cs.set_failing(False)
			before = cs.fetches
			eq('  endpoint back: the next GET refreshes and works',
			   c.get(key, etags[key], len(objs[key]), 0, 3), objs[key][:3])
			eq('  with one fetch', cs.fetches - before, 1)
			log = c.close()
			check('  the failed refresh was logged', 'refreshing credentials failed' in log,
			      log[-300:])
		# the request that triggers a refresh keeps its own options (timeouts)
		with s3f.S3Proxy(rgw.endpoint) as px, \
				Cli('data', env, f'--endpoint={px.endpoint}', '--timeout-ms=700',
				    '--retries=1', '--backoff-base-ms=10') as c:
			eq('  via the proxy: a GET', c.get(key, etags[key], len(objs[key]), 0, 3),
			   objs[key][:3])
			time.sleep(2.5)  # past the refresh time (half of 4 s)
			before = cs.fetches
			px.set_delay(2500)
			eq('  a GET that refreshes, answered after its timeout: -ETIMEDOUT',
			   c.get(key, etags[key], len(objs[key]), 0, 3), -ETIMEDOUT)
			eq('  that GET fetched new credentials', cs.fetches - before, 1)
			px.set_delay(0)
		cs.set_ttl(3600)
		before = cs.fetches
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			for _ in range(5):
				c.get(key, etags[key], len(objs[key]), 0, 1)
			eq('  long-lived credentials: fetched once', cs.fetches - before, 1)
		env = dict(base, AWS_CONTAINER_CREDENTIALS_FULL_URI=cs.container_uri,
			   AWS_CONTAINER_AUTHORIZATION_TOKEN=cs.auth_token)
		before = cs.fetches
		with Cli('data', env, f'--endpoint={rgw.endpoint}') as c:
			eq('container credentials: GET works',
			   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), objs[key])
			eq('  fetched once', cs.fetches - before, 1)
		env['AWS_CONTAINER_AUTHORIZATION_TOKEN'] = 'Bearer wrong'
		c = Cli('data', env, f'--endpoint={rgw.endpoint}')
		check('container credentials with a wrong token: -EACCES at create',
		      c.ready.startswith(f'err -{EACCES} ') and 'container' in c.ready, c.ready)
		check('  the token is not in the line', 'wrong' not in c.ready.split('container')[1]
		      if 'container' in c.ready else True, c.ready)
		c.close()
	env = dict(base, AWS_EC2_METADATA_DISABLED='true')
	c = Cli('data', env, f'--endpoint={rgw.endpoint}')
	check('no credentials anywhere: -EACCES with a hint',
	      c.ready.startswith(f'err -{EACCES} ') and '--no-sign-request' in c.ready, c.ready)
	c.close()


def test_proxy_cli(rgw, objs, etags):
	"""tools/s3/s3proxy.py as a standalone process, controlled over HTTP."""
	import json
	import urllib.request
	tool = os.path.join(s3f.TOOLS, 's3proxy.py')
	p = subprocess.Popen([sys.executable, tool, '--upstream', rgw.endpoint],
			     stdout=subprocess.PIPE, text=True)
	try:
		line = p.stdout.readline().split()
		check('standalone proxy prints its address', line[:1] == ['listening'], line)
		ep = line[1]

		def ctl(what):
			with urllib.request.urlopen(f'{ep}/__proxy/{what}', timeout=10) as r:
				return r.read().decode()
		key = 'train/c008/img001.jpg'
		eq('control: fail the next 2 GETs of a key', ctl(f'fail?n=2&status=503&key={key}'),
		   'ok\n')
		with Cli('data', rgw.env(), f'--endpoint={ep}', '--backoff-base-ms=10') as c:
			eq('  a GET through it still returns the bytes',
			   c.get(key, etags[key], len(objs[key]), 0, len(objs[key])), objs[key])
		log = [json.loads(x) for x in ctl('log').splitlines()]
		eq('  its log: 3 GETs of the key, statuses 503, 503, 206',
		   [e['status'] for e in log if e['key'] == key], [503, 503, 206])
		ctl('down')
		with Cli('data', rgw.env(), f'--endpoint={ep}', '--retries=1',
			 '--backoff-base-ms=10') as c:
			eq('  down: GET fails (-EAGAIN: the endpoint)',
			   c.get(key, etags[key], len(objs[key]), 0, 1), -EAGAIN)
			eq('  control still answers while down; up', ctl('up'), 'ok\n')
			eq('  up: the same client reads again',
			   c.get(key, etags[key], len(objs[key]), 0, 1), objs[key][:1])
	finally:
		p.terminate()
		p.wait(10)
	eq('standalone proxy exits on SIGTERM', p.returncode, 0)


def test_lying_server(rng):
	"""Answers radosgw never gives: each must be an error, never bytes."""
	data = rng.randbytes(5000)
	objs = {'d/obj.bin': data, 'd/other.bin': b'x' * 10}
	with s3f.FakeS3(objs) as fake:
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		env.update(AWS_ACCESS_KEY_ID='fake', AWS_SECRET_ACCESS_KEY='fake-secret',
			   AWS_EC2_METADATA_DISABLED='true')
		with Cli('fake', env, f'--endpoint={fake.endpoint}', '--retries=2',
			 '--backoff-base-ms=5', '--timeout-ms=60000') as c:
			et = fake.etag('d/obj.bin')
			head, got = c.list(4)
			eq('honest fake server: listing', got,
			   {k: (len(v), fake.etag(k)) for k, v in objs.items()})
			eq('honest fake server: ranged GET', c.get('d/obj.bin', et, 5000, 100, 200),
			   data[100:300])
			# another version of the object is final (-ESTALE); a broken
			# answer is not (-EIO: a later call may get a good one)
			for mode, want in (('wrong_etag', -ESTALE), ('ignore_range', -EIO),
					   ('wrong_range', -EIO), ('wrong_total', -ESTALE),
					   ('no_content_range', -EIO), ('long_body', -EIO)):
				fake.mode = mode
				eq(f'server answers {mode}: {want}',
				   c.get('d/obj.bin', et, 5000, 100, 200), want)
			# A body cut short is a dropped connection: retried, then -EAGAIN
			# (the endpoint's fault, not the object's), never bytes.
			fake.mode = 'short_body'
			eq('server answers short_body: -EAGAIN after the retries',
			   c.get('d/obj.bin', et, 5000, 100, 200), -EAGAIN)
			# Header lines without end: libcurl's cap on a response's
			# headers ends each attempt, never memory.
			fake.mode = 'endless_headers'
			eq('server answers endless_headers: -EAGAIN after the retries',
			   c.get('d/obj.bin', et, 5000, 100, 200), -EAGAIN)
			fake.mode = 'ignore_range'
			eq('a 200 for a whole-object read is fine', c.get('d/obj.bin', et, 5000, 0, 5000),
			   data)
			for mode, why, want in (('list_bad_xml', 'malformed', EIO),
						('list_huge', 'oversized', EIO),
						('list_repeat_token', 'repeats its continuation token',
						 ELOOP),
						('list_empty_token', 'malformed', EIO),
						('list_doctype', 'malformed', EIO),
						('list_error_doctype', 'HTTP 503', EIO)):
				fake.mode = mode
				for par in (1, 4):
					head, got = c.list(par)
					check(f'server answers {mode} (parallel {par}): -{want}, says {why}',
					      got is None and head.startswith(f'err -{want} ') and
					      why in head, head)
			fake.mode = 'ok'
			eq('the same client is fine with an honest answer again',
			   c.get('d/obj.bin', et, 5000, 0, 10), data[:10])


def test_request_headers(rng):
	"""What goes on the wire: signing headers, session token, If-Match, Range."""
	objs = {'h/x.bin': rng.randbytes(100)}
	with s3f.FakeS3(objs) as fake:
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		env.update(AWS_ACCESS_KEY_ID='AKFAKE', AWS_SECRET_ACCESS_KEY='fake-secret',
			   AWS_SESSION_TOKEN='session-token-123', AWS_EC2_METADATA_DISABLED='true')
		et = fake.etag('h/x.bin')
		with Cli('fake', env, f'--endpoint={fake.endpoint}', '--region=eu-west-3') as c:
			eq('GET with a session token', c.get('h/x.bin', et, 100, 10, 5),
			   objs['h/x.bin'][10:15])
		h = fake.headers[-1]
		eq('  Range', h.get('range'), 'bytes=10-14')
		eq('  If-Match: the listed ETag', h.get('if-match'), et)
		eq('  x-amz-content-sha256', h.get('x-amz-content-sha256'), 'UNSIGNED-PAYLOAD')
		eq('  x-amz-security-token', h.get('x-amz-security-token'), 'session-token-123')
		auth = h.get('authorization', '')
		check('  SigV4 for the key and region', auth.startswith(
			'AWS4-HMAC-SHA256 Credential=AKFAKE/') and '/eu-west-3/s3/aws4_request' in auth,
		      auth)
		signed = auth.split('SignedHeaders=')[1].split(',')[0].split(';') \
			if 'SignedHeaders=' in auth else []
		check('  signed: host, if-match, range, x-amz-date, the token',
		      {'host', 'if-match', 'range', 'x-amz-date', 'x-amz-security-token',
		       'x-amz-content-sha256'} <= set(signed), signed)
		check('  no secret on the wire', not any('fake-secret' in v for v in h.values()))
		with Cli('fake', env, f'--endpoint={fake.endpoint}', '--no-sign') as c:
			c.get('h/x.bin', et, 100, 0, 5)
		h = fake.headers[-1]
		check('anonymous: no Authorization, no token',
		      'authorization' not in h and 'x-amz-security-token' not in h, h)


def test_https(rng):
	"""https through libcurl: a CA from AWS_CA_BUNDLE is trusted, an unknown one is not."""
	objs = {'t/x.bin': rng.randbytes(300)}
	with s3f.FakeS3(objs, tls=True) as fake:
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		env.update(AWS_ACCESS_KEY_ID='AKFAKE', AWS_SECRET_ACCESS_KEY='fake-secret',
			   AWS_EC2_METADATA_DISABLED='true')
		et = fake.etag('t/x.bin')
		with Cli('fake', dict(env, AWS_CA_BUNDLE=fake.ca_file),
			 f'--endpoint={fake.endpoint}') as c:
			head, got = c.list(2)
			eq('https listing with AWS_CA_BUNDLE', got, {'t/x.bin': (300, et)})
			eq('https ranged GET', c.get('t/x.bin', et, 300, 7, 11), objs['t/x.bin'][7:18])
		n = len(fake.requests)
		with Cli('fake', env, f'--endpoint={fake.endpoint}', '--retries=2',
			 '--backoff-base-ms=5') as c:
			head, got = c.list(2)
			check('https with a certificate no CA vouches for: -EIO naming the endpoint',
			      got is None and head.startswith(f'err -{EIO} ') and
			      fake.endpoint in head, head)
			# -EAGAIN: the endpoint's failure, not the object's (never marked
			# failed for good; a fixed CA store serves it again)
			eq('  a GET too', c.get('t/x.bin', et, 300, 0, 1), -EAGAIN)
		eq('  no request got through', len(fake.requests), n)


def main():
	rng = random.Random(20261202)
	start = time.monotonic()
	try:
		with s3f.RadosGW() as rgw:
			print(f'# radosgw at {rgw.endpoint} ({time.monotonic() - start:.1f} s)',
			      flush=True)
			rgw.create_bucket('data')
			rgw.create_bucket('pub', public_read=True)
			objs = make_dataset(rng)
			etags = rgw.put_many('data', objs, threads=16)
			etags['pub:p/one.txt'] = rgw.put('pub', 'p/one.txt', b'one\n')
			for k in ('big.bin', 'top.txt'):
				check(f'uploaded ETag of {k} is its MD5',
				      etags[k].strip('"') == hashlib.md5(objs[k]).hexdigest())
			print(f'# {len(objs)} objects uploaded ({time.monotonic() - start:.1f} s)',
			      flush=True)
			for fn, args in ((test_listing, (rgw, objs, etags)),
					 (test_auth, (rgw, objs, etags)),
					 (test_profiles, (rgw, etags)),
					 (test_process, (rgw, objs, etags)),
					 (test_proxy_env, (rgw, objs, etags)),
					 (test_temporary, (rgw, objs, etags)),
					 (test_get, (rgw, objs, etags, rng)),
					 (test_proxy_cli, (rgw, objs, etags)),
					 (test_lying_server, (rng,)),
					 (test_request_headers, (rng,)),
					 (test_https, (rng,))):
				try:
					fn(*args)
				except Exception:
					traceback.print_exc()
					check(f'{fn.__name__} ran to the end', False)
	except Exception:
		traceback.print_exc()
		check('radosgw fixture', False)
	check('every s3_cli exited cleanly (no sanitizer report)', not bad_exits, bad_exits)
	print(f'{passed} passed, {len(failed)} failed ({time.monotonic() - start:.1f} s)')
	sys.exit(1 if failed else 0)


if __name__ == '__main__':
	main()
