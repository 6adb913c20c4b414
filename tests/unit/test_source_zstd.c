/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_source_zstd.c - the zstd source (source_zstd.c), without a mount:
 * streams made here with libzstd (frames of their own, one frame, the
 * seekable format's trailing seek table) are opened as a shard set opens
 * them, their seek tables built, and reads at random offsets and across
 * frame ends compared with the bytes that were compressed.  A damaged
 * frame fails the reads that touch it with EIO and a message naming the
 * offset, and only those: the frames after it are served at their own
 * offsets.  Through the decoded-span cache (span_cache.h) the bytes are
 * the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <zstd.h>

#include "shardfs/seek_table.h"
#include "shardfs/source.h"
#include "span_cache.h"
#include "tarbuild.h"

/* Output of each frame: above SEEK_TABLE_MEMBER_SPAN, so each is a point. */
#define FRAME_LEN (320u * 1024)
/* Frames of a stream. */
#define FRAMES 8
#define DATA_SIZE ((size_t)FRAME_LEN * FRAMES)
/* Reads at random offsets per stream. */
#define RANDOM_READS 100
/* The frame damaged by the damage tests. */
#define DAMAGED 3
/* The seekable format (zstd's contrib/seekable_format). */
#define SEEKABLE_TABLE_MAGIC 0x184D2A5Eu
#define SEEKABLE_FOOTER_MAGIC 0x8F92EAB1u

static unsigned char *data;

/* A compressed stream and where its frames start. */
struct stream {
	struct tb z;			/* the stored bytes */
	uint64_t frame_at[FRAMES + 1];	/* compressed offset of each frame;
					 * [nr]: their end */
	unsigned nr;			/* frames */
	char *dir;			/* where it was saved */
	struct shard_decoders *decoders; /* what it decodes with */
	struct shard_source *src;	/* it, opened */
};

static int make_data(void **state)
{
	data = tb_letters(DATA_SIZE, 11, 'z', 5);
	return 0;
}

static int free_data(void **state)
{
	free(data);
	return 0;
}

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Compress data into @nr frames (with content size and checksum). */
static void compress_frames(struct stream *s, unsigned nr)
{
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	size_t len = DATA_SIZE / nr, cap = ZSTD_compressBound(len);
	void *out = malloc(cap);

	assert_non_null(cc);
	assert_non_null(out);
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1)));
	*s = (struct stream){ .nr = nr };
	for (unsigned i = 0; i < nr; i++) {
		size_t n = ZSTD_compress2(cc, out, cap, data + i * len, len);

		assert_false(ZSTD_isError(n));
		s->frame_at[i] = s->z.len;
		tb_bytes(&s->z, out, n);
	}
	s->frame_at[nr] = s->z.len;
	free(out);
	ZSTD_freeCCtx(cc);
}

/* Append the seekable format's seek table, listing the frames. */
static void append_seek_table(struct stream *s)
{
	unsigned char b[12];

	put_le32(b, SEEKABLE_TABLE_MAGIC);
	put_le32(b + 4, s->nr * 8 + 9);
	tb_bytes(&s->z, b, 8);
	for (unsigned i = 0; i < s->nr; i++) {
		put_le32(b, (uint32_t)(s->frame_at[i + 1] - s->frame_at[i]));
		put_le32(b + 4, (uint32_t)(DATA_SIZE / s->nr));
		tb_bytes(&s->z, b, 8);
	}
	put_le32(b, s->nr);
	b[4] = 0;
	put_le32(b + 5, SEEKABLE_FOOTER_MAGIC);
	tb_bytes(&s->z, b, 9);
}

/* Flip bytes in the middle of frame @i's compressed data. */
static void damage(struct stream *s, unsigned i)
{
	uint64_t mid = (s->frame_at[i] + s->frame_at[i + 1]) / 2;

	for (int k = 0; k < 16; k++)
		s->z.data[mid + k] ^= 0x55;
}

/* Save @s, open it as a shard set does (with @spans, or none) and build
 * its seek table. */
static void open_stream(struct stream *s, struct span_cache *spans)
{
	struct shard_source_info info = { 0 };
	char path[4096], msg[512] = "";

	s->dir = tb_tmpdir();
	tb_save(&s->z, s->dir, "s.tar.zst");
	snprintf(path, sizeof(path), "%s/s.tar.zst", s->dir);
	assert_int_equal(shard_decoders_new(spans, &s->decoders), 0);
	if (shard_source_open(path, NULL, s->decoders, &s->src, &info, msg, sizeof(msg)) ||
	    shard_source_detect(&s->src, path, msg, sizeof(msg)))
		fail_msg("%s", msg);
	free(info.name);
	assert_string_equal(s->src->encoding, "zstd");
	assert_true(shard_source_needs_seek(s->src));
	if (s->src->ops->seek_build(s->src, msg, sizeof(msg)))
		fail_msg("seek_build: %s", msg);
	assert_int_equal(s->src->size, DATA_SIZE);
}

static void close_stream(struct stream *s)
{
	shard_source_close(s->src);
	shard_decoders_free(s->decoders);
	tb_rmtree(s->dir);
	tb_free(&s->z);
}

/* Every frame starts a MEMBER point at its own offsets. */
static void expect_frame_points(const struct stream *s)
{
	const struct seek_table *t = s->src->ops->seek_get(s->src);
	uint64_t bad;

	assert_true(seek_table_check(t, &bad));
	assert_int_equal(t->nr, s->nr);
	for (unsigned i = 0; i < s->nr; i++) {
		assert_int_equal(t->points[i].in, s->frame_at[i]);
		assert_int_equal(t->points[i].out, (uint64_t)i * (DATA_SIZE / s->nr));
	}
}

/* Read [off, off + len) and compare it with data. */
static void expect_bytes(struct shard_source *src, uint64_t off, size_t len)
{
	tb_expect_read(src, data, off, len);
}

/* May [off, off + len) be read, with frame @skip (none: FRAMES) damaged? */
static bool clear_of(uint64_t off, size_t len, unsigned skip)
{
	uint64_t lo = (uint64_t)skip * FRAME_LEN, hi = lo + FRAME_LEN;

	return off + len <= lo || off >= hi;
}

/* Reads at random and across every frame end, but of frame @skip. */
static void expect_reads(struct shard_source *src, unsigned skip)
{
	srandom(42);
	for (int i = 0; i < RANDOM_READS; i++) {
		uint64_t off = (uint64_t)random() % DATA_SIZE;
		size_t len = (size_t)(random() % (200 * 1024));

		len = len < DATA_SIZE - off ? len : DATA_SIZE - off;
		if (clear_of(off, len, skip))
			expect_bytes(src, off, len);
	}
	for (uint64_t p = FRAME_LEN; p < DATA_SIZE; p += FRAME_LEN)
		if (clear_of(p - 1000, 2000, skip))
			expect_bytes(src, p - 1000, 2000);
	/* backwards, which never continues a decoder */
	for (uint64_t off = DATA_SIZE; off > 64 * 1024; off -= DATA_SIZE / 7)
		if (clear_of(off - 64 * 1024, 64 * 1024, skip))
			expect_bytes(src, off - 64 * 1024, 64 * 1024);
}

static void test_single_frame(void **state)
{
	struct stream s;
	const struct seek_table *t;

	compress_frames(&s, 1);
	open_stream(&s, NULL);
	t = s.src->ops->seek_get(s.src);
	assert_int_equal(t->nr, 1);
	/* each read decodes from the start: a few of them */
	expect_bytes(s.src, DATA_SIZE - 4096, 4096);
	expect_bytes(s.src, 12345, 100000);
	expect_bytes(s.src, DATA_SIZE / 2, 1);
	close_stream(&s);
}

/*
 * Read [off, off + len) of @src expecting EIO, with stderr (where the
 * log goes) caught: it must name the shard and an offset in the range
 * (where decoding failed).
 */
static void expect_eio_named(struct shard_source *src, const char *dir,
			     uint64_t off, size_t len)
{
	char path[4096], text[4096] = "";
	unsigned char *buf = malloc(len);
	int fd, saved = dup(STDERR_FILENO);
	unsigned long long named;
	const char *at;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/stderr", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0 && saved >= 0 && buf);
	dup2(fd, STDERR_FILENO);
	n = src->ops->read(src, buf, len, off);
	dup2(saved, STDERR_FILENO);
	close(saved);
	assert_int_equal(n, -EIO);
	assert_true(pread(fd, text, sizeof(text) - 1, 0) > 0);
	close(fd);
	at = strstr(text, "s.tar.zst: offset ");
	if (!at || sscanf(at, "s.tar.zst: offset %llu:", &named) != 1 ||
	    named < off || named >= off + len)
		fail_msg("the message names no shard and offset in [%llu, +%zu): %s",
			 (unsigned long long)off, len, text);
	free(buf);
}

/*
 * A stream of FRAMES frames, ending with the seekable format's seek table
 * if @table, its frame DAMAGED damaged if @damaged: every frame a point
 * at its own offsets, reads of the damaged frame EIO with the offset
 * named, and every other read the plain bytes.
 */
static void check_frames(bool table, bool damaged)
{
	struct stream s;
	const struct seek_table *t;

	compress_frames(&s, FRAMES);
	if (table)
		append_seek_table(&s);
	if (damaged)
		damage(&s, DAMAGED);
	open_stream(&s, NULL);
	t = s.src->ops->seek_get(s.src);
	if (!damaged)
		expect_frame_points(&s);
	else if (!table)	/* the scan found it: a BAD point */
		assert_int_equal(t->points[DAMAGED].kind, SEEK_POINT_BAD);
	if (damaged)		/* behind a table: found by the read */
		expect_eio_named(s.src, s.dir, (uint64_t)DAMAGED * FRAME_LEN +
				 (table ? 0 : 100), table ? FRAME_LEN : 1000);
	expect_reads(s.src, damaged ? DAMAGED : FRAMES);
	assert_int_equal(t->nr, FRAMES);
	close_stream(&s);
}

static void test_frames_read_at_random(void **state)
{
	check_frames(false, false);
}

static void test_seekable_format_table(void **state)
{
	check_frames(true, false);
}

static void test_damaged_frame_is_eio_named(void **state)
{
	check_frames(false, true);
}

static void test_damaged_frame_behind_a_seek_table(void **state)
{
	check_frames(true, true);
}

static void test_through_the_span_cache(void **state)
{
	struct span_cache spans = { 0 };
	char *dir = tb_tmpdir(), msg[256] = "";
	struct stream s;

	if (span_cache_init(&spans, dir, 64 * (uint64_t)FRAME_LEN, msg, sizeof(msg)))
		fail_msg("span_cache_init: %s", msg);
	compress_frames(&s, FRAMES);
	open_stream(&s, &spans);
	assert_false(s.src->push.decode_bound);
	expect_reads(s.src, FRAMES);
	assert_true(spans.used > 0);	/* the spans read went in */
	expect_reads(s.src, FRAMES);	/* again, from the cache */
	close_stream(&s);
	assert_int_equal(spans.used, 0);
	span_cache_release(&spans);
	tb_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frames_read_at_random),
		cmocka_unit_test(test_seekable_format_table),
		cmocka_unit_test(test_single_frame),
		cmocka_unit_test(test_damaged_frame_is_eio_named),
		cmocka_unit_test(test_damaged_frame_behind_a_seek_table),
		cmocka_unit_test(test_through_the_span_cache),
	};

	return cmocka_run_group_tests(tests, make_data, free_data);
}
