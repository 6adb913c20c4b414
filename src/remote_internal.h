/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_internal.h - what the pieces of the remote shard reader share:
 * the resolved configuration, one remote object, the HTTP request layer
 * (remote_http.c), S3 addressing, credentials and listing (remote_s3.c)
 * and the disk cache (disk_cache.c); the chunk cache has its own header,
 * shardfs/chunk_cache.h.
 */
#ifndef SHARDFS_REMOTE_INTERNAL_H
#define SHARDFS_REMOTE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "shardfs/chunk_cache.h"
#include "shardfs/util.h"

/* Longest ETag kept (S3's are 34 bytes, quotes included). */
#define REMOTE_ETAG_MAX 256
/* Longest host[:port]. */
#define REMOTE_HOST_MAX 256
/* Longest URL built. */
#define REMOTE_URL_MAX 4096
/* Longest secret or key id read from a file or the environment. */
#define REMOTE_SECRET_MAX 2048

struct remote_options;

/* Counters for /.shardfs/stats and metrics; all relaxed atomics. */
struct remote_counters {
	atomic_ullong requests;		/* HTTP requests sent (attempts) */
	atomic_ullong bytes;		/* body bytes received */
	atomic_ullong retries;		/* attempts after a failed one */
	atomic_ullong errors;		/* data reads given up (EIO) */
	atomic_ullong replaced;		/* objects found replaced */
	struct chunk_cache_counters cache; /* hits, misses, prefetches */
	atomic_ullong disk_hits;	/* chunks read from cache_dir */
	atomic_ullong disk_misses;	/* chunks not in cache_dir */
	atomic_ullong disk_corrupt;	/* cache files that failed a check */
	atomic_ullong disk_store_errors; /* chunks cache_dir could not take */
	atomic_ullong latency_us;	/* sum of first-byte latencies */
	atomic_ullong latency_max_us;	/* the longest first-byte latency */
};

/* How the index build reads a remote shard's headers (-o index_fetch=). */
enum remote_index_fetch {
	REMOTE_INDEX_STREAM,	/* through the chunk cache: every chunk */
	REMOTE_INDEX_RANGED,	/* one GET per read the scanner makes */
};

/* The resolved configuration (remote_init) and shared state. */
struct remote_config {
	char *endpoint;		/* S3 endpoint URL, no trailing '/' */
	char *region;		/* S3 region */
	bool virtual_hosted;	/* bucket in the host name, else in the path */
	bool sign;		/* SigV4-sign S3 requests (remote_s3_keys()) */
	char *cacert;		/* CA bundle, NULL: the system's */
	uint64_t chunk_size;	/* bytes per ranged GET */
	uint64_t cache_mem;	/* bytes of chunk buffers */
	uint64_t cache_size;	/* bytes of the disk cache, if any */
	uint32_t timeout;	/* seconds without progress before EIO */
	uint32_t attempts;	/* tries per request */
	enum remote_index_fetch index_fetch; /* how the index build reads */
	bool used;		/* a remote shard was opened */
	atomic_bool unvalidated; /* one had no validator (said once) */
	struct remote_counters counters; /* see above */
	struct chunk_cache *chunk_cache; /* remote objects' chunks in memory */
};

extern struct remote_config remote_cfg;

/* One remote object (a shard), as opened. */
struct remote_object {
	char *name;		/* as named: s3://bucket/key or the URL */
	char url[REMOTE_URL_MAX]; /* what is fetched */
	char host[REMOTE_HOST_MAX]; /* host[:port] of url, signed for S3 */
	char *sign_path;	/* decoded path to sign (S3), NULL: unsigned */
	char etag[REMOTE_ETAG_MAX]; /* at open; "" when the server sent none */
	uint64_t size;		/* bytes, at open */
	time_t mtime;		/* Last-Modified, at open (0: unknown) */
	atomic_bool replaced;	/* found replaced: every read fails */
};

/* What pins a remote object to the version the mount opened. */
enum remote_validator {
	REMOTE_VALIDATOR_NONE,	/* neither ETag nor Last-Modified: only a
				 * change of size can be seen */
	REMOTE_VALIDATOR_ETAG,	/* If-Match: the ETag, and the size */
	REMOTE_VALIDATOR_DATE,	/* no ETag: If-Unmodified-Since: the
				 * Last-Modified, and the size */
};

/* The validator of @o: its ETag if the server sent one, else its
 * Last-Modified, else none. */
static inline enum remote_validator remote_validator(const struct remote_object *o)
{
	return o->etag[0] ? REMOTE_VALIDATOR_ETAG :
	       o->mtime > 0 ? REMOTE_VALIDATOR_DATE : REMOTE_VALIDATOR_NONE;
}

/* What a response said about itself. */
struct remote_response {
	long status;		/* HTTP status */
	bool has_range;		/* a Content-Range header came */
	uint64_t range_start;	/* its first byte */
	uint64_t range_total;	/* its total size (UINT64_MAX: '*') */
	char etag[REMOTE_ETAG_MAX]; /* ETag header, "" if none */
	time_t last_modified;	/* Last-Modified, 0 if none */
};

/* Fill @o's url, host and sign_path for @url: itself, or the S3 object
 * it names.  0 or -errno with a message. */
int remote_locate(struct remote_object *o, const char *url, char *msg,
		  size_t msg_len);

/* Fill @o's url, host and sign_path for s3://bucket/key.  0 or -errno. */
int remote_s3_object(struct remote_object *o, const char *bucket,
		     const char *key, char *msg, size_t msg_len);

/* Split "s3://bucket/key" into @bucket and @key (malloc'ed; both NULL
 * on failure). */
int remote_s3_split(const char *name, char **bucket, char **key, char *msg,
		    size_t msg_len);

/* Resolve region, endpoint, addressing and credentials into remote_cfg. */
int remote_s3_configure(const struct remote_options *ro);

/*
 * What a listing said of @o->name (size, ETag, Last-Modified), listing
 * its prefix first (once per prefix, bounded) if no listing covered it:
 * one LIST per prefix instead of one probe per shard.  0 or -ENOENT.
 */
int remote_s3_lookup(struct remote_object *o);

/*
 * After s3://bucket/@name (no '/' at its end) was not found: when shards
 * lie under @name + "/", append to @msg that @name is a prefix and the
 * argument that mounts them.  Lists one page; errors leave @msg as it is.
 */
void remote_s3_prefix_hint(const char *name, char *msg, size_t msg_len);

/* Drop what listings remembered (remote_release). */
void remote_s3_forget_listings(void);

/* A copy of the S3 credentials, taken to sign one request. */
struct remote_keys {
	char key_id[REMOTE_SECRET_MAX];	/* aws_access_key_id */
	char secret[REMOTE_SECRET_MAX];	/* never logged; zeroed after use */
	char token[REMOTE_SECRET_MAX];	/* session token, "" for none */
	unsigned gen;			/* bumped by each change of the set */
};

/*
 * Copy the current credentials into @k.  When they came from a file (-o
 * credentials=, ~/.aws/credentials) that file is checked for a change
 * (mtime, size, inode) at most once per S3_KEYS_CHECK_MS, and re-read when
 * it changed: a credential agent that rewrites it is followed.  A read
 * lock is held only for the copy; re-reading happens outside it.
 */
void remote_s3_keys(struct remote_keys *k);

/*
 * A request signed with generation @gen was refused as if its keys were
 * stale (403 ExpiredToken, InvalidAccessKeyId, SignatureDoesNotMatch ...):
 * re-read the credentials file now, whatever its mtime says.  True when
 * the current set is newer than @gen (the request is worth one retry).
 */
bool remote_s3_keys_refresh(unsigned gen);

/* Forget the credentials, zeroing the secret (remote_release). */
void remote_s3_forget_keys(void);

/* List every *.tar under s3://bucket/prefix, sorted, calling @add. */
int remote_s3_list(const char *bucket, const char *prefix,
		   int (*add)(void *arg, const char *name, size_t len), void *arg,
		   char *msg, size_t msg_len);

/*
 * GET [@off, @off + the pieces' lengths) of @o with ONE ranged request,
 * filling the @n pieces in order (adjacent chunks of the cache), with
 * the object's validator (If-Match or If-Unmodified-Since), retrying as
 * remote.h says and resuming at the byte reached, for at most
 * remote_timeout x remote_attempts seconds in all; each piece's progress
 * (or NULL) follows it.  No byte is stored before the response was
 * checked to come from the object of the mount.
 * Returns the bytes read (fewer only at the end of the object) or -EIO;
 * after -EIO, the pieces whose progress reached their length are whole.
 */
ssize_t remote_http_read(struct remote_object *o, const struct fetch_piece *piece,
			 unsigned n, uint64_t off);

/*
 * The mount-time probe: a GET of byte 0 that records size, ETag and
 * Last-Modified in @o, and refuses a server that ignores Range.
 */
int remote_http_probe(struct remote_object *o, char *msg, size_t msg_len);

/*
 * GET the whole body of @o's url plus "?@query" into a malloc'ed
 * NUL-terminated *@body of *@len (at most @max) bytes; for listings and
 * published indexes.  0 or -errno (-ENOENT for a 404) with a message.
 */
int remote_http_put(struct remote_object *o, const void *body, size_t len,
		    char *msg, size_t msg_len);

int remote_http_get_body(struct remote_object *o, const char *query,
			 size_t max, char **body, size_t *len, char *msg,
			 size_t msg_len);

/*
 * The transfer engine (one curl multi handle and its event thread, see
 * remote_http.c).  The calls above may be made from any thread once
 * remote_http_init succeeded, and block until their transfer is done.
 * remote_http_init comes before chunk_cache_init, so that at a fork the
 * fetch threads stop before the engine does.  remote_http_release waits
 * for the transfers in flight.
 */
int remote_http_init(void);
void remote_http_release(void);

/* The node-local disk cache (disk_cache.c); without -o cache_dir=, or
 * for an object without a validator, load finds nothing and store does
 * nothing. */

/* Random bytes of the key that names and checksums chunks (an XXH3
 * secret: at least XXH3_SECRET_SIZE_MIN). */
#define DISK_CACHE_KEY_BYTES 192
/* A chunk file's name, "<32 hex>.chunk", and its NUL. */
#define DISK_CACHE_NAME_MAX (32 + 6 + 1)

/* Is @name that of a chunk file: 32 lower-case hex digits, ".chunk"?
 * Nothing else in the cache is ever deleted. */
bool disk_cache_chunk_name(const char *name);

int disk_cache_init(const char *dir, uint64_t limit);
void disk_cache_release(void);

/* Bytes [@off, @off + @len) of @o (a chunk, or the range fetched for a
 * read at random), as stored, from disk into @buf: 0, or -ENOENT (absent)
 * or -EBADMSG (failed a check: deleted). */
int disk_cache_load(const struct remote_object *o, uint64_t off, void *buf,
		    size_t len);

/* Keep bytes [@off, @off + @len) of @o on disk; failures only cost a
 * later fetch. */
void disk_cache_store(const struct remote_object *o, uint64_t off,
		      const void *buf, size_t len);

#endif
