/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_seekable.c - a compressed shard served at random offsets, for
 * any codec (seekable.h).
 *
 * The source wraps the source of the stored bytes (a local file or a
 * remote object, source_remote.c) and serves the decompressed tar stream.  A read
 * starts decoding at the last seek point before it, so it decodes at
 * most one span (SEEK_TABLE_SPAN of output) and reads about that span's
 * compressed bytes: input is read up to the next point's offset only.
 * Reads that follow each other continue where the last one stopped, so a
 * shard read in order is decoded once, as gzip -d or zstd -d would.
 *
 * A span marked damaged (SEEK_POINT_BAD) fails every read that touches
 * it with EIO; no decoder ever decodes into one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "seekable.h"
#include "shardfs/log.h"
#include "shardfs/util.h"
#include "span_cache.h"

/* Damaged reads logged per shard; the rest are only failed. */
#define SEEKABLE_ERRORS_LOGGED 8

static struct seekable_source *seekable_of(struct shard_source *src)
{
	return (struct seekable_source *)src;
}

static const struct seek_point *point_at(const struct seekable_source *s,
					 uint64_t i)
{
	return &s->table.points[i];
}

int shard_decoders_new(struct span_cache *spans, struct shard_decoders **out)
{
	struct shard_decoders *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->spans = spans;
	pthread_mutex_init(&d->make_lock, NULL);
	*out = d;
	return 0;
}

/* Free the @n decoders at @dec, and their @codec states. */
static void pool_free(const struct seekable_codec *codec,
		      struct seekable_decoder *dec, int n)
{
	for (int i = 0; i < n; i++) {
		codec->decoder_release(&dec[i]);
		pthread_mutex_destroy(&dec[i].lock);
	}
	free(dec);
}

void shard_decoders_free(struct shard_decoders *d)
{
	if (!d)
		return;
	for (int i = 0; i < SEEKABLE_POOLS; i++)
		if (d->pools[i].dec)
			pool_free(d->pools[i].codec, d->pools[i].dec, SEEKABLE_DECODERS);
	pthread_mutex_destroy(&d->make_lock);
	free(d);
}

/* Make the decoders of @codec's pool in @d once; 0, or -ENOMEM and no
 * pool. */
static int pool_ready(struct shard_decoders *d, const struct seekable_codec *codec)
{
	struct seekable_pool *pool = &d->pools[codec->pool];
	struct seekable_decoder *p;
	int made = 0;

	pthread_mutex_lock(&d->make_lock);
	p = pool->dec ? NULL : calloc(SEEKABLE_DECODERS, sizeof(*p));
	for (; p && made < SEEKABLE_DECODERS; made++) {
		pthread_mutex_init(&p[made].lock, NULL);
		if (codec->decoder_init(&p[made])) {
			pool_free(codec, p, made + 1);
			p = NULL;
		}
	}
	if (p) {
		pool->codec = codec;
		pool->dec = p;
	}
	pthread_mutex_unlock(&d->make_lock);
	return pool->dec ? 0 : -ENOMEM;
}

/* The compressed end of the span holding output offset @out. */
static uint64_t span_limit(const struct seekable_source *s, uint64_t out)
{
	uint64_t i = seek_table_find(&s->table, out);

	return i + 1 < s->table.nr ? point_at(s, i + 1)->in + 1
				   : s->table.stored_size;
}

/* Read @d's next compressed bytes, not past its span's end if it can. */
static int refill(struct seekable_source *s, struct seekable_decoder *d,
		  uint64_t out)
{
	uint64_t stored = s->table.stored_size, at = d->in + d->in_len;
	uint64_t limit = span_limit(s, out);
	size_t want = SEEKABLE_IN_CHUNK;
	ssize_t n;

	if (limit > stored || at >= limit)
		limit = stored;	/* past the span's end: read on */
	if (want > limit - at)
		want = (size_t)(limit - at);
	if (want == 0)
		return -EIO;	/* the stream ends inside a member */
	n = s->raw->ops->read(s->raw, d->in_buf, want, at);
	if (n <= 0)
		return n < 0 ? (int)n : -EIO;
	d->in = at;
	d->in_pos = 0;
	d->in_len = (size_t)n;
	return 0;
}

/* Position @d at point @i of @s's table. */
static int dec_seek(struct seekable_source *s, struct seekable_decoder *d,
		    uint64_t i)
{
	const struct seek_point *p = point_at(s, i);
	int rc;

	atomic_store(&d->owner, NULL);
	seekable_set_in(d, p->in);
	rc = s->codec->seek(s, d, p);
	if (rc)
		return rc;
	atomic_store(&d->out, p->out);
	atomic_store(&d->owner, s);
	return 0;
}

/*
 * Decode up to @len bytes into @dst.  Never into a damaged span: before
 * one, the end of the stream is its start.  Returns the bytes produced
 * (0 only at that end) or -EIO.
 */
static ssize_t dec_step(struct seekable_source *s, struct seekable_decoder *d,
			unsigned char *dst, size_t len)
{
	uint64_t out = atomic_load_explicit(&d->out, memory_order_relaxed);
	uint64_t i = seek_table_find(&s->table, out), end = s->base.size;
	size_t made = 0;
	int rc;

	if (point_at(s, i)->kind == SEEK_POINT_BAD)
		end = out;
	else if (i + 1 < s->table.nr && point_at(s, i + 1)->kind == SEEK_POINT_BAD)
		end = point_at(s, i + 1)->out;
	if (len > end - out)
		len = (size_t)(end - out);
	while (made == 0 && len > 0) {
		if (d->in_pos == d->in_len && (rc = refill(s, d, out)))
			return rc;
		rc = s->codec->decode(s, d, dst, len, &made);
		if (rc)
			return rc;
	}
	atomic_store_explicit(&d->out, out + made, memory_order_relaxed);
	return (ssize_t)made;
}

/* Fail a read at @off in point @i's span, logging the first few. */
static int damaged(struct seekable_source *s, uint64_t i, uint64_t off)
{
	unsigned n = atomic_fetch_add(&s->errors, 1);

	if (n < SEEKABLE_ERRORS_LOGGED)
		log_error("%s: offset %" PRIu64 ": %s data does not decode "
			  "(compressed offset %" PRIu64 "): EIO", s->name, off,
			  s->codec->name, point_at(s, i)->in);
	return -EIO;
}

/*
 * Serve [off, off + len) with @d: from where it is when that is in @off's
 * span and not past @off, else from @off's point.  Any damaged byte in
 * the range fails the whole read.
 */
static ssize_t dec_read(struct seekable_source *s, struct seekable_decoder *d,
			unsigned char *buf, size_t len, uint64_t off)
{
	uint64_t i = seek_table_find(&s->table, off);
	uint64_t out = atomic_load(&d->out);
	size_t done = 0;
	int rc;

	if (point_at(s, i)->kind == SEEK_POINT_BAD)
		return damaged(s, i, off);
	if (atomic_load(&d->owner) != s || out > off || out < point_at(s, i)->out) {
		rc = dec_seek(s, d, i);
		if (rc)
			goto out_lost;
	}
	while (done < len) {
		uint64_t at = atomic_load_explicit(&d->out, memory_order_relaxed);
		ssize_t n;

		if (at < off)
			n = dec_step(s, d, d->scratch, off - at < SEEKABLE_SCRATCH ?
				     off - at : SEEKABLE_SCRATCH);
		else
			n = dec_step(s, d, buf + done, len - done);
		if (n < 0) {
			rc = damaged(s, seek_table_find(&s->table, at), at);
			goto out_lost;
		}
		if (n == 0)
			break;
		done += at < off ? 0 : (size_t)n;
	}
	if (done < len)	/* stopped before a damaged span */
		return damaged(s, seek_table_find(&s->table, off + done), off + done);
	return (ssize_t)done;
out_lost:
	atomic_store(&d->owner, NULL);
	return rc;
}

/*
 * A decoder for a read at @off of @s, locked: one positioned in @s's
 * stream at or before @off and no further back than @off's point, else
 * any idle one, else (all busy) the next one in turn, waiting for it.
 */
static struct seekable_decoder *dec_get(struct seekable_source *s, uint64_t off)
{
	struct seekable_pool *pool = s->pool;
	uint64_t from = point_at(s, seek_table_find(&s->table, off))->out;
	unsigned start = atomic_fetch_add_explicit(&pool->next, 1,
						   memory_order_relaxed);

	for (int i = 0; i < SEEKABLE_DECODERS; i++) {
		struct seekable_decoder *d = &pool->dec[i];
		uint64_t out = atomic_load_explicit(&d->out, memory_order_relaxed);

		if (atomic_load_explicit(&d->owner, memory_order_relaxed) == s &&
		    out <= off && out >= from && !pthread_mutex_trylock(&d->lock))
			return d;
	}
	for (int i = 0; i < SEEKABLE_DECODERS; i++) {
		struct seekable_decoder *d = &pool->dec[(start + i) % SEEKABLE_DECODERS];

		if (!pthread_mutex_trylock(&d->lock))
			return d;
	}
	pthread_mutex_lock(&pool->dec[start % SEEKABLE_DECODERS].lock);
	return &pool->dec[start % SEEKABLE_DECODERS];
}

/* Decode [off, off + len) with a decoder of the pool. */
static ssize_t decode_range(struct seekable_source *s, unsigned char *buf,
			    size_t len, uint64_t off)
{
	struct seekable_decoder *d = dec_get(s, off);
	ssize_t n = dec_read(s, d, buf, len, off);

	pthread_mutex_unlock(&d->lock);
	return n;
}

/*
 * Decode all of span @j into the cache, copying [off, off + len) (inside
 * it) into @buf on the way.  A span the cache cannot take is decoded
 * only as far as the read needs.
 */
static ssize_t fill_span(struct seekable_source *s, uint64_t j,
			 unsigned char *buf, size_t len, uint64_t off)
{
	uint64_t start = point_at(s, j)->out, end = seek_table_span_end(&s->table, j);
	struct seekable_decoder *d;
	ssize_t n = 0;
	int rc = 0;

	if (!span_cache_fits(s->base.decoders->spans, end - start))
		return decode_range(s, buf, len, off);
	d = dec_get(s, start);
	for (uint64_t at = start; !rc && at < end; at += (uint64_t)n) {
		n = dec_read(s, d, d->fill, end - at < SEEKABLE_FILL ? end - at
						: SEEKABLE_FILL, at);
		if (n <= 0) {
			rc = n < 0 ? (int)n : -EIO;
			break;
		}
		rc = span_file_write(s->cache, d->fill, (size_t)n, at);
		/* the part of this piece the read asked for */
		if (at < off + len && at + (uint64_t)n > off) {
			uint64_t lo = at > off ? at : off;
			uint64_t hi = at + (uint64_t)n < off + len ? at + (uint64_t)n : off + len;

			memcpy(buf + (lo - off), d->fill + (lo - at), hi - lo);
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (rc == -EIO)
		return rc;	/* damaged: said so by dec_read */
	if (rc)	/* the cache's disk failed: serve the read all the same */
		return decode_range(s, buf, len, off);
	span_file_publish(s->cache, j, start, end - start);
	return (ssize_t)len;
}

/* A read through the cache: span by span, a pread or a fill. */
static ssize_t cached_read(struct seekable_source *s, unsigned char *buf,
			   size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		uint64_t pos = off + done, j = seek_table_find(&s->table, pos);
		uint64_t end = seek_table_span_end(&s->table, j);
		size_t part = len - done < end - pos ? len - done : (size_t)(end - pos);
		ssize_t n;

		if (point_at(s, j)->kind == SEEK_POINT_BAD)
			return damaged(s, j, pos);
		n = span_file_read(s->cache, j, buf + done, part, pos);
		if (n == -ENOENT)
			n = fill_span(s, j, buf + done, part, pos);
		if (n < 0)
			return n;
		done += part;
	}
	return (ssize_t)done;
}

static ssize_t seekable_read(struct shard_source *src, void *buf, size_t len,
			     uint64_t off)
{
	struct seekable_source *s = seekable_of(src);

	if (!s->has_table)
		return -EIO;
	if (off >= src->size || len == 0)
		return 0;
	if (len > src->size - off)
		len = (size_t)(src->size - off);
	return s->cache ? cached_read(s, buf, len, off) : decode_range(s, buf, len, off);
}

/* Hints about the tar stream become hints about its compressed bytes. */
static void seekable_advise(struct shard_source *src, uint64_t off, uint64_t len,
			    enum shard_source_advice advice)
{
	struct seekable_source *s = seekable_of(src);
	uint64_t first, last;

	/* a span is shared with its neighbours: its pages are kept; a scan
	 * of the decoded stream reads whole spans of the stored one */
	if (!s->has_table || len == 0 || off >= src->size ||
	    advice != SHARD_SOURCE_WILLNEED)
		return;
	first = point_at(s, seek_table_find(&s->table, off))->in;
	last = span_limit(s, off + len - 1);
	shard_source_advise(s->raw, first, last - first, advice);
}

static int seekable_current_size(struct shard_source *src, uint64_t *size)
{
	struct seekable_source *s = seekable_of(src);

	return s->raw->ops->current_size(s->raw, size);
}

/* Forget @s's stream in every decoder, so none serves it after close. */
static void pool_forget(struct seekable_source *s)
{
	struct seekable_pool *pool = s->pool;

	for (int i = 0; i < SEEKABLE_DECODERS; i++) {
		struct seekable_decoder *d = &pool->dec[i];

		if (atomic_load(&d->owner) != s)
			continue;
		pthread_mutex_lock(&d->lock);
		if (atomic_load(&d->owner) == s)
			atomic_store(&d->owner, NULL);
		pthread_mutex_unlock(&d->lock);
	}
}

static void seekable_close(struct shard_source *src)
{
	struct seekable_source *s = seekable_of(src);

	pool_forget(s);
	span_file_close(s->cache);
	if (s->raw)
		shard_source_close(s->raw);
	free(s->table_mem);
	free(s->name);
	free(s);
}

/*
 * Adopt a copy of @t (or forget the table, @t NULL), copying @plen bytes
 * of points and the windows into one block.
 */
static int adopt(struct seekable_source *s, const struct seek_table *t)
{
	size_t plen = t ? t->nr * sizeof(*t->points) : 0;
	unsigned char *mem = NULL;

	if (t) {
		mem = malloc(plen + t->windows_len + 1);
		if (!mem)
			return -ENOMEM;
		memcpy(mem, t->points, plen);
		if (t->windows_len)
			memcpy(mem + plen, t->windows, t->windows_len);
		s->table = *t;
		s->table.points = (const struct seek_point *)mem;
		s->table.windows = mem + plen;
	}
	pool_forget(s);
	free(s->table_mem);
	span_file_close(s->cache);
	s->table_mem = mem;
	s->has_table = t != NULL;
	s->base.size = t ? t->size : 0;
	s->cache = t ? span_file_open(s->base.decoders->spans, t->size, t->nr) : NULL;
	return 0;
}

static int seekable_seek_set(struct shard_source *src, const struct seek_table *t)
{
	return adopt(seekable_of(src), t);
}

static const struct seek_table *seekable_seek_get(struct shard_source *src)
{
	struct seekable_source *s = seekable_of(src);

	return s->has_table ? &s->table : NULL;
}

int seek_builder_add(struct seek_builder *b, uint8_t kind, uint64_t in,
		     uint8_t bits)
{
	int rc = array_grow((void **)&b->points, &b->cap, b->nr + 1, sizeof(*b->points));

	if (rc)
		return rc;
	b->points[b->nr++] = (struct seek_point){
		.out = b->total, .in = in, .kind = kind, .bits = bits };
	return 0;
}

int seek_builder_add_window(struct seek_builder *b, uint64_t in, uint8_t bits,
			    const unsigned char *hist, size_t len)
{
	uLongf clen = compressBound(SEEK_WINDOW_SIZE);
	int rc = array_grow((void **)&b->windows, &b->wcap, b->wlen + clen, 1);

	rc = rc ?: seek_builder_add(b, SEEK_POINT_WINDOW, in, bits);
	if (rc)
		return rc;
	if (compress2(b->windows + b->wlen, &clen, hist, len, 6) != Z_OK)
		return -ENOMEM;
	b->points[b->nr - 1].window = b->wlen;
	b->points[b->nr - 1].window_len = (uint32_t)clen;
	b->wlen += clen;
	return 0;
}

/* Candidates tried when looking for a member after damage. */
#define SEEKABLE_RESYNC_TRIALS 256

/*
 * The first place after compressed offset @from where a member starts
 * and decodes to its end (0: none).  The builder's total is left as it
 * was.
 */
static uint64_t find_member(struct seekable_source *s, struct seek_builder *t,
			    const struct seekable_members *f, void *ctx,
			    uint64_t from)
{
	uint64_t total = t->total, stored = s->raw->size, at = from, next;
	unsigned char win[4096 + 8];
	int trials = 0;

	while (at < stored && trials < SEEKABLE_RESYNC_TRIALS) {
		ssize_t n = s->raw->ops->read(s->raw, win, sizeof(win), at);

		if (n <= 0)
			return 0;
		for (ssize_t k = 0; k < n - 8 || (k < n && at + n == stored); k++) {
			int rc;

			if (!f->starts(win + k, (size_t)(n - k)))
				continue;
			rc = f->decode(ctx, at + k, false, &next);
			t->total = total;
			if (!rc)
				return at + k;
			if (++trials == SEEKABLE_RESYNC_TRIALS)
				return 0;
		}
		at += n > 8 ? (uint64_t)n - 8 : (uint64_t)n;
	}
	return 0;
}

/*
 * The member at @at, its output starting at @start and its points at
 * @first, did not decode (found at @stop): its output becomes one BAD
 * point, and decoding resumes at the next member that decodes, *@next
 * (or the end).
 */
static int mark_damaged(struct seekable_source *s, struct seek_builder *t,
			const struct seekable_members *f, void *ctx,
			uint64_t at, uint64_t start, uint64_t first, uint64_t stop,
			uint64_t *next)
{
	uint64_t decoded = t->total - start, found, lost;
	int rc;

	t->nr = first;
	t->total = start;
	rc = seek_builder_add(t, SEEK_POINT_BAD, at, 0);
	if (rc)
		return rc;
	found = find_member(s, t, f, ctx, stop + 1);
	lost = f->lost_size(ctx, at, found, decoded);
	*next = found && lost != SEEKABLE_LOST_UNKNOWN ? found : s->raw->size;
	if (lost == SEEKABLE_LOST_UNKNOWN) {
		log_warn("%s: compressed offset %" PRIu64 ": %s does not decode and "
			 "its size is unknown: the tar stream ends at offset %" PRIu64,
			 s->name, stop, f->what, start);
		lost = 0;
	} else {
		log_warn("%s: compressed offset %" PRIu64 ": %s does not decode; "
			 "offsets %" PRIu64 "-%" PRIu64 " of the tar stream fail with "
			 "EIO", s->name, stop, f->what, start, start + lost);
	}
	if (lost == 0)
		t->nr--;	/* nothing lost: no BAD point */
	t->total = start + lost;
	return 0;
}

/*
 * What follows the last member at compressed offset @at, up to the end:
 * zeros (tape padding) are ignored, anything else (another format, as a
 * zstd frame after a gzip member, or garbage) is bad input that would
 * otherwise drop the members in it without a word: -EINVAL.
 */
static int trailing_data(struct seekable_source *s, const struct seekable_members *f,
			 uint64_t at, char *msg, size_t msg_len)
{
	uint64_t stored = s->raw->size;
	unsigned char buf[4096];

	for (uint64_t pos = at; pos < stored;) {
		ssize_t n = s->raw->ops->read(s->raw, buf, sizeof(buf), pos);

		if (n <= 0)
			return log_format(msg, msg_len, n < 0 ? (int)n : -EIO, "compressed "
					  "offset %" PRIu64 ": %s", pos,
					  strerror(n < 0 ? (int)-n : EIO));
		for (ssize_t k = 0; k < n; k++)
			if (buf[k])
				return log_format(msg, msg_len, -EINVAL, "compressed offset "
						  "%" PRIu64 ": data after the last %s is not a "
						  "%s (another format, or garbage): the shard is "
						  "refused rather than read in part", at, f->what,
						  f->what);
		pos += (uint64_t)n;
	}
	log_warn("%s: compressed offset %" PRIu64 ": zeros after the last %s ignored",
		 s->name, at, f->what);
	return 0;
}

int seekable_build_members(struct seekable_source *s, struct seek_builder *t,
			   const struct seekable_members *f, void *ctx,
			   char *msg, size_t msg_len)
{
	uint64_t at = 0, next, stored = s->raw->size;
	unsigned char head[8];
	int rc = 0;

	while (!rc && at < stored) {
		uint64_t start = t->total, first = t->nr;
		ssize_t n = s->raw->ops->read(s->raw, head, sizeof(head), at);

		if (n < 0 || !f->starts(head, n > 0 ? (size_t)n : 0)) {
			if (at == 0)
				return log_format(msg, msg_len, -EINVAL, "not a %s stream",
						  s->codec->name);
			return trailing_data(s, f, at, msg, msg_len);
		}
		/* after damage a point is needed: decoding cannot run into it */
		if (at == 0 || t->points[t->nr - 1].kind == SEEK_POINT_BAD ||
		    t->total - t->points[t->nr - 1].out >= SEEK_TABLE_MEMBER_SPAN)
			rc = seek_builder_add(t, SEEK_POINT_MEMBER, at, 0);
		rc = rc ?: f->decode(ctx, at, true, &next);
		if (rc == -EIO)
			rc = mark_damaged(s, t, f, ctx, at, start, first, next, &next);
		at = next;
	}
	if (rc)
		return log_format(msg, msg_len, rc, "decoding the %s stream: %s",
				  s->codec->name, strerror(-rc));
	return 0;
}

/* Spans past this many bytes make random reads slow enough to say so. */
#define SEEKABLE_LONG_SPAN (4 * SEEK_TABLE_SPAN)

/*
 * Say when random reads of @s must decode long spans: a single-frame
 * zstd stream is one span; the decoded cache or recompressing helps.
 */
static void warn_long_spans(const struct seekable_source *s)
{
	const struct span_cache *spans = s->base.decoders->spans;
	uint64_t longest = 0;

	for (uint64_t i = 0; i < s->table.nr; i++) {
		uint64_t len = seek_table_span_end(&s->table, i) - point_at(s, i)->out;

		longest = len > longest ? len : longest;
	}
	/* with a cache that takes the span, it is decoded once */
	if (longest > SEEKABLE_LONG_SPAN && !span_cache_fits(spans, longest))
		log_warn("%s: a random read may decode up to %" PRIu64 " MiB: its %s "
			 "stream has %" PRIu64 " seek points for %" PRIu64 " MiB; "
			 "use -o cache_dir, or recompress it in independent frames or "
			 "members (shardfs-pack --compress, pzstd, bgzip)",
			 s->name, longest >> 20, s->codec->name, s->table.nr,
			 s->table.size >> 20);
}

static int seekable_seek_build(struct shard_source *src, char *msg, size_t msg_len)
{
	struct seekable_source *s = seekable_of(src);
	struct seek_builder b = { 0 };
	int rc = s->codec->build(s, &b, msg, msg_len);

	if (!rc && b.nr > 1 && b.points[b.nr - 1].out >= b.total)
		b.nr--;	/* a point at the very end serves nothing */
	if (!rc) {
		struct seek_table t = {
			.points = b.points, .nr = b.nr, .windows = b.windows,
			.windows_len = b.wlen, .size = b.total,
			.stored_size = s->raw->size,
		};

		rc = adopt(s, &t);
	}
	if (!rc)
		log_debug("%s: %s %s seek table: %" PRIu64 " bytes, %" PRIu64
			  " points, %" PRIu64 " bytes of windows", s->name,
			  s->codec->name, b.read ? "read from the stream its" :
			  "decoded for its", b.total, b.nr, b.wlen);
	if (!rc)
		warn_long_spans(s);
	free(b.points);
	free(b.windows);
	return rc;
}

static const struct shard_source_ops seekable_ops = {
	.read = seekable_read,
	.advise = seekable_advise,
	.current_size = seekable_current_size,
	.close = seekable_close,
	.seek_build = seekable_seek_build,
	.seek_set = seekable_seek_set,
	.seek_get = seekable_seek_get,
};

struct shard_source *shard_source_unwrap(struct shard_source *src)
{
	struct seekable_source *s = seekable_of(src);
	struct shard_source *raw;

	if (src->ops != &seekable_ops)
		return src;
	raw = s->raw;
	s->raw = NULL;
	seekable_close(src);
	return raw;
}

int seekable_open(struct shard_source *raw, const char *name,
		  const struct seekable_codec *codec, struct shard_source **src)
{
	struct shard_decoders *dec = raw->decoders;
	struct seekable_source *s = NULL;

	if (!dec)
		return -EINVAL;
	if (!pool_ready(dec, codec))
		s = calloc(1, sizeof(*s));
	if (s)
		s->name = strdup(name);
	if (!s || !s->name) {
		free(s);
		return -ENOMEM;
	}
	/* a stream's bytes are no fewer than their compressed bytes; with a
	 * cache that takes its spans, each is decoded once whoever reads it */
	s->base = (struct shard_source){
		.ops = &seekable_ops, .encoding = codec->name, .decoders = dec,
		.push = {
			.ahead_max = raw->push.ahead_max,
			.decode_bound = codec->decode_bound &&
					!span_cache_fits(dec->spans, SEEK_TABLE_SPAN),
		},
	};
	s->raw = raw;
	s->codec = codec;
	s->pool = &dec->pools[codec->pool];
	*src = &s->base;
	return 0;
}
