/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_compact.c - the packed entries of an index (index_compact.h):
 * the encoder, the check of untrusted blocks and the readers.
 *
 * A field of a record is read with one unaligned little-endian 8-byte load
 * at the byte holding its first bit and a right shift by the bit's place
 * in that byte, which leaves at least 57 of its bits; a field of more
 * bits than are left (only when it is wider than 56) takes the rest from
 * the one byte after the load.  The load starts inside the records, so it
 * reaches at most 7 bytes past them, and the extra byte holds the field's
 * last bits, so it is inside them: the COMPACT_RECORD_SLACK zero bytes
 * keep every read in the block, and let the encoder OR a field in with
 * the same 8-byte load and store.  Widths are never shifted by 64 (width
 * 64 takes the whole word; the extra byte's shift is 1..63).
 *
 * BLOCKS is little-endian like the blocks, so that the three sections are
 * the same bytes on any host.  A name is decoded by copying its suffix
 * after the prefix it shares, so a group decodes into one buffer with no
 * copying of the shared bytes; a lookup reads each group's first name in
 * place, where it is stored whole.
 */
#include <assert.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shardfs/index_compact.h"
#include "shardfs/util.h"

/* Where the parts of a block's header are, from its start. */
#define HDR_NR COMPACT_NR_FIELDS
#define HDR_PAD (HDR_NR + 1)
#define HDR_BASE (HDR_PAD + COMPACT_HEADER_PAD)
#define HDR_GROUP (HDR_BASE + 8 * COMPACT_NR_FIELDS)
/* Bits a field may take. */
#define FIELD_BITS_MAX 64

_Static_assert(HDR_GROUP + 2 * COMPACT_BLOCK_GROUPS == COMPACT_HEADER_BYTES,
	       "the header's parts fill COMPACT_HEADER_BYTES");
_Static_assert(COMPACT_BLOCK_MAX <= UINT16_MAX, "group offsets fit 16 bits");
_Static_assert(PATH_COMPONENT_MAX <= UINT8_MAX, "name lengths fit a byte");
_Static_assert(COMPACT_BLOCK_ENTRIES % COMPACT_GROUP_NAMES == 0,
	       "groups do not straddle blocks");
_Static_assert(COMPACT_BLOCK_ENTRIES <= UINT8_MAX, "a block's nr fits a byte");

static inline uint64_t load_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static inline void store_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t load_le16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static inline void store_le16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

/* Bits that @x takes: 0 for 0, 64 for 2^63 and more. */
static inline unsigned bits_of(uint64_t x)
{
	return x ? FIELD_BITS_MAX - (unsigned)__builtin_clzll(x) : 0;
}

/* The @width-bit field at bit @bit of the records at @area. */
static inline uint64_t read_bits(const uint8_t *area, uint32_t bit, unsigned width)
{
	const uint8_t *p = area + bit / 8;
	unsigned shift = bit % 8;
	uint64_t v;

	assert(width <= FIELD_BITS_MAX);
	if (!width)
		return 0;
	v = load_le64(p) >> shift;
	if (shift + width > FIELD_BITS_MAX)
		v |= (uint64_t)p[8] << (FIELD_BITS_MAX - shift);
	return width == FIELD_BITS_MAX ? v : v & ((UINT64_C(1) << width) - 1);
}

/* OR @v (< 2^@width) into zeroed records at @area, at bit @bit. */
static void put_bits(uint8_t *area, uint32_t bit, unsigned width, uint64_t v)
{
	uint8_t *p = area + bit / 8;
	unsigned shift = bit % 8;

	assert(bits_of(v) <= width);
	if (!width)
		return;
	store_le64(p, load_le64(p) | v << shift);
	if (shift + width > FIELD_BITS_MAX)
		p[8] |= (uint8_t)(v >> (FIELD_BITS_MAX - shift));
}

/* Bytes of @n records of @bits bits, slack included. */
static inline uint32_t record_bytes(uint32_t n, uint32_t bits)
{
	return (n * bits + 7) / 8 + COMPACT_RECORD_SLACK;
}

/*
 * The bits of struct shard_inode's member for each field.  A field is
 * read as that member holds it, whether whole (compact_entry) or alone
 * (compact_field): a block that packs a wider value cannot show the checks
 * one value and a request another.
 */
static const uint64_t field_mask[COMPACT_NR_FIELDS] = {
	[COMPACT_DATA] = UINT64_MAX, [COMPACT_SIZE] = UINT64_MAX,
	[COMPACT_MTIME_SEC] = UINT64_MAX, [COMPACT_MTIME_NSEC] = UINT32_MAX,
	[COMPACT_MODE] = UINT32_MAX, [COMPACT_UID] = UINT32_MAX,
	[COMPACT_GID] = UINT32_MAX, [COMPACT_PARENT] = UINT32_MAX,
	[COMPACT_SHARD] = UINT32_MAX, [COMPACT_NLINK] = UINT32_MAX,
	[COMPACT_FLAGS] = UINT16_MAX,
};

/* @in's fields in enum compact_field order. */
static void fields_of(const struct shard_inode *in, uint64_t *v)
{
	v[COMPACT_DATA] = in->data;
	v[COMPACT_SIZE] = in->size;
	v[COMPACT_MTIME_SEC] = (uint64_t)in->mtime_sec;
	v[COMPACT_MTIME_NSEC] = in->mtime_nsec;
	v[COMPACT_MODE] = in->mode;
	v[COMPACT_UID] = in->uid;
	v[COMPACT_GID] = in->gid;
	v[COMPACT_PARENT] = in->parent;
	v[COMPACT_SHARD] = in->shard;
	v[COMPACT_NLINK] = in->nlink;
	v[COMPACT_FLAGS] = in->flags;
}

/* The entry of fields @v, name and name_len zero. */
static void inode_of(const uint64_t *v, struct shard_inode *out)
{
	*out = (struct shard_inode){
		.data = v[COMPACT_DATA],
		.size = v[COMPACT_SIZE],
		.mtime_sec = (int64_t)v[COMPACT_MTIME_SEC],
		.mtime_nsec = (uint32_t)v[COMPACT_MTIME_NSEC],
		.mode = (uint32_t)v[COMPACT_MODE],
		.uid = (uint32_t)v[COMPACT_UID],
		.gid = (uint32_t)v[COMPACT_GID],
		.parent = (uint32_t)v[COMPACT_PARENT],
		.shard = (uint32_t)v[COMPACT_SHARD],
		.nlink = (uint32_t)v[COMPACT_NLINK],
		.flags = (uint16_t)v[COMPACT_FLAGS],
	};
}

/* The block that holds entry @e. */
static inline const uint8_t *block_of(const struct compact_entries *c, uint32_t e)
{
	uint64_t off = le64toh(c->blocks[e / COMPACT_BLOCK_ENTRIES]);

	assert(e < c->nr);
	assert(off <= c->entries_len && c->entries_len - off >= COMPACT_HEADER_BYTES);
	assert(e % COMPACT_BLOCK_ENTRIES < c->entries[off + HDR_NR]);
	return c->entries + off;
}

/* The coded names of group @g (of all groups: entries 16g..16g+15). */
static inline const uint8_t *group_names(const struct compact_entries *c, uint32_t g)
{
	const uint8_t *blk = block_of(c, g * COMPACT_GROUP_NAMES);
	uint16_t off = load_le16(blk + HDR_GROUP + 2 * (g % COMPACT_BLOCK_GROUPS));

	assert(off >= COMPACT_HEADER_BYTES + COMPACT_RECORD_SLACK);
	return blk + off;
}

/*
 * Decode the name coded at @p into @buf, which holds the name before it
 * (*@len bytes) unless @first; returns where the next name is coded.
 */
static inline const uint8_t *name_next(const uint8_t *p, bool first, char *buf,
				       size_t *len)
{
	size_t shared = first ? 0 : *p++;
	size_t suffix = *p++;

	assert(shared <= *len && shared + suffix <= PATH_COMPONENT_MAX);
	memcpy(buf + shared, p, suffix);
	*len = shared + suffix;
	return p + suffix;
}

/* The first entry of entry @e's group. */
#define GROUP_FIRST(e) ((e) / COMPACT_GROUP_NAMES * COMPACT_GROUP_NAMES)

/* Write the header of the pending entries (group offsets aside) into buf
 * and return the bits of a record. */
static uint32_t pack_header(struct compact_encoder *enc)
{
	uint32_t bits = 0;

	memset(enc->buf, 0, COMPACT_HEADER_BYTES);
	for (int f = 0; f < COMPACT_NR_FIELDS; f++) {
		uint64_t min = UINT64_MAX, max = 0;

		for (uint32_t i = 0; i < enc->nr_pending; i++) {
			min = enc->pending[i][f] < min ? enc->pending[i][f] : min;
			max = enc->pending[i][f] > max ? enc->pending[i][f] : max;
		}
		enc->buf[f] = (uint8_t)bits_of(max - min);
		store_le64(enc->buf + HDR_BASE + 8 * f, min);
		bits += enc->buf[f];
	}
	enc->buf[HDR_NR] = (uint8_t)enc->nr_pending;
	return bits;
}

/* Write the records of the pending entries, @bits each; returns their
 * bytes, slack included. */
static uint32_t pack_records(struct compact_encoder *enc, uint32_t bits)
{
	uint8_t *area = enc->buf + COMPACT_HEADER_BYTES;
	uint32_t len = record_bytes(enc->nr_pending, bits), bit = 0;

	memset(area, 0, len);
	for (uint32_t i = 0; i < enc->nr_pending; i++) {
		for (int f = 0; f < COMPACT_NR_FIELDS; f++) {
			uint64_t base = load_le64(enc->buf + HDR_BASE + 8 * f);

			put_bits(area, bit, enc->buf[f], enc->pending[i][f] - base);
			bit += enc->buf[f];
		}
	}
	return len;
}

/* Bytes that the names @a and @b (@alen, @blen bytes) start with alike. */
static size_t shared_prefix(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t n = 0, max = alen < blen ? alen : blen;

	while (n < max && a[n] == b[n])
		n++;
	return n;
}

/* Write the pending names, front-coded by group, at buf + @pos and their
 * groups' offsets; returns the block's length. */
static size_t pack_names(struct compact_encoder *enc, size_t pos)
{
	uint8_t *buf = enc->buf;

	for (uint32_t g = 0; g < COMPACT_BLOCK_GROUPS; g++) {
		uint32_t first = g * COMPACT_GROUP_NAMES;

		store_le16(buf + HDR_GROUP + 2 * g, (uint16_t)pos);
		for (uint32_t i = first; i < first + COMPACT_GROUP_NAMES &&
		     i < enc->nr_pending; i++) {
			size_t len = enc->name_len[i], shared = 0;

			if (i != first) {
				shared = shared_prefix(enc->names[i - 1], enc->name_len[i - 1],
						       enc->names[i], len);
				buf[pos++] = (uint8_t)shared;
			}
			buf[pos++] = (uint8_t)(len - shared);
			memcpy(buf + pos, enc->names[i] + shared, len - shared);
			pos += len - shared;
		}
	}
	return pos;
}

static size_t pack_block(struct compact_encoder *enc)
{
	uint32_t bits = pack_header(enc);
	size_t len = pack_names(enc, COMPACT_HEADER_BYTES + pack_records(enc, bits));

	assert(len <= COMPACT_BLOCK_MAX);
	return len;
}

/* Room for @need offsets in enc->blocks. */
static int blocks_grow(struct compact_encoder *enc, size_t need)
{
	return array_grow((void **)&enc->blocks, &enc->blocks_alloc, need,
			  sizeof(*enc->blocks));
}

/* Emit the pending entries as a block and record its offset. */
static int emit_block(struct compact_encoder *enc)
{
	uint32_t b = (enc->nr - 1) / COMPACT_BLOCK_ENTRIES;
	size_t len;
	int rc;

	assert(enc->nr_pending);
	rc = blocks_grow(enc, (size_t)b + 1);
	if (rc)
		return rc;
	enc->blocks[b] = htole64(enc->entries_len);
	len = pack_block(enc);
	rc = enc->emit(enc->arg, enc->buf, len);
	if (rc)
		return rc;
	enc->entries_len += len;
	enc->nr_pending = 0;
	return 0;
}

void compact_encoder_init(struct compact_encoder *enc, compact_emit_fn emit, void *arg)
{
	memset(enc, 0, sizeof(*enc));
	enc->emit = emit;
	enc->arg = arg;
}

/* Append @target (@size bytes) and its NUL to TARGETS; its offset in *@off. */
static int add_target(struct compact_encoder *enc, const char *target, uint64_t size,
		      uint64_t *off)
{
	size_t from = enc->targets_len;
	int rc;

	assert(!memchr(target, '\0', size));
	if (size >= SIZE_MAX - enc->targets_len)
		return -E2BIG;
	rc = pool_append(&enc->targets, &enc->targets_len, &enc->targets_alloc, target,
			 (size_t)size);
	if (!rc)
		*off = from;
	return rc;
}

int compact_encoder_add(struct compact_encoder *enc, const struct shard_inode *in,
			const char *name, size_t len, const char *target)
{
	uint64_t *v = enc->pending[enc->nr_pending];
	int rc;

	assert(enc->nr_pending < COMPACT_BLOCK_ENTRIES);	/* no add after an error */
	assert(len <= PATH_COMPONENT_MAX && (len == 0) == (enc->nr == 0));
	assert(!memchr(name, '\0', len));
	assert(!target == !S_ISLNK(in->mode));
	if (enc->nr == SHARD_INDEX_MAX_ENTRIES)
		return -E2BIG;
	fields_of(in, v);
	if (target) {
		rc = add_target(enc, target, in->size, &v[COMPACT_DATA]);
		if (rc)
			return rc;
	}
	memcpy(enc->names[enc->nr_pending], name, len);
	enc->name_len[enc->nr_pending] = (uint8_t)len;
	enc->nr_pending++;
	enc->nr++;
	return enc->nr_pending == COMPACT_BLOCK_ENTRIES ? emit_block(enc) : 0;
}

int compact_encoder_finish(struct compact_encoder *enc)
{
	uint32_t nr_blocks = compact_nr_blocks(enc->nr);
	int rc = enc->nr_pending ? emit_block(enc) : 0;

	rc = rc ?: blocks_grow(enc, (size_t)nr_blocks + 1);
	if (rc)
		return rc;
	enc->blocks[nr_blocks] = htole64(enc->entries_len);
	return 0;
}

void compact_encoder_release(struct compact_encoder *enc)
{
	free(enc->blocks);
	free(enc->targets);
	enc->blocks = NULL;
	enc->targets = NULL;
	enc->blocks_alloc = enc->targets_alloc = 0;
}

uint64_t compact_block_offset(const struct compact_entries *c, uint32_t e)
{
	uint64_t off = le64toh(c->blocks[e / COMPACT_BLOCK_ENTRIES]);

	assert(e < c->nr);
	return off < c->entries_len ? off : 0;
}

/* A block under compact_check(). */
struct block_check {
	const struct compact_entries *c; /* what it is in */
	const uint8_t *blk;	/* its bytes */
	uint64_t len;		/* their length */
	uint32_t first;		/* its first entry */
	uint32_t n;		/* its entries */
	uint32_t *bad;		/* where to report the entry at fault */
	const char **why;	/* and why */
};

/* Report entry @e of @k at fault for @why; returns -EINVAL. */
static int reject(const struct block_check *k, uint32_t e, const char *why)
{
	*k->bad = e;
	*k->why = why;
	return -EINVAL;
}

/* Check the header and records of @k; *@names_at is where its names
 * must start. */
static int check_records(const struct block_check *k, uint32_t *names_at)
{
	uint32_t bits = 0, used, end;

	if (k->blk[HDR_NR] != k->n)
		return reject(k, k->first, "block nr is not its number of entries");
	for (int f = 0; f < COMPACT_NR_FIELDS; f++) {
		if (k->blk[f] > FIELD_BITS_MAX)
			return reject(k, k->first, "field wider than 64 bits");
		bits += k->blk[f];
	}
	for (int i = 0; i < COMPACT_HEADER_PAD; i++)
		if (k->blk[HDR_PAD + i])
			return reject(k, k->first, "block header padding not zero");
	end = COMPACT_HEADER_BYTES + record_bytes(k->n, bits);
	if (end > k->len)
		return reject(k, k->first, "records past the end of the block");
	used = COMPACT_HEADER_BYTES * 8 + k->n * bits;
	if (used % 8 && k->blk[used / 8] >> used % 8)
		return reject(k, k->first, "bits after the records not zero");
	for (uint32_t i = (used + 7) / 8; i < end; i++)
		if (k->blk[i])
			return reject(k, k->first, "slack after the records not zero");
	*names_at = end;
	return 0;
}

/* Check the names of group @g of @k, coded from *@pos; *@pos is then
 * where they end. */
static int check_group(const struct block_check *k, uint32_t g, uint64_t *pos)
{
	uint32_t lead = g * COMPACT_GROUP_NAMES;
	size_t len = 0;

	for (uint32_t i = lead; i < lead + COMPACT_GROUP_NAMES && i < k->n; i++) {
		uint32_t e = k->first + i, coded = i == lead ? 1 : 2;
		size_t shared, suffix;

		if (coded > k->len - *pos)
			return reject(k, e, "name past the end of the block");
		shared = i == lead ? 0 : k->blk[*pos];
		suffix = k->blk[*pos + coded - 1];
		*pos += coded;
		if (shared > len)
			return reject(k, e, "shared prefix longer than the name before");
		if (suffix > k->len - *pos)
			return reject(k, e, "name past the end of the block");
		if (shared + suffix > PATH_COMPONENT_MAX)
			return reject(k, e, "name longer than PATH_COMPONENT_MAX");
		if (!(shared + suffix) != !e)
			return reject(k, e, e ? "empty name" : "root name not empty");
		*pos += suffix;
		len = shared + suffix;
	}
	return 0;
}

/* Check the group offsets and names of @k, which start at @names_at. */
static int check_names(const struct block_check *k, uint32_t names_at)
{
	uint64_t pos = names_at;

	for (uint32_t g = 0; g < COMPACT_BLOCK_GROUPS; g++) {
		uint32_t lead = g * COMPACT_GROUP_NAMES;
		int rc;

		if (load_le16(k->blk + HDR_GROUP + 2 * g) != pos)
			return reject(k, k->first + (lead < k->n ? lead : 0),
				      "group offset not where the group before ends");
		rc = check_group(k, g, &pos);
		if (rc)
			return rc;
	}
	if (pos != k->len)
		return reject(k, k->first, "bytes after the names of the block");
	return 0;
}

/* Check that every link of @k (whose records passed) has its target in
 * TARGETS. */
static int check_targets(const struct block_check *k)
{
	const struct compact_entries *c = k->c;

	for (uint32_t e = k->first; e < k->first + k->n; e++) {
		uint64_t data, size;

		if (!S_ISLNK((uint32_t)compact_field(c, e, COMPACT_MODE)))
			continue;
		data = compact_field(c, e, COMPACT_DATA);
		size = compact_field(c, e, COMPACT_SIZE);
		if (data >= c->targets_len || size >= c->targets_len - data ||
		    c->targets[data + size] || memchr(c->targets + data, '\0', size))
			return reject(k, e, "link target not a string of its size in TARGETS");
	}
	return 0;
}

/* Check block @b, from ENTRIES offset @at to @end. */
static int check_block(const struct compact_entries *c, uint32_t b, uint64_t at,
		       uint64_t end, uint32_t *bad, const char **why)
{
	uint32_t first = b * COMPACT_BLOCK_ENTRIES, names_at;
	struct block_check k = {
		.c = c, .len = end - at, .first = first,
		.n = c->nr - first < COMPACT_BLOCK_ENTRIES ? c->nr - first :
							     COMPACT_BLOCK_ENTRIES,
		.bad = bad, .why = why,
	};

	if (end < at || end - at < COMPACT_HEADER_BYTES)
		return reject(&k, first, "BLOCKS not ascending by a block header at least");
	if (end > c->entries_len)
		return reject(&k, first, "block past the end of ENTRIES");
	k.blk = c->entries + at;
	return check_records(&k, &names_at) ?: check_names(&k, names_at) ?:
	       check_targets(&k);
}

int compact_check(const struct compact_entries *c, uint32_t *bad, const char **why)
{
	uint32_t nr_blocks = compact_nr_blocks(c->nr);
	uint64_t at = le64toh(c->blocks[0]);

	*bad = 0;
	if (at) {
		*why = "BLOCKS does not start at 0";
		return -EINVAL;
	}
	for (uint32_t b = 0; b < nr_blocks; b++) {
		uint64_t end = le64toh(c->blocks[b + 1]);
		int rc = check_block(c, b, at, end, bad, why);

		if (rc)
			return rc;
		at = end;
	}
	if (at != c->entries_len) {
		*bad = nr_blocks ? (nr_blocks - 1) * COMPACT_BLOCK_ENTRIES : 0;
		*why = "BLOCKS does not end at the length of ENTRIES";
		return -EINVAL;
	}
	return 0;
}

/* Entry @e's fields into @v. */
static void decode_fields(const struct compact_entries *c, uint32_t e, uint64_t *v)
{
	const uint8_t *blk = block_of(c, e);
	uint32_t bits = 0, bit;

	for (int f = 0; f < COMPACT_NR_FIELDS; f++)
		bits += blk[f];
	bit = e % COMPACT_BLOCK_ENTRIES * bits;
	for (int f = 0; f < COMPACT_NR_FIELDS; f++) {
		v[f] = load_le64(blk + HDR_BASE + 8 * f) +
		       read_bits(blk + COMPACT_HEADER_BYTES, bit, blk[f]);
		bit += blk[f];
	}
}

void compact_entry(const struct compact_entries *c, uint32_t e, struct shard_inode *out)
{
	uint64_t v[COMPACT_NR_FIELDS];

	decode_fields(c, e, v);
	inode_of(v, out);
}

uint64_t compact_field(const struct compact_entries *c, uint32_t e, enum compact_field f)
{
	const uint8_t *blk = block_of(c, e);
	uint32_t bits = 0, before = 0;

	assert((unsigned)f < COMPACT_NR_FIELDS);
	for (int i = 0; i < COMPACT_NR_FIELDS; i++) {
		before += i < (int)f ? blk[i] : 0;
		bits += blk[i];
	}
	return (load_le64(blk + HDR_BASE + 8 * f) +
		read_bits(blk + COMPACT_HEADER_BYTES,
			  e % COMPACT_BLOCK_ENTRIES * bits + before, blk[f])) & field_mask[f];
}

size_t compact_name(const struct compact_entries *c, uint32_t e, char *buf)
{
	const uint8_t *p = group_names(c, e / COMPACT_GROUP_NAMES);
	size_t len = 0;

	for (uint32_t i = GROUP_FIRST(e); i <= e; i++)
		p = name_next(p, i == GROUP_FIRST(e), buf, &len);
	buf[len] = '\0';
	return len;
}

/*
 * The entry named @name among @first..@last, entries of one group, or
 * -ENOENT: the group is decoded from its first name up to @last at most.
 */
static int64_t group_find(const struct compact_entries *c, uint32_t first, uint32_t last,
			  const char *name, size_t len)
{
	const uint8_t *p = group_names(c, first / COMPACT_GROUP_NAMES);
	char buf[PATH_COMPONENT_MAX];
	size_t buf_len = 0;

	for (uint32_t e = GROUP_FIRST(first); e <= last; e++) {
		int cmp;

		p = name_next(p, e == GROUP_FIRST(first), buf, &buf_len);
		if (e < first)
			continue;
		cmp = shard_index_name_cmp(name, len, buf, buf_len);
		if (cmp <= 0)
			return cmp ? -ENOENT : (int64_t)e;
	}
	return -ENOENT;
}

int64_t compact_lookup(const struct compact_entries *c, uint32_t first, uint32_t count,
		       const char *name, size_t len)
{
	return compact_lookup_checked(c, first, count, name, len, NULL, NULL);
}

int64_t compact_lookup_checked(const struct compact_entries *c, uint32_t first,
			       uint32_t count, const char *name, size_t len,
			       compact_check_fn check, void *arg)
{
	uint32_t last, lo, hi, group_last;
	int rc;

	assert((uint64_t)first + count <= c->nr);
	if (!count)
		return -ENOENT;
	/* the last group after the range's first whose first name is at
	 * most @name, else the range's first group, searched from @first
	 * (its first name may lie before the range) */
	last = first + count - 1;
	lo = first / COMPACT_GROUP_NAMES + 1;
	hi = last / COMPACT_GROUP_NAMES + 1;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const uint8_t *p;

		if (check && (rc = check(arg, mid * COMPACT_GROUP_NAMES)))
			return rc;
		p = group_names(c, mid);
		if (shard_index_name_cmp(name, len, (const char *)p + 1, *p) < 0) {
			hi = mid;
		} else {
			first = mid * COMPACT_GROUP_NAMES;
			lo = mid + 1;
		}
	}
	if (check && (rc = check(arg, first)))
		return rc;
	group_last = GROUP_FIRST(first) + COMPACT_GROUP_NAMES - 1;
	return group_find(c, first, group_last < last ? group_last : last, name, len);
}

void compact_cursor_init(struct compact_cursor *cur, const struct compact_entries *c,
			 uint32_t e)
{
	cur->c = c;
	cur->next = e;
	cur->name_len = 0;
	cur->name[0] = '\0';
	cur->coded = NULL;
	if (e >= c->nr)
		return;
	cur->coded = group_names(c, e / COMPACT_GROUP_NAMES);
	for (uint32_t i = GROUP_FIRST(e); i < e; i++)
		cur->coded = name_next(cur->coded, i == GROUP_FIRST(e), cur->name,
				       &cur->name_len);
	cur->name[cur->name_len] = '\0';
}

bool compact_cursor_next(struct compact_cursor *cur, struct shard_inode *out)
{
	uint32_t e = cur->next;
	bool first = e == GROUP_FIRST(e);

	if (e >= cur->c->nr)
		return false;
	if (first)
		cur->coded = group_names(cur->c, e / COMPACT_GROUP_NAMES);
	cur->coded = name_next(cur->coded, first, cur->name, &cur->name_len);
	cur->name[cur->name_len] = '\0';
	if (out)
		compact_entry(cur->c, e, out);
	cur->next++;
	return true;
}

void compact_sizes(const struct compact_entries *c, struct compact_sizes *out)
{
	*out = (struct compact_sizes){ 0 };
	for (uint32_t b = 0; b < compact_nr_blocks(c->nr); b++) {
		uint64_t at = le64toh(c->blocks[b]), end = le64toh(c->blocks[b + 1]);
		uint16_t names = load_le16(c->entries + at + HDR_GROUP);

		out->headers += COMPACT_HEADER_BYTES;
		out->records += names - COMPACT_HEADER_BYTES;
		out->names += end - at - names;
	}
}
