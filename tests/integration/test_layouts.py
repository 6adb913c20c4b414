"""The `-o layout=tree|shards|classes` views of flat WebDataset shards.

The data: four shards of flat WebDataset samples (`<key>.jpg`,
`<key>.json`, `<key>.cls`, see imagedata.webdataset_samples), some without
a `.cls`, some with a `.json` lacking the label fields, some with a padded
`.cls`, one in a dotted directory with a two-dot extension, one sample
present in two shards, and one shard whose name has a dot before `.tar`.

* tree (the default) must equal GNU tar's extraction of every shard in
  order;
* shards must equal extracting each shard into its own directory named
  after the shard file without `.tar`;
* classes must show `<label>/<basename of member>` for every member of
  every labelled sample, with the label taken from the `.cls` (trimmed)
  or from a `.json` field (`label=json:FIELD`), optionally renamed by a
  `classnames=FILE` of `index name` lines, and unlabelled samples under
  `unlabeled=DIR` (default `_unlabeled`) or left out and counted
  (`unlabeled=skip`).  The expected tree is computed here, in Python, from
  the samples, and ImageFolder over the mount must match ImageFolder over
  that tree written to disk.

Every layout's `/.shardfs/members` must describe the files it shows, and
ShardAwareSampler must work on ImageFolder over layout=classes.
Options the shardfs binary does not know yet make the tests skip.
"""
import json
import os
import re

import pytest
import torch
from torchvision import datasets, transforms

import control_files      # also puts the in-tree python/ package on sys.path
import imagedata
import shardfs_testlib as lib
from shardfs.torch import ShardAwareSampler

SAMPLES = 60
CLASSES = 5
SHARD_NAMES = ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar",
               "extra.v2.tar"]
# `index name` lines; names with spaces and commas, as ImageNet's are
CLASS_NAMES = {"0": "tench, Tinca tinca", "1": "goldfish", "2": "great white shark",
               "3": "caf\u00e9", "4": "10 items"}
DUPLICATE = 8          # this sample is packed into the first and last shard

_option_support = {}


def require(tmp_path_factory, *options):
    """Skip unless this shardfs accepts OPTIONS (probed once per set, by
    mounting a one-file shard)."""
    key = tuple(options)
    if key not in _option_support:
        work = tmp_path_factory.mktemp("probe")
        shard = imagedata.write_shards(work, [[imagedata.Sample(
            "k", 0, {"k.cls": b"0\n"})]])[0]
        argv = [a for o in options for a in ("-o", o)]
        mnt = work / "mnt"
        mnt.mkdir()
        result = lib.run_shardfs(shard, mnt, *argv, check=False)
        lib.unmount(mnt)
        _option_support[key] = (result.returncode == 0, result.stderr.strip())
    supported, stderr = _option_support[key]
    if not supported:
        pytest.skip("shardfs does not support -o %s yet: %s"
                    % (",".join(options), stderr))


# --------------------------------------------------------------------------
# data and expected trees


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(samples per shard, shard paths, classnames file)."""
    work = tmp_path_factory.mktemp("webdataset")
    samples = imagedata.webdataset_samples(SAMPLES, CLASSES)
    per_shard = imagedata.split(samples, len(SHARD_NAMES))
    per_shard[-1].append(samples[DUPLICATE])
    shards = imagedata.write_shards(work, per_shard, names=SHARD_NAMES)
    classnames = work / "classnames.txt"
    classnames.write_text("".join("%s %s\n" % kv for kv in CLASS_NAMES.items()),
                          encoding="utf-8")
    return per_shard, shards, classnames


def label_from_cls(sample):
    data = sample.files.get(sample.key + ".cls")
    return None if data is None else data.decode().strip()


def label_from_json(field):
    def label(sample):
        value = json.loads(sample.files[sample.key + ".json"]).get(field)
        return None if value is None else str(value)
    return label


def renamed(label_fn, names):
    def label(sample):
        value = label_fn(sample)
        return names.get(value, value) if value is not None else None
    return label


def classes_tree(per_shard, label_fn, unlabeled="_unlabeled"):
    """{path: bytes} that layout=classes must show: every member of every
    sample as `<label>/<basename>`, unlabelled ones under UNLABELED or
    left out when it is "skip"; later shards win.  Also returns the number
    of unlabelled samples."""
    tree, without_label = {}, 0
    for sample in (s for shard in per_shard for s in shard):
        label = label_fn(sample)
        if label is None:
            without_label += 1
            if unlabeled == "skip":
                continue
            label = unlabeled
        for name, content in sample.files.items():
            tree["%s/%s" % (label, os.path.basename(name))] = content
    return tree, without_label


def mounted_files(root):
    """{path (str): bytes} of the regular files under ROOT."""
    def read(path):
        with open(os.path.join(os.fsencode(root), path), "rb") as f:
            return f.read()
    return {os.fsdecode(p): read(p) for p in control_files.regular_files(root)}


def mount_and_compare(data, tmp_path, options, expected, without_label=None):
    """Mount with OPTIONS; the regular files must be EXPECTED, the control
    files must describe them and, when WITHOUT_LABEL is given, shardfs must
    report that many samples without a label."""
    _, shards, _ = data
    argv = [a for o in options for a in ("-o", o)]
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards), mnt, *argv) as proc:
        files = mounted_files(mnt)
        assert sorted(files) == sorted(expected)
        assert files == expected
        assert sorted(os.listdir(mnt)) == sorted({p.split("/")[0] for p in expected})
        if control_files.available(mnt):
            control_files.check(mnt, shards)
    if without_label is not None:
        counts = [int(n) for n in re.findall(r"(\d+) samples? without a label",
                                             proc.stderr)]
        # the line is printed only when some sample had no label
        assert counts == ([without_label] if without_label else []), proc.stderr
    return proc


# --------------------------------------------------------------------------
# tree and shards


@pytest.mark.parametrize("options", [[], ["-o", "layout=tree"]],
                         ids=["default", "explicit"])
def test_tree_layout_is_what_tar_extracts(data, tmp_path, tmp_path_factory, options):
    if options:
        require(tmp_path_factory, "layout=tree")
    _, shards, _ = data
    lib.check_mount_against_tar(shards, tmp_path / "mnt", tmp_path / "ref",
                                *options)


def test_shards_layout_is_each_shard_extracted_apart(data, tmp_path, tmp_path_factory):
    require(tmp_path_factory, "layout=shards")
    _, shards, _ = data
    ref = tmp_path / "ref"
    start_ns = None
    for shard in shards:
        stem = os.path.basename(shard)[:-len(".tar")]
        shard_start = lib.extract_reference_ok([shard], ref / stem)
        start_ns = start_ns or shard_start
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards), mnt, "-o", "layout=shards"):
        assert sorted(os.listdir(mnt)) == ["extra.v2", "shard-000000",
                                           "shard-000001", "shard-000002"]
        lib.compare_trees(mnt, ref, start_ns)
        if control_files.available(mnt):
            control_files.check(mnt, shards)


# --------------------------------------------------------------------------
# classes


def test_classes_layout_labels_from_cls(data, tmp_path, tmp_path_factory):
    require(tmp_path_factory, "layout=classes")
    expected, without_label = classes_tree(data[0], label_from_cls)
    assert without_label > 0 and "3/000003.seg.png" in expected
    mount_and_compare(data, tmp_path, ["layout=classes"], expected, without_label)


@pytest.mark.parametrize("unlabeled", ["no label", "skip"])
def test_classes_layout_unlabeled_option(data, tmp_path, tmp_path_factory, unlabeled):
    options = ["layout=classes", "unlabeled=" + unlabeled]
    require(tmp_path_factory, *options)
    expected, without_label = classes_tree(data[0], label_from_cls, unlabeled)
    mount_and_compare(data, tmp_path, options, expected, without_label)


@pytest.mark.parametrize("field", ["label", "name"])
def test_classes_layout_labels_from_a_json_field(data, tmp_path, tmp_path_factory, field):
    options = ["layout=classes", "label=json:" + field]
    require(tmp_path_factory, *options)
    expected, without_label = classes_tree(data[0], label_from_json(field))
    mount_and_compare(data, tmp_path, options, expected, without_label)


@pytest.mark.parametrize("source", ["cls", "json:label"])
def test_classes_layout_with_classnames(data, tmp_path, tmp_path_factory, source):
    per_shard, _, classnames = data
    options = ["layout=classes", "label=" + source, "classnames=%s" % classnames]
    require(tmp_path_factory, *options)
    label_fn = label_from_cls if source == "cls" else label_from_json("label")
    expected, without_label = classes_tree(per_shard, renamed(label_fn, CLASS_NAMES))
    mount_and_compare(data, tmp_path, options, expected, without_label)


def test_json_labels_with_unicode_escapes(tmp_path, tmp_path_factory):
    options = ["layout=classes", "label=json:name"]
    require(tmp_path_factory, *options)
    sample = imagedata.webdataset_sample("k", 0, 0, {"name": "caf\u00e9"})
    assert b"\\u00e9" in sample.files["k.json"]
    shards = imagedata.write_shards(tmp_path, [[sample]])
    expected, _ = classes_tree([[sample]], label_from_json("name"))
    mount_and_compare((None, shards, None), tmp_path, options, expected, 0)


def test_imagefolder_over_the_classes_layout(data, tmp_path, tmp_path_factory):
    per_shard, shards, classnames = data
    options = ["layout=classes", "classnames=%s" % classnames, "unlabeled=skip"]
    require(tmp_path_factory, *options)
    expected, _ = classes_tree(per_shard, renamed(label_from_cls, CLASS_NAMES),
                               "skip")
    on_disk_root = tmp_path / "equivalent"
    imagedata.write_tree(on_disk_root, expected)
    to_tensor = transforms.ToTensor()
    on_disk = datasets.ImageFolder(on_disk_root, transform=to_tensor)
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards), mnt, *[a for o in options for a in ("-o", o)]):
        on_mount = datasets.ImageFolder(mnt, transform=to_tensor)
        assert on_mount.classes == on_disk.classes == sorted(CLASS_NAMES.values())
        assert on_mount.class_to_idx == on_disk.class_to_idx
        relative = [[(os.path.relpath(p, d.root), t) for p, t in d.samples]
                    for d in (on_mount, on_disk)]
        assert relative[0] == relative[1]
        for i in range(0, len(on_disk), 5):
            (image_m, label_m), (image_d, label_d) = on_mount[i], on_disk[i]
            assert label_m == label_d and torch.equal(image_m, image_d)
        if control_files.available(mnt):
            order = list(ShardAwareSampler(on_mount, window=2))
            assert sorted(order) == list(range(len(on_mount)))
