# SPDX-License-Identifier: Apache-2.0
"""Host-level helpers for the benchmark: cache control, timing, a
description of the machine, and observation of the shardfs daemon
(its pid, resident memory and CPU time).

Everything here reads /proc or runs a standard tool; nothing depends on
the data set or on shardfs internals, so the same helpers serve the
loose-tree, shardfs and raw-shard measurements alike.
"""
import contextlib
import os
import platform
import shutil
import subprocess
import time


def drop_caches():
    """Make the next access cold: flush dirty pages, then drop the page
    cache, dentries and inodes (this also empties FUSE's caches)."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


@contextlib.contextmanager
def fuse_io_uring(mode):
    """For the block, set the fuse module's enable_uring ("on", "off";
    "keep" leaves it alone), then put back what it was; a setting that
    is already what is asked for is not written.  Yields what the
    run had: "on", "off", or "not in this kernel"."""
    if not os.path.exists(ENABLE_URING):
        yield "not in this kernel"
        return
    with open(ENABLE_URING) as f:
        before = f.read().strip()
    want = {"on": "Y", "off": "N"}.get(mode, before)
    if want == before:      # nothing to switch: leave the module alone
        yield "on" if want == "Y" else "off"
        return
    with open(ENABLE_URING, "w") as f:
        f.write(want)
    try:
        yield "on" if want == "Y" else "off"
    finally:
        with open(ENABLE_URING, "w") as f:
            f.write(before)


def check_can_drop_caches():
    if os.geteuid() != 0 or not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        raise SystemExit("bench: cold measurements need root "
                         "(writing /proc/sys/vm/drop_caches)")


def timed(fn, *args, **kwargs):
    """Run fn and return (wall seconds, its return value)."""
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def _run_text(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return ""


def _meminfo_kb(field):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def describe_disk(path):
    """Device, file system and rotational flag of the disk holding path."""
    source = _run_text(["findmnt", "-n", "-o", "SOURCE", "--target", path])
    fstype = _run_text(["findmnt", "-n", "-o", "FSTYPE", "--target", path])
    dev = os.path.basename(source)
    base = dev.rstrip("0123456789") if dev.startswith(("sd", "vd")) else dev
    rota = ""
    with contextlib.suppress(OSError):
        with open("/sys/block/%s/queue/rotational" % base) as f:
            rota = "rotational" if f.read().strip() == "1" else "non-rotational"
    size = shutil.disk_usage(path).total / 2**30
    parts = [source or "?", fstype or "?", "%.0f GiB" % size]
    if base.startswith("vd"):
        parts.append("virtio (kernel says %s)" % (rota or "?"))
    elif rota:
        parts.append(rota)
    return ", ".join(parts)


def machine_info(path):
    """What the report states about the machine the run used."""
    return {
        "cpu": "%s, nproc %d" % (_cpu_model(), os.cpu_count()),
        "ram": "%.1f GiB" % (_meminfo_kb("MemTotal") / 2**20),
        "disk": describe_disk(path),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def free_bytes(path):
    return shutil.disk_usage(path).free


# --- the shardfs daemon -------------------------------------------------

def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def daemon_pid(mountpoint, program="shardfs"):
    """Pid of the shardfs process serving mountpoint (pgrep -f on the
    mountpoint, keeping only processes whose argv[0] is shardfs)."""
    mp = os.path.realpath(mountpoint)
    out = _run_text(["pgrep", "-f", mp])
    for pid in out.split():
        argv = _cmdline(pid)
        if argv and os.path.basename(argv[0]) == program and \
                any(os.path.realpath(a) == mp for a in argv[1:]):
            return int(pid)
    return None


def process_status(pid):
    """VmRSS and VmHWM (peak RSS) of pid in bytes."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1]) * 1024
    return out


def process_cpu_seconds(pid):
    """User + system CPU time of all threads of pid, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])   # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")



def voluntary_switches(pid):
    """Voluntary context switches of all threads of pid, so far."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                total += sum(int(line.split()[1]) for line in f
                             if line.startswith("voluntary_ctxt_switches"))
        except FileNotFoundError:
            continue    # a thread that ended
    return total


def load_average():
    """The 1-minute load average: other work on the machine skews timings."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def _parent(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def other_benchmarks(marker="tests/bench/"):
    """Pids of processes running something from tests/bench/ that are
    neither this process's ancestors nor its descendants: another
    benchmark dropping caches would spoil this one's warm figures."""
    me, ancestors, pid = os.getpid(), set(), os.getpid()
    while pid > 1:
        pid = _parent(pid)
        ancestors.add(pid)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        pid = int(pid)
        if pid == me or pid in ancestors:
            continue
        if marker not in " ".join(_cmdline(pid)):
            continue
        chain = pid
        while chain > 1 and chain != me:
            chain = _parent(chain)
        if chain != me:
            found.append(pid)
    return found


def wait_until_quiet(max_load, timeout, log):
    """Wait (at most timeout s) until the 1-minute load average is below
    max_load and no other benchmark runs; True if that happened."""
    deadline = time.time() + timeout
    if load_average() >= max_load or other_benchmarks():
        log("waiting for load < %.2f and no other benchmark (now %.2f, %s)"
            % (max_load, load_average(), other_benchmarks() or "none"))
    while load_average() >= max_load or other_benchmarks():
        if time.time() >= deadline:
            log("machine still busy (load %.2f, other benchmarks %s) after %d s:"
                " starting anyway" % (load_average(), other_benchmarks(), timeout))
            return False
        time.sleep(10)
    return True


def pressure():
    """Share of the last minute some task waited for CPU / I/O (PSI), in %."""
    out = {}
    for resource_name in ("cpu", "io"):
        try:
            with open("/proc/pressure/" + resource_name) as f:
                some = f.readline().split()
            out[resource_name] = float(some[2].split("=")[1])   # avg60
        except (OSError, IndexError, ValueError):
            pass
    return out
