# SPDX-License-Identifier: Apache-2.0
"""pytest glue for the shardfs core integration tests (test_core_*.py, and
any test module that sets SHARDFS_WATCHDOG = True).

- Fails (does not skip) when the shardfs binary is missing: a suite that
  silently skips everything would look green.
- Skips when the machine cannot mount FUSE at all (no /dev/fuse, not root).
- A per-test watchdog: if a test runs longer than its budget (marker
  `@pytest.mark.timeout(SECONDS)`, default 240 s) the shardfs daemons behind
  the test's mounts are killed, so a hung read/readdir returns ENOTCONN and
  the test fails instead of hanging the suite.
- After every test, any mount still registered is unmounted and the test
  is failed: the helpers must never leave a mount behind.
"""
import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# the fixtures of the http:// suites, a plugin of theirs (pytest_plugins)
pytest.register_assert_rewrite("remote_site")
import shardfs_testlib as lib  # noqa: E402

DEFAULT_TIMEOUT = 240


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "timeout(seconds): watchdog budget for one test")


@pytest.fixture(autouse=True)
def _shardfs_environment(request):
    # only the core suite (test_core_*.py) and the modules that ask for it
    # are governed by this fixture; other test files keep their own
    # conventions
    core = os.path.basename(str(request.node.fspath)).startswith("test_core_")
    if not getattr(request.module, "SHARDFS_WATCHDOG", core):
        yield
        return
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this machine")
    if os.geteuid() != 0:
        pytest.skip("the integration tests mount filesystems: run as root")
    if not os.access(lib.SHARDFS, os.X_OK):
        pytest.fail("shardfs binary not found at %s (set SHARDFS_BUILD_DIR)"
                    % lib.SHARDFS, pytrace=False)
    marker = request.node.get_closest_marker("timeout")
    budget = marker.args[0] if marker else DEFAULT_TIMEOUT
    fired = threading.Event()

    def on_timeout():
        fired.set()
        lib.abort_all_mounts()

    timer = threading.Timer(budget, on_timeout)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        leftovers = [mp for mp in lib.active_mounts() if lib.is_mounted(mp)]
        for mp in lib.active_mounts():
            lib.unmount(mp)
    if fired.is_set():
        pytest.fail("test exceeded its %ss budget: shardfs daemons were "
                    "killed to unblock it (hang?)" % budget, pytrace=False)
    if leftovers:
        pytest.fail("mounts left behind by the test: %r" % leftovers,
                    pytrace=False)
