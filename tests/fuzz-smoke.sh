#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# fuzz-smoke.sh - build the libFuzzer targets and give each a short run.
#
# usage: tests/fuzz-smoke.sh [--build-only] BUILD_DIR [SECONDS]
#
# Configures BUILD_DIR with clang and SHARDFS_FUZZ=ON, builds fuzz_tar,
# fuzz_index, fuzz_index_bounded, fuzz_index_file, fuzz_index_compact,
# fuzz_seek_table and fuzz_zstd_seek_table (and stops there with
# --build-only, which tests/run.sh uses to build them while other tests
# run), then for each target, the seven side by side (one libFuzzer
# process each; the machine's CPUs are shared among them):
#   1. runs every input in tests/data/fuzz-regressions/<target>-* once
#      (each separately, so that one failure does not hide the others);
#   2. fuzzes for SECONDS (default 60) from the seed corpus made by
#      tests/fuzz/make-corpus.sh (every seed is run first, however short
#      SECONDS is).
# The seeds of fuzz_index_file are written by shardfs-index: BUILD_DIR's
# own, or $SHARDFS_INDEX if set (tests/run.sh passes the release build's,
# which spares compiling the core a second time).
# Exits non-zero if any run crashes, leaks, trips a sanitizer or breaks an
# invariant of the harness.  Work files, crash inputs and logs are kept in
# BUILD_DIR/fuzz-smoke/.  Long campaigns: see docs/fuzzing.md.
set -euo pipefail

build_only=0
if [ "${1:-}" = --build-only ]; then
	build_only=1
	shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 [--build-only] BUILD_DIR [SECONDS]" >&2
	exit 2
fi
build=$(realpath -m "$1")
seconds=${2:-60}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$build/fuzz-smoke
# -close_fd_mask=2 silences the shard warnings; reports still get through
fuzz_flags=(-rss_limit_mb=2048 -timeout=25 -max_len=65536 -close_fd_mask=2
	    "-dict=$repo/tests/fuzz/tar.dict")

index_tool=${SHARDFS_INDEX:-$build/shardfs-index}
targets=(fuzz_tar fuzz_index fuzz_index_bounded fuzz_index_file fuzz_index_compact
	 fuzz_seek_table fuzz_zstd_seek_table)
build_targets=("${targets[@]}")
[ -n "${SHARDFS_INDEX:-}" ] || build_targets+=(shardfs-index)

cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER=clang -DSHARDFS_FUZZ=ON >/dev/null
if ! cmake --build "$build" -j "$(nproc)" --target "${build_targets[@]}"; then
	echo "fuzz-smoke: cannot build the fuzzers (is tests/fuzz added to CMakeLists.txt?)" >&2
	exit 2
fi
[ $build_only = 0 ] || exit 0
rm -rf "$work"
mkdir -p "$work"
"$repo/tests/fuzz/make-corpus.sh" "$work/seeds"

# Seeds for fuzz_index_file: the index files shardfs-index writes for the
# tar seeds that make valid shard sets, in two layouts.
mkdir -p "$work/seeds/index_file"
for tar in "$work"/seeds/tar/*; do
	for layout in tree shards; do
		"$index_tool" -o "quiet,index_mode=rebuild,layout=$layout" \
			-o "index=$work/seeds/index_file/$(basename "$tar").$layout" \
			"$tar" >/dev/null 2>&1 || true
	done
done

# Seeds for fuzz_seek_table: a table of one member point, and one of the
# two member points of its fixed stream (196608 bytes, halves compressed
# apart; the second member's compressed offset is only a guess).
mkdir -p "$work/seeds/seek_table"
python3 - "$work/seeds/seek_table" <<'PY'
import struct, sys
def point(out, inn, kind):
    return struct.pack("<QQQIBBH", out, inn, 0, 0, kind, 0, 0)
size = 192 * 1024
open(sys.argv[1] + "/one", "wb").write(struct.pack("<QQ", size, 1) + point(0, 0, 1))
open(sys.argv[1] + "/two", "wb").write(struct.pack("<QQ", size, 2) + point(0, 0, 1)
                                      + point(size // 2, 120, 1))
PY

# Run one regression input of @1 once; log to $work.
run_regression() {
	local target=$1 input=$2 log

	log=$work/$(basename "$input").log
	if "$build/fuzz/$target" "${fuzz_flags[@]}" "$input" >"$log" 2>&1; then
		echo "fuzz-smoke: ok      $(basename "$input")"
		return 0
	fi
	echo "fuzz-smoke: FAILED  $(basename "$input") (log: $log)"
	grep -E 'invariant violated|ERROR: [A-Za-z]+Sanitizer|runtime error|SUMMARY' "$log" | head -n 4 | sed 's/^/    /'
	return 1
}

# Fuzz @1 for $seconds from its seeds; crash inputs land in $work.
run_fuzzer() {
	local target=$1 kind=${1#fuzz_}

	mkdir -p "$work/$kind-corpus"
	if "$build/fuzz/$target" "${fuzz_flags[@]}" -max_total_time="$seconds" \
		-artifact_prefix="$work/$target-" "$work/$kind-corpus" "$work/seeds/$kind" \
		>"$work/$target.log" 2>&1; then
		echo "fuzz-smoke: ok      $target, $seconds s: $(grep -E '^#[0-9]+' "$work/$target.log" | tail -n 1)"
		return 0
	fi
	echo "fuzz-smoke: FAILED  $target (log: $work/$target.log; input: $work/$target-crash-*)"
	grep -E 'invariant violated|ERROR: [A-Za-z]+Sanitizer|runtime error|SUMMARY' "$work/$target.log" | head -n 4 | sed 's/^/    /'
	return 1
}

# The regression inputs, then the fuzzing, of @1; returns non-zero if any
# failed.
run_target() {
	local target=$1 input status=0

	for input in "$repo"/tests/data/fuzz-regressions/"$target"-*; do
		[ -e "$input" ] || continue
		run_regression "$target" "$input" || status=1
	done
	run_fuzzer "$target" || status=1
	return $status
}

pids=()
for target in "${targets[@]}"; do
	run_target "$target" >"$work/$target.out" 2>&1 &
	pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
	wait "${pids[$i]}" || status=1
	cat "$work/${targets[$i]}.out"
done
exit $status
