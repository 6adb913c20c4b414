/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source.h - where a shard's bytes come from.
 *
 * Every reader of shard bytes (the tar scanner, label reads, the index
 * fingerprint, the read path of a mount) goes through a struct
 * shard_source, never a file descriptor: a local file read with pread(2)
 * is one kind of source; a remote object read with ranged GETs and a
 * compressed stream decoded at random offsets are others, and a
 * decoding source can sit on top of a remote one.  Adding a kind of
 * storage or encoding is one new implementation of the operations below;
 * nothing above this header changes.
 *
 * Offsets and sizes are those of the tar stream the source serves (for a
 * compressed shard: of the decompressed stream).
 *
 * Thread-safety: once opened, read(), advise() and current_size() may be
 * called from any number of threads at once; implementations must not
 * serialise reads of one source behind a lock held across storage I/O
 * where they can avoid it, and must not allocate on the read path.
 * close() is called once, after every other call has returned.
 */
#ifndef SHARDFS_SOURCE_H
#define SHARDFS_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct shard_source;
struct seek_table;
struct shard_decoders;
struct remote;
struct span_cache;

/* What advise() says about a range. */
enum shard_source_advice {
	SHARD_SOURCE_WILLNEED,	/* will be read soon: start fetching it */
	SHARD_SOURCE_DONTNEED,	/* consumed: cached copies may be dropped */
	SHARD_SOURCE_SCAN,	/* the index starts reading small pieces
				 * (headers, a fingerprint), not the data:
				 * a remote source may fetch just what each
				 * read asks (-o index_fetch=ranged) */
	SHARD_SOURCE_SCANNED,	/* the index is done with those reads */
	SHARD_SOURCE_WILLREAD,	/* is being read now, in several reads (one
				 * file): fetch what is missing of it at
				 * once, in as few requests as may be */
};

struct shard_source_ops {
	/*
	 * Read @len bytes at @off into @buf.  Returns the bytes read, which
	 * is less than @len only where the stream ends, or -errno (-EIO
	 * for storage that failed or changed).  Retries EINTR itself.
	 */
	ssize_t (*read)(struct shard_source *src, void *buf, size_t len,
			uint64_t off);
	/*
	 * Move @len bytes at @off into the pipe @pipe_fd without copying
	 * them (splice(2) of the page cache's pages); the pipe must have
	 * room for them.  Returns what read() would.  NULL where the bytes
	 * are not a file's (decoded, fetched): read() them.
	 */
	ssize_t (*splice)(struct shard_source *src, int pipe_fd, size_t len,
			  uint64_t off);
	/*
	 * read() (@pipe_fd < 0) or splice() (into @pipe_fd) for a reader's
	 * read at random (fs.c, read_at_random(): it jumped, or the shard's
	 * reads have not moved forward a few times in a row yet): the
	 * storage is asked for those bytes and none after them, as the
	 * reader is not reading on.  NULL: read() and splice() serve these
	 * too.
	 */
	ssize_t (*transfer_jumped)(struct shard_source *src, void *buf, int pipe_fd,
				   size_t len, uint64_t off);
	/* A hint about [@off, @off + @len); may be NULL (no hints). */
	void (*advise)(struct shard_source *src, uint64_t off, uint64_t len,
		       enum shard_source_advice advice);
	/*
	 * The size of the stored object now, for telling a shard that
	 * changed under the mount from a read that failed: 0 and *@size,
	 * or -errno when it cannot be told.
	 */
	int (*current_size)(struct shard_source *src, uint64_t *size);
	/* Release everything the source holds, including @src itself. */
	void (*close)(struct shard_source *src);
	/*
	 * Compressed sources only; NULL for the others.  Until a source has
	 * a seek table (seek_table.h) its size is unknown and it must not be
	 * read.  seek_build() decodes the whole object once to make the
	 * table, logging damage it finds (0 or -errno with @msg);
	 * seek_set() adopts a copy of @t, e.g. from an index file, or forgets
	 * the table when @t is NULL (0 or -ENOMEM, -EINVAL when @t is not of
	 * this object); seek_get() returns the table or NULL.
	 */
	int (*seek_build)(struct shard_source *src, char *msg, size_t msg_len);
	int (*seek_set)(struct shard_source *src, const struct seek_table *t);
	const struct seek_table *(*seek_get)(struct shard_source *src);
};

/*
 * What a source tells push-ahead (pushahead.h) about reading it ahead of
 * its readers: filled by the source when it is opened, read-only after.
 * Push-ahead's own policy, which consults these, is policy_of() in
 * pushahead.c.
 */
struct shard_push_hints {
	uint64_t ahead_max;	/* bytes a reader ahead of the others may
				 * read past them without evicting what they
				 * need from the source's bounded cache (a
				 * remote shard's chunks); 0: any */
	bool decode_bound;	/* decoding is slower than a reader's READs
				 * (gzip without a span cache): push-ahead
				 * overtaken by its reader goes on at the
				 * next seek span, not behind the READs'
				 * decoder */
	bool fetched;		/* a read the source's cache misses is a
				 * request to a store (a remote object):
				 * a member pushed around a READ at random
				 * costs a request of its own, where the
				 * READ fetches its whole sample in one */
};

/* The common head of every source; implementations embed it first. */
struct shard_source {
	const struct shard_source_ops *ops; /* the implementation */
	uint64_t size;		/* bytes of the tar stream served (0 for a
				 * compressed source without a seek table) */
	const char *encoding;	/* "gzip", ...; NULL for a plain tar */
	struct shard_decoders *decoders; /* what a decoding source put on
				 * this one decodes with (shard_source_wrap),
				 * the same for one set's shards; NULL: none
				 * can be put on it */
	struct shard_push_hints push; /* for push-ahead; a decoding source
				 * passes on its stored bytes' ahead_max */
};

/* What opening a source learnt about the stored object. */
struct shard_source_info {
	char *name;		/* canonical name (absolute path or URL),
				 * malloc'ed; the caller frees it */
	uint64_t stored_size;	/* bytes of the object as stored */
	struct timespec mtime;	/* modification time of the object */
	struct timespec ctime;	/* change time (mtime where none) */
};

/*
 * The decoders of a set of compressed shards, and the decoded-span cache
 * @spans (span_cache.h; NULL: none) they are read through, which outlives
 * them: a pool of decoders per codec, made when its first shard is
 * wrapped (seekable.h).  One per shard set (shardset.h), so that memory
 * does not grow with the number of shards.  0 and *@out, or -ENOMEM.
 */
int shard_decoders_new(struct span_cache *spans, struct shard_decoders **out);

/* Free @d (NULL: nothing), once every source using it was closed. */
void shard_decoders_free(struct shard_decoders *d);

/*
 * Open the shard named @name (a path, or a URL read through @remote,
 * remote.h; NULL: remote shards are refused) and fill @info.  Returns 0
 * and *@src, or -errno with a message naming the shard in @msg: missing,
 * unreadable, not a regular file.  The source serves the stored bytes:
 * whether they are compressed is told later, by shard_source_detect() or
 * by the index, and a decoding source then uses @decoders (may be NULL:
 * no decoding source can be put on it).
 */
int shard_source_open(const char *name, struct remote *remote,
		      struct shard_decoders *decoders, struct shard_source **src,
		      struct shard_source_info *info, char *msg, size_t msg_len);

/* Does @name name a remote object (http://, https://, s3://)? */
bool shard_source_is_remote(const char *name);

/*
 * Open the remote object @url as a source read through @remote
 * (source_remote.c; made by remote_init(), remote.h; it outlives the
 * source).  The contract of shard_source_open().
 */
int shard_source_open_remote(struct remote *remote, const char *url,
			     struct shard_source **src,
			     struct shard_source_info *info, char *msg,
			     size_t msg_len);

/*
 * Read the first bytes of *@src and, when they are those of a compressed
 * stream, replace *@src by a decoding source on top of it (@name, the
 * shard, is its name for messages).  0 (also for a plain tar), or -errno
 * with why in @msg (a format that needs -o cache_dir without one; a
 * source without decoders; the caller names the shard and offset 0);
 * *@src is then unchanged.  The decoding source uses (*@src)->decoders.
 */
int shard_source_detect(struct shard_source **src, const char *name, char *msg,
			size_t msg_len);

/*
 * Put the decoding source for @encoding ("gzip", "zstd", "xz", "bzip2",
 * "lz4", "lzip", "lzma", "compress": a source's encoding) on *@src without
 * reading anything.  0 or -errno with @msg; *@src is unchanged on error.
 */
int shard_source_wrap(struct shard_source **src, const char *name,
		      const char *encoding, char *msg, size_t msg_len);

/* The stored bytes' source under a decoding @src (@src itself for others);
 * the decoding source is freed.  Undoes shard_source_wrap(). */
struct shard_source *shard_source_unwrap(struct shard_source *src);

/*
 * Open a local file as a source (what shard_source_open does for paths).
 * Pages of the file still dirty in the page cache (a shard written
 * moments before) are written back before it returns, so that the
 * DONTNEED advice after each read can drop what it names.
 */
int shard_source_open_file(const char *path, struct shard_source **src,
			   struct shard_source_info *info, char *msg,
			   size_t msg_len);

/*
 * Wrap @raw, which starts like a gzip stream, as a source serving the
 * decompressed tar stream, decoding with raw->decoders; on success the
 * new source owns @raw.  @name is the shard's name for messages.
 * Returns 0 or -errno (-EINVAL: @raw has no decoders).  See
 * source_gzip.c.
 */
int shard_source_open_gzip(struct shard_source *raw, const char *name,
			   struct shard_source **src);
/* The same for a zstd stream (source_zstd.c). */
int shard_source_open_zstd(struct shard_source *raw, const char *name,
			   struct shard_source **src);
/*
 * The same for a stream libarchive decodes (@format: "xz", "bzip2",
 * "lz4", "lzip", "lzma", "compress"; source_archive.c); -ENOTSUP without the
 * decoded cache (-o cache_dir, raw->decoders) it is served from.
 */
int shard_source_open_archive(struct shard_source *raw, const char *name,
			      const char *format, struct shard_source **src);

/* Does a compressed source still need a seek table before it is read? */
static inline bool shard_source_needs_seek(struct shard_source *src)
{
	return src->ops->seek_get && !src->ops->seek_get(src);
}

/*
 * Wrap an open descriptor of a regular file as a source; the source owns
 * @fd from then on (also on failure).  For tools and tests that made the
 * file themselves.  Returns 0 or -errno.
 */
int shard_source_open_fd(int fd, struct shard_source **src);

/* A source over bytes in memory, embedded by its user (tests, fuzzers). */
struct shard_source_mem {
	struct shard_source base; /* base.size is the length of data */
	const unsigned char *data; /* not owned; outlives the source */
};

/* Set @m up over @data; closing it frees nothing. */
void shard_source_mem_init(struct shard_source_mem *m, const void *data,
			   uint64_t size);

/*
 * Read exactly @len bytes at @off, or fail: -EIO when the stream ends
 * first (the shard is shorter than the index says), else the source's
 * -errno.  Returns 0 on success.
 */
int shard_source_read_full(struct shard_source *src, void *buf, size_t len,
			   uint64_t off);

static inline void shard_source_advise(struct shard_source *src, uint64_t off,
				       uint64_t len,
				       enum shard_source_advice advice)
{
	if (src->ops->advise)
		src->ops->advise(src, off, len, advice);
}

static inline void shard_source_close(struct shard_source *src)
{
	if (src)
		src->ops->close(src);
}

#endif
