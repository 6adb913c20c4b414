# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the integration tests, in three modules:
testlib_mount (locating the build, mounting and always unmounting, the
host state a suite touches, what a daemon reports), testlib_compare (a
mounted tree against `tar -x` of the same shards) and testlib_fixture
(test data and shards).  This module re-exports every name of the three,
so that a test writes `import shardfs_testlib as lib` and `lib.mounted()`
whichever module holds it.

Setting a name here sets it where it lives: the benchmarks point
`lib.SHARDFS` at the binary they measure, which testlib_mount reads.
"""
import sys
import types

import testlib_compare
import testlib_fixture
import testlib_mount

_MODULES = (testlib_mount, testlib_compare, testlib_fixture)

for _module in _MODULES:
    globals().update({name: value for name, value in vars(_module).items()
                      if not name.startswith("__")})


class _Facade(types.ModuleType):
    def __setattr__(self, name, value):
        for module in _MODULES:
            if hasattr(module, name):
                setattr(module, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade
