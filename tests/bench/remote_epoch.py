#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 29's benchmark of remote shards: one node's share of a shuffled
epoch through a shardfs mount of the shards against the same files as
loose objects, side by side in one run, from the same server.

The data set is remote_shuffled.make_set's (SAMPLES ImageFolder samples,
a JPEG of ~100 KB and a .cls each, in 8 GNU-tar shards, and the same
files loose), with cache_mem set small (32M) rather than the set large,
so that the set is >= 4x cache_mem.  For each store:

  http   nginx serving the shards and the loose files; against shardfs,
         a loader making one GET per file (http.client, one keep-alive
         connection per thread)
  s3     s3rver holding the shards under set/ and the files under loose/,
         every client signing with s3rver's own key; against shardfs, the
         same loader with botocore (one get_object per file) and s3fs-fuse
         mounting bucket:/loose

each share (the rank-0 share of DistributedSampler(num_replicas=N,
shuffle=True, seed=0) for N = 1 .. 32, a RandomSampler epoch, and for the
mount ShardAwareSampler's epoch order; the loose clients read those same
files in that order) is read by every client in turn: a fresh mount each
(index cached before), the listing first (os.walk of train/, as
ImageFolder does; the GET loader lists s3 with ListObjectsV2 and is given
the names over http), then the files by 2 threads; each client --rounds
times (3), in alternated order, and the median run kept (the machine is
shared: ratios of runs side by side, never absolute rates).  For each
--dataloader N (1 and 8) the share is also read as a training job does:
ImageFolder (or a dataset of GETs) with PIL decode, Resize((64, 64)),
DataLoader(batch_size=32, num_workers=2), in a fresh /usr/bin/python3,
and for N = 1 on the mount with ShardAwareSampler too; with cache_dir,
the N = 2 share in two epochs on two shardfs mounts.

Requests are the server's (nginx's access log, s3rver's log lines) in the
read, the listing counted apart; bytes fetched are the mount's
(/.shardfs/stats; s3rver's log does not tell a HEAD from a GET, so none
for s3fs); daemon CPU is the mount's daemon's utime + stime
(/proc/PID/stat), the loader's own process CPU for the loader; daemon
switches are the voluntary context switches of all the daemon's threads
(/proc/PID/task/*/status) in the threads rows' reads.

    /usr/bin/python3 tests/bench/remote_epoch.py [--samples 2000] \
        [--stores http,s3] [--dataloader 1,8] [--only dist-1,random] \
        [--rounds 3] [--threads 2] [--delay-ms D] [BUILD_DIR]

--delay-ms D sends the http clients through remote_bench.delay_proxy,
which holds each request D ms: a link with that round trip, where
loopback has none (nor can this machine add it).

Prints one Markdown table (docs/remote.md) and writes every figure to
--results DIR/remote-epoch-<UTC time>.json.  Needs root (mounts),
nginx, s3rver (npm), s3fs and Debian's Python (torch).
"""
import argparse
import concurrent.futures
import contextlib
import datetime
import http.client
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import remote_servers as rs  # noqa: E402
import shardfs_testlib as lib  # noqa: E402
import system  # noqa: E402
from remote_bench import S3RVER_KEY, S3rverLog, delay_proxy, s3fs_mounted  # noqa: E402
from remote_shuffled import SHARDS, make_set, order, shard_names  # noqa: E402

THREADS = 2
BATCH = 32
BUCKET = "bench"
MODES = [("dist", n) for n in (1, 2, 4, 8, 16, 32)] + [("random",), ("shard-aware",)]


def mode_name(mode):
    return "-".join(str(m) for m in mode)


class MountReader:
    """Files read through a FUSE mount at ROOT served by PROGRAM's daemon."""

    def __init__(self, root, program):
        self.root, self.program = root, program
        self.pid = system.daemon_pid(root, program)

    def list(self):
        for _ in os.walk(os.path.join(self.root, "train")):
            pass

    def read(self, name):
        with open(os.path.join(self.root, name), "rb") as f:
            return len(f.read())

    def cpu(self):
        return system.process_cpu_seconds(self.pid)

    def switches(self):
        return system.voluntary_switches(self.pid)

    def fetched(self):
        """The mount's own count of body bytes fetched (shardfs only)."""
        if self.program != "shardfs":
            return None
        import remote_site
        return remote_site.settled_stats(self.root)["bytes"]


class HttpGets:
    """The loose files fetched one GET each from BASE (http://host:port/
    prefix), one keep-alive connection per thread; names given (a
    manifest: nginx lists nothing)."""

    def __init__(self, base):
        self.base = base
        hostport, self.prefix = base.split("//")[1].split("/", 1)
        self.host, self.port = hostport.split(":")
        self.local = threading.local()

    def list(self):
        pass

    def get(self, name):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, int(self.port))
        conn.request("GET", "/%s/%s" % (self.prefix, name))
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError("GET %s: %d" % (name, resp.status))
        return data

    def read(self, name):
        return len(self.get(name))

    def cpu(self):
        return time.process_time()

    def fetched(self):
        return None


class S3Gets(HttpGets):
    """The loose objects fetched one signed get_object each (botocore,
    its own connection pool), listed with ListObjectsV2."""

    def __init__(self, endpoint, prefix="loose/"):
        self.endpoint, self.prefix, self.client = endpoint, prefix, None

    def _client(self):
        if self.client is None:
            import botocore.session
            from botocore.config import Config
            self.client = botocore.session.get_session().create_client(
                "s3", endpoint_url=self.endpoint, region_name=rs.REGION,
                aws_access_key_id=S3RVER_KEY, aws_secret_access_key=S3RVER_KEY,
                config=Config(s3={"addressing_style": "path"},
                              max_pool_connections=THREADS))
        return self.client

    def list(self):
        pages = self._client().get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=self.prefix + "train/")
        return [o["Key"][len(self.prefix):] for p in pages for o in p.get("Contents", [])
                if o["Key"].endswith(".jpg")]

    def get(self, name):
        return self._client().get_object(Bucket=BUCKET, Key=self.prefix + name)["Body"].read()


class Store:
    """One server holding the shards and the loose files, and the clients
    that read them: (name, session factory) pairs, shardfs first."""

    def __init__(self, name, spec, opts, env, requests, loader, s3fs=None):
        self.name, self.spec, self.opts, self.env = name, spec, opts, env
        self.requests, self.loader, self.s3fs = requests, loader, s3fs

    @contextlib.contextmanager
    def shardfs(self, work, cache_mem, cache_dir=None):
        mnt = os.path.join(work, "mnt")
        opts = self.opts + ["-o", "cache_mem=%s" % cache_mem]
        if cache_dir:
            opts += ["-o", "cache_dir=%s" % cache_dir]
        with lib.mounted(self.spec, mnt, *opts, env=self.env):
            yield MountReader(mnt, "shardfs")

    def clients(self, work, cache_mem):
        out = [("shardfs", lambda: self.shardfs(work, cache_mem)),
               ("GET loader", lambda: contextlib.nullcontext(self.loader))]
        if self.s3fs:
            out.append(("s3fs", lambda: self.s3fs(work)))
        return out


@contextlib.contextmanager
def delayed(url, delay_ms):
    """remote_bench.delay_proxy (each request held DELAY_MS: a link with
    that round trip) in a process of its own, so that its relaying does
    not take the GIL from the loader's threads; yields its URL."""
    import multiprocessing
    here, there = multiprocessing.Pipe()

    def serve():
        with delay_proxy(url, delay_ms) as proxied:
            there.send(proxied)
            there.recv()
    proc = multiprocessing.Process(target=serve, daemon=True)
    proc.start()
    try:
        yield here.recv()
    finally:
        here.send(None)
        proc.join(10)


@contextlib.contextmanager
def http_store(work, delay_ms=0):
    ng = os.path.join(work, "ng")
    with rs.nginx(os.path.join(work, "www"), ng) as direct, \
            (delayed(direct, delay_ms) if delay_ms else contextlib.nullcontext(direct)) as url:
        spec = "%s/shard-{00..%02d}.tar" % (url, SHARDS - 1)
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "xdg-http"))
        yield Store("http" + (" +%g ms" % delay_ms if delay_ms else ""), spec, [], env,
                    lambda: len(rs.access_log(ng)), HttpGets(url + "/loose"))


@contextlib.contextmanager
def s3_store(work):
    """s3rver with the shards under set/ and the files under loose/, all
    clients straight to it with its own key (the tests' signature-checking
    proxy forwards GETs only, and s3fs sends HEADs)."""
    www = os.path.join(work, "www")
    log = S3rverLog(os.path.join(work, "s3rver.log"))
    with rs.s3rver(work, [BUCKET], log=log.path) as port:
        uploads = [("set/" + n, os.path.join(www, n)) for n in shard_names(www)]
        for d, _, files in os.walk(os.path.join(www, "loose")):
            uploads += [(os.path.relpath(os.path.join(d, f), www), os.path.join(d, f))
                        for f in files]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda u: rs.upload(port, BUCKET, *u), uploads))
        endpoint = "http://127.0.0.1:%d" % port
        env = dict(os.environ, AWS_ACCESS_KEY_ID=S3RVER_KEY, AWS_SECRET_ACCESS_KEY=S3RVER_KEY,
                   XDG_CACHE_HOME=os.path.join(work, "xdg-s3"))

        def s3fs(w):
            return _s3fs_reader(w, port)
        yield Store("s3", "s3://%s/set/" % BUCKET,
                    ["-o", "endpoint=%s,region=%s" % (endpoint, rs.REGION)], env,
                    log.count, S3Gets(endpoint), s3fs)


@contextlib.contextmanager
def _s3fs_reader(work, port):
    mnt = os.path.join(work, "mnt-s3fs")
    with s3fs_mounted("%s:/loose" % BUCKET, mnt, port, work):
        yield MountReader(mnt, "s3fs")


def settle(store):
    """The server's request count once it stopped moving (a mount's
    read-ahead may still be in flight when the reads return)."""
    n = store.requests()
    while True:
        time.sleep(0.3)
        now = store.requests()
        if now == n:
            return n
        n = now


def threads_epoch(store, reader, names):
    """The listing, then NAMES read by THREADS threads: figures of the
    reads (requests and bytes from the server, CPU of the daemon)."""
    r0, t0 = store.requests(), time.monotonic()
    reader.list()
    out = {"list_s": time.monotonic() - t0}
    r1 = settle(store)
    out["list_requests"] = r1 - r0
    cpu, fetched = reader.cpu(), reader.fetched()
    switches = getattr(reader, "switches", lambda: None)()
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        out["used"] = sum(pool.map(reader.read, names))
    out["seconds"] = time.monotonic() - start
    if switches is not None:
        out["switches"] = reader.switches() - switches
    out["fetched"] = reader.fetched() - fetched if fetched is not None else None
    out["requests"] = settle(store) - r1
    out["cpu"] = reader.cpu() - cpu
    out["samples"] = len(names)
    return out


def dataloader_epoch(store, reader, kind, source, sampler):
    """SAMPLER's share read by a DataLoader in a fresh /usr/bin/python3
    (run_child); requests and daemon CPU counted between its listing and
    the end of its epoch."""
    argv = ["/usr/bin/python3", os.path.abspath(__file__), "--child", kind, source, sampler]
    r0 = store.requests()
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        listed = json.loads(proc.stdout.readline())
        r1 = settle(store)
        cpu, fetched = reader.cpu(), reader.fetched()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out = json.loads(proc.stdout.readline())
    if proc.returncode:
        raise RuntimeError("DataLoader epoch failed: %r" % argv)
    out.update(list_s=listed["list_s"], list_requests=r1 - r0, requests=settle(store) - r1,
               cpu=reader.cpu() - cpu if kind == "mount" else None,
               fetched=reader.fetched() - fetched if fetched is not None else None)
    return out


def run_child(kind, source, sampler):
    """--child: list (ImageFolder over a mount, or a dataset of GETs),
    tell the parent, wait for its word, then one DataLoader epoch; prints
    {list_s} and {samples, seconds, used}."""
    import torch
    from torchvision import datasets, transforms
    start = time.monotonic()
    tf = transforms.Compose([transforms.Resize((64, 64)), transforms.PILToTensor()])
    if kind == "mount":
        ds = datasets.ImageFolder(os.path.join(source, "train"), transform=tf)
    else:
        ds = GetFolder(source, tf)
    print(json.dumps({"list_s": time.monotonic() - start}), flush=True)
    sys.stdin.readline()
    if sampler == "shard-aware":
        from shardfs.torch import ShardAwareSampler
        smp = ShardAwareSampler(ds, num_replicas=1, rank=0, seed=0)
    else:
        smp = torch.utils.data.DistributedSampler(ds, num_replicas=int(sampler), rank=0,
                                                  shuffle=True, seed=0)
    start, n = time.monotonic(), 0
    for _, y in torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=smp, num_workers=2):
        n += len(y)
    print(json.dumps({"samples": n, "seconds": time.monotonic() - start}), flush=True)


class GetFolder:
    """ImageFolder's samples and decode, its bytes one GET each: SOURCE
    is "http:BASE:MANIFEST" or "s3:ENDPOINT" (listed)."""

    def __init__(self, source, transform):
        kind, rest = source.split(":", 1)
        if kind == "http":
            base, manifest = rest.rsplit(":", 1)
            self.make = lambda: HttpGets(base)
            with open(manifest) as f:
                names = f.read().split()
        else:
            self.make = lambda: S3Gets(rest)
            names = self.make().list()
        classes = sorted({n.split("/")[1] for n in names})
        self.samples = [(n, classes.index(n.split("/")[1])) for n in sorted(names)]
        self.transform, self.client = transform, None

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        from PIL import Image
        if self.client is None:         # one per DataLoader worker
            self.client = self.make()
        name, target = self.samples[i]
        image = Image.open(io.BytesIO(self.client.get(name))).convert("RGB")
        return self.transform(image), target


def shard_aware_order(mnt):
    """ShardAwareSampler's epoch 0 (one rank) over ImageFolder on MNT, as
    names relative to MNT."""
    from torchvision import datasets
    from shardfs.torch import ShardAwareSampler
    ds = datasets.ImageFolder(os.path.join(mnt, "train"), loader=lambda p: None)
    return [os.path.relpath(ds.samples[i][0], mnt)
            for i in ShardAwareSampler(ds, num_replicas=1, rank=0, seed=0)]


def median_run(runs):
    """The run of median samples/s (a real run: its counters agree)."""
    return sorted(runs, key=lambda r: r["samples"] / r["seconds"])[len(runs) // 2]


def share_names(mode, jpgs, aware):
    return aware if mode[0] == "shard-aware" else order(jpgs, mode)


def figures(res):
    """The row's derived figures."""
    n = res["samples"]
    seconds = res.get("seconds")
    return {"per_s": n / seconds if seconds else None,
            "requests_per_sample": res["requests"] / n,
            "cpu_ms": 1000 * res["cpu"] / n if res.get("cpu") is not None else None,
            "switches": res["switches"] / n if res.get("switches") is not None else None}


def measure_store(a, work, store, sizes, results):
    jpgs = sorted(n for n in sizes if n.endswith(".jpg"))
    with store.shardfs(work, a.cache_mem) as r:      # the index, built and cached
        aware = shard_aware_order(r.root)
    modes = [m for m in MODES if not a.only or mode_name(m) in a.only.split(",")]
    clients = store.clients(work, a.cache_mem)
    for mode in modes:
        names = share_names(mode, jpgs, aware)
        row = {"store": store.name, "share": mode_name(mode), "form": "threads",
               "load": system.load_average(), "rounds": {c: [] for c, _ in clients}}
        for r in range(a.rounds):     # alternated: the machine's drift hits all alike
            for client, session in clients if r % 2 == 0 else clients[::-1]:
                with session() as reader:
                    row["rounds"][client].append(threads_epoch(store, reader, names))
        row["clients"] = {c: median_run(runs) for c, runs in row["rounds"].items()}
        results.append(row)
        print_row(row)
    for n in a.dataloader:
        dataloader_rows(a, work, store, sizes, jpgs, aware, n, results)
    if not a.no_cache_dir:
        cache_dir_rows(a, work, store, order(jpgs, ("dist", 2)), results)


def dataloader_rows(a, work, store, sizes, jpgs, aware, n, results):
    manifest = os.path.join(work, "manifest-%s" % store.name)
    with open(manifest, "w") as f:
        f.write("\n".join(jpgs))
    source = ("http:%s:%s" % (store.loader.base, manifest) if store.name.startswith("http")
              else "s3:" + store.loader.endpoint)
    for sampler in ([str(n)] + (["shard-aware"] if n == 1 else [])):
        mode = ("shard-aware",) if sampler == "shard-aware" else ("dist", n)
        used = sum(sizes[f] for f in share_names(mode, jpgs, aware))
        row = {"store": store.name, "share": mode_name(mode), "form": "DataLoader",
               "load": system.load_average(), "clients": {}}
        for client, session in store.clients(work, a.cache_mem):
            if sampler == "shard-aware" and client != "shardfs":
                continue
            with session() as reader:
                kind = "get" if client == "GET loader" else "mount"
                res = dataloader_epoch(store, reader, kind,
                                       source if kind == "get" else reader.root, sampler)
                row["clients"][client] = dict(res, used=used)
        results.append(row)
        print_row(row)


def cache_dir_rows(a, work, store, names, results):
    cache_dir = tempfile.mkdtemp(prefix="cd-", dir=work)
    for e in (1, 2):
        with store.shardfs(work, a.cache_mem, cache_dir) as reader:
            res = threads_epoch(store, reader, names)
        row = {"store": store.name, "share": "dist-2, cache_dir, epoch %d" % e,
               "form": "threads", "load": system.load_average(), "clients": {"shardfs": res}}
        results.append(row)
        print_row(row)


HEADER = ("| store | share | read by | samples | shardfs: fetched ÷ used | requests / sample "
          "| listing requests | daemon CPU ms / sample | daemon switches / sample | samples/s "
          "| GET loader: samples/s "
          "| shardfs ÷ loader | loader CPU ms / sample | s3fs: requests / sample "
          "| listing requests | daemon CPU ms / sample | samples/s | shardfs ÷ s3fs "
          "| shardfs ÷ s3fs, listing included | load |")


def fmt(v, spec="%.2f"):
    return "–" if v is None else spec % v


def with_listing(res):
    """Samples/s of the listing and the reads together."""
    return res["samples"] / (res["list_s"] + res["seconds"])


def print_row(row):
    c = row["clients"]
    sh = c["shardfs"]
    f = figures(sh)
    ratio = sh["fetched"] / sh["used"] if sh.get("fetched") is not None and sh.get("used") \
        else None
    cells = [row["store"], row["share"], row["form"], str(sh["samples"]), fmt(ratio),
             fmt(f["requests_per_sample"]), str(sh["list_requests"]), fmt(f["cpu_ms"]),
             fmt(f["switches"], "%.1f"), fmt(f["per_s"], "%.0f")]
    ld = c.get("GET loader")
    if ld:
        g = figures(ld)
        cells += [fmt(g["per_s"], "%.0f"), fmt(f["per_s"] / g["per_s"]), fmt(g["cpu_ms"])]
    else:
        cells += ["–"] * 3
    s3 = c.get("s3fs")
    if s3:
        g = figures(s3)
        cells += [fmt(g["requests_per_sample"]), str(s3["list_requests"]), fmt(g["cpu_ms"]),
                  fmt(g["per_s"], "%.0f"), fmt(f["per_s"] / g["per_s"]),
                  fmt(with_listing(sh) / with_listing(s3))]
    else:
        cells += ["–"] * 6
    cells.append("%.1f" % row["load"])
    print("| " + " | ".join(cells) + " |", flush=True)


def print_table(rows):
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    for row in rows:
        print_row(row)


def main():
    global THREADS
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return run_child(*sys.argv[2:5])
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--cache-mem", default="32M")
    ap.add_argument("--stores", default="http,s3")
    ap.add_argument("--only", help="threads-form shares to run, e.g. dist-1,random")
    ap.add_argument("--dataloader", default="1,8",
                    help="DistributedSampler N of the DataLoader rows, comma-separated ('' none)")
    ap.add_argument("--no-cache-dir", action="store_true")
    ap.add_argument("--rounds", type=int, default=3,
                    help="threads rows: each client this many times, alternated; the median")
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="threads rows: reader threads (and the loader's)")
    ap.add_argument("--delay-ms", type=float, default=0,
                    help="http: through a proxy holding each request this long")
    ap.add_argument("--results", default="results")
    ap.add_argument("--table", metavar="JSON", help="only print the table of a results file")
    ap.add_argument("build", nargs="?", default=None)
    a = ap.parse_args()
    if a.table:
        with open(a.table) as f:
            return print_table(json.load(f)["rows"])
    a.dataloader = [int(n) for n in a.dataloader.split(",") if n]
    THREADS = a.threads
    if a.build:
        lib.SHARDFS = os.path.abspath(os.path.join(a.build, "shardfs"))
    import testlib_mount
    testlib_mount.SHARDFS = lib.SHARDFS
    work = tempfile.mkdtemp(prefix="remote-epoch-")
    results = []
    try:
        run(a, work, results)
    finally:
        subprocess.run(["rm", "-rf", work])
        save(a, results)


def run(a, work, results):
    os.makedirs(os.path.join(work, "www"))
    sizes = make_set(work, a.samples)
    total = sum(os.path.getsize(os.path.join(work, "www", n))
                for n in shard_names(os.path.join(work, "www")))
    print("set: %d samples, %.0f MB in %d shards; cache_mem=%s; %d reader threads; %s; "
          "load %s" % (a.samples, total / 1e6, SHARDS, a.cache_mem, THREADS, lib.SHARDFS,
                       open("/proc/loadavg").read().split()[:3]))
    print_table([])
    for name in a.stores.split(","):
        with (http_store(work, a.delay_ms) if name == "http" else s3_store(work)) as store:
            measure_store(a, work, store, sizes, results)


def save(a, results):
    os.makedirs(a.results, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    path = os.path.join(a.results, "remote-epoch-%s.json" % stamp)
    with open(path, "w") as f:
        json.dump({"args": {k: v for k, v in vars(a).items()}, "rows": results}, f, indent=1)
    print("results: %s" % path)


if __name__ == "__main__":
    main()
