/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verify.c - shardfs-index --verify: every shard read again by libarchive
 * and compared with what the index serves (verify.h).
 *
 * Per shard, libarchive's regular files go into a table by normalised
 * path (a later member of the same name replaces an earlier one, as in
 * the index), with their size, content hash and header offset; then each
 * is looked up in the index and read through shardfs_read(), and every
 * file the index serves from that shard must have been in the table.
 * Memory is one table entry per member of the largest shard.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uthash.h>
#include <xxhash.h>

#include "shardfs/path.h"
#include "shardfs/verify.h"

/* Bytes per read, libarchive's and the index's. */
#define VERIFY_CHUNK (1u << 20)

/* A regular file as libarchive found it in one shard. */
struct seen_file {
	char *path;		/* normalised, NUL-terminated; the key */
	uint64_t size;		/* bytes of content */
	uint64_t hash;		/* xxh3 of the content */
	int64_t offset;		/* of its header, in the tar stream */
	UT_hash_handle hh;	/* table by path */
};

struct verifier {
	struct shardfs *fs;	/* what is verified */
	FILE *report;		/* where differences go */
	struct verify_result *res; /* counts */
	const char *shard;	/* path of the shard being verified */
	char *buf;		/* VERIFY_CHUNK bytes */
	struct seen_file *seen;	/* this shard's files */
};

static void differ(struct verifier *v, int64_t offset, const char *path,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void differ(struct verifier *v, int64_t offset, const char *path,
		   const char *fmt, ...)
{
	va_list ap;

	fprintf(v->report, "%s: offset %" PRId64 ": %s: ", v->shard, offset, path);
	va_start(ap, fmt);
	vfprintf(v->report, fmt, ap);
	va_end(ap);
	fputc('\n', v->report);
	v->res->differences++;
}

/* Hash the current entry's data as libarchive returns it (holes as 0). */
static int hash_entry(struct verifier *v, struct archive *a, uint64_t *size,
		      uint64_t *hash)
{
	XXH3_state_t *st = XXH3_createState();
	la_ssize_t n;

	if (!st)
		return -ENOMEM;
	XXH3_64bits_reset(st);
	*size = 0;
	while ((n = archive_read_data(a, v->buf, VERIFY_CHUNK)) > 0) {
		XXH3_64bits_update(st, v->buf, (size_t)n);
		*size += (uint64_t)n;
	}
	*hash = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return n < 0 ? -EIO : 0;
}

/* Record @path (replacing an earlier member of the same name). */
static int remember(struct verifier *v, const char *path, uint64_t size,
		    uint64_t hash, int64_t offset)
{
	struct seen_file *f;

	HASH_FIND_STR(v->seen, path, f);
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f || !(f->path = strdup(path))) {
			free(f);
			return -ENOMEM;
		}
		HASH_ADD_KEYPTR(hh, v->seen, f->path, strlen(f->path), f);
	}
	f->size = size;
	f->hash = hash;
	f->offset = offset;
	return 0;
}

/* A hard link gets its target's content, when the target is a file. */
static int remember_link(struct verifier *v, const char *path,
			 const char *target, int64_t offset)
{
	char t[PATH_MAX];
	size_t len = strlen(target);
	struct seen_file *f;

	if (len >= sizeof(t))
		return 0;
	memcpy(t, target, len);
	if (path_normalise(t, &len) != PATH_VALID)
		return 0;
	t[len] = '\0';
	HASH_FIND_STR(v->seen, t, f);
	return f ? remember(v, path, f->size, f->hash, offset) : 0;
}

/* One member: regular files and hard links to them are remembered. */
static int take_entry(struct verifier *v, struct archive *a,
		      struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e);
	const char *link = archive_entry_hardlink(e);
	int64_t offset = archive_read_header_position(a);
	uint64_t size, hash;
	char path[PATH_MAX];
	size_t len;
	int rc;

	if (!name || (archive_entry_filetype(e) != AE_IFREG && !link))
		return 0;
	len = strlen(name);
	if (len >= sizeof(path))
		return 0;
	memcpy(path, name, len);
	if (path_normalise(path, &len) != PATH_VALID)
		return 0;	/* shardfs refuses it too */
	path[len] = '\0';
	if (link && archive_entry_size(e) == 0)
		return remember_link(v, path, link, offset);
	rc = hash_entry(v, a, &size, &hash);
	if (rc == -EIO) {
		differ(v, offset, path, "libarchive cannot read its data: %s",
		       archive_error_string(a));
		return 0;
	}
	return rc ?: remember(v, path, size, hash, offset);
}

/* Read shard @i with libarchive into v->seen. */
static int read_shard(struct verifier *v, const struct shard *s)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	int rc = 0, ar;

	if (!a)
		return -ENOMEM;
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	if (archive_read_open_filename(a, s->path, VERIFY_CHUNK) != ARCHIVE_OK) {
		differ(v, 0, "(shard)", "libarchive cannot open it: %s",
		       archive_error_string(a));
		goto out_free;
	}
	while (!rc && (ar = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
		if (ar == ARCHIVE_FATAL) {
			differ(v, archive_read_header_position(a), "(shard)",
			       "libarchive cannot read on: %s", archive_error_string(a));
			break;
		}
		rc = take_entry(v, a, e);
	}
out_free:
	archive_read_free(a);
	return rc;
}

/* The index entry @path resolves to, or -1. */
static int64_t index_lookup(struct shardfs *fs, char *path)
{
	uint64_t ino = SHARDFS_ROOT_INO;
	char *save = NULL;

	for (char *c = strtok_r(path, "/", &save); c; c = strtok_r(NULL, "/", &save))
		if (shardfs_lookup(fs, ino, c, &ino))
			return -1;
	return (int64_t)ino - 1;
}

/* Hash what the index serves for inode @ino. */
static int hash_served(struct verifier *v, uint64_t ino, uint64_t size,
		       uint64_t *hash)
{
	XXH3_state_t *st = XXH3_createState();
	int rc = 0;

	if (!st)
		return -ENOMEM;
	XXH3_64bits_reset(st);
	for (uint64_t off = 0; !rc && off < size; ) {
		ssize_t n = shardfs_read(v->fs, ino, v->buf, VERIFY_CHUNK, off);

		if (n <= 0)
			rc = n < 0 ? (int)n : -EIO;
		else
			XXH3_64bits_update(st, v->buf, (size_t)n);
		off += n > 0 ? (uint64_t)n : 0;
	}
	*hash = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return rc;
}

/* Compare libarchive's file @f of shard @i with the index's. */
static int compare(struct verifier *v, uint32_t i, struct seen_file *f)
{
	char path[PATH_MAX];
	const struct shard_inode *in = NULL;
	struct shard_inode entry;
	uint64_t hash;
	int64_t e;
	int rc;

	snprintf(path, sizeof(path), "%s", f->path);
	e = index_lookup(v->fs, path);
	if (e >= 0) {
		shard_index_entry(&v->fs->idx, (uint32_t)e, &entry);
		in = &entry;
	}
	if (!in || !S_ISREG(in->mode)) {
		differ(v, f->offset, f->path, "libarchive finds a file the index %s",
		       in ? "serves as another type" : "does not serve");
		return 0;
	}
	if (in->shard > i && !(in->flags & SHARD_INODE_LINKED)) {
		v->res->shadowed++;	/* a later shard's member of that name */
		return 0;
	}
	v->res->files++;
	if (in->size != f->size) {
		differ(v, f->offset, f->path, "size %" PRIu64 " in the index, %" PRIu64
		       " for libarchive", in->size, f->size);
		return 0;
	}
	rc = hash_served(v, shard_index_ino(&v->fs->idx, (uint32_t)e), f->size, &hash);
	if (rc == -ENOMEM)
		return rc;
	if (rc || hash != f->hash)
		differ(v, f->offset, f->path, "content differs%s%s", rc ? ": " : "",
		       rc ? strerror(-rc) : "");
	return 0;
}

/* Whether entry @e is a regular file's first name. */
static bool first_name_file(const struct shard_index *idx, uint32_t e)
{
	return S_ISREG(compact_field(&idx->entries, e, COMPACT_MODE)) &&
	       !(compact_field(&idx->entries, e, COMPACT_FLAGS) & SHARD_INODE_LINKED);
}

/*
 * Entries of regular files (first names only) grouped by shard: entries
 * of shard i are by_shard[start[i] .. start[i + 1]).
 */
static int group_by_shard(const struct shardfs *fs, uint32_t **by_shard,
			  uint64_t **start)
{
	const struct shard_index *idx = &fs->idx;

	*by_shard = malloc((shard_index_nr(idx) + 1) * sizeof(**by_shard));
	*start = calloc(fs->set.nr + 2, sizeof(**start));
	if (!*by_shard || !*start)
		return -ENOMEM;
	for (uint32_t e = 0; e < shard_index_nr(idx); e++)
		if (first_name_file(idx, e))
			(*start)[compact_field(&idx->entries, e, COMPACT_SHARD) + 2]++;
	for (uint32_t i = 0; i < fs->set.nr; i++)
		(*start)[i + 2] += (*start)[i + 1];
	for (uint32_t e = 0; e < shard_index_nr(idx); e++)
		if (first_name_file(idx, e))
			(*by_shard)[(*start)[compact_field(&idx->entries, e, COMPACT_SHARD) + 1]++] = e;
	return 0;
}

/* Files the index serves from shard @i that libarchive did not find. */
static void served_not_seen(struct verifier *v, const uint32_t *entries,
			    uint64_t nr)
{
	char path[PATH_MAX];

	for (uint64_t k = 0; k < nr; k++) {
		struct seen_file *f;
		struct shard_inode in;

		if (shard_index_entry_path(&v->fs->idx, entries[k], path, sizeof(path)) < 0)
			continue;
		shard_index_entry(&v->fs->idx, entries[k], &in);
		HASH_FIND_STR(v->seen, path, f);
		if (!f)
			differ(v, (int64_t)shard_index_data_offset(&v->fs->idx, &in), path,
			       "the index serves a file libarchive does not find");
	}
}

static void forget_all(struct verifier *v)
{
	struct seen_file *f, *tmp;

	HASH_ITER(hh, v->seen, f, tmp) {
		HASH_DEL(v->seen, f);
		free(f->path);
		free(f);
	}
}

int verify_shards(struct shardfs *fs, FILE *report, struct verify_result *res)
{
	struct verifier v = { .fs = fs, .report = report, .res = res };
	uint32_t *by_shard = NULL;
	uint64_t *start = NULL;
	int rc;

	*res = (struct verify_result){ 0 };
	v.buf = malloc(VERIFY_CHUNK);
	rc = v.buf ? shard_index_check_all(&fs->idx) : -ENOMEM;
	rc = rc ?: group_by_shard(fs, &by_shard, &start);
	for (uint32_t i = 0; !rc && i < fs->set.nr; i++) {
		struct seen_file *f, *tmp;

		if (fs->set.shards[i].bad)
			continue;
		v.shard = fs->set.shards[i].path;
		rc = read_shard(&v, &fs->set.shards[i]);
		HASH_ITER(hh, v.seen, f, tmp)
			rc = rc ?: compare(&v, i, f);
		served_not_seen(&v, by_shard + start[i], start[i + 1] - start[i]);
		forget_all(&v);
	}
	free(by_shard);
	free(start);
	free(v.buf);
	return rc;
}
