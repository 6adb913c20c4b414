/*
 * fs.h - the filesystem operations of shardfs, without FUSE.
 *
 * struct shardfs ties a shard set to its index and answers the questions
 * a VFS asks: attributes, lookups, directory listings, link targets and
 * file data.  The FUSE glue (ll.c) only translates requests and replies;
 * everything here is unit-tested without a mount.
 *
 * Inode numbers are index entry numbers + 1 (see index.h).  The names of
 * a hard-link group all report the inode of the group's first entry.
 *
 * Thread-safety: after shardfs_init() every function may be called from
 * any number of threads.  Reads take no lock and allocate nothing: they
 * pread(2) from the shard descriptors straight into the caller's buffer.
 * Counters are updated with relaxed atomics.
 */
#ifndef SHARDFS_FS_H
#define SHARDFS_FS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "shardfs/index.h"
#include "shardfs/shardset.h"

/* Preferred I/O size reported in st_blksize: big reads suit shards. */
#define SHARDFS_BLKSIZE (128 * 1024)

/* Ownership and permission overrides from -o uid=,gid=,umask=. */
struct shardfs_options {
	bool set_uid;		/* report uid instead of the tar's owner */
	bool set_gid;		/* report gid instead of the tar's group */
	uint32_t uid;		/* owner to report when set_uid */
	uint32_t gid;		/* group to report when set_gid */
	mode_t umask;		/* permission bits to clear (default 0) */
};

/* Counters for /.shardfs/stats; all relaxed atomics. */
struct shardfs_counters {
	atomic_ullong reads;		/* read requests served */
	atomic_ullong read_bytes;	/* bytes returned by reads */
	atomic_ullong backing_reads;	/* pread calls on shards */
	atomic_ullong read_errors;	/* reads answered with EIO */
};

struct shardfs {
	struct shard_set set;		/* shards, open for the mount's life */
	struct shard_index idx;		/* the namespace */
	struct shardfs_options opt;	/* ownership overrides */
	struct shardfs_counters counters; /* activity since mount */
	double build_seconds;		/* time the index build took */
};

/*
 * Expand @spec (see shardset.h), open the shards and build the index.
 * Errors are logged (naming the shard and byte offset where there is
 * one).  Returns 0 or -errno; fs->opt must be set by the caller.
 */
int shardfs_init(struct shardfs *fs, const char *spec,
		 const struct shard_index_build_options *opt);

/* Close the shards and free the index. */
void shardfs_release(struct shardfs *fs);

/* Fill @st for inode @ino.  Returns 0 or -ENOENT. */
int shardfs_getattr(const struct shardfs *fs, uint64_t ino, struct stat *st);

/*
 * Look @name up in directory @parent; on success store the child's inode
 * in *ino.  Returns 0, -ENOENT, -ENOTDIR or -ENAMETOOLONG.
 */
int shardfs_lookup(const struct shardfs *fs, uint64_t parent, const char *name,
		   uint64_t *ino);

/*
 * The @pos-th child of directory @dir (0-based, name order): its name
 * and inode.  Returns 0, -ENOENT past the end, or -ENOTDIR.
 */
int shardfs_readdir_entry(const struct shardfs *fs, uint64_t dir, uint64_t pos,
			  const char **name, uint64_t *ino);

/* Inode of the parent of directory @dir (the root is its own parent). */
uint64_t shardfs_parent(const struct shardfs *fs, uint64_t dir);

/* The target of symlink @ino (NUL-terminated).  0, -ENOENT or -EINVAL. */
int shardfs_readlink(const struct shardfs *fs, uint64_t ino, const char **target);

/* Check that @ino may be opened for reading.  0, -ENOENT or -EISDIR. */
int shardfs_open(const struct shardfs *fs, uint64_t ino);

/*
 * Read up to @size bytes of file @ino at @off into @buf.  Returns the
 * number of bytes read (0 at or past the end), or -EIO when the shard
 * cannot deliver them (I/O error, or a shard shorter than it was at mount:
 * truncated or replaced); the shard is then logged once.
 */
ssize_t shardfs_read(struct shardfs *fs, uint64_t ino, char *buf, size_t size,
		     uint64_t off);

void shardfs_statfs(const struct shardfs *fs, struct statvfs *sv);

#endif
