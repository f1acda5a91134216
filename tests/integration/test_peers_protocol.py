# SPDX-License-Identifier: MIT
"""Integration test of the peer protocol (coordfs(1), PEERS) on a real daemon.

A node started with --secret-file (mode 600) is probed with raw HTTP
requests (http.client sends the path exactly as written): signed
requests (a signature serves once, for its path and range, within the
clock window; "Bearer SECRET" only with --accept-bearer), path traversal
in every spelling we know (a canary file
next to SOURCE must never come back, nor /etc/passwd), 404 for unknown
files and directories, Range slices with 206/416 and Content-Range,
keep-alive, /metrics as Prometheus text, /v1/stats as the statistics JSON (coordfs(1), STATISTICS).
Then the command line: a world-readable secret file warns at mount;
--peers without --node and bad URLs fail with one line and mount nothing;
the -o form with escaped commas works; two nodes whose secrets differ
still read correct bytes (from SOURCE) and count peer errors; IPv6
loopback peers spelled two ways agree on ownership. Last, 1,000 signed
keep-alive connections on one daemon (issue #20) beside 100 strangers.
"""

import hashlib
import json
import os
import random
import re
import resource
import socket
import sys
import time
import http.client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

KIB = 1024
SECRET = 'S3cr3t-' + ''.join(random.choice('abcdefghijkmnpqrstuvwxyz23456789')
			     for _ in range(24))

DOCUMENTED_FIELDS = {
	'cache': ['capacity_bytes', 'used_bytes', 'items', 'hits', 'misses',
		  'hit_bytes', 'miss_bytes', 'admitted', 'refused'],
	'source': ['reads', 'bytes', 'errors'],
	'peers': ['fetches', 'bytes', 'errors', 'served', 'served_bytes',
		  'nodes'],
	'prep': ['decodes', 'shared', 'errors', 'staged_bytes'],
	'fuse': ['opens', 'reads', 'read_bytes'],
}


def make_files(seed):
	rng = random.Random(seed)
	files = {
		'a.bin': rng.randbytes(1000),
		'dir/b.bin': rng.randbytes(70 * KIB + 17),
		'dir/sub/c.bin': rng.randbytes(3 * KIB),
		'sp ace/ünï €.bin': rng.randbytes(555),
		'empty.bin': b'',
	}
	for i in range(12):
		files[f'many/f{i:02d}.bin'] = rng.randbytes(rng.randint(1, 90 * KIB))
	return files


def write_secret(path, text, mode):
	with open(path, 'w') as f:
		f.write(text + '\n')
	os.chmod(path, mode)


def auth(secret=SECRET):
	return ct.signed(secret)


def check_stats_json(c, label, st):
	c.eq(f'{label}: version', st.get('version'), 1)
	c.check(f'{label}: uptime_s is a number',
		isinstance(st.get('uptime_s'), (int, float)), repr(st.get('uptime_s')))
	for group, fields in DOCUMENTED_FIELDS.items():
		g = st.get(group)
		missing = [f for f in fields if not isinstance(g, dict) or f not in g]
		c.check(f'{label}: "{group}" has the documented fields', not missing,
			f'missing {missing}')
		if isinstance(g, dict):
			bad = [f for f in fields if f != 'nodes' and f in g and
			       not (isinstance(g[f], int) and g[f] >= 0)]
			c.check(f'{label}: "{group}" counters are integers >= 0',
				not bad, f'bad {bad}')
	nodes = st.get('peers', {}).get('nodes')
	c.check(f'{label}: peers.nodes is a list of {{url, up}}',
		isinstance(nodes, list) and nodes and
		all(isinstance(n, dict) and isinstance(n.get('url'), str) and
		    isinstance(n.get('up'), bool) for n in nodes), repr(nodes))


SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?[ \t]+(\S+)'
		       r'([ \t]+-?[0-9]+)?$')
LABELS_RE = re.compile(r'^\{(\s*[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"\s*'
		       r'(,\s*[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"\s*)*,?)?\}$')


def check_metrics(c, text):
	lines = text.split('\n')
	c.check('/metrics ends with a newline', text.endswith('\n'))
	types, helps, bad, samples = {}, {}, [], {}
	for ln in lines:
		if not ln.strip():
			continue
		if ln.startswith('#'):
			parts = ln.split(None, 3)
			if len(parts) >= 3 and parts[1] == 'TYPE':
				types.setdefault(parts[2], []).append(
					parts[3] if len(parts) > 3 else '')
			elif len(parts) >= 3 and parts[1] == 'HELP':
				helps.setdefault(parts[2], 0)
				helps[parts[2]] += 1
			continue
		m = SAMPLE_RE.match(ln)
		if not m:
			bad.append(ln)
			continue
		name, labels, value = m.group(1), m.group(2) or '', m.group(3)
		try:
			float(value)
		except ValueError:
			bad.append(ln)
			continue
		if labels and not LABELS_RE.match(labels):
			bad.append(ln)
			continue
		if not name.startswith('coordfs_'):
			bad.append(ln)
			continue
		samples.setdefault((name, labels), 0)
		samples[(name, labels)] += 1
	c.check('/metrics: every sample line is coordfs_NAME{labels} FLOAT',
		not bad and samples, f'bad lines: {bad[:3]}')
	twice = [n for n, t in types.items() if len(t) > 1]
	c.check('/metrics: no metric family declared twice (# TYPE)', not twice,
		f'declared twice: {twice}')
	htwice = [n for n, k in helps.items() if k > 1]
	c.check('/metrics: no # HELP repeated', not htwice, f'{htwice}')
	dup = [k for k, v in samples.items() if v > 1]
	c.check('/metrics: no sample repeated with the same labels', not dup,
		f'{dup[:3]}')
	badtype = [n for n, t in types.items()
		   if t[0] not in ('counter', 'gauge', 'histogram', 'summary',
				   'untyped')]
	c.check('/metrics: TYPE lines name a Prometheus type', not badtype,
		f'{badtype}')

	def family(name):
		for suf in ('', '_bucket', '_sum', '_count'):
			if suf and name.endswith(suf) and name[:-len(suf)] in types:
				return name[:-len(suf)]
		return name
	undeclared = sorted({n for n, _ in samples if family(n) not in types})
	c.check('/metrics: every sample belongs to a declared family',
		not undeclared, f'{undeclared[:5]}')
	names = {n for n, _ in samples}
	up = sorted(lb for n, lb in samples if n == 'coordfs_peer_up')
	c.check('/metrics has a coordfs_peer_up{url="..."} gauge per peer '
		'(the JSON\'s peers.nodes[].up)', len(up) == 1 and
		'url="http://127.0.0.1:' in up[0], f'got {up}')
	for want in ('coordfs_source_bytes_total', 'coordfs_peer_fetches_total',
		     'coordfs_peer_served_total', 'coordfs_cache_used_bytes',
		     'coordfs_cache_fill_errors_total', 'coordfs_peer_fallbacks_total'):
		c.check(f'/metrics has {want}', want in names)
	return {n: float(m.group(3)) for n, m in
		((SAMPLE_RE.match(ln).group(1), SAMPLE_RE.match(ln))
		 for ln in lines if ln and not ln.startswith('#')
		 and SAMPLE_RE.match(ln))}


def test_server(c):
	seed = int(time.time())
	files = make_files(seed)
	canary_token = 'CANARY-' + hashlib.sha256(str(seed).encode()).hexdigest()

	def populate(src):
		for rel, data in files.items():
			ct.write_file(os.path.join(src, rel), data)
		root = os.path.dirname(src)
		with open(os.path.join(root, 'canary.txt'), 'w') as f:
			f.write(canary_token + '\n')
		os.symlink('../canary.txt', os.path.join(src, 'link_out'))
		os.symlink(os.path.join(root, 'canary.txt'),
			   os.path.join(src, 'dir', 'link_abs'))
		os.symlink('../a.bin', os.path.join(src, 'dir', 'link_in'))
		os.symlink('..', os.path.join(src, 'dir', 'link_up_dir'))
		os.symlink(root, os.path.join(src, 'link_root_dir'))

	with ct.Cluster(1, populate=populate) as cl:
		secret_file = os.path.join(cl.root, 'secret')
		write_secret(secret_file, SECRET, 0o600)
		err = cl.mount(0, [f'--secret-file={secret_file}',
				   '--cache-size=8M', '--chunk-size=64K'])
		c.check('mode-600 secret file: no warning at mount',
			'readable' not in err and 'warning' not in err.lower(),
			err.strip())
		port = cl.ports[0]
		leaks = []

		def get(path, headers=None, method='GET'):
			status, hdrs, body = ct.http_request(port, path, headers,
							     method=method)
			if canary_token.encode() in body or b'root:x:0:0' in body:
				leaks.append(path)
			return status, hdrs, body

		# authentication
		st, h, body = get('/v1/files/a.bin')
		c.eq('no token: 401', st, 401)
		c.check('401 carries WWW-Authenticate',
			'www-authenticate' in h, str(h))
		c.check('401 has no file bytes', files['a.bin'] not in body)
		for label, hdr in [
			('wrong token', auth('wrong')),
			('secret plus one char', auth(SECRET + 'x')),
			('secret minus one char', auth(SECRET[:-1])),
			('empty bearer', {'Authorization': 'Bearer '}),
			('lower-case scheme + wrong', auth('nope')),
			('Basic scheme with the secret',
			 {'Authorization': 'Basic ' + SECRET}),
			('secret without scheme', {'Authorization': SECRET}),
			('a 10 KB token', auth(SECRET * (10240 // len(SECRET)))),
			('secret twice', auth(SECRET + SECRET)),
		]:
			st, _, body = get('/v1/files/a.bin', hdr)
			c.eq(f'{label}: 401', st, 401)
		# the secret itself is no longer a credential (signed requests
		# only, unless --accept-bearer)
		for label, hdr in [
			('"Bearer SECRET"', {'Authorization': 'Bearer ' + SECRET}),
			('lower-case "bearer"', {'Authorization': 'bearer ' + SECRET}),
		]:
			st, _, body = get('/v1/files/a.bin', hdr)
			c.eq(f'{label} without --accept-bearer: 401', st, 401)
		# signed: RFC 9110's case-insensitive scheme; each signature once,
		# for its own path and range, within the clock window
		sig = ct.peer_signature(SECRET, 'GET', '/v1/files/a.bin')
		for label, hdr in [
			('signed', {'Authorization': sig}),
			('the same signature again (a replay)', {'Authorization': sig}),
			('lower-case scheme, lower-case header name',
			 {'authorization': ct.peer_signature(SECRET, 'GET', '/v1/files/a.bin')
			  .replace('Coordfs-HMAC-SHA256', 'coordfs-hmac-sha256')}),
			('signed for another path',
			 {'Authorization': ct.peer_signature(SECRET, 'GET', '/v1/files/b.bin')}),
			('signed for another range', {
				'Authorization': ct.peer_signature(SECRET, 'GET', '/v1/files/a.bin',
								   'bytes=0-9'),
				'Range': 'bytes=0-99'}),
			('signed 40 s ago', {'Authorization': ct.peer_signature(
				SECRET, 'GET', '/v1/files/a.bin', t=int(time.time()) - 40)}),
			('signed 40 s ahead', {'Authorization': ct.peer_signature(
				SECRET, 'GET', '/v1/files/a.bin', t=int(time.time()) + 40)}),
		]:
			st, _, body = get('/v1/files/a.bin', hdr)
			want = 200 if label in ('signed', 'lower-case scheme, lower-case '
						'header name') else 401
			c.check(f'{label}: {want}', st == want and (want != 200 or body ==
									 files['a.bin']),
				f'status {st}')
		st, _, _ = get('/v1/files/no/such/file', auth('wrong'))
		c.eq('unknown file with wrong token: 401 (no existence leak)',
		     st, 401)
		st, _, _ = get('/v1/stats')
		c.eq('/v1/stats without token: 401', st, 401)
		st, _, _ = get('/metrics')
		c.eq('/metrics without token: 401', st, 401)

		for rel, data in sorted(files.items()):
			path = '/v1/files/' + ct_quote(rel)
			st, h, body = get(path, auth())
			c.check(f'right token: GET {path} -> 200 and exact bytes',
				st == 200 and body == data,
				f'status {st}, {len(body)} bytes, want {len(data)}')

		# keep-alive: several requests on one connection
		conn = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
		try:
			ok = True
			sock_ids = set()
			for i in range(5):
				rel = f'many/f{i:02d}.bin'
				st, h, body = ct.http_request(port, '/v1/files/' + rel,
							      auth(), conn=conn)
				sock_ids.add(id(conn.sock))
				ok = ok and st == 200 and body == files[rel]
			c.check('keep-alive: 5 requests on one connection',
				ok and len(sock_ids) == 1, f'sockets {len(sock_ids)}')
		finally:
			conn.close()

		# traversal and hostile paths
		hostile = [
			'/v1/files/../canary.txt',
			'/v1/files/../../../../etc/passwd',
			'/v1/files/%2e%2e%2fcanary.txt',
			'/v1/files/%2E%2E%2Fcanary.txt',
			'/v1/files/..%2fcanary.txt',
			'/v1/files/%2e%2e/canary.txt',
			'/v1/files/dir/..%2f..%2fcanary.txt',
			'/v1/files/dir/%2e%2e/%2e%2e/canary.txt',
			'/v1/files/dir/../../canary.txt',
			'/v1/files/..',
			'/v1/files/.',
			'/v1/files/./a.bin',
			'/v1/files//etc/passwd',
			'/v1/files/%2Fetc%2Fpasswd',
			'/v1/files/%2fetc/passwd',
			'/v1/files/a.bin%00',
			'/v1/files/a.bin%00.txt',
			'/v1/files/%00',
			'/v1/files/a.bin%0a',
			'/v1/files/..%5ccanary.txt',
			'/v1/files/%252e%252e%252fcanary.txt',
			'/v1/files/%c0%ae%c0%ae/canary.txt',
			'/v1/files/%',
			'/v1/files/%zz',
			'/v1/files/link_out',
			'/v1/files/dir/link_abs',
			'/v1/files/dir/link_in',
			'/v1/files/dir/link_up_dir/a.bin',
			'/v1/files/dir/link_up_dir/../canary.txt',
			'/v1/files/dir/link_up_dir/link_out',
			'/v1/files/link_root_dir/canary.txt',
			'/v1/files/link_root_dir/src/a.bin',
			'/v1/files/' + 'a' * 20000,
			'/v1/files/' + '/'.join(['d'] * 6000),
			'/v1/files/' + 'x' * 300 + '/a.bin',
			'/v1/files/',
			'/v1/files',
			'/v1/files/dir/',
		]
		for path in hostile:
			try:
				st, _, body = get(path, auth())
			except (OSError, http.client.HTTPException) as e:
				# a closed connection leaks nothing either
				st, body = f'{type(e).__name__}', b''
			shown = path if len(path) < 80 else \
				path[:60] + f'...({len(path)} chars)'
			c.check(f'hostile {shown} -> 4xx', isinstance(st, int) and
				400 <= st < 500, f'got {st}, body {body[:60]!r}')
		st, _, _ = get('/v1/files/no/such/file.bin', auth())
		c.eq('unknown file: 404', st, 404)
		st, _, _ = get('/v1/files/dir', auth())
		c.check('directory: 4xx', 400 <= st < 500, f'got {st}')
		st, _, _ = get('/v1/files/dir/sub', auth())
		c.check('nested directory: 4xx', 400 <= st < 500, f'got {st}')
		st, _, _ = get('/v1/nothing', auth())
		c.eq('unknown route: 404', st, 404)
		st, _, _ = get('/v1/files/a.bin', auth(), method='POST')
		c.check('POST: 4xx', 400 <= st < 500, f'got {st}')
		st, _, _ = get('/v1/files/a.bin', auth(), method='DELETE')
		c.check('DELETE: 4xx', 400 <= st < 500, f'got {st}')

		# Range
		data = files['dir/b.bin']
		size = len(data)
		for rng, lo, hi in [('bytes=10-99', 10, 99),
				    ('bytes=100-', 100, size - 1),
				    ('bytes=-50', size - 50, size - 1),
				    ('bytes=0-0', 0, 0),
				    (f'bytes={size - 1}-', size - 1, size - 1),
				    (f'bytes=65530-65545', 65530, 65545),
				    (f'bytes={size - 10}-{size + 1000}', size - 10,
				     size - 1),
				    (f'bytes=-{size + 5}', 0, size - 1)]:
			st, h, body = get('/v1/files/dir/b.bin',
					  dict(auth(), Range=rng))
			c.check(f'Range {rng}: 206, exact slice, Content-Range',
				st == 206 and body == data[lo:hi + 1] and
				h.get('content-range') == f'bytes {lo}-{hi}/{size}',
				f'status {st}, {len(body)} bytes, '
				f'Content-Range {h.get("content-range")!r}')
		for rng in (f'bytes={size}-', f'bytes={size + 100}-{size + 200}'):
			st, h, body = get('/v1/files/dir/b.bin',
					  dict(auth(), Range=rng))
			c.check(f'Range {rng} beyond the end: 416, bytes */{size}',
				st == 416 and h.get('content-range') ==
				f'bytes */{size}', f'status {st}, '
				f'{h.get("content-range")!r}')
		st, h, body = get('/v1/files/a.bin', dict(auth(), Range='bytes=-0'))
		c.check('Range bytes=-0: 416 (or whole file 200)',
			st == 416 or (st == 200 and body == files['a.bin']),
			f'status {st}')

		# /v1/stats and /metrics
		st, h, body = get('/v1/stats', auth())
		c.eq('/v1/stats: 200', st, 200)
		try:
			js = json.loads(body)
		except ValueError as e:
			js = None
			c.check('/v1/stats is valid JSON', False, str(e))
		if js is not None:
			c.check('/v1/stats is valid JSON', isinstance(js, dict))
			check_stats_json(c, '/v1/stats', js)
			xa = cl.stats(0)
			c.eq('/v1/stats has the keys of the xattr but the local '
			     'ones (pid, source_dir)', sorted(js),
			     sorted(k for k in xa if k not in ('pid', 'source_dir')))
			c.check('the xattr (local users) keeps pid and source_dir',
				'pid' in xa and 'source_dir' in xa, sorted(xa))
			c.check('/v1/stats: no pid, no SOURCE path for peers',
				'pid' not in js and 'source_dir' not in js and
				cl.src.encode() not in body and
				os.path.basename(cl.src).encode() not in body,
				body[:200])
			c.check('/v1/stats: peers.mismatches is a counter',
				isinstance(js['peers'].get('mismatches'), int))
			c.ge('/v1/stats: served counts our file GETs',
			     js['peers']['served'], len(files))
			c.eq('/v1/stats: peers.nodes', [n['url'] for n in
			     js['peers']['nodes']], cl.urls)
		st, h, body = get('/metrics', auth())
		c.eq('/metrics: 200', st, 200)
		c.check('/metrics content type is text/plain',
			h.get('content-type', '').startswith('text/plain'),
			h.get('content-type'))
		vals = check_metrics(c, body.decode('utf-8', 'replace'))
		if js is not None and vals:
			c.ge('/metrics coordfs_peer_served_total >= stats served',
			     vals.get('coordfs_peer_served_total', -1),
			     js['peers']['served'])
		# 80 idle connections (more than the cap of 64 connections
		# without an authenticated request) and 20 with half a
		# request: once they close, the server serves again and the
		# daemon is alive
		import socket
		socks = []
		try:
			for i in range(100):
				sk = socket.create_connection(('127.0.0.1', port),
							      timeout=5)
				if i >= 80:
					sk.sendall(b'GET /v1/files/a.bin HTTP/1.1\r\n'
						   b'Host: x\r\n')
				socks.append(sk)
		except OSError:
			pass
		finally:
			for sk in socks:
				sk.close()
		served = False
		deadline = time.monotonic() + 10
		while time.monotonic() < deadline and not served:
			try:
				st, _, body = get('/v1/files/a.bin', auth())
				served = st == 200 and body == files['a.bin']
			except (OSError, http.client.HTTPException):
				pass
			if not served:
				time.sleep(0.2)
		c.check('after 100 idle or half-sent connections close, the '
			'server serves again (within 10 s)', served)
		c.check('... and the daemon is alive', ct.pid_alive(cl.pids[0]))
		c.check('no response ever carried the canary or /etc/passwd',
			not leaks, f'leaked through {leaks[:3]}')


def ct_quote(rel):
	from urllib.parse import quote
	return quote(rel, safe='/')


def test_command_line(c):
	with ct.Cluster(1, populate=lambda s: ct.write_file(
			os.path.join(s, 'x.bin'), b'x' * 100)) as cl:
		secret_file = os.path.join(cl.root, 'secret')
		write_secret(secret_file, SECRET, 0o644)
		err = cl.mount(0, [f'--secret-file={secret_file}',
				   '--cache-size=1M'])
		warn = [ln for ln in err.splitlines()
			if 'warning' in ln.lower() and secret_file in ln]
		c.eq('world-readable secret file: one warning line naming it',
		     len(warn), 1)
		st, _, body = ct.http_request(cl.ports[0], '/v1/files/x.bin',
					      auth())
		c.check('... and the node still serves with it',
			st == 200 and body == b'x' * 100, f'status {st}')
		st, _, _ = ct.http_request(cl.ports[0], '/v1/files/x.bin')
		c.eq('... and still demands it', st, 401)

	# --accept-bearer: coordfs 0.1's "Bearer SECRET" too, with a warning
	with ct.Cluster(1, populate=lambda s: ct.write_file(
			os.path.join(s, 'x.bin'), b'y' * 10)) as cl:
		secret_file = os.path.join(cl.root, 'secret')
		write_secret(secret_file, SECRET, 0o600)
		cl.mount(0, [f'--secret-file={secret_file}', '--accept-bearer',
			     '--cache-size=1M', f'--log-file={cl.root}/log'])
		st, _, body = ct.http_request(cl.ports[0], '/v1/files/x.bin',
					      {'Authorization': 'Bearer ' + SECRET})
		c.check('--accept-bearer: "Bearer SECRET" -> 200', st == 200 and body == b'y' * 10,
			f'status {st}')
		st, _, _ = ct.http_request(cl.ports[0], '/v1/files/x.bin',
					   {'Authorization': 'Bearer x' + SECRET})
		c.eq('--accept-bearer: a wrong bearer -> 401', st, 401)
		st, _, _ = ct.http_request(cl.ports[0], '/v1/files/x.bin', auth())
		c.eq('--accept-bearer: signed requests still -> 200', st, 200)
		log = open(f'{cl.root}/log').read()
		c.check('--accept-bearer: the daemon warns once', log.count('--accept-bearer') == 1, log)

	# -o form (fstab): the list's commas escaped as libfuse wants them
	with ct.Cluster(2, populate=lambda s: ct.write_file(
			os.path.join(s, 'x.bin'), b'x' * 10)) as cl:
		sf = os.path.join(cl.root, 'secret')
		write_secret(sf, SECRET, 0o600)
		opt = ('peers=' + '\\,'.join(cl.urls) +
		       f',node=1,secret_file={sf},cache_size=1M')
		rc, out, err = ct.run_coordfs(['-o', opt, cl.src, cl.mnts[1]])
		ok = rc == 0 and ct.is_mounted(cl.mnts[1])
		if ok:
			cl.pids[1] = (ct.find_daemon_pids(cl.mnts[1]) or [None])[0]
			st = cl.stats(1)
			ok = ([n['url'] for n in st['peers']['nodes']] == cl.urls
			      and st['peers']['node'] == 1)
			hs, _, body = ct.http_request(cl.ports[1], '/v1/files/x.bin',
						      auth())
			ok = ok and hs == 200 and body == b'x' * 10
		c.check('-o peers=A\\,B,node=1,secret_file=F mounts node 1 of '
			'that list and serves with the secret', ok,
			f'rc {rc}, stderr {err.strip()!r}')

	with ct.TempDirs() as td:
		ct.write_file(os.path.join(td.src, 'x.bin'), b'x')
		p1, p2 = ct.free_ports(2)
		good = f'http://127.0.0.1:{p1},http://127.0.0.1:{p2}'
		sf = os.path.join(td.root, 'secret')
		write_secret(sf, SECRET, 0o600)
		empty = os.path.join(td.root, 'empty_secret')
		write_secret(empty, '', 0o600)
		cases = [
			('--peers without --node', [f'--peers={good}']),
			('--node out of range', [f'--peers={good}', '--node=2']),
			('--node negative', [f'--peers={good}', '--node=-1']),
			('--node not a number', [f'--peers={good}', '--node=x']),
			('--node with trailing junk', [f'--peers={good}',
						       '--node=1abc']),
			('-o node with trailing junk',
			 ['-o', f'peers=http://127.0.0.1:{p1}', '-o', 'node=0x']),
			('--node without --peers', ['--node=0']),
			('ftp URL', ['--peers=ftp://127.0.0.1:1', '--node=0']),
			('https URL', ['--peers=https://127.0.0.1:1', '--node=0']),
			('URL without port', ['--peers=http://127.0.0.1',
					      '--node=0']),
			('port 99999', ['--peers=http://127.0.0.1:99999',
					'--node=0']),
			('port 0', ['--peers=http://127.0.0.1:0', '--node=0']),
			('URL with a path', [f'--peers=http://127.0.0.1:{p1}/x',
					     '--node=0']),
			('URL with user info',
			 [f'--peers=http://u@127.0.0.1:{p1}', '--node=0']),
			('not a URL', ['--peers=hello', '--node=0']),
			('empty list', ['--peers=', '--node=0']),
			('empty entry', [f'--peers=http://127.0.0.1:{p1},,'
					 f'http://127.0.0.1:{p2}', '--node=0']),
			('duplicate URL', [f'--peers=http://127.0.0.1:{p1},'
					   f'http://127.0.0.1:{p1}', '--node=0']),
			('missing secret file', [f'--peers={good}', '--node=0',
						 '--secret-file=/nonexistent/s']),
			('empty secret file', [f'--peers={good}', '--node=0',
					       f'--secret-file={empty}']),
			('bad --listen', [f'--peers={good}', '--node=0',
					  '--listen=nonsense']),
			('--accept-bearer without --secret-file',
			 [f'--peers={good}', '--node=0', '--accept-bearer']),
			('-o peers with unescaped commas',
			 ['-o', f'peers={good},node=0']),
		]
		for label, args in cases:
			rc, out, err = ct.run_coordfs(args + [td.src, td.mnt])
			lines = [ln for ln in err.splitlines() if ln.strip()]
			c.check(f'{label}: fails with one line, nothing mounted',
				rc not in (0, None) and len(lines) == 1 and
				not ct.is_mounted(td.mnt),
				f'rc {rc}, stderr {err.strip()!r}')
			if ct.is_mounted(td.mnt):
				ct.force_unmount(td.mnt)
		# a port already taken: one line too
		import socket
		with socket.socket() as s:
			s.bind(('127.0.0.1', 0))
			s.listen(1)
			busy = s.getsockname()[1]
			rc, out, err = ct.run_coordfs(
				[f'--peers=http://127.0.0.1:{busy}', '--node=0',
				 td.src, td.mnt])
			lines = [ln for ln in err.splitlines() if ln.strip()]
			c.check('peer port in use: fails with one line, nothing '
				'mounted', rc not in (0, None) and len(lines) == 1
				and not ct.is_mounted(td.mnt),
				f'rc {rc}, stderr {err.strip()!r}')
			if ct.is_mounted(td.mnt):
				ct.force_unmount(td.mnt)


def test_secret_mismatch(c):
	seed = int(time.time()) ^ 77
	rng = random.Random(seed)
	files = {f'd{i % 3}/f{i:02d}.bin': rng.randbytes(rng.randint(100, 60 * KIB))
		 for i in range(24)}

	def populate(src):
		for rel, data in files.items():
			ct.write_file(os.path.join(src, rel), data)

	with ct.Cluster(2, populate=populate) as cl:
		secrets = []
		for k in range(2):
			sf = os.path.join(cl.root, f'secret{k}')
			write_secret(sf, f'{SECRET}-node{k}', 0o600)
			secrets.append(sf)
			cl.mount(k, [f'--secret-file={sf}', '--cache-size=8M',
				     '--chunk-size=64K'])
		owned = [sum(1 for rel in files
			     if ct.unit_owner(cl.urls, rel) == k) for k in range(2)]
		print(f'# files owned per node: {owned}')
		for k in range(2):
			rd = ct.ManyReader([cl.path(k, rel) for rel in sorted(files)])
			res = rd.results(60)
			bad = [(os.path.basename(p), r) for p, r in res.items()
			       if r[0] != 'ok' or r[1] != hashlib.sha256(
				       files[os.path.relpath(p, cl.mnts[k])]).hexdigest()]
			c.check(f'secrets differ: node {k} reads {len(files)} '
				'files with correct bytes', not bad, f'{bad[:3]}')
		for k in range(2):
			st = cl.stats(k)
			other = 1 - k
			c.gt(f'secrets differ: node {k} counts peer errors',
			     st['peers']['errors'], 0)
			c.eq(f'secrets differ: node {k} got no peer bytes',
			     st['peers']['bytes'], 0)
			c.eq(f'secrets differ: node {k} served nothing',
			     st['peers']['served'], 0)
			c.eq(f'secrets differ: node {k} marks node {other} down',
			     st['peers']['nodes'][other]['up'], False)
			c.eq(f'secrets differ: node {k} read every byte from '
			     'SOURCE', st['source']['bytes'],
			     sum(len(d) for d in files.values()))


def test_url_spellings(c):
	"""Nodes that spell the same peer list differently (scheme case, a
	trailing slash) over IPv6 loopback agree on ownership: SOURCE is
	read once per cluster."""
	rng = random.Random(int(time.time()) ^ 5)
	files = {f'u/f{i:02d}.bin': rng.randbytes(rng.randint(100, 50 * KIB))
		 for i in range(30)}

	def populate(src):
		for rel, data in files.items():
			ct.write_file(os.path.join(src, rel), data)

	with ct.Cluster(2, populate=populate) as cl:
		p0, p1 = cl.ports
		spellings = [f'HTTP://[::1]:{p0}/,http://[::1]:{p1}',
			     f'http://[::1]:{p0},Http://[::1]:{p1}/']
		for k in range(2):
			cl.mount(k, ['--cache-size=8M', '--chunk-size=64K'],
				 peers=spellings[k])
		for k in range(2):
			res = ct.ManyReader([cl.path(k, r) for r in sorted(files)]
					    ).results(60)
			bad = [p for p, r in res.items() if r[0] != 'ok' or r[1] !=
			       hashlib.sha256(files[os.path.relpath(
				       p, cl.mnts[k])]).hexdigest()]
			c.check(f'IPv6 peers: node {k} reads every file correctly',
				not bad, f'{bad[:3]}')
		st = [cl.stats(k) for k in range(2)]
		c.eq('IPv6 peers: normalized URLs in peers.nodes',
		     [[n['url'] for n in s['peers']['nodes']] for s in st],
		     [[f'http://[::1]:{p0}', f'http://[::1]:{p1}']] * 2)
		c.eq('IPv6 peers, two spellings: SOURCE read once per cluster',
		     sum(s['source']['bytes'] for s in st),
		     sum(len(d) for d in files.values()))
		c.check('IPv6 peers: both fetched and served, no errors',
			all(s['peers']['fetches'] > 0 and s['peers']['served'] > 0
			    and s['peers']['errors'] == 0 for s in st),
			str([s['peers'] for s in st]))


MANY_CONNS = 1000
MANY_STRANGERS = 100
MANY_MAX_THREADS = 64	# issue #20: threads bounded whatever the connections


def read_answer(sock):
	"""One whole answer on a keep-alive socket: (status, body); the peer
	server's answers always carry Content-Length."""
	buf = b''
	while b'\r\n\r\n' not in buf:
		chunk = sock.recv(65536)
		if not chunk:
			return None, b''
		buf += chunk
	head, _, body = buf.partition(b'\r\n\r\n')
	length = int(re.search(rb'(?i)\r\ncontent-length: *([0-9]+)', head).group(1))
	while len(body) < length:
		chunk = sock.recv(65536)
		if not chunk:
			return None, body
		body += chunk
	return int(head.split(b' ')[1]), body


def test_many_connections(c):
	"""1,000 peers' keep-alive connections on one daemon, all connected
	before the first request (a cluster starting), 100 strangers before
	(silent, or trickling a request line) and 100 more meanwhile: every
	signed request is answered byte-exact, twice on each connection, and
	the daemon's threads (/proc/PID/task) stay within the bound while all
	are open."""
	need = MANY_CONNS + 2 * MANY_STRANGERS + 256
	soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
	if soft < need:
		resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
	soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
	if not c.check(f'{need} descriptors for the test (RLIMIT_NOFILE)', soft >= need,
		       f'soft limit {soft}, hard {hard}'):
		return
	files = make_files(int(time.time()) + 7)
	names = sorted(n for n in files if n.startswith('many/'))

	def populate(src):
		for rel in names:
			ct.write_file(os.path.join(src, rel), files[rel])

	with ct.Cluster(1, populate=populate) as cl:
		secret_file = os.path.join(cl.root, 'secret')
		write_secret(secret_file, SECRET, 0o600)
		cl.mount(0, [f'--secret-file={secret_file}', '--cache-size=8M'])
		port, pid = cl.ports[0], cl.pids[0]
		socks, strangers = [], []
		try:
			for i in range(MANY_STRANGERS):
				s = socket.create_connection(('127.0.0.1', port), timeout=20)
				if i % 2:
					s.sendall(b'GET /v1/fi')
				strangers.append(s)
			for i in range(MANY_CONNS):
				socks.append(socket.create_connection(('127.0.0.1', port), timeout=20))
			bad, threads, dead = [], 0, set()
			for rnd in range(2):
				for i, s in enumerate(socks):
					rel = names[(i + rnd) % len(names)]
					target = '/v1/files/' + rel
					# one client id per connection: 1,000 peers
					sig = ct.peer_signature(SECRET, 'GET', target,
								client_id=0x5ca1e000 + i, n=rnd + 1)
					try:
						s.sendall(f'GET {target} HTTP/1.1\r\nHost: x\r\n'
							  f'Authorization: {sig}\r\n\r\n'.encode())
					except OSError as e:
						dead.add(i)
						bad.append((rnd, i, str(e), 0))
				if rnd == 1:
					for _ in range(MANY_STRANGERS):
						strangers.append(socket.create_connection(('127.0.0.1', port),
											  timeout=20))
				threads = max(threads, len(os.listdir(f'/proc/{pid}/task')))
				for i, s in enumerate(socks):
					rel = names[(i + rnd) % len(names)]
					if i in dead:
						continue
					try:
						st, body = read_answer(s)
					except OSError as e:
						st, body = str(e), b''
					if st != 200 or body != files[rel]:
						dead.add(i)
						bad.append((rnd, i, st, len(body)))
				threads = max(threads, len(os.listdir(f'/proc/{pid}/task')))
			c.check(f'{MANY_CONNS} connections x 2 signed requests: all 200, byte-exact',
				not bad, f'{len(bad)} bad, first {bad[:5]}')
			c.check(f'daemon threads with {MANY_CONNS} connections open: '
				f'{threads} <= {MANY_MAX_THREADS}', 0 < threads <= MANY_MAX_THREADS,
				str(threads))
			st = cl.stats(0)['peers']
			c.check('the server counts the connections open',
				st.get('connections_open', 0) >= MANY_CONNS, str(st))
			c.eq('no request waited for a full queue', st.get('queue_full'), 0)
		finally:
			for s in socks + strangers:
				s.close()


def main():
	c = ct.Checker('peers_protocol', timeout=110)
	c.group(test_server, c)
	c.group(test_command_line, c)
	c.group(test_secret_mismatch, c)
	c.group(test_url_spellings, c)
	c.group(test_many_connections, c)
	c.finish()


if __name__ == '__main__':
	main()
