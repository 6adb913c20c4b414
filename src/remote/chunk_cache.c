/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chunk_cache.c - remote shard bytes in aligned chunks, in bounded memory.
 *
 * A remote object read forward (a stream) is read in chunks of chunk_size
 * bytes at multiples of chunk_size, so that a full read of a shard takes
 * ceil(size / chunk) GETs and fetches no byte twice while its chunks stay
 * cached.  A read that jumped (a sample at random) fetches only the range
 * it wants, the sample its file's first READ announced (WILLREAD) or its
 * own bytes, into the slot of the chunk the range lies in: fetching the
 * 8 MiB chunk of each 100 KB sample made a shuffled epoch through a cache
 * smaller than the set fetch 46-73x the bytes it used (docs/remote.md).
 * A slot holds one range [lo, hi) of its chunk; a read just past it grows
 * it (one GET for the missing bytes), a want just past a fetch not yet
 * started joins that fetch (coalesced), and a read elsewhere in the chunk
 * takes the slot over once nobody reads it.  A read or range across
 * chunk boundaries fetches its adjacent pieces with one ranged GET whose
 * body is spread over their slots, each filled, checked and cached as its
 * own: a sample at random is one GET wherever it lies.
 *
 * A stream is an owner read CHUNK_STREAM_STREAK times in a row each just
 * past the read before (a reader in shard order), one with a window open
 * (fs.c's readahead), or the index build's scan; a read that lands far
 * away (CHUNK_JUMP) ends it.  A stream's miss looks on disk for the whole
 * chunk, then for what a read that jumped would want (set_part()): a
 * shuffled reader taken for a stream by chance finds the samples a 1st
 * epoch stored apart; while the latest such miss of an object did, it
 * opens no window ahead, which would GET whole the chunks whose samples
 * are on disk too.
 *
 * The cache is a fixed array of cache_mem / chunk_size slots (their
 * buffers one region, backed as first filled: reads allocate nothing).  A
 * slot is free, loading (a GET fills it; readers copy the bytes they need
 * as soon as those have arrived, rather than wait for the whole chunk,
 * and never fetch it again), ready, or failed.  Ready slots nobody is
 * copying from are on an LRU list; a new chunk takes a free slot or one
 * whose reader is done with it.  When every slot is in use, readers wait
 * (backpressure) and prefetching stops: memory never grows past
 * cache_mem.
 *
 * A read that jumped fetches its range in its own thread, woken by the
 * transfer's end (fetch_for_reader()); other fetches run in
 * fetch_threads threads, reads that missed first; at most fetch_threads
 * fetches for readers run at once, in their threads or the workers', and
 * at most prefetch_threads workers fetch ahead at a time, so that a miss
 * never waits behind a window of prefetches.  What a fetch is (a ranged
 * GET, after a look in the disk cache) is the caller's: the cache calls
 * the callbacks of its configuration (shardfs/chunk_cache.h).
 *
 * A reader moving forward through a shard gets chunks fetched ahead of it
 * by a few threads: fs.c's readahead calls advise(WILLNEED) as the reader
 * advances, and so does a read that steps into the next chunk (the index
 * build's scan); each call widens the owner's window (1, 2, 4 ... chunks,
 * up to a quarter of the cache) of chunks in flight; a WILLNEED for an
 * owner that is no stream (push-ahead's piece around a read at random)
 * fetches nothing ahead, which would bring the files the reader took
 * already (measured: 1.57x the bytes used by a reader of every file).
 * Chunks a reader has passed (advise(DONTNEED) reaching a chunk's end),
 * and ranges fetched for a read that jumped once read, are evicted first
 * (by a prefetch, not yet those ahead of a second reader behind the
 * first: evictable()); a prefetch never evicts a chunk fetched ahead
 * that no reader has used yet (it stops instead), so a stream fetches
 * no byte twice even when many streams share a small cache (measured: 3
 * shards scanned at once through 8 slots fetched 5% of their bytes twice
 * before this rule).
 * Nor does a miss evict a chunk another stream is still reading (read in
 * the last CHUNK_IDLE_MS and not finished): the reader waits instead.
 *
 * Streams share the slots: a stream's window stays within its share of
 * them (the streams that read in the last CHUNK_STREAM_ACTIVE_MS and hold
 * a slot), its own chunk besides, and under 2 slots a stream nothing is
 * fetched ahead.  A stream whose chunk was taken over before it had read
 * it out (a slow reader, idle past CHUNK_IDLE_MS) is crowded: its misses
 * fetch ranges, as a read that jumped, until it has 2 slots again.
 * ShardAwareSampler's window reads 4 shards at once; at cache_mem=32M
 * (4 slots of 8 MiB) each fetched whole chunks and a window, chunks were
 * evicted before they were read out and fetched again: 2.4-3.8x the
 * bytes used (docs/remote.md).
 *
 * One mutex guards the table; it is never held across network I/O, only
 * for a hash lookup and a few pointer updates (one acquire per chunk a
 * read touches: with 128 KiB FUSE reads, 64 per 8 MiB chunk, a fraction
 * of a microsecond each against ~10 ms of transfer per chunk at 1 GB/s).
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/chunk_cache.h"
#include "shardfs/util.h"

/* A chunk not read for this long (ms) may be evicted although its reader
 * has not finished it: a stream that is still reading keeps its chunk,
 * one that stopped (a random read, a closed file) does not keep it. */
#define CHUNK_IDLE_MS 100
/* How long a reader waiting for a slot sleeps before it looks again for
 * a chunk that became idle meanwhile (ms). */
#define CHUNK_WAIT_MS 20
/* A transparent huge page (x86-64, arm64 with 4 KiB pages). */
#define CHUNK_HUGE_PAGE (2u << 20)
/* Most adjacent chunks one GET fills for a read that missed them all. */
#define CHUNK_RUN_MAX 32
/* A read that begins at most this far past the end of the one before
 * continues a stream (a reader in shard order skips a sample's small
 * members: a few KiB); one that lands further than CHUNK_JUMP away,
 * either way, jumped.  Between the two (readers of one stream whose
 * READs arrive a little out of order) the owner stays what it was. */
#define CHUNK_FORWARD_GAP (64u << 10)
#define CHUNK_JUMP (1u << 20)
/* Wanted bytes at most this far past a slot's range (or a fetch not yet
 * started) are fetched with it: one GET instead of two, for a few
 * bytes of tar headers and padding between them (not for a read that
 * jumped when ranges are kept on disk: gap()). */
#define CHUNK_COALESCE_GAP (16u << 10)
/* A stream that read in the last this many ms holds its share of the
 * slots (active_streams()). */
#define CHUNK_STREAM_ACTIVE_MS 1000
/* A chunk passed and evicted this recently is neither fetched ahead nor
 * fetched whole by a stream's miss (chunk_owner.passed). */
#define CHUNK_PASSED_MS 2000
/* A read ending further than this behind an owner's head starts a new
 * pass; one nearer (past CHUNK_FORWARD_GAP) follows the stream. */
#define CHUNK_FOLLOW_MAX (4u << 20)

enum chunk_state {
	CHUNK_FREE,		/* on the free list */
	CHUNK_LOADING,		/* a GET is filling it */
	CHUNK_READY,		/* holds len bytes of its chunk */
	CHUNK_FAILED,		/* its GET failed; dropped when released */
};

struct chunk {
	struct chunk_owner *owner; /* whose chunk; NULL when free */
	uint64_t index;		/* chunk number within the owner */
	enum chunk_state state;	/* see above */
	unsigned refs;		/* readers copying out, plus the fetcher */
	size_t lo;		/* first byte of the chunk it holds */
	size_t from;		/* [lo, from) was held before the fetch in
				 * flight, which fills [from, hi) */
	size_t hi;		/* end of the bytes it holds when ready */
	bool ranged;		/* its fetch is for a read that jumped */
	bool queued;		/* its fetch waits in a ring: hi may grow */
	bool loaded_whole;	/* its fetch of a range found the whole chunk
				 * on disk: it holds all of it once ready */
	size_t part_lo;		/* a stream's fetch: [part_lo, part_hi) of */
	size_t part_hi;		/* it is what its reader wants (set_part();
				 * 0, 0: none) */
	bool loaded_part;	/* its fetch found that part alone on disk:
				 * it holds only that once ready */
	char *data;		/* its chunk_size bytes of the arena */
	struct chunk *hnext;	/* next in its hash bucket */
	struct chunk *prev, *next; /* LRU links (ready, refs == 0) or free list */
	bool in_lru;		/* on the LRU list */
	bool consumed;		/* a reader copied from it since it was
				 * fetched: prefetching may evict it */
	bool done;		/* its reader went past its end */
	bool scanned;		/* fetched for the index build's scan, whose
				 * passing says nothing of readers behind */
	bool missed;		/* taken for a read that missed it, with the
				 * chunk before it: its first acquire counts
				 * that miss */
	struct chunk *run;	/* next chunk the same GET fills (loading,
				 * set when queued), or NULL */
	uint64_t used_ms;	/* last fetched or read (monotonic ms) */
	struct fetch_progress progress; /* bytes of [from, hi) filled so
				 * far, while loading: readers need not wait
				 * for the whole range */
	pthread_cond_t arrived;	/* its readers waiting for bytes sleep
				 * here (with the cache's lock) */
	atomic_size_t wake_at;	/* progress at which the first of them
				 * wants waking; SIZE_MAX: none waits */
};

/* Loading chunks waiting for a worker, in order. */
struct ring {
	struct chunk **slot;	/* one entry per slot of the cache */
	unsigned head;		/* first entry */
	unsigned len;		/* entries */
};

/* One cache (shardfs/chunk_cache.h). */
struct chunk_cache {
	pthread_mutex_t lock;	/* guards everything below */
	pthread_cond_t changed;	/* a chunk settled or was released (not:
				 * bytes arrived, chunk.arrived) */
	pthread_cond_t work;	/* a queue has entries a worker may take */
	struct chunk_cache_config cfg; /* sizes, callbacks, counters */
	unsigned nr;		/* slots */
	struct chunk *chunks;	/* the slots */
	char *arena;		/* their buffers, nr x chunk_size bytes */
	struct chunk **buckets;	/* hash table of non-free slots */
	unsigned nbuckets;	/* a power of two */
	struct chunk lru;	/* sentinel: next is evicted first */
	struct chunk *free_list; /* free slots, linked by next */
	struct ring demand;	/* chunks a reader waits for: first */
	struct ring ahead;	/* chunks fetched ahead of readers */
	unsigned busy_ahead;	/* workers fetching ahead now */
	unsigned fetching;	/* fetches for readers running now, in a
				 * reader's thread or a worker's: at most
				 * cfg.fetch_threads (fetch_for_reader()) */
	pthread_t *workers;	/* fetch threads, cfg.fetch_threads */
	unsigned nworkers;	/* started */
	pid_t workers_pid;	/* process that started them (fork) */
	bool stopping;		/* workers exit */
	unsigned count_gen;	/* bumped by each count of the streams */
};

static void stop_workers(struct chunk_cache *cc);
static void cancel_queued(struct chunk_cache *cc, const struct chunk_owner *ow);

/*
 * The slots' buffers, one region reserved at start and backed by the
 * kernel as the slots are first filled, in transparent huge pages where
 * it gives them (THP "madvise" mode, Debian's default): the first fill
 * of the cache then takes one page fault per 2 MiB instead of one per
 * 4 KiB.  Faults in a slot's first fill cost more than its transfer on
 * a fresh mount reading as much as cache_mem (docs/benchmarks.md, issue
 * 14); with a buffer of its own per slot, a chunk size that is no
 * multiple of 2 MiB (cache_mem under 64M) got small pages: at 32M, 9,800
 * faults a mount and a tenth of the daemon's CPU in an epoch's share
 * over loopback http (docs/remote.md, issue 29).
 */
static char *arena_alloc(size_t len)
{
	void *p;

	if (posix_memalign(&p, CHUNK_HUGE_PAGE, len))
		return NULL;
	memory_advise_huge(p, len);
	return p;
}

/* Free @cc, its tables and the slots' buffers. */
static void cache_free(struct chunk_cache *cc)
{
	for (unsigned i = 0; i < cc->nr; i++)
		pthread_cond_destroy(&cc->chunks[i].arrived);
	free(cc->chunks);
	free(cc->arena);
	free(cc->buckets);
	free(cc->demand.slot);
	free(cc->ahead.slot);
	free(cc->workers);
	pthread_cond_destroy(&cc->work);
	pthread_cond_destroy(&cc->changed);
	pthread_mutex_destroy(&cc->lock);
	free(cc);
}

int chunk_cache_init(struct chunk_cache **cachep, const struct chunk_cache_config *cfg)
{
	uint64_t nr = cfg->mem / cfg->chunk_size;
	struct chunk_cache *cc;

	assert(cfg->fetch && cfg->counters && cfg->fetch_threads &&
	       cfg->prefetch_threads);
	*cachep = NULL;
	cc = calloc(1, sizeof(*cc));
	if (!cc)
		return -ENOMEM;
	pthread_mutex_init(&cc->lock, NULL);
	pthread_cond_init(&cc->changed, NULL);
	pthread_cond_init(&cc->work, NULL);
	cc->cfg = *cfg;
	cc->nr = nr < CHUNK_CACHE_MIN_CHUNKS ? CHUNK_CACHE_MIN_CHUNKS : (unsigned)nr;
	for (cc->nbuckets = 1; cc->nbuckets < 2 * cc->nr; cc->nbuckets <<= 1)
		;
	cc->chunks = calloc(cc->nr, sizeof(*cc->chunks));
	cc->buckets = calloc(cc->nbuckets, sizeof(*cc->buckets));
	cc->demand.slot = calloc(cc->nr, sizeof(*cc->demand.slot));
	cc->ahead.slot = calloc(cc->nr, sizeof(*cc->ahead.slot));
	cc->workers = calloc(cfg->fetch_threads, sizeof(*cc->workers));
	cc->arena = arena_alloc(cc->nr * cfg->chunk_size);
	if (!cc->chunks || !cc->buckets || !cc->demand.slot || !cc->ahead.slot ||
	    !cc->workers || !cc->arena) {
		cc->nr = 0;	/* no condition variable made */
		cache_free(cc);
		return -ENOMEM;
	}
	cc->lru.next = cc->lru.prev = &cc->lru;
	for (unsigned i = 0; i < cc->nr; i++) {
		pthread_cond_init(&cc->chunks[i].arrived, NULL);
		atomic_init(&cc->chunks[i].wake_at, SIZE_MAX);
		cc->chunks[i].data = cc->arena + i * cfg->chunk_size;
		cc->chunks[i].next = cc->free_list;
		cc->free_list = &cc->chunks[i];
	}
	*cachep = cc;
	return 0;
}

void chunk_cache_release(struct chunk_cache *cc)
{
	if (!cc)
		return;
	stop_workers(cc);
	pthread_mutex_lock(&cc->lock);
	cancel_queued(cc, NULL);
	pthread_mutex_unlock(&cc->lock);
	cache_free(cc);
}

static unsigned bucket_of(struct chunk_cache *cc, const struct chunk_owner *ow, uint64_t index)
{
	uint64_t h = ((uintptr_t)ow >> 4) * 0x9e3779b97f4a7c15ull ^ index * 0xff51afd7ed558ccdull;

	return (unsigned)(h ^ (h >> 29)) & (cc->nbuckets - 1);
}

static struct chunk *find(struct chunk_cache *cc, const struct chunk_owner *ow, uint64_t index)
{
	struct chunk *c = cc->buckets[bucket_of(cc, ow, index)];

	while (c && (c->owner != ow || c->index != index))
		c = c->hnext;
	return c;
}

static void lru_remove(struct chunk *c)
{
	if (!c->in_lru)
		return;
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->in_lru = false;
}

/* Put @c on the LRU list: at the tail, or at the head (evict first). */
static void lru_insert(struct chunk_cache *cc, struct chunk *c, bool first)
{
	struct chunk *at = first ? &cc->lru : cc->lru.prev;

	c->prev = at;
	c->next = at->next;
	at->next->prev = c;
	at->next = c;
	c->in_lru = true;
}

static void unhash(struct chunk_cache *cc, struct chunk *c)
{
	struct chunk **p = &cc->buckets[bucket_of(cc, c->owner, c->index)];

	while (*p != c)
		p = &(*p)->hnext;
	*p = c->hnext;
}

static void make_free(struct chunk_cache *cc, struct chunk *c)
{
	lru_remove(c);
	unhash(cc, c);
	c->owner = NULL;
	c->state = CHUNK_FREE;
	c->next = cc->free_list;
	cc->free_list = c;
}

/* Is @c ahead of a reader that followed its owner's stream in the last
 * CHUNK_STREAM_ACTIVE_MS (behind the head): does that reader want it? */
static bool followed(const struct chunk_cache *cc, const struct chunk *c, uint64_t now)
{
	const struct chunk_owner *ow = c->owner;

	return now - atomic_load_explicit(&ow->behind_ms, memory_order_relaxed) <
	       CHUNK_STREAM_ACTIVE_MS &&
	       (c->index + 1) * cc->cfg.chunk_size >
	       atomic_load_explicit(&ow->behind_end, memory_order_relaxed);
}

/*
 * May @c be evicted, in pass @pass of victim() (lock held)?  Of the
 * chunks ahead of a reader that follows the stream, a prefetch takes
 * neither one passed in the last CHUNK_IDLE_MS nor one a reader is in
 * the middle of, until it has been left alone for CHUNK_STREAM_ACTIVE_MS:
 * a ShardAwareSampler DataLoader's two workers read each shard a batch
 * apart, push-ahead's worker ahead of both, and chunks a prefetch took
 * 2-50 ms after the one ahead passed them, or 100-250 ms after the slower
 * one's last read, were fetched again (docs/remote.md).  Only those ahead
 * of the one behind: two threads reading adjacent files each follow the
 * other, and a fast stream passes most of the cache in 100 ms.
 */
static bool evictable(const struct chunk_cache *cc, const struct chunk *c, bool prefetch,
		      int pass, uint64_t now)
{
	uint64_t idle = now - c->used_ms;

	if (c->ranged && c->consumed)
		return true;
	if (prefetch && c->consumed && followed(cc, c, now))
		return idle >= (c->done ? CHUNK_IDLE_MS : CHUNK_STREAM_ACTIVE_MS);
	return c->done || (idle >= CHUNK_IDLE_MS && c->consumed == !pass);
}

/*
 * The least recently used chunk that may be evicted: one its reader went
 * past, or one read but then left alone for CHUNK_IDLE_MS; for a read
 * that missed, failing those, one fetched ahead and not read for
 * CHUNK_IDLE_MS; a range fetched for a read that jumped goes once read.
 * A chunk a stream is still reading is kept (evicting it
 * would fetch its bytes twice: with 64 streams through 8 slots, 2 MB/s
 * instead of the link's speed), and a prefetch never evicts a chunk
 * fetched ahead that no reader has used, nor what evictable() keeps from
 * it.  NULL: wait.  O(slots) under the lock, on a miss only.
 */
static struct chunk *victim(struct chunk_cache *cc, bool prefetch)
{
	uint64_t now = monotonic_ms();

	for (int pass = 0; pass < (prefetch ? 1 : 2); pass++)
		for (struct chunk *c = cc->lru.next; c != &cc->lru; c = c->next)
			if (evictable(cc, c, prefetch, pass, now))
				return c;
	return NULL;
}

/*
 * Chunk @index of @ow was read to its end and is evicted (lock held).
 * Two readers of a shard a chunk apart (DataLoader workers taking turns,
 * push-ahead's worker and the READs it did not spare) pass a chunk
 * before the one behind has read its part: fetched ahead again, or
 * whole by the one behind, it cost a ShardAwareSampler epoch 20 MB of
 * 221 at cache_mem=32M (docs/remote.md).  Remembered, the one behind
 * fetches its own bytes instead.
 */
static void note_passed(struct chunk_owner *ow, uint64_t index)
{
	ow->passed[ow->passed_next] = (struct chunk_passed){ index, monotonic_ms() };
	ow->passed_next = (ow->passed_next + 1) % CHUNK_PASSED_RING;
}

/* Was chunk @index of @ow passed and evicted lately (lock held)? */
static bool passed_lately(const struct chunk_owner *ow, uint64_t index, uint64_t now)
{
	for (unsigned i = 0; i < CHUNK_PASSED_RING; i++)
		if (ow->passed[i].ms && ow->passed[i].index == index &&
		    now - ow->passed[i].ms < CHUNK_PASSED_MS)
			return true;
	return false;
}

/* Slot @c loading, referenced once, holding nothing yet (set_range()
 * says what to fetch). */
static void slot_reset(struct chunk *c)
{
	c->consumed = false;
	c->done = false;
	c->missed = false;
	c->ranged = false;
	c->queued = false;
	c->lo = c->from = c->hi = 0;
	c->part_lo = c->part_hi = 0;
	c->run = NULL;
	c->used_ms = monotonic_ms();
	atomic_store_explicit(&c->progress.bytes, 0, memory_order_relaxed);
	c->state = CHUNK_LOADING;
	c->refs = 1;
}

/* A slot for chunk @index of @ow, as slot_reset() leaves it; or NULL. */
static struct chunk *take_slot(struct chunk_cache *cc, struct chunk_owner *ow, uint64_t index,
			       bool prefetch)
{
	struct chunk *c = cc->free_list;

	if (c) {
		cc->free_list = c->next;
	} else if ((c = victim(cc, prefetch))) {
		/* a stream's chunk taken over before it was read out: its
		 * stream fetches ranges from now on */
		if (!c->ranged && !c->done && c->owner != ow)
			atomic_store_explicit(&c->owner->crowded, true, memory_order_relaxed);
		if (!c->ranged && c->done && !c->scanned)
			note_passed(c->owner, c->index);
		lru_remove(c);
		unhash(cc, c);
	} else {
		return NULL;
	}
	slot_reset(c);
	c->owner = ow;
	c->index = index;
	c->scanned = atomic_load_explicit(&ow->scanning, memory_order_relaxed);
	c->hnext = cc->buckets[bucket_of(cc, ow, index)];
	cc->buckets[bucket_of(cc, ow, index)] = c;
	return c;
}

/* Drop a reference (lock held); an unused chunk becomes evictable. */
static void put(struct chunk_cache *cc, struct chunk *c)
{
	if (--c->refs)
		return;
	if (c->state == CHUNK_FAILED)
		make_free(cc, c);
	else
		lru_insert(cc, c, false);
	pthread_cond_broadcast(&cc->changed);
}

/* Drop the fetcher's reference to each chunk of run @c (lock held). */
static void put_run(struct chunk_cache *cc, struct chunk *c)
{
	while (c) {
		struct chunk *next = c->run;

		c->run = NULL;
		put(cc, c);
		c = next;
	}
}

/* Queue run @c (lock held); its chunks are queued until popped. */
static void ring_push(struct chunk_cache *cc, struct ring *r, struct chunk *c)
{
	r->slot[(r->head + r->len++) % cc->nr] = c;
	for (; c; c = c->run)
		c->queued = true;
}

static struct chunk *ring_pop(struct chunk_cache *cc, struct ring *r)
{
	struct chunk *c = r->slot[r->head];

	r->head = (r->head + 1) % cc->nr;
	r->len--;
	for (struct chunk *q = c; q; q = q->run)
		q->queued = false;
	return c;
}

/* Wake the readers waiting for bytes of chunk @c (lock held). */
static void wake_readers(struct chunk *c)
{
	atomic_store(&c->wake_at, SIZE_MAX);
	pthread_cond_broadcast(&c->arrived);
}

/*
 * A piece of a chunk arrived (in the fetcher's thread, no lock held):
 * wake its readers once the first of them has its bytes, not at every
 * piece.  Waking every waiting reader of the cache at each piece cost 46-58
 * context switches a sample with 8 readers; waking only at a piece's
 * end, 1.3-1.7x the samples/s and half the daemon's CPU
 * (bench-runs/issue-29-remote.md).  The fences pair with
 * wait_for_bytes(): either the reader sees these bytes or this sees its
 * wake_at.
 */
static void progress_notify(struct fetch_progress *p)
{
	struct chunk *c = (struct chunk *)((char *)p - offsetof(struct chunk, progress));
	struct chunk_cache *cc;

	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&p->bytes, memory_order_relaxed) <
	    atomic_load_explicit(&c->wake_at, memory_order_relaxed))
		return;
	cc = c->owner->cache;
	pthread_mutex_lock(&cc->lock);
	wake_readers(c);
	pthread_mutex_unlock(&cc->lock);
}

/* Bytes of chunk @c: chunk_size, less for the object's last one. */
static size_t chunk_bytes(struct chunk_cache *cc, const struct chunk *c)
{
	uint64_t off = c->index * cc->cfg.chunk_size;

	return c->owner->size - off < cc->cfg.chunk_size ? (size_t)(c->owner->size - off)
						       : (size_t)cc->cfg.chunk_size;
}

/* Bytes of the object a fetch brings: [off, end); ranged: for a read
 * that jumped. */
struct want {
	uint64_t off;		/* first byte wanted */
	uint64_t end;		/* past the last one */
	bool ranged;		/* not a stream's whole chunks */
	uint64_t own_off;	/* what the reader wants itself: what a */
	uint64_t own_end;	/* read at random would fetch (set_part()) */
};

/* What a miss of [@off, @end) fetches: for a stream, the whole chunks
 * it lies in (those bytes its own); else just those bytes. */
static struct want want_of(struct chunk_cache *cc, uint64_t off, uint64_t end, bool stream)
{
	uint64_t cs = cc->cfg.chunk_size;

	if (stream)
		return (struct want){ off / cs * cs, (end + cs - 1) / cs * cs, false, off, end };
	return (struct want){ off, end, true, off, end };
}

/* What @w fetches of chunk @index of @ow (lock held): a stream's whole
 * chunk, unless the chunk was passed lately; then, in *@tmp, what a read
 * at random would fetch. */
static const struct want *want_in(const struct chunk_owner *ow, uint64_t index,
				  const struct want *w, struct want *tmp)
{
	if (w->ranged || !passed_lately(ow, index, monotonic_ms()))
		return w;
	*tmp = want_of(ow->cache, w->own_off, w->own_end, false);
	return tmp;
}

/* End of what @w wants of chunk @c, within the chunk. */
static size_t want_hi(struct chunk_cache *cc, const struct chunk *c, const struct want *w)
{
	uint64_t base = c->index * cc->cfg.chunk_size;

	assert(w->end > base);
	return w->end - base < chunk_bytes(cc, c) ? (size_t)(w->end - base) : chunk_bytes(cc, c);
}

/* Have empty chunk @c fetch what @w wants of it (lock held). */
static void set_range(struct chunk_cache *cc, struct chunk *c, const struct want *w)
{
	uint64_t base = c->index * cc->cfg.chunk_size;

	c->lo = c->from = w->off > base ? (size_t)(w->off - base) : 0;
	c->hi = want_hi(cc, c, w);
	c->ranged = w->ranged;
	assert(c->lo < c->hi);
}

/* Bytes of the fetch in flight into @c that arrived. */
static size_t arrived(const struct chunk *c)
{
	return atomic_load_explicit(&c->progress.bytes, memory_order_acquire);
}

/* Does loading chunk @c hold all the bytes of its fetch? */
static bool complete(const struct chunk *c)
{
	return arrived(c) == c->hi - c->from;
}

/* End of the bytes of @c a reader may copy, from c->lo on: all once
 * ready; while loading, what has arrived; none after a failed fetch (the
 * read fails, rather than copy what came and meet the next fetch of the
 * same bytes). */
static size_t avail_end(const struct chunk *c)
{
	return c->state == CHUNK_READY ? c->hi : c->state == CHUNK_LOADING ?
	       c->from + arrived(c) : 0;
}

/* One GET fills the runs' ranges from @first up to @end (excluded),
 * adjacent in the object; each range that came whole goes to the disk
 * cache as it was fetched (a stream's whole chunk, a sample, the bytes
 * that grew a range), so that a later epoch asking these bytes, or any
 * part of them, finds them. */
static void get_stretch(struct chunk_cache *cc, struct chunk *first, struct chunk *end)
{
	struct chunk_cache_counters *k = cc->cfg.counters;
	struct fetch_piece piece[CHUNK_RUN_MAX];
	struct chunk *r = first;
	unsigned long long got = 0;
	unsigned n = 0;

	do {
		assert(n < CHUNK_RUN_MAX);	/* extend_run() */
		piece[n++] = (struct fetch_piece){ r->data + r->from, r->hi - r->from,
						   &r->progress };
	} while ((r = r->run) != end);
	cc->cfg.fetch(first->owner->obj, piece, n,
		      first->index * cc->cfg.chunk_size + first->from);
	for (r = first; r != end; r = r->run) {
		got += arrived(r);
		if (cc->cfg.store && complete(r))
			cc->cfg.store(r->owner->obj, r->index * cc->cfg.chunk_size + r->from,
				      r->data + r->from, r->hi - r->from);
	}
	atomic_fetch_add_explicit(first->ranged ? &k->random_bytes : &k->stream_bytes, got,
				  memory_order_relaxed);
	if (first->ranged)
		atomic_fetch_add_explicit(&k->random_fetches, 1, memory_order_relaxed);
}

/*
 * Fill chunk @r's fetch from the disk cache (lock not held): its range as
 * fetched before, or the whole chunk (a range of a new slot: a stream
 * kept the chunk whole, then a reader at random wants part of it; no
 * reader copies from the slot yet, so the bytes before the range may be
 * written).  True when there.  Else a stream's fetch with a part
 * (set_part()) loads that part alone, if there: loaded_part, and no GET
 * (keep_part() settles the slot on it under the lock).
 */
static bool load(struct chunk_cache *cc, struct chunk *r)
{
	uint64_t base = r->index * cc->cfg.chunk_size;
	size_t whole = chunk_bytes(cc, r);

	if (r->from == r->lo && r->hi - r->lo < whole &&
	    !cc->cfg.load(r->owner->obj, base, r->data, whole))
		return r->loaded_whole = true;
	if (!cc->cfg.load(r->owner->obj, base + r->from, r->data + r->from, r->hi - r->from))
		return true;
	r->loaded_part = r->part_hi &&
			 !cc->cfg.load(r->owner->obj, base + r->part_lo, r->data + r->part_lo,
				       r->part_hi - r->part_lo);
	return false;
}

/*
 * Chunk @r's stream fetch found only its reader's part on disk (lock
 * held): the slot holds that part, as a range for a read at random
 * would (evicted once read), kept after the bytes it held if the part
 * starts where they end.  A reader that joined the fetch for other
 * bytes looks again (acquire()).
 */
static void keep_part(struct chunk *r)
{
	if (r->part_lo > r->from)
		r->lo = r->from = r->part_lo;
	r->hi = r->part_hi;
	r->ranged = true;
	r->loaded_part = false;
	atomic_store_explicit(&r->progress.bytes, r->hi - r->from, memory_order_relaxed);
}

/*
 * Fill the loading ranges of run @c (adjacent in one owner): each from
 * the disk cache if it is there, the others with one GET per stretch of
 * adjacent ones (lock not held), then drop the fetcher's references.  A
 * chunk is ready when all its bytes came, even if a later one of its GET
 * failed.
 */
static void fetch(struct chunk_cache *cc, struct chunk *c)
{
	struct chunk *r, *first = NULL;

	for (r = c; r; r = r->run) {
		r->progress.notify = progress_notify;
		if (cc->cfg.load && load(cc, r))
			atomic_store_explicit(&r->progress.bytes, r->hi - r->from,
					      memory_order_release);
		if (r->part_hi)	/* a stream's miss: what the disk held of it */
			atomic_store_explicit(&r->owner->parts_stored, r->loaded_part,
					      memory_order_relaxed);
	}
	for (r = c;; r = r->run) {
		bool get = r && !complete(r) && !r->loaded_part;

		if (get && !first)
			first = r;
		if (!get && first) {
			get_stretch(cc, first, r);
			first = NULL;
		}
		if (!r)
			break;
	}
	pthread_mutex_lock(&cc->lock);
	for (r = c; r; r = r->run) {
		if (r->loaded_part)
			keep_part(r);
		r->state = complete(r) ? CHUNK_READY : CHUNK_FAILED;
		wake_readers(r);
		if (r->loaded_whole) {
			r->lo = r->from = 0;
			r->hi = chunk_bytes(cc, r);
			atomic_store_explicit(&r->progress.bytes, r->hi, memory_order_relaxed);
			r->loaded_whole = false;
		}
	}
	pthread_cond_broadcast(&cc->changed);
	/* with the state: once ready, a chunk may be given a new fetch and
	 * run at once (grow()), which a later put_run() would cut */
	put_run(cc, c);	/* the fetcher's references */
	pthread_mutex_unlock(&cc->lock);
}

/* Wait (lock held) for a chunk to be released, or for CHUNK_WAIT_MS, after
 * which one may have become idle. */
static void wait_a_little(struct chunk_cache *cc)
{
	struct timespec ts = deadline_after_ms(CLOCK_REALTIME, CHUNK_WAIT_MS);

	pthread_cond_timedwait(&cc->changed, &cc->lock, &ts);
}

/*
 * Wait (lock held) until loading chunk @c holds its bytes up to @need, or
 * settled: woken by the piece that brings them (progress_notify()) or
 * by its settling, not by every piece of every fetch.  The reader that
 * needs the fewest bytes sets wake_at; each wakes, looks, and waits
 * again if it needs more.
 */
static void wait_for_bytes(struct chunk_cache *cc, struct chunk *c, size_t need)
{
	while (c->state == CHUNK_LOADING && avail_end(c) < need) {
		size_t at = need - c->from;

		if (at < atomic_load_explicit(&c->wake_at, memory_order_relaxed))
			atomic_store_explicit(&c->wake_at, at, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		if (avail_end(c) >= need)
			break;
		pthread_cond_wait(&c->arrived, &cc->lock);
	}
}

static void start_workers(struct chunk_cache *cc);

/*
 * Fetch loading run @c for a reader (lock held).  A range (a read that
 * jumped) is fetched in the reader's own thread while fewer than
 * cfg.fetch_threads fetches for readers run: the reader sleeps in the
 * transfer (remote_http.c: in its poll, when no other transfer runs).
 * Queued for a fetch thread, a sample went FUSE worker -> fetch thread
 * -> curl's event thread -> fetch thread -> reader (docs/remote.md: 7-10
 * context switches of the daemon a sample).  A stream's whole chunks go
 * to a fetch thread, ahead of any prefetch, so that its reader copies
 * its first bytes as they arrive; so do ranges past the limit, which
 * wants just past them may join while they wait (coalesced).  Without
 * workers (before the daemon's fork), everything is fetched here.
 */
static void fetch_for_reader(struct chunk_cache *cc, struct chunk *c)
{
	start_workers(cc);
	if (cc->nworkers && (!c->ranged || cc->fetching >= cc->cfg.fetch_threads)) {
		ring_push(cc, &cc->demand, c);
		pthread_cond_signal(&cc->work);
		return;
	}
	cc->fetching++;
	pthread_mutex_unlock(&cc->lock);
	fetch(cc, c);
	pthread_mutex_lock(&cc->lock);
	cc->fetching--;
	if (cc->demand.len)	/* one queued past the limit may start */
		pthread_cond_signal(&cc->work);
	if (cc->stopping && !cc->fetching)
		pthread_cond_broadcast(&cc->changed);	/* stop_workers() */
}

/*
 * Is ready chunk @c waiting for the read it was fetched for?  Nobody has
 * copied from it since, and for less than CHUNK_IDLE_MS.  A WILLREAD
 * fetches in its caller's thread and holds no reference once done: a
 * want elsewhere in the chunk, taking the slot over before the read came,
 * made that read fetch its bytes again (1.02 GETs a sample, 2 threads).
 */
static bool unread(const struct chunk *c)
{
	return !c->consumed && monotonic_ms() - c->used_ms < CHUNK_IDLE_MS;
}

/*
 * May a run that wants the first @hi bytes of cached chunk @n take its
 * slot over (lock held)?  When @n holds a range at random (read once)
 * without them, ready, and nobody reads it, nor waits to read it.  Then
 * it is reset as a slot just taken.
 */
static bool retake(struct chunk *n, size_t hi)
{
	if (!n->ranged || (n->lo == 0 && hi <= n->hi) || n->state != CHUNK_READY ||
	    n->refs || unread(n))
		return false;
	lru_remove(n);
	slot_reset(n);
	return true;
}

/*
 * Chunk @c (just given its range for a read that missed it) heads a run:
 * when its range reaches the chunk's end, take the chunks after it that
 * @w wants and that are not cached, or that hold other bytes nobody
 * reads (retake()), while slots are free or evictable (as a prefetch may
 * evict, with @prefetch), so that one GET fetches them all (lock held).
 * A sample across a chunk boundary whose next chunk held another sample
 * took 2 GETs: 1.01 a sample in a shuffled epoch at 1 MiB chunks.
 */
static void extend_run(struct chunk_cache *cc, struct chunk *c, const struct want *w,
		       bool prefetch)
{
	struct chunk *tail = c, *n;

	for (uint64_t i = c->index + 1; tail->hi == chunk_bytes(cc, tail) &&
	     i * cc->cfg.chunk_size < w->end && i - c->index < CHUNK_RUN_MAX; i++) {
		n = find(cc, c->owner, i);
		if (n ? !retake(n, want_hi(cc, n, w)) :
			!(n = take_slot(cc, c->owner, i, prefetch)))
			break;
		set_range(cc, n, w);
		n->missed = true;
		tail->run = n;
		tail = n;
	}
}

/*
 * The part of stream chunk @c's fetch that @w's reader wants itself
 * (lock held), which load() falls back to.  A shuffled reader whose
 * files of one shard follow each other by chance is taken for a stream
 * and asks whole chunks; with cache_dir a 2nd epoch found such a chunk
 * on disk only as the ranges the 1st stored, and fetched it although
 * the read's own bytes were there (the perf group: 1 GET in about 1 run
 * of 10).  None when the part is all of the fetch, or no disk.
 */
static void set_part(struct chunk_cache *cc, struct chunk *c, const struct want *w)
{
	uint64_t base = c->index * cc->cfg.chunk_size;
	uint64_t lo = w->own_off > base + c->from ? w->own_off : base + c->from;
	uint64_t hi = w->own_end < base + c->hi ? w->own_end : base + c->hi;

	c->part_lo = c->part_hi = 0;
	if (!w->ranged && cc->cfg.load && lo < hi && hi - lo < c->hi - c->from) {
		c->part_lo = (size_t)(lo - base);
		c->part_hi = (size_t)(hi - base);
	}
}

/* Start a fetch of what @w wants of chunk @c (taken, or ready and
 * emptied): its range, and the chunks after it (lock held). */
static void start_fetch(struct chunk_cache *cc, struct chunk *c, const struct want *w)
{
	extend_run(cc, c, w, false);
	for (struct chunk *r = c; r; r = r->run)
		set_part(cc, r, w);
	fetch_for_reader(cc, c);
}

/*
 * Bytes past the end of a slot's range that a want of @w may lie and
 * still be fetched with it.  None for a read that jumped when ranges are
 * kept on disk (cfg.load): fetched with the range, the bytes between (a
 * tar header) are stored only inside that one fetch, and a later epoch
 * that asks the two samples apart, or bridges two it stored apart, finds
 * no copy of them (a 2nd epoch of 1,000 samples made 1 GET of 109 KB,
 * docs/remote.md).  Each want then fetches and stores just its bytes,
 * and the same wants find them in any order.
 */
static size_t gap(const struct chunk_cache *cc, const struct want *w)
{
	return w->ranged && cc->cfg.load ? 0 : CHUNK_COALESCE_GAP;
}

/*
 * Chunk @c holds no [@in, @need) of its bytes, which @w wants: have it
 * fetch them with @refs more references (the reader's), lock held.  A
 * fetch of it not yet started takes them if they lie just past its end
 * (coalesced: one GET); a ready chunk holding the bytes just before them
 * fetches from its end on; one nobody reads, nor waits to read, takes
 * @w's range instead.  False: it cannot now (loading, failed, or read
 * elsewhere).
 */
static bool grow(struct chunk_cache *cc, struct chunk *c, const struct want *w, size_t in,
		 size_t need, unsigned refs)
{
	struct chunk_cache_counters *k = cc->cfg.counters;
	bool after = c->lo <= in && in <= c->hi + gap(cc, w);
	size_t hi = want_hi(cc, c, w);

	assert(hi >= need);
	if (c->state == CHUNK_LOADING && c->queued && !c->run && after) {
		c->hi = hi > c->hi ? hi : c->hi;
		c->refs += refs;
		atomic_fetch_add_explicit(&k->coalesced, 1, memory_order_relaxed);
		return true;
	}
	if (c->state != CHUNK_READY || (!after && (c->refs || unread(c))))
		return false;
	lru_remove(c);
	if (after) {
		c->from = c->hi;
		c->hi = hi;
		c->ranged = w->ranged;
	} else {
		set_range(cc, c, w);
	}
	atomic_store_explicit(&c->progress.bytes, 0, memory_order_relaxed);
	c->state = CHUNK_LOADING;
	c->done = c->consumed = false;
	c->missed = !refs;
	c->refs += 1 + refs;	/* the fetcher's and the reader's */
	c->used_ms = monotonic_ms();
	start_fetch(cc, c, w);
	return true;
}

/*
 * Chunk @index of @ow, referenced, holding its bytes [@in, @need) or
 * about to (loading) (lock held): from the cache, else what @w wants of
 * it, and of the chunks after it that are missing too, fetched with one
 * GET.  *@hit: it held them before this read.
 */
static struct chunk *lookup(struct chunk_cache *cc, struct chunk_owner *ow, uint64_t index,
			    const struct want *w, size_t in, size_t need, bool *hit)
{
	struct chunk *c;

	*hit = false;
	for (;;) {
		if ((c = find(cc, ow, index)) && c->lo <= in && need <= c->hi) {
			c->refs++;
			lru_remove(c);
			*hit = !c->missed;
			c->missed = false;
			return c;
		}
		if (c && grow(cc, c, w, in, need, 1))
			return c;
		if (!c && (c = take_slot(cc, ow, index, false))) {
			set_range(cc, c, w);
			c->refs++;	/* the reader's; the fetcher has one */
			start_fetch(cc, c, w);
			return c;
		}
		wait_a_little(cc);	/* backpressure */
	}
}

/*
 * Did chunk @c, which a reader of its bytes from @in on joined while it
 * was loading, settle on another reader's part instead (keep_part())?
 * Then the reader drops it (lock held) and looks again.
 */
static bool kept_another_part(struct chunk_cache *cc, struct chunk *c, size_t in)
{
	if (c->state != CHUNK_READY || (c->lo <= in && in < c->hi))
		return false;
	put(cc, c);
	return true;
}

/*
 * Chunk @index of @ow, referenced, with its bytes [@in, @need) present
 * (or settled: failed): from the cache, or after waiting for the part of
 * a fetch in flight that the reader needs.  A miss fetches what @w wants
 * of it, and of the chunks after it that are missing too, with one GET.
 * *@avail gets the end of the bytes that may be copied (<= @in: failed).
 */
static struct chunk *acquire(struct chunk_cache *cc, struct chunk_owner *ow, uint64_t index,
			     const struct want *w, size_t in, size_t need, size_t *avail)
{
	struct want tmp;
	struct chunk *c;
	bool hit;

	pthread_mutex_lock(&cc->lock);
	w = want_in(ow, index, w, &tmp);
	do {
		c = lookup(cc, ow, index, w, in, need, &hit);
		wait_for_bytes(cc, c, need);
	} while (kept_another_part(cc, c, in));
	*avail = avail_end(c);
	pthread_mutex_unlock(&cc->lock);
	atomic_fetch_add_explicit(hit ? &cc->cfg.counters->hits :
				  &cc->cfg.counters->misses, 1, memory_order_relaxed);
	return c;
}

/* How a read at @off follows the last read of @ow: 1 just past its end
 * (forward), -1 far from it (a jump), 0 in between or the first read. */
static int step_of(struct chunk_owner *ow, uint64_t off)
{
	uint64_t prev = atomic_load_explicit(&ow->read_end, memory_order_relaxed);

	if (prev == UINT64_MAX)
		return 0;
	if (off >= prev && off - prev <= CHUNK_FORWARD_GAP)
		return 1;
	return (off > prev ? off - prev : prev - off) > CHUNK_JUMP ? -1 : 0;
}

/* Is @ow read as a stream, after @streak forward reads in a row: scanned,
 * a window open, or enough of them? */
static bool is_stream(struct chunk_owner *ow, unsigned streak)
{
	return atomic_load_explicit(&ow->scanning, memory_order_relaxed) ||
	       streak >= CHUNK_STREAM_STREAK ||
	       atomic_load_explicit(&ow->window, memory_order_relaxed);
}

/* Account a read ending at @end in @ow's head, or as one following it. */
static void note_head(struct chunk_owner *ow, uint64_t end)
{
	uint64_t head = atomic_load_explicit(&ow->head_end, memory_order_relaxed);

	if (end > head || head - end > CHUNK_FOLLOW_MAX) {
		atomic_store_explicit(&ow->head_end, end, memory_order_relaxed);
	} else if (end + CHUNK_FORWARD_GAP < head) {
		atomic_store_explicit(&ow->behind_end, end, memory_order_relaxed);
		atomic_store_explicit(&ow->behind_ms, monotonic_ms(), memory_order_relaxed);
	}
}

/* Account a read of [@off, @end) of @ow; is it part of a stream?  A jump
 * ends the stream until reads in a row say so again. */
static bool note_read(struct chunk_owner *ow, uint64_t off, uint64_t end)
{
	int step = step_of(ow, off);
	unsigned streak = 0;

	atomic_store_explicit(&ow->read_end, end, memory_order_relaxed);
	note_head(ow, end);
	if (is_stream(ow, atomic_load_explicit(&ow->streak, memory_order_relaxed) + (step > 0)))
		atomic_store_explicit(&ow->stream_ms, monotonic_ms(), memory_order_relaxed);
	if (step > 0) {
		streak = atomic_fetch_add_explicit(&ow->streak, 1, memory_order_relaxed) + 1;
	} else if (step < 0) {
		atomic_store_explicit(&ow->streak, 0, memory_order_relaxed);
		atomic_store_explicit(&ow->window, 0, memory_order_relaxed);
	} else {
		streak = atomic_load_explicit(&ow->streak, memory_order_relaxed);
	}
	return is_stream(ow, streak);
}

/* What a read of [@off, @off + @len) of @ow that misses fetches: whole
 * chunks for a stream; else the latest WILLREAD from @off on when it
 * holds the read, or the read's own bytes (a stream's own). */
static struct want read_want(struct chunk_owner *ow, uint64_t off, uint64_t len, bool stream)
{
	uint64_t end = off + len;
	uint64_t hint_off = atomic_load_explicit(&ow->hint_off, memory_order_relaxed);
	uint64_t hint_end = atomic_load_explicit(&ow->hint_end, memory_order_relaxed);
	struct want w;

	if (hint_off <= off && end <= hint_end)
		end = hint_end;
	w = want_of(ow->cache, off, stream ? off + len : end, stream);
	w.own_end = end;
	return w;
}

/* Is chunk @index inside the file of the latest WILLREAD, past its
 * first chunk (stepping into it is that file's read, no stream)? */
static bool inside_hint(struct chunk_owner *ow, uint64_t index)
{
	uint64_t cs = ow->cache->cfg.chunk_size;
	uint64_t hint_off = atomic_load_explicit(&ow->hint_off, memory_order_relaxed);
	uint64_t hint_end = atomic_load_explicit(&ow->hint_end, memory_order_relaxed);

	return hint_end && index > hint_off / cs && index <= (hint_end - 1) / cs;
}

ssize_t chunk_cache_read(struct chunk_owner *ow, void *buf, size_t len,
			 uint64_t off)
{
	struct chunk_cache *cc = ow->cache;
	uint64_t first = off / cc->cfg.chunk_size, prev;
	struct want w;
	size_t done = 0;
	bool stream;

	if (off >= ow->size || !len)
		return 0;
	if (len > ow->size - off)
		len = (size_t)(ow->size - off);
	stream = note_read(ow, off, off + len);
	w = read_want(ow, off, len,
		      stream && !atomic_load_explicit(&ow->crowded, memory_order_relaxed));
	/* a stream stepping into the next chunk (the index build's scan, or
	 * any stream) is done with the one before and keeps chunks coming
	 * ahead of it (from the next chunk: starting past the chunks of this
	 * read put the window one chunk further out, which in a cache of 8
	 * slots fetched a chunk twice) */
	prev = atomic_exchange_explicit(&ow->last_chunk, first, memory_order_relaxed);
	if (stream && prev != UINT64_MAX && prev + 1 == first) {
		chunk_cache_dontneed(ow, prev * cc->cfg.chunk_size, cc->cfg.chunk_size);
		if (!inside_hint(ow, first))
			chunk_cache_willneed(ow, (first + 1) * cc->cfg.chunk_size, cc->cfg.chunk_size);
	}
	while (done < len) {
		uint64_t pos = off + done, index = pos / cc->cfg.chunk_size;
		size_t in = (size_t)(pos % cc->cfg.chunk_size), avail;
		size_t n = len - done < cc->cfg.chunk_size - in ? len - done : cc->cfg.chunk_size - in;
		/* referenced: its bytes up to avail stay as they are */
		struct chunk *c = acquire(cc, ow, index, &w, in, in + n, &avail);
		bool failed = avail <= in;

		if (!failed) {
			n = avail - in < n ? avail - in : n;
			memcpy((char *)buf + done, c->data + in, n);
		}
		pthread_mutex_lock(&cc->lock);
		c->consumed = true;
		c->used_ms = monotonic_ms();
		put(cc, c);
		pthread_mutex_unlock(&cc->lock);
		if (failed)
			return -EIO;
		done += n;
	}
	return (ssize_t)done;
}

/* May a worker take a fetch a reader waits for (lock held)?  While
 * fewer than cfg.fetch_threads run, in readers' threads or workers'. */
static bool demand_to_do(struct chunk_cache *cc)
{
	return cc->demand.len && cc->fetching < cc->cfg.fetch_threads;
}

/* Is there a chunk a worker may take (lock held)?  Reads that missed
 * first; fetches ahead only while fewer than cfg.prefetch_threads run,
 * so that a miss never waits behind a window of prefetches. */
static bool work_to_do(struct chunk_cache *cc)
{
	return demand_to_do(cc) || (cc->ahead.len && cc->busy_ahead < cc->cfg.prefetch_threads);
}

static void *fetch_worker(void *arg)
{
	struct chunk_cache *cc = arg;

	pthread_mutex_lock(&cc->lock);
	for (;;) {
		struct chunk *c;
		bool ahead;

		while (!work_to_do(cc) && !cc->stopping)
			pthread_cond_wait(&cc->work, &cc->lock);
		if (cc->stopping)
			break;
		ahead = !demand_to_do(cc);
		c = ring_pop(cc, ahead ? &cc->ahead : &cc->demand);
		cc->busy_ahead += ahead;
		cc->fetching += !ahead;
		pthread_mutex_unlock(&cc->lock);
		fetch(cc, c);
		if (ahead)
			atomic_fetch_add_explicit(&cc->cfg.counters->prefetches, 1,
						  memory_order_relaxed);
		pthread_mutex_lock(&cc->lock);
		cc->busy_ahead -= ahead;
		cc->fetching -= !ahead;	/* this thread looks for more next */
		if (ahead && cc->ahead.len)
			pthread_cond_signal(&cc->work);
	}
	pthread_mutex_unlock(&cc->lock);
	return NULL;
}

/* Start the workers in this process (lock held); not before the daemon
 * forks, as threads do not survive fork(2). */
static void start_workers(struct chunk_cache *cc)
{
	if (cc->workers_pid == getpid() && cc->nworkers)
		return;
	cc->workers_pid = getpid();
	cc->nworkers = 0;
	while (cc->nworkers < cc->cfg.fetch_threads &&
	       !pthread_create(&cc->workers[cc->nworkers], NULL, fetch_worker, cc))
		cc->nworkers++;
}

/* Chunks fetched ahead of one stream at most: a quarter of the cache. */
static unsigned window_max(struct chunk_cache *cc)
{
	return cc->nr / 4 ? cc->nr / 4 : 1;
}

/*
 * Streams reading now (lock held): the owners holding a slot that read as
 * a stream in the last CHUNK_STREAM_ACTIVE_MS, @ow counted too.  O(slots),
 * as a stream advances into a chunk.
 */
static unsigned active_streams(struct chunk_cache *cc, struct chunk_owner *ow)
{
	uint64_t now = monotonic_ms();
	unsigned n = 1, gen = ++cc->count_gen;

	ow->counted = gen;
	for (unsigned i = 0; i < cc->nr; i++) {
		struct chunk_owner *o = cc->chunks[i].owner;

		if (o && o->counted != gen &&
		    now - atomic_load_explicit(&o->stream_ms, memory_order_relaxed) <
		    CHUNK_STREAM_ACTIVE_MS) {
			o->counted = gen;
			n++;
		}
	}
	return n;
}

uint64_t chunk_cache_ahead_max(struct chunk_cache *cc)
{
	return window_max(cc) * cc->cfg.chunk_size / 2;
}

void chunk_cache_willneed(struct chunk_owner *ow, uint64_t off, uint64_t len)
{
	struct chunk_cache *cc = ow->cache;
	uint64_t first = off / cc->cfg.chunk_size, nchunks = (ow->size + cc->cfg.chunk_size - 1) /
							 cc->cfg.chunk_size;
	unsigned window = atomic_load_explicit(&ow->window, memory_order_relaxed);
	unsigned cap = window_max(cc), share;
	uint64_t now = monotonic_ms();
	bool stream = is_stream(ow, atomic_load_explicit(&ow->streak, memory_order_relaxed));

	if (off >= ow->size)
		return;
	/* no stream (yet): push-ahead's piece around a read at random, or
	 * readahead ahead of reads not yet known to be a stream's; fetched
	 * ahead, the piece would bring the members the reader took already.
	 * Nor a stream through ranges an epoch at random stored: the reads
	 * taken for a stream's may be that epoch's again (samples of one
	 * shard read forward by chance), whose parts the disk holds */
	if (!stream || atomic_load_explicit(&ow->parts_stored, memory_order_relaxed))
		return;
	pthread_mutex_lock(&cc->lock);
	/* the window within the stream's share of the slots, its chunk
	 * besides: nothing ahead under 2 slots a stream; and a stream that
	 * lost a chunk it was reading fetches ranges until it has 2 */
	share = cc->nr / active_streams(cc, ow);
	if (share < 2) {
		pthread_mutex_unlock(&cc->lock);
		return;
	}
	atomic_store_explicit(&ow->crowded, false, memory_order_relaxed);
	cap = share - 1 < cap ? share - 1 : cap;
	window = window ? (window * 2 < cap ? window * 2 : cap) : 1;
	atomic_store_explicit(&ow->window, window, memory_order_relaxed);
	start_workers(cc);
	for (uint64_t i = first; i < first + window && i < nchunks && cc->nworkers; i++) {
		struct chunk *c;

		if (find(cc, ow, i) || passed_lately(ow, i, now))
			continue;
		c = take_slot(cc, ow, i, true);
		if (!c)
			break;	/* every slot is busy or unread: no prefetch
				 * past cache_mem */
		/* no reader's own part: nobody reads it yet */
		set_range(cc, c, &(struct want){ 0, ow->size, false, 0, 0 });
		ring_push(cc, &cc->ahead, c);
		pthread_cond_signal(&cc->work);
	}
	pthread_mutex_unlock(&cc->lock);
}

void chunk_cache_willread(struct chunk_owner *ow, uint64_t off, uint64_t len)
{
	struct chunk_cache *cc = ow->cache;
	uint64_t cs = cc->cfg.chunk_size, end;
	int step = step_of(ow, off);
	struct want w, tmp;
	struct chunk *c;

	if (off >= ow->size || !len)
		return;
	end = off + (len < ow->size - off ? len : ow->size - off);
	atomic_store_explicit(&ow->hint_off, off, memory_order_relaxed);
	atomic_store_explicit(&ow->hint_end, end, memory_order_relaxed);
	w = want_of(cc, off, end, step >= 0 &&
		    is_stream(ow, atomic_load_explicit(&ow->streak, memory_order_relaxed) +
			      (step > 0)));
	pthread_mutex_lock(&cc->lock);
	/* a hint: no waiting for a slot, the read that follows does that.
	 * Each chunk the range lies in gets its part now (a run takes the
	 * absent ones after it), until one cannot: a part left to the read
	 * was fetched as the read's own bytes when another thread's WILLREAD
	 * of the shard came between, and a later epoch asking the sample's
	 * part missed on disk (1 GET of 40-67 KB in 1,000 samples) */
	for (uint64_t i = off / cs; i * cs < end; i++) {
		size_t in = off > i * cs ? (size_t)(off - i * cs) : 0;
		size_t need = (size_t)((end < (i + 1) * cs ? end : (i + 1) * cs) - i * cs);
		const struct want *wi = want_in(ow, i, &w, &tmp);

		if ((c = find(cc, ow, i)) && c->lo <= in && need <= c->hi)
			continue;
		if (c) {
			if (!grow(cc, c, wi, in, need, 0))
				break;
			continue;
		}
		if (!(c = take_slot(cc, ow, i, false)))
			break;
		set_range(cc, c, wi);
		c->missed = true;
		start_fetch(cc, c, wi);
	}
	pthread_mutex_unlock(&cc->lock);
}

void chunk_cache_scan(struct chunk_owner *ow, bool on)
{
	/* a scan that ended holds no share of the slots: a reader right
	 * after the index build is the only stream */
	if (!on)
		atomic_store_explicit(&ow->stream_ms, 0, memory_order_relaxed);
	atomic_store_explicit(&ow->scanning, on, memory_order_relaxed);
}

void chunk_cache_dontneed(struct chunk_owner *ow, uint64_t off, uint64_t len)
{
	struct chunk_cache *cc = ow->cache;
	uint64_t end = off + len;
	struct chunk *c;

	if ((off / cc->cfg.chunk_size + 1) * cc->cfg.chunk_size > end)
		return;	/* [off, end) reaches no chunk's end */
	pthread_mutex_lock(&cc->lock);
	for (uint64_t i = off / cc->cfg.chunk_size; (i + 1) * cc->cfg.chunk_size <= end; i++) {
		c = find(cc, ow, i);
		if (c)
			c->done = true;
		if (c && c->in_lru) {
			lru_remove(c);
			lru_insert(cc, c, true);
		}
	}
	pthread_mutex_unlock(&cc->lock);
}

/* Drop the queued fetches of @ow (of every owner: NULL) from @r, lock
 * held; a reader waiting for one sees a failed read (EIO). */
static void cancel_ring(struct chunk_cache *cc, struct ring *r, const struct chunk_owner *ow)
{
	for (unsigned i = 0, n = r->len; i < n; i++) {
		struct chunk *c = ring_pop(cc, r);

		if (!ow || c->owner == ow) {
			for (struct chunk *q = c; q; q = q->run) {
				q->state = CHUNK_FAILED;
				wake_readers(q);
			}
			pthread_cond_broadcast(&cc->changed);
			put_run(cc, c);
		} else {
			ring_push(cc, r, c);
		}
	}
}

static void cancel_queued(struct chunk_cache *cc, const struct chunk_owner *ow)
{
	cancel_ring(cc, &cc->demand, ow);
	cancel_ring(cc, &cc->ahead, ow);
}

/*
 * Threads do not survive fork(2), and a condition variable with waiters
 * that vanished is not safe to use: before a fork whose child runs on
 * (the daemon's, after the index build may have prefetched), the owner
 * calls chunk_cache_fork_prepare() and the workers finish their fetch and
 * exit, as do the fetches readers run in their own threads; after it,
 * chunk_cache_fork_done() starts new ones if fetches are still queued
 * (readers may be waiting for them).
 */
static void stop_workers(struct chunk_cache *cc)
{
	pthread_mutex_lock(&cc->lock);
	cc->stopping = true;
	pthread_cond_broadcast(&cc->work);
	pthread_mutex_unlock(&cc->lock);
	if (cc->workers_pid == getpid())
		for (unsigned i = 0; i < cc->nworkers; i++)
			pthread_join(cc->workers[i], NULL);
	pthread_mutex_lock(&cc->lock);
	while (cc->fetching)	/* readers fetching in their own threads */
		pthread_cond_wait(&cc->changed, &cc->lock);
	cc->nworkers = 0;
	cc->stopping = false;
	pthread_mutex_unlock(&cc->lock);
}

void chunk_cache_fork_prepare(struct chunk_cache *cc)
{
	if (cc)
		stop_workers(cc);
}

void chunk_cache_fork_done(struct chunk_cache *cc)
{
	if (!cc)
		return;
	pthread_mutex_lock(&cc->lock);
	if (cc->demand.len || cc->ahead.len)
		start_workers(cc);
	pthread_mutex_unlock(&cc->lock);
}

void chunk_cache_forget(struct chunk_owner *ow)
{
	struct chunk_cache *cc = ow->cache;
	pthread_mutex_lock(&cc->lock);
	/* queued fetches of @ow are cancelled, running ones waited for */
	cancel_queued(cc, ow);
	for (unsigned i = 0; i < cc->nr; i++) {
		struct chunk *c = &cc->chunks[i];

		while (c->owner == ow && c->refs)
			pthread_cond_wait(&cc->changed, &cc->lock);
		if (c->owner == ow)
			make_free(cc, c);
	}
	pthread_mutex_unlock(&cc->lock);
}
