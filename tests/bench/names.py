#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What an index entry could cost: candidate encodings of member names and
of the rest of an entry, on real-looking WebDataset corpora (issue 30).

No shards are written and no index is built: the members a corpus would
hold (path, shard, data offset, size, in tar order) are simulated, laid out
as the index lays them out (a directory's children contiguous and sorted
by name), and each candidate's bytes are counted exactly as its encoder
would write them.  The figures are for choosing the next index format;
docs/benchmarks-scale.md keeps them.

    /usr/bin/python3 tests/bench/names.py [--members N] [--block B]

Corpora:
  imagenet  ImageNet packed as an image folder: n01440764/n01440764_10026.JPEG,
            1,000 class directories, samples shuffled over shards of 1,000
  laion     LAION as img2dataset writes it: 000123456.jpg/.txt/.json at the
            root, shards of 10,000 samples in key order
  uuid      uuid4 keys with .jpg and .json, shards of 5,000 samples

Candidates for the name of each entry (bytes per member):
  raw       today's pool: the last component and its NUL
  front     front coding in blocks of B names: per name a varint of the
            bytes shared with the previous name of the block (0 for the
            first) and of the rest's length, then the rest; plus a 4-byte
            offset per block (lookup: binary search over the blocks' first
            names, then at most B - 1 names decoded)
  front+ext the same on the key, the extension as one byte of a per-set
            dictionary
  delta     keys that are decimal numbers of one width: per name a varint
            of the key's difference from the previous key of the block
            and the extension byte (front+ext where the key is not)
Candidates for the rest of an entry (bytes per member):
  v2        today's struct shard_inode, 64 bytes
  compact   one flag byte (kind; same shard as the previous entry; mode,
            owner and mtime those of the shard's dictionary), a varint of
            the size, the shard as a varint when it changes, and the data
            offset as a zigzag varint of its difference from where the
            previous entry's member of that shard ends (header + data
            rounded to 512 bytes)
"""
import argparse
import random
import uuid

WIDTH = 9          # LAION's key width


def varint(n):
    """Bytes of the LEB128 encoding of N >= 0."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def zigzag(n):
    return 2 * n if n >= 0 else -2 * n - 1


def sizes(rng, kinds):
    """A member size for each extension in KINDS (bytes, lognormal-ish)."""
    typical = {"JPEG": 110000, "jpg": 30000, "txt": 100, "json": 600, "cls": 3}
    return [max(1, int(rng.lognormvariate(0, 0.5) * typical[k])) for k in kinds]


def tar_order(samples, per_shard):
    """(dir, name, shard, offset, size) of every member, shard by shard in
    tar order: a 512-byte header, then the data rounded up to 512."""
    out = []
    for s in range(0, len(samples), per_shard):
        shard, off = s // per_shard, 0
        for d, key, members in samples[s:s + per_shard]:
            for ext, size in members:
                out.append((d, "%s.%s" % (key, ext), shard, off + 512, size))
                off += 512 + (size + 511) // 512 * 512
    return out


def corpus(name, n, rng):
    if name == "imagenet":
        classes = ["n%08d" % rng.randrange(10**8) for _ in range(1000)]
        samples = []
        for i in range(n):
            c = classes[i % 1000]
            samples.append((c, "%s_%d" % (c, rng.randrange(1, 1400) * 10 + i % 10),
                            list(zip(["JPEG"], sizes(rng, ["JPEG"])))))
        rng.shuffle(samples)
        return tar_order(samples, 1000)
    if name == "laion":
        kinds = ["jpg", "txt", "json"]
        samples = [("", "%0*d" % (WIDTH, i), list(zip(kinds, sizes(rng, kinds))))
                   for i in range(n // 3)]
        return tar_order(samples, 10000)
    kinds = ["jpg", "json"]
    samples = [("", str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                list(zip(kinds, sizes(rng, kinds)))) for _ in range(n // 2)]
    return tar_order(samples, 5000)


def split(name):
    key, _, ext = name.rpartition(".")
    return key, ext


def name_costs(names, block):
    """Bytes of each name candidate for one directory's sorted NAMES."""
    raw = sum(len(x) + 1 for x in names)
    front = front_ext = delta = 4 * ((len(names) + block - 1) // block)
    for b in range(0, len(names), block):
        prev = ""
        prev_key = None
        for x in names[b:b + block]:
            shared = len(_common(prev, x))
            front += varint(shared) + varint(len(x) - shared) + len(x) - shared
            key, _ = split(x)
            pk = split(prev)[0] if prev else ""
            shared = len(_common(pk, key))
            cost = varint(shared) + varint(len(key) - shared) + len(key) - shared + 1
            front_ext += cost
            if key.isdigit() and (prev_key is None or len(prev_key) == len(key)):
                delta += varint(int(key) - int(prev_key or "0")) + 1
                prev_key = key
            else:
                delta += cost
            prev = x
    return raw, front, front_ext, delta


def _common(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def record_costs(entries):
    """Bytes of the compact record for ENTRIES in index order."""
    total, prev_shard = 0, None
    end = {}           # shard -> where the previous member of it ended
    for _, _, shard, off, size in entries:
        total += 1 + varint(size)
        if shard != prev_shard:
            total += varint(shard)
        want = end.get(shard, 512)
        total += varint(zigzag(off - want))
        end[shard] = off + (size + 511) // 512 * 512 + 512
        prev_shard = shard
    return total


def measure(name, n, block, rng):
    members = corpus(name, n, rng)
    dirs = {}
    for m in members:
        dirs.setdefault(m[0], []).append(m)
    index_order = []
    costs = [0, 0, 0, 0]
    for d in sorted(dirs):
        entries = sorted(dirs[d], key=lambda m: m[1].encode())
        index_order += entries
        for i, c in enumerate(name_costs([m[1] for m in entries], block)):
            costs[i] += c
    k = len(members)
    rec = record_costs(index_order)
    return [name, k] + [c / k for c in costs] + [64.0, rec / k]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=300000)
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print("bytes per member, %d members per corpus, blocks of %d names\n" % (a.members, a.block))
    print("| corpus | members | names: raw (today) | front | front+ext | delta "
          "| rest: v2 (today) | compact | total today | total best |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in ("imagenet", "laion", "uuid"):
        r = measure(name, a.members, a.block, random.Random(a.seed))
        best = min(r[3:6]) + r[7]
        print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f | **%.1f** |"
              % (*r, r[2] + r[6], best))


if __name__ == "__main__":
    main()
