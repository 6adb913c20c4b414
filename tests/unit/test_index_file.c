/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_index_file.c - the persistent index file (index_file.c): a round
 * trip, and a loader that never trusts what it maps.
 *
 * The round trip writes a built index, loads it back and compares every
 * array byte for byte, then serves the same shards from both (attributes,
 * listings, lookups, link targets, reads, xattrs): a mount that loads an
 * index must be indistinguishable from one that built it.
 *
 * Everything else feeds index_file_load() a damaged copy of that file.
 * Accidental damage (magic, version, byte order, sizes, truncation, a
 * flipped byte in any section) is caught by the header and checksums.
 * Deliberate damage is the harder part: each "lie" below edits one field
 * and then recomputes the section and header xxh3 (fixup()), so that only
 * the structural checks stand between the file and a lookup or read that
 * would run off an array.  Every case must return -EINVAL with a message
 * naming an offset or a section, leave the index empty, and not crash;
 * the suite also runs under valgrind (see the report in the test plan).
 *
 * The header layout is private to index_file.c; struct index_file_header mirrors it and
 * test_round_trip checks the mirror against a written file, so a format
 * change fails loudly here instead of corrupting the wrong bytes.
 */
#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#include <xxhash.h>

#include "shardfs/index_file.h"
#include "shardfs/index_map.h"
#include "shardfs/index_verified.h"
#include "shardfs/util.h"
#include "tarbuild.h"

#define OPTIONS_HASH 0x0123456789abcdefULL

/* ---- fixture: shards with every kind of entry, and their index ------ */

struct fx {
	struct tb_env env;	/* the shards and the index built from them */
	char path[PATH_MAX];	/* the index file written from env.fs */
	char bad_path[PATH_MAX]; /* where damaged copies are written */
	char *good;		/* bytes of the valid file */
	size_t good_len;
	char *buf;		/* the copy a case damages */
	size_t len;		/* its length (a case may shorten it) */
	size_t cap;		/* bytes allocated at buf */
	struct shard_inode *wide; /* the copy's entries as the build lays
				 * them out, for a case to edit; NULL:
				 * not unpacked since the reset */
	char *wide_names;	/* their names and link targets */
	uint64_t wide_names_len; /* bytes in wide_names */
};

static const struct tar_extent sparse_runs[] = {
	{ 100, 50, 0 }, { 5000, 50, 0 }, { 9000, 1000, 0 }, { 12000, 0, 0 },
};
enum { SPARSE_SIZE = 12000 };

static char *read_whole(const char *path, size_t *len)
{
	struct stat st;
	char *data;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	data = malloc(st.st_size ? st.st_size : 1);
	assert_non_null(data);
	assert_int_equal(pread(fd, data, st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return data;
}

static void write_whole(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	if (len)
		assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

/* Bytes of the member of the gzip shard: over two seek spans. */
#define BIG_SIZE (SEEK_TABLE_SPAN * 2 + 512 * 1024)

/*
 * The gzip shard's bytes, made by the first case and written again by
 * the others: making and compressing its 8.5 MB for each case took most
 * of this program's time (minutes of CPU under valgrind).
 */
static char *gz_shard;
static size_t gz_shard_len;

/* Write 02.tar.gz to @e's directory: gz/big.txt, long enough for window
 * points, so that the index fills its SEEK sections. */
static void save_gz_shard(struct tb_env *e)
{
	char path[PATH_MAX], *big;
	uint32_t seed = 1;
	struct tb a = { 0 };

	snprintf(path, sizeof(path), "%s/02.tar.gz", e->dir);
	if (gz_shard) {
		write_whole(path, gz_shard, gz_shard_len);
		return;
	}
	big = malloc(BIG_SIZE);
	assert_non_null(big);
	for (size_t i = 0; i < BIG_SIZE; i++)
		big[i] = 'a' + (char)((seed = seed * 1103515245 + 12345) >> 28);
	tb_add(&a, "gz/big.txt", '0', big, BIG_SIZE);
	tb_end(&a);
	tb_save_gzip(&a, e->dir, "02.tar.gz", 0);
	tb_free(&a);
	free(big);
	gz_shard = read_whole(path, &gz_shard_len);
}

static int free_gz_shard(void **state)
{
	free(gz_shard);
	return 0;
}

static void make_shards(struct tb_env *e)
{
	char sparse_data[1100];
	struct tb a = { 0 };

	memset(sparse_data, 'S', sizeof(sparse_data));
	tb_add(&a, "dir/", '5', NULL, 0);
	tb_file(&a, "dir/a.txt", "alpha\n");
	tb_file(&a, "dir/b.txt", "bravo, a little longer\n");
	tb_file(&a, "dir/sub/deep.txt", "deep in a synthesized directory\n");
	tb_link(&a, "link", '2', "dir/a.txt");
	tb_link(&a, "hard1", '1', "dir/a.txt");
	tb_link(&a, "hard2", '1', "dir/b.txt");
	tb_link(&a, "hard3", '1', "dir/b.txt");
	tb_old_sparse(&a, "holes", SPARSE_SIZE, sparse_runs, 4, sparse_data);
	tb_env_shard(e, "00.tar", &a);

	tb_file(&a, "dir/c.txt", "charlie from the second shard\n");
	tb_file(&a, "dir/a.txt", "alpha, replaced by shard 01\n");
	tb_file(&a, "z/zz.txt", "zulu\n");
	tb_env_shard(e, "01.tar", &a);
	save_gz_shard(e);
}

static int fx_setup(void **state)
{
	struct tb_env *env;
	struct fx *f = calloc(1, sizeof(*f));
	char msg[512] = "";

	if (!f || tb_env_setup((void **)&env))
		return -1;
	f->env = *env;
	free(env);
	make_shards(&f->env);
	tb_env_build(&f->env);
	snprintf(f->path, sizeof(f->path), "%s/.00.tar.shardfs-index", f->env.dir);
	snprintf(f->bad_path, sizeof(f->bad_path), "%s/damaged.idx", f->env.dir);
	if (index_file_write(f->path, &f->env.fs.idx, &f->env.fs.set, OPTIONS_HASH,
			     msg, sizeof(msg)))
		fail_msg("index_file_write: %s", msg);
	f->good = read_whole(f->path, &f->good_len);
	f->cap = f->good_len + 4096;
	f->buf = malloc(f->cap);
	assert_non_null(f->buf);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	struct tb_env *env = malloc(sizeof(*env));

	assert_non_null(env);
	*env = f->env;
	free(f->good);
	free(f->buf);
	free(f->wide);
	free(f->wide_names);
	free(f);
	return tb_env_teardown((void **)&env);
}

#define FX_TEST(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

/* ---- editing the copy ----------------------------------------------- */

static struct index_file_header *hdr(struct fx *f)
{
	return (struct index_file_header *)f->buf;
}

static void *section(struct fx *f, int s)
{
	return f->buf + hdr(f)->sections[s].offset;
}

static uint64_t count(struct fx *f, int s)
{
	return hdr(f)->sections[s].length / index_section_record(s);
}

/* The copy's packed entries, as a load would point at them. */
static struct compact_entries packed(struct fx *f)
{
	return (struct compact_entries){
		.entries = section(f, INDEX_SEC_ENTRIES),
		.entries_len = hdr(f)->sections[INDEX_SEC_ENTRIES].length,
		.blocks = section(f, INDEX_SEC_BLOCKS),
		.targets = section(f, INDEX_SEC_TARGETS),
		.targets_len = hdr(f)->sections[INDEX_SEC_TARGETS].length,
		.nr = hdr(f)->nr_inodes };
}

/* Append @len bytes of @s and a NUL to the wide names; their offset. */
static uint64_t wide_name_add(struct fx *f, const char *s, size_t len)
{
	uint64_t at = f->wide_names_len;

	f->wide_names = realloc(f->wide_names, at + len + 1);
	assert_non_null(f->wide_names);
	memcpy(f->wide_names + at, s, len);
	f->wide_names[at + len] = '\0';
	f->wide_names_len += len + 1;
	return at;
}

/* Unpack the copy's entries for editing (fixup() packs them again). */
static void unpack(struct fx *f)
{
	struct compact_entries c = packed(f);
	struct compact_cursor cur;
	uint32_t e = 0;

	f->wide = calloc(c.nr, sizeof(*f->wide));
	assert_non_null(f->wide);
	f->wide_names_len = 0;
	compact_cursor_init(&cur, &c, 0);
	for (struct shard_inode *in = f->wide; compact_cursor_next(&cur, in); in++, e++) {
		in->name = wide_name_add(f, cur.name, cur.name_len);
		in->name_len = (uint16_t)cur.name_len;
		if (S_ISLNK(in->mode))
			in->data = wide_name_add(f, c.targets + in->data, in->size);
	}
	assert_int_equal(e, c.nr);
}

/* Entry @e of the copy, unpacked, for a case to edit. */
static struct shard_inode *inode(struct fx *f, int64_t e)
{
	assert_true(e >= 0 && (uint64_t)e < hdr(f)->nr_inodes);
	if (!f->wide)
		unpack(f);
	return &f->wide[e];
}

/* The name of unpacked entry @e, for a case to edit. */
static char *wide_name(struct fx *f, int64_t e)
{
	uint64_t name = inode(f, e)->name;	/* unpacks first */

	return f->wide_names + name;
}

static struct index_file_shard *shard_rec(struct fx *f, uint32_t i)
{
	return (struct index_file_shard *)section(f, INDEX_SEC_SHARDS) + i;
}

static struct shard_sparse *sparse_map(struct fx *f, uint64_t i)
{
	return (struct shard_sparse *)section(f, INDEX_SEC_SPARSE) + i;
}

static struct shard_extent *extent(struct fx *f, uint64_t i)
{
	return (struct shard_extent *)section(f, INDEX_SEC_EXTENTS) + i;
}

static struct shard_hardlink *hardlink(struct fx *f, uint64_t i)
{
	return (struct shard_hardlink *)section(f, INDEX_SEC_HARDLINKS) + i;
}

/* Exchange two records of @size bytes. */
static void swap(void *a, void *b, size_t size)
{
	char t[64];

	assert_true(size <= sizeof(t));
	memcpy(t, a, size);
	memcpy(a, b, size);
	memcpy(b, t, size);
}

/* Entry number of @path in the fixture's index (must exist). */
static uint32_t entry(struct fx *f, const char *path)
{
	int64_t e = tb_entry(&f->env.fs.idx, path);

	if (e < 0)
		fail_msg("'%s' not in the fixture", path);
	return (uint32_t)e;
}

/* Start a case from the valid file. */
static void reset(struct fx *f)
{
	memcpy(f->buf, f->good, f->good_len);
	f->len = f->good_len;
	free(f->wide);
	f->wide = NULL;
}

/* compact_emit_fn into a growing buffer (struct tail). */
struct tail {
	char *bytes;	/* what was emitted */
	size_t len;	/* bytes in it */
};

static int tail_emit(void *arg, const void *block, size_t len)
{
	struct tail *t = arg;

	t->bytes = realloc(t->bytes, t->len + len);
	assert_non_null(t->bytes);
	memcpy(t->bytes + t->len, block, len);
	t->len += len;
	return 0;
}

/* Put @len bytes of @bytes as section @s at *@off of the copy. */
static void tail_section(struct fx *f, int s, const void *bytes, uint64_t len, uint64_t *off)
{
	uint64_t end = (*off + len + 63) & ~(uint64_t)63;

	if (end > f->cap) {
		f->cap = end;
		f->buf = realloc(f->buf, f->cap);
		assert_non_null(f->buf);
	}
	if (len)
		memmove(f->buf + *off, bytes, len);
	memset(f->buf + *off + len, 0, end - *off - len);	/* the padding */
	hdr(f)->sections[s].offset = *off;
	hdr(f)->sections[s].length = len;
	*off = end;
}

/*
 * Pack the edited entries into the copy: ENTRIES, BLOCKS, TARGETS, ORDER
 * and SUMS are the file's last sections (index_file.h), rewritten in
 * place.
 */
static void repack(struct fx *f)
{
	struct compact_encoder *enc = malloc(sizeof(*enc));
	uint64_t off = hdr(f)->sections[INDEX_SEC_ENTRIES].offset;
	uint64_t order_len = hdr(f)->sections[INDEX_SEC_ORDER].length;
	char *order = malloc(order_len + 1), *sums;
	uint64_t sums_len;
	struct tail t = { 0 };

	assert_non_null(enc);
	assert_non_null(order);
	memcpy(order, section(f, INDEX_SEC_ORDER), order_len);
	compact_encoder_init(enc, tail_emit, &t);
	assert_int_equal(shard_index_encode(enc, f->wide, hdr(f)->nr_inodes, f->wide_names), 0);
	tail_section(f, INDEX_SEC_ENTRIES, t.bytes, t.len, &off);
	tail_section(f, INDEX_SEC_BLOCKS, enc->blocks,
		     (compact_nr_blocks(hdr(f)->nr_inodes) + 1) * sizeof(uint64_t), &off);
	tail_section(f, INDEX_SEC_TARGETS, enc->targets, enc->targets_len, &off);
	tail_section(f, INDEX_SEC_ORDER, order, order_len, &off);
	sums_len = index_sum_count(hdr(f)) * sizeof(uint64_t);
	sums = calloc(1, sums_len + 1);		/* fixup() fills them in */
	assert_non_null(sums);
	tail_section(f, INDEX_SEC_SUMS, sums, sums_len, &off);
	f->len = off;
	hdr(f)->file_size = off;
	compact_encoder_release(enc);
	free(enc);
	free(order);
	free(sums);
	free(t.bytes);
}

/*
 * Make the checksums agree with the edited bytes: the sums, every section
 * that lies inside the buffer, then the header (index_file_reseal()).  A
 * lie fixed up this way can only be caught by the structural checks.
 */
static void fixup(struct fx *f)
{
	if (f->wide)
		repack(f);
	assert_int_equal(index_file_reseal(f->buf, f->len), 0);
}

/* cmocka's fail_msg, reported at the caller's location. */
#define FAIL_AT(file, line, ...) do { \
		print_error(__VA_ARGS__); \
		print_error("\n"); \
		_fail(file, line); \
	} while (0)

/* Load @path; the index must come back empty with -EINVAL. */
static void expect_rejected_file(const char *path, const char *what,
				 const char *file, int line)
{
	struct shard_index idx;
	struct index_file_shards sh;
	char msg[512];
	int rc;

	memset(&idx, 0, sizeof(idx));
	memset(msg, 0, sizeof(msg));
	rc = index_file_load(path, &idx, &sh, 0, msg, sizeof(msg));
	if (rc == 0)
		shard_index_release(&idx);
	if (rc != -EINVAL)
		FAIL_AT(file, line, "%s: index_file_load returned %d, expected -EINVAL (msg '%s')",
			  what, rc, msg);
	if (!strstr(msg, "offset") && !strstr(msg, "section"))
		FAIL_AT(file, line, "%s: message names no offset or section: '%s'",
			  what, msg);
	if (idx.map || idx.entries.entries || idx.entries.nr || idx.order)
		FAIL_AT(file, line, "%s: index not left empty after -EINVAL", what);
}

static void expect_rejected_at(struct fx *f, const char *what,
			       const char *file, int line)
{
	write_whole(f->bad_path, f->buf, f->len);
	expect_rejected_file(f->bad_path, what, file, line);
}

/* Write the edited copy as it is (checksums not fixed up): -EINVAL. */
#define expect_rejected(f, what) expect_rejected_at(f, what, __FILE__, __LINE__)
/* Fix the checksums up first: only the structural checks can object. */
#define expect_lie_rejected(f, what) \
	do { fixup(f); expect_rejected_at(f, what, __FILE__, __LINE__); } while (0)

/*
 * One row of a table of cases: start from the valid file, edit it, and
 * expect it rejected as it is (DAMAGE) or with its checksums fixed up
 * (LIE).  The edit may be several statements.
 */
#define DAMAGE(what, ...) do { reset(f); __VA_ARGS__; expect_rejected(f, what); } while (0)
#define LIE(what, ...) do { reset(f); __VA_ARGS__; expect_lie_rejected(f, what); } while (0)

/* The edited copy must load (the control for the helpers above). */
static void expect_loads(struct fx *f)
{
	struct shard_index idx;
	struct index_file_shards sh;
	char msg[512] = "";

	write_whole(f->bad_path, f->buf, f->len);
	if (index_file_load(f->bad_path, &idx, &sh, 0, msg, sizeof(msg)))
		fail_msg("an intact copy was rejected: %s", msg);
	shard_index_release(&idx);
}

/* ---- the record of a full check (index_verified.h) ------------------ */

/* Wait until @path's change time is settled enough for a record. */
static void wait_settled(const char *path)
{
	struct timespec now;
	struct stat st;

	for (;;) {
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(clock_gettime(CLOCK_REALTIME, &now), 0);
		if (now.tv_sec - st.st_ctim.tv_sec >= INDEX_VERIFIED_SETTLED_S)
			return;
		usleep(100 * 1000);
	}
}

/* index_file_load() of @path with @flags, the index released again. */
static int load_with(const char *path, unsigned flags)
{
	struct shard_index idx;
	struct index_file_shards sh;
	char msg[512];
	int rc = index_file_load(path, &idx, &sh, flags, msg, sizeof(msg));

	if (!rc)
		shard_index_release(&idx);
	return rc;
}

static bool has_record(const char *path)
{
	char rec[PATH_MAX + sizeof(INDEX_VERIFIED_SUFFIX)];
	struct stat st;

	snprintf(rec, sizeof(rec), "%s%s", path, INDEX_VERIFIED_SUFFIX);
	return !lstat(rec, &st);
}

static void test_record_of_a_full_check(void **state)
{
	struct fx *f = *state;
	char good[PATH_MAX], rec[PATH_MAX + sizeof(INDEX_VERIFIED_SUFFIX)];
	char crashed[PATH_MAX + 32];
	time_t then = time(NULL) - TMP_FILE_STALE_SECONDS - 60;
	struct timespec stale[2] = { { then, 0 }, { then, 0 } };
	uint32_t e = entry(f, "z/zz.txt");
	struct stat st, other;

	snprintf(good, sizeof(good), "%s/good.idx", f->env.dir);
	snprintf(rec, sizeof(rec), "%s%s", f->bad_path, INDEX_VERIFIED_SUFFIX);
	write_whole(good, f->good, f->good_len);
	reset(f);	/* a name changed: only the checksum tells */
	wide_name(f, e)[0] = 'y';
	fixup(f);
	hdr(f)->sections[INDEX_SEC_ENTRIES].xxh3 = ((struct index_file_header *)f->good)->
						   sections[INDEX_SEC_ENTRIES].xxh3;
	hdr(f)->header_xxh3 = 0;
	hdr(f)->header_xxh3 = XXH3_64bits(hdr(f), sizeof(struct index_file_header));
	write_whole(f->bad_path, f->buf, f->len);

	/* a file as new as the clock gets no record: a change in the same
	 * tick of the clock would keep its change time */
	assert_int_equal(load_with(good, 0), 0);
	assert_false(has_record(good));
	wait_settled(good);
	wait_settled(f->bad_path);
	snprintf(crashed, sizeof(crashed), "%s%s.tmp.AbC123", good, INDEX_VERIFIED_SUFFIX);
	write_whole(crashed, "", 0);
	assert_int_equal(utimensat(AT_FDCWD, crashed, stale, 0), 0);
	assert_int_equal(load_with(good, 0), 0);
	assert_true(has_record(good));
	assert_int_equal(access(crashed, F_OK), -1);	/* a crashed writer's, swept */
	assert_int_equal(load_with(f->bad_path, 0), -EINVAL);
	assert_false(has_record(f->bad_path));

	/* a record for the damaged file, as if it had passed: trusted, its
	 * sections unread, but not by a full check */
	assert_int_equal(stat(f->bad_path, &st), 0);
	assert_false(index_verified_holds(f->bad_path, &st, hdr(f)->header_xxh3));
	index_verified_record(f->bad_path, &st, hdr(f)->header_xxh3);
	assert_true(index_verified_holds(f->bad_path, &st, hdr(f)->header_xxh3));
	assert_false(index_verified_holds(f->bad_path, &st, hdr(f)->header_xxh3 ^ 1));
	assert_int_equal(load_with(f->bad_path, 0), 0);
	/* the same file seen by another node of a shared file system, which
	 * numbers its devices otherwise: the record holds there too */
	other = st;
	other.st_dev ^= 0x2a;
	assert_true(index_verified_holds(f->bad_path, &other, hdr(f)->header_xxh3));
	other = st;
	other.st_ino ^= 1;
	assert_false(index_verified_holds(f->bad_path, &other, hdr(f)->header_xxh3));
	assert_int_equal(load_with(f->bad_path, INDEX_LOAD_FULL_CHECK), -EINVAL);

	/* a record others may write is not trusted */
	assert_int_equal(chmod(rec, 0664), 0);
	assert_int_equal(load_with(f->bad_path, 0), -EINVAL);
	assert_int_equal(chmod(rec, 0644), 0);
	assert_int_equal(load_with(f->bad_path, 0), 0);

	/* the same bytes written again: another change time, a full check */
	write_whole(f->bad_path, f->buf, f->len);
	assert_int_equal(load_with(f->bad_path, 0), -EINVAL);
	assert_int_equal(unlink(rec), 0);
	assert_int_equal(stat(f->bad_path, &st), 0);
	index_verified_record(f->bad_path, &st, hdr(f)->header_xxh3);
	assert_false(has_record(f->bad_path));
}

/* ---- lazy checks of a recorded file (index_guard.h) ----------------- */

/* Files in each of the two directories of the lazy-check set: their
 * entries take several spans of INDEX_SUM_SPAN bytes each. */
#define LAZY_DIR_FILES 3000

/* Directories a/ and b/ of LAZY_DIR_FILES files each, and b/zz-last.jpg,
 * whose name is the last byte of ENTRIES, indexed to @path. */
static void lazy_set(struct tb_env *e, const char *path)
{
	struct tb a = { 0 };
	char name[64], msg[512] = "";

	for (int d = 0; d < 2; d++)
		for (int i = 0; i < LAZY_DIR_FILES; i++) {
			snprintf(name, sizeof(name), "%c/sample-%06d.jpg", 'a' + d, i * 7919 % 1000003);
			tb_file(&a, name, "x");
		}
	tb_file(&a, "b/zz-last.jpg", "x");
	tb_env_shard(e, "00.tar", &a);
	tb_env_build(e);
	if (index_file_write(path, &e->fs.idx, &e->fs.set, OPTIONS_HASH, msg, sizeof(msg)))
		fail_msg("index_file_write: %s", msg);
}

/* Look @file up in directory @dir of @idx: an entry or -errno. */
static int64_t lazy_lookup(const struct shard_index *idx, const char *dir, const char *file)
{
	int64_t d = shard_index_lookup(idx, 0, dir, strlen(dir));

	return d < 0 ? d : shard_index_lookup(idx, (uint32_t)d, file, strlen(file));
}

/*
 * Bytes that change beneath the file system after a file's full check
 * (bit rot: the change time stays, so the record holds) are found when
 * first touched: a lookup whose search reads them fails with EIO, the
 * other directory is served, the record goes, and a full check names the
 * offset.  The last byte of ENTRIES is a name of b/'s last group.
 */
static void test_lazy_check_of_a_recorded_file(void **state)
{
	struct tb_env *e = *state;
	char path[PATH_MAX], msg[512] = "";
	struct index_file_shards sh;
	struct shard_index idx;
	struct stat st;
	size_t len;
	char *bytes;
	const struct index_file_header *h;

	snprintf(path, sizeof(path), "%s/lazy.idx", e->dir);
	lazy_set(e, path);
	bytes = read_whole(path, &len);
	h = (const struct index_file_header *)bytes;
	assert_true(h->sections[INDEX_SEC_ENTRIES].length > 4 * INDEX_SUM_SPAN);
	bytes[h->sections[INDEX_SEC_ENTRIES].offset + h->sections[INDEX_SEC_ENTRIES].length - 1] ^= 1;
	write_whole(path, bytes, len);
	wait_settled(path);
	assert_int_equal(stat(path, &st), 0);
	index_verified_record(path, &st, h->header_xxh3);
	assert_true(has_record(path));

	assert_int_equal(index_file_load(path, &idx, &sh, 0, msg, sizeof(msg)), 0);
	assert_non_null(idx.guard);
	assert_true(lazy_lookup(&idx, "a", "sample-000000.jpg") > 0);
	assert_int_equal(lazy_lookup(&idx, "b", "zz-last.jpg"), -EIO);
	assert_int_equal(lazy_lookup(&idx, "b", "zz-last.jpg"), -EIO);
	assert_true(lazy_lookup(&idx, "a", "sample-007919.jpg") > 0);
	assert_false(has_record(path));		/* the next mount checks all */
	assert_int_equal(shard_index_check_all(&idx), -EIO);
	shard_index_release(&idx);

	assert_int_equal(index_file_load(path, &idx, &sh, 0, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "offset"));

	/* the same file undamaged, recorded: all of it checks */
	bytes[h->sections[INDEX_SEC_ENTRIES].offset + h->sections[INDEX_SEC_ENTRIES].length - 1] ^= 1;
	write_whole(path, bytes, len);
	wait_settled(path);
	assert_int_equal(stat(path, &st), 0);
	index_verified_record(path, &st, h->header_xxh3);
	assert_int_equal(index_file_load(path, &idx, &sh, 0, msg, sizeof(msg)), 0);
	assert_non_null(idx.guard);
	assert_true(lazy_lookup(&idx, "b", "zz-last.jpg") > 0);
	assert_int_equal(shard_index_check_all(&idx), 0);
	assert_true(has_record(path));
	shard_index_release(&idx);
	free(bytes);
}

/* ---- round trip ----------------------------------------------------- */

static void expect_same_bytes(const void *a, const void *b, size_t len,
			      const char *what)
{
	if (len && memcmp(a, b, len))
		fail_msg("%s differs after the round trip", what);
}

/* The packed entries of @a and @b are the same bytes. */
static bool same_entries(const struct shard_index *a, const struct shard_index *b)
{
	const struct compact_entries *x = &a->entries, *y = &b->entries;

	return x->nr == y->nr && x->entries_len == y->entries_len &&
	       x->targets_len == y->targets_len &&
	       !memcmp(x->entries, y->entries, x->entries_len) &&
	       !memcmp(x->targets, y->targets, x->targets_len) &&
	       !memcmp(x->blocks, y->blocks, (compact_nr_blocks(x->nr) + 1) * sizeof(uint64_t));
}

static void expect_same_entries(const struct shard_index *a, const struct shard_index *b)
{
	if (!same_entries(a, b))
		fail_msg("the packed entries differ after the round trip");
}

/* Every answer of @a (built) and @b (loaded) about entry @e is the same. */
static void expect_same_entry(struct shardfs *a, struct shardfs *b, uint32_t e)
{
	static const char *const xattrs[] = {
		"user.shardfs.shard", "user.shardfs.shard_index",
		"user.shardfs.offset", "user.shardfs.key",
	};
	uint64_t ino = (uint64_t)e + 1;
	struct stat sa, sb;
	struct shard_inode entry, *in = &entry;
	char pa[PATH_MAX], pb[PATH_MAX];

	shard_index_entry(&a->idx, e, in);
	assert_int_equal(shardfs_getattr(a, ino, &sa), 0);
	assert_int_equal(shardfs_getattr(b, ino, &sb), 0);
	assert_memory_equal(&sa, &sb, sizeof(sa));
	assert_int_equal(shard_index_entry_path(&a->idx, e, pa, sizeof(pa)),
			 shard_index_entry_path(&b->idx, e, pb, sizeof(pb)));
	assert_string_equal(pa, pb);
	if (e)
		assert_int_equal(tb_ino(b, pa), tb_ino(a, pa));
	if (S_ISDIR(in->mode)) {
		struct shardfs_dirent da = { 0 }, db = { 0 };
		uint64_t pos = 0;
		int ra, rb;

		assert_int_equal(shardfs_parent(a, ino), shardfs_parent(b, ino));
		do {
			ra = shardfs_readdir_entry(a, ino, pos, &da);
			rb = shardfs_readdir_entry(b, ino, pos, &db);
			assert_int_equal(ra, rb);
			if (!ra) {
				uint64_t la, lb;

				assert_string_equal(da.name, db.name);
				assert_int_equal(da.ino, db.ino);
				assert_int_equal(shardfs_lookup(a, ino, da.name, &la), 0);
				assert_int_equal(shardfs_lookup(b, ino, db.name, &lb), 0);
				assert_int_equal(la, lb);
			}
			pos++;
		} while (!ra);
		assert_int_equal(pos, in->size + 1);
	} else if (S_ISLNK(in->mode)) {
		const char *ta, *tb;

		assert_int_equal(shardfs_readlink(a, ino, &ta), 0);
		assert_int_equal(shardfs_readlink(b, ino, &tb), 0);
		assert_string_equal(ta, tb);
	} else {
		size_t size = (size_t)in->size;
		char *ba = malloc(size + 1), *bb = malloc(size + 1);

		assert_non_null(ba);
		assert_non_null(bb);
		assert_int_equal(shardfs_read(a, ino, ba, size + 1, 0), (ssize_t)size);
		assert_int_equal(shardfs_read(b, ino, bb, size + 1, 0), (ssize_t)size);
		assert_memory_equal(ba, bb, size ? size : 1);
		free(ba);
		free(bb);
		for (size_t x = 0; x < sizeof(xattrs) / sizeof(*xattrs); x++) {
			char va[PATH_MAX] = "", vb[PATH_MAX] = "";
			ssize_t la = shardfs_getxattr(a, ino, xattrs[x], va, sizeof(va));
			ssize_t lb = shardfs_getxattr(b, ino, xattrs[x], vb, sizeof(vb));

			assert_int_equal(la, lb);
			if (la > 0)
				assert_memory_equal(va, vb, (size_t)la);
		}
	}
}

/* The seek tables of the file are those of the shards' sources. */
static void expect_same_seek_tables(const struct index_file_shards *sh,
				    const struct shard_set *set)
{
	for (uint32_t i = 0; i < sh->nr; i++) {
		struct shard_source *src = set->shards[i].src;
		const struct seek_table *want = src->ops->seek_get ?
						src->ops->seek_get(src) : NULL;
		struct seek_table got;

		assert_int_equal(index_file_seek_table(sh, i, &got), want != NULL);
		if (!want)
			continue;
		assert_int_equal(got.nr, want->nr);
		assert_int_equal(got.size, want->size);
		assert_int_equal(got.stored_size, want->stored_size);
		assert_int_equal(got.windows_len, want->windows_len);
		expect_same_bytes(got.points, want->points, want->nr * sizeof(*want->points),
				  "seek points");
		expect_same_bytes(got.windows, want->windows, want->windows_len, "windows");
	}
}

/* Two sources serve the same stream, read in 1 MiB steps. */
static void expect_same_stream(struct shard_source *a, struct shard_source *b)
{
	enum { STEP = 1 << 20 };
	char *x = malloc(STEP), *y = malloc(STEP);

	assert_non_null(x);
	assert_non_null(y);
	assert_int_equal(a->size, b->size);
	for (uint64_t off = 0; off < a->size; off += STEP) {
		size_t n = a->size - off < STEP ? a->size - off : STEP;

		assert_int_equal(shard_source_read_full(a, x, n, off), 0);
		assert_int_equal(shard_source_read_full(b, y, n, off), 0);
		assert_memory_equal(x, y, n);
	}
	free(x);
	free(y);
}

static void test_round_trip(void **state)
{
	struct fx *f = *state;
	const struct shard_index *built = &f->env.fs.idx;
	const struct shard_set *set = &f->env.fs.set;
	const struct shard_index_build_options bo = { .threads = 1 };
	const struct index_store_options so = {
		.path = f->path, .mode = INDEX_MODE_REQUIRE,
		.options_hash = OPTIONS_HASH,
	};
	struct shard_index idx;
	struct index_file_shards sh;
	struct shardfs loaded = { 0 };
	const struct index_file_header *h = (const struct index_file_header *)f->good;
	char msg[512] = "";

	/* the fixture exercises every section */
	assert_true(built->nr_sparse >= 1);
	assert_true(built->nr_extents >= 2);
	assert_true(built->nr_hardlinks >= 2);
	assert_int_equal(set->nr, 3);
	assert_non_null(set->shards[2].src->ops->seek_get(set->shards[2].src));
	assert_true(set->shards[2].src->ops->seek_get(set->shards[2].src)->windows_len > 0);

	/* the header mirror agrees with the writer */
	assert_memory_equal(h->magic, INDEX_FILE_MAGIC, 8);
	assert_int_equal(h->version, INDEX_FILE_VERSION);
	assert_int_equal(h->byte_order, INDEX_BYTE_ORDER);
	assert_int_equal(h->file_size, f->good_len);
	assert_int_equal(h->options_hash, OPTIONS_HASH);
	assert_int_equal(h->nr_shards, set->nr);
	assert_int_equal(h->nr_inodes, shard_index_nr(built));
	for (int s = 0; s < INDEX_NR_SECTIONS; s++) {
		assert_int_equal(h->sections[s].offset % 64, 0);
		assert_true(h->sections[s].offset >= sizeof(*h));
		assert_true(h->sections[s].offset + h->sections[s].length <= f->good_len);
		assert_int_equal(h->sections[s].xxh3,
				 XXH3_64bits(f->good + h->sections[s].offset,
					     h->sections[s].length));
	}

	/* the arrays come back byte for byte */
	assert_int_equal(index_file_load(f->path, &idx, &sh, 0, msg, sizeof(msg)), 0);
	assert_non_null(idx.map);
	assert_int_equal(idx.map->len, f->good_len);
	expect_same_entries(&idx, built);
	assert_int_equal(idx.nr_sparse, built->nr_sparse);
	assert_int_equal(idx.nr_extents, built->nr_extents);
	assert_int_equal(idx.nr_hardlinks, built->nr_hardlinks);
	expect_same_bytes(idx.sparse, built->sparse,
			  built->nr_sparse * sizeof(*built->sparse), "sparse");
	expect_same_bytes(idx.extents, built->extents,
			  built->nr_extents * sizeof(*built->extents), "extents");
	expect_same_bytes(idx.hardlinks, built->hardlinks,
			  built->nr_hardlinks * sizeof(*built->hardlinks), "hardlinks");
	expect_same_bytes(&idx.counts, &built->counts, sizeof(idx.counts), "counts");
	/* ORDER, computed from the entries as the file was sealed */
	assert_true(built->nr_order >= 3);
	assert_int_equal(idx.nr_order, built->nr_order);
	expect_same_bytes(idx.order, built->order, built->nr_order * sizeof(*built->order),
			  "order");

	/* the shard table identifies the shards, relative to the index */
	assert_int_equal(sh.nr, set->nr);
	assert_int_equal(sh.options_hash, OPTIONS_HASH);
	for (uint32_t i = 0; i < sh.nr; i++) {
		const struct index_file_shard *r = &sh.shards[i];
		const struct shard *s = &set->shards[i];
		const char *base = strrchr(s->path, '/') + 1;
		uint64_t fp;

		assert_int_equal(r->flags, 0);
		assert_int_equal(r->name_len, strlen(base));
		assert_memory_equal(sh.names + r->name, base, r->name_len);
		assert_int_equal(r->size, s->size);
		assert_int_equal(r->mtime_sec, s->mtime.tv_sec);
		assert_int_equal(r->mtime_nsec, s->mtime.tv_nsec);
		assert_int_equal(r->ctime_sec, s->ctime.tv_sec);
		assert_int_equal(r->ctime_nsec, s->ctime.tv_nsec);
		assert_int_equal(r->members, s->members);
		assert_int_equal(index_file_fingerprint(s->src, &fp), 0);
		assert_int_equal(r->fingerprint, fp);
	}
	expect_same_seek_tables(&sh, set);
	shard_index_release(&idx);
	assert_null(idx.map);

	/* a shardfs that loads the file answers exactly like the builder */
	assert_int_equal(shardfs_init(&loaded, f->env.dir, &bo, &so), 0);
	assert_int_equal(loaded.index_file.origin, INDEX_LOADED);
	assert_false(loaded.index_file.saved);
	assert_non_null(loaded.idx.map);
	assert_int_equal(shard_index_nr(&loaded.idx), shard_index_nr(built));
	for (uint32_t e = 0; e < shard_index_nr(built); e++)
		expect_same_entry(&f->env.fs, &loaded, e);
	assert_int_equal(tb_ino(&loaded, "dir/a.txt"), tb_ino(&f->env.fs, "dir/a.txt"));
	assert_int_equal(tb_stat(&loaded, "hard2").st_ino, tb_stat(&loaded, "dir/b.txt").st_ino);
	assert_int_equal(tb_stat(&loaded, "holes").st_size, SPARSE_SIZE);
	/* the gzip shard is served from the recorded table, same bytes */
	expect_same_stream(loaded.set.shards[2].src, set->shards[2].src);
	shardfs_release(&loaded);
}

/* Writing twice gives the same bytes: nothing uninitialised is saved. */
static void test_write_is_deterministic(void **state)
{
	struct fx *f = *state;
	char again[PATH_MAX], msg[512] = "";
	size_t len;
	char *bytes;

	snprintf(again, sizeof(again), "%s/again.idx", f->env.dir);
	assert_int_equal(index_file_write(again, &f->env.fs.idx, &f->env.fs.set,
					  OPTIONS_HASH, msg, sizeof(msg)), 0);
	bytes = read_whole(again, &len);
	assert_int_equal(len, f->good_len);
	assert_memory_equal(bytes, f->good, len);
	free(bytes);
}

/* An index outside the shards' directory records absolute shard paths. */
static void test_shards_elsewhere_are_absolute(void **state)
{
	struct fx *f = *state;
	char *other = tb_tmpdir(), path[PATH_MAX], msg[512] = "";
	struct shard_index idx;
	struct index_file_shards sh;

	snprintf(path, sizeof(path), "%s/set.idx", other);
	assert_int_equal(index_file_write(path, &f->env.fs.idx, &f->env.fs.set, 0,
					  msg, sizeof(msg)), 0);
	assert_int_equal(index_file_load(path, &idx, &sh, 0, msg, sizeof(msg)), 0);
	for (uint32_t i = 0; i < sh.nr; i++) {
		const char *want = f->env.fs.set.shards[i].path;

		assert_int_equal(sh.shards[i].flags, INDEX_SHARD_ABSOLUTE);
		assert_int_equal(sh.shards[i].name_len, strlen(want));
		assert_memory_equal(sh.names + sh.shards[i].name, want, strlen(want));
	}
	shard_index_release(&idx);
	tb_rmtree(other);
}

/* Atomic writes leave no temporary file, on success or on failure. */
static void test_write_leaves_no_temporary(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX], msg[512] = "";
	struct dirent *d;
	DIR *dir;

	snprintf(path, sizeof(path), "%s/no/such/dir/set.idx", f->env.dir);
	assert_int_equal(index_file_write(path, &f->env.fs.idx, &f->env.fs.set, 0,
					  msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "no/such/dir"));
	dir = opendir(f->env.dir);
	assert_non_null(dir);
	while ((d = readdir(dir)))
		if (strstr(d->d_name, ".tmp."))
			fail_msg("temporary file %s left behind", d->d_name);
	closedir(dir);
}

static void test_missing_file_is_enoent(void **state)
{
	struct fx *f = *state;
	struct shard_index idx;
	struct index_file_shards sh;
	char path[PATH_MAX], msg[64];

	snprintf(path, sizeof(path), "%s/absent.idx", f->env.dir);
	assert_int_equal(index_file_load(path, &idx, &sh, 0, msg, sizeof(msg)), -ENOENT);
}

/* Not a regular file: refused at once, a FIFO included (no hang). */
static void test_fifo_or_directory_is_refused(void **state)
{
	struct fx *f = *state;
	struct shard_index idx;
	struct index_file_shards sh;
	char msg[512] = "";

	assert_int_equal(mkfifo(f->bad_path, 0600), 0);
	assert_int_equal(index_file_load(f->bad_path, &idx, &sh, 0, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "offset 0: not a regular file"));
	assert_int_equal(index_file_load(f->env.dir, &idx, &sh, 0, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not a regular file"));
}

/* The helpers themselves: an intact copy loads, fixup() changes nothing. */
static void test_intact_copy_and_fixup_load(void **state)
{
	struct fx *f = *state;

	reset(f);
	expect_loads(f);
	fixup(f);
	assert_memory_equal(f->buf, f->good, f->good_len);
	expect_loads(f);
}

/* The header alone (shardfs-index --stats): read and checked, not trusted. */
static void test_read_header(void **state)
{
	struct fx *f = *state;
	struct index_file_header h;
	char msg[512] = "", absent[PATH_MAX + 8];

	assert_int_equal(index_file_read_header(f->path, &h, msg, sizeof(msg)), 0);
	assert_memory_equal(&h, f->good, sizeof(h));
	snprintf(absent, sizeof(absent), "%s.absent", f->path);
	assert_int_equal(index_file_read_header(absent, &h, msg, sizeof(msg)), -ENOENT);
	reset(f);
	f->len = sizeof(h) - 1;
	write_whole(f->bad_path, f->buf, f->len);
	assert_int_equal(index_file_read_header(f->bad_path, &h, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "offset 0"));
	reset(f);
	hdr(f)->version++;
	fixup(f);
	write_whole(f->bad_path, f->buf, f->len);
	assert_int_equal(index_file_read_header(f->bad_path, &h, msg, sizeof(msg)), -EINVAL);
	reset(f);
	f->len -= 64;
	write_whole(f->bad_path, f->buf, f->len);
	assert_int_equal(index_file_read_header(f->bad_path, &h, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "offset 16"));
}

/* ---- the file changed under a loaded index (index_map.c) ----------- */

/* The loaded arrays are still those that were built. */
static void expect_same_arrays(const struct shard_index *idx, const struct shard_index *built)
{
	expect_same_entries(idx, built);
	expect_same_bytes(idx->extents, built->extents,
			  built->nr_extents * sizeof(*built->extents), "extents");
}

/* What the process maps from @path, as /proc/self/maps names it. */
static bool maps_file(const char *path)
{
	char line[PATH_MAX + 128];
	bool found = false;
	FILE *maps = fopen("/proc/self/maps", "r");

	assert_non_null(maps);
	while (fgets(line, sizeof(line), maps))
		found |= strstr(line, path) && !strstr(line, "(deleted)");
	fclose(maps);
	return found;
}

/* Load the fixture's file; it must be served in place, under a lease. */
static void load_leased(struct fx *f, struct shard_index *idx)
{
	struct index_file_shards sh;
	char msg[512] = "";

	if (index_file_load(f->path, idx, &sh, 0, msg, sizeof(msg)))
		fail_msg("index_file_load: %s", msg);
	assert_int_equal(idx->map->kind, INDEX_MAP_FILE);
	assert_true(maps_file(f->path));
}

/*
 * Truncated, rewritten in place, or replaced by rename: the load keeps the
 * arrays it checked.  A write waits until the index serves a private copy
 * (this process's watcher thread does it while truncate() waits).
 */
static void test_file_changed_under_the_load(void **state)
{
	struct fx *f = *state;
	const struct shard_index *built = &f->env.fs.idx;
	char other[PATH_MAX + 8];
	struct shard_index idx;

	load_leased(f, &idx);
	assert_int_equal(truncate(f->path, 0), 0);
	assert_int_equal(idx.map->kind, INDEX_MAP_COPY);
	assert_false(maps_file(f->path));
	expect_same_arrays(&idx, built);
	shard_index_release(&idx);

	write_whole(f->path, f->good, f->good_len);
	load_leased(f, &idx);
	reset(f);
	memset(f->buf + f->len / 4, 0xff, f->len / 2);
	write_whole(f->path, f->buf, f->len);	/* O_TRUNC, then the garbage */
	expect_same_arrays(&idx, built);
	shard_index_release(&idx);

	write_whole(f->path, f->good, f->good_len);
	load_leased(f, &idx);
	snprintf(other, sizeof(other), "%s.new", f->path);
	write_whole(other, f->buf, f->len);
	assert_int_equal(rename(other, f->path), 0);
	assert_int_equal(idx.map->kind, INDEX_MAP_FILE);	/* nothing to do */
	expect_same_arrays(&idx, built);
	shard_index_release(&idx);
}

/* No lease while someone has the file open for writing: a private copy. */
static void test_file_open_for_writing_is_copied(void **state)
{
	struct fx *f = *state;
	struct shard_index idx;
	struct index_file_shards sh;
	char msg[512] = "";
	int writer = open(f->path, O_WRONLY);

	assert_true(writer >= 0);
	assert_int_equal(index_file_load(f->path, &idx, &sh, 0, msg, sizeof(msg)), 0);
	assert_int_equal(idx.map->kind, INDEX_MAP_COPY);
	assert_false(maps_file(f->path));
	assert_int_equal(ftruncate(writer, 0), 0);
	close(writer);
	expect_same_arrays(&idx, &f->env.fs.idx);
	shard_index_release(&idx);
}

/*
 * Loaded, then forked to serve, as the daemon does: after the handoff the
 * child is told of the write and switches; the parent is not told.
 */
static void test_handoff_to_a_child(void **state)
{
	struct fx *f = *state;
	struct shard_index idx;
	int status, go[2];
	pid_t child;
	char c = 0;

	load_leased(f, &idx);
	assert_int_equal(pipe(go), 0);
	index_map_handoff();
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {	/* no cmocka here: its failures return to the runner */
		const struct shard_index *built = &f->env.fs.idx;

		index_map_adopt();
		if (write(go[1], &c, 1) != 1)
			_exit(2);
		/* the parent truncates: wait (10 s at most) for the copy */
		for (int ms = 0; ms < 10000 && idx.map->kind == INDEX_MAP_FILE; ms++)
			usleep(1000);
		bool same = idx.map->kind == INDEX_MAP_COPY &&
			    same_entries(&idx, built);

		shard_index_release(&idx);
		_exit(same ? 0 : 1);
	}
	assert_int_equal(read(go[0], &c, 1), 1);
	assert_int_equal(truncate(f->path, 0), 0);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* the parent handed its lease over: its own map was left alone */
	assert_int_equal(idx.map->kind, INDEX_MAP_FILE);
	close(go[0]);
	close(go[1]);
	shard_index_release(&idx);
}

/* ---- accidental damage: header, sizes, checksums -------------------- */

static void test_bad_magic_version_byte_order(void **state)
{
	struct fx *f = *state;

	DAMAGE("magic, lower-case S", f->buf[0] ^= 0x20);
	LIE("magic, checksum fixed up", memcpy(hdr(f)->magic, "SHARDIDY", 8));
	DAMAGE("magic zeroed", memset(f->buf, 0, 8));

	LIE("a future version", hdr(f)->version = INDEX_FILE_VERSION + 1);
	LIE("version 2 (no ORDER section: rebuilt, never misread)", hdr(f)->version = 2);
	LIE("version 3 (64-byte entries: rebuilt, never misread)", hdr(f)->version = 3);
	LIE("version 0", hdr(f)->version = 0);

	LIE("the other byte order", hdr(f)->byte_order = __builtin_bswap32(INDEX_BYTE_ORDER));
	DAMAGE("byte order zeroed", hdr(f)->byte_order = 0);
}

static void test_bad_header_checksum(void **state)
{
	struct fx *f = *state;

	for (size_t off = 8; off < sizeof(struct index_file_header); off += 8) {
		char what[64];

		reset(f);
		f->buf[off] ^= 1;
		snprintf(what, sizeof(what), "header byte %zu flipped", off);
		expect_rejected(f, what);
	}
}

static void test_bad_file_size(void **state)
{
	struct fx *f = *state;

	LIE("header says 64 bytes more", hdr(f)->file_size += 64);
	LIE("header says 64 bytes less", hdr(f)->file_size -= 64);
	DAMAGE("64 bytes appended", memset(f->buf + f->len, 0, 64); f->len += 64);
}

static void test_truncated_file(void **state)
{
	struct fx *f = *state;
	const size_t cuts[] = {
		0, 1, 8, 16, sizeof(struct index_file_header) - 1, sizeof(struct index_file_header),
		sizeof(struct index_file_header) + 1, 0 /* half */, 0 /* all but one byte */,
		0 /* all but the last section */,
	};

	for (size_t i = 0; i < sizeof(cuts) / sizeof(*cuts); i++) {
		char what[64];

		reset(f);
		f->len = i == 7 ? f->good_len / 2 : i == 8 ? f->good_len - 1 :
			 i == 9 ? hdr(f)->sections[INDEX_SEC_HARDLINKS].offset : cuts[i];
		snprintf(what, sizeof(what), "truncated to %zu of %zu bytes", f->len,
			 f->good_len);
		expect_rejected(f, what);
	}
}

static void test_bad_section_table(void **state)
{
	struct fx *f = *state;

	for (int s = 0; s < INDEX_NR_SECTIONS; s++) {
		struct index_section_entry *e;
		char what[128];

#define SECTION_CASE(desc, edit) do { \
		reset(f); \
		e = &hdr(f)->sections[s]; \
		edit; \
		snprintf(what, sizeof(what), "section %s: %s", index_section_name(s), desc); \
		expect_lie_rejected(f, what); \
	} while (0)

		SECTION_CASE("offset misaligned", e->offset += 8);
		SECTION_CASE("offset misaligned by one", e->offset += 1);
		SECTION_CASE("offset inside the header", e->offset = 0);
		SECTION_CASE("offset at the end of the file", e->offset = f->good_len);
		SECTION_CASE("offset past the end", e->offset = f->good_len + 64);
		SECTION_CASE("offset near 2^64", e->offset = UINT64_MAX & ~(uint64_t)63);
		SECTION_CASE("length past the end", e->length = f->good_len);
		SECTION_CASE("length wraps around", e->length = UINT64_MAX - e->offset + 65);
		SECTION_CASE("length 2^64 - 1", e->length = UINT64_MAX);
		if (index_section_record(s) > 1)
			SECTION_CASE("length not a whole number of records",
				     e->length -= 1);
#undef SECTION_CASE
	}

	LIE("nr_inodes one more than the section holds", hdr(f)->nr_inodes++);
	LIE("nr_inodes one less than the section holds", hdr(f)->nr_inodes--);
	LIE("nr_shards one more than the section holds", hdr(f)->nr_shards++);
	LIE("no entries at all (not even the root)",
	    hdr(f)->nr_inodes = 0; hdr(f)->sections[INDEX_SEC_BLOCKS].length = 0);
}

static void test_bad_section_checksums(void **state)
{
	struct fx *f = *state;

	for (int s = 0; s < INDEX_NR_SECTIONS; s++) {
		const struct index_section_entry *e = &((struct index_file_header *)f->good)->sections[s];
		const uint64_t where[] = { 0, e->length / 2, e->length - 1 };
		char what[128];

		assert_true(e->length > 0);	/* the fixture fills every section */
		for (size_t w = 0; w < 3; w++) {
			reset(f);
			f->buf[e->offset + where[w]] ^= 0x01;
			snprintf(what, sizeof(what), "section %s: byte %llu flipped",
				 index_section_name(s), (unsigned long long)where[w]);
			expect_rejected(f, what);
		}
		reset(f);
		hdr(f)->sections[s].xxh3 ^= 1;
		snprintf(what, sizeof(what), "section %s: stored xxh3 wrong (header fixed up)",
			 index_section_name(s));
		hdr(f)->header_xxh3 = 0;
		hdr(f)->header_xxh3 = XXH3_64bits(hdr(f), sizeof(struct index_file_header));
		expect_rejected(f, what);
	}
}

/* ---- deliberate lies with valid checksums --------------------------- */

static void test_lie_child_range(void **state)
{
	struct fx *f = *state;
	uint32_t dir = entry(f, "dir"), n = ((struct index_file_header *)f->good)->nr_inodes;

	LIE("root claims as many children as there are entries", inode(f, 0)->size = n);
	LIE("dir claims one child more", inode(f, dir)->size += 1);
	LIE("dir's children start at the last entry", inode(f, dir)->data = n - 1);
	LIE("dir's children start past the last entry",
	    inode(f, dir)->data = n; inode(f, dir)->size = 1);
	LIE("dir's children start at 2^64 - 1", inode(f, dir)->data = UINT64_MAX);
	LIE("dir claims 2^64 - 1 children", inode(f, dir)->size = UINT64_MAX);
	LIE("root's children start at the root", inode(f, 0)->data = 0);
	LIE("dir is its own first child", inode(f, dir)->data = dir);
	LIE("dir's children start before it", inode(f, dir)->data = 1);
}

static void test_lie_child_not_pointing_back(void **state)
{
	struct fx *f = *state;
	uint32_t dir = entry(f, "dir"), a = entry(f, "dir/a.txt");
	uint32_t sub = entry(f, "dir/sub"), deep = entry(f, "dir/sub/deep.txt");

	LIE("dir/a.txt says its parent is the root", inode(f, a)->parent = 0);
	LIE("dir/sub/deep.txt says its parent is dir", inode(f, deep)->parent = dir);
	LIE("dir/sub says its parent is z", inode(f, sub)->parent = entry(f, "z"));
}

/*
 * The other half of "children point back": every entry but the root lies
 * in its parent's child range.  dir lists one child less, so its last
 * child (dir/sub) is an orphan: its parent field names dir, dir does not
 * list it.
 */
static void test_lie_orphan_entry(void **state)
{
	struct fx *f = *state;
	uint32_t dir = entry(f, "dir");

	LIE("dir lists one child less than point to it",
	    inode(f, dir)->size -= 1; inode(f, dir)->nlink -= 1);
}

static void swap_names(struct fx *f, uint32_t a, uint32_t b)
{
	struct shard_inode *x = inode(f, a), *y = inode(f, b);
	uint64_t name = x->name;
	uint16_t len = x->name_len;

	x->name = y->name;
	x->name_len = y->name_len;
	y->name = name;
	y->name_len = len;
}

static void test_lie_unsorted_children(void **state)
{
	struct fx *f = *state;
	uint32_t a = entry(f, "dir/a.txt"), b = entry(f, "dir/b.txt");
	uint32_t first = (uint32_t)inode((reset(f), f), 0)->data;

	LIE("dir/a.txt and dir/b.txt swap names", swap_names(f, a, b));
	LIE("the root's first two children swap names", swap_names(f, first, first + 1));
	LIE("dir holds a.txt twice",
	    inode(f, b)->name = inode(f, a)->name; inode(f, b)->name_len = inode(f, a)->name_len);
	reset(f);
	/* the control: "a.txt" shortened to "a" is still in order */
	inode(f, a)->name_len = 1;
	fixup(f);
	expect_loads(f);
}

/*
 * The coded bytes of entry @e's name in the copy (index_compact.h: its
 * group's names in turn, each after its length bytes), *@len of them.
 */
static char *coded_name(struct fx *f, uint32_t e, size_t *len)
{
	uint8_t *block = (uint8_t *)section(f, INDEX_SEC_ENTRIES) +
			 le64toh(((uint64_t *)section(f, INDEX_SEC_BLOCKS))[e / COMPACT_BLOCK_ENTRIES]);
	uint32_t first = e / COMPACT_GROUP_NAMES * COMPACT_GROUP_NAMES;
	uint16_t at;
	uint8_t *p;

	memcpy(&at, block + COMPACT_HEADER_BYTES - 2 * COMPACT_BLOCK_GROUPS +
	       2 * (first % COMPACT_BLOCK_ENTRIES / COMPACT_GROUP_NAMES), sizeof(at));
	p = block + le16toh(at);
	for (uint32_t i = first;; i++) {
		p += i != first;	/* the bytes shared with the name before */
		*len = *p++;
		if (i == e)
			return (char *)p;
		p += *len;
	}
}

static void test_lie_names(void **state)
{
	struct fx *f = *state;
	uint32_t a = entry(f, "dir/a.txt"), sub = entry(f, "dir/sub");
	size_t len;

	LIE("dir/a.txt's name holds a NUL", coded_name(f, a, &len)[len - 1] = '\0');
	LIE("dir/sub renamed s/b", wide_name(f, sub)[1] = '/');
	LIE("dir/a.txt renamed /.txt", wide_name(f, a)[0] = '/');
}

/*
 * The packed bytes themselves (index_compact.h): every block is checked
 * as bytes before an entry is decoded, whatever the entries would say.
 */
static void test_lie_packed_entries(void **state)
{
	enum { GROUPS_AT = COMPACT_HEADER_BYTES - 2 * COMPACT_BLOCK_GROUPS };
	struct fx *f = *state;
	uint32_t n = ((struct index_file_header *)f->good)->nr_inodes;

#define BLOCK0 ((uint8_t *)section(f, INDEX_SEC_ENTRIES))
#define BLOCKS ((uint64_t *)section(f, INDEX_SEC_BLOCKS))	/* little-endian */
	LIE("the first block's first field 65 bits wide", BLOCK0[0] = 65);
	LIE("the first block holds no entry", BLOCK0[COMPACT_NR_FIELDS] = 0);
	LIE("the first block's padding not zero", BLOCK0[COMPACT_NR_FIELDS + 1] = 1);
	LIE("the first name group past its block",
	    BLOCK0[GROUPS_AT] = 0xff; BLOCK0[GROUPS_AT + 1] = 0xff);
	LIE("BLOCKS does not start at 0", BLOCKS[0] = htole64(1));
	LIE("BLOCKS does not end at the length of ENTRIES",
	    BLOCKS[compact_nr_blocks(n)] = htole64(le64toh(BLOCKS[compact_nr_blocks(n)]) - 1));
	LIE("the link's target not NUL-terminated",
	    ((char *)section(f, INDEX_SEC_TARGETS))
	    [hdr(f)->sections[INDEX_SEC_TARGETS].length - 1] = 'x');
#undef BLOCK0
#undef BLOCKS
}

static void test_lie_parents(void **state)
{
	struct fx *f = *state;
	uint32_t a = entry(f, "dir/a.txt"), dir = entry(f, "dir");
	uint32_t hard1 = entry(f, "hard1"), n = ((struct index_file_header *)f->good)->nr_inodes;

	LIE("dir/a.txt is its own parent", inode(f, a)->parent = a);
	LIE("dir's parent comes after it", inode(f, dir)->parent = a);
	LIE("dir/a.txt's parent past the last entry", inode(f, a)->parent = n);
	LIE("dir/a.txt's parent is 2^32 - 1", inode(f, a)->parent = UINT32_MAX);
	LIE("the root has a parent", inode(f, 0)->parent = 1);
	LIE("dir/a.txt's parent is a file", inode(f, a)->parent = hard1);
	LIE("the root is a file", inode(f, 0)->mode = S_IFREG | 0644);
}

static void test_lie_modes_and_flags(void **state)
{
	struct fx *f = *state;
	uint32_t a = entry(f, "dir/a.txt"), dir = entry(f, "dir");
	uint32_t sub = entry(f, "dir/sub");

	LIE("a character device", inode(f, a)->mode = S_IFCHR | 0644);
	LIE("no file type at all", inode(f, a)->mode = 0644);
	LIE("dir/sub turned into a file (its child's parent is not a directory)",
	    inode(f, sub)->mode = S_IFREG | 0644);
	LIE("a directory flagged as a later hard-link name",
	    inode(f, dir)->flags |= SHARD_INODE_LINKED);
	LIE("a file turned into a directory whose child comes first",
	    inode(f, a)->mode = S_IFDIR | 0755; inode(f, a)->size = 1; inode(f, a)->data = 1);
}

static void test_lie_file_data(void **state)
{
	struct fx *f = *state;
	uint32_t a = entry(f, "dir/a.txt"), b = entry(f, "dir/b.txt");
	uint64_t shard_size;

	reset(f);
	shard_size = shard_rec(f, inode(f, b)->shard)->size;
	LIE("dir/b.txt's data ends one byte past its shard",
	    inode(f, b)->data = shard_size - inode(f, b)->size + 1);
	LIE("dir/b.txt's data starts at its shard's end", inode(f, b)->data = shard_size);
	LIE("dir/b.txt as big as its shard", inode(f, b)->size = shard_size);
	LIE("dir/b.txt's data at 2^64 - 3 (offset + size wraps)",
	    inode(f, b)->data = UINT64_MAX - 2);
	LIE("dir/b.txt of 2^64 - 1 bytes", inode(f, b)->size = UINT64_MAX);
	LIE("the shard record says the shard ends inside dir/b.txt",
	    shard_rec(f, inode(f, b)->shard)->size = inode(f, b)->data + inode(f, b)->size - 1);
	LIE("dir/a.txt in a shard past the table", inode(f, a)->shard = hdr(f)->nr_shards);
	LIE("dir/a.txt in shard 2^32 - 1", inode(f, a)->shard = UINT32_MAX);
}

static void test_lie_sparse(void **state)
{
	struct fx *f = *state;
	uint32_t holes = entry(f, "holes");
	struct shard_sparse *sp;
	uint64_t nr_sparse, nr_extents, shard_size;

	reset(f);
	assert_true(inode(f, holes)->flags & SHARD_INODE_SPARSE);
	nr_sparse = count(f, INDEX_SEC_SPARSE);
	nr_extents = count(f, INDEX_SEC_EXTENTS);
	sp = sparse_map(f, inode(f, holes)->data);
	assert_true(sp->count >= 2);
	shard_size = shard_rec(f, inode(f, holes)->shard)->size;

	LIE("sparse map index one past the table", inode(f, holes)->data = nr_sparse);
	LIE("sparse map index 2^64 - 1", inode(f, holes)->data = UINT64_MAX);
	LIE("sparse map runs past the extent table", sp->count += 1);
	LIE("sparse map starts past the extent table", sp->first = nr_extents);
	LIE("sparse map starts at 2^64 - 1", sp->first = UINT64_MAX);
	LIE("sparse map of 2^64 - 1 runs", sp->count = UINT64_MAX);

	LIE("first two runs out of order", swap(extent(f, sp->first), extent(f, sp->first + 1),
						 sizeof(struct shard_extent)));
	LIE("second run overlaps the first",
	    extent(f, sp->first + 1)->logical = extent(f, sp->first)->logical);
	LIE("a run's data starts at the end of its shard",
	    extent(f, sp->first)->physical = shard_size);
	LIE("a run's data ends one byte past its shard",
	    extent(f, sp->first)->physical = shard_size - extent(f, sp->first)->length + 1);
	LIE("the last run ends past the file's size",
	    extent(f, sp->first + sp->count - 1)->logical = SPARSE_SIZE;
	    extent(f, sp->first + sp->count - 1)->length = 1);
	LIE("a run of 2^64 - 1 bytes", extent(f, sp->first)->length = UINT64_MAX);
	LIE("a run at 2^64 - 1", extent(f, sp->first)->logical = UINT64_MAX);
}

static void test_lie_hardlinks(void **state)
{
	struct fx *f = *state;
	uint32_t dir = entry(f, "dir"), c = entry(f, "dir/c.txt");
	uint64_t nr;
	uint32_t n = ((struct index_file_header *)f->good)->nr_inodes;

	reset(f);
	nr = count(f, INDEX_SEC_HARDLINKS);
	assert_true(nr >= 2);

	LIE("hard link entry past the last entry", hardlink(f, 0)->entry = n);
	LIE("hard link group's first entry past the last entry", hardlink(f, 0)->first = n);
	LIE("hard link group's first entry is a directory", hardlink(f, 0)->first = dir);
	LIE("hard link group's first entry is itself a later name",
	    hardlink(f, 0)->first = hardlink(f, 1)->entry);
	LIE("hard link table not sorted by entry",
	    swap(hardlink(f, 0), hardlink(f, 1), sizeof(struct shard_hardlink)));
	LIE("hard link table holds an entry twice", *hardlink(f, 1) = *hardlink(f, 0));
	LIE("a table entry not flagged as a later name",
	    inode(f, hardlink(f, 0)->entry)->flags &= ~SHARD_INODE_LINKED);
	assert_false(inode(f, c)->flags & SHARD_INODE_LINKED);
	LIE("an entry flagged as a later name the table lacks",
	    inode(f, c)->flags |= SHARD_INODE_LINKED);
	LIE("hard link table one entry short",
	    hdr(f)->sections[INDEX_SEC_HARDLINKS].length -= sizeof(struct shard_hardlink));
}

static void test_lie_shard_table(void **state)
{
	struct fx *f = *state;
	uint64_t pool;

	reset(f);
	pool = hdr(f)->sections[INDEX_SEC_SHARD_NAMES].length;
	for (uint32_t i = 0; i < 2; i++) {
		char what[128];

#define SHARD_CASE(desc, edit) do { \
		reset(f); \
		edit; \
		snprintf(what, sizeof(what), "shard %u: %s", i, desc); \
		expect_lie_rejected(f, what); \
	} while (0)

		SHARD_CASE("name starts past its section", shard_rec(f, i)->name = pool + 1);
		SHARD_CASE("name runs past its section",
			   shard_rec(f, i)->name_len = (uint32_t)(pool - shard_rec(f, i)->name + 1));
		SHARD_CASE("name at 2^64 - 1", shard_rec(f, i)->name = UINT64_MAX);
		SHARD_CASE("name 2^32 - 1 bytes long", shard_rec(f, i)->name_len = UINT32_MAX);
		SHARD_CASE("empty name", shard_rec(f, i)->name_len = 0);
#undef SHARD_CASE
	}
}

static struct index_file_seek *seek_rec(struct fx *f, uint32_t i)
{
	return (struct index_file_seek *)(f->buf + hdr(f)->sections[INDEX_SEC_SEEK_SHARDS].offset) + i;
}

static struct seek_point *seek_pt(struct fx *f, uint64_t i)
{
	return (struct seek_point *)(f->buf + hdr(f)->sections[INDEX_SEC_SEEK_POINTS].offset) + i;
}

/* Seek tables (of shard 2, the gzip one) that lie about where things are. */
static void test_lie_seek_table(void **state)
{
	struct fx *f = *state;
	uint64_t nr_points, pool, w;

	reset(f);
	nr_points = hdr(f)->sections[INDEX_SEC_SEEK_POINTS].length / sizeof(struct seek_point);
	pool = hdr(f)->sections[INDEX_SEC_SEEK_WINDOWS].length;
	assert_true(nr_points >= 3);
	assert_int_equal(seek_pt(f, 2)->kind, SEEK_POINT_WINDOW);
	expect_loads(f);
	w = 2;

	LIE("points start past the section", seek_rec(f, 2)->first = nr_points);
	LIE("points run past the section", seek_rec(f, 2)->nr = nr_points + 1);
	LIE("points at 2^64 - 1", seek_rec(f, 2)->first = UINT64_MAX);
	LIE("windows past the section", seek_rec(f, 2)->windows = pool);
	LIE("windows run past the section", seek_rec(f, 2)->windows_len = pool + 1);
	LIE("first point not at 0", seek_pt(f, 0)->out = 1);
	LIE("first point a window", seek_pt(f, 0)->kind = SEEK_POINT_WINDOW);
	LIE("points out of order", seek_pt(f, w)->out = seek_pt(f, w - 1)->out);
	LIE("point past the stream", seek_pt(f, w)->out = UINT64_MAX);
	LIE("compressed offset going back", seek_pt(f, w)->in = seek_pt(f, w - 1)->in - 1);
	LIE("compressed offset past the object",
		  seek_pt(f, w)->in = seek_rec(f, 2)->stored_size + 1);
	LIE("window point at offset 0", seek_pt(f, 1)->in = 0);
	LIE("9 bits", seek_pt(f, w)->bits = 8);
	LIE("unknown kind", seek_pt(f, w)->kind = 9);
	LIE("window past the pool", seek_pt(f, w)->window = pool);
	LIE("window runs past the pool", seek_pt(f, w)->window_len = (uint32_t)pool + 1);
	LIE("empty window", seek_pt(f, w)->window_len = 0);
	LIE("member point with a window", seek_pt(f, 0)->window_len = 1);
	LIE("padding set", seek_pt(f, w)->pad = 1);
	LIE("no encoding for a table", seek_rec(f, 2)->encoding[0] = '\0');
	LIE("encoding not terminated",
		  memset(seek_rec(f, 2)->encoding, 'z', sizeof(seek_rec(f, 2)->encoding)));
	LIE("encoding for a plain tar", strcpy(seek_rec(f, 0)->encoding, "gzip"));
	LIE("fewer records than shards",
		  hdr(f)->sections[INDEX_SEC_SEEK_SHARDS].length -= sizeof(struct index_file_seek));
}

static uint32_t *order_at(struct fx *f, uint64_t i)
{
	assert_true(i < count(f, INDEX_SEC_ORDER));
	return (uint32_t *)section(f, INDEX_SEC_ORDER) + i;
}

/*
 * ORDER must name one entry per file; which entries and in what order
 * only guide push-ahead, which takes from a shard's range only that
 * shard's files: such a lie loads, and push-ahead set up over it stays
 * within its arrays.
 */
static void test_lie_order(void **state)
{
	struct fx *f = *state;
	struct pushahead p;
	struct shard_index idx;
	struct index_file_shards sh;
	char msg[512] = "";
	uint64_t last;

	reset(f);
	last = count(f, INDEX_SEC_ORDER) - 1;
	LIE("ORDER names an entry past the last", *order_at(f, 0) = hdr(f)->nr_inodes);
	LIE("ORDER names entry 2^32 - 1", *order_at(f, last) = UINT32_MAX);
	LIE("ORDER one entry short", hdr(f)->sections[INDEX_SEC_ORDER].length -= 4);
	LIE("ORDER empty", hdr(f)->sections[INDEX_SEC_ORDER].length = 0);
	LIE("one file more than ORDER holds (a symlink made a file)",
	    inode(f, entry(f, "link"))->mode = S_IFREG | 0644);

	reset(f);
	*order_at(f, 0) = 0;		/* the root */
	*order_at(f, last) = entry(f, "dir");
	swap(order_at(f, 1), order_at(f, last - 1), sizeof(uint32_t));
	fixup(f);
	expect_loads(f);
	assert_int_equal(index_file_load(f->bad_path, &idx, &sh, 0, msg, sizeof(msg)), 0);
	assert_int_equal(pushahead_init(&p, &idx, &f->env.fs.set, 1 << 20, NULL), 0);
	assert_int_equal(pushahead_prepare(&p), 0);
	assert_int_equal(p.bound, 1 << 20);
	for (uint32_t s = 0; s < f->env.fs.set.nr; s++)
		assert_true(p.shard_end[s] <= f->env.fs.set.shards[s].size);
	pushahead_release(&p);
	shard_index_release(&idx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		FX_TEST(test_round_trip),
		FX_TEST(test_write_is_deterministic),
		FX_TEST(test_shards_elsewhere_are_absolute),
		FX_TEST(test_write_leaves_no_temporary),
		FX_TEST(test_missing_file_is_enoent),
		FX_TEST(test_fifo_or_directory_is_refused),
		FX_TEST(test_intact_copy_and_fixup_load),
		FX_TEST(test_read_header),
		FX_TEST(test_file_changed_under_the_load),
		FX_TEST(test_file_open_for_writing_is_copied),
		FX_TEST(test_handoff_to_a_child),
		FX_TEST(test_bad_magic_version_byte_order),
		FX_TEST(test_bad_header_checksum),
		FX_TEST(test_bad_file_size),
		FX_TEST(test_truncated_file),
		FX_TEST(test_bad_section_table),
		FX_TEST(test_bad_section_checksums),
		FX_TEST(test_lie_child_range),
		FX_TEST(test_lie_child_not_pointing_back),
		FX_TEST(test_lie_orphan_entry),
		FX_TEST(test_lie_unsorted_children),
		FX_TEST(test_lie_names),
		FX_TEST(test_lie_packed_entries),
		FX_TEST(test_lie_parents),
		FX_TEST(test_lie_modes_and_flags),
		FX_TEST(test_lie_file_data),
		FX_TEST(test_lie_sparse),
		FX_TEST(test_lie_hardlinks),
		FX_TEST(test_lie_shard_table),
		FX_TEST(test_lie_seek_table),
		FX_TEST(test_lie_order),
		FX_TEST(test_record_of_a_full_check),
		TB_ENV_TEST(test_lazy_check_of_a_recorded_file),
	};

	return cmocka_run_group_tests(tests, NULL, free_gz_shard);
}
