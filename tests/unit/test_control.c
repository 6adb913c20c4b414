/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_control.c - the /.shardfs/ files without a mount.
 *
 * The kernel reads them through the page cache, in any order and in
 * pieces of its choosing, with nothing but an inode and an offset.  So
 * every read here is checked against the whole content read at once:
 * members at random offsets and across its checkpoints (its bytes are
 * computed from the offset), stats against the snapshot its lookup took
 * (a later change to the counters must not leak into it, the next lookup
 * must show it and move the mtime).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardfs/control.h"
#include "tarbuild.h"

/* Files in the members test: enough for three checkpoints. */
#define MANY_FILES ((int)(2 * CONTROL_MEMBERS_STRIDE + 300))

/* Inode of /.shardfs/@name, looked up as the kernel does on open. */
static uint64_t control_file(struct shardfs *fs, const char *name)
{
	uint64_t dir, ino;

	assert_int_equal(shardfs_lookup(fs, SHARDFS_ROOT_INO, CONTROL_DIR_NAME,
					&dir), 0);
	assert_int_equal(shardfs_lookup(fs, dir, name, &ino), 0);
	return ino;
}

/* The whole content of @ino in one read; its length in *len. */
static char *read_whole(struct shardfs *fs, uint64_t ino, size_t *len)
{
	struct stat st;
	char *buf;

	assert_int_equal(shardfs_getattr(fs, ino, &st), 0);
	buf = malloc(st.st_size + 2);
	assert_non_null(buf);
	*len = (size_t)shardfs_read(fs, ino, buf, st.st_size + 1, 0);
	assert_int_equal(*len, st.st_size);
	assert_int_equal(shardfs_read(fs, ino, buf + *len, 1, *len), 0);
	buf[*len] = '\0';
	return buf;
}

/* @size bytes at @off must be the same bytes as in @whole. */
static void expect_slice(struct shardfs *fs, uint64_t ino, const char *whole,
			 size_t len, uint64_t off, size_t size)
{
	size_t want = off < len ? (len - off < size ? len - off : size) : 0;
	char *buf = malloc(size + 1);
	ssize_t n;

	assert_non_null(buf);
	n = shardfs_read(fs, ino, buf, size, off);
	if (n != (ssize_t)want || memcmp(buf, whole + off, want))
		fail_msg("read of %zu at %llu: %zd bytes, expected %zu, or wrong bytes",
			 size, (unsigned long long)off, n, want);
	free(buf);
}

static void test_members_lists_every_file(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char name[64], *whole, *line, *save;
	size_t len, lines = 0;
	uint64_t ino;

	for (int i = 0; i < MANY_FILES; i++) {
		snprintf(name, sizeof(name), "d%d/file-%04d.jpg", i % 7, i);
		tb_file(&a, name, name);
	}
	tb_file(&a, "odd\tname\\with\nescapes", "x");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	ino = control_file(&e->fs, "members");
	whole = read_whole(&e->fs, ino, &len);
	assert_non_null(strstr(whole, "odd\\tname\\\\with\\nescapes\t0\t"));
	for (line = strtok_r(whole, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), lines++) {
		char path[64];
		unsigned shard;
		unsigned long long off, size;

		if (strncmp(line, "odd", 3) == 0)
			continue;
		assert_int_equal(sscanf(line, "%63[^\t]\t%u\t%llu\t%llu", path,
					&shard, &off, &size), 4);
		assert_int_equal(size, strlen(path));	/* content is the name */
		assert_int_equal(tb_stat(&e->fs, path).st_size, size);
	}
	assert_int_equal(lines, MANY_FILES + 1);
	free(whole);
}

static void test_members_reads_at_any_offset(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char name[64], *whole;
	size_t len;
	uint64_t ino;

	for (int i = 0; i < MANY_FILES; i++) {
		snprintf(name, sizeof(name), "c%02d/%0*d.cls", i % 13, 1 + i % 40, i);
		tb_file(&a, name, "1\n");
	}
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	ino = control_file(&e->fs, "members");
	whole = read_whole(&e->fs, ino, &len);
	srand(7);
	for (int i = 0; i < 2000; i++)
		expect_slice(&e->fs, ino, whole, len, (uint64_t)rand() % (len + 10),
			     1 + (size_t)rand() % 9000);
	/* every page, as the kernel's readahead asks for them, backwards */
	for (uint64_t off = len / 4096 * 4096;; off -= 4096) {
		expect_slice(&e->fs, ino, whole, len, off, 4096);
		if (!off)
			break;
	}
	expect_slice(&e->fs, ino, whole, len, len - 1, 100);
	expect_slice(&e->fs, ino, whole, len, len, 100);
	free(whole);
}

static void test_stats_is_a_snapshot_per_lookup(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct stat st1, st2;
	char *first, *second, *again;
	size_t len1, len2, len;
	uint64_t ino;

	tb_file(&a, "f", "x");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	ino = control_file(&e->fs, "stats");
	assert_int_equal(shardfs_getattr(&e->fs, ino, &st1), 0);
	first = read_whole(&e->fs, ino, &len1);
	assert_non_null(strstr(first, "\"read_bytes\": 0,"));

	/* what happens after the lookup is not in its snapshot ... */
	atomic_store(&e->fs.counters.read_bytes, 123456789);
	again = read_whole(&e->fs, ino, &len);
	assert_string_equal(again, first);
	for (size_t off = 0; off < len1; off += 7)
		expect_slice(&e->fs, ino, first, len1, off, 13);

	/* ... the next lookup's is, with a later mtime */
	assert_int_equal(control_file(&e->fs, "stats"), ino);
	assert_int_equal(shardfs_getattr(&e->fs, ino, &st2), 0);
	second = read_whole(&e->fs, ino, &len2);
	assert_non_null(strstr(second, "\"read_bytes\": 123456789,"));
	assert_int_equal(st2.st_size, len2);
	assert_true(st2.st_mtim.tv_sec > st1.st_mtim.tv_sec ||
		    (st2.st_mtim.tv_sec == st1.st_mtim.tv_sec &&
		     st2.st_mtim.tv_nsec > st1.st_mtim.tv_nsec));
	assert_true(shardfs_changes(&e->fs, ino));
	free(first);
	free(second);
	free(again);
}

static void test_directory_and_names(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	const char *names[] = { "stats", "shards", "members", "metrics" };
	struct shardfs_dirent de = { 0 };
	uint64_t dir, ino;
	struct stat st;

	tb_file(&a, "f", "x");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(shardfs_lookup(&e->fs, SHARDFS_ROOT_INO, CONTROL_DIR_NAME,
					&dir), 0);
	assert_int_equal(shardfs_getattr(&e->fs, dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_false(shardfs_changes(&e->fs, dir));
	for (uint64_t pos = 0; pos < 4; pos++) {
		assert_int_equal(shardfs_readdir_entry(&e->fs, dir, pos, &de), 0);
		assert_string_equal(de.name, names[pos]);
		assert_int_equal(shardfs_getattr(&e->fs, de.ino, &st), 0);
		assert_true(S_ISREG(st.st_mode) && st.st_size > 0);
	}
	assert_int_equal(shardfs_readdir_entry(&e->fs, dir, 4, &de), -ENOENT);
	assert_int_equal(shardfs_lookup(&e->fs, dir, "nothing", &ino), -ENOENT);
	assert_false(shardfs_changes(&e->fs, control_file(&e->fs, "members")));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TB_ENV_TEST(test_members_lists_every_file),
		TB_ENV_TEST(test_members_reads_at_any_offset),
		TB_ENV_TEST(test_stats_is_a_snapshot_per_lookup),
		TB_ENV_TEST(test_directory_and_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
