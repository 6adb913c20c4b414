# SPDX-License-Identifier: Apache-2.0
"""Daemon lifecycle: crash, signals, idle timeout, readiness notification.

- SIGKILL: the kernel keeps the mount, every access fails with ENOTCONN
  ("Transport endpoint is not connected"); `fusermount3 -u` and a remount
  recover.
- SIGTERM and SIGINT unmount cleanly; in the foreground the process exits
  with status 0.
- -o idle_timeout=N unmounts after N seconds without requests, and not
  while requests keep coming, nor while the mount is in use.
- -o notify_fd=N and $NOTIFY_SOCKET announce READY=1 only once the mount
  is usable: the test lists the mount the moment it reads READY=1.
"""
import errno
import os
import random
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

import shardfs_testlib as lib


def make_data(tmp_path, n=40):
    members = [("d%d/f%03d.bin" % (i % 4, i),
                lib.deterministic_bytes(("life", i), (i * 7919) % 200_000))
               for i in range(n)]
    shard = tmp_path / "s.tar"
    lib.tar_from_members(shard, members)
    return shard, dict(members)


def check_mount(mnt, members):
    assert sorted(os.listdir(mnt)) == ["d0", "d1", "d2", "d3"]
    for name, data in members.items():
        with open(os.path.join(mnt, name), "rb") as f:
            assert f.read() == data, name


# --------------------------------------------------------------- SIGKILL


@pytest.mark.timeout(60)
def test_sigkill_gives_enotconn_and_remount_recovers(tmp_path):
    shard, members = make_data(tmp_path)
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt):
        check_mount(mnt, members)
        pid = lib.daemon_pid(mnt)
        held = open(os.path.join(mnt, "d1/f001.bin"), "rb")
        try:
            os.kill(pid, signal.SIGKILL)
            assert lib.wait_until(lambda: not lib.process_alive(pid), 10)
            # the kernel keeps the dead mount: every request says ENOTCONN
            # (a stat the kernel can answer from its attribute cache, which
            # shardfs fills for a year, may still succeed: see the cold
            # variant below)
            assert lib.is_mounted(mnt)
            # requests caught in flight by the abort fail with ECONNABORTED;
            # once the kernel has torn the connection down, ENOTCONN
            assert lib.wait_until(
                lambda: lib.listdir_errno(mnt) == errno.ENOTCONN, 10), \
                errno.errorcode.get(lib.listdir_errno(mnt))
            err = lib.stat_errno(os.path.join(mnt, "d0", "never-looked-up"))
            assert err == errno.ENOTCONN, \
                "stat of an uncached name under a killed daemon: %s" % (
                    err and errno.errorcode[err])
            # shardfs keeps nothing per open file, so the kernel opens a
            # name it has cached without asking the daemon; what it then
            # has to read from the daemon fails
            try:
                again = open(os.path.join(mnt, "d2/f002.bin"), "rb")
            except OSError as e:
                assert e.errno == errno.ENOTCONN, e
            else:
                with again:
                    os.posix_fadvise(again.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    with pytest.raises(OSError) as ei:
                        os.pread(again.fileno(), 4096, 0)
                    assert ei.value.errno == errno.ENOTCONN, ei.value
            # pages the file had in the cache are evicted (as memory
            # pressure would): reading them again needs the daemon
            os.posix_fadvise(held.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with pytest.raises(OSError) as ei:
                os.pread(held.fileno(), 4096, 0)
            assert ei.value.errno == errno.ENOTCONN, ei.value
            # stat(MOUNTPOINT) is answered from the kernel's attribute
            # cache, filled for a year by shardfs, so it does not report
            # the dead daemon once the root was looked at (see the report)
            err = lib.stat_errno(mnt)
            print("stat(mountpoint) of a killed, warm mount: %s"
                  % (errno.errorcode[err] if err else "succeeds (cached)"))
            with pytest.raises(OSError) as ei:
                os.statvfs(mnt)
            assert ei.value.errno == errno.ENOTCONN, ei.value
        finally:
            held.close()
        # mounting again over the dead mount is refused (exit 1) and says why
        r = lib.run_cmd(lib.shardfs_argv(shard, mnt))
        assert r.returncode == 1, r
        assert ("shardfs: %s: Transport endpoint is not connected: a shardfs "
                "(or other FUSE) mount whose daemon died; remove it with "
                "'fusermount3 -u %s' (add -z if busy)\n" % (mnt, mnt)) == r.stderr, r
        # the documented recovery: fusermount3 -u, then mount again
        r = subprocess.run(["fusermount3", "-u", str(mnt)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert r.returncode == 0, r.stdout
        assert not lib.is_mounted(mnt)
        assert lib.stat_errno(mnt) is None
    with lib.mounted(shard, mnt):
        check_mount(mnt, members)
        assert lib.read_stats(mnt)["errors"] == 0


@pytest.mark.timeout(60)
def test_sigkill_before_any_access_stat_says_enotconn(tmp_path):
    """Killed before anything was cached: stat(MOUNTPOINT) itself fails
    with "Transport endpoint is not connected"."""
    shard, members = make_data(tmp_path)
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    with lib.registered_mount(mnt):
        # nothing may look at the mountpoint before the stat under test:
        # even a realpath() would lstat it and fill the attribute cache
        r = lib.run_cmd(lib.shardfs_argv(shard, mnt))
        assert r.returncode == 0, r
        pid = pid_of_argv(str(mnt))
        os.kill(pid, signal.SIGKILL)
        assert lib.wait_until(lambda: not lib.process_alive(pid), 10)
        # ECONNABORTED while the kernel is still tearing the connection
        # down, and on a loaded machine now and then after a first ENOTCONN:
        # wait for three ENOTCONN in a row
        assert lib.wait_until(lambda: all(
            lib.stat_errno(str(mnt)) == errno.ENOTCONN for _ in range(3)), 10)
        with pytest.raises(OSError) as ei:
            os.stat(mnt)
        assert ei.value.errno == errno.ENOTCONN
        assert "Transport endpoint is not connected" in str(ei.value)
        r = subprocess.run(["stat", str(mnt)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        assert r.returncode != 0
        assert b"Transport endpoint is not connected" in r.stdout, r.stdout
        r = subprocess.run(["fusermount3", "-u", str(mnt)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert r.returncode == 0, r.stdout
    with lib.mounted(shard, mnt):
        check_mount(mnt, members)


def pid_of_argv(arg):
    """PID of the shardfs process with ARG among its arguments, found
    without touching ARG in the filesystem."""
    want = os.fsencode(arg)
    deadline = time.time() + 5
    while time.time() < deadline:
        for pid, argv in lib.shardfs_processes():
            if want in argv[1:]:
                return pid
        time.sleep(0.05)
    raise AssertionError("no shardfs process for %s" % arg)


# ------------------------------------------------------ SIGTERM / SIGINT


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT],
                         ids=["SIGTERM", "SIGINT"])
def test_signal_unmounts_cleanly_foreground(tmp_path, sig):
    shard, members = make_data(tmp_path)
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    with lib.foreground_mount(shard, mnt, err_path) as proc:
        check_mount(mnt, members)
        proc.send_signal(sig)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            raise AssertionError("shardfs -f still running 15 s after %s" % sig.name)
        assert rc == 0, "shardfs -f exited %d after %s: %s" % (
            rc, sig.name, open(err_path, "rb").read())
        assert not lib.is_mounted(mnt), "%s left the mount behind" % sig.name
        assert lib.stat_errno(mnt) is None
        assert os.listdir(mnt) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT],
                         ids=["SIGTERM", "SIGINT"])
def test_signal_unmounts_cleanly_daemon(tmp_path, sig):
    shard, members = make_data(tmp_path)
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt):
        check_mount(mnt, members)
        pid = lib.daemon_pid(mnt)
        os.kill(pid, sig)
        assert lib.wait_until(lambda: not lib.is_mounted(mnt), 10), \
            "still mounted 10 s after %s to the daemon" % sig.name
        assert lib.wait_until(lambda: not lib.process_alive(pid), 10), \
            "daemon still running after %s" % sig.name
        assert lib.stat_errno(mnt) is None


# ----------------------------------------------------------- idle timeout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("foreground", [True, False], ids=["foreground", "daemon"])
def test_idle_timeout_unmounts_after_idle(tmp_path, foreground):
    shard, members = make_data(tmp_path)
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    if foreground:
        with lib.foreground_mount(shard, mnt, err_path,
                                  "-o", "idle_timeout=2") as proc:
            t0 = time.monotonic()
            assert lib.wait_until(lambda: not lib.is_mounted(mnt), 10), \
                "still mounted 10 s into a 2 s idle timeout"
            elapsed = time.monotonic() - t0
            rc = proc.wait(timeout=10)
            assert rc == 0, "exit %d after the idle unmount: %s" % (
                rc, open(err_path, "rb").read())
    else:
        with lib.mounted(shard, mnt, "-o", "idle_timeout=2"):
            t0 = time.monotonic()
            pid = lib.daemon_pid(mnt)
            assert lib.wait_until(lambda: not lib.is_mounted(mnt), 10), \
                "still mounted 10 s into a 2 s idle timeout"
            elapsed = time.monotonic() - t0
            assert lib.wait_until(lambda: not lib.process_alive(pid), 10), \
                "daemon outlived its idle unmount"
    print("idle unmount after %.2f s" % elapsed)
    assert 1.5 <= elapsed <= 4.5, "idle timeout of 2 s fired after %.2f s" % elapsed


@pytest.mark.timeout(60)
def test_idle_timeout_not_while_requests_arrive(tmp_path):
    shard, members = make_data(tmp_path)
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt, "-o", "idle_timeout=2"):
        # /.shardfs/stats bypasses the page cache: every read is a request
        end = time.monotonic() + 6
        while time.monotonic() < end:
            assert lib.is_mounted(mnt), "unmounted although requests kept coming"
            lib.read_stats(mnt)
            time.sleep(0.4)
        check_mount(mnt, members)
        t0 = time.monotonic()
        assert lib.wait_until(lambda: not lib.is_mounted(mnt), 10)
        elapsed = time.monotonic() - t0
        assert elapsed <= 4.5, "idle unmount %.2f s after the last request" % elapsed


@pytest.mark.timeout(60)
def test_idle_timeout_keeps_mount_with_open_file(tmp_path):
    """A reader that holds a file open (or has its working directory in the
    mount) is using it, even when the page cache answers for a while: the
    idle timeout must not tear the mount away under it (its next read
    would fail with ENOTCONN)."""
    name = "big/8mib.bin"
    data = lib.deterministic_bytes("big", 8 << 20)
    shard = tmp_path / "s.tar"
    lib.tar_from_members(shard, [(name, data)])
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt, "-o", "idle_timeout=2"):
        with open(os.path.join(mnt, name), "rb") as f:
            head = f.read(1000)
            assert head == data[:1000]
            time.sleep(5)    # idle: no request reaches the daemon
            f.seek(0)
            try:
                rest = f.read()
            except OSError as e:
                raise AssertionError(
                    "reading a file held open across the idle timeout failed "
                    "with %s (mounted: %s)" % (errno.errorcode[e.errno],
                                               lib.is_mounted(mnt)))
            assert rest == data
            assert lib.is_mounted(mnt), \
                "the idle timeout detached a mount with an open file"


# ---------------------------------------------------- readiness: notify_fd


def read_ready(fd, timeout=30):
    """Read FD until READY=1 arrives (returns it and what follows until
    EOF or a short wait) or EOF without it (returns what came)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while b"READY=1" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no READY=1 within %ss (got %r)" % (timeout, buf))
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        b = os.read(fd, 4096)
        if not b:
            return buf
        buf += b
    return buf


@pytest.mark.timeout(60)
@pytest.mark.parametrize("foreground", [True, False], ids=["foreground", "daemon"])
def test_notify_fd_ready_only_when_usable(tmp_path, foreground):
    shard, members = make_data(tmp_path, n=400)
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    err_path = tmp_path / "stderr.txt"
    rfd, wfd = os.pipe()
    errf = open(err_path, "wb")
    argv = [lib.SHARDFS] + (["-f"] if foreground else []) + \
        ["-o", "notify_fd=%d" % wfd, str(shard), str(mnt)]
    with lib.registered_mount(mnt):
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errf,
                                pass_fds=(wfd,))
        os.close(wfd)
        try:
            got = read_ready(rfd)
            assert b"READY=1" in got, "EOF on notify_fd without READY=1: %r (%s)" % (
                got, open(err_path, "rb").read())
            # the very moment READY=1 is read, the mount must be usable
            assert lib.is_mounted(mnt), "READY=1 before the mount existed"
            assert sorted(os.listdir(mnt)) == ["d0", "d1", "d2", "d3"]
            with open(os.path.join(mnt, "d3/f003.bin"), "rb") as f:
                assert f.read() == members["d3/f003.bin"]
            assert got.count(b"READY=1") == 1
            # shardfs closes its end after notifying
            rest = read_ready(rfd, timeout=5)
            assert rest == b"", "more on notify_fd after READY=1: %r" % rest
            check_mount(mnt, members)
        finally:
            os.close(rfd)
            lib.unmount(mnt)
            try:
                rc = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            errf.close()
    if foreground:
        assert rc == 0
    else:
        assert rc == 0, "the launching process exited %d" % rc


@pytest.mark.timeout(60)
def test_notify_fd_no_ready_when_mount_fails(tmp_path):
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"this is not a tar archive\n" * 100)
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    rfd, wfd = os.pipe()
    with lib.registered_mount(mnt):
        proc = subprocess.Popen([lib.SHARDFS, "-f", "-o", "notify_fd=%d" % wfd,
                                 str(bad), str(mnt)],
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(wfd,))
        os.close(wfd)
        try:
            got = read_ready(rfd)
            rc = proc.wait(timeout=30)
        finally:
            os.close(rfd)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert got == b"", "notify_fd got %r from a mount that failed" % got
    assert rc == 1
    assert not lib.is_mounted(mnt)


# ------------------------------------------------ readiness: NOTIFY_SOCKET


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_notify_socket_ready(tmp_path, kind):
    shard, members = make_data(tmp_path, n=400)
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    sockdir = tempfile.mkdtemp(prefix="sfn-")   # short: sun_path is 108 bytes
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if kind == "path":
        addr = os.path.join(sockdir, "notify")
        sock.bind(addr)
        env_addr = addr
    else:
        name = "shardfs-test-%s" % uuid.uuid4().hex[:12]
        sock.bind("\0" + name)
        env_addr = "@" + name
    env = dict(os.environ, NOTIFY_SOCKET=env_addr)
    try:
        with lib.foreground_mount(shard, mnt, err_path, env=env,
                                  wait_mounted=False) as proc:
            sock.settimeout(30)
            try:
                msg = sock.recv(4096)
            except socket.timeout:
                raise AssertionError("no datagram on NOTIFY_SOCKET within 30 s: %s"
                                     % open(err_path, "rb").read())
            # usable the moment READY=1 is received
            assert lib.is_mounted(mnt), "READY=1 before the mount existed"
            assert sorted(os.listdir(mnt)) == ["d0", "d1", "d2", "d3"]
            assert msg.split(b"\n")[0] == b"READY=1" or b"READY=1" in msg.split(b"\n"), msg
            check_mount(mnt, members)
            assert proc.poll() is None
    finally:
        sock.close()
        if kind == "path":
            os.unlink(addr)
        os.rmdir(sockdir)


# ------------------------------------------------- SIGTERM under load


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT],
                         ids=["SIGTERM", "SIGINT"])
def test_signal_while_reading_exits_cleanly(tmp_path, sig):
    """A signal while 8 threads read: the process exits 0 within seconds,
    the mount is gone, and no reader ever got wrong bytes (errors after
    unmount are expected: ENOTCONN, ECONNABORTED for requests in flight
    when the daemon closed /dev/fuse, ECANCELED for those the kernel was
    tearing down with the io_uring queues (as test_core_transport and
    test_package expect too), or ENOENT once the path falls through to
    the empty mountpoint directory)."""
    members = {"m%03d.bin" % i: lib.deterministic_bytes(("sig", i),
                                                        (i * 104729) % 3_000_000)
               for i in range(60)}
    shard = tmp_path / "s.tar"
    lib.tar_from_members(shard, sorted(members.items()))
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    bad = []
    errnos = set()
    counts = [0] * 8
    stop = threading.Event()

    def reader(i):
        rnd = random.Random(i)
        names = sorted(members)
        while not stop.is_set():
            name = rnd.choice(names)
            data = members[name]
            try:
                fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
            except OSError as e:
                errnos.add(e.errno)
                time.sleep(0.01)
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                off = rnd.randrange(len(data) + 1)
                got = os.pread(fd, rnd.randrange(1, 1 << 20), off)
                if got != data[off:off + len(got)] or \
                        (len(got) == 0 and off < len(data)):
                    bad.append((name, off, len(got)))
                counts[i] += 1
            except OSError as e:
                errnos.add(e.errno)
            finally:
                os.close(fd)

    with lib.foreground_mount(shard, mnt, err_path) as proc:
        threads = [threading.Thread(target=reader, args=(i,), daemon=True)
                   for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(2)
        before = sum(counts)
        proc.send_signal(sig)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            raise AssertionError("shardfs -f did not exit within 15 s of %s "
                                 "under load" % sig.name)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(20)
        assert not any(t.is_alive() for t in threads), "readers hung"
        assert rc == 0, "exit %d after %s under load: %s" % (
            rc, sig.name, open(err_path, "rb").read())
        assert not lib.is_mounted(mnt)
    assert before > 0, "no read completed before the signal"
    assert not bad, "wrong bytes: %r" % bad[:5]
    unexpected = errnos - {errno.ENOTCONN, errno.ECONNABORTED, errno.ENOENT,
                           errno.ECANCELED}
    assert not unexpected, "readers saw %s" % sorted(
        errno.errorcode[e] for e in unexpected)
