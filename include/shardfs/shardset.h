/*
 * shardset.h - the ordered set of shard files behind a mount.
 *
 * A SHARDS argument names the set in one string, because fstab and the
 * mount helper pass it through unexpanded:
 *
 *   /data/shard-{000000..000099}.tar   brace range (zero padding kept)
 *   /data/{train,val}.tar              brace list
 *   /data/train-*.tar                  glob (sorted)
 *   /data/shards/                      every *.tar in a directory (sorted)
 *   a.tar,b.tar,/data/more/            comma-separated list of the above
 *
 * The order of the expansion is the shard order: later shards win when a
 * path appears twice.  Shards stay open for the life of the mount so that
 * no request after the mount opens a file on the shard storage.
 *
 * Thread-safety: expansion and opening happen before the mount, single
 * threaded; afterwards the set is shared by all threads: reads use pread
 * on the shared descriptors, and the per-shard activity fields below are
 * relaxed atomics (statistics and readahead hints, never correctness).
 */
#ifndef SHARDFS_SHARDSET_H
#define SHARDFS_SHARDSET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Most shards a SHARDS argument may expand to. */
#define SHARD_SET_MAX_SHARDS (1u << 20)
/* Longest SHARDS argument accepted. */
#define SHARD_SET_SPEC_MAX (64u * 1024)

struct shard {
	char *path;		/* expanded from SHARDS; absolute once open */
	int fd;			/* open read-only for the life of the mount */
	uint64_t size;		/* bytes, from fstat at open */
	struct timespec mtime;	/* from fstat at open */
	struct timespec ctime;	/* from fstat at open */
	uint32_t uid;		/* owner of the shard file */
	uint32_t gid;		/* group of the shard file */
	uint64_t members;	/* members found by the index build */
	uint64_t digest;	/* of its headers (and labels): see
				 * shard_scan.h; 0 until scanned */
	uint64_t fingerprint;	/* of its first bytes (index_file.h), when
				 * fingerprinted is set */
	bool fingerprinted;	/* fingerprint is known (from an index) */
	bool bad;		/* failed to scan; skipped (skip_bad_shards) */
	int stale_logged;	/* set once a read found the shard changed */
	atomic_uint read_errors; /* failed reads, to rate-limit their logs */
	atomic_ullong served_lo; /* lowest shard offset read (~0: none) */
	atomic_ullong served_hi; /* end of the highest range read */
	atomic_ullong last_end;	/* end of the latest read, for readahead */
	atomic_uint forward;	/* reads in a row that moved forward */
	atomic_ullong ra_start;	/* start of the range last prefetched */
	atomic_ullong ra_end;	/* end of the range last prefetched */
};

struct shard_set {
	struct shard *shards;	/* in shard order */
	uint32_t nr;		/* entries in shards */
	bool skip_bad;		/* set before shard_set_open(): a shard that
				 * cannot be opened (or later scanned) is
				 * marked bad and left out, not an error */
};

/*
 * Expand @spec into shard paths (not yet opened).  On error returns
 * -errno and writes a message for the user into @msg: no match for a
 * pattern, a directory without *.tar files, a malformed brace, too many
 * shards.
 */
int shard_set_expand(struct shard_set *set, const char *spec, char *msg,
		     size_t msg_len);

/*
 * Open every shard read-only and record its size and mtime.  Raises
 * RLIMIT_NOFILE as far as allowed first.  Returns 0 or -errno with a
 * message naming the shard that failed; with set->skip_bad, such shards
 * are logged, marked bad and skipped instead.
 */
int shard_set_open(struct shard_set *set, char *msg, size_t msg_len);

/* Close descriptors and free the set; the set is empty afterwards. */
void shard_set_release(struct shard_set *set);

#endif
