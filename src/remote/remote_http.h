/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_http.h - requests to a remote object's server (remote_http.c):
 * ranged reads, the mount's probe, whole bodies, uploads; each retried,
 * validated and signed (the object's struct remote_signer) as
 * remote_http.c says.  Each goes through the engine of the object's
 * remote (o->remote->http), with its settings, and bumps its counters.
 */
#ifndef SHARDFS_REMOTE_HTTP_H
#define SHARDFS_REMOTE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "remote_object.h"
#include "shardfs/chunk_cache.h"

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
 * PUT the @len bytes at @body to @o's url (shardfs-index --publish),
 * signed by @o's signer if it has one.  0 or -errno (-EACCES for a 403)
 * with a message.
 */
int remote_http_put(struct remote_object *o, const void *body, size_t len,
		    char *msg, size_t msg_len);

/*
 * GET the whole body of @o's url plus "?@query" into a malloc'ed
 * NUL-terminated *@body of *@len (at most @max) bytes; for listings and
 * published indexes.  0 or -errno (-ENOENT for a 404) with a message.
 */
int remote_http_get_body(struct remote_object *o, const char *query,
			 size_t max, char **body, size_t *len, char *msg,
			 size_t msg_len);

/*
 * The transfer engine (one curl multi handle, driven by the threads
 * waiting for its transfers in turn, see remote_http.c), one per struct
 * remote (its http), which the calls above reach through the object's
 * remote.  Those calls may be made from any thread once remote_http_init
 * succeeded, and block until their transfer is done.
 * remote_http_release waits for the transfers in flight; NULL: nothing.
 * 0 or -errno (*@engp NULL).
 */
int remote_http_init(struct remote_http **engp);
void remote_http_release(struct remote_http *eng);

/*
 * Before a fork(2) whose child runs on: wait for the transfers in flight
 * and hold the engine's lock across the fork (the calling thread must
 * make no request until remote_http_fork_done).  After it, in the
 * process that goes on (@child: the new one; else the same, whether it
 * forked or not): release the lock.
 */
void remote_http_fork_prepare(struct remote_http *eng);
void remote_http_fork_done(struct remote_http *eng, bool child);

#endif
