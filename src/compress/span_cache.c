/* SPDX-License-Identifier: Apache-2.0 */
/*
 * span_cache.c - decoded spans of compressed shards on local disk (see
 * span_cache.h).
 *
 * A cache (one per mount, a handle passed in): the directory, the byte
 * budget, and a ring of the spans cached, oldest first, which the mutex
 * guards (taken once per span filled, never on a hit).  Each shard's
 * file is unnamed (O_TMPFILE): nothing is left behind, and two mounts
 * never share one.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "shardfs/log.h"
#include "span_cache.h"

/* Entries of the ring: spans cached at once, at most. */
#define SPAN_CACHE_RING (1u << 16)

struct span_file {
	struct span_cache *cache;	/* the cache it is in */
	int fd;				/* the unnamed file, -1 on failure */
	uint64_t nr;			/* spans */
	_Atomic uint32_t *state;	/* per span: present bit, generation */
};

/* A span in the cache, in the ring. */
struct span_entry {
	struct span_file *f;		/* NULL: its shard was closed */
	uint64_t j;			/* span */
	uint64_t off;			/* first byte */
	uint64_t len;			/* bytes */
	uint32_t state;			/* its state word when cached */
};

int span_cache_init(struct span_cache *c, const char *dir, uint64_t max_bytes,
		    char *msg, size_t msg_len)
{
	struct statvfs sv;
	int fd;

	/* made if missing, as the remote chunk cache sharing it does */
	if (mkdir(dir, 0700) && errno != EEXIST)
		return log_format(msg, msg_len, -errno, "cache_dir %s: %s", dir,
				  strerror(errno));
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0)
		return log_format(msg, msg_len, -errno, "cache_dir %s: cannot create "
				  "files there: %s", dir, strerror(errno));
	close(fd);
	assert(max_bytes > 0);
	if (!statvfs(dir, &sv) && (uint64_t)sv.f_bavail * sv.f_frsize / 2 < max_bytes)
		max_bytes = (uint64_t)sv.f_bavail * sv.f_frsize / 2;
	*c = (struct span_cache){ .max = max_bytes, .dir = strdup(dir),
				  .ring = calloc(SPAN_CACHE_RING, sizeof(*c->ring)) };
	if (!c->ring || !c->dir) {
		free(c->dir);
		free(c->ring);
		*c = (struct span_cache){ 0 };
		return log_format(msg, msg_len, -ENOMEM, "%s", strerror(ENOMEM));
	}
	pthread_mutex_init(&c->lock, NULL);
	return 0;
}

void span_cache_release(struct span_cache *c)
{
	if (!c->dir)
		return;		/* never set up: all zero */
	free(c->dir);
	free(c->ring);
	pthread_mutex_destroy(&c->lock);
	*c = (struct span_cache){ 0 };
}

bool span_cache_fits(const struct span_cache *c, uint64_t len)
{
	return c && len <= c->max / 4;
}

struct span_file *span_file_open(struct span_cache *c, uint64_t size,
				 uint64_t nr)
{
	struct span_file *f;

	if (!c)
		return NULL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->cache = c;
	f->nr = nr;
	f->state = calloc(nr ? nr : 1, sizeof(*f->state));
	f->fd = open(c->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (f->fd < 0 || !f->state || ftruncate(f->fd, (off_t)size)) {
		log_warn("cache_dir %s: %s; this shard is read without the cache",
			 c->dir, strerror(f->fd < 0 ? errno : ENOMEM));
		span_file_close(f);
		return NULL;
	}
	return f;
}

void span_file_close(struct span_file *f)
{
	struct span_cache *c;

	if (!f)
		return;
	c = f->cache;
	pthread_mutex_lock(&c->lock);
	for (uint32_t k = 0; k < c->count; k++) {
		struct span_entry *e = &c->ring[(c->head + k) % SPAN_CACHE_RING];

		if (e->f == f) {
			e->f = NULL;
			c->used -= e->len;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (f->fd >= 0)
		close(f->fd);
	free(f->state);
	free(f);
}

ssize_t span_file_read(struct span_file *f, uint64_t j, void *buf, size_t len,
		       uint64_t off)
{
	uint32_t st = atomic_load_explicit(&f->state[j], memory_order_acquire);
	size_t done = 0;

	if (!(st & 1))
		return -ENOENT;
	while (done < len) {
		ssize_t n = pread(f->fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -ENOENT;	/* decode it instead */
		done += (size_t)n;
	}
	/* dropped (and perhaps punched out) while we read: not served */
	if (atomic_load_explicit(&f->state[j], memory_order_acquire) != st)
		return -ENOENT;
	return (ssize_t)len;
}

int span_file_write(struct span_file *f, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(f->fd, (const char *)buf + done, len - done,
				   (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENOSPC;
		done += (size_t)n;
	}
	return 0;
}

/* Drop the oldest span of @c (c->lock held). */
static void drop_oldest(struct span_cache *c)
{
	struct span_entry *e = &c->ring[c->head];

	c->head = (c->head + 1) % SPAN_CACHE_RING;
	c->count--;
	if (!e->f)
		return;
	c->used -= e->len;
	/* absent first, with a new generation: a read racing us retries */
	if (atomic_compare_exchange_strong(&e->f->state[e->j], &e->state,
					   (e->state | 1) + 1))
		fallocate(e->f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)e->off, (off_t)e->len);
}

void span_file_publish(struct span_file *f, uint64_t j, uint64_t off,
		       uint64_t len)
{
	struct span_cache *c = f->cache;
	uint32_t st;

	pthread_mutex_lock(&c->lock);
	st = atomic_load(&f->state[j]);
	if (!(st & 1)) {	/* another reader may have filled it too */
		while (c->count && (c->count == SPAN_CACHE_RING ||
				    c->used + len > c->max))
			drop_oldest(c);
		st = (st + 2) | 1;
		c->ring[(c->head + c->count++) % SPAN_CACHE_RING] =
			(struct span_entry){ f, j, off, len, st };
		c->used += len;
		atomic_store_explicit(&f->state[j], st, memory_order_release);
	}
	pthread_mutex_unlock(&c->lock);
}
