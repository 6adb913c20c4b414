/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_disk_cache.c - the node-local cache of remote chunks
 * (disk_cache.c), without a server: chunks stored and loaded back;
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
	assert_int_equal(disk_cache_init(&e->dc, e->dir, limit, &e->counters), 0);
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

/* The bytes of chunk @index: differ per chunk. */
static void chunk_bytes(unsigned char *buf, uint64_t index)
{
	for (size_t i = 0; i < CHUNK; i++)
		buf[i] = (unsigned char)(index * 13 + i / 64);
}

static void store(struct env *e, uint64_t index)
{
	unsigned char buf[CHUNK];

	chunk_bytes(buf, index);
	disk_cache_store(e->dc, &e->o, index, buf, CHUNK);
}

/* Load chunk @index of @o: its rc; on a hit the bytes must be right. */
static int load(struct env *e, const struct remote_object *o, uint64_t index)
{
	unsigned char got[CHUNK], want[CHUNK];
	int rc = disk_cache_load(e->dc, o, index, got, CHUNK);

	if (!rc) {
		chunk_bytes(want, index);
		assert_memory_equal(got, want, CHUNK);
	}
	return rc;
}

/* Subdirectory @i of the cache, not through a link (as the cache walks
 * it), or NULL. */
static DIR *open_sub(const struct env *e, unsigned i, char *sub, size_t len)
{
	int fd;
	DIR *d;

	snprintf(sub, len, "%s/%02x", e->dir, i);
	fd = open(sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d && fd >= 0)
		close(fd);
	return d;
}

/* The chunk files in the cache: their count, the first one's path in @path. */
static int chunk_files(const struct env *e, char *path, size_t len)
{
	int found = 0;

	for (unsigned i = 0; i < 256; i++) {
		char sub[4200];
		struct dirent *de;
		DIR *d;

		d = open_sub(e, i, sub, sizeof(sub));
		while (d && (de = readdir(d)))
			if (disk_cache_chunk_name(de->d_name) && found++ == 0)
				snprintf(path, len, "%s/%s", sub, de->d_name);
		if (d)
			closedir(d);
	}
	return found;
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
	chunk_bytes(buf + HEADER, 0);
	buf[HEADER] ^= 1;
	assert_int_equal(unlink(path), 0);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, sizeof(buf), f), sizeof(buf));
	fclose(f);
}

/* The stored chunk with one byte of its data flipped. */
static void plant_flipped(const char *path)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, HEADER + 100), 1);
	b ^= 0x80;
	assert_int_equal(pwrite(fd, &b, 1, HEADER + 100), 1);
	close(fd);
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

/* Bytes of the chunk files in the cache. */
static uint64_t cache_bytes(const struct env *e)
{
	uint64_t total = 0;

	for (unsigned i = 0; i < 256; i++) {
		char sub[4200], path[4500];
		struct dirent *de;
		struct stat st;
		DIR *d;

		d = open_sub(e, i, sub, sizeof(sub));
		while (d && (de = readdir(d))) {
			snprintf(path, sizeof(path), "%s/%s", sub, de->d_name);
			if (disk_cache_chunk_name(de->d_name) && !lstat(path, &st) &&
			    S_ISREG(st.st_mode))
				total += (uint64_t)st.st_size;
		}
		if (d)
			closedir(d);
	}
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
