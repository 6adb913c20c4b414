/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_index_compact.c - libFuzzer target for the packed entries of an
 * index (index_compact.h): the ENTRIES, BLOCKS and TARGETS sections that
 * an index file hands the mount, and that compact_check() alone stands
 * between and every read of an entry.
 *
 * The input is an 8-byte head, the number of entries and the length of
 * ENTRIES (uint32_t each, little-endian; the number taken modulo
 * MAX_ENTRIES), then BLOCKS (8 bytes per block and one more), then
 * ENTRIES, and TARGETS is the rest.  Each section is copied to a heap
 * allocation of its own length, so that ASan sees any read past it.
 * Sections that pass the check are read every way there is: each entry
 * whole and field by field (which must agree), each name alone and in a
 * cursor's walk (which must agree), each link's target (inside TARGETS,
 * NUL-terminated at its size), and compact_lookup() of each name over all
 * entries (unsorted: it may miss, but what it finds has that name) and
 * over every run of strictly ascending names, where it must find each
 * entry from the run's start and from the entry itself.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "shardfs/index.h"
#include "shardfs/index_compact.h"

/* Most entries an input describes (64 blocks). */
#define MAX_ENTRIES (64 * COMPACT_BLOCK_ENTRIES)

/* The names of the entries of the input being read. */
static char names[MAX_ENTRIES][PATH_COMPONENT_MAX + 1];
static size_t name_lens[MAX_ENTRIES];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_keep_stderr();
	return 0;
}

/* A heap copy of the @len bytes at @p, exactly that long. */
static void *section(const uint8_t *p, size_t len)
{
	void *copy = malloc(len ? len : 1);

	FUZZ_CHECK(copy, "out of memory");
	return len ? memcpy(copy, p, len) : copy;
}

/* Entry @e whole, field by field, and its target if a link. */
static void read_entry(const struct compact_entries *c, uint32_t e,
		       const struct shard_inode *in)
{
	const uint64_t want[COMPACT_NR_FIELDS] = {
		in->data, in->size, (uint64_t)in->mtime_sec, in->mtime_nsec, in->mode,
		in->uid, in->gid, in->parent, in->shard, in->nlink, in->flags,
	};

	FUZZ_CHECK(!in->name && !in->name_len, "entry %u has a name offset", e);
	for (int f = 0; f < COMPACT_NR_FIELDS; f++) {
		uint64_t v = compact_field(c, e, (enum compact_field)f);

		FUZZ_CHECK(v == want[f], "entry %u field %d: %llu, whole %llu", e, f,
			   (ull)v, (ull)want[f]);
	}
	if (S_ISLNK(in->mode)) {
		FUZZ_CHECK(in->data < c->targets_len && in->size < c->targets_len - in->data,
			   "link %u outside TARGETS", e);
		fuzz_touch(c->targets + in->data, in->size + 1);
		FUZZ_CHECK(!c->targets[in->data + in->size], "link %u not terminated", e);
	}
}

/* Walk every entry with a cursor; keep the names. */
static void walk(const struct compact_entries *c)
{
	struct compact_cursor cur;
	struct shard_inode in, whole;
	char name[PATH_COMPONENT_MAX + 1];
	uint32_t e = 0;

	compact_cursor_init(&cur, c, 0);
	while (compact_cursor_next(&cur, &in)) {
		compact_entry(c, e, &whole);
		FUZZ_CHECK(!memcmp(&in, &whole, sizeof(in)), "cursor at %u", e);
		read_entry(c, e, &in);
		name_lens[e] = compact_name(c, e, name);
		FUZZ_CHECK(name_lens[e] == cur.name_len && name_lens[e] <= PATH_COMPONENT_MAX &&
			   !memcmp(name, cur.name, name_lens[e] + 1), "name of %u", e);
		memcpy(names[e], name, name_lens[e] + 1);
		e++;
	}
	FUZZ_CHECK(e == c->nr && cur.next == c->nr, "walk ended at %u of %u", e, c->nr);
}

/* Lookups over all entries, then over each run of ascending names. */
static void look_up(const struct compact_entries *c)
{
	uint32_t run = 0;

	for (uint32_t e = 0; e < c->nr; e++) {
		int64_t found = compact_lookup(c, 0, c->nr, names[e], name_lens[e]);

		FUZZ_CHECK(found == -ENOENT || (found >= 0 && found < c->nr &&
			   name_lens[found] == name_lens[e] &&
			   !memcmp(names[found], names[e], name_lens[e])),
			   "lookup of entry %u's name: %lld", e, (long long)found);
		if (e > run && shard_index_name_cmp(names[e - 1], name_lens[e - 1], names[e],
						    name_lens[e]) >= 0)
			run = e;
		found = compact_lookup(c, run, e - run + 1, names[e], name_lens[e]);
		FUZZ_CHECK(found == e, "lookup of %u in the run from %u: %lld", e, run,
			   (long long)found);
		found = compact_lookup(c, e, 1, names[e], name_lens[e]);
		FUZZ_CHECK(found == e, "lookup of %u alone: %lld", e, (long long)found);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct compact_entries c = { 0 };
	uint32_t head[2], bad;
	size_t blocks_len;
	const char *why;

	if (size < sizeof(head))
		return 0;
	memcpy(head, data, sizeof(head));
	c.nr = le32toh(head[0]) % (MAX_ENTRIES + 1);
	c.entries_len = le32toh(head[1]);
	blocks_len = (compact_nr_blocks(c.nr) + 1) * sizeof(uint64_t);
	data += sizeof(head);
	size -= sizeof(head);
	if (size < blocks_len || size - blocks_len < c.entries_len)
		return 0;
	c.blocks = section(data, blocks_len);
	c.entries = section(data + blocks_len, c.entries_len);
	c.targets_len = size - blocks_len - c.entries_len;
	c.targets = section(data + blocks_len + c.entries_len, c.targets_len);
	if (!compact_check(&c, &bad, &why)) {
		walk(&c);
		look_up(&c);
	} else {
		FUZZ_CHECK(why && (bad < c.nr || !c.nr), "refused without a reason");
	}
	free((void *)c.blocks);
	free((void *)c.entries);
	free((void *)c.targets);
	return 0;
}
