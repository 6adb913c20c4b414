/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_common.c - helpers shared by the libFuzzer targets.
 *
 * The checksum repair deserves a word.  Every tar header carries a sum of
 * its bytes, and the scanner rightly stops at the first header whose sum
 * is wrong; so a plain byte mutator spends almost all its time on inputs
 * that die at offset 0.  After each mutation fuzz_mutate() follows the
 * header chain as a tar reader would (header, data rounded up to blocks,
 * next header) and rewrites each header's checksum, so that mutations of
 * the fields behind the checksum reach the code that parses them.  The
 * walk is deliberately approximate (it ignores PAX size overrides and
 * sparse 1.0 maps); where it loses the chain the scanner simply meets a
 * bad checksum, which is also worth exercising, and one mutation in eight
 * is left unrepaired for the same reason.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "shardfs/layout.h"
#include "shardfs/shardset.h"
#include "shardfs/tar.h"

/* Provided by libFuzzer: its built-in mutations. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* Header fields the chain walk needs (see tar.c). */
#define H_SIZE 124
#define H_CHKSUM 148
#define H_TYPEFLAG 156
#define GNU_ISEXTENDED 482
#define GNU_EXT_ISEXTENDED 504

static volatile uint8_t touch_sink;
static FILE *report;	/* the original stderr; see fuzz_keep_stderr() */

/*
 * UBSan defaults (UBSAN_OPTIONS adds to them): every report is fatal, so
 * that libFuzzer keeps the input, and comes with a stack trace.
 */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
	return "halt_on_error=1:print_stacktrace=1";
}

void fuzz_keep_stderr(void)
{
	int fd = dup(STDERR_FILENO);

	report = fd >= 0 ? fdopen(fd, "w") : NULL;
}

void fuzz_fail(const char *file, int line, const char *cond,
	       const char *fmt, ...)
{
	FILE *out = report ? report : stderr;
	va_list ap;

	fprintf(out, "\n%s:%d: invariant violated: %s\n  ", file, line, cond);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
	fflush(out);
	abort();
}

void fuzz_touch(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint8_t acc = 0;

	for (size_t i = 0; i < len; i++)
		acc ^= b[i];
	touch_sink = acc;
}

void fuzz_set_file(int fd, const uint8_t *data, size_t len)
{
	size_t done = 0;

	if (ftruncate(fd, (off_t)len)) {
		perror("fuzz: ftruncate");
		abort();
	}
	while (done < len) {
		ssize_t n = pwrite(fd, data + done, len - done, (off_t)done);

		if (n <= 0) {
			perror("fuzz: pwrite");
			abort();
		}
		done += (size_t)n;
	}
}

void fuzz_make_dir(char *dir)
{
	const char *base = access("/dev/shm", W_OK) ? getenv("TMPDIR") : "/dev/shm";

	snprintf(dir, PATH_MAX, "%s/shardfs-fuzz-XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(dir)) {
		perror("fuzz: mkdtemp");
		abort();
	}
}

void fuzz_write_file(const char *dir, const char *name, const void *data,
		     size_t len, char *path)
{
	int fd;

	snprintf(path, PATH_MAX, "%s/%s", dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror(path);
		abort();
	}
	fuzz_set_file(fd, data, len);
	close(fd);
}

void fuzz_write_shards(const char *dir, const struct fuzz_span *shards, unsigned int nr)
{
	char name[16], path[PATH_MAX];

	for (unsigned int i = 0; i < nr; i++) {
		snprintf(name, sizeof(name), "%u.tar", i);
		fuzz_write_file(dir, name, shards[i].data, shards[i].len, path);
	}
}

void fuzz_open_set(struct shard_set *set, const char *dir, unsigned int nr, bool skip_bad)
{
	char spec[PATH_MAX + 32], msg[512];
	int rc;

	snprintf(spec, sizeof(spec), "%s/{0..%u}.tar", dir, nr - 1);
	rc = shard_set_expand(set, spec, NULL, msg, sizeof(msg));
	FUZZ_CHECK(!rc, "expanding %s: %s", spec, msg);
	set->skip_bad = skip_bad;
	rc = shard_set_open(set, msg, sizeof(msg));
	FUZZ_CHECK(!rc, "opening %s: %s", spec, msg);
}

/* Labels of the classes layout that get a class name. */
static const char classnames[] = "0 zero\n1 one\n# a comment\n7 seven\n";

/* The layouts of fuzz_pick_layout(), made at its first call. */
enum { LAYOUT_BY_CLS, LAYOUT_BY_JSON, LAYOUT_BY_SHARD, NR_LAYOUTS };
static struct layout layouts[NR_LAYOUTS];
static bool layouts_made;

/* The layouts, once: a class names file is only read here. */
static void make_layouts(void)
{
	char dir[PATH_MAX], path[PATH_MAX];

	fuzz_make_dir(dir);
	fuzz_write_file(dir, "classnames", classnames, sizeof(classnames) - 1, path);
	if (layout_init(&layouts[LAYOUT_BY_CLS], "classes", "cls", path, NULL) ||
	    layout_init(&layouts[LAYOUT_BY_JSON], "classes", "json:label", NULL, "skip") ||
	    layout_init(&layouts[LAYOUT_BY_SHARD], "shards", NULL, NULL, NULL))
		abort();
	unlink(path);
	rmdir(dir);
	layouts_made = true;
}

const struct layout *fuzz_pick_layout(const uint8_t *data, size_t size)
{
	if (!layouts_made)
		make_layouts();
	if (memmem(data, size, ".cls", 4))
		return &layouts[LAYOUT_BY_CLS];
	if (memmem(data, size, ".json", 5))
		return &layouts[LAYOUT_BY_JSON];
	return &layouts[LAYOUT_BY_SHARD];
}

size_t fuzz_split_shards(const uint8_t *data, size_t len,
			 struct fuzz_span *out, size_t max)
{
	size_t n = 0;

	while (n + 1 < max) {
		const uint8_t *sep = memmem(data, len, FUZZ_SHARD_SEP,
					    FUZZ_SHARD_SEP_LEN);

		if (!sep)
			break;
		out[n++] = (struct fuzz_span){ data, (size_t)(sep - data) };
		len -= (size_t)(sep - data) + FUZZ_SHARD_SEP_LEN;
		data = sep + FUZZ_SHARD_SEP_LEN;
	}
	out[n++] = (struct fuzz_span){ data, len };
	return n;
}

/* Write the unsigned header checksum in the usual "%06o\0 " form. */
static void set_checksum(uint8_t *blk)
{
	unsigned int sum = 0;

	for (int i = 0; i < TAR_BLOCK_SIZE; i++)
		sum += i >= H_CHKSUM && i < H_CHKSUM + 8 ? ' ' : blk[i];
	snprintf((char *)blk + H_CHKSUM, 8, "%06o", sum);
	blk[H_CHKSUM + 7] = ' ';
}

/* Data blocks after the header at @blk, as POSIX counts them. */
static uint64_t data_blocks(const uint8_t *blk)
{
	int64_t size;

	if (tar_parse_number((const char *)blk + H_SIZE, 12, &size) || size < 0)
		return 0;
	if (blk[H_TYPEFLAG] >= '1' && blk[H_TYPEFLAG] <= '6')
		return 0;	/* links, devices, directories, FIFOs */
	return ((uint64_t)size + TAR_BLOCK_SIZE - 1) / TAR_BLOCK_SIZE;
}

/* Old GNU sparse extension blocks that follow the header at @off. */
static uint64_t extension_blocks(const uint8_t *data, size_t len, uint64_t off)
{
	bool more = data[off + GNU_ISEXTENDED];
	uint64_t n = 0;

	if (data[off + H_TYPEFLAG] != 'S')
		return 0;
	for (off += TAR_BLOCK_SIZE; more && len - off >= TAR_BLOCK_SIZE;
	     off += TAR_BLOCK_SIZE, n++)
		more = data[off + GNU_EXT_ISEXTENDED];
	return n;
}

/* Fix the checksum of every header along the chain of one archive. */
static void repair_checksums(uint8_t *data, size_t len)
{
	static const uint8_t zero[TAR_BLOCK_SIZE];
	uint64_t off = 0;

	while (len >= TAR_BLOCK_SIZE && off <= len - TAR_BLOCK_SIZE) {
		uint8_t *blk = data + off;
		uint64_t skip;

		if (!memcmp(blk, zero, TAR_BLOCK_SIZE)) {
			off += TAR_BLOCK_SIZE;
			continue;
		}
		set_checksum(blk);
		skip = 1 + extension_blocks(data, len, off) + data_blocks(blk);
		if (skip > (len - off) / TAR_BLOCK_SIZE)
			break;
		off += skip * TAR_BLOCK_SIZE;
	}
}

size_t fuzz_mutate(uint8_t *data, size_t size, size_t max_size,
		   unsigned int seed, bool framed)
{
	struct fuzz_span shards[FUZZ_MAX_SHARDS];
	size_t n;

	size = LLVMFuzzerMutate(data, size, max_size);
	if (seed % 8 == 0)
		return size;
	n = fuzz_split_shards(data, size, shards, framed ? FUZZ_MAX_SHARDS : 1);
	for (size_t i = 0; i < n; i++)
		repair_checksums((uint8_t *)shards[i].data, shards[i].len);
	return size;
}
