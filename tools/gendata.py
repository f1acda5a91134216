#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Generate an ImageNet-like dataset tree for coordfs tests and benchmarks.

ROOT/train/<class>/<class>_<n>.JPEG (and ROOT/val/<class>/... with
--val-per-class), in one of three kinds:

  images (default)      photo-like JPEGs (smooth colour fields, shapes,
                        texture and sensor-like noise, so they compress like
                        photos), quality 90, sizes from --size WxH or drawn
                        like ImageNet's (mostly 500 px on the long side);
  --bytes-lognormal KB  random bytes, sizes log-normal with mean KB (ImageNet
                        averages about 110 KB): storage benchmarks, no PIL;
  --sparse              empty sparse files of those sizes (ftruncate), for
                        the 1.3M-file namespace benchmark.

The output is a pure function of the options: each (split, class) draws from
its own generator seeded by (--seed, split, class), so --jobs changes only
the speed. Needs /usr/bin/python3 with numpy (and PIL for images).
Prints one summary line: files, bytes, time.
"""

import argparse
import math
import os
import sys
import time
from multiprocessing import Pool

import numpy as np

SPLITS = {"train": 0, "val": 1}
MAX_SIDE = 8192
MIN_FILE = 512  # bytes: smallest log-normal file
ASPECTS = ([4 / 3, 3 / 2, 1.0, 5 / 4, 16 / 9, 2.0], [0.45, 0.2, 0.1, 0.1, 0.1, 0.05])


def class_name(idx):
    """ImageNet-style synset directory name."""
    return "n%08d" % (1440764 + 7919 * idx)


def file_name(split, cls, idx):
    if split == "val":
        return "%s_val_%08d.JPEG" % (cls, idx)
    return "%s_%d.JPEG" % (cls, idx)


def imagenet_size(rng):
    """(width, height) drawn like ImageNet's: mostly 500 on the long side."""
    if rng.random() < 0.6:
        long_side = 500
    else:
        long_side = int(np.clip(rng.lognormal(math.log(500), 0.35), 80, 2500))
    aspect = rng.choice(ASPECTS[0], p=ASPECTS[1])
    short_side = max(16, int(round(long_side / aspect)))
    if rng.random() < 0.25:
        return short_side, long_side
    return long_side, short_side


def photo_like(rng, w, h):
    """A synthetic RGB image with the statistics that matter to JPEG:
    smooth regions, edges, texture and noise."""
    from PIL import Image, ImageDraw, ImageFilter

    gh, gw = (int(x) for x in rng.integers(2, 6, size=2))
    small = rng.integers(0, 256, size=(gh, gw, 3), dtype=np.uint8)
    img = Image.fromarray(small, "RGB").resize((w, h), Image.BICUBIC)
    layer = img.copy()
    draw = ImageDraw.Draw(layer)
    for _ in range(int(rng.integers(3, 9))):
        x0, x1 = sorted(int(v) for v in rng.integers(-w // 4, w + w // 4 + 1, size=2))
        y0, y1 = sorted(int(v) for v in rng.integers(-h // 4, h + h // 4 + 1, size=2))
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=color)
        else:
            n = int(rng.integers(3, 7))
            pts = [(int(rng.integers(0, w)), int(rng.integers(0, h))) for _ in range(n)]
            draw.polygon(pts, fill=color)
    img = Image.blend(img, layer, float(rng.uniform(0.5, 0.9)))
    img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.8, 2.0))))
    pixels = np.asarray(img, dtype=np.float32)
    # Texture at half resolution, then per-pixel noise; their strengths vary
    # per image so file sizes spread like photos' do.
    texture = rng.normal(128, rng.uniform(20, 50), size=(max(1, h // 2), max(1, w // 2)))
    texture = Image.fromarray(texture.clip(0, 255).astype(np.uint8), "L").resize((w, h), Image.BILINEAR)
    pixels += np.asarray(texture, dtype=np.float32)[:, :, None] - 128
    pixels += rng.normal(0, rng.uniform(6, 18), size=pixels.shape).astype(np.float32)
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8), "RGB")


def lognormal_sizes(rng, count, mean_bytes, sigma):
    """Sizes with the given mean (before clipping) and log-space sigma."""
    mu = math.log(mean_bytes) - sigma * sigma / 2
    sizes = rng.lognormal(mu, sigma, size=count)
    return np.clip(sizes, MIN_FILE, 64 * mean_bytes).astype(np.int64)


def make_class(task):
    """Write one (split, class) directory; returns (files, bytes)."""
    opts, split, cidx, count, first = task
    cls = class_name(cidx)
    rng = np.random.default_rng([opts.seed, SPLITS[split], cidx])
    out_dir = os.path.join(opts.root, split, cls)
    os.makedirs(out_dir, exist_ok=True)
    total = 0
    if opts.kind == "images":
        for i in range(count):
            w, h = opts.size if opts.size else imagenet_size(rng)
            path = os.path.join(out_dir, file_name(split, cls, first + i))
            photo_like(rng, w, h).save(path, "JPEG", quality=opts.quality)
            total += os.path.getsize(path)
        return count, total
    sizes = lognormal_sizes(rng, count, opts.mean_kb * 1024, opts.sigma)
    for i in range(count):
        path = os.path.join(out_dir, file_name(split, cls, first + i))
        size = int(sizes[i])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if opts.kind == "sparse":
                os.ftruncate(fd, size)
            else:
                data = rng.bytes(size)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        total += size
    return count, total


def parse_size(text):
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("expected WxH, e.g. 500x375, got %r" % text)
    if not (1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE):
        raise argparse.ArgumentTypeError("sides must be 1..%d, got %r" % (MAX_SIDE, text))
    return w, h


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", metavar="ROOT", help="directory to create the tree in")
    ap.add_argument("--classes", "--dirs", dest="classes", type=int, default=10,
                    help="class directories under train/ (and val/) (default 10)")
    ap.add_argument("--per-class", type=int, default=10, help="train files per class (default 10)")
    ap.add_argument("--files", type=int, default=None,
                    help="total train files, spread evenly over the classes (overrides --per-class)")
    ap.add_argument("--val-per-class", type=int, default=0, help="val files per class (default 0: no val/)")
    ap.add_argument("--seed", type=int, default=0, help="seed; same options + seed = same tree (default 0)")
    ap.add_argument("--size", type=parse_size, default=None,
                    help="image size WxH (default: ImageNet-like random sizes)")
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    ap.add_argument("--bytes-lognormal", dest="mean_kb", type=float, default=None, metavar="MEAN_KB",
                    help="random-byte files, log-normal sizes with this mean in KiB (e.g. 110)")
    ap.add_argument("--sigma", type=float, default=0.6, help="log-space sigma of those sizes (default 0.6)")
    ap.add_argument("--sparse", action="store_true",
                    help="sparse files (truncate, no data) of log-normal sizes (mean --bytes-lognormal or 110)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--force", action="store_true", help="write into a non-empty ROOT")
    opts = ap.parse_args(argv)

    def die(msg):
        print("gendata: %s" % msg, file=sys.stderr)
        sys.exit(2)

    if opts.classes < 1:
        die("--classes must be at least 1")
    if opts.per_class < 0 or opts.val_per_class < 0 or (opts.files is not None and opts.files < 0):
        die("file counts must not be negative")
    if not 1 <= opts.quality <= 100:
        die("--quality must be 1..100")
    if opts.jobs < 1:
        die("--jobs must be at least 1")
    if opts.mean_kb is not None and not (0 < opts.mean_kb <= 1024 * 1024):
        die("--bytes-lognormal MEAN_KB must be in (0, 1048576]")
    if not 0 <= opts.sigma <= 3:
        die("--sigma must be 0..3")
    opts.kind = "sparse" if opts.sparse else ("bytes" if opts.mean_kb is not None else "images")
    if opts.kind != "images" and opts.size is not None:
        die("--size applies to images only (not with --bytes-lognormal or --sparse)")
    if opts.mean_kb is None:
        opts.mean_kb = 110.0
    if opts.kind == "images":
        try:
            import PIL  # noqa: F401
        except ImportError:
            die("images need PIL; run with /usr/bin/python3 or use --bytes-lognormal")
    if os.path.exists(opts.root):
        if not os.path.isdir(opts.root):
            die("%s: not a directory" % opts.root)
        if os.listdir(opts.root) and not opts.force:
            die("%s: not empty (use --force to write into it)" % opts.root)

    tasks = []
    for cidx in range(opts.classes):
        if opts.files is not None:
            count = opts.files // opts.classes + (1 if cidx < opts.files % opts.classes else 0)
        else:
            count = opts.per_class
        tasks.append((opts, "train", cidx, count, 0))
        if opts.val_per_class:
            tasks.append((opts, "val", cidx, opts.val_per_class, cidx * opts.val_per_class))

    start = time.monotonic()
    os.makedirs(os.path.join(opts.root, "train"), exist_ok=True)
    counts = {"train": 0, "val": 0}
    total_bytes = 0
    if opts.jobs == 1:
        results = map(make_class, tasks)
    else:
        pool = Pool(opts.jobs)
        results = pool.imap(make_class, tasks, chunksize=max(1, len(tasks) // (opts.jobs * 8)))
    for task, (files, nbytes) in zip(tasks, results):
        counts[task[1]] += files
        total_bytes += nbytes
    if opts.jobs > 1:
        pool.close()
        pool.join()
    elapsed = time.monotonic() - start
    files = counts["train"] + counts["val"]
    print("gendata: %s: %d files (train %d, val %d) in %d classes, %d bytes (%.1f MiB%s), %s, seed %d, %.1f s"
          % (opts.root, files, counts["train"], counts["val"], opts.classes, total_bytes,
             total_bytes / 2**20, " apparent" if opts.kind == "sparse" else "",
             {"images": "JPEG q%d %s" % (opts.quality, "%dx%d" % opts.size if opts.size else "ImageNet-like sizes"),
              "bytes": "random bytes, log-normal mean %g KiB" % opts.mean_kb,
              "sparse": "sparse, log-normal mean %g KiB" % opts.mean_kb}[opts.kind],
             opts.seed, elapsed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
