/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_index_store.c - where an index file is looked for and saved
 * (index_store.c), and what index_store_open() makes of what it finds:
 * built and saved, loaded, extended by appended shards, rescanned when
 * only the times moved, rebuilt when a shard changed, and the modes
 * require, rebuild and off.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardfs/index_file.h"
#include "shardfs/index_store.h"
#include "shardfs/util.h"
#include "tarbuild.h"

/* One index_store_open() of the set @e->dir/s-*.tar. */
struct opened {
	struct shard_set set;		/* the shards, open */
	struct shard_index idx;		/* the index it produced */
	struct index_store_result res;	/* where it came from */
	int rc;				/* what index_store_open returned */
};

static void store_open(struct opened *o, struct tb_env *e,
		       const struct index_store_options *so)
{
	static const struct shard_index_build_options bo = { .threads = 2 };
	char spec[4096], msg[512] = "";

	*o = (struct opened){ 0 };
	snprintf(spec, sizeof(spec), "%s/s-*.tar", e->dir);
	if (shard_set_expand(&o->set, spec, NULL, msg, sizeof(msg)) ||
	    shard_set_open(&o->set, msg, sizeof(msg)))
		fail_msg("%s", msg);
	o->rc = index_store_open(&o->idx, &o->set, &bo, so, &o->res);
}

static void opened_release(struct opened *o)
{
	shard_index_release(&o->idx);
	shard_set_release(&o->set);
}

/* Write shard @e->dir/@name holding one file @member. */
static void shard(struct tb_env *e, const char *name, const char *member,
		  const char *content)
{
	struct tb a = { 0 };

	tb_file(&a, member, content);
	tb_env_shard(e, name, &a);
}

static bool has(const struct shard_index *idx, const char *name)
{
	return shard_index_lookup(idx, 0, name, strlen(name)) >= 0;
}

/* How many entries directory @path holds, "." and ".." aside. */
static int dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

/* Keep the cache directory inside the scratch directory. */
static int setup(void **state)
{
	char cache[4096];
	struct tb_env *e;
	int rc = tb_env_setup(state);

	e = *state;
	snprintf(cache, sizeof(cache), "%s/cache", e->dir);
	setenv("XDG_CACHE_HOME", cache, 1);
	return rc;
}

#define STORE_TEST(f) cmocka_unit_test_setup_teardown(f, setup, tb_env_teardown)

static void test_mode_names(void **state)
{
	static const struct {
		const char *name;
		int rc;
		enum index_mode mode;
	} cases[] = {
		{ "auto", 0, INDEX_MODE_AUTO }, { "require", 0, INDEX_MODE_REQUIRE },
		{ "rebuild", 0, INDEX_MODE_REBUILD }, { "off", 0, INDEX_MODE_OFF },
		{ "Auto", -EINVAL, 0 }, { "", -EINVAL, 0 }, { "of", -EINVAL, 0 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		enum index_mode m = INDEX_MODE_OFF;

		assert_int_equal(index_mode_parse(cases[i].name, &m), cases[i].rc);
		if (!cases[i].rc)
			assert_int_equal(m, cases[i].mode);
	}
}

static void test_built_loaded_extended(void **state)
{
	struct tb_env *e = *state;
	struct index_store_options so = { .mode = INDEX_MODE_AUTO };
	char want[4096];
	struct opened o;

	shard(e, "s-000.tar", "a.txt", "a");
	shard(e, "s-001.tar", "b.txt", "b");
	store_open(&o, e, &so);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.res.origin, INDEX_BUILT);
	assert_true(o.res.saved);
	snprintf(want, sizeof(want), "%s/.s-000.tar.shardfs-index", e->dir);
	assert_string_equal(o.res.path, want);	/* next to the first shard */
	opened_release(&o);

	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_LOADED);
	assert_false(o.res.saved);
	assert_true(has(&o.idx, "a.txt") && has(&o.idx, "b.txt"));
	opened_release(&o);

	shard(e, "s-002.tar", "c.txt", "c");	/* appended */
	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_EXTENDED);
	assert_true(o.res.saved);
	assert_true(has(&o.idx, "a.txt") && has(&o.idx, "c.txt"));
	opened_release(&o);

	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_LOADED);
	opened_release(&o);
}

/* The version of the index file at @path, set to @version (checksums
 * fixed up) when it is not 0; returns the version it had. */
static uint32_t file_version(const char *path, uint32_t version)
{
	struct index_file_header h;
	int fd = open(path, O_RDWR);
	uint32_t had;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &h, sizeof(h), 0), sizeof(h));
	had = h.version;
	if (version) {
		h.version = version;
		assert_int_equal(index_file_reseal(&h, sizeof(h)), 0);
		assert_int_equal(pwrite(fd, &h, sizeof(h), 0), sizeof(h));
	}
	close(fd);
	return had;
}

/* A file of an older format (version 3: 64-byte entries) is never read:
 * the index is built again and the file replaced. */
static void test_older_version_is_rebuilt(void **state)
{
	struct tb_env *e = *state;
	struct index_store_options so = { .mode = INDEX_MODE_AUTO };
	char path[4096];
	struct opened o;

	shard(e, "s-000.tar", "a.txt", "a");
	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_BUILT);
	snprintf(path, sizeof(path), "%s", o.res.path);
	opened_release(&o);
	assert_int_equal(file_version(path, 3), INDEX_FILE_VERSION);

	store_open(&o, e, &so);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.res.origin, INDEX_BUILT);
	assert_true(o.res.saved);
	assert_true(has(&o.idx, "a.txt"));
	opened_release(&o);
	assert_int_equal(file_version(path, 0), INDEX_FILE_VERSION);
}

/* Times alone moved: the headers are rescanned, the index kept and the
 * new times saved; a changed shard makes the index stale. */
static void test_touched_and_changed_shards(void **state)
{
	struct tb_env *e = *state;
	struct index_store_options so = { .mode = INDEX_MODE_AUTO };
	struct timespec old[2] = { { 1000, 0 }, { 1000, 0 } };
	char path[4096];
	struct opened o;

	shard(e, "s-000.tar", "a.txt", "a");
	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_BUILT);
	opened_release(&o);

	snprintf(path, sizeof(path), "%s/s-000.tar", e->dir);
	assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_LOADED);
	assert_true(o.res.saved);		/* the new times recorded */
	opened_release(&o);
	store_open(&o, e, &so);
	assert_false(o.res.saved);
	opened_release(&o);

	shard(e, "s-000.tar", "z.txt", "z");	/* same size, other bytes */
	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_BUILT);
	assert_true(has(&o.idx, "z.txt") && !has(&o.idx, "a.txt"));
	opened_release(&o);
}

static void test_modes(void **state)
{
	struct tb_env *e = *state;
	struct index_store_options so = { .mode = INDEX_MODE_REQUIRE };
	char path[4096];
	struct opened o;

	shard(e, "s-000.tar", "a.txt", "a");
	store_open(&o, e, &so);
	assert_int_equal(o.rc, -ENOENT);	/* none yet */
	opened_release(&o);

	so.mode = INDEX_MODE_OFF;
	store_open(&o, e, &so);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.res.origin, INDEX_BUILT);
	assert_false(o.res.saved);
	snprintf(path, sizeof(path), "%s/.s-000.tar.shardfs-index", e->dir);
	assert_int_equal(access(path, F_OK), -1);
	/* served from the pages of a file in the cache, removed at once */
	assert_non_null(o.idx.map);
	assert_true(has(&o.idx, "a.txt"));
	snprintf(path, sizeof(path), "%s/cache/shardfs", e->dir);
	assert_int_equal(dir_entries(path), 0);
	opened_release(&o);
	/* a cache that cannot be written: built in memory, as before */
	snprintf(path, sizeof(path), "%s/s-000.tar/cache", e->dir);
	setenv("XDG_CACHE_HOME", path, 1);
	store_open(&o, e, &so);
	assert_int_equal(o.rc, 0);
	assert_null(o.idx.map);
	assert_true(has(&o.idx, "a.txt"));
	opened_release(&o);
	snprintf(path, sizeof(path), "%s/cache", e->dir);
	setenv("XDG_CACHE_HOME", path, 1);

	so.mode = INDEX_MODE_REBUILD;
	for (int i = 0; i < 2; i++) {
		store_open(&o, e, &so);
		assert_int_equal(o.res.origin, INDEX_BUILT);
		assert_true(o.res.saved);
		opened_release(&o);
	}
	so.mode = INDEX_MODE_REQUIRE;
	store_open(&o, e, &so);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.res.origin, INDEX_LOADED);
	opened_release(&o);
}

/* -o index=PATH, and layouts that keep indexes apart. */
static void test_paths(void **state)
{
	struct tb_env *e = *state;
	struct index_store_options so = { .mode = INDEX_MODE_AUTO };
	char custom[4096], tagged[4096];
	struct opened o;

	shard(e, "s-000.tar", "a.txt", "a");
	snprintf(custom, sizeof(custom), "%s/custom.idx", e->dir);
	so.path = custom;
	store_open(&o, e, &so);
	assert_string_equal(o.res.path, custom);
	assert_int_equal(access(custom, F_OK), 0);
	opened_release(&o);

	so.path = NULL;
	so.options_hash = 0xabcdef;
	store_open(&o, e, &so);
	snprintf(tagged, sizeof(tagged),
		 "%s/.s-000.tar-0000000000abcdef.shardfs-index", e->dir);
	assert_string_equal(o.res.path, tagged);
	opened_release(&o);

	so.options_hash = 0x123;		/* another layout: not that one */
	store_open(&o, e, &so);
	assert_int_equal(o.res.origin, INDEX_BUILT);
	opened_release(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mode_names),
		STORE_TEST(test_built_loaded_extended),
		STORE_TEST(test_older_version_is_rebuilt),
		STORE_TEST(test_touched_and_changed_shards),
		STORE_TEST(test_modes),
		STORE_TEST(test_paths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
