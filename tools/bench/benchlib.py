# SPDX-License-Identifier: MIT
"""Shared plumbing of the coordfs benchmarks (tools/bench/*).

Loop-device ext4 datasets (storage reads counted exactly in /proc/diskstats),
cgroup v1 memory and blkio groups, coordfs and passthrough_ll mounts, the C
reader, markdown tables and result files. Every resource is registered with
a cleanup stack that runs on normal exit, exceptions and SIGINT/SIGTERM, so
no mount, loop device or cgroup outlives a benchmark.
"""
import atexit
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "out")
WORK = os.environ.get("BENCH_WORK", "/var/tmp/coordfs-bench")
COORDFS = os.environ.get("COORDFS_BIN", os.path.join(TOP, "build", "fs", "coordfs"))
PY = "/usr/bin/python3"
CG_PREFIX = "coordfs-bench"

# ---------------------------------------------------------------- cleanup

_cleanups = []


def on_cleanup(fn, *args):
    """Register fn(*args) to run at exit (last registered runs first)."""
    item = (fn, args)
    _cleanups.append(item)
    return item


def run_cleanup(item):
    """Run one registered cleanup now and forget it."""
    if item in _cleanups:
        _cleanups.remove(item)
        try:
            item[0](*item[1])
        except Exception as e:  # keep cleaning the rest
            print("bench: cleanup %s failed: %s" % (item[0].__name__, e), file=sys.stderr)


def _cleanup_all():
    while _cleanups:
        run_cleanup(_cleanups[-1])


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


atexit.register(_cleanup_all)
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, _on_signal)

# ---------------------------------------------------------------- helpers


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def sh(cmd, check=True, capture=False, **kw):
    """Run argv (list) or a shell string."""
    shell = isinstance(cmd, str)
    r = subprocess.run(cmd, shell=shell, check=check, text=True,
                       stdout=subprocess.PIPE if capture else None, **kw)
    return r.stdout if capture else r.returncode


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = str(s).strip().upper()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def env_size(name, default):
    return parse_size(os.environ.get(name, default))


def env_int(name, default):
    return int(os.environ.get(name, default))


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def drop_caches(what=3):
    """what: 3 drops file data, dentries and inodes; 1 file data only."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("%d\n" % what)


def need_root():
    if os.geteuid() != 0:
        sys.exit("bench: must run as root (loop devices, cgroups, drop_caches)")


def machine():
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "mem_total": mem, "kernel": platform.release(), "cpu": cpu}


def machine_line():
    m = machine()
    return "%d cores (%s), %s RAM, Linux %s" % (m["nproc"], m["cpu"], human(m["mem_total"]), m["kernel"])


# ---------------------------------------------------------------- binaries


def reader_bin():
    """Compile tools/bench/reader.c into WORK/bin (cached by mtime)."""
    src = os.path.join(HERE, "reader.c")
    out = os.path.join(WORK, "bin", "reader")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        sh(["cc", "-O2", "-Wall", "-Wextra", "-pthread", "-o", out, src])
    return out


def passthrough_ll_bin():
    """Compile libfuse's passthrough_ll example (never committed)."""
    out = os.path.join(WORK, "bin", "passthrough_ll")
    if os.path.exists(out):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    exdir = "/usr/share/doc/libfuse3-dev/examples"
    for name in ("passthrough_ll.c", "passthrough_helpers.h"):
        base = os.path.join(exdir, name)
        dst = os.path.join(WORK, "bin", name)
        if os.path.exists(base):
            shutil.copy(base, dst)
        elif os.path.exists(base + ".gz"):
            with open(dst, "wb") as f:
                f.write(subprocess.run(["gunzip", "-c", base + ".gz"], check=True,
                                       stdout=subprocess.PIPE).stdout)
        elif name.endswith(".c"):
            sys.exit("bench: %s(.gz) missing: install libfuse3-dev" % base)
    src = os.path.join(WORK, "bin", "passthrough_ll.c")
    flags = sh("pkg-config --cflags --libs fuse3", capture=True).split()
    sh(["cc", "-O2", "-D_FILE_OFFSET_BITS=64", "-o", out, src] + flags)
    return out


def coordfs_bin():
    if not os.access(COORDFS, os.X_OK):
        sys.exit("bench: %s missing: meson setup build -Dbuildtype=release && ninja -C build" % COORDFS)
    return COORDFS


# ---------------------------------------------------------------- cgroups (v1)


class Cgroup:
    """A cgroup v1 group under one controller, removed at cleanup."""

    def __init__(self, ctrl, name):
        base = "/sys/fs/cgroup/%s" % ctrl
        if not os.path.isdir(base):
            sys.exit("bench: cgroup v1 controller %s is not mounted at %s" % (ctrl, base))
        self.ctrl = ctrl
        self.path = os.path.join(base, "%s-%s-%d" % (CG_PREFIX, name, os.getpid()))
        os.makedirs(self.path, exist_ok=True)
        self._item = on_cleanup(self._remove)

    def set(self, key, value):
        with open(os.path.join(self.path, key), "w") as f:
            f.write("%s\n" % value)

    def get(self, key):
        with open(os.path.join(self.path, key)) as f:
            return f.read()

    def get_int(self, key):
        return int(self.get(key).split()[0])

    def add(self, pid):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write("%d\n" % pid)

    def oom_kills(self):
        for line in self.get("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def _remove(self):
        parent = os.path.dirname(self.path)
        for _ in range(50):
            try:
                pids = self.get("cgroup.procs").split()
            except FileNotFoundError:
                return
            for p in pids:
                try:
                    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                        f.write(p + "\n")
                except OSError:
                    pass
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print("bench: could not remove cgroup %s" % self.path, file=sys.stderr)

    def close(self):
        run_cleanup(self._item)


def memory_cgroup(name, limit):
    cg = Cgroup("memory", name)
    cg.set("memory.limit_in_bytes", limit)
    return cg


def blkio_cgroup(name, majmin, read_bps):
    cg = Cgroup("blkio", name)
    if read_bps:
        cg.set("blkio.throttle.read_bps_device", "%s %d" % (majmin, read_bps))
    return cg


def _enter_cgroups(cgroups):
    def fn():
        for cg in cgroups:
            with open(os.path.join(cg.path, "cgroup.procs"), "w") as f:
                f.write("%d\n" % os.getpid())
    return fn


def popen_in(cgroups, argv, **kw):
    """Start argv with its pid already inside every cgroup of cgroups."""
    return subprocess.Popen(argv, preexec_fn=_enter_cgroups(cgroups), **kw)


def run_in(cgroups, argv, **kw):
    return subprocess.run(argv, preexec_fn=_enter_cgroups(cgroups), **kw)


# ---------------------------------------------------------------- loop datasets


def diskstats_read_bytes(dev):
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == dev:
                return int(p[5]) * 512
    raise RuntimeError("%s not in /proc/diskstats" % dev)


class LoopFs:
    """An ext4 image on a loop device (direct I/O, so the backing file is
    never double-cached), mounted at mnt. Unmounted and detached at cleanup;
    the image file itself is kept for reuse unless remove() is called."""

    def __init__(self, image, mnt):
        self.image = image
        self.mnt = mnt
        self.dev = None
        self.majmin = None
        self._items = []

    def create(self, size, inodes=None):
        if os.path.exists(self.image):
            os.unlink(self.image)
        os.makedirs(os.path.dirname(self.image), exist_ok=True)
        size = (size + (1 << 20) - 1) & ~((1 << 20) - 1)
        with open(self.image, "wb") as f:
            f.truncate(size)
        cmd = ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]
        if inodes:
            cmd += ["-N", str(inodes)]
        sh(cmd + [self.image])

    def attach(self, readonly=True):
        loop = sh(["losetup", "--find", "--show", "--direct-io=on", self.image], capture=True).strip()
        self._items.append(on_cleanup(sh, ["losetup", "-d", loop], False))
        self.dev = os.path.basename(loop)
        with open("/sys/block/%s/dev" % self.dev) as f:
            self.majmin = f.read().strip()
        os.makedirs(self.mnt, exist_ok=True)
        sh(["mount", "-t", "ext4", "-o", ("ro," if readonly else "") + "noatime", loop, self.mnt])
        self._items.append(on_cleanup(sh, ["umount", self.mnt], False))
        return self

    def detach(self):
        for item in reversed(self._items):
            run_cleanup(item)
        self._items = []

    def read_bytes(self):
        return diskstats_read_bytes(self.dev)


def dataset(name, gen_args, image_size, inodes=None):
    """A generated dataset on its own loop image in WORK, reused while the
    generator arguments are unchanged. Returns (LoopFs mounted read-only,
    list path, total bytes, file count)."""
    img = os.path.join(WORK, name + ".img")
    lst = os.path.join(WORK, name + ".list")
    stamp = os.path.join(WORK, name + ".stamp")
    key = json.dumps([gen_args, image_size, inodes])
    fs = LoopFs(img, os.path.join(WORK, "mnt-" + name))
    ok = os.path.exists(img) and os.path.exists(lst) and os.path.exists(stamp) and open(stamp).read() == key
    if not ok:
        log("generating dataset %s (%s)" % (name, " ".join(gen_args)))
        for p in (stamp, lst):
            if os.path.exists(p):
                os.unlink(p)
        fs.create(image_size, inodes)
        fs.attach(readonly=False)
        t = time.time()
        sh([PY, os.path.join(HERE, "gen_dataset.py"), fs.mnt, lst] + gen_args)
        log("generated in %.1f s" % (time.time() - t))
        fs.detach()
        with open(stamp, "w") as f:
            f.write(key)
    fs.attach(readonly=True)
    total = files = 0
    with open(lst) as f:
        for line in f:
            total += int(line.split("\t", 1)[0])
            files += 1
    return fs, lst, total, files


# ---------------------------------------------------------------- FUSE mounts


def stats(mnt):
    return json.loads(os.getxattr(mnt, "user.coordfs.stats"))


def _unmount(mnt, proc):
    if os.path.ismount(mnt):
        sh(["fusermount3", "-u", mnt], check=False, stderr=subprocess.DEVNULL)
    if proc is not None:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if os.path.ismount(mnt):
        sh(["fusermount3", "-uz", mnt], check=False, stderr=subprocess.DEVNULL)


class FuseMount:
    """A FUSE daemon run in the foreground (so its pid is known and it can
    be placed in cgroups before it reads a byte), unmounted at cleanup."""

    def __init__(self, argv, mnt, cgroups=(), log_path=None, ready=None):
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        if os.path.ismount(mnt):
            _unmount(mnt, None)
        self.logf = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.proc = popen_in(list(cgroups), argv, stdout=self.logf, stderr=self.logf)
        self._item = on_cleanup(_unmount, mnt, self.proc)
        deadline = time.time() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d before mounting (log: %s)" %
                                   (argv[0], self.proc.returncode, log_path))
            if os.path.ismount(mnt) and (ready is None or ready(mnt)):
                break
            if time.time() > deadline:
                raise RuntimeError("%s did not mount %s in time" % (argv[0], mnt))
            time.sleep(0.02)
        self.pid = self.proc.pid

    def close(self):
        run_cleanup(self._item)
        if self.logf is not subprocess.DEVNULL:
            self.logf.close()


def _coordfs_ready(mnt):
    try:
        stats(mnt)
        return True
    except OSError:
        return False


def coordfs_mount(source, mnt, opts=(), cgroups=(), log_path=None, binary=None, env=None):
    """coordfs in the foreground; BENCH_COORDFS_OPTS (space-separated) adds
    daemon options to every mount, e.g. to compare --no-kernel-cache;
    BENCH_DAEMON_NICE runs it under nice -n VALUE; env (a dict) is added to
    the daemon's environment."""
    extra = os.environ.get("BENCH_COORDFS_OPTS", "").split()
    argv = [binary or coordfs_bin(), "-f"] + list(opts) + extra + [source, mnt]
    if env:
        # env execs the daemon: the pid stays the same.
        argv = ["env"] + ["%s=%s" % kv for kv in sorted(env.items())] + argv
    nice = os.environ.get("BENCH_DAEMON_NICE")
    if nice:
        # nice execs the daemon: the pid (and its cgroups) stay the same.
        argv = ["nice", "-n", nice] + argv
    return FuseMount(argv, mnt, cgroups, log_path, ready=_coordfs_ready)


def passthrough_mount(source, mnt, cgroups=(), log_path=None):
    argv = [passthrough_ll_bin(), "-f", "-o", "source=%s,cache=always" % source, mnt]
    return FuseMount(argv, mnt, cgroups, log_path)


def cpu_seconds(pid):
    """utime + stime of process pid, its exited threads included."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sched_seconds(pid):
    """(CPU seconds, seconds spent runnable but waiting for a CPU) summed
    over every thread of pid, from /proc/PID/task/*/schedstat."""
    cpu = wait = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                a = f.read().split()
        except OSError:
            continue
        cpu += int(a[0])
        wait += int(a[1])
    return cpu / 1e9, wait / 1e9


# ---------------------------------------------------------------- output


def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def save(name, markdown, data):
    """Print markdown and save it (+ JSON data and PNG plots) under tools/bench/out/."""
    os.makedirs(OUT, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    head = "## %s\n\n%s UTC, `%s`\n\nMachine: %s\n\n" % (
        name, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        " ".join([os.path.relpath(sys.argv[0], TOP)] + sys.argv[1:]) + env_line(), machine_line())
    text = head + markdown + "\n"
    for path in (os.path.join(OUT, "%s-%s.md" % (name, stamp)), os.path.join(OUT, "%s-latest.md" % name)):
        with open(path, "w") as f:
            f.write(text)
    with open(os.path.join(OUT, "%s-%s.json" % (name, stamp)), "w") as f:
        json.dump({"machine": machine(), "argv": sys.argv, "env": bench_env(), "data": data}, f, indent=1)
    print(text, flush=True)
    # PNG plots next to the tables (tools/bench/plots.py); a missing
    # matplotlib costs the plots, never the numbers.
    try:
        import plots
        for p in plots.plot_markdown(name, text, OUT, "%s-%s" % (name, stamp)):
            log("plot: %s" % os.path.relpath(p, TOP))
    except Exception as e:
        log("no plots for %s: %s" % (name, e))


def bench_env():
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(("BENCH_", "COORDFS_"))}


def env_line():
    e = bench_env()
    return (" (env: " + " ".join("%s=%s" % kv for kv in e.items()) + ")") if e else ""


def read_json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]
