/* SPDX-License-Identifier: Apache-2.0 */
/*
 * build_conflicts.c - the in-memory merge's rules for paths both a file
 * and a directory, replayed on those paths alone (build_conflicts.h).
 *
 * merge_member() in index_build.c is the rule: a member walks its parent
 * directories top down, stops at one that is not a directory (skipped),
 * and leaves each it passes holding something; a file member at a path
 * that holds something is skipped; any other member binds its path.  A
 * path no conflict names is a directory or a file for the whole set, so
 * only the conflicting ones need a state: what their last member bound,
 * and whether a member passed below them.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "build_conflicts.h"

/* What a conflicting path names at this point of the set. */
enum conflict_kind {
	CONFLICT_NONE,		/* nothing yet: a member below makes it */
	CONFLICT_FILE,		/* a file (or symlink) member bound it */
	CONFLICT_DIR,		/* a directory member bound it */
};

struct conflict_path {
	UT_hash_handle hh;	/* in build_conflicts.paths, by path */
	unsigned char kind;	/* enum conflict_kind */
	bool holds;		/* a member below it was extracted: a
				 * directory for good */
	uint64_t binds;		/* its members extracted so far (what an
				 * extended index named there the first) */
	uint64_t last_bind;	/* settled: how many there are: the last
				 * is what the path names at the end */
	struct conflict_base base; /* what an extended index names there */
	size_t len;		/* bytes of path */
	char path[];		/* the path, no trailing slash */
};

int build_conflicts_add(struct build_conflicts *c, const char *path, size_t len)
{
	struct conflict_path *p = malloc(sizeof(*p) + len);

	if (!p)
		return -ENOMEM;
	*p = (struct conflict_path){ .len = len, .base = { .entry = UINT32_MAX } };
	memcpy(p->path, path, len);
	HASH_ADD_KEYPTR(hh, c->paths, p->path, len, p);
	c->nr++;
	if (len > c->longest)
		c->longest = len;
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static struct conflict_path *find(const struct build_conflicts *c, const char *path,
				  size_t len)
{
	struct conflict_path *p = NULL;

	if (len <= c->longest)
		HASH_FIND(hh, c->paths, path, len, p);
	return p;
}

/* The next conflicting parent of @path (@len bytes) after *@at (a
 * position in it, @path at first), top down; NULL: no more. */
static struct conflict_path *next_parent(const struct build_conflicts *c, const char *path,
					 size_t len, const char **at)
{
	const char *slash;

	while ((slash = memchr(*at, '/', len - (size_t)(*at - path)))) {
		struct conflict_path *p = find(c, path, (size_t)(slash - path));

		*at = slash + 1;
		if (p)
			return p;
	}
	return NULL;
}

/* The member's walk through its parents: false when one is a file. */
static bool walk_parents(struct build_conflicts *c, const char *path, size_t len)
{
	const char *at = path;
	struct conflict_path *p;

	while ((p = next_parent(c, path, len, &at))) {
		if (p->kind == CONFLICT_FILE)
			return false;
		p->holds = true;
	}
	return true;
}

enum build_conflict_verdict build_conflicts_member(struct build_conflicts *c,
						   const char *path, size_t len,
						   bool dir, const char **what)
{
	struct conflict_path *p;
	bool replaced;

	if (!walk_parents(c, path, len)) {
		*what = "a parent directory is not a directory:";
		return BUILD_CONFLICT_SKIP;
	}
	p = find(c, path, len);
	if (!p)
		return BUILD_CONFLICT_KEEP;
	if (!dir && p->holds) {
		*what = "would replace a non-empty directory:";
		return BUILD_CONFLICT_SKIP;
	}
	if (c->settled && !dir && p->kind == CONFLICT_FILE)
		c->duplicates++;	/* a file over a file, as in memory */
	p->kind = dir ? CONFLICT_DIR : CONFLICT_FILE;
	p->binds++;
	replaced = c->settled && p->binds != p->last_bind;
	return replaced ? BUILD_CONFLICT_REPLACED : BUILD_CONFLICT_KEEP;
}

bool build_conflicts_covers(const struct build_conflicts *c, const char *path,
			    size_t len)
{
	const char *at = path;

	return c->nr && (next_parent(c, path, len, &at) || find(c, path, len));
}

/* @p as the set's first member finds it: as an extended index left it. */
static void start(struct conflict_path *p)
{
	const struct conflict_base *b = &p->base;

	p->kind = b->entry == UINT32_MAX ? CONFLICT_NONE : b->dir ? CONFLICT_DIR : CONFLICT_FILE;
	p->holds = b->holds;
	p->binds = b->bound;
}

int build_conflicts_seed(struct build_conflicts *c, conflict_base_fn *fn, void *arg)
{
	struct conflict_path *p, *tmp;
	int rc = 0;

	HASH_ITER(hh, c->paths, p, tmp) {
		rc = fn(arg, p->path, p->len, &p->base);
		if (rc)
			break;
		start(p);
	}
	return rc;
}

bool build_conflicts_replaces(const struct build_conflicts *c, uint32_t e)
{
	return c->nr_replaced &&
	       bsearch(&e, c->replaced, c->nr_replaced, sizeof(e), entry_cmp);
}

int build_conflicts_settle(struct build_conflicts *c)
{
	struct conflict_path *p, *tmp;

	c->replaced = malloc(c->nr * sizeof(*c->replaced));
	if (!c->replaced)
		return -ENOMEM;
	HASH_ITER(hh, c->paths, p, tmp) {
		p->last_bind = p->binds;
		if (p->base.bound && p->last_bind != 1)	/* the first bind */
			c->replaced[c->nr_replaced++] = p->base.entry;
		start(p);
	}
	qsort(c->replaced, c->nr_replaced, sizeof(*c->replaced), entry_cmp);
	c->settled = true;
	return 0;
}

void build_conflicts_release(struct build_conflicts *c)
{
	struct conflict_path *p, *tmp;

	HASH_ITER(hh, c->paths, p, tmp) {
		HASH_DEL(c->paths, p);
		free(p);
	}
	free(c->replaced);
	*c = (struct build_conflicts){ 0 };
}
