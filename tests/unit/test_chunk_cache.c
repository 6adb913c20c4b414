/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chunk_cache.c - the chunk cache against a fake fetcher: reads
 * served and counted, concurrent readers of one chunk sharing one fetch,
 * eviction in a small cache, readers waiting while every slot is busy,
 * a failed fetch giving -EIO and being fetched again, prefetch windows,
 * forgetting an owner, and two caches side by side; and the ranges of
 * reads that jumped: only their bytes (or their WILLREAD's) fetched, in
 * the reader's own thread (a WILLREAD's kept for its read), adjacent
 * wants coalesced into one fetch while
 * it waits for a fetch thread, a forward stream still given
 * whole chunks and a window, ranges evicted once read, a failed extension,
 * ranges kept and found again through load/store (samples wanted apart
 * in one epoch found apart in the next, never bridged, also by reads
 * taken for a stream's), and readers growing
 * ranges at once; the fetch threads stopped before a fork and started
 * again after it; readers waiting for bytes of a fetch that trickles in
 * woken by their bytes (not by every piece), also when it fails half way.
 * No network: the fetcher fills chunks with a pattern of their offset
 * and can be held (a gate), made to fail, or made to deliver a step of
 * bytes at a time, as the test allows.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif
#include <cmocka.h>

#include "shardfs/chunk_cache.h"
#include "shardfs/util.h"
#include "tarbuild.h"

/* Bytes per chunk in every test. */
#define CHUNK 4096
/* Longest a test waits for something the fetch threads do (ms). */
#define WAIT_MAX_MS 5000
/* How long a test gives a thread to do what it must not (ms). */
#define SETTLE_MS 50
/* Further than a read at random lands from the one before (the cache's
 * CHUNK_JUMP, 1 MiB), in chunks; and objects that leave room for it. */
#define FAR (300 * CHUNK)
#define BIG (4 * FAR)

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
	uint64_t last_off;	/* first byte of the latest fetch */
	uint64_t last_len;	/* its bytes */
	pthread_t last_thread;	/* the thread that made it */
	uint64_t fail_off;	/* a fetch of this byte fails (UINT64_MAX:
				 * none) */
	size_t step;		/* bytes delivered at a time (0: a piece
				 * whole) */
	unsigned permits;	/* steps that may still be delivered
				 * (UINT_MAX: any) */
	uint64_t fail_at;	/* a fetch fails once this many bytes of it
				 * came (UINT64_MAX: never) */
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

/* May the fetcher deliver a step more, @done bytes of its body came?
 * Waits for a permit; false: the fetch fails here. */
static bool may_deliver(uint64_t done)
{
	bool ok;

	pthread_mutex_lock(&fake.lock);
	while (!fake.permits && done < fake.fail_at)
		pthread_cond_wait(&fake.opened, &fake.lock);
	ok = done < fake.fail_at;
	if (ok && fake.permits != UINT_MAX)
		fake.permits--;
	pthread_mutex_unlock(&fake.lock);
	return ok;
}

/* Fill @piece, body bytes from @off on, a step at a time as permitted:
 * false if the fetch failed meanwhile. */
static bool deliver(void *obj, const struct fetch_piece *piece, uint64_t off, uint64_t done)
{
	size_t step = fake.step ? fake.step : piece->len;

	for (size_t at = 0; at < piece->len; at += step) {
		size_t n = piece->len - at < step ? piece->len - at : step;

		if (!may_deliver(done + at))
			return false;
		for (size_t j = 0; j < n; j++)
			piece->buf[at + j] = (char)byte_at(obj, off + done + at + j);
		atomic_store_explicit(&piece->progress->bytes, at + n, memory_order_release);
		piece->progress->notify(piece->progress);
	}
	return true;
}

static ssize_t fake_fetch(void *obj, const struct fetch_piece *piece, unsigned n,
			  uint64_t off)
{
	uint64_t len = 0;
	bool fail;
	ssize_t done = 0;

	for (unsigned i = 0; i < n; i++)
		len += piece[i].len;
	pthread_mutex_lock(&fake.lock);
	fake.calls++;
	fake.pieces += n;
	fake.last_off = off;
	fake.last_len = len;
	fake.last_thread = pthread_self();
	while (fake.gate_closed)
		pthread_cond_wait(&fake.opened, &fake.lock);
	fail = off <= fake.fail_off && fake.fail_off < off + len;
	pthread_mutex_unlock(&fake.lock);
	if (fail)
		return -EIO;
	for (unsigned i = 0; i < n; i++) {
		if (!deliver(obj, &piece[i], off, (uint64_t)done))
			return -EIO;
		done += (ssize_t)piece[i].len;
	}
	return done;
}

/* Ranges the local copy keeps, the oldest replaced. */
#define DISK_RANGES 8

/* A local copy of ranges (as cache_dir keeps them, found by their exact
 * offset and length), under fake.lock. */
static struct {
	struct {
		uint64_t off;	/* first byte kept */
		size_t len;	/* bytes kept (0: none) */
		char buf[CHUNK]; /* the bytes */
	} range[DISK_RANGES];
	unsigned stores;	/* store() calls: the latest is in range
				 * [(stores - 1) % DISK_RANGES] */
	unsigned loads;		/* load() served */
	unsigned asked;		/* load() calls, served or not */
	bool held;		/* load() waits until it is let go */
} disk;

static int fake_load(void *obj, uint64_t off, void *buf, size_t len)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&fake.lock);
	disk.asked++;
	while (disk.held)
		pthread_cond_wait(&fake.opened, &fake.lock);
	for (unsigned i = 0; i < DISK_RANGES && rc; i++)
		if (disk.range[i].len && off == disk.range[i].off && len == disk.range[i].len) {
			memcpy(buf, disk.range[i].buf, len);
			disk.loads++;
			rc = 0;
		}
	pthread_mutex_unlock(&fake.lock);
	return rc;
}

static void fake_store(void *obj, uint64_t off, const void *buf, size_t len)
{
	unsigned i;

	pthread_mutex_lock(&fake.lock);
	i = disk.stores++ % DISK_RANGES;
	disk.range[i].off = off;
	disk.range[i].len = len;
	memcpy(disk.range[i].buf, buf, len);
	pthread_mutex_unlock(&fake.lock);
}

/* The range stored last: its first byte, or UINT64_MAX when it is not
 * @len bytes long (or none is). */
static uint64_t disk_kept(size_t len)
{
	uint64_t off = UINT64_MAX;

	pthread_mutex_lock(&fake.lock);
	if (disk.stores && disk.range[(disk.stores - 1) % DISK_RANGES].len == len)
		off = disk.range[(disk.stores - 1) % DISK_RANGES].off;
	pthread_mutex_unlock(&fake.lock);
	return off;
}

/* A count of the fakes, read under fake.lock. */
static unsigned locked(const unsigned *count)
{
	unsigned n;

	pthread_mutex_lock(&fake.lock);
	n = *count;
	pthread_mutex_unlock(&fake.lock);
	return n;
}

static unsigned fetch_calls(void)
{
	return locked(&fake.calls);
}

/* Did the thread @t make the latest fetch? */
static bool fetched_by(pthread_t t)
{
	bool same;

	pthread_mutex_lock(&fake.lock);
	same = pthread_equal(fake.last_thread, t);
	pthread_mutex_unlock(&fake.lock);
	return same;
}

/* Let the fetcher deliver @n more steps (0: none until told; UINT_MAX:
 * any), or fail once @fail_at bytes of its body came. */
static void permit(unsigned n, uint64_t fail_at)
{
	pthread_mutex_lock(&fake.lock);
	fake.permits = n == UINT_MAX ? UINT_MAX : fake.permits + n;
	fake.fail_at = fail_at;
	pthread_cond_broadcast(&fake.opened);
	pthread_mutex_unlock(&fake.lock);
}

static void gate(bool closed)
{
	pthread_mutex_lock(&fake.lock);
	fake.gate_closed = closed;
	pthread_cond_broadcast(&fake.opened);
	pthread_mutex_unlock(&fake.lock);
}

/* Hold the local copy's loads (@held), or let them go. */
static void disk_hold(bool held)
{
	pthread_mutex_lock(&fake.lock);
	disk.held = held;
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

/* A cache of @chunks chunks, @threads fetch threads (one may prefetch),
 * keeping ranges in the local copy (emptied) if @kept. */
static void cache_init_kept(unsigned chunks, unsigned threads, bool kept)
{
	fake.gate_closed = false;
	fake.calls = fake.pieces = 0;
	fake.fail_off = UINT64_MAX;
	fake.step = 0;
	fake.permits = UINT_MAX;
	fake.fail_at = UINT64_MAX;
	counters = (struct chunk_cache_counters){ 0 };
	if (kept)
		memset(&disk, 0, sizeof(disk));
	assert_int_equal(chunk_cache_init(&cache, &(struct chunk_cache_config){
				 .chunk_size = CHUNK, .mem = (uint64_t)chunks * CHUNK,
				 .fetch_threads = threads, .prefetch_threads = 1,
				 .fetch = fake_fetch, .load = kept ? fake_load : NULL,
				 .store = kept ? fake_store : NULL, .counters = &counters }),
			 0);
}

/* A cache of @chunks chunks, @threads fetch threads, no local copy. */
static void cache_init(unsigned chunks, unsigned threads)
{
	cache_init_kept(chunks, threads, false);
}

/* @ow reads @o: a reader at random until it reads forward. */
static void owner_init(struct chunk_owner *ow, struct object *o, uint64_t size)
{
	*ow = (struct chunk_owner){ .cache = cache, .obj = o, .size = size };
	atomic_store(&ow->last_chunk, UINT64_MAX);
	atomic_store(&ow->read_end, UINT64_MAX);
}

/* @ow reads @o as a stream, whatever its reads look like. */
static void stream_init(struct chunk_owner *ow, struct object *o, uint64_t size)
{
	owner_init(ow, o, size);
	chunk_cache_scan(ow, true);
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

/* A read in a thread: [off, off + len), then advise(DONTNEED). */
struct reader {
	struct chunk_owner *ow;	/* what is read */
	uint64_t off;		/* first byte */
	size_t len;		/* bytes */
	ssize_t result;		/* chunk_cache_read()'s */
	long switches;		/* voluntary context switches of the read */
	atomic_bool finished;	/* the read returned */
	atomic_int tid;		/* its thread's id, once it runs */
	pthread_t thread;	/* running it */
};

static void *reader_run(void *arg)
{
	struct reader *r = arg;
	struct rusage before, after;

	atomic_store(&r->tid, (int)gettid());
	getrusage(RUSAGE_THREAD, &before);
	r->result = read_check(r->ow, r->off, r->len);
	getrusage(RUSAGE_THREAD, &after);
	r->switches = after.ru_nvcsw - before.ru_nvcsw;
	chunk_cache_dontneed(r->ow, r->off, r->len);
	atomic_store(&r->finished, true);
	return NULL;
}

static void reader_start_at(struct reader *r, struct chunk_owner *ow, uint64_t off,
			    size_t len)
{
	r->ow = ow;
	r->off = off;
	r->len = len;
	r->result = 0;
	atomic_store(&r->finished, false);
	atomic_store(&r->tid, 0);
	assert_int_equal(pthread_create(&r->thread, NULL, reader_run, r), 0);
}

/* Has @r's read reached a wait (for a fetch, or for its turn at one)? */
static bool reader_waits(struct reader *r)
{
	int tid = atomic_load(&r->tid);

	return tid && !atomic_load(&r->finished) && tb_thread_asleep(tid);
}

/* A read of chunk @chunk whole, in a thread. */
static void reader_start(struct reader *r, struct chunk_owner *ow, uint64_t chunk)
{
	reader_start_at(r, ow, chunk * CHUNK, CHUNK);
}

/* A WILLREAD in a thread (it fetches there, and may wait at the gate). */
struct hinter {
	struct chunk_owner *ow;	/* what is announced */
	uint64_t off;		/* first byte */
	uint64_t len;		/* bytes */
	pthread_t thread;	/* running it */
};

static void *hinter_run(void *arg)
{
	struct hinter *h = arg;

	chunk_cache_willread(h->ow, h->off, h->len);
	return NULL;
}

static void hinter_start(struct hinter *h, struct chunk_owner *ow, uint64_t off, uint64_t len)
{
	*h = (struct hinter){ .ow = ow, .off = off, .len = len };
	assert_int_equal(pthread_create(&h->thread, NULL, hinter_run, h), 0);
}

static void test_read_served(void **state)
{
	struct object o = { 1 };
	struct chunk_owner ow;
	uint64_t size = 10 * CHUNK + 100;

	cache_init(8, 2);
	stream_init(&ow, &o, size);
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
	for (unsigned i = 0; i < 4; i++)	/* the others find it loading */
		WAIT_FOR(reader_waits(&r[i]));
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
	WAIT_FOR(reader_waits(&r[4]));			/* waits for a slot */
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
	fake.fail_off = 3 * CHUNK + 50;
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
	/* no stream: push-ahead's piece for a reader at random is not
	 * fetched ahead (it would bring what the reader took already) */
	chunk_cache_willneed(&ow, 0, CHUNK);
	sleep_ms(SETTLE_MS);
	assert_int_equal(fetch_calls(), 0);
	chunk_cache_scan(&ow, true);
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
	chunk_cache_scan(&a, true);
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
	stream_init(&a, &o, 8 * CHUNK);
	stream_init(&b, &o, 8 * CHUNK);
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

/* The latest fetch: its first byte and length. */
static void assert_last_fetch(uint64_t off, uint64_t len)
{
	uint64_t last_off, last_len;

	pthread_mutex_lock(&fake.lock);
	last_off = fake.last_off;
	last_len = fake.last_len;
	pthread_mutex_unlock(&fake.lock);
	assert_int_equal(last_off, off);
	assert_int_equal(last_len, len);
}

static void test_jumped_read_fetches_its_range(void **state)
{
	struct object o = { 10 };
	struct chunk_owner ow;

	cache_init(8, 2);
	owner_init(&ow, &o, BIG);
	/* a read that jumped: its bytes only, counted random */
	assert_int_equal(read_check(&ow, 5 * CHUNK + 100, 200), 200);
	assert_int_equal(fetch_calls(), 1);
	assert_last_fetch(5 * CHUNK + 100, 200);
	WAIT_FOR(count(&counters.random_bytes) == 200);	/* after the fetch */
	assert_int_equal(count(&counters.random_fetches), 1);
	assert_int_equal(count(&counters.stream_bytes), 0);
	/* inside it: served from memory */
	assert_int_equal(read_check(&ow, 5 * CHUNK + 150, 100), 100);
	assert_int_equal(fetch_calls(), 1);
	assert_int_equal(count(&counters.hits), 1);
	/* just past its end: only the missing bytes, into the same slot */
	assert_int_equal(read_check(&ow, 5 * CHUNK + 250, 150), 150);
	assert_int_equal(fetch_calls(), 2);
	assert_last_fetch(5 * CHUNK + 300, 100);
	/* before it: the slot, read by nobody, takes the new range */
	assert_int_equal(read_check(&ow, 5 * CHUNK, 50), 50);
	assert_last_fetch(5 * CHUNK, 50);
	/* across a chunk boundary: both pieces with one fetch */
	assert_int_equal(read_check(&ow, FAR + 10 * CHUNK - 30, 60), 60);
	assert_last_fetch(FAR + 10 * CHUNK - 30, 60);
	assert_int_equal(fake.pieces, 5);
	chunk_cache_forget(&ow);
}

static void test_willread_fetches_the_sample_once(void **state)
{
	struct object o = { 11 };
	struct chunk_owner ow;

	cache_init(8, 2);
	owner_init(&ow, &o, BIG);
	/* a sample of 3 files across a chunk boundary, read file by file */
	chunk_cache_willread(&ow, 3 * CHUNK - 1000, 3000);
	assert_int_equal(read_check(&ow, 3 * CHUNK - 1000, 1500), 1500);
	chunk_cache_willread(&ow, 3 * CHUNK + 1000, 500);
	assert_int_equal(read_check(&ow, 3 * CHUNK + 1000, 500), 500);
	assert_int_equal(read_check(&ow, 3 * CHUNK + 1500, 500), 500);
	assert_int_equal(fetch_calls(), 1);
	assert_last_fetch(3 * CHUNK - 1000, 3000);
	WAIT_FOR(count(&counters.random_bytes) == 3000);
	/* a later read of the sample: from the hint on, not just its own */
	chunk_cache_forget(&ow);
	chunk_cache_willread(&ow, FAR + 7 * CHUNK + 10, 2000);
	WAIT_FOR(fetch_calls() == 2);
	assert_int_equal(read_check(&ow, FAR + 7 * CHUNK + 1010, 100), 100);
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
}

static void test_jumped_read_fetches_in_its_thread(void **state)
{
	struct object o = { 25 };
	struct chunk_owner ow;
	struct reader r;

	cache_init(8, 2);
	owner_init(&ow, &o, BIG);
	/* a read that jumped fetches its range itself: no fetch thread
	 * between its reader and the transfer */
	reader_start_at(&r, &ow, 3 * CHUNK + 5, 100);
	pthread_join(r.thread, NULL);
	assert_int_equal(r.result, 100);
	assert_int_equal(fetch_calls(), 1);
	assert_true(fetched_by(r.thread));
	/* so does a WILLREAD, before it returns */
	chunk_cache_willread(&ow, FAR, 300);
	assert_int_equal(fetch_calls(), 2);
	assert_true(fetched_by(pthread_self()));
	assert_int_equal(read_check(&ow, FAR, 300), 300);
	assert_int_equal(fetch_calls(), 2);
	/* a stream's whole chunk goes to a fetch thread, whose reader
	 * copies its first bytes as they arrive */
	chunk_cache_scan(&ow, true);
	assert_int_equal(read_check(&ow, 2 * FAR, 10), 10);
	assert_int_equal(fetch_calls(), 3);
	assert_false(fetched_by(pthread_self()));
	chunk_cache_forget(&ow);
}

/*
 * With one fetch for readers allowed at a time (a cache of one fetch
 * thread), a read far from the others holds it at the gate; then
 * [@a, @a + @alen) is wanted (queued) and [@b, @b + @blen) after it,
 * joining it (@join: waited for) or not; the gate opens and every read
 * returns its bytes.
 */
static void wants_behind_a_fetch(struct chunk_owner *ow, uint64_t a, size_t alen,
				 uint64_t b, size_t blen, bool join)
{
	unsigned calls = fetch_calls();
	struct reader r[3];

	gate(true);
	reader_start_at(&r[0], ow, 3 * FAR, 10);
	WAIT_FOR(fetch_calls() == calls + 1);	/* the reader fetches */
	reader_start_at(&r[1], ow, a, alen);
	WAIT_FOR(reader_waits(&r[1]));		/* queued behind it */
	reader_start_at(&r[2], ow, b, blen);
	if (join)
		WAIT_FOR(count(&counters.coalesced) == 1);
	else
		sleep_ms(SETTLE_MS);
	gate(false);
	for (unsigned i = 0; i < 3; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].result, (ssize_t)r[i].len);
	}
}

static void test_willread_bytes_wait_for_their_read(void **state)
{
	struct object o = { 27 };
	struct chunk_owner ow;
	struct reader r;

	/* the cache gives the read CHUNK_IDLE_MS (100 ms) to come: more
	 * than valgrind may take between two calls */
	if (RUNNING_ON_VALGRIND)
		skip();
	cache_init(8, 2);
	owner_init(&ow, &o, BIG);
	/* a sample fetched for a WILLREAD, its read not come yet: a want
	 * before it in its chunk waits rather than take the slot over */
	chunk_cache_willread(&ow, 2 * FAR + 2000, 200);
	assert_int_equal(fetch_calls(), 1);
	reader_start_at(&r, &ow, 2 * FAR + 100, 100);
	sleep_ms(SETTLE_MS / 5);
	assert_int_equal(fetch_calls(), 1);
	assert_int_equal(read_check(&ow, 2 * FAR + 2000, 200), 200);
	/* read: the slot is the other want's; the sample was fetched once */
	pthread_join(r.thread, NULL);
	assert_int_equal(r.result, 100);
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
}

static void test_adjacent_wants_coalesce(void **state)
{
	struct object o = { 12 };
	struct chunk_owner ow;

	cache_init(8, 1);
	owner_init(&ow, &o, BIG);
	wants_behind_a_fetch(&ow, FAR + 100, 100, FAR + 250, 150, true);
	/* one fetch for the two wants and the bytes between them */
	assert_int_equal(fetch_calls(), 2);
	assert_last_fetch(FAR + 100, 300);
	chunk_cache_forget(&ow);
}

static void test_forward_stream_gets_whole_chunks(void **state)
{
	struct object o = { 13 };
	struct chunk_owner ow;
	uint64_t off = 0;

	cache_init(16, 2);	/* a window of up to 4 chunks */
	owner_init(&ow, &o, BIG);
	/* reads in a row, each where the one before ended: ranges for the
	 * first CHUNK_STREAM_STREAK - 1, then whole chunks and a window */
	for (unsigned i = 0; i < CHUNK_STREAM_STREAK + 1; i++, off += 100)
		assert_int_equal(read_check(&ow, off, 100), 100);
	WAIT_FOR(count(&counters.stream_bytes) == CHUNK - 200);
	for (; off < 3 * CHUNK; off += 1000)
		assert_int_equal(read_check(&ow, off, 1000), 1000);
	WAIT_FOR(count(&counters.prefetches) >= 1);
	WAIT_FOR(count(&counters.stream_bytes) >= 3 * CHUNK - 200);
	assert_int_equal(count(&counters.random_bytes), 200);
	/* a jump ends the stream: a range again */
	assert_int_equal(read_check(&ow, FAR + 7, 10), 10);
	WAIT_FOR(count(&counters.random_bytes) == 210);
	chunk_cache_forget(&ow);
}

/*
 * A stream's chunk read to its end and evicted is, for a while, not
 * fetched whole again by a read behind the stream (a second reader of
 * the shard a batch behind, push-ahead's worker): the read fetches its
 * own bytes.  Fetched again whole, such chunks cost a ShardAwareSampler
 * epoch 1.17-1.19x the bytes it used (docs/remote.md).
 */
static void test_passed_chunk_is_not_fetched_whole_again(void **state)
{
	struct object o = { 21 };
	struct chunk_owner ow;
	unsigned long long stream, random, misses;

	cache_init(4, 2);
	owner_init(&ow, &o, 32 * CHUNK);
	for (uint64_t off = 0; off < 16 * CHUNK; off += CHUNK / 2) {	/* a stream */
		assert_int_equal(read_check(&ow, off, CHUNK / 2), CHUNK / 2);
		chunk_cache_dontneed(&ow, off, CHUNK / 2);
	}
	WAIT_FOR(fetch_calls() >= 15);
	sleep_ms(SETTLE_MS);
	stream = count(&counters.stream_bytes);
	random = count(&counters.random_bytes);
	misses = count(&counters.misses);
	/* a chunk passed and taken over by those after it, among the last
	 * CHUNK_PASSED_RING passed: which of 8 to 11 the 4 slots still hold
	 * depends on the fetch threads (a hit fetches nothing): the first
	 * that misses */
	for (uint64_t c = 8; c < 12 && count(&counters.misses) == misses; c++)
		assert_int_equal(read_check(&ow, c * CHUNK + 100, 200), 200);
	assert_int_equal(count(&counters.misses), misses + 1);
	WAIT_FOR(count(&counters.random_bytes) == random + 200);
	sleep_ms(SETTLE_MS);
	assert_int_equal(count(&counters.stream_bytes), stream);
	chunk_cache_forget(&ow);
}

/* A reader of @ow in shard order, from @from to @to: reads of 1000
 * bytes, each advised DONTNEED after it, as fs.c does. */
static void read_forward(struct chunk_owner *ow, uint64_t from, uint64_t to)
{
	for (uint64_t off = from; off < to; off += 1000) {
		assert_int_equal(read_check(ow, off, 1000), 1000);
		chunk_cache_dontneed(ow, off, 1000);
	}
}

/*
 * A stream with a reader following it (a DataLoader's other worker, a
 * batch back): a prefetch does not take the chunk the one ahead passed a
 * moment ago, which the one behind still reads.  Taken, such chunks cost
 * a ShardAwareSampler epoch 1.10-1.13x the bytes it used (docs/remote.md).
 */
static void test_followed_stream_keeps_what_the_one_behind_reads(void **state)
{
	struct object o = { 25 };
	struct chunk_owner ow;
	unsigned calls;

	/* the cache gives the one behind CHUNK_IDLE_MS (100 ms) to come:
	 * more than valgrind may take between two calls */
	if (RUNNING_ON_VALGRIND)
		skip();
	cache_init(24, 2);	/* a window of up to 6 chunks */
	owner_init(&ow, &o, BIG);
	/* alone, the stream's prefetches take the chunks it passed */
	read_forward(&ow, 0, 19 * CHUNK);
	WAIT_FOR(count(&counters.prefetches) >= 20);
	/* a read behind it, further than CHUNK_FORWARD_GAP (16 chunks) */
	assert_int_equal(read_check(&ow, 2 * CHUNK + 100, 100), 100);
	read_forward(&ow, 19 * CHUNK, 21 * CHUNK);
	sleep_ms(SETTLE_MS / 5);
	calls = fetch_calls();
	assert_int_equal(read_check(&ow, 19 * CHUNK + 100, 100), 100);
	assert_int_equal(read_check(&ow, 20 * CHUNK + 100, 100), 100);
	assert_int_equal(fetch_calls(), calls);
	chunk_cache_forget(&ow);
}

static void test_ranges_read_are_evicted_first(void **state)
{
	struct object o = { 14 };
	struct chunk_owner ow;
	struct hinter h[4];

	cache_init(4, 4);	/* a thread per slot */
	owner_init(&ow, &o, BIG);
	for (uint64_t c = 0; c < 4; c++)
		assert_int_equal(read_check(&ow, c * FAR / 2 + 1, 10), 10);
	/* every slot holds a range that was read: a hint (which never
	 * waits for a slot) takes one at once */
	chunk_cache_willread(&ow, 3 * FAR, 10);
	WAIT_FOR(fetch_calls() == 5);
	assert_int_equal(read_check(&ow, 3 * FAR, 10), 10);
	assert_int_equal(fetch_calls(), 5);
	/* a range being fetched is not taken by a hint (each hint fetches
	 * in its own thread, held at the gate) */
	gate(true);
	for (uint64_t c = 0; c < 4; c++)
		hinter_start(&h[c], &ow, 2 * FAR + c * CHUNK, 10);
	WAIT_FOR(fetch_calls() == 9);
	chunk_cache_willread(&ow, 2 * FAR + 4 * CHUNK, 10);
	assert_int_equal(fetch_calls(), 9);
	gate(false);
	for (unsigned i = 0; i < 4; i++)
		pthread_join(h[i].thread, NULL);
	chunk_cache_forget(&ow);
}

static void test_failed_extension(void **state)
{
	struct object o = { 15 };
	struct chunk_owner ow;

	cache_init(8, 2);
	owner_init(&ow, &o, 8 * CHUNK);
	assert_int_equal(read_check(&ow, 2 * CHUNK, 100), 100);
	pthread_mutex_lock(&fake.lock);
	fake.fail_off = 2 * CHUNK + 150;
	pthread_mutex_unlock(&fake.lock);
	assert_int_equal(read_check(&ow, 2 * CHUNK + 100, 100), -EIO);
	assert_int_equal(fetch_calls(), 2);
	pthread_mutex_lock(&fake.lock);
	fake.fail_off = UINT64_MAX;
	pthread_mutex_unlock(&fake.lock);
	/* not kept: fetched again, every byte right */
	for (int w = 0; read_check(&ow, 2 * CHUNK, 200) == -EIO; w++) {
		assert_true(w < WAIT_MAX_MS);
		sleep_ms(1);
	}
	assert_int_equal(read_check(&ow, 2 * CHUNK, 200), 200);
	chunk_cache_forget(&ow);
}

static void test_ranges_stored_and_loaded(void **state)
{
	struct object o = { 16 };
	struct chunk_owner ow;

	cache_init_kept(8, 2, true);
	owner_init(&ow, &o, 8 * CHUNK);
	chunk_cache_willread(&ow, 4 * CHUNK + 64, 1000);
	assert_int_equal(read_check(&ow, 4 * CHUNK + 64, 1000), 1000);
	assert_int_equal(fetch_calls(), 1);
	WAIT_FOR(disk_kept(1000) == 4 * CHUNK + 64);	/* after the fetch */
	/* the next epoch (the memory forgotten): the same range from disk */
	chunk_cache_forget(&ow);
	chunk_cache_willread(&ow, 4 * CHUNK + 64, 1000);
	assert_int_equal(read_check(&ow, 4 * CHUNK + 64, 1000), 1000);
	assert_int_equal(fetch_calls(), 1);
	assert_int_equal(locked(&disk.loads), 1);
	/* a chunk a stream kept whole serves a range of it, and then the
	 * rest of the chunk, from memory */
	chunk_cache_forget(&ow);
	chunk_cache_scan(&ow, true);
	assert_int_equal(read_check(&ow, 6 * CHUNK, 10), 10);
	WAIT_FOR(disk_kept(CHUNK) == 6 * CHUNK);
	chunk_cache_forget(&ow);
	chunk_cache_scan(&ow, false);
	assert_int_equal(read_check(&ow, 6 * CHUNK + 100, 10), 10);
	assert_int_equal(read_check(&ow, 6 * CHUNK + 2000, 10), 10);
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
}

/* The samples of test_stored_samples_asked_apart: a tar header's
 * worth of bytes between them. */
#define SAMPLE_A (FAR + 100)
#define SAMPLE_B (FAR + 1124)
#define SAMPLE_LEN 512

static void test_stored_samples_asked_apart(void **state)
{
	struct object o = { 26 };
	struct chunk_owner ow;
	unsigned calls;

	/* one fetch for readers at a time (the others queue), ranges kept */
	cache_init_kept(8, 1, true);
	owner_init(&ow, &o, BIG);
	/* the 1st epoch reads two samples of one chunk apart (A's memory
	 * gone before B, as in a cache smaller than the set): each fetched
	 * and stored as it was wanted */
	chunk_cache_willread(&ow, SAMPLE_A, SAMPLE_LEN);
	assert_int_equal(read_check(&ow, SAMPLE_A, SAMPLE_LEN), SAMPLE_LEN);
	chunk_cache_forget(&ow);
	assert_int_equal(read_check(&ow, 0, 10), 10);	/* a jump between */
	chunk_cache_willread(&ow, SAMPLE_B, SAMPLE_LEN);
	assert_int_equal(read_check(&ow, SAMPLE_B, SAMPLE_LEN), SAMPLE_LEN);
	assert_int_equal(disk_kept(SAMPLE_LEN), SAMPLE_B);
	calls = fetch_calls();
	/* the 2nd: B right after A, whose range is still in memory; it
	 * takes the slot over rather than fetch from A's end (the header
	 * between them was never stored) */
	chunk_cache_forget(&ow);
	chunk_cache_willread(&ow, SAMPLE_A, SAMPLE_LEN);
	assert_int_equal(read_check(&ow, SAMPLE_A, SAMPLE_LEN), SAMPLE_LEN);
	chunk_cache_willread(&ow, SAMPLE_B, SAMPLE_LEN);
	assert_int_equal(read_check(&ow, SAMPLE_B, SAMPLE_LEN), SAMPLE_LEN);
	assert_int_equal(fetch_calls(), calls);
	/* the 3rd: A and B wanted while A waits for a fetch: B does not
	 * join A's fetch (whose bytes would span the header), each is
	 * loaded apart; only the read holding the one fetch slot goes out */
	chunk_cache_forget(&ow);
	wants_behind_a_fetch(&ow, SAMPLE_A, SAMPLE_LEN, SAMPLE_B, SAMPLE_LEN, false);
	assert_int_equal(fetch_calls(), calls + 1);
	assert_int_equal(count(&counters.coalesced), 0);
	/* without a local copy, the same wants join: one fetch for both */
	chunk_cache_release(cache);
	cache_init(8, 1);
	owner_init(&ow, &o, BIG);
	wants_behind_a_fetch(&ow, SAMPLE_A, SAMPLE_LEN, SAMPLE_B, SAMPLE_LEN, true);
	assert_int_equal(fetch_calls(), 2);
	assert_last_fetch(SAMPLE_A, SAMPLE_B + SAMPLE_LEN - SAMPLE_A);
	chunk_cache_forget(&ow);
}

/* Samples of test_stream_finds_its_range_on_disk: chunk 1 is on disk
 * as these two ranges only, as a 1st epoch at random stored them. */
#define KEPT_A (CHUNK + 100)
#define KEPT_B (CHUNK + 1124)

/* Store the @n samples at @off through @ow as a 1st epoch at random
 * does: each sample's WILLREAD and read, a jump between. */
static void keep_samples(struct chunk_owner *ow, const uint64_t *off, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (i) {
			assert_int_equal(read_check(ow, FAR, 10), 10);
			chunk_cache_forget(ow);
		}
		chunk_cache_willread(ow, off[i], SAMPLE_LEN);
		assert_int_equal(read_check(ow, off[i], SAMPLE_LEN), SAMPLE_LEN);
		assert_int_equal(disk_kept(SAMPLE_LEN), off[i]);
		chunk_cache_forget(ow);
	}
}

static void test_stream_finds_its_range_on_disk(void **state)
{
	struct object o = { 29 };
	struct chunk_owner ow;
	struct reader r[2];
	unsigned calls, asked;

	cache_init_kept(8, 2, true);
	owner_init(&ow, &o, BIG);
	keep_samples(&ow, (const uint64_t[]){ KEPT_A, KEPT_B }, 2);
	calls = fetch_calls();
	/* the 2nd epoch's reads taken for a stream's (files of one shard
	 * read forward by chance): the whole chunk is not on disk, the
	 * read's own range is, and serves it without a fetch */
	chunk_cache_scan(&ow, true);
	assert_int_equal(read_check(&ow, KEPT_A, SAMPLE_LEN), SAMPLE_LEN);
	assert_int_equal(fetch_calls(), calls);
	/* so is a WILLREAD's sample, then read from the slot it filled */
	chunk_cache_forget(&ow);
	chunk_cache_willread(&ow, KEPT_B, SAMPLE_LEN);
	assert_int_equal(read_check(&ow, KEPT_B, SAMPLE_LEN), SAMPLE_LEN);
	assert_int_equal(fetch_calls(), calls);
	/* a reader of the other sample that joined the stream's fetch
	 * (held on disk meanwhile) looks again once the slot kept the
	 * first reader's range alone, and finds its own on disk too */
	chunk_cache_forget(&ow);
	asked = locked(&disk.asked);
	disk_hold(true);
	reader_start_at(&r[0], &ow, KEPT_A, SAMPLE_LEN);
	WAIT_FOR(locked(&disk.asked) > asked);	/* its fetch looks on disk */
	reader_start_at(&r[1], &ow, KEPT_B, SAMPLE_LEN);
	WAIT_FOR(reader_waits(&r[1]));	/* it finds the chunk loading */
	disk_hold(false);
	for (unsigned i = 0; i < 2; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].result, SAMPLE_LEN);
	}
	assert_int_equal(fetch_calls(), calls);
	/* bytes on disk in no form still come as the stream's whole chunk */
	chunk_cache_forget(&ow);
	assert_int_equal(read_check(&ow, 3 * CHUNK + 10, 10), 10);
	assert_int_equal(fetch_calls(), calls + 1);
	assert_last_fetch(3 * CHUNK, CHUNK);
	chunk_cache_scan(&ow, false);
	chunk_cache_forget(&ow);
}

/*
 * A stream that found its reader's part alone on disk fetches nothing
 * ahead: the chunks after it hold samples of the same 1st epoch, stored
 * as ranges, and a window would GET them whole.  Until it meets a chunk
 * the disk holds nothing of.
 */
static void test_stream_of_stored_ranges_fetches_nothing_ahead(void **state)
{
	static const uint64_t kept[] = { CHUNK + 100, 2 * CHUNK + 300, 3 * CHUNK + 700 };
	struct object o = { 30 };
	struct chunk_owner ow;
	unsigned calls;

	cache_init_kept(8, 2, true);
	owner_init(&ow, &o, BIG);
	keep_samples(&ow, kept, ARRAY_SIZE(kept));
	calls = fetch_calls();
	chunk_cache_scan(&ow, true);
	for (unsigned i = 0; i < ARRAY_SIZE(kept); i++)
		assert_int_equal(read_check(&ow, kept[i], SAMPLE_LEN), SAMPLE_LEN);
	sleep_ms(SETTLE_MS);	/* a window's fetches would have started */
	assert_int_equal(fetch_calls(), calls);
	/* past them, a chunk stored in no form comes whole, and the stream's
	 * next step opens its window again: chunks 4 and 5, 6 ahead */
	assert_int_equal(read_check(&ow, 4 * CHUNK + 10, 10), 10);
	assert_int_equal(read_check(&ow, 5 * CHUNK + 10, 10), 10);
	WAIT_FOR(fetch_calls() == calls + 3);
	chunk_cache_scan(&ow, false);
	chunk_cache_forget(&ow);
}

static void test_willread_fetches_each_chunk_of_its_sample(void **state)
{
	struct object o = { 28 };
	struct chunk_owner ow;
	uint64_t boundary = FAR + 11 * CHUNK;

	cache_init_kept(8, 2, true);
	owner_init(&ow, &o, BIG);
	/* chunk 11 holds another sample, read */
	chunk_cache_willread(&ow, boundary + 2000, 500);
	assert_int_equal(read_check(&ow, boundary + 2000, 500), 500);
	/* a sample across the boundary of chunks 10 and 11: its WILLREAD
	 * fetches both parts with one GET, chunk 11's slot taken over, each
	 * part stored as a part of the sample (as a later epoch asks it),
	 * and the reads fetch nothing */
	chunk_cache_willread(&ow, boundary - 300, 600);
	assert_int_equal(fetch_calls(), 2);
	assert_last_fetch(boundary - 300, 600);
	assert_int_equal(disk_kept(300), boundary);
	assert_int_equal(read_check(&ow, boundary - 300, 600), 600);
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
}

/*
 * A sample across a chunk boundary takes the next chunk's slot over for
 * its one GET only from a range that was read: one a WILLREAD fetched
 * for a read still to come stays (its read fetches nothing), and the
 * sample's part in that chunk takes a GET of its own.
 */
static void test_a_run_takes_over_only_a_range_read(void **state)
{
	struct object o = { 31 };
	struct chunk_owner ow;
	uint64_t boundary = FAR + 21 * CHUNK;

	cache_init(8, 2);
	owner_init(&ow, &o, BIG);
	chunk_cache_willread(&ow, boundary + 2000, 500);	/* not read yet */
	chunk_cache_willread(&ow, boundary - 300, 600);
	assert_int_equal(fetch_calls(), 2);
	assert_int_equal(read_check(&ow, boundary + 2000, 500), 500);
	assert_int_equal(fetch_calls(), 2);
	assert_int_equal(read_check(&ow, boundary - 300, 600), 600);
	assert_int_equal(fetch_calls(), 3);
	assert_last_fetch(boundary, 300);
	chunk_cache_forget(&ow);
}

/* Reads in a row through one area of an owner, each growing the range
 * its slot holds. */
struct stepper {
	struct chunk_owner *ow;	/* what is read */
	uint64_t off;		/* where the first read starts */
	ssize_t bad;		/* the first read that failed, or 0 */
	pthread_t thread;	/* running it */
};

static void *stepper_run(void *arg)
{
	struct stepper *s = arg;

	for (unsigned i = 0; i < 400 && !s->bad; i++)
		if (read_check(s->ow, s->off + i * 20, 20) != 20)
			s->bad = -(ssize_t)i - 1;
	return NULL;
}

static void test_concurrent_extensions(void **state)
{
	struct object o = { 17 };
	struct chunk_owner ow;
	struct stepper s[4];

	/* four readers in turn on one owner, each a jump from the others:
	 * ranges, grown read after read while their fetches settle */
	cache_init(4, 4);
	owner_init(&ow, &o, BIG);
	for (unsigned i = 0; i < 4; i++) {
		s[i] = (struct stepper){ .ow = &ow, .off = i * FAR / 2 + 7 };
		assert_int_equal(pthread_create(&s[i].thread, NULL, stepper_run, &s[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(s[i].thread, NULL);
		assert_int_equal(s[i].bad, 0);
	}
	chunk_cache_forget(&ow);
}

/* chunk_cache_fork_prepare() in a thread, and whether it returned. */
struct preparer {
	atomic_bool returned;	/* chunk_cache_fork_prepare() did */
	pthread_t thread;	/* running it */
};

static void *preparer_run(void *arg)
{
	struct preparer *p = arg;

	chunk_cache_fork_prepare(cache);
	atomic_store(&p->returned, true);
	return NULL;
}

/* Before a fork the fetch threads finish the fetch they run and stop,
 * leaving what is queued; after it they start again and fetch that. */
/* Readers of the trickle tests: each reads a few bytes further into
 * one chunk than the one before. */
#define TRICKLE_READERS 8
/* Bytes the fetcher delivers at a time there: many steps per reader. */
#define TRICKLE_STEP 16

/* Start TRICKLE_READERS readers of chunk 0 of a stream @ow, reader @i
 * at byte i * CHUNK / TRICKLE_READERS, once its fetch is under way and
 * delivers TRICKLE_STEP bytes per permit. */
static void trickle_start(struct reader *r, struct chunk_owner *ow)
{
	pthread_mutex_lock(&fake.lock);
	fake.step = TRICKLE_STEP;
	fake.permits = 0;
	pthread_mutex_unlock(&fake.lock);
	for (unsigned i = 0; i < TRICKLE_READERS; i++)
		reader_start_at(&r[i], ow, i * (CHUNK / TRICKLE_READERS), 64);
	WAIT_FOR(fetch_calls() == 1);
	for (unsigned i = 0; i < TRICKLE_READERS; i++)	/* waits for its bytes */
		WAIT_FOR(reader_waits(&r[i]));
}

/* Steps of TRICKLE_STEP that bring the bytes reader @i reads. */
static unsigned steps_for(unsigned i)
{
	return (i * (CHUNK / TRICKLE_READERS) + 64 + TRICKLE_STEP - 1) / TRICKLE_STEP;
}

static void test_readers_woken_by_their_bytes(void **state)
{
	struct object o = { 23 };
	struct chunk_owner ow;
	struct reader r[TRICKLE_READERS];

	cache_init(8, 2);
	stream_init(&ow, &o, 4 * CHUNK);
	trickle_start(r, &ow);
	/* the first reader's bytes came, the rest of the chunk not yet: it
	 * returns, the others wait */
	permit(steps_for(0), UINT64_MAX);
	WAIT_FOR(atomic_load(&r[0].finished));
	sleep_ms(SETTLE_MS);
	for (unsigned i = 1; i < TRICKLE_READERS; i++)
		assert_false(atomic_load(&r[i].finished));
	/* the rest, a step at a time: 256 steps, each of which woke every
	 * waiting reader before; now a reader wakes when the first reader
	 * still waiting has its bytes (at most once per reader before it),
	 * and a little more for the lock */
	for (unsigned k = steps_for(0); k < CHUNK / TRICKLE_STEP; k++) {
		permit(1, UINT64_MAX);
		sleep_ms(1);
	}
	for (unsigned i = 0; i < TRICKLE_READERS; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].result, 64);
		/* valgrind runs one thread at a time and switches them
		 * itself: its count says nothing of the cache's wake-ups */
		if (!RUNNING_ON_VALGRIND)
			assert_true(r[i].switches <= 3 * (i + 2));
	}
	assert_int_equal(fetch_calls(), 1);
	chunk_cache_forget(&ow);
}

static void test_readers_of_a_fetch_failing_half_way(void **state)
{
	struct object o = { 24 };
	struct chunk_owner ow;
	struct reader r[TRICKLE_READERS];
	unsigned half = TRICKLE_READERS / 2;

	cache_init(8, 2);
	stream_init(&ow, &o, 4 * CHUNK);
	trickle_start(r, &ow);
	/* the first half's bytes came, then the fetch failed: they have
	 * their bytes, the others EIO, none left waiting */
	permit(steps_for(half - 1), UINT64_MAX);
	for (unsigned i = 0; i < half; i++)
		WAIT_FOR(atomic_load(&r[i].finished));
	permit(0, (uint64_t)steps_for(half - 1) * TRICKLE_STEP);
	for (unsigned i = 0; i < TRICKLE_READERS; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].result, i < half ? 64 : -EIO);
	}
	/* not kept: fetched again */
	permit(UINT_MAX, UINT64_MAX);
	for (int w = 0; read_check(&ow, CHUNK - 64, 64) == -EIO; w++) {
		assert_true(w < WAIT_MAX_MS);
		sleep_ms(1);
	}
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
}

static void test_fork_stops_and_restarts_the_fetch_threads(void **state)
{
	struct object o = { 15 };
	struct chunk_owner ow;
	struct preparer p = { 0 };
	struct reader r[2];

	/* one fetch for readers at a time: the second read queues */
	cache_init(8, 1);
	owner_init(&ow, &o, BIG);
	gate(true);
	reader_start_at(&r[0], &ow, 10, 100);
	WAIT_FOR(fetch_calls() == 1);	/* the reader fetches */
	reader_start_at(&r[1], &ow, FAR + 10, 100);
	WAIT_FOR(reader_waits(&r[1]));	/* queued behind it */
	assert_int_equal(pthread_create(&p.thread, NULL, preparer_run, &p), 0);
	sleep_ms(SETTLE_MS);
	assert_false(atomic_load(&p.returned));	/* waits for the fetch */
	gate(false);
	pthread_join(p.thread, NULL);
	pthread_join(r[0].thread, NULL);
	assert_int_equal(r[0].result, 100);
	sleep_ms(SETTLE_MS);
	assert_false(atomic_load(&r[1].finished));	/* no thread took it */
	assert_int_equal(fetch_calls(), 1);
	chunk_cache_fork_done(cache);
	pthread_join(r[1].thread, NULL);
	assert_int_equal(r[1].result, 100);
	assert_int_equal(fetch_calls(), 2);
	chunk_cache_forget(&ow);
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
		cmocka_unit_test_teardown(test_jumped_read_fetches_its_range, cache_release),
		cmocka_unit_test_teardown(test_willread_fetches_the_sample_once, cache_release),
		cmocka_unit_test_teardown(test_jumped_read_fetches_in_its_thread, cache_release),
		cmocka_unit_test_teardown(test_willread_bytes_wait_for_their_read, cache_release),
		cmocka_unit_test_teardown(test_adjacent_wants_coalesce, cache_release),
		cmocka_unit_test_teardown(test_forward_stream_gets_whole_chunks, cache_release),
		cmocka_unit_test_teardown(test_passed_chunk_is_not_fetched_whole_again, cache_release),
		cmocka_unit_test_teardown(test_followed_stream_keeps_what_the_one_behind_reads,
					  cache_release),
		cmocka_unit_test_teardown(test_ranges_read_are_evicted_first, cache_release),
		cmocka_unit_test_teardown(test_failed_extension, cache_release),
		cmocka_unit_test_teardown(test_ranges_stored_and_loaded, cache_release),
		cmocka_unit_test_teardown(test_stored_samples_asked_apart, cache_release),
		cmocka_unit_test_teardown(test_stream_finds_its_range_on_disk, cache_release),
		cmocka_unit_test_teardown(test_stream_of_stored_ranges_fetches_nothing_ahead,
					  cache_release),
		cmocka_unit_test_teardown(test_willread_fetches_each_chunk_of_its_sample,
					  cache_release),
		cmocka_unit_test_teardown(test_a_run_takes_over_only_a_range_read,
					  cache_release),
		cmocka_unit_test_teardown(test_concurrent_extensions, cache_release),
		cmocka_unit_test_teardown(test_readers_woken_by_their_bytes, cache_release),
		cmocka_unit_test_teardown(test_readers_of_a_fetch_failing_half_way,
					  cache_release),
		cmocka_unit_test_teardown(test_fork_stops_and_restarts_the_fetch_threads,
					  cache_release),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
