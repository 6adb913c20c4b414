#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""shardfs benchmark suite: one run measures, side by side on the same
generated ImageNet-like data set,

  (1) loose   the files as a `<class>/<key>.jpg` tree on local disk,
              which is what users have today;
  (2) shardfs a shardfs mount of the WebDataset shards of those files;
  (3) limit   the physical limit: `cat` of every shard to /dev/null and
              a Python tarfile stream over the shards (what a WebDataset
              loader does).

For (1) and (2) it times the metadata walk, ImageFolder construction,
full reads in sorted, shuffled (1 and 4 threads) and shard order, and a
DataLoader epoch, each cold (page cache, dentries and inodes dropped)
and, where that means something, warm.  For shardfs it also times the
mount, samples the daemon's RSS and CPU time after every step, and
counts with strace the system calls the daemon makes on the shard
storage during a metadata walk and a full read.  Every byte of one full
read pass on each tree is checked against the CRC-32 recorded when the
data set was generated.

The results go to WORKDIR/results/<date>.{json,md}; with --docs, the
markdown section is also added to docs/bench-runs/runs.md (newest first;
docs/benchmarks.md shows the newest).

Run as root with Debian's /usr/bin/python3 (it sees python3-torch):
    tests/bench/run.sh [--quick] [--samples N] [--docs]
"""
import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import resource
import shlex
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import dataset                                   # noqa: E402
import report                                    # noqa: E402
import shardfs_testlib as testlib                # noqa: E402
import system                                    # noqa: E402
import workloads as wl                           # noqa: E402
from strace_count import Traced                  # noqa: E402

SHUFFLE_SEED = 1
WARM_MOUNTS = 3
# shardfs mount options: mount by scanning every shard's headers; scan and
# write the persisted index; mount from that index (fail without it).
SCAN_OPTION = "index_mode=off"
BUILD_INDEX_OPTION = "index_mode=rebuild"
USE_INDEX_OPTION = "index_mode=require"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=50_000,
                   help="samples (each .jpg + .json + .cls), default 50000")
    p.add_argument("--shard-samples", type=int, default=1_000,
                   help="samples per shard, default 1000")
    p.add_argument("--classes", type=int, default=1_000,
                   help="classes (directories), default 1000")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 3000 samples, 100 classes")
    p.add_argument("--workdir", default="/var/tmp/shardfs-bench",
                   help="data set cache, mountpoint and results")
    p.add_argument("--shardfs", default=os.path.join(REPO, "build", "shardfs"),
                   help="shardfs binary (default build/shardfs)")
    p.add_argument("-o", dest="mount_opts", action="append", default=[],
                   help="extra shardfs mount option (repeatable)")
    p.add_argument("--no-index", action="store_true",
                   help="skip the mounts with a persisted index (for a shardfs "
                   "that has none)")
    p.add_argument("--systems", default="limit,loose,shardfs",
                   help="comma list of limit, loose, shardfs")
    p.add_argument("--max-load", type=float, metavar="L",
                   help="first wait (up to 15 min) for a 1-minute load average "
                   "below L and for other benchmarks to finish")
    p.add_argument("--nice", type=int, default=0, metavar="N",
                   help="run at this nice value (e.g. -10 on a shared machine; the "
                   "shardfs daemon and DataLoader workers inherit it)")
    p.add_argument("--no-strace", action="store_true",
                   help="skip the strace system-call counts")
    p.add_argument("--io-uring", choices=("on", "off", "keep"), default="on",
                   help="set the fuse module's enable_uring for the run (default "
                   "on: shardfs then serves requests over io_uring), put back after")
    p.add_argument("--docs", nargs="?", const=os.path.join(REPO, "docs", "bench-runs", "runs.md"),
                   help="add the result section to docs/bench-runs/runs.md (or PATH)")
    args = p.parse_args(argv)
    if args.quick:
        args.samples, args.classes = 3_000, 100
    return args


def log(message):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


def _numbers(tree, prefix=""):
    """Flatten the numbers of a JSON object: {"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_numbers(v, prefix + k + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = v
    return out


class DaemonProbe:
    """Around each step: the daemon's CPU time, its RSS afterwards and,
    when the mount has /.shardfs/stats, how much its counters moved."""

    def __init__(self, pid, mountpoint):
        self.pid, self.steps = pid, {}
        self.stats_path = os.path.join(mountpoint, ".shardfs", "stats")

    def stats(self):
        try:
            with open(self.stats_path) as f:
                return _numbers(json.load(f))
        except (OSError, ValueError):
            return None

    def sample(self, key):
        self.steps[key] = system.process_status(self.pid)

    @contextlib.contextmanager
    def step(self, key):
        cpu, stats = system.process_cpu_seconds(self.pid), self.stats()
        try:
            yield
        finally:
            self.sample(key)
            self.steps[key]["cpu_seconds"] = system.process_cpu_seconds(self.pid) - cpu
            after = self.stats()
            if stats and after:
                self.steps[key]["stats"] = {k: after[k] - stats[k]
                                            for k in after if k in stats}


class NoProbe:
    @contextlib.contextmanager
    def step(self, key):
        yield


@dataclasses.dataclass
class Tree:
    """A directory tree measured by the tree workloads."""
    name: str
    root: str
    probe: object = dataclasses.field(default_factory=NoProbe)


class Bench:
    """One run: the data set, the recorded results and the steps."""

    def __init__(self, args, ds, io_uring):
        self.args, self.ds = args, ds
        self.io_uring = io_uring   # the fuse module's enable_uring, as run
        self.results = {}          # key -> system -> Result as dict
        self.errors = []
        self.daemon = {}
        self.syscalls = {}
        self.stats_file = None
        self.load = {"start": system.load_average(),
                     "pressure_start": system.pressure(),
                     "other_benchmarks": system.other_benchmarks()}

    def record(self, key, system_name, result):
        self.results.setdefault(key, {})[system_name] = dataclasses.asdict(result)
        r = result
        log("  %-20s %-8s %8.2f s %9.0f files/s %7.0f MB/s %s" % (
            key, system_name, r.seconds, r.files_per_s, r.mb_per_s, r.note))

    def step(self, key, system_name, cold, fn, *args, probe=NoProbe(), **kw):
        """Run one measured step (after dropping caches if cold) and
        record its result; a failure is recorded, not raised."""
        if cold:
            system.drop_caches()
        try:
            with probe.step(key):
                result = fn(*args, **kw)
        except (OSError, AssertionError, RuntimeError) as e:
            self.errors.append("%s on %s: %s" % (key, system_name, e))
            log("  %-20s %-8s FAILED: %s" % (key, system_name, e))
            return None
        self.record(key, system_name, result)
        return result


def step_blocks(ds):
    """The tree workloads as blocks of (key, cold, workload, arguments).
    A block starts cold and its warm steps rely on the caches its earlier
    steps filled, so each block runs whole on one tree before the next
    tree runs it: the trees alternate, which spreads any background load
    on the machine evenly between them."""
    shuffled = ds.shuffled_order(SHUFFLE_SEED)
    read = wl.read_files
    return [
        [("walk_first", True, wl.walk_stat, {}),
         ("walk_second", False, wl.walk_stat, {})],
        [("imagefolder_cold", True, wl.image_folder, {}),
         ("imagefolder_warm", False, wl.image_folder, {})],
        [("read_sorted_cold", True, read,
          {"names": ds.sorted_order(), "expected": ds.by_name})],
        [("read_shuffled1_cold", True, read, {"names": shuffled})],
        [("read_shuffled4_cold", True, read, {"names": shuffled, "threads": 4})],
        [("read_shard_cold", True, read, {"names": ds.shard_order()}),
         ("read_shuffled1_warm", False, read, {"names": shuffled}),
         ("read_shuffled4_warm", False, read, {"names": shuffled, "threads": 4})],
        [("dataloader_cold", True, wl.dataloader_epoch, {})],
    ]


def measure_trees(bench, trees):
    for block in step_blocks(bench.ds):
        for tree in trees:
            for key, cold, fn, kw in block:
                bench.step(key, tree.name, cold, fn, tree.root,
                           probe=tree.probe, **kw)


def measure_limit(bench):
    """(3): cat, then a tarfile stream, over every shard, cold and warm;
    and the headers alone read at the disk's random-read rate, cold, with
    as many threads as a mount scans with (one per CPU)."""
    ds = bench.ds
    for temp in ("cold", "warm"):
        bench.step("cat_" + temp, "limit", temp == "cold", wl.cat_shards,
                   ds.shards, ds.shard_bytes)
    for temp in ("cold", "warm"):
        bench.step("tar_" + temp, "limit", temp == "cold", wl.tar_stream, ds.shards)
    blocks, members = wl.header_blocks(ds.shards)
    bench.step("headers_cold", "limit", True, wl.read_header_blocks, blocks,
               members, os.cpu_count())


def _children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_mount(bench, key, mountpoint, options, cold):
    """Time `shardfs ... SHARDS MP` until it has daemonised, then unmount
    and wait for the daemon to exit.  The CPU time is that of the
    foreground process plus what the daemon used until then."""
    def mount():
        cpu = _children_cpu_seconds()
        seconds, proc = system.timed(testlib.run_shardfs, bench.ds.shards_dir,
                                     mountpoint, *options)
        cpu = _children_cpu_seconds() - cpu
        pid = system.daemon_pid(mountpoint)
        cpu += system.process_cpu_seconds(pid) if pid else 0.0
        testlib.unmount(mountpoint)
        testlib.wait_for_daemon_exit(mountpoint)
        summary = testlib.parse_summary(proc.stderr)
        note = "%d members" % len(bench.ds.members)
        if summary:
            note += ", summary line: %.3f s" % summary["seconds"]
        return wl.Result(seconds, files=len(bench.ds.members), note=note,
                         cpu_seconds=cpu)
    return bench.step(key, "shardfs", cold, mount)


def _warm_mounts(bench, key, mountpoint, options):
    """WARM_MOUNTS warm mounts; records each and, as key, their median."""
    runs = [timed_mount(bench, "%s_%d" % (key, i), mountpoint, options, cold=False)
            for i in range(1, WARM_MOUNTS + 1)]
    runs = sorted((r for r in runs if r), key=lambda r: r.seconds)
    if runs:
        median = runs[len(runs) // 2]
        bench.record(key, "shardfs", dataclasses.replace(
            median, note=median.note + ", median of %d" % len(runs)))


def measure_mounts(bench, mountpoint, options):
    """Mount time, cold and warm: scanning every shard (no index), then
    writing the persisted index, then with it.  The mount used for the
    workloads afterwards finds that index."""
    os.makedirs(mountpoint, exist_ok=True)
    scan = options + ["-o", SCAN_OPTION]
    timed_mount(bench, "mount_cold", mountpoint, scan, cold=True)
    _warm_mounts(bench, "mount_warm", mountpoint, scan)
    if bench.args.no_index:
        return
    timed_mount(bench, "mount_index_build", mountpoint,
                options + ["-o", BUILD_INDEX_OPTION], cold=True)
    indexed = options + ["-o", USE_INDEX_OPTION]
    timed_mount(bench, "mount_index_cold", mountpoint, indexed, cold=True)
    _warm_mounts(bench, "mount_index_warm", mountpoint, indexed)


def count_syscalls(bench, pid, mountpoint):
    """strace the daemon during a metadata walk and a full read (both
    cold, on a live mount, so the daemon must serve every request)."""
    traces = os.path.join(bench.args.workdir, "traces")
    os.makedirs(traces, exist_ok=True)
    passes = [("walk", wl.walk_stat, {}),
              ("read_shard_order", wl.read_files, {"names": bench.ds.shard_order()})]
    for name, fn, kw in passes:
        system.drop_caches()
        log("  strace during %s ..." % name)
        try:
            with Traced(pid, os.path.join(traces, name + ".strace"),
                        bench.ds.shards_dir) as traced:
                fn(mountpoint, **kw)
        except (OSError, AssertionError, RuntimeError) as e:
            bench.errors.append("strace %s: %s" % (name, e))
            continue
        bench.syscalls[name] = traced.summary
        log("    storage calls %(storage_calls)d, reads %(storage_reads)d"
            % traced.summary)


@contextlib.contextmanager
def shardfs_tree(bench):
    """Time the mounts, then keep shardfs mounted for the block, which
    gets the mount as a Tree; at its end, count the daemon's system calls
    and keep its final /.shardfs/stats."""
    args, ds = bench.args, bench.ds
    mountpoint = os.path.join(args.workdir, "mnt")
    options = [a for o in args.mount_opts for a in ("-o", o)]
    testlib.unmount(mountpoint)
    measure_mounts(bench, mountpoint, options)
    with testlib.mounted(ds.shards_dir, mountpoint, *options):
        pid = system.daemon_pid(mountpoint)
        if pid is None:
            raise SystemExit("bench: no shardfs process found for " + mountpoint)
        probe = DaemonProbe(pid, mountpoint)
        probe.sample("mount")
        bench.daemon = {"pid": pid, "steps": probe.steps}
        yield Tree("shardfs", mountpoint, probe)
        if not args.no_strace:
            count_syscalls(bench, pid, mountpoint)
        if os.path.exists(probe.stats_path):
            with open(probe.stats_path) as f:
                bench.stats_file = f.read()


def command_line():
    prog = os.environ.get("SHARDFS_BENCH_PROG", "/usr/bin/python3 tests/bench/bench.py")
    return " ".join([prog] + [shlex.quote(a) for a in sys.argv[1:]])


def save(bench, started):
    """Write the JSON and markdown results; return the markdown."""
    ds = bench.ds
    run = {
        "date": started.isoformat(timespec="seconds"),
        "command": command_line(),
        "machine": dict(system.machine_info(bench.args.workdir),
                        fuse_io_uring=bench.io_uring),
        "shardfs": report.describe_binary(bench.args.shardfs, REPO),
        "dataset": {"name": ds.params.name, "samples": ds.params.samples,
                    "classes": ds.class_count, "shards": len(ds.shards),
                    "members": len(ds.members), "jpegs": ds.jpeg_count,
                    "bytes": ds.nbytes, "shard_bytes": ds.shard_bytes},
        "results": bench.results, "errors": bench.errors,
        "daemon": bench.daemon, "syscalls": bench.syscalls,
        "stats_file": bench.stats_file,
        "load": dict(bench.load, end=system.load_average(),
                     pressure_end=system.pressure()),
        "duration_s": (datetime.datetime.now() - started).total_seconds(),
    }
    markdown = report.render(run)
    out = os.path.join(bench.args.workdir, "results")
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, started.strftime("%Y%m%d-%H%M%S"))
    with open(stem + ".json", "w") as f:
        json.dump(run, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(markdown)
    log("results: %s.{json,md}" % stem)
    if bench.args.docs:
        report.add_to_docs(bench.args.docs, markdown)
        log("added to " + bench.args.docs)
    return markdown


def snapshot_binary(args):
    """Copy the shardfs binary into the work dir, so that a rebuild during
    the run cannot change what is measured; None when there is none."""
    if not os.access(args.shardfs, os.X_OK):
        return None
    dest = os.path.join(args.workdir, "bin", "shardfs")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copy2(args.shardfs, dest + ".tmp")
    os.replace(dest + ".tmp", dest)
    return dest


def main():
    args = parse_args()
    started = datetime.datetime.now()
    system.check_can_drop_caches()
    systems = set(args.systems.split(","))
    testlib.SHARDFS = snapshot_binary(args)
    if "shardfs" in systems and not testlib.SHARDFS:
        log("WARNING: %s not found: shardfs not measured" % args.shardfs)
        systems.discard("shardfs")
    if args.nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    if args.max_load:
        system.wait_until_quiet(args.max_load, 900, log)
    params = dataset.Params(args.samples, args.shard_samples, args.classes)
    with system.fuse_io_uring(args.io_uring) as io_uring:
        bench = Bench(args, dataset.ensure(params, args.workdir, log), io_uring)
        measure(bench, systems)
    print(save(bench, started))
    return 1 if bench.errors else 0


def measure(bench, systems):
    """Every measurement of the run, in order: the limit, then the trees."""
    if "limit" in systems:
        log("measuring the limit (cat, tarfile)")
        measure_limit(bench)
    trees = [Tree("loose", bench.ds.loose_dir)] if "loose" in systems else []
    with contextlib.ExitStack() as stack:
        if "shardfs" in systems:
            log("measuring shardfs mounts")
            trees.append(stack.enter_context(shardfs_tree(bench)))
        log("measuring " + " and ".join(t.name for t in trees))
        measure_trees(bench, trees)


if __name__ == "__main__":
    sys.exit(main())
