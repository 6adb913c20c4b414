/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sigv4.c - the SigV4 signer against AWS's test suite.
 *
 * Every case directory in tests/data/sigv4 (see its README for the cases
 * left out and why) holds a raw request, its context (credentials,
 * region, service, time) and the expected canonical request, string to
 * sign and signature; all three must match byte for byte.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "shardfs/sigv4.h"

#define CASE_FILE_MAX 65536

static char *slurp(const char *dir, const char *name)
{
	char path[1024];
	char *buf = malloc(CASE_FILE_MAX);
	FILE *f;
	size_t n;

	assert_true(snprintf(path, sizeof(path), "%s/%s", dir, name) <
		    (int)sizeof(path));
	f = fopen(path, "rb");
	assert_non_null(f);
	n = fread(buf, 1, CASE_FILE_MAX - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

/* The string value of "@key": "..." in @json (no escapes in the suite). */
static char *json_str(const char *json, const char *key)
{
	char pat[128];
	const char *p, *end;

	snprintf(pat, sizeof(pat), "\"%s\": \"", key);
	p = strstr(json, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	end = strchr(p, '"');
	return strndup(p, end - p);
}

static bool json_true(const char *json, const char *key)
{
	char pat[128];

	snprintf(pat, sizeof(pat), "\"%s\": true", key);
	return strstr(json, pat) != NULL;
}

/* A parsed request.txt: method, path, query, headers, body. */
struct raw_request {
	char *method, *path, *query;
	struct sigv4_header headers[SIGV4_MAX_HEADERS];
	unsigned nr;
	const char *body;
	char *joined[SIGV4_MAX_HEADERS];	/* continued values, malloc'ed */
};

/* Parse @text in place; continuation lines are joined with a space. */
static void parse_request(char *text, struct raw_request *r)
{
	char *line = text, *next, *sp, *q;

	memset(r, 0, sizeof(*r));
	next = strchr(line, '\n');
	*next++ = '\0';
	r->method = line;
	sp = strchr(line, ' ');
	*sp++ = '\0';
	r->path = sp;
	*strrchr(sp, ' ') = '\0';
	q = strchr(r->path, '?');
	if (q) {
		*q = '\0';
		r->query = q + 1;
	}
	r->body = "";
	for (line = next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (!*line)
			break;	/* the blank line before the body */
		if (line[0] == ' ' && r->nr) {
			char *joined;

			assert_true(asprintf(&joined, "%s %s",
					     r->headers[r->nr - 1].value, line) > 0);
			free(r->joined[r->nr - 1]);
			r->headers[r->nr - 1].value = r->joined[r->nr - 1] = joined;
			continue;
		}
		assert_true(r->nr < SIGV4_MAX_HEADERS);
		r->headers[r->nr].name = line;
		q = strchr(line, ':');
		*q = '\0';
		r->headers[r->nr++].value = q + 1;
	}
	if (line && next)
		r->body = next;
}

static time_t parse_time(const char *iso)
{
	struct tm tm = { 0 };

	assert_non_null(strptime(iso, "%Y-%m-%dT%H:%M:%SZ", &tm));
	return timegm(&tm);
}

static void run_case(const char *dir)
{
	char *ctx = slurp(dir, "context.json"), *text = slurp(dir, "request.txt");
	char *creq = slurp(dir, "header-canonical-request.txt");
	char *sts = slurp(dir, "header-string-to-sign.txt");
	char *sig = slurp(dir, "header-signature.txt");
	char *ts = json_str(ctx, "timestamp");
	struct sigv4_key key = {
		.access_key_id = json_str(ctx, "access_key_id"),
		.secret_access_key = json_str(ctx, "secret_access_key"),
		.session_token = json_true(ctx, "omit_session_token") ? NULL :
				 json_str(ctx, "token"),
	};
	struct sigv4_scope scope = { json_str(ctx, "region"),
				     json_str(ctx, "service"), parse_time(ts) };
	struct sigv4_signature *out = malloc(sizeof(*out));
	struct raw_request r;
	char body_hash[SIGV4_HEX_LEN];

	parse_request(text, &r);
	sigv4_sha256_hex(r.body, strlen(r.body), body_hash);
	struct sigv4_request req = {
		.method = r.method, .path = r.path, .query = r.query,
		.headers = r.headers, .nr_headers = r.nr,
		.payload_sha256 = body_hash,
		.content_sha256_header = json_true(ctx, "sign_body"),
	};
	assert_int_equal(sigv4_sign(&req, &key, &scope, out), 0);
	if (strcmp(out->canonical_request, creq))
		fail_msg("%s: canonical request\n%s\nexpected\n%s", dir,
			 out->canonical_request, creq);
	assert_string_equal(out->string_to_sign, sts);
	sig[strcspn(sig, "\n")] = '\0';
	assert_string_equal(out->signature, sig);
	assert_non_null(strstr(out->authorization, sig));
	free(out);
	for (unsigned i = 0; i < r.nr; i++)
		free(r.joined[i]);
	free((char *)key.access_key_id), free((char *)key.secret_access_key);
	free((char *)key.session_token);
	free((char *)scope.region), free((char *)scope.service);
	free(ctx), free(text), free(creq), free(sts), free(sig), free(ts);
}

static void test_suite(void **state)
{
	DIR *d = opendir(SIGV4_DATA_DIR);
	struct dirent *de;
	int cases = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char dir[1024];

		if (de->d_name[0] == '.' || de->d_type != DT_DIR)
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", SIGV4_DATA_DIR, de->d_name);
		run_case(dir);
		cases++;
	}
	closedir(d);
	assert_true(cases >= 30);
}

/* Paths keep '/', query parts do not; a short buffer is an error. */
static void test_uri_encode(void **state)
{
	char out[64];

	assert_int_equal(sigv4_uri_encode("a b/c~+", 7, true, out, sizeof(out)), 11);
	assert_string_equal(out, "a%20b/c~%2B");
	assert_int_equal(sigv4_uri_encode("a/b", 3, false, out, sizeof(out)), 5);
	assert_string_equal(out, "a%2Fb");
	assert_int_equal(sigv4_uri_encode("abcdef", 6, true, out, 4), -ENAMETOOLONG);
}

static void test_too_many_headers(void **state)
{
	struct sigv4_header h[SIGV4_MAX_HEADERS + 1];
	struct sigv4_key key = { "AKID", "secret", NULL };
	struct sigv4_scope scope = { "us-east-1", "s3", 0 };
	struct sigv4_signature *out = malloc(sizeof(*out));

	for (int i = 0; i <= SIGV4_MAX_HEADERS; i++)
		h[i] = (struct sigv4_header){ "x-h", "v" };
	struct sigv4_request req = { "GET", "/", NULL, h, SIGV4_MAX_HEADERS + 1,
				     SIGV4_EMPTY_SHA256, true };
	assert_int_equal(sigv4_sign(&req, &key, &scope, out), -EINVAL);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_suite),
		cmocka_unit_test(test_uri_encode),
		cmocka_unit_test(test_too_many_headers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
