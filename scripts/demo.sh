#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Set-up command 1: install what building and mounting need (and what the
# demo shows: torchvision, matplotlib), build shardfs, pip-install its
# Python package into a virtualenv, pack a small generated data set of real
# JPEGs into TAR shards, and show the main job end to end: the mount,
# torchvision's ImageFolder over it, one shardfs-pace verdict.  Unmounts at
# the end.  The test toolchain is tests/run.sh's business.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh" demo
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DBUILD_TESTING=OFF >/dev/null
cmake --build "$top/build" -j"$(nproc)" >/dev/null
echo "--- built $top/build/shardfs; pip install $top/python into $top/build/python-venv"
venv="$top/build/python-venv"
"$top/scripts/install-python-package.sh" "$venv" "$top/python"

demo=${SHARDFS_DEMO_DIR:-/tmp/shardfs-demo}
rm -rf "$demo"
mkdir -p "$demo/shards" "$demo/mnt"
"$venv/bin/python" "$top/scripts/make-demo-shards.py" "$demo/shards"

echo "--- shardfs $demo/shards/shard-{000000..000003}.tar $demo/mnt"
"$top/build/shardfs" "$demo/shards/shard-{000000..000003}.tar" "$demo/mnt"
trap 'fusermount3 -u "$demo/mnt"' EXIT
echo "--- df $demo/mnt"
df -h "$demo/mnt"
echo "--- ls $demo/mnt/train; find | head"
ls "$demo/mnt/train"
find "$demo/mnt" | head -n 6
first=$(find "$demo/mnt/train/cat" -name '*.jpg' | sort | head -n 1)
echo "--- $first is byte for byte the member GNU tar extracts"
for s in "$demo"/shards/*.tar; do
	tar -xOf "$s" "${first#"$demo"/mnt/}" 2>/dev/null || true
done | cmp - "$first"
echo "identical"

echo "--- torchvision ImageFolder over the mount, with shardfs.torch.ShardAwareSampler"
"$venv/bin/python" - "$demo/mnt/train" <<'PY'
import sys

import torch
import torchvision
from shardfs.torch import ShardAwareSampler

tf = torchvision.transforms.Compose([torchvision.transforms.Resize((64, 64)),
                                     torchvision.transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(sys.argv[1], transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=2,
                                     sampler=ShardAwareSampler(ds))
print("%d samples, classes %s" % (len(ds), ds.class_to_idx))
for images, labels in loader:
    print("batch", tuple(images.shape), "labels", labels[:10].tolist(), "...")
PY

echo "--- shardfs-pace: can this mount feed a job of 16-sample steps of 200 ms (80 samples/s)?"
rc=0
"$venv/bin/shardfs-pace" "$demo/mnt/train" --global-batch 16 --step-time 0.2 \
	--workers 2 --steps 20 --image-size 64 --plot "$demo/pace.png" || rc=$?
[ "$rc" -le 1 ] || exit "$rc"
echo "--- plot: $demo/pace.png (shardfs-pace exit status $rc: 0 keeps pace, 1 does not)"
