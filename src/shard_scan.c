/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shard_scan.c - phase 1 of the index build: one shard's members.
 *
 * Runs on a scanning thread per shard.  Member names are normalised here,
 * in parallel, so the single-threaded merge only hashes and links; the
 * layouts that rename members (shards, classes) are applied here too, so
 * the merge is the same for every layout.
 *
 * The classes layout needs each sample's label before it can name the
 * sample's members, and a sample's members may come in any order within
 * the shard.  Labels are therefore collected during the scan (reading
 * each label member, at most LAYOUT_LABEL_FILE_MAX bytes, from the
 * scanner's window, which holds a small member's data with its header; a
 * read per label took 10 of the 13 s of system time of a 20 M member
 * build) and applied in a second pass over the shard's members, by
 * binary search on the sorted labels.
 * A member keeps its whole path under its label ("a/0001.jpg" of label 5
 * becomes "5/a/0001.jpg"): ImageFolder recurses, and two samples whose
 * base names collide are two files, not one lost to the other.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard_scan.h"
#include "shardfs/index.h"
#include "shardfs/log.h"
#include "shardfs/path.h"
#include "shardfs/source.h"

/*
 * A scan reserves its arrays for the members the shard's size allows
 * (tiny members take two blocks), up to this many, and trims them when it
 * ends: growing them member by member copied 8 % of a build's time away
 * in realloc.  Reserved pages that are never written cost no memory.
 */
#define SHARD_SCAN_RESERVE_MEMBERS_MAX (1u << 20)
/* Bytes of normalised name reserved per member (ImageNet's are 30). */
#define SHARD_SCAN_RESERVE_NAME_BYTES 32

/* The shard's directory in the shards layout: its file name less ".tar". */
static const char *shard_dir_name(const char *path, size_t *len)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	*len = strlen(base);
	if (*len > 4 && !strcmp(base + *len - 4, ".tar"))
		*len -= 4;
	return base;
}

void shard_scan_warn(struct shard_scan *sc, uint64_t off, const char *what,
		     const char *name, size_t name_len)
{
	if (sc->quiet)
		return;
	if (sc->warnings++ < SHARD_INDEX_WARNINGS_PER_SHARD)
		log_warn("%s: offset %llu: %s%s%.*s%s", sc->shard->path,
			 (unsigned long long)off, what, name ? " '" : "",
			 (int)(name_len > 200 ? 200 : name_len), name ? name : "",
			 name ? "'" : "");
	else if (sc->warnings == SHARD_INDEX_WARNINGS_PER_SHARD + 1)
		log_warn("%s: further warnings for this shard are only counted",
			 sc->shard->path);
}

static void tar_warn(void *arg, uint64_t off, const char *msg)
{
	shard_scan_warn(arg, off, msg, NULL, 0);
}

/* Append @len bytes and a NUL to the pool; *at (if any) gets the offset. */
static int pool_add(struct shard_scan *sc, const char *s, size_t len,
		    uint32_t *at)
{
	size_t from = sc->strings_len;
	int rc;

	if (sc->strings_len + len + 1 > SHARD_INDEX_MAX_NAME_BYTES_PER_SHARD)
		return -E2BIG;
	rc = pool_append(&sc->strings, &sc->strings_len, &sc->strings_cap, s, len);
	if (!rc && at)
		*at = (uint32_t)from;
	return rc;
}

/*
 * Store and normalise a member name, behind the layout's prefix (the
 * shard's directory in the shards layout).  Returns the verdict or -errno.
 */
static int add_name(struct shard_scan *sc, const char *s, size_t len,
		    uint32_t *at, uint32_t *out_len)
{
	const char *prefix = "";
	size_t plen = 0, n;
	enum path_verdict v;
	int rc;

	if (sc->layout->kind == LAYOUT_SHARDS)
		prefix = shard_dir_name(sc->shard->path, &plen);
	rc = pool_add(sc, prefix, plen, at);
	if (rc)
		return rc;
	sc->strings[sc->strings_len - 1] = '/';
	rc = pool_add(sc, s, len, NULL);
	if (rc)
		return rc;
	n = plen + 1 + len;
	v = path_normalise(sc->strings + *at, &n);
	sc->strings[*at + n] = '\0';
	sc->strings_len = *at + n + 1;
	*out_len = (uint32_t)n;
	return v;
}

/* /.shardfs belongs to the control directory (control.h). */
static bool is_reserved(const char *p, size_t len)
{
	size_t n = strlen(CONTROL_DIR_NAME);

	return len >= n && !memcmp(p, CONTROL_DIR_NAME, n) && (len == n || p[n] == '/');
}

static size_t path_depth(const char *p, size_t len)
{
	size_t depth = len ? 1 : 0;

	for (size_t i = 0; i < len; i++)
		depth += p[i] == '/';
	return depth;
}

/* Store the member's sparse map in the shard's extent list. */
static int add_extents(struct shard_scan *sc, const struct tar_member *m,
		       struct raw_member *rm)
{
	int rc;

	rm->sparse = m->sparse;
	rm->extent = (uint32_t)sc->nr_extents;
	rm->nr_extents = (uint32_t)m->nr_extents;
	if (!m->extents || !m->nr_extents)
		return 0;
	if (sc->nr_extents + m->nr_extents > UINT32_MAX)
		return -E2BIG;
	rc = array_grow((void **)&sc->extents, &sc->cap_extents,
		  sc->nr_extents + m->nr_extents, sizeof(*sc->extents));
	if (rc)
		return rc;
	memcpy(sc->extents + sc->nr_extents, m->extents,
	       m->nr_extents * sizeof(*m->extents));
	sc->nr_extents += m->nr_extents;
	return 0;
}

/*
 * Store the member's names.  Returns 0, 1 when the member is skipped (and
 * warned about), 2 when the layout drops it, or -errno.
 */
static int member_names(struct shard_scan *sc, const struct tar_member *m,
			struct raw_member *rm)
{
	int v = PATH_IS_EMPTY;

	if (m->path_len)
		v = add_name(sc, m->path, m->path_len, &rm->path, &rm->path_len);
	if (v < 0)
		return v;
	if (m->type == TAR_DIR && sc->layout->kind == LAYOUT_CLASSES)
		return 2;	/* the labels make the directories */
	if (v == PATH_IS_ROOT && m->type == TAR_DIR)
		v = PATH_VALID;
	if (v != PATH_VALID) {
		shard_scan_warn(sc, m->header_offset, path_verdict_str(v), m->path,
			  m->path_len);
		return 1;
	}
	if (is_reserved(sc->strings + rm->path, rm->path_len)) {
		shard_scan_warn(sc, m->header_offset, "name reserved for the control "
				"directory", m->path, m->path_len);
		return 1;
	}
	if (path_depth(sc->strings + rm->path, rm->path_len) > SHARD_INDEX_MAX_DEPTH) {
		shard_scan_warn(sc, m->header_offset, "directory nesting too deep",
			  m->path, m->path_len);
		return 1;
	}
	if (m->type == TAR_SYMLINK && memchr(m->link, '\0', m->link_len)) {
		shard_scan_warn(sc, m->header_offset, "NUL byte in symlink target of",
				m->path, m->path_len);
		return 1;
	}
	if (m->type == TAR_SYMLINK)
		return pool_add(sc, m->link, m->link_len, &rm->link) ?:
		       (rm->link_len = (uint32_t)m->link_len, 0);
	if (m->type != TAR_HARDLINK)
		return 0;
	v = add_name(sc, m->link, m->link_len, &rm->link, &rm->link_len);
	if (v < 0)
		return v;
	if (v != PATH_VALID) {
		shard_scan_warn(sc, m->header_offset, "hard link target refused",
			  m->link, m->link_len);
		return 1;
	}
	return 0;
}

/* Remember the label of the sample that label member @rm belongs to. */
static int read_label(struct shard_scan *sc, const struct tar_member *m,
		      const struct raw_member *rm)
{
	const char *path = sc->strings + rm->path, *bytes = m->data;
	char data[LAYOUT_LABEL_FILE_MAX], label[PATH_COMPONENT_MAX + 1];
	struct sample_label *sl;
	bool unmapped;
	int len, rc;

	if (m->type != TAR_FILE || m->sparse || m->size > sizeof(data) ||
	    !layout_is_label_member(sc->layout, path, rm->path_len))
		return 0;
	if (!bytes && shard_source_read_full(sc->shard->src, data, m->size, m->data_offset))
		return 0;	/* the scan reports a short shard itself */
	bytes = bytes ? bytes : data;
	XXH3_64bits_update(sc->hash, bytes, m->size);
	len = layout_label(sc->layout, bytes, m->size, label, sizeof(label), &unmapped);
	if (len < 0) {
		shard_scan_warn(sc, m->header_offset, "no usable label in", path,
				rm->path_len);
		return 0;
	}
	if (unmapped && !sc->unmapped++)
		sc->unmapped_example = (uint32_t)sc->strings_len;
	rc = array_grow((void **)&sc->labels, &sc->cap_labels, sc->nr_labels + 1,
			sizeof(*sc->labels));
	if (rc)
		return rc;
	sl = &sc->labels[sc->nr_labels];
	*sl = (struct sample_label){
		.key = rm->path, .key_len = (uint32_t)path_sample_key_len(path, rm->path_len),
		.label_len = (uint32_t)len, .seq = (uint32_t)sc->nr_labels,
	};
	sc->nr_labels++;
	return pool_add(sc, label, len, &sl->label);
}

/* tar_scan callback: record one member of a shard. */
/* Feed what the scanner reported about @m into the shard's digest. */
static void digest_member(struct shard_scan *sc, const struct tar_member *m)
{
	const uint64_t fields[] = {
		m->header_offset, m->data_offset, m->size, (uint64_t)m->mtime_sec,
		m->mtime_nsec, m->mode, m->uid, m->gid, m->type, m->path_len,
		m->link_len, m->sparse, m->nr_extents,
	};

	XXH3_64bits_update(sc->hash, fields, sizeof(fields));
	XXH3_64bits_update(sc->hash, m->path, m->path_len);
	XXH3_64bits_update(sc->hash, m->link, m->link_len);
	XXH3_64bits_update(sc->hash, m->extents, m->nr_extents * sizeof(*m->extents));
}

static int scan_member(void *arg, const struct tar_member *m)
{
	struct shard_scan *sc = arg;
	struct raw_member *rm;
	int rc;

	digest_member(sc, m);
	if (m->type == TAR_SPECIAL) {
		sc->special++;
		return 0;
	}
	if (sc->nr_members >= SHARD_INDEX_MAX_MEMBERS_PER_SHARD)
		return -E2BIG;
	rc = array_grow((void **)&sc->members, &sc->cap_members, sc->nr_members + 1,
		  sizeof(*sc->members));
	if (rc)
		return rc;
	rm = &sc->members[sc->nr_members];
	*rm = (struct raw_member){
		.data_offset = m->data_offset, .size = m->size,
		.header_offset = m->header_offset, .mtime_sec = m->mtime_sec,
		.mtime_nsec = m->mtime_nsec, .mode = m->mode, .uid = m->uid,
		.gid = m->gid, .type = (uint8_t)m->type, .group = UINT32_MAX,
	};
	rc = member_names(sc, m, rm);
	if (rc > 0) {
		sc->skipped += rc == 1;
		return 0;
	}
	rc = rc ?: add_extents(sc, m, rm);
	if (!rc && sc->layout->kind == LAYOUT_CLASSES)
		rc = read_label(sc, m, rm);
	if (!rc)
		sc->nr_members++;
	return rc;
}

static int key_cmp(const struct shard_scan *sc, uint32_t a, uint32_t alen,
		   uint32_t b, uint32_t blen)
{
	return shard_index_name_cmp(sc->strings + a, alen, sc->strings + b, blen);
}

static int label_cmp(const void *pa, const void *pb, void *arg)
{
	const struct sample_label *a = pa, *b = pb;
	int c = key_cmp(arg, a->key, a->key_len, b->key, b->key_len);

	return c ? c : (a->seq > b->seq) - (a->seq < b->seq);
}

/* The label of the sample with key [key, key + len), or NULL. */
static const struct sample_label *label_find(const struct shard_scan *sc,
					     uint32_t key, uint32_t len)
{
	size_t lo = 0, hi = sc->nr_labels;

	/* the last of the labels with this key: later ones win */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct sample_label *l = &sc->labels[mid];

		if (key_cmp(sc, l->key, l->key_len, key, len) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	lo--;
	return key_cmp(sc, sc->labels[lo].key, sc->labels[lo].key_len, key, len)
	       ? NULL : &sc->labels[lo];
}

/* Rename @path (offset *at) to <dir>/<path>, keeping the sample's own
 * directories so that equal base names in two directories stay apart. */
static int move_under(struct shard_scan *sc, const char *dir, size_t dlen,
		      uint32_t *at, uint32_t *len)
{
	char label[PATH_COMPONENT_MAX + 1];
	size_t need = dlen + 1 + *len;
	uint32_t from = *at;
	char *to;
	int rc;

	assert(dlen <= PATH_COMPONENT_MAX);
	memcpy(label, dir, dlen);	/* @dir may be in the pool that grows */
	if (sc->strings_len + need + 1 > SHARD_INDEX_MAX_NAME_BYTES_PER_SHARD)
		return -E2BIG;
	rc = array_grow((void **)&sc->strings, &sc->strings_cap,
			sc->strings_len + need + 1, 1);
	if (rc)
		return rc;
	to = sc->strings + sc->strings_len;
	memcpy(to, label, dlen);
	to[dlen] = '/';
	memcpy(to + dlen + 1, sc->strings + from, *len);
	to[need] = '\0';
	*at = (uint32_t)sc->strings_len;
	*len = (uint32_t)need;
	sc->strings_len += need + 1;
	return 0;
}

/* Distinct keys among @n unlabeled members' keys (sorted here). */
static uint64_t distinct_keys(struct shard_scan *sc, struct sample_label *keys,
			      size_t n)
{
	uint64_t distinct = 0;

	if (n)
		qsort_r(keys, n, sizeof(*keys), label_cmp, sc);
	for (size_t i = 0; i < n; i++)
		distinct += i == 0 || key_cmp(sc, keys[i - 1].key, keys[i - 1].key_len,
					      keys[i].key, keys[i].key_len);
	return distinct;
}

/* Second pass of the classes layout: every member under its label. */
static int apply_labels(struct shard_scan *sc)
{
	struct sample_label *unlabeled = malloc((sc->nr_members + 1) * sizeof(*unlabeled));
	size_t kept = 0, nr_unlabeled = 0;
	int rc = 0;

	if (!unlabeled)
		return -ENOMEM;
	if (sc->nr_labels)
		qsort_r(sc->labels, sc->nr_labels, sizeof(*sc->labels), label_cmp, sc);
	for (size_t i = 0; !rc && i < sc->nr_members; i++) {
		struct raw_member rm = sc->members[i];
		uint32_t klen = (uint32_t)path_sample_key_len(sc->strings + rm.path, rm.path_len);
		const struct sample_label *l = label_find(sc, rm.path, klen);
		const char *dir = l ? sc->strings + l->label : sc->layout->unlabeled;

		if (!l)
			unlabeled[nr_unlabeled++] = (struct sample_label){
				.key = rm.path, .key_len = klen };
		if (!dir)
			continue;
		rc = move_under(sc, dir, l ? l->label_len : strlen(dir), &rm.path,
				&rm.path_len);
		if (!rc)
			sc->members[kept++] = rm;
		rc = rc == -ENOMEM ? rc : 0;
	}
	sc->nr_members = kept;
	sc->unlabeled = distinct_keys(sc, unlabeled, nr_unlabeled);
	if (nr_unlabeled)
		sc->unlabeled_example = unlabeled[0];
	free(unlabeled);
	return rc;
}

/* Reserve the arrays for the members a shard of @size bytes may hold. */
static int scan_reserve(struct shard_scan *sc, uint64_t size)
{
	uint64_t members = size / (2 * TAR_BLOCK_SIZE) + 1;

	if (members > SHARD_SCAN_RESERVE_MEMBERS_MAX)
		members = SHARD_SCAN_RESERVE_MEMBERS_MAX;
	return array_grow((void **)&sc->members, &sc->cap_members, members,
			  sizeof(*sc->members)) ?:
	       array_grow((void **)&sc->strings, &sc->strings_cap,
			  members * SHARD_SCAN_RESERVE_NAME_BYTES, 1);
}

/* Move the members and strings into @arena, freeing the heap for the
 * thread's next scan. */
static int scan_move(struct shard_scan *sc, struct bump_arena *arena)
{
	size_t mlen = sc->nr_members * sizeof(*sc->members);
	struct raw_member *m = mlen ? bump_alloc(arena, mlen) : NULL;
	char *strings = sc->strings_len ? bump_alloc(arena, sc->strings_len) : NULL;

	if ((mlen && !m) || (sc->strings_len && !strings))
		return -ENOMEM;
	if (m)
		memcpy(m, sc->members, mlen);
	if (strings)
		memcpy(strings, sc->strings, sc->strings_len);
	free(sc->members);
	free(sc->strings);
	sc->members = m;
	sc->cap_members = sc->nr_members;
	sc->strings = strings;
	sc->strings_cap = sc->strings_len;
	sc->in_arena = true;
	return 0;
}

/* Give back what scan_reserve() took and the scan did not use. */
static void scan_trim(struct shard_scan *sc)
{
	void *p;

	if (sc->nr_members && (p = realloc(sc->members, sc->nr_members * sizeof(*sc->members)))) {
		sc->members = p;
		sc->cap_members = sc->nr_members;
	}
	if (sc->strings_len && (p = realloc(sc->strings, sc->strings_len))) {
		sc->strings = p;
		sc->strings_cap = sc->strings_len;
	}
}

void shard_scan_run(struct shard_scan *sc, const struct shard *shard,
		    const struct layout *layout, struct shard_scan_thread *t)
{
	static const struct tar_scan_ops ops = { scan_member, tar_warn };

	sc->shard = shard;
	sc->layout = layout;
	sc->hash = XXH3_createState();
	if (!sc->hash || XXH3_64bits_reset(sc->hash) != XXH_OK ||
	    scan_reserve(sc, shard->size)) {
		sc->rc = -ENOMEM;
		return;
	}
	shard_source_advise(shard->src, 0, shard->size, SHARD_SOURCE_SCAN);
	sc->rc = t ? tar_scan_window(shard->src, t->window, &ops, sc, &sc->err)
		   : tar_scan(shard->src, &ops, sc, &sc->err);
	shard_source_advise(shard->src, 0, shard->size, SHARD_SOURCE_SCANNED);
	sc->digest = XXH3_64bits_digest(sc->hash);
	if (sc->rc == -E2BIG) {
		sc->err.offset = shard->size;
		snprintf(sc->err.msg, sizeof(sc->err.msg),
			 "shard exceeds a limit (%u members, %u name bytes)",
			 SHARD_INDEX_MAX_MEMBERS_PER_SHARD,
			 SHARD_INDEX_MAX_NAME_BYTES_PER_SHARD);
		sc->rc = -EINVAL;
	}
	if (!sc->rc && layout->kind == LAYOUT_CLASSES)
		sc->rc = apply_labels(sc);
	if (!sc->rc && t && !t->keep_on_heap)
		sc->rc = scan_move(sc, &t->arena);
	else
		scan_trim(sc);
}

int shard_scan_add_string(struct shard_scan *sc, const char *s, size_t len,
			  uint32_t *at, uint32_t *out_len)
{
	*out_len = (uint32_t)len;
	return pool_add(sc, s, len, at);
}

int shard_scan_add_extents(struct shard_scan *sc, const struct shard_index *idx,
			   const struct shard_sparse *sp, struct raw_member *rm)
{
	int rc = array_grow((void **)&sc->extents, &sc->cap_extents,
			    sc->nr_extents + sp->count, sizeof(*sc->extents));

	if (rc)
		return rc;
	rm->sparse = 1;
	rm->extent = (uint32_t)sc->nr_extents;
	rm->nr_extents = (uint32_t)sp->count;
	for (uint64_t i = 0; i < sp->count; i++) {
		const struct shard_extent *e = &idx->extents[sp->first + i];

		sc->extents[sc->nr_extents++] = (struct tar_extent){
			e->logical, e->length, e->physical };
	}
	return 0;
}

int shard_scan_digest(const struct shard *shard, const struct layout *layout,
		      uint64_t *digest)
{
	struct shard_scan sc = { 0 };
	int rc;

	shard_scan_run(&sc, shard, layout, NULL);
	*digest = sc.digest;
	rc = sc.rc;
	shard_scan_release(&sc);
	return rc;
}

void shard_scan_release(struct shard_scan *sc)
{
	XXH3_freeState(sc->hash);
	if (!sc->in_arena) {
		free(sc->members);
		free(sc->strings);
	}
	free(sc->extents);
	free(sc->labels);
}
