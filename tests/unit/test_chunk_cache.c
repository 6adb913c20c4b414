/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chunk_cache.c - the chunk cache against a fake fetcher: reads
 * served and counted, concurrent readers of one chunk sharing one fetch,
 * eviction in a small cache, readers waiting while every slot is busy,
 * a failed fetch giving -EIO and being fetched again, prefetch windows,
 * forgetting an owner, and two caches side by side.  No network: the fetcher fills chunks with a
 * pattern of their offset and can be held (a gate) or made to fail.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "shardfs/chunk_cache.h"

/* Bytes per chunk in every test. */
#define CHUNK 4096
/* Longest a test waits for something the fetch threads do (ms). */
#define WAIT_MAX_MS 5000
/* How long a test gives a thread to do what it must not (ms). */
#define SETTLE_MS 50

/* A remote object: its bytes are a pattern of their offset and tag. */
struct object {
	unsigned char tag;	/* tells objects' bytes apart */
};

/* The fake fetcher's state; guarded by lock. */
static struct {
	pthread_mutex_t lock;	/* guards the fields below */
	pthread_cond_t opened;	/* the gate opened */
	bool gate_closed;	/* fetches wait until it opens */
	unsigned calls;		/* fetches made */
	unsigned pieces;	/* chunks they filled, in all */
	uint64_t fail_off;	/* a fetch at this offset fails (UINT64_MAX:
				 * none) */
} fake = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.opened = PTHREAD_COND_INITIALIZER,
};

static struct chunk_cache_counters counters;
static struct chunk_cache *cache;	/* the test's */

static unsigned char byte_at(const struct object *o, uint64_t off)
{
	return (unsigned char)(off * 131 + (off >> 12) * 7 + o->tag);
}

static ssize_t fake_fetch(void *obj, const struct fetch_piece *piece, unsigned n,
			  uint64_t off)
{
	bool fail;
	ssize_t done = 0;

	pthread_mutex_lock(&fake.lock);
	fake.calls++;
	fake.pieces += n;
	while (fake.gate_closed)
		pthread_cond_wait(&fake.opened, &fake.lock);
	fail = off == fake.fail_off;
	pthread_mutex_unlock(&fake.lock);
	if (fail)
		return -EIO;
	for (unsigned i = 0; i < n; i++) {
		for (size_t j = 0; j < piece[i].len; j++)
			piece[i].buf[j] = (char)byte_at(obj, off + (uint64_t)done + j);
		done += (ssize_t)piece[i].len;
		atomic_store_explicit(&piece[i].progress->bytes, piece[i].len,
				      memory_order_release);
		piece[i].progress->notify(piece[i].progress);
	}
	return done;
}

static unsigned fetch_calls(void)
{
	unsigned n;

	pthread_mutex_lock(&fake.lock);
	n = fake.calls;
	pthread_mutex_unlock(&fake.lock);
	return n;
}

static void gate(bool closed)
{
	pthread_mutex_lock(&fake.lock);
	fake.gate_closed = closed;
	pthread_cond_broadcast(&fake.opened);
	pthread_mutex_unlock(&fake.lock);
}

static void sleep_ms(unsigned ms)
{
	nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000L }, NULL);
}

/* Wait until @cond holds, for WAIT_MAX_MS at most, then assert it. */
#define WAIT_FOR(cond)                                                  \
	do {                                                            \
		for (int w_ = 0; !(cond) && w_ < WAIT_MAX_MS; w_++)     \
			sleep_ms(1);                                    \
		assert_true(cond);                                      \
	} while (0)

/* A cache of @chunks chunks, @threads fetch threads (one may prefetch). */
static void cache_init(unsigned chunks, unsigned threads)
{
	fake.gate_closed = false;
	fake.calls = fake.pieces = 0;
	fake.fail_off = UINT64_MAX;
	counters = (struct chunk_cache_counters){ 0 };
	assert_int_equal(chunk_cache_init(&cache, &(struct chunk_cache_config){
				 .chunk_size = CHUNK, .mem = (uint64_t)chunks * CHUNK,
				 .fetch_threads = threads, .prefetch_threads = 1,
				 .fetch = fake_fetch, .counters = &counters }),
			 0);
}

static void owner_init(struct chunk_owner *ow, struct object *o, uint64_t size)
{
	*ow = (struct chunk_owner){ .cache = cache, .obj = o, .size = size };
	atomic_store(&ow->last_chunk, UINT64_MAX);
}

/* Read [@off, @off + @len) of @ow: what the read returned, or -EBADMSG
 * when a byte is wrong.  No cmocka assert: reader threads call it too. */
static ssize_t read_check(struct chunk_owner *ow, uint64_t off, size_t len)
{
	char *buf = malloc(len ? len : 1);
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	n = chunk_cache_read(ow, buf, len, off);
	for (ssize_t i = 0; i < n; i++)
		if ((unsigned char)buf[i] != byte_at(ow->obj, off + (uint64_t)i))
			n = -EBADMSG;
	free(buf);
	return n;
}

static unsigned long long count(atomic_ullong *c)
{
	return atomic_load(c);
}

/* A read in a thread: the whole chunk @chunk, then advise(DONTNEED). */
struct reader {
	struct chunk_owner *ow;	/* what is read */
	uint64_t chunk;		/* which chunk */
	ssize_t result;		/* chunk_cache_read()'s */
	atomic_bool finished;	/* the read returned */
	pthread_t thread;	/* running it */
};

static void *reader_run(void *arg)
{
	struct reader *r = arg;

	r->result = read_check(r->ow, r->chunk * CHUNK, CHUNK);
	chunk_cache_dontneed(r->ow, r->chunk * CHUNK, CHUNK);
	atomic_store(&r->finished, true);
	return NULL;
}

static void reader_start(struct reader *r, struct chunk_owner *ow, uint64_t chunk)
{
	r->ow = ow;
	r->chunk = chunk;
	r->result = 0;
	atomic_store(&r->finished, false);
	assert_int_equal(pthread_create(&r->thread, NULL, reader_run, r), 0);
}

static void test_read_served(void **state)
{
	struct object o = { 1 };
	struct chunk_owner ow;
	uint64_t size = 10 * CHUNK + 100;

	cache_init(8, 2);
	owner_init(&ow, &o, size);
	/* across a chunk boundary: both chunks with one fetch */
	assert_int_equal(read_check(&ow, CHUNK - 10, 30), 30);
	assert_int_equal(fetch_calls(), 1);
	assert_int_equal(fake.pieces, 2);
	assert_int_equal(count(&counters.misses), 2);
	assert_int_equal(read_check(&ow, 0, 10), 10);
	assert_int_equal(fetch_calls(), 1);
	assert_int_equal(count(&counters.hits), 1);
	/* short at the end, nothing past it */
	assert_int_equal(read_check(&ow, size - 50, 100), 50);
	assert_int_equal(read_check(&ow, size, 10), 0);
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
}

static void test_concurrent_readers_one_fetch(void **state)
{
	struct object o = { 2 };
	struct chunk_owner ow;
	struct reader r[4];

	cache_init(8, 2);
	owner_init(&ow, &o, 16 * CHUNK);
	gate(true);
	for (unsigned i = 0; i < 4; i++)
		reader_start(&r[i], &ow, 5);
	WAIT_FOR(fetch_calls() == 1);
	sleep_ms(SETTLE_MS);	/* the other readers find the chunk loading */
	gate(false);
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].result, CHUNK);
	}
	assert_int_equal(fetch_calls(), 1);
	assert_int_equal(count(&counters.misses), 1);
	assert_int_equal(count(&counters.hits), 3);
	chunk_cache_forget(&ow);
}

static void test_eviction_small_cache(void **state)
{
	struct object o = { 3 };
	struct chunk_owner ow;

	cache_init(4, 2);	/* the least a cache holds */
	owner_init(&ow, &o, 12 * CHUNK);
	/* never the next chunk: no prefetch, every read a miss */
	for (int round = 0; round < 2; round++)
		for (uint64_t pass = 0; pass < 2; pass++)
			for (uint64_t c = pass; c < 12; c += 2) {
				assert_int_equal(read_check(&ow, c * CHUNK, CHUNK), CHUNK);
				chunk_cache_dontneed(&ow, c * CHUNK, CHUNK);
			}
	/* the second round found at most the 4 chunks the cache holds */
	assert_true(count(&counters.hits) <= 4);
	assert_int_equal(count(&counters.hits) + count(&counters.misses), 24);
	assert_int_equal(fetch_calls(), count(&counters.misses));
	chunk_cache_forget(&ow);
}

static void test_backpressure(void **state)
{
	struct object o = { 4 };
	struct chunk_owner ow;
	struct reader r[5];

	cache_init(4, 5);	/* a thread free: only a slot is missing */
	owner_init(&ow, &o, 16 * CHUNK);
	gate(true);
	for (unsigned i = 0; i < 4; i++)
		reader_start(&r[i], &ow, 2 * i);
	WAIT_FOR(fetch_calls() == 4);	/* every slot loading */
	reader_start(&r[4], &ow, 9);
	sleep_ms(SETTLE_MS);
	assert_false(atomic_load(&r[4].finished));	/* waits for a slot */
	assert_int_equal(fetch_calls(), 4);		/* and fetches nothing */
	gate(false);
	for (unsigned i = 0; i < 5; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].result, CHUNK);
	}
	assert_int_equal(fetch_calls(), 5);
	chunk_cache_forget(&ow);
}

static void test_fetch_error(void **state)
{
	struct object o = { 5 };
	struct chunk_owner ow;

	cache_init(8, 2);
	owner_init(&ow, &o, 8 * CHUNK);
	fake.fail_off = 3 * CHUNK;
	assert_int_equal(read_check(&ow, 3 * CHUNK + 7, 100), -EIO);
	assert_int_equal(fetch_calls(), 1);
	pthread_mutex_lock(&fake.lock);
	fake.fail_off = UINT64_MAX;
	pthread_mutex_unlock(&fake.lock);
	/* the failed chunk is not kept: once its fetcher let it go (a read
	 * in between still finds it failed), a read fetches it again */
	for (int w = 0; read_check(&ow, 3 * CHUNK + 7, 100) == -EIO; w++) {
		assert_true(w < WAIT_MAX_MS);
		assert_int_equal(fetch_calls(), 1);
		sleep_ms(1);
	}
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
}

static void test_willneed_prefetch(void **state)
{
	struct object o = { 6 };
	struct chunk_owner ow;

	cache_init(8, 2);	/* a window of at most 2 chunks */
	owner_init(&ow, &o, 8 * CHUNK);
	chunk_cache_willneed(&ow, 0, CHUNK);
	WAIT_FOR(count(&counters.prefetches) == 1);
	assert_int_equal(read_check(&ow, 0, CHUNK), CHUNK);
	assert_int_equal(count(&counters.hits), 1);
	assert_int_equal(count(&counters.misses), 0);
	chunk_cache_willneed(&ow, CHUNK, CHUNK);	/* the window doubles */
	WAIT_FOR(count(&counters.prefetches) == 3);
	assert_int_equal(fetch_calls(), 3);
	assert_int_equal(read_check(&ow, 2 * CHUNK, CHUNK), CHUNK);
	assert_int_equal(count(&counters.hits), 2);
	assert_int_equal(fetch_calls(), 3);
	chunk_cache_forget(&ow);
}

struct forgetter {
	struct chunk_owner *ow;	/* what is forgotten */
	atomic_bool finished;	/* chunk_cache_forget() returned */
};

static void *forget_run(void *arg)
{
	struct forgetter *f = arg;

	chunk_cache_forget(f->ow);
	atomic_store(&f->finished, true);
	return NULL;
}

static void test_forget_owner(void **state)
{
	struct object oa = { 7 }, ob = { 8 };
	struct chunk_owner a, b;
	struct forgetter f = { .ow = &a };
	pthread_t t;

	cache_init(8, 1);
	owner_init(&a, &oa, 8 * CHUNK);
	owner_init(&b, &ob, 8 * CHUNK);
	assert_int_equal(read_check(&a, 0, 10), 10);
	assert_int_equal(read_check(&b, 0, 10), 10);
	chunk_cache_forget(&a);
	assert_int_equal(read_check(&b, 0, 10), 10);	/* b's stays */
	assert_int_equal(fetch_calls(), 2);
	assert_int_equal(read_check(&a, 0, 10), 10);	/* a's went */
	assert_int_equal(fetch_calls(), 3);
	/* a fetch running when its owner is forgotten is waited for */
	gate(true);
	chunk_cache_willneed(&a, 5 * CHUNK, CHUNK);
	WAIT_FOR(fetch_calls() == 4);
	assert_int_equal(pthread_create(&t, NULL, forget_run, &f), 0);
	sleep_ms(SETTLE_MS);
	assert_false(atomic_load(&f.finished));
	gate(false);
	pthread_join(t, NULL);
	assert_int_equal(read_check(&a, 5 * CHUNK, 10), 10);
	assert_int_equal(fetch_calls(), 5);
	chunk_cache_forget(&a);
	chunk_cache_forget(&b);
}

static void test_two_caches(void **state)
{
	struct chunk_cache_counters other_counters = { 0 };
	struct chunk_cache *other;
	struct object o = { 9 };
	struct chunk_owner a, b;

	cache_init(4, 1);
	assert_int_equal(chunk_cache_init(&other, &(struct chunk_cache_config){
				 .chunk_size = 2 * CHUNK, .mem = 8 * CHUNK,
				 .fetch_threads = 1, .prefetch_threads = 1,
				 .fetch = fake_fetch, .counters = &other_counters }),
			 0);
	owner_init(&a, &o, 8 * CHUNK);
	owner_init(&b, &o, 8 * CHUNK);
	b.cache = other;
	/* one object through both: each cache fetches, counts and sizes its
	 * own chunks */
	assert_int_equal(read_check(&a, CHUNK, 10), 10);
	assert_int_equal(read_check(&b, CHUNK, 10), 10);
	assert_int_equal(read_check(&b, 0, 10), 10);	/* in b's chunk 0 */
	assert_int_equal(fetch_calls(), 2);
	assert_int_equal(count(&counters.misses), 1);
	assert_int_equal(count(&other_counters.misses), 1);
	assert_int_equal(count(&other_counters.hits), 1);
	assert_int_equal(chunk_cache_ahead_max(other), 2 * CHUNK / 2);
	chunk_cache_forget(&b);
	chunk_cache_release(other);
	assert_int_equal(read_check(&a, CHUNK, 10), 10);	/* a's still there */
	assert_int_equal(count(&counters.hits), 1);
	chunk_cache_forget(&a);
}

/* After each test, passed or not: no fetch left waiting at the gate. */
static int cache_release(void **state)
{
	gate(false);
	chunk_cache_release(cache);
	cache = NULL;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_read_served, cache_release),
		cmocka_unit_test_teardown(test_concurrent_readers_one_fetch, cache_release),
		cmocka_unit_test_teardown(test_eviction_small_cache, cache_release),
		cmocka_unit_test_teardown(test_backpressure, cache_release),
		cmocka_unit_test_teardown(test_fetch_error, cache_release),
		cmocka_unit_test_teardown(test_willneed_prefetch, cache_release),
		cmocka_unit_test_teardown(test_forget_owner, cache_release),
		cmocka_unit_test_teardown(test_two_caches, cache_release),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
