# SPDX-License-Identifier: Apache-2.0
"""Messages that point the right way (issue 33, "the platform engineer's
first hour"):

- SHARDS and MOUNTPOINT swapped: the mountpoint is called a shard
  directory and the swap is named, not "use -o nonempty";
- a second mount on a live shardfs mount names that mount and how to
  unmount it; other files at the mountpoint are said to be hidden by a
  mount;
- a user who may not use /dev/fuse is told so before any summary of an
  index build is printed (and nothing is mounted);
- -o quiet prints nothing on a clean mount, the "no syslog" note
  included;
- an option typo gets the nearest option, from shardfs and
  shardfs-index.
"""
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

import shardfs_testlib as lib

SHARDFS_INDEX = lib.binary("shardfs-index")


def one_shard(path):
    src = path.parent / (path.name + ".src")
    lib.write_file(src / "a/x.txt", b"x" * 100)
    lib.finish_dirs(src)
    lib.gnu_tar_create(path, src, ["a/x.txt"], "gnu")
    shutil.rmtree(src)


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    one_shard(d / "shard-000000.tar")
    one_shard(d / "shard-000001.tar")
    (tmp_path / "mnt").mkdir()
    return d


def test_swapped_arguments_name_the_shard_directory(shards, tmp_path):
    res, was_mounted, left = lib.run_shardfs_expect_failure(
        tmp_path / "mnt", shards, "-o", "index_mode=off")
    assert res.returncode == 1 and not was_mounted and not left
    assert re.search(r"holds 2 shards \(shard-00000[01]\.tar\)", res.stderr), res.stderr
    assert "SHARDS and MOUNTPOINT swapped" in res.stderr
    assert "nonempty" not in res.stderr
    assert sorted(os.listdir(shards)) == ["shard-000000.tar", "shard-000001.tar"]


def test_second_mount_names_the_live_mount(shards, tmp_path):
    mnt = tmp_path / "mnt"
    with lib.mounted(shards, mnt, "-o", "index_mode=off,quiet"):
        # not run_shardfs_expect_failure: its cleanup would unmount the
        # first mount; a second mount that succeeded is unmounted here
        res = lib.run_cmd(lib.shardfs_argv(shards, mnt, "-o", "index_mode=off"))
        if res.returncode == 0:
            lib.unmount(mnt)
        assert res.returncode == 1, res.stderr
        assert "already a shardfs mount (of %s)" % shards in res.stderr, res.stderr
        assert "fusermount3 -u %s" % mnt in res.stderr
        assert "nonempty" not in res.stderr
        # the first mount is untouched
        assert (mnt / "a" / "x.txt").read_bytes() == b"x" * 100


def test_other_files_are_said_to_be_hidden(shards, tmp_path):
    (tmp_path / "mnt" / "notes.txt").write_text("mine\n")
    res, was_mounted, _ = lib.run_shardfs_expect_failure(
        shards, tmp_path / "mnt", "-o", "index_mode=off")
    assert res.returncode == 1 and not was_mounted
    assert "not empty (1 entry, e.g. 'notes.txt')" in res.stderr, res.stderr
    assert "would hide them" in res.stderr


def test_no_access_to_dev_fuse_fails_before_the_summary(tmp_path):
    """/dev/fuse replaced (in a private mount namespace) by a node only
    root may open; shardfs run as nobody."""
    if not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs unshare and setpriv (util-linux)")
    work = tempfile.mkdtemp(prefix="shardfs-devfuse-")
    try:
        os.chmod(work, 0o755)
        shard, mnt, fake = (os.path.join(work, n) for n in ("s.tar", "mnt", "fuse"))
        one_shard(pathlib.Path(shard))
        os.chmod(shard, 0o644)
        os.mkdir(mnt)
        os.chmod(mnt, 0o777)
        with open(fake, "w"):
            pass
        os.chmod(fake, 0o600)
        script = ('mount --bind "$1" /dev/fuse && exec setpriv --reuid=65534 '
                  '--regid=65534 --clear-groups "$2" -o index_mode=off "$3" "$4"')
        lib._register(mnt)
        try:
            res = subprocess.run(["unshare", "--mount", "--propagation", "private",
                                  "sh", "-c", script, "sh", fake, lib.SHARDFS, shard,
                                  mnt], capture_output=True, text=True, timeout=60)
            assert not lib.is_mounted(mnt)
        finally:
            lib.unmount(mnt)
            lib._unregister(mnt)
        assert res.returncode == 1, res.stderr
        assert res.stderr.startswith("shardfs: /dev/fuse: Permission denied: this "
                                     "user may not use FUSE"), res.stderr
        assert "shards," not in res.stderr, "summary printed: " + res.stderr
    finally:
        shutil.rmtree(work)


def test_quiet_mount_prints_nothing(shards, tmp_path):
    with lib.mounted(shards, tmp_path / "mnt", "-o", "quiet,index_mode=off") as proc:
        pass
    assert proc.stderr == "", proc.stderr


@pytest.mark.parametrize("typo,near", [("redahead=8M", "readahead"),
                                       ("skip_bad_shard", "skip_bad_shards"),
                                       ("alow_other", "allow_other")])
def test_option_typo_gets_the_nearest_option(shards, tmp_path, typo, near):
    res, was_mounted, _ = lib.run_shardfs_expect_failure(
        shards, tmp_path / "mnt", "-o", typo)
    assert res.returncode == 2 and not was_mounted
    assert "unknown option '%s': did you mean '%s'?" % (typo, near) in res.stderr, \
        res.stderr


def test_option_far_from_all_gets_no_suggestion(shards, tmp_path):
    res, _, _ = lib.run_shardfs_expect_failure(shards, tmp_path / "mnt",
                                               "-o", "zzzzqqq")
    assert res.returncode == 2 and "zzzzqqq" in res.stderr
    assert "did you mean" not in res.stderr, res.stderr


def test_index_option_typo_gets_the_nearest_option(shards):
    res = lib.run_cmd([SHARDFS_INDEX, "-o", "layot=classes", str(shards)])
    assert res.returncode == 2
    assert "unknown option 'layot=classes': did you mean 'layout'?" in res.stderr, \
        res.stderr
