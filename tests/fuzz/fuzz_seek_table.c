/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_seek_table.c - libFuzzer target for the seek-point sections of the
 * index file (seek_table.h) and the decoding they drive.
 *
 * The input is a seek table as the index file stores it: a 16-byte head
 * (the tar stream size and a number of points), the points, then the
 * pool of compressed windows.  seek_table_check() is the loader's gate;
 * a table it accepts is given to a gzip source over a fixed stream (one
 * member and a member split, made at start-up), as a remount would, and
 * read at its start, middle, end and every point: whatever the table
 * says, the reads must end (bytes or an error), never crash or hang.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "fuzz_common.h"
#include "shardfs/seek_table.h"
#include "shardfs/source.h"

/* Bytes of the fixed tar-like stream the tables are tried on. */
#define STREAM_SIZE (192u * 1024)

static struct shard_decoders *decoders; /* gz decodes with them */
static struct shard_source *gz;	/* the fixed stream, gzip */
static unsigned char *plain;	/* its bytes */
static char *buf;		/* a read's bytes */

/* @len bytes at @p gzip-compressed into two members at @out. */
static size_t two_members(const unsigned char *p, size_t len, unsigned char *out,
			  size_t cap)
{
	size_t done = 0;

	for (int m = 0; m < 2; m++) {
		z_stream zs = { 0 };

		FUZZ_CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8,
					Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
		zs.next_in = (unsigned char *)p + m * (len / 2);
		zs.avail_in = (uInt)(m ? len - len / 2 : len / 2);
		zs.next_out = out + done;
		zs.avail_out = (uInt)(cap - done);
		FUZZ_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END, "deflate");
		done = cap - zs.avail_out;
		deflateEnd(&zs);
	}
	return done;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t cap = compressBound(STREAM_SIZE) + 64, len;
	unsigned char *z = malloc(cap);
	struct shard_source *raw;
	int fd;

	fuzz_keep_stderr();
	plain = malloc(STREAM_SIZE);
	buf = malloc(STREAM_SIZE);
	FUZZ_CHECK(z && plain && buf, "out of memory");
	for (size_t i = 0; i < STREAM_SIZE; i++)
		plain[i] = (unsigned char)("tar shard "[i % 10] + (i / 4099) % 3);
	len = two_members(plain, STREAM_SIZE, z, cap);
	fd = memfd_create("fuzz-seek", MFD_CLOEXEC);
	FUZZ_CHECK(fd >= 0, "memfd_create: %s", strerror(errno));
	fuzz_set_file(fd, z, len);
	FUZZ_CHECK(!shard_source_open_fd(fd, &raw), "open the stream");
	FUZZ_CHECK(!shard_decoders_new(NULL, &decoders), "out of memory");
	raw->decoders = decoders;
	FUZZ_CHECK(!shard_source_open_gzip(raw, "fuzz.tar.gz", &gz), "gzip source");
	free(z);
	return 0;
}

static void read_at(uint64_t off, size_t len)
{
	ssize_t n = gz->ops->read(gz, buf, len, off);

	FUZZ_CHECK(n == -EIO || (n >= 0 && (size_t)n <= len), "read returned %zd", n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct seek_table t = { 0 };
	uint64_t head[2], bad;
	size_t plen;

	if (size < sizeof(head))
		return 0;
	memcpy(head, data, sizeof(head));
	t.size = head[0] % (2 * STREAM_SIZE);
	t.nr = head[1] % 64;
	plen = t.nr * sizeof(struct seek_point);
	if (size - sizeof(head) < plen)
		return 0;
	/* the points must be aligned as they are in the loaded index */
	t.points = memcpy(malloc(plen + 1), data + sizeof(head), plen);
	t.windows = data + sizeof(head) + plen;
	t.windows_len = size - sizeof(head) - plen;
	FUZZ_CHECK(!gz->ops->current_size(gz, &t.stored_size), "size");
	if (seek_table_check(&t, &bad) && !gz->ops->seek_set(gz, &t)) {
		read_at(0, 4096);
		read_at(t.size / 2, 65536);
		read_at(t.size ? t.size - 1 : 0, 1);
		for (uint64_t i = 0; i < t.nr; i++)
			read_at(t.points[i].out, 8192);
		gz->ops->seek_set(gz, NULL);
	}
	free((void *)t.points);
	return 0;
}
