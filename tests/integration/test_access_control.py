# SPDX-License-Identifier: Apache-2.0
"""Ownership, permission bits and their enforcement.

- By default every entry has the owner, group and permission bits stored
  in the tar; -o uid=, gid= and umask= override them.
- shardfs always mounts with default_permissions, so the kernel enforces
  those bits: a non-root user (created for the test, removed afterwards)
  reading through an allow_other mount gets EACCES on a 0600 member owned
  by someone else, can read a 0644 one, cannot enter a 0700 directory of
  someone else; with -o uid=<that user> the private member becomes hers.
- Without allow_other, other users cannot use the mount at all.
"""
import errno
import json
import os
import pwd
import shutil
import stat
import subprocess
import tarfile
import tempfile
import uuid

import pytest

import shardfs_testlib as lib

OWNER = 4242
GROUP = 4343

MEMBERS = [
    {"name": "pub.txt", "data": b"public\n", "mode": 0o644, "uid": OWNER, "gid": OWNER},
    {"name": "secret.txt", "data": b"secret\n", "mode": 0o600, "uid": OWNER, "gid": OWNER},
    {"name": "group.txt", "data": b"group\n", "mode": 0o640, "uid": OWNER, "gid": GROUP},
    {"name": "exec.sh", "data": b"#!/bin/sh\necho hi\n", "mode": 0o755, "uid": OWNER, "gid": GROUP},
    {"name": "privdir", "type": tarfile.DIRTYPE, "mode": 0o700, "uid": OWNER, "gid": OWNER},
    {"name": "privdir/inner.txt", "data": b"inner\n", "mode": 0o644, "uid": OWNER, "gid": OWNER},
    {"name": "pubdir", "type": tarfile.DIRTYPE, "mode": 0o755, "uid": 0, "gid": 0},
    {"name": "pubdir/ro.txt", "data": b"read only\n", "mode": 0o444, "uid": 0, "gid": 0},
    {"name": "pubdir/none.txt", "data": b"nobody\n", "mode": 0o000, "uid": 0, "gid": 0},
]
FILES = {m["name"]: m["data"] for m in MEMBERS if "data" in m}

# run as the test user: try to read every path, report ok or the errno
CHECKER = r"""
import json, os, sys
out = {}
for p in sys.argv[1:]:
    try:
        if os.path.isdir(p):
            out[p] = "ok:" + ",".join(sorted(os.listdir(p)))
        else:
            with open(p, "rb") as f:
                out[p] = "ok:" + f.read().decode()
    except OSError as e:
        out[p] = "errno:%d" % e.errno
sys.stdout.write(json.dumps(out))
"""


@pytest.fixture(scope="module")
def test_user():
    if os.geteuid() != 0:
        pytest.skip("needs root to create a user")
    for tool in ("useradd", "userdel", "runuser"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed" % tool)
    name = "shardfs-test-" + uuid.uuid4().hex[:8]
    r = subprocess.run(["useradd", "-M", "-s", "/bin/sh", name],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert r.returncode == 0, r.stdout
    try:
        pw = pwd.getpwnam(name)
        yield name, pw.pw_uid, pw.pw_gid
    finally:
        subprocess.run(["userdel", name], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


@pytest.fixture
def public_dir():
    """A directory other users can traverse (pytest's tmp_path is 0700)."""
    d = tempfile.mkdtemp(prefix="shardfs-acl-")
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        for mp in (os.path.join(d, "mnt"),):
            if lib.is_mounted(mp):
                lib.unmount(mp)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "acl.tar"
    lib.tar_from_members(path, MEMBERS)
    return path


def as_user(user, mnt, rels):
    paths = [os.path.join(mnt, r) for r in rels]
    r = subprocess.run(["runuser", "-u", user, "--", "/usr/bin/python3", "-c",
                        CHECKER, *paths],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    assert r.returncode == 0, r.stderr.decode()
    res = json.loads(r.stdout)
    return {os.path.relpath(p, mnt) if p != str(mnt) else ".": v
            for p, v in res.items()}


def expect(results, rel, outcome):
    got = results[rel]
    if outcome == "ok":
        want = "ok:" + FILES[rel].decode() if rel in FILES else None
        assert got.startswith("ok:"), "%s: %s, expected it readable" % (
            rel, errno.errorcode.get(int(got[6:]), got) if got.startswith("errno:") else got)
        if want is not None:
            assert got == want, (rel, got)
    else:
        assert got == "errno:%d" % outcome, "%s: %s, expected %s" % (
            rel, got if got.startswith("ok") else
            errno.errorcode.get(int(got[6:]), got), errno.errorcode[outcome])


# -------------------------------------------------------- attribute values


def test_default_owner_and_modes_are_the_tars(tmp_path, shard):
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt):
        for m in MEMBERS:
            st = os.lstat(os.path.join(mnt, m["name"]))
            assert stat.S_IMODE(st.st_mode) == m["mode"], \
                "%s: mode %o, tar has %o" % (m["name"], stat.S_IMODE(st.st_mode), m["mode"])
            assert (st.st_uid, st.st_gid) == (m["uid"], m["gid"]), \
                "%s: owner %d:%d, tar has %d:%d" % (m["name"], st.st_uid,
                                                    st.st_gid, m["uid"], m["gid"])
            assert stat.S_ISDIR(st.st_mode) == (m.get("type") == tarfile.DIRTYPE)
        # root may read everything (CAP_DAC_OVERRIDE), but write nothing
        for rel, data in FILES.items():
            with open(os.path.join(mnt, rel), "rb") as f:
                assert f.read() == data
        with pytest.raises(OSError) as ei:
            open(os.path.join(mnt, "pub.txt"), "r+b")
        assert ei.value.errno == errno.EROFS
        opts = lib.mount_entry(mnt)[2]
        assert "default_permissions" in opts and "ro" in opts, opts


@pytest.mark.parametrize("opts,uid,gid,umask", [
    ("uid=1001,gid=1002,umask=027", 1001, 1002, 0o027),
    ("uid=0", 0, None, 0),
    ("gid=77", None, 77, 0),
    ("umask=0222", None, None, 0o222),
    ("umask=7777", None, None, 0o7777),
], ids=["uid,gid,umask=027", "uid=0", "gid=77", "umask=0222", "umask=7777"])
def test_uid_gid_umask_override(tmp_path, shard, opts, uid, gid, umask):
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt, "-o", opts):
        for m in MEMBERS:
            st = os.lstat(os.path.join(mnt, m["name"]))
            want_mode = m["mode"] & ~umask
            assert stat.S_IMODE(st.st_mode) == want_mode, \
                "%s with %s: mode %o, expected %o" % (
                    m["name"], opts, stat.S_IMODE(st.st_mode), want_mode)
            assert st.st_uid == (m["uid"] if uid is None else uid), (m["name"], opts)
            assert st.st_gid == (m["gid"] if gid is None else gid), (m["name"], opts)


# ------------------------------------------------------------- enforcement


ALL = ["pub.txt", "secret.txt", "group.txt", "exec.sh", "privdir",
       "privdir/inner.txt", "pubdir", "pubdir/ro.txt", "pubdir/none.txt"]


def test_kernel_enforces_tar_modes_for_other_user(test_user, public_dir, shard):
    user, uid, gid = test_user
    mnt = os.path.join(public_dir, "mnt")
    with lib.mounted(shard, mnt, "-o", "allow_other"):
        res = as_user(user, mnt, ALL)
        expect(res, "pub.txt", "ok")
        expect(res, "secret.txt", errno.EACCES)
        expect(res, "group.txt", errno.EACCES)
        expect(res, "exec.sh", "ok")
        expect(res, "privdir", errno.EACCES)
        expect(res, "privdir/inner.txt", errno.EACCES)
        expect(res, "pubdir", "ok")
        expect(res, "pubdir/ro.txt", "ok")
        expect(res, "pubdir/none.txt", errno.EACCES)
        # the same reads as root all succeed: the denials are the modes
        for rel, data in FILES.items():
            with open(os.path.join(mnt, rel), "rb") as f:
                assert f.read() == data
        # and with runuser's cat, as a user would see it
        r = subprocess.run(["runuser", "-u", user, "--", "cat",
                            os.path.join(mnt, "secret.txt")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert r.returncode != 0 and b"Permission denied" in r.stderr, r
        assert r.stdout == b""
        r = subprocess.run(["runuser", "-u", user, "--", "cat",
                            os.path.join(mnt, "pub.txt")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert r.returncode == 0 and r.stdout == FILES["pub.txt"], r


def test_uid_option_gives_the_user_her_files(test_user, public_dir, shard):
    user, uid, gid = test_user
    mnt = os.path.join(public_dir, "mnt")
    with lib.mounted(shard, mnt, "-o", "allow_other,uid=%d" % uid):
        res = as_user(user, mnt, ALL)
        expect(res, "secret.txt", "ok")
        expect(res, "privdir", "ok")
        expect(res, "privdir/inner.txt", "ok")
        expect(res, "pub.txt", "ok")
        expect(res, "group.txt", "ok")         # owner bits rw-
        # files owned by root in the tar are hers now too, but 000 stays 000
        expect(res, "pubdir/none.txt", errno.EACCES)
        expect(res, "pubdir/ro.txt", "ok")


def test_gid_option_gives_group_access(test_user, public_dir, shard):
    user, uid, gid = test_user
    mnt = os.path.join(public_dir, "mnt")
    with lib.mounted(shard, mnt, "-o", "allow_other,gid=%d" % gid):
        res = as_user(user, mnt, ALL)
        expect(res, "group.txt", "ok")         # r-- for the group
        expect(res, "secret.txt", errno.EACCES)  # --- for the group
        expect(res, "privdir", errno.EACCES)
        expect(res, "pub.txt", "ok")


def test_umask_option_is_enforced(test_user, public_dir, shard):
    user, uid, gid = test_user
    mnt = os.path.join(public_dir, "mnt")
    with lib.mounted(shard, mnt, "-o", "allow_other,umask=077"):
        res = as_user(user, mnt, ALL)
        expect(res, "pub.txt", errno.EACCES)
        expect(res, "pubdir", errno.EACCES)
        expect(res, "exec.sh", errno.EACCES)
    with lib.mounted(shard, mnt, "-o", "allow_other,uid=%d,umask=077" % uid):
        res = as_user(user, mnt, ALL)
        expect(res, "pub.txt", "ok")
        expect(res, "secret.txt", "ok")
        expect(res, "pubdir/ro.txt", "ok")


def test_without_allow_other_other_users_are_refused(test_user, public_dir, shard):
    user, uid, gid = test_user
    mnt = os.path.join(public_dir, "mnt")
    with lib.mounted(shard, mnt):
        res = as_user(user, mnt, ["pub.txt", "pubdir", "pubdir/ro.txt"])
        for rel in ("pub.txt", "pubdir", "pubdir/ro.txt"):
            expect(res, rel, errno.EACCES)
        # even with the files made hers
    with lib.mounted(shard, mnt, "-o", "uid=%d" % uid):
        res = as_user(user, mnt, ["pub.txt", "secret.txt"])
        expect(res, "pub.txt", errno.EACCES)
        expect(res, "secret.txt", errno.EACCES)


# ------------------------------------------------------- option values


def test_uid_gid_above_2_31_are_honoured(tmp_path, shard):
    """uid_t and gid_t are 32-bit unsigned: 2147483648 and 4000000000 are
    valid ids (user namespaces, large directories).  An override that is
    silently dropped leaves the tar's owners in place: files the admin
    meant to hand to one account stay accessible to another."""
    mnt = tmp_path / "mnt"
    for uid, gid in ((2147483648, 2147483649), (4000000000, 4000000001)):
        with lib.mounted(shard, mnt, "-o", "uid=%d,gid=%d" % (uid, gid)):
            for m in MEMBERS:
                st = os.lstat(os.path.join(mnt, m["name"]))
                assert (st.st_uid, st.st_gid) == (uid, gid), \
                    "-o uid=%d,gid=%d: %s is owned by %d:%d" % (
                        uid, gid, m["name"], st.st_uid, st.st_gid)


@pytest.mark.parametrize("opt", ["uid=-5", "gid=-2", "umask=-1",
                                 "uid=99999999999"])
def test_invalid_owner_or_umask_is_a_usage_error(tmp_path, shard, opt):
    """A negative or out-of-range id or umask is refused (exit 2), never
    silently ignored (which would keep the tar's owners and modes)."""
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    proc, was_mounted, daemon_left = lib.run_shardfs_expect_failure(
        shard, mnt, "-o", opt)
    assert proc.returncode == 2, "-o %s: exit %d (expected 2, usage error)%s" % (
        opt, proc.returncode,
        ", and it mounted" if was_mounted else "")
    assert not was_mounted and not daemon_left


def test_control_files_listing_names_are_the_owners_only(test_user, public_dir, shard):
    """/.shardfs/members and /.shardfs/shards name files inside 0700
    directories and the shards' absolute paths: with allow_other, another
    user must not read them (they were 0444); stats and metrics stay
    public; with uid= the user the mount is for reads them."""
    user, uid, gid = test_user
    mnt = os.path.join(public_dir, "mnt")
    private = [".shardfs/members", ".shardfs/shards"]
    with lib.mounted(shard, mnt, "-o", "allow_other"):
        for rel in private:
            st = os.stat(os.path.join(mnt, rel))
            assert (st.st_mode & 0o777, st.st_uid) == (0o400, 0), rel
        res = as_user(user, mnt, private + [".shardfs/stats", ".shardfs/metrics"])
        for rel in private:
            assert res[rel] == "errno:%d" % errno.EACCES, (rel, res[rel][:40])
        assert res[".shardfs/stats"].startswith("ok:{")
        assert res[".shardfs/metrics"].startswith("ok:")
        with open(os.path.join(mnt, ".shardfs/members"), "rb") as f:
            assert b"privdir/inner.txt" in f.read()
    with lib.mounted(shard, mnt, "-o", "allow_other,uid=%d" % uid):
        res = as_user(user, mnt, private)
        assert all(v.startswith("ok:") for v in res.values()), res
