# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the integration tests: locating the build, mounting
and always unmounting, and comparing a mounted tree with an extracted one.

Every mount made through mounted() is unmounted when the block exits, also
when the test fails, so a failing test never leaves a stale FUSE mount.

The reference for every comparison is GNU tar itself: extract_reference()
runs `tar -x` on each shard, in shard order, into one directory, and
compare_trees() checks a mount against that directory entry by entry
(paths, types, sha256 of contents, sizes, permission bits, mtimes, owners,
symlink targets, hard-link groups).
"""
import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import threading
import time

BUILD_DIR = os.environ.get(
    "SHARDFS_BUILD_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SHARDFS = os.path.abspath(os.path.join(BUILD_DIR, "shardfs"))
GNU_TAR = "tar"
BSDTAR = "bsdtar"

# Fixed timestamps (ns) used by the data generators, so that mtimes in the
# shards never look like "now" (a directory whose reference mtime is later
# than the start of the extraction was created or touched by tar itself).
T0_NS = 1_600_000_000_123_456_789


def binary(name):
    """Absolute path of a program built by CMake (shardfs, shardfs-pack...)."""
    return os.path.abspath(os.path.join(BUILD_DIR, name))


# --------------------------------------------------------------------------
# mount bookkeeping


_active = set()          # mountpoints (realpath) mounted by these helpers
_active_lock = threading.Lock()


def _register(mp):
    with _active_lock:
        _active.add(os.path.realpath(mp))


def _unregister(mp):
    with _active_lock:
        _active.discard(os.path.realpath(mp))


def active_mounts():
    with _active_lock:
        return set(_active)


def is_mounted(mountpoint):
    mp = os.path.realpath(mountpoint)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == mp for line in f)


def mount_entry(mountpoint):
    """(source, fstype, options) of the mount on MOUNTPOINT, or None."""
    mp = os.path.realpath(mountpoint)
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == mp:
                return fields[0], fields[2], fields[3].split(",")
    return None


def shardfs_processes():
    """(pid, argv) of every shardfs process but this one; argv as bytes."""
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and b"shardfs" in os.path.basename(argv[0]):
            yield int(d), argv


def processes_mentioning(text):
    """PIDs of shardfs processes with TEXT (a mountpoint) among their
    arguments."""
    needles = {os.fsencode(text), os.fsencode(os.path.realpath(text)),
               os.fsencode(text).rstrip(b"/")}
    return [pid for pid, argv in shardfs_processes()
            if any(a.rstrip(b"/") in needles for a in argv[1:])]


def kill_daemons_for(mountpoint):
    """Kill (by pid) the shardfs processes these tests started for
    MOUNTPOINT.  Used only by the hang watchdog and as a last resort."""
    for pid in processes_mentioning(os.path.realpath(mountpoint)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def unmount(mountpoint):
    """Unmount and wait until the kernel no longer lists the mount."""
    _unregister(mountpoint)
    if not is_mounted(mountpoint):
        return
    subprocess.run(["fusermount3", "-u", mountpoint],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if not is_mounted(mountpoint):
            return
        time.sleep(0.05)
    subprocess.run(["fusermount3", "-uz", mountpoint],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(40):
        if not is_mounted(mountpoint):
            return
        time.sleep(0.05)
    subprocess.run(["umount", "-l", mountpoint],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def abort_all_mounts():
    """Watchdog action: kill the daemons behind every mount made by these
    helpers (hung syscalls then fail with ENOTCONN) and unmount."""
    for mp in active_mounts():
        kill_daemons_for(mp)
        subprocess.run(["fusermount3", "-uz", mp],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["umount", "-l", mp],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_daemon_exit(mountpoint, timeout=10.0):
    """True when no shardfs process mentioning MOUNTPOINT is left."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not processes_mentioning(os.path.realpath(mountpoint)):
            return True
        time.sleep(0.05)
    return False


class Result:
    """Like CompletedProcess, with stdout/stderr as text and raw bytes."""

    def __init__(self, argv, returncode, out, err):
        self.args = argv
        self.returncode = returncode
        self.stdout_bytes = out
        self.stderr_bytes = err
        self.stdout = out.decode("utf-8", "replace")
        self.stderr = err.decode("utf-8", "replace")

    def __repr__(self):
        return "Result(rc=%r, stderr=%r)" % (self.returncode, self.stderr[-2000:])


def run_cmd(argv, env=None, timeout=300):
    """Run ARGV with stdout/stderr sent to temporary files (not pipes: a
    daemon that kept a pipe open would make us wait for it forever).
    Returns a Result once the process itself has exited."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, env=env)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("command timed out after %ss: %r"
                                 % (timeout, argv))
        out.seek(0)
        err.seek(0)
        return Result(argv, rc, out.read(), err.read())


# SHARDFS_TEST_PUSHAHEAD=SIZE mounts every shardfs of the run with
# -o pushahead=SIZE (ctest runs the suites that check bytes with 0 too).
PUSHAHEAD = os.environ.get("SHARDFS_TEST_PUSHAHEAD")


def shardfs_argv(shards, mountpoint, *options):
    extra = ["-o", "pushahead=" + PUSHAHEAD] if PUSHAHEAD is not None else []
    return [SHARDFS, *extra, *options, os.fspath(shards), os.fspath(mountpoint)]


def run_shardfs(shards, mountpoint, *options, check=True, env=None,
                timeout=300):
    """Run `shardfs [options] SHARDS MOUNTPOINT`; it daemonises once the
    mount is usable.  Returns a Result (stderr captured)."""
    argv = shardfs_argv(shards, mountpoint, *options)
    _register(mountpoint)
    try:
        proc = run_cmd(argv, env=env, timeout=timeout)
    except AssertionError:
        unmount(mountpoint)
        kill_daemons_for(mountpoint)
        raise
    if proc.returncode != 0:
        # whatever the caller expects, a failed run must leave nothing
        # mounted; callers that check that look before this cleanup runs
        # (see run_shardfs_expect_failure)
        if check:
            unmount(mountpoint)
            raise AssertionError("shardfs failed (%d): %s\nargv: %r" %
                                 (proc.returncode, proc.stderr, argv))
    return proc


def run_shardfs_expect_failure(shards, mountpoint, *options, env=None):
    """Run shardfs where it must fail.  Returns (Result, was_mounted,
    daemon_left) measured right after the process exited; cleans up."""
    argv = shardfs_argv(shards, mountpoint, *options)
    _register(mountpoint)
    try:
        proc = run_cmd(argv, env=env, timeout=120)
        was_mounted = os.path.isdir(mountpoint) and is_mounted(mountpoint)
        time.sleep(0.05)
        daemon_left = bool(processes_mentioning(os.path.realpath(mountpoint)))
        return proc, was_mounted, daemon_left
    finally:
        if os.path.isdir(mountpoint):
            unmount(mountpoint)
        kill_daemons_for(mountpoint)
        _unregister(mountpoint)


@contextlib.contextmanager
def mounted(shards, mountpoint, *options, env=None):
    """Mount SHARDS on MOUNTPOINT for the duration of the block."""
    os.makedirs(mountpoint, exist_ok=True)
    proc = None
    try:
        proc = run_shardfs(shards, mountpoint, *options, env=env)
        assert is_mounted(mountpoint), "shardfs exited 0 but nothing is mounted"
        yield proc
    finally:
        unmount(mountpoint)


ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


@contextlib.contextmanager
def fuse_io_uring(value):
    """The fuse module's enable_uring set to VALUE ("Y" or "N") for the
    block, then put back; a mount keeps the transport it got at its start.
    Yields False where the kernel has no FUSE over io_uring (and so no
    such setting)."""
    if not os.path.exists(ENABLE_URING):
        yield False
        return
    with open(ENABLE_URING) as f:
        before = f.read().strip()
    with open(ENABLE_URING, "w") as f:
        f.write(value)
    try:
        yield True
    finally:
        with open(ENABLE_URING, "w") as f:
            f.write(before)


@contextlib.contextmanager
def registered_mount(mountpoint):
    """For mounts made by other means (mount(8), fstab, shardfs -f):
    registers MOUNTPOINT with the watchdog and always unmounts it."""
    _register(mountpoint)
    try:
        yield
    finally:
        unmount(mountpoint)
        if not wait_for_daemon_exit(mountpoint, 5):
            kill_daemons_for(mountpoint)


# --------------------------------------------------------------------------
# summary line


SUMMARY_RE = re.compile(
    r"^shardfs(?:-index)?: (?P<shards>\d+) shards, (?P<files>\d+) files, "
    r"(?P<dirs>\d+) dirs, (?P<symlinks>\d+) symlinks, (?P<bytes>\d+) bytes, "
    r"(?P<duplicates>\d+) duplicates, (?P<skipped>\d+) skipped in "
    r"(?P<seconds>[0-9.]+) s\s*$", re.M)


def parse_summary(stderr):
    """The summary line's fields as ints (seconds as float), or None."""
    m = SUMMARY_RE.search(stderr)
    if not m:
        return None
    d = {k: int(v) for k, v in m.groupdict().items() if k != "seconds"}
    d["seconds"] = float(m.group("seconds"))
    return d


# --------------------------------------------------------------------------
# reference extraction and tree comparison


def file_digest(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)


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
            if os.path.islink(full):
                out[rel] = ("l", os.readlink(full))
            elif os.path.isdir(full):
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
    stack = [b""]
    while stack:
        rel_dir = stack.pop()
        full_dir = os.path.join(root_b, rel_dir) if rel_dir else root_b
        names = sorted(os.listdir(full_dir))
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
                stack.append(rel)
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
            if check_mode and (rst.st_mode & 0o7777) != (mst.st_mode & 0o7777):
                diffs.append("%r: dir mode %o, tar -x has %o"
                             % (p, mst.st_mode & 0o7777, rst.st_mode & 0o7777))
            if check_mtime and rst.st_mtime_ns != mst.st_mtime_ns:
                diffs.append("%r: dir mtime_ns %d, tar -x has %d"
                             % (p, mst.st_mtime_ns, rst.st_mtime_ns))
            if check_owner and (rst.st_uid, rst.st_gid) != (mst.st_uid, mst.st_gid):
                diffs.append("%r: dir owner %d:%d, tar -x has %d:%d"
                             % (p, mst.st_uid, mst.st_gid, rst.st_uid, rst.st_gid))
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
        if check_mode and (rst.st_mode & 0o7777) != (mst.st_mode & 0o7777):
            diffs.append("%r: mode %o, tar -x has %o"
                         % (p, mst.st_mode & 0o7777, rst.st_mode & 0o7777))
        if check_mtime and rst.st_mtime_ns != mst.st_mtime_ns:
            diffs.append("%r: mtime_ns %d, tar -x has %d"
                         % (p, mst.st_mtime_ns, rst.st_mtime_ns))
        if check_owner and p not in owner_exceptions and \
                (rst.st_uid, rst.st_gid) != (mst.st_uid, mst.st_gid):
            diffs.append("%r: owner %d:%d, tar -x has %d:%d"
                         % (p, mst.st_uid, mst.st_gid, rst.st_uid, rst.st_gid))
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


def check_mount_against_tar(shards, mnt, ref, *options, allow_tar_errors=False,
                            **compare_kw):
    """Extract SHARDS (list of paths) with tar into REF, mount SHARDS_ARG
    (shards joined with ',') on MNT and compare.  Returns (Result, mnt
    snapshot, ref snapshot, tar results)."""
    start_ns, results = extract_reference(shards, ref)
    if not allow_tar_errors:
        for r in results:
            assert r.returncode == 0, "reference tar -x failed: %r" % (r,)
    arg = ",".join(os.fspath(s) for s in shards)
    with mounted(arg, mnt, *options) as proc:
        mnt_s, ref_s = compare_trees(mnt, ref, start_ns, **compare_kw)
    return proc, mnt_s, ref_s, results


@contextlib.contextmanager
def mount_and_compare(shards, mnt, ref, *options, allow_tar_errors=False,
                      **compare_kw):
    """Like check_mount_against_tar, but keeps the mount for the block:
    yields (Result, mnt snapshot, ref snapshot)."""
    start_ns, results = extract_reference(shards, ref)
    if not allow_tar_errors:
        for r in results:
            assert r.returncode == 0, "reference tar -x failed: %r" % (r,)
    arg = ",".join(os.fspath(s) for s in shards)
    with mounted(arg, mnt, *options) as proc:
        mnt_s, ref_s = compare_trees(mnt, ref, start_ns, **compare_kw)
        yield proc, mnt_s, ref_s


# --------------------------------------------------------------------------
# building source trees and shards


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


def tar_checksum(header):
    h = bytearray(header[:512])
    h[148:156] = b" " * 8
    return sum(h)


def statfs(path):
    return os.statvfs(path)


# --------------------------------------------------------------------------
# source trees used by the core integration tests
#
# Each builder writes real files (contents, modes, owners, mtimes, symlinks,
# hard links, FIFOs, sparse files) under a directory; the tests then pack
# that directory with the tar implementation under test and compare the
# shardfs mount with GNU tar's extraction of the same shards.  Nothing here
# states what shardfs must show: the reference is always `tar -x`.

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


# --------------------------------------------------------------------------
# reliability helpers (daemon pid and RSS, /.shardfs/stats, page cache,
# foreground mounts with captured stderr, tars built in memory)


def daemon_pid(mountpoint, timeout=5.0):
    """PID of the one shardfs process serving MOUNTPOINT."""
    deadline = time.time() + timeout
    while True:
        pids = processes_mentioning(os.path.realpath(mountpoint))
        if len(pids) == 1:
            return pids[0]
        if time.time() > deadline:
            raise AssertionError("expected one shardfs process for %s, found %r"
                                 % (mountpoint, pids))
        time.sleep(0.05)


def process_alive(pid):
    """True while PID exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def vm_rss_kb(pid):
    """VmRSS of PID in kB (from /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def read_stats(mountpoint):
    """/.shardfs/stats of a mount, parsed."""
    import json
    with open(os.path.join(mountpoint, ".shardfs", "stats"), "rb") as f:
        return json.loads(f.read())


def settled_stats(mountpoint):
    """/.shardfs/stats once the push-ahead counters stop moving (10 s),
    so that pushes still under way count too."""
    last = None
    for _ in range(100):
        now = read_stats(mountpoint)
        if last and now["pushahead"] == last["pushahead"]:
            return now
        last = now
        time.sleep(0.1)
    return last


def drop_caches(what=3):
    """Make the kernel forget cached pages (and dentries/inodes) so that
    reads reach shardfs and the backing store again."""
    subprocess.run(["sync"])
    # twice: a page read moments ago may still sit in a per-CPU LRU batch,
    # which holds a reference that makes the first pass skip it (seen on a
    # loaded machine: the last member read survived one drop)
    for _ in range(2):
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("%d\n" % what)
        time.sleep(0.05)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def page_cache_holes(path):
    """Runs of PATH's pages that are not in the page cache, as (first
    page, pages) pairs, from mincore(2) on a mapping that is never
    touched: no page is faulted in, so no request reaches the daemon.
    A test that counts READs uses it to tell pages the kernel took back
    (reclaim, which some hosts run on idle page cache with memory free)
    from pages that were never stored."""
    size = os.path.getsize(path)
    if size == 0:
        return []
    page = os.sysconf("SC_PAGE_SIZE")
    pages = (size + page - 1) // page
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap %s" % path)
        try:
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore %s" % path)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    holes, start = [], None
    for i, resident in enumerate(vec.raw):
        if not resident & 1 and start is None:
            start = i
        elif resident & 1 and start is not None:
            holes.append((start, i - start))
            start = None
    if start is not None:
        holes.append((start, pages - start))
    return holes


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


def wait_until(pred, timeout, step=0.05):
    """Poll PRED until it is true (returns True) or TIMEOUT s pass."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


@contextlib.contextmanager
def foreground_mount(shards, mountpoint, stderr_path, *options, env=None,
                     pass_fds=(), wait_mounted=True, timeout=30):
    """Run `shardfs -f [options] SHARDS MOUNTPOINT` (SIGINT at its default
    disposition, as in a terminal), stderr to STDERR_PATH; wait until the
    mount appears and yield the Popen.  Always unmounts and reaps (kills
    it when it outlives its mount)."""
    os.makedirs(mountpoint, exist_ok=True)
    _register(mountpoint)
    errf = open(stderr_path, "wb")

    def child_setup():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    proc = subprocess.Popen([SHARDFS, "-f", *options, os.fspath(shards),
                             os.fspath(mountpoint)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=errf, env=env, pass_fds=pass_fds,
                            preexec_fn=child_setup)
    try:
        if wait_mounted:
            deadline = time.time() + timeout
            while not is_mounted(mountpoint):
                if proc.poll() is not None:
                    raise AssertionError("shardfs -f exited %d before mounting: %s"
                                         % (proc.returncode,
                                            open(stderr_path, "rb").read()))
                if time.time() > deadline:
                    raise AssertionError("shardfs -f did not mount within %ss"
                                         % timeout)
                time.sleep(0.02)
        yield proc
    finally:
        unmount(mountpoint)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errf.close()


def tar_from_members(path, members, fmt=None):
    """Write a tar at PATH from MEMBERS: (name, data bytes) or dicts with
    name, data and optional mode, uid, gid, mtime, type (tarfile type
    constant) and linkname.  Returns {name: (offset_data, size)} as laid
    out in the written tar."""
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
            else:
                t.addfile(ti)
    with tarfile.open(os.fspath(path), "r:") as t:
        for ti in t.getmembers():
            if ti.isfile():
                layout[ti.name] = (ti.offset_data, ti.size)
    return layout


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
