# SPDX-License-Identifier: Apache-2.0
"""shardfs-pace, run as users run it: the console script that pip
installed next to the python running these tests (see
scripts/install-python-package.sh), on a real mount of real JPEG shards.

- a mount that keeps pace with a modest requirement: exit 0, the verdict,
  the numbers behind it (the JSON and the text agree), what the storage
  saw (the mount's own counters moved; the loose-tree cost is three
  metadata operations per file read), the plot;
- the same mount throttled by a slow transform (10 ms per image, two
  workers: at most 200 samples/s against 320 required): exit 1;
- the same samples as a loose tree (no shardfs mount): a random sampler,
  no FUSE counters, and an impossible requirement: exit 1.

Usage errors and the README's worked example need no mount:
python/tests/test_pace_args.py.
"""
import json
import os
import sys

import pytest

import imagedata
import shardfs_testlib as lib

PACE = os.path.join(os.path.dirname(sys.executable), "shardfs-pace")
SAMPLES = 240
SHARDS = 4
SMALL = ("--image-size", "64", "--workers", "2")
AHEAD = 2 * 2 * 8	# batches a DataLoader of 2 workers holds ahead, of 8

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="mounts FUSE filesystems: run as root"),
]


@pytest.fixture(scope="module")
def data_set(tmp_path_factory):
    """(shard directory, loose tree of the same samples)."""
    work = tmp_path_factory.mktemp("pace")
    imagedata.imagefolder_shards(str(work), count=SAMPLES, shards=SHARDS)
    return work / "shards", work / "stage" / "train"


@pytest.fixture
def mount(data_set, tmp_path):
    shards, _ = data_set
    mnt = tmp_path / "mnt"
    with lib.mounted(str(shards) + "/", mnt, "-o", "quiet"):
        yield mnt


def pace(*args, env=None):
    if not os.access(PACE, os.X_OK):
        pytest.fail("%s missing: the shardfs package is not installed for "
                    "%s" % (PACE, sys.executable), pytrace=False)
    return lib.run_cmd([PACE, *map(str, args)], env=env, timeout=600)


def test_a_mount_that_keeps_pace(mount, tmp_path):
    out, plot = tmp_path / "pace.json", tmp_path / "pace.png"
    r = pace(mount / "train", "--global-batch", 8, "--step-time", 0.25,
             "--steps", 12, "--tolerance", 0.2, *SMALL,
             "--json", out, "--plot", plot)
    assert r.returncode == 0, r
    result = json.loads(out.read_text())
    shape, verdict, storage = result["shape"], result["verdict"], result["storage"]
    assert shape["required"] == shape["required_per_node"] == pytest.approx(32.0)
    assert verdict["keeps_pace"] is True
    assert verdict["delivered_per_node"] >= 0.8 * 32.0, verdict
    assert 0 <= verdict["wait_fraction_p50"] <= verdict["wait_fraction_p95"] < 1
    assert result["mountpoint"] == str(mount)
    assert result["sampler"] == "shard-aware"
    assert (result["samples"], result["classes"]) == (
        SAMPLES, len(imagedata.IMAGEFOLDER_CLASSES))
    assert len(result["steps"]) == 12
    assert all(s["samples"] == 8 for s in result["steps"])
    # the storage during the measured steps, through the mount's own
    # counters: the files loaded between the first and the last snapshot,
    # the measured batches less what the DataLoader held ahead at the
    # first (2 workers x prefetch_factor 2 batches of 8: stop 51's CI loaded 91
    # of 96) and more what it held ahead at the last; what the storage
    # served, or which page cache did
    assert storage["files_read"] >= 12 * 8 - AHEAD, storage
    assert storage["loose_tree_metadata_ops"] == 3 * storage["files_read"]
    assert storage["fuse_requests"] > 0 and storage["errors"] == 0, storage
    # ImageFolder's loader opens each file with open(): an isatty() ioctl
    assert storage["fuse_requests_by_op"]["ioctl"] >= storage["files_read"], storage
    assert "loader=shardfs.torch.pil_loader" in r.stdout, r.stdout
    assert storage["shard_read_bytes"] > 0 or storage["page_cache"], storage
    assert result["diagnosis"]["bottleneck"] in (
        "GPU", "decoding CPU", "storage latency", "storage bandwidth",
        "FUSE daemon"), result["diagnosis"]
    assert "verdict: KEEPS PACE" in r.stdout, r.stdout
    assert "required:       32.0 samples/s" in r.stdout, r.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_throttled_mount_does_not_keep_pace(mount, tmp_path):
    (tmp_path / "slow_transform.py").write_text(
        "import time\n"
        "from torchvision import transforms\n"
        "_t = transforms.Compose([transforms.Resize((64, 64)), "
        "transforms.ToTensor()])\n"
        "def slow(image):\n"
        "    time.sleep(0.01)\n"
        "    return _t(image)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = tmp_path / "pace.json"
    r = pace(mount / "train", "--global-batch", 16, "--step-time", 0.05,
             "--steps", 6, "--workers", 2, "--transform", "slow_transform:slow",
             "--json", out, env=env)
    assert r.returncode == 1, r
    verdict = json.loads(out.read_text())["verdict"]
    assert verdict["keeps_pace"] is False
    assert verdict["required_per_node"] == pytest.approx(320.0)
    assert verdict["delivered_per_node"] < 0.9 * 320, verdict
    assert verdict["wait_share"] > 0.2, verdict
    assert "verdict: DOES NOT KEEP PACE" in r.stdout, r.stdout


def test_a_loose_tree_for_comparison(data_set, tmp_path):
    _, loose = data_set
    # more steps than the batches its 2 workers hold ahead (2 each, the
    # DataLoader's prefetch): with 3, every measured batch could be loaded
    # before the measured steps began, and none counted as read in them
    r = pace(loose, "--required-rate", 1e6, "--batch-size", 16, "--steps", 6,
             *SMALL, "--json", "-")
    assert r.returncode == 1, r
    result = json.loads(r.stdout)
    assert result["mountpoint"] is None and result["sampler"] == "random"
    assert result["shape"]["step_time"] == pytest.approx(16 / 1e6)
    assert "fuse_requests" not in result["storage"]
    assert result["storage"]["loose_tree_metadata_ops"] == \
        3 * result["storage"]["files_read"] > 0
    assert result["verdict"]["keeps_pace"] is False
