# SPDX-License-Identifier: Apache-2.0
"""The measured workloads.  Each takes a root directory (the loose tree or
a shardfs mount) or the shard files, does one complete pass and returns a
Result; none of them drops caches or knows which system it runs on, so
every system is measured by exactly the same code.
"""
import dataclasses
import mmap
import os
import random
import subprocess
import tarfile
import threading
import zlib

from system import timed


@dataclasses.dataclass
class Result:
    seconds: float
    files: int = 0
    nbytes: int = 0
    note: str = ""
    cpu_seconds: float = None      # where known: CPU time the step cost

    @property
    def files_per_s(self):
        return self.files / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self):
        return self.nbytes / 1e6 / self.seconds if self.seconds else 0.0


class VerifyError(AssertionError):
    pass


def walk_stat(root):
    """os.walk the tree and os.stat every file, as a crawler or a data
    set indexer does.  Counts files and directories."""
    def walk():
        files = dirs = 0
        for dirpath, dirnames, filenames in os.walk(root):
            dirs += len(dirnames)
            for name in filenames:
                os.stat(os.path.join(dirpath, name))
            files += len(filenames)
        return files, dirs
    seconds, (files, dirs) = timed(walk)
    return Result(seconds, files=files, note="%d files, %d dirs" % (files, dirs))


def image_folder(root):
    """Construct torchvision's ImageFolder(root) (it lists the tree)."""
    from torchvision.datasets import ImageFolder
    seconds, ds = timed(ImageFolder, root)
    return Result(seconds, files=len(ds.samples),
                  note="%d images, %d classes" % (len(ds.samples), len(ds.classes)))


def _read(path):
    with open(path, "rb", buffering=0) as f:
        return f.read()


def _read_list(root, names, expected, totals, lock):
    """Read names under root and add files, bytes, bad checksums and the
    first error to totals."""
    files = nbytes = bad = 0
    error = None
    try:
        for name in names:
            data = _read(os.path.join(root, name))
            files += 1
            nbytes += len(data)
            if expected is not None:
                member = expected[name]
                if len(data) != member.size or zlib.crc32(data) != member.crc:
                    bad += 1
    except OSError as e:
        error = e
    with lock:
        totals["files"] += files
        totals["bytes"] += nbytes
        totals["bad"] += bad
        totals["error"] = totals["error"] or error


def _in_threads(target, shares):
    """Run target(share) in a thread per share, all at once; return the
    wall time until the last one ends."""
    workers = [threading.Thread(target=target, args=(share,)) for share in shares]

    def run():
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    seconds, _ = timed(run)
    return seconds


def read_files(root, names, threads=1, expected=None):
    """Read every file of names (relative to root) completely, in that
    order; with threads > 1, thread i reads names[i::threads] so the
    overall order stays close to the given one.  With expected (name ->
    Member) every file's size and CRC-32 are checked."""
    totals = {"files": 0, "bytes": 0, "bad": 0, "error": None}
    lock = threading.Lock()
    seconds = _in_threads(lambda share: _read_list(root, share, expected, totals, lock),
                          [names[i::threads] for i in range(threads)])
    if totals["error"]:
        raise VerifyError("read %d of %d files, then: %s"
                          % (totals["files"], len(names), totals["error"]))
    if totals["bad"]:
        raise VerifyError("%d of %d files read back with a wrong size or CRC"
                          % (totals["bad"], totals["files"]))
    note = "every byte verified (CRC-32)" if expected is not None else ""
    return Result(seconds, files=totals["files"], nbytes=totals["bytes"],
                  note=note)


def _decoded_image_folder(root):
    """ImageFolder(root) as a training input pipeline has it: PIL decode,
    Resize((64, 64)) + ToTensor.  It lists the tree."""
    from torchvision import transforms
    from torchvision.datasets import ImageFolder
    return ImageFolder(root, transform=transforms.Compose(
        [transforms.Resize((64, 64)), transforms.ToTensor()]))


def _timed_epoch(ds, batch_size, workers, **order):
    """One pass of DataLoader(ds, **ORDER) (a sampler, or shuffle and a
    generator) with WORKERS workers: (seconds, images loaded)."""
    import torch
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers,
                                         **order)
    return timed(lambda: sum(len(labels) for _, labels in loader))


def dataloader_epoch(root, workers=2, batch_size=64, seed=0):
    """One shuffled epoch of a typical training input pipeline: ImageFolder,
    PIL decode, Resize((64, 64)) + ToTensor, DataLoader(num_workers=2).
    The ImageFolder is built before the clock starts."""
    import torch
    ds = _decoded_image_folder(root)
    seconds, images = _timed_epoch(ds, batch_size, workers, shuffle=True,
                                   generator=torch.Generator().manual_seed(seed))
    return Result(seconds, files=images,
                  note="%d images, batch %d, %d workers" % (images, batch_size, workers))


def dataloader_share(root, nodes, between=None, workers=2, batch_size=64, seed=0):
    """One node's share of a shuffled epoch through a typical training
    input pipeline: ImageFolder (its listing before the clock starts;
    then BETWEEN(), if given), the rank-0 share of
    DistributedSampler(num_replicas=NODES, shuffle=True, seed=SEED) or,
    for NODES 0, a RandomSampler epoch; PIL decode, Resize((64, 64)) +
    ToTensor, DataLoader(num_workers=2).  Returns (Result, the names of
    the files the share read, relative to ROOT)."""
    import torch
    from torch.utils.data import DistributedSampler, RandomSampler
    ds = _decoded_image_folder(root)
    if between:
        between()
    sampler = (RandomSampler(ds, generator=torch.Generator().manual_seed(seed)) if not nodes
               else DistributedSampler(ds, num_replicas=nodes, rank=0, shuffle=True,
                                       seed=seed))
    order = list(sampler)
    seconds, images = _timed_epoch(ds, batch_size, workers, sampler=order)
    names = [os.path.relpath(ds.samples[i][0], root) for i in order]
    return Result(seconds, files=images,
                  note="%d images, batch %d, %d workers" % (images, batch_size, workers)), names


def shards_in_order(shards):
    """Member names of each shard, in shard order (from the tar headers)."""
    out = []
    for path in shards:
        with tarfile.open(path) as tar:
            out.append([m.name for m in tar.getmembers() if m.isfile()])
    return out


def dataloader_shard_order(root, shard_names, seed, workers=2, batch_size=64):
    """A DataLoader epoch whose sampler visits the shards in a shuffled
    order, each front to back (what a WebDataset-style loader does);
    shard_names: shards_in_order() of the shards mounted at root."""
    ds = _decoded_image_folder(root)
    where = {os.path.relpath(p, root): i for i, (p, _) in enumerate(ds.samples)}
    shards = list(shard_names)
    random.Random(seed).shuffle(shards)
    order = [where[n] for names in shards for n in names if n in where]
    seconds, images = _timed_epoch(ds, batch_size, workers, sampler=order)
    return Result(seconds, files=images, note="%d images, shard order" % images)


def cat_shards(shards, total_bytes):
    """`cat` every shard to /dev/null: the sequential-read limit."""
    seconds, _ = timed(subprocess.run, ["cat", *shards],
                       stdout=subprocess.DEVNULL, check=True)
    return Result(seconds, files=len(shards), nbytes=total_bytes,
                  note="%d shards" % len(shards))


# Unit of the header reads: the page, as a scanner reading headers sees it.
BLOCK = 4096


def header_blocks(shards):
    """Per shard, the offsets of the BLOCK-aligned blocks that hold its tar
    headers (PAX and ustar), in order, as tarfile lists them, and the
    number of members."""
    out, members = [], 0
    for path in shards:
        blocks = []
        with tarfile.open(path, "r:") as tar:
            for m in tar:
                members += 1
                for b in range(m.offset // BLOCK * BLOCK, m.offset_data, BLOCK):
                    if not blocks or blocks[-1] != b:
                        blocks.append(b)
        out.append((path, blocks))
    return out, members


def _read_blocks(jobs, totals, lock):
    buf = mmap.mmap(-1, BLOCK)          # page-aligned, as O_DIRECT wants
    n, error = 0, None
    try:
        for path, blocks in jobs:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            try:
                for b in blocks:
                    os.preadv(fd, [buf], b)
                    n += 1
            finally:
                os.close(fd)
    except OSError as e:
        error = e
    with lock:
        totals["blocks"] += n
        totals["error"] = totals["error"] or error


def read_header_blocks(shard_blocks, members, threads):
    """Read the blocks holding every tar header with O_DIRECT, each thread
    its share of the shards in order, as a header scan with as many
    threads would: the time the disk needs to deliver the headers at its
    random-read rate, the floor of a cold mount without an index."""
    totals, lock = {"blocks": 0, "error": None}, threading.Lock()
    seconds = _in_threads(lambda share: _read_blocks(share, totals, lock),
                          [shard_blocks[i::threads] for i in range(threads)])
    if totals["error"]:
        raise VerifyError("header blocks: %s" % totals["error"])
    return Result(seconds, files=members, nbytes=totals["blocks"] * BLOCK,
                  note="%d headers in %d blocks, %d threads"
                  % (members, totals["blocks"], threads))


def tar_stream(shards):
    """Stream every shard with tarfile ('r|') reading each member, as a
    WebDataset loader does."""
    def stream():
        files = nbytes = 0
        for path in shards:
            with tarfile.open(path, "r|") as tar:
                for member in tar:
                    if member.isfile():
                        nbytes += len(tar.extractfile(member).read())
                        files += 1
        return files, nbytes
    seconds, (files, nbytes) = timed(stream)
    return Result(seconds, files=files, nbytes=nbytes)
