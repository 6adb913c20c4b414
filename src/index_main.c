/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_main.c - shardfs-index: build, check or list the index of a shard
 * set without mounting it, e.g. at the end of the job that wrote the
 * shards, so that every training node's first mount is instant.
 *
 * It accepts the same index options as shardfs and therefore finds,
 * validates and writes exactly the index file a mount would.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardfs/control.h"
#include "shardfs/fs.h"
#include "shardfs/index_file.h"
#include "shardfs/log.h"
#include "shardfs/remote.h"
#include "shardfs/source.h"
#include "shardfs/verify.h"

enum index_exit {
	INDEX_EXIT_OK = 0,	/* built, valid, or listed */
	INDEX_EXIT_FAILED = 1,	/* bad shard set, no index saved, or no
				 * valid index (--check) */
	INDEX_EXIT_USAGE = 2,	/* bad command line */
};

/* Options only shardfs-index takes. */
struct index_cli {
	int check;		/* --check: verify, never build */
	int list;		/* --list: print the members */
	int stats;		/* --stats: bytes per member by section */
	int verify;		/* --verify: compare with libarchive */
	int publish;		/* --publish: upload it where mounts look */
	unsigned jobs;		/* -j N: scanning threads */
};

#define INDEX_OPT(t, field, value) { t, offsetof(struct index_cli, field), value }

static const struct fuse_opt index_opts[] = {
	INDEX_OPT("--check", check, 1),
	INDEX_OPT("--list", list, 1),
	INDEX_OPT("--stats", stats, 1),
	INDEX_OPT("--verify", verify, 1),
	INDEX_OPT("--publish", publish, 1),
	INDEX_OPT("-j %u", jobs, 0),
	FUSE_OPT_END
};

static void usage(const char *prog)
{
	printf("usage: %s [options] SHARDS\n\n"
	       "Build or refresh the index shardfs uses for SHARDS (see shardfs(1)),\n"
	       "so that mounting it later scans nothing.\n\n"
	       "    --check                verify the index (checksums, bounds, and\n"
	       "                           that it matches the shards); build nothing\n"
	       "    --list                 print the files as TSV: path, shard, offset\n"
	       "                           of the data in the shard, size\n"
	       "    --stats                print the index file's bytes per member\n"
	       "                           by section (what the names cost)\n"
	       "    --verify               read every shard again with libarchive and\n"
	       "                           compare every file (path, size, content)\n"
	       "                           with what the index serves; exit 1 on any\n"
	       "                           difference\n"
	       "    --publish              s3:// shards: upload the index next to the\n"
	       "                           first shard, where every mount looks,\n"
	       "                           signed with the mount's credentials\n"
	       "    -j N                   scanning threads (default: CPUs)\n"
	       "%s\n"
	       "exit status: 0 success, 1 failure (bad shard set, no index saved,\n"
	       "no valid index, a difference found by --verify), 2 usage error\n",
	       prog, cli_index_help);
}

static int keep_args(void *data, const char *arg, int key, struct fuse_args *out)
{
	return 1;	/* SHARDS and the index options, for cli_index_parse() */
}

/* One TSV line per regular file, as /.shardfs/members has it (control.h). */
static void list_members(const struct shardfs *fs)
{
	char line[CONTROL_MEMBERS_LINE_MAX];

	for (uint32_t e = 0; e < shard_index_nr(&fs->idx); e++)
		fwrite(line, 1, control_members_line(&fs->idx, e, line), stdout);
}

static double per(uint64_t bytes, uint64_t members)
{
	return members ? (double)bytes / (double)members : 0;
}

/* One line of --stats. */
static void stats_line(const char *what, uint64_t bytes, uint64_t members)
{
	printf("%-16s %14" PRIu64 " %14.2f\n", what, bytes, per(bytes, members));
}

/*
 * --stats: the index file's sections, in bytes and bytes per member, and
 * what the packed entries of @idx (the file's) spend on each part.
 */
static int print_stats(const char *path, const struct shard_index *idx)
{
	struct index_file_header h;
	uint64_t in_sections = 0, members;
	struct compact_sizes parts;
	char msg[512];

	if (index_file_read_header(path, &h, msg, sizeof(msg))) {
		log_error("%s: %s", path, msg);
		return INDEX_EXIT_FAILED;
	}
	members = h.counts.members;
	printf("index file %s: %" PRIu64 " bytes, %" PRIu64 " members, %u entries, "
	       "%u shards\n%-16s %14s %14s\n", path, h.file_size, members,
	       h.nr_inodes, h.nr_shards, "section", "bytes", "bytes/member");
	compact_sizes(&idx->entries, &parts);
	for (int s = 0; s < INDEX_NR_SECTIONS; s++) {
		in_sections += h.sections[s].length;
		stats_line(index_section_name(s), h.sections[s].length, members);
		if (s != INDEX_SEC_ENTRIES)
			continue;
		stats_line("  block headers", parts.headers, members);
		stats_line("  fields", parts.records, members);
		stats_line("  names", parts.names, members);
	}
	stats_line("header+padding", h.file_size - in_sections, members);
	stats_line("total", h.file_size, members);
	return INDEX_EXIT_OK;
}

/* --verify: report every difference; exit status per enum index_exit. */
static int verify(struct shardfs *fs, const struct cli_config *cfg)
{
	struct verify_result res;
	int rc;

	if (cfg->layout.kind != LAYOUT_TREE) {
		log_error("--verify compares paths as stored: use the default layout");
		return INDEX_EXIT_USAGE;
	}
	rc = verify_shards(fs, stdout, &res);
	if (rc) {
		log_error("verify: %s", strerror(-rc));
		return INDEX_EXIT_FAILED;
	}
	log_info("verified %" PRIu64 " files in %u shards against libarchive "
		 "(%" PRIu64 " replaced by later shards): %" PRIu64 " differences",
		 res.files, fs->set.nr, res.shadowed, res.differences);
	return res.differences ? INDEX_EXIT_FAILED : INDEX_EXIT_OK;
}

/* --publish: PUT the index file where mounts of the set look for it. */
static int publish(const struct shardfs *fs)
{
	const struct index_store_result *res = &fs->index_file;
	char msg[512];

	if (!res->published[0]) {
		log_error("--publish: %s", fs->set.nr && shard_source_is_remote(fs->set.shards[0].path)
			  ? "an index given with -o index= is not where mounts look"
			  : "a local set's index is already next to its shards");
		return INDEX_EXIT_USAGE;
	}
	if (!strcmp(res->path, res->published)) {
		log_info("%s: already published and valid", res->published);
		return INDEX_EXIT_OK;
	}
	if (remote_put_file(fs->set.remote, res->path, res->published, msg,
			    sizeof(msg))) {
		log_error("%s", msg);
		return INDEX_EXIT_FAILED;
	}
	log_info("%s: published (from %s)", res->published, res->path);
	return INDEX_EXIT_OK;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct cli_index cli = { 0 };
	struct index_cli ic = { 0 };
	struct cli_config cfg = { 0 };
	struct shardfs fs = { 0 };
	int rc = INDEX_EXIT_USAGE;

	log_set_program("shardfs-index");
	/* "-j N" first, before N could be taken for SHARDS */
	if (fuse_opt_parse(&args, &ic, index_opts, keep_args) ||
	    cli_index_parse(&args, &cli))
		goto out_free_args;
	if (args.argc > 1) {
		static const struct fuse_opt *const all_opts[] = { cli_index_opts, NULL };

		log_error("unexpected argument '%s%s%s'", args.argv[1],
			  args.argc > 2 ? " " : "", args.argc > 2 ? args.argv[2] : "");
		cli_suggest_options(&args, all_opts);
		goto out_free_args;
	}
	if (cli.show_help || cli.show_version) {
		if (cli.show_help)
			usage(argv[0]);
		else
			printf("shardfs-index %s\n", SHARDFS_VERSION);
		rc = INDEX_EXIT_OK;
		goto out_free_args;
	}
	if (!cli.shards) {
		log_error("usage: %s [options] SHARDS (see --help)", argv[0]);
		goto out_free_args;
	}
	if (cli_config_init(&cfg, &cli))
		goto out_release_config;
	if (ic.jobs)
		cfg.build.threads = ic.jobs;
	if (ic.check) {
		cfg.store.mode = INDEX_MODE_REQUIRE;
		cfg.store.full_check = true;
	}
	rc = INDEX_EXIT_FAILED;
	if (shardfs_init(&fs, cli.shards, &cfg.build, &cfg.store))
		goto out_release_config;
	if (!ic.check && !ic.list && !ic.verify && fs.index_file.origin != INDEX_LOADED &&
	    !fs.index_file.saved) {
		log_error("no index file was saved for %s%s", cli.shards,
			  cfg.store.mode == INDEX_MODE_OFF ? " (index_mode=off)" : "");
		goto out_release_fs;
	}
	if (ic.check)
		log_info("%s: valid for %u shards", fs.index_file.path, fs.set.nr);
	else if (!ic.list && !ic.stats) {
		cli_print_summary(&fs.idx, &cfg.layout, fs.set.nr, fs.build_seconds,
				  &fs.index_file);
		cli_print_encodings(&fs.set);
	}
	/* what walks every entry checks them all first (index_guard.h) */
	if ((ic.list || ic.stats || ic.publish) && shard_index_check_all(&fs.idx))
		goto out_release_fs;
	if (ic.list)
		list_members(&fs);
	rc = ic.verify ? verify(&fs, &cfg) : INDEX_EXIT_OK;
	if (ic.stats && rc == INDEX_EXIT_OK)
		rc = print_stats(fs.index_file.path, &fs.idx);
	if (rc == INDEX_EXIT_OK && ic.publish)
		rc = publish(&fs);
out_release_fs:
	shardfs_release(&fs);
out_release_config:
	cli_config_release(&cfg);
out_free_args:
	cli_index_free(&cli);
	fuse_opt_free_args(&args);
	return rc;
}
