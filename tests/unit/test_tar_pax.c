/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tar_pax.c - POSIX pax extended headers in tar_scan(): 'x' records
 * for the next member, 'g' records for all later ones, and malformed
 * record bodies.
 *
 * Python's tarfile and GNU tar --format=posix write every long name,
 * large id and sub-second time as PAX records, so they are the common
 * case for WebDataset shards.  The record framing ("LEN key=value\n",
 * LEN counting itself) is easy to get wrong in either direction: a lax
 * parser applies attributes from bytes that are not in the record, a
 * strict one refuses valid shards.  Errors must name the 'x' or 'g'
 * header's offset.
 */
#include <string.h>

#include "tarbuild.h"

static void test_x_overrides_header_fields(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char name[301], target[201];
	uint64_t member, next;

	memset(name, 'n', 300);
	name[300] = '\0';
	memset(target, 't', 200);
	target[200] = '\0';
	tb_pax_header(&a, 'x', TB_LIST(
		"path", name,
		"size", "2000",				/* the header says 0 */
		"mtime", "1700000000.123456789",
		"uid", "4000000000",			/* too big for octal */
		"gid", "5",
		"uname", "alice", "gname", "staff",	/* names: not served */
		"SCHILY.xattr.user.k", "v"));		/* unknown: ignored */
	member = tb_add(&a, "header-name", '0', NULL, 0);
	tb_zeros(&a, 4);			/* the 2000 bytes, padded */
	next = a.len;
	tb_pax_header(&a, 'x', TB_LIST("linkpath", target));
	tb_link(&a, "ln", '2', "short");
	tb_file(&a, "plain", "p");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 3);
	tb_assert_member(&r.m[0], name, TAR_FILE, 2000);
	assert_int_equal(r.m[0].header_offset, 0);	/* the 'x' header */
	assert_int_equal(r.m[0].data_offset, member + TAR_BLOCK_SIZE);
	assert_int_equal(r.m[0].mtime_sec, 1700000000);
	assert_int_equal(r.m[0].mtime_nsec, 123456789);
	assert_int_equal(r.m[0].uid, 4000000000u);
	assert_int_equal(r.m[0].gid, 5);
	tb_assert_member(&r.m[1], "ln", TAR_SYMLINK, 0);
	assert_int_equal(r.m[1].header_offset, next);	/* PAX size framed it */
	assert_string_equal(r.m[1].link, target);
	/* 'x' records applied to one member only */
	tb_assert_member(&r.m[2], "plain", TAR_FILE, 1);
	assert_int_equal(r.m[2].uid, TB_UID);
	assert_int_equal(r.m[2].mtime_nsec, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_x_mtime_fractions(void **state)
{
	static const struct { const char *value; int64_t sec; uint32_t nsec; } t[] = {
		{ "1.5", 1, 500000000 },
		{ "0.000000001", 0, 1 },
		{ "1700000000.123456789999", 1700000000, 123456789 },	/* cut */
		{ "42.", 42, 0 },
		{ "-5", -5, 0 },
		{ "-1.25", -2, 750000000 },	/* -1.25 s = -2 s + 0.75 s */
		{ "-0.5", -1, 500000000 },
		{ "-0.000000001", -1, 999999999 },
	};
	const size_t n = sizeof(t) / sizeof(t[0]);
	struct tb a = { 0 };
	struct tb_scan r;

	for (size_t i = 0; i < n; i++) {
		tb_pax_header(&a, 'x', TB_LIST("mtime", t[i].value));
		tb_file(&a, t[i].value, "");
	}
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, n);
	for (size_t i = 0; i < n; i++) {
		if (r.m[i].mtime_sec != t[i].sec || r.m[i].mtime_nsec != t[i].nsec)
			fail_msg("mtime=%s read as %lld.%09u", t[i].value,
				 (long long)r.m[i].mtime_sec, r.m[i].mtime_nsec);
	}
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_g_applies_to_all_later_members(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;

	tb_file(&a, "before", "");
	tb_pax_header(&a, 'g', TB_LIST("uid", "7"));
	tb_pax_header(&a, 'g', TB_LIST("mtime", "100.5"));	/* 'g's add up */
	tb_file(&a, "a", "");
	tb_pax_header(&a, 'x', TB_LIST("uid", "8"));		/* 'x' beats 'g' */
	tb_file(&a, "b", "");
	tb_file(&a, "c", "");
	tb_pax_header(&a, 'g', TB_LIST("uid", "11"));	/* and replaces */
	tb_file(&a, "d", "");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 5);
	assert_int_equal(r.m[0].uid, TB_UID);
	assert_int_equal(r.m[0].mtime_sec, TB_MTIME);
	assert_int_equal(r.m[1].uid, 7);
	assert_int_equal(r.m[1].mtime_sec, 100);
	assert_int_equal(r.m[1].mtime_nsec, 500000000);
	assert_int_equal(r.m[2].uid, 8);
	assert_int_equal(r.m[2].mtime_sec, 100);
	assert_int_equal(r.m[3].uid, 7);
	assert_int_equal(r.m[4].uid, 11);
	assert_int_equal(r.m[4].mtime_nsec, 500000000);	/* still applies */
	tb_scan_free(&r);
	tb_free(&a);
}

/*
 * Scan "ok", a @type header holding @len bytes of @body, then "victim";
 * expect the scan to stop at the metadata header.  Failures are reported
 * at @line of this file, the line of the BAD_BODY or BAD_VALUE.
 */
static void expect_bad_body(char type, const char *body, size_t len, int line)
{
	struct tb a = { 0 };
	uint64_t meta;

	tb_file(&a, "ok", "1");
	meta = tb_meta(&a, type, body, len);
	tb_file(&a, "victim", "2");
	tb_end(&a);
	tb_expect_einval_at(&a, meta, 1, __FILE__, line);
	tb_free(&a);
}

#define BAD_BODY(type, lit) expect_bad_body(type, lit, sizeof(lit) - 1, __LINE__)

static void test_record_framing_errors(void **state)
{
	BAD_BODY('x', "99 path=a\n");		/* longer than the body */
	BAD_BODY('x', "5 path=abc\n");		/* shorter than the record */
	BAD_BODY('x', "11 path=abc ");		/* does not end in '\n' */
	BAD_BODY('x', "ab path=x\n");		/* length not a number */
	BAD_BODY('x', "-9 path=x\n");
	BAD_BODY('x', "10path=abc\n");		/* no space after length */
	BAD_BODY('x', "10 pathab\n");		/* no '=' */
	BAD_BODY('x', "4 a\n");			/* no '=' in a short record */
	BAD_BODY('x', "3 \n");			/* an empty record */
	BAD_BODY('x', "0 \n");
	BAD_BODY('x', "12 path=abc\n" "12 a=bcdef\n");	/* second one short */
	BAD_BODY('g', "99 uid=1\n");
}

/* Expect a single record key=value in an 'x' header to be refused. */
static void expect_bad_value(const char *key, const char *value, int line)
{
	struct tb x = { 0 };

	tb_pax(&x, key, value);
	expect_bad_body('x', x.data, x.len, line);
	tb_free(&x);
}

#define BAD_VALUE(key, value) expect_bad_value(key, value, __LINE__)

/* "size" says where the next header is: a bad one stops the scan. */
static void test_bad_size_value_is_an_error(void **state)
{
	BAD_VALUE("size", "12a");
	BAD_VALUE("size", "-1");
	BAD_VALUE("size", "");
	BAD_VALUE("size", "99999999999999999999");	/* > 2^63 */
}

/*
 * A bad time or id does not move the next header, so it is an oddity:
 * warned about at the 'x' header, and the header's own value is kept.
 */
static void test_bad_time_and_id_values_are_ignored(void **state)
{
	static const char *const kv[][2] = {
		{ "uid", "4294967296" },	/* > 2^32 - 1 */
		{ "uid", "-1" }, { "gid", "x" },
		{ "mtime", "abc" }, { "mtime", "1e9" }, { "mtime", ".5" },
	};

	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
		struct tb a = { 0 };
		struct tb_scan r;
		uint64_t x = tb_pax_header(&a, 'x', TB_LIST(kv[i][0], kv[i][1]));

		tb_file(&a, "m", "");
		tb_end(&a);
		tb_scan(&r, &a);
		if (r.rc || r.nr != 1 || r.nr_warnings != 1)
			fail_msg("%s=%s: rc %d, %zu members, %zu warnings", kv[i][0],
				 kv[i][1], r.rc, r.nr, r.nr_warnings);
		assert_int_equal(r.warn_offset[0], x);
		assert_int_equal(r.m[0].uid, TB_UID);
		assert_int_equal(r.m[0].gid, TB_GID);
		assert_int_equal(r.m[0].mtime_sec, TB_MTIME);
		tb_scan_free(&r);
		tb_free(&a);
	}
}

/*
 * A record whose one-digit length runs past the end of the body must be
 * refused like any other.  Here the bytes past the body are left over
 * from an earlier, longer PAX header, and happen to complete a record.
 */
static void test_short_last_record_not_completed_by_stale_bytes(void **state)
{
	struct tb a = { 0 };
	uint64_t bad;

	tb_meta(&a, 'x', "9 abc=de\n", 9);
	tb_file(&a, "first", "1");
	bad = tb_meta(&a, 'x', "9 p", 3);	/* claims 9 bytes, has 3 */
	tb_file(&a, "second", "2");
	tb_end(&a);
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);
}

/*
 * The same at the end of a body that fills the scanner's buffer: the
 * record's claimed end lies outside the allocation (run under valgrind).
 */
static void test_short_last_record_at_buffer_end(void **state)
{
	struct tb x = { 0 };
	char filler[241];

	memset(filler, 'c', 240);
	filler[240] = '\0';
	tb_pax(&x, "comment", filler);		/* 253 bytes */
	assert_int_equal(x.len, 253);
	tb_bytes(&x, "9 ", 2);			/* 255: the buffer holds 256 */
	expect_bad_body('x', x.data, x.len, __LINE__);
	tb_free(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_x_overrides_header_fields),
		cmocka_unit_test(test_x_mtime_fractions),
		cmocka_unit_test(test_g_applies_to_all_later_members),
		cmocka_unit_test(test_record_framing_errors),
		cmocka_unit_test(test_bad_size_value_is_an_error),
		cmocka_unit_test(test_bad_time_and_id_values_are_ignored),
		cmocka_unit_test(test_short_last_record_not_completed_by_stale_bytes),
		cmocka_unit_test(test_short_last_record_at_buffer_end),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
