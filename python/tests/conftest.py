# SPDX-License-Identifier: Apache-2.0
"""The package's own tests need no mount and no root.  The shardfs package
is the installed one when there is one (ctest's python.unit runs them with
the python of the venv it installed into); otherwise, as when a developer
runs `python3 -m pytest tests` in python/, the one in this source tree."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import shardfs  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(HERE))
