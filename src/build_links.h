/* SPDX-License-Identifier: Apache-2.0 */
/*
 * build_links.h - hard links in a bounded index build (private to the
 * builder, index_build.c).
 *
 * A hard link names the inode its target path names at that point of the
 * extraction.  The in-memory build finds it among its nodes; a bounded
 * build keeps no file in memory, so it looks in the scan of the link's own
 * shard, which is in memory while that shard is streamed, for the latest
 * member before the link whose path is the target's, and then in the scan
 * of the shard before, kept one shard longer (an archive split into
 * shards at member boundaries puts a link after the cut and its target
 * before it).  A link whose target is not there waits (-EXDEV) until
 * every shard is streamed; the builder then goes down the shards before
 * it once, each scanned again, and looks in each (build_links_find()),
 * then in the index it extends, if any.
 * What only the in-memory build binds is refused with -EAGAIN: a link to
 * a link that was bound further back.  GNU tar and bsdtar write a link
 * to its target's first name, never to another link.
 *
 * A link's leaf record carries its target's data and attributes and the
 * target's member number as its group, in its own shard or one before
 * (leaf_runs.h, leaf_data_shard()/_member()); the names of a group
 * are counted once the runs are merged (a later member may replace any of
 * them), and the layout then gives every name the group's nlink and each
 * later name in entry order its hardlinks[] record, as the in-memory
 * build's link_groups() does.
 *
 * An index extended by appended shards brings its groups along: each
 * later name of a base group (hardlinks[]) is a link to the entry of its
 * group's first, which stands as its member (build_links_join()).
 *
 * Memory: one scan more than the build keeps without links; while a
 * shard with hard links is streamed, 16 bytes a member of it and of the
 * shard before, and 4 a member for what its links bound to; for the whole
 * set, 32 to 64 bytes a group (a target some link named), not a member;
 * the builder holds each link further back (its path and its target's)
 * until the shards before it are scanned again.
 *
 * Thread-safety: none; the builder's merging thread owns it.
 */
#ifndef SHARDFS_BUILD_LINKS_H
#define SHARDFS_BUILD_LINKS_H

#include <stdbool.h>
#include <stdint.h>

#include "leaf_runs.h"
#include "shard_scan.h"

struct link_path;
struct link_group;

/* A shard whose links and targets are looked up. */
struct link_shard {
	const struct shard_scan *scan;	/* its scan; NULL: none */
	uint32_t shard;			/* its number in the set */
	struct link_path *paths;	/* its members by path hash, then
					 * member number; NULL: not yet */
	uint32_t *bound;		/* per member: the member a hard link
					 * bound to (BUILD_LINK_*); NULL: no
					 * link yet */
};

struct build_links {
	struct link_shard cur;		/* the shard being streamed */
	struct link_shard prev;		/* the one streamed before it */
	struct link_group *groups;	/* open addressing, by (shard,
					 * member); NULL: no link yet */
	uint64_t nr_groups;		/* slots used */
	uint64_t mask;			/* slots - 1 (a power of two) */
};

/* What bound[] holds for a hard link refused (its target a directory),
 * for one whose target is further back than the shard before (bound
 * later, build_links_find()), and the mark of a member of the shard
 * before. */
#define BUILD_LINK_REFUSED UINT32_MAX
#define BUILD_LINK_FAR (UINT32_MAX - 1)
#define BUILD_LINK_PREV 0x80000000u

/* The shard @sc, number @shard, is streamed next; the one streamed before
 * it stays a place to look until the next one starts. */
void build_links_shard_start(struct build_links *l, const struct shard_scan *sc,
			     uint32_t shard);

/*
 * The member hard link @i of the shard streamed binds to, in *@target:
 * its target's latest member before it there, or (*@prev) in the shard
 * before, or what that member, a hard link itself, bound to.  -ENOENT
 * when the target is a directory (refused, as GNU tar refuses it),
 * -EXDEV when neither shard has the target's path before it (the builder
 * looks further back: build_links_find()), -EAGAIN when it is a link
 * bound further back (the in-memory build), -ENOMEM.  Members must be
 * resolved in order.
 */
int build_links_resolve(struct build_links *l, uint32_t i, uint32_t *target, bool *prev);

/*
 * The latest member of shard @ls (a scan of it made again: no .bound)
 * whose path is @path (@len bytes), for a link further back: 0 and
 * *@member (what a link there bound to within the shard), -ENOENT (a
 * directory), -EXDEV (none there), -EAGAIN (a link there bound outside
 * it: the in-memory build binds such chains) or -ENOMEM.  Indexes @ls's
 * paths and binds its links at its first call;
 * build_links_shard_release() frees them.
 */
int build_links_find(struct link_shard *ls, const char *path, uint32_t len, uint32_t *member);

void build_links_shard_release(struct link_shard *ls);

/* A link to member @member of @shard is streamed (one that
 * build_links_resolve() did not bind): its group.  0 or -ENOMEM. */
int build_links_join(struct build_links *l, uint32_t shard, uint32_t member);

/* Count the name @r, which won its path in the merge, into its group. */
void build_links_count(struct build_links *l, const struct leaf_record *r);

/* Once every name is counted: the names after the first of each group,
 * the hardlinks[] records the layout will write. */
uint64_t build_links_later_names(const struct build_links *l);

/*
 * The name @r, entry @e, in entry order: *@nlink gets its group's names
 * (1 for a file no link named); returns the group's first entry when @e
 * is a later name, else UINT32_MAX (it is the first, or alone).
 */
uint32_t build_links_name(struct build_links *l, const struct leaf_record *r, uint32_t e,
			  uint32_t *nlink);

void build_links_release(struct build_links *l);

#endif
