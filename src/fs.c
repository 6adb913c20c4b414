/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fs.c - attributes, lookups and reads over a built index.
 *
 * Nothing here touches the shard storage except shardfs_read(): every
 * metadata answer comes from the in-memory index, which is the point of
 * shardfs (a loose-file tree costs several metadata round trips per
 * sample on network storage).
 *
 * Reads ask the shard's source (source.h) for the member's bytes at their
 * offset in the shard: a pread(2) for a local tar shard, a decoder or the
 * chunk cache, under their locks, for a compressed or remote one.  A short
 * read, or a size other than the indexed one (one fstat after each read:
 * a truncate and a rewrite to another size between two reads leave no
 * short read to see), means the shard is no longer what was indexed; the
 * shard is then marked stale for good: that read and every later one of
 * it fail with EIO, never with the wrong bytes, and it is logged once.  A
 * rewrite in place to the same size cannot be seen this way (shardfs(1)).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/control.h"
#include "shardfs/fs.h"
#include "shardfs/log.h"
#include "shardfs/path.h"
#include "shardfs/util.h"

int shardfs_init(struct shardfs *fs, const char *spec,
		 const struct shard_index_build_options *opt,
		 const struct index_store_options *so)
{
	uint64_t t0 = monotonic_ns();
	char msg[512];
	int rc;

	rc = shard_set_expand(&fs->set, spec, opt->remote, msg, sizeof(msg));
	fs->set.skip_bad = opt->skip_bad_shards;
	fs->set.spans = opt->spans;
	if (!rc)
		rc = shard_set_open(&fs->set, msg, sizeof(msg));
	if (rc) {
		log_error("%s", msg);
		goto out_release_set;
	}
	rc = index_store_open(&fs->idx, &fs->set, opt, so, &fs->index_file);
	if (rc)
		goto out_release_set;
	rc = shardfs_init_built(fs);
	if (rc)
		goto out_release_index;
	fs->build_seconds = seconds_since(t0);
	return 0;

out_release_index:
	shard_index_release(&fs->idx);
out_release_set:
	shard_set_release(&fs->set);
	return rc;
}

static ssize_t fetch_member(void *fs, uint32_t e, char *buf, int pipe_fd,
			    size_t size, uint64_t off)
{
	return shardfs_fetch(fs, e, buf, pipe_fd, size, off);
}

static void member_drained(void *fs, uint32_t e, size_t size, uint64_t off)
{
	shardfs_splice_done(fs, (uint64_t)e + 1, size, off);
}

int shardfs_init_built(struct shardfs *fs)
{
	const struct pushahead_reader reader = { fetch_member, member_drained, fs };

	fs->streams = calloc(fs->set.nr ? fs->set.nr : 1, sizeof(*fs->streams));
	if (!fs->streams || pushahead_init(&fs->push, &fs->idx, &fs->set,
					   fs->opt.pushahead, &reader)) {
		free(fs->streams);
		fs->streams = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < fs->set.nr; i++)
		atomic_init(&fs->streams[i].served_lo, ~0ull);
	control_init(&fs->control, &(struct control_source){
		.idx = &fs->idx, .set = &fs->set, .streams = fs->streams,
		.counters = &fs->counters, .opt = &fs->opt,
		.push = &fs->push.counters,
		.build_seconds = &fs->build_seconds,
	});
	return 0;
}

void shardfs_release(struct shardfs *fs)
{
	pushahead_stop(&fs->push);
	pushahead_release(&fs->push);
	free(fs->streams);
	fs->streams = NULL;
	control_release(&fs->control);
	shard_index_release(&fs->idx);
	shard_set_release(&fs->set);
}

int shardfs_getattr(struct shardfs *fs, uint64_t ino, struct stat *st)
{
	int node = control_node_of(&fs->control, ino);
	struct shard_inode in;

	if (node >= 0)
		return control_getattr(&fs->control, node, st);
	if (!shard_index_get(&fs->idx, ino, &in))
		return -ENOENT;
	memset(st, 0, sizeof(*st));
	st->st_ino = shard_index_ino(&fs->idx, (uint32_t)(ino - 1));
	st->st_mode = in.mode & ~(mode_t)fs->opt.umask;
	st->st_nlink = in.nlink;
	st->st_uid = fs->opt.set_uid ? fs->opt.uid : in.uid;
	st->st_gid = fs->opt.set_gid ? fs->opt.gid : in.gid;
	st->st_size = S_ISDIR(in.mode) ? SHARDFS_BLKSIZE / 32 : (off_t)in.size;
	st->st_blksize = SHARDFS_BLKSIZE;
	st->st_blocks = S_ISREG(in.mode) ? (blkcnt_t)((in.size + 511) / 512) : 0;
	st->st_mtim.tv_sec = in.mtime_sec;
	st->st_mtim.tv_nsec = in.mtime_nsec;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
	return 0;
}

/*
 * The inode number that a LOOKUP or READDIR hands out for entry @e, into
 * *@ino.  A later name of a hard-link group hands out the group's first
 * entry, which may lie in another directory: it is checked as well, since
 * the kernel's requests on the inode decode it (index_guard.h).
 */
static int entry_ino(const struct shardfs *fs, uint32_t e, uint64_t *ino)
{
	*ino = shard_index_ino(&fs->idx, e);
	return shard_index_check(&fs->idx, (uint32_t)(*ino - 1));
}

int shardfs_lookup(struct shardfs *fs, uint64_t parent, const char *name,
		   uint64_t *ino)
{
	size_t len = strlen(name);
	int64_t e;

	if (control_node_of(&fs->control, parent) == CONTROL_DIR)
		return control_lookup(&fs->control, name, ino);
	if (parent == SHARDFS_ROOT_INO && !strcmp(name, CONTROL_DIR_NAME)) {
		*ino = control_ino(&fs->control, CONTROL_DIR);
		return 0;
	}
	if (parent < 1 || parent > shard_index_nr(&fs->idx))
		return -ENOENT;
	if (len > PATH_COMPONENT_MAX)
		return -ENAMETOOLONG;
	e = shard_index_lookup(&fs->idx, (uint32_t)(parent - 1), name, len);
	return e < 0 ? (int)e : entry_ino(fs, (uint32_t)e, ino);
}

int shardfs_readdir_entry(const struct shardfs *fs, uint64_t dir, uint64_t pos,
			  struct shardfs_dirent *de)
{
	struct shard_inode d;
	uint64_t e;
	int rc;

	if (control_node_of(&fs->control, dir) == CONTROL_DIR)
		return control_readdir_entry(&fs->control, pos, &de->name, &de->ino);
	if (de->dir != dir || de->cur.c != &fs->idx.entries) {	/* a new listing */
		rc = dir < 1 || dir > shard_index_nr(&fs->idx) ? -ENOENT
		     : shard_index_dir(&fs->idx, (uint32_t)(dir - 1), &d);
		/* the cursor reads the group of the first child */
		rc = rc ?: d.size ? shard_index_check(&fs->idx, (uint32_t)d.data) : 0;
		if (rc)
			return rc;
		*de = (struct shardfs_dirent){ .dir = dir, .first = d.data, .count = d.size };
		compact_cursor_init(&de->cur, &fs->idx.entries, (uint32_t)d.data);
	}
	if (pos >= de->count)
		return -ENOENT;
	e = de->first + pos;
	rc = shard_index_check(&fs->idx, (uint32_t)e);
	if (rc)
		return rc;
	if (de->cur.next != e)
		compact_cursor_init(&de->cur, &fs->idx.entries, (uint32_t)e);
	compact_cursor_next(&de->cur, NULL);
	de->name = de->cur.name;
	return entry_ino(fs, (uint32_t)e, &de->ino);
}

uint64_t shardfs_parent(const struct shardfs *fs, uint64_t dir)
{
	struct shard_inode d;

	return shard_index_get(&fs->idx, dir, &d) && S_ISDIR(d.mode) ? (uint64_t)d.parent + 1
								    : SHARDFS_ROOT_INO;
}

int shardfs_readlink(const struct shardfs *fs, uint64_t ino, const char **target)
{
	struct shard_inode in;

	if (!shard_index_get(&fs->idx, ino, &in))
		return -ENOENT;
	if (!S_ISLNK(in.mode))
		return -EINVAL;
	*target = shard_index_target(&fs->idx, &in);
	return 0;
}

bool shardfs_changes(const struct shardfs *fs, uint64_t ino)
{
	return control_changes(control_node_of(&fs->control, ino));
}

/*
 * Mark @shard changed (every later read of it fails) and log it once, with
 * why: its stored size now is *@now (when known), or a read at @off came
 * up short.
 */
static void shard_changed(struct shardfs *fs, uint32_t shard, uint64_t off,
			  const uint64_t *now)
{
	struct shard *s = &fs->set.shards[shard];

	if (atomic_exchange_explicit(&fs->streams[shard].changed, true,
				     memory_order_relaxed))
		return;
	if (now)
		log_error("%s: shard changed size under the mount (%llu -> %llu bytes); "
			  "its members now fail with EIO", s->path,
			  (unsigned long long)s->stored_size, (unsigned long long)*now);
	else
		log_error("%s: offset %llu: short read; the shard was modified under "
			  "the mount, its members now fail with EIO", s->path,
			  (unsigned long long)off);
}

/* Is @shard still the file that was indexed, as far as its size tells? */
static bool shard_unchanged(struct shardfs *fs, uint32_t shard, uint64_t off)
{
	struct shard *s = &fs->set.shards[shard];
	uint64_t now;

	if (atomic_load_explicit(&fs->streams[shard].changed, memory_order_relaxed))
		return false;
	if (s->src->ops->current_size(s->src, &now) || now == s->stored_size)
		return true;
	shard_changed(fs, shard, off, &now);
	return false;
}

static void atomic_min(atomic_ullong *v, unsigned long long x)
{
	unsigned long long cur = atomic_load_explicit(v, memory_order_relaxed);

	while (x < cur && !atomic_compare_exchange_weak_explicit(
			v, &cur, x, memory_order_relaxed, memory_order_relaxed))
		;
}

static void atomic_max(atomic_ullong *v, unsigned long long x)
{
	unsigned long long cur = atomic_load_explicit(v, memory_order_relaxed);

	while (x > cur && !atomic_compare_exchange_weak_explicit(
			v, &cur, x, memory_order_relaxed, memory_order_relaxed))
		;
}

/* Does a read at @off follow one that ended at @prev (forward, a few
 * KiB of headers and small members skipped at most)? */
static bool follows(uint64_t prev, uint64_t off)
{
	return off >= prev && off - prev <= SHARDFS_READAHEAD_GAP;
}

/*
 * Prefetch the shard ahead of a reader that walks it forward, so that the
 * next members are in the page cache before they are asked for (kernel
 * readahead works per open file and stops at each member's end).  A
 * window opens only after SHARDFS_READAHEAD_STREAK forward reads in a
 * row: a shuffled reader lands just past the previous read of a shard
 * now and then, and each of those used to prefetch a whole window for
 * nothing (1,551 windows, 6 GB, in one shuffled pass over 4.9 GB).  Racy
 * by design: the fields are hints, a lost update costs one fadvise more
 * or less.  Returns the forward reads in a row, this one included (0: it
 * jumped); from SHARDFS_READAHEAD_STREAK on, push-ahead follows the
 * reader too, with readahead off or on.
 */
static unsigned shard_readahead(struct shardfs *fs, struct shard_source *src,
			    struct shard_stream *s, uint64_t off, uint64_t end)
{
	uint64_t ra = fs->opt.readahead, ra_end, prev, start;
	unsigned streak = 0;
	bool inside, forward;

	prev = atomic_exchange_explicit(&s->last_end, end, memory_order_relaxed);
	forward = follows(prev, off);
	if (forward)
		streak = atomic_fetch_add_explicit(&s->forward, 1,
						   memory_order_relaxed) + 1;
	else
		atomic_store_explicit(&s->forward, 0, memory_order_relaxed);
	if (!ra)
		return streak;
	ra_end = atomic_load_explicit(&s->ra_end, memory_order_relaxed);
	inside = off >= atomic_load_explicit(&s->ra_start, memory_order_relaxed) &&
		 end <= ra_end;
	if (inside)
		atomic_fetch_add_explicit(&fs->counters.readahead_hits, 1,
					  memory_order_relaxed);
	if (!forward || (inside && end + ra / 2 <= ra_end) ||
	    (!inside && streak < SHARDFS_READAHEAD_STREAK))
		return streak;
	if (!inside)
		atomic_fetch_add_explicit(&fs->counters.readahead_misses, 1,
					  memory_order_relaxed);
	/* extend the window the reader is in, or open one where it is */
	start = (inside ? ra_end : end) & ~(uint64_t)(SHARDFS_PAGE_SIZE - 1);
	atomic_store_explicit(&s->ra_start, start, memory_order_relaxed);
	atomic_store_explicit(&s->ra_end, start + ra, memory_order_relaxed);
	shard_source_advise(src, start, ra, SHARD_SOURCE_WILLNEED);
	return streak;
}

/*
 * Account a successful backing read of [off, off + len) in @s, read ahead
 * of it, and drop the shard's pages it consumed (unless @spliced: a pipe
 * still holds them, shardfs_splice_done() drops them): the kernel keeps
 * the file's data in the mount's own page cache, across opens, so a
 * second copy under the shard only doubles the memory the data takes,
 * and the time spent finding that memory.  Measured, cold read of 4.9 GB
 * in shard order: 571-685 MB/s keeping both copies, 931-967 MB/s keeping
 * one, with half the daemon's CPU time.
 */
static unsigned shard_served(struct shardfs *fs, uint32_t shard, uint64_t off,
			     uint64_t len, bool spliced)
{
	struct shard_source *src = fs->set.shards[shard].src;
	struct shard_stream *s = &fs->streams[shard];
	unsigned streak;

	atomic_fetch_add_explicit(&fs->counters.backing_bytes, len,
				  memory_order_relaxed);
	atomic_min(&s->served_lo, off);
	atomic_max(&s->served_hi, off + len);
	streak = shard_readahead(fs, src, s, off, off + len);
	if (!spliced)
		shard_source_advise(src, off, len, SHARD_SOURCE_DONTNEED);
	return streak;
}

/* Log a failed read of @s, the first SHARDFS_READ_ERRORS_LOGGED only. */
static void read_failed(struct shardfs *fs, uint32_t shard, uint64_t off,
			int err)
{
	const struct shard *s = &fs->set.shards[shard];
	unsigned n = atomic_fetch_add_explicit(&fs->streams[shard].read_errors,
					       1, memory_order_relaxed);

	if (n < SHARDFS_READ_ERRORS_LOGGED)
		log_error("%s: offset %llu: read failed: %s", s->path,
			  (unsigned long long)off, strerror(err));
	else if (n == SHARDFS_READ_ERRORS_LOGGED)
		log_error("%s: further read errors on this shard are only counted",
			  s->path);
}

/* Where a read's bytes go: into @buf, or, @pipe >= 0, spliced into that
 * pipe (the source's pages, not a copy). */
struct read_to {
	char *buf;	/* the bytes go here when @pipe < 0 */
	int pipe;	/* write end of a pipe with room for them, or -1 */
};

/*
 * Read exactly @size bytes at @off of @shard to @to, or fail with -EIO;
 * a read @at_random asks the storage for no more (transfer_jumped).
 * A shard once found changed fails every later read, even after it has
 * grown back: a file rewritten under the mount would serve its new bytes
 * at the old offsets.
 */
static ssize_t shard_read_checked(struct shardfs *fs, uint32_t shard,
				  const struct read_to *to, size_t size,
				  uint64_t off, bool at_random)
{
	struct shard_source *src = fs->set.shards[shard].src;
	ssize_t n;

	if (atomic_load_explicit(&fs->streams[shard].changed, memory_order_relaxed))
		return -EIO;	/* found changed once: never served again */
	if (at_random && src->ops->transfer_jumped)
		n = src->ops->transfer_jumped(src, to->buf, to->pipe, size, off);
	else
		n = to->pipe >= 0 ? src->ops->splice(src, to->pipe, size, off)
				  : src->ops->read(src, to->buf, size, off);
	atomic_fetch_add_explicit(&fs->counters.backing_reads, 1,
				  memory_order_relaxed);
	if (to->pipe >= 0)
		atomic_fetch_add_explicit(&fs->counters.backing_spliced, 1,
					  memory_order_relaxed);
	if (n < 0) {
		read_failed(fs, shard, off, (int)-n);
		return -EIO;
	}
	if ((size_t)n < size) {
		if (shard_unchanged(fs, shard, off + (uint64_t)n))
			shard_changed(fs, shard, off + (uint64_t)n, NULL);
		return -EIO;
	}
	/* after the read: a shard rewritten to another size since the last
	 * read would otherwise serve its new bytes at the old offsets */
	if (!shard_unchanged(fs, shard, off))
		return -EIO;
	return n;
}

/*
 * Is a read at @off of @s one at random, for which the storage should
 * read no more than asked (transfer_jumped)?  Yes until the shard's reads
 * have moved forward SHARDFS_READAHEAD_STREAK times in a row: a shuffled
 * reader's READs of one file follow each other (over /dev/fuse a file of
 * more than 128 KiB takes two), and the second, read with readahead, had
 * the disk serve 1.12-1.13x the bytes a node's share used (1.02-1.07x
 * since; docs/benchmarks.md, tuning record).
 */
static bool read_at_random(const struct shard_stream *s, uint64_t off)
{
	uint64_t prev = atomic_load_explicit(&s->last_end, memory_order_relaxed);

	return !follows(prev, off) ||
	       atomic_load_explicit(&s->forward, memory_order_relaxed) <
			SHARDFS_READAHEAD_STREAK;
}

/* A reader's read: checked, accounted; *@forward: the forward reads of
 * the shard in a row (shard_readahead). */
static ssize_t shard_pread(struct shardfs *fs, uint32_t shard,
			   const struct read_to *to, size_t size, uint64_t off,
			   unsigned *forward)
{
	ssize_t n = shard_read_checked(fs, shard, to, size, off,
				       read_at_random(&fs->streams[shard], off));
	unsigned streak = n >= 0 ? shard_served(fs, shard, off, size,
						to->pipe >= 0) : 0;

	if (forward)
		*forward = streak;
	return n;
}

ssize_t shardfs_fetch(struct shardfs *fs, uint32_t e, char *buf, int pipe_fd,
		      size_t size, uint64_t off)
{
	struct shard_source *src;
	struct shard_inode in;
	ssize_t n;

	shard_index_entry(&fs->idx, e, &in);
	src = fs->set.shards[in.shard].src;
	assert(S_ISREG(in.mode) && !(in.flags & SHARD_INODE_SPARSE));
	assert(off + size <= in.size);
	if (pipe_fd >= 0 && !src->ops->splice)
		return -EAGAIN;
	n = shard_read_checked(fs, in.shard, &(struct read_to){ buf, pipe_fd },
			       size, in.data + off, false);
	if (n < 0)
		return n;
	atomic_fetch_add_explicit(&fs->counters.backing_bytes, size,
				  memory_order_relaxed);
	if (pipe_fd < 0)
		shard_source_advise(src, in.data + off, size, SHARD_SOURCE_DONTNEED);
	return n;
}

/* First run of @sp that ends after @off (binary search). */
static uint64_t extent_at(const struct shard_index *idx,
			  const struct shard_sparse *sp, uint64_t off)
{
	uint64_t lo = sp->first, hi = sp->first + sp->count;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		const struct shard_extent *e = &idx->extents[mid];

		if (e->logical + e->length <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Holes read as zeros; runs come from the shard. */
static ssize_t read_sparse(struct shardfs *fs, const struct shard_inode *in,
			   char *buf, size_t size, uint64_t off)
{
	const struct shard_sparse *sp = &fs->idx.sparse[in->data];
	uint64_t end = off + size;

	memset(buf, 0, size);
	for (uint64_t i = extent_at(&fs->idx, sp, off);
	     i < sp->first + sp->count; i++) {
		const struct shard_extent *e = &fs->idx.extents[i];
		uint64_t from = e->logical > off ? e->logical : off;
		uint64_t to = e->logical + e->length < end ? e->logical + e->length : end;
		ssize_t rc;

		if (e->logical >= end)
			break;
		if (from >= to)
			continue;
		rc = shard_pread(fs, in->shard,
				 &(struct read_to){ buf + (from - off), -1 },
				 to - from, e->physical + (from - e->logical), NULL);
		if (rc < 0)
			return rc;
	}
	return (ssize_t)size;
}

/* Bytes of the WebDataset key of @name (@len bytes): up to and with its
 * first '.'; 0 when it has none. */
static size_t key_len(const char *name, size_t len)
{
	const char *dot = memchr(name, '.', len);

	return dot ? (size_t)(dot - name) + 1 : 0;
}

/* Widen [*@lo, *@hi) by file entry @e, if it is of the sample of @in,
 * whose key is the @key bytes of @name: same key and shard, plain, and
 * next to the range in the shard. */
static bool sample_member(const struct shard_index *idx, const struct shard_inode *in,
			  const char *name, size_t key, uint32_t e, uint64_t *lo, uint64_t *hi)
{
	char other[PATH_COMPONENT_MAX + 1];
	struct shard_inode m;

	if (shard_index_check(idx, e))
		return false;
	shard_index_entry(idx, e, &m);
	if (!S_ISREG(m.mode) || (m.flags & SHARD_INODE_SPARSE) || m.shard != in->shard ||
	    m.data > *hi + SHARDFS_SAMPLE_GAP || m.data + m.size + SHARDFS_SAMPLE_GAP < *lo ||
	    shard_index_name(idx, e, other) < key || memcmp(name, other, key))
		return false;
	*lo = m.data < *lo ? m.data : *lo;
	*hi = m.data + m.size > *hi ? m.data + m.size : *hi;
	return true;
}

/*
 * The bytes of the sample file entry @e (plain) belongs to, in its shard:
 * its own data and that of the files of its key next to it in its
 * directory (sorted by name: a key's files are adjacent) whose data lie
 * next to it in the shard, as a WebDataset writer puts key.jpg,
 * key.json, key.cls.  At most SHARDFS_WILLREAD_MAX bytes: else the file's
 * first ones.
 */
static void sample_extent(const struct shard_index *idx, uint32_t e,
			  const struct shard_inode *in, uint64_t *lo, uint64_t *hi)
{
	char name[PATH_COMPONENT_MAX + 1];
	size_t key = key_len(name, shard_index_name(idx, e, name));
	struct shard_inode dir = { 0 };
	uint64_t first, end;

	*lo = in->data;
	*hi = in->data + in->size;
	/* a hard-link group's first name: its directory may not have been
	 * read yet, unlike those of the names the kernel asked for */
	if (shard_index_dir(idx, in->parent, &dir))
		key = 0;
	first = dir.data;
	end = dir.data + dir.size;
	for (uint32_t i = e; key && i > first && e - i < SHARDFS_SAMPLE_FILES &&
	     sample_member(idx, in, name, key, i - 1, lo, hi); i--)
		;
	for (uint32_t i = e + 1; key && i < end && i - e <= SHARDFS_SAMPLE_FILES &&
	     sample_member(idx, in, name, key, i, lo, hi); i++)
		;
	if (*hi - *lo > SHARDFS_WILLREAD_MAX) {
		*lo = in->data;
		*hi = in->data + (in->size < SHARDFS_WILLREAD_MAX ? in->size : SHARDFS_WILLREAD_MAX);
	}
}

/* shardfs_read() and shardfs_splice(): a read of regular file entry @e,
 * @in, to @to. */
static ssize_t read_file(struct shardfs *fs, uint32_t e, const struct shard_inode *in,
			 const struct read_to *to, size_t size, uint64_t off)
{
	unsigned forward;
	ssize_t rc;

	assert(S_ISREG(in->mode));
	if (off >= in->size)
		return 0;
	if (size > in->size - off)
		size = in->size - off;
	if (in->flags & SHARD_INODE_SPARSE) {
		assert(to->pipe < 0);	/* shardfs_splice() sends none here */
		rc = read_sparse(fs, in, to->buf, size, off);
	} else {
		uint64_t lo, hi;

		if (!off) {
			sample_extent(&fs->idx, e, in, &lo, &hi);
			shard_source_advise(fs->set.shards[in->shard].src, lo, hi - lo,
					    SHARD_SOURCE_WILLREAD);
		}
		rc = shard_pread(fs, in->shard, to, size, in->data + off, &forward);
		if (rc >= 0 && !forward)
			atomic_fetch_add_explicit(&fs->counters.random_read_bytes,
						  rc, memory_order_relaxed);
		if (rc >= 0)
			pushahead_read(&fs->push, e, in->data + off, in->data + off + size,
				       forward);
	}
	if (rc < 0)
		atomic_fetch_add_explicit(&fs->counters.errors, 1,
					  memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&fs->counters.read_bytes, rc,
					  memory_order_relaxed);
	return rc;
}

ssize_t shardfs_read(struct shardfs *fs, uint64_t ino, char *buf, size_t size,
		     uint64_t off)
{
	int node = control_node_of(&fs->control, ino);
	struct shard_inode in;

	if (node == CONTROL_DIR)
		return -EISDIR;
	if (node > CONTROL_DIR)
		return control_read(&fs->control, node, buf, size, off);
	if (!shard_index_get(&fs->idx, ino, &in))
		return -ENOENT;
	if (!S_ISREG(in.mode))
		return -EISDIR;
	return read_file(fs, (uint32_t)(ino - 1), &in, &(struct read_to){ buf, -1 }, size, off);
}

/* Whether [@off, @off + @size) of member @ino, clamped to its end, is at
 * least @min bytes that can be spliced; its entry into *@in. */
static bool splice_member(const struct shardfs *fs, uint64_t ino, size_t size,
			  uint64_t off, size_t min, struct shard_inode *in)
{
	if (control_node_of(&fs->control, ino) >= 0 || !shard_index_get(&fs->idx, ino, in) ||
	    !S_ISREG(in->mode) || (in->flags & SHARD_INODE_SPARSE) ||
	    !fs->set.shards[in->shard].src->ops->splice || off >= in->size)
		return false;
	return (size < in->size - off ? size : in->size - off) >= min;
}

ssize_t shardfs_splice(struct shardfs *fs, uint64_t ino, int pipe_fd,
		       size_t size, uint64_t off, size_t min)
{
	struct shard_inode in;

	assert(pipe_fd >= 0);
	if (!splice_member(fs, ino, size, off, min, &in))
		return -EAGAIN;
	return read_file(fs, (uint32_t)(ino - 1), &in, &(struct read_to){ NULL, pipe_fd },
			 size, off);
}

void shardfs_splice_done(struct shardfs *fs, uint64_t ino, size_t len,
			 uint64_t off)
{
	struct shard_inode in;
	bool found = shard_index_get(&fs->idx, ino, &in);

	assert(found && S_ISREG(in.mode) && off + len <= in.size);
	(void)found;
	shard_source_advise(fs->set.shards[in.shard].src, in.data + off, len,
			    SHARD_SOURCE_DONTNEED);
}

void shardfs_statfs(const struct shardfs *fs, struct statvfs *sv)
{
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = SHARDFS_BLKSIZE;
	sv->f_frsize = 512;
	sv->f_blocks = (fs->idx.counts.bytes + 511) / 512;
	sv->f_files = shard_index_nr(&fs->idx);
	sv->f_namemax = PATH_COMPONENT_MAX;
	sv->f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
}

/* Names of the attributes, in listxattr order. */
static const char *const xattr_names[] = {
	"user.shardfs.shard", "user.shardfs.shard_index",
	"user.shardfs.offset", "user.shardfs.key",
};

#define NR_XATTRS (sizeof(xattr_names) / sizeof(xattr_names[0]))

/* The WebDataset key of entry @e (path.h), NUL-terminated in @buf. */
static ssize_t entry_key(const struct shardfs *fs, uint32_t e, char *buf,
			 size_t size)
{
	ssize_t len = shard_index_entry_path(&fs->idx, e, buf, size);

	if (len < 0)
		return len;
	len = (ssize_t)path_sample_key_len(buf, (size_t)len);
	buf[len] = '\0';
	return len;
}

/* Render attribute @i of member entry @e into @val; returns its length. */
static ssize_t xattr_value(const struct shardfs *fs, uint32_t e, size_t i,
			   char *val, size_t size)
{
	struct shard_inode in;

	shard_index_entry(&fs->idx, e, &in);
	switch (i) {
	case 0:
		return snprintf(val, size, "%s", fs->set.shards[in.shard].path);
	case 1:
		return snprintf(val, size, "%" PRIu32, in.shard);
	case 2:
		return snprintf(val, size, "%" PRIu64, shard_index_data_offset(&fs->idx, &in));
	default:
		return entry_key(fs, e, val, size);
	}
}

/* Regular files carry the attributes; nothing else does. */
static bool xattr_inode(const struct shardfs *fs, uint64_t ino)
{
	struct shard_inode in;

	return shard_index_get(&fs->idx, ino, &in) && S_ISREG(in.mode);
}

ssize_t shardfs_getxattr(const struct shardfs *fs, uint64_t ino,
			 const char *name, char *buf, size_t size)
{
	char val[PATH_MAX];
	ssize_t len;

	if (!xattr_inode(fs, ino))
		return -ENODATA;
	for (size_t i = 0; i < NR_XATTRS; i++) {
		if (strcmp(name, xattr_names[i]))
			continue;
		len = xattr_value(fs, (uint32_t)(ino - 1), i, val, sizeof(val));
		if (len < 0 || (size_t)len >= sizeof(val))
			return -ENAMETOOLONG;
		if (size && (size_t)len > size)
			return -ERANGE;
		if (size)
			memcpy(buf, val, len);
		return len;
	}
	return -ENODATA;
}

ssize_t shardfs_listxattr(const struct shardfs *fs, uint64_t ino, char *buf,
			  size_t size)
{
	size_t len = 0;

	if (!xattr_inode(fs, ino))
		return 0;
	for (size_t i = 0; i < NR_XATTRS; i++)
		len += strlen(xattr_names[i]) + 1;
	if (!size)
		return (ssize_t)len;
	if (len > size)
		return -ERANGE;
	for (size_t i = 0, at = 0; i < NR_XATTRS; i++) {
		memcpy(buf + at, xattr_names[i], strlen(xattr_names[i]) + 1);
		at += strlen(xattr_names[i]) + 1;
	}
	return (ssize_t)len;
}

void shardfs_op_done(struct shardfs *fs, enum shardfs_op op, uint64_t start_ns)
{
	struct shardfs_op_counter *c = &fs->counters.ops[op];

	atomic_fetch_add_explicit(&c->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->nsec, monotonic_ns() - start_ns,
				  memory_order_relaxed);
}

uint64_t shardfs_requests(const struct shardfs *fs)
{
	uint64_t n = 0;

	for (int i = 0; i < SHARDFS_NR_OPS; i++)
		n += atomic_load_explicit(&fs->counters.ops[i].count,
					  memory_order_relaxed);
	return n;
}

void shardfs_count_uring_request(struct shardfs *fs)
{
	atomic_fetch_add_explicit(&fs->counters.uring_requests, 1,
				  memory_order_relaxed);
}
