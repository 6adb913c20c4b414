# SPDX-License-Identifier: Apache-2.0
"""The persistent index, end to end: real shards, real mounts, shardfs-index.

A mount with no index builds one and saves it next to the shards as
.<first shard>.shardfs-index; later mounts map it and scan nothing.  What
must hold:

- a loaded index gives the identical tree, inode numbers included, as the
  build that wrote it and as a fresh build;
- it is used only while it describes the shards: a touched shard (new
  times, same bytes) keeps it valid through the fingerprint; a truncated
  shard, a shard rewritten with other bytes of the same size (mtime
  restored), a removed shard make the mount rebuild; an appended shard is
  scanned alone and merged ("extended");
- a set moved or copied together with its index keeps using it;
- where the shards' directory is read-only, the index goes to
  $XDG_CACHE_HOME/shardfs;
- index_mode=require|off|rebuild do what they say;
- shardfs-index builds the same file, --check says whether it is valid,
  --list agrees with the mount and its xattrs;
- builders and mounts racing on one set all succeed, leave one valid index
  and no temporary files.

Which index a mount used is read from its -o loglevel=debug line
"index file PATH: loaded|extended|built[, saved]".
"""
import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import struct
import subprocess
import tarfile
import threading
import time

import pytest

import shardfs_testlib as lib

INDEX_TOOL = lib.binary("shardfs-index")
ORIGIN_RE = re.compile(r"index file (?P<path>.+): (?P<origin>loaded|extended|built)"
                       r"(?P<saved>, saved)?\s*$", re.M)
FIRST = "s-000.tar"


# conftest.py's watchdog and mount checks govern this module too
SHARDFS_WATCHDOG = True


@pytest.fixture(autouse=True)
def _index_tool_built():
    if not os.access(INDEX_TOOL, os.X_OK):
        pytest.fail("%s not built (set SHARDFS_BUILD_DIR)" % INDEX_TOOL, pytrace=False)


# ------------------------------------------------------------------ data


def shard_members(i, n=12):
    """Members of shard I: files in nested directories, one replacing a
    file of shard 0, a symlink and a hard link, deterministic bytes."""
    m = []
    for j in range(n):
        m.append(("d%d/sub%d/s%03d-%02d.bin" % (j % 3, j % 2, i, j),
                  lib.deterministic_bytes(("persist", i, j), (i * 131 + j * 977) % 5000)))
    m.append(("shared/over.txt", b"written by shard %d\n" % i))
    m.append(("top-%03d.txt" % i, b"top %d\n" % i))
    m.append({"name": "links/sym-%03d" % i, "type": tarfile.SYMTYPE,
              "linkname": "../top-%03d.txt" % i})
    m.append({"name": "links/hard-%03d" % i, "type": tarfile.LNKTYPE,
              "linkname": "top-%03d.txt" % i})
    return m


def make_set(d, n=3, first=0):
    os.makedirs(d, exist_ok=True)
    paths = []
    for i in range(first, first + n):
        p = os.path.join(d, "s-%03d.tar" % i)
        lib.tar_from_members(p, shard_members(i))
        paths.append(p)
    return paths


def index_of(d):
    return os.path.join(d, "." + FIRST + ".shardfs-index")


def snapshot(mnt):
    """rel path -> everything a user can see of it, inode number included."""
    out = {}
    root = os.fsencode(mnt)
    for dirpath, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        prefix = b"" if rel_dir == b"." else rel_dir + b"/"
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            rel = prefix + name
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                extra = os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                extra = sorted(os.listdir(full))
            else:
                extra = lib.file_digest(full)
            out[rel] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns,
                        st.st_nlink, st.st_uid, st.st_gid, extra)
    st = os.lstat(root)
    out[b"."] = (st.st_ino, st.st_mode, st.st_nlink, sorted(os.listdir(root)))
    return out


def mount_snapshot(spec, mnt, *options, env=None):
    """Mount SPEC with debug logging, snapshot it, unmount.  Returns
    (snapshot, origin match, Result)."""
    with lib.mounted(spec, mnt, "-o", "loglevel=debug", *options, env=env) as r:
        snap = snapshot(mnt)
    m = ORIGIN_RE.search(r.stderr)
    assert m, "no 'index file' debug line in:\n%s" % r.stderr
    return snap, m, r


def expect_origin(m, origin, path=None, saved=None):
    assert m.group("origin") == origin, m.group(0)
    if path is not None:
        assert m.group("path") == os.path.realpath(path), m.group(0)
    if saved is not None:
        assert bool(m.group("saved")) == saved, m.group(0)


def fresh(spec, mnt, env=None):
    """The tree a build without any index file gives."""
    snap, m, _ = mount_snapshot(spec, mnt, "-o", "index_mode=off", env=env)
    expect_origin(m, "built", saved=False)
    return snap


def run_index(*args, env=None, timeout=120):
    return lib.run_cmd([INDEX_TOOL, *map(os.fspath, args)], env=env, timeout=timeout)


def restore_times(path, st):
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


# ------------------------------------------------------ save, then load


def test_first_mount_saves_second_loads(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    idx = index_of(d)

    first, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "built", idx, saved=True)
    assert os.path.getsize(idx) > 0
    assert os.stat(idx).st_mode & 0o777 == 0o644
    assert not [f for f in os.listdir(d) if ".tmp." in f]
    index_stat = os.stat(idx)

    second, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "loaded", idx, saved=False)
    assert second == first
    assert os.stat(idx).st_ino == index_stat.st_ino, "a valid index was rewritten"
    assert os.stat(idx).st_mtime_ns == index_stat.st_mtime_ns
    # and a build that ignores the file agrees with both
    assert fresh(d, mnt) == first
    # the summary line is the same whether built or loaded
    s = lib.parse_summary(r.stderr)
    assert s and s["shards"] == 3 and s["files"] == 3 * 13 + 1


def test_explicit_index_path(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    elsewhere = tmp_path / "indexes"
    elsewhere.mkdir()
    idx = elsewhere / "set.idx"

    first, m, _ = mount_snapshot(d, mnt, "-o", "index=%s" % idx)
    expect_origin(m, "built", idx, saved=True)
    assert not os.path.exists(index_of(d))
    second, m, _ = mount_snapshot(d, mnt, "-o", "index=%s" % idx)
    expect_origin(m, "loaded", idx)
    assert second == first


# ---------------------------------------------------------- staleness


def test_touched_shard_still_valid(tmp_path):
    d = tmp_path / "shards"
    shards = make_set(d)
    mnt = tmp_path / "mnt"
    first, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "built", saved=True)

    os.utime(shards[1], ns=(lib.T0_NS + 10**12, lib.T0_NS + 10**12))  # mtime and ctime change
    second, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded", index_of(d))
    assert second == first

    subprocess.run(["touch", shards[0], shards[2]], check=True)
    third, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded", index_of(d))
    assert third == first


def test_synthesized_directories_after_touch_match_fresh_build(tmp_path):
    """A directory no member names takes its attributes from the shard
    that created it; after a touch (index still valid) the loaded tree must
    still be what a fresh build of the same shards shows."""
    d = tmp_path / "shards"
    shards = make_set(d)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)
    os.utime(shards[0], ns=(lib.T0_NS + 10**12, lib.T0_NS + 10**12))
    loaded, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded")
    assert loaded == fresh(d, mnt)


def valid_shorter_cut(shard):
    """A length that drops only trailing zero padding of SHARD: the end of
    its last member's data plus the two end-of-archive blocks."""
    with tarfile.open(shard) as t:
        last = t.getmembers()[-1]
    end = last.offset_data + (last.size + 511) // 512 * 512 + 1024
    assert end < os.path.getsize(shard), "no padding to cut"
    return end


def test_truncated_shard_is_rescanned(tmp_path):
    d = tmp_path / "shards"
    shards = make_set(d)
    mnt = tmp_path / "mnt"
    first, m, _ = mount_snapshot(d, mnt)
    index_ino = os.stat(index_of(d)).st_ino

    os.truncate(shards[1], valid_shorter_cut(shards[1]))
    second, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "built", index_of(d), saved=True)
    assert "changed since it was built" in r.stderr, r.stderr
    assert os.stat(index_of(d)).st_ino != index_ino
    assert second == first      # same members, same tree
    third, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded")


def test_shard_truncated_mid_member_fails_instead_of_loading(tmp_path):
    d = tmp_path / "shards"
    shards = make_set(d)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)
    st = os.stat(shards[1])
    with tarfile.open(shards[1]) as t:
        third = t.getmembers()[2]
    assert third.size > 100
    os.truncate(shards[1], third.offset_data + 10)    # inside its data
    restore_times(shards[1], st)
    r, was_mounted, left = lib.run_shardfs_expect_failure(d, mnt)
    assert r.returncode == 1, r
    assert not was_mounted and not left
    assert "s-001.tar" in r.stderr, r.stderr


def test_same_size_rewrite_with_restored_mtime_is_detected(tmp_path):
    d = tmp_path / "shards"
    shards = make_set(d)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)
    st = os.stat(shards[1])

    # other names and other bytes, padded to exactly the same size
    other = tmp_path / "other.tar"
    lib.tar_from_members(other, [("replaced/r%02d.bin" % j,
                                  lib.deterministic_bytes(("other", j), 1000 + j))
                                 for j in range(5)])
    data = open(other, "rb").read()
    assert len(data) <= st.st_size
    with open(shards[1], "r+b") as f:
        f.write(data + b"\0" * (st.st_size - len(data)))
    restore_times(shards[1], st)
    assert os.stat(shards[1]).st_size == st.st_size
    assert os.stat(shards[1]).st_mtime_ns == st.st_mtime_ns

    snap, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "built", saved=True)
    assert b"replaced/r03.bin" in snap
    assert not any(p.startswith(b"d0/sub1/s001") for p in snap)
    with lib.mounted(d, mnt):
        with open(os.path.join(mnt, "replaced/r03.bin"), "rb") as f:
            assert f.read() == lib.deterministic_bytes(("other", 3), 1003)
    assert snap == fresh(d, mnt)


def test_same_bytes_rewritten_in_place_keeps_index(tmp_path):
    """The fingerprint compares bytes, not times: a shard rewritten with
    its own content (new mtime and ctime) keeps the index valid."""
    d = tmp_path / "shards"
    shards = make_set(d)
    mnt = tmp_path / "mnt"
    first, _, _ = mount_snapshot(d, mnt)
    data = open(shards[2], "rb").read()
    with open(shards[2], "wb") as f:
        f.write(data)
    snap, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded")
    assert snap == first


def test_appended_shard_extends(tmp_path):
    d = tmp_path / "shards"
    make_set(d, 2)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)

    # the new shard replaces, adds next to, and links to earlier members
    lib.tar_from_members(d / "s-002.tar", shard_members(2) + [
        ("shared/over.txt", b"the newest shard wins\n"),
        ("d0/sub0/s000-00.bin", b"replaced by shard 2\n"),
        {"name": "links/hard-to-000", "type": tarfile.LNKTYPE,
         "linkname": "top-000.txt"},
        ("brand/new/dir/file.txt", b"new\n"),
    ])
    extended, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "extended", index_of(d), saved=True)
    assert "hard links whose target is further back than the shard before theirs: 1" \
        in r.stderr, r.stderr
    assert "built in memory" not in r.stderr, r.stderr
    assert "%s: extended; shards appended and scanned: 1, taken from the index: 2" \
        % os.path.realpath(index_of(d)) in r.stderr, r.stderr
    assert extended == fresh(d, mnt)
    assert b"brand/new/dir/file.txt" in extended
    # the extended index is saved and then simply loaded
    again, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded")
    assert again == extended
    # the hard link to a member of the base shards shares its inode
    assert extended[b"links/hard-to-000"][0] == extended[b"top-000.txt"][0]
    with lib.mounted(d, mnt):
        assert open(os.path.join(mnt, "shared/over.txt"), "rb").read() == \
            b"the newest shard wins\n"


def test_appended_shard_extends_within_the_build_budget(tmp_path):
    """A set without hard links is extended by the bounded build (the
    index's entries go the way of the new shard's members, not into
    memory whole): the same tree as a fresh build, inode numbers and all,
    with members replaced and a file become a symlink across the
    boundary.  (The sets above have hard links: extended in memory.)"""
    d = tmp_path / "shards"
    os.makedirs(d)
    for i in range(2):
        lib.tar_from_members(d / ("s-%03d.tar" % i), [
            m for m in shard_members(i)
            if not (isinstance(m, dict) and m["type"] == tarfile.LNKTYPE)])
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)
    lib.tar_from_members(d / "s-002.tar", shard_members(2, n=4)[:4] + [
        ("shared/over.txt", b"the newest shard wins\n"),
        ("d0/sub0/s000-00.bin", b"replaced by shard 2\n"),
        {"name": "top-001.txt", "type": tarfile.SYMTYPE, "linkname": "top-000.txt"},
        ("brand/new/dir/file.txt", b"new\n"),
    ])
    with lib.mounted(d, mnt, "-o", "loglevel=debug") as r:
        with open("/proc/%d/maps" % lib.daemon_pid(mnt)) as f:
            maps = f.read()
        extended = snapshot(mnt)
    expect_origin(ORIGIN_RE.search(r.stderr), "extended", index_of(d), saved=True)
    # served from the file the bounded build wrote, not built in memory
    assert os.path.realpath(index_of(d)) in maps, maps
    assert "built in memory" not in r.stderr, r.stderr
    assert extended == fresh(d, mnt)
    assert extended[b"top-001.txt"][7] == b"top-000.txt"
    again, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded")
    assert again == extended


def test_appended_shard_is_the_only_one_scanned(tmp_path):
    """Extending an index reads nothing from the shards it already covers:
    strace shows shardfs-index reading the appended shard only (the others
    are opened and fstat'ed, never read), and the result is the tree a
    fresh build gives."""
    d = tmp_path / "shards"
    make_set(d, 2)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)
    make_set(d, 1, first=2)
    log = tmp_path / "strace.log"
    # LeakSanitizer cannot run under ptrace: a sanitized build would fail
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
               ":detect_leaks=0")
    r = lib.run_cmd(["strace", "-f", "-y", "-e", "trace=pread64,read",
                     "-o", str(log), INDEX_TOOL, "-o", "loglevel=debug", str(d)],
                    env=env)
    assert r.returncode == 0 and "extended" in r.stderr, r
    reads = [l for l in open(log) if ".tar>" in l]
    assert not [l for l in reads if "s-000.tar>" in l or "s-001.tar>" in l], reads
    assert [l for l in reads if "s-002.tar>" in l]
    snap, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded")
    assert snap == fresh(d, mnt)


def test_removed_shard_is_rescanned(tmp_path):
    d = tmp_path / "shards"
    shards = make_set(d, 4)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)

    os.unlink(shards[3])                      # the last one
    snap, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "built", saved=True)
    assert b"top-003.txt" not in snap
    assert snap == fresh(d, mnt)

    os.unlink(shards[1])                      # one in the middle
    snap, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "built", saved=True)
    assert b"top-001.txt" not in snap and b"top-002.txt" in snap
    assert snap == fresh(d, mnt)


def test_other_layout_keeps_its_own_index(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    tree, m, _ = mount_snapshot(d, mnt)
    by_shard, m, _ = mount_snapshot(d, mnt, "-o", "layout=shards")
    expect_origin(m, "built", saved=True)
    assert m.group("path") != os.path.realpath(index_of(d))
    assert by_shard != tree
    again, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded", index_of(d))
    assert again == tree
    again, m, _ = mount_snapshot(d, mnt, "-o", "layout=shards")
    expect_origin(m, "loaded")
    assert again == by_shard


# ------------------------------------------------------- move and copy


def test_moved_set_still_loads(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    first, _, _ = mount_snapshot(d, mnt)
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    os.rename(d, moved)
    snap, m, _ = mount_snapshot(moved, mnt)
    expect_origin(m, "loaded", index_of(moved))
    assert snap == first


def test_copied_set_loads_by_fingerprint(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    first, _, _ = mount_snapshot(d, mnt)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", os.fspath(d), os.fspath(copy)], check=True)
    assert os.stat(copy / FIRST).st_mtime_ns != os.stat(d / FIRST).st_mtime_ns
    snap, m, _ = mount_snapshot(copy, mnt)
    expect_origin(m, "loaded", index_of(copy))
    assert snap == first
    # both sets keep their own valid index
    assert run_index(d, "--check").returncode == 0
    assert run_index(copy, "--check").returncode == 0


# ------------------------------------------- read-only shard directory


@pytest.fixture
def ro_bind(tmp_path):
    """A read-only bind mount of tmp_path/src at tmp_path/ro."""
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    subprocess.run(["mount", "--bind", os.fspath(src), os.fspath(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", os.fspath(ro)], check=True)
        yield src, ro
    finally:
        # a daemon that is still exiting may hold shards open under ro
        if not lib.wait_until(lambda: subprocess.run(
                ["umount", os.fspath(ro)], stderr=subprocess.DEVNULL).returncode == 0, 10):
            subprocess.run(["umount", "-l", os.fspath(ro)], check=True)


def test_read_only_location_falls_back_to_cache(tmp_path, ro_bind):
    src, ro = ro_bind
    make_set(src)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=os.fspath(cache))
    mnt = tmp_path / "mnt"
    with pytest.raises(OSError):
        open(ro / "probe", "w")

    first, m, _ = mount_snapshot(ro, mnt, env=env)
    expect_origin(m, "built", saved=True)
    saved = m.group("path")
    assert os.path.dirname(saved) == os.path.realpath(cache / "shardfs"), saved
    assert saved.endswith(".shardfs-index") and os.path.isfile(saved)
    assert not os.path.exists(index_of(src))

    second, m, _ = mount_snapshot(ro, mnt, env=env)
    expect_origin(m, "loaded", saved)
    assert second == first
    # shardfs-index finds the same file
    r = run_index(ro, "--check", env=env)
    assert r.returncode == 0 and saved in r.stderr, r


def test_read_only_location_uses_an_existing_cache_directory(tmp_path, ro_bind):
    """As above, with $XDG_CACHE_HOME/shardfs made beforehand."""
    src, ro = ro_bind
    make_set(src)
    cache = tmp_path / "cache"
    (cache / "shardfs").mkdir(parents=True)
    env = dict(os.environ, XDG_CACHE_HOME=os.fspath(cache))
    mnt = tmp_path / "mnt"
    first, m, r = mount_snapshot(ro, mnt, env=env)
    expect_origin(m, "built", saved=True)
    saved = m.group("path")
    assert os.path.dirname(saved) == os.path.realpath(cache / "shardfs"), r.stderr
    second, m, _ = mount_snapshot(ro, mnt, env=env)
    expect_origin(m, "loaded", saved)
    assert second == first


def test_cache_directory_is_created_with_its_parents(tmp_path, ro_bind):
    """$XDG_CACHE_HOME need not exist yet (XDG: create it when writing)."""
    src, ro = ro_bind
    make_set(src)
    cache = tmp_path / "not" / "yet" / "cache"
    env = dict(os.environ, XDG_CACHE_HOME=os.fspath(cache))
    mnt = tmp_path / "mnt"
    _, m, r = mount_snapshot(ro, mnt, env=env)
    expect_origin(m, "built", saved=True)
    assert os.path.dirname(m.group("path")) == os.path.realpath(cache / "shardfs"), r.stderr


def test_unwritable_explicit_index_is_a_warning(tmp_path, ro_bind):
    src, ro = ro_bind
    make_set(src)
    mnt = tmp_path / "mnt"
    snap, m, r = mount_snapshot(ro, mnt, "-o", "index=%s" % (ro / "set.idx"))
    expect_origin(m, "built", saved=False)
    warning = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert warning and os.fspath(ro / "set.idx") in warning[0], r.stderr
    assert "Read-only file system" in warning[0], r.stderr
    assert snap == fresh(ro, mnt)


# ------------------------------------------------------------ index_mode


def test_index_mode_require(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r, was_mounted, left = lib.run_shardfs_expect_failure(d, mnt, "-o", "index_mode=require")
    assert r.returncode == 1, r
    assert not was_mounted and not left
    assert "no valid index" in r.stderr and os.path.realpath(index_of(d)) in r.stderr, r.stderr
    assert not os.path.exists(index_of(d))

    assert run_index(d).returncode == 0
    snap, m, _ = mount_snapshot(d, mnt, "-o", "index_mode=require")
    expect_origin(m, "loaded")

    lib.tar_from_members(d / "s-003.tar", shard_members(3))   # now stale
    r, _, _ = lib.run_shardfs_expect_failure(d, mnt, "-o", "index_mode=require")
    assert r.returncode == 1 and "no valid index" in r.stderr, r


def test_index_mode_off_writes_nothing(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=os.fspath(cache))
    mnt = tmp_path / "mnt"
    before = sorted(os.listdir(d))
    _, m, _ = mount_snapshot(d, mnt, "-o", "index_mode=off", env=env)
    expect_origin(m, "built", saved=False)
    assert m.group("path") == "none"
    assert sorted(os.listdir(d)) == before
    # the scan's index was mapped from a file in the cache, removed at once
    assert [f for _, _, files in os.walk(cache) for f in files] == []
    # and a valid index that exists is not read either
    assert run_index(d).returncode == 0
    _, m, _ = mount_snapshot(d, mnt, "-o", "index_mode=off", env=env)
    expect_origin(m, "built", saved=False)


def test_index_mode_rebuild(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    first, _, _ = mount_snapshot(d, mnt)
    ino = os.stat(index_of(d)).st_ino
    snap, m, _ = mount_snapshot(d, mnt, "-o", "index_mode=rebuild")
    expect_origin(m, "built", index_of(d), saved=True)
    assert os.stat(index_of(d)).st_ino != ino
    assert snap == first
    snap, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded")


def test_unknown_index_mode_is_a_usage_error(tmp_path):
    d = tmp_path / "shards"
    make_set(d, 1)
    (tmp_path / "mnt").mkdir()
    r, was_mounted, _ = lib.run_shardfs_expect_failure(d, tmp_path / "mnt",
                                                       "-o", "index_mode=sometimes")
    assert r.returncode == 2 and "index_mode" in r.stderr, r
    assert run_index(d, "-o", "index_mode=sometimes").returncode == 2


# ---------------------------------------------------------- shardfs-index


def test_index_tool_builds_what_a_mount_loads(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    r = run_index(d, "-j", "2")
    assert r.returncode == 0, r
    assert lib.parse_summary(r.stderr)["files"] == 3 * 13 + 1
    snap, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded", index_of(d))
    assert snap == fresh(d, mnt)
    # a second run finds it valid and rewrites nothing
    ino = os.stat(index_of(d)).st_ino
    r = run_index(d, "-o", "loglevel=debug")
    assert r.returncode == 0 and ": loaded" in r.stderr, r
    assert os.stat(index_of(d)).st_ino == ino


def test_index_tool_check(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    idx = index_of(d)

    r = run_index(d, "--check")
    assert r.returncode == 1, r                       # missing
    assert not os.path.exists(idx), "--check must build nothing"
    assert run_index(d).returncode == 0
    r = run_index(d, "--check")
    assert r.returncode == 0, r                       # valid
    assert os.path.realpath(idx) in r.stderr

    lib.tar_from_members(d / "s-003.tar", shard_members(3))
    assert run_index(d, "--check").returncode == 1    # stale: appended
    os.unlink(d / "s-003.tar")
    assert run_index(d, "--check").returncode == 0

    # corrupt: one flipped byte in the inode section
    data = bytearray(open(idx, "rb").read())
    data[len(data) // 2] ^= 0x40
    with open(idx, "wb") as f:
        f.write(data)
    r = run_index(d, "--check")
    assert r.returncode == 1, r
    assert os.path.realpath(idx) in r.stderr and "offset" in r.stderr, r.stderr
    # a mount warns, naming the file, and rebuilds it
    snap, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "built", idx, saved=True)
    warn = [ln for ln in r.stderr.splitlines()
            if os.path.realpath(idx) in ln and "rebuilt" in ln]
    assert warn and "warning" in warn[0].lower(), r.stderr
    assert run_index(d, "--check").returncode == 0

    # corrupt: truncated, and not an index at all
    os.truncate(idx, 100)
    assert run_index(d, "--check").returncode == 1
    with open(idx, "wb") as f:
        f.write(b"not an index\n" * 100)
    assert run_index(d, "--check").returncode == 1


def wait_settled(path):
    """Until PATH's change time is 2 s behind the clock, in whole seconds
    (INDEX_VERIFIED_SETTLED_S): old enough for the record of a check."""
    while time.time_ns() // 10**9 - os.stat(path).st_ctime_ns // 10**9 < 2:
        time.sleep(0.1)


def test_a_checked_index_is_not_read_whole_again_until_it_changes(tmp_path):
    """The first mount of an index old enough records its full check
    (INDEX.verified, index_verified.h), and the next loads trust it; a
    write to the file in place, same size and inode, voids the record:
    the damage is found, the index rebuilt, the tree right."""
    d = tmp_path / "shards"
    make_set(d)
    mnt = tmp_path / "mnt"
    idx = index_of(d)
    record = str(idx) + ".verified"

    assert run_index(d).returncode == 0
    wait_settled(idx)
    first, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded", idx)
    st = os.stat(record)
    assert st.st_size == 80 and st.st_mode & 0o777 == 0o644
    second, m, _ = mount_snapshot(d, mnt)
    expect_origin(m, "loaded", idx)
    assert second == first
    assert os.stat(record).st_mtime_ns == st.st_mtime_ns, "written again"

    garble_in_place(idx)
    third, m, r = mount_snapshot(d, mnt)
    expect_origin(m, "built", idx, saved=True)
    assert third == first
    assert os.path.realpath(idx) in r.stderr and "rebuilt" in r.stderr, r.stderr
    assert run_index(d, "--check").returncode == 0


@contextlib.contextmanager
def loop_device(image):
    """A loop device of its own for IMAGE, detached at the end: two of
    one image have two device numbers, as the nodes of a shared file
    system each number it their own way."""
    r = lib.run_cmd(["losetup", "--find", "--show", str(image)])
    if r.returncode:
        pytest.skip("no loop device: %s" % r.stderr.strip())
    try:
        yield r.stdout.strip()
    finally:
        lib.run_cmd(["losetup", "--detach", r.stdout.strip()])


@contextlib.contextmanager
def device_mounted(dev, mnt):
    """DEV mounted at MNT for the block, and unmounted after it: retried
    while a daemon that served the shards there still holds them (one
    built with AddressSanitizer takes a while to exit after its unmount),
    lazily as the last resort."""
    r = lib.run_cmd(["mount", dev, str(mnt)])
    assert r.returncode == 0, r
    try:
        yield
    finally:
        for _ in range(100):
            if lib.run_cmd(["umount", str(mnt)]).returncode == 0:
                break
            time.sleep(0.1)
        else:
            lib.run_cmd(["umount", "-l", str(mnt)])


def test_a_record_holds_on_every_node_of_a_shared_file_system(tmp_path):
    """The nodes that mount one index file from shared storage see it
    under a device number each: the record of the first node's full
    check holds on the next (index_verified.h), which neither checks the
    whole index again nor writes its own record over it.  Two loop
    devices of one ext4 image, mounted one after the other, stand for
    the two nodes."""
    image = tmp_path / "shared.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    r = lib.run_cmd(["mkfs.ext4", "-q", str(image)])
    assert r.returncode == 0, r
    node_a, node_b, mnt = tmp_path / "a", tmp_path / "b", tmp_path / "mnt"
    node_a.mkdir()
    node_b.mkdir()

    with loop_device(image) as dev_a, loop_device(image) as dev_b:
        with device_mounted(dev_a, node_a):
            d = node_a / "shards"
            make_set(d)
            assert run_index(d).returncode == 0
            wait_settled(index_of(d))
            first, m, _ = mount_snapshot(d, mnt)
            expect_origin(m, "loaded", index_of(d))
            assert lib.wait_for_daemon_exit(mnt)	# it holds the shards
            index_a = os.stat(index_of(d))
            record = os.stat(index_of(d) + ".verified")
        with device_mounted(dev_b, node_b):
            d = node_b / "shards"
            index_b = os.stat(index_of(d))
            assert index_b.st_ino == index_a.st_ino
            assert index_b.st_dev != index_a.st_dev
            second, m, _ = mount_snapshot(d, mnt)
            expect_origin(m, "loaded", index_of(d))
            assert lib.wait_for_daemon_exit(mnt)
            assert second == first
            assert os.stat(index_of(d) + ".verified").st_mtime_ns == \
                record.st_mtime_ns, "node b checked it whole and wrote its record"


SECTIONS = ["SHARDS", "SHARD_NAMES", "ENTRIES", "BLOCKS", "TARGETS", "SPARSE",
            "EXTENTS", "HARDLINKS", "SEEK_SHARDS", "SEEK_POINTS", "SEEK_WINDOWS",
            "ORDER", "SUMS"]
ENTRIES_PARTS = ["  block headers", "  fields", "  names"]
STATS_HEAD_RE = re.compile(r"^index file (?P<path>.+): (?P<size>\d+) bytes, "
                           r"(?P<members>\d+) members, (?P<entries>\d+) entries, "
                           r"(?P<shards>\d+) shards$")


def test_index_tool_stats(tmp_path):
    """--stats prints the file's bytes per section and per member: the
    sections and the header add up to the file, the packed entries' parts
    add up to their section, and the names take at most what the members'
    names take whole."""
    d = tmp_path / "shards"
    make_set(d, 3)
    r = run_index(d, "--stats")               # builds, then prints
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    head = STATS_HEAD_RE.match(lines[0])
    assert head, r.stdout
    size, members, entries = int(head["size"]), int(head["members"]), int(head["entries"])
    assert head["path"] == os.path.realpath(index_of(d))
    assert size == os.path.getsize(index_of(d))
    assert members == 3 * len(shard_members(0))
    assert int(head["shards"]) == 3
    assert lines[1].split() == ["section", "bytes", "bytes/member"]
    rows = {ln.rsplit(None, 2)[0]: (int(ln.split()[-2]), float(ln.split()[-1]))
            for ln in lines[2:]}
    assert list(rows) == (SECTIONS[:3] + ENTRIES_PARTS + SECTIONS[3:] +
                          ["header+padding", "total"]), r.stdout
    assert rows["total"][0] == size
    assert sum(rows[s][0] for s in SECTIONS) + rows["header+padding"][0] == size
    assert sum(rows[p][0] for p in ENTRIES_PARTS) == rows["ENTRIES"][0]
    blocks = (entries + 63) // 64
    assert rows["BLOCKS"][0] == 8 * (blocks + 1)
    assert rows["SHARDS"][0] == 72 * 3
    assert 0 < rows["header+padding"][0] < 448 + 64 * len(SECTIONS)
    # every entry's name once, front-coded: at most its bytes and two of
    # lengths (the root's is empty)
    paths = {m[0] if isinstance(m, tuple) else m["name"]
             for i in range(3) for m in shard_members(i)}
    for p in list(paths):
        while "/" in p:
            p = os.path.dirname(p)
            paths.add(p)
    assert len(paths) + 1 == entries
    assert 0 < rows["  names"][0] <= 1 + sum(len(os.path.basename(p)) + 2 for p in paths)
    for name, (nbytes, per_member) in rows.items():
        assert abs(per_member - nbytes / members) < 0.006, (name, nbytes, per_member)
    # a loaded index gives the same figures; without an index file, no stats
    again = run_index(d, "--stats", "--check")
    assert again.returncode == 0 and again.stdout == r.stdout, again
    r = run_index(d, "--stats", "-o", "index_mode=off")
    assert r.returncode == 1 and r.stdout == "", r


def parse_list(text):
    rows = {}
    for line in text.splitlines():
        path, shard, offset, size = line.split("\t")
        path = path.replace("\\t", "\t").replace("\\n", "\n").replace("\\\\", "\\")
        rows[path] = (int(size), int(shard), int(offset))
    return rows


def test_index_tool_list_matches_the_mount(tmp_path):
    d = tmp_path / "shards"
    make_set(d)
    lib.tar_from_members(d / "s-003.tar", [("odd\tname.txt", b"tab"),
                                           ("back\\slash.txt", b"bs")])
    mnt = tmp_path / "mnt"
    r = run_index(d, "--list")
    assert r.returncode == 0, r
    rows = parse_list(r.stdout)
    assert os.path.exists(index_of(d))               # --list builds if needed
    assert parse_list(run_index(d, "--list").stdout) == rows   # and then loads

    with lib.mounted(d, mnt):
        with open(mnt / ".shardfs/members") as f:           # one writer
            assert f.read() == r.stdout
        files = {}
        for dirpath, _, names in os.walk(mnt):
            for n in names:
                full = os.path.join(dirpath, n)
                if os.path.isfile(full) and not os.path.islink(full):
                    files[os.path.relpath(full, mnt)] = full
        assert sorted(rows) == sorted(files)
        for rel, full in files.items():
            size, shard, offset = rows[rel]
            assert os.path.getsize(full) == size, rel
            assert int(os.getxattr(full, "user.shardfs.offset")) == offset, rel
            assert int(os.getxattr(full, "user.shardfs.shard_index")) == shard, rel
            with open(os.getxattr(full, "user.shardfs.shard"), "rb") as s:
                s.seek(offset)
                assert s.read(size) == open(full, "rb").read(), rel


# ------------------------------------------------------------ concurrency


@pytest.mark.parametrize("round_", range(2))
def test_concurrent_builders_and_mounts(tmp_path, round_):
    d = tmp_path / "shards"
    d.mkdir()
    for i in range(16):
        lib.tar_from_members(d / ("s-%03d.tar" % i),
                             [("d%d/s%03d-%03d.txt" % (j % 7, i, j), b"%d" % j)
                              for j in range(400)])
    ref = fresh(d, tmp_path / "ref")
    mnts = [tmp_path / ("mnt%d" % k) for k in range(2)]
    for mp in mnts:
        mp.mkdir()
        lib._register(mp)
    procs = []
    try:
        outs = []
        for k in range(4):
            outs.append(open(tmp_path / ("index%d.err" % k), "wb+"))
            procs.append(subprocess.Popen([INDEX_TOOL, "-j", "2", os.fspath(d)],
                                          stdout=subprocess.DEVNULL, stderr=outs[-1]))
        for k, mp in enumerate(mnts):
            outs.append(open(tmp_path / ("mount%d.err" % k), "wb+"))
            procs.append(subprocess.Popen([lib.SHARDFS, os.fspath(d), os.fspath(mp)],
                                          stdout=subprocess.DEVNULL, stderr=outs[-1]))
        rcs = [p.wait(timeout=120) for p in procs]
        errs = []
        for f in outs:
            f.seek(0)
            errs.append(f.read().decode())
            f.close()
        assert rcs == [0] * 6, list(zip(rcs, errs))
        for mp in mnts:
            assert lib.is_mounted(mp)
            assert snapshot(mp) == ref
    finally:
        for mp in mnts:
            lib.unmount(mp)
    r = run_index(d, "--check")
    assert r.returncode == 0, r
    assert not [f for f in os.listdir(d) if ".tmp." in f], os.listdir(d)
    index = "." + FIRST + ".shardfs-index"
    # the index, and the record of its check once it was old enough for one
    assert sorted(f for f in os.listdir(d) if not f.endswith(".tar")) in (
        [index], [index, index + ".verified"])
    snap, m, _ = mount_snapshot(d, tmp_path / "after")
    expect_origin(m, "loaded")
    assert snap == ref


@pytest.mark.parametrize("mode,why", [
    (0o666, "writable by others (mode 0666)"),
    (0o664, "writable by its group (mode 0664)")])
def test_index_writable_by_others_is_not_trusted(tmp_path, mode, why):
    """An index others could choose the tree with is rebuilt (and replaced
    by a private one), never loaded; the message says which rule it broke."""
    d = tmp_path / "shards"
    make_set(d, 2)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)
    os.chmod(index_of(d), mode)
    snap, m, r = mount_snapshot(d, mnt)
    assert "%s: not trusted: %s" % (index_of(d), why) in r.stderr, r.stderr
    expect_origin(m, "built", saved=True)
    assert os.stat(index_of(d)).st_mode & 0o777 == 0o644
    assert snap == fresh(d, mnt)


def test_index_owned_by_another_user_is_not_trusted(tmp_path):
    d = tmp_path / "shards"
    make_set(d, 2)
    mnt = tmp_path / "mnt"
    mount_snapshot(d, mnt)
    os.chown(index_of(d), 12345, 12345)
    _, m, r = mount_snapshot(d, mnt)
    assert ("%s: not trusted: owned by uid 12345, neither us (uid 0) nor root"
            % index_of(d)) in r.stderr, r.stderr
    expect_origin(m, "built", saved=True)


def garble_in_place(path):
    """Overwrite the middle of PATH in place (dd conv=notrunc)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 4)
        f.write(b"\xff" * (size // 2))


def replace_by_rename(path, source):
    """Write a copy of SOURCE beside PATH and rename it over PATH."""
    tmp = path + ".new"
    shutil.copyfile(source, tmp)
    os.rename(tmp, path)


class Readers:
    """Threads reading every file of a mount in a loop while the test does
    something else: each read must give the bytes EXPECTED (rel path ->
    digest) or fail with EIO; anything else is recorded in .wrong."""

    def __init__(self, mnt, expected, threads=4):
        self.mnt, self.expected = mnt, expected
        self.stop = threading.Event()
        self.wrong, self.eio, self.reads = [], 0, 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]

    def read_one(self, rel):
        try:
            got = lib.file_digest(os.path.join(os.fsencode(self.mnt), rel))
        except OSError as e:
            with self.lock:
                if e.errno == errno.EIO:
                    self.eio += 1
                else:
                    self.wrong.append((rel, repr(e)))
            return
        with self.lock:
            self.reads += 1
            if got != self.expected[rel]:
                self.wrong.append((rel, "wrong bytes"))

    def run(self, i):
        paths = sorted(self.expected)
        while not self.stop.is_set():
            for rel in paths[i:] + paths[:i]:
                self.read_one(rel)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


@pytest.mark.parametrize("how", ["truncate", "cp-over", "dd-notrunc", "rename-over"])
def test_loaded_index_changed_under_the_mount_does_not_matter(tmp_path, how):
    """After the load verified it, nothing done to the index file reaches
    the mount: truncating it, copying another index over it, garbling it
    in place or renaming another index over it, while readers run, must
    neither kill the daemon (SIGBUS) nor change the tree, and every read
    gives the right bytes (or EIO).  A write to the file waits for the
    daemon to switch to a private copy, which it logs."""
    d = tmp_path / "shards"
    make_set(d, 3)
    other = tmp_path / "other"
    make_set(other, 5, first=7)
    other_index = os.path.join(other, ".s-007.tar.shardfs-index")
    mnt = tmp_path / "mnt"
    log = tmp_path / "daemon.log"
    want = fresh(d, mnt)
    mount_snapshot(other, tmp_path / "mnt2")
    files = {rel: v[-1] for rel, v in want.items()
             if rel != b"." and stat.S_ISREG(v[1])}
    with lib.mounted(d, mnt, "-o", "loglevel=debug,log=%s" % log) as r:
        expect_origin(ORIGIN_RE.search(r.stderr), "built", saved=True)
    with lib.mounted(d, mnt, "-o", "loglevel=debug,log=%s" % log) as r:
        expect_origin(ORIGIN_RE.search(r.stderr), "loaded")
        pid = lib.daemon_pid(mnt)
        with Readers(mnt, files) as readers:
            time.sleep(0.3)
            lib.drop_caches()
            if how == "truncate":
                os.truncate(index_of(d), 0)
            elif how == "cp-over":
                subprocess.run(["cp", other_index, index_of(d)], check=True)
            elif how == "dd-notrunc":
                garble_in_place(index_of(d))
            else:
                replace_by_rename(index_of(d), other_index)
            lib.drop_caches()
            time.sleep(0.3)
            snap = snapshot(mnt)
        assert lib.process_alive(pid)
    assert readers.reads > 0 and readers.wrong == [], readers.wrong[:10]
    assert snap == want
    switched = "the index file is being written; serving a private copy"
    assert (switched in log.read_text()) == (how != "rename-over"), log.read_text()


# ------------------------------------------- shardfs-index says when it failed


def test_index_tool_fails_when_it_saved_nothing(tmp_path, ro_bind):
    """No index saved is a failure for shardfs-index (it exited 0), with
    its own prefix; --check names every path it looked at."""
    d = tmp_path / "shards"
    make_set(d)
    r = run_index(d, "-o", "index=/nonexistent/dir/x.idx")
    assert r.returncode == 1, r
    assert r.stderr.endswith(
        "shardfs-index: warning: /nonexistent/dir/x.idx: cannot write the index: "
        "No such file or directory\n"
        "shardfs-index: no index file was saved for %s\n" % d), r.stderr
    assert not [ln for ln in r.stderr.splitlines()
                if not ln.startswith("shardfs-index: ")], r.stderr
    r = run_index(d, "--check", "-o", "index=/nonexistent/dir/x.idx")
    assert r.returncode == 1, r
    assert ("shardfs-index: no valid index for this shard set (looked in "
            "/nonexistent/dir/x.idx)\n") in r.stderr, r.stderr
    src, ro = ro_bind
    make_set(src)
    r = run_index(ro, "-o", "index=%s" % (ro / "set.idx"))
    assert r.returncode == 1, r
    assert "shardfs-index: no index file was saved for %s\n" % ro in r.stderr, r.stderr
    r = run_index(d, "-o", "index_mode=off")
    assert r.returncode == 1, r
    assert ("shardfs-index: no index file was saved for %s (index_mode=off)\n"
            % d) in r.stderr, r.stderr


def test_stale_temporary_index_files_are_removed(tmp_path):
    """A writer that crashed leaves PATH.tmp.XXXXXX; the next write removes
    it when it is old enough to belong to no live writer, and only then."""
    d = tmp_path / "shards"
    make_set(d)
    idx = index_of(d)
    old, fresh_tmp, other = idx + ".tmp.AbC123", idx + ".tmp.XyZ789", idx + ".tmpfile"
    for p in (old, fresh_tmp, other):
        with open(p, "wb") as f:
            f.write(b"\0" * 4096)
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    os.utime(other, (time.time() - 3600, time.time() - 3600))
    r = run_index(d, "-o", "loglevel=info")
    assert r.returncode == 0, r
    assert not os.path.exists(old)
    assert os.path.exists(fresh_tmp) and os.path.exists(other)
    assert ("shardfs-index: %s.tmp.*: removed 1 temporary index file(s) left by "
            "writers that did not finish\n" % idx) in r.stderr, r.stderr


def run_on_tty(argv, timeout=60):
    """(exit status, everything written) of ARGV run with a pseudo-terminal
    as stdin, stdout and stderr."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            data = os.read(fd, 65536)
        except OSError:         # EIO: the child closed the terminal
            break
        if not data:
            break
        out += data
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode()


def test_shardfs_index_shows_progress_on_a_tty_only(tmp_path):
    """Like shardfs, shardfs-index redraws one progress line on a terminal
    while it scans, ending with every shard done; into a file or a pipe it
    writes the summary alone."""
    d = tmp_path / "shards"
    make_set(d, n=4)
    rc, out = run_on_tty([INDEX_TOOL, "-o", "index_mode=rebuild", str(d)])
    assert rc == 0, out
    progress = re.findall(r"\rshardfs: indexing (\d+)/(\d+) shards", out)
    assert progress and progress[-1] == ("4", "4"), out
    assert lib.parse_summary(out.replace("\r\n", "\n")) is not None, out
    r = run_index("-o", "index_mode=rebuild", d)
    assert r.returncode == 0 and "indexing" not in r.stderr and "\r" not in r.stderr, r
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    with lib.registered_mount(mnt):
        rc, out = run_on_tty([lib.SHARDFS, "-o", "index_mode=rebuild", str(d), str(mnt)])
        assert rc == 0, out
        assert re.findall(r"\rshardfs: indexing (\d+)/(\d+) shards", out)[-1] \
            == ("4", "4"), out


def entries_section(path):
    """(offset, length) of the ENTRIES section of the index file at PATH
    (index_format.h: the section table at byte 128, 24 bytes a section)."""
    with open(path, "rb") as f:
        head = f.read(448)
    offset, length, _ = struct.unpack_from("=QQQ", head, 128 + 2 * 24)
    return offset, length


def physical_offset(path, at):
    """Where byte AT of PATH lies on its device (filefrag's extents)."""
    r = lib.run_cmd(["filefrag", "-v", path])
    assert r.returncode == 0, r
    block = int(re.search(r"blocks? of (\d+) bytes", r.stdout).group(1))
    for m in re.finditer(r"^\s*\d+:\s+(\d+)\.\.\s*(\d+):\s+(\d+)\.\.", r.stdout, re.M):
        first, last, phys = map(int, m.groups())
        if first <= at // block <= last:
            return (phys + at // block - first) * block + at % block
    raise AssertionError("byte %d of %s in no extent:\n%s" % (at, path, r.stdout))


ROT_MEMBERS = dict({"%s/sample-%06d.cls" % (c, i): b"%s %d\n" % (c.encode(), i)
                    for c in "ab" for i in range(3000)},
                   **{"b/zz-last.cls": b"the last name\n"})


@contextlib.contextmanager
def rotted_index(tmp_path):
    """A set of ROT_MEMBERS on an ext4 image whose index was built,
    checked and recorded by a mount, then had the last byte of its
    ENTRIES section (in the name b/zz-last.cls) flipped on the device,
    beneath the file system: its change time stays, so the record holds.
    Yields the set's directory, the ext4 mounted again."""
    image = tmp_path / "rot.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    assert lib.run_cmd(["mkfs.ext4", "-q", "-b", "4096", str(image)]).returncode == 0
    fsdir, mnt = tmp_path / "fs", tmp_path / "mnt"
    fsdir.mkdir()
    d = fsdir / "shards"
    with loop_device(image) as dev:
        with device_mounted(dev, fsdir):
            d.mkdir()
            lib.tar_from_members(d / FIRST, sorted(ROT_MEMBERS.items()))
            assert run_index(d).returncode == 0
            wait_settled(index_of(d))
            with lib.mounted(d, mnt):		# the full check, recorded
                pass
            assert lib.wait_for_daemon_exit(mnt)
            assert os.path.exists(index_of(d) + ".verified")
            offset, length = entries_section(index_of(d))
            assert length > 4 * 16384
            at = physical_offset(index_of(d), offset + length - 1)
            ctime = os.stat(index_of(d)).st_ctime_ns
        with open(dev, "r+b", buffering=0) as f:
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 1]))
            os.fsync(f.fileno())
        with device_mounted(dev, fsdir):
            assert os.stat(index_of(d)).st_ctime_ns == ctime
            yield d


def test_bytes_that_rot_beneath_a_record_fail_with_eio(tmp_path):
    """Bytes of an index file changed beneath its file system after its
    full check (bit rot, a write to the device: the change time stays, so
    the record holds) are found when a request first needs them
    (index_guard.h): a listing or lookup that reads them fails with
    EIO and the log names the file and the offset, the other directory is
    served byte for byte, and the next mount checks the whole file and
    rebuilds it."""
    mnt, log = tmp_path / "mnt", tmp_path / "shardfs.log"
    with rotted_index(tmp_path) as d:
        with lib.mounted(d, mnt, "-o", "log=%s" % log):
            a = sorted(n for n in ROT_MEMBERS if n.startswith("a/"))
            assert sorted("a/" + n for n in os.listdir(mnt / "a")) == a
            for name in a[::97]:
                with open(mnt / name, "rb") as f:
                    assert f.read() == ROT_MEMBERS[name], name
            for probe in (lambda: os.listdir(mnt / "b"),
                          lambda: os.stat(mnt / "b" / "zz-last.cls")):
                with pytest.raises(OSError) as e:
                    probe()
                assert e.value.errno == errno.EIO
        assert lib.wait_for_daemon_exit(mnt)
        text = log.read_text()
        assert "%s: offset " % os.path.realpath(index_of(d)) in text, text
        assert "changed since the file was checked" in text, text
        assert not os.path.exists(index_of(d) + ".verified")
        snap, m, _ = mount_snapshot(d, mnt)
        expect_origin(m, "built", index_of(d), saved=True)
        assert lib.wait_for_daemon_exit(mnt)
        assert sum(k.startswith(b"b/") for k in snap) == 3001


def test_an_index_that_rotted_is_not_copied_into_a_new_one(tmp_path):
    """A mount that finds a shard's times moved rescans its headers and
    saves the index it loaded again, with the new times: bytes of it that
    rotted since its check would get fresh sums there, and be served as
    the tree from then on.  Such an index is checked whole first, found
    damaged and rebuilt: the tree is right."""
    mnt = tmp_path / "mnt"
    with rotted_index(tmp_path) as d:
        t = lib.T0_NS + 10**12
        os.utime(d / FIRST, ns=(t, t))
        snap, m, _ = mount_snapshot(d, mnt)
        assert lib.wait_for_daemon_exit(mnt)
        expect_origin(m, "built", index_of(d), saved=True)
        assert sorted(k for k in snap if k.startswith(b"b/z")) == [b"b/zz-last.cls"]
        assert snap[b"b/zz-last.cls"][-1] == \
            hashlib.sha256(ROT_MEMBERS["b/zz-last.cls"]).hexdigest()
        assert sum(k.startswith(b"b/") for k in snap) == 3001
