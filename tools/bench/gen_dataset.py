#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Generate a benchmark tree of files with ImageNet-like sizes.

Sizes are log-normal around a mean of --mean-kb (ImageNet's training JPEGs
average about 110 KB), spread over --dirs directories. Either until --bytes
of content is written (random bytes, so nothing compresses or dedups), or
--files files, optionally --sparse (made with ftruncate: the namespace
benchmark needs names and sizes, not contents). Writes LIST, one
"SIZE<TAB>RELPATH" per line, the format tools/bench/reader.c reads.
"""
import argparse
import math
import os
import random
import sys


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = s.strip().upper()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root")
    ap.add_argument("list")
    ap.add_argument("--bytes", type=parse_size, help="total content to write (random bytes)")
    ap.add_argument("--files", type=int, help="number of files")
    ap.add_argument("--sparse", action="store_true", help="make files with ftruncate, no content")
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--mean-kb", type=float, default=110.0)
    ap.add_argument("--sigma", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if (a.bytes is None) == (a.files is None):
        ap.error("give exactly one of --bytes and --files")

    rng = random.Random(a.seed)
    mu = math.log(a.mean_kb * 1000.0) - a.sigma * a.sigma / 2.0
    lo, hi = 1 << 10, 16 << 20
    os.makedirs(a.root, exist_ok=True)
    for d in range(a.dirs):
        os.makedirs(os.path.join(a.root, "d%04d" % d), exist_ok=True)
    step = 1 << 20
    total = 0
    n = 0
    with open(a.list, "w") as lf:
        while True:
            if a.files is not None and n >= a.files:
                break
            if a.bytes is not None and total >= a.bytes:
                break
            size = int(min(hi, max(lo, rng.lognormvariate(mu, a.sigma))))
            rel = "d%04d/f%08d.bin" % (n % a.dirs, n)
            fd = os.open(os.path.join(a.root, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                if a.sparse:
                    os.ftruncate(fd, size)
                else:
                    left = size
                    while left > 0:
                        k = min(left, step)
                        os.write(fd, os.urandom(k))
                        left -= k
            finally:
                os.close(fd)
            lf.write("%d\t%s\n" % (size, rel))
            total += size
            n += 1
    print("generated %d files, %d bytes in %s" % (n, total, a.root), file=sys.stderr)


if __name__ == "__main__":
    main()
