# SPDX-License-Identifier: Apache-2.0
"""Where a cold os.scandir of one big directory of a shardfs mount goes.

Mounts SHARDS on MNT with BUILD's shardfs (and any -o options after
them), lists DIR once so that the daemon is warm, drops every cache,
then times an os.scandir of DIR, a stat of every entry in scandir
order and a second os.scandir.  For each, one line: the wall time, the reader's user and system
CPU (getrusage: the kernel's work for the reader, such as the inodes
and dentries a READDIRPLUS reply makes, is its system time), the
daemon's CPU (/proc/PID/stat) and the requests it answered (READDIR and
READDIRPLUS together, LOOKUP, GETATTR; /.shardfs/stats).  Unmounts.

    /usr/bin/python3 tests/bench/scandir_cost.py BUILD SHARDS MNT DIR [-o OPTS]

docs/benchmarks-scale.md, "os.scandir of a million entries", has the
figures and what they say.
"""
import json
import os
import resource
import subprocess
import sys
import time


def daemon_pid(shards, mnt):
    out = subprocess.run(["pgrep", "-nf", "shardfs -o quiet.* %s %s" % (shards, mnt)],
                         capture_output=True, text=True).stdout.split()
    if not out:
        raise SystemExit("scandir_cost: no daemon for %s" % mnt)
    return int(out[0])


def daemon_cpu(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ops(mnt):
    with open(os.path.join(mnt, ".shardfs", "stats")) as f:
        return {k: v["count"] for k, v in json.load(f)["ops"].items()}


class Phase:
    """Wall time, reader CPU, daemon CPU and requests of a with-block."""

    def __init__(self, pid, mnt):
        self.pid, self.mnt = pid, mnt

    def __enter__(self):
        self.ops0, self.cpu0 = ops(self.mnt), daemon_cpu(self.pid)
        self.ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.user = ru.ru_utime - self.ru0.ru_utime
        self.sys = ru.ru_stime - self.ru0.ru_stime
        self.daemon = daemon_cpu(self.pid) - self.cpu0
        now = ops(self.mnt)
        self.req = {k: now.get(k, 0) - self.ops0.get(k, 0) for k in now}

    def line(self, what, n):
        return ("%s: %d entries in %.2f s (%.0f k/s); reader user %.2f s, sys %.2f s; "
                "daemon %.2f s; readdir requests %d, lookups %d, getattrs %d"
                % (what, n, self.wall, n / self.wall / 1e3, self.user, self.sys,
                   self.daemon, self.req.get("readdir", 0), self.req.get("lookup", 0),
                   self.req.get("getattr", 0)))


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    build, shards, mnt, sub = sys.argv[1:5]
    subprocess.run([os.path.join(build, "shardfs"), "-o", "quiet", *sys.argv[5:],
                    shards, mnt], check=True)
    try:
        pid = daemon_pid(shards, mnt)
        root = os.path.join(mnt, sub)
        os.listdir(root)
        subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
        with Phase(pid, mnt) as scan:
            names = [e.name for e in os.scandir(root)]
        with Phase(pid, mnt) as stat:
            for name in names:
                os.stat(os.path.join(root, name))
        with Phase(pid, mnt) as again:
            n = sum(1 for _ in os.scandir(root))
        print(scan.line("%s: os.scandir, cold" % build, len(names)))
        print(stat.line("%s: stat of every entry after it" % build, len(names)))
        print(again.line("%s: os.scandir again" % build, n))
    finally:
        subprocess.run(["umount", mnt])


if __name__ == "__main__":
    main()
