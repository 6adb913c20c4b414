/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.c - labels for the classes layout, and WebDataset keys.
 *
 * Labels come from untrusted members, so they are validated like member
 * names: a label that is not a usable single path component makes its
 * sample unlabeled rather than creating paths outside the class level.
 * The JSON reader understands exactly what is needed to find one field,
 * possibly nested in objects ("meta.label"): strings with escapes,
 * numbers, literals, and nested values to skip.  Numeric labels lose
 * their leading zeros here; the index builder pads them all to one width
 * once every label is known (layout.h).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <xxhash.h>

#include "shardfs/layout.h"
#include "shardfs/log.h"
#include "shardfs/path.h"
#include "shardfs/util.h"

/* Deepest JSON nesting skipped over while looking for the field. */
#define LAYOUT_JSON_DEPTH_MAX 64
/* Bumped when the names the classes layout makes change, so that index
 * files made under the old names are not reused (2: numbers padded,
 * sample directories kept; 3: a leading dot is part of the key). */
#define LAYOUT_NAMING_VERSION 3

struct layout_classname {
	char *label;		/* as found in the label member */
	char *name;		/* directory name to use instead */
	UT_hash_handle hh;	/* uthash linkage, keyed by label */
};

bool layout_is_label_member(const struct layout *l, const char *path,
			    size_t len)
{
	const char *ext = l->json_field ? ".json" : ".cls";
	size_t key = path_sample_key_len(path, len), elen = strlen(ext);

	return len - key == elen && !memcmp(path + key, ext, elen);
}

/* A usable directory name: one component, not "." or "..". */
static bool valid_component(const char *s, size_t len)
{
	char tmp[PATH_COMPONENT_MAX + 1];
	size_t n = len;

	if (len == 0 || len > PATH_COMPONENT_MAX || memchr(s, '/', len))
		return false;
	memcpy(tmp, s, len);
	return path_normalise(tmp, &n) == PATH_VALID && n == len;
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && isspace((unsigned char)*p))
		p++;
	return p;
}

/* Four hex digits at @s as a code unit; -1 when they are not. */
static long hex4(const char *s, const char *end)
{
	long v = 0;

	if (end - s < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int c = s[i], d = isdigit(c) ? c - '0' : isxdigit(c) ? (c | 0x20) - 'a' + 10 : -1;

		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* A \uXXXX escape (a surrogate pair takes two) at *s, as UTF-8 in @u. */
static int json_unicode(const char **s, const char *end, char u[4])
{
	long cp = hex4(*s + 1, end), lo;

	if (cp < 0 || (cp >= 0xdc00 && cp < 0xe000))
		return -EINVAL;
	*s += 4;
	if (cp >= 0xd800 && cp < 0xdc00) {
		if (end - *s < 7 || (*s)[1] != '\\' || (*s)[2] != 'u' ||
		    (lo = hex4(*s + 3, end)) < 0xdc00 || lo >= 0xe000)
			return -EINVAL;
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		*s += 6;
	}
	if (cp < 0x80)
		return u[0] = (char)cp, 1;
	if (cp < 0x800)
		return u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), 2;
	if (cp < 0x10000)
		return u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3f)),
		       u[2] = (char)(0x80 | (cp & 0x3f)), 3;
	u[0] = (char)(0xf0 | cp >> 18);
	u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	u[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* One escape after a backslash at *s (left on its last byte), into @u. */
static int json_escape(const char **s, const char *end, char u[4])
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *e;

	if (++*s == end)
		return -EINVAL;
	if (**s == 'u')
		return json_unicode(s, end, u);
	e = strchr(from, **s);
	if (!e || !**s)
		return -EINVAL;
	u[0] = to[e - from];
	return 1;
}

/* Parse a JSON string at *p (the opening quote) into @out (may be NULL). */
static int json_string(const char **p, const char *end, char *out,
		       size_t out_size, size_t *out_len)
{
	size_t n = 0;
	const char *s = *p + 1;

	for (; s < end && *s != '"'; s++) {
		char u[4] = { *s };
		int len = *s == '\\' ? json_escape(&s, end, u) : 1;

		if (len < 0 || (out && n + len >= out_size))
			return -EINVAL;
		if (out)
			memcpy(out + n, u, len);
		n += len;
	}
	if (s == end)
		return -EINVAL;
	*p = s + 1;
	if (out_len)
		*out_len = n;
	return 0;
}

/*
 * Skip one JSON value: a string, a scalar, or a nested object or array.
 * Stops at the ',' or '}' that ends it at the top level.
 */
static int json_skip(const char **p, const char *end)
{
	const char *s = *p;
	int depth = 0;

	while (s < end) {
		if (*s == '"') {
			if (json_string(&s, end, NULL, 0, NULL))
				return -EINVAL;
			continue;
		}
		if (depth == 0 && (*s == ',' || *s == '}' || *s == ']'))
			break;
		if (*s == '{' || *s == '[')
			depth++;
		else if (*s == '}' || *s == ']')
			depth--;
		if (depth > LAYOUT_JSON_DEPTH_MAX)
			return -EINVAL;
		s++;
	}
	*p = s;
	return depth || s == end ? -EINVAL : 0;
}

/* Copy a string's contents or a number into @out; true, false and null
 * are not labels. */
static int json_scalar(const char **p, const char *end, char *out,
		       size_t out_size)
{
	const char *s = *p;
	size_t n = 0;

	if (*s == '"') {
		int rc = json_string(p, end, out, out_size, &n);

		if (rc)
			return rc;
		out[n] = '\0';
		return (int)n;
	}
	while (s < end && (isdigit((unsigned char)*s) || strchr("+-.eE", *s)))
		s++;
	n = s - *p;
	if (n == 0 || n >= out_size)
		return -EINVAL;
	memcpy(out, *p, n);
	out[n] = '\0';
	*p = s;
	return (int)n;
}

/*
 * The value of field @name (@len bytes) of the JSON object at @p, or NULL
 * when @p is not an object or has no such field.
 */
static const char *json_member(const char *p, const char *end, const char *name,
			       size_t len)
{
	char key[256];
	size_t klen;

	p = skip_ws(p, end);
	if (p == end || *p++ != '{')
		return NULL;
	for (;;) {
		p = skip_ws(p, end);
		if (p == end || *p != '"' || json_string(&p, end, key, sizeof(key), &klen))
			return NULL;
		p = skip_ws(p, end);
		if (p == end || *p++ != ':')
			return NULL;
		p = skip_ws(p, end);
		if (p < end && klen == len && !memcmp(key, name, len))
			return p;
		if (json_skip(&p, end))
			return NULL;
		p = skip_ws(p, end);
		if (p == end || *p++ != ',')
			return NULL;	/* '}' or garbage: field absent */
	}
}

/* The value of @field ("a.b": field b of object a) of the JSON in [p, end). */
static int json_field(const char *p, const char *end, const char *field,
		      char *out, size_t out_size)
{
	for (;;) {
		size_t len = strcspn(field, ".");

		p = json_member(p, end, field, len);
		if (!p)
			return -EINVAL;
		if (!field[len])
			return json_scalar(&p, end, out, out_size);
		field += len + 1;
	}
}

bool layout_is_number(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return len > 0;
}

/* A number without its leading zeros ("007" -> "7"), so that "7" and "007"
 * are one class; returns the new length. */
static int number_canonical(char *s, int n)
{
	int zeros = 0;

	if (!layout_is_number(s, (size_t)n))
		return n;
	while (zeros < n - 1 && s[zeros] == '0')
		zeros++;
	memmove(s, s + zeros, (size_t)(n - zeros) + 1);
	return n - zeros;
}

int layout_label(const struct layout *l, const char *data, size_t len,
		 char *out, size_t out_size, bool *unmapped)
{
	struct layout_classname *cn;
	char *start;
	int n;

	if (l->json_field) {
		n = json_field(data, data + len, l->json_field, out, out_size);
	} else {
		n = len < out_size ? (int)len : -EINVAL;
		if (n >= 0) {
			memcpy(out, data, n);
			out[n] = '\0';
		}
	}
	if (n < 0 || memchr(out, '\0', n))
		return -EINVAL;
	for (start = out; isspace((unsigned char)*start); start++, n--)
		;
	while (n > 0 && isspace((unsigned char)start[n - 1]))
		n--;
	memmove(out, start, n);
	out[n] = '\0';
	HASH_FIND_STR(l->names, out, cn);
	*unmapped = l->names && !cn && n > 0;
	if (cn) {
		n = snprintf(out, out_size, "%s", cn->name);
		if (n < 0 || (size_t)n >= out_size)
			return -EINVAL;
	}
	n = number_canonical(out, n);
	/* the control directory's name is never a class */
	return valid_component(out, n) && strcmp(out, CONTROL_DIR_NAME) ? n : -EINVAL;
}

/* Add one "index name" line of a classnames file. */
static int classname_add(struct layout *l, char *line, const char *file,
			 unsigned lineno)
{
	char *label = line + strspn(line, " \t"), *name;
	struct layout_classname *cn;
	size_t n;

	label[strcspn(label, "\r\n")] = '\0';
	if (!*label || *label == '#')
		return 0;
	name = label + strcspn(label, " \t");
	if (*name)
		*name++ = '\0';
	name += strspn(name, " \t");
	n = strlen(name);
	while (n && isspace((unsigned char)name[n - 1]))
		name[--n] = '\0';
	if (!valid_component(name, n))
		return log_error("%s: line %u: '%s' is not a usable directory name",
				 file, lineno, name), -EINVAL;
	cn = calloc(1, sizeof(*cn));
	if (!cn || !(cn->label = strdup(label)) || !(cn->name = strdup(name))) {
		if (cn)
			free(cn->label);
		free(cn);
		return -ENOMEM;
	}
	HASH_ADD_KEYPTR(hh, l->names, cn->label, strlen(cn->label), cn);
	return 0;
}

static int classnames_load(struct layout *l, const char *file)
{
	char line[LAYOUT_CLASSNAMES_LINE_MAX];
	unsigned lineno = 0;
	int rc = 0;
	FILE *f = fopen(file, "re");

	if (!f)
		return log_error("%s: %s", file, strerror(errno)), -EINVAL;
	while (!rc && fgets(line, sizeof(line), f))
		rc = classname_add(l, line, file, ++lineno);
	fclose(f);
	return rc;
}

static int parse_kind(const char *kind, enum layout_kind *out)
{
	static const char *const names[] = { "tree", "shards", "classes" };
	int i = name_table_find(names, ARRAY_SIZE(names), kind);

	if (i >= 0) {
		*out = (enum layout_kind)i;
		return 0;
	}
	return log_error("unknown layout '%s' (tree, shards or classes)", kind), -EINVAL;
}

int layout_init(struct layout *l, const char *kind, const char *label,
		const char *classnames, const char *unlabeled)
{
	*l = (struct layout){ .kind = LAYOUT_TREE };
	if (kind && parse_kind(kind, &l->kind))
		return -EINVAL;
	if (label && strcmp(label, "cls")) {
		if (strncmp(label, "json:", 5) || !label[5] || label[5] == '.' ||
		    strstr(label, "..") || label[strlen(label) - 1] == '.')
			return log_error("bad label source '%s' (cls, json:FIELD or "
					 "json:FIELD.FIELD...)", label), -EINVAL;
		l->json_field = strdup(label + 5);
		if (!l->json_field)
			return -ENOMEM;
	}
	l->label_source = strdup(label ? label : "cls");
	if (!l->label_source)
		return -ENOMEM;
	if (l->kind != LAYOUT_CLASSES && (label || classnames || unlabeled))
		return log_error("label=, classnames= and unlabeled= only apply to "
				 "layout=classes"), -EINVAL;
	if (!unlabeled)
		unlabeled = "_unlabeled";
	if (strcmp(unlabeled, "skip")) {
		if (!valid_component(unlabeled, strlen(unlabeled)))
			return log_error("bad unlabeled directory '%s'", unlabeled), -EINVAL;
		l->unlabeled = strdup(unlabeled);
		if (!l->unlabeled)
			return -ENOMEM;
	}
	return classnames ? classnames_load(l, classnames) : 0;
}

static uint64_t hash_str(const char *s, uint64_t seed)
{
	return s ? XXH3_64bits_withSeed(s, strlen(s) + 1, seed) : seed + 1;
}

uint64_t layout_hash(const struct layout *l)
{
	const struct layout_classname *cn;
	uint64_t h;

	if (!l || l->kind == LAYOUT_TREE)
		return 0;
	h = hash_str(l->json_field,
		     (uint64_t)LAYOUT_NAMING_VERSION << 8 | l->kind);
	h = hash_str(l->unlabeled, h);
	for (cn = l->names; cn; cn = cn->hh.next)
		h = hash_str(cn->name, hash_str(cn->label, h));
	return h;
}

const struct layout *layout_or_tree(const struct layout *l)
{
	static const struct layout tree = { .kind = LAYOUT_TREE };

	return l ? l : &tree;
}

void layout_release(struct layout *l)
{
	struct layout_classname *cn, *tmp;

	HASH_ITER(hh, l->names, cn, tmp) {
		HASH_DEL(l->names, cn);
		free(cn->label);
		free(cn->name);
		free(cn);
	}
	free(l->json_field);
	free(l->label_source);
	free(l->unlabeled);
	*l = (struct layout){ 0 };
}
