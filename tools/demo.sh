#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job on a small generated dataset, from a fresh Debian machine (as
# root): install, build, generate ImageNet-like JPEGs, mount them through
# coordfs, run two ImageFolder epochs through a DataLoader, show fsstat,
# unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

bash tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build

work=${COORDFS_DEMO_DIR:-/tmp/coordfs-demo}
mkdir -p "$work/mnt"
if [ ! -d "$work/data/train" ]; then
	/usr/bin/python3 tools/gendata.py "$work/data" --classes 10 --per-class 50 --seed 1
fi
mountpoint -q "$work/mnt" && fusermount3 -u "$work/mnt"
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true' EXIT

"$top/build/fs/coordfs" --cache-size=64M --prepared "$work/data" "$work/mnt"
echo "mounted $work/data at $work/mnt"

COORDFS_JOB=demo /usr/bin/python3 - "$work/mnt" <<'PY'
import sys, time
import torch
from torchvision import datasets, transforms
root = sys.argv[1]
tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                         transforms.ToTensor()])
ds = datasets.ImageFolder(root + "/train", transform=tf)
dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
for epoch in (1, 2):
    t = time.time(); n = 0
    for x, y in dl:
        n += x.shape[0]
    print(f"epoch {epoch}: {n} images, {len(ds.classes)} classes, {n / (time.time() - t):.0f} images/s (raw JPEG + PIL decode)")
pds = datasets.ImageFolder(root + "/prepared/rrc224/train", transform=transforms.ToTensor())
dl = torch.utils.data.DataLoader(pds, batch_size=32, shuffle=True, num_workers=2)
t = time.time(); n = 0
for x, y in dl:
    n += x.shape[0]
print(f"prepared/rrc224: {n} images of {tuple(x.shape[1:])}, {n / (time.time() - t):.0f} images/s (decoded by coordfs)")
PY

"$top/build/tools/fsstat" "$work/mnt"
