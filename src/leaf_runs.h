/* SPDX-License-Identifier: Apache-2.0 */
/*
 * leaf_runs.h - the leaves of a bounded index build, sorted out of memory
 * (private to the builder).
 *
 * A build that streams (index_build.c) keeps its directories in memory
 * and hands every other member here as a leaf record: the directory it is
 * in, its name, and what the index stores of it.  Records collect in a
 * buffer of at most the build's memory budget; a full buffer is sorted by
 * (directory, name, shard, member) and written as one run, each record
 * coded against the one before it, to an unlinked temporary file.  A
 * merge then reads the runs back in that order, each through a buffer of
 * its own, so that a directory's leaves arrive together, by name, and
 * the copies of one path in archive order.
 *
 * The merge's result can be kept for a second pass that visits the
 * directories in another order (the layout's, breadth first): each
 * directory's records are kept as a run of their own after the sorted
 * ones, and read back alone.  The second pass then merges nothing, and
 * the layout needs no staging of its own (index_build.c).
 *
 * Thread-safety: none; the builder's merging thread owns both structs.
 */
#ifndef SHARDFS_LEAF_RUNS_H
#define SHARDFS_LEAF_RUNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardfs/tar.h"

/* Smallest and largest buffer a run is read back through. */
#define LEAF_RUN_READ_MIN (16u * 1024)
#define LEAF_RUN_READ_MAX (1u << 20)
/* The buffer sorted runs are written through. */
#define LEAF_RUN_WRITE_BUF (1u << 20)

/*
 * One leaf, as the buffer holds it and a merge shows it: this struct,
 * then name_len bytes of name, link_len bytes of link target, padding to
 * 8 bytes, then nr_extents struct tar_extent.  A run codes it in fewer
 * bytes, against the record before it (leaf_runs.c).
 */
struct leaf_record {
	uint64_t data_offset;	/* data offset in the shard */
	uint64_t size;		/* logical size */
	int64_t mtime_sec;	/* modification time, seconds */
	uint32_t mtime_nsec;	/* modification time, nanoseconds */
	uint32_t dir;		/* the builder's node of its directory */
	uint32_t shard;		/* shard it came from */
	uint32_t member;	/* its place among the shard's members */
	uint32_t mode;		/* permission bits */
	uint32_t uid;		/* owner */
	uint32_t gid;		/* group */
	uint32_t name_len;	/* bytes of its name (last component) */
	uint32_t link_len;	/* bytes of its link target (symlinks) */
	uint32_t nr_extents;	/* sparse runs; 0 unless sparse */
	uint8_t type;		/* enum tar_type: TAR_FILE or TAR_SYMLINK */
	uint8_t sparse;		/* has a sparse map */
	uint16_t linked;	/* a hard link: its data and attributes are
				 * those of member group of the shard
				 * linked - 1 before its own (LEAF_LINKED_*);
				 * 0: none */
	uint32_t group;		/* with linked: the member whose inode it
				 * shares; else 0 */
};
_Static_assert(sizeof(struct leaf_record) == 72,
	       "struct leaf_record has no padding");

/* leaf_record.linked: a hard link to a member of its own shard, of the
 * shard before it, or at most LEAF_LINKED_MAX - 1 shards before it. */
#define LEAF_LINKED_SAME 1
#define LEAF_LINKED_PREV 2
#define LEAF_LINKED_MAX UINT16_MAX

/* The shard and member whose data and inode record @r names: its own, or
 * for a hard link its target's (in its shard, or one before it). */
static inline uint32_t leaf_data_shard(const struct leaf_record *r)
{
	return r->shard - (r->linked ? r->linked - 1u : 0u);
}

static inline uint32_t leaf_data_member(const struct leaf_record *r)
{
	return r->linked ? r->group : r->member;
}

/* A record and the bytes after it, as a merge shows them. */
struct leaf_view {
	const struct leaf_record *rec;	/* the fixed part */
	const char *name;		/* rec->name_len bytes, no NUL */
	const char *link;		/* rec->link_len bytes, no NUL; may be
					 * NULL when that is 0 */
	const struct tar_extent *extents; /* rec->nr_extents runs */
};

/* A record in the buffer and the first bytes of its order, so that most
 * comparisons of a sort read no record (leaf_runs.c). */
struct leaf_key {
	uint64_t head;		/* its directory, then its name's first 4
				 * bytes (big-endian, 0 past its end) */
	uint64_t next;		/* its name's bytes 4 to 11, the same way */
	uint64_t offset;	/* where the record is in the buffer */
};

/* Where one sorted run lies in the file. */
struct leaf_run {
	uint64_t offset;	/* its first byte */
	uint64_t length;	/* its bytes */
};

struct leaf_keep;

struct leaf_runs {
	int fd;			/* the unlinked temporary file; -1: none */
	size_t budget;		/* bytes the buffer and its order may use */
	char *buf;		/* records not yet spilled, in arrival order */
	size_t buf_len;		/* bytes used in buf */
	size_t buf_cap;		/* bytes allocated for buf */
	struct leaf_key *order;	/* those records' keys, in arrival order */
	size_t nr;		/* records in buf */
	bool unsorted;		/* one of them came after one it sorts
				 * before: the order wants a sort */
	struct leaf_run *runs;	/* the runs written */
	size_t nr_runs;		/* entries in runs */
	size_t cap_runs;	/* entries allocated */
	uint64_t file_len;	/* bytes written to fd */
	uint64_t records;	/* records added in all */
	char *sorted;		/* when no run had to be written: all the
				 * records, sorted and coded as a run,
				 * kept for the merges */
	size_t sorted_len;	/* bytes in sorted */
	struct leaf_keep *keep;	/* leaf_runs_keep(): the records kept so
				 * far; NULL before the first */
	const char *kept;	/* after leaf_runs_keep_finish(): the kept
				 * records' bytes (in keep's buffer or
				 * kept_map) */
	void *kept_map;		/* the mapping of the file they were
				 * written to; NULL: none */
	size_t kept_map_len;	/* bytes mapped */
};

/*
 * Start collecting with a temporary file in directory @dir and a buffer
 * of @budget bytes (at least one record's worth is taken whatever the
 * budget).  0 or -errno.
 */
int leaf_runs_init(struct leaf_runs *r, const char *dir, size_t budget);

/* Add a record (@v->rec's dir, shard and member order it); the bytes are
 * copied.  May write a run.  0 or -errno. */
int leaf_runs_add(struct leaf_runs *r, const struct leaf_view *v);

/* Write what the buffer holds as the last run, and free the buffer; or,
 * when no run was written, keep the records sorted in memory (a small
 * build reads nothing back).  0 or -errno. */
int leaf_runs_finish(struct leaf_runs *r);

void leaf_runs_release(struct leaf_runs *r);

struct leaf_run_reader;

/* Reading every run at once, smallest record first. */
struct leaf_merge {
	const struct leaf_runs *runs;	/* what is merged */
	struct leaf_run_reader *readers; /* one per run (or one for the
					 * records kept in memory) */
	size_t nr_readers;		/* entries in readers */
	uint32_t *heap;			/* readers with a record, smallest on
					 * top */
	size_t nr_heap;			/* entries in heap */
	char *last;			/* leaf_merge_take_path(): a copy of
					 * the record it shows */
	size_t last_cap;		/* bytes allocated for last */
};

/* Start a merge of @r's runs (after leaf_runs_finish()); a merge may be
 * started again once the previous one is ended.  0 or -errno. */
int leaf_merge_start(struct leaf_merge *m, const struct leaf_runs *r);

/* The smallest record not yet taken, or NULL when all are; it stays valid
 * until leaf_merge_next(). */
const struct leaf_view *leaf_merge_peek(const struct leaf_merge *m);

/* Take the smallest record.  0 or -errno (a read error; -EIO also for
 * bytes that are not a run's coding). */
int leaf_merge_next(struct leaf_merge *m);

/*
 * Take every record of the next path (directory and name): *@v shows the
 * last in archive order, the one an extraction leaves (valid until the
 * next call), *@earlier counts those before it.  1 when there was a path,
 * 0 at the end, or -errno.
 */
int leaf_merge_take_path(struct leaf_merge *m, struct leaf_view *v, uint64_t *earlier);

void leaf_merge_end(struct leaf_merge *m);

/*
 * Keep record @v (as leaf_merge_take_path() shows it: one record's bytes)
 * after those kept before, as the last of directory run @dir: a @dir of
 * length 0 starts with it.  The records of one @dir must be kept one
 * after another, in the order a merge gives them; directories in any
 * order.  Kept records go to the runs' file after the runs (to memory
 * when the runs are kept there).  0 or -errno.
 */
int leaf_runs_keep(struct leaf_runs *r, const struct leaf_view *v, struct leaf_run *dir);

/* Make the kept records readable (leaf_merge_start_kept()).  The runs
 * can no longer be merged afterwards.  0 or -errno. */
int leaf_runs_keep_finish(struct leaf_runs *r);

/* Start a "merge" of the one directory run @dir that leaf_runs_keep()
 * kept: peek and next as for a merge of runs.  0 or -errno. */
int leaf_merge_start_kept(struct leaf_merge *m, const struct leaf_runs *r,
			  const struct leaf_run *dir);

#endif
