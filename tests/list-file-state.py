#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""List the mutable state of src/ that lives outside handles, and fail
unless each piece says why it must.

State lives in handles passed in (struct shardfs, the shard set, a
cache's struct); what cannot, because something outside the code holds
no handle to give it (a signal handler, pthread_atfork, the C library's
once-only hooks), is process state, and says so.  This script finds, in
every .c and .h file under src/:

  - variables at file scope, static or not (extern declarations too),
  - static variables inside functions,

whose object is not const (`static const char *names[]` is mutable: its
pointers can be reassigned; `static const char *const names[]` is not).
Thread-local variables count: they are state a handle does not carry.

Each must carry the marker, a comment that contains

    file-state: <why, in at least three words>

on the declaration's lines, or on lines of its own above it: such a
comment covers the declarations that follow it up to the next blank
line (a block of state with one reason).  Every piece is printed with
its reason; any without one (or with a marker that gives no reason)
makes the exit status 1.

    tests/list-file-state.py [TOP]      check the tree at TOP (default: ..)
    tests/list-file-state.py --self-test
"""
import contextlib
import io
import os
import re
import sys
import tempfile

MARKER = "file-state:"
MARKER_MIN_WORDS = 3

TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|->|\+\+|--|<<=?|>>=?|[<>=!&|^+\-*/%]=|&&|\|\||\S")
# Tokens of a declaration that are never the declared name.
KEYWORDS = {
    "static", "extern", "const", "volatile", "restrict", "register", "auto",
    "inline", "_Thread_local", "__thread", "thread_local", "_Atomic", "signed",
    "unsigned", "short", "long", "int", "char", "float", "double", "void",
    "_Bool", "bool", "struct", "union", "enum", "__restrict",
}
# Wrappers whose parenthesised argument is not a declarator.
STRIPPED = {"__attribute__", "_Alignas", "alignas", "__declspec"}


def blank(text):
    """TEXT with comments, string and char literals and preprocessor lines
    turned into spaces (newlines kept, so lines stay where they were), and
    the comments as [(first line, last line, first on its line?, text)]."""
    out, comments, i, n = [], [], 0, len(text)
    while i < n:
        if text.startswith("/*", i) or text.startswith("//", i):
            j = text.find("*/", i) + 2 if text[i + 1] == "*" else text.find("\n", i)
            j = n if j < i + 2 else j
        elif text[i] in "\"'":
            j = i + 1
            while j < n and text[j] not in (text[i], "\n"):
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(text[i])
            i += 1
            continue
        if text[i] == "/":
            first = text.count("\n", 0, i) + 1
            alone = not text[text.rfind("\n", 0, i) + 1:i].strip()
            comments.append((first, first + text.count("\n", i, j), alone, text[i:j]))
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    lines, directive = "".join(out).split("\n"), False
    for k, line in enumerate(lines):
        if directive or line.lstrip().startswith("#"):
            directive = line.rstrip().endswith("\\")
            lines[k] = ""
    return "\n".join(lines), comments


def tokens(code):
    """[(token, line)] of blanked CODE."""
    result, line, pos = [], 1, 0
    for m in TOKEN.finditer(code):
        line += code.count("\n", pos, m.start())
        pos = m.start()
        result.append((m.group(), line))
    return result


def strip_wrappers(toks):
    """TOKS without __attribute__((...)) and the like; _Atomic(T) as T."""
    out, i = [], 0
    while i < len(toks):
        t = toks[i][0]
        if (t in STRIPPED or t == "_Atomic") and i + 1 < len(toks) and toks[i + 1][0] == "(":
            depth, j = 0, i + 1
            while j < len(toks):
                depth += {"(": 1, ")": -1}.get(toks[j][0], 0)
                if depth == 0:
                    break
                j += 1
            if t == "_Atomic":
                out.extend(toks[i + 2:j])
            i = j + 1
            continue
        out.append(toks[i])
        i += 1
    return out


def split_top(toks, sep):
    """TOKS split at SEP outside brackets."""
    parts, cur, depth = [], [], 0
    for tok in toks:
        if tok[0] in "([{":
            depth += 1
        elif tok[0] in ")]}":
            depth -= 1
        if tok[0] == sep and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(tok)
    parts.append(cur)
    return parts


def without_bodies(toks):
    """TOKS with the contents of {...} removed (struct bodies)."""
    out, depth = [], 0
    for tok in toks:
        if tok[0] == "{":
            depth += 1
        elif tok[0] == "}":
            depth -= 1
        elif depth == 0:
            out.append(tok)
    return out


def declared_name(decl):
    """Index in DECL of the declared identifier, or None."""
    for i, (t, _) in enumerate(decl):
        if not re.match(r"[A-Za-z_]", t) or t in KEYWORDS:
            continue
        nxt = decl[i + 1][0] if i + 1 < len(decl) else None
        after = decl[i + 2][0] if i + 2 < len(decl) else None
        if nxt in (None, "[", ")", ",", ":") or (nxt == "(" and after != "*"):
            return i
    return None


def is_const(prefix, specifiers):
    """Is the object of a declarator const, given the tokens before its
    name (PREFIX) and the declaration's SPECIFIERS?"""
    stars = [i for i, (t, _) in enumerate(prefix) if t == "*"]
    if stars:
        return any(t == "const" for t, _ in prefix[stars[-1] + 1:])
    return any(t == "const" for t, _ in specifiers)


def variables(item):
    """[(name, line, const)] declared by one declaration ITEM (tokens up
    to its ';'), [] for a type, a function or a _Static_assert."""
    toks = strip_wrappers(item)
    if not toks or toks[0][0] in ("typedef", "_Static_assert", "static_assert"):
        return []
    decls = [split_top(d, "=")[0] for d in split_top(toks, ",")]
    # a struct, union or enum defined here: its variable, if any, follows
    # the body
    close = [k for k, t in enumerate(decls[0]) if t[0] == "}"]
    start = close[-1] + 1 if close else 0
    head, tail = without_bodies(decls[0][:start]), decls[0][start:]
    k = declared_name(tail)
    if k is None or (k and tail[k - 1][0] in ("struct", "union", "enum")):
        return []	# struct x { ... };  enum { ... };  struct x;
    first, n = head + tail, len(head) + k
    if n + 1 < len(first) and first[n + 1][0] == "(" and \
            (n == 0 or first[n - 1][0] != "("):
        return []	# a function's declaration
    specifiers = [t for t in first[:n] if t[0] not in "*("]
    found = [(first[n][0], first[n][1], is_const(first[:n], specifiers))]
    for d in map(without_bodies, decls[1:]):
        i = declared_name(d)
        if i is not None:
            found.append((d[i][0], d[i][1], is_const(d[:i], specifiers)))
    return found


def scan(code):
    """[(name, first line, last line, where)] of the mutable variables of
    blanked CODE: where is "file scope" or "static in FUNCTION"."""
    toks = tokens(code)
    found, item, i = [], [], 0
    while i < len(toks):
        t, line = toks[i]
        if t == "{" and item and item[-1][0] == ")" and \
                "=" not in [x for x, _ in item] and item[0][0] != "typedef":
            end = matching(toks, i)
            name = declared_name(strip_wrappers(item))
            func = strip_wrappers(item)[name][0] if name is not None else "?"
            found.extend(statics(toks[i + 1:end], func))
            item, i = [], end + 1
            continue
        if t == "{":
            end = matching(toks, i)
            item.extend(toks[i:end + 1])
            i = end + 1
            continue
        if t == ";":
            for name, _, const in variables(item):
                if not const:
                    found.append((name, item[0][1], line, "file scope"))
            item = []
        else:
            item.append((t, line))
        i += 1
    return found


def matching(toks, i):
    """Index of the brace closing the one at I."""
    depth = 0
    for j in range(i, len(toks)):
        depth += {"{": 1, "}": -1}.get(toks[j][0], 0)
        if depth == 0:
            return j
    return len(toks) - 1


def statics(body, func):
    """The mutable static variables declared in a function's BODY."""
    found, i = [], 0
    while i < len(body):
        if body[i][0] == "static" and (i == 0 or body[i - 1][0] in ";{}"):
            j, depth = i, 0
            while j < len(body) and not (body[j][0] == ";" and depth == 0):
                depth += {"{": 1, "}": -1}.get(body[j][0], 0)
                j += 1
            for name, _, const in variables(body[i:j]):
                if not const:
                    found.append((name, body[i][1], body[min(j, len(body) - 1)][1],
                                  "static in " + func + "()"))
            i = j
        i += 1
    return found


def reason(comments, blank_lines, first, last):
    """The reason a marker comment gives for the declaration on lines
    FIRST..LAST: "" for a marker without one, None for no marker."""
    for cfirst, clast, alone, text in comments:
        on_it = cfirst <= last and first <= clast
        above = alone and clast < first and \
            not any(clast < b < first for b in blank_lines)
        if MARKER in text and (on_it or above):
            why = text.split(MARKER, 1)[1]
            why = " ".join(w.strip("*/") for w in why.split() if w.strip("*/"))
            return why if len(why.split()) >= MARKER_MIN_WORDS else ""
    return None


def check_file(path):
    """[(line, name, where, reason or None or "")] of one file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    code, comments = blank(text)
    blank_lines = {k + 1 for k, line in enumerate(text.split("\n")) if not line.strip()}
    return [(first, name, where, reason(comments, blank_lines, first, last))
            for name, first, last, where in scan(code)]


def check(top):
    """Print the state found under TOP/src; 0 when all is justified."""
    bad = 0
    for dirpath, _, names in sorted(os.walk(os.path.join(top, "src"))):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, top).replace(os.sep, "/")
            for line, name, where, why in check_file(path):
                if why:
                    status = "justified: " + why
                else:
                    status = "NO REASON" if why == "" else "NOT JUSTIFIED"
                    bad += 1
                print(f"{rel}:{line}: {name} ({where}): {status}")
    sys.stdout.flush()
    if bad:
        print(f"{bad} piece(s) of file-scope state without a '{MARKER} <why>' "
              "comment: put it in a handle, or say why it cannot be",
              file=sys.stderr)
    return 1 if bad else 0


SELF_TEST = r'''
#include "x.h"
#define NOT_STATE static int macro_line;
static const char *const names[] = { "a", "b" };
static const char *tables[] = { "a" };			/* mutable pointers */
static int counter;
/* file-state: the signal handler gets no argument at all */
static volatile int stop_flag;

static int undocumented_marker;	/* file-state: */
int exported = 1, *also;
extern struct config cfg;
const struct ops table = { .f = g };
static struct { int a; } anonymous = { 0 };
struct tag { int field; };
enum { ONE, TWO };
typedef int handle_t;
static int function(int arg);
static void (*hook)(void);
static void (*const fixed_hook)(void) = g;
static _Atomic(int) atomic_word;
_Static_assert(sizeof(int) == 4, "int");
static __thread char *per_thread;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* file-state: pthread_atfork handlers take no argument */
static const char *text = "static int in_string;";

/*
 * file-state: one block, one reason for all of it
 */
static int block_a;
static int block_b;

static int after_blank;

static int f(int a)
{
	static const unsigned char did[4] = { 0, 1, 2, 4 };
	static int calls;
	int local = a;	/* static int in_comment; */

	if (a) {
		static char *cached;
		return local + calls + did[0];
	}
	return 0;
}
'''

# name: (where, justified?)
SELF_TEST_EXPECT = {
    "tables": ("file scope", False),
    "counter": ("file scope", False),
    "stop_flag": ("file scope", True),
    "undocumented_marker": ("file scope", False),
    "exported": ("file scope", False),
    "also": ("file scope", False),
    "cfg": ("file scope", False),
    "anonymous": ("file scope", False),
    "hook": ("file scope", False),
    "atomic_word": ("file scope", False),
    "per_thread": ("file scope", False),
    "lock": ("file scope", True),
    "text": ("file scope", False),
    "block_a": ("file scope", True),
    "block_b": ("file scope", True),
    "after_blank": ("file scope", False),
    "calls": ("static in f()", False),
    "cached": ("static in f()", False),
}


def quiet_check(top):
    """check(TOP) with its output dropped."""
    with contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        return check(top)


def self_test():
    """The parser on SELF_TEST, and check() on a tree with and without
    state."""
    with tempfile.TemporaryDirectory() as top:
        os.makedirs(os.path.join(top, "src"))
        path = os.path.join(top, "src", "x.c")
        with open(path, "w") as f:
            f.write(SELF_TEST)
        got = {name: (where, bool(why)) for _, name, where, why in check_file(path)}
        if got != SELF_TEST_EXPECT:
            for k in sorted(set(got) | set(SELF_TEST_EXPECT)):
                if got.get(k) != SELF_TEST_EXPECT.get(k):
                    print(f"self-test: {k}: got {got.get(k)}, "
                          f"expected {SELF_TEST_EXPECT.get(k)}", file=sys.stderr)
            return 1
        if quiet_check(top) != 1:
            print("self-test: unjustified state passed", file=sys.stderr)
            return 1
        with open(path, "w") as f:
            f.write("/* file-state: a reason of several words */\nstatic int x;\n"
                    "static const int y = 1;\nint f(void) { return y; }\n")
        if quiet_check(top) != 0:
            print("self-test: justified state failed", file=sys.stderr)
            return 1
    print("self-test passed")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    top = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    return check(top)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
