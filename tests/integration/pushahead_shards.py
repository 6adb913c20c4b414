# SPDX-License-Identifier: Apache-2.0
"""Shards for the push-ahead suites (test_pushahead.py: what push-ahead
must never do; test_perf_pushahead.py, in the serial perf group: what it
saves, in requests and bytes): members in name order, written by Python's
tarfile or compressed with gzip and zstd, and the offsets the mount gives
them."""
import io
import os
import random
import subprocess
import tarfile

import shardfs_testlib as lib

FILES = 240


def make_shard(path, tag, files=FILES, size=lambda i: 3000 + 997 * (i % 40),
               make=lib.deterministic_bytes):
    """A shard of FILES members d/kNNNN.bin (in name order), and their
    bytes by name."""
    content = {}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(files):
            name = "d/k%04d.bin" % i
            data = make((tag, i), size(i))
            info = tarfile.TarInfo("%s/%s" % (tag, name))
            info.size, info.mtime = len(data), 1_600_000_000
            tar.addfile(info, io.BytesIO(data))
            content["%s/%s" % (tag, name)] = data
    return content


def list_tree(mnt):
    for _ in os.walk(mnt):
        pass


def read_in_order(mnt, content):
    for name in sorted(content):
        with open(os.path.join(mnt, name), "rb") as f:
            assert f.read() == content[name], name


def compress_shard(tar, tool):
    """TAR as it is ("plain"), as one gzip stream (window points about
    every 4 MiB of tar) or as zstd frames of 2 MiB of tar each,
    concatenated."""
    if tool == "plain":
        return tar
    data = open(tar, "rb").read()
    if tool == "gzip":
        out = tar.with_suffix(".tar.gz")
        out.write_bytes(subprocess.run(["gzip", "-c", "-n"], input=data,
                                       stdout=subprocess.PIPE, check=True).stdout)
        return out
    out = tar.with_suffix(".tar.zst")
    with open(out, "wb") as f:
        for i in range(0, len(data), 2 << 20):
            f.write(subprocess.run(["zstd", "-q", "-c"], input=data[i:i + (2 << 20)],
                                   stdout=subprocess.PIPE, check=True).stdout)
    return out


SEVEN_BITS = bytes(b & 0x7f for b in range(256))


def literal_bytes(seed, n):
    """N bytes of 7-bit noise: deflate codes them as literals, as it does
    JPEG data, and inflate decodes them about as slowly."""
    return random.Random(repr(seed)).randbytes(n).translate(SEVEN_BITS)


def members(mnt):
    """(path, tar offset, size) of every member, from /.shardfs/members."""
    with open(os.path.join(mnt, ".shardfs", "members")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    return [(path, int(off), int(size)) for path, _, off, size in rows]


def members_below(mnt, limit):
    """Members whose bytes lie wholly below tar offset LIMIT."""
    return [path for path, off, size in members(mnt) if off + size <= limit]


def member_over(mnt, limit):
    """The member whose bytes run over tar offset LIMIT, or None."""
    return next((path for path, off, size in members(mnt)
                 if off < limit < off + size), None)
