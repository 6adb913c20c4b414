/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source.c - opening a shard by name, and what every source shares.
 *
 * shard_source_open() is the one place that decides what kind of source a
 * name is: a URL (remote.h) or a local path.  The memory source serves
 * tests and fuzzers, which hold archives in memory and must exercise the
 * same scanner and read path as a mount.
 */
#include <errno.h>
#include <string.h>

#include "shardfs/source.h"

int shard_source_open(const char *name, struct shard_source **src,
		      struct shard_source_info *info, char *msg, size_t msg_len)
{
	if (shard_source_is_remote(name))
		return shard_source_open_remote(name, src, info, msg, msg_len);
	return shard_source_open_file(name, src, info, msg, msg_len);
}

bool shard_source_is_remote(const char *name)
{
	return !strncmp(name, "s3://", 5) || !strncmp(name, "http://", 7) ||
	       !strncmp(name, "https://", 8);
}

int shard_source_read_full(struct shard_source *src, void *buf, size_t len,
			   uint64_t off)
{
	ssize_t n = src->ops->read(src, buf, len, off);

	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EIO;
}

static ssize_t mem_read(struct shard_source *src, void *buf, size_t len,
			uint64_t off)
{
	struct shard_source_mem *m = (struct shard_source_mem *)src;

	if (off >= src->size)
		return 0;
	if (len > src->size - off)
		len = src->size - off;
	memcpy(buf, m->data + off, len);
	return (ssize_t)len;
}

static int mem_current_size(struct shard_source *src, uint64_t *size)
{
	*size = src->size;
	return 0;
}

static void mem_close(struct shard_source *src)
{
}

static const struct shard_source_ops mem_ops = {
	.read = mem_read,
	.current_size = mem_current_size,
	.close = mem_close,
};

void shard_source_mem_init(struct shard_source_mem *m, const void *data,
			   uint64_t size)
{
	*m = (struct shard_source_mem){
		.base = { .ops = &mem_ops, .size = size },
		.data = data,
	};
}
