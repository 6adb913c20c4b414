/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll_uring.h - FUSE requests over io_uring, one queue per CPU.
 *
 * Linux 6.14 and later can hand FUSE requests to the daemon through
 * io_uring instead of read(2) and writev(2) on /dev/fuse (when the fuse
 * module's enable_uring parameter is set).  A request then goes to the
 * queue of the CPU its caller runs on, and a thread pinned to that CPU,
 * at SCHED_IDLE, serves it: caller and server take turns on one CPU
 * instead of waking each other across CPUs.  That is the whole gain, and
 * it is large on virtual machines, where waking an idle CPU costs the
 * hypervisor's round trip: on the 2-CPU development VM a request answered
 * from memory took 25-40 us over /dev/fuse and 4.6 us over io_uring (why
 * SCHED_IDLE: see worker_main() in ll_uring.c).
 *
 * libfuse 3.14 knows nothing of it, so ll_uring sits under libfuse: it
 * installs custom I/O functions on the session, watches INIT go by to
 * learn whether the kernel offers io_uring and how large requests can
 * be, and then starts the ring threads.  They hand each request to
 * fuse_session_process_buf() like libfuse's own loop does; the reply
 * comes back through the custom writev() on the same thread and is
 * committed to the ring.  FORGET and INTERRUPT stay on /dev/fuse (the
 * kernel sends them there), served by the ordinary libfuse loop, as is
 * everything when io_uring is not offered, cannot be set up on every CPU
 * queue before INIT is answered, or is refused at REGISTER.  Once set up,
 * io_uring is acknowledged in the INIT reply, which ties it to the
 * connection: the fuse module's enable_uring, switched later, no longer
 * matters to the mount (see ll_uring.c for why that is needed).
 *
 * Thread-safety: ll_uring_attach() and ll_uring_free() are called by the
 * main thread around the session loop; ll_uring_reply_buf() by any
 * thread.
 */
#ifndef SHARDFS_LL_URING_H
#define SHARDFS_LL_URING_H

#include <stddef.h>

struct fuse_session;
struct ll_session;
struct ll_uring;

/*
 * Ring threads per CPU queue: a thread serves one request at a time, so
 * this many requests of one CPU can wait for the disk at once.
 */
#define LL_URING_THREADS_DEFAULT 2
/* Most threads per queue -o io_uring_threads= accepts. */
#define LL_URING_THREADS_MAX 64

/*
 * Route the I/O of mounted session @se (serving @ls, whose uring field is
 * set) through the io_uring transport, with @threads threads per CPU
 * queue once the kernel offers it.  Returns 0, or -errno (logged) when it
 * cannot be set up; the session then stays on /dev/fuse.
 */
int ll_uring_attach(struct ll_session *ls, struct fuse_session *se,
		    unsigned threads);

/*
 * Stop the ring threads and free the transport (NULL: nothing to do).
 * Called once the session loop has returned and no other thread replies
 * or notifies any more (push-ahead stopped), before the unmount.
 * Returns -EIO if the transport ended the session because io_uring was
 * acknowledged to the kernel but could neither be served nor declined
 * (logged), else 0.
 */
int ll_uring_free(struct ll_uring *u);

/*
 * The reply buffer of the calling thread when it is a ring thread (its
 * size in *size), else NULL.  A reply whose data is already there is not
 * copied again.
 */
char *ll_uring_reply_buf(size_t *size);

#endif
