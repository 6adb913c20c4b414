/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.h - the in-memory namespace of a mounted shard set.
 *
 * The index is a handful of flat arrays, built once at mount time and
 * read-only afterwards:
 *
 *   entries    the entries and their names, packed in blocks of 64
 *              (index_compact.h: 13-17 bytes an entry for WebDataset
 *              names, 32 for UUIDs, not 64 plus the name), in
 *              breadth-first order, so
 *              that the children of every directory are contiguous and
 *              sorted by name: readdir is a range scan and lookup a binary
 *              search over that range.  An entry decodes into a struct
 *              shard_inode, the form the build lays the entries out in.
 *   sparse[]   for each sparse file, where its extents start and how many.
 *   extents[]  runs of sparse files, sorted by logical offset per file.
 *   hardlinks[] for every later name of a hard-link group, the group's
 *              first entry, sorted by entry.
 *   order[]    the entries of the files whose data lie in a shard
 *              (shard_index_orderable()), sorted by shard, then data
 *              offset, then entry: a shard's members in the order a
 *              reader of the shard meets them (push-ahead walks it).
 *
 * Entry i is FUSE inode i + 1; the root is entry 0 (FUSE_ROOT_ID).  The
 * build is deterministic, so the same shard set gets the same inode
 * numbers on every mount.  There are no pointers inside the arrays, so the
 * same layout can be written to a file and read back as it is.
 *
 * An index served from a file whose full check a record vouches for has
 * its entries and order[] checked as they are first needed (index_guard.h):
 * whoever decodes an entry has checked it with shard_index_check(), or
 * got it from a lookup or a listing, which check what they return.  The
 * lookup and the functions that return an error check for themselves.
 *
 * Thread-safety: after shard_index_build() returns, every function here
 * may be called from any number of threads at once (the checks' bits are
 * atomic).
 */
#ifndef SHARDFS_INDEX_H
#define SHARDFS_INDEX_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "shardfs/index_compact.h"
#include "shardfs/index_entry.h"
#include "shardfs/layout.h"
#include "shardfs/shardset.h"

/* Most members one shard may hold. */
#define SHARD_INDEX_MAX_MEMBERS_PER_SHARD (1u << 28)
/* Deepest directory nesting accepted. */
#define SHARD_INDEX_MAX_DEPTH 1024
/* Most bytes of names and link targets one shard may hold. */
#define SHARD_INDEX_MAX_NAME_BYTES_PER_SHARD (UINT32_MAX - 1)
/* Bytes a build into a file keeps of the members at most (sorted runs),
 * unless shard_index_build_options.memory_budget says. */
#define SHARD_INDEX_BUILD_BUDGET (128u << 20)
/* The least -o build_memory: the runs are merged in one pass, each read
 * through a buffer of at least 16 KiB (leaf_runs.h), and a smaller budget
 * makes more runs: with this one, 1 G members of 90-byte records make
 * about 11,000 runs, 175 MiB of buffers. */
#define SHARD_INDEX_BUILD_BUDGET_MIN (16u << 20)
/* Bytes a member takes at the peak of the in-memory build (scans, nodes
 * and the index at once: 4,804 MiB at 20 M members, 252 bytes each;
 * docs/benchmarks-scale.md), by which shard_index_build() judges whether
 * a set fits. */
#define SHARD_INDEX_MEMBER_PEAK 256u
/* Warnings printed per shard before they are only counted. */
#define SHARD_INDEX_WARNINGS_PER_SHARD 10

/* Where one sparse file's runs are in extents[]. */
struct shard_sparse {
	uint64_t first;		/* index of its first run */
	uint64_t count;		/* number of runs */
};

/* One stored run of a sparse file (see struct tar_extent). */
struct shard_extent {
	uint64_t logical;	/* offset in the file */
	uint64_t length;	/* bytes */
	uint64_t physical;	/* offset in the shard */
};

/* A later name of a hard-link group and the entry whose inode it shares. */
struct shard_hardlink {
	uint32_t entry;		/* the later name */
	uint32_t first;		/* the group's first entry */
};

/* What the build found; reported in the mount summary. */
struct shard_index_counts {
	uint64_t files;		/* regular files (each hard-link group once) */
	uint64_t dirs;		/* directories, synthesized ones included */
	uint64_t symlinks;	/* symbolic links */
	uint64_t hardlinks;	/* extra names of files */
	uint64_t bytes;		/* sum of regular file sizes */
	uint64_t members;	/* members reported by the tar scanner */
	uint64_t duplicates;	/* non-directory paths present more than once */
	uint64_t skipped;	/* members not served: bad names, conflicts */
	uint64_t special;	/* device nodes, FIFOs, sockets: not served */
	uint64_t unlabeled;	/* classes layout: samples without a label */
	uint32_t bad_shards;	/* shards dropped with skip_bad_shards */
};

struct index_map;
struct index_guard;

struct shard_index {
	struct compact_entries entries;	/* the entries and names, packed;
					 * entry 0 is the root */
	struct shard_sparse *sparse;	/* sparse file maps */
	uint64_t nr_sparse;		/* entries in sparse */
	struct shard_extent *extents;	/* runs of sparse files */
	uint64_t nr_extents;		/* entries in extents */
	struct shard_hardlink *hardlinks; /* later names of hard-link groups */
	uint64_t nr_hardlinks;		/* entries in hardlinks */
	uint32_t *order;		/* files by (shard, data, entry) */
	uint64_t nr_order;		/* entries in order */
	struct shard_index_counts counts; /* totals from the build */
	struct index_map *map;		/* the index file the arrays point
					 * into (index_map.h); NULL when they
					 * are malloc'ed */
	struct index_guard *guard;	/* checks entries and order[] as
					 * they are first used (index_guard.h);
					 * NULL: all were checked at load */
};

/* Progress of a build, reported to the caller while shards are scanned. */
struct shard_index_progress {
	uint32_t shards_done;	/* shards scanned so far */
	uint32_t shards_total;	/* shards in the set */
	uint64_t members;	/* members seen so far */
	uint64_t bytes;		/* shard bytes covered so far */
};

struct shard_index_build_options {
	const struct layout *layout; /* how member paths map to the tree;
				      * NULL: as stored */
	unsigned threads;	/* scanning threads; 0: one per CPU */
	bool skip_bad_shards;	/* drop shards that fail to scan */
	struct span_cache *spans; /* the decoded-span cache compressed shards
				 * are read through (-o cache_dir; the set's
				 * spans, shardset.h), or NULL */
	struct remote *remote;	/* what remote shards are read through
				 * (remote.h; the set's remote), or NULL */
	const struct shard_index *base; /* an index of the first base_shards
				 * shards to extend instead of rescanning
				 * them; NULL to scan everything */
	uint32_t base_shards;	/* shards that base covers */
	size_t memory_budget;	/* shard_index_build_to_file(): bytes of
				 * member records held before a sorted run
				 * is written; 0: SHARD_INDEX_BUILD_BUDGET */
	uint32_t far_links_max;	/* shard_index_build_to_file(): hard links
				 * further back than the shard before theirs
				 * held until every shard is streamed; more
				 * take the in-memory build.  0: 1 Mi */
	uint32_t conflicts_max;	/* shard_index_build_to_file(): paths both
				 * a directory and a file replayed (the set
				 * scanned twice more); more take the
				 * in-memory build.  0: BUILD_CONFLICTS_MAX
				 * (1 Mi) */
	uint64_t memory_limit;	/* shard_index_build(): bytes it may take
				 * (SHARD_INDEX_MEMBER_PEAK a member); 0:
				 * memory_available(), UINT64_MAX: any */
	/* called about ten times a second during the scan; may be NULL */
	void (*progress)(void *arg, const struct shard_index_progress *p);
	void *progress_arg;	/* passed to progress */
};

/*
 * Scan every shard of @set (opened with shard_set_open) in parallel and
 * build @idx; with opt->base, only the shards after opt->base_shards are
 * scanned and their members are merged over the base index's tree.  A shard that is not a valid tar fails the build with
 * -EINVAL after logging its path and the byte offset of the bad header,
 * unless opt->skip_bad_shards, in which case it is marked bad in @set,
 * logged and counted.  A set whose members (the base's entries counted)
 * would take more than opt->memory_limit at SHARD_INDEX_MEMBER_PEAK each
 * stops the scan and fails with -ENOMEM, logged, rather than exhaust the
 * machine.  Returns 0, -EINVAL, -ENOMEM or -E2BIG (a named limit above
 * was exceeded; logged).
 */
int shard_index_build(struct shard_index *idx, struct shard_set *set,
		      const struct shard_index_build_options *opt);

struct index_file_writer;

/*
 * Build the index of @set as shard_index_build() would, byte for byte,
 * straight into the index file writer @w (index_file.h: opened, not yet
 * placed; the caller commits it), with *@counts and *@nr_entries for the
 * commit.  Memory is bounded by opt->memory_budget plus what the
 * directories take, not by the members: directories are merged in
 * memory, every other member goes to sorted runs in a temporary file
 * beside the index, merged once (to count, keeping each directory's
 * leaves), then each directory's kept leaves are written in entry order.
 * With opt->base (checked whole: shard_index_check_all()), its entries
 * go the way of the scanned members, and the members of the base's
 * shards in @set must be those the base's file records.  Returns what
 * shard_index_build() returns, or -EAGAIN (logged) for a set only the
 * in-memory build replays: one with a hard link to a link bound further
 * back than the shard before it, with more links further back than
 * opt->far_links_max, with a hard link at or to a path that is both a
 * directory and a file, with more such paths than opt->conflicts_max,
 * or with one at a hard-linked file of opt->base or (the classes layout)
 * in an index it extends; its shards may then be built with
 * shard_index_build() (scanned again).  A set with fewer such paths is
 * scanned twice more, to replay them in order (build_conflicts.h).
 */
int shard_index_build_to_file(struct index_file_writer *w, struct shard_set *set,
			      const struct shard_index_build_options *opt,
			      struct shard_index_counts *counts, uint32_t *nr_entries);

/*
 * Whether file entry @in of a set of @nr_shards shards is in order[]: a
 * regular file, not empty, whose bytes lie in its shard as one run (not
 * sparse, not a later name of a hard link).
 */
static inline bool shard_index_orderable(const struct shard_inode *in,
					 uint32_t nr_shards)
{
	return S_ISREG(in->mode) && in->size && in->shard < nr_shards &&
	       !(in->flags & (SHARD_INODE_SPARSE | SHARD_INODE_LINKED));
}

/*
 * Count the orderable entries of @inodes (@n of them) per shard into
 * @starts (@nr_shards + 1 of them): starts[s] is where shard s begins in
 * order[], starts[nr_shards] their total, which is returned.
 */
uint64_t shard_index_order_starts(const struct shard_inode *inodes, uint32_t n,
				  uint32_t nr_shards, uint32_t *starts);

/*
 * Fill @order (room for @n entries) with the orderable entries of @inodes
 * by shard, data offset and entry; returns how many (starts[@nr_shards]
 * of shard_index_order_starts()), or -ENOMEM.  Deterministic: the index
 * file's ORDER section is this, whichever build wrote it.
 */
int64_t shard_index_order_compute(const struct shard_inode *inodes, uint32_t n,
				  uint32_t nr_shards, uint32_t *order);

/*
 * Give @enc the @n entries @inodes, named in @names (the build's pool:
 * names and link targets), and finish it (index_compact.h).  0 or what
 * the encoder returned.
 */
int shard_index_encode(struct compact_encoder *enc, const struct shard_inode *inodes,
		       uint32_t n, const char *names);

/*
 * Pack the @n entries @inodes, named in @names (the build's pool: names
 * and link targets), into idx->entries in memory, and set idx->order from
 * them (@nr_shards shards).  0, -ENOMEM or -E2BIG.
 */
int shard_index_pack(struct shard_index *idx, const struct shard_inode *inodes, uint32_t n,
		     const char *names, uint32_t nr_shards);

/* Free or unmap the arrays; @idx is empty afterwards. */
void shard_index_release(struct shard_index *idx);

/* Entries in @idx. */
static inline uint32_t shard_index_nr(const struct shard_index *idx)
{
	return idx->entries.nr;
}

/*
 * Check entry @e before it is decoded: 0, or -EIO (logged) when the bytes
 * of its block changed since the index file was checked (index_guard.h).
 */
int shard_index_check(const struct shard_index *idx, uint32_t e);

/* Check all entries and order[] (who walks them all): 0 or -EIO. */
int shard_index_check_all(const struct shard_index *idx);

/* Whether entry @e was checked (or needs no check). */
bool shard_index_checked(const struct shard_index *idx, uint32_t e);

/* Entry @e (< shard_index_nr(), checked) into *@out, name and name_len
 * zero. */
static inline void shard_index_entry(const struct shard_index *idx, uint32_t e,
				     struct shard_inode *out)
{
	assert(shard_index_checked(idx, e));
	compact_entry(&idx->entries, e, out);
}

/*
 * The name of entry @e (checked) into @buf (room for PATH_COMPONENT_MAX + 1
 * bytes), NUL-terminated; returns its length.
 */
static inline size_t shard_index_name(const struct shard_index *idx, uint32_t e, char *buf)
{
	assert(shard_index_checked(idx, e));
	return compact_name(&idx->entries, e, buf);
}

/* The target of symbolic link @in, NUL-terminated (in->size bytes). */
static inline const char *shard_index_target(const struct shard_index *idx,
					     const struct shard_inode *in)
{
	return idx->entries.targets + in->data;
}

/* The entry for FUSE inode @ino into *@out; false when out of range. */
static inline bool shard_index_get(const struct shard_index *idx, uint64_t ino,
				   struct shard_inode *out)
{
	if (ino < 1 || ino > idx->entries.nr)
		return false;
	shard_index_entry(idx, (uint32_t)(ino - 1), out);
	return true;
}

/*
 * Directory entry @e into *@d, having checked it (not its children:
 * each is checked where it is reached).  0, -ENOTDIR or -EIO.
 */
int shard_index_dir(const struct shard_index *idx, uint32_t e, struct shard_inode *d);

/*
 * Look @name (@len bytes) up in directory entry @dir, checking it and
 * each block of its children that the search reads (the child's among
 * them).  Returns the child's entry number, or -ENOENT / -ENOTDIR / -EIO.
 */
int64_t shard_index_lookup(const struct shard_index *idx, uint32_t dir,
			   const char *name, size_t len);

/*
 * The inode number of entry @e: e + 1, except for the later names of a
 * hard-link group, which share the inode of the group's first entry.
 */
uint64_t shard_index_ino(const struct shard_index *idx, uint32_t e);

/*
 * Write the path of entry @e relative to the root into @buf
 * (NUL-terminated), checking @e and its ancestors.  Returns its length,
 * -ENAMETOOLONG or -EIO.
 */
ssize_t shard_index_entry_path(const struct shard_index *idx, uint32_t e,
			       char *buf, size_t size);

/* Offset in its shard of the first stored byte of file entry @in. */
uint64_t shard_index_data_offset(const struct shard_index *idx,
				 const struct shard_inode *in);

/* Bytes of index memory per entry, for the -d summary. */
double shard_index_bytes_per_entry(const struct shard_index *idx);

#endif
