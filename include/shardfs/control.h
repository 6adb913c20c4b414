/* SPDX-License-Identifier: Apache-2.0 */
/*
 * control.h - the hidden /.shardfs/ directory: live statistics and the
 * shard and member tables.
 *
 *   /.shardfs/stats     JSON: counts, index cost, per-operation counters
 *                       and latency, shard I/O, readahead, errors
 *   /.shardfs/shards    one line per shard: index, path, size, members,
 *                       first and last byte served ("-" before any read)
 *   /.shardfs/members   one line per regular file: path, shard index,
 *                       data offset, size (tab-separated; tab, newline
 *                       and backslash in paths escaped as \t \n \\)
 *   /.shardfs/metrics   the same figures as stats, in Prometheus text
 *
 * The directory is reachable by name but never listed in the root, so
 * ImageFolder and os.walk never take it for a class.  Its inodes follow
 * the index's entries.
 *
 * The mount keeps no state per open file (ll.c), so a read of a control
 * file names only the inode and an offset.  stats, shards and metrics are
 * therefore served from a snapshot that control_lookup() takes: every
 * open(2) looks the name up again (the glue gives these entries no cache
 * time), and a snapshot's new mtime makes the kernel drop the pages of
 * the previous one.  A reader that opens, reads and closes sees one
 * consistent snapshot, unless another process opens the same file while
 * it reads one larger than a single read(2).  members never changes: its
 * bytes are computed from the offset, with memory for one checkpoint per
 * CONTROL_MEMBERS_STRIDE entries rather than for the whole table.
 *
 * Thread-safety: every function may be called from any number of
 * threads; a snapshot is swapped and copied under the state's lock, which
 * the read path of members' files never takes.
 */
#ifndef SHARDFS_CONTROL_H
#define SHARDFS_CONTROL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "shardfs/index.h"
#include "shardfs/mount.h"
#include "shardfs/path.h"
#include "shardfs/shardset.h"

/* Entries of `members` between two checkpoints of its line offsets. */
#define CONTROL_MEMBERS_STRIDE 1024u

/* Longest members line: a path with every byte escaped, three numbers. */
#define CONTROL_MEMBERS_LINE_MAX (2 * PATH_MAX + 3 * 21 + 1)

enum control_node {
	CONTROL_DIR,		/* /.shardfs itself */
	CONTROL_STATS,		/* stats */
	CONTROL_SHARDS,		/* shards */
	CONTROL_MEMBERS,	/* members */
	CONTROL_METRICS,	/* metrics */
	CONTROL_NR_NODES
};

/* The rendered content of a changing file, as of its last lookup. */
struct control_snapshot {
	char *data;		/* the bytes, NULL before the first */
	size_t len;		/* their count */
	struct timespec mtime;	/* when taken; strictly increasing */
};

/*
 * What the control files report on: parts of the mount, never the mount
 * itself.  The mount owns them all and outlives its control state.
 */
struct control_source {
	const struct shard_index *idx;		/* the namespace */
	const struct shard_set *set;		/* the shards */
	const struct shard_stream *streams;	/* per shard, set->nr of them */
	const struct shardfs_counters *counters; /* activity since mount */
	const struct shardfs_options *opt;	/* owner and readahead */
	const struct pushahead_counters *push;	/* what push-ahead did */
	const double *build_seconds;		/* time the index took */
};

/* What the control files keep between requests. */
struct control_state {
	struct control_source src; /* what they report on */
	pthread_mutex_t lock;	/* guards snap[] and the members build */
	struct control_snapshot snap[CONTROL_NR_NODES]; /* changing files */
	atomic_bool members_ready; /* set (release) once the fields below
				    * are final; they are then read unlocked */
	uint64_t *members_at;	/* [i]: offset of the line of entry
				 * i * CONTROL_MEMBERS_STRIDE or, when that
				 * has none, of the next line */
	uint64_t members_size;	/* length of members */
	struct timespec mounted; /* mtime of the directory and members */
};

/*
 * Set up @st over @src (empty: content is rendered when first asked
 * for).  What @src points to must outlive @st.
 */
void control_init(struct control_state *st, const struct control_source *src);

/* Free the snapshots and checkpoints. */
void control_release(struct control_state *st);

/* Inode number of @node: the first numbers after the index's entries. */
uint64_t control_ino(const struct control_state *st, enum control_node node);

/* The node behind @ino, or -1 when @ino is not a control inode. */
int control_node_of(const struct control_state *st, uint64_t ino);

/* True when @node (or -1: not a control inode) is served from snapshots. */
bool control_changes(int node);

/*
 * Look up @name inside /.shardfs; a changing file gets a new snapshot.
 * 0, -ENOENT, or -ENOMEM when the snapshot cannot be rendered.
 */
int control_lookup(struct control_state *st, const char *name, uint64_t *ino);

/*
 * The members line of index entry @e into @line (CONTROL_MEMBERS_LINE_MAX
 * bytes): path, shard, data offset, size, tab-separated, the path escaped
 * as above.  Returns its length; 0 when @e has no line (not a regular
 * file, or a path too long to name).  shardfs-index --list writes the
 * same lines.
 */
size_t control_members_line(const struct shard_index *idx, uint32_t e,
			    char *line);

/* The @pos-th file of /.shardfs.  0 or -ENOENT past the end. */
int control_readdir_entry(const struct control_state *st, uint64_t pos,
			  const char **name, uint64_t *ino);

/*
 * Attributes of @node: the size and mtime of its current content (a
 * changing file never looked up gets its first snapshot).  0 or -ENOMEM.
 */
int control_getattr(struct control_state *cs, enum control_node node,
		    struct stat *st);

/*
 * Up to @size bytes of @node's content at @off (fewer only at the end).
 * Returns the count, 0 past the end, or -ENOMEM.
 */
ssize_t control_read(struct control_state *st, enum control_node node,
		     char *buf, size_t size, uint64_t off);

#endif
