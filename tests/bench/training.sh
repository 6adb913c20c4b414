#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The training benchmark (see training.py): shard-order and shuffled epochs
# on shardfs beside the loose tree and cat, over /dev/fuse and io_uring in
# one run.  Needs root (drop_caches, mounts) and Debian's Python (torch).
#   tests/bench/training.sh [--samples N] [--docs]
set -eu
exec /usr/bin/python3 "$(dirname "$0")/training.py" "$@"
