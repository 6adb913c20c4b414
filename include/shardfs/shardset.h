/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardset.h - the ordered set of shard files behind a mount.
 *
 * A SHARDS argument names the set in one string, because fstab and the
 * mount helper pass it through unexpanded:
 *
 *   /data/shard-{000000..000099}.tar   brace range (zero padding kept)
 *   /data/{train,val}.tar              brace list
 *   /data/train-*.tar                  glob (sorted)
 *   /data/shards/                      every *.tar in a directory (sorted)
 *   a.tar,b.tar,/data/more/            comma-separated list of the above
 *
 * The order of the expansion is the shard order: later shards win when a
 * path appears twice.  Shards stay open for the life of the mount so that
 * no request after the mount opens a file on the shard storage.
 *
 * Thread-safety: expansion and opening happen before the mount, single
 * threaded; afterwards the set is read-only and shared by all threads,
 * which read shards through their sources (source.h).  What the read
 * path learns about a shard while mounted is kept by fs.c, not here.
 */
#ifndef SHARDFS_SHARDSET_H
#define SHARDFS_SHARDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "shardfs/source.h"

/* Most shards a SHARDS argument may expand to. */
#define SHARD_SET_MAX_SHARDS (1u << 20)
/* Shards that cannot be opened named one by one; the rest are counted. */
#define SHARD_SET_ERRORS_LISTED 5
/* Longest SHARDS argument accepted. */
#define SHARD_SET_SPEC_MAX (64u * 1024)

struct shard {
	char *path;		/* expanded from SHARDS; the source's canonical
				 * name (absolute path) once open */
	struct shard_source *src; /* open for the life of the mount; NULL
				 * before shard_set_open() and for bad shards */
	uint64_t size;		/* bytes of its tar stream (src->size) */
	uint64_t stored_size;	/* bytes of the stored object at open (the
				 * same for an uncompressed shard) */
	struct timespec mtime;	/* of the stored object, at open */
	struct timespec ctime;	/* of the stored object, at open */
	uint64_t members;	/* members found by the index build */
	uint64_t digest;	/* of its headers (and labels): see
				 * shard_scan.h; 0 until scanned */
	uint64_t fingerprint;	/* of its first bytes (index_file.h), when
				 * fingerprinted is set */
	bool fingerprinted;	/* fingerprint is known (from an index) */
	bool bad;		/* failed to scan; skipped (skip_bad_shards) */
};

struct shard_set {
	struct shard *shards;	/* in shard order */
	uint32_t nr;		/* entries in shards */
	size_t cap;		/* entries allocated in shards */
	bool skip_bad;		/* set before shard_set_open(): a shard that
				 * cannot be opened (or later scanned) is
				 * marked bad and left out, not an error */
	struct span_cache *spans; /* set before shard_set_open(): the decoded-
				 * span cache its compressed shards are read
				 * through (-o cache_dir), or NULL; not owned,
				 * outlives the set */
	struct shard_decoders *decoders; /* what its compressed shards decode
				 * with (source.h): made by shard_set_open(),
				 * freed by shard_set_release() */
	struct remote *remote;	/* what its remote shards are listed and
				 * read through (remote.h), or NULL: none
				 * may be named; given to shard_set_expand(),
				 * not owned, outlives the set */
};

/*
 * Make @set the shard paths @spec expands to (not yet opened), whose
 * remote ones are listed and later opened through @remote (NULL: none
 * may be named).  On error returns -errno and writes a message for the
 * user into @msg: no match for a pattern, a directory without *.tar
 * files, a malformed brace, too many shards, an s3:// prefix that
 * cannot be listed.
 */
int shard_set_expand(struct shard_set *set, const char *spec,
		     struct remote *remote, char *msg, size_t msg_len);

/*
 * Open every shard's source (source.h), with the set's decoders (made
 * first, over set->spans), and record its size and times.  Raises
 * RLIMIT_NOFILE as far as allowed first.  Returns 0 or -errno with a
 * message naming the shard that failed (when several did, the first
 * SHARD_SET_ERRORS_LISTED are logged and the message counts them); with
 * set->skip_bad, such shards are logged, marked bad and skipped instead.
 * An empty shard is warned about; a file listed twice is refused.
 */
int shard_set_open(struct shard_set *set, char *msg, size_t msg_len);

/* Close the sources and free the set; the set is empty afterwards. */
void shard_set_release(struct shard_set *set);

#endif
