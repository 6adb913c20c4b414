/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_http.h - requests to a remote object's server (remote_http.c):
 * ranged reads, the mount's probe, whole bodies, uploads; each retried,
 * validated and signed (the object's struct remote_signer) as
 * remote_http.c says.
 */
#ifndef SHARDFS_REMOTE_HTTP_H
#define SHARDFS_REMOTE_HTTP_H

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
 * The transfer engine (one curl multi handle and its event thread, see
 * remote_http.c).  The calls above may be made from any thread once
 * remote_http_init succeeded, and block until their transfer is done.
 * remote_http_init comes before chunk_cache_init, so that at a fork the
 * fetch threads stop before the engine does.  remote_http_release waits
 * for the transfers in flight.
 */
int remote_http_init(void);
void remote_http_release(void);

#endif
