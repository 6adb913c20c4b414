# SPDX-License-Identifier: Apache-2.0
"""Stress: many concurrent readers, every byte verified.

A few hundred members of varied sizes (0, 1, 511, 512, 513 bytes, 1 MiB
and more, random sizes) in several shards.  For a bounded time
(SHARDFS_STRESS_SECONDS, default 10 s per test; longer runs are a
setting away):

- 64 threads in one process, and separately 8 processes, read random
  members: whole reads, partial reads at random offsets and lengths
  (also at and past the end), reads through O_DIRECT and after dropping
  the file's cached pages (so they reach the daemon), held-open files
  and fresh opens;
- while others run readdir and stat storms (listdir, os.walk, stat of
  random paths, lookups of missing names) and the dentry and inode
  caches are dropped now and then so lookups reach the daemon again.

Every byte read is compared with the source data; every listing and
stat with the source tree.  No error is allowed, the daemon must survive,
/.shardfs/stats must count no error, and its resident memory (VmRSS) must
stay bounded: the figures at start and end are printed.
"""
import errno
import mmap
import multiprocessing
import os
import random
import stat
import threading
import time
import traceback

import pytest

import shardfs_testlib as lib

SECONDS = float(os.environ.get("SHARDFS_STRESS_SECONDS", "10"))
RSS_SLACK_KB = 64 * 1024
MIB = 1 << 20
SPECIAL_SIZES = [0, 1, 511, 512, 513, 4095, 4096, 4097, 65536, MIB, MIB + 1,
                 2 * MIB + 7]


def build_data(tmp_path, nshards=4, per_shard=80):
    rnd = random.Random(20240601)
    files = {}
    shards = []
    k = 0
    for s in range(nshards):
        members = []
        for i in range(per_shard):
            if k < len(SPECIAL_SIZES):
                size = SPECIAL_SIZES[k]
            else:
                size = rnd.choice([0, 1, rnd.randrange(2, 2048),
                                   rnd.randrange(2048, 200_000),
                                   rnd.randrange(2048, 200_000),
                                   rnd.randrange(200_000, 1_500_000)])
            ext = rnd.choice(["jpg", "json", "cls", "bin"])
            name = "c%02d/sub%d/sample%05d.%s" % (k % 12, k % 3, k, ext)
            data = lib.deterministic_bytes(("stress", k), size)
            members.append((name, data))
            files[name] = data
            k += 1
        path = tmp_path / ("shard-%06d.tar" % s)
        lib.tar_from_members(path, members)
        shards.append(path)
    dirs = {}
    for name in files:
        parts = name.split("/")
        for depth in range(len(parts)):
            d = "/".join(parts[:depth])
            dirs.setdefault(d, set()).add(parts[depth])
    dirs = {d: sorted(v) for d, v in dirs.items()}
    return shards, files, dirs


class Worker:
    """One reader's loop; used by threads and by processes."""

    def __init__(self, mnt, files, dirs, seed, stop_at, storm=False):
        self.mnt = os.fspath(mnt)
        self.files = files
        self.names = sorted(files)
        self.dirs = dirs
        self.dir_names = sorted(dirs)
        self.rnd = random.Random(seed)
        self.stop_at = stop_at
        self.storm = storm
        self.counts = {"whole": 0, "partial": 0, "direct": 0, "listdir": 0,
                       "stat": 0, "walk": 0, "bytes": 0}
        self.errors = []
        self.held = {}

    def fail(self, msg):
        self.errors.append(msg)

    def path(self, name):
        return os.path.join(self.mnt, name)

    def pick(self):
        name = self.rnd.choice(self.names)
        return name, self.files[name]

    def whole(self):
        name, data = self.pick()
        with open(self.path(name), "rb", buffering=0) as f:
            if self.rnd.random() < 0.5:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            got = bytearray()
            step = self.rnd.choice([4096, 65536, 1 << 20, 3 << 20])
            while True:
                b = f.read(step)
                if not b:
                    break
                got += b
        if got != data:
            self.fail("%s: whole read gave %d bytes, %s" % (
                name, len(got), "differing" if len(got) == len(data) else
                "expected %d" % len(data)))
        self.counts["whole"] += 1
        self.counts["bytes"] += len(got)

    def offset_length(self, size):
        r = self.rnd.random()
        if r < 0.8:
            off = self.rnd.randrange(0, size + 1)
        else:
            off = self.rnd.choice([0, max(0, size - 1), size, size + 1,
                                   size + 4096, max(0, size - 512)])
        ln = self.rnd.choice([1, 2, 511, 512, 513, 4096, 4097, 65536,
                              131072 + 5, self.rnd.randrange(1, 2 * MIB)])
        return off, ln

    def partial(self):
        name, data = self.pick()
        off, ln = self.offset_length(len(data))
        fd = self.held.get(name)
        if fd is None:
            fd = os.open(self.path(name), os.O_RDONLY)
            if len(self.held) < 16 and self.rnd.random() < 0.5:
                self.held[name] = fd
        try:
            if self.rnd.random() < 0.2:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got = os.pread(fd, ln, off)
        finally:
            if self.held.get(name) != fd:
                os.close(fd)
        want = data[off:off + ln]
        if got != want:
            self.fail("%s: pread(%d, %d) gave %d bytes, expected %d%s" % (
                name, ln, off, len(got), len(want),
                " (differing)" if len(got) == len(want) else ""))
        self.counts["partial"] += 1
        self.counts["bytes"] += len(got)

    def direct(self):
        name, data = self.pick()
        size = len(data)
        off = self.rnd.randrange(0, size + 1) & ~4095
        ln = self.rnd.choice([4096, 65536, 1 << 20])
        buf = mmap.mmap(-1, ln)
        try:
            fd = os.open(self.path(name), os.O_RDONLY | os.O_DIRECT)
        except OSError as e:
            if e.errno == errno.EINVAL:
                return      # O_DIRECT refused by the kernel: not an error here
            raise
        try:
            n = os.preadv(fd, [buf], off)
            got = buf[:n]
        finally:
            os.close(fd)
            buf.close()
        want = data[off:off + ln]
        if got != want:
            self.fail("%s: O_DIRECT pread(%d, %d) gave %d bytes, expected %d" % (
                name, ln, off, len(got), len(want)))
        self.counts["direct"] += 1
        self.counts["bytes"] += len(got)

    def listdir(self):
        d = self.rnd.choice(self.dir_names)
        got = sorted(os.listdir(self.path(d)))
        if got != self.dirs[d]:
            self.fail("listdir(%r): %d names, expected %d" % (
                d, len(got), len(self.dirs[d])))
        self.counts["listdir"] += 1

    def stat_some(self):
        for _ in range(20):
            name, data = self.pick()
            st = os.stat(self.path(name))
            if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
                self.fail("stat(%s): mode %o size %d, expected a file of %d" % (
                    name, st.st_mode, st.st_size, len(data)))
            self.counts["stat"] += 1
        d = self.rnd.choice(self.dir_names)
        if not stat.S_ISDIR(os.stat(self.path(d)).st_mode):
            self.fail("stat(%r): not a directory" % d)
        missing = self.path(self.rnd.choice(self.dir_names) + "/no-such-%d" %
                            self.rnd.randrange(1000))
        try:
            os.stat(missing)
            self.fail("stat(%s) succeeded" % missing)
        except FileNotFoundError:
            pass

    def walk(self):
        seen = set()
        for dirpath, dirnames, filenames in os.walk(self.mnt):
            for n in filenames:
                seen.add(os.path.relpath(os.path.join(dirpath, n), self.mnt))
        if seen != set(self.names):
            self.fail("os.walk found %d files, expected %d" % (
                len(seen), len(self.names)))
        self.counts["walk"] += 1

    def step(self):
        r = self.rnd.random()
        if self.storm:
            if r < 0.45:
                self.listdir()
            elif r < 0.95:
                self.stat_some()
            else:
                self.walk()
        elif r < 0.35:
            self.whole()
        elif r < 0.75:
            self.partial()
        elif r < 0.85:
            self.direct()
        elif r < 0.93:
            self.listdir()
        else:
            self.stat_some()

    def run(self):
        try:
            while time.time() < self.stop_at and len(self.errors) < 20:
                try:
                    self.step()
                except OSError as e:
                    self.fail("%s: %s" % (type(e).__name__, e))
        except Exception:
            self.fail(traceback.format_exc())
        finally:
            for fd in self.held.values():
                os.close(fd)
            self.held = {}


def cache_dropper(stop_at, stop):
    """Drop dentries and inodes every few seconds so that lookups, stats
    and readdirs reach the daemon again, not only the kernel's caches."""
    while time.time() < stop_at - 1 and not stop.wait(3):
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")


def report(label, pid, rss_start, rss_end, stats, counts, elapsed):
    print("\n%s: %.1f s; daemon pid %d VmRSS start %d kB, end %d kB (%+d kB); "
          "ops %s; read_bytes %d; backing_reads %d; errors %d"
          % (label, elapsed, pid, rss_start, rss_end, rss_end - rss_start,
             {k: v["count"] for k, v in stats["ops"].items()},
             stats["read_bytes"], stats["backing_reads"], stats["errors"]))
    print("%s: client operations %s" % (label, counts))


def check_end(label, mnt, pid, rss_start, counts, errors, elapsed):
    assert lib.process_alive(pid), "%s: the daemon died" % label
    assert lib.is_mounted(mnt)
    rss_end = lib.vm_rss_kb(pid)
    stats = lib.read_stats(mnt)
    report(label, pid, rss_start, rss_end, stats, counts, elapsed)
    assert not errors, "%s: %d errors, first ones:\n  %s" % (
        label, len(errors), "\n  ".join(errors[:10]))
    assert stats["errors"] == 0, stats
    assert counts["whole"] > 0 and counts["partial"] > 0 and counts["listdir"] > 0
    assert rss_end <= rss_start + RSS_SLACK_KB, \
        "%s: daemon VmRSS grew from %d kB to %d kB" % (label, rss_start, rss_end)


def sum_counts(workers_counts):
    total = {}
    for c in workers_counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    return total


@pytest.mark.timeout(SECONDS + 120)
def test_stress_64_threads(tmp_path):
    shards, files, dirs = build_data(tmp_path)
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(map(str, shards)), mnt):
        pid = lib.daemon_pid(mnt)
        rss_start = lib.vm_rss_kb(pid)
        start = time.time()
        stop_at = start + SECONDS
        stop = threading.Event()
        workers = [Worker(mnt, files, dirs, seed=i, stop_at=stop_at,
                          storm=(i % 8 == 7)) for i in range(64)]
        threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
        dropper = threading.Thread(target=cache_dropper, args=(stop_at, stop),
                                   daemon=True)
        for t in threads:
            t.start()
        dropper.start()
        for t in threads:
            t.join(SECONDS + 60)
        stop.set()
        dropper.join(10)
        hung = sum(t.is_alive() for t in threads)
        assert not hung, "%d reader threads still blocked after the deadline" % hung
        errors = [e for w in workers for e in w.errors]
        check_end("64 threads", mnt, pid, rss_start,
                  sum_counts(w.counts for w in workers), errors,
                  time.time() - start)


def process_main(mnt, files, dirs, seed, stop_at, storm, queue):
    w = Worker(mnt, files, dirs, seed=seed, stop_at=stop_at, storm=storm)
    w.run()
    queue.put((seed, w.counts, w.errors[:20]))


@pytest.mark.timeout(SECONDS + 120)
def test_stress_8_processes(tmp_path):
    shards, files, dirs = build_data(tmp_path)
    mnt = tmp_path / "mnt"
    ctx = multiprocessing.get_context("fork")
    with lib.mounted(",".join(map(str, shards)), mnt):
        pid = lib.daemon_pid(mnt)
        rss_start = lib.vm_rss_kb(pid)
        start = time.time()
        stop_at = start + SECONDS
        queue = ctx.Queue()
        # 7 readers and one readdir/stat storm, each its own process
        procs = [ctx.Process(target=process_main,
                             args=(os.fspath(mnt), files, dirs, 1000 + i,
                                   stop_at, i == 7, queue), daemon=True)
                 for i in range(8)]
        stop = threading.Event()
        dropper = threading.Thread(target=cache_dropper, args=(stop_at, stop),
                                   daemon=True)
        for p in procs:
            p.start()
        dropper.start()
        results = []
        try:
            for _ in procs:
                results.append(queue.get(timeout=SECONDS + 60))
        finally:
            stop.set()
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join()
        dropper.join(10)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        errors = ["process %d: %s" % (seed, e) for seed, _, errs in results
                  for e in errs]
        check_end("8 processes", mnt, pid, rss_start,
                  sum_counts(c for _, c, _ in results), errors,
                  time.time() - start)
