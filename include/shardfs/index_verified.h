/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_verified.h - a record that an index file passed its full check,
 * so that a later mount of the same, unchanged file need not read all of
 * it again.
 *
 * The full check (index_file.c: every section's checksum, every entry's
 * bounds) reads the whole index: about 0.25 s of CPU per 5 M members from
 * the page cache, and the whole file from the disk after a reboot.  After
 * it passes, the loader writes <index>.verified next to the index, which
 * names the file as it was checked: inode, size, change and modification
 * times, and the header's checksum (which covers every section's).  A
 * later load that finds the file as named checks the header and the shard
 * table only, and serves the rest from the pages it touches.
 *
 * Not the device number: a host numbers the file systems it mounts as it
 * mounts them, so the nodes of a fleet that mount one index file from
 * shared storage (NFS, Lustre, CephFS) each see another, and each node's
 * record would name a file no other node sees.  With it, every node's
 * first mount read and checked the whole index, wrote its own record over
 * the last one, and so made the next mount elsewhere check it all again
 * (about 1 s and the whole file from the storage at 20 M members, per node
 * and mount).  What the device told apart, a file of another file system
 * with the same inode number, size and both times to the nanosecond
 * beside the same path, does not arise: a copy gets the time of copying.
 *
 * Why a name stands for the same bytes: the check ran under a read lease
 * (index_map.h), so nothing wrote the file meanwhile; a later write,
 * truncation or rename over it changes its change time (which only the
 * kernel sets) or its inode.  A change within the time stamp's
 * granularity of the checked state would keep the change time, so a
 * record is written only for a file whose change time is
 * INDEX_VERIFIED_SETTLED_S whole seconds behind the clock: any later
 * change then has a later one, even where time stamps count whole or
 * even seconds.  The record is input, not state: it counts only as a
 * regular file of its exact size, owned by us or root and writable by no
 * one else (as the index itself), with its own checksum.
 *
 * What a record cannot see, bytes changed beneath the file system (a
 * disk's bit rot, a write to the block device) between two mounts, the
 * mount finds as it goes: each span of the per-member sections is checked
 * against its sum when first touched (index_guard.h), and a span that
 * fails removes the record.  shardfs-index --check always checks all.
 *
 * Thread-safety: none needed; both functions touch only the files named.
 */
#ifndef SHARDFS_INDEX_VERIFIED_H
#define SHARDFS_INDEX_VERIFIED_H
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

/* Seconds a file's change time must lie behind the clock for a record:
 * more than the coarsest time stamps of the file systems an index may
 * live on (1 s: ext4 with small inodes, NFSv3 servers). */
#define INDEX_VERIFIED_SETTLED_S 2

/* Appended to the index file's path for its record. */
#define INDEX_VERIFIED_SUFFIX ".verified"

/*
 * Does a record next to @index_path say that the file described by @st
 * (taken under its read lease), whose header checksum is @header_xxh3,
 * passed the full check?  False for no record, or one not trusted or not
 * matching.
 */
bool index_verified_holds(const char *index_path, const struct stat *st,
			  uint64_t header_xxh3);

/*
 * Record that the index at @index_path, as @st describes it, passed the
 * full check, unless its change time is too recent (see above).  Written
 * beside the index (a temporary file renamed over the record, the
 * stale ones of writers that crashed removed first) with the index's
 * permissions; a failure is logged as a debug message and costs
 * the next mount a full check, nothing else.
 */
void index_verified_record(const char *index_path, const struct stat *st,
			   uint64_t header_xxh3);

/*
 * Remove the record next to @index_path: its bytes were found to differ
 * from those checked (index_guard.h), so the next mount checks the whole
 * file (and a build replaces it).
 */
void index_verified_forget(const char *index_path);

#endif
