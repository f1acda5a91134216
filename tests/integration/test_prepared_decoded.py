# SPDX-License-Identifier: MIT
"""Integration test: the prepared view's decoded tier (coordfs(1),
--prep-decoded-mem) on real mounts, read through PyTorch loaders.

SOURCE holds every image kind of test_prepared.py (JPEG 4:2:0 / 4:2:2 /
4:4:4, progressive, gray, CMYK, EXIF, 3x2, q20, sizes up to 2000 wide; PNG
RGB, RGBA, LA, bilevel, palettes, gray, 16-bit, a PNG named .JPEG) plus
small progressive JPEGs, and undecodable files. Three mounts with the same
--seed: A without the tier (--prep-decoded-mem=0), B with the default tier,
C with a tier of 3 MiB. A job (COORDFS_JOB) reads every file in rrc224,
rrc64, center224 and resize100 for three epochs through ImageFolder +
DataLoader(num_workers=2), then once more file by file. Checks:
  - every sample from B and C (served from the tier or not) is byte for
    byte A's sample of the same version and recipe;
  - in B's last pass each read is a tier hit or a new admission (a JPEG at
    a DCT scale not held yet), and a hit for every file whose samples are
    all decoded at full size (smaller side < 448), i.e. every kind;
  - B's tier holds something and counts hits in fsstat;
  - C's tier never exceeds 3 MiB (decoded_bytes), refuses what does not
    fit, and still serves identical samples;
  - B's share was sized by the daemon (prep.decoded_auto, decoded_mem at
    least 64 MiB), C's is the one given; with --prep-mem=16M the sized
    share is half of it (a hard bound);
  - a sample read through PIL costs one FUSE open and two reads;
  - undecodable files fail with EIO every time and are never admitted;
  - a --prep-decoded-mem over --prep-mem, or unparsable, is refused.
"""

import contextlib
import errno
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402
import test_prepared as tp	# noqa: E402

SEED = 4321
EPOCHS = 3
RECIPES = ['rrc224', 'rrc64', 'center224', 'resize100']
C_SHARE = 3 << 20

# The child: one job reading the mount through ImageFolder + DataLoader,
# then file by file with the tier's counters around each read.
CHILD = r'''
import hashlib, json, os, sys
import torch
from torchvision import datasets

mnt, recipes, epochs = sys.argv[1], sys.argv[2].split(','), int(sys.argv[3])
torch.set_num_threads(1)


def stats():
	return json.loads(os.getxattr(mnt, 'user.coordfs.stats'))['prep']


class Raw:
	"""loader: (path under the recipe, sha256 of the sample)."""
	def __init__(self, base):
		self.base = base

	def __call__(self, path):
		with open(path, 'rb', buffering=0) as f:
			data = f.read(1 << 22)
		return os.path.relpath(path, self.base), hashlib.sha256(data).hexdigest()


out = {'samples': {}, 'probe': {}}
for e in range(epochs):
	for r in recipes:
		base = os.path.join(mnt, 'prepared', r)
		ds = datasets.ImageFolder(os.path.join(base, 'kinds'), loader=Raw(base))
		g = torch.Generator()
		g.manual_seed(e)
		dl = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=True,
						 num_workers=2, generator=g)
		for (rel, digest), _ in dl:
			out['samples'][f'{r}/{rel}/{e}'] = digest
# the last pass: rrc224, next version, one file at a time
base = os.path.join(mnt, 'prepared', 'rrc224')
for path, _ in datasets.ImageFolder(os.path.join(base, 'kinds')).samples:
	before = stats()
	rel, digest = Raw(base)(path)
	after = stats()
	out['samples'][f'rrc224/{rel}/{epochs}'] = digest
	out['probe'][rel] = {k: after[k] - before[k]
			     for k in ('decoded_hits', 'decoded_files', 'decodes')}
print(json.dumps(out))
'''


def make_dataset(root):
	import numpy as np
	kinds = os.path.join(root, 'kinds', 'formats')
	tp.make_formats(kinds)
	rng = np.random.default_rng(3)
	sys.path.insert(0, os.path.join(ct.REPO, 'tools'))
	import gendata	# noqa: E402 - tools/gendata.py
	for name, sub in (('prog_420.jpg', 2), ('prog_444.jpg', 0)):
		gendata.photo_like(rng, 500, 375).save(
			os.path.join(kinds, name), 'JPEG', quality=90,
			progressive=True, subsampling=sub)
	tp.make_bad(os.path.join(root, 'bad'))


def run_job(c, m, job, epochs=EPOCHS, recipes=RECIPES):
	env = dict(os.environ, COORDFS_JOB=job)
	p = subprocess.run(['/usr/bin/python3', '-c', CHILD, m.mnt,
			    ','.join(recipes), str(epochs)],
			   capture_output=True, text=True, env=env, timeout=200)
	if not c.check(f'{job}: the DataLoader job ran', p.returncode == 0,
		       p.stderr[-2000:]):
		return None
	return json.loads(p.stdout.splitlines()[-1])


def min_side(path):
	from PIL import Image
	with Image.open(path) as im:
		return min(im.size)


def compare(c, what, got, ref):
	keys = sorted(got)
	c.eq(f'{what}: the same samples were read as without the tier',
	     keys, sorted(ref))
	diff = [k for k in keys if got[k] != ref.get(k)]
	c.eq(f'{what}: every sample ({len(keys)}) identical to the file path\'s',
	     diff, [])


@contextlib.contextmanager
def tier_mount(c, template, ref, what, opts=()):
	"""Mount with opts, run the job and compare its samples with ref's:
	yields (mount, the job's output or None when it failed)."""
	# --prep-ahead=0: the checks count decodes and tier hits per read,
	# which a decode-ahead thread working meanwhile would move
	with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2',
		       '--prep-ahead=0'] + list(opts),
		      populate=ct.copy_tree_into(template)) as m:
		got = run_job(c, m, 'train')
		if got is not None:
			compare(c, what, got['samples'], ref['samples'])
		yield m, got


def test_tier_identical(c, template, ref):
	with tier_mount(c, template, ref, 'B (default tier)') as (m, got):
		if got is None:
			return
		st = m.stats()['prep']
		c.gt('B: images held in the tier', st['decoded_files'], 0)
		c.gt('B: samples served from the tier', st['decoded_hits'], 0)
		c.check('B: the share sized by the daemon (prep.decoded_auto)',
			st['decoded_auto'] is True, str(st))
		c.ge('B: the sized share is at least the huge-page minimum',
		     st['decoded_mem'], 64 << 20)
		c.le('B: the tier within its share',
		     st['decoded_bytes'], st['decoded_mem'])
		c.eq('B: nothing refused by the default tier',
		     st['decoded_refused'], 0)
		kinds = os.path.join(template, 'kinds')
		not_hit = []
		for rel, d in sorted(got['probe'].items()):
			c.check(f'B last pass {rel}: a tier hit or a new admission',
				d['decoded_hits'] + d['decoded_files'] == 1
				and d['decodes'] == 1, str(d))
			src = os.path.join(template, rel)
			if not os.path.exists(src):
				src = os.path.join(kinds, rel)
			if d['decoded_hits'] != 1 and min_side(src) < 448:
				not_hit.append(rel)
		c.eq('B last pass: every full-size file (all kinds) was a tier hit',
		     not_hit, [])
		r = subprocess.run([ct.fsstat_bin(), m.mnt], capture_output=True,
				   text=True, timeout=30)
		c.check('fsstat shows the tier with its hits',
			'decoded  held' in r.stdout
			and f'hits {st["decoded_hits"]}  ' in r.stdout, r.stdout[-800:])
		test_bad_never_admitted(c, m)
		test_requests_per_sample(c, m)


def test_requests_per_sample(c, m):
	"""A sample read as ImageFolder's loader does (Python's buffered file,
	PIL) costs one FUSE open and two reads: its bytes in one (st_blksize
	covers the sample), then end of file."""
	from PIL import Image
	root = os.path.join(m.mnt, 'prepared', 'rrc224', 'kinds', 'formats')
	files = sorted(os.listdir(root))[:6]
	before = m.stats()['prep']
	for name in files:
		with open(os.path.join(root, name), 'rb') as f:
			Image.open(f).convert('RGB')
	after = m.stats()['prep']
	c.eq('one FUSE open per sample (prep.opens)',
	     after['opens'] - before['opens'], len(files))
	c.eq('two FUSE reads per sample (prep.reads): the bytes, then EOF',
	     after['reads'] - before['reads'], 2 * len(files))


def test_bad_never_admitted(c, m):
	before = m.stats()['prep']
	for name in tp.BAD:
		for _ in range(2):
			for recipe in ('rrc224', 'center224'):
				path = os.path.join(m.mnt, 'prepared', recipe, 'bad',
						    name)
				c.errno_of(f'{recipe}/bad/{name}: EIO',
					   lambda p=path: ct.read_bytes(p), errno.EIO)
	after = m.stats()['prep']
	c.eq('bad files: nothing admitted to the tier',
	     (after['decoded_files'], after['decoded_bytes']),
	     (before['decoded_files'], before['decoded_bytes']))
	c.ge('bad files: every failure counted in prep.errors',
	     after['errors'] - before['errors'], 2 * len(tp.BAD))


def test_share(c, template, ref):
	with tier_mount(c, template, ref, 'C (3 MiB tier)',
			[f'--prep-decoded-mem={C_SHARE}']) as (m, got):
		if got is None:
			return
		st = m.stats()['prep']
		c.le('C: the tier never exceeds --prep-decoded-mem',
		     st['decoded_bytes'], C_SHARE)
		c.gt('C: the tier filled up to its share',
		     st['decoded_bytes'], C_SHARE // 2)
		c.gt('C: decodes refused once it was full',
		     st['decoded_refused'], 0)
		c.gt('C: what it holds is served', st['decoded_hits'], 0)
		c.eq('C: the share given, not sized (prep.decoded_mem, decoded_auto)',
		     (st['decoded_mem'], st['decoded_auto']), (C_SHARE, False))


def test_sized_within_prep_mem(c, template):
	"""--prep-mem given is a hard bound on the sized share: 16 MiB cannot
	hold the 64 MiB minimum within its three quarters, so the tier gets
	half, as before."""
	with ct.Mount(['--prepared', '--prep-mem=16M'],
		      populate=ct.copy_tree_into(template)) as m:
		st = m.stats()['prep']
		c.eq('--prep-mem=16M: the sized share is half of it',
		     (st['decoded_mem'], st['decoded_auto']), (8 << 20, True))


def test_option_errors(c, template):
	for args, what in ((['--prep-mem=64M', '--prep-decoded-mem=65M'],
			    'more than --prep-mem'),
			   (['--prep-decoded-mem=lots'], 'unparsable')):
		with ct.TempDirs(prefix='coordfs-decoded-opt-') as t:
			rc, _, err = ct.run_coordfs(['--prepared'] + args +
						    [t.src, t.mnt])
			c.check(f'--prep-decoded-mem {what}: refused in one line',
				rc not in (0, None) and 'prep-decoded-mem' in err
				and len(err.strip().splitlines()) == 1, err)
			c.check(f'--prep-decoded-mem {what}: nothing mounted',
				not ct.is_mounted(t.mnt))


def main():
	c = ct.Checker('test_prepared_decoded', timeout=280)
	with ct.TempDirs(prefix='coordfs-decoded-data-') as data:
		template = os.path.join(data.root, 'dataset')
		make_dataset(template)
		with ct.Mount(['--prepared', f'--seed={SEED}', '--prep-threads=2',
			       '--prep-decoded-mem=0', '--prep-ahead=0'],
			      populate=ct.copy_tree_into(template)) as a:
			ref = run_job(c, a, 'train')
			if ref is not None:
				st = a.stats()['prep']
				c.eq('A: no tier with --prep-decoded-mem=0',
				     (st['decoded_files'], st['decoded_hits'],
				      st['decoded_bytes']), (0, 0, 0))
		if ref is not None:
			c.group(test_tier_identical, c, template, ref)
			c.group(test_share, c, template, ref)
		c.group(test_sized_within_prep_mem, c, template)
		c.group(test_option_errors, c, template)
	c.finish()


if __name__ == '__main__':
	main()
