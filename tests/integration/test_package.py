# SPDX-License-Identifier: Apache-2.0
"""The Debian package, end to end, as an administrator would use it.

Builds the package from this source tree in a temporary build directory
(`cmake -DCMAKE_BUILD_TYPE=Release`, `cmake --build`, `cpack -G DEB`),
checks its name, control fields and contents, installs it with
`apt-get install ./shardfs_*.deb`, and then, with the installed
/usr/bin/shardfs:

- mounts a generated shard set with `mount -t fuse.shardfs ... -o
  ro,allow_other` and through an /etc/fstab line (`mount MOUNTPOINT`),
  compares each mount with `tar -x` of the shards, and unmounts;
- runs the Kubernetes sidecar's own start command, probes, and preStop
  hook (taken from packaging/kubernetes/shardfs-sidecar.yaml), including a
  restart after the sidecar was killed with SIGKILL, and the start command
  of shardfs-in-trainer.yaml on good and on missing shards;
- runs the node-exporter collector installed with the examples on the
  mount;
- imports the Python package with Debian's /usr/bin/python3 and runs
  /usr/bin/shardfs-pace.

Without installing: the copyright file parses as Debian's machine-readable
format and names the license of the sources and of each third-party test
data directory; Depends is exactly what the programs link (plus fuse3
and python3); lintian reports no error and no warning.

The package is always removed at the end (`apt-get remove`), so that its
/usr/bin/shardfs never shadows the build tree's binary for other tests,
and /etc/fstab is always restored.  Root only: it installs packages.
"""
import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time

import pytest
import yaml

import shardfs_testlib as lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAMS = ("shardfs", "shardfs-index", "shardfs-pack")
PREFIX = "/usr"
DOC = PREFIX + "/share/doc/shardfs"
# What the package depends on besides the libraries the programs link:
# fuse3 for fusermount3 and mount.fuse3, python3 for shardfs-pace and the
# Python package.  test_package_contents_and_dependencies checks that the
# rest of Depends is exactly the packages of the libraries loaded.
NON_LIBRARY_DEPENDS = {"fuse3", "python3"}
PYTHON_DIR = PREFIX + "/lib/python3/dist-packages/shardfs"
PYTHON_MODULES = ("__init__.py", "torch.py", "pace.py", "py.typed")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0,
                       reason="installs a package: run as root"),
    pytest.mark.timeout(600),
]


def run_ok(argv, **kw):
    r = lib.run_cmd(argv, **kw)
    assert r.returncode == 0, r
    return r


def apt_env():
    return dict(os.environ, DEBIAN_FRONTEND="noninteractive")


# ---------------------------------------------------------------- building

@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """Build the package; yields (path of the .deb, build directory)."""
    build = tmp_path_factory.mktemp("package-build")
    run_ok(["cmake", "-S", REPO, "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_TESTING=OFF"], timeout=300)
    run_ok(["cmake", "--build", str(build), "-j%d" % (os.cpu_count() or 1)],
           timeout=600)
    if not os.path.exists(build / "CPackConfig.cmake"):
        pytest.fail("no CPack configuration: is include(cmake/Packaging.cmake) "
                    "in the top CMakeLists.txt?", pytrace=False)
    run_ok(["cpack", "-G", "DEB", "--config", str(build / "CPackConfig.cmake"),
            "-B", str(build)], timeout=300)
    debs = sorted(p for p in os.listdir(build) if p.endswith(".deb"))
    assert len(debs) == 1, debs
    yield build / debs[0], build


def cache_value(build, name):
    with open(build / "CMakeCache.txt") as f:
        return re.search(r"^%s:\w+=(.*)$" % name, f.read(), re.M).group(1)


def control_fields(deb):
    r = run_ok(["dpkg-deb", "-f", str(deb)])
    fields = {}
    for line in r.stdout.splitlines():
        if line[:1] not in (" ", ""):
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def depends_names(depends):
    """Package names of a Depends field, versions and alternatives aside."""
    return {re.split(r"[\s(:]", alt.strip())[0]
            for dep in depends.split(",") for alt in dep.split("|")}


def built_programs(build):
    return [p for p in PROGRAMS if os.access(build / p, os.X_OK)]


def test_package_name_and_control(package):
    deb, build = package
    version = cache_value(build, "CMAKE_PROJECT_VERSION")
    arch = run_ok(["dpkg", "--print-architecture"]).stdout.strip()
    assert deb.name == "shardfs_%s_%s.deb" % (version, arch)
    f = control_fields(deb)
    assert f["Package"] == "shardfs"
    assert f["Version"] == version
    assert f["Architecture"] == arch
    assert f["Section"] == "utils"
    assert re.fullmatch(r".+ <[^@\s]+@[^>\s]+>", f["Maintainer"]), f
    assert f["Description"].startswith("mount WebDataset TAR shards"), f
    assert "Homepage" not in f
    assert NON_LIBRARY_DEPENDS <= depends_names(f["Depends"]), f["Depends"]


def test_package_contents_and_dependencies(package, tmp_path):
    """Every program of the build, with its manual page, and the docs are
    in the package; every shared library the programs link against
    directly belongs to a package named in Depends (or to libc6, which is
    always there); those packages bring their own dependencies, as
    dpkg-shlibdeps would have it."""
    deb, build = package
    listing = run_ok(["dpkg-deb", "-c", str(deb)]).stdout
    files = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    for program in built_programs(build):
        assert "%s/bin/%s" % (PREFIX, program) in files, program
        assert "%s/share/man/man1/%s.1.gz" % (PREFIX, program) in files, program
    docs = ["README.md"] + [d for d in os.listdir(os.path.join(REPO, "docs"))
                            if d.endswith(".md")]
    for doc in docs:
        assert "%s/%s" % (DOC, doc) in files, doc
    for example in ("examples/fstab.example", "examples/systemd/mnt-train.mount",
                    "examples/kubernetes/shardfs-sidecar.yaml",
                    "examples/metrics/shardfs-textfile-collector.sh"):
        assert "%s/%s" % (DOC, example) in files, example
    for doc in ("copyright", "changelog.gz"):
        assert "%s/%s" % (DOC, doc) in files, doc
    for module in PYTHON_MODULES:
        assert "%s/%s" % (PYTHON_DIR, module) in files, module
    for path in (PREFIX + "/bin/shardfs-pace",
                 PREFIX + "/share/man/man1/shardfs-pace.1.gz"):
        assert path in files, path
    modes = {line.split()[-1].lstrip("."): line.split()[0]
             for line in listing.splitlines()}
    for executable in (DOC + "/examples/metrics/shardfs-textfile-collector.sh",
                       PREFIX + "/bin/shardfs-pace"):
        assert modes[executable] == "-rwxr-xr-x", (executable, modes[executable])

    root = tmp_path / "unpacked"
    run_ok(["dpkg-deb", "-x", str(deb), str(root)])
    depends = depends_names(control_fields(deb)["Depends"])
    libraries = {path for program in built_programs(build)
                 for path in shared_libraries(root / PREFIX.lstrip("/") / "bin" / program)}
    linked = packages_of(libraries)
    # libc6 always; nothing that no program links (libarchive13 was)
    assert depends - NON_LIBRARY_DEPENDS == linked | {"libc6"}, (
        "Depends %s, the programs link %s" % (sorted(depends), sorted(linked)))


def test_lintian(package):
    """No error and no warning; the informational tags kept are listed
    with the reasons in docs/operations.md (Packaging)."""
    deb, _ = package
    tool = shutil.which("lintian")
    if not tool:
        pytest.fail("lintian not found: apt-get install lintian", pytrace=False)
    r = lib.run_cmd([tool, "--tag-display-limit", "0", str(deb)], timeout=300)
    tags = [line for line in r.stdout.splitlines() if line[:2] in ("E:", "W:")]
    assert r.returncode == 0 and not tags, r.stdout + r.stderr


def dep5_paragraphs(text):
    """Debian control-file paragraphs as dicts (continuation lines joined
    with newlines)."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields, key = {}, None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line[1:]
            else:
                key, _, value = line.partition(":")
                assert key and _ and key not in fields, "bad line %r" % line
                fields[key] = value.strip()
        paragraphs.append(fields)
    return paragraphs


def test_copyright_file(package, tmp_path):
    """Machine-readable (DEP-5): the header, Files: * under Apache-2.0, a
    paragraph with its own license for each directory of third-party test
    data (tests/data/conformance/*/ and tests/data/fuzz-seeds/*/, each
    listed where it says where it comes from), and the text of every
    license named."""
    deb, _ = package
    root = tmp_path / "unpacked"
    run_ok(["dpkg-deb", "-x", str(deb), str(root)])
    with open(root / DOC.lstrip("/") / "copyright") as f:
        header, *rest = dep5_paragraphs(f.read())
    assert header["Format"] == \
        "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    assert header["Upstream-Name"] == "shardfs"
    files = {pattern: p for p in rest if "Files" in p
             for pattern in p["Files"].split()}
    texts = {p["License"].split("\n")[0]: p["License"] for p in rest
             if "Files" not in p}
    assert files["*"]["License"] == "Apache-2.0"
    # each directory of third-party data, with the file that says where
    # it comes from
    for data, listing in (("conformance", "SOURCES.md"),
                          ("fuzz-seeds", "README.md")):
        top = os.path.join(REPO, "tests", "data", data)
        with open(os.path.join(top, listing)) as f:
            sources = f.read()
        for d in sorted(os.listdir(top)):
            if os.path.isdir(os.path.join(top, d)):
                assert "%s/" % d in sources, "%s/%s not in %s" % (data, d, listing)
                p = files.get("tests/data/%s/%s/*" % (data, d))
                assert p, "copyright has no Files: paragraph for %s/%s" % (data, d)
                assert p["License"] != "Apache-2.0" and p["Copyright"], p
    for p in files.values():
        name = p["License"].split("\n")[0]
        assert len(texts.get(name, "").splitlines()) > 5, \
            "no license text for %s" % name
    assert "/usr/share/common-licenses/Apache-2.0" in texts["Apache-2.0"]


def shared_libraries(binary):
    """Paths of the shared libraries BINARY links against directly: its
    DT_NEEDED entries (readelf), located where ldd finds them."""
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]",
                            run_ok(["readelf", "-d", str(binary)]).stdout))
    r = run_ok(["ldd", str(binary)])
    return [m.group(2) for m in re.finditer(r"^\s*(\S+) => (/\S+)", r.stdout, re.M)
            if m.group(1) in needed]


def packages_of(paths):
    """The Debian packages owning PATHS, each tried under its /usr/lib and
    /lib spellings of a merged-/usr system.  One dpkg -S for all of them:
    each call reads dpkg's whole file database (0.3 s here)."""
    spellings = {}
    for path in paths:
        candidates = {path, os.path.realpath(path)}
        candidates |= {c[len("/usr"):] if c.startswith("/usr/") else "/usr" + c
                       for c in list(candidates)}
        spellings[path] = candidates
    r = lib.run_cmd(["dpkg", "-S", *sorted(set().union(*spellings.values()))])
    owner = {}
    for line in r.stdout.splitlines():
        package, _, path = line.partition(": ")
        owner[path.strip()] = package.split(":")[0].strip()
    packages = set()
    for path, candidates in spellings.items():
        found = [owner[c] for c in candidates if c in owner]
        assert found, "no package owns %s" % path
        packages.add(found[0])
    return packages


# --------------------------------------------------------------- installed

MANDB_AUTO_UPDATE = "/var/lib/man-db/auto-update"


@contextlib.contextmanager
def mandb_index_kept():
    """man-db's trigger does not rebuild its index of every manual page on
    the host while the package is installed and removed (20 s of the 30
    that apt-get took here): its debconf answer auto-update, cached as
    MANDB_AUTO_UPDATE, is moved aside as Debian's build chroots have it,
    and always put back."""
    aside = MANDB_AUTO_UPDATE + ".shardfs-test"
    moved = os.path.exists(MANDB_AUTO_UPDATE)
    if moved:
        os.rename(MANDB_AUTO_UPDATE, aside)
    try:
        yield
    finally:
        if moved:
            os.rename(aside, MANDB_AUTO_UPDATE)


@pytest.fixture(scope="module")
def installed(package):
    """The package installed with apt-get (which pulls in Depends); always
    removed afterwards."""
    deb, _ = package
    shadows = [p for p in ("/usr/local/sbin/shardfs", "/usr/local/bin/shardfs")
               if os.path.lexists(p)]
    if shadows:
        pytest.fail("%s would shadow the package's /usr/bin/shardfs for "
                    "mount.fuse3" % shadows, pytrace=False)
    with mandb_index_kept():
        try:
            run_ok(["apt-get", "install", "-y", "--no-install-recommends",
                    str(deb)], env=apt_env(), timeout=600)
            yield
        finally:
            lib.run_cmd(["apt-get", "remove", "-y", "shardfs"], env=apt_env(),
                        timeout=600)
    assert not os.path.exists(PREFIX + "/bin/shardfs"), \
        "apt-get remove left /usr/bin/shardfs behind"
    assert not os.path.exists(PYTHON_DIR), \
        "apt-get remove left %s behind (prerm's py3clean?)" % PYTHON_DIR


@pytest.fixture
def shard_set(tmp_path):
    """Three small WebDataset shards (samples key.jpg/.cls/.json under
    train/), their tar -x reference and its start time.  Returns
    (SHARDS argument, shard directory, reference, start_ns)."""
    src = tmp_path / "src"
    shards = tmp_path / "shards"
    shards.mkdir()
    paths = []
    for s in range(3):
        members = []
        for k in range(4):
            key = "train/%06d" % (s * 4 + k)
            for ext, data in (("jpg", lib.deterministic_bytes(key, 3000 + k)),
                              ("cls", b"%d\n" % (k % 2)),
                              ("json", b'{"label": %d}\n' % (k % 2))):
                lib.write_file(str(src / ("%s.%s" % (key, ext))), data)
                members.append("%s.%s" % (key, ext))
        path = shards / ("shard-%06d.tar" % s)
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
            for m in members:
                t.add(src / m, arcname=m)
        paths.append(path)
    ref = tmp_path / "ref"
    start_ns = lib.extract_reference_ok(paths, ref)
    return str(shards / "shard-{000000..000002}.tar"), shards, ref, start_ns


def served_by_package(mnt):
    """The mount's daemon is the installed /usr/bin/shardfs."""
    pids = lib.processes_mentioning(str(mnt))
    assert pids, "no shardfs process serves %s" % mnt
    exes = {os.readlink("/proc/%d/exe" % p) for p in pids}
    assert exes == {PREFIX + "/bin/shardfs"}, exes


def check_mount(mnt, ref, start_ns):
    entry = lib.mount_entry(mnt)
    assert entry is not None, "nothing mounted on %s" % mnt
    assert entry[1] == "fuse.shardfs", entry
    assert {"ro", "allow_other"} <= set(entry[2]), entry
    served_by_package(mnt)
    lib.compare_trees(mnt, ref, start_ns)
    assert os.path.exists(os.path.join(mnt, ".shardfs", "stats"))


def unmount_ok(mnt):
    run_ok(["umount", str(mnt)])
    assert not lib.is_mounted(mnt)
    assert lib.wait_for_daemon_exit(mnt, 10), "shardfs outlived its mount"


def test_installed_python_package(installed):
    """Debian's python3 imports the package from dist-packages (byte-
    compiled by postinst), and shardfs-pace runs."""
    r = run_ok(["/usr/bin/python3", "-c",
                "import shardfs, shardfs.torch, shardfs.pace; "
                "print(shardfs.torch.__file__)"], env={"PATH": "/usr/bin:/bin"})
    assert r.stdout.strip() == PYTHON_DIR + "/torch.py", r.stdout
    assert os.listdir(PYTHON_DIR + "/__pycache__"), "postinst compiled nothing"
    r = run_ok([PREFIX + "/bin/shardfs-pace", "--help"])
    assert "--global-batch" in r.stdout and "--step-time" in r.stdout, r
    r = lib.run_cmd([PREFIX + "/bin/shardfs-pace"])
    assert r.returncode == 2 and "required: DIR" in r.stderr, r
    r = run_ok(["/usr/bin/python3", "-m", "shardfs.pace", "--help"], env={})
    assert "shardfs-pace" in r.stdout


def test_installed_files(installed, package):
    _, build = package
    r = run_ok([PREFIX + "/bin/shardfs", "--version"])
    assert cache_value(build, "CMAKE_PROJECT_VERSION") in r.stdout
    for program in built_programs(build):
        page = run_ok(["man", "-w", program]).stdout.strip()
        assert page == "%s/share/man/man1/%s.1.gz" % (PREFIX, program), page
        run_ok(["man", "-P", "cat", program], env=dict(os.environ, MANWIDTH="80"))


def test_mount_t_fuse_shardfs(installed, shard_set, tmp_path):
    shards, _, ref, start_ns = shard_set
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with lib.registered_mount(mnt):
        run_ok(["mount", "-t", "fuse.shardfs", shards, str(mnt),
                "-o", "ro,allow_other"])
        check_mount(mnt, ref, start_ns)
        unmount_ok(mnt)


def test_fstab_line(installed, shard_set, tmp_path):
    """The fstab line of the documentation (packaging/fstab.example):
    ro,allow_other,nofail."""
    shards, _, ref, start_ns = shard_set
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with open("/etc/fstab", "rb") as f:
        saved = f.read()
    try:
        with open("/etc/fstab", "ab") as f:
            f.write(b"\n%s %s fuse.shardfs ro,allow_other,nofail 0 0\n"
                    % (shards.encode(), bytes(mnt)))
        with lib.registered_mount(mnt):
            run_ok(["mount", str(mnt)])
            check_mount(mnt, ref, start_ns)
            unmount_ok(mnt)
    finally:
        with open("/etc/fstab", "wb") as f:
            f.write(saved)


# ------------------------------------------- Kubernetes example commands

def example_pod(name):
    with open(os.path.join(REPO, "packaging", "kubernetes", name)) as f:
        return [d for d in yaml.safe_load_all(f) if d and d["kind"] == "Pod"][0]


def localize(text, mapping):
    """TEXT with the container paths of MAPPING replaced by local ones.
    Only whole paths or their prefixes are replaced ("/shards" in
    "/shards/" but not in "/mnt/shardfs/shards"), in one pass."""
    pattern = re.compile(r"(?<![\w./-])(%s)(?=/|\s|$)" % "|".join(
        re.escape(p) for p in sorted(mapping, key=len, reverse=True)))
    return pattern.sub(lambda m: str(mapping[m.group(1)]), text)


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


class Sidecar:
    """The shardfs sidecar of shardfs-sidecar.yaml, run here: its start
    command, probe and preStop hook, with the container's volume paths
    mapped to local directories."""

    def __init__(self, shard_dir, volume):
        spec = example_pod("shardfs-sidecar.yaml")["spec"]
        self.container = [c for c in spec["initContainers"]
                          if c["name"] == "shardfs"][0]
        paths = {m["name"]: m["mountPath"] for m in self.container["volumeMounts"]}
        self.mapping = {paths["shards"]: shard_dir, paths["shardfs"]: volume}
        self.proc = None

    def start(self, log):
        """Run the start command (its output to LOG, not a pipe that the
        daemon could fill)."""
        cmd = self.container["command"] + [localize(a, self.mapping)
                                           for a in self.container["args"]]
        with open(log, "ab") as f:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=f, stderr=f)

    def probe(self, name):
        cmd = [localize(a, self.mapping)
               for a in self.container[name]["exec"]["command"]]
        return subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0

    def pre_stop(self):
        cmd = [localize(a, self.mapping) for a in
               self.container["lifecycle"]["preStop"]["exec"]["command"]]
        run_ok(cmd)

    def mountpoint(self):
        script = localize("\n".join(self.container["args"]), self.mapping)
        return script.split()[-1]


def test_sidecar_lifecycle(installed, shard_set, tmp_path):
    """Start, startup/readiness probes, SIGKILL (the trainer then sees
    ENOTCONN), restart over the dead mount, preStop unmount, exit 0."""
    _, shard_dir, ref, start_ns = shard_set
    volume = tmp_path / "emptydir"
    volume.mkdir()
    sidecar = Sidecar(shard_dir, volume)
    mnt = sidecar.mountpoint()
    log = tmp_path / "sidecar.log"
    with lib.registered_mount(mnt):
        sidecar.start(log)
        wait_for(lambda: sidecar.probe("startupProbe"), 60, "the startup probe")
        assert sidecar.probe("readinessProbe")
        lib.compare_trees(mnt, ref, start_ns)

        # killed without unmounting: the mount stays, dead; requests the
        # kernel is tearing down fail with ECANCELED or ECONNABORTED for a
        # few milliseconds, then every request says ENOTCONN
        sidecar.proc.send_signal(signal.SIGKILL)
        sidecar.proc.wait()
        assert lib.wait_until(lambda: lib.listdir_errno(mnt) == errno.ENOTCONN, 10), \
            os.strerror(lib.listdir_errno(mnt))
        assert not sidecar.probe("readinessProbe")

        # the restarted sidecar clears the dead mount and mounts again
        sidecar.start(log)
        wait_for(lambda: sidecar.probe("startupProbe"), 60, "the restarted mount")
        lib.compare_trees(mnt, ref, start_ns)

        sidecar.pre_stop()
        assert sidecar.proc.wait(timeout=10) == 0, log.read_text()
        assert not lib.is_mounted(mnt)
        assert not sidecar.probe("readinessProbe")


def trainer_script(shard_dir, mnt, listing):
    """The start command of shardfs-in-trainer.yaml with local paths, the
    training replaced by writing the file list to LISTING."""
    c = example_pod("shardfs-in-trainer.yaml")["spec"]["containers"][0]
    paths = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    script = localize("\n".join(c["args"]),
                      {paths["shards"]: shard_dir, "/mnt/shards": mnt})
    script, n = re.subn(r"exec python3 .*", "find %s -type f > %s" % (mnt, listing),
                        script)
    assert n == 1, script
    return c["command"] + [script]


def test_in_trainer_start_command(installed, shard_set, tmp_path):
    _, shard_dir, ref, _ = shard_set
    mnt = tmp_path / "mnt"
    listing = tmp_path / "listing"
    with lib.registered_mount(mnt):
        run_ok(trainer_script(shard_dir, mnt, listing), timeout=60)
        with open(listing) as f:
            seen = {os.path.relpath(p, mnt) for p in f.read().split()}
        expected = {os.path.relpath(os.path.join(d, n), ref)
                    for d, _, names in os.walk(ref) for n in names}
        assert seen == expected
    # on a shard set that cannot be served the command fails with
    # shardfs' exit status instead of starting the training
    r = lib.run_cmd(trainer_script(tmp_path / "missing", tmp_path / "mnt2",
                                   listing), timeout=60)
    assert r.returncode == 1, r
    assert not lib.is_mounted(tmp_path / "mnt2")


# ------------------------------------------------------ metrics collector

def test_textfile_collector(installed, shard_set, tmp_path):
    """The collector installed with the examples exports the mount's
    metrics, each sample labelled with the mount point."""
    shards, _, _, _ = shard_set
    mnt = tmp_path / "mnt"
    out = tmp_path / "textfile"
    out.mkdir()
    collector = DOC + "/examples/metrics/shardfs-textfile-collector.sh"
    with lib.registered_mount(mnt):
        mnt.mkdir()
        run_ok(["mount", "-t", "fuse.shardfs", shards, str(mnt), "-o", "ro"])
        run_ok(["sh", collector, str(mnt), str(out)])
        unmount_ok(mnt)
    prom = out / ("shardfs-%s.prom" % str(mnt).lstrip("/").replace("/", "-"))
    samples = [line for line in prom.read_text().splitlines()
               if not line.startswith("#")]
    assert samples
    label = '{mountpoint="%s"}' % mnt
    # the mount point first, then a series' own labels, if any
    labelled = r'shardfs_\w+\{mountpoint="%s"(,\w+="[^"]*")*\} \S+' % re.escape(str(mnt))
    assert all(re.fullmatch(labelled, s) for s in samples), samples
    assert any(',access="random"}' in s for s in samples), samples
    assert "shardfs_files%s 36" % label in samples
    # the mount is gone: the stale file goes too
    assert lib.run_cmd(["sh", collector, str(mnt), str(out)]).returncode != 0
    assert not prom.exists()
