/*
 * main.c - the shardfs command: options, index build, mount, serve.
 *
 * The order matters to users: the index is built before anything is
 * mounted, and the process daemonises only after the mount exists, so
 * "shardfs SHARDS MNT && ls MNT" always sees the full tree, and a failure
 * leaves nothing mounted.  Exit codes are documented in shardfs(1).
 */
#define FUSE_USE_VERSION 312

#include <dirent.h>
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardfs/fs.h"
#include "shardfs/ll.h"
#include "shardfs/log.h"

enum exit_code {
	EXIT_OK = 0,		/* mounted, served, unmounted */
	EXIT_USAGE = 1,		/* bad command line */
	EXIT_SHARDS = 2,	/* the shard set cannot be served */
	EXIT_MOUNT = 3,		/* the mountpoint or FUSE refused */
};

/* shardfs' own options; FUSE's are left in the argument vector. */
struct cli {
	const char *shards;	/* the SHARDS argument */
	int nonopts;		/* non-option arguments seen */
	int quiet;		/* -o quiet: no summary */
	int skip_bad_shards;	/* -o skip_bad_shards */
	int nonempty;		/* -o nonempty: allow a non-empty mountpoint */
	int uid;		/* -o uid=N, -1 when unset */
	int gid;		/* -o gid=N, -1 when unset */
	int umask;		/* -o umask=OCTAL, -1 when unset */
	unsigned scan_threads;	/* -o scan_threads=N */
	char *readahead;	/* -o readahead=SIZE */
	char *layout;		/* -o layout=tree|shards|classes */
	char *label;		/* -o label=cls|json:FIELD */
	char *classnames;	/* -o classnames=FILE */
	char *unlabeled;	/* -o unlabeled=DIR|skip */
	char *loglevel;		/* -o loglevel=NAME */
	int show_help;		/* -h, --help */
	int show_version;	/* -V, --version */
};

#define CLI_OPT(t, field, value) { t, offsetof(struct cli, field), value }

static const struct fuse_opt cli_opts[] = {
	CLI_OPT("quiet", quiet, 1),
	CLI_OPT("skip_bad_shards", skip_bad_shards, 1),
	CLI_OPT("nonempty", nonempty, 1),
	CLI_OPT("uid=%d", uid, 0),
	CLI_OPT("gid=%d", gid, 0),
	CLI_OPT("umask=%o", umask, 0),
	CLI_OPT("scan_threads=%u", scan_threads, 0),
	CLI_OPT("loglevel=%s", loglevel, 0),
	CLI_OPT("readahead=%s", readahead, 0),
	CLI_OPT("layout=%s", layout, 0),
	CLI_OPT("label=%s", label, 0),
	CLI_OPT("classnames=%s", classnames, 0),
	CLI_OPT("unlabeled=%s", unlabeled, 0),
	CLI_OPT("-h", show_help, 1),
	CLI_OPT("--help", show_help, 1),
	CLI_OPT("-V", show_version, 1),
	CLI_OPT("--version", show_version, 1),
	FUSE_OPT_END
};

static void usage(const char *prog)
{
	printf("usage: %s [options] SHARDS MOUNTPOINT\n\n"
	       "Mount a set of TAR shards as one read-only directory tree.\n\n"
	       "SHARDS is one argument: a .tar file, a directory of *.tar files,\n"
	       "a brace pattern (/data/shard-{000000..000099}.tar, {a,b}), a glob\n"
	       "(/data/train-*.tar) or a comma-separated list of these.\n\n"
	       "shardfs options:\n"
	       "    -o uid=N               report every file as owned by uid N\n"
	       "    -o gid=N               report every file as owned by gid N\n"
	       "    -o umask=OCTAL         clear these permission bits\n"
	       "    -o quiet               no summary line\n"
	       "    -o skip_bad_shards     mount the valid shards, skip the rest\n"
	       "    -o nonempty            allow a non-empty mountpoint\n"
	       "    -o scan_threads=N      threads that index shards (default: CPUs)\n"
	       "    -o loglevel=LEVEL      error, warn, info (default), debug\n"
	       "    -o layout=LAYOUT       tree (as stored), shards (a directory per\n"
	       "                           shard) or classes (<label>/<file>)\n"
	       "    -o label=SOURCE        classes: cls (the .cls member, default)\n"
	       "                           or json:FIELD (a field of the .json)\n"
	       "    -o classnames=FILE     classes: \"label name\" lines mapping labels\n"
	       "    -o unlabeled=DIR       classes: where unlabeled samples go\n"
	       "                           (default _unlabeled; skip: leave out)\n"
	       "    -o readahead=SIZE      prefetch ahead of forward readers of a\n"
	       "                           shard (K/M/G suffixes; 0: off; default 4M)\n"
	       "    -h, --help             this help\n"
	       "    -V, --version          print the version\n\n"
	       "exit status: 0 mounted, 1 usage error, 2 bad shard set,\n"
	       "3 mountpoint or FUSE error\n\n", prog);
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

static int cli_proc(void *data, const char *arg, int key, struct fuse_args *out)
{
	struct cli *cli = data;

	if (key != FUSE_OPT_KEY_NONOPT)
		return 1;
	if (cli->nonopts++ == 0) {
		cli->shards = arg;
		return 0;
	}
	return 1;	/* the mountpoint, for fuse_parse_cmdline() */
}

/* The mountpoint must be an empty directory unless -o nonempty. */
static int check_mountpoint(const char *mp, int nonempty)
{
	struct stat st;
	struct dirent *de;
	DIR *d;
	int entries = 0;

	if (stat(mp, &st))
		return log_error("%s: %s", mp, strerror(errno)), -errno;
	if (!S_ISDIR(st.st_mode))
		return log_error("%s: mountpoint is not a directory", mp), -ENOTDIR;
	if (nonempty)
		return 0;
	d = opendir(mp);
	if (!d)
		return log_error("%s: %s", mp, strerror(errno)), -errno;
	while ((de = readdir(d)))
		entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	if (entries)
		return log_error("%s: mountpoint is not empty (use -o nonempty)", mp),
		       -ENOTEMPTY;
	return 0;
}

static void print_progress(void *arg, const struct shard_index_progress *p)
{
	fprintf(stderr, "\rshardfs: indexing %u/%u shards, %llu members, %.1f MB",
		p->shards_done, p->shards_total, (unsigned long long)p->members,
		p->bytes / 1e6);
	if (p->shards_done == p->shards_total)
		fputc('\n', stderr);
}

static void print_summary(const struct shardfs *fs)
{
	const struct shard_index_counts *c = &fs->idx.counts;

	log_info("%u shards, %llu files, %llu dirs, %llu symlinks, %llu bytes, "
		 "%llu duplicates, %llu skipped in %.2f s",
		 fs->set.nr - c->bad_shards, (unsigned long long)c->files,
		 (unsigned long long)c->dirs, (unsigned long long)c->symlinks,
		 (unsigned long long)c->bytes, (unsigned long long)c->duplicates,
		 (unsigned long long)(c->skipped + c->special), fs->build_seconds);
	if (c->bad_shards)
		log_warn("%u bad shards skipped", c->bad_shards);
	if (c->unlabeled)
		log_info("%llu samples without a label", (unsigned long long)c->unlabeled);
	log_debug("index: %u entries, %.1f bytes per entry, %llu hard links, "
		  "%llu special files skipped", fs->idx.nr_inodes,
		  shard_index_bytes_per_entry(&fs->idx),
		  (unsigned long long)c->hardlinks, (unsigned long long)c->special);
}

/* A byte count with an optional K, M or G suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	int shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || errno)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Apply the options that change what the index reports. */
static int cli_apply(const struct cli *cli, struct shardfs *fs)
{
	enum log_level level;

	fs->opt.readahead = SHARDFS_READAHEAD_DEFAULT;
	if (cli->readahead && parse_size(cli->readahead, &fs->opt.readahead))
		return log_error("bad readahead size '%s'", cli->readahead), -EINVAL;
	if (cli->loglevel) {
		if (log_parse_level(cli->loglevel, &level))
			return log_error("unknown loglevel '%s'", cli->loglevel), -EINVAL;
		log_set_level(level);
	} else if (cli->quiet) {
		log_set_level(LOG_LEVEL_WARN);
	}
	fs->opt.set_uid = cli->uid >= 0;
	fs->opt.uid = (uint32_t)cli->uid;
	fs->opt.set_gid = cli->gid >= 0;
	fs->opt.gid = (uint32_t)cli->gid;
	fs->opt.umask = cli->umask >= 0 ? (mode_t)cli->umask & 07777 : 0;
	return 0;
}

/* Read-only always; name the source so mount(8) and df show it. */
static int add_mount_options(struct fuse_args *args, const char *shards)
{
	char *opts = NULL, *fsname;
	int rc;

	if (asprintf(&fsname, "fsname=%s", shards) < 0)
		return -ENOMEM;
	rc = fuse_opt_add_opt_escaped(&opts, fsname);
	rc = rc ?: fuse_opt_add_opt(&opts, "subtype=shardfs,ro,default_permissions");
	rc = rc ?: fuse_opt_add_arg(args, "-o");
	rc = rc ?: fuse_opt_add_arg(args, opts);
	free(fsname);
	free(opts);
	return rc ? -ENOMEM : 0;
}

static int serve(struct fuse_session *se, const struct fuse_cmdline_opts *o)
{
	struct fuse_loop_config *cfg;
	int rc;

	if (o->singlethread)
		return fuse_session_loop(se);
	cfg = fuse_loop_cfg_create();
	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, o->clone_fd);
	fuse_loop_cfg_set_idle_threads(cfg, o->max_idle_threads);
	fuse_loop_cfg_set_max_threads(cfg, o->max_threads);
	rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
}

/* Mount @fs and serve it until unmounted. */
static int mount_and_serve(struct fuse_args *args,
			   const struct fuse_cmdline_opts *o, struct shardfs *fs)
{
	struct fuse_session *se = shardfs_session_new(args, fs);
	int rc = EXIT_MOUNT;

	if (!se)
		return EXIT_USAGE;
	if (fuse_set_signal_handlers(se))
		goto out_destroy;
	if (fuse_session_mount(se, o->mountpoint))
		goto out_remove_handlers;
	if (!o->foreground)
		log_use_syslog();
	fuse_daemonize(o->foreground);
	rc = serve(se, o) ? EXIT_MOUNT : EXIT_OK;
	fuse_session_unmount(se);
out_remove_handlers:
	fuse_remove_signal_handlers(se);
out_destroy:
	fuse_session_destroy(se);
	return rc;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct cli cli = { .uid = -1, .gid = -1, .umask = -1 };
	struct fuse_cmdline_opts o = { 0 };
	struct shardfs fs = { 0 };
	struct shard_index_build_options bo = { 0 };
	struct layout layout = { 0 };
	int rc = EXIT_USAGE;

	if (fuse_opt_parse(&args, &cli, cli_opts, cli_proc) ||
	    fuse_parse_cmdline(&args, &o))
		goto out_free_args;
	if (cli.show_help || o.show_help) {
		usage(argv[0]);
		rc = EXIT_OK;
		goto out_free_args;
	}
	if (cli.show_version || o.show_version) {
		printf("shardfs %s (libfuse %s)\n", SHARDFS_VERSION, fuse_pkgversion());
		rc = EXIT_OK;
		goto out_free_args;
	}
	if (!cli.shards || !o.mountpoint) {
		fprintf(stderr, "usage: %s [options] SHARDS MOUNTPOINT (see --help)\n", argv[0]);
		goto out_free_args;
	}
	if (cli_apply(&cli, &fs) || add_mount_options(&args, cli.shards) ||
	    layout_init(&layout, cli.layout, cli.label, cli.classnames, cli.unlabeled))
		goto out_free_args;
	if (o.debug)
		log_set_level(LOG_LEVEL_DEBUG);
	rc = EXIT_MOUNT;
	if (check_mountpoint(o.mountpoint, cli.nonempty))
		goto out_free_args;
	bo.layout = &layout;
	bo.threads = cli.scan_threads;
	bo.skip_bad_shards = cli.skip_bad_shards;
	bo.progress = isatty(STDERR_FILENO) && !cli.quiet ? print_progress : NULL;
	rc = EXIT_SHARDS;
	if (shardfs_init(&fs, cli.shards, &bo))
		goto out_free_args;
	print_summary(&fs);
	rc = mount_and_serve(&args, &o, &fs);
	shardfs_release(&fs);
out_free_args:
	layout_release(&layout);
	free(o.mountpoint);
	free(cli.loglevel);
	free(cli.readahead);
	free(cli.layout);
	free(cli.label);
	free(cli.classnames);
	free(cli.unlabeled);
	fuse_opt_free_args(&args);
	return rc;
}
