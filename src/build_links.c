/* SPDX-License-Identifier: Apache-2.0 */
/*
 * build_links.c - hard links in a bounded index build: each bound within
 * its shard's scan, then counted into groups by their target.
 *
 * Before, any hard link sent a set to the in-memory build, which holds
 * about 250 bytes a member at its peak: one link in a set of 150 M members
 * wanted 37 GiB.  What a link needs is found in its own shard's scan or
 * the one before (kept one shard longer), or in a shard further back
 * scanned again, so the cost is a sorted array of a shard's path hashes,
 * made at need and freed with the shard, and a table of the groups.
 * The contract is in build_links.h.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "build_links.h"
#include "shardfs/tar.h"

/* A member of a shard with links, by the hash of its path. */
struct link_path {
	uint64_t hash;		/* XXH3 of its path */
	uint32_t member;	/* its number in the shard */
};

/* A member some hard link bound to, and the names it has. */
struct link_group {
	uint64_t key;		/* shard << 32 | member; GROUP_EMPTY: free */
	uint32_t names;		/* names that won their path */
	uint32_t first;		/* the first of them in entry order;
				 * UINT32_MAX: none laid out yet */
};

#define GROUP_EMPTY UINT64_MAX
/* Slots of the first table (a power of two). */
#define GROUPS_FIRST 64

static int link_path_cmp(const void *a, const void *b)
{
	const struct link_path *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return (x->member > y->member) - (x->member < y->member);
}

/* Index the members of shard @ls by path (at need).  0 or -ENOMEM. */
static int index_paths(struct link_shard *ls)
{
	const struct shard_scan *sc = ls->scan;

	ls->paths = malloc((sc->nr_members ? sc->nr_members : 1) * sizeof(*ls->paths));
	if (!ls->paths)
		return -ENOMEM;
	for (size_t i = 0; i < sc->nr_members; i++) {
		const struct raw_member *m = &sc->members[i];

		ls->paths[i] = (struct link_path){
			XXH3_64bits(sc->strings + m->path, m->path_len), (uint32_t)i };
	}
	qsort(ls->paths, sc->nr_members, sizeof(*ls->paths), link_path_cmp);
	return 0;
}

static void link_shard_release(struct link_shard *ls)
{
	free(ls->paths);
	free(ls->bound);
	*ls = (struct link_shard){ 0 };
}

void build_links_shard_start(struct build_links *l, const struct shard_scan *sc,
			     uint32_t shard)
{
	link_shard_release(&l->prev);
	l->prev = l->cur;
	l->cur = (struct link_shard){ .scan = sc, .shard = shard };
}

static uint64_t group_key(uint32_t shard, uint32_t member)
{
	return (uint64_t)shard << 32 | member;
}

/* The slot of @key: its group, or the free slot it would take. */
static struct link_group *group_slot(const struct build_links *l, uint64_t key)
{
	uint64_t i = XXH3_64bits(&key, sizeof(key)) & l->mask;

	while (l->groups[i].key != GROUP_EMPTY && l->groups[i].key != key)
		i = (i + 1) & l->mask;
	return &l->groups[i];
}

/* A table of @slots slots with every group of the old one.  0 or -ENOMEM. */
static int groups_rehash(struct build_links *l, uint64_t slots)
{
	struct link_group *old = l->groups;
	uint64_t old_slots = old ? l->mask + 1 : 0;

	l->groups = malloc(slots * sizeof(*l->groups));
	if (!l->groups) {
		l->groups = old;
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < slots; i++)
		l->groups[i] = (struct link_group){ GROUP_EMPTY, 0, UINT32_MAX };
	l->mask = slots - 1;
	for (uint64_t i = 0; i < old_slots; i++)
		if (old[i].key != GROUP_EMPTY)
			*group_slot(l, old[i].key) = old[i];
	free(old);
	return 0;
}

/* Make member @member of @shard a group (once).  0 or -ENOMEM. */
static int group_add(struct build_links *l, uint32_t shard, uint32_t member)
{
	uint64_t key = group_key(shard, member);
	struct link_group *g;

	if (!l->groups || 2 * (l->nr_groups + 1) > l->mask + 1) {
		int rc = groups_rehash(l, l->groups ? 2 * (l->mask + 1) : GROUPS_FIRST);

		if (rc)
			return rc;
	}
	g = group_slot(l, key);
	if (g->key == GROUP_EMPTY) {
		g->key = key;
		l->nr_groups++;
	}
	return 0;
}

/*
 * The latest member of shard @ls before its member @i whose path is @path
 * (@len bytes), as a hard link binds: 0 and *@target (BUILD_LINK_PREV set
 * when it is in the shard before), -ENOENT (a directory), -EXDEV (none)
 * or -EAGAIN (a link that binds further back: the in-memory build).
 */
static int latest_before(struct link_shard *ls, uint32_t i, const char *path, uint32_t len,
			 uint32_t *target)
{
	const struct shard_scan *sc = ls->scan;
	struct link_path key = { XXH3_64bits(path, len), i };
	size_t lo = 0, hi = sc->nr_members;

	if (!ls->paths && index_paths(ls))
		return -ENOMEM;
	while (lo < hi) {	/* the first not before key */
		size_t mid = lo + (hi - lo) / 2;

		if (link_path_cmp(&ls->paths[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (lo-- > 0 && ls->paths[lo].hash == key.hash) {
		uint32_t j = ls->paths[lo].member;
		const struct raw_member *m = &sc->members[j];

		assert(j < i);
		if (m->path_len != len || memcmp(sc->strings + m->path, path, len))
			continue;
		if (m->type == TAR_DIR)
			return -ENOENT;
		assert(m->type != TAR_HARDLINK || ls->bound);	/* bound before */
		if (m->type == TAR_HARDLINK && ls->bound[j] == BUILD_LINK_REFUSED)
			continue;	/* it named nothing: what came before */
		if (m->type == TAR_HARDLINK && ls->bound[j] == BUILD_LINK_FAR)
			return -EAGAIN;
		*target = m->type == TAR_HARDLINK ? ls->bound[j] : j;
		return 0;
	}
	return -EXDEV;
}

/* Where the target of link @rm, member @i of the shard streamed, is:
 * before it in that shard, or in the one before (BUILD_LINK_PREV). */
static int find_target(struct build_links *l, const struct raw_member *rm, uint32_t i,
		       uint32_t *target)
{
	const char *path = l->cur.scan->strings + rm->link;
	int rc;

	if (!rm->link_len)
		return -ENOENT;	/* the root: a directory */
	rc = latest_before(&l->cur, i, path, rm->link_len, target);
	if (rc != -EXDEV || !l->prev.scan || l->prev.shard + 1 != l->cur.shard)
		return rc;
	rc = latest_before(&l->prev, (uint32_t)l->prev.scan->nr_members, path, rm->link_len,
			   target);
	if (!rc && (*target & BUILD_LINK_PREV))
		return -EAGAIN;	/* two shards back, through a link */
	if (!rc)
		*target |= BUILD_LINK_PREV;
	return rc;
}

int build_links_resolve(struct build_links *l, uint32_t i, uint32_t *target, bool *prev)
{
	const struct shard_scan *sc = l->cur.scan;
	int rc = 0;

	assert(sc && sc->members[i].type == TAR_HARDLINK);
	if (!l->cur.bound &&
	    !(l->cur.bound = malloc((sc->nr_members ? sc->nr_members : 1) * sizeof(uint32_t))))
		return -ENOMEM;
	rc = find_target(l, &sc->members[i], i, target);
	l->cur.bound[i] = rc == -EXDEV ? BUILD_LINK_FAR : rc ? BUILD_LINK_REFUSED : *target;
	*prev = !rc && (*target & BUILD_LINK_PREV);
	*target &= ~BUILD_LINK_PREV;
	return rc ?: group_add(l, l->cur.shard - *prev, *target);
}

/*
 * The links of @ls, a shard scanned again, bound within it in order as
 * build_links_resolve() binds them, a link whose target is not before it
 * there marked BUILD_LINK_FAR (its binding is not known here).  0 or
 * -ENOMEM.
 */
static int bind_within(struct link_shard *ls)
{
	const struct shard_scan *sc = ls->scan;

	ls->bound = malloc((sc->nr_members ? sc->nr_members : 1) * sizeof(*ls->bound));
	if (!ls->bound)
		return -ENOMEM;
	for (uint32_t i = 0; i < sc->nr_members; i++) {
		const struct raw_member *m = &sc->members[i];
		uint32_t target;
		int rc;

		if (m->type != TAR_HARDLINK)
			continue;
		rc = m->link_len ? latest_before(ls, i, sc->strings + m->link, m->link_len, &target)
				 : -ENOENT;
		if (rc == -ENOMEM)
			return rc;
		ls->bound[i] = rc == -ENOENT ? BUILD_LINK_REFUSED : rc ? BUILD_LINK_FAR : target;
	}
	return 0;
}

int build_links_find(struct link_shard *ls, const char *path, uint32_t len, uint32_t *member)
{
	int rc;

	if (!len)
		return -ENOENT;	/* the root: a directory */
	if (!ls->bound && (rc = bind_within(ls)))
		return rc;
	return latest_before(ls, (uint32_t)ls->scan->nr_members, path, len, member);
}

void build_links_shard_release(struct link_shard *ls)
{
	link_shard_release(ls);
}

int build_links_join(struct build_links *l, uint32_t shard, uint32_t member)
{
	return group_add(l, shard, member);
}

/* The group of name @r; NULL when no link named its member. */
static struct link_group *group_of(const struct build_links *l, const struct leaf_record *r)
{
	struct link_group *g;

	if (!l->nr_groups)
		return NULL;
	g = group_slot(l, group_key(leaf_data_shard(r), leaf_data_member(r)));
	return g->key == GROUP_EMPTY ? NULL : g;
}

void build_links_count(struct build_links *l, const struct leaf_record *r)
{
	struct link_group *g = group_of(l, r);

	if (g)
		g->names++;
}

uint64_t build_links_later_names(const struct build_links *l)
{
	uint64_t n = 0;

	for (uint64_t i = 0; l->groups && i <= l->mask; i++)
		if (l->groups[i].key != GROUP_EMPTY && l->groups[i].names > 1)
			n += l->groups[i].names - 1;
	return n;
}

uint32_t build_links_name(struct build_links *l, const struct leaf_record *r, uint32_t e,
			  uint32_t *nlink)
{
	struct link_group *g = group_of(l, r);

	*nlink = 1;
	if (!g || g->names < 2)
		return UINT32_MAX;
	*nlink = g->names;
	if (g->first == UINT32_MAX) {
		g->first = e;
		return UINT32_MAX;
	}
	return g->first;
}

void build_links_release(struct build_links *l)
{
	link_shard_release(&l->cur);
	link_shard_release(&l->prev);
	free(l->groups);
	*l = (struct build_links){ 0 };
}
