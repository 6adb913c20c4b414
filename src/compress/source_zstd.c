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
 * A stream in the zstd seekable format (contrib/seekable_format in zstd)
 * ends with a seek table, a skippable frame listing every frame's
 * compressed and decompressed size: its frames become the points without
 * decoding anything.  The table is untrusted: its sizes must add up to
 * the file, every frame must start with a frame header stating the
 * table's decompressed size (zstd then checks it as the frame decodes),
 * and its block headers, walked (one small read per block of up to
 * 128 KiB, nothing decoded), must end the frame where the table's
 * compressed size says: an entry spanning two frames but stating the
 * first's size would otherwise shift everything after it
 * (tests/fuzz/fuzz_zstd_seek_table.c tries such tables).
 * A decompressed size no header states could only be checked by decoding
 * every frame before it (a wrong one shifts the rest of the stream), so
 * such a table is not used; a wrong one is ignored with a warning.  Either
 * way the stream is then scanned as if it had no table.  The table's
 * optional per-frame checksums are not read; a frame's own content
 * checksum is checked when it has one.
 *
 * Otherwise building the table decodes every frame once (frame contents
 * are checked by the frame checksum when there is one); the seekable
 * format's trailing seek table is a skippable frame, skipped like any
 * other.  A frame that does not decode is a BAD point sized by its
 * header's content size, or, without one (or with one larger than its
 * compressed bytes could make: 128 KiB per 4-byte RLE block), the stream
 * ends there.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "seekable.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

/* Build: compressed bytes per read, output discarded per call. */
#define ZS_BUILD_IN (1u << 20)
#define ZS_BUILD_OUT (1u << 20)
/* Longest frame header (ZSTD_FRAMEHEADERSIZE_MAX, an experimental name). */
#define ZS_FRAME_HEADER_MAX 18
/* The seekable format: magic of the seek table's skippable frame ... */
#define ZS_SEEKABLE_TABLE_MAGIC 0x184D2A5Eu
/* ... and of its footer (number of frames, descriptor, magic). */
#define ZS_SEEKABLE_MAGIC 0x8F92EAB1u
#define ZS_SEEKABLE_FOOTER 9
/* Skippable frame header: magic and frame size. */
#define ZS_SKIPPABLE_HEADER 8
/* Descriptor bits: entries carry a checksum; bits that must be zero. */
#define ZS_SEEKABLE_CHECKSUM 0x80u
#define ZS_SEEKABLE_RESERVED 0x7Cu
/* Most frames a seek table may list (the format's ZSTD_SEEKABLE_MAXFRAMES). */
#define ZS_SEEKABLE_MAX_FRAMES (1u << 27)
/* Smallest zstd frame: magic, frame header, one block header. */
#define ZS_FRAME_MIN 9
/* Frame header descriptor (RFC 8878 3.1.1.1.1): content checksum flag. */
#define ZS_DESC_CHECKSUM 0x04u
/* Block header (RFC 8878 3.1.1.2): its bytes, the last-block bit, an RLE
 * block (one byte stored), the reserved type; content checksum bytes. */
#define ZS_BLOCK_HEADER 3
#define ZS_BLOCK_LAST 1u
#define ZS_BLOCK_RLE 1u
#define ZS_BLOCK_RESERVED 3u
#define ZS_FRAME_CHECKSUM 4
/* Most output of one block (ZSTD_BLOCKSIZE_MAX), which an RLE block
 * makes from ZS_RLE_BLOCK bytes: no frame decodes to more per byte. */
#define ZS_BLOCK_MAX (128u << 10)
#define ZS_RLE_BLOCK 4

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

static void zs_decoder_release(struct seekable_decoder *d)
{
	ZSTD_freeDCtx(d->state);	/* NULL: nothing */
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

/* A damaged frame's output: its header's content size, when it has one,
 * the header is intact and the size is one its compressed bytes (up to
 * the next frame found, or the end) could make: a forged size would make
 * the tar stream end past any sense, or wrap. */
static uint64_t zs_lost_size(void *ctx, uint64_t at, uint64_t found,
			     uint64_t decoded)
{
	struct zs_builder *b = ctx;
	uint64_t end = found > at ? found : b->s->raw->size;
	uint64_t most = ((end - at) / ZS_RLE_BLOCK + 1) * ZS_BLOCK_MAX;
	unsigned char head[ZS_FRAME_HEADER_MAX];
	ssize_t n = b->s->raw->ops->read(b->s->raw, head, sizeof(head), at);
	unsigned long long size = n > 0 ? ZSTD_getFrameContentSize(head, (size_t)n)
					: ZSTD_CONTENTSIZE_ERROR;

	if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR ||
	    size < decoded || size > most)
		return SEEKABLE_LOST_UNKNOWN;
	return size;
}

static const struct seekable_members zs_members = {
	.what = "zstd frame",
	.starts = zs_starts,
	.decode = zs_frame,
	.lost_size = zs_lost_size,
};

/* The seek table ending @b's stream is not used: forget its frames. */
static int zs_table_unused(struct zs_builder *b)
{
	b->t->nr = 0;
	b->t->total = 0;
	return 0;
}

/* The seek table ending @b's stream is wrong at compressed offset @at. */
static int zs_table_wrong(struct zs_builder *b, uint64_t at, const char *why)
{
	log_warn("%s: compressed offset %" PRIu64 ": zstd seek table ignored (%s): "
		 "scanning the frames instead", b->s->name, at, why);
	return zs_table_unused(b);
}

/* Bytes of the header of the frame at @head (magic included), 0 if bad:
 * magic and descriptor, a window byte unless single-segment, then the
 * dictionary ID and content size in the sizes the descriptor gives. */
static size_t zs_header_size(const unsigned char *head, size_t n)
{
	static const unsigned char did[4] = { 0, 1, 2, 4 }, fcs[4] = { 0, 2, 4, 8 };
	unsigned desc, single;

	if (n < 5)
		return 0;
	desc = head[4];
	single = desc >> 5 & 1;
	return 5 + !single + did[desc & 3] + (desc >> 6 ? fcs[desc >> 6] : single);
}

/*
 * Does the frame at compressed offset @at, whose header is @head (@n
 * bytes), end exactly @c bytes later?  Its block headers are walked: a
 * table entry spanning two frames, or part of one, would shift the rest
 * of the stream.  1, 0 (not), or -errno.
 */
static int zs_frame_ends(struct zs_builder *b, uint64_t at, uint32_t c,
			 const unsigned char *head, size_t n)
{
	struct shard_source *raw = b->s->raw;
	uint64_t end = at + c, pos = at + zs_header_size(head, n);
	unsigned char bh[ZS_BLOCK_HEADER];

	if (pos == at)
		return 0;
	for (;;) {
		uint32_t h, type;
		ssize_t got;

		if (pos + ZS_BLOCK_HEADER > end)
			return 0;
		got = raw->ops->read(raw, bh, sizeof(bh), pos);
		if (got < 0)
			return (int)got;
		if (got != sizeof(bh))
			return 0;
		h = bh[0] | bh[1] << 8 | (uint32_t)bh[2] << 16;
		type = h >> 1 & 3;
		if (type == ZS_BLOCK_RESERVED)
			return 0;
		pos += ZS_BLOCK_HEADER + (type == ZS_BLOCK_RLE ? 1 : h >> 3);
		if (h & ZS_BLOCK_LAST)
			break;
	}
	return pos + (head[4] & ZS_DESC_CHECKSUM ? ZS_FRAME_CHECKSUM : 0) == end;
}

/*
 * The table entry at @entry says the frame at compressed offset @at is
 * @c bytes and decodes to @d: the stream's next frame, a point when it
 * starts a member span, if its header says so.  1 if it does, 0 (the
 * table not used, said) if not, or -errno.
 */
static int zs_table_frame(struct zs_builder *b, uint64_t entry, uint64_t at,
			  uint32_t c, uint32_t d)
{
	struct shard_source *raw = b->s->raw;
	unsigned char head[ZS_FRAME_HEADER_MAX];
	unsigned long long size;
	ssize_t n;
	int rc;

	if (c < ZS_FRAME_MIN || d == 0)
		return zs_table_wrong(b, entry, "an entry with no frame");
	n = raw->ops->read(raw, head, c < sizeof(head) ? c : sizeof(head), at);
	if (n < 0)
		return (int)n;
	if (n < 4 || le32(head) != ZSTD_MAGICNUMBER)
		return zs_table_wrong(b, at, "no zstd frame where it says");
	size = ZSTD_getFrameContentSize(head, (size_t)n);
	if (size == ZSTD_CONTENTSIZE_UNKNOWN) {
		log_debug("%s: compressed offset %" PRIu64 ": a zstd frame does not "
			  "state its size: its seek table cannot be checked, the "
			  "frames are scanned instead", b->s->name, at);
		return zs_table_unused(b);
	}
	if (size != d)
		return zs_table_wrong(b, at, "a frame's size is not the table's");
	rc = zs_frame_ends(b, at, c, head, (size_t)n);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return zs_table_wrong(b, at, "a frame's length is not the table's");
	/* frames closer than a member span share a point, as when scanned */
	if ((b->t->nr == 0 || b->t->total - b->t->points[b->t->nr - 1].out >=
	     SEEK_TABLE_MEMBER_SPAN) && seek_builder_add(b->t, SEEK_POINT_MEMBER, at, 0))
		return -ENOMEM;
	b->t->total += d;
	return 1;
}

/*
 * The seek table of the seekable format, when the stream ends with one:
 * 1 with its frames in b->t, 0 when there is none or it is wrong (said,
 * and b->t left empty), or -errno.  Entries are read ZS_BUILD_IN bytes
 * at a time, into b->in.
 */
static int zs_seek_table(struct zs_builder *b)
{
	struct shard_source *raw = b->s->raw;
	uint64_t stored = raw->size, start, at = 0, tlen;
	unsigned char foot[ZS_SEEKABLE_FOOTER], head[ZS_SKIPPABLE_HEADER];
	uint32_t frames;
	size_t esize, chunk;

	if (stored < ZS_SEEKABLE_FOOTER + ZS_SKIPPABLE_HEADER ||
	    raw->ops->read(raw, foot, sizeof(foot), stored - sizeof(foot)) != sizeof(foot) ||
	    le32(foot + 5) != ZS_SEEKABLE_MAGIC)
		return 0;
	frames = le32(foot);
	esize = foot[4] & ZS_SEEKABLE_CHECKSUM ? 12 : 8;
	tlen = (uint64_t)frames * esize + ZS_SEEKABLE_FOOTER;
	if (foot[4] & ZS_SEEKABLE_RESERVED)
		return zs_table_wrong(b, stored - 5, "reserved descriptor bits set");
	if (frames == 0 || frames > ZS_SEEKABLE_MAX_FRAMES ||
	    tlen + ZS_SKIPPABLE_HEADER > stored)
		return zs_table_wrong(b, stored - sizeof(foot), "bad number of frames");
	start = stored - tlen - ZS_SKIPPABLE_HEADER;
	if (raw->ops->read(raw, head, sizeof(head), start) != sizeof(head) ||
	    le32(head) != ZS_SEEKABLE_TABLE_MAGIC || le32(head + 4) != tlen)
		return zs_table_wrong(b, start, "no skippable frame holding it");
	chunk = ZS_BUILD_IN / esize * esize;
	for (uint64_t k = 0; k < frames; k += chunk / esize) {
		uint64_t from = start + ZS_SKIPPABLE_HEADER + k * esize;
		size_t want = (frames - k) * esize < chunk ? (frames - k) * esize : chunk;
		int rc = 0;

		if (raw->ops->read(raw, b->in, want, from) != (ssize_t)want)
			return zs_table_wrong(b, from, "cut short");
		for (size_t e = 0; e < want; e += esize) {
			uint32_t c = le32(b->in + e), d = le32(b->in + e + 4);

			if (c > start - at)
				return zs_table_wrong(b, from + e, "frames past the table");
			rc = zs_table_frame(b, from + e, at, c, d);
			if (rc <= 0)
				return rc;
			at += c;
		}
	}
	if (at != start)
		return zs_table_wrong(b, start, "frame sizes do not add up to it");
	b->t->read = true;
	return 1;
}

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
	else if ((rc = zs_seek_table(&b)) < 0)
		rc = log_format(msg, msg_len, rc, "reading the zstd seek table: %s",
				strerror(-rc));
	else if (rc == 0)
		rc = seekable_build_members(s, t, &zs_members, &b, msg, msg_len);
	else
		rc = 0;
	ZSTD_freeDCtx(b.dctx);
	free(b.in);
	free(b.out);
	return rc;
}

static const struct seekable_codec zs_codec = {
	.name = "zstd",
	.pool = SEEKABLE_POOL_ZSTD,
	.decoder_init = zs_decoder_init,
	.decoder_release = zs_decoder_release,
	.seek = zs_seek,
	.decode = zs_decode,
	.build = zs_build,
};

int shard_source_open_zstd(struct shard_source *raw, const char *name,
			   struct shard_source **src)
{
	return seekable_open(raw, name, &zs_codec, src);
}
