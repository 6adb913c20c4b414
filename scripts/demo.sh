#!/bin/sh
# Set-up command 1: install dependencies, build shardfs, pack a small
# generated demo data set into TAR shards, mount it, list it, unmount.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$top/build" -j"$(nproc)"

demo=${SHARDFS_DEMO_DIR:-/tmp/shardfs-demo}
rm -rf "$demo"
mkdir -p "$demo/shards" "$demo/mnt"
/usr/bin/python3 "$top/scripts/make-demo-shards.py" "$demo/shards"

"$top/build/shardfs" "$demo/shards/shard-{000000..000003}.tar" "$demo/mnt"
trap 'fusermount3 -u "$demo/mnt"' EXIT
echo "--- ls $demo/mnt/train"
ls "$demo/mnt/train"
echo "--- find $demo/mnt | head"
find "$demo/mnt" | head -n 8
echo "--- files: $(find "$demo/mnt" -type f | wc -l)"
first=$(find "$demo/mnt/train/cat" -name '*.jpg' | sort | head -n 1)
echo "--- stat $first"
stat "$first"
echo "--- cmp with the member extracted by GNU tar"
tar -xOf "$demo/shards/shard-000000.tar" "${first#$demo/mnt/}" 2>/dev/null | cmp - "$first" \
	|| for s in "$demo"/shards/*.tar; do tar -xOf "$s" "${first#$demo/mnt/}" 2>/dev/null; done | cmp - "$first"
echo "identical"
