/*
 * path.h - normalisation of member names taken from untrusted archives.
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

#include <stddef.h>

/* Longest single path component; Linux cannot look up anything longer. */
#define PATH_COMPONENT_MAX 255

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

/* A short English description of a verdict, for warnings. */
const char *path_verdict_str(enum path_verdict verdict);

#endif
