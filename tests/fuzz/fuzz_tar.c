/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tar.c - libFuzzer target for the tar scanner (tar_scan).
 *
 * The input is one archive, scanned through a memory source: tar_scan
 * reads every source alike (source.h), so this is the scan of a shard.  The
 * member callback reads every byte that tar_scan hands out (names, link
 * targets, sparse maps), so ASan catches pointers into freed or foreign
 * memory, and checks the promises of tar.h that the read path relies on:
 * a file's data, and each run of a sparse file, lie inside the archive,
 * and sparse runs are in order and inside the file.  The warn callback
 * reads its message.  The scan's result must be one of the documented
 * ones, with a terminated message when it failed.
 *
 * The archive is then gzip-compressed and scanned again through a gzip
 * source (source_gzip.c), after its seek table is built: the same result
 * and the same members must come out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "fuzz_common.h"
#include "shardfs/tar.h"

/* The archive being scanned, for the callbacks. */
struct scan_ctx {
	uint64_t file_size;	/* bytes in the archive */
	uint64_t members;	/* members the scan reported */
};

static int gzip_fd = -1;	/* holds the compressed archive */
static struct shard_decoders *decoders; /* it decodes with them */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_keep_stderr();
	FUZZ_CHECK(!shard_decoders_new(NULL, &decoders), "out of memory");
	gzip_fd = memfd_create("fuzz-tar-gz", MFD_CLOEXEC);
	FUZZ_CHECK(gzip_fd >= 0, "memfd_create: %s", strerror(errno));
	return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
			       unsigned int seed)
{
	return fuzz_mutate(data, size, max_size, seed, false);
}

/* Runs of a sparse file: in order, inside the file and the archive. */
static void check_extents(const struct scan_ctx *ctx, const struct tar_member *m)
{
	uint64_t end = 0;

	for (size_t i = 0; i < m->nr_extents; i++) {
		const struct tar_extent *e = &m->extents[i];

		FUZZ_CHECK(e->logical >= end && e->length <= m->size &&
			   e->logical <= m->size - e->length,
			   "run %zu [%llu, +%llu) out of order or past the size %llu",
			   i, (ull)e->logical, (ull)e->length, (ull)m->size);
		FUZZ_CHECK(e->physical >= m->data_offset &&
			   e->physical <= ctx->file_size &&
			   e->length <= ctx->file_size - e->physical,
			   "run %zu stored at [%llu, +%llu), archive is %llu bytes",
			   i, (ull)e->physical, (ull)e->length, (ull)ctx->file_size);
		end = e->logical + e->length;
	}
}

static void check_member(const struct scan_ctx *ctx, const struct tar_member *m)
{
	FUZZ_CHECK(m->type <= TAR_SPECIAL, "type %d", (int)m->type);
	FUZZ_CHECK(m->mode <= 07777, "mode %o", m->mode);
	FUZZ_CHECK(m->mtime_nsec < 1000000000u, "mtime_nsec %u", m->mtime_nsec);
	FUZZ_CHECK(m->header_offset % TAR_BLOCK_SIZE == 0 &&
		   m->header_offset < m->data_offset &&
		   m->data_offset <= ctx->file_size,
		   "header at %llu, data at %llu, archive is %llu bytes",
		   (ull)m->header_offset, (ull)m->data_offset, (ull)ctx->file_size);
	if (m->type != TAR_FILE)
		return;
	if (m->sparse)
		check_extents(ctx, m);
	else
		FUZZ_CHECK(m->size <= ctx->file_size - m->data_offset,
			   "file data [%llu, +%llu) past the end of the archive (%llu bytes)",
			   (ull)m->data_offset, (ull)m->size, (ull)ctx->file_size);
}

static int on_member(void *arg, const struct tar_member *m)
{
	((struct scan_ctx *)arg)->members++;
	fuzz_touch(m->path, m->path_len);
	fuzz_touch(m->link, m->link_len);
	fuzz_touch(m->extents, m->nr_extents * sizeof(*m->extents));
	check_member(arg, m);
	return 0;
}

static void on_warn(void *arg, uint64_t offset, const char *msg)
{
	const struct scan_ctx *ctx = arg;

	fuzz_touch(msg, strlen(msg));
	FUZZ_CHECK(offset < ctx->file_size, "warning at %llu of %llu: %s",
		   (ull)offset, (ull)ctx->file_size, msg);
}

static const struct tar_scan_ops ops = { on_member, on_warn };

/* The archive as a gzip stream, scanned as a mount scans a .tar.gz. */
static void scan_gzip(const uint8_t *data, size_t size, int want_rc,
		      uint64_t want_members)
{
	uLongf zlen = compressBound(size) + 32;
	unsigned char *z = malloc(zlen);
	struct shard_source *raw, *gz;
	struct scan_ctx ctx = { .file_size = size };
	z_stream zs = { 0 };
	struct tar_error err;
	char msg[256];
	int rc;

	FUZZ_CHECK(z && deflateInit2(&zs, 1, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK,
		   "deflateInit2");
	zs.next_in = (unsigned char *)data;
	zs.avail_in = (uInt)size;
	zs.next_out = z;
	zs.avail_out = (uInt)zlen;
	FUZZ_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END, "deflate");
	fuzz_set_file(gzip_fd, z, zlen - zs.avail_out);
	deflateEnd(&zs);
	free(z);
	FUZZ_CHECK(!shard_source_open_fd(dup(gzip_fd), &raw), "open the gzip file");
	raw->decoders = decoders;
	FUZZ_CHECK(!shard_source_open_gzip(raw, "fuzz.tar.gz", &gz), "gzip source");
	FUZZ_CHECK(!gz->ops->seek_build(gz, msg, sizeof(msg)), "seek table: %s", msg);
	FUZZ_CHECK(gz->size == size, "gzip stream of %llu bytes for %zu",
		   (ull)gz->size, size);
	rc = tar_scan(gz, &ops, &ctx, &err);
	FUZZ_CHECK(rc == want_rc && ctx.members == want_members,
		   "through gzip: %d and %llu members, plain: %d and %llu",
		   rc, (ull)ctx.members, want_rc, (ull)want_members);
	shard_source_close(gz);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct scan_ctx ctx = { .file_size = size };
	struct shard_source_mem src;
	struct tar_error err;
	int rc;

	shard_source_mem_init(&src, data, size);
	memset(&err, 0xa5, sizeof(err));	/* unterminated unless filled */
	rc = tar_scan(&src.base, &ops, &ctx, &err);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM,
		   "tar_scan returned %d", rc);
	if (rc == -EINVAL)
		FUZZ_CHECK(memchr(err.msg, '\0', sizeof(err.msg)) && err.msg[0],
			   "-EINVAL without a message");
	if (rc != -ENOMEM)
		scan_gzip(data, size, rc, ctx.members);
	return 0;
}
