/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tar_errors.c - archives tar_scan() must refuse, and where it says
 * they went wrong.
 *
 * When the scanner cannot tell where the next header is, continuing would
 * index garbage as members, so it stops with -EINVAL; the offset in
 * struct tar_error is what the user is told to look at, so every test
 * checks that it names the header at fault, not its neighbour.  Bad
 * headers follow a good member, so that an offset of 0 cannot pass by
 * accident, and that member must have been reported before the failure.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tarbuild.h"

static void test_corrupt_checksum(void **state)
{
	struct tb a = { 0 };
	uint64_t bad;

	tb_file(&a, "ok", "1");
	bad = tb_file(&a, "flipped", "2");
	a.data[bad + 10] ^= 0x01;		/* one bit of the name */
	tb_end(&a);
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);
}

static void test_garbage_checksum_field(void **state)
{
	struct tb a = { 0 };
	uint64_t bad;

	tb_file(&a, "ok", "1");
	bad = tb_file(&a, "x", "2");
	memcpy(a.data + bad + TB_OFF_CHKSUM, "zzzzzz\0 ", 8);
	tb_end(&a);
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);
}

static void test_not_a_tar_file(void **state)
{
	struct tb a = { 0 };
	char text[2 * TAR_BLOCK_SIZE];

	memset(text, 'A', sizeof(text));
	tb_bytes(&a, text, sizeof(text));
	tb_expect_einval(&a, 0, 0);
	tb_free(&a);
}

/* Old Sun and BSD tars summed the header as signed chars. */
static void test_signed_checksum_accepted(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE];
	int sum = 0;

	tb_header(blk, TB_USTAR, "caf\xc3\xa9", '0', 0);
	memset(blk + TB_OFF_CHKSUM, ' ', 8);
	for (int i = 0; i < TAR_BLOCK_SIZE; i++)
		sum += (signed char)blk[i];
	snprintf(blk + TB_OFF_CHKSUM, 8, "%06o", sum);
	blk[TB_OFF_CHKSUM + 7] = ' ';
	tb_bytes(&a, blk, sizeof(blk));
	tb_end(&a);
	tb_scan(&r, &a);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	tb_assert_member(&r.m[0], "caf\xc3\xa9", TAR_FILE, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_truncated_header(void **state)
{
	struct tb a = { 0 };
	char blk[TAR_BLOCK_SIZE];
	uint64_t cut;

	tb_file(&a, "ok", "1");
	cut = a.len;
	tb_header(blk, TB_USTAR, "half", '0', 0);
	tb_checksum(blk);
	tb_bytes(&a, blk, 200);			/* the file ends in the header */
	tb_expect_einval(&a, cut, 1);
	tb_free(&a);
}

static void test_member_data_past_eof(void **state)
{
	struct tb a = { 0 };
	char blk[TAR_BLOCK_SIZE];
	uint64_t bad;

	tb_file(&a, "ok", "1");
	bad = a.len;
	tb_header(blk, TB_USTAR, "long", '0', 2000);
	tb_block(&a, blk);
	tb_data(&a, "only a little", 13);	/* 512 of the 2000 bytes */
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);

	/* the same size given by a PAX record: the member's header is named */
	tb_file(&a, "ok", "1");
	tb_pax_header(&a, 'x', TB_LIST("size", "2000"));
	bad = tb_file(&a, "long", "");
	tb_zeros(&a, 2);
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);
}

static void test_bad_size_fields(void **state)
{
	static const int64_t sizes[] = { -1, INT64_MIN };
	struct tb a = { 0 };
	char blk[TAR_BLOCK_SIZE];
	uint64_t bad;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		tb_file(&a, "ok", "1");
		bad = a.len;
		tb_header(blk, TB_GNU, "negative", '0', 0);
		tb_base256(blk + TB_OFF_SIZE, 12, sizes[i]);
		tb_block(&a, blk);
		tb_end(&a);
		tb_expect_einval(&a, bad, 1);
		tb_free(&a);
	}
	/* base-256 overflow: bits above the low 64 */
	tb_file(&a, "ok", "1");
	bad = a.len;
	tb_header(blk, TB_GNU, "huge", '0', 0);
	memcpy(blk + TB_OFF_SIZE, "\x80\0\x01\0\0\0\0\0\0\0\0\0", 12);
	tb_block(&a, blk);
	tb_end(&a);
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);
	/* octal garbage */
	tb_file(&a, "ok", "1");
	bad = a.len;
	tb_header(blk, TB_USTAR, "junk", '0', 0);
	memcpy(blk + TB_OFF_SIZE, "12345678901x", 12);
	tb_block(&a, blk);
	tb_end(&a);
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);
}

static void test_metadata_size_past_eof(void **state)
{
	struct tb a = { 0 };
	char blk[TAR_BLOCK_SIZE];
	uint64_t bad;

	tb_file(&a, "ok", "1");
	bad = a.len;
	tb_header(blk, TB_GNU, "././@LongLink", 'L', 5000);
	tb_block(&a, blk);
	tb_data(&a, "name", 5);
	tb_end(&a);
	tb_expect_einval(&a, bad, 1);
	tb_free(&a);
}

/* "ok", then a @type header claiming @size bytes, in a file that has them. */
static void expect_meta_size(char type, uint64_t size, int rc)
{
	struct tb a = { 0 };
	char blk[TAR_BLOCK_SIZE];
	struct tb_scan r;
	uint64_t meta;
	int fd;

	tb_file(&a, "ok", "1");
	meta = a.len;
	tb_header(blk, type == 'L' ? TB_GNU : TB_USTAR, "meta", type, size);
	tb_block(&a, blk);
	fd = tb_open(&a);
	/* a body of zeros: an empty name, or PAX records of NUL padding */
	assert_int_equal(ftruncate(fd, (off_t)(a.len + size + 2048)), 0);
	tb_scan_fd(&r, fd, a.len + size + 2048);
	close(fd);
	assert_int_equal(r.rc, rc);
	if (rc)
		assert_int_equal(r.err.offset, meta);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_metadata_limit(void **state)
{
	expect_meta_size('L', TAR_META_MAX, 0);		/* the limit itself */
	expect_meta_size('L', TAR_META_MAX + 1, -EINVAL);
	expect_meta_size('K', TAR_META_MAX + 1, -EINVAL);
	expect_meta_size('x', TAR_META_MAX + 1, -EINVAL);
	expect_meta_size('g', TAR_META_MAX + 1, -EINVAL);
}

static ssize_t failing_read(struct shard_source *src, void *buf, size_t len,
			    uint64_t off)
{
	return -EIO;
}

/* A source whose storage fails: the scan says where, with -EIO. */
static void test_read_error_is_eio(void **state)
{
	static const struct shard_source_ops ops = { .read = failing_read };
	struct shard_source src = { .ops = &ops, .size = 10240 };
	struct tb_scan r;

	tb_scan_source(&r, &src);
	assert_int_equal(r.rc, -EIO);
	assert_int_equal(r.err.offset, 0);
	assert_non_null(strstr(r.err.msg, "read failed"));
	tb_scan_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_corrupt_checksum),
		cmocka_unit_test(test_garbage_checksum_field),
		cmocka_unit_test(test_not_a_tar_file),
		cmocka_unit_test(test_signed_checksum_accepted),
		cmocka_unit_test(test_truncated_header),
		cmocka_unit_test(test_member_data_past_eof),
		cmocka_unit_test(test_bad_size_fields),
		cmocka_unit_test(test_metadata_size_past_eof),
		cmocka_unit_test(test_metadata_limit),
		cmocka_unit_test(test_read_error_is_eio),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
