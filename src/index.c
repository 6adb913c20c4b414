/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c - queries on a built index.
 *
 * Lookup is a binary search over the parent's contiguous, name-sorted
 * children (compact_lookup(): over the first names of their groups of 16,
 * then one group): no hash table is kept after the build, which is what
 * keeps the index at the packed entries' bytes.  Even in a directory of a
 * million entries that is 16 comparisons of short names and one group.
 *
 * An index built in memory is packed here (shard_index_pack()), into the
 * same sections an index file holds, so that a mount serves one form.
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
#include "shardfs/index_guard.h"
#include "shardfs/index_map.h"
#include "shardfs/util.h"

int shard_index_check(const struct shard_index *idx, uint32_t e)
{
	return idx->guard ? index_guard_entry(idx->guard, e) : 0;
}

int shard_index_check_all(const struct shard_index *idx)
{
	return idx->guard ? index_guard_all(idx->guard) : 0;
}

bool shard_index_checked(const struct shard_index *idx, uint32_t e)
{
	return !idx->guard || index_guard_entry_ok(idx->guard, e);
}

int shard_index_dir(const struct shard_index *idx, uint32_t e, struct shard_inode *d)
{
	int rc = shard_index_check(idx, e);

	if (rc)
		return rc;
	shard_index_entry(idx, e, d);
	if (!S_ISDIR(d->mode))
		return -ENOTDIR;
	assert(d->data + d->size <= idx->entries.nr);
	return 0;
}

/* compact_check_fn of a lookup: the block of entry @e. */
static int lookup_check(void *idx, uint32_t e)
{
	return shard_index_check(idx, e);
}

int64_t shard_index_lookup(const struct shard_index *idx, uint32_t dir,
			   const char *name, size_t len)
{
	struct shard_inode d;
	int rc = shard_index_dir(idx, dir, &d);

	if (rc)
		return rc;
	return compact_lookup_checked(&idx->entries, (uint32_t)d.data, (uint32_t)d.size,
				      name, len, idx->guard ? lookup_check : NULL,
				      (void *)idx);
}

uint64_t shard_index_ino(const struct shard_index *idx, uint32_t e)
{
	uint64_t lo = 0, hi = idx->nr_hardlinks;

	assert(shard_index_checked(idx, e));
	if (!(compact_field(&idx->entries, e, COMPACT_FLAGS) & SHARD_INODE_LINKED))
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
	char name[PATH_COMPONENT_MAX + 1];
	size_t len = 0;

	/* Walk up to the root writing components from the end backwards. */
	if (size == 0)
		return -ENAMETOOLONG;
	buf[size - 1] = '\0';
	for (uint32_t cur = e; cur != 0;
	     cur = (uint32_t)compact_field(&idx->entries, cur, COMPACT_PARENT)) {
		int rc = shard_index_check(idx, cur);
		size_t name_len = rc ? 0 : shard_index_name(idx, cur, name);
		size_t need = name_len + (len ? 1 : 0);

		if (rc)
			return rc;
		if (len + need + 1 > size)
			return -ENAMETOOLONG;
		if (len)
			buf[size - 2 - len] = '/';
		len += need;
		memcpy(buf + size - 1 - len, name, name_len);
	}
	memmove(buf, buf + size - 1 - len, len + 1);
	return (ssize_t)len;
}

double shard_index_bytes_per_entry(const struct shard_index *idx)
{
	const struct compact_entries *c = &idx->entries;
	uint64_t bytes = c->entries_len + c->targets_len +
			 ((uint64_t)compact_nr_blocks(c->nr) + 1) * sizeof(*c->blocks) +
			 idx->nr_sparse * sizeof(*idx->sparse) +
			 idx->nr_extents * sizeof(*idx->extents) +
			 idx->nr_hardlinks * sizeof(*idx->hardlinks) +
			 idx->nr_order * sizeof(*idx->order);

	return c->nr ? (double)bytes / c->nr : 0;
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

/* A shard's range of order[] is sorted through copies of its entries'
 * data offsets when it has at most this many entries (16 bytes each, and
 * as much again for qsort()'s merge): a comparison that read the offsets
 * from the entries missed the cache twice, the entries of a shard being
 * spread over every directory (a sixth of a 20 M member build's serial
 * part).  A larger range is sorted in place, by reading the entries. */
#define ORDER_SORT_COPY_MAX (1u << 20)

/* An entry of order[] with its data offset, while its range is sorted. */
struct order_key {
	uint64_t data;		/* the entry's data offset */
	uint32_t entry;		/* the entry */
};

/* (data offset, entry): the order of one shard's range. */
static int key_cmp(const void *pa, const void *pb)
{
	const struct order_key *a = pa, *b = pb;

	if (a->data != b->data)
		return a->data < b->data ? -1 : 1;
	return a->entry < b->entry ? -1 : a->entry > b->entry;
}

/* key_cmp() of two entries named by number, for a range too large to
 * copy. */
static int by_data(const void *a, const void *b, void *arg)
{
	const struct shard_inode *inodes = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	struct order_key kx = { inodes[x].data, x }, ky = { inodes[y].data, y };

	return key_cmp(&kx, &ky);
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

/* Sort the @n entries at @o, in entry order, by data offset and entry,
 * through @keys (room for ORDER_SORT_COPY_MAX) when they fit; a range in
 * that order already is left as it is. */
static void order_sort(const struct shard_inode *inodes, uint32_t *o, uint32_t n,
		       struct order_key *keys)
{
	uint32_t i;

	if (n > ORDER_SORT_COPY_MAX) {
		if (!in_data_order(inodes, o, n))
			qsort_r(o, n, sizeof(*o), by_data, (void *)inodes);
		return;
	}
	for (i = 0; i < n; i++)
		keys[i] = (struct order_key){ inodes[o[i]].data, o[i] };
	for (i = 1; i < n && keys[i - 1].data <= keys[i].data; i++)
		;
	if (i >= n)
		return;
	qsort(keys, n, sizeof(*keys), key_cmp);
	for (i = 0; i < n; i++)
		o[i] = keys[i].entry;
}

/* Fill @order with the orderable entries of @inodes, @starts from
 * shard_index_order_starts(). */
static int order_fill(const struct shard_inode *inodes, uint32_t n, uint32_t nr_shards,
		      const uint32_t *starts, uint32_t *order)
{
	uint32_t *next = malloc(((size_t)nr_shards + 1) * sizeof(*next)), most = 0;
	struct order_key *keys;

	for (uint32_t s = 0; s < nr_shards; s++)
		if (starts[s + 1] - starts[s] > most)
			most = starts[s + 1] - starts[s];
	keys = malloc((most < ORDER_SORT_COPY_MAX ? most + 1 : ORDER_SORT_COPY_MAX) *
		      sizeof(*keys));
	if (!next || !keys) {
		free(keys);
		free(next);
		return -ENOMEM;
	}
	memcpy(next, starts, ((size_t)nr_shards + 1) * sizeof(*next));
	for (uint32_t e = 0; e < n; e++)	/* by entry within each shard */
		if (shard_index_orderable(&inodes[e], nr_shards))
			order[next[inodes[e].shard]++] = e;
	for (uint32_t s = 0; s < nr_shards; s++) {
		assert(next[s] == starts[s + 1]);
		order_sort(inodes, order + starts[s], starts[s + 1] - starts[s], keys);
	}
	free(keys);
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

/* Set idx->order from the @n entries @inodes of @nr_shards shards. */
static int order_build(struct shard_index *idx, const struct shard_inode *inodes, uint32_t n,
		       uint32_t nr_shards)
{
	int64_t count;

	idx->order = malloc(((size_t)n + 1) * sizeof(*idx->order));
	if (!idx->order)
		return -ENOMEM;
	count = shard_index_order_compute(inodes, n, nr_shards, idx->order);
	if (count < 0)
		return (int)count;
	idx->nr_order = (uint64_t)count;
	return 0;
}

int shard_index_encode(struct compact_encoder *enc, const struct shard_inode *inodes,
		       uint32_t n, const char *names)
{
	int rc = 0;

	for (uint32_t e = 0; !rc && e < n; e++)
		rc = compact_encoder_add(enc, &inodes[e], names + inodes[e].name,
					 inodes[e].name_len,
					 S_ISLNK(inodes[e].mode) ? names + inodes[e].data : NULL);
	return rc ?: compact_encoder_finish(enc);
}

/* Where the packed blocks of an index in memory go. */
struct packed {
	uint8_t *bytes;		/* the ENTRIES section so far */
	size_t len;		/* bytes in it */
	size_t cap;		/* room in it */
};

/* compact_emit_fn into a struct packed. */
static int packed_emit(void *arg, const void *block, size_t len)
{
	struct packed *p = arg;
	int rc = array_grow((void **)&p->bytes, &p->cap, p->len + len, 1);

	if (rc)
		return rc;
	memcpy(p->bytes + p->len, block, len);
	p->len += len;
	return 0;
}

int shard_index_pack(struct shard_index *idx, const struct shard_inode *inodes, uint32_t n,
		     const char *names, uint32_t nr_shards)
{
	struct compact_encoder *enc = malloc(sizeof(*enc));
	struct packed p = { 0 };
	int rc = enc ? 0 : -ENOMEM;

	if (!rc) {
		compact_encoder_init(enc, packed_emit, &p);
		rc = shard_index_encode(enc, inodes, n, names);
	}
	if (!rc) {
		idx->entries = (struct compact_entries){
			.entries = p.bytes, .entries_len = p.len, .blocks = enc->blocks,
			.targets = enc->targets, .targets_len = enc->targets_len, .nr = n };
		p.bytes = NULL;
		enc->blocks = NULL;	/* now the index's */
		enc->targets = NULL;
	}
	rc = rc ?: order_build(idx, inodes, n, nr_shards);
	if (enc)
		compact_encoder_release(enc);
	free(enc);
	free(p.bytes);
	return rc;
}

void shard_index_release(struct shard_index *idx)
{
	index_guard_free(idx->guard);
	if (idx->map) {
		index_map_free(idx->map);
		*idx = (struct shard_index){ 0 };
		return;
	}
	/* built in memory (shard_index_pack): the sections are ours */
	free((void *)idx->entries.entries);
	free((void *)idx->entries.blocks);
	free((void *)idx->entries.targets);
	free(idx->sparse);
	free(idx->extents);
	free(idx->hardlinks);
	free(idx->order);
	*idx = (struct shard_index){ 0 };
}
