/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.h - small rules every part of shardfs shares: growing an array
 * (on the heap, or in a mapping of its own), huge pages for large arrays,
 * a bump arena, finding a name in a table of option values, reading a
 * byte count, reading a little-endian number of a compressed format's
 * header, reading the monotonic clock, deciding whether a file or
 * directory another user could have written may be trusted, sweeping
 * the temporary files of writers that crashed.
 *
 * Each existed in several copies that had begun to disagree (one size
 * parser took T, the other did not); these are the only ones.
 *
 * Thread-safety: none of them keeps state but a struct bump_arena, which
 * one thread at a time may use.
 */
#ifndef SHARDFS_UTIL_H
#define SHARDFS_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

/* Entries of a true array (not a pointer). */
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The @n-byte (at most 8) little-endian number at @p. */
static inline uint64_t le_load(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

/* The 4-byte little-endian number at @p. */
static inline uint32_t le32(const unsigned char *p)
{
	return (uint32_t)le_load(p, 4);
}

/* Arrays from this size on ask for huge pages. */
#define HUGE_ARRAY_BYTES (4u << 20)

/*
 * Ask the kernel to back the @len bytes at @p with huge pages, if @len is
 * at least HUGE_ARRAY_BYTES (MADV_HUGEPAGE on the pages that hold them; a
 * hint, ignored where transparent huge pages are off).  An
 * array of hundreds of MiB filled for the first time otherwise takes a
 * page fault per 4 KiB: under a hypervisor those faults were half of an
 * index build of tiny members (docs/benchmarks-scale.md).  Call it before
 * the memory is first written.
 */
void memory_advise_huge(void *p, size_t len);

/* calloc(), with memory_advise_huge() on the result. */
void *calloc_huge(size_t n, size_t elem);

/* A mapped array starts with this many bytes (virtual until written). */
#define MAPPED_ARRAY_MIN_BYTES (2u << 20)

/*
 * array_grow() for an array that may grow to gigabytes: it lives in a
 * mapping of its own, which mremap() grows without copying (realloc()
 * copied a heap array of build nodes page by page, a quarter of a build's
 * page faults), backed by huge pages.  Free it with mapped_array_free()
 * and the same capacity.
 */
int mapped_array_grow(void **array, size_t *cap, size_t need, size_t elem);
void mapped_array_free(void *array, size_t cap, size_t elem);

/* Bytes an arena maps at a time (more for a larger allocation). */
#define BUMP_ARENA_CHUNK_BYTES (32u << 20)

/*
 * A bump allocator for many arrays that all live until the arena is
 * released, in mappings of BUMP_ARENA_CHUNK_BYTES backed by huge pages:
 * what an index build keeps of every shard's scan (a scan's arrays on the
 * heap took a 4 KiB page fault each, most of the build's system time).
 * Zero-initialise it.  Thread-safety: none; one arena per thread.
 */
struct bump_chunk;
struct bump_arena {
	struct bump_chunk *chunks;	/* every mapping, the one in use first */
	char *next;			/* free space in the one in use */
	size_t left;			/* bytes free there */
};

/* @len bytes (16-byte aligned, not zeroed), or NULL when out of memory. */
void *bump_alloc(struct bump_arena *a, size_t len);
/* Unmap everything @a gave out; @a is empty afterwards. */
void bump_release(struct bump_arena *a);

/*
 * Grow *@array (of @elem-byte items, *@cap allocated) to hold at least
 * @need; the capacity doubles from 16, so growth is amortised O(1).  A
 * large array gets memory_advise_huge().
 * Returns 0 or -ENOMEM (the array is then unchanged).
 */
int array_grow(void **array, size_t *cap, size_t need, size_t elem);

/*
 * Append @len bytes of @s and a NUL to the string pool *@pool (*@used
 * bytes of *@cap), growing it with array_grow(); the copy starts at the
 * old *@used.  @s must not point into the pool.  Returns 0, or -ENOMEM
 * (the pool is then unchanged).
 */
int pool_append(char **pool, size_t *used, size_t *cap, const char *s, size_t len);

/*
 * The position of @s in @names (@nr entries, compared whole), or -1.
 * Option values such as layout=tree|shards|classes map to enums this way.
 */
int name_table_find(const char *const *names, size_t nr, const char *s);

/*
 * A byte count: decimal digits with an optional K, M, G or T suffix
 * (either case, powers of 1024), nothing else.  Returns 0, or -EINVAL
 * for anything else or a value past UINT64_MAX.
 */
int parse_size(const char *s, uint64_t *out);

/* Nanoseconds of CLOCK_MONOTONIC: for timeouts, ages and op timings. */
uint64_t monotonic_ns(void);

/* Milliseconds of CLOCK_MONOTONIC, for timeouts and ages. */
static inline uint64_t monotonic_ms(void)
{
	return monotonic_ns() / 1000000;
}

/*
 * Bit @i of a bitmap of atomic words, shared by threads (push-ahead's
 * marks, the index guard's checked blocks).  Relaxed: a bit orders no
 * other memory.  Setting and clearing load first, so that a bit already
 * as wanted writes nothing shared (the common case on hot paths).
 */
static inline bool bitmap_test(const atomic_ullong *words, uint64_t i)
{
	return atomic_load_explicit(&words[i / 64], memory_order_relaxed) & (1ull << (i % 64));
}

/* Set bit @i; returns whether it was set before. */
static inline bool bitmap_set(atomic_ullong *words, uint64_t i)
{
	unsigned long long m = 1ull << (i % 64);

	return bitmap_test(words, i) ||
	       (atomic_fetch_or_explicit(&words[i / 64], m, memory_order_relaxed) & m);
}

/* Clear bit @i; returns whether it was set. */
static inline bool bitmap_clear(atomic_ullong *words, uint64_t i)
{
	unsigned long long m = 1ull << (i % 64);

	return bitmap_test(words, i) &&
	       (atomic_fetch_and_explicit(&words[i / 64], ~m, memory_order_relaxed) & m);
}

/* Seconds since @start_ns, a monotonic_ns(): for elapsed times shown. */
static inline double seconds_since(uint64_t start_ns)
{
	return (double)(monotonic_ns() - start_ns) / 1e9;
}

/* The time @ms milliseconds from now on @clock: the deadline of a
 * pthread_cond_timedwait() (CLOCK_REALTIME, or the clock its condition
 * variable was made with) or a sem_timedwait() (CLOCK_REALTIME). */
struct timespec deadline_after_ms(clockid_t clock, unsigned ms);

/*
 * The trust rule for state another user could plant (index files, the
 * disk cache): the file @st describes is owned by us (the effective uid)
 * or root, and neither its group nor others may write it; with
 * @sticky_ok, a sticky directory owned by us or root (/tmp) passes too,
 * for the parents of what is trusted.  0, or -EPERM with the rule broken
 * in @msg ("not trusted: ...").
 */
int stat_trusted(const struct stat *st, bool sticky_ok, char *msg, size_t msg_len);

/*
 * Does no other user control the directory @path?  Every component of
 * its resolved path passes stat_trusted() (parents may be sticky), the
 * directory itself without exception.  0, or -errno with the component
 * and the rule it breaks in @msg.
 */
int dir_trusted(const char *path, char *msg, size_t msg_len);

/*
 * A file written beside its path as "PATH.tmp.XXXXXX" (mkostemp) and
 * renamed over PATH, untouched this long, belongs to no live writer
 * unless that writer holds an flock() on it: a bounded index build keeps
 * its file open, untouched, while it scans (2 B members at 1 M a second:
 * 33 minutes).
 */
#define TMP_FILE_STALE_SECONDS (15 * 60)

/*
 * Remove what writers of @path that crashed left behind: the files
 * "@path.tmp.XXXXXX" in its directory that are regular, ours (the
 * effective uid), untouched for TMP_FILE_STALE_SECONDS and not locked
 * (flock) by a writer.  Returns how many were removed (the caller says
 * so; log.c uses this file).
 */
int tmp_files_remove_stale(const char *path);

/*
 * Replace the file @path with @len bytes of @buf, mode @mode: written to
 * a new "@path.tmp.XXXXXX" beside it and renamed over @path, so that
 * nothing already at @path (a symbolic link someone left) is written
 * through and a failed write leaves @path as it was.  What crashed
 * writers left is removed first (tmp_files_remove_stale(): *@removed,
 * for the caller to say).  0 or -errno.
 */
int file_replace(const char *path, const void *buf, size_t len, mode_t mode,
		 int *removed);

/*
 * An unlinked file in directory @dir for scratch data, open for reading
 * and writing: O_TMPFILE where the file system has it, else made and
 * removed at once, so that a process that dies leaves nothing behind.
 * The descriptor, or -errno.
 */
int scratch_file(const char *dir);

/*
 * Make @fds (read end, write end) a pipe to splice through: close-on-exec,
 * non-blocking (a pipe without room fails a splice instead of hanging
 * it), with room for at least @room bytes.  0, or -errno with both -1.
 */
int splice_pipe_open(int fds[2], size_t room);

/* Close both ends of a pipe of splice_pipe_open() (-1: none), set them -1. */
void splice_pipe_close(int fds[2]);

/*
 * @len bytes (zeros) of a scratch file in @dir, mapped shared at *@map:
 * page cache rather than the process's own memory.  munmap() it.
 * 0 or -errno.
 */
int scratch_map(const char *dir, size_t len, void **map);

/*
 * Bytes this process may still take: the kernel's MemAvailable, and at
 * most the room left under the memory limit of its cgroup and of each
 * cgroup above it (a container's; v2 memory.max, v1 limit_in_bytes), the
 * page cache charged to it counted as room, as MemAvailable counts it
 * (a cgroup that read shards holds their pages).  UINT64_MAX when none
 * of them can be read; 0 when a cgroup is at its limit.
 */
uint64_t memory_available(void);

/* Where memory_available_in() reads what memory_available() reads from
 * the system: its files, or a test's. */
struct memory_files {
	const char *meminfo;	/* /proc/meminfo */
	const char *self_cgroup; /* /proc/self/cgroup */
	const char *cgroup_root; /* /sys/fs/cgroup: v2's hierarchy, and
				 * v1's memory hierarchy under memory/ */
};

/* memory_available() from @files. */
uint64_t memory_available_in(const struct memory_files *files);

#endif
