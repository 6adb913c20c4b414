#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Set-up command 2 (and CI's): install the test toolchain (scripts/install-deps.sh
# test: the demo's packages and the rest), build, run every test.
#
#   1. the release build: unit tests, the Python package's tests and every
#      integration test (these mount real FUSE filesystems, so they need
#      root and /dev/fuse), in parallel but for the suites that share host
#      state, which run alone (tests/CMakeLists.txt), among them the perf
#      group (test_perf*: request and byte counts);
#   2. an AddressSanitizer + UBSan build (clang): unit tests, and the
#      integration tests of the core with the sanitized daemon, whose
#      reports go to log files that must stay empty (push-ahead at its
#      default only: the pushahead_off reruns, which check that both read
#      paths serve the same bytes, ran in step 1; and not push-ahead's
#      perf suite: its counts need a worker that keeps ahead of the
#      reader);
#   3. valgrind memcheck over the unit tests, one program per CPU;
#   4. a short run of each libFuzzer target (30 s, SHARDFS_FUZZ_SECONDS)
#      over its seeds and the saved regression inputs, the targets side by
#      side (long campaigns: docs/fuzzing.md).
#
# SHARDFS_TEST_QUICK=1 runs step 1 only.
#
# Requests reach the daemon over io_uring when the kernel offers it (the
# fuse module's enable_uring), over /dev/fuse otherwise: step 1 runs with
# it on, step 2 with it off, so that every suite meets both paths
# (test_core_transport sets it for itself in both); the setting found is
# put back at the end.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$top/scripts/install-deps.sh" test
[ -e /dev/fuse ] || modprobe fuse
uring=/sys/module/fuse/parameters/enable_uring
fuse_io_uring() {
	if [ -w "$uring" ]; then echo "$1" > "$uring"; fi
}
if [ -w "$uring" ]; then
	uring_was=$(cat "$uring")
	trap 'echo "$uring_was" > "$uring"' EXIT
fi

echo "== release build: unit and integration tests (FUSE over io_uring on)"
fuse_io_uring Y
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON >/dev/null
cmake --build "$top/build" -j"$jobs"
ctest --test-dir "$top/build" --output-on-failure -j"$jobs"
[ "${SHARDFS_TEST_QUICK:-0}" = 1 ] && exit 0

echo "== AddressSanitizer + UBSan build: unit tests and core integration tests (/dev/fuse)"
fuse_io_uring N
asan="$top/build-asan"
cmake -S "$top" -B "$asan" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	-DSHARDFS_SANITIZE=ON -DBUILD_TESTING=ON >/dev/null
cmake --build "$asan" -j"$jobs"
reports="$asan/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1" \
UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1" \
SHARDFS_STRESS_SECONDS=10 \
	ctest --test-dir "$asan" --output-on-failure -j"$jobs" \
	-R 'unit\.|core_|layouts|reliability|access_control|index_persist|remote_http|remote_s3|perf' \
	-E '\.pushahead_off$|perf_pushahead'
if [ -n "$(ls -A "$reports")" ]; then
	echo "sanitizer reports (from daemons or tests):" >&2
	head -n 40 "$reports"/* >&2
	exit 1
fi

echo "== valgrind memcheck: unit tests"
vglogs="$top/build/valgrind"
rm -rf "$vglogs"
mkdir -p "$vglogs"
if ! ls "$top"/build/tests/test_* | xargs -P "$jobs" -n 1 sh -c \
	'valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
		--log-file="$1/$(basename "$2").log" "$2" >/dev/null' sh "$vglogs"; then
	for log in "$vglogs"/*.log; do
		[ -s "$log" ] && { echo "== $log" >&2; cat "$log" >&2; }
	done
	exit 1
fi
echo "valgrind: $(ls "$top"/build/tests/test_* | wc -l) unit test programs clean"

echo "== fuzz smoke"
"$top/tests/fuzz-smoke.sh" "$top/build-fuzz" "${SHARDFS_FUZZ_SECONDS:-30}"
