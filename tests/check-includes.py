#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fail when the modules of src/ include each other in a cycle.

A module is a source file and its header: src/fs.c and
include/shardfs/fs.h are module "fs", src/pack/plan.c is "pack/plan".  A
module depends on another when one of its files includes one of the
other's headers ("shardfs/x.h", or a header beside the including file).
Dependencies must point one way (docs/design.md): any cycle, such as
fs.c including control.h while control.c includes fs.h, is printed and
the exit status is 1.

    tests/check-includes.py [TOP]      check the tree at TOP (default: ..)
    tests/check-includes.py --self-test
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


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


def graph(top):
    """{module: {modules it includes}} over src/ and include/shardfs/."""
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
    found = cycles(graph(top))
    for comp in found:
        print("include cycle among: " + ", ".join(comp), file=sys.stderr)
    return 1 if found else 0


def self_test():
    """A tree with a cycle must fail, the same tree without it pass."""
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
        return 0 if check(top) == 1 else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    top = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    return check(top)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
