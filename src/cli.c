/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c - options shared by shardfs and shardfs-index.
 *
 * Parsing uses libfuse's fuse_opt, so "-o a=b,c" works the same for both
 * commands, and shardfs can hand what it does not know to libfuse.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fuse_log.h>

#include "cli.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

/* Longest option name compared for a suggestion; longer ones get none. */
#define CLI_OPT_NAME_MAX 64

/* Longest libfuse message joined from pieces; longer ones are cut. */
#define CLI_FUSE_LINE_MAX 1024

#define CLI_OPT(t, field, value) { t, offsetof(struct cli_index, field), value }

const struct fuse_opt cli_index_opts[] = {
	CLI_OPT("quiet", quiet, 1),
	CLI_OPT("skip_bad_shards", skip_bad_shards, 1),
	CLI_OPT("scan_threads=%u", scan_threads, 0),
	CLI_OPT("loglevel=%s", loglevel, 0),
	CLI_OPT("layout=%s", layout, 0),
	CLI_OPT("label=%s", label, 0),
	CLI_OPT("classnames=%s", classnames, 0),
	CLI_OPT("unlabeled=%s", unlabeled, 0),
	CLI_OPT("index=%s", index, 0),
	CLI_OPT("index_mode=%s", index_mode, 0),
	CLI_OPT("build_memory=%s", build_memory, 0),
	CLI_OPT("endpoint=%s", remote.endpoint, 0),
	CLI_OPT("region=%s", remote.region, 0),
	CLI_OPT("s3_addressing=%s", remote.addressing, 0),
	CLI_OPT("aws_profile=%s", remote.profile, 0),
	CLI_OPT("credentials=%s", remote.credentials, 0),
	CLI_OPT("no_sign_request", remote.no_sign_request, 1),
	CLI_OPT("cacert=%s", remote.cacert, 0),
	CLI_OPT("chunk_size=%s", remote.chunk_size, 0),
	CLI_OPT("cache_mem=%s", remote.cache_mem, 0),
	CLI_OPT("remote_timeout=%s", remote.timeout, 0),
	CLI_OPT("remote_attempts=%s", remote.attempts, 0),
	CLI_OPT("cache_dir=%s", remote.cache_dir, 0),
	CLI_OPT("cache_size=%s", remote.cache_size, 0),
	CLI_OPT("index_fetch=%s", remote.index_fetch, 0),
	CLI_OPT("-h", show_help, 1),
	CLI_OPT("--help", show_help, 1),
	CLI_OPT("-V", show_version, 1),
	CLI_OPT("--version", show_version, 1),
	FUSE_OPT_END
};

const char cli_index_help[] =
	"    -o layout=LAYOUT       tree (as stored), shards (a directory per\n"
	"                           shard) or classes (<label>/<file>)\n"
	"    -o label=SOURCE        classes: cls (the .cls member, default)\n"
	"                           or json:FIELD (a field of the .json)\n"
	"    -o classnames=FILE     classes: \"label name\" lines mapping labels\n"
	"    -o unlabeled=DIR       classes: where unlabeled samples go\n"
	"                           (default _unlabeled; skip: leave out)\n"
	"    -o index=PATH          the index file (default: next to the first\n"
	"                           shard, else in the cache directory)\n"
	"    -o index_mode=MODE     auto (default): use a valid index, else\n"
	"                           build and save one; require; rebuild; off\n"
	"    -o cache_dir=DIR       also keeps decoded spans of compressed shards\n"
	"                           (gzip and zstd: each span decoded once; xz,\n"
	"                           bzip2, lz4, lzip, lzma, compress: served\n"
	"                           only so),\n"
	"                           up to cache_size of them as well\n"
	"    -o build_memory=SIZE   member records a build into the index file\n"
	"                           holds before sorting them out to disk\n"
	"                           (default 128M, at least 16M)\n"
	"    -o skip_bad_shards     index the valid shards, skip the rest\n"
	"    -o scan_threads=N      threads that scan shards (default: CPUs)\n"
	"    -o quiet               no summary line\n"
	"    -o loglevel=LEVEL      error, warn, info (default), debug\n"
	"    -h, --help             this help\n"
	"    -V, --version          print the version\n"
	REMOTE_OPTIONS_HELP;

static int take_shards(void *data, const char *arg, int key,
		       struct fuse_args *out)
{
	struct cli_index *cli = data;

	if (key != FUSE_OPT_KEY_NONOPT || cli->shards)
		return 1;
	/* a copy: fuse_opt_parse may free the vector @arg lives in */
	cli->shards = strdup(arg);
	return cli->shards ? 0 : -1;
}

/*
 * libfuse's messages go where ours go, with our prefix and levels.  It
 * writes some lines in pieces ("unknown option(s): `", "-o ", "bogus'\n"):
 * pieces are joined until the newline, so that each is one line.
 */
static void fuse_log_to_ours(enum fuse_log_level level, const char *fmt,
			     va_list ap)
{
	/* file-state: libfuse's log callback takes no argument, and its
	 * messages are the process's, as ours are (log.c) */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static char line[CLI_FUSE_LINE_MAX];
	static size_t len;

	pthread_mutex_lock(&lock);
	vsnprintf(line + len, sizeof(line) - len, fmt, ap);
	len = strlen(line);
	if (len && (line[len - 1] == '\n' || len == sizeof(line) - 1)) {
		log_msg(level <= FUSE_LOG_ERR ? LOG_LEVEL_ERROR :
			level == FUSE_LOG_WARNING ? LOG_LEVEL_WARN :
			level <= FUSE_LOG_INFO ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG,
			"%s", line);
		len = 0;
		line[0] = '\0';
	}
	pthread_mutex_unlock(&lock);
}

int cli_index_parse(struct fuse_args *args, struct cli_index *cli)
{
	fuse_set_log_func(fuse_log_to_ours);
	return fuse_opt_parse(args, cli, cli_index_opts, take_shards);
}

/* Edits (insert, delete, replace, swap two neighbours) from @a to @b. */
static size_t edit_distance(const char *a, size_t n, const char *b, size_t m)
{
	size_t d[CLI_OPT_NAME_MAX + 1][CLI_OPT_NAME_MAX + 1];

	assert(n <= CLI_OPT_NAME_MAX && m <= CLI_OPT_NAME_MAX);
	for (size_t i = 0; i <= n; i++)
		for (size_t j = 0; j <= m; j++) {
			size_t best = i && j ? d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
					     : i + j;

			if (i && d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (j && d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[n][m];
}

/* Length of the name in option template or option @s (up to '=' or ' '). */
static size_t opt_name_len(const char *s)
{
	return strcspn(s, "= ,");
}

const char *cli_nearest_option(const char *opt, const struct fuse_opt *const tables[])
{
	size_t n = opt_name_len(opt), best = n / 3 + 1;
	const char *found = NULL;

	if (n > CLI_OPT_NAME_MAX)
		return NULL;
	for (size_t t = 0; tables[t]; t++)
		for (const struct fuse_opt *o = tables[t]; o->templ; o++) {
			size_t m = opt_name_len(o->templ), d;

			if (o->templ[0] == '-' || m > CLI_OPT_NAME_MAX)
				continue;	/* -h, --help: not -o options */
			d = edit_distance(opt, n, o->templ, m);
			if (d < best) {
				best = d;
				found = o->templ;
			}
		}
	return found && best ? found : NULL;
}

/* Suggest, for one -o option @opt (@len bytes), the option it resembles. */
static void suggest_one(const char *opt, size_t len,
			const struct fuse_opt *const tables[])
{
	char name[CLI_OPT_NAME_MAX + 1];
	const char *near;

	if (len > CLI_OPT_NAME_MAX)
		return;
	memcpy(name, opt, len);
	name[len] = '\0';
	near = cli_nearest_option(name, tables);
	if (near)
		log_error("unknown option '%s': did you mean '%.*s'?", name,
			  (int)opt_name_len(near), near);
}

void cli_suggest_options(const struct fuse_args *args,
			 const struct fuse_opt *const tables[])
{
	for (int i = 1; i < args->argc; i++) {
		const char *a = args->argv[i];

		if (!strcmp(a, "-o") && i + 1 < args->argc)
			a = args->argv[++i];
		else if (!strncmp(a, "-o", 2))
			a += 2;
		else
			continue;
		/* "\," is an escaped comma (fsname=...): not a separator */
		for (const char *p = a;; p++) {
			if (*p == '\\' && p[1]) {
				p++;
				continue;
			}
			if (*p && *p != ',')
				continue;
			suggest_one(a, (size_t)(p - a), tables);
			if (!*p)
				break;
			a = p + 1;
		}
	}
}

static void print_progress(void *arg, const struct shard_index_progress *p)
{
	fprintf(stderr, "\rshardfs: indexing %u/%u shards, %llu members, %.1f MB",
		p->shards_done, p->shards_total, (unsigned long long)p->members,
		p->bytes / 1e6);
	if (p->shards_done == p->shards_total)
		fputc('\n', stderr);
}

/* -o cache_dir, -o cache_size: the decoded-span cache (span_cache.h). */
static int cache_init(struct cli_config *cfg, const struct cli_index *cli)
{
	const char *dir = cli->remote.cache_dir;
	uint64_t size;
	char msg[512];

	if (remote_cache_size(&cli->remote, &size))
		return -EINVAL;
	if (!dir)
		return 0;
	if (span_cache_init(&cfg->spans, dir, size, msg, sizeof(msg)))
		return log_error("%s", msg), -EINVAL;
	cfg->build.spans = &cfg->spans;
	return 0;
}

int cli_config_init(struct cli_config *cfg, const struct cli_index *cli)
{
	enum log_level level;
	uint64_t budget = 0;
	int rc;

	*cfg = (struct cli_config){ 0 };
	if (cli->loglevel && log_parse_level(cli->loglevel, &level))
		return log_error("unknown loglevel '%s'", cli->loglevel), -EINVAL;
	log_set_level(cli->loglevel ? level : cli->quiet ? LOG_LEVEL_WARN
							 : LOG_LEVEL_INFO);
	if (cli->index_mode && index_mode_parse(cli->index_mode, &cfg->store.mode))
		return log_error("unknown index_mode '%s'", cli->index_mode), -EINVAL;
	if (layout_init(&cfg->layout, cli->layout, cli->label, cli->classnames,
			cli->unlabeled))
		return -EINVAL;
	if (cache_init(cfg, cli))
		return -EINVAL;
	cfg->store.path = cli->index;
	cfg->store.options_hash = layout_hash(&cfg->layout);
	cfg->build.layout = &cfg->layout;
	cfg->build.threads = cli->scan_threads;
	cfg->build.skip_bad_shards = cli->skip_bad_shards;
	if (cli->build_memory && (parse_size(cli->build_memory, &budget) ||
				  budget < SHARD_INDEX_BUILD_BUDGET_MIN || budget > SIZE_MAX))
		return log_error("build_memory=%s: a size of at least %uM expected",
				 cli->build_memory, SHARD_INDEX_BUILD_BUDGET_MIN >> 20), -EINVAL;
	cfg->build.memory_budget = (size_t)budget;
	if (isatty(STDERR_FILENO) && !cli->quiet)
		cfg->build.progress = print_progress;
	rc = remote_init(&cfg->remote, &cli->remote);
	cfg->build.remote = cfg->remote;
	return rc;
}

void cli_config_release(struct cli_config *cfg)
{
	layout_release(&cfg->layout);
	span_cache_release(&cfg->spans);
	remote_release(cfg->remote);
	cfg->remote = NULL;
}

void cli_index_free(struct cli_index *cli)
{
	free(cli->shards);
	free(cli->layout);
	free(cli->label);
	free(cli->classnames);
	free(cli->unlabeled);
	free(cli->index);
	free(cli->index_mode);
	free(cli->build_memory);
	free(cli->loglevel);
	remote_options_free(&cli->remote);
}

void cli_print_encodings(const struct shard_set *set)
{
	static const char *const names[] = { "gzip", "zstd", "xz", "bzip2", "lz4",
					     "lzip", "lzma", "compress" };
	unsigned count[ARRAY_SIZE(names)] = { 0 }, whole = 0;
	char line[256] = "";
	size_t len = 0;

	for (uint32_t i = 0; i < set->nr; i++) {
		const char *e = set->shards[i].src ? set->shards[i].src->encoding : NULL;
		int k = e ? name_table_find(names, ARRAY_SIZE(names), e) : -1;

		if (k < 0)
			continue;
		count[k]++;
		whole += k >= 2;	/* after gzip and zstd: no seek points */
	}
	for (size_t k = 0; k < ARRAY_SIZE(names); k++)
		if (count[k])
			len += snprintf(line + len, sizeof(line) - len, "%s%u %s",
					len ? ", " : "", count[k], names[k]);
	if (len)
		log_info("compressed shards: %s%s", line, whole ?
			 "; xz, bzip2, lz4, lzip, lzma and compress are served from the "
			 "decoded cache (cache_dir), decoded whole on their first read" : "");
}

void cli_print_summary(const struct shard_index *idx, const struct layout *layout,
		       uint32_t nr_shards, double seconds,
		       const struct index_store_result *res)
{
	static const char *const origin[] = { "loaded", "extended", "built" };
	const struct shard_index_counts *c = &idx->counts;

	log_info("%u shards, %llu files, %llu dirs, %llu symlinks, %llu bytes, "
		 "%llu duplicates, %llu skipped in %.2f s",
		 nr_shards - c->bad_shards, (unsigned long long)c->files,
		 (unsigned long long)c->dirs, (unsigned long long)c->symlinks,
		 (unsigned long long)c->bytes, (unsigned long long)c->duplicates,
		 (unsigned long long)(c->skipped + c->special), seconds);
	if (res->origin == INDEX_EXTENDED)
		log_info("%s: extended; shards appended and scanned: %u, taken from "
			 "the index: %u", res->path, nr_shards - res->base_shards,
			 res->base_shards);
	if (c->bad_shards)
		log_warn("%u bad shards skipped", c->bad_shards);
	if (c->unlabeled)
		log_warn("%llu samples without a label from label=%s: %s%s%s",
			 (unsigned long long)c->unlabeled, layout->label_source,
			 layout->unlabeled ? "under " : "left out (unlabeled=skip)",
			 layout->unlabeled ? layout->unlabeled : "",
			 layout->unlabeled ? "/" : "");
	log_debug("index: %u entries, %.1f bytes per entry, %llu hard links, "
		  "%llu special files skipped", shard_index_nr(idx),
		  shard_index_bytes_per_entry(idx), (unsigned long long)c->hardlinks,
		  (unsigned long long)c->special);
	log_debug("index file %s: %s%s", res->path[0] ? res->path : "none",
		  origin[res->origin], res->saved ? ", saved" : "");
}
