/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_source_gzip.c - the gzip source and its seek points, without a
 * mount: streams made here with zlib (one member, many members, damaged
 * members, trailing bytes) are opened through shard_source_open() as a
 * mount opens them, their seek tables built and checked, and reads at
 * random offsets and sizes (across seek points) compared with the bytes
 * that were compressed.  A table handed to a second source wrapped by
 * encoding (as the index file does) must serve the same bytes without
 * reading or decoding anything first.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shardfs/seek_table.h"
#include "shardfs/source.h"
#include "tarbuild.h"

/* Bytes compressed: over two seek spans, so window points exist. */
#define DATA_SIZE (SEEK_TABLE_SPAN * 2 + 300 * 1024)
/* Reads at random offsets per stream. */
#define RANDOM_READS 100

static unsigned char *data;
/* What the streams decode with, as a shard set's do. */
static struct shard_decoders *decoders;

static int make_data(void **state)
{
	data = tb_letters(DATA_SIZE, 7, 'x', 7);
	return shard_decoders_new(NULL, &decoders);
}

static int free_data(void **state)
{
	shard_decoders_free(decoders);
	free(data);
	return 0;
}

/* Write @z to a new file and open it as a mount does. */
static struct shard_source *open_stream(const struct tb *z, char **dir)
{
	struct shard_source_info info = { 0 };
	struct shard_source *src;
	char path[4096], msg[512] = "";

	*dir = tb_tmpdir();
	tb_save(z, *dir, "s.tar.gz");
	snprintf(path, sizeof(path), "%s/s.tar.gz", *dir);
	if (shard_source_open(path, NULL, decoders, &src, &info, msg, sizeof(msg)) ||
	    shard_source_detect(&src, path, msg, sizeof(msg)))
		fail_msg("%s", msg);
	free(info.name);
	assert_string_equal(src->encoding, "gzip");
	assert_true(shard_source_needs_seek(src));
	return src;
}

static void build(struct shard_source *src)
{
	char msg[512] = "";
	uint64_t bad;

	if (src->ops->seek_build(src, msg, sizeof(msg)))
		fail_msg("seek_build: %s", msg);
	assert_false(shard_source_needs_seek(src));
	assert_true(seek_table_check(src->ops->seek_get(src), &bad));
}

/* Read [off, off + len) and compare it with data. */
static void expect_bytes(struct shard_source *src, uint64_t off, size_t len)
{
	tb_expect_read(src, data, off, len);
}

/*
 * Reads that straddle every seek point, and backwards reads, which never
 * continue a decoder: each point of the table is started from.
 */
static void expect_reads_at_points(struct shard_source *src, uint64_t size)
{
	const struct seek_table *t = src->ops->seek_get(src);

	for (uint64_t i = 1; i < t->nr; i++) {
		uint64_t p = t->points[i].out;

		expect_bytes(src, p - 1000, 2000 < size - (p - 1000) ? 2000 : size - (p - 1000));
		expect_bytes(src, p, 1);
	}
	for (uint64_t off = size; off > 64 * 1024; off -= size / 7)
		expect_bytes(src, off - 64 * 1024, 64 * 1024);
}

/* Random reads, then the reads at every seek point. */
static void expect_random_reads(struct shard_source *src, uint64_t size)
{
	srandom(42);
	for (int i = 0; i < RANDOM_READS; i++) {
		uint64_t off = (uint64_t)random() % size;
		size_t len = (size_t)(random() % (256 * 1024));

		expect_bytes(src, off, len < size - off ? len : size - off);
	}
	expect_reads_at_points(src, size);
}

/* The stream read in order in 128 KiB reads, as cat does. */
static void expect_sequential(struct shard_source *src, uint64_t size)
{
	for (uint64_t off = 0; off < size; off += 128 * 1024)
		expect_bytes(src, off, size - off < 128 * 1024 ? size - off : 128 * 1024);
}

/*
 * A second source of the same file, given the first one's table: every
 * point of it serves the first source's bytes.  (Not the random reads
 * again: they start from the same points, and they were a third of this
 * program's time.)
 */
static void expect_table_adopted(struct shard_source *src, const char *dir)
{
	struct shard_source *again;
	char path[4096];

	snprintf(path, sizeof(path), "%s/s.tar.gz", dir);
	{
		struct shard_source_info info = { 0 };
		char msg[512];

		assert_int_equal(shard_source_open(path, NULL, decoders, &again, &info, msg,
						   sizeof(msg)), 0);
		assert_null(again->encoding);	/* nothing read yet */
		assert_int_equal(shard_source_wrap(&again, path, "gzip", msg, sizeof(msg)), 0);
		free(info.name);
	}
	assert_int_equal(again->ops->seek_set(again, src->ops->seek_get(src)), 0);
	assert_int_equal(again->size, src->size);
	expect_reads_at_points(again, again->size);
	assert_int_equal(again->ops->seek_set(again, NULL), 0);
	assert_true(shard_source_needs_seek(again));
	shard_source_close(again);
}

/* Compress data in members of @member bytes, then read it every way. */
static void check_members(size_t member, int level, size_t trailing_zeros)
{
	struct tb z = { 0 };
	struct shard_source *src;
	char *dir;

	tb_gzip(&z, data, DATA_SIZE, member, level);
	for (size_t i = 0; i < trailing_zeros; i++)
		tb_bytes(&z, "", 1);
	src = open_stream(&z, &dir);
	build(src);
	assert_int_equal(src->size, DATA_SIZE);
	/* at most a span (plus one deflate block) between points */
	for (uint64_t i = 0; i < src->ops->seek_get(src)->nr; i++)
		assert_true(seek_table_span_end(src->ops->seek_get(src), i) -
			    src->ops->seek_get(src)->points[i].out <=
			    SEEK_TABLE_SPAN);
	expect_sequential(src, DATA_SIZE);
	expect_random_reads(src, DATA_SIZE);
	expect_table_adopted(src, dir);
	shard_source_close(src);
	tb_free(&z);
	tb_rmtree(dir);
}

static void test_single_member(void **state)
{
	check_members(0, 6, 0);
}

static void test_single_member_level_1_and_9(void **state)
{
	check_members(0, 1, 0);
	check_members(0, 9, 0);
}

/*
 * The streams of many members from here on are compressed at level 1: a
 * member shorter than a span holds no window point, so the level changes
 * nothing the source does, only the compressor's time (at level 6 a third
 * of this program's 46 s under valgrind).
 */

/* bgzip-like: 64 KiB members, member points only, no windows. */
static void test_small_members(void **state)
{
	check_members(64 * 1024, 1, 0);
}

/* shardfs-pack-like: 1 MiB members. */
static void test_large_members(void **state)
{
	check_members(1 << 20, 1, 0);
}

/* Zeros after the last member (tape padding) are ignored. */
static void test_trailing_zeros(void **state)
{
	check_members(1 << 20, 1, 1024);
}

/*
 * Member @k of 256 KiB members has a byte flipped in the middle of its
 * compressed data: its output fails with EIO, every other byte is right.
 */
static void test_damaged_member(void **state)
{
	enum { MEMBER = 256 * 1024, K = 5 };
	struct tb z = { 0 }, part = { 0 };
	struct shard_source *src;
	size_t start = 0;
	char buf[4096], *dir;

	for (size_t m = 0; m * MEMBER < DATA_SIZE; m++) {
		size_t n = DATA_SIZE - m * MEMBER < MEMBER ? DATA_SIZE - m * MEMBER : MEMBER;

		part.len = 0;
		tb_gzip(&part, data + m * MEMBER, n, 0, 1);
		if (m == K) {
			start = z.len;
			for (int i = 0; i < 16; i++)
				part.data[part.len / 2 + i] ^= 0x55;
		}
		tb_bytes(&z, part.data, part.len);
	}
	src = open_stream(&z, &dir);
	build(src);
	assert_int_equal(src->size, DATA_SIZE);
	assert_true(start > 0);
	/* the damaged member's bytes, and reads that touch them */
	assert_int_equal(src->ops->read(src, buf, 1, K * MEMBER), -EIO);
	assert_int_equal(src->ops->read(src, buf, 100, K * MEMBER + MEMBER - 1), -EIO);
	assert_int_equal(src->ops->read(src, buf, sizeof(buf), K * MEMBER - 10), -EIO);
	/* everything else, up to the damage and right after it */
	expect_bytes(src, 0, K * MEMBER);
	expect_bytes(src, (K + 1) * MEMBER, DATA_SIZE - (K + 1) * MEMBER);
	expect_bytes(src, K * MEMBER - 4096, 4096);
	expect_bytes(src, (K + 1) * MEMBER, 1);
	shard_source_close(src);
	tb_free(&z);
	tb_free(&part);
	tb_rmtree(dir);
}

/* A damaged single member: nothing decodes, nothing wrong is served. */
static void test_damaged_single_member(void **state)
{
	struct tb z = { 0 };
	struct shard_source *src;
	char buf[4096], *dir;

	tb_gzip(&z, data, DATA_SIZE, 0, 6);
	for (int i = 0; i < 16; i++)
		z.data[z.len / 2 + i] ^= 0x55;
	src = open_stream(&z, &dir);
	build(src);
	assert_int_equal(src->size, DATA_SIZE);	/* from the trailer */
	assert_int_equal(src->ops->read(src, buf, sizeof(buf), 0), -EIO);
	assert_int_equal(src->ops->read(src, buf, sizeof(buf), DATA_SIZE - 4096), -EIO);
	shard_source_close(src);
	tb_free(&z);
	tb_rmtree(dir);
}

/* A stream cut short: its last member does not decode. */
static void test_truncated(void **state)
{
	struct tb z = { 0 };
	struct shard_source *src;
	char buf[16], *dir;

	tb_gzip(&z, data, DATA_SIZE, 1 << 20, 1);
	z.len -= 1000;
	src = open_stream(&z, &dir);
	build(src);
	/* what was decoded before the cut, never more */
	assert_true(src->size > (DATA_SIZE / (1 << 20)) * (1 << 20));
	assert_true(src->size <= DATA_SIZE);
	expect_bytes(src, 0, 1 << 20);
	assert_int_equal(src->ops->read(src, buf, sizeof(buf), src->size - 16), -EIO);
	shard_source_close(src);
	tb_free(&z);
	tb_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single_member),
		cmocka_unit_test(test_single_member_level_1_and_9),
		cmocka_unit_test(test_small_members),
		cmocka_unit_test(test_large_members),
		cmocka_unit_test(test_trailing_zeros),
		cmocka_unit_test(test_damaged_member),
		cmocka_unit_test(test_damaged_single_member),
		cmocka_unit_test(test_truncated),
	};

	return cmocka_run_group_tests(tests, make_data, free_data);
}
