/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sigv4.c - AWS Signature Version 4 (see sigv4.h for why it is ours).
 *
 * The canonical request is assembled in a fixed buffer: method, encoded
 * path, sorted query, sorted lower-case headers (duplicates joined with
 * commas, values trimmed and blank runs folded), the signed header list
 * and the payload hash.  The key is derived from the secret by four
 * HMAC-SHA256 steps per request; at one request per 8 MiB chunk that is
 * noise (about 2 us), so it is not cached.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "shardfs/sigv4.h"

/* Most query parameters signed (ListObjectsV2 uses five). */
#define SIGV4_MAX_QUERY_PARAMS 32
/* Longest query parameter (key or value) once encoded. */
#define SIGV4_QUERY_PART_MAX 2048

/* A bounded string being built; overflow is sticky and reported once. */
struct strbuf {
	char *p;		/* the buffer */
	size_t len;		/* bytes used, without the NUL */
	size_t cap;		/* bytes of p */
	bool overflow;		/* something did not fit */
};

static void sb_add(struct strbuf *b, const char *s, size_t n)
{
	if (b->overflow || b->len + n + 1 > b->cap) {
		b->overflow = true;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct strbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

void sigv4_sha256_hex(const void *data, size_t len, char out[SIGV4_HEX_LEN])
{
	unsigned char md[SHA256_DIGEST_LENGTH];

	SHA256(data, len, md);
	hex(md, sizeof(md), out);
}

static bool unreserved(unsigned char c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

int sigv4_uri_encode(const char *in, size_t len, bool keep_slash, char *out,
		     size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (o + 4 > cap)
			return -ENAMETOOLONG;
		if (unreserved(c) || (keep_slash && c == '/'))
			out[o++] = (char)c;
		else
			o += (size_t)sprintf(out + o, "%%%02X", c);
	}
	if (o + 1 > cap)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return (int)o;
}

static int hexval(char c)
{
	return isdigit((unsigned char)c) ? c - '0' :
	       isxdigit((unsigned char)c) ? (tolower((unsigned char)c) - 'a' + 10) : -1;
}

/* Percent-decode @n bytes of @s into @out (at least @n + 1 bytes). */
static size_t uri_decode(const char *s, size_t n, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int hi, lo;

		if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
		    (lo = hexval(s[i + 2])) >= 0) {
			out[o++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			out[o++] = s[i];
		}
	}
	out[o] = '\0';
	return o;
}

/* One query parameter, encoded as it is signed. */
struct query_param {
	char key[SIGV4_QUERY_PART_MAX];		/* encoded key */
	char value[SIGV4_QUERY_PART_MAX];	/* encoded value, may be "" */
};

static int cmp_param(const void *a, const void *b)
{
	const struct query_param *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c ? c : strcmp(x->value, y->value);
}

/* Decode then re-encode @n bytes of @s into @out. */
static int query_part(const char *s, size_t n, char out[SIGV4_QUERY_PART_MAX])
{
	char raw[SIGV4_QUERY_PART_MAX];

	if (n >= sizeof(raw))
		return -ENAMETOOLONG;
	n = uri_decode(s, n, raw);
	return sigv4_uri_encode(raw, n, false, out, SIGV4_QUERY_PART_MAX) < 0 ?
	       -ENAMETOOLONG : 0;
}

/* The canonical query string: parameters encoded, sorted, joined. */
static int canonical_query(const char *query, struct strbuf *b)
{
	/* file-state: per-thread scratch, dead between calls: signing
	 * allocates nothing and keeps 128 KiB off the stack */
	static __thread struct query_param params[SIGV4_MAX_QUERY_PARAMS];
	unsigned nr = 0;
	const char *p = query;

	while (p && *p) {
		const char *amp = strchrnul(p, '&'), *eq = memchr(p, '=', amp - p);
		const char *kend = eq ? eq : amp;

		if (amp > p) {
			if (nr == SIGV4_MAX_QUERY_PARAMS)
				return -ENAMETOOLONG;
			if (query_part(p, kend - p, params[nr].key) ||
			    query_part(eq ? eq + 1 : amp, eq ? amp - eq - 1 : 0,
				       params[nr].value))
				return -ENAMETOOLONG;
			nr++;
		}
		p = *amp ? amp + 1 : amp;
	}
	qsort(params, nr, sizeof(*params), cmp_param);
	for (unsigned i = 0; i < nr; i++) {
		sb_str(b, i ? "&" : "");
		sb_str(b, params[i].key);
		sb_str(b, "=");
		sb_str(b, params[i].value);
	}
	return 0;
}

/* A header as signed: lower-case name, value as given. */
struct signed_header {
	char name[SIGV4_HEADER_NAME_MAX];	/* lower case */
	const char *value;			/* not yet trimmed */
};

/* Append @v trimmed, with runs of blanks folded into one space. */
static void add_header_value(struct strbuf *b, const char *v)
{
	bool blank = false;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') {
			blank = true;
			continue;
		}
		if (blank)
			sb_add(b, " ", 1);
		blank = false;
		sb_add(b, v, 1);
	}
}

/* Collect the headers to sign, sorted by name (stable: duplicates keep
 * their order, as their joined value must). */
static int collect_headers(const struct sigv4_request *req,
			   const struct sigv4_header *extra, unsigned nr_extra,
			   struct signed_header *h)
{
	unsigned n = req->nr_headers + nr_extra;

	if (req->nr_headers > SIGV4_MAX_HEADERS)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		const struct sigv4_header *in = i < req->nr_headers ?
			&req->headers[i] : &extra[i - req->nr_headers];
		size_t len = strlen(in->name);
		unsigned j = i;

		if (len >= SIGV4_HEADER_NAME_MAX)
			return -EINVAL;
		while (j > 0 && strcasecmp(h[j - 1].name, in->name) > 0) {
			h[j] = h[j - 1];
			j--;
		}
		for (size_t k = 0; k <= len; k++)
			h[j].name[k] = (char)tolower((unsigned char)in->name[k]);
		h[j].value = in->value;
	}
	return (int)n;
}

/* Canonical headers, then the signed header list into @list. */
static void canonical_headers(const struct signed_header *h, int n,
			      struct strbuf *b, struct strbuf *list)
{
	for (int i = 0; i < n; i++) {
		bool same = i > 0 && !strcmp(h[i].name, h[i - 1].name);

		if (same) {
			sb_add(b, ",", 1);
		} else {
			if (i)
				sb_add(b, "\n", 1);
			sb_str(b, h[i].name);
			sb_add(b, ":", 1);
			if (list->len)
				sb_add(list, ";", 1);
			sb_str(list, h[i].name);
		}
		add_header_value(b, h[i].value);
	}
	sb_add(b, "\n\n", 2);
}

static int canonical_request(const struct sigv4_request *req,
			     const struct sigv4_key *key, const char *amz_date,
			     struct sigv4_signature *out, struct strbuf *list)
{
	struct signed_header h[SIGV4_MAX_HEADERS + 3];
	struct sigv4_header extra[3];
	struct strbuf b = { .p = out->canonical_request,
			    .cap = sizeof(out->canonical_request) };
	unsigned nr_extra = 0;
	char path[SIGV4_CANONICAL_MAX / 2];
	int n, rc;

	extra[nr_extra++] = (struct sigv4_header){ "x-amz-date", amz_date };
	if (key->session_token)
		extra[nr_extra++] = (struct sigv4_header){ "x-amz-security-token",
							   key->session_token };
	if (req->content_sha256_header)
		extra[nr_extra++] = (struct sigv4_header){ "x-amz-content-sha256",
							   req->payload_sha256 };
	n = collect_headers(req, extra, nr_extra, h);
	if (n < 0)
		return n;
	if (sigv4_uri_encode(req->path, strlen(req->path), true, path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	out->canonical_request[0] = '\0';
	sb_str(&b, req->method);
	sb_add(&b, "\n", 1);
	sb_str(&b, path);
	sb_add(&b, "\n", 1);
	rc = canonical_query(req->query, &b);
	if (rc)
		return rc;
	sb_add(&b, "\n", 1);
	canonical_headers(h, n, &b, list);
	sb_add(&b, list->p, list->len);
	sb_add(&b, "\n", 1);
	sb_str(&b, req->payload_sha256);
	return b.overflow || list->overflow ? -ENAMETOOLONG : 0;
}

static void hmac(const void *key, size_t key_len, const char *msg,
		 unsigned char out[SHA256_DIGEST_LENGTH])
{
	unsigned int len = SHA256_DIGEST_LENGTH;

	HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg,
	     strlen(msg), out, &len);
}

/* kSigning = HMAC chain over date, region, service, "aws4_request". */
static void signing_key(const struct sigv4_key *key,
			const struct sigv4_scope *scope, const char *date,
			unsigned char k[SHA256_DIGEST_LENGTH])
{
	char secret[256];
	int n = snprintf(secret, sizeof(secret), "AWS4%s", key->secret_access_key);

	hmac(secret, (size_t)n < sizeof(secret) ? (size_t)n : sizeof(secret) - 1,
	     date, k);
	hmac(k, SHA256_DIGEST_LENGTH, scope->region, k);
	hmac(k, SHA256_DIGEST_LENGTH, scope->service, k);
	hmac(k, SHA256_DIGEST_LENGTH, "aws4_request", k);
	explicit_bzero(secret, sizeof(secret));
}

int sigv4_sign(const struct sigv4_request *req, const struct sigv4_key *key,
	       const struct sigv4_scope *scope, struct sigv4_signature *out)
{
	char list_buf[SIGV4_MAX_HEADERS * SIGV4_HEADER_NAME_MAX], date[9];
	char creq_hash[SIGV4_HEX_LEN];
	struct strbuf list = { .p = list_buf, .cap = sizeof(list_buf) };
	unsigned char k[SHA256_DIGEST_LENGTH], sig[SHA256_DIGEST_LENGTH];
	struct tm tm;
	int rc, n;

	gmtime_r(&scope->when, &tm);
	strftime(out->amz_date, sizeof(out->amz_date), "%Y%m%dT%H%M%SZ", &tm);
	memcpy(date, out->amz_date, 8);
	date[8] = '\0';
	list_buf[0] = '\0';
	rc = canonical_request(req, key, out->amz_date, out, &list);
	if (rc)
		return rc;
	sigv4_sha256_hex(out->canonical_request, strlen(out->canonical_request),
			 creq_hash);
	n = snprintf(out->string_to_sign, sizeof(out->string_to_sign),
		     "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", out->amz_date,
		     date, scope->region, scope->service, creq_hash);
	if (n >= (int)sizeof(out->string_to_sign))
		return -ENAMETOOLONG;
	signing_key(key, scope, date, k);
	hmac(k, sizeof(k), out->string_to_sign, sig);
	explicit_bzero(k, sizeof(k));
	hex(sig, sizeof(sig), out->signature);
	n = snprintf(out->authorization, sizeof(out->authorization),
		     "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, "
		     "SignedHeaders=%s, Signature=%s", key->access_key_id, date,
		     scope->region, scope->service, list_buf, out->signature);
	return n < (int)sizeof(out->authorization) ? 0 : -ENAMETOOLONG;
}
