# SPDX-License-Identifier: MIT
"""Integration test: unchanged PyTorch ImageFolder code over a coordfs mount.

Generates ~40 JPEGs of varied sizes and modes in a few class directories
with PIL, then loads them with torchvision.datasets.ImageFolder and a
DataLoader (2 workers) once from SOURCE and twice from the mount: classes,
sample lists (relative paths), labels and tensors must be identical, and
the second epoch must be served from the coordfs cache (stats), with
--no-kernel-cache so that every read reaches the daemon. With the default
(kernel page cache on) an epoch reading every image twice gives SOURCE's
tensors both times, with opens skipped.
"""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

CLASSES = ['ant', 'bee', 'cat dog', 'dür']
PER_CLASS = 10


def populate_images(src):
	from PIL import Image
	rng = random.Random(2024)
	for ci, cls in enumerate(CLASSES):
		d = os.path.join(src, 'train', cls)
		os.makedirs(d)
		for i in range(PER_CLASS):
			w, h = rng.randrange(24, 200), rng.randrange(24, 200)
			mode = 'L' if i % 5 == 4 else 'RGB'
			bands = 1 if mode == 'L' else 3
			# smooth gradient plus noise so JPEG sizes vary
			data = bytearray(rng.randbytes(w * h * bands))
			for k in range(0, len(data), 3):
				data[k] = (data[k] // 4 + (k // bands) % w
					   + ci * 40) % 256
			img = Image.frombytes(mode, (w, h), bytes(data))
			ext = '.JPEG' if i % 3 == 0 else '.jpg'
			img.save(os.path.join(d, f'img_{i:02d}{ext}'),
				 'JPEG', quality=rng.randrange(50, 96))
	# not an image: ImageFolder must skip it on both sides
	with open(os.path.join(src, 'train', 'ant', 'README.txt'), 'w') as f:
		f.write('not an image\n')


def make_loader(root):
	import torch
	from torchvision import datasets, transforms
	tf = transforms.Compose([transforms.Resize((48, 48)),
				 transforms.ToTensor()])
	ds = datasets.ImageFolder(os.path.join(root, 'train'), transform=tf)
	loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2,
					     shuffle=False)
	return ds, loader


def epoch(loader):
	images, labels = [], []
	for x, y in loader:
		images.append(x)
		labels.append(y)
	return images, labels


def same_batches(a, b):
	import torch
	return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_imagefolder(c):
	import torch
	torch.set_num_threads(1)
	# --no-kernel-cache: epoch 2 is checked against the daemon's counters
	# (an open and a cache hit per image), which the kernel's page cache
	# would answer instead.
	with ct.Mount(['--cache-size=64M', '--no-kernel-cache'],
		      populate=populate_images) as m:
		ds_src, ld_src = make_loader(m.src)
		ds_mnt, ld_mnt = make_loader(m.mnt)
		c.eq('classes equal', ds_mnt.classes, ds_src.classes)
		c.eq('class_to_idx equal', ds_mnt.class_to_idx,
		     ds_src.class_to_idx)
		rel_src = [(os.path.relpath(p, m.src), y)
			   for p, y in ds_src.samples]
		rel_mnt = [(os.path.relpath(p, m.mnt), y)
			   for p, y in ds_mnt.samples]
		c.eq('sample list (relative paths, labels) equal', rel_mnt,
		     rel_src)
		c.eq('number of samples', len(ds_mnt), len(CLASSES) * PER_CLASS)

		img_src, lab_src = epoch(ld_src)
		s0 = m.stats()
		img_m1, lab_m1 = epoch(ld_mnt)
		s1 = m.stats()
		c.check('epoch 1: labels equal SOURCE',
			same_batches(lab_m1, lab_src))
		c.check('epoch 1: image tensors equal SOURCE (torch.equal)',
			same_batches(img_m1, img_src))
		total = sum(os.path.getsize(p) for p, _ in ds_src.samples)
		c.gt('epoch 1: cache misses > 0',
		     s1['cache']['misses'] - s0['cache']['misses'], 0)
		c.eq('epoch 1: source.bytes == bytes of all images',
		     s1['source']['bytes'] - s0['source']['bytes'], total)

		for p, _ in ds_mnt.samples:
			ct.drop_page_cache(p)
		img_m2, lab_m2 = epoch(ld_mnt)
		s2 = m.stats()
		c.check('epoch 2: labels equal SOURCE',
			same_batches(lab_m2, lab_src))
		c.check('epoch 2: image tensors equal SOURCE (torch.equal)',
			same_batches(img_m2, img_src))
		c.ge('epoch 2: cache hits grew by >= one per image',
		     s2['cache']['hits'] - s1['cache']['hits'], len(ds_mnt))
		c.eq('epoch 2: no new misses', s2['cache']['misses'],
		     s1['cache']['misses'])
		c.eq('epoch 2: nothing read from SOURCE',
		     s2['source']['bytes'], s1['source']['bytes'])
		c.ge('epoch 2: fuse.opens grew by >= one per image',
		     s2['fuse']['opens'] - s1['fuse']['opens'], len(ds_mnt))


def test_imagefolder_kernel_cache(c):
	"""The default (kernel page cache on, opens skipped): an epoch that
	reads every image twice gets the same tensors as SOURCE both times,
	and the same bytes as SOURCE on a second raw read with the pages kept."""
	import torch
	torch.set_num_threads(1)
	with ct.Mount(['--cache-size=64M'], populate=populate_images) as m:
		ds_src, _ = make_loader(m.src)
		ds_mnt, _ = make_loader(m.mnt)
		n = len(ds_src)
		c.eq('default: number of samples', len(ds_mnt), n)
		# ImageFolder lists with scandir's file types: the listing takes
		# no file's attributes (they come at each file's first lookup).
		s0 = m.stats()
		c.eq('ImageFolder listing: no file attributes taken',
		     s0['namespace']['attrs_known'], 0)
		twice = list(range(n)) + list(range(n))
		loader = torch.utils.data.DataLoader(
			torch.utils.data.Subset(ds_mnt, twice), batch_size=8,
			num_workers=2, shuffle=False)
		images, labels = epoch(loader)
		got_x = torch.cat(images)
		got_y = torch.cat(labels)
		want = [ds_src[i] for i in range(n)]
		want_x = torch.stack([x for x, _ in want])
		want_y = torch.tensor([y for _, y in want])
		c.eq('default: one epoch read every image twice', len(got_x), 2 * n)
		c.check('default: first reads equal SOURCE (torch.equal)',
			torch.equal(got_x[:n], want_x) and torch.equal(got_y[:n], want_y))
		c.check('default: second reads equal SOURCE (torch.equal)',
			torch.equal(got_x[n:], want_x) and torch.equal(got_y[n:], want_y))
		differ = []
		for (p_src, _), (p_mnt, _) in zip(ds_src.samples, ds_mnt.samples):
			with open(p_src, 'rb') as f:
				want_b = f.read()
			for _ in range(2):
				with open(p_mnt, 'rb') as f:
					if f.read() != want_b:
						differ.append(p_mnt)
		c.eq('default: raw bytes equal SOURCE on two more reads', differ, [])
		s = m.stats()
		# every image's, and not README.txt's, which nothing opened
		c.eq('after the epoch: attributes taken of the images only',
		     s['namespace']['attrs_known'], n)
		c.eq('... of all files but one', s['files'], n + 1)
		c.check('default: the kernel cache is on (stats)',
			s['fuse'].get('kernel_cache') is True, f'fuse={s["fuse"]}')
		# 4n opens of raw files, all skipped (FUSE no-open) but the first
		# of each worker: opens already under way when the first ENOSYS
		# comes back still reach the daemon (two workers here).
		c.le('default: opens skipped (fuse.opens <= 2, one per worker at most)',
		     s['fuse']['opens'], 2)
		c.le('default: SOURCE read once per image',
		     s['source']['bytes'],
		     sum(os.path.getsize(p) for p, _ in ds_src.samples))


def main():
	c = ct.Checker('test_pytorch', timeout=280)
	c.group(test_imagefolder, c)
	c.group(test_imagefolder_kernel_cache, c)
	c.finish()


if __name__ == '__main__':
	main()
