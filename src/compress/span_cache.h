/* SPDX-License-Identifier: Apache-2.0 */
/*
 * span_cache.h - decoded spans of compressed shards kept on local disk
 * (-o cache_dir=DIR), internal to the core.
 *
 * A random read of a compressed shard decodes its whole span up to the
 * bytes asked for; a shuffled epoch reads every member of a span in a
 * different order, so without a cache each span is decoded once per
 * member in it (a hundred times for 36 KB JPEGs in 3.6 MiB spans).  With
 * the cache, the first read of a span decodes all of it into an unnamed
 * file in DIR (one per shard, gone with the mount), and later reads of it
 * are a pread.  A single-frame zstd shard is one span: its first read
 * decodes it all, later reads are served from the file.
 *
 * The cache holds at most -o cache_size bytes; the spans cached longest
 * ago are dropped first (their blocks punched out of the file).  A span's
 * state is one atomic word (present bit and a generation): a read checks
 * it before and after its pread, so a span dropped meanwhile is decoded
 * again rather than served as a hole.  Hits take no lock; filling and
 * dropping take the cache's mutex once per span (after decoding it).
 *
 * Thread-safety: the span_file functions may be called from any number
 * of threads; span_cache_init() and _release() by one, before the first
 * span file is opened and after the last is closed.
 */
#ifndef SHARDFS_SPAN_CACHE_H
#define SHARDFS_SPAN_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct span_entry;
struct span_file;

/*
 * A decoded-span cache: its directory, its budget and the spans cached.
 * One per mount (the command's configuration holds it, cli.h); the
 * shards' span files point back at it, so it outlives them.  Every field
 * but dir and max is guarded by lock.
 */
struct span_cache {
	char *dir;			/* -o cache_dir */
	uint64_t max;			/* bytes at most */
	uint64_t used;			/* bytes cached */
	pthread_mutex_t lock;		/* taken once per span filled or
					 * dropped, never on a hit */
	struct span_entry *ring;	/* SPAN_CACHE_RING spans, oldest at
					 * head (span_cache.c) */
	uint32_t head, count;		/* of the ring */
};

/*
 * Set @c up to keep decoded spans in @dir (made if missing), at most
 * @max_bytes of them (-o cache_size, remote_cache_size()), and never more
 * than half the free space of @dir now.  Called before shards are opened.
 * 0, or -errno with @msg and nothing to release.
 */
int span_cache_init(struct span_cache *c, const char *dir, uint64_t max_bytes,
		    char *msg, size_t msg_len);

/* Free @c; every span file of it was closed before. */
void span_cache_release(struct span_cache *c);

/* Is there a cache (@c not NULL)?  Then may a span of @len bytes go
 * into it? */
bool span_cache_fits(const struct span_cache *c, uint64_t len);

/* The file in @c (NULL: none) of one shard of @size bytes and @nr spans,
 * or NULL. */
struct span_file *span_file_open(struct span_cache *c, uint64_t size,
				 uint64_t nr);
void span_file_close(struct span_file *f);

/*
 * Copy [@off, @off + @len) of span @j, if cached, into @buf: @len, or
 * -ENOENT when the span is not (or no longer) cached, or -errno.
 */
ssize_t span_file_read(struct span_file *f, uint64_t j, void *buf, size_t len,
		       uint64_t off);

/* Store decoded bytes of a span being filled.  0 or -errno. */
int span_file_write(struct span_file *f, const void *buf, size_t len, uint64_t off);

/* Span @j, [@off, @off + @len), is whole in the file: serve it. */
void span_file_publish(struct span_file *f, uint64_t j, uint64_t off,
		       uint64_t len);

#endif
