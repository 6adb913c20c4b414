# SPDX-License-Identifier: Apache-2.0
"""shardfs's side of the `/.shardfs/` control-file contract, checked
against the shards themselves (shared by test_sampler and test_layouts).

`members` must list every regular file of the mount exactly once, under
the path the mount shows in its current layout, with the shard, offset
and size at which the file's bytes are stored; `shards` must list the
shards in order.  The checks read the shard files directly, so they do
not trust shardfs's own reading of them.

The shardfs package is imported as users import it: installed (ctest
installs it into build/python-venv, whose python runs the integration
tests; see scripts/install-python-package.sh), never from the source tree.
"""
import collections
import json
import os
import sys

import shardfs_testlib as lib

try:
    import shardfs
except ImportError as e:
    raise ImportError(
        "the shardfs Python package is not installed for %s (%s): run the "
        "tests through ctest, or scripts/install-python-package.sh VENV python "
        "and VENV/bin/python -m pytest" % (sys.executable, e)) from None

MISSING = ("this shardfs serves no /.shardfs/members control file "
           "(feature not implemented yet)")


def available(mnt):
    return os.path.exists(os.path.join(mnt, ".shardfs", "members"))


def tar_locations(shards):
    """{member name (bytes): (shard, data offset, size)} of the regular
    files, as Python's tarfile reads the shards; later shards win."""
    out = {}
    for index, shard in enumerate(shards):
        for name, _, info in lib.member_offsets(shard):
            if info.isfile():
                out[os.fsencode(name)] = (index, info.offset_data, info.size)
    return out


def regular_files(root):
    """Relative paths (bytes) of the regular files under ROOT."""
    snapshot = lib.full_snapshot(root, with_digest=False)
    return {p for p, (st, _) in snapshot.items() if lib.ftype(st.st_mode) == "f"}


def read_slice(path, offset, size):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def check(mnt, shards):
    """Check the control files of the mount MNT of SHARDS (paths, in shard
    order): /.shardfs is hidden from readdir but reachable; `members`
    lists every regular file exactly once and its (shard, offset, size)
    holds the file's bytes; `shards` lists the shards in order with their
    sizes.  Returns the parsed members."""
    assert ".shardfs" not in os.listdir(mnt)
    assert os.path.isdir(os.path.join(mnt, ".shardfs"))
    with open(os.path.join(mnt, ".shardfs", "members"), "rb") as f:
        lines = f.read().splitlines()
    members = shardfs.read_members(mnt)
    assert len(members) == len(lines), "a path is listed twice"
    assert set(members) == regular_files(mnt)
    for path, m in members.items():
        with open(os.path.join(os.fsencode(mnt), path), "rb") as f:
            content = f.read()
        assert m.size == len(content), path
        assert read_slice(shards[m.shard], m.offset, m.size) == content, path
    listed = shardfs.read_shards(mnt)
    counts = collections.Counter(m.shard for m in members.values())
    assert [s.index for s in listed] == list(range(len(shards)))
    for s, path in zip(listed, shards):
        assert os.path.realpath(s.path) == os.path.realpath(os.fsencode(path))
        assert s.size == os.path.getsize(path)
        assert s.members >= counts[s.index]
    return members


def readahead_hits(mnt):
    """The daemon's count of reads served from its shard prefetch, from
    `/.shardfs/stats` (JSON)."""
    with open(os.path.join(mnt, ".shardfs", "stats")) as f:
        return json.load(f)["readahead"]["hits"]
