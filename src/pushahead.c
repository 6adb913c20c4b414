/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pushahead.c - the members that follow a forward reader, stored into
 * the kernel's page cache before they are asked for (pushahead.h).
 *
 * Measured on a stock kernel (FUSE over /dev/fuse), after a listing, one
 * thread reading 15,000 files in shard order: one READ per file without
 * it, 0.04 to 0.1 with it, and 3x the throughput in a quiet run
 * (docs/benchmarks.md).  The worker runs
 * apart from the request threads so that no reply waits for a push; the
 * request path only moves a window and, when it grew, queues its stream
 * on a lock-free list (one compare-and-swap) and posts a semaphore.
 *
 * The worker splices a local plain member from the shard's pages through
 * its pipe into the kernel's cache (push_bytes()): one copy, the
 * kernel's, where pread and the store's write made two.  Measured in
 * shard order after a listing (985 MB, 30,000 files, one thread): 338-367
 * -> 603-740 MB/s, a third less daemon CPU (docs/benchmarks.md).
 *
 * Memory (issue 30): the members of a shard in offset order are the
 * index's order[], served from the index file like the rest of it; per
 * entry, push-ahead keeps seven bit arrays (enum pushahead_bit) and a byte
 * (pass_of[]), each calloc'ed and touched only where its event happens.
 * It sorted its own order[] at mount (4 bytes per file) and counted the
 * kernel's references in 4 bytes per entry before: 8 bytes per member of
 * private memory after a remount and a walk, now the held bits' 1/8
 * (docs/benchmarks-scale.md).
 */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/log.h"
#include "shardfs/pushahead.h"
#include "shardfs/seek_table.h"
#include "shardfs/source.h"
#include "shardfs/util.h"

/* In spans_wanted[], beside the entry + 1. */
#define SPAN_DROPPED 0x80000000u
_Static_assert(SHARD_INDEX_MAX_ENTRIES < SPAN_DROPPED,
	       "an entry + 1 leaves SPAN_DROPPED free");

static unsigned long long relaxed_add(atomic_ullong *v, unsigned long long n)
{
	return atomic_fetch_add_explicit(v, n, memory_order_relaxed) + n;
}

/* Entry @e decoded into *@buf; returns @buf. */
static const struct shard_inode *entry_inode(const struct pushahead *p, uint32_t e,
					     struct shard_inode *buf)
{
	shard_index_entry(p->idx, e, buf);
	return buf;
}

/* One field of entry @e, without decoding the others. */
static uint64_t entry_field(const struct pushahead *p, uint32_t e, enum compact_field f)
{
	return compact_field(&p->idx->entries, e, f);
}

/* Bit @b of entry @e. */
static bool bit_test(const struct pushahead *p, enum pushahead_bit b, uint32_t e)
{
	return bitmap_test(p->bits[b], e);
}

/* Set bit @b of entry @e; returns whether it was set before. */
static bool bit_set(struct pushahead *p, enum pushahead_bit b, uint32_t e)
{
	return bitmap_set(p->bits[b], e);
}

/* Clear bit @b of entry @e; returns whether it was set. */
static bool bit_clear(struct pushahead *p, enum pushahead_bit b, uint32_t e)
{
	return bitmap_clear(p->bits[b], e);
}

/* Members worth pushing: plain data of a file's first name, not too big. */
static bool pushable(const struct pushahead *p, const struct shard_inode *in)
{
	return shard_index_orderable(in, p->set->nr) && in->size <= p->window / 2;
}

/*
 * The member at @i of order[] when push-ahead pushes it as one of
 * @shard's, else NULL: a file too big for a window (order[] holds every
 * file), or, in an index file that lies, another shard's (the load checks
 * only that order[] names entries: index_file.c).
 */
static const struct shard_inode *member_at(const struct pushahead *p, uint32_t shard,
					   uint32_t i, struct shard_inode *buf)
{
	const struct shard_inode *in = entry_inode(p, p->order[i], buf);

	return in->shard == shard && pushable(p, in) ? in : NULL;
}

/*
 * Where each shard's files start in idx->order (sorted by shard), read
 * from the shards of its entries; returns where the last shard's end,
 * short of nr_order when order[] is not sorted by shard (an index file
 * that lies), which build_order() refuses.  That it holds every file
 * once, build_pieces() counts.
 */
static uint64_t order_starts(struct pushahead *p)
{
	const struct shard_index *idx = p->idx;
	uint64_t i = 0;

	for (uint32_t s = 0; s <= p->set->nr; s++) {
		while (i < idx->nr_order && entry_field(p, idx->order[i], COMPACT_SHARD) < s)
			i++;
		p->order_start[s] = (uint32_t)i;
	}
	return i;
}

/*
 * Where each shard's files start in idx->order, and where its last
 * pushable member ends; -EINVAL when order[] is not by shard.
 */
static int build_order(struct pushahead *p)
{
	const struct shard_index *idx = p->idx;
	uint32_t nr = p->set->nr;

	p->order = idx->order;
	p->order_start = calloc((size_t)nr + 1, sizeof(*p->order_start));
	p->shard_end = calloc((size_t)nr + 1, sizeof(*p->shard_end));
	if (!p->order_start || !p->shard_end)
		return -ENOMEM;
	if (order_starts(p) != idx->nr_order)
		return -EINVAL;
	for (uint32_t s = 0; s < nr; s++)
		for (uint32_t i = p->order_start[s + 1]; i > p->order_start[s]; i--) {
			struct shard_inode buf;
			const struct shard_inode *in = member_at(p, s, i - 1, &buf);

			if (in) {
				p->shard_end[s] = in->data + in->size;
				break;
			}
		}
	return 0;
}

/* Piece of plain-shard member @in (pushahead_init: pieces of plain
 * shards only). */
static uint32_t piece_of(const struct pushahead *p, const struct shard_inode *in)
{
	return p->piece_start[in->shard] +
	       (uint32_t)(in->data / SHARDFS_PUSHAHEAD_REGION);
}

/* Whether shard @s is plain (not compressed, not a bad shard skipped). */
static bool plain_shard(const struct shard_set *set, uint32_t s)
{
	return set->shards[s].src && !set->shards[s].src->encoding;
}

/* The pieces of plain shards, and the bytes of the members that start in
 * each; the entries' pass marks.  -EINVAL when order[] does not hold as
 * many files as the entries. */
static int build_pieces(struct pushahead *p)
{
	const struct shard_set *set = p->set;
	uint64_t n = 0, set_bytes = 0, files = 0;

	p->piece_start = calloc((size_t)set->nr + 1, sizeof(*p->piece_start));
	p->pass_of = calloc((size_t)shard_index_nr(p->idx) + 1, sizeof(*p->pass_of));
	if (!p->piece_start || !p->pass_of)
		return -ENOMEM;
	for (uint32_t s = 0; s < set->nr; s++) {
		p->piece_start[s] = (uint32_t)n;
		if (plain_shard(set, s))
			n += (set->shards[s].src->size + SHARDFS_PUSHAHEAD_REGION - 1) /
			     SHARDFS_PUSHAHEAD_REGION;
		if (n > UINT32_MAX - 1)
			return -ENOMEM;
	}
	p->piece_start[set->nr] = (uint32_t)n;
	p->pieces = calloc(n + 1, sizeof(*p->pieces));
	p->piece_bytes = calloc(n + 1, sizeof(*p->piece_bytes));
	if (!p->pieces || !p->piece_bytes)
		return -ENOMEM;
	for (uint32_t e = 0; e < shard_index_nr(p->idx); e++) {	/* in file order */
		struct shard_inode buf;
		const struct shard_inode *in = entry_inode(p, e, &buf);

		files += shard_index_orderable(in, set->nr);
		if (pushable(p, in) && plain_shard(set, in->shard)) {
			p->piece_bytes[piece_of(p, in)] += (uint32_t)in->size;
			set_bytes += in->size;
		}
	}
	atomic_store_explicit(&p->counters.set_bytes, set_bytes, memory_order_relaxed);
	return files == p->idx->nr_order ? 0 : -EINVAL;
}

int pushahead_init(struct pushahead *p, const struct shard_index *idx,
		   const struct shard_set *set, uint64_t bound,
		   const struct pushahead_reader *reader)
{
	int rc = 0;

	*p = (struct pushahead){ .idx = idx, .set = set, .bound = bound,
				 .pipe = { -1, -1 } };
	if (reader)
		p->reader = *reader;
	if (!bound)
		return 0;
	p->window = bound < SHARDFS_PUSHAHEAD_WINDOW ? bound : SHARDFS_PUSHAHEAD_WINDOW;
	/* calloc'ed arrays are touched only where used: RSS follows use */
	for (int b = 0; b < PUSHAHEAD_NR_BITS && !rc; b++)
		if (!(p->bits[b] = calloc((size_t)shard_index_nr(idx) / 64 + 1,
					  sizeof(*p->bits[b]))))
			rc = -ENOMEM;
	p->streams = calloc(set->nr ? set->nr : 1, sizeof(*p->streams));
	rc = rc ?: p->streams ? 0 : -ENOMEM;
	atomic_init(&p->pass, 1);
	if (rc)
		pushahead_release(p);
	return rc;
}

int pushahead_prepare(struct pushahead *p)
{
	int rc = shard_index_check_all(p->idx);	/* all it reads, once */

	rc = rc ?: build_order(p);
	rc = rc ?: build_pieces(p);
	if (rc == -EINVAL)
		log_warn("push-ahead: the index's order of the files disagrees "
			 "with its entries; it stays off");
	else if (rc == -EIO)
		log_warn("push-ahead: the index file fails its checks; it stays off");
	else if (rc)
		log_error("push-ahead: %s; it stays off", strerror(-rc));
	else
		atomic_store_explicit(&p->ready, true, memory_order_release);
	return rc;
}

void pushahead_release(struct pushahead *p)
{
	if (p->running)
		sem_destroy(&p->wake);
	p->running = false;
	free(p->order_start);
	free(p->shard_end);
	for (int b = 0; b < PUSHAHEAD_NR_BITS; b++) {
		free(p->bits[b]);
		p->bits[b] = NULL;
	}
	free(p->streams);
	free(p->buf);
	splice_pipe_close(p->pipe);
	free(p->pass_of);
	free(p->pieces);
	free(p->piece_bytes);
	free(p->piece_start);
	p->pass_of = NULL;
	p->pieces = NULL;
	p->piece_bytes = p->piece_start = NULL;
	p->order = NULL;
	p->order_start = NULL;
	p->shard_end = NULL;
	p->streams = NULL;
	p->buf = NULL;
	p->bound = 0;
}

/* Index in order[] of the first member of @shard starting at or after @off. */
static uint32_t order_at(const struct pushahead *p, uint32_t shard, uint64_t off)
{
	uint32_t lo = p->order_start[shard], hi = p->order_start[shard + 1];

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (entry_field(p, p->order[mid], COMPACT_DATA) < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void pushahead_lookup(struct pushahead *p, uint64_t ino, uint64_t n)
{
	if (p->bits[0] && n && ino && ino <= shard_index_nr(p->idx))
		bit_set(p, PUSHAHEAD_HELD, (uint32_t)(ino - 1));
}

/*
 * A FORGET says the kernel dropped the inode (it sends one when it evicts
 * it, with every reference it held; echo 3 > drop_caches between epochs):
 * a listing may bring it back, so it may be tried again.  The rarer
 * FORGET of a reference whose reply failed clears the held bit too early,
 * which costs a probe (known()).
 */
void pushahead_forget(struct pushahead *p, uint64_t ino, uint64_t n)
{
	uint32_t e = (uint32_t)(ino - 1);

	if (!p->bits[0] || !n || !ino || ino > shard_index_nr(p->idx))
		return;
	bit_clear(p, PUSHAHEAD_HELD, e);
	bit_clear(p, PUSHAHEAD_LISTED, e);
	bit_clear(p, PUSHAHEAD_SEEN, e);
	bit_clear(p, PUSHAHEAD_BARE, e);
}

/*
 * Whether a LOOKUP of @ino in directory entry @d counts toward listing
 * it: each in a small directory or in one listed bare, one in
 * SHARDFS_PUSHAHEAD_HUGE_SAMPLE (a multiplicative hash of @ino) in a
 * bigger one, none past SHARDFS_PUSHAHEAD_LIST_WHOLE_MAX entries.
 */
static bool lookup_counts(const struct pushahead *p, uint32_t d, uint64_t ino)
{
	uint64_t size = entry_field(p, d, COMPACT_SIZE);

	if (size <= SHARDFS_PUSHAHEAD_LIST_DIR_MAX || bit_test(p, PUSHAHEAD_BARE, d))
		return true;
	return size <= SHARDFS_PUSHAHEAD_LIST_WHOLE_MAX &&
	       (uint32_t)(ino * 0x9e3779b1u) < UINT32_MAX / SHARDFS_PUSHAHEAD_HUGE_SAMPLE;
}

void pushahead_lookup_in(struct pushahead *p, uint64_t dir_ino, uint64_t ino)
{
	unsigned expected = 0;
	uint32_t d = (uint32_t)(dir_ino - 1);

	if (!p->lister || !dir_ino || dir_ino > shard_index_nr(p->idx) ||
	    !lookup_counts(p, d, ino))
		return;
	/* bit_set() loads first: LOOKUPs in a listed directory write
	 * nothing shared */
	if (bit_test(p, PUSHAHEAD_LISTED, d) || !bit_set(p, PUSHAHEAD_SEEN, d) ||
	    bit_set(p, PUSHAHEAD_LISTED, d))
		return;
	/* one directory at a time: a later LOOKUP in this one tries again */
	if (!atomic_compare_exchange_strong(&p->dir_wanted, &expected, d + 1)) {
		bit_clear(p, PUSHAHEAD_LISTED, d);
		return;
	}
	sem_post(&p->wake);
}

bool pushahead_list_bare(struct pushahead *p, uint64_t dir_ino)
{
	uint32_t d = (uint32_t)(dir_ino - 1);
	uint64_t size;

	if (!p->lister || !dir_ino || dir_ino > shard_index_nr(p->idx))
		return false;
	size = entry_field(p, d, COMPACT_SIZE);
	if (size <= SHARDFS_PUSHAHEAD_BARE_MIN || size > SHARDFS_PUSHAHEAD_LIST_WHOLE_MAX)
		return false;
	if (!bit_set(p, PUSHAHEAD_BARE, d))
		relaxed_add(&p->counters.bare, 1);
	return true;
}

/* Clear the stored mark of entry @e; true when it was set. */
static bool take_stored(struct pushahead *p, uint32_t e)
{
	return bit_clear(p, PUSHAHEAD_STORED, e);
}

/* Count the stored members of @shard in [@from, @to) as @what; unmark them. */
static void settle(struct pushahead *p, uint32_t shard, uint64_t from,
		   uint64_t to, atomic_ullong *what)
{
	unsigned long long n = 0;

	for (uint32_t i = order_at(p, shard, from);
	     i < p->order_start[shard + 1] &&
	     entry_field(p, p->order[i], COMPACT_DATA) < to; i++)
		n += take_stored(p, p->order[i]);
	if (n)
		relaxed_add(what, n);
}

/* Take up to @want bytes from the bound; returns what was granted. */
static uint64_t reserve(struct pushahead *p, uint64_t want)
{
	unsigned long long cur = atomic_load_explicit(&p->counters.ahead,
						      memory_order_relaxed);
	unsigned long long got, max;

	do {
		got = cur >= p->bound ? 0 : p->bound - cur < want ? p->bound - cur : want;
		if (!got)
			return 0;
	} while (!atomic_compare_exchange_weak_explicit(
			 &p->counters.ahead, &cur, cur + got,
			 memory_order_relaxed, memory_order_relaxed));
	max = atomic_load_explicit(&p->counters.ahead_max, memory_order_relaxed);
	while (cur + got > max && !atomic_compare_exchange_weak_explicit(
			&p->counters.ahead_max, &max, cur + got,
			memory_order_relaxed, memory_order_relaxed))
		;
	return got;
}

static void unreserve(struct pushahead *p, struct pushahead_stream *s,
		      uint64_t n)
{
	assert(n <= s->held);
	s->held -= n;
	atomic_fetch_sub_explicit(&p->counters.ahead, n, memory_order_relaxed);
}

/* Put stream @shard on the worker's list, unless it is there already. */
static void queue_stream(struct pushahead *p, uint32_t shard)
{
	struct pushahead_stream *s = &p->streams[shard];
	unsigned head;

	if (atomic_exchange_explicit(&s->queued, true, memory_order_acquire))
		return;
	head = atomic_load_explicit(&p->list, memory_order_relaxed);
	do
		s->next = head;
	while (!atomic_compare_exchange_weak_explicit(&p->list, &head, shard + 1,
						      memory_order_release,
						      memory_order_relaxed));
	sem_post(&p->wake);
}

/*
 * End the window of @s (under its lock).  What was stored past the
 * reader's last READ is unconfirmed: a reader that finished the window
 * from the page cache sends nothing more, one that jumped never read it.
 */
static void end_window(struct pushahead *p, uint32_t shard)
{
	struct pushahead_stream *s = &p->streams[shard];
	uint64_t to = atomic_load_explicit(&s->to, memory_order_relaxed);

	if (!to)
		return;
	settle(p, shard, atomic_load_explicit(&s->pos, memory_order_relaxed), to,
	       &p->counters.unconfirmed);
	unreserve(p, s, s->held);
	atomic_store_explicit(&s->to, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
}

/* What push-ahead does with a shard now (policy_of). */
struct shard_policy {
	uint64_t window;	/* bytes its window may hold */
	bool spans;		/* a READ at random there may have its span
				 * (or piece) pushed */
	bool leap;		/* overtaken by its reader, the worker goes
				 * on at the next seek span (resume_at) */
};

/*
 * The policy for @shard, in one place: what its source says (struct
 * shard_push_hints) and what push-ahead learnt (struct pushahead_policy).
 * The window is smaller than p->window where the source's cache holds
 * less (a remote shard's chunk cache); spans go unless they were found
 * wasted (spans_wasted), and for a plain shard unless READs are cheap
 * (pushahead_cheap_reads) or each member pushed would be a request of
 * its own (fetched: a remote object; 1.55-1.65 GETs a sample with span
 * pushes, 1.00 without, the same bytes) -- a compressed shard's READs
 * decode the span anyway; a worker leaps where decoding sets the pace
 * (decode_bound).
 */
static struct shard_policy policy_of(const struct pushahead *p, uint32_t shard)
{
	const struct shard_source *src = p->set->shards[shard].src;
	const struct pushahead_policy *pol = &p->policy;
	uint64_t max = src->push.ahead_max;

	return (struct shard_policy){
		.window = max && max < p->window ? max : p->window,
		.spans = !atomic_load_explicit(&pol->spans_off, memory_order_relaxed) &&
			 (src->encoding ||
			  (!src->push.fetched &&
			   !atomic_load_explicit(&pol->cheap_reads, memory_order_relaxed))),
		.leap = src->push.decode_bound,
	};
}

/*
 * Extend the window of @s to @want bytes past the reader, as far as the
 * bound allows, leaving out the member in the middle of the extension as
 * the next trip.  Returns true when the window grew.
 */
static bool extend_window(struct pushahead *p, uint32_t shard, uint64_t pos)
{
	struct pushahead_stream *s = &p->streams[shard];
	uint64_t to = atomic_load_explicit(&s->to, memory_order_relaxed);
	uint64_t window = policy_of(p, shard).window;
	uint64_t got, want = pos + window, last = p->shard_end[shard];
	uint32_t trip;

	if (to && to >= want - window / 2)
		return false;	/* more than half a window still ahead */
	if (!to)
		to = pos;
	if (want > last)	/* nothing to reserve past the last member */
		want = last;
	got = want > to ? reserve(p, want - to) : 0;
	if (!got)
		return false;
	s->held += got;
	trip = order_at(p, shard, to + got / 2);
	atomic_store_explicit(&s->trip, trip < p->order_start[shard + 1] ?
			      p->order[trip] : UINT32_MAX, memory_order_relaxed);
	atomic_store_explicit(&s->to, to + got, memory_order_release);
	return true;
}

/* The reader moved to @pos inside its window: give back what it passed. */
static void advance(struct pushahead *p, uint32_t shard, uint64_t pos)
{
	struct pushahead_stream *s = &p->streams[shard];
	uint64_t old = atomic_load_explicit(&s->pos, memory_order_relaxed);
	uint64_t to = atomic_load_explicit(&s->to, memory_order_relaxed);
	uint64_t remain = to > pos ? to - pos : 0;

	if (pos <= old)
		return;
	settle(p, shard, old, pos, &p->counters.passed);
	atomic_store_explicit(&s->pos, pos, memory_order_relaxed);
	/* the window's reservation runs from pos to to */
	if (s->held > remain)
		unreserve(p, s, s->held - remain);
}

static void window_on_read(struct pushahead *p, uint32_t shard, uint64_t off,
			   uint64_t end, bool streak)
{
	struct pushahead_stream *s = &p->streams[shard];
	uint64_t to = atomic_load_explicit(&s->to, memory_order_relaxed);
	/* a reader that outran the pushes lands just past the window */
	bool inside = to && off >= s->from && off < to + SHARDFS_PUSHAHEAD_SLACK;

	atomic_store_explicit(&s->active_ns, monotonic_ns(), memory_order_relaxed);
	s->near = off >= s->last_end && off - s->last_end <= SHARDFS_PUSHAHEAD_NEAR ?
		  s->near + 1 : 0;
	s->last_end = end;
	streak = streak && s->near >= SHARDFS_READAHEAD_STREAK;
	if (!inside && !streak) {
		end_window(p, shard);
		return;
	}
	if (!inside) {		/* a forward reader elsewhere: start over */
		end_window(p, shard);
		s->from = end;
		atomic_store_explicit(&s->pos, end, memory_order_relaxed);
	}
	advance(p, shard, end);
	if (extend_window(p, shard, end))
		queue_stream(p, shard);
}

/*
 * Density.  A shuffled reader that reads every file (one epoch reader)
 * is served best by pushing each 4 MiB piece of a plain shard whole; a
 * node that reads a 1/N share of the files (DistributedSampler) uses a
 * 1/N of each piece, and a whole piece costs the storage N times the
 * bytes it uses (docs/benchmarks.md).  Until a reader has read a part of
 * the set, nothing tells the two apart: a 1/N share of a shuffled order
 * is a uniform sample of the set, and its first READs fall on the pieces
 * as the epoch reader's do (docs/bench-runs/shuffled-shares.md).  So a piece is
 * pushed only once the READs at random of this pass took
 * FILL_TENTHS of its bytes: a dense reader then has the last 30 % of
 * each piece pushed; a node of N >= 2, whose share of a piece is about
 * half at most, almost never reaches it, and when it does, the piece is
 * mostly read.  Once the pass took DENSE_TENTHS of the set's bytes (more
 * than a share of N >= 2 holds), the reader is dense, and each piece goes
 * whole at its first READ, as before.
 *
 * The pass: READs at random of members this pass had READ (at random or
 * not; SHARDFS_PUSHAHEAD_REREADS of them) mean the reader began again (a
 * new epoch after the kernel dropped the pages, or another reader): a
 * new pass begins, the
 * pieces' counts and the density start from nothing, so that a reader
 * that follows another on the mount is learned anew.  A piece's word
 * holds the pass it counts for (7 bits; a word of an older pass counts
 * as empty), whether it was pushed in it, and the bytes READ.  A READ of
 * a member pushed in this pass is not a new pass: a READ that raced with
 * the push, or the kernel dropped the pages (read_anyway).
 */
#define PIECE_FILLED 0x80000000u
#define PIECE_PASS_SHIFT 24
#define PIECE_PASS_MAX 127u
#define PIECE_BYTES ((1u << PIECE_PASS_SHIFT) - 1)
/* In pass_of[], beside the pass: pushed in it, not READ. */
#define PASS_PUSHED 0x80u

static unsigned piece_pass(unsigned w)
{
	return (w >> PIECE_PASS_SHIFT) & PIECE_PASS_MAX;
}

/* Begin the pass after @g, unless another thread did; returns the pass. */
static unsigned next_pass(struct pushahead *p, unsigned g)
{
	unsigned next = g % PIECE_PASS_MAX + 1;

	if (!atomic_compare_exchange_strong(&p->pass, &g, next))
		return g;
	atomic_store_explicit(&p->counters.pass_bytes, 0, memory_order_relaxed);
	atomic_store_explicit(&p->rereads, 0, memory_order_relaxed);
	atomic_store_explicit(&p->dense, false, memory_order_relaxed);
	relaxed_add(&p->counters.passes, 1);
	return next;
}

/* Count @n bytes taken by this pass; true once it took DENSE_TENTHS of
 * the set. */
static bool pass_took(struct pushahead *p, uint64_t n)
{
	unsigned long long took = relaxed_add(&p->counters.pass_bytes, n);

	if (took * 10 >= atomic_load_explicit(&p->counters.set_bytes, memory_order_relaxed) *
			 SHARDFS_PUSHAHEAD_DENSE_TENTHS)
		atomic_store_explicit(&p->dense, true, memory_order_relaxed);
	return atomic_load_explicit(&p->dense, memory_order_relaxed);
}

/* Post entry @e (+ @flags) in a free slot of spans_wanted[]; false when
 * the slot it took was still full. */
static bool post_span(struct pushahead *p, unsigned w)
{
	unsigned expected = 0;
	unsigned slot = atomic_fetch_add_explicit(&p->span_next, 1,
						  memory_order_relaxed) %
			SHARDFS_PUSHAHEAD_SPAN_QUEUE;

	if (!atomic_compare_exchange_strong(&p->spans_wanted[slot], &expected, w))
		return false;
	sem_post(&p->wake);
	return true;
}

/*
 * Mark member @e READ in pass *@g; one this pass READ before counts
 * toward the next pass (SHARDFS_PUSHAHEAD_REREADS of them: a new epoch,
 * or another reader), which *@g then gets.  Returns what pass_of[]
 * held.
 */
static unsigned mark_read(struct pushahead *p, uint32_t e, unsigned *g)
{
	unsigned was = atomic_exchange_explicit(&p->pass_of[e], (unsigned char)*g,
						memory_order_relaxed);

	if (was == *g && atomic_fetch_add_explicit(&p->rereads, 1, memory_order_relaxed) + 1 >=
			 SHARDFS_PUSHAHEAD_REREADS) {
		*g = next_pass(p, *g);
		atomic_store_explicit(&p->pass_of[e], (unsigned char)*g, memory_order_relaxed);
	}
	return was;
}

/*
 * A reader jumped to the start of member @e of a plain shard: count it in
 * its piece and in the pass, and have the worker push the piece once the
 * pass took enough of it (see Density above).
 */
static void piece_read(struct pushahead *p, uint32_t e)
{
	struct shard_inode buf;
	const struct shard_inode *in = entry_inode(p, e, &buf);
	uint32_t k = piece_of(p, in);
	unsigned g = atomic_load_explicit(&p->pass, memory_order_relaxed);
	unsigned w, cur, next, bytes;
	bool dense;

	if (mark_read(p, e, &g) == (g | PASS_PUSHED))	/* counted with its piece */
		return;
	dense = pass_took(p, in->size);
	w = atomic_load_explicit(&p->pieces[k], memory_order_relaxed);
	do {		/* a word of an older pass counts as empty */
		cur = piece_pass(w) == g ? w : g << PIECE_PASS_SHIFT;
		bytes = (cur & PIECE_BYTES) + (unsigned)in->size;
		next = (cur & ~PIECE_BYTES) | (bytes < PIECE_BYTES ? bytes : PIECE_BYTES);
		if (!(cur & PIECE_FILLED) &&
		    (dense || (uint64_t)bytes * 10 >=
		     (uint64_t)p->piece_bytes[k] * SHARDFS_PUSHAHEAD_FILL_TENTHS))
			next |= PIECE_FILLED;
	} while (!atomic_compare_exchange_weak_explicit(&p->pieces[k], &w, next,
							memory_order_relaxed,
							memory_order_relaxed));
	if ((next & ~cur & PIECE_FILLED) &&
	    (!policy_of(p, in->shard).spans ||
	     !post_span(p, e + 1)))	/* not now: a later READ asks again */
		atomic_fetch_and_explicit(&p->pieces[k], ~PIECE_FILLED,
					  memory_order_relaxed);
}

/*
 * A reader jumped to the start of member @e: mark it READ at random and
 * have the worker push the rest of its span (dropped when the slot it
 * takes is still full).  A member whose span was pushed before is READ
 * only when the kernel dropped it, and likely the rest of the span with
 * it.
 */
static void want_span(struct pushahead *p, uint32_t e)
{
	unsigned dropped;

	if (!policy_of(p, (uint32_t)entry_field(p, e, COMPACT_SHARD)).spans)
		return;
	bit_set(p, PUSHAHEAD_TOUCHED, e);
	dropped = bit_test(p, PUSHAHEAD_SPANNED, e) ? SPAN_DROPPED : 0;
	post_span(p, (e + 1) | dropped);
}

void pushahead_read(struct pushahead *p, uint32_t e, uint64_t off,
		    uint64_t end, unsigned forward)
{
	struct shard_inode buf;
	const struct shard_inode *in = entry_inode(p, e, &buf);
	bool streak = forward >= SHARDFS_READAHEAD_STREAK;
	struct pushahead_stream *s;

	if (!p->bound || !p->store || !atomic_load_explicit(&p->ready, memory_order_acquire))
		return;
	if (take_stored(p, e))
		relaxed_add(&p->counters.read_anyway, 1);
	s = &p->streams[in->shard];
	/* another reader of the shard at it: the window stays as it is */
	if (!atomic_flag_test_and_set_explicit(&s->busy, memory_order_acquire)) {
		window_on_read(p, in->shard, off, end, streak);
		atomic_flag_clear_explicit(&s->busy, memory_order_release);
	}
	if (off != in->data)
		return;
	if (forward || atomic_load_explicit(&s->to, memory_order_relaxed))
		/* READ in this pass: the worker leaves it out (read_in_pass()) */
		mark_read(p, e, &(unsigned){ atomic_load(&p->pass) });
	else if (p->set->shards[in->shard].src->encoding)
		want_span(p, e);	/* a jump that no window covers */
	else
		piece_read(p, e);
}

void pushahead_cheap_reads(struct pushahead *p)
{
	atomic_store(&p->policy.cheap_reads, true);
}

/* Empty the worker's pipe of what a failed splice or store left in it. */
static void pipe_drain(struct pushahead *p)
{
	while (read(p->pipe[0], p->buf, SHARDFS_PUSHAHEAD_CHUNK) > 0)
		;
}

/*
 * Store @n bytes at @off of member @e (a piece of at most
 * SHARDFS_SPLICE_MAX bytes when the worker has a pipe): spliced, the
 * shard's pages through the pipe into the kernel's cache, when there are
 * SHARDFS_SPLICE_MIN of them and the member's shard can be; else read
 * into the buffer and stored from it.  Returns 0, -ENOENT when the
 * kernel refused them, -EIO when they could not be read.
 */
static int push_bytes(struct pushahead *p, uint32_t e, size_t n, uint64_t off)
{
	const struct pushahead_reader *r = &p->reader;
	ssize_t got = -EAGAIN;
	int rc;

	if (p->pipe[1] >= 0 && n >= SHARDFS_SPLICE_MIN)
		got = r->fetch(r->arg, e, NULL, p->pipe[1], n, off);
	if (got == -EAGAIN) {
		if (r->fetch(r->arg, e, p->buf, -1, n, off) < 0)
			return -EIO;
		return p->store(p->store_arg, (uint64_t)e + 1, off, p->buf, -1, n) ?
		       -ENOENT : 0;
	}
	if (got < 0) {
		pipe_drain(p);
		return -EIO;
	}
	rc = p->store(p->store_arg, (uint64_t)e + 1, off, NULL, p->pipe[0], n);
	if (rc)
		pipe_drain(p);
	r->drained(r->arg, e, n, off);
	return rc ? -ENOENT : 0;
}

/*
 * Push member @e whole, piece by piece (push_bytes()), counting the
 * bytes read in @fetched.  Returns 0, or -EIO when the shard cannot be
 * read or changed (then nothing more is pushed from it).
 */
static int push_member(struct pushahead *p, uint32_t e, atomic_ullong *fetched)
{
	struct shard_inode buf;
	const struct shard_inode *in = entry_inode(p, e, &buf);
	size_t piece = p->pipe[0] >= 0 ? SHARDFS_SPLICE_MAX : SHARDFS_PUSHAHEAD_CHUNK;
	uint64_t off = 0;

	while (off < in->size) {
		size_t n = in->size - off < piece ? in->size - off : piece;
		int rc = push_bytes(p, e, n, off);

		if (rc == -EIO)
			return -EIO;
		relaxed_add(fetched, n);
		if (rc) {
			relaxed_add(&p->counters.refused, 1);
			return 0;
		}
		off += n;
	}
	bit_set(p, PUSHAHEAD_STORED, e);
	atomic_store_explicit(&p->pass_of[e], (unsigned char)
			      (atomic_load(&p->pass) | PASS_PUSHED), memory_order_relaxed);
	relaxed_add(&p->counters.files, 1);
	relaxed_add(&p->counters.bytes, in->size);
	return 0;
}

/* Have entry @e's directory listed, @count entries from @e on (a
 * directory of at most @count: whole): the entries listed, or -errno
 * (-ETIMEDOUT: the listing goes on without the worker). */
static ssize_t list_from(struct pushahead *p, uint32_t e, uint32_t count)
{
	ssize_t n = p->lister(p->store_arg, e, count);

	if (n > 0) {
		relaxed_add(&p->counters.listings, 1);
		relaxed_add(&p->counters.listed, (unsigned long long)n);
	}
	return n;
}

/* Whether the kernel holds entry @e's inode: its held bit, else a probe
 * (a store of no bytes), whose yes sets the bit. */
static bool held(struct pushahead *p, uint32_t e)
{
	if (bit_test(p, PUSHAHEAD_HELD, e))
		return true;
	relaxed_add(&p->counters.probes, 1);
	if (p->store(p->store_arg, (uint64_t)e + 1, 0, NULL, -1, 0))
		return false;
	bit_set(p, PUSHAHEAD_HELD, e);
	return true;
}

/*
 * Whether the kernel holds member @e's inode, after having its directory
 * listed from @e on if it did not (once per member: a listing that left
 * it unknown is not tried again).
 */
static bool known(struct pushahead *p, uint32_t e)
{
	if (held(p, e))
		return true;
	if (!p->lister || bit_set(p, PUSHAHEAD_LISTED, e))
		return false;
	return list_from(p, e, SHARDFS_PUSHAHEAD_LIST_DIR_MAX) > 0 && held(p, e);
}

/*
 * List the directory pushahead_lookup_in() asked for, if any.  One that
 * met another listing under way (a huge one takes seconds) is asked for
 * again by a later LOOKUP in it.
 */
static void list_wanted_dir(struct pushahead *p)
{
	unsigned d = atomic_exchange(&p->dir_wanted, 0);
	uint64_t size = d ? entry_field(p, d - 1, COMPACT_SIZE) : 0;

	if (size && list_from(p, (uint32_t)entry_field(p, d - 1, COMPACT_DATA),
			      (uint32_t)size) == -EBUSY)
		bit_clear(p, PUSHAHEAD_LISTED, d - 1);
}

/*
 * Where the members that start before @end in @shard end: past @end when
 * one runs over it.  No other span holds that member (spans take the
 * members that start in them), and a READ of it decodes the end of one
 * span and the start of the next: pushed with the span it starts in.
 */
static uint64_t members_end(const struct pushahead *p, uint32_t shard,
			    uint64_t end)
{
	uint32_t i = order_at(p, shard, end);
	const struct shard_inode *in;
	struct shard_inode buf;

	if (i == p->order_start[shard] || !(in = member_at(p, shard, i - 1, &buf)))
		return end;
	return in->data + in->size > end ? in->data + in->size : end;
}

/* The seek span of @src holding @off (seek_table.h): true with [*@start,
 * *@end), false when @src has no seek table (a plain shard). */
static bool seek_span(struct shard_source *src, uint64_t off, uint64_t *start,
		      uint64_t *end)
{
	const struct seek_table *t = src->ops->seek_get ? src->ops->seek_get(src)
							: NULL;
	uint64_t j;

	if (!t || !t->nr)
		return false;
	j = seek_table_find(t, off);
	*start = t->points[j].out;
	*end = seek_table_span_end(t, j);
	return true;
}

/*
 * The span of @shard holding offset @off: in a compressed shard, the
 * decoded span of its seek table (seek_table.h), which a READ there
 * decodes anyway; in a plain one, the aligned SHARDFS_PUSHAHEAD_REGION
 * around it, which the worker then reads from the storage as one
 * sequential piece where a shuffled reader would read each member at
 * random.  True with [*@start, *@end) when there is one and it fits in a
 * window; *@end is then taken past the member that runs over the span's
 * end (at most half a window more: pushable()).
 */
static bool span_of(const struct pushahead *p, uint32_t shard, uint64_t off,
		    uint64_t *start, uint64_t *end)
{
	struct shard_source *src = p->set->shards[shard].src;

	if (!src->encoding) {
		*start = off & ~(uint64_t)(SHARDFS_PUSHAHEAD_REGION - 1);
		*end = src->size - *start < SHARDFS_PUSHAHEAD_REGION ?
		       src->size : *start + SHARDFS_PUSHAHEAD_REGION;
	} else if (!seek_span(src, off, start, end)) {
		return false;
	}
	if (*end - *start > p->window)
		return false;
	*end = members_end(p, shard, *end);
	return true;
}

/* Whether the kernel dropped too many of the files pushed before they
 * were read (see pushahead.h); says so once. */
static bool spans_wasted(struct pushahead *p)
{
	unsigned long long files = atomic_load(&p->counters.files);

	if (files < SHARDFS_PUSHAHEAD_SPAN_PROBE ||
	    atomic_load(&p->counters.read_anyway) * 4 <= files)
		return false;
	if (!atomic_exchange(&p->policy.spans_off, true))
		log_info("push-ahead: the kernel drops pushed files before they are "
			 "read; random reads push no more spans");
	return true;
}

/* Whether member @m was READ at random or pushed with its span. */
static bool spanned(const struct pushahead *p, uint32_t m)
{
	return bit_test(p, PUSHAHEAD_SPANNED, m) || bit_test(p, PUSHAHEAD_TOUCHED, m);
}

/* Whether a member of [@start, @end) of @shard other than @e was READ at
 * random or pushed with its span. */
static bool span_touched(const struct pushahead *p, uint32_t shard, uint32_t e,
			 uint64_t start, uint64_t end)
{
	struct shard_inode buf;

	for (uint32_t i = order_at(p, shard, start); i < p->order_start[shard + 1] &&
	     entry_field(p, p->order[i], COMPACT_DATA) < end; i++)
		if (p->order[i] != e && member_at(p, shard, i, &buf) && spanned(p, p->order[i]))
			return true;
	return false;
}

/*
 * Whether member @m is left out of a span push for
 * a READ of entry @e: @e itself (the READ holds its pages), and one the
 * kernel was given or READ before: of a plain shard's piece, in pass
 * @pass; of a compressed shard's span (@pass 0), ever, unless @dropped
 * (then the kernel dropped them).
 */
static bool span_skips(const struct pushahead *p, uint32_t e, uint32_t m,
		       unsigned pass, bool dropped)
{
	if (m == e)
		return true;
	if (pass)
		return (atomic_load_explicit(&p->pass_of[m], memory_order_relaxed) &
			PIECE_PASS_MAX) == pass;
	return !dropped && spanned(p, m);
}

/*
 * Ask the storage at once for the run of members of entry @e's shard
 * from order[@i] on that push_range() will push: up to the first one
 * span_skips() leaves out (of a plain piece, those READ in this pass),
 * or @end.  Returns where the run ends.  The rest of a piece was asked
 * for whole before, and in a dense pass the 60-70 % of it already READ
 * were read again: most of the worker's time in a shuffled epoch went
 * to that readahead (docs/benchmarks.md, tuning record).
 */
static uint64_t ask_run(const struct pushahead *p, uint32_t e, uint32_t i, uint64_t end,
			unsigned pass, bool dropped)
{
	struct shard_inode buf;
	const struct shard_inode *in = entry_inode(p, e, &buf);
	uint32_t shard = in->shard, last = p->order_start[shard + 1];
	struct shard_source *src = p->set->shards[shard].src;
	uint64_t from = member_at(p, shard, i, &buf)->data, to = end;

	for (uint32_t j = i + 1; pass && j < last; j++) {
		const struct shard_inode *mj = member_at(p, shard, j, &buf);

		if (!mj)
			continue;
		if (mj->data + mj->size > end)
			break;
		if (span_skips(p, e, p->order[j], pass, dropped)) {
			to = mj->data;
			break;
		}
	}
	shard_source_advise(src, from, to - from, SHARD_SOURCE_WILLNEED);
	return to;
}

/*
 * Push the members the kernel holds, or holds once their directory was
 * listed, of [@start, @end) of entry @e's shard (span_skips() says which
 * are left out), while the bound has room
 * for all of it, marking each one pushed (@pass: for span_skips()).
 * Returns the bytes pushed.
 */
static uint64_t push_range(struct pushahead *p, uint32_t e, uint64_t start,
			   uint64_t end, unsigned pass, bool dropped)
{
	struct shard_inode buf, mbuf;
	const struct shard_inode *in = entry_inode(p, e, &buf);
	uint32_t last = p->order_start[in->shard + 1];
	uint64_t got = reserve(p, end - start), pushed = 0, asked = 0;
	unsigned long long files = atomic_load(&p->counters.files);

	for (uint32_t i = order_at(p, in->shard, start);
	     got == end - start && i < last; i++) {
		uint32_t m = p->order[i];
		const struct shard_inode *mi = member_at(p, in->shard, i, &mbuf);

		if (!mi)
			continue;
		if (mi->data + mi->size > end)
			break;
		if (span_skips(p, e, m, pass, dropped))
			continue;
		if (!known(p, m)) {	/* the kernel forgot it: listed once */
			relaxed_add(&p->counters.unknown, 1);
			continue;
		}
		if (mi->data >= asked)
			asked = ask_run(p, e, i, end, pass, dropped);
		if (push_member(p, m, &p->counters.span_fetched))
			break;
		pushed += mi->size;
		if (!pass)
			bit_set(p, PUSHAHEAD_SPANNED, m);
	}
	if (atomic_load(&p->counters.files) != files)
		relaxed_add(&p->counters.spans, 1);
	atomic_fetch_sub_explicit(&p->counters.ahead, got, memory_order_relaxed);
	return pushed;
}

/*
 * Push the span of a compressed shard around entry @e, which a READ is
 * reading.  Not before a second READ at random came in a span: a reader
 * that reads a span once (a sample of the data set, not an epoch) is not
 * worth pushing spans for; from then on, at the first READ in each span.
 * Members READ or pushed before are left out (the kernel has them, or a
 * READ raced with their push), unless @dropped: then the kernel dropped
 * them.
 */
static void push_span(struct pushahead *p, uint32_t e, bool dropped)
{
	struct shard_inode buf;
	const struct shard_inode *in = entry_inode(p, e, &buf);
	uint64_t start, end;

	if (!span_of(p, in->shard, in->data, &start, &end) || spans_wasted(p))
		return;
	if (!dropped && !p->policy.spans_on &&
	    !span_touched(p, in->shard, e, start, end))
		return;
	p->policy.spans_on = true;
	bit_set(p, PUSHAHEAD_SPANNED, e);
	push_range(p, e, start, end, 0, dropped);
}

/*
 * Push the piece of a plain shard that entry @e's READ at random asked
 * for (piece_read), unless a new pass began since: the members that this
 * pass neither READ nor pushed.
 */
static void push_piece(struct pushahead *p, uint32_t e)
{
	struct shard_inode buf;
	const struct shard_inode *in = entry_inode(p, e, &buf);
	unsigned g = atomic_load_explicit(&p->pass, memory_order_relaxed);
	unsigned w = atomic_load_explicit(&p->pieces[piece_of(p, in)],
					  memory_order_relaxed);
	uint64_t start, end;

	if (piece_pass(w) != g || !(w & PIECE_FILLED) ||
	    !span_of(p, in->shard, in->data, &start, &end) || spans_wasted(p))
		return;
	pass_took(p, push_range(p, e, start, end, g, false));
}

/* Push the spans pushahead_read() asked for. */
static void push_wanted_spans(struct pushahead *p)
{
	for (unsigned i = 0; i < SHARDFS_PUSHAHEAD_SPAN_QUEUE; i++) {
		unsigned w = atomic_load_explicit(&p->spans_wanted[i],
						  memory_order_relaxed);

		if (w && (w = atomic_exchange(&p->spans_wanted[i], 0))) {
			list_wanted_dir(p);	/* a reader waits on it */
			uint32_t e = (w & ~SPAN_DROPPED) - 1;

			if (p->set->shards[entry_field(p, e, COMPACT_SHARD)].src->encoding)
				push_span(p, e, w & SPAN_DROPPED);
			else
				push_piece(p, e);
		}
	}
}

/*
 * Where the worker goes on in @shard once a READ of its reader took what
 * it pushed last, or a member after it (the reader, at @pos, caught up):
 * at @pos, unless decoding sets the pace (policy_of: leap).  Then
 * worker and READs went on in step, both decoding every member, and the
 * worker goes on at the next seek span instead, leaving the rest of this
 * one to the READs' decoder: the two decode different bytes.  Every file
 * of three gzip shards in shard order (147 MB, cold, after a listing):
 * 0.79-0.93 s, 1.08-1.18 daemon CPU-s and 276-281 MB decoded in step;
 * 0.56-0.61 s, 0.79-0.85 s and 149 MB leaping.  zstd frames decode faster
 * than the READs come: leaping there cost 6 % (more READs).
 */
static uint64_t resume_at(const struct pushahead *p, uint32_t shard,
			  uint64_t pos)
{
	struct shard_source *src = p->set->shards[shard].src;
	uint64_t start, end;

	if (!policy_of(p, shard).leap || !seek_span(src, pos, &start, &end))
		return pos;
	return end;
}

/* The reader, at @pos, took what the worker pushed last or what follows. */
static void overtaken(struct pushahead *p, uint32_t shard, uint64_t pos)
{
	struct pushahead_stream *s = &p->streams[shard];
	uint64_t at = resume_at(p, shard, pos);

	s->done = s->pushed = at > s->done ? at : s->done;
}

/*
 * Was member @e READ in the reader's pass (not pushed)?  Then the kernel
 * has it.  Over a remote shard, a ShardAwareSampler DataLoader's READs
 * run ahead of the worker, which pushed, and fetched again, what they
 * had taken (with the chunks they passed, remembered by the chunk
 * cache: 1.17-1.19 -> 1.08-1.09x the bytes used; docs/remote.md).  A
 * new epoch READs members of the pass again and so begins the next one
 * (mark_read()), in which they are pushed again.
 */
static bool read_in_pass(const struct pushahead *p, uint32_t e)
{
	return atomic_load_explicit(&p->pass_of[e], memory_order_relaxed) ==
	       atomic_load_explicit(&p->pass, memory_order_relaxed);
}

/* Did the worker push in @s's run in the last SHARDFS_PUSHAHEAD_RECENT_MS? */
static bool run_recent(const struct pushahead_stream *s)
{
	return s->run_ns &&
	       monotonic_ns() - s->run_ns < SHARDFS_PUSHAHEAD_RECENT_MS * 1000000ull;
}

/* Does the kernel hold the first member of @shard's run? */
static bool run_held(const struct pushahead *p, uint32_t shard)
{
	uint32_t i = order_at(p, shard, p->streams[shard].run_from);

	return i < p->order_start[shard + 1] && bit_test(p, PUSHAHEAD_HELD, p->order[i]);
}

/*
 * Where the worker starts a window of @shard that starts over at @pos.
 * When it pushed a run lately (in the last SHARDFS_PUSHAHEAD_RECENT_MS,
 * and the kernel still holds the run's first member: a FORGET says it
 * dropped them, a new epoch after drop_caches): from @pos inside the run,
 * past its end; from @pos behind it, at @pos, and past the run once
 * there (skip_from, skip_to).  Else at @pos, a new run.  Two readers of a
 * shard a batch apart (a DataLoader's workers over ShardAwareSampler)
 * start it over behind, at a READ the pushes spared, and the worker
 * pushed the same members again: 1.33x the bytes used read from the
 * shards, and a slower epoch than without push-ahead (docs/pushahead.md).
 */
static uint64_t restart_at(struct pushahead *p, uint32_t shard, uint64_t pos)
{
	struct pushahead_stream *s = &p->streams[shard];
	bool recent = run_recent(s) && run_held(p, shard);

	s->skip_to = 0;
	if (recent && pos >= s->run_from && pos <= s->done)
		return s->done;
	if (recent && pos < s->run_from) {
		s->skip_from = s->run_from;
		s->skip_to = s->done;
	}
	s->run_from = pos;
	return pos;
}

/* Push what the window of @shard asks for and was not pushed yet. */
static void push_stream(struct pushahead *p, uint32_t shard)
{
	struct pushahead_stream *s = &p->streams[shard];
	unsigned gen = atomic_load_explicit(&s->gen, memory_order_acquire);
	uint64_t to = atomic_load_explicit(&s->to, memory_order_acquire);
	uint64_t pos = atomic_load_explicit(&s->pos, memory_order_relaxed);
	uint32_t i, last = p->order_start[shard + 1];

	if (gen != s->done_gen) {
		s->done_gen = gen;
		s->done = s->pushed = restart_at(p, shard, pos);
	} else if (pos > s->pushed) {
		overtaken(p, shard, pos);
	}
	if (!run_recent(s))	/* a run begins where the worker does */
		s->run_from = s->done;
	shard_source_advise(p->set->shards[shard].src, s->done,
			    to > s->done ? to - s->done : 0, SHARD_SOURCE_WILLNEED);
	i = order_at(p, shard, s->done);
	while (i < last) {
		uint32_t e = p->order[i];
		struct shard_inode buf;
		const struct shard_inode *in = member_at(p, shard, i, &buf);

		if (!in) {	/* too big to push */
			i++;
			continue;
		}
		if (in->data + in->size > to ||
		    atomic_load_explicit(&s->gen, memory_order_relaxed) != gen)
			return;
		if (s->skip_to && in->data >= s->skip_from) {	/* pushed lately */
			s->done = s->skip_to;
			s->skip_to = 0;
			i = order_at(p, shard, s->done);
			continue;
		}
		pos = atomic_load_explicit(&s->pos, memory_order_relaxed);
		if (pos > s->pushed) {
			overtaken(p, shard, pos);
			i = order_at(p, shard, s->done);
			continue;
		}
		i++;
		s->done = in->data + in->size;
		/* the trip, or an inode the kernel lacks */
		if (e == atomic_load_explicit(&s->trip, memory_order_relaxed))
			continue;
		if (!known(p, e)) {
			relaxed_add(&p->counters.unknown, 1);
			continue;
		}
		if (read_in_pass(p, e))	/* a reader ahead of the worker took it */
			continue;
		s->pushed = in->data;
		s->run_ns = monotonic_ns();
		if (push_member(p, e, &p->counters.window_fetched))
			return;
	}
}

/* Windows whose reader went quiet give their bytes back. */
static void reclaim_idle(struct pushahead *p)
{
	uint64_t now = monotonic_ns();

	for (uint32_t i = 0; i < p->set->nr; i++) {
		struct pushahead_stream *s = &p->streams[i];

		if (!atomic_load_explicit(&s->to, memory_order_relaxed) ||
		    now - atomic_load_explicit(&s->active_ns, memory_order_relaxed) <
		    SHARDFS_PUSHAHEAD_IDLE_MS * 1000000ull ||
		    atomic_flag_test_and_set_explicit(&s->busy, memory_order_acquire))
			continue;
		end_window(p, i);
		atomic_flag_clear_explicit(&s->busy, memory_order_release);
	}
}

/* Serve every queued stream, most recently queued first. */
static void drain(struct pushahead *p)
{
	unsigned next = atomic_exchange_explicit(&p->list, 0, memory_order_acquire);

	while (next) {
		uint32_t shard = next - 1;
		struct pushahead_stream *s = &p->streams[shard];

		next = s->next;
		/* from here a new request queues it again */
		atomic_store_explicit(&s->queued, false, memory_order_release);
		push_stream(p, shard);
	}
}

static void *worker_main(void *arg)
{
	struct pushahead *p = arg;
	uint64_t reclaimed = monotonic_ns();

	pthread_setname_np(pthread_self(), "shardfs-push");
	if (!atomic_load_explicit(&p->ready, memory_order_acquire) && pushahead_prepare(p))
		return NULL;
	while (!atomic_load(&p->stop)) {
		struct timespec ts = deadline_after_ms(CLOCK_REALTIME,
						       SHARDFS_PUSHAHEAD_IDLE_MS / 4);

		sem_timedwait(&p->wake, &ts);
		list_wanted_dir(p);
		push_wanted_spans(p);
		drain(p);
		if (monotonic_ns() - reclaimed >= SHARDFS_PUSHAHEAD_IDLE_MS * 1000000ull / 4) {
			reclaim_idle(p);
			reclaimed = monotonic_ns();
		}
	}
	return NULL;
}

int pushahead_start(struct pushahead *p, pushahead_store_fn store,
		    pushahead_list_fn lister, void *arg)
{
	sigset_t all, old;
	int rc;

	if (!p->bound || p->running)
		return 0;
	p->buf = malloc(SHARDFS_PUSHAHEAD_CHUNK);
	if (splice_pipe_open(p->pipe, SHARDFS_SPLICE_MAX + SHARDFS_SPLICE_MIN))
		log_debug("push-ahead: no pipe to splice through; members are copied");
	if (!p->buf || sem_init(&p->wake, 0, 0))
		return log_error("push-ahead: %s; it stays off", strerror(ENOMEM)),
		       -ENOMEM;
	p->store = store;
	p->lister = lister;
	p->store_arg = arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);	/* signals go to the loop thread */
	rc = pthread_create(&p->worker, NULL, worker_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		p->store = NULL;
		sem_destroy(&p->wake);
		return log_error("push-ahead: %s; it stays off", strerror(rc)), -rc;
	}
	p->running = true;
	return 0;
}

void pushahead_stop(struct pushahead *p)
{
	if (!p->running || atomic_exchange(&p->stop, true))
		return;
	sem_post(&p->wake);
	pthread_join(p->worker, NULL);
}
