/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sigv4.h - AWS Signature Version 4 for S3 requests, on libcrypto.
 *
 * shardfs signs its own requests: Debian 12's libcurl (7.88) has
 * CURLOPT_AWS_SIGV4, but it signs query strings unsorted (fixed in curl
 * 8.3), which breaks every ListObjectsV2 with a continuation token.
 *
 * The signer follows S3's rules: the path is URI-encoded once and never
 * normalised ("/a/./b" and "//" are signed as given, because they are part
 * of an object key).  It is checked against AWS's SigV4 test suite
 * (tests/data/sigv4/, cases whose path normalisation would change the
 * path are left out: S3 does not normalise).
 *
 * Everything is computed into caller-provided fixed buffers: signing
 * allocates nothing.  Thread-safety: the functions have no state.
 */
#ifndef SHARDFS_SIGV4_H
#define SHARDFS_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* Most headers a request may ask to sign (the signer adds up to 3). */
#define SIGV4_MAX_HEADERS 16
/* Longest canonical request; a longer one is -ENAMETOOLONG. */
#define SIGV4_CANONICAL_MAX 8192
/* Longest Authorization header value. */
#define SIGV4_AUTH_MAX 1024
/* Longest header name signed. */
#define SIGV4_HEADER_NAME_MAX 64
/* Hex digits of a SHA-256, plus the NUL. */
#define SIGV4_HEX_LEN 65

/* SHA-256 of the empty string: the payload hash of a GET or HEAD. */
#define SIGV4_EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Credentials; the strings are borrowed for the duration of a call. */
struct sigv4_key {
	const char *access_key_id;	/* AKID... */
	const char *secret_access_key;	/* never logged */
	const char *session_token;	/* NULL unless temporary credentials */
};

struct sigv4_header {
	const char *name;	/* any case; lower-cased for signing */
	const char *value;	/* trimmed, inner blank runs folded */
};

struct sigv4_request {
	const char *method;	/* "GET", "HEAD", ... */
	const char *path;	/* decoded path ("/bucket/key"); the signer
				 * encodes it (sigv4_uri_encode, '/' kept),
				 * and the URL sent must encode it the same */
	const char *query;	/* query string as sent, without '?', or
				 * NULL; its parts are decoded then
				 * re-encoded and sorted */
	const struct sigv4_header *headers; /* must include Host */
	unsigned nr_headers;	/* at most SIGV4_MAX_HEADERS */
	const char *payload_sha256; /* hex SHA-256 of the body */
	bool content_sha256_header; /* sign x-amz-content-sha256 (S3 needs it) */
};

/* Where and when a request is signed. */
struct sigv4_scope {
	const char *region;	/* "us-east-1" */
	const char *service;	/* "s3" */
	time_t when;		/* the request time (UTC seconds) */
};

/* The headers to send, and the intermediate texts (for tests). */
struct sigv4_signature {
	char amz_date[17];		/* X-Amz-Date: YYYYMMDDTHHMMSSZ */
	char authorization[SIGV4_AUTH_MAX]; /* Authorization: value */
	char canonical_request[SIGV4_CANONICAL_MAX]; /* what was hashed */
	char string_to_sign[256];	/* what was HMAC'ed */
	char signature[SIGV4_HEX_LEN];	/* hex HMAC */
};

/*
 * Sign @req with @key in @scope into @out.  The caller sends the headers
 * it passed plus X-Amz-Date: out->amz_date, X-Amz-Security-Token when
 * key->session_token, X-Amz-Content-Sha256 when req->content_sha256_header,
 * and Authorization: out->authorization.  Returns 0, -EINVAL (too many
 * headers, a name too long) or -ENAMETOOLONG (the request does not fit).
 */
int sigv4_sign(const struct sigv4_request *req, const struct sigv4_key *key,
	       const struct sigv4_scope *scope, struct sigv4_signature *out);

/* Hex SHA-256 of @len bytes at @data into @hex. */
void sigv4_sha256_hex(const void *data, size_t len, char hex[SIGV4_HEX_LEN]);

/*
 * URI-encode @len bytes of @in as SigV4 does (every byte but A-Z a-z 0-9
 * - . _ ~ as %XX, and '/' too unless @keep_slash) into @out (@cap bytes,
 * NUL-terminated).  Returns the length, or -ENAMETOOLONG.
 */
int sigv4_uri_encode(const char *in, size_t len, bool keep_slash, char *out,
		     size_t cap);

#endif
