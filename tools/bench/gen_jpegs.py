#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Generate an ImageFolder tree of JPEGs with ImageNet-like dimensions and
file sizes (about 110 KB at quality 90): ROOT/train/cNNN/iNNNNNN.JPEG.
Content is smooth random color fields plus noise, so files compress like
photos rather than like pure noise. Used when /work/main's tools/gendata.py
is not available."""
import argparse
import os
import random

import numpy as np
from PIL import Image


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--images", type=int, default=2000, help="total images")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    nrng = np.random.default_rng(a.seed)
    for c in range(a.classes):
        os.makedirs(os.path.join(a.root, "train", "c%03d" % c), exist_ok=True)
    for i in range(a.images):
        w = int(min(800, max(200, rng.gauss(470, 90))))
        h = int(min(800, max(150, w * rng.choice((0.75, 0.75, 0.667, 1.0, 1.333)))))
        base = nrng.integers(0, 256, size=(rng.randint(4, 12), rng.randint(4, 12), 3), dtype=np.uint8)
        img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC), dtype=np.int16)
        img = img + nrng.normal(0, rng.uniform(10, 22), size=img.shape).astype(np.int16)
        img = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
        img.save(os.path.join(a.root, "train", "c%03d" % (i % a.classes), "i%06d.JPEG" % i), quality=90)


if __name__ == "__main__":
    main()
