#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Run a command and report its peak resident memory split as the kernel
splits it: anonymous (the heap: what a build holds) and file-backed (pages
of mapped files, such as an index file verified after it is written:
shared with the page cache and reclaimable).  /usr/bin/time -v reports
only their sum (ru_maxrss).

    /usr/bin/python3 tests/bench/peak_rss.py shardfs-index -j 2 SET

Samples /proc/PID/status every 10 ms (a peak shorter than that can be
missed; ru_maxrss, printed too, cannot).
"""
import os
import resource
import subprocess
import sys
import time


def sample(pid):
    """(RssAnon, RssFile) of @pid in KiB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return (int(fields["RssAnon"].split()[0]), int(fields["RssFile"].split()[0]))
    except (OSError, KeyError, ValueError):
        return None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    start = time.monotonic()
    p = subprocess.Popen(sys.argv[1:])
    anon = file = 0
    while p.poll() is None:
        s = sample(p.pid)
        if s:
            anon, file = max(anon, s[0]), max(file, s[1])
        time.sleep(0.01)
    wall = time.monotonic() - start
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"peak_rss: exit {p.returncode}, {wall:.2f} s, {ru.ru_utime:.2f} user + "
          f"{ru.ru_stime:.2f} sys, peak anon {anon / 1024:.0f} MiB, peak file "
          f"{file / 1024:.0f} MiB, maxrss {ru.ru_maxrss / 1024:.0f} MiB",
          file=sys.stderr)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
