#!/bin/sh
# Set-up command 2 (and CI's): install dependencies, build, run every test.
# Unit tests need nothing; integration tests mount real FUSE filesystems
# and therefore need root and /dev/fuse.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
[ -e /dev/fuse ] || modprobe fuse
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$top/build" -j"$(nproc)"
ctest --test-dir "$top/build" --output-on-failure -j2
