/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_layout.c - labels of the classes layout (layout.c): the JSON
 * reader over untrusted bytes (a table of inputs and the label each must
 * give, or none), nested fields, numbers without their leading zeros,
 * class names that lack a label, label sources and layouts that are
 * refused, which members carry labels, and the hash that keys index files.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tarbuild.h"
#include "shardfs/layout.h"

/* The label @l makes of @data, or NULL when it has none. */
static const char *label_of(const struct layout *l, const char *data, bool *unmapped)
{
	static char out[256];
	bool dummy;

	return layout_label(l, data, strlen(data), out, sizeof(out),
			    unmapped ? unmapped : &dummy) < 0 ? NULL : out;
}

/*
 * The JSON label reader, input by input: what field "label" of each
 * document gives (NULL: no usable label; the sample goes unlabeled).
 */
static void test_json_label_table(void **state)
{
	static const struct {
		const char *json;	/* the .json member's content */
		const char *label;	/* expected label, NULL for none */
	} cases[] = {
		{ "{\"label\": \"cat\"}", "cat" },
		{ "{\"label\":\"cat\"}", "cat" },			/* no spaces */
		{ " \n\t{ \"label\" :\n \"cat\" } ", "cat" },	/* any spaces */
		{ "{\"label\": \"  cat \"}", "cat" },		/* trimmed */
		{ "{\"label\": 7}", "7" },				/* a number */
		{ "{\"label\": 007}", "7" },				/* canonical */
		{ "{\"label\": -1.5e3}", "-1.5e3" },
		{ "{\"label\": \"007\"}", "7" },			/* digits in a string */
		{ "{\"a\": 1, \"label\": \"b\"}", "b" },		/* later field */
		{ "{\"a\": {\"label\": \"x\"}, \"label\": \"y\"}", "y" }, /* nested skipped */
		{ "{\"a\": [1, \"]\", {\"b\": \"}\"}], \"label\": \"z\"}", "z" },
		{ "{\"a\": \"\\\"label\\\": 1\", \"label\": 2}", "2" }, /* escaped quote */
		{ "{\"label\": \"caf\\u00e9\"}", "caf\xc3\xa9" },	/* \\u escape */
		{ "{\"label\": \"\\ud83d\\ude00\"}", "\xf0\x9f\x98\x80" }, /* pair */
		{ "{\"label\": \"a\\tb\"}", "a\tb" },		/* \\t kept inside */
		{ "{\"lab\\u0065l\": \"k\"}", "k" },		/* escaped key */
		{ "{\"label\": \"\\ud83d\"}", NULL },		/* lone surrogate */
		{ "{\"label\": \"\\ude00\"}", NULL },		/* low half first */
		{ "{\"label\": \"\\u12\"}", NULL },			/* short escape */
		{ "{\"label\": \"\\q\"}", NULL },			/* unknown escape */
		{ "{\"label\": \"\\u0000\"}", NULL },		/* NUL */
		{ "{\"label\": \"cat", NULL },			/* unterminated */
		{ "{\"label\": true}", NULL },			/* literals */
		{ "{\"label\": null}", NULL },
		{ "{\"label\": [1]}", NULL },				/* not a scalar */
		{ "{\"label\": {}}", NULL },
		{ "{\"label\": \"\"}", NULL },			/* empty */
		{ "{\"label\": \"   \"}", NULL },
		{ "{\"label\": \"a/b\"}", NULL },			/* two components */
		{ "{\"label\": \"..\"}", NULL },
		{ "{\"label\": \".\"}", NULL },
		{ "{\"label\": \".shardfs\"}", NULL },		/* reserved */
		{ "{\"labels\": \"cat\"}", NULL },			/* other field */
		{ "{\"Label\": \"cat\"}", NULL },			/* case matters */
		{ "{}", NULL },
		{ "", NULL },
		{ "[\"label\", \"cat\"]", NULL },			/* not an object */
		{ "\"label\"", NULL },
		{ "{\"label\" \"cat\"}", NULL },			/* no colon */
		{ "{\"a\": 1 \"label\": 2}", NULL },			/* no comma */
		{ "{\"a\": [[[[", NULL },				/* truncated */
		{ "{\"a\": }, \"label\": 1}", NULL },		/* no value: ends */
	};
	struct layout l;

	assert_int_equal(layout_init(&l, "classes", "json:label", NULL, NULL), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *got = label_of(&l, cases[i].json, NULL);

		if (cases[i].label ? !got || strcmp(got, cases[i].label) : !!got)
			fail_msg("case %zu: %s: got %s%s%s, expected %s", i,
				 cases[i].json, got ? "'" : "", got ? got : "none",
				 got ? "'" : "", cases[i].label ? cases[i].label : "none");
	}
	layout_release(&l);
}

/* Nesting deeper than LAYOUT_JSON_DEPTH_MAX is refused, not recursed. */
static void test_json_depth_is_bounded(void **state)
{
	char doc[512];
	size_t n = 0;
	struct layout l;

	n += (size_t)snprintf(doc, sizeof(doc), "{\"a\": ");
	for (int i = 0; i < 100; i++)
		doc[n++] = '[';
	for (int i = 0; i < 100; i++)
		doc[n++] = ']';
	snprintf(doc + n, sizeof(doc) - n, ", \"label\": 1}");
	assert_int_equal(layout_init(&l, "classes", "json:label", NULL, NULL), 0);
	assert_null(label_of(&l, doc, NULL));
	layout_release(&l);
}

/* .cls or .json members, by the sample key rule (path.h). */
static void test_label_members(void **state)
{
	static const struct {
		const char *path;
		bool cls;	/* a label member under label=cls */
		bool json;	/* under label=json:FIELD */
	} cases[] = {
		{ "0001.cls", true, false },
		{ "a/0001.cls", true, false },
		{ "0001.json", false, true },
		{ "0001.x.cls", false, false },		/* extension is .x.cls */
		{ ".x.cls", true, false },		/* hidden sample .x */
		{ ".cls", false, false },		/* a name, no extension */
		{ "a.d/b.cls", true, false },
		{ "0001.CLS", false, false },
		{ "0001.cls.bak", false, false },
		{ "cls", false, false },
	};
	struct layout cls, json;

	assert_int_equal(layout_init(&cls, "classes", NULL, NULL, NULL), 0);
	assert_int_equal(layout_init(&json, "classes", "json:y", NULL, NULL), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].path);

		if (layout_is_label_member(&cls, cases[i].path, len) != cases[i].cls ||
		    layout_is_label_member(&json, cases[i].path, len) != cases[i].json)
			fail_msg("label member: %s", cases[i].path);
	}
	layout_release(&cls);
	layout_release(&json);
}

/* Options that change the tree change the hash index files are keyed by. */
static void test_layout_hash(void **state)
{
	struct layout a, b;

	assert_int_equal(layout_hash(NULL), 0);
	assert_int_equal(layout_hash(layout_or_tree(NULL)), 0);
	assert_int_equal(layout_or_tree(NULL)->kind, LAYOUT_TREE);
	assert_int_equal(layout_init(&a, "shards", NULL, NULL, NULL), 0);
	assert_int_equal(layout_init(&b, "classes", NULL, NULL, NULL), 0);
	assert_true(layout_or_tree(&a) == &a);
	assert_int_not_equal(layout_hash(&a), 0);
	assert_int_not_equal(layout_hash(&a), layout_hash(&b));
	layout_release(&b);
	assert_int_equal(layout_init(&b, "classes", "json:y", NULL, NULL), 0);
	assert_int_not_equal(layout_hash(&a), layout_hash(&b));
	layout_release(&b);
	assert_int_equal(layout_init(&b, "classes", NULL, NULL, "skip"), 0);
	assert_int_not_equal(layout_hash(&a), layout_hash(&b));
	layout_release(&a);
	layout_release(&b);
}

/* Layout names and options that need another layout are refused. */
static void test_bad_layouts_are_refused(void **state)
{
	struct layout l;

	assert_int_equal(layout_init(&l, "Tree", NULL, NULL, NULL), -EINVAL);
	layout_release(&l);
	assert_int_equal(layout_init(&l, "", NULL, NULL, NULL), -EINVAL);
	layout_release(&l);
	assert_int_equal(layout_init(&l, "tree", "cls", NULL, NULL), -EINVAL);
	layout_release(&l);
	assert_int_equal(layout_init(&l, "shards", NULL, NULL, "x"), -EINVAL);
	layout_release(&l);
	assert_int_equal(layout_init(&l, "classes", NULL, NULL, "a/b"), -EINVAL);
	layout_release(&l);
	assert_int_equal(layout_init(&l, "classes", NULL, "/no/such/file", NULL),
			 -EINVAL);
	layout_release(&l);
	assert_int_equal(layout_init(&l, NULL, NULL, NULL, NULL), 0);
	assert_int_equal(l.kind, LAYOUT_TREE);
	layout_release(&l);
}

static void test_nested_json_fields(void **state)
{
	struct layout l;

	assert_int_equal(layout_init(&l, "classes", "json:meta.label", NULL, NULL), 0);
	assert_string_equal(label_of(&l, "{\"label\": 1, \"meta\": {\"x\": [1, {\"label\": 2}],"
				     " \"label\": 3}}", NULL), "3");
	assert_null(label_of(&l, "{\"meta\": 3}", NULL));
	assert_null(label_of(&l, "{\"label\": 3}", NULL));
	assert_null(label_of(&l, "{\"meta\": {\"label\": {\"a\": 1}}}", NULL));
	layout_release(&l);

	assert_int_equal(layout_init(&l, "classes", "json:a.b.c", NULL, NULL), 0);
	assert_string_equal(label_of(&l, "{\"a\": {\"b\": {\"c\": \"cat\"}}}", NULL), "cat");
	layout_release(&l);
}

static void test_bad_label_sources_are_refused(void **state)
{
	static const char *const bad[] = { "json:", "json:.a", "json:a..b", "json:a.",
					   "jsn:a" };
	struct layout l;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(layout_init(&l, "classes", bad[i], NULL, NULL), -EINVAL);
		layout_release(&l);
	}
}

static void test_numbers_lose_leading_zeros(void **state)
{
	struct layout l;

	assert_int_equal(layout_init(&l, "classes", NULL, NULL, NULL), 0);
	assert_string_equal(label_of(&l, " 007\n", NULL), "7");
	assert_string_equal(label_of(&l, "0", NULL), "0");
	assert_string_equal(label_of(&l, "000", NULL), "0");
	assert_string_equal(label_of(&l, "0x10", NULL), "0x10");
	assert_string_equal(label_of(&l, "-1", NULL), "-1");
	assert_true(layout_is_number("0123", 4));
	assert_false(layout_is_number("", 0));
	assert_false(layout_is_number("1a", 2));
	layout_release(&l);
}

static void test_labels_the_class_names_lack(void **state)
{
	struct tb_env *e = *state;
	char path[4096];
	bool unmapped;
	struct layout l;
	FILE *f;

	snprintf(path, sizeof(path), "%s/names.txt", e->dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("0 tench\n1 goldfish\n", f);
	fclose(f);
	assert_int_equal(layout_init(&l, "classes", NULL, path, NULL), 0);
	assert_string_equal(label_of(&l, "1\n", &unmapped), "goldfish");
	assert_false(unmapped);
	assert_string_equal(label_of(&l, "7\n", &unmapped), "7");
	assert_true(unmapped);
	layout_release(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_label_table),
		cmocka_unit_test(test_json_depth_is_bounded),
		cmocka_unit_test(test_label_members),
		cmocka_unit_test(test_layout_hash),
		cmocka_unit_test(test_bad_layouts_are_refused),
		cmocka_unit_test(test_nested_json_fields),
		cmocka_unit_test(test_bad_label_sources_are_refused),
		cmocka_unit_test(test_numbers_lose_leading_zeros),
		TB_ENV_TEST(test_labels_the_class_names_lack),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
