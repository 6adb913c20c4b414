/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_common.h - helpers shared by the libFuzzer targets.
 *
 * The core reads shards only through file descriptors, so every target
 * turns its input into files first; and because the tar header checksum
 * would make almost every mutation fail at the first header, both targets
 * install a mutator that repairs checksums along the header chain.  What
 * the targets share lives here so that neither re-implements it:
 *
 *  - FUZZ_CHECK: an invariant of the core that ASan cannot see (a read
 *    that fails on an unchanged shard, a lookup that disagrees with
 *    readdir).  A violation aborts, and libFuzzer saves the input.
 *  - fuzz_keep_stderr: somewhere to report that, even with stderr closed.
 *  - fuzz_touch: read every byte of a range, so that ASan checks that the
 *    core handed out memory that really exists.
 *  - fuzz_set_file: make an open file hold exactly the given bytes.
 *  - fuzz_split_shards: the framing that splits one input into shards.
 *  - fuzz_mutate: libFuzzer's mutation followed by checksum repair.
 */
#ifndef SHARDFS_FUZZ_COMMON_H
#define SHARDFS_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Separates the shards of a framed input (see fuzz_split_shards). */
#define FUZZ_SHARD_SEP "\n==shard==\n"
#define FUZZ_SHARD_SEP_LEN (sizeof(FUZZ_SHARD_SEP) - 1)
/* Most shards a framed input is split into: five, so that a hard link
 * can name a member three shards before its own (the bounded build
 * binds those after a second scan of the shards between). */
#define FUZZ_MAX_SHARDS 5

/* For printing uint64_t with %llu. */
typedef unsigned long long ull;

/* One shard's bytes within an input. */
struct fuzz_span {
	const uint8_t *data;	/* first byte */
	size_t len;		/* bytes */
};

/* The entry points libFuzzer calls (it declares none for C). */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
			       unsigned int seed);

#define FUZZ_CHECK(cond, ...)                                              \
	do {                                                               \
		if (!(cond))                                               \
			fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);  \
	} while (0)

/*
 * Keep a handle on the stderr the process started with, for fuzz_fail():
 * libFuzzer's -close_fd_mask=2 (which silences the core's warnings)
 * closes stderr after LLVMFuzzerInitialize.  Call from there.
 */
void fuzz_keep_stderr(void);

/* Print where and why an invariant failed, then abort(). */
_Noreturn void fuzz_fail(const char *file, int line, const char *cond,
			 const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Read all @len bytes at @p (NULL is fine when @len is 0). */
void fuzz_touch(const void *p, size_t len);

/* Replace the contents of @fd with @len bytes; aborts on I/O errors. */
void fuzz_set_file(int fd, const uint8_t *data, size_t len);

/*
 * A fresh private directory for the current input, into @dir (PATH_MAX
 * bytes): under /dev/shm when it is writable, else $TMPDIR or /tmp.
 */
void fuzz_make_dir(char *dir);

/* Create @dir/@name holding @len bytes at @data; its path goes to @path
 * (PATH_MAX bytes). */
void fuzz_write_file(const char *dir, const char *name, const void *data,
		     size_t len, char *path);

/* Write @nr shards as @dir/0.tar ... (@dir/N.tar), whose paths
 * fuzz_open_set() expands. */
void fuzz_write_shards(const char *dir, const struct fuzz_span *shards, unsigned int nr);

struct shard_set;
struct layout;

/* Open the @nr shards fuzz_write_shards() wrote in @dir as @set, as
 * shardfs_init() does (a bad shard skipped with @skip_bad). */
void fuzz_open_set(struct shard_set *set, const char *dir, unsigned int nr, bool skip_bad);

/*
 * The layout of a second build of input @data: the classes layout with
 * labels from .cls members (mapped through a class names file) if the
 * input holds ".cls", with labels from a .json field if it holds
 * ".json", else the shards layout, so that the choice survives most
 * mutations.  Made once, kept for the process.
 */
const struct layout *fuzz_pick_layout(const uint8_t *data, size_t size);

/*
 * Split a framed input into at most @max shards separated by
 * FUZZ_SHARD_SEP; the last shard takes the rest of the input, separators
 * included.  A plain tar is thus a one-shard input.  Returns the number
 * of shards stored in @out (at least 1).
 */
size_t fuzz_split_shards(const uint8_t *data, size_t len,
			 struct fuzz_span *out, size_t max);

/*
 * Mutate with LLVMFuzzerMutate, then (most of the time) recompute the
 * checksum of every header found by following the header chain, in each
 * shard of the input when @framed.  Returns the new size.
 */
size_t fuzz_mutate(uint8_t *data, size_t size, size_t max_size,
		   unsigned int seed, bool framed);

#endif
