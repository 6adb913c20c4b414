/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote.h - shards on web servers and object stores.
 *
 * A shard named by a URL is read with ranged GETs:
 *
 *   https://host/path/shard-000000.tar   one object on a web server
 *   http://host/path/shard.tar           (plain HTTP, for trusted networks)
 *   s3://bucket/prefix/shard-000000.tar  one S3 object (SigV4-signed)
 *   s3://bucket/prefix/                  every *.tar under the prefix
 *                                        (ListObjectsV2, sorted)
 *
 * Opening a remote shard costs one ranged GET of its first byte: it
 * proves the server honours Range (one answering 200 is refused at
 * mount, with a message that says so) and records the size, ETag and
 * Last-Modified.  Every later GET carries If-Match with that ETag, so an
 * object replaced on the server fails with EIO and a log line naming it,
 * never mixed bytes.
 *
 * Data is fetched in aligned chunks (chunk_size) into a bounded memory
 * cache (cache_mem) of at least CHUNK_CACHE_MIN_CHUNKS chunks; see
 * shardfs/chunk_cache.h.
 *
 * Everything the remote layer keeps is in one handle, struct remote
 * (opaque here; src/remote/remote_object.h): the resolved settings, the
 * counters, the HTTP transfer engine, the S3 keys and listings, the disk
 * and chunk caches.  The command's settings own it (cli.h: remote_init()
 * in cli_config_init(), before any shard is opened, single-threaded;
 * remote_release() after every remote source was closed); the shard set
 * and each remote source reach it through a pointer.  Every setting has a
 * -o form, because mount(8) and fstab pass no environment; the
 * environment and the AWS shared files fill in what -o leaves unset.
 * Secrets are kept in memory only: never logged, never shown in
 * /.shardfs/, never passed to a child.
 *
 * fork(2): the threads of a remote (its fetch threads) do not survive
 * one, nor may a transfer be in flight across it.  Whoever forks a
 * process that goes on serving (the daemon's fuse_daemonize()) calls
 * remote_fork_prepare() before and remote_fork_done() after it; no
 * pthread_atfork handler is involved, and a child that only execs
 * (fusermount3) needs neither.
 *
 * Thread-safety: after remote_init(), the functions below but
 * remote_release() and the fork calls may be called from any thread.
 */
#ifndef SHARDFS_REMOTE_H
#define SHARDFS_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardfs/remote_options.h"

/* The remote layer of one command: opaque (remote_object.h). */
struct remote;

/* Free the option strings (cli.c parses them with fuse_opt). */
void remote_options_free(struct remote_options *ro);

/*
 * -o cache_size of @ro, the one rule for both caches in cache_dir (the
 * fetched chunks, disk_cache.c, and the decoded spans of compressed
 * shards, span_cache.h, each within it): a size (parse_size) above 0,
 * given only with cache_dir; REMOTE_CACHE_SIZE_DEFAULT when not given.
 * Returns 0, or -EINVAL (logged).
 */
int remote_cache_size(const struct remote_options *ro, uint64_t *out);

/*
 * Make *@remotep: resolve the configuration (options, environment, AWS
 * files) and set up the HTTP engine, the chunk cache and the disk cache.
 * Errors are logged; returns 0 or -errno (*@remotep NULL).
 */
int remote_init(struct remote **remotep, const struct remote_options *ro);

/* Undo remote_init(); every remote source must be closed.  NULL: nothing. */
void remote_release(struct remote *remote);

/*
 * Before a fork(2) whose child goes on using @remote: wait for the
 * fetches running and stop the chunk cache's fetch threads (which make
 * requests), then wait for the HTTP engine's transfers.  The calling
 * thread then holds the engine until remote_fork_done(), which it calls
 * after the fork in the process that goes on (@child: the new one, else
 * the same, whether it forked or not): the engine first, then fetch
 * threads for what is queued.  NULL: nothing.
 */
void remote_fork_prepare(struct remote *remote);
void remote_fork_done(struct remote *remote, bool child);

/*
 * Expand a brace-free remote item: "s3://bucket/prefix/" lists every *.tar
 * under the prefix (sorted); any other URL is one shard.  Calls @add for
 * each name; returns 0 or -errno with a message in @msg (-EINVAL for a
 * prefix when @remote is NULL: not configured).
 */
int remote_expand(struct remote *remote, const char *item,
		  int (*add)(void *arg, const char *name, size_t len), void *arg,
		  char *msg, size_t msg_len);

struct remote_object;

/* Make @o an object of @remote and fill its url, host, sign_path and
 * signer for @url: itself, or the S3 object it names
 * (src/remote/remote_object.h).  0 or -errno with a message. */
int remote_locate(struct remote *remote, struct remote_object *o, const char *url,
		  char *msg, size_t msg_len);

/* Largest file remote_fetch_file() accepts (a published index). */
#define REMOTE_FILE_MAX (1ull << 30)

/*
 * GET the object @url (http(s):// or s3://) into the local file @path
 * (created or replaced).  0, or -ENOENT when the server has no such
 * object, or -errno, with a message in @msg.
 */
int remote_fetch_file(struct remote *remote, const char *url, const char *path,
		      char *msg, size_t msg_len);

/*
 * PUT the local regular file @path (at most REMOTE_FILE_MAX bytes, not a
 * symlink) as the object @url (s3:// only: signed as the mount signs its
 * GETs, with the same endpoint, region and credentials; web servers are
 * not written to).  0 or -errno with a message in @msg.
 */
int remote_put_file(struct remote *remote, const char *path, const char *url,
		    char *msg, size_t msg_len);

/*
 * Write the counters of @remote as a JSON member ("remote": {...};
 * nothing when no remote shard was opened) or, with @metrics, as
 * Prometheus text (always; zeros for a NULL @remote), into @buf (@cap
 * bytes).  Returns the length written.
 */
size_t remote_stats_format(struct remote *remote, char *buf, size_t cap,
			   bool metrics);

#endif
