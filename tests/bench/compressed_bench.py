#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Compressed shards: the targets of docs/benchmarks.md, in one run.

The generated data set of bench.py (JPEG samples with .json and .cls in
WebDataset shards) is compressed with gzip -6 (one member per shard, the
worst case for random access) and with pzstd (frames); for each form,
side by side with the uncompressed shards:

- sequential: every member read in shard order through the mount, against
  `gzip -dc SHARD > /dev/null` (or `zstd -dc`) of the same shards, and
  against the same read of the uncompressed mount; cold (caches dropped)
  and warm;
- random member reads: compressed bytes the daemon read (its rchar) per
  member read, on a mount with -o pushahead=0 (the reads alone) and on
  one with push-ahead (its span pushes too);
- the seek tables' size (points and windows) as a share of the compressed
  size, from the build's debug lines;
- remount from the saved index: wall time, and whether anything was
  decoded (the build's debug line must not appear);
- one DataLoader epoch (workloads.dataloader_epoch) over each mount, cold;
- the same mounts with -o cache_dir (decoded spans kept on local disk)
  as their own columns.

Usage (root; Debian's python for torch):
    /usr/bin/python3 tests/bench/compressed_bench.py [--samples N] [--docs]
"""
import argparse
import datetime
import json
import os
import random
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))
import dataset  # noqa: E402
import report  # noqa: E402
import shardfs_testlib as testlib  # noqa: E402
import system  # noqa: E402
import workloads as wl  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TABLE_RE = re.compile(r"debug: (?P<shard>\S+): (?P<codec>\w+) decoded for its seek table: "
                      r"(?P<bytes>\d+) bytes, (?P<points>\d+) points, "
                      r"(?P<windows>\d+) bytes of windows")
POINT_BYTES = 32   # sizeof(struct seek_point)
# where --docs adds each run: docs/bench-runs/compressed-runs.md (docs/benchmarks.md shows the newest)
DOCS_MARKER = "<!-- compressed_bench.py adds each run below this line, newest first -->"
SEED = 1           # the shard order of the shard-order DataLoader epoch
FORMS = {
    "gzip": (".tar.gz", ["gzip", "-6", "-c", "-n"], ["gzip", "-dc"]),
    "zstd": (".tar.zst", ["pzstd", "-q", "-p", "2", "-c"], ["zstd", "-dc"]),
}


def log(msg):
    print(msg, flush=True)


def compress_set(ds, form, workdir):
    """The shards of ds compressed as form, cached under workdir."""
    suffix, argv, _ = FORMS[form]
    out_dir = os.path.join(workdir, ds.params.name + "-" + form)
    shards = [os.path.join(out_dir, os.path.basename(s)[:-4] + suffix) for s in ds.shards]
    if all(os.path.exists(s) for s in shards):
        return shards
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    for src, dst in zip(ds.shards, shards):
        with open(src, "rb") as fin, open(dst + ".partial", "wb") as fout:
            subprocess.run(argv, stdin=fin, stdout=fout, check=True)
        os.rename(dst + ".partial", dst)
    log("  %s: compressed %d shards in %.0f s" % (form, len(shards), time.time() - start))
    return shards


MOUNT_OPTS = []   # -o of the command line, for every mount


def mount(binary, shards, mnt, *options):
    """Mount (comma list of shards); returns shardfs's stderr."""
    os.makedirs(mnt, exist_ok=True)
    r = testlib.run_cmd([binary, *MOUNT_OPTS, *options, ",".join(shards), mnt])
    if r.returncode:
        raise SystemExit("mount failed: %s" % r.stderr)
    return r.stderr


def daemon_rchar(mnt):
    with open("/proc/%d/io" % system.daemon_pid(mnt)) as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def timed_cold(cold, fn, *args):
    if cold:
        system.drop_caches()
    return system.timed(fn, *args)[0]


def decompress_all(shards, argv, cold):
    def run():
        for s in shards:
            subprocess.run(argv + [s], stdout=subprocess.DEVNULL, check=True)
    return timed_cold(cold, run)


def table_stats(build_log, compressed_bytes):
    tables = [m.groupdict() for m in TABLE_RE.finditer(build_log)]
    points = sum(int(t["points"]) for t in tables)
    windows = sum(int(t["windows"]) for t in tables)
    return {"tables": len(tables), "points": points, "window_bytes": windows,
            "share_of_compressed": (points * POINT_BYTES + windows) / compressed_bytes}


def measure_form(args, ds, form, shards, mnt, results, cache=False):
    """Everything for one form of the shards (form None: uncompressed),
    with -o cache_dir when cache."""
    r = {}
    name = (form or "tar") + ("+cache" if cache else "")
    extra = []
    if cache:
        cache_dir = os.path.join(args.workdir, "span-cache")
        os.makedirs(cache_dir, exist_ok=True)
        extra = ["-o", "cache_dir=" + cache_dir]
    compressed = sum(os.path.getsize(s) for s in shards)
    r["stored_bytes"] = compressed
    # index build, then remount from the index
    build = mount(args.shardfs, shards, mnt, "-o", "loglevel=debug,index_mode=rebuild")
    testlib.unmount(mnt)
    if form:
        r["seek_tables"] = table_stats(build, compressed)
    system.drop_caches()
    seconds, remount = system.timed(mount, args.shardfs, shards, mnt, "-o",
                                    "loglevel=debug", *extra)
    r["remount_s"] = seconds
    r["remount_decoded"] = bool(TABLE_RE.search(remount))
    names = ds.shard_order()
    # each warm run straight after its cold one, so that warm means the
    # same on both sides: everything the first run read is cached
    for cold in (True, False):
        r["sequential_%s_s" % ("cold" if cold else "warm")] = \
            timed_cold(cold, wl.read_files, mnt, names)
    for cold in (True, False) if form else ():
        r["decompress_%s_s" % ("cold" if cold else "warm")] = \
            decompress_all(shards, FORMS[form][2], cold)
    testlib.unmount(mnt)
    # random member reads: compressed bytes read per member, by the reads
    # alone (pushahead=0), then with push-ahead, whose span pushes decode
    # the spans the reads fall in for the reads that follow
    rnd = random.Random(15)
    sample = rnd.sample(names, min(args.random_reads, len(names)))
    for key, push in (("random", ["-o", "pushahead=0"]), ("random_push", [])):
        mount(args.shardfs, shards, mnt, *extra, *push)
        system.drop_caches()
        before = daemon_rchar(mnt)
        r[key + "_read_s"] = system.timed(wl.read_files, mnt, sample)[0]
        r[key + "_rchar_per_read"] = (daemon_rchar(mnt) - before) / len(sample)
        testlib.unmount(mnt)
    r["random_reads"] = len(sample)
    r["random_member_bytes"] = sum(ds.by_name[n].size for n in sample) / len(sample)
    # DataLoader epochs, cold: shuffled, then in shard order (shards in a
    # shuffled order, each front to back, as a WebDataset loader reads)
    for key, epoch in (("dataloader_s", wl.dataloader_epoch),
                       ("dataloader_shards_s", lambda root: wl.dataloader_shard_order(
                           root, wl.shards_in_order(ds.shards), SEED))):
        mount(args.shardfs, shards, mnt, *extra)
        system.drop_caches()
        r[key] = epoch(mnt).seconds
        testlib.unmount(mnt)
    results[name] = r
    log("  %s: %s" % (name, json.dumps(r, default=str)))


def seconds_of(v):
    return v.seconds if hasattr(v, "seconds") else v


def render(results, meta):
    tar = results["tar"]
    lines = ["### %s, %d samples (%s)" % (meta["date"], meta["samples"], meta["machine"]),
             "", "Command: `%s`" % meta["command"], "",
             "| | tar | gzip -6 | gzip -6, cache_dir | pzstd | pzstd, cache_dir |",
             "|---|---|---|---|---|---|"]

    def row(label, fn):
        cells = []
        for k in ("tar", "gzip", "gzip+cache", "zstd", "zstd+cache"):
            try:
                cells.append(fn(results[k]))
            except (KeyError, ZeroDivisionError, TypeError):
                cells.append("")
        lines.append("| %s | %s |" % (label, " | ".join(cells)))
    gb = lambda r: "%.2f GB" % (r["stored_bytes"] / 1e9)  # noqa: E731
    row("stored", gb)
    for key in ("cold", "warm"):
        row("shard-order read, %s (s)" % key,
            lambda r: "%.2f" % seconds_of(r["sequential_%s_s" % key]))
        row("`gzip -dc` / `zstd -dc` of the shards, %s (s)" % key,
            lambda r: "%.2f" % r["decompress_%s_s" % key])
        row("**mount ÷ decompressor, %s** (target ≥ 0.8)" % key,
            lambda r: "%.2f" % (r["decompress_%s_s" % key] /
                                seconds_of(r["sequential_%s_s" % key])))
    row("random member read: compressed bytes read per member (KB; pushahead=0)",
        lambda r: "%.0f" % (r["random_rchar_per_read"] / 1e3))
    row("the same with push-ahead, its span pushes included (KB)",
        lambda r: "%.0f" % (r["random_push_rchar_per_read"] / 1e3))
    row("random member read: mean member size (KB)",
        lambda r: "%.0f" % (r["random_member_bytes"] / 1e3))
    row("random member reads, cold (ms each; pushahead=0)",
        lambda r: "%.1f" % (1e3 * seconds_of(r["random_read_s"]) / r["random_reads"]))
    row("the same with push-ahead (ms each)",
        lambda r: "%.1f" % (1e3 * seconds_of(r["random_push_read_s"]) / r["random_reads"]))
    row("seek points + windows ÷ compressed size (target ≤ 1 %)",
        lambda r: "%.2f %% (%d points)" % (100 * r["seek_tables"]["share_of_compressed"],
                                           r["seek_tables"]["points"]))
    row("remount from the index (s; target ≤ 1)", lambda r: "%.2f" % r["remount_s"])
    row("decoded anything at remount", lambda r: "yes" if r["remount_decoded"] else "no")
    for key, label in (("dataloader_s", "shuffled"), ("dataloader_shards_s", "in shard order")):
        row("DataLoader epoch %s, cold (s)" % label, lambda r: "%.1f" % r[key])
        row("**uncompressed epoch ÷ this epoch**, %s (target ≥ 0.9)" % label,
            lambda r: "%.2f" % (tar[key] / r[key]))
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=6000)
    p.add_argument("--shard-samples", type=int, default=500)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--random-reads", type=int, default=300)
    p.add_argument("--workdir", default="/var/tmp/shardfs-bench")
    p.add_argument("--shardfs", default=os.path.join(REPO, "build", "shardfs"))
    p.add_argument("-o", dest="mount_opts", action="append", default=[],
                   help="extra shardfs mount option, for every mount (repeatable)")
    p.add_argument("--docs", nargs="?", const=os.path.join(REPO, "docs", "bench-runs", "compressed-runs.md"))
    args = p.parse_args()
    MOUNT_OPTS.extend(a for o in args.mount_opts for a in ("-o", o))
    system.check_can_drop_caches()
    ds = dataset.ensure(dataset.Params(args.samples, args.shard_samples, args.classes),
                        args.workdir, log)
    mnt = os.path.join(args.workdir, "mnt-compressed")
    results = {}
    forms = [(None, ds.shards)] + [(f, compress_set(ds, f, args.workdir)) for f in FORMS]
    for form, shards in forms:
        measure_form(args, ds, form, shards, mnt, results)
        if form:
            measure_form(args, ds, form, shards, mnt, results, cache=True)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "samples": args.samples, "machine": system.machine_info(args.workdir),
            "command": "/usr/bin/python3 tests/bench/compressed_bench.py " +
                       " ".join(sys.argv[1:])}
    text = render(results, meta)
    print(text)
    if args.docs:
        report.add_to_docs(args.docs, text, DOCS_MARKER)


if __name__ == "__main__":
    main()
