#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PNG plots of the benchmarks' tables (Debian's python3-matplotlib).

The plots are drawn from the markdown tables the benchmarks print and save,
so the same code serves a fresh run (benchlib.save calls plot_markdown for
every result it writes to tools/bench/out/) and the recorded results:

    tools/bench/plots.py OUTDIR RESULTS.md [RESULTS-prepared.md ...]

writes, for the first table of each kind found in the files:

- storage-per-epoch.png: storage MiB read per epoch at each cache fraction,
  page cache vs coordfs vs the MinIO optimum (cache_efficiency);
- warm-read.png: warm-read files/s per configuration (warm_read);
- prepared.png: images/s and CPU per image, PIL + torchvision vs the
  prepared view, one job and three concurrent jobs (prepared);
- s3-epochs.png: epoch seconds and MiB fetched from the bucket per epoch,
  coordfs vs rclone vs s3fs over S3 (s3).

Prints the path of every plot written; exits non-zero if none could be.
"""
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"page cache": "#c44e52", "coordfs": "#4c72b0", "optimum": "#55a868", "PIL": "#c44e52",
          "prepared": "#4c72b0"}


def tables(text):
    """Every markdown table of text as (header cells, rows of cells)."""
    out = []
    lines = text.splitlines()
    i = 0
    while i + 1 < len(lines):
        if lines[i].startswith("|") and re.match(r"^\|\s*:?-{3,}", lines[i + 1]):
            header = cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            out.append((header, rows))
        else:
            i += 1
    return out


def cells(line):
    return [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]


def number(s):
    m = re.match(r"^-?[0-9]+(\.[0-9]+)?", s.strip())
    return float(m.group(0)) if m else None


def find_table(text, *columns):
    """The first table whose header starts with the given columns."""
    for header, rows in tables(text):
        if header[:len(columns)] == list(columns):
            return header, rows
    return None


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_storage(text, path, note=""):
    """Storage MiB per epoch, one panel per cache fraction."""
    t = find_table(text, "cache", "reader", "epoch 1")
    if not t:
        return None
    header, rows = t
    epochs = [h for h in header if h.startswith("epoch ")]
    fracs = []
    data = {}
    for r in rows:
        frac, reader = r[0], r[1]
        if frac not in fracs:
            fracs.append(frac)
        data[(frac, reader)] = [number(r[2 + k]) for k in range(len(epochs))]
    readers = ["page cache", "coordfs", "optimum"]
    fig, axes = plt.subplots(1, len(fracs), figsize=(4.2 * len(fracs), 3.8), sharey=True, squeeze=False)
    width = 0.27
    for ax, frac in zip(axes[0], fracs):
        for k, reader in enumerate(readers):
            ys = data.get((frac, reader))
            if not ys:
                continue
            xs = [e + (k - 1) * width for e in range(len(epochs))]
            ax.bar(xs, ys, width, label=reader, color=COLORS[reader])
        ax.set_title("cache = %s of the dataset" % frac)
        ax.set_xticks(range(len(epochs)))
        ax.set_xticklabels([str(e + 1) for e in range(len(epochs))])
        ax.set_xlabel("epoch (fresh random order)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("MiB read from storage")
    axes[0][-1].legend(loc="upper right", fontsize=8)
    fig.suptitle("Storage bytes per epoch: kernel page cache vs coordfs (MinIO) vs optimum" + note, fontsize=10)
    return save(fig, path)


def plot_warm(text, path, note=""):
    """Warm-read files/s per configuration."""
    t = find_table(text, "reader", "files/s", "MiB/s")
    if not t:
        return None
    _, rows = t
    names = [r[0] for r in rows]
    vals = [number(r[1]) for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(rows) + 1.2))
    colors = ["#4c72b0" if n.startswith("coordfs") else "#8c8c8c" for n in names]
    ax.barh(range(len(rows)), vals, color=colors)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    for y, v in enumerate(vals):
        ax.text(v, y, " %.0f" % v, va="center", fontsize=8)
    ax.set_xlabel("files/s (all data in memory, 4 threads, random order)")
    ax.set_xlim(0, max(vals) * 1.15)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("Warm reads per configuration" + note, fontsize=10)
    return save(fig, path)


def medians(rows, path_col, cols):
    """Median of each column in cols per value of the path column."""
    out = {}
    for path in sorted({r[path_col] for r in rows}):
        sel = [r for r in rows if r[path_col] == path]
        out[path] = [statistics.median(c(r) for r in sel) for c in cols]
    return out


def plot_prepared(text, path, note=""):
    """images/s and CPU ms per image, PIL vs prepared, 1 and 3 jobs."""
    one = find_table(text, "repeat", "path", "epoch 1")
    three = find_table(text, "repeat", "path", "aggregate images/s")
    if not one or not three:
        return None

    def col(header, name):
        return next(i for i, h in enumerate(header) if h.startswith(name))

    def total_cpu(i):
        return lambda r: number(r[i].split("/")[-1])

    h1, r1 = one
    h3, r3 = three
    m1 = medians(r1, 1, [lambda r, i=col(h1, "whole run"): number(r[i]), total_cpu(col(h1, "CPU ms/image"))])
    m3 = medians(r3, 1, [lambda r, i=col(h3, "aggregate"): number(r[i]), total_cpu(col(h3, "CPU ms/image"))])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    groups = ["1 job", "3 jobs (aggregate)"]
    for ax, k, label in ((axes[0], 0, "images/s (median of runs)"), (axes[1], 1, "CPU ms per image (median)")):
        for j, p in enumerate(["PIL", "prepared"]):
            ys = [m1[p][k], m3[p][k]]
            xs = [g + (j - 0.5) * 0.35 for g in range(2)]
            ax.bar(xs, ys, 0.35, label="PIL + torchvision" if p == "PIL" else "coordfs prepared/rrc224",
                   color=COLORS[p])
            for x, y in zip(xs, ys):
                ax.text(x, y, "%.0f" % y if k == 0 else "%.1f" % y, ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(2))
        ax.set_xticklabels(groups)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("RandomResizedCrop(224) samples for a DataLoader(num_workers=2)" + note, fontsize=10)
    return save(fig, path)


def plot_s3(text, path, note=""):
    """S3 benchmark: seconds and GET MiB per epoch for each tool."""
    t = find_table(text, "tool", "mount s", "epoch 1 s (from mount)")
    if not t:
        return None
    header, rows = t
    rows = [r for r in rows if number(r[2]) is not None]
    if not rows:
        return None
    secs = [i for i, h in enumerate(header) if re.match(r"^epoch \d+ s", h)]
    gets = [i for i, h in enumerate(header) if re.match(r"^epoch \d+ GETs / MiB", h)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.8 / len(rows)
    palette = ["#4c72b0", "#64b5cd", "#c44e52", "#dd8452", "#55a868", "#8172b2"]
    for k, r in enumerate(rows):
        xs = [e + (k - (len(rows) - 1) / 2) * width for e in range(len(secs))]
        axes[0].bar(xs, [number(r[i]) for i in secs], width, label=r[0], color=palette[k % 6])
        xs = [e + (k - (len(rows) - 1) / 2) * width for e in range(len(gets))]
        axes[1].bar(xs, [number(r[i].split("/")[-1]) for i in gets], width, label=r[0],
                    color=palette[k % 6])
    for ax, cols, label in ((axes[0], secs, "seconds (epoch 1 from the mount)"),
                            (axes[1], gets, "MiB fetched from the bucket (GET bodies)")):
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels([str(e + 1) for e in range(len(cols))])
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    m = re.search(r"\((\d+) ms per request\)", text)
    fig.suptitle("S3 through a %s proxy: DataLoader(num_workers=8) raw reads at equal cache" %
                 ("%s ms" % m.group(1) if m else "latency") + note, fontsize=10)
    return save(fig, path)


def plot_disk_tier(text, path, note=""):
    """Storage MiB per epoch with the disk tier, across the remount: one bar
    per reader and epoch, the optimum as steps."""
    t = find_table(text, "reader", "phase", "epoch", "MiB read", "optimum MiB")
    if not t:
        return None
    header, rows = t
    col = {h: i for i, h in enumerate(header)}
    readers = []
    for r in rows:
        if r[col["reader"]] not in readers and number(r[col["epoch"]]) is not None:
            readers.append(r[col["reader"]])
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.8 / max(1, len(readers))
    palette = ["#4c72b0", "#c44e52", "#8172b2"]
    opt = {}
    for k, reader in enumerate(readers):
        xs, ys = [], []
        for r in rows:
            # rows of the paired direct epochs have no epoch of their own
            if r[col["reader"]] != reader or number(r[col["epoch"]]) is None:
                continue
            e = int(number(r[col["epoch"]]))
            xs.append(e + (k - (len(readers) - 1) / 2) * width)
            ys.append(number(r[col["MiB read"]]))
            opt[e] = number(r[col["optimum MiB"]])
        ax.bar(xs, ys, width, label=reader, color=palette[k % len(palette)])
    es = sorted(opt)
    ax.step([e - 0.5 for e in es] + [es[-1] + 0.5], [opt[e] for e in es] + [opt[es[-1]]],
            where="post", color=COLORS["optimum"], label="optimum")
    firsts = [int(number(r[col["epoch"]])) for r in rows
              if r[col["phase"]] == "first mount" and number(r[col["epoch"]]) is not None]
    if firsts:
        ax.axvline(max(firsts) + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.text(max(firsts) + 0.55, ax.get_ylim()[1] * 0.9, "remount", fontsize=8, color="grey")
    ax.set_xticks(es)
    ax.set_xlabel("epoch (fresh random order)")
    ax.set_ylabel("MiB read from storage")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("Disk tier: storage bytes per epoch across a remount" + note, fontsize=10)
    return save(fig, path)


PLOTTERS = {"cache_efficiency": [("storage-per-epoch", plot_storage)],
            "disk_tier": [("disk-tier", plot_disk_tier)],
            "s3": [("s3-epochs", plot_s3)],
            "warm_read": [("warm-read", plot_warm)],
            "prepared": [("prepared", plot_prepared)]}


def plot_markdown(bench, text, outdir, prefix):
    """Plots of one benchmark's fresh markdown, as OUTDIR/PREFIX-KIND.png."""
    written = []
    for kind, fn in PLOTTERS.get(bench, []):
        p = fn(text, os.path.join(outdir, "%s-%s.png" % (prefix, kind)))
        if p:
            written.append(p)
    return written


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    done = {}
    for src in sys.argv[2:]:
        with open(src) as f:
            text = f.read()
        note = "\n(from %s)" % os.path.relpath(src)
        for name, fn in (("storage-per-epoch", plot_storage), ("warm-read", plot_warm),
                         ("prepared", plot_prepared), ("s3-epochs", plot_s3),
                         ("disk-tier", plot_disk_tier)):
            if name not in done:
                p = fn(text, os.path.join(outdir, name + ".png"), note)
                if p:
                    done[name] = p
                    print(p)
    if not done:
        sys.exit("plots: no benchmark table found in %s" % " ".join(sys.argv[2:]))


if __name__ == "__main__":
    main()
