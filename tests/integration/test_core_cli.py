# SPDX-License-Identifier: Apache-2.0
"""The command line: every SHARDS syntax form (and the shard order it
implies), options, foreground/debug/single-threaded runs, exit codes of
usage errors, mounting through mount(8) -t fuse.shardfs and /etc/fstab.

Shard order matters for the result (last one wins), so every syntax test
puts the same path in several shards and compares with `tar -x` of the
shards in the order the contract gives.
"""
import os
import re
import shutil
import subprocess
import time

import pytest

import shardfs_testlib as lib

PROJECT_CMAKE = os.path.join(os.path.dirname(__file__), "..", "..",
                             "CMakeLists.txt")


def order_shard(path, tag):
    """A shard with a file unique to it and 'order.txt' (in every shard:
    whichever comes last wins) and 'by/<tag>'."""
    src = str(path) + ".src"
    lib.write_file(os.path.join(src, "order.txt"),
                   b"written by %s\n" % tag.encode(),
                   mtime_ns=lib.T0_NS + 10**9 * len(tag))
    lib.write_file(os.path.join(src, "by", tag), tag.encode() * 100)
    lib.gnu_tar_create(path, src, ["order.txt", "by"], "gnu")
    shutil.rmtree(src)
    return path


def check_form(tmp_path, arg, expected_order, *options):
    start_ns, results = lib.extract_reference(expected_order, tmp_path / "ref")
    assert all(r.returncode == 0 for r in results)
    with lib.mounted(arg, tmp_path / "mnt", *options) as proc:
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
    s = lib.parse_summary(proc.stderr)
    assert s is not None and s["shards"] == len(expected_order), proc.stderr
    return proc


# ------------------------------------------------------------ SHARDS forms

def test_single_tar(tmp_path):
    a = order_shard(tmp_path / "one.tar", "one")
    check_form(tmp_path, str(a), [a])


def test_directory_of_tars_sorted_by_name(tmp_path):
    d = tmp_path / "shards"
    os.makedirs(d)
    names = ["b-002.tar", "a-010.tar", "c-001.tar", "a-009.tar", "B-upper.tar"]
    # created in a scrambled order so neither creation order nor mtime sorts
    for n in names:
        order_shard(d / n, n)
    # not shards: other suffixes, a sub-directory with a tar inside
    lib.write_file(os.path.join(d, "notes.txt"), b"not a tar\n")
    lib.write_file(os.path.join(d, "z.tar.idx"), b"not a tar either\n")
    os.makedirs(d / "nested")
    order_shard(d / "nested" / "zzz.tar", "nested")
    expected = [d / n for n in sorted(names)]
    check_form(tmp_path, str(d), expected)
    # with a trailing slash too
    check_form(tmp_path, str(d) + "/", expected)


def test_brace_range_zero_padded(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    shards = [order_shard(d / ("shard-%06d.tar" % i), "s%d" % i)
              for i in range(12)]
    # a shard outside the range must not be used
    order_shard(d / "shard-000012.tar", "outside")
    check_form(tmp_path, str(d / "shard-{000000..000011}.tar"), shards)


def test_brace_range_sub_range(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    shards = [order_shard(d / ("part-%03d.tar" % i), "p%d" % i)
              for i in range(10)]
    check_form(tmp_path, str(d / "part-{003..007}.tar"), shards[3:8])


def test_brace_list_keeps_listed_order(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    for n in ("alpha", "beta", "gamma"):
        order_shard(d / (n + ".tar"), n)
    expected = [d / "gamma.tar", d / "alpha.tar", d / "beta.tar"]
    check_form(tmp_path, str(d / "{gamma,alpha,beta}.tar"), expected)


def test_glob_sorted(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d)
    names = ["train-10.tar", "train-02.tar", "train-1.tar", "train-a.tar"]
    for n in names:
        order_shard(d / n, n)
    order_shard(d / "valid-00.tar", "valid")
    check_form(tmp_path, str(d / "train-*.tar"),
               [d / n for n in sorted(names)])


def test_comma_separated_mix_of_forms(tmp_path):
    d = tmp_path / "s"
    os.makedirs(d / "dir")
    single = order_shard(tmp_path / "first.tar", "first")
    rng = [order_shard(d / ("r-%02d.tar" % i), "r%d" % i) for i in range(3)]
    lst = [order_shard(d / ("l-%s.tar" % n), "l" + n) for n in ("x", "y")]
    glb = [order_shard(d / ("g-%d.tar" % i), "g%d" % i) for i in range(2)]
    dirs = [order_shard(d / "dir" / ("%d.tar" % i), "d%d" % i) for i in range(2)]
    arg = ",".join([str(d / "g-*.tar"), str(d / "r-{00..02}.tar"),
                    str(single), str(d / "l-{y,x}.tar"), str(d / "dir")])
    expected = glb + rng + [single] + [lst[1], lst[0]] + dirs
    check_form(tmp_path, arg, expected)


def test_same_shard_listed_twice_is_refused(tmp_path):
    """It was accepted as "N duplicates" (issue 13): refused, naming it."""
    a = order_shard(tmp_path / "a.tar", "a")
    b = order_shard(tmp_path / "b.tar", "b")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    r, was_mounted, _ = lib.run_shardfs_expect_failure("%s,%s,%s" % (a, b, a), mnt)
    assert r.returncode == 1 and not was_mounted, r
    assert r.stderr == "shardfs: %s: listed twice in SHARDS (shards 0 and 2)\n" % a


# ------------------------------------------------------------- options

def test_help_and_version_exit_0(tmp_path):
    for opt in ("-h", "--help"):
        r = lib.run_cmd([lib.SHARDFS, opt])
        assert r.returncode == 0, r
        assert "shardfs" in (r.stdout + r.stderr).lower()
        assert re.search(r"usage", r.stdout + r.stderr, re.I), r
    with open(PROJECT_CMAKE) as f:
        version = re.search(r"project\(shardfs VERSION ([0-9.]+)", f.read()).group(1)
    for opt in ("-V", "--version"):
        r = lib.run_cmd([lib.SHARDFS, opt])
        assert r.returncode == 0, r
        assert version in r.stdout + r.stderr, r


USAGE_ERRORS = {
    "no arguments": [],
    "shards only": ["SHARDS"],
    "three positionals": ["SHARDS", "MNT", "extra"],
    "unknown long option": ["--no-such-option", "SHARDS", "MNT"],
    "unknown short option": ["-Q", "SHARDS", "MNT"],
    "unknown -o option": ["-o", "no_such_option", "SHARDS", "MNT"],
    "bad uid": ["-o", "uid=notanumber", "SHARDS", "MNT"],
    "bad umask": ["-o", "umask=999", "SHARDS", "MNT"],
    "-o without value": ["SHARDS", "MNT", "-o"],
    "libfuse option misspelt": ["-o", "max_thread=4", "SHARDS", "MNT"],
    "negative idle_timeout": ["-o", "idle_timeout=-1", "SHARDS", "MNT"],
    "fractional idle_timeout": ["-o", "idle_timeout=1.5", "SHARDS", "MNT"],
}


@pytest.mark.parametrize("case", sorted(USAGE_ERRORS))
def test_usage_errors_exit_2(tmp_path, case):
    shard = order_shard(tmp_path / "a.tar", "a")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    argv = [lib.SHARDFS] + [str(shard) if a == "SHARDS" else
                            str(mnt) if a == "MNT" else a
                            for a in USAGE_ERRORS[case]]
    lib._register(mnt)
    r = lib.run_cmd(argv, timeout=60)
    mounted_now = lib.is_mounted(mnt)
    lib.unmount(mnt)
    assert r.returncode == 2, r
    assert not mounted_now
    assert any(line.startswith("shardfs: ") for line in r.stderr.splitlines()), \
        "no 'shardfs: ' error line: %r" % r.stderr
    assert lib.wait_for_daemon_exit(mnt, 2)


def test_options_after_positionals_and_fuse_options(tmp_path):
    a = order_shard(tmp_path / "a.tar", "a")
    b = order_shard(tmp_path / "b.tar", "b")
    start_ns = lib.extract_reference_ok([a, b], tmp_path / "ref")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    argv = [lib.SHARDFS, "%s,%s" % (a, b), str(mnt), "-o",
            "allow_other,default_permissions,max_threads=4", "-o", "quiet"]
    with lib.registered_mount(mnt):
        r = lib.run_cmd(argv)
        assert r.returncode == 0, r
        assert lib.is_mounted(mnt)
        opts = lib.mount_entry(mnt)[2]
        assert "allow_other" in opts and "default_permissions" in opts, opts
        lib.compare_trees(mnt, tmp_path / "ref", start_ns)
        assert lib.parse_summary(r.stderr) is None


def test_usable_as_soon_as_command_returns_and_daemon_exits_on_unmount(tmp_path):
    shards = [order_shard(tmp_path / ("%d.tar" % i), "t%d" % i) for i in range(5)]
    start_ns = lib.extract_reference_ok(shards, tmp_path / "ref")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    arg = ",".join(map(str, shards))
    for _ in range(3):
        with lib.registered_mount(mnt):
            # `shardfs ... && ls MP`: listing straight after exit works
            r = lib.run_cmd(lib.shardfs_argv(arg, mnt))
            assert r.returncode == 0, r
            assert sorted(os.listdir(mnt)) == sorted(os.listdir(tmp_path / "ref"))
            assert lib.processes_mentioning(str(mnt)), "no daemon serving the mount"
            lib.compare_trees(mnt, tmp_path / "ref", start_ns)
            lib.unmount(mnt)
            assert lib.wait_for_daemon_exit(mnt, 10), "daemon outlived its mount"


@pytest.mark.parametrize("flags", [["-f"], ["-d"], ["-f", "-s"]],
                         ids=["foreground", "debug", "foreground-single"])
def test_foreground_modes(tmp_path, flags):
    a = order_shard(tmp_path / "a.tar", "a")
    start_ns = lib.extract_reference_ok([a], tmp_path / "ref")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    errf = open(tmp_path / "stderr.txt", "wb")
    with lib.registered_mount(mnt):
        proc = subprocess.Popen([lib.SHARDFS, *flags, str(a), str(mnt)],
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errf)
        try:
            deadline = time.time() + 30
            while not lib.is_mounted(mnt) and time.time() < deadline:
                assert proc.poll() is None, "shardfs %s exited early (%s)" % (
                    flags, open(tmp_path / "stderr.txt", "rb").read())
                time.sleep(0.05)
            assert lib.is_mounted(mnt)
            lib.compare_trees(mnt, tmp_path / "ref", start_ns)
            assert proc.poll() is None, "foreground process gone while mounted"
            lib.unmount(mnt)
            rc = proc.wait(timeout=15)
            assert rc == 0, "exit %d after unmount" % rc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            errf.close()
    err = open(tmp_path / "stderr.txt", "rb").read()
    if "-d" in flags:
        assert len(err) > 200, "debug mode printed almost nothing: %r" % err


def test_single_threaded_daemon(tmp_path):
    shards = [order_shard(tmp_path / ("%d.tar" % i), "t%d" % i) for i in range(3)]
    start_ns = lib.extract_reference_ok(shards, tmp_path / "ref")
    with lib.mounted(",".join(map(str, shards)), tmp_path / "mnt", "-s"):
        lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)


def test_nonempty_option(tmp_path):
    a = order_shard(tmp_path / "a.tar", "a")
    start_ns = lib.extract_reference_ok([a], tmp_path / "ref")
    mnt = tmp_path / "mnt"
    lib.write_file(os.path.join(mnt, "already-here.txt"), b"hidden\n")
    with lib.mounted(a, mnt, "-o", "nonempty"):
        lib.compare_trees(mnt, tmp_path / "ref", start_ns)
    with open(mnt / "already-here.txt", "rb") as fh:
        assert fh.read() == b"hidden\n"


# ------------------------------------------------ mount(8) and /etc/fstab

def path_env():
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(lib.SHARDFS) + os.pathsep + env.get("PATH", "")
    return env


HELPER_LINK = "/usr/local/sbin/shardfs"


@pytest.fixture
def shardfs_on_default_path():
    """mount(8) (util-linux) drops PATH from the environment of mount
    helpers, so mount.fuse3's `/bin/sh -c 'shardfs ...'` searches the shell's
    default path (/usr/local/sbin:/usr/local/bin:/usr/sbin:...), never the
    PATH we pass.  For the duration of the test, /usr/local/sbin/shardfs is
    a symlink to the binary under test; whatever was there is restored."""
    backup = HELPER_LINK + ".shardfs-test-backup"
    had = os.path.lexists(HELPER_LINK)
    if had:
        os.rename(HELPER_LINK, backup)
    try:
        os.makedirs(os.path.dirname(HELPER_LINK), exist_ok=True)
        os.symlink(lib.SHARDFS, HELPER_LINK)
        yield
    finally:
        if os.path.lexists(HELPER_LINK):
            os.unlink(HELPER_LINK)
        if had:
            os.rename(backup, HELPER_LINK)


def test_mount_t_fuse_shardfs(tmp_path, shardfs_on_default_path):
    d = tmp_path / "s"
    os.makedirs(d)
    shards = [order_shard(d / ("shard-%02d.tar" % i), "m%d" % i) for i in range(4)]
    start_ns = lib.extract_reference_ok(shards, tmp_path / "ref")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    pattern = str(d / "shard-{00..03}.tar")
    with lib.registered_mount(mnt):
        r = lib.run_cmd(["mount", "-t", "fuse.shardfs", pattern, str(mnt),
                         "-o", "ro,allow_other"], env=path_env())
        assert r.returncode == 0, r
        entry = lib.mount_entry(mnt)
        assert entry is not None, "mount(8) returned 0 but nothing is mounted"
        assert entry[1] == "fuse.shardfs", entry
        assert "ro" in entry[2] and "allow_other" in entry[2], entry
        lib.compare_trees(mnt, tmp_path / "ref", start_ns)
        r = lib.run_cmd(["umount", str(mnt)])
        assert r.returncode == 0, r
        assert not lib.is_mounted(mnt)
        assert lib.wait_for_daemon_exit(mnt, 10)


def test_mount_t_fuse_shardfs_bad_shard_fails(tmp_path, shardfs_on_default_path):
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    with lib.registered_mount(mnt):
        r = lib.run_cmd(["mount", "-t", "fuse.shardfs",
                         str(tmp_path / "missing.tar"), str(mnt), "-o", "ro"],
                        env=path_env())
        assert r.returncode != 0, r
        assert not lib.is_mounted(mnt)
        assert str(tmp_path / "missing.tar") in r.stderr, r


def test_fstab_line(tmp_path, shardfs_on_default_path):
    d = tmp_path / "s"
    os.makedirs(d)
    shards = [order_shard(d / ("train-%d.tar" % i), "f%d" % i) for i in range(3)]
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    # The fstab line used (fields: source, mountpoint, type, options):
    #   /tmp/.../s/train-[01].tar,/tmp/.../s/train-2.tar  /tmp/.../mnt  fuse.shardfs  ro,allow_other,noauto,quiet  0  0
    # i.e. a glob followed by one more shard,
    # type fuse.shardfs so that mount(8) runs mount.fuse3, which runs
    # `shardfs SOURCE MOUNTPOINT -o OPTIONS` (found on the default PATH,
    # see shardfs_on_default_path).
    source = "%s,%s" % (d / "train-[01].tar", shards[2])
    line = "%s %s fuse.shardfs ro,allow_other,noauto,quiet 0 0\n" % (source, mnt)
    extract2 = tmp_path / "ref"
    start2 = lib.extract_reference_ok(shards, extract2)
    with open("/etc/fstab", "rb") as f:
        saved = f.read()
    try:
        with open("/etc/fstab", "ab") as f:
            f.write(b"\n" + line.encode())
        with lib.registered_mount(mnt):
            r = lib.run_cmd(["mount", str(mnt)], env=path_env())
            assert r.returncode == 0, r
            entry = lib.mount_entry(mnt)
            assert entry is not None and entry[1] == "fuse.shardfs", entry
            assert "ro" in entry[2]
            lib.compare_trees(mnt, extract2, start2)
            assert lib.parse_summary(r.stderr) is None, "quiet ignored: %r" % r.stderr
            r = lib.run_cmd(["umount", str(mnt)])
            assert r.returncode == 0, r
    finally:
        with open("/etc/fstab", "wb") as f:
            f.write(saved)
    with open("/etc/fstab", "rb") as f:
        assert f.read() == saved


@pytest.mark.parametrize("option,line", [
    ("bogus", "shardfs: fuse: unknown option(s): `-o bogus'"),
    ("max_thread=4", "shardfs: fuse: unknown option(s): `-o max_thread=4'\n"
     "shardfs: unknown option 'max_thread=4': did you mean 'max_threads'?"),
    ("idle_timeout=-1", "shardfs: bad idle_timeout (whole seconds) '-1'"),
    ("idle_timeout=1.5", "shardfs: bad idle_timeout (whole seconds) '1.5'"),
])
def test_bad_options_are_refused_before_any_shard_is_read(tmp_path, option, line):
    """Every option is checked before the scan: no summary, no index file
    written, and one line naming the option (libfuse's message was broken
    over three lines after a full scan), then the option it resembles."""
    d = tmp_path / "set"
    os.makedirs(d)
    shard = order_shard(d / "a.tar", "a")
    mnt = tmp_path / "mnt"
    os.makedirs(mnt)
    r, was_mounted, _ = lib.run_shardfs_expect_failure(str(shard), mnt, "-o", option)
    assert r.returncode == 2 and not was_mounted, r
    assert r.stderr == line + "\n", r.stderr
    assert os.listdir(d) == ["a.tar"], "an index was written: %r" % os.listdir(d)


def test_df_and_proc_mounts_show_the_absolute_source(tmp_path, monkeypatch):
    """SHARDS given relative to the working directory (each item of a
    comma list, a brace list inside an item left as it is) is shown by
    /proc/mounts and df with the working directory in front: where the
    shards are, not how they were named."""
    d = tmp_path / "set"
    os.makedirs(d)
    for tag in ("a", "b", "c"):
        order_shard(d / ("%s.tar" % tag), tag)
    monkeypatch.chdir(tmp_path)
    arg = "set/{a,b}.tar,%s" % (d / "c.tar")
    expected = "%s/set/{a,b}.tar,%s" % (tmp_path, d / "c.tar")
    with lib.mounted(arg, "mnt", "-o", "quiet"):
        source, _, _ = lib.mount_entry(tmp_path / "mnt")
        # /proc/mounts escapes blanks as \040; tmp_path has none
        assert source == expected, source
        r = lib.run_cmd(["df", "--output=source", str(tmp_path / "mnt")])
        assert r.returncode == 0 and r.stdout.splitlines()[1] == expected, r
