/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.c - array growth, huge-page advice, the bump arena, name tables,
 * byte counts, the clock, the trust rule and the sweep of crashed
 * writers' temporary files (util.h).
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/util.h"

void memory_advise_huge(void *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)p & ~(page - 1);
	uintptr_t end = ((uintptr_t)p + len + page - 1) & ~(page - 1);

	/* whole pages around the array, not just the huge pages inside: a
	 * mapping advised in part is split, and mremap() cannot move it */
	if (len >= HUGE_ARRAY_BYTES)
		madvise((void *)start, end - start, MADV_HUGEPAGE);
}

void *calloc_huge(size_t n, size_t elem)
{
	void *p = calloc(n, elem);

	if (p)
		memory_advise_huge(p, n * elem);
	return p;
}

/* @cap (or @first when 0) doubled until it holds @need items of @elem
 * bytes; 0 when that would overflow. */
static size_t doubled_capacity(size_t cap, size_t first, size_t need, size_t elem)
{
	size_t n = cap ? cap : first;

	while (n < need) {
		if (n > SIZE_MAX / 2 / elem)
			return 0;
		n *= 2;
	}
	return n;
}

int mapped_array_grow(void **array, size_t *cap, size_t need, size_t elem)
{
	size_t n = doubled_capacity(*cap, MAPPED_ARRAY_MIN_BYTES / elem, need, elem);
	void *p;

	if (need <= *cap)
		return 0;
	if (!n)
		return -ENOMEM;
	p = *array ? mremap(*array, *cap * elem, n * elem, MREMAP_MAYMOVE)
		   : mmap(NULL, n * elem, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	memory_advise_huge(p, n * elem);
	*array = p;
	*cap = n;
	return 0;
}

void mapped_array_free(void *array, size_t cap, size_t elem)
{
	if (array)
		munmap(array, cap * elem);
}

/* One mapping of an arena, its header at its start. */
struct bump_chunk {
	struct bump_chunk *next;	/* the arena's other mappings */
	size_t size;			/* bytes mapped, this header included */
};

#define BUMP_HEADER ((sizeof(struct bump_chunk) + 15) & ~(size_t)15)

void *bump_alloc(struct bump_arena *a, size_t len)
{
	size_t need = (len + 15) & ~(size_t)15, size;
	bool own = need > BUMP_ARENA_CHUNK_BYTES / 4;
	struct bump_chunk *c;
	char *p;

	if (len > SIZE_MAX / 2)
		return NULL;
	if (need <= a->left) {
		p = a->next;
		a->next += need;
		a->left -= need;
		return p;
	}
	size = own ? BUMP_HEADER + need : BUMP_ARENA_CHUNK_BYTES;
	c = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return NULL;
	memory_advise_huge(c, size);
	*c = (struct bump_chunk){ .size = size };
	p = (char *)c + BUMP_HEADER;
	if (own && a->chunks) {		/* the mapping in use stays in use */
		c->next = a->chunks->next;
		a->chunks->next = c;
		return p;
	}
	c->next = a->chunks;
	a->chunks = c;
	a->next = p + need;
	a->left = size - BUMP_HEADER - need;
	return p;
}

void bump_release(struct bump_arena *a)
{
	while (a->chunks) {
		struct bump_chunk *c = a->chunks;

		a->chunks = c->next;
		munmap(c, c->size);
	}
	*a = (struct bump_arena){ 0 };
}

int array_grow(void **array, size_t *cap, size_t need, size_t elem)
{
	size_t n = doubled_capacity(*cap, 16, need, elem);
	void *p;

	if (need <= *cap)
		return 0;
	if (!n)
		return -ENOMEM;
	p = realloc(*array, n * elem);
	if (!p)
		return -ENOMEM;
	memory_advise_huge(p, n * elem);
	*array = p;
	*cap = n;
	return 0;
}

int pool_append(char **pool, size_t *used, size_t *cap, const char *s, size_t len)
{
	int rc;

	if (len >= SIZE_MAX - *used)
		return -ENOMEM;
	rc = array_grow((void **)pool, cap, *used + len + 1, 1);
	if (rc)
		return rc;
	memcpy(*pool + *used, s, len);
	(*pool)[*used + len] = '\0';
	*used += len + 1;
	return 0;
}

int name_table_find(const char *const *names, size_t nr, const char *s)
{
	for (size_t i = 0; i < nr; i++)
		if (!strcmp(s, names[i]))
			return (int)i;
	return -1;
}

int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *unit;
	unsigned long long v;
	char *end;
	int shift = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		unit = strchr(units, *end & ~0x20);
		if (!unit || !*unit || end[1])
			return -EINVAL;
		shift = 10 * (int)(unit - units + 1);
	}
	if (v > UINT64_MAX >> shift)
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct timespec deadline_after_ms(clockid_t clock, unsigned ms)
{
	struct timespec ts;
	long long ns;

	clock_gettime(clock, &ts);
	ns = ts.tv_nsec + (long long)ms * 1000000;
	ts.tv_sec += (time_t)(ns / 1000000000);
	ts.tv_nsec = (long)(ns % 1000000000);
	return ts;
}

/* (log.h's log_format() would be the thing, but log.c uses util.c.) */
int stat_trusted(const struct stat *st, bool sticky_ok, char *msg, size_t msg_len)
{
	if (st->st_uid != geteuid() && st->st_uid != 0) {
		snprintf(msg, msg_len, "not trusted: owned by uid %u, neither us (uid %u) "
			 "nor root", (unsigned)st->st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if ((st->st_mode & 022) && !(sticky_ok && S_ISDIR(st->st_mode) &&
				     (st->st_mode & S_ISVTX))) {
		snprintf(msg, msg_len, "not trusted: writable by %s (mode %04o)",
			 st->st_mode & 002 ? "others" : "its group",
			 (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* Check the directory @real, a parent of the one to trust if @parent. */
static int prefix_trusted(const char *real, bool parent, char *msg, size_t msg_len)
{
	struct stat st;
	char why[160];
	int rc = lstat(real, &st) ? -errno : !S_ISDIR(st.st_mode) ? -ENOTDIR :
		 stat_trusted(&st, parent, why, sizeof(why));

	if (rc)
		snprintf(msg, msg_len, "%s: %s", real, rc == -EPERM ? why : strerror(-rc));
	return rc;
}

int dir_trusted(const char *path, char *msg, size_t msg_len)
{
	char *real = realpath(path, NULL);
	size_t len, end = 1;
	int rc;

	if (!real) {
		rc = -errno;
		snprintf(msg, msg_len, "%s: %s", path, strerror(-rc));
		return rc;
	}
	len = strlen(real);
	/* "/", "/a", "/a/b": each prefix of the resolved path, in turn */
	for (;;) {
		char c = real[end];

		real[end] = '\0';
		rc = prefix_trusted(real, end < len, msg, msg_len);
		real[end] = c;
		if (rc || end >= len)
			break;
		for (end++; end < len && real[end] != '/'; end++)
			;
	}
	free(real);
	return rc;
}

/* Is @name "@base.tmp.XXXXXX", a temporary file of a writer of @base? */
static bool is_tmp_of(const char *name, const char *base)
{
	size_t blen = strlen(base);

	return strlen(name) == blen + strlen(".tmp.XXXXXX") &&
	       !strncmp(name, base, blen) && !strncmp(name + blen, ".tmp.", 5);
}

/* Remove @name in @dirfd unless a writer holds a lock on it (taken while
 * it is removed, so that none can take it meanwhile): 1 if removed. */
static int tmp_file_remove_unlocked(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int removed = 0;

	if (fd < 0)
		return 0;
	if (!flock(fd, LOCK_EX | LOCK_NB))
		removed = !unlinkat(dirfd, name, 0);
	close(fd);
	return removed;
}

int tmp_files_remove_stale(const char *path)
{
	char dir[PATH_MAX], base[PATH_MAX];
	const char *bname;
	time_t now = time(NULL);
	struct dirent *de;
	struct stat st;
	int removed = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s", path);
	snprintf(base, sizeof(base), "%s", path);
	bname = basename(base);
	d = opendir(dirname(dir));
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (!is_tmp_of(de->d_name, bname) ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
		    now - st.st_mtime < TMP_FILE_STALE_SECONDS)
			continue;
		removed += tmp_file_remove_unlocked(dirfd(d), de->d_name);
	}
	closedir(d);
	return removed;
}

int file_replace(const char *path, const void *buf, size_t len, mode_t mode,
		 int *removed)
{
	char tmp[PATH_MAX];
	const char *p = buf;
	int fd, rc = 0;

	*removed = 0;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	*removed = tmp_files_remove_stale(path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, mode))
		rc = -errno;
	while (!rc && len) {
		ssize_t n = write(fd, p, len);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else {
			rc = n == 0 ? -EIO : errno == EINTR ? 0 : -errno;
		}
	}
	if (close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

int scratch_map(const char *dir, size_t len, void **map)
{
	int fd = scratch_file(dir), rc = 0;

	if (fd < 0)
		return fd;
	if (ftruncate(fd, (off_t)len))
		rc = -errno;
	if (!rc && (*map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
		   MAP_FAILED)
		rc = -errno;
	close(fd);
	return rc;
}

/* The number in @path (a cgroup file; "max" is UINT64_MAX); false if none. */
static bool read_number(const char *path, uint64_t *v)
{
	char buf[32];
	FILE *f = fopen(path, "re");
	bool ok = f && fgets(buf, sizeof(buf), f);

	if (f)
		fclose(f);
	if (ok && !strncmp(buf, "max", 3))
		*v = UINT64_MAX;
	else if (ok)
		ok = sscanf(buf, "%" SCNu64, v) == 1;
	return ok;
}

/* MemAvailable of meminfo file @path in bytes; UINT64_MAX when unread. */
static uint64_t meminfo_available(const char *path)
{
	char line[128];
	uint64_t kib = UINT64_MAX;
	FILE *f = fopen(path, "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib == UINT64_MAX ? kib : kib * 1024;
}

/* Where a cgroup hierarchy keeps its memory limit. */
struct cgroup_memory {
	const char *line;	/* what marks its line in /proc/self/cgroup */
	const char *root;	/* where it is mounted, under the cgroup root */
	const char *max;	/* the file of its limit */
	const char *current;	/* the file of its use */
	const char *cache;	/* memory.stat's line of the page cache in
				 * that use (reclaimable: the shards read) */
};

/* The value of line @key in the memory.stat of cgroup @dir; 0 if none. */
static uint64_t memory_stat(const char *dir, const char *key)
{
	char line[256], path[2 * PATH_MAX + 32];
	size_t len = strlen(key);
	uint64_t v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/memory.stat", dir);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, len) && line[len] == ' ' &&
		    sscanf(line + len, "%" SCNu64, &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* The least room left under the limits along the process's cgroup path
 * (in @files) in hierarchy @k, its page cache counted as room;
 * UINT64_MAX when no limit is read. */
static uint64_t cgroup_room(const struct memory_files *files, const struct cgroup_memory *k)
{
	char line[PATH_MAX], dir[2 * PATH_MAX], file[2 * PATH_MAX + 32], *path = NULL;
	size_t root_len = strlen(files->cgroup_root) + strlen(k->root);
	uint64_t room = UINT64_MAX, max, cur;
	FILE *f = fopen(files->self_cgroup, "re");

	while (f && !path && fgets(line, sizeof(line), f))
		if ((path = strstr(line, k->line)))
			path += strlen(k->line);
	if (f)
		fclose(f);
	if (!path)
		return room;
	path[strcspn(path, "\n")] = '\0';
	if (snprintf(dir, sizeof(dir), "%s%s%s", files->cgroup_root, k->root,
		     strcmp(path, "/") ? path : "") >= (int)sizeof(dir))
		return room;
	/* the cgroup and each one above it, up to the root */
	for (size_t len = strlen(dir); len >= root_len; len = strlen(dir)) {
		snprintf(file, sizeof(file), "%s/%s", dir, k->max);
		if (read_number(file, &max) && max != UINT64_MAX) {
			snprintf(file, sizeof(file), "%s/%s", dir, k->current);
			if (read_number(file, &cur)) {
				uint64_t cache = memory_stat(dir, k->cache), left;

				cur = cache < cur ? cur - cache : 0;
				left = cur < max ? max - cur : 0;
				room = left < room ? left : room;
			}
		}
		*strrchr(dir, '/') = '\0';
	}
	return room;
}

uint64_t memory_available_in(const struct memory_files *files)
{
	static const struct cgroup_memory kinds[] = {
		{ "0::", "", "memory.max", "memory.current", "file" },
		{ ":memory:", "/memory", "memory.limit_in_bytes",
		  "memory.usage_in_bytes", "total_cache" },
	};
	uint64_t avail = meminfo_available(files->meminfo);

	assert(files->cgroup_root[0] == '/');	/* cgroup_room() walks up to it */
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
		uint64_t room = cgroup_room(files, &kinds[i]);

		avail = room < avail ? room : avail;
	}
	return avail;
}

uint64_t memory_available(void)
{
	static const struct memory_files system = {
		"/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup"
	};

	return memory_available_in(&system);
}

int splice_pipe_open(int fds[2], size_t room)
{
	int err;

	assert(room <= INT_MAX);
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK)) {
		err = errno;
		fds[0] = fds[1] = -1;
		return -err;
	}
	if (fcntl(fds[0], F_SETPIPE_SZ, (int)room) < 0) {	/* rounded up */
		err = errno;
		splice_pipe_close(fds);
		return -err;
	}
	return 0;
}

void splice_pipe_close(int fds[2])
{
	if (fds[0] >= 0) {
		close(fds[0]);
		close(fds[1]);
	}
	fds[0] = fds[1] = -1;
}

int scratch_file(const char *dir)
{
	char name[PATH_MAX];
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd >= 0 ? fd : -errno;
	if (snprintf(name, sizeof(name), "%s/.shardfs-scratch.XXXXXX", dir) >= (int)sizeof(name))
		return -ENAMETOOLONG;
	fd = mkostemp(name, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unlink(name);
	return fd;
}
