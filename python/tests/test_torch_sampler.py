# SPDX-License-Identifier: Apache-2.0
"""shardfs.torch.ShardAwareSampler and the control-file parser, without a
mount (no root, no FUSE): run from python/ with `python3 -m pytest tests`
(the package is imported from python/ when it is not installed), or by
ctest (python.unit) with the installed package.

The sampler's logic is tested on injected (shard, offset) locations:
every index exactly once per epoch across all ranks, equal lengths,
reproducible and epoch-dependent orders, disjoint shards per rank, at
most `window` shards open at a time, every shard read forward, and the
fraction of consecutive reads that continue forward in the same shard,
compared with RandomSampler's.  The control-file parser is tested on a
fake control directory.  The mount side of the contract is in
tests/integration/test_sampler.py.

Run with -s to see the read-pattern figures of each order.
"""
import os
import random

import pytest
import torch
from torchvision import datasets

import shardfs
from shardfs.torch import ShardAwareSampler, read_pattern
from sampler_patterns import pattern_report, random_sampler_order


# --------------------------------------------------------------------------
# injected locations


def synthetic_locations(shards=12, seed=0, sizes=range(40, 61)):
    """[(shard, offset)] per index for SHARDS shards of 40-60 samples each;
    indices are assigned to shards in random order (as ImageFolder's
    class-sorted indices are on shuffled shards)."""
    rng = random.Random(seed)
    slots = []
    for shard in range(shards):
        offset = 0
        for _ in range(rng.choice(sizes)):
            offset += 512 + rng.randrange(1, 20) * 512
            slots.append((shard, offset))
    rng.shuffle(slots)
    return slots


LOCATIONS = synthetic_locations()
N = len(LOCATIONS)


def sampler(locations=LOCATIONS, **kw):
    return ShardAwareSampler(None, locations=locations, **kw)


def rank_orders(num_replicas, epoch=0, locations=LOCATIONS, **kw):
    """The list of indices of every rank for one epoch."""
    orders = []
    for rank in range(num_replicas):
        s = sampler(locations, num_replicas=num_replicas, rank=rank, **kw)
        s.set_epoch(epoch)
        order = list(s)
        assert len(order) == len(s)
        orders.append(order)
    return orders


def max_open_shards(order, locations):
    """The largest number of shards whose first and last reads in ORDER
    enclose one position: the streams open at the same time."""
    first, last = {}, {}
    for pos, index in enumerate(order):
        shard = locations[index][0]
        first.setdefault(shard, pos)
        last[shard] = pos
    # at equal positions a close (-1) sorts before an open (+1)
    events = sorted([(p, 1) for p in first.values()] +
                    [(p + 1, -1) for p in last.values()])
    open_now = peak = 0
    for _, delta in events:
        open_now += delta
        peak = max(peak, open_now)
    return peak


@pytest.mark.parametrize("window", [1, 3, 100])
@pytest.mark.parametrize("num_replicas", [1, 2, 3, 4, 5, 7])
def test_every_index_once_per_epoch_across_ranks(num_replicas, window):
    locations = LOCATIONS[:N - N % num_replicas]     # an exact split
    for epoch in (0, 1):
        orders = rank_orders(num_replicas, epoch, locations, window=window)
        assert len({len(o) for o in orders}) == 1, "ranks of unequal length"
        assert sorted(i for o in orders for i in o) == list(range(len(locations)))


@pytest.mark.parametrize("num_replicas", [2, 3, 4, 7])
def test_uneven_split_pads_or_drops_like_distributed_sampler(num_replicas):
    n = num_replicas * 50 + 1                          # never exact
    locations = LOCATIONS[:n]
    padded = rank_orders(num_replicas, locations=locations)
    dropped = rank_orders(num_replicas, locations=locations, drop_last=True)
    reference = torch.utils.data.DistributedSampler(
        range(n), num_replicas=num_replicas, rank=0)
    assert [len(o) for o in padded] == [len(reference)] * num_replicas
    everything = [i for o in padded for i in o]
    assert set(everything) == set(range(n))
    assert len(everything) - n == num_replicas - 1
    kept = [i for o in dropped for i in o]
    assert [len(o) for o in dropped] == [n // num_replicas] * num_replicas
    assert len(set(kept)) == len(kept) == n - 1


def test_orders_are_reproducible_and_change_with_epoch_and_seed():
    first = rank_orders(1, epoch=0)[0]
    assert rank_orders(1, epoch=0)[0] == first
    assert rank_orders(1, epoch=1)[0] != first
    assert rank_orders(1, epoch=0, seed=1)[0] != first
    s = sampler()
    assert list(s) == list(s) == first
    s.set_epoch(1)
    assert list(s) == rank_orders(1, epoch=1)[0]


def test_epochs_change_the_shard_order():
    def shard_sequence(order):
        seq = [LOCATIONS[i][0] for i in order]
        return [s for k, s in enumerate(seq) if k == 0 or seq[k - 1] != s]
    sequences = {tuple(shard_sequence(rank_orders(1, epoch=e, window=1)[0]))
                 for e in range(5)}
    assert len(sequences) == 5


@pytest.mark.parametrize("num_replicas", [2, 3, 4])
def test_ranks_read_disjoint_shards(num_replicas):
    locations = LOCATIONS[:N - N % num_replicas]
    for epoch in range(3):
        shard_sets = [{locations[i][0] for i in o}
                      for o in rank_orders(num_replicas, epoch, locations)]
        shared = sum(len(a & b) for k, a in enumerate(shard_sets)
                     for b in shard_sets[k + 1:])
        # only the shards at the boundary between two ranks are split
        assert shared <= num_replicas - 1, shard_sets


@pytest.mark.parametrize("window", [1, 2, 4, 8])
def test_window_bounds_open_shards_and_every_shard_reads_forward(window):
    for epoch in range(3):
        order = rank_orders(1, epoch, window=window)[0]
        assert max_open_shards(order, LOCATIONS) <= window
        assert read_pattern(order, LOCATIONS)["stream_forward"] == 1.0


def test_window_mixes_shards_within_batches():
    def shards_per_batch(window):
        order = rank_orders(1, window=window)[0]
        batches = [order[k:k + 32] for k in range(0, len(order), 32)]
        return sum(len({LOCATIONS[i][0] for i in b}) for b in batches) / len(batches)
    # shards hold 40-60 samples: a batch of 32 straddles two shards at times
    assert shards_per_batch(1) < 2
    assert shards_per_batch(4) > 3.5


def test_order_is_shard_local_unlike_random_sampler():
    random_pattern = read_pattern(random_sampler_order(N), LOCATIONS)
    pattern_report("RandomSampler", random_pattern)
    for window in (1, 2, 4, 8):
        pattern = read_pattern(rank_orders(1, window=window)[0], LOCATIONS)
        pattern_report("ShardAwareSampler(window=%d)" % window, pattern)
        assert pattern["stream_forward"] == 1.0
        if window == 1:
            assert pattern["same_shard_forward"] > 0.95
    assert random_pattern["same_shard_forward"] < 0.1
    assert random_pattern["stream_forward"] < 0.6


def test_without_shuffle_it_scans_shards_in_order():
    order = list(sampler(shuffle=False))
    assert [LOCATIONS[i] for i in order] == sorted(LOCATIONS)


def test_drop_in_for_random_sampler_in_a_dataloader():
    dataset = torch.utils.data.TensorDataset(torch.arange(N))
    s = ShardAwareSampler(dataset, locations=LOCATIONS, window=2)
    loader = torch.utils.data.DataLoader(dataset, batch_size=10, sampler=s)
    for epoch in range(2):
        s.set_epoch(epoch)
        seen = [int(v) for (batch,) in loader for v in batch]
        assert seen == rank_orders(1, epoch, window=2)[0]
        assert sorted(seen) == list(range(N))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        sampler(window=0)
    with pytest.raises(ValueError):
        sampler(num_replicas=2, rank=2)
    with pytest.raises(ValueError):
        ShardAwareSampler(range(5), locations=LOCATIONS)
    with pytest.raises(TypeError):
        ShardAwareSampler(range(5))


# --------------------------------------------------------------------------
# the control-file parser, on a fake control directory


def write_control_files(root, members, shards):
    """A fake `ROOT/.shardfs/` holding MEMBERS [(escaped path, shard,
    offset, size)] and SHARDS [(index, path, size, count)]."""
    control = os.path.join(os.fsencode(root), b".shardfs")
    os.makedirs(control)
    with open(os.path.join(control, b"members"), "wb") as f:
        f.writelines(b"%s\t%d\t%d\t%d\n" % m for m in members)
    with open(os.path.join(control, b"shards"), "wb") as f:
        f.writelines(b"%d\t%s\t%d\t%d\n" % s for s in shards)


def test_parser_unescapes_and_locates(tmp_path):
    write_control_files(tmp_path, [
        (b"train/a/x.jpg", 0, 512, 10),
        (b"train/a/tab\\there.jpg", 1, 1536, 20),
        (b"train/a/new\\nline\\\\back.jpg", 1, 2560, 30),
        (b"train/b/\xff.jpg", 2, 512, 40),
    ], [(0, b"/s/0.tar", 2048, 1), (1, b"/s/1\\t.tar", 4096, 2),
        (2, b"/s/2.tar", 2048, 1)])
    (tmp_path / "train" / "a").mkdir(parents=True)
    assert shardfs.find_mount_root(tmp_path / "train" / "a") == str(tmp_path)
    members = shardfs.read_members(tmp_path)
    assert members[b"train/a/tab\there.jpg"] == shardfs.Member(1, 1536, 20)
    assert members[b"train/a/new\nline\\back.jpg"] == shardfs.Member(1, 2560, 30)
    assert members[b"train/b/\xff.jpg"].size == 40
    assert shardfs.read_shards(tmp_path)[1] == shardfs.Shard(1, b"/s/1\t.tar", 4096, 2)
    paths = [tmp_path / "train/b" / os.fsdecode(b"\xff.jpg"),
             tmp_path / "train/a/x.jpg"]
    assert shardfs.locate(paths) == [(2, 512), (0, 512)]
    with pytest.raises(KeyError):
        shardfs.locate([tmp_path / "train/a/missing.jpg"])


def test_not_on_a_mount_is_reported(tmp_path):
    with pytest.raises(shardfs.NotOnShardfs, match="mountpoint="):
        shardfs.find_mount_root(tmp_path)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.jpg").write_bytes(b"ImageFolder only lists it")
    with pytest.raises(shardfs.NotOnShardfs):
        ShardAwareSampler(datasets.ImageFolder(tmp_path))
