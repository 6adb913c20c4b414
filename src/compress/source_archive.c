/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_archive.c - every other compression libarchive reads (xz, bzip2,
 * lz4, lzma, lzip, compress), as a seekable codec (seekable.h) of one
 * span: the whole stream.
 *
 * These formats have no places where decoding can start, so a random read
 * could only decode from the beginning.  They are therefore served only
 * through the decoded cache (-o cache_dir, span_cache.h): the first read
 * of a shard decodes it whole into the cache, later reads are preads.
 * That first read takes as long as decompressing the shard (xz: about
 * 100 MB/s); reads in shard order are served as the decoding goes.
 * Without a cache, or with one too small for the shard, the shard is
 * refused with a message that says what to add.  The index build decodes
 * the stream once to learn its size (its seek table is one point).
 *
 * libarchive (its "raw" format over all of its filters) pulls the stored
 * bytes through a callback reading the underlying source, so a remote
 * shard later works the same.  The decoder's input buffer is not used:
 * seek marks it full so the generic read path never refills it.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "seekable.h"
#include "shardfs/log.h"
#include "span_cache.h"

/* Stored bytes per read of the callback. */
#define LA_IN_CHUNK (128u * 1024)

/* A decoder's libarchive reader. */
struct la_state {
	struct archive *a;		/* open on the stream, or NULL */
	struct shard_source *raw;	/* what it reads */
	uint64_t pos;			/* next stored byte to hand it */
	unsigned char buf[LA_IN_CHUNK];	/* the bytes handed */
};

static la_ssize_t la_read_cb(struct archive *a, void *arg, const void **out)
{
	struct la_state *st = arg;
	ssize_t n = st->raw->ops->read(st->raw, st->buf, LA_IN_CHUNK, st->pos);

	if (n < 0) {
		archive_set_error(a, (int)-n, "read failed at offset %" PRIu64, st->pos);
		return -1;
	}
	st->pos += (uint64_t)n;
	*out = st->buf;
	return n;
}

/* (Re)open @st's reader at the start of @raw's stream.  0 or -EIO. */
static int la_start(struct la_state *st, struct shard_source *raw)
{
	struct archive_entry *e;

	if (st->a)
		archive_read_free(st->a);
	st->raw = raw;
	st->pos = 0;
	st->a = archive_read_new();
	if (!st->a)
		return -ENOMEM;
	archive_read_support_filter_all(st->a);
	archive_read_support_format_raw(st->a);
	if (archive_read_open(st->a, st, NULL, la_read_cb, NULL) != ARCHIVE_OK ||
	    archive_read_next_header(st->a, &e) != ARCHIVE_OK)
		return -EIO;
	return 0;
}

static int la_decoder_init(struct seekable_decoder *d)
{
	d->state = calloc(1, sizeof(struct la_state));
	return d->state ? 0 : -ENOMEM;
}

static void la_decoder_release(struct seekable_decoder *d)
{
	struct la_state *st = d->state;

	if (st && st->a)
		archive_read_free(st->a);
	free(st);
}

static int la_seek(struct seekable_source *s, struct seekable_decoder *d,
		   const struct seek_point *p)
{
	d->in_len = 1;	/* "full": libarchive reads for itself */
	return la_start(d->state, s->raw);
}

static int la_decode(struct seekable_source *s, struct seekable_decoder *d,
		     unsigned char *dst, size_t len, size_t *made)
{
	struct la_state *st = d->state;
	la_ssize_t n = archive_read_data(st->a, dst, len);

	*made = n > 0 ? (size_t)n : 0;
	/* asked only for bytes the table says exist: an end is an error */
	return n <= 0 && len ? -EIO : 0;
}

/* Decode the whole stream once: its size, and whether it decodes. */
static int la_build(struct seekable_source *s, struct seek_builder *t,
		    char *msg, size_t msg_len)
{
	struct la_state *st = calloc(1, sizeof(*st));
	unsigned char *out = malloc(LA_IN_CHUNK);
	la_ssize_t n = 0;
	int rc = !st || !out ? -ENOMEM : seek_builder_add(t, SEEK_POINT_MEMBER, 0, 0);

	rc = rc ?: la_start(st, s->raw);
	while (!rc && (n = archive_read_data(st->a, out, LA_IN_CHUNK)) > 0)
		t->total += (uint64_t)n;
	if (!rc && n < 0)
		log_warn("%s: compressed offset %" PRIu64 ": %s: %s stream does not "
			 "decode on; the tar stream ends at offset %" PRIu64, s->name,
			 st->pos, archive_error_string(st->a), s->codec->name, t->total);
	if (!rc && !span_cache_fits(s->base.decoders->spans, t->total))
		rc = log_format(msg, msg_len, -EINVAL, "%s: %" PRIu64 " MB decoded: "
				"-o cache_size must be at least 4 times that", s->codec->name,
				t->total >> 20);
	else if (rc)
		rc = log_format(msg, msg_len, rc, "decoding the %s stream: %s",
				s->codec->name, rc == -EIO ? archive_error_string(st->a)
							   : strerror(-rc));
	else
		log_info("%s: %s: served from the decoded cache; the first read "
			 "decodes it whole", s->name, s->codec->name);
	if (st && st->a)
		archive_read_free(st->a);
	free(st);
	free(out);
	return rc;
}

/* One codec per name, for messages; they share the pool. */
#define LA_CODEC(fmt) { .name = fmt, .pool = SEEKABLE_POOL_ARCHIVE,	\
	.decoder_init = la_decoder_init,				\
	.decoder_release = la_decoder_release, .seek = la_seek,	\
	.decode = la_decode, .build = la_build }

static const struct seekable_codec la_codecs[] = {
	LA_CODEC("xz"), LA_CODEC("bzip2"), LA_CODEC("lz4"), LA_CODEC("lzip"),
	LA_CODEC("lzma"), LA_CODEC("compress"),
};

int shard_source_open_archive(struct shard_source *raw, const char *name,
			      const char *format, struct shard_source **src)
{
	if (!raw->decoders || !span_cache_fits(raw->decoders->spans, 0))
		return -ENOTSUP;	/* no cache to serve it from */
	for (size_t i = 0; i < sizeof(la_codecs) / sizeof(*la_codecs); i++)
		if (!strcmp(la_codecs[i].name, format))
			return seekable_open(raw, name, &la_codecs[i], src);
	return -EINVAL;
}
