/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_remote.c - a shard that is a remote object, as a shard_source.
 *
 * Reads go through the chunk cache (chunk_cache.c), hints steer its
 * prefetching, and the size never needs a request: the object is pinned
 * by its validator (If-Match with its ETag, else If-Unmodified-Since
 * with its Last-Modified, on every GET), so a replaced object is noticed
 * by the read that meets it, not by polling.  A server that sends
 * neither is said to be one whose replacements go unnoticed.
 *
 * The index build's scan (advise SCAN .. SCANNED) reads one header every
 * member.  With -o index_fetch=stream (the default) it goes through the
 * chunk cache like any forward reader: every chunk is fetched, several in
 * flight, and the whole shard is downloaded once.  With index_fetch=ranged
 * each of its reads is one GET of just the bytes asked (a 4 KiB probe
 * per 100 KB member), one after the other, as each header names the
 * next: 4% of the bytes, but a request per member.  Measured side by side
 * (docs/benchmarks.md, issue 14; 8 shards of 1 GiB, nginx): on loopback,
 * where a request costs 0.1-0.3 ms, stream is as fast cold and ranged
 * 0.3-0.8x its time warm; with 1 ms added per request ranged takes 1.6x
 * (8 chains) to 4.7x (2) its time.  Streaming is the default.
 *
 * The times reported for the index (index_store.c validates a cached
 * index by size and times): mtime is Last-Modified; ctime is
 * Last-Modified with the nanoseconds set from a hash of the ETag, so that
 * a cached index is used again only for the same URL, size and ETag.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "remote_http.h"
#include "remote_s3.h"
#include "shardfs/log.h"
#include "shardfs/remote.h"
#include "shardfs/source.h"

struct source_remote {
	struct shard_source base; /* base.size: the object's size at open */
	struct remote_object obj; /* where and which version */
	struct chunk_owner owner; /* its chunks in the cache */
	atomic_bool ranged_scan;  /* the index build scans it with
				   * index_fetch=ranged: reads bypass the
				   * chunk cache */
};

static ssize_t remote_read(struct shard_source *src, void *buf, size_t len,
			   uint64_t off)
{
	struct source_remote *r = (struct source_remote *)src;

	if (atomic_load_explicit(&r->ranged_scan, memory_order_relaxed))
		return remote_http_read(&r->obj, &(struct fetch_piece){ buf, len, NULL }, 1,
					off);
	return chunk_cache_read(&r->owner, buf, len, off);
}

static void remote_advise(struct shard_source *src, uint64_t off, uint64_t len,
			  enum shard_source_advice advice)
{
	struct source_remote *r = (struct source_remote *)src;

	switch (advice) {
	case SHARD_SOURCE_WILLNEED:
		chunk_cache_willneed(&r->owner, off, len);
		break;
	case SHARD_SOURCE_WILLREAD:
		chunk_cache_willread(&r->owner, off, len);
		break;
	case SHARD_SOURCE_DONTNEED:
		chunk_cache_dontneed(&r->owner, off, len);
		break;
	case SHARD_SOURCE_SCAN:
	case SHARD_SOURCE_SCANNED:
		atomic_store_explicit(&r->ranged_scan, advice == SHARD_SOURCE_SCAN &&
				      r->obj.remote->cfg.index_fetch == REMOTE_INDEX_RANGED,
				      memory_order_relaxed);
		/* its reads skip the members' data: a stream all the same */
		chunk_cache_scan(&r->owner, advice == SHARD_SOURCE_SCAN);
		break;
	}
}

/* The size at open: a changed object fails its reads (If-Match). */
static int remote_current_size(struct shard_source *src, uint64_t *size)
{
	*size = src->size;
	return 0;
}

static void remote_close(struct shard_source *src)
{
	struct source_remote *r = (struct source_remote *)src;

	chunk_cache_forget(&r->owner);
	free(r->obj.sign_path);
	free(r->obj.name);
	free(r);
}

static const struct shard_source_ops remote_ops = {
	.read = remote_read,
	.advise = remote_advise,
	.current_size = remote_current_size,
	.close = remote_close,
};

int shard_source_open_remote(struct remote *remote, const char *url,
			     struct shard_source **src,
			     struct shard_source_info *info, char *msg,
			     size_t msg_len)
{
	struct source_remote *r;
	int rc;

	if (!remote)
		return log_format(msg, msg_len, -EINVAL, "%s: remote shards are not "
				  "configured", url);
	r = calloc(1, sizeof(*r));
	if (!r || !(r->obj.name = strdup(url)) || !(info->name = strdup(url))) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = remote_locate(remote, &r->obj, url, msg, msg_len);
	/* S3 honours Range: what a listing said of the object will do */
	if (!rc && (strncmp(url, "s3://", 5) || remote_s3_lookup(&r->obj)))
		rc = remote_http_probe(&r->obj, msg, msg_len);
	if (rc == -ENOENT && !strncmp(url, "s3://", 5) && url[strlen(url) - 1] != '/')
		remote_s3_prefix_hint(remote, url, msg, msg_len);
	if (rc)
		goto out_free;
	if (remote_validator(&r->obj) == REMOTE_VALIDATOR_NONE &&
	    !atomic_exchange(&remote->unvalidated, true))
		log_warn("%s: the server sends neither ETag nor Last-Modified: a "
			 "replacement of the same size cannot be detected (its reads "
			 "could mix old and new bytes), and its chunks are not kept in "
			 "cache_dir; said once for all such shards", url);
	remote->used = true;
	r->base = (struct shard_source){ .ops = &remote_ops, .size = r->obj.size,
					 .push = { .ahead_max = chunk_cache_ahead_max(remote->chunks),
						   .fetched = true } };
	r->owner = (struct chunk_owner){ .cache = remote->chunks, .obj = &r->obj,
					 .size = r->obj.size, .last_chunk = UINT64_MAX,
					 .read_end = UINT64_MAX };
	info->stored_size = r->obj.size;
	info->mtime = (struct timespec){ .tv_sec = r->obj.mtime };
	info->ctime = (struct timespec){
		.tv_sec = r->obj.mtime,
		.tv_nsec = (long)(XXH3_64bits(r->obj.etag, strlen(r->obj.etag)) %
				  1000000000u),
	};
	*src = &r->base;
	return 0;
out_free:
	free(info->name);
	info->name = NULL;
	if (r) {
		free(r->obj.sign_path);
		free(r->obj.name);
	}
	free(r);
	return rc;
}
