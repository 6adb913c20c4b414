/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tar.c - header-only tar scanner.
 *
 * The scanner reads archives through a small window buffer: headers of
 * small members share a window (one pread per many members), while large
 * members are skipped with a short probe read at the next header, so that
 * indexing a shard of 100 KB images reads a few KiB per member instead of
 * the whole shard.  The window shrinks to a probe whenever the stride
 * between headers exceeds it; see reader_fill().
 *
 * Metadata members ('L', 'K', 'x', 'g') are parsed into per-scan buffers
 * that persist across members and are reused, so a scan allocates only
 * while those buffers grow.
 */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardfs/tar.h"
#include "shardfs/util.h"

/* Bytes read at once when headers are sparse (TAR_WINDOW_SIZE when not). */
#define TAR_PROBE_SIZE (4u * 1024)
/* Headers closer than this are dense: the bytes between them are read
 * anyway, in whole windows. */
#define TAR_DENSE_STRIDE (16u * 1024)

/* Header field offsets and lengths (POSIX ustar, GNU and star). */
#define H_NAME 0
#define H_MODE 100
#define H_UID 108
#define H_GID 116
#define H_SIZE 124
#define H_MTIME 136
#define H_CHKSUM 148
#define H_TYPEFLAG 156
#define H_LINKNAME 157
#define H_MAGIC 257
#define H_PREFIX 345
#define H_STAR_MAGIC 508
#define GNU_SPARSE 386
#define GNU_ISEXTENDED 482
#define GNU_REALSIZE 483
#define GNU_EXT_ISEXTENDED 504
#define PREFIX_LEN_USTAR 155
#define PREFIX_LEN_STAR 131
#define NAME_LEN 100

/* A growable byte buffer; data is NUL-terminated after len bytes. */
struct tar_buf {
	char *data;	/* heap storage, or NULL before first use */
	size_t len;	/* bytes in use, not counting the terminator */
	size_t cap;	/* bytes allocated */
};

/* Read window over the archive. */
struct tar_reader {
	struct shard_source *src; /* the archive */
	uint64_t file_size;	/* archive length in bytes */
	char *window;		/* TAR_WINDOW_SIZE bytes, the caller's */
	uint64_t win_off;	/* archive offset of window[0] */
	size_t win_len;		/* valid bytes in window */
	uint64_t stride;	/* distance between the last two headers */
};

/* Attributes from PAX records; a 'g' set and an 'x' set are kept. */
struct pax_attrs {
	bool has_path;		/* path holds a name */
	bool has_link;		/* link holds a link target */
	bool has_size;		/* size was given */
	bool has_mtime;		/* mtime_sec/mtime_nsec were given */
	bool has_uid;		/* uid was given */
	bool has_gid;		/* gid was given */
	bool sparse;		/* any GNU.sparse.* record was seen */
	bool sparse_map_in_data; /* GNU sparse 1.0: map precedes the data */
	bool has_realsize;	/* GNU.sparse.size/realsize was given */
	bool has_sparse_name;	/* sparse_name holds a name */
	struct tar_buf path;	/* "path" */
	struct tar_buf sparse_name; /* GNU.sparse.name: beats "path", which
				 * GNU tar sets to a placeholder */
	struct tar_buf link;	/* "linkpath" */
	uint64_t size;		/* "size" */
	int64_t mtime_sec;	/* "mtime", whole seconds */
	uint32_t mtime_nsec;	/* "mtime", fraction */
	uint32_t uid;		/* "uid" */
	uint32_t gid;		/* "gid" */
	uint64_t realsize;	/* logical size of a sparse member */
};

struct tar_scan {
	struct tar_reader rd;		/* where headers come from */
	const struct tar_scan_ops *ops;	/* caller's callbacks */
	void *arg;			/* passed to the callbacks */
	struct tar_error *err;		/* filled when the scan fails */
	struct pax_attrs global;	/* from 'g' headers, for all members */
	struct pax_attrs local;		/* from the 'x' header, for the next one */
	struct tar_buf longname;	/* body of the pending 'L' member */
	struct tar_buf longlink;	/* body of the pending 'K' member */
	struct tar_buf name;		/* name assembled from prefix + name */
	struct tar_buf meta;		/* body of a metadata member */
	struct tar_extent *extents;	/* sparse map of the current member */
	size_t nr_extents;		/* entries used in extents */
	size_t cap_extents;		/* entries allocated in extents */
};

static const char zero_block[TAR_BLOCK_SIZE];

static int scan_fail(struct tar_scan *s, int rc, uint64_t off,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int scan_fail(struct tar_scan *s, int rc, uint64_t off,
		     const char *fmt, ...)
{
	va_list ap;

	s->err->offset = off;
	va_start(ap, fmt);
	vsnprintf(s->err->msg, sizeof(s->err->msg), fmt, ap);
	va_end(ap);
	return rc;
}

static void scan_warn(struct tar_scan *s, uint64_t off, const char *msg)
{
	if (s->ops->warn)
		s->ops->warn(s->arg, off, msg);
}

static uint64_t round_up_block(uint64_t n)
{
	return (n + TAR_BLOCK_SIZE - 1) & ~(uint64_t)(TAR_BLOCK_SIZE - 1);
}

/* Make room for @len bytes plus a terminator. */
static int buf_reserve(struct tar_buf *b, size_t len)
{
	return array_grow((void **)&b->data, &b->cap, len + 1, 1);
}

static int buf_set(struct tar_buf *b, const char *src, size_t len)
{
	int rc = buf_reserve(b, len);

	if (rc)
		return rc;
	memcpy(b->data, src, len);
	b->data[len] = '\0';
	b->len = len;
	return 0;
}

/* Whether the window holds the @len bytes at archive offset @off. */
static bool window_holds(const struct tar_reader *rd, uint64_t off, uint64_t len)
{
	return off >= rd->win_off && off - rd->win_off <= rd->win_len &&
	       len <= rd->win_len - (off - rd->win_off);
}

/*
 * Fill the window starting at @off.  Dense headers (small members) get a
 * whole window, sparse ones a probe: reading 64 KiB to find one header
 * every 100 KiB would read most of the shard.  A window that fails is
 * tried again as a probe: damage in a compressed shard's member data
 * after the header (source_gzip.c) fails that member's reads, not the
 * scan.
 */
static int reader_fill(struct tar_scan *s, uint64_t off)
{
	struct tar_reader *rd = &s->rd;
	size_t want = rd->stride < TAR_DENSE_STRIDE ? TAR_WINDOW_SIZE
						       : TAR_PROBE_SIZE;
	ssize_t n;

	if (want > rd->file_size - off)
		want = rd->file_size - off;
	n = rd->src->ops->read(rd->src, rd->window, want, off);
	if (n < 0 && want > TAR_PROBE_SIZE)
		n = rd->src->ops->read(rd->src, rd->window, TAR_PROBE_SIZE, off);
	if (n < 0)
		return scan_fail(s, -EIO, off, "read failed: %s", strerror((int)-n));
	rd->win_off = off;
	rd->win_len = (size_t)n;
	return 0;
}

/*
 * Point *out at @len (<= TAR_PROBE_SIZE) bytes at archive offset @off.
 * Returns -EINVAL when the archive ends first (*out is then NULL).
 */
static int reader_get(struct tar_scan *s, uint64_t off, size_t len,
		      const char **out)
{
	struct tar_reader *rd = &s->rd;
	int rc;

	assert(len <= TAR_PROBE_SIZE);
	*out = NULL;
	if (off > rd->file_size || rd->file_size - off < len)
		return scan_fail(s, -EINVAL, off,
				 "archive truncated: %zu bytes needed, %llu left",
				 len, (unsigned long long)(rd->file_size -
				 (off < rd->file_size ? off : rd->file_size)));
	if (!window_holds(rd, off, len)) {
		rc = reader_fill(s, off);
		if (rc)
			return rc;
		if (rd->win_len < len)
			return scan_fail(s, -EIO, off,
					 "short read: archive shrank while scanning");
	}
	*out = rd->window + (off - rd->win_off);
	return 0;
}

/* The @len bytes at archive offset @off if the window holds them all,
 * else NULL. */
static const char *window_bytes(const struct tar_reader *rd, uint64_t off, uint64_t len)
{
	return window_holds(rd, off, len) ? rd->window + (off - rd->win_off) : NULL;
}

/* Copy @len bytes at @off into @b (NUL-terminated). */
static int reader_copy(struct tar_scan *s, uint64_t off, size_t len,
		       struct tar_buf *b)
{
	size_t done = 0;
	int rc = buf_reserve(b, len);

	if (rc)
		return rc;
	while (done < len) {
		size_t chunk = len - done < TAR_PROBE_SIZE ? len - done
							  : TAR_PROBE_SIZE;
		const char *p;

		rc = reader_get(s, off + done, chunk, &p);
		if (rc)
			return rc;
		memcpy(b->data + done, p, chunk);
		done += chunk;
	}
	b->data[len] = '\0';
	b->len = len;
	return 0;
}

int tar_parse_number(const char *field, size_t len, int64_t *value)
{
	const unsigned char *p = (const unsigned char *)field;
	uint64_t v = 0;
	size_t i = 0;

	if (len && (p[0] == 0x80 || p[0] == 0xff)) {
		/* Big-endian two's complement; bit 6 of byte 0 is the sign. */
		unsigned char sign = p[0] == 0xff ? 0xff : 0x00;

		for (i = 1; i + 8 < len; i++)
			if (p[i] != sign)
				return -EINVAL;
		for (; i < len; i++)
			v = (v << 8) | p[i];
		if (len <= 8 && sign)
			v |= ~(uint64_t)0 << (8 * (len - 1));
		if ((int64_t)v < 0 ? !sign : sign)
			return -EINVAL;
		*value = (int64_t)v;
		return 0;
	}
	while (i < len && p[i] == ' ')
		i++;
	for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
		if (v > (uint64_t)INT64_MAX >> 3)
			return -EINVAL;
		v = (v << 3) | (p[i] - '0');
	}
	/* the digits end at a NUL or space; what follows is ignored, as GNU
	 * tar ignores it (a field of NULs is an empty field: zero) */
	if (i < len && p[i] != ' ' && p[i] != '\0')
		return -EINVAL;
	*value = (int64_t)v;
	return 0;
}

/*
 * The sum of the header's bytes with the checksum field counted as
 * spaces, unsigned (every modern writer) or signed (some old ones): a
 * signed byte is 256 less than its unsigned value when its top bit is set.
 * Loops the compiler vectorises: the byte loop that summed both with a
 * test for the field per byte took 13 % of a build of tiny members, this
 * 1.3 %.
 */
static bool checksum_ok(const char *blk)
{
	const unsigned char *u = (const unsigned char *)blk;
	uint32_t sum = 8 * ' ', high = 0;
	int64_t stored;

	if (tar_parse_number(blk + H_CHKSUM, 8, &stored))
		return false;
	for (int i = 0; i < TAR_BLOCK_SIZE; i++)
		sum += u[i];
	for (int i = H_CHKSUM; i < H_CHKSUM + 8; i++)
		sum -= u[i];
	if (stored == sum)
		return true;
	for (int i = 0; i < TAR_BLOCK_SIZE; i++)
		high += (i < H_CHKSUM || i >= H_CHKSUM + 8) && u[i] >> 7;
	return stored == (int64_t)sum - 256 * (int64_t)high;
}

/* Parse the decimal digits of [p, p+len) into *out, at most @max. */
static int parse_decimal(const char *p, size_t len, uint64_t max,
			 uint64_t *out)
{
	uint64_t v = 0;

	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		if (v > max / 10 || (v == max / 10 && (uint64_t)(p[i] - '0') > max % 10))
			return -EINVAL;
		v = v * 10 + (p[i] - '0');
	}
	*out = v;
	return 0;
}

/*
 * A PAX time: [-]seconds[.fraction], the fraction truncated to
 * nanoseconds.  Like GNU tar, anything after the fraction's digits is
 * ignored.
 */
static int parse_pax_time(const char *p, size_t len, int64_t *sec,
			  uint32_t *nsec)
{
	bool neg = len && p[0] == '-';
	const char *dot;
	size_t ilen, digits = 0;
	uint64_t whole, frac = 0;

	if (neg) {
		p++;
		len--;
	}
	dot = memchr(p, '.', len);
	ilen = dot ? (size_t)(dot - p) : len;
	if (parse_decimal(p, ilen, INT64_MAX - 1, &whole))
		return -EINVAL;
	for (const char *c = dot ? dot + 1 : p + len; c < p + len &&
	     *c >= '0' && *c <= '9' && digits < 9; c++, digits++)
		frac = frac * 10 + (*c - '0');
	for (; digits < 9; digits++)
		frac *= 10;
	*sec = neg ? -(int64_t)whole : (int64_t)whole;
	*nsec = (uint32_t)frac;
	if (neg && frac) {
		*sec -= 1;
		*nsec = 1000000000u - (uint32_t)frac;
	}
	return 0;
}

static int extent_push(struct tar_scan *s, uint64_t logical, uint64_t length)
{
	int rc;

	if (s->nr_extents >= TAR_SPARSE_EXTENTS_MAX)
		return -E2BIG;
	rc = array_grow((void **)&s->extents, &s->cap_extents, s->nr_extents + 1,
			sizeof(*s->extents));
	if (rc)
		return rc;
	s->extents[s->nr_extents++] = (struct tar_extent){ logical, length, 0 };
	return 0;
}

/* "GNU.sparse.map": offset,size,offset,size,... (sparse format 0.1). */
static int pax_sparse_map(struct tar_scan *s, const char *v, size_t len)
{
	uint64_t nums[2];
	size_t start = 0;
	int n = 0, rc;

	if (len == 0)
		return 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && v[i] != ',')
			continue;
		if (parse_decimal(v + start, i - start, INT64_MAX, &nums[n]))
			return -EINVAL;
		start = i + 1;
		if (++n == 2) {
			rc = extent_push(s, nums[0], nums[1]);
			if (rc)
				return rc;
			n = 0;
		}
	}
	return n ? -EINVAL : 0;
}

static bool key_is(const char *key, size_t klen, const char *want)
{
	return klen == strlen(want) && !memcmp(key, want, klen);
}

/* Sparse-related records (GNU sparse formats 0.0, 0.1 and 1.0). */
static int pax_sparse_record(struct tar_scan *s, struct pax_attrs *a,
			     const char *key, size_t klen,
			     const char *val, size_t vlen)
{
	uint64_t num;

	a->sparse = true;
	if (key_is(key, klen, "GNU.sparse.name"))
		return buf_set(&a->sparse_name, val, vlen) ?: (a->has_sparse_name = true, 0);
	if (key_is(key, klen, "GNU.sparse.map"))
		return pax_sparse_map(s, val, vlen);
	if (key_is(key, klen, "GNU.sparse.major")) {
		a->sparse_map_in_data = vlen == 1 && val[0] == '1';
		return 0;
	}
	if (key_is(key, klen, "GNU.sparse.minor") ||
	    key_is(key, klen, "GNU.sparse.numblocks"))
		return 0;
	if (parse_decimal(val, vlen, INT64_MAX, &num))
		return -EINVAL;
	if (key_is(key, klen, "GNU.sparse.size") ||
	    key_is(key, klen, "GNU.sparse.realsize")) {
		a->realsize = num;
		a->has_realsize = true;
		return 0;
	}
	if (key_is(key, klen, "GNU.sparse.offset"))
		return extent_push(s, num, 0);
	if (key_is(key, klen, "GNU.sparse.numbytes")) {
		if (s->nr_extents == 0)
			return -EINVAL;
		s->extents[s->nr_extents - 1].length = num;
	}
	return 0;
}

static int pax_id(const char *val, size_t vlen, uint32_t *id, bool *has)
{
	uint64_t num;

	if (parse_decimal(val, vlen, UINT32_MAX, &num))
		return -EINVAL;
	*id = (uint32_t)num;
	*has = true;
	return 0;
}

/* Apply one "key=value" record; unknown keys are ignored. */
static int pax_record(struct tar_scan *s, struct pax_attrs *a,
		      const char *key, size_t klen, const char *val,
		      size_t vlen)
{
	if (klen > 11 && !memcmp(key, "GNU.sparse.", 11))
		return pax_sparse_record(s, a, key, klen, val, vlen);
	if (key_is(key, klen, "path")) {
		a->has_path = vlen > 0;
		return buf_set(&a->path, val, vlen);
	}
	if (key_is(key, klen, "linkpath")) {
		a->has_link = vlen > 0;
		return buf_set(&a->link, val, vlen);
	}
	if (key_is(key, klen, "size")) {
		a->has_size = true;
		return parse_decimal(val, vlen, INT64_MAX, &a->size);
	}
	/* attributes that do not frame the archive: a bad value is ignored */
	if (key_is(key, klen, "mtime"))
		return parse_pax_time(val, vlen, &a->mtime_sec, &a->mtime_nsec) ? -EDOM
			: (a->has_mtime = true, 0);
	if (key_is(key, klen, "uid"))
		return pax_id(val, vlen, &a->uid, &a->has_uid) ? -EDOM : 0;
	if (key_is(key, klen, "gid"))
		return pax_id(val, vlen, &a->gid, &a->has_gid) ? -EDOM : 0;
	return 0;
}

/*
 * Parse a PAX body of "%d %s=%s\n" records.  Each length counts the whole
 * record including itself and the newline; anything that does not add up
 * is a format error, because it means the writer and we disagree.
 */
static int pax_parse(struct tar_scan *s, struct pax_attrs *a, uint64_t off,
		     const char *body, size_t len)
{
	size_t pos = 0;

	while (pos < len) {
		const char *rec = body + pos, *sp, *eq;
		uint64_t rlen;
		int rc;

		if (rec[0] == '\0')	/* NUL padding after the last record */
			break;
		sp = memchr(rec, ' ', len - pos);
		if (!sp || parse_decimal(rec, sp - rec, len - pos, &rlen) ||
		    rlen <= (uint64_t)(sp - rec) + 1 || rec[rlen - 1] != '\n')
			return scan_fail(s, -EINVAL, off,
					 "malformed PAX record at body byte %zu", pos);
		eq = memchr(sp + 1, '=', rec + rlen - 1 - (sp + 1));
		if (!eq)
			return scan_fail(s, -EINVAL, off,
					 "PAX record without '=' at body byte %zu", pos);
		rc = pax_record(s, a, sp + 1, eq - sp - 1, eq + 1,
				rec + rlen - 1 - (eq + 1));
		if (rc == -ENOMEM)
			return rc;
		if (rc == -EDOM)
			scan_warn(s, off, "bad PAX time or id value ignored");
		else if (rc)
			return scan_fail(s, -EINVAL, off,
					 "bad PAX value for '%.*s'",
					 (int)(eq - sp - 1 > 40 ? 40 : eq - sp - 1), sp + 1);
		pos += rlen;
	}
	return 0;
}

/* Forget the attributes, keeping the buffers for the next member. */
static void pax_reset(struct pax_attrs *a)
{
	struct tar_buf path = a->path, link = a->link, sname = a->sparse_name;

	*a = (struct pax_attrs){ .path = path, .link = link, .sparse_name = sname };
	a->path.len = 0;
	a->link.len = 0;
	a->sparse_name.len = 0;
}

static void pax_free(struct pax_attrs *a)
{
	free(a->path.data);
	free(a->link.data);
	free(a->sparse_name.data);
}

/* Read the body of a metadata member into s->meta. */
static int read_meta(struct tar_scan *s, uint64_t hdr_off, uint64_t size)
{
	if (size > TAR_META_MAX)
		return scan_fail(s, -EINVAL, hdr_off,
				 "metadata member of %llu bytes exceeds the %u byte limit",
				 (unsigned long long)size, TAR_META_MAX);
	return reader_copy(s, hdr_off + TAR_BLOCK_SIZE, size, &s->meta);
}

/* Old GNU sparse ('S'): map in the header and in extension blocks. */
static int gnu_old_sparse(struct tar_scan *s, const char *blk,
			  uint64_t hdr_off, uint64_t *data_off,
			  uint64_t *realsize)
{
	const char *entries = blk + GNU_SPARSE;
	int count = 4, rc;
	bool more = blk[GNU_ISEXTENDED];
	int64_t num;

	if (tar_parse_number(blk + GNU_REALSIZE, 12, &num) || num < 0)
		return scan_fail(s, -EINVAL, hdr_off, "bad sparse real size");
	*realsize = (uint64_t)num;
	*data_off = hdr_off + TAR_BLOCK_SIZE;
	for (;;) {
		for (int i = 0; i < count && entries[i * 24]; i++) {
			int64_t o, n;

			if (tar_parse_number(entries + i * 24, 12, &o) ||
			    tar_parse_number(entries + i * 24 + 12, 12, &n) ||
			    o < 0 || n < 0)
				return scan_fail(s, -EINVAL, hdr_off, "bad sparse map entry");
			rc = extent_push(s, o, n);
			if (rc)
				return rc == -ENOMEM ? rc : scan_fail(s, -EINVAL, hdr_off,
						"sparse map exceeds %u extents",
						TAR_SPARSE_EXTENTS_MAX);
		}
		if (!more)
			return 0;
		rc = reader_get(s, *data_off, TAR_BLOCK_SIZE, &blk);
		if (rc)
			return rc;
		entries = blk;
		count = 21;
		more = blk[GNU_EXT_ISEXTENDED];
		*data_off += TAR_BLOCK_SIZE;
	}
}

/* Read one decimal line of a sparse 1.0 map at *pos within the data. */
static int sparse1_number(struct tar_scan *s, uint64_t data_off,
			  uint64_t limit, uint64_t *pos, uint64_t *num)
{
	char digits[24];
	size_t n = 0;

	for (;;) {
		const char *c;
		int rc;

		if (*pos >= limit || n == sizeof(digits))
			return -EINVAL;
		rc = reader_get(s, data_off + *pos, 1, &c);
		if (rc)
			return rc;
		(*pos)++;
		if (*c == '\n')
			return parse_decimal(digits, n, INT64_MAX, num);
		digits[n++] = *c;
	}
}

/* GNU sparse 1.0: the map is text at the start of the member's data. */
static int sparse1_map(struct tar_scan *s, uint64_t hdr_off,
		       uint64_t *data_off, uint64_t *stored)
{
	uint64_t pos = 0, count, o, n;
	int rc;

	rc = sparse1_number(s, *data_off, *stored, &pos, &count);
	if (!rc && count > TAR_SPARSE_EXTENTS_MAX)
		rc = -EINVAL;
	for (uint64_t i = 0; !rc && i < count; i++) {
		rc = sparse1_number(s, *data_off, *stored, &pos, &o);
		if (!rc)
			rc = sparse1_number(s, *data_off, *stored, &pos, &n);
		if (!rc)
			rc = extent_push(s, o, n);
	}
	if (rc == -ENOMEM || rc == -EIO)
		return rc;
	if (rc)
		return scan_fail(s, -EINVAL, hdr_off, "bad GNU sparse 1.0 map");
	pos = round_up_block(pos);
	if (pos > *stored)
		return scan_fail(s, -EINVAL, hdr_off, "GNU sparse 1.0 map overruns member");
	*data_off += pos;
	*stored -= pos;
	return 0;
}

/*
 * Check the sparse map against the logical and stored sizes and fill in
 * where each run lies in the archive.  Runs must be in order and must not
 * overlap; a map that does not add up would serve wrong bytes.
 */
static int sparse_finish(struct tar_scan *s, uint64_t hdr_off,
			 uint64_t data_off, uint64_t stored, uint64_t realsize)
{
	uint64_t end = 0, phys = 0;

	for (size_t i = 0; i < s->nr_extents; i++) {
		struct tar_extent *e = &s->extents[i];

		if (e->logical < end || e->length > realsize ||
		    e->logical > realsize - e->length || e->length > stored - phys)
			return scan_fail(s, -EINVAL, hdr_off,
					 "sparse map entry %zu is out of order or out of range", i);
		e->physical = data_off + phys;
		phys += e->length;
		end = e->logical + e->length;
	}
	return 0;
}

/* Name from a ustar/star prefix and name field, or the v7/GNU name field. */
static int header_name(struct tar_scan *s, const char *blk, bool ustar)
{
	size_t nlen = strnlen(blk + H_NAME, NAME_LEN);
	size_t plen_max = memcmp(blk + H_STAR_MAGIC, "tar", 4) ? PREFIX_LEN_USTAR
								: PREFIX_LEN_STAR;
	size_t plen = ustar ? strnlen(blk + H_PREFIX, plen_max) : 0;
	int rc = buf_reserve(&s->name, plen + 1 + nlen);

	if (rc)
		return rc;
	memcpy(s->name.data, blk + H_PREFIX, plen);
	s->name.len = plen;
	if (plen)
		s->name.data[s->name.len++] = '/';
	memcpy(s->name.data + s->name.len, blk + H_NAME, nlen);
	s->name.len += nlen;
	return 0;
}

static enum tar_type type_of(char flag, const char *path, size_t len)
{
	switch (flag) {
	case '1':
		return TAR_HARDLINK;
	case '2':
		return TAR_SYMLINK;
	case '3': case '4': case '6':
		return TAR_SPECIAL;
	case '5': case 'D':
		return TAR_DIR;
	case '\0': case '0':
		/* v7 writers mark directories with a trailing slash only */
		if (len && path[len - 1] == '/')
			return TAR_DIR;
		return TAR_FILE;
	default:
		return TAR_FILE;
	}
}

/* Fill numeric fields; bad ones are warned about and read as zero. */
static void header_numbers(struct tar_scan *s, const char *blk,
			   uint64_t hdr_off, struct tar_member *m)
{
	static const struct { int off, len; const char *what; } f[] = {
		{ H_MODE, 8, "mode" }, { H_UID, 8, "uid" },
		{ H_GID, 8, "gid" }, { H_MTIME, 12, "mtime" },
	};
	int64_t v[4];

	for (int i = 0; i < 4; i++) {
		if (tar_parse_number(blk + f[i].off, f[i].len, &v[i]) ||
		    (i < 3 && (v[i] < 0 || v[i] > UINT32_MAX))) {
			char msg[64];

			snprintf(msg, sizeof(msg), "bad %s field, using 0", f[i].what);
			scan_warn(s, hdr_off, msg);
			v[i] = 0;
		}
	}
	m->mode = (uint32_t)v[0] & 07777;
	m->uid = (uint32_t)v[1];
	m->gid = (uint32_t)v[2];
	m->mtime_sec = v[3];
}

/* Overlay global then local PAX attributes on the header's values. */
static void apply_pax(const struct pax_attrs *a, struct tar_member *m)
{
	if (a->has_sparse_name || a->has_path) {
		const struct tar_buf *b = a->has_sparse_name ? &a->sparse_name : &a->path;

		m->path = b->data;
		m->path_len = b->len;
	}
	if (a->has_link) {
		m->link = a->link.data;
		m->link_len = a->link.len;
	}
	if (a->has_mtime) {
		m->mtime_sec = a->mtime_sec;
		m->mtime_nsec = a->mtime_nsec;
	}
	if (a->has_uid)
		m->uid = a->uid;
	if (a->has_gid)
		m->gid = a->gid;
}

/* Where the sparse map says the data is, and how big the file is. */
static int member_sparse(struct tar_scan *s, const char *blk, uint64_t hdr_off,
			 struct tar_member *m, uint64_t *stored)
{
	uint64_t realsize = s->local.realsize;
	int rc;

	if (blk[H_TYPEFLAG] == 'S') {
		rc = gnu_old_sparse(s, blk, hdr_off, &m->data_offset, &realsize);
		if (rc)
			return rc;
	} else if (!s->local.has_realsize) {
		return scan_fail(s, -EINVAL, hdr_off, "GNU sparse member without a real size");
	} else if (s->local.sparse_map_in_data) {
		rc = sparse1_map(s, hdr_off, &m->data_offset, stored);
		if (rc)
			return rc;
	}
	rc = sparse_finish(s, hdr_off, m->data_offset, *stored, realsize);
	if (rc)
		return rc;
	m->size = realsize;
	m->sparse = true;
	m->extents = s->extents;
	m->nr_extents = s->nr_extents;
	return 0;
}

/* Headers that describe the next member rather than being one. */
static bool is_meta_type(char flag)
{
	return flag && strchr("LKxXgVMN", flag);
}

/* Type flags that are regular files by definition, not by default. */
static bool is_file_type(char flag)
{
	return flag == '\0' || flag == '0' || flag == '7' || flag == 'S';
}

/*
 * Bytes of data that follow a header in the archive.  POSIX types 1-6
 * store none, and neither do v7 directories (a regular type with a
 * trailing slash) unless their data follows (slash_dir_stored()).
 */
static uint64_t stored_bytes(char flag, enum tar_type type, uint64_t size)
{
	switch (flag) {
	case '1': case '2': case '3': case '4': case '5': case '6':
		return 0;
	default:
		return type == TAR_DIR && flag != 'D' ? 0 : size;
	}
}

/*
 * Bytes stored after a regular-typed member whose name ends in '/' (a v7
 * directory) with a nonzero size.  GNU tar's list skips that many bytes of
 * data; its extract stores none and skips to the next valid header.  Both
 * agree with this: when a header (or the end) follows, nothing is stored;
 * otherwise the member's data is there and is skipped, so that "foo/"
 * with two bytes of data, then "bar", is a directory and a file.
 */
static int slash_dir_stored(struct tar_scan *s, uint64_t data_off, uint64_t size,
			    uint64_t *stored)
{
	const char *next;
	int rc;

	*stored = 0;
	if (data_off > s->rd.file_size || s->rd.file_size - data_off < TAR_BLOCK_SIZE)
		return 0;
	rc = reader_get(s, data_off, TAR_BLOCK_SIZE, &next);
	if (rc)
		return rc;
	if (!checksum_ok(next) && memcmp(next, zero_block, TAR_BLOCK_SIZE))
		*stored = size;
	return 0;
}

/* Report a real member (not metadata); set *next to the next header. */
static int member_emit(struct tar_scan *s, const char *blk, uint64_t first_off,
		       uint64_t hdr_off, uint64_t *next)
{
	bool ustar = !memcmp(blk + H_MAGIC, "ustar\0", 6);
	char flag = blk[H_TYPEFLAG];	/* @blk may be gone after a read */
	struct tar_member m = { .header_offset = first_off };
	int64_t hsize;
	uint64_t stored;
	int rc;

	if (tar_parse_number(blk + H_SIZE, 12, &hsize) || hsize < 0)
		return scan_fail(s, -EINVAL, hdr_off, "bad size field");
	rc = header_name(s, blk, ustar);
	if (rc)
		return rc;
	m.path = s->longname.len ? s->longname.data : s->name.data;
	m.path_len = s->longname.len ? strlen(s->longname.data) : s->name.len;
	m.link = s->longlink.len ? s->longlink.data : blk + H_LINKNAME;
	m.link_len = s->longlink.len ? strlen(s->longlink.data)
				     : strnlen(blk + H_LINKNAME, NAME_LEN);
	header_numbers(s, blk, hdr_off, &m);
	apply_pax(&s->global, &m);
	apply_pax(&s->local, &m);
	m.size = s->local.has_size ? s->local.size : (uint64_t)hsize;
	m.type = type_of(flag, m.path, m.path_len);
	stored = stored_bytes(flag, m.type, m.size);
	m.data_offset = hdr_off + TAR_BLOCK_SIZE;
	if (flag == 'S' || s->local.sparse) {
		rc = member_sparse(s, blk, hdr_off, &m, &stored);
		if (rc)
			return rc;
	}
	if (m.type == TAR_DIR && (flag == '0' || flag == '\0') && m.size) {
		rc = slash_dir_stored(s, m.data_offset, m.size, &stored);
		if (rc)
			return rc;
	}
	if (m.type != TAR_FILE)
		m.size = 0;
	if (m.data_offset > s->rd.file_size ||
	    stored > s->rd.file_size - m.data_offset)
		return scan_fail(s, -EINVAL, hdr_off,
				 "member data (%llu bytes) extends past the end of the archive",
				 (unsigned long long)stored);
	if (m.type == TAR_FILE && !is_file_type(flag))
		scan_warn(s, hdr_off, "unknown member type, served as a regular file");
	*next = m.data_offset + round_up_block(stored);
	if (m.type == TAR_FILE && !m.sparse)
		m.data = window_bytes(&s->rd, m.data_offset, m.size);
	return s->ops->member(s->arg, &m);
}

static void pending_reset(struct tar_scan *s)
{
	pax_reset(&s->local);
	s->longname.len = 0;
	s->longlink.len = 0;
	s->nr_extents = 0;
}

/* Consume a metadata header; it applies to the member that follows. */
static int meta_member(struct tar_scan *s, const char *blk, uint64_t off,
		       uint64_t size)
{
	char flag = blk[H_TYPEFLAG];
	int rc = read_meta(s, off, size);

	if (rc)
		return rc;
	switch (flag) {
	case 'L':
		return buf_set(&s->longname, s->meta.data, strlen(s->meta.data));
	case 'K':
		return buf_set(&s->longlink, s->meta.data, strlen(s->meta.data));
	case 'g':
		return pax_parse(s, &s->global, off, s->meta.data, s->meta.len);
	default:
		return pax_parse(s, &s->local, off, s->meta.data, s->meta.len);
	}
}

/* Is this zero block the end of the archive? */
static int end_of_archive(struct tar_scan *s, uint64_t off, bool *end)
{
	const char *blk;
	int rc;

	*end = true;
	if (s->rd.file_size - off < 2 * TAR_BLOCK_SIZE)
		return 0;
	rc = reader_get(s, off + TAR_BLOCK_SIZE, TAR_BLOCK_SIZE, &blk);
	if (rc)
		return rc;
	if (!memcmp(blk, zero_block, TAR_BLOCK_SIZE))
		return 0;
	/* A lone zero block: go on if a header follows, as GNU tar does;
	 * anything else after it is trailing junk, not a broken archive. */
	*end = !checksum_ok(blk);
	scan_warn(s, off, *end ? "lone zero block followed by junk: end of archive"
			       : "lone zero block, continuing");
	return 0;
}

/* Handle the header at *off and advance *off past it and its data. */
static int scan_one(struct tar_scan *s, uint64_t *off, uint64_t *first_off,
		    bool *end)
{
	char hdr[TAR_BLOCK_SIZE];
	const char *blk;
	int64_t size;
	int rc;

	rc = reader_get(s, *off, TAR_BLOCK_SIZE, &blk);
	if (rc)
		return rc;
	if (!memcmp(blk, zero_block, TAR_BLOCK_SIZE)) {
		rc = end_of_archive(s, *off, end);
		*off += TAR_BLOCK_SIZE;
		*first_off = *off;
		return rc;
	}
	if (!checksum_ok(blk))
		return scan_fail(s, -EINVAL, *off, "header checksum mismatch (not a tar archive, or corrupt)");
	if (!is_meta_type(blk[H_TYPEFLAG])) {
		/* a copy: reading a sparse map may refill the window */
		memcpy(hdr, blk, TAR_BLOCK_SIZE);
		rc = member_emit(s, hdr, *first_off, *off, off);
		pending_reset(s);
		*first_off = *off;
		return rc;
	}
	if (tar_parse_number(blk + H_SIZE, 12, &size) || size < 0 ||
	    (uint64_t)size > s->rd.file_size - *off - TAR_BLOCK_SIZE)
		return scan_fail(s, -EINVAL, *off, "bad size in metadata header");
	if (blk[H_TYPEFLAG] == 'V' || blk[H_TYPEFLAG] == 'M' ||
	    blk[H_TYPEFLAG] == 'N') {
		if (blk[H_TYPEFLAG] != 'V')
			scan_warn(s, *off, "multi-volume or old long-name member skipped");
		*first_off = *off + TAR_BLOCK_SIZE + round_up_block((uint64_t)size);
	} else {
		rc = meta_member(s, blk, *off, (uint64_t)size);
		if (rc)
			return rc;
	}
	*off += TAR_BLOCK_SIZE + round_up_block((uint64_t)size);
	return 0;
}

static void scan_release(struct tar_scan *s)
{
	pax_free(&s->global);
	pax_free(&s->local);
	free(s->longname.data);
	free(s->longlink.data);
	free(s->name.data);
	free(s->meta.data);
	free(s->extents);
}

int tar_scan(struct shard_source *src, const struct tar_scan_ops *ops,
	     void *arg, struct tar_error *err)
{
	char *window = malloc(TAR_WINDOW_SIZE);
	int rc;

	if (!window)
		return -ENOMEM;
	rc = tar_scan_window(src, window, ops, arg, err);
	free(window);
	return rc;
}

int tar_scan_window(struct shard_source *src, char *window,
		    const struct tar_scan_ops *ops, void *arg,
		    struct tar_error *err)
{
	uint64_t file_size = src->size;
	struct tar_scan s = {
		.rd = { .src = src, .file_size = file_size, .window = window },
		.ops = ops, .arg = arg, .err = err,
	};
	uint64_t off = 0, first_off = 0, prev = 0;
	bool end = false;
	int rc = 0;

	while (!end && off < file_size) {
		if (file_size - off < TAR_BLOCK_SIZE) {
			rc = scan_fail(&s, -EINVAL, off, "archive ends inside a header block");
			break;
		}
		s.rd.stride = off - prev;
		prev = off;
		rc = scan_one(&s, &off, &first_off, &end);
		if (rc)
			break;
	}
	scan_release(&s);
	return rc;
}
