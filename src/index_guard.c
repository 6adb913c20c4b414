/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_guard.c - lazy checks of an index file's per-member sections
 * (index_guard.h says what is checked when, and why).
 *
 * A block of entries is checked in two steps: the span of BLOCKS that
 * holds its two offsets (where it starts and ends), then the spans of
 * ENTRIES between them.  Its bit in blocks_ok is the fast path: a check
 * of an entry whose block passed tests one bit.  A span
 * that fails stays failed: its bit in spans_bad answers later checks
 * without hashing it again, and makes the message come once; the first
 * also removes the file's record, so that the next mount checks it whole
 * and refuses it (a mount rebuilds it).
 */
#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "shardfs/index_compact.h"
#include "shardfs/index_guard.h"
#include "shardfs/index_verified.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

#define BITS 64u

uint64_t index_guard_span_sum(const char *bytes, uint64_t len, uint64_t k)
{
	uint64_t at = k * INDEX_SUM_SPAN;

	return XXH3_64bits(bytes + at, len - at < INDEX_SUM_SPAN ? len - at : INDEX_SUM_SPAN);
}

int index_guard_new(struct index_guard **out, const char *path,
		    const struct index_guard_section sec[INDEX_NR_GUARDED],
		    const uint64_t *sums, uint32_t nr_blocks)
{
	struct index_guard *g = calloc(1, sizeof(*g));
	uint64_t spans = 0;

	if (!g)
		return -ENOMEM;
	for (int i = 0; i < INDEX_NR_GUARDED; i++) {
		g->sec[i] = sec[i];
		g->sec[i].sums = sums + spans;
		g->sec[i].first_span = spans;
		spans += index_guard_spans(sec[i].length);
	}
	g->nr_blocks = nr_blocks;
	g->blocks_ok = calloc(nr_blocks / BITS + 1, sizeof(*g->blocks_ok));
	g->spans_ok = calloc(spans / BITS + 1, sizeof(*g->spans_ok));
	g->spans_bad = calloc(spans / BITS + 1, sizeof(*g->spans_bad));
	g->path = strdup(path);
	if (!g->blocks_ok || !g->spans_ok || !g->spans_bad || !g->path) {
		index_guard_free(g);
		return -ENOMEM;
	}
	*out = g;
	return 0;
}

void index_guard_free(struct index_guard *g)
{
	if (!g)
		return;
	free(g->blocks_ok);
	free(g->spans_ok);
	free(g->spans_bad);
	free(g->path);
	free(g);
}

/* Check span @k of guarded section @i. */
static int check_span(struct index_guard *g, enum index_guarded i, uint64_t k)
{
	const struct index_guard_section *s = &g->sec[i];
	uint64_t bit = s->first_span + k;

	if (bitmap_test(g->spans_ok, bit))
		return 0;
	if (bitmap_test(g->spans_bad, bit))
		return -EIO;
	if (index_guard_span_sum(s->bytes, s->length, k) == s->sums[k]) {
		bitmap_set(g->spans_ok, bit);
		return 0;
	}
	if (!bitmap_set(g->spans_bad, bit)) {
		uint64_t at = k * INDEX_SUM_SPAN;

		log_error("%s: offset %llu: %llu bytes of the index's %s section changed "
			  "since the file was checked: the lookups and listings that read them "
			  "fail with EIO; the next mount checks the whole file and rebuilds it",
			  g->path, (unsigned long long)(s->offset + at), (unsigned long long)
			  (s->length - at < INDEX_SUM_SPAN ? s->length - at : INDEX_SUM_SPAN),
			  s->name);
		index_verified_forget(g->path);
	}
	return -EIO;
}

/* Check bytes [@from, @to) of guarded section @i. */
static int check_bytes(struct index_guard *g, enum index_guarded i, uint64_t from,
		       uint64_t to)
{
	int rc = 0;

	if (from >= to || to > g->sec[i].length)
		return from == to ? 0 : -EIO;
	for (uint64_t k = from / INDEX_SUM_SPAN; !rc && k <= (to - 1) / INDEX_SUM_SPAN; k++)
		rc = check_span(g, i, k);
	return rc;
}

/* Check block @b: its two offsets in BLOCKS, then its bytes in ENTRIES. */
static int check_block(struct index_guard *g, uint32_t b)
{
	const uint64_t *blocks = (const uint64_t *)g->sec[INDEX_GUARDED_BLOCKS].bytes;
	int rc;

	if (bitmap_test(g->blocks_ok, b))
		return 0;
	rc = check_bytes(g, INDEX_GUARDED_BLOCKS, (uint64_t)b * sizeof(*blocks),
			 ((uint64_t)b + 2) * sizeof(*blocks));
	rc = rc ?: check_bytes(g, INDEX_GUARDED_ENTRIES, le64toh(blocks[b]), le64toh(blocks[b + 1]));
	if (!rc)
		bitmap_set(g->blocks_ok, b);
	return rc;
}

int index_guard_entry(struct index_guard *g, uint32_t e)
{
	uint32_t b = e / COMPACT_BLOCK_ENTRIES;

	return b < g->nr_blocks ? check_block(g, b) : -EIO;
}

bool index_guard_entry_ok(const struct index_guard *g, uint32_t e)
{
	return bitmap_test(g->blocks_ok, e / COMPACT_BLOCK_ENTRIES);
}

int index_guard_all(struct index_guard *g)
{
	int rc = 0;

	for (uint32_t b = 0; !rc && b < g->nr_blocks; b++)
		rc = check_block(g, b);
	return rc ?: check_bytes(g, INDEX_GUARDED_ORDER, 0, g->sec[INDEX_GUARDED_ORDER].length);
}
