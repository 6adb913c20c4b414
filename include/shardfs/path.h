/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path.h - normalisation of member names taken from untrusted archives,
 * sample keys, and which listed file names are shards.
 *
 * Tar member names are raw bytes chosen by whoever wrote the shard.  Before
 * a name enters the index it is rewritten to the canonical relative form
 * that GNU tar's extraction would produce:
 *
 *   "/a//b/./c/"  ->  "a/b/c"        "./x" -> "x"        "." -> "" (root)
 *
 * Names with a ".." component are refused outright (GNU tar refuses them
 * too), so nothing can ever resolve outside the mount root.  No encoding
 * conversion is done: a name is any byte string without NUL.
 */
#ifndef SHARDFS_PATH_H
#define SHARDFS_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* Longest single path component; Linux cannot look up anything longer. */
#define PATH_COMPONENT_MAX 255

/*
 * The one name no member may take at the top of the mount: the hidden
 * control directory (control.h).  Members under it are not served, and
 * the classes layout never makes a class of it.
 */
#define CONTROL_DIR_NAME ".shardfs"

enum path_verdict {
	PATH_VALID,		/* a normal relative path */
	PATH_IS_ROOT,		/* normalised to the empty path (the root) */
	PATH_IS_EMPTY,		/* the member had no name at all */
	PATH_HAS_DOTDOT,	/* a ".." component: refused */
	PATH_HAS_NUL,		/* an embedded NUL byte (PAX only): refused */
	PATH_TOO_LONG,		/* a component exceeds PATH_COMPONENT_MAX */
};

/*
 * Normalise the @len bytes at @path in place and store the new length in
 * @len.  The result never starts or ends with '/', never holds "//" or a
 * "." component, and is not NUL-terminated by this function.
 */
enum path_verdict path_normalise(char *path, size_t *len);

/*
 * Bytes of the (normalised) member path @path that form its WebDataset
 * sample key: everything up to the first '.' of the last component, so
 * that "a/0001.seg.png" belongs to sample "a/0001".  A leading dot is part
 * of the name (a hidden file): ".x.txt" has the key ".x" and ".cls" is a
 * sample of its own with no extension.  A component without a dot is its
 * own key.  Directories above the last component are part of the key,
 * dots and all ("a.d/x.y" -> "a.d/x").  Used by the mount's layouts, the
 * user.shardfs.key attribute and shardfs-pack alike.
 */
size_t path_sample_key_len(const char *path, size_t len);

/* A short English description of a verdict, for warnings. */
const char *path_verdict_str(enum path_verdict verdict);

/*
 * Whether a file or object called @name is taken as a shard when its
 * directory (local) or prefix (s3://) is listed: *.tar, *.tar.gz, *.tgz,
 * *.tar.zst.  One rule for both, so that a set packed with shardfs-pack
 * --compress mounts the same from a disk and from S3.  What a shard is,
 * its bytes tell; the name only picks the candidates.
 */
bool path_is_shard_name(const char *name);

/* The suffixes of path_is_shard_name(), for messages. */
#define PATH_SHARD_SUFFIXES "*.tar, *.tar.gz, *.tgz or *.tar.zst"

#endif
