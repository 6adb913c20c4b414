# SPDX-License-Identifier: Apache-2.0
"""Shards on web servers: http:// and https:// mounts against real servers
on loopback (remote_servers.py, the site of remote_site.py).

- TLS is verified: a self-signed server is refused, and accepted with
  -o cacert=.
- A server that ignores Range (Python's http.server) is refused at mount
  with a message that says so; so is a bad -o index_fetch=.
- Faults (a proxy in front of nginx): bodies cut short and 503 bursts are
  retried and resumed, the data still exact; a stalled server turns into
  EIO within remote_timeout; an object replaced under the mount fails
  with EIO and a log line naming it, never mixed bytes.
- The chunk cache on disk stays within cache_size.
- Hard links two and three shards back are bound by scanning the shards
  before them again, over http:// too: the tree a mount that builds in
  memory serves.

What a mount costs in requests, bytes and connections (a full read, a
random read, the index build, the disk cache, a published index,
HTTP/2 and keep-alive connections), with every byte also compared with
`tar -x`: test_perf.py, the serial perf group.
"""
import errno
import os
import shutil
import tarfile
import time

import remote_servers as rs
import shardfs_testlib as lib

from remote_servers import CHUNK, digests, remote_stats
from remote_site import spec

# the fixtures site, url and cache_env
pytest_plugins = ("remote_site",)


def test_bad_index_fetch_is_refused(site, url, tmp_path, cache_env):
    www, names, ref = site
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r, was_mounted, daemon_left = lib.run_shardfs_expect_failure(
        spec(url, names), mnt, "-o", "index_fetch=headers", env=cache_env)
    assert r.returncode != 0 and not was_mounted and not daemon_left
    assert "bad index_fetch 'headers' (stream or ranged)" in r.stderr


def test_tls_is_verified(site, tmp_path, cache_env):
    www, names, _ = site
    cert, key = rs.self_signed_cert(str(tmp_path))
    with rs.nginx(www, str(tmp_path / "ng"), cert=(cert, key)) as url:
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        # a certificate that does not verify is not asked again
        r, _, _ = lib.run_shardfs_expect_failure(spec(url, names), mnt,
                                                 "-o", "loglevel=debug", env=cache_env)
        assert "certificate" in r.stderr.lower(), r.stderr
        assert "; retry" not in r.stderr, r.stderr
        with lib.mounted(spec(url, names), mnt, "-o", "cacert=%s" % cert,
                         env=cache_env):
            assert len(digests(mnt)) == 60 * len(names)


def test_server_ignoring_range_is_refused(site, tmp_path, cache_env):
    www, names, _ = site
    (tmp_path / "mnt").mkdir()
    with rs.no_range_server(www) as url:
        r, mounted, _ = lib.run_shardfs_expect_failure(
            spec(url, names), tmp_path / "mnt", env=cache_env)
        assert r.returncode == 1 and not mounted
        assert "ignores Range" in r.stderr, r.stderr
        assert "shard-000000.tar" in r.stderr


def test_cut_bodies_and_503_bursts_are_retried(site, tmp_path, cache_env):
    www, names, ref = site
    with rs.nginx(www, str(tmp_path / "ng")) as url, \
            rs.fault_proxy(url) as (faults, purl):
        faults.cut, faults.cut_at = 4, 300_000
        faults.unavailable = 3
        mnt = tmp_path / "mnt"
        with lib.mounted(spec(purl, names), mnt, "-o",
                         "chunk_size=1M,cache_mem=8M,remote_attempts=10",
                         env=cache_env):
            faults.cut, faults.unavailable = 4, 3
            assert digests(mnt) == digests(ref)
            st = remote_stats(mnt)
        assert st["retries"] >= 7 and st["errors"] == 0
        # a retry after a cut asks for the rest only
        resumed = [r for r in faults.ranges if r and not r.endswith("-0")
                   and int(r.split("=")[1].split("-")[0]) % CHUNK]
        assert resumed, faults.ranges


def test_stalled_server_gives_eio_in_bounded_time(site, tmp_path, cache_env):
    www, names, _ = site
    with rs.nginx(www, str(tmp_path / "ng")) as url, \
            rs.fault_proxy(url) as (faults, purl):
        mnt = tmp_path / "mnt"
        with lib.mounted(spec(purl, names), mnt, "-o",
                         "chunk_size=1M,cache_mem=4M,remote_timeout=2,index_mode=off",
                         env=cache_env):
            # the first member: its chunk was evicted by the later shards
            path = mnt / "s0" / sorted(os.listdir(mnt / "s0"))[0]
            faults.stall = True
            try:
                start = time.time()
                _, err = lib.read_member(path)
                elapsed = time.time() - start
            finally:
                faults.stall = False
            assert err == errno.EIO
            assert elapsed < 20, elapsed
            assert remote_stats(mnt)["errors"] >= 1


def test_replaced_object_fails_with_eio_and_is_named(site, tmp_path, cache_env):
    www, names, _ = site
    mine = tmp_path / "mine"
    shutil.copytree(www, mine)
    log = tmp_path / "shardfs.log"
    with rs.nginx(mine, str(tmp_path / "ng")) as url:
        mnt = tmp_path / "mnt"
        with lib.mounted(spec(url, names), mnt, "-o",
                         "chunk_size=256K,cache_mem=1M,log=%s" % log, env=cache_env):
            # same size, other bytes, later mtime: nginx's ETag changes
            victim = mine / names[1]
            data = bytearray(victim.read_bytes())
            data[-20000] ^= 0xFF
            victim.write_bytes(bytes(data))
            os.utime(victim, (time.time() + 5, time.time() + 5))
            files = sorted(os.listdir(mnt / "s1"))
            errs = [lib.read_member(mnt / "s1" / f)[1] for f in files[-3:]]
            assert errno.EIO in errs and set(errs) <= {errno.EIO}, errs
            assert remote_stats(mnt)["replaced_objects"] == 1
        text = log.read_text()
        assert names[1] in text and "replaced" in text, text


def test_disk_cache_stays_within_cache_size(site, url, tmp_path, cache_env):
    www, names, ref = site
    cache = tmp_path / "chunks"
    mnt = tmp_path / "mnt"
    with lib.mounted(spec(url, names), mnt, "-o",
                     "chunk_size=1M,cache_mem=4M,cache_dir=%s,cache_size=5M" % cache,
                     env=cache_env):
        assert digests(mnt) == digests(ref)
    # an eviction a store began may still run after the unmount
    assert lib.wait_for_daemon_exit(mnt)
    on_disk = sum(os.path.getsize(f) for f in cache.glob("*/*/*.chunk"))
    assert 0 < on_disk <= 5 << 20




def _read_all(mnt, ref, rels):
    """Read RELS of the mount whole, each compared with the reference."""
    for rel in rels:
        with open(os.path.join(mnt, rel), "rb") as f, open(os.path.join(ref, rel), "rb") as g:
            assert f.read() == g.read(), rel


def test_dense_reader_after_sparse_one_gets_every_byte(site, url, tmp_path, cache_env):
    """A node's sparse share at random (ranges fetched), then every file
    at random, then every file in shard order (whole chunks), then the
    sparse share again, on one mount through a cache of 4 chunks: every
    byte right, and both access classes were taken."""
    import random
    www, names, ref = site
    rels = sorted(digests(ref))
    mnt = tmp_path / "mnt"
    with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=1M,cache_mem=4M",
                     env=cache_env):
        for _ in os.walk(mnt):
            pass
        sparse = random.Random(1).sample(rels, len(rels) // 4)
        _read_all(mnt, ref, sparse)
        assert remote_stats(mnt)["fetched"]["random_bytes"] > 0
        lib.forget_pages(mnt, rels)
        _read_all(mnt, ref, random.Random(2).sample(rels, len(rels)))
        lib.forget_pages(mnt, rels)
        _read_all(mnt, ref, sorted(rels, key=lambda r: (
            int(os.getxattr(mnt / r, "user.shardfs.shard_index")),
            int(os.getxattr(mnt / r, "user.shardfs.offset")))))
        assert remote_stats(mnt)["fetched"]["sequential_bytes"] > 0
        lib.forget_pages(mnt, rels)
        _read_all(mnt, ref, sparse)


def _tree(mnt):
    """Every file under MNT: path, inode, link count, bytes."""
    out = []
    for dirpath, _, files in os.walk(mnt):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            with open(path, "rb") as f:
                out.append((os.path.relpath(path, mnt), st.st_ino, st.st_nlink, f.read()))
    return sorted(out)


def test_hard_links_further_back_are_built_bounded(tmp_path, cache_env):
    """Shards over http:// whose hard links name files two and three
    shards back: shardfs-index scans the shards before them again, builds
    nothing in memory, and a mount of its index serves the tree (inodes,
    link counts, bytes) of a mount that builds in memory."""
    www = tmp_path / "www"
    www.mkdir()
    for i in range(4):
        members = [("d/%d-%02d.jpg" % (i, j), b"%d.%d " % (i, j) * 40) for j in range(30)]
        if i >= 2:
            members.append({"name": "links/%d.jpg" % i, "type": tarfile.LNKTYPE,
                            "linkname": "d/0-%02d.jpg" % i})
        lib.tar_from_members(www / ("s-%d.tar" % i), members)
    index, mnt = tmp_path / "set.idx", tmp_path / "mnt"
    with rs.nginx(str(www), str(tmp_path / "ng")) as base:
        shards = base + "/s-{0..3}.tar"
        r = lib.run_cmd([lib.binary("shardfs-index"), "-o",
                         "index=%s,index_mode=rebuild" % index, shards], env=cache_env)
        assert r.returncode == 0, r
        assert "further back than the shard before theirs: 2;" in r.stderr, r
        assert "built in memory" not in r.stderr, r
        trees = []
        for opts in ("index=%s,index_mode=require" % index, "index_mode=off"):
            with lib.mounted(shards, mnt, "-o", opts, env=cache_env):
                trees.append(_tree(mnt))
    assert trees[0] == trees[1]
    links = [t for t in trees[0] if t[2] > 1]
    assert sorted(t[0] for t in links) == ["d/0-02.jpg", "d/0-03.jpg", "links/2.jpg",
                                           "links/3.jpg"]
