/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_leaf_runs.c - the bounded build's sorted runs (leaf_runs.c): every
 * record a merge gives back is the one added, field for field, in
 * (directory, name, shard, member) order, whether the records stay in
 * memory or spill to many runs, coded against their neighbours, and so is
 * every record kept from the merge, read back directory by directory in
 * another order; extreme values of every field survive the coding; and
 * a run whose bytes were changed on disk gives -EIO or records, never a
 * read out of bounds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leaf_runs.h"
#include "shardfs/index.h"
#include "shardfs/util.h"
#include "tarbuild.h"

/* Records of the test; names and links point into text. */
#define NR_RECORDS 3000
#define MAX_EXTENTS 5
/* Directories the records are in. */
#define NR_DIRS 7

/* One record as the test added it. */
struct added {
	struct leaf_record rec;			/* the fixed part */
	char name[64];				/* rec.name_len bytes */
	char link[300];				/* rec.link_len bytes */
	struct tar_extent extents[MAX_EXTENTS];	/* rec.nr_extents runs */
};

static uint64_t rnd64(void)
{
	return (uint64_t)random() << 33 ^ (uint64_t)random() << 11 ^ (uint64_t)random();
}

/* A value that is often small, sometimes an extreme. */
static uint64_t pick(uint64_t small)
{
	switch (random() % 8) {
	case 0:
		return UINT64_MAX >> (random() % 64);
	case 1:
		return rnd64();
	default:
		return (uint64_t)random() % small;
	}
}

/* Record @i: names that share prefixes, fields that repeat and jump. */
static void make_record(struct added *a, uint32_t i)
{
	static const char *const stems[] = { "sample-00001", "sample-0001", "n01440764_1",
					     "a", "" };
	bool link = random() % 10 == 0, sparse = !link && random() % 10 == 0;

	memset(a, 0, sizeof(*a));
	a->rec = (struct leaf_record){
		.data_offset = pick(1u << 20), .size = pick(1u << 12),
		.mtime_sec = (int64_t)pick(1u << 31) * (random() % 3 ? 1 : -1),
		.mtime_nsec = (uint32_t)pick(1000000000),
		.dir = (uint32_t)random() % NR_DIRS,
		.shard = (uint32_t)(random() % 8 ? random() % 4 : random()),
		.member = i,	/* unique: the order is total */
		.mode = random() % 4 ? 0644 : (uint32_t)pick(UINT32_MAX),
		.uid = random() % 4 ? 1000 : (uint32_t)pick(UINT32_MAX),
		.gid = random() % 4 ? 1000 : (uint32_t)pick(UINT32_MAX),
		.type = link ? TAR_SYMLINK : TAR_FILE, .sparse = sparse };
	if (random() % 8 == 0) {	/* a hard link: any member's, of its
					 * shard or any before it */
		uint64_t back = (uint64_t)random() % (a->rec.shard + 1ull);

		a->rec.linked = (uint16_t)(1 + (back < LEAF_LINKED_MAX - 1 ? back
								  : LEAF_LINKED_MAX - 2));
		a->rec.group = (uint32_t)pick(UINT32_MAX);
	}
	a->rec.name_len = (uint32_t)snprintf(a->name, sizeof(a->name), "%s%u.%s",
					     stems[random() % 5], (unsigned)random() % 500,
					     random() % 2 ? "jpg" : "cls");
	if (link) {
		a->rec.link_len = 1 + (uint32_t)random() % (sizeof(a->link) - 1);
		for (uint32_t k = 0; k < a->rec.link_len; k++)
			a->link[k] = (char)('a' + random() % 26);
	}
	a->rec.nr_extents = sparse ? (uint32_t)random() % (MAX_EXTENTS + 1) : 0;
	for (uint32_t k = 0; k < a->rec.nr_extents; k++)
		a->extents[k] = (struct tar_extent){ pick(1u << 20), pick(1u << 16), rnd64() };
}

static struct leaf_view view_of(const struct added *a)
{
	return (struct leaf_view){ &a->rec, a->name, a->link, a->extents };
}

/* The runs' order, for qsort(). */
static int added_cmp(const void *pa, const void *pb)
{
	const struct added *a = pa, *b = pb;
	int c;

	if (a->rec.dir != b->rec.dir)
		return a->rec.dir < b->rec.dir ? -1 : 1;
	c = shard_index_name_cmp(a->name, a->rec.name_len, b->name, b->rec.name_len);
	if (c)
		return c;
	if (a->rec.shard != b->rec.shard)
		return a->rec.shard < b->rec.shard ? -1 : 1;
	return a->rec.member < b->rec.member ? -1 : a->rec.member > b->rec.member;
}

static void assert_same(const struct leaf_view *v, const struct added *a)
{
	assert_memory_equal(v->rec, &a->rec, sizeof(a->rec));
	assert_memory_equal(v->name, a->name, a->rec.name_len);
	assert_memory_equal(v->link, a->link, a->rec.link_len);
	if (a->rec.nr_extents)
		assert_memory_equal(v->extents, a->extents,
				    a->rec.nr_extents * sizeof(*a->extents));
}

/* Merge @r's runs, keeping each record in its directory's run of @dirs
 * (NR_DIRS of them); returns the records merged, checked against @sorted. */
static uint32_t merge_and_keep(struct leaf_runs *r, struct leaf_run *dirs,
			       const struct added *sorted)
{
	struct leaf_merge m;
	uint32_t n = 0;

	memset(dirs, 0, NR_DIRS * sizeof(*dirs));
	assert_int_equal(leaf_merge_start(&m, r), 0);
	for (const struct leaf_view *v; (v = leaf_merge_peek(&m)); n++) {
		if (sorted)
			assert_same(v, &sorted[n]);
		assert_int_equal(leaf_runs_keep(r, v, &dirs[v->rec->dir]), 0);
		assert_int_equal(leaf_merge_next(&m), 0);
	}
	leaf_merge_end(&m);
	assert_int_equal(leaf_runs_keep_finish(r), 0);
	return n;
}

/* Read the kept run of directory @dir to its end: 0 or what failed. */
static int read_kept(const struct leaf_runs *r, const struct leaf_run *dir,
		     const struct added *sorted, uint32_t *n)
{
	struct leaf_merge m;
	int rc = leaf_merge_start_kept(&m, r, dir);

	for (const struct leaf_view *v; !rc && (v = leaf_merge_peek(&m)); (*n)++) {
		if (sorted)
			assert_same(v, &sorted[*n]);
		rc = leaf_merge_next(&m);
	}
	leaf_merge_end(&m);
	return rc;
}

/* Runs of the @n records @recs under @budget in a scratch directory of @e. */
static void add_all(struct leaf_runs *r, struct tb_env *e, const struct added *recs,
		    uint32_t n, size_t budget)
{
	assert_int_equal(leaf_runs_init(r, e->dir, budget), 0);
	for (uint32_t i = 0; i < n; i++) {
		struct leaf_view v = view_of(&recs[i]);

		assert_int_equal(leaf_runs_add(r, &v), 0);
	}
	assert_int_equal(leaf_runs_finish(r), 0);
}

/* NR_RECORDS records made from @seed in *@recs, and sorted in *@sorted. */
static void make_records(unsigned seed, struct added **recs, struct added **sorted)
{
	*recs = calloc(NR_RECORDS, sizeof(**recs));
	*sorted = calloc(NR_RECORDS, sizeof(**sorted));
	assert_non_null(*recs);
	assert_non_null(*sorted);
	srandom(seed);
	for (uint32_t i = 0; i < NR_RECORDS; i++)
		make_record(&(*recs)[i], i);
	memcpy(*sorted, *recs, NR_RECORDS * sizeof(**recs));
	qsort(*sorted, NR_RECORDS, sizeof(**sorted), added_cmp);
}

static void test_records_come_back_sorted(void **state)
{
	/* one record a run (300 runs: a reader's buffer each), a few runs,
	 * all in memory */
	static const struct {
		size_t budget;
		uint32_t records;
	} cases[] = { { 1, 300 }, { 64 * 1024, NR_RECORDS }, { 64u << 20, NR_RECORDS } };
	struct tb_env *e = *state;
	struct added *recs, *sorted;

	make_records(29, &recs, &sorted);
	for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
		uint32_t nr = cases[k].records, n = 0;
		struct leaf_run dirs[NR_DIRS];
		struct leaf_runs r;
		struct leaf_merge m;

		memcpy(sorted, recs, nr * sizeof(*recs));
		qsort(sorted, nr, sizeof(*sorted), added_cmp);
		add_all(&r, e, recs, nr, cases[k].budget);
		assert_true(cases[k].budget >= (32u << 20) ? r.nr_runs == 0 : r.nr_runs > 1);
		assert_true(cases[k].budget > 1 || r.nr_runs == nr);
		assert_int_equal(leaf_merge_start(&m, &r), 0);	/* a merge may repeat */
		leaf_merge_end(&m);
		assert_int_equal(merge_and_keep(&r, dirs, sorted), nr);
		for (uint32_t d = NR_DIRS; d-- > 0;) {	/* the directories backwards */
			uint32_t first = 0;

			while (first < nr && sorted[first].rec.dir < d)
				first++;
			n = first;
			assert_int_equal(read_kept(&r, &dirs[d], sorted, &n), 0);
			assert_true(n == nr || sorted[n].rec.dir != d);
			assert_true(n > first || !dirs[d].length);
		}
		leaf_runs_release(&r);
	}
	free(sorted);
	free(recs);
}

/* Records that come in order (an extension's base) are written without a
 * sort; one out of order among them, late in a run, still makes one. */
static void test_records_in_order(void **state)
{
	static const size_t budgets[] = { 64 * 1024, 64u << 20 };
	struct tb_env *e = *state;
	struct added *recs, *sorted;

	make_records(31, &recs, &sorted);
	for (size_t k = 0; k < 2 * ARRAY_SIZE(budgets); k++) {
		struct leaf_run dirs[NR_DIRS];
		struct leaf_runs r;

		memcpy(recs, sorted, NR_RECORDS * sizeof(*recs));
		if (k % 2) {	/* the last two swapped */
			recs[NR_RECORDS - 2] = sorted[NR_RECORDS - 1];
			recs[NR_RECORDS - 1] = sorted[NR_RECORDS - 2];
		}
		add_all(&r, e, recs, NR_RECORDS, budgets[k / 2]);
		assert_int_equal(merge_and_keep(&r, dirs, sorted), NR_RECORDS);
		leaf_runs_release(&r);
	}
	free(recs);
	free(sorted);
}

/* A shard's samples (KEY.jpg, KEY.cls, back to back, one owner and time)
 * cost a run a few bytes each: the reason the runs are coded. */
static void test_samples_code_small(void **state)
{
	struct tb_env *e = *state;
	struct added *recs = calloc(NR_RECORDS, sizeof(*recs));
	struct leaf_runs r;
	uint64_t at = 0;

	assert_non_null(recs);
	for (uint32_t i = 0; i < NR_RECORDS; i++) {
		struct added *a = &recs[i];
		uint64_t size = i % 2 ? 3 : 90000 + i * 7;

		a->rec = (struct leaf_record){ .data_offset = at + 512, .size = size,
					       .mtime_sec = 1700000000, .dir = i / 1000,
					       .member = i, .mode = 0644, .type = TAR_FILE };
		a->rec.name_len = (uint32_t)snprintf(a->name, sizeof(a->name), "%09u.%s",
						     100000 + i / 2, i % 2 ? "cls" : "jpg");
		at += 512 + (size + 511) / 512 * 512;
	}
	add_all(&r, e, recs, NR_RECORDS, 64 * 1024);
	assert_true(r.nr_runs > 1);
	assert_true(r.file_len <= (uint64_t)r.records * 16);	/* 88 in the buffer */
	leaf_runs_release(&r);
	free(recs);
}

/* Change bytes of the runs' file: each merge either fails with -EIO or
 * gives records; the sanitized builds check that it reads nothing out of
 * bounds. */
static void test_changed_runs_fail_cleanly(void **state)
{
	struct tb_env *e = *state;
	struct added *recs = calloc(NR_RECORDS, sizeof(*recs));
	struct leaf_run dirs[NR_DIRS];
	struct leaf_runs r;
	uint64_t start;
	int failed = 0;

	assert_non_null(recs);
	srandom(30);
	for (uint32_t i = 0; i < NR_RECORDS; i++)
		make_record(&recs[i], i);
	add_all(&r, e, recs, NR_RECORDS, 64 * 1024);
	for (int round = 0; round < 100; round++) {
		struct leaf_merge m;
		uint64_t at = (uint64_t)random() % r.file_len;
		unsigned char byte, bad = (unsigned char)random();
		int rc;

		assert_int_equal(pread(r.fd, &byte, 1, (off_t)at), 1);
		assert_int_equal(pwrite(r.fd, &bad, 1, (off_t)at), 1);
		rc = leaf_merge_start(&m, &r);
		while (!rc && leaf_merge_peek(&m))
			rc = leaf_merge_next(&m);
		leaf_merge_end(&m);
		assert_true(rc == 0 || rc == -EIO);
		failed += rc == -EIO;
		assert_int_equal(pwrite(r.fd, &byte, 1, (off_t)at), 1);
	}
	assert_true(failed > 0);
	failed = 0;
	start = r.file_len;
	merge_and_keep(&r, dirs, NULL);
	for (int round = 0; round < 100; round++) {	/* the records kept */
		uint64_t at = start + (uint64_t)random() % (r.file_len - start);
		unsigned char byte, bad = (unsigned char)random();
		uint32_t n = 0;
		int rc = 0;

		assert_int_equal(pread(r.fd, &byte, 1, (off_t)at), 1);
		assert_int_equal(pwrite(r.fd, &bad, 1, (off_t)at), 1);	/* seen mapped */
		for (uint32_t d = 0; !rc && d < NR_DIRS; d++)
			rc = read_kept(&r, &dirs[d], NULL, &n);
		assert_true(rc == 0 || rc == -EIO);
		failed += rc == -EIO;
		assert_int_equal(pwrite(r.fd, &byte, 1, (off_t)at), 1);
	}
	assert_true(failed > 0);
	leaf_runs_release(&r);
	free(recs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TB_ENV_TEST(test_records_come_back_sorted),
		TB_ENV_TEST(test_records_in_order),
		TB_ENV_TEST(test_samples_code_small),
		TB_ENV_TEST(test_changed_runs_fail_cleanly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
