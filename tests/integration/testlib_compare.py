# SPDX-License-Identifier: Apache-2.0
"""Comparing a mount with GNU tar: extract_reference() runs `tar -x` on
each shard, in shard order, into one directory, and compare_trees()
checks a mount against that directory entry by entry (paths, types,
sha256 of contents, sizes, permission bits, mtimes, owners, symlink
targets, hard-link groups); reading members and the errno a path gives.
shardfs_testlib re-exports all of it.
"""
import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time

from testlib_mount import mounted, run_cmd


GNU_TAR = "tar"
BSDTAR = "bsdtar"


def file_digest(path, chunk=1 << 20):
    """sha256 of PATH's bytes, read in CHUNKs with os.read (a buffered file
    object cost more than the digest of the small files of most trees)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            b = os.read(fd, chunk)
            if not b:
                return h.hexdigest()
            h.update(b)
    finally:
        os.close(fd)


def extract_reference(shards, dest, extra=()):
    """`tar -x` every shard, in order, into DEST (as root: owners, modes and
    mtimes are restored; --numeric-owner so owners are the numeric ids of
    the archive).  Returns (start_ns, [Result...]).  Per-shard failures are
    not fatal: GNU tar skips a bad member and goes on; callers decide."""
    os.makedirs(dest, exist_ok=True)
    # file timestamps come from the kernel's coarse clock, which may lag
    # time.time_ns() by a few ms: take a margin (test data never carries
    # mtimes within a second of now)
    start_ns = time.time_ns() - 1_000_000_000
    results = []
    for shard in shards:
        results.append(run_cmd([GNU_TAR, "-x", "--numeric-owner", *extra,
                                "-f", os.fspath(shard), "-C",
                                os.fspath(dest)]))
    # let the clock move past every mtime tar set to "now"
    time.sleep(0.01)
    return start_ns, results


def extract_reference_concatenated(shards, dest):
    """Same reference as extract_reference for large shard sets, with one
    tar process instead of one per shard: the shards are streamed, in
    order, into `tar -x --ignore-zeros` (which reads past each shard's
    end-of-archive blocks into the next shard).  Only for shard sets without
    explicit directory members, where per-shard directory-metadata
    restoration cannot make a difference."""
    os.makedirs(dest, exist_ok=True)
    start_ns = time.time_ns() - 1_000_000_000
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([GNU_TAR, "-x", "--ignore-zeros",
                                 "--numeric-owner", "-f", "-", "-C",
                                 os.fspath(dest)],
                                stdin=subprocess.PIPE, stderr=err)
        for shard in shards:
            with open(shard, "rb") as f:
                shutil.copyfileobj(f, proc.stdin)
        proc.stdin.close()
        rc = proc.wait(timeout=300)
        err.seek(0)
        assert rc == 0, "tar -x --ignore-zeros failed: %r" % err.read()
    time.sleep(0.01)
    return start_ns


def extract_reference_ok(shards, dest, extra=()):
    start_ns, results = extract_reference(shards, dest, extra)
    for r in results:
        assert r.returncode == 0, "reference tar -x failed: %r" % (r,)
    return start_ns


def tree_snapshot(root, with_digest=True):
    """Map relative path (bytes) -> tuple describing the entry: type,
    permission bits, size, mtime (s), symlink target or content digest."""
    out = {}
    root_b = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(root_b):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root_b)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", st.st_mode & 0o7777, int(st.st_mtime))
            else:
                digest = file_digest(full) if with_digest else None
                out[rel] = ("f", st.st_mode & 0o7777, st.st_size,
                            int(st.st_mtime), digest)
    return out


def ftype(mode):
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISLNK(mode):
        return "l"
    return "special"


BIG_FILE = 256 << 20


def full_snapshot(root, with_digest=True):
    """Map relative path (bytes) -> (os.stat_result, extra) where extra is
    the sha256 of a regular file, the target (bytes) of a symlink, the
    sorted list of names of a directory.  Never follows symlinks.  Files
    larger than BIG_FILE get no digest: compare_trees compares them
    region by region (see compare_big_file)."""
    out = {}
    root_b = os.fsencode(root)
    # (directory, its sorted names): each directory is listed once
    stack = [(b"", sorted(os.listdir(root_b)))]
    while stack:
        rel_dir, names = stack.pop()
        for name in names:
            rel = os.path.join(rel_dir, name) if rel_dir else name
            full = os.path.join(root_b, rel)
            st = os.lstat(full)
            t = ftype(st.st_mode)
            if t == "f":
                extra = file_digest(full) if with_digest and \
                    st.st_size <= BIG_FILE else None
            elif t == "l":
                extra = os.readlink(full)
            elif t == "d":
                extra = sorted(os.listdir(full))
                stack.append((rel, extra))
            else:
                extra = None
            out[rel] = (st, extra)
    return out


def _data_extents(fd, size):
    """Data extents [(start, end)] of FD (SEEK_DATA/SEEK_HOLE)."""
    out = []
    off = 0
    while off < size:
        try:
            start = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, min(end, size)))
        off = end
    return out


def compare_big_file(mpath, rpath, size, chunk=1 << 20):
    """Compare a huge (usually sparse) file without reading all of it
    through FUSE: every data extent of the reference (found with
    SEEK_DATA/SEEK_HOLE) is compared byte for byte, and in every hole
    the first, middle and last 64 KiB are checked to read as zeros from
    the mount, as well as the last 64 KiB of the file.  Returns a list of
    differences."""
    diffs = []
    with open(rpath, "rb") as r, open(mpath, "rb") as m:
        rfd, mfd = r.fileno(), m.fileno()
        data = _data_extents(rfd, size)
        probes = [(max(0, size - 65536), min(size, 65536))]
        prev = 0
        for start, end in data + [(size, size)]:
            if start > prev:     # a hole [prev, start)
                for off in (prev, (prev + start) // 2, max(prev, start - 65536)):
                    probes.append((off, min(65536, start - off)))
            for off in range(start, end, chunk):
                ln = min(chunk, end - off)
                if os.pread(mfd, ln, off) != os.pread(rfd, ln, off):
                    diffs.append("%r: bytes differ in [%d, %d)" % (rpath, off, off + ln))
                    return diffs
            prev = end
        for off, ln in probes:
            if ln > 0 and os.pread(mfd, ln, off) != os.pread(rfd, ln, off):
                diffs.append("%r: bytes differ in [%d, %d)" % (rpath, off, off + ln))
                return diffs
    return diffs


def attr_diffs(p, what, rst, mst, check_mode, check_mtime, check_owner):
    """The mode, mtime and owner differences of path P (WHAT: "dir " or
    "") between the reference's stat RST and the mount's MST."""
    out = []
    if check_mode and (rst.st_mode & 0o7777) != (mst.st_mode & 0o7777):
        out.append("%r: %smode %o, tar -x has %o"
                   % (p, what, mst.st_mode & 0o7777, rst.st_mode & 0o7777))
    if check_mtime and rst.st_mtime_ns != mst.st_mtime_ns:
        out.append("%r: %smtime_ns %d, tar -x has %d"
                   % (p, what, mst.st_mtime_ns, rst.st_mtime_ns))
    if check_owner and (rst.st_uid, rst.st_gid) != (mst.st_uid, mst.st_gid):
        out.append("%r: %sowner %d:%d, tar -x has %d:%d"
                   % (p, what, mst.st_uid, mst.st_gid, rst.st_uid, rst.st_gid))
    return out


def compare_trees(mnt, ref, ref_start_ns, *, check_owner=True,
                  check_mtime=True, check_mode=True, check_nlink=True,
                  ignore_special=True, ref_snapshot=None, max_report=40,
                  owner_exceptions=()):
    """Compare the mount MNT with the reference extraction REF.

    Directories whose reference mtime is at or after REF_START_NS were
    created (synthesized) or touched by tar during the extraction: for
    those only existence and type are compared.  Device nodes and FIFOs
    (which shardfs skips) are dropped from the reference when
    IGNORE_SPECIAL.  Returns the (mount, reference) snapshots; raises
    AssertionError listing the differences."""
    ref_s = ref_snapshot if ref_snapshot is not None else full_snapshot(ref)
    mnt_s = full_snapshot(mnt)
    diffs = []
    skipped_specials = {p for p, (st, _) in ref_s.items()
                        if ftype(st.st_mode) == "special"}
    if ignore_special:
        ref_paths = set(ref_s) - skipped_specials
    else:
        ref_paths = set(ref_s)
    mnt_paths = set(mnt_s)
    for p in sorted(ref_paths - mnt_paths):
        diffs.append("missing in mount: %r (%s)" % (p, ftype(ref_s[p][0].st_mode)))
    for p in sorted(mnt_paths - ref_paths):
        diffs.append("extra in mount: %r (%s)" % (p, ftype(mnt_s[p][0].st_mode)))
    for p in sorted(ref_paths & mnt_paths):
        rst, rx = ref_s[p]
        mst, mx = mnt_s[p]
        rt, mt = ftype(rst.st_mode), ftype(mst.st_mode)
        if rt != mt:
            diffs.append("%r: type %s in mount, %s in tar -x" % (p, mt, rt))
            continue
        if rt == "l":
            if rx != mx:
                diffs.append("%r: symlink target %r, tar -x has %r" % (p, mx, rx))
            continue
        if rt == "d":
            if rst.st_mtime_ns >= ref_start_ns:
                continue      # synthesized or touched by tar: type only
            diffs += attr_diffs(p, "dir ", rst, mst, check_mode, check_mtime,
                                check_owner)
            continue
        # regular file
        if rst.st_size != mst.st_size:
            diffs.append("%r: size %d, tar -x has %d" % (p, mst.st_size, rst.st_size))
        if rst.st_size > BIG_FILE or mst.st_size > BIG_FILE:
            if rst.st_size == mst.st_size:
                diffs += compare_big_file(os.path.join(os.fsencode(mnt), p),
                                          os.path.join(os.fsencode(ref), p),
                                          rst.st_size)
        elif rx != mx:
            diffs.append("%r: sha256 differs from tar -x" % (p,))
        diffs += attr_diffs(p, "", rst, mst, check_mode, check_mtime,
                            check_owner and p not in owner_exceptions)
        if check_nlink and rst.st_nlink != mst.st_nlink:
            diffs.append("%r: nlink %d, tar -x has %d" % (p, mst.st_nlink, rst.st_nlink))
        ref_dense = rst.st_blocks * 512 >= rst.st_size
        if ref_dense and mst.st_blocks * 512 < mst.st_size:
            diffs.append("%r: st_blocks %d too small for size %d"
                         % (p, mst.st_blocks, mst.st_size))
    # hard-link groups: names sharing an inode in the reference share one
    # in the mount, and distinct reference inodes stay distinct
    common = sorted(ref_paths & mnt_paths)
    ref_to_mnt = {}
    mnt_to_ref = {}
    for p in common:
        rst, mst = ref_s[p][0], mnt_s[p][0]
        if ftype(rst.st_mode) != ftype(mst.st_mode):
            continue
        rk, mk = rst.st_ino, mst.st_ino
        if rk in ref_to_mnt and ref_to_mnt[rk] != mk:
            diffs.append("%r: hard link group broken (st_ino %d, expected %d)"
                         % (p, mk, ref_to_mnt[rk]))
        ref_to_mnt.setdefault(rk, mk)
        if mk in mnt_to_ref and mnt_to_ref[mk] != rk:
            diffs.append("%r: st_ino %d shared with an unrelated entry"
                         % (p, mk))
        mnt_to_ref.setdefault(mk, rk)
    if diffs:
        more = "" if len(diffs) <= max_report else \
            "\n... and %d more" % (len(diffs) - max_report)
        raise AssertionError("mount differs from tar -x (%d differences):\n  %s%s"
                             % (len(diffs), "\n  ".join(diffs[:max_report]), more))
    return mnt_s, ref_s


@contextlib.contextmanager
def _compared_mount(shards, mnt, ref, options, allow_tar_errors, compare_kw):
    """Extract SHARDS with tar into REF, mount them on MNT, compare; yields
    (Result, mnt snapshot, ref snapshot, tar results) with the mount kept."""
    start_ns, results = extract_reference(shards, ref)
    if not allow_tar_errors:
        for r in results:
            assert r.returncode == 0, "reference tar -x failed: %r" % (r,)
    arg = ",".join(os.fspath(s) for s in shards)
    with mounted(arg, mnt, *options) as proc:
        mnt_s, ref_s = compare_trees(mnt, ref, start_ns, **compare_kw)
        yield proc, mnt_s, ref_s, results


def check_mount_against_tar(shards, mnt, ref, *options, allow_tar_errors=False,
                            **compare_kw):
    """Extract SHARDS (list of paths) with tar into REF, mount SHARDS_ARG
    (shards joined with ',') on MNT and compare.  Returns (Result, mnt
    snapshot, ref snapshot, tar results)."""
    with _compared_mount(shards, mnt, ref, options, allow_tar_errors,
                         compare_kw) as found:
        pass
    return found


@contextlib.contextmanager
def mount_and_compare(shards, mnt, ref, *options, allow_tar_errors=False,
                      **compare_kw):
    """Like check_mount_against_tar, but keeps the mount for the block:
    yields (Result, mnt snapshot, ref snapshot)."""
    with _compared_mount(shards, mnt, ref, options, allow_tar_errors,
                         compare_kw) as (proc, mnt_s, ref_s, _):
        yield proc, mnt_s, ref_s


def assert_error_names(stderr, path, offsets=None):
    """Some line of STDERR starts with 'shardfs: ', names PATH and, when
    OFFSETS (an int or a set of acceptable ints) is given, 'offset N'."""
    if isinstance(offsets, int):
        offsets = {offsets}
    for line in stderr.splitlines():
        if not line.startswith("shardfs: ") or os.fspath(path) not in line:
            continue
        if offsets is None:
            return line
        for n in re.findall(r"offset (\d+)", line):
            if int(n) in offsets:
                return line
    raise AssertionError("no 'shardfs: ' line naming %s%s in stderr:\n%s"
                         % (path, "" if offsets is None else
                            " and offset %s" % sorted(offsets), stderr))


def read_member(path, chunk=1 << 20):
    """Read PATH to its end.  Returns (bytes read before the error, errno
    or None)."""
    got = bytearray()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return bytes(got), e.errno
    try:
        while True:
            try:
                b = os.read(fd, chunk)
            except OSError as e:
                return bytes(got), e.errno
            if not b:
                return bytes(got), None
            got += b
    finally:
        os.close(fd)


def stat_errno(path):
    """The errno os.stat(PATH) fails with, None when it works."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno
    return None


def listdir_errno(path):
    """The errno os.listdir(PATH) fails with, 0 when it works."""
    try:
        os.listdir(path)
        return 0
    except OSError as e:
        return e.errno


def read_in_random_pieces(path, size, rnd):
    """The file's bytes, read in pieces of random sizes in random order."""
    cuts = sorted({0, size} | {rnd.randrange(0, size + 1) for _ in range(24)})
    pieces = list(zip(cuts, cuts[1:]))
    rnd.shuffle(pieces)
    buf = bytearray(size)
    with open(path, "rb", buffering=0) as f:
        for lo, hi in pieces:
            got = os.pread(f.fileno(), hi - lo, lo)
            assert len(got) == hi - lo, (path, lo, hi)
            buf[lo:hi] = got
    return bytes(buf)
