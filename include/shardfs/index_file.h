/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_file.h - the persistent index: one file per shard set, served as
 * it is from its own pages (index_map.h).
 *
 * The file holds the sections of struct shard_index byte for byte (the
 * entries packed, index_compact.h), plus a table identifying the shards
 * it was built from, so that mounting a set whose index is valid parses
 * nothing per member: it costs a mapping, a checksum pass and a bounds
 * check pass over the arrays once (index_verified.h), and one fstat per
 * shard.  The format, byte for byte, is index_format.h.
 *
 * A shard is identified by its path (relative to the index file's
 * directory when it lies below it, so that a set moved or copied together
 * with its index stays valid), its size, its mtime and ctime, and an xxh3
 * fingerprint of its first INDEX_FINGERPRINT_BYTES bytes.  When the times
 * match, nothing is read.  When they differ (a copy, a move of the files,
 * or a rewrite), a different fingerprint makes the index stale at the
 * cost of one read; an equal one leads to a rescan of the shard's headers,
 * whose digest must equal the recorded one.
 *
 * Writing is atomic: a temporary file in the same directory is renamed
 * over the index, so concurrent builders never leave a torn file and
 * readers keep the inode they have.  What the load checks is what is
 * served: nothing done to the file afterwards (truncated, copied over,
 * rewritten in place, replaced) reaches a mount (index_map.h).  An index
 * file is only loaded when it is a regular file no one else can write
 * (owned by the caller or root, not group- or world-writable): another
 * user could otherwise choose the tree.
 *
 * Thread-safety: loading and writing happen before the mount, single
 * threaded.
 */
#ifndef SHARDFS_INDEX_FILE_H
#define SHARDFS_INDEX_FILE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardfs/index.h"
#include "shardfs/index_format.h"
#include "shardfs/seek_table.h"
#include "shardfs/shardset.h"

/* Bytes of a shard hashed into its fingerprint. */
#define INDEX_FINGERPRINT_BYTES (64u * 1024)

/* A loaded index file's shard table (points into the mapping). */
struct index_file_shards {
	const struct index_file_shard *shards;	/* one per shard, in order */
	uint32_t nr;				/* entries in shards */
	const char *names;			/* paths, not NUL-terminated */
	uint64_t options_hash;			/* layout the index was built for */
	const struct index_file_seek *seek;	/* one per shard */
	const struct seek_point *points;	/* all seek tables' points */
	const unsigned char *windows;		/* all seek tables' windows */
};

/*
 * The seek table of shard @i of a loaded index into *@t (pointing into
 * the mapping): true, or false for a plain tar.  Checked at load.
 */
bool index_file_seek_table(const struct index_file_shards *sh, uint32_t i,
			   struct seek_table *t);

/* index_file_load(): check every section even if a record says this
 * file passed before (shardfs-index --check). */
#define INDEX_LOAD_FULL_CHECK 0x1u

/*
 * Map the index at @path into @idx (which then owns the index_map) and
 * describe its shards in @shards.  Verifies the magic, version, byte
 * order, sizes, every checksum and every bound that a lookup or read
 * relies on; of a file that a record says passed all that
 * (index_verified.h), only the header, the shard table and the seek
 * tables, unless @flags has INDEX_LOAD_FULL_CHECK.  A file without such
 * a record that passes the full check under a read lease gets one.
 * Returns 0,
 * -ENOENT when there is no file, or -EINVAL with a reason naming the
 * byte offset in @msg.
 */
int index_file_load(const char *path, struct shard_index *idx,
		    struct index_file_shards *shards, unsigned flags,
		    char *msg, size_t msg_len);

/*
 * Hang a guard on @idx, loaded from the index file @path, as
 * index_file_load() does for a file a record vouches for (index_guard.h),
 * and check the root's block: 0, -ENOMEM, or -EINVAL with a reason naming
 * the byte offset in @msg.  Also for tests and fuzzing, which check a file
 * that passed its full check again this way.
 */
int index_file_guard(struct shard_index *idx, const char *path, char *msg, size_t msg_len);

/*
 * Read and check the header of the index file at @path into @h (magic,
 * version, checksum, size, section table: not the sections), for
 * shardfs-index --stats.  Returns 0, -ENOENT, or -EINVAL / -EPERM with a
 * reason in @msg.
 */
int index_file_read_header(const char *path, struct index_file_header *h,
			   char *msg, size_t msg_len);

/*
 * Write @idx, built from @set with options hashed to @options_hash, to
 * @path atomically.  Returns 0 or -errno (with @msg).
 */
int index_file_write(const char *path, const struct shard_index *idx,
		     const struct shard_set *set, uint64_t options_hash,
		     char *msg, size_t msg_len);

/* Bytes a writer reads back at a time to checksum what it wrote. */
#define INDEX_WRITER_BUF (1u << 20)

/* The seek tables of a set's compressed shards, as three sections. */
struct seek_sections {
	struct index_file_seek *recs;	/* SEEK_SHARDS: one per shard */
	struct seek_point *points;	/* SEEK_POINTS */
	uint64_t nr_points;		/* entries in points */
	unsigned char *windows;		/* SEEK_WINDOWS */
	uint64_t windows_len;		/* bytes in windows */
};

/*
 * What a build puts into a writer besides its entries: three sections as
 * they are.
 */
enum index_part {
	INDEX_PART_SPARSE,	/* the SPARSE section */
	INDEX_PART_EXTENTS,	/* the EXTENTS section */
	INDEX_PART_HARDLINKS,	/* the HARDLINKS section */
	INDEX_NR_PARTS
};

/* Bytes of packed entries, and of ORDER, a writer collects before each
 * write. */
#define INDEX_WRITER_PACK_BUF (1u << 20)

struct entry_stream;

/*
 * An index file being written, part by part: a build that streams its
 * entries (index_build.c) hands them over one at a time in entry order,
 * packed at once into ENTRIES (index_compact.h), and puts the other parts
 * where they belong as it goes; it never holds the whole index.  BLOCKS,
 * TARGETS and ORDER follow ENTRIES at the commit.  Use:
 * index_file_writer_open(), _place() with the lengths of the parts,
 * _put() the bytes of every part and _entry() every entry (or, for an
 * index already packed, _put_packed()), _commit() (checksums, header,
 * then the atomic rename), and always _abort() to release (after a
 * commit it only frees).  Single-threaded.
 */
struct index_file_writer {
	int fd;				/* the temporary file; -1: closed
					 * (committed) */
	char tmp[PATH_MAX];		/* its name; "" once renamed (or
					 * never made) */
	char path[PATH_MAX];		/* the index file it becomes */
	const struct shard_set *set;	/* the shards it describes */
	bool scratch;			/* never to be kept (index_mode=off):
					 * the shards' first bytes are not read
					 * for their fingerprints; set before
					 * _place() */
	struct index_file_header h;	/* the header: section table filled by
					 * _place(), the rest by _commit() */
	struct index_file_shard *recs;	/* SHARDS */
	char *names;			/* SHARD_NAMES */
	uint64_t names_len;		/* bytes in names */
	struct seek_sections ss;	/* SEEK_* */
	uint64_t part_len[INDEX_NR_PARTS]; /* bytes of each part (_place) */
	char *image[INDEX_NR_PARTS];	/* parts collected in memory, to be
					 * written whole at commit */
	bool in_memory;			/* _place()'s in_memory */
	struct entry_stream *stream;	/* _entry(): the entries packed so far
					 * and ORDER's slots; NULL before the
					 * first */
	uint64_t tail;			/* where the sections placed at the
					 * commit start */
	const struct shard_index *packed; /* _put_packed(): what the commit
					 * writes instead of packing; NULL */
	bool hashed[INDEX_NR_SECTIONS];	/* xxh3 known: the section was put
					 * whole at once (else read back) */
};

/*
 * Start writing the index of @set to a temporary file beside @path.
 * 0 or -errno (with @msg).
 */
int index_file_writer_open(struct index_file_writer *w, const char *path,
			   const struct shard_set *set, char *msg, size_t msg_len);

/* The directory of the index file @w writes, where scratch files go
 * (with its trailing '/'; "." for a bare name).  0 or -ENAMETOOLONG. */
int index_file_writer_dir(const struct index_file_writer *w, char dir[PATH_MAX]);

/*
 * Take the set's shard table and seek tables (as the build left them) and
 * lay the sections out; @len gives each part's length in bytes.  With
 * @in_memory, the parts are collected in memory and written at commit,
 * and so is ORDER (a small index: nothing is read back to checksum it);
 * else ORDER is gathered in an unlinked file beside the index.  0 or
 * -errno.
 */
int index_file_writer_place(struct index_file_writer *w,
			    const uint64_t len[INDEX_NR_PARTS], bool in_memory);

/* Write @len bytes at byte @at of part @p (inside it); a section put
 * whole at once is checksummed from @buf, any other is read back at
 * commit.  0 or -errno. */
int index_file_writer_put(struct index_file_writer *w, enum index_part p,
			  uint64_t at, const void *buf, size_t len);

/*
 * Add entry @e, the next in entry order (the root first): @in, named
 * @name (@len bytes) and, for a symbolic link, with target @target
 * (in->size bytes; else NULL), as compact_encoder_add() takes them.  A
 * file that ORDER lists (shard_index_orderable()) is the member numbered
 * @member among those of its shard (shard_set's members): within a shard
 * members are in the order of their data, so ORDER needs no sort.  After
 * _place(), once the shards' member counts are final.  0 or -errno.
 */
int index_file_writer_entry(struct index_file_writer *w, uint32_t e,
			    const struct shard_inode *in, const char *name, size_t len,
			    const char *target, uint32_t member);

/*
 * Take @idx's packed entries and order as they are, for the commit to
 * write (no _entry()); @idx must outlive the commit.
 */
void index_file_writer_put_packed(struct index_file_writer *w,
				  const struct shard_index *idx);

/*
 * Finish the file: checksums (read back), the header with @nr_inodes,
 * @counts and @options_hash, fsync, close (so that a reader of the file
 * can take a read lease), and with @keep the rename over the index path
 * (without, the temporary file stays for the caller to load, and
 * _abort() removes it).  0 or -errno (with @msg).
 */
int index_file_writer_commit(struct index_file_writer *w, uint32_t nr_inodes,
			     const struct shard_index_counts *counts,
			     uint64_t options_hash, bool keep, char *msg, size_t msg_len);

/* Close and free; the temporary file is removed unless it was renamed. */
void index_file_writer_abort(struct index_file_writer *w);

/*
 * Recompute the section and header checksums of the index file image of
 * @len bytes at @image, in place, for sections that lie inside it.  For
 * tests and fuzzing, which need files whose checksums are right but whose
 * contents lie.  0, -EINVAL when @len is shorter than a header, or
 * -ENOMEM.
 */
int index_file_reseal(void *image, size_t len);

/* Fingerprint of an open shard: xxh3 of its first bytes.  0 or -EIO. */
int index_file_fingerprint(struct shard_source *src, uint64_t *fp);

#endif
