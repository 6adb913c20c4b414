/* SPDX-License-Identifier: Apache-2.0 */
/*
 * disk_cache.h - remote chunks kept on a node-local disk (disk_cache.c),
 * under -o cache_dir=: a handle, struct disk_cache, one per struct
 * remote (its disk).  Without cache_dir there is none (NULL), and load
 * finds nothing and store does nothing, as for an object without a
 * validator.  Load and store may be called from any thread once
 * disk_cache_init succeeded; disk_cache_release after the last of them.
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
/* A chunk file's name, "<32 hex>.chunk", and its NUL. */
#define DISK_CACHE_NAME_MAX (32 + 6 + 1)

/* Is @name that of a chunk file: 32 lower-case hex digits, ".chunk"?
 * Nothing else in the cache is ever deleted. */
bool disk_cache_chunk_name(const char *name);

struct disk_cache;

/* Open (make, if missing) the cache directory @dir, checked to be
 * trusted, of at most @limit bytes, counting into @counters (which
 * outlive it), in *@dcp; @dir NULL: none, *@dcp NULL.  0 or -errno,
 * logged (*@dcp NULL). */
int disk_cache_init(struct disk_cache **dcp, const char *dir, uint64_t limit,
		    struct remote_counters *counters);

/* Close @dc and forget its key.  NULL: nothing. */
void disk_cache_release(struct disk_cache *dc);

/* Bytes [@off, @off + @len) of @o (a chunk, or the range fetched for a
 * read at random), as stored, from disk into @buf: 0, or -ENOENT (absent)
 * or -EBADMSG (failed a check: deleted). */
int disk_cache_load(struct disk_cache *dc, const struct remote_object *o,
		    uint64_t off, void *buf, size_t len);

/* Keep bytes [@off, @off + @len) of @o on disk; failures only cost a
 * later fetch. */
void disk_cache_store(struct disk_cache *dc, const struct remote_object *o,
		      uint64_t off, const void *buf, size_t len);

#endif
