# SPDX-License-Identifier: Apache-2.0
"""Every TAR dialect the issue lists, mounted and compared with `tar -x`.

Writers: GNU tar (--format v7, oldgnu, gnu, ustar, posix), bsdtar
(libarchive: ustar, pax, paxr, gnutar, v7) and Python's tarfile
(GNU_FORMAT, PAX_FORMAT, USTAR_FORMAT).  Each dialect gets the richest tree
it can store (see Caps in shardfs_testlib), split over two shards, the
second one replacing some files of the first.  The mount must equal GNU
tar's extraction of both shards, in order, into one directory: same paths,
types, sha256 of every file, sizes, permission bits, mtimes (ns where the
format carries them), owners, symlink targets and hard-link groups.

Sparse members: GNU tar --sparse with --format=posix and --sparse-version
0.0, 0.1 and 1.0, --format=gnu and --format=oldgnu, and bsdtar's pax
(which writes GNU.sparse 1.0 by itself); compared byte for byte with the
extraction.
"""
import os
import shutil
import subprocess
import tarfile

import pytest

import shardfs_testlib as lib
from shardfs_testlib import Caps

LIMITED_V7 = dict(max_path=99, max_link=99, big_ids=False, fifo=False)
LIMITED_USTAR = dict(max_path=255, max_name=100, max_link=100, big_ids=False)

# dialect id -> (writer, format, capabilities)
DIALECTS = {
    "gnutar-v7": ("gnu", "v7", Caps(**LIMITED_V7)),
    "gnutar-oldgnu": ("gnu", "oldgnu", Caps()),
    "gnutar-gnu": ("gnu", "gnu", Caps()),
    "gnutar-ustar": ("gnu", "ustar", Caps(**LIMITED_USTAR)),
    "gnutar-posix": ("gnu", "posix", Caps()),
    "bsdtar-ustar": ("bsd", "ustar", Caps(**LIMITED_USTAR)),
    "bsdtar-pax": ("bsd", "pax", Caps()),
    "bsdtar-paxr": ("bsd", "paxr", Caps()),
    "bsdtar-gnutar": ("bsd", "gnutar", Caps()),
    "bsdtar-v7": ("bsd", "v7", Caps(**LIMITED_V7)),
    "pytarfile-gnu": ("py", tarfile.GNU_FORMAT, Caps()),
    "pytarfile-pax": ("py", tarfile.PAX_FORMAT, Caps()),
    "pytarfile-ustar": ("py", tarfile.USTAR_FORMAT, Caps(**LIMITED_USTAR)),
}


def make_shard(writer, fmt, src, out, members=None, extra=()):
    if members is None:
        members = sorted(os.listdir(os.fsencode(src)))
    if writer == "gnu":
        return lib.gnu_tar_create(out, src, members, fmt, extra)
    if writer == "bsd":
        return lib.bsdtar_create(out, src, members, fmt, extra)
    return lib.py_tar_create(out, src, members, fmt)


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_dialect_two_shards_match_tar_x(tmp_path, dialect):
    writer, fmt, caps = DIALECTS[dialect]
    lib.build_rich_tree(tmp_path / "srcA", caps, seed=dialect)
    lib.build_overlay_tree(tmp_path / "srcB", caps)
    a = make_shard(writer, fmt, tmp_path / "srcA", tmp_path / "a.tar")
    b = make_shard(writer, fmt, tmp_path / "srcB", tmp_path / "b.tar")
    proc, mnt_s, ref_s, _ = lib.check_mount_against_tar(
        [a, b], tmp_path / "mnt", tmp_path / "ref")
    # the tree really holds what the generator made (guards the test itself)
    assert b"sizes/s00513.bin" in mnt_s and b"dir1/b.txt" in mnt_s
    summary = lib.parse_summary(proc.stderr)
    assert summary is not None, "no summary line on stderr: %r" % proc.stderr
    assert summary["shards"] == 2


@pytest.mark.parametrize("dialect", ["gnutar-posix", "gnutar-gnu",
                                     "bsdtar-pax", "pytarfile-pax"])
def test_dialect_single_shard_exact_metadata(tmp_path, dialect):
    """One shard only, so no directory is touched by a later extraction:
    every explicit directory's mode and mtime are compared too."""
    writer, fmt, caps = DIALECTS[dialect]
    lib.build_rich_tree(tmp_path / "src", caps, seed=dialect)
    a = make_shard(writer, fmt, tmp_path / "src", tmp_path / "a.tar")
    _, mnt_s, ref_s, _ = lib.check_mount_against_tar(
        [a], tmp_path / "mnt", tmp_path / "ref")
    # PAX dialects keep sub-second mtimes: make sure the comparison really
    # compared some (a reference at whole seconds would hide ns bugs)
    if dialect in ("gnutar-posix", "bsdtar-pax", "pytarfile-pax"):
        assert any(st.st_mtime_ns % 10**9 for st, _ in ref_s.values()
                   if lib.ftype(st.st_mode) == "f")


def test_dot_slash_member_names_gnu_tar(tmp_path):
    """`tar -C src .` stores './' and './x' names (and a './' root member)."""
    caps = Caps()
    lib.build_rich_tree(tmp_path / "src", caps)
    shard = lib.gnu_tar_create(tmp_path / "dot.tar", tmp_path / "src", ["."],
                               "gnu")
    names = [n for n, _, _ in lib.member_offsets(shard)]
    assert any(n.startswith("./") for n in names)
    lib.check_mount_against_tar([shard], tmp_path / "mnt", tmp_path / "ref")


SPARSE_VARIANTS = {
    "posix-0.0": ("gnu", "posix", ["--sparse", "--sparse-version=0.0"]),
    "posix-0.1": ("gnu", "posix", ["--sparse", "--sparse-version=0.1"]),
    "posix-1.0": ("gnu", "posix", ["--sparse", "--sparse-version=1.0"]),
    "gnu": ("gnu", "gnu", ["--sparse"]),
    "oldgnu": ("gnu", "oldgnu", ["--sparse"]),
    "bsdtar-pax": ("bsd", "pax", []),
}


@pytest.mark.parametrize("variant", sorted(SPARSE_VARIANTS))
def test_sparse_members_match_extraction(tmp_path, variant):
    writer, fmt, extra = SPARSE_VARIANTS[variant]
    lib.build_sparse_tree(tmp_path / "src", seed=variant)
    # a dense shard before and after, so offsets past sparse members count
    lib.write_file(os.path.join(tmp_path, "pre", "pre.txt"), b"pre\n" * 300)
    pre = lib.gnu_tar_create(tmp_path / "0pre.tar", tmp_path / "pre",
                             ["pre.txt"], "gnu")
    shard = make_shard(writer, fmt, tmp_path / "src", tmp_path / "1sparse.tar",
                       extra=extra)
    with tarfile.open(shard) as t:
        assert any(m.issparse() for m in t.getmembers()), \
            "the writer did not produce sparse members (test setup)"
    # the shard must be smaller than the files it holds: really sparse
    total = sum(os.path.getsize(os.path.join(tmp_path, "src", n))
                for n in os.listdir(tmp_path / "src"))
    assert os.path.getsize(shard) < total // 4
    _, mnt_s, _, _ = lib.check_mount_against_tar(
        [pre, shard], tmp_path / "mnt", tmp_path / "ref")
    # reads at odd offsets straddling data/hole boundaries
    src = tmp_path / "ref" / "sp_unaligned"
    with lib.mounted("%s,%s" % (pre, shard), tmp_path / "mnt"):
        with open(src, "rb") as s, \
                open(tmp_path / "mnt" / "sp_unaligned", "rb") as m:
            for off, ln in ((4090, 20), (69999, 5002), (74999, 2),
                            ((1 << 20) + 299, 100), (0, 1 << 21)):
                assert os.pread(m.fileno(), ln, off) == \
                    os.pread(s.fileno(), ln, off), (off, ln)


def test_comparison_detects_every_kind_of_difference(tmp_path):
    """Self-check of the harness: compare_trees must notice a changed byte,
    mode, mtime, owner, symlink target, hard-link split, missing and
    extra entries (otherwise every test above could pass vacuously)."""
    caps = Caps(fifo=False)
    lib.build_rich_tree(tmp_path / "src", caps)
    shard = make_shard("gnu", "posix", tmp_path / "src", tmp_path / "a.tar")
    ref = tmp_path / "ref"
    start_ns = lib.extract_reference_ok([shard], ref)
    mnt = tmp_path / "mnt"
    mutations = {
        "sha256 differs": lambda: open(ref / "dir1" / "a.txt", "r+b").write(b"A"),
        "mode": lambda: os.chmod(ref / "modes" / "m0640", 0o641),
        "mtime_ns": lambda: os.utime(ref / "dir1" / "a.txt", ns=(0, lib.T0_NS + 1)),
        "owner": lambda: os.chown(ref / "owners" / "u1234", 1234, 1),
        "symlink target": lambda: (os.unlink(ref / "links" / "rel"),
                                   os.symlink("../elsewhere", ref / "links" / "rel")),
        "shared with an unrelated entry": lambda: (os.unlink(ref / "hard" / "link1"),
                                    shutil.copy2(ref / "hard" / "orig",
                                                 ref / "hard" / "link1")),
        "missing in mount": lambda: open(ref / "new.txt", "wb").close(),
        "extra in mount": lambda: os.unlink(ref / "name with spaces.txt"),
        "size": lambda: open(ref / "sizes" / "s00000.bin", "wb").write(b"z"),
    }
    with lib.mounted(shard, mnt):
        lib.compare_trees(mnt, ref, start_ns)          # identical: passes
        for what, mutate in mutations.items():
            shutil.rmtree(ref)
            lib.extract_reference_ok([shard], ref)
            mutate()
            with pytest.raises(AssertionError, match=what):
                lib.compare_trees(mnt, ref, start_ns)


def test_regular_member_named_with_a_slash_and_data(tmp_path):
    """A type-0 member "foo/" with 2 bytes of data, then "bar": GNU tar
    lists both and extracts a directory foo and the file bar; so must the
    mount (it refused the shard: "offset 512: header checksum mismatch")."""
    def header(name, size):
        ti = tarfile.TarInfo(name)
        ti.size, ti.type, ti.mtime = size, tarfile.REGTYPE, 1700000000
        return ti.tobuf(format=tarfile.USTAR_FORMAT)
    shard = tmp_path / "slash.tar"
    shard.write_bytes(header("foo/", 2) + b"ab".ljust(512, b"\0") +
                      header("bar", 5) + b"hello".ljust(512, b"\0") + b"\0" * 1024)
    listing = subprocess.run(["tar", "tf", str(shard)], capture_output=True,
                             text=True, check=True).stdout
    assert listing == "foo/\nbar\n"
    # GNU tar -x says "Skipping to next header" (exit 2) but extracts both
    lib.check_mount_against_tar([shard], tmp_path / "mnt", tmp_path / "ref",
                                allow_tar_errors=True)
    with lib.mounted(str(shard), tmp_path / "mnt"):
        assert sorted(os.listdir(tmp_path / "mnt")) == ["bar", "foo"]
        assert os.path.isdir(tmp_path / "mnt" / "foo")
        assert (tmp_path / "mnt" / "bar").read_bytes() == b"hello"
