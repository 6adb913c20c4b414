#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Sampler benchmark: what ShardAwareSampler buys over RandomSampler.

On the benchmark's ImageNet-like data set (dataset.py: WebDataset shards
whose members are `<class>/<key>.jpg|json|cls`, and the same files as a
loose tree on local disk) it times one DataLoader epoch over
torchvision's ImageFolder, cold (page cache, dentries and inodes dropped
before every epoch, and shardfs mounted afresh unless --same-mount), for

  loose   random        the loose tree, RandomSampler (shuffle=True)
  shardfs random        a shardfs mount of the shards, RandomSampler
  shardfs shard-aware   the mount, shardfs.torch.ShardAwareSampler, for
                        each --windows value

with two pipelines: `read` (the loader reads the file and returns its
size: the storage's share of an epoch) and, with --decode, `decode` (PIL
decode, Resize((64, 64)), ToTensor: a real input pipeline).  For each
order it also reports how sequential it is for the storage (the
fractions of shardfs.torch.read_pattern) and, on the mount, the shard
reads the daemon issued (from /.shardfs/stats).

Run as root with Debian's /usr/bin/python3 (it sees python3-torch):
    /usr/bin/python3 tests/bench/sampler_bench.py [--quick] [--decode]
Results: a markdown table on stdout, JSON in WORKDIR/results/.
"""
import argparse
import contextlib
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "python"))

import dataset                                   # noqa: E402
import shardfs_testlib as testlib                # noqa: E402
import system                                    # noqa: E402
from bench import log                            # noqa: E402

SEED = 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--shard-samples", type=int, default=500)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--quick", action="store_true",
                   help="3000 samples in shards of 1000 (bench.py --quick's set)")
    p.add_argument("--windows", default="1,4",
                   help="ShardAwareSampler windows to measure (comma list)")
    p.add_argument("--repeat", type=int, default=3,
                   help="epochs per configuration, round-robin; the median counts")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--decode", action="store_true",
                   help="also time the decode + resize pipeline")
    p.add_argument("--same-mount", action="store_true",
                   help="one mount for every epoch (default: a fresh mount each)")
    p.add_argument("--workdir", default="/var/tmp/shardfs-bench")
    p.add_argument("--shardfs", default=os.path.join(REPO, "build", "shardfs"))
    args = p.parse_args(argv)
    if args.quick:
        args.samples, args.shard_samples = 3_000, 1_000
    args.windows = [int(w) for w in args.windows.split(",")]
    return args


# --------------------------------------------------------------------------
# the measured epoch


def read_size(path):
    """ImageFolder loader of the `read` pipeline: read the whole file."""
    with open(path, "rb", buffering=0) as f:
        return len(f.read())


def make_dataset(root, pipeline):
    from torchvision import datasets, transforms
    if pipeline == "read":
        return datasets.ImageFolder(root, loader=read_size)
    return datasets.ImageFolder(root, transform=transforms.Compose(
        [transforms.Resize((64, 64)), transforms.ToTensor()]))


def make_sampler(name, ds):
    """(sampler, seconds to build it) for a sampler name: "random" or
    "shard-aware/W"."""
    import torch
    from shardfs.torch import ShardAwareSampler
    if name == "random":
        return torch.utils.data.RandomSampler(
            ds, generator=torch.Generator().manual_seed(SEED)), 0.0
    window = int(name.split("/")[1])
    seconds, sampler = system.timed(ShardAwareSampler, ds, seed=SEED, window=window)
    return sampler, seconds


def epoch(ds, sampler, args):
    """One cold epoch; returns (seconds, images, bytes or None)."""
    import torch
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size,
                                         sampler=sampler, num_workers=args.workers)
    system.drop_caches()

    def run():
        images = nbytes = 0
        for data, labels in loader:
            images += len(labels)
            if data.dtype == torch.int64:
                nbytes += int(data.sum())
        return images, nbytes or None
    seconds, (images, nbytes) = system.timed(run)
    return seconds, images, nbytes


class LooseTree:
    """The files as a plain tree on local disk."""
    name = "loose"

    def __init__(self, root):
        self.root = root

    @contextlib.contextmanager
    def session(self):
        yield

    def stats(self):
        return {}


class MountedTree:
    """A shardfs mount of the shards.  Unless same_mount, every epoch gets
    a fresh mount: shardfs keeps per-shard readahead state from one pass
    to the next (which, at the time of writing, disables its prefetch on
    a second forward pass), and a fresh daemon is what a cold start is."""
    name = "shardfs"

    def __init__(self, shards_dir, mountpoint, same_mount=False):
        self.shards_dir, self.root, self.same_mount = shards_dir, mountpoint, same_mount

    def mount(self):
        return testlib.mounted(self.shards_dir, self.root, "-o", "quiet")

    def session(self):
        return contextlib.nullcontext() if self.same_mount else self.mount()

    def stats(self):
        with open(os.path.join(self.root, ".shardfs", "stats")) as f:
            return json.load(f)


def stats_delta(before, after):
    """Shard reads the daemon issued between two /.shardfs/stats."""
    if not after:
        return {}
    keys = ("backing_reads", "backing_read_bytes")
    out = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    for k in ("hits", "misses"):
        out["readahead_" + k] = (after.get("readahead", {}).get(k, 0) -
                                 before.get("readahead", {}).get(k, 0))
    return out


def pattern_of(sampler, locations):
    from shardfs.torch import read_pattern
    return read_pattern(list(sampler), locations)


def one_epoch(tree, name, pipeline, args, locations):
    """Build the data set and sampler, run one cold epoch; a result row."""
    with tree.session():
        ds = make_dataset(tree.root, pipeline)
        sampler, build_s = make_sampler(name, ds)
        before = tree.stats()
        seconds, images, nbytes = epoch(ds, sampler, args)
        after = tree.stats()
    log("  %-8s %-14s %-6s %7.2f s %6.0f img/s" % (
        tree.name, name, pipeline, seconds, images / seconds))
    return {"system": tree.name, "sampler": name, "pipeline": pipeline,
            "seconds": seconds, "images": images, "bytes": nbytes,
            "sampler_build_s": build_s,
            "pattern": pattern_of(sampler, locations) if locations else {},
            "daemon": stats_delta(before, after)}


def measure(tree, sampler_names, args, locations=None):
    """Every (pipeline, sampler) epoch on TREE, args.repeat times in
    round-robin order; returns one row per configuration, its median
    epoch (all times kept in "all_seconds").  With LOCATIONS each order's
    read pattern is recorded too."""
    configs = [(pipeline, name)
               for pipeline in ["read"] + (["decode"] if args.decode else [])
               for name in sampler_names]
    runs = {config: [] for config in configs}
    for _ in range(args.repeat):
        for pipeline, name in configs:
            runs[pipeline, name].append(one_epoch(tree, name, pipeline, args,
                                                  locations))
    rows = []
    for config in configs:
        ordered = sorted(runs[config], key=lambda r: r["seconds"])
        row = dict(ordered[len(ordered) // 2])
        row["all_seconds"] = [r["seconds"] for r in runs[config]]
        rows.append(row)
    return rows


def measure_shardfs(ds, args):
    """The mount, with RandomSampler and each ShardAwareSampler window."""
    from shardfs.torch import sample_locations
    tree = MountedTree(ds.shards_dir, os.path.join(
        args.workdir, "mnt-sampler-%d" % os.getpid()), args.same_mount)
    samplers = ["random"] + ["shard-aware/%d" % w for w in args.windows]
    with tree.mount():
        locations = sample_locations(make_dataset(tree.root, "read"), tree.root)
        if args.same_mount:
            rows = measure(tree, samplers, args, locations)
    if not args.same_mount:
        rows = measure(tree, samplers, args, locations)
    os.rmdir(tree.root)
    return rows


# --------------------------------------------------------------------------
# report


def markdown(run):
    lines = [
        "### Sampler benchmark, %s" % run["date"], "",
        "- data set: %(samples)d samples, %(shards)d shards, %(classes)d classes"
        % run["dataset"],
        "- machine: %(cpu)s; %(ram)s; %(disk)s" % run["machine"],
        "- load average at start / end: %.2f / %.2f (shared machine?)"
        % tuple(run["load"]),
        "- every epoch cold (caches dropped%s); DataLoader %d workers, batch %d; "
        "%d epochs per configuration, round-robin" % (
            "" if run["same_mount"] else ", shardfs mounted afresh",
            run["workers"], run["batch_size"], run["repeat"]),
        "",
        "| tree | sampler | pipeline | epoch s (median) | all epochs s | img/s | MB/s "
        "| same-shard forward | stream forward | shard reads | mean shard read KiB "
        "| readahead hits / misses |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in run["rows"]:
        d, p = r["daemon"], r["pattern"]
        reads = d.get("backing_reads")
        mean_kib = d["backing_read_bytes"] / reads / 1024 if reads else None
        mb_s = "%.0f" % (r["bytes"] / 1e6 / r["seconds"]) if r["bytes"] else "—"
        readahead = ("{:,} / {:,}".format(d["readahead_hits"], d["readahead_misses"])
                     if d else "—")
        lines.append("| %s | %s | %s | %.2f | %s | %.0f | %s | %s | %s | %s | %s | %s |" % (
            r["system"], r["sampler"], r["pipeline"], r["seconds"],
            ", ".join("%.2f" % t for t in r["all_seconds"]),
            r["images"] / r["seconds"], mb_s,
            "%.3f" % p["same_shard_forward"] if p else "—",
            "%.3f" % p["stream_forward"] if p else "—",
            "{:,}".format(reads) if reads else "—",
            "%.0f" % mean_kib if mean_kib else "—", readahead))
    return "\n".join(lines) + "\n"


def save(run, workdir):
    out = os.path.join(workdir, "results")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "sampler-%s.json" % run["date"].replace(":", ""))
    with open(path, "w") as f:
        json.dump(run, f, indent=1)
    log("results: " + path)


def main():
    args = parse_args()
    system.check_can_drop_caches()
    testlib.SHARDFS = os.path.abspath(args.shardfs)
    started = datetime.datetime.now()
    load = [os.getloadavg()[0]]
    ds = dataset.ensure(dataset.Params(args.samples, args.shard_samples,
                                       args.classes), args.workdir, log)
    log("measuring shardfs")
    rows = measure_shardfs(ds, args)
    log("measuring loose")
    loose_rows = measure(LooseTree(ds.loose_dir), ["random"], args)
    load.append(os.getloadavg()[0])
    run = {"date": started.isoformat(timespec="seconds"),
           "machine": system.machine_info(args.workdir), "load": load,
           "dataset": {"samples": ds.params.samples, "shards": len(ds.shards),
                       "classes": ds.class_count},
           "workers": args.workers, "batch_size": args.batch_size,
           "repeat": args.repeat, "same_mount": args.same_mount,
           "rows": loose_rows + rows}
    save(run, args.workdir)
    print(markdown(run))


if __name__ == "__main__":
    main()
