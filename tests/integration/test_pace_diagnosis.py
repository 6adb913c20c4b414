# SPDX-License-Identifier: Apache-2.0
"""shardfs-pace names the bottleneck (issue 33), with the figures behind
it in the JSON, measured during the measured steps only:

- a mount made slow on purpose -- http:// shards from nginx limited to
  200 kB/s per connection, with no readahead, no push-ahead and a chunk
  cache of four 64 KiB chunks, so that every few samples wait for a GET --
  is named a storage bottleneck, with the GETs and bytes the storage
  served during the steps;
- a CPU-bound run -- a transform that spins ~30 ms of Python per image,
  four workers on this machine's CPUs -- is named decoding CPU;
- --trace DIR writes a PyTorch profiler trace (TensorBoard) with the
  DataLoader's __next__ in it; --plot draws the CPU panel;
- a run whose samples were all just read says that a page cache served
  them; --cold (root) drops the caches first, and the shard bytes come
  back.
"""
import json
import os
import sys

import pytest

import imagedata
import remote_servers as rs
import shardfs_testlib as lib

PACE = os.path.join(os.path.dirname(sys.executable), "shardfs-pace")
SAMPLES = 240
SHARDS = 4

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="mounts FUSE filesystems: run as root"),
]

HEAVY = """\
from torchvision import transforms
_t = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])
def heavy(image):
    x = 0
    for i in range(300000):
        x += i * i
    return _t(image)
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    work = tmp_path_factory.mktemp("diag")
    imagedata.imagefolder_shards(str(work), count=SAMPLES, shards=SHARDS)
    return work / "shards"


@pytest.fixture
def mount(shards, tmp_path):
    mnt = tmp_path / "mnt"
    with lib.mounted(str(shards) + "/", mnt, "-o", "quiet"):
        yield mnt


def pace(*args, env=None):
    r = lib.run_cmd([PACE, *map(str, args)], env=env, timeout=600)
    assert r.returncode in (0, 1), r
    return r


def run_json(tmp_path, *args, env=None):
    out = tmp_path / "pace.json"
    r = pace(*args, "--json", out, env=env)
    return r, json.loads(out.read_text())


def test_slow_storage_is_named(shards, tmp_path):
    work = tmp_path / "nginx"
    work.mkdir()
    with rs.nginx(str(shards), str(work), limit_rate="200k") as url:
        spec = "%s/shard-{000000..%06d}.tar" % (url, SHARDS - 1)
        mnt = tmp_path / "mnt"
        with lib.mounted(spec, mnt, "-o", "quiet,chunk_size=64K,cache_mem=256K,"
                         "readahead=0,pushahead=0"):
            r, result = run_json(tmp_path, mnt / "train", "--global-batch", 8,
                                 "--step-time", 0.05, "--steps", 6,
                                 "--image-size", 64, "--workers", 2)
    storage, system, diag = result["storage"], result["system"], result["diagnosis"]
    assert r.returncode == 1 and result["verdict"]["keeps_pace"] is False, r
    assert diag["bottleneck"] in ("storage bandwidth", "storage latency"), diag
    assert "GETs" in diag["figure"] and diag["suggestion"], diag
    # what the storage served during the measured steps
    assert storage["remote_gets"] > 0 and storage["remote_bytes"] > 0, storage
    assert storage["storage_bytes"] == storage["remote_bytes"]
    assert storage["remote_gets_per_sample"] == pytest.approx(
        storage["remote_gets"] / storage["files_read"])
    assert storage["page_cache"] is None, storage
    assert system["daemon_pid"] and system["daemon_cpus"] is not None, system
    assert 0 <= system["cpu_iowait"] <= 1 and 0 <= system["cpu_busy"] <= 1
    assert system["context_switches_per_s"] > 0
    assert "bottleneck: storage" in r.stdout and "remote storage served" in r.stdout


def test_cpu_bound_decoding_is_named(mount, tmp_path):
    (tmp_path / "heavy_transform.py").write_text(HEAVY)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r, result = run_json(tmp_path, mount / "train", "--global-batch", 16,
                         "--step-time", 0.05, "--steps", 10, "--workers", 4,
                         "--transform", "heavy_transform:heavy", env=env)
    diag, system = result["diagnosis"], result["system"]
    assert r.returncode == 1, r
    assert diag["bottleneck"] == "decoding CPU", (diag, system, result["storage"])
    assert "4 DataLoader workers" in diag["figure"], diag
    assert system["workers"] == 4 and system["workers_cpus"] > 0.2, system
    assert all("cpu_busy" in s and "cpu_iowait" in s for s in result["steps"])


def test_trace_and_plot(mount, tmp_path):
    trace, plot = tmp_path / "trace", tmp_path / "pace.png"
    r, result = run_json(tmp_path, mount / "train", "--global-batch", 8,
                         "--step-time", 0.05, "--steps", 7, "--warmup", 2,
                         "--image-size", 64, "--workers", 2, "--trace", trace,
                         "--plot", plot)
    files = [f for f in os.listdir(trace) if f.endswith(".pt.trace.json")]
    assert len(files) == 1, files
    assert "DataLoader" in (trace / files[0]).read_text()
    assert result["trace"] == str(trace)
    assert "profiler trace (tensorboard --logdir %s): steps 5-9" % trace in r.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = lib.run_cmd([PACE, str(mount / "train"), "--global-batch", "8",
                     "--step-time", "0.05", "--steps", "3", "--trace", str(trace)])
    assert r.returncode == 2 and "--trace records steps 5-9" in r.stderr, r


def test_page_cache_said_and_cold_reads_the_shards(mount, tmp_path):
    args = (mount / "train", "--global-batch", 8, "--step-time", 0.02, "--steps",
            4, "--image-size", 64, "--workers", 1, "--warmup", 1)
    # every sample into the mount's page cache: read, as a first run of
    # shardfs-pace would (which cost a torch import and a DataLoader)
    for dirpath, _, names in os.walk(mount / "train"):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as f:
                f.read()
    _, warm = run_json(tmp_path, *args)
    assert warm["cold"] is False
    assert warm["storage"]["page_cache"], warm["storage"]
    r, cold = run_json(tmp_path, *args, "--cold")
    assert cold["cold"] is True
    assert cold["storage"]["shard_read_bytes"] > 0, cold["storage"]
    assert cold["storage"]["fuse_requests_by_op"]["read"] > 0, cold["storage"]
