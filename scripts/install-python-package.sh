#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Install the shardfs Python package (python/) into a fresh virtualenv,
# VENV, the way users install it: pip, offline (--no-index, with the
# setuptools of Debian's python3-setuptools: --no-build-isolation), into a
# venv that sees Debian's python3-torch, -torchvision, -pil, -pytest
# (--system-site-packages).  The integration tests run with VENV/bin/python
# so that they import the installed package, not the source tree.
#
#   scripts/install-python-package.sh VENV SRC    (SRC: the python/ directory)
#
# pip builds in the directory it is given and leaves build/ and
# *.egg-info there: it is given a copy, so that the source tree stays clean
# and concurrent builds do not meet.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 VENV SRC" >&2; exit 2; }
venv=$1
src=$2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -R "$src/pyproject.toml" "$src/README.md" "$src/shardfs" "$stage/"
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --quiet --no-build-isolation --no-index \
	--disable-pip-version-check "$stage"
