# SPDX-License-Identifier: Apache-2.0
"""Real servers on loopback for the remote shard tests, started and always
stopped by the tests themselves, each on a free port of 127.0.0.1:

- nginx (Debian's): static files with ranges, keep-alive, ETags and
  If-Match, optionally limit_rate to emulate a slower link;
- Python's http.server, which ignores Range (answers 200): the refusal;
- FaultProxy, a Python proxy in front of nginx that cuts bodies, answers
  503 bursts or stalls on demand, and counts what it forwards;
- s3rver (npm, on the machine's Node.js) behind a proxy which
  recomputes every request's signature with botocore from the request as
  received and answers 403 SignatureDoesNotMatch on a mismatch, and 403
  InvalidAccessKeyId for a key id it does not accept (S3Stats.keys: a
  test rotates the credentials by changing them).  s3rver
  checks no signature itself and misreads ranges ending at byte 0 (it
  answers "bytes=0-0" with the whole object, as 206): what the S3 tests
  prove about signing comes from the proxy, and shardfs's probe accepts a
  206 longer than asked (it only needs the Content-Range total).  The
  proxy also adds max-keys=2 to listings it forwards (after checking the
  signature), so that continuation tokens are exercised, and turns
  virtual-hosted requests (Host: BUCKET.localhost, which libcurl resolves
  to 127.0.0.1 itself) into path-style ones for s3rver.
"""
import concurrent.futures
import contextlib
import hashlib
import http.client
import http.server
import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import threading
import time

import shardfs_testlib as lib

S3RVER_VERSION = "3.7.1"
ACCESS_KEY = "AKIDSHARDFSTEST"
SECRET_KEY = "shardfs/test+secret/key"
REGION = "us-west-2"
# chunk_size the tests mount with
CHUNK = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("server exited with %s" % proc.returncode)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("nothing listens on 127.0.0.1:%d" % port)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


NGINX_CONF = """
daemon off;
user root;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 512; }}
http {{
  log_format shardfs '$connection $server_protocol $status $request_method $uri';
  access_log {dir}/access.log shardfs;
  client_body_temp_path {dir}/tmp; proxy_temp_path {dir}/tmp;
  fastcgi_temp_path {dir}/tmp; uwsgi_temp_path {dir}/tmp;
  scgi_temp_path {dir}/tmp;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{port}{ssl}{http2};
    {tls}
    root {root};
    {limit}
  }}
}}
"""


@contextlib.contextmanager
def nginx(root, workdir, limit_rate=None, cert=None, http2=False):
    """nginx serving ROOT; yields its base URL (http://, or https:// with
    CERT=(certfile, keyfile), offering HTTP/2 by ALPN with HTTP2).  Its
    access log (access_log(WORKDIR)) names each request's connection."""
    port = free_port()
    os.makedirs(os.path.join(workdir, "tmp"), exist_ok=True)
    tls = ("ssl_certificate %s; ssl_certificate_key %s;" % cert) if cert else ""
    conf = os.path.join(workdir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(
            dir=workdir, port=port, root=root, ssl=" ssl" if cert else "",
            http2=" http2" if http2 else "",
            tls=tls, limit="limit_rate %s;" % limit_rate if limit_rate else ""))
    proc = subprocess.Popen(["nginx", "-c", conf, "-p", workdir],
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield "%s://127.0.0.1:%d" % ("https" if cert else "http", port)
    finally:
        stop(proc)


def access_log(workdir):
    """nginx's requests so far: (connection serial, protocol, status,
    method, path) each."""
    with open(os.path.join(workdir, "access.log")) as f:
        return [tuple(line.split()) for line in f if line.strip()]


def self_signed_cert(workdir):
    """(certfile, keyfile) for 127.0.0.1, made with openssl."""
    cert, key = os.path.join(workdir, "cert.pem"), os.path.join(workdir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


class _Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextlib.contextmanager
def serve(handler):
    server = _Threaded(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def no_range_server(root):
    """Python's http.server on ROOT: it answers every GET with 200."""
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

    with serve(Handler) as (_, url):
        yield url


def relay_get(host, port, path, headers):
    """GET PATH from HOST:PORT with the client's Range and If-Match;
    (status, headers, body)."""
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", path, headers={k: v for k, v in headers.items()
                                       if k.lower() in ("range", "if-match")})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, resp.getheaders(), data


def reply_headers(handler, status, headers, length):
    """Send STATUS and the upstream HEADERS that matter to a client of
    ranged reads, for a body of LENGTH bytes."""
    handler.send_response(status)
    for k, v in headers:
        if k.lower() in ("content-range", "etag", "last-modified", "content-type"):
            handler.send_header(k, v)
    handler.send_header("Content-Length", str(length))
    handler.end_headers()


class Faults:
    """What FaultProxy does to the next requests; thread-safe counters."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cut = 0          # next N bodies are cut after cut_at bytes
        self.cut_at = 100_000
        self.unavailable = 0  # next N requests answered 503
        self.stall = False    # requests hang (no answer) while set
        self.requests = 0     # requests received
        self.ranges = []      # Range headers received

    def take(self, name):
        with self.lock:
            n = getattr(self, name)
            if n:
                setattr(self, name, n - 1)
            return n > 0


@contextlib.contextmanager
def fault_proxy(upstream):
    """A proxy to UPSTREAM (http://host:port) applying a Faults; yields
    (faults, base URL)."""
    host, port = upstream.split("//")[1].split(":")
    faults = Faults()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            with faults.lock:
                faults.requests += 1
                faults.ranges.append(self.headers.get("Range"))
            while faults.stall:
                time.sleep(0.05)
            if faults.take("unavailable"):
                body = b"<Error><Code>SlowDown</Code></Error>"
                self.send_response(503)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            status, headers, data = relay_get(host, port, self.path, self.headers)
            cut = faults.take("cut") and len(data) > faults.cut_at
            reply_headers(self, status, headers, len(data))
            self.wfile.write(data[:faults.cut_at] if cut else data)
            if cut:
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)

    with serve(Handler) as (_, url):
        yield faults, url


# --------------------------------------------------------------------------
# S3: s3rver behind a botocore signature check


def s3rver_dir():
    """Where s3rver is installed with npm (the build tree, never the
    source tree)."""
    return os.path.join(os.path.abspath(lib.BUILD_DIR), "test-deps", "s3rver")


def install_s3rver():
    """npm install s3rver@3.7.1 once; returns the path of its CLI."""
    prefix = s3rver_dir()
    cli = os.path.join(prefix, "node_modules", "s3rver", "bin", "s3rver.js")
    if not os.path.exists(cli):
        os.makedirs(prefix, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                        "--prefix", prefix, "s3rver@" + S3RVER_VERSION],
                       check=True, stdout=subprocess.DEVNULL)
    return cli


def botocore_signature(method, raw_path, headers, token=None, key=ACCESS_KEY,
                       secret=SECRET_KEY):
    """The SigV4 signature botocore computes for the request as received:
    the path and query exactly as on the request line (S3 does not
    normalise), the headers the client says it signed."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    auth = headers.get("Authorization", "")
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    req = AWSRequest(method=method, url="http://%s%s" % (headers["Host"], raw_path),
                     headers={h: headers[h] for h in signed if h in headers})
    req.context["timestamp"] = headers["X-Amz-Date"]
    signer = S3SigV4Auth(Credentials(key, secret, token), "s3", REGION)
    canonical = signer.canonical_request(req)
    return signer.signature(signer.string_to_sign(req, canonical), req)


class S3Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []      # (method, path) of every request
        self.rejected = 0       # requests answered 403 by the check
        self.keys = {ACCESS_KEY: SECRET_KEY}  # key id -> secret accepted
        self.upload = None      # upload(bucket, key, path), set by s3_server


@contextlib.contextmanager
def s3rver(workdir, buckets, log=None):
    """s3rver alone with BUCKETS created; yields its port.  With LOG (a
    file name) it writes a line per response there ("info: /b/k 206 6ms
    5b", no method), else nothing.  It answers unsigned requests, and
    signed ones only with its own key (S3RVER / S3RVER)."""
    cli = install_s3rver()
    port = free_port()
    data = os.path.join(workdir, "s3rver")
    os.makedirs(data, exist_ok=True)
    # s3rver makes continuation tokens with a cipher Node 17+ only has in
    # OpenSSL's legacy provider
    argv = ["node", "--openssl-legacy-provider", cli, "--directory", data, "--address", "127.0.0.1",
            "--port", str(port)] + ([] if log else ["--silent"])
    for b in buckets:
        argv += ["--configure-bucket", b]
    with open(log or os.devnull, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield port
    finally:
        stop(proc)


@contextlib.contextmanager
def s3_server(workdir, buckets):
    """s3rver with BUCKETS created, behind the signature-checking proxy;
    yields (stats, endpoint URL, upload(bucket, key, path))."""
    stats = S3Stats()
    with s3rver(workdir, buckets) as port:
        stats.upload = lambda b, k, p: upload(port, b, k, p)
        with _sigv4_proxy(port, stats) as url:
            yield stats, url, stats.upload


def upload(port, bucket, key, path):
    """PUT a file into s3rver directly (unsigned)."""
    from urllib.parse import quote
    with open(path, "rb") as f:
        body = f.read()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("PUT", "/%s/%s" % (bucket, quote(key)), body=body,
                 headers={"Content-Length": str(len(body))})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == 200, (resp.status, key)


@contextlib.contextmanager
def _sigv4_proxy(upstream_port, stats):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def refuse(self, code, message):
            body = ("<?xml version=\"1.0\"?><Error><Code>%s</Code>"
                    "<Message>%s</Message></Error>" % (code, message)).encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def refused(self, method):
            """Refuse (403, as S3 does) a signed request whose key or
            signature is wrong; True when refused."""
            key = self.headers["Authorization"].split("Credential=")[-1].split("/")[0]
            with stats.lock:
                secret = stats.keys.get(key)
            if secret is None:
                with stats.lock:
                    stats.rejected += 1
                self.refuse("InvalidAccessKeyId", "The AWS Access Key Id you "
                            "provided does not exist in our records.")
                return True
            expected = botocore_signature(method, self.path, self.headers,
                                          self.headers.get("X-Amz-Security-Token"),
                                          key, secret)
            got = self.headers["Authorization"].split("Signature=")[-1]
            if got != expected:
                with stats.lock:
                    stats.rejected += 1
                self.refuse("SignatureDoesNotMatch",
                            "The request signature we calculated does not "
                            "match the signature you provided.")
                return True
            return False

        def do_GET(self):
            with stats.lock:
                stats.requests.append(("GET", self.path))
            if "Authorization" in self.headers and self.refused("GET"):
                return
            return self.forward()

        def do_PUT(self):
            """A signed PUT only, whose body has the SHA-256 it was signed
            with (S3's XAmzContentSHA256Mismatch), relayed to s3rver."""
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with stats.lock:
                stats.requests.append(("PUT", self.path))
            if "Authorization" not in self.headers:
                return self.refuse("AccessDenied", "Anonymous PUT")
            if self.refused("PUT"):
                return
            if hashlib.sha256(body).hexdigest() != self.headers.get("X-Amz-Content-Sha256"):
                return self.refuse("XAmzContentSHA256Mismatch", "The provided "
                                   "'x-amz-content-sha256' header does not match")
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
            conn.request("PUT", self.path, body=body,
                         headers={"Content-Length": str(len(body))})
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            reply_headers(self, resp.status, resp.getheaders(), len(data))
            self.wfile.write(data)

        def forward(self):
            path = self.path
            host = self.headers.get("Host", "").split(":")[0]
            if host.endswith(".localhost"):
                # virtual-hosted style: s3rver is asked path-style
                path = "/" + host[:-len(".localhost")] + path
            if "list-type=2" in path:
                path += "&max-keys=2"
            status, headers, data = relay_get("127.0.0.1", upstream_port, path,
                                              self.headers)
            reply_headers(self, status, headers, len(data))
            self.wfile.write(data)

    with serve(Handler) as (_, url):
        yield url


# --------------------------------------------------------------------------
# data and checks shared by the remote tests


def make_shards(root, count=3, files=60, seed=0):
    """COUNT shards of FILES members (1 KB .. 300 KB) in ROOT; names."""
    names = []
    for s in range(count):
        src = root / ("src%d" % s)
        members = []
        for i in range(files):
            rel = "s%d/%05d.bin" % (s, i)
            size = 1000 + (i * 7919 + s * 104729 + seed) % 300_000
            lib.write_file(src / rel, lib.deterministic_bytes("%d-%d-%d" % (seed, s, i), size))
            members.append(rel)
        lib.finish_dirs(src)
        name = "shard-%06d.tar" % s
        lib.gnu_tar_create(root / name, src, members, "gnu")
        shutil.rmtree(src)
        names.append(name)
    return names


def one_chunk_member(shard):
    """A member of SHARD in the middle whose data lies in one chunk."""
    members = lib.member_offsets(shard)
    for name, _, ti in members[len(members) // 2:]:
        if ti.offset_data // CHUNK == (ti.offset_data + ti.size - 1) // CHUNK:
            return name
    raise AssertionError("no member inside one chunk")


def straddling_member(shard, chunk=CHUNK, spans=2):
    """A member of SHARD whose data lies across at least SPANS chunks of
    CHUNK bytes: (name, its first chunk, its last chunk)."""
    for name, _, ti in lib.member_offsets(shard):
        first, last = ti.offset_data // chunk, (ti.offset_data + ti.size - 1) // chunk
        if ti.isfile() and ti.size and last - first + 1 >= spans:
            return name, first, last
    raise AssertionError("no member across %d chunks" % spans)


def digests(root):
    out = {}
    for d, _, files in os.walk(root):
        if os.path.basename(d) == ".shardfs" or "/.shardfs" in d:
            continue
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def parallel_digests(root, readers):
    """digests(ROOT), the files read by READERS threads at once."""
    paths = [os.path.join(d, f) for d, _, files in os.walk(root)
             if not (os.path.basename(d) == ".shardfs" or "/.shardfs" in d)
             for f in files]

    def one(p):
        with open(p, "rb") as fh:
            return os.path.relpath(p, root), hashlib.sha256(fh.read()).hexdigest()

    with concurrent.futures.ThreadPoolExecutor(readers) as pool:
        return dict(pool.map(one, paths))


def remote_stats(mnt):
    with open(os.path.join(mnt, ".shardfs", "stats")) as f:
        return json.load(f)["remote"]



def publish_index(spec, www, env):
    """Build the index of the remote set SPEC with shardfs-index and copy
    it where mounts look for a published one (shardfs-index names the
    URL: next to the first shard) into WWW, the directory the server
    serves.  (The local index file, the published URL.)"""
    r = lib.run_cmd([lib.binary("shardfs-index"), spec], env=env)
    assert r.returncode == 0, r
    m = re.search(r"(\S+): to let other nodes mount with one request, upload "
                  r"this index as (\S+)", r.stderr)
    assert m, r.stderr
    local, published = m.groups()
    shutil.copy(local, os.path.join(str(www), published.rsplit("/", 1)[1]))
    return local, published
