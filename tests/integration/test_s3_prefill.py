#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""--prefill over S3 is not starved by readers that keep missing the cache.

Regression test for what tools/bench/s3 found: prefill waited while any
reader was missing the cache, so with a DataLoader's workers reading a
half-cached dataset (always someone missing) it fetched 62 MiB in 48 s
instead of filling the cache in seconds. For S3, which serves many
requests at once, prefill now waits only when readers would otherwise
queue for a connection.

A real radosgw (tools/s3/rgw-up.sh) behind tools/s3/s3proxy.py: every
request delayed 200 ms, and the one object a reader opens right after the
mount delayed 15 s, so a reader misses the cache for the whole test. While
it waits, the prefill must fetch every other object (done_bytes reaches
them all), and afterwards every object reads back with its own bytes, each
fetched from the bucket exactly once.
"""

import hashlib
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct  # noqa: E402
import s3_fixture as s3f  # noqa: E402

BUCKET = 'prefill'
SLOW = 'slow.bin'
SLOW_MS = 15000  # under the S3 client's 30 s request timeout
NFAST = 120
SIZE = 16 << 10


def main():
	ct.require_fuse()
	c = ct.Checker('s3_prefill', timeout=240)
	rng = random.Random(7)
	objs = {'d%d/%03d.bin' % (i % 4, i): rng.randbytes(SIZE) for i in range(NFAST)}
	objs[SLOW] = rng.randbytes(SIZE)
	fast_bytes = SIZE * NFAST
	with s3f.RadosGW() as rgw, ct.TempDirs('coordfs-s3pf-') as td:
		rgw.create_bucket(BUCKET)
		rgw.put_many(BUCKET, objs)
		with s3f.S3Proxy(rgw.endpoint, delay_ms=200) as px:
			px.set_delay(SLOW_MS, key=SLOW)
			rc, _, err = ct.run_coordfs(['--prefill', '--cache-size=64M',
						     '--endpoint=' + px.endpoint,
						     's3://' + BUCKET, td.mnt], env=rgw.env())
			c.eq('mount with --prefill', rc, 0)
			if rc != 0:
				print('# ' + err.strip())
				return c.finish()
			got = {}

			def slow_reader():
				with open(os.path.join(td.mnt, SLOW), 'rb') as f:
					got[SLOW] = f.read()

			t = threading.Thread(target=slow_reader, daemon=True)
			t.start()
			done = ct.wait_until(lambda: ct.stats(td.mnt)['prefill']['done_bytes'] >= fast_bytes, 20)
			st = ct.stats(td.mnt)
			c.check('prefill fetched every other object while a reader kept missing',
				done, st['prefill'])
			c.check('... and that reader was still waiting for its object all along',
				t.is_alive())
			t.join(SLOW_MS / 1000 + 30)
			c.check('the slow object arrived, its bytes right', got.get(SLOW) == objs[SLOW])
			wrong = [k for k, v in objs.items() if k != SLOW and
				 hashlib.sha256(open(os.path.join(td.mnt, k), 'rb').read()).digest() !=
				 hashlib.sha256(v).digest()]
			c.eq('every prefilled object reads back with its own bytes', wrong, [])
			gets = {}
			for e in px.entries():
				# the mount's one-byte probe of signed GETs is not a fetch
				if e['method'] == 'GET' and e['key'] in objs and not s3f.is_mount_probe(e):
					gets[e['key']] = gets.get(e['key'], 0) + 1
			twice = {k: n for k, n in gets.items() if n != 1 and k != SLOW}
			c.eq('each fast object was fetched from the bucket once', (len(gets) - (SLOW in gets), twice),
			     (NFAST, {}))
			st = ct.stats(td.mnt)
			c.eq('prefill finished', st['prefill']['running'], False)
	return c.finish()


if __name__ == '__main__':
	sys.exit(main())
