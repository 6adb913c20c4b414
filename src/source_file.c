/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_file.c - a shard in a local file: pread(2), splice(2) and
 * posix_fadvise(2).
 *
 * The descriptor stays open for the life of the mount, so that no request
 * after the mount opens a file on the shard storage.  Hints go straight
 * to the kernel: WILLNEED starts its readahead of the range, DONTNEED
 * drops pages a reader consumed (fs.c says why that pays), which is why
 * a file is written back when it is opened (write_back()).
 *
 * Reads at random (a share of a shuffled epoch: one sample here, the
 * next elsewhere; fs.c decides) go through a second descriptor of the
 * same file with POSIX_FADV_RANDOM, opened at the first such read: the
 * kernel's readahead of the one descriptor read 1.10-1.16x the bytes a
 * node of 1, 2 or 8 used from the disk over io_uring and 1.44-2.07x over
 * /dev/fuse (5,000 samples of 60-140 KB, 4 threads, the daemon's
 * read_bytes); without it 1.02-1.07x over either (what is left: whole
 * pages at the samples' ends).  On the one descriptor the hint would
 * also take readahead from the index scan and from forward readers
 * (docs/benchmarks.md, tuning record).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardfs/log.h"
#include "shardfs/source.h"

/* random_fd before the first read at random, and after it could not be
 * opened (those reads then go through fd). */
#define FILE_FD_NOT_YET (-1)
#define FILE_FD_NONE (-2)
/* Descriptors left to the rest of the daemon (FUSE pipes, control
 * files, index copies): a second descriptor is not opened into them. */
#define FILE_FD_RESERVE 64

struct source_file {
	struct shard_source base; /* base.size is the size at open */
	int fd;			/* open read-only until close */
	atomic_int random_fd;	/* the same file, for reads at random
				 * (POSIX_FADV_RANDOM), or FILE_FD_* */
};

/* Read @len bytes at @off of @fd into @buf, or, @pipe_fd >= 0, splice
 * them into that pipe; as read() does (source.h). */
static ssize_t file_transfer(int fd, void *buf, int pipe_fd, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		loff_t pos = (loff_t)(off + done);
		ssize_t n = pipe_fd < 0 ?
			pread(fd, (char *)buf + done, len - done, pos) :
			splice(fd, &pos, pipe_fd, NULL, len - done, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += n;
	}
	return (ssize_t)done;
}

static ssize_t file_read(struct shard_source *src, void *buf, size_t len,
			 uint64_t off)
{
	return file_transfer(((struct source_file *)src)->fd, buf, -1, len, off);
}

static ssize_t file_splice(struct shard_source *src, int pipe_fd, size_t len,
			   uint64_t off)
{
	return file_transfer(((struct source_file *)src)->fd, NULL, pipe_fd, len, off);
}

/*
 * @fd's file opened again, as a new open file description (its own
 * readahead state) of the same inode: through /proc/self/fd, never by
 * its path, which may name another file by now.  Without readahead; not
 * into the last FILE_FD_RESERVE descriptors.  -1 when it cannot be.
 */
static int reopen_random(int fd)
{
	char path[64];
	struct stat a, b;
	struct rlimit rl;
	int nfd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	nfd = open(path, O_RDONLY | O_CLOEXEC);
	if (nfd < 0)
		return -1;
	if (getrlimit(RLIMIT_NOFILE, &rl) || (rlim_t)nfd + FILE_FD_RESERVE >= rl.rlim_cur ||
	    fstat(fd, &a) || fstat(nfd, &b) || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
		close(nfd);
		return -1;
	}
	posix_fadvise(nfd, 0, 0, POSIX_FADV_RANDOM);
	return nfd;
}

/* The descriptor for reads at random: random_fd, opened at the first
 * (one thread keeps what it opened), else fd. */
static int random_fd(struct source_file *f)
{
	int fd = atomic_load_explicit(&f->random_fd, memory_order_acquire);
	int expected = FILE_FD_NOT_YET;

	if (fd == FILE_FD_NOT_YET) {
		fd = reopen_random(f->fd);
		if (fd < 0)
			fd = FILE_FD_NONE;
		if (!atomic_compare_exchange_strong_explicit(&f->random_fd, &expected, fd,
							     memory_order_acq_rel,
							     memory_order_acquire)) {
			if (fd >= 0)
				close(fd);
			fd = expected;
		}
	}
	return fd >= 0 ? fd : f->fd;
}

static ssize_t file_transfer_jumped(struct shard_source *src, void *buf, int pipe_fd,
				    size_t len, uint64_t off)
{
	return file_transfer(random_fd((struct source_file *)src), buf, pipe_fd, len, off);
}

static void file_advise(struct shard_source *src, uint64_t off, uint64_t len,
			enum shard_source_advice advice)
{
	struct source_file *f = (struct source_file *)src;

	/* a length of 0 would mean: to the end of the file; a scan, and a
	 * file being read (WILLREAD), are served best by the kernel's
	 * readahead, as it is */
	if (len && (advice == SHARD_SOURCE_WILLNEED || advice == SHARD_SOURCE_DONTNEED))
		posix_fadvise(f->fd, (off_t)off, (off_t)len,
			      advice == SHARD_SOURCE_WILLNEED ?
			      POSIX_FADV_WILLNEED : POSIX_FADV_DONTNEED);
}

static int file_current_size(struct shard_source *src, uint64_t *size)
{
	struct source_file *f = (struct source_file *)src;
	struct stat st;

	if (fstat(f->fd, &st))
		return -errno;
	*size = (uint64_t)st.st_size;
	return 0;
}

static void file_close(struct shard_source *src)
{
	struct source_file *f = (struct source_file *)src;
	int random = atomic_load(&f->random_fd);

	if (random >= 0)
		close(random);
	close(f->fd);
	free(f);
}

static const struct shard_source_ops file_ops = {
	.read = file_read,
	.splice = file_splice,
	.transfer_jumped = file_transfer_jumped,
	.advise = file_advise,
	.current_size = file_current_size,
	.close = file_close,
};

/*
 * Have the kernel write back the pages of @fd still dirty (a shard
 * written moments before the mount: packed, copied to local disk), and
 * wait for it.  DONTNEED cannot drop a dirty page: for each one the reads
 * met, the kernel started its writeback and then drained the page lists
 * of every CPU, in the reading thread.  Measured on shards copied just
 * before the mount, every file in shard order over /dev/fuse
 * (tests/bench/fresh_compare.py --just-written, docs/benchmarks.md):
 * 485 MB at 648-757 MB/s and 0.50-0.68 daemon CPU-s before, 673-926 MB/s
 * and 0.43-0.62 s after, the mount taking 0.27-0.32 s instead of
 * 0.12-0.17; one shard of 600 files over io_uring: 34-58 ms and up to 558
 * READs (push-ahead fell behind the reader and stayed there), 17-26 ms
 * and at most 47 READs.  A clean file costs one walk of its dirty tags.
 * A hint, as DONTNEED is: a failure changes nothing that is read.
 */
static void write_back(int fd)
{
	(void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE |
			      SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
}

/* Wrap @fd, a regular file described by @st. */
static int file_wrap(int fd, const struct stat *st, struct shard_source **src)
{
	struct source_file *f = malloc(sizeof(*f));

	if (!f)
		return -ENOMEM;
	*f = (struct source_file){
		.base = { .ops = &file_ops, .size = (uint64_t)st->st_size },
		.fd = fd,
		.random_fd = FILE_FD_NOT_YET,
	};
	*src = &f->base;
	return 0;
}

int shard_source_open_fd(int fd, struct shard_source **src)
{
	struct stat st;
	int rc;

	if (fstat(fd, &st)) {
		rc = -errno;
		goto out_close_fd;
	}
	rc = S_ISREG(st.st_mode) ? file_wrap(fd, &st, src) : -EINVAL;
	if (!rc)
		return 0;
out_close_fd:
	close(fd);
	return rc;
}

int shard_source_open_file(const char *path, struct shard_source **src,
			   struct shard_source_info *info, char *msg,
			   size_t msg_len)
{
	struct stat st;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return log_format(msg, msg_len, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st)) {
		rc = log_format(msg, msg_len, -errno, "%s: %s", path, strerror(errno));
		goto out_close_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = log_format(msg, msg_len, -EINVAL, "%s: not a regular file", path);
		goto out_close_fd;
	}
	/* absolute, because the daemon leaves its working directory */
	info->name = realpath(path, NULL);
	if (!info->name) {
		rc = log_format(msg, msg_len, -errno, "%s: %s", path, strerror(errno));
		goto out_close_fd;
	}
	write_back(fd);
	info->stored_size = (uint64_t)st.st_size;
	info->mtime = st.st_mtim;
	info->ctime = st.st_ctim;
	rc = file_wrap(fd, &st, src);
	if (!rc)
		return 0;
	free(info->name);
	info->name = NULL;
	log_format(msg, msg_len, rc, "%s: %s", path, strerror(-rc));
out_close_fd:
	close(fd);
	return rc;
}
