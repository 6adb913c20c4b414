/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardfs_main.c - the shardfs command: options, index build, mount, serve.
 *
 * The order matters to users: the index is built before anything is
 * mounted, and the process daemonises only after the mount exists, so
 * "shardfs SHARDS MNT && ls MNT" always sees the full tree, and a failure
 * leaves nothing mounted.  Exit codes are documented in shardfs(1).
 */
#include <dirent.h>
#include <errno.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <malloc.h>
#include <mntent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lifecycle.h"
#include "ll.h"
#include "ll_uring.h"
#include "shardfs/fs.h"
#include "shardfs/index_map.h"
#include "shardfs/log.h"
#include "shardfs/path.h"
#include "shardfs/remote.h"
#include "shardfs/shardset.h"
#include "shardfs/source.h"
#include "shardfs/util.h"

/* The device every FUSE mount opens (directly or through fusermount3). */
#define SHARDFS_FUSE_DEVICE "/dev/fuse"

/* Kernel readahead per open file: one maximal (256-page) FUSE read. */
#define SHARDFS_KERNEL_READAHEAD_KIB 1024

/* The convention of all three commands (shardfs, -index, -pack). */
enum exit_code {
	EXIT_OK = 0,		/* mounted, served, unmounted */
	EXIT_FAILED = 1,	/* the shard set cannot be served, or the
				 * mountpoint or FUSE refused */
	EXIT_USAGE = 2,		/* bad command line */
};

/* Options only the mount takes; the index options are in cli.h. */
struct mount_cli {
	int nonempty;		/* -o nonempty: allow a non-empty mountpoint */
	char *uid;		/* -o uid=N */
	char *gid;		/* -o gid=N */
	char *umask;		/* -o umask=OCTAL */
	char *readahead;	/* -o readahead=SIZE */
	char *pushahead;	/* -o pushahead=SIZE */
	int notify_fd;		/* -o notify_fd=N, -1 when unset */
	char *idle_timeout;	/* -o idle_timeout=SECONDS (0: never) */
	char *log;		/* -o log=FILE: messages once detached */
	unsigned uring_threads;	/* -o io_uring_threads=N, 0: /dev/fuse only */
	char *mountpoint;	/* the MOUNTPOINT argument, as given */
};

#define MOUNT_OPT(t, field, value) { t, offsetof(struct mount_cli, field), value }

static const struct fuse_opt mount_opts[] = {
	MOUNT_OPT("nonempty", nonempty, 1),
	MOUNT_OPT("uid=%s", uid, 0),
	MOUNT_OPT("gid=%s", gid, 0),
	MOUNT_OPT("umask=%s", umask, 0),
	MOUNT_OPT("readahead=%s", readahead, 0),
	MOUNT_OPT("pushahead=%s", pushahead, 0),
	MOUNT_OPT("notify_fd=%d", notify_fd, 0),
	MOUNT_OPT("idle_timeout=%s", idle_timeout, 0),
	MOUNT_OPT("log=%s", log, 0),
	MOUNT_OPT("io_uring_threads=%u", uring_threads, 0),
	FUSE_OPT_END
};

/*
 * libfuse's -o options that shardfs users give, for suggestions only:
 * libfuse itself decides what it accepts (fuse_session_new).
 */
static const struct fuse_opt fuse_known_opts[] = {
	FUSE_OPT_KEY("allow_other", 0),
	FUSE_OPT_KEY("allow_root", 0),
	FUSE_OPT_KEY("auto_unmount", 0),
	FUSE_OPT_KEY("default_permissions", 0),
	FUSE_OPT_KEY("fsname=", 0),
	FUSE_OPT_KEY("subtype=", 0),
	FUSE_OPT_KEY("max_read=", 0),
	FUSE_OPT_KEY("ro", 0),
	FUSE_OPT_KEY("debug", 0),
	FUSE_OPT_KEY("max_threads=", 0),
	FUSE_OPT_KEY("max_idle_threads=", 0),
	FUSE_OPT_KEY("clone_fd", 0),
	FUSE_OPT_END
};

/* Every table of -o options shardfs knows, for cli_suggest_options(). */
static const struct fuse_opt *const all_opts[] = {
	cli_index_opts, mount_opts, fuse_known_opts, NULL
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
	       "    -o nonempty            allow a non-empty mountpoint\n"
	       "    -o readahead=SIZE      prefetch ahead of forward readers of a\n"
	       "                           shard (K/M/G/T suffixes; 0: off; default 4M)\n"
	       "    -o pushahead=SIZE      store the members that follow a forward\n"
	       "                           reader in the kernel's page cache, at\n"
	       "                           most SIZE bytes ahead of all readers\n"
	       "                           (0: off; default %uM)\n"
	       "    -o notify_fd=N         write READY=1 to fd N once mounted\n"
	       "                           (NOTIFY_SOCKET is honoured as well)\n"
	       "    -o idle_timeout=SECS   unmount after SECS without requests\n"
	       "    -o log=FILE            once in the background, append messages\n"
	       "                           to FILE instead of syslog\n"
	       "    -o io_uring_threads=N  threads per CPU serving requests over\n"
	       "                           io_uring when the kernel offers it\n"
	       "                           (default %d; 0: /dev/fuse only)\n"
	       "%s\n"
	       "exit status: 0 mounted, 1 failure (bad shard set, mountpoint or\n"
	       "FUSE error), 2 usage error\n\n", prog, SHARDFS_PUSHAHEAD_DEFAULT >> 20,
	       LL_URING_THREADS_DEFAULT,
	       cli_index_help);
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

static int keep_args(void *data, const char *arg, int key, struct fuse_args *out)
{
	struct mount_cli *m = data;

	/* a copy: fuse_opt_parse frees the vector @arg lives in */
	if (key == FUSE_OPT_KEY_NONOPT && !m->mountpoint && !(m->mountpoint = strdup(arg)))
		return -1;
	return 1;	/* the mountpoint and FUSE's options, for libfuse */
}

/* Log why mountpoint @mp cannot be used (errno @err); returns -@err. */
static int mountpoint_error(const char *mp, int err)
{
	if (err == ENOTCONN)
		log_error("%s: %s: a shardfs (or other FUSE) mount whose daemon died; "
			  "remove it with 'fusermount3 -u %s' (add -z if busy)", mp,
			  strerror(err), mp);
	else
		log_error("%s: %s", mp, strerror(err));
	return -err;
}

/* The source of the shardfs mount on @mp, copied into @source; false
 * when @mp is no shardfs mount. */
static bool shardfs_mounted_on(const char *mp, char *source, size_t cap)
{
	char real[PATH_MAX];
	struct mntent *e;
	bool found = false;
	FILE *f;

	if (!realpath(mp, real) || !(f = setmntent("/proc/self/mounts", "r")))
		return false;
	while (!found && (e = getmntent(f)))
		if (!strcmp(e->mnt_dir, real) && !strcmp(e->mnt_type, "fuse.shardfs")) {
			snprintf(source, cap, "%s", e->mnt_fsname);
			found = true;
		}
	endmntent(f);
	return found;
}

/*
 * Say what is at the non-empty mountpoint @mp: another shardfs mount,
 * shards (SHARDS and MOUNTPOINT swapped), or other files, which a mount
 * would hide.  @entries are counted, @shards of them look like shards,
 * @example is one of them.  Returns -ENOTEMPTY.
 */
static int mountpoint_occupied(const char *mp, int entries, int shards,
			       const char *example)
{
	char source[PATH_MAX];

	if (shardfs_mounted_on(mp, source, sizeof(source)))
		log_error("%s: already a shardfs mount (of %s): unmount it first "
			  "(fusermount3 -u %s) or choose another mountpoint", mp,
			  source, mp);
	else if (shards)
		log_error("%s: holds %d shard%s (%s): this is a shard directory, "
			  "not a mountpoint; are SHARDS and MOUNTPOINT swapped? "
			  "(usage: shardfs SHARDS MOUNTPOINT)", mp, shards,
			  shards == 1 ? "" : "s", example);
	else
		log_error("%s: mountpoint is not empty (%d entr%s, e.g. '%s'); a "
			  "mount would hide them until unmounted: choose an empty "
			  "directory (-o nonempty mounts over them all the same)", mp,
			  entries, entries == 1 ? "y" : "ies", example);
	return -ENOTEMPTY;
}

/* The mountpoint must be an empty directory unless -o nonempty. */
static int check_mountpoint(const char *mp, int nonempty)
{
	char example[NAME_MAX + 1] = "";
	int entries = 0, shards = 0;
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (stat(mp, &st))
		return mountpoint_error(mp, errno);
	if (!S_ISDIR(st.st_mode))
		return log_error("%s: mountpoint is not a directory", mp), -ENOTDIR;
	if (nonempty)
		return 0;
	d = opendir(mp);
	if (!d)
		return mountpoint_error(mp, errno);
	while ((de = readdir(d))) {
		bool shard = path_is_shard_name(de->d_name);

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!entries++ || (shard && !shards))
			snprintf(example, sizeof(example), "%s", de->d_name);
		shards += shard;
	}
	closedir(d);
	return entries ? mountpoint_occupied(mp, entries, shards, example) : 0;
}

/*
 * Can this user use FUSE at all?  Checked before the index is built, so
 * that a user who cannot mount gets the reason, not a summary of a build
 * followed by "failed to open /dev/fuse".
 */
static int check_fuse_device(void)
{
	int err;

	if (!access(SHARDFS_FUSE_DEVICE, R_OK | W_OK))
		return 0;
	err = errno;
	if (err == ENOENT)
		log_error("%s: %s: FUSE is not available here: load the module "
			  "(modprobe fuse), or start the container with the device "
			  "(docker run --device /dev/fuse --cap-add SYS_ADMIN)",
			  SHARDFS_FUSE_DEVICE, strerror(err));
	else
		log_error("%s: %s: this user may not use FUSE; mount as root, or "
			  "be given read and write access to %s (its group)",
			  SHARDFS_FUSE_DEVICE, strerror(err), SHARDFS_FUSE_DEVICE);
	return -err;
}

/* An unsigned number in @base, at most @max; NULL (unset) leaves *out. */
static int parse_number(const char *what, const char *s, int base,
			unsigned long max, uint32_t *out, bool *set)
{
	char *end;
	unsigned long v;

	if (!s)
		return 0;
	errno = 0;
	v = strtoul(s, &end, base);
	if (!*s || *s == '-' || *end || errno || v > max)
		return log_error("bad %s '%s'", what, s), -EINVAL;
	*out = (uint32_t)v;
	if (set)
		*set = true;
	return 0;
}

/*
 * The options that change what the mount reports and how it reads, and
 * the idle timeout in *@idle (seconds, 0: never).
 */
static int mount_options(const struct mount_cli *m, struct shardfs_options *opt,
			 uint32_t *idle)
{
	uint32_t umask = 0;

	if (m->uring_threads > LL_URING_THREADS_MAX)
		return log_error("io_uring_threads=%u: at most %d", m->uring_threads,
				 LL_URING_THREADS_MAX), -EINVAL;
	opt->readahead = SHARDFS_READAHEAD_DEFAULT;
	if (m->readahead && parse_size(m->readahead, &opt->readahead))
		return log_error("bad readahead size '%s'", m->readahead), -EINVAL;
	opt->pushahead = SHARDFS_PUSHAHEAD_DEFAULT;
	if (m->pushahead && parse_size(m->pushahead, &opt->pushahead))
		return log_error("bad pushahead size '%s'", m->pushahead), -EINVAL;
	/* (uid_t)-1 means "no change" to the kernel: not a valid owner */
	if (parse_number("uid", m->uid, 10, UINT32_MAX - 1, &opt->uid, &opt->set_uid) ||
	    parse_number("gid", m->gid, 10, UINT32_MAX - 1, &opt->gid, &opt->set_gid) ||
	    parse_number("umask", m->umask, 8, 07777, &umask, NULL) ||
	    parse_number("idle_timeout (whole seconds)", m->idle_timeout, 10,
			 UINT32_MAX, idle, NULL))
		return -EINVAL;
	opt->umask = (mode_t)umask;
	return 0;
}

/*
 * SHARDS with the working directory put in front of every relative item
 * (items are separated by commas outside braces), so that df and
 * /proc/mounts say where the shards are.  URLs are not paths: they stay
 * as given.  NULL when out of memory.
 */
static char *absolute_shards(const char *shards)
{
	char cwd[PATH_MAX], *out, *o;
	size_t cwd_len, items = 1;
	int depth = 0;

	if (!getcwd(cwd, sizeof(cwd)))
		return strdup(shards);
	for (const char *c = shards; *c; c++)
		items += *c == ',';
	cwd_len = strlen(cwd);
	out = o = malloc(strlen(shards) + items * (cwd_len + 1) + 1);
	if (!out)
		return NULL;
	for (const char *c = shards;; c++) {
		if ((c == shards || (c[-1] == ',' && depth == 0)) && *c != '/' &&
		    !shard_source_is_remote(c))
			o += sprintf(o, "%s/", strcmp(cwd, "/") ? cwd : "");
		if (!*c)
			break;
		depth += *c == '{' ? 1 : *c == '}' ? -1 : 0;
		*o++ = *c;
	}
	*o = '\0';
	return out;
}

/* Read-only always; name the source so mount(8) and df show it. */
static int add_mount_options(struct fuse_args *args, const char *shards)
{
	char *opts = NULL, *fsname, *source = absolute_shards(shards);
	int rc;

	rc = source ? asprintf(&fsname, "fsname=%s", source) : -1;
	free(source);
	if (rc < 0)
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
	/* UINT_MAX means "not given": keep libfuse's defaults */
	if (o->max_idle_threads != UINT_MAX)
		fuse_loop_cfg_set_idle_threads(cfg, o->max_idle_threads);
	if (o->max_threads != UINT_MAX)
		fuse_loop_cfg_set_max_threads(cfg, o->max_threads);
	rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
}

/* What a signal stops before the session ends (lifecycle_signals_start). */
static void stop_pushing(void *ls)
{
	ll_push_stop(ls);
}

/*
 * Go to the background unless @foreground: fuse_daemonize() forks, and
 * only the child returns, to serve.  Threads do not cross a fork: the
 * remote layer's stop before it and start again in the child, as the
 * index maps' lease watch does.
 */
static void daemonize(struct shardfs *fs, bool foreground)
{
	struct remote *remote = foreground ? NULL : fs->set.remote;
	pid_t pid = getpid();

	/* the process that serves, maybe a child, is told of index writers */
	index_map_handoff();
	remote_fork_prepare(remote);
	fuse_daemonize(foreground);
	remote_fork_done(remote, getpid() != pid);
	index_map_adopt();
}

/*
 * Mount session @se (made before the index, so that libfuse has checked
 * its options before any shard was read) and serve @fs until unmounted or
 * signalled.  Destroys @se.
 */
static int mount_and_serve(struct fuse_session *se, struct ll_session *ls,
			   const struct fuse_cmdline_opts *o,
			   const struct mount_cli *m, uint32_t idle_timeout)
{
	struct idle_timer *idle = NULL;
	int rc = EXIT_FAILED;

	if (lifecycle_signals_install())
		goto out_destroy;
	ls->mountpoint = o->mountpoint;
	if (fuse_session_mount(se, o->mountpoint))
		goto out_remove_signals;
	/* one thread serves everything with -s: that is what -s asks for */
	if (m->uring_threads && !o->singlethread)
		ll_uring_attach(ls, se, m->uring_threads);
	lifecycle_set_readahead(o->mountpoint, SHARDFS_KERNEL_READAHEAD_KIB);
	if (!o->foreground)
		log_detach();
	daemonize(ls->fs, o->foreground);
	if (lifecycle_signals_start(se, stop_pushing, ls))
		goto out_unmount;
	lifecycle_notify_ready(m->notify_fd);
	if (idle_timeout)
		idle = lifecycle_idle_start(se, ls->fs, o->mountpoint, idle_timeout);
	/* a signal ends the loop: a clean exit */
	rc = serve(se, o) < 0 ? EXIT_FAILED : EXIT_OK;
	lifecycle_idle_stop(idle);
	lifecycle_signals_stop();
	/* the push worker's stores go through the transport freed below */
	ll_push_stop(ls);
out_unmount:
	if (ll_uring_free(ls->uring))
		rc = EXIT_FAILED;
	fuse_session_unmount(se);
out_remove_signals:
	lifecycle_signals_remove();
out_destroy:
	fuse_session_destroy(se);
	return rc;
}

/*
 * The session for @args (libfuse checks the options left to it); when it
 * refuses them, the options they resemble.  libfuse frees @args then, so
 * a copy is kept for the suggestions.
 */
static struct fuse_session *new_session(struct fuse_args *args,
					struct ll_session *ls)
{
	struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se;

	for (int i = 0; i < args->argc; i++)
		if (fuse_opt_add_arg(&copy, args->argv[i]))
			break;
	se = shardfs_session_new(args, ls);
	if (!se)
		cli_suggest_options(&copy, all_opts);
	fuse_opt_free_args(&copy);
	return se;
}

/*
 * Parse both option tables and libfuse's.  Returns the exit code for a
 * usage error, or 0 with *done set when --help or --version was served.
 */
static int parse_args(struct fuse_args *args, struct cli_index *cli,
		      struct mount_cli *m, struct fuse_cmdline_opts *o,
		      const char *prog, bool *done)
{
	if (cli_index_parse(args, cli) ||
	    fuse_opt_parse(args, m, mount_opts, keep_args))
		return EXIT_USAGE;
	/* before libfuse, which would call a missing mountpoint a usage error */
	if (m->mountpoint && check_mountpoint(m->mountpoint, m->nonempty))
		return EXIT_FAILED;
	if (fuse_parse_cmdline(args, o))
		return EXIT_USAGE;
	if (cli->show_help || o->show_help) {
		usage(prog);
		*done = true;
		return EXIT_OK;
	}
	if (cli->show_version || o->show_version) {
		printf("shardfs %s (libfuse %s)\n", SHARDFS_VERSION, fuse_pkgversion());
		*done = true;
		return EXIT_OK;
	}
	if (!cli->shards || !o->mountpoint) {
		log_error("usage: %s [options] SHARDS MOUNTPOINT (see --help)", prog);
		return EXIT_USAGE;
	}
	return 0;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct cli_index cli = { 0 };
	struct mount_cli m = { .notify_fd = -1,
			       .uring_threads = LL_URING_THREADS_DEFAULT };
	struct fuse_cmdline_opts o = { 0 };
	struct cli_config cfg = { 0 };
	struct shardfs fs = { 0 };
	struct ll_session ls = { .fs = &fs };
	struct fuse_session *se = NULL;
	uint32_t idle_timeout = 0;
	bool done = false;
	int rc = parse_args(&args, &cli, &m, &o, argv[0], &done);

	if (rc || done)
		goto out_free_args;
	rc = EXIT_USAGE;
	if (cli_config_init(&cfg, &cli) || mount_options(&m, &fs.opt, &idle_timeout) ||
	    add_mount_options(&args, cli.shards))
		goto out_release_config;
	if (m.log && log_use_file(m.log))
		goto out_release_config;
	/* libfuse checks the options it was left with here, before the scan */
	se = new_session(&args, &ls);
	if (!se)
		goto out_release_config;
	if (o.debug)
		log_set_level(LOG_LEVEL_DEBUG);
	rc = EXIT_FAILED;
	if (check_fuse_device()) {
		fuse_session_destroy(se);
		goto out_release_config;
	}
	rc = shardfs_init(&fs, cli.shards, &cfg.build, &cfg.store);
	/* what the build freed and glibc kept (its trim threshold rises
	 * with the largest block freed): a mount that built 4 M members
	 * kept 46 MiB of anonymous memory, 30 so; the rest is the tops of
	 * the scan threads' arenas, which it trims on no call (one arena
	 * for all threads, tried, made the remote read path a third
	 * slower: docs/benchmarks-scale.md) */
	malloc_trim(0);
	if (rc) {
		rc = EXIT_FAILED;
		fuse_session_destroy(se);
		goto out_release_config;
	}
	cli_print_summary(&fs.idx, &cfg.layout, fs.set.nr, fs.build_seconds,
			  &fs.index_file);
	cli_print_encodings(&fs.set);
	rc = mount_and_serve(se, &ls, &o, &m, idle_timeout);
	shardfs_release(&fs);
out_release_config:
	cli_config_release(&cfg);
out_free_args:
	free(o.mountpoint);
	free(m.readahead);
	free(m.pushahead);
	free(m.uid);
	free(m.gid);
	free(m.umask);
	free(m.idle_timeout);
	free(m.log);
	free(m.mountpoint);
	cli_index_free(&cli);
	fuse_opt_free_args(&args);
	return rc;
}
