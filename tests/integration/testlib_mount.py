# SPDX-License-Identifier: Apache-2.0
"""Mounting for the integration tests, and always unmounting: the shardfs
binary of the build, running it (run_shardfs, mounted, the expected
failures), the mounts these helpers made (the conftest watchdog unmounts
them and kills their daemons), the fuse module's enable_uring, the page
cache, and what a daemon reports (/.shardfs/stats, the summary line,
its pid and RSS).

Every mount made through mounted() is unmounted when the block exits, also
when the test fails, so a failing test never leaves a stale FUSE mount.
shardfs_testlib re-exports all of it.
"""
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import tempfile
import threading
import time


BUILD_DIR = os.environ.get(
    "SHARDFS_BUILD_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "build"))


SHARDFS = os.path.abspath(os.path.join(BUILD_DIR, "shardfs"))


def binary(name):
    """Absolute path of a program built by CMake (shardfs, shardfs-pack...)."""
    return os.path.abspath(os.path.join(BUILD_DIR, name))


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
    """Unmount and wait until the kernel no longer lists the mount: a plain
    fusermount3 -u (waiting up to 5 s), then a lazy one (2 s), then
    umount -l."""
    _unregister(mountpoint)
    for argv, polls in ((["fusermount3", "-u"], 100), (["fusermount3", "-uz"], 40),
                        (["umount", "-l"], 0)):
        if not is_mounted(mountpoint):
            return
        subprocess.run(argv + [mountpoint],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(polls):
            if not is_mounted(mountpoint):
                return
            time.sleep(0.05)


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


def statfs(path):
    return os.statvfs(path)


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


def daemon_read_bytes(mountpoint):
    """What the daemon serving MOUNTPOINT has read from the disk, the
    kernel's readahead for its reads included (/proc/PID/io)."""
    with open("/proc/%d/io" % daemon_pid(mountpoint)) as f:
        return int(next(l for l in f if l.startswith("read_bytes")).split()[1])


def forget_pages(root, names, written=False):
    """Have the kernel drop the cached pages of NAMES under ROOT, only
    theirs, keeping the inodes: under a mount (as a new epoch after the
    page cache was reclaimed) the next reads reach the daemon; of shards
    (WRITTEN: just written, fsync'ed first, as a dirty page cannot be
    dropped) they reach the disk, and no other suite's files are
    dropped."""
    for name in names:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        try:
            if written:
                os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


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
