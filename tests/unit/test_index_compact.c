/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_index_compact.c - the packed entries (index_compact.c): round
 * trips of random entries through the encoder and every reader, names
 * that stress the front coding, lookups over sorted ranges that start
 * and end anywhere in groups and blocks, link targets, and a check that
 * refuses damaged bytes with the entry at fault and never crashes on
 * them (the suite runs under ASan and valgrind; sections are allocated
 * to their exact length so that a read past one is caught).
 *
 * Random data come from a fixed-seed xorshift generator: every run tests
 * the same entries.
 */
#include <endian.h>
#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "shardfs/index.h"
#include "shardfs/index_compact.h"
#include "shardfs/util.h"

/* Widths a field may have: 0..64 bits. */
#define FIELD_WIDTHS 65
/* Damaged copies the check is given in test_check_survives_flipped_bytes. */
#define FLIP_ROUNDS 4000

/* One entry to encode, as the build would give it. */
struct sample {
	struct shard_inode in;	/* its fields (data of a link: ignored) */
	char name[PATH_COMPONENT_MAX + 1]; /* its name */
	size_t len;		/* bytes of name */
	char *target;		/* a link's target, NUL-terminated; or NULL */
};

/* The three sections an encoder made, each allocated to its length. */
struct coded {
	struct compact_entries c; /* what the readers take */
	uint8_t *entries;	/* ENTRIES */
	size_t cap;		/* room in entries while emitted */
	uint64_t *blocks;	/* BLOCKS */
	char *targets;		/* TARGETS */
};

static uint64_t rnd_state;

/* The next number of a fixed xorshift64* sequence. */
static uint64_t rnd(void)
{
	rnd_state ^= rnd_state >> 12;
	rnd_state ^= rnd_state << 25;
	rnd_state ^= rnd_state >> 27;
	return rnd_state * 0x2545f4914f6cdd1dULL;
}

static void rnd_seed(uint64_t seed)
{
	rnd_state = seed | 1;
}

/* compact_emit_fn: append the block to a struct coded's entries. */
static int collect(void *arg, const void *block, size_t len)
{
	struct coded *k = arg;

	assert_int_equal(array_grow((void **)&k->entries, &k->cap,
				    k->c.entries_len + len, 1), 0);
	memcpy(k->entries + k->c.entries_len, block, len);
	k->c.entries_len += len;
	return 0;
}

/* Copy @len bytes at @p into an allocation of exactly that size. */
static void *exact_copy(const void *p, size_t len)
{
	void *q = malloc(len ? len : 1);

	assert_non_null(q);
	return len ? memcpy(q, p, len) : q;
}

/* Encode the @n samples @s into @k. */
static void encode(struct coded *k, const struct sample *s, uint32_t n)
{
	struct compact_encoder *enc = malloc(sizeof(*enc));
	uint8_t *entries;

	assert_non_null(enc);
	memset(k, 0, sizeof(*k));
	compact_encoder_init(enc, collect, k);
	for (uint32_t e = 0; e < n; e++)
		assert_int_equal(compact_encoder_add(enc, &s[e].in, s[e].name, s[e].len,
						     s[e].target), 0);
	assert_int_equal(compact_encoder_finish(enc), 0);
	assert_int_equal(enc->nr, n);
	entries = exact_copy(k->entries, k->c.entries_len);
	free(k->entries);
	k->entries = entries;
	k->blocks = exact_copy(enc->blocks, (compact_nr_blocks(n) + 1) * sizeof(uint64_t));
	k->targets = exact_copy(enc->targets, enc->targets_len);
	k->c.entries = k->entries;
	k->c.blocks = k->blocks;
	k->c.targets = k->targets;
	k->c.targets_len = enc->targets_len;
	k->c.nr = n;
	compact_encoder_release(enc);
	free(enc);
}

static void coded_free(struct coded *k)
{
	free(k->entries);
	free(k->blocks);
	free(k->targets);
}

static void samples_free(struct sample *s, uint32_t n)
{
	for (uint32_t e = 0; e < n; e++)
		free(s[e].target);
	free(s);
}

/* Make sample @s a link to @target. */
static void set_target(struct sample *s, const char *target, size_t len)
{
	s->target = malloc(len + 1);
	assert_non_null(s->target);
	memcpy(s->target, target, len);
	s->target[len] = '\0';
	s->in.mode = S_IFLNK | 0777;
	s->in.size = len;
}

static void set_name(struct sample *s, const char *name, size_t len)
{
	assert_true(len <= PATH_COMPONENT_MAX);
	memcpy(s->name, name, len);
	s->name[len] = '\0';
	s->len = len;
}

/* @n samples, all zero. */
static struct sample *samples_new(uint32_t n)
{
	struct sample *s = calloc(n, sizeof(*s));

	assert_non_null(s);
	return s;
}

/* Entry @e of @k decodes to sample @s in every way it can be read. */
static void expect_entry(const struct coded *k, uint32_t e, const struct sample *s)
{
	struct shard_inode out, want = s->in;
	uint64_t fields[COMPACT_NR_FIELDS];
	char name[PATH_COMPONENT_MAX + 1];

	compact_entry(&k->c, e, &out);
	if (s->target) {
		assert_true(out.data < k->c.targets_len);
		assert_string_equal(k->c.targets + out.data, s->target);
		want.data = out.data;
	}
	want.name = 0;
	want.name_len = 0;
	assert_memory_equal(&out, &want, sizeof(out));
	fields[COMPACT_DATA] = want.data;
	fields[COMPACT_SIZE] = want.size;
	fields[COMPACT_MTIME_SEC] = (uint64_t)want.mtime_sec;
	fields[COMPACT_MTIME_NSEC] = want.mtime_nsec;
	fields[COMPACT_MODE] = want.mode;
	fields[COMPACT_UID] = want.uid;
	fields[COMPACT_GID] = want.gid;
	fields[COMPACT_PARENT] = want.parent;
	fields[COMPACT_SHARD] = want.shard;
	fields[COMPACT_NLINK] = want.nlink;
	fields[COMPACT_FLAGS] = want.flags;
	for (int f = 0; f < COMPACT_NR_FIELDS; f++)
		assert_int_equal(compact_field(&k->c, e, (enum compact_field)f), fields[f]);
	assert_int_equal(compact_name(&k->c, e, name), s->len);
	assert_memory_equal(name, s->name, s->len + 1);
}

/* A cursor from entry @from gives every later sample, names included. */
static void expect_cursor(const struct coded *k, uint32_t from, const struct sample *s)
{
	struct compact_cursor cur;
	struct shard_inode out;
	uint32_t e = from;

	compact_cursor_init(&cur, &k->c, from);
	while (compact_cursor_next(&cur, &out)) {
		struct shard_inode want;

		compact_entry(&k->c, e, &want);
		assert_memory_equal(&out, &want, sizeof(out));
		assert_int_equal(cur.name_len, s[e].len);
		assert_memory_equal(cur.name, s[e].name, s[e].len + 1);
		e++;
	}
	assert_int_equal(e, k->c.nr > from ? k->c.nr : from);
	assert_false(compact_cursor_next(&cur, &out));
}

/* @k passes the check and reads back as the @n samples @s. */
static void expect_round_trip(const struct coded *k, const struct sample *s, uint32_t n)
{
	const char *why = NULL;
	uint32_t bad = 0;

	if (compact_check(&k->c, &bad, &why))
		fail_msg("check of %u entries: entry %u: %s", n, bad, why);
	for (uint32_t e = 0; e < n; e++)
		expect_entry(k, e, &s[e]);
	expect_cursor(k, 0, s);
	for (uint32_t e = 1; e < n; e += 1 + n / 16)
		expect_cursor(k, e, s);
	expect_cursor(k, n, s);
}

/* A random name of 1..PATH_COMPONENT_MAX bytes 0x01..0xff, often
 * sharing a prefix with @prev (@prev_len bytes). */
static size_t random_name(char *name, const char *prev, size_t prev_len)
{
	size_t len = 1 + rnd() % PATH_COMPONENT_MAX;
	size_t shared = rnd() % 2 ? rnd() % (prev_len + 1) : 0;

	shared = shared < len ? shared : len;
	memcpy(name, prev, shared);
	for (size_t i = shared; i < len; i++)
		name[i] = (char)(1 + rnd() % 255);
	return len;
}

/*
 * A random value of a field whose values in a block take @shape: 0 the
 * block's @block_value, 1 small differences from it, 2 any 64 bits, 3
 * the extremes (0 and all ones, as wide as a difference can be).
 */
static uint64_t random_value(int shape, uint64_t block_value)
{
	switch (shape) {
	case 0:
		return block_value;
	case 1:
		return block_value + rnd() % 1000;
	case 2:
		return rnd();
	default:
		return rnd() % 2 ? UINT64_MAX : 0;
	}
}

/* Sample @e of random entries: the shape of each field depends on the
 * block, so that every field is constant in some blocks and 64 bits wide
 * in others. */
static void random_sample(struct sample *s, uint32_t e, const uint64_t *block_values)
{
	uint64_t v[COMPACT_NR_FIELDS];
	uint32_t b = e / COMPACT_BLOCK_ENTRIES;
	static const uint32_t kinds[] = { S_IFREG, S_IFDIR, S_IFLNK };

	for (int f = 0; f < COMPACT_NR_FIELDS; f++)
		v[f] = random_value((int)(b + (uint32_t)f) % 4, block_values[f]);
	s->in = (struct shard_inode){
		.data = v[COMPACT_DATA], .size = v[COMPACT_SIZE],
		.mtime_sec = (int64_t)v[COMPACT_MTIME_SEC],
		.mtime_nsec = (uint32_t)v[COMPACT_MTIME_NSEC],
		.mode = kinds[v[COMPACT_MODE] % 3] | (uint32_t)(v[COMPACT_MODE] & 07777),
		.uid = (uint32_t)v[COMPACT_UID], .gid = (uint32_t)v[COMPACT_GID],
		.parent = (uint32_t)v[COMPACT_PARENT], .shard = (uint32_t)v[COMPACT_SHARD],
		.nlink = (uint32_t)v[COMPACT_NLINK], .flags = (uint16_t)v[COMPACT_FLAGS],
		.name = rnd(), .name_len = (uint16_t)rnd(),	/* ignored */
	};
	if (S_ISLNK(s->in.mode)) {
		char target[300];
		size_t len = rnd() % sizeof(target);

		for (size_t i = 0; i < len; i++)
			target[i] = (char)(1 + rnd() % 255);
		set_target(s, target, len);
	}
}

/* @n random samples; entry 0 the root, named "". */
static struct sample *random_samples(uint32_t n)
{
	struct sample *s = samples_new(n);
	uint64_t block_values[COMPACT_NR_FIELDS];

	for (uint32_t e = 0; e < n; e++) {
		if (e % COMPACT_BLOCK_ENTRIES == 0)
			for (int f = 0; f < COMPACT_NR_FIELDS; f++)
				block_values[f] = rnd() >> (rnd() % 64);
		random_sample(&s[e], e, block_values);
		if (e)
			s[e].len = random_name(s[e].name, s[e - 1].name, s[e - 1].len);
	}
	return s;
}

/* Whether some block of @k has a field @width bits wide. */
static bool has_width(const struct coded *k, unsigned width)
{
	for (uint32_t b = 0; b < compact_nr_blocks(k->c.nr); b++)
		for (int f = 0; f < COMPACT_NR_FIELDS; f++)
			if (k->entries[le64toh(k->blocks[b]) + f] == width)
				return true;
	return false;
}

static void test_random_entries_round_trip(void **state)
{
	static const uint32_t sizes[] = { 1, 2, 16, 17, 63, 64, 65, 128, 1000 };

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		struct coded k, again;
		struct sample *s;

		rnd_seed(i + 1);
		s = random_samples(sizes[i]);
		encode(&k, s, sizes[i]);
		expect_round_trip(&k, s, sizes[i]);
		encode(&again, s, sizes[i]);	/* deterministic */
		assert_int_equal(again.c.entries_len, k.c.entries_len);
		assert_memory_equal(again.entries, k.entries, k.c.entries_len);
		assert_memory_equal(again.blocks, k.blocks,
				    (compact_nr_blocks(sizes[i]) + 1) * sizeof(uint64_t));
		if (sizes[i] == 1000) {
			assert_true(has_width(&k, 0));
			assert_true(has_width(&k, 64));
		}
		coded_free(&again);
		coded_free(&k);
		samples_free(s, sizes[i]);
	}
}

/* Three entries in bytes written out by hand from index_compact.h. */
static void test_format_of_a_block(void **state)
{
	static const uint8_t want[] = {
		10, 3, 0, 0, 15, 0, 0, 0, 0, 2, 0,	/* width: data..flags */
		3, 0, 0, 0, 0,				/* nr, pad */
		0, 0, 0, 0, 0, 0, 0, 0,			/* base: data */
		1, 0, 0, 0, 0, 0, 0, 0,			/* size */
		100, 0, 0, 0, 0, 0, 0, 0,		/* mtime_sec */
		0, 0, 0, 0, 0, 0, 0, 0,			/* mtime_nsec */
		0xed, 0x41, 0, 0, 0, 0, 0, 0,		/* mode 040755 */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* uid, gid */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* parent, shard */
		1, 0, 0, 0, 0, 0, 0, 0,			/* nlink */
		0, 0, 0, 0, 0, 0, 0, 0,			/* flags */
		132, 0, 141, 0, 141, 0, 141, 0,		/* group offsets */
		/* 30-bit records (data - 0, size - 1, mode - 040755, nlink - 1):
		 * (1, 1, 0, 2), (512, 4, 0x3fb7, 0), (0, 0, 0x6012, 0) */
		0x01, 0x04, 0x00, 0x20, 0x80, 0xbc, 0xfd, 0x01, 0x00, 0x24, 0xc0, 0x00,
		0, 0, 0, 0, 0, 0, 0, 0,			/* slack */
		0,					/* "" */
		0, 3, 'a', 'b', 'c',			/* "abc" */
		3, 1, 'd',				/* "abcd" */
	};
	struct sample *s = samples_new(3);
	struct coded k;

	s[0].in = (struct shard_inode){ .mode = S_IFDIR | 0755, .data = 1, .size = 2,
					.mtime_sec = 100, .nlink = 3 };
	s[1].in = (struct shard_inode){ .mode = S_IFREG | 0644, .data = 512, .size = 5,
					.mtime_sec = 100, .nlink = 1 };
	s[2].in = (struct shard_inode){ .mtime_sec = 100, .nlink = 1 };
	set_name(&s[1], "abc", 3);
	set_name(&s[2], "abcd", 4);
	set_target(&s[2], "t", 1);
	encode(&k, s, 3);
	assert_int_equal(k.c.entries_len, sizeof(want));
	assert_memory_equal(k.entries, want, sizeof(want));
	assert_int_equal(le64toh(k.blocks[0]), 0);
	assert_int_equal(le64toh(k.blocks[1]), sizeof(want));
	assert_int_equal(k.c.targets_len, 2);
	assert_memory_equal(k.targets, "t", 2);
	expect_round_trip(&k, s, 3);
	coded_free(&k);
	samples_free(s, 3);
}

/*
 * Block w holds data values from 2^64 - 2^w on (0 for w = 64) up to all
 * ones, so that its data field is exactly w bits wide, after a size field
 * whose width moves the data's first bit to every place in a byte.
 */
static void test_every_width(void **state)
{
	uint32_t n = (FIELD_WIDTHS) * COMPACT_BLOCK_ENTRIES;
	struct sample *s = samples_new(n);
	struct coded k;

	rnd_seed(7);
	for (uint32_t e = 0; e < n; e++) {
		uint32_t w = e / COMPACT_BLOCK_ENTRIES, i = e % COMPACT_BLOCK_ENTRIES;
		uint64_t span = w == 64 ? UINT64_MAX : (UINT64_C(1) << w) - 1;

		s[e].in = (struct shard_inode){
			.mode = S_IFREG | 0644,
			.data = UINT64_MAX - (i == 0 ? span : i == 1 ? 0 : rnd() & span),
			.size = i < 2 ? (UINT64_C(1) << w % 8) - 1 : 0,
		};
		if (e)
			set_name(&s[e], "w", 1);
	}
	encode(&k, s, n);
	expect_round_trip(&k, s, n);
	for (uint32_t w = 0; w < FIELD_WIDTHS; w++) {
		const uint8_t *blk = k.entries + le64toh(k.blocks[w]);

		assert_int_equal(blk[COMPACT_DATA], w);
		assert_int_equal(blk[COMPACT_SIZE], w % 8);
	}
	coded_free(&k);
	samples_free(s, n);
}

static void test_awkward_names(void **state)
{
	char max_x[PATH_COMPONENT_MAX], max_high[PATH_COMPONENT_MAX], all_bytes[255];
	const struct {
		const char *name;
		size_t len;
	} names[] = {
		{ "", 0 },				/* the root */
		{ "a", 1 }, { "b", 1 }, { "b", 1 },	/* shares none, then all */
		{ max_x, sizeof(max_x) },		/* 255 bytes */
		{ max_x, sizeof(max_x) },		/* shares all 255 */
		{ max_x, sizeof(max_x) - 1 },		/* a prefix of the one before */
		{ max_x, 1 },				/* ... down to one byte */
		{ max_high, sizeof(max_high) },		/* shares none, 0xff bytes */
		{ all_bytes, sizeof(all_bytes) },	/* 0x01..0xff */
		{ all_bytes, 128 }, { all_bytes + 127, 128 },
		{ "\x01", 1 }, { "\xff", 1 }, { "\xff\x01", 2 }, { "\xff", 1 },
		{ "x", 1 },				/* entry 16: a group's first */
		{ "xy", 2 }, { "x", 1 }, { "xyz", 3 }, { "w", 1 },
		{ max_high, 200 }, { max_high, 255 }, { max_high, 100 },
		{ all_bytes + 254, 1 },
	};
	uint32_t n = 3 * COMPACT_BLOCK_ENTRIES - 5;
	struct sample *s = samples_new(n);
	struct coded k;

	memset(max_x, 'x', sizeof(max_x));
	memset(max_high, 0xff, sizeof(max_high));
	for (size_t i = 0; i < sizeof(all_bytes); i++)
		all_bytes[i] = (char)(i + 1);
	/* the table again at every offset in a group and across blocks */
	for (uint32_t e = 0; e < n; e++) {
		size_t i = e < ARRAY_SIZE(names) ? e : 1 + (e * 7) % (ARRAY_SIZE(names) - 1);

		set_name(&s[e], names[i].name, names[i].len);
		s[e].in = (struct shard_inode){ .mode = S_IFREG | 0644, .data = e };
	}
	encode(&k, s, n);
	expect_round_trip(&k, s, n);
	coded_free(&k);
	samples_free(s, n);
}

/* qsort() and lfind() order of samples: shard_index_name_cmp(). */
static int by_name(const void *a, const void *b)
{
	const struct sample *x = a, *y = b;

	return shard_index_name_cmp(x->name, x->len, y->name, y->len);
}

/* @n samples of distinct names of 1..6 bytes of "a", "b" and 0xff,
 * sorted, so that many are prefixes of the next. */
static struct sample *sorted_names(uint32_t n)
{
	struct sample *s = samples_new(n);

	for (uint32_t e = 0; e < n; e++) {
		char name[6];
		size_t len;

		do {
			len = 1 + rnd() % sizeof(name);
			for (size_t i = 0; i < len; i++)
				name[i] = "ab\xff"[rnd() % 3];
			set_name(&s[e], name, len);
		} while (lfind(&s[e], s, &(size_t){ e }, sizeof(*s), by_name));
	}
	qsort(s, n, sizeof(*s), by_name);
	return s;
}

/* Entries in the lookup test's sorted range (entries 1..RANGE): three
 * blocks and a part. */
#define RANGE 200

/* What compact_lookup_checked() asked to check: a bit per block. */
struct asked {
	uint64_t blocks;	/* blocks asked for (RANGE takes four) */
	int64_t fail;		/* the block whose check fails; -1: none */
};

static int ask_block(void *arg, uint32_t e)
{
	struct asked *a = arg;

	if (e / COMPACT_BLOCK_ENTRIES == a->fail)
		return -EIO;
	a->blocks |= 1ull << (e / COMPACT_BLOCK_ENTRIES);
	return 0;
}

/*
 * compact_lookup of @q over [@first, @first + @count) is @want when in
 * that range, -ENOENT otherwise; checked, it asks for the found entry's
 * block, and a failing check of that block fails the lookup.
 */
static void expect_lookup(const struct coded *k, uint32_t first, uint32_t count,
			  const struct sample *q, int64_t want)
{
	struct asked a = { 0, -1 };
	int64_t got = compact_lookup(&k->c, first, count, q->name, q->len);

	if (want < first || want >= (int64_t)first + count)
		want = -ENOENT;
	if (got != want)
		fail_msg("lookup of \"%s\" in [%u, %u): %lld, not %lld", q->name, first,
			 first + count, (long long)got, (long long)want);
	assert_int_equal(compact_lookup_checked(&k->c, first, count, q->name, q->len,
						ask_block, &a), got);
	if (got < 0)
		return;
	assert_true(a.blocks & (1ull << (got / COMPACT_BLOCK_ENTRIES)));
	a = (struct asked){ 0, got / COMPACT_BLOCK_ENTRIES };
	assert_int_equal(compact_lookup_checked(&k->c, first, count, q->name, q->len,
						ask_block, &a), -EIO);
}

static void test_lookup_in_sorted_ranges(void **state)
{
	/* where ranges start and end: group and block edges and their
	 * neighbours, and the range's own ends */
	static const uint32_t edges[] = {
		1, 2, 14, 15, 16, 17, 31, 33, 47, 48, 63, 64, 65, 79, 80,
		112, 127, 128, 129, 144, 191, 192, 193, 199, 200, RANGE + 1,
	};
	/* names at odd places are the entries, at even places misses
	 * before, between and after them */
	struct sample *all, *s = samples_new(RANGE + 1);
	struct coded k;

	rnd_seed(42);
	all = sorted_names(2 * RANGE + 1);
	s[0].in.mode = S_IFDIR | 0755;
	for (uint32_t e = 1; e <= RANGE; e++) {
		set_name(&s[e], all[2 * e - 1].name, all[2 * e - 1].len);
		s[e].in = (struct shard_inode){ .mode = S_IFREG | 0644, .data = e };
	}
	encode(&k, s, RANGE + 1);
	expect_round_trip(&k, s, RANGE + 1);
	for (size_t i = 0; i < ARRAY_SIZE(edges); i++) {
		for (size_t j = i; j < ARRAY_SIZE(edges); j++) {
			uint32_t first = edges[i], count = edges[j] - edges[i];

			for (uint32_t q = 0; q < 2 * RANGE + 1; q++)
				expect_lookup(&k, first, count, &all[q],
					      q % 2 ? (int64_t)(q + 1) / 2 : -ENOENT);
		}
	}
	expect_lookup(&k, 0, 1, &s[0], 0);	/* the root, named "" */
	coded_free(&k);
	samples_free(s, RANGE + 1);
	samples_free(all, 2 * RANGE + 1);
}

static void test_link_targets(void **state)
{
	static char long_target[4096];
	static const char *const targets[] = {
		"", "a", "../x/y", "target with spaces", "\x01\xff", long_target,
	};
	uint32_t n = 2 * COMPACT_BLOCK_ENTRIES + 3;
	struct sample *s = samples_new(n);
	struct coded k;

	memset(long_target, 'L', sizeof(long_target) - 1);
	for (uint32_t e = 0; e < n; e++) {
		s[e].in = (struct shard_inode){ .mode = S_IFREG | 0644, .data = 1000 + e,
						.size = e };
		if (e)
			set_name(&s[e], "n", 1);
		if (e % 3 == 1)
			set_target(&s[e], targets[e % ARRAY_SIZE(targets)],
				   strlen(targets[e % ARRAY_SIZE(targets)]));
	}
	encode(&k, s, n);
	expect_round_trip(&k, s, n);
	coded_free(&k);
	samples_free(s, n);
}

/*
 * A block whose bytes hold a value wider than its field's member (a base
 * past 32 bits for a 32-bit field) passes the check of the bytes; whole or
 * alone, the field reads as the member holds it, so that what the load's
 * checks see is what a request reads.
 */
static void test_a_wider_value_reads_as_its_member(void **state)
{
	enum {	/* where the bases are in a block's header */
		BASES = COMPACT_NR_FIELDS + 1 + COMPACT_HEADER_PAD,
		SHARD_BASE = BASES + 8 * COMPACT_SHARD,
		FLAGS_BASE = BASES + 8 * COMPACT_FLAGS,
	};
	struct sample *s = samples_new(3);
	struct shard_inode in;
	const char *why;
	struct coded k;
	uint64_t base;
	uint32_t bad;

	(void)state;
	for (uint32_t e = 0; e < 3; e++) {
		s[e].in = (struct shard_inode){ .mode = S_IFREG | 0644, .shard = 7,
						.flags = SHARD_INODE_SPARSE };
		if (e)
			set_name(&s[e], e == 1 ? "a" : "b", 1);
	}
	encode(&k, s, 3);
	memcpy(&base, k.entries + SHARD_BASE, sizeof(base));
	base = htole64(le64toh(base) + (UINT64_C(1) << 32));
	memcpy(k.entries + SHARD_BASE, &base, sizeof(base));
	memcpy(&base, k.entries + FLAGS_BASE, sizeof(base));
	base = htole64(le64toh(base) + (UINT64_C(1) << 16));
	memcpy(k.entries + FLAGS_BASE, &base, sizeof(base));
	assert_int_equal(compact_check(&k.c, &bad, &why), 0);
	for (uint32_t e = 0; e < 3; e++) {
		compact_entry(&k.c, e, &in);
		assert_int_equal(in.shard, 7);
		assert_int_equal(compact_field(&k.c, e, COMPACT_SHARD), 7);
		assert_int_equal(in.flags, SHARD_INODE_SPARSE);
		assert_int_equal(compact_field(&k.c, e, COMPACT_FLAGS), SHARD_INODE_SPARSE);
	}
	coded_free(&k);
	samples_free(s, 3);
}

static int emit_fails(void *arg, const void *block, size_t len)
{
	return -EIO;
}

static void test_emit_error_ends_the_encoding(void **state)
{
	struct compact_encoder *enc = malloc(sizeof(*enc));
	struct shard_inode in = { .mode = S_IFREG | 0644 };

	assert_non_null(enc);
	compact_encoder_init(enc, emit_fails, NULL);
	assert_int_equal(compact_encoder_add(enc, &in, "", 0, NULL), 0);
	for (uint32_t e = 1; e < COMPACT_BLOCK_ENTRIES - 1; e++)
		assert_int_equal(compact_encoder_add(enc, &in, "x", 1, NULL), 0);
	assert_int_equal(compact_encoder_add(enc, &in, "x", 1, NULL), -EIO);
	compact_encoder_release(enc);
	compact_encoder_init(enc, emit_fails, NULL);
	assert_int_equal(compact_encoder_add(enc, &in, "", 0, NULL), 0);
	assert_int_equal(compact_encoder_finish(enc), -EIO);
	compact_encoder_release(enc);
	free(enc);
}

/* ---- the check: a valid encoding, damaged one way at a time --------- */

/* Entries of the encoding the damage cases start from: three blocks. */
#define DAMAGED_NR (2 * COMPACT_BLOCK_ENTRIES + 2)
/* Its links, the last one its last entry. */
static const uint32_t damaged_links[] = { 5, 70, DAMAGED_NR - 1 };

/* The samples the damage cases encode: names of 250 bytes that differ in
 * their last in group 1 of block 0, links at damaged_links[]. */
static struct sample *damage_samples(void)
{
	struct sample *s = samples_new(DAMAGED_NR);
	char name[PATH_COMPONENT_MAX];

	for (uint32_t e = 0; e < DAMAGED_NR; e++) {
		bool long_name = e >= 16 && e < 32;
		size_t len = long_name ? 250 : 1 + e % 9;

		memset(name, 'q', sizeof(name));
		name[long_name ? len - 1 : 0] = (char)('a' + e % 26);
		s[e].in = (struct shard_inode){ .mode = S_IFREG | 0644, .data = e * 512,
						.size = e, .mtime_sec = -(int64_t)e };
		if (e)
			set_name(&s[e], name, len);
	}
	for (size_t i = 0; i < ARRAY_SIZE(damaged_links); i++)
		set_target(&s[damaged_links[i]], "some/target", 11);
	return s;
}

/* A copy of a valid encoding for one case to damage; entries has a spare
 * zero byte after its length. */
struct damaged {
	struct compact_entries c; /* given to the check */
	uint8_t *entries;	/* ENTRIES, writable */
	uint64_t *blocks;	/* BLOCKS, writable */
	char *targets;		/* TARGETS, writable */
};

/* Block @b of @d. */
static uint8_t *block(struct damaged *d, uint32_t b)
{
	return d->entries + le64toh(d->blocks[b]);
}

/* Offset of group @g of block @b of @d from the block's start. */
static uint16_t group_offset(struct damaged *d, uint32_t b, uint32_t g)
{
	uint16_t off;

	memcpy(&off, block(d, b) + COMPACT_HEADER_BYTES - 2 * (COMPACT_BLOCK_GROUPS - g),
	       sizeof(off));
	return le16toh(off);
}

static void set_group_offset(struct damaged *d, uint32_t b, uint32_t g, uint16_t off)
{
	off = htole16(off);
	memcpy(block(d, b) + COMPACT_HEADER_BYTES - 2 * (COMPACT_BLOCK_GROUPS - g), &off,
	       sizeof(off));
}

/* The field of entry @e of @d. */
static uint64_t field(struct damaged *d, uint32_t e, enum compact_field f)
{
	return compact_field(&d->c, e, f);
}

static void truncate_entries(struct damaged *d)
{
	d->c.entries_len--;
}

static void truncate_entries_and_blocks(struct damaged *d)
{
	uint64_t *last = &d->blocks[compact_nr_blocks(DAMAGED_NR)];

	d->c.entries_len--;
	*last = htole64(le64toh(*last) - 1);
}

/* Block 2 cut after the shared byte of entry 129's name. */
static void name_coding_cut(struct damaged *d)
{
	uint64_t *last = &d->blocks[compact_nr_blocks(DAMAGED_NR)];
	uint64_t end = le64toh(d->blocks[2]) + group_offset(d, 2, 0) + 1 + 3 + 1;

	assert_int_equal(block(d, 2)[group_offset(d, 2, 0)], 3);	/* entry 128 */
	d->c.entries_len = end;
	*last = htole64(end);
}

static void extend_entries(struct damaged *d)
{
	d->c.entries_len++;
}

static void extend_entries_and_blocks(struct damaged *d)
{
	uint64_t *last = &d->blocks[compact_nr_blocks(DAMAGED_NR)];

	d->c.entries_len++;
	*last = htole64(le64toh(*last) + 1);
}

static void blocks_not_from_zero(struct damaged *d)
{
	d->blocks[0] = htole64(1);
}

static void blocks_descending(struct damaged *d)
{
	d->blocks[2] = htole64(le64toh(d->blocks[1]) - 1);
}

static void block_shorter_than_header(struct damaged *d)
{
	d->blocks[2] = htole64(le64toh(d->blocks[1]) + COMPACT_HEADER_BYTES - 1);
}

static void width_65(struct damaged *d)
{
	block(d, 1)[COMPACT_SIZE] = 65;
}

static void wrong_nr(struct damaged *d)
{
	block(d, 0)[COMPACT_NR_FIELDS] = COMPACT_BLOCK_ENTRIES - 1;
}

static void last_nr_full(struct damaged *d)
{
	block(d, 2)[COMPACT_NR_FIELDS] = COMPACT_BLOCK_ENTRIES;
}

/* The first bit after the records of block 2 (2 entries) set. */
static void bits_after_records(struct damaged *d)
{
	uint8_t *blk = block(d, 2);
	uint32_t used = 0;

	for (int f = 0; f < COMPACT_NR_FIELDS; f++)
		used += 2 * blk[f];
	assert_int_not_equal(used % 8, 0);	/* or no bits are left */
	blk[COMPACT_HEADER_BYTES + used / 8] |= (uint8_t)(1u << used % 8);
}

static void pad_not_zero(struct damaged *d)
{
	block(d, 1)[COMPACT_NR_FIELDS + 1 + COMPACT_HEADER_PAD - 1] = 1;
}

static void slack_not_zero(struct damaged *d)
{
	block(d, 0)[group_offset(d, 0, 0) - 1] = 1;
}

static void group_offsets_out_of_order(struct damaged *d)
{
	set_group_offset(d, 0, 1, group_offset(d, 0, 0));
}

static void group_offset_past_the_block(struct damaged *d)
{
	set_group_offset(d, 0, 3, (uint16_t)(le64toh(d->blocks[1]) + 1));
}

static void empty_group_not_at_the_end(struct damaged *d)
{
	set_group_offset(d, 2, 2, group_offset(d, 2, 0));
}

/* Entry 1's shared byte (the root before it is empty) made 1. */
static void shared_longer_than_before(struct damaged *d)
{
	block(d, 0)[group_offset(d, 0, 0) + 1] = 1;
}

/* Entry 16, a group's first name, made empty. */
static void empty_name(struct damaged *d)
{
	block(d, 0)[group_offset(d, 0, 1)] = 0;
}

static void root_name_not_empty(struct damaged *d)
{
	block(d, 0)[group_offset(d, 0, 0)] = 1;
}

/* Entry 17 (after a 250-byte name, sharing 249 bytes with it) made 256
 * bytes long. */
static void name_too_long(struct damaged *d)
{
	uint8_t *p = block(d, 0) + group_offset(d, 0, 1);

	p += 1 + 250;		/* entry 16 */
	assert_int_equal(p[0], 249);
	p[1] = 7;
}

static void target_without_nul(struct damaged *d)
{
	d->targets[field(d, 70, COMPACT_DATA) + 11] = 'x';
}

static void target_with_nul(struct damaged *d)
{
	d->targets[field(d, 5, COMPACT_DATA) + 3] = '\0';
}

static void target_out_of_targets(struct damaged *d)
{
	d->c.targets_len--;
}

static void test_check_refuses_damage(void **state)
{
	static const struct {
		void (*damage)(struct damaged *d);
		uint32_t bad;		/* the entry reported */
		const char *why;	/* in the reason given */
	} cases[] = {
		{ truncate_entries, 128, "past the end of ENTRIES" },
		{ truncate_entries_and_blocks, 129, "past the end of the block" },
		{ name_coding_cut, 129, "name past the end of the block" },
		{ extend_entries, 128, "does not end at the length of ENTRIES" },
		{ extend_entries_and_blocks, 128, "bytes after the names" },
		{ blocks_not_from_zero, 0, "does not start at 0" },
		{ blocks_descending, 64, "not ascending" },
		{ block_shorter_than_header, 64, "not ascending" },
		{ width_65, 64, "wider than 64" },
		{ wrong_nr, 0, "nr" },
		{ last_nr_full, 128, "nr" },
		{ pad_not_zero, 64, "padding" },
		{ slack_not_zero, 0, "slack" },
		{ bits_after_records, 128, "bits after the records" },
		{ group_offsets_out_of_order, 16, "group offset" },
		{ group_offset_past_the_block, 48, "group offset" },
		{ empty_group_not_at_the_end, 128, "group offset" },
		{ shared_longer_than_before, 1, "shared prefix longer" },
		{ empty_name, 16, "empty name" },
		{ root_name_not_empty, 0, "root name" },
		{ name_too_long, 17, "longer than PATH_COMPONENT_MAX" },
		{ target_without_nul, 70, "link target" },
		{ target_with_nul, 5, "link target" },
		{ target_out_of_targets, DAMAGED_NR - 1, "link target" },
	};
	struct sample *s = damage_samples();
	struct coded k;

	encode(&k, s, DAMAGED_NR);
	expect_round_trip(&k, s, DAMAGED_NR);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		size_t blocks_len = (compact_nr_blocks(DAMAGED_NR) + 1) * sizeof(uint64_t);
		struct damaged d = {
			.entries = calloc(k.c.entries_len + 1, 1),
			.blocks = exact_copy(k.blocks, blocks_len),
			.targets = exact_copy(k.targets, k.c.targets_len),
		};
		const char *why = NULL;
		uint32_t bad = UINT32_MAX;

		assert_non_null(d.entries);
		memcpy(d.entries, k.entries, k.c.entries_len);
		d.c = k.c;
		d.c.entries = d.entries;
		d.c.blocks = d.blocks;
		d.c.targets = d.targets;
		cases[i].damage(&d);
		assert_int_equal(compact_check(&d.c, &bad, &why), -EINVAL);
		assert_non_null(why);
		if (bad != cases[i].bad || !strstr(why, cases[i].why))
			fail_msg("case %zu: entry %u, \"%s\"; wanted %u, \"%s\"", i, bad, why,
				 cases[i].bad, cases[i].why);
		free(d.entries);
		free(d.blocks);
		free(d.targets);
	}
	coded_free(&k);
	samples_free(s, DAMAGED_NR);
}

/* Read all of @c, which passed the check, every way there is. */
static void read_all(const struct compact_entries *c)
{
	char name[PATH_COMPONENT_MAX + 1];
	struct compact_cursor cur;
	struct shard_inode in;

	compact_cursor_init(&cur, c, 0);
	while (compact_cursor_next(&cur, &in)) {
		uint32_t e = cur.next - 1;
		int64_t found;

		assert_int_equal(compact_name(c, e, name), cur.name_len);
		assert_memory_equal(name, cur.name, cur.name_len + 1);
		if (S_ISLNK(in.mode))
			assert_int_equal(strlen(c->targets + in.data), in.size);
		/* the entries are not sorted: any answer but one of another
		 * name, or out of the range */
		found = compact_lookup(c, 0, c->nr, name, cur.name_len);
		if (found >= 0) {
			assert_true(found < c->nr);
			assert_int_equal(compact_name(c, (uint32_t)found, name), cur.name_len);
			assert_memory_equal(name, cur.name, cur.name_len);
		} else {
			assert_int_equal(found, -ENOENT);
		}
	}
}

static void test_check_survives_flipped_bytes(void **state)
{
	size_t blocks_len = (compact_nr_blocks(DAMAGED_NR) + 1) * sizeof(uint64_t);
	struct sample *s = damage_samples();
	unsigned passed = 0;
	struct coded k;

	encode(&k, s, DAMAGED_NR);
	rnd_seed(99);
	for (unsigned round = 0; round < FLIP_ROUNDS; round++) {
		struct damaged d = {
			.entries = exact_copy(k.entries, k.c.entries_len),
			.blocks = exact_copy(k.blocks, blocks_len),
			.targets = exact_copy(k.targets, k.c.targets_len),
		};
		const char *why;
		uint32_t bad;

		d.c = k.c;
		d.c.entries = d.entries;
		d.c.blocks = d.blocks;
		d.c.targets = d.targets;
		for (uint64_t flips = 1 + rnd() % 3; flips; flips--) {
			uint64_t where = rnd() % 16;
			uint8_t bit = (uint8_t)(1u << rnd() % 8);

			if (where == 0)
				((uint8_t *)d.blocks)[rnd() % blocks_len] ^= bit;
			else if (where == 1)
				d.targets[rnd() % k.c.targets_len] ^= (char)bit;
			else
				d.entries[rnd() % k.c.entries_len] ^= bit;
		}
		if (!compact_check(&d.c, &bad, &why)) {
			read_all(&d.c);
			passed++;
		}
		free(d.entries);
		free(d.blocks);
		free(d.targets);
	}
	/* flips of values and of bits past a field's width pass */
	assert_true(passed > 0 && passed < FLIP_ROUNDS);
	coded_free(&k);
	samples_free(s, DAMAGED_NR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_entries_round_trip),
		cmocka_unit_test(test_format_of_a_block),
		cmocka_unit_test(test_every_width),
		cmocka_unit_test(test_awkward_names),
		cmocka_unit_test(test_lookup_in_sorted_ranges),
		cmocka_unit_test(test_link_targets),
		cmocka_unit_test(test_a_wider_value_reads_as_its_member),
		cmocka_unit_test(test_emit_error_ends_the_encoding),
		cmocka_unit_test(test_check_refuses_damage),
		cmocka_unit_test(test_check_survives_flipped_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
