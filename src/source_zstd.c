/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_zstd.c - the zstd codec of the seekable sources (seekable.h).
 *
 * zstd frames decode independently, so every frame start is a seek point
 * (no window is ever needed) when frames are at least
 * SEEK_TABLE_MEMBER_SPAN apart; a random read decodes from its frame's
 * start.  Multi-frame streams (pzstd, concatenated zstd outputs, the
 * seekable format, shardfs-pack --compress=zstd) get random access per
 * frame; a single-frame stream is one span, read sequentially fast and
 * at random slowly (each read decodes from the start): the summary says
 * so, and recompressing with frames is the cure.
 *
 * Building the table decodes every frame once (frame contents are
 * checked by the frame checksum when there is one); the seekable
 * format's trailing seek table is a skippable frame, skipped like any
 * other.  A frame that does not decode is a BAD point sized by its
 * header's content size, or, without one, the stream ends there.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "seekable.h"
#include "shardfs/log.h"

/* Build: compressed bytes per read, output discarded per call. */
#define ZS_BUILD_IN (1u << 20)
#define ZS_BUILD_OUT (1u << 20)
/* Longest frame header (ZSTD_FRAMEHEADERSIZE_MAX, an experimental name). */
#define ZS_FRAME_HEADER_MAX 18

static uint32_t le32(const unsigned char *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool zs_skippable(uint32_t magic)
{
	return (magic & 0xFFFFFFF0u) == ZSTD_MAGIC_SKIPPABLE_START;
}

/* A zstd frame, or a skippable frame, starts at @p. */
static bool zs_starts(const unsigned char *p, size_t len)
{
	return len >= 4 && (le32(p) == ZSTD_MAGICNUMBER || zs_skippable(le32(p)));
}

static int zs_decoder_init(struct seekable_decoder *d)
{
	d->state = ZSTD_createDCtx();
	return d->state ? 0 : -ENOMEM;
}

static int zs_seek(struct seekable_source *s, struct seekable_decoder *d,
		   const struct seek_point *p)
{
	return ZSTD_isError(ZSTD_DCtx_reset(d->state, ZSTD_reset_session_only)) ? -EIO : 0;
}

static int zs_decode(struct seekable_source *s, struct seekable_decoder *d,
		     unsigned char *dst, size_t len, size_t *made)
{
	ZSTD_inBuffer in = { d->in_buf, d->in_len, d->in_pos };
	ZSTD_outBuffer out = { dst, len, 0 };
	size_t rc = ZSTD_decompressStream(d->state, &out, &in);

	d->in_pos = in.pos;
	*made = out.pos;
	return ZSTD_isError(rc) ? -EIO : 0;
}

/* The state of the building pass. */
struct zs_builder {
	struct seekable_source *s;	/* the source it is for */
	struct seek_builder *t;		/* the table */
	ZSTD_DCtx *dctx;		/* decodes one frame at a time */
	unsigned char *in;		/* ZS_BUILD_IN compressed bytes */
	unsigned char *out;		/* ZS_BUILD_OUT bytes, discarded */
};

/* Decode the frame at @at (struct seekable_members' decode). */
static int zs_frame(void *ctx, uint64_t at, bool record, uint64_t *next)
{
	struct zs_builder *b = ctx;
	struct shard_source *raw = b->s->raw;
	ZSTD_inBuffer in = { b->in, 0, 0 };
	uint64_t base = at;	/* compressed offset of b->in[0] */
	size_t rc;

	ZSTD_DCtx_reset(b->dctx, ZSTD_reset_session_only);
	do {
		ZSTD_outBuffer out = { b->out, ZS_BUILD_OUT, 0 };

		if (in.pos == in.size) {
			ssize_t n;

			base += in.size;
			n = raw->ops->read(raw, b->in, ZS_BUILD_IN, base);
			if (n <= 0) {
				*next = base;
				return n < 0 ? (int)n : -EIO;	/* cut short */
			}
			in = (ZSTD_inBuffer){ b->in, (size_t)n, 0 };
		}
		rc = ZSTD_decompressStream(b->dctx, &out, &in);
		b->t->total += out.pos;
		if (ZSTD_isError(rc)) {
			*next = base + in.pos;
			return -EIO;
		}
	} while (rc != 0);
	*next = base + in.pos;
	return 0;
}

/* A damaged frame's output: its header's content size, when it has one
 * and the header is intact. */
static uint64_t zs_lost_size(void *ctx, uint64_t at, uint64_t found,
			     uint64_t decoded)
{
	struct zs_builder *b = ctx;
	unsigned char head[ZS_FRAME_HEADER_MAX];
	ssize_t n = b->s->raw->ops->read(b->s->raw, head, sizeof(head), at);
	unsigned long long size = n > 0 ? ZSTD_getFrameContentSize(head, (size_t)n)
					: ZSTD_CONTENTSIZE_ERROR;

	if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR ||
	    size < decoded)
		return SEEKABLE_LOST_UNKNOWN;
	return size;
}

static const struct seekable_members zs_members = {
	.what = "zstd frame",
	.starts = zs_starts,
	.decode = zs_frame,
	.lost_size = zs_lost_size,
};

static int zs_build(struct seekable_source *s, struct seek_builder *t,
		    char *msg, size_t msg_len)
{
	struct zs_builder b = { .s = s, .t = t };
	int rc;

	b.dctx = ZSTD_createDCtx();
	b.in = malloc(ZS_BUILD_IN);
	b.out = malloc(ZS_BUILD_OUT);
	if (!b.dctx || !b.in || !b.out)
		rc = log_format(msg, msg_len, -ENOMEM, "%s", strerror(ENOMEM));
	else
		rc = seekable_build_members(s, t, &zs_members, &b, msg, msg_len);
	ZSTD_freeDCtx(b.dctx);
	free(b.in);
	free(b.out);
	return rc;
}

static struct seekable_pool zs_pool;

static const struct seekable_codec zs_codec = {
	.name = "zstd",
	.pool = &zs_pool,
	.decoder_init = zs_decoder_init,
	.seek = zs_seek,
	.decode = zs_decode,
	.build = zs_build,
};

int shard_source_open_zstd(struct shard_source *raw, const char *name,
			   struct shard_source **src)
{
	return seekable_open(raw, name, &zs_codec, src);
}
