#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Remote shards benchmark: a sequential read of shards through an
http:// mount against `curl -o /dev/null` of the same objects from the
same nginx (loopback), with and without limit_rate, side by side in one
run, and a mount of the same shards as local files for reference; plus the request counts of a full read and of random single-file
reads, from /.shardfs/stats.

    /usr/bin/python3 tests/bench/remote_bench.py [--shards N] [--shard-mb M]
        [--limit-rate RATE] [--chunk SIZE]
    /usr/bin/python3 tests/bench/remote_bench.py --index-build --shards 8 \
        --shard-mb 1024 --limit-rate 100m [--scan-threads N]
    /usr/bin/python3 tests/bench/remote_bench.py --ab BUILD_DIR,BUILD_DIR \
        [--rounds N]

--ab compares builds on the warm, unthrottled read alone, alternating
them round by round (the machine drifts by tens of percent between runs).

--index-build times the index build of a fresh mount with
-o index_fetch=stream (every chunk through the chunk cache) against
index_fetch=ranged (one GET per header), cold and warm, with and without
limit_rate.

Needs root (mount, drop_caches), nginx and a build in build/ (or
SHARDFS_BUILD_DIR).  Prints a Markdown table for docs/benchmarks.md.
"""
import argparse
import contextlib
import io
import json
import os
import random
import re
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as lib  # noqa: E402
import system  # noqa: E402


def make_shards(root, shards, shard_mb):
    """SHARDS shards of ~SHARD_MB MiB of 100 KB members (random bytes)."""
    names = []
    for s in range(shards):
        name = "shard-%06d.tar" % s
        with tarfile.open(os.path.join(root, name), "w", format=tarfile.GNU_FORMAT) as t:
            for i in range(shard_mb * 10):
                data = os.urandom(100_000)
                ti = tarfile.TarInfo("s%d/%06d.bin" % (s, i))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
        names.append(name)
    return names


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def curl_all(urls):
    """One curl, one keep-alive connection, every object in turn."""
    argv = ["curl", "-s"]
    for u in urls:
        argv += ["-o", "/dev/null", u]
    start = time.time()
    subprocess.run(argv, check=True)
    return time.time() - start


def read_in_order(mnt):
    """Read every file in shard order (members file: shard, offset)."""
    with open(os.path.join(mnt, ".shardfs", "members")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    rows.sort(key=lambda r: (int(r[1]), int(r[2])))
    total, start = 0, time.time()
    for path, *_ in rows:
        total += len(lib.read_member(os.path.join(mnt, path))[0])
    return time.time() - start, total


def stats(mnt):
    with open(os.path.join(mnt, ".shardfs", "stats")) as f:
        return json.load(f)["remote"]


def one_case(www, work, names, limit, chunk, env):
    out = {}
    with rs.nginx(www, os.path.join(work, "ng-%s" % (limit or "none")),
                  limit_rate=limit) as url:
        urls = ["%s/%s" % (url, n) for n in names]
        spec = "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
        mnt = os.path.join(work, "mnt")
        os.makedirs(mnt, exist_ok=True)
        # build and cache the index first: the read is what is compared
        with lib.mounted(spec, mnt, "-o", "quiet", env=env):
            pass
        for cold in (True, False):
            if cold:
                drop_caches()
            t_curl = curl_all(urls)
            if cold:
                drop_caches()
            with lib.mounted(spec, mnt, "-o", "quiet,chunk_size=%s" % chunk, env=env):
                before = stats(mnt)
                t_mnt, nbytes = read_in_order(mnt)
                after = stats(mnt)
            if cold:
                drop_caches()
            local = ",".join(os.path.join(www, n) for n in names)
            with lib.mounted(local, mnt, "-o", "quiet", env=env):
                t_local, _ = read_in_order(mnt)
            out[cold] = (t_curl, t_mnt, nbytes, after["requests"] - before["requests"],
                         after["bytes"] - before["bytes"], t_local)
    return out


def random_reads(www, work, names, chunk, env, n=50):
    with rs.nginx(www, os.path.join(work, "ng-rand")) as url:
        spec = "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
        mnt = os.path.join(work, "mnt")
        with lib.mounted(spec, mnt, "-o", "quiet", env=env):
            pass    # the index, built and cached
        with lib.mounted(spec, mnt, "-o", "quiet,chunk_size=%s" % chunk, env=env):
            with open(os.path.join(mnt, ".shardfs", "members")) as f:
                rows = [line.split("\t")[0] for line in f]
            random.seed(1)
            before = stats(mnt)["requests"]
            for p in random.sample(rows, n):
                lib.read_member(os.path.join(mnt, p))
            return n, stats(mnt)["requests"] - before


@contextlib.contextmanager
def delay_proxy(upstream, delay_ms):
    """A proxy to UPSTREAM (http://host:port) that holds every request
    for DELAY_MS before forwarding it: a link with that round trip, where
    this machine cannot add latency to loopback (no sch_netem).  GETs
    only, one upstream keep-alive connection per client connection,
    bodies relayed as they arrive.  Yields its base URL."""
    host, port = upstream.split("//")[1].split(":")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)

    def head(f):
        lines = [f.readline()]
        while lines[-1] not in (b"\r\n", b"\n", b""):
            lines.append(f.readline())
        return lines

    def relay(client):
        up = socket.create_connection((host, int(port)))
        for sock in (client, up):   # no Nagle wait between head and body
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cin, uin = client.makefile("rb"), up.makefile("rb")
        try:
            while True:
                request = head(cin)
                if not request[0]:
                    return
                time.sleep(delay_ms / 1000)
                up.sendall(b"".join(request))
                response = head(uin)
                left = sum(int(line.split(b":")[1]) for line in response
                           if line.lower().startswith(b"content-length:"))
                client.sendall(b"".join(response))
                while left:
                    data = uin.read1(min(left, 1 << 20))
                    if not data:
                        return
                    client.sendall(data)
                    left -= len(data)
        except OSError:
            pass
        finally:
            client.close()
            up.close()

    def accept():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()


def build_once(spec, mnt, work, env, fetch, nthreads):
    """One mount with a fresh index cache: (seconds until usable, GETs,
    bytes, mean first-byte latency ms)."""
    cache = tempfile.mkdtemp(dir=work)
    opts = "quiet,index_fetch=%s" % fetch
    opts += ",scan_threads=%d" % nthreads if nthreads else ""
    start = time.time()
    try:
        with lib.mounted(spec, mnt, "-o", opts, env=dict(env, XDG_CACHE_HOME=cache)):
            elapsed = time.time() - start
            st = stats(mnt)
    finally:
        subprocess.run(["rm", "-rf", cache])
    return elapsed, st["requests"], st["bytes"], st["latency_mean_ms"]


VARIANTS = lambda threads: (("stream", 0), ("stream", threads),  # noqa: E731
                            ("ranged", 0), ("ranged", threads))


def index_build(www, work, names, limit, env, threads, delay_ms=0):
    """Mount with a fresh index cache, once per index_fetch with the
    default scan threads (one per CPU) and with THREADS (ranged: as many
    header chains in flight), cold and warm: {(fetch, threads, cold):
    (seconds, GETs, bytes, mean first-byte latency ms)}."""
    out = {}
    with rs.nginx(www, os.path.join(work, "ng-index-%s" % (limit or "none")),
                  limit_rate=limit) as url:
        mnt = os.path.join(work, "mnt")
        with (delay_proxy(url, delay_ms) if delay_ms else contextlib.nullcontext(url)) as url:
            spec = "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
            # through the proxy: warm only (cold measures nginx's disk)
            for cold in (False,) if delay_ms else (True, False):
                for fetch, nthreads in VARIANTS(threads):
                    if cold:
                        drop_caches()
                    out[(fetch, nthreads, cold)] = build_once(spec, mnt, work, env,
                                                              fetch, nthreads)
    return out


def index_build_table(a, work, env):
    """--index-build: both index_fetch strategies side by side."""
    www = os.path.join(work, "www")
    os.makedirs(www, exist_ok=True)
    names = make_shards(www, a.shards, a.shard_mb)
    total = sum(os.path.getsize(os.path.join(www, n)) for n in names)
    print("%d shards, %.2f GB, %d members of 100 KB each\n" % (
        len(names), total / 1e9, a.shard_mb * 10))
    print("| link: nginx limit_rate or proxy delay | caches | index_fetch | scan_threads | build s | "
          "shard GB/s | GETs | MB fetched | mean GET latency ms | ratio to stream |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cases = [(limit, 0) for limit in (None, a.limit_rate)]
    cases += [(None, float(d)) for d in a.delay_ms.split(",") if d]
    for limit, delay in cases:
        res = index_build(www, work, names, limit, env, a.scan_threads, delay)
        link = "+%g ms per request" % delay if delay else limit or "none"
        for (fetch, threads, cold), (t, reqs, nbytes, lat) in res.items():
            base = res[("stream", 0, cold)][0]
            print("| %s | %s | %s | %s | %.2f | %.2f | %d | %.1f | %.2f | %.2f |" % (
                link, "cold" if cold else "warm", fetch,
                threads or "default", t, total / t / 1e9, reqs, nbytes / 1e6,
                lat, t / base))
        sys.stdout.flush()


EPOCH = r"""
import json, sys, time
import torch
from torchvision import datasets, transforms
torch.manual_seed(0)
start = time.time()
ds = datasets.ImageFolder(sys.argv[1], transform=transforms.PILToTensor())
listed = time.time()
n = 0
for x, y in torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2):
    n += len(y)
print(json.dumps({"samples": n, "list_s": listed - start, "epoch_s": time.time() - listed}))
"""


def epoch(root):
    """An ImageFolder DataLoader epoch over ROOT (2 workers, PIL decode),
    in a fresh /usr/bin/python3: {samples, list_s, epoch_s}."""
    r = subprocess.run(["/usr/bin/python3", "-c", EPOCH, root], check=True,
                       capture_output=True, text=True, timeout=1800)
    return json.loads(r.stdout.strip().splitlines()[-1])


# s3rver's own account: both clients talk to s3rver directly (the
# signature-checking proxy of the tests forwards GETs only; s3fs also
# sends HEADs), and s3rver refuses keys it does not know.
S3RVER_KEY = "S3RVER"


class S3rverLog:
    """Requests s3rver answered, from its log: one line per response
    ("info: /bucket/key 206 6ms 5b")."""

    RESPONSE = re.compile(r" \d{3} \d+ms ")

    def __init__(self, path):
        self.path = path

    def count(self):
        with open(self.path, errors="replace") as f:
            return sum(bool(self.RESPONSE.search(line)) for line in f)


@contextlib.contextmanager
def s3fs_mounted(bucket_path, mnt, port, work):
    """s3fs-fuse (Debian's /usr/bin/s3fs) mounting BUCKET_PATH of s3rver
    read-only on MNT; always unmounted."""
    passwd = os.path.join(work, "s3fs.passwd")
    with open(passwd, "w") as f:
        f.write("%s:%s\n" % (S3RVER_KEY, S3RVER_KEY))
    os.chmod(passwd, 0o600)
    os.makedirs(mnt, exist_ok=True)
    with lib.registered_mount(mnt):
        subprocess.run(["s3fs", bucket_path, mnt, "-o", "ro,url=http://127.0.0.1:%d,"
                        "use_path_request_style,passwd_file=%s,endpoint=%s"
                        % (port, passwd, rs.REGION)], check=True, timeout=60)
        deadline = time.time() + 20
        while not lib.is_mounted(mnt):
            if time.time() > deadline:
                raise RuntimeError("s3fs did not mount %s" % mnt)
            time.sleep(0.1)
        yield


def dataloader_phases(name, root, log, stats_of=None):
    """Two epochs over ROOT (the first after drop_caches, the second
    warm): rows of (name, phase, samples/s, listing s, s3rver requests,
    the mount's own count)."""
    rows = []
    for phase in ("cold", "warm"):
        if phase == "cold":
            drop_caches()
        before, own = log.count(), stats_of() if stats_of else None
        r = epoch(root)
        rows.append((name, phase, r["samples"] / r["epoch_s"], r["list_s"],
                     r["samples"], log.count() - before,
                     stats_of() - own if stats_of else None))
    return rows


def dataloader_s3fs(work, env, samples, shards):
    """The same ImageFolder data set as loose objects through s3fs and as
    shards through an s3:// mount, both from one s3rver."""
    import imagedata
    data = os.path.join(work, "imgs")
    shard_paths, _ = imagedata.imagefolder_shards(data, samples, shards)
    stage = os.path.join(data, "stage")    # the same files, loose
    log = S3rverLog(os.path.join(work, "s3rver.log"))
    mnt = os.path.join(work, "mnt")
    rows = []
    with rs.s3rver(work, ["imgs"], log=log.path) as port:
        for p in shard_paths:
            rs.upload(port, "imgs", "shards/" + os.path.basename(p), p)
        loose = 0
        for d, _, files in os.walk(stage):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), stage)
                rs.upload(port, "imgs", "loose/" + rel, os.path.join(d, f))
                loose += 1
        drop_caches()
        before = log.count()
        with s3fs_mounted("imgs:/loose", mnt, port, work):
            mount_reqs = log.count() - before
            rows += [r + (mount_reqs,) for r in
                     dataloader_phases("s3fs (%d objects)" % loose,
                                       os.path.join(mnt, "train"), log)]
        drop_caches()
        before = log.count()
        s3env = dict(env, AWS_ACCESS_KEY_ID=S3RVER_KEY,
                     AWS_SECRET_ACCESS_KEY=S3RVER_KEY,
                     XDG_CACHE_HOME=tempfile.mkdtemp(dir=work))
        with lib.mounted("s3://imgs/shards/", mnt, "-o", "quiet,endpoint=http://"
                         "127.0.0.1:%d,region=%s" % (port, rs.REGION), env=s3env):
            mount_reqs = log.count() - before
            rows += [r + (mount_reqs,) for r in
                     dataloader_phases("shardfs s3:// (%d shards)" % len(shard_paths),
                                       os.path.join(mnt, "train"), log,
                                       lambda: stats(mnt)["requests"])]
    print("%d samples (64x64 JPEG + .cls, %d files, %.1f MB), batch 64, "
          "2 workers, shuffled\n" % (samples, loose, sum(
              os.path.getsize(p) for p in shard_paths) / 1e6))
    print("| mount | epoch | samples/s | ImageFolder listing s | samples | "
          "s3rver requests | shardfs stats requests | requests at mount |")
    print("|---|---|---|---|---|---|---|---|")
    for name, phase, rate, list_s, n, reqs, own, mount_reqs in rows:
        print("| %s | %s | %.0f | %.2f | %d | %d | %s | %d |" % (
            name, phase, rate, list_s, n, reqs, "-" if own is None else own,
            mount_reqs))


def daemon_cpu(mnt):
    """CPU seconds of the daemon serving mnt so far."""
    return system.process_cpu_seconds(system.daemon_pid(mnt))


def warm_ab(www, work, names, builds, rounds, env):
    """The warm, unthrottled read of each build in turn, ROUNDS times (one
    build after the other in each round, so that the machine's drift hits
    both alike): MB/s, daemon CPU, READs and files pushed of each read;
    then the medians, and curl's rate."""
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    runs = {b: [] for b in builds}
    with rs.nginx(www, os.path.join(work, "ng-ab")) as url:
        spec = "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
        urls = ["%s/%s" % (url, n) for n in names]
        with lib.mounted(spec, mnt, "-o", "quiet", env=env):
            pass
        curl_all(urls)
        print("| round | build | MB/s | daemon CPU s | READs | files pushed |")
        print("|---|---|---|---|---|---|")
        for r in range(rounds):
            for b in builds:
                lib.SHARDFS = os.path.join(b, "shardfs")
                with lib.mounted(spec, mnt, "-o", "quiet", env=env):
                    cpu = daemon_cpu(mnt)
                    t, nbytes = read_in_order(mnt)
                    cpu = daemon_cpu(mnt) - cpu
                    with open(os.path.join(mnt, ".shardfs", "stats")) as f:
                        st = json.load(f)
                runs[b].append((nbytes / t / 1e6, cpu))
                print("| %d | %s | %.0f | %.2f | %d | %d |" % (
                    r, b, nbytes / t / 1e6, cpu, st["ops"]["read"]["count"],
                    st["pushahead"]["files"]), flush=True)
        t_curl = curl_all(urls)
    total = sum(os.path.getsize(os.path.join(www, n)) for n in names)
    for b in builds:
        rates, cpus = sorted(x[0] for x in runs[b]), sorted(x[1] for x in runs[b])
        print("\n%s: median %.0f MB/s, daemon CPU %.2f s" % (
            b, rates[len(rates) // 2], cpus[len(cpus) // 2]))
    print("curl: %.0f MB/s" % (total / t_curl / 1e6))


def memory_streams(work, streams, cache_mem, chunk, env):
    """STREAMS shards of 8 MiB read at once, one thread each, through a
    mount with CACHE_MEM: the daemon's peak VmRSS (sampled every 50 ms)."""
    www = os.path.join(work, "www-streams")
    os.makedirs(www, exist_ok=True)
    names = make_shards(www, streams, 8)
    with rs.nginx(www, os.path.join(work, "ng-streams")) as url:
        spec = "%s/shard-{000000..%06d}.tar" % (url, streams - 1)
        mnt = os.path.join(work, "mnt")
        with lib.mounted(spec, mnt, "-o", "quiet", env=env):
            pass    # the index, built and cached
        with lib.mounted(spec, mnt, "-o", "quiet,cache_mem=%s,chunk_size=%s"
                         % (cache_mem, chunk), env=env):
            pid = lib.daemon_pid(mnt)
            with open(os.path.join(mnt, ".shardfs", "members")) as f:
                rows = [line.split("\t") for line in f]
            per_shard = [sorted((int(r[2]), r[0]) for r in rows if int(r[1]) == s)
                         for s in range(streams)]
            peak, done = [lib.vm_rss_kb(pid)], threading.Event()

            def sample():
                while not done.wait(0.05):
                    peak[0] = max(peak[0], lib.vm_rss_kb(pid))

            def stream(files):
                for _, path in files:
                    lib.read_member(os.path.join(mnt, path))

            sampler = threading.Thread(target=sample)
            sampler.start()
            start = time.time()
            readers = [threading.Thread(target=stream, args=(f,)) for f in per_shard]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            elapsed = time.time() - start
            done.set()
            sampler.join()
    total = sum(os.path.getsize(os.path.join(www, n)) for n in names)
    return peak[0] * 1024, total / elapsed / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-mb", type=int, default=128)
    ap.add_argument("--limit-rate", default="50m")
    ap.add_argument("--chunk", default="8M")
    ap.add_argument("--streams", type=int, default=0,
                    help="only measure memory with this many shards streamed at once")
    ap.add_argument("--index-build", action="store_true",
                    help="only time the index build, index_fetch=stream "
                    "against ranged (use --shard-mb 1024 --limit-rate 100m)")
    ap.add_argument("--delay-ms", default="1",
                    help="--index-build: also through a proxy adding these "
                    "delays (ms, comma-separated) to each request, warm only")
    ap.add_argument("--scan-threads", type=int, default=8,
                    help="--index-build: scan threads of the second ranged row")
    ap.add_argument("--dataloader-s3fs", type=int, default=0, metavar="SAMPLES",
                    help="only compare a DataLoader epoch over an s3:// mount "
                    "with s3fs over the same files as loose objects")
    ap.add_argument("--ab", metavar="BUILD_DIR,BUILD_DIR",
                    help="only the warm unthrottled read, these builds in turn")
    ap.add_argument("--rounds", type=int, default=5, help="--ab: rounds")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="shardfs-remote-bench-")
    www = os.path.join(work, "www")
    os.makedirs(www)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))
    if a.streams:
        print("| streams | cache_mem | chunk_size | peak daemon RSS | limit (cache_mem + 64 MiB) | MB/s |")
        print("|---|---|---|---|---|---|")
        for mem, chunk in (("64M", "1M"), ("64M", "8M")):
            rss, rate = memory_streams(work, a.streams, mem, chunk, env)
            limit = (int(mem[:-1]) + 64) << 20
            print("| %d | %s | %s | %.0f MiB | %d MiB | %.0f |" % (
                a.streams, mem, chunk, rss / 2**20, limit >> 20, rate))
        subprocess.run(["rm", "-rf", work])
        return
    if a.dataloader_s3fs:
        try:
            dataloader_s3fs(work, env, a.dataloader_s3fs, a.shards)
        finally:
            subprocess.run(["rm", "-rf", work])
        return
    if a.index_build:
        try:
            index_build_table(a, work, env)
        finally:
            subprocess.run(["rm", "-rf", work])
        return
    names = make_shards(www, a.shards, a.shard_mb)
    if a.ab:
        try:
            warm_ab(www, work, names, a.ab.split(","), a.rounds, env)
        finally:
            subprocess.run(["rm", "-rf", work])
        return
    total = sum(os.path.getsize(os.path.join(www, n)) for n in names)
    print("| nginx limit_rate | caches | curl MB/s | shardfs http:// MB/s | ratio | "
          "shardfs local MB/s | GETs | ceil(size/chunk) | bytes fetched / read |")
    print("|---|---|---|---|---|---|---|---|---|")
    chunk_bytes = int(a.chunk[:-1]) << 20
    bound = sum(-(-os.path.getsize(os.path.join(www, n)) // chunk_bytes) for n in names)
    for limit in (None, a.limit_rate):
        res = one_case(www, work, names, limit, a.chunk, env)
        for cold in (True, False):
            t_curl, t_mnt, nbytes, reqs, fetched, t_local = res[cold]
            print("| %s | %s | %.0f | %.0f | %.2f | %.0f | %d | %d | %.3f |" % (
                limit or "none", "cold" if cold else "warm", total / t_curl / 1e6,
                nbytes / t_mnt / 1e6, t_curl / t_mnt, nbytes / t_local / 1e6,
                reqs, bound, fetched / nbytes))
    n, reqs = random_reads(www, work, names, a.chunk, env)
    print("\nrandom single-file reads: %d files, %d GETs" % (n, reqs))
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
