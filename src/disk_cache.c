/* SPDX-License-Identifier: Apache-2.0 */
/*
 * disk_cache.c - remote chunks kept on a node-local disk (-o cache_dir=).
 *
 * One file per chunk, DIR/<2 hex>/<32 hex>.chunk, named by a 128-bit hash
 * of the object's URL, ETag and size, the chunk size and the chunk
 * number: later mounts of the same set (same objects, same ETags) find
 * the chunks, a replaced object (new ETag) never matches its old ones.
 *
 * Crash safety: a chunk is written to a temporary file and renamed into
 * place, and carries a header with its length, its name's hash and an
 * XXH3 checksum of its bytes; a chunk that fails any check (torn by a
 * crash, truncated, corrupted on disk, or from another key) is deleted
 * and fetched again, never served.
 *
 * Size: the bytes of the cache are counted at start (one directory walk)
 * and as chunks are added; past cache_size, the least recently used
 * chunks (by mtime, which a hit refreshes) are deleted down to 90% of it.
 * Several mounts may share a directory: each evicts by what is on disk.
 *
 * Thread-safety: load and store may run in any number of threads; the
 * byte count is atomic and eviction runs in one thread at a time.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY	/* XXH3_state_t on the stack */
#include <xxhash.h>

#include "remote_internal.h"
#include "shardfs/log.h"
#include "shardfs/remote.h"
#include "shardfs/util.h"

#define DISK_CACHE_MAGIC 0x3143434b48435346ull	/* "FSCHKCC1" */
/* Eviction brings the cache down to this share of cache_size (percent). */
#define DISK_CACHE_LOW_WATER 90

/* The header in front of a chunk's bytes. */
struct disk_chunk_header {
	uint64_t magic;		/* DISK_CACHE_MAGIC */
	uint64_t key_lo;	/* the key the file name was made from */
	uint64_t key_hi;
	uint64_t len;		/* bytes of data that follow */
	uint64_t checksum;	/* XXH3_64bits of those bytes */
};

static struct {
	char *dir;		/* the cache directory; NULL: no disk cache */
	uint64_t limit;		/* cache_size */
	atomic_ullong bytes;	/* bytes on disk, as far as this mount knows */
	atomic_ullong stores;	/* chunks stored so far */
	pthread_mutex_t evicting; /* one eviction at a time */
} dc = { .evicting = PTHREAD_MUTEX_INITIALIZER };

static XXH128_hash_t chunk_key(const struct remote_object *o, uint64_t index)
{
	XXH3_state_t st;
	uint64_t nums[3] = { o->size, remote_cfg.chunk_size, index };

	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, o->name, strlen(o->name) + 1);
	XXH3_128bits_update(&st, o->etag, strlen(o->etag) + 1);
	XXH3_128bits_update(&st, nums, sizeof(nums));
	return XXH3_128bits_digest(&st);
}

static void chunk_path(XXH128_hash_t k, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%02x/%016" PRIx64 "%016" PRIx64 ".chunk", dc.dir,
		 (unsigned)(k.high64 >> 56), k.high64, k.low64);
}

/* Bytes of every *.chunk under the directory (one walk, at start). */
static uint64_t walk_size(void)
{
	uint64_t total = 0;
	char sub[PATH_MAX];

	for (unsigned i = 0; i < 256; i++) {
		struct dirent *de;
		DIR *d;

		snprintf(sub, sizeof(sub), "%s/%02x", dc.dir, i);
		d = opendir(sub);
		if (!d && mkdir(sub, 0700) && errno != EEXIST)
			return total;
		while (d && (de = readdir(d))) {
			struct stat st;

			if (strstr(de->d_name, ".chunk") &&
			    !fstatat(dirfd(d), de->d_name, &st, 0))
				total += (uint64_t)st.st_size;
		}
		if (d)
			closedir(d);
	}
	return total;
}

int disk_cache_init(const char *dir, uint64_t limit)
{
	int fd;

	if (!dir)
		return 0;
	if (mkdir(dir, 0700) && errno != EEXIST)
		return log_error("cache_dir=%s: %s", dir, strerror(errno)), -errno;
	/* chunks are linked into place from O_TMPFILE files: check support */
	fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		return log_error("cache_dir=%s: %s (it must be a local directory on a "
				 "filesystem with O_TMPFILE: ext4, xfs, btrfs, tmpfs)",
				 dir, strerror(errno)), -errno;
	close(fd);
	dc.dir = realpath(dir, NULL);
	if (!dc.dir)
		return log_error("cache_dir=%s: %s", dir, strerror(errno)), -errno;
	dc.limit = limit;
	atomic_store(&dc.bytes, walk_size());
	return 0;
}

void disk_cache_release(void)
{
	free(dc.dir);
	dc.dir = NULL;
}

/* Check and read the chunk file @fd into @buf; 0 or -EBADMSG. */
static int read_chunk(int fd, XXH128_hash_t k, void *buf, size_t len)
{
	struct disk_chunk_header h;

	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != DISK_CACHE_MAGIC || h.key_lo != k.low64 ||
	    h.key_hi != k.high64 || h.len != len ||
	    pread(fd, buf, len, sizeof(h)) != (ssize_t)len ||
	    XXH3_64bits(buf, len) != h.checksum)
		return -EBADMSG;
	return 0;
}

int disk_cache_load(const struct remote_object *o, uint64_t index, void *buf,
		    size_t len)
{
	struct remote_counters *c = &remote_cfg.counters;
	XXH128_hash_t k;
	char path[PATH_MAX];
	int fd, rc;

	if (!dc.dir)
		return -ENOENT;
	k = chunk_key(o, index);
	chunk_path(k, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		atomic_fetch_add_explicit(&c->disk_misses, 1, memory_order_relaxed);
		return -ENOENT;
	}
	rc = read_chunk(fd, k, buf, len);
	if (!rc)
		futimens(fd, NULL);	/* recently used */
	close(fd);
	if (rc) {
		log_warn("%s: corrupt or torn cache file, deleted and fetched again",
			 path);
		unlink(path);
		atomic_fetch_add_explicit(&c->disk_corrupt, 1, memory_order_relaxed);
		return rc;
	}
	atomic_fetch_add_explicit(&c->disk_hits, 1, memory_order_relaxed);
	return 0;
}

/* A chunk file and its mtime, for eviction. */
struct aged {
	char name[PATH_MAX];	/* its path */
	struct timespec mtime;	/* when last used */
	uint64_t size;		/* bytes */
};

static int cmp_age(const void *a, const void *b)
{
	const struct aged *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	return (x->mtime.tv_nsec > y->mtime.tv_nsec) - (x->mtime.tv_nsec < y->mtime.tv_nsec);
}

/* Append the chunk files of subdirectory @i to @v. */
static void list_sub(unsigned i, struct aged **v, size_t *nr, size_t *cap)
{
	char sub[PATH_MAX];
	struct dirent *de;
	DIR *d;

	snprintf(sub, sizeof(sub), "%s/%02x", dc.dir, i);
	d = opendir(sub);
	while (d && (de = readdir(d))) {
		struct stat st;

		if (!strstr(de->d_name, ".chunk") || fstatat(dirfd(d), de->d_name, &st, 0) ||
		    strlen(sub) + strlen(de->d_name) + 2 > PATH_MAX)
			continue;
		if (array_grow((void **)v, cap, *nr + 1, sizeof(**v)))
			break;
		if (snprintf((*v)[*nr].name, PATH_MAX, "%s/%s", sub, de->d_name) >= PATH_MAX)
			continue;
		(*v)[*nr].mtime = st.st_mtim;
		(*v)[(*nr)++].size = (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
}

/* Delete the least recently used chunks down to the low-water mark, by
 * what one listing of the directory finds. */
static void evict_listed(void)
{
	struct aged *v = NULL;
	size_t nr = 0, cap = 0;
	uint64_t total = 0, target = dc.limit / 100 * DISK_CACHE_LOW_WATER;

	for (unsigned i = 0; i < 256; i++)
		list_sub(i, &v, &nr, &cap);
	for (size_t i = 0; i < nr; i++)
		total += v[i].size;
	qsort(v, nr, sizeof(*v), cmp_age);
	for (size_t i = 0; i < nr && total > target; i++)
		if (!unlink(v[i].name))
			total -= v[i].size;
	atomic_store(&dc.bytes, total);
	free(v);
}

/*
 * Evict, in one thread at a time.  A chunk stored while the directory was
 * listed may be missing from the listing, and its store's own eviction
 * found this one running: list again until no chunk was stored
 * meanwhile, or the cache could stay over cache_size (measured: 6.2 MB
 * in a 5 MB cache, with the transfers of the multi-handle engine).
 */
static void evict(void)
{
	unsigned long long seen;

	do {
		if (pthread_mutex_trylock(&dc.evicting))
			return;	/* another thread is at it, and looks again */
		seen = atomic_load(&dc.stores);
		evict_listed();
		pthread_mutex_unlock(&dc.evicting);
	} while (atomic_load(&dc.stores) != seen);
}

/* Write header and data to a new temporary file in @dir; its fd or -errno. */
static int write_temp(const char *dir, const struct disk_chunk_header *h,
		      const void *buf, size_t len)
{
	int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	if (pwrite(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
	    pwrite(fd, buf, len, sizeof(*h)) != (ssize_t)len) {
		close(fd);
		return -EIO;
	}
	return fd;
}

void disk_cache_store(const struct remote_object *o, uint64_t index,
		      const void *buf, size_t len)
{
	XXH128_hash_t k;
	struct disk_chunk_header h;
	char path[PATH_MAX], sub[PATH_MAX], proc[64];
	int fd;

	if (!dc.dir)
		return;
	k = chunk_key(o, index);
	h = (struct disk_chunk_header){ DISK_CACHE_MAGIC, k.low64, k.high64, len,
					XXH3_64bits(buf, len) };
	chunk_path(k, path, sizeof(path));
	snprintf(sub, sizeof(sub), "%.*s", (int)(strrchr(path, '/') - path), path);
	fd = write_temp(sub, &h, buf, len);
	if (fd < 0)
		return;
	/* link the finished file into place: never visible half-written */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	unlink(path);
	if (!linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) &&
	    (atomic_fetch_add(&dc.stores, 1),
	     atomic_fetch_add(&dc.bytes, len + sizeof(h)) + len + sizeof(h) > dc.limit))
		evict();
	close(fd);
}
