/*
 * chunk_cache.c - remote shard bytes in aligned chunks, in bounded memory.
 *
 * A remote object is read in chunks of chunk_size bytes at multiples of
 * chunk_size, one ranged GET each, so that a full read of a shard takes
 * ceil(size / chunk) GETs and fetches no byte twice while its chunks stay
 * cached, and a random read of one small file is one GET.
 *
 * The cache is a fixed array of cache_mem / chunk_size slots (buffers are
 * allocated on a slot's first use, then kept: reads allocate nothing).  A
 * slot is free, loading (a GET fills it; readers wait for it rather than
 * fetch it again), ready, or failed.  Ready slots nobody is copying from
 * are on an LRU list; a new chunk takes a free slot or the least recently
 * used one.  When every slot is in use, readers wait (backpressure) and
 * prefetching stops: memory never grows past cache_mem.
 *
 * A reader moving forward through a shard gets chunks fetched ahead of it
 * by a few threads: fs.c's readahead calls advise(WILLNEED) as the reader
 * advances, and so does a read that steps into the next chunk (the index
 * build's scan); each call widens the owner's window (1, 2, 4 ... chunks,
 * up to a quarter of the cache) of chunks in flight.  Chunks a reader
 * has passed (advise(DONTNEED) reaching a chunk's end) are evicted first;
 * a prefetch never evicts a chunk fetched ahead that no reader has used
 * yet (it stops instead), so a stream fetches no byte twice even when
 * many streams share a small cache (measured: 3 shards scanned at once
 * through 8 slots fetched 5% of their bytes twice before this rule).
 * Nor does a miss evict a chunk another stream is still reading (read in
 * the last CHUNK_IDLE_MS and not finished): the reader waits instead.
 *
 * One mutex guards the table; it is never held across network I/O, only
 * for a hash lookup and a few pointer updates (one acquire per chunk a
 * read touches: with 128 KiB FUSE reads, 64 per 8 MiB chunk, a fraction
 * of a microsecond each against ~10 ms of transfer per chunk at 1 GB/s).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remote_internal.h"
#include "shardfs/log.h"
#include "shardfs/remote.h"

/* A chunk not read for this long (ms) may be evicted although its reader
 * has not finished it: a stream that is still reading keeps its chunk,
 * one that stopped (a random read, a closed file) does not keep it. */
#define CHUNK_IDLE_MS 100
/* How long a reader waiting for a slot sleeps before it looks again for
 * a chunk that became idle meanwhile (ms). */
#define CHUNK_WAIT_MS 20

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
	size_t len;		/* valid bytes when ready */
	char *data;		/* chunk_size bytes, allocated on first use */
	struct chunk *hnext;	/* next in its hash bucket */
	struct chunk *prev, *next; /* LRU links (ready, refs == 0) or free list */
	bool in_lru;		/* on the LRU list */
	bool consumed;		/* a reader copied from it since it was
				 * fetched: prefetching may evict it */
	bool done;		/* its reader went past its end */
	uint64_t used_ms;	/* last fetched or read (monotonic ms) */
};

static struct {
	pthread_mutex_t lock;	/* guards everything below */
	pthread_cond_t changed;	/* a chunk settled or was released */
	pthread_cond_t work;	/* the prefetch queue has entries */
	uint64_t chunk_size;	/* bytes per chunk */
	unsigned nr;		/* slots */
	struct chunk *chunks;	/* the slots */
	struct chunk **buckets;	/* hash table of non-free slots */
	unsigned nbuckets;	/* a power of two */
	struct chunk lru;	/* sentinel: next is evicted first */
	struct chunk *free_list; /* free slots, linked by next */
	struct chunk **queue;	/* ring of loading slots for the workers */
	unsigned qhead, qlen;	/* first entry, entries */
	pthread_t workers[REMOTE_PREFETCH_THREADS]; /* prefetch threads */
	unsigned nworkers;	/* started */
	pid_t workers_pid;	/* process that started them (fork) */
	bool stopping;		/* workers exit */
} cc = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.changed = PTHREAD_COND_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
};

static void register_fork_handler(void);
static void stop_workers(void);

int chunk_cache_init(uint64_t chunk_size, uint64_t mem)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	uint64_t nr = mem / chunk_size;

	pthread_once(&once, register_fork_handler);

	cc.chunk_size = chunk_size;
	cc.nr = nr < REMOTE_CACHE_MIN_CHUNKS ? REMOTE_CACHE_MIN_CHUNKS : (unsigned)nr;
	for (cc.nbuckets = 1; cc.nbuckets < 2 * cc.nr; cc.nbuckets <<= 1)
		;
	cc.chunks = calloc(cc.nr, sizeof(*cc.chunks));
	cc.buckets = calloc(cc.nbuckets, sizeof(*cc.buckets));
	cc.queue = calloc(cc.nr, sizeof(*cc.queue));
	if (!cc.chunks || !cc.buckets || !cc.queue) {
		chunk_cache_release();
		return -ENOMEM;
	}
	cc.lru.next = cc.lru.prev = &cc.lru;
	for (unsigned i = 0; i < cc.nr; i++) {
		cc.chunks[i].next = cc.free_list;
		cc.free_list = &cc.chunks[i];
	}
	return 0;
}

void chunk_cache_release(void)
{
	stop_workers();
	for (unsigned i = 0; cc.chunks && i < cc.nr; i++)
		free(cc.chunks[i].data);
	free(cc.chunks);
	free(cc.buckets);
	free(cc.queue);
	cc.chunks = NULL;
	cc.buckets = NULL;
	cc.queue = NULL;
}

static unsigned bucket_of(const struct chunk_owner *ow, uint64_t index)
{
	uint64_t h = ((uintptr_t)ow >> 4) * 0x9e3779b97f4a7c15ull ^ index * 0xff51afd7ed558ccdull;

	return (unsigned)(h ^ (h >> 29)) & (cc.nbuckets - 1);
}

static struct chunk *find(const struct chunk_owner *ow, uint64_t index)
{
	struct chunk *c = cc.buckets[bucket_of(ow, index)];

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
static void lru_insert(struct chunk *c, bool first)
{
	struct chunk *at = first ? &cc.lru : cc.lru.prev;

	c->prev = at;
	c->next = at->next;
	at->next->prev = c;
	at->next = c;
	c->in_lru = true;
}

static void unhash(struct chunk *c)
{
	struct chunk **p = &cc.buckets[bucket_of(c->owner, c->index)];

	while (*p != c)
		p = &(*p)->hnext;
	*p = c->hnext;
}

static void make_free(struct chunk *c)
{
	lru_remove(c);
	unhash(c);
	c->owner = NULL;
	c->state = CHUNK_FREE;
	c->next = cc.free_list;
	cc.free_list = c;
}

/*
 * The least recently used chunk that may be evicted: one its reader went
 * past, or one nobody read for CHUNK_IDLE_MS.  A chunk a stream is still
 * reading is kept (evicting it would fetch its bytes twice: with 64
 * streams through 8 slots, 2 MB/s instead of the link's speed), and a
 * prefetch never evicts a chunk fetched ahead that no reader has used.
 * NULL: wait.  O(slots) under the lock, on a miss only.
 */
static struct chunk *victim(bool prefetch)
{
	uint64_t now = remote_now_ms();

	for (struct chunk *c = cc.lru.next; c != &cc.lru; c = c->next)
		if (c->done || (now - c->used_ms >= CHUNK_IDLE_MS &&
				(!prefetch || c->consumed)))
			return c;
	return NULL;
}

/* A slot for chunk @index of @ow, loading, referenced once; or NULL. */
static struct chunk *take_slot(struct chunk_owner *ow, uint64_t index, bool prefetch)
{
	struct chunk *c = cc.free_list;

	if (c) {
		cc.free_list = c->next;
	} else if ((c = victim(prefetch))) {
		lru_remove(c);
		unhash(c);
	} else {
		return NULL;
	}
	c->consumed = false;
	c->done = false;
	c->used_ms = remote_now_ms();
	c->owner = ow;
	c->index = index;
	c->state = CHUNK_LOADING;
	c->refs = 1;
	c->len = 0;
	c->hnext = cc.buckets[bucket_of(ow, index)];
	cc.buckets[bucket_of(ow, index)] = c;
	return c;
}

/* Drop a reference (lock held); an unused chunk becomes evictable. */
static void put(struct chunk *c)
{
	if (--c->refs)
		return;
	if (c->state == CHUNK_FAILED)
		make_free(c);
	else
		lru_insert(c, false);
	pthread_cond_broadcast(&cc.changed);
}

/* Fill loading chunk @c with one GET (lock not held). */
static void fetch(struct chunk *c)
{
	struct chunk_owner *ow = c->owner;
	uint64_t off = c->index * cc.chunk_size;
	size_t want = ow->size - off < cc.chunk_size ? (size_t)(ow->size - off)
						      : (size_t)cc.chunk_size;
	ssize_t n = -ENOMEM;

	if (!c->data)
		c->data = malloc(cc.chunk_size);	/* once per slot */
	if (c->data && !disk_cache_load(ow->obj, c->index, c->data, want)) {
		n = (ssize_t)want;
	} else if (c->data) {
		n = remote_http_read(ow->obj, c->data, want, off);
		if (n == (ssize_t)want)
			disk_cache_store(ow->obj, c->index, c->data, want);
	}
	pthread_mutex_lock(&cc.lock);
	c->len = n > 0 ? (size_t)n : 0;
	c->state = n == (ssize_t)want ? CHUNK_READY : CHUNK_FAILED;
	pthread_cond_broadcast(&cc.changed);
	pthread_mutex_unlock(&cc.lock);
}

/* Wait (lock held) for a chunk to be released, or for CHUNK_WAIT_MS, after
 * which one may have become idle. */
static void wait_a_little(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += CHUNK_WAIT_MS * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&cc.changed, &cc.lock, &ts);
}

/*
 * Chunk @index of @ow, referenced, settled (ready or failed): from the
 * cache, after waiting for a fetch in flight, or fetched here.
 */
static struct chunk *acquire(struct chunk_owner *ow, uint64_t index)
{
	struct chunk *c;
	bool load = false;

	pthread_mutex_lock(&cc.lock);
	for (;;) {
		if ((c = find(ow, index))) {
			c->refs++;
			lru_remove(c);
			break;
		}
		if ((c = take_slot(ow, index, false))) {
			load = true;
			break;
		}
		wait_a_little();	/* backpressure */
	}
	while (!load && c->state == CHUNK_LOADING)
		pthread_cond_wait(&cc.changed, &cc.lock);
	pthread_mutex_unlock(&cc.lock);
	atomic_fetch_add_explicit(load ? &remote_cfg.counters.cache_misses :
				  &remote_cfg.counters.cache_hits, 1,
				  memory_order_relaxed);
	if (load)
		fetch(c);
	return c;
}

ssize_t chunk_cache_read(struct chunk_owner *ow, void *buf, size_t len,
			 uint64_t off)
{
	uint64_t first = off / cc.chunk_size;
	size_t done = 0;

	if (off >= ow->size)
		return 0;
	/* a reader stepping into the next chunk (the index build's scan, or
	 * any stream) is done with the one before and keeps chunks coming
	 * ahead of it */
	if (atomic_exchange_explicit(&ow->last_chunk, first, memory_order_relaxed) + 1 == first) {
		chunk_cache_dontneed(ow, (first - 1) * cc.chunk_size, cc.chunk_size);
		chunk_cache_willneed(ow, (first + 1) * cc.chunk_size, cc.chunk_size);
	}
	if (len > ow->size - off)
		len = (size_t)(ow->size - off);
	while (done < len) {
		uint64_t pos = off + done, index = pos / cc.chunk_size;
		size_t in = (size_t)(pos % cc.chunk_size), n = 0;
		struct chunk *c = acquire(ow, index);
		/* settled and referenced: neither state nor bytes change */
		bool failed = c->state == CHUNK_FAILED || c->len <= in;

		if (!failed) {
			n = c->len - in < len - done ? c->len - in : len - done;
			memcpy((char *)buf + done, c->data + in, n);
		}
		pthread_mutex_lock(&cc.lock);
		c->consumed = true;
		c->used_ms = remote_now_ms();
		put(c);
		pthread_mutex_unlock(&cc.lock);
		if (failed)
			return -EIO;
		done += n;
	}
	return (ssize_t)done;
}

static void *prefetch_worker(void *arg)
{
	pthread_mutex_lock(&cc.lock);
	for (;;) {
		struct chunk *c;

		while (!cc.qlen && !cc.stopping)
			pthread_cond_wait(&cc.work, &cc.lock);
		if (cc.stopping)
			break;
		c = cc.queue[cc.qhead];
		cc.qhead = (cc.qhead + 1) % cc.nr;
		cc.qlen--;
		pthread_mutex_unlock(&cc.lock);
		fetch(c);
		atomic_fetch_add_explicit(&remote_cfg.counters.prefetches, 1,
					  memory_order_relaxed);
		pthread_mutex_lock(&cc.lock);
		put(c);
	}
	pthread_mutex_unlock(&cc.lock);
	return NULL;
}

/* Start the workers in this process (lock held); not before the daemon
 * forks, as threads do not survive fork(2). */
static void start_workers(void)
{
	if (cc.workers_pid == getpid() && cc.nworkers)
		return;
	cc.workers_pid = getpid();
	cc.nworkers = 0;
	while (cc.nworkers < REMOTE_PREFETCH_THREADS &&
	       !pthread_create(&cc.workers[cc.nworkers], NULL, prefetch_worker, NULL))
		cc.nworkers++;
}

void chunk_cache_willneed(struct chunk_owner *ow, uint64_t off, uint64_t len)
{
	uint64_t first = off / cc.chunk_size, nchunks = (ow->size + cc.chunk_size - 1) /
							 cc.chunk_size;
	unsigned window = atomic_load_explicit(&ow->window, memory_order_relaxed);
	unsigned cap = cc.nr / 4 ? cc.nr / 4 : 1;

	if (off >= ow->size)
		return;
	window = window ? (window * 2 < cap ? window * 2 : cap) : 1;
	atomic_store_explicit(&ow->window, window, memory_order_relaxed);
	pthread_mutex_lock(&cc.lock);
	start_workers();
	for (uint64_t i = first; i < first + window && i < nchunks && cc.nworkers; i++) {
		struct chunk *c;

		if (find(ow, i))
			continue;
		c = take_slot(ow, i, true);
		if (!c)
			break;	/* every slot is busy or unread: no prefetch
				 * past cache_mem */
		cc.queue[(cc.qhead + cc.qlen++) % cc.nr] = c;
		pthread_cond_signal(&cc.work);
	}
	pthread_mutex_unlock(&cc.lock);
}

void chunk_cache_dontneed(struct chunk_owner *ow, uint64_t off, uint64_t len)
{
	uint64_t end = off + len;
	struct chunk *c;

	if ((off / cc.chunk_size + 1) * cc.chunk_size > end)
		return;	/* [off, end) reaches no chunk's end */
	pthread_mutex_lock(&cc.lock);
	for (uint64_t i = off / cc.chunk_size; (i + 1) * cc.chunk_size <= end; i++) {
		c = find(ow, i);
		if (c)
			c->done = true;
		if (c && c->in_lru) {
			lru_remove(c);
			lru_insert(c, true);
		}
	}
	pthread_mutex_unlock(&cc.lock);
}

/* Drop the queued fetches of @ow (of every owner: NULL), lock held;
 * readers waiting for them see a failed chunk and fetch it themselves. */
static void cancel_queued(const struct chunk_owner *ow)
{
	for (unsigned i = 0, n = cc.qlen; i < n; i++) {
		struct chunk *c = cc.queue[cc.qhead];

		cc.qhead = (cc.qhead + 1) % cc.nr;
		cc.qlen--;
		if (!ow || c->owner == ow) {
			c->state = CHUNK_FAILED;
			put(c);
		} else {
			cc.queue[(cc.qhead + cc.qlen++) % cc.nr] = c;
		}
	}
}

/*
 * Threads do not survive fork(2), and a condition variable with waiters
 * that vanished is not safe to use: before any fork (the daemon's, after
 * the index build may have prefetched), the workers finish their fetch
 * and exit; the next hint starts new ones in whichever process goes on.
 */
static void stop_workers(void)
{
	pthread_mutex_lock(&cc.lock);
	cc.stopping = true;
	pthread_cond_broadcast(&cc.work);
	pthread_mutex_unlock(&cc.lock);
	if (cc.workers_pid == getpid())
		for (unsigned i = 0; i < cc.nworkers; i++)
			pthread_join(cc.workers[i], NULL);
	pthread_mutex_lock(&cc.lock);
	cancel_queued(NULL);
	cc.nworkers = 0;
	cc.stopping = false;
	pthread_mutex_unlock(&cc.lock);
}

static void register_fork_handler(void)
{
	pthread_atfork(stop_workers, NULL, NULL);
}

void chunk_cache_forget(struct chunk_owner *ow)
{
	pthread_mutex_lock(&cc.lock);
	/* queued fetches of @ow are cancelled, running ones waited for */
	cancel_queued(ow);
	for (unsigned i = 0; i < cc.nr; i++) {
		struct chunk *c = &cc.chunks[i];

		while (c->owner == ow && c->refs)
			pthread_cond_wait(&cc.changed, &cc.lock);
		if (c->owner == ow)
			make_free(c);
	}
	pthread_mutex_unlock(&cc.lock);
}
