/* SPDX-License-Identifier: Apache-2.0 */
/*
 * disk_cache.h - remote chunks kept on a node-local disk (disk_cache.c),
 * under -o cache_dir=: a handle, struct disk_cache, one per struct
 * remote (its disk).  Without cache_dir there is none (NULL), and load
 * finds nothing and store does nothing, as for an object without a
 * validator.  Load and store may be called from any thread once
 * disk_cache_init succeeded; disk_cache_release after the last of them.
 *
 * What is stored is found by what it covers: a load is served from any
 * stored ranges of the same chunk (of @group bytes) that hold all its
 * bytes, whatever ranges were asked when they were stored.
 */
#ifndef SHARDFS_DISK_CACHE_H
#define SHARDFS_DISK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remote_object.h"

/* Random bytes of the key that names and checksums chunks (an XXH3
 * secret: at least XXH3_SECRET_SIZE_MIN). */
#define DISK_CACHE_KEY_BYTES 192
/* A chunk file's name, "<16 hex offset><16 hex length>.chunk", and its
 * NUL. */
#define DISK_CACHE_NAME_MAX (32 + 6 + 1)

/* Is @name that of a chunk file: 32 lower-case hex digits, ".chunk"?
 * Nothing else in the cache is ever deleted. */
bool disk_cache_chunk_name(const char *name);

struct disk_cache;

/* Open (make, if missing) the cache directory @dir, checked to be
 * trusted, of at most @limit bytes, its ranges kept by chunks of @group
 * bytes (> 0: the chunk cache's chunk_size), counting into @counters
 * (which outlive it), in *@dcp; @dir NULL: none, *@dcp NULL.  0 or -errno,
 * logged (*@dcp NULL). */
int disk_cache_init(struct disk_cache **dcp, const char *dir, uint64_t limit,
		    uint64_t group, struct remote_counters *counters);

/* Close @dc and forget its key.  NULL: nothing. */
void disk_cache_release(struct disk_cache *dc);

/* Bytes [@off, @off + @len) of @o, within one chunk, from disk into
 * @buf: from one or several stored ranges that cover them.  0, or
 * -ENOENT (not all there) or -EBADMSG (a range failed a check:
 * deleted). */
int disk_cache_load(struct disk_cache *dc, const struct remote_object *o,
		    uint64_t off, void *buf, size_t len);

/* Keep bytes [@off, @off + @len) of @o, within one chunk, on disk;
 * failures only cost a later fetch. */
void disk_cache_store(struct disk_cache *dc, const struct remote_object *o,
		      uint64_t off, const void *buf, size_t len);

#endif
