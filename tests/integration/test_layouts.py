# SPDX-License-Identifier: Apache-2.0
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
* classes must show `<label>/<member path>` for every member of
  every labelled sample (numeric labels zero-padded to the widest), with the label taken from the `.cls` (trimmed)
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

import control_files
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
            "k", 0, {"k.cls": b"0\n",
                     "k.json": b'{"label": 0, "name": "n"}'})]])[0]
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


def padded(labels):
    """{label: directory}: numbers without leading zeros, zero-padded to
    the width of the largest, so that string order is numeric order."""
    numbers = [str(int(l)) for l in labels if l.isdigit()]
    width = max((len(n) for n in numbers), default=0)
    return {l: str(int(l)).zfill(width) if l.isdigit() else l for l in labels}


def classes_tree(per_shard, label_fn, unlabeled="_unlabeled"):
    """{path: bytes} that layout=classes must show: every member of every
    sample as `<label>/<path>`, unlabelled ones under UNLABELED or
    left out when it is "skip"; later shards win.  Also returns the number
    of unlabelled samples."""
    samples = [s for shard in per_shard for s in shard]
    dirs = padded({label_fn(s) for s in samples} - {None})
    tree, without_label = {}, 0
    for sample in samples:
        label = label_fn(sample)
        if label is None:
            without_label += 1
            if unlabeled == "skip":
                continue
        for name, content in sample.files.items():
            tree["%s/%s" % (dirs.get(label, unlabeled), name)] = content
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
    assert without_label > 0 and "3/part/v1.0/000003.seg.png" in expected
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


# --------------------------------------------------------------------------
# numeric labels, colliding base names, missing labels (issue 13)


def cls_sample(key, cls_text, extra=None):
    files = {key + ".jpg": b"jpeg of " + key.encode(), key + ".cls": cls_text}
    files.update(extra or {})
    return imagedata.Sample(key, None, files)


def mount_classes(tmp_path, samples_per_shard, *options):
    shards = imagedata.write_shards(tmp_path, samples_per_shard)
    argv = [a for o in ("layout=classes",) + options for a in ("-o", o)]
    os.makedirs(tmp_path / "mnt", exist_ok=True)
    return shards, argv


def test_numeric_labels_give_imagefolder_their_own_index(tmp_path):
    """1,000 classes: ImageFolder's class_to_idx[dir] must be int(label)
    for every class, and every sample's target its label ("007" is 7)."""
    samples = [cls_sample("%04d" % n, b"%d\n" % n) for n in range(1000)]
    samples.append(cls_sample("again7", b"007\n"))
    shards, argv = mount_classes(tmp_path, imagedata.split(samples, 3))
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards), mnt, *argv):
        folder = datasets.ImageFolder(mnt, loader=lambda p: p)
        assert len(folder.classes) == 1000
        assert folder.classes[:3] == ["000", "001", "002"]
        assert all(folder.class_to_idx[d] == int(d) for d in folder.classes)
        targets = {os.path.basename(p): t for p, t in folder.samples}
        assert all(targets["%04d.jpg" % n] == n for n in range(1000))
        assert targets["again7.jpg"] == 7
        assert sorted(os.listdir(mnt / "007")) == ["0007.cls", "0007.jpg",
                                                  "again7.cls", "again7.jpg"]


def test_numeric_labels_are_padded_across_shards_and_index_reuse(tmp_path):
    """The width is the widest label of the whole set, also when an index
    file of the first shards is extended by a later shard."""
    shard_dir = tmp_path / "w"
    first = [[cls_sample("a%d" % n, b"%d" % n) for n in range(3)]]
    shards = imagedata.write_shards(shard_dir, first)
    index = tmp_path / "set.idx"
    mnt = tmp_path / "mnt"
    opts = ("-o", "layout=classes", "-o", "index=%s" % index)
    with lib.mounted(shards[0], mnt, *opts):
        assert sorted(os.listdir(mnt)) == ["0", "1", "2"]
    more = imagedata.write_shards(tmp_path / "w2", [[cls_sample("b12", b"12")]])
    with lib.mounted(",".join(shards + more), mnt, *opts) as proc:
        assert sorted(os.listdir(mnt)) == ["00", "01", "02", "12"], proc.stderr


def test_colliding_base_names_stay_two_samples(tmp_path):
    """part1/0001 and part2/0001 are two samples of one class: both stay,
    under their own directories; the same key twice is one (the last)."""
    samples = [cls_sample("part1/0001", b"5"), cls_sample("part2/0001", b"5")]
    again = cls_sample("part1/0001", b"5", {"part1/0001.jpg": b"the last one"})
    shards, argv = mount_classes(tmp_path, [samples, [again]])
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards), mnt, *argv) as proc:
        assert sorted(mounted_files(mnt)) == [
            "5/part1/0001.cls", "5/part1/0001.jpg",
            "5/part2/0001.cls", "5/part2/0001.jpg"]
        assert (mnt / "5/part1/0001.jpg").read_bytes() == b"the last one"
        folder = datasets.ImageFolder(mnt, loader=lambda p: p)
        assert len(folder.samples) == 2
    assert lib.parse_summary(proc.stderr)["duplicates"] == 2


def test_a_label_source_no_sample_has_refuses_to_mount(tmp_path):
    samples = [cls_sample("k%d" % n, b"1", {"k%d.json" % n: b'{"label": 1}'})
               for n in range(3)]
    shards, argv = mount_classes(tmp_path, [samples], "label=json:nosuch")
    proc, mounted, _ = lib.run_shardfs_expect_failure(shards[0], tmp_path / "mnt",
                                                      *argv)
    assert proc.returncode == 1 and not mounted
    assert ("shardfs: layout=classes: no sample has a label from "
            "label=json:nosuch (sample 'k0' of %s has none); not mounting a "
            "tree of one class\n" % shards[0]) in proc.stderr


def test_samples_without_a_label_are_counted_and_placed(tmp_path):
    samples = [cls_sample("k1", b"1"), imagedata.Sample("k2", None, {"k2.jpg": b"x"})]
    shards, argv = mount_classes(tmp_path, [samples])
    mnt = tmp_path / "mnt"
    with lib.mounted(shards[0], mnt, *argv) as proc:
        assert sorted(os.listdir(mnt)) == ["1", "_unlabeled"]
    assert ("shardfs: warning: 1 samples without a label from label=cls: under "
            "_unlabeled/\n") in proc.stderr


def test_nested_json_label_field(tmp_path):
    samples = [imagedata.Sample("k%d" % n, None, {
        "k%d.jpg" % n: b"x", "k%d.json" % n: json.dumps(
            {"label": "outer", "meta": {"other": [1, {"label": 9}], "label": n}}).encode()})
        for n in (3, 10)]
    shards, argv = mount_classes(tmp_path, [samples], "label=json:meta.label")
    mnt = tmp_path / "mnt"
    with lib.mounted(shards[0], mnt, *argv):
        assert sorted(mounted_files(mnt)) == ["03/k3.jpg", "03/k3.json",
                                              "10/k10.jpg", "10/k10.json"]


@pytest.mark.parametrize("label", ["json:", "json:.a", "json:a..b", "json:a."])
def test_malformed_json_label_sources_are_refused(tmp_path, label):
    shards, argv = mount_classes(tmp_path, [[cls_sample("k", b"1")]], "label=" + label)
    proc, mounted, _ = lib.run_shardfs_expect_failure(shards[0], tmp_path / "mnt",
                                                      *argv)
    assert proc.returncode == 2 and not mounted
    assert ("shardfs: bad label source '%s' (cls, json:FIELD or "
            "json:FIELD.FIELD...)\n" % label) in proc.stderr


def test_labels_missing_from_classnames_are_reported(tmp_path):
    samples = [cls_sample("k%d" % n, b"%d" % n) for n in range(4)]
    names = tmp_path / "names.txt"
    names.write_text("0 zero\n1 one\n")
    shards, argv = mount_classes(tmp_path, [samples], "classnames=%s" % names)
    mnt = tmp_path / "mnt"
    with lib.mounted(shards[0], mnt, *argv) as proc:
        assert sorted(os.listdir(mnt)) == ["2", "3", "one", "zero"]
    assert ("shardfs: warning: 2 samples have a label that the classnames= "
            "file does not name; their directories are named by the label "
            "itself\nshardfs: warning: %s: label '2' is not in the classnames= file\n" % shards[0]
            ) in proc.stderr
