/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_object.h - what the pieces of the remote shard reader share:
 * the handle that owns them (struct remote: the resolved configuration,
 * the counters, the transfer engine, the S3 keys and listings, the disk
 * and chunk caches; made by remote_init(), remote.c), one remote object,
 * which reaches its handle through a pointer, what pins it to a version,
 * and how its requests are signed.  Each piece has its own header for
 * its calls: remote_http.h (requests), remote_s3.h (S3 addressing,
 * credentials, listing), disk_cache.h, shardfs/chunk_cache.h.  The calls
 * go one way: remote.c uses them all, S3 lists over HTTP, and HTTP signs
 * through the object's signer without knowing S3.
 */
#ifndef SHARDFS_REMOTE_OBJECT_H
#define SHARDFS_REMOTE_OBJECT_H

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

/* The resolved configuration (remote_init); read-only once resolved. */
struct remote_config {
	char *endpoint;		/* S3 endpoint URL, no trailing '/' */
	char *region;		/* S3 region */
	bool virtual_hosted;	/* bucket in the host name, else in the path */
	bool sign;		/* SigV4-sign S3 requests (remote_s3_signer) */
	char *cacert;		/* CA bundle, NULL: the system's */
	uint64_t chunk_size;	/* bytes per ranged GET */
	uint64_t cache_mem;	/* bytes of chunk buffers */
	uint64_t cache_size;	/* bytes of the disk cache, if any */
	uint32_t timeout;	/* seconds without progress before EIO */
	uint32_t attempts;	/* tries per request */
	enum remote_index_fetch index_fetch; /* how the index build reads */
};

struct remote_http;
struct remote_s3;
struct disk_cache;

/*
 * The remote layer of one command (held by its settings, cli.h's struct
 * cli_config), made by remote_init() and freed by remote_release() after every remote
 * source closed.  It owns each piece below; the pieces are set up before
 * any thread but their own runs, and are thread-safe as their headers
 * say.  Nothing of it is process-wide: a process may hold several.
 */
struct remote {
	struct remote_config cfg; /* the options, resolved */
	struct remote_counters counters; /* bumped by every piece */
	struct remote_http *http; /* the transfer engine (remote_http.h) */
	struct remote_s3 *s3;	/* S3 keys and listings (remote_s3.h) */
	struct disk_cache *disk; /* chunks in cache_dir, NULL: none
				 * (disk_cache.h) */
	struct chunk_cache *chunks; /* remote objects' chunks in memory */
	bool used;		/* a remote shard was opened */
	atomic_bool unvalidated; /* one had no validator (said once) */
};

/* Bytes a signer may keep of a body's digest: a hex SHA-256 and its NUL. */
#define REMOTE_BODY_DIGEST_MAX 65

/* A request to sign: what remote_http.c sends, as the signer sees it. */
struct remote_sign_request {
	const char *method;	/* "GET" or "PUT" */
	const char *host;	/* host[:port], as sent in Host: */
	const char *path;	/* the object's decoded path (sign_path) */
	const char *query;	/* what follows '?', or NULL */
	const void *body;	/* a PUT's body, or NULL (no body) */
	size_t body_len;	/* bytes of body */
	char *body_digest;	/* REMOTE_BODY_DIGEST_MAX bytes, "" at the
				 * request's first attempt, where the signer
				 * may keep the body's digest for the others */
};

/*
 * What signs the requests for an object, for the kind of server it lives
 * on (remote_s3.c: SigV4 with the mount's keys).  The HTTP layer knows no
 * more of signing than this: it asks for the headers of each attempt and,
 * after a 403, whether the keys went stale.  Both may be called from any
 * thread at once.
 */
struct remote_signer {
	/* Call @add(@ctx, line) for each header ("Name: value") that signs
	 * @r, for an object of @remote, and set *@gen to the generation of
	 * the keys used.  0 or -errno (no header added). */
	int (*sign)(struct remote *remote, const struct remote_sign_request *r,
		    void (*add)(void *ctx, const char *line), void *ctx,
		    unsigned *gen);
	/* A request signed with keys of generation @gen was refused with
	 * HTTP 403 and the server's error @code ("" if none): true when the
	 * keys were stale and newer ones are there (worth one more try). */
	bool (*stale)(struct remote *remote, const char *code, unsigned gen);
};

/* One remote object (a shard), as opened. */
struct remote_object {
	struct remote *remote;	/* the layer it is read through */
	char *name;		/* as named: s3://bucket/key or the URL */
	char url[REMOTE_URL_MAX]; /* what is fetched */
	char host[REMOTE_HOST_MAX]; /* host[:port] of url, signed for S3 */
	char *sign_path;	/* decoded path to sign (S3), NULL: unsigned */
	const struct remote_signer *signer; /* signs its requests; set
				 * with sign_path, NULL without */
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


#endif
