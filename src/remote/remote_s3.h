/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_s3.h - S3 (remote_s3.c): where an object is, the credentials
 * and their signer, and what a prefix holds.  Resolved once at mount
 * (remote_s3_init, into a struct remote: its cfg and its s3, which holds
 * the keys and what listings said), then callable from any thread.
 */
#ifndef SHARDFS_REMOTE_S3_H
#define SHARDFS_REMOTE_S3_H

#include <stdbool.h>
#include <stddef.h>

#include "remote_object.h"

struct remote_options;

/* Fill @o's url, host and sign_path for s3://bucket/key, as o->remote
 * (set) addresses and signs it.  0 or -errno. */
int remote_s3_object(struct remote_object *o, const char *bucket,
		     const char *key, char *msg, size_t msg_len);

/* Split "s3://bucket/key" into @bucket and @key (malloc'ed; both NULL
 * on failure). */
int remote_s3_split(const char *name, char **bucket, char **key, char *msg,
		    size_t msg_len);

/* Resolve region, endpoint, addressing and credentials into
 * @remote->cfg, and make @remote->s3 (set even on failure: released by
 * remote_s3_release).  Before any thread uses @remote.  0 or -errno. */
int remote_s3_init(struct remote *remote, const struct remote_options *ro);

/* Forget the credentials, zeroing the secret, and what listings said;
 * free @s3 (remote_release).  NULL: nothing. */
void remote_s3_release(struct remote_s3 *s3);

/*
 * What a listing said of @o->name (size, ETag, Last-Modified), listing
 * its prefix first (once per prefix, bounded) if no listing covered it:
 * one LIST per prefix instead of one probe per shard, remembered in
 * o->remote's s3.  0 or -ENOENT.
 */
int remote_s3_lookup(struct remote_object *o);

/*
 * After s3://bucket/@name (no '/' at its end) was not found: when shards
 * lie under @name + "/", append to @msg that @name is a prefix and the
 * argument that mounts them.  Lists one page; errors leave @msg as it is.
 */
void remote_s3_prefix_hint(struct remote *remote, const char *name, char *msg,
			   size_t msg_len);

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
void remote_s3_keys(struct remote_s3 *s3, struct remote_keys *k);

/*
 * A request signed with generation @gen was refused as if its keys were
 * stale (403 ExpiredToken, InvalidAccessKeyId, SignatureDoesNotMatch ...):
 * re-read the credentials file now, whatever its mtime says.  True when
 * the current set is newer than @gen (the request is worth one retry).
 */
bool remote_s3_keys_refresh(struct remote_s3 *s3, unsigned gen);

/* List every *.tar under s3://bucket/prefix, sorted, calling @add. */
int remote_s3_list(struct remote *remote, const char *bucket, const char *prefix,
		   int (*add)(void *arg, const char *name, size_t len), void *arg,
		   char *msg, size_t msg_len);

#endif
