/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_compact.h - the entries of an index and their names, packed in
 * blocks that are read in place: the index file's ENTRIES, BLOCKS and
 * TARGETS sections (index_format.h, version 4) and what a mount serves.
 *
 * Why: an entry was a 64-byte struct shard_inode plus its NUL-terminated
 * name, 81-85 bytes per member, and an index is mapped on every training
 * node (150 M members: 12 GiB).  WebDataset members are regular: within a
 * run of neighbours, mode, owner and time are one value, sizes and offsets
 * differ in their low bits, names share their prefix.  tests/bench/names.py
 * measured the candidates (docs/benchmarks-scale.md); the one kept packs
 * each field of 64 neighbours as a difference from the block's least value
 * in as many bits as the largest difference needs (frame of reference),
 * so that any field of any entry is read with one shift and no decoding of
 * its neighbours, and front-codes the names in groups of 16.
 *
 * Layout.  Entries are numbered as in index.h (entry 0 the root).  Entry e
 * is in block e / COMPACT_BLOCK_ENTRIES; the BLOCKS section is an array of
 * nr_blocks + 1 uint64_t, the offset of each block in ENTRIES and then
 * the length of ENTRIES.  A block of n entries (COMPACT_BLOCK_ENTRIES but
 * for the last, which may hold fewer) is, all integers little-endian:
 *
 *   uint8_t  width[COMPACT_NR_FIELDS]  bits of each field, 0..64
 *   uint8_t  nr                        n
 *   uint8_t  pad[COMPACT_HEADER_PAD]   zero
 *   uint64_t base[COMPACT_NR_FIELDS]   each field's least value in the block
 *   uint16_t group[COMPACT_BLOCK_GROUPS] offset from the block's start of
 *                                      each name group; a group past n
 *                                      entries has the block's length
 *   records  n records of sum(width) bits each, field after field in
 *            enum compact_field order, value - base; bit k of the area is
 *            bit k % 8 of byte k / 8; then zero bytes up to a whole byte
 *            and COMPACT_RECORD_SLACK more
 *   names    group g holds the names of the block's entries 16g..16g+15
 *            (those that exist): the first as uint8_t len and len bytes,
 *            each next as uint8_t shared (bytes in common with the name
 *            before, <= its length), uint8_t suffix and suffix bytes
 *
 * A symbolic link's target is not in the names: its data field is the
 * target's offset in TARGETS, a byte pool of NUL-terminated targets, and
 * its size the target's length.
 *
 * Decoded, an entry is a struct shard_inode with name and name_len zero:
 * its name comes from compact_name(), which decodes at most 15 names
 * before it.
 *
 * Trust: compact_check() is the structural check of untrusted bytes
 * (index_file.c's full check runs it before anything is decoded); every
 * other function here assumes bytes that passed it, asserts what it
 * relies on and never reads outside the sections either way.
 *
 * Thread-safety: a struct compact_entries is read-only once set; its
 * functions may be called from any number of threads.  An encoder or a
 * cursor belongs to one thread.
 */
#ifndef SHARDFS_INDEX_COMPACT_H
#define SHARDFS_INDEX_COMPACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shardfs/index_entry.h"
#include "shardfs/path.h"

/* Entries in a block. */
#define COMPACT_BLOCK_ENTRIES 64
/* Names in a front-coded group: a name decodes at most this many - 1
 * names before it. */
#define COMPACT_GROUP_NAMES 16
#define COMPACT_BLOCK_GROUPS (COMPACT_BLOCK_ENTRIES / COMPACT_GROUP_NAMES)
/* Zero bytes after the records, so that a field is read with unaligned
 * 8-byte loads that never leave the block. */
#define COMPACT_RECORD_SLACK 8
/* Largest block: the header, 64 records of 64 bits per field, 64 names. */
#define COMPACT_BLOCK_MAX (COMPACT_HEADER_BYTES + \
	COMPACT_BLOCK_ENTRIES * COMPACT_NR_FIELDS * 8 + COMPACT_RECORD_SLACK + \
	COMPACT_BLOCK_ENTRIES * (2 + PATH_COMPONENT_MAX))

/* The fields of an entry, in the order a record holds them. */
enum compact_field {
	COMPACT_DATA,		/* shard_inode.data */
	COMPACT_SIZE,		/* .size */
	COMPACT_MTIME_SEC,	/* .mtime_sec, as uint64_t */
	COMPACT_MTIME_NSEC,	/* .mtime_nsec */
	COMPACT_MODE,		/* .mode */
	COMPACT_UID,		/* .uid */
	COMPACT_GID,		/* .gid */
	COMPACT_PARENT,		/* .parent */
	COMPACT_SHARD,		/* .shard */
	COMPACT_NLINK,		/* .nlink */
	COMPACT_FLAGS,		/* .flags */
	COMPACT_NR_FIELDS
};

#define COMPACT_HEADER_PAD 4
/* Bytes before a block's records. */
#define COMPACT_HEADER_BYTES (COMPACT_NR_FIELDS + 1 + COMPACT_HEADER_PAD + \
	8 * COMPACT_NR_FIELDS + 2 * COMPACT_BLOCK_GROUPS)

/* The three sections, read in place (mapped or in memory). */
struct compact_entries {
	const uint8_t *entries;	/* the ENTRIES section: the blocks */
	uint64_t entries_len;	/* its bytes */
	const uint64_t *blocks;	/* the BLOCKS section: nr_blocks + 1 offsets */
	const char *targets;	/* the TARGETS section: link targets */
	uint64_t targets_len;	/* its bytes */
	uint32_t nr;		/* entries */
};

/* Blocks that @nr entries take. */
static inline uint32_t compact_nr_blocks(uint32_t nr)
{
	return (uint32_t)(((uint64_t)nr + COMPACT_BLOCK_ENTRIES - 1) / COMPACT_BLOCK_ENTRIES);
}

/*
 * Where an encoder puts a finished block: called with its bytes, in
 * order; returns 0 or -errno, which ends the encoding.
 */
typedef int (*compact_emit_fn)(void *arg, const void *block, size_t len);

/*
 * An encoder takes entries in order and emits each block once full.  It
 * keeps BLOCKS and TARGETS itself (8 bytes per 64 entries, and the link
 * targets), for the caller to place after compact_encoder_finish().
 */
struct compact_encoder {
	compact_emit_fn emit;		/* where blocks go */
	void *arg;			/* passed to emit */
	uint64_t pending[COMPACT_BLOCK_ENTRIES][COMPACT_NR_FIELDS]; /* the
					 * fields of the block's entries so far
					 * (data of links: their target's
					 * offset in targets) */
	uint8_t name_len[COMPACT_BLOCK_ENTRIES]; /* their names' lengths */
	char names[COMPACT_BLOCK_ENTRIES][PATH_COMPONENT_MAX]; /* their names */
	uint32_t nr_pending;		/* entries in pending */
	uint32_t nr;			/* entries taken in all */
	uint64_t entries_len;		/* bytes emitted so far */
	uint64_t *blocks;		/* the BLOCKS section so far */
	size_t blocks_alloc;		/* room in blocks, in offsets */
	char *targets;			/* the TARGETS section so far */
	size_t targets_len;		/* bytes in targets */
	size_t targets_alloc;		/* room in targets */
	uint8_t buf[COMPACT_BLOCK_MAX];	/* the block being emitted */
};

/* Start an encoder that emits through @emit(@arg, ...). */
void compact_encoder_init(struct compact_encoder *enc, compact_emit_fn emit, void *arg);

/*
 * Add the next entry: @in (its name fields ignored), named @name (@len
 * bytes, at most PATH_COMPONENT_MAX, no NUL), and for a symbolic link its
 * target @target (in->size bytes; NULL otherwise).  Returns 0, -ENOMEM,
 * -E2BIG (more than SHARD_INDEX_MAX_ENTRIES entries or a TARGETS offset
 * past 64 bits) or what emit returned.
 */
int compact_encoder_add(struct compact_encoder *enc, const struct shard_inode *in,
			const char *name, size_t len, const char *target);

/*
 * Emit the last block and close BLOCKS with the length of ENTRIES.  After
 * it enc->blocks (compact_nr_blocks(enc->nr) + 1 offsets) and
 * enc->targets (enc->targets_len bytes) are the other two sections.
 * 0 or -errno.
 */
int compact_encoder_finish(struct compact_encoder *enc);

/* Free what the encoder holds (BLOCKS and TARGETS included). */
void compact_encoder_release(struct compact_encoder *enc);

/*
 * Check every block of @c as untrusted bytes: BLOCKS ascending from 0 to
 * entries_len, each block's nr, widths (at most 64), group offsets and
 * front-coded names within it and consistent (a shared prefix no longer
 * than the name before, a name of 1..PATH_COMPONENT_MAX bytes but entry
 * 0's, which is empty), the padding zero, every link's target a
 * NUL-terminated string of its size inside TARGETS.  What the values mean
 * (parents, children, shards) is index_file.c's to check.  Returns 0, or
 * -EINVAL with *@bad the entry (or the first entry of the block) at fault
 * and *@why a static description.
 */
int compact_check(const struct compact_entries *c, uint32_t *bad, const char **why);

/*
 * Where in ENTRIES the block of entry @e (< c->nr) starts, as BLOCKS
 * says, for a message that names the bytes at fault: 0 when BLOCKS says
 * past ENTRIES (a table compact_check() refused).
 */
uint64_t compact_block_offset(const struct compact_entries *c, uint32_t e);

/* Entry @e (< c->nr) into *@out, name and name_len zero. */
void compact_entry(const struct compact_entries *c, uint32_t e, struct shard_inode *out);

/* One field of entry @e, without decoding the others, as the member of
 * struct shard_inode holds it (a narrow field's low bits). */
uint64_t compact_field(const struct compact_entries *c, uint32_t e, enum compact_field f);

/*
 * The name of entry @e into @buf (room for PATH_COMPONENT_MAX + 1 bytes),
 * NUL-terminated; returns its length.
 */
size_t compact_name(const struct compact_entries *c, uint32_t e, char *buf);

/*
 * The entry named @name (@len bytes) among the @count entries from
 * @first, which are sorted by shard_index_name_cmp(); -ENOENT if none.
 * A binary search over the groups' first names, then one group decoded.
 */
int64_t compact_lookup(const struct compact_entries *c, uint32_t first, uint32_t count,
		       const char *name, size_t len);

/*
 * Called by compact_lookup_checked() with an entry before it reads the
 * block that holds it: 0 to go on, or -errno to end the lookup with.
 */
typedef int (*compact_check_fn)(void *arg, uint32_t e);

/* compact_lookup(), with @check(@arg, e) before each block it reads (a
 * binary search reads a dozen in a directory of a million entries). */
int64_t compact_lookup_checked(const struct compact_entries *c, uint32_t first,
			       uint32_t count, const char *name, size_t len,
			       compact_check_fn check, void *arg);

/* What the blocks take, by part (shardfs-index --stats). */
struct compact_sizes {
	uint64_t headers;	/* the blocks' headers */
	uint64_t records;	/* the entries' fields, slack included */
	uint64_t names;		/* the front-coded names */
};

/* The bytes of ENTRIES by part into *@out. */
void compact_sizes(const struct compact_entries *c, struct compact_sizes *out);

/* Entries in order, each with its name, decoded one group at a time. */
struct compact_cursor {
	const struct compact_entries *c; /* what is walked */
	uint32_t next;			/* the entry compact_cursor_next gives */
	const uint8_t *coded;		/* where next's name is coded, unless
					 * it is the first of its group */
	size_t name_len;		/* bytes of name */
	char name[PATH_COMPONENT_MAX + 1]; /* the last entry's name, NUL-terminated */
};

/* Start at entry @e. */
void compact_cursor_init(struct compact_cursor *cur, const struct compact_entries *c,
			 uint32_t e);

/*
 * The next entry into *@out (unless @out is NULL: its name alone) and its
 * name into cur->name; false at the end.  A walk of all entries decodes
 * each name once.
 */
bool compact_cursor_next(struct compact_cursor *cur, struct shard_inode *out);

#endif
