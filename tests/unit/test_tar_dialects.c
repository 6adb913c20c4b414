/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tar_dialects.c - tar_scan() on every header dialect a shard may use,
 * and on the ways an archive may end.
 *
 * Shards come from many writers (GNU tar, bsdtar, star, Python's tarfile,
 * webdataset's own writer), so the scanner must read v7, ustar with its
 * 155-byte prefix, star with its 131-byte one, GNU long names and
 * base-256 numbers, and must tell the end of an archive from a stray zero
 * block.  The archives are built byte by byte (tarbuild.h) so each test
 * shows exactly which header layout it relies on.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tarbuild.h"

static void test_v7_file_dir_and_links(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE];

	tb_header(blk, TB_V7, "v7file", '\0', 5);
	tb_octal(blk + TB_OFF_MODE, 8, 0600);
	tb_octal(blk + TB_OFF_UID, 8, 7);
	tb_octal(blk + TB_OFF_GID, 8, 8);
	tb_octal(blk + TB_OFF_MTIME, 12, 123456);
	memcpy(blk + TB_OFF_PREFIX, "junk", 4);	/* no prefix without magic */
	tb_block(&a, blk);
	tb_data(&a, "hello", 5);
	tb_header(blk, TB_V7, "v7dir/", '\0', 0);	/* a dir by its slash */
	tb_block(&a, blk);
	tb_header(blk, TB_V7, "v7link", '1', 0);
	tb_field(blk + TB_OFF_LINKNAME, 100, "v7file");
	tb_block(&a, blk);
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 3);
	tb_assert_member(&r.m[0], "v7file", TAR_FILE, 5);
	assert_int_equal(r.m[0].mode, 0600);
	assert_int_equal(r.m[0].uid, 7);
	assert_int_equal(r.m[0].gid, 8);
	assert_int_equal(r.m[0].mtime_sec, 123456);
	assert_int_equal(r.m[0].mtime_nsec, 0);
	assert_int_equal(r.m[0].header_offset, 0);
	assert_int_equal(r.m[0].data_offset, 512);
	assert_null(r.m[0].extents);
	tb_assert_member(&r.m[1], "v7dir/", TAR_DIR, 0);
	assert_int_equal(r.m[1].header_offset, 1024);
	tb_assert_member(&r.m[2], "v7link", TAR_HARDLINK, 0);
	assert_string_equal(r.m[2].link, "v7file");
	assert_int_equal(r.nr_warnings, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

/*
 * A trailing slash makes a regular-typed member a directory wherever the
 * name came from, and a directory stores no data whatever its size field
 * says (GNU tar reads v7 archives so).
 */
static void test_trailing_slash_directories(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE];
	uint64_t after;

	tb_header(blk, TB_V7, "sized/", '\0', 600);
	tb_block(&a, blk);
	tb_meta(&a, 'L', "long/dir/", 10);
	tb_add(&a, "long/dir", '0', NULL, 0);
	after = tb_file(&a, "after", "x");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 3);
	tb_assert_member(&r.m[0], "sized/", TAR_DIR, 0);
	tb_assert_member(&r.m[1], "long/dir/", TAR_DIR, 0);
	tb_assert_member(&r.m[2], "after", TAR_FILE, 1);
	assert_int_equal(r.m[2].header_offset, after);
	tb_scan_free(&r);
	tb_free(&a);
}

/*
 * A regular-typed "foo/" with two bytes of data, then "bar": a directory
 * whose data is skipped, then the file (GNU tar lists and extracts both).
 */
static void test_trailing_slash_member_with_data(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t bar;

	tb_add(&a, "foo/", '0', "ab", 2);
	bar = tb_file(&a, "bar", "hello");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[0], "foo/", TAR_DIR, 0);
	tb_assert_member(&r.m[1], "bar", TAR_FILE, 5);
	assert_int_equal(r.m[1].header_offset, bar);
	tb_scan_free(&r);
	tb_free(&a);
}

/* A header of @fmt whose prefix is @plen bytes of 'p' and name 100 of 'n'. */
static void full_prefix_header(char *blk, enum tb_format fmt, size_t plen)
{
	char name[101];

	memset(name, 'n', 100);
	name[100] = '\0';
	tb_header(blk, fmt, name, '0', 0);	/* name fills its field */
	memset(blk + TB_OFF_PREFIX, 'p', plen);
}

static void test_ustar_prefix_155(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE], want[300];

	full_prefix_header(blk, TB_USTAR, 155);	/* unterminated prefix */
	tb_block(&a, blk);
	tb_header(blk, TB_USTAR, "c", '0', 0);
	tb_field(blk + TB_OFF_PREFIX, 155, "a/b");
	tb_block(&a, blk);
	tb_end(&a);
	tb_scan(&r, &a);

	memset(want, 'p', 155);
	want[155] = '/';
	memset(want + 156, 'n', 100);
	want[256] = '\0';
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[0], want, TAR_FILE, 0);
	tb_assert_member(&r.m[1], "a/b/c", TAR_FILE, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_star_prefix_131(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE], want[300];

	full_prefix_header(blk, TB_STAR, 131);
	/* star keeps atime and ctime right after its shorter prefix */
	memcpy(blk + 476, "14000000000\0" "14000000000\0", 24);
	tb_block(&a, blk);
	tb_end(&a);
	tb_scan(&r, &a);

	memset(want, 'p', 131);
	want[131] = '/';
	memset(want + 132, 'n', 100);
	want[232] = '\0';
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	tb_assert_member(&r.m[0], want, TAR_FILE, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_gnu_header_has_no_prefix(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE];

	/* GNU keeps atime and ctime where ustar has its prefix */
	tb_header(blk, TB_GNU, "gnufile", '0', 0);
	memcpy(blk + TB_OFF_PREFIX, "14000000000\0" "14000000000\0", 24);
	tb_block(&a, blk);
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	tb_assert_member(&r.m[0], "gnufile", TAR_FILE, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

/* A string of @n copies of @c, with a NUL. */
static char *repeat(char *buf, char c, size_t n)
{
	memset(buf, c, n);
	buf[n] = '\0';
	return buf;
}

static void test_gnu_long_name_and_link(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char lname[400], llink[300];
	uint64_t first, second;

	memcpy(lname, "long/", 5);
	repeat(lname + 5, 'l', 300);
	repeat(llink, 't', 200);
	first = tb_meta(&a, 'L', lname, strlen(lname) + 1);	/* GNU adds a NUL */
	tb_meta(&a, 'K', llink, strlen(llink) + 1);
	tb_link(&a, "truncated-name", '2', "truncated-link");
	second = tb_meta(&a, 'K', llink, strlen(llink) + 1);
	tb_link(&a, "hard", '1', "short");
	tb_file(&a, "after", "x");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 3);
	tb_assert_member(&r.m[0], lname, TAR_SYMLINK, 0);
	assert_string_equal(r.m[0].link, llink);
	assert_int_equal(r.m[0].link_len, 200);
	assert_int_equal(r.m[0].header_offset, first);	/* the 'L' header */
	tb_assert_member(&r.m[1], "hard", TAR_HARDLINK, 0);
	assert_string_equal(r.m[1].link, llink);
	assert_int_equal(r.m[1].header_offset, second);
	/* the long names applied to their member only */
	tb_assert_member(&r.m[2], "after", TAR_FILE, 1);
	assert_int_equal(r.m[2].link_len, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

/*
 * A 9 GiB member ("big", base-256 size) then "after", in a sparse file;
 * @short_by bytes are cut off the end.  Returns the descriptor.
 */
static int nine_gib_archive(uint64_t *size, uint64_t short_by)
{
	const uint64_t big = UINT64_C(9) << 30;
	struct tb head = { 0 }, tail = { 0 };
	char blk[TAR_BLOCK_SIZE];
	int fd;

	tb_header(blk, TB_GNU, "big", '0', 0);
	tb_base256(blk + TB_OFF_SIZE, 12, (int64_t)big);
	tb_block(&head, blk);
	tb_file(&tail, "after", "x");
	tb_end(&tail);
	fd = tb_open(&head);
	assert_int_equal(pwrite(fd, tail.data, tail.len, 512 + big),
			 (ssize_t)tail.len);
	*size = 512 + big + tail.len - short_by;
	assert_int_equal(ftruncate(fd, (off_t)*size), 0);
	tb_free(&head);
	tb_free(&tail);
	return fd;
}

static void test_base256_size_over_8gib(void **state)
{
	uint64_t size;
	int fd = nine_gib_archive(&size, 0);
	struct tb_scan r;

	tb_scan_fd(&r, fd, size);
	close(fd);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[0], "big", TAR_FILE, UINT64_C(9) << 30);
	assert_int_equal(r.m[0].data_offset, 512);
	tb_assert_member(&r.m[1], "after", TAR_FILE, 1);
	assert_int_equal(r.m[1].header_offset, 512 + (UINT64_C(9) << 30));
	tb_scan_free(&r);
}

static void test_base256_size_past_eof(void **state)
{
	uint64_t size;
	/* cut the end marker, "after" and one block of "big" */
	int fd = nine_gib_archive(&size, 5 * TAR_BLOCK_SIZE);
	struct tb_scan r;

	tb_scan_fd(&r, fd, size);
	close(fd);
	assert_int_equal(r.rc, -EINVAL);
	assert_int_equal(r.err.offset, 0);
	assert_int_equal(r.nr, 0);
	tb_scan_free(&r);
}

static void test_base256_negative_mtime_and_big_ids(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE];

	tb_header(blk, TB_GNU, "old", '0', 0);
	tb_base256(blk + TB_OFF_MTIME, 12, -1000000);	/* 1969 */
	tb_base256(blk + TB_OFF_UID, 8, 3000000000);	/* > 2^31, octal fits */
	tb_base256(blk + TB_OFF_GID, 8, 70000);
	tb_block(&a, blk);
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	assert_int_equal(r.m[0].mtime_sec, -1000000);
	assert_int_equal(r.m[0].uid, 3000000000u);
	assert_int_equal(r.m[0].gid, 70000);
	assert_int_equal(r.nr_warnings, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_bad_attribute_fields_warn_and_read_zero(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE];
	uint64_t second;

	tb_file(&a, "fine", "");
	tb_header(blk, TB_GNU, "odd", '0', 0);
	memcpy(blk + TB_OFF_UID, "garbage", 8);
	tb_base256(blk + TB_OFF_GID, 8, UINT32_MAX + INT64_C(1));
	tb_base256(blk + TB_OFF_MODE, 8, -1);
	second = a.len;
	tb_block(&a, blk);
	tb_end(&a);
	tb_scan(&r, &a);

	/* framing is intact, so the member is kept */
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	assert_int_equal(r.m[1].uid, 0);
	assert_int_equal(r.m[1].gid, 0);
	assert_int_equal(r.m[1].mode, 0);
	assert_int_equal(r.m[1].mtime_sec, TB_MTIME);
	assert_int_equal(r.nr_warnings, 3);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(r.warn_offset[i], second);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_member_types(void **state)
{
	static const struct { char flag; enum tar_type type; } kinds[] = {
		{ '0', TAR_FILE }, { '\0', TAR_FILE }, { '7', TAR_FILE },
		{ '5', TAR_DIR }, { '2', TAR_SYMLINK }, { '1', TAR_HARDLINK },
		{ '3', TAR_SPECIAL }, { '4', TAR_SPECIAL }, { '6', TAR_SPECIAL },
	};
	const size_t n = sizeof(kinds) / sizeof(kinds[0]);
	struct tb a = { 0 };
	struct tb_scan r;

	for (size_t i = 0; i < n; i++) {
		char name[8] = { 'm', (char)('0' + i) };

		tb_add(&a, name, kinds[i].flag, NULL, 0);
	}
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(r.m[i].type, kinds[i].type);
		assert_int_equal(r.m[i].header_offset, i * TAR_BLOCK_SIZE);
	}
	assert_int_equal(r.nr_warnings, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_unknown_and_skipped_types(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t unknown, oldname;

	unknown = tb_add(&a, "vendor", 'Z', "0123456789", 10);
	tb_add(&a, "label", 'V', NULL, 0);		/* volume label: silent */
	oldname = tb_add(&a, "names", 'N', "x", 1);	/* old GNU long name */
	tb_add(&a, "dumpdir", 'D', "Yfile\0\0", 7);	/* GNU incremental dir */
	tb_file(&a, "last", "y");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 3);
	tb_assert_member(&r.m[0], "vendor", TAR_FILE, 10);	/* served */
	tb_assert_member(&r.m[1], "dumpdir", TAR_DIR, 0);
	tb_assert_member(&r.m[2], "last", TAR_FILE, 1);	/* framing kept */
	assert_int_equal(r.nr_warnings, 2);
	assert_int_equal(r.warn_offset[0], unknown);
	assert_int_equal(r.warn_offset[1], oldname);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_end_marker_stops_scan(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;

	tb_file(&a, "kept", "1");
	tb_end(&a);
	tb_file(&a, "ghost", "2");		/* after the end: ignored */
	tb_bytes(&a, "trailing garbage", 16);	/* not even a block */
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	tb_assert_member(&r.m[0], "kept", TAR_FILE, 1);
	assert_int_equal(r.nr_warnings, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_lone_zero_block_warns_and_continues(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t zero;

	tb_file(&a, "a", "1");
	zero = a.len;
	tb_zeros(&a, 1);
	tb_file(&a, "b", "2");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[1], "b", TAR_FILE, 1);
	assert_int_equal(r.nr_warnings, 1);
	assert_int_equal(r.warn_offset[0], zero);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_lone_zero_block_then_junk_ends_archive(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	char junk[TAR_BLOCK_SIZE];
	uint64_t zero;

	memset(junk, 'J', sizeof(junk));
	tb_file(&a, "a", "1");
	zero = a.len;
	tb_zeros(&a, 1);
	tb_bytes(&a, junk, sizeof(junk));	/* not a header */
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	assert_int_equal(r.nr_warnings, 1);
	assert_int_equal(r.warn_offset[0], zero);
	tb_scan_free(&r);
	tb_free(&a);
}

/*
 * header_offset is "the member's first header block": its 'L', 'K', 'x'
 * headers count, but blocks skipped before it (a lone zero block, a
 * volume label, an old 'N' header) belong to no member.
 */
static void test_header_offset_excludes_skipped_blocks(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t want[3];

	tb_file(&a, "a", "1");
	tb_zeros(&a, 1);
	want[0] = tb_file(&a, "b", "2");
	tb_add(&a, "label", 'V', NULL, 0);
	want[1] = tb_file(&a, "c", "3");
	tb_add(&a, "names", 'N', "x", 1);
	want[2] = tb_file(&a, "d", "4");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 4);
	for (size_t i = 0; i < 3; i++)
		if (r.m[i + 1].header_offset != want[i])
			fail_msg("'%s' reported at %llu, its header is at %llu",
				 r.m[i + 1].path,
				 (unsigned long long)r.m[i + 1].header_offset,
				 (unsigned long long)want[i]);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_eof_on_block_boundary_is_accepted(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;

	tb_file(&a, "a", "1");		/* no end marker at all */
	tb_scan(&r, &a);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	tb_scan_free(&r);

	tb_zeros(&a, 1);		/* half an end marker */
	tb_scan(&r, &a);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	assert_int_equal(r.nr_warnings, 0);
	tb_scan_free(&r);
	tb_free(&a);

	tb_scan(&r, &a);		/* an empty file is an empty archive */
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 0);
	tb_scan_free(&r);
}

/*
 * A small member's bytes come with it from the scanner's window (the
 * classes layout reads its labels there); a member larger than the window
 * comes without, and so does one whose data the window ends inside.  The
 * bytes are the archive's (tb_scan() compares every member's).
 */
static void test_small_members_come_with_their_bytes(void **state)
{
	static char big[TAR_WINDOW_SIZE + 1000];
	struct tb a = { 0 };
	struct tb_scan r;
	char blk[TAR_BLOCK_SIZE], name[32];
	size_t with = 0;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	for (int i = 0; i < 600; i++) {	/* past one window's end */
		snprintf(name, sizeof(name), "k%04d.cls", i);
		tb_header(blk, TB_USTAR, name, '0', 3 + i % 600);
		tb_block(&a, blk);
		tb_data(&a, big + i, 3 + i % 600);
	}
	tb_header(blk, TB_USTAR, "big", '0', sizeof(big));
	tb_block(&a, blk);
	tb_data(&a, big, sizeof(big));
	tb_end(&a);
	tb_scan(&r, &a);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 601);
	for (int i = 0; i < 600; i++)
		with += r.m[i].data != NULL;
	assert_true(with >= 590 && with < 600);	/* a window ends inside some */
	assert_null(r.m[600].data);
	tb_scan_free(&r);
	tb_free(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_v7_file_dir_and_links),
		cmocka_unit_test(test_trailing_slash_directories),
		cmocka_unit_test(test_trailing_slash_member_with_data),
		cmocka_unit_test(test_ustar_prefix_155),
		cmocka_unit_test(test_star_prefix_131),
		cmocka_unit_test(test_gnu_header_has_no_prefix),
		cmocka_unit_test(test_gnu_long_name_and_link),
		cmocka_unit_test(test_base256_size_over_8gib),
		cmocka_unit_test(test_base256_size_past_eof),
		cmocka_unit_test(test_base256_negative_mtime_and_big_ids),
		cmocka_unit_test(test_bad_attribute_fields_warn_and_read_zero),
		cmocka_unit_test(test_member_types),
		cmocka_unit_test(test_unknown_and_skipped_types),
		cmocka_unit_test(test_end_marker_stops_scan),
		cmocka_unit_test(test_lone_zero_block_warns_and_continues),
		cmocka_unit_test(test_lone_zero_block_then_junk_ends_archive),
		cmocka_unit_test(test_header_offset_excludes_skipped_blocks),
		cmocka_unit_test(test_eof_on_block_boundary_is_accepted),
		cmocka_unit_test(test_small_members_come_with_their_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
