/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shard_scan.c - phase 1 of the index build (shard_scan.c), one
 * shard at a time: names normalised and refused, members in archive
 * order, the layouts' rewriting (shards: under the shard's name; classes:
 * under each sample's label, found by the sample key rule of path.h), the
 * digest that decides whether a touched shard must be rescanned, and the
 * read window and arena a scanning thread lends to shard after shard.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard_scan.h"
#include "tarbuild.h"

/* A scanned shard and what it was scanned from. */
struct scanned {
	struct shard_set set;	/* the one shard, open */
	struct shard_scan sc;	/* its scan */
	struct layout layout;	/* the layout scanned under */
};

/* Save @a as @e->dir/@name and scan it under layout @kind. */
static void scan(struct scanned *s, struct tb_env *e, const char *name,
		 struct tb *a, const char *kind)
{
	char spec[4096], msg[512] = "";

	tb_env_shard(e, name, a);
	snprintf(spec, sizeof(spec), "%s/%s", e->dir, name);
	*s = (struct scanned){ 0 };
	assert_int_equal(layout_init(&s->layout, kind, NULL, NULL, NULL), 0);
	if (shard_set_expand(&s->set, spec, NULL, msg, sizeof(msg)) ||
	    shard_set_open(&s->set, msg, sizeof(msg)))
		fail_msg("%s", msg);
	shard_scan_run(&s->sc, &s->set.shards[0], &s->layout, NULL);
	assert_int_equal(s->sc.rc, 0);
}

static void scanned_release(struct scanned *s)
{
	shard_scan_release(&s->sc);
	shard_set_release(&s->set);
	layout_release(&s->layout);
}

/* Member @i's path, NUL-terminated in the pool. */
static const char *path_of(const struct scanned *s, size_t i)
{
	assert_true(i < s->sc.nr_members);
	return s->sc.strings + s->sc.members[i].path;
}

/* The members' paths, in order, are exactly @want (NULL-terminated). */
static void expect_paths(const struct scanned *s, const char *const *want)
{
	size_t n = 0;

	for (; want[n]; n++)
		if (n >= s->sc.nr_members || strcmp(path_of(s, n), want[n]))
			fail_msg("member %zu: '%s', expected '%s'", n,
				 n < s->sc.nr_members ? path_of(s, n) : "(none)",
				 want[n]);
	assert_int_equal(s->sc.nr_members, n);
}

static void test_names_are_normalised_or_refused(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct scanned s;

	tb_file(&a, "./b//c.txt", "c");
	tb_file(&a, "../escape.txt", "no");
	tb_file(&a, "a/../../x", "no");
	tb_file(&a, ".shardfs/stats", "reserved");
	tb_file(&a, "sub/.shardfs", "not at the top: fine");
	tb_add(&a, "fifo", '6', NULL, 0);
	tb_link(&a, "ln", '2', "b/c.txt");
	tb_file(&a, "/abs/z.txt", "z");
	scan(&s, e, "s.tar", &a, "tree");
	expect_paths(&s, TB_LIST("b/c.txt", "sub/.shardfs", "ln", "abs/z.txt"));
	assert_int_equal(s.sc.skipped, 3);
	assert_int_equal(s.sc.special, 1);
	assert_int_equal(s.sc.warnings, 3);
	assert_string_equal(s.sc.strings + s.sc.members[2].link, "b/c.txt");
	assert_int_equal(s.sc.members[2].link_len, strlen("b/c.txt"));
	scanned_release(&s);
}

static void test_shards_layout_prefixes_the_shard_name(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct scanned s;

	tb_add(&a, "d/", '5', NULL, 0);
	tb_file(&a, "d/x.jpg", "x");
	scan(&s, e, "shard-000007.tar", &a, "shards");
	expect_paths(&s, TB_LIST("shard-000007/d", "shard-000007/d/x.jpg"));
	scanned_release(&s);
}

static void test_classes_layout_moves_samples_under_labels(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct scanned s;

	tb_add(&a, "part/", '5', NULL, 0);	/* labels make the dirs */
	tb_file(&a, "part/0001.jpg", "j1");
	tb_file(&a, "part/0001.cls", "cat\n");
	tb_file(&a, "part/.x.txt", "hidden");
	tb_file(&a, "part/.x.cls", "dog");
	tb_file(&a, "part/0002.jpg", "j2");	/* no label */
	tb_file(&a, "part/0003.jpg", "j3");
	tb_file(&a, "part/0003.cls", "a/b");	/* unusable label */
	scan(&s, e, "s.tar", &a, "classes");
	expect_paths(&s, TB_LIST("cat/part/0001.jpg", "cat/part/0001.cls",
				 "dog/part/.x.txt", "dog/part/.x.cls",
				 "_unlabeled/part/0002.jpg",
				 "_unlabeled/part/0003.jpg",
				 "_unlabeled/part/0003.cls"));
	assert_int_equal(s.sc.nr_labels, 2);
	assert_int_equal(s.sc.unlabeled, 2);	/* samples, not members */
	assert_int_equal(s.sc.warnings, 1);	/* the unusable label */
	scanned_release(&s);
}

/* The digest covers headers and, under classes, the labels read. */
static void test_digest(void **state)
{
	struct tb_env *e = *state;
	uint64_t d[2][2];	/* [label "cat", "dog"][tree, classes] */
	struct tb a = { 0 };
	struct scanned s;

	for (int v = 0; v < 2; v++) {
		for (int k = 0; k < 2; k++) {
			uint64_t again;

			tb_file(&a, "0001.jpg", "jpeg");
			tb_file(&a, "0001.cls", v ? "dog" : "cat");
			scan(&s, e, "d.tar", &a, k ? "classes" : "tree");
			assert_int_equal(shard_scan_digest(&s.set.shards[0],
							   &s.layout, &again), 0);
			assert_true(again == s.sc.digest);
			d[v][k] = s.sc.digest;
			scanned_release(&s);
			a = (struct tb){ 0 };
		}
	}
	assert_true(d[0][0] == d[1][0]);	/* tree reads no data */
	assert_true(d[0][1] != d[1][1]);	/* classes reads the label */
	assert_true(d[0][0] != d[0][1]);
}

/* Scan the one shard of @s again into @sc, as thread @t. */
static void rescan(const struct scanned *s, struct shard_scan *sc,
		   struct shard_scan_thread *t)
{
	*sc = (struct shard_scan){ 0 };
	memset(t->window, 'j', TAR_WINDOW_SIZE);	/* what the last scan left */
	shard_scan_run(sc, &s->set.shards[0], &s->layout, t);
	assert_int_equal(sc->rc, 0);
	assert_int_equal(sc->nr_members, s->sc.nr_members);
	assert_true(sc->digest == s->sc.digest);
	assert_memory_equal(sc->strings, s->sc.strings, s->sc.strings_len);
}

/* Members @a and @b say the same, field by field (their padding is not
 * theirs to compare: it holds whatever the copy that wrote them left). */
static void assert_member_equal(const struct raw_member *a, const struct raw_member *b)
{
	_Static_assert(sizeof(*a) == 88, "a field was added: compare it below");
	assert_true(a->data_offset == b->data_offset && a->size == b->size &&
		    a->header_offset == b->header_offset);
	assert_true(a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec);
	assert_true(a->path == b->path && a->path_len == b->path_len &&
		    a->link == b->link && a->link_len == b->link_len);
	assert_true(a->mode == b->mode && a->uid == b->uid && a->gid == b->gid);
	assert_true(a->extent == b->extent && a->nr_extents == b->nr_extents &&
		    a->type == b->type && a->sparse == b->sparse);
	assert_true(a->group == b->group && a->nlink == b->nlink);
}

/*
 * A scanning thread lends one window to shard after shard: what a scan
 * finds does not depend on what the window held.  Its scans move into its
 * arena and stay there, whole, until the arena goes.  A scan on its own
 * gives back the room it reserved for its members and names.
 */
static void test_a_scanning_thread_lends_window_and_arena(void **state)
{
	struct tb_env *e = *state;
	const int big = 4 * TAR_WINDOW_SIZE / (2 * TAR_BLOCK_SIZE);
	struct shard_scan_thread t = { .window = malloc(TAR_WINDOW_SIZE) };
	struct shard_scan again[4];
	struct scanned s[4];
	struct tb a = { 0 };

	assert_non_null(t.window);
	for (int i = 0; i < big; i++) {
		char path[32];

		snprintf(path, sizeof(path), "big/%06d.txt", i);
		tb_file(&a, path, "x");
	}
	scan(&s[0], e, "big.tar", &a, "tree");
	a = (struct tb){ 0 };
	tb_file(&a, "small/1.txt", "one");
	tb_file(&a, "small/2.txt", "two");
	scan(&s[1], e, "small.tar", &a, "tree");
	for (int k = 0; k < 2; k++) {
		assert_int_equal(s[k].sc.cap_members, s[k].sc.nr_members);
		assert_int_equal(s[k].sc.strings_cap, s[k].sc.strings_len);
	}
	assert_int_equal(s[0].sc.nr_members, big);
	for (int k = 0; k < 2; k++) {
		rescan(&s[k], &again[k], &t);
		assert_true(again[k].in_arena);
	}
	a = (struct tb){ 0 };
	tb_file(&a, "../refused", "");		/* no member, some name bytes */
	scan(&s[2], e, "none.tar", &a, "tree");
	a = (struct tb){ 0 };
	scan(&s[3], e, "empty.tar", &a, "tree");	/* not even a name */
	for (int k = 2; k < 4; k++) {
		rescan(&s[k], &again[k], &t);
		assert_int_equal(again[k].nr_members, 0);
		shard_scan_release(&again[k]);
		scanned_release(&s[k]);
	}
	for (int k = 2; k < 4; k++)
		rescan(&s[k - 2], &again[k], &t);
	for (int k = 0; k < 4; k++) {		/* the later scans left them be */
		for (size_t i = 0; i < s[k % 2].sc.nr_members; i++)
			assert_member_equal(&again[k].members[i], &s[k % 2].sc.members[i]);
		assert_string_equal(again[k].strings + again[k].members[1].path,
				    path_of(&s[k % 2], 1));
		shard_scan_release(&again[k]);
	}
	bump_release(&t.arena);
	scanned_release(&s[0]);
	scanned_release(&s[1]);
	free(t.window);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TB_ENV_TEST(test_names_are_normalised_or_refused),
		TB_ENV_TEST(test_shards_layout_prefixes_the_shard_name),
		TB_ENV_TEST(test_classes_layout_moves_samples_under_labels),
		TB_ENV_TEST(test_digest),
		TB_ENV_TEST(test_a_scanning_thread_lends_window_and_arena),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
