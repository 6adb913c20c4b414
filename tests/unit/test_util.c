/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_util.c - the shared rules of util.c: byte counts (a table of what
 * parses and what is refused), name tables, array growth (on the heap and
 * mapped, with huge pages), the bump arena, the clock, the sweep of
 * crashed writers' temporary files, and scratch files that leave no name.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/log.h"
#include "shardfs/util.h"
#include "tarbuild.h"

static void test_parse_size(void **state)
{
	static const struct {
		const char *s;
		int rc;
		uint64_t v;
	} cases[] = {
		{ "0", 0, 0 },
		{ "4096", 0, 4096 },
		{ "1K", 0, 1024 }, { "1k", 0, 1024 },
		{ "4M", 0, 4u << 20 }, { "4m", 0, 4u << 20 },
		{ "2G", 0, 2ull << 30 },
		{ "3T", 0, 3ull << 40 }, { "3t", 0, 3ull << 40 },
		{ "16777215T", 0, 16777215ull << 40 },
		{ "16777216T", -EINVAL, 0 },			/* 2^64 */
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551616", -EINVAL, 0 },		/* overflow */
		{ "", -EINVAL, 0 }, { "K", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 }, { "+1", -EINVAL, 0 }, { " 1", -EINVAL, 0 },
		{ "1 ", -EINVAL, 0 }, { "1KB", -EINVAL, 0 }, { "1P", -EINVAL, 0 },
		{ "1.5M", -EINVAL, 0 }, { "0x10", -EINVAL, 0 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		uint64_t v = 12345;
		int rc = parse_size(cases[i].s, &v);

		if (rc != cases[i].rc || (!rc && v != cases[i].v))
			fail_msg("parse_size(\"%s\"): %d, %llu", cases[i].s, rc,
				 (unsigned long long)v);
		if (rc)
			assert_int_equal(v, 12345);	/* untouched */
	}
}

static void test_name_table(void **state)
{
	static const char *const names[] = { "tree", "shards", "classes" };
	enum log_level level;

	assert_int_equal(name_table_find(names, ARRAY_SIZE(names), "tree"), 0);
	assert_int_equal(name_table_find(names, ARRAY_SIZE(names), "classes"), 2);
	assert_int_equal(name_table_find(names, ARRAY_SIZE(names), "class"), -1);
	assert_int_equal(name_table_find(names, ARRAY_SIZE(names), ""), -1);
	assert_int_equal(name_table_find(names, 0, "tree"), -1);
	assert_int_equal(log_parse_level("debug", &level), 0);
	assert_int_equal(level, LOG_LEVEL_DEBUG);
	assert_int_equal(log_parse_level("verbose", &level), -EINVAL);
}

static void test_array_grow(void **state)
{
	uint32_t *a = NULL;
	size_t cap = 0;

	assert_int_equal(array_grow((void **)&a, &cap, 0, sizeof(*a)), 0);
	assert_null(a);				/* nothing needed yet */
	for (uint32_t i = 0; i < 1000; i++) {
		size_t before = cap;

		assert_int_equal(array_grow((void **)&a, &cap, i + 1, sizeof(*a)), 0);
		assert_true(cap >= i + 1);
		assert_true(cap == before || cap >= 2 * before);	/* doubles */
		a[i] = i;
	}
	for (uint32_t i = 0; i < 1000; i++)
		assert_int_equal(a[i], i);
	assert_int_equal(array_grow((void **)&a, &cap, SIZE_MAX / 2, 64), -ENOMEM);
	assert_int_equal(a[999], 999);		/* unchanged on failure */
	free(a);
}

/* An item that does not divide a page, as the index build's nodes. */
struct odd_item {
	uint64_t value;		/* its index */
	char pad[40];		/* to 48 bytes */
};

/*
 * A mapped array grows past HUGE_ARRAY_BYTES (where it asks for huge
 * pages, which must leave mremap() able to move it) keeping every item.
 */
/* Appends land after each other, each with its NUL; a length the pool's
 * size cannot hold is refused and leaves it as it was. */
static void test_pool_append(void **state)
{
	size_t used = 0, cap = 0;
	char *pool = NULL;

	(void)state;
	assert_int_equal(pool_append(&pool, &used, &cap, "ab", 2), 0);
	assert_int_equal(pool_append(&pool, &used, &cap, "", 0), 0);
	assert_int_equal(pool_append(&pool, &used, &cap, "xyz!", 3), 0);
	assert_int_equal(used, 3 + 1 + 4);
	assert_memory_equal(pool, "ab\0\0xyz\0", used);
	assert_true(cap >= used);
	assert_int_equal(pool_append(&pool, &used, &cap, "q", SIZE_MAX - used), -ENOMEM);
	assert_int_equal(used, 8);
	assert_memory_equal(pool, "ab\0\0xyz\0", used);
	free(pool);
}

static void test_mapped_array_grow(void **state)
{
	const size_t nr = 3 * HUGE_ARRAY_BYTES / sizeof(struct odd_item);
	struct odd_item *a = NULL;
	size_t cap = 0;

	(void)state;
	for (size_t i = 0; i < nr; i++) {
		size_t before = cap;

		assert_int_equal(mapped_array_grow((void **)&a, &cap, i + 1, sizeof(*a)), 0);
		assert_true(cap >= i + 1);
		assert_true(cap == before || cap >= 2 * before);
		a[i].value = i;
	}
	for (size_t i = 0; i < nr; i++)
		assert_int_equal(a[i].value, i);
	assert_int_equal(mapped_array_grow((void **)&a, &cap, SIZE_MAX / 2, 64), -ENOMEM);
	assert_int_equal(a[nr - 1].value, nr - 1);	/* unchanged on failure */
	mapped_array_free(a, cap, sizeof(*a));
	mapped_array_free(NULL, 0, sizeof(*a));
}

/* calloc_huge() is calloc(), small or large; a grown heap array advised
 * for huge pages still grows (realloc may move it). */
static void test_huge_page_advice_keeps_arrays_usable(void **state)
{
	const size_t big = 2 * HUGE_ARRAY_BYTES;
	unsigned char *small = calloc_huge(100, 1), *large = calloc_huge(big, 1);
	uint64_t *grown = NULL;
	size_t cap = 0;

	(void)state;
	assert_non_null(small);
	assert_non_null(large);
	for (size_t i = 0; i < big; i += 4096)
		assert_int_equal(large[i], 0);
	assert_int_equal(small[99], 0);
	for (uint64_t i = 0; i < 4 * HUGE_ARRAY_BYTES / sizeof(*grown); i++) {
		assert_int_equal(array_grow((void **)&grown, &cap, i + 1, sizeof(*grown)), 0);
		grown[i] = i;
	}
	for (uint64_t i = 0; i < 4 * HUGE_ARRAY_BYTES / sizeof(*grown); i++)
		assert_int_equal(grown[i], i);
	free(small);
	free(large);
	free(grown);
}

/*
 * An arena hands out aligned, disjoint blocks that keep their bytes: small
 * ones across the end of a mapping, and one too large for a mapping in a
 * mapping of its own that leaves the current one in use.
 */
static void test_bump_arena(void **state)
{
	const size_t small = 1000, nr = 3 * BUMP_ARENA_CHUNK_BYTES / small;
	struct bump_arena a = { 0 };
	unsigned char **p = calloc(nr, sizeof(*p)), *large, *after;

	(void)state;
	assert_non_null(p);
	for (size_t i = 0; i < nr; i++) {
		p[i] = bump_alloc(&a, small - i % 16);
		assert_non_null(p[i]);
		assert_int_equal((uintptr_t)p[i] % 16, 0);
		memset(p[i], (int)(i & 0xff), small - i % 16);
	}
	large = bump_alloc(&a, BUMP_ARENA_CHUNK_BYTES);
	after = bump_alloc(&a, small);
	assert_non_null(large);
	assert_non_null(after);
	memset(large, 0xee, BUMP_ARENA_CHUNK_BYTES);
	assert_ptr_equal(after, p[nr - 1] + ((small - (nr - 1) % 16 + 15) & ~(size_t)15));
	for (size_t i = 0; i < nr; i++) {
		assert_int_equal(p[i][0], i & 0xff);
		assert_int_equal(p[i][small - i % 16 - 1], i & 0xff);
	}
	assert_null(bump_alloc(&a, SIZE_MAX - 8));
	bump_release(&a);
	assert_null(a.chunks);
	free(p);
}

/* monotonic_ns() never goes back and counts a 10 ms sleep as >= 10 ms. */
static void test_monotonic_ns(void **state)
{
	const struct timespec ten_ms = { 0, 10 * 1000000 };
	uint64_t t0, t1;

	(void)state;
	t0 = monotonic_ns();
	nanosleep(&ten_ms, NULL);
	t1 = monotonic_ns();
	assert_true(t0 > 0 && t1 >= t0 + 10 * 1000000ull);
}

/* deadline_after_ms() is now plus the milliseconds, its nanoseconds
 * normalised (below a second), also when they carry into the seconds. */
static void test_deadline_after_ms(void **state)
{
	(void)state;
	for (unsigned ms = 0; ms <= 2500; ms += 250) {
		uint64_t before = monotonic_ns();
		struct timespec d = deadline_after_ms(CLOCK_MONOTONIC, ms);
		uint64_t after = monotonic_ns();
		uint64_t at = (uint64_t)d.tv_sec * 1000000000u + (uint64_t)d.tv_nsec;

		assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
		assert_true(at >= before + ms * 1000000ull);
		assert_true(at <= after + ms * 1000000ull);
	}
}

/* Make @name in @dir: a file of age @age_s seconds, or a directory. */
static void make_aged(const char *dir, const char *name, bool is_dir, time_t age_s)
{
	struct timespec t[2] = { { time(NULL) - age_s, 0 }, { time(NULL) - age_s, 0 } };
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (is_dir) {
		assert_int_equal(mkdir(path, 0755), 0);
	} else {
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
	assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static bool exists_in(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return !lstat(path, &st);
}

/* Only "PATH.tmp.XXXXXX", regular, stale and unlocked, is a crashed
 * writer's. */
static void test_tmp_files_remove_stale(void **state)
{
	static const struct {
		const char *name;	/* beside "set.idx" */
		bool is_dir;		/* a directory, not a file */
		time_t age_s;		/* seconds since its last change */
		bool removed;		/* what the sweep must do */
	} cases[] = {
		{ "set.idx.tmp.AbC123", false, TMP_FILE_STALE_SECONDS + 60, true },
		{ "set.idx.tmp.XyZ789", false, TMP_FILE_STALE_SECONDS - 60, false },
		{ "set.idx.tmp.DiR000", true, TMP_FILE_STALE_SECONDS + 60, false },
		{ "set.idx.tmp.toolong", false, TMP_FILE_STALE_SECONDS + 60, false },
		{ "set.idx.tmpfile", false, TMP_FILE_STALE_SECONDS + 60, false },
		{ "other.idx.tmp.AbC123", false, TMP_FILE_STALE_SECONDS + 60, false },
		{ "set.idx", false, TMP_FILE_STALE_SECONDS + 60, false },
	};
	char *dir = tb_tmpdir(), path[PATH_MAX], locked[PATH_MAX];
	int want = 0, fd;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		make_aged(dir, cases[i].name, cases[i].is_dir, cases[i].age_s);
		want += cases[i].removed;
	}
	snprintf(path, sizeof(path), "%s/set.idx", dir);
	assert_int_equal(tmp_files_remove_stale(path), want);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		if (exists_in(dir, cases[i].name) == cases[i].removed)
			fail_msg("%s: %s", cases[i].name,
				 cases[i].removed ? "not removed" : "removed");
	assert_int_equal(tmp_files_remove_stale(path), 0);
	/* a writer's file, however old, is live while it holds its lock */
	make_aged(dir, "set.idx.tmp.LoCk00", false, TMP_FILE_STALE_SECONDS + 60);
	snprintf(locked, sizeof(locked), "%s/set.idx.tmp.LoCk00", dir);
	fd = open(locked, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
	assert_int_equal(tmp_files_remove_stale(path), 0);
	assert_true(exists_in(dir, "set.idx.tmp.LoCk00"));
	close(fd);
	assert_int_equal(tmp_files_remove_stale(path), 1);
	snprintf(path, sizeof(path), "%s/no/such/dir/set.idx", dir);
	assert_int_equal(tmp_files_remove_stale(path), 0);
	tb_rmtree(dir);
}

/* file_replace(): the new bytes and mode at the name, a symbolic link
 * there replaced and its target untouched, a stale temporary file of an
 * earlier writer removed and counted, nothing left on a failure. */
static void test_file_replace(void **state)
{
	char *dir = tb_tmpdir(), path[PATH_MAX], victim[PATH_MAX], buf[16] = "";
	struct stat st;
	int removed, fd;

	(void)state;
	snprintf(path, sizeof(path), "%s/set.idx", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	fd = open(victim, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_int_equal(write(fd, "keep", 4), 4);
	close(fd);
	assert_int_equal(symlink(victim, path), 0);
	make_aged(dir, "set.idx.tmp.AbC123", false, TMP_FILE_STALE_SECONDS + 60);
	assert_int_equal(file_replace(path, "fetched", 7, 0640, &removed), 0);
	assert_int_equal(removed, 1);
	assert_false(exists_in(dir, "set.idx.tmp.AbC123"));
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0640);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_int_equal(read(fd, buf, sizeof(buf)), 7);
	close(fd);
	assert_string_equal(buf, "fetched");
	fd = open(victim, O_RDONLY | O_CLOEXEC);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(read(fd, buf, sizeof(buf)), 4);
	close(fd);
	assert_string_equal(buf, "keep");
	snprintf(path, sizeof(path), "%s/no/such/dir/set.idx", dir);
	assert_int_equal(file_replace(path, "x", 1, 0644, &removed), -ENOENT);
	assert_int_equal(removed, 0);
	tb_rmtree(dir);
}

/* What this process may take: read (this machine has /proc/meminfo), and
 * never more than the machine's memory. */
static void test_memory_available(void **state)
{
	uint64_t avail = memory_available(), total = 0, kib;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %" SCNu64 " kB", &kib) == 1)
			total = kib * 1024;
	fclose(f);
	assert_true(avail > 0);
	assert_true(avail <= total);
}

/* Write @text to @root/@rel, making the directories on the way. */
static void put_file(const char *root, const char *rel, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = strchr(path + strlen(root) + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		assert_true(!mkdir(path, 0700) || errno == EEXIST);
		*p = '/';
	}
	assert_non_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

/* memory_available_in() over a fake system rooted at @dir: meminfo
 * says 1,000 MiB available, /proc/self/cgroup holds @self_cgroup. */
static uint64_t available_in(const char *dir, const char *self_cgroup)
{
	char meminfo[PATH_MAX], self[PATH_MAX], root[PATH_MAX];

	put_file(dir, "meminfo", "MemTotal: 2048000 kB\nMemAvailable: 1024000 kB\n");
	put_file(dir, "self-cgroup", self_cgroup);
	snprintf(meminfo, sizeof(meminfo), "%s/meminfo", dir);
	snprintf(self, sizeof(self), "%s/self-cgroup", dir);
	snprintf(root, sizeof(root), "%s/cg", dir);
	return memory_available_in(&(struct memory_files){ meminfo, self, root });
}

#define MIB(n) ((uint64_t)(n) << 20)

/* cgroup v2: the least room along the path up to the root, a limit of
 * "max" none, the page cache ("file") counted as room; meminfo when no
 * cgroup is tighter. */
static void test_memory_available_cgroup_v2(void **state)
{
	char *dir = tb_tmpdir(), num[64];

	(void)state;
	assert_int_equal(available_in(dir, "0::/\n"), MIB(1000));
	put_file(dir, "cg/job/step/memory.max", "max\n");
	put_file(dir, "cg/job/step/memory.current", "4096\n");
	assert_int_equal(available_in(dir, "0::/job/step\n"), MIB(1000));
	snprintf(num, sizeof(num), "%" PRIu64 "\n", MIB(512));
	put_file(dir, "cg/job/memory.max", num);
	snprintf(num, sizeof(num), "%" PRIu64 "\n", MIB(300));
	put_file(dir, "cg/job/memory.current", num);
	assert_int_equal(available_in(dir, "0::/job/step\n"), MIB(212));
	snprintf(num, sizeof(num), "anon 1\nfile %" PRIu64 "\nfile_mapped 7\n", MIB(100));
	put_file(dir, "cg/job/memory.stat", num);
	assert_int_equal(available_in(dir, "0::/job/step\n"), MIB(312));
	/* the cgroup at its limit, its page cache all but gone: no room,
	 * which is not "no limit" */
	snprintf(num, sizeof(num), "%" PRIu64 "\n", MIB(700));
	put_file(dir, "cg/job/memory.current", num);
	put_file(dir, "cg/job/memory.stat", "file 0\n");
	assert_int_equal(available_in(dir, "0::/job/step\n"), 0);
	tb_rmtree(dir);
}

/* cgroup v1: the memory hierarchy's line among the others, its limit
 * and usage, the page cache (total_cache) counted as room; a v1
 * "unlimited" (a huge number) none.  Nothing readable: UINT64_MAX. */
static void test_memory_available_cgroup_v1(void **state)
{
	char *dir = tb_tmpdir(), num[64];
	const char *self = "5:cpu,cpuacct:/docker/c1\n3:memory:/docker/c1\n1:name=systemd:/x\n";

	(void)state;
	put_file(dir, "cg/memory/docker/memory.limit_in_bytes", "9223372036854771712\n");
	put_file(dir, "cg/memory/docker/memory.usage_in_bytes", "100\n");
	snprintf(num, sizeof(num), "%" PRIu64 "\n", MIB(200));
	put_file(dir, "cg/memory/docker/c1/memory.limit_in_bytes", num);
	snprintf(num, sizeof(num), "%" PRIu64 "\n", MIB(150));
	put_file(dir, "cg/memory/docker/c1/memory.usage_in_bytes", num);
	snprintf(num, sizeof(num), "cache 9\ntotal_rss 1\ntotal_cache %" PRIu64 "\n", MIB(60));
	put_file(dir, "cg/memory/docker/c1/memory.stat", num);
	assert_int_equal(available_in(dir, self), MIB(110));
	tb_rmtree(dir);

	dir = tb_tmpdir();
	assert_int_equal(memory_available_in(&(struct memory_files){
		"/nonexistent/meminfo", "/nonexistent/cgroup", "/nonexistent" }), UINT64_MAX);
	assert_int_equal(available_in(dir, "3:memory:/docker/c1\n"), MIB(1000));
	tb_rmtree(dir);
}

/* A scratch file reads back what was written and leaves no name in its
 * directory; a directory that does not exist is an error, not a crash. */
static void test_scratch_file(void **state)
{
	char *dir = tb_tmpdir(), buf[6] = "";
	struct dirent *de;
	int fd = scratch_file(dir), names = 0;
	DIR *d;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "hello", 5, 4096), 5);
	assert_int_equal(pread(fd, buf, 5, 4096), 5);
	assert_string_equal(buf, "hello");
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d)))
		names += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	assert_int_equal(names, 0);
	close(fd);
	assert_int_equal(scratch_file("/nonexistent/shardfs-scratch"), -ENOENT);
	tb_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_name_table),
		cmocka_unit_test(test_array_grow),
		cmocka_unit_test(test_pool_append),
		cmocka_unit_test(test_mapped_array_grow),
		cmocka_unit_test(test_huge_page_advice_keeps_arrays_usable),
		cmocka_unit_test(test_bump_arena),
		cmocka_unit_test(test_monotonic_ns),
		cmocka_unit_test(test_deadline_after_ms),
		cmocka_unit_test(test_tmp_files_remove_stale),
		cmocka_unit_test(test_file_replace),
		cmocka_unit_test(test_scratch_file),
		cmocka_unit_test(test_memory_available),
		cmocka_unit_test(test_memory_available_cgroup_v2),
		cmocka_unit_test(test_memory_available_cgroup_v1),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
