# SPDX-License-Identifier: Apache-2.0
"""shardfs-index --publish (issue 33): the index of an s3:// set is
uploaded where every mount looks for it (next to the first shard), with
a PUT signed as the mount signs its GETs -- same endpoint, region and
credentials options, checked by botocore in the proxy in front of s3rver
(remote_servers.py), which also checks the body against the signed
SHA-256.  A fresh node then mounts with the LIST pages and one GET.

- a wrong secret is refused (the listing, signed the same way, before
  the PUT) and the command says so (exit 1);
- a local set or -o index=: nothing to publish (exit 2);
- publishing again when the published copy is valid uploads nothing.
"""
import os

import pytest

import remote_servers as rs
import shardfs_testlib as lib
from remote_servers import digests

BUCKET = "shards"
PREFIX = "pub/"
INDEX = lib.binary("shardfs-index")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    work = tmp_path_factory.mktemp("publish")
    local = work / "local"
    local.mkdir()
    names = rs.make_shards(local, count=3, files=30, seed=7)
    ref = work / "ref"
    lib.extract_reference_ok([local / n for n in names], ref)
    with rs.s3_server(str(work), [BUCKET]) as (stats, url, upload):
        for n in names:
            upload(BUCKET, PREFIX + n, local / n)
        yield stats, url, local, names, ref


def env_for(tmp_path, cache, secret=rs.SECRET_KEY):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / cache),
               AWS_ACCESS_KEY_ID=rs.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=secret)
    return env


def options(url, *more):
    return ("-o", ",".join(("endpoint=" + url, "region=" + rs.REGION) + more))


def test_publish_then_a_fresh_node_mounts_with_one_get(s3, tmp_path):
    stats, url, _, names, ref = s3
    spec = "s3://%s/%s" % (BUCKET, PREFIX)
    published = "%s.%s.shardfs-index" % (PREFIX, names[0])
    rejected = stats.rejected
    r = lib.run_cmd([INDEX, "--publish", *options(url), spec],
                    env=env_for(tmp_path, "builder"))
    assert r.returncode == 0, r
    assert "s3://%s/%s: published" % (BUCKET, published) in r.stderr, r.stderr
    puts = [p for m, p in stats.requests if m == "PUT"]
    assert puts == ["/%s/%s" % (BUCKET, published)], puts
    assert stats.rejected == rejected
    # a fresh node: LIST pages and one GET, the index
    before = len(stats.requests)
    mnt = tmp_path / "mnt"
    with lib.mounted(spec, mnt, *options(url), env=env_for(tmp_path, "fresh")):
        at_mount = stats.requests[before:]
        pages = [p for _, p in at_mount if "list-type=2" in p]
        assert len(at_mount) == len(pages) + 1, at_mount
        assert at_mount[-1] == ("GET", "/%s/%s" % (BUCKET, published)), at_mount
        assert digests(mnt) == digests(ref)
    # again: the published copy is valid, nothing is uploaded
    r = lib.run_cmd([INDEX, "--publish", *options(url), spec],
                    env=env_for(tmp_path, "again"))
    assert r.returncode == 0 and "already published" in r.stderr, r
    assert [p for m, p in stats.requests if m == "PUT"] == puts


def test_wrong_secret_is_refused(s3, tmp_path):
    stats, url, _, _, _ = s3
    # the listing is signed with the same wrong secret: refused first
    r = lib.run_cmd([INDEX, "--publish", *options(url), "-o", "index_mode=rebuild",
                     "s3://%s/%s" % (BUCKET, PREFIX)],
                    env=env_for(tmp_path, "wrong", secret="WRONG"))
    assert r.returncode == 1 and "SignatureDoesNotMatch" in r.stderr, r


def test_nothing_to_publish(s3, tmp_path):
    _, url, local, _, _ = s3
    r = lib.run_cmd([INDEX, "--publish", str(local)], env=env_for(tmp_path, "c"))
    assert r.returncode == 2 and "already next to its shards" in r.stderr, r
    r = lib.run_cmd([INDEX, "--publish", *options(url, "index=%s" % (tmp_path / "i")),
                     "s3://%s/%s" % (BUCKET, PREFIX)], env=env_for(tmp_path, "c"))
    assert r.returncode == 2 and "-o index= is not where mounts look" in r.stderr, r
