#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Entry point of the shardfs benchmark suite (see bench.py for what it
# measures).  Runs with Debian's Python, which sees python3-torch,
# torchvision and PIL; needs root for dropping caches and mounting.
#   tests/bench/run.sh --quick          smoke run (3,000 samples)
#   tests/bench/run.sh --docs           full run, added to docs/bench-runs/runs.md
set -eu
command -v strace >/dev/null 2>&1 || apt-get install -y -q strace >/dev/null
SHARDFS_BENCH_PROG="tests/bench/run.sh" exec /usr/bin/python3 "$(dirname "$0")/bench.py" "$@"
