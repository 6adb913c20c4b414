/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_index.c - shard_index_build(): from real tar files to the mounted
 * namespace.
 *
 * The build replays every member as GNU tar would extract the shards, in
 * shard order, into one directory: later members win, missing parents are
 * synthesized, hard links bind to what their target names at that moment,
 * and names that could escape the root are refused.  These rules decide
 * what users see, so each one has a test on shards written to a scratch
 * directory.  The layout promises (children contiguous and sorted
 * bytewise, the same inode numbers on every build, also when a saved
 * index is extended) are checked on the arrays themselves.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tarbuild.h"
#include "shardfs/log.h"
#include "shardfs/path.h"

/* (shard, data offset, entry) of order[] entries @x < @y. */
static bool order_before(const struct shard_index *idx, uint32_t x, uint32_t y)
{
	struct shard_inode a, b;

	shard_index_entry(idx, x, &a);
	shard_index_entry(idx, y, &b);
	if (a.shard != b.shard)
		return a.shard < b.shard;
	return a.data != b.data ? a.data < b.data : x < y;
}

/* order[] holds every file with data in a shard once, in (shard, data
 * offset, entry) order: strictly increasing, and as many as there are. */
static void check_order(const struct shard_index *idx)
{
	struct shard_inode in;
	uint64_t files = 0;

	for (uint32_t e = 0; e < shard_index_nr(idx); e++) {
		shard_index_entry(idx, e, &in);
		files += shard_index_orderable(&in, UINT32_MAX);
	}
	assert_int_equal(idx->nr_order, files);
	for (uint64_t i = 0; i < idx->nr_order; i++) {
		assert_true(idx->order[i] < shard_index_nr(idx));
		shard_index_entry(idx, idx->order[i], &in);
		assert_true(shard_index_orderable(&in, UINT32_MAX));
		if (i)
			assert_true(order_before(idx, idx->order[i - 1], idx->order[i]));
	}
}

/* Check the layout invariants of index.h over every directory. */
static void check_tree(const struct shard_index *idx)
{
	char prev[PATH_COMPONENT_MAX + 1], name[PATH_COMPONENT_MAX + 1];

	for (uint32_t d = 0; d < shard_index_nr(idx); d++) {
		struct shard_inode dir, in;
		uint32_t subdirs = 0;
		size_t prev_len = 0;

		shard_index_entry(idx, d, &dir);
		if (!S_ISDIR(dir.mode))
			continue;
		assert_true(dir.data + dir.size <= shard_index_nr(idx));
		for (uint64_t c = dir.data; c < dir.data + dir.size; c++) {
			size_t len = shard_index_name(idx, (uint32_t)c, name);

			shard_index_entry(idx, (uint32_t)c, &in);
			assert_int_equal(in.parent, d);
			assert_true(c > d);		/* breadth first */
			subdirs += S_ISDIR(in.mode);
			if (c > dir.data)		/* strictly increasing */
				assert_true(shard_index_name_cmp(prev, prev_len, name, len) < 0);
			memcpy(prev, name, len);
			prev_len = len;
		}
		assert_int_equal(dir.nlink, 2 + subdirs);
	}
	check_order(idx);
}

/* Expect directory @path to list exactly @names, each found by lookup. */
static void expect_listing(struct shardfs *fs, const char *path,
			   const char *const *names)
{
	uint64_t dir = tb_ino(fs, path), found, pos;
	struct shardfs_dirent de = { 0 };

	assert_true(dir != 0);
	for (pos = 0; names[pos]; pos++) {
		assert_int_equal(shardfs_readdir_entry(fs, dir, pos, &de), 0);
		if (strcmp(de.name, names[pos]))
			fail_msg("'%s' entry %llu is '%s', expected '%s'", path,
				 (unsigned long long)pos, de.name, names[pos]);
		assert_int_equal(shardfs_lookup(fs, dir, de.name, &found), 0);
		assert_int_equal(found, de.ino);
	}
	assert_int_equal(shardfs_readdir_entry(fs, dir, pos, &de), -ENOENT);
}

/* The index entry at @path, which must exist. */
static struct shard_inode entry_at(const struct tb_env *e, const char *path)
{
	int64_t n = tb_entry(&e->fs.idx, path);
	struct shard_inode in = { 0 };

	if (n < 0)
		fail_msg("'%s' not in the index (%lld)", path, (long long)n);
	shard_index_entry(&e->fs.idx, (uint32_t)n, &in);
	return in;
}

/* Read all of file @path into @buf (NUL-terminated); return its length. */
static size_t read_all(struct tb_env *e, const char *path, char *buf, size_t size)
{
	ssize_t n = shardfs_read(&e->fs, tb_ino(&e->fs, path), buf, size - 1, 0);

	assert_true(n >= 0);
	buf[n] = '\0';
	return (size_t)n;
}

static void test_lookup_and_readdir_order(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char long_name[PATH_COMPONENT_MAX + 2];
	uint64_t ino;

	tb_file(&a, "b", "");
	tb_file(&a, "a/z", "");
	tb_file(&a, "a/b", "");
	tb_file(&a, "B", "");
	tb_file(&a, "a.txt", "");
	tb_file(&a, "\xc3\xa9t\xc3\xa9", "");
	tb_add(&a, "a/b2/", '5', NULL, 0);
	tb_file(&a, "ab", "");
	tb_file(&a, "a-", "");
	tb_file(&a, ".hidden", "");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	check_tree(&e->fs.idx);
	expect_listing(&e->fs, "", TB_LIST(".hidden", "B", "a", "a-", "a.txt", "ab",
					   "b", "\xc3\xa9t\xc3\xa9"));
	expect_listing(&e->fs, "a", TB_LIST("b", "b2", "z"));
	assert_int_equal(shardfs_lookup(&e->fs, SHARDFS_ROOT_INO, "nope", &ino), -ENOENT);
	assert_int_equal(shardfs_lookup(&e->fs, tb_ino(&e->fs, "b"), "x", &ino), -ENOTDIR);
	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	assert_int_equal(shardfs_lookup(&e->fs, SHARDFS_ROOT_INO, long_name, &ino),
			 -ENAMETOOLONG);
	assert_int_equal(tb_entry(&e->fs.idx, "a/b2/x"), -ENOENT);
	assert_int_equal(tb_entry(&e->fs.idx, "b/x"), -ENOTDIR);
}

static void test_duplicates_last_wins(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char buf[64];

	tb_file(&a, "f", "one");
	tb_file(&a, "f", "two");		/* within a shard */
	tb_file(&a, "d/g", "x");
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "f", "three!");		/* across shards */
	tb_add(&a, "d/", '5', NULL, 0);		/* directories are merged */
	tb_file(&a, "d/g", "yy");
	tb_env_shard(e, "01.tar", &a);
	tb_env_build(e);

	check_tree(&e->fs.idx);
	assert_int_equal(e->fs.idx.counts.duplicates, 3);
	assert_int_equal(read_all(e, "f", buf, sizeof(buf)), 6);
	assert_string_equal(buf, "three!");
	assert_int_equal(entry_at(e, "f").shard, 1);
	read_all(e, "d/g", buf, sizeof(buf));
	assert_string_equal(buf, "yy");
	assert_int_equal(e->fs.idx.counts.files, 2);
	assert_int_equal(e->fs.idx.counts.members, 6);
	expect_listing(&e->fs, "", TB_LIST("d", "f"));
}

static void test_synthesized_directories(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct shard_inode c;

	tb_file(&a, "a/b/c.txt", "c");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	check_tree(&e->fs.idx);
	c = entry_at(e, "a/b/c.txt");
	for (const char *const *p = TB_LIST("a", "a/b"); *p; p++) {
		struct shard_inode d = entry_at(e, *p);

		/* from the content only: root-owned, as new as the newest entry */
		assert_int_equal(d.mode, S_IFDIR | 0755);
		assert_true(d.flags & SHARD_INODE_SYNTHESIZED);
		assert_int_equal(d.uid, 0);
		assert_int_equal(d.gid, 0);
		assert_int_equal(d.mtime_sec, c.mtime_sec);
		assert_int_equal(d.mtime_nsec, c.mtime_nsec);
	}
	assert_int_equal(entry_at(e, "").nlink, 3);
	assert_int_equal(entry_at(e, "a").nlink, 3);
	assert_int_equal(entry_at(e, "a/b").nlink, 2);
	assert_int_equal(shardfs_parent(&e->fs, tb_ino(&e->fs, "a/b")),
			 tb_ino(&e->fs, "a"));
	assert_int_equal(shardfs_parent(&e->fs, SHARDFS_ROOT_INO), SHARDFS_ROOT_INO);
	assert_int_equal(e->fs.idx.counts.dirs, 3);	/* the root, a, a/b */
	assert_int_equal(e->fs.idx.counts.files, 1);
}

static void test_explicit_directory_attributes_win(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	const struct tb_attrs d = { 0700, 5, 6, 42 }, root = { 0750, 7, 8, 43 };

	tb_file(&a, "d/x", "");			/* synthesizes d first */
	tb_add_attrs(&a, "d/", '5', &d, NULL, 0);
	tb_add_attrs(&a, "./", '5', &root, NULL, 0);
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(entry_at(e, "d").mode, S_IFDIR | 0700);
	assert_int_equal(entry_at(e, "d").uid, 5);
	assert_int_equal(entry_at(e, "d").gid, 6);
	assert_int_equal(entry_at(e, "d").mtime_sec, 42);
	assert_int_equal(entry_at(e, "").mode, S_IFDIR | 0750);
	assert_int_equal(entry_at(e, "").mtime_sec, 43);
	expect_listing(&e->fs, "", TB_LIST("d"));
}

static void test_hard_links_share_an_inode(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct stat f, h1, h2, sym;
	char buf[16];

	tb_file(&a, "f", "data");
	tb_link(&a, "h1", '1', "f");
	tb_link(&a, "sub/h2", '1', "./f");	/* targets are normalised too */
	tb_link(&a, "sym", '2', "f");		/* not part of the group */
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	f = tb_stat(&e->fs, "f");
	h1 = tb_stat(&e->fs, "h1");
	h2 = tb_stat(&e->fs, "sub/h2");
	sym = tb_stat(&e->fs, "sym");
	assert_int_equal(h1.st_ino, f.st_ino);
	assert_int_equal(h2.st_ino, f.st_ino);
	assert_int_not_equal(sym.st_ino, f.st_ino);
	assert_int_equal(f.st_nlink, 3);
	assert_int_equal(h2.st_nlink, 3);
	assert_int_equal(sym.st_nlink, 1);
	assert_true(S_ISREG(h2.st_mode));
	assert_int_equal(h2.st_size, 4);
	read_all(e, "sub/h2", buf, sizeof(buf));
	assert_string_equal(buf, "data");
	assert_int_equal(e->fs.idx.counts.hardlinks, 2);
	assert_int_equal(e->fs.idx.counts.files, 1);
	assert_int_equal(e->fs.idx.counts.bytes, 4);
	check_tree(&e->fs.idx);
}

static void test_hard_links_that_cannot_bind_are_skipped(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };

	tb_link(&a, "early", '1', "late");	/* target comes later */
	tb_file(&a, "late", "x");
	tb_link(&a, "ghost", '1', "nowhere");
	tb_add(&a, "d/", '5', NULL, 0);
	tb_link(&a, "todir", '1', "d");
	tb_link(&a, "escape", '1', "../late");
	tb_link(&a, "okay", '1', "late");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(e->fs.idx.counts.skipped, 4);
	expect_listing(&e->fs, "", TB_LIST("d", "late", "okay"));
	assert_int_equal(tb_stat(&e->fs, "late").st_nlink, 2);
}

static void test_hard_link_across_shards(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char buf[16];

	tb_file(&a, "f", "abc");
	tb_link(&a, "forward", '1', "g");	/* g is in a later shard */
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "pad", "shifts the offsets of shard 1");
	tb_link(&a, "back", '1', "f");
	tb_file(&a, "g", "g");
	tb_env_shard(e, "01.tar", &a);
	tb_env_build(e);

	assert_int_equal(tb_stat(&e->fs, "back").st_ino, tb_stat(&e->fs, "f").st_ino);
	assert_int_equal(entry_at(e, "back").shard, 0);	/* f's data */
	read_all(e, "back", buf, sizeof(buf));
	assert_string_equal(buf, "abc");
	assert_int_equal(tb_entry(&e->fs.idx, "forward"), -ENOENT);
	assert_int_equal(e->fs.idx.counts.skipped, 1);
}

static void test_file_and_directory_conflicts(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };

	tb_file(&a, "a", "file first");
	tb_add(&a, "a/", '5', NULL, 0);		/* a directory replaces it */
	tb_file(&a, "d/x", "");
	tb_file(&a, "d", "cannot replace a non-empty directory");
	tb_file(&a, "f", "");
	tb_file(&a, "f/g", "cannot go below a file");
	tb_add(&a, "e/", '5', NULL, 0);
	tb_file(&a, "e", "replaces an empty directory");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	check_tree(&e->fs.idx);
	assert_true(S_ISDIR(entry_at(e, "a").mode));
	assert_true(S_ISDIR(entry_at(e, "d").mode));
	expect_listing(&e->fs, "d", TB_LIST("x"));
	assert_true(S_ISREG(entry_at(e, "f").mode));
	assert_true(S_ISREG(entry_at(e, "e").mode));
	assert_int_equal(entry_at(e, "e").size, strlen("replaces an empty directory"));
	assert_int_equal(e->fs.idx.counts.skipped, 2);
}

/*
 * A name after every name of its directory is added without a lookup; one
 * that is not is looked up, whether it comes before the last name, equals
 * it, or equals an earlier one (a byte prefix sorts first).
 */
static void test_names_out_of_order_still_merge(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char buf[16];

	tb_file(&a, "d/m", "1");
	tb_file(&a, "d/z", "2");
	tb_file(&a, "d/a", "3");
	tb_file(&a, "d/z", "4");		/* the last name again */
	tb_file(&a, "d/m", "5");		/* an earlier one */
	tb_file(&a, "d/zz", "6");
	tb_file(&a, "d/z", "7");		/* a prefix of the last */
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "d/a", "8");		/* the first, in a later shard */
	tb_file(&a, "d/q", "9");
	tb_env_shard(e, "01.tar", &a);
	tb_env_build(e);

	check_tree(&e->fs.idx);
	expect_listing(&e->fs, "d", TB_LIST("a", "m", "q", "z", "zz"));
	assert_int_equal(e->fs.idx.counts.duplicates, 4);
	read_all(e, "d/z", buf, sizeof(buf));
	assert_string_equal(buf, "7");
	read_all(e, "d/a", buf, sizeof(buf));
	assert_string_equal(buf, "8");
}

/*
 * The merge starts a path's walk below the directory of the member before
 * it.  A shortcut that outlived the directory (replaced by a file) would
 * put members under a file; one taken from a failed hard-link lookup would
 * too; and a directory with the same length of name is another directory.
 */
static void test_directory_walk_shortcut_keeps_conflicts(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };

	tb_file(&a, "d/x", "");
	tb_file(&a, "d", "cannot replace a non-empty directory");
	tb_file(&a, "d/y", "");
	tb_add(&a, "e/", '5', NULL, 0);
	tb_link(&a, "link", '1', "e/missing");	/* a lookup that fails */
	tb_file(&a, "e", "replaces an empty directory");
	tb_file(&a, "e/z", "cannot go below a file");
	tb_file(&a, "ab/1", "");
	tb_file(&a, "ac/2", "");
	tb_file(&a, "p/q/1", "");
	tb_file(&a, "p/q/r/2", "");
	tb_file(&a, "p/q/3", "");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	check_tree(&e->fs.idx);
	expect_listing(&e->fs, "", TB_LIST("ab", "ac", "d", "e", "p"));
	expect_listing(&e->fs, "d", TB_LIST("x", "y"));
	assert_true(S_ISREG(entry_at(e, "e").mode));
	expect_listing(&e->fs, "ab", TB_LIST("1"));
	expect_listing(&e->fs, "ac", TB_LIST("2"));
	expect_listing(&e->fs, "p/q", TB_LIST("1", "3", "r"));
	expect_listing(&e->fs, "p/q/r", TB_LIST("2"));
	assert_int_equal(e->fs.idx.counts.skipped, 3);
}

/* Append an empty file named @path by a PAX record (no length limit). */
static void pax_named_file(struct tb *a, const char *path)
{
	tb_pax_header(a, 'x', TB_LIST("path", path));
	tb_file(a, "placeholder", "");
}

/* Append a file @depth components deep: "d/d/.../d/f". */
static void deep_path(struct tb *a, size_t depth)
{
	char *path = malloc(2 * depth);

	assert_non_null(path);
	for (size_t i = 0; i + 1 < depth; i++)
		memcpy(path + 2 * i, "d/", 2);
	memcpy(path + 2 * depth - 2, "f", 2);
	pax_named_file(a, path);
	free(path);
}

static void test_unsafe_names_skipped_and_counted(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char name[PATH_COMPONENT_MAX + 2];

	tb_file(&a, "../evil", "");
	tb_file(&a, "ok/../../evil", "");
	tb_file(&a, "ok/..", "");
	memset(name, 'n', PATH_COMPONENT_MAX + 1);
	name[PATH_COMPONENT_MAX + 1] = '\0';
	pax_named_file(&a, name);		/* 256 bytes: too long */
	name[PATH_COMPONENT_MAX] = '\0';
	pax_named_file(&a, name);		/* 255 bytes: fine */
	tb_file(&a, ".", "a file cannot be the root");
	tb_meta(&a, 'x', "12 path=a\0b\n", 12);	/* a NUL inside the name */
	tb_file(&a, "placeholder", "");
	deep_path(&a, SHARD_INDEX_MAX_DEPTH + 1);	/* too deep */
	deep_path(&a, SHARD_INDEX_MAX_DEPTH);
	tb_file(&a, "/abs//file", "");
	tb_file(&a, "./rel", "");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(e->fs.idx.counts.skipped, 7);
	assert_int_equal(e->fs.idx.counts.members, 11);
	expect_listing(&e->fs, "", TB_LIST("abs", "d", name, "rel"));
	expect_listing(&e->fs, "abs", TB_LIST("file"));
}

static void test_special_files_counted_not_served(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };

	tb_add(&a, "chr", '3', NULL, 0);
	tb_add(&a, "blk", '4', NULL, 0);
	tb_add(&a, "fifo", '6', NULL, 0);
	tb_file(&a, "file", "");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(e->fs.idx.counts.special, 3);
	assert_int_equal(e->fs.idx.counts.members, 4);
	expect_listing(&e->fs, "", TB_LIST("file"));
}

/* Three shards using most features: dirs, links, duplicates, sparse. */
static void write_mixed_shards(struct tb_env *e)
{
	static const struct tar_extent runs[] = { { 10, 5, 0 }, { 100, 5, 0 } };
	struct tb a = { 0 };

	tb_file(&a, "z/1.jpg", "one");
	tb_file(&a, "y/x/2.jpg", "two");
	tb_link(&a, "y/link", '1', "z/1.jpg");
	tb_link(&a, "sym", '2', "z/1.jpg");
	tb_old_sparse(&a, "holes", 200, runs, 2, "aaaaabbbbb");
	tb_env_shard(e, "00.tar", &a);
	tb_file(&a, "z/1.jpg", "ONE");
	tb_add(&a, "y/", '5', NULL, 0);
	tb_file(&a, "w/3.jpg", "three");
	tb_env_shard(e, "01.tar", &a);
	tb_link(&a, "w/again", '1', "y/x/2.jpg");
	tb_file(&a, "a/4.jpg", "four");
	tb_env_shard(e, "02.tar", &a);
}

/* Build @spec with @threads, extending @base (NULL: from scratch). */
static void build(struct shard_set *set, struct shard_index *idx,
		  const char *spec, unsigned threads,
		  const struct shard_index *base, uint32_t base_shards)
{
	const struct shard_index_build_options opt = {
		.threads = threads, .base = base, .base_shards = base_shards,
	};

	tb_build(set, idx, spec, &opt);
}

#define ASSERT_SAME_ARRAY(x, y, arr, nr)				\
	do {								\
		assert_int_equal((x)->nr, (y)->nr);			\
		assert_memory_equal((x)->arr, (y)->arr,			\
				    (x)->nr * sizeof(*(x)->arr));	\
	} while (0)

/* Two indexes of the same set must be identical, byte for byte. */
static void expect_same_index(const struct shard_index *x,
			      const struct shard_index *y)
{
	ASSERT_SAME_ARRAY(x, y, entries.entries, entries.entries_len);
	ASSERT_SAME_ARRAY(x, y, entries.targets, entries.targets_len);
	assert_int_equal(x->entries.nr, y->entries.nr);
	assert_memory_equal(x->entries.blocks, y->entries.blocks,
			    (compact_nr_blocks(x->entries.nr) + 1) * sizeof(uint64_t));
	ASSERT_SAME_ARRAY(x, y, sparse, nr_sparse);
	ASSERT_SAME_ARRAY(x, y, extents, nr_extents);
	ASSERT_SAME_ARRAY(x, y, hardlinks, nr_hardlinks);
	assert_memory_equal(&x->counts, &y->counts, sizeof(x->counts));
}

static void test_inode_numbers_stable_across_builds(void **state)
{
	struct tb_env *e = *state;
	struct shard_set s1, s2;
	struct shard_index i1, i2;

	write_mixed_shards(e);
	build(&s1, &i1, e->dir, 1, NULL, 0);
	build(&s2, &i2, e->dir, 3, NULL, 0);
	check_tree(&i1);
	assert_int_equal(i1.nr_sparse, 1);
	assert_int_equal(i1.nr_hardlinks, 1);	/* w/again; y/link lost z/1.jpg */
	expect_same_index(&i1, &i2);
	shard_index_release(&i1);
	shard_index_release(&i2);
	shard_set_release(&s1);
	shard_set_release(&s2);
}

static void test_extending_a_base_matches_a_full_build(void **state)
{
	struct tb_env *e = *state;
	struct shard_set s_base, s_ext, s_full;
	struct shard_index base, ext, full;
	char two[4096], three[sizeof(two) + 4096];

	write_mixed_shards(e);
	snprintf(two, sizeof(two), "%s/00.tar,%s/01.tar", e->dir, e->dir);
	snprintf(three, sizeof(three), "%s,%s/02.tar", two, e->dir);
	build(&s_base, &base, two, 1, NULL, 0);
	build(&s_ext, &ext, three, 1, &base, 2);
	build(&s_full, &full, three, 1, NULL, 0);
	check_tree(&ext);
	expect_same_index(&ext, &full);
	shard_index_release(&base);
	shard_index_release(&ext);
	shard_index_release(&full);
	shard_set_release(&s_base);
	shard_set_release(&s_ext);
	shard_set_release(&s_full);
}

static void test_bad_shard_fails_or_is_skipped(void **state)
{
	struct tb_env *e = *state;
	struct shard_index_build_options opt = { .threads = 2 };
	struct tb a = { 0 };
	struct shard_set set;
	struct shard_index idx;
	char msg[512] = "";

	tb_file(&a, "good", "1");
	tb_env_shard(e, "00.tar", &a);
	tb_bytes(&a, "this is not a tar archive", 25);
	tb_zeros(&a, 2);
	tb_save(&a, e->dir, "01.tar");
	tb_free(&a);
	assert_int_equal(shard_set_expand(&set, e->dir, NULL, msg, sizeof(msg)), 0);
	assert_int_equal(shard_set_open(&set, msg, sizeof(msg)), 0);

	assert_int_equal(shard_index_build(&idx, &set, &opt), -EINVAL);
	assert_null(idx.entries.entries);
	opt.skip_bad_shards = true;
	assert_int_equal(shard_index_build(&idx, &set, &opt), 0);
	assert_int_equal(idx.counts.bad_shards, 1);
	assert_false(set.shards[0].bad);
	assert_true(set.shards[1].bad);
	assert_true(tb_entry(&idx, "good") > 0);
	shard_index_release(&idx);
	shard_set_release(&set);
}

/*
 * Shards are merged as they are scanned, by however many threads: the
 * index must not depend on which shard finished first.  Later shards
 * replace, extend and conflict with earlier ones here.
 */
static void test_build_is_the_same_with_any_thread_count(void **state)
{
	struct tb_env *e = *state;
	struct shard_set s1, s2, s7;
	struct shard_index i1, i2, i7;

	for (int i = 0; i < 12; i++) {
		struct tb a = { 0 };
		char name[32], path[32];

		snprintf(path, sizeof(path), "dir%d/f%02d", i % 3, i);
		tb_file(&a, path, "a member");
		tb_file(&a, "dup", i % 2 ? "odd" : "even");
		snprintf(path, sizeof(path), "k%d", i / 2);
		if (i % 2)
			tb_file(&a, path, "a file, or below one");
		else
			tb_add(&a, strcat(path, "/"), '5', NULL, 0);
		tb_file(&a, "k0/under", "");
		tb_link(&a, "dir0/link", '1', "dup");
		snprintf(name, sizeof(name), "%02d.tar", i);
		tb_env_shard(e, name, &a);
	}
	build(&s1, &i1, e->dir, 1, NULL, 0);
	build(&s2, &i2, e->dir, 2, NULL, 0);
	build(&s7, &i7, e->dir, 7, NULL, 0);
	check_tree(&i1);
	expect_same_index(&i1, &i2);
	expect_same_index(&i1, &i7);
	shard_index_release(&i1);
	shard_index_release(&i2);
	shard_index_release(&i7);
	shard_set_release(&s1);
	shard_set_release(&s2);
	shard_set_release(&s7);
}

/* Run shard_index_build() with its log in @log (NUL-terminated). */
static int build_logged(struct shard_index *idx, struct shard_set *set,
			const struct shard_index_build_options *opt,
			char *log, size_t size)
{
	struct tb_stderr c;
	int rc;

	tb_stderr_begin(&c);
	rc = shard_index_build(idx, set, opt);
	tb_stderr_end(&c, log, size);
	return rc;
}

/*
 * A set whose in-memory build would take more than its limit stops its
 * scan and fails with -ENOMEM, saying so, rather than run the machine
 * out of memory; the base's entries count too; under the limit, or with
 * none, it builds.
 */
static void test_in_memory_build_stops_at_its_limit(void **state)
{
	struct tb_env *e = *state;
	struct shard_index_build_options opt = { .threads = 2 };
	struct shard_set set, two;
	struct shard_index idx, base;
	char msg[512] = "", log[8192], spec[4096];
	const char *found;
	unsigned scanned;

	for (int s = 0; s < 8; s++) {
		struct tb a = { 0 };
		char name[32];

		for (int i = 0; i < 100; i++) {
			snprintf(name, sizeof(name), "d%d/%03d.jpg", s, i);
			tb_file(&a, name, "x");
		}
		snprintf(name, sizeof(name), "%02d.tar", s);
		tb_env_shard(e, name, &a);
	}
	assert_int_equal(shard_set_expand(&set, e->dir, NULL, msg, sizeof(msg)), 0);
	assert_int_equal(shard_set_open(&set, msg, sizeof(msg)), 0);
	opt.memory_limit = 250 * SHARD_INDEX_MEMBER_PEAK;	/* 2.5 shards */
	assert_int_equal(build_logged(&idx, &set, &opt, log, sizeof(log)), -ENOMEM);
	assert_null(idx.entries.entries);
	found = strstr(log, "the index built in memory would take more than the 0 MiB "
			    "allowed: about 256 bytes a member, ");
	assert_non_null(found);
	assert_int_equal(sscanf(strstr(found, "member, ") + strlen("member, "),
				"%u members scanned", &scanned), 1);
	assert_true(scanned > 250 && scanned < 800);	/* the scan stopped */
	opt.memory_limit = 790 * SHARD_INDEX_MEMBER_PEAK;	/* passed at the end */
	assert_int_equal(build_logged(&idx, &set, &opt, log, sizeof(log)), -ENOMEM);
	assert_non_null(strstr(log, "800 members scanned when it stopped"));
	opt.memory_limit = 900 * SHARD_INDEX_MEMBER_PEAK;
	assert_int_equal(shard_index_build(&idx, &set, &opt), 0);
	shard_index_release(&idx);
	opt.memory_limit = UINT64_MAX;
	assert_int_equal(shard_index_build(&idx, &set, &opt), 0);
	/* an extension whose base alone is over the limit scans nothing */
	snprintf(spec, sizeof(spec), "%s/00.tar,%s/01.tar", e->dir, e->dir);
	build(&two, &base, spec, 1, NULL, 0);
	opt = (struct shard_index_build_options){ .threads = 2, .base = &base, .base_shards = 2,
						  .memory_limit = 150 * SHARD_INDEX_MEMBER_PEAK };
	shard_index_release(&idx);
	assert_int_equal(build_logged(&idx, &set, &opt, log, sizeof(log)), -ENOMEM);
	assert_non_null(strstr(log, "0 members scanned when it stopped, 203 entries of the index "
				    "it extends"));
	shard_index_release(&base);
	shard_set_release(&two);
	shard_set_release(&set);
}

/*
 * A corrupt header in the middle of a shard in the middle of the set,
 * scanned while other shards are merged: the build fails naming that
 * shard and the header's offset, and with skip_bad_shards the rest is
 * served.
 */
static void test_bad_header_mid_set_names_its_shard_and_offset(void **state)
{
	struct tb_env *e = *state;
	struct shard_index_build_options opt = { .threads = 2 };
	char msg[512] = "", log[8192], want[1024];
	struct shard_set set;
	struct shard_index idx;
	char junk[TAR_BLOCK_SIZE];

	memset(junk, 'j', sizeof(junk));
	for (int i = 0; i < 5; i++) {
		struct tb a = { 0 };
		char name[32], path[32];

		snprintf(path, sizeof(path), "s%d/a", i);
		tb_file(&a, path, "1");
		snprintf(path, sizeof(path), "s%d/b", i);
		tb_file(&a, path, "2");
		if (i == 2)
			tb_bytes(&a, junk, sizeof(junk));	/* at 2048 */
		snprintf(name, sizeof(name), "%02d.tar", i);
		tb_env_shard(e, name, &a);
	}
	assert_int_equal(shard_set_expand(&set, e->dir, NULL, msg, sizeof(msg)), 0);
	assert_int_equal(shard_set_open(&set, msg, sizeof(msg)), 0);

	assert_int_equal(build_logged(&idx, &set, &opt, log, sizeof(log)), -EINVAL);
	snprintf(want, sizeof(want), "%s/02.tar: offset 2048: header checksum mismatch",
		 e->dir);
	if (!strstr(log, want))
		fail_msg("expected '%s' in the log:\n%s", want, log);
	assert_null(idx.entries.entries);

	opt.skip_bad_shards = true;
	log_set_level(LOG_LEVEL_WARN);		/* a skipped shard is a warning */
	assert_int_equal(build_logged(&idx, &set, &opt, log, sizeof(log)), 0);
	log_set_level(LOG_LEVEL_ERROR);		/* as tb_env_setup() left it */
	if (!strstr(log, want))
		fail_msg("expected '%s' in the log:\n%s", want, log);
	assert_true(set.shards[2].bad);
	assert_int_equal(idx.counts.bad_shards, 1);
	assert_int_equal(tb_entry(&idx, "s2"), -ENOENT);
	assert_true(tb_entry(&idx, "s3/b") > 0);
	shard_index_release(&idx);
	shard_set_release(&set);
}

/*
 * shard_index_order_compute() on entries made by hand: every kind the order
 * leaves out, shards interleaved, offsets out of entry order, a tie.
 */
static void test_order_of_hand_made_entries(void **state)
{
	enum { FILE_MODE = S_IFREG | 0644 };
	const struct shard_inode in[] = {
		{ .mode = S_IFDIR | 0755, .size = 9, .data = 1 },
		{ .mode = FILE_MODE, .shard = 1, .data = 5000, .size = 10 },	/* 1 */
		{ .mode = FILE_MODE, .shard = 0, .data = 3000, .size = 10 },	/* 2 */
		{ .mode = FILE_MODE, .shard = 1, .data = 512, .size = 10 },	/* 3 */
		{ .mode = FILE_MODE, .shard = 0, .data = 512, .size = 0 },	/* empty */
		{ .mode = FILE_MODE, .shard = 0, .data = 0, .size = 7,
		  .flags = SHARD_INODE_SPARSE },				/* sparse */
		{ .mode = FILE_MODE, .shard = 0, .data = 3000, .size = 10,
		  .flags = SHARD_INODE_LINKED },				/* later name */
		{ .mode = S_IFLNK | 0777, .shard = 0, .data = 0, .size = 3 },	/* symlink */
		{ .mode = FILE_MODE, .shard = 0, .data = 1024, .size = 10 },	/* 8 */
		{ .mode = FILE_MODE, .shard = 0, .data = 3000, .size = 10 },	/* 9: tie */
		{ .mode = FILE_MODE, .shard = 2, .data = 512, .size = 10 },	/* past the set */
	};
	const uint32_t want[] = { 8, 2, 9, 3, 1 }, want_starts[] = { 0, 3, 5 };
	uint32_t starts[3], order[11];

	(void)state;
	assert_int_equal(shard_index_order_starts(in, 11, 2, starts), 5);
	assert_memory_equal(starts, want_starts, sizeof(want_starts));
	assert_int_equal(shard_index_order_compute(in, 11, 2, order), 5);
	assert_memory_equal(order, want, sizeof(want));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TB_ENV_TEST(test_lookup_and_readdir_order),
		TB_ENV_TEST(test_duplicates_last_wins),
		TB_ENV_TEST(test_synthesized_directories),
		TB_ENV_TEST(test_explicit_directory_attributes_win),
		TB_ENV_TEST(test_hard_links_share_an_inode),
		TB_ENV_TEST(test_hard_links_that_cannot_bind_are_skipped),
		TB_ENV_TEST(test_hard_link_across_shards),
		TB_ENV_TEST(test_file_and_directory_conflicts),
		TB_ENV_TEST(test_directory_walk_shortcut_keeps_conflicts),
		TB_ENV_TEST(test_names_out_of_order_still_merge),
		TB_ENV_TEST(test_unsafe_names_skipped_and_counted),
		TB_ENV_TEST(test_special_files_counted_not_served),
		TB_ENV_TEST(test_inode_numbers_stable_across_builds),
		TB_ENV_TEST(test_extending_a_base_matches_a_full_build),
		TB_ENV_TEST(test_bad_shard_fails_or_is_skipped),
		TB_ENV_TEST(test_build_is_the_same_with_any_thread_count),
		TB_ENV_TEST(test_bad_header_mid_set_names_its_shard_and_offset),
		TB_ENV_TEST(test_in_memory_build_stops_at_its_limit),
		cmocka_unit_test(test_order_of_hand_made_entries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
