/* SPDX-License-Identifier: Apache-2.0 */
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
 * Nothing is kept per open file: a read names the inode and the offset,
 * so the FUSE glue can tell the kernel not to send OPEN and RELEASE at
 * all.  The files of /.shardfs/ are built for that (control.h).
 *
 * Thread-safety: after shardfs_init() every function may be called from
 * any number of threads.  Reads of members allocate nothing and go
 * through the shard's source (source.h) into the caller's buffer: for a
 * local tar shard that is one pread(2) and takes no lock; a compressed
 * shard's read holds one of its decoders' mutexes while it decodes
 * (source_seekable.c), and a remote shard's read takes the chunk cache's
 * mutex and may wait for a GET in flight (chunk_cache.c).  Counters are
 * updated with relaxed atomics.
 */
#ifndef SHARDFS_FS_H
#define SHARDFS_FS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "shardfs/control.h"
#include "shardfs/index.h"
#include "shardfs/index_store.h"
#include "shardfs/mount.h"
#include "shardfs/pushahead.h"
#include "shardfs/shardset.h"

/* Inode number of the root directory (FUSE_ROOT_ID). */
#define SHARDFS_ROOT_INO 1

/* Default shard readahead for forward-moving readers (-o readahead=). */
#define SHARDFS_READAHEAD_DEFAULT (4u << 20)
/* Readahead windows start on a page boundary. */
#define SHARDFS_PAGE_SIZE 4096

/* Read errors logged per shard; later ones are only counted. */
#define SHARDFS_READ_ERRORS_LOGGED 10

/* A read at the start of a file announces its sample (the file and the
 * files of the same WebDataset key next to it in its directory and in
 * the shard), up to this many bytes, else the file, to the source
 * (SHARD_SOURCE_WILLREAD): a remote shard fetches the sample of a reader
 * at random with one GET, and the chunks of a file that crosses a chunk
 * boundary with one GET, not one per chunk. */
#define SHARDFS_WILLREAD_MAX (16u << 20)
/* Files of a sample looked at on each side of the one read. */
#define SHARDFS_SAMPLE_FILES 8
/* Most bytes between two files of one sample in the shard (tar headers,
 * a pax header, padding): further apart, they are read apart. */
#define SHARDFS_SAMPLE_GAP (8u << 10)

struct shardfs {
	struct shard_set set;		/* shards, open for the mount's life */
	struct shard_stream *streams;	/* read-path state, one per shard */
	struct shard_index idx;		/* the namespace */
	struct shardfs_options opt;	/* ownership overrides */
	struct shardfs_counters counters; /* activity since mount */
	struct pushahead push;		/* members stored ahead of readers */
	double build_seconds;		/* time the index build took */
	struct index_store_result index_file; /* where the index came from */
	struct control_state control;	/* the /.shardfs/ files' content */
};

/*
 * Expand @spec (see shardset.h), open the shards and load or build the
 * index as @so says (see index_store.h).  Errors are logged (naming the
 * shard and byte offset where there is one).  Returns 0 or -errno;
 * fs->opt must be set by the caller.
 */
int shardfs_init(struct shardfs *fs, const char *spec,
		 const struct shard_index_build_options *opt,
		 const struct index_store_options *so);

/* Close the shards and free the index. */
void shardfs_release(struct shardfs *fs);

/*
 * Set up what shardfs_init() would around an index built by the caller
 * (tests and fuzzers build @fs->set and @fs->idx themselves).  Returns 0
 * or -ENOMEM.
 */
int shardfs_init_built(struct shardfs *fs);

/*
 * Fill @st for inode @ino.  Returns 0, -ENOENT, or -ENOMEM when a
 * /.shardfs/ file cannot be rendered.
 */
int shardfs_getattr(struct shardfs *fs, uint64_t ino, struct stat *st);

/*
 * Look @name up in directory @parent; on success store the child's inode
 * in *ino.  Returns 0, -ENOENT, -ENOTDIR, -ENAMETOOLONG or -ENOMEM (as
 * shardfs_getattr).  Looking up a changing /.shardfs/ file takes a new
 * snapshot of it (control.h).
 */
int shardfs_lookup(struct shardfs *fs, uint64_t parent, const char *name,
		   uint64_t *ino);

/* A child of a directory, as shardfs_readdir_entry() gives it. */
struct shardfs_dirent {
	struct compact_cursor cur;	/* where its name was decoded: the
					 * next position follows on from it */
	uint64_t dir;			/* the directory cur walks; 0: none */
	uint64_t first;			/* the directory's first child */
	uint64_t count;			/* its children */
	const char *name;		/* its name, NUL-terminated, valid
					 * until the next call */
	uint64_t ino;			/* its inode */
};

/*
 * The @pos-th child of directory @dir (0-based, name order) into *@de,
 * which is zeroed before a listing: consecutive positions then decode
 * each name once.  Returns 0, -ENOENT past the end, or -ENOTDIR.
 */
int shardfs_readdir_entry(const struct shardfs *fs, uint64_t dir, uint64_t pos,
			  struct shardfs_dirent *de);

/* Inode of the parent of directory @dir (the root is its own parent). */
uint64_t shardfs_parent(const struct shardfs *fs, uint64_t dir);

/* The target of symlink @ino (NUL-terminated).  0, -ENOENT or -EINVAL. */
int shardfs_readlink(const struct shardfs *fs, uint64_t ino, const char **target);

/*
 * True when the content of @ino changes while mounted (a /.shardfs/ file
 * served from snapshots): the kernel must not cache its entry or
 * attributes (control.h).
 */
bool shardfs_changes(const struct shardfs *fs, uint64_t ino);

/*
 * Read up to @size bytes of @ino at @off into @buf.  Returns the number of
 * bytes read (fewer than @size only at the end of the file, 0 at or past
 * it), -EISDIR, -ENOENT, -ENOMEM (a /.shardfs/ file), or -EIO when the
 * shard cannot deliver them (I/O error, or a shard shorter than it was at
 * mount: truncated or replaced); the shard is then logged once.
 */
ssize_t shardfs_read(struct shardfs *fs, uint64_t ino, char *buf, size_t size,
		     uint64_t off);

/*
 * shardfs_read() into the pipe @pipe_fd (its write end, with room for
 * @size bytes and two pages), by splice(2) of the shard's own pages: the
 * bytes are not copied, and the pipe's reader (the FUSE reply) copies
 * them once.  Only a plain member of a local shard, and only when at
 * least @min bytes are to be read: else -EAGAIN, nothing done, and the
 * caller uses shardfs_read().  Checked like shardfs_read() (-EIO when the
 * shard changed or failed, never other bytes); on any error the pipe may
 * hold some bytes and must be emptied or closed.  The pipe holds the
 * shard's pages: once it is drained, shardfs_splice_done() with the bytes
 * returned drops them from the shard's page cache, as shardfs_read()
 * does at once.
 */
ssize_t shardfs_splice(struct shardfs *fs, uint64_t ino, int pipe_fd,
		       size_t size, uint64_t off, size_t min);
void shardfs_splice_done(struct shardfs *fs, uint64_t ino, size_t len,
			 uint64_t off);

/*
 * Extended attributes of members: user.shardfs.shard (shard path),
 * user.shardfs.shard_index, user.shardfs.offset (of the data in the
 * shard) and user.shardfs.key (the WebDataset sample key).  Like
 * getxattr(2): with @size 0 only the length is returned; -ERANGE when
 * @buf is too small, -ENODATA for other names or other inodes.
 */
ssize_t shardfs_getxattr(const struct shardfs *fs, uint64_t ino,
			 const char *name, char *buf, size_t size);
ssize_t shardfs_listxattr(const struct shardfs *fs, uint64_t ino, char *buf,
			  size_t size);

/*
 * Read @size bytes at @off of member entry @e (a plain, not sparse, file)
 * for push-ahead: checked like a READ (-EIO when the shard changed or
 * failed; never other bytes), counted as shard I/O but not as a reader's
 * move.  Into @buf, the shard pages read then dropped; or, @pipe_fd >= 0,
 * spliced into that pipe as shardfs_splice() splices (a member of a local
 * plain shard only: else -EAGAIN, nothing done), the pages dropped by
 * shardfs_splice_done(@fs, @e + 1, ...) once the pipe is drained.
 * Returns @size, -EAGAIN or -EIO (the pipe may then hold some bytes).
 */
ssize_t shardfs_fetch(struct shardfs *fs, uint32_t e, char *buf, int pipe_fd,
		      size_t size, uint64_t off);

/* Count one @op that started at @start_ns (from monotonic_ns(), util.h). */
void shardfs_op_done(struct shardfs *fs, enum shardfs_op op, uint64_t start_ns);

/* Requests answered so far, over every operation (the idle timer). */
uint64_t shardfs_requests(const struct shardfs *fs);

/* Count one request that came over io_uring rather than /dev/fuse. */
void shardfs_count_uring_request(struct shardfs *fs);

void shardfs_statfs(const struct shardfs *fs, struct statvfs *sv);

#endif
