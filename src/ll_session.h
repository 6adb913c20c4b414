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
#include <sys/types.h>

#include "shardfs/fs.h"

struct fuse_session;
struct ll_uring;
struct prelist;

/* What a session serves and how; the session's userdata. */
struct ll_session {
	struct shardfs *fs;	/* the filesystem served */
	struct ll_uring *uring;	/* the io_uring transport, or NULL */
	struct fuse_session *se; /* the session, for notifications */
	const char *mountpoint;	/* absolute; set before the session runs */
	struct prelist *prelist; /* lists for push-ahead (prelist.h), or NULL */
	pid_t lister_tid;	/* its thread, whose requests are its listings
				 * (0: none); kept here, as the request
				 * threads may outlive prelist_stop() */
	bool lists_long;	/* it may list a huge directory whole */
	bool no_open;		/* the kernel accepts ENOSYS for OPEN */
};

/*
 * Stop push-ahead and its listings: no store or listing is made after
 * this returns.  A store may wait for a page that a READ in flight keeps
 * locked, so while the connection lives this must be called with the
 * session loop still answering (the thread that lifecycle_signals_start()
 * starts does so on a signal).  Called again once the loop has ended, before the transport is
 * freed; idempotent, not thread-safe.
 */
void ll_push_stop(struct ll_session *ls);

#endif
