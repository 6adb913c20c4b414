# SPDX-License-Identifier: Apache-2.0
"""Write a small WebDataset-style demo shard set: 4 shards of 50 samples,
each sample train/<class>/<key>.jpg + .json + .cls, classes mixed across
shards.  The .jpg members are real JPEGs (smooth random pictures of
64 to 160 pixels, encoded by PIL), so that torchvision's ImageFolder and
shardfs-pace can decode them."""
import io
import json
import os
import random
import sys
import tarfile

from PIL import Image

CLASSES = ["cat", "dog", "fish"]


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def picture(rng):
    """A JPEG of a smooth random picture, its sides 64 to 160 pixels."""
    coarse = Image.frombytes("RGB", (4, 4), rng.randbytes(48))
    size = (rng.randrange(64, 161), rng.randrange(64, 161))
    buf = io.BytesIO()
    coarse.resize(size, Image.BILINEAR).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def main(out_dir, shards=4, per_shard=50):
    rng = random.Random(0)
    key = 0
    for s in range(shards):
        path = os.path.join(out_dir, "shard-%06d.tar" % s)
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for _ in range(per_shard):
                key += 1
                label = rng.randrange(len(CLASSES))
                base = "train/%s/%06d" % (CLASSES[label], key)
                add(tar, base + ".jpg", picture(rng))
                add(tar, base + ".json", json.dumps({"key": key}).encode())
                add(tar, base + ".cls", b"%d\n" % label)


if __name__ == "__main__":
    main(sys.argv[1])
