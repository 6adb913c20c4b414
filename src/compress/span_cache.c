/* SPDX-License-Identifier: Apache-2.0 */
/*
 * span_cache.c - decoded spans of compressed shards on local disk (see
 * span_cache.h).
 *
 * One cache per process: the directory, the byte budget, and a ring of
 * the spans cached, oldest first, which the mutex guards (taken once per
 * span filled, never on a hit).  Each shard's file is unnamed (O_TMPFILE):
 * nothing is left behind, and two mounts never share one.
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

static struct {
	char *dir;			/* -o cache_dir; NULL: no cache */
	uint64_t max;			/* bytes at most */
	uint64_t used;			/* bytes cached */
	pthread_mutex_t lock;		/* guards used and the ring */
	struct span_entry *ring;	/* SPAN_CACHE_RING, oldest at head */
	uint32_t head, count;		/* of the ring */
} cache = { .lock = PTHREAD_MUTEX_INITIALIZER };

int span_cache_init(const char *dir, uint64_t max_bytes, char *msg,
		    size_t msg_len)
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
	cache.ring = calloc(SPAN_CACHE_RING, sizeof(*cache.ring));
	cache.dir = strdup(dir);
	if (!cache.ring || !cache.dir)
		return log_format(msg, msg_len, -ENOMEM, "%s", strerror(ENOMEM));
	cache.max = max_bytes;
	return 0;
}

int span_cache_fits(uint64_t len)
{
	return cache.dir && len <= cache.max / 4;
}

struct span_file *span_file_open(uint64_t size, uint64_t nr)
{
	struct span_file *f;

	if (!cache.dir)
		return NULL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->nr = nr;
	f->state = calloc(nr ? nr : 1, sizeof(*f->state));
	f->fd = open(cache.dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (f->fd < 0 || !f->state || ftruncate(f->fd, (off_t)size)) {
		log_warn("cache_dir %s: %s; this shard is read without the cache",
			 cache.dir, strerror(f->fd < 0 ? errno : ENOMEM));
		span_file_close(f);
		return NULL;
	}
	return f;
}

void span_file_close(struct span_file *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&cache.lock);
	for (uint32_t k = 0; k < cache.count; k++) {
		struct span_entry *e = &cache.ring[(cache.head + k) % SPAN_CACHE_RING];

		if (e->f == f) {
			e->f = NULL;
			cache.used -= e->len;
		}
	}
	pthread_mutex_unlock(&cache.lock);
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

/* Drop the oldest span (cache.lock held). */
static void drop_oldest(void)
{
	struct span_entry *e = &cache.ring[cache.head];

	cache.head = (cache.head + 1) % SPAN_CACHE_RING;
	cache.count--;
	if (!e->f)
		return;
	cache.used -= e->len;
	/* absent first, with a new generation: a read racing us retries */
	if (atomic_compare_exchange_strong(&e->f->state[e->j], &e->state,
					   (e->state | 1) + 1))
		fallocate(e->f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)e->off, (off_t)e->len);
}

void span_file_publish(struct span_file *f, uint64_t j, uint64_t off,
		       uint64_t len)
{
	uint32_t st;

	pthread_mutex_lock(&cache.lock);
	st = atomic_load(&f->state[j]);
	if (!(st & 1)) {	/* another reader may have filled it too */
		while (cache.count && (cache.count == SPAN_CACHE_RING ||
				       cache.used + len > cache.max))
			drop_oldest();
		st = (st + 2) | 1;
		cache.ring[(cache.head + cache.count++) % SPAN_CACHE_RING] =
			(struct span_entry){ f, j, off, len, st };
		cache.used += len;
		atomic_store_explicit(&f->state[j], st, memory_order_release);
	}
	pthread_mutex_unlock(&cache.lock);
}
