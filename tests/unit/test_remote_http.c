/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_remote_http.c - remote_http.c against a scripted server, without a
 * mount: a thread on a loopback port reads each request, records what it
 * asked for (Range, If-Match, If-Unmodified-Since, Authorization) and
 * answers as the test's handler says, so that every rule of a read is
 * pinned down one at a time:
 *
 * - a read is one ranged GET carrying the validator of the object;
 * - a body cut short is resumed at the byte reached, a 5xx retried;
 * - a 412, another ETag, another Last-Modified, or a 416 naming another
 *   size mark the object replaced (every later read fails, with no
 *   request) and store no byte; a 416 naming the same size is asked again;
 * - the signer is asked for every attempt, and after a 403 it decides
 *   whether the keys were stale (one more try) or not (EIO); a PUT's
 *   body is digested once, whatever the number of attempts;
 * - a server that never answers gives EIO within remote_timeout x
 *   remote_attempts, not a hang;
 * - the probe takes size, ETag and Last-Modified from a 206 and refuses
 *   a server that ignores Range;
 * - readers in several threads at once, taking turns at driving the
 *   transfers, each get their own bytes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "remote_http.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

/* Bytes of the object the server serves. */
#define OBJ_SIZE 65536
/* Requests a test may make. */
#define MAX_REQUESTS 16
/* Longest request header block read. */
#define REQUEST_MAX 8192

/* What one request asked for. */
struct request {
	char range[64];		/* Range: value, "" if none */
	char if_match[64];	/* If-Match: value */
	char if_unmodified[64];	/* If-Unmodified-Since: value */
	char authorization[64];	/* Authorization: value */
	uint64_t from, to;	/* the range asked, parsed */
};

struct server;

/* Answer request @n (0, 1, ...) on @fd; false: close the connection. */
typedef bool (*handler_fn)(struct server *s, int fd, unsigned n);

/* The scripted server. */
struct server {
	int listen_fd;		/* bound to 127.0.0.1, any port */
	int stop_fd[2];		/* a byte written ends the thread */
	unsigned short port;	/* the port bound */
	pthread_t thread;	/* serve() */
	handler_fn handler;	/* the test's answers */
	atomic_uint nreq;	/* requests answered */
	struct request req[MAX_REQUESTS]; /* each, as asked */
};

static unsigned char object[OBJ_SIZE];
static struct server srv;
/* The layer the test objects are read through: its engine (made by
 * group_setup), settings (each test's) and counters. */
static struct remote remote;

static void send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

/* Copy the value of header @name from the block @hdrs into @out. */
static void header(const char *hdrs, const char *name, char *out, size_t cap)
{
	size_t n = strlen(name);

	out[0] = '\0';
	for (const char *l = hdrs; l && *l; l = strstr(l, "\r\n"), l = l ? l + 2 : NULL) {
		if (!strncasecmp(l, name, n) && l[n] == ':') {
			const char *v = l + n + 1, *end = strstr(v, "\r\n");

			while (*v == ' ')
				v++;
			snprintf(out, cap, "%.*s", (int)(end - v), v);
			return;
		}
	}
}

/* The request in @buf (@got bytes) is whole: its headers and the
 * Content-Length bytes of body after them. */
static bool request_whole(const char *buf, size_t got)
{
	const char *end = strstr(buf, "\r\n\r\n");
	char len[32];

	if (!end)
		return false;
	header(buf, "Content-Length", len, sizeof(len));
	return got >= (size_t)(end + 4 - buf) + strtoull(len, NULL, 10);
}

/* Read one request (a PUT's body too) from @fd into @r: false at the end. */
static bool read_request(int fd, struct request *r)
{
	char buf[REQUEST_MAX];
	size_t got = 0;
	unsigned long long a = 0, b = 0;

	while (got < sizeof(buf) - 1) {
		struct pollfd p[2] = { { fd, POLLIN, 0 }, { srv.stop_fd[0], POLLIN, 0 } };
		ssize_t n;

		if (poll(p, 2, -1) < 0 || p[1].revents)
			return false;
		n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
		if (n <= 0)
			return false;
		got += (size_t)n;
		buf[got] = '\0';
		if (request_whole(buf, got))
			break;
	}
	header(buf, "Range", r->range, sizeof(r->range));
	header(buf, "If-Match", r->if_match, sizeof(r->if_match));
	header(buf, "If-Unmodified-Since", r->if_unmodified, sizeof(r->if_unmodified));
	header(buf, "Authorization", r->authorization, sizeof(r->authorization));
	sscanf(r->range, "bytes=%llu-%llu", &a, &b);
	r->from = a;
	r->to = b;
	return true;
}

static void *serve(void *arg)
{
	struct server *s = arg;

	for (;;) {
		struct pollfd p[2] = { { s->listen_fd, POLLIN, 0 },
				       { s->stop_fd[0], POLLIN, 0 } };
		int fd;

		if (poll(p, 2, -1) < 0 || p[1].revents)
			return NULL;
		fd = accept(s->listen_fd, NULL, NULL);
		if (fd < 0)
			continue;
		for (struct request r; read_request(fd, &r);) {
			unsigned n = atomic_fetch_add(&s->nreq, 1);

			if (n >= MAX_REQUESTS)
				break;
			s->req[n] = r;	/* counted anew when a test begins */
			if (!s->handler(s, fd, n))
				break;
		}
		close(fd);
	}
}

/* Send a 206 of [from, to] of the object with @extra header lines, but
 * only @send of its bytes (then the caller closes). */
static void send_range(int fd, uint64_t from, uint64_t to, const char *extra,
		       size_t send)
{
	char head[512];
	size_t len = (size_t)(to - from + 1);
	int n = snprintf(head, sizeof(head), "HTTP/1.1 206 Partial Content\r\n"
			 "Content-Range: bytes %llu-%llu/%d\r\n"
			 "Content-Length: %zu\r\n%s\r\n", (unsigned long long)from,
			 (unsigned long long)to, OBJ_SIZE, len, extra);

	send_all(fd, head, (size_t)n);
	send_all(fd, object + from, send < len ? send : len);
}

/* Send a body-less (or @body) answer with @status and @extra lines. */
static void send_status(int fd, int status, const char *extra, const char *body)
{
	char head[512];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n"
			 "%s\r\n", status, strlen(body), extra);

	send_all(fd, head, (size_t)n);
	send_all(fd, body, strlen(body));
}

/* The answer of a server that holds version "v1" of the object. */
static bool answer_v1(struct server *s, int fd, unsigned n)
{
	send_range(fd, s->req[n].from, s->req[n].to, "ETag: \"v1\"\r\n", SIZE_MAX);
	return true;
}

/* answer_v1, then the connection closed: the server serves one
 * connection at a time, and readers at once open one each. */
static bool answer_v1_close(struct server *s, int fd, unsigned n)
{
	send_range(fd, s->req[n].from, s->req[n].to, "ETag: \"v1\"\r\nConnection: close\r\n",
		   SIZE_MAX);
	return false;
}

static int setup(void **state)
{
	(void)state;
	srv.handler = answer_v1;
	atomic_store(&srv.nreq, 0);
	memset(srv.req, 0, sizeof(srv.req));
	remote.cfg.timeout = 5;
	remote.cfg.attempts = 3;
	return 0;
}

/* An object at the server, as the mount opened it (version "v1"). */
static struct remote_object object_v1(void)
{
	struct remote_object o = { .remote = &remote, .name = "test-object",
				   .etag = "\"v1\"", .size = OBJ_SIZE };

	snprintf(o.url, sizeof(o.url), "http://127.0.0.1:%u/obj", srv.port);
	snprintf(o.host, sizeof(o.host), "127.0.0.1:%u", srv.port);
	return o;
}

/* Read [off, off + len) of @o in one piece into @buf. */
static ssize_t read_at(struct remote_object *o, void *buf, size_t len, uint64_t off)
{
	struct fetch_piece p = { buf, len, NULL };

	return remote_http_read(o, &p, 1, off);
}

static void test_read_is_one_ranged_get_with_the_etag(void **state)
{
	struct remote_object o = object_v1();
	unsigned char buf[5000];

	(void)state;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 1000), sizeof(buf));
	assert_memory_equal(buf, object + 1000, sizeof(buf));
	assert_int_equal(srv.nreq, 1);
	assert_string_equal(srv.req[0].range, "bytes=1000-5999");
	assert_string_equal(srv.req[0].if_match, "\"v1\"");
	assert_string_equal(srv.req[0].authorization, "");	/* no signer */
	/* at the end of the object: the bytes there are */
	assert_int_equal(read_at(&o, buf, sizeof(buf), OBJ_SIZE - 100), 100);
	assert_string_equal(srv.req[1].range, "bytes=65436-65535");
	assert_int_equal(read_at(&o, buf, sizeof(buf), OBJ_SIZE), 0);
	assert_int_equal(srv.nreq, 2);
}

/* The first answer stops after 2000 bytes; the next are whole. */
static bool answer_cut_once(struct server *s, int fd, unsigned n)
{
	if (n > 0)
		return answer_v1(s, fd, n);
	send_range(fd, s->req[n].from, s->req[n].to, "ETag: \"v1\"\r\n", 2000);
	return false;
}

static void test_body_cut_short_resumes_at_the_byte_reached(void **state)
{
	struct remote_object o = object_v1();
	unsigned long long retries = atomic_load(&remote.counters.retries);
	unsigned char buf[5000];

	(void)state;
	srv.handler = answer_cut_once;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 1000), sizeof(buf));
	assert_memory_equal(buf, object + 1000, sizeof(buf));
	assert_int_equal(srv.nreq, 2);
	assert_string_equal(srv.req[1].range, "bytes=3000-5999");
	assert_int_equal(atomic_load(&remote.counters.retries), retries + 1);
}

static bool answer_503_once(struct server *s, int fd, unsigned n)
{
	if (n > 0)
		return answer_v1(s, fd, n);
	send_status(fd, 503, "", "");
	return true;
}

static void test_5xx_is_retried(void **state)
{
	struct remote_object o = object_v1();
	unsigned char buf[100];

	(void)state;
	srv.handler = answer_503_once;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 0), sizeof(buf));
	assert_memory_equal(buf, object, sizeof(buf));
	assert_int_equal(srv.nreq, 2);
	assert_string_equal(srv.req[1].range, "bytes=0-99");
}

/* Read through a server that answers with @handler: EIO, the object is
 * replaced, no byte stored, and the next read makes no request. */
static void expect_replaced(struct remote_object *o, handler_fn handler)
{
	unsigned char buf[100];
	unsigned before;

	srv.handler = handler;
	memset(buf, 0xa5, sizeof(buf));
	assert_int_equal(read_at(o, buf, sizeof(buf), 0), -EIO);
	assert_true(atomic_load(&o->replaced));
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xa5);
	before = srv.nreq;
	assert_int_equal(read_at(o, buf, sizeof(buf), 0), -EIO);
	assert_int_equal(srv.nreq, before);
}

static bool answer_412(struct server *s, int fd, unsigned n)
{
	(void)s, (void)n;
	send_status(fd, 412, "", "");
	return true;
}

static bool answer_v2(struct server *s, int fd, unsigned n)
{
	send_range(fd, s->req[n].from, s->req[n].to, "ETag: \"v2\"\r\n", SIZE_MAX);
	return true;
}

static bool answer_416_other_size(struct server *s, int fd, unsigned n)
{
	(void)s, (void)n;
	send_status(fd, 416, "Content-Range: bytes */1000\r\n", "");
	return true;
}

static void test_another_version_is_refused(void **state)
{
	struct remote_object a = object_v1(), b = object_v1(), c = object_v1();

	(void)state;
	expect_replaced(&a, answer_412);
	assert_string_equal(srv.req[0].if_match, "\"v1\"");
	expect_replaced(&b, answer_v2);
	expect_replaced(&c, answer_416_other_size);
}

static bool answer_416_same_size_once(struct server *s, int fd, unsigned n)
{
	if (n > 0)
		return answer_v1(s, fd, n);
	send_status(fd, 416, "Content-Range: bytes */65536\r\n", "");
	return true;
}

static void test_416_of_the_same_size_is_asked_again(void **state)
{
	struct remote_object o = object_v1();
	unsigned char buf[100];

	(void)state;
	srv.handler = answer_416_same_size_once;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 500), sizeof(buf));
	assert_memory_equal(buf, object + 500, sizeof(buf));
	assert_false(atomic_load(&o.replaced));
	assert_int_equal(srv.nreq, 2);
}

/* Last-Modified of the dated object: 2026-01-02 03:04:05 GMT. */
#define MTIME 1767323045
#define MTIME_HTTP "Fri, 02 Jan 2026 03:04:05 GMT"

static bool answer_dated(struct server *s, int fd, unsigned n)
{
	send_range(fd, s->req[n].from, s->req[n].to,
		   "Last-Modified: " MTIME_HTTP "\r\n", SIZE_MAX);
	return true;
}

static bool answer_redated(struct server *s, int fd, unsigned n)
{
	send_range(fd, s->req[n].from, s->req[n].to,
		   "Last-Modified: Sat, 03 Jan 2026 03:04:05 GMT\r\n", SIZE_MAX);
	return true;
}

static void test_without_etag_last_modified_pins_it(void **state)
{
	struct remote_object o = object_v1(), later = object_v1();
	unsigned char buf[100];

	(void)state;
	o.etag[0] = later.etag[0] = '\0';
	o.mtime = later.mtime = MTIME;
	srv.handler = answer_dated;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 0), sizeof(buf));
	assert_string_equal(srv.req[0].if_match, "");
	assert_string_equal(srv.req[0].if_unmodified, MTIME_HTTP);
	expect_replaced(&later, answer_redated);
}

/* A signer that counts its calls and says the keys were stale as told. */
static unsigned sign_calls, stale_calls;
static bool stale_answer;
static char stale_code[64];

static int fake_sign(struct remote *from, const struct remote_sign_request *r,
		     void (*add)(void *ctx, const char *line), void *ctx, unsigned *gen)
{
	char line[64];

	assert_ptr_equal(from, &remote);	/* the object's */
	assert_string_equal(r->method, "GET");
	assert_string_equal(r->path, "/bucket/obj");
	*gen = ++sign_calls;
	snprintf(line, sizeof(line), "Authorization: fake %u", *gen);
	add(ctx, line);
	return 0;
}

static bool fake_stale(struct remote *from, const char *code, unsigned gen)
{
	assert_ptr_equal(from, &remote);
	stale_calls++;
	snprintf(stale_code, sizeof(stale_code), "%s", code);
	assert_int_equal(gen, sign_calls);
	return stale_answer;
}

static const struct remote_signer fake_signer = { fake_sign, fake_stale };

static bool answer_403_expired_once(struct server *s, int fd, unsigned n)
{
	if (n > 0)
		return answer_v1(s, fd, n);
	send_status(fd, 403, "", "<Error><Code>ExpiredToken</Code></Error>");
	return true;
}

static void test_signer_signs_each_attempt_and_judges_a_403(void **state)
{
	struct remote_object o = object_v1();
	unsigned char buf[100];

	(void)state;
	o.sign_path = "/bucket/obj";
	o.signer = &fake_signer;
	sign_calls = stale_calls = 0;
	stale_answer = true;		/* newer keys: one more try */
	srv.handler = answer_403_expired_once;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 0), sizeof(buf));
	assert_memory_equal(buf, object, sizeof(buf));
	assert_int_equal(stale_calls, 1);
	assert_string_equal(stale_code, "ExpiredToken");
	assert_int_equal(sign_calls, 2);
	assert_string_equal(srv.req[0].authorization, "fake 1");
	assert_string_equal(srv.req[1].authorization, "fake 2");

	atomic_store(&srv.nreq, 0);	/* the same again, no newer keys */
	stale_answer = false;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 0), -EIO);
	assert_int_equal(srv.nreq, 1);
	assert_int_equal(stale_calls, 2);
	assert_false(atomic_load(&o.replaced));
}

/* A signer of PUTs that keeps a digest of the body in the request's memo:
 * what it found there at each call. */
static char memo_seen[4][REMOTE_BODY_DIGEST_MAX];

static int memo_sign(struct remote *from, const struct remote_sign_request *r,
		     void (*add)(void *ctx, const char *line), void *ctx, unsigned *gen)
{
	(void)from;
	assert_string_equal(r->method, "PUT");
	assert_int_equal(r->body_len, 5);
	if (sign_calls < 4)
		snprintf(memo_seen[sign_calls], sizeof(memo_seen[0]), "%s", r->body_digest);
	if (!r->body_digest[0])
		snprintf(r->body_digest, REMOTE_BODY_DIGEST_MAX, "digest of %.5s",
			 (const char *)r->body);
	*gen = ++sign_calls;
	add(ctx, "Authorization: memo");
	return 0;
}

static const struct remote_signer memo_signer = { memo_sign, fake_stale };

static bool answer_put_503_once(struct server *s, int fd, unsigned n)
{
	(void)s;
	send_status(fd, n == 0 ? 503 : 200, "", "");
	return true;
}

static void test_a_body_is_digested_once_for_all_attempts(void **state)
{
	struct remote_object o = object_v1();
	char msg[256];

	(void)state;
	o.sign_path = "/bucket/obj";
	o.signer = &memo_signer;
	sign_calls = 0;
	srv.handler = answer_put_503_once;
	assert_int_equal(remote_http_put(&o, "index", 5, msg, sizeof(msg)), 0);
	assert_int_equal(srv.nreq, 2);
	assert_int_equal(sign_calls, 2);
	assert_string_equal(memo_seen[0], "");		/* first attempt */
	assert_string_equal(memo_seen[1], "digest of index");	/* the retry */
}

/* Read the request and say nothing, until the client gives up. */
static bool answer_nothing(struct server *s, int fd, unsigned n)
{
	char c;

	(void)s, (void)n;
	while (recv(fd, &c, 1, 0) > 0)
		;
	return false;
}

static void test_a_silent_server_gives_eio_not_a_hang(void **state)
{
	struct remote_object o = object_v1();
	unsigned char buf[100];
	uint64_t t0 = monotonic_ms();

	(void)state;
	remote.cfg.timeout = 1;
	remote.cfg.attempts = 2;
	srv.handler = answer_nothing;
	assert_int_equal(read_at(&o, buf, sizeof(buf), 0), -EIO);
	/* bounded by remote_timeout x remote_attempts (2 s), with slack for
	 * a loaded machine; without the bound it would wait forever */
	assert_true(monotonic_ms() - t0 < 10000);
	assert_true(srv.nreq >= 1);
}

static bool answer_probe(struct server *s, int fd, unsigned n)
{
	send_range(fd, 0, 0, "ETag: \"v1\"\r\nLast-Modified: " MTIME_HTTP "\r\n",
		   SIZE_MAX);
	(void)s, (void)n;
	return true;
}

static bool answer_whole(struct server *s, int fd, unsigned n)
{
	char head[128];
	int len = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\n"
			   "Content-Length: %d\r\n\r\n", OBJ_SIZE);

	(void)s, (void)n;
	send_all(fd, head, (size_t)len);
	send_all(fd, object, OBJ_SIZE);
	return true;
}

static void test_probe_learns_size_etag_and_date(void **state)
{
	struct remote_object o = object_v1();
	char msg[512];

	(void)state;
	o.size = 0;
	o.etag[0] = '\0';
	srv.handler = answer_probe;
	assert_int_equal(remote_http_probe(&o, msg, sizeof(msg)), 0);
	assert_int_equal(o.size, OBJ_SIZE);
	assert_string_equal(o.etag, "\"v1\"");
	assert_int_equal(o.mtime, MTIME);
	assert_string_equal(srv.req[0].range, "bytes=0-0");

	srv.handler = answer_whole;
	assert_int_equal(remote_http_probe(&o, msg, sizeof(msg)), -EPROTO);
	assert_non_null(strstr(msg, "ignores Range"));
}

/* Start the server and the engine once for every test: the tests share
 * one keep-alive pool, as a mount's reads do. */
static int group_setup(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	(void)state;
	for (size_t i = 0; i < OBJ_SIZE; i++)
		object[i] = (unsigned char)(i * 7 + i / 251);
	log_set_level(LOG_LEVEL_ERROR);
	srv.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (srv.listen_fd < 0 || bind(srv.listen_fd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(srv.listen_fd, 8) ||
	    getsockname(srv.listen_fd, (struct sockaddr *)&a, &alen) ||
	    pipe(srv.stop_fd))
		return -1;
	srv.port = ntohs(a.sin_port);
	if (pthread_create(&srv.thread, NULL, serve, &srv))
		return -1;
	return remote_http_init(&remote.http);
}

static int group_teardown(void **state)
{
	(void)state;
	remote_http_release(remote.http);
	if (write(srv.stop_fd[1], "x", 1) == 1)
		pthread_join(srv.thread, NULL);
	close(srv.listen_fd);
	return 0;
}

/* Threads of test_concurrent_readers_take_turns_driving, and reads
 * each makes. */
#define READER_THREADS 4
#define READER_READS 3

/* One reader thread: READER_READS reads of 1000 bytes from its own
 * 4 KiB blocks on. */
struct reader {
	struct remote_object *o; /* read from */
	unsigned first;		/* its first block */
	unsigned bad;		/* reads that failed or brought wrong bytes */
	pthread_t thread;	/* running reader_run() */
};

static void *reader_run(void *arg)
{
	struct reader *r = arg;
	char buf[1000];

	for (unsigned i = 0; i < READER_READS; i++) {
		uint64_t off = (uint64_t)(r->first + i) * 4096 + 7;

		if (read_at(r->o, buf, sizeof(buf), off) != (ssize_t)sizeof(buf) ||
		    memcmp(buf, object + off, sizeof(buf)))
			r->bad++;
	}
	return NULL;
}

static void test_concurrent_readers_take_turns_driving(void **state)
{
	struct remote_object o = object_v1();
	struct reader r[READER_THREADS];

	/* the transfers of the first caller end while others are in
	 * flight: it hands the multi handle on, and every read settles */
	srv.handler = answer_v1_close;
	for (unsigned i = 0; i < READER_THREADS; i++) {
		r[i] = (struct reader){ .o = &o, .first = i * READER_READS };
		assert_int_equal(pthread_create(&r[i].thread, NULL, reader_run, &r[i]), 0);
	}
	for (unsigned i = 0; i < READER_THREADS; i++) {
		pthread_join(r[i].thread, NULL);
		assert_int_equal(r[i].bad, 0);
	}
	assert_int_equal(atomic_load(&srv.nreq), READER_THREADS * READER_READS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_read_is_one_ranged_get_with_the_etag, setup),
		cmocka_unit_test_setup(test_body_cut_short_resumes_at_the_byte_reached, setup),
		cmocka_unit_test_setup(test_5xx_is_retried, setup),
		cmocka_unit_test_setup(test_another_version_is_refused, setup),
		cmocka_unit_test_setup(test_416_of_the_same_size_is_asked_again, setup),
		cmocka_unit_test_setup(test_without_etag_last_modified_pins_it, setup),
		cmocka_unit_test_setup(test_signer_signs_each_attempt_and_judges_a_403, setup),
		cmocka_unit_test_setup(test_a_body_is_digested_once_for_all_attempts, setup),
		cmocka_unit_test_setup(test_a_silent_server_gives_eio_not_a_hang, setup),
		cmocka_unit_test_setup(test_probe_learns_size_etag_and_date, setup),
		cmocka_unit_test_setup(test_concurrent_readers_take_turns_driving, setup),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
