# SPDX-License-Identifier: Apache-2.0
"""The benchmark's ImageNet-like data set, generated once and cached.

N samples in C classes, each sample being three files: a real JPEG of
about 100 KB on average, a `.json` and a `.cls` sidecar.  The same files
exist twice on disk:

* as WebDataset shards `shards/shard-NNNNNN.tar` (PAX tar, ~1,000 samples
  each, samples shuffled across shards as WebDataset writers do, members
  named `<class>/<key>.jpg|json|cls` so a shardfs mount is an ImageFolder
  tree), and
* as the loose tree `loose/<class>/<key>.*` that users have today.

Generation is fast because only a pool of a few hundred distinct JPEGs is
encoded with PIL; every sample gets its own bytes by a COM (comment)
segment carrying its key, inserted after SOI, which decoders skip.  The
manifest records every member in shard order (from a tarfile listing of
the written shards) with its size and CRC-32, so every byte a benchmark
reads can be verified.  A data set directory is only used once its
manifest exists, so an interrupted generation is redone on the next run.
"""
import dataclasses
import io
import json
import os
import random
import shutil
import struct
import tarfile
import time
import zlib

GENERATOR_VERSION = 1
MEAN_JPEG_BYTES = 100 * 1024
# Width x height of typical ImageNet photographs.
SHAPES = [(500, 375), (375, 500), (500, 333), (333, 500), (500, 500), (400, 300)]
MTIME = 1_700_000_000


@dataclasses.dataclass(frozen=True)
class Params:
    samples: int
    shard_samples: int
    classes: int
    seed: int = 0
    pool: int = 256

    @property
    def name(self):
        return "n%d-s%d-c%d-seed%d-v%d" % (self.samples, self.shard_samples,
                                           self.classes, self.seed,
                                           GENERATOR_VERSION)


@dataclasses.dataclass
class Member:
    name: str      # relative path, e.g. "n01234567/img00000001.jpg"
    size: int
    crc: int


class Dataset:
    """A generated data set on disk and its manifest."""

    def __init__(self, root):
        self.root = root
        self.shards_dir = os.path.join(root, "shards")
        self.loose_dir = os.path.join(root, "loose")
        with open(os.path.join(root, "manifest.json")) as f:
            manifest = json.load(f)
        self.params = Params(**manifest["params"])
        self.shards = [os.path.join(self.shards_dir, name)
                       for name, _ in manifest["shards"]]
        self.shard_bytes = sum(size for _, size in manifest["shards"])
        self.members = [Member(*m) for m in manifest["members"]]
        self.by_name = {m.name: m for m in self.members}

    @property
    def nbytes(self):
        return sum(m.size for m in self.members)

    @property
    def jpeg_count(self):
        return sum(1 for m in self.members if m.name.endswith(".jpg"))

    @property
    def class_count(self):
        return len({m.name.split("/", 1)[0] for m in self.members})

    def shard_order(self):
        return [m.name for m in self.members]

    def sorted_order(self):
        return sorted(self.shard_order())

    def shuffled_order(self, seed):
        names = self.sorted_order()
        random.Random(seed).shuffle(names)
        return names


# --- the JPEG pool --------------------------------------------------------

def _noise_image(rng, width, height):
    """A photograph-like RGB image: gradients, soft blobs and grain."""
    import numpy as np
    from PIL import Image
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / width, y / height, (x + y) / (width + height)], -1)
    base = base * rng.uniform(80, 255, 3) + rng.uniform(0, 80, 3)
    coarse = rng.normal(128, 60, (height // 16 + 1, width // 16 + 1, 3))
    blobs = Image.fromarray(np.clip(coarse, 0, 255).astype(np.uint8))
    blobs = np.asarray(blobs.resize((width, height), Image.BILINEAR), np.float32)
    grain = rng.normal(0, rng.uniform(10, 30), (height, width, 3))
    pixels = np.clip(base + blobs - 128 + grain, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def _encode_near(image, target):
    """JPEG-encode image at the quality whose size is closest to target."""
    lo, hi, best = 30, 98, None
    while lo <= hi:
        quality = (lo + hi) // 2
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=quality)
        data = buf.getvalue()
        if best is None or abs(len(data) - target) < abs(len(best) - target):
            best = data
        if len(data) < target:
            lo = quality + 1
        else:
            hi = quality - 1
    return best


def make_pool(count, seed):
    """count distinct JPEGs (bytes, width, height) whose sizes follow a
    log-normal distribution with mean MEAN_JPEG_BYTES, like ImageNet's."""
    import numpy as np
    rng = np.random.default_rng(seed)
    sigma = 0.4
    pool = []
    for _ in range(count):
        width, height = SHAPES[rng.integers(len(SHAPES))]
        target = MEAN_JPEG_BYTES * rng.lognormal(-sigma * sigma / 2, sigma)
        data = _encode_near(_noise_image(rng, width, height), target)
        pool.append((data, width, height))
    return pool


def unique_jpeg(base, key):
    """base with a COM segment naming key right after SOI: a distinct
    file that every JPEG decoder still reads as the same picture."""
    assert base[:2] == b"\xff\xd8"
    comment = ("shardfs-bench sample %s" % key).encode()
    return b"\xff\xd8\xff\xfe" + struct.pack(">H", len(comment) + 2) + \
        comment + base[2:]


# --- writing shards and the loose tree -----------------------------------

def class_names(params):
    """WordNet-id-like class directory names (n + 8 digits), sorted."""
    rng = random.Random(params.seed)
    return sorted("n%08d" % v for v in rng.sample(range(10**6, 10**8),
                                                   params.classes))


def sample_files(index, classes, pool):
    """The three (relative name, bytes) files of sample number index."""
    label = index % len(classes)
    key = "img%08d" % (index + 1)
    data, width, height = pool[(index * 7919) % len(pool)]
    stem = "%s/%s" % (classes[label], key)
    meta = {"key": key, "class": classes[label], "label": label,
            "width": width, "height": height}
    return [(stem + ".jpg", unique_jpeg(data, key)),
            (stem + ".json", json.dumps(meta, sort_keys=True).encode() + b"\n"),
            (stem + ".cls", b"%d\n" % label)]


def _add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = MTIME
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _write_loose(loose_dir, name, data):
    path = os.path.join(loose_dir, name)
    try:
        f = open(path, "wb")
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "wb")
    with f:
        f.write(data)


def write_files(params, pool, shards_dir, loose_dir):
    """Write every sample into its shard and into the loose tree; return
    {name: crc32}."""
    classes = class_names(params)
    order = list(range(params.samples))
    random.Random(params.seed).shuffle(order)
    crcs = {}
    for first in range(0, params.samples, params.shard_samples):
        path = os.path.join(shards_dir, "shard-%06d.tar" %
                            (first // params.shard_samples))
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for index in order[first:first + params.shard_samples]:
                for name, data in sample_files(index, classes, pool):
                    _add_member(tar, name, data)
                    _write_loose(loose_dir, name, data)
                    crcs[name] = zlib.crc32(data)
    return crcs


def list_shards(shards_dir):
    """[(shard file name, size)] and [(member name, size)] in shard order,
    as tarfile sees the shards."""
    shards, members = [], []
    for name in sorted(os.listdir(shards_dir)):
        path = os.path.join(shards_dir, name)
        shards.append((name, os.path.getsize(path)))
        with tarfile.open(path, "r:") as tar:
            members.extend((m.name, m.size) for m in tar if m.isfile())
    return shards, members


def estimated_bytes(params):
    """Disk space one data set needs: shards plus loose tree, with margin."""
    return int(params.samples * (MEAN_JPEG_BYTES + 8 * 1024) * 2 * 1.1)


def generate(params, root, log):
    """Generate the data set into root (which must not exist)."""
    tmp = root + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "shards"))
    start = time.time()
    pool = make_pool(params.pool, params.seed)
    log("  JPEG pool: %d images, mean %.0f KB (%.1f s)" % (
        len(pool), sum(len(p[0]) for p in pool) / len(pool) / 1024,
        time.time() - start))
    crcs = write_files(params, pool, os.path.join(tmp, "shards"),
                       os.path.join(tmp, "loose"))
    shards, members = list_shards(os.path.join(tmp, "shards"))
    assert len(members) == len(crcs), "tar listing does not match what was written"
    manifest = {"params": dataclasses.asdict(params), "shards": shards,
                "members": [(n, s, crcs[n]) for n, s in members]}
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    os.rename(tmp, root)
    log("  generated %d files in %d shards in %.0f s" % (
        len(members), len(shards), time.time() - start))


def ensure(params, workdir, log):
    """The cached data set for params under workdir, generated if needed."""
    root = os.path.join(workdir, params.name)
    if os.path.exists(os.path.join(root, "manifest.json")):
        log("data set: cached %s" % root)
        return Dataset(root)
    os.makedirs(workdir, exist_ok=True)
    need, free = estimated_bytes(params), shutil.disk_usage(workdir).free
    if free < need * 1.2:
        raise SystemExit("bench: %s has %.1f GB free, generation needs ~%.1f GB"
                         % (workdir, free / 1e9, need / 1e9))
    log("data set: generating %s (~%.1f GB, %.1f GB free)" % (
        root, need / 1e9, free / 1e9))
    shutil.rmtree(root, ignore_errors=True)
    generate(params, root, log)
    return Dataset(root)
