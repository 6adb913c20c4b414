#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# make-corpus.sh - build the seed corpora of the fuzz targets.
#
# usage: tests/fuzz/make-corpus.sh OUTDIR
#
# Writes OUTDIR/tar (seeds for fuzz_tar), OUTDIR/index (for fuzz_index,
# and as OUTDIR/index_bounded, a link to it, for fuzz_index_bounded),
# OUTDIR/zstd_seek_table (for fuzz_zstd_seek_table) and
# OUTDIR/index_compact (for fuzz_index_compact).
# The seeds are real archives of one small tree, written by every writer
# shardfs meets in practice: GNU tar in each --format (v7, oldgnu, gnu,
# ustar, posix) and each sparse version, with a label, an incremental
# dump, base-256 numbers and sub-second times; bsdtar in each of its
# formats; Python's tarfile in GNU, PAX and ustar form.  Third-party test
# archives committed in tests/data/fuzz-seeds/ are added as they are.
# The index corpus holds every tar seed as a one-shard input plus a few
# multi-shard inputs (see fuzz_common.h for the framing) whose shards
# override, conflict with and link into each other.
#
# Generated rather than committed: the seeds follow the tools installed,
# and a fresh tree costs a second.  Missing bsdtar only skips its seeds.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
out=$(realpath -m "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/tar" "$out/index"

# Fixed owner and time, so that GNU tar writes the same bytes every run;
# one-block records, so that seeds carry no padding.
gtar_fixed=(--sort=name --owner=0 --group=0 --numeric-owner --mtime=@1700000000 -b 1)
sep=$'\n==shard==\n'	# FUZZ_SHARD_SEP in fuzz_common.h

# The tree every writer archives: WebDataset-like samples (labelled for
# the classes layout by .cls and by a .json "label" field), a long name,
# a long link target, links, an empty directory and a FIFO; and beside it
# the sparse files, archived only in the formats that keep them sparse.
make_tree() {
	local t=$work/tree
	local deep=dir-with-a-long-name-0123456789/another-long-component-abcdefghij
	deep=$deep/and-a-third-one-to-pass-the-prefix/$deep

	mkdir -p "$t/samples" "$t/empty" "$t/$deep"
	printf 'jpeg' >"$t/samples/000001.jpg"
	printf ' 1\n' >"$t/samples/000001.cls"	# a class in fuzz_index's names
	printf 'jpeg' >"$t/samples/000002.jpg"
	printf '{"id": [1, {"x": "}"}], "label": "dog\\tcat"}' >"$t/samples/000002.json"
	printf '3' >"$t/samples/000002.cls"
	printf 'x' >"$t/$deep/member-name-that-is-well-over-one-hundred-bytes-long-once-the-directories-are-counted.txt"
	printf 'caf\xc3\xa9' >"$t/samples/caf$(printf '\xc3\xa9').txt"
	ln -s samples/000001.jpg "$t/link"
	ln -s "$deep/../../../../x-target-longer-than-a-hundred-bytes-so-that-gnu-needs-a-K-record-and-ustar-fails-here" "$t/longlink"
	ln "$t/samples/000001.jpg" "$t/samples/hardlink.jpg"
	mkfifo "$t/fifo"
	touch -d '2001-02-03 04:05:06.789' "$t/samples/000001.cls"
	mkdir "$work/sparse"
	make_sparse "$work/sparse/few" 4
	make_sparse "$work/sparse/many" 30	# old GNU: two extension blocks
	truncate -s 1M "$work/sparse/hole-only"
}

# A 1 MiB file holding @2 one-byte runs, 16 KiB apart.
make_sparse() {
	truncate -s 1M "$1"
	for ((i = 0; i < $2; i++)); do
		printf 'D' | dd of="$1" bs=1 seek=$((i * 16384 + 100)) conv=notrunc status=none
	done
}

gnu_seeds() {
	local f sv

	for f in v7 oldgnu gnu ustar posix; do
		# v7 and ustar cannot store every name: tar says so and goes on
		tar -C "$work/tree" "${gtar_fixed[@]}" --format=$f -cf "$out/tar/gnu-$f.tar" . 2>/dev/null || true
	done
	tar -C "$work/sparse" "${gtar_fixed[@]}" --format=gnu -S --hole-detection=raw \
		-cf "$out/tar/gnu-sparse-old.tar" .
	for sv in 0.0 0.1 1.0; do
		tar -C "$work/sparse" "${gtar_fixed[@]}" --format=posix -S --hole-detection=raw \
			--sparse-version=$sv --pax-option=delete=atime,delete=ctime \
			-cf "$out/tar/gnu-sparse-$sv.tar" .
	done
	tar -C "$work/tree" "${gtar_fixed[@]}" --format=gnu -V 'volume label' -cf "$out/tar/gnu-label.tar" samples
	tar -C "$work/tree" -b 1 --format=gnu --listed-incremental="$work/snar" \
		-cf "$out/tar/gnu-incremental.tar" samples
	tar -C "$work/tree" -b 1 --sort=name --format=gnu --owner=big:4000000000 --group=0 \
		--mtime='1950-01-01 UTC' -cf "$out/tar/gnu-base256.tar" samples
	tar -C "$work/tree" -b 1 --sort=name --format=posix -cf "$out/tar/gnu-pax-times.tar" samples
}

bsdtar_seeds() {
	local f

	if ! command -v bsdtar >/dev/null; then
		echo "make-corpus: bsdtar not found, its seeds are skipped" >&2
		return
	fi
	for f in ustar pax paxr gnutar v7; do
		bsdtar -C "$work/tree" --format $f --uid 0 --gid 0 -b 1 \
			-cf "$out/tar/bsdtar-$f.tar" . 2>/dev/null || true
	done
	bsdtar -C "$work/sparse" --format pax --read-sparse -b 1 \
		-cf "$out/tar/bsdtar-sparse.tar" . 2>/dev/null || true
}

# tarfile's three formats, samples labelled only by .json (the other
# seeds have .cls members, which fuzz_index prefers), and a PAX global
# header with PAX-only fields.
python_seeds() {
	python3 - "$work/tree" "$out/tar" <<'EOF'
import io, os, sys, tarfile
tree, out = sys.argv[1], sys.argv[2]
paths = sorted(os.path.join(d, n) for d, dirs, files in os.walk(tree)
               for n in dirs + files)
for name, fmt in (("gnu", tarfile.GNU_FORMAT), ("pax", tarfile.PAX_FORMAT),
                  ("ustar", tarfile.USTAR_FORMAT)):
    with tarfile.open(f"{out}/python-{name}.tar", "w", format=fmt) as t:
        for p in paths:
            try:
                t.add(p, arcname=os.path.relpath(p, tree), recursive=False)
            except ValueError:    # ustar: name or link too long
                pass
with tarfile.open(f"{out}/python-json-labels.tar", "w", format=tarfile.USTAR_FORMAT) as t:
    for key, meta in (("a/0001", b'{"label": "7"}'), ("a/0002", b' {"x": {"label": 1}, "label" : "cat"}'),
                      ("b/0001", b'{"label": 3.5e1}'), ("b/0002", b'{"label": "a\\/b"}')):
        for name, data in ((key + ".json", meta), (key + ".jpg", b"jpeg")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
with tarfile.open(f"{out}/python-pax-global.tar", "w", format=tarfile.PAX_FORMAT,
                  pax_headers={"comment": "global", "uid": "7"}) as t:
    info = tarfile.TarInfo("a/" + "n" * 150)
    info.pax_headers = {"mtime": "-1.5", "gid": "4294967295"}
    t.addfile(info)
EOF
}

# Multi-shard inputs: the same tree twice (every path overridden), a
# directory replaced by a file, hard links into earlier shards, paths
# both a file and a directory.
index_seeds() {
	local f

	for f in "$out"/tar/*.tar; do
		cp "$f" "$out/index/"
	done
	{ cat "$out/tar/gnu-gnu.tar"; printf '%s' "$sep"; cat "$out/tar/gnu-posix.tar"; } \
		>"$out/index/override-gnu-posix"
	{ cat "$out/tar/gnu-sparse-old.tar"; printf '%s' "$sep"; cat "$out/tar/gnu-sparse-1.0.tar"
	  printf '%s' "$sep"; cat "$out/tar/python-pax.tar"; } >"$out/index/three-shards"
	python3 - "$out/index" "$sep" <<'EOF'
import io, sys, tarfile
out, sep = sys.argv[1], sys.argv[2].encode()
def shard(*members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, arg in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.LNKTYPE or kind == tarfile.SYMTYPE:
                info.linkname = arg
                t.addfile(info)
            else:
                info.size = len(arg)
                t.addfile(info, io.BytesIO(arg))
    return buf.getvalue()
F, D, L, S = tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.LNKTYPE, tarfile.SYMTYPE
with open(f"{out}/dir-replaced-by-file", "wb") as f:
    f.write(shard(("d/", D, b""), ("d/x", F, b"x"), ("e/", D, b"")) + sep +
            shard(("d", F, b"file"), ("e", F, b"file"), ("e/y", F, b"y")))
with open(f"{out}/hardlink-across-shards", "wb") as f:
    f.write(shard(("a/1.jpg", F, b"one"), ("a/2.jpg", S, "1.jpg")) + sep +
            shard(("b/1.jpg", L, "a/1.jpg"), ("a/1.jpg", F, b"new"), ("b/2.jpg", L, "a/1.jpg")))
# the bounded build's links: to the shard before (a link to a link there,
# a target replaced after), two shards back (the in-memory build), to a
# sparse-free symlink; files of each shard left beside the others' for
# an extension to rank
with open(f"{out}/hardlinks-bounded", "wb") as f:
    f.write(shard(("s/a.jpg", F, b"aaaa"), ("s/b.jpg", F, b"bb"), ("s/c", S, "a.jpg"),
                  ("s/d.jpg", L, "s/a.jpg")) + sep +
            shard(("t/a.jpg", L, "s/d.jpg"), ("t/c", L, "s/c"), ("s/b.jpg", F, b"new"),
                  ("t/b.jpg", L, "s/b.jpg"), ("t/e.jpg", F, b"e")) + sep +
            shard(("u/a.jpg", L, "t/a.jpg"), ("u/s.jpg", L, "s/a.jpg"), ("u/f.jpg", F, b"f")))
# paths both a file and a directory in the orders extraction tells apart
# (the bounded build replays them): below a file, a file over a directory
# that holds something, a directory member over a file, nested, in one
# shard
with open(f"{out}/paths-file-and-dir", "wb") as f:
    f.write(shard(("f", F, b"f"), ("g", F, b"g"), ("n", F, b"n"), ("q/", D, b""),
                  ("r", F, b"r"), ("r/x", F, b"x"), ("r/", D, b""), ("r/y", F, b"y")) + sep +
            shard(("f/x", F, b"x"), ("g/", D, b""), ("g/x", F, b"x"), ("n/m/x", F, b"x"),
                  ("n/", D, b""), ("n/m", F, b"m"), ("q", F, b"q")) + sep +
            shard(("g", F, b"g again"), ("n/m/y", F, b"y"), ("n/z", F, b"z")))
# links three and four shards back, one to a file replaced in between,
# one to nothing (refused, its directory never made)
with open(f"{out}/hardlinks-far", "wb") as f:
    f.write(shard(("a/1.jpg", F, b"1"), ("a/2.jpg", F, b"2")) + sep +
            shard(("b/1.jpg", F, b"b1"), ("a/2.jpg", F, b"2 again")) + sep +
            shard(("c/1.jpg", F, b"c1")) + sep +
            shard(("d/1.jpg", L, "a/1.jpg"), ("d/2.jpg", L, "a/2.jpg")) + sep +
            shard(("e/1.jpg", L, "a/1.jpg"), ("e/b.jpg", L, "b/1.jpg"),
                  ("lone/x", L, "nothing"), ("e/c.jpg", L, "c/1.jpg")))
EOF
}

# Seeds for fuzz_zstd_seek_table (the first byte picks the harness's
# mode and frames: see fuzz_zstd_seek_table.c): its frames' true table with
# and without per-frame checksums, over frames with and without content
# sizes; and broken ones: an entry's compressed size one off, a
# decompressed size one off, two entries merged, an entry dropped, the
# frame count one off, a table of garbage entries, a footer alone, and a
# tail that is no table at all.
zstd_seek_table_seeds() {
	local d=$out/zstd_seek_table

	mkdir -p "$d"
	printf '\x02' >"$d/valid"
	printf '\x12' >"$d/valid-checksums"
	printf '\x42' >"$d/valid-no-content-sizes"
	printf '\x52' >"$d/valid-checksums-no-content-sizes"
	printf '\x02\x02\x01\x01' >"$d/compressed-size-off"
	printf '\x12\x03\x02\xff' >"$d/decompressed-size-off"
	printf '\x02\x00\x00\x00' >"$d/merged-keeping-size"
	printf '\x02\x01\x01\x00' >"$d/merged-adding-sizes"
	printf '\x02\x04\x03\x00' >"$d/entry-dropped"
	printf '\x12\x06\x00\x01' >"$d/frame-count-off"
	printf '\x31\x02\x40\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00' >"$d/garbage-entries"
	printf '\x00\x00\x00\x00\x00\x00\xb1\xea\x92\x8f' >"$d/footer-only"
	printf '\x00not a seek table' >"$d/no-table"
}

# Seeds for fuzz_index_compact, framed as that target reads them (the
# entry count, the length of ENTRIES, BLOCKS, ENTRIES, TARGETS): a root
# alone; a small tree with a link; a directory of 150 ImageNet-like
# names, three blocks.  The blocks are laid out as index_compact.h says,
# by this second encoder: the bytes match what compact_encoder_add()
# writes for the same entries.
index_compact_seeds() {
	mkdir -p "$out/index_compact"
	python3 - "$out/index_compact" <<'EOF'
import struct, sys
out = sys.argv[1]
IFDIR, IFREG, IFLNK = 0o40000, 0o100000, 0o120000
def block(entries):
    """One block of (fields, name) pairs."""
    base = [min(f[i] for f, _ in entries) for i in range(11)]
    width = [(max(f[i] for f, _ in entries) - base[i]).bit_length() for i in range(11)]
    acc = bits = 0
    for f, _ in entries:
        for i in range(11):
            acc |= (f[i] - base[i]) << bits
            bits += width[i]
    body = acc.to_bytes((bits + 7) // 8, "little") + bytes(8)
    groups = []
    for g in range(0, 64, 16):
        groups.append(112 + len(body))
        prev = None
        for _, name in entries[g:g + 16]:
            if prev is None:
                body += bytes([len(name)]) + name
            else:
                shared = next((i for i, (a, b) in enumerate(zip(prev, name)) if a != b),
                              min(len(prev), len(name)))
                body += bytes([shared, len(name) - shared]) + name[shared:]
            prev = name
    return (bytes(width) + bytes([len(entries)]) + bytes(4) + struct.pack("<11Q", *base)
            + struct.pack("<4H", *groups) + body)
def seed(path, entries, targets=b""):
    """Entries of (data, size, mode, parent, name), framed."""
    blocks = [block([((d, s, 1700000000, 0, m, 0, 0, p, 0, 1, 0), n)
                     for d, s, m, p, n in entries[i:i + 64]])
              for i in range(0, len(entries), 64)]
    offsets = [sum(map(len, blocks[:i])) for i in range(len(blocks) + 1)]
    with open(f"{out}/{path}", "wb") as f:
        f.write(struct.pack("<II", len(entries), offsets[-1])
                + struct.pack(f"<{len(offsets)}Q", *offsets) + b"".join(blocks) + targets)
seed("root", [(1, 0, IFDIR | 0o755, 0, b"")])
seed("tree", [(1, 3, IFDIR | 0o755, 0, b""), (4, 2, IFDIR | 0o755, 0, b"a"),
              (0, 7, IFLNK | 0o777, 0, b"link"), (512, 10, IFREG | 0o644, 0, b"zz"),
              (1536, 5, IFREG | 0o644, 1, b"x.cls"), (2560, 1 << 40, IFREG | 0o644, 1, b"x.jpg")],
     b"a/x.jpg\0")
seed("samples", [(1, 150, IFDIR | 0o755, 0, b"")] +
     [(i * 100352, 99840 + i, IFREG | 0o644, 0, b"n01440764_%05d.JPEG" % (10026 + 7 * i))
      for i in range(150)])
EOF
}

copy_committed_seeds() {
	local f

	for f in "$repo"/tests/data/fuzz-seeds/*/*.tar; do
		cp "$f" "$out/tar/$(basename "$(dirname "$f")")-$(basename "$f")"
	done
}

make_tree
gnu_seeds
bsdtar_seeds
python_seeds
copy_committed_seeds
index_seeds
ln -sfn index "$out/index_bounded"
zstd_seek_table_seeds
index_compact_seeds
tar_seeds=("$out"/tar/*)
index_seeds=("$out"/index/*)
echo "make-corpus: ${#tar_seeds[@]} tar seeds, ${#index_seeds[@]} index seeds in $out"
