"""Write a small WebDataset-style demo shard set: 4 shards of 50 samples,
each sample train/<class>/<key>.jpg + .json + .cls, classes mixed across
shards.  Uses only the standard library (the .jpg bodies are random bytes,
not images: the demo shows the filesystem, not a decoder)."""
import io
import json
import os
import random
import sys
import tarfile

CLASSES = ["cat", "dog", "fish"]


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


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
                add(tar, base + ".jpg", rng.randbytes(rng.randrange(1000, 20000)))
                add(tar, base + ".json", json.dumps({"key": key}).encode())
                add(tar, base + ".cls", b"%d\n" % label)


if __name__ == "__main__":
    main(sys.argv[1])
