/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_index_bounded.c - the bounded build (shard_index_build_to_file():
 * directories in memory, leaves in sorted runs) writes the same index
 * file, byte for byte, as the in-memory build written by
 * index_file_write(), whatever its memory budget (down to one record per
 * run), hard links included, within their shard, to the shard before and
 * further back, paths both a file and a directory replayed; the sets it
 * cannot replay (a hard link to a link bound further back, or at or to a
 * path both a file and a directory) are refused with -EAGAIN and built in
 * memory by index_store_open(), to the same bytes;
 * an index extended by appended shards is built bounded too, to the
 * bytes of the whole set built in memory; nothing is left behind.
 */
#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardfs/index_file.h"
#include "shardfs/index_store.h"
#include "shardfs/layout.h"
#include "shardfs/log.h"
#include "shardfs/util.h"
#include "tarbuild.h"

static void open_set(struct shard_set *set, const struct tb_env *e)
{
	char spec[4096], msg[512] = "";

	snprintf(spec, sizeof(spec), "%s/*.tar", e->dir);
	*set = (struct shard_set){ 0 };
	if (shard_set_expand(set, spec, NULL, msg, sizeof(msg)) ||
	    shard_set_open(set, msg, sizeof(msg)))
		fail_msg("%s", msg);
}

/* The bytes of file @path (malloc'd), *len of them. */
static char *slurp(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	char *buf;

	assert_true(fd >= 0 && !fstat(fd, &st));
	buf = malloc(st.st_size ? st.st_size : 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, st.st_size, 0), st.st_size);
	close(fd);
	*len = st.st_size;
	return buf;
}

/* The in-memory build of the set under @layout (NULL: the tree), written
 * to @path. */
static void write_in_memory(struct tb_env *e, const char *path, const struct layout *layout)
{
	const struct shard_index_build_options opt = { .threads = 2, .layout = layout };
	struct shard_index idx;
	struct shard_set set;
	char msg[512];

	open_set(&set, e);
	assert_int_equal(shard_index_build(&idx, &set, &opt), 0);
	assert_int_equal(index_file_write(path, &idx, &set, 0, msg, sizeof(msg)), 0);
	shard_index_release(&idx);
	shard_set_release(&set);
}

/* The bounded build with @opt into @path; returns its result. */
static int write_bounded_opt(struct tb_env *e, const char *path,
			     const struct shard_index_build_options *opt)
{
	struct shard_index_counts counts;
	struct index_file_writer w;
	struct shard_set set;
	uint32_t nr = 0;
	char msg[512];
	int rc;

	open_set(&set, e);
	assert_int_equal(index_file_writer_open(&w, path, &set, msg, sizeof(msg)), 0);
	rc = shard_index_build_to_file(&w, &set, opt, &counts, &nr);
	if (!rc)
		assert_int_equal(index_file_writer_commit(&w, nr, &counts, 0, true, msg,
							  sizeof(msg)), 0);
	index_file_writer_abort(&w);
	shard_set_release(&set);
	return rc;
}

/* The bounded build under @layout with @budget bytes into @path; returns
 * its result. */
static int write_bounded(struct tb_env *e, const char *path, size_t budget,
			 const struct layout *layout)
{
	const struct shard_index_build_options opt = { .threads = 2, .memory_budget = budget,
						       .layout = layout };

	return write_bounded_opt(e, path, &opt);
}

/* write_bounded_opt(), with what it logs at the info level into @log
 * (@len bytes); returns its result. */
static int write_bounded_logged(struct tb_env *e, const char *path,
				const struct shard_index_build_options *opt,
				char *log, size_t len)
{
	struct tb_stderr c;
	int rc;

	log_set_level(LOG_LEVEL_INFO);
	tb_stderr_begin(&c);
	rc = write_bounded_opt(e, path, opt);
	tb_stderr_end(&c, log, len);
	log_set_level(LOG_LEVEL_ERROR);	/* as tb_env_setup() left it */
	return rc;
}

/* Where @log says @what, if it says it exactly once; else NULL. */
static const char *said_once(const char *log, const char *what)
{
	const char *at = strstr(log, what);

	return at && !strstr(at + 1, what) ? at : NULL;
}

static void assert_same_file(const char *a, const char *b)
{
	size_t la, lb;
	char *x = slurp(a, &la), *y = slurp(b, &lb);

	assert_int_equal(la, lb);
	assert_memory_equal(x, y, la);
	free(x);
	free(y);
}

/* Besides the shards and the cache directory, @e->dir holds @files
 * files: the index files the test wrote, no runs or temporary files. */
static void assert_nothing_left(const struct tb_env *e, int files)
{
	DIR *d = opendir(e->dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		     strcmp(de->d_name, "cache") &&
		     (len < 4 || strcmp(de->d_name + len - 4, ".tar"));
	}
	closedir(d);
	assert_int_equal(n, files);
}

/* Keep the cache directory inside the scratch directory. */
static int setup(void **state)
{
	char cache[4096];
	int rc = tb_env_setup(state);
	struct tb_env *e = *state;

	snprintf(cache, sizeof(cache), "%s/cache", e->dir);
	setenv("XDG_CACHE_HOME", cache, 1);
	return rc;
}

#define BOUNDED_TEST(f) cmocka_unit_test_setup_teardown(f, setup, tb_env_teardown)

/* Shards with most of what a tree holds, and nothing only memory replays. */
static void write_tree_shards(struct tb_env *e)
{
	static const struct tar_extent runs[] = { { 10, 5, 0 }, { 100, 5, 0 } };
	const struct tb_attrs dir_attrs = { 0700, 12, 34, 1700000000 };
	const struct tb_attrs old = { 0640, 5, 6, 5 };
	struct tb a = { 0 };

	tb_file(&a, "z/1.jpg", "one");
	tb_file(&a, "y/x/2.jpg", "two");
	tb_link(&a, "sym", '2', "z/1.jpg");
	tb_old_sparse(&a, "holes", 200, runs, 2, "aaaaabbbbb");
	tb_file(&a, "m/b", "b");
	tb_file(&a, "m/a", "a");
	tb_file(&a, "p/ab", "ab");
	tb_file(&a, "p/a", "a");
	tb_file(&a, "p/a.b", "a.b");
	tb_add_attrs(&a, "old/f", '0', &old, "x", 1);
	tb_file(&a, "y/x/deep/d/e.txt", "e");
	tb_add_attrs(&a, "u/", '5', &dir_attrs, NULL, 0);
	tb_file(&a, "m/empty", "");		/* in no shard's order */
	tb_file(&a, "m/a", "a, again");	/* the later copy in the order */
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "z/1.jpg", "ONE");
	tb_add(&a, "y/", '5', NULL, 0);
	tb_file(&a, "w/3.jpg", "three");
	tb_add(&a, "empty/", '5', NULL, 0);
	tb_file(&a, "z/1.jpgx", "x");
	tb_file(&a, "a", "root file");
	tb_env_shard(e, "01.tar", &a);
	tb_link(&a, "w/3.jpg", '2', "../z/1.jpg");	/* a file becomes a link */
	tb_file(&a, "a/../p/c", "c");
	tb_add_attrs(&a, "./", '5', &dir_attrs, NULL, 0);
	tb_file(&a, "y/x/2.jpg", "TWO");
	tb_add_attrs(&a, "u/", '5', &old, NULL, 0);
	tb_file(&a, "q/new", "new");
	tb_link(&a, "p/new-too", '1', "q/new");	/* within its shard */
	tb_env_shard(e, "02.tar", &a);
}

/* The shards in @e->dir build bounded under budgets from one record a
 * run to the default, each time to the bytes of the in-memory build. */
static void assert_same_bytes_any_budget(struct tb_env *e)
{
	static const size_t budgets[] = { 1, 300, 4096, 0 };
	char mem[4096], bounded[4096];

	snprintf(mem, sizeof(mem), "%s/mem.index", e->dir);
	snprintf(bounded, sizeof(bounded), "%s/bounded.index", e->dir);
	write_in_memory(e, mem, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(budgets); i++) {
		assert_int_equal(write_bounded(e, bounded, budgets[i], NULL), 0);
		assert_same_file(mem, bounded);
	}
	assert_nothing_left(e, 2);	/* no runs, no temporary index */
}

static void test_same_bytes_any_budget(void **state)
{
	write_tree_shards(*state);
	assert_same_bytes_any_budget(*state);
}

/* Many members over many directories, more runs than a merge buffer. */
static void test_same_bytes_many_runs(void **state)
{
	struct tb_env *e = *state;
	char mem[4096], bounded[4096], name[64], shard[32];

	for (int s = 0; s < 4; s++) {
		struct tb a = { 0 };

		for (int i = 0; i < 500; i++) {
			/* shuffled over the shards: names interleave */
			snprintf(name, sizeof(name), "d%02d/k%05d.%s", (i * 7 + s) % 23,
				 (i * 37 + s * 11) % 1000, i % 2 ? "cls" : "jpg");
			tb_file(&a, name, name);
		}
		snprintf(shard, sizeof(shard), "%02d.tar", s);
		tb_env_shard(e, shard, &a);
	}
	snprintf(mem, sizeof(mem), "%s/mem.index", e->dir);
	snprintf(bounded, sizeof(bounded), "%s/bounded.index", e->dir);
	write_in_memory(e, mem, NULL);
	assert_int_equal(write_bounded(e, bounded, 2048, NULL), 0);
	assert_same_file(mem, bounded);
}

/* The classes layout (ImageFolder's tree, from the samples' labels):
 * numeric classes padded, samples without a label in their directory,
 * the same bytes bounded as in memory. */
static void test_same_bytes_classes(void **state)
{
	struct tb_env *e = *state;
	char mem[4096], bounded[4096], key[64], label[16];
	struct layout l;

	assert_int_equal(layout_init(&l, "classes", NULL, NULL, NULL), 0);
	for (int s = 0; s < 3; s++) {
		struct tb a = { 0 };

		for (int i = 0; i < 300; i++) {
			snprintf(key, sizeof(key), "k%05d.jpg", (i * 53 + s * 7) % 1000);
			tb_file(&a, key, key);
			if (i % 7 == 0)
				continue;	/* no label */
			snprintf(label, sizeof(label), i % 5 ? "%d" : "cat%d", i % 12);
			memcpy(key + strlen(key) - 3, "cls", 3);
			tb_file(&a, key, label);
		}
		snprintf(key, sizeof(key), "%02d.tar", s);
		tb_env_shard(e, key, &a);
	}
	snprintf(mem, sizeof(mem), "%s/mem.index", e->dir);
	snprintf(bounded, sizeof(bounded), "%s/bounded.index", e->dir);
	write_in_memory(e, mem, &l);
	assert_int_equal(write_bounded(e, bounded, 2048, &l), 0);
	assert_same_file(mem, bounded);
	assert_int_equal(write_bounded(e, bounded, 0, &l), 0);
	assert_same_file(mem, bounded);
	layout_release(&l);
}

/*
 * Hard links bound within their shard or to the shard before, to the
 * bytes of the in-memory build whatever the budget: a group of three names, a link to a link, a
 * target replaced after its link (in the shard and in a later one), a
 * link replaced, links to a symlink and to a sparse file, one to a path
 * named twice before it, one to a directory (refused) and one to a link
 * that was refused (it names what came before); and links to the shard
 * before: to a file named twice, to a link, a symlink, a sparse file and
 * a file replaced after, and a link to a link of the shard before.
 */
static void test_same_bytes_hard_links(void **state)
{
	static const struct tar_extent runs[] = { { 10, 5, 0 }, { 100, 5, 0 } };
	struct tb_env *e = *state;
	struct tb a = { 0 };

	tb_file(&a, "d/1.jpg", "one");
	tb_link(&a, "d/1b.jpg", '1', "d/1.jpg");
	tb_link(&a, "e/1c.jpg", '1', "d/1b.jpg");	/* a link's link */
	tb_file(&a, "d/2.jpg", "two");
	tb_link(&a, "d/2b.jpg", '1', "d/2.jpg");
	tb_file(&a, "d/2.jpg", "two, again");		/* replaced after */
	tb_link(&a, "s", '2', "d/1.jpg");
	tb_link(&a, "sb", '1', "s");			/* to a symlink */
	tb_old_sparse(&a, "holes", 200, runs, 2, "aaaaabbbbb");
	tb_link(&a, "holes2", '1', "holes");		/* to a sparse file */
	tb_file(&a, "t", "t1");
	tb_file(&a, "t", "t2");
	tb_link(&a, "tb", '1', "t");			/* the later t */
	tb_add(&a, "dir/", '5', NULL, 0);
	tb_link(&a, "x", '1', "dir");			/* refused */
	tb_file(&a, "y", "y1");
	tb_link(&a, "y", '1', "dir");			/* refused: y stays */
	tb_link(&a, "yb", '1', "y");			/* y1 */
	tb_env_shard(e, "00.tar", &a);
	tb_link(&a, "t2", '1', "t");			/* the shard before's */
	tb_link(&a, "t3", '1', "tb");			/* its link's target */
	tb_link(&a, "s2", '1', "sb");			/* its symlink */
	tb_link(&a, "h3", '1', "holes2");		/* its sparse file */
	tb_link(&a, "d/1c.jpg", '1', "d/1.jpg");	/* before it is replaced */
	tb_file(&a, "d/1.jpg", "one, replaced");	/* in a later shard */
	tb_file(&a, "d/2b.jpg", "not a link now");
	tb_file(&a, "f", "f");
	tb_link(&a, "f2", '1', "f");
	tb_env_shard(e, "01.tar", &a);
	tb_link(&a, "f3", '1', "f2");			/* a link of the shard before */
	tb_file(&a, "f", "f replaced");
	tb_env_shard(e, "02.tar", &a);
	/* further back: each shard before scanned again */
	tb_link(&a, "g/1.jpg", '1', "d/1.jpg");		/* 01's, two back */
	tb_link(&a, "g/holes", '1', "holes");		/* 00's sparse file */
	tb_link(&a, "g/s", '1', "s");			/* 00's symlink */
	tb_link(&a, "g/t", '1', "t");			/* 00's later t */
	tb_link(&a, "g/y", '1', "y");			/* y1: the link to dir refused */
	tb_link(&a, "g/dir", '1', "dir");		/* refused: a directory */
	tb_link(&a, "g/none", '1', "none");		/* refused: nowhere */
	tb_link(&a, "lonely/x", '1', "none");		/* refused: no directory made */
	tb_file(&a, "t", "t replaced after its far link");
	tb_link(&a, "g/t2", '1', "t");			/* this shard's t */
	tb_env_shard(e, "03.tar", &a);
	tb_file(&a, "h", "h");
	tb_env_shard(e, "04.tar", &a);
	tb_link(&a, "i/2.jpg", '1', "d/2.jpg");		/* 00's later 2.jpg, four back */
	tb_link(&a, "i/f", '1', "f");			/* 02's replaced f, three back */
	tb_env_shard(e, "05.tar", &a);
	assert_same_bytes_any_budget(e);
}

/* Shards with twelve paths both a file and a directory, in every order
 * the extraction tells apart (build_conflicts.h): below a file, a file
 * over a directory that holds something, a directory member over a file,
 * files over files then a directory, nested, within one shard; and a
 * member the scan warns of. */
static void write_conflict_shards(struct tb_env *e)
{
	const struct tb_attrs dir_a = { 0700, 12, 34, 1700000000 };
	const struct tb_attrs dir_b = { 0750, 56, 78, 1600000000 };
	struct tb a = { 0 };

	tb_file(&a, "keep/1.jpg", "1");
	tb_file(&a, "f", "a file, then below it");
	tb_add(&a, "e/", '5', NULL, 0);
	tb_file(&a, "e", "an empty directory replaced by a file");
	tb_file(&a, "d/x", "below, then a file");
	tb_file(&a, "g", "a file, replaced by a directory");
	tb_file(&a, "g", "a file over a file, then replaced");
	tb_add_attrs(&a, "h/", '5', &dir_a, NULL, 0);
	tb_file(&a, "n", "n");
	tb_file(&a, "k", "k");
	tb_add(&a, "q/", '5', NULL, 0);
	tb_file(&a, "r", "r, in one shard");
	tb_file(&a, "r/x", "skipped");
	tb_add_attrs(&a, "r/", '5', &dir_b, NULL, 0);
	tb_file(&a, "r/y", "kept");
	tb_file(&a, "a/b/c", "deep");
	tb_link(&a, "s", '2', "keep/1.jpg");
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "f/x", "skipped");
	tb_file(&a, "e/x", "skipped");
	tb_file(&a, "d", "skipped: d holds x");
	tb_add_attrs(&a, "g/", '5', &dir_a, NULL, 0);
	tb_file(&a, "g/x", "kept");
	tb_file(&a, "h", "replaced by the later h/");
	tb_file(&a, "n/m/x", "skipped");
	tb_add(&a, "n/", '5', NULL, 0);
	tb_file(&a, "n/m", "n/m, a file");
	tb_file(&a, "k", "k again");
	tb_file(&a, "q", "q, a file for good");
	tb_file(&a, "a/b/c/d", "skipped");
	tb_file(&a, "s/x", "skipped: s is a symlink");
	tb_file(&a, ".shardfs/x", "skipped by the scan, warned once");
	tb_env_shard(e, "01.tar", &a);
	tb_file(&a, "g", "skipped: g holds x");
	tb_add_attrs(&a, "h/", '5', &dir_b, NULL, 0);
	tb_file(&a, "n/m/y", "skipped");
	tb_file(&a, "n/z", "kept");
	tb_file(&a, "k/x", "skipped");
	tb_file(&a, "keep/2.jpg", "2");
	tb_env_shard(e, "02.tar", &a);
}

/*
 * Paths both a file and a directory (write_conflict_shards()): the set is
 * streamed again to replay them, to the in-memory build's bytes, with its
 * warnings, and says so.
 */
static void test_conflicts_replayed(void **state)
{
	const struct shard_index_build_options opt = { .threads = 2 };
	struct tb_env *e = *state;
	char bounded[4096], log[16384];

	write_conflict_shards(e);
	snprintf(bounded, sizeof(bounded), "%s/bounded.index", e->dir);
	assert_int_equal(write_bounded_logged(e, bounded, &opt, log, sizeof(log)), 0);
	if (!strstr(log, "12 paths are both a directory and a file: the set is scanned "
			 "twice more to replay them in order") ||
	    !strstr(log, "01.tar: offset 0: a parent directory is not a directory: 'f/x'") ||
	    !strstr(log, "would replace a non-empty directory: 'd'") ||
	    strstr(log, "built in memory"))
		fail_msg("not the replay's messages: %s", log);
	/* the scan's warnings are said by the first scan alone */
	if (!said_once(log, "'.shardfs/x'"))
		fail_msg("the scan's warning not said once: %s", log);
	assert_int_equal(unlink(bounded), 0);
	assert_same_bytes_any_budget(e);
	/* past opt->conflicts_max: the in-memory build, and why */
	assert_int_equal(write_bounded_logged(e, bounded, &(struct shard_index_build_options){
		.threads = 2, .conflicts_max = 11 }, log, sizeof(log)), -EAGAIN);
	if (!strstr(log, "the index is built in memory: more than 11 paths in it are both "
			 "a directory and a file"))
		fail_msg("no limit in the log: %s", log);
	assert_nothing_left(e, 2);	/* the two indexes written before */
}

/* With skip_bad_shards, a bad shard among them is skipped by each of the
 * replay's scans and said once, by the first. */
static void test_conflicts_bad_shard_said_once(void **state)
{
	struct tb_env *e = *state;
	char bad[4096], bounded[4096], log[16384];
	const char *said;
	FILE *f;

	write_conflict_shards(e);
	snprintf(bad, sizeof(bad), "%s/03.tar", e->dir);
	assert_non_null(f = fopen(bad, "w"));
	for (int i = 0; i < 1024; i++)
		fputc('x', f);		/* no header: its checksum is wrong */
	assert_int_equal(fclose(f), 0);
	snprintf(bounded, sizeof(bounded), "%s/bounded.index", e->dir);
	assert_int_equal(write_bounded_logged(e, bounded, &(struct shard_index_build_options){
		.threads = 2, .skip_bad_shards = true }, log, sizeof(log)), 0);
	said = said_once(log, "03.tar: offset 0:");
	if (!said || !strstr(said, "shard skipped"))
		fail_msg("the bad shard not said once: %s", log);
}

/* What only the in-memory merge replays: refused, then built in memory by
 * index_store_open() to the same bytes.  (GNU tar and bsdtar link to a
 * file's first name, never to a link.) */
static void test_in_memory_sets(void **state)
{
	static const char *const sets[][3] = {
		/* a hard link to one whose target is two shards back */
		{ "keep/2.jpg", "", "a hard link in it names another hard link bound "
				    "further back than the shard before it (%s/02.tar: "
				    "offset 512: 'keep/3c.jpg' -> 'keep/3.jpg')" },
		/* a hard link to a path both a file and a directory */
		{ "f", "f/x", "a hard link in it is at or names a path both a directory "
			      "and a file (%s/02.tar: offset 0: 'keep/3.jpg' -> 'f')" },
	};
	struct tb_env *e = *state;
	char mem[4096], bounded[4096], saved[4096], log[8192], why[8192];

	snprintf(mem, sizeof(mem), "%s/mem.index", e->dir);
	snprintf(bounded, sizeof(bounded), "%s/bounded.index", e->dir);
	snprintf(saved, sizeof(saved), "%s/.00.tar.shardfs-index", e->dir);
	for (size_t i = 0; i < ARRAY_SIZE(sets); i++) {
		const struct shard_index_build_options bo = { .threads = 2 };
		const struct index_store_options so = { .mode = INDEX_MODE_REBUILD };
		struct index_store_result res;
		struct shard_index idx;
		struct shard_set set;
		struct tb a = { 0 };

		tb_file(&a, "keep/1.jpg", "1");
		tb_file(&a, sets[i][0], "first");
		tb_env_shard(e, "00.tar", &a);
		if (i)
			tb_file(&a, sets[i][1], "second");
		tb_file(&a, "keep/4.jpg", "4");
		tb_env_shard(e, "01.tar", &a);
		tb_link(&a, "keep/3.jpg", '1', sets[i][0]);
		if (!i)
			tb_link(&a, "keep/3c.jpg", '1', "keep/3.jpg");
		tb_file(&a, "keep/5.jpg", "5");
		tb_env_shard(e, "02.tar", &a);
		write_in_memory(e, mem, NULL);
		/* the message that says why */
		assert_int_equal(write_bounded_logged(e, bounded, &bo, log, sizeof(log)),
				 -EAGAIN);
		snprintf(why, sizeof(why), sets[i][2], e->dir);
		if (!strstr(log, why))
			fail_msg("'%s' not in the log: %s", why, log);
		open_set(&set, e);
		assert_int_equal(index_store_open(&idx, &set, &bo, &so, &res), 0);
		assert_true(res.saved);
		assert_same_file(mem, saved);
		shard_index_release(&idx);
		shard_set_release(&set);
		assert_nothing_left(e, 2);	/* mem.index and the saved one */
	}
}

/* Links further back than the shard before are held up to
 * opt->far_links_max (1 Mi by default); one more takes the in-memory
 * build, and says so. */
static void test_far_links_past_the_limit(void **state)
{
	struct tb_env *e = *state;
	struct shard_index_build_options opt = { .threads = 2, .far_links_max = 2 };
	char mem[4096], bounded[4096], log[8192];
	struct tb a = { 0 };

	tb_file(&a, "a", "a");
	tb_file(&a, "b", "b");
	tb_file(&a, "c", "c");
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "z", "z");
	tb_env_shard(e, "01.tar", &a);
	tb_link(&a, "la", '1', "a");
	tb_link(&a, "lb", '1', "b");
	tb_link(&a, "lc", '1', "c");
	tb_env_shard(e, "02.tar", &a);
	snprintf(mem, sizeof(mem), "%s/mem.index", e->dir);
	snprintf(bounded, sizeof(bounded), "%s/bounded.index", e->dir);
	write_in_memory(e, mem, NULL);
	assert_int_equal(write_bounded_logged(e, bounded, &opt, log, sizeof(log)), -EAGAIN);
	if (!strstr(log, "more than 2 hard links in it name members further back than "
			 "the shard before theirs"))
		fail_msg("no limit in the log: %s", log);
	opt.far_links_max = 3;
	assert_int_equal(write_bounded_opt(e, bounded, &opt), 0);
	assert_same_file(mem, bounded);
	assert_nothing_left(e, 2);
}

/* index_store_open() builds a set bounded, saves it and serves it from
 * the file: the same bytes as in memory, the same tree. */
static void test_store_builds_bounded(void **state)
{
	const struct shard_index_build_options bo = { .threads = 1, .memory_budget = 512 };
	const struct index_store_options so = { .mode = INDEX_MODE_AUTO };
	struct tb_env *e = *state;
	struct index_store_result res;
	char mem[4096], saved[4096];
	struct shard_index idx;
	struct shard_set set;

	write_tree_shards(e);
	snprintf(mem, sizeof(mem), "%s/mem.index", e->dir);
	snprintf(saved, sizeof(saved), "%s/.00.tar.shardfs-index", e->dir);
	write_in_memory(e, mem, NULL);
	open_set(&set, e);
	assert_int_equal(index_store_open(&idx, &set, &bo, &so, &res), 0);
	assert_int_equal(res.origin, INDEX_BUILT);
	assert_true(res.saved);
	assert_string_equal(res.path, saved);
	assert_non_null(idx.map);		/* served from the file */
	assert_true(tb_entry(&idx, "y/x/deep/d/e.txt") > 0);
	assert_true(tb_entry(&idx, "p/a.b") > 0);
	shard_index_release(&idx);
	shard_set_release(&set);
	assert_same_file(mem, saved);
	assert_nothing_left(e, 2);
}

/* index_store_open() of the set in @e->dir under @bo: *@res, the index
 * served from its file or not. */
static bool store_open(struct tb_env *e, const struct shard_index_build_options *bo,
		       struct index_store_result *res)
{
	const struct index_store_options so = { .mode = INDEX_MODE_AUTO };
	struct shard_index idx;
	struct shard_set set;
	bool mapped;

	open_set(&set, e);
	assert_int_equal(index_store_open(&idx, &set, bo, &so, res), 0);
	assert_true(res->saved);
	mapped = idx.map != NULL;
	shard_index_release(&idx);
	shard_set_release(&set);
	return mapped;
}

/* Rename the last @n shards of @e->dir to NAME.later, or (@n 0) every
 * such shard back. */
static void shards_aside(struct tb_env *e, size_t n)
{
	char pattern[4096], to[4096];
	glob_t g;

	snprintf(pattern, sizeof(pattern), "%s/*.tar%s", e->dir, n ? "" : ".later");
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	assert_true(g.gl_pathc > n);
	for (size_t i = n ? g.gl_pathc - n : 0; i < g.gl_pathc; i++) {
		size_t len = strlen(g.gl_pathv[i]) - (n ? 0 : strlen(".later"));

		snprintf(to, sizeof(to), "%.*s%s", (int)len, g.gl_pathv[i], n ? ".later" : "");
		assert_int_equal(rename(g.gl_pathv[i], to), 0);
	}
	globfree(&g);
}

/*
 * The set in @e->dir but its last @appended shards indexed and saved,
 * then those shards put back: the saved index is extended, bounded
 * (@bounded: the index served from the file the build wrote) or in
 * memory, to the bytes of the whole set built in memory.
 */
static void assert_extends(struct tb_env *e, size_t appended, size_t budget,
			   const struct layout *layout, bool bounded)
{
	const struct shard_index_build_options bo = { .threads = 2, .memory_budget = budget,
						      .layout = layout };
	struct index_store_result res;
	char mem[4096];

	shards_aside(e, appended);
	store_open(e, &bo, &res);
	assert_int_equal(res.origin, INDEX_BUILT);
	shards_aside(e, 0);	/* after the rename, as the ctime it records */
	snprintf(mem, sizeof(mem), "%s/mem.index", e->dir);
	write_in_memory(e, mem, layout);
	assert_int_equal(store_open(e, &bo, &res), bounded);
	assert_int_equal(res.origin, INDEX_EXTENDED);
	assert_same_file(mem, res.path);
	assert_int_equal(unlink(res.path), 0);
	assert_int_equal(unlink(mem), 0);
	assert_nothing_left(e, 0);
}

/* A saved index extended by appended shards: bounded, the same bytes,
 * whatever the budget; members replaced, files become links, directories
 * change attributes across the boundary. */
static void test_extended_bounded(void **state)
{
	static const size_t budgets[] = { 1, 4096, 0 };
	struct tb_env *e = *state;

	write_tree_shards(e);
	for (size_t i = 0; i < ARRAY_SIZE(budgets); i++) {
		assert_extends(e, 1, budgets[i], NULL, true);
		assert_extends(e, 2, budgets[i], NULL, true);
	}
}

/* Paths both a file and a directory between a saved index and the shards
 * appended to it (write_conflict_shards(): files, empty and full
 * directories of the base replaced or kept): replayed from the index,
 * bounded, to the same bytes. */
static void test_extended_conflicts_replayed(void **state)
{
	struct tb_env *e = *state;

	write_conflict_shards(e);
	assert_extends(e, 1, 1, NULL, true);
	assert_extends(e, 2, 0, NULL, true);
	assert_extends(e, 2, 4096, NULL, true);
}

/* More base shards than the scan runs ahead of the merge, many
 * directories, the classes layout (whose base has padded class names). */
static void test_extended_bounded_many(void **state)
{
	struct tb_env *e = *state;
	char key[64], label[16];
	struct layout l;

	assert_int_equal(layout_init(&l, "classes", NULL, NULL, NULL), 0);
	for (int s = 0; s < 9; s++) {
		struct tb a = { 0 };

		for (int i = 0; i < 200; i++) {
			snprintf(key, sizeof(key), "d%02d/k%05d.jpg", (i * 7 + s) % 23,
				 (i * 37 + s * 11) % 1000);
			tb_file(&a, key, key);
			snprintf(label, sizeof(label), i % 5 ? "%d" : "cat%d", (i + s) % 12);
			memcpy(key + strlen(key) - 3, "cls", 3);
			tb_file(&a, key, label);
		}
		snprintf(key, sizeof(key), "%02d.tar", s);
		tb_env_shard(e, key, &a);
	}
	assert_extends(e, 2, 2048, NULL, true);
	assert_extends(e, 3, 0, &l, true);
	layout_release(&l);
}

/* A base with hard-link groups is extended bounded, to the same bytes:
 * groups whose first name is in ORDER or not (an empty file, a symlink,
 * a sparse file), a first name replaced by the appended shard (the next
 * name becomes first), a later name replaced, a new group beside, links
 * of the appended shards to the base's files and names. */
static void test_extended_hard_links(void **state)
{
	static const size_t budgets[] = { 1, 4096, 0 };
	static const struct tar_extent runs[] = { { 10, 5, 0 }, { 100, 5, 0 } };
	struct tb_env *e = *state;
	struct tb a = { 0 };

	tb_file(&a, "keep/1.jpg", "1");
	tb_link(&a, "keep/2.jpg", '1', "keep/1.jpg");
	tb_link(&a, "other/2.jpg", '1', "keep/1.jpg");
	tb_file(&a, "gone/1.jpg", "replaced below");
	tb_link(&a, "stays/1.jpg", '1', "gone/1.jpg");	/* then first */
	tb_file(&a, "e/empty", "");			/* in no ORDER */
	tb_link(&a, "e/empty2", '1', "e/empty");
	tb_link(&a, "e/sym", '2', "../keep/1.jpg");
	tb_link(&a, "e/sym2", '1', "e/sym");
	tb_old_sparse(&a, "e/holes", 200, runs, 2, "aaaaabbbbb");
	tb_link(&a, "e/holes2", '1', "e/holes");
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "a/1.jpg", "base, no links");
	tb_env_shard(e, "01.tar", &a);
	tb_file(&a, "keep/3.jpg", "3");
	tb_file(&a, "gone/1.jpg", "the new one");
	tb_file(&a, "other/2.jpg", "no longer a link");
	tb_link(&a, "keep/3b.jpg", '1', "keep/3.jpg");	/* a new group */
	tb_link(&a, "n/1.jpg", '1', "keep/1.jpg");	/* into the base: a group's first */
	tb_link(&a, "n/2.jpg", '1', "keep/2.jpg");	/* its later name */
	tb_link(&a, "n/empty", '1', "e/empty2");	/* a group in no ORDER */
	tb_link(&a, "n/sym", '1', "e/sym");		/* a symlink's group */
	tb_link(&a, "n/a", '1', "a/1.jpg");		/* 01's file */
	tb_link(&a, "n/gone", '1', "gone/1.jpg");	/* this shard's new one */
	tb_link(&a, "n/keep", '1', "keep");		/* refused: a directory */
	tb_link(&a, "only/none", '1', "none");		/* refused: nowhere */
	tb_env_shard(e, "02.tar", &a);
	for (size_t i = 0; i < ARRAY_SIZE(budgets); i++) {
		assert_extends(e, 1, budgets[i], NULL, true);
		assert_extends(e, 2, budgets[i], NULL, true);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOUNDED_TEST(test_same_bytes_any_budget),
		BOUNDED_TEST(test_same_bytes_many_runs),
		BOUNDED_TEST(test_same_bytes_classes),
		BOUNDED_TEST(test_conflicts_replayed),
		BOUNDED_TEST(test_conflicts_bad_shard_said_once),
		BOUNDED_TEST(test_in_memory_sets),
		BOUNDED_TEST(test_far_links_past_the_limit),
		BOUNDED_TEST(test_store_builds_bounded),
		BOUNDED_TEST(test_extended_bounded),
		BOUNDED_TEST(test_extended_bounded_many),
		BOUNDED_TEST(test_extended_conflicts_replayed),
		BOUNDED_TEST(test_extended_hard_links),
		BOUNDED_TEST(test_same_bytes_hard_links),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
