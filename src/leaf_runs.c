/* SPDX-License-Identifier: Apache-2.0 */
/*
 * leaf_runs.c - sorted runs of leaf records in a temporary file, and
 * their merge (see leaf_runs.h).
 *
 * The file is unlinked at once (scratch_file(), util.h): a build that
 * dies leaves nothing behind.  It lives in the index's
 * directory, which has room for the index; the runs are written once and
 * read back once, sequentially, and mostly stay in the page cache.  What
 * their merge kept follows them in the file, read back through a mapping
 * directory by directory: a second merge of the runs (the heap's
 * comparisons, a reader per run) cost more than reading the kept records
 * (leaf_runs_keep()).
 *
 * A run codes each record against the one before it (below, before
 * emit_sorted()): 15.4 bytes a record at 20 M members of scale_gen's
 * shards, where the buffer's form takes 88.  Written whole, the runs were
 * 1.8 GB at 20 M members, and the kernel's copy of them into the page
 * cache the largest part of the build's serial merge (23 % of its
 * samples); coded, the build took 16.4-18.4 s instead of 21.0-23.2 s
 * (docs/benchmarks-scale.md, "The index build").
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "leaf_runs.h"
#include "shardfs/index.h"
#include "shardfs/util.h"

static size_t align8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* Bytes of the record @rec heads, with its name, link and extents. */
static size_t record_bytes(const struct leaf_record *rec)
{
	return align8(sizeof(*rec) + rec->name_len + rec->link_len) +
	       (size_t)rec->nr_extents * sizeof(struct tar_extent);
}

/* Let *@buf (of *@cap bytes) hold at least @n bytes, keeping its bytes.
 * 0 or -ENOMEM (then unchanged). */
static int buf_reserve(char **buf, size_t *cap, size_t n)
{
	char *p;

	if (n <= *cap)
		return 0;
	p = realloc(*buf, n);
	if (!p)
		return -ENOMEM;
	memory_advise_huge(p, n);
	*buf = p;
	*cap = n;
	return 0;
}

/* The view of the record at @p. */
static struct leaf_view view_at(const char *p)
{
	const struct leaf_record *rec = (const struct leaf_record *)p;
	const char *name = p + sizeof(*rec);

	return (struct leaf_view){
		.rec = rec, .name = name, .link = name + rec->name_len,
		.extents = (const struct tar_extent *)
			(p + align8(sizeof(*rec) + rec->name_len + rec->link_len)) };
}

/* The order of the runs: directory, name, then archive order. */
static int view_cmp(const struct leaf_view *a, const struct leaf_view *b)
{
	int c;

	if (a->rec->dir != b->rec->dir)
		return a->rec->dir < b->rec->dir ? -1 : 1;
	c = shard_index_name_cmp(a->name, a->rec->name_len, b->name, b->rec->name_len);
	if (c)
		return c;
	if (a->rec->shard != b->rec->shard)
		return a->rec->shard < b->rec->shard ? -1 : 1;
	return a->rec->member < b->rec->member ? -1 : a->rec->member > b->rec->member;
}

/* The bytes @from to @from + 8 of @name (@len bytes), big-endian, 0
 * past its end: compared as numbers, they order names as
 * shard_index_name_cmp() does wherever they differ (a name has no NUL). */
static uint64_t name_bytes(const char *name, size_t len, size_t from)
{
	uint64_t v = 0;

	for (size_t i = from; i < from + 8; i++)
		v = v << 8 | (i < len ? (unsigned char)name[i] : 0);
	return v;
}

/* The key of record @v at @offset of the buffer. */
static struct leaf_key key_of(const struct leaf_view *v, uint64_t offset)
{
	const char *name = v->name;
	size_t len = v->rec->name_len;

	return (struct leaf_key){
		.head = (uint64_t)v->rec->dir << 32 | name_bytes(name, len, 0) >> 32,
		.next = name_bytes(name, len, 4), .offset = offset };
}

/* view_cmp() of two keys' records, from the keys where they differ. */
static int key_cmp(const void *pa, const void *pb, void *arg)
{
	const struct leaf_key *a = pa, *b = pb;
	struct leaf_view x, y;

	if (a->head != b->head)
		return a->head < b->head ? -1 : 1;
	if (a->next != b->next)
		return a->next < b->next ? -1 : 1;
	x = view_at((const char *)arg + a->offset);
	y = view_at((const char *)arg + b->offset);
	return view_cmp(&x, &y);
}

int leaf_runs_init(struct leaf_runs *r, const char *dir, size_t budget)
{
	*r = (struct leaf_runs){ .budget = budget };
	r->fd = scratch_file(dir);
	return r->fd < 0 ? r->fd : 0;
}

static int write_out(struct leaf_runs *r, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = pwrite(r->fd, buf, len, (off_t)r->file_len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
		r->file_len += (uint64_t)n;
	}
	return 0;
}

/*
 * A run codes each record against the one before it in the run (the
 * first against a zeroed record), as:
 *
 *   varint	bytes of the rest of the record
 *   byte	RUN_* flags
 *   varint	dir				unless RUN_SAME_DIR
 *   varint	bytes of name the previous record's name begins with too
 *   varint	bytes of name after those, then the bytes
 *   varint	shard				unless RUN_SAME_SHARD
 *   varint	member, data_offset		with RUN_SAME_SHARD: each the
 *						zigzag of its difference from
 *						the previous record's
 *   varint	member - group (zigzag)		with RUN_LINKED
 *   varint	linked - 1: shards back to	with RUN_LINKED_BACK
 *		the group's
 *   varint	size
 *   varint	mtime_sec (zigzag), mtime_nsec	unless RUN_SAME_MTIME
 *   varint	mode, uid, gid; byte type	unless RUN_SAME_ATTRS
 *   varint	link_len, then its bytes	with RUN_LINK
 *   varint	nr_extents, then each extent's
 *		logical, length and physical	with RUN_SPARSE
 *
 * A shard's sample members sorted by name share their directory, shard,
 * times and owner and most of their name, and lie close together in the
 * shard: 15.4 bytes a record at 20 M members of scale_gen's shards, whose
 * directories hold members of many shards (each a new shard, member and
 * offset), for 88 in the buffer.
 */
#define RUN_SAME_DIR	0x01u
#define RUN_SAME_SHARD	0x02u
#define RUN_SAME_MTIME	0x04u
#define RUN_SAME_ATTRS	0x08u
#define RUN_LINK	0x10u
#define RUN_SPARSE	0x20u
#define RUN_LINKED	0x40u
#define RUN_LINKED_BACK	0x80u

/* Bytes of the longest varint, and of a coded record's fields other than
 * its name, link and extents at most. */
#define VARINT_MAX 10u
#define RUN_CODED_FIXED (18u * VARINT_MAX + 2u)

/* The record a run's first one is coded against. */
static const struct leaf_record run_start;

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	for (; v >= 0x80; v >>= 7)
		*p++ = (uint8_t)(v | 0x80);
	*p++ = (uint8_t)v;
	return p;
}

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Bytes the coding of the record at @p may take. */
static size_t coded_bound(const char *p)
{
	const struct leaf_record *rec = (const struct leaf_record *)p;

	return RUN_CODED_FIXED + rec->name_len + rec->link_len +
	       (size_t)rec->nr_extents * 3 * VARINT_MAX;
}

/* Code the fields after the name of record @v against @b's at @o. */
static uint8_t *code_fields(uint8_t *o, unsigned *flags, const struct leaf_view *v,
			    const struct leaf_record *b)
{
	const struct leaf_record *a = v->rec;

	if (a->shard == b->shard) {
		*flags |= RUN_SAME_SHARD;
		o = put_varint(o, zigzag((int64_t)a->member - (int64_t)b->member));
		o = put_varint(o, zigzag((int64_t)(a->data_offset - b->data_offset)));
	} else {
		o = put_varint(put_varint(put_varint(o, a->shard), a->member), a->data_offset);
	}
	assert(a->linked || !a->group);
	assert(a->linked <= LEAF_LINKED_MAX && (!a->linked || a->linked - 1u <= a->shard));
	if (a->linked) {
		*flags |= RUN_LINKED;
		o = put_varint(o, zigzag((int64_t)a->member - (int64_t)a->group));
	}
	if (a->linked > LEAF_LINKED_SAME) {
		*flags |= RUN_LINKED_BACK;
		o = put_varint(o, a->linked - 1u);
	}
	o = put_varint(o, a->size);
	if (a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec)
		*flags |= RUN_SAME_MTIME;
	else
		o = put_varint(put_varint(o, zigzag(a->mtime_sec)), a->mtime_nsec);
	if (a->mode == b->mode && a->uid == b->uid && a->gid == b->gid && a->type == b->type) {
		*flags |= RUN_SAME_ATTRS;
	} else {
		o = put_varint(put_varint(put_varint(o, a->mode), a->uid), a->gid);
		*o++ = a->type;
	}
	if (a->link_len) {
		*flags |= RUN_LINK;
		o = put_varint(o, a->link_len);
		o = (uint8_t *)mempcpy(o, v->link, a->link_len);
	}
	assert(a->sparse || !a->nr_extents);
	if (a->sparse) {
		*flags |= RUN_SPARSE;
		o = put_varint(o, a->nr_extents);
		for (uint32_t i = 0; i < a->nr_extents; i++)
			o = put_varint(put_varint(put_varint(o, v->extents[i].logical),
						  v->extents[i].length), v->extents[i].physical);
	}
	return o;
}

/* Code the record at @p against the one at @q into @out (coded_bound()
 * bytes); returns the bytes used. */
static size_t code_record(uint8_t *out, const char *p, const char *q)
{
	const struct leaf_view v = view_at(p), u = view_at(q);
	uint8_t *body = out + VARINT_MAX, *o = body + 1;
	uint32_t shared = 0;
	unsigned flags = 0;
	size_t len;

	if (v.rec->dir == u.rec->dir)
		flags |= RUN_SAME_DIR;
	else
		o = put_varint(o, v.rec->dir);
	while (shared < v.rec->name_len && shared < u.rec->name_len &&
	       v.name[shared] == u.name[shared])
		shared++;
	o = put_varint(put_varint(o, shared), v.rec->name_len - shared);
	o = (uint8_t *)mempcpy(o, v.name + shared, v.rec->name_len - shared);
	o = code_fields(o, &flags, &v, u.rec);
	*body = (uint8_t)flags;
	len = (size_t)(o - body);
	o = put_varint(out, len);
	memmove(o, body, len);
	return (size_t)(o - out) + len;
}

/* Where emit_sorted() puts a run: through a buffer to the file, or (no
 * run written) all in memory. */
struct run_sink {
	uint8_t *buf;		/* coded records not yet written */
	size_t len;		/* bytes in buf */
	size_t cap;		/* bytes allocated */
	bool to_file;		/* buf is flushed to the file when full */
};

/* Room for @n more bytes in @o.  0 or -errno. */
static int sink_room(struct leaf_runs *r, struct run_sink *o, size_t n)
{
	int rc;

	if (o->len + n <= o->cap)
		return 0;
	if (o->to_file && o->len) {
		rc = write_out(r, (const char *)o->buf, o->len);
		o->len = 0;
		if (rc || n <= o->cap)
			return rc;
	}
	return buf_reserve((char **)&o->buf, &o->cap,
			   o->to_file || o->len + n > 2 * o->cap ? o->len + n : 2 * o->cap);
}

/* Sort the buffer's records and code them in that order: to the file as
 * one run, or to r->sorted when @to_file is false. */
static int emit_sorted(struct leaf_runs *r, bool to_file)
{
	struct run_sink o = { .to_file = to_file };
	const char *prev = (const char *)&run_start;
	int rc = buf_reserve((char **)&o.buf, &o.cap,
			     to_file ? LEAF_RUN_WRITE_BUF : r->buf_len);

	if (r->unsorted)	/* an extension's base comes in order */
		qsort_r(r->order, r->nr, sizeof(*r->order), key_cmp, r->buf);
	for (size_t i = 0; !rc && i < r->nr; i++) {
		const char *p = r->buf + r->order[i].offset;

		rc = sink_room(r, &o, coded_bound(p));
		if (!rc)
			o.len += code_record(o.buf + o.len, p, prev);
		prev = p;
	}
	if (!to_file) {
		r->sorted = (char *)o.buf;
		r->sorted_len = o.len;
		return rc;
	}
	rc = rc ?: write_out(r, (const char *)o.buf, o.len);
	free(o.buf);
	return rc;
}

/* Sort the buffer's records and write them as one run. */
static int spill(struct leaf_runs *r)
{
	struct leaf_run run = { .offset = r->file_len };
	int rc;

	if (!r->nr)
		return 0;
	rc = array_grow((void **)&r->runs, &r->cap_runs, r->nr_runs + 1, sizeof(*r->runs));
	rc = rc ?: emit_sorted(r, true);
	run.length = r->file_len - run.offset;
	if (!rc)
		r->runs[r->nr_runs++] = run;
	r->buf_len = 0;
	r->nr = 0;
	r->unsorted = false;
	return rc;
}

/* Room for a record of @len bytes, spilling first when the budget says
 * (a record larger than the budget gets a buffer of its own size). */
static int make_room(struct leaf_runs *r, size_t len)
{
	size_t half = r->budget / 2, orders = half / sizeof(*r->order);
	int rc = 0;

	orders = orders ? orders : 1;
	if (r->nr && (r->buf_len + len > half || r->nr >= orders))
		rc = spill(r);
	if (!rc && !r->order && !(r->order = calloc_huge(orders, sizeof(*r->order))))
		rc = -ENOMEM;
	if (!rc && r->buf_len + len > r->buf_cap)
		rc = buf_reserve(&r->buf, &r->buf_cap,
				 r->buf_len + len > half ? r->buf_len + len : half);
	return rc;
}

int leaf_runs_add(struct leaf_runs *r, const struct leaf_view *v)
{
	size_t head = sizeof(*v->rec) + v->rec->name_len + v->rec->link_len;
	size_t len = record_bytes(v->rec);
	char *p;
	int rc = make_room(r, len);

	if (rc)
		return rc;
	p = r->buf + r->buf_len;
	memcpy(p, v->rec, sizeof(*v->rec));
	memcpy(p + sizeof(*v->rec), v->name, v->rec->name_len);
	if (v->rec->link_len)	/* v->link may be NULL then */
		memcpy(p + sizeof(*v->rec) + v->rec->name_len, v->link, v->rec->link_len);
	memset(p + head, 0, align8(head) - head);
	if (len > align8(head))
		memcpy(p + align8(head), v->extents, len - align8(head));
	r->order[r->nr++] = key_of(v, r->buf_len);
	if (r->nr > 1 && !r->unsorted)
		r->unsorted = key_cmp(&r->order[r->nr - 2], &r->order[r->nr - 1], r->buf) > 0;
	r->buf_len += len;
	r->records++;
	return 0;
}

int leaf_runs_finish(struct leaf_runs *r)
{
	int rc = 0;

	if (r->nr_runs) {
		rc = spill(r);
	} else if (r->nr) {	/* all within the budget: kept, sorted */
		rc = emit_sorted(r, false);
	}
	free(r->buf);
	free(r->order);
	r->buf = NULL;
	r->order = NULL;
	r->buf_cap = 0;
	return rc;
}

/* What leaf_runs_keep() has kept. */
struct leaf_keep {
	struct run_sink sink;	/* coded records not yet written; in
				 * memory, all of them */
	char *prev;		/* the last record kept, which the next is
				 * coded against */
	size_t prev_cap;	/* bytes allocated for prev */
	uint64_t start;		/* the file offset of the first kept byte */
	uint64_t len;		/* bytes kept */
};

int leaf_runs_keep(struct leaf_runs *r, const struct leaf_view *v, struct leaf_run *dir)
{
	const char *p = (const char *)v->rec, *prev;
	struct leaf_keep *k = r->keep;
	size_t n;
	int rc;

	assert(v->name == p + sizeof(*v->rec) && !r->kept);
	if (!k) {
		k = r->keep = calloc(1, sizeof(*k));
		if (!k)
			return -ENOMEM;
		k->sink.to_file = !r->sorted;
		k->start = r->file_len;
		if (k->sink.to_file &&
		    buf_reserve((char **)&k->sink.buf, &k->sink.cap, LEAF_RUN_WRITE_BUF))
			return -ENOMEM;
	}
	if (!dir->length)
		dir->offset = k->len;
	assert(dir->offset + dir->length == k->len);
	prev = dir->length ? k->prev : (const char *)&run_start;
	rc = sink_room(r, &k->sink, coded_bound(p));
	if (rc)
		return rc;
	n = code_record(k->sink.buf + k->sink.len, p, prev);
	k->sink.len += n;
	k->len += n;
	dir->length += n;
	if (buf_reserve(&k->prev, &k->prev_cap, record_bytes(v->rec)))
		return -ENOMEM;
	memcpy(k->prev, p, record_bytes(v->rec));
	return 0;
}

int leaf_runs_keep_finish(struct leaf_runs *r)
{
	struct leaf_keep *k = r->keep;
	uint64_t from;
	int rc;

	free(r->sorted);	/* no merge of the runs from now on */
	r->sorted = NULL;
	if (!k || !k->sink.to_file) {
		r->kept = k ? (const char *)k->sink.buf : NULL;
		return 0;
	}
	rc = write_out(r, (const char *)k->sink.buf, k->sink.len);
	free(k->sink.buf);
	k->sink = (struct run_sink){ .to_file = true };
	if (rc || !k->len)
		return rc;
	from = k->start & ~(uint64_t)(sysconf(_SC_PAGESIZE) - 1);
	r->kept_map_len = (size_t)(r->file_len - from);
	r->kept_map = mmap(NULL, r->kept_map_len, PROT_READ, MAP_SHARED, r->fd, (off_t)from);
	if (r->kept_map == MAP_FAILED) {
		r->kept_map = NULL;
		return -errno;
	}
	r->kept = (const char *)r->kept_map + (k->start - from);
	return 0;
}

void leaf_runs_release(struct leaf_runs *r)
{
	if (r->kept_map)
		munmap(r->kept_map, r->kept_map_len);
	if (r->keep) {
		free(r->keep->sink.buf);
		free(r->keep->prev);
		free(r->keep);
	}
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
	free(r->order);
	free(r->runs);
	free(r->sorted);
	*r = (struct leaf_runs){ .fd = -1 };
}

/* One run being read back. */
struct leaf_run_reader {
	char *buf;		/* bytes read, not all taken */
	size_t cap;		/* bytes allocated */
	size_t pos;		/* the current record's coding in buf */
	size_t len;		/* bytes in buf */
	size_t coded;		/* bytes of the current record's coding */
	uint64_t next;		/* file offset of the next byte to read */
	uint64_t end;		/* file offset where the run ends */
	char *rec;		/* the current record decoded, as view shows
				 * it (the next is coded against it) */
	size_t rec_cap;		/* bytes allocated for rec */
	struct leaf_view view;	/* the current record, when pos < len */
	bool borrowed;		/* buf is the runs' sorted records (kept in
				 * memory), not its own */
};

/* Bytes of the run not yet taken, in the buffer or still in the file. */
static uint64_t reader_left(const struct leaf_run_reader *rd)
{
	return rd->len - rd->pos + (rd->end - rd->next);
}

/* Make @n bytes from pos available in the buffer, or as many as the run
 * has left.  0 or -errno. */
static int reader_fill(struct leaf_run_reader *rd, int fd, size_t n)
{
	if (n > reader_left(rd))
		n = reader_left(rd);
	if (rd->len - rd->pos >= n)
		return 0;
	memmove(rd->buf, rd->buf + rd->pos, rd->len - rd->pos);
	rd->len -= rd->pos;
	rd->pos = 0;
	if (buf_reserve(&rd->buf, &rd->cap, n))
		return -ENOMEM;
	while (rd->len < n) {
		size_t want = rd->cap - rd->len;
		ssize_t got;

		if (want > rd->end - rd->next)
			want = rd->end - rd->next;
		got = pread(fd, rd->buf + rd->len, want, (off_t)rd->next);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? -errno : -EIO;
		rd->len += (size_t)got;
		rd->next += (uint64_t)got;
	}
	return 0;
}

/* The coded bytes of a record being decoded. */
struct coded {
	const uint8_t *p;	/* the next byte */
	const uint8_t *end;	/* past the record's last */
	bool bad;		/* a field ran past end or out of range */
};

static uint64_t take_varint(struct coded *c)
{
	uint64_t v = 0;

	for (unsigned shift = 0; c->p < c->end && shift < 64; shift += 7) {
		uint8_t byte = *c->p++;

		v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80))
			return v;
	}
	c->bad = true;
	return 0;
}

static uint32_t take_u32(struct coded *c)
{
	uint64_t v = take_varint(c);

	c->bad |= v > UINT32_MAX;
	return (uint32_t)v;
}

static uint8_t take_byte(struct coded *c)
{
	if (c->p < c->end)
		return *c->p++;
	c->bad = true;
	return 0;
}

/* Copy @n coded bytes to @dst; false when the record has fewer. */
static bool take_bytes(struct coded *c, char *dst, size_t n)
{
	if (c->bad || n > (size_t)(c->end - c->p)) {
		c->bad = true;
		return false;
	}
	memcpy(dst, c->p, n);
	c->p += n;
	return true;
}

/* Decode the fields after the name (code_fields()) into @n, its link and
 * extents into rd->rec, which has room for them. */
static void decode_fields(struct leaf_run_reader *rd, struct coded *c,
			  struct leaf_record *n, unsigned flags)
{
	char *link = rd->rec + sizeof(*n) + n->name_len;
	struct tar_extent *x;
	size_t head;

	if (flags & RUN_SAME_SHARD) {
		n->member += (uint32_t)unzigzag(take_varint(c));
		n->data_offset += (uint64_t)unzigzag(take_varint(c));
	} else {
		n->shard = take_u32(c);
		n->member = take_u32(c);
		n->data_offset = take_varint(c);
	}
	c->bad |= (flags & RUN_LINKED_BACK) && !(flags & RUN_LINKED);
	n->linked = flags & RUN_LINKED ? LEAF_LINKED_SAME : 0;
	n->group = 0;
	if (n->linked) {
		int64_t group = (int64_t)n->member - unzigzag(take_varint(c));

		c->bad |= group < 0 || group > UINT32_MAX;
		n->group = (uint32_t)group;
	}
	if (flags & RUN_LINKED_BACK) {
		uint64_t back = take_varint(c);

		c->bad |= !back || back >= LEAF_LINKED_MAX || back > n->shard;
		n->linked = (uint16_t)(back + 1);
	}
	n->size = take_varint(c);
	if (!(flags & RUN_SAME_MTIME)) {
		n->mtime_sec = unzigzag(take_varint(c));
		n->mtime_nsec = take_u32(c);
	}
	if (!(flags & RUN_SAME_ATTRS)) {
		n->mode = take_u32(c);
		n->uid = take_u32(c);
		n->gid = take_u32(c);
		n->type = take_byte(c);
	}
	n->link_len = flags & RUN_LINK ? take_u32(c) : 0;
	if (!take_bytes(c, link, n->link_len))
		return;
	n->sparse = !!(flags & RUN_SPARSE);
	n->nr_extents = n->sparse ? take_u32(c) : 0;
	c->bad |= n->nr_extents > (size_t)(c->end - c->p) / 3;
	head = sizeof(*n) + n->name_len + n->link_len;
	memset(rd->rec + head, 0, align8(head) - head);
	x = (struct tar_extent *)(rd->rec + align8(head));
	for (uint32_t i = 0; !c->bad && i < n->nr_extents; i++)
		x[i] = (struct tar_extent){ .logical = take_varint(c),
					    .length = take_varint(c),
					    .physical = take_varint(c) };
}

/* Decode the @len coded bytes at @p against rd->rec into rd->rec.
 * 0, -EIO (not a coding code_record() wrote) or -ENOMEM. */
static int decode_record(struct leaf_run_reader *rd, const uint8_t *p, size_t len)
{
	struct coded c = { .p = p, .end = p + len };
	struct leaf_record n = *(const struct leaf_record *)rd->rec;
	unsigned flags = take_byte(&c);
	uint32_t shared, suffix;

	if (!(flags & RUN_SAME_DIR))
		n.dir = take_u32(&c);
	shared = take_u32(&c);
	suffix = take_u32(&c);
	/* decoded, the rest takes at most 8 times its coded bytes (an
	 * extent: 3 bytes or more coded, 24 decoded) */
	if (c.bad || shared > n.name_len || suffix > (size_t)(c.end - c.p))
		return -EIO;
	if (buf_reserve(&rd->rec, &rd->rec_cap, sizeof(n) + shared + 8 + 8 * len))
		return -ENOMEM;
	take_bytes(&c, rd->rec + sizeof(n) + shared, suffix);
	n.name_len = shared + suffix;
	decode_fields(rd, &c, &n, flags);
	if (c.bad || c.p != c.end)
		return -EIO;
	memcpy(rd->rec, &n, sizeof(n));
	rd->view = view_at(rd->rec);
	return 0;
}

/* Load the reader's next record; 1 when it has one, 0 at the run's end,
 * or -errno (-EIO: not a run emit_sorted() wrote). */
static int reader_load(struct leaf_run_reader *rd, int fd)
{
	struct coded head;
	uint64_t len;
	int rc;

	if (!reader_left(rd))
		return 0;
	rc = reader_fill(rd, fd, VARINT_MAX);
	if (rc)
		return rc;
	head = (struct coded){ .p = (const uint8_t *)rd->buf + rd->pos,
			       .end = (const uint8_t *)rd->buf + rd->len };
	len = take_varint(&head);
	if (head.bad || len > reader_left(rd))
		return -EIO;
	rd->coded = (size_t)(head.p - (const uint8_t *)rd->buf - rd->pos) + len;
	rc = reader_fill(rd, fd, rd->coded);
	if (!rc && rd->len - rd->pos < rd->coded)
		rc = -EIO;
	rc = rc ?: decode_record(rd, (const uint8_t *)rd->buf + rd->pos + rd->coded - len, len);
	return rc ?: 1;
}

static bool heap_less(const struct leaf_merge *m, uint32_t a, uint32_t b)
{
	return view_cmp(&m->readers[a].view, &m->readers[b].view) < 0;
}

/* Restore the heap below slot @i. */
static void heap_down(struct leaf_merge *m, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, min = i;
		uint32_t t;

		if (l < m->nr_heap && heap_less(m, m->heap[l], m->heap[min]))
			min = l;
		if (r < m->nr_heap && heap_less(m, m->heap[r], m->heap[min]))
			min = r;
		if (min == i)
			return;
		t = m->heap[i];
		m->heap[i] = m->heap[min];
		m->heap[min] = t;
		i = min;
	}
}

/* Load the first record of reader @i (its buffer set) and put it on the
 * heap if it has one. */
static int reader_begin(struct leaf_merge *m, size_t i)
{
	struct leaf_run_reader *rd = &m->readers[i];
	int rc;

	rd->rec_cap = sizeof(run_start);	/* the first is coded against it */
	rd->rec = calloc(1, rd->rec_cap);
	rc = rd->buf && rd->rec ? reader_load(rd, m->runs->fd) : -ENOMEM;
	if (rc > 0)
		m->heap[m->nr_heap++] = (uint32_t)i;
	return rc < 0 ? rc : 0;
}

/* A reader of the @len coded bytes at @buf, held in memory. */
static struct leaf_run_reader borrowed_reader(const char *buf, size_t len)
{
	return (struct leaf_run_reader){ .buf = (char *)buf, .cap = len, .len = len,
					 .borrowed = true };
}

/* Start reader @i on run @i of @r, or on the records kept in memory. */
static int reader_start(struct leaf_merge *m, size_t i, size_t each)
{
	const struct leaf_runs *r = m->runs;

	if (r->sorted)
		m->readers[i] = borrowed_reader(r->sorted, r->sorted_len);
	else
		m->readers[i] = (struct leaf_run_reader){ .buf = malloc(each), .cap = each,
			.next = r->runs[i].offset, .end = r->runs[i].offset + r->runs[i].length };
	return reader_begin(m, i);
}

int leaf_merge_start(struct leaf_merge *m, const struct leaf_runs *r)
{
	size_t n = r->sorted ? 1 : r->nr_runs, each = n ? r->budget / 2 / n : 0;
	int rc = 0;

	*m = (struct leaf_merge){ .runs = r, .nr_readers = n };
	each = each < LEAF_RUN_READ_MIN ? LEAF_RUN_READ_MIN
	       : each > LEAF_RUN_READ_MAX ? LEAF_RUN_READ_MAX : each;
	m->readers = calloc(n ? n : 1, sizeof(*m->readers));
	m->heap = calloc(n ? n : 1, sizeof(*m->heap));
	if (!m->readers || !m->heap)
		return -ENOMEM;
	for (size_t i = 0; !rc && i < n; i++)
		rc = reader_start(m, i, each);
	for (size_t i = m->nr_heap / 2; i-- > 0;)
		heap_down(m, i);
	return rc;
}

int leaf_merge_start_kept(struct leaf_merge *m, const struct leaf_runs *r,
			  const struct leaf_run *dir)
{
	*m = (struct leaf_merge){ .runs = r, .nr_readers = 1 };
	m->readers = calloc(1, sizeof(*m->readers));
	m->heap = calloc(1, sizeof(*m->heap));
	if (!m->readers || !m->heap)
		return -ENOMEM;
	assert(r->kept && dir->offset + dir->length <= r->keep->len);
	m->readers[0] = borrowed_reader(r->kept + dir->offset, (size_t)dir->length);
	return reader_begin(m, 0);
}

const struct leaf_view *leaf_merge_peek(const struct leaf_merge *m)
{
	return m->nr_heap ? &m->readers[m->heap[0]].view : NULL;
}

int leaf_merge_next(struct leaf_merge *m)
{
	struct leaf_run_reader *rd;
	int rc;

	assert(m->nr_heap);
	rd = &m->readers[m->heap[0]];
	rd->pos += rd->coded;
	rc = reader_load(rd, m->runs->fd);
	if (rc < 0)
		return rc;
	if (!rc)
		m->heap[0] = m->heap[--m->nr_heap];
	heap_down(m, 0);
	return 0;
}

/* Copy the smallest record into m->last and take it. */
static int take_copy(struct leaf_merge *m, struct leaf_view *v)
{
	const struct leaf_view *top = leaf_merge_peek(m);
	size_t len = record_bytes(top->rec);

	if (buf_reserve(&m->last, &m->last_cap, len))
		return -ENOMEM;
	memcpy(m->last, top->rec, len);
	*v = view_at(m->last);
	return leaf_merge_next(m);
}

int leaf_merge_take_path(struct leaf_merge *m, struct leaf_view *v, uint64_t *earlier)
{
	const struct leaf_view *top;
	int rc;

	*earlier = 0;
	if (!leaf_merge_peek(m))
		return 0;
	rc = take_copy(m, v);
	while (!rc && (top = leaf_merge_peek(m)) && top->rec->dir == v->rec->dir &&
	       !shard_index_name_cmp(top->name, top->rec->name_len, v->name,
				     v->rec->name_len)) {
		(*earlier)++;
		rc = take_copy(m, v);
	}
	return rc ? rc : 1;
}

void leaf_merge_end(struct leaf_merge *m)
{
	free(m->last);
	for (size_t i = 0; m->readers && i < m->nr_readers; i++) {
		if (!m->readers[i].borrowed)
			free(m->readers[i].buf);
		free(m->readers[i].rec);
	}
	free(m->readers);
	free(m->heap);
	*m = (struct leaf_merge){ 0 };
}
