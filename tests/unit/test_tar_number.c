/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tar_number.c - tar_parse_number(), the decoder of every numeric
 * header field.
 *
 * Sizes decide where the next header is, so a field read wrongly either
 * loses the rest of a shard or serves the wrong bytes.  Writers disagree
 * on padding (leading spaces, trailing NUL or space, no terminator at
 * all) and GNU tar switches to base-256 for values octal cannot hold:
 * sizes of 8 GiB and more, negative times.  Anything else must be refused.
 */
#include <errno.h>
#include <string.h>

#include "tarbuild.h"

/* Parse a field given as a string literal (its NULs included). */
#define PARSE(lit, out) tar_parse_number(lit, sizeof(lit) - 1, out)

static void test_octal_padding_variants(void **state)
{
	int64_t v;

	assert_int_equal(PARSE("0000644\0", &v), 0);		/* GNU */
	assert_int_equal(v, 0644);
	assert_int_equal(PARSE("   644 \0", &v), 0);		/* old BSD */
	assert_int_equal(v, 0644);
	assert_int_equal(PARSE("  644\0\0\0", &v), 0);
	assert_int_equal(v, 0644);
	assert_int_equal(PARSE("00000644", &v), 0);		/* unterminated */
	assert_int_equal(v, 0644);
	assert_int_equal(PARSE("01234567 \0  ", &v), 0);	/* mixed tail */
	assert_int_equal(v, 01234567);
}

static void test_octal_empty_fields_are_zero(void **state)
{
	int64_t v = -1;

	assert_int_equal(PARSE("\0\0\0\0\0\0\0\0", &v), 0);
	assert_int_equal(v, 0);
	v = -1;
	assert_int_equal(PARSE("        ", &v), 0);
	assert_int_equal(v, 0);
}

static void test_octal_largest_values(void **state)
{
	int64_t v;

	/* 11 digits: the ustar size limit, 8 GiB - 1 */
	assert_int_equal(PARSE("77777777777\0", &v), 0);
	assert_int_equal(v, (INT64_C(1) << 33) - 1);
	/* 12 digits and no terminator, as star writes */
	assert_int_equal(PARSE("777777777777", &v), 0);
	assert_int_equal(v, (INT64_C(1) << 36) - 1);
	/* 21 digits: exactly INT64_MAX */
	assert_int_equal(PARSE("777777777777777777777", &v), 0);
	assert_int_equal(v, INT64_MAX);
}

static void test_octal_overflow_refused(void **state)
{
	int64_t v;

	assert_int_equal(PARSE("1000000000000000000000", &v), -EINVAL); /* 2^63 */
	assert_int_equal(PARSE("7777777777777777777777", &v), -EINVAL);
}

static void test_octal_garbage_refused(void **state)
{
	static const char *const bad[] = {
		"0000648\0",	/* not an octal digit */
		"0000644x",	/* digits not ended by NUL or space */
		"-0000644",	/* no sign in octal */
		"+0000644",
		"0x1f\0\0\0\0",
		"  \t644\0\0",	/* only spaces lead */
	};
	int64_t v;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (tar_parse_number(bad[i], 8, &v) != -EINVAL)
			fail_msg("field %zu parsed as %lld", i, (long long)v);
}

/* The number ends at its NUL or space; GNU tar ignores what follows. */
static void test_octal_ends_at_terminator(void **state)
{
	int64_t v;

	assert_int_equal(PARSE("12 34\0\0\0", &v), 0);
	assert_int_equal(v, 012);
	assert_int_equal(PARSE("644\0x\0\0\0", &v), 0);
	assert_int_equal(v, 0644);
}

static void test_base256_positive(void **state)
{
	char f[12];
	int64_t v;

	tb_base256(f, sizeof(f), INT64_C(9) << 30);		/* 9 GiB */
	assert_int_equal(tar_parse_number(f, sizeof(f), &v), 0);
	assert_int_equal(v, INT64_C(9) << 30);
	tb_base256(f, sizeof(f), INT64_MAX);
	assert_int_equal(tar_parse_number(f, sizeof(f), &v), 0);
	assert_int_equal(v, INT64_MAX);
	tb_base256(f, 8, UINT32_MAX + INT64_C(1));		/* an 8-byte uid */
	assert_int_equal(tar_parse_number(f, 8, &v), 0);
	assert_int_equal(v, UINT32_MAX + INT64_C(1));
}

static void test_base256_negative(void **state)
{
	static const int64_t values[] = { -1, -2, -86400, -(INT64_C(1) << 40),
					  INT64_MIN };
	char f[12];
	int64_t v;

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		tb_base256(f, sizeof(f), values[i]);
		assert_int_equal(tar_parse_number(f, sizeof(f), &v), 0);
		assert_int_equal(v, values[i]);
	}
	/* in an 8-byte field the sign byte itself carries the value */
	tb_base256(f, 8, -2);
	assert_int_equal(tar_parse_number(f, 8, &v), 0);
	assert_int_equal(v, -2);
	memcpy(f, "\xff\x00\x00\x00\x00\x00\x00\x00", 8);
	assert_int_equal(tar_parse_number(f, 8, &v), 0);
	assert_int_equal(v, -(INT64_C(1) << 56));
}

static void test_base256_overflow_refused(void **state)
{
	char f[12];
	int64_t v;

	/* 2^63 in the low eight bytes: does not fit int64_t */
	memcpy(f, "\x80\0\0\0\x80\0\0\0\0\0\0\0", 12);
	assert_int_equal(tar_parse_number(f, 12, &v), -EINVAL);
	/* a set bit above the low eight bytes */
	memcpy(f, "\x80\0\0\x01\0\0\0\0\0\0\0\0", 12);
	assert_int_equal(tar_parse_number(f, 12, &v), -EINVAL);
	/* negative below INT64_MIN */
	memcpy(f, "\xff\xff\xff\xff\x7f\xff\xff\xff\xff\xff\xff\xff", 12);
	assert_int_equal(tar_parse_number(f, 12, &v), -EINVAL);
	memcpy(f, "\xff\xff\xfe\xff\xff\xff\xff\xff\xff\xff\xff\xff", 12);
	assert_int_equal(tar_parse_number(f, 12, &v), -EINVAL);
}

static void test_other_high_bytes_are_not_base256(void **state)
{
	/* only 0x80 and 0xff introduce base-256; 0x81 is garbage */
	int64_t v;

	assert_int_equal(tar_parse_number("\x81\0\0\0\0\0\0\x01", 8, &v), -EINVAL);
	assert_int_equal(tar_parse_number("\xfe\xff\xff\xff\xff\xff\xff\xff", 8, &v),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_octal_padding_variants),
		cmocka_unit_test(test_octal_empty_fields_are_zero),
		cmocka_unit_test(test_octal_largest_values),
		cmocka_unit_test(test_octal_overflow_refused),
		cmocka_unit_test(test_octal_garbage_refused),
		cmocka_unit_test(test_octal_ends_at_terminator),
		cmocka_unit_test(test_base256_positive),
		cmocka_unit_test(test_base256_negative),
		cmocka_unit_test(test_base256_overflow_refused),
		cmocka_unit_test(test_other_high_bytes_are_not_base256),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
