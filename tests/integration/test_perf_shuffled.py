# SPDX-License-Identifier: Apache-2.0
"""What a shuffled reader costs the storage: bytes read from local
shards (backing_read_bytes in /.shardfs/stats), or fetched from an
http:// store (remote bytes), against the bytes of the files it read, with
push-ahead at its default.

One node of N under DistributedSampler reads every N-th file of a
shuffled order: a 1/N share of every 4 MiB piece of the shards.  Pushing
pieces whole would read N times what the node uses; push-ahead learns
how much of each piece the reader takes before it pushes one, so the
storage reads at most 1.1x the bytes used (issue 29).  Below the daemon,
the disk serves a node of 2 at most 1.1x the pages of its files: the
kernel's readahead is off for READs that jumped (the daemon's read_bytes
in /proc/PID/io, the shards' pages dropped first).  The density is
learned again when another reader follows on the same mount: a dense
reader after a sparse one has pieces pushed, a sparse one after a dense
one has none pushed for it.  Every byte read is checked.

Counts, not timings (docs/bench-runs/shuffled-shares.md has the timings).  The
mounts' counters are read once push-ahead has settled, so that pushes
still under way count too.  On the transport the host gives (the fuse
module's enable_uring is left alone): over io_uring plain shards get no
pushes at random, and the dense reader is checked for that instead.
"""
import concurrent.futures
import os
import random
import time

import pytest

import remote_servers as rs
import remote_site
import shardfs_testlib as lib

SHARDS = 4
FILES = 480             # per shard: ~14 MiB, 4 pieces of 4 MiB
SIZE_MIN, SIZE_SPREAD = 20_000, 20_000
BOUND = 1.1             # bytes read from the shards per byte used


def file_size(i):
    return SIZE_MIN + (i * 7919) % SIZE_SPREAD


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """SHARDS plain shards of FILES files each (sNN/kNNNN.bin, sizes 20
    to 40 kB), written by GNU tar; the files' bytes by name."""
    root = tmp_path_factory.mktemp("shuffled")
    shards, content = root / "shards", {}
    os.makedirs(shards)
    for s in range(SHARDS):
        stage = root / ("stage%d" % s)
        names = []
        for i in range(FILES):
            name = "s%02d/k%04d.bin" % (s, i)
            content[name] = lib.deterministic_bytes(("shuffled", s, i), file_size(i))
            lib.write_file(stage / name, content[name])
            names.append(name)
        lib.gnu_tar_create(shards / ("shard-%02d.tar" % s), stage, names, "gnu")
    return shards, content


def shuffled(content, seed):
    names = sorted(content)
    random.Random(seed).shuffle(names)
    return names


def read_share(mnt, content, names):
    """Read NAMES whole, checking every byte; the bytes read from the
    shards meanwhile, the bytes used, and the counters after."""
    before = lib.settled_stats(mnt)
    for name in names:
        with open(os.path.join(mnt, name), "rb") as f:
            assert f.read() == content[name], name
    after = lib.settled_stats(mnt)
    used = sum(len(content[name]) for name in names)
    return after["backing_read_bytes"] - before["backing_read_bytes"], used, after


def list_tree(mnt):
    for _ in os.walk(mnt):      # as ImageFolder does first
        pass


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nodes", [2, 8])
def test_a_node_share_costs_at_most_the_bound(tmp_path, dataset, nodes):
    shards, content = dataset
    mnt = tmp_path / "mnt"
    with lib.mounted(shards, mnt):
        list_tree(mnt)
        got, used, stats = read_share(mnt, content, shuffled(content, nodes)[::nodes])
    assert got <= BOUND * used, (nodes, got, used, stats["pushahead"])
    # the density estimate: the share of the set this pass took
    assert abs(stats["pushahead"]["density"] - 1 / nodes) < 0.05, stats["pushahead"]
    assert stats["access"]["random"]["read_bytes"] >= 0.9 * used, stats["access"]


@pytest.mark.timeout(300)
def test_a_node_share_reads_at_most_the_bound_from_the_disk(tmp_path, dataset):
    """What the disk serves a node of 2, readahead included: the READs
    that jumped go through a descriptor without readahead (source_file.c;
    on the shared one the disk read 1.51x these pages in a run).  The
    bytes used are counted in whole pages, as the page cache reads
    them."""
    shards, content = dataset
    mnt = tmp_path / "mnt"
    names = shuffled(content, 2)[::2]
    pages = sum((len(content[n]) // 4096 + 2) * 4096 for n in names)
    with lib.mounted(shards, mnt, "-o", "pushahead=0"):
        list_tree(mnt)
        # after the index build read them
        lib.forget_pages(shards, os.listdir(shards), written=True)
        before = lib.daemon_read_bytes(mnt)
        read_share(mnt, content, names)
        read = lib.daemon_read_bytes(mnt) - before
    print("\nnode of 2: %d bytes from the disk for %d in the files' pages (%.3fx)"
          % (read, pages, read / pages))
    assert 0 < read <= BOUND * pages, (read, pages)


@pytest.mark.timeout(300)
def test_reads_at_random_are_spliced_not_copied(tmp_path, dataset):
    """Over /dev/fuse a READ of a local member of two pages or more moves
    the shard's pages into the reply (splice) instead of copying them
    twice (pread, writev): every READ of a node's share of 20-40 kB files
    is spliced, every byte still right.  Over io_uring none is: the ring
    replies from its own buffer."""
    shards, content = dataset
    mnt = tmp_path / "mnt"
    with lib.mounted(shards, mnt, "-o", "pushahead=0"):
        list_tree(mnt)
        before = lib.settled_stats(mnt)
        read_share(mnt, content, shuffled(content, 4)[::4])
        after = lib.settled_stats(mnt)
    reads = after["backing_reads"] - before["backing_reads"]
    spliced = after["backing_spliced"] - before["backing_spliced"]
    assert reads >= len(content) // 4, (reads, after["ops"]["read"])
    assert spliced == (0 if after["io_uring_requests"] else reads), (spliced, reads)


@pytest.mark.timeout(300)
def test_density_is_learned_again_when_the_reader_changes(tmp_path, dataset):
    """Sparse, then dense, then sparse again on one mount, each after the
    kernel dropped the pages: every reader within the bound, the dense
    one served mostly by pushed pieces."""
    shards, content = dataset
    mnt = tmp_path / "mnt"
    with lib.mounted(shards, mnt):
        list_tree(mnt)
        got, used, stats = read_share(mnt, content, shuffled(content, 1)[::8])
        assert got <= BOUND * used, ("sparse first", got, used, stats["pushahead"])
        assert stats["pushahead"]["spans"] == 0, stats["pushahead"]
        reads_before = stats["ops"]["read"]["count"]

        lib.forget_pages(mnt, content)
        every = shuffled(content, 2)
        got, used, stats = read_share(mnt, content, every)
        assert got <= BOUND * used, ("dense after sparse", got, used, stats["pushahead"])
        assert stats["pushahead"]["passes"] >= 1, stats["pushahead"]
        assert stats["pushahead"]["density"] > 0.9, stats["pushahead"]
        # pieces were pushed: well under one READ per file; over io_uring,
        # where a READ is cheap, plain shards get no pushes at random
        reads = stats["ops"]["read"]["count"] - reads_before
        spans = stats["pushahead"]["spans"]
        if stats["io_uring_requests"]:
            assert spans == 0, stats["pushahead"]
        else:
            assert reads < 0.8 * len(every), (reads, len(every), stats["pushahead"])

        lib.forget_pages(mnt, content)
        got, used, stats = read_share(mnt, content, shuffled(content, 3)[::4])
        assert got <= BOUND * used, ("sparse after dense", got, used, stats["pushahead"])
        assert stats["pushahead"]["passes"] >= 2, stats["pushahead"]
        assert abs(stats["pushahead"]["density"] - 0.25) < 0.05, stats["pushahead"]
        assert stats["pushahead"]["spans"] == spans, stats["pushahead"]


def shard_aware_batches(content, seed, window=SHARDS, batch=32):
    """ShardAwareSampler's order over one window of every shard (each
    shard's files in offset order, the shards interleaved at random), in
    DataLoader batches."""
    per_shard = [sorted(n for n in content if n.startswith("s%02d/" % s))
                 for s in range(window)]
    which = [s for s in range(window) for _ in per_shard[s]]
    random.Random(seed).shuffle(which)
    streams = [iter(names) for names in per_shard]
    order = [next(streams[s]) for s in which]
    return [order[i:i + batch] for i in range(0, len(order), batch)]


@pytest.mark.timeout(300)
def test_shard_aware_workers_cost_at_most_the_bound(tmp_path, dataset):
    """Two DataLoader workers over ShardAwareSampler's order take turns at
    its batches, so each shard has two readers a batch apart: push-ahead's
    window starts over behind, at a READ it spared, and pushed the run it
    had just pushed again (1.2-1.4x the bytes used in local epochs of the
    training set; here 1.13-1.17x in some runs, 1.00x in others: the
    unit test test_window_started_over_behind_skips_the_run_pushed
    makes the restart every time).  At most the bound, every byte
    right."""
    shards, content = dataset
    mnt = tmp_path / "mnt"
    batches = shard_aware_batches(content, 0)
    with lib.mounted(shards, mnt):
        list_tree(mnt)
        before = lib.settled_stats(mnt)

        def worker(k):
            for b in batches[k::2]:
                for name in b:
                    with open(os.path.join(mnt, name), "rb") as f:
                        assert f.read() == content[name], name
                time.sleep(0.005)       # the batch's decode

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(worker, range(2)))
        after = lib.settled_stats(mnt)
    got = after["backing_read_bytes"] - before["backing_read_bytes"]
    used = sum(len(v) for v in content.values())
    assert got <= BOUND * used, (got, used, after["pushahead"])


# --------------------------------------------------------------------------
# the same shares from an http:// store


def remote_fetched(mnt):
    """(body bytes, GETs) the mount had from the server, once the GETs in
    flight finished."""
    st = remote_site.settled_stats(mnt)
    return st["bytes"], st["requests"] - st["retries"], st


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nodes", [2, 8])
def test_a_node_share_fetches_at_most_the_bound(tmp_path, dataset, nodes):
    """One node's share read from nginx through a memory cache of 8 MiB,
    a seventh of the set: a READ that jumped fetches its file, not a
    chunk, so the store sends at most 1.1x the bytes used, in one GET
    per file (push-ahead at its default)."""
    shards, content = dataset
    mnt = tmp_path / "mnt"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    spec = "%s/shard-{00..%02d}.tar"
    with rs.nginx(shards, str(tmp_path / "ng")) as url, \
            lib.mounted(spec % (url, SHARDS - 1), mnt, "-o",
                        "chunk_size=1M,cache_mem=8M", env=env):
        list_tree(mnt)
        names = shuffled(content, nodes)[::nodes]
        bytes_before, gets_before, _ = remote_fetched(mnt)
        _, used, _ = read_share(mnt, content, names)
        bytes_after, gets_after, st = remote_fetched(mnt)
    got, gets = bytes_after - bytes_before, gets_after - gets_before
    assert got <= BOUND * used, (nodes, got, used, st)
    # a GET per file, and the shards' first opens (one probe each)
    assert gets <= len(names) + SHARDS, (nodes, gets, len(names), st)
    assert st["fetched"]["random_bytes"] >= 0.9 * used, st
