/*
 * test_layout.c - labels of the classes layout (layout.c): nested JSON
 * fields, numbers without their leading zeros, class names that lack a
 * label, and label sources that are refused.
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
		cmocka_unit_test(test_nested_json_fields),
		cmocka_unit_test(test_bad_label_sources_are_refused),
		cmocka_unit_test(test_numbers_lose_leading_zeros),
		TB_ENV_TEST(test_labels_the_class_names_lack),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
