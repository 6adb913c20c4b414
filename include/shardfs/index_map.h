/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_map.h - an index file's bytes, served from the file's own pages,
 * which nothing done to the file afterwards can change or take away.
 *
 * A loaded index is read through one read-only mapping whose address
 * never changes.  Where the kernel grants a read lease on the file (we own
 * it or have CAP_LEASE, the file system is local, no one has the file
 * open for writing), the mapping is of the file itself: its pages are the
 * page cache's, shared and reclaimable, and a mount touches only what it
 * reads.  Whoever then opens the file for writing or truncates it waits
 * (at most /proc/sys/fs/lease-break-time, 45 s by default) while a
 * watcher thread copies the file, whose bytes cannot change meanwhile, to
 * a file only this process holds (O_TMPFILE in the index's directory,
 * filled by copy_file_range(2), a reflink where the file system has them),
 * maps the copy over the same address in one step, and lets the lease go.
 * A rename or unlink over the file needs nothing: the mapping keeps the
 * old inode.  Where no lease is granted, the file is copied the same way
 * at open; anonymous memory is the last resort.  Measured in
 * docs/benchmarks-scale.md.
 *
 * What is not covered: a process that stays stopped longer than the
 * lease-break time while the file is written (the kernel then lets the
 * writer go), and writes the kernel does not see, from another machine to
 * a network file system whose leases do not cover them.
 *
 * The break is told by SIGIO to the process owning the lease.  A process
 * that loads an index and then forks to serve it (the daemon) hands the
 * leases over: index_map_handoff() before the fork, index_map_adopt() in
 * the process that serves; a break in between waits for the adopter.
 *
 * Thread-safety: index_map_open() and index_map_free() may run in any
 * thread, concurrently with readers of other maps; the bytes at
 * index_map.addr may be read by any number of threads at any time,
 * during a switch to a copy included.
 */
#ifndef SHARDFS_INDEX_MAP_H
#define SHARDFS_INDEX_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* What an index_map's address maps now. */
enum index_map_kind {
	INDEX_MAP_FILE,		/* the index file itself, under a read lease */
	INDEX_MAP_COPY,		/* an unlinked copy only this process holds */
	INDEX_MAP_ANON,		/* a copy in anonymous memory */
};

struct index_map {
	const char *addr;	/* the bytes; the same address for life */
	size_t len;		/* bytes mapped: the file's size when leased
				 * or copied */
	enum index_map_kind kind; /* what addr maps now */
	int fd;			/* the leased file; -1 once served from a copy */
	bool leased;		/* a lease was granted at open: leased_st
				 * describes the file the bytes are */
	struct stat leased_st;	/* fstat of the file once leased */
	char *path;		/* the index file, for the copy's directory
				 * and messages */
	struct index_map *next;	/* in the watcher's list while leased */
};

/*
 * Map the index file @path, open read-only as @fd (which the map takes
 * over, also on failure).  Files shorter than @min_len are refused.
 * Returns 0 with *@out set, or -errno with a reason naming the byte
 * offset in @msg.
 */
int index_map_open(struct index_map **out, int fd, const char *path,
		   size_t min_len, char *msg, size_t msg_len);

/* Unmap @m and let its lease go (NULL: nothing). */
void index_map_free(struct index_map *m);

/* Before a fork whose child serves the maps: no one is told of a break,
 * and this process's watcher thread has ended. */
void index_map_handoff(void);

/*
 * In the process that serves the maps (after index_map_handoff() and a
 * fork, or in the same process): this process is told of breaks, and a
 * break that began meanwhile is served now.
 */
void index_map_adopt(void);

#endif
