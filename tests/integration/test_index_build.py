# SPDX-License-Identifier: Apache-2.0
"""The bounded index build (issue 30): shardfs-index writes the index
file from sorted runs of member records held within -o build_memory, and
a mount serves from it exactly what a mount that builds in memory
(index_mode=off) serves.

- a budget that makes several runs writes the same bytes as the default;
- the mounted tree (names, readdir order, inode numbers, attributes) is
  the in-memory build's, here and for sets with a hard link to a member
  of its own shard, of the one before, or further back (the shards
  before it scanned again: an info message says so);
- a budget below 16M, or not a size, is a usage error (exit 2).
"""
import os
import tarfile

import pytest

import shardfs_testlib as lib

INDEX_TOOL = lib.binary("shardfs-index")
FIRST = "s-000.tar"

# conftest.py's watchdog and mount checks govern this module too
SHARDFS_WATCHDOG = True


@pytest.fixture(autouse=True)
def _index_tool_built():
    if not os.access(INDEX_TOOL, os.X_OK):
        pytest.fail("%s not built (set SHARDFS_BUILD_DIR)" % INDEX_TOOL)


def members(i, n):
    """Shard I: N small files over 40 directories, names interleaved with
    the other shards', a few replaced by a later shard, a symlink."""
    m = [("c%02d/k%06d.%s" % (j % 40, j * 3 + i, ("jpg", "cls")[j % 2]),
          b"%d/%d" % (i, j)) for j in range(n)]
    m.append(("c00/k%06d.jpg" % 0, b"shard %d wins\n" % i))
    m.append({"name": "links/sym-%d" % i, "type": tarfile.SYMTYPE,
              "linkname": "../c00/k000000.jpg"})
    return m


def make_set(d, n, hard_link=None):
    """HARD_LINK: the last shard's links/hard names a member of its own
    shard ("same"), of the one before ("before") or of the first
    ("other"); None: no link."""
    os.makedirs(d, exist_ok=True)
    target = {"same": "c00/k000002.jpg", "before": "c00/k000001.jpg",
              "other": "c02/k000006.jpg"}.get(hard_link)
    for i in range(3):
        m = members(i, n)
        if hard_link and i == 2:
            m.append({"name": "links/hard", "type": tarfile.LNKTYPE,
                      "linkname": target})
        lib.tar_from_members(os.path.join(d, "s-%03d.tar" % i), m)


def run_index(*args):
    return lib.run_cmd([INDEX_TOOL, *map(os.fspath, args)], timeout=300)


def index_of(d):
    return os.path.join(d, "." + FIRST + ".shardfs-index")


def listing(mnt):
    """Every entry in readdir order with what stat says, inode included."""
    out = []
    for dirpath, dirs, files in os.walk(mnt):
        rel_dir = os.path.relpath(dirpath, mnt)
        prefix = "" if rel_dir == "." else rel_dir + "/"
        for name in sorted(dirs) + sorted(files):
            st = os.lstat(os.path.join(dirpath, name))
            out.append((prefix + name,
                        st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns,
                        st.st_nlink, st.st_uid, st.st_gid))
        out.append((rel_dir, os.listdir(dirpath)))
    return out


def mounted_listing(d, mnt, *options):
    with lib.mounted(d, mnt, *options):
        return listing(mnt)


def test_budget_runs_and_tree(tmp_path):
    """50,000 members a shard: 16M makes two runs or more; the same file
    as the default budget, and the tree of an in-memory build."""
    d = tmp_path / "shards"
    make_set(d, 50_000)
    r = run_index("-o", "build_memory=16M", d)
    assert r.returncode == 0, r
    assert "built in memory" not in r.stderr, r
    with open(index_of(d), "rb") as f:
        small = f.read()
    r = run_index("-o", "index_mode=rebuild", d)
    assert r.returncode == 0, r
    with open(index_of(d), "rb") as f:
        assert f.read() == small
    assert sorted(os.listdir(d)) == sorted(["s-000.tar", "s-001.tar", "s-002.tar",
                                            "." + FIRST + ".shardfs-index"])
    served = mounted_listing(d, tmp_path / "mnt", "-o", "index_mode=require")
    in_memory = mounted_listing(d, tmp_path / "mnt", "-o", "index_mode=off")
    assert served == in_memory


@pytest.mark.parametrize("target", ["same", "before", "other"])
def test_hard_link_set(tmp_path, target):
    """A hard link to a member of its own shard, of the one before or
    further back is built bounded (further back: the shards before it
    scanned again); each serves the tree index_mode=off does."""
    d = tmp_path / "shards"
    make_set(d, 200, hard_link=target)
    r = run_index(d)
    assert r.returncode == 0, r
    again = ("hard links whose target is further back than the shard before theirs: 1; "
             "the shards before them are scanned again")
    assert (again in r.stderr) == (target == "other"), r
    assert "built in memory" not in r.stderr, r
    served = mounted_listing(d, tmp_path / "mnt", "-o", "index_mode=require")
    in_memory = mounted_listing(d, tmp_path / "mnt", "-o", "index_mode=off")
    assert served == in_memory
    hard = [e for e in served if e[0] == "links/hard"]
    assert hard and hard[0][5] == 2     # two names, one inode


@pytest.mark.parametrize("value", ["15M", "1K", "lots", ""])
def test_bad_budget_is_a_usage_error(tmp_path, value):
    d = tmp_path / "shards"
    make_set(d, 10)
    r = run_index("-o", "build_memory=" + value, d)
    assert r.returncode == 2, r
    assert "build_memory" in r.stderr, r
    assert not os.path.exists(index_of(d))
