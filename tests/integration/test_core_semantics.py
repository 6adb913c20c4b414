# SPDX-License-Identifier: Apache-2.0
"""What the mounted tree means: union of shards, last-wins duplicates, name
normalisation, long names, huge files, hard links, symlinks, raw-byte
names, stat fields, statfs, read-only-ness, uid/gid/umask, inode stability.

Every tree comparison is against GNU tar's extraction of the same shards,
in order, into one directory (shardfs_testlib.compare_trees).
"""
import errno
import io
import json
import os
import tarfile

import pytest

import shardfs_testlib as lib
from shardfs_testlib import Caps, T0_NS

GIB = 1 << 30


def add_member(t, name, kind="f", data=b"", mode=None, mtime=1_600_000_000,
               linkname=None, uid=0, gid=0):
    """Append one member to an open tarfile; NAME may be bytes."""
    ti = tarfile.TarInfo(os.fsdecode(name))
    ti.mtime = mtime
    ti.uid, ti.gid = uid, gid
    if kind == "f":
        ti.size = len(data)
        ti.mode = 0o644 if mode is None else mode
        t.addfile(ti, io.BytesIO(data))
        return
    if kind == "d":
        ti.type = tarfile.DIRTYPE
        ti.mode = 0o755 if mode is None else mode
    elif kind == "l":
        ti.type = tarfile.SYMTYPE
        ti.linkname = os.fsdecode(linkname)
        ti.mode = 0o777
    elif kind == "h":
        ti.type = tarfile.LNKTYPE
        ti.linkname = os.fsdecode(linkname)
        ti.mode = 0o644 if mode is None else mode
    elif kind == "fifo":
        ti.type = tarfile.FIFOTYPE
        ti.mode = 0o644
    t.addfile(ti)


def py_shard(path, members, fmt=tarfile.GNU_FORMAT):
    with tarfile.open(path, "w", format=fmt, encoding="utf-8",
                      errors="surrogateescape") as t:
        for m in members:
            add_member(t, *m[:2], **(m[2] if len(m) > 2 else {}))
    return path


# ---------------------------------------------------------------- long names

def build_long_name_tree(root, ustar_only=False):
    """Paths around every header-field boundary: 99/100/101-byte names,
    155-byte prefixes (255-byte ustar paths), 255-byte components, 300+
    and ~1000-byte paths, long symlink and hard link targets."""
    made = []

    def ustar_ok(p):
        # what ustar can split into prefix (<=155) + non-empty name (<=100)
        if len(p) <= 100:
            return True
        return any(p[i:i + 1] == b"/" and i <= 155 and 0 < len(p) - i - 1 <= 100
                   for i in range(len(p)))

    def f(rel, data=None):
        rel_b = os.fsencode(rel)
        if ustar_only:
            parts = rel_b.split(b"/")
            dirs = [b"/".join(parts[:k]) + b"/" for k in range(1, len(parts))]
            if not all(ustar_ok(p) for p in [rel_b] + dirs):
                return
        lib.write_file(os.path.join(os.fsencode(root), rel_b),
                       data if data is not None else rel_b + b"\n",
                       mtime_ns=T0_NS + len(rel_b))
        made.append(rel_b)

    for n in (98, 99, 100, 101, 154, 155, 156, 254, 255):
        f("n%03d_" % n + "x" * (n - 5))
    f("p" * 76 + "/" + "p" * 77 + "/" + "q" * 100)  # 255 bytes, prefix 154
    f("o" * 77 + "/" + "o" * 77 + "/" + "r" * 99)   # 255 bytes, prefix 155
    f("P" * 77 + "/" + "P" * 78 + "/" + "s" * 100)  # 256 bytes: past ustar
    f("p" * 76 + "/" + "short.txt")
    f("c" * 255 + "/" + "d" * 255)          # two 255-byte components
    f("a" * 200 + "/" + "b" * 200 + ".txt")  # 405 bytes
    f("/".join(["%02d" % i + "z" * 98 for i in range(10)]))  # ~1009 bytes
    if not ustar_only:
        r = os.fsencode(root)
        os.symlink(b"t" * 300, os.path.join(r, b"sym_300"))
        os.symlink(b"/".join([b"u" * 200] * 5), os.path.join(r, b"sym_1004"))
        target = b"a" * 200 + b"/" + b"b" * 200 + b".txt"
        os.link(os.path.join(r, target), os.path.join(r, b"hard_to_405"))
        os.link(os.path.join(r, target), os.path.join(r, b"c" * 255 + b"/hl" + b"e" * 150))
    lib.finish_dirs(root)
    return made


LONG_NAME_WRITERS = {
    "gnutar-gnu": ("gnu", "gnu"),
    "gnutar-oldgnu": ("gnu", "oldgnu"),
    "gnutar-posix": ("gnu", "posix"),
    "gnutar-ustar": ("gnu", "ustar"),
    "bsdtar-pax": ("bsd", "pax"),
    "bsdtar-ustar": ("bsd", "ustar"),
    "pytarfile-gnu": ("py", tarfile.GNU_FORMAT),
    "pytarfile-pax": ("py", tarfile.PAX_FORMAT),
}


@pytest.mark.parametrize("writer", sorted(LONG_NAME_WRITERS))
def test_long_names(tmp_path, writer):
    tool, fmt = LONG_NAME_WRITERS[writer]
    ustar = fmt == "ustar"
    src = tmp_path / "src"
    made = build_long_name_tree(src, ustar_only=ustar)
    members = sorted(os.listdir(os.fsencode(src)))
    out = tmp_path / "long.tar"
    if tool == "gnu":
        lib.gnu_tar_create(out, src, members, fmt)
    elif tool == "bsd":
        lib.bsdtar_create(out, src, members, fmt)
    else:
        lib.py_tar_create(out, src, members, fmt)
    with lib.mount_and_compare([out], tmp_path / "mnt", tmp_path / "ref") \
            as (_, mnt_s, _):
        for rel in made:
            assert rel in mnt_s
        assert len(made) == (6 if ustar else 16)
        if ustar:
            return
        assert os.readlink(tmp_path / "mnt" / "sym_300") == "t" * 300
    # direct lookup of a ~1000-byte path on a fresh mount (not via readdir)
    deep = [p for p in made if len(p) > 1000][0]
    with lib.mounted(out, tmp_path / "mnt"):
        with open(os.path.join(os.fsencode(tmp_path / "mnt"), deep), "rb") as fh:
            assert fh.read() == deep + b"\n"


def test_component_longer_than_255_skipped_with_warning(tmp_path):
    shard = tmp_path / "toolong.tar"
    py_shard(shard, [
        ("ok_before.txt", "f", {"data": b"before\n"}),
        ("x" * 256, "f", {"data": b"too long\n"}),
        ("y" * 300 + "/file", "f", {"data": b"too long too\n"}),
        ("z" * 255, "f", {"data": b"exactly 255 is fine\n"}),
        ("ok_after.txt", "f", {"data": b"after\n"}),
    ], fmt=tarfile.PAX_FORMAT)
    offsets = lib.header_offsets(shard)
    # GNU tar cannot create those names either: it reports them and goes on
    start_ns, results = lib.extract_reference([shard], tmp_path / "ref")
    assert results[0].returncode != 0
    with lib.mounted(shard, tmp_path / "mnt") as proc:
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
        assert os.path.exists(tmp_path / "mnt" / ("z" * 255))
    for name in ("x" * 256, "y" * 300 + "/file"):
        lib.assert_error_names(proc.stderr, shard, offsets[name])


# ---------------------------------------------------------- files > 8 GiB

def write_huge_member_shard(path, fmt, size, markers, after=b"after\n"):
    """A shard whose first member is SIZE bytes long: header written by
    tarfile, data area left as a hole (the shard is sparse on disk) except
    for MARKERS [(offset, bytes)], then a small member and the end blocks."""
    big = tarfile.TarInfo("huge/nine_gib.bin")
    big.size = size
    big.mtime = 1_650_000_000
    big.mode = 0o640
    big.uid, big.gid = 1001, 1002
    hdr = big.tobuf(fmt, "utf-8", "surrogateescape")
    data_off = len(hdr)
    end = data_off + (size + 511) // 512 * 512
    small = tarfile.TarInfo("after_huge.txt")
    small.size = len(after)
    small.mtime = 1_650_000_001
    small_hdr = small.tobuf(fmt, "utf-8", "surrogateescape")
    with open(path, "wb") as f:
        f.write(hdr)
        for off, data in markers:
            f.seek(data_off + off)
            f.write(data)
        f.seek(end)
        f.write(small_hdr)
        f.write(after + b"\0" * ((512 - len(after) % 512) % 512))
        f.write(b"\0" * 1024)
    return data_off


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT],
                         ids=["gnu-base256", "pax-size-record"])
def test_file_larger_than_8gib(tmp_path, fmt):
    size = 9 * GIB + 12345
    markers = [(0, b"BEGIN-OF-HUGE"),
               (4 * GIB - 5, b"ACROSS-4GIB"),
               (8 * GIB - 3, b"ACROSS-8GIB"),
               (size - 7, b"THE-END")]
    shard = tmp_path / "huge.tar"
    write_huge_member_shard(shard, fmt, size, markers)
    st = os.stat(shard)
    assert st.st_blocks * 512 < 64 << 20, "shard should be sparse on disk"
    # GNU tar agrees the shard is valid and lists both members
    r = lib.run_cmd([lib.GNU_TAR, "-tvf", str(shard)])
    assert r.returncode == 0 and "after_huge.txt" in r.stdout, r
    assert str(size) in r.stdout
    # only the small member is extracted as the reference for it
    ref = tmp_path / "ref"
    os.makedirs(ref)
    r = lib.run_cmd([lib.GNU_TAR, "-x", "-f", str(shard), "-C", str(ref),
                     "after_huge.txt"])
    assert r.returncode == 0, r

    def expected(off, ln):
        buf = bytearray(ln)
        for moff, data in markers:
            lo, hi = max(off, moff), min(off + ln, moff + len(data))
            if lo < hi:
                buf[lo - off:hi - off] = data[lo - moff:hi - moff]
        return bytes(buf)

    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt):
        p = mnt / "huge" / "nine_gib.bin"
        mst = os.stat(p)
        assert mst.st_size == size
        assert mst.st_mode & 0o7777 == 0o640
        assert mst.st_mtime == 1_650_000_000
        assert (mst.st_uid, mst.st_gid) == (1001, 1002)
        with open(p, "rb") as fh:
            fd = fh.fileno()
            for off, ln in [(0, 4096), (4 * GIB - 100, 200), (8 * GIB - 10, 64),
                            (5 * GIB + 7, 1 << 20), (size - 4096, 4096),
                            (size - 7, 7), (2 * GIB, 131072)]:
                assert os.pread(fd, ln, off) == expected(off, ln), (off, ln)
            # reads at and past EOF
            assert os.pread(fd, 100, size - 3) == b"END"
            assert os.pread(fd, 100, size) == b""
            assert os.pread(fd, 100, size + 10 * GIB) == b""
            fh.seek(-5, os.SEEK_END)
            assert fh.read() == b"E-END"
        with open(mnt / "after_huge.txt", "rb") as fh:
            with open(ref / "after_huge.txt", "rb") as rf:
                assert fh.read() == rf.read()
        vfs = os.statvfs(mnt)
        assert vfs.f_blocks * vfs.f_frsize >= size


# ------------------------------------------------------------- small sizes

@pytest.mark.parametrize("fmt", ["gnu", "posix", "v7", "ustar"])
def test_block_boundary_sizes(tmp_path, fmt):
    src = tmp_path / "src"
    sizes = [0, 511, 512, 513, 0, 1, 1023, 1024, 1025, 10239, 10240, 10241]
    for i, size in enumerate(sizes):
        lib.write_file(os.path.join(src, "f%02d_%d" % (i, size)),
                       lib.deterministic_bytes(("b", i), size),
                       mtime_ns=T0_NS + i * 10**9)
    shard = lib.gnu_tar_create(tmp_path / "b.tar", src,
                               sorted(os.listdir(src)), fmt)
    _, mnt_s, _, _ = lib.check_mount_against_tar(
        [shard], tmp_path / "mnt", tmp_path / "ref")
    assert len([p for p in mnt_s]) == len(sizes)


# ------------------------------------------------------------------ scale

@pytest.mark.timeout(200)
def test_directory_with_10k_files(tmp_path):
    src = tmp_path / "src"
    os.makedirs(src / "big")
    for i in range(10_000):
        lib.write_file(os.path.join(src, "big", "f%05d.txt" % i),
                       b"file %d\n" % i * (i % 7), mtime_ns=T0_NS + i)
    lib.finish_dirs(src)
    shard = lib.gnu_tar_create(tmp_path / "10k.tar", src, ["big"], "posix")
    lib.check_mount_against_tar([shard], tmp_path / "mnt", tmp_path / "ref")
    with lib.mounted(shard, tmp_path / "mnt"):
        names = os.listdir(tmp_path / "mnt" / "big")
        assert len(names) == len(set(names)) == 10_000
        assert sorted(names) == sorted(os.listdir(tmp_path / "ref" / "big"))
        # lookups of names not yet listed, after a fresh mount
    with lib.mounted(shard, tmp_path / "mnt"):
        for i in (9999, 0, 5000, 1234):
            with open(tmp_path / "mnt" / "big" / ("f%05d.txt" % i), "rb") as fh:
                assert fh.read() == b"file %d\n" % i * (i % 7)
        with pytest.raises(FileNotFoundError):
            os.stat(tmp_path / "mnt" / "big" / "f10000.txt")


@pytest.mark.timeout(240)
def test_one_thousand_shards_brace_pattern(tmp_path):
    d = tmp_path / "shards"
    os.makedirs(d)
    shards = []
    for i in range(1000):
        p = d / ("shard-%06d.tar" % i)
        members = [("samples/%03d/%06d.cls" % (i % 100, i), "f",
                    {"data": b"%d\n" % (i % 10), "mtime": 1_600_000_000 + i}),
                   ("samples/%03d/%06d.jpg" % (i % 100, i), "f",
                    {"data": lib.deterministic_bytes(i, 100 + i),
                     "mtime": 1_600_000_000 + i}),
                   ("common/last_wins.txt", "f",
                    {"data": b"from shard %d\n" % i, "mtime": 1_600_000_000 + i})]
        py_shard(p, members)
        shards.append(p)
    # no directory members: one `tar -x -i` over the concatenation gives
    # the same tree as 1000 `tar -x` runs, much faster
    start_ns = lib.extract_reference_concatenated(shards, tmp_path / "ref")
    pattern = str(d / "shard-{000000..000999}.tar")
    with lib.mounted(pattern, tmp_path / "mnt") as proc:
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
        with open(tmp_path / "mnt" / "common" / "last_wins.txt", "rb") as fh:
            assert fh.read() == b"from shard 999\n"
    s = lib.parse_summary(proc.stderr)
    assert s is not None, proc.stderr
    assert s["shards"] == 1000
    assert s["files"] == 2001
    # one path present in 1000 shards: 999 members were replaced
    assert s["duplicates"] == 999


# -------------------------------------------------------------- duplicates

def test_duplicates_across_shards_and_within_a_shard(tmp_path):
    # within a shard: GNU tar appends (-r) a changed file to the same archive
    src = tmp_path / "src"
    lib.write_file(os.path.join(src, "dup.txt"), b"version 1\n", mtime_ns=T0_NS)
    lib.write_file(os.path.join(src, "once.txt"), b"once\n", mtime_ns=T0_NS)
    s1 = lib.gnu_tar_create(tmp_path / "s1.tar", src, ["dup.txt", "once.txt"], "gnu")
    lib.write_file(os.path.join(src, "dup.txt"), b"version 2, longer\n",
                   mode=0o600, mtime_ns=T0_NS + 10**9)
    r = lib.run_cmd([lib.GNU_TAR, "-r", "--format=gnu", "-f", str(s1), "-C",
                     str(src), "dup.txt"])
    assert r.returncode == 0, r
    assert [n for n, _, _ in lib.member_offsets(s1)].count("dup.txt") == 2
    # across shards, and three times within one Python-written shard
    s2 = py_shard(tmp_path / "s2.tar", [
        ("dup.txt", "f", {"data": b"version 3 from shard 2\n", "mode": 0o640}),
        ("tri.txt", "f", {"data": b"t1\n"}),
        ("tri.txt", "f", {"data": b"t2 is longer\n", "mtime": 1_600_000_005}),
        ("tri.txt", "f", {"data": b"t3\n", "mode": 0o755}),
    ])
    s3 = py_shard(tmp_path / "s3.tar", [
        ("once.txt", "f", {"data": b"replaced in shard 3\n", "uid": 77, "gid": 88}),
    ])
    proc, mnt_s, _, _ = lib.check_mount_against_tar(
        [s1, s2, s3], tmp_path / "mnt", tmp_path / "ref")
    s = lib.parse_summary(proc.stderr)
    assert s is not None, proc.stderr
    # dup.txt 3 times (2 replaced), tri.txt 3 times (2), once.txt twice (1)
    assert s["duplicates"] == 5
    assert s["files"] == 3


def test_duplicates_changing_type(tmp_path):
    """A later member of another type replaces the earlier one, as tar -x
    does (file->dir, empty dir->file, file->symlink, symlink->file,
    symlink->dir, dir metadata replaced)."""
    s1 = py_shard(tmp_path / "s1.tar", [
        ("f2d", "f", {"data": b"file\n"}),
        ("d2f/", "d", {"mode": 0o755}),
        ("f2l", "f", {"data": b"F\n"}),
        ("l2f", "l", {"linkname": "target"}),
        ("l2d", "l", {"linkname": "dd"}),
        ("dd/", "d", {"mode": 0o700}),
        ("dd/inside", "f", {"data": b"inside\n"}),
    ])
    s2 = py_shard(tmp_path / "s2.tar", [
        ("f2d/", "d", {"mode": 0o750}),
        ("f2d/in", "f", {"data": b"in\n"}),
        ("d2f", "f", {"data": b"now a file\n"}),
        ("f2l", "l", {"linkname": "x"}),
        ("l2f", "f", {"data": b"real file\n"}),
        ("l2d/", "d", {"mode": 0o711}),
        ("dd/", "d", {"mode": 0o751, "mtime": 1_600_000_777}),
    ])
    lib.check_mount_against_tar([s1, s2], tmp_path / "mnt", tmp_path / "ref")


def test_paths_both_file_and_directory(tmp_path):
    """A path that is a file in one member and a directory in another, in
    the orders tar -x tells apart: a member below a file is not extracted,
    a file does not replace a directory that holds something, a directory
    member replaces a file.  The mount's index is built bounded and
    replays them (the set scanned twice more), as GNU tar extracts."""
    s1 = py_shard(tmp_path / "s1.tar", [
        ("keep/1.jpg", "f", {"data": b"1\n"}),
        ("f", "f", {"data": b"a file, then below it\n"}),
        ("g", "f", {"data": b"a file\n"}),
        ("g", "f", {"data": b"a file over a file, then a directory\n"}),
        ("d/x", "f", {"data": b"below, then a file\n"}),
        ("n", "f", {"data": b"n\n"}),
        ("r", "f", {"data": b"r\n"}),
        ("r/x", "f", {"data": b"skipped\n"}),
        ("r/", "d", {"mode": 0o750}),
        ("r/y", "f", {"data": b"kept\n"}),
    ])
    s2 = py_shard(tmp_path / "s2.tar", [
        ("f/x", "f", {"data": b"skipped\n"}),
        ("d", "f", {"data": b"skipped: d holds x\n"}),
        ("g/", "d", {"mode": 0o700}),
        ("g/x", "f", {"data": b"kept\n"}),
        ("n/m/x", "f", {"data": b"skipped\n"}),
        ("n/", "d", {"mode": 0o755}),
        ("n/m", "f", {"data": b"a file\n"}),
    ])
    s3 = py_shard(tmp_path / "s3.tar", [
        ("g", "f", {"data": b"skipped: g holds x\n"}),
        ("n/m/y", "f", {"data": b"skipped\n"}),
        ("n/z", "f", {"data": b"kept\n"}),
    ])
    proc, mnt_s, _, _ = lib.check_mount_against_tar(
        [s1, s2, s3], tmp_path / "mnt", tmp_path / "ref",
        allow_tar_errors=True)
    assert "6 paths are both a directory and a file: the set is scanned " \
        "twice more" in proc.stderr, proc.stderr
    assert "built in memory" not in proc.stderr, proc.stderr
    lib.assert_error_names(proc.stderr, s2, 0)		# f/x
    assert "would replace a non-empty directory: 'g'" in proc.stderr, proc.stderr
    assert lib.parse_summary(proc.stderr)["duplicates"] == 1, proc.stderr


# -------------------------------------------------------------- hard links

def test_hard_links_within_and_across_shards(tmp_path):
    s1 = py_shard(tmp_path / "s1.tar", [
        ("data/orig.bin", "f", {"data": b"shared bytes\n" * 100, "mode": 0o604}),
        ("data/link_a", "h", {"linkname": "data/orig.bin"}),
        ("other/link_b", "h", {"linkname": "data/orig.bin"}),
        ("solo.txt", "f", {"data": b"solo\n"}),
    ])
    # shard 2 links to a file of shard 1 (tar -x can: the file is on disk)
    s2 = py_shard(tmp_path / "s2.tar", [
        ("later/link_c", "h", {"linkname": "data/orig.bin"}),
        ("later/solo_link", "h", {"linkname": "solo.txt"}),
    ])
    with lib.mount_and_compare([s1, s2], tmp_path / "mnt", tmp_path / "ref") \
            as (_, mnt_s, ref_s):
        group = [b"data/orig.bin", b"data/link_a", b"other/link_b",
                 b"later/link_c"]
        assert len({mnt_s[p][0].st_ino for p in group}) == 1
        assert all(mnt_s[p][0].st_nlink == 4 for p in group)
        with open(tmp_path / "mnt" / "later" / "link_c", "rb") as fh:
            assert os.fstat(fh.fileno()).st_ino == mnt_s[b"data/orig.bin"][0].st_ino
            assert fh.read() == b"shared bytes\n" * 100


def test_hard_link_then_target_replaced(tmp_path):
    """tar -x keeps the old content under the link name when a later shard
    replaces the link target (the link and the new file are separate)."""
    s1 = py_shard(tmp_path / "s1.tar", [
        ("orig", "f", {"data": b"AAA\n"}),
        ("hl", "h", {"linkname": "orig"}),
    ])
    s2 = py_shard(tmp_path / "s2.tar", [("orig", "f", {"data": b"BBBB\n"})])
    lib.check_mount_against_tar([s1, s2], tmp_path / "mnt", tmp_path / "ref")


# ---------------------------------------------------------------- symlinks

def test_symlinks_targets_kept_as_stored(tmp_path):
    s1 = py_shard(tmp_path / "s1.tar", [
        ("l/rel", "l", {"linkname": "../f.txt"}),
        ("l/abs", "l", {"linkname": "/etc/passwd"}),
        ("l/up", "l", {"linkname": "../../../../outside"}),
        ("l/dangling", "l", {"linkname": "does/not/exist"}),
        ("l/long", "l", {"linkname": "/".join(["seg%03d" % i for i in range(150)])}),
        ("l/raw", "l", {"linkname": b"caf\xe9-\xff"}),
        ("l/dotdot_slash", "l", {"linkname": "..//.//x/"}),
        ("f.txt", "f", {"data": b"f\n"}),
        ("l/todir", "l", {"linkname": ".."}),
    ], fmt=tarfile.PAX_FORMAT)
    _, mnt_s, _, _ = lib.check_mount_against_tar(
        [s1], tmp_path / "mnt", tmp_path / "ref")
    assert mnt_s[b"l/raw"][1] == b"caf\xe9-\xff"
    with lib.mounted(s1, tmp_path / "mnt"):
        # following a relative link inside the mount works
        with open(tmp_path / "mnt" / "l" / "rel", "rb") as fh:
            assert fh.read() == b"f\n"
        st = os.lstat(tmp_path / "mnt" / "l" / "long")
        assert st.st_size == len(os.readlink(tmp_path / "mnt" / "l" / "long"))


# ------------------------------------------------------------ raw names

NON_UTF8 = [b"latin1-caf\xe9.txt", b"junk-\xff\xfe\xfd", b"\x80start",
            b"mixed-\xe6\x97\xa5-\xe6\x97.bin", b"dir-\xa0\xa1/inner-\xc3.txt"]


@pytest.mark.parametrize("writer", ["gnutar-gnu", "gnutar-posix", "bsdtar-pax",
                                    "pytarfile-pax", "pytarfile-gnu"])
def test_non_utf8_names(tmp_path, writer):
    src = os.fsencode(tmp_path / "src")
    for i, name in enumerate(NON_UTF8):
        lib.write_file(os.path.join(src, name), b"content of " + name + b"\n",
                       mtime_ns=T0_NS + i)
    os.symlink(b"link-target-\xfe", os.path.join(src, b"sym-\xfe"))
    lib.finish_dirs(src)
    members = sorted(os.listdir(src))
    out = tmp_path / "raw.tar"
    tool, fmt = writer.split("-")
    if tool == "gnutar":
        lib.gnu_tar_create(out, src, members, fmt)
    elif tool == "bsdtar":
        lib.bsdtar_create(out, src, members, fmt)
    else:
        lib.py_tar_create(out, src, members,
                          {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT}[fmt])
    _, mnt_s, _, _ = lib.check_mount_against_tar(
        [out], tmp_path / "mnt", tmp_path / "ref")
    for name in NON_UTF8:
        assert name in mnt_s
    assert mnt_s[b"sym-\xfe"][1] == b"link-target-\xfe"


# ----------------------------------------------------------- normalisation

def test_name_normalisation_and_dotdot_members(tmp_path):
    shard = tmp_path / "names.tar"
    py_shard(shard, [
        ("/abs/x.txt", "f", {"data": b"abs\n"}),
        ("./dot/./y.txt", "f", {"data": b"dot\n"}),
        ("a//b///c.txt", "f", {"data": b"slashes\n"}),
        ("trail/dir//", "d", {"mode": 0o705}),
        ("../escape.txt", "f", {"data": b"must not appear\n"}),
        ("in/../../escape2.txt", "f", {"data": b"must not appear\n"}),
        ("x/..", "f", {"data": b"dotdot last\n"}),
        ("ok/after.txt", "f", {"data": b"ok\n"}),
        ("sym_up", "l", {"linkname": "../../etc/passwd"}),
    ], fmt=tarfile.USTAR_FORMAT)
    offsets = lib.header_offsets(shard)
    start_ns, _ = lib.extract_reference([shard], tmp_path / "ref")
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt) as proc:
        lib.compare_trees(mnt, tmp_path / "ref", start_ns)
        assert sorted(os.listdir(mnt)) == sorted(os.listdir(tmp_path / "ref"))
        assert os.readlink(mnt / "sym_up") == "../../etc/passwd"
    assert not os.path.exists(tmp_path / "escape.txt")
    assert not os.path.exists(tmp_path / "escape2.txt")
    for bad in ("../escape.txt", "in/../../escape2.txt", "x/.."):
        lib.assert_error_names(proc.stderr, shard, offsets[bad])


# ------------------------------------------------------------------- stat

def build_clean_set(tmp_path):
    """Three shards, no duplicates and no hard links: a FIFO, two device
    nodes, explicit directories, symlinks and regular files."""
    srcs = []
    for k in range(3):
        src = tmp_path / ("src%d" % k)
        for i in range(5 + k):
            lib.write_file(os.path.join(src, "d%d" % k, "sub", "f%d.bin" % i),
                           lib.deterministic_bytes((k, i), 1000 * i + k),
                           mode=0o640 if i % 2 else 0o644,
                           mtime_ns=T0_NS + k * 10**12 + i * 10**9)
        os.symlink("sub/f0.bin", os.path.join(src, "d%d" % k, "link"))
        srcs.append(src)
    os.mkfifo(os.path.join(srcs[0], "d0", "fifo"))
    os.mknod(os.path.join(srcs[1], "d1", "chardev"), 0o600 | 0o020000,
             os.makedev(1, 3))
    os.mknod(os.path.join(srcs[2], "d2", "blockdev"), 0o600 | 0o060000,
             os.makedev(7, 200))
    shards = []
    for k, src in enumerate(srcs):
        lib.finish_dirs(src)
        shards.append(lib.gnu_tar_create(tmp_path / ("s%d.tar" % k), src,
                                         ["d%d" % k], "posix"))
    return shards


def test_summary_line_counts(tmp_path):
    shards = build_clean_set(tmp_path)
    proc, mnt_s, ref_s, _ = lib.check_mount_against_tar(
        shards, tmp_path / "mnt", tmp_path / "ref")
    s = lib.parse_summary(proc.stderr)
    assert s is not None, "no summary line: %r" % proc.stderr
    kinds = [lib.ftype(st.st_mode) for st, _ in ref_s.values()]
    assert s["shards"] == 3
    assert s["files"] == kinds.count("f")
    assert s["symlinks"] == kinds.count("l")
    assert s["dirs"] in (kinds.count("d"), kinds.count("d") + 1)  # +root
    assert s["bytes"] == sum(st.st_size for st, _ in ref_s.values()
                             if lib.ftype(st.st_mode) == "f")
    assert s["duplicates"] == 0
    assert s["skipped"] == kinds.count("special") == 3


def test_quiet_option_suppresses_summary(tmp_path):
    shards = build_clean_set(tmp_path)
    with lib.mounted(",".join(map(str, shards)), tmp_path / "mnt",
                     "-o", "quiet") as proc:
        assert os.listdir(tmp_path / "mnt")
    assert lib.parse_summary(proc.stderr) is None, proc.stderr
    assert "shards," not in proc.stderr


def test_statfs_reports_total_size_and_file_count(tmp_path):
    shards = build_clean_set(tmp_path)
    _, _, ref_s, _ = lib.check_mount_against_tar(
        shards, tmp_path / "mnt", tmp_path / "ref")
    files = [st for st, _ in ref_s.values() if lib.ftype(st.st_mode) == "f"]
    total = sum(st.st_size for st in files)
    shard_bytes = sum(os.path.getsize(s) for s in shards)
    with lib.mounted(",".join(map(str, shards)), tmp_path / "mnt"):
        v = os.statvfs(tmp_path / "mnt")
    assert v.f_frsize > 0 and v.f_bsize > 0
    size = v.f_blocks * v.f_frsize
    assert size >= total, "statfs size %d < %d bytes of files" % (size, total)
    assert size <= shard_bytes + (len(files) + 1) * v.f_frsize
    assert len(files) <= v.f_files <= len(ref_s) + 1


def test_stat_fields_match_tar_including_blocks(tmp_path):
    """st_size, mode, mtime, owners, nlink come from compare_trees; here:
    st_blocks is plausible and the entries are typed correctly by d_type."""
    shards = build_clean_set(tmp_path)
    _, mnt_s, _, _ = lib.check_mount_against_tar(
        shards, tmp_path / "mnt", tmp_path / "ref")
    with lib.mounted(",".join(map(str, shards)), tmp_path / "mnt"):
        for entry in os.scandir(tmp_path / "mnt" / "d1"):
            st = os.lstat(entry.path)
            assert entry.is_dir(follow_symlinks=False) == lib.ftype(st.st_mode).startswith("d")
            assert entry.is_symlink() == (lib.ftype(st.st_mode) == "l")
        for rel, (st, _) in mnt_s.items():
            if lib.ftype(st.st_mode) == "f" and st.st_size:
                assert st.st_blocks * 512 >= st.st_size, rel
                assert st.st_blocks * 512 < st.st_size + 64 * 1024, rel


# ------------------------------------------------------------ read-only

def test_modifications_fail_with_erofs(tmp_path):
    lib.build_rich_tree(tmp_path / "src", Caps())
    shard = lib.gnu_tar_create(tmp_path / "r.tar", tmp_path / "src",
                               sorted(os.listdir(tmp_path / "src")), "posix")
    start_ns = lib.extract_reference_ok([shard], tmp_path / "ref")
    m = tmp_path / "mnt"
    f = m / "dir1" / "a.txt"
    ops = {
        "open O_WRONLY": lambda: os.open(f, os.O_WRONLY),
        "open O_RDWR": lambda: os.open(f, os.O_RDWR),
        "open O_APPEND": lambda: os.open(f, os.O_WRONLY | os.O_APPEND),
        "create": lambda: os.open(m / "dir1" / "new.txt",
                                  os.O_WRONLY | os.O_CREAT, 0o644),
        "create in root": lambda: os.open(m / "new.txt",
                                          os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
        "mkdir": lambda: os.mkdir(m / "newdir"),
        "unlink": lambda: os.unlink(f),
        "rmdir": lambda: os.rmdir(m / "emptydir"),
        "rename": lambda: os.rename(f, m / "dir1" / "renamed.txt"),
        "rename dir": lambda: os.rename(m / "emptydir", m / "emptydir3"),
        "chmod": lambda: os.chmod(f, 0o777),
        "chown": lambda: os.chown(f, 1, 1),
        "utime": lambda: os.utime(f, (0, 0)),
        "truncate": lambda: os.truncate(f, 0),
        "setxattr": lambda: os.setxattr(f, "user.test", b"v"),
        "removexattr": lambda: os.removexattr(f, "user.test"),
        "symlink": lambda: os.symlink("x", m / "newlink"),
        "link": lambda: os.link(f, m / "dir1" / "hardlink"),
        "mknod fifo": lambda: os.mkfifo(m / "newfifo"),
    }
    with lib.mounted(shard, m):
        entry = lib.mount_entry(m)
        assert "ro" in entry[2], "mount is not flagged read-only: %r" % (entry,)
        errors = {}
        for name, op in ops.items():
            try:
                fd = op()
            except OSError as e:
                if e.errno != errno.EROFS:
                    errors[name] = "%s (%d)" % (errno.errorcode.get(e.errno), e.errno)
            else:
                if isinstance(fd, int):
                    os.close(fd)
                errors[name] = "succeeded"
        # ftruncate and write on a read-only fd fail too
        with open(f, "rb") as fh:
            with pytest.raises(OSError):
                os.write(fh.fileno(), b"x")
        assert not errors, "modifying ops not failing with EROFS: %r" % errors
        lib.compare_trees(m, tmp_path / "ref", start_ns)


# ---------------------------------------------------------- uid/gid/umask

def test_uid_gid_umask_options(tmp_path):
    lib.build_rich_tree(tmp_path / "src", Caps(fifo=False))
    shard = lib.gnu_tar_create(tmp_path / "u.tar", tmp_path / "src",
                               sorted(os.listdir(tmp_path / "src")), "posix")
    start_ns = lib.extract_reference_ok([shard], tmp_path / "ref")
    ref_s = lib.full_snapshot(tmp_path / "ref", with_digest=False)
    m = tmp_path / "mnt"
    with lib.mounted(shard, m, "-o", "uid=4321,gid=8765,umask=027"):
        mnt_s = lib.full_snapshot(m, with_digest=True)
        root = os.stat(m)
    assert set(mnt_s) == set(ref_s)
    bad = []
    for rel, (st, _) in mnt_s.items():
        rst = ref_s[rel][0]
        if (st.st_uid, st.st_gid) != (4321, 8765):
            bad.append("%r owner %d:%d" % (rel, st.st_uid, st.st_gid))
        t = lib.ftype(st.st_mode)
        if t == "f" or (t == "d" and rst.st_mtime_ns < start_ns):
            want = (rst.st_mode & 0o7777) & ~0o027
            if st.st_mode & 0o7777 != want:
                bad.append("%r mode %o, want %o" % (rel, st.st_mode & 0o7777, want))
    assert (root.st_uid, root.st_gid) == (4321, 8765)
    assert not bad, bad
    # umask alone: owners stay those of the archive
    with lib.mounted(shard, m, "-o", "umask=0222"):
        for rel in (b"modes/m0755", b"modes/m4755", b"owners/u1234"):
            st = os.lstat(os.path.join(os.fsencode(m), rel))
            rst = ref_s[rel][0]
            assert st.st_mode & 0o7777 == (rst.st_mode & 0o7777) & ~0o222
            assert (st.st_uid, st.st_gid) == (rst.st_uid, rst.st_gid)


# -------------------------------------------------------- inode stability

def test_inode_numbers_stable_across_remounts(tmp_path):
    lib.build_rich_tree(tmp_path / "srcA", Caps())
    lib.build_overlay_tree(tmp_path / "srcB", Caps())
    a = lib.gnu_tar_create(tmp_path / "a.tar", tmp_path / "srcA",
                           sorted(os.listdir(tmp_path / "srcA")), "gnu")
    b = lib.gnu_tar_create(tmp_path / "b.tar", tmp_path / "srcB",
                           sorted(os.listdir(tmp_path / "srcB")), "gnu")
    arg = "%s,%s" % (a, b)
    m = tmp_path / "mnt"
    with lib.mounted(arg, m):
        first = {rel: st.st_ino for rel, (st, _) in
                 lib.full_snapshot(m, with_digest=False).items()}
    # second mount: visit the tree in another order (reverse), so numbers
    # cannot come from lookup order
    with lib.mounted(arg, m):
        second = {}
        for rel in sorted(first, reverse=True):
            second[rel] = os.lstat(os.path.join(os.fsencode(m), rel)).st_ino
    assert first == second
    assert len(set(first.values())) == len(first) - 2  # hard/link1, zz_link2


@pytest.mark.parametrize("writer", ["pytarfile-pax", "pytarfile-gnu",
                                    "gnutar-gnu", "gnutar-posix"])
def test_long_name_whose_truncated_header_name_ends_with_slash(tmp_path, writer):
    """A long name (pax 'path' / GNU 'L') whose first 100 bytes end in '/':
    the 100-byte name field of the ustar header then looks like a
    directory name, but the member is a regular file (and hard links to
    it are hard links to a file)."""
    src = os.fsencode(tmp_path / "src")
    comp = b"d" * 99                       # 99 bytes + '/' = 100
    names = [comp + b"/file.txt",
             comp + b"/" + b"e" * 99 + b"/" + b"deeper.bin",
             b"/".join([b"%02d" % i + b"x" * 97 for i in range(4)]) + b"/f"]
    for i, n in enumerate(names):
        lib.write_file(os.path.join(src, n), b"regular file %d\n" % i,
                       mtime_ns=T0_NS + i)
    os.link(os.path.join(src, names[0]), os.path.join(src, b"hardlink"))
    lib.finish_dirs(src)
    out = tmp_path / "slash.tar"
    members = sorted(os.listdir(src))
    tool, fmt = writer.split("-")
    if tool == "gnutar":
        lib.gnu_tar_create(out, src, members, fmt)
    else:
        lib.py_tar_create(out, src, members,
                          {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT}[fmt])
    _, mnt_s, _, _ = lib.check_mount_against_tar(
        [out], tmp_path / "mnt", tmp_path / "ref")
    for n in names:
        assert lib.ftype(mnt_s[n][0].st_mode) == "f"


def test_member_paths_starting_with_dot_shardfs(tmp_path):
    """/.shardfs belongs to the control directory: members under it are
    skipped with a warning naming the shard and offset (they could never be
    reached), while names that merely start with '.shardfs' or sit deeper
    are ordinary members."""
    s1 = py_shard(tmp_path / "s1.tar", [
        (".shardfs/stats", "f", {"data": b"a member, not the control file\n"}),
        (".shardfs/own.txt", "f", {"data": b"own\n"}),
        (".shardfsx", "f", {"data": b"x\n"}),
        ("dir/.shardfs", "f", {"data": b"nested\n"}),
    ])
    m = tmp_path / "mnt"
    with lib.mounted(str(s1), m) as proc:
        assert sorted(os.listdir(m)) == [".shardfsx", "dir"]
        assert open(m / ".shardfsx", "rb").read() == b"x\n"
        assert open(m / "dir" / ".shardfs", "rb").read() == b"nested\n"
        assert json.load(open(m / ".shardfs" / "stats"))["skipped"] == 2
        assert not os.path.exists(m / ".shardfs" / "own.txt")
    warnings = [l for l in proc.stderr.splitlines() if "reserved" in l]
    assert len(warnings) == 2 and all(str(s1) in l and "offset" in l
                                      for l in warnings), proc.stderr


def test_read_paths_mmap_sendfile_and_errnos(tmp_path):
    """Other ways to read (mmap, sendfile, cp) give tar -x's bytes, and the
    usual errors come back for reads that make no sense."""
    import mmap
    lib.build_rich_tree(tmp_path / "src", Caps(fifo=False))
    shard = lib.gnu_tar_create(tmp_path / "r.tar", tmp_path / "src",
                               sorted(os.listdir(tmp_path / "src")), "gnu")
    ref = tmp_path / "ref"
    lib.extract_reference_ok([shard], ref)
    m = tmp_path / "mnt"
    rel = os.path.join("big", "one_mib_plus_7.bin")
    want = open(ref / rel, "rb").read()
    with lib.mounted(shard, m):
        with open(m / rel, "rb") as fh:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                assert mm[:] == want
                assert mm[len(want) - 3:] == want[-3:]
        out = tmp_path / "sendfile.out"
        with open(m / rel, "rb") as src, open(out, "wb") as dst:
            sent = 0
            while sent < len(want):
                n = os.sendfile(dst.fileno(), src.fileno(), sent, 1 << 16)
                assert n > 0
                sent += n
        assert open(out, "rb").read() == want
        r = lib.run_cmd(["cp", "-a", str(m / "dir1"), str(tmp_path / "copy")])
        assert r.returncode == 0, r
        assert lib.file_digest(tmp_path / "copy" / "sub" / "deep.txt") == \
            lib.file_digest(ref / "dir1" / "sub" / "deep.txt")
        with pytest.raises(IsADirectoryError):
            open(m / "dir1", "rb").read()
        with pytest.raises(NotADirectoryError):
            os.listdir(m / "dir1" / "a.txt")
        with pytest.raises(NotADirectoryError):
            os.stat(m / "dir1" / "a.txt" / "x")
        with pytest.raises(FileNotFoundError):
            os.stat(m / "dir1" / "nope")
        with pytest.raises(OSError) as e:
            os.readlink(m / "dir1" / "a.txt")
        assert e.value.errno == errno.EINVAL
        # '.' and '..' inside the mount resolve as in any directory
        assert os.stat(m / "dir1" / "sub" / ".." / "a.txt").st_ino == \
            os.stat(m / "dir1" / "a.txt").st_ino
        assert os.path.samefile(m / "dir1" / "..", m)


# ----------------------------------------------- remounts after changes
#
# Whatever shardfs keeps between mounts (it may save an index next to the
# shards), a remount must show the shards as they are now.

def _mtime_preserving_rewrite(path, members):
    st = os.stat(path)
    py_shard(path, members)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return st


def test_remount_after_shard_rewritten_same_size_and_mtime(tmp_path):
    a = tmp_path / "a.tar"
    py_shard(a, [("x.txt", "f", {"data": b"AAAA version one\n"}),
                 ("y.txt", "f", {"data": b"yyyy\n"})])
    b = py_shard(tmp_path / "b.tar", [("z.txt", "f", {"data": b"z\n"})])
    arg = "%s,%s" % (a, b)
    with lib.mounted(arg, tmp_path / "mnt"):
        with open(tmp_path / "mnt" / "x.txt", "rb") as fh:
            assert fh.read() == b"AAAA version one\n"
    before = _mtime_preserving_rewrite(a, [
        ("x.txt", "f", {"data": b"BBBB version two\n"}),   # same length
        ("y.txt", "f", {"data": b"YYYY\n", "mode": 0o600})])
    after = os.stat(a)
    assert (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)
    start_ns = lib.extract_reference_ok([a, b], tmp_path / "ref")
    with lib.mounted(arg, tmp_path / "mnt"):
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)


def test_remount_after_members_appended(tmp_path):
    src = tmp_path / "src"
    lib.write_file(os.path.join(src, "one.txt"), b"one\n")
    a = lib.gnu_tar_create(tmp_path / "a.tar", src, ["one.txt"], "gnu")
    with lib.mounted(a, tmp_path / "mnt"):
        assert os.listdir(tmp_path / "mnt") == ["one.txt"]
    lib.write_file(os.path.join(src, "two.txt"), b"two\n")
    lib.write_file(os.path.join(src, "one.txt"), b"one, appended again\n",
                   mtime_ns=T0_NS + 5)
    r = lib.run_cmd([lib.GNU_TAR, "-r", "--format=gnu", "-f", str(a), "-C",
                     str(src), "two.txt", "one.txt"])
    assert r.returncode == 0, r
    start_ns = lib.extract_reference_ok([a], tmp_path / "ref")
    with lib.mounted(a, tmp_path / "mnt"):
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)


def test_remount_with_other_shards_after_the_same_first_shard(tmp_path):
    a = py_shard(tmp_path / "a.tar", [("common.txt", "f", {"data": b"a\n"}),
                                      ("a.txt", "f", {"data": b"a only\n"})])
    b = py_shard(tmp_path / "b.tar", [("common.txt", "f", {"data": b"from b\n"})])
    c = py_shard(tmp_path / "c.tar", [("common.txt", "f", {"data": b"from c!\n"}),
                                      ("c.txt", "f", {"data": b"c only\n"})])
    with lib.mounted("%s,%s" % (a, b), tmp_path / "mnt"):
        with open(tmp_path / "mnt" / "common.txt", "rb") as fh:
            assert fh.read() == b"from b\n"
    start_ns = lib.extract_reference_ok([a, c], tmp_path / "ref")
    with lib.mounted("%s,%s" % (a, c), tmp_path / "mnt"):
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
    # and the single first shard on its own
    start_ns = lib.extract_reference_ok([a], tmp_path / "ref1")
    with lib.mounted(str(a), tmp_path / "mnt"):
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref1", start_ns)
