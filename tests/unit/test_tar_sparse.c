/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tar_sparse.c - GNU sparse members in tar_scan(): the old 'S'
 * header with its extension blocks, and the three PAX encodings (0.0
 * offset/numbytes records, 0.1 map record, 1.0 map in the data).
 *
 * A sparse member's map decides which archive bytes are served at which
 * file offset, so a map read wrongly serves wrong data without any error.
 * The tests check every run's logical offset, length and physical
 * position, that the member after a sparse one is found, and that maps
 * which do not add up stop the scan at the member's header.
 */
#include <stdlib.h>
#include <string.h>

#include "tarbuild.h"

/* Check @m's map against @runs, packed back to back from @data_off. */
static void expect_runs(const struct tb_member *m, const struct tar_extent *runs,
			size_t n, uint64_t data_off)
{
	uint64_t phys = data_off;

	assert_non_null(m->extents);
	assert_int_equal(m->nr_extents, n);
	assert_int_equal(m->data_offset, data_off);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(m->extents[i].logical, runs[i].logical);
		assert_int_equal(m->extents[i].length, runs[i].length);
		assert_int_equal(m->extents[i].physical, phys);
		phys += runs[i].length;
	}
}

static void test_old_gnu_sparse_with_extension_blocks(void **state)
{
	enum { NR = 30 };			/* 4 in the header, 21 + 5 after */
	struct tar_extent runs[NR];
	char data[NR * (NR + 1) / 2];
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t hdr, after;

	for (size_t i = 0; i < NR; i++)
		runs[i] = (struct tar_extent){ .logical = i * 1000, .length = i + 1 };
	memset(data, 'd', sizeof(data));
	hdr = tb_old_sparse(&a, "sparse", NR * 1000, runs, NR, data);
	after = tb_file(&a, "after", "x");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[0], "sparse", TAR_FILE, NR * 1000);
	assert_int_equal(r.m[0].header_offset, hdr);
	expect_runs(&r.m[0], runs, NR, hdr + 3 * TAR_BLOCK_SIZE);
	tb_assert_member(&r.m[1], "after", TAR_FILE, 1);
	assert_int_equal(r.m[1].header_offset, after);
	assert_null(r.m[1].extents);
	assert_int_equal(r.nr_warnings, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_pax_sparse_0_0(void **state)
{
	static const char *const kv[] = {
		"GNU.sparse.size", "20000", "GNU.sparse.numblocks", "2",
		"GNU.sparse.offset", "4096", "GNU.sparse.numbytes", "10",
		"GNU.sparse.offset", "20000", "GNU.sparse.numbytes", "0",
		NULL,
	};
	static const struct tar_extent runs[] = { { 4096, 10, 0 }, { 20000, 0, 0 } };
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t x, hdr;

	x = tb_pax_header(&a, 'x', kv);
	hdr = tb_add(&a, "s00", '0', "0123456789", 10);
	tb_file(&a, "after", "x");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[0], "s00", TAR_FILE, 20000);
	assert_int_equal(r.m[0].header_offset, x);
	expect_runs(&r.m[0], runs, 2, hdr + TAR_BLOCK_SIZE);
	tb_assert_member(&r.m[1], "after", TAR_FILE, 1);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_pax_sparse_0_1(void **state)
{
	static const char *const kv[] = {
		"GNU.sparse.size", "300", "GNU.sparse.numblocks", "3",
		"GNU.sparse.name", "real/name",
		"GNU.sparse.map", "0,5,100,5,300,0",
		NULL,
	};
	static const struct tar_extent runs[] = {
		{ 0, 5, 0 }, { 100, 5, 0 }, { 300, 0, 0 },
	};
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t hdr;

	tb_pax_header(&a, 'x', kv);
	hdr = tb_add(&a, "GNUSparseFile.1/name", '0', "aaaaabbbbb", 10);
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	tb_assert_member(&r.m[0], "real/name", TAR_FILE, 300);
	expect_runs(&r.m[0], runs, 3, hdr + TAR_BLOCK_SIZE);
	tb_scan_free(&r);
	tb_free(&a);
}

/*
 * GNU tar 1.34 (--sparse-version=0.1) stores a long name twice: first as
 * GNU.sparse.name, then as a "path" record holding the placeholder
 * "./GNUSparseFile.PID/NAME".  GNU tar lists the real name: once
 * GNU.sparse.name is seen, "path" no longer applies.
 */
static void test_pax_sparse_0_1_name_beats_later_path(void **state)
{
	static const char *const kv[] = {
		"GNU.sparse.size", "300", "GNU.sparse.numblocks", "1",
		"GNU.sparse.name", "real/name",
		"GNU.sparse.map", "0,10",
		"path", "./GNUSparseFile.13092/name",
		NULL,
	};
	struct tb a = { 0 };
	struct tb_scan r;

	tb_pax_header(&a, 'x', kv);
	tb_add(&a, "./GNUSparseFile.13092/name", '0', "aaaaabbbbb", 10);
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 1);
	tb_assert_member(&r.m[0], "real/name", TAR_FILE, 300);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_pax_sparse_1_0_map_in_data(void **state)
{
	static const struct tar_extent runs[] = { { 100, 10, 0 }, { 40000, 10, 0 } };
	struct tb a = { 0 };
	struct tb_scan r;
	uint64_t hdr, after;

	hdr = tb_sparse_1_0(&a, "real", 50000, "2\n100\n10\n40000\n10\n",
			    "0123456789abcdefghij", 20);
	after = tb_file(&a, "after", "x");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[0], "real", TAR_FILE, 50000);
	/* the data starts after the header and the map's block */
	expect_runs(&r.m[0], runs, 2, hdr + 2 * TAR_BLOCK_SIZE);
	assert_int_equal(r.m[1].header_offset, after);
	tb_scan_free(&r);
	tb_free(&a);
}

static void test_old_sparse_bad_maps(void **state)
{
	static const struct tar_extent past_end[] = { { 0, 10, 0 }, { 95, 10, 0 } };
	static const struct tar_extent overlap[] = { { 0, 10, 0 }, { 5, 10, 0 } };
	static const struct tar_extent backwards[] = { { 50, 10, 0 }, { 0, 10, 0 } };
	static const struct tar_extent *const bad[] = { past_end, overlap, backwards };
	char data[20] = { 0 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tb a = { 0 };
		uint64_t hdr;

		tb_file(&a, "ok", "1");
		hdr = tb_old_sparse(&a, "bad", 100, bad[i], 2, data);
		tb_end(&a);
		tb_expect_einval(&a, hdr, 1);
		tb_free(&a);
	}
}

static void test_old_sparse_runs_exceed_stored_data(void **state)
{
	static const struct tar_extent runs[] = { { 0, 600, 0 } };
	struct tb a = { 0 };
	char data[600] = { 0 }, blk[TAR_BLOCK_SIZE];
	uint64_t hdr;

	hdr = tb_old_sparse(&a, "liar", 1000, runs, 1, data);
	memcpy(blk, a.data + hdr, sizeof(blk));
	tb_octal(blk + TB_OFF_SIZE, 12, 512);	/* stores less than the map says */
	tb_checksum(blk);
	memcpy(a.data + hdr, blk, sizeof(blk));
	tb_end(&a);
	tb_expect_einval(&a, hdr, 0);
	tb_free(&a);
}

/*
 * An 'x' header from @kv, then a 10-byte member: expect EINVAL at the
 * member's header when @at_member, else at the 'x' header.
 */
static void expect_bad_pax_sparse(const char *const *kv, bool at_member)
{
	struct tb a = { 0 };
	uint64_t x, hdr;

	tb_file(&a, "ok", "1");
	x = tb_pax_header(&a, 'x', kv);
	hdr = tb_add(&a, "s", '0', "0123456789", 10);
	tb_end(&a);
	tb_expect_einval(&a, at_member ? hdr : x, 1);
	tb_free(&a);
}

static void test_pax_sparse_bad_maps(void **state)
{
	static const char *const no_size[] = {
		"GNU.sparse.map", "0,10", NULL,
	};
	static const char *const odd_map[] = {
		"GNU.sparse.size", "100", "GNU.sparse.map", "0,5,50", NULL,
	};
	static const char *const junk_map[] = {
		"GNU.sparse.size", "100", "GNU.sparse.map", "0,x", NULL,
	};
	static const char *const numbytes_first[] = {
		"GNU.sparse.size", "100", "GNU.sparse.numbytes", "10", NULL,
	};
	static const char *const past_size[] = {
		"GNU.sparse.size", "100", "GNU.sparse.map", "95,10", NULL,
	};

	expect_bad_pax_sparse(no_size, true);
	expect_bad_pax_sparse(odd_map, false);
	expect_bad_pax_sparse(junk_map, false);
	expect_bad_pax_sparse(numbytes_first, false);
	expect_bad_pax_sparse(past_size, true);
}

static void test_pax_sparse_1_0_bad_maps(void **state)
{
	static const char *const maps[] = {
		"1\n100\nten\n",	/* not a number */
		"1\n100\n",		/* the map ends early */
		"2000000\n",		/* more runs than TAR_SPARSE_EXTENTS_MAX */
		"1\n100\n10",		/* no final newline */
	};

	for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
		struct tb a = { 0 };
		uint64_t hdr = tb_sparse_1_0(&a, "real", 50000, maps[i],
					     "0123456789", 10);

		tb_end(&a);
		tb_expect_einval(&a, hdr, 0);
		tb_free(&a);
	}
}

/*
 * A sparse file that is one big hole has a map with no runs.  It is still
 * sparse: tar.h promises extents == NULL only for members that are not,
 * and a reader that took it for a plain file would serve the bytes that
 * follow its header in the shard.
 */
static void test_sparse_member_without_runs(void **state)
{
	struct tb a = { 0 };
	struct tb_scan r;

	tb_old_sparse(&a, "all-hole", 1000, NULL, 0, "");
	tb_file(&a, "after", "not part of all-hole");
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, 2);
	tb_assert_member(&r.m[0], "all-hole", TAR_FILE, 1000);
	assert_true(r.m[0].sparse);
	assert_int_equal(r.m[0].nr_extents, 0);
	tb_scan_free(&r);
	tb_free(&a);
}

/*
 * An 'S' header that is the last block of the scanner's 64 KiB read
 * window, so that its extension block is read through a refill.  The
 * header must be judged by its own bytes, not by whatever the refill put
 * where the header used to be (here: member data full of 'Z').
 */
static void test_old_sparse_at_window_edge(void **state)
{
	enum { WINDOW = 64 * 1024, STORED = 70000 };
	struct tar_extent runs[5];
	struct tb a = { 0 };
	struct tb_scan r;
	char *data = malloc(STORED);
	uint64_t hdr;

	assert_non_null(data);
	memset(data, 'Z', STORED);
	for (size_t i = 0; i < 5; i++)		/* five runs: one extension block */
		runs[i] = (struct tar_extent){ i * 20000, i < 4 ? 10000 : 30000, 0 };
	while (a.len < WINDOW - TAR_BLOCK_SIZE)	/* dense headers: full windows */
		tb_add(&a, "empty", '0', NULL, 0);
	hdr = tb_old_sparse(&a, "edge", 120000, runs, 5, data);
	assert_int_equal(hdr, WINDOW - TAR_BLOCK_SIZE);
	tb_end(&a);
	tb_scan(&r, &a);

	assert_int_equal(r.rc, 0);
	assert_int_equal(r.nr, WINDOW / TAR_BLOCK_SIZE);
	tb_assert_member(&r.m[r.nr - 1], "edge", TAR_FILE, 120000);
	expect_runs(&r.m[r.nr - 1], runs, 5, hdr + 2 * TAR_BLOCK_SIZE);
	assert_int_equal(r.nr_warnings, 0);
	tb_scan_free(&r);
	tb_free(&a);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_old_gnu_sparse_with_extension_blocks),
		cmocka_unit_test(test_pax_sparse_0_0),
		cmocka_unit_test(test_pax_sparse_0_1),
		cmocka_unit_test(test_pax_sparse_0_1_name_beats_later_path),
		cmocka_unit_test(test_pax_sparse_1_0_map_in_data),
		cmocka_unit_test(test_old_sparse_bad_maps),
		cmocka_unit_test(test_old_sparse_runs_exceed_stored_data),
		cmocka_unit_test(test_pax_sparse_bad_maps),
		cmocka_unit_test(test_pax_sparse_1_0_bad_maps),
		cmocka_unit_test(test_sparse_member_without_runs),
		cmocka_unit_test(test_old_sparse_at_window_edge),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
