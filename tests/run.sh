#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Set-up command 2 (and CI's): install the test toolchain (scripts/install-deps.sh
# test: the demo's packages and the rest), build, run every test.
#
#   1. the release build: unit tests, the Python package's tests and the
#      integration tests (these mount real FUSE filesystems, so they need
#      root and /dev/fuse) but the core suites that step 2 runs in their
#      place, two tests per CPU but for the suites that share host state
#      (tests/CMakeLists.txt), among them the label serial, run last and
#      alone: test_core_transport and the perf group (test_perf*: request
#      and byte counts);
#   2. an AddressSanitizer + UBSan build (clang): unit tests, and the
#      core's integration suites with the sanitized daemon, whose reports
#      go to log files that must stay empty (push-ahead at its default
#      only: the pushahead_off reruns, which check that both read paths
#      serve the same bytes, run in step 1; not push-ahead's perf suite,
#      whose counts need a worker that keeps ahead of the reader; nor the
#      shuffled shares' (gcov, 2026-12-05: one line that no other
#      sanitized suite reaches, for 8 s run alone));
#   3. valgrind memcheck over the unit tests, one program per CPU;
#   4. a short run of each libFuzzer target (15 s, SHARDFS_FUZZ_SECONDS)
#      over its seeds and the saved regression inputs, the targets side by
#      side (long campaigns: docs/fuzzing.md).
#
# The integration tests leave a CPU idle for part of their time (idle
# timeouts, throttled servers, waits for a daemon: step 1 alone at one
# test per CPU left a quarter of the CPUs idle), hence two tests per CPU;
# and the builds of steps 2 and 4 and step 4's run go beside the parallel
# tests of step 1, and step 3 beside those of step 2, in the background
# (in_background: nice 19, in a session of its own).  Where the kernel
# groups each session for the scheduler (sched_autogroup_enabled, on
# here), nice counts only inside the group, so the background takes about
# as much CPU as the tests while it runs: two nice-19 loops in their own
# session beside two at nice 0 took half the CPUs.  Giving the group
# itself nice 19 (/proc/self/autogroup) left them 1 %: the fuzzers would
# then pass their 25 s per-input timeout, which is wall time, so it is not
# done.  Nothing runs beside the serial label, whose counts another load
# would shift.
#
# The run is bound by CPU: about 1,250 CPU-s when every core suite ran in
# both builds (measured by part with cpuacct cgroups, 2026-12-05: the
# builds 78 release, 64 sanitized, 54 fuzzers and test_package's own 45;
# valgrind about 80, of them test_source_gzip 48, 32 since; the release
# tests 464, the sanitized ones 358; the rest the serial label and the
# fuzz smoke), and 786-825 s on 2 CPUs.  CI runs of the same day: 730 s
# with two tests per CPU and the fuzz smoke beside step 1; 592 and 628 s
# once the core suites ran under the sanitizers only (step 1 340 -> 234
# and 261 s) and the stress and concurrency suites for 5 s a test; 566,
# 587 and 573 s with the smaller changes after that (the commits').  Of
# step 1's busy time, the tests' own Python is 44 %, the daemons 15 %,
# shardfs-pace's DataLoader workers 9 % (perf record -a, by command); an
# -O1 sanitized build was no faster (337 against 358 CPU-s, 20 more to
# compile), and a pytest --basetemp per suite, which spares each session
# deleting the trees of those before it, took no CPU off step 1 (321
# against 322 CPU-s).
#
# SHARDFS_TEST_QUICK=1 runs step 1 only, every suite in it.
#
# Requests reach the daemon over io_uring when the kernel offers it (the
# fuse module's enable_uring), over /dev/fuse otherwise: step 1 runs with
# it on, step 2 with it off, so that the suites run in both steps meet
# both paths, and those run once (sanitized_only) meet /dev/fuse, the
# kernel's default (test_core_transport sets it for itself in both); the
# setting found is put back at the end.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
test_jobs=$((2 * jobs))
# The integration suites that step 2 runs under the sanitizers in place of
# step 1: they run once, which took step 1 from 340 to 234 s.  What that
# gives up is these suites on the release build over io_uring; the
# pushahead_off reruns of the conformance, dialect and concurrency suites
# stay in step 1 for it.  Run in both steps: the lifecycle suite (signals,
# idle timeouts and unmounts go through each transport's own teardown),
# the stress suite (races that the release build's timing shows),
# test_core_transport and test_perf (what it reaches of the chunk and disk
# caches no other suite does).
sanitized_only='integration\.test_(core_(badinput|cli|compressed|concurrency|conformance|dialects|semantics)|layouts|access_control|index_persist|remote_(http|s3)|reliability_(storage|trust))$'
sanitized_too='integration\.test_(reliability_(lifecycle|stress)|core_transport|perf)$'
"$top/scripts/install-deps.sh" test
[ -e /dev/fuse ] || modprobe fuse
uring=/sys/module/fuse/parameters/enable_uring
fuse_io_uring() {
	if [ -w "$uring" ]; then echo "$1" > "$uring"; fi
}
uring_was=
[ -w "$uring" ] && uring_was=$(cat "$uring")
background=
cleanup() {
	# a step that failed leaves no build or valgrind run behind it
	[ -z "$background" ] || kill -- "-$background" 2>/dev/null || true
	[ -z "$uring_was" ] || echo "$uring_was" > "$uring"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Run "$@" in the background at nice 19 (within its own scheduler group
# where sessions get one: see the top), in a session and process group of
# its own (so that cleanup() can stop all of it), its output to file $1.
in_background() {
	log=$1
	shift
	setsid -w nice -n 19 "$@" >"$log" 2>&1 &
	background=$!
}

# Wait for in_background's command, if any; if it failed, run "$@" to
# show why, and stop.
wait_background() {
	[ -n "$background" ] || return 0
	status=0
	wait "$background" || status=$?
	background=
	[ "$status" = 0 ] && return 0
	echo "failed in the background (exit $status):" >&2
	"$@" >&2
	exit 1
}

# ctest in build tree $1 with the options after $2: all but the label
# serial in parallel, then command $2 (which waits for the background
# work), then the label serial alone (its fixture's venv is there).
ctest_in_two_phases() {
	tree=$1 wait_for=$2
	shift 2
	ctest --test-dir "$tree" --output-on-failure -j"$test_jobs" -LE serial "$@"
	$wait_for
	ctest --test-dir "$tree" --output-on-failure -L serial -FS shardfs_python "$@"
}

asan="$top/build-asan"
builds_log="$top/build/background-builds.log"
vglogs="$top/build/valgrind"
wait_for_builds() {
	wait_background tail -n 60 "$builds_log"
}
# A program's own output (its .out) is shown when one of its tests failed:
# cmocka names the assertion there, and valgrind's log shows only leaks.
show_valgrind_logs() {
	tail -n 20 "$vglogs/unit-tests.out"
	for log in "$vglogs"/*.log; do
		[ -s "$log" ] && { echo "== $log"; cat "$log"; }
	done
	for out in "$vglogs"/*.out; do
		grep -q 'FAILED' "$out" && { echo "== $out"; cat "$out"; }
	done
}
# The unit test programs, longest first by their times in step 1 (ctest's
# cost data), so that valgrind does not start a long one last.
unit_programs_longest_first() {
	costs="$top/build/Testing/Temporary/CTestCostData.txt"
	for program in "$top"/build/tests/test_*; do
		cost=$(awk -v t="unit.${program##*/}" '$1 == t { print $3 }' "$costs" 2>/dev/null || true)
		echo "${cost:-0} $program"
	done | sort -rn | cut -d' ' -f2-
}
wait_for_valgrind() {
	wait_background show_valgrind_logs
	echo "valgrind: $(wc -l < "$vglogs/programs") unit test programs clean"
}

echo "== release build: unit and integration tests (FUSE over io_uring on)"
fuse_io_uring Y
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON >/dev/null
cmake --build "$top/build" -j"$jobs"
if [ "${SHARDFS_TEST_QUICK:-0}" = 1 ]; then
	ctest_in_two_phases "$top/build" true
	exit 0
fi
echo "(meanwhile, in the background: the sanitized build, the fuzzers and their smoke run; $builds_log)"
in_background "$builds_log" sh -ec '
	cmake -S "$1" -B "$2" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
		-DSHARDFS_SANITIZE=ON -DBUILD_TESTING=ON >/dev/null
	cmake --build "$2" -j"$3"
	SHARDFS_INDEX="$1/build/shardfs-index" \
		"$1/tests/fuzz-smoke.sh" "$1/build-fuzz" "$4"' \
	sh "$top" "$asan" "$jobs" "${SHARDFS_FUZZ_SECONDS:-15}"
# The stress and concurrency suites, 5 s a test in both steps (10 s by
# default: longer runs are a setting away).
export SHARDFS_STRESS_SECONDS=5
ctest_in_two_phases "$top/build" wait_for_builds -E "$sanitized_only"

echo "== AddressSanitizer + UBSan build: unit tests and core integration tests (/dev/fuse)"
fuse_io_uring N
rm -rf "$vglogs"
mkdir -p "$vglogs"
unit_programs_longest_first > "$vglogs/programs"
echo "(meanwhile, in the background: valgrind memcheck of the unit tests, one program per CPU; $vglogs)"
in_background "$vglogs/unit-tests.out" xargs -a "$vglogs/programs" -P "$jobs" -n 1 sh -c \
	'valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
		--log-file="$1/$(basename "$2").log" "$2" >"$1/$(basename "$2").out" 2>&1' sh "$vglogs"
reports="$asan/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
ctest_in_two_phases "$asan" wait_for_valgrind \
	-R "^unit\\.|$sanitized_only|$sanitized_too"
unset ASAN_OPTIONS UBSAN_OPTIONS
if [ -n "$(ls -A "$reports")" ]; then
	echo "sanitizer reports (from daemons or tests):" >&2
	head -n 40 "$reports"/* >&2
	exit 1
fi

echo "fuzz smoke (beside step 1):"
grep '^fuzz-smoke:' "$builds_log"
