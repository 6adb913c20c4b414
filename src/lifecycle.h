/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lifecycle.h - telling orchestrators the mount is ready, and ending it
 * when it is no longer used or is told to.
 */
#ifndef SHARDFS_LIFECYCLE_H
#define SHARDFS_LIFECYCLE_H

struct fuse_session;
struct shardfs;

/*
 * Report readiness: write "READY=1\n" to @notify_fd (when >= 0) and close
 * it, and send READY=1 to $NOTIFY_SOCKET (systemd's sd_notify protocol)
 * when that is set.  Failures are logged, not fatal.
 */
void lifecycle_notify_ready(int notify_fd);

/*
 * Raise the kernel's per-file readahead for the mount at @mountpoint to
 * @kib KiB (FUSE mounts start at 128 KiB, whatever the daemon asks for).
 * Needs root; otherwise, or on any error, it logs at debug level and the
 * kernel default stays.  Must not touch the mount itself: it is called
 * before the session loop runs.
 */
void lifecycle_set_readahead(const char *mountpoint, unsigned kib);

struct idle_timer;

/*
 * Start a thread that, once no request has arrived for @seconds, unmounts
 * @mountpoint and ends @se.  A mount still in use (open files, working
 * directories) is not unmounted; the timer starts over.  Returns the
 * timer, or NULL (logged).
 */
struct idle_timer *lifecycle_idle_start(struct fuse_session *se,
					struct shardfs *fs,
					const char *mountpoint, unsigned seconds);

/* Stop and free @t (NULL is fine); call before destroying the session. */
void lifecycle_idle_stop(struct idle_timer *t);

/*
 * Ending the session on SIGTERM, SIGINT or SIGHUP, in place of libfuse's
 * fuse_set_signal_handlers() (SIGPIPE is ignored the same way):
 *
 *   lifecycle_signals_install()	before mounting: a signal from now
 *					on is kept for the thread
 *   lifecycle_signals_start()	after daemonizing, from the thread that
 *					will run the loop: starts the thread
 *   lifecycle_signals_stop()	once the loop has returned: joins it
 *   lifecycle_signals_remove()	after unmounting: default dispositions
 *
 * On a signal the thread calls @before_exit(@arg) while the loop still
 * answers requests, then ends @se and wakes the loop.  Installing and
 * starting return 0 or -errno (logged); one session per process.
 */
int lifecycle_signals_install(void);
int lifecycle_signals_start(struct fuse_session *se,
			    void (*before_exit)(void *), void *arg);
void lifecycle_signals_stop(void);
void lifecycle_signals_remove(void);

#endif
