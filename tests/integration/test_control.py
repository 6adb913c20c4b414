# SPDX-License-Identifier: Apache-2.0
"""The control namespace (/.shardfs/) and the per-file extended attributes.

/.shardfs must never show up in a listing (ImageFolder would take it for a
class) yet open by name; its files must describe the mount truthfully; and
every regular file's xattrs must say where its bytes are, checked here
against the raw shard files.
"""
import errno
import json
import os
import subprocess

import pytest

import shardfs_testlib as lib

XATTRS = ["user.shardfs.key", "user.shardfs.offset", "user.shardfs.shard",
          "user.shardfs.shard_index"]


@pytest.fixture
def mount(tmp_path):
    """Two shards of WebDataset samples under train/<class>/, mounted."""
    shards = []
    for s in range(2):
        members = []
        for k in range(6):
            key = "train/c%d/%02d%02d" % (k % 2, s, k)
            members.append((key + ".jpg", lib.deterministic_bytes(key, 3000 + 700 * k)))
            members.append((key + ".cls", b"%d\n" % (k % 2)))
        path = tmp_path / ("s-%d.tar" % s)
        lib.tar_from_members(path, members)
        shards.append(str(path))
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards), mnt, "-o", "index_mode=off"):
        yield mnt, shards


def files_under(mnt):
    for dirpath, dirnames, filenames in os.walk(mnt):
        assert ".shardfs" not in dirnames
        for f in filenames:
            yield os.path.join(dirpath, f)


def test_control_directory_is_hidden_but_reachable(mount):
    mnt, _ = mount
    assert ".shardfs" not in os.listdir(mnt)
    assert list(files_under(mnt))              # the walk saw the tree
    assert sorted(os.listdir(mnt / ".shardfs")) == ["members", "metrics",
                                                     "shards", "stats"]
    assert os.path.isdir(mnt / ".shardfs")
    with pytest.raises(OSError) as ei:
        open(mnt / ".shardfs" / "stats", "w")
    assert ei.value.errno in (errno.EROFS, errno.EACCES)


def test_stats_count_what_happened(mount):
    mnt, _ = mount
    before = json.load(open(mnt / ".shardfs" / "stats"))
    assert (before["shards"], before["files"]) == (2, 24)
    assert before["dirs"] == 4 and before["index_entries"] == 28
    total = 0
    for f in files_under(mnt):
        total += len(open(f, "rb").read())
    after = json.load(open(mnt / ".shardfs" / "stats"))
    assert after["ops"]["read"]["count"] > before["ops"]["read"]["count"]
    # every byte read came from a READ or was pushed ahead of it
    assert (after["read_bytes"] - before["read_bytes"] + after["pushahead"]["bytes"]
            - before["pushahead"]["bytes"] >= total)
    assert after["backing_reads"] > 0 and after["backing_read_mean_bytes"] > 0
    assert after["errors"] == 0
    assert set(after["ops"]) >= {"lookup", "getattr", "readdir", "open", "read"}


def ioctl_count(mnt):
    """The stats' ioctl count, read without an ioctl of its own (open()
    in Python asks isatty() of what it opens)."""
    with open(mnt / ".shardfs" / "stats", "rb", buffering=0) as f:
        return json.loads(f.readall())["ops"]["ioctl"]["count"]


def test_stats_count_the_ioctl_of_each_python_open(mount):
    mnt, _ = mount
    files = list(files_under(mnt))
    before = ioctl_count(mnt)
    for f in files:      # isatty(): one TCGETS a file, answered ENOTTY
        with open(f, "rb") as fh:
            assert not fh.isatty()
    assert ioctl_count(mnt) - before == 2 * len(files)
    before = ioctl_count(mnt)
    for f in files:      # unbuffered: nothing asked
        with open(f, "rb", buffering=0) as fh:
            fh.readall()
    assert ioctl_count(mnt) == before


def test_shards_file_reports_served_ranges(mount):
    mnt, shards = mount
    lines = open(mnt / ".shardfs" / "shards").read().splitlines()
    rows = [l.split("\t") for l in lines]
    assert [r[0] for r in rows] == ["0", "1"]
    assert [r[1] for r in rows] == [os.path.realpath(s) for s in shards]
    assert [int(r[2]) for r in rows] == [os.path.getsize(s) for s in shards]
    assert [r[4:] for r in rows] == [["-", "-"], ["-", "-"]]
    f = next(p for p in files_under(mnt) if p.endswith(".jpg"))
    data = open(f, "rb").read()
    offset = int(os.getxattr(f, "user.shardfs.offset"))
    index = int(os.getxattr(f, "user.shardfs.shard_index"))
    row = open(mnt / ".shardfs" / "shards").read().splitlines()[index].split("\t")
    assert int(row[4]) <= offset and int(row[5]) >= offset + len(data) - 1


def test_metrics_are_prometheus_text(mount):
    mnt, _ = mount
    text = open(mnt / ".shardfs" / "metrics").read()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert line.split()[1] in ("HELP", "TYPE")
            continue
        name, value = line.split()
        samples[name] = float(value)
    assert samples["shardfs_files"] == 24 and samples["shardfs_shards"] == 2
    assert "shardfs_read_bytes_total" in samples


def test_xattrs_locate_every_file_in_its_shard(mount):
    mnt, shards = mount
    raw = [open(s, "rb").read() for s in shards]
    for f in files_under(mnt):
        assert sorted(os.listxattr(f)) == XATTRS
        data = open(f, "rb").read()
        index = int(os.getxattr(f, "user.shardfs.shard_index"))
        offset = int(os.getxattr(f, "user.shardfs.offset"))
        assert os.getxattr(f, "user.shardfs.shard").decode() == \
            os.path.realpath(shards[index])
        assert raw[index][offset:offset + len(data)] == data
        rel = os.path.relpath(f, mnt)
        assert os.getxattr(f, "user.shardfs.key").decode() == rel.split(".")[0]
    with pytest.raises(OSError) as ei:
        os.getxattr(f, "user.shardfs.nothing")
    assert ei.value.errno == errno.ENODATA
    assert os.listxattr(mnt / "train") == []


def test_getfattr_shows_the_attributes(mount):
    mnt, _ = mount
    f = next(files_under(mnt))
    r = subprocess.run(["getfattr", "-d", f], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    for name in XATTRS:
        assert name + "=" in r.stdout
