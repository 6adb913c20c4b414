/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_zstd_seek_table.c - libFuzzer target for the zstd seekable
 * format's seek table (source_zstd.c).
 *
 * At start-up a fixed tar (small and large members, so that frames both
 * share seek points and start their own) is compressed with libzstd into
 * one frame per member group, twice: with the frames' content sizes in
 * their headers, and without.  Each input puts a tail after those frames,
 * as the seek table the file ends with; the first byte picks the frames
 * and how the rest makes the tail:
 *
 *   mode 0  (and 3) the rest is the tail, as it is;
 *   mode 1  the rest is the entries of a table the harness frames (its
 *           skippable frame header and footer right), with a frame count
 *           off by the next byte when asked;
 *   mode 2  the true table of the frames (with or without per-frame
 *           checksums), edited by the rest, 3-byte (edit, entry, value)
 *           triples: merge two entries (keeping the first's size, or
 *           adding them), add to a compressed or decompressed size, drop
 *           or repeat an entry, change the frame count.
 *
 * The file is opened the way a mount opens a shard (a memfd under
 * shard_source_detect() and seek_build()), then the tar is read through
 * it.  Whatever the table says, the build must succeed (the frames are
 * sound) and serve at least the tar, and every byte of the tar must read
 * back as the fixed tar's: a table accepted has to be right, one rejected
 * or ignored leaves the frames scanned.  The table the build made must
 * pass seek_table_check(), as it would when the index loads it again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include "fuzz_common.h"
#include "shardfs/seek_table.h"
#include "shardfs/source.h"
#include "shardfs/tar.h"

/* Members of the fixed tar, in frames: bytes of each, 0 ends a frame. */
static const size_t member_sizes[] = {
	1000, 3000, 0, 300 * 1024, 0, 100, 0, 280 * 1024, 70 * 1024, 0, 5, 0,
};
/* The fixed tar: members, then the two end-of-archive blocks. */
#define TAR_MAX (1u << 20)
/* Frames of the fixed tar. */
#define FRAMES_MAX 8
/* Most bytes of a tail the harness builds. */
#define TAIL_MAX (1u << 17)
/* Seek table: skippable frame magic, footer magic and sizes. */
#define TABLE_MAGIC 0x184D2A5Eu
#define FOOTER_MAGIC 0x8F92EAB1u
#define FOOTER_LEN 9
#define TABLE_HEADER_LEN 8
#define DESC_CHECKSUM 0x80u
/* Most entries an edited table holds. */
#define ENTRIES_MAX 32

/* The fixed frames, compressed one way. */
struct frames {
	unsigned char *data;		/* the frames, back to back */
	size_t len;			/* bytes in data */
	uint32_t nr;			/* frames */
	uint32_t csize[FRAMES_MAX];	/* compressed bytes of each */
	uint32_t dsize[FRAMES_MAX];	/* tar bytes of each */
};

static unsigned char *tar;	/* the fixed tar */
static size_t tar_len;		/* its bytes */
static struct frames sized, unsized; /* with content sizes, and without */
static unsigned char *file;	/* frames and tail of one input */
static unsigned char *got;	/* the tar as read through the source */
static int file_fd = -1;	/* file, as the shard */
static struct shard_decoders *decoders; /* it decodes with them */

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* A ustar header for member @i of @size bytes at @blk. */
static void tar_header(unsigned char *blk, size_t i, size_t size)
{
	unsigned int sum = 0;

	memset(blk, 0, TAR_BLOCK_SIZE);
	snprintf((char *)blk, 100, "samples/%06zu.bin", i);
	snprintf((char *)blk + 100, 8, "%07o", 0644);
	snprintf((char *)blk + 108, 8, "%07o", 0);
	snprintf((char *)blk + 116, 8, "%07o", 0);
	snprintf((char *)blk + 124, 12, "%011zo", size);
	snprintf((char *)blk + 136, 12, "%011o", 1700000000);
	blk[156] = '0';
	memcpy(blk + 257, "ustar\0" "00", 8);
	memset(blk + 148, ' ', 8);
	for (int k = 0; k < TAR_BLOCK_SIZE; k++)
		sum += blk[k];
	snprintf((char *)blk + 148, 8, "%06o", sum);
}

/* Append member @i of @size bytes: its bytes tell their offset, so that
 * shifted data never reads as right. */
static void tar_member(size_t i, size_t size)
{
	FUZZ_CHECK(tar_len + size + 4 * TAR_BLOCK_SIZE <= TAR_MAX, "tar too long");
	tar_header(tar + tar_len, i, size);
	tar_len += TAR_BLOCK_SIZE;
	for (size_t k = 0; k < size; k++)
		tar[tar_len + k] = (unsigned char)("0123456789abcdef"[k % 16] ^
						   ((tar_len + k) >> 12) ^ i);
	tar_len += (size + TAR_BLOCK_SIZE - 1) / TAR_BLOCK_SIZE * TAR_BLOCK_SIZE;
}

/* Compress [@from, @to) of the tar as @f's next frame. */
static void add_frame(struct frames *f, ZSTD_CCtx *cc, size_t from, size_t to)
{
	size_t cap = ZSTD_compressBound(to - from), n;

	FUZZ_CHECK(f->nr < FRAMES_MAX, "too many frames");
	f->data = realloc(f->data, f->len + cap);
	FUZZ_CHECK(f->data, "out of memory");
	n = ZSTD_compress2(cc, f->data + f->len, cap, tar + from, to - from);
	FUZZ_CHECK(!ZSTD_isError(n), "ZSTD_compress2: %s", ZSTD_getErrorName(n));
	f->csize[f->nr] = (uint32_t)n;
	f->dsize[f->nr] = (uint32_t)(to - from);
	f->len += n;
	f->nr++;
}

/* Compress the tar's frames into @f, stating content sizes if @sizes. */
static void make_frames(struct frames *f, const size_t *ends, uint32_t nr,
			bool sizes)
{
	ZSTD_CCtx *cc = ZSTD_createCCtx();

	FUZZ_CHECK(cc, "ZSTD_createCCtx");
	ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 1);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, sizes);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
	for (uint32_t i = 0; i < nr; i++)
		add_frame(f, cc, i ? ends[i - 1] : 0, ends[i]);
	ZSTD_freeCCtx(cc);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t ends[FRAMES_MAX], m = 0;
	uint32_t nr = 0;

	fuzz_keep_stderr();
	FUZZ_CHECK(!shard_decoders_new(NULL, &decoders), "out of memory");
	tar = calloc(1, TAR_MAX);
	got = malloc(TAR_MAX);
	FUZZ_CHECK(tar && got, "out of memory");
	for (size_t i = 0; i < sizeof(member_sizes) / sizeof(*member_sizes); i++) {
		if (member_sizes[i]) {
			tar_member(m++, member_sizes[i]);
			continue;
		}
		if (i + 1 == sizeof(member_sizes) / sizeof(*member_sizes))
			tar_len += 2 * TAR_BLOCK_SIZE;	/* end of archive */
		ends[nr++] = tar_len;
	}
	make_frames(&sized, ends, nr, true);
	make_frames(&unsized, ends, nr, false);
	file = malloc(sized.len + unsized.len + TAIL_MAX);
	FUZZ_CHECK(file, "out of memory");
	file_fd = memfd_create("fuzz-zstd-seek-table", MFD_CLOEXEC);
	FUZZ_CHECK(file_fd >= 0, "memfd_create: %s", strerror(errno));
	return 0;
}

/* A seek table at @p of @nr entries from @e (each @esize bytes) stating
 * @frames frames; its length. */
static size_t put_table(unsigned char *p, const unsigned char *e, size_t nr,
			size_t esize, uint32_t frames, uint8_t desc)
{
	size_t body = nr * esize + FOOTER_LEN;

	put_le32(p, TABLE_MAGIC);
	put_le32(p + 4, (uint32_t)body);
	memcpy(p + TABLE_HEADER_LEN, e, nr * esize);
	put_le32(p + TABLE_HEADER_LEN + nr * esize, frames);
	p[TABLE_HEADER_LEN + nr * esize + 4] = desc;
	put_le32(p + TABLE_HEADER_LEN + nr * esize + 5, FOOTER_MAGIC);
	return TABLE_HEADER_LEN + body;
}

/* Mode 1: the table holds the entries @data says. */
static size_t framed_tail(unsigned char *p, const uint8_t *data, size_t size,
			  uint8_t mode)
{
	size_t esize = mode & 0x10 ? 12 : 8, nr;
	int delta = 0;

	if ((mode & 0x20) && size > 0) {
		delta = (int8_t)data[0];
		data++;
		size--;
	}
	nr = size / esize;
	if (nr * esize + TABLE_HEADER_LEN + FOOTER_LEN > TAIL_MAX)
		nr = (TAIL_MAX - TABLE_HEADER_LEN - FOOTER_LEN) / esize;
	return put_table(p, data, nr, esize, (uint32_t)((int)nr + delta),
			 mode & 0x10 ? DESC_CHECKSUM : 0);
}

/* One entry of a table being edited. */
struct entry {
	uint32_t c;	/* compressed bytes */
	uint32_t d;	/* decompressed bytes */
};

/* Apply edit @op with argument @v to entry @i of @e (@nr of them). */
static void edit(struct entry *e, size_t *nr, int32_t *frames, uint8_t op,
		 size_t i, int8_t v)
{
	op %= 7;
	if (i >= *nr && op != 6)
		return;
	switch (op) {
	case 0:	/* merge with the next, keeping the first's size */
	case 1:	/* merge with the next, sizes added */
		if (i + 1 == *nr)
			return;
		e[i].c += e[i + 1].c;
		e[i].d += op == 1 ? e[i + 1].d : 0;
		memmove(e + i + 1, e + i + 2, (*nr - i - 2) * sizeof(*e));
		(*nr)--;
		(*frames)--;
		return;
	case 2:
		e[i].c += (uint32_t)(int32_t)v;
		return;
	case 3:
		e[i].d += (uint32_t)(int32_t)v;
		return;
	case 4:	/* drop */
		memmove(e + i, e + i + 1, (*nr - i - 1) * sizeof(*e));
		(*nr)--;
		(*frames)--;
		return;
	case 5:	/* say twice */
		if (*nr == ENTRIES_MAX)
			return;
		memmove(e + i + 1, e + i, (*nr - i) * sizeof(*e));
		(*nr)++;
		(*frames)++;
		return;
	default:
		*frames += v;
		return;
	}
}

/* Mode 2: the true table of @f, edited by (op, entry, value) triples. */
static size_t edited_tail(unsigned char *p, const struct frames *f,
			  const uint8_t *data, size_t size, uint8_t mode)
{
	size_t esize = mode & 0x10 ? 12 : 8, nr = f->nr;
	unsigned char raw[ENTRIES_MAX * 12];
	struct entry e[ENTRIES_MAX];
	int32_t frames = (int32_t)f->nr;

	for (uint32_t i = 0; i < f->nr; i++)
		e[i] = (struct entry){ f->csize[i], f->dsize[i] };
	for (size_t k = 0; k + 3 <= size; k += 3)
		edit(e, &nr, &frames, data[k], data[k + 1], (int8_t)data[k + 2]);
	for (size_t i = 0; i < nr; i++) {
		put_le32(raw + i * esize, e[i].c);
		put_le32(raw + i * esize + 4, e[i].d);
		if (esize == 12)
			put_le32(raw + i * esize + 8, e[i].d * 2654435761u);
	}
	return put_table(p, raw, nr, esize, (uint32_t)frames,
			 mode & 0x10 ? DESC_CHECKSUM : 0);
}

/* Open the file as a mount opens a shard, and read the tar through it. */
static void open_and_read(size_t len)
{
	const struct seek_table *t;
	struct shard_source *src;
	char msg[256];
	uint64_t bad;
	int fd = dup(file_fd);

	FUZZ_CHECK(fd >= 0, "dup: %s", strerror(errno));
	fuzz_set_file(file_fd, file, len);
	FUZZ_CHECK(!shard_source_open_fd(fd, &src), "open the file");
	src->decoders = decoders;
	FUZZ_CHECK(!shard_source_detect(&src, "fuzz.tar.zst", msg, sizeof(msg)),
		   "detect: %s", msg);
	FUZZ_CHECK(src->encoding && !strcmp(src->encoding, "zstd"),
		   "not told zstd: %s", src->encoding ? src->encoding : "tar");
	if (src->ops->seek_build(src, msg, sizeof(msg))) {
		/* bytes after the last frame that are no frame (a raw tail):
		 * the shard is refused with their offset, never read in part */
		FUZZ_CHECK(strstr(msg, "data after the last"), "build: %s", msg);
		shard_source_close(src);
		return;
	}
	t = src->ops->seek_get(src);
	FUZZ_CHECK(seek_table_check(t, &bad), "the table built fails the loader's "
		   "check at point %llu of %llu (kind %u, out %llu, in %llu; size "
		   "%llu, stored %llu)", (ull)bad, (ull)t->nr, t->points[bad].kind,
		   (ull)t->points[bad].out, (ull)t->points[bad].in, (ull)t->size,
		   (ull)t->stored_size);
	FUZZ_CHECK(src->size >= tar_len, "serves %llu bytes of a %zu-byte tar",
		   (ull)src->size, tar_len);
	/* backwards, member-sized pieces: each read seeks */
	for (size_t end = tar_len; end > 0;) {
		size_t piece = end > 40000 ? 40000 : end;
		ssize_t n = src->ops->read(src, got + end - piece, piece, end - piece);

		FUZZ_CHECK(n == (ssize_t)piece, "read of %zu at %zu: %zd", piece,
			   end - piece, n);
		end -= piece;
	}
	if (memcmp(got, tar, tar_len)) {
		size_t k = 0;

		while (got[k] == tar[k])
			k++;
		FUZZ_CHECK(false, "tar byte %zu reads %#x, not %#x", k, got[k], tar[k]);
	}
	shard_source_close(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct frames *f;
	uint8_t mode;
	size_t tail;

	if (size < 1)
		return 0;
	mode = data[0];
	f = mode & 0x40 ? &unsized : &sized;
	memcpy(file, f->data, f->len);
	data++;
	size--;
	switch (mode % 4) {
	case 1:
		tail = framed_tail(file + f->len, data, size, mode);
		break;
	case 2:
		tail = edited_tail(file + f->len, f, data, size, mode);
		break;
	default:
		tail = size < TAIL_MAX ? size : TAIL_MAX;
		memcpy(file + f->len, data, tail);
		break;
	}
	open_and_read(f->len + tail);
	return 0;
}
