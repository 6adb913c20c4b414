/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c - queries on a built index.
 *
 * Lookup is a binary search over the parent's contiguous, name-sorted
 * children: no hash table is kept after the build, which is what keeps the
 * index at 64 bytes per entry plus names.  Even in a directory of a
 * million entries that is 20 comparisons of short names.
 *
 * order[] (index.h) is filled by a count of each shard's files, their
 * entries dealt to the shards' ranges in entry order, and a sort of each
 * range by data offset that only runs where the range is out of order:
 * samples listed in the order their shard holds them need none.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shardfs/index.h"
#include "shardfs/index_map.h"

int shard_index_name_cmp(const char *a, size_t alen, const char *b,
			 size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c ? c : (alen > blen) - (alen < blen);
}

int64_t shard_index_lookup(const struct shard_index *idx, uint32_t dir,
			   const char *name, size_t len)
{
	const struct shard_inode *d = &idx->inodes[dir];
	uint64_t lo, hi;

	if (!S_ISDIR(d->mode))
		return -ENOTDIR;
	lo = d->data;
	hi = d->data + d->size;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		const struct shard_inode *c = &idx->inodes[mid];
		int cmp = shard_index_name_cmp(name, len,
					       shard_index_name(idx, c),
					       c->name_len);

		if (cmp == 0)
			return (int64_t)mid;
		if (cmp < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -ENOENT;
}

uint64_t shard_index_ino(const struct shard_index *idx, uint32_t e)
{
	uint64_t lo = 0, hi = idx->nr_hardlinks;

	if (!(idx->inodes[e].flags & SHARD_INODE_LINKED))
		return (uint64_t)e + 1;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (idx->hardlinks[mid].entry < e)
			lo = mid + 1;
		else
			hi = mid;
	}
	assert(lo < idx->nr_hardlinks && idx->hardlinks[lo].entry == e);
	return (uint64_t)idx->hardlinks[lo].first + 1;
}

uint64_t shard_index_data_offset(const struct shard_index *idx,
				 const struct shard_inode *in)
{
	const struct shard_sparse *sp;

	if (!(in->flags & SHARD_INODE_SPARSE))
		return in->data;
	sp = &idx->sparse[in->data];
	return sp->count ? idx->extents[sp->first].physical : 0;
}

ssize_t shard_index_entry_path(const struct shard_index *idx, uint32_t e,
			       char *buf, size_t size)
{
	size_t len = 0;

	/* Walk up to the root writing components from the end backwards. */
	if (size == 0)
		return -ENAMETOOLONG;
	buf[size - 1] = '\0';
	for (uint32_t cur = e; cur != 0; cur = idx->inodes[cur].parent) {
		const struct shard_inode *in = &idx->inodes[cur];
		size_t need = in->name_len + (len ? 1 : 0);

		if (len + need + 1 > size)
			return -ENAMETOOLONG;
		if (len)
			buf[size - 2 - len] = '/';
		len += need;
		memcpy(buf + size - 1 - len, shard_index_name(idx, in),
		       in->name_len);
	}
	memmove(buf, buf + size - 1 - len, len + 1);
	return (ssize_t)len;
}

double shard_index_bytes_per_entry(const struct shard_index *idx)
{
	uint64_t bytes = (uint64_t)idx->nr_inodes * sizeof(*idx->inodes) +
			 idx->names_len +
			 idx->nr_sparse * sizeof(*idx->sparse) +
			 idx->nr_extents * sizeof(*idx->extents) +
			 idx->nr_hardlinks * sizeof(*idx->hardlinks) +
			 idx->nr_order * sizeof(*idx->order);

	return idx->nr_inodes ? (double)bytes / idx->nr_inodes : 0;
}

uint64_t shard_index_order_starts(const struct shard_inode *inodes, uint32_t n,
				  uint32_t nr_shards, uint32_t *starts)
{
	uint64_t at = 0;

	memset(starts, 0, ((size_t)nr_shards + 1) * sizeof(*starts));
	for (uint32_t e = 0; e < n; e++)
		if (shard_index_orderable(&inodes[e], nr_shards))
			starts[inodes[e].shard]++;
	for (uint32_t s = 0; s <= nr_shards; s++) {
		uint32_t count = starts[s];

		starts[s] = (uint32_t)at;
		at += count;
	}
	return at;
}

/* (data offset, entry) of two entries of one shard, for qsort_r(). */
static int by_data(const void *a, const void *b, void *arg)
{
	const struct shard_inode *inodes = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (inodes[x].data != inodes[y].data)
		return inodes[x].data < inodes[y].data ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Whether @n entries at @o are in by_data() order already. */
static bool in_data_order(const struct shard_inode *inodes, const uint32_t *o,
			  uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		if (inodes[o[i - 1]].data > inodes[o[i]].data)
			return false;
	return true;
}

/* Fill @order with the orderable entries of @inodes, @starts from
 * shard_index_order_starts(). */
static int order_fill(const struct shard_inode *inodes, uint32_t n, uint32_t nr_shards,
		      const uint32_t *starts, uint32_t *order)
{
	uint32_t *next = malloc(((size_t)nr_shards + 1) * sizeof(*next));

	if (!next)
		return -ENOMEM;
	memcpy(next, starts, ((size_t)nr_shards + 1) * sizeof(*next));
	for (uint32_t e = 0; e < n; e++)	/* by entry within each shard */
		if (shard_index_orderable(&inodes[e], nr_shards))
			order[next[inodes[e].shard]++] = e;
	for (uint32_t s = 0; s < nr_shards; s++) {
		uint32_t *o = order + starts[s], len = starts[s + 1] - starts[s];

		assert(next[s] == starts[s + 1]);
		if (!in_data_order(inodes, o, len))
			qsort_r(o, len, sizeof(*o), by_data, (void *)inodes);
	}
	free(next);
	return 0;
}

int64_t shard_index_order_compute(const struct shard_inode *inodes, uint32_t n,
				  uint32_t nr_shards, uint32_t *order)
{
	uint32_t *starts = malloc(((size_t)nr_shards + 1) * sizeof(*starts));
	uint64_t count;
	int rc;

	if (!starts)
		return -ENOMEM;
	count = shard_index_order_starts(inodes, n, nr_shards, starts);
	rc = order_fill(inodes, n, nr_shards, starts, order);
	free(starts);
	return rc ? rc : (int64_t)count;
}

int shard_index_order_build(struct shard_index *idx, uint32_t nr_shards)
{
	int64_t count;

	idx->order = malloc(((size_t)idx->nr_inodes + 1) * sizeof(*idx->order));
	if (!idx->order)
		return -ENOMEM;
	count = shard_index_order_compute(idx->inodes, idx->nr_inodes, nr_shards, idx->order);
	if (count < 0)
		return (int)count;
	idx->nr_order = (uint64_t)count;
	return 0;
}

void shard_index_release(struct shard_index *idx)
{
	if (idx->map) {
		index_map_free(idx->map);
		*idx = (struct shard_index){ 0 };
		return;
	}
	free(idx->inodes);
	free(idx->names);
	free(idx->sparse);
	free(idx->extents);
	free(idx->hardlinks);
	free(idx->order);
	*idx = (struct shard_index){ 0 };
}
