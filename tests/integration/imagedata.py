# SPDX-License-Identifier: Apache-2.0
"""Small image data sets for the PyTorch-facing integration tests
(test_imagefolder, test_sampler, test_layouts) and the sampler benchmark.

Two shapes of data, both made of real JPEGs (64x64, a few KB, encoded by
PIL, reproducible from a seed):

* ImageFolder shards: members `train/<class>/<key>.jpg` (plus a `.cls`
  sidecar, which ImageFolder ignores), samples spread over the shards in
  random order, so every class directory is assembled from several shards;
* flat WebDataset shards: members `<key>.jpg`, `<key>.json`, `<key>.cls`
  next to each other, as WebDataset writers produce them.

Every data set is first written as a plain tree (the staging directory)
and then packed by one of WRITERS, so the same files can be packed by
Python's tarfile and by GNU tar.  Nothing here says what shardfs must
show: the tests compare with GNU tar's extraction or with a tree they
build themselves.
"""
import dataclasses
import io
import json
import os
import random
import tarfile

import shardfs_testlib as lib

WRITERS = ("tarfile-pax", "tarfile-gnu", "gnu-tar")

# ImageFolder class names that sort differently as bytes, case-folded or
# numerically, a non-ASCII one and one with a space.
IMAGEFOLDER_CLASSES = ("Zebra", "ant", "bee 2", "cat", "n01440764",
                       "\u00e9l\u00e9phant", "10_ten", "9_nine")


# --------------------------------------------------------------------------
# images


def image_bytes(seed, size=64, fmt="JPEG"):
    """A real JPEG (or another PIL format) of SIZE x SIZE pixels: a smooth
    random picture, reproducible from SEED (any value with a stable
    repr)."""
    from PIL import Image
    rng = random.Random(repr(seed))
    coarse = Image.frombytes("RGB", (4, 4), bytes(rng.randrange(256)
                                                  for _ in range(48)))
    image = coarse.resize((size, size), Image.BILINEAR)
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


# --------------------------------------------------------------------------
# samples


@dataclasses.dataclass
class Sample:
    """One training sample: its WebDataset key, label and its files
    (member name -> bytes), in the order they are written."""
    key: str
    label: int
    files: dict


def imagefolder_samples(count, classes=IMAGEFOLDER_CLASSES, seed=0):
    """COUNT samples `train/<class>/<key>.jpg` (+ `.cls`) in random order.
    A few use the upper-case `.JPEG` extension or sit in a class's
    sub-directory, which ImageFolder must find as well."""
    rng = random.Random(seed)
    samples = []
    for n in range(count):
        label = n % len(classes)
        key = "%08x" % rng.getrandbits(32)
        ext = ".JPEG" if n % 17 == 0 else ".jpg"
        sub = "extra/" if n % 23 == 0 else ""
        stem = "train/%s/%s%s" % (classes[label], sub, key)
        samples.append(Sample(stem, label, {
            stem + ext: image_bytes((seed, n)),
            stem + ".cls": b"%d\n" % label}))
    rng.shuffle(samples)
    return samples


def webdataset_sample(key, label, seed, json_fields=None, cls=True,
                      cls_text=None):
    """A flat WebDataset sample: `<key>.jpg`, `<key>.json` (the fields in
    JSON_FIELDS, or {"key": key}) and, when CLS, `<key>.cls` holding
    CLS_TEXT (default: the label and a newline)."""
    files = {key + ".jpg": image_bytes((seed, key))}
    fields = {"key": key} if json_fields is None else dict(json_fields)
    files[key + ".json"] = json.dumps(fields, sort_keys=True).encode() + b"\n"
    if cls:
        text = cls_text if cls_text is not None else b"%d\n" % label
        files[key + ".cls"] = text
    return Sample(key, label, files)


def webdataset_samples(count, classes=5, seed=0):
    """COUNT flat WebDataset samples with labels 0..CLASSES-1: `<key>.jpg`,
    `<key>.json` ({"key", "label", "name": "class<label>"}) and `<key>.cls`.
    Irregular ones, for the label rules: every 7th has no `.cls`, every
    11th a `.json` without "label" and "name", every 5th a `.cls` padded
    with blanks; sample 3 lives in `part/v1.0/` (a dot in a directory
    name) and has a second image `<key>.seg.png` (a dot in the
    extension)."""
    samples = []
    for n in range(count):
        label = n % classes
        key = ("part/v1.0/%06d" if n == 3 else "%06d") % n
        fields = {"key": key}
        if n % 11 != 10:
            fields.update(label=label, name="class%d" % label)
        sample = webdataset_sample(
            key, label, seed, fields, cls=n % 7 != 6,
            cls_text=b"  %d \n" % label if n % 5 == 4 else None)
        if n == 3:
            sample.files[key + ".seg.png"] = image_bytes((seed, key), fmt="PNG")
        samples.append(sample)
    return samples


def split(items, parts):
    """ITEMS cut into PARTS consecutive chunks of (nearly) equal size."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(items[start:end])
        start = end
    return out


# --------------------------------------------------------------------------
# trees and shards


def write_tree(root, files):
    """Write {relative name: bytes} under ROOT (fixed mtimes)."""
    for name, data in files.items():
        lib.write_file(os.path.join(os.fsencode(root), os.fsencode(name)), data)
    lib.finish_dirs(root)


def _pack(writer, out, stage, names):
    if writer == "gnu-tar":
        # explicit member list: GNU tar keeps the command-line order
        return lib.gnu_tar_create(out, stage, names, "gnu")
    fmt = {"tarfile-pax": tarfile.PAX_FORMAT,
           "tarfile-gnu": tarfile.GNU_FORMAT}[writer]
    return lib.py_tar_create(out, stage, names, fmt)


def write_shards(workdir, shard_samples, writer="tarfile-pax", names=None):
    """Pack SHARD_SAMPLES (a list of lists of Sample, one list per shard)
    with WRITER into WORKDIR/shards/NAMES[i] (default shard-NNNNNN.tar).
    Member order inside a shard is sample order, each sample's files in
    their own order.  Returns the list of shard paths."""
    if names is None:
        names = ["shard-%06d.tar" % i for i in range(len(shard_samples))]
    stage = os.path.join(workdir, "stage")
    shard_dir = os.path.join(workdir, "shards")
    os.makedirs(shard_dir, exist_ok=True)
    paths = []
    for i, samples in enumerate(shard_samples):
        files = {n: d for s in samples for n, d in s.files.items()}
        write_tree(stage, files)
        out = os.path.join(shard_dir, names[i])
        paths.append(_pack(writer, out, stage, list(files)))
    return paths


def imagefolder_shards(workdir, count=300, shards=5, writer="tarfile-pax",
                       seed=0):
    """Write an ImageFolder data set as shards (see imagefolder_samples);
    returns (shard paths, samples)."""
    samples = imagefolder_samples(count, seed=seed)
    return write_shards(workdir, split(samples, shards), writer), samples
