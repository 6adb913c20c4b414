#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Remote shards benchmark: a sequential read of shards through an
http:// mount against `curl -o /dev/null` of the same objects from the
same nginx (loopback), with and without limit_rate, side by side in one
run, and a mount of the same shards as local files for reference; plus the request counts of a full read and of random single-file
reads, from /.shardfs/stats.

    /usr/bin/python3 tests/bench/remote_bench.py [--shards N] [--shard-mb M]
        [--limit-rate RATE] [--chunk SIZE]
    /usr/bin/python3 tests/bench/remote_bench.py --index-build --shards 8 \
        --shard-mb 1024 --limit-rate 100m [--scan-threads N]

--index-build times the index build of a fresh mount with
-o index_fetch=stream (every chunk through the chunk cache) against
index_fetch=ranged (one GET per header), cold and warm, with and without
limit_rate.

Needs root (mount, drop_caches), nginx and a build in build/ (or
SHARDFS_BUILD_DIR).  Prints a Markdown table for docs/benchmarks.md.
"""
import argparse
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as lib  # noqa: E402


def make_shards(root, shards, shard_mb):
    """SHARDS shards of ~SHARD_MB MiB of 100 KB members (random bytes)."""
    names = []
    for s in range(shards):
        name = "shard-%06d.tar" % s
        with tarfile.open(os.path.join(root, name), "w", format=tarfile.GNU_FORMAT) as t:
            for i in range(shard_mb * 10):
                data = os.urandom(100_000)
                ti = tarfile.TarInfo("s%d/%06d.bin" % (s, i))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
        names.append(name)
    return names


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def curl_all(urls):
    """One curl, one keep-alive connection, every object in turn."""
    argv = ["curl", "-s"]
    for u in urls:
        argv += ["-o", "/dev/null", u]
    start = time.time()
    subprocess.run(argv, check=True)
    return time.time() - start


def read_in_order(mnt):
    """Read every file in shard order (members file: shard, offset)."""
    with open(os.path.join(mnt, ".shardfs", "members")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    rows.sort(key=lambda r: (int(r[1]), int(r[2])))
    total, start = 0, time.time()
    for path, *_ in rows:
        total += len(lib.read_member(os.path.join(mnt, path))[0])
    return time.time() - start, total


def stats(mnt):
    with open(os.path.join(mnt, ".shardfs", "stats")) as f:
        return json.load(f)["remote"]


def one_case(www, work, names, limit, chunk, env):
    out = {}
    with rs.nginx(www, os.path.join(work, "ng-%s" % (limit or "none")),
                  limit_rate=limit) as url:
        urls = ["%s/%s" % (url, n) for n in names]
        spec = "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
        mnt = os.path.join(work, "mnt")
        os.makedirs(mnt, exist_ok=True)
        # build and cache the index first: the read is what is compared
        with lib.mounted(spec, mnt, "-o", "quiet", env=env):
            pass
        for cold in (True, False):
            if cold:
                drop_caches()
            t_curl = curl_all(urls)
            if cold:
                drop_caches()
            with lib.mounted(spec, mnt, "-o", "quiet,chunk_size=%s" % chunk, env=env):
                before = stats(mnt)
                t_mnt, nbytes = read_in_order(mnt)
                after = stats(mnt)
            if cold:
                drop_caches()
            local = ",".join(os.path.join(www, n) for n in names)
            with lib.mounted(local, mnt, "-o", "quiet", env=env):
                t_local, _ = read_in_order(mnt)
            out[cold] = (t_curl, t_mnt, nbytes, after["requests"] - before["requests"],
                         after["bytes"] - before["bytes"], t_local)
    return out


def random_reads(www, work, names, chunk, env, n=50):
    with rs.nginx(www, os.path.join(work, "ng-rand")) as url:
        spec = "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
        mnt = os.path.join(work, "mnt")
        with lib.mounted(spec, mnt, "-o", "quiet", env=env):
            pass    # the index, built and cached
        with lib.mounted(spec, mnt, "-o", "quiet,chunk_size=%s" % chunk, env=env):
            with open(os.path.join(mnt, ".shardfs", "members")) as f:
                rows = [line.split("\t")[0] for line in f]
            random.seed(1)
            before = stats(mnt)["requests"]
            for p in random.sample(rows, n):
                lib.read_member(os.path.join(mnt, p))
            return n, stats(mnt)["requests"] - before


def index_build(www, work, names, limit, env, threads):
    """Mount with a fresh index cache, once per index_fetch (and, ranged,
    with THREADS scan threads: as many header chains in flight), cold and
    warm: {(fetch, threads, cold): (seconds, GETs, bytes)}."""
    out = {}
    with rs.nginx(www, os.path.join(work, "ng-index-%s" % (limit or "none")),
                  limit_rate=limit) as url:
        spec = "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
        mnt = os.path.join(work, "mnt")
        for cold in (True, False):
            for fetch, nthreads in (("stream", 0), ("ranged", 0), ("ranged", threads)):
                cache = tempfile.mkdtemp(dir=work)
                opts = "quiet,index_fetch=%s" % fetch
                opts += ",scan_threads=%d" % nthreads if nthreads else ""
                if cold:
                    drop_caches()
                start = time.time()
                with lib.mounted(spec, mnt, "-o", opts,
                                 env=dict(env, XDG_CACHE_HOME=cache)):
                    elapsed = time.time() - start
                    st = stats(mnt)
                subprocess.run(["rm", "-rf", cache])
                out[(fetch, nthreads, cold)] = (elapsed, st["requests"], st["bytes"])
    return out


def index_build_table(a, work, env):
    """--index-build: both index_fetch strategies side by side."""
    www = os.path.join(work, "www")
    os.makedirs(www, exist_ok=True)
    names = make_shards(www, a.shards, a.shard_mb)
    total = sum(os.path.getsize(os.path.join(www, n)) for n in names)
    print("%d shards, %.2f GB, %d members of 100 KB each\n" % (
        len(names), total / 1e9, a.shard_mb * 10))
    print("| nginx limit_rate | caches | index_fetch | scan_threads | build s | "
          "shard GB/s | GETs | MB fetched | ratio to stream |")
    print("|---|---|---|---|---|---|---|---|---|")
    for limit in (None, a.limit_rate):
        res = index_build(www, work, names, limit, env, a.scan_threads)
        for (fetch, threads, cold), (t, reqs, nbytes) in res.items():
            base = res[("stream", 0, cold)][0]
            print("| %s | %s | %s | %s | %.2f | %.2f | %d | %.1f | %.2f |" % (
                limit or "none", "cold" if cold else "warm", fetch,
                threads or "default", t, total / t / 1e9, reqs, nbytes / 1e6,
                t / base))


def memory_streams(work, streams, cache_mem, chunk, env):
    """STREAMS shards of 8 MiB read at once, one thread each, through a
    mount with CACHE_MEM: the daemon's peak VmRSS (sampled every 50 ms)."""
    import threading
    www = os.path.join(work, "www-streams")
    os.makedirs(www, exist_ok=True)
    names = make_shards(www, streams, 8)
    with rs.nginx(www, os.path.join(work, "ng-streams")) as url:
        spec = "%s/shard-{000000..%06d}.tar" % (url, streams - 1)
        mnt = os.path.join(work, "mnt")
        with lib.mounted(spec, mnt, "-o", "quiet", env=env):
            pass    # the index, built and cached
        with lib.mounted(spec, mnt, "-o", "quiet,cache_mem=%s,chunk_size=%s"
                         % (cache_mem, chunk), env=env):
            pid = lib.daemon_pid(mnt)
            with open(os.path.join(mnt, ".shardfs", "members")) as f:
                rows = [line.split("\t") for line in f]
            per_shard = [sorted((int(r[2]), r[0]) for r in rows if int(r[1]) == s)
                         for s in range(streams)]
            peak, done = [lib.vm_rss_kb(pid)], threading.Event()

            def sample():
                while not done.wait(0.05):
                    peak[0] = max(peak[0], lib.vm_rss_kb(pid))

            def stream(files):
                for _, path in files:
                    lib.read_member(os.path.join(mnt, path))

            sampler = threading.Thread(target=sample)
            sampler.start()
            start = time.time()
            readers = [threading.Thread(target=stream, args=(f,)) for f in per_shard]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            elapsed = time.time() - start
            done.set()
            sampler.join()
    total = sum(os.path.getsize(os.path.join(www, n)) for n in names)
    return peak[0] * 1024, total / elapsed / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-mb", type=int, default=128)
    ap.add_argument("--limit-rate", default="50m")
    ap.add_argument("--chunk", default="8M")
    ap.add_argument("--streams", type=int, default=0,
                    help="only measure memory with this many shards streamed at once")
    ap.add_argument("--index-build", action="store_true",
                    help="only time the index build, index_fetch=stream "
                    "against ranged (use --shard-mb 1024 --limit-rate 100m)")
    ap.add_argument("--scan-threads", type=int, default=8,
                    help="--index-build: scan threads of the second ranged row")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="shardfs-remote-bench-")
    www = os.path.join(work, "www")
    os.makedirs(www)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))
    if a.streams:
        print("| streams | cache_mem | chunk_size | peak daemon RSS | limit (cache_mem + 64 MiB) | MB/s |")
        print("|---|---|---|---|---|---|")
        for mem, chunk in (("64M", "1M"), ("64M", "8M")):
            rss, rate = memory_streams(work, a.streams, mem, chunk, env)
            limit = (int(mem[:-1]) + 64) << 20
            print("| %d | %s | %s | %.0f MiB | %d MiB | %.0f |" % (
                a.streams, mem, chunk, rss / 2**20, limit >> 20, rate))
        subprocess.run(["rm", "-rf", work])
        return
    if a.index_build:
        try:
            index_build_table(a, work, env)
        finally:
            subprocess.run(["rm", "-rf", work])
        return
    names = make_shards(www, a.shards, a.shard_mb)
    total = sum(os.path.getsize(os.path.join(www, n)) for n in names)
    print("| nginx limit_rate | caches | curl MB/s | shardfs http:// MB/s | ratio | "
          "shardfs local MB/s | GETs | ceil(size/chunk) | bytes fetched / read |")
    print("|---|---|---|---|---|---|---|---|---|")
    chunk_bytes = int(a.chunk[:-1]) << 20
    bound = sum(-(-os.path.getsize(os.path.join(www, n)) // chunk_bytes) for n in names)
    for limit in (None, a.limit_rate):
        res = one_case(www, work, names, limit, a.chunk, env)
        for cold in (True, False):
            t_curl, t_mnt, nbytes, reqs, fetched, t_local = res[cold]
            print("| %s | %s | %.0f | %.0f | %.2f | %.0f | %d | %d | %.3f |" % (
                limit or "none", "cold" if cold else "warm", total / t_curl / 1e6,
                nbytes / t_mnt / 1e6, t_curl / t_mnt, nbytes / t_local / 1e6,
                reqs, bound, fetched / nbytes))
    n, reqs = random_reads(www, work, names, a.chunk, env)
    print("\nrandom single-file reads: %d files, %d GETs" % (n, reqs))
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
