/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pattern.c - OUT_PATTERN: the file name of shard number N.
 *
 * Two spellings are accepted, both with the number in the file name:
 *
 *   printf style  out/shard-%06d.tar  ("%d" or "%0Nd"; "%%" is a '%');
 *                 numbers start at 0.
 *   brace range   out/shard-{000000..999999}.tar, the way WebDataset
 *                 names shard sets; numbers start at the first bound and
 *                 may not pass the second.  Nothing else is special.
 *
 * A range is zero-padded to the width of its wider bound when either
 * bound has a leading zero, as braceexpand does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"

/* Widest number a pattern may ask for. */
#define PATTERN_WIDTH_MAX 20

static const char digits[] = "0123456789";

/* Parse @len decimal digits at @s; -ERANGE when they do not fit. */
static int parse_number(const char *s, size_t len, uint64_t *value)
{
	*value = 0;
	for (size_t i = 0; i < len; i++) {
		if (*value > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		*value = *value * 10 + (uint64_t)(s[i] - '0');
	}
	return 0;
}

/*
 * If "{A..B}" starts at @s, fill the numbering of @p from it and return
 * its length; return 0 when @s starts no range, -EINVAL for a bad one.
 */
static int parse_range(const char *s, struct pack_pattern *p)
{
	const char *a = s + 1, *b;
	size_t alen, blen;

	alen = strspn(a, digits);
	if (*s != '{' || !alen || strncmp(a + alen, "..", 2))
		return 0;
	b = a + alen + 2;
	blen = strspn(b, digits);
	if (!blen || b[blen] != '}')
		return 0;
	if (alen > PATTERN_WIDTH_MAX || blen > PATTERN_WIDTH_MAX ||
	    parse_number(a, alen, &p->first) || parse_number(b, blen, &p->last))
		return -EINVAL;
	if (p->first > p->last)
		return -EINVAL;
	if ((a[0] == '0' && alen > 1) || (b[0] == '0' && blen > 1))
		p->width = (unsigned)(alen > blen ? alen : blen);
	return (int)(b + blen + 1 - s);
}

/*
 * If "%d" or "%0Nd" starts at @s, fill the numbering of @p from it and
 * return its length; -EINVAL for any other conversion.
 */
static int parse_printf(const char *s, struct pack_pattern *p)
{
	size_t wlen = s[1] == '0' ? strspn(s + 2, digits) : 0;
	uint64_t width = 0;

	if (s[1] == 'd')
		return 2;
	if (s[1] != '0' || !wlen || s[2 + wlen] != 'd' ||
	    parse_number(s + 2, wlen, &width) || width > PATTERN_WIDTH_MAX)
		return -EINVAL;
	p->width = (unsigned)width;
	return (int)(wlen + 3);
}

/* Copy @len bytes of @s into *out, reading "%%" as '%' unless @literal. */
static int copy_part(const char *s, size_t len, bool literal, char **out)
{
	char *o = malloc(len + 1);

	*out = o;
	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		if (!literal && s[i] == '%' && (i + 1 == len || s[++i] != '%'))
			return -EINVAL;
		*o++ = s[i];
	}
	*o = '\0';
	return 0;
}

/*
 * Find the shard number in @text and fill the numbering of @p from it.
 * Returns its length and sets *at to its offset and *literal for a brace
 * range; 0 when there is none, -EINVAL when it is malformed.
 */
static int pattern_find(const char *text, struct pack_pattern *p, size_t *at,
			bool *literal)
{
	int n;

	for (const char *s = strchr(text, '{'); s; s = strchr(s + 1, '{')) {
		n = parse_range(s, p);
		if (n) {
			*at = (size_t)(s - text);
			*literal = true;
			return n;
		}
	}
	for (size_t i = 0; text[i]; i++) {
		if (text[i] != '%')
			continue;
		if (text[i + 1] == '%') {
			i++;
			continue;
		}
		*at = i;
		*literal = false;
		return parse_printf(text + i, p);
	}
	return 0;
}

/* Split head and tail, and take the directory from the head. */
static int pattern_split(struct pack_pattern *p, const char *text, size_t at,
			 size_t len, bool literal)
{
	const char *tail = text + at + len, *slash;
	int rc;


	rc = copy_part(text, at, literal, &p->head);
	if (!rc)
		rc = copy_part(tail, strlen(tail), literal, &p->tail);
	if (rc == -EINVAL)
		pack_error("OUT_PATTERN \"%s\": more than one shard number, "
			   "or a '%%' that is not %%d, %%0Nd or %%%%", text);
	if (rc)
		return rc;
	if (strchr(p->tail, '/')) {
		pack_error("OUT_PATTERN \"%s\": the shard number must be in "
			   "the file name, not in a directory", text);
		return -EINVAL;
	}
	slash = strrchr(p->head, '/');
	if (!slash)
		p->dir = strdup(".");
	else if (slash == p->head)
		p->dir = strdup("/");
	else
		p->dir = strndup(p->head, (size_t)(slash - p->head));
	return p->dir ? 0 : -ENOMEM;
}

int pack_pattern_parse(struct pack_pattern *p, const char *text)
{
	bool literal = false;
	size_t at = 0;
	int n, rc;

	memset(p, 0, sizeof(*p));
	p->last = UINT64_MAX;
	n = pattern_find(text, p, &at, &literal);
	if (n < 0)
		pack_error("OUT_PATTERN \"%s\": malformed shard number (%%d, "
			   "%%0Nd with N <= 20, or {A..B} with A <= B)", text);
	if (!n)
		pack_error("OUT_PATTERN \"%s\": no shard number (%%d, %%0Nd "
			   "or {A..B})", text);
	if (n <= 0)
		return -EINVAL;
	rc = pattern_split(p, text, at, (size_t)n, literal);
	if (rc)
		pack_pattern_release(p);
	return rc;
}

void pack_pattern_release(struct pack_pattern *p)
{
	free(p->head);
	free(p->tail);
	free(p->dir);
	memset(p, 0, sizeof(*p));
}

int pack_pattern_format(const struct pack_pattern *p, uint64_t index,
			char *buf, size_t size)
{
	int n;

	if (index > p->last - p->first)
		return -ERANGE;
	n = snprintf(buf, size, "%s%0*" PRIu64 "%s", p->head, (int)p->width,
		     p->first + index, p->tail);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}
