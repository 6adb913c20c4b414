/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_source_file.c - a shard written just before it is opened has no
 * dirty page left once shard_source_open_file() returns (source_file.c,
 * write_back()), and reads back as written.
 *
 * The page cache is asked with cachestat(2) (Linux 6.5); the test skips
 * on an older kernel, on a file system without writeback (a tmpfs $TMPDIR
 * or /tmp), and
 * when the kernel had written the file back before the open (nothing
 * left to see).
 *
 * Reads that jumped (transfer_jumped) read and splice the file's bytes
 * through a second descriptor of the same file, even once its path names
 * another file, and closing the source closes both.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include "shardfs/source.h"
#include "tarbuild.h"

#ifndef __NR_cachestat
#define __NR_cachestat 451	/* the same on every architecture */
#endif

/* Bytes written: well under the kernel's background writeback threshold. */
#define FILE_BYTES (8u << 20)

/* As <linux/mman.h> of 6.5 has them. */
struct cachestat_range {
	uint64_t off;
	uint64_t len;
};

struct cachestat {
	uint64_t nr_cache;
	uint64_t nr_dirty;
	uint64_t nr_writeback;
	uint64_t nr_evicted;
	uint64_t nr_recently_evicted;
};

/* Dirty and under-writeback pages of @path; -errno when it cannot tell. */
static long dirty_pages(const char *path)
{
	struct cachestat_range range = { 0, 0 };	/* the whole file */
	struct cachestat cs;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long rc;

	if (fd < 0)
		return -errno;
	rc = syscall(__NR_cachestat, fd, &range, &cs, 0) ? -errno :
	     (long)(cs.nr_dirty + cs.nr_writeback);
	close(fd);
	return rc;
}

/* A new file of FILE_BYTES at @path; its bytes in *@data. */
static void write_file(const char *path, unsigned char **data)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	*data = malloc(FILE_BYTES);
	assert_non_null(*data);
	for (size_t i = 0; i < FILE_BYTES; i++)
		(*data)[i] = (unsigned char)(i * 2654435761u >> 13);
	assert_int_equal(write(fd, *data, FILE_BYTES), FILE_BYTES);
	close(fd);
}

static void test_a_file_written_just_before_is_clean_once_open(void **state)
{
	char *dir = tb_tmpdir(), path[4096], msg[256];
	struct shard_source_info info = { 0 };
	struct shard_source *src;
	unsigned char *data, *back;

	(void)state;
	snprintf(path, sizeof(path), "%s/shard.tar", dir);
	write_file(path, &data);
	if (dirty_pages(path) <= 0) {
		tb_rmtree(dir);
		free(data);
		skip();	/* no cachestat, no writeback, or nothing left dirty */
	}
	assert_int_equal(shard_source_open_file(path, &src, &info, msg,
						sizeof(msg)), 0);
	assert_int_equal(dirty_pages(path), 0);
	back = malloc(FILE_BYTES);
	assert_non_null(back);
	assert_int_equal(src->ops->read(src, back, FILE_BYTES, 0), FILE_BYTES);
	assert_memory_equal(back, data, FILE_BYTES);
	assert_int_equal(info.stored_size, FILE_BYTES);
	shard_source_close(src);
	free(info.name);
	free(back);
	free(data);
	tb_rmtree(dir);
}

/* Descriptors this process has open. */
static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void test_jumped_reads_go_through_the_same_file(void **state)
{
	char *dir = tb_tmpdir(), path[4096], other[4096], msg[256];
	struct shard_source_info info = { 0 };
	struct shard_source *src;
	unsigned char *data, *decoy, back[4096];
	unsigned before = open_fds();
	int pipefd[2];

	(void)state;
	snprintf(path, sizeof(path), "%s/shard.tar", dir);
	snprintf(other, sizeof(other), "%s/other.tar", dir);
	write_file(path, &data);
	assert_int_equal(shard_source_open_file(path, &src, &info, msg, sizeof(msg)), 0);
	assert_non_null(src->ops->transfer_jumped);
	/* the path names another file now: the source still reads its own */
	write_file(other, &decoy);
	decoy[12345] ^= 0xff;
	assert_int_equal(rename(other, path), 0);
	assert_int_equal(src->ops->transfer_jumped(src, back, -1, sizeof(back), 12000),
			 sizeof(back));
	assert_memory_equal(back, data + 12000, sizeof(back));
	assert_int_equal(open_fds(), before + 2);	/* the file's two descriptors */
	assert_int_equal(pipe(pipefd), 0);
	assert_int_equal(src->ops->transfer_jumped(src, NULL, pipefd[1], 1000,
						   FILE_BYTES - 1000), 1000);
	assert_int_equal(read(pipefd[0], back, sizeof(back)), 1000);
	assert_memory_equal(back, data + FILE_BYTES - 1000, 1000);
	/* past the end: what read() returns, a short count */
	assert_int_equal(src->ops->transfer_jumped(src, back, -1, 100, FILE_BYTES - 10), 10);
	close(pipefd[0]);
	close(pipefd[1]);
	shard_source_close(src);
	assert_int_equal(open_fds(), before);
	free(info.name);
	free(decoy);
	free(data);
	tb_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_file_written_just_before_is_clean_once_open),
		cmocka_unit_test(test_jumped_reads_go_through_the_same_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
