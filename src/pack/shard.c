/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shard.c - write the planned shards, several at once, atomically.
 *
 * A shard is written to "NAME.part" and renamed to NAME only when it is
 * complete and on disk (fsync), so a file under a shard's final name is
 * always whole: an interrupted run leaves at most .part files, which the
 * next run truncates and rewrites.  With --resume, a shard present under
 * its final name with exactly the planned size is kept and only read back
 * to hash it for the manifest; any other size means the input or the
 * options changed, and the run stops rather than mix two plans.
 *
 * Output goes through a buffer: small members are gathered into large
 * writes, file data is read straight into the buffer, and the shard's
 * XXH3 hash is updated at each flush, so nothing is read back.  With
 * --compress each flush is compressed as one gzip member or zstd frame
 * (compress.c) before it is written and hashed.  Shards
 * are independent, so each of --jobs threads takes the next unwritten
 * shard in turn; -j1 keeps the writes sequential on a single disk.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "pack.h"
#include "shardfs/util.h"

/* Bytes gathered before a write; a multiple of PACK_BLOCK. */
#define WRITER_BUF_SIZE (1u << 20)

_Static_assert(WRITER_BUF_SIZE % PACK_BLOCK == 0, "buffer holds whole blocks");
_Static_assert(WRITER_BUF_SIZE >= PACK_HEADER_MAX, "buffer holds a header");

/* One shard being written. */
struct pack_writer {
	int fd;				/* the .part file, -1 once closed */
	bool done;			/* renamed to its final name */
	char path[PACK_PATH_MAX];	/* final name of the shard */
	char temp[PACK_PATH_MAX];	/* path + ".part", written first */
	unsigned char *buf;		/* output not yet written to fd */
	size_t used;			/* bytes in buf */
	uint64_t offset;		/* tar bytes flushed so far */
	uint64_t stored;		/* bytes written to fd so far */
	struct pack_compressor z;	/* --compress; kind NONE: plain */
	struct seek_point *points;	/* --compress: member/frame starts */
	size_t nr_points, cap_points;	/* entries, capacity of points */
	XXH3_state_t *hash;		/* hash of the bytes written so far */
	struct pack_progress *pr;	/* counts the bytes written */
};

/* State shared by the threads writing shards. */
struct shard_pool {
	const struct pack_plan *plan;		/* what to write */
	const struct pack_write_options *opt;	/* where from and where to */
	struct pack_progress *pr;		/* how far we are */
	struct pack_shard_result *results;	/* per shard: hash, kept */
	atomic_size_t next;			/* next shard to take */
	atomic_int error;			/* first failure, 0 if none */
};

/* Name the shard and its .part file after @path. */
static int writer_names(struct pack_writer *w, const char *path)
{
	int n = snprintf(w->temp, sizeof(w->temp), "%s.part", path);

	if (n < 0 || (size_t)n >= sizeof(w->temp)) {
		pack_error("%s.part: path longer than %u bytes", path,
			   PACK_PATH_MAX - 1);
		return -ENAMETOOLONG;
	}
	memcpy(w->path, path, strlen(path) + 1);
	return 0;
}

/* Create the .part file of shard @path; pack_writer_release() undoes it. */
static int pack_writer_init(struct pack_writer *w, const char *path,
			    struct pack_progress *pr, const struct pack_compress *c)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->pr = pr;
	rc = writer_names(w, path);
	if (rc)
		return rc;
	w->buf = malloc(WRITER_BUF_SIZE);
	if (!w->buf || pack_compressor_init(&w->z, c, WRITER_BUF_SIZE)) {
		free(w->buf);
		return -ENOMEM;
	}
	w->hash = XXH3_createState();
	if (!w->hash) {
		rc = -ENOMEM;
		goto out_free_buf;
	}
	XXH3_64bits_reset(w->hash);
	w->fd = open(w->temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (w->fd < 0) {
		rc = pack_errno(w->temp, "cannot create");
		goto out_free_hash;
	}
	return 0;

out_free_hash:
	XXH3_freeState(w->hash);
out_free_buf:
	pack_compressor_release(&w->z);
	free(w->buf);
	return rc;
}

/* Close the shard; unless it was finished, remove its .part file. */
static void pack_writer_release(struct pack_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	if (!w->done)
		unlink(w->temp);
	XXH3_freeState(w->hash);
	pack_compressor_release(&w->z);
	free(w->points);
	free(w->buf);
}

/*
 * The member or frame about to be written starts a seek point, unless
 * the last one is closer than a member span (as shardfs would place it).
 */
static int writer_seek_point(struct pack_writer *w)
{
	const struct seek_point *last = w->nr_points ? &w->points[w->nr_points - 1] : NULL;

	if (last && w->offset - last->out < SEEK_TABLE_MEMBER_SPAN)
		return 0;
	if (array_grow((void **)&w->points, &w->cap_points, w->nr_points + 1,
		       sizeof(*w->points)))
		return -ENOMEM;
	w->points[w->nr_points++] = (struct seek_point){
		.out = w->offset, .in = w->stored, .kind = SEEK_POINT_MEMBER };
	return 0;
}

/* Write out and hash what the buffer holds, compressed if asked to. */
static int writer_flush(struct pack_writer *w)
{
	const unsigned char *out = w->buf;
	size_t len = w->used, done = 0;

	if (w->z.c.kind != PACK_COMPRESS_NONE && w->used) {
		if (writer_seek_point(w))
			return -ENOMEM;
		if (pack_compress_block(&w->z, w->buf, w->used, &len)) {
			pack_error("%s: cannot compress at tar byte %" PRIu64, w->temp,
				   w->offset);
			return -EIO;
		}
		out = w->z.out;
	}
	XXH3_64bits_update(w->hash, out, len);
	while (done < len) {
		ssize_t n = write(w->fd, out + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int rc = n ? -errno : -ENOSPC;

			pack_error("%s: write failed at byte %" PRIu64 ": %s",
				   w->temp, w->stored + done, strerror(-rc));
			return rc;
		}
		done += (size_t)n;
	}
	w->offset += w->used;
	w->stored += len;
	atomic_fetch_add(&w->pr->bytes, w->used);
	w->used = 0;
	return 0;
}

/* Make room for @len more bytes in the buffer. */
static int writer_reserve(struct pack_writer *w, size_t len)
{
	assert(len <= WRITER_BUF_SIZE);
	return WRITER_BUF_SIZE - w->used < len ? writer_flush(w) : 0;
}

/* Append @len zero bytes: padding, or the end-of-archive marker. */
static int writer_zeros(struct pack_writer *w, size_t len)
{
	int rc = writer_reserve(w, len);

	if (rc)
		return rc;
	memset(w->buf + w->used, 0, len);
	w->used += len;
	return 0;
}

/* Read @size bytes of the file open on @fd (@src) into the shard. */
static int writer_copy(struct pack_writer *w, int fd, const char *src,
		       uint64_t size)
{
	uint64_t done = 0;

	while (done < size) {
		size_t want = WRITER_BUF_SIZE - w->used;
		ssize_t n;

		if (!want) {
			int rc = writer_flush(w);

			if (rc)
				return rc;
			want = WRITER_BUF_SIZE;
		}
		if (want > size - done)
			want = (size_t)(size - done);
		n = read(fd, w->buf + w->used, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return pack_errno(src, "read failed");
		if (!n) {
			pack_error("%s: shrank while packing: ends at byte %"
				   PRIu64 " of %" PRIu64, src, done, size);
			return -EIO;
		}
		w->used += (size_t)n;
		done += (size_t)n;
	}
	return 0;
}

/* Copy the data of regular file @e into the shard. */
static int writer_copy_file(struct pack_writer *w, const struct pack_entry *e,
			    const struct pack_write_options *opt)
{
	int flags = O_RDONLY | O_CLOEXEC;
	char src[PACK_PATH_MAX];
	struct stat st;
	int fd, rc;

	/* The walk made sure that every path fits. */
	assert(strlen(opt->src_root) + 1 + e->path_len < sizeof(src));
	snprintf(src, sizeof(src), "%s/%s", opt->src_root, e->path);
	if (!opt->follow_symlinks)
		flags |= O_NOFOLLOW;
	fd = open(src, flags);
	if (fd < 0)
		return pack_errno(src, "cannot open");
	if (fstat(fd, &st)) {
		rc = pack_errno(src, "cannot stat");
		goto out_close_fd;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != e->size) {
		pack_error("%s: changed while packing: %" PRIu64 " bytes when "
			   "the tree was read, now %" PRIu64, src, e->size,
			   (uint64_t)st.st_size);
		rc = -EIO;
		goto out_close_fd;
	}
	/* Small files are read in one call; large ones deserve readahead. */
	if (e->size > WRITER_BUF_SIZE)
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	rc = writer_copy(w, fd, src, e->size);
out_close_fd:
	close(fd);
	return rc;
}

/* Append member @e: its headers, then its data padded to a block. */
static int pack_writer_add(struct pack_writer *w, const struct pack_entry *e,
			   const struct pack_write_options *opt)
{
	int rc = writer_reserve(w, PACK_HEADER_MAX);

	if (rc)
		return rc;
	w->used += pack_ustar_encode(e, w->buf + w->used);
	if (e->type != '0')
		return 0;
	rc = writer_copy_file(w, e, opt);
	if (!rc)
		rc = writer_zeros(w, (size_t)(pack_padded(e->size) - e->size));
	return rc;
}

/* End the archive, put it on disk and give it its final name. */
static int pack_writer_finish(struct pack_writer *w, uint64_t *xxh3)
{
	int rc = writer_zeros(w, 2 * PACK_BLOCK);

	if (!rc)
		rc = writer_flush(w);
	if (!rc && fsync(w->fd))
		rc = pack_errno(w->temp, "cannot sync");
	if (rc)
		return rc;
	rc = close(w->fd) ? pack_errno(w->temp, "cannot close") : 0;
	w->fd = -1;
	if (!rc && rename(w->temp, w->path))
		rc = pack_errno(w->path, "cannot rename the .part file to it");
	w->done = !rc;
	*xxh3 = XXH3_64bits_digest(w->hash);
	return rc;
}

/* Hash the file at @path into *xxh3, counting its bytes as progress. */
static int hash_file(const char *path, uint64_t *xxh3, struct pack_progress *pr)
{
	unsigned char *buf = malloc(WRITER_BUF_SIZE);
	XXH3_state_t *hash = XXH3_createState();
	ssize_t n;
	int fd, rc = -ENOMEM;

	if (!buf || !hash)
		goto out_free_buffers;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = pack_errno(path, "cannot open");
		goto out_free_buffers;
	}
	XXH3_64bits_reset(hash);
	for (;;) {
		n = read(fd, buf, WRITER_BUF_SIZE);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		XXH3_64bits_update(hash, buf, (size_t)n);
		atomic_fetch_add(&pr->bytes, (uint64_t)n);
	}
	rc = n < 0 ? pack_errno(path, "read failed") : 0;
	*xxh3 = XXH3_64bits_digest(hash);
	close(fd);
out_free_buffers:
	XXH3_freeState(hash);
	free(buf);
	return rc;
}

/*
 * With --resume: keep shard @index if an earlier run completed it.
 * Returns 1 when kept, 0 when it must be written, or -errno.
 */
static int shard_keep(struct shard_pool *pool, size_t index, const char *path)
{
	const struct pack_shard *shard = &pool->plan->shards[index];
	struct stat st;
	int rc;

	if (stat(path, &st))
		return errno == ENOENT ? 0 : pack_errno(path, "cannot stat");
	if ((uint64_t)st.st_size != shard->bytes) {
		pack_error("%s: %" PRIu64 " bytes, but this run makes it %"
			   PRIu64 " bytes: the input or the options changed "
			   "since it was written; pack again without --resume",
			   path, (uint64_t)st.st_size, shard->bytes);
		return -EEXIST;
	}
	rc = hash_file(path, &pool->results[index].xxh3, pool->pr);
	if (rc)
		return rc;
	pool->results[index].kept = true;
	atomic_fetch_add(&pool->pr->files, shard->files);
	return 1;
}

/* Write shard @index to @path. */
static int shard_write(struct shard_pool *pool, size_t index, const char *path)
{
	const struct pack_shard *shard = &pool->plan->shards[index];
	struct pack_writer w;
	int rc;

	rc = pack_writer_init(&w, path, pool->pr, &pool->opt->compress);
	if (rc)
		return rc;
	for (size_t i = 0; i < shard->count && !rc; i++) {
		const struct pack_entry *e;

		e = pool->plan->items[shard->first + i];
		if (atomic_load(&pool->error))
			rc = -ECANCELED;
		else
			rc = pack_writer_add(&w, e, pool->opt);
		if (!rc && e->type != '5')
			atomic_fetch_add(&pool->pr->files, 1);
	}
	if (!rc)
		rc = pack_writer_finish(&w, &pool->results[index].xxh3);
	assert(rc || w.offset == shard->bytes);
	if (!rc) {
		pool->results[index].points = w.points;
		pool->results[index].nr_points = w.nr_points;
		pool->results[index].tar = w.offset;
		pool->results[index].stored = w.stored;
		w.points = NULL;
	}
	pack_writer_release(&w);
	return rc;
}

/* Keep or write shard @index. */
static int shard_produce(struct shard_pool *pool, size_t index)
{
	char path[PACK_PATH_MAX];
	int rc;

	rc = pack_pattern_format(pool->opt->pattern, index, path, sizeof(path));
	if (rc) {
		pack_error("shard %zu: no name for it in OUT_PATTERN: %s",
			   index, strerror(-rc));
		return rc;
	}
	if (pool->opt->resume) {
		rc = shard_keep(pool, index, path);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	return shard_write(pool, index, path);
}

static void *shard_worker_main(void *arg)
{
	struct shard_pool *pool = arg;
	int rc = 0, none = 0;

	while (!rc && !atomic_load(&pool->error)) {
		size_t index = atomic_fetch_add(&pool->next, 1);

		if (index >= pool->plan->shard_count)
			break;
		rc = shard_produce(pool, index);
	}
	if (rc)
		atomic_compare_exchange_strong(&pool->error, &none, rc);
	return NULL;
}

int pack_write_shards(const struct pack_plan *plan,
		      const struct pack_write_options *opt,
		      struct pack_progress *pr,
		      struct pack_shard_result *results)
{
	struct shard_pool pool = {
		.plan = plan, .opt = opt, .pr = pr, .results = results,
	};
	unsigned jobs = opt->jobs, started = 0;
	pthread_t *threads;

	if (jobs > plan->shard_count)
		jobs = (unsigned)plan->shard_count;
	threads = calloc(jobs + 1, sizeof(*threads));
	if (!threads)
		return -ENOMEM;
	for (unsigned i = 0; i < jobs; i++) {
		if (pthread_create(&threads[i], NULL, shard_worker_main, &pool))
			break;
		started++;
	}
	if (!started)
		shard_worker_main(&pool);
	for (unsigned i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	return atomic_load(&pool.error);
}
