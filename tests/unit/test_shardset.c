/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shardset.c - shard_set_expand() and shard_set_open(): from the
 * SHARDS argument to an ordered list of open shards.
 *
 * The expansion order is the shard order, and the shard order decides
 * which duplicate wins, so every form is checked for the exact list it
 * produces: brace ranges (zero padding taken from the first bound),
 * lists, nesting, several groups, comma-separated items, directories and
 * globs (both sorted bytewise).  Patterns that match nothing, malformed
 * braces and ranges too large to hold must be errors with a message, not
 * a literal path or an out-of-memory kill.
 *
 * Plain paths are not checked for existence until shard_set_open(), so
 * brace tests use paths under a directory that does not exist.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tarbuild.h"

#define NX "/nonexistent-shardfs-test"

/* Expand @spec and expect exactly @prefix + each of @want (NULL-ended). */
static void expect_expansion(const char *spec, const char *prefix,
			     const char *const *want)
{
	struct shard_set set;
	char msg[512] = "", path[4096];
	size_t n = 0;

	assert_int_equal(shard_set_expand(&set, spec, NULL, msg, sizeof(msg)), 0);
	for (; want[n]; n++) {
		snprintf(path, sizeof(path), "%s%s", prefix, want[n]);
		if (n >= set.nr || strcmp(set.shards[n].path, path))
			fail_msg("%s: shard %zu is '%s', expected '%s'", spec, n,
				 n < set.nr ? set.shards[n].path : "(none)", path);
		assert_null(set.shards[n].src);	/* not opened yet */
	}
	assert_int_equal(set.nr, n);
	shard_set_release(&set);
}

/* Expand @spec and expect it to fail with @rc, a message and no shards. */
static void expect_failure(const char *spec, int rc)
{
	struct shard_set set;
	char msg[512] = "";

	assert_int_equal(shard_set_expand(&set, spec, NULL, msg, sizeof(msg)), rc);
	assert_true(strlen(msg) > 0);
	assert_int_equal(set.nr, 0);
	assert_null(set.shards);
}

static void test_brace_ranges(void **state)
{
	expect_expansion(NX "/s-{000..003}.tar", NX "/s-",
			 TB_LIST("000.tar", "001.tar", "002.tar", "003.tar"));
	expect_expansion(NX "/s-{8..11}.tar", NX "/s-",
			 TB_LIST("8.tar", "9.tar", "10.tar", "11.tar"));
	expect_expansion(NX "/s-{08..10}.tar", NX "/s-",
			 TB_LIST("08.tar", "09.tar", "10.tar"));
	expect_expansion(NX "/s-{5..5}.tar", NX "/s-", TB_LIST("5.tar"));
	expect_expansion(NX "/s-{-1..1}.tar", NX "/s-",
			 TB_LIST("-1.tar", "0.tar", "1.tar"));
}

static void test_brace_lists_and_nesting(void **state)
{
	expect_expansion(NX "/{train,val}.tar", NX "/",
			 TB_LIST("train.tar", "val.tar"));
	expect_expansion(NX "/{a,b{1..2},c}.tar", NX "/",
			 TB_LIST("a.tar", "b1.tar", "b2.tar", "c.tar"));
	/* several groups: the first one varies slowest, as in bash */
	expect_expansion(NX "/{a,b}-{1..2}.tar", NX "/",
			 TB_LIST("a-1.tar", "a-2.tar", "b-1.tar", "b-2.tar"));
	expect_expansion(NX "/{{x,y},z}.tar", NX "/",
			 TB_LIST("x.tar", "y.tar", "z.tar"));
}

static void test_comma_separated_items(void **state)
{
	expect_expansion(NX "/x.tar," NX "/{a,b}.tar," NX "/y.tar", NX "/",
			 TB_LIST("x.tar", "a.tar", "b.tar", "y.tar"));
	/* empty items are ignored */
	expect_expansion(NX "/a.tar,,," NX "/b.tar,", NX "/",
			 TB_LIST("a.tar", "b.tar"));
}

/* Create empty files @names (NULL-ended) in @dir. */
static void touch_all(const char *dir, const char *const *names)
{
	const struct tb empty = { 0 };

	for (; *names; names++)
		tb_save(&empty, dir, *names);
}

static void test_directory_of_tars_sorted(void **state)
{
	struct tb_env *e = *state;
	char prefix[4096];

	touch_all(e->dir, TB_LIST("b.tar", "a.tar", "10.tar", "B.tar",
				  "notes.txt", "x.tar.gz", "y.tgz", "z.tar.zst",
				  "w.tar.xz", "v.gz", ".tar", ".tgz"));
	snprintf(prefix, sizeof(prefix), "%s/", e->dir);
	expect_expansion(e->dir, prefix, TB_LIST("10.tar", "B.tar", "a.tar", "b.tar",
						 "x.tar.gz", "y.tgz", "z.tar.zst"));
}

static void test_directory_without_tars_fails(void **state)
{
	struct tb_env *e = *state;

	touch_all(e->dir, TB_LIST("notes.txt"));
	expect_failure(e->dir, -ENOENT);
}

static void test_glob_sorted(void **state)
{
	struct tb_env *e = *state;
	char spec[4096], prefix[4096];

	touch_all(e->dir, TB_LIST("s-2.tar", "s-10.tar", "s-1.tar", "t-1.tar"));
	snprintf(spec, sizeof(spec), "%s/s-*.tar", e->dir);
	snprintf(prefix, sizeof(prefix), "%s/", e->dir);
	expect_expansion(spec, prefix, TB_LIST("s-1.tar", "s-10.tar", "s-2.tar"));
	snprintf(spec, sizeof(spec), "%s/t-?.tar,%s/s-[2].tar", e->dir, e->dir);
	expect_expansion(spec, prefix, TB_LIST("t-1.tar", "s-2.tar"));
}

static void test_glob_without_match_fails(void **state)
{
	struct tb_env *e = *state;
	char spec[4096];

	snprintf(spec, sizeof(spec), "%s/none-*.tar", e->dir);
	expect_failure(spec, -ENOENT);
	/* one item without a match fails the whole argument */
	snprintf(spec, sizeof(spec), NX "/a.tar,%s/none-*.tar", e->dir);
	expect_failure(spec, -ENOENT);
}

static void test_malformed_arguments_fail(void **state)
{
	char *huge = malloc(SHARD_SET_SPEC_MAX + 2);

	assert_non_null(huge);
	expect_failure(NX "/s-{1..3.tar", -EINVAL);
	expect_failure(NX "/{a,b.tar", -EINVAL);
	expect_failure(NX "/ok.tar," NX "/{a,b.tar", -EINVAL);
	expect_failure("", -EINVAL);
	expect_failure(",,", -ENOENT);
	memset(huge, 'a', SHARD_SET_SPEC_MAX + 1);
	huge[SHARD_SET_SPEC_MAX + 1] = '\0';
	expect_failure(huge, -EINVAL);
	free(huge);
}

/*
 * A range of more than SHARD_SET_MAX_SHARDS values must be an error (see
 * shardset.c: "{0..999999999}" is an error, not an out-of-memory kill),
 * not a single shard literally named "s-0..99999999.tar".
 */
static void test_oversized_range_fails(void **state)
{
	static const char *const specs[] = {
		NX "/s-{0..99999999}.tar",
		NX "/s-{0..1048576}.tar",	/* SHARD_SET_MAX_SHARDS + 1 */
	};

	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		struct shard_set set;
		char msg[512] = "";
		int rc = shard_set_expand(&set, specs[i], NULL, msg, sizeof(msg));

		if (rc == 0) {
			char first[4096];

			snprintf(first, sizeof(first), "%s",
				 set.nr ? set.shards[0].path : "");
			shard_set_release(&set);
			fail_msg("%s expanded without error (first shard '%s')",
				 specs[i], first);
		}
		assert_true(rc < 0);
		assert_true(strlen(msg) > 0);
	}
}

static void test_open_records_shards(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct shard_set set;
	char msg[512] = "", spec[4096];

	tb_file(&a, "x", "1");
	tb_end(&a);
	tb_save(&a, e->dir, "one.tar");
	snprintf(spec, sizeof(spec), "%s/one.tar", e->dir);
	assert_int_equal(shard_set_expand(&set, spec, NULL, msg, sizeof(msg)), 0);
	assert_int_equal(shard_set_open(&set, msg, sizeof(msg)), 0);
	assert_int_equal(set.nr, 1);
	assert_non_null(set.shards[0].src);
	assert_int_equal(set.shards[0].size, a.len);
	assert_true(set.shards[0].path[0] == '/');
	assert_false(set.shards[0].bad);
	shard_set_release(&set);
	assert_int_equal(set.nr, 0);
	tb_free(&a);
}

static void test_open_failures_name_the_shard(void **state)
{
	struct tb_env *e = *state;
	struct shard_set set;
	char msg[512] = "", spec[4096], dir[4096];

	assert_int_equal(shard_set_expand(&set, NX "/missing.tar", NULL, msg, sizeof(msg)), 0);
	assert_int_equal(shard_set_open(&set, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "missing.tar"));
	shard_set_release(&set);

	/* a directory matched by a glob is not a shard */
	snprintf(spec, sizeof(spec), "%s/sub*", e->dir);
	snprintf(dir, sizeof(dir), "%s/sub.tar", e->dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(shard_set_expand(&set, spec, NULL, msg, sizeof(msg)), 0);
	assert_int_equal(shard_set_open(&set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "sub.tar"));
	shard_set_release(&set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_brace_ranges),
		cmocka_unit_test(test_brace_lists_and_nesting),
		cmocka_unit_test(test_comma_separated_items),
		TB_ENV_TEST(test_directory_of_tars_sorted),
		TB_ENV_TEST(test_directory_without_tars_fails),
		TB_ENV_TEST(test_glob_sorted),
		TB_ENV_TEST(test_glob_without_match_fails),
		cmocka_unit_test(test_malformed_arguments_fail),
		cmocka_unit_test(test_oversized_range_fails),
		TB_ENV_TEST(test_open_records_shards),
		TB_ENV_TEST(test_open_failures_name_the_shard),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
