#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What coordfs is for, in about a minute, from a fresh Debian machine (as
# root): install, build, generate a dataset of ImageNet-sized files, mount it
# through coordfs with a cache of about half the dataset, run three
# ImageFolder + DataLoader epochs in fresh random orders, print the bytes each
# epoch read from storage against the MinIO optimum, show fsstat --watch's
# view of the same passes; then read the same three epochs directly with the
# same memory left to the kernel's page cache (a memory cgroup) and end with
# one comparison table.
#
# The dataset lives on an ext4 image on a loop device, so the page cache's
# storage reads are counted exactly (/proc/diskstats); coordfs's come from
# its own statistics. Without a loop device or a memory cgroup the demo says
# so and shows coordfs alone. Everything it creates is removed at exit.
#
# Knobs: COORDFS_DEMO_FILES (2000 files of ~110 KiB), COORDFS_DEMO_SEED (1).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

bash tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build

coordfs=$top/build/fs/coordfs
fsstat=$top/build/tools/fsstat
files=${COORDFS_DEMO_FILES:-2000}
seed=${COORDFS_DEMO_SEED:-1}
py=/usr/bin/python3

work=$(mktemp -d /tmp/coordfs-demo.XXXXXX)
loopdev=
cgroup=
watch_pid=
cleanup() {
	set +e
	[ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null && wait "$watch_pid"
	mountpoint -q "$work/mnt" && fusermount3 -u "$work/mnt"
	mountpoint -q "$work/data" && umount "$work/data"
	[ -n "$loopdev" ] && losetup -d "$loopdev"
	[ -n "$cgroup" ] && [ -d "$cgroup" ] && rmdir "$cgroup"
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/data" "$work/mnt"

say() { printf '\n== %s\n' "$*"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }

# ---- the dataset, on a loop device when one can be made
say "dataset: $files files of ImageNet-like sizes (random bytes, so nothing compresses)"
gen=(tools/gendata.py --classes 20 --files "$files" --bytes-lognormal 110 --seed "$seed")
# ~110 KiB mean, log-normal: leave room for the tail and ext4's overhead.
img_bytes=$(( files * 110 * 1024 * 3 / 2 + 64 * 1048576 ))
if truncate -s "$img_bytes" "$work/data.img" && mkfs.ext4 -q -F "$work/data.img" 2>/dev/null &&
	loopdev=$(losetup --find --show --direct-io=on "$work/data.img" 2>/dev/null) &&
	mount -o noatime "$loopdev" "$work/data"; then
	rmdir "$work/data/lost+found" # the generator wants an empty directory
	"$py" "${gen[@]}" "$work/data" >/dev/null
	# Remount read-only: unmounting drops the generator's pages, so both
	# readers start with nothing of the dataset in memory.
	umount "$work/data"
	mount -o ro,noatime "$loopdev" "$work/data"
	dev=$(basename "$loopdev")
else
	echo "no loop device could be made: coordfs alone (the page cache's storage reads cannot be counted)"
	[ -n "$loopdev" ] && { losetup -d "$loopdev"; loopdev=; }
	"$py" "${gen[@]}" "$work/data" >/dev/null
	dev=
fi
(cd "$work/data" && find . -type f -printf '%s\t%P\n') >"$work/list"
dataset=$(awk -F'\t' '{ s += $1 } END { printf "%d", s }' "$work/list")
nfiles=$(wc -l <"$work/list")
cache=$(( dataset / 2 ))
echo "$nfiles files, $(mib "$dataset") MiB; coordfs cache: $(mib "$cache") MiB (half)"

# ---- coordfs: mount, three ImageFolder epochs, fsstat
say "coordfs --cache-size=$(mib "$cache")M: three ImageFolder epochs in fresh random orders"
opts=(--cache-size="$cache")
# Where the kernel cache is on by default, turn it off so that no memory
# outside the budget holds data and every read is counted.
help=$("$coordfs" --help 2>&1 || true)
if [[ $help == *--no-kernel-cache* ]]; then
	opts+=(--no-kernel-cache)
fi
"$coordfs" "${opts[@]}" "$work/data" "$work/mnt"
# fsstat --watch follows the job as a user would, splitting it into passes
# over the dataset; its last table is shown after the epochs.
"$fsstat" --watch=0.5 "$work/mnt" >"$work/watch.txt" 2>&1 &
watch_pid=$!

"$py" - "$work/mnt" "$dataset" "$cache" "$work/coordfs.txt" <<'PY'
import json, os, sys, time
import torch
from torchvision import datasets

mnt, dataset, cache, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def raw(path):
    # The training job's reads without its decoding, so that the demo
    # measures storage rather than PIL on 2 cores.
    with open(path, "rb") as f:
        return f.read()

def source_bytes():
    return json.loads(os.getxattr(mnt, "user.coordfs.stats"))["source"]["bytes"]

ds = datasets.ImageFolder(mnt + "/train", loader=raw)
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2,
                                 collate_fn=lambda batch: sum(len(x) for x, _ in batch))
optimum = (1 - cache / dataset) * dataset
results = []
for epoch in (1, 2, 3):
    before, t = source_bytes(), time.time()
    n = sum(dl)
    read = source_bytes() - before
    best = dataset if epoch == 1 else optimum
    results.append(read)
    print(f"epoch {epoch}: {len(ds)} files, {n / 2**20:.0f} MiB read by the job in {time.time() - t:.1f} s;"
          f" from storage {read / 2**20:.0f} MiB, optimum {best / 2**20:.0f} MiB ({read / best:.2f}x)")
with open(out, "w") as f:
    f.write(" ".join(str(r) for r in results) + "\n")
PY

sleep 1 # one more sample after the last read
kill -INT "$watch_pid"
wait "$watch_pid" || true
watch_pid=
say "fsstat --watch, its last table"
awk 'BEGIN { RS = ""; ORS = "\n" } /rates/ { last = $0 } END { print last }' "$work/watch.txt"
fusermount3 -u "$work/mnt"
read -r co1 co2 co3 <"$work/coordfs.txt"

# ---- the page cache with the same memory
pc1= pc2= pc3=
reader_mem=$(( 4 * 1048576 )) # the reader's own memory (2 MiB measured: 2 threads, 1 MiB buffers)
make_cgroup() { # limit -> sets $cgroup, or returns 1
	local limit=$1 name=coordfs-demo-$$
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		grep -qw memory /sys/fs/cgroup/cgroup.controllers || return 1
		grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
			echo +memory >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || return 1
		cgroup=/sys/fs/cgroup/$name
		mkdir "$cgroup" 2>/dev/null && echo "$limit" >"$cgroup/memory.max" 2>/dev/null || return 1
	elif [ -d /sys/fs/cgroup/memory ]; then
		cgroup=/sys/fs/cgroup/memory/$name
		mkdir "$cgroup" 2>/dev/null && echo "$limit" >"$cgroup/memory.limit_in_bytes" 2>/dev/null || return 1
	else
		return 1
	fi
}
if [ -z "$dev" ]; then
	say "page cache: skipped (no loop device to count its storage reads)"
elif ! make_cgroup $(( cache + reader_mem )); then
	say "page cache: skipped (no memory cgroup could be made on this machine)"
	[ -n "$cgroup" ] && [ -d "$cgroup" ] && rmdir "$cgroup"
	cgroup=
else
	say "page cache: the same epochs read directly, in a memory cgroup of $(mib "$cache") MiB + $(mib "$reader_mem") MiB for the reader"
	cc -O2 -pthread -o "$work/reader" tools/bench/reader.c
	# Remount so that nothing of the dataset is in memory when it starts.
	umount "$work/data"
	mount -o ro,noatime "$loopdev" "$work/data"
	sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cgroup" \
		"$work/reader" -t 2 -b 1048576 -e 3 -s "$seed" -d "$dev" "$work/list" "$work/data" >"$work/pc.json"
	read -r pc1 pc2 pc3 < <("$py" -c '
import json, sys
eps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(" ".join(str(e["dev_read_bytes"]) for e in eps))' "$work/pc.json")
	n=1
	for b in "$pc1" "$pc2" "$pc3"; do
		echo "epoch $n: from storage $(mib "$b") MiB"
		n=$((n + 1))
	done
fi

# ---- the comparison
optimum=$(( dataset - cache ))
say "storage MiB read per epoch: dataset $(mib "$dataset") MiB, memory $(mib "$cache") MiB"
printf '%-7s %10s %12s %10s\n' epoch coordfs "page cache" optimum
n=1
for pair in "$co1:$pc1:$dataset" "$co2:$pc2:$optimum" "$co3:$pc3:$optimum"; do
	IFS=: read -r c p o <<<"$pair"
	printf '%-7s %10s %12s %10s\n' "$n" "$(mib "$c")" "$([ -n "$p" ] && mib "$p" || echo -)" "$(mib "$o")"
	n=$((n + 1))
done
awk -v c2="$co2" -v c3="$co3" -v p2="${pc2:-0}" -v p3="${pc3:-0}" -v o="$optimum" 'BEGIN {
	c = (c2 + c3) / 2; p = (p2 + p3) / 2
	printf "epochs 2-3: coordfs %.2fx the optimum", (o > 0 ? c / o : 0)
	if (p > 0)
		printf ", %.2fx what the page cache read", c / p
	printf "\n"
}'
if [ -n "$pc1" ]; then
	echo "(coordfs: its source.bytes statistics; page cache: sectors the loop device read)"
else
	echo "(coordfs: its source.bytes statistics)"
fi
