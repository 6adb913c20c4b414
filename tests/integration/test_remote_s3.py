# SPDX-License-Identifier: Apache-2.0
"""Shards on S3: s3:// mounts against s3rver behind a proxy that checks
every SigV4 signature with botocore (remote_servers.py says what that
does and does not prove).

- s3://bucket/prefix/ lists every *.tar (other objects ignored) over
  several ListObjectsV2 pages (continuation tokens with '+', '/' and
  '=' in them, signed), sorted; every byte equals tar -x.
- Brace ranges of s3:// URLs and comma lists mixing s3://, http:// and
  local paths.
- Credentials from the environment (with a session token), from
  ~/.aws/credentials with -o aws_profile=, from -o credentials=FILE with
  no environment at all (fstab), and none with -o no_sign_request; a
  wrong secret is refused by the server and the mount says why.
- Path-style and virtual-hosted addressing.
- mount -t fuse.shardfs with no environment, everything from -o.
- A fresh node mounts with the LIST pages of the prefix and one GET of
  the index published next to the shards (no probe per shard).
- The secret appears nowhere: not in messages (even at debug level), not
  in /.shardfs/.
- Rotated credentials: the server accepts only new keys, the credentials
  file is rewritten mid-mount (as a credential agent does), and reads go
  on with the right bytes, whether the change is noticed by its mtime or
  by the refusal of a request signed with the old keys.
"""
import errno
import hashlib
import os
import re
import time

import pytest

import remote_servers as rs
import shardfs_testlib as lib
from remote_servers import digests, make_shards, remote_stats
from test_core_cli import shardfs_on_default_path  # noqa: F401 (a fixture)

BUCKET = "shards"
PREFIX = "train/set/"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(stats, endpoint, local shard dir, names, reference tree)."""
    work = tmp_path_factory.mktemp("s3")
    local = work / "local"
    local.mkdir()
    names = make_shards(local, count=3, seed=3)
    ref = work / "ref"
    lib.extract_reference_ok([local / n for n in names], ref)
    with rs.s3_server(str(work), [BUCKET]) as (stats, url, upload):
        for n in names:
            upload(BUCKET, PREFIX + n, local / n)
        upload(BUCKET, PREFIX + "README.txt", local / names[0])
        upload(BUCKET, "train/other/shard-000009.tar", local / names[0])
        yield stats, url, local, names, ref


def clean_env(tmp_path, **extra):
    """The test environment without AWS settings, with a private HOME and
    index cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.update(extra)
    return env


def key_env(tmp_path, secret=rs.SECRET_KEY, **extra):
    return clean_env(tmp_path, AWS_ACCESS_KEY_ID=rs.ACCESS_KEY,
                     AWS_SECRET_ACCESS_KEY=secret, **extra)


def options(url, *more):
    return ("-o", ",".join(("endpoint=" + url, "region=" + rs.REGION) + more))


def test_prefix_listing_every_byte(s3, tmp_path):
    stats, url, _, names, ref = s3
    rejected, mnt = stats.rejected, tmp_path / "mnt"
    with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), mnt, *options(url),
                     env=key_env(tmp_path)):
        assert digests(mnt) == digests(ref)
        with open(mnt / ".shardfs" / "shards") as f:
            listed = [line.split("\t")[1] for line in f]
        assert listed == ["s3://%s/%s%s" % (BUCKET, PREFIX, n) for n in names]
        assert remote_stats(mnt)["errors"] == 0
    assert stats.rejected == rejected
    pages = [p for m, p in stats.requests if "list-type=2" in p]
    assert any("continuation-token=" in p for p in pages), pages


def test_brace_range_and_mixed_list(s3, tmp_path):
    stats, url, local, names, ref = s3
    spec = "s3://%s/%sshard-{000000..000001}.tar,%s" % (BUCKET, PREFIX, local / names[2])
    with lib.mounted(spec, tmp_path / "mnt", *options(url), env=key_env(tmp_path)):
        assert digests(tmp_path / "mnt") == digests(ref)


def test_session_token_and_virtual_hosted(s3, tmp_path):
    stats, url, _, _, ref = s3
    rejected = stats.rejected
    vurl = url.replace("127.0.0.1", "localhost")
    env = key_env(tmp_path, AWS_SESSION_TOKEN="FQoGZXIvYXdzE//token+with/odd=chars")
    with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), tmp_path / "mnt",
                     *options(vurl, "s3_addressing=virtual"), env=env):
        assert digests(tmp_path / "mnt") == digests(ref)
    assert stats.rejected == rejected
    hosts_seen = [p for m, p in stats.requests[-3:]]
    assert all(not p.startswith("/" + BUCKET) for p in hosts_seen), hosts_seen


def test_profile_and_credentials_file_without_environment(s3, tmp_path):
    _, url, _, _, ref = s3
    home = tmp_path / "home" / ".aws"
    home.mkdir(parents=True)
    (home / "credentials").write_text(
        "[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n"
        "[train]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
        % (rs.ACCESS_KEY, rs.SECRET_KEY))
    (home / "config").write_text("[profile train]\nregion = %s\n" % rs.REGION)
    env = clean_env(tmp_path)
    # region from the profile's config, keys from its credentials
    with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), tmp_path / "mnt",
                     "-o", "endpoint=%s,aws_profile=train" % url, env=env):
        assert digests(tmp_path / "mnt") == digests(ref)
    # fstab: no environment at all, everything from -o
    creds = tmp_path / "creds.ini"
    creds.write_text("[default]\naws_access_key_id=%s\naws_secret_access_key=%s\n"
                     % (rs.ACCESS_KEY, rs.SECRET_KEY))
    with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), tmp_path / "mnt",
                     *options(url, "credentials=%s" % creds),
                     env={"PATH": os.environ["PATH"],
                          "XDG_CACHE_HOME": str(tmp_path / "cache2")}):
        assert digests(tmp_path / "mnt") == digests(ref)


def test_wrong_secret_is_refused_and_secret_never_shown(s3, tmp_path):
    stats, url, _, _, ref = s3
    rejected = stats.rejected
    (tmp_path / "mnt").mkdir()
    r, was_mounted, _ = lib.run_shardfs_expect_failure(
        "s3://%s/%s" % (BUCKET, PREFIX), tmp_path / "mnt",
        *options(url, "loglevel=debug"), env=key_env(tmp_path, secret="wrong/secret"))
    assert r.returncode == 1 and not was_mounted
    assert "SignatureDoesNotMatch" in r.stderr, r.stderr
    assert stats.rejected > rejected
    assert "wrong/secret" not in r.stderr
    with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), tmp_path / "mnt",
                     *options(url, "loglevel=debug"), env=key_env(tmp_path)) as proc:
        for name in os.listdir(tmp_path / "mnt" / ".shardfs"):
            with open(tmp_path / "mnt" / ".shardfs" / name) as f:
                assert rs.SECRET_KEY not in f.read()
        assert rs.SECRET_KEY not in proc.stderr


def write_credentials(path, key, secret, token):
    """Write an AWS credentials file as an agent does: a new file renamed
    over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_text("[default]\naws_access_key_id=%s\naws_secret_access_key=%s\n"
                   "aws_session_token=%s\n" % (key, secret, token))
    tmp.chmod(0o600)
    os.replace(tmp, path)


@pytest.mark.parametrize("noticed_by", ["mtime", "refusal"])
def test_rotated_credentials_are_picked_up(s3, tmp_path, noticed_by):
    stats, url, _, names, ref = s3
    creds = tmp_path / "creds.ini"
    write_credentials(creds, rs.ACCESS_KEY, rs.SECRET_KEY, "token-one")
    mnt = tmp_path / "mnt"
    want = digests(ref)
    # as long as the old ones: a file of the same size
    new_key = ("AKIDROTATED" + noticed_by.upper())[:15].ljust(15, "X")
    new_secret = ("rotated/secret+" + noticed_by)[:23].ljust(23, "x")
    log = tmp_path / "shardfs.log"
    try:
        # 64 KiB chunks in 256 KiB: every file read later is a new GET
        with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), mnt,
                         *options(url, "credentials=%s" % creds,
                                  "chunk_size=64K,cache_mem=256K,log=%s" % log),
                         env=clean_env(tmp_path)):
            files = sorted(want)
            half = len(files) // 2
            for p in files[:half]:
                assert lib.read_member(mnt / p)[1] is None, p
            old = os.stat(creds)
            with stats.lock:
                stats.keys = {new_key: new_secret}
            rejected = stats.rejected
            if noticed_by == "refusal":
                # rewritten in place, the same size and mtime: only a
                # refused request tells
                creds.write_text(creds.read_text().replace(rs.ACCESS_KEY, new_key)
                                 .replace(rs.SECRET_KEY, new_secret)
                                 .replace("token-one", "token-two"))
                os.utime(creds, ns=(old.st_atime_ns, old.st_mtime_ns))
                assert os.stat(creds).st_size == old.st_size
                assert os.stat(creds).st_ino == old.st_ino
            else:
                write_credentials(creds, new_key, new_secret, "token-two")
                time.sleep(1.2)     # past the check interval
            for p in files[half:]:
                data, err = lib.read_member(mnt / p)
                assert err is None, (p, errno.errorcode.get(err))
                assert hashlib.sha256(data).hexdigest() == want[p], p
            st = remote_stats(mnt)
            assert st["errors"] == 0, st
        if noticed_by == "refusal":
            assert stats.rejected > rejected
        text = log.read_text()
        assert "credentials changed" in text, text
        assert new_secret not in text and rs.SECRET_KEY not in text
    finally:
        with stats.lock:
            stats.keys = {rs.ACCESS_KEY: rs.SECRET_KEY}


def test_no_sign_request(s3, tmp_path):
    stats, url, _, _, ref = s3
    before = len(stats.requests)
    with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), tmp_path / "mnt",
                     *options(url, "no_sign_request"), env=clean_env(tmp_path)):
        assert digests(tmp_path / "mnt") == digests(ref)
    assert len(stats.requests) > before


def test_missing_credentials_say_what_to_do(s3, tmp_path):
    _, url, _, _, _ = s3
    (tmp_path / "mnt").mkdir()
    r, _, _ = lib.run_shardfs_expect_failure(
        "s3://%s/%s" % (BUCKET, PREFIX), tmp_path / "mnt", *options(url),
        env=clean_env(tmp_path))
    assert r.returncode == 1
    assert "no AWS credentials" in r.stderr and "no_sign_request" in r.stderr, r.stderr


def test_fresh_node_mounts_with_a_handful_of_requests(s3, tmp_path):
    """shardfs-index writes the index of the remote set; uploaded under
    the name it gives, a fresh node mounts with the prefix's LIST pages
    and one GET: no request per shard."""
    stats, url, _, names, ref = s3
    r = lib.run_cmd([lib.binary("shardfs-index"), *options(url),
                     "s3://%s/%s" % (BUCKET, PREFIX)], env=key_env(tmp_path))
    assert r.returncode == 0, r
    m = re.search(r"(\S+): to let other nodes mount with one request, upload "
                  r"this index as s3://%s/(\S+)" % BUCKET, r.stderr)
    assert m, r.stderr
    assert m.group(2) == "%s.%s.shardfs-index" % (PREFIX, names[0])
    stats.upload(BUCKET, m.group(2), m.group(1))
    before = len(stats.requests)
    mnt = tmp_path / "mnt"
    env = key_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "fresh"))
    with lib.mounted("s3://%s/%s" % (BUCKET, PREFIX), mnt, *options(url), env=env):
        at_mount = stats.requests[before:]
        pages = [p for _, p in at_mount if "list-type=2" in p]
        assert len(at_mount) == len(pages) + 1, at_mount
        assert at_mount[-1][1].endswith(".shardfs-index")
        assert digests(mnt) == digests(ref)


def test_mount_t_fuse_shardfs_without_environment(s3, tmp_path, shardfs_on_default_path):
    """mount(8) and fstab pass no environment: every setting from -o."""
    _, url, _, _, ref = s3
    creds = tmp_path / "creds.ini"
    creds.write_text("[default]\naws_access_key_id=%s\naws_secret_access_key=%s\n"
                     % (rs.ACCESS_KEY, rs.SECRET_KEY))
    creds.chmod(0o600)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with lib.registered_mount(mnt):
        r = lib.run_cmd(["mount", "-t", "fuse.shardfs", "s3://%s/%s" % (BUCKET, PREFIX),
                         str(mnt), "-o", "ro,endpoint=%s,region=%s,credentials=%s,index=%s"
                         % (url, rs.REGION, creds, tmp_path / "index")],
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        assert r.returncode == 0, r
        assert lib.mount_entry(mnt)[1] == "fuse.shardfs"
        assert digests(mnt) == digests(ref)
