# SPDX-License-Identifier: Apache-2.0
"""S3 shard sets behave like local ones (issue 33), against s3rver behind
the signature-checking proxy (remote_servers.py):

- s3://bucket/prefix/ takes the names a local directory takes (*.tar,
  *.tar.gz, *.tgz, *.tar.zst; other objects ignored): the same shards,
  in the same order, the same bytes as a mount of the local directory;
- s3://bucket/prefix without the '/' says that it is a prefix and names
  the argument that mounts it;
- a connection failure names the URL tried (the endpoint, not s3://);
- /proc/mounts (findmnt, df) shows the URL as given, not a path made of
  the working directory and the URL.
"""
import gzip
import os
import subprocess

import pytest

import remote_servers as rs
import shardfs_testlib as lib
from remote_servers import digests

BUCKET = "shards"
PREFIX = "train/"
# local file name -> how it is compressed
KINDS = {"shard-000000.tar": None, "shard-000001.tar.gz": "gzip",
         "shard-000002.tgz": "gzip", "shard-000003.tar.zst": "zstd"}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(endpoint URL, local directory of the same shards)."""
    work = tmp_path_factory.mktemp("s3local")
    plain, local = work / "plain", work / "local"
    plain.mkdir()
    local.mkdir()
    tars = rs.make_shards(plain, count=len(KINDS), files=20, seed=33)
    for tar, (name, kind) in zip(tars, KINDS.items()):
        data = (plain / tar).read_bytes()
        if kind == "gzip":
            data = gzip.compress(data, mtime=0)
        elif kind == "zstd":
            data = subprocess.run(["zstd", "-q", "-c"], input=data,
                                  stdout=subprocess.PIPE, check=True).stdout
        (local / name).write_bytes(data)
    (local / "notes.txt").write_text("not a shard\n")
    with rs.s3_server(str(work), [BUCKET]) as (_, url, upload):
        for name in sorted(os.listdir(local)):
            upload(BUCKET, PREFIX + name, local / name)
        yield url, local


def env_for(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               AWS_ACCESS_KEY_ID=rs.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=rs.SECRET_KEY)
    return env


def options(url):
    return ("-o", "endpoint=%s,region=%s" % (url, rs.REGION))


def listed_shards(mnt):
    with open(mnt / ".shardfs" / "shards") as f:
        return [os.path.basename(line.split("\t")[1]) for line in f]


def test_prefix_takes_the_names_a_directory_takes(s3, tmp_path):
    url, local = s3
    spec = "s3://%s/%s" % (BUCKET, PREFIX)
    with lib.mounted(str(local), tmp_path / "a", env=env_for(tmp_path)):
        want_names = listed_shards(tmp_path / "a")
        want = digests(tmp_path / "a")
    assert want_names == list(KINDS)
    with lib.mounted(spec, tmp_path / "b", *options(url), env=env_for(tmp_path)):
        assert listed_shards(tmp_path / "b") == want_names
        assert digests(tmp_path / "b") == want
        # what mount(8), findmnt and df show: the URL, as given
        assert lib.mount_entry(tmp_path / "b")[0] == spec


def test_prefix_without_slash_says_so(s3, tmp_path):
    url, _ = s3
    spec = "s3://%s/%s" % (BUCKET, PREFIX.rstrip("/"))
    (tmp_path / "mnt").mkdir()
    res, was_mounted, left = lib.run_shardfs_expect_failure(
        spec, tmp_path / "mnt", *options(url), env=env_for(tmp_path))
    assert res.returncode == 1 and not was_mounted and not left
    assert "404" in res.stderr, res.stderr
    assert "is a prefix" in res.stderr and "mount them with %s/" % spec in res.stderr, \
        res.stderr
    # an object that is simply missing gets no such advice
    res, _, _ = lib.run_shardfs_expect_failure(
        "s3://%s/%smissing.tar" % (BUCKET, PREFIX), tmp_path / "mnt", *options(url),
        env=env_for(tmp_path))
    assert res.returncode == 1 and "404" in res.stderr
    assert "is a prefix" not in res.stderr, res.stderr


def test_connection_failure_names_the_url(tmp_path):
    port = rs.free_port()       # nothing listens there
    endpoint = "http://127.0.0.1:%d" % port
    (tmp_path / "mnt").mkdir()
    res, was_mounted, _ = lib.run_shardfs_expect_failure(
        "s3://%s/%sshard-000000.tar" % (BUCKET, PREFIX), tmp_path / "mnt",
        "-o", "endpoint=%s,region=%s,remote_attempts=1" % (endpoint, rs.REGION),
        env=env_for(tmp_path))
    assert res.returncode == 1 and not was_mounted
    assert "Couldn't connect" in res.stderr, res.stderr
    assert "%s/%s/%sshard-000000.tar" % (endpoint, BUCKET, PREFIX) in res.stderr, \
        res.stderr

