/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll.h - the FUSE low-level operations of a shardfs mount.
 *
 * Part of the FUSE glue, with ll_uring.c (the io_uring transport),
 * lifecycle.c (mount, daemon, idle unmount), cli.c (options) and
 * shardfs_main.c; nothing under include/shardfs/ knows FUSE.  It serves a
 * struct shardfs (fs.h) that must stay alive and unchanged until the
 * session is destroyed.
 */
#ifndef SHARDFS_LL_H
#define SHARDFS_LL_H

#include "ll_session.h"

struct fuse_args;
struct fuse_session;

/*
 * Create a session serving @ls->fs.  @args holds the FUSE options that
 * are left after shardfs' own were removed.  @ls must outlive the
 * session.  Returns NULL (after libfuse has printed why) on bad options.
 */
struct fuse_session *shardfs_session_new(struct fuse_args *args,
					 struct ll_session *ls);

#endif
