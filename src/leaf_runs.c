/* SPDX-License-Identifier: Apache-2.0 */
/*
 * leaf_runs.c - sorted runs of leaf records in a temporary file, and
 * their merge (see leaf_runs.h).
 *
 * The file is unlinked at once (O_TMPFILE where the file system has it):
 * a build that dies leaves nothing behind.  It lives in the index's
 * directory, which has room for the index, and the runs are about as
 * large (90 bytes a record with a 15-byte name, against the index's 81 a
 * member); they are written and read back sequentially and mostly stay
 * in the page cache.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int offset_cmp(const void *pa, const void *pb, void *arg)
{
	const char *buf = arg;
	struct leaf_view a = view_at(buf + *(const uint64_t *)pa);
	struct leaf_view b = view_at(buf + *(const uint64_t *)pb);

	return view_cmp(&a, &b);
}

/* An unlinked file in @dir. */
static int temp_file(const char *dir)
{
	char name[PATH_MAX];
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd >= 0 ? fd : -errno;
	if (snprintf(name, sizeof(name), "%s/.shardfs-runs.XXXXXX", dir) >= (int)sizeof(name))
		return -ENAMETOOLONG;
	fd = mkostemp(name, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unlink(name);
	return fd;
}

int leaf_runs_init(struct leaf_runs *r, const char *dir, size_t budget)
{
	*r = (struct leaf_runs){ .budget = budget };
	r->fd = temp_file(dir);
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

/* Sort the buffer's records and copy them in that order to @dst, or
 * write them to the file as one run when @dst is NULL. */
static int emit_sorted(struct leaf_runs *r, char *dst)
{
	char *out = dst ? dst : malloc(LEAF_RUN_WRITE_BUF);
	size_t used = 0;
	int rc = 0;

	if (!out)
		return -ENOMEM;
	qsort_r(r->order, r->nr, sizeof(*r->order), offset_cmp, r->buf);
	for (size_t i = 0; !rc && i < r->nr; i++) {
		const char *p = r->buf + r->order[i];
		size_t len = record_bytes((const struct leaf_record *)p);

		if (!dst && used + len > LEAF_RUN_WRITE_BUF) {
			rc = write_out(r, out, used);
			used = 0;
		}
		if (!rc && !dst && len > LEAF_RUN_WRITE_BUF) {
			rc = write_out(r, p, len);
			continue;
		}
		memcpy(out + used, p, len);
		used += len;
	}
	if (!dst) {
		rc = rc ?: write_out(r, out, used);
		free(out);
	}
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
	rc = rc ?: emit_sorted(r, NULL);
	run.length = r->file_len - run.offset;
	if (!rc)
		r->runs[r->nr_runs++] = run;
	r->buf_len = 0;
	r->nr = 0;
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
	memcpy(p + sizeof(*v->rec) + v->rec->name_len, v->link, v->rec->link_len);
	memset(p + head, 0, align8(head) - head);
	if (len > align8(head))
		memcpy(p + align8(head), v->extents, len - align8(head));
	r->order[r->nr++] = r->buf_len;
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
		r->sorted = calloc_huge(r->buf_len, 1);
		rc = r->sorted ? emit_sorted(r, r->sorted) : -ENOMEM;
		r->sorted_len = r->buf_len;
	}
	free(r->buf);
	free(r->order);
	r->buf = NULL;
	r->order = NULL;
	r->buf_cap = 0;
	return rc;
}

void leaf_runs_release(struct leaf_runs *r)
{
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
	size_t pos;		/* the current record in buf */
	size_t len;		/* bytes in buf */
	uint64_t next;		/* file offset of the next byte to read */
	uint64_t end;		/* file offset where the run ends */
	struct leaf_view view;	/* the current record, when pos < len */
	bool borrowed;		/* buf is the runs' sorted records (kept in
				 * memory), not its own */
};

/* Make @n bytes from pos available in the buffer.  0 or -errno. */
static int reader_fill(struct leaf_run_reader *rd, int fd, size_t n)
{
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

/* Load the reader's next record; 1 when it has one, 0 at the run's end. */
static int reader_load(struct leaf_run_reader *rd, int fd)
{
	int rc;

	if (rd->pos == rd->len && rd->next == rd->end)
		return 0;
	rc = reader_fill(rd, fd, sizeof(struct leaf_record));
	rc = rc ?: reader_fill(rd, fd, record_bytes((const struct leaf_record *)
						    (rd->buf + rd->pos)));
	if (rc)
		return rc;
	rd->view = view_at(rd->buf + rd->pos);
	return 1;
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

/* Start reader @i on run @i of @r, or on the records kept in memory. */
static int reader_start(struct leaf_merge *m, size_t i, size_t each)
{
	const struct leaf_runs *r = m->runs;
	struct leaf_run_reader *rd = &m->readers[i];
	int rc;

	if (r->sorted)
		*rd = (struct leaf_run_reader){ .buf = r->sorted, .cap = r->sorted_len,
						.len = r->sorted_len, .borrowed = true };
	else
		*rd = (struct leaf_run_reader){ .buf = malloc(each), .cap = each,
			.next = r->runs[i].offset, .end = r->runs[i].offset + r->runs[i].length };
	rc = rd->buf ? reader_load(rd, r->fd) : -ENOMEM;
	if (rc > 0)
		m->heap[m->nr_heap++] = (uint32_t)i;
	return rc < 0 ? rc : 0;
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
	rd->pos += record_bytes(rd->view.rec);
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
	for (size_t i = 0; m->readers && i < m->nr_readers; i++)
		if (!m->readers[i].borrowed)
			free(m->readers[i].buf);
	free(m->readers);
	free(m->heap);
	*m = (struct leaf_merge){ 0 };
}
