# SPDX-License-Identifier: MIT
"""Integration test of the disk tier over an S3 bucket (radosgw on loopback).

A bucket mounted with the tier given as -o disk_cache=...,disk_cache_size=...
(the fstab form): the first epoch reads the bucket and fills the tier; after
fusermount3 -u a mount with the same DIR reads 0 SOURCE bytes (and no GET
reaches the endpoint for the data); an object overwritten between mounts (a
new ETag, same size) is dropped as stale and read anew, never served old.
"""

import os
import random
import subprocess
import sys
import tempfile
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402
import s3_fixture as s3f	# noqa: E402

KIB = 1024


def mount(c, label, px, rgw, tier, mnt):
	rc, _, err = ct.run_coordfs(
		['--endpoint=' + px.endpoint, '--no-kernel-cache', 's3://tier/ds', mnt,
		 '-o', f'cache_size=64K,chunk_size=64K,disk_cache={tier},disk_cache_size=64M'])
	return c.check(f'{label}: mounted', rc == 0 and ct.is_mounted(mnt), f'rc={rc} {err.strip()}')


def object_gets(px):
	"""GETs of objects (listings are GETs of the bucket, without a key), the
	mount's one-byte probe aside."""
	return sum(1 for e in px.entries()
		   if e['method'] == 'GET' and e['key'] and not s3f.is_mount_probe(e))


def unmount(mnt):
	pids = ct.find_daemon_pids(mnt)
	subprocess.run(['fusermount3', '-u', mnt], check=False)
	for pid in pids:
		ct.kill_and_wait(pid, 10)


def test_s3_remount_and_etag(c, rgw):
	rgw.create_bucket('tier')
	rng = random.Random(21)
	objects = {f'ds/c{i % 3}/{i:03d}.bin': rng.randbytes(rng.randint(1, 150 * KIB))
		   for i in range(24)}
	rgw.put_many('tier', objects)
	files = {k[len('ds/'):]: v for k, v in objects.items()}
	total = sum(len(v) for v in files.values())
	tier = os.path.join(tempfile.mkdtemp(prefix='coordfs-tier-'), 'tier')
	try:
		with s3f.S3Proxy(rgw.endpoint) as px, ct.TempDirs() as d:
			if not mount(c, 'first mount', px, rgw, tier, d.mnt):
				return
			c.eq('epoch 1 reads the bucket', ct.epoch(c, 'epoch 1', d.mnt, files), total)
			ct.disk_settle(c, 'epoch 1', d.mnt)
			c.eq('nothing refused', ct.disk_stats(d.mnt)['refused'], 0)
			unmount(d.mnt)

			gets = object_gets(px)
			if not mount(c, 'remount', px, rgw, tier, d.mnt):
				return
			c.eq('remount: 0 SOURCE bytes in epoch 1', ct.epoch(c, 'remount', d.mnt, files), 0)
			c.eq('remount: no object GET reached the endpoint', object_gets(px) - gets, 0)
			c.gt('remount: served by the tier', ct.disk_stats(d.mnt)['hits'], 0)
			unmount(d.mnt)

			# Overwritten between mounts: a new ETag, the same size.
			key = next(k for k, v in objects.items() if len(v) > 64 * KIB)
			new = rng.randbytes(len(objects[key]))
			rgw.put('tier', key, new)
			files[key[len('ds/'):]] = new
			if not mount(c, 'after an overwrite', px, rgw, tier, d.mnt):
				return
			got = ct.epoch(c, 'after an overwrite', d.mnt, files)
			c.eq('only the overwritten object is read from SOURCE', got, len(new))
			c.ge('its units are dropped as stale', ct.disk_stats(d.mnt)['dropped_stale'], 1)
			unmount(d.mnt)
	finally:
		shutil.rmtree(os.path.dirname(tier))


def main():
	c = ct.Checker('disk_tier_s3', timeout=280)
	with s3f.RadosGW() as rgw:
		rgw.use_in_this_process()
		c.group(test_s3_remount_and_etag, c, rgw)
	c.finish()


if __name__ == '__main__':
	main()
