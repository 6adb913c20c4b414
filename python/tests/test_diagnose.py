# SPDX-License-Identifier: Apache-2.0
"""shardfs-pace's verdict and diagnosis from recorded steps, without a
mount: a loader slower than the steps delivers in bursts (every worker's
batch at once, then a long wait), and the bottleneck is named from the
share of the time spent waiting, not from the mean of each step's share,
which hid such a loader (a CI run named the GPU at 9.9 % for a loader that
kept the steps waiting most of the time).  The runs on a real mount are in
tests/integration/test_pace_diagnosis.py."""
from shardfs import pace
from shardfs.diagnose import diagnose

SHAPE = {"required_per_node": 320.0, "nodes": 1}
STEP = 0.05


def records(waits):
    """Steps of STEP compute after WAITS seconds of waiting, 16 samples each."""
    out, t = [], 0.0
    for wait in waits:
        t += wait + STEP
        out.append({"wait": wait, "step": wait + STEP, "samples": 16, "t": t})
    return out


def system(workers_cpus, cpu_busy=0.95):
    return {"cpus": 2, "cpu_busy": cpu_busy, "cpu_iowait": 0.0,
            "context_switches_per_s": 1000.0, "workers": 4,
            "workers_cpus": workers_cpus, "main_process_cpus": 0.1,
            "daemon_pid": None, "daemon_cpus": 0.01,
            "daemon_disk_read_bytes": None}


STORAGE = {"files_read": 160, "storage_bytes": 160 * 1000,
           "fuse_requests_by_op": {"read": 160},
           "fuse_read_latency_mean_us": 20.0}


def test_bursty_loader_is_named_not_the_gpu():
    # four workers' batches at once, then a second's wait: 1 step in 4 waits
    v = pace.summarize(records([1.0, 0.0, 0.0, 0.0] * 3), SHAPE, 0.1)
    assert v["wait_fraction_mean"] < 0.25          # what hid the loader
    assert v["wait_share"] > 0.8
    assert not v["keeps_pace"]
    d = diagnose(v, system(workers_cpus=1.9), STORAGE)
    assert d["bottleneck"] == "decoding CPU", d
    assert "4 DataLoader workers used 1.90 CPUs" in d["figure"], d


def test_data_on_time_is_the_gpu():
    v = pace.summarize(records([0.001] * 12), SHAPE, 0.1)
    assert v["wait_share"] < 0.05 and v["keeps_pace"], v
    d = diagnose(v, system(workers_cpus=0.3, cpu_busy=0.2), STORAGE)
    assert d["bottleneck"] == "GPU", d
    assert d["figure"].startswith("waiting for data 2.0%") and \
        "of the measured time" in d["figure"], d
    assert d["suggestion"].startswith("none for the data"), d


def test_slow_reads_are_storage_latency():
    v = pace.summarize(records([0.2] * 10), SHAPE, 0.1)
    storage = dict(STORAGE, fuse_read_latency_mean_us=30000.0)
    d = diagnose(v, system(workers_cpus=0.2, cpu_busy=0.2), storage)
    assert d["bottleneck"] == "storage latency", d
    assert "30000 us" in d["figure"], d
