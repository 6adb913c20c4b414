/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shard_scan.h - phase 1 of the index build (private to the builder).
 *
 * One shard is scanned into a struct shard_scan: its members in archive
 * order with normalised names (already rewritten for the layout), in a
 * string pool of its own, and a digest of all it read.
 *
 * Thread-safety: shards are scanned by different threads; a shard_scan is
 * touched by one thread until the merge reads it.  A struct
 * shard_scan_thread belongs to one scanning thread; the scans it moved
 * into its arena are read by the merge until the arena is released.
 */
#ifndef SHARDFS_SHARD_SCAN_H
#define SHARDFS_SHARD_SCAN_H

#include <stdbool.h>
#include <stdint.h>

#include "shardfs/index.h"
#include "shardfs/layout.h"
#include "shardfs/shardset.h"
#include "shardfs/tar.h"
#include "shardfs/util.h"

#include <xxhash.h>

/* A member as collected from one shard; strings live in the shard's pool. */
struct raw_member {
	uint64_t data_offset;	/* data offset in the shard */
	uint64_t size;		/* logical size */
	uint64_t header_offset;	/* for messages about this member */
	int64_t mtime_sec;	/* modification time, seconds */
	uint32_t mtime_nsec;	/* modification time, nanoseconds */
	uint32_t path;		/* normalised path, offset in strings */
	uint32_t path_len;	/* bytes in the path; 0 for the root */
	uint32_t link;		/* link target, offset in strings */
	uint32_t link_len;	/* bytes in the link target */
	uint32_t mode;		/* permission bits */
	uint32_t uid;		/* owner */
	uint32_t gid;		/* group */
	uint32_t extent;	/* first run in the shard's extents, if sparse */
	uint32_t nr_extents;	/* runs; 0 and !sparse for plain files */
	uint8_t type;		/* enum tar_type */
	uint8_t sparse;		/* has a sparse map */
	uint32_t group;		/* merge: first entry of its hard-link group */
	uint32_t nlink;		/* merge: names bound to this member */
};

/* The label of one sample (classes layout), by offsets into strings. */
struct sample_label {
	uint32_t key;		/* the sample key */
	uint32_t key_len;	/* bytes in the key */
	uint32_t label;		/* the directory name for the sample */
	uint32_t label_len;	/* bytes in the label */
	uint32_t seq;		/* order found: the last label wins */
};

/* What one shard's scan produced. */
struct shard_scan {
	struct raw_member *members;	/* in archive order */
	size_t nr_members;		/* entries in members */
	size_t cap_members;		/* entries allocated */
	char *strings;			/* names and targets */
	bool in_arena;			/* members and strings live in a
					 * scanning thread's arena, not on
					 * the heap */
	size_t strings_len;		/* bytes used */
	size_t strings_cap;		/* bytes allocated */
	struct tar_extent *extents;	/* sparse runs of all members */
	size_t nr_extents;		/* entries used */
	size_t cap_extents;		/* entries allocated */
	struct sample_label *labels;	/* classes layout: labels found */
	size_t nr_labels;		/* entries used */
	size_t cap_labels;		/* entries allocated */
	const struct shard *shard;	/* the shard scanned */
	const struct layout *layout;	/* how paths are rewritten */
	uint32_t warnings;		/* warnings issued for this shard */
	bool quiet;			/* an earlier scan of the shard said
					 * its warnings: none said */
	uint64_t skipped;		/* members not served: bad names */
	uint64_t special;		/* device nodes, FIFOs, sockets */
	uint64_t unlabeled;		/* classes layout: samples w/o label */
	struct sample_label unlabeled_example; /* key of one of them */
	uint64_t unmapped;		/* classes layout: labels that the
					 * class names do not name */
	uint32_t unmapped_example;	/* one such label, offset in strings */
	XXH3_state_t *hash;		/* of everything the index takes from
					 * the shard: headers and labels */
	uint64_t digest;		/* the hash, once the scan is done */
	int rc;				/* result of the scan */
	struct tar_error err;		/* why the scan failed */
};

/* What a thread that scans shard after shard lends each scan. */
struct shard_scan_thread {
	char *window;			/* TAR_WINDOW_SIZE bytes to read into */
	struct bump_arena arena;	/* where a finished scan's members and
					 * strings move (from a heap its next
					 * scan reuses), for as long as the
					 * index build needs them */
	bool keep_on_heap;		/* a bounded build frees each scan once
					 * merged: leave it on the heap, out of
					 * the arena */
};

/*
 * Scan @shard into @sc (zeroed by the caller) under @layout.  With @t,
 * read into its window and move the members and strings into its arena at
 * the end (unless t->keep_on_heap); without, use a window of its own and
 * keep them on the heap.
 * The result is in sc->rc (0, -EINVAL with sc->err, -ENOMEM).
 */
void shard_scan_run(struct shard_scan *sc, const struct shard *shard,
		    const struct layout *layout, struct shard_scan_thread *t);

/*
 * The digest shard_scan_run() would compute for @shard: what the index
 * file compares when a shard's times changed but its fingerprint did not.
 * Returns 0 or the scan's error.
 */
int shard_scan_digest(const struct shard *shard, const struct layout *layout,
		      uint64_t *digest);

/* Warn about member @name at @off of the shard (rate-limited per shard). */
void shard_scan_warn(struct shard_scan *sc, uint64_t off, const char *what,
		     const char *name, size_t name_len);

void shard_scan_release(struct shard_scan *sc);

/* Store @len bytes in the pool of @sc (for members made by the merge; not
 * for a scan moved into an arena). */
int shard_scan_add_string(struct shard_scan *sc, const char *s, size_t len,
			  uint32_t *at, uint32_t *out_len);

/* Copy the runs of sparse map @sp of @idx into @sc, for member @rm. */
int shard_scan_add_extents(struct shard_scan *sc, const struct shard_index *idx,
			   const struct shard_sparse *sp, struct raw_member *rm);

#endif
