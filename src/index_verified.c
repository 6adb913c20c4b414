/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_verified.c - the record that an index file passed its full check
 * (index_verified.h says what it vouches for and why).
 *
 * A fixed 80-byte file, written once per index file and read at each
 * mount: one open, fstat and pread, against the full check's pass over
 * every byte of the index (0.25 s per 5 M members warm; the whole file
 * from the disk cold).  Any doubt (another size, owner or checksum, a
 * field that differs) means a full check, never an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "shardfs/index_verified.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

#define INDEX_VERIFIED_MAGIC "SHFSVRF2"

/* The record, in the host's byte order (as the index is). */
struct index_verified_rec {
	char magic[8];		/* INDEX_VERIFIED_MAGIC */
	uint64_t ino;		/* st_ino of the index file checked */
	uint64_t size;		/* its st_size */
	int64_t ctime_sec;	/* its change time, seconds */
	int64_t ctime_nsec;	/* and nanoseconds */
	int64_t mtime_sec;	/* its modification time, seconds */
	int64_t mtime_nsec;	/* and nanoseconds */
	uint64_t header_xxh3;	/* the checksum in its header */
	uint64_t recorded_sec;	/* when the record was written (for people) */
	uint64_t xxh3;		/* of the bytes above */
};
_Static_assert(sizeof(struct index_verified_rec) == 80, "record layout");

/* The record that @st and @header_xxh3 call for. */
static struct index_verified_rec record_of(const struct stat *st, uint64_t header_xxh3)
{
	struct index_verified_rec r = {
		.ino = (uint64_t)st->st_ino,
		.size = (uint64_t)st->st_size,
		.ctime_sec = st->st_ctim.tv_sec,
		.ctime_nsec = st->st_ctim.tv_nsec,
		.mtime_sec = st->st_mtim.tv_sec,
		.mtime_nsec = st->st_mtim.tv_nsec,
		.header_xxh3 = header_xxh3,
	};

	memcpy(r.magic, INDEX_VERIFIED_MAGIC, sizeof(r.magic));
	return r;
}

/* The record's path for @index_path in @path; false if too long. */
static bool record_path(const char *index_path, char path[PATH_MAX])
{
	return snprintf(path, PATH_MAX, "%s%s", index_path, INDEX_VERIFIED_SUFFIX) < PATH_MAX;
}

bool index_verified_holds(const char *index_path, const struct stat *st,
			  uint64_t header_xxh3)
{
	struct index_verified_rec want = record_of(st, header_xxh3), got;
	char path[PATH_MAX], why[160];
	struct stat rs;
	bool holds;
	int fd;

	if (!record_path(index_path, path))
		return false;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return false;
	holds = !fstat(fd, &rs) && S_ISREG(rs.st_mode) &&
		rs.st_size == (off_t)sizeof(got) &&
		!stat_trusted(&rs, false, why, sizeof(why)) &&
		pread(fd, &got, sizeof(got), 0) == (ssize_t)sizeof(got) &&
		got.xxh3 == XXH3_64bits(&got, offsetof(struct index_verified_rec, xxh3));
	close(fd);
	/* all but the time of writing, which vouches for nothing */
	return holds && !memcmp(&got, &want, offsetof(struct index_verified_rec, recorded_sec));
}

/*
 * Write @r to a new file beside @path and rename it over @path, after
 * removing what earlier writers that crashed between the two left.
 */
static int write_record(const char *path, struct index_verified_rec *r, mode_t mode)
{
	int removed, rc = file_replace(path, r, sizeof(*r), mode, &removed);

	if (removed)
		log_info("%s.tmp.*: removed %d temporary record(s) left by writers that "
			 "did not finish", path, removed);
	return rc;
}

void index_verified_record(const char *index_path, const struct stat *st,
			   uint64_t header_xxh3)
{
	struct index_verified_rec r = record_of(st, header_xxh3);
	char path[PATH_MAX];
	struct timespec now;
	int rc;

	if (clock_gettime(CLOCK_REALTIME, &now) ||
	    now.tv_sec - st->st_ctim.tv_sec < INDEX_VERIFIED_SETTLED_S ||
	    !record_path(index_path, path))
		return;
	r.recorded_sec = (uint64_t)now.tv_sec;
	r.xxh3 = XXH3_64bits(&r, offsetof(struct index_verified_rec, xxh3));
	rc = write_record(path, &r, st->st_mode & 0644);
	if (rc)
		log_debug("%s: the record of the index's check not written: %s",
			  path, strerror(-rc));
}

void index_verified_forget(const char *index_path)
{
	char path[PATH_MAX];

	if (record_path(index_path, path) && unlink(path) && errno != ENOENT)
		log_debug("%s: cannot remove: %s", path, strerror(errno));
}
