#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fail when the modules of src/ include each other in a cycle, or when
a header private to a subsystem is included from outside it.

A module is a source file and its header: src/fs.c and
include/shardfs/fs.h are module "fs", src/pack/plan.c is "pack/plan".  A
module depends on another when one of its files includes one of the
other's headers ("shardfs/x.h", or a header beside the including file).
Dependencies must point one way (docs/design.md): any cycle, such as
fs.c including control.h while control.c includes fs.h, is printed and
the exit status is 1.

The subsystems in their own directories (src/remote/, src/compress/,
src/pack/) keep their headers to themselves: a header under src/X/ may
be included only by files under src/X/, unless it is one of INTERFACES,
each with the reason the rest of the tree needs it.  What others use of
a subsystem is in include/shardfs/ (source.h opens remote and compressed
shards; remote.h the remote layer's options and set-up).

    tests/check-includes.py [TOP]      check the tree at TOP (default: ..)
    tests/check-includes.py --self-test
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Subsystem headers the rest of src/ may include, and why.
INTERFACES = {
    "compress/span_cache.h": "cli.h: the command's settings hold the "
                             "decoded-span cache (struct span_cache), set up "
                             "from -o cache_dir before the shards open",
}


def module_of(top, path):
    """Module name of a file under src/ or include/shardfs/."""
    rel = os.path.relpath(path, top)
    for root in ("src" + os.sep, os.path.join("include", "shardfs") + os.sep):
        if rel.startswith(root):
            return os.path.splitext(rel[len(root):])[0].replace(os.sep, "/")
    return None


def resolve(top, including, name):
    """The file an #include "name" in INCLUDING names, or None (system)."""
    for base in (os.path.dirname(including), os.path.join(top, "include")):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(cand):
            return cand
    return None


def subsystem(top, path):
    """"X" for a file under src/X/, else None."""
    rel = os.path.relpath(path, os.path.join(top, "src")).split(os.sep)
    return rel[0] if len(rel) > 1 and rel[0] != ".." else None


def crossing(top, including, target):
    """The message for an include of a subsystem's private header from
    outside the subsystem, or None."""
    sub = subsystem(top, target)
    if not sub or subsystem(top, including) == sub:
        return None
    rel = os.path.relpath(target, os.path.join(top, "src")).replace(os.sep, "/")
    if rel in INTERFACES:
        return None
    return "%s includes %s, private to src/%s/" % (
        os.path.relpath(including, top), rel, sub)


def graph(top, crossings=None):
    """{module: {modules it includes}} over src/ and include/shardfs/;
    includes that cross a subsystem's boundary are appended to
    CROSSINGS."""
    deps = {}
    for root in ("src", os.path.join("include", "shardfs")):
        for dirpath, _, names in os.walk(os.path.join(top, root)):
            for n in names:
                if not n.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, n)
                mod = module_of(top, path)
                edges = deps.setdefault(mod, set())
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    target = resolve(top, path, inc)
                    why = target and crossing(top, path, target)
                    if why and crossings is not None:
                        crossings.append(why)
                    other = target and module_of(top, target)
                    if other and other != mod:
                        edges.add(other)
    return deps


def cycles(deps):
    """Every strongly connected component of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def check(top):
    crossings = []
    found = cycles(graph(top, crossings))
    for comp in found:
        print("include cycle among: " + ", ".join(comp), file=sys.stderr)
    for why in crossings:
        print(why, file=sys.stderr)
    return 1 if found or crossings else 0


def self_test():
    """A tree with a cycle must fail, the same tree without it pass; so
    must an include of a subsystem's header from outside it."""
    with tempfile.TemporaryDirectory() as top:
        os.makedirs(os.path.join(top, "src"))
        os.makedirs(os.path.join(top, "include", "shardfs"))

        def write(rel, text):
            with open(os.path.join(top, rel), "w") as f:
                f.write(text)

        write("include/shardfs/a.h", '#include <stdio.h>\n')
        write("include/shardfs/b.h", '#include "shardfs/a.h"\n')
        write("src/a.c", '#include "shardfs/a.h"\n')
        write("src/b.c", '#include "shardfs/b.h"\n')
        if check(top) != 0:
            return 1
        write("src/a.c", '#include "shardfs/a.h"\n#include "shardfs/b.h"\n')
        if check(top) != 1:
            return 1
        # a subsystem's header: fine inside it, refused outside
        write("src/a.c", '#include "shardfs/a.h"\n')
        os.makedirs(os.path.join(top, "src", "sub"))
        write("src/sub/c.h", '#include "shardfs/a.h"\n')
        write("src/sub/c.c", '#include "c.h"\n')
        if check(top) != 0:
            return 1
        write("src/b.c", '#include "shardfs/b.h"\n#include "sub/c.h"\n')
        return 0 if check(top) == 1 else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    top = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    return check(top)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
