#!/bin/sh
# Install what shardfs needs to build, test and benchmark on Debian 12.
# Safe to run again: apt-get skips what is already installed.
# btrfs-progs makes the I/O-error test's failing device (dmsetup would, but
# this kernel has no device-mapper); attr gives getfattr.
# groff-base, man-db and shellcheck check the manual pages and scripts in
# tests/integration/test_packaging_files.py and test_package.py; their
# systemd-analyze comes with the base system's systemd, not named here
# because apt-get would then upgrade systemd whenever Debian has a newer one.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
	build-essential cmake pkg-config clang libclang-rt-14-dev \
	libfuse3-dev fuse3 libarchive-dev libarchive-tools libxxhash-dev liburing-dev \
	uthash-dev libcmocka-dev valgrind strace attr tar python3 \
	python3-pytest python3-yaml python3-pil python3-torch \
	python3-torchvision groff-base man-db shellcheck btrfs-progs dmsetup \
	>/dev/null
