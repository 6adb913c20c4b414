#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What one node's share of a shuffled epoch costs an http:// store
(issue 29): bytes fetched against the bytes of the files read, and GETs
per file, for DistributedSampler shares N = 1, 2, 4, ..., 32 and a
RandomSampler epoch, each on a fresh mount after ImageFolder's listing
(os.walk), read by 2 threads; then shard-order passes (the members in
the order of the shards, by 1 and by 2 threads) and, with -o cache_dir,
the N = 2 share in two epochs on two mounts.

The data set is SAMPLES ImageFolder samples (train/<class>/<key>.jpg, a
JPEG of ~100 KB, plus a .cls) in 8 GNU-tar shards, served by nginx
on loopback; cache_mem is set small (32M) rather than the set large, so
that the set is >= 4x cache_mem.  Counters, not timings: the mount's
/.shardfs/stats (remote requests and body bytes, and the bytes fetched
per access class) around the reads.  Builds side by side:

    /usr/bin/python3 tests/bench/remote_shuffled.py [--samples 2000] \
        [--cache-mem 32M] BUILD_DIR [BUILD_DIR...]

--s3 serves the shards from s3rver (behind the tests' SigV4-checking
proxy) as s3://bench/set/ instead; --only dist-1,random,shard-2 runs some
rows; VERBOSE=1 prints each
mount's push-ahead and remote counters (stderr).  Needs root (mounts) and
Debian's Python (torch's samplers).
"""
import argparse
import concurrent.futures
import contextlib
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as lib  # noqa: E402
import testlib_mount  # noqa: E402

SHARDS = 8
CLASSES = 10
# distinct JPEGs encoded; each sample's file is one of them with its key in a COM segment
JPEG_POOL = 40


def make_set(root, samples):
    """SHARDS shards of ImageFolder samples (a real JPEG of ~100 KB, so
    that a DataLoader can decode it, and a .cls each) in ROOT/www, and the
    same files loose under ROOT/www/loose; the files' sizes by name."""
    import dataset
    rng = random.Random(0)
    pool = dataset.make_pool(JPEG_POOL, 0)
    loose = os.path.join(root, "www", "loose")
    sizes, per = {}, (samples + SHARDS - 1) // SHARDS
    for s in range(SHARDS):
        names = []
        for i in range(s * per, min(samples, (s + 1) * per)):
            key = "train/c%d/%08x" % (i % CLASSES, rng.getrandbits(32))
            jpg = dataset.unique_jpeg(pool[i % JPEG_POOL][0], key)
            for name, data in ((key + ".jpg", jpg), (key + ".cls", b"%d\n" % (i % CLASSES))):
                lib.write_file(os.path.join(loose, name), data)
                sizes[name] = len(data)
                names.append(name)
        lib.gnu_tar_create(os.path.join(root, "www", "shard-%02d.tar" % s), loose, names, "gnu")
    return sizes


def shard_names(www):
    """The shards' file names in WWW (not the loose tree beside them)."""
    return sorted(n for n in os.listdir(www) if n.endswith(".tar"))


def order(jpgs, mode):
    """The files one node reads, in its order: ('dist', N), ('random',)
    or ('shard', ) (the members in shard order)."""
    import torch
    from torch.utils.data import DistributedSampler, RandomSampler
    if mode[0] == "dist":
        idx = DistributedSampler(jpgs, num_replicas=mode[1], rank=0, shuffle=True, seed=0)
    elif mode[0] == "random":
        idx = RandomSampler(jpgs, generator=torch.Generator().manual_seed(0))
    else:
        return None
    return [jpgs[i] for i in idx]


def shard_order(mnt):
    def where(p):
        return (int(os.getxattr(p, "user.shardfs.shard_index")),
                int(os.getxattr(p, "user.shardfs.offset")))
    files = [os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs
             if ".shardfs" not in d and f.endswith(".jpg")]
    return sorted(files, key=where)


def epoch(mnt, mode, sizes):
    """Read one node's share after the listing; (bytes used, files,
    remote counters of the reads)."""
    import remote_site
    for _ in os.walk(mnt):          # ImageFolder's listing
        pass
    before = remote_site.settled_stats(mnt)
    jpgs = sorted(n for n in sizes if n.endswith(".jpg"))
    names = order(jpgs, mode)
    paths = shard_order(mnt) if names is None else [os.path.join(mnt, n) for n in names]

    def one(p):
        with open(p, "rb") as f:
            return len(f.read())
    threads = mode[1] if mode[0] == "shard" and len(mode) > 1 else 1 if names is None else 2
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        used = sum(pool.map(one, paths))
    seconds = time.monotonic() - start
    after = remote_site.settled_stats(mnt)
    out = {k: after[k] - before[k] for k in ("bytes", "requests")}
    out["seconds"] = seconds
    for k in ("sequential_bytes", "random_bytes"):
        out[k] = after.get("fetched", {}).get(k, 0) - before.get("fetched", {}).get(k, 0)
    if os.environ.get("VERBOSE"):
        print(lib.read_stats(mnt)["pushahead"], after, file=sys.stderr)
    return used, len(paths), out


def row(build, store, mode, sizes, work, cache_mem, cache_dir=None):
    """Mount BUILD's shardfs over STORE (spec, options, environment) and
    read MODE's share (MODE None: just build the index); a (bytes used,
    files, counters) per epoch."""
    spec, opts, env = store
    mnt = os.path.join(work, "mnt")
    testlib_mount.SHARDFS = os.path.join(build, "shardfs")
    opts = opts + ["-o", "cache_mem=%s" % cache_mem]
    if cache_dir:
        opts += ["-o", "cache_dir=%s" % cache_dir]
    env = dict(env, XDG_CACHE_HOME=os.path.join(work, "xdg-%s" % abs(hash(build))))
    if mode is None:                # the index build, once per build
        with lib.mounted(spec, mnt, *opts, env=env):
            return []
    return [_mounted_epoch(spec, mnt, opts, env, mode, sizes)
            for _ in range(2 if cache_dir else 1)]


def _mounted_epoch(spec, mnt, opts, env, mode, sizes):
    with lib.mounted(spec, mnt, *opts, env=env):
        return epoch(mnt, mode, sizes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--cache-mem", default="32M")
    ap.add_argument("--only", help="shares to run, e.g. dist-1,random")
    ap.add_argument("--no-cache-dir", action="store_true")
    ap.add_argument("--s3", action="store_true", help="s3rver instead of nginx")
    ap.add_argument("builds", nargs="+")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="remote-shuffled-")
    try:
        run(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def serve(s3, work):
    """The shards in WORK/www served by nginx, or (S3) uploaded to s3rver
    behind the tests' signature-checking proxy: (spec, options, env)."""
    www = os.path.join(work, "www")
    names = shard_names(www)
    if not s3:
        with rs.nginx(www, os.path.join(work, "ng")) as url:
            yield "%s/shard-{00..%02d}.tar" % (url, SHARDS - 1), [], os.environ
        return
    with rs.s3_server(work, ["bench"]) as (_, url, upload):
        for n in names:
            upload("bench", "set/" + n, os.path.join(www, n))
        env = dict(os.environ, AWS_ACCESS_KEY_ID=rs.ACCESS_KEY,
                   AWS_SECRET_ACCESS_KEY=rs.SECRET_KEY)
        yield "s3://bench/set/", ["-o", "endpoint=%s,region=%s" % (url, rs.REGION)], env


def run(a, work):
    os.makedirs(os.path.join(work, "www"))
    sizes = make_set(work, a.samples)
    total = sum(os.path.getsize(os.path.join(work, "www", n))
                for n in shard_names(os.path.join(work, "www")))
    print("set: %d samples, %.0f MB in %d shards; cache_mem=%s" %
          (a.samples, total / 1e6, SHARDS, a.cache_mem))
    modes = [("dist", n) for n in (1, 2, 4, 8, 16, 32)] + [("random",), ("shard",),
                                                         ("shard", 2)]
    if a.only:
        modes = [m for m in modes if "-".join(map(str, m)) in a.only.split(",")]
    print("| build | share | files | MB used | MB fetched | fetched / used | GETs / file "
          "| MB sequential / random | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with serve(a.s3, work) as store:
        for build in a.builds:
            row(build, store, None, sizes, work, a.cache_mem)
        for mode in modes + ([] if a.no_cache_dir else [("dist", 2, "cache_dir")]):
            for build in a.builds:
                cdir = None
                if len(mode) == 3:
                    cdir = tempfile.mkdtemp(prefix="cd-", dir=work)
                rows = row(build, store, mode[:2], sizes, work, a.cache_mem, cdir)
                for k, (used, files, st) in enumerate(rows):
                    name = "-".join(str(m) for m in mode) + (" epoch %d" % (k + 1) if cdir else "")
                    print("| %s | %s | %d | %.1f | %.1f | %.2f | %.2f | %.1f / %.1f | %.2f |" % (
                        build, name, files, used / 1e6, st["bytes"] / 1e6,
                        st["bytes"] / used, st["requests"] / files,
                        st["sequential_bytes"] / 1e6, st["random_bytes"] / 1e6,
                        st["seconds"]), flush=True)


if __name__ == "__main__":
    main()
