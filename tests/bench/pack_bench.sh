#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# pack_bench.sh - shardfs-pack throughput against `tar -cf` of the same tree.
#
# Usage: tests/bench/pack_bench.sh [BUILD_DIR] [WORK_DIR]
#
# Makes two trees in WORK_DIR (default: a new directory under /var/tmp):
#   small  40 000 files of 1-31 KiB in 400 class directories (~640 MB),
#          the shape of an image dataset
#   large  4 files of 256 MiB (1 GiB)
# and times, on each, with the page cache warm and (when run as root, by
# writing /proc/sys/vm/drop_caches) cold:
#   tar -cf              GNU tar, one archive, not synced
#   tar -cf + sync       the same, until the data is on disk
#   shardfs-pack         default options (1 GiB shards, fsync per shard)
#   shardfs-pack -j1     one thread
# Output is written to the same filesystem as the input.  Each figure is
# the median of REPEAT runs (default 3); MB/s is the size of the output
# (tar or all shards) divided by that time, 1 MB = 10^6 bytes.  WORK_DIR
# is removed at the end unless KEEP=1.
set -eu

build=${1:-build}
work=${2:-$(mktemp -d /var/tmp/pack_bench.XXXXXX)}
pack=$build/shardfs-pack
[ -x "$pack" ] || { echo "no $pack: build shardfs-pack first" >&2; exit 1; }
repeat=${REPEAT:-3}
mkdir -p "$work"

make_trees() {
	/usr/bin/python3 - "$work" <<'EOF'
import os, sys
work = sys.argv[1]
rnd = os.urandom(32 << 10)
if not os.path.isdir(os.path.join(work, "small")):
    for c in range(400):
        d = os.path.join(work, "small", "class%03d" % c)
        os.makedirs(d)
        for i in range(100):
            n = 1024 + (c * 100 + i) * 7919 % (30 << 10)
            with open(os.path.join(d, "%06d.jpg" % i), "wb") as f:
                f.write(rnd[:n])
if not os.path.isdir(os.path.join(work, "large")):
    os.makedirs(os.path.join(work, "large"))
    block = os.urandom(1 << 20)
    for i in range(4):
        with open(os.path.join(work, "large", "part%d.bin" % i), "wb") as f:
            for _ in range(256):
                f.write(block)
EOF
}

now() { date +%s.%N; }

# cache warm|cold: flush what earlier runs left dirty, then cache the
# source tree or drop every cache
cache() {
	sync
	if [ "$1" = cold ]; then
		echo 3 > /proc/sys/vm/drop_caches
	else
		find "$work/$tree" -type f -exec cat {} + >/dev/null
	fi
}

# once CMD...: run CMD with output in $work/out; print the seconds it took
once() {
	rm -rf "$work/out"
	mkdir -p "$work/out"
	cache "$state"
	t0=$(now)
	"$@" >/dev/null
	t1=$(now)
	echo "$t1 - $t0" | bc
}

# run LABEL CMD...: the median time of $repeat runs of CMD, and MB/s
run() {
	label=$1
	shift
	secs=$(for i in $(seq "$repeat"); do once "$@"; done | sort -n |
		sed -n "$(( (repeat + 1) / 2 ))p")
	bytes=$(du -sb "$work/out" | cut -f1)
	printf '%-6s %-5s %-18s %8.2f s %8.1f MB/s\n' "$tree" "$state" \
		"$label" "$secs" "$(echo "$bytes / $secs / 1000000" | bc -l)"
}

tar_sync() {
	tar -cf "$work/out/all.tar" -C "$work/$tree" . && sync
}

make_trees
echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
	"median of $repeat runs"
states=warm
[ -w /proc/sys/vm/drop_caches ] && states="warm cold"
for tree in small large; do
	for state in $states; do
		run "tar -cf" tar -cf "$work/out/all.tar" -C "$work/$tree" .
		run "tar -cf + sync" tar_sync
		run "shardfs-pack" "$pack" -q "$work/$tree" "$work/out/s-%06d.tar"
		run "shardfs-pack -j1" "$pack" -q -j1 "$work/$tree" \
			"$work/out/s-%06d.tar"
	done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
rm -rf "$work/out"
[ "${KEEP:-0}" = 1 ] || rm -rf "$work"
