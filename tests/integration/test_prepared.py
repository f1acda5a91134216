# SPDX-License-Identifier: MIT
"""Integration test: the prepared view (coordfs(1), THE PREPARED VIEW) on a real mount.

SOURCE holds a photo-like ImageNet-style tree (tools/gendata.py) under
train/, images of every format prep/ must handle under formats/ (JPEGs of
several sizes down to 3x2, 4:2:0 / 4:2:2 / 4:4:4, progressive, gray, CMYK,
EXIF-rotated, a PNG named .JPEG, a GIF named .jpg; PNGs RGB, RGBA, LA, bilevel, 4- and 8-bit
palette with and without transparency, gray, 16-bit gray, 16-bit RGB) and
undecodable files under bad/. Checks:
  - ImageFolder over prepared/center224/train lists the same samples and
    classes as over train; `prepared` is hidden from the root's listing but
    found by lookup;
  - centerS and resizeS samples within 30 dB PSNR of PIL decode +
    torchvision Resize(+CenterCrop), with exactly torchvision's dimensions;
  - a sample read through PIL takes 2 FUSE reads (its bytes, then EOF):
    st_blksize covers the sample;
  - rrc224 samples are 224x224 RGB PPMs and differ between two opens by
    the same job; resize256 stat size equals the bytes read;
  - DataLoader(num_workers=2) + ToTensor over prepared/rrc224/train;
  - undecodable files give EIO, count in prep.errors, and leave the
    daemon serving everything else;
  - the other formats ImageFolder lists (raw/): binary PPM/PGM/PBM,
    uncompressed BMP, WebP and TIFF (gray, bilevel, RGB(A), palette, CMYK;
    raw, LZW, deflate, G4, JPEG; every Orientation, which Pillow applies)
    samples are identical to PIL + torchvision's, byte for byte; a float
    TIFF is listed (ImageFolder sees the same samples there) and opens, but
    every read fails with EIO;
  - with --prep-exact, every JPEG (large ones too, otherwise decoded at a
    reduced DCT scale) gives samples byte for byte PIL + torchvision's;
  - the same --seed after a remount gives the same version 0 of every rrc
    sample, another seed different ones;
  - a SOURCE with a top-level `prepared` entry is refused with a hint to
    --prepared-name, and mounts with --prepared-name=other.
"""

import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402

SEED = 1234
CLASSES = 3
PER_CLASS = 8
BAD = ['trunc.jpg', 'corrupt.jpg', 'empty.jpg', 'text.png']
# (recipe, relpath) -> bytes read by test_center_resize, without --prep-exact
DEFAULT_SAMPLES = {}


# ---------------------------------------------------------------- dataset

def write_png16(path, arr):
	"""A 16-bit PNG (gray for 2-D arrays, RGB for 3-D), written by hand:
	PIL cannot write 16-bit RGB."""
	import struct
	import zlib
	import numpy as np
	arr = np.asarray(arr, dtype='>u2')
	h, w = arr.shape[:2]
	color_type = 2 if arr.ndim == 3 else 0
	raw = b''.join(b'\0' + arr[y].tobytes() for y in range(h))

	def chunk(kind, body):
		crc = zlib.crc32(kind + body) & 0xffffffff
		return struct.pack('>I', len(body)) + kind + body + \
			struct.pack('>I', crc)
	ihdr = struct.pack('>IIBBBBB', w, h, 16, color_type, 0, 0, 0)
	with open(path, 'wb') as f:
		f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) +
			chunk(b'IDAT', zlib.compress(raw, 6)) +
			chunk(b'IEND', b''))


def make_formats(d):
	"""Images of every format and colour layout under d."""
	import numpy as np
	from PIL import Image
	sys.path.insert(0, os.path.join(ct.REPO, 'tools'))
	import gendata	# noqa: E402 - tools/gendata.py, for photo_like
	rng = np.random.default_rng(77)
	os.makedirs(d)

	def photo(w, h):
		return gendata.photo_like(rng, w, h)
	# JPEG, subsampling 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0
	for w, h, sub in [(500, 375, 2), (375, 500, 0), (640, 427, 1),
			  (1200, 900, 2), (333, 500, 0), (97, 61, 2),
			  (2000, 300, 0)]:
		photo(w, h).save(os.path.join(d, f'jpeg_{w}x{h}_s{sub}.jpg'),
				 'JPEG', quality=90, subsampling=sub)
	photo(800, 600).save(os.path.join(d, 'progressive.JPEG'), 'JPEG',
			     quality=88, progressive=True)
	photo(500, 400).convert('L').save(os.path.join(d, 'gray.jpg'),
					  'JPEG', quality=90)
	photo(400, 300).convert('CMYK').save(os.path.join(d, 'cmyk.jpg'),
					     'JPEG', quality=92)
	# EXIF orientation: ImageFolder's loader does not apply it, nor may we
	exif = Image.Exif()
	exif[0x0112] = 6
	photo(400, 300).save(os.path.join(d, 'exif_rotate.jpg'), 'JPEG',
			     quality=90, exif=exif.tobytes())
	photo(3, 2).save(os.path.join(d, 'tiny_3x2.jpg'), 'JPEG', quality=90)
	photo(320, 240).save(os.path.join(d, 'q20.jpg'), 'JPEG', quality=20)
	# ImageNet has PNGs named .JPEG: the content decides
	photo(300, 200).save(os.path.join(d, 'png_named.JPEG'), 'PNG')
	base = photo(300, 200)
	base.save(os.path.join(d, 'rgb.png'))
	base.convert('1').save(os.path.join(d, 'bilevel.png'))
	base.convert('P', palette=Image.ADAPTIVE, colors=16).save(
		os.path.join(d, 'palette_4bit.png'), bits=4)
	base.save(os.path.join(d, 'rgb_trns.png'), transparency=(10, 20, 30))
	alpha = Image.fromarray(rng.integers(0, 256, (200, 300),
					     dtype=np.uint8))
	rgba = base.copy()
	rgba.putalpha(alpha)
	rgba.save(os.path.join(d, 'rgba.png'))
	base.convert('LA').save(os.path.join(d, 'la.png'))
	base.convert('L').save(os.path.join(d, 'gray.png'))
	base.convert('P', palette=Image.ADAPTIVE, colors=200).save(
		os.path.join(d, 'palette.png'))
	base.convert('P', palette=Image.ADAPTIVE, colors=64).save(
		os.path.join(d, 'palette_trns.png'), transparency=3)
	big = np.asarray(photo(260, 190), dtype=np.uint16)
	# 16-bit with full-range values: PIL reads gray16 as mode I (and
	# convert("RGB") clips it), RGB16 by its high bytes.
	write_png16(os.path.join(d, 'gray16.png'), big[..., 1] * 257)
	write_png16(os.path.join(d, 'rgb16.png'),
		    big * 257 + rng.integers(0, 256, big.shape))
	# a GIF named .jpg (ImageFolder goes by the name, PIL by the
	# content); made last, so that the images above keep their pixels
	photo(300, 200).convert('P', palette=Image.ADAPTIVE).save(
		os.path.join(d, 'gif_named.jpg'), 'GIF')


def make_bad(d):
	"""Files with image names that cannot be decoded."""
	import random
	from PIL import Image
	import numpy as np
	os.makedirs(d)
	good = os.path.join(d, 'good.tmp')
	Image.fromarray(np.random.default_rng(5).integers(
		0, 256, (300, 400, 3), dtype=np.uint8)).save(good, 'JPEG',
							     quality=90)
	data = open(good, 'rb').read()
	os.unlink(good)
	with open(os.path.join(d, 'trunc.jpg'), 'wb') as f:
		f.write(data[:len(data) // 2])
	with open(os.path.join(d, 'corrupt.jpg'), 'wb') as f:
		f.write(random.Random(9).randbytes(20000))
	open(os.path.join(d, 'empty.jpg'), 'wb').close()
	with open(os.path.join(d, 'text.png'), 'w') as f:
		f.write('this is not a PNG, just text\n' * 20)


RAW_DECODED = ['rgb24.bmp', 'pal8.bmp', 'gray8.bmp', 'bw1.bmp', 'rgba32.bmp',
	       'p6.ppm', 'p5.pgm', 'p4_bits.pgm', 'upper.BMP', 'lossy.webp',
	       'lossless.webp', 'alpha.webp', 'x.tif', 'lzw.tiff', 'gray.tif',
	       'pal.tif', 'bw_g4.tif', 'rgba.tif'] + \
	[f'orient{o}.tif' for o in range(2, 9)] + ['gray_orient6.tif', 'jpeg.tif',
						   'cmyk.tif']
RAW_UNDECODED = ['float.tif']


def make_raw_formats(d):
	"""The other IMG_EXTENSIONS formats, written by PIL."""
	import numpy as np
	sys.path.insert(0, os.path.join(ct.REPO, 'tools'))
	import gendata	# noqa: E402
	os.makedirs(d)
	base = gendata.photo_like(np.random.default_rng(31), 273, 181)
	base.save(os.path.join(d, 'rgb24.bmp'))
	base.save(os.path.join(d, 'upper.BMP'))
	from PIL import Image
	base.convert('P', palette=Image.ADAPTIVE, colors=200).save(
		os.path.join(d, 'pal8.bmp'))
	base.convert('L').save(os.path.join(d, 'gray8.bmp'))
	base.convert('1').save(os.path.join(d, 'bw1.bmp'))
	rgba = base.copy()
	rgba.putalpha(90)
	rgba.save(os.path.join(d, 'rgba32.bmp'))
	base.save(os.path.join(d, 'p6.ppm'))
	base.convert('L').save(os.path.join(d, 'p5.pgm'))
	base.convert('1').save(os.path.join(d, 'p4_bits.pgm'))  # P4 content
	base.save(os.path.join(d, 'x.tif'))
	base.save(os.path.join(d, 'lzw.tiff'), compression='tiff_lzw')
	base.convert('L').save(os.path.join(d, 'gray.tif'))
	base.convert('P', palette=Image.ADAPTIVE, colors=100).save(
		os.path.join(d, 'pal.tif'))
	base.convert('1').save(os.path.join(d, 'bw_g4.tif'), compression='group4')
	rgba.save(os.path.join(d, 'rgba.tif'), compression='tiff_adobe_deflate')
	# the Orientation tag, which Pillow applies when it loads a TIFF
	for o in range(2, 9):
		base.save(os.path.join(d, f'orient{o}.tif'), tiffinfo={274: o})
	base.convert('L').save(os.path.join(d, 'gray_orient6.tif'),
			       tiffinfo={274: 6}, compression='tiff_lzw')
	base.save(os.path.join(d, 'jpeg.tif'), compression='jpeg')
	base.convert('CMYK').save(os.path.join(d, 'cmyk.tif'))
	# float samples: Pillow reads them (mode F), prep does not
	base.convert('F').save(os.path.join(d, 'float.tif'))
	base.save(os.path.join(d, 'lossy.webp'), quality=80)
	base.save(os.path.join(d, 'lossless.webp'), lossless=True)
	rgba.save(os.path.join(d, 'alpha.webp'), quality=85)


def make_dataset(root):
	ct.gendata(root, CLASSES, PER_CLASS, SEED)
	make_formats(os.path.join(root, 'formats'))
	make_raw_formats(os.path.join(root, 'raw', 'cls'))
	make_bad(os.path.join(root, 'bad'))
	# a class with a non-image file: ImageFolder skips it on both sides
	with open(os.path.join(root, 'train', 'README.txt'), 'w') as f:
		f.write('not a class\n')


def image_files(root, sub):
	out = []
	for dirpath, _, files in os.walk(os.path.join(root, sub)):
		for name in files:
			if name.lower().endswith(('.jpg', '.jpeg', '.png')):
				out.append(os.path.relpath(
					os.path.join(dirpath, name), root))
	return sorted(out)


# ---------------------------------------------------------------- references

def pil_rgb(path):
	from PIL import Image
	with Image.open(path) as im:
		return im.convert('RGB')


def reference(path, recipe):
	import numpy as np
	import torchvision.transforms as T
	img = pil_rgb(path)
	if recipe.startswith('center'):
		s = int(recipe[6:])
		tf = T.Compose([T.Resize(round(s / 0.875)), T.CenterCrop(s)])
	elif recipe.startswith('resize'):
		tf = T.Resize(int(recipe[6:]))
	else:
		raise ValueError(recipe)
	return np.asarray(tf(img))


# ---------------------------------------------------------------- groups

def test_listing(c, m):
	from torchvision import datasets
	names = os.listdir(m.mnt)
	c.check('root listing does not show prepared', 'prepared' not in names,
		f'listing {sorted(names)}')
	c.eq('root listing is SOURCE\'s', sorted(names),
	     sorted(os.listdir(m.src)))
	st = os.stat(os.path.join(m.mnt, 'prepared'))
	import stat as st_mod
	c.check('os.stat finds prepared (a directory)',
		st_mod.S_ISDIR(st.st_mode))
	for recipe in ('center224', 'rrc224', 'resize256', 'center96'):
		st = os.stat(os.path.join(m.mnt, 'prepared', recipe, 'train'))
		c.check(f'prepared/{recipe}/train is a directory',
			st_mod.S_ISDIR(st.st_mode))
	c.errno_of('prepared/rrc7 (S < 16) does not exist',
		   lambda: os.stat(os.path.join(m.mnt, 'prepared', 'rrc7')),
		   errno.ENOENT)
	c.errno_of('prepared/blur224 (unknown recipe) does not exist',
		   lambda: os.stat(os.path.join(m.mnt, 'prepared',
						'blur224')), errno.ENOENT)

	ds_src = datasets.ImageFolder(os.path.join(m.mnt, 'train'))
	ds_prep = datasets.ImageFolder(os.path.join(m.mnt, 'prepared',
						    'center224', 'train'))
	c.eq('ImageFolder classes equal', ds_prep.classes, ds_src.classes)
	c.eq('ImageFolder class_to_idx equal', ds_prep.class_to_idx,
	     ds_src.class_to_idx)
	rel_src = [(os.path.relpath(p, os.path.join(m.mnt, 'train')), y)
		   for p, y in ds_src.samples]
	rel_prep = [(os.path.relpath(p, os.path.join(
		m.mnt, 'prepared', 'center224', 'train')), y)
		for p, y in ds_prep.samples]
	c.eq('ImageFolder samples (relative paths, labels) equal', rel_prep,
	     rel_src)
	c.eq('ImageFolder sees every generated image', len(ds_prep),
	     CLASSES * PER_CLASS)
	c.eq('prepared/center224/bad lists the undecodable files too',
	     sorted(os.listdir(os.path.join(m.mnt, 'prepared', 'center224',
					    'bad'))), sorted(BAD))


def test_fuse_reads(c, m):
	"""A sample read the way ImageFolder's loader reads it (Python open()
	buffered by st_blksize, PIL's 64 KiB reads) takes one FUSE read for its
	bytes plus the one at EOF (direct I/O sends that too)."""
	from PIL import Image
	files = image_files(m.src, 'train')[:10]
	for recipe in ('rrc224', 'center224'):
		paths = [os.path.join(m.mnt, 'prepared', recipe, rel) for rel in files]
		for p in paths:
			st = os.stat(p)
			c.ge(f'{recipe}: st_blksize covers the sample',
			     st.st_blksize, min(st.st_size, 1 << 20))
		before = m.stats()['fuse']['reads']
		for p in paths:
			with open(p, 'rb') as f:
				img = Image.open(f)
				img.convert('RGB')
		after = m.stats()['fuse']['reads']
		c.eq(f'{recipe}: FUSE reads per sample through PIL',
		     (after - before) / len(paths), 2.0)


def test_center_resize(c, m):
	files = image_files(m.src, 'formats') + image_files(m.src, 'train')[:4]
	for recipe in ('center224', 'center96', 'resize256'):
		worst = None
		for rel in files:
			path = os.path.join(m.mnt, 'prepared', recipe, rel)
			data = ct.read_bytes(path)
			DEFAULT_SAMPLES[(recipe, rel)] = data
			got = ct.read_ppm(data)
			want = reference(os.path.join(m.src, rel), recipe)
			c.eq(f'{recipe}/{rel}: dimensions as torchvision',
			     got.shape, want.shape)
			p = ct.psnr(got, want)
			bound = 30.0
			c.ge(f'{recipe}/{rel}: PSNR vs PIL+torchvision (dB)',
			     round(p, 2), bound)
			if worst is None or p < worst[0]:
				worst = (p, rel)
			if recipe.startswith('resize'):
				c.eq(f'{recipe}/{rel}: stat size == bytes read',
				     os.stat(path).st_size, len(data))
		print(f'# {recipe}: worst PSNR {worst[0]:.2f} dB ({worst[1]})')
	# deterministic: a second read gives the same bytes
	rel = files[0]
	path = os.path.join(m.mnt, 'prepared', 'center224', rel)
	c.eq('center224: a second open gives identical bytes',
	     ct.sha256_file(path), ct.sha256_file(path))


def test_rrc(c, m, v0):
	"""Records version 0 of every rrc224/train sample in v0 (this job's
	first open of each file) for the seed group."""
	from PIL import Image
	import io
	want_len = ct.ppm_size(224, 224)
	files = image_files(m.src, 'train') + image_files(m.src, 'formats')
	differ = 0
	for rel in files:
		path = os.path.join(m.mnt, 'prepared', 'rrc224', rel)
		first = ct.read_bytes(path)
		second = ct.read_bytes(path)
		if rel.startswith('train'):
			v0[rel] = first
		c.eq(f'rrc224/{rel}: stat size', os.stat(path).st_size,
		     want_len)
		ok = True
		for k, data in enumerate((first, second)):
			try:
				arr = ct.read_ppm(data)
				with Image.open(io.BytesIO(data)) as im:
					pil = (im.mode, im.size)
			except (ValueError, OSError) as e:
				c.check(f'rrc224/{rel} open {k}: a PPM', False,
					str(e))
				ok = False
				continue
			if arr.shape != (224, 224, 3) or pil != ('RGB',
								 (224, 224)):
				ok = False
				c.check(f'rrc224/{rel} open {k}: 224x224 RGB',
					False, f'{arr.shape} PIL {pil}')
		c.check(f'rrc224/{rel}: both opens are 224x224 RGB PPMs', ok)
		if 'tiny' in rel:
			# a 3x2 source has only a few dozen crops and flips
			continue
		c.check(f'rrc224/{rel}: the two opens differ', first != second)
		differ += first != second
	print(f'# rrc224: {differ} files differ between opens')


def test_dataloader(c, m):
	import torch
	from torchvision import datasets, transforms
	torch.set_num_threads(1)
	root = os.path.join(m.mnt, 'prepared', 'rrc224', 'train')
	ds = datasets.ImageFolder(root, transform=transforms.ToTensor())
	loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2,
					     shuffle=True)
	n = 0
	shapes = set()
	labels = []
	lo, hi = 1.0, 0.0
	for x, y in loader:
		n += x.shape[0]
		shapes.add(tuple(x.shape[1:]))
		labels += y.tolist()
		lo, hi = min(lo, x.min().item()), max(hi, x.max().item())
	c.eq('DataLoader: number of samples', n, CLASSES * PER_CLASS)
	c.eq('DataLoader: every tensor is 3x224x224', shapes, {(3, 224, 224)})
	c.eq('DataLoader: labels', sorted(labels),
	     sorted(y for _, y in ds.samples))
	c.check('DataLoader: tensors are not constant', hi - lo > 0.5,
		f'min {lo} max {hi}')


def test_bad_files(c, m):
	good_rel = image_files(m.src, 'train')[0]
	good = os.path.join(m.mnt, 'prepared', 'center224', good_rel)
	good_sha = ct.sha256_file(good)
	for name in BAD:
		try:
			pil_rgb(os.path.join(m.src, 'bad', name))
			pil_fails = False
		except Exception:	# noqa: BLE001 - any PIL failure
			pil_fails = True
		c.check(f'bad/{name}: PIL cannot load it either', pil_fails)
	for recipe in ('center224', 'rrc224', 'resize256'):
		for name in BAD:
			before = m.stats()['prep']['errors']
			path = os.path.join(m.mnt, 'prepared', recipe, 'bad',
					    name)
			res = ct.read_in_child(path, timeout=20)
			c.eq(f'{recipe}/bad/{name}: read fails with EIO',
			     res[:2], ('errno', errno.EIO))
			after = m.stats()['prep']['errors']
			c.ge(f'{recipe}/bad/{name}: prep.errors grew',
			     after - before, 1)
			c.check(f'{recipe}/bad/{name}: daemon alive',
				all(ct.pid_alive(p) for p in m.pids) and
				bool(m.pids))
	# the daemon is unharmed: everything else still works
	c.eq('a good prepared file still reads the same bytes',
	     ct.sha256_file(good), good_sha)
	rrc = ct.read_ppm(ct.read_bytes(os.path.join(
		m.mnt, 'prepared', 'rrc224', good_rel)))
	c.eq('a good rrc224 file still decodes', rrc.shape, (224, 224, 3))
	for name in BAD:
		c.eq(f'bad/{name} itself reads as SOURCE\'s bytes',
		     ct.sha256_file(os.path.join(m.mnt, 'bad', name)),
		     ct.sha256_file(os.path.join(m.src, 'bad', name)))
	s = m.stats()['prep']
	c.ge('prep.errors counts at least one per bad file and recipe',
	     s['errors'], len(BAD) * 3)
	print(f'# prep stats after bad files: {s}')


def test_raw_formats(c, m):
	from torchvision import datasets
	raw = datasets.ImageFolder(os.path.join(m.mnt, 'raw'))
	prep = datasets.ImageFolder(os.path.join(m.mnt, 'prepared', 'center224',
						 'raw'))
	c.eq('raw/: ImageFolder lists the same samples in the view',
	     [os.path.basename(p) for p, _ in prep.samples],
	     [os.path.basename(p) for p, _ in raw.samples])
	c.eq('raw/: every file is a sample',
	     len(raw.samples), len(RAW_DECODED) + len(RAW_UNDECODED))
	for name in RAW_DECODED:
		for recipe in ('center224', 'resize64', 'resize256'):
			path = os.path.join(m.mnt, 'prepared', recipe, 'raw', 'cls',
					    name)
			data = ct.read_bytes(path)
			got = ct.read_ppm(data)
			want = reference(os.path.join(m.src, 'raw', 'cls', name),
					 recipe)
			c.check(f'{recipe}/raw/{name}: identical to PIL + '
				'torchvision', got.shape == want.shape and
				bool((got == want).all()),
				f'shape {got.shape} vs {want.shape}')
			if recipe.startswith('resize'):
				c.eq(f'{recipe}/raw/{name}: stat size == bytes read',
				     os.stat(path).st_size, len(data))
	for name in RAW_UNDECODED:
		path = os.path.join(m.mnt, 'prepared', 'center224', 'raw', 'cls',
				    name)
		before = m.stats()['prep']['errors']
		fd = os.open(path, os.O_RDONLY)
		try:
			c.errno_of(f'center224/raw/{name}: opens, read fails with '
				   'EIO', lambda: os.read(fd, 1 << 16), errno.EIO)
		finally:
			os.close(fd)
		c.ge(f'center224/raw/{name}: counted in prep.errors',
		     m.stats()['prep']['errors'] - before, 1)


def test_seed(c, template, v0):
	"""Version 0 of rrc224 samples depends only on (seed, file)."""
	if not c.check('version 0 samples recorded by test_rrc', bool(v0)):
		return
	files = sorted(v0)
	for seed, same in ((SEED, True), (SEED + 1, False)):
		with ct.Mount(['--prepared', f'--seed={seed}',
			       '--prep-threads=2'],
			      populate=ct.copy_tree_into(template)) as m:
			got = {rel: ct.read_bytes(os.path.join(
				m.mnt, 'prepared', 'rrc224', rel))
				for rel in files}
		equal = [rel for rel in files if got[rel] == v0[rel]]
		if same:
			c.eq(f'remount with --seed={seed}: version 0 identical '
			     'for every file', len(equal), len(files))
		else:
			c.eq(f'remount with --seed={seed}: version 0 differs '
			     'for every file', len(equal), 0)


def test_exact(c, template):
	"""--prep-exact: every JPEG of formats/ (large ones included, which
	are otherwise decoded at a reduced DCT scale) gives exactly PIL +
	torchvision's pixels."""
	import numpy as np
	jpegs = [rel for rel in image_files(template, 'formats')
		 if open(os.path.join(template, rel), 'rb').read(2) == b'\xff\xd8']
	if not c.check('JPEGs to compare', len(jpegs) >= 8, jpegs):
		return
	with ct.Mount(['--prepared', '--prep-exact', f'--seed={SEED}', '--prep-threads=2'],
		      populate=ct.copy_tree_into(os.path.join(template, 'formats'))) as m:
		for recipe in ('center224', 'resize256'):
			exact = []
			for rel in jpegs:
				name = os.path.relpath(rel, 'formats')
				data = ct.read_bytes(os.path.join(m.mnt, 'prepared', recipe, name))
				got = ct.read_ppm(data)
				want = reference(os.path.join(m.src, name), recipe)
				if got.shape == want.shape and np.array_equal(got, want):
					exact.append(rel)
			c.eq(f'--prep-exact {recipe}: JPEGs byte for byte PIL + torchvision',
			     sorted(set(jpegs) - set(exact)), [])
			# The check above can fail: without the option, a large JPEG
			# is decoded at a reduced DCT scale, close but not equal.
			rel = os.path.join('formats', 'jpeg_1200x900_s2.jpg')
			if (recipe, rel) in DEFAULT_SAMPLES:
				c.check(f'{recipe}/{rel}: the default sample differs from the exact one',
					DEFAULT_SAMPLES[(recipe, rel)] != ct.read_bytes(
						os.path.join(m.mnt, 'prepared', recipe,
							     os.path.relpath(rel, 'formats'))))


def test_name_clash(c, template):
	from PIL import Image
	import numpy as np

	def populate(src, entry='prepared', kind='dir'):
		d = os.path.join(src, 'train', 'a')
		os.makedirs(d)
		Image.fromarray(np.full((60, 80, 3), 128, np.uint8)).save(
			os.path.join(d, 'x.jpg'), 'JPEG')
		p = os.path.join(src, entry)
		if kind == 'dir':
			os.makedirs(p)
			Image.fromarray(np.full((40, 50, 3), 30, np.uint8)).save(
				os.path.join(p, 'y.png'))
		else:
			with open(p, 'w') as f:
				f.write('a file named like the view\n')

	for entry, kind, opts in (('prepared', 'dir', ['--prepared']),
				  ('prepared', 'file', ['--prepared']),
				  ('other', 'dir', ['--prepared',
						    '--prepared-name=other'])):
		with ct.TempDirs() as t:
			populate(t.src, entry, kind)
			rc, out, err = ct.run_coordfs(opts + [t.src, t.mnt])
			what = f'SOURCE with top-level {kind} {entry!r}, ' + \
				' '.join(opts)
			c.check(f'{what}: refused', rc not in (0, None),
				f'rc {rc}')
			c.check(f'{what}: nothing mounted',
				not ct.is_mounted(t.mnt))
			lines = (out + err).strip().splitlines()
			c.eq(f'{what}: one line of output', len(lines), 1)
			c.check(f'{what}: the line names --prepared-name',
				'--prepared-name' in err, repr(err))
			c.check(f'{what}: the line names the entry',
				repr(entry) in err or f'"{entry}"' in err or
				f' {entry}' in err, repr(err))

	with ct.Mount(['--prepared', '--prepared-name=other', '--seed=3'],
		      populate=populate) as m:
		names = sorted(os.listdir(m.mnt))
		c.eq('--prepared-name=other: root lists SOURCE (with the real '
		     'prepared/)', names, ['prepared', 'train'])
		c.eq('the real prepared/ shows SOURCE\'s files',
		     os.listdir(os.path.join(m.mnt, 'prepared')), ['y.png'])
		c.eq('the real prepared/y.png has SOURCE\'s bytes',
		     ct.sha256_file(os.path.join(m.mnt, 'prepared', 'y.png')),
		     ct.sha256_file(os.path.join(m.src, 'prepared', 'y.png')))
		arr = ct.read_ppm(ct.read_bytes(os.path.join(
			m.mnt, 'other', 'center224', 'train', 'a', 'x.jpg')))
		c.eq('other/center224/train/a/x.jpg is a 224x224 sample',
		     arr.shape, (224, 224, 3))
		arr = ct.read_ppm(ct.read_bytes(os.path.join(
			m.mnt, 'other', 'resize32', 'prepared', 'y.png')))
		c.eq('other/resize32/prepared/y.png mirrors the real '
		     'prepared/', arr.shape, (32, 40, 3))
		c.errno_of('prepared/center224 is not the view under '
			   '--prepared-name=other',
			   lambda: os.stat(os.path.join(m.mnt, 'prepared',
							'center224')),
			   errno.ENOENT)

	with ct.Mount(['--seed=3'], populate=populate) as m:
		c.eq('without --prepared a top-level prepared/ mounts as data',
		     sorted(os.listdir(os.path.join(m.mnt, 'prepared'))),
		     ['y.png'])


def main():
	c = ct.Checker('test_prepared', timeout=250)
	import torch
	torch.set_num_threads(1)
	v0 = {}
	with ct.TempDirs(prefix='coordfs-prep-data-') as data:
		template = os.path.join(data.root, 'dataset')
		make_dataset(template)
		try:
			m = ct.Mount(['--prepared', f'--seed={SEED}',
				      '--prep-threads=2', '--cache-size=64M'],
				     populate=ct.copy_tree_into(template))
		except ct.MountFailed as e:
			c.check('mount with --prepared', False, str(e))
			c.finish()
		with m:
			c.group(test_listing, c, m)
			c.group(test_rrc, c, m, v0)
			c.group(test_center_resize, c, m)
			c.group(test_fuse_reads, c, m)
			c.group(test_dataloader, c, m)
			c.group(test_bad_files, c, m)
			c.group(test_raw_formats, c, m)
		c.group(test_seed, c, template, v0)
		c.group(test_exact, c, template)
		c.group(test_name_clash, c, template)
	c.finish()


if __name__ == '__main__':
	main()
