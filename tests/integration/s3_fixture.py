# SPDX-License-Identifier: MIT
"""Real-server S3 fixtures for the integration tests (run by /usr/bin/python3).

    import s3_fixture as s3f

    with s3f.RadosGW() as rgw:                 # throwaway radosgw, always torn down
        rgw.endpoint, rgw.access_key, rgw.secret_key, rgw.region
        rgw.env()                              # dict: AWS_* variables for a child process
        rgw.create_bucket("data", public_read=False)
        rgw.put("data", "train/a/1.jpg", b"...")    # returns the ETag, quotes included
        rgw.put_many("data", {"k": b"v", ...}, threads=8)   # {key: etag}
        rgw.delete("data", "k")
        rgw.client()                           # a boto3 S3 client (path-style)
        ak, sk = rgw.create_user("other")      # a second set of real keys

        with s3f.S3Proxy(rgw.endpoint, delay_ms=20) as proxy:   # fault/latency proxy
            proxy.endpoint                     # point the client here
            proxy.fail_next(3, status=503, method="GET", key="train/a/1.jpg")
            proxy.down(); proxy.up()           # close every connection / come back
            proxy.count(method="GET", key="train/a/1.jpg")
            proxy.connections                  # TCP connections accepted
            proxy.entries()                    # every request: method, bucket, key,
                                               #   query, range, status, injected

        with s3f.FakeCredServer(rgw.access_key, rgw.secret_key, ttl_s=30) as cs:
            cs.imds_endpoint                   # for AWS_EC2_METADATA_SERVICE_ENDPOINT
            cs.container_uri                   # for AWS_CONTAINER_CREDENTIALS_FULL_URI
            cs.auth_token                      # AWS_CONTAINER_AUTHORIZATION_TOKEN
            cs.fetches                         # credential documents handed out
            cs.token_requests                  # IMDSv2 PUT /latest/api/token calls
            cs.set_ttl(600); cs.set_delay(0.3)     # a slow credential endpoint
            cs.set_failing(True)               # 500 for every request

        with s3f.FakeS3({"k": b"bytes"}, mode="wrong_etag") as fake:   # a lying server
            fake.endpoint, fake.etag("k"), fake.mode = "ok"
        FakeS3(objects, tls=True)                  # https; fake.ca_file for AWS_CA_BUNDLE

RadosGW runs tools/s3/rgw-up.sh with a fresh directory and free ports, and
rgw-down.sh on exit (also when the body raises). It raises RuntimeError when
radosgw cannot start (a missing package is a failure, never a skip: the
project's tools/install-deps.sh installs it). free_port() picks a port.

S3Proxy is tools/s3/s3proxy.py's class (documented there), re-exported.
"""

import concurrent.futures
import datetime
import hashlib
import http.server
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape as _xml_escape

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.path.join(REPO, 'tools', 's3')

sys.path.insert(0, TOOLS)
from s3proxy import S3Proxy  # noqa: E402  (re-exported)

__all__ = ['RadosGW', 'S3Proxy', 'FakeCredServer', 'FakeS3', 'Tinyproxy', 'free_port',
	   'is_mount_probe']


def is_mount_probe(e):
	"""A proxy log entry of the one-byte GET a mount makes to check that
	signed GETs are accepted (coordfs(1), SOURCE): not a read of the data."""
	return e['method'] == 'GET' and e.get('range') == 'bytes=0-0'


def free_port():
	"""A TCP port on 127.0.0.1 that was free a moment ago."""
	with socket.socket() as s:
		s.bind(('127.0.0.1', 0))
		return s.getsockname()[1]


class RadosGW:
	"""A throwaway radosgw on loopback (tools/s3/rgw-up.sh)."""

	def __init__(self, store='memstore', timeout=90):
		self.store = store
		self.timeout = timeout
		self.dir = None
		self.endpoint = None
		self.access_key = 'testkey'
		self.secret_key = 'testsecret-' + secrets.token_hex(8)
		self.region = 'us-east-1'
		self._client = None

	def start(self):
		self.dir = tempfile.mkdtemp(prefix='coordfs-rgw-')
		env = dict(os.environ, RGW_DIR=self.dir, RGW_OSD_STORE=self.store,
			   S3_ACCESS_KEY=self.access_key, S3_SECRET_KEY=self.secret_key)
		try:
			out = subprocess.run([os.path.join(TOOLS, 'rgw-up.sh')], env=env,
					     capture_output=True, text=True,
					     timeout=self.timeout)
		except subprocess.TimeoutExpired:
			self.stop()
			raise RuntimeError('rgw-up.sh timed out')
		if out.returncode != 0:
			self.stop()
			raise RuntimeError('rgw-up.sh failed:\n' + out.stderr[-3000:])
		vals = {}
		for word in shlex.split(out.stdout.strip()):
			if '=' in word:
				k, v = word.split('=', 1)
				vals[k] = v
		self.endpoint = vals['S3_ENDPOINT']
		self.ceph_conf = vals.get('CEPH_CONF')
		return self

	def stop(self):
		if self.dir:
			subprocess.run([os.path.join(TOOLS, 'rgw-down.sh'), self.dir],
				       capture_output=True, timeout=60)
			self.dir = None

	def __enter__(self):
		return self.start()

	def __exit__(self, *exc):
		self.stop()

	def env(self, **extra):
		"""Environment for a child: the keys, the region, no stray AWS_* config."""
		e = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		e.update(AWS_ACCESS_KEY_ID=self.access_key,
			 AWS_SECRET_ACCESS_KEY=self.secret_key,
			 AWS_DEFAULT_REGION=self.region,
			 AWS_EC2_METADATA_DISABLED='true')
		e.update(extra)
		return e

	def use_in_this_process(self):
		"""This process's environment takes its AWS_* settings (and only
		those), so that every child (coordfs) finds the keys."""
		for k in [k for k in os.environ if k.startswith('AWS_')]:
			del os.environ[k]
		os.environ.update({k: v for k, v in self.env().items() if k.startswith('AWS_')})

	def client(self, access_key=None, secret_key=None):
		import boto3
		import botocore.config
		if access_key is None and self._client is not None:
			return self._client
		c = boto3.client(
			's3', endpoint_url=self.endpoint, region_name=self.region,
			aws_access_key_id=access_key or self.access_key,
			aws_secret_access_key=secret_key or self.secret_key,
			config=botocore.config.Config(s3={'addressing_style': 'path'},
						      retries={'max_attempts': 5},
						      max_pool_connections=32))
		if access_key is None:
			self._client = c
		return c

	def create_bucket(self, name, public_read=False):
		c = self.client()
		c.create_bucket(Bucket=name)
		if public_read:
			policy = {'Version': '2012-10-17', 'Statement': [{
				'Effect': 'Allow', 'Principal': '*',
				'Action': ['s3:GetObject', 's3:ListBucket'],
				'Resource': [f'arn:aws:s3:::{name}',
					     f'arn:aws:s3:::{name}/*']}]}
			c.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))

	def put(self, bucket, key, data):
		return self.client().put_object(Bucket=bucket, Key=key, Body=data)['ETag']

	def put_many(self, bucket, objects, threads=8):
		"""Upload {key: bytes}; returns {key: etag}."""
		c = self.client()
		with concurrent.futures.ThreadPoolExecutor(threads) as ex:
			futs = {k: ex.submit(c.put_object, Bucket=bucket, Key=k, Body=v)
				for k, v in objects.items()}
			return {k: f.result()['ETag'] for k, f in futs.items()}

	def delete(self, bucket, key):
		self.client().delete_object(Bucket=bucket, Key=key)

	def create_user(self, uid):
		"""A new radosgw user; returns (access_key, secret_key)."""
		ak = 'k' + secrets.token_hex(8)
		sk = secrets.token_hex(16)
		subprocess.run(['radosgw-admin', '-c', self.ceph_conf, 'user', 'create',
				f'--uid={uid}', f'--display-name={uid}',
				f'--access-key={ak}', f'--secret-key={sk}'],
			       check=True, capture_output=True, timeout=60)
		return ak, sk


class _QuietServer(http.server.ThreadingHTTPServer):
	"""A threaded server that does not print clients hanging up."""
	daemon_threads = True

	def handle_error(self, request, client_address):
		if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
			return
		super().handle_error(request, client_address)


class _CredHandler(http.server.BaseHTTPRequestHandler):
	protocol_version = 'HTTP/1.1'

	def log_message(self, fmt, *args):
		pass

	def _send(self, status, body, ctype='text/plain'):
		if isinstance(body, str):
			body = body.encode()
		self.send_response(status)
		self.send_header('Content-Type', ctype)
		self.send_header('Content-Length', str(len(body)))
		self.end_headers()
		self.wfile.write(body)

	def do_PUT(self):
		cs = self.server.cs
		if cs.failing:
			return self._send(500, 'failing on purpose')
		if self.path != '/latest/api/token':
			return self._send(404, 'not found')
		ttl = self.headers.get('X-aws-ec2-metadata-token-ttl-seconds')
		if not ttl or not ttl.isdigit():
			return self._send(400, 'missing ttl')
		with cs.lock:
			cs.token_requests += 1
		self._send(200, cs.imds_token)

	def do_GET(self):
		cs = self.server.cs
		if cs.failing:
			return self._send(500, 'failing on purpose')
		base = '/latest/meta-data/iam/security-credentials/'
		if self.path.startswith(base):
			if self.headers.get('X-aws-ec2-metadata-token') != cs.imds_token:
				return self._send(401, 'no token')
			role = self.path[len(base):]
			if role == '':
				return self._send(200, cs.role + '\n')
			if role != cs.role:
				return self._send(404, 'no such role')
			return self._send(200, cs.document(code=True), 'application/json')
		if self.path == '/creds':
			if cs.auth_token and self.headers.get('Authorization') != cs.auth_token:
				return self._send(403, 'bad authorization')
			return self._send(200, cs.document(code=False), 'application/json')
		self._send(404, 'not found')


class Tinyproxy:
	"""A real forward HTTP proxy (Debian's tinyproxy) on loopback, in the
	foreground, with its log in a temporary directory. requests() lists the
	request lines it forwarded."""

	def __init__(self):
		exe = shutil.which('tinyproxy')
		if not exe:
			raise RuntimeError('tinyproxy not found (tools/install-deps.sh installs it)')
		self.dir = tempfile.mkdtemp(prefix='coordfs-tinyproxy-')
		self.log = os.path.join(self.dir, 'tinyproxy.log')
		self.port = free_port()
		conf = os.path.join(self.dir, 'tinyproxy.conf')
		with open(conf, 'w') as f:
			f.write(f'Port {self.port}\nListen 127.0.0.1\nTimeout 60\n'
				f'LogFile "{self.log}"\nLogLevel Connect\nMaxClients 200\n'
				'Allow 127.0.0.1\nDisableViaHeader Yes\n')
		self.url = f'http://127.0.0.1:{self.port}'
		self.p = subprocess.Popen([exe, '-d', '-c', conf], stdout=subprocess.DEVNULL,
					  stderr=subprocess.DEVNULL)
		deadline = time.monotonic() + 10
		while time.monotonic() < deadline:
			try:
				socket.create_connection(('127.0.0.1', self.port), 0.2).close()
				return
			except OSError:
				time.sleep(0.05)
		self.close()
		raise RuntimeError('tinyproxy did not start')

	def requests(self):
		try:
			with open(self.log, errors='replace') as f:
				return [ln.split(': ', 1)[1].strip() for ln in f
					if 'Request (file descriptor' in ln]
		except FileNotFoundError:
			return []

	def close(self):
		if self.p.poll() is None:
			self.p.terminate()
			try:
				self.p.wait(10)
			except subprocess.TimeoutExpired:
				self.p.kill()
				self.p.wait()
		shutil.rmtree(self.dir, ignore_errors=True)

	def __enter__(self):
		return self

	def __exit__(self, *exc):
		self.close()


class FakeCredServer:
	"""IMDSv2 and container credential endpoints handing out fixed keys.

	Every document carries Expiration = now + ttl_s. fetches counts the
	documents handed out (both endpoints), token_requests the IMDSv2 token
	PUTs. token: the session token to hand out (None: no Token field)."""

	def __init__(self, access_key, secret_key, ttl_s=3600, token=None):
		self.access_key = access_key
		self.secret_key = secret_key
		self.token = token
		self.ttl_s = ttl_s
		self.role = 'coordfs-test-role'
		self.imds_token = secrets.token_hex(16)
		self.auth_token = 'Bearer ' + secrets.token_hex(8)
		self.lock = threading.Lock()
		self.fetches = 0
		self.token_requests = 0
		self.delay_s = 0
		self.failing = False
		srv = _QuietServer(('127.0.0.1', 0), _CredHandler)
		srv.cs = self
		self._srv = srv
		self.port = srv.server_address[1]
		self._thread = threading.Thread(target=srv.serve_forever,
						kwargs={'poll_interval': 0.05}, daemon=True)
		self._thread.start()

	@property
	def imds_endpoint(self):
		return f'http://127.0.0.1:{self.port}'

	@property
	def container_uri(self):
		return f'http://127.0.0.1:{self.port}/creds'

	def set_ttl(self, ttl_s):
		with self.lock:
			self.ttl_s = ttl_s

	def set_failing(self, on):
		"""Answer credential requests with 500 (on) or normally (off)."""
		with self.lock:
			self.failing = on

	def set_delay(self, seconds):
		"""Wait this long before answering each credential document."""
		with self.lock:
			self.delay_s = seconds

	def document(self, code):
		with self.lock:
			delay = self.delay_s
		if delay:
			time.sleep(delay)
		with self.lock:
			self.fetches += 1
			exp = datetime.datetime.now(datetime.timezone.utc) + \
				datetime.timedelta(seconds=self.ttl_s)
		doc = {'AccessKeyId': self.access_key,
		       'SecretAccessKey': self.secret_key,
		       'Expiration': exp.strftime('%Y-%m-%dT%H:%M:%SZ')}
		if code:
			doc.update(Code='Success', Type='AWS-HMAC',
				   LastUpdated=datetime.datetime.now(
					   datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'))
		if self.token is not None:
			doc['Token'] = self.token
		return json.dumps(doc)

	def close(self):
		self._srv.shutdown()
		self._srv.server_close()
		self._thread.join(5)

	def __enter__(self):
		return self

	def __exit__(self, *exc):
		self.close()


class _FakeS3Handler(http.server.BaseHTTPRequestHandler):
	protocol_version = 'HTTP/1.1'

	def log_message(self, fmt, *args):
		pass

	def _send(self, status, body, headers=(), length=None):
		self.send_response(status)
		for k, v in headers:
			self.send_header(k, v)
		self.send_header('Content-Length', str(len(body) if length is None else length))
		self.end_headers()
		self.wfile.write(body)

	def do_GET(self):
		fs = self.server.fake
		with fs.lock:
			fs.requests.append((self.command, self.path, self.headers.get('Range')))
			fs.headers.append({k.lower(): v for k, v in self.headers.items()})
			mode = fs.mode
		url = urllib.parse.urlsplit(self.path)
		parts = urllib.parse.unquote(url.path).lstrip('/').split('/', 1)
		if parts[0] != fs.bucket:
			return self._send(404, b'<Error><Code>NoSuchBucket</Code></Error>')
		key = parts[1] if len(parts) > 1 else ''
		if key == '':
			return self._list(dict(urllib.parse.parse_qsl(url.query,
								   keep_blank_values=True)), mode)
		if key not in fs.objects:
			return self._send(404, b'<Error><Code>NoSuchKey</Code></Error>')
		answer = fs.take_injected(key)
		if answer:
			status, code = answer
			return self._send(status, f'<Error><Code>{code}</Code></Error>'.encode())
		if any(key.startswith(p) for p in fs.endless_prefixes):
			return self._endless_error()
		if any(key.startswith(p) for p in fs.stall_prefixes):
			# a stalled store: the request is taken, nothing comes back
			fs.unstalled.wait(600)
			self.close_connection = True
			return
		if fs.get_delay:
			time.sleep(fs.get_delay)
		self._get(fs, key, fs.objects[key], mode)

	def _endless_error(self):
		# an error answer whose body never ends, fast enough for any
		# low-speed limit: only a cap on what is read of it ends it
		self.send_response(503)
		self.send_header('Content-Type', 'application/xml')
		self.send_header('Content-Length', str(1 << 40))
		self.end_headers()
		self.close_connection = True
		chunk = b'<Error><Code>SlowDown</Code></Error>' + b' ' * 8156
		try:
			self.wfile.write(chunk[:36])
			for _ in range(20 * 3600):  # an hour at most
				self.wfile.write(chunk[36:])
				self.wfile.flush()
				time.sleep(0.05)
		except OSError:
			pass

	def _trickle_page(self, q):
		# the honest page, 1 MiB of whitespace before its end tag, dribbling
		pages = []
		self._send = lambda status, body, headers=(), length=None: pages.append(body)
		try:
			self._list(q, 'ok')
		finally:
			del self._send
		end = pages[0].rindex(b'</ListBucketResult>')
		body = pages[0][:end] + b' ' * (1 << 20) + pages[0][end:]
		self.send_response(200)
		self.send_header('Content-Length', str(len(body)))
		self.end_headers()
		self.close_connection = True
		try:
			for i in range(0, len(body), 4096):
				self.wfile.write(body[i:i + 4096])
				self.wfile.flush()
				time.sleep(0.1)
		except OSError:
			pass

	def _list(self, q, mode):
		fs = self.server.fake
		if mode == 'list_endless_error':
			return self._endless_error()
		if mode == 'list_trickle':
			return self._trickle_page(q)
		if mode == 'list_bad_xml':
			return self._send(200, b'<ListBucketResult><Contents><Key>a</Key>')
		if mode == 'list_empty_token':
			# truncated, with a token that is there but empty
			return self._send(200, b'<?xml version="1.0" encoding="UTF-8"?>'
					  b'<ListBucketResult><IsTruncated>true</IsTruncated>'
					  b'<NextContinuationToken></NextContinuationToken>'
					  b'<Contents><Key>k</Key><Size>1</Size></Contents>'
					  b'</ListBucketResult>')
		if mode in ('list_doctype', 'list_error_doctype'):
			# entity expansion ("billion laughs"): a DTD no parser of ours
			# may read; as a page, or as a 503's error document
			lol = ('<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">' +
			       ''.join(f'<!ENTITY {chr(98 + i)} "' + f'&{chr(97 + i)};' * 10 + '">'
				       for i in range(9)) + ']>')
			if mode == 'list_doctype':
				return self._send(200, (lol + '<ListBucketResult><Name>&j;</Name>'
							'</ListBucketResult>').encode())
			return self._send(503, (lol + '<Error><Code>&j;</Code></Error>').encode())
		if mode == 'list_huge':
			body = b'<ListBucketResult><Name>' + b'x' * (33 << 20) + b'</Name>'
			return self._send(200, body)
		prefix = q.get('prefix', '')
		if fs.pages is not None:
			return self._raw_pages(q.get('continuation-token'))
		keys = sorted(k for k in fs.objects if k.startswith(prefix))
		token = 'same/token+=' if mode == 'list_repeat_token' else ''
		got = q.get('continuation-token')
		if mode == 'list_alternating_tokens':
			token = 'tok/A+=' if got != 'tok/A+=' else 'tok/B+='
		if mode == 'list_endless_prefixes':
			# every page 1000 new directories under the level asked for
			n = int(got.split('-')[1]) + 1 if got else 0
			pad = 'p' * 880
			out = ['<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>',
			       f'<IsTruncated>true</IsTruncated>'
			       f'<NextContinuationToken>page-{n}</NextContinuationToken>']
			out += [f'<CommonPrefixes><Prefix>{prefix}{pad}{n:08d}{i:04d}/</Prefix>'
				'</CommonPrefixes>' for i in range(1000)]
			out.append('</ListBucketResult>')
			return self._send(200, ''.join(out).encode())
		if mode == 'list_endless':
			# every page new keys and a new token, never the last page
			n = int(got.split('-')[1]) + 1 if got else 0
			token = f'page-{n}'
			keys = [f'endless/{n:08d}/{i:04d}' for i in range(1000)]
			out = ['<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>',
			       f'<IsTruncated>true</IsTruncated>'
			       f'<NextContinuationToken>{token}</NextContinuationToken>']
			for k in keys:
				out.append(f'<Contents><Key>{k}</Key><Size>1</Size>'
					   '<ETag>&quot;00000000000000000000000000000000&quot;</ETag>'
					   '<LastModified>2026-01-01T00:00:00.000Z</LastModified>'
					   '</Contents>')
			out.append('</ListBucketResult>')
			return self._send(200, ''.join(out).encode())
		out = ['<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>',
		       f'<IsTruncated>{"true" if token else "false"}</IsTruncated>']
		if token:
			out.append(f'<NextContinuationToken>{token}</NextContinuationToken>')
		for k in keys:
			out.append(f'<Contents><Key>{_xml_escape(k)}</Key>'
				   f'<Size>{fs.sizes.get(k, len(fs.objects[k]))}</Size>'
				   f'<ETag>{_xml_escape(fs.etag(k), {chr(34): "&quot;"})}</ETag>'
				   '<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>')
		out.append('</ListBucketResult>')
		self._send(200, ''.join(out).encode())

	def _raw_pages(self, got):
		# fs.pages: each page's keys as they go in <Key> (url-encoded,
		# whatever the prefix asked), <EncodingType>url</EncodingType>
		fs = self.server.fake
		n = int(got.split('-')[1]) if got else 0
		last = n + 1 >= len(fs.pages)
		out = ['<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
		       '<EncodingType>url</EncodingType>',
		       f'<IsTruncated>{"false" if last else "true"}</IsTruncated>']
		if not last:
			out.append(f'<NextContinuationToken>pg-{n + 1}</NextContinuationToken>')
		for k in fs.pages[n]:
			real = urllib.parse.unquote(k)
			data = fs.objects.get(real, b'x')
			etag = fs.etag(real) if real in fs.objects else '"' + 32 * '0' + '"'
			out.append(f'<Contents><Key>{k}</Key><Size>{len(data)}</Size>'
				   f'<ETag>{_xml_escape(etag, {chr(34): "&quot;"})}</ETag>'
				   '<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>')
		out.append('</ListBucketResult>')
		self._send(200, ''.join(out).encode())

	def _get(self, fs, key, data, mode):
		etag = fs.etag(key)
		rng = self.headers.get('Range', '')
		a, b = 0, len(data) - 1
		if rng.startswith('bytes='):
			a, b = (int(x) for x in rng[6:].split('-'))
		total = len(data)
		hdr = [('ETag', etag)]
		if mode == 'wrong_etag':
			hdr = [('ETag', '"0000000000000000000000000000beef"')]
		with fs.lock:
			new = fs.replace_after.pop(key, None)
			if new is not None:
				# served this once more, then replaced (If-Match ignored)
				fs.objects[key] = new
		if mode == 'endless_headers':
			self.wfile.write(b'HTTP/1.1 206 Partial Content\r\n')
			pad = b'X-Pad: ' + b'p' * 1000 + b'\r\n'
			try:
				for _ in range(1 << 20):  # a GiB at most
					self.wfile.write(pad * 64)
			except OSError:
				pass
			self.close_connection = True
			return
		if mode == 'redirect':
			return self._send(307, b'', [('Location', fs.redirect_to + self.path)])
		if mode == 'gzip':
			import gzip
			body = gzip.compress(data[a:b + 1])
			return self._send(206, body, hdr + [('Content-Encoding', 'gzip'), (
				'Content-Range', f'bytes {a}-{b}/{total}')])
		if mode == 'ignore_range':
			return self._send(200, data, hdr)
		if mode == 'wrong_range':
			a2 = min(a + 1, total - 1)
			return self._send(206, data[a2:b + 1],
					  hdr + [('Content-Range', f'bytes {a2}-{b}/{total}')])
		if mode == 'wrong_total':
			return self._send(206, data[a:b + 1],
					  hdr + [('Content-Range', f'bytes {a}-{b}/{total + 1}')])
		if mode == 'no_content_range':
			return self._send(206, data[a:b + 1], hdr)
		if mode == 'long_body':
			body = data[a:b + 1] + b'OVERFLOW' * 64
			return self._send(206, body, hdr + [('Content-Range', f'bytes {a}-{b}/{total}')])
		if mode == 'short_body':
			self._send(206, data[a:b], hdr + [('Content-Range', f'bytes {a}-{b}/{total}')],
				   length=b + 1 - a)
			self.close_connection = True
			return
		self._send(206, data[a:b + 1], hdr + [('Content-Range', f'bytes {a}-{b}/{total}')])


class FakeS3:
	"""A path-style S3 endpoint serving objects from a dict, honest (mode
	"ok") or lying on purpose: GET modes wrong_etag, ignore_range (200 with
	the whole object), wrong_range (shifted Content-Range), wrong_total,
	no_content_range, long_body (more bytes than the range), short_body
	(fewer than Content-Length, then closes); listing modes list_bad_xml,
	list_huge (a 33 MiB page), list_empty_token (truncated, with an empty
	NextContinuationToken), list_doctype and list_error_doctype (a DTD
	expanding an entity to 10^10 bytes, in a page or in a 503's body), list_repeat_token (always truncated, same
	token), list_alternating_tokens (always truncated, tokens A, B, A, B),
	list_endless (1000 new keys and a new token on every page, forever),
	list_endless_prefixes (the same with 1000 new CommonPrefixes of 900
	bytes on every page and no key). It checks no signature. tls=True: https with a fresh self-signed
	certificate (ca_file; give it as AWS_CA_BUNDLE).
	etags[key] = '...': the ETag listed and answered for key (weak ones,
	oversized ones), instead of the quoted MD5; sizes[key] = N: the size
	listed for it (a lie: GETs still serve the object's bytes).
	fail_next(key, status, code, n=1): the next n GETs of key get that S3
	error answer (403 RequestTimeTooSkewed, 400 ExpiredToken, ...).
	stall(prefix): GETs of keys under prefix are taken and never answered
	(until unstall(), or 600 s), as a stalled store does; gets(prefix)
	counts the object GETs seen.
	endless_error(prefix): GETs of keys under prefix are answered 503
	SlowDown with an error body that never ends (a 1 TiB Content-Length,
	160 KiB/s of it, until the client hangs up); listing mode
	list_endless_error answers every page so; list_trickle sends an honest
	page with 1 MiB of whitespace before its end tag, 4 KiB every 0.1 s
	(about 26 s, fast enough for any low-speed limit).
	pages = [[KEY, ...], ...]: the listing is these pages instead, each key
	written into <Key> as given (url-encoded: the pages say
	<EncodingType>url</EncodingType>), whatever prefix was asked: keys
	outside it, repeated across pages, with '.', '..' or empty components
	once decoded; sizes and ETags those of fake.objects[decoded key].
	get_delay = S: every object GET answered S seconds late (a slow store).
	replace_after[key] = NEW: the next GET of key is answered, then the
	object becomes NEW (another ETag), If-Match ignored as a store that
	does not honour it would. GET modes endless_headers (header lines
	without end), redirect (307 to redirect_to +
	the same path) and gzip (206, Content-Encoding: gzip, the range's
	bytes compressed).
	requests: (method, path, Range) seen;
	headers: each request's headers (names lower-cased), in the same order."""

	def __init__(self, objects, bucket='fake', mode='ok', tls=False):
		self.objects = dict(objects)
		self.bucket = bucket
		self.mode = mode
		self.lock = threading.Lock()
		self.requests = []
		self.headers = []
		self.stall_prefixes = []
		self.endless_prefixes = []
		self.unstalled = threading.Event()
		self.injected = {}
		self.etags = {}
		self.sizes = {}
		self.pages = None
		self.replace_after = {}
		self.get_delay = 0
		self.redirect_to = None
		self.tls = tls
		self.ca_file = None
		self._tmp = None
		srv = _QuietServer(('127.0.0.1', 0), _FakeS3Handler)
		if tls:
			# a throwaway self-signed certificate for 127.0.0.1; ca_file is it
			import ssl
			self._tmp = tempfile.mkdtemp(prefix='coordfs-fakes3-')
			self.ca_file = os.path.join(self._tmp, 'cert.pem')
			keyf = os.path.join(self._tmp, 'key.pem')
			subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
					'-keyout', keyf, '-out', self.ca_file, '-days', '2',
					'-subj', '/CN=127.0.0.1',
					'-addext', 'subjectAltName=IP:127.0.0.1'],
				       check=True, capture_output=True, timeout=60)
			ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
			ctx.load_cert_chain(self.ca_file, keyf)
			srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
		srv.fake = self
		self._srv = srv
		self.port = srv.server_address[1]
		self._thread = threading.Thread(target=srv.serve_forever,
						kwargs={'poll_interval': 0.05}, daemon=True)
		self._thread.start()

	@property
	def endpoint(self):
		return f'{"https" if self.tls else "http"}://127.0.0.1:{self.port}'

	def etag(self, key):
		if key in self.etags:
			return self.etags[key]
		return '"' + hashlib.md5(self.objects[key]).hexdigest() + '"'

	def fail_next(self, key, status, code, n=1):
		with self.lock:
			self.injected.setdefault(key, []).extend([(status, code)] * n)

	def take_injected(self, key):
		with self.lock:
			q = self.injected.get(key)
			return q.pop(0) if q else None

	def stall(self, prefix):
		with self.lock:
			self.unstalled.clear()
			self.stall_prefixes.append(prefix)

	def endless_error(self, prefix):
		with self.lock:
			self.endless_prefixes.append(prefix)

	def unstall(self):
		with self.lock:
			self.stall_prefixes = []
			self.unstalled.set()

	def gets(self, prefix=''):
		"""Object GETs seen for keys under prefix."""
		n = 0
		with self.lock:
			for method, path, _ in self.requests:
				url = urllib.parse.urlsplit(path)
				key = urllib.parse.unquote(url.path).lstrip('/').split('/', 1)[-1]
				if method == 'GET' and not url.query and key.startswith(prefix):
					n += 1
		return n

	def close(self):
		self.unstall()
		self._srv.shutdown()
		self._srv.server_close()
		self._thread.join(5)
		if self._tmp:
			import shutil
			shutil.rmtree(self._tmp, ignore_errors=True)

	def __enter__(self):
		return self

	def __exit__(self, *exc):
		self.close()
