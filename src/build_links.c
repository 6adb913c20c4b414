/* SPDX-License-Identifier: Apache-2.0 */
/*
 * build_links.c - hard links in a bounded index build: each bound within
 * its shard's scan, then counted into groups by their target.
 *
 * Before, any hard link sent a set to the in-memory build, which holds
 * about 250 bytes a member at its peak: one link in a set of 150 M members
 * wanted 37 GiB.  What a link needs is found in its own shard's scan, so
 * the cost is one sorted array of the shard's path hashes, made at the
 * shard's first link and freed with the shard, and a table of the groups.
 * The contract is in build_links.h.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "build_links.h"
#include "shardfs/tar.h"

/* A member of the shard being streamed, by the hash of its path. */
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

/* Index the members of @sc by path (its first hard link).  0 or -ENOMEM. */
static int index_paths(struct build_links *l, const struct shard_scan *sc)
{
	build_links_shard_done(l);
	l->paths = malloc((sc->nr_members ? sc->nr_members : 1) * sizeof(*l->paths));
	l->bound = malloc((sc->nr_members ? sc->nr_members : 1) * sizeof(*l->bound));
	if (!l->paths || !l->bound)
		return -ENOMEM;
	for (size_t i = 0; i < sc->nr_members; i++) {
		const struct raw_member *m = &sc->members[i];

		l->paths[i] = (struct link_path){
			XXH3_64bits(sc->strings + m->path, m->path_len), (uint32_t)i };
	}
	qsort(l->paths, sc->nr_members, sizeof(*l->paths), link_path_cmp);
	l->scan = sc;
	return 0;
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

/* The latest member before @i whose path is @path (@len bytes), as a
 * hard link binds: 0 and *@target, -ENOENT or -EAGAIN. */
static int latest_before(const struct build_links *l, const struct shard_scan *sc,
			 uint32_t i, const char *path, uint32_t len, uint32_t *target)
{
	struct link_path key = { XXH3_64bits(path, len), i };
	size_t lo = 0, hi = sc->nr_members;

	while (lo < hi) {	/* the first not before key */
		size_t mid = lo + (hi - lo) / 2;

		if (link_path_cmp(&l->paths[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (lo-- > 0 && l->paths[lo].hash == key.hash) {
		uint32_t j = l->paths[lo].member;
		const struct raw_member *m = &sc->members[j];

		assert(j < i);
		if (m->path_len != len || memcmp(sc->strings + m->path, path, len))
			continue;
		if (m->type == TAR_DIR)
			return -ENOENT;
		if (m->type == TAR_HARDLINK && l->bound[j] == BUILD_LINK_REFUSED)
			continue;	/* it named nothing: what came before */
		*target = m->type == TAR_HARDLINK ? l->bound[j] : j;
		return 0;
	}
	return -EAGAIN;
}

int build_links_resolve(struct build_links *l, const struct shard_scan *sc,
			uint32_t shard, uint32_t i, uint32_t *target)
{
	const struct raw_member *rm = &sc->members[i];
	int rc = l->scan == sc ? 0 : index_paths(l, sc);

	assert(rm->type == TAR_HARDLINK);
	if (rc)
		return rc;
	/* the root: a directory */
	rc = rm->link_len ? latest_before(l, sc, i, sc->strings + rm->link, rm->link_len,
					  target) : -ENOENT;
	l->bound[i] = rc ? BUILD_LINK_REFUSED : *target;
	return rc ?: group_add(l, shard, *target);
}

int build_links_join(struct build_links *l, uint32_t shard, uint32_t member)
{
	return group_add(l, shard, member);
}

void build_links_shard_done(struct build_links *l)
{
	free(l->paths);
	free(l->bound);
	l->paths = NULL;
	l->bound = NULL;
	l->scan = NULL;
}

/* The group of name @r; NULL when no link named its member. */
static struct link_group *group_of(const struct build_links *l, const struct leaf_record *r)
{
	struct link_group *g;

	if (!l->nr_groups)
		return NULL;
	g = group_slot(l, group_key(r->shard, r->linked ? r->group : r->member));
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
	build_links_shard_done(l);
	free(l->groups);
	*l = (struct build_links){ 0 };
}
