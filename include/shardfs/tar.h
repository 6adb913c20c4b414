/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tar.h - a header-only scanner for tar archives.
 *
 * tar_scan() walks an archive from its first header to its end-of-archive
 * marker and reports every member through a callback, without ever reading
 * member data: it seeks over it.  It understands v7, ustar (with the
 * 155-byte prefix), star, GNU (long names 'L'/'K', base-256 numbers, old
 * and PAX-encoded sparse files) and POSIX pax ('x' and 'g' headers).
 *
 * Contract:
 *  - The archive is untrusted.  Any inconsistency that makes it impossible
 *    to know where the next header is (bad checksum, truncated header,
 *    member data past the end of the file, malformed numbers or PAX
 *    records, limits below exceeded) stops the scan with -EINVAL and a
 *    message naming the byte offset of the offending header in *err.
 *  - Oddities that do not affect framing (unknown member types, lone zero
 *    blocks) are reported through ops->warn and the scan goes on.
 *  - Strings in struct tar_member are raw bytes, not NUL-terminated, and
 *    valid only during the callback.
 *
 * Thread-safety: a scan owns its buffers; scans of different archives may
 * run concurrently.
 */
#ifndef SHARDFS_TAR_H
#define SHARDFS_TAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardfs/source.h"

#define TAR_BLOCK_SIZE 512

/* Largest body of an 'L', 'K', 'x' or 'g' member that is accepted (real
 * archives carry multi-megabyte extended attributes in PAX headers). */
#define TAR_META_MAX (16u << 20)
/* Most extents a sparse member may have. */
#define TAR_SPARSE_EXTENTS_MAX (1u << 20)
/* Bytes a scan reads at once while headers are dense: over shards of
 * tiny members, 256 KiB took 8 % less CPU than 64 KiB (four times the
 * reads) and than 1 MiB (a copy into a window that misses the cache). */
#define TAR_WINDOW_SIZE (256u * 1024)

enum tar_type {
	TAR_FILE,	/* regular file (also contiguous, unknown types) */
	TAR_DIR,	/* directory */
	TAR_SYMLINK,	/* symbolic link; link holds the target */
	TAR_HARDLINK,	/* hard link; link holds the target member's name */
	TAR_SPECIAL,	/* device node, FIFO or socket: not served */
};

/* One stored run of a sparse file: bytes the archive really holds. */
struct tar_extent {
	uint64_t logical;	/* offset of the run in the file */
	uint64_t length;	/* bytes in the run */
	uint64_t physical;	/* absolute offset of the run in the archive */
};

struct tar_member {
	const char *path;	/* member name as stored, after L/PAX/prefix */
	size_t path_len;	/* bytes in path */
	const char *link;	/* link target (symlinks and hard links) */
	size_t link_len;	/* bytes in link; 0 when there is none */
	enum tar_type type;	/* what the member is */
	uint32_t mode;		/* permission bits (07777) */
	uint32_t uid;		/* owner, header or PAX */
	uint32_t gid;		/* group, header or PAX */
	int64_t mtime_sec;	/* modification time, seconds (may be < 0) */
	uint32_t mtime_nsec;	/* nanoseconds, from PAX mtime fractions */
	uint64_t size;		/* logical file size (sparse: the real size) */
	uint64_t header_offset;	/* offset of the member's first header block */
	uint64_t data_offset;	/* offset of the first byte of stored data */
	bool sparse;		/* a GNU sparse member: its data is extents */
	const struct tar_extent *extents; /* the sparse map (if sparse) */
	size_t nr_extents;	/* entries in extents; 0: all holes */
	const char *data;	/* a file's size bytes when the scan read them
				 * with its header (small members), valid in
				 * the callback; NULL otherwise */
};

/* Where and why a scan stopped. */
struct tar_error {
	uint64_t offset;	/* byte offset of the header at fault */
	char msg[160];		/* what was wrong, without the offset */
};

struct tar_scan_ops {
	/* Called for every member; a negative return stops the scan with it. */
	int (*member)(void *arg, const struct tar_member *m);
	/* Called for recoverable oddities; may be NULL. */
	void (*warn)(void *arg, uint64_t offset, const char *msg);
};

/*
 * Scan the archive served by @src (src->size bytes; source.h).  Returns 0
 * when the end-of-archive marker (or the end of the stream on a block
 * boundary) is reached, -EINVAL with *err filled for a malformed archive,
 * -EIO with *err filled when reading fails, -ENOMEM, or a callback's
 * negative return.
 */
int tar_scan(struct shard_source *src, const struct tar_scan_ops *ops,
	     void *arg, struct tar_error *err);

/*
 * tar_scan() reading into the caller's @window of TAR_WINDOW_SIZE bytes:
 * a thread that scans shard after shard lends each scan the same one (a
 * window allocated per shard cost a page fault per 4 KiB of it for every
 * shard: with 1 MiB windows, a third of the faults of a build of tiny
 * members).
 */
int tar_scan_window(struct shard_source *src, char *window,
		    const struct tar_scan_ops *ops, void *arg,
		    struct tar_error *err);

/*
 * Parse a numeric header field: octal digits (leading spaces allowed,
 * ended by NUL or space) or GNU base-256 (first byte 0x80 or 0xff).
 * Returns 0 or -EINVAL.  Exposed for unit tests.
 */
int tar_parse_number(const char *field, size_t len, int64_t *value);

#endif
