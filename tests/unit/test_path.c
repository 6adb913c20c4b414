/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_path.c - path_normalise(), the gate between untrusted member names
 * and the namespace; and path_is_shard_name(), which listed names are
 * shards.
 *
 * Every name in the index went through it, so it decides both what path a
 * member appears under (it must agree with GNU tar's extraction: leading
 * '/', "./", "//" and trailing '/' vanish) and what is refused outright
 * ('..', NUL, components Linux could not look up).  Each verdict is pinned
 * down here, including the 255/256-byte boundary and non-UTF-8 bytes.
 */
#include <string.h>

#include "tarbuild.h"
#include "shardfs/path.h"

struct norm_case {
	const char *in;			/* member name */
	enum path_verdict verdict;	/* expected verdict */
	const char *out;		/* expected result when PATH_VALID */
};

/* Normalise a copy of @in (@len bytes); return the verdict, result in @out. */
static enum path_verdict normalise(const char *in, size_t len, char *out,
				   size_t *out_len)
{
	enum path_verdict v;

	memcpy(out, in, len);
	*out_len = len;
	v = path_normalise(out, out_len);
	assert_true(*out_len <= len);
	return v;
}

static void check_cases(const struct norm_case *c, size_t n)
{
	char buf[1024];

	for (size_t i = 0; i < n; i++) {
		size_t len;
		enum path_verdict v = normalise(c[i].in, strlen(c[i].in), buf, &len);

		if (v != c[i].verdict)
			fail_msg("'%s': verdict %d, expected %d", c[i].in, v,
				 c[i].verdict);
		if (v == PATH_VALID &&
		    (len != strlen(c[i].out) || memcmp(buf, c[i].out, len)))
			fail_msg("'%s' -> '%.*s', expected '%s'", c[i].in,
				 (int)len, buf, c[i].out);
		if (v == PATH_IS_ROOT)
			assert_int_equal(len, 0);
	}
}

static void test_canonical_forms(void **state)
{
	static const struct norm_case cases[] = {
		{ "a", PATH_VALID, "a" },
		{ "a/b/c", PATH_VALID, "a/b/c" },
		{ "./x", PATH_VALID, "x" },
		{ "/abs/path", PATH_VALID, "abs/path" },
		{ "/a//b/./c/", PATH_VALID, "a/b/c" },
		{ "dir/", PATH_VALID, "dir" },
		{ "dir///", PATH_VALID, "dir" },
		{ "././a/./", PATH_VALID, "a" },
		{ "a/.", PATH_VALID, "a" },
		{ "...", PATH_VALID, "..." },		/* only ".." is special */
		{ "..a/b..", PATH_VALID, "..a/b.." },
		{ ".hidden/.x", PATH_VALID, ".hidden/.x" },
		{ "a b/c\td", PATH_VALID, "a b/c\td" },
	};

	check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_root_and_empty(void **state)
{
	static const struct norm_case cases[] = {
		{ ".", PATH_IS_ROOT, "" },
		{ "./", PATH_IS_ROOT, "" },
		{ "/", PATH_IS_ROOT, "" },
		{ "//", PATH_IS_ROOT, "" },
		{ "/././/", PATH_IS_ROOT, "" },
	};
	size_t len = 0;
	char c = 'x';

	check_cases(cases, sizeof(cases) / sizeof(cases[0]));
	assert_int_equal(path_normalise(&c, &len), PATH_IS_EMPTY);
}

static void test_dotdot_refused(void **state)
{
	static const struct norm_case cases[] = {
		{ "..", PATH_HAS_DOTDOT, NULL },
		{ "../etc/passwd", PATH_HAS_DOTDOT, NULL },
		{ "a/../b", PATH_HAS_DOTDOT, NULL },
		{ "a/..", PATH_HAS_DOTDOT, NULL },
		{ "a/../", PATH_HAS_DOTDOT, NULL },
		{ "/..", PATH_HAS_DOTDOT, NULL },
		{ "./../x", PATH_HAS_DOTDOT, NULL },
	};

	check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_nul_refused(void **state)
{
	char buf[8];
	size_t len;

	assert_int_equal(normalise("a\0b", 3, buf, &len), PATH_HAS_NUL);
	assert_int_equal(normalise("ab\0", 3, buf, &len), PATH_HAS_NUL);
	assert_int_equal(normalise("\0", 1, buf, &len), PATH_HAS_NUL);
}

/* "d/" followed by one component of @n bytes of 'x', and maybe "/". */
static size_t long_name(char *buf, size_t n, bool slash)
{
	memcpy(buf, "d/", 2);
	memset(buf + 2, 'x', n);
	if (slash)
		buf[2 + n] = '/';
	return 2 + n + slash;
}

static void test_component_length_limit(void **state)
{
	char in[600], out[600];
	size_t len;

	len = long_name(in, PATH_COMPONENT_MAX, true);
	assert_int_equal(normalise(in, len, out, &len), PATH_VALID);
	assert_int_equal(len, 2 + PATH_COMPONENT_MAX);	/* slash dropped */
	len = long_name(in, PATH_COMPONENT_MAX + 1, false);
	assert_int_equal(normalise(in, len, out, &len), PATH_TOO_LONG);
	len = long_name(in, PATH_COMPONENT_MAX + 1, true);
	assert_int_equal(normalise(in, len, out, &len), PATH_TOO_LONG);
	/* a long path of short components is fine */
	for (len = 0; len < 590; len += 2)
		memcpy(in + len, "a/", 2);
	assert_int_equal(normalise(in, len, out, &len), PATH_VALID);
	assert_int_equal(len, 589);
}

static void test_bytes_are_not_decoded(void **state)
{
	static const struct norm_case cases[] = {
		{ "\xff\xfe/\x80", PATH_VALID, "\xff\xfe/\x80" },	/* not UTF-8 */
		{ "caf\xc3\xa9//./x", PATH_VALID, "caf\xc3\xa9/x" },
		{ "\xc0\xae\xc0\xae/x", PATH_VALID, "\xc0\xae\xc0\xae/x" }, /* overlong ".." */
		{ "a\\..\\b", PATH_VALID, "a\\..\\b" },	/* '\\' is a byte */
	};

	check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_verdict_strings(void **state)
{
	static const enum path_verdict all[] = {
		PATH_VALID, PATH_IS_ROOT, PATH_IS_EMPTY, PATH_HAS_DOTDOT,
		PATH_HAS_NUL, PATH_TOO_LONG,
	};
	const size_t n = sizeof(all) / sizeof(all[0]);

	for (size_t i = 0; i < n; i++) {
		assert_non_null(path_verdict_str(all[i]));
		assert_true(strlen(path_verdict_str(all[i])) > 0);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(path_verdict_str(all[i]),
						path_verdict_str(all[j]));
	}
}

/*
 * WebDataset's rule, the key is the path up to the first dot of the last
 * component, with shardfs's reading of a leading dot: part of the name.
 */
static void test_sample_key(void **state)
{
	static const struct {
		const char *path;	/* normalised member path */
		const char *key;	/* its sample key */
	} cases[] = {
		{ "0001.jpg", "0001" },
		{ "0001.seg.png", "0001" },		/* first dot */
		{ "a/b/0001.cls", "a/b/0001" },
		{ "README", "README" },			/* no dot */
		{ "a/README", "a/README" },
		{ "x.", "x" },				/* trailing dot */
		{ ".x.txt", ".x" },			/* hidden file */
		{ "a/.x.txt", "a/.x" },
		{ ".cls", ".cls" },			/* a name, no extension */
		{ "a/.hidden", "a/.hidden" },
		{ "..x", "." },				/* dot after the leading one */
		{ "a/..x.y", "a/." },
		{ ".", "." },				/* one byte */
		{ "a.d/x.y", "a.d/x" },			/* dots in directories */
		{ "a.d/b.e/noext", "a.d/b.e/noext" },
		{ "a.d/.x.y.z", "a.d/.x" },
		{ "", "" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = path_sample_key_len(cases[i].path,
						 strlen(cases[i].path));

		if (len != strlen(cases[i].key) ||
		    memcmp(cases[i].path, cases[i].key, len))
			fail_msg("key of '%s': '%.*s', expected '%s'",
				 cases[i].path, (int)len, cases[i].path,
				 cases[i].key);
	}
}

/* Which listed names are shards: the same rule for a local directory and
 * an S3 prefix (shardfs-pack --compress writes every one of them). */
static void test_shard_names(void **state)
{
	static const struct { const char *name; bool shard; } cases[] = {
		{ "shard-000000.tar", true }, { "s.tar.gz", true },
		{ "s.tgz", true }, { "s.tar.zst", true },
		{ "prefix/deep/s.tar", true },		/* an S3 key */
		{ ".tar", false },			/* nothing before it */
		{ "s.tar.bz2", false }, { "s.zst", false }, { "s.gz", false },
		{ "s.TAR", false },			/* case counts */
		{ "s.tar.idx", false }, { "tar", false }, { "", false },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (path_is_shard_name(cases[i].name) != cases[i].shard)
			fail_msg("'%s': expected %s", cases[i].name,
				 cases[i].shard ? "a shard" : "not a shard");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_canonical_forms),
		cmocka_unit_test(test_root_and_empty),
		cmocka_unit_test(test_dotdot_refused),
		cmocka_unit_test(test_nul_refused),
		cmocka_unit_test(test_component_length_limit),
		cmocka_unit_test(test_bytes_are_not_decoded),
		cmocka_unit_test(test_verdict_strings),
		cmocka_unit_test(test_sample_key),
		cmocka_unit_test(test_shard_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
