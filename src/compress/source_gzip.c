/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_gzip.c - the gzip codec of the seekable sources (seekable.h).
 *
 * Seek points (seek_table.h) are member starts, where decoding needs
 * nothing else, and deflate block boundaries inside members about every
 * SEEK_TABLE_SPAN of output, where it needs the 32 KiB of output before
 * (the window) and the bits of the block's first byte: zlib's zran.c
 * method.  Building the table decodes the whole object once (the index
 * build does it, in its scan threads); a member that does not decode is a
 * BAD point, decoding resumes at the next member that decodes (its CRC
 * checked), and the damaged range's size comes from the gzip trailer
 * before that member.
 *
 * Decoding from a member point runs zlib in gzip mode, which checks every
 * member's CRC and size; from a window point, in raw deflate mode to the
 * member's end (no check possible), then in gzip mode again.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "seekable.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

/* Build: compressed bytes per read, output buffer (history kept). */
#define GZ_BUILD_IN (1u << 20)
#define GZ_BUILD_OUT (1u << 20)
/* Most output deflate makes of one compressed byte (258 per 2 bits). */
#define GZ_MAX_RATIO 1032

/* A decoder's zlib state. */
struct gz_state {
	z_stream zs;		/* the stream's inflate state */
	z_stream wz;		/* inflates stored windows */
	bool raw_mode;		/* decoding a member from a window point:
				 * no header, no trailer check */
};

static int gz_decoder_init(struct seekable_decoder *d)
{
	struct gz_state *st = calloc(1, sizeof(*st));

	if (!st || inflateInit2(&st->zs, 31) != Z_OK || inflateInit(&st->wz) != Z_OK) {
		free(st);
		return -ENOMEM;
	}
	d->state = st;
	return 0;
}

static void gz_decoder_release(struct seekable_decoder *d)
{
	struct gz_state *st = d->state;

	if (!st)
		return;
	inflateEnd(&st->zs);
	inflateEnd(&st->wz);
	free(st);
}

/* Restore window point @p's history into @d (raw deflate from there). */
static int gz_set_window(struct seekable_source *g, struct seekable_decoder *d,
			 struct gz_state *st, const struct seek_point *p)
{
	unsigned char byte;
	int rc;

	inflateReset(&st->wz);
	st->wz.next_in = (unsigned char *)g->table.windows + p->window;
	st->wz.avail_in = p->window_len;
	st->wz.next_out = d->scratch;
	st->wz.avail_out = SEEK_WINDOW_SIZE;
	if (inflate(&st->wz, Z_FINISH) != Z_STREAM_END ||
	    inflateReset2(&st->zs, -15) != Z_OK)
		return -EIO;
	if (p->bits) {
		rc = (int)g->raw->ops->read(g->raw, &byte, 1, p->in - 1);
		if (rc != 1)
			return rc < 0 ? rc : -EIO;
		inflatePrime(&st->zs, p->bits, byte >> (8 - p->bits));
	}
	if (inflateSetDictionary(&st->zs, d->scratch,
				 SEEK_WINDOW_SIZE - st->wz.avail_out) != Z_OK)
		return -EIO;
	st->raw_mode = true;
	return 0;
}

static int gz_seek(struct seekable_source *g, struct seekable_decoder *d,
		   const struct seek_point *p)
{
	struct gz_state *st = d->state;

	if (p->kind == SEEK_POINT_WINDOW)
		return gz_set_window(g, d, st, p);
	st->raw_mode = false;
	return inflateReset2(&st->zs, 31) == Z_OK ? 0 : -EIO;
}

/* After a member's end: skip a raw member's trailer, start the next. */
static int gz_next_member(struct seekable_decoder *d, struct gz_state *st)
{
	if (st->raw_mode)
		seekable_set_in(d, seekable_in_pos(d) + 8);
	st->raw_mode = false;
	return inflateReset2(&st->zs, 31) == Z_OK ? 0 : -EIO;
}

static int gz_decode(struct seekable_source *g, struct seekable_decoder *d,
		     unsigned char *dst, size_t len, size_t *made)
{
	struct gz_state *st = d->state;
	int zrc;

	st->zs.next_in = d->in_buf + d->in_pos;
	st->zs.avail_in = (uInt)(d->in_len - d->in_pos);
	st->zs.next_out = dst;
	st->zs.avail_out = (uInt)len;
	zrc = inflate(&st->zs, Z_NO_FLUSH);
	*made = len - st->zs.avail_out;
	d->in_pos = d->in_len - st->zs.avail_in;
	if (zrc == Z_STREAM_END)
		return gz_next_member(d, st);
	return zrc == Z_OK || zrc == Z_BUF_ERROR ? 0 : -EIO;
}

/* The seek table being built, by one decoding pass over the object. */
struct gz_builder {
	struct seekable_source *g;	/* the source it is for */
	struct seek_builder *t;		/* the table */
	uint64_t stored;		/* bytes of the compressed object */
	z_stream zs;			/* inflate state, gzip mode */
	unsigned char *in;		/* GZ_BUILD_IN compressed bytes */
	uint64_t in_end;		/* compressed offset of in's end */
	unsigned char *out;		/* GZ_BUILD_OUT bytes of output, the
					 * last SEEK_WINDOW_SIZE kept on wrap */
	size_t out_len;			/* bytes in out */
};

/* A window point here: the last SEEK_WINDOW_SIZE bytes of output. */
static int add_window(struct gz_builder *b)
{
	size_t wl = b->out_len < SEEK_WINDOW_SIZE ? b->out_len : SEEK_WINDOW_SIZE;

	return seek_builder_add_window(b->t, b->in_end - b->zs.avail_in,
				       b->zs.data_type & 7,
				       b->out + b->out_len - wl, wl);
}

/* Feed @b's inflate from compressed offset @at. */
static int build_fill(struct gz_builder *b, uint64_t at)
{
	size_t want = b->stored - at < GZ_BUILD_IN ? b->stored - at : GZ_BUILD_IN;
	ssize_t n;

	if (want == 0)
		return -EIO;	/* truncated */
	n = b->g->raw->ops->read(b->g->raw, b->in, want, at);
	if (n <= 0)
		return n < 0 ? (int)n : -EIO;
	b->zs.next_in = b->in;
	b->zs.avail_in = (uInt)n;
	b->in_end = at + (uint64_t)n;
	return 0;
}

/*
 * Decode the member at compressed offset @at to its end, adding window
 * points when @record.  Returns 0 with *@next after its trailer, -EIO
 * when it does not decode (*@next: where it stopped), or another -errno.
 */
static int build_member(struct gz_builder *b, uint64_t at, bool record,
			uint64_t *next)
{
	uint64_t last = b->t->nr ? b->t->points[b->t->nr - 1].out : 0;
	int zrc = Z_OK, rc = build_fill(b, at);

	inflateReset2(&b->zs, 31);
	while (!rc && zrc != Z_STREAM_END) {
		uint64_t to_due = last + SEEK_TABLE_SPAN - SEEK_TABLE_SLACK - b->t->total;
		bool due = record && b->t->total - last >= SEEK_TABLE_SPAN - SEEK_TABLE_SLACK;
		size_t room;

		if (b->out_len == GZ_BUILD_OUT) {
			memmove(b->out, b->out + GZ_BUILD_OUT - SEEK_WINDOW_SIZE,
				SEEK_WINDOW_SIZE);
			b->out_len = SEEK_WINDOW_SIZE;
		}
		if (b->zs.avail_in == 0 && (rc = build_fill(b, b->in_end)))
			break;
		/* stop where a point falls due, to look for a block end */
		room = GZ_BUILD_OUT - b->out_len;
		if (record && !due && to_due < room)
			room = (size_t)to_due;
		b->zs.next_out = b->out + b->out_len;
		b->zs.avail_out = (uInt)room;
		zrc = inflate(&b->zs, due ? Z_BLOCK : Z_NO_FLUSH);
		b->t->total += room - b->zs.avail_out;
		b->out_len += room - b->zs.avail_out;
		if (zrc != Z_OK && zrc != Z_STREAM_END && zrc != Z_BUF_ERROR)
			rc = zrc == Z_MEM_ERROR ? -ENOMEM : -EIO;
		else if (due && (b->zs.data_type & 128) && !(b->zs.data_type & 64)) {
			rc = add_window(b);
			last = b->t->total;
		}
	}
	*next = b->in_end - b->zs.avail_in;
	return rc;
}

/* Does a gzip member header start at @p (3 bytes and a sane flag byte)? */
static bool gzip_magic(const unsigned char *p)
{
	return p[0] == 0x1f && p[1] == 0x8b && p[2] == 8 && !(p[3] & 0xe0);
}

/*
 * The output of the damaged member at @at: from the trailer before the
 * member found after it (@found), or without one (0), from the object's
 * last trailer when that is plausible (no less than was @decoded, no
 * more than deflate can expand what is left), else what was decoded (a
 * cut stream ends there).
 */
static uint64_t gz_lost_size(void *ctx, uint64_t at, uint64_t found,
			     uint64_t decoded)
{
	struct gz_builder *b = ctx;
	uint64_t trailer = found ? found - 4 : b->stored - 4;
	unsigned char t[4];
	uint32_t isize;

	if (trailer < at || b->g->raw->ops->read(b->g->raw, t, 4, trailer) != 4)
		return decoded;
	isize = le32(t);
	if (!found && (isize < decoded || isize > (b->stored - at) * GZ_MAX_RATIO))
		return decoded;
	return isize;
}

static int gz_member(void *ctx, uint64_t at, bool record, uint64_t *next)
{
	return build_member(ctx, at, record, next);
}

static bool gz_starts(const unsigned char *p, size_t len)
{
	return len >= 4 && gzip_magic(p);
}

static const struct seekable_members gz_members = {
	.what = "gzip member",
	.starts = gz_starts,
	.decode = gz_member,
	.lost_size = gz_lost_size,
};

static int gz_build(struct seekable_source *g, struct seek_builder *t,
		    char *msg, size_t msg_len)
{
	struct gz_builder b = { .g = g, .t = t, .stored = g->raw->size };
	int rc;

	b.in = malloc(GZ_BUILD_IN);
	b.out = malloc(GZ_BUILD_OUT);
	if (!b.in || !b.out || inflateInit2(&b.zs, 31) != Z_OK) {
		rc = log_format(msg, msg_len, -ENOMEM, "%s", strerror(ENOMEM));
		goto out_free;
	}
	rc = seekable_build_members(g, t, &gz_members, &b, msg, msg_len);
	inflateEnd(&b.zs);
out_free:
	free(b.in);
	free(b.out);
	return rc;
}

/* zlib inflates JPEG members at about 375 MB/s here (one core), slower
 * than a reader takes them through the mount: decoding sets the pace. */
static const struct seekable_codec gz_codec = {
	.name = "gzip",
	.decode_bound = true,
	.pool = SEEKABLE_POOL_GZIP,
	.decoder_init = gz_decoder_init,
	.decoder_release = gz_decoder_release,
	.seek = gz_seek,
	.decode = gz_decode,
	.build = gz_build,
};

int shard_source_open_gzip(struct shard_source *raw, const char *name,
			   struct shard_source **src)
{
	return seekable_open(raw, name, &gz_codec, src);
}
