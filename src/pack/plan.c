/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plan.c - group entries into samples, order them, and cut shards.
 *
 * A sample is every entry whose path has the same WebDataset key: the
 * directory plus the file name up to its first dot, so "a/b/x.jpg" and
 * "a/b/x.cls" form sample "a/b/x" (path_sample_key_len() in path.h, the
 * rule the mount uses too: a leading dot is part of the name).  Sorting entries by key, then path,
 * brings each sample's members together; the samples then either keep
 * that order or are shuffled with a seeded generator.
 *
 * Shards are cut greedily: a sample joins the current shard unless that
 * would take the shard past --max-size (its end-of-archive blocks
 * counted) or --max-count samples, in which case a new shard starts.  A
 * sample never spans shards; one larger than --max-size gets a shard of
 * its own.
 *
 * Directories: a shard holds the entries of the directories above its
 * members, each written once, just before the first member that needs
 * it.  Every shard thus extracts on its own into a well-formed tree, and
 * directory modes and mtimes survive extracting the shards in any order.
 * A directory with nothing in it is a sample of its own (its key is its
 * path, with the trailing '/'), so empty directories are kept too.
 *
 * Sizes come from encoding each header exactly as the writer will, so a
 * plan knows the final size of every shard before a byte is written.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"
#include "shardfs/index.h"
#include "shardfs/util.h"

/* A run of consecutive entries of planner->members with one key. */
struct pack_sample {
	size_t first;		/* index of its first member */
	size_t count;		/* members */
};

/* Working state of one pack_plan_build(). */
struct planner {
	const struct pack_plan_options *opt; /* limits and order */
	struct pack_plan *plan;		/* the plan being built */
	const struct pack_entry **dirs;	/* every directory, sorted by path */
	size_t dir_count;		/* entries in dirs */
	size_t *dir_shard;		/* per dir: last shard holding it */
	uint64_t *dir_probe;		/* per dir: last probe counting it */
	uint64_t probe;			/* number of the current probe */
	const struct pack_entry **members; /* files, links, empty dirs */
	size_t member_count;		/* entries in members */
	struct pack_sample *samples;	/* runs of members with one key */
	size_t sample_count;		/* entries in samples */
	size_t items_cap;		/* entries allocated in plan->items */
	size_t shards_cap;		/* entries allocated in plan->shards */
	unsigned char header[PACK_HEADER_MAX]; /* scratch for sizing headers */
};

static int dir_cmp(const void *pa, const void *pb)
{
	const struct pack_entry *a = *(const struct pack_entry *const *)pa;
	const struct pack_entry *b = *(const struct pack_entry *const *)pb;

	return shard_index_name_cmp(a->path, a->path_len, b->path, b->path_len);
}

static int member_cmp(const void *pa, const void *pb)
{
	const struct pack_entry *a = *(const struct pack_entry *const *)pa;
	const struct pack_entry *b = *(const struct pack_entry *const *)pb;
	int c = shard_index_name_cmp(a->path, a->key_len, b->path, b->key_len);

	return c ? c : dir_cmp(pa, pb);
}

/* Index in pl->dirs of the directory with path @path, or SIZE_MAX. */
static size_t planner_find_dir(const struct planner *pl, const char *path,
			       size_t len)
{
	size_t lo = 0, hi = pl->dir_count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct pack_entry *d = pl->dirs[mid];
		int c = shard_index_name_cmp(d->path, d->path_len, path, len);

		if (!c)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return SIZE_MAX;
}

/* Bytes of the path of the directory holding @e ("a/" for "a/b/"). */
static size_t parent_len(const struct pack_entry *e)
{
	size_t i = e->path_len - 1;

	while (i > 0 && e->path[i - 1] != '/')
		i--;
	return i;
}

/* Sort the directories, and note which have something in them. */
static int planner_index_dirs(struct planner *pl, const struct pack_tree *tree,
			      bool *has_child)
{
	for (size_t i = 0; i < tree->count; i++)
		if (tree->entries[i].type == '5')
			pl->dirs[pl->dir_count++] = &tree->entries[i];
	qsort(pl->dirs, pl->dir_count, sizeof(*pl->dirs), dir_cmp);
	for (size_t i = 0; i < tree->count; i++) {
		const struct pack_entry *e = &tree->entries[i];
		size_t len = parent_len(e), d;

		if (!len)
			continue;
		d = planner_find_dir(pl, e->path, len);
		assert(d < pl->dir_count);
		has_child[d] = true;
	}
	pl->dir_shard = malloc(pl->dir_count * sizeof(*pl->dir_shard) + 1);
	pl->dir_probe = calloc(pl->dir_count + 1, sizeof(*pl->dir_probe));
	if (!pl->dir_shard || !pl->dir_probe)
		return -ENOMEM;
	for (size_t d = 0; d < pl->dir_count; d++)
		pl->dir_shard[d] = SIZE_MAX;	/* in no shard yet */
	return 0;
}

/* Collect files, links and empty directories, sorted by key, then path. */
static int planner_sort(struct planner *pl, const struct pack_tree *tree)
{
	bool *has_child;
	int rc;

	pl->dirs = malloc((tree->count + 1) * sizeof(*pl->dirs));
	pl->members = malloc((tree->count + 1) * sizeof(*pl->members));
	has_child = calloc(tree->count + 1, sizeof(*has_child));
	rc = pl->dirs && pl->members && has_child ? 0 : -ENOMEM;
	if (!rc)
		rc = planner_index_dirs(pl, tree, has_child);
	if (rc)
		goto out_free_has_child;
	for (size_t i = 0; i < tree->count; i++)
		if (tree->entries[i].type != '5')
			pl->members[pl->member_count++] = &tree->entries[i];
	for (size_t d = 0; d < pl->dir_count; d++)
		if (!has_child[d])
			pl->members[pl->member_count++] = pl->dirs[d];
	qsort(pl->members, pl->member_count, sizeof(*pl->members), member_cmp);
out_free_has_child:
	free(has_child);
	return rc;
}

static bool same_key(const struct pack_entry *a, const struct pack_entry *b)
{
	return !shard_index_name_cmp(a->path, a->key_len, b->path, b->key_len);
}

/* Cut the sorted members into samples: runs with one key. */
static int planner_group(struct planner *pl)
{
	pl->samples = malloc((pl->member_count + 1) * sizeof(*pl->samples));
	if (!pl->samples)
		return -ENOMEM;
	for (size_t i = 0; i < pl->member_count; i++) {
		struct pack_sample *last = NULL;

		if (pl->sample_count)
			last = &pl->samples[pl->sample_count - 1];
		if (last &&
		    same_key(pl->members[last->first], pl->members[i])) {
			last->count++;
			continue;
		}
		pl->samples[pl->sample_count++] =
			(struct pack_sample){ .first = i, .count = 1 };
	}
	return 0;
}

/* splitmix64: small, fast and plenty random to mix samples. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* A number in [0, n), without modulo bias. */
static uint64_t rng_below(uint64_t *state, uint64_t n)
{
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	uint64_t r;

	do
		r = rng_next(state);
	while (r >= limit);
	return r % n;
}

/* Fisher-Yates shuffle of the samples, seeded by --shuffle=SEED. */
static void planner_shuffle(struct planner *pl)
{
	uint64_t state = pl->opt->seed;

	for (size_t i = pl->sample_count; i > 1; i--) {
		size_t j = rng_below(&state, i);
		struct pack_sample tmp = pl->samples[i - 1];

		pl->samples[i - 1] = pl->samples[j];
		pl->samples[j] = tmp;
	}
}

/* Start a new shard; later members go into it. */
static int plan_open_shard(struct planner *pl)
{
	struct pack_plan *plan = pl->plan;

	if (array_grow((void **)&plan->shards, &pl->shards_cap,
		       plan->shard_count + 1, sizeof(*plan->shards)))
		return -ENOMEM;
	plan->shards[plan->shard_count++] = (struct pack_shard){
		.first = plan->item_count,
		.bytes = 2 * PACK_BLOCK,	/* the end-of-archive marker */
	};
	plan->bytes += 2 * PACK_BLOCK;
	return 0;
}

/* Add @e to the current shard's members. */
static int plan_append(struct planner *pl, const struct pack_entry *e)
{
	struct pack_plan *plan = pl->plan;
	struct pack_shard *shard = &plan->shards[plan->shard_count - 1];

	if (array_grow((void **)&plan->items, &pl->items_cap,
		       plan->item_count + 1, sizeof(*plan->items)))
		return -ENOMEM;
	plan->items[plan->item_count++] = e;
	shard->count++;
	if (e->type != '5') {
		shard->files++;
		plan->files++;
	}
	return 0;
}

/* Count the bytes of member @e; with @commit, also add it to the shard. */
static int place_one(struct planner *pl, const struct pack_entry *e,
		     bool commit, uint64_t *bytes)
{
	*bytes += pack_ustar_encode(e, pl->header) + pack_padded(e->size);
	return commit ? plan_append(pl, e) : 0;
}

/* Place @e after the directories above it that the shard still lacks. */
static int place_member(struct planner *pl, const struct pack_entry *e,
			bool commit, uint64_t *bytes)
{
	size_t shard = pl->plan->shard_count - 1;
	int rc;

	for (size_t i = 0; i + 1 < e->path_len; i++) {
		size_t d;

		if (e->path[i] != '/')
			continue;
		d = planner_find_dir(pl, e->path, i + 1);
		assert(d < pl->dir_count);
		if (pl->dir_shard[d] == shard || pl->dir_probe[d] == pl->probe)
			continue;
		pl->dir_probe[d] = pl->probe;
		if (commit)
			pl->dir_shard[d] = shard;
		rc = place_one(pl, pl->dirs[d], commit, bytes);
		if (rc)
			return rc;
	}
	return place_one(pl, e, commit, bytes);
}

/*
 * Count the bytes sample @s adds to the current shard into *bytes; with
 * @commit, also add its members (and directories) to the shard.
 */
static int place_sample(struct planner *pl, const struct pack_sample *s,
			bool commit, uint64_t *bytes)
{
	int rc = 0;

	pl->probe++;
	*bytes = 0;
	for (size_t i = 0; i < s->count && !rc; i++)
		rc = place_member(pl, pl->members[s->first + i], commit, bytes);
	return rc;
}

/* Deal the samples, in order, into shards within the limits. */
static int planner_cut(struct planner *pl)
{
	struct pack_plan *plan = pl->plan;
	const struct pack_plan_options *opt = pl->opt;
	uint64_t bytes;
	int rc = 0;

	if (pl->sample_count)
		rc = plan_open_shard(pl);
	for (size_t i = 0; i < pl->sample_count && !rc; i++) {
		struct pack_shard *shard = &plan->shards[plan->shard_count - 1];

		place_sample(pl, &pl->samples[i], false, &bytes);
		if (shard->samples && (shard->samples >= opt->max_count ||
				       shard->bytes + bytes > opt->max_size))
			rc = plan_open_shard(pl);
		if (!rc)
			rc = place_sample(pl, &pl->samples[i], true, &bytes);
		if (rc)
			break;
		shard = &plan->shards[plan->shard_count - 1];
		shard->bytes += bytes;
		shard->samples++;
		plan->bytes += bytes;
	}
	plan->samples = pl->sample_count;
	plan->dirs = pl->dir_count;
	return rc;
}

static void planner_release(struct planner *pl)
{
	free(pl->dirs);
	free(pl->dir_shard);
	free(pl->dir_probe);
	free(pl->members);
	free(pl->samples);
	free(pl);
}

int pack_plan_build(const struct pack_tree *tree,
		    const struct pack_plan_options *opt,
		    struct pack_plan *plan)
{
	struct planner *pl = calloc(1, sizeof(*pl));
	int rc;

	memset(plan, 0, sizeof(*plan));
	if (!pl)
		return -ENOMEM;
	pl->opt = opt;
	pl->plan = plan;
	rc = planner_sort(pl, tree);
	if (!rc)
		rc = planner_group(pl);
	if (!rc && opt->shuffle)
		planner_shuffle(pl);
	if (!rc)
		rc = planner_cut(pl);
	planner_release(pl);
	if (rc)
		pack_plan_release(plan);
	return rc;
}

void pack_plan_release(struct pack_plan *plan)
{
	free(plan->items);
	free(plan->shards);
	memset(plan, 0, sizeof(*plan));
}
