# SPDX-License-Identifier: Apache-2.0
"""`cmake --install` to /usr/local puts the Python package where the
python3 of shardfs-pace's #! line (/usr/bin/python3) imports from
(issue 33: it went to /usr/local/lib/python3/dist-packages, which Debian's
python3 does not search, and shardfs-pace failed with
ModuleNotFoundError).

The build of this test run is installed with DESTDIR; a private mount
namespace then shows that tree as /usr/local, so the installed
shardfs-pace runs exactly as after `cmake --install build` on a fresh
machine, and the machine's /usr/local is not touched.  The .deb's
/usr/lib/python3/dist-packages is test_package.py's.
"""
import os
import shutil
import subprocess

import pytest

import shardfs_testlib as lib

PYTHON3 = "/usr/bin/python3"


def python_version():
    r = lib.run_cmd([PYTHON3, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    return r.stdout.strip()


@pytest.fixture(scope="module")
def destdir(tmp_path_factory):
    if not os.path.exists(PYTHON3) or not shutil.which("unshare"):
        pytest.skip("needs /usr/bin/python3 and unshare")
    d = tmp_path_factory.mktemp("destdir")
    env = dict(os.environ, DESTDIR=str(d))
    r = lib.run_cmd(["cmake", "--install", lib.BUILD_DIR, "--prefix", "/usr/local"],
                    env=env)
    assert r.returncode == 0, r
    return d


def test_package_lands_on_the_interpreters_path(destdir):
    want = "/usr/local/lib/python%s/dist-packages" % python_version()
    assert os.path.isfile("%s%s/shardfs/pace.py" % (destdir, want))
    assert not os.path.exists("%s/usr/local/lib/python3/dist-packages" % destdir)
    r = lib.run_cmd([PYTHON3, "-c", "import sys; print('\\n'.join(sys.path))"], env={})
    assert want in r.stdout.split("\n"), r.stdout


def test_installed_shardfs_pace_runs_from_usr_local(destdir):
    script = ('mount --bind "$1/usr/local" /usr/local && cd / && '
              'python3=/usr/bin/python3 && '
              '$python3 -c "import shardfs.pace as p; print(p.__file__)" && '
              'exec /usr/local/bin/shardfs-pace --help')
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        script, "sh", str(destdir)], capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    first, rest = r.stdout.split("\n", 1)
    assert first == "/usr/local/lib/python%s/dist-packages/shardfs/pace.py" % \
        python_version(), r.stdout
    assert "--global-batch" in rest
