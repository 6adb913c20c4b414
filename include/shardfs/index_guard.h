/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_guard.h - the per-member sections of a mapped index file,
 * checked lazily: each span against its sum the first time a request
 * needs it, not all of them at mount.
 *
 * Why: a file that a record says passed the full check (index_verified.h)
 * is mounted without reading its ENTRIES, BLOCKS and ORDER (0.09 s at 20
 * M members, where checking all of them takes 0.9-1.1 s and reads the
 * whole file).  The record tells that the file system holds the file that
 * was checked; it cannot tell bytes changed beneath the file system since
 * (a disk's bit rot, a write to the block device, a fault of the storage
 * behind a shared file system).  So each INDEX_SUM_SPAN bytes of those
 * sections is checked against its sum in SUMS (index_format.h) when first
 * touched, and a block of entries whose bytes fail is never decoded: the
 * request gets EIO and the log names the file and the byte offset, once.
 * The sums themselves, the header and the small sections (a record per
 * shard or per link, not per member) are checked whole at every mount.
 *
 * Who checks what.  Entries reach requests only through a LOOKUP or a
 * READDIR of their directory.  A LOOKUP checks the directory's entry and
 * each block its binary search reads, the found child's among them
 * (shard_index_lookup(): a dozen blocks in a directory of a million
 * entries, not the directory's 15 MB); a READDIR checks the directory and
 * each entry it returns (shardfs_readdir_entry()); the root is checked at
 * load.  So every inode number the kernel holds names a checked entry, as
 * does its parent (the kernel reached it through it).  Whoever reads other
 * entries checks them first: the neighbours of a sample (fs.c), a hard-link
 * group's first name, push-ahead (all of them, in its worker, before it
 * starts), the members file, verification, and a build that copies an
 * index.  Bytes that lie fail only the requests that read them; nothing
 * is served from them.
 *
 * Cost: a bit per block of 64 entries and per span (45 KiB at 20 M
 * members); a check that finds its block checked tests one bit.
 *
 * Thread-safety: any number of threads may check at once.  Two that check
 * one span together both hash it; its bit is set by whichever ends first.
 */
#ifndef SHARDFS_INDEX_GUARD_H
#define SHARDFS_INDEX_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Bytes of a per-member section that one sum of the index file's SUMS
 * section covers (index_format.h): a first touch hashes 2 us of it
 * (warm) and reads no more than the kernel's readaround of a mapping
 * brings in anyway. */
#define INDEX_SUM_SPAN (16u * 1024)

/* The sections a guard checks, in the order of their sums in SUMS. */
enum index_guarded {
	INDEX_GUARDED_ENTRIES,	/* the packed entries (index_compact.h) */
	INDEX_GUARDED_BLOCKS,	/* where each block of them starts */
	INDEX_GUARDED_ORDER,	/* the files by shard and offset */
	INDEX_NR_GUARDED
};

/* Where one guarded section lies, and its sums. */
struct index_guard_section {
	const char *bytes;	/* the section in the mapping */
	uint64_t offset;	/* its offset in the file, for messages */
	uint64_t length;	/* its bytes */
	const char *name;	/* its name, for messages */
	const uint64_t *sums;	/* its spans' sums (index_guard_new()) */
	uint64_t first_span;	/* its first span's bit in spans_ok (same) */
};

struct index_guard {
	struct index_guard_section sec[INDEX_NR_GUARDED]; /* the sections */
	uint32_t nr_blocks;	/* blocks of entries */
	atomic_ullong *blocks_ok; /* bit per block: its offsets and bytes
				 * passed */
	atomic_ullong *spans_ok; /* bit per span: it matched its sum */
	atomic_ullong *spans_bad; /* bit per span: it did not (logged) */
	char *path;		/* the index file, for messages */
};

/*
 * A guard over the sections @sec (bytes, offset, length and name set) of
 * the index file @path, of @nr_blocks blocks of entries, whose checked
 * SUMS section @sums holds the sums of their spans in order, into *@out.
 * 0 or -ENOMEM.
 */
int index_guard_new(struct index_guard **out, const char *path,
		    const struct index_guard_section sec[INDEX_NR_GUARDED],
		    const uint64_t *sums, uint32_t nr_blocks);

/* Free @g (NULL: nothing). */
void index_guard_free(struct index_guard *g);

/*
 * Check the block that holds entry @e.  0, or -EIO (logged) when a span
 * it needs fails its sum.
 */
int index_guard_entry(struct index_guard *g, uint32_t e);

/* Whether entry @e's block was checked and passed. */
bool index_guard_entry_ok(const struct index_guard *g, uint32_t e);

/* Check every span of every guarded section.  0 or -EIO (logged). */
int index_guard_all(struct index_guard *g);

/* Spans of INDEX_SUM_SPAN bytes in a section of @len bytes. */
static inline uint64_t index_guard_spans(uint64_t len)
{
	return (len + INDEX_SUM_SPAN - 1) / INDEX_SUM_SPAN;
}

/* XXH3 of span @k of the @len-byte section at @bytes: what SUMS holds. */
uint64_t index_guard_span_sum(const char *bytes, uint64_t len, uint64_t k);

#endif
