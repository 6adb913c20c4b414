/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tarbuild.h - shared helpers of the shardfs unit tests.
 *
 * The scanner is tested on archives built byte by byte here, not by a tar
 * program, so that every dialect, every odd field and every corruption is
 * spelled out in the test that relies on it.  The same builder writes the
 * shards of the index and read-path tests into a scratch directory.
 *
 * All helpers fail the running cmocka test on unexpected errors (a full
 * disk, a failed allocation) rather than returning them.
 */
#ifndef SHARDFS_TARBUILD_H
#define SHARDFS_TARBUILD_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <sys/types.h>
#include <cmocka.h>

#include "shardfs/fs.h"
#include "shardfs/tar.h"

/* A NULL-terminated array of strings: names, or PAX keys and values. */
#define TB_LIST(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Header field offsets (ustar; GNU sparse fields in the old GNU header). */
enum {
	TB_OFF_NAME = 0, TB_OFF_MODE = 100, TB_OFF_UID = 108, TB_OFF_GID = 116,
	TB_OFF_SIZE = 124, TB_OFF_MTIME = 136, TB_OFF_CHKSUM = 148,
	TB_OFF_TYPE = 156, TB_OFF_LINKNAME = 157, TB_OFF_MAGIC = 257,
	TB_OFF_UNAME = 265, TB_OFF_PREFIX = 345, TB_OFF_SPARSE = 386,
	TB_OFF_ISEXTENDED = 482, TB_OFF_REALSIZE = 483,
	TB_OFF_EXT_ISEXTENDED = 504, TB_OFF_STAR_MAGIC = 508,
};

/* What tb_header() puts in the fields a test does not care about. */
#define TB_MODE 0644
#define TB_DIR_MODE 0755
#define TB_UID 1000
#define TB_GID 1001
#define TB_MTIME 1700000000

enum tb_format {
	TB_V7,		/* no magic at all */
	TB_USTAR,	/* "ustar\0" "00", 155-byte prefix */
	TB_GNU,		/* "ustar  \0", no prefix */
	TB_STAR,	/* ustar magic, 131-byte prefix, "tar\0" at 508 */
};

/* ---- header blocks ------------------------------------------------- */

/* Fill @blk with a header of @fmt; defaults above; no checksum yet. */
void tb_header(char *blk, enum tb_format fmt, const char *name, char type,
	       uint64_t size);
/* Copy @s into a field of @len bytes, NUL-padded, unterminated if full. */
void tb_field(char *field, size_t len, const char *s);
/* Octal in @len - 1 digits and a NUL. */
void tb_octal(char *field, size_t len, uint64_t v);
/* GNU base-256: 0x80 or 0xff, then big-endian two's complement. */
void tb_base256(char *field, size_t len, int64_t v);
/* Compute and store the header checksum. */
void tb_checksum(char *blk);

/* ---- archives (and any other growable bytes, such as PAX bodies) --- */

struct tb {
	char *data;	/* bytes so far */
	size_t len;	/* bytes used */
	size_t cap;	/* bytes allocated */
};

void tb_bytes(struct tb *a, const void *p, size_t len);
/* Checksum @blk and append it. */
void tb_block(struct tb *a, char *blk);
/* Append @len bytes of member data and pad them to a block. */
void tb_data(struct tb *a, const void *p, size_t len);
void tb_zeros(struct tb *a, size_t blocks);
/* The end-of-archive marker: two zero blocks. */
void tb_end(struct tb *a);
void tb_free(struct tb *a);

/* Attributes for tb_add_attrs(), instead of the defaults above. */
struct tb_attrs {
	uint32_t mode, uid, gid;
	int64_t mtime;
};

/*
 * Whole ustar members.  Each returns the offset of the header it wrote,
 * which is what struct tar_error and tar_member.header_offset report.
 */
uint64_t tb_add(struct tb *a, const char *name, char type, const void *data,
		size_t len);
uint64_t tb_add_attrs(struct tb *a, const char *name, char type,
		      const struct tb_attrs *at, const void *data, size_t len);
uint64_t tb_file(struct tb *a, const char *name, const char *content);
/* A symlink ('2') or hard link ('1') to @target. */
uint64_t tb_link(struct tb *a, const char *name, char type, const char *target);
/* An 'L', 'K', 'x' or 'g' member with @body. */
uint64_t tb_meta(struct tb *a, char type, const void *body, size_t len);
/* Append one PAX record "LEN key=value\n" to @body. */
void tb_pax(struct tb *body, const char *key, const char *value);
/* An 'x' or 'g' member holding the records @kv: key, value, ..., NULL. */
uint64_t tb_pax_header(struct tb *a, char type, const char *const *kv);
/*
 * An old GNU sparse ('S') member of @realsize bytes whose @n runs hold
 * @data back to back; runs past the fourth go into extension blocks.
 */
uint64_t tb_old_sparse(struct tb *a, const char *name, uint64_t realsize,
		       const struct tar_extent *runs, size_t n, const char *data);
/*
 * A GNU sparse 1.0 member: an 'x' header naming it @name of @realsize
 * bytes, then a header for @map (the text "COUNT\nOFFSET\nLENGTH\n...")
 * padded to a block and followed by @len bytes of @data.  Returns the
 * offset of the member's own header (after the 'x' one).
 */
uint64_t tb_sparse_1_0(struct tb *a, const char *name, uint64_t realsize,
		       const char *map, const void *data, size_t len);

/* ---- files ---------------------------------------------------------- */

/* An unlinked temporary file holding @a; the caller closes it. */
int tb_open(const struct tb *a);
/* A new empty scratch directory (malloc'd path). */
char *tb_tmpdir(void);
/* Remove @dir with everything in it and free the string. */
void tb_rmtree(char *dir);
/* Write @a to @dir/@name. */
void tb_save(const struct tb *a, const char *dir, const char *name);
/*
 * Append @len bytes at @data to @out gzip-compressed at @level: one gzip
 * member per @member bytes of input (0: a single member).
 */
void tb_gzip(struct tb *out, const void *data, size_t len, size_t member,
	     int level);
/* Write @a to @dir/@name as tb_gzip() compresses it (level 1: fast). */
void tb_save_gzip(const struct tb *a, const char *dir, const char *name,
		  size_t member);
/*
 * @len bytes (malloc'ed) of letters from an LCG seeded with @seed, with a
 * 4 KiB run of @run every @every runs: they compress about 2:1.
 */
unsigned char *tb_letters(size_t len, uint32_t seed, char run, unsigned every);
/* Read [@off, @off + @len) of @src and compare it with @want + @off. */
void tb_expect_read(struct shard_source *src, const unsigned char *want,
		    uint64_t off, size_t len);

/* ---- scanning ------------------------------------------------------- */

/* A struct tar_member copied out of the callback (same meanings). */
struct tb_member {
	char *path;			/* NUL-terminated copy */
	size_t path_len;
	char *link;			/* NUL-terminated copy */
	size_t link_len;
	enum tar_type type;
	uint32_t mode, uid, gid;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint64_t size;
	uint64_t header_offset;
	uint64_t data_offset;
	bool sparse;			/* tar_member.sparse */
	struct tar_extent *extents;	/* copy, NULL when m->extents was */
	size_t nr_extents;
	char *data;			/* copy of tar_member.data, NULL when
					 * it was */
};

#define TB_MAX_WARNINGS 8

/* Everything one tar_scan() reported. */
struct tb_scan {
	int rc;				/* what tar_scan returned */
	struct tar_error err;		/* filled when rc < 0 */
	struct tb_member *m;		/* members, in order */
	size_t nr;
	size_t nr_warnings;		/* all warnings ... */
	uint64_t warn_offset[TB_MAX_WARNINGS]; /* ... and where the first were */
};

void tb_scan_fd(struct tb_scan *r, int fd, uint64_t size);
/* The same through @src, which the caller closes. */
void tb_scan_source(struct tb_scan *r, struct shard_source *src);
/* Scan @a from a temporary file; every member's bytes that came with it
 * (tar_member.data) must be @a's at its data offset. */
void tb_scan(struct tb_scan *r, const struct tb *a);
void tb_scan_free(struct tb_scan *r);
/* Scan @a; expect -EINVAL at @offset after exactly @members members. */
#define tb_expect_einval(a, offset, members) \
	tb_expect_einval_at(a, offset, members, __FILE__, __LINE__)
void tb_expect_einval_at(const struct tb *a, uint64_t offset, size_t members,
			 const char *file, int line);
/* Check a scanned member's path (NUL-free), type and logical size. */
#define tb_assert_member(m, path, type, size) \
	tb_assert_member_at(m, path, type, size, __FILE__, __LINE__)
void tb_assert_member_at(const struct tb_member *m, const char *path,
			 enum tar_type type, uint64_t size, const char *file,
			 int line);

/* ---- a shard set in a scratch directory ----------------------------- */

/* Expand @spec into @set, open it and build @idx with @opt (must work). */
void tb_build(struct shard_set *set, struct shard_index *idx, const char *spec,
	      const struct shard_index_build_options *opt);

struct tb_env {
	char *dir;		/* scratch directory holding the shards */
	struct shardfs fs;	/* built by tb_env_build */
	bool built;		/* fs holds a set and an index */
};

/* cmocka setup/teardown: *state is a struct tb_env. */
int tb_env_setup(void **state);
int tb_env_teardown(void **state);
#define TB_ENV_TEST(f) \
	cmocka_unit_test_setup_teardown(f, tb_env_setup, tb_env_teardown)
/* End @a with the end marker, save it as e->dir/@name and free it. */
void tb_env_shard(struct tb_env *e, const char *name, struct tb *a);
/* Expand, open and index every *.tar in e->dir (must succeed). */
void tb_env_build(struct tb_env *e);
/* Inode of @path ("" is the root) by shardfs_lookup; 0 when absent. */
uint64_t tb_ino(struct shardfs *fs, const char *path);
/* shardfs_getattr of @path, which must exist. */
struct stat tb_stat(struct shardfs *fs, const char *path);
/* Entry of @path by shard_index_lookup, or -ENOENT / -ENOTDIR. */
int64_t tb_entry(const struct shard_index *idx, const char *path);

/* ---- the log of the code under test ---------------------------------- */

/* Standard error, where the log goes, caught while code under test runs. */
struct tb_stderr {
	FILE *f;	/* what it went to */
	int saved;	/* the descriptor it was */
};

void tb_stderr_begin(struct tb_stderr *c);
/* Put standard error back; what was logged meanwhile into @log (@size
 * bytes at most, NUL-terminated). */
void tb_stderr_end(struct tb_stderr *c, char *log, size_t size);

/* ---- threads of the program under test ------------------------------ */

/*
 * Is thread @tid of this process asleep in a futex (state S in /proc,
 * in the futex system call: a mutex, condition variable or semaphore
 * wait, not running or waiting for a CPU)?  What a test waits for before
 * it counts on a thread having reached a wait, instead of a sleep: under
 * valgrind, beside the sanitized suites, a thread may not run for
 * hundreds of milliseconds.  State S alone is not enough there: a thread
 * waiting for valgrind's turn sleeps too, in a read(2) of its pipe (ci83:
 * a reader taken for queued had not reached the cache's queue yet).
 * False for a thread that is gone.
 */
bool tb_thread_asleep(pid_t tid);
/* The thread of this process named @comm (pthread_setname_np), or 0. */
pid_t tb_thread_named(const char *comm);

#endif
