/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chunk_cache.h - the bytes of remote objects in aligned chunks, in
 * bounded memory (chunk_cache.c).
 *
 * An object is read in chunks of chunk_size bytes at multiples of
 * chunk_size.  A slot of the cache holds one chunk, or one range of it:
 * a reader moving forward through an object (a stream) gets whole chunks
 * and a window of them fetched ahead; a read that jumped (a sample at
 * random) gets only the bytes it wants, those of the latest
 * chunk_cache_willread() that holds it (a whole sample) or else its own.
 * The cache knows nothing of HTTP, S3 or disks: it fills a slot through
 * the callbacks of its configuration, load() (local copies of what was
 * fetched before, optional), else fetch() (one ranged read for a run of adjacent
 * slots), and hands each range fetched whole to store() (optional).
 * The object behind an owner is an opaque pointer handed to those
 * callbacks.
 *
 * Contract:
 * - chunk_cache_init() makes a cache, before any other call on it;
 *   chunk_cache_release() frees it after every owner was forgotten.
 *   Caches are independent (each its slots, lock and threads); a process
 *   may hold several.
 * - A read returns the bytes asked for (fewer only at the owner's end) or
 *   -EIO when a fetch of one of its chunks failed; a failed chunk is not
 *   kept: once the fetch thread has let it go, a read fetches it again.
 * - Memory never grows past max(mem, CHUNK_CACHE_MIN_CHUNKS chunks): when
 *   every slot is in use, readers wait for one (backpressure) and
 *   prefetching stops.
 * - fork(2): threads do not survive one.  Before a fork after which the
 *   child runs on (a daemon's), the owner calls chunk_cache_fork_prepare()
 *   (the fetch threads finish their fetch and exit) and, after it,
 *   chunk_cache_fork_done() in the process that goes on (threads start
 *   again for what is queued).  A fetcher that must be idle across the
 *   fork (remote_http.c's engine) is stopped after the cache and
 *   started before it: remote.c's remote_fork_prepare() says the order.
 *
 * Thread-safety: after chunk_cache_init(), every function but
 * chunk_cache_release() and the fork calls (one thread, the forking one)
 * may be called from any thread.  The callbacks run with no lock of the
 * cache held, in a fetch thread or in a reader's: chunk_cache_read() and
 * chunk_cache_willread() fetch a range for a read that jumped in the
 * calling thread (and anything before the fetch threads started), so
 * their callers hold no lock the callbacks take.
 */
#ifndef SHARDFS_CHUNK_CACHE_H
#define SHARDFS_CHUNK_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Chunks the cache holds at least, whatever mem says. */
#define CHUNK_CACHE_MIN_CHUNKS 4

/* How much of a fetch's body has arrived, for readers that need only the
 * start of it: bytes is stored (release) after they are in the buffer,
 * and notify() called, after each piece. */
struct fetch_progress {
	atomic_size_t bytes;	/* bytes of the buffer filled, in order */
	void (*notify)(struct fetch_progress *p); /* after each piece */
};

/* Where a part of a fetch's body goes. */
struct fetch_piece {
	char *buf;		/* len bytes */
	size_t len;		/* bytes of the body that go here */
	struct fetch_progress *progress; /* follows this piece, or NULL */
};

/* What the cache counts (relaxed atomics; the caller reports them). */
struct chunk_cache_counters {
	atomic_ullong hits;	/* chunk reads served from memory */
	atomic_ullong misses;	/* chunk reads that waited for a fetch */
	atomic_ullong prefetches; /* chunks fetched ahead of a reader */
	atomic_ullong stream_bytes; /* bytes fetch() brought for streams
				 * (whole chunks) */
	atomic_ullong random_bytes; /* bytes fetch() brought for reads that
				 * jumped (ranges) */
	atomic_ullong random_fetches; /* fetch() calls for such ranges */
	atomic_ullong coalesced; /* wanted ranges added to a fetch not yet
				 * started rather than fetched apart */
};

/* How the cache is sized and filled. */
struct chunk_cache_config {
	uint64_t chunk_size;	/* bytes per chunk, > 0 */
	uint64_t mem;		/* bytes of chunk buffers */
	unsigned fetch_threads;	/* threads running fetch(), and fetches
				 * for readers at once (in those threads
				 * or the readers'), > 0 */
	unsigned prefetch_threads; /* of those, at most this many fetch
				 * ahead at once (the others stay free for
				 * reads that miss), > 0 */
	/* Read [@off, @off + the pieces' lengths) of @obj into the @n
	 * pieces in order, storing each piece's progress as bytes arrive.
	 * The cache looks only at progress: a chunk whose progress reached
	 * its length is whole, even if the call failed later. */
	ssize_t (*fetch)(void *obj, const struct fetch_piece *piece, unsigned n,
			 uint64_t off);
	/* Bytes [@off, @off + @len) of @obj (what one fetch would bring:
	 * a chunk, a range, or the bytes that grow one) into @buf from
	 * local copies that hold them, whatever ranges were stored: 0, or
	 * -errno (not all there).  NULL: none. */
	int (*load)(void *obj, uint64_t off, void *buf, size_t len);
	/* Keep a local copy of bytes [@off, @off + @len) of @obj, just
	 * fetched whole by one fetch.  NULL: none. */
	void (*store)(void *obj, uint64_t off, const void *buf, size_t len);
	struct chunk_cache_counters *counters; /* bumped; outlives the cache */
};

/* One cache: opaque. */
struct chunk_cache;

/* Chunks an object remembers passed (read to their end, then evicted):
 * the last this many, for CHUNK_PASSED_MS. */
#define CHUNK_PASSED_RING 8

/* A chunk of an object passed and evicted (the cache's lock). */
struct chunk_passed {
	uint64_t index;		/* its chunk number */
	uint64_t ms;		/* when it was evicted (monotonic ms; 0:
				 * an empty entry) */
};

/* Per-object state the cache keeps; embedded in the remote source. */
struct chunk_owner {
	struct chunk_cache *cache; /* whose chunks these are */
	void *obj;		/* what chunks are fetched from (callbacks) */
	uint64_t size;		/* bytes of the object */
	atomic_ullong last_chunk; /* chunk of the last read (UINT64_MAX:
				 * none): a read of the next one is forward */
	atomic_ullong read_end;	/* end of the last read (UINT64_MAX: none) */
	atomic_ullong head_end;	/* furthest end read in this pass (a read
				 * far behind it starts another) */
	atomic_ullong behind_end; /* end of the last read behind head_end:
				 * where a reader following the stream is */
	atomic_ullong behind_ms; /* when it came (monotonic ms) */
	atomic_uint streak;	/* reads in a row that began just past the
				 * one before: from CHUNK_STREAM_STREAK on,
				 * the owner is a stream */
	atomic_bool scanning;	/* read from start to end by the index
				 * build: a stream (chunk_cache_scan) */
	atomic_uint window;	/* chunks to fetch ahead, grows to a cap;
				 * not 0: a stream, until a read jumps */
	atomic_ullong stream_ms; /* last read as a stream (monotonic ms):
				 * such owners share the slots */
	atomic_bool crowded;	/* a chunk of it was taken over before it
				 * was read out: its misses fetch ranges
				 * until a stream has 2 slots again */
	atomic_bool parts_stored; /* its latest stream fetch found its
				 * reader's part alone on disk (an epoch at
				 * random stored ranges): no window ahead,
				 * which would fetch whole chunks the disk
				 * holds parts of, until a stream fetch
				 * finds a whole chunk there, or none */
	unsigned counted;	/* the cache's count of streams that saw
				 * it last (the cache's lock) */
	struct chunk_passed passed[CHUNK_PASSED_RING]; /* its latest
				 * chunks passed and evicted, whose bytes a
				 * reader behind the stream wants as a read
				 * at random (the cache's lock) */
	unsigned passed_next;	/* entry of passed[] the next one takes */
	atomic_ullong hint_off;	/* bytes the latest WILLREAD announced */
	atomic_ullong hint_end;	/* (a file or sample): a read inside is
				 * that file's, no stream, and a jumped
				 * one fetches them all (0, 0: none) */
};

/* Make a cache sized by @cfg, keeping its callbacks, in *@cachep: its
 * slots' buffers are reserved now (backed as they are filled), its
 * threads start on first use.  0 or -ENOMEM (*@cachep NULL). */
int chunk_cache_init(struct chunk_cache **cachep, const struct chunk_cache_config *cfg);

/* Stop @cache's fetch threads (waiting for fetches running), fail what is
 * queued and free it and every buffer.  NULL: nothing. */
void chunk_cache_release(struct chunk_cache *cache);

/* Before a fork(2) whose child runs on: wait for running fetches and
 * stop @cache's fetch threads (no fetch may be queued until the fork is
 * done: the caller sees to it).  NULL: nothing. */
void chunk_cache_fork_prepare(struct chunk_cache *cache);

/* After that fork, in the process that goes on (or after no fork at
 * all): start fetch threads again if fetches are queued.  NULL: nothing. */
void chunk_cache_fork_done(struct chunk_cache *cache);

/* Bytes a reader ahead of the readers of a shard (push-ahead) may read
 * past them: half of what the cache fetches ahead of one stream (which is
 * a quarter of the cache), so that its reads find the chunks prefetched
 * for the stream and evict none that the readers still need.  Measured
 * with 8 slots of 256 KiB, three shards read in turn: the full window
 * fetched one chunk twice, half of it none. */
uint64_t chunk_cache_ahead_max(struct chunk_cache *cache);

/* A stream needs no more reads in a row to be seen: from here on,
 * misses fetch whole chunks and a window ahead (CHUNK_STREAM_STREAK). */
#define CHUNK_STREAM_STREAK 2

/* Read through the cache; the shard_source read() contract.  A read
 * that missed fetches whole chunks for a stream; for one that jumped,
 * the range of the latest WILLREAD from it (if that holds the read),
 * else its own bytes.  With load(), a stream's chunk not there whole
 * takes the bytes a read that jumped would want, if they are there,
 * rather than be fetched. */
ssize_t chunk_cache_read(struct chunk_owner *ow, void *buf, size_t len,
			 uint64_t off);

/* Fetch the chunks of [@off, @off + @len) ahead of a stream (a window
 * that grows with each call).  For an owner that is no stream (push-ahead
 * about to read a piece around a read at random) nothing is fetched. */
void chunk_cache_willneed(struct chunk_owner *ow, uint64_t off, uint64_t len);

/* [@off, @off + @len) is being read (one file or one sample, in several
 * reads): fetch what is missing of it with one GET, as a read's miss:
 * whole chunks for a stream (queued for a fetch thread), else just those
 * bytes, fetched in the calling thread before this returns (queued
 * instead while fetch_threads fetches for readers run).  Never waits
 * for a slot: with none free, the read that follows fetches. */
void chunk_cache_willread(struct chunk_owner *ow, uint64_t off, uint64_t len);

/* @ow is read from start to end (@on) or no longer (!@on) by one
 * reader whose reads are not all adjacent (the index build's scan): a
 * stream, whatever its reads look like. */
void chunk_cache_scan(struct chunk_owner *ow, bool on);

/* Chunks of [@off, @off + @len) were consumed: evict them first. */
void chunk_cache_dontneed(struct chunk_owner *ow, uint64_t off, uint64_t len);

/* Drop every chunk of @ow (before it is freed); queued fetches of it are
 * cancelled (a reader waiting for one gets -EIO), running ones waited
 * for. */
void chunk_cache_forget(struct chunk_owner *ow);

#endif
