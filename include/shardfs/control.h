/*
 * control.h - the hidden /.shardfs/ directory: live statistics and the
 * shard and member tables, generated on open.
 *
 *   /.shardfs/stats     JSON: counts, index cost, per-operation counters
 *                       and latency, shard I/O, readahead, errors
 *   /.shardfs/shards    one line per shard: index, path, size, members,
 *                       first and last byte served ("-" before any read)
 *   /.shardfs/members   one line per regular file: path, shard index,
 *                       data offset, size (tab-separated; tab, newline
 *                       and backslash in paths escaped as \t \n \\)
 *   /.shardfs/metrics   the same figures in Prometheus text format
 *
 * The directory is reachable by name but never listed in the root, so
 * ImageFolder and os.walk never take it for a class.  Its inodes follow
 * the index's entries.  Content is rendered in chunks as the reader
 * advances, so reading `members` of a 10-million-file set costs memory
 * for one chunk, not for the whole table.
 *
 * Thread-safety: a stream belongs to one open file; the renderers only
 * read the index and relaxed-atomic counters.
 */
#ifndef SHARDFS_CONTROL_H
#define SHARDFS_CONTROL_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

struct shardfs;

#define CONTROL_DIR_NAME ".shardfs"

enum control_node {
	CONTROL_DIR,		/* /.shardfs itself */
	CONTROL_STATS,		/* stats */
	CONTROL_SHARDS,		/* shards */
	CONTROL_MEMBERS,	/* members */
	CONTROL_METRICS,	/* metrics */
	CONTROL_NR_NODES
};

/* Inode number of @node: the first numbers after the index's entries. */
uint64_t control_ino(const struct shardfs *fs, enum control_node node);

/* The node behind @ino, or -1 when @ino is not a control inode. */
int control_node_of(const struct shardfs *fs, uint64_t ino);

/* Look up @name inside /.shardfs.  0 or -ENOENT. */
int control_lookup(const struct shardfs *fs, const char *name, uint64_t *ino);

/* The @pos-th file of /.shardfs.  0 or -ENOENT past the end. */
int control_readdir_entry(const struct shardfs *fs, uint64_t pos,
			  const char **name, uint64_t *ino);

void control_getattr(const struct shardfs *fs, enum control_node node,
		     struct stat *st);

struct control_stream;

/* Start reading generated file @node.  0 or -ENOMEM. */
int control_open(struct shardfs *fs, enum control_node node,
		 struct control_stream **out);

/* Bytes of the content at @off (possibly fewer than @size; 0 at end). */
ssize_t control_read(struct shardfs *fs, struct control_stream *cs, char *buf,
		     size_t size, uint64_t off);

void control_close(struct control_stream *cs);

#endif
