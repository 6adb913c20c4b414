# SPDX-License-Identifier: Apache-2.0
"""Turn one run's results (the JSON that bench.py saves) into the markdown
section that docs/benchmarks.md collects, and check the targets of
issue 4 against figures from that same run.

Ratios: "speed" columns are how many times faster the left system is
(loose time / shardfs time, or a ratio of MB/s), so above 1 is better
for shardfs; the targets table states each target the way the issue does.
"""
import os
import subprocess

MARKER = "<!-- bench.py adds each run below this line, newest first -->"
MiB = 1 << 20

# (key, label, kind): "read" rows show files/s and MB/s, "stream" rows MB/s,
# "epoch" rows seconds and images/s, "headers" rows headers/s, "time" rows
# seconds.
ROWS = [
    ("mount_cold", "mount, scanning the shards, cold", "time"),
    ("mount_warm", "mount, scanning the shards, warm (median of 3)", "time"),
    ("mount_index_build", "mount, scanning and writing the index, cold", "time"),
    ("mount_index_cold", "mount from the persisted index, cold", "time"),
    ("mount_index_warm", "mount from the persisted index, warm (median of 3)", "time"),
    ("walk_first", "os.walk + stat, first pass (cold)", "time"),
    ("walk_second", "os.walk + stat, second pass (warm)", "time"),
    ("imagefolder_cold", "ImageFolder(root), cold", "time"),
    ("imagefolder_warm", "ImageFolder(root), warm", "time"),
    ("read_sorted_cold", "read all, sorted paths, cold, verified", "read"),
    ("read_shuffled1_cold", "read all, shuffled, 1 thread, cold", "read"),
    ("read_shuffled4_cold", "read all, shuffled, 4 threads, cold", "read"),
    ("read_shard_cold", "read all, shard order, cold", "read"),
    ("read_shuffled1_warm", "read all, shuffled, 1 thread, warm", "read"),
    ("read_shuffled4_warm", "read all, shuffled, 4 threads, warm", "read"),
    ("dataloader_cold", "DataLoader epoch (2 workers, decode+resize), cold", "epoch"),
    ("cat_cold", "limit: cat shards > /dev/null, cold", "stream"),
    ("cat_warm", "limit: cat shards > /dev/null, warm", "stream"),
    ("tar_cold", "limit: tarfile stream of shards, cold", "read"),
    ("tar_warm", "limit: tarfile stream of shards, warm", "read"),
    ("headers_cold", "limit: the 4 KiB block of every tar header (O_DIRECT), cold",
     "headers"),
]


def _get(run, key, system):
    return run["results"].get(key, {}).get(system)


def _fmt_result(r, kind):
    if r is None:
        return "—"
    seconds = "%.3f s" % r["seconds"] if r["seconds"] < 10 else "%.1f s" % r["seconds"]
    if kind == "read":
        return "%s files/s, %s MB/s (%s)" % (
            _int(r["files"] / r["seconds"]), _int(_mbps(r)), seconds)
    if kind == "stream":
        return "%s MB/s (%s)" % (_int(_mbps(r)), seconds)
    if kind == "epoch":
        return "%s, %s img/s" % (seconds, _int(r["files"] / r["seconds"]))
    if kind == "headers":
        return "%s headers/s (%s)" % (_int(r["files"] / r["seconds"]), seconds)
    if r.get("cpu_seconds") is not None:
        return "%s (CPU %.3f s)" % (seconds, r["cpu_seconds"])
    return seconds


def _int(x):
    return "{:,.0f}".format(x)


def _mbps(r):
    return r["nbytes"] / 1e6 / r["seconds"] if r and r["seconds"] else None


def _ratio(a, b):
    return "%.2f×" % (a / b) if a is not None and b else "—"


def _limit(run, key, name):
    """The limit run (cat or tar) at the temperature of row key."""
    return _get(run, "%s_%s" % (name, "warm" if key.endswith("warm") else "cold"), "limit")


def _row(run, key, label, kind):
    loose, shardfs = _get(run, key, "loose"), _get(run, key, "shardfs")
    limit = _get(run, key, "limit")
    speed = _ratio(loose["seconds"], shardfs["seconds"]) if loose and shardfs else "—"
    vs = ["—", "—", "—"]
    if kind == "read" and not limit:
        cat, tar = _limit(run, key, "cat"), _limit(run, key, "tar")
        vs = [_ratio(_mbps(loose), _mbps(cat)), _ratio(_mbps(shardfs), _mbps(cat)),
              _ratio(_mbps(shardfs), _mbps(tar))]
    cells = [label, _fmt_result(loose, kind), _fmt_result(shardfs, kind),
             _fmt_result(limit, kind), speed] + vs
    return "| " + " | ".join(cells) + " |"


def disturbed_warm_steps(run):
    """Warm shardfs steps during which the daemon had to look files up
    again: something (another process dropping caches) emptied the
    kernel's caches, so the step was not warm.  {key: lookups}."""
    out = {}
    for key, s in (run.get("daemon") or {}).get("steps", {}).items():
        lookups = s.get("stats", {}).get("ops.lookup.count", 0)
        result = _get(run, key, "shardfs")
        if key.endswith(("warm", "second")) and result and \
                lookups > max(result["files"], 1) / 10:
            out[key] = lookups
    return out


def results_table(run):
    head = ["workload", "(1) loose", "(2) shardfs", "(3) limit",
            "(2) speed ÷ (1)", "(1) MB/s ÷ cat", "(2) MB/s ÷ cat",
            "(2) MB/s ÷ tarfile"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    disturbed = disturbed_warm_steps(run)
    for key, label, kind in ROWS:
        if key in run["results"]:
            lines.append(_row(run, key, label + (" †" if key in disturbed else ""), kind))
    if disturbed:
        lines.append("\n† not really warm: during this step the daemon served %s "
                     "lookups, so the kernel's caches had been dropped (by another "
                     "process) while it ran." % " and ".join(
                         _int(n) for n in disturbed.values()))
    return "\n".join(lines)


# --- targets ---------------------------------------------------------------

def _seconds(run, key, system):
    r = _get(run, key, system)
    return r["seconds"] if r else None


def _read_rss(run):
    """Largest daemon VmRSS sampled after a full-read step, in MiB."""
    steps = run.get("daemon", {}).get("steps", {})
    values = [s["VmRSS"] for k, s in steps.items() if k.startswith("read_")]
    return max(values) / MiB if values else None


def _ratio_of(a, b):
    return a / b if a is not None and b else None


def _time_ratio(run, key):
    return _ratio_of(_seconds(run, key, "shardfs"), _seconds(run, key, "loose"))


def _speed_ratio(run, key, other_key="", other_system="loose", mbps=False):
    a = _get(run, key, "shardfs")
    b = _get(run, other_key or key, other_system)
    if not a or not b:
        return None
    if mbps:
        return _mbps(a) / _mbps(b)
    return (a["files"] / a["seconds"]) / (b["files"] / b["seconds"])


# (target, threshold, format, measure, check, the steps it relies on)
TARGETS = [
    ("mount without index, warm shards (150 k members)", "≤ 0.5 s", "%.3f s",
     lambda run: _seconds(run, "mount_warm", "shardfs"), lambda v: v <= 0.5, ()),
    ("mount without index, cold, vs reading every header at the disk's "
     "random-read rate", "≤ 1.0× time", "%.2f×",
     lambda run: _ratio_of(_seconds(run, "mount_cold", "shardfs"),
                           _seconds(run, "headers_cold", "limit")),
     lambda v: v <= 1.0, ()),
    ("mount from the persisted index, warm", "≤ 0.5 s", "%.3f s",
     lambda run: _seconds(run, "mount_index_warm", "shardfs"), lambda v: v <= 0.5, ()),
    ("walk+stat first pass after mount vs loose cold", "≤ 1.0× time", "%.2f×",
     lambda run: _time_ratio(run, "walk_first"), lambda v: v <= 1.0, ()),
    ("walk+stat second pass vs loose warm", "≤ 1.2× time", "%.2f×",
     lambda run: _time_ratio(run, "walk_second"), lambda v: v <= 1.2,
     ("walk_second",)),
    ("shard-order reads, cold, vs cat", "≥ 0.8× MB/s", "%.2f×",
     lambda run: _speed_ratio(run, "read_shard_cold", "cat_cold", "limit", mbps=True),
     lambda v: v >= 0.8, ()),
    ("shuffled reads, cold, 4 threads, vs loose", "≥ 1.0× files/s", "%.2f×",
     lambda run: _speed_ratio(run, "read_shuffled4_cold"), lambda v: v >= 1.0, ()),
    ("warm reads, 4 threads, vs loose warm", "≥ 0.7× files/s", "%.2f×",
     lambda run: _speed_ratio(run, "read_shuffled4_warm"), lambda v: v >= 0.7,
     ("read_shuffled4_warm",)),
    ("DataLoader epoch vs loose", "≥ 0.95× images/s", "%.2f×",
     lambda run: _speed_ratio(run, "dataloader_cold"), lambda v: v >= 0.95, ()),
    ("daemon RSS after full read", "≤ 32 MiB", "%.1f MiB", _read_rss,
     lambda v: v <= 32, ()),
]


def targets(run):
    """[(target, threshold, measured text, met: True/False/None)]; a
    target that relies on a disturbed warm step is not judged (None)."""
    out, disturbed = [], disturbed_warm_steps(run)
    for name, threshold, fmt, measure, ok, steps in TARGETS:
        value = measure(run)
        spoiled = any(step in disturbed for step in steps)
        text = "—" if value is None else fmt % value + (" †" if spoiled else "")
        judged = value is not None and not spoiled
        out.append((name, threshold, text, ok(value) if judged else None))
    return out


def targets_table(run):
    lines = ["| target | threshold | measured | met |", "|---|---|---|---|"]
    for name, threshold, measured, met in targets(run):
        verdict = {True: "met", False: "**not met**", None: "not measured"}[met]
        if met is None and measured.endswith("†"):
            verdict = "not judged (step disturbed †)"
        lines.append("| %s | %s | %s | %s |" % (name, threshold, measured, verdict))
    members = run["dataset"]["members"]
    if members < 150_000:
        lines.append("\nThis run has %s members, not 150 k: the mount target is "
                     "only indicative." % _int(members))
    return "\n".join(lines)


# --- daemon and system calls ----------------------------------------------

# /.shardfs/stats counters shown per step, when the mount has them.
STAT_COLUMNS = [("ops.lookup.count", "lookups"), ("ops.open.count", "opens"),
                ("ops.read.count", "reads"), ("io_uring_requests", "over io_uring"),
                ("backing_reads", "shard reads")]


def _stat_cells(stats):
    cells = [_int(stats[k]) if k in stats else "—" for k, _ in STAT_COLUMNS]
    reads, nbytes = stats.get("backing_reads"), stats.get("backing_read_bytes")
    cells.append("%.1f" % (nbytes / reads / 1024) if reads and nbytes else "—")
    hits, misses = stats.get("readahead.hits"), stats.get("readahead.misses")
    cells.append("%s / %s" % (_int(hits), _int(misses)) if hits is not None else "—")
    return cells


def daemon_table(run):
    steps = (run.get("daemon") or {}).get("steps", {})
    if not steps:
        return ""
    head = ["after step", "VmRSS MiB", "VmHWM MiB", "CPU s"] + \
        [label for _, label in STAT_COLUMNS] + \
        ["mean shard read KiB", "readahead hits / misses"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, s in steps.items():
        cpu = "%.2f" % s["cpu_seconds"] if "cpu_seconds" in s else "—"
        cells = [key, "%.1f" % (s["VmRSS"] / MiB), "%.1f" % (s["VmHWM"] / MiB), cpu]
        cells += _stat_cells(s["stats"]) if "stats" in s else \
            ["—"] * (len(STAT_COLUMNS) + 2)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _calls(counter):
    return ", ".join("%s %s" % (name, _int(n)) for name, n in counter.items()) or "none"


def syscall_table(run):
    if not run.get("syscalls"):
        return ""
    lines = ["| pass (cold) | calls on shard storage | shard data reads (mean size) "
             "| /dev/fuse calls | other |", "|---|---|---|---|---|"]
    for name, s in run["syscalls"].items():
        c = s["counts"]
        mean = s["storage_read_bytes"] / s["storage_reads"] if s["storage_reads"] else 0
        lines.append("| %s | %s: %s | %s (%s KiB) | %s | %s |" % (
            name, _int(s["storage_calls"]), _calls(c["storage"]),
            _int(s["storage_reads"]), _int(mean / 1024),
            _int(sum(c["fuse"].values())), _calls(c["other"])))
    return "\n".join(lines)


# --- the section -------------------------------------------------------------

def describe_binary(path, repo):
    """shardfs --version and the repository commit it was built from."""
    def out(argv):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (p.stdout or p.stderr).strip().splitlines()[0] if p.returncode == 0 else ""
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return ""
    version = out([path, "--version"]) or "version unknown"
    commit = out(["git", "-C", repo, "rev-parse", "--short", "HEAD"]) or "no commit"
    dirty = out(["git", "-C", repo, "status", "--porcelain", "--", "src", "include"])
    return "%s (%s%s)" % (version, commit, ", uncommitted src changes" if dirty else "")


def _load(load):
    """Load average, CPU and I/O pressure at the start and end of the run."""
    def psi(p):
        return ", ".join("%s pressure %.0f%%" % (k, v) for k, v in sorted(p.items()))
    text = "load average %.2f / %.2f" % (load["start"], load["end"])
    if load.get("pressure_start"):
        text += "; %s / %s" % (psi(load["pressure_start"]), psi(load["pressure_end"]))
    text += " (a shared machine: figures from a busy one are noisy)"
    if load.get("other_benchmarks"):
        text += "; **another benchmark was running** (pids %s), which may " \
            "have dropped caches during warm steps" % load["other_benchmarks"]
    return text


def _header(run):
    d, m = run["dataset"], run["machine"]
    return "\n".join([
        "### Run of %s" % run["date"].replace("T", " "),
        "",
        "- command: `%s` (took %.0f min)" % (run["command"], run["duration_s"] / 60),
        "- machine: %s; RAM %s; disk %s; kernel %s (FUSE over io_uring: %s); "
        "Python %s" % (m["cpu"], m["ram"], m["disk"], m["kernel"],
                       m.get("fuse_io_uring", "not recorded"), m["python"]),
        "- machine load at start / end: %s" % _load(run["load"]),
        "- shardfs: %s" % run["shardfs"],
        "- data set: %s samples in %s classes, %s members (jpg+json+cls), "
        "%s shards, %.2f GB of files, %.2f GB of shards" % (
            _int(d["samples"]), _int(d["classes"]), _int(d["members"]),
            _int(d["shards"]), d["bytes"] / 1e9, d["shard_bytes"] / 1e9),
    ])


def render(run):
    parts = [_header(run), "", "#### Results", "", results_table(run), "",
             "#### Targets", "", targets_table(run)]
    for title, body in (("The daemon, per step (counters from /.shardfs/stats)",
                         daemon_table(run)),
                        ("System calls of the daemon (strace -f -y)", syscall_table(run))):
        if body:
            parts += ["", "#### " + title, "", body]
    if run.get("stats_file"):
        parts += ["", "#### /.shardfs/stats after the run", "", "```",
                  run["stats_file"].rstrip(), "```"]
    if run["errors"]:
        parts += ["", "#### Errors", ""] + ["- " + e for e in run["errors"]]
    return "\n".join(parts) + "\n"


def add_to_docs(path, section, marker=MARKER):
    """Insert section right below marker in path (adding marker if absent)."""
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if marker not in text:
        text = text.rstrip("\n") + "\n\n" + marker + "\n"
    head, tail = text.split(marker, 1)
    with open(path, "w") as f:
        f.write(head + marker + "\n\n" + section + tail)


def main(argv=None):
    """Render a saved run: report.py RESULTS.json [--docs [PATH]]."""
    import argparse
    import json
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("results", help="a WORKDIR/results/*.json file")
    p.add_argument("--docs", nargs="?", const=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "bench-runs", "runs.md"),
        help="add the section to docs/bench-runs/runs.md (or PATH)")
    args = p.parse_args(argv)
    with open(args.results) as f:
        markdown = render(json.load(f))
    if args.docs:
        add_to_docs(args.docs, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
