/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h - what the shardfs and shardfs-index commands share: the options
 * that decide which index a shard set gets (layout, index file, scan), and
 * turning them into the core's configuration.  Both commands must build
 * the same index from the same options, so there is one parser for them.
 */
#ifndef SHARDFS_CLI_H
#define SHARDFS_CLI_H

#include <fuse_opt.h>

#include "shardfs/index.h"
#include "shardfs/index_store.h"
#include "shardfs/layout.h"
#include "shardfs/remote.h"
#include "compress/span_cache.h"

/* Options common to both commands (parsed with cli_index_opts). */
struct cli_index {
	char *shards;		/* the SHARDS argument (a copy) */
	int quiet;		/* -o quiet: no summary */
	int skip_bad_shards;	/* -o skip_bad_shards */
	unsigned scan_threads;	/* -o scan_threads=N */
	char *layout;		/* -o layout=tree|shards|classes */
	char *label;		/* -o label=cls|json:FIELD */
	char *classnames;	/* -o classnames=FILE */
	char *unlabeled;	/* -o unlabeled=DIR|skip */
	char *index;		/* -o index=PATH */
	char *index_mode;	/* -o index_mode=auto|require|rebuild|off */
	char *build_memory;	/* -o build_memory=SIZE */
	char *loglevel;		/* -o loglevel=NAME */
	int show_help;		/* -h, --help */
	int show_version;	/* -V, --version */
	struct remote_options remote; /* -o endpoint=, region=, ... */
};

/* What the options configure in the core. */
struct cli_config {
	struct layout layout;			/* how paths map to the tree */
	struct index_store_options store;	/* which index file, how */
	struct shard_index_build_options build;	/* how to scan */
	struct span_cache spans;		/* -o cache_dir (build.spans
						 * points here), or all zero */
	struct remote *remote;			/* remote shards' layer, from
						 * -o endpoint= ... (build.remote
						 * points here too), or NULL */
};

/* The option table for struct cli_index. */
extern const struct fuse_opt cli_index_opts[];

/* The help text of those options, for usage(). */
extern const char cli_index_help[];

/*
 * Parse @args (the first non-option argument becomes cli->shards and is
 * removed; other unknown arguments stay in @args).  0 or -1.
 */
int cli_index_parse(struct fuse_args *args, struct cli_index *cli);

/*
 * The template (as in @tables, a NULL-terminated list of option tables)
 * of the -o option nearest to the unknown option @opt ("redahead=8M":
 * "readahead=%s"), or NULL when none is near: a third of its letters at
 * most may differ.  An option a table knows as written is not "near".
 */
const char *cli_nearest_option(const char *opt, const struct fuse_opt *const tables[]);

/*
 * After a command line was refused for unknown options: log, for each -o
 * option left in @args that resembles one of @tables, the one it
 * resembles ("did you mean 'readahead'?").
 */
void cli_suggest_options(const struct fuse_args *args,
			 const struct fuse_opt *const tables[]);

/* Set the log level and fill @cfg from @cli.  Errors are logged. */
int cli_config_init(struct cli_config *cfg, const struct cli_index *cli);

void cli_config_release(struct cli_config *cfg);
void cli_index_free(struct cli_index *cli);

/*
 * After the summary: how many shards of @set are compressed, by format,
 * and that those without seek points are served from the decoded cache.
 */
void cli_print_encodings(const struct shard_set *set);

/* Print the one-line build summary (unless quiet) and any warnings. */
void cli_print_summary(const struct shard_index *idx, const struct layout *layout,
		       uint32_t nr_shards, double seconds,
		       const struct index_store_result *res);

#endif
