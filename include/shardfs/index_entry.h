/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_entry.h - one entry of an index as the build lays it out and as
 * a packed entry decodes (index_compact.h), and the order of names in a
 * directory: what index.h and index_compact.h both need, apart so that
 * neither includes the other's module.
 *
 * Thread-safety: nothing here holds state.
 */
#ifndef SHARDFS_INDEX_ENTRY_H
#define SHARDFS_INDEX_ENTRY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Most entries one index holds (inode numbers must fit in 32 bits). */
#define SHARD_INDEX_MAX_ENTRIES (UINT32_MAX / 2)

/* Flags in struct shard_inode.flags. */
#define SHARD_INODE_SPARSE 0x1	/* data indexes sparse[], not the shard */
#define SHARD_INODE_LINKED 0x2	/* a later name of a hard-link group: its
				 * inode is in hardlinks[] */
#define SHARD_INODE_SYNTHESIZED 0x4 /* a directory no member describes:
				 * 0755, root-owned, as new as its newest
				 * entry (so it depends on content only) */

/*
 * An entry as the build lays it out, and as shard_index_entry() decodes
 * it (name and name_len then zero: shard_index_name() has the name).
 */
struct shard_inode {
	uint64_t data;		/* file: data offset in the shard (sparse:
				 * index into sparse[]); directory: entry of
				 * the first child; symlink: its target's
				 * offset in the build's names, then in the
				 * packed entries' targets */
	uint64_t size;		/* file: bytes; directory: number of
				 * children; symlink: target length */
	int64_t mtime_sec;	/* modification time, seconds */
	uint64_t name;		/* offset of the name in the build's names */
	uint32_t mtime_nsec;	/* modification time, nanoseconds */
	uint32_t mode;		/* S_IFDIR/S_IFREG/S_IFLNK | permissions */
	uint32_t uid;		/* owner as stored in the tar */
	uint32_t gid;		/* group as stored in the tar */
	uint32_t parent;	/* entry of the directory holding it (root: 0) */
	uint32_t shard;		/* shard that holds the data */
	uint32_t nlink;		/* names of a file; 2 + subdirectories */
	uint16_t name_len;	/* bytes in the name, without the NUL */
	uint16_t flags;		/* SHARD_INODE_* */
};

/*
 * The order of names within a directory: bytewise, a prefix before the
 * longer name (memcmp order).  Returns <0, 0 or >0.
 */
static inline int shard_index_name_cmp(const char *a, size_t alen, const char *b,
				       size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c ? c : (alen > blen) - (alen < blen);
}

#endif
