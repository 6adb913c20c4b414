/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pushahead.h - the data of the members a reader will ask for next,
 * handed to the kernel before it asks.
 *
 * A reader that walks a shard front to back (a training epoch in shard
 * order) would cost one READ round trip per file.  Once its reads of a
 * shard form a forward streak, a worker thread reads the members that
 * follow in the shard and hands each one, whole, to a store callback: the
 * FUSE glue puts the bytes into the kernel's page cache for the member's
 * inode (FUSE_NOTIFY_STORE), so the reader's next open and read are served
 * by the kernel alone.  Sample mates come with it, since WebDataset
 * writers put key.jpg, key.json and key.cls next to each other.
 *
 * The window of a stream: [pos, to) in shard offsets, where pos is the end
 * of the reader's latest READ and to the end of what the worker was asked
 * to push.  One member in each extension is left out (the trip member):
 * the reader's READ of it is the only sign that it got that far, and moves
 * the window on.  A READ elsewhere with no forward streak (a jump) ends
 * the window; so does a reader that stops for SHARDFS_PUSHAHEAD_IDLE_MS.
 * Each window is at most SHARDFS_PUSHAHEAD_WINDOW bytes (less where the
 * shard's source says its cache holds less: push.ahead_max in source.h, a
 * remote shard's chunks), and all of them together at most the bound (-o
 * pushahead=SIZE): bytes are reserved from it before they are asked for,
 * and given back as the reader passes them or the window ends.
 *
 * A compressed shard read at random costs the decoding of the span
 * (seek_table.h) before the member, on every READ.  So a READ that jumped
 * to a member of a compressed shard has the worker push the other members
 * of that span, which the decoding passes over anyway (and the member
 * running over its end, which no span holds whole): a shuffled epoch
 * then decodes each span about twice instead of half a span per member
 * read.  A plain shard read at random over /dev/fuse costs a round
 * trip and a small random read of the storage per member; its span is
 * the aligned SHARDFS_PUSHAHEAD_REGION around the READ (a piece), which
 * the worker reads at once (not over io_uring: pushahead_cheap_reads).
 * A compressed span goes once a second READ at random came in it (a
 * reader that samples a few files is not worth it); a plain piece only
 * once this pass's READs at random took SHARDFS_PUSHAHEAD_FILL_TENTHS of
 * its bytes, or SHARDFS_PUSHAHEAD_DENSE_TENTHS of the set's: a node that
 * reads a 1/N share (DistributedSampler) would have the rest read from
 * the storage for nothing, and nothing before tells it from a reader of
 * every file.  READs at random of members this pass READ
 * (SHARDFS_PUSHAHEAD_REREADS of them) begin a new pass, which learns that
 * density anew (pushahead.c).
 * Where the kernel drops what was pushed
 * before it is read (a data set larger than its page cache: a quarter of
 * the files pushed are READ all the same, after
 * SHARDFS_PUSHAHEAD_SPAN_PROBE), span pushes stop.
 *
 * A reader can outrun the worker where decoding a compressed shard is
 * slower than the reader (gzip): its READs then decode the span they are
 * in, and the worker goes on at the next seek span rather than decode the
 * same bytes behind them.
 *
 * What the sources say (struct shard_push_hints in source.h) and what
 * push-ahead learns while it runs (struct pushahead_policy below) are
 * the policy: which window a stream gets, whether a READ at random has
 * its span or piece pushed, where an overtaken worker goes on.  It is
 * decided in one place, policy_of() in pushahead.c.
 *
 * Only inodes the kernel holds can be stored into, so the FUSE glue
 * reports every reference the kernel takes (LOOKUP, READDIRPLUS) and drops
 * (FORGET), which push-ahead keeps as one bit per entry (held: set by a
 * reference, cleared by a FORGET); where the bit is clear, the worker asks
 * the kernel (a store of no bytes) before it reads the member.  For a
 * member the kernel lacks the worker asks the glue, once (once
 * more after the kernel forgot it), to have the kernel list its directory
 * from it on (the lister callback: prelist.h), which a reader that never
 * lists needs; a member still unknown after that is skipped.  The bytes
 * pushed are read and checked like a READ's (the fetch callback:
 * shardfs_fetch, fs.h): a shard that changed size is never pushed from.
 *
 * Memory: what push-ahead walks a shard by is the index's order[] (index.h:
 * the index file's ORDER section, served from its pages), and what it
 * keeps per entry is bits (struct pushahead's bits[]) and a byte (pass_of),
 * touched where used: after a remount and a walk of every directory, the
 * held bits alone, 1/8 byte per entry (docs/benchmarks-scale.md).
 *
 * Thread-safety: pushahead_read(), _lookup() and _forget() may be called
 * from any number of threads; they take no global lock and allocate
 * nothing (a stream's window is updated under a per-stream try-lock: a
 * READ that finds it taken leaves the window as it is).  _start() and
 * _stop() are called once each, by one thread.
 */
#ifndef SHARDFS_PUSHAHEAD_H
#define SHARDFS_PUSHAHEAD_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardfs/index.h"
#include "shardfs/mount.h"
#include "shardfs/shardset.h"

/* Default bound on the bytes pushed ahead of all readers (-o pushahead=). */
#define SHARDFS_PUSHAHEAD_DEFAULT (64u << 20)
/* Most bytes pushed ahead of one reader of one shard. */
#define SHARDFS_PUSHAHEAD_WINDOW (8u << 20)
/* Bytes read and stored at a time: the worker's one buffer. */
#define SHARDFS_PUSHAHEAD_CHUNK (1u << 20)
/* A READ this far past the window still continues it (a reader that
 * outran the pushes); as SHARDFS_READAHEAD_GAP in mount.h. */
#define SHARDFS_PUSHAHEAD_SLACK (1u << 20)
/* A READ at most this far past the previous one of its shard is near
 * it: a window opens after SHARDFS_READAHEAD_STREAK near READs in a row
 * (a reader at random lands within the 1 MiB of SHARDFS_READAHEAD_GAP
 * now and then; a reader in shard order skips a sample's small members
 * at most). */
#define SHARDFS_PUSHAHEAD_NEAR (64u << 10)
/* READs at random of members READ before in the pass that begin a new
 * one: one alone may be the kernel reading a file again whose pages were
 * dropped while its reader read it (a drop_caches elsewhere on the host). */
#define SHARDFS_PUSHAHEAD_REREADS 4
/* A window whose reader sent nothing for this long is given up. */
#define SHARDFS_PUSHAHEAD_IDLE_MS 250
/* A window that starts over inside or behind the run the worker pushed
 * this recently (ms) does not push that run again (pushahead.c,
 * restart_at()). */
#define SHARDFS_PUSHAHEAD_RECENT_MS 1000
/* Largest directory a reader's LOOKUPs in it have listed (entries),
 * unless it was listed bare (pushahead_list_bare()). */
#define SHARDFS_PUSHAHEAD_LIST_DIR_MAX 256
/* Directories of more entries are listed bare while listings work. */
#define SHARDFS_PUSHAHEAD_BARE_MIN 4096
/* Nor listed bare nor listed whole past this many entries: their inodes
 * would take the kernel over 4 GiB of slab (about 1.1 KiB each). */
#define SHARDFS_PUSHAHEAD_LIST_WHOLE_MAX (4u << 20)
/* In a directory of more than SHARDFS_PUSHAHEAD_LIST_DIR_MAX entries that
 * no reader listed, one LOOKUP in this many, picked by the name's inode,
 * counts toward listing it whole. */
#define SHARDFS_PUSHAHEAD_HUGE_SAMPLE 64
/* Files pushed before span pushes are judged by what the kernel kept. */
#define SHARDFS_PUSHAHEAD_SPAN_PROBE 1024
/* The span of a plain shard: the aligned region around a READ at random
 * whose other members are pushed (a compressed shard's span is the one
 * its seek table gives). */
#define SHARDFS_PUSHAHEAD_REGION (4u << 20)
/* READs whose spans wait for the worker at once; more are dropped. */
#define SHARDFS_PUSHAHEAD_SPAN_QUEUE 16
/* A piece of a plain shard is pushed once its READs at random in this
 * pass took this many tenths of its bytes (pushahead.c says why). */
#define SHARDFS_PUSHAHEAD_FILL_TENTHS 7
/* From when a pass took this many tenths of the set's bytes, a piece is
 * pushed at its first READ at random: denser than any 1/N share, N >= 2. */
#define SHARDFS_PUSHAHEAD_DENSE_TENTHS 6

/*
 * Put @len bytes at @off into the kernel's cache of inode @ino: those of
 * @buf, or, @pipe_fd >= 0, the next @len bytes of that pipe (its read
 * end).  Returns 0 or -errno (the kernel does not have the inode, the
 * mount is going away; the pipe may then hold some of the bytes).  With
 * @len 0 it stores nothing and says whether the kernel holds the inode:
 * 0, or -ENOENT (a probe: FUSE_NOTIFY_STORE of no bytes looks the inode
 * up and does nothing else).
 */
typedef int (*pushahead_store_fn)(void *arg, uint64_t ino, uint64_t off,
				  const void *buf, int pipe_fd, size_t len);

/*
 * Have the kernel take a reference on member entry @e's inode, and on
 * those of the @count entries after it in its directory (a directory of
 * at most @count entries: on all of them).  Returns the entries listed,
 * or -errno.  May block, for a bounded time; a listing that outlasts it
 * goes on without the caller (-ETIMEDOUT).
 */
typedef ssize_t (*pushahead_list_fn)(void *arg, uint32_t e, uint32_t count);

/*
 * How the worker reads members (fs.c: shardfs_fetch() and
 * shardfs_splice_done(), fs.h).  fetch reads @size bytes at @off of
 * member entry @e, checked as a READ is, into @buf, or, @pipe_fd >= 0,
 * splices them into that pipe (its write end): @size, -EAGAIN when the
 * member cannot be spliced (nothing done: read it into a buffer), or
 * -EIO.  Spliced bytes hold the shard's pages until drained says they
 * left the pipe.
 */
struct pushahead_reader {
	ssize_t (*fetch)(void *arg, uint32_t e, char *buf, int pipe_fd,
			 size_t size, uint64_t off);
	void (*drained)(void *arg, uint32_t e, size_t size, uint64_t off);
	void *arg;		/* passed to both */
};

/* What push-ahead learnt while it runs; policy_of() in pushahead.c reads
 * it, with the shard's source's struct shard_push_hints. */
struct pushahead_policy {
	atomic_bool spans_off;		/* span pushes were found wasted */
	atomic_bool cheap_reads;	/* plain shards get no span pushes
					 * (pushahead_cheap_reads) */
	bool spans_on;			/* worker only: a span had a second
					 * READ at random, spans are pushed
					 * at their first from then on */
};

/* The window of one shard; the fields under @busy unless said. */
struct pushahead_stream {
	atomic_flag busy;	/* the try-lock over the fields below */
	uint64_t from;		/* where the window started: a READ from
				 * here on continues it */
	atomic_ullong pos;	/* end of the reader's latest READ; read by
				 * the worker without the lock */
	atomic_ullong to;	/* end of the window (0: none) */
	uint64_t held;		/* bytes of the bound this window holds */
	uint64_t last_end;	/* end of the latest READ seen */
	unsigned near;		/* READs in a row near the one before */
	atomic_uint trip;	/* entry left for the reader to READ */
	atomic_uint gen;	/* bumped when the window restarts or ends */
	atomic_ullong active_ns; /* when the reader was last seen */
	atomic_bool queued;	/* on the worker's list (set by the pusher,
				 * cleared by the worker) */
	uint32_t next;		/* next stream on that list, + 1 */
	uint32_t done_gen;	/* worker only: the window pushed so far */
	uint64_t done;		/* worker only: pushed up to this offset */
	uint64_t pushed;	/* worker only: start of the member it
				 * pushed last (a READ past it overtook) */
	uint64_t run_from;	/* worker only: [run_from, done) was pushed
				 * (or READ past), the latest at run_ns */
	uint64_t run_ns;	/* (monotonic ns) */
	uint64_t skip_from;	/* worker only: a run pushed lately that a
				 * window started over behind will reach */
	uint64_t skip_to;	/* (its end; 0: none) */
};

/*
 * What push-ahead knows of an entry, one bit each, in arrays of one bit
 * per entry (bits[] below): the pages of an array are touched only where
 * its event happened.
 */
enum pushahead_bit {
	PUSHAHEAD_HELD,		/* the kernel took a reference (LOOKUP,
				 * READDIRPLUS, or a probe said so) and
				 * forgot none since */
	PUSHAHEAD_LISTED,	/* member: its directory was listed from it
				 * on; directory: queued for listing (once
				 * until the kernel forgets the entry) */
	PUSHAHEAD_SEEN,		/* directory: a LOOKUP in it */
	PUSHAHEAD_BARE,		/* directory: listed bare, so LOOKUPs in it
				 * have it listed whole */
	PUSHAHEAD_STORED,	/* member: its bytes were stored, and no READ
				 * or window settled it since */
	PUSHAHEAD_SPANNED,	/* compressed member: its span was pushed */
	PUSHAHEAD_TOUCHED,	/* compressed member: READ at random */
	PUSHAHEAD_NR_BITS
};

struct pushahead {
	const struct shard_index *idx;	/* the members */
	const struct shard_set *set;	/* their shards */
	struct pushahead_reader reader;	/* reads a member's bytes */
	uint64_t bound;			/* -o pushahead= (0: off) */
	uint64_t window;		/* per-stream window: min(bound, WINDOW) */
	const uint32_t *order;		/* idx->order: files by (shard,
					 * offset), those too big to push
					 * among them (pushable()) */
	uint32_t *order_start;		/* per shard: its first in order; nr + 1 */
	uint64_t *shard_end;		/* per shard: end of its last pushable
					 * member (0: none) */
	atomic_ullong *bits[PUSHAHEAD_NR_BITS]; /* one bit per entry each */
	struct pushahead_stream *streams; /* one per shard */
	struct pushahead_counters counters; /* activity */
	pushahead_store_fn store;	/* the FUSE glue's store */
	pushahead_list_fn lister;	/* the FUSE glue's listing, or NULL */
	void *store_arg;		/* passed to store and lister */
	atomic_uint list;		/* streams waiting for the worker, + 1 */
	atomic_uint dir_wanted;		/* directory entry to list, + 1 */
	atomic_uint spans_wanted[SHARDFS_PUSHAHEAD_SPAN_QUEUE]; /* entries
					 * whose spans to push, + 1
					 * (0: a free slot) */
	atomic_uint span_next;		/* slot the next one takes */
	atomic_uchar *pass_of;		/* per entry: the pass (1..127) in
					 * which a READ at random or a piece
					 * push took it (0: none) */
	atomic_uint *pieces;		/* per piece of a plain shard: the
					 * pass, whether it was pushed, the
					 * bytes READ at random (pushahead.c) */
	uint32_t *piece_bytes;		/* per piece: bytes of the pushable
					 * members that start in it */
	uint32_t *piece_start;		/* per shard: its first piece; nr + 1 */
	atomic_bool ready;		/* order_start, shard_end and the
					 * pieces are built (release: the
					 * worker, pushahead_prepare()) */
	atomic_uint pass;		/* the reader's pass (1..127) */
	atomic_uint rereads;		/* READs at random in it of members
					 * READ in it before */
	atomic_bool dense;		/* this pass took DENSE_TENTHS of the
					 * set: pieces go at their first READ */
	struct pushahead_policy policy;	/* what it learnt */
	sem_t wake;			/* posted when a stream is queued */
	atomic_bool stop;		/* the worker must return */
	bool running;			/* the worker thread exists */
	pthread_t worker;		/* the thread that pushes */
	char *buf;			/* the worker's CHUNK-byte buffer */
	int pipe[2];			/* the worker's splice pipe (read,
					 * write end; -1: none, copy) */
};

/*
 * Set @p up over @idx and @set (built and open; they outlive @p) with
 * @bound bytes, reading members through @reader (copied; NULL: none, for
 * a push-ahead that never starts); a bound of 0 leaves it off,
 * allocating nothing.  Nothing here is linear in the members but
 * calloc'ed bit arrays: the passes over the entries are
 * pushahead_prepare()'s, which the worker makes once the mount serves.
 * Returns 0 or -ENOMEM.
 */
int pushahead_init(struct pushahead *p, const struct shard_index *idx,
		   const struct shard_set *set, uint64_t bound,
		   const struct pushahead_reader *reader);

/*
 * Build what push-ahead needs of the index: where each shard's files
 * start in its order[], where its last pushable member ends, the pieces
 * of plain shards and their bytes (two passes over the entries: 70 ms of
 * a 270 ms remount at 5 M members, so the worker makes them after the
 * mount; READs until then are not pushed ahead of).  Returns 0; -EINVAL
 * when order[] is not sorted by shard or does not hold as many files as
 * the entries, -ENOMEM: both logged,
 * and push-ahead then stays off.  Called once, by the worker (or a test,
 * before any READ).
 */
int pushahead_prepare(struct pushahead *p);

/* Free what _init, _prepare and _start allocated (after _stop, once no
 * request can come). */
void pushahead_release(struct pushahead *p);

/*
 * Start the worker, which stores through @store(@arg, ...) and has
 * unknown members listed through @lister(@arg, ...) (NULL: skipped).  Does
 * nothing when @p is off.  Returns 0 or -errno (push-ahead then stays
 * off).
 */
int pushahead_start(struct pushahead *p, pushahead_store_fn store,
		    pushahead_list_fn lister, void *arg);

/*
 * The kernel looked up name @ino in directory @dir_ino: it lacks the
 * directory's entries.  At the second such LOOKUP in a directory of at
 * most SHARDFS_PUSHAHEAD_LIST_DIR_MAX entries, or in one listed bare, the
 * worker has it listed whole (the lister), once until the kernel forgets
 * the directory (again if its listing met another under way: a huge
 * one's takes seconds), so that a reader that never lists, shuffled or
 * not, costs a LOOKUP per directory instead of one per file.  In a
 * bigger directory no reader listed, only one LOOKUP in
 * SHARDFS_PUSHAHEAD_HUGE_SAMPLE counts, so that a few stats do not have
 * a million inodes made (2.5 s of the daemon's CPU, 1.1 GiB of slab),
 * while a reader at random has it listed after about 128: random stats
 * in a million entries, cold, 38-40 -> 22-28 us (ext4: 19-23 us;
 * docs/benchmarks-scale.md).  Never blocks.
 */
void pushahead_lookup_in(struct pushahead *p, uint64_t dir_ino, uint64_t ino);

/*
 * A reader lists directory @dir_ino (READDIRPLUS): whether its entries
 * go bare, without attributes, so that the kernel makes no inode for
 * them, as for a plain READDIR.  Yes for a directory of more than
 * SHARDFS_PUSHAHEAD_BARE_MIN entries, and at most
 * SHARDFS_PUSHAHEAD_LIST_WHOLE_MAX, when the worker can have it listed:
 * then the second LOOKUP in it has it listed whole, once until the
 * kernel forgets it (pushahead_lookup_in()), so that stats after the
 * listing find their inodes made in bulk, ahead of them.  A million
 * entries listed with their inodes cost the reader's kernel ~2 us each,
 * bare 0.35 us (docs/benchmarks-scale.md, "Huge directories listed
 * bare").  Never blocks.
 */
bool pushahead_list_bare(struct pushahead *p, uint64_t dir_ino);

/*
 * Say that a READ costs the daemon little (FUSE over io_uring: a few
 * microseconds, served on the reader's CPU): plain shards read at random
 * then get no span pushes, whose reads of the storage would only queue
 * ahead of the READs (shuffled cold, 4 threads, side by side: 0.88-0.95x
 * loose with them, 0.99-1.02x without; over /dev/fuse 0.98-1.16x with
 * them, 0.89-0.95x without).  A compressed shard keeps them: its READs
 * decode the span anyway.  (A remote shard gets none in any case: its
 * hints say fetched.)  Any thread, any time.
 */
void pushahead_cheap_reads(struct pushahead *p);

/*
 * Stop and join the worker; no store or listing is made after it returns.
 * Requests may go on calling _read(), _lookup(), _forget() and
 * _lookup_in() until _release(): they queue work that nobody does.
 * Idempotent.
 */
void pushahead_stop(struct pushahead *p);

/* The kernel took @n references to inode @ino (LOOKUP, READDIRPLUS). */
void pushahead_lookup(struct pushahead *p, uint64_t ino, uint64_t n);

/* The kernel dropped @n references to inode @ino (FORGET). */
void pushahead_forget(struct pushahead *p, uint64_t ino, uint64_t n);

/*
 * The reader READ [@off, @end) of entry @e in its shard; @forward counts
 * the READs of the shard in a row, this one included, that moved forward
 * (0: this one jumped; see shard_readahead() in fs.c).  Moves, starts or
 * ends the shard's window from SHARDFS_READAHEAD_STREAK on; a READ that
 * jumped to a file's start may have its span pushed.
 */
void pushahead_read(struct pushahead *p, uint32_t e, uint64_t off,
		    uint64_t end, unsigned forward);

#endif
