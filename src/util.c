/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.c - array growth, name tables, byte counts and the clock (util.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardfs/util.h"

int array_grow(void **array, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return 0;
	while (n < need) {
		if (n > SIZE_MAX / 2 / elem)
			return -ENOMEM;
		n *= 2;
	}
	p = realloc(*array, n * elem);
	if (!p)
		return -ENOMEM;
	*array = p;
	*cap = n;
	return 0;
}

int name_table_find(const char *const *names, size_t nr, const char *s)
{
	for (size_t i = 0; i < nr; i++)
		if (!strcmp(s, names[i]))
			return (int)i;
	return -1;
}

int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *unit;
	unsigned long long v;
	char *end;
	int shift = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		unit = strchr(units, *end & ~0x20);
		if (!unit || !*unit || end[1])
			return -EINVAL;
		shift = 10 * (int)(unit - units + 1);
	}
	if (v > UINT64_MAX >> shift)
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
