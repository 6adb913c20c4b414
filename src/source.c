/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source.c - opening a shard by name, and what every source shares.
 *
 * shard_source_open() is the one place that decides what kind of source a
 * name is: a URL (remote.h) or a local path.  What the bytes are is told
 * by their first bytes, never by the name (shard_source_detect(), called
 * before a shard is scanned; an index that covers a shard says it
 * instead, so a remount reads nothing): a gzip or zstd stream gets a
 * decoding source on top (source_gzip.c, source_zstd.c), local or
 * remote; other compressions libarchive reads are decoded whole into the
 * decoded cache (source_archive.c), or refused, named, without one.  The
 * memory source serves
 * tests and fuzzers, which hold archives in memory and must exercise the
 * same scanner and read path as a mount.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardfs/log.h"
#include "shardfs/source.h"
#include "shardfs/util.h"

/* Encodings told by their first bytes (magic), never by the name. */
static const struct {
	const char *encoding;		/* what shard_source_wrap() takes */
	unsigned char magic[6];		/* first bytes */
	size_t len;			/* bytes of magic */
	unsigned char any_low;		/* the first byte's low nibble varies */
} magics[] = {
	{ "gzip", { 0x1f, 0x8b, 8 }, 3, 0 },
	{ "zstd", { 0x28, 0xb5, 0x2f, 0xfd }, 4, 0 },
	{ "zstd", { 0x50, 0x2a, 0x4d, 0x18 }, 4, 1 }, /* skippable (pzstd) */
	{ "xz", { 0xfd, '7', 'z', 'X', 'Z', 0 }, 6, 0 },
	{ "bzip2", { 'B', 'Z', 'h' }, 3, 0 },
	{ "lz4", { 0x04, 0x22, 0x4d, 0x18 }, 4, 0 },
	{ "lzip", { 'L', 'Z', 'I', 'P' }, 4, 0 },
	{ "compress", { 0x1f, 0x9d }, 2, 0 },
};

/* Bytes of a raw .lzma stream's header: properties, dictionary, size. */
#define LZMA_ALONE_HEADER 13
/* Properties bytes are (pb * 5 + lp) * 9 + lc: pb <= 4, lp <= 4, lc <= 8. */
#define LZMA_ALONE_PROPS_MAX ((4 * 5 + 4) * 9 + 8)
/* Dictionary sizes encoders write: 2^n or 2^n + 2^(n-1), 4 KiB to 1.5 GiB. */
#define LZMA_ALONE_DICT_MIN (1u << 12)
#define LZMA_ALONE_DICT_MAX (3u << 29)
/* A stated uncompressed size above this is taken for something else. */
#define LZMA_ALONE_SIZE_MAX (1ull << 48)

/*
 * A raw .lzma stream (lzma_alone: `lzma`, `xz --format=lzma`) has no
 * magic; it is told, as libarchive tells it, by its header being
 * plausible.  A tar cannot pass: its first bytes are a NUL-padded name,
 * so bytes 1-4 are either all non-NUL or end in NULs, never a
 * dictionary size of one or two adjacent bits of 4 KiB or more.
 */
static bool lzma_alone(const unsigned char *h, size_t n)
{
	uint32_t dict = le32(h + 1), low = dict & -dict;
	uint64_t size = le_load(h + 5, 8);

	return n >= LZMA_ALONE_HEADER && h[0] <= LZMA_ALONE_PROPS_MAX &&
	       dict >= LZMA_ALONE_DICT_MIN && dict <= LZMA_ALONE_DICT_MAX &&
	       (dict == low || dict == 3 * low) &&
	       (size == UINT64_MAX || size <= LZMA_ALONE_SIZE_MAX);
}

int shard_source_wrap(struct shard_source **src, const char *name,
		      const char *encoding, char *msg, size_t msg_len)
{
	int rc;

	if (!strcmp(encoding, "gzip"))
		rc = shard_source_open_gzip(*src, name, src);
	else if (!strcmp(encoding, "zstd"))
		rc = shard_source_open_zstd(*src, name, src);
	else
		rc = shard_source_open_archive(*src, name, encoding, src);
	if (rc == -ENOTSUP)
		return log_format(msg, msg_len, -EINVAL, "compressed with %s, which has "
				  "no places to start decoding: it is served only from a "
				  "decoded cache; add -o cache_dir=DIR (local disk), or "
				  "recompress it with gzip or zstd", encoding);
	return rc ? log_format(msg, msg_len, rc, "%s", strerror(-rc)) : 0;
}

int shard_source_detect(struct shard_source **src, const char *name, char *msg,
			size_t msg_len)
{
	unsigned char head[LZMA_ALONE_HEADER] = { 0 };
	ssize_t n;

	if ((*src)->encoding)
		return 0;	/* decoding already: its first bytes are the tar's */
	n = (*src)->ops->read(*src, head, sizeof(head), 0);

	if (n < 0)
		return log_format(msg, msg_len, (int)n, "%s", strerror((int)-n));
	for (size_t i = 0; i < sizeof(magics) / sizeof(*magics); i++) {
		unsigned char first = magics[i].any_low ? head[0] & 0xf0 : head[0];

		if ((size_t)n >= magics[i].len && first == magics[i].magic[0] &&
		    !memcmp(head + 1, magics[i].magic + 1, magics[i].len - 1))
			return shard_source_wrap(src, name, magics[i].encoding, msg, msg_len);
	}
	if (lzma_alone(head, n > 0 ? (size_t)n : 0))
		return shard_source_wrap(src, name, "lzma", msg, msg_len);
	return 0;
}

int shard_source_open(const char *name, struct remote *remote,
		      struct shard_decoders *decoders, struct shard_source **src,
		      struct shard_source_info *info, char *msg, size_t msg_len)
{
	int rc;

	if (shard_source_is_remote(name))
		rc = shard_source_open_remote(remote, name, src, info, msg, msg_len);
	else
		rc = shard_source_open_file(name, src, info, msg, msg_len);
	if (!rc)
		(*src)->decoders = decoders;
	return rc;
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
