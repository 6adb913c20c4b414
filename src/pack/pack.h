/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pack.h - internal interfaces of shardfs-pack.
 *
 * shardfs-pack runs in four stages, each in its own file:
 *
 *   walk.c      read SRC_DIR (several threads) into a list of entries
 *   plan.c      group entries into samples, order them, cut shards
 *   shard.c     write the planned shards (several threads), atomically
 *   manifest.c  describe the finished shards in shards.json
 *
 * Planning happens before anything is written and fixes every byte of
 * every shard, so the output depends only on the input tree and the
 * options, shards can be written in parallel, and --resume can tell a
 * complete shard of the same plan from anything else.
 *
 * ustar.c encodes member headers, pattern.c expands OUT_PATTERN, owner.c
 * looks up user and group names, and progress.c owns the terminal.
 */
#ifndef SHARDFS_PACK_H
#define SHARDFS_PACK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardfs/seek_table.h"

#define PACK_PROG "shardfs-pack"

/* One file, directory or symbolic link found under SRC_DIR. */
struct pack_entry {
	char *path;		/* relative to SRC_DIR; dirs end in '/' */
	size_t path_len;	/* bytes in path */
	size_t key_len;		/* leading bytes of path: the sample key */
	char *link;		/* symlink target, NULL for other types */
	uint64_t size;		/* bytes of data: regular files only */
	int64_t mtime_sec;	/* modification time, seconds since the epoch */
	uint32_t mtime_nsec;	/* and nanoseconds */
	uint32_t mode;		/* permission bits (07777) */
	uint32_t uid;		/* owner, 0 unless --keep-owner */
	uint32_t gid;		/* group, 0 unless --keep-owner */
	const char *uname;	/* owner name, "" unless --keep-owner */
	const char *gname;	/* group name, "" unless --keep-owner */
	char type;		/* tar typeflag: '0', '2' or '5' */
};

/* Everything the walk found. */
struct pack_tree {
	struct pack_entry *entries;	/* in no particular order */
	size_t count;			/* entries in use */
	uint64_t skipped;		/* special files and loops left out */
	char **owner_names;		/* what uname and gname point to */
	size_t owner_name_count;	/* entries in owner_names */
	size_t owner_name_cap;		/* entries allocated in owner_names */
};

/* How the walk treats what it finds. */
struct pack_walk_options {
	bool follow_symlinks;	/* store what links point to, not the links */
	bool whole_seconds;	/* drop sub-second parts of mtimes */
	bool keep_owner;	/* record uid and gid instead of 0 */
	unsigned jobs;		/* threads reading directories */
};

/* Read everything under @root (SRC_DIR without a trailing '/'). */
int pack_walk(const char *root, const struct pack_walk_options *opt,
	      struct pack_tree *tree);
void pack_tree_release(struct pack_tree *tree);

/* Fill uname and gname of every entry from the user and group databases. */
int pack_owner_names(struct pack_tree *tree);

/* How samples are ordered and cut into shards. */
struct pack_plan_options {
	uint64_t max_size;	/* bytes a shard may not exceed */
	uint64_t max_count;	/* samples a shard may not exceed */
	bool shuffle;		/* random sample order instead of sorted */
	uint64_t seed;		/* seed of that order */
};

/* One planned shard: a run of plan items and what it adds up to. */
struct pack_shard {
	size_t first;		/* index of its first member in plan->items */
	size_t count;		/* members, directories included */
	uint64_t samples;	/* samples it holds */
	uint64_t files;		/* members that are not directories */
	uint64_t bytes;		/* exact size of the finished file */
};

/* Every member of every shard, in the order they are written. */
struct pack_plan {
	const struct pack_entry **items; /* members of all shards, in order */
	size_t item_count;		/* entries in items */
	struct pack_shard *shards;	/* the shards, in order */
	size_t shard_count;		/* entries in shards */
	uint64_t samples;		/* samples over all shards */
	uint64_t files;			/* non-directory members */
	uint64_t dirs;			/* distinct directories */
	uint64_t bytes;			/* bytes over all shards */
};

/* Plan the shards of @tree; the plan points into the tree. */
int pack_plan_build(const struct pack_tree *tree,
		    const struct pack_plan_options *opt,
		    struct pack_plan *plan);
void pack_plan_release(struct pack_plan *plan);

/* Tar block size: headers and data are padded to it. */
#define PACK_BLOCK 512u
/* Longest path (as opened, SRC_DIR included) or link target, with NUL. */
#define PACK_PATH_MAX 4096u
/* Longest user or group name recorded; longer ones are left out. */
#define PACK_OWNER_NAME_MAX 256u
/*
 * Longest PAX record block: path and linkpath, uname and gname, and a
 * block for hdrcharset, size, mtime, uid, gid and the length prefixes.
 */
#define PACK_PAX_MAX (2 * PACK_PATH_MAX + 2 * PACK_OWNER_NAME_MAX + PACK_BLOCK)
/* Longest header of a member: 'x' header, PAX records, ustar header. */
#define PACK_HEADER_MAX (2 * PACK_BLOCK + PACK_PAX_MAX)

/*
 * Encode the headers of @e (a PAX 'x' member when needed, then the ustar
 * header) into @buf, which holds PACK_HEADER_MAX bytes.  Returns the
 * number of bytes used, a multiple of PACK_BLOCK.
 */
size_t pack_ustar_encode(const struct pack_entry *e, unsigned char *buf);

/* Bytes a member's data takes in the archive, padding included. */
static inline uint64_t pack_padded(uint64_t size)
{
	return (size + PACK_BLOCK - 1) / PACK_BLOCK * PACK_BLOCK;
}

/* OUT_PATTERN split around the shard number. */
struct pack_pattern {
	char *head;		/* text before the number, directory included */
	char *tail;		/* text after the number */
	char *dir;		/* directory the shards go to ("." if none) */
	unsigned width;		/* zero-pad the number to this many digits */
	uint64_t first;		/* number of the first shard */
	uint64_t last;		/* highest number the pattern allows */
};

struct pack_shard_result;

/*
 * Build and save the shardfs index of the @count shards of @pattern (as
 * shardfs-index would), scanning with @jobs threads; a compressed shard
 * takes the seek points its writer recorded in @results (one per shard)
 * instead of being decoded to find them.  0 or -errno (reported).
 */
int pack_index_write(const struct pack_pattern *pattern, uint64_t count,
		     unsigned jobs, const struct pack_shard_result *results);

/* Parse OUT_PATTERN; -EINVAL (reported) when it is malformed. */
int pack_pattern_parse(struct pack_pattern *p, const char *text);
void pack_pattern_release(struct pack_pattern *p);
/* Path of shard @index (0-based) into @buf; -ENAMETOOLONG or -ERANGE. */
int pack_pattern_format(const struct pack_pattern *p, uint64_t index,
			char *buf, size_t size);

/* Counters shared by the writers and the progress display. */
struct pack_progress {
	atomic_uint_least64_t files;	/* members written or kept */
	atomic_uint_least64_t bytes;	/* shard bytes written or kept */
	uint64_t total_files;		/* files the plan holds */
	uint64_t total_bytes;		/* bytes the plan holds */
};

/* Start a thread redrawing a progress line on stderr, if it is a tty. */
int pack_progress_start(struct pack_progress *pr, bool enabled);
/* Stop that thread and erase the line. */
void pack_progress_stop(void);

/*
 * Messages, prefixed with the program name, on stderr.  Every failure
 * except running out of memory is reported where it is detected, naming
 * the file (and the byte offset where there is one).
 */
void pack_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pack_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Report "PATH: WHAT: <errno text>" and return -errno. */
int pack_errno(const char *path, const char *what);

/* --compress: what each shard is compressed with (compress.c). */
enum pack_compression {
	PACK_COMPRESS_NONE,	/* plain tar */
	PACK_COMPRESS_GZIP,	/* one gzip member per flushed buffer */
	PACK_COMPRESS_ZSTD,	/* one zstd frame per flushed buffer */
};

struct pack_compress {
	enum pack_compression kind;	/* what */
	int level;			/* the compressor's level */
};

/* Parse "gzip", "zstd", "gzip:LEVEL" (1-9) or "zstd:LEVEL".  0 or -EINVAL. */
int pack_compress_parse(const char *arg, struct pack_compress *c);

/*
 * Refuse an OUT_PATTERN whose name says another format than @c writes:
 * a .tar name for gzip data, .tar.gz or .tgz for plain tar or zstd,
 * .tar.zst for anything but zstd.  Names with none of these suffixes are
 * left alone.  0 or -EINVAL (reported).
 */
int pack_compress_check_name(const struct pack_compress *c, const char *pattern);

/* A writer's compressor: output buffer and state, reused per block. */
struct pack_compressor {
	struct pack_compress c;		/* what it makes */
	unsigned char *out;		/* the last block, compressed */
	size_t cap;			/* bytes of out */
	void *cctx;			/* zstd: its context */
};

/* Ready @z for blocks of up to @max_in bytes.  0 or -ENOMEM. */
int pack_compressor_init(struct pack_compressor *z, const struct pack_compress *c,
			 size_t max_in);
void pack_compressor_release(struct pack_compressor *z);
/* Compress @len bytes at @in as one member/frame into z->out. 0 or -EIO. */
int pack_compress_block(struct pack_compressor *z, const void *in, size_t len,
			size_t *out_len);

/* What the shard writers need beyond the plan. */
struct pack_write_options {
	const char *src_root;		/* SRC_DIR, prefixed to member paths */
	const struct pack_pattern *pattern; /* names of the shards */
	bool follow_symlinks;		/* members may be reached by links */
	bool resume;			/* keep complete shards of this plan */
	unsigned jobs;			/* shards written at once */
	struct pack_compress compress;	/* --compress */
};

/* What happened to each shard. */
struct pack_shard_result {
	uint64_t xxh3;		/* XXH3_64bits of the finished file */
	bool kept;		/* complete from an earlier run, kept */
	struct seek_point *points; /* --compress: the member or frame starts
				    * recorded while writing (malloc'd, the
				    * caller frees them); NULL otherwise */
	uint64_t nr_points;	/* entries in points */
	uint64_t tar;		/* --compress: bytes of the tar stream */
	uint64_t stored;	/* --compress: bytes of the compressed file */
};

/* Write (or with --resume keep) every shard of @plan; fills @results. */
int pack_write_shards(const struct pack_plan *plan,
		      const struct pack_write_options *opt,
		      struct pack_progress *pr,
		      struct pack_shard_result *results);

/* Write shards.json next to the shards, once all of them are complete. */
int pack_manifest_write(const struct pack_plan *plan,
			const struct pack_pattern *pattern,
			const struct pack_shard_result *results);

#endif
