/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_remote_config.c - where remote settings come from, and where an S3
 * object is, without a server.
 *
 * remote_init() resolves options, the environment and the AWS shared files
 * in a fixed order (remote_s3.c); these tests set each source up in a
 * private HOME and check what wins: -o credentials= over everything, the
 * environment's keys unless -o aws_profile= names a profile, the profile's
 * region after AWS_REGION, path-style addressing with an endpoint and
 * virtual-hosted without one.  Then the URLs and signed paths an s3://
 * name turns into, with keys that need encoding.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "remote_s3.h"
#include "shardfs/remote.h"
#include "shardfs/source.h"

static char home[256];

static void write_file(const char *rel, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", home, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Each test's remote is in its cmocka state: made by init(), freed by
 * the next init() or by teardown. */
static void release(void **state)
{
	remote_release(*state);
	*state = NULL;
}

/* Make the test's remote from @ro: remote_init()'s result. */
static int init(void **state, const struct remote_options *ro)
{
	struct remote *remote;
	int rc;

	release(state);
	rc = remote_init(&remote, ro);
	*state = remote;
	return rc;
}

/* The resolved settings of the test's remote. */
static struct remote_config *cfg(void **state)
{
	return &((struct remote *)*state)->cfg;
}

/* Its S3 keys and listings. */
static struct remote_s3 *s3(void **state)
{
	return ((struct remote *)*state)->s3;
}

/* The current credentials (a copy, as a request takes them). */
static struct remote_keys *keys(void **state)
{
	static struct remote_keys k;

	remote_s3_keys(s3(state), &k);
	return &k;
}

static int setup(void **state)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
		"AWS_ENDPOINT_URL_S3", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
	};
	char aws[300];

	*state = NULL;		/* no remote until a test makes one */
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	snprintf(home, sizeof(home), "/tmp/shardfs-test-remote-XXXXXX");
	assert_non_null(mkdtemp(home));
	snprintf(aws, sizeof(aws), "%s/.aws", home);
	assert_int_equal(mkdir(aws, 0700), 0);
	setenv("HOME", home, 1);
	write_file(".aws/credentials",
		   "[default]\naws_access_key_id = DEFAULTKEY\n"
		   "aws_secret_access_key = defaultsecret\n\n"
		   "[train]\naws_access_key_id=TRAINKEY\naws_secret_access_key=trainsecret\n"
		   "aws_session_token = traintoken\n");
	write_file(".aws/config", "[default]\nregion = eu-west-1\n\n"
		   "[profile train]\nregion = ap-south-1\n");
	return 0;
}

static int teardown(void **state)
{
	char cmd[300];

	release(state);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", home);
	return system(cmd);
}

static void test_shared_files_default_profile(void **state)
{
	struct remote_options ro = { 0 };

	assert_int_equal(init(state, &ro), 0);
	assert_string_equal(keys(state)->key_id, "DEFAULTKEY");
	assert_string_equal(keys(state)->secret, "defaultsecret");
	assert_string_equal(keys(state)->token, "");
	assert_string_equal(cfg(state)->region, "eu-west-1");
	assert_string_equal(cfg(state)->endpoint, "https://s3.eu-west-1.amazonaws.com");
	assert_true(cfg(state)->virtual_hosted);
	assert_int_equal(cfg(state)->chunk_size, REMOTE_CHUNK_DEFAULT);
	assert_int_equal(cfg(state)->timeout, REMOTE_TIMEOUT_DEFAULT);
}

static void test_environment_then_profile_option(void **state)
{
	struct remote_options ro = { 0 };

	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_REGION", "us-west-2", 1);
	assert_int_equal(init(state, &ro), 0);
	assert_string_equal(keys(state)->key_id, "ENVKEY");
	assert_string_equal(cfg(state)->region, "us-west-2");
	/* keys from the environment cannot change: nothing to re-read */
	assert_false(remote_s3_keys_refresh(s3(state), keys(state)->gen));
	release(state);
	/* a profile named on the command line wins over the environment's keys */
	ro.profile = "train";
	unsetenv("AWS_REGION");
	assert_int_equal(init(state, &ro), 0);
	assert_string_equal(keys(state)->key_id, "TRAINKEY");
	assert_string_equal(keys(state)->token, "traintoken");
	assert_string_equal(cfg(state)->region, "ap-south-1");
}

static void test_credentials_file_option_wins(void **state)
{
	char path[300];
	struct remote_options ro = { .credentials = path, .region = "us-east-2",
				     .endpoint = "http://127.0.0.1:9000/" };

	snprintf(path, sizeof(path), "%s/creds.ini", home);
	write_file("creds.ini", "[default]\naws_access_key_id=FILEKEY\n"
		   "aws_secret_access_key=filesecret\n");
	chmod(path, 0600);
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	assert_int_equal(init(state, &ro), 0);
	assert_string_equal(keys(state)->key_id, "FILEKEY");
	assert_string_equal(cfg(state)->region, "us-east-2");
	assert_string_equal(cfg(state)->endpoint, "http://127.0.0.1:9000");
	assert_false(cfg(state)->virtual_hosted);	/* an endpoint: path style */
	release(state);
	/* a file without the keys is an error, not anonymous access */
	write_file("creds.ini", "[other]\naws_access_key_id=X\n");
	assert_int_equal(init(state, &ro), -EINVAL);
}

/* A credentials file rewritten under the mount (a credential agent) is
 * re-read: when it changed (after S3_KEYS_CHECK_MS), or at once after a
 * refusal; a half-written one keeps the keys in use. */
static void test_credentials_file_rewritten(void **state)
{
	char path[300];
	struct remote_options ro = { .credentials = path, .region = "us-east-2",
				     .endpoint = "http://127.0.0.1:9000/" };
	unsigned gen;

	snprintf(path, sizeof(path), "%s/creds.ini", home);
	write_file("creds.ini", "[default]\naws_access_key_id=OLDKEY\n"
		   "aws_secret_access_key=oldsecret\n");
	chmod(path, 0600);
	assert_int_equal(init(state, &ro), 0);
	gen = keys(state)->gen;
	/* unchanged: a refusal re-reads it and finds nothing newer */
	assert_false(remote_s3_keys_refresh(s3(state), gen));
	/* half written: no complete pair, the old keys stay */
	write_file("creds.ini", "[default]\naws_access_key_id=NEWKEY\n");
	assert_false(remote_s3_keys_refresh(s3(state), gen));
	assert_string_equal(keys(state)->key_id, "OLDKEY");
	write_file("creds.ini", "[default]\naws_access_key_id=NEWKEY\n"
		   "aws_secret_access_key=newsecret\naws_session_token=newtoken\n");
	assert_true(remote_s3_keys_refresh(s3(state), gen));
	assert_string_equal(keys(state)->key_id, "NEWKEY");
	assert_string_equal(keys(state)->secret, "newsecret");
	assert_string_equal(keys(state)->token, "newtoken");
	assert_true(keys(state)->gen != gen);
	/* a request signed with the old keys that comes back refused later:
	 * the newer set is already there, worth a retry */
	assert_true(remote_s3_keys_refresh(s3(state), gen));
	/* a change is noticed by requests, once the check interval passed */
	gen = keys(state)->gen;
	write_file("creds.ini", "[default]\naws_access_key_id=THIRDKEY\n"
		   "aws_secret_access_key=thirdsecret\n");
	usleep(1100 * 1000);
	assert_string_equal(keys(state)->key_id, "THIRDKEY");
	assert_string_equal(keys(state)->token, "");
	assert_true(keys(state)->gen != gen);
}

/* Without -o chunk_size the cache holds at least 32 chunks. */
static void test_chunk_size_follows_cache_mem(void **state)
{
	static const struct {
		const char *cache_mem;	/* -o cache_mem, NULL: not given */
		const char *chunk_size;	/* -o chunk_size, NULL: not given */
		uint64_t want;		/* the chunk size in use */
	} cases[] = {
		{ NULL, NULL, REMOTE_CHUNK_DEFAULT },	/* 256M / 32 */
		{ "1G", NULL, REMOTE_CHUNK_DEFAULT },
		{ "128M", NULL, 4u << 20 },
		{ "64M", NULL, 2u << 20 },
		{ "32M", NULL, 1u << 20 },
		{ "33M", NULL, 16u << 16 },		/* 16.5 x 64 KiB, down */
		{ "1000000", NULL, REMOTE_CHUNK_MIN },	/* 31,250 rounded up */
		{ "0", NULL, REMOTE_CHUNK_MIN },
		{ "32M", "8M", 8u << 20 },		/* said: kept */
		{ NULL, "128M", 128u << 20 },		/* kept, with a warning */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct remote_options ro = { 0 };

		ro.cache_mem = cases[i].cache_mem ? strdup(cases[i].cache_mem) : NULL;
		ro.chunk_size = cases[i].chunk_size ? strdup(cases[i].chunk_size) : NULL;
		assert_int_equal(init(state, &ro), 0);
		if (cfg(state)->chunk_size != cases[i].want)
			fail_msg("cache_mem=%s chunk_size=%s: %llu bytes, not %llu",
				 cases[i].cache_mem, cases[i].chunk_size,
				 (unsigned long long)cfg(state)->chunk_size,
				 (unsigned long long)cases[i].want);
		release(state);
		free(ro.cache_mem);
		free(ro.chunk_size);
	}
}

static void test_bad_options(void **state)
{
	struct remote_options ro = { .addressing = "sideways" };

	assert_int_equal(init(state, &ro), -EINVAL);
	ro = (struct remote_options){ .chunk_size = "1K" };	/* < 64 KiB */
	assert_int_equal(init(state, &ro), -EINVAL);
	ro = (struct remote_options){ .timeout = "0" };
	assert_int_equal(init(state, &ro), -EINVAL);
	ro = (struct remote_options){ .endpoint = "ftp://host" };
	assert_int_equal(init(state, &ro), -EINVAL);
}

/* The URL, Host and signed path of s3://@bucket/@key. */
static void locate(void **state, const char *bucket, const char *key,
		   struct remote_object *o)
{
	char msg[256];

	memset(o, 0, sizeof(*o));
	o->remote = *state;
	o->name = "s3://test";
	assert_int_equal(remote_s3_object(o, bucket, key, msg, sizeof(msg)), 0);
}

static void test_addressing(void **state)
{
	struct remote_options ro = { .endpoint = "https://minio.example:9000",
				     .region = "us-east-1" };
	struct remote_object o;

	assert_int_equal(init(state, &ro), 0);
	locate(state, "data", "train/shard 0+1.tar", &o);
	assert_string_equal(o.url, "https://minio.example:9000/data/train/shard%200%2B1.tar");
	assert_string_equal(o.host, "minio.example:9000");
	assert_string_equal(o.sign_path, "/data/train/shard 0+1.tar");
	free(o.sign_path);
	release(state);
	ro.addressing = "virtual";
	assert_int_equal(init(state, &ro), 0);
	locate(state, "data", "a/./b//c.tar", &o);	/* S3 keys are not normalised */
	assert_string_equal(o.url, "https://data.minio.example:9000/a/./b//c.tar");
	assert_string_equal(o.host, "data.minio.example:9000");
	assert_string_equal(o.sign_path, "/a/./b//c.tar");
	free(o.sign_path);
	release(state);
	ro.no_sign_request = 1;
	assert_int_equal(init(state, &ro), 0);
	locate(state, "data", "k.tar", &o);
	assert_null(o.sign_path);		/* anonymous: not signed */
}

static void test_names(void **state)
{
	char *bucket, *key, msg[256];

	assert_true(shard_source_is_remote("s3://b/k"));
	assert_true(shard_source_is_remote("https://h/p"));
	assert_true(shard_source_is_remote("http://h/p"));
	assert_false(shard_source_is_remote("/data/s3://x"));
	assert_false(shard_source_is_remote("ftp://h/p"));
	assert_int_equal(remote_s3_split("s3://bucket/pre/fix/", &bucket, &key, msg,
					 sizeof(msg)), 0);
	assert_string_equal(bucket, "bucket");
	assert_string_equal(key, "pre/fix/");
	free(bucket);
	free(key);
	assert_int_equal(remote_s3_split("s3://bucket", &bucket, &key, msg, sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "s3://BUCKET/KEY"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shared_files_default_profile, setup, teardown),
		cmocka_unit_test_setup_teardown(test_environment_then_profile_option, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credentials_file_option_wins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credentials_file_rewritten, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunk_size_follows_cache_mem, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_addressing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
