/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pack_main.c - shardfs-pack: pack a directory tree into WebDataset tar shards.
 *
 * Parses the command line, prepares the output directory, then runs the
 * stages of pack.h in order (walk, plan, write, manifest) and prints a
 * summary.  Exit status: 0 on success, 1 when packing failed, 2 for a
 * usage error.  Failures are reported where they happen; only running
 * out of memory is reported here.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"
#include "shardfs/util.h"

/* --max-size when none is given: 1 GiB, in the recommended range. */
#define DEFAULT_MAX_SIZE (1ull << 30)
/* --jobs defaults to the online CPUs, but no more than this. */
#define DEFAULT_JOBS_MAX 4
/* Most threads --jobs may ask for. */
#define JOBS_MAX 64
/*
 * The readers of a typical training job that a shard set should have at
 * least one shard each for: one node of 8 GPUs with 8 DataLoader workers
 * each.  Workers take whole shards; with fewer shards, some read nothing.
 */
#define JOB_READERS_TYPICAL 64

/* Everything the command line says. */
struct pack_options {
	const char *root;		/* SRC_DIR without trailing '/' */
	const char *out;		/* OUT_PATTERN */
	struct pack_walk_options walk;	/* how SRC_DIR is read */
	struct pack_plan_options plan;	/* how samples become shards */
	bool resume;			/* keep shards of an interrupted run */
	bool quiet;			/* no progress line, no summary */
	bool no_index;			/* do not write the shardfs index */
	struct pack_compress compress;	/* --compress */
};

enum {
	OPT_SHUFFLE = 256,
	OPT_KEEP_OWNER,
	OPT_WHOLE_SECONDS,
	OPT_EXACT_MTIME,
	OPT_RESUME,
	OPT_NO_INDEX,
	OPT_COMPRESS,
};

static const struct option long_options[] = {
	{ "max-size", required_argument, NULL, 's' },
	{ "max-count", required_argument, NULL, 'c' },
	{ "shuffle", optional_argument, NULL, OPT_SHUFFLE },
	{ "follow-symlinks", no_argument, NULL, 'L' },
	{ "keep-owner", no_argument, NULL, OPT_KEEP_OWNER },
	{ "whole-seconds", no_argument, NULL, OPT_WHOLE_SECONDS },
	{ "exact-mtime", no_argument, NULL, OPT_EXACT_MTIME },
	{ "resume", no_argument, NULL, OPT_RESUME },
	{ "no-index", no_argument, NULL, OPT_NO_INDEX },
	{ "compress", required_argument, NULL, OPT_COMPRESS },
	{ "jobs", required_argument, NULL, 'j' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static void usage(FILE *f)
{
	fputs("Usage: " PACK_PROG " [OPTION]... SRC_DIR OUT_PATTERN\n"
"Pack the tree under SRC_DIR into WebDataset tar shards named by OUT_PATTERN\n"
"(out/shard-%06d.tar or out/shard-{000000..999999}.tar) and describe them\n"
"in shards.json next to the shards, and write the index shardfs mounts\n"
"them with (the one shardfs-index would write).\n"
"\n"
"  -s, --max-size=SIZE    start a new shard before one passes SIZE bytes\n"
"                         (suffixes K, M, G, T; default 1G)\n"
"  -c, --max-count=N      at most N samples per shard (default: no limit;\n"
"                         a warning says when the set has fewer than 64)\n"
"      --shuffle[=SEED]   write samples in a random order fixed by SEED\n"
"                         (default 0) instead of sorted by key\n"
"  -L, --follow-symlinks  store what symbolic links point to\n"
"      --keep-owner       record owner and group (default: 0, no names)\n"
"      --exact-mtime      keep sub-second mtimes (a PAX header each, 1 KiB);\n"
"                         by default mtimes are whole seconds\n"
"      --whole-seconds    the default (kept for old command lines)\n"
"      --resume           keep the shards an interrupted run completed\n"
"      --no-index         do not write the shardfs index\n"
"      --compress=gzip|zstd[:LEVEL]\n"
"                         compress each shard, one gzip member or zstd frame\n"
"                         per MiB, so that shardfs reads it at random; name\n"
"                         the shards .tar.gz or .tar.zst (not with --resume)\n"
"  -j, --jobs=N           threads reading the tree and writing shards\n"
"                         (default: online CPUs, at most 4)\n"
"  -q, --quiet            no progress line and no summary\n"
"  -h, --help             show this help\n"
"  -V, --version          show the version\n", f);
}

/* Parse a decimal number of at least @min into *value. */
static int parse_u64(const char *s, uint64_t min, uint64_t *value,
		     char **end)
{
	errno = 0;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	*value = strtoull(s, end, 10);
	return errno || *value < min ? -EINVAL : 0;
}

/* Parse a whole option argument as a number of at least @min. */
static int parse_count(const char *s, uint64_t min, uint64_t *value)
{
	char *end;

	return parse_u64(s, min, value, &end) || *end ? -EINVAL : 0;
}

/* Apply option @c with argument @arg; -EINVAL for a bad argument. */
static int parse_option(struct pack_options *opt, int c, const char *arg)
{
	uint64_t jobs;

	switch (c) {
	case 's':
		return parse_size(arg, &opt->plan.max_size) ||
		       !opt->plan.max_size ? -EINVAL : 0;
	case 'c':
		return parse_count(arg, 1, &opt->plan.max_count);
	case OPT_SHUFFLE:
		opt->plan.shuffle = true;
		return arg ? parse_count(arg, 0, &opt->plan.seed) : 0;
	case 'L':
		opt->walk.follow_symlinks = true;
		return 0;
	case OPT_KEEP_OWNER:
		opt->walk.keep_owner = true;
		return 0;
	case OPT_WHOLE_SECONDS:
	case OPT_EXACT_MTIME:
		opt->walk.whole_seconds = c == OPT_WHOLE_SECONDS;
		return 0;
	case OPT_RESUME:
		opt->resume = true;
		return 0;
	case OPT_NO_INDEX:
		opt->no_index = true;
		return 0;
	case OPT_COMPRESS:
		return pack_compress_parse(arg, &opt->compress);
	case 'j':
		if (parse_count(arg, 1, &jobs) || jobs > JOBS_MAX)
			return -EINVAL;
		opt->walk.jobs = (unsigned)jobs;
		return 0;
	case 'q':
		opt->quiet = true;
		return 0;
	default:
		return -EINVAL;
	}
}

/* The long name of option @c, for messages. */
static const char *option_name(int c)
{
	for (const struct option *o = long_options; o->name; o++)
		if (o->val == c)
			return o->name;
	return "?";
}

static void set_defaults(struct pack_options *opt)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(opt, 0, sizeof(*opt));
	opt->plan.max_size = DEFAULT_MAX_SIZE;
	opt->plan.max_count = UINT64_MAX;
	/* training has no use for sub-second mtimes; they cost 1 KiB each */
	opt->walk.whole_seconds = true;
	opt->walk.jobs = cpus < 1 ? 1 : cpus > DEFAULT_JOBS_MAX ?
		DEFAULT_JOBS_MAX : (unsigned)cpus;
}

/* Remove trailing slashes from @path, in place: "/" becomes "". */
static char *strip_slashes(char *path)
{
	size_t len = strlen(path);

	while (len > 0 && path[len - 1] == '/')
		path[--len] = '\0';
	return path;
}

/* Fill @opt from the command line; 1 when it asked for help or version. */
static int parse_args(int argc, char **argv, struct pack_options *opt)
{
	int c;

	set_defaults(opt);
	while ((c = getopt_long(argc, argv, "s:c:Lj:qhV", long_options,
				NULL)) != -1) {
		if (c == 'h' || c == 'V') {
			if (c == 'h')
				usage(stdout);
			else
				printf(PACK_PROG " " SHARDFS_VERSION "\n");
			return 1;
		}
		if (c == '?' || parse_option(opt, c, optarg)) {
			if (c != '?')
				pack_error("--%s: invalid argument '%s'",
					   option_name(c), optarg);
			fputs("Try '" PACK_PROG " --help'.\n", stderr);
			return -EINVAL;
		}
	}
	if (argc - optind != 2 || !argv[optind][0]) {
		usage(stderr);
		return -EINVAL;
	}
	opt->root = strip_slashes(argv[optind]);
	opt->out = argv[optind + 1];
	if (opt->resume && opt->compress.kind != PACK_COMPRESS_NONE) {
		/* --resume tells a complete shard by its planned tar size */
		pack_error("--resume cannot be used with --compress");
		return -EINVAL;
	}
	return pack_compress_check_name(&opt->compress, opt->out);
}

/* Create directory @dir and its parents, as mkdir -p does. */
static int make_dirs(const char *dir)
{
	char path[PACK_PATH_MAX];
	size_t len = strlen(dir);

	if (len >= sizeof(path)) {
		pack_error("%s: path longer than %u bytes", dir,
			   PACK_PATH_MAX - 1);
		return -ENAMETOOLONG;
	}
	memcpy(path, dir, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (path[i] != '/' && path[i])
			continue;
		path[i] = '\0';
		if (mkdir(path, 0777) && errno != EEXIST)
			return pack_errno(path, "cannot create directory");
		path[i] = dir[i];
	}
	return 0;
}

/*
 * The nearest existing ancestor of @dir (itself if it exists), resolved:
 * @dir is inside a directory exactly when this is, so the check can be
 * made before anything is created.  NULL with errno set on failure.
 */
static char *real_existing(const char *dir)
{
	char path[PACK_PATH_MAX], *slash, *real;

	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return errno = ENAMETOOLONG, NULL;
	while (!(real = realpath(path, NULL)) && errno == ENOENT &&
	       (slash = strrchr(path, '/')))
		*(slash == path ? slash + 1 : slash) = '\0';
	if (!real && errno == ENOENT && !strchr(path, '/'))
		real = realpath(".", NULL);
	return real;
}

/* Refuse an output directory inside SRC_DIR: shards would pack themselves. */
static int check_outside(const char *src, const char *dir)
{
	char *real_src, *real_dir;
	int rc = 0;
	size_t n;

	real_src = realpath(src, NULL);
	if (!real_src)
		return pack_errno(src, "cannot read source directory");
	real_dir = real_existing(dir);
	if (!real_dir) {
		rc = pack_errno(dir, "cannot resolve");
		goto out_free_src;
	}
	n = strlen(real_src);
	if (!strncmp(real_dir, real_src, n) &&
	    (real_dir[n] == '/' || !real_dir[n] || n == 1)) {
		pack_error("%s: the output directory is inside SRC_DIR %s",
			   dir, src);
		rc = -EINVAL;
	}
	free(real_dir);
out_free_src:
	free(real_src);
	return rc;
}

/* Refuse a plan with more shards than OUT_PATTERN has names for. */
static int check_names(const struct pack_plan *plan,
		       const struct pack_pattern *pattern)
{
	uint64_t names = pattern->last - pattern->first;

	if (plan->shard_count && plan->shard_count - 1 > names) {
		pack_error("OUT_PATTERN has names for %" PRIu64 " shards, "
			   "this tree needs %zu: widen the range or raise "
			   "--max-size", names + 1, plan->shard_count);
		return -ERANGE;
	}
	return 0;
}

/*
 * Warn when the set has fewer shards than a typical job has readers
 * (JOB_READERS_TYPICAL), and say which --max-count makes that many.
 */
static void warn_few_shards(const struct pack_plan *plan)
{
	uint64_t per_shard = plan->samples / JOB_READERS_TYPICAL;

	if (plan->shard_count >= JOB_READERS_TYPICAL || !per_shard)
		return;
	pack_warn("%" PRIu64 " samples in %zu shard%s: fewer than the %d DataLoader "
		  "workers of one 8-GPU node (8 each), and workers take whole "
		  "shards, so most would read nothing; --max-count=%" PRIu64
		  " makes %d or more (see \"Recommended shard sizes\" in docs/pack.md)",
		  plan->samples, plan->shard_count, plan->shard_count == 1 ? "" : "s",
		  JOB_READERS_TYPICAL, per_shard, JOB_READERS_TYPICAL);
}

/* Warn about a shard of an earlier, larger run that follows this set. */
static void warn_stale(const struct pack_pattern *pattern, size_t count)
{
	char path[PACK_PATH_MAX];
	struct stat st;

	if (!pack_pattern_format(pattern, count, path, sizeof(path)) &&
	    !lstat(path, &st))
		pack_warn("%s: left by an earlier run, not part of this shard "
			  "set (see shards.json)", path);
}

static void print_summary(const struct pack_plan *plan, uint64_t skipped,
			  const struct pack_shard_result *results, double secs)
{
	uint64_t written = plan->bytes;
	size_t kept = 0;

	for (size_t i = 0; i < plan->shard_count; i++) {
		if (results[i].kept) {
			kept++;
			written -= plan->shards[i].bytes;
		}
	}
	printf("files    %" PRIu64 "\n", plan->files);
	printf("dirs     %" PRIu64 "\n", plan->dirs);
	printf("samples  %" PRIu64 "\n", plan->samples);
	printf("skipped  %" PRIu64 "\n", skipped);
	printf("shards   %zu (%zu kept from an earlier run)\n",
	       plan->shard_count, kept);
	printf("bytes    %" PRIu64 " (%" PRIu64 " written)\n", plan->bytes,
	       written);
	printf("time     %.2f s, %.1f MB/s\n", secs,
	       secs > 0 ? (double)written / secs / 1e6 : 0.0);
}

/* Write the planned shards and the manifest, then sum up. */
static int pack_produce(const struct pack_options *opt,
			const struct pack_pattern *pattern,
			const struct pack_plan *plan, uint64_t skipped,
			uint64_t start_ns)
{
	struct pack_write_options wopt = {
		.src_root = opt->root,
		.pattern = pattern,
		.follow_symlinks = opt->walk.follow_symlinks,
		.resume = opt->resume,
		.jobs = opt->walk.jobs,
		.compress = opt->compress,
	};
	struct pack_progress pr = {
		.total_files = plan->files,
		.total_bytes = plan->bytes,
	};
	struct pack_shard_result *results;
	int rc;

	results = calloc(plan->shard_count + 1, sizeof(*results));
	if (!results)
		return -ENOMEM;
	pack_progress_start(&pr, !opt->quiet);
	rc = pack_write_shards(plan, &wopt, &pr, results);
	pack_progress_stop();
	if (!rc)
		rc = pack_manifest_write(plan, pattern, results);
	if (!rc && !opt->no_index)
		rc = pack_index_write(pattern, plan->shard_count, opt->walk.jobs, results);
	if (!rc) {
		warn_stale(pattern, plan->shard_count);
		warn_few_shards(plan);
	}
	if (!rc && !opt->quiet)
		print_summary(plan, skipped, results, seconds_since(start_ns));
	for (size_t i = 0; i < plan->shard_count; i++)
		free(results[i].points);
	free(results);
	return rc;
}

/* Read the tree, plan the shards and produce them. */
static int pack_run(const struct pack_options *opt,
		    const struct pack_pattern *pattern, uint64_t start_ns)
{
	struct pack_tree tree;
	struct pack_plan plan;
	int rc;

	/* every check before the output directory is created: a refused run
	 * leaves the disk as it was */
	rc = check_outside(opt->root[0] ? opt->root : "/", pattern->dir);
	if (rc)
		return rc;
	rc = pack_walk(opt->root, &opt->walk, &tree);
	if (!rc && opt->walk.keep_owner)
		rc = pack_owner_names(&tree);
	if (rc)
		goto out_release_tree;
	rc = pack_plan_build(&tree, &opt->plan, &plan);
	if (rc)
		goto out_release_tree;
	if (!plan.shard_count)
		pack_warn("%s/: nothing to pack", opt->root);
	rc = check_names(&plan, pattern);
	rc = rc ?: make_dirs(pattern->dir);
	if (!rc)
		rc = pack_produce(opt, pattern, &plan, tree.skipped, start_ns);
	pack_plan_release(&plan);
out_release_tree:
	pack_tree_release(&tree);
	return rc;
}

int main(int argc, char **argv)
{
	struct pack_options opt;
	struct pack_pattern pattern;
	uint64_t start_ns = monotonic_ns();
	int rc;

	rc = parse_args(argc, argv, &opt);
	if (rc)
		return rc > 0 ? 0 : 2;
	rc = pack_pattern_parse(&pattern, opt.out);
	if (rc == -EINVAL)
		return 2;
	if (!rc) {
		rc = pack_run(&opt, &pattern, start_ns);
		pack_pattern_release(&pattern);
	}
	if (rc == -ENOMEM)
		pack_error("out of memory");
	return rc ? 1 : 0;
}
