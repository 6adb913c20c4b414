/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prelist.h - directory entries listed through the mount by the daemon
 * itself, so that the kernel holds their inodes before a reader looks
 * them up.
 *
 * Push-ahead (pushahead.h) can store a member's bytes only into an inode
 * the kernel holds.  After a listing (os.walk, ImageFolder) it holds them
 * all; on a fresh mount it learns of a file only from the reader's own
 * LOOKUP, microseconds before the READ, so a reader that never lists pays
 * a LOOKUP and a READ per file and nothing can be pushed.  Here a thread
 * of the daemon opens the member's directory through the mount, seeks to
 * the member and reads the entries asked for on: the kernel asks for
 * them with READDIRPLUS, hundreds of entries per request, and makes an
 * inode for each, as it would for the reader's own listing.  The same
 * makes the inodes of a huge directory that a reader listed bare
 * (pushahead_list_bare()), all of them.
 *
 * The thread's system calls are answered by the daemon's own request
 * threads.  If the session ends while one waits, it stays blocked until
 * the connection is torn down, so nobody waits for the thread: callers
 * wait at most their timeout, prelist_stop() returns at once, and the
 * thread frees the state when it leaves.  It opens directories through a
 * private clone of the mount (open_tree, which needs CAP_SYS_ADMIN), so an
 * unmount meanwhile succeeds and the session ends once the listing is
 * closed; without the capability it opens them through the mount, which
 * is then busy for the listing (well under a millisecond for push-ahead's
 * 256 entries): an unmount in that moment fails with EBUSY,
 * as with any open directory; long listings are not asked for then
 * (prelist_clones()).
 *
 * Thread-safety: prelist_list() may be called from any thread, one
 * listing at a time (a call while another is under way returns -EBUSY);
 * prelist_start() and prelist_stop() once each, by one thread, and the
 * two getters between them.
 */
#ifndef SHARDFS_PRELIST_H
#define SHARDFS_PRELIST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Longest a caller waits for a listing, in milliseconds. */
#define PRELIST_WAIT_MS 100

struct prelist;

/*
 * Start the listing thread for the mount at @mountpoint (an absolute
 * path).  Returns 0 with *@pl set, or -errno.
 */
int prelist_start(struct prelist **pl, const char *mountpoint);

/*
 * List @count entries of the directory at @dir (relative to the mount's
 * root; "" is the root), whose inode number must be @dir_ino, from its
 * @pos-th entry on, and wait up to PRELIST_WAIT_MS for it.  Returns the
 * entries read, or -EBUSY (another listing is under way), -ETIMEDOUT
 * (this one is, still: it goes on), -ESTALE (the path does not lead to
 * that directory of this mount: then every later call fails the same
 * way) or another -errno.
 */
ssize_t prelist_list(struct prelist *pl, const char *dir, uint64_t dir_ino,
		     uint64_t pos, uint64_t count);

/*
 * The listing thread's id, as its requests carry it (fuse_req_ctx()->pid):
 * its listings must reach the daemon, not the kernel's cache of the
 * directory, and make an inode for each entry.
 */
pid_t prelist_thread_id(const struct prelist *pl);

/*
 * Whether listings go through a private clone of the mount, so that one
 * of any length leaves an unmount free.  Without one (no CAP_SYS_ADMIN)
 * a listing of a million entries would keep the mount busy for seconds.
 */
bool prelist_clones(const struct prelist *pl);

/* No more listings; the thread leaves once it is not blocked. */
void prelist_stop(struct prelist *pl);

#endif
