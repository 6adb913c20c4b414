/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pack_index.c - write the shardfs index of the shards just packed, so that the
 * first mount of a fresh shard set maps an index instead of scanning.
 *
 * The index is built by the same code a mount uses (shardfs_core), from
 * the shards' headers: the shards were just written, so those reads come
 * from the page cache, and the index is exactly the one shardfs would
 * build and validate (same file name, same shard records and digests).
 *
 * A compressed shard gets the seek points its writer recorded (the start
 * of every member or frame, shard.c) before the index is built, so that
 * the build does not decode the whole shard to find them, as a first
 * mount of a shard packed elsewhere must; the headers are then read
 * through those points.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"
#include "shardfs/index_store.h"
#include "shardfs/log.h"
#include "shardfs/shardset.h"
#include "shardfs/source.h"

/* A shard set naming the @count planned shards of @pattern. */
static int planned_set(struct shard_set *set, const struct pack_pattern *pattern,
		       uint64_t count)
{
	char path[PACK_PATH_MAX];

	*set = (struct shard_set){ .shards = calloc(count, sizeof(*set->shards)),
				   .cap = count };
	if (!set->shards)
		return -ENOMEM;
	for (uint64_t i = 0; i < count; i++) {
		int rc = pack_pattern_format(pattern, i, path, sizeof(path));

		if (rc)
			return rc;
		set->shards[set->nr] = (struct shard){ .path = strdup(path) };
		if (!set->shards[set->nr].path)
			return -ENOMEM;
		set->nr++;
	}
	return 0;
}

/* Give the compressed shards of @set the seek points of @results. */
static int adopt_points(struct shard_set *set, const struct pack_shard_result *results)
{
	char msg[512];

	for (size_t i = 0; i < set->nr; i++) {
		struct shard *s = &set->shards[i];
		const struct pack_shard_result *r = &results[i];
		struct seek_table t = {
			.points = r->points, .nr = r->nr_points, .size = r->tar,
			.stored_size = r->stored,
		};
		int rc;

		if (!r->points)
			continue;
		rc = shard_source_detect(&s->src, s->path, msg, sizeof(msg));
		if (rc) {
			pack_error("%s", msg);
			return rc;
		}
		rc = s->src->ops->seek_set(s->src, &t);
		if (rc)
			return rc;
	}
	return 0;
}

int pack_index_write(const struct pack_pattern *pattern, uint64_t count,
		     unsigned jobs, const struct pack_shard_result *results)
{
	const struct shard_index_build_options bo = { .threads = jobs };
	const struct index_store_options so = { .mode = INDEX_MODE_REBUILD };
	struct index_store_result res;
	struct shard_index idx;
	struct shard_set set;
	char msg[512];
	int rc;

	if (count == 0)
		return 0;
	rc = planned_set(&set, pattern, count);
	if (!rc && (rc = shard_set_open(&set, msg, sizeof(msg))))
		pack_error("%s", msg);
	if (!rc)
		rc = adopt_points(&set, results);
	if (!rc)
		rc = index_store_open(&idx, &set, &bo, &so, &res);
	if (!rc) {
		if (!res.saved)
			pack_warn("the shardfs index could not be saved; shardfs will "
				  "build it at the first mount");
		shard_index_release(&idx);
	}
	shard_set_release(&set);
	return rc;
}
