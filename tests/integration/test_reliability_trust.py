# SPDX-License-Identifier: Apache-2.0
"""What a local user or a misbehaving server can do to a root mount
(issue 32): never make it serve wrong bytes, delete files or hang.

The disk cache (-o cache_dir):
- a directory another user owns or may write is refused at mount, with
  a message naming it and the rule it breaks;
- a chunk planted under the name the unkeyed hash of public facts gives
  (URL, ETag, size, chunk number), or a chunk whose bytes were changed and
  its plain XXH3 fixed up, is never served: names and checksums are keyed;
- eviction never leaves the tree: a subdirectory that is a symbolic link
  to another directory, and links planted as chunks, leave the files they
  point to alone;
- a FIFO at a chunk's name is a miss, not a reader blocked forever;
- a full disk (a small tmpfs) is logged once, counted, and reads go on.

A web server (a small Python one here, whose faults are switched on per
test):
- without ETags, Last-Modified is the validator: a same-size rewrite
  under the mount gives EIO or the old bytes, never new or mixed ones,
  also from a server that ignores If-Unmodified-Since; a remount serves
  the new bytes, none from the old disk-cache chunks; a server with
  neither validator is named at mount and gets no disk cache;
- a body that arrived whole is whole although the connection then
  failed (Content-Length larger than the body): no inverted range, no
  replacement; a 416 inside the object is asked again, not taken for a
  replacement;
- a server that trickles a few bytes a second (never slow enough for the
  low-speed check) gives EIO within remote_timeout x remote_attempts;
- a 200 KB response header is reported as such, not as "Out of memory".

Local shards: an index file is no more readable than the least readable
shard, the index cache directory is 0700; a gzip member followed by a
zstd frame is refused naming the shard and the compressed offset.
"""
import contextlib
import ctypes
import errno
import gzip
import http.server
import os
import re
import shutil
import stat
import struct
import subprocess
import time
from email.utils import formatdate

import pytest

import remote_servers as rs
import shardfs_testlib as lib

KIB = 1 << 10
CHUNK = 256 * KIB


# ------------------------------------------------------------ the server


class Behaviour(rs.Faults):
    """What object_server does; tests change it while it serves.  Of
    FaultProxy's Faults it uses the lock, take() and ranges."""

    def __init__(self):
        super().__init__()
        self.etag = True            # send an ETag
        self.last_modified = True   # send Last-Modified
        self.conditions = True      # honour If-Match / If-Unmodified-Since
        self.cut_last_chunk = 0     # next N GETs ending at the last byte: the
        #                             whole body, then a reset (Content-Length
        #                             larger than the body)
        self.spurious_416 = 0       # next N ranged GETs past byte 0: 416
        self.trickle = False        # bodies (but probes'): 4 KiB, then a
        #                             byte per 0.3 s
        self.big_header = 0         # bytes of an extra header on each answer
        self.stopping = False       # end trickling bodies
        self.if_unmodified_since = []  # that header of each GET past byte 0


def etag_of(st):
    return '"%x-%x"' % (int(st.st_mtime), st.st_size)


@contextlib.contextmanager
def object_server(root):
    """A ranged HTTP/1.1 server of the files in ROOT, misbehaving as its
    Behaviour says; yields (behaviour, base URL).  Unlike FaultProxy in
    front of nginx it can leave out ETag and Last-Modified, ignore the
    conditions, and break the body of one chosen request."""
    b = Behaviour()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, status, headers=(), body=b"", length=None):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            if b.big_header:
                self.send_header("X-Padding", "p" * b.big_header)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            return body

        def refused(self, st):
            """A condition the client sent that the object fails."""
            if not b.conditions:
                return False
            im = self.headers.get("If-Match")
            ius = self.headers.get("If-Unmodified-Since")
            if im is not None and im != etag_of(st):
                return True
            if ius is not None:
                from email.utils import parsedate_to_datetime
                return int(st.st_mtime) > parsedate_to_datetime(ius).timestamp()
            return False

        def do_GET(self):
            path = os.path.join(root, self.path.lstrip("/"))
            rng = self.headers.get("Range")
            with b.lock:
                b.ranges.append(rng)
                if rng and not rng.startswith("bytes=0-"):
                    b.if_unmodified_since.append(self.headers.get("If-Unmodified-Since"))
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    data = f.read()
            except OSError:
                self.wfile.write(self.answer(404))
                return
            meta = [("Content-Type", "application/x-tar")]
            if b.etag:
                meta.append(("ETag", etag_of(st)))
            if b.last_modified:
                meta.append(("Last-Modified", formatdate(st.st_mtime, usegmt=True)))
            if self.refused(st):
                self.wfile.write(self.answer(412, meta))
                return
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
            if not m:
                self.wfile.write(self.answer(200, meta, data))
                return
            lo, hi = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
            if lo > hi or (lo > 0 and b.take("spurious_416")):
                self.wfile.write(self.answer(416, meta + [
                    ("Content-Range", "bytes */%d" % len(data))]))
                return
            body = data[lo:hi + 1]
            meta.append(("Content-Range", "bytes %d-%d/%d" % (lo, hi, len(data))))
            if hi == len(data) - 1 and lo > 0 and b.take("cut_last_chunk"):
                self.wfile.write(self.answer(206, meta, body, len(body) + 1))
                self.wfile.flush()
                self.close_connection = True
                return
            if b.trickle and hi > 0:
                self.answer(206, meta, length=len(body))
                self.trickle_out(body)
                return
            self.wfile.write(self.answer(206, meta, body))

        def trickle_out(self, body):
            self.wfile.write(body[:4096])
            self.wfile.flush()
            for i in range(4096, len(body)):
                if b.stopping:
                    break
                time.sleep(0.3)
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
            self.close_connection = True

    with rs.serve(Handler) as (_, url):
        try:
            yield b, url
        finally:
            b.stopping = True     # before the server stops: no body trickles on


# ------------------------------------------------------------- helpers


def make_site(root, seed="v1", count=2, files=30):
    """COUNT shards of FILES members in ROOT; {member: bytes}, names."""
    truth, names = {}, []
    for s in range(count):
        members = []
        for i in range(files):
            name = "s%d/%03d.bin" % (s, i)
            data = lib.deterministic_bytes((seed, s, i), 2000 + (i * 7919) % 60000)
            members.append((name, data))
            truth[name] = data
        names.append("shard-%06d.tar" % s)
        lib.tar_from_members(root / names[-1], members)
    return truth, names


def spec(url, names):
    return "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)


def read_all(mnt, truth):
    """{member: bytes or errno}."""
    out = {}
    for name in truth:
        data, err = lib.read_member(os.path.join(mnt, name))
        out[name] = err if err is not None else data
    return out


def refused(shards, tmp_path, *options, env=None):
    """Run shardfs where it must fail; its Result.  Nothing may be left
    mounted or running."""
    (tmp_path / "mnt").mkdir(exist_ok=True)
    r, mounted, left = lib.run_shardfs_expect_failure(shards, tmp_path / "mnt", *options,
                                                      env=env)
    assert r.returncode != 0 and not mounted and not left, r
    return r


def log_text(path):
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture
def env(tmp_path):
    """A private index cache, so that tests do not share index files."""
    return dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))


@pytest.fixture
def site(tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    truth, names = make_site(www)
    return www, truth, names


def chunk_files(cache):
    return sorted(cache.glob("*/*/*.chunk"))


def populate(url, names, truth, cache, tmp_path, env, extra=""):
    """Mount once with CACHE and read everything: the chunks are there."""
    mnt = tmp_path / "mnt"
    with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_dir=%s%s"
                     % (cache, extra), env=env):
        assert read_all(mnt, truth) == truth
    assert chunk_files(cache)


# ------------------------------------------------------- cache_dir trust


@pytest.mark.parametrize("how", ["owned_by_nobody", "world_writable", "parent_writable"])
def test_cache_dir_another_user_controls_is_refused(site, tmp_path, env, how):
    www, truth, names = site
    cache = tmp_path / "parent" / "cache"
    cache.mkdir(parents=True, mode=0o700)
    if how == "owned_by_nobody":
        os.chown(cache, 65534, 65534)
        os.chmod(cache, 0o777)
        culprit = cache
    elif how == "world_writable":
        os.chmod(cache, 0o777)
        culprit = cache
    else:
        os.chmod(cache.parent, 0o777)
        culprit = cache.parent
    with object_server(www) as (_, url):
        r = refused(spec(url, names), tmp_path, "-o", "chunk_size=256K,cache_dir=%s" % cache,
            env=env)
    assert "cache_dir=%s" % cache in r.stderr and "not trusted" in r.stderr, r.stderr
    assert str(culprit) in r.stderr, r.stderr
    # nothing was written into it
    assert not list(cache.iterdir())


def libxxhash():
    for name in ("libxxhash.so.0", "libxxhash.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    pytest.skip("libxxhash not loadable with ctypes")


class XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def test_planted_and_doctored_chunks_are_never_served(site, tmp_path, env):
    """As issue 32 reproduced it: chunk 3 of shard-000000.tar planted at
    the name e6d2ef0 computed from public facts, with a header that was
    right for it then; and every real chunk's bytes changed, with the
    plain XXH3 of the new bytes written into its header."""
    www, truth, names = site
    xx = libxxhash()
    xx.XXH3_128bits.restype = XXH128
    xx.XXH3_64bits.restype = ctypes.c_uint64
    cache = tmp_path / "cache"
    mnt = tmp_path / "mnt"
    with object_server(www) as (_, url):
        populate(url, names, truth, cache, tmp_path, env)
        st = os.stat(www / names[0])
        name = "%s/%s" % (url, names[0])
        facts = (name.encode() + b"\0" + etag_of(st).encode() + b"\0" +
                 struct.pack("<3Q", st.st_size, CHUNK, 3))
        k = xx.XXH3_128bits(facts, len(facts))
        evil = b"E" * CHUNK
        planted = cache / ("%02x" % (k.high64 >> 56)) / ("%016x%016x.chunk" % (k.high64, k.low64))
        planted.parent.mkdir(exist_ok=True)
        planted.write_bytes(struct.pack("<5Q", 0x3143434b48435346, k.low64, k.high64,
                                        CHUNK, xx.XXH3_64bits(evil, CHUNK)) + evil)
        for f in chunk_files(cache):
            if f == planted:
                continue
            raw = bytearray(f.read_bytes())
            data = bytes(b ^ 0x5A for b in raw[40:])
            raw[40:] = data
            raw[32:40] = struct.pack("<Q", xx.XXH3_64bits(data, len(data)))
            f.write_bytes(bytes(raw))
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_dir=%s"
                         % cache, env=env):
            assert read_all(mnt, truth) == truth
            assert rs.remote_stats(mnt)["disk_hits"] == 0


def test_eviction_never_leaves_the_tree(site, tmp_path, env):
    www, truth, names = site
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victims = tmp_path / "victims"
    victims.mkdir()
    targets = [victims / "db.chunk.1", victims / ("0" * 32 + ".chunk")]
    for t in targets:
        t.write_bytes(b"root's data" * 1000)
    (cache / "00").symlink_to(victims)
    (cache / "01").mkdir(mode=0o700)
    (cache / "01" / ("1" * 32 + ".chunk")).symlink_to(targets[1])
    (cache / "01" / "notes.chunk.bak").write_bytes(b"x" * 1000)
    log = tmp_path / "shardfs.log"
    mnt = tmp_path / "mnt"
    with object_server(www) as (_, url):
        # the shards are 3x cache_size: eviction runs again and again
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_mem=1M,"
                         "cache_dir=%s,cache_size=600K,log=%s" % (cache, log),
                         env=env) as r:
            assert read_all(mnt, truth) == truth
    for t in targets:
        assert t.read_bytes() == b"root's data" * 1000, t
    assert (cache / "00").is_symlink() and (cache / "01" / "notes.chunk.bak").exists()
    assert "%s/00" % cache in r.stderr, r.stderr
    on_disk = sum(f.stat().st_size for f in chunk_files(cache) if not f.is_symlink())
    assert on_disk <= 600 * KIB


def test_fifo_at_a_chunk_name_never_hangs(site, tmp_path, env):
    www, truth, names = site
    cache = tmp_path / "cache"
    mnt = tmp_path / "mnt"
    with object_server(www) as (_, url):
        populate(url, names, truth, cache, tmp_path, env)
        fifos = chunk_files(cache)
        for f in fifos:
            f.unlink()
            os.mkfifo(f)
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_dir=%s"
                         % cache, env=env):
            reader = subprocess.Popen(
                ["cat"] + [str(mnt / n) for n in truth], stdout=subprocess.PIPE)
            try:
                out, _ = reader.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                # unblock e6d2ef0's daemon, so that it can be unmounted
                for f in fifos:
                    with contextlib.suppress(OSError):
                        os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
                reader.kill()
                reader.communicate()
                pytest.fail("a read blocked on a FIFO in cache_dir")
            assert reader.returncode == 0
            assert out == b"".join(truth.values())


def test_link_at_a_chunk_name_is_not_followed(site, tmp_path, env):
    """Each chunk moved out of the tree and a symbolic link to it left at
    its name: nothing is read through the links, nothing they point to is
    touched, the bytes come from the server."""
    www, truth, names = site
    cache = tmp_path / "cache"
    outside = tmp_path / "outside"
    outside.mkdir()
    mnt = tmp_path / "mnt"
    with object_server(www) as (_, url):
        populate(url, names, truth, cache, tmp_path, env)
        moved = {}
        for i, f in enumerate(chunk_files(cache)):
            target = outside / ("%d" % i)
            shutil.move(f, target)
            f.symlink_to(target)
            moved[target] = target.read_bytes()
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_dir=%s"
                         % cache, env=env):
            assert read_all(mnt, truth) == truth
            assert rs.remote_stats(mnt)["disk_hits"] == 0
    for target, data in moved.items():
        assert target.read_bytes() == data


def test_link_at_the_fetched_index_name_is_not_written_through(site, tmp_path, env):
    """A published index is fetched into the local index cache: a
    symbolic link left at the name it is fetched to is replaced, not
    written through, and the mount serves the set."""
    www, truth, names = site
    mnt = tmp_path / "mnt"
    with object_server(www) as (_, url):
        local, published = rs.publish_index(spec(url, names), www, env)
        fresh = dict(env, XDG_CACHE_HOME=str(tmp_path / "fresh"))
        cached = tmp_path / "fresh" / os.path.relpath(local, env["XDG_CACHE_HOME"])
        cached.parent.mkdir(parents=True, mode=0o700)
        victim = tmp_path / "victim"
        victim.write_bytes(b"not an index")
        fetched = cached.parent / (cached.name + ".fetched")
        fetched.symlink_to(victim)
        with lib.mounted(spec(url, names), mnt, env=fresh):
            assert read_all(mnt, truth) == truth
    assert victim.read_bytes() == b"not an index"
    assert cached.is_file() and not cached.is_symlink()
    assert cached.read_bytes() == (www / published.rsplit("/", 1)[1]).read_bytes()
    assert not fetched.exists() and not fetched.is_symlink()


@pytest.fixture
def small_tmpfs(tmp_path):
    path = tmp_path / "fs"
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M,mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip("cannot mount a tmpfs: %s" % r.stderr)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)])


def test_full_cache_dir_is_logged_once_counted_and_served(site, tmp_path, env,
                                                          small_tmpfs):
    www, truth, names = site
    log = tmp_path / "shardfs.log"
    mnt = tmp_path / "mnt"
    with object_server(www) as (_, url):
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_dir=%s,"
                         "cache_size=64M,log=%s" % (small_tmpfs, log), env=env) as r:
            assert read_all(mnt, truth) == truth
            stats = rs.remote_stats(mnt)
            with open(mnt / ".shardfs" / "metrics") as f:
                metrics = f.read()
    assert stats["disk_store_errors"] > 0, stats
    assert "shardfs_remote_disk_store_errors_total %d" % stats["disk_store_errors"] in metrics
    text = r.stderr + log_text(log)
    line = "cache_dir=%s: cannot store a chunk: No space left on device" % small_tmpfs
    assert text.count(line) == 1, text


# ------------------------------------------------------------ validators


def rewrite_same_size(www, names, seed):
    """Every shard rewritten: same members, same sizes, other bytes, a
    later mtime."""
    truth, _ = make_site(www, seed=seed, count=len(names))
    later = time.time() + 100
    for n in names:
        os.utime(www / n, (later, later))
    return truth


def test_same_size_rewrite_without_etag_remount_serves_new_bytes(site, tmp_path, env):
    """The disk cache is keyed by Last-Modified: the chunks of the old
    object are never served for the new one."""
    www, old, names = site
    cache = tmp_path / "cache"
    mnt = tmp_path / "mnt"
    opts = "chunk_size=256K,cache_mem=1M,cache_dir=%s" % cache
    with object_server(www) as (b, url):
        b.etag = False
        populate(url, names, old, cache, tmp_path, env, ",cache_mem=1M")
        new = rewrite_same_size(www, names, "v2")
        with lib.mounted(spec(url, names), mnt, "-o", opts, env=env):
            assert read_all(mnt, new) == new


@pytest.mark.parametrize("conditions", [True, False],
                         ids=["honours_if_unmodified_since", "ignores_it"])
def test_same_size_rewrite_without_etag_under_the_mount(site, tmp_path, env, conditions):
    """Every GET carries If-Unmodified-Since, and a Last-Modified other
    than the mount's is a replacement: EIO or the old bytes (still in
    memory), never new or mixed ones."""
    www, old, names = site
    mnt = tmp_path / "mnt"
    log = tmp_path / "shardfs.log"
    with object_server(www) as (b, url):
        b.etag = False
        b.conditions = conditions
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_mem=1M,"
                         "log=%s" % log, env=env):
            assert read_all(mnt, old) == old
            rewrite_same_size(www, names, "v2")
            lib.drop_caches()
            got = read_all(mnt, old)
            wrong = [n for n, v in got.items() if v != old[n] and v != errno.EIO]
            assert not wrong, wrong
            assert errno.EIO in got.values()
            assert rs.remote_stats(mnt)["replaced_objects"] >= 1
    text = log_text(log)
    assert ("If-Unmodified-Since failed" if conditions else
            "its Last-Modified changed") in text, text
    if conditions:
        assert any(r for r in b.ranges if r) and all(
            h is not None for h in b.if_unmodified_since), b.if_unmodified_since


def test_server_without_any_validator_is_named_and_not_disk_cached(site, tmp_path, env):
    www, truth, names = site
    cache = tmp_path / "cache"
    mnt = tmp_path / "mnt"
    log = tmp_path / "shardfs.log"
    with object_server(www) as (b, url):
        b.etag = b.last_modified = False
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_dir=%s,log=%s"
                         % (cache, log), env=env) as r:
            assert read_all(mnt, truth) == truth
    text = r.stderr + log_text(log)
    assert "neither ETag nor Last-Modified" in text and "cannot be detected" in text, text
    assert text.count("neither ETag nor Last-Modified") == 1
    assert not chunk_files(cache)


# ---------------------------------------------------------------- faults


def test_whole_body_then_reset_is_not_a_replacement(site, tmp_path, env):
    www, truth, names = site
    mnt = tmp_path / "mnt"
    with object_server(www) as (b, url):
        # the index build reads each shard's last chunk: cut both
        b.cut_last_chunk = 4
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_mem=1M,"
                         "index_mode=off", env=env):
            assert read_all(mnt, truth) == truth
            st = rs.remote_stats(mnt)
        assert b.cut_last_chunk < 4, "no last chunk was cut"
    assert st["replaced_objects"] == 0 and st["errors"] == 0, st
    for r in b.ranges:
        lo, hi = map(int, r.split("=")[1].split("-"))
        assert lo <= hi, "inverted range asked: %s" % r


def test_416_inside_the_object_is_asked_again(site, tmp_path, env):
    www, truth, names = site
    mnt = tmp_path / "mnt"
    with object_server(www) as (b, url):
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_mem=1M,"
                         "index_mode=off", env=env):
            b.spurious_416 = 2
            lib.drop_caches()
            assert read_all(mnt, truth) == truth
            st = rs.remote_stats(mnt)
    assert b.spurious_416 == 0
    assert st["replaced_objects"] == 0 and st["retries"] >= 2, st


READ_UNTIL_EIO = """
import errno, sys, time
for path in sys.argv[1:]:
    start = time.time()
    try:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    except OSError as e:
        print(e.errno, time.time() - start)
        sys.exit(0)
sys.exit(1)
"""


def test_trickling_server_gives_eio_within_the_stated_bound(site, tmp_path, env):
    """Bodies come at 3 bytes a second after their first 4 KiB: never
    slow enough for the low-speed check, so only the overall bound of a
    read ends it."""
    www, truth, names = site
    mnt = tmp_path / "mnt"
    log = tmp_path / "shardfs.log"
    timeout, attempts = 2, 2
    bound = timeout * attempts
    with object_server(www) as (b, url):
        with lib.mounted(spec(url, names), mnt, "-o", "chunk_size=256K,cache_mem=1M,"
                         "remote_timeout=%d,remote_attempts=%d,log=%s"
                         % (timeout, attempts, log), env=env):
            lib.drop_caches()
            b.trickle = True
            # every file in turn: the first one whose chunk is not in
            # memory any more meets the server
            reader = subprocess.Popen(["/usr/bin/python3", "-c", READ_UNTIL_EIO] +
                                      [str(mnt / n) for n in sorted(truth)],
                                      stdout=subprocess.PIPE, text=True)
            try:
                out, _ = reader.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                b.stopping = True
                reader.kill()
                reader.communicate()
                pytest.fail("a read from a trickling server outlived 60 s")
            finally:
                b.stopping = True
            assert reader.returncode == 0, "no read met the server"
            err, elapsed = out.split()
            assert int(err) == errno.EIO
            # the bound, plus slack for a loaded machine and the sanitizers
            assert float(elapsed) < bound + 8, elapsed
            assert rs.remote_stats(mnt)["errors"] >= 1
    assert "gave up after %d s in all (remote_timeout x remote_attempts)" % bound \
        in log_text(log), log_text(log)


def test_huge_response_header_is_named(site, tmp_path, env):
    www, truth, names = site
    with object_server(www) as (b, url):
        b.big_header = 200 * KIB
        r = refused(spec(url, names), tmp_path, "-o", "chunk_size=256K,remote_attempts=1",
            env=env)
    assert "Out of memory" not in r.stderr, r.stderr
    assert re.search(r"header", r.stderr, re.I), r.stderr


# ----------------------------------------------------------------- local


@pytest.mark.parametrize("modes,expect", [((0o600, 0o644), 0o600),
                                          ((0o640, 0o644), 0o640),
                                          ((0o644, 0o644), 0o644)])
def test_index_is_no_more_readable_than_its_shards(tmp_path, env, modes, expect):
    d = tmp_path / "shards"
    d.mkdir()
    for i, mode in enumerate(modes):
        lib.tar_from_members(d / ("shard-%06d.tar" % i),
                             [("k%d/a.bin" % i, lib.deterministic_bytes(i, 5000))])
        os.chmod(d / ("shard-%06d.tar" % i), mode)
    mnt = tmp_path / "mnt"
    with lib.mounted(str(d / "shard-{000000..000001}.tar"), mnt, env=env):
        pass
    index = [p for p in d.iterdir() if p.name.endswith(".shardfs-index")]
    assert len(index) == 1, list(d.iterdir())
    assert stat.S_IMODE(index[0].stat().st_mode) == expect
    assert stat.S_IMODE((tmp_path / "xdg" / "shardfs").stat().st_mode) == 0o700


def test_index_cache_directory_made_private(tmp_path, env):
    """An index cache directory left 0755 by an older shardfs is 0700
    after a mount (it holds the names of every set indexed)."""
    d = tmp_path / "shards"
    d.mkdir()
    lib.tar_from_members(d / "shard-000000.tar", [("a.bin", b"a" * 100)])
    (tmp_path / "xdg" / "shardfs").mkdir(parents=True, mode=0o755)
    os.chmod(tmp_path / "xdg" / "shardfs", 0o755)
    with lib.mounted(str(d / "shard-000000.tar"), tmp_path / "mnt", env=env):
        pass
    assert stat.S_IMODE((tmp_path / "xdg" / "shardfs").stat().st_mode) == 0o700


def test_gzip_member_then_zstd_frame_is_an_error(tmp_path, env):
    d = tmp_path / "src"
    d.mkdir()
    first = [("a/%02d.bin" % i, lib.deterministic_bytes(("a", i), 3000)) for i in range(5)]
    second = [("b/%02d.bin" % i, lib.deterministic_bytes(("b", i), 3000)) for i in range(40)]
    lib.tar_from_members(d / "one.tar", first)
    lib.tar_from_members(d / "two.tar", second)
    member = gzip.compress((d / "one.tar").read_bytes())
    frame = subprocess.run(["zstd", "-q", "-c", str(d / "two.tar")], check=True,
                           capture_output=True).stdout
    shard = tmp_path / "shard.tar.gz"
    shard.write_bytes(member + frame)
    r = refused(shard, tmp_path, "-o", "cache_dir=%s" % (tmp_path / "cache"), env=env)
    assert str(shard) in r.stderr, r.stderr
    assert "compressed offset %d" % len(member) in r.stderr, r.stderr
