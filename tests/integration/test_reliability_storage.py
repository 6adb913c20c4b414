# SPDX-License-Identifier: Apache-2.0
"""Failing storage under a live mount.

shardfs keeps every shard open for the life of the mount and reads member
data with pread(2) at offsets recorded when the index was built.  When the
storage underneath changes or fails, a read must either return the bytes
the member had when it was mounted or fail with EIO: never other bytes,
never a mix.  The daemon must stay up, count the failure in
/.shardfs/stats "errors" and log it, and members not affected must keep
reading correctly.

Cases:
- a shard truncated in place (truncate -s) while mounted;
- a shard replaced by rename(2), and deleted and recreated: shardfs keeps
  the original file open and serves the original bytes;
- a remount after such a replacement serves the new content (the
  persistent index must notice the change);
- real I/O errors from the block layer: a shard on ext4 over a
  device-mapper device whose table sends part of the shard's blocks to the
  `error` target, and (where device-mapper is missing, as in some
  sandboxes) a shard on btrfs whose data blocks are corrupted on the
  device, so that btrfs' data checksums turn reads of that region into
  EIO.

The page cache is dropped (echo 3 > /proc/sys/vm/drop_caches) before the
reads that must see the change, so the kernel cannot serve old pages.
"""
import errno
import os
import random
import shutil
import subprocess
import time
import uuid

import pytest

import shardfs_testlib as lib

MIB = 1 << 20


# ----------------------------------------------------------------- data


def shard_members(tag, big_at=None, n=24):
    """[(name, data)] of one shard: varied sizes, 0 and 1 MiB+ included.
    BIG_AT: index at which a 2 MiB + 3 member is placed."""
    rnd = random.Random(tag)
    sizes = [0, 1, 511, 512, 513, 4096, 10000, MIB + 5]
    out = []
    for i in range(n):
        if big_at is not None and i == big_at:
            size = 2 * MIB + 3
        else:
            size = sizes[i] if i < len(sizes) else rnd.choice(
                [0, 1, 700, 4095, 65537, rnd.randrange(1, 300_000)])
        out.append(("%s/%03d.bin" % (tag, i),
                    lib.deterministic_bytes((tag, i, "v1"), size)))
    return out


def make_shard(path, members):
    """Write the shard; returns {name: (offset_data, size)}."""
    return lib.tar_from_members(path, members)


def check_all_readable(mnt, members):
    for name, data in members:
        got, err = lib.read_member(os.path.join(mnt, name))
        assert err is None, "%s: read failed with %s" % (name, errno.errorcode[err])
        assert got == data, "%s: wrong bytes (%d read, %d expected)" % (
            name, len(got), len(data))


def stderr_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


# ------------------------------------------------------------ truncation


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["mid-member", "zero"])
def test_truncated_shard_gives_eio_never_other_bytes(tmp_path, where):
    a_members = shard_members("a", big_at=12)
    b_members = shard_members("b")
    a = tmp_path / "a.tar"
    b = tmp_path / "b.tar"
    layout = make_shard(a, a_members)
    make_shard(b, b_members)
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    big = "a/012.bin"
    if where == "zero":
        cut = 0
    else:   # half-way into the data of the 2 MiB member
        cut = layout[big][0] + layout[big][1] // 2
    with lib.foreground_mount("%s,%s" % (a, b), mnt, err_path,
                              "-o", "index_mode=off"):
        check_all_readable(mnt, a_members + b_members)
        pid = lib.daemon_pid(mnt)
        errors_before = lib.read_stats(mnt)["errors"]
        assert errors_before == 0
        os.truncate(a, cut)
        lib.drop_caches()
        failed = []
        for name, data in a_members:
            off, size = layout[name]
            st = os.stat(os.path.join(mnt, name))
            assert st.st_size == size, "%s: size changed in the index" % name
            got, err = lib.read_member(os.path.join(mnt, name))
            # whatever was returned is a prefix of the original content
            assert data.startswith(got), \
                "%s: %d bytes returned that are not the member's" % (name, len(got))
            # once the shard is seen changed, every member that needs its
            # bytes fails, also those before the cut
            if size == 0:
                assert err is None and got == data, \
                    "%s is empty but read %d bytes, error %r" % (
                        name, len(got), err and errno.errorcode[err])
            else:
                assert err == errno.EIO, \
                    "%s: expected EIO after the cut (%d), got %s after %d bytes" % (
                        name, cut, err and errno.errorcode[err], len(got))
                failed.append(name)
        assert failed, "the truncation affected no member?"
        # the other shard is untouched
        check_all_readable(mnt, b_members)
        assert lib.process_alive(pid), "daemon died after the truncation"
        stats = lib.read_stats(mnt)
        assert stats["errors"] >= len(failed), \
            "%d members failed with EIO but stats counts %d errors" % (
                len(failed), stats["errors"])
    text = stderr_text(err_path)
    assert any(str(a) in line and "shard changed size" in line
               for line in text.splitlines()), \
        "no log line naming the truncated shard:\n" + text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("read_between", [True, False],
                         ids=["read-while-truncated", "no-read-between"])
def test_a_shard_found_changed_stays_eio_after_a_rewrite(tmp_path, read_between):
    """Truncated, then overwritten in place (cp -f: same inode) by another,
    larger tar: later reads must fail, not serve the new file's bytes at
    the old offsets, whether or not a read saw the truncated shard."""
    a_members = shard_members("a")
    a = tmp_path / "a.tar"
    make_shard(a, a_members)
    other = tmp_path / "other.tar"
    make_shard(other, shard_members("a", n=40))
    assert os.path.getsize(other) > os.path.getsize(a)
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    name = "a/006.bin"
    with lib.foreground_mount(str(a), mnt, err_path, "-o", "index_mode=off"):
        check_all_readable(mnt, a_members)
        size = os.path.getsize(a)
        os.truncate(a, 0)
        lib.drop_caches()
        if read_between:
            assert lib.read_member(os.path.join(mnt, name))[1] == errno.EIO
        subprocess.run(["cp", "-f", str(other), str(a)], check=True)
        lib.drop_caches()
        for member, _ in a_members:
            got, err = lib.read_member(os.path.join(mnt, member))
            if os.path.getsize(os.path.join(mnt, member)):
                assert err == errno.EIO and got == b"", (member, err, len(got))
    want = ("shard changed size under the mount (%d -> %d bytes); its members "
            "now fail with EIO" % (size, 0 if read_between else os.path.getsize(other)))
    assert want in stderr_text(err_path)


# ------------------------------------------------ replacement under the mount


def replacement_members(kind, original):
    """Content written in place of a shard under the mount."""
    if kind == "same-layout":
        # same names and sizes, other bytes: a mix would go unnoticed by
        # size checks, only by content
        return [(name, lib.deterministic_bytes((name, "v2"), len(data)))
                for name, data in original]
    # another tar: other names, other offsets, shorter
    return [("a/%03d.bin" % i, lib.deterministic_bytes(("other", i), 3000 + i))
            for i in range(5)]


def replace_shard(how, path, new_members, tmp_path):
    if how == "rename":
        new = tmp_path / "incoming.tar"
        make_shard(new, new_members)
        os.rename(new, path)
    else:   # deleted, then a new file created under the same name
        os.unlink(path)
        make_shard(path, new_members)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["same-layout", "other-tar"])
@pytest.mark.parametrize("how", ["rename", "delete-recreate"])
def test_replaced_shard_keeps_serving_original(tmp_path, how, kind):
    a_members = shard_members("a", big_at=3)
    b_members = shard_members("b")
    a = tmp_path / "a.tar"
    b = tmp_path / "b.tar"
    make_shard(a, a_members)
    make_shard(b, b_members)
    mnt = tmp_path / "mnt"
    # read half of the members before the replacement, half after only
    warm = a_members[::2]
    with lib.mounted("%s,%s" % (a, b), mnt, "-o", "index_mode=off"):
        check_all_readable(mnt, warm)
        replace_shard(how, a, replacement_members(kind, a_members), tmp_path)
        lib.drop_caches()
        for name, data in a_members + b_members:
            got, err = lib.read_member(os.path.join(mnt, name))
            assert err is None, "%s: %s after the shard was replaced (%s)" % (
                name, errno.errorcode[err], how)
            assert got == data, \
                "%s: bytes differ from the ORIGINAL content after %s (%s)" % (
                    name, how, kind)
        # partial reads at random offsets, still the original
        rnd = random.Random(7)
        for _ in range(200):
            name, data = rnd.choice(a_members)
            if not data:
                continue
            off = rnd.randrange(len(data))
            ln = rnd.randrange(1, 70000)
            with open(os.path.join(mnt, name), "rb") as f:
                f.seek(off)
                assert f.read(ln) == data[off:off + ln], (name, off, ln)
        assert lib.read_stats(mnt)["errors"] == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["same-layout", "other-tar",
                                  "same-head-same-size"])
def test_remount_after_replacement_serves_new_content(tmp_path, kind):
    """The persistent index (next to the first shard) was written by the
    first mount; after the shard was replaced, a remount must serve the
    new shard, not the old index.  same-head-same-size: the new shard has
    the same size and the same first 64 KiB as the old one, but later
    members are laid out differently (two sizes swapped)."""
    a = tmp_path / "a.tar"
    head = [("a/000.bin", lib.deterministic_bytes("head", 200_000))]
    old = head + [("a/001.bin", lib.deterministic_bytes("x1", 100_000)),
                  ("a/002.bin", lib.deterministic_bytes("x2", 300_000))]
    make_shard(a, old)
    mnt = tmp_path / "mnt"
    with lib.mounted(str(a), mnt):
        check_all_readable(mnt, old)
    assert os.path.exists(tmp_path / ".a.tar.shardfs-index"), \
        "no persistent index was written next to the first shard"
    if kind == "same-head-same-size":
        new = head + [("a/001.bin", lib.deterministic_bytes("y1", 300_000)),
                      ("a/002.bin", lib.deterministic_bytes("y2", 100_000))]
    else:
        new = replacement_members(kind, old)
    time.sleep(0.01)   # a distinct mtime/ctime
    new_path = tmp_path / "incoming.tar"
    make_shard(new_path, new)
    if kind == "same-head-same-size":
        assert os.path.getsize(new_path) == os.path.getsize(a)
        with open(new_path, "rb") as f1, open(a, "rb") as f2:
            assert f1.read(65536) == f2.read(65536)
    os.rename(new_path, a)
    with lib.mounted(str(a), mnt):
        names = sorted(n for n, _ in new)
        got_names = sorted(os.path.join("a", n) for n in os.listdir(mnt / "a"))
        assert got_names == names, "remount lists %r, the shard holds %r" % (
            got_names, names)
        for name, data in new:
            got, err = lib.read_member(os.path.join(mnt, name))
            assert err is None and got == data, \
                "%s: remount after replacement serves %s (%d bytes, error %r)" % (
                    name, "stale bytes" if err is None else "an error",
                    len(got), err and errno.errorcode[err])


# ------------------------------------------------- I/O errors from the device


def run_ok(argv, what=None):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert r.returncode == 0, "%s failed (%d): %s" % (
        what or " ".join(map(str, argv)), r.returncode,
        r.stderr.decode("utf-8", "replace"))
    return r.stdout.decode("utf-8", "replace")


class BlockStack:
    """Loop devices, device-mapper devices and filesystem mounts made by
    one test, undone in reverse order (also on failure)."""

    def __init__(self):
        self.undo = []

    def loop(self, image):
        r = subprocess.run(["losetup", "-f", "--show", os.fspath(image)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode != 0:
            pytest.skip("no loop device: %s" % r.stderr.decode().strip())
        dev = r.stdout.decode().strip()
        self.undo.append(["losetup", "-d", dev])
        return dev

    def dm_create(self, name, table):
        run_ok(["dmsetup", "create", name, "--table", table])
        self.undo.append(["dmsetup", "remove", "--retry", name])
        return "/dev/mapper/" + name

    def mount(self, dev, where, fstype):
        os.makedirs(where, exist_ok=True)
        run_ok(["mount", "-t", fstype, dev, os.fspath(where)])
        self.undo.append(["umount", os.fspath(where)])

    def close(self):
        for argv in reversed(self.undo):
            r = subprocess.run(argv, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            if r.returncode != 0 and argv[0] == "umount":
                subprocess.run(["umount", "-l", argv[-1]],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        self.undo = []


def device_offsets(image, blocks):
    """Map each 4 KiB block content in BLOCKS to its byte offset in IMAGE
    (the filesystem image behind the loop device).  Data blocks of the
    shard are found by content: they are unique pseudo-random bytes."""
    want = {blk: None for blk in blocks}
    left = len(want)
    with open(image, "rb") as f:
        pos = 0
        while left:
            chunk = f.read(4 * MIB)
            if not chunk:
                break
            for i in range(0, len(chunk) - 4095, 4096):
                blk = chunk[i:i + 4096]
                if blk in want and want[blk] is None:
                    want[blk] = pos + i
                    left -= 1
            pos += len(chunk)
    missing = [i for i, blk in enumerate(blocks) if want[blk] is None]
    assert not missing, "shard blocks %r not found on the device image" % missing
    return [want[blk] for blk in blocks]


def bad_region_blocks(shard_path, layout, name, nblocks):
    """NBLOCKS 4 KiB-aligned blocks of shard bytes inside member NAME's
    data, about 1 MiB into it.  Returns (shard offsets, block contents)."""
    off, size = layout[name]
    start = (off + MIB + 4095) & ~4095
    assert start + nblocks * 4096 <= off + size
    with open(shard_path, "rb") as f:
        f.seek(start)
        data = f.read(nblocks * 4096)
    blocks = [data[i * 4096:(i + 1) * 4096] for i in range(nblocks)]
    assert len(set(blocks)) == nblocks
    return [start + i * 4096 for i in range(nblocks)], blocks


def check_io_error_region(mnt, err_path, shard_on_dev, members, layout,
                          bad_lo, bad_hi, other_members):
    """Members overlapping shard bytes [bad_lo, bad_hi) fail with EIO (any
    bytes returned before are the member's own), every other member reads
    correctly, the daemon stays up, counts and logs the errors."""
    pid = lib.daemon_pid(mnt)
    failed = []
    for name, data in members:
        off, size = layout[name]
        got, err = lib.read_member(os.path.join(mnt, name))
        assert data.startswith(got), "%s: returned bytes that are not its own" % name
        if size and off < bad_hi and off + size > bad_lo:
            assert err == errno.EIO, \
                "%s overlaps the failing region: expected EIO, got %s" % (
                    name, err and errno.errorcode[err])
            failed.append(name)
        else:
            assert err is None and got == data, \
                "%s is outside the failing region but read %d bytes, error %r" % (
                    name, len(got), err and errno.errorcode[err])
    assert failed
    # a partial read that stays before the region still works
    name = failed[0]
    off, size = layout[name]
    with open(os.path.join(mnt, name), "rb") as f:
        head = f.read(64 * 1024)
    assert head == dict(members)[name][:64 * 1024]
    check_all_readable(mnt, other_members)
    assert lib.process_alive(pid), "daemon died on I/O errors"
    stats = lib.read_stats(mnt)
    assert stats["errors"] >= len(failed), stats
    assert lib.process_alive(pid)
    text = stderr_text(err_path)
    lines = [ln for ln in text.splitlines()
             if str(shard_on_dev) in ln and "read failed" in ln]
    assert lines, "no log line naming %s and the failed read:\n%s" % (
        shard_on_dev, text)
    return lines


def dm_unavailable_reason():
    if not shutil.which("dmsetup"):
        return "dmsetup is not installed (package dmsetup)"
    r = subprocess.run(["dmsetup", "version"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    out = r.stdout.decode("utf-8", "replace").strip()
    if r.returncode != 0 or "Driver version" not in out:
        return ("device-mapper unavailable in this kernel/sandbox: "
                "`dmsetup version` says: %s" % " | ".join(out.splitlines()))
    r = subprocess.run(["dmsetup", "targets"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    targets = r.stdout.decode()
    if "error" not in targets or "linear" not in targets:
        return "device-mapper lacks the linear or error target: %s" % targets
    return None


@pytest.mark.timeout(180)
def test_backing_io_errors_devmapper(tmp_path):
    """A shard on ext4 over dm-linear; the dm table is reloaded so that 64
    KiB of the shard's data blocks map to the `error` target."""
    reason = dm_unavailable_reason()
    if reason:
        pytest.skip(reason)
    for tool in ("mkfs.ext4", "losetup"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed" % tool)
    a_members = shard_members("a", big_at=10)
    b_members = shard_members("b")
    src_a = tmp_path / "a.tar"
    layout = make_shard(src_a, a_members)
    b = tmp_path / "b.tar"
    make_shard(b, b_members)
    image = tmp_path / "ext4.img"
    with open(image, "wb") as f:
        f.truncate(64 * MIB)
    name = "shardfs-test-" + uuid.uuid4().hex[:8]
    stack = BlockStack()
    fsdir = tmp_path / "fs"
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    try:
        loop = stack.loop(image)
        sectors = 64 * MIB // 512
        dev = stack.dm_create(name, "0 %d linear %s 0" % (sectors, loop))
        run_ok(["mkfs.ext4", "-q", "-F", "-b", "4096", dev])
        stack.mount(dev, fsdir, "ext4")
        a = fsdir / "a.tar"
        shutil.copyfile(src_a, a)
        with open(a, "rb") as f:
            os.fsync(f.fileno())
        run_ok(["sync"])
        shard_offs, blocks = bad_region_blocks(a, layout, "a/010.bin", 16)
        dev_offs = device_offsets(image, blocks)
        bad = sorted(o // 512 for o in dev_offs)   # 8 sectors each
        # table: linear everywhere except the bad blocks
        table, pos = [], 0
        for s in bad:
            if s > pos:
                table.append("%d %d linear %s %d" % (pos, s - pos, loop, pos))
            table.append("%d 8 error" % s)
            pos = s + 8
        if pos < sectors:
            table.append("%d %d linear %s %d" % (pos, sectors - pos, loop, pos))
        with lib.foreground_mount("%s,%s" % (a, b), mnt, err_path,
                                  "-o", "index_mode=off"):
            check_all_readable(mnt, a_members + b_members)
            table_file = tmp_path / "dm-table"
            table_file.write_text("\n".join(table) + "\n")
            run_ok(["dmsetup", "reload", name, os.fspath(table_file)])
            run_ok(["dmsetup", "resume", name])
            lib.drop_caches()
            check_io_error_region(mnt, err_path, a, a_members, layout,
                                  shard_offs[0], shard_offs[-1] + 4096,
                                  b_members)
    finally:
        lib.unmount(mnt)
        stack.close()


@pytest.mark.timeout(180)
def test_backing_io_errors_btrfs_checksum(tmp_path):
    """A shard on btrfs over a loop device; 64 KiB of its data blocks are
    overwritten on the device image, so btrfs' data checksums fail and the
    kernel answers reads of that region with EIO (a real I/O error from the
    backing store, without device-mapper)."""
    for tool in ("mkfs.btrfs", "losetup"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed (package btrfs-progs / mount)" % tool)
    with open("/proc/filesystems") as f:
        if "btrfs" not in f.read():
            pytest.skip("the kernel has no btrfs")
    a_members = shard_members("a", big_at=10)
    b_members = shard_members("b")
    src_a = tmp_path / "a.tar"
    layout = make_shard(src_a, a_members)
    b = tmp_path / "b.tar"
    make_shard(b, b_members)
    image = tmp_path / "btrfs.img"
    with open(image, "wb") as f:
        f.truncate(256 * MIB)
    stack = BlockStack()
    fsdir = tmp_path / "fs"
    mnt = tmp_path / "mnt"
    err_path = tmp_path / "stderr.txt"
    try:
        loop = stack.loop(image)
        run_ok(["mkfs.btrfs", "-q", "-f", loop])
        stack.mount(loop, fsdir, "btrfs")
        a = fsdir / "a.tar"
        shutil.copyfile(src_a, a)
        with open(a, "rb") as f:
            os.fsync(f.fileno())
        run_ok(["sync"])
        shard_offs, blocks = bad_region_blocks(a, layout, "a/010.bin", 16)
        dev_offs = device_offsets(image, blocks)
        with lib.foreground_mount("%s,%s" % (a, b), mnt, err_path,
                                  "-o", "index_mode=off"):
            check_all_readable(mnt, a_members + b_members)
            # corrupt the blocks on the device, under btrfs' feet
            with open(image, "r+b") as f:
                for o in dev_offs:
                    f.seek(o)
                    f.write(b"\xa5" * 4096)
                f.flush()
                os.fsync(f.fileno())
            lib.drop_caches()
            with open(a, "rb") as f:    # the corruption is visible below us
                f.seek(shard_offs[0])
                with pytest.raises(OSError) as ei:
                    f.read(4096)
                assert ei.value.errno == errno.EIO
            lib.drop_caches()
            check_io_error_region(mnt, err_path, a, a_members, layout,
                                  shard_offs[0], shard_offs[-1] + 4096,
                                  b_members)
    finally:
        lib.unmount(mnt)
        stack.close()


@pytest.mark.timeout(120)
def test_errors_after_detaching_reach_the_log_file_and_stats(tmp_path):
    """In the background, with -o log=FILE, "shard changed size" must be in
    FILE (without syslog it was lost), and .shardfs/stats must count it;
    without log= and without /dev/log, shardfs warns before detaching."""
    members = shard_members("a")
    a = tmp_path / "a.tar"
    make_shard(a, members)
    log = tmp_path / "shardfs.log"
    mnt = tmp_path / "mnt"
    with lib.mounted(str(a), mnt, "-o", "index_mode=off,log=%s" % log) as proc:
        assert lib.read_stats(mnt)["logged_errors"] == 0
        size = os.path.getsize(a)
        os.truncate(a, 0)
        lib.drop_caches()
        assert lib.read_member(os.path.join(mnt, "a/006.bin"))[1] == errno.EIO
        assert lib.read_stats(mnt)["logged_errors"] == 1
    assert "no syslog" not in proc.stderr
    assert stderr_text(log) == (
        "shardfs: %s: shard changed size under the mount (%d -> 0 bytes); its "
        "members now fail with EIO\n" % (a, size))
    if not os.path.exists("/dev/log"):
        make_shard(a, members)
        with lib.mounted(str(a), mnt, "-o", "index_mode=off") as proc:
            pass
        assert ("shardfs: no syslog (/dev/log is missing): messages "
                "after shardfs goes to the background are lost; use -o "
                "log=FILE or -f\n") in proc.stderr


@pytest.mark.timeout(120)
def test_same_size_rewrite_in_place_is_caught_by_the_index_check(tmp_path):
    """A shard rewritten in place to the same size cannot be seen by size
    from the mount (documented); `shardfs-index --check` catches it: the
    mtime changed, and the headers differ from the recorded digest."""
    members = shard_members("a")
    a = tmp_path / "a.tar"
    make_shard(a, members)
    index = lib.binary("shardfs-index")
    r = lib.run_cmd([index, str(a)])
    assert r.returncode == 0, r
    assert lib.run_cmd([index, "--check", str(a)]).returncode == 0
    size = os.path.getsize(a)
    renamed = [(name.replace("a/", "b/"), data) for name, data in members]
    other = tmp_path / "other.tar"
    make_shard(other, renamed)
    assert os.path.getsize(other) == size
    with open(a, "r+b") as f:            # in place: same inode, same size
        f.write(other.read_bytes())
    r = lib.run_cmd([index, "--check", "-o", "loglevel=info", str(a)])
    idx = str(tmp_path / ".a.tar.shardfs-index")
    assert r.returncode == 1, r
    # both candidate places are named: next to the shard, and the cache
    assert r.stderr.startswith(
        "shardfs-index: %s: the shards changed since it was built\n"
        "shardfs-index: no valid index for this shard set (looked in %s and "
        % (idx, idx)), r.stderr
