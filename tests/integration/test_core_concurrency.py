# SPDX-License-Identifier: Apache-2.0
"""Concurrent reads: 8+ threads read random members at random offsets and
lengths for a bounded time (SHARDFS_STRESS_SECONDS, as the stress suite:
default 10 s per test; tests/run.sh gives 5), some keeping files open,
some reopening every time, some listing directories and stat'ing.  Every
byte read is checked against the source bytes, which are taken from GNU
tar's extraction of the same shards (and checked equal to the mount tree
beforehand)."""
import os
import random
import threading
import time

import pytest

import shardfs_testlib as lib

DURATION = float(os.environ.get("SHARDFS_STRESS_SECONDS", "10"))
THREADS = 10


def build_shards(tmp_path):
    rnd = random.Random(1234)
    shards = []
    for k in range(4):
        src = tmp_path / ("src%d" % k)
        for i in range(25):
            size = rnd.choice([0, 1, 511, 512, 513, 4096, 65536 + 3,
                               rnd.randrange(1, 3 << 20)])
            lib.write_file(os.path.join(src, "d%d" % (i % 5), "k%d_f%02d.bin" % (k, i)),
                           lib.deterministic_bytes(("conc", k, i), size))
        # a sparse member too (served from a GNU sparse map)
        sp = os.path.join(src, "d0", "k%d_sparse.bin" % k)
        with open(sp, "wb") as f:
            f.truncate(6 << 20)
            for j in range(6):
                f.seek(j * (1 << 20) + 1000 * k)
                f.write(lib.deterministic_bytes(("sp", k, j), 20000))
        lib.finish_dirs(src)
        shards.append(lib.gnu_tar_create(
            tmp_path / ("s%d.tar" % k), src, ["d0", "d1", "d2", "d3", "d4"],
            "posix", extra=["--sparse"]))
    return shards


@pytest.mark.timeout(180)
@pytest.mark.parametrize("options", [[], ["-o", "max_threads=4"]],
                         ids=["default", "max_threads=4"])
def test_concurrent_random_reads(tmp_path, options):
    shards = build_shards(tmp_path)
    start_ns = lib.extract_reference_ok(shards, tmp_path / "ref")
    ref = tmp_path / "ref"
    mnt = tmp_path / "mnt"
    files = {}
    for dirpath, _, names in os.walk(ref):
        for n in names:
            full = os.path.join(dirpath, n)
            with open(full, "rb") as fh:
                files[os.path.relpath(full, ref)] = fh.read()
    rels = sorted(files)
    dirs = sorted({os.path.dirname(r) for r in rels})
    errors = []
    counts = [0] * THREADS
    stop = time.time() + DURATION

    def reader(idx):
        rnd = random.Random(idx)
        fds = {}
        try:
            while time.time() < stop and not errors:
                mode = idx % 3
                rel = rnd.choice(rels)
                data = files[rel]
                size = len(data)
                off = rnd.randrange(0, size + 2) if rnd.random() < 0.9 else \
                    rnd.choice([0, max(0, size - 1), size, size + 4096])
                ln = rnd.choice([1, 17, 511, 512, 4096, 65536, 131072 + 5,
                                 rnd.randrange(1, 1 << 20)])
                if mode == 2 and rnd.random() < 0.2:
                    d = rnd.choice(dirs)
                    got = sorted(os.listdir(os.path.join(mnt, d)))
                    want = sorted(os.listdir(os.path.join(ref, d)))
                    if got != want:
                        errors.append("listdir %s differs" % d)
                    st = os.stat(os.path.join(mnt, rel))
                    if st.st_size != size:
                        errors.append("stat %s size %d != %d" % (rel, st.st_size, size))
                    continue
                if mode == 0:      # long-lived descriptors, pread
                    fd = fds.get(rel)
                    if fd is None:
                        fd = fds[rel] = os.open(os.path.join(mnt, rel), os.O_RDONLY)
                    got = os.pread(fd, ln, off)
                else:              # open, seek, read, close every time
                    with open(os.path.join(mnt, rel), "rb", buffering=0) as fh:
                        fh.seek(off)
                        got = fh.read(ln)
                if got != data[off:off + ln]:
                    errors.append("%s: %d bytes at %d: got %d bytes, mismatch"
                                  % (rel, ln, off, len(got)))
                counts[idx] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("thread %d: %r" % (idx, e))
        finally:
            for fd in fds.values():
                os.close(fd)

    with lib.mounted(",".join(map(str, shards)), mnt, *options):
        lib.compare_trees(mnt, ref, start_ns)
        stop = time.time() + DURATION
        threads = [threading.Thread(target=reader, args=(i,))
                   for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DURATION + 60)
        alive = [t for t in threads if t.is_alive()]
        assert not alive, "%d reader threads hung" % len(alive)
    assert not errors, errors[:20]
    assert sum(counts) > 200, "too few reads completed: %r" % counts
    assert all(c > 0 for i, c in enumerate(counts) if i % 3 != 2), counts


@pytest.mark.timeout(120)
def test_parallel_processes_cat_same_files(tmp_path):
    """Several processes (not threads) stream whole files at once."""
    shards = build_shards(tmp_path)
    start_ns = lib.extract_reference_ok(shards, tmp_path / "ref")
    mnt = tmp_path / "mnt"
    with lib.mounted(",".join(map(str, shards)), mnt):
        rels = []
        for dirpath, _, names in os.walk(tmp_path / "ref"):
            rels += [os.path.relpath(os.path.join(dirpath, n), tmp_path / "ref")
                     for n in names]
        rels.sort()
        procs = []
        import subprocess
        for i in range(6):
            subset = rels[i::3]
            procs.append(subprocess.Popen(
                ["sha256sum", *subset], cwd=mnt, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE))
        want_cmd = subprocess.run(["sha256sum", *rels], cwd=tmp_path / "ref",
                                  stdout=subprocess.PIPE, check=True)
        want = dict(l.split(b"  ", 1)[::-1] for l in want_cmd.stdout.splitlines())
        for p in procs:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, err
            for line in out.splitlines():
                digest, name = line.split(b"  ", 1)
                assert want[name] == digest, name
        lib.compare_trees(mnt, tmp_path / "ref", start_ns)
