# SPDX-License-Identifier: Apache-2.0
"""Checks of the deployment files in packaging/, the manual pages and the
operations docs, without installing anything.

- Kubernetes examples: every YAML document parses and has the keys the API
  server requires; Pods reference only volumes they define; the shardfs
  sidecar is a native sidecar with a startup/readiness probe on
  .shardfs/stats and a preStop unmount of the same mount point; mount
  propagation is Bidirectional only where Kubernetes allows it (privileged)
  and HostToContainer on the reader; every container that runs shardfs can
  mount FUSE.
- Dockerfile: Debian has no Dockerfile linter (hadolint is not packaged), so
  a small parser checks what a build would trip over first: known
  instructions, stages referenced by COPY --from defined earlier, JSON-form
  ENTRYPOINT, and that the build stage installs every library -dev package
  that scripts/install-deps.sh installs for the build.
- systemd units: systemd-analyze verify, with warnings counted as failures.
- The textfile-collector script: shellcheck, then run on a fake mount.
- Manual pages (generated into the build directory by
  cmake/Packaging.cmake): groff finds no problem, the version is filled in,
  and every option that `shardfs --help` / `shardfs-pack --help` prints is
  documented.
- A real mount: every metric it exports and every extended attribute it
  lists is documented (docs/operations.md, shardfs(1)).
"""
import gzip
import json
import os
import re
import shlex
import shutil
import sys
import tarfile

import pytest
import yaml

import shardfs_testlib as lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGING = os.path.join(REPO, "packaging")
KUBERNETES_FILES = sorted(
    os.path.join(PACKAGING, "kubernetes", f)
    for f in os.listdir(os.path.join(PACKAGING, "kubernetes"))
    if f.endswith((".yaml", ".yml")))
PROGRAMS = ("shardfs", "shardfs-index", "shardfs-pack")


def need(tool, package):
    """Path of TOOL; fails (not skips) when it is missing, so that a check
    cannot quietly stop running."""
    path = shutil.which(tool)
    if not path:
        pytest.fail("%s not found: apt-get install %s" % (tool, package),
                    pytrace=False)
    return path


# --------------------------------------------------------------- Kubernetes

def yaml_documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def all_containers(spec):
    return spec.get("initContainers", []) + spec["containers"]


def runs_shardfs(container):
    """True when the container's command line starts shardfs."""
    words = " ".join(container.get("command", []) + container.get("args", []))
    return re.search(r"(^|[\s/])shardfs(\s|$)", words) is not None


def shardfs_mountpoint(container):
    """The MOUNTPOINT of the `shardfs ... SHARDS MOUNTPOINT` line that the
    container's shell script runs."""
    script = "\n".join(container.get("args", []))
    for line in script.splitlines():
        words = shlex.split(line)
        if "shardfs" in words:
            rest = words[words.index("shardfs") + 1:]
            rest = [w for w in rest if w not in ("&", ";")]
            return rest[-1]
    raise AssertionError("no shardfs command in %r" % script)


def probe_path(probe):
    """The file a probe reads: `cat FILE`, which (unlike `test -e`) fails
    once shardfs has died even while the kernel caches the file's
    attributes."""
    cmd = probe["exec"]["command"]
    assert cmd[0] == "cat" and len(cmd) == 2, cmd
    return cmd[1]


def test_kubernetes_examples_exist():
    names = [os.path.basename(p) for p in KUBERNETES_FILES]
    assert "shardfs-sidecar.yaml" in names, names


@pytest.mark.parametrize("path", KUBERNETES_FILES, ids=os.path.basename)
def test_kubernetes_documents(path):
    docs = yaml_documents(path)
    assert docs, "no YAML document in %s" % path
    for doc in docs:
        for key in ("apiVersion", "kind", "metadata"):
            assert key in doc, "%s: a document lacks %s" % (path, key)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?",
                            doc["metadata"]["name"]), doc["metadata"]
        if doc["kind"] == "Pod":
            check_pod(doc)


def check_pod(pod):
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert len(volumes) == len(spec["volumes"]), "duplicate volume names"
    names = [c["name"] for c in all_containers(spec)]
    assert len(set(names)) == len(names), "duplicate container names"
    for c in all_containers(spec):
        assert c.get("image"), c["name"]
        sc = c.get("securityContext", {})
        privileged = sc.get("privileged", False)
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, "%s mounts undefined volume %s" % (
                c["name"], m["name"])
            assert m["mountPath"].startswith("/"), m
            prop = m.get("mountPropagation", "None")
            assert prop in ("None", "HostToContainer", "Bidirectional"), m
            # the API server rejects Bidirectional in unprivileged containers
            assert prop != "Bidirectional" or privileged, \
                "%s: Bidirectional needs privileged: true" % c["name"]
        if runs_shardfs(c):
            check_can_mount_fuse(c, volumes)


def check_can_mount_fuse(container, volumes):
    """A container that runs shardfs is privileged, or has CAP_SYS_ADMIN
    and /dev/fuse from a hostPath of type CharDevice."""
    sc = container.get("securityContext", {})
    if sc.get("privileged"):
        return
    assert "SYS_ADMIN" in sc.get("capabilities", {}).get("add", []), \
        "%s runs shardfs without CAP_SYS_ADMIN" % container["name"]
    fuse = [m for m in container.get("volumeMounts", [])
            if m["mountPath"] == "/dev/fuse"]
    assert fuse, "%s runs shardfs without /dev/fuse" % container["name"]
    host = volumes[fuse[0]["name"]].get("hostPath", {})
    assert host == {"path": "/dev/fuse", "type": "CharDevice"}, host


def sidecar_pod():
    path = os.path.join(PACKAGING, "kubernetes", "shardfs-sidecar.yaml")
    return [d for d in yaml_documents(path) if d["kind"] == "Pod"][0]


def test_kubernetes_sidecar_pattern():
    spec = sidecar_pod()["spec"]
    sidecars = [c for c in spec.get("initContainers", []) if runs_shardfs(c)]
    assert len(sidecars) == 1, "expected one shardfs native sidecar"
    sidecar = sidecars[0]
    # native sidecar: starts before and stops after the regular containers
    assert sidecar.get("restartPolicy") == "Always", sidecar
    assert "-f" in " ".join(sidecar["args"]).split(), \
        "the sidecar must run shardfs in the foreground"
    mp = shardfs_mountpoint(sidecar)
    # the trainer starts only once the mount serves; readiness follows it
    for probe in ("startupProbe", "readinessProbe"):
        assert probe_path(sidecar[probe]) == mp + "/.shardfs/stats", probe
    pre_stop = sidecar["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "fusermount3" and pre_stop[1] in ("-u", "-uz") \
        and pre_stop[2] == mp, pre_stop

    # the mount point lies inside a volume that the sidecar shares
    # Bidirectionally and every regular container reads HostToContainer
    shared = [m for m in sidecar["volumeMounts"]
              if mp.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(shared) == 1, "mount point %s not inside a volume" % mp
    assert shared[0]["mountPropagation"] == "Bidirectional", shared
    volume = {v["name"]: v for v in spec["volumes"]}[shared[0]["name"]]
    assert "emptyDir" in volume, volume
    for c in spec["containers"]:
        m = [m for m in c["volumeMounts"] if m["name"] == shared[0]["name"]]
        assert m and m[0]["mountPropagation"] == "HostToContainer", c["name"]


# --------------------------------------------------------------- Dockerfile

DOCKERFILE_INSTRUCTIONS = {
    "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM",
    "HEALTHCHECK", "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL",
    "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}

# -dev packages of scripts/install-deps.sh that only the tests need
TEST_ONLY_DEV_PACKAGES = {"libcmocka-dev", "libclang-rt-14-dev"}


def dockerfile_instructions(path):
    """[(line number, INSTRUCTION, arguments)]: comment and blank lines
    dropped, backslash continuations joined (comment lines inside a
    continuation are skipped, as Docker does)."""
    out = []
    pending = None
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.lstrip().startswith("#") or (not line.strip() and pending is None):
                continue
            continued = line.endswith("\\")
            text = line[:-1] if continued else line
            if pending is None:
                pending = (n, text)
            else:
                pending = (pending[0], pending[1] + " " + text.strip())
            if not continued:
                start, joined = pending
                word, _, args = joined.strip().partition(" ")
                out.append((start, word, args.strip()))
                pending = None
    assert pending is None, "%s ends inside a continuation" % path
    return out


def dockerfile_stages(instructions):
    """[{"name", "base", "instructions"}] in order."""
    stages = []
    for n, word, args in instructions:
        if word.upper() == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            name = words[2].lower() if len(words) == 3 and words[1].upper() == "AS" else None
            assert len(words) in (1, 3), "line %d: FROM %s" % (n, args)
            stages.append({"name": name, "base": words[0], "instructions": []})
        else:
            assert stages, "line %d: %s before the first FROM" % (n, word)
            stages[-1]["instructions"].append((n, word.upper(), args))
    return stages


def apt_packages(run_args):
    """Packages named by the `apt-get install` commands of a RUN line."""
    out = set()
    for command in re.split(r"&&|;|\n", run_args):
        words = command.split()
        if words[:2] == ["apt-get", "install"]:
            out |= {w for w in words[2:] if not w.startswith("-")}
    return out


def install_deps_packages():
    with open(os.path.join(REPO, "scripts", "install-deps.sh")) as f:
        text = f.read().replace("\\\n", " ")
    return apt_packages(text.replace(">/dev/null", ""))


def test_dockerfile():
    path = os.path.join(PACKAGING, "Dockerfile")
    instructions = dockerfile_instructions(path)
    for n, word, args in instructions:
        assert word.upper() in DOCKERFILE_INSTRUCTIONS, \
            "line %d: unknown instruction %s" % (n, word)
        assert word == word.upper(), "line %d: write %s in capitals" % (n, word)
        assert args, "line %d: %s without arguments" % (n, word)
        if word in ("ENTRYPOINT", "CMD") or (word == "RUN" and args.startswith("[")):
            assert isinstance(json.loads(args), list), \
                "line %d: %s must be a JSON array (exec form)" % (n, word)
    stages = dockerfile_stages(instructions)
    assert len(stages) == 2, "expected a build stage and a runtime stage"
    build, final = stages
    names = [s["name"] for s in stages if s["name"]]
    assert len(names) == len(set(names)), "duplicate stage names"
    for i, stage in enumerate(stages):
        assert re.fullmatch(r"debian:(12|bookworm)(-slim)?", stage["base"]), \
            "stage %d is not based on Debian 12: %s" % (i, stage["base"])
        earlier = {s["name"] for s in stages[:i]} | {str(k) for k in range(i)}
        for n, word, args in stage["instructions"]:
            m = re.search(r"--from=(\S+)", args)
            if word in ("COPY", "ADD") and m:
                assert m.group(1).lower() in earlier, \
                    "line %d: --from=%s is not an earlier stage" % (n, m.group(1))

    def runs(stage):
        return " && ".join(a for _, w, a in stage["instructions"] if w == "RUN")

    # the build stage has the toolchain and every library -dev package the
    # project installs for building, and makes the Debian package
    needed = {p for p in install_deps_packages() if p.endswith("-dev")}
    needed -= TEST_ONLY_DEV_PACKAGES
    needed |= {"build-essential", "cmake", "pkg-config"}
    missing = needed - apt_packages(runs(build))
    assert not missing, "build stage lacks %s" % sorted(missing)
    assert "cpack -G DEB" in runs(build)
    # the runtime stage installs that package (and so its Depends) and
    # runs shardfs in the foreground
    copies = [a for _, w, a in final["instructions"] if w == "COPY"]
    assert any("--from=" + build["name"] in a and "shardfs_*.deb" in a
               for a in copies), copies
    assert any(p.endswith("shardfs_*.deb") for p in apt_packages(runs(final)))
    entry = [json.loads(a) for _, w, a in final["instructions"] if w == "ENTRYPOINT"]
    assert entry == [["shardfs", "-f"]], entry

    with open(path + ".dockerignore") as f:
        ignored = f.read().split()
    assert "build*/" in ignored or "build*" in ignored, ignored


# ------------------------------------------------------------ systemd, fstab

def systemd_verify(unit_files):
    """systemd-analyze verify UNIT_FILES; any message fails (unknown keys
    and bad values are only warnings to systemd)."""
    r = lib.run_cmd([need("systemd-analyze", "systemd"), "verify", "--man=no",
                     *[str(u) for u in unit_files]])
    assert r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(), r


def test_mount_unit():
    unit = os.path.join(PACKAGING, "systemd", "mnt-train.mount")
    systemd_verify([unit])
    keys = {}
    with open(unit) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, _, v = line.strip().partition("=")
                keys[k] = v
    assert keys["Type"] == "fuse.shardfs"
    assert {"ro", "allow_other"} <= set(keys["Options"].split(","))
    assert keys["What"].endswith(".tar") or keys["What"].endswith("/")
    # systemd insists on the unit being named after its mount point
    r = lib.run_cmd(["systemd-escape", "-p", "--suffix=mount", keys["Where"]])
    assert r.stdout.strip() == os.path.basename(unit), r


def test_metrics_units(tmp_path):
    """The template service and timer verify as an instance, with the
    collector installed where the service expects it (here: a copy of the
    service naming the script in the source tree)."""
    script = os.path.join(PACKAGING, "metrics", "shardfs-textfile-collector.sh")
    for suffix in ("service", "timer"):
        with open(os.path.join(PACKAGING, "systemd", "shardfs-metrics@." + suffix)) as f:
            text = f.read()
        text = text.replace("/usr/local/sbin/shardfs-textfile-collector", script)
        (tmp_path / ("shardfs-metrics@mnt-train." + suffix)).write_text(text)
    assert os.access(script, os.X_OK), "%s is not executable" % script
    systemd_verify([tmp_path / "shardfs-metrics@mnt-train.timer",
                              tmp_path / "shardfs-metrics@mnt-train.service"])


def test_fstab_example():
    lines = []
    with open(os.path.join(PACKAGING, "fstab.example")) as f:
        for line in f:
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(line.split())
    assert lines
    for fields in lines:
        assert len(fields) == 6, fields
        assert fields[2] == "fuse.shardfs", fields
        assert "ro" in fields[3].split(","), fields


# ------------------------------------------------------- metrics collector

COLLECTOR = os.path.join(PACKAGING, "metrics", "shardfs-textfile-collector.sh")


def test_collector_shellcheck():
    r = lib.run_cmd([need("shellcheck", "shellcheck"), COLLECTOR])
    assert r.returncode == 0, r.stdout


def test_collector_labels_and_failure(tmp_path):
    """On a fake mount: every sample gets mountpoint="..." (escaped as the
    Prometheus text format wants), comments stay; when the metrics cannot
    be read the .prom file is removed and the command fails."""
    mp = tmp_path / 'm"x\\y'
    (mp / ".shardfs").mkdir(parents=True)
    (mp / ".shardfs" / "metrics").write_text(
        "# HELP shardfs_files Regular files served.\n"
        "# TYPE shardfs_files gauge\n"
        "shardfs_files 3\n"
        "shardfs_other{op=\"read\"} 1\n")
    out = tmp_path / "collector"
    out.mkdir()
    r = lib.run_cmd(["sh", COLLECTOR, str(mp), str(out)])
    assert r.returncode == 0, r
    prom = out / ("shardfs-" + str(mp).lstrip("/").replace("/", "-") + ".prom")
    assert sorted(os.listdir(out)) == [prom.name], os.listdir(out)
    label = 'mountpoint="%s"' % str(mp).replace("\\", "\\\\").replace('"', '\\"')
    assert prom.read_text().splitlines() == [
        "# HELP shardfs_files Regular files served.",
        "# TYPE shardfs_files gauge",
        "shardfs_files{%s} 3" % label,
        "shardfs_other{%s,op=\"read\"} 1" % label]
    (mp / ".shardfs" / "metrics").unlink()
    r = lib.run_cmd(["sh", COLLECTOR, str(mp), str(out)])
    assert r.returncode != 0 and os.listdir(out) == [], r


# ------------------------------------------------------------- manual pages

def built_programs():
    return [p for p in PROGRAMS if os.access(lib.binary(p), os.X_OK)]


def man_page(program):
    """(roff source, rendered text) of PROGRAM(1) as generated into the
    build directory."""
    page = os.path.join(lib.BUILD_DIR, "man", program + ".1")
    if not os.path.exists(page):
        pytest.fail("%s missing: is include(cmake/Packaging.cmake) in the "
                    "top CMakeLists.txt?" % page, pytrace=False)
    with open(page) as f:
        source = f.read()
    with gzip.open(page + ".gz", "rt") as f:
        assert f.read() == source, "%s.gz is stale" % page
    # -ww: every warning; -rLL/-rHY: long lines, no hyphenation, so that
    # options can be searched for in the text
    r = lib.run_cmd([need("groff", "groff-base"), "-man", "-Tutf8", "-ww",
                     "-rLL=200n", "-rHY=0", "-P", "-cbou", page])
    assert r.returncode == 0 and not r.stderr, "groff: %s" % r.stderr
    # justification widens spaces: make every run of blanks one space
    return source, re.sub(r"[ \t]+", " ", r.stdout)


def project_version():
    with open(os.path.join(lib.BUILD_DIR, "CMakeCache.txt")) as f:
        return re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(.*)$", f.read(), re.M).group(1)


def help_options(program):
    """Every option that PROGRAM --help prints: "-o NAME" for mount
    options ("-o uid" of "-o uid=N"), "-x" and "--long" for the others."""
    r = lib.run_cmd([lib.binary(program), "--help"])
    assert r.returncode == 0, r
    options = set()
    for line in r.stdout.splitlines():
        # an option list starts each line: "-o uid=N", "-h, --help",
        # "-d   -o debug", "    --shuffle[=SEED]"
        m = re.match(r"\s+((?:(?:-o \w+|--?[\w-]+)(?:,? +|\b))+)", line)
        if m:
            options |= set(re.findall(r"-o \w+|--?[\w-]+", m.group(1)))
    return options


@pytest.mark.parametrize("program", PROGRAMS)
def test_man_page_renders(program):
    if program not in built_programs():
        pytest.skip("%s is not part of this build" % program)
    source, text = man_page(program)
    assert not re.search(r"@[A-Z_]+@", source), \
        "unsubstituted @VAR@ in %s(1)" % program
    assert ".TH %s 1 " % program.upper() in source
    assert "shardfs %s" % project_version() in text
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS",
                    "EXIT STATUS", "SEE ALSO"):
        assert re.search(r"^%s$" % section, text, re.M), \
            "%s(1) has no %s section" % (program, section)


@pytest.mark.parametrize("program", PROGRAMS)
def test_man_page_documents_every_option(program):
    if program not in built_programs():
        pytest.skip("%s is not part of this build" % program)
    _, text = man_page(program)
    missing = sorted(o for o in help_options(program) if o not in text)
    assert not missing, "%s(1) does not document %s" % (program, missing)


def test_shardfs_pace_man_page():
    """shardfs-pace(1) (a Python command: its options come from the
    installed package's --help) renders cleanly and documents every
    option and exit status."""
    source, text = man_page("shardfs-pace")
    assert ".TH SHARDFS-PACE 1 " in source
    assert "shardfs %s" % project_version() in text
    r = lib.run_cmd([sys.executable, "-m", "shardfs.pace", "--help"])
    assert r.returncode == 0, r
    options = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", r.stdout))
    assert "--global-batch" in options, r.stdout
    missing = sorted(o for o in options if o not in text)
    assert not missing, "shardfs-pace(1) does not document %s" % missing
    for code in range(3):
        assert re.search(r"^ %d " % code, text, re.M), "exit status %d" % code
    assert "11,703 samples/s" in text


def test_shardfs_man_page_contents():
    _, text = man_page("shardfs")
    for needle in ("SIGTERM", "SIGKILL", "Transport endpoint is not connected",
                   "fusermount3 -u", ".shardfs/stats", ".shardfs/shards",
                   ".shardfs/members", ".shardfs/metrics", "fuse.shardfs",
                   "NOTIFY_SOCKET", "/etc/fstab"):
        assert needle in text, "shardfs(1) does not mention %r" % needle
    for code in range(3):
        assert re.search(r"^ %d " % code, text, re.M), "exit status %d" % code
    assert "0 success, 1 failure, 2 usage error" in " ".join(text.split())


# ------------------------------------------- docs against a real mount

def test_docs_match_a_mount(tmp_path):
    """The metric names of .shardfs/metrics are exactly those documented in
    docs/operations.md, and shardfs(1) documents every extended attribute
    that a file of the mount lists."""
    shard = tmp_path / "shard-0.tar"
    src = tmp_path / "src"
    lib.write_file(str(src / "a" / "0001.txt"), b"hello\n")
    with tarfile.open(shard, "w") as t:
        t.add(src / "a", arcname="a")
    mnt = tmp_path / "mnt"
    with lib.mounted(shard, mnt, "-o", "quiet"):
        with open(mnt / ".shardfs" / "metrics") as f:
            exported = {line.split()[0].split("{")[0] for line in f
                        if line.strip() and not line.startswith("#")}
        xattrs = set(os.listxattr(mnt / "a" / "0001.txt"))
    with open(os.path.join(REPO, "docs", "operations.md")) as f:
        # a labelled series is documented once per label value
        documented = set(re.findall(r"^\| `(shardfs_\w+)(?:\{[^}`]*\})?` \|",
                                    f.read(), re.M))
    assert exported == documented, (
        "exported but not in docs/operations.md: %s; documented but not "
        "exported: %s" % (sorted(exported - documented),
                          sorted(documented - exported)))
    _, text = man_page("shardfs")
    assert xattrs and all(x in text for x in xattrs), xattrs


# ------------------------------------------------------------ licensing

SPDX = "SPDX-License-Identifier: Apache-2.0"
ADD_SPDX = os.path.join(REPO, "scripts", "add-spdx.sh")


def test_license_file():
    """LICENSE is the full Apache License 2.0, and the Python package
    declares the same."""
    with open(os.path.join(REPO, "LICENSE")) as f:
        text = f.read()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"], text[:200]
    for needle in ("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
                   "9. Accepting Warranty or Additional Liability.",
                   "END OF TERMS AND CONDITIONS",
                   "APPENDIX: How to apply the Apache License to your work."):
        assert needle in text, needle
    with open(os.path.join(REPO, "python", "pyproject.toml")) as f:
        assert 'license = {text = "Apache-2.0"}' in f.read()


def test_every_source_file_has_an_spdx_line():
    """Every C, header, Python, shell, CMake and TOML file under src/,
    include/, tests/ (tests/data aside: third-party data), python/,
    scripts/, cmake/ and packaging/ carries the SPDX line in its first
    lines; `scripts/add-spdx.sh` adds it where it is missing."""
    r = lib.run_cmd(["sh", ADD_SPDX, "--check", REPO])
    assert r.returncode == 0 and not r.stdout, \
        "no %s line (run scripts/add-spdx.sh):\n%s" % (SPDX, r.stdout)


def test_add_spdx_script(tmp_path):
    """The script puts the line first (after a #! line), in the comment
    style of the file, keeps modes, leaves other files and tests/data
    alone, and changes nothing the second time."""
    files = {
        "src/a.c": "/*\n * a.c - a\n */\nint a;\n",
        "include/shardfs/b.h": "#pragma once\n",
        "src/fuzz/CMakeLists.txt": "add_executable(x x.c)\n",
        "scripts/tool": "#!/bin/sh\necho hi\n",
        "python/p.py": '"""Doc."""\nimport os\n',
        "tests/t.sh": "#!/bin/sh\n# t\n",
        "tests/data/third_party.py": "x = 1\n",
        "src/fuzz/tar.dict": '"ustar"\n',
        "python/README.md": "# p\n",
        "tests/done.py": "# %s\nx = 1\n" % SPDX,
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    os.chmod(tmp_path / "scripts/tool", 0o755)
    os.chmod(tmp_path / "tests/t.sh", 0o755)
    lib.run_cmd(["git", "init", "-q", str(tmp_path)])
    assert lib.run_cmd(["git", "-C", str(tmp_path), "add", "."]).returncode == 0

    r = lib.run_cmd(["sh", ADD_SPDX, "--check", str(tmp_path)])
    assert r.returncode == 1 and sorted(r.stdout.split()) == sorted(
        ["src/a.c", "include/shardfs/b.h", "src/fuzz/CMakeLists.txt",
         "scripts/tool", "python/p.py", "tests/t.sh"]), r
    for _ in range(2):
        r = lib.run_cmd(["sh", ADD_SPDX, str(tmp_path)])
        assert r.returncode == 0, r
        got = {n: (tmp_path / n).read_text() for n in files}
        assert got == {
            "src/a.c": "/* %s */\n" % SPDX + files["src/a.c"],
            "include/shardfs/b.h": "/* %s */\n#pragma once\n" % SPDX,
            "src/fuzz/CMakeLists.txt": "# %s\nadd_executable(x x.c)\n" % SPDX,
            "scripts/tool": "#!/bin/sh\n# %s\necho hi\n" % SPDX,
            "python/p.py": "# %s\n" % SPDX + files["python/p.py"],
            "tests/t.sh": "#!/bin/sh\n# %s\n# t\n" % SPDX,
            "tests/data/third_party.py": files["tests/data/third_party.py"],
            "src/fuzz/tar.dict": files["src/fuzz/tar.dict"],
            "python/README.md": files["python/README.md"],
            "tests/done.py": files["tests/done.py"],
        }
    assert os.stat(tmp_path / "scripts/tool").st_mode & 0o777 == 0o755
    assert lib.run_cmd(["sh", ADD_SPDX, "--check", str(tmp_path)]).returncode == 0
