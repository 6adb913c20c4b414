# SPDX-License-Identifier: Apache-2.0
"""What starves the GPUs?  The measurements behind shardfs-pace's
bottleneck, taken over the measured steps only (standard library only):

- the machine: CPU busy and iowait from `/proc/stat` (per step, and over
  the run), context switches;
- processes: the CPU of the mount's daemon (its pid from the stats) and
  of this process's DataLoader workers (`/proc/PID/stat`), the bytes the
  daemon read from
  block devices (`/proc/PID/io`: what did not come from the page cache);
- the mount (`/.shardfs/stats`): FUSE requests and their mean latency,
  shard reads and bytes, and for http:// and s3:// shards the GETs, bytes
  and mean GET latency the storage served;
- the GPU (`nvidia-smi`, with --device cuda): utilisation, polled.

`diagnose()` names the bottleneck from those figures -- decoding CPU,
storage latency, storage bandwidth, the FUSE daemon, or the GPU (the
step's compute: delivery keeps pace) -- with the figure that shows it and
one suggestion.  The thresholds are named constants below; the reasoning
is in `diagnose()`.
"""
import os
import shutil
import subprocess
import threading
import time

__all__ = ["cpu_times", "Probe", "GpuPoll", "storage_report", "diagnose"]

CLK_TCK = os.sysconf("SC_CLK_TCK")
# workers (or the main process, without workers) busy this share of the
# CPUs they can use: decoding is the limit
CPU_BOUND_WORKER_SHARE = 0.6
# ... or the machine this busy while the workers use at least
CPU_BOUND_BUSY = 0.9
CPU_BOUND_BUSY_WORKER_SHARE = 0.3
# the daemon's threads busy this many CPUs: serving FUSE is the limit
FUSE_DAEMON_BOUND_CPUS = 0.8
# a first byte later than this on average: storage latency; earlier, the
# transfers themselves are slow: storage bandwidth
STORAGE_LATENCY_MS = 50.0
# a cache served at least this share of the bytes: the steps measured it
PAGE_CACHE_SHARE = 0.9
# the loaders spend this share of their time in FUSE reads: storage
STORAGE_BOUND_IO_SHARE = 0.3
# the machine waits for local storage this share of its time
LOCAL_STORAGE_IOWAIT = 0.15
# the data waits less than this share of the measured time: the compute,
# not the data, sets the pace.  The share of the time, not the mean of
# each step's share: a loader slower than the steps delivers in bursts
# (every worker's batch at once, then a long wait), and the mean of the
# steps' shares hid a loader that kept the steps waiting 80% of the time.
GPU_BOUND_WAIT = 0.1


# ------------------------------------------------------------- /proc

def cpu_times():
    """(busy, iowait, total) jiffies of all CPUs and the context switches
    so far, from /proc/stat."""
    busy = iowait = total = ctxt = 0
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields[0] == "cpu":
                v = [int(x) for x in fields[1:9]]    # user..steal
                total, iowait = sum(v), v[4]
                busy = total - v[3] - v[4]
            elif fields[0] == "ctxt":
                ctxt = int(fields[1])
    return {"busy": busy, "iowait": iowait, "total": total, "ctxt": ctxt}


def cpu_share(a, b):
    """(busy, iowait) shares of the CPUs' time between two cpu_times()."""
    total = b["total"] - a["total"]
    if total <= 0:
        return 0.0, 0.0
    return (b["busy"] - a["busy"]) / total, (b["iowait"] - a["iowait"]) / total


def process_cpu_seconds(pid):
    """User + system CPU seconds of process PID (all its threads), or None
    when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_read_bytes(pid):
    """Bytes PID had read from block devices (/proc/PID/io), or None."""
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _processes():
    """(pid, parent pid) of every process that can be read."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        yield int(name), int(stat.rsplit(")", 1)[1].split()[1])


def child_pids(parent):
    return [pid for pid, ppid in _processes() if ppid == parent]


class Probe:
    """Snapshots of the machine, the daemon, this process and its
    workers, and of the mount's stats, at the start and the end of the
    measured steps; per step, the CPU shares."""

    def __init__(self, mountpoint, read_stats):
        self.mountpoint, self.read_stats = mountpoint, read_stats
        stats = read_stats(mountpoint)
        # the mount says which process serves it (shardfs since issue 33)
        self.daemon = stats.get("pid") if stats else None
        self.start = self.end = None
        self.last_cpu = None

    def snapshot(self):
        workers = {pid: process_cpu_seconds(pid) for pid in child_pids(os.getpid())}
        return {"t": time.monotonic(), "cpu": cpu_times(),
                "stats": self.read_stats(self.mountpoint),
                "self_cpu": process_cpu_seconds(os.getpid()),
                "daemon_cpu": process_cpu_seconds(self.daemon) if self.daemon else None,
                "daemon_read": process_read_bytes(self.daemon) if self.daemon else None,
                "workers": {p: s for p, s in workers.items() if s is not None}}

    def begin(self):
        self.start = self.snapshot()
        self.last_cpu = self.start["cpu"]

    def step(self):
        """The CPU shares (busy, iowait) since the last step."""
        now = cpu_times()
        shares, self.last_cpu = cpu_share(self.last_cpu, now), now
        return shares

    def finish(self):
        self.end = self.snapshot()

    def system_report(self, total_workers):
        """The machine and the processes over the measured steps."""
        a, b = self.start, self.end
        secs = max(b["t"] - a["t"], 1e-9)
        busy, iowait = cpu_share(a["cpu"], b["cpu"])
        workers = sum(s - a["workers"].get(p, 0.0) for p, s in b["workers"].items())
        cpus = os.cpu_count() or 1
        report = {"cpus": cpus, "cpu_busy": busy, "cpu_iowait": iowait,
                  "context_switches_per_s": (b["cpu"]["ctxt"] - a["cpu"]["ctxt"]) / secs,
                  "workers": total_workers,
                  "workers_cpus": workers / secs,
                  "main_process_cpus": (b["self_cpu"] - a["self_cpu"]) / secs,
                  "daemon_pid": self.daemon, "daemon_cpus": None,
                  "daemon_disk_read_bytes": None}
        if a["daemon_cpu"] is not None and b["daemon_cpu"] is not None:
            report["daemon_cpus"] = (b["daemon_cpu"] - a["daemon_cpu"]) / secs
        if a["daemon_read"] is not None and b["daemon_read"] is not None:
            report["daemon_disk_read_bytes"] = b["daemon_read"] - a["daemon_read"]
        return report


class GpuPoll:
    """GPU utilisation (%) polled with nvidia-smi every INTERVAL seconds
    while running; mean() is None without nvidia-smi or samples."""

    INTERVAL = 0.2

    def __init__(self):
        self.samples, self.stop_event = [], threading.Event()
        self.smi = shutil.which("nvidia-smi")
        self.thread = None

    def _poll(self):
        while not self.stop_event.wait(self.INTERVAL):
            try:
                out = subprocess.run(
                    [self.smi, "--query-gpu=utilization.gpu",
                     "--format=csv,noheader,nounits"], capture_output=True,
                    text=True, timeout=5).stdout
                values = [float(v) for v in out.split()]
            except (OSError, ValueError, subprocess.TimeoutExpired):
                continue
            if values:
                self.samples.append(sum(values) / len(values))

    def start(self):
        if self.smi:
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()

    def stop(self):
        self.stop_event.set()
        if self.thread:
            self.thread.join()

    def mean(self):
        return sum(self.samples) / len(self.samples) if self.samples else None


# ----------------------------------------------------------- the mount

def _delta_mean(before, after, count_key, mean_key):
    """The mean over the window of a counter kept as (count, mean)."""
    n = after[count_key] - before[count_key]
    if n <= 0:
        return 0.0
    return (after[mean_key] * after[count_key] - before[mean_key] * before[count_key]) / n


def storage_report(before, after, files_read, system=None):
    """What the storage served between two stats snapshots of the mount
    (None off shardfs) while FILES_READ files were read."""
    report = {"files_read": files_read}
    if before is None or after is None:
        return report
    ops = {n: after["ops"][n]["count"] - before["ops"][n]["count"] for n in after["ops"]}
    report.update({
        "fuse_requests": sum(ops.values()),
        "fuse_requests_by_op": ops,
        "fuse_read_latency_mean_us": _delta_mean(before["ops"]["read"],
                                                 after["ops"]["read"],
                                                 "count", "mean_us"),
        "shard_reads": after["backing_reads"] - before["backing_reads"],
        "shard_read_bytes": after["backing_read_bytes"] - before["backing_read_bytes"],
        "bytes_returned": after["read_bytes"] - before["read_bytes"],
        "pushed_ahead_bytes": after["pushahead"]["bytes"] - before["pushahead"]["bytes"],
        "errors": after["errors"] - before["errors"],
    })
    if "remote" in after:
        a, b = before["remote"], after["remote"]
        gets = b["requests"] - a["requests"]
        report.update({"remote_gets": gets, "remote_bytes": b["bytes"] - a["bytes"],
                       "remote_get_latency_mean_ms": _delta_mean(
                           a, b, "requests", "latency_mean_ms"),
                       "remote_gets_per_sample": gets / files_read if files_read else 0.0})
        report["storage_bytes"] = report["remote_bytes"]
    else:
        disk = system and system.get("daemon_disk_read_bytes")
        report["storage_bytes"] = disk if disk is not None else report["shard_read_bytes"]
    report["page_cache"] = page_cache_note(
        report, system, after["bytes"] / after["files"] if after["files"] else 0)
    return report


def page_cache_note(report, system, mean_file_bytes):
    """Why the storage served (almost) nothing, when it did not: None, or
    which cache served the measured steps.  The files read are taken to
    be of the mount's mean file size."""
    expected = report["files_read"] * mean_file_bytes
    if not expected:
        return None
    if report["bytes_returned"] < (1 - PAGE_CACHE_SHARE) * expected:
        return "the kernel's page cache of the mount served about %.0f%% of the " \
               "bytes read (FUSE returned %d B of about %d B): the steps " \
               "measured memory, not storage" % (
                   100 - 100.0 * report["bytes_returned"] / expected,
                   report["bytes_returned"], expected)
    if "remote_gets" in report:
        return "shardfs's memory or disk cache served every read (no GET)" \
            if report["remote_gets"] == 0 else None
    disk = system and system.get("daemon_disk_read_bytes")
    if disk is not None and disk < (1 - PAGE_CACHE_SHARE) * report["shard_read_bytes"]:
        return "the page cache of the shard files served %.0f%% of the shard " \
               "bytes (the daemon read %d B from disk)" % (
                   100 - 100.0 * disk / report["shard_read_bytes"], disk)
    return None


# ------------------------------------------------------------ the verdict

def _workers_share(system):
    """The share of the CPUs the loaders can use that they did use."""
    if system["workers"]:
        usable = min(system["workers"], system["cpus"])
        return system["workers_cpus"] / usable
    return system["main_process_cpus"]


def _cpu_bound(system):
    share = _workers_share(system)
    return share >= CPU_BOUND_WORKER_SHARE or (
        system["cpu_busy"] >= CPU_BOUND_BUSY and share >= CPU_BOUND_BUSY_WORKER_SHARE)


def _cpu_verdict(system):
    w, c = system["workers"], system["cpus"]
    figure = "CPU busy %.0f%% of %d CPUs (iowait %.0f%%); the %d DataLoader " \
             "workers used %.2f CPUs" % (100 * system["cpu_busy"], c,
                                        100 * system["cpu_iowait"], w,
                                        system["workers_cpus"])
    if system["cpu_busy"] >= CPU_BOUND_BUSY and \
            _workers_share(system) < CPU_BOUND_WORKER_SHARE:
        figure += ", other processes the rest"
    if w > c:
        hint = "%d workers share %d CPUs: more workers cannot help; give the " \
               "node more CPUs per GPU, a cheaper transform, or decode on the " \
               "GPU (nvJPEG, DALI)" % (w, c)
    else:
        hint = "more DataLoader workers (up to the CPUs), a cheaper transform, " \
               "or decoding on the GPU (nvJPEG, DALI)"
    return "decoding CPU", figure, hint


def _remote_verdict(storage, need_bps, seconds):
    """Latency when the first bytes are slow to come, else bandwidth: the
    mount's GET latency is the time to the first byte."""
    gets, ttfb = storage["remote_gets"], storage["remote_get_latency_mean_ms"]
    got = storage["remote_bytes"] / seconds if seconds > 0 else 0.0
    figure = "%d GETs of %.0f kB, first byte after %.0f ms on average; %.2f MB/s " \
             "came from storage, the job needs %.2f MB/s" % (
                 gets, storage["remote_bytes"] / gets / 1e3, ttfb, got / 1e6,
                 need_bps / 1e6)
    if ttfb >= STORAGE_LATENCY_MS:
        return "storage latency", figure, \
            "more requests in flight: more DataLoader workers, a larger " \
            "-o readahead or chunk_size, ShardAwareSampler (whole shards in order)"
    return "storage bandwidth", figure, \
        "a faster link or endpoint, shards nearer the nodes, or a local copy: " \
        "-o cache_dir= on a node-local disk serves the later epochs"


def _gpu_verdict(verdict, gpu_util):
    figure = "waiting for data %.1f%% of the measured time" % (
        100 * verdict["wait_share"])
    if gpu_util is not None:
        figure += ", GPU busy %.0f%%" % gpu_util
    hint = "none for the data: the step's compute sets the pace" \
        if verdict["keeps_pace"] else "the data is on time: the steps' compute " \
        "took longer than --step-time (a busy machine or GPU)"
    return "GPU", figure, hint


def _io_share(verdict, system, storage):
    """The share of the loaders' time spent in FUSE reads (which wait for
    the storage), or None off shardfs: the reads' latency per sample
    against the wall time a loader spends per sample."""
    files = storage.get("files_read")
    if not files or "fuse_read_latency_mean_us" not in storage:
        return None
    reads = storage["fuse_requests_by_op"].get("read", 0)
    io = reads * storage["fuse_read_latency_mean_us"] / 1e6 / files
    wall = max(system["workers"], 1) * verdict["measured_seconds"] / files
    return io / wall if wall > 0 else 0.0


def _starved_verdict(verdict, system, storage):
    """Why the loaders were late, when they were: storage when they spent
    at least STORAGE_BOUND_IO_SHARE of their time in reads, the daemon
    when it was busy, else the CPU (their own decoding, or other
    processes that took the CPUs from them)."""
    need = verdict["required_per_node"] * (
        storage["storage_bytes"] / storage["files_read"]
        if storage.get("files_read") and "storage_bytes" in storage else 0)
    io = _io_share(verdict, system, storage)
    if _cpu_bound(system) or (io is not None and io < STORAGE_BOUND_IO_SHARE
                              and not _daemon_bound(system)):
        return _cpu_verdict(system)
    if _daemon_bound(system):
        return "FUSE daemon", "the shardfs daemon used %.2f CPUs; FUSE reads " \
            "took %.0f us on average" % (system["daemon_cpus"],
                                         storage["fuse_read_latency_mean_us"]), \
            "-o io_uring_threads= (kernel 6.14+), or fewer, larger reads"
    if storage.get("remote_gets"):
        return _remote_verdict(storage, need, verdict["measured_seconds"])
    if system["cpu_iowait"] >= LOCAL_STORAGE_IOWAIT or io is None:
        return "storage bandwidth", "iowait %.0f%% of the CPUs' time; %.1f MB " \
            "read from the storage" % (100 * system["cpu_iowait"],
                                       storage.get("storage_bytes", 0) / 1e6), \
            "faster or more disks, or a set that fits the page cache"
    return "storage latency", "the loaders spent %.0f%% of their time in FUSE " \
        "reads of %.0f us on average" % (100 * io, storage["fuse_read_latency_mean_us"]), \
        "more DataLoader workers: each waits for its reads"


def _daemon_bound(system):
    return system["daemon_cpus"] is not None and \
        system["daemon_cpus"] >= FUSE_DAEMON_BOUND_CPUS


def diagnose(verdict, system, storage, gpu_util=None):
    """{bottleneck, figure, suggestion} for the measured steps: the GPU
    when the data waits less than GPU_BOUND_WAIT of the time, else what kept
    the loaders late (_starved_verdict)."""
    if verdict["wait_share"] < GPU_BOUND_WAIT:
        name, figure, hint = _gpu_verdict(verdict, gpu_util)
    else:
        name, figure, hint = _starved_verdict(verdict, system, storage)
    return {"bottleneck": name, "figure": figure, "suggestion": hint}
