# SPDX-License-Identifier: Apache-2.0
"""Compressed shards on a web server: https:// mounts of .tar.gz and
.tar.zst shards against nginx on loopback (remote_servers.py), decoded
through the same seek points as local ones, over ranged reads.

- gzip in 1 MiB members (as shardfs-pack --compress=gzip writes them),
  gzip in one member (window points), zstd in 1 MiB frames, zstd in one
  frame: every member equals GNU tar's extraction of the same compressed
  file, read whole and at random offsets and sizes;
- a remount maps the cached index and decodes nothing;
- shards written by shardfs-pack --compress with their index published
  next to them: a fresh node mounts from that index and decodes nothing.
"""
import os
import random
import re
import subprocess

import pytest

import remote_servers as rs
import shardfs_testlib as lib

PACK = lib.binary("shardfs-pack")
DECODED_RE = re.compile(r"(gzip|zstd) decoded for its seek table")
MIB = 1 << 20


def split(data, argv):
    """One gzip member or zstd frame per MiB of DATA, concatenated."""
    return b"".join(subprocess.run(argv + ["--stream-size=%d" % len(data[i:i + MIB])]
                                   if argv[0] == "zstd" else argv,
                                   input=data[i:i + MIB], stdout=subprocess.PIPE,
                                   check=True).stdout
                    for i in range(0, len(data), MIB))


def whole(data, argv):
    return subprocess.run(argv, input=data, stdout=subprocess.PIPE, check=True).stdout


KINDS = {
    "gzip-members": (".tar.gz", lambda d: split(d, ["gzip", "-c", "-n"])),
    "gzip": (".tar.gz", lambda d: whole(d, ["gzip", "-c", "-n"])),
    "zstd-frames": (".tar.zst", lambda d: split(d, ["zstd", "-q", "-c"])),
    "zstd": (".tar.zst", lambda d: whole(d, ["zstd", "-q", "-c"])),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(www root, {kind: shard names}, {kind: reference tree, start_ns})."""
    work = tmp_path_factory.mktemp("www")
    www = work / "www"
    www.mkdir()
    plain = work / "plain"
    plain.mkdir()
    tars = rs.make_shards(plain, count=2, files=40)
    names, refs = {}, {}
    for kind, (suffix, make) in KINDS.items():
        names[kind] = []
        for t in tars:
            name = "%s-%s%s" % (kind, t[:-len(".tar")], suffix)
            (www / name).write_bytes(make((plain / t).read_bytes()))
            names[kind].append(name)
        ref = work / ("ref-" + kind)
        refs[kind] = (ref, lib.extract_reference_ok([www / n for n in names[kind]], ref))
    return www, names, refs


@pytest.fixture(scope="module")
def tls(site, tmp_path_factory):
    """nginx over TLS serving the site: (base URL, its certificate)."""
    work = tmp_path_factory.mktemp("ng")
    cert, key = rs.self_signed_cert(str(work))
    with rs.nginx(site[0], str(work / "ng"), cert=(cert, key)) as base:
        yield base, cert


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_compressed_over_https(site, tls, tmp_path, kind):
    www, names, refs = site
    url, cert = tls
    ref, start_ns = refs[kind]
    shards = ",".join("%s/%s" % (url, n) for n in names[kind])
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    mnt = tmp_path / "mnt"
    opts = ["-o", "cacert=%s,loglevel=debug" % cert]
    with lib.mounted(shards, mnt, *opts, env=env) as r:
        assert len(DECODED_RE.findall(r.stderr)) == len(names[kind]), r.stderr
        assert "compressed shards: %d %s" % (len(names[kind]), kind.split("-")[0]) \
            in r.stderr, r.stderr
        lib.compare_trees(mnt, ref, start_ns)
        rnd = random.Random(kind)
        files = sorted(os.path.relpath(os.path.join(d, f), ref)
                       for d, _, fs in os.walk(ref) for f in fs)
        for name in rnd.sample(files, 12):
            want = (ref / name).read_bytes()
            assert lib.read_in_random_pieces(mnt / name, len(want), rnd) == want, name
    # the index was cached: a remount decodes nothing
    with lib.mounted(shards, mnt, *opts, env=env) as r:
        assert re.search(r"index file .*: loaded", r.stderr), r.stderr
        assert not DECODED_RE.search(r.stderr), r.stderr
        lib.compare_trees(mnt, ref, start_ns)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how,suffix", [("gzip", ".tar.gz"), ("zstd", ".tar.zst")])
def test_packed_compressed_over_https(tmp_path, how, suffix):
    """shardfs-pack --compress shards with their index, published: a
    fresh node mounts from the index, decodes nothing to find the seek
    points, and serves every member as GNU tar extracts it."""
    src = tmp_path / "src"
    rnd = random.Random(how)
    for i in range(120):
        lib.write_file(src / ("%03d" % (i // 30)) / ("%05d.jpg" % i),
                       lib.deterministic_bytes((how, i), rnd.randrange(1000, 120_000)))
        lib.write_file(src / ("%03d" % (i // 30)) / ("%05d.json" % i),
                       b'{"label": %d}\n' % i * rnd.randrange(1, 50))
    www = tmp_path / "www"
    r = lib.run_cmd([PACK, "--compress=" + how, "--max-size", "3M", "-q", str(src),
                     str(www / ("shard-%06d" + suffix))])
    assert r.returncode == 0, r
    names = sorted(n for n in os.listdir(www) if n.endswith(suffix))
    assert len(names) > 1
    ref = tmp_path / "ref"
    start_ns = lib.extract_reference_ok([www / n for n in names], ref)
    cert, key = rs.self_signed_cert(str(tmp_path))
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    with rs.nginx(www, str(tmp_path / "ng"), cert=(cert, key)) as url:
        shards = "%s/shard-{000000..%06d}%s" % (url, len(names) - 1, suffix)
        mnt = tmp_path / "mnt"
        with lib.mounted(shards, mnt, "-o", "cacert=%s,loglevel=debug" % cert,
                         env=env) as m:
            assert not DECODED_RE.search(m.stderr), m.stderr
            lib.compare_trees(mnt, ref, start_ns)
