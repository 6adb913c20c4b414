#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The fresh-mount step of the training benchmark (training.py), for
shardfs builds side by side: every file in shard order, 1 thread, cold, on
a fresh mount of each build in turn, with `cat` of the shards before each
round as the limit, over /dev/fuse (-o io_uring_threads=0, whatever the
fuse module's enable_uring says).  Reports MB/s, the ratio to that
round's `cat`, the mount's time, READs and LOOKUPs per file, daemon CPU
and the push-ahead counters; every byte is checked against the data
set's CRC-32s.

With --just-written the shards are not cold but written again before each
mount (copied, as to a node's local disk just before training): their
pages are in the page cache, dirty.

    tests/bench/fresh_compare.py [--rounds N] [--just-written] BUILD/shardfs [BUILD/shardfs ...]

Each binary must be named shardfs (the daemon is found by its argv[0]).
Needs root (drop_caches, mounts) and Debian's Python.
"""
import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dataset                                   # noqa: E402
import system                                    # noqa: E402
import training                                  # noqa: E402
import workloads as wl                           # noqa: E402
from training import testlib                     # noqa: E402


def write_again(paths):
    """Each shard copied to a new file of its name: dirty pages.  Not by
    a rename over it, which has ext4 write the new file back at once
    (auto_da_alloc)."""
    for path in paths:
        os.rename(path, path + ".old")
        shutil.copyfile(path + ".old", path)
        os.remove(path + ".old")


def fresh_read(binary, ds, mp, just_written):
    """One fresh, shard-order epoch on a mount of BINARY: cold, or with
    the shards just written."""
    testlib.SHARDFS = binary
    if just_written:
        write_again(ds.shards)
    start = time.monotonic()
    with testlib.mounted(ds.shards_dir, mp, "-o", "io_uring_threads=0"):
        mount_s = time.monotonic() - start
        daemon = training.Daemon(mp)
        if not just_written:
            system.drop_caches()
        r = training.measured(lambda: wl.read_files(
            mp, ds.shard_order(), expected=ds.by_name), daemon)
        ops = daemon.stats()["ops"]
    r["mount_s"] = mount_s
    r["reads_per_file"] = ops["read"]["count"] / r["files"]
    r["lookups_per_file"] = ops["lookup"]["count"] / r["files"]
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binaries", nargs="+")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--samples", type=int, default=5_000)
    p.add_argument("--workdir", default="/var/tmp/shardfs-bench")
    p.add_argument("--just-written", action="store_true")
    args = p.parse_args()
    system.check_can_drop_caches()
    ds = dataset.ensure(dataset.Params(args.samples, 500, 100), args.workdir,
                        training.log)
    mp = os.path.join(args.workdir, "mnt-fresh")
    os.makedirs(mp, exist_ok=True)
    rounds = []
    for n in range(args.rounds):
        system.drop_caches()
        if args.just_written:
            write_again(ds.shards)
        cat = wl.cat_shards(ds.shards, ds.shard_bytes).mb_per_s
        out = {"cat_mb_s": cat, "load": os.getloadavg()[0]}
        for b in args.binaries:
            r = out[b] = fresh_read(b, ds, mp, args.just_written)
            training.log("round %d %s: mount %.2f s, %.0f MB/s = %.2fx cat "
                         "(%.0f MB/s), %.2f READ + %.2f LOOKUP per file, daemon "
                         "CPU %.2f s, push %s" % (
                             n, b, r["mount_s"], r["mb_s"], r["mb_s"] / cat, cat,
                             r["reads_per_file"], r["lookups_per_file"],
                             r["daemon_cpu"], json.dumps(r["push"])))
        rounds.append(out)
    print(json.dumps(rounds, indent=1))


if __name__ == "__main__":
    main()
