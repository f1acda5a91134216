# SPDX-License-Identifier: MIT
"""coordfs over an S3 bucket (s3://BUCKET[/PREFIX]) against a real radosgw.

One throwaway radosgw (s3_fixture.RadosGW) for the whole script; every
mount goes through the fault proxy (tools/s3/s3proxy.py), whose request
log counts the GETs of each object. Checks:

- ImageFolder over s3://data/ds/train lists the same classes and samples
  as the local copy that was uploaded (tools/gendata.py JPEGs), and every
  file reads back byte for byte; 1100 more keys in nested prefixes list
  exactly (several listing pages); keys that cannot be paths are left out
  and counted in source.skipped_keys, directory markers ("dir/") are
  directories, not skipped; modes are 0444/0555, owned by the
  mounting user; the prepared view over S3 serves valid PPMs.
- An object overwritten after the mount (same size, new bytes) gives EIO,
  and the daemon serves the other files on.
- The -o forms of the S3 options mount the same; --no-sign-request reads
  a public bucket with no credentials at all in the environment.
- A wrong secret or a missing bucket: the mount fails with one line naming
  the cause (never the secret), nothing mounted.
- --prefill fills exactly the budget, fetching each object at most once;
  reading everything afterwards fetches each object exactly once in all.
- Three nodes with --peers over one bucket, every node reading every
  file: each object is fetched from the bucket once per cluster; the same
  with --prefill on every node: each owner prefills only its own objects,
  so the cluster fetches each object once and reads fetch nothing more.
- A 20 MiB object read sequentially in 128 KiB reads with the cache too
  small to admit it: the readahead window makes it a few large GETs that
  cover the object exactly once; a reader that seeks every time gets one
  GET of exactly each read.
- The endpoint going down mid-epoch: a read of an uncached file fails
  with EIO only after retries (source.retries grows), cached files still
  read, the daemon stays up, and the same file reads again once the
  endpoint is back.

radosgw is installed by tools/install-deps.sh: without it this test fails.
"""

import hashlib
import os
import random
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402
import s3_fixture as s3f	# noqa: E402

KIB = 1024
MIB = 1024 * KIB
EIO = 5


is_mount_probe = s3f.is_mount_probe


def obj_gets(proxy, prefix):
	"""{key: number of object GETs} seen by the proxy under prefix, the
	mount's probe left out (the tests read whole objects, never 1 byte)."""
	counts = {}
	for e in proxy.entries():
		if e['method'] == 'GET' and e['key'].startswith(prefix) and not is_mount_probe(e):
			counts[e['key']] = counts.get(e['key'], 0) + 1
	return counts


def mount_s3(c, d, url, proxy, opts=(), env=None, mnt=None):
	"""Mount url at d.mnt (or mnt) through proxy; True when it came up."""
	mnt = mnt or d.mnt
	rc, out, err = ct.run_coordfs(['--endpoint=' + proxy.endpoint] + list(opts) +
				      [url, mnt], env=env)
	return c.check(f'mount {url} {" ".join(opts)}', rc == 0 and ct.is_mounted(mnt),
		       f'rc={rc} {err.strip()}')


def upload_tree(rgw, bucket, prefix, root):
	objects = {}
	for dirpath, _, files in os.walk(root):
		for name in files:
			full = os.path.join(dirpath, name)
			with open(full, 'rb') as f:
				objects[prefix + os.path.relpath(full, root)] = f.read()
	rgw.put_many(bucket, objects)
	return objects


def test_dataset(c, rgw):
	from torchvision import datasets
	local = tempfile.mkdtemp(prefix='coordfs-s3-local-')
	try:
		ct.gendata(local, classes=3, per_class=8, seed=5)
		rgw.create_bucket('data')
		upload_tree(rgw, 'data', 'ds/', local)
		rng = random.Random(7)
		many = {f'ds/many/n{i % 9}/sub{i % 4}/k{i:05d}.bin': rng.randbytes(rng.randint(0, 300))
			for i in range(1100)}
		rgw.put_many('data', many)
		# Keys that cannot be paths: an empty component, and a key that is
		# also the directory of another.
		rgw.put('data', 'ds/bad//x.bin', b'1')
		rgw.put('data', 'ds/fd', b'file')
		rgw.put('data', 'ds/fd/inner.bin', b'inner')
		# Directory markers ("Create folder", s3fs): directories, not skipped.
		rgw.put('data', 'ds/train/', b'')
		rgw.put('data', 'ds/marked/empty/', b'')
		with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
			if not mount_s3(c, d, 's3://data/ds', px, ['--cache-size=64M', '--prepared']):
				return
			mine = datasets.ImageFolder(os.path.join(d.mnt, 'train'))
			ref = datasets.ImageFolder(os.path.join(local, 'train'))
			c.eq('ImageFolder classes', mine.classes, ref.classes)
			rel = lambda ds, root: [(os.path.relpath(p, root), t) for p, t in ds.samples]
			c.eq('ImageFolder samples', rel(mine, os.path.join(d.mnt, 'train')),
			     rel(ref, os.path.join(local, 'train')))
			c.check('dataset has samples', len(ref.samples) == 24, str(len(ref.samples)))
			same = all(ct.read_bytes(os.path.join(d.mnt, 'train', r)) ==
				   ct.read_bytes(os.path.join(local, 'train', r))
				   for r, _ in rel(ref, os.path.join(local, 'train')))
			c.check('every image reads identical bytes', same)
			got = {}
			for dirpath, _, files in os.walk(os.path.join(d.mnt, 'many')):
				for name in files:
					full = os.path.join(dirpath, name)
					got['ds/' + os.path.relpath(full, d.mnt)] = full
			c.eq('1100 nested keys listed exactly', sorted(got), sorted(many))
			c.check('nested keys read back',
				all(ct.read_bytes(got[k]) == v for k, v in list(many.items())[:200]))
			st = os.stat(os.path.join(d.mnt, 'fd', 'inner.bin'))
			c.eq('object mode 0444', stat.S_IMODE(st.st_mode), 0o444)
			c.eq('object owner is the mounting user', st.st_uid, os.getuid())
			c.eq('directory "fd" (its file key left out)',
			     stat.S_ISDIR(os.stat(os.path.join(d.mnt, 'fd')).st_mode), True)
			c.eq('directory mode 0555',
			     stat.S_IMODE(os.stat(os.path.join(d.mnt, 'many')).st_mode), 0o555)
			c.check('bad key not shown', not os.path.exists(os.path.join(d.mnt, 'bad')))
			c.eq('a marker with nothing under it is an empty directory',
			     os.listdir(os.path.join(d.mnt, 'marked', 'empty')), [])
			s = ct.stats(d.mnt)
			c.eq('source.kind', s['source']['kind'], 's3')
			c.eq('source.skipped_keys', s['source']['skipped_keys'], 2)
			c.eq('source.errors', s['source']['errors'], 0)
			c.check('source.requests counted', s['source']['requests'] >= s['source']['reads'] > 0,
				str(s['source']))
			# The prepared view over S3.
			prep = datasets.ImageFolder(os.path.join(d.mnt, 'prepared', 'center64', 'train'))
			c.eq('prepared ImageFolder samples',
			     rel(prep, os.path.join(d.mnt, 'prepared', 'center64', 'train')),
			     rel(ref, os.path.join(local, 'train')))
			data = ct.read_bytes(prep.samples[0][0])
			magic, w, h, maxval, hl = ct.parse_ppm_header(data)
			c.eq('prepared sample is a 64x64 PPM', (magic, w, h, maxval, len(data) - hl),
			     ('P6', 64, 64, 255, 64 * 64 * 3))
	finally:
		ct._rmtree(local)


def test_overwritten(c, rgw):
	rgw.create_bucket('overwrite')
	rng = random.Random(8)
	a, b = rng.randbytes(5000), rng.randbytes(6000)
	rgw.put_many('overwrite', {'k/a.bin': a, 'k/b.bin': b})
	with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
		if not mount_s3(c, d, 's3://overwrite/k', px, ['--cache-size=1M']):
			return
		rgw.put('overwrite', 'k/a.bin', rng.randbytes(len(a)))
		r = ct.read_in_child(os.path.join(d.mnt, 'a.bin'), timeout=60)
		c.eq('overwritten object: EIO', r[:2], ('errno', EIO))
		r = ct.read_in_child(os.path.join(d.mnt, 'b.bin'), timeout=60)
		c.eq('other object still reads', r, ('ok', hashlib.sha256(b).hexdigest(), len(b)))
		c.ge('source.errors counts it', ct.stats(d.mnt)['source']['errors'], 1)


def test_o_forms_and_anonymous(c, rgw):
	rgw.create_bucket('public', public_read=True)
	rng = random.Random(14)
	objs = {'pub/a.bin': rng.randbytes(2000), 'pub/d/b.bin': rng.randbytes(3000)}
	rgw.put_many('public', objs)
	anon = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
	anon['AWS_EC2_METADATA_DISABLED'] = 'true'
	with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
		rc, out, err = ct.run_coordfs(
			['-o', f'endpoint={px.endpoint},s3_addressing=path,region={rgw.region},'
			 'no_sign_request,cache_size=1M', 's3://public/pub', d.mnt], env=anon)
		if not c.check('anonymous mount with -o forms', rc == 0 and ct.is_mounted(d.mnt),
			       f'rc={rc} {err.strip()}'):
			return
		for key, data in objs.items():
			c.eq(f'anonymous read of {key}', ct.read_bytes(os.path.join(d.mnt, key[4:])), data)
		signed = [e for e in px.entries() if e['key'].startswith('pub/')]
		probes = [e for e in signed if is_mount_probe(e)]
		c.eq('one probe GET at mount', len(probes), 1)
		c.check('object GETs went through the proxy',
			len(signed) - len(probes) == len(objs), str(signed))
	with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
		rc, out, err = ct.run_coordfs(['s3://creds', d.mnt, '-o',
					       f'endpoint={px.endpoint},profile=nosuch'], env=anon)
		c.check('no credentials for a private bucket: fails in one line',
			rc not in (0, None) and len(err.strip().splitlines()) == 1, repr(err))
		c.check('no credentials: nothing mounted', not ct.is_mounted(d.mnt))


def test_bad_credentials(c, rgw):
	rgw.create_bucket('creds')
	rgw.put('creds', 'x.bin', b'x')
	wrong = 'wrong-' + rgw.secret_key[::-1]
	with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
		for label, url, env in [
			('wrong secret', 's3://creds', rgw.env(AWS_SECRET_ACCESS_KEY=wrong)),
			('missing bucket', 's3://no-such-bucket/p', rgw.env()),
		]:
			rc, out, err = ct.run_coordfs(['--endpoint=' + px.endpoint, url, d.mnt],
						      env=env)
			lines = [ln for ln in err.splitlines() if ln.strip()]
			c.check(f'{label}: exits non-zero', rc not in (0, None), f'rc={rc}')
			c.check(f'{label}: one line', len(lines) == 1, repr(err))
			want = 'access denied' if label == 'wrong secret' else 'no such bucket'
			c.check(f'{label}: names the cause', want in err.lower(), repr(err))
			c.check(f'{label}: secret not shown', wrong not in err and wrong not in out)
			c.check(f'{label}: nothing mounted', not ct.is_mounted(d.mnt))


def test_prefill(c, rgw):
	rgw.create_bucket('prefill')
	size, n, fit = 16 * KIB, 30, 10
	rng = random.Random(9)
	objs = {f'p/c{i % 3}/o{i:02d}.bin': rng.randbytes(size) for i in range(n)}
	rgw.put_many('prefill', objs)
	with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
		if not mount_s3(c, d, 's3://prefill/p', px, [f'--cache-size={fit * size}', '--prefill']):
			return
		ct.wait_until(lambda: not ct.stats(d.mnt)['prefill']['running'], 120)
		s = ct.stats(d.mnt)
		gets = obj_gets(px, 'p/')
		c.eq('prefill: cache full to the byte', s['cache']['used_bytes'], fit * size)
		c.eq('prefill: done_bytes == budget', s['prefill']['done_bytes'], fit * size)
		c.eq('prefill: objects fetched', len(gets), fit)
		c.eq('prefill: each at most once', max(gets.values(), default=0), 1)
		for key, data in objs.items():
			if not c.check(f'{key} reads back', ct.read_bytes(
					os.path.join(d.mnt, key[2:])) == data):
				break
		gets = obj_gets(px, 'p/')
		c.eq('after reading all: every object fetched', len(gets), n)
		c.eq('after reading all: each exactly once', max(gets.values()), 1)


def test_cluster(c, rgw):
	rgw.create_bucket('cluster')
	rng = random.Random(10)
	objs = {f'c/d{i % 5}/f{i:03d}.bin': rng.randbytes(rng.randint(1 * KIB, 120 * KIB))
		for i in range(45)}
	rgw.put_many('cluster', objs)
	total = sum(len(v) for v in objs.values())
	with s3f.S3Proxy(rgw.endpoint) as px, ct.Cluster(3) as cl:
		cl.src = 's3://cluster/c'	# SOURCE for every node
		for k in range(3):
			cl.mount(k, ['--endpoint=' + px.endpoint, f'--cache-size={total}'])
		keys = sorted(objs)
		for k in range(3):	# epoch 1: node k reads shard k, then everything
			order = [x for i, x in enumerate(keys) if i % 3 == k] + keys
			for key in order:
				if not c.check(f'node {k} reads {key}',
					       ct.read_bytes(cl.path(k, key[2:])) == objs[key]):
					return
		gets = obj_gets(px, 'c/')
		c.eq('cluster: every object fetched', len(gets), len(objs))
		c.eq('cluster: each object fetched once', max(gets.values()), 1)
		c.eq('cluster: sum of source.bytes == dataset',
		     sum(cl.stats(k)['source']['bytes'] for k in range(3)), total)


def test_cluster_prefill(c, rgw):
	rgw.create_bucket('clusterprefill')
	rng = random.Random(13)
	objs = {f'q/d{i % 4}/f{i:03d}.bin': rng.randbytes(rng.randint(1 * KIB, 90 * KIB))
		for i in range(36)}
	rgw.put_many('clusterprefill', objs)
	total = sum(len(v) for v in objs.values())
	with s3f.S3Proxy(rgw.endpoint) as px, ct.Cluster(3) as cl:
		cl.src = 's3://clusterprefill/q'
		for k in range(3):
			cl.mount(k, ['--endpoint=' + px.endpoint, f'--cache-size={total}', '--prefill'])
		for k in range(3):
			c.check(f'node {k}: prefill finished', ct.wait_until(
				lambda: not cl.stats(k)['prefill']['running'], 120))
		gets = obj_gets(px, 'q/')
		c.eq('prefill: every object fetched by some owner', len(gets), len(objs))
		c.eq('prefill: each object fetched once in the cluster', max(gets.values()), 1)
		c.eq('prefill: done_bytes add up to the dataset',
		     sum(cl.stats(k)['prefill']['done_bytes'] for k in range(3)), total)
		for k in range(3):
			for key in sorted(objs):
				if not c.check(f'node {k} reads {key}',
					       ct.read_bytes(cl.path(k, key[2:])) == objs[key]):
					return
		c.eq('reading everything everywhere fetched nothing more',
		     obj_gets(px, 'q/'), gets)


def ranges_of(proxy, key):
	"""[(first, last)] byte ranges of the GETs of key, in order."""
	out = []
	for e in proxy.entries():
		if e['method'] == 'GET' and e['key'] == key and e['range']:
			a, b = e['range'].split('=', 1)[1].split('-')
			out.append((int(a), int(b)))
	return out


def test_readahead(c, rgw):
	rgw.create_bucket('readahead')
	rng = random.Random(12)
	big = rng.randbytes(20 << 20)
	rgw.put_many('readahead', {'r/seq.bin': big, 'r/rand.bin': big})
	piece = 128 * KIB
	with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
		# --no-kernel-cache: the daemon's own readahead is what is measured,
		# so each read() must reach it as issued (the kernel's page cache
		# would merge and read ahead on its own).
		if not mount_s3(c, d, 's3://readahead/r', px,
				['--cache-size=1M', '--no-kernel-cache']):
			return
		got = bytearray()
		reads = 0
		with open(os.path.join(d.mnt, 'seq.bin'), 'rb', buffering=0) as f:
			while True:
				b = f.read(piece)
				if not b:
					break
				got += b
				reads += 1
		c.check('sequential read equals the object', bytes(got) == big)
		r = sorted(ranges_of(px, 'r/seq.bin'))
		# (ideally ~6 GETs as the window grows to 8 MiB; a loaded machine
		# may deliver reads out of order, and each such seek restarts the
		# window at 1 MiB)
		c.check('sequential: far fewer GETs than reads',
			0 < len(r) <= reads // 4, f'{len(r)} GETs for {reads} reads')
		# The kernel's own read-ahead (1 MiB) can send a read that straddles
		# a fetch still on its way, so a few KiB may come twice; the window
		# must still cover the object without gaps and fetch it about once.
		fetched = sum(b - a + 1 for a, b in r)
		c.check('sequential: GETs cover the whole object',
			_covers(r, len(big)), str(r[:6]))
		c.check('sequential: bytes fetched <= 1.25x the object',
			fetched <= len(big) * 5 // 4, f'{fetched} bytes for {len(big)}')
		px.clear_log()
		offsets = [rng.randrange(0, len(big) // piece) * piece for _ in range(30)]
		ok = True
		with open(os.path.join(d.mnt, 'rand.bin'), 'rb', buffering=0) as f:
			last = None
			for off in offsets:
				if off == last:
					continue
				f.seek(off)
				ok &= f.read(piece) == big[off:off + piece]
				last = off
		c.check('random reads equal the object', ok)
		r = ranges_of(px, 'r/rand.bin')
		# The kernel may widen a cold read on its own (its read-ahead), but
		# a daemon window starts at 1 MiB: none may appear for a reader
		# that seeks every time.
		c.check('random: no readahead window (every GET < 1 MiB, one per read at most)',
			len(r) >= 1 and all(b - a + 1 < MIB for a, b in r) and
			len(r) <= len(set(offsets)), str(sorted(r)[:8]))


def _covers(ranges, size):
	"""Whether the inclusive ranges cover [0, size) with no gap."""
	pos = 0
	for a, b in sorted(ranges):
		if a > pos:
			return False
		pos = max(pos, b + 1)
	return pos >= size


def test_outage(c, rgw):
	rgw.create_bucket('out')
	rng = random.Random(11)
	objs = {f'o/f{i}.bin': rng.randbytes(3000 + i) for i in range(6)}
	rgw.put_many('out', objs)
	with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
		if not mount_s3(c, d, 's3://out/o', px, ['--cache-size=1M']):
			return
		pids = ct.find_daemon_pids(d.mnt)
		c.eq('f0 reads (cached)', ct.read_bytes(os.path.join(d.mnt, 'f0.bin')), objs['o/f0.bin'])
		r0 = ct.stats(d.mnt)['source']['retries']
		px.down()
		r = ct.read_in_child(os.path.join(d.mnt, 'f1.bin'), timeout=120)
		c.eq('endpoint down: EIO', r[:2], ('errno', EIO))
		c.gt('endpoint down: retried first', ct.stats(d.mnt)['source']['retries'], r0)
		c.check('daemon still up', pids and all(ct.pid_alive(p) for p in pids), str(pids))
		c.eq('cached file still reads while down',
		     ct.read_bytes(os.path.join(d.mnt, 'f0.bin')), objs['o/f0.bin'])
		px.up()
		# a read within a second of a passing failure shares it (the
		# kernel re-issues a failed read at once): ask after that
		time.sleep(1.1)
		r = ct.read_in_child(os.path.join(d.mnt, 'f1.bin'), timeout=120)
		want = objs['o/f1.bin']
		c.eq('endpoint back: the same file reads',
		     r, ('ok', hashlib.sha256(want).hexdigest(), len(want)))


def main():
	c = ct.Checker('s3', timeout=580)
	with s3f.RadosGW() as rgw:
		# Children (coordfs) take the keys from the environment.
		rgw.use_in_this_process()
		c.group(test_bad_credentials, c, rgw)
		c.group(test_o_forms_and_anonymous, c, rgw)
		c.group(test_overwritten, c, rgw)
		c.group(test_outage, c, rgw)
		c.group(test_prefill, c, rgw)
		c.group(test_readahead, c, rgw)
		c.group(test_cluster, c, rgw)
		c.group(test_cluster_prefill, c, rgw)
		c.group(test_dataset, c, rgw)
	c.finish()


if __name__ == '__main__':
	main()
