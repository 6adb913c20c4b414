# SPDX-License-Identifier: Apache-2.0
"""shardfs-pack at small scale (issue 33):

- a set of fewer shards than a typical job has DataLoader workers (64)
  is warned about, with the --max-count that makes 64, and that
  --max-count does;
- mtimes are whole seconds by default (no 1 KiB PAX header per member);
  --exact-mtime keeps the fractions; --whole-seconds is still accepted;
- an OUT_PATTERN whose suffix says another format than the one written
  (.tar for gzip, .tgz for plain tar, .tar.gz for zstd) is refused before
  anything is written.
"""
import os
import re
import tarfile

import pytest

import shardfs_testlib as lib

PACK = lib.binary("shardfs-pack")
FRACTION_NS = 123_456_789


def source(root, samples):
    for i in range(samples):
        lib.write_file(root / ("c%d" % (i % 3)) / ("%05d.txt" % i), b"x" * 200,
                       mtime_ns=lib.T0_NS - lib.T0_NS % 10**9 + FRACTION_NS)
    lib.finish_dirs(root)
    return root


def pack(*argv):
    return lib.run_cmd([PACK, "-q", *map(os.fspath, argv)])


def shard_names(out):
    return sorted(n for n in os.listdir(out) if re.match(r"s-\d+\.tar", n))


def test_few_shards_warned_with_the_max_count_that_fixes_it(tmp_path):
    src = source(tmp_path / "src", 300)
    r = pack(src, tmp_path / "a/s-%04d.tar")
    assert r.returncode == 0, r
    m = re.search(r"300 samples in 1 shard: fewer than the 64 .* --max-count=(\d+) "
                  r"makes 64 or more", r.stderr)
    assert m, r.stderr
    r = pack("--max-count=" + m.group(1), src, tmp_path / "b/s-%04d.tar")
    assert r.returncode == 0 and r.stderr == "", r
    assert len(shard_names(tmp_path / "b")) >= 64


def test_too_few_samples_for_64_shards_get_no_warning(tmp_path):
    r = pack(source(tmp_path / "src", 40), tmp_path / "a/s-%04d.tar")
    assert r.returncode == 0 and r.stderr == "", r


def test_whole_second_mtimes_by_default_exact_on_request(tmp_path):
    src = source(tmp_path / "src", 5)
    lean, exact, old = (tmp_path / d for d in ("lean", "exact", "old"))
    assert pack(src, lean / "s-%d.tar").returncode == 0
    assert pack("--exact-mtime", src, exact / "s-%d.tar").returncode == 0
    assert pack("--whole-seconds", src, old / "s-%d.tar").returncode == 0
    with tarfile.open(lean / "s-0.tar") as t:
        files = [m for m in t.getmembers() if m.isfile()]
        assert len(files) == 5 and all(m.pax_headers == {} for m in files)
        assert all(m.mtime == lib.T0_NS // 10**9 for m in files)
    with tarfile.open(exact / "s-0.tar") as t:
        files = [m for m in t.getmembers() if m.isfile()]
        assert all(m.pax_headers["mtime"].endswith(".123456789") for m in files)
    # a PAX header (512 header + 512 record) per file and directory less
    entries = 5 + 3             # files and c0/ c1/ c2/
    assert os.path.getsize(exact / "s-0.tar") - os.path.getsize(lean / "s-0.tar") == \
        entries * 1024
    assert (old / "s-0.tar").read_bytes() == (lean / "s-0.tar").read_bytes()


@pytest.mark.parametrize("options,pattern,says", [
    (["--compress=gzip"], "s-%06d.tar", "a .tar name for gzip shards: end OUT_PATTERN in .tar.gz"),
    ([], "s-%06d.tgz", "a .tgz name for plain tar shards: end OUT_PATTERN in .tar, "
                       "or add --compress=gzip"),
    (["--compress=zstd"], "s-{0..9}.tar.gz", "a .tar.gz name for zstd shards: end "
                                             "OUT_PATTERN in .tar.zst"),
])
def test_pattern_that_names_another_format_is_refused(tmp_path, options, pattern, says):
    src = source(tmp_path / "src", 3)
    r = pack(*options, src, tmp_path / "out" / pattern)
    assert r.returncode == 2 and says in r.stderr, r
    assert not (tmp_path / "out").exists()
