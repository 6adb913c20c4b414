/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compress.c - shardfs-pack --compress: each buffer of tar bytes the
 * writer flushes (1 MiB) becomes one gzip member or one zstd frame.
 *
 * Members and frames that start every megabyte are what shardfs needs to
 * read a compressed shard at random (source_gzip.c, source_zstd.c: each
 * start is a seek point, and nothing has to be kept but its offsets),
 * while gzip -d, zstd -d and tar read the result as any other .tar.gz or
 * .tar.zst.  The cost is the compression ratio lost by restarting every
 * megabyte: about 1 % on text, nothing on JPEG.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "pack.h"

int pack_compress_parse(const char *arg, struct pack_compress *c)
{
	const char *colon = strchr(arg, ':');
	size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
	char *end;
	long level;

	if (len == 4 && !strncmp(arg, "gzip", 4))
		*c = (struct pack_compress){ PACK_COMPRESS_GZIP, Z_DEFAULT_COMPRESSION };
	else if (len == 4 && !strncmp(arg, "zstd", 4))
		*c = (struct pack_compress){ PACK_COMPRESS_ZSTD, ZSTD_CLEVEL_DEFAULT };
	else
		return -EINVAL;
	if (!colon)
		return 0;
	errno = 0;
	level = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end)
		return -EINVAL;
	if (c->kind == PACK_COMPRESS_GZIP ? level < 1 || level > 9
					  : level < 1 || level > ZSTD_maxCLevel())
		return -EINVAL;
	c->level = (int)level;
	return 0;
}

int pack_compress_check_name(const struct pack_compress *c, const char *pattern)
{
	static const struct {
		const char *suffix;		/* of OUT_PATTERN */
		enum pack_compression kind;	/* what it promises */
	} names[] = {
		{ ".tar", PACK_COMPRESS_NONE }, { ".tar.gz", PACK_COMPRESS_GZIP },
		{ ".tgz", PACK_COMPRESS_GZIP }, { ".tar.zst", PACK_COMPRESS_ZSTD },
	};
	static const char *const option[] = { "", "--compress=gzip", "--compress=zstd" };
	static const char *const suffix[] = { ".tar", ".tar.gz", ".tar.zst" };
	static const char *const kind[] = { "plain tar", "gzip", "zstd" };
	size_t n = strlen(pattern);

	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
		size_t k = strlen(names[i].suffix);

		if (n < k || strcmp(pattern + n - k, names[i].suffix) ||
		    names[i].kind == c->kind)
			continue;
		pack_error("%s: a %s name for %s shards: end OUT_PATTERN in %s%s%s",
			   pattern, names[i].suffix,
			   kind[c->kind],
			   suffix[c->kind],
			   c->kind == PACK_COMPRESS_NONE ? ", or add " : "",
			   c->kind == PACK_COMPRESS_NONE ? option[names[i].kind] : "");
		return -EINVAL;
	}
	return 0;
}

int pack_compressor_init(struct pack_compressor *z, const struct pack_compress *c,
			 size_t max_in)
{
	*z = (struct pack_compressor){ .c = *c };
	if (c->kind == PACK_COMPRESS_NONE)
		return 0;
	z->cap = c->kind == PACK_COMPRESS_GZIP ? compressBound(max_in) + 32
					       : ZSTD_compressBound(max_in);
	z->out = malloc(z->cap);
	if (c->kind == PACK_COMPRESS_ZSTD)
		z->cctx = ZSTD_createCCtx();
	if (!z->out || (c->kind == PACK_COMPRESS_ZSTD && !z->cctx)) {
		pack_compressor_release(z);
		return -ENOMEM;
	}
	return 0;
}

void pack_compressor_release(struct pack_compressor *z)
{
	ZSTD_freeCCtx(z->cctx);
	free(z->out);
	z->cctx = NULL;
	z->out = NULL;
}

/* One gzip member of @len bytes at @in into z->out. */
static int gzip_member(struct pack_compressor *z, const void *in, size_t len,
		       size_t *out_len)
{
	z_stream zs = { 0 };
	int zrc;

	if (deflateInit2(&zs, z->c.level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	zs.next_in = (unsigned char *)in;
	zs.avail_in = (uInt)len;
	zs.next_out = z->out;
	zs.avail_out = (uInt)z->cap;
	zrc = deflate(&zs, Z_FINISH);
	*out_len = z->cap - zs.avail_out;
	deflateEnd(&zs);
	return zrc == Z_STREAM_END ? 0 : -EIO;
}

int pack_compress_block(struct pack_compressor *z, const void *in, size_t len,
			size_t *out_len)
{
	size_t n;

	if (z->c.kind == PACK_COMPRESS_GZIP)
		return gzip_member(z, in, len, out_len);
	/* the frame records its content size: a damaged frame is skipped
	 * by a reader that can still tell where the next one's bytes go */
	ZSTD_CCtx_reset(z->cctx, ZSTD_reset_session_only);
	ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_compressionLevel, z->c.level);
	ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_checksumFlag, 1);
	n = ZSTD_compress2(z->cctx, z->out, z->cap, in, len);
	if (ZSTD_isError(n))
		return -EIO;
	*out_len = n;
	return 0;
}
