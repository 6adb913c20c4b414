#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Scale benchmark of the shardfs index: millions of tiny members.

One command, as root, from the repository root:

    /usr/bin/python3 tests/bench/scale.py                 # full run (~15-25 min)
    /usr/bin/python3 tests/bench/scale.py --quick         # smoke run (~2 min)
    /usr/bin/python3 tests/bench/scale.py --docs          # also add the results
                                                          # to docs/benchmarks-scale.md
    /usr/bin/python3 tests/bench/scale.py --builds BEFORE/build,AFTER/build
                                                          # two builds side by side:
                                                          # each part by each build
                                                          # in turn, one table

What it measures (every figure is printed, written as JSON and Markdown to
WORKDIR/results/, and with --docs added to docs/benchmarks-scale.md):

1. big set: MEMBERS (10 M) tiny members (0-16 bytes, WebDataset-like
   KEY.cls + KEY.txt pairs in 1,000 directories) in SHARDS (1,000) shards,
   written by a C generator compiled at run time (scale_gen.c):
   - cold index build, shards in the page cache, no index file:
     `shardfs-index -j N` (scan + merge + save), a mount with
     index_mode=off (scan + merge, in memory) and a default mount (scan,
     merge, save, then map the file), in members/s, with peak RSS;
   - mount time with a valid index file (warm, and with caches dropped);
   - daemon RSS after the mount and after a full os.walk (bytes/member);
   - how long an open of the index file for writing waits under a mount
     (the daemon's switch to a private copy), and a mount made while the
     file is open for writing (no lease: the copy made at mount);
2. flat directory: FLAT (1 M) members in one directory, FLAT_SHARDS (100)
   shards: os.scandir of the directory and a stat of every entry, cold
   and warm, against the same directory extracted by GNU tar onto the
   local file system (WORKDIR, normally ext4 under /var/tmp);
3. shard count: LOOKUP_MEMBERS (1 M) members in 10 and in 10,000 shards:
   index build, mount with the index, stat of STATS (100 k) random paths
   and a full walk, both with cold kernel caches.

Big files are removed at the end unless --keep; the generated sets are
reused by a later --keep run with the same sizes.
"""
import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import system  # noqa: E402

T0 = time.time()


def log(msg):
    print("[%7.1fs] %s" % (time.time() - T0, msg), flush=True)


def human(n):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return "%.2f %s" % (n / div, unit)
    return "%.0f" % n


def mib(b):
    return b / 2**20


# ------------------------------------------------------------ processes


def run(argv, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise SystemExit("scale: %s failed (%d): %s" % (argv[0], r.returncode,
                                                        r.stderr[-3000:]))
    return r


def timed_child(argv):
    """Run ARGV; returns (seconds, peak RSS bytes, stderr, exit status)."""
    with tempfile.TemporaryFile() as errf:
        start = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errf)
        _, status, ru = os.wait4(p.pid, 0)
        secs = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        errf.seek(0)
        text = errf.read().decode(errors="replace")
    return secs, ru.ru_maxrss * 1024, text, p.returncode


def is_mounted(mp):
    mp = os.path.realpath(mp)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == mp for line in f)


def unmount(mp):
    if not is_mounted(mp):
        return
    subprocess.run(["fusermount3", "-u", mp], stderr=subprocess.DEVNULL)
    for _ in range(200):
        if not is_mounted(mp):
            return
        time.sleep(0.05)
    subprocess.run(["fusermount3", "-uz", mp], stderr=subprocess.DEVNULL)


class Mount:
    """shardfs SPEC MP [options] for a with-block; times the mount (the
    command returns once the mount is usable)."""

    def __init__(self, bench, spec, mp, *options):
        self.argv = [bench.shardfs, "-o", "loglevel=debug", *options, spec, mp]
        self.mp = mp

    def __enter__(self):
        os.makedirs(self.mp, exist_ok=True)
        unmount(self.mp)
        self.seconds, self.peak, self.stderr, rc = timed_child(self.argv)
        if rc != 0:
            unmount(self.mp)
            raise SystemExit("scale: mount failed (%d): %s" % (rc, self.stderr[-3000:]))
        self.pid = system.daemon_pid(self.mp)
        return self

    def origin(self):
        for line in self.stderr.splitlines():
            if "debug: index file " in line:
                return line.split("debug: index file ", 1)[1]
        return "?"

    def rss(self):
        return proc_memory(self.pid)

    def __exit__(self, *exc):
        unmount(self.mp)
        # a daemon still exiting (one that built 20 M members in memory
        # takes seconds to free it) would be the next mount's daemon_pid()
        deadline = time.time() + 120
        while self.pid and os.path.exists("/proc/%d" % self.pid) and time.time() < deadline:
            time.sleep(0.05)


def proc_memory(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) * 1024
    return out


# ------------------------------------------------------------ file system


def walk(root):
    """os.walk ROOT: (entries, seconds)."""
    n = 0
    start = time.perf_counter()
    for _, dirs, files in os.walk(root):
        n += len(dirs) + len(files)
    return n, time.perf_counter() - start


def scandir_stat(d):
    """os.scandir of D, then a stat of every entry: (entries, scandir s,
    stat s)."""
    start = time.perf_counter()
    names = [e.name for e in os.scandir(d)]
    t_scan = time.perf_counter() - start
    start = time.perf_counter()
    for name in names:
        os.lstat(os.path.join(d, name))
    return len(names), t_scan, time.perf_counter() - start


def stat_paths(root, paths):
    start = time.perf_counter()
    for p in paths:
        os.lstat(os.path.join(root, p))
    return time.perf_counter() - start


def daemon_ops(mp):
    """Per-operation (count, mean µs) from the mount's /.shardfs/stats."""
    with open(os.path.join(mp, ".shardfs", "stats")) as f:
        ops = json.load(f)["ops"]
    return {k: (v["count"], v["mean_us"]) for k, v in ops.items()}


def daemon_delta(before, after, op):
    """Requests of OP answered between two daemon_ops() readings and their
    mean time inside the daemon (µs)."""
    n0, m0 = before.get(op, (0, 0))
    n1, m1 = after.get(op, (0, 0))
    n = n1 - n0
    return n, ((n1 * m1 - n0 * m0) / n if n else 0.0)


def warm(d):
    """Read every shard once so that the build finds them in the page
    cache (the measurement is of the index build, not of the disk)."""
    start = time.perf_counter()
    total = 0
    for name in sorted(os.listdir(d)):
        if name.endswith(".tar"):
            with open(os.path.join(d, name), "rb", buffering=0) as f:
                while True:
                    b = f.read(8 << 20)
                    if not b:
                        break
                    total += len(b)
    return total, time.perf_counter() - start


def du(d):
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))


# ------------------------------------------------------------ the benchmark


class Bench:
    def __init__(self, args, nth=0):
        self.args = args
        self.work = os.path.abspath(args.workdir)
        self.bin = os.path.join(self.work, "bin-%d" % nth if nth else "bin")
        self.results = {"sections": []}
        self.md = []
        self.generated = []

    # -- setup

    def prepare(self):
        os.makedirs(self.bin, exist_ok=True)
        for prog in ("shardfs", "shardfs-index"):
            src = os.path.join(os.path.abspath(self.args.build), prog)
            if not os.access(src, os.X_OK):
                raise SystemExit("scale: %s not built (see --build)" % src)
            shutil.copy2(src, os.path.join(self.bin, prog))
        self.shardfs = os.path.join(self.bin, "shardfs")
        self.index = os.path.join(self.bin, "shardfs-index")
        self.gen = os.path.join(self.bin, "scale_gen")
        run(["cc", "-O2", "-Wall", "-o", self.gen, os.path.join(HERE, "scale_gen.c")])
        need = self.disk_needed()
        free = system.free_bytes(self.work)
        log("workdir %s: %.1f GiB free, about %.1f GiB needed at the peak"
            % (self.work, free / 2**30, need / 2**30))
        if free < need:
            raise SystemExit("scale: not enough free disk in %s (%.1f GiB free, "
                             "%.1f GiB needed); lower the sizes or use --workdir"
                             % (self.work, free / 2**30, need / 2**30))

    def disk_needed(self):
        a = self.args
        # a member is a header plus at most one data block (1 KiB at most);
        # the index is ~90 bytes per member; ext4 spends a 4 KiB block per
        # non-empty file plus its inode
        big = a.members * 1024 * 1.1 if "big" in a.parts else 0
        flat = a.flat * 1024 * 1.1 + a.flat * 4096 if "flat" in a.parts else 0
        shards = 2 * a.lookup_members * 1024 * 1.1 if "shards" in a.parts else 0
        return max(big, flat, shards) + (2 << 30)

    def generate(self, d, shards, members, dirs):
        """Shards in D (reused when a --keep run left the same set)."""
        per = members // shards
        if per % 2:
            raise SystemExit("scale: members per shard must be even (%d)" % per)
        stamp = os.path.join(d, ".generated")
        want = "%d %d %d\n" % (shards, per, dirs)
        if os.path.exists(stamp) and open(stamp).read() == want:
            log("%s: reusing %d shards of %d members" % (d, shards, per))
            return
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        jobs = max(1, min(self.args.jobs, shards))
        start = time.perf_counter()
        procs = []
        for j in range(jobs):
            first = shards * j // jobs
            count = shards * (j + 1) // jobs - first
            procs.append(subprocess.Popen([self.gen, d, str(count), str(per), str(dirs),
                                           str(first)]))
        if any(p.wait() for p in procs):
            raise SystemExit("scale: generator failed")
        secs = time.perf_counter() - start
        with open(stamp, "w") as f:
            f.write(want)
        line = ("%s members in %d shards (%.2f GiB) in %.1f s (%s members/s, %d processes)"
                % (human(per * shards), shards, du(d) / 2**30, secs,
                   human(per * shards / secs), jobs))
        log("%s: generated %s" % (d, line))
        self.generated.append(line)

    def remove(self, path):
        if self.args.keep:
            return
        shutil.rmtree(path, ignore_errors=True)

    # -- output

    def section(self, title, rows, note=None):
        self.results["sections"].append({"title": title, "rows": rows, "note": note})
        self.md.append("#### %s\n" % title)
        if note:
            self.md.append(note + "\n")
        self.md.append("| measurement | value |\n|---|---|")
        for k, v in rows:
            self.md.append("| %s | %s |" % (k, v))
        self.md.append("")
        for k, v in rows:
            log("  %-58s %s" % (k, v))

    # -- part 1: the big set

    def part_big(self):
        a = self.args
        d = os.path.join(self.work, "big")
        mp = os.path.join(self.work, "mnt-big")
        self.generate(d, a.shards, a.members, a.dirs)
        idx = os.path.join(d, ".shard-000000.tar.shardfs-index")
        size, secs = warm(d)
        log("big: shards read into the page cache (%.2f GiB, %.1f s)" % (size / 2**30, secs))
        rows = []

        if os.path.exists(idx):
            os.unlink(idx)
        secs, peak, err, rc = timed_child([self.index, "-j", str(a.jobs), d])
        if rc:
            raise SystemExit("scale: shardfs-index failed: %s" % err[-2000:])
        rows.append(("cold build, `shardfs-index -j %d` (scan, merge, save)" % a.jobs,
                     "%.1f s, **%s members/s**, peak RSS %.0f MiB"
                     % (secs, human(a.members / secs), mib(peak))))
        rows.append(("index file size", "%.0f MiB (%.1f bytes/member)"
                     % (mib(os.path.getsize(idx)), os.path.getsize(idx) / a.members)))

        with Mount(self, d, mp, "-o", "index_mode=off,scan_threads=%d" % a.jobs) as m:
            rows.append(("cold build via mount (`index_mode=off`, %d scan threads)" % a.jobs,
                         "%.1f s, **%s members/s**, RSS after mount %.0f MiB"
                         % (m.seconds, human(a.members / m.seconds),
                            mib(m.rss()["VmRSS"]))))
        # what a new user's first mount does: build the index and save it
        # (the mounts below load the file it saved)
        os.unlink(idx)
        with Mount(self, d, mp, "-o", "scan_threads=%d" % a.jobs) as m:
            assert m.origin().endswith(": built, saved"), m.origin()
            rows.append(("cold build via a default mount (%d scan threads; builds and saves "
                         "the index)" % a.jobs,
                         "%.1f s, **%s members/s**, RSS after mount %.0f MiB"
                         % (m.seconds, human(a.members / m.seconds),
                            mib(m.rss()["VmRSS"]))))

        times = []
        for i in range(3):
            with Mount(self, d, mp) as m:
                assert m.origin().endswith(": loaded"), m.origin()
                times.append(m.seconds)
                if i == 2:
                    mem0 = m.rss()
                    n, wsecs = walk(mp)
                    mem1 = m.rss()
                    # a writer waits while the daemon switches to a copy
                    start = time.perf_counter()
                    with open(idx, "r+b"):
                        wait = time.perf_counter() - start
                    mem3 = m.rss()
        # no lease while someone has the file open for writing: the daemon
        # serves a private copy made at mount
        with open(idx, "r+b"):
            with Mount(self, d, mp) as m:
                assert m.origin().endswith(": loaded"), m.origin()
                held = m.seconds, m.rss()
        rows.append(("mount with a valid index (page cache warm), median of 3",
                     "**%.2f s** (%s)" % (statistics.median(times),
                                          ", ".join("%.2f" % t for t in times))))
        rows.append(("daemon RSS after mount", "%.0f MiB (anon %.0f, file %.0f) = %.1f bytes/member"
                     % (mib(mem0["VmRSS"]), mib(mem0["RssAnon"]), mib(mem0["RssFile"]),
                        mem0["VmRSS"] / a.members)))
        rows.append(("full os.walk", "%s entries in %.1f s (%s entries/s)"
                     % (human(n), wsecs, human(n / wsecs))))
        rows.append(("daemon RSS after the walk", "%.0f MiB (anon %.0f, file %.0f) = %.1f bytes/member"
                     % (mib(mem1["VmRSS"]), mib(mem1["RssAnon"]), mib(mem1["RssFile"]),
                        mem1["VmRSS"] / a.members)))
        rows.append(("open of the index file for writing under the mount", "waited %.2f s; "
                     "daemon RSS then %.0f MiB (anon %.0f, file %.0f)"
                     % (wait, mib(mem3["VmRSS"]), mib(mem3["RssAnon"]), mib(mem3["RssFile"]))))
        rows.append(("mount while the index file is open for writing (warm)",
                     "%.2f s; daemon RSS %.0f MiB (anon %.0f, file %.0f)"
                     % (held[0], mib(held[1]["VmRSS"]), mib(held[1]["RssAnon"]),
                        mib(held[1]["RssFile"]))))

        system.drop_caches()
        with Mount(self, d, mp) as m:
            assert m.origin().endswith(": loaded"), m.origin()
            rows.append(("mount with a valid index, caches dropped (index read from disk)",
                         "**%.2f s**" % m.seconds))
        self.section("%s members in %s shards (%d directories)"
                     % (human(a.members), human(a.shards), a.dirs), rows,
                     "Since issue 30 the daemon maps the index file under a read "
                     "lease (\"file\" in its RSS: page cache, reclaimable) and "
                     "switches to a private copy when someone opens the file for "
                     "writing; where no lease is granted (the file is open for "
                     "writing at mount) it serves that copy from the start. "
                     "Before, it read the file into a private copy (\"anon\"). "
                     "A mount that builds holds the same arrays on its heap.")
        self.remove(d)

    # -- part 2: one directory of FLAT entries

    def part_flat(self):
        a = self.args
        d = os.path.join(self.work, "flat")
        mp = os.path.join(self.work, "mnt-flat")
        ref = os.path.join(self.work, "flat-extracted")
        self.generate(d, a.flat_shards, a.flat, 0)
        rows = []
        stamp = os.path.join(ref, ".extracted")
        if not os.path.exists(stamp) or open(stamp).read() != open(os.path.join(d, ".generated")).read():
            shutil.rmtree(ref, ignore_errors=True)
            os.makedirs(ref)
            start = time.perf_counter()
            shards = sorted(n for n in os.listdir(d) if n.endswith(".tar"))
            cat = subprocess.Popen(["cat", *[os.path.join(d, s) for s in shards]],
                                   stdout=subprocess.PIPE)
            tar = subprocess.run(["tar", "-x", "--ignore-zeros", "-f", "-", "-C", ref],
                                 stdin=cat.stdout)
            cat.wait()
            if tar.returncode:
                raise SystemExit("scale: tar -x failed")
            shutil.copy(os.path.join(d, ".generated"), stamp)
            log("flat: extracted with GNU tar in %.1f s" % (time.perf_counter() - start))
        fstype = run(["findmnt", "-n", "-o", "FSTYPE", "--target", ref]).stdout.strip()
        warm(d)
        with Mount(self, d, mp, "-o", "scan_threads=%d" % a.jobs) as m:
            rows.append(("index build via mount", "%.1f s (%s members/s)"
                         % (m.seconds, human(a.flat / m.seconds))))
        for name, root, opts in (("shardfs", os.path.join(mp, "all"), ()),
                                 (fstype, os.path.join(ref, "all"), None)):
            mount = Mount(self, d, mp, *opts) if opts is not None else None
            try:
                if mount:
                    mount.__enter__()
                system.drop_caches()
                n, t_scan, t_stat = scandir_stat(root)
                assert n == a.flat, (n, a.flat)
                n, t_scan2, t_stat2 = scandir_stat(root)
                names = os.listdir(root)
                random.Random(1).shuffle(names)
                names = names[:a.stats]
                system.drop_caches()
                ops0 = daemon_ops(mp) if mount else {}
                t_cold_stat = stat_paths(root, names)
                lookups = daemon_delta(ops0, daemon_ops(mp), "lookup") if mount else None
                rows.append(("%s: os.scandir, cold" % name,
                             "%.2f s, **%s entries/s**" % (t_scan, human(n / t_scan))))
                rows.append(("%s: stat of every entry right after (scandir order)" % name,
                             "%.2f s, **%s entries/s**" % (t_stat, human(n / t_stat))))
                rows.append(("%s: os.scandir + stat again, warm" % name,
                             "%.2f s + %.2f s, %s entries/s"
                             % (t_scan2, t_stat2, human(n / (t_scan2 + t_stat2)))))
                rows.append(("%s: stat of %s entries in random order, cold (no readdir)"
                             % (name, human(len(names))),
                             "%.2f s, **%s entries/s** (%.1f µs/stat)"
                             % (t_cold_stat, human(len(names) / t_cold_stat),
                                t_cold_stat / len(names) * 1e6)))
                if lookups:
                    rows.append(("shardfs: of which inside the daemon",
                                 "%s lookups, %.1f µs each" % (human(lookups[0]), lookups[1])))
                if mount:
                    mem = mount.rss()
                    rows.append(("shardfs: daemon RSS", "%.0f MiB" % mib(mem["VmRSS"])))
            finally:
                if mount:
                    mount.__exit__(None, None, None)
        self.section("one directory of %s entries (%d shards) vs the same directory on %s"
                     % (human(a.flat), a.flat_shards, fstype), rows,
                     "The reference is GNU tar's extraction of the same shards into %s "
                     "(%s). \"cold\": `echo 3 > /proc/sys/vm/drop_caches` first "
                     "(shardfs keeps its index; the kernel forgets its dentries and inodes)."
                     % (ref, system.describe_disk(ref)))
        self.remove(d)
        self.remove(ref)

    # -- part 3: few big shards vs many small ones

    def part_shards(self):
        a = self.args
        rows = []
        rng = random.Random(7)
        samples = a.lookup_members // 2
        keys = [rng.randrange(samples) for _ in range(a.stats)]
        paths = ["d%04d/%012d.%s" % (k % a.dirs, k, "cls" if i % 2 else "txt")
                 for i, k in enumerate(keys)]
        for count in a.shard_counts:
            d = os.path.join(self.work, "shards-%d" % count)
            mp = os.path.join(self.work, "mnt-shards")
            self.generate(d, count, a.lookup_members, a.dirs)
            idx = os.path.join(d, ".shard-000000.tar.shardfs-index")
            if os.path.exists(idx):
                os.unlink(idx)
            warm(d)
            secs, peak, err, rc = timed_child([self.index, "-j", str(a.jobs), d])
            if rc:
                raise SystemExit("scale: shardfs-index failed: %s" % err[-2000:])
            rows.append(("%d shards: cold build, `shardfs-index -j %d`" % (count, a.jobs),
                         "%.2f s (%s members/s)" % (secs, human(a.lookup_members / secs))))
            with Mount(self, d, mp) as m:
                assert m.origin().endswith(": loaded"), m.origin()
                rows.append(("%d shards: mount with the index" % count, "%.2f s" % m.seconds))
                system.drop_caches()
                ops0 = daemon_ops(mp)
                t = stat_paths(mp, paths)
                n_lookups, us = daemon_delta(ops0, daemon_ops(mp), "lookup")
                rows.append(("%d shards: stat of %s random paths, cold" % (count, human(len(paths))),
                             "%.2f s, **%.1f µs/stat**; in the daemon: %s lookups, %.1f µs each"
                             % (t, t / len(paths) * 1e6, human(n_lookups), us)))
                t = stat_paths(mp, paths)
                rows.append(("%d shards: the same stats again, warm" % count,
                             "%.2f s, %.1f µs/stat" % (t, t / len(paths) * 1e6)))
                system.drop_caches()
                ops0 = daemon_ops(mp)
                n, t = walk(mp)
                n_rd, us = daemon_delta(ops0, daemon_ops(mp), "readdir")
                rows.append(("%d shards: full os.walk, cold" % count,
                             "%s entries in %.2f s, **%s entries/s**; in the daemon: "
                             "%s readdir requests, %.1f µs each"
                             % (human(n), t, human(n / t), human(n_rd), us)))
                rows.append(("%d shards: daemon RSS after the walk" % count,
                             "%.0f MiB" % mib(m.rss()["VmRSS"])))
            self.remove(d)
        self.section("%s members: %s shards" % (human(a.lookup_members),
                                                 " vs ".join(human(c) for c in a.shard_counts)),
                     rows, "Same member names and directories (%d) in both sets; the "
                     "stats look up the same random paths." % a.dirs)

    # -- report

    def report(self, builds=None):
        """Print and save the results; BUILDS: the builds they compare
        (report_side_by_side()), else this bench's own."""
        a = self.args
        info = system.machine_info(self.work)
        version = run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                      check=False).stdout.strip() or "?"
        cmd = "/usr/bin/python3 tests/bench/scale.py " + " ".join(sys.argv[1:])
        date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        defaults = parse_args([])
        kind = "quick run" if a.quick else "full run" if all(
            getattr(a, k) == getattr(defaults, k) for k in
            ("members", "shards", "dirs", "flat", "flat_shards", "lookup_members",
             "shard_counts", "stats")) else "custom sizes"
        head = ["### %s, %s" % (date, kind), "",
                "- command: `%s`" % cmd.strip(),
                "- shardfs: %s (%s)" % (version, ", ".join(
                    "`%s`" % os.path.abspath(b) for b in builds or [a.build])),
                "- machine: %s; %s RAM; %s; kernel %s"
                % (info["cpu"], info["ram"], info["disk"], info["kernel"]),
                "- load average at the start: %.2f%s" % (
                    self.load, "" if getattr(self, "quiet", True) else
                    " (the machine did not get quiet: figures may be skewed)"),
                "- total run time: %.0f s (of which %.0f s waiting for a quiet machine)"
                % (time.time() - T0, getattr(self, "waited", 0)), ""]
        if self.generated:
            head[-1:-1] = ["- data generation (scale_gen.c): " + "; ".join(self.generated)]
        text = "\n".join(head + self.md) + "\n"
        self.results.update({"date": date, "command": cmd, "machine": info,
                             "version": version})
        out = os.path.join(self.work, "results")
        os.makedirs(out, exist_ok=True)
        stem = os.path.join(out, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
        with open(stem + ".json", "w") as f:
            json.dump(self.results, f, indent=1)
        with open(stem + ".md", "w") as f:
            f.write(text)
        log("results in %s.{json,md}" % stem)
        if a.docs:
            add_to_docs(a.docs, text)
            log("added to %s" % a.docs)
        print()
        print(text)


def report_side_by_side(benches):
    """One table per section, a column per build, rows matched by their
    measurement; the JSON holds every build's results whole."""
    first = benches[0]
    columns = ["`%s`" % b.args.build for b in benches]
    md = []
    for j, sec in enumerate(first.results["sections"]):
        md += ["#### %s\n" % sec["title"]] + ([sec["note"] + "\n"] if sec["note"] else [])
        md += ["| measurement | %s |" % " | ".join(columns),
               "|---|" + "---|" * len(benches)]
        values = [dict(b.results["sections"][j]["rows"]) for b in benches]
        md += ["| %s | %s |" % (k, " | ".join(v.get(k, "–") for v in values))
               for k, _ in sec["rows"]]
        md.append("")
    first.md = md
    first.generated = [line for b in benches for line in b.generated]
    first.results = {"sections": first.results["sections"],
                     "builds": [{"build": b.args.build, "sections": b.results["sections"]}
                                for b in benches]}
    first.report([b.args.build for b in benches])


DOC_HEAD = """# Scale benchmarks

`tests/bench/scale.py` measures how the index behaves with millions of
tiny members: how fast it is built, how fast a mount with a saved index
file is, what the daemon's memory costs per member, how a directory of a
million entries lists and stats compared with the local file system, and
whether the number of shards (10 vs 10,000 for the same members) changes
lookup and readdir costs.

Run it as root from the repository root (it drops caches and mounts):

    /usr/bin/python3 tests/bench/scale.py --docs          # full run, adds a section below
    /usr/bin/python3 tests/bench/scale.py --quick         # smoke run, ~2 min
    /usr/bin/python3 tests/bench/scale.py --builds BEFORE/build,AFTER/build
                                                          # side by side

Options: `--members` (10 M), `--shards` (1,000), `--flat` (1 M),
`--flat-shards` (100), `--lookup-members` (1 M), `--shard-counts`
(10,10000), `--stats` (100 k random stats), `--parts` (big,flat,shards),
`--jobs` (2), `--workdir` (/var/tmp/shardfs-scale), `--build` (build),
`--builds` (several builds, each part run by each in turn, the order
alternating part by part, reported in one table a column per build),
`--keep` (keep the generated shards and the extracted directory for the
next run), `--max-load` (1.5: first wait, up to `--wait` s, for a quiet
machine and for other `tests/bench/` runs to end, as they drop caches).
It checks the free disk space first and needs about 1.1 KiB per member of
the largest set. Never edit the figures by hand: rerun the benchmark.

## Results
"""


def add_to_docs(path, text):
    if os.path.exists(path):
        doc = open(path).read()
    else:
        doc = DOC_HEAD
    marker = "## Results\n"
    if marker not in doc:
        doc += "\n" + marker
    head, tail = doc.split(marker, 1)
    doc = head + marker + "\n" + text + "\n" + tail.lstrip("\n")
    with open(path, "w") as f:
        f.write(doc)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=10_000_000)
    p.add_argument("--shards", type=int, default=1000)
    p.add_argument("--dirs", type=int, default=1000)
    p.add_argument("--flat", type=int, default=1_000_000)
    p.add_argument("--flat-shards", type=int, default=100)
    p.add_argument("--lookup-members", type=int, default=1_000_000)
    p.add_argument("--shard-counts", default="10,10000")
    p.add_argument("--stats", type=int, default=100_000)
    p.add_argument("--parts", default="big,flat,shards")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--workdir", default="/var/tmp/shardfs-scale")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--builds", help="BUILD,BUILD,...: each part run by each build in "
                                    "turn (the order alternating part by part) and "
                                    "reported side by side; replaces --build")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--max-load", type=float, default=1.5,
                   help="first wait for a 1-minute load average below this and for "
                        "other tests/bench/ runs to end (they drop caches too)")
    p.add_argument("--wait", type=int, default=1200, help="at most this many s")
    p.add_argument("--quick", action="store_true",
                   help="1 M members in 100 shards, 100 k flat, 100 k in 10 vs 1,000 shards")
    p.add_argument("--docs", nargs="?", const=os.path.join(ROOT, "docs", "benchmarks-scale.md"))
    a = p.parse_args(argv)
    if a.quick:
        a.members, a.shards, a.flat, a.flat_shards = 1_000_000, 100, 100_000, 10
        a.lookup_members, a.shard_counts, a.stats = 100_000, "10,1000", 20_000
    a.parts = a.parts.split(",")
    a.shard_counts = [int(c) for c in a.shard_counts.split(",")]
    return a


def main():
    a = parse_args()
    if os.geteuid() != 0:
        raise SystemExit("scale: run as root (drops caches, mounts)")
    builds = a.builds.split(",") if a.builds else [a.build]
    benches = [Bench(argparse.Namespace(**dict(vars(a), build=b)), i)
               for i, b in enumerate(builds)]
    os.makedirs(benches[0].work, exist_ok=True)
    for bench in benches:
        bench.prepare()
    start = time.time()
    quiet = True
    if a.max_load is not None:
        quiet = system.wait_until_quiet(a.max_load, a.wait, log)
    waited, load = time.time() - start, system.load_average()
    for bench in benches:
        bench.quiet, bench.waited, bench.load = quiet, waited, load
    try:
        for i, part in enumerate(p for p in ("big", "flat", "shards") if p in a.parts):
            order = benches if i % 2 == 0 else benches[::-1]
            for bench in order:
                # the part's sets stay for the builds after this one
                bench.args.keep = a.keep or bench is not order[-1]
                log("part %s, build %s" % (part, bench.args.build))
                getattr(bench, "part_" + part)()
    finally:
        for name in os.listdir(benches[0].work):
            if name.startswith("mnt-"):
                unmount(os.path.join(benches[0].work, name))
    if len(benches) == 1:
        benches[0].report()
    else:
        report_side_by_side(benches)


if __name__ == "__main__":
    main()
