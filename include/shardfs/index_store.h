/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_store.h - find, validate, extend or rebuild the persistent index
 * of a shard set.
 *
 * Where the index lives, unless -o index=PATH says:
 *   1. next to the first shard, as .<first shard name>.shardfs-index,
 *      when that directory is writable (or the file already exists);
 *   2. otherwise in the cache directory: $XDG_CACHE_HOME/shardfs, or
 *      /var/cache/shardfs for root, or ~/.cache/shardfs, named by a hash
 *      of the first shard's path.
 * A remote set (remote.h) has only the second: the cache directory,
 * named by a hash of the first URL; its shards are validated by URL, size
 * and ETag (source_remote.c), all learnt by the probe at open.
 * The first shard names the set, so appending shards keeps the same index
 * file and only the new shards are scanned.  Layout options other than
 * the default add their hash to the name, so mounts with different
 * layouts keep separate indexes.
 *
 * Validity costs one fstat per shard (done when the shards are opened):
 * path, size, mtime and ctime must match the index's record, or, when
 * only the times differ, the fingerprint of the first bytes.
 */
#ifndef SHARDFS_INDEX_STORE_H
#define SHARDFS_INDEX_STORE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "shardfs/index.h"
#include "shardfs/shardset.h"

enum index_mode {
	INDEX_MODE_AUTO,	/* use a valid index, else build and save one */
	INDEX_MODE_REQUIRE,	/* a valid index must exist: error otherwise */
	INDEX_MODE_REBUILD,	/* always scan, then save */
	INDEX_MODE_OFF,		/* neither read nor write an index file */
};

struct index_store_options {
	const char *path;	/* -o index=PATH; NULL: default location */
	enum index_mode mode;	/* what to do */
	uint64_t options_hash;	/* layout_hash() of the mount's layout */
	bool full_check;	/* check all of an index file even if a record
				 * says it passed before (index_verified.h) */
};

/* How the index came about, for the summary. */
enum index_origin {
	INDEX_LOADED,		/* mapped from a valid file */
	INDEX_EXTENDED,		/* loaded, plus newly appended shards */
	INDEX_BUILT,		/* scanned from scratch */
};

struct index_store_result {
	enum index_origin origin;	/* see above */
	char path[PATH_MAX];		/* the index file used or written */
	bool saved;			/* a new file was written */
	char published[PATH_MAX];	/* a remote set: where mounts look for
					 * a published copy (next to the first
					 * shard); else "" */
	uint32_t base_shards;		/* INDEX_EXTENDED: the shards the
					 * index covered (not scanned) */
};

/* Parse "auto", "require", "rebuild" or "off".  0 or -EINVAL. */
int index_mode_parse(const char *name, enum index_mode *mode);

/*
 * Produce the index of @set (opened) into @idx, reading, extending or
 * building it as @so says and saving what was built.  Failing to save is
 * a warning, not an error.  Returns 0 or -errno (logged).
 */
int index_store_open(struct shard_index *idx, struct shard_set *set,
		     const struct shard_index_build_options *bo,
		     const struct index_store_options *so,
		     struct index_store_result *res);

#endif
