#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The fresh-mount step of the training benchmark (training.py), for
shardfs builds side by side: every file in shard order, 1 thread, cold, on
a fresh mount of each build in turn, with `cat` of the shards before each
round as the limit, over /dev/fuse (-o io_uring_threads=0, whatever the
fuse module's enable_uring says).  Reports MB/s, the ratio to that
round's `cat`, READs and LOOKUPs per file, daemon CPU and the push-ahead
counters; every byte is checked against the data set's CRC-32s.

    tests/bench/fresh_compare.py [--rounds N] BUILD/shardfs [BUILD/shardfs ...]

Each binary must be named shardfs (the daemon is found by its argv[0]).
Needs root (drop_caches, mounts) and Debian's Python.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dataset                                   # noqa: E402
import system                                    # noqa: E402
import training                                  # noqa: E402
import workloads as wl                           # noqa: E402
from training import testlib                     # noqa: E402


def fresh_read(binary, ds, mp):
    """One fresh, cold, shard-order epoch on a mount of BINARY."""
    testlib.SHARDFS = binary
    with testlib.mounted(ds.shards_dir, mp, "-o", "io_uring_threads=0"):
        daemon = training.Daemon(mp)
        system.drop_caches()
        r = training.measured(lambda: wl.read_files(
            mp, ds.shard_order(), expected=ds.by_name), daemon)
        ops = daemon.stats()["ops"]
    r["reads_per_file"] = ops["read"]["count"] / r["files"]
    r["lookups_per_file"] = ops["lookup"]["count"] / r["files"]
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binaries", nargs="+")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--samples", type=int, default=5_000)
    p.add_argument("--workdir", default="/var/tmp/shardfs-bench")
    args = p.parse_args()
    system.check_can_drop_caches()
    ds = dataset.ensure(dataset.Params(args.samples, 500, 100), args.workdir,
                        training.log)
    mp = os.path.join(args.workdir, "mnt-fresh")
    os.makedirs(mp, exist_ok=True)
    rounds = []
    for n in range(args.rounds):
        system.drop_caches()
        cat = wl.cat_shards(ds.shards, ds.shard_bytes).mb_per_s
        out = {"cat_mb_s": cat, "load": os.getloadavg()[0]}
        for b in args.binaries:
            r = out[b] = fresh_read(b, ds, mp)
            training.log("round %d %s: %.0f MB/s = %.2fx cat (%.0f MB/s), "
                         "%.2f READ + %.2f LOOKUP per file, daemon CPU %.2f s, "
                         "push %s" % (n, b, r["mb_s"], r["mb_s"] / cat, cat,
                                      r["reads_per_file"], r["lookups_per_file"],
                                      r["daemon_cpu"], json.dumps(r["push"])))
        rounds.append(out)
    print(json.dumps(rounds, indent=1))


if __name__ == "__main__":
    main()
