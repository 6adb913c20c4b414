/*
 * ll.h - the FUSE low-level session of a shardfs mount.
 *
 * The only FUSE-aware part of shardfs; it serves a struct shardfs (fs.h)
 * that must stay alive and unchanged until the session is destroyed.
 */
#ifndef SHARDFS_LL_H
#define SHARDFS_LL_H

#include "shardfs/fs.h"

struct fuse_args;
struct fuse_session;
struct ll_uring;

/* What a session serves and how; the session's userdata. */
struct ll_session {
	struct shardfs *fs;	/* the filesystem served */
	struct ll_uring *uring;	/* the io_uring transport, or NULL */
	bool no_open;		/* the kernel accepts ENOSYS for OPEN */
};

/*
 * Create a session serving @ls->fs.  @args holds the FUSE options that
 * are left after shardfs' own were removed.  @ls must outlive the
 * session.  Returns NULL (after libfuse has printed why) on bad options.
 */
struct fuse_session *shardfs_session_new(struct fuse_args *args,
					 struct ll_session *ls);

#endif
