# SPDX-License-Identifier: Apache-2.0
"""Count the system calls the shardfs daemon makes, split by what they
touch: the shard storage, /dev/fuse, or anything else.

strace is attached to every thread of the running daemon (-f -p PID) for
the duration of a `with` block, with -y so that each file descriptor is
printed with its path; a call counts as a storage call when it names a
path under the shard directory.  Plain `strace -c` cannot make that split
(the daemon's reads of /dev/fuse would drown the shard reads).
"""
import collections
import os
import re
import signal
import subprocess
import time


READ_CALLS = {"read", "pread64", "readv", "preadv", "preadv2", "splice",
              "copy_file_range", "sendfile", "sendfile64"}
_LINE = re.compile(r"^(\d+)\s+(.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)$")
_RETURN = re.compile(r"\)\s+=\s+(-?\d+)")


class Traced:
    """strace attached to pid while the block runs; .summary afterwards."""

    def __init__(self, pid, out_path, storage_dir,
                 syscalls="%file,%desc,fadvise64,readahead"):
        self.pid, self.out_path = pid, out_path
        self.storage_dir = os.path.realpath(storage_dir)
        self.argv = ["strace", "-f", "-y", "-s", "0", "-e", "trace=" + syscalls,
                     "-o", out_path, "-p", str(pid)]
        self.summary = None

    def __enter__(self):
        self.err_path = self.out_path + ".stderr"
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(self.argv, stderr=self.err,
                                     stdin=subprocess.DEVNULL)
        self._wait_attached()
        return self

    def _wait_attached(self, timeout=10.0):
        """Wait for strace's "Process N attached [with M threads]"."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.err_path) as f:
                if "attached" in f.read():
                    time.sleep(0.2)
                    return
            if self.proc.poll() is not None:
                raise RuntimeError("strace exited: " + open(self.err_path).read())
            time.sleep(0.05)
        raise RuntimeError("strace did not attach to pid %d" % self.pid)

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        self.err.close()
        self.summary = summarize(self.out_path, self.storage_dir)
        return False


def _completed_calls(lines):
    """Yield (syscall name, full text) per completed call, joining the
    `<unfinished ...>` and `<... resumed>` halves of interleaved threads."""
    pending = {}
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        pid, rest = m.groups()
        resumed = _RESUMED.match(rest)
        if resumed:
            name, head = pending.pop(pid, (resumed.group(1), ""))
            yield name, head + resumed.group(2)
            continue
        call = _CALL.match(rest)
        if not call:
            continue                      # signals, exits
        if rest.endswith("<unfinished ...>"):
            pending[pid] = (call.group(1), rest)
        else:
            yield call.group(1), rest


def summarize(path, storage_dir):
    """Counts per target and syscall, plus the number and total bytes of
    data reads from storage."""
    counts = {"storage": collections.Counter(), "fuse": collections.Counter(),
              "other": collections.Counter()}
    reads = read_bytes = 0
    with open(path, errors="replace") as f:
        for name, text in _completed_calls(f):
            if storage_dir in text:
                target = "storage"
            elif "/dev/fuse" in text:
                target = "fuse"
            else:
                target = "other"
            counts[target][name] += 1
            returned = _RETURN.findall(text)
            if target == "storage" and name in READ_CALLS and returned:
                reads += 1
                read_bytes += max(0, int(returned[-1]))
    return {"counts": {k: dict(v.most_common()) for k, v in counts.items()},
            "storage_calls": sum(counts["storage"].values()),
            "storage_reads": reads, "storage_read_bytes": read_bytes}
