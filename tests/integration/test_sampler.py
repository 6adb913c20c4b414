# SPDX-License-Identifier: Apache-2.0
"""ShardAwareSampler on a real mount, and shardfs's side of the control
files it reads (`/.shardfs/members`, `/.shardfs/shards`).  The sampler's
logic on injected locations and the control-file parser on a fake
control directory need no mount: python/tests/test_torch_sampler.py.

The mount tests check shardfs's side of the contract (the control
directory is hidden but reachable; every regular file is listed once with
the right shard, offset and size; names with tabs, newlines and
backslashes are escaped), run the sampler on ImageFolder over a real
mount, and check that its order turns shardfs's shard prefetch on in
every epoch.  They skip while the shardfs binary serves no control files.

Run with -s to see the read-pattern figures of each order.
"""
import collections
import os
import sys
import tarfile

import pytest
import torch
from torchvision import datasets

import control_files
import imagedata
import shardfs_testlib as lib
from shardfs.torch import ShardAwareSampler, read_pattern

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "tests"))
from sampler_patterns import pattern_report, random_sampler_order  # noqa: E402


# --------------------------------------------------------------------------
# on a real mount


def require_control_files(mnt):
    if not control_files.available(mnt):
        pytest.skip(control_files.MISSING)


@pytest.fixture(scope="module")
def imagefolder_data(tmp_path_factory):
    work = tmp_path_factory.mktemp("imagefolder")
    shards, _ = imagedata.imagefolder_shards(work, count=400, shards=8)
    return shards


@pytest.fixture
def mount(imagefolder_data, tmp_path):
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(map(str, imagefolder_data)), mnt):
        require_control_files(mnt)
        yield mnt


def test_control_files_describe_every_file(mount, imagefolder_data):
    members = control_files.check(mount, imagefolder_data)
    expected = control_files.tar_locations(imagefolder_data)
    assert {p: (m.shard, m.offset, m.size) for p, m in members.items()} == expected


def test_control_files_escape_names_and_follow_the_tree(tmp_path):
    """Tabs, newlines, backslashes and non-UTF-8 bytes in names; a path
    present in two shards (the last one is served); a hard link (the data
    of its target); a symlink (not a regular file, not listed)."""
    first = {"odd/tab\there": b"1", "odd/new\nline": b"22",
             "odd/back\\slash\\t": b"333", b"odd/\xff\xfe": b"4444",
             "dup/x": b"first version"}
    second = {"dup/x": b"second, longer version", "dup/y": b"y"}
    shards = imagedata.write_shards(tmp_path, [
        [imagedata.Sample("a", 0, first)], [imagedata.Sample("b", 0, second)]])
    with tarfile.open(shards[1], "a") as t:
        link = tarfile.TarInfo("dup/hard")
        link.type, link.linkname = tarfile.LNKTYPE, "dup/y"
        sym = tarfile.TarInfo("dup/sym")
        sym.type, sym.linkname = tarfile.SYMTYPE, "x"
        t.addfile(link)
        t.addfile(sym)
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards), mnt):
        require_control_files(mnt)
        members = control_files.check(mnt, shards)
    assert members[b"dup/x"].shard == 1
    assert members[b"dup/hard"] == members[b"dup/y"]
    assert b"dup/sym" not in members
    assert members[b"odd/new\nline"].size == 2


def test_sampler_on_imagefolder_over_a_mount(mount, imagefolder_data):
    dataset = datasets.ImageFolder(mount / "train")
    expected = control_files.tar_locations(imagefolder_data)
    relative = [os.fsencode(os.path.relpath(p, mount)) for p, _ in dataset.samples]
    wanted = [expected[r][:2] for r in relative]
    assert ShardAwareSampler(dataset).locations == wanted
    assert ShardAwareSampler(dataset, mountpoint=mount).locations == wanted
    lines = [pattern_report("RandomSampler (mount)", read_pattern(
        random_sampler_order(len(dataset)), wanted))]
    for window in (1, 4):
        pattern = read_pattern(list(ShardAwareSampler(dataset, window=window)),
                               wanted)
        lines.append(pattern_report("ShardAwareSampler(window=%d) (mount)"
                                    % window, pattern))
        assert pattern["stream_forward"] == 1.0
    assert read_pattern(list(ShardAwareSampler(dataset, window=1)),
                        wanted)["same_shard_forward"] > 0.95, lines


def test_dataloader_epochs_with_the_sampler(mount):
    dataset = datasets.ImageFolder(mount / "train", loader=os.path.getsize)
    s = ShardAwareSampler(dataset, window=2)
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, sampler=s,
                                         num_workers=2)
    expected = collections.Counter((t, os.path.getsize(p)) for p, t in dataset.samples)
    for epoch in range(2):
        s.set_epoch(epoch)
        seen = collections.Counter()
        for sizes, labels in loader:
            seen.update(zip(labels.tolist(), sizes.tolist()))
        assert seen == expected


def read_uncached(path):
    """Read a file and drop it from the page cache, so that the next read
    of it reaches the shardfs daemon again."""
    with open(path, "rb") as f:
        size = len(f.read())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return size


def test_shardfs_prefetches_the_sampler_order_every_epoch(tmp_path):
    """ShardAwareSampler's forward reads must trigger shardfs's shard
    prefetch in every epoch, not only in the first.  One 1.3 MB shard and
    a 128 KiB readahead, so that a pass needs about ten prefetches.
    Push-ahead is off: it serves most of these reads from the page cache,
    and readahead is counted on the reads that reach the daemon."""
    shards, _ = imagedata.imagefolder_shards(tmp_path, count=400, shards=1)
    mnt = tmp_path / "mnt"
    with lib.mounted(shards[0], mnt, "-o", "readahead=128K", "-o", "pushahead=0"):
        require_control_files(mnt)
        dataset = datasets.ImageFolder(mnt / "train", loader=read_uncached)
        sampler = ShardAwareSampler(dataset, window=1)
        hits = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            before = control_files.readahead_hits(mnt)
            for index in sampler:
                dataset[index]
            hits.append(control_files.readahead_hits(mnt) - before)
    assert min(hits) > len(dataset) * 0.4, hits
