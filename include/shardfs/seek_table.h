/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seek_table.h - where decoding of a compressed shard can start.
 *
 * A compressed shard (gzip or zstd) cannot be read at a random offset of
 * its tar stream without decoding from somewhere before it.  Its seek
 * table lists the places decoding can start, about every
 * SEEK_TABLE_SPAN bytes of output, so that a random read decodes at most
 * one span: a gzip member start (decoding needs nothing else), or a
 * deflate block boundary inside a member (decoding needs the 32 KiB of
 * output before it, the window, stored deflate-compressed so that the
 * table stays under 1 % of the compressed size).
 *
 * A range of output whose compressed bytes are damaged is a bad point:
 * reads that touch it fail with EIO, and decoding resumes at the next
 * member.  The table is built by the source in one decoding pass and kept
 * in the persistent index (index_file.h), so that a remount decodes
 * nothing.  seek_table_check() is what the index loader (and its fuzz
 * target) trusts a table from a file with.
 *
 * Thread-safety: a table is immutable once built or loaded.
 */
#ifndef SHARDFS_SEEK_TABLE_H
#define SHARDFS_SEEK_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Output between window points, the most one random read decodes. */
#define SEEK_TABLE_SPAN (4ull << 20)
/*
 * A window point is placed at the first deflate block boundary after
 * SEEK_TABLE_SPAN - SEEK_TABLE_SLACK of output: zlib's blocks hold at most
 * 16 Ki symbols, 512 KiB of output unless the data compresses over 32:1
 * (then a span may be longer, and cheaper to decode per byte).
 */
#define SEEK_TABLE_SLACK (512ull << 10)
/* Output between member points: closer is cheaper, but each costs 32 bytes. */
#define SEEK_TABLE_MEMBER_SPAN (256ull << 10)
/* Bytes of history a window point needs (deflate's window). */
#define SEEK_WINDOW_SIZE (32u * 1024)
/* Most points a table from a file may hold (1 per 64 KiB of 16 TiB). */
#define SEEK_TABLE_MAX_POINTS (1ull << 28)

enum seek_point_kind {
	SEEK_POINT_MEMBER = 1,	/* a gzip member starts at in: no window */
	SEEK_POINT_WINDOW = 2,	/* a deflate block starts at in, bits before */
	SEEK_POINT_BAD = 3,	/* [out, next point's out) cannot be decoded */
};

struct seek_point {
	uint64_t out;		/* offset in the tar stream */
	uint64_t in;		/* offset in the compressed object: of the
				 * member, or of the byte after the block's
				 * first bits, or of the damage (BAD) */
	uint64_t window;	/* WINDOW: offset of its window in the pool */
	uint32_t window_len;	/* WINDOW: compressed bytes of the window */
	uint8_t kind;		/* enum seek_point_kind */
	uint8_t bits;		/* WINDOW: bits of byte in - 1 the block
				 * starts with (0..7) */
	uint16_t pad;		/* zero */
};

/* The seek table of one compressed shard. */
struct seek_table {
	const struct seek_point *points; /* by out, first at out 0 */
	uint64_t nr;			/* entries in points */
	const unsigned char *windows;	/* the pool of compressed windows */
	uint64_t windows_len;		/* bytes in windows */
	uint64_t size;			/* bytes of the tar stream */
	uint64_t stored_size;		/* bytes of the compressed object */
};

/*
 * Is @t consistent: points in increasing out order, the first a member
 * or damage at 0, every out below size, every in within stored_size and
 * not decreasing, kinds and bits valid, windows inside the pool and no
 * longer than a window can deflate to?  Returns true, or false with the index of the bad point
 * in *@bad.
 */
bool seek_table_check(const struct seek_table *t, uint64_t *bad);

/* Index of the last point at or before @out (t->nr > 0). */
uint64_t seek_table_find(const struct seek_table *t, uint64_t out);

/* The end in output of point @i's span: the next point's out, or size. */
static inline uint64_t seek_table_span_end(const struct seek_table *t,
					   uint64_t i)
{
	return i + 1 < t->nr ? t->points[i + 1].out : t->size;
}

#endif
