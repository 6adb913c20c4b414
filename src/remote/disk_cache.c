/* SPDX-License-Identifier: Apache-2.0 */
/*
 * disk_cache.c - remote chunks kept on a node-local disk (-o cache_dir=).
 *
 * One file per chunk, or per range fetched for a read at random (a
 * sample), DIR/<2 hex>/<32 hex>.chunk, named by a 128-bit keyed hash of
 * the object's URL, validator (ETag, else Last-Modified), size, and the
 * range's offset and length: later mounts of the same set
 * (same objects, same validators) find the chunks, a replaced object (new
 * ETag or Last-Modified) never matches its old ones.  An object with
 * neither validator is never cached: nothing would tell its versions
 * apart.
 *
 * Trust: the directory holds what is served, so another user must not be
 * able to write into it.  It must be owned by us (or root) and writable
 * by no one else, and so must every directory above it (sticky ones, as
 * /tmp, excepted); else the mount is refused.  It is created 0700.  The
 * hash is keyed with DISK_CACHE_KEY_BYTES of random bytes kept in
 * DIR/key (0600, made atomically by the first chunk stored): names and
 * checksums cannot be computed, so a chunk cannot be forged, by anyone
 * who cannot read the key.  The tree is only walked from the directory's own descriptor,
 * never following a link (openat, O_NOFOLLOW, AT_SYMLINK_NOFOLLOW): a
 * symbolic link planted as a subdirectory or a chunk leads nowhere, and
 * eviction deletes only regular files named exactly as chunks.  Chunk
 * files are opened O_NONBLOCK and must be regular files: a FIFO planted
 * at a chunk's name is a miss, not a reader blocked forever.
 *
 * Crash safety: a chunk is written to a temporary file and linked into
 * place, and carries a header with its length, its name's hash and a
 * keyed XXH3 checksum of header and bytes; a chunk that fails any check
 * (torn by a crash, truncated, corrupted on disk, forged, or from another
 * key) is deleted and fetched again, never served.
 *
 * Size: the bytes of the cache are counted at start (one directory walk)
 * and as chunks are added; past cache_size, the least recently used
 * chunks (by mtime, which a hit refreshes) are deleted down to 90% of it.
 * Several mounts may share a directory: each evicts by what is on disk.
 * A full disk is logged once and counted (disk_store_errors); reads go on
 * from the server.
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
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY	/* XXH3_state_t on the stack */
#include <xxhash.h>

#include "disk_cache.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

#define DISK_CACHE_MAGIC 0x3243434b48435346ull	/* "FSCHKCC2": keyed */
/* Eviction brings the cache down to this share of cache_size (percent). */
#define DISK_CACHE_LOW_WATER 90
/* The key file, in the cache directory. */
#define DISK_CACHE_KEY_NAME "key"
/* Subdirectories: one per first byte of a chunk's hash. */
#define DISK_CACHE_SUBDIRS 256

/* The header in front of a chunk's bytes. */
struct disk_chunk_header {
	uint64_t magic;		/* DISK_CACHE_MAGIC */
	uint64_t key_lo;	/* the key the file name was made from */
	uint64_t key_hi;
	uint64_t len;		/* bytes of data that follow */
	uint64_t checksum;	/* keyed XXH3_64bits of the fields above and
				 * of the data */
};

/* One disk cache (the cache_dir of one struct remote). */
struct disk_cache {
	char *dir;		/* the cache directory */
	int fd;			/* it, opened without following links */
	unsigned char key[DISK_CACHE_KEY_BYTES]; /* the XXH3 secret, once keyed */
	atomic_bool keyed;	/* key holds the key file's bytes */
	pthread_mutex_t keying;	/* one thread reads or makes the key file */
	bool key_failed;	/* it could not: no chunk is stored (keying) */
	uint64_t limit;		/* cache_size */
	atomic_ullong bytes;	/* bytes on disk, as far as this mount knows */
	atomic_ullong stores;	/* chunks stored so far */
	atomic_bool full_logged; /* a failed store was logged */
	pthread_mutex_t evicting; /* one eviction at a time */
	struct remote_counters *counters; /* disk_* bumped; outlives it */
};

bool disk_cache_chunk_name(const char *name)
{
	for (int i = 0; i < 32; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return !strcmp(name + 32, ".chunk");
}

static XXH128_hash_t chunk_key(const struct disk_cache *dc,
			       const struct remote_object *o, uint64_t off, size_t len)
{
	XXH3_state_t st;
	uint64_t nums[4] = { o->size, (uint64_t)o->mtime, off, len };

	XXH3_128bits_reset_withSecret(&st, dc->key, sizeof(dc->key));
	XXH3_128bits_update(&st, o->name, strlen(o->name) + 1);
	XXH3_128bits_update(&st, o->etag, strlen(o->etag) + 1);
	XXH3_128bits_update(&st, nums, sizeof(nums));
	return XXH3_128bits_digest(&st);
}

/* The keyed checksum of header @h (but its checksum) and @len bytes. */
static uint64_t chunk_checksum(const struct disk_cache *dc,
			       const struct disk_chunk_header *h, const void *buf,
			       size_t len)
{
	XXH3_state_t st;

	XXH3_64bits_reset_withSecret(&st, dc->key, sizeof(dc->key));
	XXH3_64bits_update(&st, h, offsetof(struct disk_chunk_header, checksum));
	XXH3_64bits_update(&st, buf, len);
	return XXH3_64bits_digest(&st);
}

/* The subdirectory and file name of key @k. */
static unsigned chunk_name(XXH128_hash_t k, char name[DISK_CACHE_NAME_MAX])
{
	snprintf(name, DISK_CACHE_NAME_MAX, "%016" PRIx64 "%016" PRIx64 ".chunk",
		 k.high64, k.low64);
	return (unsigned)(k.high64 >> 56);
}

/* Subdirectory @i, never through a link; made when missing if @create.
 * Its fd or -errno. */
static int open_sub(const struct disk_cache *dc, unsigned i, bool create)
{
	char name[4];
	int fd;

	snprintf(name, sizeof(name), "%02x", i);
	fd = openat(dc->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && create &&
	    (!mkdirat(dc->fd, name, 0700) || errno == EEXIST))
		fd = openat(dc->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Link the unnamed file @fd into @dirfd as @name (replacing nothing):
 * 0 or -errno. */
static int link_into(int fd, int dirfd, const char *name)
{
	char proc[64];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) ? -errno : 0;
}

/* Make the key file: random bytes, written whole before it has a name.
 * 0, -EEXIST (another mount made it first) or -errno. */
static int make_key(struct disk_cache *dc)
{
	unsigned char key[DISK_CACHE_KEY_BYTES];
	int rc, fd;

	if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
		return -errno;
	fd = openat(dc->fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	rc = write(fd, key, sizeof(key)) == (ssize_t)sizeof(key) && !fsync(fd) ?
	     link_into(fd, dc->fd, DISK_CACHE_KEY_NAME) : -EIO;
	close(fd);
	explicit_bzero(key, sizeof(key));
	return rc;
}

/* Read the key file into dc->key, making it first if missing and
 * @create.  It must be a regular file of ours that no one else may read.
 * 0 (dc->keyed set), -ENOENT (none, and not @create) or -errno, logged. */
static int load_key(struct disk_cache *dc, bool create)
{
	struct stat st;
	int fd, rc;

	for (int tries = 0;; tries++) {
		fd = openat(dc->fd, DISK_CACHE_KEY_NAME,
			    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0 || errno != ENOENT || tries)
			break;
		if (!create)
			return -ENOENT;
		rc = make_key(dc);
		if (rc && rc != -EEXIST)
			return log_error("cache_dir=%s: cannot make its key file: %s",
					 dc->dir, strerror(-rc)), rc;
	}
	if (fd < 0)
		return log_error("%s/" DISK_CACHE_KEY_NAME ": %s", dc->dir, strerror(errno)),
		       -errno;
	rc = fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	     (st.st_mode & 077) || st.st_size != (off_t)sizeof(dc->key) ||
	     pread(fd, dc->key, sizeof(dc->key), 0) != (ssize_t)sizeof(dc->key) ? -EPERM : 0;
	close(fd);
	if (rc)
		log_error("%s/" DISK_CACHE_KEY_NAME ": not a key file of shardfs (a "
			  "%zu-byte regular file owned by uid %u, mode 0600); remove it "
			  "to have a new one made", dc->dir, sizeof(dc->key),
			  (unsigned)geteuid());
	else
		atomic_store_explicit(&dc->keyed, true, memory_order_release);
	return rc;
}

/* Is there a key, made now if need be (the first store)?  A cache_dir
 * only shared with the decoded spans of local shards gets no key file. */
static bool have_key(struct disk_cache *dc)
{
	bool ok;

	if (atomic_load_explicit(&dc->keyed, memory_order_acquire))
		return true;
	pthread_mutex_lock(&dc->keying);
	ok = atomic_load_explicit(&dc->keyed, memory_order_relaxed) ||
	     (!dc->key_failed && !load_key(dc, true));
	dc->key_failed = !ok;
	pthread_mutex_unlock(&dc->keying);
	return ok;
}

/* A chunk file and its mtime, for eviction. */
struct aged {
	char name[DISK_CACHE_NAME_MAX]; /* its name in its subdirectory */
	unsigned sub;		/* that subdirectory */
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

/* Append the chunk files of subdirectory @i to @v: regular files named
 * as chunks, nothing reached through a link.  With @report, say why a
 * subdirectory cannot be used. */
static void list_sub(const struct disk_cache *dc, unsigned i, struct aged **v, size_t *nr, size_t *cap,
		     bool report)
{
	struct dirent *de;
	int fd = open_sub(dc, i, false);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d && fd >= 0)
		close(fd);
	if (fd < 0 && fd != -ENOENT && report)
		log_warn("%s/%02x: %s (not a directory of the cache, or a symbolic "
			 "link): chunks of it are not kept", dc->dir, i, strerror(-fd));
	while (d && (de = readdir(d))) {
		struct stat st;

		if (!disk_cache_chunk_name(de->d_name) ||
		    fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		if (array_grow((void **)v, cap, *nr + 1, sizeof(**v)))
			break;
		memcpy((*v)[*nr].name, de->d_name, DISK_CACHE_NAME_MAX); /* matched: fits */
		(*v)[*nr].sub = i;
		(*v)[*nr].mtime = st.st_mtim;
		(*v)[(*nr)++].size = (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
}

/* Every chunk file of the cache into *@v (*@nr of them); their bytes. */
static uint64_t list_all(const struct disk_cache *dc, struct aged **v, size_t *nr, bool report)
{
	size_t cap = 0;
	uint64_t total = 0;

	*v = NULL;
	*nr = 0;
	for (unsigned i = 0; i < DISK_CACHE_SUBDIRS; i++)
		list_sub(dc, i, v, nr, &cap, report);
	for (size_t i = 0; i < *nr; i++)
		total += (*v)[i].size;
	return total;
}

/* Open the trusted directory @dir into @dc; 0 or -errno, logged. */
static int open_dir(struct disk_cache *dc, const char *dir)
{
	char msg[PATH_MAX + 128];
	struct stat st;
	int rc, fd;

	if (mkdir(dir, 0700) && errno != EEXIST)
		return log_error("cache_dir=%s: %s", dir, strerror(errno)), -errno;
	rc = dir_trusted(dir, msg, sizeof(msg));
	if (rc)
		return log_error("cache_dir=%s: %s; the cache must be owned by uid %u "
				 "(or root) and writable by no one else, and so must the "
				 "directories above it (sticky ones excepted)", dir, msg,
				 (unsigned)geteuid()), rc;
	dc->dir = realpath(dir, NULL);
	if (!dc->dir)
		return log_error("cache_dir=%s: %s", dir, strerror(errno)), -errno;
	dc->fd = open(dc->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	/* what was checked is what was opened */
	if (dc->fd < 0 || fstat(dc->fd, &st) || stat_trusted(&st, false, msg, sizeof(msg)))
		return log_error("cache_dir=%s: changed while it was checked", dir), -EPERM;
	/* chunks are linked into place from O_TMPFILE files: check support */
	fd = openat(dc->fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		return log_error("cache_dir=%s: %s (it must be a local directory on a "
				 "filesystem with O_TMPFILE: ext4, xfs, btrfs, tmpfs)",
				 dir, strerror(errno)), -errno;
	close(fd);
	return 0;
}

int disk_cache_init(struct disk_cache **dcp, const char *dir, uint64_t limit,
		    struct remote_counters *counters)
{
	struct disk_cache *dc;
	struct aged *v;
	size_t nr;
	int rc;

	*dcp = NULL;
	if (!dir)
		return 0;
	dc = calloc(1, sizeof(*dc));
	if (!dc)
		return -ENOMEM;
	dc->fd = -1;
	dc->limit = limit;
	dc->counters = counters;
	pthread_mutex_init(&dc->keying, NULL);
	pthread_mutex_init(&dc->evicting, NULL);
	rc = open_dir(dc, dir);
	if (!rc && (rc = load_key(dc, false)) == -ENOENT)
		rc = 0;		/* made by the first store */
	if (rc) {
		disk_cache_release(dc);
		return rc;
	}
	atomic_store(&dc->bytes, list_all(dc, &v, &nr, true));
	free(v);
	*dcp = dc;
	return 0;
}

void disk_cache_release(struct disk_cache *dc)
{
	if (!dc)
		return;
	if (dc->fd >= 0)
		close(dc->fd);
	free(dc->dir);
	explicit_bzero(dc->key, sizeof(dc->key));
	pthread_mutex_destroy(&dc->keying);
	pthread_mutex_destroy(&dc->evicting);
	free(dc);
}

/* Check and read the chunk file @fd into @buf; 0 or -EBADMSG. */
static int read_chunk(const struct disk_cache *dc, int fd, XXH128_hash_t k, void *buf, size_t len)
{
	struct disk_chunk_header h;
	struct stat st;

	if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != DISK_CACHE_MAGIC || h.key_lo != k.low64 ||
	    h.key_hi != k.high64 || h.len != len ||
	    pread(fd, buf, len, sizeof(h)) != (ssize_t)len ||
	    chunk_checksum(dc, &h, buf, len) != h.checksum)
		return -EBADMSG;
	return 0;
}

/* Is @o's version known well enough for its chunks to be kept? */
static bool cacheable(const struct disk_cache *dc, const struct remote_object *o)
{
	return dc && remote_validator(o) != REMOTE_VALIDATOR_NONE;
}

int disk_cache_load(struct disk_cache *dc, const struct remote_object *o,
		    uint64_t off, void *buf, size_t len)
{
	struct remote_counters *c;
	char name[DISK_CACHE_NAME_MAX];
	XXH128_hash_t k;
	unsigned i;
	int sub, fd, rc;

	if (!cacheable(dc, o))
		return -ENOENT;
	c = dc->counters;
	if (!atomic_load_explicit(&dc->keyed, memory_order_acquire)) {
		atomic_fetch_add_explicit(&c->disk_misses, 1, memory_order_relaxed);
		return -ENOENT;	/* no key yet: no chunk either */
	}
	k = chunk_key(dc, o, off, len);
	i = chunk_name(k, name);
	sub = open_sub(dc, i, false);
	/* never blocks (a FIFO), never follows a link (ELOOP: one is there,
	 * removed below); any other failure is a miss */
	fd = sub < 0 ? -1 : openat(sub, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && (sub < 0 || errno != ELOOP)) {
		if (sub >= 0)
			close(sub);
		atomic_fetch_add_explicit(&c->disk_misses, 1, memory_order_relaxed);
		return -ENOENT;
	}
	rc = fd < 0 ? -EBADMSG : read_chunk(dc, fd, k, buf, len);
	if (!rc)
		futimens(fd, NULL);	/* recently used */
	if (fd >= 0)
		close(fd);
	if (rc) {
		log_warn("%s/%02x/%s: not a valid cache file (torn, corrupt, forged, or "
			 "not a regular file): removed, fetched again", dc->dir, i, name);
		unlinkat(sub, name, 0);
		atomic_fetch_add_explicit(&c->disk_corrupt, 1, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&c->disk_hits, 1, memory_order_relaxed);
	}
	close(sub);
	return rc;
}

/* Delete the least recently used chunks down to the low-water mark, by
 * what one listing of the directory finds. */
static void evict_listed(struct disk_cache *dc)
{
	struct aged *v;
	size_t nr;
	uint64_t total = list_all(dc, &v, &nr, false),
		 target = dc->limit / 100 * DISK_CACHE_LOW_WATER;

	qsort(v, nr, sizeof(*v), cmp_age);
	for (size_t i = 0; i < nr && total > target; i++) {
		int sub = open_sub(dc, v[i].sub, false);

		if (sub >= 0 && !unlinkat(sub, v[i].name, 0))
			total -= v[i].size;
		if (sub >= 0)
			close(sub);
	}
	atomic_store(&dc->bytes, total);
	free(v);
}

/*
 * Evict, in one thread at a time.  A chunk stored while the directory was
 * listed may be missing from the listing, and its store's own eviction
 * found this one running: list again until no chunk was stored
 * meanwhile, or the cache could stay over cache_size (measured: 6.2 MB
 * in a 5 MB cache, with the transfers of the multi-handle engine).
 */
static void evict(struct disk_cache *dc)
{
	unsigned long long seen;

	do {
		if (pthread_mutex_trylock(&dc->evicting))
			return;	/* another thread is at it, and looks again */
		seen = atomic_load(&dc->stores);
		evict_listed(dc);
		pthread_mutex_unlock(&dc->evicting);
	} while (atomic_load(&dc->stores) != seen);
}

/* Write @len bytes at @off of @fd, whatever the calls take; 0 or -errno
 * (ENOSPC from a full disk, not a short count). */
static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		buf = (const char *)buf + n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/* Write header and data to a new unnamed file in @sub; its fd or -errno. */
static int write_temp(int sub, const struct disk_chunk_header *h,
		      const void *buf, size_t len)
{
	int fd = openat(sub, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600), rc;

	if (fd < 0)
		return -errno;
	rc = write_all(fd, h, sizeof(*h), 0) ?: write_all(fd, buf, len, sizeof(*h));
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/* A chunk could not be stored: say so once per mount, count each. */
static void store_failed(struct disk_cache *dc, int err)
{
	atomic_fetch_add_explicit(&dc->counters->disk_store_errors, 1,
				  memory_order_relaxed);
	if (!atomic_exchange(&dc->full_logged, true))
		log_warn("cache_dir=%s: cannot store a chunk: %s; chunks that cannot be "
			 "stored are read from the server again (counted in stats as "
			 "disk_store_errors, logged once)", dc->dir, strerror(-err));
}

void disk_cache_store(struct disk_cache *dc, const struct remote_object *o,
		      uint64_t off, const void *buf, size_t len)
{
	char name[DISK_CACHE_NAME_MAX];
	struct disk_chunk_header h;
	XXH128_hash_t k;
	int sub, fd;

	if (!cacheable(dc, o) || !have_key(dc))
		return;
	k = chunk_key(dc, o, off, len);
	h = (struct disk_chunk_header){ DISK_CACHE_MAGIC, k.low64, k.high64, len, 0 };
	h.checksum = chunk_checksum(dc, &h, buf, len);
	sub = open_sub(dc, chunk_name(k, name), true);
	fd = sub < 0 ? sub : write_temp(sub, &h, buf, len);
	if (fd < 0) {
		store_failed(dc, fd);
		goto out_close_sub;
	}
	/* link the finished file into place: never visible half-written */
	unlinkat(sub, name, 0);
	if (!link_into(fd, sub, name) &&
	    (atomic_fetch_add(&dc->stores, 1),
	     atomic_fetch_add(&dc->bytes, len + sizeof(h)) + len + sizeof(h) > dc->limit))
		evict(dc);
	close(fd);
out_close_sub:
	if (sub >= 0)
		close(sub);
}
