/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seek_table.c - checking and searching a compressed shard's seek table.
 *
 * The check is what makes a table from an index file safe to decode
 * with: every offset the gzip source will feed to zlib or compare with is
 * bounded here, once, at load time.
 */
#include <zlib.h>

#include "shardfs/seek_table.h"

static bool point_ok(const struct seek_table *t, uint64_t i)
{
	const struct seek_point *p = &t->points[i];

	if (p->out >= t->size && !(i == 0 && t->size == 0))
		return false;
	if (i == 0 ? p->out != 0 || p->in != 0 || p->kind == SEEK_POINT_WINDOW
		   : p->out <= p[-1].out || p->in < p[-1].in)
		return false;
	if (p->in > t->stored_size || p->pad)
		return false;
	switch (p->kind) {
	case SEEK_POINT_MEMBER:
	case SEEK_POINT_BAD:
		return p->bits == 0 && p->window == 0 && p->window_len == 0;
	case SEEK_POINT_WINDOW:
		return p->bits < 8 && p->in > 0 && p->window_len > 0 &&
		       p->window_len <= compressBound(SEEK_WINDOW_SIZE) &&
		       p->window <= t->windows_len &&
		       p->window_len <= t->windows_len - p->window;
	default:
		return false;
	}
}

bool seek_table_check(const struct seek_table *t, uint64_t *bad)
{
	if (t->nr == 0 || t->nr > SEEK_TABLE_MAX_POINTS) {
		*bad = 0;
		return false;
	}
	for (uint64_t i = 0; i < t->nr; i++) {
		if (!point_ok(t, i)) {
			*bad = i;
			return false;
		}
	}
	return true;
}

uint64_t seek_table_find(const struct seek_table *t, uint64_t out)
{
	uint64_t lo = 0, hi = t->nr;

	/* invariant: points[lo].out <= out, and points[hi].out > out */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (t->points[mid].out <= out)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
