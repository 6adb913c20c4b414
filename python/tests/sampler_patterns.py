# SPDX-License-Identifier: Apache-2.0
"""The read-pattern figures both sampler suites print: RandomSampler's
order, the baseline, and one line per order (python/tests and
tests/integration/test_sampler.py, which reads them from here)."""
import torch


def random_sampler_order(n, seed=0):
    return list(torch.utils.data.RandomSampler(
        range(n), generator=torch.Generator().manual_seed(seed)))


def pattern_report(label, pattern):
    line = "%-34s same-shard-forward %.3f  stream-forward %.3f" % (
        label, pattern["same_shard_forward"], pattern["stream_forward"])
    print(line)
    return line
