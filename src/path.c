/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path.c - canonical form of tar member names.
 *
 * One left-to-right pass copies each kept component down over the bytes it
 * came from, so normalisation costs no allocation and O(len) time; it runs
 * once per member during the index build.
 */
#include <string.h>

#include "shardfs/path.h"

enum path_verdict path_normalise(char *path, size_t *len)
{
	size_t in = 0, out = 0, n = *len;

	if (n == 0)
		return PATH_IS_EMPTY;
	if (memchr(path, '\0', n))
		return PATH_HAS_NUL;
	while (in < n) {
		size_t start, clen;

		while (in < n && path[in] == '/')
			in++;
		start = in;
		while (in < n && path[in] != '/')
			in++;
		clen = in - start;
		if (clen == 0 || (clen == 1 && path[start] == '.'))
			continue;
		if (clen == 2 && path[start] == '.' && path[start + 1] == '.')
			return PATH_HAS_DOTDOT;
		if (clen > PATH_COMPONENT_MAX)
			return PATH_TOO_LONG;
		if (out)
			path[out++] = '/';
		memmove(path + out, path + start, clen);
		out += clen;
	}
	*len = out;
	return out ? PATH_VALID : PATH_IS_ROOT;
}

size_t path_sample_key_len(const char *path, size_t len)
{
	const char *slash = memrchr(path, '/', len), *dot;
	size_t base = slash ? (size_t)(slash - path) + 1 : 0;

	if (base + 1 >= len)
		return len;	/* empty or one byte: no room for an extension */
	dot = memchr(path + base + 1, '.', len - base - 1);
	return dot ? (size_t)(dot - path) : len;
}

const char *path_verdict_str(enum path_verdict verdict)
{
	switch (verdict) {
	case PATH_VALID:
		return "valid";
	case PATH_IS_ROOT:
		return "names the root directory";
	case PATH_IS_EMPTY:
		return "empty member name";
	case PATH_HAS_DOTDOT:
		return "'..' in member name";
	case PATH_HAS_NUL:
		return "NUL byte in member name";
	case PATH_TOO_LONG:
		return "path component longer than 255 bytes";
	}
	return "unknown";
}

bool path_is_shard_name(const char *name)
{
	static const char *const suffixes[] = { ".tar", ".tar.gz", ".tgz", ".tar.zst" };
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(suffixes) / sizeof(*suffixes); i++) {
		size_t k = strlen(suffixes[i]);

		if (n > k && !strcmp(name + n - k, suffixes[i]))
			return true;
	}
	return false;
}
