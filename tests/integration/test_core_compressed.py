# SPDX-License-Identifier: Apache-2.0
"""Compressed shards, end to end: real compressors, real mounts.

One tar of about 24 MB (small and large members, compressible text and
incompressible bytes) is compressed with every tool a data set may have
been made with: gzip, pigz, pigz --independent, bgzip (BGZF, 64 KiB
members), and gzip members concatenated by hand.  Each must mount, and
every member must equal GNU tar's extraction of the same compressed file,
read whole, and read at random offsets and sizes in random order (so that
reads start and end on both sides of every seek point).

- a remount maps the index and decodes nothing (the seek points are in
  the index file), and the index stays under 1 % of the compressed size;
- the directory form picks up .tar.gz and .tgz next to .tar;
- a gzip member whose bytes are damaged fails the tar members it covers
  with EIO (logged with the shard and the compressed offset) and serves
  every other member right;
- a .tar.zst in the zstd seekable format is served from its own seek
  table (nothing decoded to find the frames); a wrong table is ignored
  with a warning naming the shard and offset, and one whose frames do not
  state their sizes is not trusted (a lie would shift the stream);
- xz, bzip2, lz4, compress and raw lzma are told by their content, whatever the
  file is called: refused without -o cache_dir (saying so), served from
  the decoded cache with it;
- -o cache_dir serves every byte right, also while it drops spans.
"""
import errno
import os
import pathlib
import random
import re
import shutil
import struct
import subprocess
import tarfile

import pytest

import shardfs_testlib as lib

INDEX_TOOL = lib.binary("shardfs-index")
# bytes of gzip output that hold one member's data, for the damage test
CHUNK = 256 * 1024
DECODED_RE = re.compile(r"gzip decoded for its seek table")
DAMAGE_RE = re.compile(r"(?P<path>\S+): compressed offset (?P<coff>\d+): (gzip member|zstd "
                       r"frame) does not decode; offsets (?P<lo>\d+)-(?P<hi>\d+) of the tar")


def have(tool):
    return shutil.which(tool) is not None


def text_bytes(seed, n):
    """Compressible bytes: numbered lines of words (drawn 12 lines at a
    time: one rnd.choice per word was most of the corpus's making)."""
    rnd = random.Random(seed)
    words = [b"shard", b"sample", b"tensor", b"label", b"image", b"caption",
             b"the", b"of", b"and", b"random", b"access", b"window"]
    out = bytearray()
    line = 0
    while len(out) < n:
        picks = rnd.choices(words, k=12 * 12)
        for i in range(0, len(picks), 12):
            out += b"%08d " % line + b" ".join(picks[i:i + 12]) + b"\n"
            line += 1
    return bytes(out[:n])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The tar and its extraction by GNU tar: (dir, tar path, members)."""
    d = tmp_path_factory.mktemp("compressed")
    src = d / "src"
    rnd = random.Random(15)
    members = []
    for i in range(40):
        big = i % 8 == 3
        size = rnd.randrange(1 << 20, 3 << 20) if big else rnd.randrange(0, 100_000)
        data = text_bytes(i, size) if i % 2 else lib.deterministic_bytes(("c", i), size)
        name = "s%03d/%s" % (i // 10, "%04d.%s" % (i, "txt" if i % 2 else "bin"))
        lib.write_file(str(src / name), data)
        members.append(name)
    lib.finish_dirs(str(src))
    tar = d / "plain.tar"
    lib.gnu_tar_create(tar, src, sorted(members), "gnu")
    _CORPUS_DIRS.add(os.path.realpath(d))
    return d, tar, sorted(members)


# zstd writes a frame's size in its header only when told (from a pipe)
SPLITTERS = {"gzip": ["gzip", "-c", "-n"], "zstd": ["zstd", "-q", "-c", "--stream-size=%d"]}


def compressed(tool, data):
    argv = [a % len(data) if "%d" in a else a for a in SPLITTERS[tool]]
    return subprocess.run(argv, input=data, stdout=subprocess.PIPE, check=True).stdout


def split_compress(tar, out, chunk, tool="gzip", sizes=None):
    """One gzip member or zstd frame per CHUNK bytes of the tar,
    concatenated; the length of each is appended to SIZES when given."""
    data = open(tar, "rb").read()
    with open(out, "wb") as f:
        for i in range(0, len(data), chunk):
            piece = compressed(tool, data[i:i + chunk])
            f.write(piece)
            if sizes is not None:
                sizes.append(len(piece))
    return out


# "zstd-wlog23": the 8 MiB window of level 19 (what a decoder sees of a
# high level) at level 3's cost: -19 itself took 20 s of the suite
COMPRESSORS = {
    "zstd": ["zstd", "-q", "-c"],
    "zstd-wlog23": ["zstd", "-q", "-c", "-3", "--zstd=wlog=23"],
    "pzstd": ["pzstd", "-q", "-c", "-p", "2"],
    "gzip": ["gzip", "-c", "-n"],
    "gzip-1": ["gzip", "-c", "-1"],
    "pigz": ["pigz", "-c", "-p", "2"],
    "pigz-independent": ["pigz", "-c", "-p", "2", "--independent"],
    "bgzip": ["bgzip", "-c"],
}


def compress(corpus_dir, tar, kind):
    """The corpus compressed as KIND, made once for the module: the tests
    that share a kind only mount it with index_mode=off (nothing is
    written beside it) or copy it."""
    zstd = "zst" in kind or kind == "frames"
    # GNU tar, the reference, picks its decompressor by the name
    out = corpus_dir / (kind + (".tar.zst" if zstd else ".tar.gz"))
    if out not in _COMPRESSED:
        _compress(out, tar, kind)
        _COMPRESSED.add(out)
    return out


_COMPRESSED = set()


def _compress(out, tar, kind):
    if kind in ("members", "frames"):
        return split_compress(tar, out, 3 << 20, "gzip" if kind == "members" else "zstd")
    argv = COMPRESSORS[kind]
    if not have(argv[0]):
        pytest.skip("%s is not installed (scripts/install-deps.sh)" % argv[0])
    with open(tar, "rb") as fin, open(out, "wb") as fout:
        subprocess.run(argv, stdin=fin, stdout=fout, check=True)
    return out


def reference(tmp_path, shard):
    """GNU tar's extraction of the compressed file itself: (ref, start_ns).
    A file of the corpus's directory (the plain tar, a compress() output)
    is extracted once for the module, beside it; the tests only read the
    extraction."""
    shard = os.path.realpath(shard)
    key = (shard, os.stat(shard).st_mtime_ns)
    if key in _REFERENCES:
        return _REFERENCES[key]
    shared = os.path.dirname(shard) in _CORPUS_DIRS
    ref = pathlib.Path(shard + ".ref") if shared else tmp_path / "ref"
    start_ns, results = lib.extract_reference([shard], ref)
    assert results[0].returncode == 0, results[0]
    if shared:
        _REFERENCES[key] = ref, start_ns
    return ref, start_ns


_REFERENCES = {}
_CORPUS_DIRS = set()


@pytest.mark.parametrize("kind", sorted(COMPRESSORS) + ["members", "frames"])
def test_members_match_gnu_tar(tmp_path, corpus, kind):
    corpus_dir, tar, members = corpus
    shard = compress(corpus_dir, tar, kind)
    ref, start_ns = reference(tmp_path, shard)
    mnt = tmp_path / "mnt"
    rnd = random.Random(kind)
    with lib.mounted(shard, mnt, "-o", "index_mode=off"):
        lib.compare_trees(mnt, ref, start_ns)
        for name in members:
            want = open(ref / name, "rb").read()
            assert lib.read_in_random_pieces(mnt / name, len(want), rnd) == want, name
        # tar -xO of the compressed file, member by member, for a few
        for name in rnd.sample(members, 4):
            out = subprocess.run(["tar", "-xOf", str(shard), name],
                                 stdout=subprocess.PIPE, check=True).stdout
            assert open(mnt / name, "rb").read() == out, name
    expect_verified(shard, len(members))


def verify(shard, *options):
    return lib.run_cmd([INDEX_TOOL, *options, "--verify", str(shard)])


def expect_verified(shard, files):
    """shardfs-index --verify: libarchive agrees on every file."""
    r = verify(shard, "-o", "index_mode=off")
    assert r.returncode == 0 and r.stdout == "", r
    assert "verified %d files in 1 shards" % files in r.stderr, r
    assert " 0 differences" in r.stderr, r


@pytest.mark.parametrize("kind,size", [("gzip", "64M"), ("gzip", "16M"), ("zstd", "64M"),
                                       ("members", "12M")])
def test_span_cache(tmp_path, corpus, kind, size):
    """-o cache_dir: every member right, read at random and in random order
    twice, with a cache that holds the shard and with one that keeps
    dropping spans (16M, 12M: a quarter of it is the largest span taken)."""
    corpus_dir, tar, members = corpus
    shard = compress(corpus_dir, tar, kind)
    ref, start_ns = reference(tmp_path, shard)
    cache = tmp_path / "cache"
    cache.mkdir()
    rnd = random.Random(kind + size)
    with lib.mounted(shard, tmp_path / "mnt", "-o", "index_mode=off,cache_dir=%s,cache_size=%s"
                     % (cache, size)):
        for _ in range(2):
            for name in rnd.sample(members, len(members)):
                want = open(ref / name, "rb").read()
                assert lib.read_in_random_pieces(tmp_path / "mnt" / name, len(want), rnd) == want
        # the span files are unnamed: nothing to see, nothing left (the
        # remote chunk cache, which shares cache_dir, may make directories)
        assert cache_files(cache) == []
    assert cache_files(cache) == []


def cache_files(d):
    return [os.path.join(p, f) for p, _, files in os.walk(d) for f in files]


def test_cache_options_checked(tmp_path, corpus):
    corpus_dir, tar, members = corpus
    shard = compress(corpus_dir, tar, "gzip")
    os.makedirs(tmp_path / "mnt")
    for opts, why in (("cache_dir=/nonexistent/dir", "cache_dir /nonexistent/dir"),
                      ("cache_dir=%s,cache_size=lots" % tmp_path, "bad cache_size"),
                      ("cache_size=1G", "bad cache_size")):
        r, was_mounted, daemon_left = lib.run_shardfs_expect_failure(
            shard, tmp_path / "mnt", "-o", opts)
        assert r.returncode != 0 and why in r.stderr, (opts, r)
        assert not was_mounted and not daemon_left


def mount_log(shard, mnt, *options):
    """stderr of a debug-level mount that is unmounted right away."""
    with lib.mounted(shard, mnt, "-o", "loglevel=debug", *options) as r:
        assert os.listdir(mnt)
    return r.stderr


def test_remount_decodes_nothing(tmp_path, corpus):
    corpus_dir, tar, members = corpus
    d = tmp_path / "set"
    d.mkdir()
    shard = d / "data.tar.gz"
    shutil.copyfile(compress(corpus_dir, tar, "gzip"), shard)
    first = mount_log(shard, tmp_path / "mnt")
    assert DECODED_RE.search(first), first
    assert re.search(r"index file .*: built, saved", first), first
    second = mount_log(shard, tmp_path / "mnt")
    assert re.search(r"index file .*: loaded", second), second
    assert not DECODED_RE.search(second), second
    index = d / ".data.tar.gz.shardfs-index"
    # seek points and windows, plus a few KiB for 40 members' entries
    assert os.path.getsize(index) <= os.path.getsize(shard) // 100 + 16384
    ref, start_ns = reference(tmp_path, shard)
    with lib.mounted(shard, tmp_path / "mnt"):
        lib.compare_trees(tmp_path / "mnt", ref, start_ns)


def test_directory_form_picks_up_compressed(tmp_path, corpus):
    corpus_dir, tar, members = corpus
    d = tmp_path / "set"
    d.mkdir()
    gz = compress(corpus_dir, tar, "gzip")
    zst = compress(corpus_dir, tar, "frames")
    for name, src in (("a.tar", tar), ("b.tar.gz", gz), ("c.tgz", gz), ("d.tar.zst", zst)):
        # shards with the same members: the last one wins
        shutil.copyfile(src, d / name)
    (d / "notes.txt").write_text("not a shard\n")
    with lib.mounted(d, tmp_path / "mnt") as r:
        assert lib.parse_summary(r.stderr)["shards"] == 4
        assert lib.parse_summary(r.stderr)["duplicates"] == 3 * len(members)
        assert "compressed shards: 2 gzip, 1 zstd\n" in r.stderr, r.stderr
        ref, start_ns = reference(tmp_path, gz)
        lib.compare_trees(tmp_path / "mnt", ref, start_ns)


@pytest.mark.parametrize("tool", sorted(SPLITTERS))
def test_damaged_member_fails_only_what_it_covers(tmp_path, corpus, tool):
    corpus_dir, tar, members = corpus
    offsets = {m.name: (m.offset, m.offset_data, m.size)
               for m in tarfile.open(tar).getmembers() if m.isfile()}
    # a gzip member wholly inside the data of a large tar member
    big = max(offsets, key=lambda n: offsets[n][2])
    _, data_at, size = offsets[big]
    k = data_at // CHUNK + 1
    assert (k + 1) * CHUNK <= data_at + size
    sizes = []
    shard = split_compress(tar, tmp_path / ("damaged.tar." + tool[:2].replace("zs", "zst")),
                           CHUNK, tool, sizes)
    raw = bytearray(open(shard, "rb").read())
    coff = sum(sizes[:k])
    for i in range(32):
        raw[coff + 2000 + i] ^= 0x5A
    open(shard, "wb").write(raw)
    ref, start_ns = reference(tmp_path, tar)
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt, "-o", "index_mode=off") as r:
        m = DAMAGE_RE.search(r.stderr)
        assert m and m.group("path") == str(shard), r.stderr
        assert int(m.group("coff")) >= coff
        assert (int(m.group("lo")), int(m.group("hi"))) == (k * CHUNK, (k + 1) * CHUNK)
        for name in members:
            want = open(ref / name, "rb").read()
            if name != big:
                assert open(mnt / name, "rb").read() == want, name
                continue
            lo = k * CHUNK - data_at
            with open(mnt / name, "rb", buffering=0) as f:
                assert os.pread(f.fileno(), lo, 0) == want[:lo]
                assert os.pread(f.fileno(), size - lo - CHUNK, lo + CHUNK) == \
                    want[lo + CHUNK:]
                for at, n in ((lo, 1), (lo + CHUNK - 1, 1), (lo + 100, 4096)):
                    with pytest.raises(OSError) as e:
                        os.pread(f.fileno(), n, at)
                    assert e.value.errno == errno.EIO
                # reads that start before the damage stop short of it, or fail
                for at, n in ((lo - 10, 20), (0, size)):
                    try:
                        got = os.pread(f.fileno(), n, at)
                    except OSError as e:
                        assert e.errno == errno.EIO
                    else:
                        assert got == want[at:lo], (at, n, len(got))
    # libarchive cannot read the damaged member either: --verify says so,
    # naming the shard and the member's header offset
    r = verify(shard, "-o", "index_mode=off")
    assert r.returncode == 1, r
    header = tarfile.open(tar).getmember(big).offset
    assert "%s: offset %d: %s: " % (shard, header, big) in r.stdout, r


# the zstd seekable format (zstd contrib/seekable_format)
SEEKABLE_FRAME = 1 << 20
SEEK_TABLE_RE = re.compile(r"zstd read from the stream its seek table: (\d+) bytes, (\d+) points")
TABLE_WRONG_RE = re.compile(r"(?P<path>\S+): compressed offset (?P<off>\d+): zstd seek table "
                            r"ignored \((?P<why>[^)]*)\): scanning the frames instead")


def seekable_frames(tar, sized):
    """The tar in zstd frames of SEEKABLE_FRAME bytes, each with a content
    checksum and, when @sized, its content size in the header (zstd writes
    it only when told, as the seekable library does not): [(frame, size)].
    Made once for the module (the tests build new lists from it)."""
    key = (os.fspath(tar), sized)
    if key not in _FRAMES:
        _FRAMES[key] = tuple(_seekable_frames(tar, sized))
    return list(_FRAMES[key])


_FRAMES = {}


def _seekable_frames(tar, sized):
    data = open(tar, "rb").read()
    argv = ["zstd", "-q", "-c", "--check"]
    frames = []
    for i in range(0, len(data), SEEKABLE_FRAME):
        chunk = data[i:i + SEEKABLE_FRAME]
        extra = ["--stream-size=%d" % len(chunk)] if sized else []
        frames.append((subprocess.run(argv + extra, input=chunk, stdout=subprocess.PIPE,
                                      check=True).stdout, len(chunk)))
    return frames


def seek_table(entries, checksums=True, frames=None, descriptor=None, magic=0x184D2A5E):
    """A seek table frame for [(compressed, decompressed, checksum)]."""
    body = b"".join(struct.pack("<II", c, d) + (struct.pack("<I", x) if checksums else b"")
                    for c, d, x in entries)
    desc = (0x80 if checksums else 0) if descriptor is None else descriptor
    body += struct.pack("<IBI", len(entries) if frames is None else frames, desc, 0x8F92EAB1)
    return struct.pack("<II", magic, len(body)) + body


def write_seekable(path, frames, table):
    with open(path, "wb") as f:
        for frame, _ in frames:
            f.write(frame)
        f.write(table)
    return path


def entries_of(frames):
    # a frame's content checksum (--check) is the low 32 bits of its XXH64:
    # the seek table's checksum field
    return [(len(f), n, struct.unpack("<I", f[-4:])[0]) for f, n in frames]


@pytest.mark.parametrize("checksums", [True, False])
def test_zstd_seekable_format(tmp_path, corpus, checksums):
    """A seekable-format .tar.zst: its frames are the seek points, read
    from its table without decoding; every member equals tar -xO, read
    whole and at random across frame ends; a remount uses the index."""
    corpus_dir, tar, members = corpus
    frames = seekable_frames(tar, True)
    d = tmp_path / "set"
    d.mkdir()
    shard = write_seekable(d / "seekable.tar.zst", frames,
                           seek_table(entries_of(frames), checksums))
    log = mount_log(shard, tmp_path / "mnt")
    m = SEEK_TABLE_RE.search(log)
    assert m, log
    assert (int(m.group(1)), int(m.group(2))) == (os.path.getsize(tar), len(frames)), log
    assert "decoded for its seek table" not in log and "ignored" not in log, log
    ref, start_ns = reference(tmp_path, shard)
    rnd = random.Random("seekable%d" % checksums)
    with lib.mounted(shard, tmp_path / "mnt", "-o", "loglevel=debug") as r:
        assert re.search(r"index file .*: loaded", r.stderr), r.stderr
        lib.compare_trees(tmp_path / "mnt", ref, start_ns)
        for name in members:
            want = open(ref / name, "rb").read()
            assert lib.read_in_random_pieces(tmp_path / "mnt" / name, len(want), rnd) == want, name
        for name in rnd.sample(members, 4):
            out = subprocess.run(["tar", "-xOf", str(shard), name],
                                 stdout=subprocess.PIPE, check=True).stdout
            assert open(tmp_path / "mnt" / name, "rb").read() == out, name
    expect_verified(shard, len(members))


def test_zstd_seekable_format_wrong_tables(tmp_path, corpus):
    """A seek table that does not fit the file is ignored with a warning
    naming the shard and the offset of what is wrong; the frames are then
    scanned and every member served right."""
    corpus_dir, tar, members = corpus
    frames = seekable_frames(tar, True)
    entries = entries_of(frames)
    data_len = sum(len(f) for f, _ in frames)
    table_at = data_len           # the skippable frame's offset
    entry_at = lambda k: table_at + 8 + 12 * k
    shorter = [(c - (k == len(entries) - 1), n, x) for k, (c, n, x) in enumerate(entries)]
    moved = [(c + (k == 3), n, x) for k, (c, n, x) in enumerate(entries)]
    # the first entry spans two frames but states the first's size: taken
    # as it is, every member after the first frame would read shifted
    merged = [(entries[0][0] + entries[1][0], entries[0][1], entries[0][2])] + entries[2:]
    past = [(c + (data_len if k == 5 else 0), n, x) for k, (c, n, x) in enumerate(entries)]
    resized = [(c, n + 512 * (k == 2) - 512 * (k == 3), x) for k, (c, n, x) in enumerate(entries)]
    empty = [(c, 0 if k == 1 else n, x) for k, (c, n, x) in enumerate(entries)]
    cases = {
        "sizes": (seek_table(entries[:-1]), "frame sizes do not add up to it", table_at),
        "shorter": (seek_table(shorter), "a frame's length is not the table's",
                    sum(len(f) for f, _ in frames[:-1])),
        "moved": (seek_table(moved), "a frame's length is not the table's",
                  sum(len(f) for f, _ in frames[:3])),
        "merged": (seek_table(merged), "a frame's length is not the table's", 0),
        "past": (seek_table(past), "frames past the table", entry_at(5)),
        "header": (seek_table(resized), "a frame's size is not the table's",
                   sum(len(f) for f, _ in frames[:2])),
        "empty": (seek_table(empty), "an entry with no frame", entry_at(1)),
        "magic": (seek_table(entries, magic=0x184D2A5F), "no skippable frame holding it",
                  table_at),
        "reserved": (seek_table(entries, descriptor=0x84), "reserved descriptor bits set",
                     None),
        "count": (seek_table(entries, frames=1 << 30), "bad number of frames", None),
    }
    ref, start_ns = reference(tmp_path, tar)
    for case, (table, why, off) in cases.items():
        shard = write_seekable(tmp_path / (case + ".tar.zst"), frames, table)
        size = os.path.getsize(shard)
        off = {"reserved": size - 5, "count": size - 9}.get(case, off)
        with lib.mounted(shard, tmp_path / "mnt", "-o", "index_mode=off,loglevel=debug") as r:
            m = TABLE_WRONG_RE.search(r.stderr)
            assert m, (case, r.stderr)
            assert (m.group("path"), int(m.group("off")), m.group("why")) == \
                (str(shard), off, why), (case, r.stderr)
            assert "zstd decoded for its seek table" in r.stderr, (case, r.stderr)
            lib.compare_trees(tmp_path / "mnt", ref, start_ns)


def test_zstd_seekable_table_unchecked(tmp_path, corpus):
    """Frames that do not state their sizes (as the seekable library
    writes them): the table cannot be checked without decoding, so the
    frames are scanned, and a table that moves 512 bytes from one frame to
    the next changes nothing served."""
    corpus_dir, tar, members = corpus
    frames = seekable_frames(tar, False)
    entries = entries_of(frames)
    k = len(frames) // 2
    lying = [(c, n - 512 * (i == k) + 512 * (i == k + 1), x)
             for i, (c, n, x) in enumerate(entries)]
    ref, start_ns = reference(tmp_path, tar)
    for name, table in (("true", entries), ("lying", lying)):
        shard = write_seekable(tmp_path / (name + ".tar.zst"), frames, seek_table(table))
        with lib.mounted(shard, tmp_path / "mnt", "-o", "index_mode=off,loglevel=debug") as r:
            assert "%s: compressed offset 0: a zstd frame does not state its size" % shard \
                in r.stderr, r.stderr
            assert "zstd decoded for its seek table" in r.stderr, r.stderr
            lib.compare_trees(tmp_path / "mnt", ref, start_ns)


WHOLE = {
    "xz": ["xz", "-T2", "-1", "-c"],
    "bzip2": ["bzip2", "-1", "-c"],
    "lz4": ["lz4", "-q", "-c"],
    "compress": ["compress", "-c"],
    # raw .lzma (lzma_alone) has no magic: told by its header
    "lzma": ["xz", "--format=lzma", "-1", "-c"],
}


@pytest.mark.parametrize("kind", sorted(WHOLE))
def test_whole_stream_formats(tmp_path, corpus, kind):
    """xz, bzip2, lz4, compress, lzma: told by content (the file is named .tar),
    refused without -o cache_dir with a message saying so, served and equal
    to GNU tar's extraction with it; --verify agrees."""
    corpus_dir, tar, members = corpus
    argv = WHOLE[kind]
    if not have(argv[0]):
        pytest.skip("%s is not installed" % argv[0])
    shard = tmp_path / "misnamed.tar"
    with open(tar, "rb") as fin, open(shard, "wb") as fout:
        subprocess.run(argv, stdin=fin, stdout=fout, check=True)
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    r, was_mounted, daemon_left = lib.run_shardfs_expect_failure(shard, mnt)
    assert r.returncode == 1 and not was_mounted and not daemon_left, r
    lib.assert_error_names(r.stderr, shard, 0)
    assert "compressed with %s" % kind in r.stderr and "cache_dir" in r.stderr, r.stderr
    ref, start_ns = reference(tmp_path, tar)
    cache = tmp_path / "cache"
    cache.mkdir()
    opts = "cache_dir=%s" % cache
    with lib.mounted(shard, mnt, "-o", opts) as m:
        assert "served from the decoded cache" in m.stderr, m.stderr
        assert "compressed shards: 1 %s; %s" % (kind, "xz, bzip2") in m.stderr, m.stderr
        lib.compare_trees(mnt, ref, start_ns)
        rnd = random.Random(kind)
        for name in rnd.sample(members, 10):
            want = open(ref / name, "rb").read()
            assert lib.read_in_random_pieces(mnt / name, len(want), rnd) == want
    v = verify(shard, "-o", opts)
    assert v.returncode == 0 and " 0 differences" in v.stderr, v
