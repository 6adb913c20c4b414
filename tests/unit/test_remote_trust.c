/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_remote_trust.c - the rules behind issue 32, without a server: which
 * names in cache_dir are chunks (nothing else is ever deleted), which
 * validator pins a remote object, which directories are trusted, and that
 * loaded credentials leave the environment and make the process
 * undumpable.
 */
#include <errno.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "disk_cache.h"
#include "remote_http.h"
#include "shardfs/remote.h"
#include "shardfs/util.h"
#include "tarbuild.h"

static void test_chunk_names(void **state)
{
	static const struct {
		const char *name;
		bool chunk;
	} cases[] = {
		{ "0123456789abcdef0123456789abcdef.chunk", true },
		{ "ffffffffffffffffffffffffffffffff.chunk", true },
		/* what strstr(".chunk") took for a chunk */
		{ "db.chunk.1", false },
		{ "0123456789abcdef0123456789abcdef.chunk.bak", false },
		{ "x0123456789abcdef0123456789abcdef.chunk", false },
		{ "0123456789abcdef0123456789abcde.chunk", false },	/* 31 digits */
		{ "0123456789ABCDEF0123456789abcdef.chunk", false },
		{ "0123456789abcdef0123456789abcdeg.chunk", false },
		{ ".chunk", false }, { "", false }, { "key", false }, { "..", false },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		if (disk_cache_chunk_name(cases[i].name) != cases[i].chunk)
			fail_msg("%s: %s a chunk name", cases[i].name,
				 cases[i].chunk ? "is" : "is not");
}

static void test_validator_choice(void **state)
{
	struct remote_object o = { 0 };

	(void)state;
	assert_int_equal(remote_validator(&o), REMOTE_VALIDATOR_NONE);
	o.mtime = 1700000000;
	assert_int_equal(remote_validator(&o), REMOTE_VALIDATOR_DATE);
	strcpy(o.etag, "\"abc\"");
	assert_int_equal(remote_validator(&o), REMOTE_VALIDATOR_ETAG);
	o.mtime = 0;
	assert_int_equal(remote_validator(&o), REMOTE_VALIDATOR_ETAG);
}

static void test_trusted_directories(void **state)
{
	char *top = tb_tmpdir(), dir[512], below[600], msg[512];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/mid", top);
	snprintf(below, sizeof(below), "%s/cache", dir);
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(mkdir(below, 0700), 0);
	assert_int_equal(dir_trusted(below, msg, sizeof(msg)), 0);
	/* the directory itself: writable by others, or owned by another */
	assert_int_equal(chmod(below, 0770), 0);
	assert_int_equal(dir_trusted(below, msg, sizeof(msg)), -EPERM);
	assert_non_null(strstr(msg, "writable by its group"));
	assert_int_equal(chmod(below, 0700), 0);
	if (geteuid() == 0) {
		assert_int_equal(chown(below, 65534, 65534), 0);
		assert_int_equal(dir_trusted(below, msg, sizeof(msg)), -EPERM);
		assert_non_null(strstr(msg, "owned by uid 65534"));
		assert_int_equal(chown(below, 0, 0), 0);
	}
	/* a parent others may write: refused, unless it is sticky (/tmp) */
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_equal(dir_trusted(below, msg, sizeof(msg)), -EPERM);
	assert_non_null(strstr(msg, dir));
	assert_int_equal(chmod(dir, 01777), 0);
	assert_int_equal(dir_trusted(below, msg, sizeof(msg)), 0);
	/* ... but never the directory itself */
	assert_int_equal(chmod(below, 01777), 0);
	assert_int_equal(dir_trusted(below, msg, sizeof(msg)), -EPERM);
	assert_int_equal(dir_trusted("/nonexistent/shardfs", msg, sizeof(msg)), -ENOENT);
	tb_rmtree(top);
}

static void test_secrets_leave_the_environment(void **state)
{
	struct remote_options ro = { .region = "us-east-1" };
	struct remote *remote;

	(void)state;
	unsetenv("AWS_PROFILE");
	setenv("AWS_ACCESS_KEY_ID", "KEYID", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "the-secret", 1);
	setenv("AWS_SESSION_TOKEN", "the-token", 1);
	assert_int_equal(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), 0);
	assert_int_equal(remote_init(&remote, &ro), 0);
	assert_null(getenv("AWS_SECRET_ACCESS_KEY"));
	assert_null(getenv("AWS_SESSION_TOKEN"));
	assert_string_equal(getenv("AWS_ACCESS_KEY_ID"), "KEYID");	/* not a secret */
	assert_int_equal(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 0);
	remote_release(remote);
	unsetenv("AWS_ACCESS_KEY_ID");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chunk_names),
		cmocka_unit_test(test_validator_choice),
		cmocka_unit_test(test_trusted_directories),
		cmocka_unit_test(test_secrets_leave_the_environment),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
