/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_disk_cache.c - the node-local cache of remote chunks
 * (disk_cache.c), without a server: chunks stored and loaded back; a
 * range inside one stored range, or across adjacent ones, loaded without
 * having been stored as such, one reaching past them a miss;
 * names keyed by the cache's secret and the object's version, so another
 * version, chunk or key finds nothing; a file planted or altered at a
 * chunk's name (forged header, flipped byte, symbolic link, FIFO) is a
 * miss and is removed, never served and never waited on; eviction keeps
 * the cache under its size and deletes nothing but chunk files inside
 * the tree.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "disk_cache.h"
#include "tarbuild.h"

/* Bytes of a chunk here. */
#define CHUNK (16u * 1024)
/* A chunk file's header (struct disk_chunk_header, disk_cache.c). */
#define HEADER 40
/* Bytes of a path the walk of the cache gives. */
#define WALK_PATH 4800

struct env {
	char *top;		/* a directory of the test's */
	char dir[4096];		/* the cache: top/cache */
	struct remote_object o;	/* the object whose chunks are kept */
	struct remote_counters counters; /* what the cache counts */
	struct disk_cache *dc;	/* the cache under test */
};

/* Open the cache in e->dir afresh (a later mount), of @limit bytes. */
static void reopen(struct env *e, uint64_t limit)
{
	disk_cache_release(e->dc);
	assert_int_equal(disk_cache_init(&e->dc, e->dir, limit, CHUNK, &e->counters), 0);
	assert_non_null(e->dc);
}

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	if (!e)
		return -1;
	e->top = tb_tmpdir();
	snprintf(e->dir, sizeof(e->dir), "%s/cache", e->top);
	e->o.name = "s3://bucket/shard-000000.tar";
	strcpy(e->o.etag, "\"etag-1\"");
	e->o.size = 64 * CHUNK;
	reopen(e, 1ull << 30);
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	disk_cache_release(e->dc);
	tb_rmtree(e->top);
	free(e);
	return 0;
}

/* Bytes [@off, @off + @len) of the object: differ per chunk. */
static void object_bytes(unsigned char *buf, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)((off + i) / CHUNK * 13 + (off + i) % CHUNK / 64);
}

/* Store bytes [@off, @off + @len) of the object, as a fetch brought them. */
static void store_range(struct env *e, uint64_t off, size_t len)
{
	unsigned char buf[CHUNK];

	assert_true(len <= CHUNK);
	object_bytes(buf, off, len);
	disk_cache_store(e->dc, &e->o, off, buf, len);
}

static void store(struct env *e, uint64_t index)
{
	store_range(e, index * CHUNK, CHUNK);
}

/* Load bytes [@off, @off + @len) of @o: the rc; on a hit the bytes must
 * be right. */
static int load_range(struct env *e, const struct remote_object *o, uint64_t off, size_t len)
{
	unsigned char got[CHUNK], want[CHUNK];
	int rc;

	assert_true(len <= CHUNK);
	rc = disk_cache_load(e->dc, o, off, got, len);
	if (!rc) {
		object_bytes(want, off, len);
		assert_memory_equal(got, want, len);
	}
	return rc;
}

/* Load chunk @index of @o whole. */
static int load(struct env *e, const struct remote_object *o, uint64_t index)
{
	return load_range(e, o, index * CHUNK, CHUNK);
}

/* Open directory @path, not through a link (as the cache walks it), or
 * NULL. */
static DIR *open_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d && fd >= 0)
		close(fd);
	return d;
}

/* Call @fn with the path of each entry named as a chunk file in the
 * cache's chunk directories (DIR/<2 hex>/<32 hex>/), as the cache walks
 * them; the number of calls. */
static int walk_chunks(const struct env *e, void (*fn)(const char *path, void *arg), void *arg)
{
	int found = 0;

	for (unsigned i = 0; i < 256; i++) {
		char sub[4200], dir[4500], path[WALK_PATH];
		struct dirent *de, *fe;
		DIR *d, *g;

		snprintf(sub, sizeof(sub), "%s/%02x", e->dir, i);
		d = open_dir(sub);
		while (d && (de = readdir(d))) {
			if (strlen(de->d_name) != 32)
				continue;
			snprintf(dir, sizeof(dir), "%s/%s", sub, de->d_name);
			g = open_dir(dir);
			while (g && (fe = readdir(g))) {
				if (!disk_cache_chunk_name(fe->d_name))
					continue;
				snprintf(path, sizeof(path), "%s/%s", dir, fe->d_name);
				fn(path, arg);
				found++;
			}
			if (g)
				closedir(g);
		}
		if (d)
			closedir(d);
	}
	return found;
}

/* Keep the first path walked, in @arg (WALK_PATH bytes). */
static void first_path(const char *path, void *arg)
{
	if (!*(char *)arg)
		snprintf(arg, WALK_PATH, "%s", path);
}

/* The chunk files in the cache: their count, the first one's path in @path. */
static int chunk_files(const struct env *e, char *path, size_t len)
{
	assert_true(len >= WALK_PATH);
	path[0] = '\0';
	return walk_chunks(e, first_path, path);
}

static bool exists(const char *path)
{
	struct stat st;

	return !lstat(path, &st);
}

static void test_chunk_name(void **state)
{
	assert_true(disk_cache_chunk_name("0123456789abcdef0123456789abcdef.chunk"));
	assert_false(disk_cache_chunk_name("0123456789ABCDEF0123456789abcdef.chunk"));
	assert_false(disk_cache_chunk_name("0123456789abcdef0123456789abcde.chunk"));
	assert_false(disk_cache_chunk_name("0123456789abcdef0123456789abcdef.chunk~"));
	assert_false(disk_cache_chunk_name("key"));
}

static void test_stored_chunk_is_loaded(void **state)
{
	struct env *e = *state;
	char path[8192];
	struct stat st;

	assert_int_equal(load(e, &e->o, 0), -ENOENT);	/* no key yet */
	store(e, 0);
	store(e, 1);
	assert_int_equal(load(e, &e->o, 0), 0);
	assert_int_equal(load(e, &e->o, 1), 0);
	assert_int_equal(load(e, &e->o, 2), -ENOENT);
	/* counted where the cache was told to: the remote's counters */
	assert_int_equal(atomic_load(&e->counters.disk_hits), 2);
	assert_int_equal(atomic_load(&e->counters.disk_misses), 2);
	assert_int_equal(chunk_files(e, path, sizeof(path)), 2);
	/* the key: ours, read by no one else */
	snprintf(path, sizeof(path), "%s/key", e->dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* a later mount of the same directory finds them */
	reopen(e, 1ull << 30);
	assert_int_equal(load(e, &e->o, 1), 0);
}

static void test_names_are_keyed(void **state)
{
	struct env *e = *state;
	struct remote_object other = e->o, dated = e->o;
	char path[8192];

	store(e, 0);
	/* another version of the object finds nothing */
	strcpy(other.etag, "\"etag-2\"");
	assert_int_equal(load(e, &other, 0), -ENOENT);
	/* an object without a validator is never kept */
	dated.etag[0] = '\0';
	dated.mtime = 0;
	disk_cache_store(e->dc, &dated, 5, "x", 1);
	assert_int_equal(chunk_files(e, path, sizeof(path)), 1);
	/* another key (a new key file) names every chunk differently */
	snprintf(path, sizeof(path), "%s/key", e->dir);
	assert_int_equal(unlink(path), 0);
	reopen(e, 1ull << 30);
	store(e, 1);			/* makes the new key */
	assert_int_equal(load(e, &e->o, 0), -ENOENT);
	assert_int_equal(load(e, &e->o, 1), 0);
}

/* Store chunk 0, then put @what at its name instead: a miss, removed. */
static void expect_planted_is_miss(struct env *e, void (*plant)(const char *))
{
	char path[8192];

	store(e, 0);
	assert_int_equal(chunk_files(e, path, sizeof(path)), 1);
	plant(path);
	alarm(10);		/* a FIFO opened blocking would hang here */
	assert_int_not_equal(load(e, &e->o, 0), 0);
	alarm(0);
	assert_false(exists(path));
	assert_int_equal(load(e, &e->o, 0), -ENOENT);
}

/* A file of the right length and a header made without the key. */
static void plant_forged(const char *path)
{
	unsigned char buf[HEADER + CHUNK] = { 0 };
	FILE *f;

	memcpy(buf, "FSCHKCC2", 8);
	object_bytes(buf + HEADER, 0, CHUNK);
	buf[HEADER] ^= 1;
	assert_int_equal(unlink(path), 0);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, sizeof(buf), f), sizeof(buf));
	fclose(f);
}

/* The stored file @path with data byte @at flipped. */
static void plant_flipped_at(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, HEADER + at), 1);
	b ^= 0x80;
	assert_int_equal(pwrite(fd, &b, 1, HEADER + at), 1);
	close(fd);
}

/* The stored chunk with one byte of its data flipped. */
static void plant_flipped(const char *path)
{
	plant_flipped_at(path, 100);
}

/* A symbolic link to the chunk's own (valid) bytes, kept elsewhere. */
static void plant_symlink(const char *path)
{
	char target[8300];

	snprintf(target, sizeof(target), "%s.elsewhere", path);
	assert_int_equal(rename(path, target), 0);
	assert_int_equal(symlink(target, path), 0);
}

static void plant_fifo(const char *path)
{
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkfifo(path, 0600), 0);
}

static void test_forged_chunk_is_miss(void **state)
{
	expect_planted_is_miss(*state, plant_forged);
}

static void test_altered_chunk_is_miss(void **state)
{
	expect_planted_is_miss(*state, plant_flipped);
}

static void test_symlink_is_miss(void **state)
{
	expect_planted_is_miss(*state, plant_symlink);
}

static void test_fifo_is_miss(void **state)
{
	expect_planted_is_miss(*state, plant_fifo);
}

/* A file sought by name in the walk: "/<name>", and where its path goes. */
struct sought {
	char name[64];		/* "/" and the file's name */
	char *path;		/* WALK_PATH bytes */
};

static void find_named(const char *path, void *arg)
{
	struct sought *s = arg;
	size_t n = strlen(path), m = strlen(s->name);

	if (n >= m && !strcmp(path + n - m, s->name))
		snprintf(s->path, WALK_PATH, "%s", path);
}

/* The path of the file of stored range [@off, @off + @len), in @path. */
static void range_path(const struct env *e, uint64_t off, uint64_t len, char *path)
{
	struct sought s = { .path = path };

	snprintf(s.name, sizeof(s.name), "/%016llx%016llx.chunk", (unsigned long long)off,
		 (unsigned long long)len);
	path[0] = '\0';
	walk_chunks(e, find_named, &s);
	assert_true(path[0]);
}

static void test_covered_range_is_loaded(void **state)
{
	struct env *e = *state;
	uint64_t c2 = 2 * CHUNK, c4 = 4 * CHUNK;
	char path[WALK_PATH];

	/* two samples next to each other, as two fetches stored them */
	store_range(e, c2 + 1000, 5000);
	store_range(e, c2 + 6000, 3000);
	/* inside one, across both, both exactly: served without having been
	 * stored so */
	assert_int_equal(load_range(e, &e->o, c2 + 2000, 1000), 0);
	assert_int_equal(load_range(e, &e->o, c2 + 4000, 4000), 0);
	assert_int_equal(load_range(e, &e->o, c2 + 1000, 8000), 0);
	/* reaching before or past what is stored: a miss */
	assert_int_equal(load_range(e, &e->o, c2 + 500, 1500), -ENOENT);
	assert_int_equal(load_range(e, &e->o, c2 + 8000, 1500), -ENOENT);
	/* a part of a stream's whole chunk */
	store(e, 3);
	assert_int_equal(load_range(e, &e->o, 3 * CHUNK + 100, 100), 0);
	/* a gap between two stored ranges: a miss */
	store_range(e, c4, 1000);
	store_range(e, c4 + 2000, 1000);
	assert_int_equal(load_range(e, &e->o, c4 + 500, 2000), -ENOENT);
	assert_int_equal(atomic_load(&e->counters.disk_hits), 4);
	/* a later mount finds them the same way */
	reopen(e, 1ull << 30);
	assert_int_equal(load_range(e, &e->o, c2 + 5000, 2000), 0);
	/* a damaged range among those a want needs: removed, a miss after */
	range_path(e, c2 + 6000, 3000, path);
	plant_flipped_at(path, 10);
	assert_int_equal(load_range(e, &e->o, c2 + 5000, 2000), -EBADMSG);
	assert_false(exists(path));
	assert_int_equal(load_range(e, &e->o, c2 + 5000, 2000), -ENOENT);
	assert_int_equal(load_range(e, &e->o, c2 + 1000, 5000), 0);
}

/* Add the bytes of regular file @path to *@arg (a uint64_t). */
static void add_bytes(const char *path, void *arg)
{
	struct stat st;

	if (!lstat(path, &st) && S_ISREG(st.st_mode))
		*(uint64_t *)arg += (uint64_t)st.st_size;
}

/* Bytes of the chunk files in the cache. */
static uint64_t cache_bytes(const struct env *e)
{
	uint64_t total = 0;

	walk_chunks(e, add_bytes, &total);
	return total;
}

/* Write a small file at @path. */
static void put_file(const char *path)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs("not the cache's\n", f);
	fclose(f);
}

static void test_eviction_stays_inside(void **state)
{
	struct env *e = *state;
	uint64_t limit = 8 * (CHUNK + HEADER);
	char outside[4200], odd[8400], link_path[8400], sub[4200], linked_sub[4200];
	char chunk_like[8400];

	/* planted: a file outside, linked from inside as a chunk and as a
	 * subdirectory; a file of another name inside */
	snprintf(outside, sizeof(outside), "%s/outside", e->top);
	assert_int_equal(mkdir(outside, 0700), 0);
	snprintf(chunk_like, sizeof(chunk_like),
		 "%s/00000000000000000000000000000000.chunk", outside);
	put_file(chunk_like);
	snprintf(sub, sizeof(sub), "%s/00", e->dir);
	mkdir(sub, 0700);
	snprintf(link_path, sizeof(link_path),
		 "%s/0000000000000000000000000000000f.chunk", sub);
	assert_int_equal(symlink(chunk_like, link_path), 0);
	snprintf(odd, sizeof(odd), "%s/notes.txt", sub);
	put_file(odd);
	snprintf(linked_sub, sizeof(linked_sub), "%s/ff", e->dir);
	rmdir(linked_sub);
	assert_int_equal(symlink(outside, linked_sub), 0);

	reopen(e, limit);
	for (uint64_t i = 0; i < 40; i++) {
		store(e, i);
		assert_true(cache_bytes(e) <= limit);
	}
	/* the most recent are kept (but one whose subdirectory is the
	 * planted link: not stored) */
	assert_true(!load(e, &e->o, 39) || !load(e, &e->o, 38));
	assert_true(exists(chunk_like));
	assert_true(exists(odd));
	assert_true(exists(link_path));
	assert_true(exists(linked_sub));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chunk_name),
		cmocka_unit_test_setup_teardown(test_stored_chunk_is_loaded,
						env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_covered_range_is_loaded,
						env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_names_are_keyed,
						env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_forged_chunk_is_miss,
						env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_altered_chunk_is_miss,
						env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_symlink_is_miss,
						env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_fifo_is_miss,
						env_setup, env_teardown),
		cmocka_unit_test_setup_teardown(test_eviction_stays_inside,
						env_setup, env_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
