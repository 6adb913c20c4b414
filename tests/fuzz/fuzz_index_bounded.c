/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_index_bounded.c - libFuzzer target: the bounded index build
 * against the in-memory one, on hostile shards.
 *
 * A mount that writes an index file builds it bounded
 * (shard_index_build_to_file(): directories in memory, every other member
 * a record in sorted runs, hard links bound within their shard or the one
 * before), and that build must write the very bytes index_file_write()
 * writes for the in-memory build, which replays the extraction member by
 * member.  The unit tests check it on sets made to reach each rule;
 * fuzz_index covers the in-memory build alone.  Here the input is split
 * into one to five shards as for fuzz_index (fuzz_split_shards) and built
 * both ways, in the tree layout with bad shards failing the set and in the
 * layout the input picks (fuzz_pick_layout) with bad shards skipped, the
 * bounded build with a budget of a few records a run (so that every merge
 * of runs is reached), a few dozen, or the default, by the input's length;
 * and, of two or more shards, the last one appended to an index of the
 * others, extended bounded and in memory (what a mount falls back to).
 * Then:
 *
 *  - both builds succeed and the two files are the same, byte for byte;
 *  - or the bounded build says the set needs the in-memory build
 *    (-EAGAIN: a hard link to a link bound further back than the shard
 *    before, or at or to a path both a file and a directory, or at a
 *    hard-linked file of the index extended);
 *  - or both fail alike (a bad shard, a classes tree without a label).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "shardfs/index.h"
#include "shardfs/index_file.h"
#include "shardfs/shardset.h"

/* The bounded build's budgets, one an input by its length: a few records
 * a run (about 90 bytes a record buffered), so that a small input is
 * merged from many runs; a few dozen; the default (0), one run. */
static const size_t budgets[] = { 300, 4096, 0 };

/* The shards of the current input, and the bounded build's budget. */
static struct fuzz_span shards[FUZZ_MAX_SHARDS];
static size_t budget;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_keep_stderr();
	return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
			       unsigned int seed)
{
	return fuzz_mutate(data, size, max_size, seed, true);
}

/*
 * Open the @nr shards in @dir as @set; with @base (an index of all but
 * the last, whose shard table is @sh), take from it what a mount takes
 * rather than scan those shards again (index_store.c's covered_shards()).
 */
static void open_extending(struct shard_set *set, const char *dir, unsigned int nr,
			   bool skip_bad, const struct shard_index *base,
			   const struct index_file_shards *sh)
{
	fuzz_open_set(set, dir, nr, skip_bad);
	for (uint32_t i = 0; base && i < sh->nr; i++) {
		set->shards[i].members = sh->shards[i].members;
		set->shards[i].digest = sh->shards[i].digest;
		set->shards[i].fingerprint = sh->shards[i].fingerprint;
		set->shards[i].fingerprinted = true;
	}
}

/* The in-memory build of the @nr shards in @dir, extending @base (with
 * @sh, as open_extending()) or not, written to @path when it succeeds;
 * returns its result. */
static int build_in_memory(const char *dir, unsigned int nr, const struct layout *layout,
			   bool skip_bad, const struct shard_index *base,
			   const struct index_file_shards *sh, const char *path)
{
	const struct shard_index_build_options opt = {
		.layout = layout, .threads = 1, .skip_bad_shards = skip_bad,
		.base = base, .base_shards = nr - 1,
	};
	struct shard_index idx;
	struct shard_set set = { 0 };
	char msg[512];
	int rc;

	open_extending(&set, dir, nr, skip_bad, base, sh);
	rc = shard_index_build(&idx, &set, &opt);
	if (!rc) {
		FUZZ_CHECK(!index_file_write(path, &idx, &set, 0, msg, sizeof(msg)),
			   "writing the in-memory build: %s", msg);
		shard_index_release(&idx);
	}
	shard_set_release(&set);
	return rc;
}

/* The bounded build of the same shards into @path, as build_in_memory();
 * returns its result. */
static int build_bounded(const char *dir, unsigned int nr, const struct layout *layout,
			 bool skip_bad, const struct shard_index *base,
			 const struct index_file_shards *sh, const char *path)
{
	const struct shard_index_build_options opt = {
		.layout = layout, .threads = 1, .skip_bad_shards = skip_bad,
		.memory_budget = budget, .base = base, .base_shards = nr - 1,
	};
	struct shard_index_counts counts;
	struct index_file_writer w;
	struct shard_set set = { 0 };
	uint32_t nr_entries = 0;
	char msg[512];
	int rc;

	open_extending(&set, dir, nr, skip_bad, base, sh);
	FUZZ_CHECK(!index_file_writer_open(&w, path, &set, msg, sizeof(msg)),
		   "opening the bounded build's file: %s", msg);
	rc = shard_index_build_to_file(&w, &set, &opt, &counts, &nr_entries);
	if (!rc)
		FUZZ_CHECK(!index_file_writer_commit(&w, nr_entries, &counts, 0, true, msg,
						     sizeof(msg)),
			   "committing the bounded build: %s", msg);
	index_file_writer_abort(&w);
	shard_set_release(&set);
	return rc;
}

/* The bytes of file @path (malloc'd), *@len of them. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	char *buf;

	FUZZ_CHECK(f && !fstat(fileno(f), &st), "reading %s", path);
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	FUZZ_CHECK(buf && fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size,
		   "reading %s", path);
	fclose(f);
	*len = (size_t)st.st_size;
	return buf;
}

/* What is being compared, for messages. */
struct comparison {
	const char *layout;	/* "tree" or "picked" */
	bool skip_bad;		/* bad shards skipped */
	const char *build;	/* the build set against the in-memory one */
};

/* The build what->build (result @rc, file @path) agrees with the
 * in-memory one (@mem_rc, @mem): see the top. */
static void check_same(const struct comparison *what, int mem_rc, const char *mem, int rc,
		       const char *path)
{
	size_t mem_len, len, at = 0;
	char *a, *b;

	FUZZ_CHECK(rc == mem_rc || rc == -EAGAIN,
		   "layout %s, skip_bad %d: the in-memory build returned %d, the %s %d",
		   what->layout, what->skip_bad, mem_rc, what->build, rc);
	if (mem_rc || rc)
		return;
	a = slurp(mem, &mem_len);
	b = slurp(path, &len);
	while (at < mem_len && at < len && a[at] == b[at])
		at++;
	FUZZ_CHECK(mem_len == len && at == mem_len,
		   "layout %s, skip_bad %d: the %s's file (%zu bytes) differs from the "
		   "in-memory build's (%zu bytes) at byte %zu",
		   what->layout, what->skip_bad, what->build, len, mem_len, at);
	free(a);
	free(b);
}

/*
 * The extensions of an index of all shards but the last by the last one,
 * bounded and in memory (where a mount falls back to when the bounded
 * says -EAGAIN), against the in-memory build of all of them (@mem_rc,
 * file @mem), when the in-memory build of the others succeeds without a
 * bad shard (a mount saves no index of a set with bad shards): the index
 * of the others written, loaded with its full check and extended, as a
 * mount finds it.
 */
static void compare_extensions(const char *dir, unsigned int nr, const struct layout *layout,
			       struct comparison *what, int mem_rc, const char *mem)
{
	char base_path[PATH_MAX], extended[PATH_MAX], msg[512];
	struct index_file_shards sh;
	struct shard_index base;
	int rc;

	snprintf(base_path, sizeof(base_path), "%s/base.idx", dir);
	snprintf(extended, sizeof(extended), "%s/extended.idx", dir);
	if (build_in_memory(dir, nr - 1, layout, what->skip_bad, NULL, NULL, base_path))
		return;
	rc = index_file_load(base_path, &base, &sh, INDEX_LOAD_FULL_CHECK, msg, sizeof(msg));
	FUZZ_CHECK(!rc, "loading the index of the shards before the last: %s", msg);
	if (!base.counts.bad_shards) {
		what->build = "bounded extension";
		check_same(what, mem_rc, mem,
			   build_bounded(dir, nr, layout, what->skip_bad, &base, &sh, extended),
			   extended);
		unlink(extended);
		what->build = "in-memory extension";
		check_same(what, mem_rc, mem,
			   build_in_memory(dir, nr, layout, what->skip_bad, &base, &sh, extended),
			   extended);
	}
	shard_index_release(&base);
	unlink(base_path);
	unlink(extended);
}

/* The builds of the @nr shards in @dir agree (see the top). */
static void compare_builds(const char *dir, unsigned int nr, const struct layout *layout,
			   bool skip_bad)
{
	struct comparison what = { layout ? "picked" : "tree", skip_bad, "bounded build" };
	char mem[PATH_MAX], bounded[PATH_MAX];
	int mem_rc;

	snprintf(mem, sizeof(mem), "%s/in-memory.idx", dir);
	snprintf(bounded, sizeof(bounded), "%s/bounded.idx", dir);
	mem_rc = build_in_memory(dir, nr, layout, skip_bad, NULL, NULL, mem);
	check_same(&what, mem_rc, mem,
		   build_bounded(dir, nr, layout, skip_bad, NULL, NULL, bounded), bounded);
	if (nr > 1)
		compare_extensions(dir, nr, layout, &what, mem_rc, mem);
	unlink(mem);
	unlink(bounded);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned int nr = (unsigned int)fuzz_split_shards(data, size, shards, FUZZ_MAX_SHARDS);
	char dir[PATH_MAX], path[PATH_MAX];

	budget = budgets[size % (sizeof(budgets) / sizeof(budgets[0]))];
	fuzz_make_dir(dir);
	fuzz_write_shards(dir, shards, nr);
	compare_builds(dir, nr, NULL, false);
	compare_builds(dir, nr, fuzz_pick_layout(data, size), true);
	for (unsigned int i = 0; i < nr; i++) {
		snprintf(path, sizeof(path), "%s/%u.tar", dir, i);
		unlink(path);
	}
	rmdir(dir);
	return 0;
}
