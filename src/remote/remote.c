/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote.c - the remote shard options, their resolution into a struct
 * remote (the handle that owns every piece of the remote layer, and the
 * order in which they are set up, stopped at a fork and freed), SHARDS
 * items that are URLs, and the remote counters.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk_cache.h"
#include "remote_http.h"
#include "remote_s3.h"
#include "shardfs/log.h"
#include "shardfs/remote.h"
#include "shardfs/source.h"
#include "shardfs/util.h"

void remote_options_free(struct remote_options *ro)
{
	free(ro->endpoint);
	free(ro->region);
	free(ro->addressing);
	free(ro->profile);
	free(ro->credentials);
	free(ro->cacert);
	free(ro->chunk_size);
	free(ro->cache_mem);
	free(ro->timeout);
	free(ro->attempts);
	free(ro->cache_dir);
	free(ro->cache_size);
	free(ro->index_fetch);
	*ro = (struct remote_options){ 0 };
}

/* A whole number in [@min, @max] from option @what, default @def. */
static int option_number(const char *what, const char *s, uint64_t min,
			 uint64_t max, uint64_t def, bool size, uint64_t *out)
{
	char *end;

	*out = def;
	if (!s)
		return 0;
	if (size ? parse_size(s, out) :
	    (*out = strtoull(s, &end, 10), !*s || *s == '-' || *end))
		return log_error("bad %s '%s'", what, s), -EINVAL;
	if (*out < min || *out > max)
		return log_error("%s=%s: between %" PRIu64 " and %" PRIu64, what, s,
				 min, max), -EINVAL;
	return 0;
}

int remote_cache_size(const struct remote_options *ro, uint64_t *out)
{
	*out = REMOTE_CACHE_SIZE_DEFAULT;
	if (ro->cache_size &&
	    (!ro->cache_dir || parse_size(ro->cache_size, out) || !*out))
		return log_error("bad cache_size '%s' (a size like 20G, with cache_dir)",
				 ro->cache_size), -EINVAL;
	return 0;
}

/* The chunk size when -o chunk_size is not given (remote_options.h). */
static uint64_t default_chunk_size(uint64_t cache_mem)
{
	uint64_t cs = cache_mem / REMOTE_CHUNK_DEFAULT_SLOTS / REMOTE_CHUNK_MIN * REMOTE_CHUNK_MIN;

	return cs > REMOTE_CHUNK_DEFAULT ? REMOTE_CHUNK_DEFAULT :
	       cs < REMOTE_CHUNK_MIN ? REMOTE_CHUNK_MIN : cs;
}

static int parse_numbers(struct remote_config *cfg, const struct remote_options *ro)
{
	uint64_t timeout, attempts;

	if (option_number("cache_mem", ro->cache_mem, 0, UINT64_MAX,
			  REMOTE_CACHE_MEM_DEFAULT, true, &cfg->cache_mem) ||
	    option_number("chunk_size", ro->chunk_size, REMOTE_CHUNK_MIN,
			  REMOTE_CHUNK_MAX, default_chunk_size(cfg->cache_mem), true,
			  &cfg->chunk_size) ||
	    option_number("remote_timeout", ro->timeout, 1, 86400,
			  REMOTE_TIMEOUT_DEFAULT, false, &timeout) ||
	    option_number("remote_attempts", ro->attempts, 1, 100,
			  REMOTE_ATTEMPTS_DEFAULT, false, &attempts) ||
	    remote_cache_size(ro, &cfg->cache_size))
		return -EINVAL;
	cfg->timeout = (uint32_t)timeout;
	cfg->attempts = (uint32_t)attempts;
	if (cfg->cache_mem < CHUNK_CACHE_MIN_CHUNKS * cfg->chunk_size)
		log_warn("cache_mem=%" PRIu64 " is below %u chunks of %" PRIu64 " bytes; "
			 "using %u chunks", cfg->cache_mem, CHUNK_CACHE_MIN_CHUNKS,
			 cfg->chunk_size, CHUNK_CACHE_MIN_CHUNKS);
	return 0;
}

/* -o index_fetch=stream|ranged (see source_remote.c). */
static int parse_index_fetch(struct remote_config *cfg, const char *s)
{
	if (!s || !strcmp(s, "stream"))
		cfg->index_fetch = REMOTE_INDEX_STREAM;
	else if (!strcmp(s, "ranged"))
		cfg->index_fetch = REMOTE_INDEX_RANGED;
	else
		return log_error("bad index_fetch '%s' (stream or ranged)", s), -EINVAL;
	return 0;
}

/* The chunk cache's callbacks: its objects are remote objects, fetched
 * with ranged GETs and kept in the disk cache. */
static ssize_t fetch_chunks(void *obj, const struct fetch_piece *piece,
			    unsigned n, uint64_t off)
{
	return remote_http_read(obj, piece, n, off);
}

static int load_chunk(void *obj, uint64_t off, void *buf, size_t len)
{
	struct remote_object *o = obj;

	return disk_cache_load(o->remote->disk, o, off, buf, len);
}

static void store_chunk(void *obj, uint64_t off, const void *buf, size_t len)
{
	struct remote_object *o = obj;

	disk_cache_store(o->remote->disk, o, off, buf, len);
}

/* The pieces of @r, in the order they are set up: the engine before
 * the chunk cache whose fetch threads use it. */
static int pieces_init(struct remote *r, const struct remote_options *ro)
{
	const struct remote_config *cfg = &r->cfg;

	return remote_http_init(&r->http) ?:
	       chunk_cache_init(&r->chunks, &(struct chunk_cache_config){
			.chunk_size = cfg->chunk_size, .mem = cfg->cache_mem,
			.fetch_threads = REMOTE_FETCH_THREADS,
			.prefetch_threads = REMOTE_PREFETCH_THREADS,
			.fetch = fetch_chunks, .load = load_chunk, .store = store_chunk,
			.counters = &r->counters.cache }) ?:
	       disk_cache_init(&r->disk, ro->cache_dir, cfg->cache_size, cfg->chunk_size,
			       &r->counters);
}

int remote_init(struct remote **remotep, const struct remote_options *ro)
{
	struct remote *r = calloc(1, sizeof(*r));
	int rc;

	*remotep = NULL;
	if (!r)
		return -ENOMEM;
	rc = parse_numbers(&r->cfg, ro) ?: parse_index_fetch(&r->cfg, ro->index_fetch) ?:
	     remote_s3_init(r, ro);
	if (!rc && ro->cacert && !(r->cfg.cacert = strdup(ro->cacert)))
		rc = -ENOMEM;
	rc = rc ?: pieces_init(r, ro);
	if (rc) {
		remote_release(r);
		return rc;
	}
	*remotep = r;
	return 0;
}

void remote_release(struct remote *r)
{
	if (!r)
		return;
	/* the fetch threads first: they use the disk cache and the engine */
	chunk_cache_release(r->chunks);
	disk_cache_release(r->disk);
	remote_http_release(r->http);
	remote_s3_release(r->s3);
	free(r->cfg.endpoint);
	free(r->cfg.region);
	free(r->cfg.cacert);
	free(r);
}

void remote_fork_prepare(struct remote *r)
{
	if (!r)
		return;
	/* the fetch threads make requests: they stop before the engine
	 * waits for the last transfers */
	chunk_cache_fork_prepare(r->chunks);
	remote_http_fork_prepare(r->http);
}

void remote_fork_done(struct remote *r, bool child)
{
	if (!r)
		return;
	/* the engine takes requests again before fetch threads make them */
	remote_http_fork_done(r->http, child);
	chunk_cache_fork_done(r->chunks);
}

/* For remote @name when no remote layer was set up: -EINVAL, said. */
static int not_configured(const char *name, char *msg, size_t msg_len)
{
	return log_format(msg, msg_len, -EINVAL, "%s: remote shards are not "
			  "configured", name);
}

int remote_expand(struct remote *remote, const char *item,
		  int (*add)(void *arg, const char *name, size_t len), void *arg,
		  char *msg, size_t msg_len)
{
	size_t n = strlen(item);
	char *bucket, *prefix;
	int rc;

	if (strpbrk(item, "*?["))
		return log_format(msg, msg_len, -EINVAL, "%s: wildcards are not "
				  "expanded in URLs; use a brace range or, for s3://, "
				  "a prefix ending in '/'", item);
	if (strncmp(item, "s3://", 5) || item[n - 1] != '/') {
		if (item[n - 1] == '/')
			return log_format(msg, msg_len, -EINVAL, "%s: a web server cannot "
					  "be listed; name the shards (brace range)", item);
		return add(arg, item, n);
	}
	if (!remote)
		return not_configured(item, msg, msg_len);
	rc = remote_s3_split(item, &bucket, &prefix, msg, msg_len);
	if (rc)
		return rc;
	rc = remote_s3_list(remote, bucket, prefix, add, arg, msg, msg_len);
	free(bucket);
	free(prefix);
	return rc;
}

int remote_locate(struct remote *remote, struct remote_object *o, const char *url,
		  char *msg, size_t msg_len)
{
	char *bucket, *key;
	int rc;

	o->remote = remote;
	if (strncmp(url, "s3://", 5)) {
		if (strlen(url) >= sizeof(o->url))
			return log_format(msg, msg_len, -ENAMETOOLONG, "%s: URL too long", url);
		strcpy(o->url, url);
		return 0;
	}
	rc = remote_s3_split(url, &bucket, &key, msg, msg_len);
	if (rc)
		return rc;
	rc = *key ? remote_s3_object(o, bucket, key, msg, msg_len) :
	     log_format(msg, msg_len, -EINVAL, "%s: names a bucket, not an object", url);
	free(bucket);
	free(key);
	return rc;
}

/* @len bytes of @body as the local file @path, created or replaced
 * (file_replace(): nothing at @path is written through).  0 or -errno
 * with a message. */
static int write_local(const char *path, const char *body, size_t len, char *msg,
		       size_t msg_len)
{
	int removed, rc = file_replace(path, body, len, 0644, &removed);

	if (removed)
		log_info("%s.tmp.*: removed %d temporary file(s) left by fetches that "
			 "did not finish", path, removed);
	return rc ? log_format(msg, msg_len, rc, "%s: %s", path, strerror(-rc)) : 0;
}

int remote_fetch_file(struct remote *remote, const char *url, const char *path,
		      char *msg, size_t msg_len)
{
	struct remote_object o = { .name = (char *)url };
	char *body = NULL;
	size_t len = 0;
	int rc = remote ? remote_locate(remote, &o, url, msg, msg_len) :
		 not_configured(url, msg, msg_len);

	rc = rc ?: remote_http_get_body(&o, NULL, REMOTE_FILE_MAX, &body, &len, msg,
					msg_len);
	free(o.sign_path);
	rc = rc ?: write_local(path, body, len, msg, msg_len);
	free(body);
	return rc;
}

/* The whole regular file @path into a malloc'ed *@body of *@len bytes. */
static int read_local(const char *path, char **body, size_t *len, char *msg,
		      size_t msg_len)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
	struct stat st;
	ssize_t n = 0;

	if (fd < 0)
		return log_format(msg, msg_len, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > REMOTE_FILE_MAX)
		rc = log_format(msg, msg_len, -EINVAL, "%s: not a regular file of at "
				"most %llu bytes", path, (unsigned long long)REMOTE_FILE_MAX);
	else if (!(*body = malloc(st.st_size ? st.st_size : 1)))
		rc = -ENOMEM;
	else if ((n = pread(fd, *body, st.st_size, 0)) != st.st_size) {
		rc = log_format(msg, msg_len, -EIO, "%s: short read", path);
		free(*body);
		*body = NULL;	/* the caller frees it */
	}
	*len = (size_t)n;
	close(fd);
	return rc;
}

int remote_put_file(struct remote *remote, const char *path, const char *url,
		    char *msg, size_t msg_len)
{
	struct remote_object o = { .name = (char *)url };
	char *body = NULL;
	size_t len = 0;
	int rc;

	if (strncmp(url, "s3://", 5))
		return log_format(msg, msg_len, -EINVAL, "%s: only s3:// objects are "
				  "written; copy %s there yourself", url, path);
	if (!remote)
		return not_configured(url, msg, msg_len);
	rc = read_local(path, &body, &len, msg, msg_len);
	rc = rc ?: remote_locate(remote, &o, url, msg, msg_len);
	rc = rc ?: remote_http_put(&o, body, len, msg, msg_len);
	free(o.sign_path);
	free(body);
	return rc;
}

static unsigned long long counter(atomic_ullong *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

size_t remote_stats_format(struct remote *remote, char *buf, size_t cap,
			   bool metrics)
{
	struct remote_counters none = { 0 },
			       *k = remote ? &remote->counters : &none;
	unsigned long long req = counter(&k->requests), lat = counter(&k->latency_us);
	int n;

	if ((!remote || !remote->used) && !metrics)
		return 0;	/* metrics always: series should not come and go */
	if (metrics)
		n = snprintf(buf, cap,
			"# TYPE shardfs_remote_requests_total counter\n"
			"shardfs_remote_requests_total %llu\n"
			"# TYPE shardfs_remote_bytes_total counter\n"
			"shardfs_remote_bytes_total %llu\n"
			"# TYPE shardfs_remote_fetched_bytes_total counter\n"
			"shardfs_remote_fetched_bytes_total{access=\"sequential\"} %llu\n"
			"shardfs_remote_fetched_bytes_total{access=\"random\"} %llu\n"
			"# TYPE shardfs_remote_random_fetches_total counter\n"
			"shardfs_remote_random_fetches_total %llu\n"
			"# TYPE shardfs_remote_retries_total counter\n"
			"shardfs_remote_retries_total %llu\n"
			"# TYPE shardfs_remote_errors_total counter\n"
			"shardfs_remote_errors_total %llu\n"
			"# TYPE shardfs_remote_cache_hits_total counter\n"
			"shardfs_remote_cache_hits_total %llu\n"
			"# TYPE shardfs_remote_cache_misses_total counter\n"
			"shardfs_remote_cache_misses_total %llu\n"
			"# TYPE shardfs_remote_latency_seconds_total counter\n"
			"shardfs_remote_latency_seconds_total %.6f\n"
			"# TYPE shardfs_remote_disk_hits_total counter\n"
			"shardfs_remote_disk_hits_total %llu\n"
			"# TYPE shardfs_remote_disk_store_errors_total counter\n"
			"shardfs_remote_disk_store_errors_total %llu\n",
			req, counter(&k->bytes), counter(&k->cache.stream_bytes),
			counter(&k->cache.random_bytes), counter(&k->cache.random_fetches),
			counter(&k->retries), counter(&k->errors),
			counter(&k->cache.hits), counter(&k->cache.misses), lat / 1e6,
			counter(&k->disk_hits), counter(&k->disk_store_errors));
	else
		n = snprintf(buf, cap,
			"  \"remote\": {\"requests\": %llu, \"bytes\": %llu, "
			"\"fetched\": {\"sequential_bytes\": %llu, \"random_bytes\": %llu, "
			"\"random_fetches\": %llu, \"coalesced\": %llu}, "
			"\"retries\": %llu, \"errors\": %llu, \"replaced_objects\": %llu, "
			"\"cache_hits\": %llu, \"cache_misses\": %llu, \"prefetches\": %llu, "
			"\"latency_mean_ms\": %.3f, \"latency_max_ms\": %.3f, "
			"\"disk_hits\": %llu, \"disk_misses\": %llu, \"disk_corrupt\": %llu, "
			"\"disk_store_errors\": %llu, "
			"\"chunk_size\": %llu, \"cache_mem\": %llu},\n",
			req, counter(&k->bytes), counter(&k->cache.stream_bytes),
			counter(&k->cache.random_bytes), counter(&k->cache.random_fetches),
			counter(&k->cache.coalesced), counter(&k->retries), counter(&k->errors),
			counter(&k->replaced), counter(&k->cache.hits),
			counter(&k->cache.misses), counter(&k->cache.prefetches),
			req ? lat / 1e3 / req : 0.0, counter(&k->latency_max_us) / 1e3,
			counter(&k->disk_hits), counter(&k->disk_misses),
			counter(&k->disk_corrupt), counter(&k->disk_store_errors),
			(unsigned long long)remote->cfg.chunk_size,
			(unsigned long long)remote->cfg.cache_mem);
	return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
