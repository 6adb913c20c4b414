/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pushahead.c - what push-ahead stores, without a mount: a fake
 * store callback stands for the kernel and checks every byte it is given.
 *
 * The properties that matter: nothing is stored for an inode the kernel
 * does not hold (never looked up, or forgotten); once a reader moves
 * forward, the members after it are stored whole with their own bytes,
 * except the trip member; a member the kernel lacks is listed once (the
 * lister callback) and pushed if the listing made it known; a directory
 * is listed at the second LOOKUP in it, a huge one only once it was
 * listed bare (and then whole); the bytes held
 * ahead never exceed the bound; a shard that changed size is never pushed
 * from; a READ at random in a compressed shard has the rest of its
 * decoded span pushed, until the kernel is seen to drop such pushes; a
 * plain shard's piece is pushed only once the READs at random of this
 * pass took most of it (or of the set), learned again in each pass.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/pushahead.h"
#include "shardfs/util.h"
#include "tarbuild.h"

#define MEMBERS 48
#define MEMBER_SIZE 3000
/* Entries one listing of the fake kernel makes known. */
#define FAKE_LISTED 8

/* What the fake kernel received. */
struct fake_kernel {
	struct shardfs *fs;
	atomic_uint stores;		/* calls */
	atomic_uint piped;		/* of them, from the worker's pipe */
	atomic_uint bad;		/* stores whose bytes were wrong */
	atomic_uchar stored[MEMBERS + 8]; /* per inode: stored at least once */
	atomic_uint bytes[MEMBERS + 8];	/* per inode: bytes stored */
	atomic_uchar listed_from[MEMBERS]; /* per member: listings from it */
	atomic_int held[MEMBERS + 8];	/* per inode: references taken */
	bool list_fails;		/* the listing makes nothing known */
	atomic_ullong refuse;		/* inode whose first store is refused,
					 * its bytes left in the pipe */
};

static struct fake_kernel kernel;

/* Byte @j of member @i's content, whatever its size. */
static char content_byte(int i, size_t j)
{
	return (char)('a' + (i * 7 + j) % 26);
}

static void member_content(int i, char *buf)
{
	for (int j = 0; j < MEMBER_SIZE; j++)
		buf[j] = content_byte(i, (size_t)j);
	buf[MEMBER_SIZE] = '\0';
}

/* Member number of entry @e (named m00..). */
static int member_of(struct shardfs *fs, uint32_t e)
{
	char name[PATH_COMPONENT_MAX + 1];
	int i = -1;

	shard_index_name(&fs->idx, e, name);
	sscanf(name, "m%d", &i);
	assert_true(i >= 0 && i < MEMBERS);
	return i;
}

/* The kernel takes @n references to @ino, and the glue counts them. */
static void kernel_lookup(struct shardfs *fs, uint64_t ino, int n)
{
	if (ino < MEMBERS + 8)
		atomic_fetch_add(&kernel.held[ino], n);
	pushahead_lookup(&fs->push, ino, (uint64_t)n);
}

/* The kernel drops @n references to @ino (FORGET). */
static void kernel_forget(struct shardfs *fs, uint64_t ino, int n)
{
	if (ino < MEMBERS + 8)
		atomic_fetch_sub(&kernel.held[ino], n);
	pushahead_forget(&fs->push, ino, (uint64_t)n);
}

/* Are @len bytes of @buf member @i's from @off on, inside its @size? */
static bool member_bytes(int i, uint64_t size, const char *buf, uint64_t off, size_t len)
{
	if (off + len > size)
		return false;
	for (size_t j = 0; j < len; j++)
		if (buf[j] != content_byte(i, off + j))
			return false;
	return true;
}

/*
 * A store of no bytes is a probe: whether the kernel holds the inode.
 * Bytes from a pipe are read out of it, as the kernel's splice does,
 * except for a refused store (they stay for the worker to drain).
 */
static int fake_store(void *arg, uint64_t ino, uint64_t off, const void *buf,
		      int pipe_fd, size_t len)
{
	static char piped[SHARDFS_SPLICE_MAX];	/* the worker's one thread */
	struct fake_kernel *k = arg;
	struct shard_inode in;
	int i;

	if (!len)
		return ino < MEMBERS + 8 && atomic_load(&k->held[ino]) > 0 ? 0 : -ENOENT;
	if (atomic_compare_exchange_strong(&k->refuse, &(unsigned long long){ ino }, 0))
		return -ENOENT;
	i = member_of(k->fs, (uint32_t)(ino - 1));
	assert_true(shard_index_get(&k->fs->idx, ino, &in));
	if (pipe_fd >= 0) {
		assert_true(len <= sizeof(piped));
		assert_int_equal(read(pipe_fd, piped, len), len);
		atomic_fetch_add(&k->piped, 1);
		buf = piped;
	}
	if (!member_bytes(i, in.size, buf, off, len))
		atomic_fetch_add(&k->bad, 1);
	if (ino < MEMBERS + 8) {
		atomic_store(&k->stored[ino], 1);
		atomic_fetch_add(&k->bytes[ino], (unsigned)len);
	}
	atomic_fetch_add(&k->stores, 1);
	return 0;
}

/* READDIRPLUS of FAKE_LISTED entries from @e on: a reference on each. */
static ssize_t fake_list(void *arg, uint32_t e, uint32_t count)
{
	struct fake_kernel *k = arg;
	int from = member_of(k->fs, e), i;
	char name[16];

	atomic_fetch_add(&k->listed_from[from], 1);
	if (k->list_fails)
		return -ETIMEDOUT;
	for (i = from; i < MEMBERS && i < from + FAKE_LISTED; i++) {
		snprintf(name, sizeof(name), "m%02d", i);
		kernel_lookup(k->fs, tb_ino(k->fs, name), 1);
	}
	return i - from;
}

static ssize_t fetch(void *fs, uint32_t e, char *buf, int pipe_fd, size_t size,
		     uint64_t off)
{
	return shardfs_fetch(fs, e, buf, pipe_fd, size, off);
}

static void drained(void *fs, uint32_t e, size_t size, uint64_t off)
{
	shardfs_splice_done(fs, (uint64_t)e + 1, size, off);
}

/* How the worker reads, as fs.c has it read. */
static const struct pushahead_reader *reader_of(struct tb_env *e)
{
	static struct pushahead_reader r = { fetch, drained, NULL };

	r.arg = &e->fs;
	return &r;
}

/* A shard of MEMBERS files m00.., saved as e->dir/s.tar, gzip-compressed
 * (one decoded span) if @gzip, and indexed. */
static void build_shard(struct tb_env *e, bool gzip)
{
	char name[16], content[MEMBER_SIZE + 1];
	struct tb a = { 0 };

	for (int i = 0; i < MEMBERS; i++) {
		snprintf(name, sizeof(name), "m%02d", i);
		member_content(i, content);
		tb_file(&a, name, content);
	}
	tb_end(&a);
	if (gzip)
		tb_save_gzip(&a, e->dir, "s.tar", 0);
	else
		tb_save(&a, e->dir, "s.tar");
	tb_free(&a);
	tb_env_build(e);
}

/* Push-ahead over the shard with @bound, listing through @lister (a
 * worker started before is stopped first). */
static void start_push(struct tb_env *e, uint64_t bound, pushahead_list_fn lister)
{
	pushahead_stop(&e->fs.push);
	pushahead_release(&e->fs.push);
	assert_int_equal(pushahead_init(&e->fs.push, &e->fs.idx, &e->fs.set, bound,
					reader_of(e)), 0);
	memset(&kernel, 0, sizeof(kernel));
	kernel.fs = &e->fs;
	/* here, not in the worker: the tests' first READs are pushed from */
	assert_int_equal(pushahead_prepare(&e->fs.push), 0);
	assert_int_equal(pushahead_start(&e->fs.push, fake_store, lister, &kernel), 0);
}

static void setup_listing(struct tb_env *e, uint64_t bound,
			  pushahead_list_fn lister)
{
	build_shard(e, false);
	start_push(e, bound, lister);
}

static void setup(struct tb_env *e, uint64_t bound)
{
	setup_listing(e, bound, NULL);
}

/* The same shard gzip-compressed. */
static void setup_gzip(struct tb_env *e)
{
	build_shard(e, true);
	assert_non_null(e->fs.set.shards[0].src->encoding);
	start_push(e, 1 << 20, NULL);
}

static uint64_t ino_of(struct tb_env *e, int i)
{
	char name[16];

	snprintf(name, sizeof(name), "m%02d", i);
	return tb_ino(&e->fs, name);
}

static void read_member(struct tb_env *e, int i)
{
	char buf[MEMBER_SIZE];

	assert_int_equal(shardfs_read(&e->fs, ino_of(e, i), buf, sizeof(buf), 0),
			 MEMBER_SIZE);
}

/* Read member @i as a shuffled reader does: a jump in the shard. */
static void read_at_random(struct tb_env *e, int i)
{
	atomic_store(&e->fs.streams[0].last_end, UINT64_MAX);
	read_member(e, i);
}

/* What the worker has done so far. */
static unsigned long long progress(struct tb_env *e)
{
	const struct pushahead_counters *c = &e->fs.push.counters;

	return atomic_load(&c->files) + atomic_load(&c->unknown) +
	       atomic_load(&c->refused) + atomic_load(&c->listings) +
	       atomic_load(&kernel.stores);
}

static bool spans_waiting(struct tb_env *e)
{
	for (int i = 0; i < SHARDFS_PUSHAHEAD_SPAN_QUEUE; i++)
		if (atomic_load(&e->fs.push.spans_wanted[i]))
			return true;
	return false;
}

/*
 * Wait (up to 10 s) until nothing is queued and the worker is quiet: no
 * progress in 50 ms, and asleep (under valgrind a worker busy pushing
 * may make no progress for longer).
 */
static void settle(struct tb_env *e)
{
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	unsigned long long seen = ~0ull;
	pid_t worker = 0;

	for (int i = 0; i < 200; i++) {
		if (!worker)	/* it names itself once it runs */
			worker = tb_thread_named("shardfs-push");
		if (!atomic_load(&e->fs.push.list) &&
		    !atomic_load(&e->fs.push.dir_wanted) &&
		    !spans_waiting(e) && progress(e) == seen &&
		    (!e->fs.push.running || (worker && tb_thread_asleep(worker))))
			return;
		seen = progress(e);
		nanosleep(&ts, NULL);
	}
}

static void test_nothing_stored_for_inodes_the_kernel_lacks(void **state)
{
	struct tb_env *e = *state;

	setup(e, 1 << 20);
	for (int i = 0; i < 8; i++)
		read_member(e, i);
	settle(e);
	assert_int_equal(atomic_load(&kernel.stores), 0);
	assert_true(atomic_load(&e->fs.push.counters.unknown) > 0);
}

static void test_forward_reader_gets_the_next_members(void **state)
{
	struct tb_env *e = *state;
	const struct pushahead_counters *c = &e->fs.push.counters;
	int stored = 0;

	setup(e, 1 << 20);
	for (int i = 0; i < MEMBERS; i++)
		kernel_lookup(&e->fs, ino_of(e, i), 2);
	kernel_forget(&e->fs, ino_of(e, 20), 2);	/* dropped */
	/* the third forward read in a row opens the window */
	for (int i = 0; i < SHARDFS_READAHEAD_STREAK; i++)
		read_member(e, i);
	settle(e);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	for (int i = 0; i < SHARDFS_READAHEAD_STREAK; i++)
		assert_false(atomic_load(&kernel.stored[ino_of(e, i)]));
	assert_false(atomic_load(&kernel.stored[ino_of(e, 20)]));
	for (int i = SHARDFS_READAHEAD_STREAK; i < MEMBERS; i++)
		stored += atomic_load(&kernel.stored[ino_of(e, i)]);
	/* all after the reader but the forgotten one and the trip */
	assert_int_equal(stored, MEMBERS - SHARDFS_READAHEAD_STREAK - 2);
	assert_int_equal(atomic_load(&c->files), stored);
	assert_true(atomic_load(&c->ahead_max) <= e->fs.push.bound);
	/* a READ of a stored member is counted as one the kernel missed; a
	 * slow run (valgrind) may find the window gone idle first
	 * (SHARDFS_PUSHAHEAD_IDLE_MS), every stored member then counted as
	 * unconfirmed and the READ as nothing */
	read_member(e, 10);
	if (atomic_load(&c->unconfirmed)) {
		assert_int_equal(atomic_load(&c->unconfirmed), stored);
		assert_int_equal(atomic_load(&c->read_anyway), 0);
	} else {
		assert_int_equal(atomic_load(&c->read_anyway), 1);
	}
}

/*
 * Every member held, a window opened by READs of @first to @first + 2
 * and, once the worker pushed, started over behind it by a streak of
 * READs of 3 to 6.  Returns the stores made before it started over.
 */
static unsigned open_then_start_over(struct tb_env *e, int first)
{
	unsigned before;

	setup(e, 1 << 20);
	for (int i = 0; i < MEMBERS; i++)
		kernel_lookup(&e->fs, ino_of(e, i), 1);
	for (int i = first; i < first + 3; i++)
		read_member(e, i);
	settle(e);
	before = atomic_load(&kernel.stores);
	for (int i = 3; i <= 6; i++)
		read_member(e, i);
	settle(e);
	return before;
}

/*
 * A second reader of the shard behind the first (a DataLoader's other
 * worker) starts the window over behind the run the worker pushed: the
 * members up to that run are pushed, the run is not pushed again.
 */
static void test_window_started_over_behind_skips_the_run_pushed(void **state)
{
	struct tb_env *e = *state;
	unsigned before = open_then_start_over(e, 8);

	assert_true(before >= MEMBERS - 12);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_true(atomic_load(&kernel.stores) > before);
	assert_true(atomic_load(&kernel.stores) <= before + 4);	/* 7 to 10 */
	for (int i = 11; i < MEMBERS; i++)
		assert_true(atomic_load(&kernel.bytes[ino_of(e, i)]) <= MEMBER_SIZE);
}

/*
 * The members a reader READ in this pass are not pushed by a window that
 * reaches them later (the kernel has them: a DataLoader's READs ahead of
 * the worker); READs again of members of the pass (a new epoch) begin
 * the next pass, in which they are pushed again.
 */
static void test_members_read_in_the_pass_are_not_pushed(void **state)
{
	struct tb_env *e = *state;

	open_then_start_over(e, 10);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	for (int i = 7; i <= 9; i++)
		assert_int_equal(atomic_load(&kernel.bytes[ino_of(e, i)]), MEMBER_SIZE);
	for (int i = 10; i <= 12; i++)		/* READ before: left out */
		assert_int_equal(atomic_load(&kernel.bytes[ino_of(e, i)]), 0);
	assert_int_equal(atomic_load(&e->fs.push.counters.passes), 0);
	for (int i = 3; i <= 6; i++)		/* an epoch again */
		read_member(e, i);
	assert_int_equal(atomic_load(&e->fs.push.counters.passes), 1);
}

/*
 * Push-ahead keeps one bit per entry of what the kernel holds; where it
 * saw no reference (here: every one but the reader's, as if their FORGET
 * had come for a reply that failed while the kernel kept the inode), it
 * asks the kernel with a store of no bytes, and pushes what it holds.
 */
static void test_members_without_a_seen_reference_are_probed(void **state)
{
	struct tb_env *e = *state;
	const struct pushahead_counters *c = &e->fs.push.counters;
	int stored = 0;

	setup(e, 1 << 20);
	for (int i = 0; i < MEMBERS; i++) {
		kernel_lookup(&e->fs, ino_of(e, i), 1);
		if (i >= SHARDFS_READAHEAD_STREAK && i != 30)
			pushahead_forget(&e->fs.push, ino_of(e, i), 1);
	}
	kernel_forget(&e->fs, ino_of(e, 30), 1);	/* really gone */
	for (int i = 0; i < SHARDFS_READAHEAD_STREAK; i++)
		read_member(e, i);
	settle(e);
	for (int i = SHARDFS_READAHEAD_STREAK; i < MEMBERS; i++)
		stored += atomic_load(&kernel.stored[ino_of(e, i)]);
	assert_false(atomic_load(&kernel.stored[ino_of(e, 30)]));
	/* all after the reader but the one the kernel lacks and the trip */
	assert_int_equal(stored, MEMBERS - SHARDFS_READAHEAD_STREAK - 2);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_int_equal(atomic_load(&c->unknown), 1);
	/* a probe for every member pushed, one for member 30; none twice */
	assert_int_equal(atomic_load(&c->probes), stored + 1);
}

/* A reader that never listed: the members ahead are listed, then pushed. */
static void test_unknown_members_are_listed_then_pushed(void **state)
{
	struct tb_env *e = *state;
	const struct pushahead_counters *c = &e->fs.push.counters;
	int stored = 0, from;

	setup_listing(e, 1 << 20, fake_list);
	for (int i = 0; i < SHARDFS_READAHEAD_STREAK; i++) {
		kernel_lookup(&e->fs, ino_of(e, i), 1);	/* its LOOKUP */
		read_member(e, i);
	}
	settle(e);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	for (int i = SHARDFS_READAHEAD_STREAK; i < MEMBERS; i++)
		stored += atomic_load(&kernel.stored[ino_of(e, i)]);
	assert_int_equal(stored, MEMBERS - SHARDFS_READAHEAD_STREAK - 1);
	/* one listing per FAKE_LISTED members, none twice */
	assert_true(atomic_load(&c->listings) <=
		    (MEMBERS + FAKE_LISTED - 1) / FAKE_LISTED);
	assert_int_equal(atomic_load(&c->listed), MEMBERS - SHARDFS_READAHEAD_STREAK);
	for (int i = 0; i < MEMBERS; i++)
		assert_true(atomic_load(&kernel.listed_from[i]) <= 1);
	/*
	 * The kernel drops them all (drop_caches): the next epoch lists again,
	 * also from a member listed from before.  The reader jumps back (the
	 * window ends) and streams up to that member.
	 */
	from = SHARDFS_READAHEAD_STREAK + FAKE_LISTED;
	assert_int_equal(atomic_load(&kernel.listed_from[from]), 1);
	for (int i = 0; i < MEMBERS; i++)
		kernel_forget(&e->fs, ino_of(e, i), 1);
	read_member(e, 0);
	for (int i = from - SHARDFS_READAHEAD_STREAK; i < from; i++) {
		kernel_lookup(&e->fs, ino_of(e, i), 1);
		read_member(e, i);
	}
	settle(e);
	assert_int_equal(atomic_load(&kernel.listed_from[from]), 2);
}

/* The second LOOKUP in a directory has it listed, once until forgotten. */
static void test_second_lookup_in_a_directory_lists_it(void **state)
{
	struct tb_env *e = *state;
	const uint64_t root = 1;	/* the members' directory */

	setup_listing(e, 1 << 20, fake_list);
	pushahead_lookup_in(&e->fs.push, root, ino_of(e, 0));
	settle(e);
	assert_int_equal(atomic_load(&kernel.listed_from[0]), 0);
	for (int i = 0; i < 3; i++) {
		pushahead_lookup_in(&e->fs.push, root, ino_of(e, 0));
		settle(e);
	}
	assert_int_equal(atomic_load(&kernel.listed_from[0]), 1);
	assert_int_equal(atomic_load(&e->fs.push.counters.listed), FAKE_LISTED);
	/* the kernel drops the directory: two LOOKUPs list it again */
	kernel_forget(&e->fs, root, 1);
	pushahead_lookup_in(&e->fs.push, root, ino_of(e, 0));
	pushahead_lookup_in(&e->fs.push, root, ino_of(e, 0));
	settle(e);
	assert_int_equal(atomic_load(&kernel.listed_from[0]), 2);
	assert_int_equal(atomic_load(&kernel.stores), 0);
}

/* What the listing of a huge directory was asked for. */
static struct {
	atomic_uint calls;		/* listings */
	atomic_uint from;		/* the entry the last one started at */
	atomic_uint count;		/* the entries it was to list */
	atomic_int busy;		/* listings to refuse with -EBUSY */
} whole;

static ssize_t record_list(void *arg, uint32_t e, uint32_t count)
{
	atomic_fetch_add(&whole.calls, 1);
	atomic_store(&whole.from, e);
	atomic_store(&whole.count, count);
	if (atomic_fetch_sub(&whole.busy, 1) > 0)
		return -EBUSY;
	return -ETIMEDOUT;	/* as a long one: it goes on without the worker */
}

/* A shard of directory big/ with @entries files and small/ with one. */
static void build_big_and_small(struct tb_env *e, uint32_t entries)
{
	struct tb a = { 0 };
	char name[32];

	for (uint32_t i = 0; i < entries; i++) {
		snprintf(name, sizeof(name), "big/f%05u", i);
		tb_file(&a, name, "x");
	}
	tb_file(&a, "small/f", "x");
	tb_end(&a);
	tb_save(&a, e->dir, "s.tar");
	tb_free(&a);
	tb_env_build(e);
}

/* @n LOOKUPs in directory @dir, of its names big/f00000 on, the worker
 * settling after each. */
static void lookups_in(struct tb_env *e, uint64_t dir, int n)
{
	char name[32];

	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "big/f%05d", i);
		pushahead_lookup_in(&e->fs.push, dir, tb_ino(&e->fs, name));
		settle(e);
	}
}

/*
 * A directory of more than SHARDFS_PUSHAHEAD_BARE_MIN entries goes bare
 * when listings work; the second LOOKUP in it has it listed whole, from
 * its first entry, once until the kernel forgets it, or until a listing
 * meets another under way.  A smaller one, or one that was not listed
 * bare, is never listed so.
 */
static void test_huge_directory_listed_bare_is_listed_whole(void **state)
{
	struct tb_env *e = *state;
	const uint32_t entries = SHARDFS_PUSHAHEAD_BARE_MIN + 1;
	struct shard_inode dir;
	uint64_t big, small;

	build_big_and_small(e, entries);
	big = tb_ino(&e->fs, "big");
	small = tb_ino(&e->fs, "small");
	start_push(e, 1 << 20, NULL);
	assert_false(pushahead_list_bare(&e->fs.push, big));	/* no lister */

	memset(&whole, 0, sizeof(whole));
	start_push(e, 1 << 20, record_list);
	assert_false(pushahead_list_bare(&e->fs.push, small));
	lookups_in(e, big, 3);		/* not listed bare: few count */
	assert_int_equal(atomic_load(&whole.calls), 0);

	/* listed bare, each LOOKUP counts: the same names list it */
	assert_true(pushahead_list_bare(&e->fs.push, big));
	assert_true(pushahead_list_bare(&e->fs.push, big));	/* its next request */
	assert_int_equal(atomic_load(&e->fs.push.counters.bare), 1);
	lookups_in(e, big, 1);
	assert_int_equal(atomic_load(&whole.calls), 0);
	lookups_in(e, big, 3);
	assert_int_equal(atomic_load(&whole.calls), 1);
	shard_index_entry(&e->fs.idx, (uint32_t)(big - 1), &dir);
	assert_int_equal(atomic_load(&whole.from), dir.data);
	assert_int_equal(atomic_load(&whole.count), entries);

	/* a listing that met another is asked for again by the next LOOKUP;
	 * one under way is not */
	kernel_forget(&e->fs, big, 1);
	assert_true(pushahead_list_bare(&e->fs.push, big));
	atomic_store(&whole.busy, 1);
	lookups_in(e, big, 2);
	assert_int_equal(atomic_load(&whole.calls), 2);
	lookups_in(e, big, 3);
	assert_int_equal(atomic_load(&whole.calls), 3);

	/* the kernel forgets it: listed whole again once listed bare again */
	kernel_forget(&e->fs, big, 1);
	lookups_in(e, big, 2);
	assert_int_equal(atomic_load(&whole.calls), 3);
	assert_true(pushahead_list_bare(&e->fs.push, big));
	lookups_in(e, big, 2);
	assert_int_equal(atomic_load(&whole.calls), 4);
	assert_int_equal(atomic_load(&e->fs.push.counters.bare), 3);
	assert_int_equal(atomic_load(&kernel.stores), 0);
}

/*
 * In a directory of more than SHARDFS_PUSHAHEAD_LIST_DIR_MAX entries that
 * no reader listed, about one LOOKUP in SHARDFS_PUSHAHEAD_HUGE_SAMPLE
 * counts: a few list nothing, a reader of all its names has it listed
 * whole, once.
 */
static void test_many_lookups_in_a_huge_directory_list_it(void **state)
{
	struct tb_env *e = *state;
	const uint32_t entries = SHARDFS_PUSHAHEAD_BARE_MIN + 1;
	uint64_t big;
	char name[32];

	build_big_and_small(e, entries);
	big = tb_ino(&e->fs, "big");
	memset(&whole, 0, sizeof(whole));
	start_push(e, 1 << 20, record_list);
	lookups_in(e, big, 2);
	assert_int_equal(atomic_load(&whole.calls), 0);
	for (uint32_t i = 0; i < entries; i++) {
		snprintf(name, sizeof(name), "big/f%05u", i);
		pushahead_lookup_in(&e->fs.push, big, tb_ino(&e->fs, name));
	}
	settle(e);
	assert_int_equal(atomic_load(&whole.calls), 1);
	assert_int_equal(atomic_load(&whole.count), entries);
}

/* A listing that fails is not tried again for the same member. */
static void test_failed_listing_is_not_retried(void **state)
{
	struct tb_env *e = *state;
	unsigned asked = 0;

	setup_listing(e, 1 << 20, fake_list);
	kernel.list_fails = true;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < SHARDFS_READAHEAD_STREAK + 2; i++)
			read_member(e, i);
		settle(e);
	}
	assert_int_equal(atomic_load(&kernel.stores), 0);
	for (int i = 0; i < MEMBERS; i++) {
		assert_true(atomic_load(&kernel.listed_from[i]) <= 1);
		asked += atomic_load(&kernel.listed_from[i]);
	}
	assert_true(asked > 0);
	assert_int_equal(atomic_load(&e->fs.push.counters.listings), 0);
}

static void test_bound_holds(void **state)
{
	struct tb_env *e = *state;
	const struct pushahead_counters *c = &e->fs.push.counters;

	setup(e, 4 * MEMBER_SIZE + 1000);
	for (int i = 0; i < MEMBERS; i++)
		kernel_lookup(&e->fs, ino_of(e, i), 1);
	for (int i = 0; i < SHARDFS_READAHEAD_STREAK; i++)
		read_member(e, i);
	settle(e);
	assert_true(atomic_load(&kernel.stores) > 0);
	assert_true(atomic_load(&kernel.stores) <= 4);
	assert_true(atomic_load(&c->ahead_max) <= e->fs.push.bound);
	/* a jump back (no streak) ends the window and frees the bound */
	read_member(e, 0);
	assert_int_equal(atomic_load(&c->ahead), 0);
}

/* The second READ at random in a span of a compressed shard has the rest
 * of the span pushed, decoded right; a READ of a member pushed so pushes
 * the span again. */
/*
 * The span around READs at random in the shard of @e (all of it: one
 * decoded span of a gzip shard, one region of a plain one) is pushed
 * from the second READ in it on.
 */
static void check_span_pushes(struct tb_env *e)
{
	const struct pushahead_counters *c = &e->fs.push.counters;

	for (int i = 0; i < MEMBERS; i++)	/* all but m40 */
		if (i != 40)
			kernel_lookup(&e->fs, ino_of(e, i), 1);
	/* one READ at random in a span pushes nothing; the second has the
	 * others pushed */
	read_at_random(e, 20);
	settle(e);
	assert_int_equal(atomic_load(&kernel.stores), 0);
	read_at_random(e, 10);
	settle(e);
	assert_int_equal(atomic_load(&c->spans), 1);
	assert_int_equal(atomic_load(&kernel.stores), MEMBERS - 3);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_false(atomic_load(&kernel.stored[ino_of(e, 20)]));
	assert_false(atomic_load(&kernel.stored[ino_of(e, 10)]));
	assert_false(atomic_load(&kernel.stored[ino_of(e, 40)]));
	/* a READ of a member that missed the push: the rest was pushed */
	kernel_lookup(&e->fs, ino_of(e, 40), 1);
	read_at_random(e, 40);
	settle(e);
	assert_int_equal(atomic_load(&kernel.stores), MEMBERS - 3);
	/* a READ of a member so pushed: the kernel dropped it, and likely
	 * the rest of the span: all of it is pushed again */
	read_at_random(e, 30);
	settle(e);
	assert_int_equal(atomic_load(&c->read_anyway), 1);
	assert_int_equal(atomic_load(&c->spans), 2);
	assert_int_equal(atomic_load(&kernel.stores), 2 * MEMBERS - 4);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_int_equal(atomic_load(&c->ahead), 0);
}

static void test_random_read_of_compressed_shard_pushes_its_span(void **state)
{
	struct tb_env *e = *state;

	setup_gzip(e);
	check_span_pushes(e);
}

/* The bytes of the shard's one piece (a plain shard of MEMBERS files). */
#define PIECE_BYTES ((uint64_t)MEMBERS * MEMBER_SIZE)
/* READs at random that take FILL_TENTHS of the piece. */
#define FILL_READS ((int)((PIECE_BYTES * SHARDFS_PUSHAHEAD_FILL_TENTHS / 10 + \
			   MEMBER_SIZE - 1) / MEMBER_SIZE))

/* The piece's share of the set the tests say it is in: a set of ten
 * pieces, so that the piece fills before the pass turns dense. */
#define SET_PIECES 10

/* A plain shard whose members the kernel all holds, push-ahead on. */
static void setup_piece(struct tb_env *e)
{
	setup(e, 1 << 20);
	assert_int_equal(e->fs.set.shards[0].src->size < SHARDFS_PUSHAHEAD_REGION, 1);
	assert_int_equal(e->fs.push.counters.set_bytes, PIECE_BYTES);
	atomic_store(&e->fs.push.counters.set_bytes, SET_PIECES * PIECE_BYTES);
	for (int i = 0; i < MEMBERS; i++)
		kernel_lookup(&e->fs, ino_of(e, i), 1);
}

/* READ members @from, @from + @step, ... below @to at random. */
static void read_every(struct tb_env *e, int from, int to, int step)
{
	for (int i = from; i < to; i += step)
		read_at_random(e, i);
	settle(e);
}

/* The stores so far are @to - @from, and of the members @from.. below
 * MEMBERS and @to. */
static void assert_stored(struct tb_env *e, int from, int to)
{
	assert_int_equal(atomic_load(&kernel.stores), to - from);
	for (int i = from; i < to && i < MEMBERS; i++)
		assert_true(atomic_load(&kernel.stored[ino_of(e, i)]));
	assert_int_equal(atomic_load(&kernel.bad), 0);
}

/* The piece's share the pass took (the counter's density times
 * SET_PIECES). */
static double density(struct tb_env *e)
{
	return (double)atomic_load(&e->fs.push.counters.pass_bytes) /
	       (double)PIECE_BYTES;
}

/* A plain shard's piece is pushed once READs at random took FILL_TENTHS
 * of its bytes: the members not READ, every byte right.  A READ of one of
 * them later begins no new pass. */
static void test_plain_piece_is_pushed_once_reads_took_most_of_it(void **state)
{
	struct tb_env *e = *state;

	setup_piece(e);
	read_every(e, 0, FILL_READS - 1, 1);
	assert_int_equal(atomic_load(&kernel.stores), 0);
	read_every(e, FILL_READS - 1, FILL_READS, 1);
	assert_stored(e, FILL_READS, MEMBERS);
	assert_int_equal(atomic_load(&e->fs.push.counters.spans), 1);
	assert_int_equal(atomic_load(&e->fs.push.counters.span_fetched),
			 (MEMBERS - FILL_READS) * MEMBER_SIZE);
	assert_true(density(e) > 0.99);
	assert_int_equal(atomic_load(&e->fs.push.counters.ahead), 0);
	/* a READ of a pushed member (dropped, or it raced with the push)
	 * is no new pass */
	read_every(e, MEMBERS - 1, MEMBERS, 1);
	assert_int_equal(atomic_load(&e->fs.push.counters.read_anyway), 1);
	assert_int_equal(atomic_load(&e->fs.push.counters.passes), 0);
}

/* The push-ahead worker's WILLNEED advice to the shard, recorded. */
static struct {
	const struct shard_source_ops *ops;	/* the shard's own */
	struct shard_source_ops recording;	/* ops, advise recorded */
	pid_t worker;				/* whose advice counts */
	atomic_uint nr;				/* ranges below (the worker
						 * writes, then counts) */
	uint64_t off[MEMBERS], len[MEMBERS];
} advice;

static void record_advise(struct shard_source *src, uint64_t off, uint64_t len,
			  enum shard_source_advice what)
{
	unsigned n = atomic_load(&advice.nr);

	if (what == SHARD_SOURCE_WILLNEED && gettid() == advice.worker && n < MEMBERS) {
		advice.off[n] = off;
		advice.len[n] = len;
		atomic_store(&advice.nr, n + 1);
	}
	advice.ops->advise(src, off, len, what);
}

/* Does the worker's advice reach into [@off, @off + @len)? */
static bool advised(uint64_t off, uint64_t len)
{
	for (unsigned i = 0; i < atomic_load(&advice.nr); i++)
		if (advice.off[i] < off + len && off < advice.off[i] + advice.len[i])
			return true;
	return false;
}

/*
 * A piece pushed once READs at random took most of it, not in one run:
 * the storage is asked for the members pushed, not for those READ
 * between them (asking for the whole piece read them again: most of the
 * worker's time in a shuffled epoch).
 */
static void test_piece_readahead_leaves_out_members_read(void **state)
{
	struct tb_env *e = *state;
	struct shard_source *src;
	bool read[MEMBERS] = { false };
	int n = 0;

	setup_piece(e);
	src = e->fs.set.shards[0].src;
	advice.ops = src->ops;
	advice.recording = *src->ops;
	advice.recording.advise = record_advise;
	atomic_store(&advice.nr, 0);
	for (int i = 0; i < 200 && !(advice.worker = tb_thread_named("shardfs-push")); i++)
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	assert_true(advice.worker > 0);
	src->ops = &advice.recording;	/* the worker is idle until a READ */
	for (int i = 0; i < MEMBERS && n < FILL_READS; i++)	/* three of four */
		if (i % 4 != 3) {
			read_at_random(e, i);
			read[i] = true;
			n++;
		}
	settle(e);
	src->ops = advice.ops;
	assert_int_equal(atomic_load(&kernel.stores), MEMBERS - FILL_READS);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_true(atomic_load(&advice.nr) > 1);
	for (int i = 0; i < MEMBERS; i++) {
		struct shard_inode in;

		assert_true(shard_index_get(&e->fs.idx, ino_of(e, i), &in));
		if (advised(in.data, in.size) == read[i])
			fail_msg("member %d (%s) %s", i, read[i] ? "READ" : "pushed",
				 read[i] ? "asked for again" : "never asked for");
	}
}

/* A reader of every other file (one node of two) has nothing pushed; the
 * density says a half. */
static void test_sparse_reader_has_no_piece_pushed(void **state)
{
	struct tb_env *e = *state;

	setup_piece(e);
	read_every(e, 0, MEMBERS, 2);
	assert_int_equal(atomic_load(&kernel.stores), 0);
	assert_int_equal(atomic_load(&e->fs.push.counters.spans), 0);
	assert_true(density(e) > 0.49 && density(e) < 0.51);
}

/* Once a pass took DENSE_TENTHS of the set, a piece goes whole at its
 * first READ at random. */
static void test_dense_pass_pushes_a_piece_at_its_first_read(void **state)
{
	struct tb_env *e = *state;

	setup_piece(e);
	atomic_store(&e->fs.push.counters.pass_bytes,
		     SET_PIECES * PIECE_BYTES * SHARDFS_PUSHAHEAD_DENSE_TENTHS / 10);
	read_every(e, 0, 1, 1);
	assert_true(atomic_load(&e->fs.push.dense));
	assert_stored(e, 1, MEMBERS);
}

/*
 * READs of members the pass READ before (SHARDFS_PUSHAHEAD_REREADS of
 * them) begin a new pass: the density is learned again.  A dense reader
 * after a sparse one has the piece pushed once it took most of it; a
 * sparse one after a dense one has nothing more pushed.
 */
static void test_a_new_pass_learns_the_density_again(void **state)
{
	struct tb_env *e = *state;
	const struct pushahead_counters *c = &e->fs.push.counters;
	const int rereads = SHARDFS_PUSHAHEAD_REREADS;

	setup_piece(e);
	read_every(e, 1, MEMBERS, 2);		/* sparse: odd members */
	assert_int_equal(atomic_load(&kernel.stores), 0);
	read_every(e, 1, 2 * rereads - 2, 2);	/* again: one short of it */
	assert_int_equal(atomic_load(&c->passes), 0);
	read_every(e, 2 * rereads - 1, 2 * rereads, 1);	/* a new pass */
	assert_int_equal(atomic_load(&c->passes), 1);
	assert_true(density(e) < 0.03);
	/* dense: the even members, then odd ones up to FILL_READS */
	read_every(e, 0, MEMBERS, 2);
	read_every(e, 2 * rereads + 1,
		   2 * rereads + 1 + 2 * (FILL_READS - 1 - MEMBERS / 2), 2);
	assert_int_equal(atomic_load(&kernel.stores), MEMBERS - FILL_READS);
	assert_true(atomic_load(&kernel.stored[ino_of(e, 1)]));
	assert_true(atomic_load(&kernel.stored[ino_of(e, MEMBERS - 1)]));
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_true(density(e) > 0.99);
	/* sparse again: every fourth even member, READ in the dense pass */
	read_every(e, 2, MEMBERS, 4);
	assert_int_equal(atomic_load(&c->passes), 2);
	assert_int_equal(atomic_load(&kernel.stores), MEMBERS - FILL_READS);
	assert_true(density(e) > 0.18 && density(e) < 0.19);
	assert_false(atomic_load(&e->fs.push.dense));
}

/* Over a transport with cheap READs a plain shard gets no span pushes. */
static void test_cheap_reads_push_no_region(void **state)
{
	struct tb_env *e = *state;

	setup(e, 1 << 20);
	pushahead_cheap_reads(&e->fs.push);
	for (int i = 0; i < MEMBERS; i++)
		kernel_lookup(&e->fs, ino_of(e, i), 1);
	for (int i = 30; i > 0; i -= 10)
		read_at_random(e, i);
	settle(e);
	assert_int_equal(atomic_load(&kernel.stores), 0);
	assert_int_equal(atomic_load(&e->fs.push.counters.spans), 0);
}

/* Span pushes stop once the kernel dropped a quarter of what was pushed. */
static void test_span_pushes_stop_when_they_are_wasted(void **state)
{
	struct tb_env *e = *state;
	struct pushahead_counters *c = &e->fs.push.counters;

	setup_gzip(e);
	for (int i = 0; i < MEMBERS; i++)
		kernel_lookup(&e->fs, ino_of(e, i), 1);
	atomic_store(&c->files, SHARDFS_PUSHAHEAD_SPAN_PROBE);
	atomic_store(&c->read_anyway, SHARDFS_PUSHAHEAD_SPAN_PROBE / 4 + 1);
	read_at_random(e, 20);
	settle(e);
	read_at_random(e, 10);
	settle(e);
	assert_int_equal(atomic_load(&kernel.stores), 0);
	assert_int_equal(atomic_load(&c->spans), 0);
	assert_true(atomic_load(&e->fs.push.policy.spans_off));
}

/* Started without pushahead_prepare(), as a mount starts it: the worker
 * builds the shard's tables, then pushes for a forward reader. */
static void test_worker_prepares_after_the_mount(void **state)
{
	struct tb_env *e = *state;
	const struct pushahead_counters *c = &e->fs.push.counters;

	build_shard(e, false);
	pushahead_release(&e->fs.push);
	assert_int_equal(pushahead_init(&e->fs.push, &e->fs.idx, &e->fs.set, 1 << 20,
					reader_of(e)), 0);
	assert_false(atomic_load(&e->fs.push.ready));
	assert_null(e->fs.push.order_start);
	memset(&kernel, 0, sizeof(kernel));
	kernel.fs = &e->fs;
	assert_int_equal(pushahead_start(&e->fs.push, fake_store, NULL, &kernel), 0);
	for (int i = 0; i < 200 && !atomic_load(&e->fs.push.ready); i++)
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	assert_true(atomic_load(&e->fs.push.ready));
	assert_int_equal(atomic_load(&c->set_bytes), PIECE_BYTES);
	for (int i = 0; i < MEMBERS; i++)
		kernel_lookup(&e->fs, ino_of(e, i), 1);
	for (int i = 0; i <= SHARDFS_READAHEAD_STREAK; i++)
		read_member(e, i);
	settle(e);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_true(atomic_load(&kernel.stores) > 0);
}

/* An index whose order[] does not hold its files leaves push-ahead off. */
static void test_order_that_disagrees_leaves_it_off(void **state)
{
	struct tb_env *e = *state;
	struct shard_index idx;
	struct pushahead p;

	build_shard(e, false);
	idx = e->fs.idx;
	idx.nr_order--;
	assert_int_equal(pushahead_init(&p, &idx, &e->fs.set, 1 << 20, reader_of(e)), 0);
	assert_int_equal(pushahead_prepare(&p), -EINVAL);
	assert_false(atomic_load(&p.ready));
	pushahead_read(&p, (uint32_t)(ino_of(e, 0) - 1), 0, MEMBER_SIZE, 3);
	pushahead_release(&p);
}

/* The worker reads through shardfs_fetch: checked as a READ is. */
static void test_changed_shard_is_never_pushed_from(void **state)
{
	struct tb_env *e = *state;
	uint32_t entry;
	char path[4096], buf[MEMBER_SIZE], want[MEMBER_SIZE + 1];
	int pipe_fd[2];

	setup(e, 1 << 20);
	assert_int_equal(splice_pipe_open(pipe_fd, SHARDFS_SPLICE_MAX), 0);
	entry = (uint32_t)(ino_of(e, 1) - 1);
	member_content(1, want);
	assert_int_equal(shardfs_fetch(&e->fs, entry, buf, -1, MEMBER_SIZE, 0), MEMBER_SIZE);
	assert_memory_equal(buf, want, MEMBER_SIZE);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(shardfs_fetch(&e->fs, entry, NULL, pipe_fd[1], MEMBER_SIZE, 0),
			 MEMBER_SIZE);
	assert_int_equal(read(pipe_fd[0], buf, sizeof(buf)), MEMBER_SIZE);
	assert_memory_equal(buf, want, MEMBER_SIZE);
	snprintf(path, sizeof(path), "%s/s.tar", e->dir);
	assert_int_equal(truncate(path, 64 * 1024), 0);	/* longer: no short read */
	assert_int_equal(shardfs_fetch(&e->fs, entry, buf, -1, MEMBER_SIZE, 0), -EIO);
	assert_int_equal(shardfs_fetch(&e->fs, entry, NULL, pipe_fd[1], MEMBER_SIZE, 0), -EIO);
	assert_int_equal(truncate(path, e->fs.set.shards[0].stored_size), 0);
	assert_int_equal(shardfs_fetch(&e->fs, entry, buf, -1, MEMBER_SIZE, 0), -EIO);
	splice_pipe_close(pipe_fd);
}

/* Sizes of the members of build_sized_shard(): three small ones to open
 * the window, then pieces spliced (from SHARDFS_SPLICE_MIN bytes on, a
 * member over SHARDFS_SPLICE_MAX in two) and copied (fewer). */
static const size_t sized[] = {
	3000, 3000, 3000, 20000, SHARDFS_SPLICE_MAX + 90000, 100,
	SHARDFS_SPLICE_MIN - 1, 70000, SHARDFS_SPLICE_MIN, 40000, 30000, 30000,
};
#define NR_SIZED (sizeof(sized) / sizeof(sized[0]))

/* A shard of members m00.. of the sizes above, content_byte()'s bytes. */
static void build_sized_shard(struct tb_env *e)
{
	struct tb a = { 0 };
	char name[16];

	for (size_t i = 0; i < NR_SIZED; i++) {
		char *data = malloc(sized[i]);

		assert_non_null(data);
		for (size_t j = 0; j < sized[i]; j++)
			data[j] = content_byte((int)i, j);
		snprintf(name, sizeof(name), "m%02zu", i);
		tb_add(&a, name, '0', data, sized[i]);
		free(data);
	}
	tb_end(&a);
	tb_save(&a, e->dir, "s.tar");
	tb_free(&a);
	tb_env_build(e);
}

/*
 * Members of a local plain shard go from the shard's pages through the
 * worker's pipe into the kernel's cache (a copy less than read and
 * store), small ones through its buffer; a store the kernel refuses
 * leaves its bytes in the pipe, which the worker empties: the members
 * after it still get their own bytes.
 */
static void test_members_are_spliced_into_the_kernel(void **state)
{
	struct tb_env *e = *state;
	char buf[3000];
	unsigned complete = 0;

	build_sized_shard(e);
	start_push(e, 4u << 20, NULL);
	assert_true(e->fs.push.pipe[0] >= 0);
	for (size_t i = 0; i < NR_SIZED; i++)
		kernel_lookup(&e->fs, ino_of(e, (int)i), 1);
	atomic_store(&kernel.refuse, ino_of(e, 7));
	for (int i = 0; i < SHARDFS_READAHEAD_STREAK; i++)
		assert_int_equal(shardfs_read(&e->fs, ino_of(e, i), buf, sizeof(buf), 0),
				 sizeof(buf));
	settle(e);
	assert_int_equal(atomic_load(&kernel.bad), 0);
	assert_int_equal(atomic_load(&kernel.refuse), 0);
	assert_int_equal(atomic_load(&e->fs.push.counters.refused), 1);
	for (size_t i = SHARDFS_READAHEAD_STREAK; i < NR_SIZED; i++)
		complete += atomic_load(&kernel.bytes[ino_of(e, (int)i)]) == sized[i];
	/* all after the reader but the refused one and the trip */
	assert_int_equal(complete, NR_SIZED - SHARDFS_READAHEAD_STREAK - 2);
	assert_true(atomic_load(&kernel.piped) >= 4);
	assert_true(atomic_load(&kernel.stores) > atomic_load(&kernel.piped));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TB_ENV_TEST(test_nothing_stored_for_inodes_the_kernel_lacks),
		TB_ENV_TEST(test_random_read_of_compressed_shard_pushes_its_span),
		TB_ENV_TEST(test_plain_piece_is_pushed_once_reads_took_most_of_it),
		TB_ENV_TEST(test_piece_readahead_leaves_out_members_read),
		TB_ENV_TEST(test_sparse_reader_has_no_piece_pushed),
		TB_ENV_TEST(test_dense_pass_pushes_a_piece_at_its_first_read),
		TB_ENV_TEST(test_a_new_pass_learns_the_density_again),
		TB_ENV_TEST(test_cheap_reads_push_no_region),
		TB_ENV_TEST(test_span_pushes_stop_when_they_are_wasted),
		TB_ENV_TEST(test_forward_reader_gets_the_next_members),
		TB_ENV_TEST(test_members_without_a_seen_reference_are_probed),
		TB_ENV_TEST(test_window_started_over_behind_skips_the_run_pushed),
		TB_ENV_TEST(test_members_read_in_the_pass_are_not_pushed),
		TB_ENV_TEST(test_unknown_members_are_listed_then_pushed),
		TB_ENV_TEST(test_failed_listing_is_not_retried),
		TB_ENV_TEST(test_second_lookup_in_a_directory_lists_it),
		TB_ENV_TEST(test_huge_directory_listed_bare_is_listed_whole),
		TB_ENV_TEST(test_many_lookups_in_a_huge_directory_list_it),
		TB_ENV_TEST(test_bound_holds),
		TB_ENV_TEST(test_changed_shard_is_never_pushed_from),
		TB_ENV_TEST(test_members_are_spliced_into_the_kernel),
		TB_ENV_TEST(test_order_that_disagrees_leaves_it_off),
		TB_ENV_TEST(test_worker_prepares_after_the_mount),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
