/* SPDX-License-Identifier: Apache-2.0 */
/*
 * control.c - content of the files in /.shardfs/.
 *
 * The mount keeps nothing per open file: FUSE_CAP_NO_OPEN_SUPPORT spares
 * two requests per file opened (ll.c), so a READ names only an inode and
 * an offset, and comes through the page cache.  Content is built for that:
 *
 *  - stats, shards and metrics change while mounted.  control_lookup()
 *    renders a snapshot whole; its size and mtime are the file's
 *    attributes.  The glue gives these entries and attributes no cache
 *    time, so every open(2) looks the name up (a new snapshot) and every
 *    read(2) fetches the attributes; FUSE_CAP_AUTO_INVAL_DATA then drops
 *    cached pages as soon as the mtime moves.
 *
 *  - members is fixed for the life of the mount and can be large (10 M
 *    files make ~700 MB of text).  Its bytes are a function of the
 *    offset: members_at[] records where the line of every
 *    CONTROL_MEMBERS_STRIDE-th entry starts, and a read renders lines
 *    from the checkpoint below it.  The first getattr or read walks the
 *    index once to size the file.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/control.h"
#include "shardfs/log.h"
#include "shardfs/remote.h"
#include "shardfs/util.h"

/* Longest text of the remote counters. */
#define CONTROL_REMOTE_MAX 2048

/* A growing buffer a snapshot is rendered into. */
struct control_buf {
	char *data;		/* rendered bytes */
	size_t len;		/* bytes used */
	size_t cap;		/* bytes allocated */
	bool failed;		/* an allocation failed: content is cut */
};

/* Renders the whole content of a changing file. */
typedef void (*control_render_fn)(const struct control_source *src,
				  struct control_buf *b);

static void buf_printf(struct control_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void buf_printf(struct control_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->failed || array_grow((void **)&b->data, &b->cap, b->len + 256, 1))
		goto out_failed;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < b->cap - b->len)
			break;
		if (array_grow((void **)&b->data, &b->cap, b->len + n + 1, 1))
			goto out_failed;
	}
	b->len += n;
	return;
out_failed:
	b->failed = true;
}

static double op_mean_us(const struct shardfs_op_counter *c)
{
	unsigned long long n = atomic_load_explicit(&c->count, memory_order_relaxed);

	return n ? atomic_load_explicit(&c->nsec, memory_order_relaxed) / 1e3 / n : 0;
}

static unsigned long long counter(const atomic_ullong *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static const char *const op_names[SHARDFS_NR_OPS] = {
	"lookup", "getattr", "readdir", "open", "read", "readlink", "xattr",
	"statfs", "ioctl",
};

static void render_stats_ops(const struct control_source *src, struct control_buf *b)
{
	buf_printf(b, "  \"ops\": {\n");
	for (int i = 0; i < SHARDFS_NR_OPS; i++)
		buf_printf(b, "    \"%s\": {\"count\": %llu, \"mean_us\": %.2f}%s\n",
			   op_names[i], counter(&src->counters->ops[i].count),
			   op_mean_us(&src->counters->ops[i]),
			   i + 1 < SHARDFS_NR_OPS ? "," : "");
	buf_printf(b, "  },\n");
}

/* The remote counters (remote.h), when the set has remote shards. */
static void render_remote(const struct control_source *src, struct control_buf *b,
			  bool metrics)
{
	char text[CONTROL_REMOTE_MAX];

	if (remote_stats_format(src->set->remote, text, sizeof(text), metrics))
		buf_printf(b, "%s", text);
}

/* The share of the set's pieces that the pass at random took so far. */
static double push_density(const struct pushahead_counters *p)
{
	unsigned long long set = counter(&p->set_bytes);

	return set ? (double)counter(&p->pass_bytes) / set : 0.0;
}

static void render_stats_push(const struct control_source *src,
			      struct control_buf *b)
{
	const struct pushahead_counters *p = src->push;

	buf_printf(b, "  \"pushahead\": {\"bound\": %llu, \"bytes\": %llu, "
		   "\"files\": %llu, \"passed\": %llu, \"unconfirmed\": %llu, "
		   "\"read_anyway\": %llu, \"refused\": %llu, \"unknown\": %llu, "
		   "\"probes\": %llu, \"listings\": %llu, \"listed\": %llu, \"bare\": %llu, "
		   "\"spans\": %llu, "
		   "\"ahead\": %llu, \"ahead_max\": %llu, "
		   "\"window_fetched\": %llu, \"span_fetched\": %llu, "
		   "\"passes\": %llu, \"pass_bytes\": %llu, \"density\": %.4f},\n",
		   (unsigned long long)src->opt->pushahead, counter(&p->bytes),
		   counter(&p->files), counter(&p->passed), counter(&p->unconfirmed),
		   counter(&p->read_anyway), counter(&p->refused),
		   counter(&p->unknown), counter(&p->probes), counter(&p->listings),
		   counter(&p->listed), counter(&p->bare),
		   counter(&p->spans), counter(&p->ahead), counter(&p->ahead_max),
		   counter(&p->window_fetched), counter(&p->span_fetched),
		   counter(&p->passes), counter(&p->pass_bytes), push_density(p));
}

/*
 * Bytes served against bytes read from the shards, per access class:
 * random (READs that jumped, and the pieces and spans pushed for them),
 * sequential (the rest: forward READs, and the windows pushed ahead of
 * them).  Pushed bytes are read from the shards but served only if the
 * reader takes them from the page cache, which the daemon does not see.
 */
static void render_stats_access(const struct control_source *src,
				struct control_buf *b)
{
	const struct shardfs_counters *k = src->counters;
	unsigned long long rand_read = counter(&k->random_read_bytes);
	unsigned long long rand_store = rand_read + counter(&src->push->span_fetched);
	unsigned long long all = counter(&k->backing_bytes);

	buf_printf(b, "  \"access\": {\"sequential\": {\"read_bytes\": %llu, "
		   "\"backing_bytes\": %llu}, \"random\": {\"read_bytes\": %llu, "
		   "\"backing_bytes\": %llu}},\n",
		   counter(&k->read_bytes) - rand_read,
		   all > rand_store ? all - rand_store : 0, rand_read, rand_store);
}

static void render_stats(const struct control_source *src, struct control_buf *b)
{
	const struct shard_index_counts *c = &src->idx->counts;
	const struct shardfs_counters *k = src->counters;
	unsigned long long br = counter(&k->backing_reads);

	/* the pid: what serves the mount, for tools that measure its CPU */
	buf_printf(b, "{\n  \"pid\": %d,\n", (int)getpid());
	buf_printf(b, "  \"shards\": %u,\n  \"bad_shards\": %u,\n"
		   "  \"files\": %llu,\n  \"dirs\": %llu,\n  \"symlinks\": %llu,\n"
		   "  \"hardlinks\": %llu,\n  \"bytes\": %llu,\n"
		   "  \"duplicates\": %llu,\n  \"skipped\": %llu,\n"
		   "  \"special\": %llu,\n", src->set->nr, c->bad_shards,
		   (unsigned long long)c->files, (unsigned long long)c->dirs,
		   (unsigned long long)c->symlinks, (unsigned long long)c->hardlinks,
		   (unsigned long long)c->bytes, (unsigned long long)c->duplicates,
		   (unsigned long long)c->skipped, (unsigned long long)c->special);
	buf_printf(b, "  \"index_entries\": %u,\n  \"index_build_seconds\": %.3f,\n"
		   "  \"index_bytes_per_entry\": %.1f,\n", shard_index_nr(src->idx),
		   *src->build_seconds, shard_index_bytes_per_entry(src->idx));
	render_stats_ops(src, b);
	render_remote(src, b, false);
	buf_printf(b, "  \"read_bytes\": %llu,\n  \"backing_reads\": %llu,\n"
		   "  \"backing_spliced\": %llu,\n  \"backing_read_bytes\": %llu,\n"
		   "  \"backing_read_mean_bytes\": %.0f,\n  \"errors\": %llu,\n"
		   "  \"logged_errors\": %llu,\n"
		   "  \"readahead\": {\"size\": %llu, \"hits\": %llu, \"misses\": %llu},\n",
		   counter(&k->read_bytes), br, counter(&k->backing_spliced),
		   counter(&k->backing_bytes),
		   br ? (double)counter(&k->backing_bytes) / br : 0.0,
		   counter(&k->errors), log_errors(), (unsigned long long)src->opt->readahead,
		   counter(&k->readahead_hits), counter(&k->readahead_misses));
	render_stats_push(src, b);
	render_stats_access(src, b);
	buf_printf(b, "  \"io_uring_requests\": %llu\n}\n", counter(&k->uring_requests));
}

static void render_shards(const struct control_source *src, struct control_buf *b)
{
	for (uint32_t i = 0; i < src->set->nr; i++) {
		const struct shard *s = &src->set->shards[i];
		unsigned long long lo = counter(&src->streams[i].served_lo);
		unsigned long long hi = counter(&src->streams[i].served_hi);

		buf_printf(b, "%u\t%s\t%llu\t%llu\t", i, s->path,
			   (unsigned long long)s->size,
			   (unsigned long long)s->members);
		if (lo == ~0ull)
			buf_printf(b, "-\t-\n");
		else
			buf_printf(b, "%llu\t%llu\n", lo, hi - 1);
	}
}

static void metric(struct control_buf *b, const char *name, const char *type,
		   const char *help, double value)
{
	buf_printf(b, "# HELP shardfs_%s %s\n# TYPE shardfs_%s %s\nshardfs_%s %.17g\n",
		   name, help, name, type, name, value);
}

static void render_metrics_push(const struct control_source *src,
				struct control_buf *b)
{
	const struct pushahead_counters *p = src->push;
	const struct {
		const char *name, *type, *help;	/* as metric() takes them */
		const atomic_ullong *value;	/* the counter */
	} m[] = {
		{ "pushahead_bytes_total", "counter",
		  "Bytes stored into the kernel's page cache ahead of readers.", &p->bytes },
		{ "pushahead_files_total", "counter", "Files stored ahead of readers.",
		  &p->files },
		{ "pushahead_passed_total", "counter",
		  "Stored files their reader went past (read from the page cache).",
		  &p->passed },
		{ "pushahead_unconfirmed_total", "counter",
		  "Stored files past their reader's last READ when its window ended: "
		  "read from the cache, or wasted.", &p->unconfirmed },
		{ "pushahead_read_anyway_total", "counter",
		  "Stored files the kernel sent a READ for all the same.", &p->read_anyway },
		{ "pushahead_refused_total", "counter", "Stores the kernel refused.",
		  &p->refused },
		{ "pushahead_probes_total", "counter",
		  "Times the kernel was asked whether it holds a file's inode.",
		  &p->probes },
		{ "pushahead_listings_total", "counter",
		  "Directories listed through the mount so that the kernel holds "
		  "the files to push.", &p->listings },
		{ "pushahead_listed_total", "counter", "Entries those listings read.",
		  &p->listed },
		{ "pushahead_bare_listings_total", "counter",
		  "Directories of more than 4,096 entries a reader listed without "
		  "their inodes, to be listed with them at its second lookup in them.",
		  &p->bare },
		{ "pushahead_spans_total", "counter",
		  "Spans (decoded, or 4 MiB of a plain shard) whose other files "
		  "were pushed after a random READ in them.", &p->spans },
		{ "pushahead_ahead_bytes", "gauge", "Bytes the push-ahead windows hold now.",
		  &p->ahead },
		{ "pushahead_window_fetched_bytes_total", "counter",
		  "Bytes read from the shards to push ahead of forward readers.",
		  &p->window_fetched },
		{ "pushahead_span_fetched_bytes_total", "counter",
		  "Bytes read from the shards to push pieces and spans for READs "
		  "at random.", &p->span_fetched },
		{ "pushahead_passes_total", "counter",
		  "Passes at random begun again: READs at random of files this "
		  "pass had read (a new epoch, or another reader).", &p->passes },
		{ "random_read_bytes_total", "counter",
		  "Bytes returned by READs that jumped (read from the shards as much).",
		  &src->counters->random_read_bytes },
	};

	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
		metric(b, m[i].name, m[i].type, m[i].help, counter(m[i].value));
	metric(b, "pushahead_density", "gauge",
	       "Share of the set's bytes the current pass at random took "
	       "(READ, or pushed with pieces): the reader's density, once its pass ends.",
	       push_density(p));
}

static void render_metrics(const struct control_source *src, struct control_buf *b)
{
	const struct shardfs_counters *k = src->counters;
	const struct shard_index_counts *c = &src->idx->counts;

	metric(b, "reads_total", "counter", "Read requests answered.",
	       counter(&k->ops[SHARDFS_OP_READ].count));
	metric(b, "read_bytes_total", "counter", "Bytes returned by reads.",
	       counter(&k->read_bytes));
	metric(b, "backing_reads_total", "counter", "Reads issued on shard files.",
	       counter(&k->backing_reads));
	metric(b, "backing_read_bytes_total", "counter",
	       "Bytes read from the shards, for READs and for push-ahead.",
	       counter(&k->backing_bytes));
	metric(b, "read_errors_total", "counter", "Requests answered with EIO.",
	       counter(&k->errors));
	metric(b, "lookups_total", "counter", "Lookup requests answered.",
	       counter(&k->ops[SHARDFS_OP_LOOKUP].count));
	metric(b, "readahead_hits_total", "counter", "Reads inside a prefetched range.",
	       counter(&k->readahead_hits));
	metric(b, "readahead_misses_total", "counter", "Forward reads past the prefetched range.",
	       counter(&k->readahead_misses));
	render_metrics_push(src, b);
	metric(b, "io_uring_requests_total", "counter",
	       "Requests that came over io_uring rather than /dev/fuse.",
	       counter(&k->uring_requests));
	metric(b, "files", "gauge", "Regular files served.", c->files);
	metric(b, "dirs", "gauge", "Directories served.", c->dirs);
	metric(b, "bytes", "gauge", "Bytes in regular files.", c->bytes);
	metric(b, "shards", "gauge", "Shards mounted.", src->set->nr - c->bad_shards);
	metric(b, "index_build_seconds", "gauge", "Seconds the index took to build.",
	       *src->build_seconds);
	render_remote(src, b, true);
}

static const struct {
	const char *name;		/* file name in /.shardfs */
	control_render_fn render;	/* its content; NULL for members */
} control_files[CONTROL_NR_NODES] = {
	[CONTROL_STATS] = { "stats", render_stats },
	[CONTROL_SHARDS] = { "shards", render_shards },
	[CONTROL_MEMBERS] = { "members", NULL },
	[CONTROL_METRICS] = { "metrics", render_metrics },
};

void control_init(struct control_state *st, const struct control_source *src)
{
	*st = (struct control_state){ .src = *src };
	pthread_mutex_init(&st->lock, NULL);
	clock_gettime(CLOCK_REALTIME, &st->mounted);
}

void control_release(struct control_state *st)
{
	for (int n = 0; n < CONTROL_NR_NODES; n++)
		free(st->snap[n].data);
	free(st->members_at);
	pthread_mutex_destroy(&st->lock);
}

/* Now, or just after @prev: every snapshot must change the mtime. */
static struct timespec next_mtime(struct timespec prev)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	if (now.tv_sec > prev.tv_sec ||
	    (now.tv_sec == prev.tv_sec && now.tv_nsec > prev.tv_nsec))
		return now;
	if (++prev.tv_nsec == 1000000000) {
		prev.tv_sec++;
		prev.tv_nsec = 0;
	}
	return prev;
}

/* Render a new snapshot of changing file @node.  0 or -ENOMEM. */
static int snapshot_take(struct control_state *st, enum control_node node)
{
	struct control_buf b = { 0 };
	struct control_snapshot *snap = &st->snap[node];
	char *old;

	control_files[node].render(&st->src, &b);
	if (b.failed) {
		free(b.data);
		return -ENOMEM;
	}
	pthread_mutex_lock(&st->lock);
	old = snap->data;
	snap->data = b.data;
	snap->len = b.len;
	snap->mtime = next_mtime(snap->mtime);
	pthread_mutex_unlock(&st->lock);
	free(old);
	return 0;
}

/* Escape tab, newline and backslash of @s into @out; returns the length. */
static size_t escape_path(const char *s, char *out)
{
	size_t n = 0;

	for (; *s; s++) {
		char c = *s == '\t' ? 't' : *s == '\n' ? 'n' : *s;

		if (c != *s || c == '\\')
			out[n++] = '\\';
		out[n++] = c;
	}
	return n;
}

size_t control_members_line(const struct shard_index *idx, uint32_t e,
			    char *line)
{
	char path[PATH_MAX];
	struct shard_inode in;
	size_t n;

	shard_index_entry(idx, e, &in);
	if (!S_ISREG(in.mode) || shard_index_entry_path(idx, e, path, sizeof(path)) < 0)
		return 0;
	n = escape_path(path, line);
	n += snprintf(line + n, CONTROL_MEMBERS_LINE_MAX - n, "\t%u\t%llu\t%llu\n",
		      in.shard,
		      (unsigned long long)shard_index_data_offset(idx, &in),
		      (unsigned long long)in.size);
	return n;
}

/* Checkpoints of a members file over @nr entries (nr >= 1: the root). */
static size_t members_checkpoints(uint32_t nr)
{
	return ((size_t)nr + CONTROL_MEMBERS_STRIDE - 1) / CONTROL_MEMBERS_STRIDE;
}

/* Size members and record its checkpoints, once, having checked every
 * entry (index_guard.h).  0, -ENOMEM or -EIO. */
static int members_index(struct control_state *st)
{
	uint32_t nr = shard_index_nr(st->src.idx);
	char line[CONTROL_MEMBERS_LINE_MAX];
	uint64_t pos = 0, *at;
	int rc = 0;

	if (atomic_load_explicit(&st->members_ready, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&st->lock);
	if (st->members_ready)
		goto out_unlock;
	rc = shard_index_check_all(st->src.idx);
	if (rc)
		goto out_unlock;
	at = malloc(members_checkpoints(nr) * sizeof(*at));
	rc = -ENOMEM;
	if (!at)
		goto out_unlock;
	for (uint32_t e = 0; e < nr; e++) {
		if (e % CONTROL_MEMBERS_STRIDE == 0)
			at[e / CONTROL_MEMBERS_STRIDE] = pos;
		pos += control_members_line(st->src.idx, e, line);
	}
	st->members_at = at;
	st->members_size = pos;
	atomic_store_explicit(&st->members_ready, true, memory_order_release);
	rc = 0;
out_unlock:
	pthread_mutex_unlock(&st->lock);
	return rc;
}

/* The last checkpoint at or before offset @off (binary search). */
static uint32_t members_checkpoint(const struct control_state *st, uint32_t nr,
				   uint64_t off)
{
	uint32_t lo = 0, hi = (uint32_t)members_checkpoints(nr) - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;

		if (st->members_at[mid] <= off)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

static ssize_t members_read(struct control_state *st, char *buf, size_t size,
			    uint64_t off)
{
	uint32_t nr = shard_index_nr(st->src.idx), e;
	char line[CONTROL_MEMBERS_LINE_MAX];
	size_t done = 0;
	uint64_t pos;
	int rc = members_index(st);

	if (rc)
		return rc;
	if (off >= st->members_size)
		return 0;
	e = members_checkpoint(st, nr, off) * CONTROL_MEMBERS_STRIDE;
	for (pos = st->members_at[e / CONTROL_MEMBERS_STRIDE];
	     e < nr && done < size; e++) {
		size_t len = control_members_line(st->src.idx, e, line);
		uint64_t want = off + done;

		if (pos + len > want) {
			size_t from = want - pos, n = len - from;

			n = n < size - done ? n : size - done;
			memcpy(buf + done, line + from, n);
			done += n;
		}
		pos += len;
	}
	return (ssize_t)done;
}

uint64_t control_ino(const struct control_state *st, enum control_node node)
{
	return (uint64_t)shard_index_nr(st->src.idx) + 1 + node;
}

int control_node_of(const struct control_state *st, uint64_t ino)
{
	uint64_t first = control_ino(st, CONTROL_DIR);

	return ino >= first && ino < first + CONTROL_NR_NODES ? (int)(ino - first) : -1;
}

bool control_changes(int node)
{
	return node > CONTROL_DIR && control_files[node].render;
}

int control_lookup(struct control_state *st, const char *name, uint64_t *ino)
{
	for (int n = CONTROL_DIR + 1; n < CONTROL_NR_NODES; n++) {
		if (strcmp(name, control_files[n].name))
			continue;
		*ino = control_ino(st, n);
		return control_files[n].render ? snapshot_take(st, n) : 0;
	}
	return -ENOENT;
}

int control_readdir_entry(const struct control_state *st, uint64_t pos,
			  const char **name, uint64_t *ino)
{
	if (pos >= CONTROL_NR_NODES - 1)
		return -ENOENT;
	*name = control_files[pos + 1].name;
	*ino = control_ino(st, pos + 1);
	return 0;
}

/* Size and mtime of changing file @node, taking a first snapshot if needed. */
static int snapshot_attrs(struct control_state *cs, enum control_node node,
			  struct stat *st)
{
	bool none;
	int rc;

	pthread_mutex_lock(&cs->lock);
	none = !cs->snap[node].data;
	pthread_mutex_unlock(&cs->lock);
	if (none && (rc = snapshot_take(cs, node)))
		return rc;
	pthread_mutex_lock(&cs->lock);
	st->st_size = (off_t)cs->snap[node].len;
	st->st_mtim = cs->snap[node].mtime;
	pthread_mutex_unlock(&cs->lock);
	return 0;
}

int control_getattr(struct control_state *cs, enum control_node node,
		    struct stat *st)
{
	const struct shardfs_options *opt = cs->src.opt;
	int rc = 0;

	memset(st, 0, sizeof(*st));
	st->st_ino = control_ino(cs, node);
	st->st_mode = node == CONTROL_DIR ? S_IFDIR | 0555 : S_IFREG | 0444;
	/* members and shards name what directory modes may hide (names in
	 * 0700 directories, the shards' paths): the mount's owner only */
	if (node == CONTROL_MEMBERS || node == CONTROL_SHARDS)
		st->st_mode = S_IFREG | 0400;
	st->st_uid = opt->set_uid ? opt->uid : geteuid();
	st->st_gid = opt->set_gid ? opt->gid : getegid();
	st->st_nlink = node == CONTROL_DIR ? 2 : 1;
	st->st_blksize = SHARDFS_BLKSIZE;
	st->st_mtim = cs->mounted;
	if (control_files[node].render)
		rc = snapshot_attrs(cs, node, st);
	else if (node == CONTROL_MEMBERS && !(rc = members_index(cs)))
		st->st_size = (off_t)cs->members_size;
	st->st_blocks = (st->st_size + 511) / 512;
	st->st_atim = st->st_ctim = st->st_mtim;
	return rc;
}

ssize_t control_read(struct control_state *st, enum control_node node,
		     char *buf, size_t size, uint64_t off)
{
	const struct control_snapshot *snap = &st->snap[node];
	size_t n = 0;

	if (!control_files[node].render)
		return members_read(st, buf, size, off);
	pthread_mutex_lock(&st->lock);
	if (off < snap->len) {
		n = snap->len - off < size ? snap->len - off : size;
		memcpy(buf, snap->data + off, n);
	}
	pthread_mutex_unlock(&st->lock);
	return (ssize_t)n;
}
