/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verify.h - check what a shard set's index serves against a second,
 * independent reader of the shards: libarchive.
 *
 * shardfs parses tar itself (tar.c) and decodes gzip itself
 * (source_gzip.c); a bug in either would serve wrong files without any
 * error.  verify_shards() reads every shard again with libarchive, which
 * shares no code with them, and compares every regular file it finds
 * (path, size, and an xxh3 of the content) with what the index serves for
 * that path, read through the same path as a mount's reads.  Used by
 * shardfs-index --verify, after copying a data set and by the tests on
 * every fixture.
 *
 * What counts as a difference: a file libarchive finds that the index
 * does not serve (unless a later shard replaces it), a file served from a
 * shard in which libarchive does not find it, a different size, a
 * different content, a shard libarchive cannot read to its end.  Names
 * are compared after the normalisation shardfs applies (path.h); names
 * shardfs refuses (a ".." component) are not looked for.
 */
#ifndef SHARDFS_VERIFY_H
#define SHARDFS_VERIFY_H

#include <stdint.h>
#include <stdio.h>

#include "shardfs/fs.h"

/* What a verification found. */
struct verify_result {
	uint64_t files;		/* regular files compared */
	uint64_t shadowed;	/* files replaced by a later shard */
	uint64_t differences;	/* each reported on the report stream */
};

/*
 * Verify every shard of @fs (its index built or loaded, default tree
 * layout) against libarchive, writing one line per difference to @report:
 * "SHARD: offset N: PATH: what differs".  Returns 0 with *@res, or
 * -errno when verification itself could not run (out of memory).
 */
int verify_shards(struct shardfs *fs, FILE *report, struct verify_result *res);

#endif
