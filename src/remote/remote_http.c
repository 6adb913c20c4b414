/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_http.c - ranged GETs over libcurl, signed, retried.
 *
 * Signing is the object's signer's (struct remote_signer; remote_s3.c
 * signs S3 requests with SigV4): this file asks it for each attempt's
 * headers and, after a 403, whether the keys went stale, and knows
 * nothing of S3 itself beyond reading an error body's <Code>.
 *
 * Every transfer runs on one curl multi handle.  A caller (a FUSE worker
 * fetching the range of a read that jumped, a fetch thread, the mount's
 * probe) fills a struct transfer on its own stack and submits it; the
 * callers take turns driving the handle (curl_multi_perform and
 * curl_multi_poll) for every transfer in flight: the first to submit
 * while nobody drives does it until its own transfer is done, then hands
 * the handle to the thread of a transfer still in flight; the others
 * sleep on their transfer's condition variable until the driver reports
 * it done (or hands them the handle), and a transfer submitted meanwhile
 * wakes the driver's poll (curl_multi_wakeup).  A lone transfer thus
 * costs its caller one sleep, in the poll, and no other thread: with a
 * thread of its own driving the handle (the event thread, to 8321204),
 * each GET of a read that jumped cost two more context switches and
 * hand-offs (docs/remote.md).  No allocation per transfer beyond
 * libcurl's header list.  The multi handle owns the connections, so every
 * request of every thread draws on one keep-alive pool of at most
 * HTTP_HOST_CONNECTIONS per host, and an HTTPS server that offers HTTP/2
 * gets one connection carrying every request as a stream
 * (CURLPIPE_MULTIPLEX; new requests wait for that connection rather than
 * open another, CURLOPT_PIPEWAIT).  Easy handles are pooled only to save
 * their setup; they hold no connection. TLS peers are always verified.
 *
 * The body callbacks run in the driving thread, whichever transfer's
 * they are: they copy into that transfer's buffer and never block (a
 * chunk's progress takes the chunk cache's lock for a wake-up only;
 * nothing holds that lock while it waits for a transfer).  The engine
 * has no thread of its own, so fork(2) needs only that no transfer be in
 * flight: before one whose child runs on (remote_http_fork_prepare,
 * called by remote_fork_prepare after the chunk cache stopped its fetch
 * workers), the engine waits for its transfers and holds new ones back.
 * Each engine (struct remote_http) is one handle of one struct remote.
 *
 * One request is retried, with exponential backoff and jitter, for
 * 5xx, 429, timeouts, resets and bodies cut short; a retry asks for the
 * bytes not yet received only, and a body that arrived whole is whole,
 * whatever the connection did after it.  It is given up (EIO) after
 * attempts tries, or once remote_timeout seconds passed without a byte
 * arriving: a stalled server is noticed by libcurl's low-speed check
 * (under one byte per second for remote_timeout), so no reader blocks
 * forever.  A data read has one more bound, remote_timeout x
 * remote_attempts seconds in all: a server that stalls after part of
 * each body makes progress on every attempt, and would otherwise hold a
 * reader for as long as all the attempts' low-speed checks add up to.
 *
 * Each data request carries the object's validator (remote_validator()):
 * If-Match with the ETag of the mount, or, from a server that sent no
 * ETag, If-Unmodified-Since with its Last-Modified.  A 412, a changed
 * ETag, Last-Modified (when it is the validator) or total size in
 * Content-Range marks the object replaced, logged once, and every later
 * read of it fails.  A 416 is not taken for a replacement unless its
 * Content-Range gives another size: the range is asked again.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "remote_http.h"
#include "shardfs/log.h"
#include "shardfs/remote_options.h"

/* Idle easy handles kept (the connections are the multi handle's). */
#define HTTP_POOL_MAX 64
/* Connections per host, and idle ones kept: above the fetches the chunk
 * cache runs at once (REMOTE_FETCH_THREADS for readers, in their own
 * threads or fetch threads, and REMOTE_PREFETCH_THREADS ahead), so that
 * an HTTP/1.1 server never makes a chunk wait for a connection; an
 * HTTP/2 server gets one. */
#define HTTP_HOST_CONNECTIONS (REMOTE_FETCH_THREADS + 8)
/* Longest sleep of the driving thread in one poll (ms): libcurl's own
 * timers (low-speed check, connect timeout) wake it sooner. */
#define HTTP_POLL_MS 1000
/* Bytes of an error body kept for the message (S3's <Code>). */
#define HTTP_ERROR_BODY_MAX 1024
/* First backoff, and the longest, in milliseconds. */
#define HTTP_BACKOFF_FIRST_MS 100
#define HTTP_BACKOFF_MAX_MS 5000
/* libcurl's receive buffer: larger than its 16 KiB default, so that an
 * 8 MiB chunk is copied out in a few dozen calls rather than 512. */
#define HTTP_RECV_BUFFER (512 * 1024L)
/* Redirects followed for unsigned requests. */
#define HTTP_MAX_REDIRECTS 5
/* Bytes of an HTTP-date (If-Unmodified-Since), with its NUL. */
#define HTTP_DATE_MAX 40

/* What one request asks for and what came back. */
struct transfer {
	struct transfer *next;	/* in the engine's submit queue */
	struct transfer *inflight_next; /* in the engine's list of
				 * transfers submitted and not done */
	pthread_cond_t settled;	/* signalled when done is set, or when
				 * drives is */
	bool done;		/* the driver finished the attempt */
	bool drives;		/* its caller drives the multi handle */
	CURLcode result;	/* libcurl's result of it, once done */
	CURL *easy;		/* the handle of the attempt */
	struct remote_object *o; /* the object */
	const char *query;	/* appended after '?', or NULL */
	bool ranged;		/* send Range: bytes=off-(off+len-1) */
	bool validate;		/* send the validator, check the answer's */
	uint64_t off;		/* first byte wanted (ranged) */
	uint64_t deadline_ms;	/* give up at this monotonic_ms(); 0: none */
	char *buf;		/* where the body goes */
	size_t len;		/* bytes wanted (the size of buf) */
	size_t got;		/* bytes of the body stored so far */
	bool grow;		/* buf is malloc'ed and grows up to len */
	size_t cap;		/* bytes allocated when grow */
	uint64_t asked_from;	/* first byte the current attempt asked for */
	bool overflow;		/* more body than wanted: aborted */
	bool bad_range;		/* a 206 starting elsewhere: aborted */
	bool checked;		/* this attempt's response was checked */
	bool headers_done;	/* this attempt's headers ended (blank line) */
	bool bad_object;	/* it came from another object: aborted */
	const struct fetch_piece *piece; /* where a read's body goes (buf
				 * unused), or NULL */
	unsigned npieces;	/* entries of piece */
	unsigned key_gen;	/* generation of the keys that signed it */
	bool keys_refreshed;	/* refused for stale keys once: re-read */
	char body_digest[REMOTE_BODY_DIGEST_MAX]; /* the signer's, for all
				 * attempts: a body is hashed once */
	const char *upload;	/* a PUT's body (the request is a PUT), or NULL */
	size_t upload_len;	/* bytes of upload */
	struct remote_response resp; /* from the headers */
	char error_body[HTTP_ERROR_BODY_MAX]; /* of a failed response */
	char curl_error[CURL_ERROR_SIZE]; /* libcurl's account of a failure */
	size_t error_len;	/* bytes in error_body */
};

/* How an attempt ended. */
enum outcome {
	OUTCOME_DONE,		/* the answer wanted, complete */
	OUTCOME_RETRY,		/* transient: try again for the rest */
	OUTCOME_FAIL,		/* final: the request cannot succeed */
};

/* The transfer engine: one multi handle, driven by its callers in turn. */
struct remote_http {
	pthread_mutex_t lock;	/* guards the fields below but multi */
	pthread_cond_t idle;	/* inflight emptied, or frozen was cleared */
	CURLM *multi;		/* used by the driving thread only, but for
				 * curl_multi_wakeup (any thread) */
	struct transfer *queue;	/* submitted, not yet added to multi */
	struct transfer **queue_tail; /* where the next one is linked */
	struct transfer *inflight; /* submitted and not yet done */
	bool driven;		/* the caller of one of them drives multi */
	bool frozen;		/* a fork or release waits for the
				 * transfers: submitters wait on idle */
	CURL *pool[HTTP_POOL_MAX]; /* idle easy handles */
	unsigned pool_nr;	/* entries of pool */
};

static CURL *handle_get(struct remote_http *eng)
{
	CURL *h = NULL;

	pthread_mutex_lock(&eng->lock);
	if (eng->pool_nr)
		h = eng->pool[--eng->pool_nr];
	pthread_mutex_unlock(&eng->lock);
	if (h)
		curl_easy_reset(h);
	return h ? h : curl_easy_init();
}

static void handle_put(struct remote_http *eng, CURL *h)
{
	pthread_mutex_lock(&eng->lock);
	if (eng->pool_nr < HTTP_POOL_MAX) {
		eng->pool[eng->pool_nr++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&eng->lock);
	if (h)
		curl_easy_cleanup(h);
}

/* The driver reports @t done with @result. */
static void transfer_settle(struct remote_http *eng, struct transfer *t,
			    CURLcode result)
{
	struct transfer **p = &eng->inflight;

	pthread_mutex_lock(&eng->lock);
	while (*p != t)
		p = &(*p)->inflight_next;
	*p = t->inflight_next;
	t->result = result;
	t->done = true;
	pthread_cond_signal(&t->settled);	/* before @t may vanish */
	if (!eng->inflight)
		pthread_cond_broadcast(&eng->idle);
	pthread_mutex_unlock(&eng->lock);
}

/* Hand the submitted transfers to libcurl (the driver, lock held). */
static void engine_admit(struct remote_http *eng)
{
	while (eng->queue) {
		struct transfer *t = eng->queue;
		CURL *h = t->easy;

		eng->queue = t->next;
		if (!eng->queue)
			eng->queue_tail = &eng->queue;
		if (curl_multi_add_handle(eng->multi, h) != CURLM_OK) {
			pthread_mutex_unlock(&eng->lock);
			transfer_settle(eng, t, CURLE_FAILED_INIT);
			pthread_mutex_lock(&eng->lock);
		}
	}
}

/* Report the transfers libcurl finished (the driver, lock not held). */
static void engine_reap(struct remote_http *eng)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(eng->multi, &left))) {
		CURL *h = m->easy_handle;
		CURLcode result = m->data.result;
		char *t = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(h, CURLINFO_PRIVATE, &t);
		curl_multi_remove_handle(eng->multi, h);
		assert(t);
		transfer_settle(eng, (struct transfer *)t, result);
	}
}

/*
 * Drive the multi handle for every transfer in flight until @t (the
 * caller's) is done, then hand it to the caller of one still in flight
 * (lock held on entry and return, not while libcurl runs).
 */
static void engine_drive(struct remote_http *eng, struct transfer *t)
{
	int running;

	for (;;) {
		engine_admit(eng);
		pthread_mutex_unlock(&eng->lock);
		curl_multi_perform(eng->multi, &running);
		engine_reap(eng);
		pthread_mutex_lock(&eng->lock);
		if (t->done)
			break;
		pthread_mutex_unlock(&eng->lock);
		curl_multi_poll(eng->multi, NULL, 0, HTTP_POLL_MS, NULL);
		pthread_mutex_lock(&eng->lock);
	}
	t->drives = false;
	eng->driven = eng->inflight != NULL;
	if (eng->inflight) {
		eng->inflight->drives = true;
		pthread_cond_signal(&eng->inflight->settled);
	}
}

/*
 * Run one attempt of @t on easy handle @h (options set) and wait for it,
 * driving the multi handle while nobody else does.  Returns libcurl's
 * result; the driver has removed @h from the multi handle by then, so the
 * caller may query and reuse it.
 */
static CURLcode engine_run(struct remote_http *eng, struct transfer *t, CURL *h)
{
	pthread_mutex_lock(&eng->lock);
	while (eng->frozen)
		pthread_cond_wait(&eng->idle, &eng->lock);
	t->easy = h;
	t->done = false;
	t->next = NULL;
	*eng->queue_tail = t;
	eng->queue_tail = &t->next;
	t->inflight_next = eng->inflight;
	eng->inflight = t;
	t->drives = !eng->driven;
	if (eng->driven)
		curl_multi_wakeup(eng->multi);	/* its driver admits it */
	eng->driven = true;
	while (!t->done) {
		if (t->drives)
			engine_drive(eng, t);
		else
			pthread_cond_wait(&t->settled, &eng->lock);
	}
	pthread_mutex_unlock(&eng->lock);
	return t->result;
}

/* Wait for the transfers in flight (lock held on entry and return;
 * submitters wait until frozen is cleared). */
static void engine_stop(struct remote_http *eng)
{
	eng->frozen = true;
	while (eng->inflight)
		pthread_cond_wait(&eng->idle, &eng->lock);
}

/* Before fork(2): no transfer in flight; the lock is held across the
 * fork so that both processes inherit it consistent. */
void remote_http_fork_prepare(struct remote_http *eng)
{
	pthread_mutex_lock(&eng->lock);
	engine_stop(eng);
	eng->frozen = false;
}

void remote_http_fork_done(struct remote_http *eng, bool child)
{
	/* the child has none of the parent's other threads, so none waits */
	if (child)
		eng->idle = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
	else
		pthread_cond_broadcast(&eng->idle);
	pthread_mutex_unlock(&eng->lock);
}

int remote_http_init(struct remote_http **engp)
{
	struct remote_http *eng;

	*engp = NULL;
	/* libcurl counts its users: each engine's init has its cleanup */
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return -EIO;
	eng = calloc(1, sizeof(*eng));
	if (!eng || !(eng->multi = curl_multi_init())) {
		free(eng);
		curl_global_cleanup();
		return -ENOMEM;
	}
	pthread_mutex_init(&eng->lock, NULL);
	pthread_cond_init(&eng->idle, NULL);
	eng->queue_tail = &eng->queue;
	curl_multi_setopt(eng->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
	curl_multi_setopt(eng->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
			  (long)HTTP_HOST_CONNECTIONS);
	curl_multi_setopt(eng->multi, CURLMOPT_MAXCONNECTS, (long)HTTP_HOST_CONNECTIONS);
	*engp = eng;
	return 0;
}

void remote_http_release(struct remote_http *eng)
{
	if (!eng)
		return;
	pthread_mutex_lock(&eng->lock);
	engine_stop(eng);
	pthread_mutex_unlock(&eng->lock);
	curl_multi_cleanup(eng->multi);
	while (eng->pool_nr)
		curl_easy_cleanup(eng->pool[--eng->pool_nr]);
	pthread_cond_destroy(&eng->idle);
	pthread_mutex_destroy(&eng->lock);
	free(eng);
	curl_global_cleanup();
}

/* "bytes A-B/T" or "bytes * /T" into @r. */
static void parse_content_range(const char *v, struct remote_response *r)
{
	unsigned long long a, b, t;

	r->has_range = true;
	r->range_total = UINT64_MAX;
	if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
		r->range_start = a;
		r->range_total = t;
	} else if (sscanf(v, "bytes */%llu", &t) == 1) {
		r->range_total = t;
	}
}

/* Copy header value @v (@n bytes, CRLF included) trimmed into @out. */
static void header_value(const char *v, size_t n, char *out, size_t cap)
{
	while (n && (*v == ' ' || *v == '\t'))
		v++, n--;
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(out, v, n);
	out[n] = '\0';
}

static size_t on_header(char *line, size_t size, size_t nitems, void *arg)
{
	struct transfer *t = arg;
	size_t n = size * nitems;
	char value[REMOTE_ETAG_MAX];
	const char *colon = memchr(line, ':', n);
	size_t name_len = colon ? (size_t)(colon - line) : 0;

	if (n > 5 && !strncmp(line, "HTTP/", 5)) {
		/* a new response (after a redirect or 100): start over */
		memset(&t->resp, 0, sizeof(t->resp));
		t->headers_done = false;
		sscanf(line, "HTTP/%*s %ld", &t->resp.status);
		return n;
	}
	if (n <= 2 && (line[0] == '\r' || line[0] == '\n'))
		t->headers_done = true;
	if (!colon)
		return n;
	header_value(colon + 1, n - name_len - 1, value, sizeof(value));
	if (name_len == 13 && !strncasecmp(line, "content-range", 13))
		parse_content_range(value, &t->resp);
	else if (name_len == 4 && !strncasecmp(line, "etag", 4))
		snprintf(t->resp.etag, sizeof(t->resp.etag), "%s", value);
	else if (name_len == 13 && !strncasecmp(line, "last-modified", 13))
		t->resp.last_modified = curl_getdate(value, NULL);
	return n;
}

static bool same_object(struct transfer *t);

/* Is the response the body we asked for? (Known before the body.) */
static bool body_wanted(const struct transfer *t, long status)
{
	if (t->upload)
		return false;	/* a PUT's answer: kept as error_body */
	return t->ranged ? status == 206 : status == 200;
}

/* Store @n bytes of body at @t->got: into buf, or across the pieces,
 * telling each piece's progress. */
static void store_body(struct transfer *t, const char *data, size_t n)
{
	size_t at = t->got;

	if (!t->piece) {
		memcpy(t->buf + at, data, n);
		t->got += n;
		return;
	}
	for (unsigned i = 0; n && i < t->npieces; i++) {
		const struct fetch_piece *p = &t->piece[i];
		size_t k;

		if (at >= p->len) {
			at -= p->len;
			continue;
		}
		k = p->len - at < n ? p->len - at : n;
		memcpy(p->buf + at, data, k);
		data += k;
		n -= k;
		t->got += k;
		if (p->progress) {
			atomic_store_explicit(&p->progress->bytes, at + k,
					      memory_order_release);
			p->progress->notify(p->progress);
		}
		at = 0;
	}
}

static size_t on_body(char *data, size_t size, size_t nitems, void *arg)
{
	struct transfer *t = arg;
	size_t n = size * nitems;

	if (t->ranged && t->resp.status == 200) {
		t->overflow = true;	/* the whole object: not wanted */
		return 0;
	}
	if (t->ranged && t->resp.status == 206 &&
	    (!t->resp.has_range || t->resp.range_start != t->asked_from)) {
		t->bad_range = true;
		return 0;
	}
	/* before any byte is stored, and readers may see it: the object's */
	if (t->validate && t->resp.status == 206 && !t->checked) {
		t->checked = true;
		if (!same_object(t)) {
			t->bad_object = true;
			return 0;
		}
	}
	if (!body_wanted(t, t->resp.status)) {
		size_t room = sizeof(t->error_body) - 1 - t->error_len;

		memcpy(t->error_body + t->error_len, data, n < room ? n : room);
		t->error_len += n < room ? n : room;
		t->error_body[t->error_len] = '\0';
		return n;
	}
	if (t->got + n > t->len) {
		t->overflow = true;
		return 0;	/* aborts the transfer */
	}
	if (t->grow && t->got + n + 1 > t->cap) {
		size_t cap = (t->got + n + 1) * 2;
		char *p = realloc(t->buf, cap < t->len + 1 ? cap : t->len + 1);

		if (!p)
			return 0;
		t->buf = p;
		t->cap = cap < t->len + 1 ? cap : t->len + 1;
	}
	store_body(t, data, n);
	atomic_fetch_add_explicit(&t->o->remote->counters.bytes, n, memory_order_relaxed);
	return n;
}

static void add_header(void *ctx, const char *line)
{
	struct curl_slist **hdrs = ctx;

	*hdrs = curl_slist_append(*hdrs, line);
}

/* Add the headers that sign @t's request (its object's signer) to
 * @hdrs.  0 or -errno. */
static int sign_headers(struct transfer *t, struct curl_slist **hdrs)
{
	const struct remote_sign_request req = {
		.method = t->upload ? "PUT" : "GET", .host = t->o->host,
		.path = t->o->sign_path, .query = t->query,
		.body = t->upload, .body_len = t->upload_len,
		.body_digest = t->body_digest,
	};

	return t->o->signer->sign(t->o->remote, &req, add_header, hdrs, &t->key_gen);
}

/* The validator header of @o into @line: If-Match or
 * If-Unmodified-Since; false for an object without a validator. */
static bool validator_header(const struct remote_object *o, char *line, size_t cap)
{
	char date[HTTP_DATE_MAX];
	struct tm tm;

	switch (remote_validator(o)) {
	case REMOTE_VALIDATOR_ETAG:
		snprintf(line, cap, "If-Match: %s", o->etag);
		return true;
	case REMOTE_VALIDATOR_DATE:
		gmtime_r(&o->mtime, &tm);
		strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		snprintf(line, cap, "If-Unmodified-Since: %s", date);
		return true;
	case REMOTE_VALIDATOR_NONE:
		break;
	}
	return false;
}

/* The request headers of @t: Range, the validator, the signature. */
static int request_headers(struct transfer *t, struct curl_slist **hdrs)
{
	char line[REMOTE_ETAG_MAX + 64];

	if (t->ranged) {
		assert(t->got < t->len);	/* never an inverted range */
		snprintf(line, sizeof(line), "Range: bytes=%" PRIu64 "-%" PRIu64,
			 t->off + t->got, t->off + t->len - 1);
		*hdrs = curl_slist_append(*hdrs, line);
	}
	if (t->validate && validator_header(t->o, line, sizeof(line)))
		*hdrs = curl_slist_append(*hdrs, line);
	if (t->upload)	/* no "Expect: 100-continue" wait */
		*hdrs = curl_slist_append(*hdrs, "Expect:");
	if (!t->o->signer)
		return 0;
	snprintf(line, sizeof(line), "Host: %s", t->o->host);
	*hdrs = curl_slist_append(*hdrs, line);
	return sign_headers(t, hdrs);
}

static void set_options(CURL *h, struct transfer *t, const char *url,
			struct curl_slist *hdrs)
{
	const struct remote_config *cfg = &t->o->remote->cfg;

	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, t);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)cfg->timeout);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)cfg->timeout);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, HTTP_RECV_BUFFER);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
	curl_easy_setopt(h, CURLOPT_PIPEWAIT, 1L);
	curl_easy_setopt(h, CURLOPT_PRIVATE, t);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t->curl_error);
	if (t->deadline_ms) {
		uint64_t now = monotonic_ms();

		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
				 (long)(t->deadline_ms > now ? t->deadline_ms - now : 1));
	}
	if (cfg->cacert)
		curl_easy_setopt(h, CURLOPT_CAINFO, cfg->cacert);
	if (t->upload) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, t->upload);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)t->upload_len);
	}
	/* a redirect would invalidate a signature: only unsigned follow */
	if (!t->o->signer) {
		curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
		curl_easy_setopt(h, CURLOPT_MAXREDIRS, (long)HTTP_MAX_REDIRECTS);
		curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	}
}

/* Record the first-byte latency of a finished attempt. */
static void count_latency(struct remote_counters *k, CURL *h)
{
	curl_off_t us = 0;
	unsigned long long max;

	curl_easy_getinfo(h, CURLINFO_STARTTRANSFER_TIME_T, &us);
	atomic_fetch_add_explicit(&k->latency_us, (unsigned long long)us,
				  memory_order_relaxed);
	max = atomic_load_explicit(&k->latency_max_us, memory_order_relaxed);
	while ((unsigned long long)us > max &&
	       !atomic_compare_exchange_weak_explicit(&k->latency_max_us, &max,
						      (unsigned long long)us,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
}

/* One attempt of @t; *@cerr gets libcurl's result. */
static int perform(struct transfer *t, CURLcode *cerr)
{
	struct curl_slist *hdrs = NULL;
	char url[REMOTE_URL_MAX + 2048];
	struct remote *remote = t->o->remote;
	CURL *h = handle_get(remote->http);
	int rc;

	if (!h)
		return -ENOMEM;
	snprintf(url, sizeof(url), "%s%s%s", t->o->url, t->query ? "?" : "",
		 t->query ? t->query : "");
	rc = request_headers(t, &hdrs);
	if (!rc) {
		memset(&t->resp, 0, sizeof(t->resp));
		t->asked_from = t->off + t->got;
		t->checked = false;
		t->headers_done = false;
		t->error_len = 0;
		t->error_body[0] = '\0';
		t->curl_error[0] = '\0';
		set_options(h, t, url, hdrs);
		atomic_fetch_add_explicit(&remote->counters.requests, 1,
					  memory_order_relaxed);
		pthread_cond_init(&t->settled, NULL);
		*cerr = engine_run(remote->http, t, h);
		pthread_cond_destroy(&t->settled);
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t->resp.status);
		count_latency(&remote->counters, h);
	}
	curl_slist_free_all(hdrs);
	handle_put(remote->http, h);
	return rc;
}

/* S3's <Code> of an error body, or "". */
static void error_code(const struct transfer *t, char *out, size_t cap)
{
	const char *a = strstr(t->error_body, "<Code>"), *b;

	out[0] = '\0';
	if (a && (b = strstr(a + 6, "</Code>")) && (size_t)(b - a - 6) < cap)
		snprintf(out, cap, " %.*s", (int)(b - a - 6), a + 6);
}

/*
 * Did libcurl give up on the attempt because the response's headers are
 * larger than it accepts (CURL_MAX_HTTP_HEADER, 100 KiB a line)?  It says
 * "Out of memory" (CURLE_TOO_LARGE from 8.6) once a status line came and
 * before the headers ended.
 */
static bool headers_too_large(const struct transfer *t, CURLcode cerr)
{
#if LIBCURL_VERSION_NUM >= 0x080600
	if (cerr == CURLE_TOO_LARGE)
		return true;
#endif
	return cerr == CURLE_OUT_OF_MEMORY && t->resp.status && !t->headers_done;
}

/*
 * Would asking again get the same answer?  Headers too large, a
 * certificate that does not verify or a URL libcurl cannot use fail every
 * attempt alike: retrying them only delays the error by remote_timeout x
 * remote_attempts (8 s for a wrong cacert).  A name that did not resolve
 * is retried: a cluster's DNS can be briefly unavailable.
 */
static bool failure_is_permanent(const struct transfer *t, CURLcode cerr)
{
	switch (cerr) {
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
		return true;
	default:
		return headers_too_large(t, cerr);
	}
}

/*
 * Why an attempt failed: the HTTP status and S3's error code, or libcurl's
 * detailed account (else the error's name), naming the URL tried when the
 * object's name is not that URL (s3://: "Couldn't connect to server" alone
 * does not say which endpoint was wrong).
 */
static void failure_why(const struct transfer *t, CURLcode cerr, char *why,
			size_t why_len)
{
	const struct remote_object *o = t->o;
	const char *curl = t->curl_error[0] ? t->curl_error : curl_easy_strerror(cerr);
	char code[64];

	if (cerr == CURLE_OK) {
		error_code(t, code, sizeof(code));
		snprintf(why, why_len, "HTTP %ld%s", t->resp.status, code);
	} else if (headers_too_large(t, cerr)) {
		snprintf(why, why_len, "HTTP %ld with response headers larger than "
			 "libcurl accepts (%d bytes a header line): refused", t->resp.status,
			 CURL_MAX_HTTP_HEADER);
	} else if (strcmp(o->name, o->url)) {
		snprintf(why, why_len, "%s (%s)", curl, o->url);
	} else {
		snprintf(why, why_len, "%s", curl);
	}
}

/* Mark @o replaced and say so, once. */
static void object_replaced(struct remote_object *o, const char *why)
{
	if (atomic_exchange(&o->replaced, true))
		return;
	atomic_fetch_add_explicit(&o->remote->counters.replaced, 1, memory_order_relaxed);
	log_error("%s: the object was replaced on the server since the mount (%s); "
		  "its files now fail with EIO (remount to serve the new object)",
		  o->name, why);
}

/* Did a 206 for a read come from the object of the mount? */
static bool same_object(struct transfer *t)
{
	struct remote_object *o = t->o;

	if (t->resp.has_range && t->resp.range_total != UINT64_MAX &&
	    t->resp.range_total != o->size) {
		object_replaced(o, "its size changed");
		return false;
	}
	if (o->etag[0] && t->resp.etag[0] && strcmp(o->etag, t->resp.etag)) {
		object_replaced(o, "its ETag changed");
		return false;
	}
	if (remote_validator(o) == REMOTE_VALIDATOR_DATE && t->resp.last_modified > 0 &&
	    t->resp.last_modified != o->mtime) {
		object_replaced(o, "its Last-Modified changed");
		return false;
	}
	return true;
}

/* Classify an attempt of a read (ranged, with the validator). */
static enum outcome read_outcome(struct transfer *t, CURLcode cerr, char *why,
				 size_t why_len)
{
	long st = t->resp.status;

	if (t->bad_object)
		return OUTCOME_FAIL;	/* object_replaced() said why */
	if (st == 200) {
		snprintf(why, why_len, "the server ignored the Range header (HTTP 200)");
		return OUTCOME_FAIL;
	}
	if (t->bad_range) {
		snprintf(why, why_len, "the server answered a range from %" PRIu64
			 " with another range", t->asked_from);
		return OUTCOME_FAIL;
	}
	if (t->overflow) {
		snprintf(why, why_len, "the server sent more bytes than asked for");
		return OUTCOME_FAIL;
	}
	/* every byte came: what the connection did after that is no matter */
	if (st == 206 && t->got == t->len)
		return OUTCOME_DONE;
	if (st == 412) {
		object_replaced(t->o, remote_validator(t->o) == REMOTE_VALIDATOR_ETAG ?
				"If-Match failed: HTTP 412" :
				"If-Unmodified-Since failed: HTTP 412");
		return OUTCOME_FAIL;
	}
	/* 416 for a range inside the object proves nothing by itself: a size
	 * of another object does, else the range is asked again */
	if (st == 416 && t->resp.has_range && t->resp.range_total != UINT64_MAX &&
	    t->resp.range_total != t->o->size) {
		object_replaced(t->o, "its size changed: HTTP 416");
		return OUTCOME_FAIL;
	}
	failure_why(t, cerr, why, why_len);
	if (cerr != CURLE_OK || st >= 500 || st == 429 || st == 206 || st == 416)
		return OUTCOME_RETRY;
	return OUTCOME_FAIL;
}

/* Sleep before retry @n (1, 2, ...): exponential, jittered, capped. */
static void backoff(unsigned n, uint64_t deadline)
{
	uint64_t ms = HTTP_BACKOFF_FIRST_MS << (n < 10 ? n - 1 : 9), now = monotonic_ms();
	unsigned seed = (unsigned)(now ^ (uintptr_t)&n);

	if (ms > HTTP_BACKOFF_MAX_MS)
		ms = HTTP_BACKOFF_MAX_MS;
	ms = ms / 2 + (uint64_t)rand_r(&seed) % (ms / 2 + 1);	/* "equal jitter" */
	if (now + ms > deadline)
		ms = deadline > now ? deadline - now : 0;
	usleep((useconds_t)(ms * 1000));
}

/*
 * Was @t refused for keys that went stale (temporary credentials expired,
 * or rotated by a credential agent)?  Its signer says, once per request;
 * it is worth one more try if the keys changed.
 */
static bool keys_stale(struct transfer *t)
{
	char code[64];

	if (t->keys_refreshed || !t->o->signer || t->resp.status != 403)
		return false;
	error_code(t, code, sizeof(code));
	t->keys_refreshed = true;
	return t->o->signer->stale(t->o->remote, code[0] ? code + 1 : code,
				   t->key_gen);
}

/*
 * Run @t until done, resuming at the byte reached after a transient
 * failure.  @classify decides what an attempt means.  0, or -EIO with
 * the last reason in @why.
 */
static int run(struct transfer *t,
	       enum outcome (*classify)(struct transfer *, CURLcode, char *, size_t),
	       char *why, size_t why_len)
{
	const struct remote_config *cfg = &t->o->remote->cfg;
	uint64_t progress = monotonic_ms(), limit = (uint64_t)cfg->timeout * 1000;
	unsigned attempt = 0;

	for (;;) {
		size_t before = t->got;
		CURLcode cerr = CURLE_OK;
		enum outcome out;
		int rc = perform(t, &cerr);

		if (rc)
			return snprintf(why, why_len, "%s", strerror(-rc)), rc;
		out = classify(t, cerr, why, why_len);
		if (out == OUTCOME_FAIL && keys_stale(t))
			out = OUTCOME_RETRY;
		if (out == OUTCOME_RETRY && failure_is_permanent(t, cerr))
			out = OUTCOME_FAIL;
		if (t->got > before)
			progress = monotonic_ms();
		if (out == OUTCOME_DONE)
			return 0;
		if (out != OUTCOME_FAIL && t->deadline_ms && monotonic_ms() >= t->deadline_ms) {
			snprintf(why + strlen(why), why_len - strlen(why), "; gave up after "
				 "%" PRIu64 " s in all (remote_timeout x remote_attempts)",
				 (uint64_t)cfg->timeout * cfg->attempts);
			break;
		}
		if (out == OUTCOME_FAIL || ++attempt >= cfg->attempts ||
		    monotonic_ms() - progress >= limit)
			break;
		atomic_fetch_add_explicit(&t->o->remote->counters.retries, 1,
					  memory_order_relaxed);
		log_debug("%s: %s; retry %u", t->o->name, why, attempt);
		backoff(attempt, t->deadline_ms && t->deadline_ms < progress + limit ?
			t->deadline_ms : progress + limit);
	}
	return -EIO;
}

ssize_t remote_http_read(struct remote_object *o, const struct fetch_piece *piece,
			 unsigned n, uint64_t off)
{
	struct transfer t = { .o = o, .ranged = true, .validate = true,
			      .off = off, .piece = piece, .npieces = n,
			      .deadline_ms = monotonic_ms() +
					     (uint64_t)o->remote->cfg.timeout *
					     o->remote->cfg.attempts * 1000 };
	size_t len = 0;
	char why[256];

	for (unsigned i = 0; i < n; i++)
		len += piece[i].len;
	if (atomic_load_explicit(&o->replaced, memory_order_relaxed))
		return -EIO;
	if (off >= o->size || !len)
		return 0;
	t.len = len < o->size - off ? len : (size_t)(o->size - off);
	if (run(&t, read_outcome, why, sizeof(why))) {
		atomic_fetch_add_explicit(&o->remote->counters.errors, 1,
					  memory_order_relaxed);
		if (!atomic_load(&o->replaced))
			log_error("%s: bytes %" PRIu64 "-%" PRIu64 ": %s", o->name,
				  off, off + t.len - 1, why);
		return -EIO;
	}
	return (ssize_t)t.len;
}

/* The probe succeeds with any answer that settles the question. */
static enum outcome probe_outcome(struct transfer *t, CURLcode cerr, char *why,
				  size_t why_len)
{
	long st = t->resp.status;

	if (cerr == CURLE_OK && (st == 206 || st == 200 || st == 416))
		return OUTCOME_DONE;
	/* more than byte 0 came: the whole object for a 200 (refused below),
	 * or a longer range (s3rver's answer to "bytes=0-0") */
	if (t->overflow && (st == 200 || (st == 206 && t->resp.has_range)))
		return OUTCOME_DONE;
	/* an overflow is the answer wanted, cut short: its status says */
	failure_why(t, cerr == CURLE_WRITE_ERROR && t->overflow ? CURLE_OK : cerr,
		    why, why_len);
	return cerr != CURLE_OK || st >= 500 || st == 429 ? OUTCOME_RETRY
							   : OUTCOME_FAIL;
}

/* Size, ETag and time from a settled probe, or a refusal. */
static int probe_result(struct remote_object *o, const struct transfer *t,
			char *msg, size_t msg_len)
{
	const struct remote_response *r = &t->resp;

	if (r->status == 200)
		return log_format(msg, msg_len, -EPROTO, "%s: the server ignores Range "
				  "requests (it answered a ranged GET with 200 and the "
				  "whole object); shardfs reads shards with ranged GETs "
				  "and cannot use this server", o->name);
	if (!r->has_range || r->range_total == UINT64_MAX)
		return log_format(msg, msg_len, -EPROTO, "%s: HTTP %ld without a "
				  "usable Content-Range", o->name, r->status);
	if (r->status == 416 && r->range_total)
		return log_format(msg, msg_len, -EPROTO, "%s: HTTP 416 for byte 0 of "
				  "a %" PRIu64 "-byte object", o->name, r->range_total);
	o->size = r->range_total;
	snprintf(o->etag, sizeof(o->etag), "%s", r->etag);
	o->mtime = r->last_modified > 0 ? r->last_modified : 0;
	return 0;
}

int remote_http_probe(struct remote_object *o, char *msg, size_t msg_len)
{
	char byte, why[256];
	struct transfer t = { .o = o, .ranged = true, .buf = &byte, .len = 1 };

	if (run(&t, probe_outcome, why, sizeof(why))) {
		int err = t.resp.status == 404 ? -ENOENT :
			  t.resp.status == 403 ? -EACCES : -EIO;

		return log_format(msg, msg_len, err, "%s: %s", o->name, why);
	}
	return probe_result(o, &t, msg, msg_len);
}

static enum outcome body_outcome(struct transfer *t, CURLcode cerr, char *why,
				 size_t why_len)
{
	long st = t->resp.status;

	if (cerr == CURLE_OK && st == 200)
		return OUTCOME_DONE;
	if (t->overflow)
		snprintf(why, why_len, "the answer is larger than %zu bytes", t->len);
	else
		failure_why(t, cerr, why, why_len);
	t->got = 0;	/* a body is fetched whole: start over */
	return !t->overflow && (cerr != CURLE_OK || st >= 500 || st == 429) ?
	       OUTCOME_RETRY : OUTCOME_FAIL;
}

static enum outcome put_outcome(struct transfer *t, CURLcode cerr, char *why,
				size_t why_len)
{
	long st = t->resp.status;

	if (cerr == CURLE_OK && st >= 200 && st < 300)
		return OUTCOME_DONE;
	failure_why(t, cerr, why, why_len);
	return cerr != CURLE_OK || st >= 500 || st == 429 ? OUTCOME_RETRY
							   : OUTCOME_FAIL;
}

int remote_http_put(struct remote_object *o, const void *body, size_t len,
		    char *msg, size_t msg_len)
{
	struct transfer t = { .o = o, .upload = body, .upload_len = len };
	char why[256];

	if (run(&t, put_outcome, why, sizeof(why)))
		return log_format(msg, msg_len, t.resp.status == 403 ? -EACCES : -EIO,
				  "%s: PUT: %s", o->name, why);
	return 0;
}

int remote_http_get_body(struct remote_object *o, const char *query,
			 size_t max, char **body, size_t *len, char *msg,
			 size_t msg_len)
{
	struct transfer t = { .o = o, .query = query, .grow = true, .len = max };
	char why[256];
	int rc = run(&t, body_outcome, why, sizeof(why));

	if (rc) {
		free(t.buf);
		return log_format(msg, msg_len, t.resp.status == 404 ? -ENOENT :
				  t.resp.status == 403 ? -EACCES : -EIO, "%s: %s",
				  o->name, why);
	}
	if (!t.buf && !(t.buf = malloc(1)))
		return -ENOMEM;
	t.buf[t.got] = '\0';
	*body = t.buf;
	*len = t.got;
	return 0;
}
