/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_file.c - write, map and verify persistent index files.
 *
 * A writer takes the entries in entry order as the build lays them out
 * and packs them at once (index_compact.h: a fifth to a quarter of the
 * bytes of the 64-byte struct shard_inode); the packed sections go last,
 * as their length is known only then.  Staged wide entries were 1.6 GB
 * at 20 M members, written and read back (docs/benchmarks-scale.md).
 *
 * Loading never trusts the file: besides the checksums (which catch
 * accidental damage), every block of packed entries is checked as bytes
 * and every field that a lookup, readdir or read will use is
 * bounds-checked once at load time (which makes a hand-crafted file
 * harmless), unless a record says that this very file, unchanged since,
 * passed those checks (index_verified.h: a remount of 20 M members then
 * takes 0.07 s instead of 0.9-1.1 s).  Then the sections of a record or
 * more per member are checked span by span as requests first touch them,
 * against the sums of the SUMS section (index_guard.h), which the writer
 * computes from what it wrote, last.  The checks and the mount read the
 * file through index_map.h, which serves it from its own pages under a
 * read lease and switches to a private copy before anyone can truncate or
 * rewrite it: what was checked is what is served, and a file changed
 * under a mount neither kills the daemon with SIGBUS nor changes its
 * tree.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "shardfs/index_file.h"
#include "shardfs/index_guard.h"
#include "shardfs/index_map.h"
#include "shardfs/index_verified.h"
#include "shardfs/log.h"
#include "shardfs/source.h"
#include "shardfs/util.h"

/* The totals the file stores: one list for both directions. */
#define INDEX_COUNT_FIELDS(X) X(files) X(dirs) X(symlinks) X(hardlinks) \
	X(bytes) X(members) X(duplicates) X(skipped) X(special) X(unlabeled) \
	X(bad_shards)
#define COPY_FIELD(name) to->name = from->name;

static struct index_file_counts counts_to_file(const struct shard_index_counts *from)
{
	struct index_file_counts f = { 0 }, *to = &f;

	INDEX_COUNT_FIELDS(COPY_FIELD)
	return f;
}

static void counts_from_file(struct shard_index_counts *to,
			     const struct index_file_counts *from)
{
	*to = (struct shard_index_counts){ 0 };
	INDEX_COUNT_FIELDS(COPY_FIELD)
}

int index_file_fingerprint(struct shard_source *src, uint64_t *fp)
{
	size_t want = src->size < INDEX_FINGERPRINT_BYTES ? src->size
							  : INDEX_FINGERPRINT_BYTES;
	char *buf = malloc(want ? want : 1);
	int rc;

	if (!buf)
		return -ENOMEM;
	shard_source_advise(src, 0, want, SHARD_SOURCE_SCAN);
	rc = shard_source_read_full(src, buf, want, 0);
	shard_source_advise(src, 0, want, SHARD_SOURCE_SCANNED);
	if (!rc)
		*fp = XXH3_64bits(buf, want);
	free(buf);
	return rc;
}

/* Directory of @path (with the trailing '/'), as a length into @path. */
static size_t dir_len(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? (size_t)(slash - path) + 1 : 0;
}

/* Shard paths below the index's directory are stored relative to it. */
static const char *shard_name(const char *index_path, const char *shard,
			      uint32_t *flags)
{
	size_t d = dir_len(index_path);

	if (d && !strncmp(shard, index_path, d)) {
		*flags = 0;
		return shard + d;
	}
	*flags = INDEX_SHARD_ABSOLUTE;
	return shard;
}

/* The SHARDS and SHARD_NAMES sections for @set; the shards'
 * fingerprints are read unless @scratch (a file never kept). */
static int shard_table(const char *path, const struct shard_set *set, bool scratch,
		       struct index_file_shard **recs, char **names,
		       uint64_t *names_len)
{
	uint64_t total = 0;

	*recs = calloc(set->nr ? set->nr : 1, sizeof(**recs));
	for (uint32_t i = 0; i < set->nr; i++)
		total += strlen(set->shards[i].path);
	*names = malloc(total + 1);
	if (!*recs || !*names)
		return -ENOMEM;
	*names_len = 0;
	for (uint32_t i = 0; i < set->nr; i++) {
		const struct shard *s = &set->shards[i];
		struct index_file_shard *r = &(*recs)[i];
		const char *name = shard_name(path, s->path, &r->flags);

		r->size = s->size;
		r->mtime_sec = s->mtime.tv_sec;
		r->mtime_nsec = (uint32_t)s->mtime.tv_nsec;
		r->ctime_sec = s->ctime.tv_sec;
		r->ctime_nsec = (uint32_t)s->ctime.tv_nsec;
		r->name = *names_len;
		r->name_len = (uint32_t)strlen(name);
		r->members = s->members;
		r->digest = s->digest;
		r->fingerprint = s->fingerprint;
		/* shards an index already covered are not read again, and a
		 * bad one that could not be opened cannot be (its file is
		 * never kept: a set with bad shards is not saved) */
		if (!scratch && !s->fingerprinted && s->src &&
		    index_file_fingerprint(s->src, &r->fingerprint))
			return -EIO;
		memcpy(*names + *names_len, name, r->name_len);
		*names_len += r->name_len;
	}
	return 0;
}


static const struct seek_table *shard_seek(const struct shard *s)
{
	return s->src && s->src->ops->seek_get ? s->src->ops->seek_get(s->src) : NULL;
}

static int seek_sections_fill(const struct shard_set *set, struct seek_sections *ss)
{
	uint64_t np = 0, nw = 0;

	for (uint32_t i = 0; i < set->nr; i++) {
		const struct seek_table *t = shard_seek(&set->shards[i]);

		np += t ? t->nr : 0;
		nw += t ? t->windows_len : 0;
	}
	ss->recs = calloc(set->nr ? set->nr : 1, sizeof(*ss->recs));
	ss->points = malloc(np ? np * sizeof(*ss->points) : 1);
	ss->windows = malloc(nw ? nw : 1);
	if (!ss->recs || !ss->points || !ss->windows)
		return -ENOMEM;
	for (uint32_t i = 0; i < set->nr; i++) {
		const struct seek_table *t = shard_seek(&set->shards[i]);

		if (!t)
			continue;
		ss->recs[i] = (struct index_file_seek){
			.first = ss->nr_points, .nr = t->nr,
			.windows = ss->windows_len, .windows_len = t->windows_len,
			.stored_size = t->stored_size };
		snprintf(ss->recs[i].encoding, sizeof(ss->recs[i].encoding), "%s",
			 set->shards[i].src->encoding);
		memcpy(ss->points + ss->nr_points, t->points, t->nr * sizeof(*t->points));
		memcpy(ss->windows + ss->windows_len, t->windows, t->windows_len);
		ss->nr_points += t->nr;
		ss->windows_len += t->windows_len;
	}
	return 0;
}

static void seek_sections_free(struct seek_sections *ss)
{
	free(ss->recs);
	free(ss->points);
	free(ss->windows);
}

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= n;
		off += n;
	}
	return 0;
}

/*
 * The mode of the index of @set: it holds the shards' member names, so
 * no one may read it who cannot read every shard (0644 at most, 0600
 * when a shard's readers are not known: a remote one).
 */
static mode_t index_mode(const struct shard_set *set)
{
	mode_t mode = 0644;

	for (uint32_t i = 0; i < set->nr; i++) {
		struct stat st;

		if (shard_source_is_remote(set->shards[i].path) ||
		    stat(set->shards[i].path, &st))
			return 0600;
		mode &= (st.st_mode & 0044) | 0600;
	}
	return mode;
}

/* The offset after @off rounded up to a section boundary. */
static uint64_t section_align(uint64_t off)
{
	return (off + INDEX_SECTION_ALIGN - 1) & ~(uint64_t)(INDEX_SECTION_ALIGN - 1);
}

int index_file_writer_open(struct index_file_writer *w, const char *path,
			   const struct shard_set *set, char *msg, size_t msg_len)
{
	int removed;

	*w = (struct index_file_writer){ .fd = -1, .set = set };
	if (snprintf(w->tmp, sizeof(w->tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(w->tmp) ||
	    snprintf(w->path, sizeof(w->path), "%s", path) >= (int)sizeof(w->path)) {
		w->tmp[0] = '\0';
		return log_format(msg, msg_len, -ENAMETOOLONG, "%s: path too long", path);
	}
	removed = tmp_files_remove_stale(path);
	if (removed)
		log_info("%s.tmp.*: removed %d temporary index file(s) left by writers "
			 "that did not finish", path, removed);
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		w->tmp[0] = '\0';	/* nothing to remove */
		return log_format(msg, msg_len, -errno, "%s: cannot write the index: %s",
				  path, strerror(errno));
	}
	/* live while open, however long the scan leaves it untouched */
	flock(w->fd, LOCK_EX | LOCK_NB);
	return 0;
}

/* The section a part is written to. */
static enum index_section part_section(enum index_part p)
{
	static const enum index_section of[INDEX_NR_PARTS] = {
		[INDEX_PART_SPARSE] = INDEX_SEC_SPARSE,
		[INDEX_PART_EXTENTS] = INDEX_SEC_EXTENTS,
		[INDEX_PART_HARDLINKS] = INDEX_SEC_HARDLINKS,
	};

	return of[p];
}

int index_file_writer_place(struct index_file_writer *w,
			    const uint64_t len[INDEX_NR_PARTS], bool in_memory)
{
	static const enum index_section fixed[] = {
		INDEX_SEC_SHARDS, INDEX_SEC_SHARD_NAMES, INDEX_SEC_SPARSE, INDEX_SEC_EXTENTS,
		INDEX_SEC_HARDLINKS, INDEX_SEC_SEEK_SHARDS, INDEX_SEC_SEEK_POINTS,
		INDEX_SEC_SEEK_WINDOWS };
	uint64_t off = section_align(sizeof(w->h)), own[INDEX_NR_SECTIONS] = { 0 };
	int rc = shard_table(w->path, w->set, w->scratch, &w->recs, &w->names,
			     &w->names_len);

	rc = rc ?: seek_sections_fill(w->set, &w->ss);
	if (rc)
		return rc;
	memcpy(w->part_len, len, sizeof(w->part_len));
	w->in_memory = in_memory;
	for (int p = 0; p < INDEX_NR_PARTS; p++)
		own[part_section(p)] = len[p];
	own[INDEX_SEC_SHARDS] = w->set->nr * sizeof(*w->recs);
	own[INDEX_SEC_SHARD_NAMES] = w->names_len;
	own[INDEX_SEC_SEEK_SHARDS] = w->set->nr * sizeof(*w->ss.recs);
	own[INDEX_SEC_SEEK_POINTS] = w->ss.nr_points * sizeof(*w->ss.points);
	own[INDEX_SEC_SEEK_WINDOWS] = w->ss.windows_len;
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++) {
		w->h.sections[fixed[i]] = (struct index_section_entry){ off, own[fixed[i]], 0 };
		off = section_align(off + own[fixed[i]]);
	}
	w->tail = off;
	for (int p = 0; in_memory && p < INDEX_NR_PARTS; p++)
		if (len[p] && !(w->image[p] = calloc_huge(len[p], 1)))
			return -ENOMEM;
	return 0;
}

int index_file_writer_put(struct index_file_writer *w, enum index_part p,
			  uint64_t at, const void *buf, size_t len)
{
	enum index_section s = part_section(p);

	assert(at <= w->part_len[p] && len <= w->part_len[p] - at);
	if (w->image[p]) {
		memcpy(w->image[p] + at, buf, len);
		return 0;
	}
	if (!at && len == w->h.sections[s].length) { /* whole: hashed here */
		w->h.sections[s].xxh3 = XXH3_64bits(buf, len);
		w->hashed[s] = true;
	}
	return write_all(w->fd, buf, len, w->h.sections[s].offset + at);
}

void index_file_writer_put_packed(struct index_file_writer *w,
				  const struct shard_index *idx)
{
	assert(!w->stream);
	w->packed = idx;
}

/* The xxh3 of section @s, read back from the file (written out of order). */
static int section_hash(struct index_file_writer *w, enum index_section s, char *buf)
{
	const struct index_section_entry *e = &w->h.sections[s];
	XXH3_state_t *st = XXH3_createState();
	uint64_t done = 0;
	int rc = st ? 0 : -ENOMEM;

	if (!rc)
		XXH3_64bits_reset(st);
	while (!rc && done < e->length) {
		size_t want = e->length - done < INDEX_WRITER_BUF ? e->length - done
								   : INDEX_WRITER_BUF;
		ssize_t n = pread(w->fd, buf, want, (off_t)(e->offset + done));

		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			XXH3_64bits_update(st, buf, (size_t)n);
		done += n > 0 ? (uint64_t)n : 0;
	}
	if (!rc)
		w->h.sections[s].xxh3 = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return rc;
}

/* Section @s, already placed, whole from @buf. */
static int section_put(struct index_file_writer *w, enum index_section s, const void *buf)
{
	struct index_section_entry *e = &w->h.sections[s];

	e->xxh3 = XXH3_64bits(buf, e->length);
	w->hashed[s] = true;
	return write_all(w->fd, buf, e->length, e->offset);
}

/* Section @s, @len bytes from @buf, next at w->tail. */
static int tail_put(struct index_file_writer *w, enum index_section s, const void *buf,
		    uint64_t len)
{
	w->h.sections[s] = (struct index_section_entry){ w->tail, len, 0 };
	w->tail = section_align(w->tail + len);
	return section_put(w, s, buf);
}

/* Bytes on their way into the section that begins at the file's tail,
 * a buffer at a time, hashed as they go. */
struct tail_out {
	struct index_file_writer *w;	/* the file */
	XXH3_state_t *hash;		/* of the section so far */
	uint64_t start;			/* where the section begins */
	uint64_t written;		/* bytes of it in the file */
	size_t len;			/* bytes in buf */
	char buf[INDEX_WRITER_PACK_BUF]; /* bytes not yet written */
};

static int tail_out_init(struct tail_out *o, struct index_file_writer *w)
{
	*o = (struct tail_out){ .w = w, .start = w->tail, .hash = XXH3_createState() };
	if (!o->hash)
		return -ENOMEM;
	XXH3_64bits_reset(o->hash);
	return 0;
}

static int tail_out_flush(struct tail_out *o)
{
	int rc = write_all(o->w->fd, o->buf, o->len, o->start + o->written);

	XXH3_64bits_update(o->hash, o->buf, o->len);
	o->written += o->len;
	o->len = 0;
	return rc;
}

/* compact_emit_fn into a tail_out (and what ORDER is written through). */
static int tail_out_put(void *arg, const void *bytes, size_t len)
{
	struct tail_out *o = arg;
	int rc = o->len + len > sizeof(o->buf) ? tail_out_flush(o) : 0;

	assert(len <= sizeof(o->buf));
	memcpy(o->buf + o->len, bytes, len);
	o->len += len;
	return rc;
}

/* Flush @o and make what it wrote section @s; the tail moves past it. */
static int tail_out_close(struct tail_out *o, enum index_section s)
{
	struct index_file_writer *w = o->w;
	int rc = tail_out_flush(o);

	w->h.sections[s] = (struct index_section_entry){ o->start, o->written,
							 XXH3_64bits_digest(o->hash) };
	w->hashed[s] = true;
	w->tail = section_align(o->start + o->written);
	return rc;
}

/*
 * Entries as they come (index_file_writer_entry()): packed at once into
 * ENTRIES, which grows from the tail, while each file ORDER lists has its
 * entry put in the slot of its member: a slot per member of the set,
 * shard by shard, member by member.  Read in order, the slots that were
 * filled are ORDER, with no sort.  The slots are a mapping of an unlinked
 * file beside the index (4 bytes a member, page cache rather than the
 * build's own memory), or memory for an index written in memory.
 */
struct entry_stream {
	struct compact_encoder enc;	/* packs the entries */
	struct tail_out entries;	/* ENTRIES on their way */
	uint64_t *first_slot;		/* per shard: its member 0's slot; one
					 * more: the number of slots */
	uint32_t *slots;		/* entry + 1 per member; 0: none */
	size_t slots_len;		/* bytes of slots */
	bool mapped;			/* slots is a mapping, not malloc'd */
};

int index_file_writer_dir(const struct index_file_writer *w, char dir[PATH_MAX])
{
	size_t n = dir_len(w->path);

	return snprintf(dir, PATH_MAX, "%.*s", n ? (int)n : 1, n ? w->path : ".") <
	       PATH_MAX ? 0 : -ENAMETOOLONG;
}

/* An unlinked file of @len bytes beside the index, mapped at *@map.
 * 0 or -errno. */
static int map_scratch(const struct index_file_writer *w, size_t len, void **map)
{
	char dir[PATH_MAX];
	int rc = index_file_writer_dir(w, dir);

	return rc ?: scratch_map(dir, len, map);
}

/* ORDER's slots, one per member of the set. */
static int slots_alloc(struct index_file_writer *w, struct entry_stream *st)
{
	const struct shard_set *set = w->set;
	void *map;
	uint64_t n = 0;
	int rc;

	st->first_slot = malloc(((size_t)set->nr + 1) * sizeof(*st->first_slot));
	if (!st->first_slot)
		return -ENOMEM;
	for (uint32_t s = 0; s < set->nr; s++) {
		st->first_slot[s] = n;
		n += set->shards[s].members;
	}
	st->first_slot[set->nr] = n;
	st->slots_len = (n ? n : 1) * sizeof(*st->slots);
	if (w->in_memory) {
		st->slots = calloc_huge(st->slots_len, 1);
		return st->slots ? 0 : -ENOMEM;
	}
	rc = map_scratch(w, st->slots_len, &map);
	if (!rc) {
		st->slots = map;
		st->mapped = true;
	}
	return rc;
}

static void stream_free(struct entry_stream *st)
{
	if (!st)
		return;
	compact_encoder_release(&st->enc);
	XXH3_freeState(st->entries.hash);
	if (st->mapped)
		munmap(st->slots, st->slots_len);
	else
		free(st->slots);
	free(st->first_slot);
	free(st);
}

static int stream_begin(struct index_file_writer *w)
{
	struct entry_stream *st = calloc(1, sizeof(*st));
	int rc;

	if (!st)
		return -ENOMEM;
	compact_encoder_init(&st->enc, tail_out_put, &st->entries);
	rc = tail_out_init(&st->entries, w) ?: slots_alloc(w, st);
	if (rc) {
		stream_free(st);
		return rc;
	}
	w->stream = st;
	return 0;
}

int index_file_writer_entry(struct index_file_writer *w, uint32_t e,
			    const struct shard_inode *in, const char *name, size_t len,
			    const char *target, uint32_t member)
{
	struct entry_stream *st = w->stream;
	int rc = st ? 0 : stream_begin(w);

	if (rc)
		return rc;
	st = w->stream;
	assert(e == st->enc.nr && !w->packed);
	if (shard_index_orderable(in, w->set->nr)) {
		uint64_t slot = st->first_slot[in->shard] + member;

		assert(slot < st->first_slot[in->shard + 1] && !st->slots[slot]);
		st->slots[slot] = e + 1;
	}
	return compact_encoder_add(&st->enc, in, name, len, target);
}

/* ORDER from the slots, at the tail. */
static int order_from_slots(struct index_file_writer *w, const struct entry_stream *st)
{
	struct tail_out *o = malloc(sizeof(*o));
	uint64_t n = st->first_slot[w->set->nr];
	int rc = o ? tail_out_init(o, w) : -ENOMEM;

	for (uint64_t i = 0; !rc && i < n; i++)
		if (st->slots[i]) {
			uint32_t e = st->slots[i] - 1;

			rc = tail_out_put(o, &e, sizeof(e));
		}
	rc = rc ?: tail_out_close(o, INDEX_SEC_ORDER);
	if (o)
		XXH3_freeState(o->hash);
	free(o);
	return rc;
}

/* ENTRIES, BLOCKS, TARGETS and ORDER of the @n entries streamed. */
static int stream_finish(struct index_file_writer *w, uint32_t n)
{
	struct entry_stream *st = w->stream;
	int rc;

	if (!st || st->enc.nr != n)
		return -EINVAL;
	rc = compact_encoder_finish(&st->enc) ?: tail_out_close(&st->entries, INDEX_SEC_ENTRIES);
	rc = rc ?: tail_put(w, INDEX_SEC_BLOCKS, st->enc.blocks,
			    ((uint64_t)compact_nr_blocks(n) + 1) * sizeof(*st->enc.blocks));
	rc = rc ?: tail_put(w, INDEX_SEC_TARGETS, st->enc.targets, st->enc.targets_len);
	return rc ?: order_from_slots(w, st);
}

/* ENTRIES, BLOCKS, TARGETS and ORDER, as streamed or as put. */
static int writer_entries(struct index_file_writer *w, uint32_t n)
{
	const struct shard_index *idx = w->packed;

	if (!idx)
		return stream_finish(w, n);
	return tail_put(w, INDEX_SEC_ENTRIES, idx->entries.entries, idx->entries.entries_len) ?:
	       tail_put(w, INDEX_SEC_BLOCKS, idx->entries.blocks,
			((uint64_t)compact_nr_blocks(n) + 1) * sizeof(uint64_t)) ?:
	       tail_put(w, INDEX_SEC_TARGETS, idx->entries.targets, idx->entries.targets_len) ?:
	       tail_put(w, INDEX_SEC_ORDER, idx->order, idx->nr_order * sizeof(*idx->order));
}

/* The sum of each span of the summed sections of the file image @map
 * with header @h, in the order of SUMS. */
static void sums_compute(const char *map, const struct index_file_header *h, uint64_t *sums)
{
	for (int i = 0; i < INDEX_NR_GUARDED; i++) {
		const struct index_section_entry *e = &h->sections[index_summed(i)];

		for (uint64_t k = 0; k < index_guard_spans(e->length); k++)
			*sums++ = index_guard_span_sum(map + e->offset, e->length, k);
	}
}

/* SUMS, the last section, from what was written, read back through a
 * mapping. */
static int writer_sums(struct index_file_writer *w)
{
	uint64_t n = index_sum_count(&w->h);
	uint64_t *sums = malloc(n ? n * sizeof(*sums) : 1);
	size_t len = w->tail;
	char *map = MAP_FAILED;
	int rc = sums ? 0 : -ENOMEM;

	if (!rc && ftruncate(w->fd, (off_t)len))
		rc = -errno;
	if (!rc && (map = mmap(NULL, len, PROT_READ, MAP_SHARED, w->fd, 0)) == MAP_FAILED)
		rc = -errno;
	if (!rc) {
		sums_compute(map, &w->h, sums);
		munmap(map, len);
		rc = tail_put(w, INDEX_SEC_SUMS, sums, n * sizeof(*sums));
	}
	free(sums);
	return rc;
}

/* Every section, every checksum, then the header. */
static int writer_seal(struct index_file_writer *w, uint32_t n)
{
	char *buf = malloc(INDEX_WRITER_BUF);
	int rc = buf ? 0 : -ENOMEM;

	rc = rc ?: section_put(w, INDEX_SEC_SHARDS, w->recs);
	rc = rc ?: section_put(w, INDEX_SEC_SHARD_NAMES, w->names);
	rc = rc ?: section_put(w, INDEX_SEC_SEEK_SHARDS, w->ss.recs);
	rc = rc ?: section_put(w, INDEX_SEC_SEEK_POINTS, w->ss.points);
	rc = rc ?: section_put(w, INDEX_SEC_SEEK_WINDOWS, w->ss.windows);
	for (int p = 0; !rc && p < INDEX_NR_PARTS; p++)
		if (w->image[p])
			rc = section_put(w, part_section(p), w->image[p]);
	rc = rc ?: writer_entries(w, n);
	rc = rc ?: writer_sums(w);
	w->h.file_size = w->tail;
	if (!rc && ftruncate(w->fd, (off_t)w->h.file_size))
		rc = -errno;
	for (int s = 0; !rc && s < INDEX_NR_SECTIONS; s++)
		rc = w->hashed[s] ? 0 : section_hash(w, s, buf);
	free(buf);
	if (!rc) {
		w->h.header_xxh3 = XXH3_64bits(&w->h, sizeof(w->h));
		rc = write_all(w->fd, &w->h, sizeof(w->h), 0);
	}
	if (!rc && (fchmod(w->fd, index_mode(w->set)) || fsync(w->fd)))
		rc = -errno;
	return rc;
}

int index_file_writer_commit(struct index_file_writer *w, uint32_t nr_inodes,
			     const struct shard_index_counts *counts,
			     uint64_t options_hash, bool keep, char *msg, size_t msg_len)
{
	int rc;

	memcpy(w->h.magic, INDEX_FILE_MAGIC, sizeof(w->h.magic));
	w->h.version = INDEX_FILE_VERSION;
	w->h.byte_order = INDEX_BYTE_ORDER;
	w->h.options_hash = options_hash;
	w->h.nr_shards = w->set->nr;
	w->h.nr_inodes = nr_inodes;
	w->h.counts = counts_to_file(counts);
	rc = writer_seal(w, nr_inodes);
	if (close(w->fd) && !rc)	/* written: a lease can now be taken */
		rc = -errno;
	w->fd = -1;
	if (!rc && keep && rename(w->tmp, w->path))
		rc = -errno;
	if (!rc && keep)
		w->tmp[0] = '\0';	/* renamed: nothing for abort to unlink */
	if (rc)
		log_format(msg, msg_len, rc, "%s: cannot write the index: %s",
			   w->path, strerror(-rc));
	return rc;
}

void index_file_writer_abort(struct index_file_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp[0])
		unlink(w->tmp);
	w->fd = -1;
	stream_free(w->stream);
	w->stream = NULL;
	w->tmp[0] = '\0';
	free(w->recs);
	free(w->names);
	seek_sections_free(&w->ss);
	for (int p = 0; p < INDEX_NR_PARTS; p++) {
		free(w->image[p]);
		w->image[p] = NULL;
	}
	w->recs = NULL;
	w->names = NULL;
	w->ss = (struct seek_sections){ 0 };
}

/* Every array of @idx at its place. */
static int write_arrays(struct index_file_writer *w, const struct shard_index *idx)
{
	const void *const data[INDEX_NR_PARTS] = {
		[INDEX_PART_SPARSE] = idx->sparse, [INDEX_PART_EXTENTS] = idx->extents,
		[INDEX_PART_HARDLINKS] = idx->hardlinks };
	const uint64_t len[INDEX_NR_PARTS] = {
		[INDEX_PART_SPARSE] = idx->nr_sparse * sizeof(*idx->sparse),
		[INDEX_PART_EXTENTS] = idx->nr_extents * sizeof(*idx->extents),
		[INDEX_PART_HARDLINKS] = idx->nr_hardlinks * sizeof(*idx->hardlinks) };
	int rc = index_file_writer_place(w, len, true);

	for (int p = 0; !rc && p < INDEX_NR_PARTS; p++)
		if (data[p])
			rc = index_file_writer_put(w, p, 0, data[p], len[p]);
	if (!rc)
		index_file_writer_put_packed(w, idx);
	return rc;
}

int index_file_write(const char *path, const struct shard_index *idx,
		     const struct shard_set *set, uint64_t options_hash,
		     char *msg, size_t msg_len)
{
	struct index_file_writer w;
	int rc = index_file_writer_open(&w, path, set, msg, msg_len);

	if (rc)
		return rc;
	rc = write_arrays(&w, idx);
	if (rc)
		log_format(msg, msg_len, rc, "%s: cannot write the index: %s", path,
			   strerror(-rc));
	else
		rc = index_file_writer_commit(&w, shard_index_nr(idx), &idx->counts,
					      options_hash, true, msg, msg_len);
	index_file_writer_abort(&w);
	return rc;
}

/* Whether section entry @e lies inside @len bytes. */
static bool section_inside(const struct index_section_entry *e, uint64_t len)
{
	return e->offset <= len && e->length <= len - e->offset;
}

/*
 * The SUMS of an image to reseal, when it and what it sums lie inside:
 * computed apart, then copied, since a hostile SUMS may lie over the
 * header's section table that the computing walks (a fuzzed image put it
 * there, and the walk read past the image).  0 or -ENOMEM.
 */
static int reseal_sums(struct index_file_header *h, char *image, size_t len)
{
	const struct index_section_entry sums = h->sections[INDEX_SEC_SUMS];
	uint64_t *computed;

	for (int i = 0; i < INDEX_NR_GUARDED; i++)
		if (!section_inside(&h->sections[index_summed(i)], len))
			return 0;
	if (!section_inside(&sums, len) || sums.offset % sizeof(uint64_t) ||
	    sums.length != index_sum_count(h) * sizeof(uint64_t))
		return 0;
	computed = malloc(sums.length ? sums.length : 1);
	if (!computed)
		return -ENOMEM;
	sums_compute(image, h, computed);
	memcpy(image + sums.offset, computed, sums.length);
	free(computed);
	return 0;
}

int index_file_reseal(void *image, size_t len)
{
	struct index_file_header *h = image;

	if (len < sizeof(*h))
		return -EINVAL;
	if (reseal_sums(h, image, len))
		return -ENOMEM;
	for (int s = 0; s < INDEX_NR_SECTIONS; s++) {
		struct index_section_entry *e = &h->sections[s];

		if (section_inside(e, len))
			e->xxh3 = XXH3_64bits((char *)image + e->offset, e->length);
	}
	h->header_xxh3 = 0;
	h->header_xxh3 = XXH3_64bits(h, sizeof(*h));
	return 0;
}

/* Check the header: magic, version, sizes and the section table. */
static int check_header(const struct index_file_header *h, uint64_t size,
			char *msg, size_t msg_len)
{
	struct index_file_header copy = *h;

	copy.header_xxh3 = 0;
	if (memcmp(h->magic, INDEX_FILE_MAGIC, 8))
		return log_format(msg, msg_len, -EINVAL, "offset 0: not a shardfs index (bad magic)");
	if (h->version != INDEX_FILE_VERSION || h->byte_order != INDEX_BYTE_ORDER)
		return log_format(msg, msg_len, -EINVAL, "offset 8: unsupported version %u or byte order",
			    h->version);
	if (XXH3_64bits(&copy, sizeof(copy)) != h->header_xxh3)
		return log_format(msg, msg_len, -EINVAL, "offset 0: header checksum mismatch");
	if (h->file_size != size)
		return log_format(msg, msg_len, -EINVAL, "offset 16: file is %llu bytes, header says %llu",
			    (unsigned long long)size, (unsigned long long)h->file_size);
	for (int s = 0; s < INDEX_NR_SECTIONS; s++) {
		const struct index_section_entry *e = &h->sections[s];

		if (e->offset % INDEX_SECTION_ALIGN || e->offset < sizeof(*h) ||
		    e->offset > size || e->length > size - e->offset ||
		    e->length % index_section_record(s))
			return log_format(msg, msg_len, -EINVAL, "section %d: bad offset or length", s);
	}
	if (h->sections[INDEX_SEC_SHARDS].length / sizeof(struct index_file_shard) != h->nr_shards ||
	    h->nr_inodes == 0 || h->nr_inodes > SHARD_INDEX_MAX_ENTRIES ||
	    h->sections[INDEX_SEC_BLOCKS].length !=
	    ((uint64_t)compact_nr_blocks(h->nr_inodes) + 1) * sizeof(uint64_t) ||
	    h->sections[INDEX_SEC_SUMS].length != index_sum_count(h) * sizeof(uint64_t))
		return log_format(msg, msg_len, -EINVAL, "offset 32: counts disagree with sections");
	return 0;
}

/* Whether section @s is one that SUMS covers. */
static bool summed(enum index_section s)
{
	for (int i = 0; i < INDEX_NR_GUARDED; i++)
		if (index_summed(i) == s)
			return true;
	return false;
}

/* Each section's checksum, but with @lazy those of the summed sections,
 * which a guard checks as they are used. */
static int check_checksums(const struct index_file_header *h, const char *map, bool lazy,
			   char *msg, size_t msg_len)
{
	for (int s = 0; s < INDEX_NR_SECTIONS; s++) {
		const struct index_section_entry *e = &h->sections[s];

		if ((!lazy || !summed(s)) && XXH3_64bits(map + e->offset, e->length) != e->xxh3)
			return log_format(msg, msg_len, -EINVAL,
				    "offset %llu: checksum mismatch in section %d",
				    (unsigned long long)e->offset, s);
	}
	return 0;
}

/* Each span of the summed sections against its sum in SUMS (whose own
 * checksum passed), so that a record vouches for the sums too. */
static int check_span_sums(const struct index_file_header *h, const char *map,
			   char *msg, size_t msg_len)
{
	const uint64_t *sums = (const uint64_t *)(map + h->sections[INDEX_SEC_SUMS].offset);

	for (int i = 0; i < INDEX_NR_GUARDED; i++) {
		const struct index_section_entry *e = &h->sections[index_summed(i)];

		for (uint64_t k = 0; k < index_guard_spans(e->length); k++)
			if (index_guard_span_sum(map + e->offset, e->length, k) != *sums++)
				return log_format(msg, msg_len, -EINVAL, "offset %llu: %u bytes "
						  "differ from their sum in section %d",
						  (unsigned long long)(e->offset +
								       k * INDEX_SUM_SPAN),
						  INDEX_SUM_SPAN, INDEX_SEC_SUMS);
	}
	return 0;
}

static bool range_ok(uint64_t off, uint64_t len, uint64_t limit)
{
	return off <= limit && len <= limit - off;
}

/* Bounds of a regular file's data (plain or sparse) within its shard. */
static bool file_ok(const struct shard_index *idx, const struct shard_inode *in,
		    uint64_t shard_size)
{
	const struct shard_sparse *sp;

	if (!(in->flags & SHARD_INODE_SPARSE))
		return range_ok(in->data, in->size, shard_size);
	if (in->data >= idx->nr_sparse)
		return false;
	sp = &idx->sparse[in->data];
	if (!range_ok(sp->first, sp->count, idx->nr_extents))
		return false;
	for (uint64_t i = sp->first; i < sp->first + sp->count; i++) {
		const struct shard_extent *e = &idx->extents[i];

		if (!range_ok(e->physical, e->length, shard_size) ||
		    !range_ok(e->logical, e->length, in->size) ||
		    (i > sp->first && e->logical < e[-1].logical + e[-1].length))
			return false;
	}
	return true;
}

/* What the pass over the entries carries from one to the next. */
struct entries_pass {
	struct shard_inode parent; /* entry parent_e, decoded */
	uint32_t parent_e;	/* the last parent decoded; UINT32_MAX: none */
	uint64_t next_child;	/* where the next children range must start */
	uint64_t files;		/* orderable files so far */
	uint64_t linked;	/* entries marked linked so far */
	size_t prev_len;	/* bytes of prev */
	char prev[PATH_COMPONENT_MAX + 1]; /* the previous entry's name */
};

/*
 * Where entry @e (@in, named @name of @len bytes) sits: inside its
 * parent's range of children (so every entry has exactly one parent),
 * after its parent, named like a child (one component), and after its
 * left sibling in name order.  Entries before @e were checked already,
 * which makes the parent's range and the sibling's name safe to use.
 * The parent is decoded once for its run of children: decoding it for
 * each was 42 % of a check of 20 M members (1.74 s).
 */
static bool placement_ok(const struct shard_index *idx, uint32_t e,
			 const struct shard_inode *in, const char *name, size_t len,
			 struct entries_pass *pass)
{
	const struct shard_inode *p = &pass->parent;

	if (e == 0)
		return in->parent == 0 && S_ISDIR(in->mode);
	if (in->parent >= e)
		return false;
	if (in->parent != pass->parent_e) {
		shard_index_entry(idx, in->parent, &pass->parent);
		pass->parent_e = in->parent;
	}
	if (!S_ISDIR(p->mode) || e < p->data || e >= p->data + p->size || len == 0 ||
	    memchr(name, '/', len) || memchr(name, '\0', len))
		return false;
	return e == p->data ||
	       shard_index_name_cmp(pass->prev, pass->prev_len, name, len) < 0;
}

/*
 * Breadth-first layout: the children ranges of the directories, taken in
 * entry order, tile entries 1 .. nr - 1 without gap or overlap, and an
 * empty directory's range is (0, 0), as the builds write it.
 * pass->next_child is where the next range must start.
 */
static bool dir_ok(const struct shard_index *idx, uint32_t e, const struct shard_inode *d,
		   struct entries_pass *pass)
{
	if (!d->size)
		return !d->data;
	if (d->data != pass->next_child || d->data <= e ||
	    !range_ok(d->data, d->size, shard_index_nr(idx)))
		return false;
	pass->next_child += d->size;
	return true;
}

/* Entry @e, @in named cur->name, against what came before it. */
static bool entry_ok(const struct shard_index *idx, uint32_t e, const struct shard_inode *in,
		     const struct compact_cursor *cur, const struct index_file_shards *sh,
		     struct entries_pass *pass)
{
	if (!placement_ok(idx, e, in, cur->name, cur->name_len, pass))
		return false;
	switch (in->mode & S_IFMT) {
	case S_IFDIR:
		return !(in->flags & SHARD_INODE_LINKED) && dir_ok(idx, e, in, pass);
	case S_IFLNK:
		return true;	/* its target: compact_check() */
	case S_IFREG:
		return in->shard < sh->nr &&
		       file_ok(idx, in, sh->shards[in->shard].size);
	default:
		return false;
	}
}

/* The hard-link table against the entries, of which @linked are marked
 * linked (counted by check_structure()'s pass over them). */
static bool hardlinks_ok(const struct shard_index *idx, uint64_t linked)
{
	const struct compact_entries *c = &idx->entries;

	for (uint64_t i = 0; i < idx->nr_hardlinks; i++) {
		const struct shard_hardlink *l = &idx->hardlinks[i];

		if (l->entry >= c->nr || l->first >= c->nr ||
		    (i && l->entry <= l[-1].entry) ||
		    !(compact_field(c, l->entry, COMPACT_FLAGS) & SHARD_INODE_LINKED) ||
		    (compact_field(c, l->first, COMPACT_FLAGS) & SHARD_INODE_LINKED) ||
		    S_ISDIR(compact_field(c, l->first, COMPACT_MODE)))
			return false;
	}
	return linked == idx->nr_hardlinks;
}

/*
 * ORDER holds as many entries as there are @files, each an entry of the
 * index.  Which ones and in what order only guides push-ahead, which
 * takes from a shard's range only the files of that shard (pushahead.c):
 * checking it would cost a random read of an entry per file.
 */
static bool order_ok(const struct shard_index *idx, uint64_t files)
{
	uint32_t worst = 0;

	if (idx->nr_order != files)
		return false;
	for (uint64_t i = 0; i < idx->nr_order; i++)	/* no branch: vectorised */
		worst = idx->order[i] > worst ? idx->order[i] : worst;
	return !idx->nr_order || worst < shard_index_nr(idx);
}

/* The packed blocks as bytes (index_compact.h), before any is decoded. */
static int check_blocks(const struct index_file_header *h, const struct shard_index *idx,
			char *msg, size_t msg_len)
{
	const char *why;
	uint32_t bad;

	if (!compact_check(&idx->entries, &bad, &why))
		return 0;
	return log_format(msg, msg_len, -EINVAL, "offset %llu: entry %u: %s",
			  (unsigned long long)(h->sections[INDEX_SEC_ENTRIES].offset +
					       compact_block_offset(&idx->entries, bad)),
			  bad, why);
}

/* Every bound a request relies on, checked once. */
static int check_structure(const struct index_file_header *h, const struct shard_index *idx,
			   const struct index_file_shards *sh, char *msg, size_t msg_len)
{
	uint64_t base = h->sections[INDEX_SEC_ENTRIES].offset;
	struct entries_pass *pass = calloc(1, sizeof(*pass));
	struct compact_cursor cur;
	struct shard_inode in;
	uint32_t e = 0;
	int rc = pass ? check_blocks(h, idx, msg, msg_len) : -ENOMEM;

	if (rc)
		goto out_free;
	pass->parent_e = UINT32_MAX;
	pass->next_child = 1;
	for (compact_cursor_init(&cur, &idx->entries, 0); compact_cursor_next(&cur, &in); e++) {
		if (!entry_ok(idx, e, &in, &cur, sh, pass)) {
			rc = log_format(msg, msg_len, -EINVAL, "offset %llu: entry %u is "
					"inconsistent", (unsigned long long)
					(base + compact_block_offset(&idx->entries, e)), e);
			goto out_free;
		}
		pass->files += shard_index_orderable(&in, sh->nr);
		pass->linked += !!(in.flags & SHARD_INODE_LINKED);
		memcpy(pass->prev, cur.name, cur.name_len);
		pass->prev_len = cur.name_len;
	}
	if (pass->next_child != shard_index_nr(idx))
		rc = log_format(msg, msg_len, -EINVAL, "offset %llu: %llu entries belong to no "
				"directory", (unsigned long long)base,
				(unsigned long long)(shard_index_nr(idx) - pass->next_child));
	else if (!hardlinks_ok(idx, pass->linked))
		rc = log_format(msg, msg_len, -EINVAL, "section %d: hard-link table is "
				"inconsistent", INDEX_SEC_HARDLINKS);
	else if (!order_ok(idx, pass->files))
		rc = log_format(msg, msg_len, -EINVAL, "section %d: not one entry per file",
				INDEX_SEC_ORDER);
out_free:
	free(pass);
	return rc;
}

/* Point @idx and @sh into the mapping, per the section table. */
static void point_into(const struct index_file_header *h, const char *bytes,
		       struct shard_index *idx, struct index_file_shards *sh)
{
	const struct index_section_entry *s = h->sections;
	char *map = (char *)bytes;	/* read-only: mapped PROT_READ */

	idx->entries = (struct compact_entries){
		.entries = (const uint8_t *)map + s[INDEX_SEC_ENTRIES].offset,
		.entries_len = s[INDEX_SEC_ENTRIES].length,
		.blocks = (const uint64_t *)(map + s[INDEX_SEC_BLOCKS].offset),
		.targets = map + s[INDEX_SEC_TARGETS].offset,
		.targets_len = s[INDEX_SEC_TARGETS].length, .nr = h->nr_inodes };
	idx->sparse = (struct shard_sparse *)(map + s[INDEX_SEC_SPARSE].offset);
	idx->nr_sparse = s[INDEX_SEC_SPARSE].length / sizeof(*idx->sparse);
	idx->extents = (struct shard_extent *)(map + s[INDEX_SEC_EXTENTS].offset);
	idx->nr_extents = s[INDEX_SEC_EXTENTS].length / sizeof(*idx->extents);
	idx->hardlinks = (struct shard_hardlink *)(map + s[INDEX_SEC_HARDLINKS].offset);
	idx->nr_hardlinks = s[INDEX_SEC_HARDLINKS].length / sizeof(*idx->hardlinks);
	idx->order = (uint32_t *)(map + s[INDEX_SEC_ORDER].offset);
	idx->nr_order = s[INDEX_SEC_ORDER].length / sizeof(*idx->order);
	counts_from_file(&idx->counts, &h->counts);
	sh->shards = (const struct index_file_shard *)(map + s[INDEX_SEC_SHARDS].offset);
	sh->nr = h->nr_shards;
	sh->names = map + s[INDEX_SEC_SHARD_NAMES].offset;
	sh->options_hash = h->options_hash;
	sh->seek = (const struct index_file_seek *)(map + s[INDEX_SEC_SEEK_SHARDS].offset);
	sh->points = (const struct seek_point *)(map + s[INDEX_SEC_SEEK_POINTS].offset);
	sh->windows = (const unsigned char *)map + s[INDEX_SEC_SEEK_WINDOWS].offset;
}

bool index_file_seek_table(const struct index_file_shards *sh, uint32_t i,
			   struct seek_table *t)
{
	const struct index_file_seek *r = &sh->seek[i];

	if (!r->nr)
		return false;
	*t = (struct seek_table){
		.points = sh->points + r->first, .nr = r->nr,
		.windows = sh->windows + r->windows, .windows_len = r->windows_len,
		.size = sh->shards[i].size, .stored_size = r->stored_size };
	return true;
}

/* Every shard's seek table lies in the sections and is consistent. */
static int check_seek(const struct index_file_header *h,
		      const struct index_file_shards *sh, char *msg, size_t msg_len)
{
	const struct index_section_entry *s = h->sections;
	uint64_t nr_points = s[INDEX_SEC_SEEK_POINTS].length / sizeof(struct seek_point);

	if (s[INDEX_SEC_SEEK_SHARDS].length != (uint64_t)sh->nr * sizeof(struct index_file_seek))
		return log_format(msg, msg_len, -EINVAL, "section %d: not one record per shard",
				  INDEX_SEC_SEEK_SHARDS);
	for (uint32_t i = 0; i < sh->nr; i++) {
		const struct index_file_seek *r = &sh->seek[i];
		struct seek_table t;
		uint64_t bad;

		if (!range_ok(r->first, r->nr, nr_points) ||
		    !range_ok(r->windows, r->windows_len, s[INDEX_SEC_SEEK_WINDOWS].length) ||
		    !memchr(r->encoding, '\0', sizeof(r->encoding)) ||
		    !r->nr != !r->encoding[0])
			return log_format(msg, msg_len, -EINVAL, "offset %llu: seek table of "
					  "shard %u lies outside its sections", (unsigned long long)
					  (s[INDEX_SEC_SEEK_SHARDS].offset + i * sizeof(*r)), i);
		if (index_file_seek_table(sh, i, &t) && !seek_table_check(&t, &bad))
			return log_format(msg, msg_len, -EINVAL, "offset %llu: seek point %llu "
					  "of shard %u is inconsistent", (unsigned long long)
					  (s[INDEX_SEC_SEEK_POINTS].offset + (r->first + bad) *
					   sizeof(struct seek_point)), (unsigned long long)bad, i);
	}
	return 0;
}

/*
 * Open @path for reading if it is a regular file we may trust (without
 * blocking on a FIFO someone put there).
 */
static int open_trusted(const char *path, int *fd, char *msg, size_t msg_len)
{
	struct stat st;
	int rc;

	*fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (*fd < 0)
		return errno == ENOENT ? -ENOENT
		       : log_format(msg, msg_len, -errno, "%s", strerror(errno));
	rc = fstat(*fd, &st) || !S_ISREG(st.st_mode)
	     ? log_format(msg, msg_len, -EINVAL, "offset 0: not a regular file")
	     /* only we (or root) may write it: others could choose the tree */
	     : stat_trusted(&st, false, msg, msg_len);
	if (rc)
		close(*fd);
	return rc;
}

int index_file_read_header(const char *path, struct index_file_header *h,
			   char *msg, size_t msg_len)
{
	struct stat st;
	int fd, rc = open_trusted(path, &fd, msg, msg_len);

	if (rc)
		return rc;
	if (fstat(fd, &st) || pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
		rc = log_format(msg, msg_len, -EINVAL, "offset 0: file too short for a header");
	else
		rc = check_header(h, (uint64_t)st.st_size, msg, msg_len);
	close(fd);
	return rc;
}

/*
 * The checks of a loaded @idx past its header that read all of it (the
 * sections' checksums and sums, the entries' bounds), unless @verified: a
 * record says this very file passed them (index_verified.h), and the
 * sections of a record or more per member are left to a guard.  The
 * checksums of the others and the bounds of the shard table and the seek
 * tables are checked always: a few bytes per shard.
 */
static int check_sections(const struct index_file_header *h, const char *map,
			  struct shard_index *idx, struct index_file_shards *sh,
			  bool verified, char *msg, size_t msg_len)
{
	int rc = check_checksums(h, map, verified, msg, msg_len);

	rc = rc ?: verified ? 0 : check_span_sums(h, map, msg, msg_len);
	if (rc)
		return rc;
	point_into(h, map, idx, sh);
	for (uint32_t i = 0; i < sh->nr; i++)
		if (!range_ok(sh->shards[i].name, sh->shards[i].name_len,
			      h->sections[INDEX_SEC_SHARD_NAMES].length) ||
		    sh->shards[i].name_len == 0)
			return log_format(msg, msg_len, -EINVAL,
					  "shard record %u names outside its section", i);
	rc = check_seek(h, sh, msg, msg_len);
	if (rc || verified)
		return rc;
	return check_structure(h, idx, sh, msg, msg_len);
}

int index_file_guard(struct shard_index *idx, const char *path, char *msg, size_t msg_len)
{
	const char *map = idx->map->addr;
	const struct index_file_header *h = (const struct index_file_header *)map;
	struct index_guard_section sec[INDEX_NR_GUARDED];
	int rc;

	for (int i = 0; i < INDEX_NR_GUARDED; i++) {
		const struct index_section_entry *e = &h->sections[index_summed(i)];

		sec[i] = (struct index_guard_section){
			.bytes = map + e->offset, .offset = e->offset, .length = e->length,
			.name = index_section_name(index_summed(i)) };
	}
	rc = index_guard_new(&idx->guard, path, sec, (const uint64_t *)
			     (map + h->sections[INDEX_SEC_SUMS].offset),
			     compact_nr_blocks(h->nr_inodes));
	if (rc)
		return log_format(msg, msg_len, rc, "%s", strerror(-rc));
	if (shard_index_check(idx, 0))
		return log_format(msg, msg_len, -EINVAL, "offset %llu: the root's entries "
				  "changed since the file was checked", (unsigned long long)
				  h->sections[INDEX_SEC_ENTRIES].offset);
	return 0;
}

int index_file_load(const char *path, struct shard_index *idx,
		    struct index_file_shards *sh, unsigned flags,
		    char *msg, size_t msg_len)
{
	const struct index_file_header *h;
	struct index_map *m;
	bool recorded, lazy;
	int fd, rc = open_trusted(path, &fd, msg, msg_len);

	rc = rc ?: index_map_open(&m, fd, path, sizeof(*h), msg, msg_len);
	if (rc)
		return rc;
	h = (const struct index_file_header *)m->addr;
	*idx = (struct shard_index){ .map = m };
	rc = check_header(h, m->len, msg, msg_len);
	recorded = !rc && m->leased &&
		   index_verified_holds(path, &m->leased_st, h->header_xxh3);
	lazy = recorded && !(flags & INDEX_LOAD_FULL_CHECK);
	rc = rc ?: check_sections(h, m->addr, idx, sh, lazy, msg, msg_len);
	rc = rc ?: lazy ? index_file_guard(idx, path, msg, msg_len) : 0;
	if (rc) {
		shard_index_release(idx);
		return rc;
	}
	if (!recorded && m->leased)
		index_verified_record(path, &m->leased_st, h->header_xxh3);
	return 0;
}
