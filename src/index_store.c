/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_store.c - the policy around index files: where they are, whether
 * they still describe the shards, and when to scan.
 *
 * Mounting a set with a valid index reads nothing from the shards: the
 * shards were already opened and fstat'ed by shard_set_open(), and that
 * is all validation needs unless a shard's times changed (then one 64 KiB
 * read compares fingerprints).
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "shard_scan.h"
#include "shardfs/index_file.h"
#include "shardfs/index_store.h"
#include "shardfs/log.h"
#include "shardfs/remote.h"
#include "shardfs/util.h"

#define INDEX_SUFFIX ".shardfs-index"

int index_mode_parse(const char *name, enum index_mode *mode)
{
	static const char *const names[] = { "auto", "require", "rebuild", "off" };
	int i = name_table_find(names, ARRAY_SIZE(names), name);

	if (i < 0)
		return -EINVAL;
	*mode = (enum index_mode)i;
	return 0;
}

/* @path with its directory resolved, so shard names compare exactly. */
static int canonical_path(const char *path, char out[PATH_MAX])
{
	char dir[PATH_MAX], base[PATH_MAX], *real;
	int n;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir) ||
	    snprintf(base, sizeof(base), "%s", path) >= (int)sizeof(base))
		return -ENAMETOOLONG;
	real = realpath(dirname(dir), NULL);
	if (!real)
		return -errno;
	n = snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "",
		     basename(base));
	free(real);
	return n < PATH_MAX ? 0 : -ENAMETOOLONG;
}

/*
 * mkdir -p: create @path and its missing parents.  @path itself is
 * private (0700): its index files name the members of every set mounted,
 * whatever the modes of the shards; one of ours found open to others is
 * closed.
 */
static void make_dirs(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	struct stat st;

	if (len >= sizeof(buf))
		return;
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i < len; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = '\0';
		mkdir(buf, 0755);	/* EEXIST is the common case */
		buf[i] = '/';
	}
	if (mkdir(path, 0700) && !lstat(path, &st) && S_ISDIR(st.st_mode) &&
	    st.st_uid == geteuid() && (st.st_mode & 077) && !chmod(path, 0700))
		log_info("%s: made private (mode 0700 instead of %04o): it holds the "
			 "member names of every set indexed", path,
			 (unsigned)(st.st_mode & 07777));
}

/* The cache directory for index files, created if missing. */
static const char *cache_dir(char buf[PATH_MAX])
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

	if (xdg && *xdg)
		snprintf(buf, PATH_MAX, "%s/shardfs", xdg);
	else if (geteuid() == 0 || !home)
		snprintf(buf, PATH_MAX, "/var/cache/shardfs");
	else
		snprintf(buf, PATH_MAX, "%s/.cache/shardfs", home);
	make_dirs(buf);
	return buf;
}

/* The two default locations: next to the first shard, and the cache. */
static void default_paths(const struct shard_set *set, uint64_t hash,
			  char paths[2][PATH_MAX])
{
	const char *first = set->shards[0].path, *slash = strrchr(first, '/');
	char tag[24] = "", dir[PATH_MAX];

	if (hash)
		snprintf(tag, sizeof(tag), "-%016" PRIx64, hash);
	snprintf(paths[0], PATH_MAX, "%.*s.%s%s" INDEX_SUFFIX,
		 (int)(slash - first + 1), first, slash + 1, tag);
	snprintf(paths[1], PATH_MAX, "%s/%016" PRIx64 "%s" INDEX_SUFFIX,
		 cache_dir(dir), XXH3_64bits(first, strlen(first)), tag);
}

/* What validating one shard against its record found. */
enum shard_match {
	SHARD_STALE,		/* not the shard that was indexed */
	SHARD_SAME,		/* same path, size and times: nothing read */
	SHARD_RESCANNED,	/* times differ, but its headers are the same */
};

/* Is shard @i of @set the one the index recorded? */
static enum shard_match shard_matches(const struct shard *s,
				      const struct index_file_shards *sh,
				      uint32_t i, const char *index_path,
				      const struct layout *layout)
{
	const struct index_file_shard *r = &sh->shards[i];
	const char *name = sh->names + r->name;
	size_t dlen = strrchr(index_path, '/') - index_path + 1;
	uint64_t fp;

	if (r->flags & INDEX_SHARD_ABSOLUTE) {
		if (strlen(s->path) != r->name_len || memcmp(s->path, name, r->name_len))
			return SHARD_STALE;
	} else if (strncmp(s->path, index_path, dlen) ||
		   strlen(s->path + dlen) != r->name_len ||
		   memcmp(s->path + dlen, name, r->name_len)) {
		return SHARD_STALE;
	}
	if (s->size != r->size)
		return SHARD_STALE;
	if (s->mtime.tv_sec == r->mtime_sec && s->mtime.tv_nsec == r->mtime_nsec &&
	    s->ctime.tv_sec == r->ctime_sec && s->ctime.tv_nsec == r->ctime_nsec)
		return SHARD_SAME;
	/* copied, moved or rewritten: a cheap read first, then the headers */
	if (index_file_fingerprint(s->src, &fp) || fp != r->fingerprint ||
	    shard_scan_digest(s, layout, &fp) || fp != r->digest)
		return SHARD_STALE;
	return SHARD_RESCANNED;
}

/*
 * How many shards of @set the loaded index covers: all of its shards must
 * be the first shards of @set, unchanged; else -1 (stale).  *rescanned
 * tells whether a shard had to be rescanned to prove it (the index should
 * then be saved again with the new times).
 */
static int64_t covered_shards(struct shard_set *set,
			      const struct index_file_shards *sh,
			      const char *path, const struct index_store_options *so,
			      const struct layout *layout, bool *rescanned)
{
	if (sh->options_hash != so->options_hash || sh->nr > set->nr)
		return -1;
	for (uint32_t i = 0; i < sh->nr; i++) {
		enum shard_match m = shard_matches(&set->shards[i], sh, i, path, layout);

		if (m == SHARD_STALE)
			return -1;
		*rescanned |= m == SHARD_RESCANNED;
	}
	for (uint32_t i = 0; i < sh->nr; i++) {
		set->shards[i].members = sh->shards[i].members;
		set->shards[i].digest = sh->shards[i].digest;
		set->shards[i].fingerprint = sh->shards[i].fingerprint;
		set->shards[i].fingerprinted = true;
	}
	return sh->nr;
}

/*
 * Load candidate @i of @paths.  A URL is a published index (remote.h):
 * it is fetched into the first candidate, the local cache, so that the
 * next mount finds it there.
 */
static int load_candidate(struct remote *remote, char paths[][PATH_MAX], int i,
			  unsigned flags,
			  struct shard_index *idx, struct index_file_shards *sh,
			  char *msg, size_t msg_len)
{
	char fetched[PATH_MAX + 16];
	int rc;

	if (!shard_source_is_remote(paths[i]))
		return index_file_load(paths[i], idx, sh, flags, msg, msg_len);
	if (snprintf(fetched, sizeof(fetched), "%s.fetched", paths[0]) >= (int)sizeof(fetched))
		return log_format(msg, msg_len, -ENAMETOOLONG, "%s: name too long", paths[0]);
	rc = remote_fetch_file(remote, paths[i], fetched, msg, msg_len);
	if (rc == -ENOENT) {
		log_debug("%s", msg);
		return rc;
	}
	if (!rc && rename(fetched, paths[0]))
		rc = log_format(msg, msg_len, -errno, "%s: %s", paths[0], strerror(errno));
	return rc ? rc : index_file_load(paths[0], idx, sh, flags, msg, msg_len);
}

/*
 * Give the shards among the first @sh->nr of @set that the index recorded
 * as compressed (for an object of the same size) their decoding source
 * and seek table, so that they are validated and read without reading
 * their first bytes or decoding them again.  With @sh NULL, take the
 * decoding sources of the first @nr away again: the index did not hold.
 */
static void seek_tables_attach(struct shard_set *set,
			       const struct index_file_shards *sh, uint32_t nr)
{
	for (uint32_t i = 0; i < nr && i < set->nr; i++) {
		struct shard *s = &set->shards[i];
		struct seek_table t;
		char msg[256];

		if (!s->src)
			continue;
		if (!sh) {
			s->src = shard_source_unwrap(s->src);
		} else if (index_file_seek_table(sh, i, &t) &&
			   t.stored_size == s->stored_size &&
			   !shard_source_wrap(&s->src, s->path, sh->seek[i].encoding,
					      msg, sizeof(msg)) &&
			   s->src->ops->seek_set(s->src, &t)) {
			s->src = shard_source_unwrap(s->src);
		}
		s->size = s->src->size;
	}
}

/* Load the first valid index among @paths; *covered says for how much. */
static int try_load(struct shard_index *idx, struct shard_set *set,
		    char paths[][PATH_MAX], int nr_paths,
		    const struct index_store_options *so, const struct layout *layout,
		    int64_t *covered, bool *rescanned, char *used)
{
	for (int i = 0; i < nr_paths; i++) {
		struct index_file_shards sh;
		char msg[256];
		int rc = load_candidate(set->remote, paths, i,
					so->full_check ? INDEX_LOAD_FULL_CHECK : 0,
					idx, &sh, msg, sizeof(msg));

		if (rc == -ENOENT)
			continue;
		if (rc) {
			log_warn("%s: %s; the index will be rebuilt", paths[i], msg);
			continue;
		}
		seek_tables_attach(set, &sh, sh.nr);
		*covered = covered_shards(set, &sh, paths[i], so, layout, rescanned);
		if (*covered >= 0) {
			strcpy(used, paths[i]);
			return 0;
		}
		seek_tables_attach(set, NULL, sh.nr);
		log_info("%s: the shards changed since it was built%s", paths[i],
			 so->mode == INDEX_MODE_REQUIRE ? "" : "; rebuilding");
		shard_index_release(idx);
	}
	return -ENOENT;
}

/* Which of @paths an index is written to: the first when its directory
 * is writable (never a remote one), else the cache. */
static int save_pick(char paths[][PATH_MAX], int nr_paths)
{
	char dir[PATH_MAX];
	int pick = nr_paths - 1;

	if (nr_paths > 1 && snprintf(dir, sizeof(dir), "%s", paths[0]) < (int)sizeof(dir) &&
	    !access(dirname(dir), W_OK))
		pick = 0;
	if (shard_source_is_remote(paths[pick]))
		pick = 0;
	return pick;
}

/* Tell where a remote set's index is looked for, once one was saved. */
static void saved(char paths[][PATH_MAX], int nr_paths, int pick, char *used)
{
	if (nr_paths > 1 && shard_source_is_remote(paths[1]))
		log_info("%s: to let other nodes mount with one request, upload this "
			 "index as %s", paths[pick], paths[1]);
	strcpy(used, paths[pick]);
}

/* Save @idx where the options say, or where it can be written. */
static bool save(const struct shard_index *idx, const struct shard_set *set,
		 const struct index_store_options *so, char paths[][PATH_MAX],
		 int nr_paths, char *used)
{
	char msg[512];
	int pick = save_pick(paths, nr_paths);

	if (index_file_write(paths[pick], idx, set, so->options_hash, msg, sizeof(msg))) {
		log_warn("%s", msg);
		return false;
	}
	saved(paths, nr_paths, pick, used);
	return true;
}

/*
 * Build the index into the file it is saved as, @paths[@pick], in bounded
 * memory (shard_index_build_to_file()), and map it into @idx.  A set with
 * bad shards, or any with index_mode=off, is mapped from the temporary
 * file, which is then removed: it is not saved.  -EAGAIN when the set
 * needs the in-memory build, or the file or the runs beside it cannot be
 * written (the in-memory build then tries to save it, and says why it
 * cannot).
 */
static int build_to_file(struct shard_index *idx, struct shard_set *set,
			 const struct shard_index_build_options *bo,
			 const struct index_store_options *so, char paths[][PATH_MAX],
			 int nr_paths, int pick, struct index_store_result *res)
{
	struct shard_index_counts counts = { 0 };
	int rc;
	struct index_file_writer w;
	struct index_file_shards sh;
	uint32_t nr_entries = 0;
	char msg[512];
	bool keep;

	if (index_file_writer_open(&w, paths[pick], set, msg, sizeof(msg))) {
		log_debug("%s", msg);
		return -EAGAIN;
	}
	w.scratch = so->mode == INDEX_MODE_OFF;
	rc = shard_index_build_to_file(&w, set, bo, &counts, &nr_entries);
	if (rc && rc != -EAGAIN && rc != -EINVAL && rc != -E2BIG && rc != -ENOMEM) {
		/* the runs or the file could not be written (a full disk) */
		log_warn("%s: cannot write the index: %s; built in memory instead",
			 paths[pick], strerror(-rc));
		rc = -EAGAIN;
	}
	keep = !counts.bad_shards && !w.scratch;
	if (!rc && index_file_writer_commit(&w, nr_entries, &counts, so->options_hash,
					    keep, msg, sizeof(msg))) {
		log_warn("%s; built in memory instead", msg);
		rc = -EAGAIN;
	}
	if (!rc && index_file_load(keep ? paths[pick] : w.tmp, idx, &sh, INDEX_LOAD_FULL_CHECK,
				   msg, sizeof(msg))) {
		log_error("%s: %s", keep ? paths[pick] : w.tmp, msg);
		rc = -EIO;
	}
	index_file_writer_abort(&w);
	if (!rc && keep) {
		res->saved = true;
		saved(paths, nr_paths, pick, res->path);
	}
	return rc;
}

/* The candidate index paths, canonical; returns how many. */
static int candidates(const struct shard_set *set,
		      const struct index_store_options *so,
		      char paths[2][PATH_MAX])
{
	char raw[2][PATH_MAX];
	int n = 0, nr = so->path ? 1 : 2;

	if (so->path)
		snprintf(raw[0], PATH_MAX, "%s", so->path);
	else
		default_paths(set, so->options_hash, raw);
	/* a remote set: the cache, then an index published next to the
	 * first shard (never written there: shardfs-index writes it locally,
	 * the user uploads it) */
	if (!so->path && shard_source_is_remote(set->shards[0].path)) {
		char published[PATH_MAX];

		memcpy(published, raw[0], PATH_MAX);
		memcpy(raw[0], raw[1], PATH_MAX);
		memcpy(raw[1], published, PATH_MAX);
	}
	/* a path that cannot be resolved (its directory is missing) is kept
	 * as given: loading finds nothing there, saving says why it failed */
	for (int i = 0; i < nr; i++, n++)
		if (canonical_path(raw[i], paths[n]))
			memcpy(paths[n], raw[i], PATH_MAX);
	return n;
}

int index_store_open(struct shard_index *idx, struct shard_set *set,
		     const struct shard_index_build_options *bo,
		     const struct index_store_options *so,
		     struct index_store_result *res)
{
	struct shard_index_build_options opt = *bo;
	struct shard_index base = { 0 };
	char paths[2][PATH_MAX];
	int64_t covered = -1;
	bool rescanned = false;
	int n = so->mode == INDEX_MODE_OFF ? 0 : candidates(set, so, paths), rc;
	bool loaded;

	*res = (struct index_store_result){ .origin = INDEX_BUILT };
	if (n > 1 && shard_source_is_remote(paths[1]))
		strcpy(res->published, paths[1]);
	loaded = so->mode != INDEX_MODE_OFF && so->mode != INDEX_MODE_REBUILD &&
		 !try_load(&base, set, paths, n, so, layout_or_tree(bo->layout), &covered,
			   &rescanned, res->path);
	/* entries copied into another file are checked first: bytes that
	 * changed since their check would get new sums (index_guard.h) */
	if (loaded && (rescanned || (covered > 0 && covered < set->nr)) &&
	    shard_index_check_all(&base)) {
		shard_index_release(&base);
		loaded = false;
		covered = -1;
	}
	if (loaded && covered == set->nr) {
		*idx = base;
		res->origin = INDEX_LOADED;
		/* record the new times, so that the next mount reads nothing */
		if (rescanned && so->mode != INDEX_MODE_REQUIRE)
			res->saved = save(idx, set, so, paths, n, res->path);
		return 0;
	}
	if (so->mode == INDEX_MODE_REQUIRE) {
		shard_index_release(&base);
		log_error("no valid index for this shard set (looked in %s%s%s)",
			  n ? paths[0] : "", n > 1 ? " and " : "", n > 1 ? paths[1] : "");
		return -ENOENT;
	}
	if (covered > 0) {
		opt.base = &base;
		opt.base_shards = res->base_shards = (uint32_t)covered;
		res->origin = INDEX_EXTENDED;
	}
	rc = -EAGAIN;
	if (so->mode == INDEX_MODE_OFF) {
		/* mapped from the cache and removed at once: nothing saved */
		default_paths(set, so->options_hash, paths);
		rc = build_to_file(idx, set, &opt, so, paths + 1, 1, 0, res);
	} else if (n) {
		rc = build_to_file(idx, set, &opt, so, paths, n, save_pick(paths, n), res);
	}
	if (rc != -EAGAIN) {
		shard_index_release(&base);
		return rc;
	}
	rc = shard_index_build(idx, set, &opt);
	shard_index_release(&base);
	/* a set with bad shards is not saved: they are looked at again */
	if (!rc && so->mode != INDEX_MODE_OFF && n && !idx->counts.bad_shards)
		res->saved = save(idx, set, so, paths, n, res->path);
	return rc;
}
