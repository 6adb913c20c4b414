# SPDX-License-Identifier: Apache-2.0
"""How requests reach the daemon: over io_uring, one queue per CPU, when
the kernel offers it (the fuse module's enable_uring parameter), and over
/dev/fuse otherwise, with -s, or with -o io_uring_threads=0.

Each test sets enable_uring itself and puts back what it found.  Every
byte read is compared with the member it must be; the checks that a path
was taken read the daemon's own counter of io_uring requests and look at
its threads.

The module parameter changing under a mount, and a REGISTER that fails
after io_uring was acknowledged (a test hook, SHARDFS_TEST_URING_REGISTER),
must never leave a request waiting: reads there run in a child process
that the test can free by killing the daemon.
"""
import concurrent.futures
import contextlib
import errno
import os
import pickle
import random
import signal
import subprocess
import threading

import pytest

import shardfs_testlib as lib

SCHED_IDLE = 5


def possible_cpus():
    """The kernel's queues: one per possible CPU."""
    n = 0
    for part in open("/sys/devices/system/cpu/possible").read().strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


@pytest.fixture
def enable_uring(request):
    """Set the fuse module's enable_uring to the test's parameter."""
    with lib.fuse_io_uring(request.param) as settable:
        if not settable:
            pytest.skip("this kernel has no FUSE over io_uring")
        yield request.param == "Y"


def uring_on(request_param="Y"):
    return pytest.mark.parametrize("enable_uring", [request_param], indirect=True)


@pytest.fixture
def shard_set(tmp_path):
    """Three shards, members of 0 bytes to 3 MiB (reads of 1 MiB and
    more), in four directories."""
    members, shards = {}, []
    for s in range(3):
        these = []
        for i in range(40):
            name = "d%d/s%d-%03d.bin" % (i % 4, s, i)
            size = (i * 7919 + s * 104729) % 300_000
            if i % 13 == 0:
                size = 3 << 20 | i
            these.append((name, lib.deterministic_bytes((s, i), size)))
        path = tmp_path / ("shard-%d.tar" % s)
        lib.tar_from_members(path, these)
        shards.append(str(path))
        members.update(these)
    return ",".join(shards), members


def read_all(mnt, members):
    for name, data in members.items():
        with open(os.path.join(mnt, name), "rb") as f:
            assert f.read() == data, name


def read_all_in_child(mnt, members, tmp_path, timeout=60):
    """read_all() in a child process; a read still waiting after TIMEOUT s
    is a hang: the daemon is killed to free the child, and the test fails."""
    blob = tmp_path / "members.pickle"
    with open(blob, "wb") as f:
        pickle.dump(members, f)
    script = ("import sys, pickle; sys.path.insert(0, %r)\n"
              "import test_core_transport as t\n"
              "t.read_all(%r, pickle.load(open(%r, 'rb')))\n"
              % (os.path.dirname(__file__), str(mnt), str(blob)))
    child = subprocess.Popen(["/usr/bin/python3", "-c", script])
    try:
        assert child.wait(timeout=timeout) == 0
    except subprocess.TimeoutExpired:
        os.kill(lib.daemon_pid(mnt), signal.SIGKILL)
        child.wait()
        raise AssertionError("reads hung for %d s" % timeout)


@contextlib.contextmanager
def uring_offered_briefly():
    """enable_uring on for the block only (a mount and its first request),
    then back to what it was; skips when it is on already, as then it
    cannot be switched off under the mount without harm to others."""
    if not os.path.exists(lib.ENABLE_URING):
        pytest.skip("this kernel has no FUSE over io_uring")
    if open(lib.ENABLE_URING).read().strip() == "Y":
        pytest.skip("enable_uring is on already (another test run)")
    with lib.fuse_io_uring("Y"):
        yield


def ring_threads(pid):
    """{tid: (allowed CPUs, scheduling policy)} of the daemon's ring threads."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            if not f.read().startswith("shardfs-q"):
                continue
        out[int(tid)] = (os.sched_getaffinity(int(tid)),
                         os.sched_getscheduler(int(tid)))
    return out


@uring_on("Y")
def test_requests_go_over_io_uring_when_offered(enable_uring, shard_set, tmp_path):
    shards, members = shard_set
    mnt = tmp_path / "mnt"
    with lib.mounted(shards, mnt, "-o", "index_mode=off"):
        read_all(mnt, members)
        stats = lib.read_stats(mnt)
        # FORGET and INTERRUPT stay on /dev/fuse, and the first requests
        # may come before the queues are ready; nearly all others use them
        assert stats["io_uring_requests"] > len(members), stats
        assert stats["errors"] == 0
        threads = ring_threads(lib.daemon_pid(mnt))
        cpus = len(os.sched_getaffinity(0))
        assert len(threads) == possible_cpus() - cpus + 2 * cpus, threads
        for allowed, policy in threads.values():
            assert len(allowed) == 1 and policy == SCHED_IDLE
        before = lib.read_stats(mnt)["io_uring_requests"]
        os.listdir(mnt / "d1")
        os.stat(mnt / "d2" / "s0-002.bin")
        assert lib.read_stats(mnt)["io_uring_requests"] > before


@pytest.mark.parametrize("enable_uring,options", [
    ("N", ()),
    ("Y", ("-o", "io_uring_threads=0")),
    ("Y", ("-s",)),
], indirect=["enable_uring"], ids=["not-offered", "threads-0", "single-threaded"])
def test_dev_fuse_serves_everything_otherwise(enable_uring, options, shard_set,
                                              tmp_path):
    shards, members = shard_set
    mnt = tmp_path / "mnt"
    with lib.mounted(shards, mnt, "-o", "index_mode=off", *options):
        read_all(mnt, members)
        stats = lib.read_stats(mnt)
        assert stats["io_uring_requests"] == 0 and stats["errors"] == 0
        assert ring_threads(lib.daemon_pid(mnt)) == {}


def _read_ranges(mnt, members, seed, rounds):
    """Random preads (up to 2.5 MiB) of random members, each checked."""
    rng = random.Random(seed)
    names = sorted(members)
    for _ in range(rounds):
        name = rng.choice(names)
        data = members[name]
        off = rng.randrange(len(data) + 1)
        size = rng.choice((1, 4096, 65536, 1 << 20, 5 << 19))
        fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
        try:
            assert os.pread(fd, size, off) == data[off:off + size], (name, off, size)
        finally:
            os.close(fd)


@uring_on("Y")
@pytest.mark.timeout(120)
def test_concurrent_readers_over_io_uring(enable_uring, shard_set, tmp_path):
    """16 threads and 2 processes reading, listing and opening control
    files at once, the page cache dropped under them twice."""
    shards, members = shard_set
    mnt = tmp_path / "mnt"
    script = ("import sys; sys.path.insert(0, %r)\n"
              "import test_core_transport as t, shardfs_testlib as lib\n"
              "import pickle; m = pickle.load(open(%r, 'rb'))\n"
              "t._read_ranges(%r, m, int(sys.argv[1]), 300)\n")
    blob = tmp_path / "members.pickle"
    pickle.dump(members, open(blob, "wb"))
    with lib.mounted(shards, mnt, "-o", "index_mode=off"):
        procs = [subprocess.Popen(["/usr/bin/python3", "-c",
                                   script % (os.path.dirname(__file__), str(blob),
                                             str(mnt)), str(seed)])
                 for seed in (100, 101)]
        stop = threading.Event()

        def churn():
            while not stop.is_set():
                lib.read_stats(mnt)
                os.listdir(mnt / "d3")
        with concurrent.futures.ThreadPoolExecutor(17) as pool:
            side = pool.submit(churn)
            readers = [pool.submit(_read_ranges, mnt, members, seed, 150)
                       for seed in range(16)]
            lib.drop_caches()
            lib.drop_caches()
            for r in readers:
                r.result()
            stop.set()
            side.result()
        for p in procs:
            assert p.wait(timeout=60) == 0
        stats = lib.read_stats(mnt)
        assert stats["errors"] == 0 and stats["io_uring_requests"] > 0


@uring_on("Y")
@pytest.mark.timeout(60)
def test_signals_end_an_io_uring_mount(enable_uring, shard_set, tmp_path):
    """SIGTERM unmounts and exits 0; SIGKILL leaves a dead mount that says
    ENOTCONN and is cleared by fusermount3 -u."""
    shards, members = shard_set
    mnt = tmp_path / "mnt"
    with lib.foreground_mount(shards, mnt, tmp_path / "err", "-o",
                              "index_mode=off") as proc:
        read_all(mnt, members)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not lib.is_mounted(mnt)
    with lib.mounted(shards, mnt, "-o", "index_mode=off"):
        pid = lib.daemon_pid(mnt)
        os.stat(mnt / "d0" / "s1-000.bin")
        os.kill(pid, signal.SIGKILL)
        assert lib.wait_until(lambda: not lib.process_alive(pid), 10)
        # ECANCELED or ECONNABORTED while the kernel tears the queues down
        uncached = mnt / "d1" / "never-looked-up"
        assert lib.wait_until(
            lambda: lib.stat_errno(uncached) == errno.ENOTCONN, 10), \
            os.strerror(lib.stat_errno(uncached))


@uring_on("Y")
@pytest.mark.timeout(60)
def test_lazy_unmount_under_readers(enable_uring, shard_set, tmp_path):
    """fusermount3 -uz while files are being read: the daemon exits once
    the last reader lets go, and the readers saw only right bytes."""
    shards, members = shard_set
    mnt = tmp_path / "mnt"
    with lib.mounted(shards, mnt, "-o", "index_mode=off"):
        pid = lib.daemon_pid(mnt)
        held = open(mnt / "d0" / "s2-000.bin", "rb")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            readers = [pool.submit(_read_ranges, mnt, members, seed, 40)
                       for seed in range(4)]
            for r in readers:
                r.result()
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=True)
        assert held.read() == members["d0/s2-000.bin"]
        held.close()
        assert lib.wait_until(lambda: not lib.process_alive(pid), 10)


@pytest.mark.timeout(120)
def test_enable_uring_switched_off_under_a_mount(shard_set, tmp_path):
    """io_uring offered at INIT, then enable_uring switched off while the
    mount serves over it: the kernel refuses io_uring commands of
    connections that did not acknowledge it, so requests used to wait
    forever.  Acknowledged, the connection keeps its rings."""
    shards, members = shard_set
    mnt = tmp_path / "mnt"
    with contextlib.ExitStack() as stack:
        with uring_offered_briefly():
            stack.enter_context(lib.mounted(shards, mnt, "-o", "index_mode=off"))
            assert lib.wait_until(
                lambda: lib.read_stats(mnt)["io_uring_requests"] > 0, 10)
        before = lib.read_stats(mnt)["io_uring_requests"]
        read_all_in_child(mnt, members, tmp_path)
        stats = lib.read_stats(mnt)
        assert stats["io_uring_requests"] > before + len(members), stats
        assert stats["errors"] == 0


@pytest.mark.timeout(120)
def test_failed_register_falls_back_to_dev_fuse(shard_set, tmp_path):
    """io_uring acknowledged, then no REGISTER can be sent: the daemon
    declines it to the kernel, and everything goes over /dev/fuse."""
    shards, members = shard_set
    mnt = tmp_path / "mnt"
    env = dict(os.environ, SHARDFS_TEST_URING_REGISTER="fail")
    with contextlib.ExitStack() as stack:
        with uring_offered_briefly():
            stack.enter_context(lib.foreground_mount(
                shards, mnt, tmp_path / "err", "-o", "index_mode=off", env=env))
            os.stat(mnt / "d0")
        read_all_in_child(mnt, members, tmp_path)
        stats = lib.read_stats(mnt)
        assert stats["io_uring_requests"] == 0 and stats["errors"] == 0, stats
    err = (tmp_path / "err").read_text()
    assert "cannot send REGISTER" in err and "declining io_uring" in err, err


@pytest.mark.timeout(120)
def test_register_not_declinable_ends_the_mount(shard_set, tmp_path):
    """io_uring acknowledged, and neither a REGISTER nor the decline can be
    sent: the kernel holds requests for rings that will never come, so the
    daemon ends the session with an error instead of a hang."""
    shards, _ = shard_set
    mnt = tmp_path / "mnt"
    env = dict(os.environ, SHARDFS_TEST_URING_REGISTER="fail-decline")
    # the daemon ends within a second: that is the window enable_uring is on
    with uring_offered_briefly(), lib.foreground_mount(
            shards, mnt, tmp_path / "err", "-o", "index_mode=off", env=env,
            wait_mounted=False) as proc:
        assert proc.wait(timeout=30) == 1
        assert not lib.is_mounted(mnt)
    err = (tmp_path / "err").read_text()
    assert "cannot be served, nor declined: ending the session" in err, err


def test_io_uring_threads_is_bounded(tmp_path, shard_set):
    shards, _ = shard_set
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = lib.run_cmd(lib.shardfs_argv(shards, mnt, "-o", "io_uring_threads=65"))
    assert r.returncode == 2 and "io_uring_threads=65" in r.stderr, r
