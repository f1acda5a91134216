#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The dataloader benchmark's training loop (run inside cgroups by
tools/bench/dataloader): unchanged ImageFolder + DataLoader code with the
standard RandomResizedCrop(224) + flip + ToTensor transform. Prints one JSON
line per epoch: images, seconds, images/s. --max-batches stops early (used
to measure the processes' own memory footprint)."""
import argparse
import json
import time

import torch
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-batches", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dev", help="block device whose reads to report per epoch (e.g. loop0)")
    a = ap.parse_args()

    def dev_bytes():
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if p[2] == a.dev:
                    return int(p[5]) * 512
        raise SystemExit("no %s in /proc/diskstats" % a.dev)

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor()])
    ds = datasets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers)
    for ep in range(1, a.epochs + 1):
        d0 = dev_bytes() if a.dev else 0
        t = time.monotonic()
        n = 0
        for i, (x, y) in enumerate(dl):
            n += x.shape[0]
            if a.max_batches and i + 1 >= a.max_batches:
                break
        dt = time.monotonic() - t
        rec = {"epoch": ep, "images": n, "seconds": dt, "images_per_s": n / dt}
        if a.dev:
            rec["dev_read_bytes"] = dev_bytes() - d0
        print(json.dumps(rec), flush=True)
        if not a.max_batches and n != len(ds):
            raise SystemExit("epoch %d saw %d of %d images" % (ep, n, len(ds)))


if __name__ == "__main__":
    main()
