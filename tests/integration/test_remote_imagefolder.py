# SPDX-License-Identifier: Apache-2.0
"""torchvision's ImageFolder over an s3:// mount (s3rver behind the
botocore signature check) and over an https:// mount (nginx with TLS,
-o cacert=) sees exactly what it sees over `tar -x` of the same shards.

The checks are test_imagefolder.py's own, run here against the remote
mounts (the `roots` fixture below): classes, class_to_idx, samples in
order, decoded tensors, and a shuffled DataLoader epoch with four workers
whose every file hashes to the extracted file's.
"""
import os

import pytest

import imagedata
import remote_servers as rs
import shardfs_testlib as lib
# collected here, these run with this module's `roots` fixture
from test_imagefolder import (SAMPLES, SHARDS, test_dataloader_epoch_with_workers,  # noqa: F401
                              test_same_classes_and_samples, test_same_decoded_tensors)

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
