/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seekable.h - what the compressed sources share (internal to the core).
 *
 * A compressed shard served at random offsets is a seekable source: the
 * stored bytes (another source), a seek table (seek_table.h) and a codec
 * that can start decoding at any point of the table.  The source itself,
 * the decoder pool and the read path are generic (source_seekable.c);
 * a codec (source_gzip.c, source_zstd.c) supplies three operations and
 * the pass that builds the table.
 *
 * Decoders are a fixed pool per codec, allocated when the first shard of
 * that format is opened, shared by all its sources of one shard set (the
 * pools are in the set's struct shard_decoders, freed with it): no
 * allocation on the read path, and memory that does not grow with the
 * number of shards.
 * Each decoder has its own lock; a read takes one already positioned
 * just before it in the same stream (try-lock), else an idle one, else
 * waits for one in turn.  There is no lock over a pool.
 */
#ifndef SHARDFS_SEEKABLE_H
#define SHARDFS_SEEKABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shardfs/seek_table.h"
#include "shardfs/source.h"

/* Decoders per codec: about two per request thread. */
#define SEEKABLE_DECODERS 16
/* Compressed bytes per read of the stored object. */
#define SEEKABLE_IN_CHUNK (128u * 1024)
/* Output decoded into scratch while skipping to a read's offset. */
#define SEEKABLE_SCRATCH (64u * 1024)
/* Output decoded at a time while a span is put in the cache. */
#define SEEKABLE_FILL (256u * 1024)

struct seekable_source;
struct seekable_decoder;
struct seek_builder;
struct span_cache;

/* The pools of struct shard_decoders: one per family of codecs. */
enum seekable_pool_id {
	SEEKABLE_POOL_GZIP,
	SEEKABLE_POOL_ZSTD,
	SEEKABLE_POOL_ARCHIVE,		/* the libarchive formats share one */
	SEEKABLE_POOLS
};

/* What a compression format supplies. */
struct seekable_codec {
	const char *name;		/* "gzip": source->encoding, messages */
	bool decode_bound;		/* source->push.decode_bound (source.h) */
	enum seekable_pool_id pool;	/* its decoders' pool */
	/* Allocate d->state (when the pool is made).  0 or -ENOMEM. */
	int (*decoder_init)(struct seekable_decoder *d);
	/* Free d->state, which may be NULL (its decoder_init failed). */
	void (*decoder_release)(struct seekable_decoder *d);
	/*
	 * Make @d ready to decode from point @p; its input is empty and
	 * positioned at p->in.  0 or -EIO.
	 */
	int (*seek)(struct seekable_source *s, struct seekable_decoder *d,
		    const struct seek_point *p);
	/*
	 * Decode d->in_buf[d->in_pos .. d->in_len) into up to @len bytes at
	 * @dst, advancing in_pos; *@made is what came out.  Crosses member
	 * or frame ends itself.  0 or -EIO (the data does not decode).
	 */
	int (*decode)(struct seekable_source *s, struct seekable_decoder *d,
		      unsigned char *dst, size_t len, size_t *made);
	/* One pass over the stored bytes filling @b (see below). */
	int (*build)(struct seekable_source *s, struct seek_builder *b,
		     char *msg, size_t msg_len);
};

/* A codec's decoders. */
struct seekable_pool {
	struct seekable_decoder *dec;	/* SEEKABLE_DECODERS, made when the
					 * first shard is opened; NULL before */
	const struct seekable_codec *codec; /* whose decoder_release frees
					 * their states */
	atomic_uint next;		/* where the search for an idle one
					 * starts, spread round */
};

/*
 * What the compressed sources of one shard set share (source.h): the
 * pools, and the decoded-span cache.  Pools are made under make_lock,
 * when shards are opened; reads find them made and take no lock over
 * them.
 */
struct shard_decoders {
	struct span_cache *spans;	/* decoded spans (-o cache_dir), or
					 * NULL; not owned, outlives this */
	pthread_mutex_t make_lock;	/* guards the making of pools */
	struct seekable_pool pools[SEEKABLE_POOLS]; /* by codec->pool */
};

/* One decoder; every field but lock is guarded by lock. */
struct seekable_decoder {
	pthread_mutex_t lock;		/* held while decoding */
	_Atomic(struct seekable_source *) owner; /* stream it is in */
	_Atomic uint64_t out;		/* tar offset of its next byte */
	uint64_t in;			/* compressed offset of in_buf[0] */
	size_t in_pos;			/* next byte of in_buf to decode */
	size_t in_len;			/* bytes in in_buf */
	void *state;			/* the codec's decoding state */
	unsigned char in_buf[SEEKABLE_IN_CHUNK]; /* compressed bytes */
	unsigned char scratch[SEEKABLE_SCRATCH]; /* skipped output, or
						  * the codec's scratch */
	unsigned char fill[SEEKABLE_FILL];	/* a span on its way into
						 * the cache */
};

struct seekable_source {
	struct shard_source base;	/* base.size: of the tar stream */
	struct shard_source *raw;	/* the stored (compressed) bytes */
	const struct seekable_codec *codec; /* its format */
	char *name;			/* the shard, for messages */
	struct seek_table table;	/* valid when has_table */
	void *table_mem;		/* points and windows, owned */
	bool has_table;			/* set by seek_build or seek_set */
	struct seekable_pool *pool;	/* its codec's decoders */
	struct span_file *cache;	/* its spans in it (span_cache.h), or
					 * NULL */
	atomic_uint errors;		/* damaged reads so far */
};

/* A seek table being built. */
struct seek_builder {
	struct seek_point *points;	/* so far */
	size_t nr, cap;			/* entries, capacity of points */
	unsigned char *windows;		/* compressed windows so far */
	size_t wlen, wcap;		/* bytes, capacity of windows */
	uint64_t total;			/* output so far: the next point's out */
	bool read;			/* read from the stream's own seek
					 * table: nothing was decoded */
};

/*
 * A format made of members (gzip members, zstd frames), each decodable on
 * its own: the pass that builds a table is then the same for all, given
 * these.  A member that does not decode becomes a BAD point; decoding
 * resumes at the next place where a member starts and decodes to its end.
 */
struct seekable_members {
	const char *what;		/* "gzip member", for messages */
	/* Does a member start at @p (@len bytes there, up to 8)? */
	bool (*starts)(const unsigned char *p, size_t len);
	/*
	 * Decode the member at compressed offset @at to its end, adding its
	 * output to the builder's total, and window points when @record.
	 * 0 with *@next after it; -EIO when it does not decode (*@next:
	 * where that was found); another -errno.
	 */
	int (*decode)(void *ctx, uint64_t at, bool record, uint64_t *next);
	/*
	 * Output of the member at @at, which did not decode after @decoded
	 * bytes; @found is where the next good member starts, 0 for none.
	 * SEEKABLE_LOST_UNKNOWN: it cannot be told, and the stream must
	 * end at the damage (resuming would shift every later offset).
	 */
	uint64_t (*lost_size)(void *ctx, uint64_t at, uint64_t found,
			      uint64_t decoded);
};

#define SEEKABLE_LOST_UNKNOWN UINT64_MAX

/* The building pass for a member format; @ctx goes to its operations. */
int seekable_build_members(struct seekable_source *s, struct seek_builder *t,
			   const struct seekable_members *f, void *ctx,
			   char *msg, size_t msg_len);

/* Wrap @raw (owned from then on, on success), with raw->decoders' pool
 * for @codec.  0, -EINVAL (@raw has no decoders) or -errno. */
int seekable_open(struct shard_source *raw, const char *name,
		  const struct seekable_codec *codec, struct shard_source **src);

/* The compressed offset of the next byte @d decodes. */
static inline uint64_t seekable_in_pos(const struct seekable_decoder *d)
{
	return d->in + d->in_pos;
}

/* Drop @d's input and position it at compressed offset @at. */
static inline void seekable_set_in(struct seekable_decoder *d, uint64_t at)
{
	d->in = at;
	d->in_pos = d->in_len = 0;
}

/* A point of kind @kind at b->total and compressed offset @in. */
int seek_builder_add(struct seek_builder *b, uint8_t kind, uint64_t in,
		     uint8_t bits);
/* A window point, its history the @len (<= 32 KiB) bytes at @hist. */
int seek_builder_add_window(struct seek_builder *b, uint64_t in, uint8_t bits,
			    const unsigned char *hist, size_t len);

#endif
