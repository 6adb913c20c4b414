/* SPDX-License-Identifier: Apache-2.0 */
/*
 * build_conflicts.h - paths both a file and a directory in a bounded index
 * build (private to the builder, index_build.c).
 *
 * What GNU tar extracts at such a path depends on the order of the
 * members: a member below a path that is a file then is not extracted
 * ("a parent directory is not a directory"), a file never replaces a
 * directory that holds something, and a directory member replaces a file.
 * The in-memory build replays that with every member as a node; a bounded
 * build keeps only directories as nodes and finds the conflict when it
 * merges its runs, after the scans are gone (stream_count()).
 *
 * So the builder collects every such path (build_conflicts_add()), then
 * streams the set twice more, handing every member in set order to
 * build_conflicts_member().  The first time (learning) only the state of
 * each conflicting path moves, as the in-memory merge's node would: what
 * its last member was, whether anything was put below it, which makes it
 * a directory for good, and how many of its members were extracted;
 * build_conflicts_settle() then keeps that count, whose last is what the
 * path names at the end.  The second time the build is made again, and
 * each member under or at a conflicting path is kept, skipped (warned, as
 * in memory), or left out as replaced: a member of the path itself that
 * a later one replaced (of the other kind, or of the same: the count of
 * files written over files is the in-memory merge's, not the runs').
 * The build is then the in-memory build's, byte for byte
 * (unit.test_index_bounded, fuzz_index_bounded).
 *
 * An index being extended is what the set's first shards extracted: each
 * conflicting path starts as the index names it (build_conflicts_seed()),
 * and an entry of it that a later member replaces is left out
 * (build_conflicts_replaces()).
 *
 * Hard links under or to a conflicting path bind to whatever the path
 * named at that moment: build_conflicts_covers() lets the builder refuse
 * them to the in-memory build, and the seed refuses a conflicting path
 * that names a file of one of the extended index's hard-link groups.
 *
 * Memory: one record (about 100 bytes and the path) a conflicting path,
 * up to BUILD_CONFLICTS_MAX; nothing per member.  Cost: two more scans of
 * the set, and a hash lookup per directory level of each member while a
 * set with conflicts is streamed.
 *
 * Thread-safety: none; the builder's merging thread owns it.
 */
#ifndef SHARDFS_BUILD_CONFLICTS_H
#define SHARDFS_BUILD_CONFLICTS_H

#include <stdbool.h>
#include <stddef.h>

/* Conflicting paths a bounded build replays; more take the in-memory
 * build. */
#define BUILD_CONFLICTS_MAX (1u << 20)

struct conflict_path;

struct build_conflicts {
	struct conflict_path *paths;	/* uthash, by path */
	size_t nr;			/* paths held */
	size_t longest;			/* bytes of the longest path: no
					 * longer prefix is looked up */
	bool settled;			/* learnt: each path's end is known */
	uint32_t *replaced;		/* settled: the extended index's
					 * entries later members replace,
					 * ascending; NULL: none */
	size_t nr_replaced;		/* entries in replaced */
	uint64_t duplicates;		/* settled: files extracted over a
					 * file at a conflicting path (the
					 * in-memory merge's count) */
};

/* What an index being extended names at a conflicting path. */
struct conflict_base {
	uint32_t entry;			/* its entry there; UINT32_MAX: none */
	bool dir;			/* a directory */
	bool holds;			/* a directory that holds something */
	bool bound;			/* a member named it (no synthesized
					 * directory) */
};

/* Fills *@out for @path (@len bytes) of the index ARG; 0 or -errno. */
typedef int conflict_base_fn(void *arg, const char *path, size_t len,
			     struct conflict_base *out);

/* What becomes of a member (build_conflicts_member()). */
enum build_conflict_verdict {
	BUILD_CONFLICT_KEEP,		/* merged as any other */
	BUILD_CONFLICT_SKIP,		/* not extracted: warned, as the
					 * in-memory merge warns */
	BUILD_CONFLICT_REPLACED,	/* extracted, then replaced by a
					 * later member of the other kind:
					 * left out, silently */
};

/* Hold @path (@len bytes, no trailing slash) as one that is both a file
 * and a directory.  0, or -ENOMEM. */
int build_conflicts_add(struct build_conflicts *c, const char *path, size_t len);

/*
 * The next member in set order, at @path (@len bytes), a directory if
 * @dir: moves the state of the conflicting paths at and above it, and
 * says what becomes of it.  Before build_conflicts_settle() only KEEP
 * and SKIP; for SKIP, *@what says why (the in-memory merge's words).
 * Of a conflicting path's own members, only the last extracted is KEPT
 * once settled.
 */
enum build_conflict_verdict build_conflicts_member(struct build_conflicts *c,
						   const char *path, size_t len,
						   bool dir, const char **what);

/*
 * Before the first pass over the set: each conflicting path starts as
 * @fn says the index being extended names it.  0, or what @fn returned.
 */
int build_conflicts_seed(struct build_conflicts *c, conflict_base_fn *fn, void *arg);

/* Once settled: whether entry @e of the extended index is at a
 * conflicting path and a later member replaces it. */
bool build_conflicts_replaces(const struct build_conflicts *c, uint32_t e);

/* Whether @path (@len bytes) is a conflicting path or below one. */
bool build_conflicts_covers(const struct build_conflicts *c, const char *path,
			    size_t len);

/* Every member was handed over once: fix each path's end, and start
 * again for the build.  0 or -ENOMEM. */
int build_conflicts_settle(struct build_conflicts *c);

void build_conflicts_release(struct build_conflicts *c);

#endif
