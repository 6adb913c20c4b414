/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll_session.h - what a FUSE session of shardfs serves: its userdata.
 *
 * Its own header so that the operations (ll.c) and the io_uring
 * transport (ll_uring.c), which both read it, need not include each
 * other.
 */
#ifndef SHARDFS_LL_SESSION_H
#define SHARDFS_LL_SESSION_H

#include <stdbool.h>

#include "shardfs/fs.h"

struct fuse_session;
struct ll_uring;

/* What a session serves and how; the session's userdata. */
struct ll_session {
	struct shardfs *fs;	/* the filesystem served */
	struct ll_uring *uring;	/* the io_uring transport, or NULL */
	struct fuse_session *se; /* the session, for notifications */
	bool no_open;		/* the kernel accepts ENOSYS for OPEN */
};

#endif
