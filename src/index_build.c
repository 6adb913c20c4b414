/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_build.c - scan a shard set and lay out the index.
 *
 * The build has three phases:
 *
 *  1. Scan, in parallel: a pool of threads takes shards in turn and runs
 *     the header-only tar scanner over each, collecting normalised member
 *     records into a per-shard list.  Shards are independent, so nothing
 *     is shared but two atomic progress counters.
 *
 *  2. Merge, in shard order then member order: replay the members as GNU
 *     tar would extract them into one directory.  A hash table keyed by
 *     (parent, name) maps every path to a node; later members replace
 *     earlier ones, missing parents are synthesized, hard links bind to
 *     whatever their target names at that moment.  The calling thread
 *     merges each shard as soon as it and the shards before it are
 *     scanned, while the pool scans the next ones: the merge is serial,
 *     and waiting for the last scan before starting it made a build of
 *     tiny members take the sum of both phases.
 *
 *  3. Lay out breadth-first with each directory's children sorted by name,
 *     and copy everything into the flat arrays of struct shard_index.
 *
 * Phase 1 lives in shard_scan.c.  It dominates on cold storage; phase 2 is
 * one hash probe per path component below the last directory merged.
 *
 * A build into the index file (shard_index_build_to_file) bounds its
 * memory instead of holding every member (2.4 GiB at 10 M members: scans,
 * nodes, then the index): phase 2' merges only the directories as nodes
 * and hands every other member to sorted runs (leaf_runs.c), freeing each
 * scan once merged; phase 3' merges the runs once, to count what each
 * directory holds (entry numbers and offsets follow, per directory),
 * keeping each directory's leaves, and then visits the directories in
 * entry order, handing every entry to the writer in that order, which
 * packs it at once.  93 MiB at 10 M members (docs/benchmarks-scale.md);
 * the same bytes.  An index extended by appended shards streams its base
 * the same way, in one pass in entry order: 93 MiB at 20 M members where
 * its copy in memory took 4.8 GiB.  A hard link is bound within its own
 * shard's scan, still in memory as the shard is streamed, or the shard
 * before's (build_links.c): 2 M members with 200 k links, 133 MiB where
 * the in-memory build took 518 MiB; one further back once every shard is
 * streamed, the shards before it scanned again (bind_far_links()): links
 * 2 to 10 shards back, 132 MiB against 517.  A path both a file and a
 * directory is found only as the runs merge; the set is then streamed
 * twice more, to learn what each such path ends as and to build again
 * without what extraction skipped or replaced (build_conflicts.h).
 * Writing the
 * entries in place instead (64 bytes each, in the order of the runs,
 * packed at the end) and merging the runs a second time took 15.9-19.1 s
 * at 20 M members against 11.3-13.4 s.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "build_conflicts.h"
#include "build_links.h"
#include "leaf_runs.h"
#include "shard_scan.h"
#include "shardfs/index_file.h"
#include "shardfs/index.h"
#include "shardfs/log.h"
#include "shardfs/path.h"
#include "shardfs/tar.h"
#include "shardfs/util.h"

/* Progress is reported about this often while the build runs. */
#define BUILD_PROGRESS_NSEC (100 * 1000 * 1000)
/* A bounded build: shards the pool may scan past the last one merged
 * (their scans are in memory until merged). */
#define BUILD_SCAN_AHEAD 4

/* Labels the class names lack that the build names in its warning. */
#define BUILD_UNMAPPED_EXAMPLES 3

/* A bounded build: hard links further back than the shard before theirs
 * held until every shard is streamed (their paths and targets, about
 * 60 bytes and the names each), unless opt->far_links_max says; more
 * take the in-memory build. */
#define BUILD_FAR_LINKS_MAX (1u << 20)

/*
 * The classes layout: what the scans found of labels, kept as each shard
 * is merged (a bounded build frees each scan then), for check_labels().
 */
struct label_report {
	uint64_t unmapped;		/* samples whose label the class names
					 * lack */
	unsigned nr_examples;		/* entries used below */
	const char *example_shard[BUILD_UNMAPPED_EXAMPLES]; /* a shard of
					 * such samples (the set's path) */
	char *example_label[BUILD_UNMAPPED_EXAMPLES]; /* and one such label */
	const char *unlabeled_shard;	/* the first shard with a sample
					 * without a label; NULL: none */
	char *unlabeled_key;		/* that sample's key */
};

/* A path in the merged tree. */
struct build_node {
	const char *name;		/* last component, in a shard's pool */
	uint32_t name_len;		/* bytes in name */
	uint32_t parent;		/* node of the parent directory */
	uint32_t nr_children;		/* nodes whose parent this is */
	uint32_t shard;			/* shard of the member (or that made it);
					 * its scan holds member's strings */
	struct raw_member *member;	/* what the path names; NULL: synthesized
					 * directory */
	union {
		uint32_t last_child;	/* merge: the child with the greatest
					 * name (when nr_children) */
		uint32_t nr_subdirs;	/* layout: children that are
					 * directories */
	};
	uint32_t entry;			/* layout: entry number */
	uint32_t hash;			/* node_hash() of (parent, name): a
					 * rehash computes none */
	bool dir;			/* member is NULL or a directory (a
					 * layout that looked at member for
					 * it missed the cache for every node) */
};

struct builder {
	struct shard_set *set;		/* the shards, for messages and owners */
	struct shard_scan *scans;	/* one per shard */
	const struct shard_index_build_options *opt; /* caller's options */
	uint32_t first_shard;		/* shards before it come from a base */
	struct shard_scan base_scan;	/* members of the base index's entries */
	atomic_uint next_shard;		/* phase 1: next shard to take */
	atomic_uint shards_done;	/* phase 1: shards finished */
	atomic_ullong members_seen;	/* phase 1: members found */
	atomic_ullong bytes_done;	/* phase 1: shard bytes finished */
	bool *scanned;			/* phase 1: shard i's scan is finished
					 * (under lock) */
	pthread_t *threads;		/* phase 1: the scanning pool */
	unsigned nr_threads;		/* threads started */
	struct shard_scan_thread *scanners; /* phase 1: what each scanning
					 * thread lends its scans; the arenas
					 * live as long as the builder */
	unsigned nr_scanners;		/* entries in scanners */
	atomic_uint next_scanner;	/* the next scanning thread's entry */
	uint64_t reported;		/* monotonic_ns() of the last progress
					 * report */
	pthread_mutex_t lock;		/* guards scanned and the wake-up of
					 * the merge */
	pthread_cond_t done_cond;	/* signalled when a shard finishes */
	struct build_node *nodes;	/* phase 2: the tree (mapped_array_grow) */
	uint32_t nr_nodes;		/* nodes used */
	size_t cap_nodes;		/* nodes allocated */
	uint32_t *slots;		/* hash table of node + 1; 0 is empty */
	uint64_t slot_mask;		/* table size - 1 (a power of two) */
	const char *dir;		/* the parent directory of the last
					 * member merged, in its shard's pool */
	size_t dir_len;			/* bytes in dir; 0: none yet */
	uint32_t dir_node;		/* the node of dir */
	struct shard_index_counts counts; /* totals */
	struct shard_inode *inodes;	/* phase 3: the entries laid out, in
					 * entry order, before they are packed */
	char *names;			/* phase 3: their names and link
					 * targets, NUL-terminated */
	uint64_t names_len;		/* bytes in names */
	char *padded;			/* classes layout: the padded names of
					 * numeric class directories */
	struct label_report labels;	/* classes layout: labels to report */
	bool bounded;			/* a build into a file (phase 2'): only
					 * directories are nodes, leaves go to
					 * runs, each scan is freed once merged */
	struct leaf_runs runs;		/* bounded: the leaves */
	struct build_links links;	/* bounded: hard links and their
					 * groups */
	struct bump_arena dir_arena;	/* bounded: names and members of the
					 * directories (the scans are freed) */
	uint32_t merged;		/* bounded: shards merged; the pool
					 * scans at most BUILD_SCAN_AHEAD past
					 * it (under lock) */
	pthread_cond_t merged_cond;	/* bounded: signalled as merged moves */
	bool scan_paced;		/* bounded: the pool waits for the merge
					 * (false only when no thread started) */
	const char *leaf_dir;		/* bounded: the directory of the last
					 * leaf, in its shard's pool */
	size_t leaf_dir_len;		/* bytes in leaf_dir; 0: none */
	uint32_t leaf_dir_node;		/* the node of leaf_dir */
	struct far_link *far;		/* bounded: hard links whose target
					 * is further back than the shard
					 * before, in stream order, bound once
					 * every shard is streamed
					 * (bind_far_links()) */
	size_t nr_far;			/* entries used */
	size_t cap_far;			/* entries allocated */
	struct bump_arena far_arena;	/* bounded: their paths and targets */
	uint32_t far_refused;		/* bounded: those refused (warned up
					 * to SHARD_INDEX_WARNINGS_PER_SHARD) */
	char why_in_memory[1024];	/* bounded: why the set needs the
					 * in-memory build (-EAGAIN), and where */
	struct build_conflicts conflicts; /* bounded: the paths both a file
					 * and a directory, once found, which
					 * the set is streamed again for */
	const char *scratch_dir;	/* bounded: where scratch files go
					 * (the index's directory) */
	uint32_t *base_ranks;		/* bounded extension: per base entry,
					 * its rank among its shard's files in
					 * ORDER (base_ranks()); a mapping */
	size_t base_ranks_len;		/* bytes mapped */
	uint64_t limit_bytes;		/* in memory: opt->memory_limit, or
					 * what the machine had, if it said */
	uint64_t members_limit;		/* in memory: members past the base's
					 * entries whose build fits in it; 0:
					 * any */
	atomic_bool over_limit;		/* in memory: the scan passed it and
					 * stopped */
};

static void scan_one_shard(struct builder *b, uint32_t i,
			   struct shard_scan_thread *t)
{
	struct shard_scan *sc = &b->scans[i];
	struct shard *s = &b->set->shards[i];
	struct shard_source *stored = s->src;
	uint64_t n;

	if (s->bad)	/* could not even be opened */
		return;
	/* what the shard is, its first bytes say; a compressed shard is
	 * decoded once first, to learn where decoding can start
	 * (seek_table.h) and how long it is: all its stored bytes are read,
	 * so they are not scanned (source_remote.c) */
	sc->shard = s;
	sc->err.offset = 0;
	sc->quiet = b->conflicts.nr != 0;	/* a replay: the first scan said them */
	shard_source_advise(stored, 0, stored->size, SHARD_SOURCE_SCAN);
	sc->rc = shard_source_detect(&s->src, s->path, sc->err.msg, sizeof(sc->err.msg));
	if (s->src != stored)
		shard_source_advise(stored, 0, stored->size, SHARD_SOURCE_SCANNED);
	if (!sc->rc && shard_source_needs_seek(s->src))
		sc->rc = s->src->ops->seek_build(s->src, sc->err.msg,
						 sizeof(sc->err.msg));
	if (sc->rc)
		return;
	s->size = s->src->size;
	shard_scan_run(sc, s, layout_or_tree(b->opt->layout), t);
	n = sc->nr_members + sc->skipped + sc->special;
	if (atomic_fetch_add(&b->members_seen, n) + n > b->members_limit && b->members_limit)
		atomic_store(&b->over_limit, true);	/* no more shards scanned */
	atomic_fetch_add(&b->bytes_done, sc->shard->size);
}

/* A scanning thread: shards in turn, with one window and one arena. */
static void *scan_worker(void *arg)
{
	struct builder *b = arg;
	unsigned me = atomic_fetch_add(&b->next_scanner, 1);
	uint32_t i;

	assert(me < b->nr_scanners);
	while ((i = atomic_fetch_add(&b->next_shard, 1)) < b->set->nr) {
		if (b->scan_paced) {
			pthread_mutex_lock(&b->lock);
			while (i >= b->merged + BUILD_SCAN_AHEAD)
				pthread_cond_wait(&b->merged_cond, &b->lock);
			pthread_mutex_unlock(&b->lock);
		}
		if (atomic_load(&b->over_limit))
			b->scans[i].rc = -ENOMEM;	/* the build stops */
		else
			scan_one_shard(b, i, &b->scanners[me]);
		pthread_mutex_lock(&b->lock);
		b->scanned[i] = true;
		atomic_fetch_add(&b->shards_done, 1);
		pthread_cond_signal(&b->done_cond);
		pthread_mutex_unlock(&b->lock);
	}
	return NULL;
}

/* Report the scan's progress; the end (all shards) only when @final. */
static void report_progress(struct builder *b, bool final)
{
	struct shard_index_progress p = {
		.shards_done = atomic_load(&b->shards_done),
		.shards_total = b->set->nr,
		.members = atomic_load(&b->members_seen),
		.bytes = atomic_load(&b->bytes_done),
	};

	b->reported = monotonic_ns();
	if (b->opt->progress && (final || p.shards_done < p.shards_total))
		b->opt->progress(b->opt->progress_arg, &p);
}

/* Report progress if the last report is BUILD_PROGRESS_NSEC old. */
static void progress_tick(struct builder *b)
{
	if (monotonic_ns() - b->reported >= BUILD_PROGRESS_NSEC)
		report_progress(b, false);
}

/* Wait until shard @i is scanned, reporting progress meanwhile. */
static void wait_for_scan(struct builder *b, uint32_t i)
{
	pthread_mutex_lock(&b->lock);
	while (!b->scanned[i]) {
		uint64_t due = b->reported + BUILD_PROGRESS_NSEC;
		struct timespec ts = { .tv_sec = (time_t)(due / 1000000000),
				       .tv_nsec = (long)(due % 1000000000) };

		if (pthread_cond_timedwait(&b->done_cond, &b->lock, &ts)) {
			pthread_mutex_unlock(&b->lock);
			progress_tick(b);
			pthread_mutex_lock(&b->lock);
		}
	}
	pthread_mutex_unlock(&b->lock);
}

/* Phase 1: start the pool that scans all shards (or scan them here). */
static int scan_start(struct builder *b)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = b->opt->threads ? b->opt->threads : cpus > 0 ? (unsigned)cpus : 1;

	if (n > b->set->nr - b->first_shard)
		n = b->set->nr - b->first_shard;
	b->scanners = calloc(n ? n : 1, sizeof(*b->scanners));
	if (!b->scanners)
		return -ENOMEM;
	for (b->nr_scanners = 0; b->nr_scanners < (n ? n : 1); b->nr_scanners++) {
		b->scanners[b->nr_scanners].window = malloc(TAR_WINDOW_SIZE);
		b->scanners[b->nr_scanners].keep_on_heap = b->bounded;
		if (!b->scanners[b->nr_scanners].window)
			return -ENOMEM;
	}
	if (n <= 1 && !b->bounded) {	/* a thread would only add its
					 * start-up cost (a bounded merge
					 * needs the scan beside it) */
		scan_worker(b);
		return 0;
	}
	b->threads = calloc(n, sizeof(*b->threads));
	if (!b->threads)
		return -ENOMEM;
	for (; b->nr_threads < n; b->nr_threads++)
		if (pthread_create(&b->threads[b->nr_threads], NULL, scan_worker, b))
			break;
	if (b->nr_threads == 0) {
		b->scan_paced = false;	/* all scanned first: no one to wait for */
		scan_worker(b);
	}
	return 0;
}

/* Let the pool take no more shards, wait for it, report the end. */
static void scan_finish(struct builder *b)
{
	atomic_store(&b->next_shard, b->set->nr);
	pthread_mutex_lock(&b->lock);
	b->merged = b->set->nr;		/* wakes a thread waiting to scan ahead */
	pthread_cond_broadcast(&b->merged_cond);
	pthread_mutex_unlock(&b->lock);
	for (unsigned i = 0; i < b->nr_threads; i++)
		pthread_join(b->threads[i], NULL);
	b->nr_threads = 0;
	report_progress(b, true);
}

/*
 * Fail the build on bad shard @i, or drop the shard if allowed.  Returns
 * 0 (merge it), -EINVAL (logged) or -ENOMEM.
 */
static int check_scan(struct builder *b, uint32_t i)
{
	struct shard_scan *sc = &b->scans[i];

	if (sc->rc == -ENOMEM)
		return -ENOMEM;
	if (!sc->rc)
		return 0;
	if (b->opt->skip_bad_shards) {
		if (!sc->quiet)
			log_warn("%s: offset %llu: %s; shard skipped", sc->shard->path,
				 (unsigned long long)sc->err.offset, sc->err.msg);
		b->set->shards[i].bad = true;
		sc->nr_members = 0;
		return 0;
	}
	log_error("%s: offset %llu: %s", sc->shard->path,
		  (unsigned long long)sc->err.offset, sc->err.msg);
	return -EINVAL;
}

/* The hash of (parent, name); 32 bits index a table of 2^32 slots. */
static uint32_t node_hash(uint32_t parent, const char *name, size_t len)
{
	return (uint32_t)XXH3_64bits_withSeed(name, len, parent);
}

/* Rehash into a table of @size slots (a power of two). */
static int table_resize(struct builder *b, uint64_t size)
{
	uint32_t *slots = calloc_huge(size, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (uint32_t id = 1; id < b->nr_nodes; id++) {	/* not the root */
		const struct build_node *n = &b->nodes[id];
		uint64_t h = n->hash;

		while (slots[h & (size - 1)])
			h++;
		slots[h & (size - 1)] = id + 1;
	}
	free(b->slots);
	b->slots = slots;
	b->slot_mask = size - 1;
	return 0;
}

/*
 * Make room for @nodes nodes in all: the node array and a table at most
 * half full, so that a shard's merge grows neither.
 */
static int table_reserve(struct builder *b, uint64_t nodes)
{
	uint64_t size = 1024;

	if (nodes > SHARD_INDEX_MAX_ENTRIES)
		nodes = 1;	/* grown on demand until node_new() says E2BIG */
	while (size / 2 < nodes)
		size *= 2;
	return mapped_array_grow((void **)&b->nodes, &b->cap_nodes, nodes, sizeof(*b->nodes)) ?:
	       size > b->slot_mask + 1 ? table_resize(b, size) : 0;
}

/* The slot holding (parent, name), or the empty slot where it belongs. */
static uint32_t *table_find(struct builder *b, uint32_t parent,
			    const char *name, size_t len)
{
	uint64_t h = node_hash(parent, name, len);

	for (;; h++) {
		uint32_t *slot = &b->slots[h & b->slot_mask];
		const struct build_node *n;

		if (!*slot)
			return slot;
		n = &b->nodes[*slot - 1];
		if (n->parent == parent && n->name_len == len &&
		    !memcmp(n->name, name, len))
			return slot;
	}
}

static bool node_is_dir(const struct build_node *n)
{
	return n->dir;
}

/* Let @n name @member, whose data shard @shard holds. */
static void node_bind(struct build_node *n, struct raw_member *member,
		      uint32_t shard)
{
	n->member = member;
	n->dir = member->type == TAR_DIR;
	n->shard = shard;
}

/* The scan holding the strings and runs of @n's member. */
static const struct shard_scan *node_scan(const struct builder *b,
					  const struct build_node *n)
{
	return n->shard < b->first_shard ? &b->base_scan : &b->scans[n->shard];
}

/*
 * Does (@parent, @name) certainly not exist?  So when @parent has no
 * child or @name comes after its last: shards hold their samples sorted,
 * so most new names do, and they are added without a probe of the table
 * (whose misses were most of the merge's time).
 */
static bool child_is_new(const struct builder *b, uint32_t parent,
			 const char *name, size_t len)
{
	const struct build_node *p = &b->nodes[parent];
	const struct build_node *last = &b->nodes[p->last_child];

	return !p->nr_children ||
	       shard_index_name_cmp(name, len, last->name, last->name_len) > 0;
}

/* The node for (@parent, @name), or -ENOENT. */
static int64_t child_find(struct builder *b, uint32_t parent,
			  const char *name, size_t len)
{
	uint32_t *slot;

	if (child_is_new(b, parent, name, len))
		return -ENOENT;
	slot = table_find(b, parent, name, len);
	if (!*slot)
		return -ENOENT;
	return *slot - 1;
}

/* Add the node (parent, name), which the table does not hold, as a
 * synthesized directory; returns it or -errno. */
static int64_t node_new(struct builder *b, uint32_t parent, const char *name,
			size_t len, uint32_t shard)
{
	uint32_t id = b->nr_nodes;
	struct build_node *p;
	uint64_t h;
	int rc;

	if (b->nr_nodes >= SHARD_INDEX_MAX_ENTRIES)
		return -E2BIG;
	if (b->nr_nodes + 1 > (b->slot_mask + 1) / 2) {
		rc = table_resize(b, 2 * (b->slot_mask + 1));
		if (rc)
			return rc;
	}
	rc = mapped_array_grow((void **)&b->nodes, &b->cap_nodes, b->nr_nodes + 1,
			       sizeof(*b->nodes));
	if (rc)
		return rc;
	if (b->bounded) {	/* the scan holding @name is freed once merged */
		char *copy = len ? bump_alloc(&b->dir_arena, len) : NULL;

		if (len && !copy)
			return -ENOMEM;
		name = len ? memcpy(copy, name, len) : name;
	}
	b->nodes[id] = (struct build_node){
		.name = name, .name_len = (uint32_t)len, .parent = parent,
		.hash = node_hash(parent, name, len), .shard = shard,
		.dir = true,
	};
	for (h = b->nodes[id].hash; b->slots[h & b->slot_mask]; h++)
		;
	b->slots[h & b->slot_mask] = id + 1;
	p = &b->nodes[parent];
	if (child_is_new(b, parent, name, len))
		p->last_child = id;
	p->nr_children++;
	b->nr_nodes++;
	return id;
}

/*
 * Find the node for @path, creating missing directories on the way (and
 * the node itself) when @create.  Returns the node, -ENOENT when absent
 * and not created, -ENOTDIR when a parent is not a directory.
 *
 * Members of a sample, and often of a shard, share their directory: the
 * walk starts below the last directory a created path went through.  That
 * directory has a child from then on, so it stays a directory (a
 * non-directory never replaces a non-empty one), and so do its parents.
 */
static int64_t node_walk(struct builder *b, const char *path, size_t len,
			 uint32_t shard, bool create)
{
	const char *last = memrchr(path, '/', len);
	size_t dir_len = last ? (size_t)(last - path) : 0;
	uint32_t parent = 0;
	size_t start = 0;

	if (dir_len && dir_len == b->dir_len && !memcmp(path, b->dir, dir_len)) {
		parent = b->dir_node;
		start = dir_len + 1;
	}
	while (start < len) {
		const char *slash = memchr(path + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - path) : len;
		int64_t id = child_find(b, parent, path + start, end - start);

		if (id == -ENOENT && create)
			id = node_new(b, parent, path + start, end - start, shard);
		if (id < 0)
			return id;
		if (end < len && !node_is_dir(&b->nodes[id]))
			return -ENOTDIR;
		parent = (uint32_t)id;
		start = end + 1;
		if (create && end == dir_len) {
			b->dir = path;
			b->dir_len = dir_len;
			b->dir_node = parent;
		}
	}
	return parent;
}

/* What a hard link the merge refuses is warned as. */
static const char hardlink_refused[] =
	"hard link target missing, a directory or later in the shard set:";

static void merge_warn(struct builder *b, struct shard_scan *sc,
		       const struct raw_member *rm, const char *what)
{
	b->counts.skipped++;
	shard_scan_warn(sc, rm->header_offset, what, sc->strings + rm->path,
		  rm->path_len);
}

/*
 * What a hard link binds to: the member its target names at this point
 * of the extraction.  Links to later members, to directories or to
 * nothing are refused, as GNU tar refuses to extract them.
 */
static struct build_node *hardlink_target(struct builder *b,
					  struct shard_scan *sc,
					  const struct raw_member *rm)
{
	int64_t id = node_walk(b, sc->strings + rm->link, rm->link_len, 0, false);

	if (id < 0 || node_is_dir(&b->nodes[id]))
		return NULL;
	return &b->nodes[id];
}

/* Phase 2 for one member: bind its path to it, as extraction would. */
static int merge_member(struct builder *b, struct shard_scan *sc,
			uint32_t shard, struct raw_member *rm)
{
	struct raw_member *target = rm;
	struct build_node *n, *t;
	int64_t id;

	if (rm->type == TAR_HARDLINK) {
		t = hardlink_target(b, sc, rm);
		if (!t) {
			merge_warn(b, sc, rm, hardlink_refused);
			return 0;
		}
		target = t->member;
		shard = t->shard;
	}
	id = node_walk(b, sc->strings + rm->path, rm->path_len, shard, true);
	if (id == -ENOTDIR) {
		merge_warn(b, sc, rm, "a parent directory is not a directory:");
		return 0;
	}
	if (id < 0)
		return (int)id;
	n = &b->nodes[id];
	if (target->type != TAR_DIR && node_is_dir(n) && n->nr_children) {
		merge_warn(b, sc, rm, "would replace a non-empty directory:");
		return 0;
	}
	if (!node_is_dir(n) && target->type != TAR_DIR)
		b->counts.duplicates++;
	node_bind(n, target, shard);
	return 0;
}

/* The layout if it is the classes layout, else NULL. */
static const struct layout *classes_layout(const struct builder *b)
{
	const struct layout *l = b->opt->layout;

	return l && l->kind == LAYOUT_CLASSES ? l : NULL;
}

/* A padded class directory of a base index back to its label ("007" -> "7"). */
static void unpad_number(const char **name, uint32_t *len)
{
	if (!layout_is_number(*name, *len))
		return;
	while (*len > 1 && **name == '0') {
		(*name)++;
		(*len)--;
	}
}

/* A member standing for base entry @in (see seed_from_base). */
static int seed_member(struct shard_scan *sc, const struct shard_index *base,
		       const struct shard_inode *in, struct raw_member *rm)
{
	*rm = (struct raw_member){
		.data_offset = in->data, .size = in->size,
		.mtime_sec = in->mtime_sec, .mtime_nsec = in->mtime_nsec,
		.mode = in->mode & 07777, .uid = in->uid, .gid = in->gid,
		.type = S_ISDIR(in->mode) ? TAR_DIR : S_ISLNK(in->mode) ? TAR_SYMLINK
								 : TAR_FILE,
		.group = UINT32_MAX,
	};
	if (S_ISLNK(in->mode))
		return shard_scan_add_string(sc, shard_index_target(base, in), in->size,
					     &rm->link, &rm->link_len);
	if (in->flags & SHARD_INODE_SPARSE)
		return shard_scan_add_extents(sc, base, &base->sparse[in->data], rm);
	return 0;
}

/* The merge's totals of the base index's shards. */
static void base_counts(struct builder *b, const struct shard_index *base)
{
	b->counts.members = base->counts.members;
	b->counts.duplicates = base->counts.duplicates;
	b->counts.skipped = base->counts.skipped;
	b->counts.special = base->counts.special;
	b->counts.unlabeled = base->counts.unlabeled;
}

/* The node of base entry @e (@in, named @name, @len bytes) below node
 * @parent: the one the tree has, or a new one; or -errno. */
static int64_t base_node(struct builder *b, uint32_t e, const struct shard_inode *in,
			 const char *name, uint32_t len, uint32_t parent)
{
	int64_t id;

	if (!e)
		return 0;	/* the root */
	if (in->parent == 0 && classes_layout(b))
		unpad_number(&name, &len);
	id = child_find(b, parent, name, len);
	return id == -ENOENT ? node_new(b, parent, name, len, in->shard) : id;
}

/*
 * Rebuild the merge state from an existing index, as if its shards had
 * just been merged: one node per entry, each bound to a member that
 * carries the entry's attributes.  Later names of a hard-link group share
 * the member of the group's first entry, so groups survive.
 */
static int seed_from_base(struct builder *b, const struct shard_index *base)
{
	struct shard_scan *sc = &b->base_scan;
	uint32_t nr = shard_index_nr(base);
	uint32_t *node_of = calloc_huge(nr, sizeof(*node_of));
	struct compact_cursor cur;
	struct shard_inode in;
	int rc = 0;

	sc->members = calloc_huge(nr, sizeof(*sc->members));
	if (!node_of || !sc->members) {
		free(node_of);
		return -ENOMEM;
	}
	compact_cursor_init(&cur, &base->entries, 0);
	for (uint32_t e = 0; !rc && compact_cursor_next(&cur, &in); e++) {
		uint64_t first = shard_index_ino(base, e) - 1;
		uint32_t len = (uint32_t)cur.name_len;
		char *copy = len ? bump_alloc(&b->dir_arena, len) : NULL; /* nodes keep it */
		const char *name = copy ? memcpy(copy, cur.name, len) : "";
		int64_t id;

		if (len && !copy) {
			rc = -ENOMEM;
			break;
		}
		id = base_node(b, e, &in, name, len, node_of[in.parent]);
		if (id < 0) {
			rc = (int)id;
			break;
		}
		node_of[e] = (uint32_t)id;
		if (in.flags & SHARD_INODE_SYNTHESIZED)
			continue;	/* stays synthesized: its time is recomputed */
		if (first == e)
			rc = seed_member(sc, base, &in, &sc->members[e]);
		node_bind(&b->nodes[node_of[e]], &sc->members[first], in.shard);
	}
	sc->nr_members = nr;
	base_counts(b, base);
	free(node_of);
	return rc;
}

/* Keep what check_labels() reports of scan @sc.  0 or -ENOMEM. */
static int label_report_add(struct label_report *r, const struct shard_scan *sc)
{
	const struct sample_label *ex = &sc->unlabeled_example;

	r->unmapped += sc->unmapped;
	if (sc->unmapped && r->nr_examples < BUILD_UNMAPPED_EXAMPLES) {
		r->example_shard[r->nr_examples] = sc->shard->path;
		if (!(r->example_label[r->nr_examples++] =
			      strdup(sc->strings + sc->unmapped_example)))
			return -ENOMEM;
	}
	if (sc->unlabeled && !r->unlabeled_shard) {
		r->unlabeled_shard = sc->shard->path;
		r->unlabeled_key = strndup(sc->strings + ex->key, ex->key_len);
		if (!r->unlabeled_key)
			return -ENOMEM;
	}
	return 0;
}

static void label_report_release(struct label_report *r)
{
	for (unsigned i = 0; i < r->nr_examples; i++)
		free(r->example_label[i]);
	free(r->unlabeled_key);
	*r = (struct label_report){ 0 };
}

/* Shard @s's totals, and what check_labels() reports of it. */
static int shard_totals(struct builder *b, uint32_t s)
{
	const struct shard_scan *sc = &b->scans[s];

	b->counts.members += sc->nr_members + sc->skipped + sc->special;
	b->counts.skipped += sc->skipped;
	b->counts.unlabeled += sc->unlabeled;
	b->counts.special += sc->special;
	b->set->shards[s].members = sc->nr_members;
	b->set->shards[s].digest = sc->digest;
	return classes_layout(b) ? label_report_add(&b->labels, sc) : 0;
}

/* Phase 2 for shard @s: its totals, then its members in archive order. */
static int merge_shard(struct builder *b, uint32_t s)
{
	struct shard_scan *sc = &b->scans[s];
	int rc = table_reserve(b, (uint64_t)b->nr_nodes + sc->nr_members) ?: shard_totals(b, s);

	for (size_t i = 0; !rc && i < sc->nr_members; i++)
		rc = merge_member(b, sc, s, &sc->members[i]);
	return rc;
}

/* Bounded: let directory node @id name (a copy of) directory @rm. */
static int stream_dir_member(struct builder *b, int64_t id, const struct raw_member *rm,
			     uint32_t shard)
{
	struct raw_member *copy = bump_alloc(&b->dir_arena, sizeof(*copy));

	if (id < 0)
		return (int)id;
	if (!copy)
		return -ENOMEM;
	*copy = *rm;
	copy->path_len = copy->link_len = copy->nr_extents = 0;	/* not kept */
	node_bind(&b->nodes[id], copy, shard);
	return 0;
}

/* Bounded: the directory node of the first @len bytes of @path. */
static int64_t stream_leaf_dir(struct builder *b, const char *path, size_t len,
			       uint32_t shard)
{
	int64_t id;

	if (!len)
		return 0;
	if (len == b->leaf_dir_len && !memcmp(path, b->leaf_dir, len))
		return b->leaf_dir_node;
	id = node_walk(b, path, len, shard, true);
	if (id >= 0) {
		b->leaf_dir = path;
		b->leaf_dir_len = len;
		b->leaf_dir_node = (uint32_t)id;
	}
	return id;
}

/* Which member a leaf record stands for (leaf_runs.h). */
struct leaf_origin {
	uint32_t shard;		/* its shard */
	uint32_t member;	/* its number there: its order among the
				 * path's copies, and ORDER's slot */
	uint16_t linked;	/* a hard link (leaf_record.linked), to: */
	uint32_t group;		/* the member whose inode it shares */
};

/*
 * Bounded: hand file or symlink @rm (for a hard link, its target's) to
 * the runs as the leaf @o of directory node @dir named @name (@len
 * bytes); its link target and sparse runs are in @sc.
 */
static int stream_leaf(struct builder *b, const struct shard_scan *sc,
		       const struct raw_member *rm, const struct leaf_origin *o,
		       uint32_t dir, const char *name, size_t len)
{
	/* a symlink's sparse map (a hostile header's) goes unused, as the
	 * in-memory build's fill_leaf() leaves it */
	const bool sparse = rm->sparse && rm->type != TAR_SYMLINK;
	const struct leaf_record rec = {
		.data_offset = rm->data_offset, .size = rm->size,
		.mtime_sec = rm->mtime_sec, .mtime_nsec = rm->mtime_nsec,
		.dir = dir, .shard = o->shard, .member = o->member, .mode = rm->mode,
		.uid = rm->uid, .gid = rm->gid, .name_len = (uint32_t)len,
		.link_len = rm->type == TAR_SYMLINK ? rm->link_len : 0,
		.nr_extents = sparse ? rm->nr_extents : 0,
		.type = rm->type, .sparse = sparse, .linked = o->linked,
		.group = o->linked ? o->group : 0 };

	assert(o->linked <= LEAF_LINKED_MAX && (!o->linked || o->linked - 1u <= o->shard));

	return leaf_runs_add(&b->runs, &(struct leaf_view){
		.rec = &rec, .name = name,
		.link = rm->type == TAR_SYMLINK ? sc->strings + rm->link : NULL,
		.extents = sparse && rm->nr_extents ? sc->extents + rm->extent : NULL });
}

/* Bounded: say @what sends the set to the in-memory build, at the member
 * of shard @shard (its path) whose header is at @off, named @path
 * (@path_len bytes), a link to @link (@link_len bytes; 0: none). */
static void why_at(struct builder *b, const char *what, const char *shard, uint64_t off,
		   const char *path, uint32_t path_len, const char *link, uint32_t link_len)
{
	snprintf(b->why_in_memory, sizeof(b->why_in_memory), "%s (%s: offset %llu: '%.*s'%s%.*s%s)",
		 what, shard, (unsigned long long)off, (int)path_len, path,
		 link_len ? " -> '" : "", (int)link_len, link, link_len ? "'" : "");
}

/* why_at() member @rm of scan @sc. */
static void member_why(struct builder *b, const struct shard_scan *sc,
		       const struct raw_member *rm, const char *what)
{
	why_at(b, what, sc->shard->path, rm->header_offset, sc->strings + rm->path,
	       rm->path_len, sc->strings + rm->link, rm->link_len);
}

/*
 * Bounded: the member that hard link @i of @sc binds to, in *@group, and
 * in @o->linked whether in its shard or the one before.  1 when refused
 * (warned and skipped, as merge_member() does); 2 when its target is
 * further back (far_defer()); -EAGAIN when only the in-memory build binds
 * it: a link to another link bound further back (build_links.h).
 */
static int stream_hardlink(struct builder *b, struct shard_scan *sc, uint32_t i,
			   struct leaf_origin *o)
{
	bool prev;
	int rc = build_links_resolve(&b->links, i, &o->group, &prev);

	o->linked = prev ? LEAF_LINKED_PREV : LEAF_LINKED_SAME;
	if (rc == -EXDEV)
		return 2;
	if (rc == -EAGAIN)
		member_why(b, sc, &sc->members[i], "a hard link in it names another hard "
			   "link bound further back than the shard before it");
	if (rc != -ENOENT)
		return rc;
	merge_warn(b, sc, &sc->members[i], hardlink_refused);
	return 1;
}

/* A hard link whose target is further back than the shard before its
 * own, bound once every shard is streamed (bind_far_links()). */
struct far_link {
	uint32_t shard;		/* its shard */
	uint32_t member;	/* its member number there */
	uint32_t path_len;	/* bytes of its path */
	uint32_t target_len;	/* bytes of its target's path */
	bool settled;		/* bound or refused */
	uint64_t header_offset;	/* its header, for messages */
	const char *path;	/* its path, then its target's (far_arena) */
};

/*
 * Bounded: hard link @i of @sc (shard @shard), whose target is further
 * back than the shard before, waits for bind_far_links(); its directory
 * is made only then, as a link refused makes none in memory.  0, -ENOMEM,
 * or -EAGAIN past opt->far_links_max of them (their paths are held
 * until then).
 */
static int far_defer(struct builder *b, const struct shard_scan *sc, uint32_t shard,
		     uint32_t i)
{
	const struct raw_member *rm = &sc->members[i];
	uint32_t max = b->opt->far_links_max ? b->opt->far_links_max : BUILD_FAR_LINKS_MAX;
	char *copy;

	if (b->nr_far == max) {
		char what[128];

		snprintf(what, sizeof(what), "more than %u hard links in it name members "
			 "further back than the shard before theirs", max);
		member_why(b, sc, rm, what);
		return -EAGAIN;
	}
	if (array_grow((void **)&b->far, &b->cap_far, b->nr_far + 1, sizeof(*b->far)) ||
	    !(copy = bump_alloc(&b->far_arena, (size_t)rm->path_len + rm->link_len + 1)))
		return -ENOMEM;
	memcpy(copy, sc->strings + rm->path, rm->path_len);
	memcpy(copy + rm->path_len, sc->strings + rm->link, rm->link_len);
	b->far[b->nr_far++] = (struct far_link){
		.shard = shard, .member = i, .path_len = rm->path_len,
		.target_len = rm->link_len, .header_offset = rm->header_offset,
		.path = copy };
	return 0;
}

/* Bounded: the set is streamed only to learn what its paths both a file
 * and a directory end as (build_replayed()). */
static bool learning(const struct builder *b)
{
	return b->conflicts.nr && !b->conflicts.settled;
}

/*
 * Bounded, a set with paths both a file and a directory: what becomes of
 * member @rm of @sc (build_conflicts.h): 0 kept, 1 left out (a skipped
 * one warned once the conflicts are learnt), -EAGAIN for a hard link at,
 * below or to such a path (it binds what the path named then).
 */
static int conflict_member(struct builder *b, struct shard_scan *sc,
			   const struct raw_member *rm)
{
	const char *path = sc->strings + rm->path, *what = NULL;
	struct build_conflicts *c = &b->conflicts;
	enum build_conflict_verdict verdict;

	if (rm->type == TAR_HARDLINK &&
	    (build_conflicts_covers(c, path, rm->path_len) ||
	     build_conflicts_covers(c, sc->strings + rm->link, rm->link_len))) {
		member_why(b, sc, rm, "a hard link in it is at or names a path both a "
			   "directory and a file");
		return -EAGAIN;
	}
	verdict = build_conflicts_member(c, path, rm->path_len, rm->type == TAR_DIR, &what);
	if (verdict == BUILD_CONFLICT_SKIP && c->settled)
		merge_warn(b, sc, rm, what);
	return verdict != BUILD_CONFLICT_KEEP;
}

/*
 * Phase 2' (bounded) for one member: a directory becomes (or binds) a
 * node, anything else a leaf record of its directory's node (a hard link
 * its target's, stream_hardlink(), or later: far_defer()).  -EAGAIN for
 * what only the in-memory merge replays: a hard link to a link bound
 * further back, a root that is not a directory.  While the conflicts are
 * learnt, no more than conflict_member().
 */
static int stream_member(struct builder *b, struct shard_scan *sc, uint32_t shard,
			 uint32_t i)
{
	const struct raw_member *rm = &sc->members[i];
	const char *path = sc->strings + rm->path;
	const char *slash = memrchr(path, '/', rm->path_len);
	size_t dir_len = slash ? (size_t)(slash - path) : 0;
	struct leaf_origin o = { shard, i, 0, i };
	const struct shard_scan *data = sc;	/* where the data's member is */
	int64_t dir;

	if (!rm->path_len && rm->type != TAR_DIR) {
		member_why(b, sc, rm, "its root is not a directory");
		return -EAGAIN;
	}
	if (b->conflicts.nr) {
		int rc = conflict_member(b, sc, rm);

		if (rc || learning(b))
			return rc > 0 ? 0 : rc;
	}
	if (rm->type == TAR_DIR)
		return stream_dir_member(b, node_walk(b, path, rm->path_len, shard, true),
					 rm, shard);
	if (rm->type == TAR_HARDLINK) {
		int rc = stream_hardlink(b, sc, i, &o);

		if (rc == 2)
			return far_defer(b, sc, shard, i);
		if (rc)
			return rc > 0 ? 0 : rc;
		if (o.linked == LEAF_LINKED_PREV)
			data = &b->scans[shard - 1];
	}
	dir = stream_leaf_dir(b, path, dir_len, shard);
	if (dir < 0)
		return (int)dir;
	return stream_leaf(b, data, &data->members[o.group], &o, (uint32_t)dir,
			   slash ? slash + 1 : path, rm->path_len - (slash ? dir_len + 1 : 0));
}

/* A directory of the base index and the node it became. */
struct base_dir {
	uint32_t entry;		/* its entry in the base */
	uint32_t node;		/* its node */
};

/* The base index's directories, as stream_from_base() makes them nodes. */
struct base_dirs {
	struct base_dir *dir;	/* in entry order */
	size_t nr;		/* entries used */
	size_t cap;		/* entries allocated */
	size_t last;		/* the one found last (a directory's
				 * entries follow one another) */
};

static int base_dir_cmp(const void *key, const void *p)
{
	uint32_t e = *(const uint32_t *)key, entry = ((const struct base_dir *)p)->entry;

	return (e > entry) - (e < entry);
}

/* The node of base directory entry @e, or -EIO when @e is none. */
static int64_t base_dir_node(struct base_dirs *d, uint32_t e)
{
	const struct base_dir *found;

	if (!d->nr)
		return -EIO;
	if (d->last < d->nr && d->dir[d->last].entry == e)
		return d->dir[d->last].node;
	found = bsearch(&e, d->dir, d->nr, sizeof(*d->dir), base_dir_cmp);
	if (!found)
		return -EIO;
	d->last = (size_t)(found - d->dir);
	return found->node;
}

/* Bounded: base directory entry @e (@in, named @name, @len bytes) as a
 * node below node @parent. */
static int stream_base_dir(struct builder *b, const struct shard_index *base,
			   struct base_dirs *d, uint32_t e, const struct shard_inode *in,
			   const char *name, uint32_t len, uint32_t parent)
{
	int64_t id = base_node(b, e, in, name, len, parent);
	struct raw_member rm;
	int rc;

	if (id < 0)
		return (int)id;
	rc = array_grow((void **)&d->dir, &d->cap, d->nr + 1, sizeof(*d->dir));
	if (rc)
		return rc;
	d->dir[d->nr++] = (struct base_dir){ e, (uint32_t)id };
	if (in->flags & SHARD_INODE_SYNTHESIZED)
		return 0;	/* stays synthesized: its time is recomputed */
	rc = seed_member(&b->base_scan, base, in, &rm);
	return rc ?: stream_dir_member(b, id, &rm, in->shard);
}

/* Bounded: base entry @in as member *@rm, its link target or sparse runs
 * in b->base_scan, which holds one leaf's at a time. */
static int seed_base_leaf(struct builder *b, const struct shard_index *base,
			  const struct shard_inode *in, struct raw_member *rm)
{
	b->base_scan.strings_len = b->base_scan.nr_extents = 0;
	return seed_member(&b->base_scan, base, in, rm);
}

/*
 * Bounded: base file or symlink entry @e (@in) as a leaf of directory
 * node @dir named @name (@len bytes), member @e of its shard in the
 * records: a base's paths are unique, and ORDER's slot is its rank
 * (base_ranks(), slot_member()).  A later name of a hard-link group
 * (@first its group's first entry; UINT32_MAX: none) links to that one.
 */
static int stream_base_leaf(struct builder *b, const struct shard_index *base, uint32_t e,
			    const struct shard_inode *in, uint32_t first, uint32_t dir,
			    const char *name, size_t len)
{
	const struct leaf_origin o = { in->shard, e,
				       first != UINT32_MAX ? LEAF_LINKED_SAME : 0, first };
	struct raw_member rm;
	int rc = o.linked ? build_links_join(&b->links, in->shard, first) : 0;

	rc = rc ?: seed_base_leaf(b, base, in, &rm);
	return rc ?: stream_leaf(b, &b->base_scan, &rm, &o, dir, name, len);
}

/* A base entry's rank once base_ranks() gave it (to tell it from the
 * shard + 1 that stream_from_base() leaves; ranks are entries). */
#define BASE_RANKED 0x80000000u

/*
 * Bounded: each base file ORDER lists gets its rank among its shard's
 * files in ORDER, in b->base_ranks, where stream_from_base() left its
 * shard + 1.  Within a shard the members' data offsets grow with their
 * numbers, so the rank stands for the member number ORDER's slots want,
 * which an index does not keep.  -EIO when ORDER and the entries
 * disagree (a full check would have refused them).
 */
static int base_ranks(struct builder *b, const struct shard_index *base)
{
	uint32_t rank = 0, shard = 0, nr = shard_index_nr(base);

	_Static_assert(SHARD_INDEX_MAX_ENTRIES <= BASE_RANKED, "ranks fit below the mark");
	for (uint64_t i = 0; i < base->nr_order; i++) {
		uint32_t e = base->order[i], s;

		if (e >= nr || !b->base_ranks[e] || (b->base_ranks[e] & BASE_RANKED))
			return -EIO;	/* listed twice, or a file not listed */
		s = b->base_ranks[e] - 1;
		if (s < shard || s >= b->first_shard)
			return -EIO;
		rank = i && s == shard ? rank + 1 : 0;
		shard = s;
		if (rank >= b->set->shards[s].members)
			return -EIO;
		b->base_ranks[e] = rank | BASE_RANKED;
	}
	return 0;
}

/* The member number whose slot in ORDER leaf @r takes (if ORDER lists
 * it): its own, or its group's; for a base entry, its rank. */
static uint32_t slot_member(const struct builder *b, const struct leaf_record *r)
{
	uint32_t m = leaf_data_member(r);

	if (leaf_data_shard(r) >= b->first_shard)
		return m;
	assert(m < b->base_ranks_len / sizeof(*b->base_ranks));
	return b->base_ranks[m] & ~BASE_RANKED;
}

/* What stream_base_entry() has met of the base so far. */
struct base_pass {
	struct base_dirs dirs;	/* its directories and their nodes */
	uint64_t orderable;	/* files ORDER lists */
	uint64_t linked;	/* later names of hard-link groups: the
				 * next one's record in hardlinks[] */
};

/* Bounded: base entry @e (@in, named @name, @len bytes), the next in
 * entry order: a directory, or a leaf (stream_base_leaf()). */
static int stream_base_entry(struct builder *b, const struct shard_index *base,
			     struct base_pass *p, uint32_t e, const struct shard_inode *in,
			     const char *name, uint32_t len)
{
	int64_t parent = e ? base_dir_node(&p->dirs, in->parent) : 0;
	uint32_t first = UINT32_MAX;

	if (parent < 0)
		return (int)parent;
	if (S_ISDIR(in->mode))
		return build_conflicts_replaces(&b->conflicts, e) ? 0 :
		       stream_base_dir(b, base, &p->dirs, e, in, name, len, (uint32_t)parent);
	if (in->flags & SHARD_INODE_LINKED) {
		if (p->linked >= base->nr_hardlinks || base->hardlinks[p->linked].entry != e)
			return -EIO;
		first = base->hardlinks[p->linked++].first;
	} else if (shard_index_orderable(in, b->first_shard)) {
		b->base_ranks[e] = in->shard + 1;	/* for base_ranks() */
		p->orderable++;
	}
	if (build_conflicts_replaces(&b->conflicts, e))
		return 0;	/* as one that lost its path */
	return stream_base_leaf(b, base, e, in, first, (uint32_t)parent, name, len);
}

/*
 * Phase 2' (bounded) for the base index's shards: its entries as if they
 * had just been streamed (seed_from_base() for the in-memory merge), in
 * entry order: its directories as nodes, its files and symlinks as
 * leaves, the later names of its hard-link groups as links to their
 * group's first.  Each file ORDER lists has its shard noted for
 * base_ranks() (a scratch file's mapping beside the index, 4 bytes an
 * entry).  Ranks were once numbered as the files were streamed in
 * ORDER's order, which decoded every entry twice, the second time at
 * random (docs/benchmarks-scale.md).  -EIO (logged) for a base that does
 * not hold together (a full check would have refused it).
 */
static int stream_from_base(struct builder *b, const struct shard_index *base)
{
	struct base_pass p = { 0 };
	struct compact_cursor cur;
	struct shard_inode in;
	int rc;

	b->base_ranks_len = (size_t)(shard_index_nr(base) ? shard_index_nr(base) : 1) *
			    sizeof(*b->base_ranks);
	rc = scratch_map(b->scratch_dir, b->base_ranks_len, (void **)&b->base_ranks);
	if (rc) {
		b->base_ranks = NULL;
		return rc;
	}
	compact_cursor_init(&cur, &base->entries, 0);
	for (uint32_t e = 0; !rc && compact_cursor_next(&cur, &in); e++)
		rc = stream_base_entry(b, base, &p, e, &in, cur.name, (uint32_t)cur.name_len);
	if (!rc && (p.orderable != base->nr_order || p.linked != base->nr_hardlinks))
		rc = -EIO;
	rc = rc ?: base_ranks(b, base);
	if (rc == -EIO)
		log_error("the index being extended does not hold together (its ORDER or "
			  "hard links against its entries, or a parent that is no directory)");
	free(p.dirs.dir);
	base_counts(b, base);
	return rc;
}

/* Phase 2' (bounded) for shard @s: its totals, its members; the scan of
 * the shard before is freed after it (scan_done()). */
static int stream_shard(struct builder *b, uint32_t s)
{
	struct shard_scan *sc = &b->scans[s];
	int rc = shard_totals(b, s);

	b->dir_len = 0;		/* both point into the scan */
	b->leaf_dir_len = 0;
	sc->quiet = false;	/* the merge's own are said */
	build_links_shard_start(&b->links, sc, s);
	for (uint32_t i = 0; !rc && i < sc->nr_members; i++)
		rc = stream_member(b, sc, s, i);
	return rc;
}

/* Bounded: shard @s is merged: free the scan of the one before (its
 * links' targets may be there) and let the pool scan one more. */
static void scan_done(struct builder *b, uint32_t s)
{
	if (s > b->first_shard) {	/* kept for the links of shard s */
		shard_scan_release(&b->scans[s - 1]);
		b->scans[s - 1] = (struct shard_scan){ 0 };
	}
	pthread_mutex_lock(&b->lock);
	b->merged = s + 1;
	pthread_cond_broadcast(&b->merged_cond);
	pthread_mutex_unlock(&b->lock);
}

/* why_at() far link @f. */
static void far_why(struct builder *b, const struct far_link *f, const char *what)
{
	why_at(b, what, b->set->shards[f->shard].path, f->header_offset, f->path, f->path_len,
	       f->path + f->path_len, f->target_len);
}

/* Bounded: far link @f names no member (or a directory): refused and
 * warned, as merge_warn() does in its shard's scan (the first
 * SHARD_INDEX_WARNINGS_PER_SHARD of them). */
static void far_refuse(struct builder *b, const struct far_link *f)
{
	b->counts.skipped++;
	if (b->far_refused++ < SHARD_INDEX_WARNINGS_PER_SHARD)
		log_warn("%s: offset %llu: %s '%.*s'", b->set->shards[f->shard].path,
			 (unsigned long long)f->header_offset, hardlink_refused,
			 (int)(f->path_len > 200 ? 200 : f->path_len), f->path);
}

/* Bounded: far link @f binds to member @j of shard @k, @rm, whose link
 * target and sparse runs are in @sc: its directory, and its leaf record,
 * its target's data and attributes. */
static int far_stream(struct builder *b, const struct shard_scan *sc,
		      const struct raw_member *rm, uint32_t k, uint32_t j,
		      const struct far_link *f)
{
	const char *slash = memrchr(f->path, '/', f->path_len);
	const char *name = slash ? slash + 1 : f->path;
	struct leaf_origin o = { f->shard, f->member, 0, j };
	int64_t dir;

	if (f->shard - k + 1 > LEAF_LINKED_MAX) {
		far_why(b, f, "a hard link in it names a member more than 65,534 shards back");
		return -EAGAIN;
	}
	o.linked = (uint16_t)(f->shard - k + 1);
	dir = stream_leaf_dir(b, f->path, slash ? (size_t)(slash - f->path) : 0, f->shard);
	if (dir < 0)
		return (int)dir;
	return build_links_join(&b->links, k, j) ?:
	       stream_leaf(b, sc, rm, &o, (uint32_t)dir, name,
			   (size_t)(f->path + f->path_len - name));
}

/*
 * Bounded: shard @k scanned again (headers only; its warnings were said
 * the first time), the far links of the shards after the one after it
 * that no later shard settled looked up in it (*@left: those unsettled).
 */
static int bind_in_shard(struct builder *b, uint32_t k, size_t *left)
{
	struct shard_scan sc = { .warnings = SHARD_INDEX_WARNINGS_PER_SHARD + 1 };
	struct link_shard ls = { .scan = &sc, .shard = k };
	int rc;

	if (b->set->shards[k].bad)
		return 0;
	shard_scan_run(&sc, &b->set->shards[k], layout_or_tree(b->opt->layout), NULL);
	rc = sc.rc;
	for (size_t i = 0; !rc && i < b->nr_far; i++) {
		struct far_link *f = &b->far[i];
		uint32_t j;

		if (f->settled || f->shard < k + 2)
			continue;
		rc = build_links_find(&ls, f->path + f->path_len, f->target_len, &j);
		if (rc == -EXDEV) {
			rc = 0;
			continue;
		}
		f->settled = true;
		(*left)--;
		if (!rc) {
			rc = far_stream(b, &sc, &sc.members[j], k, j, f);
		} else if (rc == -ENOENT) {
			far_refuse(b, f);
			rc = 0;
		} else if (rc == -EAGAIN) {
			far_why(b, f, "a hard link in it names another hard link further "
				"back than the shard before it");
		}
	}
	build_links_shard_release(&ls);
	shard_scan_release(&sc);
	return rc;
}

/* Entry of @path (@len bytes) in @base: >= 0, -ENOENT, -ENOTDIR, -EIO. */
static int64_t base_entry_of(const struct shard_index *base, const char *path, size_t len)
{
	const char *end = path + len;
	int64_t e = 0;		/* the root */

	while (path < end && e >= 0) {
		const char *slash = memchr(path, '/', (size_t)(end - path));
		size_t n = (size_t)((slash ? slash : end) - path);

		e = shard_index_lookup(base, (uint32_t)e, path, n);
		path += n + (slash != NULL);
	}
	return e;
}

/*
 * Bounded extension: far link @f, whose target no appended shard before
 * it holds, binds to the base index's entry of its target's path (or
 * its group's first), as the in-memory build binds it to the node seeded
 * from that entry; refused when the base has none, or a directory.
 */
static int far_from_base(struct builder *b, const struct far_link *f)
{
	const struct shard_index *base = b->opt->base;
	int64_t e = base_entry_of(base, f->path + f->path_len, f->target_len);
	struct shard_inode in;
	struct raw_member rm;
	uint32_t first;
	int rc;

	if (e == -ENOENT || e == -ENOTDIR)
		goto refused;
	if (e < 0)
		return (int)e;
	first = (uint32_t)(shard_index_ino(base, (uint32_t)e) - 1);
	shard_index_entry(base, first, &in);
	if (S_ISDIR(in.mode))
		goto refused;
	rc = seed_base_leaf(b, base, &in, &rm);
	return rc ?: far_stream(b, &b->base_scan, &rm, in.shard, first, f);
refused:
	far_refuse(b, f);
	return 0;
}

/*
 * Bounded: bind the hard links whose target is further back than the
 * shard before theirs (far_defer()) once every shard is streamed: down
 * the shards once, each scanned again while a link after the one after
 * it looks, the first found the latest member of its target's path
 * before it, as a link binds in memory; then, in a set that extends an
 * index, in the base (far_from_base()).  Scanning again costs what the
 * first scan of those shards did; the in-memory build held every member
 * (about 250 bytes each, 37 GiB at 150 M).  A link whose target is
 * nowhere, or a directory, is refused.
 */
static int bind_far_links(struct builder *b)
{
	size_t left = b->nr_far;
	uint32_t last;
	int rc = 0;

	if (!left)
		return 0;
	b->leaf_dir_len = 0;	/* it pointed into a scan */
	log_info("hard links whose target is further back than the shard before "
		 "theirs: %zu; the shards before them are scanned again", left);
	last = b->far[b->nr_far - 1].shard;
	for (uint32_t k = last > 1 ? last - 1 : 0; !rc && left && k-- > b->first_shard;)
		rc = bind_in_shard(b, k, &left);
	for (size_t i = 0; !rc && i < b->nr_far; i++) {
		if (b->far[i].settled)
			continue;
		if (b->opt->base)
			rc = far_from_base(b, &b->far[i]);
		else
			far_refuse(b, &b->far[i]);
	}
	return rc;
}

/*
 * Phase 2: replay every member in shard order, then member order, each
 * shard once it is scanned.  Every bad shard is reported before the build
 * fails, as a build that scans first would.
 */
static int merge_all(struct builder *b)
{
	const struct shard_index *base = b->opt->base;
	int rc = table_reserve(b, base && !b->bounded ? shard_index_nr(base) : 1), bad = 0;

	if (!rc && base && !learning(b))	/* the seed stands for it */
		rc = b->bounded ? stream_from_base(b, base) : seed_from_base(b, base);
	for (uint32_t s = b->first_shard; !rc && s < b->set->nr; s++) {
		wait_for_scan(b, s);
		rc = check_scan(b, s);
		if (rc == -EINVAL) {
			bad = rc;
			rc = 0;
		} else if (!rc && !bad) {
			rc = b->bounded ? stream_shard(b, s) : merge_shard(b, s);
			progress_tick(b);
		}
		if (b->bounded)
			scan_done(b, s);
	}
	if (!rc && !bad && b->bounded)
		rc = bind_far_links(b);
	for (uint32_t i = 0; i < b->set->nr; i++)
		b->counts.bad_shards += b->set->shards[i].bad;
	free(b->slots);		/* the layout has no use for it: room for it */
	b->slots = NULL;
	return rc ?: bad;
}

/* Report labels the class names lack: the count and the first few. */
static void report_unmapped(const struct label_report *r)
{
	if (!r->unmapped)
		return;
	log_warn("%llu samples have a label that the classnames= file does not "
		 "name; their directories are named by the label itself",
		 (unsigned long long)r->unmapped);
	for (unsigned i = 0; i < r->nr_examples; i++)
		log_warn("%s: label '%s' is not in the classnames= file",
			 r->example_shard[i], r->example_label[i]);
}

/*
 * The classes layout: refuse a tree where no sample found its label (a
 * typo in label= would train on one class), report labels the class
 * names lack.
 */
static int check_labels(struct builder *b)
{
	const struct layout *l = classes_layout(b);
	const struct label_report *r = &b->labels;
	uint32_t classes = 0;

	if (!l)
		return 0;
	report_unmapped(r);
	for (uint32_t i = 1; i < b->nr_nodes; i++)
		classes += b->nodes[i].parent == 0 &&
			   !(l->unlabeled && b->nodes[i].name_len == strlen(l->unlabeled) &&
			     !memcmp(b->nodes[i].name, l->unlabeled, b->nodes[i].name_len));
	if (classes || !b->counts.unlabeled)
		return 0;
	log_error("layout=classes: no sample has a label from label=%s "
		  "(sample '%s' of %s has none); not mounting a tree of "
		  "one class", l->label_source, r->unlabeled_key, r->unlabeled_shard);
	return -EINVAL;
}

/*
 * The classes layout: numeric class directories zero-padded to the width
 * of the largest, so that their string order (ImageFolder's) is their
 * numeric order.  Labels come without leading zeros (layout_label).
 */
static int pad_numeric_classes(struct builder *b)
{
	size_t width = 0, nr = 0;
	char *p;

	if (!classes_layout(b))
		return 0;
	for (uint32_t i = 1; i < b->nr_nodes; i++) {
		const struct build_node *n = &b->nodes[i];

		if (n->parent == 0 && layout_is_number(n->name, n->name_len)) {
			width = n->name_len > width ? n->name_len : width;
			nr++;
		}
	}
	p = b->padded = malloc(nr * width + 1);
	if (!p)
		return -ENOMEM;
	for (uint32_t i = 1; i < b->nr_nodes; i++) {
		struct build_node *n = &b->nodes[i];

		if (n->parent || !layout_is_number(n->name, n->name_len) ||
		    n->name_len == width)
			continue;
		memset(p, '0', width - n->name_len);
		memcpy(p + width - n->name_len, n->name, n->name_len);
		n->name = p;
		n->name_len = (uint32_t)width;
		p += width;
	}
	return 0;
}

/* Children of every node, sorted by name; CSR layout. */
struct child_lists {
	uint32_t *start;	/* first child of node i in child[] */
	uint32_t *child;	/* node numbers */
};

static int child_cmp(const void *pa, const void *pb, void *arg)
{
	const struct build_node *nodes = arg;
	const struct build_node *a = &nodes[*(const uint32_t *)pa];
	const struct build_node *b = &nodes[*(const uint32_t *)pb];

	return shard_index_name_cmp(a->name, a->name_len, b->name, b->name_len);
}

/*
 * Are the @n children at @child in name order already?  They are made in
 * merge order, which is name order when the shards hold their samples
 * sorted and follow each other in key order, as WebDataset writers do: a
 * linear check then saves the sort's n log n comparisons.
 */
static bool children_sorted(const struct build_node *nodes, const uint32_t *child,
			    uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		if (child_cmp(&child[i - 1], &child[i], (void *)nodes) > 0)
			return false;
	return true;
}

static int child_lists_build(struct builder *b, struct child_lists *cl)
{
	uint32_t *fill;

	cl->start = calloc_huge((size_t)b->nr_nodes + 1, sizeof(*cl->start));
	cl->child = calloc_huge((size_t)b->nr_nodes + 1, sizeof(*cl->child));
	fill = calloc_huge((size_t)b->nr_nodes + 1, sizeof(*fill));
	if (!cl->start || !cl->child || !fill) {
		free(fill);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < b->nr_nodes; i++)
		cl->start[i + 1] = cl->start[i] + b->nodes[i].nr_children;
	memcpy(fill, cl->start, (size_t)b->nr_nodes * sizeof(*fill));
	b->nodes[0].nr_subdirs = 0;	/* last_child's place, of no more use */
	for (uint32_t i = 1; i < b->nr_nodes; i++) {
		struct build_node *n = &b->nodes[i];

		n->nr_subdirs = 0;	/* a parent comes before its children */
		cl->child[fill[n->parent]++] = i;
		b->nodes[n->parent].nr_subdirs += n->dir;
	}
	free(fill);
	for (uint32_t i = 0; i < b->nr_nodes; i++)
		if (!children_sorted(b->nodes, cl->child + cl->start[i],
				     b->nodes[i].nr_children))
			qsort_r(cl->child + cl->start[i], b->nodes[i].nr_children,
				sizeof(uint32_t), child_cmp, b->nodes);
	return 0;
}

/* Phase 3a: entry numbers, breadth first; returns nodes in entry order. */
static uint32_t *layout_order(struct builder *b, const struct child_lists *cl)
{
	uint32_t *order = calloc_huge(b->nr_nodes, sizeof(*order));
	uint32_t next = 1;

	if (!order)
		return NULL;
	order[0] = 0;
	b->nodes[0].entry = 0;
	for (uint32_t i = 0; i < next; i++) {
		uint32_t n = order[i];

		for (uint32_t c = cl->start[n]; c < cl->start[n + 1]; c++) {
			b->nodes[cl->child[c]].entry = next;
			order[next++] = cl->child[c];
		}
	}
	assert(next == b->nr_nodes);
	return order;
}

static int index_alloc(struct shard_index *idx, struct builder *b)
{
	uint64_t names = 0, sparse = 0, extents = 0;

	for (uint32_t i = 0; i < b->nr_nodes; i++) {
		const struct raw_member *m = b->nodes[i].member;

		names += b->nodes[i].name_len + 1;
		if (m && m->type == TAR_SYMLINK)
			names += m->link_len + 1;
		if (m && m->sparse) {
			sparse++;
			extents += m->nr_extents;
		}
	}
	b->inodes = calloc_huge(b->nr_nodes, sizeof(*b->inodes));
	b->names = calloc_huge(names, 1);
	idx->sparse = calloc(sparse ? sparse : 1, sizeof(*idx->sparse));
	idx->extents = calloc(extents ? extents : 1, sizeof(*idx->extents));
	if (!b->inodes || !b->names || !idx->sparse || !idx->extents)
		return -ENOMEM;
	return 0;
}

static uint64_t names_add(struct builder *b, const char *s, size_t len)
{
	uint64_t at = b->names_len;

	memcpy(b->names + at, s, len);
	b->names[at + len] = '\0';
	b->names_len += len + 1;
	return at;
}

/* Copy a sparse member's runs into the index; returns its map number. */
static uint64_t sparse_add(struct shard_index *idx, const struct shard_scan *sc,
			   const struct raw_member *m)
{
	struct shard_sparse *sp = &idx->sparse[idx->nr_sparse];

	sp->first = idx->nr_extents;
	sp->count = m->nr_extents;
	for (uint32_t i = 0; i < m->nr_extents; i++) {
		const struct tar_extent *e = &sc->extents[m->extent + i];

		idx->extents[idx->nr_extents++] = (struct shard_extent){
			e->logical, e->length, e->physical };
	}
	return idx->nr_sparse++;
}

/* The attributes of directory entry @n (explicit or synthesized) whose
 * @nr_children children start at entry @first. */
static void dir_attrs(struct builder *b, struct shard_inode *in,
		      const struct build_node *n, uint64_t nr_children, uint32_t first)
{
	in->mode = S_IFDIR | 0755;
	in->flags |= SHARD_INODE_SYNTHESIZED;	/* times: see synthesized_times */
	if (n->member) {
		in->mode = S_IFDIR | n->member->mode;
		in->flags &= ~SHARD_INODE_SYNTHESIZED;
		in->uid = n->member->uid;
		in->gid = n->member->gid;
		in->mtime_sec = n->member->mtime_sec;
		in->mtime_nsec = n->member->mtime_nsec;
	}
	in->nlink = 2 + n->nr_subdirs;
	in->size = nr_children;
	in->data = nr_children ? first : 0;
	b->counts.dirs++;
}

static void fill_dir(struct builder *b, struct shard_inode *in,
		     const struct build_node *n, const struct child_lists *cl)
{
	uint32_t node = (uint32_t)(n - b->nodes);

	dir_attrs(b, in, n, n->nr_children,
		  n->nr_children ? b->nodes[cl->child[cl->start[node]]].entry : 0);
}

/*
 * The attributes of a file or symlink entry naming @m from @shard; @data
 * is a symlink's target in names, a sparse file's map number.  Totals
 * count a member at its @first_name only.
 */
static void leaf_attrs(struct builder *b, struct shard_inode *in,
		       const struct raw_member *m, uint32_t shard, uint64_t data,
		       bool first_name)
{
	in->uid = m->uid;
	in->gid = m->gid;
	in->mtime_sec = m->mtime_sec;
	in->mtime_nsec = m->mtime_nsec;
	in->shard = shard;
	if (m->type == TAR_SYMLINK) {
		in->mode = S_IFLNK | 0777;
		in->data = data;
		in->size = m->link_len;
		b->counts.symlinks += first_name;
		return;
	}
	in->mode = S_IFREG | m->mode;
	in->size = m->size;
	in->data = m->data_offset;
	if (m->sparse) {
		in->flags |= SHARD_INODE_SPARSE;
		in->data = data;
	}
	b->counts.files += first_name;
	b->counts.bytes += first_name ? m->size : 0;
}

/* The attributes of a file or symlink entry. */
static void fill_leaf(struct builder *b, struct shard_index *idx,
		      struct shard_inode *in, const struct build_node *n)
{
	struct raw_member *m = n->member;
	const struct shard_scan *sc = node_scan(b, n);
	uint64_t data = 0;

	if (m->group == UINT32_MAX)
		m->group = n->entry;
	m->nlink++;
	if (m->type == TAR_SYMLINK)
		data = names_add(b, sc->strings + m->link, m->link_len);
	else if (m->sparse)
		data = sparse_add(idx, sc, m);
	leaf_attrs(b, in, m, n->shard, data, m->nlink == 1);
}

/*
 * Phase 3d: a synthesized directory is as new as its newest entry.
 * Children come after their parent, so one backward pass carries the
 * newest time up through nested synthesized directories.
 */
static void synthesized_times(struct builder *b)
{
	for (uint32_t e = b->nr_nodes - 1; e > 0; e--) {
		const struct shard_inode *in = &b->inodes[e];
		struct shard_inode *p = &b->inodes[in->parent];

		if ((p->flags & SHARD_INODE_SYNTHESIZED) &&
		    (in->mtime_sec > p->mtime_sec ||
		     (in->mtime_sec == p->mtime_sec && in->mtime_nsec > p->mtime_nsec))) {
			p->mtime_sec = in->mtime_sec;
			p->mtime_nsec = in->mtime_nsec;
		}
	}
}

/* Phase 3c: nlink of every file, and the inode later names share. */
static int link_groups(struct builder *b, struct shard_index *idx,
		       const uint32_t *order)
{
	size_t cap = 0;

	for (uint32_t e = 0; e < b->nr_nodes; e++) {
		const struct build_node *n = &b->nodes[order[e]];
		int rc;

		if (node_is_dir(n))
			continue;
		b->inodes[e].nlink = n->member->nlink;
		if (n->member->group == e)
			continue;
		rc = array_grow((void **)&idx->hardlinks, &cap, idx->nr_hardlinks + 1,
			  sizeof(*idx->hardlinks));
		if (rc)
			return rc;
		idx->hardlinks[idx->nr_hardlinks++] =
			(struct shard_hardlink){ e, n->member->group };
		b->inodes[e].flags |= SHARD_INODE_LINKED;
		b->counts.hardlinks++;
	}
	return 0;
}

/* Phase 3b: fill the index arrays in entry order. */
static int layout(struct builder *b, struct shard_index *idx)
{
	struct child_lists cl = { 0 };
	uint32_t *order = NULL;
	int rc = child_lists_build(b, &cl);

	if (!rc) {
		order = layout_order(b, &cl);
		rc = order ? index_alloc(idx, b) : -ENOMEM;
	}
	for (uint32_t e = 0; !rc && e < b->nr_nodes; e++) {
		const struct build_node *n = &b->nodes[order[e]];
		struct shard_inode *in = &b->inodes[e];

		in->name = names_add(b, n->name, n->name_len);
		in->name_len = (uint16_t)n->name_len;
		in->parent = b->nodes[n->parent].entry;
		if (node_is_dir(n))
			fill_dir(b, in, n, &cl);
		else
			fill_leaf(b, idx, in, n);
	}
	rc = rc ?: link_groups(b, idx, order);
	if (!rc)
		synthesized_times(b);
	free(order);
	free(cl.start);
	free(cl.child);
	return rc;
}

/* Bounded: what the layout knows of one directory (per directory, not
 * per member: the budget does not cover these). */
struct stream_dir {
	uint32_t nr_leaves;	/* its children that are not directories */
	uint32_t rank;		/* its place among its parent's children */
	uint32_t entry;		/* its entry */
	uint32_t first;		/* the entry of its first child */
	struct leaf_run kept;	/* its leaves, kept by the first pass */
	uint64_t sparse;	/* sparse maps among its leaves; then the
				 * number of the first */
	uint64_t extents;	/* their runs; then the first run's number */
	int64_t mtime_sec;	/* a synthesized directory's time: its
				 * newest child's (from 0) */
	uint32_t mtime_nsec;	/* the nanoseconds of mtime_sec */
};

/* Raise @d's time to (@sec, @nsec) when that is newer. */
static void stream_newer(struct stream_dir *d, int64_t sec, uint32_t nsec)
{
	if (sec > d->mtime_sec || (sec == d->mtime_sec && nsec > d->mtime_nsec)) {
		d->mtime_sec = sec;
		d->mtime_nsec = nsec;
	}
}

/* Count leaf @v into its directory @sd. */
static void stream_count_leaf(struct stream_dir *sd, const struct leaf_view *v)
{
	const struct leaf_record *r = v->rec;

	sd->nr_leaves++;
	sd->sparse += r->sparse;
	sd->extents += r->nr_extents;
	stream_newer(sd, r->mtime_sec, r->mtime_nsec);
}

/* Node @id's path (malloc'd, not terminated), *@len bytes; NULL: no
 * memory. */
static char *node_path(const struct builder *b, uint32_t id, size_t *len)
{
	size_t at = 0;
	char *path;

	for (uint32_t n = id; n; n = b->nodes[n].parent)
		at += b->nodes[n].name_len + (b->nodes[n].parent != 0);
	*len = at;
	path = malloc(at ? at : 1);
	for (uint32_t n = id; path && n; n = b->nodes[n].parent) {
		at -= b->nodes[n].name_len;
		memcpy(path + at, b->nodes[n].name, b->nodes[n].name_len);
		if (b->nodes[n].parent)
			path[--at] = '/';
	}
	return path;
}

/*
 * Bounded: node @id's path is a file too, in shard @shard: held for the
 * replay (build_conflicts.h), 0; or -EAGAIN, why said, when the set is
 * left to the in-memory build: once replayed (its shards changed since),
 * extending an index in the classes layout (whose nodes name numeric
 * classes unpadded), past opt->conflicts_max such paths; or -ENOMEM.
 */
static int conflict_found(struct builder *b, uint32_t id, uint32_t shard)
{
	uint32_t max = b->opt->conflicts_max ? b->opt->conflicts_max : BUILD_CONFLICTS_MAX;
	struct build_conflicts *c = &b->conflicts;
	size_t len;
	char *path = node_path(b, id, &len);
	int rc = path ? 0 : -ENOMEM;

	if (!rc && (c->settled || (b->opt->base && classes_layout(b)) || c->nr == max)) {
		if (c->nr == max && !c->settled)
			snprintf(b->why_in_memory, sizeof(b->why_in_memory),
				 "more than %u paths in it are both a directory and a file",
				 max);
		else
			snprintf(b->why_in_memory, sizeof(b->why_in_memory),
				 "a path in it is both a directory and a file ('%.*s', a file "
				 "in %.200s)", (int)(len < 400 ? len : 400), path,
				 b->set->shards[shard].path);
		build_conflicts_release(c);
		rc = -EAGAIN;
	}
	rc = rc ?: build_conflicts_add(c, path, len);
	free(path);
	return rc;
}

/*
 * Phase 3a' (bounded): the merge of the runs, path by path: what each
 * directory holds, and where each subdirectory falls among its parent's
 * leaves; each path's leaf is kept, directory by directory, for the
 * layout's pass.  -EAGAIN when a path is both a directory and a leaf:
 * what the extraction did then depends on the order of the two; every
 * such path is then in b->conflicts, for the set to be streamed again
 * (build_replayed()), unless conflict_found() said otherwise.
 */
static int stream_count(struct builder *b, const struct child_lists *cl,
			struct stream_dir *dirs)
{
	struct leaf_merge m;
	struct leaf_view v;
	uint64_t earlier;
	int got = leaf_merge_start(&m, &b->runs);

	got = got ?: leaf_merge_take_path(&m, &v, &earlier);
	for (uint32_t d = 0; got >= 0 && d < b->nr_nodes; d++) {
		const uint32_t *sub = cl->child + cl->start[d];
		uint32_t nsub = cl->start[d + 1] - cl->start[d], k = 0;

		for (; got == 1 && v.rec->dir == d;
		     got = leaf_merge_take_path(&m, &v, &earlier)) {
			const struct build_node *n = NULL;

			for (; k < nsub; k++) {
				n = &b->nodes[sub[k]];
				if (shard_index_name_cmp(n->name, n->name_len, v.name,
							 v.rec->name_len) >= 0)
					break;
				dirs[sub[k]].rank = dirs[d].nr_leaves + k;
			}
			if (k < nsub && n->name_len == v.rec->name_len &&
			    !memcmp(n->name, v.name, n->name_len)) {
				got = conflict_found(b, sub[k], v.rec->shard);
				if (got)
					break;
				continue;	/* the leaf is left out */
			}
			b->counts.duplicates += earlier;
			build_links_count(&b->links, v.rec);
			stream_count_leaf(&dirs[d], &v);
			got = leaf_runs_keep(&b->runs, &v, &dirs[d].kept);
			if (got)
				break;
		}
		for (; k < nsub; k++)
			dirs[sub[k]].rank = dirs[d].nr_leaves + k;
	}
	leaf_merge_end(&m);
	if (got >= 0 && b->conflicts.nr && !b->conflicts.settled)
		return -EAGAIN;
	return got < 0 ? got : leaf_runs_keep_finish(&b->runs);
}

/*
 * Phase 3b' (bounded): entry numbers, breadth first over the directories
 * (@queue gets them in entry order), and where every directory's children
 * put their sparse maps and runs; @len gets the sections' lengths,
 * *@nr_entries the entries'.
 */
static int stream_number(struct builder *b, const struct child_lists *cl,
			 struct stream_dir *dirs, uint32_t *queue,
			 uint64_t len[INDEX_NR_PARTS], uint32_t *nr_entries)
{
	uint64_t next = 1, sparse = 0, extents = 0;	/* the root */
	uint32_t tail = 1;

	queue[0] = 0;
	for (uint32_t q = 0; q < tail; q++) {
		struct stream_dir *sd = &dirs[queue[q]];
		uint64_t nr_sparse = sd->sparse, nr_extents = sd->extents;

		sd->first = (uint32_t)next;
		next += b->nodes[queue[q]].nr_children + (uint64_t)sd->nr_leaves;
		if (next > SHARD_INDEX_MAX_ENTRIES)
			return -E2BIG;
		sd->sparse = sparse;
		sparse += nr_sparse;
		sd->extents = extents;
		extents += nr_extents;
		for (uint32_t c = cl->start[queue[q]]; c < cl->start[queue[q] + 1]; c++) {
			uint32_t child = cl->child[c];

			dirs[child].entry = sd->first + dirs[child].rank;
			queue[tail++] = child;
		}
	}
	assert(tail == b->nr_nodes);
	*nr_entries = (uint32_t)next;
	len[INDEX_PART_SPARSE] = sparse * sizeof(struct shard_sparse);
	len[INDEX_PART_EXTENTS] = extents * sizeof(struct shard_extent);
	return 0;
}

/*
 * Phase 3c' (bounded): the times of directories, from the deepest up, as
 * synthesized_times() does over the entries: an explicit directory keeps
 * its member's, a synthesized one takes its newest child's.
 */
static void stream_times(struct builder *b, struct stream_dir *dirs,
			 const uint32_t *queue)
{
	for (uint32_t q = b->nr_nodes; q-- > 0;) {
		const struct build_node *n = &b->nodes[queue[q]];
		struct stream_dir *sd = &dirs[queue[q]];

		if (n->member) {
			sd->mtime_sec = n->member->mtime_sec;
			sd->mtime_nsec = n->member->mtime_nsec;
		}
		if (queue[q] && !b->nodes[n->parent].member)
			stream_newer(&dirs[n->parent], sd->mtime_sec, sd->mtime_nsec);
	}
}

/* Buffered writes into one section of the index file, mostly in order. */
struct section_out {
	struct index_file_writer *w;	/* the file */
	enum index_part s;		/* the part */
	uint64_t at;			/* where buf goes in the section */
	size_t len;			/* bytes in buf */
	char buf[64 * 1024];		/* bytes not yet written */
};

static int out_flush(struct section_out *o)
{
	int rc = o->len ? index_file_writer_put(o->w, o->s, o->at, o->buf, o->len) : 0;

	o->at += o->len;
	o->len = 0;
	return rc;
}

/* Put @n bytes at byte @at of the section. */
static int out_put(struct section_out *o, uint64_t at, const void *p, size_t n)
{
	int rc = 0;

	if (at != o->at + o->len || o->len + n > sizeof(o->buf)) {
		rc = out_flush(o);
		o->at = at;
	}
	if (rc || n > sizeof(o->buf))
		return rc ?: index_file_writer_put(o->w, o->s, at, p, n);
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	return 0;
}

/* The sections a bounded layout writes besides its entries. */
struct stream_out {
	struct index_file_writer *w;	/* the file, which takes the entries */
	struct section_out sparse, extents, hardlinks;
	uint64_t later_names;		/* hardlinks[] records written */
};

/* Write the subdirectory @c of a directory, as entry dirs[@c].entry. */
static int out_dir(struct builder *b, struct stream_out *o, const struct stream_dir *dirs,
		   uint32_t c)
{
	const struct build_node *n = &b->nodes[c];
	struct shard_inode in = { .parent = c ? dirs[n->parent].entry : 0 };

	dir_attrs(b, &in, n, n->nr_children + (uint64_t)dirs[c].nr_leaves, dirs[c].first);
	if (!n->member) {
		in.mtime_sec = dirs[c].mtime_sec;
		in.mtime_nsec = dirs[c].mtime_nsec;
	}
	return index_file_writer_entry(o->w, dirs[c].entry, &in, n->name, n->name_len,
				       NULL, 0);
}

/* Write leaf @v of the directory @sd as entry @e, its runs after. */
static int out_leaf(struct builder *b, struct stream_out *o, struct stream_dir *sd,
		    const struct leaf_view *v, uint32_t e)
{
	const struct leaf_record *r = v->rec;
	struct raw_member m = {
		.data_offset = r->data_offset, .size = r->size, .mtime_sec = r->mtime_sec,
		.mtime_nsec = r->mtime_nsec, .mode = r->mode, .uid = r->uid, .gid = r->gid,
		.link_len = r->link_len, .type = r->type, .sparse = r->sparse };
	struct shard_inode in = { .parent = sd->entry };
	uint32_t first = build_links_name(&b->links, r, e, &in.nlink);
	uint64_t data = 0;
	int rc = 0;

	if (first != UINT32_MAX) {	/* a later name of a hard-link group */
		struct shard_hardlink h = { e, first };

		in.flags |= SHARD_INODE_LINKED;
		rc = out_put(&o->hardlinks, o->later_names++ * sizeof(h), &h, sizeof(h));
		b->counts.hardlinks++;
	}

	if (r->sparse) {
		struct shard_sparse sp = { sd->extents, r->nr_extents };

		data = sd->sparse++;
		rc = out_put(&o->sparse, data * sizeof(sp), &sp, sizeof(sp));
		for (uint32_t i = 0; !rc && i < r->nr_extents; i++) {
			struct shard_extent x = { v->extents[i].logical, v->extents[i].length,
						  v->extents[i].physical };

			rc = out_put(&o->extents, sd->extents++ * sizeof(x), &x, sizeof(x));
		}
	}
	leaf_attrs(b, &in, &m, leaf_data_shard(r), data, first == UINT32_MAX);
	return rc ?: index_file_writer_entry(o->w, e, &in, v->name, r->name_len,
					     r->type == TAR_SYMLINK ? v->link : NULL,
					     slot_member(b, r));
}

/* Phase 3d' for directory @d: its children, subdirectories and the
 * leaves the first pass kept, merged by name. */
static int stream_write_dir(struct builder *b, const struct child_lists *cl,
			    struct stream_dir *dirs, uint32_t d, struct stream_out *o)
{
	struct stream_dir *sd = &dirs[d];
	struct leaf_merge m = { 0 };
	const struct leaf_view *v;
	uint32_t c = cl->start[d], e = sd->first;
	int rc = sd->nr_leaves ? leaf_merge_start_kept(&m, &b->runs, &sd->kept) : 0;

	for (v = leaf_merge_peek(&m); !rc && (c < cl->start[d + 1] || v); e++) {
		const struct build_node *n = c < cl->start[d + 1] ? &b->nodes[cl->child[c]] : NULL;

		if (n && (!v || shard_index_name_cmp(n->name, n->name_len, v->name,
						     v->rec->name_len) < 0)) {
			assert(dirs[cl->child[c]].entry == e);
			rc = out_dir(b, o, dirs, cl->child[c++]);
			continue;
		}
		rc = out_leaf(b, o, sd, v, e) ?: leaf_merge_next(&m);
		v = leaf_merge_peek(&m);
	}
	leaf_merge_end(&m);
	return rc;
}

/*
 * Phase 3d' (bounded): the entries in entry order, directory by directory
 * breadth first (@queue), each with its children, their sparse maps and
 * runs where they belong.
 */
static int stream_write(struct builder *b, const struct child_lists *cl,
			struct stream_dir *dirs, const uint32_t *queue, struct stream_out *o)
{
	int rc = out_dir(b, o, dirs, 0);

	for (uint32_t q = 0; !rc && q < b->nr_nodes; q++)
		rc = stream_write_dir(b, cl, dirs, queue[q], o);
	return rc ?: out_flush(&o->sparse) ?: out_flush(&o->extents) ?: out_flush(&o->hardlinks);
}

/* Phase 3' (bounded): lay the tree out straight into the file @w. */
static int stream_layout(struct builder *b, struct index_file_writer *w,
			 uint32_t *nr_entries)
{
	struct child_lists cl = { 0 };
	struct stream_dir *dirs = calloc_huge(b->nr_nodes, sizeof(*dirs));
	uint32_t *queue = calloc_huge(b->nr_nodes, sizeof(*queue));
	struct stream_out *o = calloc(1, sizeof(*o));
	uint64_t len[INDEX_NR_PARTS] = { 0 };
	int rc = dirs && queue && o ? child_lists_build(b, &cl) : -ENOMEM;

	rc = rc ?: leaf_runs_finish(&b->runs);
	rc = rc ?: stream_count(b, &cl, dirs);
	rc = rc ?: stream_number(b, &cl, dirs, queue, len, nr_entries);
	len[INDEX_PART_HARDLINKS] = build_links_later_names(&b->links) *
				    sizeof(struct shard_hardlink);
	if (!rc) {
		stream_times(b, dirs, queue);
		rc = index_file_writer_place(w, len, b->runs.nr_runs == 0);
	}
	if (!rc) {
		o->w = w;
		o->sparse = (struct section_out){ .w = w, .s = INDEX_PART_SPARSE };
		o->extents = (struct section_out){ .w = w, .s = INDEX_PART_EXTENTS };
		o->hardlinks = (struct section_out){ .w = w, .s = INDEX_PART_HARDLINKS };
		rc = stream_write(b, &cl, dirs, queue, o);
	}
	free(o);
	free(queue);
	free(dirs);
	free(cl.start);
	free(cl.child);
	return rc;
}

static void builder_release(struct builder *b)
{
	for (uint32_t i = 0; b->scans && i < b->set->nr; i++)
		shard_scan_release(&b->scans[i]);
	shard_scan_release(&b->base_scan);
	for (unsigned i = 0; i < b->nr_scanners; i++) {
		free(b->scanners[i].window);
		bump_release(&b->scanners[i].arena);
	}
	free(b->scanners);
	free(b->scans);
	free(b->scanned);
	free(b->threads);
	mapped_array_free(b->nodes, b->cap_nodes, sizeof(*b->nodes));
	free(b->inodes);
	free(b->names);
	free(b->slots);
	free(b->padded);
	label_report_release(&b->labels);
	leaf_runs_release(&b->runs);
	build_links_release(&b->links);
	if (b->base_ranks)
		munmap(b->base_ranks, b->base_ranks_len);
	bump_release(&b->dir_arena);
	free(b->far);
	bump_release(&b->far_arena);
	build_conflicts_release(&b->conflicts);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->done_cond);
	pthread_cond_destroy(&b->merged_cond);
}

static int builder_init(struct builder *b, struct shard_set *set,
			const struct shard_index_build_options *opt)
{
	pthread_condattr_t attr;

	*b = (struct builder){ .set = set, .opt = opt, .runs = { .fd = -1 } };
	b->first_shard = opt->base ? opt->base_shards : 0;
	assert(b->first_shard <= set->nr);
	atomic_store(&b->next_shard, b->first_shard);
	atomic_store(&b->shards_done, b->first_shard);
	b->merged = b->first_shard;
	pthread_mutex_init(&b->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);	/* monotonic_ns() */
	pthread_cond_init(&b->done_cond, &attr);
	pthread_condattr_destroy(&attr);
	pthread_cond_init(&b->merged_cond, NULL);
	b->reported = monotonic_ns();
	b->scans = calloc(set->nr ? set->nr : 1, sizeof(*b->scans));
	b->scanned = calloc(set->nr ? set->nr : 1, sizeof(*b->scanned));
	if (!b->scans || !b->scanned ||
	    mapped_array_grow((void **)&b->nodes, &b->cap_nodes, 1, sizeof(*b->nodes)))
		return -ENOMEM;
	b->nodes[0] = (struct build_node){ .name = "", .dir = true };
	b->nr_nodes = 1;
	return 0;
}

/*
 * The in-memory build: how many members fit in opt->memory_limit (or in
 * what the machine has), the base's entries already counted.  A set of
 * 150 M members wants 37 GiB at the peak; on a node without them the
 * kernel would kill the build, or the training job beside it.
 */
static void limit_members(struct builder *b)
{
	uint64_t bytes = b->opt->memory_limit ? b->opt->memory_limit : memory_available();
	uint64_t base = b->opt->base ? shard_index_nr(b->opt->base) : 0;

	if (bytes == UINT64_MAX)
		return;	/* nothing says */
	b->limit_bytes = bytes;
	if (base >= bytes / SHARD_INDEX_MEMBER_PEAK)
		atomic_store(&b->over_limit, true);
	else
		b->members_limit = bytes / SHARD_INDEX_MEMBER_PEAK - base;
}

/* Log why an in-memory build stopped at its limit. */
static void log_over_limit(const struct builder *b)
{
	log_error("the index built in memory would take more than the %llu MiB %s: "
		  "about %u bytes a member, %llu members scanned when it stopped, "
		  "%u entries of the index it extends; stopped rather than run out "
		  "of memory (an index file keeps a build within -o build_memory)",
		  (unsigned long long)(b->limit_bytes >> 20),
		  b->opt->memory_limit ? "allowed"
				       : "available to it (the machine's memory, or its cgroup's)",
		  SHARD_INDEX_MEMBER_PEAK, (unsigned long long)atomic_load(&b->members_seen),
		  b->opt->base ? shard_index_nr(b->opt->base) : 0);
}

int shard_index_build(struct shard_index *idx, struct shard_set *set,
		      const struct shard_index_build_options *opt)
{
	struct builder b;
	int rc;

	*idx = (struct shard_index){ 0 };
	rc = builder_init(&b, set, opt);
	if (!rc)
		limit_members(&b);
	if (!rc && atomic_load(&b.over_limit))
		rc = -ENOMEM;	/* the base alone is more than fits */
	rc = rc ?: scan_start(&b);
	rc = rc ?: merge_all(&b);
	if (!rc && atomic_load(&b.over_limit))
		rc = -ENOMEM;	/* its last shards passed it: no layout */
	if (rc == -ENOMEM && atomic_load(&b.over_limit))
		log_over_limit(&b);	/* not later: the layout's -ENOMEM is its own */
	scan_finish(&b);
	rc = rc ?: check_labels(&b);
	rc = rc ?: pad_numeric_classes(&b);
	rc = rc ?: layout(&b, idx);
	rc = rc ?: shard_index_pack(idx, b.inodes, b.nr_nodes, b.names, set->nr);
	if (rc == -E2BIG)
		log_error("the shard set exceeds %u entries", SHARD_INDEX_MAX_ENTRIES);
	idx->counts = b.counts;
	builder_release(&b);
	if (rc)
		shard_index_release(idx);
	return rc;
}

/* Phases 1, 2' and 3': the bounded build of @b into @w. */
static int build_bounded(struct builder *b, struct index_file_writer *w,
			 uint32_t *nr_entries)
{
	size_t budget = b->opt->memory_budget ? b->opt->memory_budget
					      : SHARD_INDEX_BUILD_BUDGET;
	char dir[PATH_MAX];
	int rc = index_file_writer_dir(w, dir);

	b->bounded = b->scan_paced = true;
	b->scratch_dir = dir;	/* until the build returns */
	rc = rc ?: leaf_runs_init(&b->runs, dir, budget);
	rc = rc ?: scan_start(b);
	rc = rc ?: merge_all(b);
	scan_finish(b);
	rc = rc ?: check_labels(b);
	rc = rc ?: pad_numeric_classes(b);
	return rc ?: stream_layout(b, w, nr_entries);
}

/*
 * A fresh builder for the set's next pass, with @b's conflicting paths:
 * the shards' bad marks as they were (@was_bad) before the first.
 */
static int builder_again(struct builder *b, const bool *was_bad)
{
	struct build_conflicts c = b->conflicts;
	struct shard_set *set = b->set;
	const struct shard_index_build_options *opt = b->opt;
	int rc;

	b->conflicts = (struct build_conflicts){ 0 };
	builder_release(b);
	for (uint32_t i = 0; i < set->nr; i++)
		set->shards[i].bad = was_bad[i];
	rc = builder_init(b, set, opt);
	b->conflicts = c;
	return rc;
}

/*
 * conflict_base_fn over the index @arg (a builder) extends: what it names
 * at @path, as seed_from_base() would have made it a node.  -EAGAIN (why
 * said) for a file of one of its hard-link groups (the group's names
 * would change).
 */
static int base_conflict(void *arg, const char *path, size_t len, struct conflict_base *out)
{
	struct builder *b = arg;
	const struct shard_index *base = b->opt->base;
	int64_t e = base_entry_of(base, path, len);
	struct shard_inode in;

	if (e == -ENOENT || e == -ENOTDIR)
		return 0;	/* none */
	if (e < 0)
		return (int)e;
	shard_index_entry(base, (uint32_t)e, &in);
	if (!S_ISDIR(in.mode) && (in.nlink > 1 || (in.flags & SHARD_INODE_LINKED))) {
		snprintf(b->why_in_memory, sizeof(b->why_in_memory),
			 "a path both a directory and a file names a hard-linked file of the "
			 "index it extends ('%.*s')", (int)(len < 400 ? len : 400), path);
		return -EAGAIN;
	}
	*out = (struct conflict_base){
		.entry = (uint32_t)e, .dir = S_ISDIR(in.mode), .holds = S_ISDIR(in.mode) && in.size,
		.bound = !(in.flags & SHARD_INODE_SYNTHESIZED) };
	return 0;
}

/*
 * The bounded build found paths both a file and a directory: stream the
 * set once to learn what each ends as (each as the index it extends, if
 * any, names it at first), then build again, each member at or under one
 * kept or left out as the in-memory merge would (build_conflicts.h).
 */
static int build_replayed(struct builder *b, const bool *was_bad,
			  struct index_file_writer *w, uint32_t *nr_entries)
{
	int rc;

	log_info("%zu path%s both a directory and a file: the set is scanned twice "
		 "more to replay %s in order", b->conflicts.nr, b->conflicts.nr == 1 ?
		 " is" : "s are", b->conflicts.nr == 1 ? "it" : "them");
	rc = builder_again(b, was_bad);
	if (!rc && b->opt->base)
		rc = build_conflicts_seed(&b->conflicts, base_conflict, b);
	if (!rc) {
		b->bounded = b->scan_paced = true;
		rc = scan_start(b);
		rc = rc ?: merge_all(b);
		scan_finish(b);
	}
	rc = rc ?: build_conflicts_settle(&b->conflicts);
	if (rc)
		return rc;
	rc = builder_again(b, was_bad) ?: build_bounded(b, w, nr_entries);
	b->counts.duplicates += b->conflicts.duplicates;
	return rc;
}

int shard_index_build_to_file(struct index_file_writer *w, struct shard_set *set,
			      const struct shard_index_build_options *opt,
			      struct shard_index_counts *counts, uint32_t *nr_entries)
{
	bool *was_bad = calloc(set->nr ? set->nr : 1, sizeof(*was_bad));
	struct builder b;
	int rc;

	if (!was_bad)
		return -ENOMEM;
	for (uint32_t i = 0; i < set->nr; i++)
		was_bad[i] = set->shards[i].bad;
	rc = builder_init(&b, set, opt);
	rc = rc ?: build_bounded(&b, w, nr_entries);
	if (rc == -EAGAIN && b.conflicts.nr && !b.conflicts.settled)
		rc = build_replayed(&b, was_bad, w, nr_entries);
	if (rc == -E2BIG)
		log_error("the shard set exceeds %u entries", SHARD_INDEX_MAX_ENTRIES);
	if (rc == -EAGAIN)
		log_info("the index is built in memory: %s", b.why_in_memory);
	for (uint32_t i = 0; rc && i < set->nr; i++)	/* may be scanned again */
		set->shards[i].bad = was_bad[i];
	*counts = b.counts;
	builder_release(&b);
	free(was_bad);
	return rc;
}
