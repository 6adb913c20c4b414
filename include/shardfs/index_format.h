/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_format.h - the index file's bytes: the one definition of the
 * format, used by the writer and the loader (index_file.c) and the tests.
 *
 * A file is, in native byte order (the header's byte_order field tells a
 * file from another byte order apart, and such a file is refused):
 *
 *   struct index_file_header     448 bytes at offset 0: magic, version,
 *                                sizes, counts, the section table, and
 *                                an xxh3 of the header itself (computed
 *                                with header_xxh3 zero)
 *   sections                     each at an offset that is a multiple of
 *                                INDEX_SECTION_ALIGN, with its offset,
 *                                length and xxh3 in the section table:
 *
 *   INDEX_SEC_SHARDS       struct index_file_shard, one per shard in order
 *   INDEX_SEC_SHARD_NAMES  their paths, a byte pool (not NUL-terminated)
 *   INDEX_SEC_ENTRIES      the entries and their names, in blocks of 64
 *                          (index_compact.h, version 4)
 *   INDEX_SEC_BLOCKS       uint64_t: where each block starts in ENTRIES,
 *                          then ENTRIES' length
 *   INDEX_SEC_TARGETS      link targets, NUL-terminated
 *   INDEX_SEC_SPARSE       struct shard_sparse
 *   INDEX_SEC_EXTENTS      struct shard_extent
 *   INDEX_SEC_HARDLINKS    struct shard_hardlink
 *   INDEX_SEC_SEEK_SHARDS  struct index_file_seek, one per shard (version 2)
 *   INDEX_SEC_SEEK_POINTS  struct seek_point (seek_table.h)
 *   INDEX_SEC_SEEK_WINDOWS deflated 32 KiB windows, a byte pool
 *   INDEX_SEC_ORDER        uint32_t entry numbers: the files whose data lie
 *                          in a shard (shard_index_orderable(), index.h),
 *                          sorted by shard, data offset, entry (version 3)
 *   INDEX_SEC_SUMS         uint64_t: the xxh3 of each INDEX_SUM_SPAN bytes
 *                          of ENTRIES, then of BLOCKS, then of ORDER (the
 *                          last span of each may be shorter; version 5)
 *
 * The SUMS section is what lets a mount check the per-member sections
 * lazily (index_guard.h): a file that a record says passed the full check
 * (index_verified.h) has each span of them checked against its sum when a
 * request first touches it, instead of all of them at mount.  It comes
 * last, as it sums ORDER.
 *
 * The SEEK sections hold the seek tables of compressed shards, so that
 * remounting a compressed set decodes nothing: a shard's record points at
 * its run of points and its run of windows, and names its encoding
 * (nr 0 and no encoding for a plain tar).
 *
 * The ORDER section is what push-ahead walks a shard by (pushahead.h): it
 * is written with the file (sorted from the entries by
 * shard_index_order_compute(), index.h, or gathered from the members'
 * numbers by a writer that takes the entries one at a time,
 * index_file.h), so that a mount serves it from the file's pages instead
 * of sorting the members into private memory (4 bytes per member,
 * docs/benchmarks-scale.md).  It comes last in the file, after the
 * packed entries, because its length is known only then.  The
 * sections need not lie in the order of the table: a writer places the
 * packed ones last (index_file.h).
 *
 * The other arrays are those of struct shard_index byte for byte, so the
 * static assertions below pin every size the format depends on: a struct
 * that changes size breaks the build here, and whoever changes it must
 * move INDEX_FILE_VERSION.  The in-memory totals (struct
 * shard_index_counts) are not part of the format: the file has its own
 * struct index_file_counts, converted field by field.
 */
#ifndef SHARDFS_INDEX_FORMAT_H
#define SHARDFS_INDEX_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "shardfs/index.h"
#include "shardfs/index_guard.h"
#include "shardfs/seek_table.h"

#define INDEX_FILE_MAGIC "SHARDIDX"
/* Moves with every change of the bytes below (2: the SEEK sections; 3: the
 * ORDER section; 4: the packed entries; 5: the SUMS section).  A file of
 * another version is refused and rebuilt. */
#define INDEX_FILE_VERSION 5
/* Written as is: read back equal only in the same byte order. */
#define INDEX_BYTE_ORDER 0x01020304u
/* Sections start on a multiple of this many bytes. */
#define INDEX_SECTION_ALIGN 64

enum index_section {
	INDEX_SEC_SHARDS,	/* struct index_file_shard[] */
	INDEX_SEC_SHARD_NAMES,	/* shard paths, a byte pool */
	INDEX_SEC_ENTRIES,	/* packed blocks of entries and names */
	INDEX_SEC_BLOCKS,	/* uint64_t[]: block offsets in ENTRIES */
	INDEX_SEC_TARGETS,	/* link targets */
	INDEX_SEC_SPARSE,	/* struct shard_sparse[] */
	INDEX_SEC_EXTENTS,	/* struct shard_extent[] */
	INDEX_SEC_HARDLINKS,	/* struct shard_hardlink[] */
	INDEX_SEC_SEEK_SHARDS,	/* struct index_file_seek[] */
	INDEX_SEC_SEEK_POINTS,	/* struct seek_point[] */
	INDEX_SEC_SEEK_WINDOWS,	/* deflated windows, a byte pool */
	INDEX_SEC_ORDER,	/* uint32_t[]: files by shard and offset */
	INDEX_SEC_SUMS,		/* uint64_t[]: xxh3 of each span of the
				 * per-member sections */
	INDEX_NR_SECTIONS
};

/* Where one section is, in the header's table. */
struct index_section_entry {
	uint64_t offset;	/* from the start of the file */
	uint64_t length;	/* bytes */
	uint64_t xxh3;		/* XXH3_64bits of those bytes */
};

/* The totals of the build, as the file stores them. */
struct index_file_counts {
	uint64_t files;		/* regular files (hard-link groups once) */
	uint64_t dirs;		/* directories */
	uint64_t symlinks;	/* symbolic links */
	uint64_t hardlinks;	/* extra names of files */
	uint64_t bytes;		/* sum of regular file sizes */
	uint64_t members;	/* members the tar scanner reported */
	uint64_t duplicates;	/* paths present more than once */
	uint64_t skipped;	/* members not served */
	uint64_t special;	/* device nodes, FIFOs, sockets */
	uint64_t unlabeled;	/* classes layout: samples without a label */
	uint32_t bad_shards;	/* shards dropped with skip_bad_shards */
	uint32_t reserved;	/* zero */
};

struct index_file_header {
	char magic[8];		/* INDEX_FILE_MAGIC, no NUL */
	uint32_t version;	/* INDEX_FILE_VERSION */
	uint32_t byte_order;	/* INDEX_BYTE_ORDER as written */
	uint64_t file_size;	/* bytes in the whole file */
	uint64_t options_hash;	/* layout_hash() of the build's layout */
	uint32_t nr_shards;	/* entries in INDEX_SEC_SHARDS */
	uint32_t nr_inodes;	/* entries in INDEX_SEC_ENTRIES */
	struct index_file_counts counts; /* totals of the build */
	struct index_section_entry sections[INDEX_NR_SECTIONS]; /* where */
	uint64_t header_xxh3;	/* of this header with this field zero */
};

/* One shard as the index file records it. */
struct index_file_shard {
	uint64_t size;		/* bytes at build time */
	int64_t mtime_sec;	/* mtime at build time */
	int64_t ctime_sec;	/* ctime at build time */
	uint32_t mtime_nsec;	/* mtime at build time, nanoseconds */
	uint32_t ctime_nsec;	/* ctime at build time, nanoseconds */
	uint64_t name;		/* offset of its path in SHARD_NAMES */
	uint32_t name_len;	/* bytes of its path in SHARD_NAMES */
	uint32_t flags;		/* INDEX_SHARD_* */
	uint64_t fingerprint;	/* xxh3 of its first bytes */
	uint64_t digest;	/* of its headers and labels (shard_scan.h) */
	uint64_t members;	/* members its scan found */
};

#define INDEX_SHARD_ABSOLUTE 0x1 /* name is absolute, not index-relative */

/* A compressed shard's seek table, as the index file records it. */
struct index_file_seek {
	uint64_t first;		/* its first point in SEEK_POINTS */
	uint64_t nr;		/* its points; 0: a plain tar */
	uint64_t windows;	/* offset of its windows in SEEK_WINDOWS */
	uint64_t windows_len;	/* bytes of its windows */
	uint64_t stored_size;	/* bytes of the compressed object */
	char encoding[16];	/* the source's encoding ("gzip"), NUL-
				 * terminated; empty for a plain tar */
};

/* Bytes of one record of section @s (1 for the byte pools). */
static inline size_t index_section_record(enum index_section s)
{
	switch (s) {
	case INDEX_SEC_SHARDS:
		return sizeof(struct index_file_shard);
	case INDEX_SEC_BLOCKS:
		return sizeof(uint64_t);
	case INDEX_SEC_SPARSE:
		return sizeof(struct shard_sparse);
	case INDEX_SEC_EXTENTS:
		return sizeof(struct shard_extent);
	case INDEX_SEC_HARDLINKS:
		return sizeof(struct shard_hardlink);
	case INDEX_SEC_SEEK_SHARDS:
		return sizeof(struct index_file_seek);
	case INDEX_SEC_SEEK_POINTS:
		return sizeof(struct seek_point);
	case INDEX_SEC_ORDER:
		return sizeof(uint32_t);
	case INDEX_SEC_SUMS:
		return sizeof(uint64_t);
	default:
		return 1;
	}
}

/* The sections SUMS covers, those with a record or more per member, as
 * a guard numbers them (enum index_guarded: their order in SUMS). */
static inline enum index_section index_summed(enum index_guarded i)
{
	static const enum index_section summed[INDEX_NR_GUARDED] = {
		[INDEX_GUARDED_ENTRIES] = INDEX_SEC_ENTRIES,
		[INDEX_GUARDED_BLOCKS] = INDEX_SEC_BLOCKS,
		[INDEX_GUARDED_ORDER] = INDEX_SEC_ORDER,
	};

	return summed[i];
}

/* Sums in the SUMS section of a file with header @h. */
static inline uint64_t index_sum_count(const struct index_file_header *h)
{
	uint64_t n = 0;

	for (int i = 0; i < INDEX_NR_GUARDED; i++)
		n += index_guard_spans(h->sections[index_summed(i)].length);
	return n;
}

/* The name of section @s, as messages and shardfs-index --stats print it. */
static inline const char *index_section_name(enum index_section s)
{
	static const char *const names[INDEX_NR_SECTIONS] = {
		"SHARDS", "SHARD_NAMES", "ENTRIES", "BLOCKS", "TARGETS", "SPARSE", "EXTENTS",
		"HARDLINKS", "SEEK_SHARDS", "SEEK_POINTS", "SEEK_WINDOWS", "ORDER", "SUMS",
	};

	return s < INDEX_NR_SECTIONS ? names[s] : "?";
}

_Static_assert(sizeof(struct shard_sparse) == 16, "struct shard_sparse: 16 bytes");
_Static_assert(sizeof(struct shard_extent) == 24, "struct shard_extent: 24 bytes");
_Static_assert(sizeof(struct shard_hardlink) == 8, "struct shard_hardlink: 8 bytes");
_Static_assert(sizeof(struct index_file_shard) == 72, "index_file_shard: 72 bytes");
_Static_assert(sizeof(struct index_section_entry) == 24, "section entry: 24 bytes");
_Static_assert(sizeof(struct index_file_counts) == 88, "index_file_counts: 88 bytes");
_Static_assert(offsetof(struct index_file_header, counts) == 40, "counts at 40");
_Static_assert(offsetof(struct index_file_header, sections) == 128, "sections at 128");
_Static_assert(INDEX_NR_SECTIONS == 13, "the header's section table: 13 entries");
_Static_assert(sizeof(struct index_file_seek) == 56, "index_file_seek: 56 bytes");
_Static_assert(sizeof(struct seek_point) == 32, "seek_point: 32 bytes");
_Static_assert(sizeof(struct index_file_header) == 448, "header: 448 bytes");

#endif
