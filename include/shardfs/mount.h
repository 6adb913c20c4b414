/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mount.h - what a mount is told and what it counts: its options, its
 * activity counters and the read path's state per shard.
 *
 * fs.c writes these and control.c (/.shardfs/) reads them; they live here
 * so that neither needs the other's structures (control.c never sees
 * struct shardfs).
 *
 * Thread-safety: counters and streams are relaxed atomics, written by any
 * number of threads; options are set before the mount serves requests.
 */
#ifndef SHARDFS_MOUNT_H
#define SHARDFS_MOUNT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Preferred I/O size reported in st_blksize: big reads suit shards. */
#define SHARDFS_BLKSIZE (128 * 1024)

/* Mount-wide options that change answers or I/O, not the index. */
struct shardfs_options {
	bool set_uid;		/* report uid instead of the tar's owner */
	bool set_gid;		/* report gid instead of the tar's group */
	uint32_t uid;		/* owner to report when set_uid */
	uint32_t gid;		/* group to report when set_gid */
	mode_t umask;		/* permission bits to clear (default 0) */
	uint64_t readahead;	/* bytes prefetched ahead of forward
				 * readers of a shard; 0 turns it off */
	uint64_t pushahead;	/* bound on the bytes pushed into the
				 * kernel ahead of readers (pushahead.h);
				 * 0 turns it off */
};

/* Operations timed for /.shardfs/stats. */
enum shardfs_op {
	SHARDFS_OP_LOOKUP,
	SHARDFS_OP_GETATTR,
	SHARDFS_OP_READDIR,
	SHARDFS_OP_OPEN,
	SHARDFS_OP_READ,
	SHARDFS_OP_READLINK,
	SHARDFS_OP_XATTR,
	SHARDFS_OP_STATFS,
	SHARDFS_OP_IOCTL,	/* answered ENOTTY: counted, none served */
	SHARDFS_NR_OPS
};

/* Count and total latency of one kind of operation. */
struct shardfs_op_counter {
	atomic_ullong count;	/* requests answered */
	atomic_ullong nsec;	/* time spent answering them */
};

/* Activity since mount, for /.shardfs/; all relaxed atomics. */
struct shardfs_counters {
	struct shardfs_op_counter ops[SHARDFS_NR_OPS]; /* per operation */
	atomic_ullong read_bytes;	/* bytes returned by reads */
	atomic_ullong random_read_bytes; /* of them, by READs that jumped
					 * (read from the shards as much) */
	atomic_ullong backing_reads;	/* pread calls on shards */
	atomic_ullong backing_spliced;	/* of them, spliced into a reply
					 * (shardfs_splice()), not copied */
	atomic_ullong backing_bytes;	/* bytes those calls returned */
	atomic_ullong errors;		/* requests answered with EIO */
	atomic_ullong readahead_hits;	/* reads inside a prefetched range */
	atomic_ullong readahead_misses;	/* forward reads past it */
	atomic_ullong uring_requests;	/* requests that came over io_uring */
};

/* A read this far past the previous one still counts as moving forward:
 * a reader that skips the other members of a sample is still sequential. */
#define SHARDFS_READAHEAD_GAP (1u << 20)

/* Forward reads in a row before a readahead window opens (see fs.c). */
#define SHARDFS_READAHEAD_STREAK 3

/* Fewer bytes than this are copied, not spliced (a READ's reply, a
 * push's store): libfuse splices only from two pages on (below, it would
 * copy the pipe's bytes through a buffer it allocates), and a copy of so
 * few costs less than the splices. */
#define SHARDFS_SPLICE_MIN (2 * 4096)
/* Most bytes spliced at once: libfuse's pipe then needs at most 1 MiB
 * (the bytes, the header and its rounding up), the default
 * pipe-max-size, to which any process may grow a pipe. */
#define SHARDFS_SPLICE_MAX (512 * 1024)

/*
 * What the read path learns about one shard while mounted: hints for
 * readahead and statistics (relaxed atomics, racy by design: a lost
 * update costs a hint), and the one fact that is about correctness,
 * @changed, which once set stays set.
 */
struct shard_stream {
	atomic_bool changed;	/* a read found the shard changed under
				 * the mount: every later read gets EIO */
	atomic_uint read_errors; /* failed reads, to rate-limit their logs */
	atomic_ullong served_lo; /* lowest shard offset read (~0: none) */
	atomic_ullong served_hi; /* end of the highest range read */
	atomic_ullong last_end;	/* end of the latest read, for readahead */
	atomic_uint forward;	/* reads in a row that moved forward */
	atomic_ullong ra_start;	/* start of the range last prefetched */
	atomic_ullong ra_end;	/* end of the range last prefetched */
};

/* What push-ahead did since mount (pushahead.h); relaxed atomics. */
struct pushahead_counters {
	atomic_ullong bytes;		/* bytes stored into the kernel */
	atomic_ullong files;		/* members stored */
	atomic_ullong passed;		/* stored members the reader went past */
	atomic_ullong unconfirmed;	/* stored members past the reader's
					 * last READ when its window ended:
					 * read from the page cache before
					 * it moved on, or never (wasted) */
	atomic_ullong read_anyway;	/* stored members READ all the same */
	atomic_ullong refused;		/* stores the kernel refused */
	atomic_ullong unknown;		/* members skipped: inode not held
					 * by the kernel */
	atomic_ullong probes;		/* times the kernel was asked whether
					 * it holds an inode (a store of no
					 * bytes: pushahead.h) */
	atomic_ullong listings;		/* directories listed through the
					 * mount so that the kernel holds
					 * the members (prelist.h) */
	atomic_ullong listed;		/* entries those listings read */
	atomic_ullong bare;		/* directories a reader listed bare:
					 * no inodes (pushahead_list_bare()) */
	atomic_ullong spans;		/* spans (decoded ones of compressed
					 * shards, 4 MiB pieces of plain ones)
					 * whose other members were pushed
					 * after a READ at random in them */
	atomic_ullong ahead;		/* bytes held by windows now */
	atomic_ullong ahead_max;	/* most ever held at once */
	atomic_ullong window_fetched;	/* bytes read from the shards for
					 * windows (sequential readers) */
	atomic_ullong span_fetched;	/* bytes read from the shards for
					 * spans (readers at random) */
	atomic_ullong passes;		/* passes at random begun again:
					 * READs at random of members this
					 * pass had READ start the next */
	atomic_ullong pass_bytes;	/* bytes this pass READ at random or
					 * pushed with pieces */
	atomic_ullong set_bytes;	/* bytes of the members of plain
					 * shards' pieces (set once, by
					 * pushahead_prepare()): the pass's
					 * density is pass_bytes of it */
};

#endif
