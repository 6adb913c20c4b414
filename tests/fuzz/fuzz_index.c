/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_index.c - libFuzzer target for the index build and the read path.
 *
 * The input is split into one to five shards (see fuzz_split_shards:
 * a plain tar is a one-shard input), which are written to files in a
 * private directory and mounted twice the way shardfs_init() does it
 * (shard_set_expand, shard_set_open, shard_index_build):
 *
 *  - in the tree layout with skip_bad_shards off;
 *  - with skip_bad_shards on, in a layout the input picks by what it
 *    mentions, so that the choice survives most mutations: the classes
 *    layout with labels from .cls members (mapped through a class names
 *    file) if the input holds ".cls", with labels from a .json field if
 *    it holds ".json", else the shards layout.  These rewrite hostile
 *    names, and the classes layout parses member data (a classes
 *    tree in which no sample has a label is refused, as a mount does).
 *
 * Only two builds, because every build starts a scanning thread, and
 * under ASan that costs milliseconds.  Each index that builds is
 * walked through the fs.h operations the FUSE glue calls: getattr
 * of every entry, readdir of every directory with a lookup of every name
 * it lists, readlink of every symlink, the extended attributes of every
 * file and reads of it at its start, its end and, for sparse files,
 * across the edges of its runs; and every file of /.shardfs is read to
 * its end, since those render the hostile names.
 *
 * Besides what ASan and UBSan report, the walk checks what a mount must
 * never do: list children out of order, disagree between readdir and
 * lookup, fail a read of an unchanged shard (the index pointing past a
 * shard's end), or serve bytes of a sparse file other than those a naive
 * reading of its map gives.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "shardfs/control.h"
#include "shardfs/fs.h"
#include "shardfs/index.h"
#include "shardfs/layout.h"
#include "shardfs/path.h"
#include "shardfs/shardset.h"

/* Bytes per read: enough to cross several runs of a sparse file. */
#define READ_SIZE 8192
/* Runs of a sparse file whose starting edge is read. */
#define RUN_EDGES_READ 16

/* The shards of the current input: the oracle for sparse reads. */
static struct fuzz_span shards[FUZZ_MAX_SHARDS];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_keep_stderr();
	return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
			       unsigned int seed)
{
	return fuzz_mutate(data, size, max_size, seed, true);
}

/* A name listed in @dir is well formed and found again by lookup. */
static void check_child(struct shardfs *fs, uint64_t dir,
			const char *name, uint64_t ino)
{
	size_t len = strlen(name);
	uint64_t found;
	int rc;

	FUZZ_CHECK(len && len <= PATH_COMPONENT_MAX && !memchr(name, '/', len),
		   "bad name '%s' in directory %llu", name, (ull)dir);
	rc = shardfs_lookup(fs, dir, name, &found);
	FUZZ_CHECK(!rc && found == ino,
		   "lookup of '%s' in %llu: %d, inode %llu; readdir said %llu",
		   name, (ull)dir, rc, (ull)found, (ull)ino);
	if (S_ISDIR(compact_field(&fs->idx.entries, (uint32_t)(ino - 1), COMPACT_MODE)))
		FUZZ_CHECK(shardfs_parent(fs, ino) == dir,
			   "parent of %llu is %llu, not %llu", (ull)ino,
			   (ull)shardfs_parent(fs, ino), (ull)dir);
}

/* Every child is listed once, in name order, and found by lookup. */
static void walk_dir(struct shardfs *fs, uint64_t dir)
{
	struct shardfs_dirent de = { 0 };
	char prev[PATH_COMPONENT_MAX + 1] = "";
	uint64_t pos;
	int rc;

	for (pos = 0; !(rc = shardfs_readdir_entry(fs, dir, pos, &de)); pos++) {
		FUZZ_CHECK(!pos || strcmp(prev, de.name) < 0,
			   "directory %llu lists '%s' before '%s'", (ull)dir, prev, de.name);
		check_child(fs, dir, de.name, de.ino);
		snprintf(prev, sizeof(prev), "%s", de.name);
	}
	FUZZ_CHECK(rc == -ENOENT, "readdir of %llu at %llu: %d", (ull)dir, (ull)pos, rc);
}

/* What a read of @len bytes at @off of sparse @in must return. */
static void sparse_oracle(const struct shardfs *fs, const struct shard_inode *in,
			  uint64_t off, size_t len, char *want)
{
	const struct shard_sparse *sp = &fs->idx.sparse[in->data];
	const struct fuzz_span *shard = &shards[in->shard];

	memset(want, 0, len);
	for (uint64_t i = sp->first; i < sp->first + sp->count; i++) {
		const struct shard_extent *e = &fs->idx.extents[i];
		uint64_t from = e->logical > off ? e->logical : off;
		uint64_t to = e->logical + e->length;

		to = to < off + len ? to : off + len;
		if (from >= to)
			continue;
		FUZZ_CHECK(e->physical + (to - e->logical) <= shard->len,
			   "run stored at [%llu, +%llu) past the shard end %zu",
			   (ull)e->physical, (ull)e->length, shard->len);
		memcpy(want + (from - off),
		       shard->data + e->physical + (from - e->logical), to - from);
	}
}

/* Read @off of file @ino; the whole range must come back, and right. */
static void read_at(struct shardfs *fs, uint64_t ino, uint64_t off)
{
	static char got[READ_SIZE], want[READ_SIZE];
	struct shard_inode entry = { 0 }, *in = &entry;
	bool found = shard_index_get(&fs->idx, ino, in);
	uint64_t left = off < in->size ? in->size - off : 0;
	size_t expect = left < READ_SIZE ? (size_t)left : READ_SIZE;
	ssize_t n = shardfs_read(fs, ino, got, READ_SIZE, off);

	FUZZ_CHECK(found && n >= 0 && (size_t)n == expect,
		   "read of file %llu (%llu bytes, shard %u) at %llu: %zd, wanted %zu",
		   (ull)ino, (ull)in->size, in->shard, (ull)off, n, expect);
	if (!(in->flags & SHARD_INODE_SPARSE) || !n)
		return;
	sparse_oracle(fs, in, off, (size_t)n, want);
	FUZZ_CHECK(!memcmp(got, want, (size_t)n),
		   "sparse file %llu at %llu: bytes differ from its map",
		   (ull)ino, (ull)off);
}

/* Every attribute listed can be read, and has the length announced. */
static void walk_xattrs(const struct shardfs *fs, uint64_t ino)
{
	static char value[PATH_MAX];
	char names[256];
	ssize_t len = shardfs_listxattr(fs, ino, names, sizeof(names));

	FUZZ_CHECK(len >= 0 && (!len || !names[len - 1]),
		   "listxattr of %llu: %zd", (ull)ino, len);
	for (const char *n = names; n < names + len; n += strlen(n) + 1) {
		ssize_t want = shardfs_getxattr(fs, ino, n, NULL, 0);
		ssize_t got = shardfs_getxattr(fs, ino, n, value, sizeof(value));

		FUZZ_CHECK(got == want && (got >= 0 || got == -ENAMETOOLONG),
			   "getxattr %s of %llu: %zd, announced %zd", n, (ull)ino,
			   got, want);
		fuzz_touch(value, got > 0 ? (size_t)got : 0);
	}
}

/* Read the start, the end, past the end and the edges of sparse runs. */
static void walk_file(struct shardfs *fs, uint64_t ino)
{
	struct shard_inode entry, *in = &entry;

	FUZZ_CHECK(shard_index_get(&fs->idx, ino, in), "no entry for file %llu", (ull)ino);

	walk_xattrs(fs, ino);
	read_at(fs, ino, 0);
	read_at(fs, ino, in->size > READ_SIZE / 2 ? in->size - READ_SIZE / 2 : 0);
	read_at(fs, ino, in->size);
	if (in->flags & SHARD_INODE_SPARSE) {
		const struct shard_sparse *sp = &fs->idx.sparse[in->data];

		for (uint64_t i = 0; i < sp->count && i < RUN_EDGES_READ; i++) {
			uint64_t start = fs->idx.extents[sp->first + i].logical;

			read_at(fs, ino, start > 1 ? start - 1 : 0);
		}
	}
}

/*
 * Read generated file @ino to its end, as the kernel does, and check that
 * it is as long as its attributes say.
 */
static void read_generated(struct shardfs *fs, uint64_t ino, off_t size)
{
	static char buf[READ_SIZE];
	uint64_t off = 0;
	ssize_t n;

	while ((n = shardfs_read(fs, ino, buf, sizeof(buf), off)) > 0)
		off += (uint64_t)n;
	FUZZ_CHECK(n == 0 && off == (uint64_t)size,
		   "read of control file %llu ended at %llu of %lld: %zd",
		   (ull)ino, (ull)off, (long long)size, n);
}

/* Every file of /.shardfs renders, members and shards included. */
static void walk_control(struct shardfs *fs)
{
	struct shardfs_dirent de = { 0 };
	uint64_t dir, pos, ino;
	struct stat st;

	FUZZ_CHECK(!shardfs_lookup(fs, SHARDFS_ROOT_INO, CONTROL_DIR_NAME, &dir),
		   "no %s in the root", CONTROL_DIR_NAME);
	for (pos = 0; !shardfs_readdir_entry(fs, dir, pos, &de); pos++) {
		FUZZ_CHECK(!shardfs_lookup(fs, dir, de.name, &ino) &&
			   !shardfs_getattr(fs, ino, &st) && S_ISREG(st.st_mode),
			   "%s/%s is not a file", CONTROL_DIR_NAME, de.name);
		read_generated(fs, ino, st.st_size);
	}
}

/* Visit every entry through the operations the FUSE glue uses. */
static void walk(struct shardfs *fs)
{
	struct statvfs sv;

	shardfs_statfs(fs, &sv);
	for (uint64_t ino = 1; ino <= shard_index_nr(&fs->idx); ino++) {
		const char *target;
		struct stat st;

		FUZZ_CHECK(!shardfs_getattr(fs, ino, &st), "getattr of %llu", (ull)ino);
		if (S_ISDIR(st.st_mode))
			walk_dir(fs, ino);
		else if (S_ISREG(st.st_mode))
			walk_file(fs, ino);
		else
			FUZZ_CHECK(S_ISLNK(st.st_mode) && !shardfs_readlink(fs, ino, &target) &&
				   strlen(target) <= (size_t)st.st_size,
				   "entry %llu: mode %o is not a readable symlink",
				   (ull)ino, st.st_mode);
	}
	walk_control(fs);
}

/*
 * Write the @nr shards of the input to a fresh directory and open them as
 * @set, as shardfs_init() does.  The files are removed once open, so that
 * a crash leaves nothing behind.
 */
static void open_shards(struct shard_set *set, unsigned int nr, bool skip_bad)
{
	char dir[PATH_MAX];

	fuzz_make_dir(dir);
	fuzz_write_shards(dir, shards, nr);
	fuzz_open_set(set, dir, nr, skip_bad);
	for (uint32_t i = 0; i < set->nr; i++)
		unlink(set->shards[i].path);
	rmdir(dir);
}

/* Mount the @nr shards under @layout (NULL: tree) and walk the index. */
static void build_and_walk(unsigned int nr, const struct layout *layout,
			   bool skip_bad_shards)
{
	struct shard_index_build_options opt = {
		.layout = layout, .threads = 1, .skip_bad_shards = skip_bad_shards,
	};
	struct shardfs fs = { .opt.readahead = SHARDFS_READAHEAD_DEFAULT };
	int rc;

	open_shards(&fs.set, nr, skip_bad_shards);
	FUZZ_CHECK(!shardfs_init_built(&fs), "shardfs_init_built: out of memory");
	rc = shard_index_build(&fs.idx, &fs.set, &opt);
	/* a bad shard refuses the set unless skipped; a classes layout in
	 * which no sample has a label is refused either way */
	FUZZ_CHECK(rc == 0 || (rc == -EINVAL && (!skip_bad_shards ||
		   (layout && layout->kind == LAYOUT_CLASSES))),
		   "shard_index_build (skip_bad_shards %d) returned %d",
		   skip_bad_shards, rc);
	if (!rc)
		walk(&fs);
	shardfs_release(&fs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t nr = fuzz_split_shards(data, size, shards, FUZZ_MAX_SHARDS);

	build_and_walk((unsigned int)nr, NULL, false);
	build_and_walk((unsigned int)nr, fuzz_pick_layout(data, size), true);
	return 0;
}
