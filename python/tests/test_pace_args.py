# SPDX-License-Identifier: Apache-2.0
"""shardfs-pace's command line, without a mount (no root, no FUSE): usage
errors exit 2 with one message naming the problem, also for --device
cuda without a GPU; `python -m shardfs.pace` is the same command; the
README's worked example (256 GPUs, 4,096-sample global batch, 350 ms
step: 11,703 samples/s).  The runs on a real mount are in
tests/integration/test_pace.py.

The command is run as users run it: the console script that pip
installed next to this python when there is one (ctest's python.unit),
else `python -m shardfs.pace`.
"""
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(sys.executable), "shardfs-pace")
PACE = [SCRIPT] if os.access(SCRIPT, os.X_OK) else [sys.executable, "-m", "shardfs.pace"]


class Result:
    def __init__(self, p):
        self.returncode, self.stdout, self.stderr = p.returncode, p.stdout, p.stderr

    def __repr__(self):
        return "exit %d\nstdout: %s\nstderr: %s" % (self.returncode, self.stdout, self.stderr)


def run(argv):
    return Result(subprocess.run(argv, capture_output=True, text=True, timeout=300))


def pace(*args):
    return run([*PACE, *map(str, args)])


@pytest.fixture
def loose(tmp_path):
    """A loose tree of one sample, on no shardfs mount."""
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.jpg").write_bytes(b"not read: the usage is refused first")
    return tmp_path


@pytest.mark.parametrize("args,message", [
    ((), "the following arguments are required: DIR"),
    (("{dir}", "--global-batch", "8"), "give --global-batch and --step-time"),
    (("{dir}", "--global-batch", "10", "--step-time", "1", "--nodes", "4"),
     "--global-batch 10 is not divisible by the 4 ranks"),
    (("{dir}", "--global-batch", "8", "--step-time", "1", "--batch-size", "3"),
     "--batch-size 3 x 1 ranks is 3 samples, not the --global-batch 8"),
    (("{dir}", "--required-rate", "10", "--step-time", "1"), "not both"),
    (("{dir}/nowhere", "--global-batch", "8", "--step-time", "1"),
     "is not a directory"),
    (("{dir}", "--global-batch", "8", "--step-time", "1", "--sampler",
      "shard-aware"), "--sampler shard-aware needs a shardfs mount"),
    (("{dir}", "--global-batch", "0", "--step-time", "1"), "must be at least 1"),
    (("{dir}", "--global-batch", "8", "--step-time", "1", "--device", "gpu"),
     "invalid choice: 'gpu'"),
])
def test_usage_errors(loose, args, message):
    r = pace(*[a.format(dir=loose) for a in args])
    assert r.returncode == 2, r
    assert message in r.stderr, r.stderr
    assert r.stdout == "", r.stdout


def test_cuda_without_a_gpu_is_a_usage_error(loose):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    r = pace(loose, "--global-batch", 8, "--step-time", 1, "--device", "cuda")
    assert r.returncode == 2, r
    assert "--device cuda: no CUDA device here" in r.stderr, r.stderr


def test_python_m_and_the_worked_example():
    """`python -m shardfs.pace` is the same command; the worked example of
    the README and of --help: 256 GPUs (32 nodes x 8), a 4,096-sample
    global batch and 350 ms steps need 11,703 samples/s, 366 per node, 16
    samples per rank and step."""
    r = run([sys.executable, "-m", "shardfs.pace", "--help"])
    assert r.returncode == 0 and "--global-batch N" in r.stdout, r
    assert "11,703 samples/s" in " ".join(r.stdout.split())
    from shardfs.pace import training_shape
    shape = training_shape(4096, 0.35, nodes=32, ranks_per_node=8)
    assert round(shape["required"]) == 11703
    assert round(shape["required_per_node"]) == 366
    assert shape["batch_size"] == 16 and shape["ranks"] == 256
    with open(os.path.join(os.path.dirname(__file__), "..", "..",
                           "README.md")) as f:
        readme = f.read()
    assert "11,703" in readme and "shardfs-pace" in readme
