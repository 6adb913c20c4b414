# SPDX-License-Identifier: Apache-2.0
"""Test data: files with fixed mtimes and contents, trees rich in every
kind of entry, shards written by GNU tar, bsdtar and Python's tarfile,
and the offsets of their headers and members.
shardfs_testlib re-exports all of it.
"""
import hashlib
import os
import tarfile

from testlib_compare import BSDTAR, GNU_TAR
from testlib_mount import run_cmd


# Fixed timestamps (ns) used by the data generators, so that mtimes in the
# shards never look like "now" (a directory whose reference mtime is later
# than the start of the extraction was created or touched by tar itself).
T0_NS = 1_600_000_000_123_456_789


def set_mtime(path, ns, follow=False):
    os.utime(path, ns=(ns, ns), follow_symlinks=follow)


def write_file(path, data, mode=0o644, mtime_ns=T0_NS, uid=None, gid=None):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, gid if gid is not None else uid)
    set_mtime(path, mtime_ns)


def finish_dirs(root, mtime_ns=T0_NS):
    """Set the mtime of every directory under ROOT (deepest first), after
    the files were written, so directories carry fixed mtimes too."""
    root_b = os.fsencode(root)
    for dirpath, _, _ in sorted(os.walk(root_b), key=lambda t: -len(t[0])):
        if dirpath != root_b:
            set_mtime(dirpath, mtime_ns)


def deterministic_bytes(seed, n):
    """N pseudo-random bytes derived from SEED (fast, reproducible)."""
    out = bytearray()
    counter = 0
    seed_b = repr(seed).encode()
    while len(out) < n:
        out += hashlib.sha256(seed_b + counter.to_bytes(8, "little")).digest() * 64
        counter += 1
    return bytes(out[:n])


def gnu_tar_create(out, src, members, fmt, extra=()):
    """GNU tar -c --format=FMT of MEMBERS (relative to SRC) into OUT."""
    r = run_cmd([GNU_TAR, "-c", "--format=" + fmt, "--sort=name", *extra,
                 "-f", os.fspath(out), "-C", os.fspath(src),
                 *[os.fsencode(m) for m in members]])
    assert r.returncode == 0, "tar -c --format=%s failed: %r" % (fmt, r)
    return out


def bsdtar_create(out, src, members, fmt, extra=()):
    r = run_cmd([BSDTAR, "-c", "--format", fmt, *extra,
                 "-f", os.fspath(out), "-C", os.fspath(src),
                 *[os.fsencode(m) for m in members]])
    assert r.returncode == 0, "bsdtar -c --format %s failed: %r" % (fmt, r)
    return out


def py_tar_create(out, src, members, fmt):
    """Python tarfile (FMT = tarfile.GNU_FORMAT / PAX_FORMAT / USTAR_FORMAT)."""
    src_b = os.fsencode(src)
    with tarfile.open(os.fspath(out), "w", format=fmt,
                      encoding="utf-8", errors="surrogateescape") as t:
        for m in members:
            m_s = os.fsdecode(m)
            t.add(os.fsdecode(os.path.join(src_b, os.fsencode(m))),
                  arcname=m_s, recursive=True)
    return out


def member_offsets(shard):
    """[(name, header offset, TarInfo)] of a shard, as Python reads it
    (the offset is that of the first header of the member, extended
    headers included)."""
    with tarfile.open(os.fspath(shard), "r:", encoding="utf-8",
                      errors="surrogateescape") as t:
        return [(m.name, m.offset, m) for m in t.getmembers()]


def header_offsets(shard):
    """name -> set of acceptable "bad header" offsets of that member: the
    offset of its first header (a pax 'x' or GNU 'L'/'K' header when the
    member has one) and the offset of its own ustar header."""
    out = {}
    for name, off, ti in member_offsets(shard):
        out.setdefault(name, set()).update({off, ti.offset_data - 512})
    return out


def tar_checksum(header):
    h = bytearray(header[:512])
    h[148:156] = b" " * 8
    return sum(h)


BOUNDARY_SIZES = [0, 1, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097,
                  10240, 65537]


class Caps:
    """What an archive format can store (so every format gets the richest
    tree it can represent, and the writer never refuses a member)."""

    def __init__(self, max_name=None, max_path=None, max_link=None,
                 big_ids=True, fifo=True, non_utf8=True, hardlinks=True,
                 symlinks=True):
        self.max_name = max_name      # longest single component
        self.max_path = max_path      # longest member path (bytes)
        self.max_link = max_link      # longest symlink/hard link target
        self.big_ids = big_ids        # uid/gid > 2097151 (7 octal digits)
        self.fifo = fifo
        self.non_utf8 = non_utf8
        self.hardlinks = hardlinks
        self.symlinks = symlinks

    def path_ok(self, rel):
        rel = os.fsencode(rel)
        if self.max_path is not None and len(rel) + 1 > self.max_path:
            return False   # +1: room for the trailing '/' of a directory
        if self.max_name is not None and any(
                len(c) > self.max_name for c in rel.split(b"/")):
            return False
        return True

    def link_ok(self, target):
        return self.max_link is None or len(os.fsencode(target)) <= self.max_link


def _j(root, rel):
    return os.path.join(os.fsencode(root), os.fsencode(rel))


def build_rich_tree(root, caps, seed="rich", base_ns=T0_NS):
    """A tree exercising every member kind the format can hold."""
    os.makedirs(root, exist_ok=True)
    n = [0]

    def ns():
        n[0] += 1
        return base_ns + n[0] * 1_000_003_917   # distinct s and ns parts

    def f(rel, data, mode=0o644, uid=None, gid=None):
        if not caps.path_ok(rel):
            return
        write_file(_j(root, rel), data, mode=mode, mtime_ns=ns(), uid=uid,
                   gid=gid)

    for size in BOUNDARY_SIZES:
        f("sizes/s%05d.bin" % size, deterministic_bytes((seed, size), size))
    f("big/one_mib_plus_7.bin", deterministic_bytes((seed, "big"), (1 << 20) + 7))
    f("dir1/sub/deep.txt", b"deep\n")
    f("dir1/a.txt", b"a\n")
    f("name with spaces.txt", b"spaces\n")
    f("\u00fcn\u00efc\u00f6d\u00e9-\u65e5\u672c.txt", "unicode\n".encode())
    if caps.non_utf8:
        f(b"bytes-\xff\xfe-caf\xe9.bin", b"latin1 and junk bytes\n")
    for mode in (0o600, 0o640, 0o755, 0o400, 0o444, 0o700, 0o4755, 0o2750,
                 0o1755, 0o000):
        f("modes/m%04o" % mode, b"mode %o\n" % mode, mode=mode)
    f("owners/u1234", b"owned\n", uid=1234, gid=5678)
    f("owners/u0", b"root\n", uid=0, gid=0)
    if caps.big_ids:
        f("owners/ubig", b"big ids\n", uid=3_000_000, gid=3_000_001)
    # directories with their own modes (empty, private, sticky)
    for rel, mode in (("emptydir", 0o750), ("private", 0o700),
                      ("sticky", 0o1777), ("dir1", 0o755)):
        if caps.path_ok(rel):
            os.makedirs(_j(root, rel), exist_ok=True)
            os.chmod(_j(root, rel), mode)
    f("private/secret.txt", b"secret\n", mode=0o600)
    if caps.symlinks:
        os.makedirs(_j(root, "links"), exist_ok=True)
        for rel, target in (("links/rel", "../sizes/s00513.bin"),
                            ("links/abs", "/etc/hostname"),
                            ("links/dangling", "no/such/target"),
                            ("links/todir", "../dir1"),
                            ("links/dot", "."),
                            ("links/selfloop", "selfloop")):
            if caps.link_ok(target):
                os.symlink(target, _j(root, rel))
                set_mtime(_j(root, rel), ns())
    if caps.hardlinks:
        f("hard/orig", b"hard linked content\n" * 50, mode=0o640)
        os.link(_j(root, "hard/orig"), _j(root, "hard/link1"))
        os.link(_j(root, "hard/orig"), _j(root, "hard/zz_link2"))
    if caps.max_path is None and caps.max_name is None:
        long_comp = "L" * 150
        f(long_comp + "/" + "n" * 180 + ".txt", b"long path\n")
        if caps.symlinks:
            os.symlink("t" * 300, _j(root, "links/longtarget"))
    if caps.fifo:
        os.mkfifo(_j(root, "fifo"))
    finish_dirs(root, base_ns + 7_777_777_777)


def build_overlay_tree(root, caps, base_ns=T0_NS + 86400 * 10**9):
    """A second shard for the rich tree: new files in an existing directory,
    files replacing files of the first shard (different size, mode, mtime),
    a new directory."""
    os.makedirs(root, exist_ok=True)

    def f(rel, data, mode=0o644, k=0):
        if caps.path_ok(rel):
            write_file(_j(root, rel), data, mode=mode, mtime_ns=base_ns + k)

    f("sizes/s00513.bin", b"replaced by the second shard\n", mode=0o600, k=1)
    f("dir1/b.txt", b"b from shard 2\n", k=2)
    f("dir1/sub/deep.txt", b"deep, second version\n", mode=0o664, k=3)
    f("shard2only/x.txt", b"x\n", k=4)
    os.makedirs(_j(root, "emptydir2"), exist_ok=True)
    finish_dirs(root, base_ns + 99)


def build_sparse_tree(root, seed="sparse", base_ns=T0_NS):
    """Sparse files of several shapes plus a dense file after them."""
    os.makedirs(root, exist_ok=True)
    k = [0]

    def sparse(rel, size, chunks):
        path = _j(root, rel)
        with open(path, "wb") as fh:
            fh.truncate(size)
            for off, ln in chunks:
                fh.seek(off)
                fh.write(deterministic_bytes((seed, rel, off), ln))
        os.chmod(path, 0o644)
        k[0] += 1
        set_mtime(path, base_ns + k[0] * 1_000_000_007)

    mib = 1 << 20
    sparse("sp_middle", 4 * mib, [(mib, 10_000)])
    sparse("sp_trailing_hole", 3 * mib, [(0, 100)])
    sparse("sp_all_hole", 5 * mib, [])
    sparse("sp_end_data", 2 * mib, [(2 * mib - 1000, 1000)])
    sparse("sp_many", 8 * mib, [(i * 80 * 1024 + 17, 3000) for i in range(100)])
    sparse("sp_unaligned", 1 * mib + 333, [(4097, 3), (70000, 5000),
                                            (mib + 300, 33)])
    sparse("sp_dense_start", 2 * mib, [(0, 300_000), (1_500_000, 10)])
    write_file(_j(root, "zz_after_sparse.txt"), b"after the sparse members\n",
               mtime_ns=base_ns + 999)


def tar_from_members(path, members, fmt=None):
    """Write a tar at PATH from MEMBERS: (name, data bytes) or dicts with
    name, data and optional mode, uid, gid, mtime, type (tarfile type
    constant) and linkname.  Returns {name: (offset_data, size)} as laid
    out in the written tar (a member's data ends, padded to a block, where
    the writer stands after it: no second pass reads the headers back)."""
    import io
    fmt = tarfile.PAX_FORMAT if fmt is None else fmt
    layout = {}
    with tarfile.open(os.fspath(path), "w", format=fmt) as t:
        for m in members:
            if not isinstance(m, dict):
                m = {"name": m[0], "data": m[1]}
            ti = tarfile.TarInfo(m["name"])
            ti.type = m.get("type", tarfile.REGTYPE)
            ti.mode = m.get("mode", 0o644)
            ti.uid = m.get("uid", 0)
            ti.gid = m.get("gid", 0)
            ti.mtime = m.get("mtime", T0_NS // 10**9)
            ti.linkname = m.get("linkname", "")
            data = m.get("data", b"")
            if ti.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
                blocks = (ti.size + tarfile.BLOCKSIZE - 1) // tarfile.BLOCKSIZE
                layout[ti.name] = (t.offset - blocks * tarfile.BLOCKSIZE, ti.size)
            else:
                t.addfile(ti)
    return layout
