# SPDX-License-Identifier: Apache-2.0
"""What one node's share of a shuffled epoch costs the local disk.

Writes (once, into WORK/shards) 20 GNU-tar shards of 250 samples each, a
60-140 KB JPEG-sized member and a 3-byte class file per sample.  For
each build, alternated ROUNDS times: mounts the shards with -o quiet plus
OPTS, lists the tree, drops the shards' pages (fsync, then
POSIX_FADV_DONTNEED on each shard: no global drop_caches), then reads
every N-th file of a shuffled order with 4 threads.  One line per mount: the bytes used, what
the daemon read from the disk (read_bytes in /proc/PID/io: its reads
and the kernel's readahead for them), their ratio, the wall time.

    /usr/bin/python3 tests/bench/share_storage_bytes.py WORK N BUILD [BUILD ...] \\
        [--rounds R] [--options OPTS]

docs/benchmarks.md (tuning record, POSIX_FADV_RANDOM) has the figures.
"""
import argparse
import concurrent.futures
import io
import os
import random
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))
import shardfs_testlib as lib  # noqa: E402

SHARDS = 20
SAMPLES_PER_SHARD = 250


def generate(shards):
    """The shards, written once."""
    if os.path.isdir(shards):
        return
    os.makedirs(shards)
    rnd = random.Random(0)
    k = 0
    for s in range(SHARDS):
        with tarfile.open(os.path.join(shards, "shard-%06d.tar" % s), "w",
                          format=tarfile.GNU_FORMAT) as t:
            for _ in range(SAMPLES_PER_SHARD):
                for ext, size in (("jpg", rnd.randrange(60000, 140000)), ("cls", 3)):
                    info = tarfile.TarInfo("c%02d/%06d.%s" % (k % 10, k, ext))
                    info.size = size
                    t.addfile(info, io.BytesIO(os.urandom(size)))
                k += 1
    subprocess.run(["sync"], check=True)


def one_share(build, shards, mnt, n, options):
    subprocess.run([os.path.join(build, "shardfs"), shards + "/", mnt,
                    "-o", ",".join(["quiet"] + options)], check=True)
    try:
        files = sorted(os.path.join(d, f) for d, _, names in os.walk(mnt)
                       if ".shardfs" not in d for f in names)
        random.Random(1).shuffle(files)
        # after the mount: an index build reads the shards into the cache
        lib.forget_pages(shards, os.listdir(shards), written=True)

        def whole(path):
            with open(path, "rb") as fh:
                return len(fh.read())

        before, start = lib.daemon_read_bytes(mnt), time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            used = sum(pool.map(whole, files[::n]))
        secs, disk = time.perf_counter() - start, lib.daemon_read_bytes(mnt) - before
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=True)
    print("%s N=%d: used %.1f MB, from the disk %.1f MB, %.3fx, %.2f s"
          % (build, n, used / 1e6, disk / 1e6, disk / used, secs), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("n", type=int, help="read every N-th file of the shuffled order")
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--options", default="pushahead=0")
    a = ap.parse_args()
    shards, mnt = os.path.join(a.work, "shards"), os.path.join(a.work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    generate(shards)
    options = [o for o in a.options.split(",") if o]
    for _ in range(a.rounds):
        for build in a.builds:
            one_share(os.path.abspath(build), shards, mnt, a.n, options)


if __name__ == "__main__":
    main()
