#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The S3 benchmark's reader (run by tools/bench/s3 with /usr/bin/python3):
a PyTorch DataLoader(num_workers=N, shuffle=True) over raw file bytes, no
decoding, so an epoch measures I/O only. Every sample's MD5 is compared
with the object's (its single-part ETag), so wrong bytes are caught, not
just slow ones.

Protocol on stdin/stdout, so the caller can mount between the workers'
start-up and the first epoch, and count the proxy's requests per epoch:
it prints {"ready": true} once torch is imported, then for every line
"go ROOT" on stdin runs one epoch over ROOT/RELPATH and prints one JSON
line: seconds, files, bytes, bad (MD5 mismatches), errors (failed
opens/reads, first few messages in "messages"). "quit" ends it.

    s3_loader.py MANIFEST [--workers 8] [--batch 32] [--seed 1]

MANIFEST: one "RELPATH<TAB>SIZE<TAB>MD5" line per file.
"""
import argparse
import hashlib
import json
import sys
import time
import warnings

import torch
from torch.utils.data import DataLoader, Dataset


class RawFiles(Dataset):
    """Sample i: (relpath index, bytes read, md5 hex or the error text)."""

    def __init__(self, items):
        self.items = items
        self.root = None

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        rel = self.items[i][0]
        try:
            with open(self.root + "/" + rel, "rb") as f:
                data = f.read()
        except OSError as e:
            return i, -1, "%s: %s" % (rel, e)
        return i, len(data), hashlib.md5(data).hexdigest()


def collate(batch):
    return batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    # 8 workers on fewer cores is the point of the exercise, not a mistake
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    items = []
    with open(a.manifest) as f:
        for line in f:
            rel, size, md5 = line.rstrip("\n").split("\t")
            items.append((rel, int(size), md5))
    ds = RawFiles(items)
    g = torch.Generator()
    g.manual_seed(a.seed)
    print(json.dumps({"ready": True}), flush=True)
    loader = None
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        root = cmd[1]
        if loader is None or ds.root != root:
            # workers are forked on the first epoch with a root: they copy it
            ds.root = root
            loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                collate_fn=collate, generator=g,
                                persistent_workers=a.workers > 0)
        t = time.monotonic()
        files = nbytes = bad = errors = 0
        msgs = []
        for batch in loader:
            for i, n, h in batch:
                files += 1
                if n < 0:
                    errors += 1
                    if len(msgs) < 5:
                        msgs.append(h)
                    continue
                nbytes += n
                if n != items[i][1] or h != items[i][2]:
                    bad += 1
                    if len(msgs) < 5:
                        msgs.append("%s: %d bytes, md5 %s, expected %d, %s" %
                                    (items[i][0], n, h, items[i][1], items[i][2]))
        print(json.dumps({"seconds": time.monotonic() - t, "files": files, "bytes": nbytes,
                          "bad": bad, "errors": errors, "messages": msgs}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
