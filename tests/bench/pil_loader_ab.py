#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""torchvision's default image loader against shardfs.torch.pil_loader,
side by side, on a shardfs mount and on the same files loose (ext4).

A row: a fresh mount of SET/shards (default options), caches dropped,
then in a fresh /usr/bin/python3 ImageFolder over the mount with one
loader, PIL decode and Resize((64, 64)), DataLoader(batch_size=32,
num_workers=2) with rank 0 of DistributedSampler(num_replicas=N,
shuffle=True, seed=0); then the same on SET/loose.  Each round runs
both loaders for N = 1 and 2, in alternated order.  Prints a JSON line
a row (samples/s of the epoch, the listing apart).

SET is a data set of tests/bench/training.sh (its shards/ and loose/,
e.g. /var/tmp/shardfs-bench/n5000-s500-c100-seed0-v1).  Needs root.

    /usr/bin/python3 tests/bench/pil_loader_ab.py BUILD_DIR SET [ROUNDS]
"""
import json
import os
import subprocess
import sys
import tempfile

import system

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = r'''
import sys, time, torchvision
from torchvision import transforms
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.datasets.folder import default_loader
sys.path.insert(0, sys.argv[4])
from shardfs.torch import pil_loader
root, which, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = torchvision.datasets.ImageFolder(
    root, loader=pil_loader if which == "pil_loader" else default_loader,
    transform=transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()]))
sampler = DistributedSampler(ds, num_replicas=n, rank=0, shuffle=True, seed=0)
start, k = time.monotonic(), 0
for _, y in DataLoader(ds, batch_size=32, num_workers=2, sampler=sampler):
    k += len(y)
print(k, time.monotonic() - start)
'''


def epoch(root, which, n):
    """(samples, seconds) of one epoch's share over ROOT."""
    system.drop_caches()
    out = subprocess.run(["/usr/bin/python3", "-c", CHILD, root, which, str(n),
                          os.path.join(HERE, "..", "..", "python")],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), float(out[1])


def main():
    build, data = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    shardfs = os.path.join(build, "shardfs")
    with tempfile.TemporaryDirectory(prefix="pil-loader-") as mnt:
        for r in range(rounds):
            for n in (1, 2):
                loaders = ("default", "pil_loader") if r % 2 == 0 else ("pil_loader", "default")
                for which in loaders:
                    subprocess.run([shardfs, os.path.join(data, "shards"), mnt, "-o", "quiet"],
                                   check=True)
                    try:
                        k, s = epoch(mnt, which, n)
                    finally:
                        subprocess.run(["umount", mnt], check=True)
                    kl, sl = epoch(os.path.join(data, "loose"), which, n)
                    print(json.dumps({"round": r, "N": n, "loader": which, "samples": k,
                                      "shardfs_per_s": round(k / s), "loose_per_s": round(kl / sl),
                                      "load": system.load_average()}), flush=True)


if __name__ == "__main__":
    main()
