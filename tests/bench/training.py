#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The training benchmark: what an epoch costs on a shardfs mount beside
the loose tree and `cat` of the shards, on both FUSE transports in one run.

For each transport (the fuse module's enable_uring off: requests over
/dev/fuse, what stock kernels do; then on: over io_uring) it measures, on
the loose tree, on shardfs (default options: push-ahead on) and on shardfs
with -o pushahead=0:

  fresh      every file in shard order, 1 thread, cold, on a fresh mount
  listed     the training pattern: list the tree (os.walk, as ImageFolder
             does), drop only the page cache (echo 1 > drop_caches, which
             keeps dentries and inodes), read every file in shard order
  shuf4_cold every file shuffled, 4 threads, cold
  shuf4_warm the same again, warm
  dl_shuffle a DataLoader epoch (ImageFolder, PIL decode, 2 workers),
             shuffled, cold
  dl_shards  a DataLoader epoch in shard order: shards in a shuffled
             order, each front to back, cold

and `cat` of every shard, cold, as the limit.  For shardfs it reports the
FUSE requests per file (LOOKUP, READ, GETATTR, OPEN and READDIR, the
last from the daemon's own listings, from /.shardfs/stats),
the daemon's CPU seconds per GB served, its RSS after the full reads and
the most bytes push-ahead held at once against its bound.  Every byte of
the shard-order reads is checked against the data set's CRC-32s.

    tests/bench/training.sh [--samples N] [--docs]

--ab BUILD_DIR,BUILD_DIR compares builds on three steps alone (listed,
shuf4_cold, dl_shuffle), on the first of --transports: in each of
--rounds rounds the loose tree, then each build on a fresh mount, one
after the other, so that the machine's drift hits them alike.

    tests/bench/training.sh --ab BUILD_DIR,BUILD_DIR [--rounds N]

--shares N,N,... reads, for each N, what one of N nodes reads of a
shuffled epoch under DistributedSampler (every N-th JPEG of the shuffled
order, --threads threads, after a listing, page cache dropped), on the
loose tree and, for each of --builds, on a mount with push-ahead and on
one without, one after the other, and reports the bytes read from the
shards against the bytes used and the rate against the loose tree's.
With --loader dataloader each share is read as training code reads it:
ImageFolder's listing, then the rank-0 share of
DistributedSampler(num_replicas=N) through a DataLoader of 2 workers with
PIL decode (N = random: a RandomSampler epoch).

    tests/bench/training.sh --shares 1,2,4,8,16 --builds BEFORE,AFTER
    tests/bench/training.sh --shares 1,2,4,8,16,32,random --loader dataloader
"""
import argparse
import contextlib
import datetime
import json
import os
import shlex
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

SEED = 1
REQUESTS = ("lookup", "read", "getattr", "open", "readdir")
SYSTEMS = ("loose", "shardfs", "shardfs_nopush")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=5_000,
                   help="samples (.jpg + .json + .cls), default 5000")
    p.add_argument("--shard-samples", type=int, default=500)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--workdir", default="/var/tmp/shardfs-bench")
    p.add_argument("--shardfs", default=os.path.join(REPO, "build", "shardfs"))
    p.add_argument("--transports", default="off,on",
                   help="enable_uring settings to run, in order (default off,on)")
    p.add_argument("--ab", metavar="BUILD_DIR,BUILD_DIR",
                   help="alternate builds on the shuffled steps (see above)")
    p.add_argument("--rounds", type=int, default=3, help="--ab: rounds")
    p.add_argument("--shares", metavar="N,N,...",
                   help="one node's part of a shuffled epoch on N nodes (see above)")
    p.add_argument("--builds", metavar="BUILD_DIR,BUILD_DIR",
                   help="--shares: the builds to compare (default: --shardfs's)")
    p.add_argument("--threads", type=int, default=2, help="--shares: reader threads")
    p.add_argument("--loader", choices=("threads", "dataloader"), default="threads",
                   help="--shares: files read by --threads threads, or a DataLoader "
                   "epoch with decode (see above)")
    p.add_argument("--docs", nargs="?", const=os.path.join(REPO, "docs", "bench-runs", "runs.md"),
                   help="add the result section to docs/bench-runs/runs.md (or PATH)")
    return p.parse_args(argv)


def log(message):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


def drop_pages():
    """Drop the page cache only (echo 1 > drop_caches keeps dentries and
    inodes)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def list_then_drop_pages(root):
    """List the tree (as ImageFolder does), then drop the page cache only."""
    wl.walk_stat(root)
    drop_pages()


def listed_shard_order(root, names, expected):
    """List the tree, drop the page cache only, read in shard order (the
    clock covers the reads)."""
    list_then_drop_pages(root)
    return wl.read_files(root, names, expected=expected)


class Daemon:
    """The shardfs daemon of a mount: counters, CPU time, RSS."""

    def __init__(self, mountpoint):
        self.mp = mountpoint
        self.pid = system.daemon_pid(mountpoint)

    def stats(self):
        with open(os.path.join(self.mp, ".shardfs", "stats")) as f:
            return json.load(f)

    def cpu(self):
        return system.process_cpu_seconds(self.pid)

    def rss(self):
        return system.process_status(self.pid)["VmRSS"]


def measured(fn, daemon=None):
    """Run fn; with a daemon, add requests and CPU time to the result."""
    before = (daemon.stats(), daemon.cpu()) if daemon else None
    r = fn()
    out = {"seconds": r.seconds, "files": r.files, "bytes": r.nbytes,
           "mb_s": r.mb_per_s, "files_s": r.files_per_s}
    if daemon:
        after, cpu = daemon.stats(), daemon.cpu()
        reqs = sum(after["ops"][k]["count"] - before[0]["ops"][k]["count"]
                   for k in REQUESTS)
        served = after["read_bytes"] - before[0]["read_bytes"] + \
            after["pushahead"]["bytes"] - before[0]["pushahead"]["bytes"]
        out.update(requests=reqs, requests_per_file=reqs / max(r.files, 1),
                   daemon_cpu=cpu - before[1],
                   cpu_s_per_gb=(cpu - before[1]) / (served / 1e9) if served else None,
                   push=after["pushahead"])
    return out


@contextlib.contextmanager
def tree(system_name, ds, mp):
    """The root to measure and its daemon (None for the loose tree)."""
    if system_name == "loose":
        yield ds.loose_dir, None
        return
    opts = ["-o", "pushahead=0"] if system_name == "shardfs_nopush" else []
    with testlib.mounted(ds.shards_dir, mp, *opts):
        yield mp, Daemon(mp)


def step(res, system_name, key, root, daemon, fn, cold):
    if cold:
        system.drop_caches()
    res[key] = r = measured(lambda: fn(root), daemon)
    log("  %-15s %-11s %7.2f s %7.0f MB/s %7.0f files/s %s" % (
        system_name, key, r["seconds"], r["mb_s"], r["files_s"],
        "%.3f req/file" % r["requests_per_file"] if daemon else ""))


def run_system(system_name, ds, shard_names, mp):
    """The steps on one system; fresh and listed each on a new mount."""
    res = {}
    names, expected = ds.shard_order(), ds.by_name
    shuffled = ds.shuffled_order(SEED)
    with tree(system_name, ds, mp) as (root, daemon):
        step(res, system_name, "fresh", root, daemon,
             lambda root: wl.read_files(root, names, expected=expected), True)
    with tree(system_name, ds, mp) as (root, daemon):
        system.drop_caches()
        step(res, system_name, "listed", root, daemon,
             lambda root: listed_shard_order(root, names, expected), False)
    if system_name == "shardfs_nopush":
        return res
    with tree(system_name, ds, mp) as (root, daemon):
        read4 = lambda root: wl.read_files(root, shuffled, threads=4)  # noqa: E731
        step(res, system_name, "shuf4_cold", root, daemon, read4, True)
        step(res, system_name, "shuf4_warm", root, daemon, read4, False)
        if daemon:
            res["rss_after_reads"] = daemon.rss()
        step(res, system_name, "dl_shuffle", root, daemon, wl.dataloader_epoch, True)
        step(res, system_name, "dl_shards", root, daemon,
             lambda root: wl.dataloader_shard_order(root, shard_names, SEED), True)
        if daemon:
            res["push_final"] = daemon.stats()["pushahead"]
    return res


def run_transport(ds, shard_names, mp):
    """cat, then every system, on the transport currently set."""
    out = {}
    system.drop_caches()
    r = wl.cat_shards(ds.shards, ds.shard_bytes)
    out["cat"] = {"seconds": r.seconds, "mb_s": r.mb_per_s}
    log("  cat cold %.0f MB/s" % r.mb_per_s)
    for name in SYSTEMS:
        out[name] = run_system(name, ds, shard_names, mp)
    return out


def ratio(a, b):
    return a / b if a and b else float("nan")


STEPS = ("fresh", "listed", "shuf4_cold", "shuf4_warm", "dl_shuffle", "dl_shards")


def render_row(key, res, cat):
    """One workload: loose, shardfs, shardfs without push-ahead, ratios."""
    lo, sh, off = (res[name].get(key) for name in SYSTEMS)
    unit = "files_s" if key.startswith("dl_") else "mb_s"
    fmt = "%.0f smp/s" if unit == "files_s" else "%.0f MB/s"
    return "| %s | %s | %s | %s | %.2f | %s | %.3f | %s |" % (
        key, fmt % lo[unit], fmt % sh[unit],
        "%s (%.2f req/file)" % (fmt % off[unit], off["requests_per_file"])
        if off else "-",
        ratio(sh[unit], lo[unit]),
        "%.2f" % ratio(sh[unit], cat) if unit == "mb_s" else "-",
        sh["requests_per_file"],
        "%.2f" % sh["cpu_s_per_gb"] if sh.get("cpu_s_per_gb") else "-")


def render_transport(transport, res):
    cat = res["cat"]["mb_s"]
    push = res["shardfs"]["push_final"]
    fresh = res["shardfs"]["fresh"]["push"]
    return ["#### FUSE over %s (enable_uring %s); `cat` of the shards, cold: "
            "%.0f MB/s" % ("io_uring" if transport == "on" else "/dev/fuse",
                           transport, cat), "",
            "| workload | loose | shardfs | shardfs, pushahead=0 | "
            "shardfs / loose | shardfs / cat | requests per file | "
            "daemon CPU s per GB |",
            "|---|---|---|---|---|---|---|---|"] + \
        [render_row(key, res, cat) for key in STEPS] + \
        ["", "shardfs daemon RSS after the full reads: %.1f MiB; push-ahead: "
         "%d files (%d MB) stored, %d passed by their reader's next READ, "
         "%d unconfirmed when the window ended, %d READ anyway, %d refused; "
         "most held at once %.1f MiB of a %.0f MiB bound. On the fresh mount "
         "the daemon listed %d directories itself (%d entries) for the "
         "reader that did not." % (
             res["shardfs"]["rss_after_reads"] / 2**20, push["files"],
             push["bytes"] / 1e6, push["passed"], push["unconfirmed"],
             push["read_anyway"], push["refused"], push["ahead_max"] / 2**20,
             push["bound"] / 2**20, fresh["listings"], fresh["listed"]), ""]


def render(run):
    lines = ["### Training run of %s" % run["date"].replace("T", " "), "",
             "`%s`" % run["command"], "",
             "%(samples)d samples, %(files)d files, %(shards)d shards, %(mb).0f MB; "
             "%(machine)s" % run["dataset"], ""]
    for transport, res in run["results"].items():
        lines += render_transport(transport, res)
    return "\n".join(lines) + "\n"


def builds_ab(ds, mp, builds, rounds):
    """listed, shuf4_cold and dl_shuffle of the loose tree and of each
    build in turn, ROUNDS times: one table row per measurement."""
    names, expected = ds.shard_order(), ds.by_name
    shuffled = ds.shuffled_order(SEED)
    steps = (("listed", "mb_s", "MB/s",
              lambda root: listed_shard_order(root, names, expected)),
             ("shuf4_cold", "mb_s", "MB/s",
              lambda root: wl.read_files(root, shuffled, threads=4)),
             ("dl_shuffle", "files_s", "smp/s", wl.dataloader_epoch))
    print("| round | step | tree | rate | ÷ loose | requests per file | "
          "daemon CPU s |")
    print("|---|---|---|---|---|---|---|")
    for r in range(rounds):
        for key, unit, label, fn in steps:
            loose = None
            for name in ["loose"] + builds:
                testlib.SHARDFS = os.path.join(name, "shardfs")
                with tree("loose" if name == "loose" else "shardfs", ds, mp) as (
                        root, daemon):
                    system.drop_caches()
                    m = measured(lambda: fn(root), daemon)
                loose = loose or m[unit]
                print("| %d | %s | %s | %.0f %s | %.2f | %s | %s |" % (
                    r, key, name, m[unit], label, m[unit] / loose,
                    "%.3f" % m["requests_per_file"] if daemon else "-",
                    "%.2f" % m["daemon_cpu"] if daemon else "-"), flush=True)


def share_reader(ds, n, loader, threads):
    """How node 0 of N reads its share: READ(root, before_epoch) ->
    (Result, names read).  BEFORE_EPOCH() runs between the listing and
    the reads (the page cache dropped)."""
    if loader == "dataloader":
        return lambda root, before: wl.dataloader_share(
            root, 0 if n == "random" else int(n), between=before, seed=SEED)
    mine = [m for m in ds.shuffled_order(SEED) if m.endswith(".jpg")][::int(n)]

    def read(root, before):
        wl.walk_stat(root)
        before()
        return wl.read_files(root, mine, threads=threads), mine
    return read


def node_shares(ds, mp, shares, builds, threads, loader):
    """One node's part of a shuffled epoch when N nodes, each with its own
    mount, read under DistributedSampler: every N-th JPEG of the shuffled
    order, THREADS threads, or a DataLoader epoch (share_reader()), after
    a listing, page cache dropped (the loose tree's dentries and inodes
    too, but for the DataLoader); the loose tree, then each build with
    push-ahead and without, one after the other for each N.  The bytes
    read from the shards against the bytes the node used, and the rate
    against the loose tree's."""
    print("| nodes | tree | mount | seconds | files/s ÷ loose | MB used | "
          "MB read from the shards | read ÷ used | READs per file | "
          "daemon CPU µs per file | density estimate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in shares:
        read = share_reader(ds, n, loader, threads)
        system.drop_caches()
        loose, mine = read(ds.loose_dir, system.drop_caches if loader == "threads"
                           else drop_pages)
        used = sum(ds.by_name[name].size for name in mine)
        print("| %s | loose | - | %.2f | 1.00 | %.0f | - | - | - | - | - |" % (
            n, loose.seconds, used / 1e6), flush=True)
        for build in builds:
            testlib.SHARDFS = os.path.join(build, "shardfs")
            for system_name in ("shardfs", "shardfs_nopush"):
                with tree(system_name, ds, mp) as (root, daemon):
                    system.drop_caches()
                    stats = {}

                    def before():
                        drop_pages()
                        stats.update(before=daemon.stats(), cpu=daemon.cpu())
                    r, _ = read(root, before)
                    time.sleep(1)   # pushes still under way count too
                    after, cpu = daemon.stats(), daemon.cpu() - stats["cpu"]
                got = after["backing_read_bytes"] - stats["before"]["backing_read_bytes"]
                density = after["pushahead"].get("density")
                print("| %s | %s | %s | %.2f | %.2f | %.0f | %.0f | %.2f | %.3f | %.0f | %s |" % (
                    n, build, "default" if system_name == "shardfs" else "pushahead=0",
                    r.seconds, loose.seconds / r.seconds, used / 1e6, got / 1e6,
                    got / used, (after["ops"]["read"]["count"] -
                                 stats["before"]["ops"]["read"]["count"]) / len(mine),
                    cpu * 1e6 / len(mine),
                    "-" if density is None else "%.2f" % density), flush=True)


def main():
    args = parse_args()
    system.check_can_drop_caches()
    started = datetime.datetime.now()
    testlib.SHARDFS = args.shardfs
    params = dataset.Params(args.samples, args.shard_samples, args.classes)
    ds = dataset.ensure(params, args.workdir, log)
    shard_names = wl.shards_in_order(ds.shards)
    mp = os.path.join(args.workdir, "mnt-training")
    os.makedirs(mp, exist_ok=True)
    if args.ab or args.shares:
        with system.fuse_io_uring(args.transports.split(",")[0]) as got:
            log("transport: enable_uring %s" % got)
            if args.ab:
                builds_ab(ds, mp, args.ab.split(","), args.rounds)
            else:
                node_shares(ds, mp, args.shares.split(","),
                            args.builds.split(",") if args.builds else
                            [os.path.dirname(args.shardfs)], args.threads, args.loader)
        return
    machine = system.machine_info(args.workdir)
    run = {"date": started.isoformat(timespec="seconds"),
           "command": "tests/bench/training.sh " + " ".join(
               shlex.quote(a) for a in sys.argv[1:]),
           "dataset": {"samples": params.samples, "files": len(ds.members),
                       "shards": len(ds.shards), "mb": ds.nbytes / 1e6,
                       "machine": "%s, %s, kernel %s" % (
                           machine["cpu"], machine["disk"], machine["kernel"])},
           "results": {}}
    out = os.path.join(args.workdir, "results")
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, "training-" + started.strftime("%Y%m%d-%H%M%S"))
    for transport in args.transports.split(","):
        with system.fuse_io_uring(transport) as got:
            log("transport: enable_uring %s" % got)
            run["results"][transport] = run_transport(ds, shard_names, mp)
        # saved after each transport: a run cut short keeps what it measured
        with open(stem + ".json", "w") as f:
            json.dump(run, f, indent=1)
    markdown = render(run)
    if args.docs:
        report.add_to_docs(args.docs, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
