"""torchvision's ImageFolder over an s3:// mount (s3rver behind the
botocore signature check) and over an https:// mount (nginx with TLS,
-o cacert=) sees exactly what it sees over `tar -x` of the same shards:
classes, class_to_idx, samples in order, decoded tensors; and a shuffled
DataLoader epoch with worker processes reads every file, its bytes equal
to the extracted file's.
"""
import collections
import hashlib
import io
import os

import pytest
import torch
from PIL import Image
from torchvision import datasets, transforms

import imagedata
import remote_servers as rs
import shardfs_testlib as lib

SAMPLES = 240
SHARDS = 4

pytestmark = pytest.mark.filterwarnings(
    "ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    work = tmp_path_factory.mktemp("imgs")
    shards, _ = imagedata.imagefolder_shards(work, SAMPLES, SHARDS)
    ref = work / "ref"
    lib.extract_reference_ok(shards, ref)
    return work, shards, ref


def env_for(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=rs.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=rs.SECRET_KEY,
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    return env


@pytest.fixture(params=["s3", "https"])
def roots(request, data, tmp_path):
    """(mount/train, reference/train) with the mount alive for the test."""
    work, shards, ref = data
    mnt = tmp_path / "mnt"
    spec = "shard-{000000..%06d}.tar" % (SHARDS - 1)
    if request.param == "s3":
        with rs.s3_server(str(tmp_path), ["imgs"]) as (stats, url, upload):
            for s in shards:
                upload("imgs", "set/" + os.path.basename(s), s)
            with lib.mounted("s3://imgs/set/" + spec, mnt, "-o",
                             "endpoint=%s,region=%s,chunk_size=256K,cache_mem=2M"
                             % (url, rs.REGION), env=env_for(tmp_path)):
                yield mnt / "train", ref / "train"
            assert stats.rejected == 0
    else:
        cert, key = rs.self_signed_cert(str(tmp_path))
        with rs.nginx(os.path.dirname(shards[0]), str(tmp_path / "ng"),
                      cert=(cert, key)) as url:
            with lib.mounted(url + "/" + spec, mnt, "-o",
                             "cacert=%s,chunk_size=256K,cache_mem=2M" % cert,
                             env=env_for(tmp_path)):
                yield mnt / "train", ref / "train"


def relative_samples(dataset):
    return [(os.path.relpath(path, dataset.root), target)
            for path, target in dataset.samples]


def checksum_loader(path):
    with open(path, "rb") as f:
        data = f.read()
    Image.open(io.BytesIO(data)).convert("RGB")
    return hashlib.sha256(data).hexdigest()


def test_imagefolder_equals_tar_x(roots):
    mnt, ref = roots
    on_mount, on_disk = datasets.ImageFolder(mnt), datasets.ImageFolder(ref)
    assert on_mount.classes == on_disk.classes
    assert on_mount.class_to_idx == on_disk.class_to_idx
    assert relative_samples(on_mount) == relative_samples(on_disk)
    assert len(on_disk.samples) == SAMPLES
    to_tensor = transforms.ToTensor()
    tm = datasets.ImageFolder(mnt, transform=to_tensor)
    td = datasets.ImageFolder(ref, transform=to_tensor)
    for i in range(0, len(td), 5):
        assert tm[i][1] == td[i][1]
        assert torch.equal(tm[i][0], td[i][0]), td.samples[i][0]
    # every byte: a shuffled epoch with workers, checked against tar -x
    loader = torch.utils.data.DataLoader(
        datasets.ImageFolder(mnt, loader=checksum_loader), batch_size=16,
        shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(0))
    seen = collections.Counter()
    for digests, labels in loader:
        seen.update(zip(labels.tolist(), digests))
    expected = collections.Counter(
        (label, digest) for digest, label in datasets.ImageFolder(ref, loader=checksum_loader))
    assert seen == expected
