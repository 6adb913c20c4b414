# SPDX-License-Identifier: Apache-2.0
"""shardfs-pace: does data delivery keep pace with compute?

The check to run before a long training job.  Given a directory (a
shardfs mount, or any ImageFolder tree for comparison) and the training
shape, it runs the job's own loader configuration -- torchvision
ImageFolder, a DataLoader with the job's workers and batch size, the
ShardAwareSampler or a random sampler -- for a bounded number of steps,
each followed by the step's compute: a sleep of the step time, or with
`--device cuda` a real forward and backward pass of a small model.  It
then reports:

- required against delivered samples/s.  The job needs
  global batch / step time samples/s in all, global batch / step time /
  nodes on each node; this machine plays one node, running
  `--ranks-per-node` loaders side by side in lockstep (a synchronous
  data-parallel step waits for its slowest rank).  Delivery keeps pace
  when the node's delivered rate is within `--tolerance` (10 %) of its
  requirement: the steps are then not slowed down by waiting for data;
- the fraction of each step spent waiting for the DataLoader (p50, p95),
  which is what the PyTorch profiler shows as time in the DataLoader's
  `__next__`;
- what the storage served during the measured steps (not the warm-up):
  on a shardfs mount the FUSE requests and their latency, shard reads and
  bytes, and for http:// and s3:// shards the GETs, bytes and GET
  latency counted in `/.shardfs/stats`; whether a page cache served the
  steps instead (`--cold`, as root, drops the kernel's caches before
  them); beside it the metadata operations the same reads cost on a
  loose tree of files (a stat, an open and a close per file read);
- the machine during the measured steps (diagnose.py): CPU busy and
  iowait, context switches, the CPU of the mount's daemon and of the
  DataLoader workers, GPU utilisation with --device cuda; and from them
  the bottleneck -- decoding CPU, storage latency, storage bandwidth, the
  FUSE daemon, or the GPU -- with the figure that shows it and one
  suggestion;
- `--plot FILE.png`: the wait of every step, the delivered rate against
  the required one and the pass line, CPU busy and iowait per step;
  `--json FILE`: everything above, for scripts; `--trace DIR`: a PyTorch
  profiler trace (TensorBoard) of steps 5-9, where the gaps in
  `DataLoader.__next__` show.

Exit status: 0 delivery keeps pace, 1 it does not, 2 usage error (also:
`--device cuda` without a CUDA device).
"""
import argparse
import importlib
import json
import math
import multiprocessing
import os
import statistics
import sys
import time

from . import CONTROL_DIR, NotOnShardfs, find_mount_root
from . import diagnose

__all__ = ["main", "training_shape", "storage_report", "UsageError"]

EXIT_KEEPS_PACE = 0
EXIT_TOO_SLOW = 1
EXIT_USAGE = 2

DEFAULT_TOLERANCE = 0.10	# delivered may fall this far below required
DEFAULT_STEPS = 50
DEFAULT_WARMUP = 2		# first steps not measured: worker start-up
DEFAULT_IMAGE_SIZE = 224	# Resize((224, 224)) + ToTensor by default
# --trace: torch.profiler.schedule of the seed's profile (steps 3-9)
TRACE_SCHEDULE = {"wait": 2, "warmup": 2, "active": 5, "repeat": 1}
TRACE_STEPS = 9		# the steps that schedule takes
DROP_CACHES = "/proc/sys/vm/drop_caches"
# a stat, an open and a close: what reading one loose file costs the
# storage's metadata service before any byte moves
LOOSE_TREE_OPS_PER_FILE = 3
# ioctls the mount was sent per file read from which the report says
# where they come from: Python's open() asks isatty() of every file it
# opens, and a FUSE mount answers each with a round trip
IOCTLS_NOTED_PER_FILE = 0.5


class UsageError(ValueError):
    """A command line that cannot describe a training job."""


# ------------------------------------------------------------- the shape

def training_shape(global_batch=None, step_time=None, required_rate=None,
                   nodes=1, ranks_per_node=1, batch_size=None):
    """The job's shape as a dict: global_batch, step_time (s),
    batch_size (per rank), ranks (in all), required (samples/s, all
    nodes) and required_per_node.  Either GLOBAL_BATCH and STEP_TIME, or
    REQUIRED_RATE (with BATCH_SIZE, default 32 per rank).  Raises
    UsageError for a shape that does not add up."""
    if nodes < 1 or ranks_per_node < 1:
        raise UsageError("--nodes and --ranks-per-node must be at least 1")
    ranks = nodes * ranks_per_node
    if required_rate is not None:
        if global_batch is not None or step_time is not None:
            raise UsageError("give --required-rate or --global-batch with "
                             "--step-time, not both")
        if required_rate <= 0:
            raise UsageError("--required-rate must be positive")
        batch_size = batch_size or 32
        global_batch = batch_size * ranks
        step_time = global_batch / required_rate
    else:
        if global_batch is None or step_time is None:
            raise UsageError("give --global-batch and --step-time (or "
                             "--required-rate)")
        if global_batch < 1 or step_time <= 0:
            raise UsageError("--global-batch and --step-time must be positive")
        if batch_size is None:
            if global_batch % ranks:
                raise UsageError(
                    "--global-batch %d is not divisible by the %d ranks "
                    "(%d nodes x %d): give --batch-size"
                    % (global_batch, ranks, nodes, ranks_per_node))
            batch_size = global_batch // ranks
        elif batch_size * ranks != global_batch:
            raise UsageError(
                "--batch-size %d x %d ranks is %d samples, not the "
                "--global-batch %d" % (batch_size, ranks, batch_size * ranks,
                                       global_batch))
    if batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    required = global_batch / step_time
    return {"global_batch": global_batch, "step_time": step_time,
            "batch_size": batch_size, "nodes": nodes,
            "ranks_per_node": ranks_per_node, "ranks": ranks,
            "required": required, "required_per_node": required / nodes}


# ----------------------------------------------------------- the storage

def read_stats(mountpoint):
    """The mount's `/.shardfs/stats` (a dict), or None off shardfs."""
    if mountpoint is None:
        return None
    with open(os.path.join(mountpoint, CONTROL_DIR, "stats")) as f:
        return json.load(f)


def storage_report(before, after, files_read, system=None):
    """What the storage served between two stats snapshots (None off
    shardfs; diagnose.storage_report), beside what FILES_READ loose files
    would have cost."""
    report = diagnose.storage_report(before, after, files_read, system)
    report["loose_tree_metadata_ops"] = LOOSE_TREE_OPS_PER_FILE * files_read
    return report


# ------------------------------------------------------------ the loader

class _Counted:
    """A dataset that counts the samples its workers load (shared
    memory: the workers are other processes)."""

    def __init__(self, dataset, counter):
        self.dataset, self.counter = dataset, counter

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        with self.counter.get_lock():
            self.counter.value += 1
        return self.dataset[index]


def _transform(spec, image_size):
    """The transform: MODULE:NAME (a callable taking a PIL image), or
    Resize((SIZE, SIZE)) + ToTensor (ToTensor alone for size 0)."""
    from torchvision import transforms
    if spec:
        module, _, name = spec.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as e:
            raise UsageError("--transform %s: %s" % (spec, e)) from None
    steps = [transforms.Resize((image_size, image_size))] if image_size else []
    return transforms.Compose(steps + [transforms.ToTensor()])


def _sampler(name, dataset, shape, rank, seed, mountpoint):
    import torch
    import torch.utils.data as tud
    from .torch import ShardAwareSampler
    if name == "shard-aware":
        return ShardAwareSampler(dataset, num_replicas=shape["ranks"],
                                 rank=rank, seed=seed, mountpoint=mountpoint)
    if shape["ranks"] == 1:
        return tud.RandomSampler(dataset,
                                 generator=torch.Generator().manual_seed(seed))
    return tud.DistributedSampler(dataset, num_replicas=shape["ranks"],
                                  rank=rank, seed=seed)


class _Epochs:
    """SAMPLER's orders of epoch 0, 1, 2, ... one after the other, so that
    a run longer than an epoch (a small tree) measures the steady state
    rather than a DataLoader restarting at every epoch's end."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        epoch = 0
        while True:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            yield from self.sampler
            epoch += 1


def _build_ranks(opts, shape, dataset, counter, mountpoint):
    import torch.utils.data as tud
    ranks = []
    for rank in range(shape["ranks_per_node"]):
        sampler = _sampler(opts.sampler, dataset, shape, rank, opts.seed,
                           mountpoint)
        loader = tud.DataLoader(
            _Counted(dataset, counter), batch_size=shape["batch_size"],
            sampler=_Epochs(sampler), num_workers=opts.workers,
            pin_memory=opts.device == "cuda")
        ranks.append(iter(loader))
    return ranks


# ----------------------------------------------------------- the compute

class _SleepCompute:
    """The step's compute simulated: a sleep of the step time."""

    def __init__(self, step_time):
        self.step_time = step_time

    def __call__(self, batches):
        time.sleep(self.step_time)


class _CudaCompute:
    """A real forward and backward pass of a small model (ResNet-18) on
    every rank's batch, one GPU per rank (modulo the GPUs there are)."""

    def __init__(self, ranks, classes):
        import torch
        import torchvision
        count = torch.cuda.device_count()
        self.torch = torch
        self.devices = [torch.device("cuda", r % count) for r in range(ranks)]
        self.models = [torchvision.models.resnet18(num_classes=max(classes, 1)).to(d)
                       for d in self.devices]
        self.optims = [torch.optim.SGD(m.parameters(), lr=0.01) for m in self.models]

    def __call__(self, batches):
        loss_fn = self.torch.nn.functional.cross_entropy
        for (x, y), model, optim, dev in zip(batches, self.models,
                                             self.optims, self.devices):
            optim.zero_grad()
            loss = loss_fn(model(x.to(dev, non_blocking=True)),
                           y.to(dev, non_blocking=True))
            loss.backward()
            optim.step()
        for dev in set(self.devices):
            self.torch.cuda.synchronize(dev)


def _fetch_all(ranks, pool):
    """Every rank's next batch; all ranks fetch at once, as they would on
    their own processes."""
    if pool is None:
        return [next(ranks[0])]
    return list(pool.map(next, ranks))


class _NoHooks:
    def begin(self):
        pass

    def step(self, measured):
        return {}


def run_steps(ranks, compute, steps, warmup, hooks=_NoHooks()):
    """Run WARMUP + STEPS steps; returns one record per measured step:
    wait (s, until the last rank had its batch), step (s, wait +
    compute), samples (node), t (s since the first measured step began),
    and what HOOKS.step(measured) adds after every step.  HOOKS.begin()
    runs just before the first measured step."""
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(len(ranks)) if len(ranks) > 1 else None
    records = []
    try:
        start = None
        for step in range(warmup + steps):
            if step == warmup:
                hooks.begin()
            t0 = time.perf_counter()
            if step == warmup:
                start = t0
            batches = _fetch_all(ranks, pool)
            t1 = time.perf_counter()
            compute(batches)
            t2 = time.perf_counter()
            extra = hooks.step(step >= warmup)
            if step >= warmup:
                records.append({"wait": t1 - t0, "step": t2 - t0,
                                "samples": sum(len(b[1]) for b in batches),
                                "t": t2 - start, **extra})
    finally:
        if pool is not None:
            pool.shutdown()
    return records


class _Hooks:
    """What runs around the steps: --cold's cache drop and the probe's
    first snapshot before the measured steps, the CPU shares after each
    measured step, the profiler's step after every step."""

    def __init__(self, probe, counter, cold, profiler):
        self.probe, self.counter, self.cold = probe, counter, cold
        self.profiler, self.files_at_begin = profiler, 0

    def begin(self):
        if self.cold:
            os.sync()
            with open(DROP_CACHES, "w") as f:
                f.write("3\n")
        self.files_at_begin = self.counter.value
        self.probe.begin()

    def step(self, measured):
        if self.profiler is not None:
            self.profiler.step()
        if not measured:
            return {}
        busy, iowait = self.probe.step()
        return {"cpu_busy": busy, "cpu_iowait": iowait}


# ------------------------------------------------------------ the report

def percentile(values, q):
    """The Q-th percentile (0..100) of VALUES, linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(records, shape, tolerance):
    elapsed = records[-1]["t"] if records else 0.0
    samples = sum(r["samples"] for r in records)
    delivered = samples / elapsed if elapsed > 0 else 0.0
    fractions = [r["wait"] / r["step"] for r in records if r["step"] > 0]
    waited = sum(r["wait"] for r in records)
    return {
        "required_per_node": shape["required_per_node"],
        "delivered_per_node": delivered,
        "delivered": delivered * shape["nodes"],
        "ratio": delivered / shape["required_per_node"],
        "keeps_pace": delivered >= shape["required_per_node"] * (1 - tolerance),
        "tolerance": tolerance,
        "measured_steps": len(records),
        "measured_seconds": elapsed,
        "wait_fraction_p50": percentile(fractions, 50),
        "wait_fraction_p95": percentile(fractions, 95),
        "wait_fraction_mean": statistics.fmean(fractions) if fractions else 0.0,
        "wait_share": waited / elapsed if elapsed > 0 else 0.0,
    }


def _si(n):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return "%.1f %s" % (n / scale, unit)
    return "%d " % n


def format_report(result):
    s, v = result["shape"], result["verdict"]
    lines = [
        "shardfs-pace: %s: %d samples, %d classes, %s" % (
            result["directory"], result["samples"], result["classes"],
            "shardfs mount %s" % result["mountpoint"] if result["mountpoint"]
            else "not a shardfs mount"),
        "training shape: %d ranks (%d nodes x %d ranks), global batch %d (%d "
        "per rank), step %.3f s" % (s["ranks"], s["nodes"], s["ranks_per_node"],
                                    s["global_batch"], s["batch_size"],
                                    s["step_time"]),
        "required:  %9.1f samples/s in all, %.1f per node" % (
            s["required"], s["required_per_node"]),
        "delivered: %9.1f samples/s per node (%.0f%% of required) over %d "
        "steps, %d workers per rank, %s sampler, %s compute" % (
            v["delivered_per_node"], 100 * v["ratio"], v["measured_steps"],
            result["workers"], result["sampler"], result["device"]),
        "waiting for data: p50 %.1f%%, p95 %.1f%% of each step" % (
            100 * v["wait_fraction_p50"], 100 * v["wait_fraction_p95"]),
    ]
    lines += _storage_lines(result)
    lines += _system_lines(result)
    lines.append("verdict: %s (delivered %s %.0f%% of required)" % (
        "KEEPS PACE" if v["keeps_pace"] else "DOES NOT KEEP PACE",
        ">=" if v["keeps_pace"] else "<", 100 * (1 - v["tolerance"])))
    d = result["diagnosis"]
    lines.append("bottleneck: %s: %s; suggestion: %s" % (
        d["bottleneck"], d["figure"], d["suggestion"]))
    if result.get("trace"):
        lines.append("profiler trace (tensorboard --logdir %s): steps %d-%d" % (
            result["trace"], TRACE_SCHEDULE["wait"] + TRACE_SCHEDULE["warmup"] + 1,
            TRACE_STEPS))
    return "\n".join(lines)


def _storage_lines(result):
    """What the storage served during the measured steps, in words."""
    st, samples = result["storage"], result["samples"]
    passes = st["files_read"] / samples if samples else 0.0
    if "fuse_requests" not in st:
        return ["storage: %d files read (the set %.1f times): %d metadata ops "
                "(stat+open+close per file)" % (st["files_read"], passes,
                                                st["loose_tree_metadata_ops"])]
    lines = ["storage during the measured steps: %d files read (the set %.1f "
             "times) with %d FUSE requests (reads %.0f us mean); %d shard reads, "
             "%sB from shards (%sB of it pushed ahead into the page cache), "
             "%sB from the storage; a loose tree: %d metadata ops (stat+open+"
             "close per file)" % (st["files_read"], passes, st["fuse_requests"],
                                  st["fuse_read_latency_mean_us"], st["shard_reads"],
                                  _si(st["shard_read_bytes"]),
                                  _si(st["pushed_ahead_bytes"]), _si(st["storage_bytes"]),
                                  st["loose_tree_metadata_ops"])]
    if "remote_gets" in st:
        lines.append("remote storage served %d GETs (%.2f per sample), %sB, first "
                     "byte after %.1f ms on average" % (st["remote_gets"], st["remote_gets_per_sample"],
                                      _si(st["remote_bytes"]),
                                      st["remote_get_latency_mean_ms"]))
    ioctls = st["fuse_requests_by_op"].get("ioctl", 0)
    if ioctls >= IOCTLS_NOTED_PER_FILE * st["files_read"] > 0:
        lines.append("note: %d of the FUSE requests were ioctls: Python's open() asks "
                     "isatty() of every file it opens, a round trip each on a FUSE "
                     "mount; ImageFolder(..., loader=shardfs.torch.pil_loader) sends "
                     "none" % ioctls)
    if st["page_cache"]:
        lines.append("note: %s%s" % (st["page_cache"], "" if result["cold"] else
                                     "; --cold (root) drops the caches first"))
    return lines


def _system_lines(result):
    sy = result["system"]
    line = "machine during the steps: CPU busy %.0f%% of %d CPUs, iowait %.0f%%, " \
           "%.0f context switches/s; DataLoader workers %.2f CPUs" % (
               100 * sy["cpu_busy"], sy["cpus"], 100 * sy["cpu_iowait"],
               sy["context_switches_per_s"], sy["workers_cpus"])
    if sy["daemon_cpus"] is not None:
        line += ", shardfs daemon %.2f CPUs" % sy["daemon_cpus"]
    if sy.get("gpu_util") is not None:
        line += ", GPU %.0f%%" % sy["gpu_util"]
    return [line]


def write_plot(path, result):
    """PNG: wait per step (top), delivered and required rate with the
    pass line (middle), CPU busy and iowait per step (bottom)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    recs = result["steps"]
    t = [r["t"] for r in recs]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    top.bar([r["t"] - r["step"] for r in recs], [1000 * r["wait"] for r in recs],
            width=[r["step"] * 0.9 for r in recs], align="edge",
            label="waiting for the DataLoader")
    top.axhline(1000 * result["shape"]["step_time"], color="grey",
                linestyle="--", label="compute per step")
    top.set_ylabel("ms per step")
    top.legend(loc="upper right")
    rates = [r["samples"] / r["step"] for r in recs]
    required = result["shape"]["required_per_node"]
    passing = required * (1 - result["verdict"]["tolerance"])
    middle.plot(t, rates, marker=".", label="delivered (per step)")
    middle.axhline(required, color="red", linestyle="--", label="required")
    middle.axhline(passing, color="orange", linestyle=":",
                   label="pass (%.0f%% of required)" % (100 * passing / required))
    middle.set_ylabel("samples/s per node")
    middle.set_ylim(0, 1.15 * max(rates + [required]))
    middle.legend(loc="lower right")
    bottom.plot(t, [100 * r["cpu_busy"] for r in recs], label="CPU busy")
    bottom.plot(t, [100 * r["cpu_iowait"] for r in recs], label="iowait")
    bottom.set_ylabel("% of all CPUs")
    bottom.set_ylim(0, 105)
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper right")
    fig.suptitle("shardfs-pace %s: %s; bottleneck: %s" % (
        result["directory"],
        "keeps pace" if result["verdict"]["keeps_pace"] else "does not keep pace",
        result["diagnosis"]["bottleneck"]))
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


# ------------------------------------------------------------ the command

def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1, not %s" % text)
    return value


def _nonnegative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more, not %s" % text)
    return value


def parser():
    p = argparse.ArgumentParser(
        prog="shardfs-pace",
        description="Does data delivery keep pace with compute?  Runs an "
        "ImageFolder DataLoader over DIR for a bounded number of steps, with "
        "the step time of the training job, and compares the samples/s it "
        "delivers with what the job needs (global batch / step time / nodes "
        "on one node).",
        epilog="example: 256 GPUs on 32 nodes, a 4,096-sample global batch, "
        "350 ms per step need 4096 / 0.35 = 11,703 samples/s (366 per node): "
        "shardfs-pace /mnt/data/train --global-batch 4096 --step-time 0.35 "
        "--nodes 32 --ranks-per-node 8 --workers 8.  Exit status: 0 keeps "
        "pace, 1 does not, 2 usage error.")
    p.add_argument("directory", metavar="DIR",
                   help="an ImageFolder tree: on a shardfs mount or not")
    g = p.add_argument_group("the training job")
    g.add_argument("--global-batch", type=_positive_int, metavar="N",
                   help="samples per step over all ranks")
    g.add_argument("--step-time", type=float, metavar="SECONDS",
                   help="compute time of one step")
    g.add_argument("--required-rate", type=float, metavar="SAMPLES_PER_S",
                   help="instead of the two above: samples/s the job needs "
                   "in all")
    g.add_argument("--nodes", type=_positive_int, default=1, metavar="N",
                   help="nodes of the job (this machine plays one; default 1)")
    g.add_argument("--ranks-per-node", type=_positive_int, default=1, metavar="N",
                   help="ranks (GPUs, DataLoaders) per node (default 1)")
    g.add_argument("--batch-size", type=_positive_int, metavar="N",
                   help="samples per rank and step (default: global batch / "
                   "ranks; 32 with --required-rate)")
    g.add_argument("--workers", type=_nonnegative_int, default=4, metavar="N",
                   help="DataLoader workers per rank (default 4)")
    g.add_argument("--sampler", choices=("shard-aware", "random"),
                   help="ShardAwareSampler (default on a shardfs mount) or "
                   "RandomSampler / DistributedSampler (default elsewhere)")
    g.add_argument("--image-size", type=_nonnegative_int,
                   default=DEFAULT_IMAGE_SIZE, metavar="PIXELS",
                   help="the default transform: Resize((PIXELS, PIXELS)) + "
                   "ToTensor (0: ToTensor alone; default 224)")
    g.add_argument("--transform", metavar="MODULE:NAME",
                   help="the job's transform (a callable taking a PIL image) "
                   "instead of the default")
    g.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: the compute is a sleep of --step-time; cuda: a "
                   "real forward/backward pass of ResNet-18 per batch")
    r = p.add_argument_group("the run and the report")
    r.add_argument("--steps", type=_positive_int, default=DEFAULT_STEPS,
                   metavar="N", help="measured steps (default %d)" % DEFAULT_STEPS)
    r.add_argument("--warmup", type=_nonnegative_int, default=DEFAULT_WARMUP,
                   metavar="N", help="steps run first and not measured "
                   "(worker start-up; default %d)" % DEFAULT_WARMUP)
    r.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   metavar="FRACTION", help="how far delivered may fall short "
                   "of required and still keep pace (default 0.10)")
    r.add_argument("--seed", type=int, default=0, help="sampler seed")
    r.add_argument("--json", metavar="FILE", help="write the results as JSON "
                   "('-': standard output, instead of the text report)")
    r.add_argument("--plot", metavar="FILE.png", help="write a PNG plot of the "
                   "wait per step, the delivered rate over time and the CPU")
    r.add_argument("--trace", metavar="DIR", help="write a PyTorch profiler "
                   "trace of steps 5-9 (schedule wait=2, warmup=2, active=5) "
                   "into DIR for TensorBoard: the gaps in DataLoader.__next__")
    r.add_argument("--cold", action="store_true", help="drop the kernel's page "
                   "cache before the measured steps, so that they read from "
                   "the storage (root; shardfs's own remote cache is kept)")
    return p


def _check_options(opts):
    """Raise UsageError for what argparse cannot check."""
    if not os.path.isdir(opts.directory):
        raise UsageError("%s is not a directory" % opts.directory)
    if not 0 <= opts.tolerance < 1:
        raise UsageError("--tolerance must be in [0, 1)")
    if opts.cold and not os.access(DROP_CACHES, os.W_OK):
        raise UsageError("--cold drops the kernel's caches (%s): run as root"
                         % DROP_CACHES)
    if opts.trace and opts.warmup + opts.steps < TRACE_STEPS:
        raise UsageError("--trace records steps 5-9: give --warmup + --steps "
                         "of at least %d" % TRACE_STEPS)
    if opts.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device here "
                             "(torch.cuda.is_available() is false); use "
                             "--device cpu to simulate the step time")


def measure(opts, shape):
    """Run the loaders; returns the result dict."""
    import torchvision
    directory = os.path.abspath(opts.directory)
    try:
        mountpoint = find_mount_root(directory)
    except NotOnShardfs:
        mountpoint = None
    sampler = opts.sampler or ("shard-aware" if mountpoint else "random")
    if sampler == "shard-aware" and mountpoint is None:
        raise UsageError("--sampler shard-aware needs a shardfs mount; %s is "
                         "not on one" % directory)
    try:
        dataset = torchvision.datasets.ImageFolder(
            directory, transform=_transform(opts.transform, opts.image_size))
    except (FileNotFoundError, RuntimeError) as e:
        raise UsageError("%s is not an ImageFolder tree: %s" % (directory, e)) from None
    counter = multiprocessing.Value("q", 0)
    ranks = _build_ranks(opts, shape, dataset, counter, mountpoint)
    compute = (_CudaCompute(len(ranks), len(dataset.classes))
               if opts.device == "cuda" else _SleepCompute(shape["step_time"]))
    probe = diagnose.Probe(mountpoint, read_stats)
    gpu = diagnose.GpuPoll() if opts.device == "cuda" else None
    records, files_read = _run_probed(opts, ranks, compute, probe, counter, gpu)
    system = probe.system_report(opts.workers * shape["ranks_per_node"])
    system["gpu_util"] = gpu.mean() if gpu else None
    verdict = summarize(records, shape, opts.tolerance)
    storage = storage_report(probe.start["stats"], probe.end["stats"], files_read,
                             system)
    return {
        "directory": directory, "mountpoint": mountpoint,
        "samples": len(dataset), "classes": len(dataset.classes),
        "sampler": sampler, "workers": opts.workers, "device": opts.device,
        "cold": opts.cold, "trace": opts.trace,
        "shape": shape, "verdict": verdict, "storage": storage, "system": system,
        "diagnosis": diagnose.diagnose(verdict, system, storage, system["gpu_util"]),
        "steps": records,
    }


def _profiler(opts):
    """The --trace profiler (entered), or None."""
    if not opts.trace:
        return None
    import torch.profiler as tp
    activities = [tp.ProfilerActivity.CPU] + (
        [tp.ProfilerActivity.CUDA] if opts.device == "cuda" else [])
    prof = tp.profile(activities=activities, schedule=tp.schedule(**TRACE_SCHEDULE),
                      on_trace_ready=tp.tensorboard_trace_handler(opts.trace))
    prof.__enter__()
    return prof


def _run_probed(opts, ranks, compute, probe, counter, gpu):
    """run_steps() with the probe, --cold, --trace and the GPU poll:
    (records, files read during the measured steps).  The probe's last
    snapshot is taken before the workers shut down."""
    prof = _profiler(opts)
    hooks = _Hooks(probe, counter, opts.cold, prof)
    if gpu:
        gpu.start()
    try:
        records = run_steps(ranks, compute, opts.steps, opts.warmup, hooks)
        files_read = counter.value - hooks.files_at_begin
        probe.finish()
    finally:
        if gpu:
            gpu.stop()
        if prof is not None:
            prof.__exit__(None, None, None)
        del ranks[:]		# shuts the workers down
    return records, files_read


def main(argv=None):
    p = parser()
    opts = p.parse_args(argv)	# exits 2 on a usage error
    try:
        shape = training_shape(opts.global_batch, opts.step_time,
                               opts.required_rate, opts.nodes,
                               opts.ranks_per_node, opts.batch_size)
        _check_options(opts)
        result = measure(opts, shape)
    except UsageError as e:
        p.print_usage(sys.stderr)
        print("shardfs-pace: error: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    if opts.json == "-":
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(format_report(result))
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump(result, f, indent=2)
                f.write("\n")
    if opts.plot:
        write_plot(opts.plot, result)
    return EXIT_KEEPS_PACE if result["verdict"]["keeps_pace"] else EXIT_TOO_SLOW


if __name__ == "__main__":
    sys.exit(main())
