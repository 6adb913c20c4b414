#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Install from Debian 12's apt what shardfs needs:
#
#   scripts/install-deps.sh demo   building and mounting, and what the demo
#                                  shows over the mount: torchvision's
#                                  ImageFolder (python3-torchvision, -pil) and
#                                  shardfs-pace (python3-matplotlib for its
#                                  plot; python3-venv, -setuptools, -wheel to pip
#                                  install the Python package offline)
#   scripts/install-deps.sh test   (the default) all of that and the test
#                                  toolchain: cmocka, clang and its sanitizer
#                                  runtimes, valgrind, pytest, and the tools
#                                  the tests drive (below)
#
# Safe to run again: apt-get skips what is already installed.
# Test tools: btrfs-progs makes the I/O-error test's failing device
# (dmsetup would, but this kernel has no device-mapper); attr gives
# getfattr; libarchive-tools (bsdtar) and tar write test archives; strace
# counts system calls; groff-base, man-db, shellcheck and lintian check the
# manual pages, scripts and the Debian package in
# tests/integration/test_packaging_files.py and test_package.py; their
# Remote shards: libcurl4-openssl-dev and libssl-dev build the reader
# (HTTP(S), SigV4); nginx-light, openssl, python3-botocore and Node.js/npm
# run the loopback servers of tests/integration/test_remote_*.py (s3rver
# itself is installed by those tests with npm, into the build tree); s3fs
# (s3fs-fuse) is what tests/bench/remote_epoch.py and remote_bench.py
# compare an s3:// mount with.
# Compressed shards: zlib1g-dev and libzstd-dev build the decoders; gzip,
# pigz, tabix (bgzip), zstd, xz-utils, bzip2, lz4 and ncompress make the
# shards of tests/integration/test_core_compressed.py.
# systemd-analyze comes with the base system's systemd, not named here
# because apt-get would then upgrade systemd whenever Debian has a newer one.
set -eu
what=${1:-test}
case $what in
demo | test) ;;
*) echo "usage: $0 [demo|test]" >&2; exit 2 ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
	build-essential cmake pkg-config libfuse3-dev fuse3 libarchive-dev \
	libxxhash-dev liburing-dev uthash-dev libcurl4-openssl-dev libssl-dev \
	zlib1g-dev libzstd-dev \
	python3 python3-venv \
	python3-setuptools python3-wheel python3-pil python3-torch python3-torchvision \
	python3-matplotlib \
	>/dev/null
[ "$what" = test ] || exit 0
apt-get install -y -qq --no-install-recommends \
	clang libclang-rt-14-dev libcmocka-dev valgrind strace attr tar \
	libarchive-tools python3-pytest python3-yaml groff-base man-db \
	shellcheck lintian btrfs-progs dmsetup nginx-light openssl python3-botocore s3fs \
	gzip pigz tabix zstd xz-utils bzip2 lz4 ncompress \
	>/dev/null
# Node.js for s3rver: the machine's own when present, else Debian's
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
