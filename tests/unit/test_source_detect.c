/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_source_detect.c - shard_source_detect() on first bytes: raw .lzma
 * (lzma_alone), which has no magic, is told by a plausible header, and a
 * tar never looks like one, whatever its first member is called.
 *
 * Without a decoded cache (no cache_dir here) a raw .lzma stream is
 * refused with a message naming the format, which is how the test sees
 * what detection decided; a tar is left as it is (no encoding).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "shardfs/source.h"

/* What detection makes of the 512 bytes @head (the rest zero). */
static int detect(const unsigned char *head, size_t len, char *msg, size_t msg_len)
{
	static unsigned char block[512];
	struct shard_source_mem m;
	struct shard_source *src = &m.base;
	int rc;

	memset(block, 0, sizeof(block));
	memcpy(block, head, len);
	shard_source_mem_init(&m, block, sizeof(block));
	msg[0] = '\0';
	rc = shard_source_detect(&src, "s", msg, msg_len);
	assert_ptr_equal(src, &m.base);	/* nothing wrapped it */
	assert_null(src->encoding);
	return rc;
}

static void expect_lzma(const unsigned char *head)
{
	char msg[512];

	assert_int_equal(detect(head, 13, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "compressed with lzma"));
	assert_non_null(strstr(msg, "cache_dir"));
}

static void expect_plain(const unsigned char *head, size_t len)
{
	char msg[512];

	assert_int_equal(detect(head, len, msg, sizeof(msg)), 0);
}

/* An lzma_alone header, and whether it is one. */
struct header_case {
	const char *what;		/* for the failure message */
	unsigned char head[13];		/* properties, dictionary, size */
	bool lzma;			/* taken for raw .lzma */
};

#define UNKNOWN_SIZE 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff

static const struct header_case headers[] = {
	/* xz --format=lzma -6 from a pipe: lc3 lp0 pb2, 8 MiB, size unknown */
	{ "piped", { 0x5d, 0, 0, 0x80, 0, UNKNOWN_SIZE }, true },
	{ "12 MiB, size stated", { 0x5d, 0, 0, 0xc0, 0, 0, 0x28 }, true },
	{ "4 KiB, other properties", { 0x2c, 0, 0x10, 0, 0, UNKNOWN_SIZE }, true },
	{ "properties past pb 4, lp 4, lc 8", { 225, 0, 0, 0x80, 0, UNKNOWN_SIZE }, false },
	{ "a dictionary of three bits", { 0x5d, 0, 0, 0xe0, 0, UNKNOWN_SIZE }, false },
	{ "a dictionary below 4 KiB", { 0x5d, 0, 0x08, 0, 0, UNKNOWN_SIZE }, false },
	{ "a stated size of 2^56", { 0x5d, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, false },
};

static void test_lzma_alone_headers(void **state)
{
	for (size_t i = 0; i < sizeof(headers) / sizeof(*headers); i++) {
		print_message("%s\n", headers[i].what);
		if (headers[i].lzma)
			expect_lzma(headers[i].head);
		else
			expect_plain(headers[i].head, sizeof(headers[i].head));
	}
}

/* tar headers whose names start like an lzma header's properties byte */
static void test_tar_names_are_not_lzma(void **state)
{
	static const char *const names[] = { "]", "]]]]]]]]", "]\x01", "a",
					     "]abc/def.jpg", "\x5d\x10" };

	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
		expect_plain((const unsigned char *)names[i], strlen(names[i]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lzma_alone_headers),
		cmocka_unit_test(test_tar_names_are_not_lzma),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
