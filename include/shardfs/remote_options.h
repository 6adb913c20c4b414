/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_options.h - the -o options of remote shard sets, as cli.c
 * parses them, their defaults and their help text.  A header of its own
 * so that every piece of the remote reader (remote_http.c, remote_s3.c,
 * ...) can see them without depending on remote.c, which uses those
 * pieces.
 */
#ifndef SHARDFS_REMOTE_OPTIONS_H
#define SHARDFS_REMOTE_OPTIONS_H

/* Default bytes per ranged GET: 8 MiB, or less when cache_mem is small. */
#define REMOTE_CHUNK_DEFAULT (8u << 20)
/* Smallest and largest chunk accepted. */
#define REMOTE_CHUNK_MIN (64u << 10)
#define REMOTE_CHUNK_MAX (256u << 20)
/*
 * Without -o chunk_size, the cache holds at least this many chunks: the
 * chunk size is cache_mem / 32 (down to a multiple of REMOTE_CHUNK_MIN)
 * when that is below REMOTE_CHUNK_DEFAULT, as it is from cache_mem=128M
 * down.  ShardAwareSampler's window reads 4 shards as 4 streams; in the
 * 4 slots of 8 MiB of cache_mem=32M their chunks were taken over before
 * they were read out: 1.17-1.28x the bytes used with threads and 1.75x
 * in the DataLoader, against 1.04-1.06x and 1.17-1.34x in 32 slots of
 * 1 MiB; 16 slots (2 MiB) gave 1.08-1.13x and 1.34-1.48x; at 128M, 32
 * slots of 4 MiB 1.07x against 16 of 8 MiB 1.19x (docs/remote.md).
 */
#define REMOTE_CHUNK_DEFAULT_SLOTS 32
/* Default memory for cached chunks: 256 MiB. */
#define REMOTE_CACHE_MEM_DEFAULT (256ull << 20)
/* Default seconds without progress before a request is given up. */
#define REMOTE_TIMEOUT_DEFAULT 30
/* Default attempts per request (the first plus retries). */
#define REMOTE_ATTEMPTS_DEFAULT 6
/* Default -o cache_size: 10 GiB of chunks, and as much of decoded spans. */
#define REMOTE_CACHE_SIZE_DEFAULT (10ull << 30)
/* Threads fetching chunks, and how many of them may fetch ahead of
 * readers at once (the others stay free for reads that miss). */
#define REMOTE_FETCH_THREADS 8
#define REMOTE_PREFETCH_THREADS 4

/* The -o options of remote shard sets (strings malloc'ed). */
struct remote_options {
	char *endpoint;		/* -o endpoint=URL (else AWS_ENDPOINT_URL) */
	char *region;		/* -o region= (else AWS_REGION, ...) */
	char *addressing;	/* -o s3_addressing=path|virtual */
	char *profile;		/* -o aws_profile= (else AWS_PROFILE) */
	char *credentials;	/* -o credentials=FILE (an AWS ini file) */
	int no_sign_request;	/* -o no_sign_request: anonymous S3 */
	char *cacert;		/* -o cacert=FILE: CA bundle for TLS */
	char *chunk_size;	/* -o chunk_size=SIZE */
	char *cache_mem;	/* -o cache_mem=SIZE */
	char *timeout;		/* -o remote_timeout=SECONDS */
	char *attempts;		/* -o remote_attempts=N */
	char *cache_dir;	/* -o cache_dir=DIR: chunks on local disk */
	char *cache_size;	/* -o cache_size=SIZE of cache_dir */
	char *index_fetch;	/* -o index_fetch=stream|ranged */
};

/* The help text of those options. */
#define REMOTE_OPTIONS_HELP \
	"remote shards (http://, https://, s3://):\n" \
	"    -o endpoint=URL        S3 endpoint (default AWS_ENDPOINT_URL, else\n" \
	"                           https://s3.REGION.amazonaws.com)\n" \
	"    -o region=NAME         S3 region (default AWS_REGION,\n" \
	"                           AWS_DEFAULT_REGION, the profile, us-east-1)\n" \
	"    -o s3_addressing=MODE  path or virtual (default: virtual on AWS,\n" \
	"                           path with an endpoint)\n" \
	"    -o aws_profile=NAME    profile of ~/.aws/credentials and config\n" \
	"    -o credentials=FILE    an AWS credentials file to use instead\n" \
	"    -o no_sign_request     anonymous requests (public buckets)\n" \
	"    -o cacert=FILE         CA certificates for TLS verification\n" \
	"    -o chunk_size=SIZE     bytes per ranged GET (default 8M, cache_mem/32 if less)\n" \
	"    -o cache_mem=SIZE      memory for fetched chunks (default 256M)\n" \
	"    -o remote_timeout=SECS give a request up after SECS without\n" \
	"                           progress: EIO (default 30)\n" \
	"    -o remote_attempts=N   tries per request (default 6)\n" \
	"    -o cache_dir=DIR       keep fetched chunks in DIR, checksummed,\n" \
	"                           shared by later mounts (default: none)\n" \
	"    -o cache_size=SIZE     bytes of DIR to use, LRU (default 10G)\n" \
	"    -o index_fetch=HOW     index build: stream (every chunk, several\n" \
	"                           GETs in flight) or ranged (one small GET\n" \
	"                           per member header) (default stream)\n"

#endif
