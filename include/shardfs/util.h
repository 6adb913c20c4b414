/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.h - small rules every part of shardfs shares: growing an array,
 * finding a name in a table of option values, reading a byte count,
 * reading a little-endian number of a compressed format's header,
 * reading the monotonic clock.
 *
 * Each existed in several copies that had begun to disagree (one size
 * parser took T, the other did not); these are the only ones.
 *
 * Thread-safety: none of them keeps state.
 */
#ifndef SHARDFS_UTIL_H
#define SHARDFS_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Entries of a true array (not a pointer). */
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The @n-byte (at most 8) little-endian number at @p. */
static inline uint64_t le_load(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

/* The 4-byte little-endian number at @p. */
static inline uint32_t le32(const unsigned char *p)
{
	return (uint32_t)le_load(p, 4);
}

/*
 * Grow *@array (of @elem-byte items, *@cap allocated) to hold at least
 * @need; the capacity doubles from 16, so growth is amortised O(1).
 * Returns 0 or -ENOMEM (the array is then unchanged).
 */
int array_grow(void **array, size_t *cap, size_t need, size_t elem);

/*
 * The position of @s in @names (@nr entries, compared whole), or -1.
 * Option values such as layout=tree|shards|classes map to enums this way.
 */
int name_table_find(const char *const *names, size_t nr, const char *s);

/*
 * A byte count: decimal digits with an optional K, M, G or T suffix
 * (either case, powers of 1024), nothing else.  Returns 0, or -EINVAL
 * for anything else or a value past UINT64_MAX.
 */
int parse_size(const char *s, uint64_t *out);

/* Nanoseconds of CLOCK_MONOTONIC: for timeouts, ages and op timings. */
uint64_t monotonic_ns(void);

#endif
