# SPDX-License-Identifier: Apache-2.0
"""Bad input: each case gives the documented exit code (1: the shard set
or the mountpoint cannot be used), an error line starting with 'shardfs: ' that
names the file (and 'offset N' for a bad header), and leaves nothing
mounted and no daemon behind.  -o skip_bad_shards mounts the good shards.
Archive quirks GNU tar accepts (no end marker, trailing garbage, a lone
zero block) must mount and match `tar -x`.
"""
import gzip
import io
import os
import tarfile

import pytest

import shardfs_testlib as lib


def good_shard(path, tag, n=3):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            data = (b"%s member %d\n" % (tag.encode(), i)) * (i * 50 + 1)
            ti = tarfile.TarInfo("%s/m%d.txt" % (tag, i))
            ti.size = len(data)
            ti.mtime = 1_600_000_000 + i
            t.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("shared.txt")
        data = b"last writer: %s\n" % tag.encode()
        ti.size = len(data)
        ti.mtime = 1_600_000_100
        t.addfile(ti, io.BytesIO(data))
    return path


def corrupt_checksum(path, member_index):
    """Flip a byte of the name field of the MEMBER_INDEX-th header (not
    touching the checksum), so the stored checksum no longer matches.
    Returns the header offset."""
    off = lib.member_offsets(path)[member_index][1]
    with open(path, "r+b") as f:
        f.seek(off)
        hdr = bytearray(f.read(512))
        before = lib.tar_checksum(hdr)
        hdr[0] ^= 0x20
        assert lib.tar_checksum(hdr) != before
        f.seek(off)
        f.write(hdr)
    return off


def expect_failure(tmp_path, shards, code, name_in_error, offset=None,
                   mnt=None, options=()):
    mnt = mnt if mnt is not None else tmp_path / "mnt"
    if mnt == tmp_path / "mnt":
        os.makedirs(mnt, exist_ok=True)
    r, was_mounted, daemon_left = lib.run_shardfs_expect_failure(
        shards, mnt, *options)
    assert r.returncode == code, "expected exit %d, got %r" % (code, r)
    assert not was_mounted, "left mounted after failing"
    assert not daemon_left, "a shardfs process outlived the failed mount"
    lib.assert_error_names(r.stderr, name_in_error, offset)
    return r


# ------------------------------------------------------- shard-set errors

def test_missing_shard(tmp_path):
    missing = tmp_path / "nope.tar"
    expect_failure(tmp_path, str(missing), 1, missing)


def test_missing_shard_in_list(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    missing = tmp_path / "gone.tar"
    expect_failure(tmp_path, "%s,%s" % (a, missing), 1, missing)


def test_missing_shard_in_brace_range(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    for i in (0, 1, 3):
        good_shard(d / ("shard-%02d.tar" % i), "s%d" % i)
    expect_failure(tmp_path, str(d / "shard-{00..03}.tar"), 1,
                   d / "shard-02.tar")


@pytest.mark.parametrize("missing", [4, 8])
def test_every_missing_shard_of_a_range_is_named(tmp_path, missing):
    """Not only the first: up to five by name, then the count."""
    d = tmp_path / "s"
    os.makedirs(d)
    for i in range(missing, 10):
        good_shard(d / ("shard-%02d.tar" % i), "s%d" % i)
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    r, was_mounted, _ = lib.run_shardfs_expect_failure(
        str(d / "shard-{00..09}.tar"), mnt)
    assert r.returncode == 1 and not was_mounted, r
    named = ["shardfs: %s: No such file or directory" % (d / ("shard-%02d.tar" % i))
             for i in range(min(missing, 5))]
    last = "shardfs: %d of 10 shards cannot be opened%s" % (
        missing, " (the first ones are listed above)" if missing > 5 else "")
    assert r.stderr.splitlines() == named + [last], r.stderr


def test_a_shard_listed_twice_is_refused(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    b = good_shard(tmp_path / "b.tar", "b")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    r, was_mounted, _ = lib.run_shardfs_expect_failure(
        "%s,%s,%s" % (a, b, tmp_path / "." / "a.tar"), mnt)
    assert r.returncode == 1 and not was_mounted, r
    assert r.stderr == ("shardfs: %s: listed twice in SHARDS (shards 0 and 2)\n"
                        % a), r.stderr


def test_an_empty_shard_is_warned_about(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    mnt = tmp_path / "mnt"
    with lib.mounted("%s,%s" % (a, empty), mnt) as r:
        pass
    assert ("shardfs: warning: %s: empty shard (0 bytes): it adds no files\n"
            % empty) in r.stderr, r.stderr


def test_directory_without_tars(tmp_path):
    d = tmp_path / "notars"
    lib.write_file(os.path.join(d, "readme.txt"), b"no shards here\n")
    lib.write_file(os.path.join(d, "x.tgz"), b"\x1f\x8b not a tar name\n")
    expect_failure(tmp_path, str(d), 1, d)


def test_empty_directory(tmp_path):
    d = tmp_path / "empty"
    os.makedirs(d)
    expect_failure(tmp_path, str(d), 1, d)


def test_glob_matching_nothing(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    good_shard(d / "valid-0.tar", "v")
    pattern = str(d / "train-*.tar")
    expect_failure(tmp_path, pattern, 1, pattern)


def test_brace_list_matching_nothing(tmp_path):
    pattern = str(tmp_path / "{x,y}.tar")
    r = expect_failure(tmp_path, pattern, 1, tmp_path)
    assert "x.tar" in r.stderr or "{x,y}" in r.stderr


@pytest.mark.parametrize("kind", ["text", "random", "gzip", "zeros-then-junk"])
def test_non_tar_file(tmp_path, kind):
    p = tmp_path / "bogus.tar"
    if kind == "text":
        data = b"this is just a text file, not a tar archive\n" * 40
        off = 0
    elif kind == "random":
        data = lib.deterministic_bytes("random", 10240)
        off = 0
    elif kind == "gzip":
        # a gzip stream is decoded (a .tar.gz mounts): what it holds must
        # still be a tar
        data = gzip.compress(b"this is just a text file, not a tar archive\n" * 40)
        off = 0
    else:
        # a valid member, then junk where the next header should be
        good = good_shard(tmp_path / "g.tar", "g", n=1)
        raw = open(good, "rb").read()
        off = lib.member_offsets(good)[1][1]
        data = raw[:off] + b"JUNK" * 128 + raw[off + 512:]
    with open(p, "wb") as f:
        f.write(data)
    expect_failure(tmp_path, str(p), 1, p, offset=off)


@pytest.mark.parametrize("index", [0, 2])
def test_corrupt_header_checksum(tmp_path, index):
    p = good_shard(tmp_path / "c.tar", "c")
    off = corrupt_checksum(p, index)
    expect_failure(tmp_path, str(p), 1, p, offset=off)


def test_corrupt_shard_in_the_middle_of_a_set(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    shards = [good_shard(d / ("%d.tar" % i), "t%d" % i) for i in range(5)]
    off = corrupt_checksum(shards[3], 1)
    expect_failure(tmp_path, str(d), 1, shards[3], offset=off)


def test_truncated_shard_data_past_eof(tmp_path):
    p = good_shard(tmp_path / "t.tar", "t", n=4)
    members = lib.member_offsets(p)
    # cut inside the data of the third member
    name, off, ti = members[2]
    assert ti.size > 200
    with open(p, "r+b") as f:
        f.truncate(ti.offset_data + 100)
    expect_failure(tmp_path, str(p), 1, p, offset=off)


def test_truncated_shard_inside_a_header(tmp_path):
    p = good_shard(tmp_path / "t.tar", "t", n=4)
    off = lib.member_offsets(p)[3][1]
    with open(p, "r+b") as f:
        f.truncate(off + 300)
    expect_failure(tmp_path, str(p), 1, p, offset=off)


def test_size_field_far_past_eof(tmp_path):
    p = tmp_path / "huge-size.tar"
    ti = tarfile.TarInfo("claims_10gib.bin")
    ti.size = 10 * (1 << 30)
    with open(p, "wb") as f:
        f.write(ti.tobuf(tarfile.GNU_FORMAT))
        f.write(b"x" * 4096)
        f.write(b"\0" * 1024)
    expect_failure(tmp_path, str(p), 1, p, offset=0)


def test_dotdot_members_warn_and_mount(tmp_path):
    p = tmp_path / "dd.tar"
    with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as t:
        for name in ("good.txt", "../evil.txt", "sub/../../evil2.txt", "also_good.txt"):
            ti = tarfile.TarInfo(name)
            ti.size = len(name)
            t.addfile(ti, io.BytesIO(name.encode()))
    offs = lib.header_offsets(p)
    start_ns, _ = lib.extract_reference([p], tmp_path / "ref")
    with lib.mounted(p, tmp_path / "mnt") as proc:
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
        assert sorted(os.listdir(tmp_path / "mnt")) == ["also_good.txt", "good.txt"]
    lib.assert_error_names(proc.stderr, p, offs["../evil.txt"])
    lib.assert_error_names(proc.stderr, p, offs["sub/../../evil2.txt"])
    assert not os.path.exists(tmp_path / "evil.txt")


# -------------------------------------------------------- mount errors

def test_mountpoint_missing(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    mnt = tmp_path / "no" / "such" / "dir"
    expect_failure(tmp_path, str(a), 1, mnt, mnt=mnt)


def test_mountpoint_is_a_file(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    mnt = tmp_path / "file-not-dir"
    lib.write_file(str(mnt), b"x")
    r, was_mounted, daemon_left = lib.run_shardfs_expect_failure(str(a), mnt)
    assert r.returncode == 1, r
    assert not daemon_left
    lib.assert_error_names(r.stderr, mnt)
    with open(mnt, "rb") as fh:
        assert fh.read() == b"x"


def test_mountpoint_not_empty(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    mnt = tmp_path / "mnt"
    lib.write_file(os.path.join(mnt, "occupied"), b"x")
    expect_failure(tmp_path, str(a), 1, mnt, mnt=mnt)
    assert os.listdir(mnt) == ["occupied"]


def test_mountpoint_already_mounted_and_not_empty(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    b = good_shard(tmp_path / "b.tar", "b")
    mnt = tmp_path / "mnt"
    with lib.mounted(a, mnt):
        before = sorted(os.listdir(mnt))
        r = lib.run_cmd(lib.shardfs_argv(b, mnt), timeout=60)
        if r.returncode == 0:
            # a wrongly stacked second mount must not outlive the test
            lib.unmount(mnt)
            lib._register(mnt)
        assert r.returncode == 1, r
        # the first mount is untouched
        assert sorted(os.listdir(mnt)) == before


# ------------------------------------------------------ skip_bad_shards

def test_skip_bad_shards_mounts_the_rest(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    good = [good_shard(d / ("%d-good.tar" % i), "g%d" % i) for i in (0, 2, 5)]
    corrupt = good_shard(d / "1-corrupt.tar", "c")
    corrupt_checksum(corrupt, 0)                 # nothing readable in it
    nontar = d / "3-nontar.tar"
    lib.write_file(str(nontar), b"plain text, no tar\n" * 100)
    truncated = d / "4-truncated.tar"
    ti = tarfile.TarInfo("t/only.bin")
    ti.size = 5000
    with open(truncated, "wb") as f:             # its only member is cut
        f.write(ti.tobuf(tarfile.GNU_FORMAT) + b"y" * 1000)
    # without the option the set is refused
    expect_failure(tmp_path, str(d), 1, corrupt)
    start_ns = lib.extract_reference_ok(good, tmp_path / "ref")
    with lib.mounted(str(d), tmp_path / "mnt", "-o", "skip_bad_shards") as proc:
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
    for bad in (corrupt, nontar, truncated):
        lib.assert_error_names(proc.stderr, bad)


def test_skip_bad_shards_with_missing_shard(tmp_path):
    a = good_shard(tmp_path / "a.tar", "a")
    b = good_shard(tmp_path / "b.tar", "b")
    missing = tmp_path / "missing.tar"
    start_ns = lib.extract_reference_ok([a, b], tmp_path / "ref")
    with lib.mounted("%s,%s,%s" % (a, missing, b), tmp_path / "mnt",
                     "-o", "skip_bad_shards") as proc:
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
    lib.assert_error_names(proc.stderr, missing)


# ------------------------------------------- quirks GNU tar accepts

def _compare_quirk(tmp_path, raw):
    p = tmp_path / "quirk.tar"
    with open(p, "wb") as f:
        f.write(raw)
    start_ns, results = lib.extract_reference([p], tmp_path / "ref")
    assert results[0].returncode == 0, "GNU tar rejects it: %r" % results[0]
    with lib.mounted(p, tmp_path / "mnt"):
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)


def _raw_members(tmp_path):
    g = good_shard(tmp_path / "g.tar", "q", n=3)
    raw = open(g, "rb").read()
    last = lib.member_offsets(g)[-1][2]
    end = last.offset_data + (last.size + 511) // 512 * 512
    return raw[:end]


def test_no_end_of_archive_blocks(tmp_path):
    _compare_quirk(tmp_path, _raw_members(tmp_path))


def test_single_zero_block_at_end(tmp_path):
    _compare_quirk(tmp_path, _raw_members(tmp_path) + b"\0" * 512)


def test_trailing_garbage_after_end_marker(tmp_path):
    _compare_quirk(tmp_path, _raw_members(tmp_path) + b"\0" * 1024 +
                   b"garbage after the end of the archive" * 50)


def test_zero_length_file(tmp_path):
    """GNU tar rejects an empty file; shardfs may either refuse it (exit 1
    naming it) or mount it as an empty tree like what tar extracted."""
    p = tmp_path / "empty.tar"
    open(p, "wb").close()
    start_ns, results = lib.extract_reference([p], tmp_path / "ref")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    r = lib.run_shardfs(str(p), mnt, check=False)
    try:
        if r.returncode == 0:
            lib.compare_trees(mnt, tmp_path / "ref", start_ns)
        else:
            assert r.returncode == 1, r
            assert not lib.is_mounted(mnt)
            lib.assert_error_names(r.stderr, p)
    finally:
        lib.unmount(mnt)
