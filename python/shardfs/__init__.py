# SPDX-License-Identifier: Apache-2.0
"""Python access to a shardfs mount's control files.

A shardfs mount has a hidden directory `/.shardfs/` at its root: never
listed by readdir, but reachable by name.  Two of its files say where
every file of the mount lives in the shards:

* `members`: one line per regular file,
  `path\\tshard_index\\toffset\\tsize\\n`, where path is relative to the mount
  root (raw bytes; a tab, newline or backslash in a name is written as
  `\\t`, `\\n`, `\\\\`), shard_index is the 0-based shard number, offset the
  byte offset of the file's data in that shard and size its length;
* `shards`: one line per shard, `index\\tpath\\tsize\\tmembers...\\n`.

Fields after the ones named here are ignored, so that shardfs can add
columns without breaking readers.

This module finds the mount above a path and parses those files; it uses
the standard library only, so a data-loading process can import it
without torch.  `shardfs.torch` builds the shard-aware sampler on it.

    >>> import shardfs
    >>> root = shardfs.find_mount_root("/mnt/imagenet/train")
    >>> shardfs.locate(["/mnt/imagenet/train/n01440764/x.JPEG"], root)
    [(0, 1536)]
"""
import os
import re
from typing import (Dict, Iterable, List, NamedTuple, Optional, Set, Tuple,
                    Union)

__all__ = ["CONTROL_DIR", "Member", "Shard", "NotOnShardfs", "find_mount_root",
           "read_members", "read_shards", "locate", "unescape"]

CONTROL_DIR = ".shardfs"
MEMBERS_FILE = "members"
SHARDS_FILE = "shards"


class Member(NamedTuple):
    """Where one regular file of the mount is stored."""
    shard: int       # 0-based shard number
    offset: int      # byte offset of the file's data in the shard
    size: int        # bytes


class Shard(NamedTuple):
    """One line of `/.shardfs/shards`.

    `members` counts the shard's tar members that the index kept: regular
    files, directories, symlinks and hard links, including those that a
    later shard's member of the same path replaces (so the sum over the
    shards can exceed the files a mount shows).  Not counted: device nodes
    and FIFOs, members skipped for their names (`..`), and with
    `layout=classes,unlabeled=skip` the members of unlabeled samples.
    Metadata-only tar headers (PAX, GNU long names) are never members."""
    index: int
    path: bytes      # the shard file, as shardfs opened it (absolute)
    size: int        # bytes
    members: int     # tar members the index kept (see above)


class NotOnShardfs(ValueError):
    """The path is not inside a shardfs mount that has control files."""


_ESCAPE = re.compile(rb"\\(.)", re.S)
_UNESCAPED = {b"t": b"\t", b"n": b"\n", b"\\": b"\\"}

# A path as callers give one: str or bytes, or an os.PathLike of either.
Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def unescape(field: bytes) -> bytes:
    """Undo the control files' escaping of one field (bytes): `\\t`, `\\n`
    and `\\\\` become a tab, a newline and a backslash."""
    if b"\\" not in field:
        return field
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(0)), field)


def _control_file(mountpoint: Path, name: str) -> bytes:
    return os.path.join(os.fsencode(mountpoint), os.fsencode(CONTROL_DIR),
                        os.fsencode(name))


def _has_control_files(directory: Path) -> bool:
    return os.path.exists(_control_file(directory, MEMBERS_FILE))


def find_mount_root(path: Path) -> str:
    """The shardfs mount root at or above PATH: the nearest directory that
    has `.shardfs/members`.  Raises NotOnShardfs when there is none."""
    start = os.path.abspath(os.fsdecode(path))
    directory = start
    while True:
        if _has_control_files(directory):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            raise NotOnShardfs(
                "%s is not inside a shardfs mount with control files (no "
                "%s/%s above it); pass mountpoint= or upgrade shardfs"
                % (start, CONTROL_DIR, MEMBERS_FILE))
        directory = parent


def _lines(mountpoint: Path, name: str) -> List[bytes]:
    """The lines (bytes) of a control file, read in one pass."""
    with open(_control_file(mountpoint, name), "rb") as f:
        data = f.read()
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


def _fields(line: bytes, count: int) -> List[bytes]:
    """The first COUNT tab-separated fields of LINE (later fields, which
    newer shardfs versions may add, are ignored)."""
    fields = line.split(b"\t", count)
    if len(fields) < count:
        raise ValueError("malformed control-file line: %r" % (line,))
    return fields[:count]


def _member_table(mountpoint: Path, wanted: Optional[Set[bytes]] = None
                  ) -> Dict[bytes, Tuple[int, int, int]]:
    """{path: (shard, offset, size)} from one read of the members file,
    kept to WANTED when given: the fast core of read_members() (plain
    tuples; millions of lines go through this loop)."""
    out: Dict[bytes, Tuple[int, int, int]] = {}
    for line in _lines(mountpoint, MEMBERS_FILE):
        path, _, rest = line.partition(b"\t")
        if b"\\" in path:
            path = unescape(path)
        if wanted is None or path in wanted:
            try:
                shard, offset, size = rest.split(b"\t", 3)[:3]
                out[path] = (int(shard), int(offset), int(size))
            except ValueError:
                raise ValueError("malformed control-file line: %r" % (line,)) from None
    return out


def read_members(mountpoint: Path, wanted: Optional[Set[bytes]] = None
                 ) -> Dict[bytes, Member]:
    """{path relative to the mount root (bytes): Member} from one read of
    `/.shardfs/members`.  With WANTED (a set of such paths) only those are
    kept, which saves time and memory on mounts with millions of files."""
    return {path: Member(*fields)
            for path, fields in _member_table(mountpoint, wanted).items()}


def read_shards(mountpoint: Path) -> List[Shard]:
    """[Shard] in shard order, from `/.shardfs/shards`."""
    shards = []
    for line in _lines(mountpoint, SHARDS_FILE):
        index, path, size, members = _fields(line, 4)
        shards.append(Shard(int(index), unescape(path), int(size), int(members)))
    return shards


def _relative(path: str, mountpoint: str) -> bytes:
    return os.fsencode(os.path.relpath(os.path.abspath(path), mountpoint))


def _relatives(paths: List[str], mountpoint: str) -> List[bytes]:
    """_relative() of every path; normalised absolute paths below
    MOUNTPOINT (ImageFolder's, usually) take a fast path."""
    prefix = mountpoint.rstrip("/") + "/"
    cut = len(prefix)
    return [os.fsencode(p[cut:])
            if p.startswith(prefix) and "/." not in p and "//" not in p
            else _relative(p, mountpoint) for p in paths]


def locate(paths: Iterable[Path], mountpoint: Optional[Path] = None
           ) -> List[Tuple[int, int]]:
    """[(shard, offset)] for each of PATHS (files inside the mount; str or
    bytes, absolute or relative to the working directory), in order, from
    one read of the members file.  MOUNTPOINT defaults to the mount above
    the first path.  Paths that name a file through a symlink are resolved
    (at the cost of a second read); a path that is still unknown raises
    KeyError."""
    names = [os.fsdecode(p) for p in paths]
    if not names:
        return []
    if mountpoint is None:
        mountpoint = find_mount_root(os.path.dirname(os.path.abspath(names[0])))
    root = os.path.abspath(os.fsdecode(mountpoint))
    relative = _relatives(names, root)
    members = _member_table(root, wanted=set(relative))
    missing = [i for i, rel in enumerate(relative) if rel not in members]
    if missing:
        real_mount = os.path.realpath(root)
        for i in missing:
            relative[i] = _relative(os.path.realpath(names[i]), real_mount)
        members.update(_member_table(root,
                                     wanted={relative[i] for i in missing}))
    unknown = [names[i] for i in missing if relative[i] not in members]
    if unknown:
        raise KeyError("%d paths are not regular files listed in %s/%s/%s, "
                       "e.g. %s" % (len(unknown), root, CONTROL_DIR,
                                    MEMBERS_FILE, unknown[0]))
    return [members[rel][:2] for rel in relative]
