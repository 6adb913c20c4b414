/*
 * control.c - content of the files in /.shardfs/.
 *
 * Each file has a renderer that appends the next part of its content to a
 * buffer, starting at a cursor it owns (for `members`, an entry number).
 * A stream keeps one rendered chunk; a reader moving forward gets the next
 * chunk rendered, a reader seeking backwards restarts from the top.  The
 * kernel reads these files with direct I/O (their size is unknown until
 * rendered), so reads arrive in order and each chunk is rendered once.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardfs/control.h"
#include "shardfs/fs.h"

/* A renderer stops appending once the chunk holds this many bytes. */
#define CONTROL_CHUNK (256u * 1024)

struct control_buf {
	char *data;		/* rendered bytes */
	size_t len;		/* bytes used */
	size_t cap;		/* bytes allocated */
	bool failed;		/* an allocation failed: content is cut */
};

/* Appends content from *cursor on; returns true once everything is out. */
typedef bool (*control_render_fn)(const struct shardfs *fs,
				  struct control_buf *b, uint64_t *cursor);

struct control_stream {
	control_render_fn render;	/* the file's renderer */
	uint64_t cursor;		/* renderer position */
	bool done;			/* the renderer has finished */
	uint64_t chunk_off;		/* file offset of chunk.data[0] */
	struct control_buf chunk;	/* the current rendered chunk */
};

static void buf_printf(struct control_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void buf_printf(struct control_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!b->cap && !b->failed) {
		b->data = malloc(4096);
		b->cap = b->data ? 4096 : 0;
		b->failed = !b->data;
	}
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0 || b->failed)
			return;
		if ((size_t)n < b->cap - b->len)
			break;
		size_t cap = (b->cap ? b->cap * 2 : 4096) + n;
		char *p = realloc(b->data, cap);

		if (!p) {
			b->failed = true;
			return;
		}
		b->data = p;
		b->cap = cap;
	}
	b->len += n;
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
	"statfs",
};

static void render_stats_ops(const struct shardfs *fs, struct control_buf *b)
{
	buf_printf(b, "  \"ops\": {\n");
	for (int i = 0; i < SHARDFS_NR_OPS; i++)
		buf_printf(b, "    \"%s\": {\"count\": %llu, \"mean_us\": %.2f}%s\n",
			   op_names[i], counter(&fs->counters.ops[i].count),
			   op_mean_us(&fs->counters.ops[i]),
			   i + 1 < SHARDFS_NR_OPS ? "," : "");
	buf_printf(b, "  },\n");
}

static bool render_stats(const struct shardfs *fs, struct control_buf *b,
			 uint64_t *cursor)
{
	const struct shard_index_counts *c = &fs->idx.counts;
	const struct shardfs_counters *k = &fs->counters;
	unsigned long long br = counter(&k->backing_reads);

	buf_printf(b, "{\n  \"shards\": %u,\n  \"bad_shards\": %u,\n"
		   "  \"files\": %llu,\n  \"dirs\": %llu,\n  \"symlinks\": %llu,\n"
		   "  \"hardlinks\": %llu,\n  \"bytes\": %llu,\n"
		   "  \"duplicates\": %llu,\n  \"skipped\": %llu,\n"
		   "  \"special\": %llu,\n", fs->set.nr, c->bad_shards,
		   (unsigned long long)c->files, (unsigned long long)c->dirs,
		   (unsigned long long)c->symlinks, (unsigned long long)c->hardlinks,
		   (unsigned long long)c->bytes, (unsigned long long)c->duplicates,
		   (unsigned long long)c->skipped, (unsigned long long)c->special);
	buf_printf(b, "  \"index_entries\": %u,\n  \"index_build_seconds\": %.3f,\n"
		   "  \"index_bytes_per_entry\": %.1f,\n", fs->idx.nr_inodes,
		   fs->build_seconds, shard_index_bytes_per_entry(&fs->idx));
	render_stats_ops(fs, b);
	buf_printf(b, "  \"read_bytes\": %llu,\n  \"backing_reads\": %llu,\n"
		   "  \"backing_read_bytes\": %llu,\n"
		   "  \"backing_read_mean_bytes\": %.0f,\n  \"errors\": %llu,\n"
		   "  \"readahead\": {\"size\": %llu, \"hits\": %llu, \"misses\": %llu}\n}\n",
		   counter(&k->read_bytes), br, counter(&k->backing_bytes),
		   br ? (double)counter(&k->backing_bytes) / br : 0.0,
		   counter(&k->errors), (unsigned long long)fs->opt.readahead,
		   counter(&k->readahead_hits), counter(&k->readahead_misses));
	return true;
}

static bool render_shards(const struct shardfs *fs, struct control_buf *b,
			  uint64_t *cursor)
{
	for (; *cursor < fs->set.nr && b->len < CONTROL_CHUNK; (*cursor)++) {
		const struct shard *s = &fs->set.shards[*cursor];
		unsigned long long lo = counter(&s->served_lo);
		unsigned long long hi = counter(&s->served_hi);

		buf_printf(b, "%llu\t%s\t%llu\t%llu\t", (unsigned long long)*cursor,
			   s->path, (unsigned long long)s->size,
			   (unsigned long long)s->members);
		if (lo == ~0ull)
			buf_printf(b, "-\t-\n");
		else
			buf_printf(b, "%llu\t%llu\n", lo, hi - 1);
	}
	return *cursor >= fs->set.nr;
}

/* Append @s with tab, newline and backslash escaped. */
static void buf_escaped(struct control_buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\t')
			buf_printf(b, "\\t");
		else if (*s == '\n')
			buf_printf(b, "\\n");
		else if (*s == '\\')
			buf_printf(b, "\\\\");
		else
			buf_printf(b, "%c", *s);
	}
}

static bool render_members(const struct shardfs *fs, struct control_buf *b,
			   uint64_t *cursor)
{
	char path[PATH_MAX];

	for (; *cursor < fs->idx.nr_inodes && b->len < CONTROL_CHUNK; (*cursor)++) {
		const struct shard_inode *in = &fs->idx.inodes[*cursor];

		if (!S_ISREG(in->mode) ||
		    shardfs_entry_path(fs, (uint32_t)*cursor, path, sizeof(path)) < 0)
			continue;
		buf_escaped(b, path);
		buf_printf(b, "\t%u\t%llu\t%llu\n", in->shard,
			   (unsigned long long)shardfs_data_offset(&fs->idx, in),
			   (unsigned long long)in->size);
	}
	return *cursor >= fs->idx.nr_inodes;
}

static void metric(struct control_buf *b, const char *name, const char *type,
		   const char *help, double value)
{
	buf_printf(b, "# HELP shardfs_%s %s\n# TYPE shardfs_%s %s\nshardfs_%s %.17g\n",
		   name, help, name, type, name, value);
}

static bool render_metrics(const struct shardfs *fs, struct control_buf *b,
			   uint64_t *cursor)
{
	const struct shardfs_counters *k = &fs->counters;
	const struct shard_index_counts *c = &fs->idx.counts;

	metric(b, "reads_total", "counter", "Read requests answered.",
	       counter(&k->ops[SHARDFS_OP_READ].count));
	metric(b, "read_bytes_total", "counter", "Bytes returned by reads.",
	       counter(&k->read_bytes));
	metric(b, "backing_reads_total", "counter", "Reads issued on shard files.",
	       counter(&k->backing_reads));
	metric(b, "read_errors_total", "counter", "Requests answered with EIO.",
	       counter(&k->errors));
	metric(b, "lookups_total", "counter", "Lookup requests answered.",
	       counter(&k->ops[SHARDFS_OP_LOOKUP].count));
	metric(b, "readahead_hits_total", "counter", "Reads inside a prefetched range.",
	       counter(&k->readahead_hits));
	metric(b, "readahead_misses_total", "counter", "Forward reads past the prefetched range.",
	       counter(&k->readahead_misses));
	metric(b, "files", "gauge", "Regular files served.", c->files);
	metric(b, "dirs", "gauge", "Directories served.", c->dirs);
	metric(b, "bytes", "gauge", "Bytes in regular files.", c->bytes);
	metric(b, "shards", "gauge", "Shards mounted.", fs->set.nr - c->bad_shards);
	metric(b, "index_build_seconds", "gauge", "Seconds the index took to build.",
	       fs->build_seconds);
	return true;
}

static const struct {
	const char *name;		/* file name in /.shardfs */
	control_render_fn render;	/* its content */
} control_files[CONTROL_NR_NODES] = {
	[CONTROL_STATS] = { "stats", render_stats },
	[CONTROL_SHARDS] = { "shards", render_shards },
	[CONTROL_MEMBERS] = { "members", render_members },
	[CONTROL_METRICS] = { "metrics", render_metrics },
};

uint64_t control_ino(const struct shardfs *fs, enum control_node node)
{
	return (uint64_t)fs->idx.nr_inodes + 1 + node;
}

int control_node_of(const struct shardfs *fs, uint64_t ino)
{
	uint64_t first = control_ino(fs, CONTROL_DIR);

	return ino >= first && ino < first + CONTROL_NR_NODES ? (int)(ino - first) : -1;
}

int control_lookup(const struct shardfs *fs, const char *name, uint64_t *ino)
{
	for (int n = CONTROL_DIR + 1; n < CONTROL_NR_NODES; n++) {
		if (!strcmp(name, control_files[n].name)) {
			*ino = control_ino(fs, n);
			return 0;
		}
	}
	return -ENOENT;
}

int control_readdir_entry(const struct shardfs *fs, uint64_t pos,
			  const char **name, uint64_t *ino)
{
	if (pos >= CONTROL_NR_NODES - 1)
		return -ENOENT;
	*name = control_files[pos + 1].name;
	*ino = control_ino(fs, pos + 1);
	return 0;
}

void control_getattr(const struct shardfs *fs, enum control_node node,
		     struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = control_ino(fs, node);
	st->st_mode = node == CONTROL_DIR ? S_IFDIR | 0555 : S_IFREG | 0444;
	st->st_nlink = node == CONTROL_DIR ? 2 : 1;
	st->st_blksize = CONTROL_CHUNK;
	clock_gettime(CLOCK_REALTIME, &st->st_mtim);
	st->st_atim = st->st_ctim = st->st_mtim;
}

int control_open(struct shardfs *fs, enum control_node node,
		 struct control_stream **out)
{
	struct control_stream *cs = calloc(1, sizeof(*cs));

	if (!cs)
		return -ENOMEM;
	cs->render = control_files[node].render;
	*out = cs;
	return 0;
}

/* Render the chunk after the current one (or the first, after a rewind). */
static int next_chunk(const struct shardfs *fs, struct control_stream *cs)
{
	cs->chunk_off += cs->chunk.len;
	cs->chunk.len = 0;
	cs->done = cs->render(fs, &cs->chunk, &cs->cursor);
	return cs->chunk.failed ? -ENOMEM : 0;
}

ssize_t control_read(struct shardfs *fs, struct control_stream *cs, char *buf,
		     size_t size, uint64_t off)
{
	size_t n;
	int rc;

	if (off < cs->chunk_off) {
		cs->chunk_off = cs->cursor = 0;
		cs->chunk.len = 0;
		cs->done = false;
	}
	while (off >= cs->chunk_off + cs->chunk.len) {
		if (cs->done)
			return 0;
		rc = next_chunk(fs, cs);
		if (rc)
			return rc;
	}
	n = cs->chunk_off + cs->chunk.len - off;
	n = n < size ? n : size;
	memcpy(buf, cs->chunk.data + (off - cs->chunk_off), n);
	return (ssize_t)n;
}

void control_close(struct control_stream *cs)
{
	if (cs)
		free(cs->chunk.data);
	free(cs);
}
