#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Bytes per member of real index files, on the corpora of names.py.

names.py counts what candidate encodings would write; this builds the
index files themselves.  For each corpus (imagenet, laion, uuid: see
names.py) it writes the shards as sparse files (each member's ustar header
at its place, its data a hole: the index reads headers only, so a corpus of
300,000 ImageNet-sized members takes a few MiB of disk), builds the index
with each given build's shardfs-index, and prints the file's bytes per
member by section (shardfs-index --stats).

    /usr/bin/python3 tests/bench/index_size.py [--members N] [--workdir D] BUILD...

BUILD is a build directory (its shardfs-index is used); give two to compare
a change with the build before it, side by side on the same shards.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import names  # noqa: E402  (the corpora)

MTIME = 1700000000


def header(path, size):
    info = tarfile.TarInfo(path)
    info.size, info.mtime, info.mode = size, MTIME, 0o644
    return info.tobuf(format=tarfile.GNU_FORMAT)


def write_shards(members, out):
    """members: (dir, name, shard, data offset, size) in tar order."""
    fds = {}
    ends = {}
    for d, name, shard, off, size in members:
        fd = fds.get(shard)
        if fd is None:
            fd = fds[shard] = os.open(os.path.join(out, "shard-%06d.tar" % shard),
                                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        h = header("%s/%s" % (d, name) if d else name, size)
        assert len(h) == 512, name       # no long-name records: offsets hold
        os.pwrite(fd, h, off - 512)
        ends[shard] = off + (size + 511) // 512 * 512
    for shard, fd in fds.items():
        os.ftruncate(fd, ends[shard] + 1024)   # the two zero blocks
        os.close(fd)


def stats(build, shards):
    tool = os.path.join(build, "shardfs-index")
    for f in os.listdir(shards):
        if f.endswith(".shardfs-index") or ".shardfs-index." in f:
            os.unlink(os.path.join(shards, f))
    subprocess.run([tool, "-o", "quiet", shards], check=True, stdout=subprocess.DEVNULL)
    r = subprocess.run([tool, "--stats", "-o", "quiet", shards], check=True,
                       capture_output=True, text=True)
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=300000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default="/var/tmp/shardfs-index-size")
    p.add_argument("--corpora", default="imagenet,laion,uuid")
    p.add_argument("builds", nargs="+")
    a = p.parse_args()
    for corpus in a.corpora.split(","):
        out = os.path.join(a.workdir, corpus)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        write_shards(names.corpus(corpus, a.members, random.Random(a.seed)), out)
        for build in a.builds:
            print("## %s, %s\n" % (corpus, build))
            print(stats(build, out))
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
