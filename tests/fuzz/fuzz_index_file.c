/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_index_file.c - libFuzzer target for the persistent index loader.
 *
 * An index file may come from anywhere the shards come from (a shared
 * dataset directory, a cache another user can write), so the loader must
 * reject any lie without crashing and without handing out an index whose
 * lookups or paths could leave the arrays.  Each input is loaded twice:
 * as given (exercising the header and checksum checks) and resealed with
 * correct checksums (exercising the structural checks behind them).
 * Whatever loads is then checked again as a mount on a record's word
 * checks it (index_guard.h: every span against its sum, which the full
 * check found equal), walked the way requests would walk it, and
 * push-ahead is set up over it (its per-shard starts and ends come from
 * the ORDER section and the entries it names).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "shardfs/fs.h"
#include "shardfs/index_file.h"

static int image_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_keep_stderr();
	image_fd = memfd_create("fuzz-index", MFD_CLOEXEC);
	FUZZ_CHECK(image_fd >= 0, "memfd_create: %s", strerror(errno));
	/* a memfd is 0777: the loader would not trust it (index_file.h) */
	FUZZ_CHECK(!fchmod(image_fd, 0600), "fchmod: %s", strerror(errno));
	return 0;
}

/* Every child found by readdir is found again by lookup, with its path. */
static void walk(const struct shardfs *fs)
{
	const struct shard_index *idx = &fs->idx;
	char path[4096];

	for (uint32_t e = 0; e < shard_index_nr(idx); e++) {
		struct shardfs_dirent de = { 0 };
		char name[PATH_COMPONENT_MAX + 1];
		struct shard_inode in;

		shard_index_entry(idx, e, &in);
		fuzz_touch(name, shard_index_name(idx, e, name) + 1);
		FUZZ_CHECK(shard_index_ino(idx, e) <= shard_index_nr(idx), "entry %u", e);
		shard_index_entry_path(&fs->idx, e, path, sizeof(path));
		if (S_ISLNK(in.mode))
			fuzz_touch(shard_index_target(idx, &in), in.size + 1);
		for (uint64_t i = 0; S_ISDIR(in.mode) &&
		     !shardfs_readdir_entry(fs, e + 1, i, &de); i++)
			FUZZ_CHECK(shard_index_lookup(idx, e, de.name, strlen(de.name)) ==
				   (int64_t)(in.data + i), "lookup of child %llu of %u",
				   (ull)i, e);
	}
}

static void load_and_walk(void)
{
	struct shardfs fs = { 0 };
	struct index_file_shards sh;
	char path[64], msg[256];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", image_fd);
	if (index_file_load(path, &fs.idx, &sh, INDEX_LOAD_FULL_CHECK, msg, sizeof(msg)))
		return;
	FUZZ_CHECK(!index_file_guard(&fs.idx, path, msg, sizeof(msg)), "index_file_guard: %s",
		   msg);
	FUZZ_CHECK(!shard_index_check_all(&fs.idx), "a file that passed its full check "
		   "fails the lazy checks");
	fuzz_touch(sh.shards, sh.nr * sizeof(*sh.shards));
	for (uint64_t i = 0; i < fs.idx.nr_order; i++)
		FUZZ_CHECK(fs.idx.order[i] < shard_index_nr(&fs.idx), "order[%llu]", (ull)i);
	/* shards not opened (no source: none is plain), as many as it names */
	fs.set.shards = calloc(sh.nr ? sh.nr : 1, sizeof(*fs.set.shards));
	FUZZ_CHECK(fs.set.shards, "out of memory");
	fs.set.nr = sh.nr;
	fs.opt.pushahead = SHARDFS_PUSHAHEAD_DEFAULT;
	FUZZ_CHECK(!shardfs_init_built(&fs), "shardfs_init_built: out of memory");
	walk(&fs);
	shardfs_release(&fs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;

	fuzz_set_file(image_fd, data, size);
	load_and_walk();
	copy = malloc(size ? size : 1);
	FUZZ_CHECK(copy, "out of memory");
	memcpy(copy, data, size);
	if (!index_file_reseal(copy, size)) {
		fuzz_set_file(image_fd, copy, size);
		load_and_walk();
	}
	free(copy);
	return 0;
}
