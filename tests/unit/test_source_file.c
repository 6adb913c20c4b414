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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_file_written_just_before_is_clean_once_open),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
