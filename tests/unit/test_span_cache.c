/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_span_cache.c - the decoded-span cache (span_cache.h) as a handle,
 * without a decoder: spans written, published and read back; a span not
 * published, or dropped to make room (oldest first), is a miss, never a
 * hole of zeros; the budget holds across shards; closing a shard's file
 * gives its bytes back; no cache (NULL) takes nothing.
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

#include "span_cache.h"
#include "tarbuild.h"

/* Bytes of a span here: a few pages. */
#define SPAN (64u * 1024)

struct env {
	char *dir;		/* the cache directory */
	struct span_cache c;	/* the cache under test */
};

/* A cache of @spans spans' bytes in a new directory. */
static struct env *env_new(uint64_t spans)
{
	struct env *e = calloc(1, sizeof(*e));
	char msg[256] = "";

	assert_non_null(e);
	e->dir = tb_tmpdir();
	if (span_cache_init(&e->c, e->dir, spans * SPAN, msg, sizeof(msg)))
		fail_msg("span_cache_init: %s", msg);
	return e;
}

static void env_free(struct env *e)
{
	span_cache_release(&e->c);
	tb_rmtree(e->dir);
	free(e);
}

/* The bytes of span @j of shard @shard: differ per shard and span. */
static void span_bytes(unsigned char *buf, unsigned shard, uint64_t j)
{
	for (size_t i = 0; i < SPAN; i++)
		buf[i] = (unsigned char)(shard * 31 + j * 7 + i / 512);
}

/* Write span @j of @f (shard @shard) and publish it. */
static void fill(struct span_file *f, unsigned shard, uint64_t j)
{
	static unsigned char buf[SPAN];

	span_bytes(buf, shard, j);
	assert_int_equal(span_file_write(f, buf, SPAN, j * SPAN), 0);
	span_file_publish(f, j, j * SPAN, SPAN);
}

/* Is span @j of @f cached, with the bytes of shard @shard? */
static bool cached(struct span_file *f, unsigned shard, uint64_t j)
{
	static unsigned char want[SPAN], got[SPAN];
	ssize_t n = span_file_read(f, j, got, SPAN, j * SPAN);

	if (n == -ENOENT)
		return false;
	assert_int_equal(n, SPAN);
	span_bytes(want, shard, j);
	assert_memory_equal(got, want, SPAN);
	return true;
}

static void test_no_cache(void **state)
{
	assert_false(span_cache_fits(NULL, 0));
	assert_null(span_file_open(NULL, SPAN, 1));
	span_file_close(NULL);
}

static void test_dir_that_cannot_be_made_is_named(void **state)
{
	struct span_cache c = { 0 };
	char *dir = tb_tmpdir(), path[4096], msg[256] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/file", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/file/cache", dir);
	assert_int_equal(span_cache_init(&c, path, SPAN, msg, sizeof(msg)), -ENOTDIR);
	assert_non_null(strstr(msg, path));
	span_cache_release(&c);	/* nothing to release: harmless */
	tb_rmtree(dir);
}

static void test_published_span_is_read_back(void **state)
{
	struct env *e = env_new(16);
	struct span_file *f = span_file_open(&e->c, 4 * SPAN, 4);
	unsigned char buf[SPAN], want[SPAN];

	assert_non_null(f);
	assert_true(span_cache_fits(&e->c, 4 * SPAN));
	assert_false(span_cache_fits(&e->c, 4 * SPAN + 1));	/* a quarter */
	assert_false(cached(f, 0, 1));
	/* written but not yet published: still a miss */
	span_bytes(buf, 0, 1);
	assert_int_equal(span_file_write(f, buf, SPAN, SPAN), 0);
	assert_false(cached(f, 0, 1));
	span_file_publish(f, 1, SPAN, SPAN);
	assert_true(cached(f, 0, 1));
	assert_int_equal(e->c.used, SPAN);
	/* a read inside the span */
	span_bytes(want, 0, 1);
	assert_int_equal(span_file_read(f, 1, buf, 100, SPAN + 1000), 100);
	assert_memory_equal(buf, want + 1000, 100);
	/* filled twice (two readers raced to it): counted once */
	fill(f, 0, 1);
	assert_int_equal(e->c.used, SPAN);
	assert_int_equal(e->c.count, 1);
	span_file_close(f);
	assert_int_equal(e->c.used, 0);
	env_free(e);
}

static void test_oldest_span_is_dropped_first(void **state)
{
	struct env *e = env_new(3);
	struct span_file *f = span_file_open(&e->c, 8 * SPAN, 8);

	assert_non_null(f);
	for (uint64_t j = 0; j < 3; j++)
		fill(f, 0, j);
	assert_int_equal(e->c.used, 3 * SPAN);
	fill(f, 0, 3);
	assert_int_equal(e->c.used, 3 * SPAN);
	assert_false(cached(f, 0, 0));	/* dropped: a miss, not zeros */
	for (uint64_t j = 1; j < 4; j++)
		assert_true(cached(f, 0, j));
	/* dropped and filled again: served again */
	fill(f, 0, 0);
	assert_true(cached(f, 0, 0));
	assert_false(cached(f, 0, 1));
	span_file_close(f);
	env_free(e);
}

static void test_budget_is_shared_by_shards(void **state)
{
	struct env *e = env_new(4);
	struct span_file *a = span_file_open(&e->c, 4 * SPAN, 4);
	struct span_file *b = span_file_open(&e->c, 4 * SPAN, 4);

	assert_non_null(a);
	assert_non_null(b);
	fill(a, 1, 0);
	fill(a, 1, 1);
	fill(b, 2, 0);
	fill(b, 2, 1);
	assert_int_equal(e->c.used, 4 * SPAN);
	/* closing a gives its bytes back: b's next span drops nothing */
	span_file_close(a);
	assert_int_equal(e->c.used, 2 * SPAN);
	fill(b, 2, 2);
	fill(b, 2, 3);
	assert_int_equal(e->c.used, 4 * SPAN);
	for (uint64_t j = 0; j < 4; j++)
		assert_true(cached(b, 2, j));
	/* the entries a left behind are skipped, not dropped from b */
	assert_int_equal(e->c.count, 6);
	span_file_close(b);
	assert_int_equal(e->c.used, 0);
	env_free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_cache),
		cmocka_unit_test(test_dir_that_cannot_be_made_is_named),
		cmocka_unit_test(test_published_span_is_read_back),
		cmocka_unit_test(test_oldest_span_is_dropped_first),
		cmocka_unit_test(test_budget_is_shared_by_shards),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
