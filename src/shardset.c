/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardset.c - expand a SHARDS argument and open the shards.
 *
 * shardfs expands braces itself because nothing else will: mount(8),
 * mount.fuse3 and fstab hand the argument over verbatim.  Expansion is
 * recursive on the first brace group, like bash, and bounded by
 * SHARD_SET_MAX_SHARDS so that "{0..999999999}" is an error, not an
 * out-of-memory kill.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardfs/log.h"
#include "shardfs/path.h"
#include "shardfs/remote.h"
#include "shardfs/shardset.h"
#include "shardfs/util.h"

/* Descriptors kept free for FUSE, logging and the C library. */
#define SHARD_SET_SPARE_FDS 64

static int set_add(struct shard_set *set, const char *path, size_t len)
{
	struct shard *s;

	if (set->nr >= SHARD_SET_MAX_SHARDS)
		return -E2BIG;
	if (array_grow((void **)&set->shards, &set->cap, set->nr + 1,
		       sizeof(*set->shards)))
		return -ENOMEM;
	s = &set->shards[set->nr];
	*s = (struct shard){ .path = strndup(path, len) };
	if (!s->path)
		return -ENOMEM;
	set->nr++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every shard (path_is_shard_name) directly in @dir, sorted by name. */
static int add_directory(struct shard_set *set, const char *dir, char *msg,
			 size_t msg_len)
{
	struct dirent **names;
	int n, rc = 0, found = 0;

	n = scandir(dir, &names, NULL, alphasort);
	if (n < 0)
		return log_format(msg, msg_len, -errno, "%s: %s", dir, strerror(errno));
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];

		if (!rc && path_is_shard_name(names[i]->d_name)) {
			int len = snprintf(path, sizeof(path), "%s/%s", dir,
					   names[i]->d_name);

			rc = len < (int)sizeof(path) ? set_add(set, path, len)
						     : -ENAMETOOLONG;
			found++;
		}
		free(names[i]);
	}
	free(names);
	if (!rc && !found)
		return log_format(msg, msg_len, -ENOENT, "%s: directory holds no " PATH_SHARD_SUFFIXES " shards", dir);
	return rc ? log_format(msg, msg_len, rc, "%s: %s", dir, strerror(-rc)) : 0;
}

static int add_glob(struct shard_set *set, const char *pattern, char *msg,
		    size_t msg_len)
{
	glob_t g;
	int rc = glob(pattern, GLOB_ERR, NULL, &g);

	if (rc == GLOB_NOMATCH)
		return log_format(msg, msg_len, -ENOENT, "%s: no shard matches the pattern", pattern);
	if (rc)
		return log_format(msg, msg_len, -EIO, "%s: cannot expand the pattern", pattern);
	qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), cmp_str);
	for (size_t i = 0; !rc && i < g.gl_pathc; i++)
		rc = set_add(set, g.gl_pathv[i], strlen(g.gl_pathv[i]));
	globfree(&g);
	return rc ? log_format(msg, msg_len, rc, "%s: %s", pattern, strerror(-rc)) : 0;
}

static int add_name(void *set, const char *name, size_t len)
{
	return set_add(set, name, len);
}

/* A brace-free item: a URL, a directory, a glob or a plain path. */
static int add_item(struct shard_set *set, const char *item, char *msg,
		    size_t msg_len)
{
	struct stat st;
	int rc;

	if (shard_source_is_remote(item))
		return remote_expand(set->remote, item, add_name, set, msg, msg_len);
	if (!stat(item, &st) && S_ISDIR(st.st_mode))
		return add_directory(set, item, msg, msg_len);
	if (strpbrk(item, "*?["))
		return add_glob(set, item, msg, msg_len);
	rc = set_add(set, item, strlen(item));
	return rc ? log_format(msg, msg_len, rc, "%s: %s", item, strerror(-rc)) : 0;
}

/* Index of the '}' matching the '{' at @open, or 0 when unbalanced. */
static size_t brace_close(const char *s, size_t open)
{
	int depth = 0;

	for (size_t i = open; s[i]; i++) {
		if (s[i] == '{')
			depth++;
		else if (s[i] == '}' && --depth == 0)
			return i;
	}
	return 0;
}

static int expand(struct shard_set *set, const char *spec, char *msg,
		  size_t msg_len);

/* Expand "head" + alt + "tail" for one alternative. */
static int expand_alt(struct shard_set *set, const char *head, size_t hlen,
		      const char *alt, size_t alen, const char *tail,
		      char *msg, size_t msg_len)
{
	size_t tlen = strlen(tail);
	char *s = malloc(hlen + alen + tlen + 1);
	int rc;

	if (!s)
		return -ENOMEM;
	memcpy(s, head, hlen);
	memcpy(s + hlen, alt, alen);
	memcpy(s + hlen + alen, tail, tlen + 1);
	rc = expand(set, s, msg, msg_len);
	free(s);
	return rc;
}

/*
 * "{A..B}" with decimal A and B (B < A counts down, as in bash); zero
 * padding of A sets the width.  Returns 0, -EINVAL when the body is not a
 * range (then it is a list), or -E2BIG when it is one of too many shards.
 */
static int parse_range(const char *body, size_t len, long long *lo,
		       long long *hi, int *width)
{
	char buf[64], *dots, *end;

	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, body, len);
	buf[len] = '\0';
	dots = strstr(buf, "..");
	if (!dots || dots == buf || !dots[2])
		return -EINVAL;
	*dots = '\0';
	*width = buf[0] == '0' && dots - buf > 1 ? (int)(dots - buf) : 0;
	*lo = strtoll(buf, &end, 10);
	if (*end)
		return -EINVAL;
	*hi = strtoll(dots + 2, &end, 10);
	if (*end)
		return -EINVAL;
	return llabs(*hi - *lo) >= SHARD_SET_MAX_SHARDS ? -E2BIG : 0;
}

static int expand_range(struct shard_set *set, const char *spec, size_t open,
			size_t close, long long lo, long long hi, int width,
			char *msg, size_t msg_len)
{
	long long step = lo <= hi ? 1 : -1;

	for (long long v = lo; v != hi + step; v += step) {
		char num[32];
		int n = snprintf(num, sizeof(num), "%0*lld", width, v);
		int rc = expand_alt(set, spec, open, num, n, spec + close + 1,
				    msg, msg_len);

		if (rc)
			return rc;
	}
	return 0;
}

/* Split the body of a brace group on top-level commas. */
static int expand_list(struct shard_set *set, const char *spec, size_t open,
		       size_t close, char *msg, size_t msg_len)
{
	size_t start = open + 1;
	int depth = 0;

	for (size_t i = open + 1; i <= close; i++) {
		if (spec[i] == '{')
			depth++;
		else if (spec[i] == '}' && i < close)
			depth--;
		if ((spec[i] == ',' && depth == 0) || i == close) {
			int rc = expand_alt(set, spec, open, spec + start,
					    i - start, spec + close + 1, msg,
					    msg_len);

			if (rc)
				return rc;
			start = i + 1;
		}
	}
	return 0;
}

static int expand(struct shard_set *set, const char *spec, char *msg,
		  size_t msg_len)
{
	const char *brace = strchr(spec, '{');
	size_t open, close;
	long long lo, hi;
	int width, rc;

	if (set->nr >= SHARD_SET_MAX_SHARDS)
		return log_format(msg, msg_len, -E2BIG, "more than %u shards", SHARD_SET_MAX_SHARDS);
	if (!brace)
		return add_item(set, spec, msg, msg_len);
	open = brace - spec;
	close = brace_close(spec, open);
	if (!close)
		return log_format(msg, msg_len, -EINVAL, "%s: unbalanced '{'", spec);
	rc = parse_range(spec + open + 1, close - open - 1, &lo, &hi, &width);
	if (rc == -E2BIG)
		return log_format(msg, msg_len, rc, "%s: range of more than %u shards",
			       spec, SHARD_SET_MAX_SHARDS);
	if (!rc)
		return expand_range(set, spec, open, close, lo, hi, width, msg,
				    msg_len);
	return expand_list(set, spec, open, close, msg, msg_len);
}

int shard_set_expand(struct shard_set *set, const char *spec,
		     struct remote *remote, char *msg, size_t msg_len)
{
	size_t start = 0, len = strlen(spec);
	int depth = 0, rc = 0;
	char *item;

	*set = (struct shard_set){ .remote = remote };
	if (len == 0 || len > SHARD_SET_SPEC_MAX)
		return log_format(msg, msg_len, -EINVAL, "SHARDS argument is empty or too long");
	item = malloc(len + 1);
	if (!item)
		return -ENOMEM;
	for (size_t i = 0; !rc && i <= len; i++) {
		depth += spec[i] == '{' ? 1 : spec[i] == '}' ? -1 : 0;
		if ((spec[i] == ',' && depth == 0) || i == len) {
			memcpy(item, spec + start, i - start);
			item[i - start] = '\0';
			if (i > start)
				rc = expand(set, item, msg, msg_len);
			start = i + 1;
		}
	}
	free(item);
	if (!rc && set->nr == 0)
		rc = log_format(msg, msg_len, -ENOENT, "%s: names no shards", spec);
	if (rc)
		shard_set_release(set);
	return rc;
}

/* Make room for one descriptor per shard, or say why there is none. */
static int raise_fd_limit(uint32_t nr, char *msg, size_t msg_len)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return log_format(msg, msg_len, -errno, "getrlimit: %s", strerror(errno));
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if ((uint64_t)nr + SHARD_SET_SPARE_FDS > rl.rlim_cur)
		return log_format(msg, msg_len, -EMFILE,
			       "%" PRIu32 " shards need more open files than the limit of %llu; "
			       "raise it (ulimit -n, LimitNOFILE=) or use fewer, larger shards",
			       nr, (unsigned long long)rl.rlim_cur);
	return 0;
}

static int shard_open(struct shard_set *set, struct shard *s, char *msg,
		      size_t msg_len)
{
	struct shard_source_info info = { 0 };
	int rc = shard_source_open(s->path, set->remote, set->decoders, &s->src, &info,
				   msg, msg_len);

	if (rc)
		return rc;
	free(s->path);
	s->path = info.name;
	s->size = s->src->size;
	s->stored_size = info.stored_size;
	s->mtime = info.mtime;
	s->ctime = info.ctime;
	return 0;
}

static int cmp_shard_path(const void *a, const void *b, void *arg)
{
	const struct shard *shards = arg;

	return strcmp(shards[*(const uint32_t *)a].path, shards[*(const uint32_t *)b].path);
}

/* The same file twice (after realpath) would serve it twice: refuse. */
static int check_listed_once(const struct shard_set *set, char *msg, size_t msg_len)
{
	uint32_t *order = malloc((set->nr + 1) * sizeof(*order));
	int rc = 0;

	if (!order)
		return log_format(msg, msg_len, -ENOMEM, "%s", strerror(ENOMEM));
	for (uint32_t i = 0; i < set->nr; i++)
		order[i] = i;
	qsort_r(order, set->nr, sizeof(*order), cmp_shard_path, set->shards);
	for (uint32_t i = 1; !rc && i < set->nr; i++) {
		uint32_t a = order[i - 1], b = order[i];

		if (!set->shards[a].bad && !set->shards[b].bad &&
		    !strcmp(set->shards[a].path, set->shards[b].path))
			rc = log_format(msg, msg_len, -EINVAL, "%s: listed twice in SHARDS "
					"(shards %u and %u)", set->shards[a].path,
					a < b ? a : b, a < b ? b : a);
	}
	free(order);
	return rc;
}

/* Close shard @s that could not be opened, for skip_bad_shards. */
static void skip_shard(struct shard *s, const char *why)
{
	log_warn("%s; shard skipped", why);
	shard_source_close(s->src);
	s->src = NULL;
	s->size = 0;
	s->bad = true;
}

/*
 * Open every shard.  When several cannot be opened, the first
 * SHARD_SET_ERRORS_LISTED are logged here and @msg gets their count; a
 * single one is @msg itself.
 */
int shard_set_open(struct shard_set *set, char *msg, size_t msg_len)
{
	int rc = raise_fd_limit(set->nr, msg, msg_len);
	char first[512] = "";
	uint32_t failed = 0;
	int first_rc = 0;

	if (rc)
		return rc;
	if (!set->decoders && shard_decoders_new(set->spans, &set->decoders))
		return log_format(msg, msg_len, -ENOMEM, "%s", strerror(ENOMEM));
	for (uint32_t i = 0; i < set->nr; i++) {
		struct shard *s = &set->shards[i];

		rc = shard_open(set, s, msg, msg_len);
		if (!rc) {
			if (!s->size && !shard_source_needs_seek(s->src))
				log_warn("%s: empty shard (0 bytes): it adds no files",
					 s->path);
		} else if (set->skip_bad) {
			skip_shard(s, msg);
		} else if (!failed++) {
			first_rc = rc;
			snprintf(first, sizeof(first), "%s", msg);
		} else {
			if (failed == 2)
				log_error("%s", first);
			if (failed <= SHARD_SET_ERRORS_LISTED)
				log_error("%s", msg);
		}
	}
	if (failed == 1)
		return log_format(msg, msg_len, first_rc, "%s", first);
	if (failed)
		return log_format(msg, msg_len, first_rc, "%u of %u shards cannot be "
				  "opened%s", failed, set->nr, failed > SHARD_SET_ERRORS_LISTED
				  ? " (the first ones are listed above)" : "");
	return check_listed_once(set, msg, msg_len);
}

void shard_set_release(struct shard_set *set)
{
	for (uint32_t i = 0; i < set->nr; i++) {
		shard_source_close(set->shards[i].src);
		free(set->shards[i].path);
	}
	free(set->shards);
	shard_decoders_free(set->decoders);	/* after the sources using it */
	*set = (struct shard_set){ 0 };
}
