/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tarbuild.c - tar archives built in memory, and the scan, file and shard
 * set plumbing the unit tests share (see tarbuild.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <zlib.h>

#include "tarbuild.h"
#include "shardfs/log.h"

/* ---- header blocks ------------------------------------------------- */

void tb_field(char *field, size_t len, const char *s)
{
	size_t n = strlen(s);

	assert_true(n <= len);
	memset(field, 0, len);
	memcpy(field, s, n);
}

void tb_octal(char *field, size_t len, uint64_t v)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%0*llo", (int)len - 1,
			 (unsigned long long)v);

	assert_int_equal(n, len - 1);	/* the value fits the field */
	memcpy(field, tmp, len);	/* digits and the NUL */
}

void tb_base256(char *field, size_t len, int64_t v)
{
	uint64_t u = (uint64_t)v;
	unsigned char sign = v < 0 ? 0xff : 0x00;

	field[0] = (char)(v < 0 ? 0xff : 0x80);
	for (size_t i = 1; i < len; i++) {
		size_t shift = len - 1 - i;	/* bytes below this one */

		field[i] = (char)(shift < 8 ? u >> (8 * shift) : sign);
	}
}

void tb_checksum(char *blk)
{
	unsigned sum = 0;

	memset(blk + TB_OFF_CHKSUM, ' ', 8);
	for (int i = 0; i < TAR_BLOCK_SIZE; i++)
		sum += (unsigned char)blk[i];
	snprintf(blk + TB_OFF_CHKSUM, 8, "%06o", sum);	/* 6 digits, NUL */
	blk[TB_OFF_CHKSUM + 7] = ' ';
}

void tb_header(char *blk, enum tb_format fmt, const char *name, char type,
	       uint64_t size)
{
	memset(blk, 0, TAR_BLOCK_SIZE);
	tb_field(blk + TB_OFF_NAME, 100, name);
	tb_octal(blk + TB_OFF_MODE, 8, type == '5' ? TB_DIR_MODE : TB_MODE);
	tb_octal(blk + TB_OFF_UID, 8, TB_UID);
	tb_octal(blk + TB_OFF_GID, 8, TB_GID);
	tb_octal(blk + TB_OFF_SIZE, 12, size);
	tb_octal(blk + TB_OFF_MTIME, 12, TB_MTIME);
	blk[TB_OFF_TYPE] = type;
	if (fmt == TB_GNU)
		memcpy(blk + TB_OFF_MAGIC, "ustar  ", 8);
	if (fmt == TB_USTAR || fmt == TB_STAR)
		memcpy(blk + TB_OFF_MAGIC, "ustar\0" "00", 8);
	if (fmt == TB_STAR)	/* star also marks the end of the block */
		memcpy(blk + TB_OFF_STAR_MAGIC, "tar", 4);
}

/* ---- archives ------------------------------------------------------- */

static const char zero_block[TAR_BLOCK_SIZE];

void tb_bytes(struct tb *a, const void *p, size_t len)
{
	if (a->len + len > a->cap) {
		size_t cap = a->cap ? a->cap : 4096;

		while (cap < a->len + len)
			cap *= 2;
		a->data = realloc(a->data, cap);
		assert_non_null(a->data);
		a->cap = cap;
	}
	if (len)
		memcpy(a->data + a->len, p, len);
	a->len += len;
}

void tb_block(struct tb *a, char *blk)
{
	tb_checksum(blk);
	tb_bytes(a, blk, TAR_BLOCK_SIZE);
}

void tb_zeros(struct tb *a, size_t blocks)
{
	while (blocks--)
		tb_bytes(a, zero_block, TAR_BLOCK_SIZE);
}

void tb_data(struct tb *a, const void *p, size_t len)
{
	tb_bytes(a, p, len);
	tb_bytes(a, zero_block, (TAR_BLOCK_SIZE - len % TAR_BLOCK_SIZE) % TAR_BLOCK_SIZE);
}

void tb_end(struct tb *a)
{
	tb_zeros(a, 2);
}

void tb_free(struct tb *a)
{
	free(a->data);
	*a = (struct tb){ 0 };
}

uint64_t tb_add(struct tb *a, const char *name, char type, const void *data,
		size_t len)
{
	const struct tb_attrs def = {
		type == '5' ? TB_DIR_MODE : TB_MODE, TB_UID, TB_GID, TB_MTIME,
	};

	return tb_add_attrs(a, name, type, &def, data, len);
}

uint64_t tb_add_attrs(struct tb *a, const char *name, char type,
		      const struct tb_attrs *at, const void *data, size_t len)
{
	uint64_t offset = a->len;
	char blk[TAR_BLOCK_SIZE];

	tb_header(blk, TB_USTAR, name, type, len);
	tb_octal(blk + TB_OFF_MODE, 8, at->mode);
	tb_octal(blk + TB_OFF_UID, 8, at->uid);
	tb_octal(blk + TB_OFF_GID, 8, at->gid);
	tb_octal(blk + TB_OFF_MTIME, 12, (uint64_t)at->mtime);
	tb_block(a, blk);
	tb_data(a, data, len);
	return offset;
}

uint64_t tb_file(struct tb *a, const char *name, const char *content)
{
	return tb_add(a, name, '0', content, strlen(content));
}

uint64_t tb_link(struct tb *a, const char *name, char type, const char *target)
{
	uint64_t at = a->len;
	char blk[TAR_BLOCK_SIZE];

	tb_header(blk, TB_USTAR, name, type, 0);
	tb_field(blk + TB_OFF_LINKNAME, 100, target);
	tb_block(a, blk);
	return at;
}

uint64_t tb_meta(struct tb *a, char type, const void *body, size_t len)
{
	bool gnu = type == 'L' || type == 'K';
	uint64_t at = a->len;
	char blk[TAR_BLOCK_SIZE];

	tb_header(blk, gnu ? TB_GNU : TB_USTAR,
		  gnu ? "././@LongLink" : "PaxHeaders/meta", type, len);
	tb_block(a, blk);
	tb_data(a, body, len);
	return at;
}

static size_t decimal_digits(size_t v)
{
	size_t d = 1;

	while (v >= 10) {
		v /= 10;
		d++;
	}
	return d;
}

void tb_pax(struct tb *body, const char *key, const char *value)
{
	size_t n = strlen(key) + strlen(value) + 3;	/* ' ', '=', '\n' */
	size_t len = n + decimal_digits(n);		/* counts its own digits */
	char head[24];

	if (decimal_digits(len) > decimal_digits(n))	/* e.g. 98 + 2 = 100 */
		len++;
	snprintf(head, sizeof(head), "%zu ", len);
	tb_bytes(body, head, strlen(head));
	tb_bytes(body, key, strlen(key));
	tb_bytes(body, "=", 1);
	tb_bytes(body, value, strlen(value));
	tb_bytes(body, "\n", 1);
}

uint64_t tb_pax_header(struct tb *a, char type, const char *const *kv)
{
	struct tb body = { 0 };
	uint64_t at;

	for (; kv[0]; kv += 2)
		tb_pax(&body, kv[0], kv[1]);
	at = tb_meta(a, type, body.data, body.len);
	tb_free(&body);
	return at;
}

/* Store up to @max map entries of 24 bytes at @map; return how many. */
static size_t sparse_entries(char *map, size_t max,
			     const struct tar_extent *runs, size_t n)
{
	size_t i;

	for (i = 0; i < max && i < n; i++) {
		tb_octal(map + 24 * i, 12, runs[i].logical);
		tb_octal(map + 24 * i + 12, 12, runs[i].length);
	}
	return i;
}

uint64_t tb_old_sparse(struct tb *a, const char *name, uint64_t realsize,
		       const struct tar_extent *runs, size_t n, const char *data)
{
	uint64_t at = a->len, stored = 0;
	char blk[TAR_BLOCK_SIZE];
	size_t done;

	for (size_t i = 0; i < n; i++)
		stored += runs[i].length;
	tb_header(blk, TB_GNU, name, 'S', stored);
	tb_octal(blk + TB_OFF_REALSIZE, 12, realsize);
	done = sparse_entries(blk + TB_OFF_SPARSE, 4, runs, n);
	blk[TB_OFF_ISEXTENDED] = done < n;
	tb_block(a, blk);
	while (done < n) {
		memset(blk, 0, sizeof(blk));
		done += sparse_entries(blk, 21, runs + done, n - done);
		blk[TB_OFF_EXT_ISEXTENDED] = done < n;
		tb_bytes(a, blk, sizeof(blk));	/* no checksum in these */
	}
	tb_data(a, data, stored);
	return at;
}

uint64_t tb_sparse_1_0(struct tb *a, const char *name, uint64_t realsize,
		       const char *map, const void *data, size_t len)
{
	size_t mlen = strlen(map);
	size_t padded = (mlen + TAR_BLOCK_SIZE - 1) / TAR_BLOCK_SIZE * TAR_BLOCK_SIZE;
	char blk[TAR_BLOCK_SIZE], size[24];
	uint64_t at;

	snprintf(size, sizeof(size), "%llu", (unsigned long long)realsize);
	tb_pax_header(a, 'x', TB_LIST("GNU.sparse.major", "1", "GNU.sparse.minor", "0",
				      "GNU.sparse.name", name,
				      "GNU.sparse.realsize", size));
	at = a->len;
	tb_header(blk, TB_USTAR, "GNUSparseFile.0/placeholder", '0', padded + len);
	tb_block(a, blk);
	tb_data(a, map, mlen);
	tb_data(a, data, len);
	return at;
}

/* ---- files ---------------------------------------------------------- */

static const char *tmp_root(void)
{
	const char *t = getenv("TMPDIR");

	return t && *t ? t : "/tmp";
}

int tb_open(const struct tb *a)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/shardfs-unit-XXXXXX", tmp_root());
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(pwrite(fd, a->data, a->len, 0), (ssize_t)a->len);
	return fd;
}

char *tb_tmpdir(void)
{
	char *path;

	assert_true(asprintf(&path, "%s/shardfs-unit-XXXXXX", tmp_root()) > 0);
	assert_non_null(mkdtemp(path));
	return path;
}

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	return remove(path);
}

void tb_rmtree(char *dir)
{
	if (!dir)
		return;
	assert_int_equal(nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(dir);
}

void tb_save(const struct tb *a, const char *dir, const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	assert_non_null(f);
	if (a->len)
		assert_int_equal(fwrite(a->data, 1, a->len, f), a->len);
	assert_int_equal(fclose(f), 0);
}

void tb_gzip(struct tb *out, const void *data, size_t len, size_t member,
	     int level)
{
	const char *p = data;
	size_t done = 0;

	do {
		size_t n = member && len - done > member ? member : len - done;
		z_stream zs = { 0 };
		char buf[64 * 1024];
		int zrc;

		assert_int_equal(deflateInit2(&zs, level, Z_DEFLATED, 31, 8,
					      Z_DEFAULT_STRATEGY), Z_OK);
		zs.next_in = (unsigned char *)p + done;
		zs.avail_in = (uInt)n;
		do {
			zs.next_out = (unsigned char *)buf;
			zs.avail_out = sizeof(buf);
			zrc = deflate(&zs, Z_FINISH);
			tb_bytes(out, buf, sizeof(buf) - zs.avail_out);
		} while (zrc == Z_OK);
		assert_int_equal(zrc, Z_STREAM_END);
		deflateEnd(&zs);
		done += n;
	} while (done < len);
}

void tb_save_gzip(const struct tb *a, const char *dir, const char *name,
		  size_t member)
{
	struct tb z = { 0 };

	tb_gzip(&z, a->data, a->len, member, 1);
	tb_save(&z, dir, name);
	tb_free(&z);
}

unsigned char *tb_letters(size_t len, uint32_t seed, char run, unsigned every)
{
	unsigned char *p = malloc(len);

	assert_non_null(p);
	for (size_t i = 0; i < len; i++) {
		seed = seed * 1103515245 + 12345;
		p[i] = (i / 4096) % every == 0 ? (unsigned char)run
					       : (unsigned char)('a' + (seed >> 28));
	}
	return p;
}

void tb_expect_read(struct shard_source *src, const unsigned char *want,
		    uint64_t off, size_t len)
{
	unsigned char *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	if (shard_source_read_full(src, buf, len, off))
		fail_msg("read of %zu at %llu failed", len, (unsigned long long)off);
	if (memcmp(buf, want + off, len))
		fail_msg("wrong bytes in the read of %zu at %llu", len,
			 (unsigned long long)off);
	free(buf);
}

/* ---- scanning ------------------------------------------------------- */

static char *copy_bytes(const char *p, size_t len)
{
	char *s = malloc(len + 1);

	assert_non_null(s);
	if (len)
		memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

static int collect_member(void *arg, const struct tar_member *m)
{
	struct tb_scan *r = arg;
	struct tb_member *c;

	r->m = realloc(r->m, (r->nr + 1) * sizeof(*r->m));
	assert_non_null(r->m);
	c = &r->m[r->nr++];
	*c = (struct tb_member){
		.path = copy_bytes(m->path, m->path_len), .path_len = m->path_len,
		.link = copy_bytes(m->link, m->link_len), .link_len = m->link_len,
		.type = m->type, .mode = m->mode, .uid = m->uid, .gid = m->gid,
		.mtime_sec = m->mtime_sec, .mtime_nsec = m->mtime_nsec,
		.size = m->size, .header_offset = m->header_offset,
		.data_offset = m->data_offset, .nr_extents = m->nr_extents,
		.sparse = m->sparse,
	};
	if (m->data)
		c->data = copy_bytes(m->data, m->size);
	if (m->extents) {
		c->extents = calloc(m->nr_extents + 1, sizeof(*c->extents));
		assert_non_null(c->extents);
		memcpy(c->extents, m->extents, m->nr_extents * sizeof(*m->extents));
	}
	return 0;
}

static void collect_warning(void *arg, uint64_t offset, const char *msg)
{
	struct tb_scan *r = arg;

	assert_non_null(msg);
	if (r->nr_warnings < TB_MAX_WARNINGS)
		r->warn_offset[r->nr_warnings] = offset;
	r->nr_warnings++;
}

void tb_scan_source(struct tb_scan *r, struct shard_source *src)
{
	static const struct tar_scan_ops ops = { collect_member, collect_warning };

	*r = (struct tb_scan){ 0 };
	r->rc = tar_scan(src, &ops, r, &r->err);
}

void tb_scan_fd(struct tb_scan *r, int fd, uint64_t size)
{
	struct shard_source *src;

	assert_int_equal(shard_source_open_fd(dup(fd), &src), 0);
	assert_int_equal(src->size, size);
	tb_scan_source(r, src);
	shard_source_close(src);
}

void tb_scan(struct tb_scan *r, const struct tb *a)
{
	int fd = tb_open(a);

	tb_scan_fd(r, fd, a->len);
	close(fd);
	for (size_t i = 0; i < r->nr; i++) {
		const struct tb_member *m = &r->m[i];

		assert_true(!m->data || (m->type == TAR_FILE && !m->sparse));
		if (m->data) {
			assert_true(m->data_offset + m->size <= a->len);
			assert_memory_equal(m->data, a->data + m->data_offset, m->size);
		}
	}
}

void tb_scan_free(struct tb_scan *r)
{
	for (size_t i = 0; i < r->nr; i++) {
		free(r->m[i].path);
		free(r->m[i].link);
		free(r->m[i].extents);
		free(r->m[i].data);
	}
	free(r->m);
	*r = (struct tb_scan){ 0 };
}

/* Failures are reported at the caller's line, hence cmocka's _assert_*. */
void tb_expect_einval_at(const struct tb *a, uint64_t offset, size_t members,
			 const char *file, int line)
{
	struct tb_scan r;

	tb_scan(&r, a);
	_assert_int_equal(r.rc, -EINVAL, file, line);
	_assert_int_equal(r.err.offset, offset, file, line);
	_assert_true(strlen(r.err.msg) > 0, "a message", file, line);
	_assert_int_equal(r.nr, members, file, line);
	tb_scan_free(&r);
}

void tb_assert_member_at(const struct tb_member *m, const char *path,
			 enum tar_type type, uint64_t size, const char *file,
			 int line)
{
	_assert_string_equal(m->path, path, file, line);
	_assert_int_equal(m->path_len, strlen(path), file, line);
	_assert_int_equal(m->type, type, file, line);
	_assert_int_equal(m->size, size, file, line);
}

/* ---- a shard set in a scratch directory ----------------------------- */

int tb_env_setup(void **state)
{
	struct tb_env *e = calloc(1, sizeof(*e));

	if (!e)
		return -1;
	log_set_level(LOG_LEVEL_ERROR);	/* the warnings tests provoke */
	e->dir = tb_tmpdir();
	*state = e;
	return 0;
}

int tb_env_teardown(void **state)
{
	struct tb_env *e = *state;

	if (e->built)
		shardfs_release(&e->fs);
	tb_rmtree(e->dir);
	free(e);
	return 0;
}

void tb_env_shard(struct tb_env *e, const char *name, struct tb *a)
{
	tb_end(a);
	tb_save(a, e->dir, name);
	tb_free(a);
}

void tb_build(struct shard_set *set, struct shard_index *idx, const char *spec,
	      const struct shard_index_build_options *opt)
{
	char msg[512] = "";

	if (shard_set_expand(set, spec, NULL, msg, sizeof(msg)) ||
	    shard_set_open(set, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(shard_index_build(idx, set, opt), 0);
}

void tb_env_build(struct tb_env *e)
{
	static const struct shard_index_build_options opt = { .threads = 2 };

	assert_false(e->built);
	e->fs = (struct shardfs){ 0 };
	e->built = true;	/* releasing an empty shardfs is harmless */
	tb_build(&e->fs.set, &e->fs.idx, e->dir, &opt);
	assert_int_equal(shardfs_init_built(&e->fs), 0);
}

uint64_t tb_ino(struct shardfs *fs, const char *path)
{
	uint64_t ino = SHARDFS_ROOT_INO;
	char *copy = strdup(path), *save = NULL;

	assert_non_null(copy);
	for (char *c = strtok_r(copy, "/", &save); c && ino;
	     c = strtok_r(NULL, "/", &save))
		if (shardfs_lookup(fs, ino, c, &ino))
			ino = 0;
	free(copy);
	return ino;
}

struct stat tb_stat(struct shardfs *fs, const char *path)
{
	uint64_t ino = tb_ino(fs, path);
	struct stat st;

	if (!ino)
		fail_msg("'%s' not found", path);
	assert_int_equal(shardfs_getattr(fs, ino, &st), 0);
	return st;
}

int64_t tb_entry(const struct shard_index *idx, const char *path)
{
	int64_t e = 0;

	while (*path && e >= 0) {
		size_t len = strcspn(path, "/");

		e = shard_index_lookup(idx, (uint32_t)e, path, len);
		path += len + (path[len] == '/');
	}
	return e;
}

void tb_stderr_begin(struct tb_stderr *c)
{
	c->f = tmpfile();
	c->saved = dup(STDERR_FILENO);
	assert_non_null(c->f);
	assert_true(c->saved >= 0);
	fflush(stderr);
	assert_true(dup2(fileno(c->f), STDERR_FILENO) >= 0);
}

void tb_stderr_end(struct tb_stderr *c, char *log, size_t size)
{
	size_t n;

	fflush(stderr);
	assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
	close(c->saved);
	rewind(c->f);
	n = fread(log, 1, size - 1, c->f);
	log[n] = '\0';
	fclose(c->f);
}

/* Read /proc/self/task/@tid/@what into @buf (@len bytes, terminated). */
static bool task_file(pid_t tid, const char *what, char *buf, size_t len)
{
	char path[64];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, what);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n > 0;
}

bool tb_thread_asleep(pid_t tid)
{
	char stat[512], call[256], *end;

	if (!task_file(tid, "stat", stat, sizeof(stat)) ||
	    !task_file(tid, "syscall", call, sizeof(call)))
		return false;
	end = strrchr(stat, ')');	/* the name may hold anything */
	return end && end[1] == ' ' && end[2] == 'S' && atol(call) == SYS_futex;
}

pid_t tb_thread_named(const char *comm)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	char name[32];
	pid_t found = 0;

	assert_non_null(d);
	while (!found && (de = readdir(d))) {
		if (de->d_name[0] == '.' ||
		    !task_file(atoi(de->d_name), "comm", name, sizeof(name)))
			continue;
		name[strcspn(name, "\n")] = '\0';
		if (!strcmp(name, comm))
			found = atoi(de->d_name);
	}
	closedir(d);
	return found;
}
