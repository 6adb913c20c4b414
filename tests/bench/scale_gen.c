/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scale_gen.c - write many tiny-member ustar shards fast, for
 * tests/bench/scale.py (which compiles it at run time with cc -O2).
 *
 *   scale_gen OUTDIR SHARDS MEMBERS_PER_SHARD DIRS [FIRST_SHARD]
 *
 * Writes OUTDIR/shard-NNNNNN.tar for shards FIRST_SHARD .. +SHARDS-1.
 * Members come in pairs, like WebDataset samples: KEY.cls (1-3 bytes) and
 * KEY.txt (0-16 bytes), KEY being the global sample number.  With DIRS
 * > 0 a sample goes to directory dNNNN (KEY % DIRS); with DIRS == 0 every
 * member is in the one directory "all".  Every member is a ustar header
 * plus at most one data block, so a shard of N members is about N KiB.
 * Deterministic: the same arguments give the same bytes (mtime fixed).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 512
#define MTIME 1700000000ULL

static char buf[8 << 20];
static size_t used;

static void flush(int fd)
{
	size_t off = 0;

	while (off < used) {
		ssize_t n = write(fd, buf + off, used - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			perror("write");
			exit(1);
		}
		off += (size_t)n;
	}
	used = 0;
}

static char *block(int fd)
{
	if (used + BLOCK > sizeof(buf))
		flush(fd);
	used += BLOCK;
	return memset(buf + used - BLOCK, 0, BLOCK);
}

static void octal(char *field, size_t len, unsigned long long v)
{
	snprintf(field, len, "%0*llo", (int)len - 1, v);
}

static void member(int fd, const char *name, const char *data, size_t size)
{
	char *h = block(fd);
	unsigned sum = 0;

	memcpy(h, name, strlen(name));
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0001750", 8);
	memcpy(h + 116, "0001750", 8);
	octal(h + 124, 12, size);
	octal(h + 136, 12, MTIME);
	memset(h + 148, ' ', 8);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	for (int i = 0; i < BLOCK; i++)
		sum += (unsigned char)h[i];
	snprintf(h + 148, 8, "%06o", sum);
	if (size)
		memcpy(block(fd), data, size);
}

int main(int argc, char **argv)
{
	static const char text[] = "abcdefghijklmnopq";
	unsigned long long shards, per, dirs, first = 0;

	if (argc < 5) {
		fprintf(stderr, "usage: %s OUTDIR SHARDS MEMBERS_PER_SHARD DIRS [FIRST]\n",
			argv[0]);
		return 2;
	}
	shards = strtoull(argv[2], NULL, 10);
	per = strtoull(argv[3], NULL, 10);
	dirs = strtoull(argv[4], NULL, 10);
	if (argc > 5)
		first = strtoull(argv[5], NULL, 10);
	for (unsigned long long s = first; s < first + shards; s++) {
		char path[4096], name[100], dir[24], cls[4];
		unsigned long long key0 = s * per / 2;
		int fd;

		snprintf(path, sizeof(path), "%s/shard-%06llu.tar", argv[1], s);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0) {
			perror(path);
			return 1;
		}
		for (unsigned long long m = 0; m < per; m++) {
			unsigned long long key = key0 + m / 2;

			if (dirs)
				snprintf(dir, sizeof(dir), "d%04llu", key % dirs);
			else
				snprintf(dir, sizeof(dir), "all");
			if (m % 2 == 0) {
				/* a label of 1 to 3 digits */
				int n = snprintf(cls, sizeof(cls), "%llu", key % 1000);

				snprintf(name, sizeof(name), "%s/%012llu.cls", dir, key);
				member(fd, name, cls, (size_t)n);
			} else {
				snprintf(name, sizeof(name), "%s/%012llu.txt", dir, key);
				member(fd, name, text, key % 17);
			}
		}
		block(fd);
		block(fd);
		flush(fd);
		if (close(fd)) {
			perror(path);
			return 1;
		}
	}
	return 0;
}
