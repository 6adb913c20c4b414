# SPDX-License-Identifier: Apache-2.0
"""The Python package installs the way its documentation says, and the
tests use it installed.

- pip installs python/ into a new virtualenv (--system-site-packages, for
  Debian's torch) offline: --no-build-isolation --no-index, with Debian's
  python3-setuptools and python3-wheel (scripts/install-python-package.sh,
  which the demo and ctest use); the venv then has the modules, the
  shardfs-pace console script and the metadata (version = the CMake
  project's, Apache-2.0, torch an optional extra);
- the python running these tests imports shardfs from its site-packages,
  never from the source tree.
"""
import os
import re
import sys

import shardfs_testlib as lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INSTALL = os.path.join(REPO, "scripts", "install-python-package.sh")


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(shardfs VERSION (\S+)", f.read()).group(1)


def test_the_tests_import_the_installed_package():
    import shardfs
    import shardfs.torch
    where = os.path.realpath(shardfs.__file__)
    assert not where.startswith(os.path.join(REPO, "python") + os.sep), where
    assert where.startswith(os.path.realpath(sys.prefix)), (where, sys.prefix)


def test_pip_install_offline_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    r = lib.run_cmd(["sh", INSTALL, str(venv), os.path.join(REPO, "python")],
                    timeout=300)
    assert r.returncode == 0, r
    python = str(venv / "bin" / "python")
    r = lib.run_cmd([python, "-c",
                     "import shardfs, shardfs.torch, shardfs.pace, sys; "
                     "import importlib.metadata as m; "
                     "d = m.distribution('shardfs'); "
                     "print(shardfs.torch.__file__); print(d.version); "
                     "print(d.metadata['License']); "
                     "print(sorted(d.metadata.get_all('Provides-Extra'))); "
                     "print([e.value for e in d.entry_points])"])
    assert r.returncode == 0, r
    where, version, license_, extras, entry_points = r.stdout.splitlines()
    assert where.startswith(str(venv / "lib")), where
    assert version == project_version()
    assert license_ == "Apache-2.0"
    assert extras == "['torch']"
    assert entry_points == "['shardfs.pace:main']"
    r = lib.run_cmd([str(venv / "bin" / "shardfs-pace"), "--help"])
    assert r.returncode == 0 and "--global-batch N" in r.stdout, r
    # nothing was built inside the source tree
    assert sorted(os.listdir(os.path.join(REPO, "python"))) == \
        ["README.md", "pyproject.toml", "shardfs", "tests"], os.listdir(os.path.join(REPO, "python"))
