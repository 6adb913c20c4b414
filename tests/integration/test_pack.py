# SPDX-License-Identifier: Apache-2.0
"""shardfs-pack (issue 8): directory tree -> WebDataset tar shards.

The main test is the round trip: pack a tree, mount the shards with
shardfs, and find SRC_DIR again, byte for byte, with modes, mtimes (to the
nanosecond), symlinks, empty files and directories, long and non-UTF-8
names and a 10 000-file directory.  GNU tar, bsdtar and Python's tarfile
must list the shards identically and extract the same tree.  The rest
checks the format (ustar + PAX only where needed, no record padding), the
sample grouping and size limits, the manifest, determinism, and what an
interrupted run leaves behind and how --resume picks it up.
"""
import ctypes
import io
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import tarfile
import time

import pytest

import shardfs_testlib as lib
from shardfs_testlib import T0_NS

PACK = lib.binary("shardfs-pack")
# ref_start_ns for compare_trees: every source directory is compared in full
NEVER = 1 << 62
MIB = 1 << 20


# --------------------------------------------------------------- helpers

@pytest.fixture(autouse=True)
def _need_pack():
    if not os.access(PACK, os.X_OK):
        pytest.fail("shardfs-pack not found at %s (set SHARDFS_BUILD_DIR)"
                    % PACK, pytrace=False)


def pack(src, pattern, *options, check=True):
    r = lib.run_cmd([PACK, *options, os.fspath(src), os.fspath(pattern)])
    if check:
        assert r.returncode == 0, "shardfs-pack failed: %r" % (r,)
    return r


def summary(result):
    """The 'key value ...' summary lines of a run, values as ints."""
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^(\w+) +(\d+)", result.stdout, re.M)}


def shards_in(out_dir):
    return sorted(os.path.join(out_dir, n) for n in os.listdir(out_dir)
                  if n.endswith(".tar"))


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def members(shard):
    """The shard's TarInfos, parsed once for each version of the file (the
    tests read the module's shards several times and never change them)."""
    st = os.stat(shard)
    key = (os.path.realpath(shard), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _MEMBERS:
        with tarfile.open(shard, "r:", encoding="utf-8",
                          errors="surrogateescape") as t:
            _MEMBERS[key] = t.getmembers()
    return list(_MEMBERS[key])


_MEMBERS = {}


def sample_key(name):
    """WebDataset key of a member name (str): dir + base up to first dot."""
    d, _, base = name.rpartition("/")
    dot = base.find(".", 1)
    return (d + "/" if d else "") + (base[:dot] if dot > 0 else base)


def file_samples(shard):
    """Sample keys of a shard's non-directory members, in order."""
    return [sample_key(m.name) for m in members(shard) if not m.isdir()]


def xxh3_64(data):
    lib_xxh = ctypes.CDLL("libxxhash.so.0")
    lib_xxh.XXH3_64bits.restype = ctypes.c_uint64
    lib_xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return "%016x" % lib_xxh.XXH3_64bits(data, len(data))


def _j(root, rel):
    return os.path.join(os.fsencode(root), os.fsencode(rel))


def build_source(root):
    """The round-trip tree.  Every file and directory has a fixed mtime
    with a nanosecond part; owners are root's (packing normalises them)."""
    os.makedirs(root)
    tick = itertools.count(1)

    def f(rel, data, mode=0o644, mtime_ns=None):
        lib.write_file(_j(root, rel), data, mode=mode,
                       mtime_ns=mtime_ns or T0_NS + next(tick) * 1_000_003_917)

    for cls in ("cat", "dog"):
        for i in range(30):
            key = "train/%s/%06d" % (cls, i)
            f(key + ".jpg", lib.deterministic_bytes((cls, i), 97 + i * 997))
            f(key + ".cls", cls.encode())
            f(key + ".json", b'{"i": %d}' % i)
    for size in lib.BOUNDARY_SIZES:
        f("sizes/s%05d.bin" % size, lib.deterministic_bytes(size, size))
    f("sizes/big.bin", lib.deterministic_bytes("big", MIB + 7))
    # path lengths: 100, 101 (prefix split), 255 (prefix + name), a
    # 255-byte component, 300+ and ~1000 bytes (PAX path)
    f("names/" + "a" * 90 + ".txt", b"100")
    f("names/" + "b" * 91 + ".txt", b"101")
    f("names/" + "c" * 148 + "/" + "d" * 96 + ".txt", b"255")
    f("names/" + "e" * 251 + ".bin", b"component of 255")
    f("names/" + "f" * 200 + "/" + "g" * 120 + ".txt", b"300+")
    f("names/" + "/".join(c * 240 for c in "hijk") + ".txt", b"1000")
    f(b"bytes/caf\xe9.bin", b"latin-1")
    f(b"bytes/\xff\xfe.dir/x.bin", b"junk bytes in a directory name")
    f(b"bytes/" + b"\xe9" * 150 + b".bin", b"long and not UTF-8")
    f("bytes/\u00fcn\u00efc\u00f6d\u00e9-\u65e5\u672c.txt", b"UTF-8")
    f("misc/README", b"no extension")
    f("misc/.hidden", b"dot file")
    f("misc/.x.txt", b"dot file with extension")
    f("misc/with space.txt", b"space")
    f("empty/zero.bin", b"")
    f("empty/zero.txt", b"")
    for mode in (0o600, 0o640, 0o755, 0o400, 0o4755, 0o2750, 0o000):
        f("modes/m%04o" % mode, b"mode", mode=mode)
    f("times/pre-epoch", b"1969", mtime_ns=-86_400 * 10**9 * 365 + 500_000_000)
    f("times/whole-second", b"s", mtime_ns=1_500_000_000 * 10**9)
    f("times/after-2242", b"2242", mtime_ns=(1 << 33) * 10**9 + 5)
    for i in range(10_000):
        f("many/%05d.txt" % i, b"%d\n" % i)
    os.makedirs(_j(root, "links"))
    for rel, target in (("links/rel.jpg", "../train/cat/000001.jpg"),
                        ("links/abs", "/etc/hostname"),
                        ("links/dangling", "no/such/file"),
                        ("links/todir", "../train"),
                        ("links/long", "t" * 300)):
        os.symlink(target, _j(root, rel))
    for rel, mode in (("empty/dir", 0o755), ("empty/nested/a/b", 0o700),
                      ("private", 0o700), ("sticky", 0o1777)):
        os.makedirs(_j(root, rel), exist_ok=True)
        os.chmod(_j(root, rel), mode)
    f("private/secret", b"secret", mode=0o600)
    lib.finish_dirs(root, T0_NS + 7_777_777_777)
    return root


_SOURCE_SNAPSHOTS = {}


def source_snapshot(src, full=True):
    """lib.full_snapshot (FULL) or lib.tree_snapshot of the round-trip
    tree, taken once for the module: the tests only read the tree."""
    key = (src, full)
    if key not in _SOURCE_SNAPSHOTS:
        take = lib.full_snapshot if full else lib.tree_snapshot
        _SOURCE_SNAPSHOTS[key] = take(src)
    return dict(_SOURCE_SNAPSHOTS[key])


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """The round-trip tree packed into several shards of at most 2 MiB."""
    base = tmp_path_factory.mktemp("pack")
    src = build_source(str(base / "src"))
    out = str(base / "out")
    r = pack(src, out + "/shard-%06d.tar", "--max-size", "2M", "--exact-mtime")
    return src, out, r


# ------------------------------------------------------------- round trip

@pytest.mark.timeout(120)
def test_round_trip_through_the_mount(packed, tmp_path):
    src, out, _ = packed
    shards = shards_in(out)
    assert len(shards) > 3
    with lib.mounted(out, str(tmp_path / "mnt")):
        lib.compare_trees(str(tmp_path / "mnt"), src, NEVER,
                          ref_snapshot=source_snapshot(src))
    # the brace template WebDataset uses names the same set
    brace = os.path.join(out, "shard-{000000..%06d}.tar" % (len(shards) - 1))
    with lib.mounted(brace, str(tmp_path / "mnt2")):
        assert lib.tree_snapshot(str(tmp_path / "mnt2")) == \
            source_snapshot(src, full=False)


# GNU tar 1.34 does not know the POSIX 'hdrcharset' keyword, which marks
# PAX paths that are not UTF-8 (bsdtar refuses such paths without it), and
# the tree has mtimes before 1970 and after 2242, which GNU tar remarks on
GNU_TAR = ["tar", "--warning=no-unknown-keyword", "--warning=no-timestamp"]


def extract_gnu_tar(shard, dest):
    return lib.run_cmd([*GNU_TAR, "-xf", shard, "-C", dest])


def extract_bsdtar(shard, dest):
    return lib.run_cmd(["bsdtar", "-xpf", shard, "-C", dest])


def extract_tarfile(shard, dest):
    kw = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(shard, encoding="utf-8", errors="surrogateescape") as t:
        t.extractall(dest, **kw)
    return lib.Result([], 0, b"", b"")


@pytest.mark.parametrize("extract", [extract_gnu_tar, extract_bsdtar,
                                     extract_tarfile],
                         ids=["gnu-tar", "bsdtar", "tarfile"])
def test_round_trip_through_tar_tools(packed, tmp_path, extract):
    src, out, _ = packed
    dest = str(tmp_path / "x")
    os.makedirs(dest)
    for shard in shards_in(out):
        r = extract(shard, dest)
        assert r.returncode == 0 and not r.stderr, r
    want, got = source_snapshot(src, full=False), lib.tree_snapshot(dest)
    if extract is extract_bsdtar:
        # libarchive 3.6 leaves directories that exist alone, so one that
        # spans shards keeps the mtime of its last extraction; and it reads
        # a negative PAX time with a fraction ("-1.5") as -1 + 0.5
        for rel, entry in list(want.items()):
            if entry[0] == "d":
                want[rel], got[rel] = entry[:2], got[rel][:2]
        del want[b"times/pre-epoch"], got[b"times/pre-epoch"]
    else:
        # tarfile sets mtimes through a float: whole seconds only
        exact = extract is extract_gnu_tar
        lib.compare_trees(dest, src, NEVER, check_mtime=exact,
                          ref_snapshot=source_snapshot(src))
    assert got == want


def test_tar_tools_list_the_same(packed):
    _, out, _ = packed
    for shard in shards_in(out):
        gnu = lib.run_cmd([*GNU_TAR, "-tf", shard])
        bsd = lib.run_cmd(["bsdtar", "-tf", shard])
        raw = lib.run_cmd([*GNU_TAR, "--quoting-style=literal", "-tf", shard])
        for r in (gnu, bsd, raw):
            assert r.returncode == 0 and not r.stderr, r
        # both escape odd bytes as \ooo
        assert gnu.stdout_bytes == bsd.stdout_bytes
        names = [os.fsencode(m.name) + (b"/" if m.isdir() else b"")
                 for m in members(shard)]
        assert raw.stdout_bytes.split(b"\n")[:-1] == names


def test_summary_counts(packed):
    src, out, r = packed
    s = summary(r)
    assert s["files"] == sum(len(f) + sum(os.path.islink(os.path.join(d, x))
                                          for x in ds)
                             for d, ds, f in os.walk(src))
    assert s["skipped"] == 0
    assert s["shards"] == len(shards_in(out))
    assert "MB/s" in r.stdout
    # 12 shards for 10,108 samples: the one warning (test_pack_advice.py)
    assert r.stderr.count("\n") == 1 and "--max-count=157 makes 64" in r.stderr, r.stderr


# ----------------------------------------------------------------- format

def walk_headers(data):
    """Yield (offset, header block, size) of every header up to the end
    marker; asserts the marker is two zero blocks that end the file."""
    off = 0
    pax_size = None
    while True:
        block = data[off:off + 512]
        assert len(block) == 512, "archive ends inside a header"
        if block == bytes(512):
            assert data[off:] == bytes(1024), "not two zero blocks at the end"
            return
        assert lib.tar_checksum(block) == int(block[148:154], 8)
        size = int(block[124:135], 8)
        if pax_size is not None:
            size, pax_size = pax_size, None
        yield off, block, size
        if block[156:157] == b"x":
            recs = data[off + 512:off + 512 + size].decode("utf-8", "replace")
            m = re.search(r"\d+ size=(\d+)\n", recs)
            pax_size = int(m.group(1)) if m else None
        off += 512 + (size + 511) // 512 * 512


def test_shards_are_posix_ustar_with_pax(packed):
    _, out, _ = packed
    kinds = set()
    for shard in shards_in(out):
        data = read_bytes(shard)
        assert len(data) % 512 == 0
        for _, h, _ in walk_headers(data):
            assert h[257:263] == b"ustar\0" and h[263:265] == b"00"
            assert h[108:116] == b"0000000\0" and h[116:124] == b"0000000\0"
            assert h[265:297] == bytes(32) and h[297:329] == bytes(32)
            kinds.add(h[156:157])
    assert kinds == {b"0", b"2", b"5", b"x"}


def test_no_record_padding(tmp_path):
    src = str(tmp_path / "src")
    lib.write_file(_j(src, "one.txt"), b"x" * 100)
    pack(src, str(tmp_path / "out/s-%d.tar"), "--whole-seconds")
    # header + one data block + end marker, not a 10240-byte record
    assert os.path.getsize(tmp_path / "out/s-0.tar") == 512 + 512 + 1024


def test_pax_records_only_where_needed(tmp_path):
    src = str(tmp_path / "src")
    whole = T0_NS - T0_NS % 10**9

    def f(rel, ns=whole):
        lib.write_file(_j(src, rel), b"x", mtime_ns=ns)

    f("short.txt")
    f("p" * 60 + "/" + "n" * 90)                    # ustar prefix + name
    f("q" * 101)                                    # component over 100
    f(b"\xe9" * 101)                                # ... and not UTF-8
    f("frac.txt", T0_NS)                            # sub-second mtime
    f("old.txt", -10**9 - 250_000_000)              # before 1970
    os.symlink("t" * 101, _j(src, "longlink"))
    lib.set_mtime(_j(src, "longlink"), whole)
    lib.finish_dirs(src, whole)
    pack(src, str(tmp_path / "o/s-%d.tar"), "--exact-mtime")
    got = {m.name: m.pax_headers for m in members(str(tmp_path / "o/s-0.tar"))}
    assert got["short.txt"] == {}
    assert got["p" * 60] == {}
    assert got["p" * 60 + "/" + "n" * 90] == {}
    assert got["q" * 101] == {"path": "q" * 101}
    assert got[os.fsdecode(b"\xe9" * 101)]["hdrcharset"] == "BINARY"
    assert got["frac.txt"] == {"mtime": "%d.123456789" % (T0_NS // 10**9)}
    assert got["old.txt"] == {"mtime": "-1.25"}
    assert got["longlink"] == {"linkpath": "t" * 101}


def test_whole_seconds_drops_fractions(tmp_path):
    src = str(tmp_path / "src")
    lib.write_file(_j(src, "a.txt"), b"a")
    pack(src, str(tmp_path / "o/s-%d.tar"), "--whole-seconds")
    (m,) = members(str(tmp_path / "o/s-0.tar"))
    assert m.pax_headers == {} and m.mtime == T0_NS // 10**9


def test_owner_normalised_unless_kept(tmp_path):
    src = str(tmp_path / "src")
    lib.write_file(_j(src, "mine"), b"1", uid=1234, gid=5678)
    lib.write_file(_j(src, "root"), b"0", uid=0, gid=0)
    lib.write_file(_j(src, "big"), b"2", uid=3_000_000, gid=3_000_001)
    pack(src, str(tmp_path / "a/s-%d.tar"))
    for m in members(str(tmp_path / "a/s-0.tar")):
        assert (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "")
    pack(src, str(tmp_path / "b/s-%d.tar"), "--keep-owner", "--whole-seconds")
    got = {m.name: m for m in members(str(tmp_path / "b/s-0.tar"))}
    assert (got["mine"].uid, got["mine"].gid) == (1234, 5678)
    assert (got["root"].uname, got["root"].gname) == ("root", "root")
    assert got["big"].pax_headers == {"uid": "3000000", "gid": "3000001"}


def test_large_sizes_use_pax(tmp_path):
    if not os.environ.get("SHARDFS_PACK_LARGE"):
        pytest.skip("writes an 8 GiB shard: set SHARDFS_PACK_LARGE=1")
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "huge.bin"), "wb") as fh:
        fh.truncate(8 << 30)
        fh.write(b"head")
    pack(src, str(tmp_path / "o/s-%d.tar"), "--whole-seconds")
    (m,) = members(str(tmp_path / "o/s-0.tar"))
    assert m.size == 8 << 30 and m.pax_headers == {"size": str(8 << 30)}


# --------------------------------------------------------- samples, sizes

def build_samples(root, n, sizes=(3000,)):
    """N samples ('k/%04d.*'), each of one file per size in SIZES."""
    for i in range(n):
        for j, size in enumerate(sizes):
            lib.write_file(_j(root, "k/%04d.p%d" % (i, j)),
                           lib.deterministic_bytes((i, j), size))
    return root


def test_samples_never_span_shards(packed, tmp_path):
    src, _, _ = packed
    pack(src, str(tmp_path / "o/s-%04d.tar"), "--max-count", "7")
    seen = set()
    for shard in shards_in(str(tmp_path / "o")):
        keys = file_samples(shard)
        runs = [k for k, _ in itertools.groupby(keys)]
        assert len(runs) == len(set(runs)), "a sample is split in %s" % shard
        assert len(runs) <= 7
        assert not seen & set(runs), "a sample spans two shards"
        seen |= set(runs)


def test_max_size_and_oversized_sample(tmp_path):
    src = build_samples(str(tmp_path / "src"), 40, sizes=(3000, 1000))
    lib.write_file(_j(src, "k/9999.big"), b"B" * 100_000)
    # the sizes below count a PAX header per member
    r = pack(src, str(tmp_path / "o/s-%03d.tar"), "--max-size", "32K", "--exact-mtime")
    manifest = json.loads(read_bytes(tmp_path / "o/shards.json"))
    for entry in manifest["shards"]:
        shard = str(tmp_path / "o" / entry["name"])
        size = os.path.getsize(shard)
        if "k/9999" in file_samples(shard):
            assert file_samples(shard) == ["k/9999"] and size > 32 << 10
        else:
            assert size <= 32 << 10
            # the next sample would not have fitted: shards are full
            assert size > (32 << 10) - 6 * 512 - 3000 - 1000
    assert summary(r)["samples"] == 41 == manifest["samples"]


def test_size_suffixes(tmp_path):
    src = build_samples(str(tmp_path / "src"), 20)
    pack(src, str(tmp_path / "a/s-%d.tar"), "--max-size", "16k")
    pack(src, str(tmp_path / "b/s-%d.tar"), "--max-size", "16384")
    assert [read_bytes(p) for p in shards_in(str(tmp_path / "a"))] == \
        [read_bytes(p) for p in shards_in(str(tmp_path / "b"))]
    for bad in ("16X", "0", "-1", "K", "1.5M", "99999999999999999999"):
        r = pack(src, str(tmp_path / "c/s-%d.tar"), "--max-size", bad,
                 check=False)
        assert r.returncode == 2 and "--max-size" in r.stderr, (bad, r)


def test_every_shard_carries_its_directories(packed):
    _, out, _ = packed
    for shard in shards_in(out):
        dirs = set()
        for m in members(shard):
            parts = m.name.split("/")
            for k in range(1, len(parts)):
                assert "/".join(parts[:k]) in dirs, (shard, m.name)
            if m.isdir():
                dirs.add(m.name)


def test_manifest_describes_the_shards(packed):
    src, out, r = packed
    manifest = json.loads(read_bytes(os.path.join(out, "shards.json")))
    names = [e["name"] for e in manifest["shards"]]
    assert names == [os.path.basename(p) for p in shards_in(out)]
    empty_dirs = {os.fsdecode(os.path.relpath(d, os.fsencode(src)))
                  for d, ds, fs in os.walk(os.fsencode(src)) if not ds + fs}
    for e in manifest["shards"]:
        shard = os.path.join(out, e["name"])
        data = read_bytes(shard)
        assert e["bytes"] == len(data)
        assert e["xxh3"] == xxh3_64(data)
        # a sample per key, and one per empty directory
        assert e["samples"] == len(set(file_samples(shard))) + len(
            [m for m in members(shard) if m.name in empty_dirs])
    assert manifest["samples"] == sum(e["samples"] for e in manifest["shards"])
    assert manifest["samples"] == summary(r)["samples"]


# ------------------------------------------------------------ determinism

def test_output_is_deterministic(packed, tmp_path):
    src, out, _ = packed
    # another run, other thread counts, source files read in between
    lib.tree_snapshot(src)
    pack(src, str(tmp_path / "again/shard-%06d.tar"), "--max-size", "2M",
         "--exact-mtime", "-j", "1")
    for a, b in zip(shards_in(out), shards_in(str(tmp_path / "again"))):
        assert read_bytes(a) == read_bytes(b)
    assert read_bytes(os.path.join(out, "shards.json")) == \
        read_bytes(tmp_path / "again/shards.json")


def test_shuffle_is_seeded_and_mixes_classes(tmp_path):
    src = str(tmp_path / "src")
    for cls in ("a", "b", "c"):
        for i in range(30):
            lib.write_file(_j(src, "%s/%03d.x" % (cls, i)), b"%d" % i)

    def run(name, *opts):
        pack(src, str(tmp_path / name / "s-%d.tar"), "--max-count", "10",
             *opts)
        return [file_samples(p) for p in shards_in(str(tmp_path / name))]

    plain = run("plain")
    assert sum(plain, []) == sorted(sum(plain, []))
    assert all(len({k[0] for k in s}) == 1 for s in plain)
    one = run("one", "--shuffle=7")
    again = run("again", "--shuffle=7")
    other = run("other", "--shuffle=8")
    assert one == again and one != other and one != plain
    assert sorted(sum(one, [])) == sum(plain, [])
    assert all(len({k[0] for k in s}) > 1 for s in one)
    assert run("default", "--shuffle") == run("zero", "--shuffle=0")


# --------------------------------------------------- odd files and links

def test_special_files_are_skipped_and_counted(tmp_path):
    src = str(tmp_path / "src")
    lib.write_file(_j(src, "a.txt"), b"a")
    os.mkfifo(_j(src, "fifo"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(src, "sock"))
    try:
        r = pack(src, str(tmp_path / "o/s-%d.tar"))
    finally:
        sock.close()
    assert summary(r)["skipped"] == 2
    assert "fifo: special file, skipped" in r.stderr
    assert "sock: special file, skipped" in r.stderr
    assert [m.name for m in members(str(tmp_path / "o/s-0.tar"))] == ["a.txt"]


def test_follow_symlinks(tmp_path):
    src = str(tmp_path / "src")
    lib.write_file(_j(src, "d/file.txt"), b"target")
    os.symlink("d/file.txt", _j(src, "link.txt"))
    os.symlink("d", _j(src, "dlink"))
    os.symlink("nowhere", _j(src, "dangling"))
    os.symlink("..", _j(src, "d/up"))
    r = pack(src, str(tmp_path / "o/s-%d.tar"), "-L")
    got = {m.name: m for m in members(str(tmp_path / "o/s-0.tar"))}
    assert got["link.txt"].isfile() and got["link.txt"].size == 6
    assert got["dlink/file.txt"].isfile() and got["dlink"].isdir()
    assert got["dangling"].issym()
    assert "dangling: cannot follow symlink (No such file or directory), " \
        "stored as a link" in r.stderr
    assert "leads back to" in r.stderr and "d/up" not in got
    pack(src, str(tmp_path / "p/s-%d.tar"))
    got = {m.name: m for m in members(str(tmp_path / "p/s-0.tar"))}
    assert got["link.txt"].linkname == "d/file.txt" and got["d/up"].issym()


# ------------------------------------------------- interruption, --resume

def assert_index_valid(out):
    """The index shardfs-pack wrote is the one shardfs-index accepts for
    the shards (and so the one a mount loads instead of scanning)."""
    r = lib.run_cmd([lib.binary("shardfs-index"), "--check", out])
    assert r.returncode == 0, r


def test_pack_writes_the_index_a_mount_loads(tmp_path):
    src = build_samples(str(tmp_path / "src"), 20)
    out = str(tmp_path / "out")
    pack(src, out + "/s-%03d.tar", "-c", "5")
    assert_index_valid(out)
    with lib.mounted(out, tmp_path / "mnt", "-o", "loglevel=debug") as proc:
        assert "index file %s/.s-000.tar.shardfs-index: loaded" % out in proc.stderr
    pack(src, str(tmp_path / "none") + "/s-%03d.tar", "-c", "5", "--no-index")
    assert not [n for n in os.listdir(tmp_path / "none") if n.endswith("-index")]


def test_interrupted_run_then_resume(tmp_path):
    src = build_samples(str(tmp_path / "src"), 48, sizes=(MIB,))
    ref = str(tmp_path / "ref")
    pack(src, ref + "/s-%03d.tar", "--max-size", "3M")
    out = str(tmp_path / "out")
    argv = [PACK, "-q", "-j", "1", "--max-size", "3M", src,
            out + "/s-%03d.tar"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None and not (
                os.path.isdir(out) and any(n.endswith(".tar")
                                           for n in os.listdir(out))):
            time.sleep(0.0005)
        proc.send_signal(signal.SIGSTOP)
        assert proc.poll() is None, "finished before it could be interrupted"
        proc.kill()
    finally:
        proc.kill()
        proc.wait()
    done = shards_in(out)
    assert 1 <= len(done) < len(shards_in(ref))
    for shard in done:          # complete, never truncated
        twin = os.path.join(ref, os.path.basename(shard))
        assert read_bytes(shard) == read_bytes(twin)
    assert not os.path.exists(os.path.join(out, "shards.json"))
    r = pack(src, out + "/s-%03d.tar", "--max-size", "3M", "--resume")
    assert "(%d kept from an earlier run)" % len(done) in r.stdout
    assert sorted(os.listdir(out)) == sorted(os.listdir(ref))
    for name in os.listdir(ref):
        if name.endswith(".shardfs-index"):
            continue    # records the shards' times: checked for validity
        assert read_bytes(os.path.join(out, name)) == \
            read_bytes(os.path.join(ref, name))
    assert_index_valid(out)


def test_full_disk_leaves_only_complete_shards(tmp_path):
    src = build_samples(str(tmp_path / "src"), 40, sizes=(100_000,))
    ref = str(tmp_path / "ref")
    pack(src, ref + "/s-%03d.tar", "--max-size", "1M")
    small = str(tmp_path / "small")
    os.makedirs(small)
    if lib.run_cmd(["mount", "-t", "tmpfs", "-o", "size=3M", "tmpfs",
                    small]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        r = pack(src, small + "/s-%03d.tar", "--max-size", "1M", "-j", "2",
                 check=False)
        names = os.listdir(small)
        done = {n: read_bytes(os.path.join(small, n)) for n in names}
    finally:
        lib.run_cmd(["umount", small])
    assert r.returncode == 1
    assert re.search(r"s-\d{3}\.tar\.part: write failed at byte \d+: "
                     r"No space left on device", r.stderr), r
    assert names and all(n.endswith(".tar") for n in names)
    for name, data in done.items():
        assert data == read_bytes(os.path.join(ref, name))


def test_resume_refuses_a_changed_plan(tmp_path):
    src = build_samples(str(tmp_path / "src"), 8)
    pack(src, str(tmp_path / "o/s-%d.tar"), "--max-count", "2")
    lib.write_file(_j(src, "k/0000.p0"), b"now shorter")
    r = pack(src, str(tmp_path / "o/s-%d.tar"), "--max-count", "2",
             "--resume", check=False)
    assert r.returncode == 1
    assert "s-0.tar" in r.stderr and "without --resume" in r.stderr


def test_stale_shard_of_a_larger_run_is_reported(tmp_path):
    src = build_samples(str(tmp_path / "src"), 8)
    pack(src, str(tmp_path / "o/s-%d.tar"), "--max-count", "2")
    r = pack(src, str(tmp_path / "o/s-%d.tar"), "--max-count", "4")
    assert "s-2.tar: left by an earlier run" in r.stderr


# ----------------------------------------------------- patterns and errors

def test_output_patterns(tmp_path):
    src = build_samples(str(tmp_path / "src"), 5)
    pack(src, str(tmp_path / "a/shard-{000010..000099}.tar"), "-c", "2")
    assert sorted(os.listdir(tmp_path / "a")) == [
        ".shard-000010.tar.shardfs-index",
        "shard-000010.tar", "shard-000011.tar", "shard-000012.tar",
        "shards.json"]
    pack(src, str(tmp_path / "b/x%%-%d.tar"), "-c", "2")
    assert sorted(os.listdir(tmp_path / "b"))[:4] == [
        ".x%-0.tar.shardfs-index", "shards.json", "x%-0.tar", "x%-1.tar"]
    r = pack(src, str(tmp_path / "c/s-{0..1}.tar"), "-c", "2", check=False)
    assert r.returncode == 1 and "names for 2 shards" in r.stderr
    assert not os.path.exists(tmp_path / "c"), "a refused run created its output"


@pytest.mark.parametrize("args,status,message", [
    ([], 2, "Usage"),
    (["{src}", "{tmp}/o/s.tar"], 2, "no shard number"),
    (["{src}", "{tmp}/o/s-%5d.tar"], 2, "malformed shard number"),
    (["{src}", "{tmp}/o-%d/s.tar"], 2, "must be in the file name"),
    (["{tmp}/missing", "{tmp}/o/s-%d.tar"], 1, "missing"),
    (["{src}", "{src}/out/s-%d.tar"], 1, "inside SRC_DIR"),
    (["-j", "0", "{src}", "{tmp}/o/s-%d.tar"], 2, "--jobs"),
    (["--shuffle=x", "{src}", "{tmp}/o/s-%d.tar"], 2, "--shuffle"),
])
def test_usage_errors(tmp_path, args, status, message):
    src = build_samples(str(tmp_path / "src"), 1)
    argv = [a.format(src=src, tmp=tmp_path) for a in args]
    r = lib.run_cmd([PACK, *argv])
    assert r.returncode == status and message in r.stderr + r.stdout, r


def test_refused_runs_leave_the_disk_as_it_was(tmp_path):
    """Asked to write inside its own source tree, shardfs-pack refused but
    had created the output directory (and a later --resume then failed
    with a size mismatch): every check comes before anything is made."""
    src = build_samples(str(tmp_path / "src"), 3)
    before = sorted(os.listdir(src))
    r = lib.run_cmd([PACK, src, os.path.join(src, "out/deeper/s-%d.tar")])
    assert r.returncode == 1, r
    assert ("%s: the output directory is inside SRC_DIR %s"
            % (os.path.join(src, "out/deeper"), src)) in r.stderr, r.stderr
    assert sorted(os.listdir(src)) == before
    r = lib.run_cmd([PACK, src, str(tmp_path / "o/s-{0..0}.tar"), "-c", "1"])
    assert r.returncode == 1 and "OUT_PATTERN has names for 1 shards" in r.stderr, r
    assert not os.path.exists(tmp_path / "o")
    pack(src, str(tmp_path / "o/s-%d.tar"), "-c", "1")
    r = lib.run_cmd([PACK, src, str(tmp_path / "o/s-%d.tar"), "-c", "1", "--resume"])
    assert r.returncode == 0, r


# ------------------------------------------- one sample key, pack and mount

# Awkward names and the sample each belongs to (WebDataset's key, with a
# leading dot part of the name: path_sample_key_len() in src/path.c).
AWKWARD_SAMPLES = {
    "plain": ["plain.jpg", "plain.cls"],
    "multi": ["multi.seg.png", "multi.tar.gz", "multi.cls"],
    "noext": ["noext", "noext.cls"],
    ".hidden": [".hidden.txt", ".hidden.cls"],
    "sub/.x": ["sub/.x.txt", "sub/.x.cls", "sub/.x.a.b"],
    "sub/.": ["sub/..y.jpg", "sub/..cls"],
    "dot.dir/x": ["dot.dir/x.y.jpg", "dot.dir/x.cls"],
    "dot.dir/.d.e/z": ["dot.dir/.d.e/z.jpg", "dot.dir/.d.e/z.cls"],
    "trail": ["trail.", "trail.cls"],
}


def test_pack_and_classes_layout_group_awkward_names_alike(tmp_path):
    """shardfs-pack, the classes layout and user.shardfs.key compute one
    sample key: one sample per shard (--max-count 1), each labelled by
    its .cls member, lands whole under its label, and every member's key
    attribute names the sample its shard holds."""
    src = str(tmp_path / "src")
    labels = {}
    for n, (key, names) in enumerate(sorted(AWKWARD_SAMPLES.items())):
        labels[key] = "class%d" % n
        for name in names:
            data = (labels[key] if name.endswith(".cls") else name).encode()
            lib.write_file(_j(src, name), data)
    out = str(tmp_path / "out")
    pack(src, _j(out, "s-%03d.tar"), "--max-count", "1", "--no-index")
    packed = {}
    for shard in shards_in(out):
        files = [m.name for m in members(shard) if m.isfile()]
        keys = {k for k, names in AWKWARD_SAMPLES.items() if files[0] in names}
        assert len(keys) == 1, (shard, files)
        packed[keys.pop()] = sorted(files)
    assert packed == {k: sorted(v) for k, v in AWKWARD_SAMPLES.items()}

    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(shards_in(out)), mnt):
        for key, names in AWKWARD_SAMPLES.items():
            for name in names:
                assert os.getxattr(mnt / name, "user.shardfs.key") == \
                    key.encode(), name
    with lib.mounted(",".join(shards_in(out)), mnt, "-o", "layout=classes"):
        assert sorted(os.listdir(mnt)) == sorted(labels.values())
        for key, names in AWKWARD_SAMPLES.items():
            for name in names:
                path = mnt / labels[key] / name
                assert path.is_file(), path
                assert os.getxattr(path, "user.shardfs.key") == \
                    (labels[key] + "/" + key).encode(), path


# ------------------------------------------------------------- --compress

@pytest.mark.timeout(180)
@pytest.mark.parametrize("how,suffix,tool", [("gzip", ".tar.gz", "gzip"),
                                             ("zstd:5", ".tar.zst", "zstd")])
def test_compress_round_trip(packed, tmp_path, how, suffix, tool):
    """--compress: shards that gzip -d / zstd -d and GNU tar read as usual,
    one member or frame per MiB, whose index is there before the first
    mount (which then decodes nothing) and whose mount equals the tree."""
    src, _, _ = packed
    out = tmp_path / "out"
    r = pack(src, out / ("shard-%06d" + suffix), "--max-size", "4M", "--exact-mtime",
             "--compress=" + how)
    shards = sorted(str(out / n) for n in os.listdir(out) if n.endswith(suffix))
    assert len(shards) > 1 and summary(r)["shards"] == len(shards)
    for s in shards:
        d = subprocess.run([tool, "-dc", s], stdout=subprocess.PIPE, check=True).stdout
        assert tarfile.open(fileobj=io.BytesIO(d)).getmembers()
    ref = tmp_path / "ref"
    os.makedirs(ref)
    for s in shards:
        assert extract_gnu_tar(s, str(ref)).returncode == 0
    log = lib.run_cmd([lib.binary("shardfs-index"), "-o", "loglevel=debug",
                       "-o", "index_mode=require", str(out)]).stderr
    assert "loaded" in log and "decoded for its seek table" not in log, log
    with lib.mounted(out, str(tmp_path / "mnt"), "-o", "loglevel=debug") as m:
        assert "decoded for its seek table" not in m.stderr, m.stderr
        lib.compare_trees(str(tmp_path / "mnt"), src, NEVER,
                          ref_snapshot=source_snapshot(src))
    # a member or frame per MiB of tar: as many seek points
    rebuilt = lib.run_cmd([lib.binary("shardfs-index"), "-o", "loglevel=debug",
                           "-o", "index_mode=rebuild", str(out)]).stderr
    points = sum(int(n) for n in re.findall(r"(\d+) points", rebuilt))
    tar_bytes = sum(int(n) for n in re.findall(r"seek table: (\d+) bytes", rebuilt))
    assert points >= tar_bytes // (1 << 20) - len(shards), rebuilt
    v = lib.run_cmd([lib.binary("shardfs-index"), "--verify", str(out)])
    assert v.returncode == 0 and " 0 differences" in v.stderr, v


def pread_bytes(strace_log):
    """Bytes a process read with pread64, from strace -e trace=pread64."""
    return sum(int(m.group(1)) for m in
               re.finditer(r"pread64\(.*\) = (\d+)$", open(strace_log).read(), re.M))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how,suffix", [("gzip", ".tar.gz"), ("zstd", ".tar.zst")])
def test_compress_index_in_the_same_pass(packed, tmp_path, how, suffix):
    """--compress records the member or frame starts while it writes and
    gives them to the index build: the shards are not decoded a second
    time to find them (the build reads each shard's compressed bytes about
    once, for the tar headers, where finding the points as a mount does
    would read them all once more); the index has the points a mount
    would find; a mount maps it, decodes nothing to find them, and serves
    every member as GNU tar extracts it."""
    src, _, _ = packed
    out = tmp_path / "out"
    st = tmp_path / "pack.strace"
    # LeakSanitizer (ASan builds) cannot run under ptrace
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
               ":detect_leaks=0")
    r = lib.run_cmd(["strace", "-f", "-qq", "-e", "trace=pread64", "-e", "signal=none",
                     "-o", str(st), PACK, "--compress=" + how, "--max-size", "4M",
                     str(src), str(out / ("shard-%06d" + suffix))], env=env)
    assert r.returncode == 0, r
    shards = sorted(str(out / n) for n in os.listdir(out) if n.endswith(suffix))
    stored = sum(os.path.getsize(s) for s in shards)
    assert len(shards) > 1 and 0 < pread_bytes(st) < stored * 3 // 2, (pread_bytes(st), stored)
    index = sorted(n for n in os.listdir(out) if "shardfs-index" in n)
    written = {n: open(out / n, "rb").read() for n in index}
    log = lib.run_cmd([lib.binary("shardfs-index"), "-o", "loglevel=debug",
                       "-o", "index_mode=rebuild", str(out)]).stderr
    assert len(re.findall(how + r" decoded for its seek table", log)) == len(shards), log
    assert {n: open(out / n, "rb").read() for n in index} == written
    ref = tmp_path / "ref"
    os.makedirs(ref)
    for s in shards:
        assert extract_gnu_tar(s, str(ref)).returncode == 0
    mnt = tmp_path / "mnt"
    with lib.mounted(out, str(mnt), "-o", "loglevel=debug") as m:
        assert re.search(r"index file .*: loaded", m.stderr), m.stderr
        assert "decoded for its seek table" not in m.stderr, m.stderr
        lib.compare_trees(str(mnt), str(ref), NEVER)


def test_compress_refuses_bad_values_and_resume(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    for bad in ("xz", "gzip:0", "gzip:10", "zstd:x", "gzip:", ""):
        r = pack(tmp_path / "src", tmp_path / "o-%d.tar.gz", "--compress=" + bad, check=False)
        assert r.returncode != 0 and "--compress" in r.stderr, (bad, r)
    r = pack(tmp_path / "src", tmp_path / "o-%d.tar.gz", "--compress=gzip", "--resume",
             check=False)
    assert r.returncode != 0 and "--resume cannot be used with --compress" in r.stderr, r
