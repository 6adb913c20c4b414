/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_s3.c - S3: where an object is (endpoint, addressing), who asks
 * (credentials, and the SigV4 signer that remote_http.c calls through
 * the object's struct remote_signer), and what a prefix holds
 * (ListObjectsV2, over remote_http.c: the calls go one way).
 *
 * Settings are resolved once, in the order the AWS CLI uses, except that
 * every one of them also has a -o form that wins (fstab passes no
 * environment): -o option, then the environment, then the shared files
 * (~/.aws/credentials, ~/.aws/config) of the profile, then a default.
 * Credentials named by -o aws_profile= come from the files even when the
 * environment has keys, as with the CLI's --profile.
 *
 * Temporary credentials expire, and a credential agent (IRSA-like
 * tooling, aws-vault, a cron job) rewrites the file with new ones: keys
 * that came from a file are followed.  The file is stat'ed at most once
 * per S3_KEYS_CHECK_MS and re-read when its mtime, size or inode changed,
 * and re-read at once when the server refuses a request as if its keys
 * were stale (remote_http.c then retries it once).  Requests copy the
 * current set under a read lock (a few KB of memcpy); a new set is
 * swapped in under the write lock with a new generation number, after
 * the file was read outside it.  Keys from the environment cannot change.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uthash.h>

#include "remote_s3.h"
#include "remote_http.h"
#include "shardfs/log.h"
#include "shardfs/remote_options.h"
#include "shardfs/path.h"
#include "shardfs/sigv4.h"
#include "shardfs/util.h"

/* How often (ms) the credentials file is checked for a change: one
 * stat(2) per second at most, not one per request. */
#define S3_KEYS_CHECK_MS 1000

/* Largest ListObjectsV2 page accepted (1,000 keys are about 300 KB). */
#define S3_LIST_PAGE_MAX (16u << 20)
/* Longest line of an AWS ini file. */
#define S3_INI_LINE_MAX 4096
/* Longest S3 key (S3's own limit is 1,024 bytes). */
#define S3_KEY_MAX 1024

/* Most pages listed to learn the objects of a prefix shards were named
 * in; past it, the remaining shards are probed one by one. */
#define S3_LOOKUP_PAGES_MAX 100

/* An object seen in a listing: what a probe would have learnt. */
struct listed_object {
	char *name;		/* s3://bucket/key */
	uint64_t size;		/* Size */
	char etag[REMOTE_ETAG_MAX]; /* ETag, as in a GET's header */
	time_t mtime;		/* LastModified */
	UT_hash_handle hh;	/* keyed by name */
};

/* A prefix already listed (s3://bucket/prefix). */
struct listed_prefix {
	char *name;		/* s3://bucket/prefix */
	UT_hash_handle hh;	/* keyed by name */
};


/* What a profile of the shared files says. */
struct profile_values {
	char *key_id;		/* aws_access_key_id */
	char *secret;		/* aws_secret_access_key */
	char *token;		/* aws_session_token */
	char *region;		/* region (config file) */
};

static void profile_values_free(struct profile_values *v)
{
	free(v->key_id);
	if (v->secret)
		explicit_bzero(v->secret, strlen(v->secret));
	free(v->secret);
	free(v->token);
	free(v->region);
}

/* The credentials requests are signed with. */
struct s3_keys {
	pthread_rwlock_t lock;	/* guards cur, only while it is copied */
	struct remote_keys cur;	/* the current set; key_id "": none */
	pthread_mutex_t reload;	/* one re-read at a time; guards below */
	char *path;		/* file they came from; NULL: environment */
	char *profile;		/* its section */
	struct stat seen;	/* its state when last read */
	atomic_ullong checked_ms; /* when path was last stat'ed */
};

/* What this file keeps for one struct remote (its s3). */
struct remote_s3 {
	struct s3_keys keys;	/* set before any thread; then as above */
	pthread_mutex_t listed_lock; /* guards listed and prefixes */
	struct listed_object *listed; /* every object listed so far */
	struct listed_prefix *prefixes; /* every prefix listed so far */
};

/* Is "[...]" line @l the section of @profile? "[p]" or "[profile p]". */
static bool is_section(const char *l, const char *profile)
{
	size_t n = strlen(profile);

	l++;
	while (*l == ' ')
		l++;
	if (!strncmp(l, "profile ", 8))
		for (l += 8; *l == ' '; l++)
			;
	if (strncmp(l, profile, n))
		return false;
	for (l += n; *l == ' '; l++)
		;
	return *l == ']';
}

/* Trim @s in place; returns its first non-blank byte. */
static char *trim(char *s)
{
	size_t n;

	while (isspace((unsigned char)*s))
		s++;
	n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

static void set_value(struct profile_values *v, const char *key, const char *val)
{
	char **slot = !strcmp(key, "aws_access_key_id") ? &v->key_id :
		      !strcmp(key, "aws_secret_access_key") ? &v->secret :
		      !strcmp(key, "aws_session_token") ? &v->token :
		      !strcmp(key, "region") ? &v->region : NULL;

	if (slot && !*slot && strlen(val) < REMOTE_SECRET_MAX)
		*slot = strdup(val);
}

/* Fill what @v lacks from section @profile of ini file @path. */
static int read_profile(const char *path, const char *profile,
			struct profile_values *v)
{
	char line[S3_INI_LINE_MAX];
	bool in = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *l = trim(line), *eq;

		if (*l == '[') {
			in = is_section(l, profile);
			continue;
		}
		if (!in || *l == '#' || *l == ';' || !(eq = strchr(l, '=')))
			continue;
		*eq = '\0';
		set_value(v, trim(l), trim(eq + 1));
	}
	fclose(f);
	explicit_bzero(line, sizeof(line));
	return 0;
}

/* $HOME/@rel, with the password database when HOME is unset (fstab). */
static void home_file(const char *env, const char *rel, char *out, size_t cap)
{
	const char *home = getenv("HOME");
	struct passwd *pw;

	if (getenv(env) && *getenv(env)) {
		snprintf(out, cap, "%s", getenv(env));
		return;
	}
	if ((!home || !*home) && (pw = getpwuid(geteuid())))
		home = pw->pw_dir;
	snprintf(out, cap, "%s/%s", home ? home : "", rel);
}

static char *dup_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? strdup(v) : NULL;
}

/* Credentials from -o credentials, env or the files; *@from gets the
 * credentials file (malloc'ed) unless they came from the environment. */
static int find_credentials(const struct remote_options *ro, const char *profile,
			    struct profile_values *v, char **from)
{
	char path[4096];

	if (ro->credentials) {
		*from = strdup(ro->credentials);
		int rc = read_profile(ro->credentials, profile, v);
		struct stat st;

		if (rc)
			return log_error("credentials=%s: %s", ro->credentials,
					 strerror(-rc)), rc;
		if (!stat(ro->credentials, &st) && (st.st_mode & 077))
			log_warn("credentials=%s: readable by others (mode %03o); "
				 "chmod 600 it", ro->credentials, st.st_mode & 0777);
		if (!v->key_id || !v->secret)
			return log_error("credentials=%s: no aws_access_key_id and "
					 "aws_secret_access_key in profile [%s]",
					 ro->credentials, profile), -EINVAL;
		return 0;
	}
	if (!ro->profile && getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY")) {
		v->key_id = dup_env("AWS_ACCESS_KEY_ID");
		v->secret = dup_env("AWS_SECRET_ACCESS_KEY");
		v->token = dup_env("AWS_SESSION_TOKEN");
		return 0;
	}
	home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", path, sizeof(path));
	read_profile(path, profile, v);
	*from = strdup(path);
	home_file("AWS_CONFIG_FILE", ".aws/config", path, sizeof(path));
	read_profile(path, profile, v);
	return 0;
}

/* Make @v's keys the current set, a new generation. */
static void keys_publish(struct s3_keys *keys, const struct profile_values *v)
{
	pthread_rwlock_wrlock(&keys->lock);
	snprintf(keys->cur.key_id, sizeof(keys->cur.key_id), "%s", v->key_id);
	snprintf(keys->cur.secret, sizeof(keys->cur.secret), "%s", v->secret);
	snprintf(keys->cur.token, sizeof(keys->cur.token), "%s", v->token ?: "");
	keys->cur.gen++;
	pthread_rwlock_unlock(&keys->lock);
}

/* Do @v's keys differ from the current set? */
static bool keys_differ(struct s3_keys *keys, const struct profile_values *v)
{
	bool differ;

	pthread_rwlock_rdlock(&keys->lock);
	differ = strcmp(keys->cur.key_id, v->key_id) || strcmp(keys->cur.secret, v->secret) ||
		 strcmp(keys->cur.token, v->token ?: "");
	pthread_rwlock_unlock(&keys->lock);
	return differ;
}

/* Re-read the credentials file (reload held); true when it held a
 * complete set other than the current one, now current.  A file that
 * cannot be read, or is incomplete (half rewritten), keeps the current
 * set; its next change is read again. */
static bool keys_reload(struct s3_keys *keys)
{
	struct profile_values v = { 0 };
	struct stat st;
	bool changed = false;
	int rc = stat(keys->path, &st) ? -errno : read_profile(keys->path, keys->profile, &v);

	if (!rc && (!v.key_id || !v.secret))
		rc = -ENODATA;
	if (rc) {
		log_warn("%s: new credentials not read (%s); the current ones stay in use",
			 keys->path, rc == -ENODATA ? "no complete key pair in it" :
			 strerror(-rc));
	} else {
		keys->seen = st;
		changed = keys_differ(keys, &v);
		if (changed) {
			keys_publish(keys, &v);
			log_info("%s: credentials changed; requests are signed with the "
				 "new ones", keys->path);
		}
	}
	profile_values_free(&v);
	return changed;
}

/* Has the file's state changed since it was read? */
static bool file_changed(const struct stat *a, const struct stat *b)
{
	return a->st_ino != b->st_ino || a->st_size != b->st_size ||
	       a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
	       a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

/* Re-read the credentials file if it changed; one thread per
 * S3_KEYS_CHECK_MS looks. */
static void keys_check(struct s3_keys *keys)
{
	unsigned long long now = monotonic_ms();
	unsigned long long last = atomic_load_explicit(&keys->checked_ms, memory_order_relaxed);
	struct stat st;

	if (!keys->path || now - last < S3_KEYS_CHECK_MS ||
	    !atomic_compare_exchange_strong_explicit(&keys->checked_ms, &last, now,
						     memory_order_relaxed,
						     memory_order_relaxed))
		return;
	pthread_mutex_lock(&keys->reload);
	if (!stat(keys->path, &st) && file_changed(&st, &keys->seen))
		keys_reload(keys);
	pthread_mutex_unlock(&keys->reload);
}

void remote_s3_keys(struct remote_s3 *s3, struct remote_keys *k)
{
	struct s3_keys *keys = &s3->keys;

	keys_check(keys);
	pthread_rwlock_rdlock(&keys->lock);
	strcpy(k->key_id, keys->cur.key_id);
	strcpy(k->secret, keys->cur.secret);
	strcpy(k->token, keys->cur.token);
	k->gen = keys->cur.gen;
	pthread_rwlock_unlock(&keys->lock);
}

bool remote_s3_keys_refresh(struct remote_s3 *s3, unsigned gen)
{
	struct s3_keys *keys = &s3->keys;
	bool newer;

	if (!keys->path)
		return false;
	pthread_mutex_lock(&keys->reload);
	pthread_rwlock_rdlock(&keys->lock);
	newer = keys->cur.gen != gen;	/* another request re-read them */
	pthread_rwlock_unlock(&keys->lock);
	if (!newer)
		newer = keys_reload(keys);
	pthread_mutex_unlock(&keys->reload);
	return newer;
}

_Static_assert(REMOTE_BODY_DIGEST_MAX >= SIGV4_HEX_LEN, "a SHA-256 fits the memo");

/* The SigV4 headers of @r, signed with the current keys. */
static int s3_sign(struct remote *remote, const struct remote_sign_request *r,
		   void (*add)(void *ctx, const char *line), void *ctx,
		   unsigned *gen)
{
	struct sigv4_signature *sig = malloc(sizeof(*sig));
	struct sigv4_header host = { "host", r->host };
	struct remote_keys k;
	struct sigv4_key key = { k.key_id, k.secret, NULL };
	struct sigv4_scope scope = { remote->cfg.region, "s3", time(NULL) };
	struct sigv4_request req = { r->method, r->path, r->query, &host, 1,
				     SIGV4_EMPTY_SHA256, true };
	char line[SIGV4_AUTH_MAX + 32];
	int rc;

	if (!sig)
		return -ENOMEM;
	if (r->body) {
		if (!r->body_digest[0])	/* the request's first attempt */
			sigv4_sha256_hex(r->body, r->body_len, r->body_digest);
		req.payload_sha256 = r->body_digest;
	}
	remote_s3_keys(remote->s3, &k);
	*gen = k.gen;
	key.session_token = k.token[0] ? k.token : NULL;
	rc = sigv4_sign(&req, &key, &scope, sig);
	explicit_bzero(k.secret, sizeof(k.secret));
	if (!rc) {
		snprintf(line, sizeof(line), "X-Amz-Date: %s", sig->amz_date);
		add(ctx, line);
		snprintf(line, sizeof(line), "X-Amz-Content-Sha256: %s", req.payload_sha256);
		add(ctx, line);
		snprintf(line, sizeof(line), "Authorization: %s", sig->authorization);
		add(ctx, line);
		explicit_bzero(line, sizeof(line));
	}
	if (!rc && key.session_token) {
		char *tok;

		if (asprintf(&tok, "X-Amz-Security-Token: %s", key.session_token) < 0)
			rc = -ENOMEM;
		else
			add(ctx, tok), free(tok);
	}
	free(sig);
	return rc;
}

/* Was a 403 with S3 error @code a refusal of stale keys, and are newer
 * ones there now? */
static bool s3_stale(struct remote *remote, const char *code, unsigned gen)
{
	static const char *const stale[] = { "ExpiredToken", "InvalidAccessKeyId",
		"SignatureDoesNotMatch", "InvalidToken", "TokenRefreshRequired" };

	for (size_t i = 0; i < sizeof(stale) / sizeof(*stale); i++)
		if (!strcmp(code, stale[i]))
			return remote_s3_keys_refresh(remote->s3, gen);
	return false;
}

static const struct remote_signer s3_signer = { s3_sign, s3_stale };

/* Forget the credentials, zeroing the secret. */
static void keys_forget(struct s3_keys *keys)
{
	pthread_rwlock_wrlock(&keys->lock);
	explicit_bzero(keys->cur.secret, sizeof(keys->cur.secret));
	keys->cur.key_id[0] = keys->cur.token[0] = '\0';
	pthread_rwlock_unlock(&keys->lock);
	free(keys->path);
	free(keys->profile);
	keys->path = keys->profile = NULL;
	pthread_mutex_destroy(&keys->reload);
	pthread_rwlock_destroy(&keys->lock);
}

/* Remember where the credentials of @v came from (@from, taken), to
 * follow changes there. */
static int keys_follow(struct s3_keys *keys, char *from, const char *profile)
{
	keys->path = from;
	keys->profile = strdup(profile);
	if (!keys->profile)
		return -ENOMEM;
	if (stat(from, &keys->seen))
		memset(&keys->seen, 0, sizeof(keys->seen));
	atomic_store_explicit(&keys->checked_ms, monotonic_ms(), memory_order_relaxed);
	return 0;
}

/* Region, endpoint and addressing into @cfg. */
static int find_location(struct remote_config *cfg, const struct remote_options *ro,
			 struct profile_values *v)
{
	const char *region = ro->region ?: getenv("AWS_REGION") ?:
			     getenv("AWS_DEFAULT_REGION") ?: v->region ?: "us-east-1";
	const char *endpoint = ro->endpoint ?: getenv("AWS_ENDPOINT_URL_S3") ?:
			       getenv("AWS_ENDPOINT_URL");
	size_t n;

	cfg->region = strdup(region);
	if (endpoint && *endpoint)
		cfg->endpoint = strdup(endpoint);
	else if (asprintf(&cfg->endpoint, "https://s3.%s.amazonaws.com", region) < 0)
		cfg->endpoint = NULL;
	if (!cfg->region || !cfg->endpoint)
		return -ENOMEM;
	if (strncmp(cfg->endpoint, "http://", 7) &&
	    strncmp(cfg->endpoint, "https://", 8))
		return log_error("endpoint=%s: not an http:// or https:// URL",
				 cfg->endpoint), -EINVAL;
	n = strlen(cfg->endpoint);
	while (n && cfg->endpoint[n - 1] == '/')
		cfg->endpoint[--n] = '\0';
	if (!ro->addressing)
		cfg->virtual_hosted = !(endpoint && *endpoint);
	else if (!strcmp(ro->addressing, "path") || !strcmp(ro->addressing, "virtual"))
		cfg->virtual_hosted = !strcmp(ro->addressing, "virtual");
	else
		return log_error("s3_addressing=%s: path or virtual", ro->addressing),
		       -EINVAL;
	return 0;
}

/*
 * Credentials are loaded: keep them out of reach.  No core dump (which
 * would hold them) and no ptrace by the same uid (PR_SET_DUMPABLE 0);
 * the environment's copies wiped in place, where /proc/PID/environ shows
 * them, and removed.  A child the mount starts never gets them either.
 */
static void secrets_hide(void)
{
	static const char *const names[] = { "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN" };

	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
		log_warn("prctl(PR_SET_DUMPABLE): %s: a core dump could hold the "
			 "credentials", strerror(errno));
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		char *v = getenv(names[i]);

		if (v)
			explicit_bzero(v, strlen(v));
		unsetenv(names[i]);
	}
}

/* Make @remote's s3, its keys and listings empty. */
static int s3_new(struct remote *remote)
{
	struct remote_s3 *s3 = calloc(1, sizeof(*s3));

	if (!s3)
		return -ENOMEM;
	pthread_rwlock_init(&s3->keys.lock, NULL);
	pthread_mutex_init(&s3->keys.reload, NULL);
	pthread_mutex_init(&s3->listed_lock, NULL);
	remote->s3 = s3;
	return 0;
}

int remote_s3_init(struct remote *remote, const struct remote_options *ro)
{
	const char *profile = ro->profile ?: getenv("AWS_PROFILE") ?: "default";
	struct remote_config *cfg = &remote->cfg;
	struct profile_values v = { 0 };
	char *from = NULL;
	int rc = s3_new(remote);

	if (rc)
		return rc;
	cfg->sign = !ro->no_sign_request;
	if (cfg->sign)
		rc = find_credentials(ro, profile, &v, &from);
	if (!rc && !v.region) {
		char path[4096];

		home_file("AWS_CONFIG_FILE", ".aws/config", path, sizeof(path));
		read_profile(path, profile, &v);
	}
	rc = rc ?: find_location(cfg, ro, &v);
	if (!rc && cfg->sign && v.key_id && v.secret) {
		keys_publish(&remote->s3->keys, &v);
		secrets_hide();
		if (from)
			rc = keys_follow(&remote->s3->keys, from, profile);
		from = NULL;
	}
	free(from);
	profile_values_free(&v);
	return rc;
}

int remote_s3_split(const char *name, char **bucket, char **key, char *msg,
		    size_t msg_len)
{
	const char *b = name + 5, *slash = strchr(b, '/');

	*bucket = *key = NULL;
	if (!slash || slash == b)
		return log_format(msg, msg_len, -EINVAL, "%s: not s3://BUCKET/KEY", name);
	*bucket = strndup(b, slash - b);
	*key = strdup(slash + 1);
	if (!*bucket || !*key) {
		free(*bucket);
		free(*key);
		*bucket = *key = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* The scheme ("https://") and host[:port] of the endpoint. */
static void endpoint_parts(const struct remote_config *cfg, char *scheme,
			   size_t scap, char *host, size_t hcap)
{
	const char *e = cfg->endpoint, *h = strstr(e, "://") + 3;
	size_t hl = strcspn(h, "/");

	snprintf(scheme, scap, "%.*s", (int)(h - e), e);
	snprintf(host, hcap, "%.*s", (int)hl, h);
}

int remote_s3_object(struct remote_object *o, const char *bucket,
		     const char *key, char *msg, size_t msg_len)
{
	char scheme[16], host[REMOTE_HOST_MAX], ekey[3 * S3_KEY_MAX + 1];
	char ebucket[3 * 64 + 1];
	const struct remote_config *cfg = &o->remote->cfg;
	int n;

	if (cfg->sign && !o->remote->s3->keys.cur.key_id[0])	/* set before any thread */
		return log_format(msg, msg_len, -EACCES, "%s: no AWS credentials (from "
				  "-o credentials=FILE, AWS_ACCESS_KEY_ID and "
				  "AWS_SECRET_ACCESS_KEY, or ~/.aws/credentials); "
				  "use -o no_sign_request for a public bucket", o->name);
	if (sigv4_uri_encode(key, strlen(key), true, ekey, sizeof(ekey)) < 0 ||
	    sigv4_uri_encode(bucket, strlen(bucket), false, ebucket, sizeof(ebucket)) < 0)
		return log_format(msg, msg_len, -ENAMETOOLONG, "%s: name too long", o->name);
	endpoint_parts(cfg, scheme, sizeof(scheme), host, sizeof(host));
	if (cfg->virtual_hosted) {
		if (snprintf(o->host, sizeof(o->host), "%s.%s", bucket, host) >=
		    (int)sizeof(o->host))
			return log_format(msg, msg_len, -ENAMETOOLONG, "%s: host name "
					  "too long", o->name);
		n = snprintf(o->url, sizeof(o->url), "%s%s/%s", scheme, o->host, ekey);
		o->sign_path = malloc(strlen(key) + 2);
		if (o->sign_path)
			sprintf(o->sign_path, "/%s", key);
	} else {
		snprintf(o->host, sizeof(o->host), "%s", host);
		n = snprintf(o->url, sizeof(o->url), "%s/%s%s%s", cfg->endpoint,
			     ebucket, *key ? "/" : "", ekey);
		o->sign_path = malloc(strlen(bucket) + strlen(key) + 3);
		if (o->sign_path)
			sprintf(o->sign_path, "/%s%s%s", bucket, *key ? "/" : "", key);
	}
	if (n >= (int)sizeof(o->url))
		return log_format(msg, msg_len, -ENAMETOOLONG, "%s: URL too long", o->name);
	if (!o->sign_path)
		return -ENOMEM;
	if (!cfg->sign) {
		free(o->sign_path);
		o->sign_path = NULL;
	}
	o->signer = o->sign_path ? &s3_signer : NULL;
	return 0;
}

/* Decode the five XML entities of @n bytes at @s into @out. */
static size_t xml_text(const char *s, size_t n, char *out)
{
	static const struct { const char *ent; char c; } ents[] = {
		{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
		{ "&quot;", '"' }, { "&apos;", '\'' },
	};
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		size_t k;

		for (k = 0; s[i] == '&' && k < 5; k++)
			if (!strncmp(s + i, ents[k].ent, strlen(ents[k].ent)))
				break;
		if (s[i] == '&' && k < 5) {
			out[o++] = ents[k].c;
			i += strlen(ents[k].ent) - 1;
		} else {
			out[o++] = s[i];
		}
	}
	out[o] = '\0';
	return o;
}

/* The text of the first <@tag> in [@p, @end), decoded into @out. */
static bool xml_field(const char *p, const char *end, const char *tag,
		      char *out, size_t cap)
{
	char open[64], close[64];
	const char *a, *b;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(p, open);
	if (!a || a >= end)
		return false;
	a += strlen(open);
	b = strstr(a, close);
	if (!b || b > end || (size_t)(b - a) >= cap)
		return false;
	xml_text(a, b - a, out);
	return true;
}

/* A growing list of names. */
struct name_list {
	char **names;		/* malloc'ed names */
	size_t nr;		/* entries used */
	size_t cap;		/* entries allocated */
};

static int list_push(struct name_list *l, const char *bucket, const char *key)
{
	if (array_grow((void **)&l->names, &l->cap, l->nr + 1, sizeof(*l->names)))
		return -ENOMEM;
	if (asprintf(&l->names[l->nr], "s3://%s/%s", bucket, key) < 0)
		return -ENOMEM;
	l->nr++;
	return 0;
}

/* Remember what a listing says of s3://@bucket/@key, for lookups. */
static int remember(struct remote_s3 *s3, const char *bucket, const char *key,
		    const char *p, const char *end)
{
	struct listed_object *o = calloc(1, sizeof(*o)), *old;
	char size[32], when[64];
	struct tm tm = { 0 };

	if (!o || asprintf(&o->name, "s3://%s/%s", bucket, key) < 0) {
		free(o);
		return -ENOMEM;
	}
	if (!xml_field(p, end, "Size", size, sizeof(size)) ||
	    !xml_field(p, end, "ETag", o->etag, sizeof(o->etag)) ||
	    !xml_field(p, end, "LastModified", when, sizeof(when)) ||
	    !strptime(when, "%Y-%m-%dT%H:%M:%S", &tm)) {
		free(o->name);
		free(o);
		return 0;	/* not remembered: the shard will be probed */
	}
	o->size = strtoull(size, NULL, 10);
	o->mtime = timegm(&tm);
	pthread_mutex_lock(&s3->listed_lock);
	HASH_REPLACE_STR(s3->listed, name, o, old);
	pthread_mutex_unlock(&s3->listed_lock);
	if (old) {
		free(old->name);
		free(old);
	}
	return 0;
}

/* Collect the shard keys (path_is_shard_name) of one page (into @l
 * unless NULL) and remember
 * every object; its continuation token into @next. */
static int parse_page(struct remote_s3 *s3, const char *body, const char *bucket,
		      struct name_list *l, char *next, size_t next_cap)
{
	const char *p = body;
	char key[S3_KEY_MAX + 1], truncated[8] = "";
	int rc = 0;

	while (!rc && (p = strstr(p, "<Contents>"))) {
		const char *end = strstr(p, "</Contents>");

		if (!end || !xml_field(p, end, "Key", key, sizeof(key)))
			return -EPROTO;
		rc = remember(s3, bucket, key, p, end);
		if (!rc && l && path_is_shard_name(key))
			rc = list_push(l, bucket, key);
		p = end;
	}
	next[0] = '\0';
	xml_field(body, body + strlen(body), "IsTruncated", truncated, sizeof(truncated));
	if (!rc && !strcmp(truncated, "true") &&
	    !xml_field(body, body + strlen(body), "NextContinuationToken", next, next_cap))
		return -EPROTO;
	return rc;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* GET one page of the listing; the query is built encoded. */
static int list_page(struct remote_object *o, const char *prefix, const char *token,
		     char **body, char *msg, size_t msg_len)
{
	char eprefix[3 * S3_KEY_MAX + 1], etoken[3 * 1024 + 1], query[8192];
	size_t len;

	if (sigv4_uri_encode(prefix, strlen(prefix), false, eprefix, sizeof(eprefix)) < 0 ||
	    sigv4_uri_encode(token, strlen(token), false, etoken, sizeof(etoken)) < 0)
		return log_format(msg, msg_len, -ENAMETOOLONG, "%s: prefix too long", o->name);
	snprintf(query, sizeof(query), "%s%s%slist-type=2&prefix=%s",
		 *token ? "continuation-token=" : "", etoken, *token ? "&" : "", eprefix);
	return remote_http_get_body(o, query, S3_LIST_PAGE_MAX, body, &len, msg, msg_len);
}

/* Record s3://@bucket/@prefix as listed (as far as it goes). */
static void prefix_done(struct remote_s3 *s3, const char *name)
{
	struct listed_prefix *p = calloc(1, sizeof(*p));

	if (!p || !(p->name = strdup(name))) {
		free(p);
		return;		/* only costs probes */
	}
	pthread_mutex_lock(&s3->listed_lock);
	HASH_ADD_KEYPTR(hh, s3->prefixes, p->name, strlen(p->name), p);
	pthread_mutex_unlock(&s3->listed_lock);
}

/* List s3://@bucket/@prefix, remembering every object and collecting the
 * shard keys into @l (unless NULL), at most @max_pages pages. */
static int list_prefix(struct remote *remote, const char *bucket, const char *prefix,
		       struct name_list *l, unsigned max_pages, char *msg,
		       size_t msg_len)
{
	struct remote_object o = { .remote = remote };
	char token[1024] = "";
	unsigned pages = 0;
	int rc;

	if (asprintf(&o.name, "s3://%s/%s", bucket, prefix) < 0)
		return -ENOMEM;
	rc = remote_s3_object(&o, bucket, "", msg, msg_len);
	do {
		char *body = NULL;

		rc = rc ?: list_page(&o, prefix, token, &body, msg, msg_len);
		if (!rc && (rc = parse_page(remote->s3, body, bucket, l, token,
					    sizeof(token))) == -EPROTO)
			log_format(msg, msg_len, rc, "%s: malformed ListObjectsV2 answer",
				   o.name);
		free(body);
	} while (!rc && token[0] && ++pages < max_pages);
	/* listed, partly or not at all (no ListBucket permission): either
	 * way not again; shards it did not show are probed */
	prefix_done(remote->s3, o.name);
	free(o.sign_path);
	free(o.name);
	return rc;
}

int remote_s3_lookup(struct remote_object *o)
{
	const char *slash = strrchr(o->name, '/');
	struct listed_object *found;
	struct listed_prefix *done;
	struct remote_s3 *s3 = o->remote->s3;
	char *bucket, *key, msg[256];

	pthread_mutex_lock(&s3->listed_lock);
	HASH_FIND(hh, s3->prefixes, o->name, (size_t)(slash + 1 - o->name), done);
	pthread_mutex_unlock(&s3->listed_lock);
	if (!done && !remote_s3_split(o->name, &bucket, &key, msg, sizeof(msg))) {
		key[strrchr(key, '/') ? strrchr(key, '/') - key + 1 : 0] = '\0';
		if (list_prefix(o->remote, bucket, key, NULL, S3_LOOKUP_PAGES_MAX, msg,
				sizeof(msg)))
			log_debug("%s", msg);	/* the probe will say what is wrong */
		free(bucket);
		free(key);
	}
	pthread_mutex_lock(&s3->listed_lock);
	HASH_FIND_STR(s3->listed, o->name, found);
	if (found) {
		o->size = found->size;
		o->mtime = found->mtime;
		memcpy(o->etag, found->etag, sizeof(o->etag));
	}
	pthread_mutex_unlock(&s3->listed_lock);
	return found ? 0 : -ENOENT;
}

void remote_s3_prefix_hint(struct remote *remote, const char *name, char *msg,
			   size_t msg_len)
{
	struct name_list l = { 0 };
	char *bucket, *key, *prefix = NULL, ignored[256];
	size_t n = strlen(msg);

	if (remote_s3_split(name, &bucket, &key, ignored, sizeof(ignored)))
		return;
	if (*key && asprintf(&prefix, "%s/", key) > 0 &&
	    !list_prefix(remote, bucket, prefix, &l, 1, ignored, sizeof(ignored)) &&
	    l.nr)
		snprintf(msg + n, msg_len - n, "; %s is a prefix with shards under "
			 "it: mount them with %s/ (the '/' at the end lists the prefix)",
			 name, name);
	for (size_t i = 0; i < l.nr; i++)
		free(l.names[i]);
	free(l.names);
	free(prefix);
	free(bucket);
	free(key);
}

void remote_s3_release(struct remote_s3 *s3)
{
	struct listed_object *o, *otmp;
	struct listed_prefix *p, *ptmp;

	if (!s3)
		return;
	HASH_ITER(hh, s3->listed, o, otmp) {
		HASH_DEL(s3->listed, o);
		free(o->name);
		free(o);
	}
	HASH_ITER(hh, s3->prefixes, p, ptmp) {
		HASH_DEL(s3->prefixes, p);
		free(p->name);
		free(p);
	}
	pthread_mutex_destroy(&s3->listed_lock);
	keys_forget(&s3->keys);
	free(s3);
}

int remote_s3_list(struct remote *remote, const char *bucket, const char *prefix,
		   int (*add)(void *arg, const char *name, size_t len), void *arg,
		   char *msg, size_t msg_len)
{
	struct name_list l = { 0 };
	int rc = list_prefix(remote, bucket, prefix, &l, UINT32_MAX, msg, msg_len);

	if (!rc && !l.nr)
		rc = log_format(msg, msg_len, -ENOENT, "s3://%s/%s: no " PATH_SHARD_SUFFIXES
				" objects under the prefix", bucket, prefix);
	if (l.nr)
		qsort(l.names, l.nr, sizeof(*l.names), cmp_name);
	for (size_t i = 0; i < l.nr; i++) {
		if (!rc)
			rc = add(arg, l.names[i], strlen(l.names[i]));
		free(l.names[i]);
	}
	free(l.names);
	return rc;
}
