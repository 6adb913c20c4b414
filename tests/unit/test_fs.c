/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_fs.c - the VFS answers of fs.c over a built index: attributes
 * (with the uid=, gid= and umask= overrides), lookups and listings, and
 * above all shardfs_read().
 *
 * Reads are where a wrong offset turns into wrong bytes that nobody
 * notices, so every read is compared byte for byte with the file it
 * should return: plain members, sparse members whose holes must read as
 * zeros (reads inside a hole, spanning runs, clamped at the end), and a
 * shard truncated under the index, which must give EIO rather than
 * whatever the short pread left in the buffer.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "shardfs/control.h"
#include "tarbuild.h"

/*
 * Read @size bytes of @path at @off into a poisoned buffer and compare
 * with @want, the whole @want_len-byte file.
 */
static void expect_read(struct tb_env *e, const char *path, uint64_t off,
			size_t size, const char *want, size_t want_len)
{
	size_t expect = off < want_len ? want_len - off : 0;
	char *buf = malloc(size + 1);
	ssize_t n;

	if (expect > size)
		expect = size;
	assert_non_null(buf);
	memset(buf, 0x5a, size + 1);
	n = shardfs_read(&e->fs, tb_ino(&e->fs, path), buf, size, off);
	if (n != (ssize_t)expect)
		fail_msg("read of %zu at %llu from '%s' returned %zd, expected %zu",
			 size, (unsigned long long)off, path, n, expect);
	if (expect && memcmp(buf, want + off, expect))
		fail_msg("read of %zu at %llu from '%s' returned wrong bytes", size,
			 (unsigned long long)off, path);
	assert_int_equal((unsigned char)buf[size], 0x5a);	/* no overrun */
	free(buf);
}

static void test_getattr_reports_tar_attributes(void **state)
{
	struct tb_env *e = *state;
	const struct tb_attrs f = { 0640, 123, 456, 0 }, d = { 0711, 1, 2, 99 };
	struct tb a = { 0 };
	struct stat st;

	tb_pax_header(&a, 'x', TB_LIST("mtime", "1700000000.25"));
	tb_add_attrs(&a, "file", '0', &f, "12345", 5);
	tb_add_attrs(&a, "dir/", '5', &d, NULL, 0);
	tb_link(&a, "sym", '2', "file");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	st = tb_stat(&e->fs, "file");
	assert_int_equal(st.st_mode, S_IFREG | 0640);
	assert_int_equal(st.st_uid, 123);
	assert_int_equal(st.st_gid, 456);
	assert_int_equal(st.st_size, 5);
	assert_int_equal(st.st_blocks, 1);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(st.st_blksize, SHARDFS_BLKSIZE);
	assert_int_equal(st.st_mtim.tv_sec, 1700000000);
	assert_int_equal(st.st_mtim.tv_nsec, 250000000);
	assert_int_equal(st.st_ino, tb_ino(&e->fs, "file"));
	st = tb_stat(&e->fs, "dir");
	assert_int_equal(st.st_mode, S_IFDIR | 0711);
	assert_int_equal(st.st_mtim.tv_sec, 99);
	assert_int_equal(st.st_nlink, 2);
	st = tb_stat(&e->fs, "sym");
	assert_int_equal(st.st_mode, S_IFLNK | 0777);
	assert_int_equal(st.st_size, 4);
}

static void test_getattr_overrides(void **state)
{
	struct tb_env *e = *state;
	const struct tb_attrs f = { 0666, 123, 456, 0 };
	struct tb a = { 0 };
	struct stat st;

	tb_add_attrs(&a, "file", '0', &f, NULL, 0);
	tb_add(&a, "dir/", '5', NULL, 0);
	tb_link(&a, "sym", '2', "file");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);
	e->fs.opt = (struct shardfs_options){
		.set_uid = true, .uid = 77, .set_gid = true, .gid = 88, .umask = 027,
	};

	st = tb_stat(&e->fs, "file");
	assert_int_equal(st.st_mode, S_IFREG | 0640);
	assert_int_equal(st.st_uid, 77);
	assert_int_equal(st.st_gid, 88);
	assert_int_equal(tb_stat(&e->fs, "dir").st_mode, S_IFDIR | 0750);
	assert_int_equal(tb_stat(&e->fs, "sym").st_mode, S_IFLNK | 0750);
	assert_int_equal(tb_stat(&e->fs, "").st_uid, 77);

	e->fs.opt = (struct shardfs_options){ .set_gid = true, .gid = 0 };
	st = tb_stat(&e->fs, "file");
	assert_int_equal(st.st_mode, S_IFREG | 0666);
	assert_int_equal(st.st_uid, 123);		/* only gid overridden */
	assert_int_equal(st.st_gid, 0);
}

static void test_unknown_inodes_and_wrong_types(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct shardfs_dirent de = { 0 };
	const char *s;
	uint64_t ino;
	struct stat st;
	char buf[8];

	tb_file(&a, "file", "x");
	tb_add(&a, "dir/", '5', NULL, 0);
	tb_link(&a, "sym", '2', "some/where");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(shardfs_getattr(&e->fs, 0, &st), -ENOENT);
	assert_int_equal(shardfs_getattr(&e->fs, UINT32_MAX, &st), -ENOENT);
	assert_int_equal(shardfs_read(&e->fs, tb_ino(&e->fs, "dir"), buf, 8, 0),
			 -EISDIR);
	assert_int_equal(shardfs_read(&e->fs, control_ino(&e->fs.control, CONTROL_DIR),
				      buf, 8, 0), -EISDIR);
	assert_int_equal(shardfs_read(&e->fs, control_ino(&e->fs.control, CONTROL_DIR) +
				      CONTROL_NR_NODES, buf, 8, 0), -ENOENT);
	assert_int_equal(shardfs_readlink(&e->fs, tb_ino(&e->fs, "sym"), &s), 0);
	assert_string_equal(s, "some/where");
	assert_int_equal(shardfs_readlink(&e->fs, tb_ino(&e->fs, "file"), &s), -EINVAL);
	assert_int_equal(shardfs_readdir_entry(&e->fs, tb_ino(&e->fs, "file"), 0, &de),
			 -ENOTDIR);
	assert_int_equal(shardfs_readdir_entry(&e->fs, tb_ino(&e->fs, "dir"), 0, &de),
			 -ENOENT);
	assert_int_equal(shardfs_lookup(&e->fs, tb_ino(&e->fs, "file"), "x", &ino),
			 -ENOTDIR);
}

static void test_read_plain_file(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char content[3000];

	for (size_t i = 0; i < sizeof(content); i++)
		content[i] = (char)(i * 7 % 251);
	tb_file(&a, "small", "s");
	tb_add(&a, "big", '0', content, sizeof(content));
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	expect_read(e, "big", 0, 4096, content, sizeof(content));	/* all */
	expect_read(e, "big", 1000, 1000, content, sizeof(content));
	expect_read(e, "big", 2990, 100, content, sizeof(content));	/* clamped */
	expect_read(e, "big", 3000, 100, content, sizeof(content));	/* at EOF */
	expect_read(e, "big", 5000, 100, content, sizeof(content));	/* past */
	expect_read(e, "big", 10, 0, content, sizeof(content));
	expect_read(e, "small", 0, 100, "s", 1);
	assert_int_equal(atomic_load(&e->fs.counters.read_bytes), 3000 + 1000 + 10 + 1);
	assert_int_equal(atomic_load(&e->fs.counters.errors), 0);
}

/* Pages of [off, off + len) of @fd's file that are in the page cache. */
static size_t resident_pages(int fd, uint64_t off, uint64_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t start = off / page * page;
	size_t n = (off + len - start + page - 1) / page, count = 0;
	unsigned char *vec = malloc(n);
	void *map = mmap(NULL, off + len - start, PROT_READ, MAP_SHARED, fd, start);

	assert_non_null(vec);
	assert_true(map != MAP_FAILED);
	assert_int_equal(mincore(map, off + len - start, vec), 0);
	for (size_t i = 0; i < n; i++)
		count += vec[i] & 1;
	munmap(map, off + len - start);
	free(vec);
	return count;
}

/*
 * One try of test_read_drops_the_shard_pages_it_consumed on shard @fd, whose
 * member @ino holds @size bytes of @content from shard offset @data: false
 * when a page that must be resident was not.  A host-wide drop_caches (the
 * suites beside this one drop them) does that too, so the caller tries again.
 */
static bool read_drops_consumed_pages(struct tb_env *e, int fd, uint32_t ino,
				      uint64_t data, const char *content,
				      char *buf, size_t size)
{
	assert_int_equal(pread(fd, buf, size, 0), (ssize_t)size);
	if (resident_pages(fd, 0, 4096) != 1 ||
	    resident_pages(fd, data, size) < size / 4096)
		return false;

	/* the mount's page cache keeps the data: the shard's copy goes */
	assert_int_equal(shardfs_read(&e->fs, ino, buf, size, 0), (ssize_t)size);
	assert_memory_equal(buf, content, size);
	/* all but the folios (up to 2 MiB) at the edges, shared with others */
	assert_true(resident_pages(fd, data, size) <= size / 4096 / 4);
	return resident_pages(fd, 0, 4096) == 1;	/* the headers stay */
}

/*
 * A member read leaves its data in the page cache once: the mount's copy
 * (the kernel keeps it across opens), not also the shard's.
 */
static void test_read_drops_the_shard_pages_it_consumed(void **state)
{
	enum { SIZE = 16 << 20, TRIES = 5 };
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char *content = malloc(SIZE), *buf = malloc(SIZE), path[4096];
	struct shard_inode in;
	struct statfs sfs;
	uint64_t data;
	int fd, try;

	assert_non_null(content);
	assert_non_null(buf);
	memset(content, 'c', SIZE);
	tb_file(&a, "small", "s");
	tb_add(&a, "big", '0', content, SIZE);
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);
	assert_true(shard_index_get(&e->fs.idx, tb_ino(&e->fs, "big"), &in));
	data = shard_index_data_offset(&e->fs.idx, &in);
	snprintf(path, sizeof(path), "%s/s.tar", e->dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstatfs(fd, &sfs), 0);
	if (sfs.f_type == TMPFS_MAGIC) {	/* tmpfs pages are the file */
		close(fd);
		free(content);
		free(buf);
		skip();
	}
	assert_int_equal(fdatasync(fd), 0);	/* clean pages can be dropped */
	for (try = 0; try < TRIES; try++)
		if (read_drops_consumed_pages(e, fd, tb_ino(&e->fs, "big"),
					      data, content, buf, SIZE))
			break;
	assert_true(try < TRIES);
	close(fd);
	free(content);
	free(buf);
}

/* Read member "m<i>" whole; its content is its name. */
static void read_member_i(struct tb_env *e, int i)
{
	char name[16], buf[64];

	snprintf(name, sizeof(name), "m%02d", i);
	expect_read(e, name, 0, sizeof(buf), name, strlen(name));
}

/* One shard of 32 members "m00" .. "m31", each holding its name, built. */
static void build_32_members(struct tb_env *e)
{
	struct tb a = { 0 };
	char name[16];

	for (int i = 0; i < 32; i++) {
		snprintf(name, sizeof(name), "m%02d", i);
		tb_file(&a, name, name);
	}
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);
}

static void test_readahead_only_for_forward_streaks(void **state)
{
	struct tb_env *e = *state;

	build_32_members(e);
	e->fs.opt.readahead = 64 * 1024;

	/* backwards: never forward, never prefetched */
	for (int i = 31; i >= 16; i--)
		read_member_i(e, i);
	assert_int_equal(atomic_load(&e->fs.counters.readahead_misses), 0);
	/* back to the start (not forward), then forward: a window opens at
	 * the third forward read in a row, and serves the reads after it */
	for (int i = 0; i < 3; i++)
		read_member_i(e, i);
	assert_int_equal(atomic_load(&e->fs.counters.readahead_misses), 0);
	read_member_i(e, 3);
	assert_int_equal(atomic_load(&e->fs.counters.readahead_misses), 1);
	for (int i = 4; i < 16; i++)
		read_member_i(e, i);
	assert_int_equal(atomic_load(&e->fs.counters.readahead_misses), 1);
	assert_int_equal(atomic_load(&e->fs.counters.readahead_hits), 12);
}

/* The shard's operations, counting which transfer served a read (static:
 * a failed assertion leaves them in place for the teardown). */
static const struct shard_source_ops *counted_ops;
static struct shard_source_ops counting;
static unsigned counted_reads, counted_jumped;

static ssize_t count_read(struct shard_source *src, void *buf, size_t len,
			  uint64_t off)
{
	counted_reads++;
	return counted_ops->read(src, buf, len, off);
}

static ssize_t count_jumped(struct shard_source *src, void *buf, int pipe_fd,
			    size_t len, uint64_t off)
{
	counted_jumped++;
	return counted_ops->transfer_jumped(src, buf, pipe_fd, len, off);
}

static void test_reads_at_random_until_a_forward_streak(void **state)
{
	struct tb_env *e = *state;
	struct shard_source *src;

	build_32_members(e);
	src = e->fs.set.shards[0].src;
	counted_ops = src->ops;
	counting = *src->ops;
	counting.read = count_read;
	counting.transfer_jumped = count_jumped;
	src->ops = &counting;

	/* a new stream: read at random until it moved forward 3 times */
	for (int i = 0; i < 3; i++)
		read_member_i(e, i);
	assert_int_equal(counted_jumped, 3);
	assert_int_equal(counted_reads, 0);
	for (int i = 3; i < 16; i++)
		read_member_i(e, i);
	assert_int_equal(counted_jumped, 3);
	assert_int_equal(counted_reads, 13);
	/* a jump back ends the streak: the next reads are at random again,
	 * the one after it (which follows) included */
	read_member_i(e, 8);
	read_member_i(e, 9);
	assert_int_equal(counted_jumped, 5);
	assert_int_equal(counted_reads, 13);
	src->ops = counted_ops;
}

/* The logical content of a sparse file: zeros with @runs of @data. */
static char *sparse_content(const struct tar_extent *runs, size_t n,
			    const char *data, size_t size)
{
	char *want = calloc(size, 1);

	assert_non_null(want);
	for (size_t i = 0; i < n; i++) {
		memcpy(want + runs[i].logical, data, runs[i].length);
		data += runs[i].length;
	}
	return want;
}

static void test_read_old_gnu_sparse_file(void **state)
{
	static const struct tar_extent runs[] = {
		{ 100, 50, 0 }, { 5000, 50, 0 }, { 9000, 1000, 0 },
		{ 12000, 0, 0 },	/* GNU tar's marker of the final hole */
	};
	enum { SIZE = 12000 };
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char data[1100], *want;

	memset(data, 'A', 50);
	memset(data + 50, 'B', 50);
	for (size_t i = 100; i < sizeof(data); i++)
		data[i] = (char)('a' + i % 26);
	want = sparse_content(runs, 4, data, SIZE);
	tb_file(&a, "before", "shifts the data");
	tb_old_sparse(&a, "holes", SIZE, runs, 4, data);
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(tb_stat(&e->fs, "holes").st_size, SIZE);
	expect_read(e, "holes", 0, SIZE, want, SIZE);		/* everything */
	expect_read(e, "holes", 0, 100, want, SIZE);		/* leading hole */
	expect_read(e, "holes", 120, 4900, want, SIZE);		/* run, hole, run */
	expect_read(e, "holes", 200, 100, want, SIZE);		/* inside a hole */
	expect_read(e, "holes", 9500, 100, want, SIZE);		/* inside a run */
	expect_read(e, "holes", 9990, 20, want, SIZE);		/* a run's end */
	expect_read(e, "holes", 11990, 100, want, SIZE);	/* clamped */
	expect_read(e, "holes", SIZE, 100, want, SIZE);		/* at EOF */
	free(want);
}

static void test_read_sparse_1_0_file(void **state)
{
	static const struct tar_extent runs[] = { { 100, 10, 0 }, { 40000, 10, 0 } };
	enum { SIZE = 50000 };
	struct tb_env *e = *state;
	struct tb a = { 0 };
	const char *data = "0123456789abcdefghij";
	char *want = sparse_content(runs, 2, data, SIZE);

	tb_sparse_1_0(&a, "real", SIZE, "2\n100\n10\n40000\n10\n", data, 20);
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	expect_read(e, "real", 0, SIZE, want, SIZE);
	expect_read(e, "real", 105, 39900, want, SIZE);
	expect_read(e, "real", 40005, 100000, want, SIZE);
	free(want);
}

/* A sparse member that is all hole reads as zeros, not as what follows. */
static void test_read_all_hole_sparse_file(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char zeros[1000] = { 0 };

	tb_old_sparse(&a, "all-hole", sizeof(zeros), NULL, 0, "");
	tb_file(&a, "after", "not part of all-hole");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	expect_read(e, "all-hole", 0, sizeof(zeros), zeros, sizeof(zeros));
}

static void test_read_after_truncation_is_eio(void **state)
{
	static const struct tar_extent runs[] = { { 0, 600, 0 } };
	struct tb_env *e = *state;
	struct tb a = { 0 };
	char content[10000], buf[sizeof(content)], path[4096];
	uint64_t late;

	memset(content, 'L', sizeof(content));
	tb_file(&a, "early", "e");
	late = tb_add(&a, "late", '0', content, sizeof(content));
	tb_old_sparse(&a, "sparse", 1000, runs, 1, content);
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);
	snprintf(path, sizeof(path), "%s/s.tar", e->dir);
	assert_int_equal(truncate(path, (off_t)(late + TAR_BLOCK_SIZE + 5000)), 0);

	assert_int_equal(shardfs_read(&e->fs, tb_ino(&e->fs, "late"), buf,
				      sizeof(buf), 0), -EIO);
	assert_int_equal(shardfs_read(&e->fs, tb_ino(&e->fs, "late"), buf,
				      2000, 4000), -EIO);	/* spans the cut */
	assert_int_equal(shardfs_read(&e->fs, tb_ino(&e->fs, "sparse"), buf,
				      1000, 0), -EIO);
	assert_int_equal(atomic_load(&e->fs.counters.errors), 3);
	assert_true(atomic_load(&e->fs.streams[0].changed));
}

/*
 * /.shardfs is reachable by name only.  A member of that name is listed
 * by readdir, so lookup must find the same inode, or `ls -l` and `cd`
 * disagree about what the name is.
 */
static void test_dot_shardfs_member_is_reserved(void **state)
{
	struct tb_env *e = *state;
	struct tb a = { 0 };
	struct shardfs_dirent de = { 0 };
	uint64_t found;

	/* the control directory owns the name: the member is skipped, so
	 * readdir and lookup cannot disagree about what it is */
	tb_file(&a, ".shardfs/data.txt", "a member");
	tb_file(&a, "kept", "x");
	tb_env_shard(e, "s.tar", &a);
	tb_env_build(e);

	assert_int_equal(e->fs.idx.counts.skipped, 1);
	assert_int_equal(shardfs_readdir_entry(&e->fs, SHARDFS_ROOT_INO, 0, &de), 0);
	assert_string_equal(de.name, "kept");
	assert_int_equal(shardfs_readdir_entry(&e->fs, SHARDFS_ROOT_INO, 1, &de), -ENOENT);
	assert_int_equal(shardfs_lookup(&e->fs, SHARDFS_ROOT_INO, ".shardfs", &found), 0);
	assert_int_equal(found, control_ino(&e->fs.control, CONTROL_DIR));
}

static void test_init_from_a_spec(void **state)
{
	struct tb_env *e = *state;
	const struct shard_index_build_options bo = { .threads = 1 };
	const struct index_store_options so = { .mode = INDEX_MODE_OFF };
	struct tb a = { 0 };
	struct shardfs fs = { 0 };
	char spec[4096];

	tb_file(&a, "dir/file", "content");
	tb_env_shard(e, "00.tar", &a);
	assert_int_equal(shardfs_init(&fs, e->dir, &bo, &so), 0);
	assert_true(tb_ino(&fs, "dir/file") != 0);
	assert_int_equal(fs.set.nr, 1);
	shardfs_release(&fs);

	snprintf(spec, sizeof(spec), "%s/missing-*.tar", e->dir);
	fs = (struct shardfs){ 0 };
	assert_int_equal(shardfs_init(&fs, spec, &bo, &so), -ENOENT);
	assert_int_equal(fs.set.nr, 0);

	tb_bytes(&a, "not a tar archive", 17);
	tb_zeros(&a, 2);
	tb_save(&a, e->dir, "01.tar");
	tb_free(&a);
	fs = (struct shardfs){ 0 };
	assert_int_equal(shardfs_init(&fs, e->dir, &bo, &so), -EINVAL);
	assert_int_equal(fs.set.nr, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TB_ENV_TEST(test_getattr_reports_tar_attributes),
		TB_ENV_TEST(test_getattr_overrides),
		TB_ENV_TEST(test_unknown_inodes_and_wrong_types),
		TB_ENV_TEST(test_read_plain_file),
		TB_ENV_TEST(test_read_drops_the_shard_pages_it_consumed),
		TB_ENV_TEST(test_readahead_only_for_forward_streaks),
		TB_ENV_TEST(test_reads_at_random_until_a_forward_streak),
		TB_ENV_TEST(test_read_old_gnu_sparse_file),
		TB_ENV_TEST(test_read_sparse_1_0_file),
		TB_ENV_TEST(test_read_all_hole_sparse_file),
		TB_ENV_TEST(test_read_after_truncation_is_eio),
		TB_ENV_TEST(test_dot_shardfs_member_is_reserved),
		TB_ENV_TEST(test_init_from_a_spec),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
