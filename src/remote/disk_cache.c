/* SPDX-License-Identifier: Apache-2.0 */
/*
 * disk_cache.c - remote chunks kept on a node-local disk (-o cache_dir=).
 *
 * One file per range fetched (a stream's whole chunk, a sample fetched
 * for a read at random, the bytes that grew a range), in one directory
 * per chunk of each object version: DIR/<2 hex>/<32 hex>/<16 hex
 * offset><16 hex length>.chunk.  The chunk's directory is named by a
 * 128-bit keyed hash of the object's URL, validator (ETag, else
 * Last-Modified), size and the chunk's number: later mounts of the same
 * set (same objects, same validators) find the ranges, a replaced object
 * (new ETag or Last-Modified) never matches its old ones.  An object with
 * neither validator is never cached: nothing would tell its versions
 * apart.
 *
 * The chunk's directory is the index of what is stored of it: a load
 * lists it and serves the wanted bytes from the stored ranges that cover
 * them, one or several, whatever ranges were asked when they were
 * stored.  Keyed by exact (offset, length) instead, a 2nd epoch made
 * 2-3 GETs of 0.16-0.35 MB though every sample was on disk: what a
 * fetch asks depends on the memory slots at that moment (a range grown
 * by the bytes after it, a want joined to a queued fetch), so an epoch
 * that interleaves differently asks ranges the 1st never stored under
 * that key (docs/remote.md, issue 29).  Directories are updated by
 * linking a finished file in: concurrent stores lose nothing.
 *
 * Trust: the directory holds what is served, so another user must not be
 * able to write into it.  It must be owned by us (or root) and writable
 * by no one else, and so must every directory above it (sticky ones, as
 * /tmp, excepted); else the mount is refused.  It is created 0700.  The
 * hash is keyed with DISK_CACHE_KEY_BYTES of random bytes kept in
 * DIR/key (0600, made atomically by the first chunk stored): names and
 * checksums cannot be computed, so a chunk cannot be forged, by anyone
 * who cannot read the key.  Each file's header carries the keyed hash of
 * its object, offset and length: a file renamed to another range, or
 * moved to another chunk's directory, fails its check.  The tree is only walked from the directory's own descriptor,
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
/* Most stored ranges a load considers in one chunk's directory (the
 * ones that overlap the wanted bytes; a sample of ~100 KB: ~80 in an
 * 8 MiB chunk, of which one or two overlap a want). */
#define DISK_CACHE_RANGES_MAX 64
/* Bytes a load hashes at a time of a stored range outside the wanted
 * bytes (on the fetch thread's stack). */
#define DISK_CACHE_SCRATCH (32u << 10)
/* A chunk directory's name: 32 hex digits, and its NUL. */
#define DISK_CACHE_DIR_MAX (32 + 1)
/* What a keyed hash names: a chunk's directory, or a stored range. */
#define DISK_CACHE_KIND_DIR 1
#define DISK_CACHE_KIND_RANGE 2

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
	uint64_t group;		/* bytes of a chunk: one directory each */
	atomic_ullong bytes;	/* bytes on disk, as far as this mount knows */
	atomic_ullong stores;	/* chunks stored so far */
	atomic_bool full_logged; /* a failed store was logged */
	pthread_mutex_t evicting; /* one eviction at a time */
	struct remote_counters *counters; /* disk_* bumped; outlives it */
};

/* Does @name begin with 32 lower-case hex digits? */
static bool hex32(const char *name)
{
	for (int i = 0; i < 32; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return true;
}

bool disk_cache_chunk_name(const char *name)
{
	return hex32(name) && !strcmp(name + 32, ".chunk");
}

/* Is @name that of a chunk's directory: 32 lower-case hex digits? */
static bool dir_name(const char *name)
{
	return hex32(name) && !name[32];
}

/* The keyed hash of @o's version and what @kind names: a chunk's
 * directory (@a its number, @b the chunk size) or a range (@a its
 * offset, @b its length). */
static XXH128_hash_t object_key(const struct disk_cache *dc, const struct remote_object *o,
				uint64_t kind, uint64_t a, uint64_t b)
{
	XXH3_state_t st;
	uint64_t nums[5] = { kind, o->size, (uint64_t)o->mtime, a, b };

	XXH3_128bits_reset_withSecret(&st, dc->key, sizeof(dc->key));
	XXH3_128bits_update(&st, o->name, strlen(o->name) + 1);
	XXH3_128bits_update(&st, o->etag, strlen(o->etag) + 1);
	XXH3_128bits_update(&st, nums, sizeof(nums));
	return XXH3_128bits_digest(&st);
}

/* Begin in @st the keyed checksum of header @h (but its checksum), to
 * which the data is added. */
static void checksum_begin(const struct disk_cache *dc, XXH3_state_t *st,
			   const struct disk_chunk_header *h)
{
	XXH3_64bits_reset_withSecret(st, dc->key, sizeof(dc->key));
	XXH3_64bits_update(st, h, offsetof(struct disk_chunk_header, checksum));
}

/* The keyed checksum of header @h (but its checksum) and @len bytes. */
static uint64_t chunk_checksum(const struct disk_cache *dc,
			       const struct disk_chunk_header *h, const void *buf,
			       size_t len)
{
	XXH3_state_t st;

	checksum_begin(dc, &st, h);
	XXH3_64bits_update(&st, buf, len);
	return XXH3_64bits_digest(&st);
}

/* The key in the header of range [@off, @off + @len) of @o. */
static XXH128_hash_t range_key(const struct disk_cache *dc, const struct remote_object *o,
			       uint64_t off, uint64_t len)
{
	return object_key(dc, o, DISK_CACHE_KIND_RANGE, off, len);
}

/* The subdirectory and directory name of the chunk of @o holding byte
 * @off. */
static unsigned group_name(const struct disk_cache *dc, const struct remote_object *o,
			   uint64_t off, char name[DISK_CACHE_DIR_MAX])
{
	XXH128_hash_t k = object_key(dc, o, DISK_CACHE_KIND_DIR, off / dc->group, dc->group);

	snprintf(name, DISK_CACHE_DIR_MAX, "%016" PRIx64 "%016" PRIx64, k.high64, k.low64);
	return (unsigned)(k.high64 >> 56);
}

/* The file name of range [@off, @off + @len) in its chunk's directory. */
static void range_name(uint64_t off, uint64_t len, char name[DISK_CACHE_NAME_MAX])
{
	snprintf(name, DISK_CACHE_NAME_MAX, "%016" PRIx64 "%016" PRIx64 ".chunk", off, len);
}

/* The range a file name says: false if it is no range's name. */
static bool parse_range(const char *name, uint64_t *off, uint64_t *len)
{
	char hex[17];

	if (!disk_cache_chunk_name(name))
		return false;
	memcpy(hex, name, 16);
	hex[16] = '\0';
	*off = strtoull(hex, NULL, 16);
	memcpy(hex, name + 16, 16);
	*len = strtoull(hex, NULL, 16);
	return *len && *off + *len > *off;
}

/* Directory @name in @at, never through a link; made (0700) when
 * missing if @create.  Its fd or -errno. */
static int open_dir_at(int at, const char *name, bool create)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT && create && (!mkdirat(at, name, 0700) || errno == EEXIST))
		fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Subdirectory @i: its fd or -errno (open_dir_at). */
static int open_sub(const struct disk_cache *dc, unsigned i, bool create)
{
	char name[4];

	snprintf(name, sizeof(name), "%02x", i);
	return open_dir_at(dc->fd, name, create);
}

/* The directory of the chunk of @o holding byte @off, named in @name
 * ("<2 hex>/<32 hex>"): its fd or -errno. */
static int open_group(const struct disk_cache *dc, const struct remote_object *o, uint64_t off,
		      bool create, char name[3 + DISK_CACHE_DIR_MAX])
{
	unsigned i = group_name(dc, o, off, name + 3);
	int fd, sub = open_sub(dc, i, create);

	snprintf(name, 3, "%02x", i);
	name[2] = '/';
	fd = sub < 0 ? sub : open_dir_at(sub, name + 3, create);
	if (sub >= 0)
		close(sub);
	return fd;
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
	char name[DISK_CACHE_NAME_MAX]; /* its name in its directory */
	char dir[DISK_CACHE_DIR_MAX]; /* that chunk's directory, in sub;
				 * "": a file in sub itself (an older
				 * layout's, never loaded: ages out) */
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

/* A listing of chunk files under way: where they go. */
struct listing {
	struct aged *v;		/* the files */
	size_t nr;		/* of them */
	size_t cap;		/* allocated */
};

/* Append the chunk files in directory @fd (closed here) to @l: regular
 * files named as chunks, nothing reached through a link; @dir is its
 * name in subdirectory @sub, or NULL for @sub itself, whose chunk
 * directories are listed too. */
static void list_dir(int fd, unsigned sub, const char *dir, struct listing *l)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;

	if (!d)
		close(fd);
	while (d && (de = readdir(d))) {
		struct stat st;
		int cfd;

		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (!dir && S_ISDIR(st.st_mode) && dir_name(de->d_name) &&
		    (cfd = open_dir_at(fd, de->d_name, false)) >= 0)
			list_dir(cfd, sub, de->d_name, l);
		if (!S_ISREG(st.st_mode) || !disk_cache_chunk_name(de->d_name) ||
		    array_grow((void **)&l->v, &l->cap, l->nr + 1, sizeof(*l->v)))
			continue;
		memcpy(l->v[l->nr].name, de->d_name, DISK_CACHE_NAME_MAX); /* matched: fits */
		snprintf(l->v[l->nr].dir, DISK_CACHE_DIR_MAX, "%s", dir ? dir : "");
		l->v[l->nr].sub = sub;
		l->v[l->nr].mtime = st.st_mtim;
		l->v[l->nr++].size = (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
}

/* Append the chunk files of subdirectory @i to @l.  With @report, say
 * why a subdirectory cannot be used. */
static void list_sub(const struct disk_cache *dc, unsigned i, struct listing *l, bool report)
{
	int fd = open_sub(dc, i, false);

	if (fd < 0 && fd != -ENOENT && report)
		log_warn("%s/%02x: %s (not a directory of the cache, or a symbolic "
			 "link): chunks of it are not kept", dc->dir, i, strerror(-fd));
	if (fd >= 0)
		list_dir(fd, i, NULL, l);
}

/* Every chunk file of the cache into *@v (*@nr of them); their bytes. */
static uint64_t list_all(const struct disk_cache *dc, struct aged **v, size_t *nr, bool report)
{
	struct listing l = { NULL, 0, 0 };
	uint64_t total = 0;

	for (unsigned i = 0; i < DISK_CACHE_SUBDIRS; i++)
		list_sub(dc, i, &l, report);
	for (size_t i = 0; i < l.nr; i++)
		total += l.v[i].size;
	*v = l.v;
	*nr = l.nr;
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
		    uint64_t group, struct remote_counters *counters)
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
	dc->group = group;
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

static void evict_listed(struct disk_cache *dc);

void disk_cache_release(struct disk_cache *dc)
{
	if (!dc)
		return;
	/* no store runs now (remote_release(): the fetch threads are gone);
	 * one that found an eviction running left the cache over its size */
	if (dc->fd >= 0 && atomic_load(&dc->bytes) > dc->limit)
		evict_listed(dc);
	if (dc->fd >= 0)
		close(dc->fd);
	free(dc->dir);
	explicit_bzero(dc->key, sizeof(dc->key));
	pthread_mutex_destroy(&dc->keying);
	pthread_mutex_destroy(&dc->evicting);
	free(dc);
}

/* A range stored in a chunk's directory, as its file's name says. */
struct stored {
	uint64_t off;		/* first byte of the object */
	uint64_t len;		/* bytes */
};

/* The ranges stored in chunk directory @gfd that overlap [@off, @end),
 * at most DISK_CACHE_RANGES_MAX of them, into @r: their count. */
static unsigned list_ranges(int gfd, uint64_t off, uint64_t end, struct stored *r)
{
	int fd = fcntl(gfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	unsigned n = 0;

	if (!d && fd >= 0)
		close(fd);
	while (d && n < DISK_CACHE_RANGES_MAX && (de = readdir(d)))
		if (parse_range(de->d_name, &r[n].off, &r[n].len) && r[n].off < end &&
		    off < r[n].off + r[n].len)
			n++;
	if (d)
		closedir(d);
	return n;
}

/* Of @r[0..@n), the range that holds byte @pos and reaches furthest, or
 * NULL. */
static const struct stored *covering(const struct stored *r, unsigned n, uint64_t pos)
{
	const struct stored *best = NULL;

	for (unsigned i = 0; i < n; i++)
		if (r[i].off <= pos && pos < r[i].off + r[i].len &&
		    (!best || r[i].off + r[i].len > best->off + best->len))
			best = &r[i];
	return best;
}

/* Add data bytes [@from, @to) of chunk file @fd to checksum @st,
 * DISK_CACHE_SCRATCH at a time: 0 or -EBADMSG (short). */
static int hash_span(int fd, XXH3_state_t *st, uint64_t from, uint64_t to)
{
	char scratch[DISK_CACHE_SCRATCH];

	while (from < to) {
		size_t n = to - from < sizeof(scratch) ? (size_t)(to - from) : sizeof(scratch);

		if (pread(fd, scratch, n, (off_t)(sizeof(struct disk_chunk_header) + from)) !=
		    (ssize_t)n)
			return -EBADMSG;
		XXH3_64bits_update(st, scratch, n);
		from += n;
	}
	return 0;
}

/*
 * Check the file @fd of stored range @s of @o and copy its bytes [@from,
 * @to) of the object into @dst: 0 or -EBADMSG.  The whole file is
 * checked (its checksum covers all of it); the bytes around the wanted
 * ones pass through a scratch buffer.
 */
static int read_range(const struct disk_cache *dc, int fd, const struct remote_object *o,
		      const struct stored *s, uint64_t from, uint64_t to, void *dst)
{
	XXH128_hash_t k = range_key(dc, o, s->off, s->len);
	uint64_t a = from - s->off, b = to - s->off;
	struct disk_chunk_header h;
	XXH3_state_t st;
	struct stat sb;

	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != DISK_CACHE_MAGIC || h.key_lo != k.low64 ||
	    h.key_hi != k.high64 || h.len != s->len)
		return -EBADMSG;
	checksum_begin(dc, &st, &h);
	if (hash_span(fd, &st, 0, a) ||
	    pread(fd, dst, (size_t)(b - a), (off_t)(sizeof(h) + a)) != (ssize_t)(b - a))
		return -EBADMSG;
	XXH3_64bits_update(&st, dst, (size_t)(b - a));
	if (hash_span(fd, &st, b, s->len) || XXH3_64bits_digest(&st) != h.checksum)
		return -EBADMSG;
	return 0;
}

/* Copy bytes [@from, @to) of @o from stored range @s, in chunk directory
 * @gfd (named @gname), into @dst: 0, -ENOENT (gone meanwhile) or
 * -EBADMSG (failed a check: removed). */
static int load_piece(struct disk_cache *dc, int gfd, const char *gname,
		      const struct remote_object *o, const struct stored *s,
		      uint64_t from, uint64_t to, void *dst)
{
	char name[DISK_CACHE_NAME_MAX];
	int fd, rc;

	range_name(s->off, s->len, name);
	/* never blocks (a FIFO), never follows a link (ELOOP: one is there,
	 * removed below); any other failure is a miss */
	fd = openat(gfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno != ELOOP)
		return -ENOENT;
	rc = fd < 0 ? -EBADMSG : read_range(dc, fd, o, s, from, to, dst);
	if (!rc)
		futimens(fd, NULL);	/* recently used */
	if (fd >= 0)
		close(fd);
	if (rc) {
		log_warn("%s/%s/%s: not a valid cache file (torn, corrupt, forged, or "
			 "not a regular file): removed, fetched again", dc->dir, gname, name);
		unlinkat(gfd, name, 0);
		atomic_fetch_add_explicit(&dc->counters->disk_corrupt, 1, memory_order_relaxed);
	}
	return rc;
}

/* Are bytes [@off, @end) covered by the ranges @r[0..@n)? */
static bool covered(const struct stored *r, unsigned n, uint64_t off, uint64_t end)
{
	const struct stored *s;

	for (uint64_t pos = off; pos < end; pos = s->off + s->len)
		if (!(s = covering(r, n, pos)))
			return false;
	return true;
}

/* Is @o's version known well enough for its chunks to be kept? */
static bool cacheable(const struct disk_cache *dc, const struct remote_object *o)
{
	return dc && remote_validator(o) != REMOTE_VALIDATOR_NONE;
}

int disk_cache_load(struct disk_cache *dc, const struct remote_object *o,
		    uint64_t off, void *buf, size_t len)
{
	struct stored r[DISK_CACHE_RANGES_MAX];
	char gname[3 + DISK_CACHE_DIR_MAX];
	uint64_t end = off + len;
	unsigned n = 0;
	int gfd, rc = 0;

	if (!cacheable(dc, o))
		return -ENOENT;
	/* no key yet: no chunk either */
	gfd = atomic_load_explicit(&dc->keyed, memory_order_acquire) ?
	      open_group(dc, o, off, false, gname) : -ENOENT;
	if (gfd >= 0)
		n = list_ranges(gfd, off, end, r);
	if (!covered(r, n, off, end))
		rc = -ENOENT;
	for (uint64_t pos = off, to; !rc && pos < end; pos = to) {
		const struct stored *s = covering(r, n, pos);

		to = s->off + s->len < end ? s->off + s->len : end;
		rc = load_piece(dc, gfd, gname, o, s, pos, to, (char *)buf + (pos - off));
	}
	if (gfd >= 0)
		close(gfd);
	if (rc != -EBADMSG)
		atomic_fetch_add_explicit(rc ? &dc->counters->disk_misses : &dc->counters->disk_hits,
					  1, memory_order_relaxed);
	return rc;
}

/* Delete chunk file @a, and its chunk's directory once empty: done? */
static bool evict_one(const struct disk_cache *dc, const struct aged *a)
{
	int sub = open_sub(dc, a->sub, false), fd = sub;
	bool done;

	if (sub >= 0 && a->dir[0])
		fd = open_dir_at(sub, a->dir, false);
	done = fd >= 0 && !unlinkat(fd, a->name, 0);
	if (done && fd != sub)
		unlinkat(sub, a->dir, AT_REMOVEDIR);	/* fails while not empty */
	if (fd >= 0 && fd != sub)
		close(fd);
	if (sub >= 0)
		close(sub);
	return done;
}

/*
 * Delete the least recently used chunks down to the low-water mark, by
 * what one listing of the directory finds, and set the byte count to
 * what is left plus what other threads stored since the listing began.
 * Set to the listing's total alone, it lost those stores: under I/O load
 * (listings slow, stores many) a listing of 5.4 MB set the count of a
 * 5 MB cache to 4.4 MB when stores had brought it to 9.6 MB, and the
 * stores after it did not evict until the count caught up.
 */
static void evict_listed(struct disk_cache *dc)
{
	struct aged *v;
	size_t nr;
	uint64_t before = atomic_load(&dc->bytes), total = list_all(dc, &v, &nr, false),
		 target = dc->limit / 100 * DISK_CACHE_LOW_WATER;

	qsort(v, nr, sizeof(*v), cmp_age);
	for (size_t i = 0; i < nr && total > target; i++)
		if (evict_one(dc, &v[i]))
			total -= v[i].size;
	atomic_fetch_add(&dc->bytes, total - before);	/* modulo 2^64 */
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

/* Write header and data to a new unnamed file in directory @dirfd; its
 * fd or -errno. */
static int write_temp(int dirfd, const struct disk_chunk_header *h,
		      const void *buf, size_t len)
{
	int fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600), rc;

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
	char name[DISK_CACHE_NAME_MAX], gname[3 + DISK_CACHE_DIR_MAX];
	struct disk_chunk_header h;
	XXH128_hash_t k;
	int gfd, fd;

	if (!cacheable(dc, o) || !have_key(dc))
		return;
	k = range_key(dc, o, off, len);
	h = (struct disk_chunk_header){ DISK_CACHE_MAGIC, k.low64, k.high64, len, 0 };
	h.checksum = chunk_checksum(dc, &h, buf, len);
	gfd = open_group(dc, o, off, true, gname);
	fd = gfd < 0 ? gfd : write_temp(gfd, &h, buf, len);
	if (fd < 0) {
		store_failed(dc, fd);
		goto out_close_group;
	}
	/* link the finished file into place: never visible half-written */
	range_name(off, len, name);
	unlinkat(gfd, name, 0);
	if (!link_into(fd, gfd, name) &&
	    (atomic_fetch_add(&dc->stores, 1),
	     atomic_fetch_add(&dc->bytes, len + sizeof(h)) + len + sizeof(h) > dc->limit))
		evict(dc);
	close(fd);
out_close_group:
	if (gfd >= 0)
		close(gfd);
}
