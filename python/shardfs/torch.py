# SPDX-License-Identifier: Apache-2.0
"""A PyTorch sampler that reads a shardfs mount shard by shard.

On a shardfs mount every file of an ImageFolder is a slice of some tar
shard.  torch's RandomSampler visits the files in a uniformly random
order, so the storage under the mount sees small reads at random offsets
of random shards: on disks and network file systems that is the slowest
pattern there is.  ShardAwareSampler keeps most of the randomness a
training run needs while reading each shard front to back, the way a
WebDataset pipeline does, and still feeds an unmodified map-style dataset
(ImageFolder, DatasetFolder, anything with `.samples`).

Per epoch (seeded by seed + epoch, identically on every rank):

1. the shards are put in a random order;
2. the samples, taken shard after shard (each shard in offset order), are
   split into num_replicas contiguous, equal parts, one per rank, so each
   rank reads its own run of shards; at most num_replicas - 1 shards are
   split between two neighbouring ranks, at a sample boundary;
3. each rank's shards are grouped into windows of `window` consecutive
   shards, and within a window the samples of its shards are randomly
   interleaved: every interleaving is equally likely, and each shard's own
   samples stay in offset order.  So at any time at most `window` shards
   are being read, each strictly forward (readahead keeps working), and a
   batch mixes samples of up to `window` shards.

With window=1 the order is "random shard order, sequential inside a
shard": almost every read continues the previous one.  A larger window
mixes more shards per batch at the cost of `window` concurrent streams.
The randomness a batch gets depends on how the shards were written:
WebDataset writers (and `shardfs-pack --shuffle`) spread every class over
every shard, and then window=1 or a few is enough; shards cut from a
class-sorted tree need a window spanning many classes.

Like DistributedSampler, when the samples do not divide evenly among the
ranks, each rank gets ceil(N / num_replicas) samples, the last rank's part
padded with samples from the start of the epoch's order (drop_last=False),
or floor(N / num_replicas), the tail of the epoch's order dropped
(drop_last=True).  When N is divisible by num_replicas every index is
yielded exactly once per epoch across all ranks.
"""
import io
import math
import random
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch.distributed as dist
from torch.utils.data import Sampler

from . import Path, find_mount_root, locate

__all__ = ["ShardAwareSampler", "epoch_order", "sample_locations",
           "read_pattern", "pil_loader"]

DEFAULT_WINDOW = 4

# (shard, offset) of one sample
Location = Tuple[int, int]


def sample_locations(dataset: Any, mountpoint: Optional[Path] = None) -> List[Location]:
    """[(shard, offset)] of every sample of DATASET (which must have
    `.samples`, a list of (path, target) as ImageFolder has), from one read
    of the mount's `/.shardfs/members`.  The mount is found by walking up
    from `dataset.root` unless MOUNTPOINT is given."""
    samples = getattr(dataset, "samples", None)
    if samples is None:
        raise TypeError("%s has no .samples: ShardAwareSampler needs an "
                        "ImageFolder-like dataset, or locations="
                        % type(dataset).__name__)
    paths = [path for path, _ in samples]
    if mountpoint is None and paths:
        mountpoint = find_mount_root(getattr(dataset, "root", None) or paths[0])
    return locate(paths, mountpoint)


def _shard_runs(locations: Sequence[Location]) -> List[List[int]]:
    """[[index...]] per shard, in shard number order, each in offset
    order."""
    by_shard: Dict[int, List[Tuple[int, int]]] = {}
    for index, (shard, offset) in enumerate(locations):
        by_shard.setdefault(shard, []).append((offset, index))
    return [[index for _, index in sorted(by_shard[s])] for s in sorted(by_shard)]


def _rank_part(order: List[int], num_replicas: int, rank: int,
               drop_last: bool) -> List[int]:
    """Rank's contiguous part of ORDER, padded or truncated to equal
    sizes as DistributedSampler does."""
    if drop_last:
        per_rank = len(order) // num_replicas
    else:
        per_rank = math.ceil(len(order) / num_replicas)
        total = per_rank * num_replicas
        while len(order) < total:
            order = order + order[:total - len(order)]
    return order[rank * per_rank:(rank + 1) * per_rank]


def _pieces(indices: List[int], shard_of: List[int]) -> List[List[int]]:
    """INDICES cut into maximal runs from one shard."""
    pieces: List[List[int]] = []
    for index in indices:
        if pieces and shard_of[pieces[-1][-1]] == shard_of[index]:
            pieces[-1].append(index)
        else:
            pieces.append([index])
    return pieces


def _interleave(pieces: List[List[int]], rng: random.Random) -> List[int]:
    """A uniformly random interleaving of PIECES that keeps the order
    inside each piece."""
    which = [k for k, piece in enumerate(pieces) for _ in piece]
    rng.shuffle(which)
    streams = [iter(piece) for piece in pieces]
    return [next(streams[k]) for k in which]


def epoch_order(locations: Sequence[Location], *, epoch: int = 0, seed: int = 0,
                shuffle: bool = True, window: int = DEFAULT_WINDOW,
                num_replicas: int = 1, rank: int = 0, drop_last: bool = False,
                runs: Optional[List[List[int]]] = None) -> List[int]:
    """The indices one rank visits in one epoch (see the module
    docstring), given LOCATIONS, the (shard, offset) of every index.  RUNS
    may pass a cached _shard_runs(LOCATIONS)."""
    runs = list(runs if runs is not None else _shard_runs(locations))
    if shuffle:
        random.Random(seed + epoch).shuffle(runs)
    order = [index for run in runs for index in run]
    mine = _rank_part(order, num_replicas, rank, drop_last)
    if not shuffle:
        return mine
    shard_of = [shard for shard, _ in locations]
    pieces = _pieces(mine, shard_of)
    rng = random.Random("shardfs window %d %d %d" % (seed, epoch, rank))
    out: List[int] = []
    for first in range(0, len(pieces), window):
        out.extend(_interleave(pieces[first:first + window], rng))
    return out


def _distributed_default(value: Optional[int],
                         getter: Callable[[], int]) -> Optional[int]:
    if value is not None:
        return value
    if dist.is_available() and dist.is_initialized():
        return getter()
    return None


class ShardAwareSampler(Sampler):
    """Drop-in for RandomSampler / DistributedSampler over a dataset on a
    shardfs mount: a random order that reads each shard forward.

    dataset       an ImageFolder-like dataset (with `.samples`) whose files
                  are on a shardfs mount
    shuffle       False: shard order, then offset order (a sequential scan)
    seed, window  the epoch's randomness and the number of shards whose
                  samples are interleaved (see the module docstring)
    num_replicas, rank
                  as DistributedSampler; default to the initialised process
                  group, else 1 and 0 (a plain RandomSampler replacement)
    drop_last     as DistributedSampler: drop, rather than pad, the samples
                  that do not divide evenly among the ranks
    mountpoint    the mount root; found by walking up from dataset.root
    locations     [(shard, offset)] per index, instead of reading the
                  mount (for tests and for datasets not on a mount)
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0,
                 window: int = DEFAULT_WINDOW, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, mountpoint: Optional[Path] = None,
                 drop_last: bool = False,
                 locations: Optional[Sequence[Location]] = None) -> None:
        num_replicas = _distributed_default(num_replicas, dist.get_world_size) or 1
        rank = _distributed_default(rank, dist.get_rank) or 0
        if window < 1:
            raise ValueError("window must be >= 1, got %r" % (window,))
        if not 0 <= rank < num_replicas:
            raise ValueError("rank %r is not in [0, %d)" % (rank, num_replicas))
        if locations is None:
            locations = sample_locations(dataset, mountpoint)
        self.locations = list(locations)
        if dataset is not None and len(dataset) != len(self.locations):
            raise ValueError("%d locations for a dataset of %d samples"
                             % (len(self.locations), len(dataset)))
        self.shuffle, self.seed, self.window = shuffle, seed, window
        self.num_replicas, self.rank, self.drop_last = num_replicas, rank, drop_last
        self.epoch = 0
        self._runs = _shard_runs(self.locations)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration use EPOCH's order (call it every epoch,
        on every rank, as with DistributedSampler)."""
        self.epoch = epoch

    def __len__(self) -> int:
        n = len(self.locations)
        if self.drop_last:
            return n // self.num_replicas
        return math.ceil(n / self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        return iter(epoch_order(
            self.locations, epoch=self.epoch, seed=self.seed,
            shuffle=self.shuffle, window=self.window,
            num_replicas=self.num_replicas, rank=self.rank,
            drop_last=self.drop_last, runs=self._runs))


def read_pattern(order: Sequence[int], locations: Sequence[Location]) -> Dict[str, float]:
    """How sequential visiting ORDER is for the storage, as two fractions:

    same_shard_forward  consecutive reads in the same shard, the second at
                        a higher offset (1.0 = one sequential scan)
    stream_forward      reads at a higher offset than the previous read of
                        the same shard (1.0 = every shard read front to
                        back, however the shards are interleaved)
    """
    same = forward = revisits = 0
    last_offset: Dict[int, int] = {}
    for i, index in enumerate(order):
        shard, offset = locations[index]
        if i:
            prev_shard, prev_offset = locations[order[i - 1]]
            same += prev_shard == shard and offset > prev_offset
        if shard in last_offset:
            revisits += 1
            forward += offset > last_offset[shard]
        last_offset[shard] = offset
    return {"same_shard_forward": same / max(len(order) - 1, 1),
            "stream_forward": forward / max(revisits, 1)}


def pil_loader(path: Path) -> Any:
    """torchvision's default image loader (an RGB PIL image) without the
    round trip of Python's open() on a FUSE mount:
    `ImageFolder(root, loader=shardfs.torch.pil_loader)`.

    open(path, "rb") asks isatty() of the file it opens, a TCGETS ioctl,
    and the kernel sends every ioctl on a FUSE file to the daemon, every
    time: a request of its own before each image's first READ, which ext4
    answers in the kernel (docs/pytorch.md, "Loading images").  Opened
    unbuffered, the file is asked nothing, read whole with one read and
    decoded from memory."""
    from PIL import Image
    with open(path, "rb", buffering=0) as f:
        data = f.readall()
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")
