/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll_uring.c - FUSE requests over io_uring, one queue per CPU (see
 * ll_uring.h for why).
 *
 * The kernel keeps one queue per possible CPU.  An entry is a header
 * (in/out header, the request's fixed argument, ring bookkeeping) and a
 * payload buffer as large as the largest request or reply.  Each ring
 * thread owns one entry and its own io_uring: it registers the entry,
 * waits for the completion that brings a request, serves it and commits
 * the reply, which also fetches the next request.  Threads of a queue are
 * pinned to its CPU; the kernel gives a request to the entry committed
 * last, i.e. to a thread that is free.
 *
 * Setting up must never leave a request waiting.  A connection whose
 * INIT reply does not acknowledge FUSE_OVER_IO_URING is served over
 * io_uring only while the fuse module's enable_uring stays set: once it
 * is switched off the kernel refuses every io_uring command of it,
 * commits too, the ring threads end and requests wait forever (seen three
 * times while test runs switched it).  So the reply acknowledges
 * io_uring, which ties it to the connection, and the kernel then holds
 * every request back until each queue has an entry.  Hence the order:
 * every ring thread sets its ring up before INIT is answered, and io_uring
 * is acknowledged only if each queue has one (else nothing registers and
 * everything stays on /dev/fuse).  A REGISTER the kernel refuses makes it
 * drop io_uring for the connection and serve over /dev/fuse
 * (fuse_uring_cmd() in fs/fuse/dev_uring.c); a REGISTER that cannot be
 * sent is replaced by one the kernel must refuse (decline()); if even
 * that fails, the session ends with an error.
 *
 * A request is rebuilt the way read(2) on /dev/fuse would deliver it
 * (header, fixed argument, payload) in front of the payload buffer, so
 * libfuse parses it without a copy of the payload, and a read whose reply
 * is written into the payload buffer (ll_uring_reply_buf) is committed
 * without a copy of the data.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ll_session.h"
#include "ll_uring.h"
#include "shardfs/fs.h"
#include "shardfs/log.h"

/*
 * The FUSE-over-io_uring ABI (protocol 7.42, Linux 6.14), which Debian
 * 12's <linux/fuse.h> predates.
 */
#ifndef FUSE_URING_IN_OUT_HEADER_SZ
#define FUSE_URING_IN_OUT_HEADER_SZ 128
#define FUSE_URING_OP_IN_OUT_SZ 128

struct fuse_uring_ent_in_out {
	uint64_t flags;		/* none defined */
	uint64_t commit_id;	/* the request's unique, for the commit */
	uint32_t payload_sz;	/* payload bytes, in either direction */
	uint32_t padding;	/* zero */
	uint64_t reserved;	/* zero */
};

struct fuse_uring_req_header {
	char in_out[FUSE_URING_IN_OUT_HEADER_SZ]; /* fuse_in/out_header */
	char op_in[FUSE_URING_OP_IN_OUT_SZ];	  /* the fixed argument */
	struct fuse_uring_ent_in_out ring_ent_in_out; /* bookkeeping */
};

enum fuse_uring_cmd {
	FUSE_IO_URING_CMD_REGISTER = 1,		/* add an entry, fetch */
	FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,	/* reply, fetch the next */
};

struct fuse_uring_cmd_req {
	uint64_t flags;		/* none defined */
	uint64_t commit_id;	/* the request replied to */
	uint16_t qid;		/* the queue (CPU) */
	uint8_t padding[6];	/* zero */
};
#endif

_Static_assert(sizeof(struct fuse_uring_req_header) == 288, "the 7.42 header");
_Static_assert(sizeof(struct fuse_uring_cmd_req) == 24, "the 7.42 command");

/* FUSE_OVER_IO_URING, bit 41 of the INIT flags, as it sits in flags2. */
#define INIT_FLAGS2_OVER_IO_URING (1u << (41 - 32))

/* Room in front of the payload for the rebuilt request's headers. */
#define REQUEST_PREFIX (sizeof(struct fuse_in_header) + FUSE_URING_OP_IN_OUT_SZ)

/* Submission entries per ring: the entry's command and the stop poll. */
#define RING_DEPTH 4
/* Bytes of command data in a 128-byte submission entry. */
#define SQE128_CMD_BYTES 80
_Static_assert(sizeof(struct fuse_uring_cmd_req) <= SQE128_CMD_BYTES, "fits");

/* CPU list of the kernel's queues: one per possible CPU. */
#define POSSIBLE_CPUS "/sys/devices/system/cpu/possible"

/* What a completion is for. */
enum { TAG_CMD = 1, TAG_STOP = 2 };

/*
 * Test hook: SHARDFS_TEST_URING_REGISTER=fail makes every ring thread
 * fail to send its REGISTER after io_uring was acknowledged (the daemon
 * must then decline it), =fail-decline makes declining fail too (the
 * session must end).  Read once, when the transport is attached.
 */
#define TEST_REGISTER_ENV "SHARDFS_TEST_URING_REGISTER"
enum test_register { TEST_REGISTER_OK, TEST_REGISTER_FAIL, TEST_DECLINE_FAIL };

/* One ring thread: its io_uring and the entry it registered. */
struct uring_worker {
	struct ll_uring *u;		/* the transport */
	unsigned qid;			/* queue (CPU) served */
	pthread_t thread;		/* the thread */
	bool started;			/* thread was created */
	struct io_uring ring;		/* this thread's io_uring */
	char *map;			/* header page + payload, mmap'ed */
	struct fuse_uring_req_header *hdr; /* at map */
	char *payload;			/* map + page size */
	struct iovec iov[2];		/* header and payload, as registered */
	uint64_t unique;		/* request being served */
	bool replied;			/* its reply is in the entry */
	bool ready;			/* ring and entry set up, under u->lock */
};

/* Where INIT is. */
enum init_state { INIT_WAIT, INIT_SEEN, INIT_DONE };

/* What the ring threads do once set up, decided when INIT is answered. */
enum go { GO_WAIT, GO_REGISTER, GO_ABANDON };

struct ll_uring {
	struct ll_session *ls;		/* the session's userdata */
	struct fuse_session *se;	/* the session */
	int fd;				/* its /dev/fuse descriptor */
	int stop_fd;			/* eventfd: readable when stopping */
	unsigned threads;		/* per queue, on allowed CPUs */
	unsigned nr_queues;		/* possible CPUs */
	unsigned nr_workers;		/* entries of workers[] */
	struct uring_worker *workers;	/* queue after queue */
	size_t page;			/* page size */
	size_t payload_size;		/* from INIT: largest request/reply */
	atomic_int init;		/* enum init_state */
	uint64_t init_unique;		/* INIT's unique, once INIT_SEEN */
	bool offered;			/* INIT offered io_uring */
	pthread_mutex_t lock;		/* guards reported, go, workers' ready */
	pthread_cond_t cond;		/* signalled when either changes */
	unsigned reported;		/* workers done with their set-up */
	enum go go;			/* what set-up workers do next */
	atomic_bool declined;		/* io_uring was declined to the kernel */
	atomic_bool failed;		/* the transport ended the session */
	enum test_register test;	/* the test hook's setting */
};

/* The ring thread running on this thread, if any.  file-state: libfuse
 * calls the custom writev() with no argument of ours, so the reply finds
 * its ring entry through the thread it runs on. */
static __thread struct uring_worker *current_worker;

/* Number of CPUs in the kernel's possible-CPU list ("0-3,8-11"). */
static unsigned possible_cpus(void)
{
	char list[1024];
	unsigned n = 0, lo, hi;
	FILE *f = fopen(POSSIBLE_CPUS, "re");
	char *p = list;
	int used;

	if (!f || !fgets(list, sizeof(list), f)) {
		if (f)
			fclose(f);
		return 0;
	}
	fclose(f);
	while (sscanf(p, "%u%n", &lo, &used) == 1) {
		p += used;
		hi = lo;
		if (*p == '-' && sscanf(p + 1, "%u%n", &hi, &used) == 1)
			p += 1 + used;
		n += hi >= lo ? hi - lo + 1 : 0;
		if (*p != ',')
			break;
		p++;
	}
	return n;
}

/* Prepare a FUSE command for this worker's entry. */
static void queue_cmd(struct uring_worker *w, uint32_t op, uint64_t commit_id)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
	struct fuse_uring_cmd_req *req;

	assert(sqe);	/* RING_DEPTH covers everything in flight */
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, w->u->fd, w->iov, 2, 0);
	memset(sqe->cmd, 0, SQE128_CMD_BYTES);
	sqe->cmd_op = op;
	req = (struct fuse_uring_cmd_req *)sqe->cmd;
	req->qid = (uint16_t)w->qid;
	req->commit_id = commit_id;
	io_uring_sqe_set_data64(sqe, TAG_CMD);
}

/* Copy a reply libfuse sends into the entry; returns what writev would. */
static ssize_t worker_reply(struct uring_worker *w, const struct iovec *iov,
			    int count)
{
	struct fuse_out_header out;
	size_t len = 0;

	memcpy(&out, iov[0].iov_base, sizeof(out));
	for (int i = 1; i < count; i++) {
		if (iov[i].iov_len > w->u->payload_size - len) {
			log_error("io_uring: a %u-byte reply exceeds the %zu-byte buffer",
				  out.len, w->u->payload_size);
			out.error = -EIO;
			len = 0;
			break;
		}
		if (iov[i].iov_base != w->payload + len)
			memmove(w->payload + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	memcpy(w->hdr->in_out, &out, sizeof(out));
	w->hdr->ring_ent_in_out.payload_sz = (uint32_t)len;
	w->replied = true;
	return out.len;
}

/* Answer the request in the entry with @err, without libfuse. */
static void worker_fail(struct uring_worker *w, int err)
{
	struct fuse_out_header out = {
		.len = sizeof(out), .error = err, .unique = w->unique,
	};
	struct iovec iov = { &out, sizeof(out) };

	worker_reply(w, &iov, 1);
}

/*
 * Serve the request the kernel put in the entry: rebuild it as /dev/fuse
 * would deliver it, right in front of the payload, and let libfuse
 * dispatch it.  The reply arrives in uring_writev() on this thread.
 */
static void worker_serve(struct uring_worker *w)
{
	struct fuse_in_header in;
	uint32_t payload = w->hdr->ring_ent_in_out.payload_sz;
	size_t fixed;
	char *req;

	memcpy(&in, w->hdr->in_out, sizeof(in));
	w->unique = in.unique;
	w->replied = false;
	shardfs_count_uring_request(w->u->ls->fs);
	if (in.len < sizeof(in) + (size_t)payload || payload > w->u->payload_size ||
	    (fixed = in.len - sizeof(in) - payload) > FUSE_URING_OP_IN_OUT_SZ) {
		log_error("io_uring: request %u of %u bytes with a %u-byte payload "
			  "does not fit its entry", in.opcode, in.len, payload);
		worker_fail(w, -EIO);
		return;
	}
	req = w->payload - sizeof(in) - fixed;
	memcpy(req, &in, sizeof(in));
	memcpy(req + sizeof(in), w->hdr->op_in, fixed);
	fuse_session_process_buf(w->u->se, &(struct fuse_buf){
		.mem = req, .size = in.len });
	if (!w->replied) {
		log_error("io_uring: request %u got no reply", in.opcode);
		worker_fail(w, -EIO);
	}
}

/* Map the entry, register it and arm the stop poll.  0 or -errno. */
static int worker_setup(struct uring_worker *w)
{
	struct ll_uring *u = w->u;
	struct io_uring_sqe *sqe;
	int rc;

	rc = io_uring_queue_init(RING_DEPTH, &w->ring, IORING_SETUP_SQE128 |
				 IORING_SETUP_SINGLE_ISSUER |
				 IORING_SETUP_DEFER_TASKRUN);
	if (rc)
		return rc;
	w->map = mmap(NULL, u->page + u->payload_size, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w->map == MAP_FAILED) {
		w->map = NULL;
		rc = -errno;
		goto out_exit_ring;
	}
	w->hdr = (struct fuse_uring_req_header *)w->map;
	w->payload = w->map + u->page;
	w->iov[0] = (struct iovec){ w->hdr, sizeof(*w->hdr) };
	w->iov[1] = (struct iovec){ w->payload, u->payload_size };
	sqe = io_uring_get_sqe(&w->ring);
	io_uring_prep_poll_add(sqe, u->stop_fd, POLLIN);
	io_uring_sqe_set_data64(sqe, TAG_STOP);
	queue_cmd(w, FUSE_IO_URING_CMD_REGISTER, 0);
	return 0;

out_exit_ring:
	io_uring_queue_exit(&w->ring);
	return rc;
}

/* Whether a failed completion says the connection is going away. */
static bool connection_ended(int err)
{
	return err == -ENOTCONN || err == -ECONNABORTED || err == -ECANCELED;
}

/*
 * Serve requests until the stop poll fires or the connection ends.  Any
 * other failure of the first completion is the kernel refusing the
 * REGISTER, after which it serves the connection over /dev/fuse.
 */
static void worker_loop(struct uring_worker *w)
{
	struct io_uring_cqe *cqe;
	bool registered = false;
	int rc;

	for (;;) {
		rc = io_uring_submit_and_wait(&w->ring, 1);
		if (rc < 0 && rc != -EINTR) {
			log_error("io_uring queue %u: %s", w->qid, strerror(-rc));
			return;
		}
		while (!io_uring_peek_cqe(&w->ring, &cqe)) {
			uint64_t tag = io_uring_cqe_get_data64(cqe);
			int res = cqe->res;

			io_uring_cqe_seen(&w->ring, cqe);
			if (tag == TAG_STOP)
				return;
			if (res < 0 && !registered && !connection_ended(res))
				log_warn("io_uring queue %u: REGISTER refused (%s); "
					 "requests go over /dev/fuse", w->qid,
					 strerror(-res));
			if (res < 0) {	/* unmounted, or io_uring refused */
				log_debug("io_uring queue %u: %s", w->qid,
					  strerror(-res));
				return;
			}
			registered = true;
			worker_serve(w);
			queue_cmd(w, FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
				  w->hdr->ring_ent_in_out.commit_id);
		}
	}
}

/*
 * The ring threads are gone or going and the kernel holds requests back
 * for io_uring: end the session, so that they fail instead of waiting.
 */
static void fail_session(struct ll_uring *u)
{
	log_error("io_uring was acknowledged but cannot be served, nor "
		  "declined: ending the session");
	atomic_store(&u->failed, true);
	fuse_session_exit(u->se);
	kill(getpid(), SIGTERM);	/* wakes the session loop */
}

/*
 * Make the kernel give up io_uring for this connection: send a REGISTER
 * it must refuse (a queue number past its queues), which it answers by
 * serving the connection over /dev/fuse.  From a ring of its own, since
 * the caller's could not send.  0 once refused, else -errno.
 */
static int decline(struct ll_uring *u, const struct iovec *iov)
{
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	struct fuse_uring_cmd_req *req;
	int rc;

	if (u->test == TEST_DECLINE_FAIL)
		return -EIO;
	rc = io_uring_queue_init(1, &ring, IORING_SETUP_SQE128);
	if (rc)
		return rc;
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, u->fd, iov, 2, 0);
	memset(sqe->cmd, 0, SQE128_CMD_BYTES);
	sqe->cmd_op = FUSE_IO_URING_CMD_REGISTER;
	req = (struct fuse_uring_cmd_req *)sqe->cmd;
	req->qid = UINT16_MAX;
	rc = io_uring_submit_and_wait(&ring, 1);
	if (rc >= 0 && !(rc = io_uring_peek_cqe(&ring, &cqe))) {
		/* a queue this far out is refused, unless the kernel is gone */
		rc = cqe->res < 0 ? 0 : -EPROTO;
		io_uring_cqe_seen(&ring, cqe);
	}
	io_uring_queue_exit(&ring);
	return rc;
}

/*
 * Send the REGISTER worker_setup() queued (and the stop poll).  0, or
 * -errno when it could not be sent: io_uring is then declined, once for
 * all workers, or the session ended.
 */
static int worker_register(struct uring_worker *w)
{
	struct ll_uring *u = w->u;
	int rc = u->test != TEST_REGISTER_OK ? -EIO : io_uring_submit(&w->ring);

	if (rc == 2)	/* both entries taken */
		return 0;
	rc = rc < 0 ? rc : -EAGAIN;
	log_warn("io_uring queue %u: cannot send REGISTER (%s); declining "
		 "io_uring, requests go over /dev/fuse", w->qid, strerror(-rc));
	if (!atomic_exchange(&u->declined, true) && decline(u, w->iov))
		fail_session(u);
	return rc;
}

/* Tell INIT's thread that this worker is set up (@ready) or not. */
static void worker_report(struct uring_worker *w, bool ready)
{
	struct ll_uring *u = w->u;

	pthread_mutex_lock(&u->lock);
	w->ready = ready;
	u->reported++;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
}

/* Wait until INIT is answered: true if io_uring was acknowledged. */
static bool worker_wait_go(struct ll_uring *u)
{
	enum go go;

	pthread_mutex_lock(&u->lock);
	while (u->go == GO_WAIT)
		pthread_cond_wait(&u->cond, &u->lock);
	go = u->go;
	pthread_mutex_unlock(&u->lock);
	return go == GO_REGISTER;
}

/*
 * A ring thread runs pinned to its queue's CPU, under SCHED_IDLE.  It
 * needs the CPU only while the thread whose request it serves is blocked
 * on it, so yielding to every other thread costs it nothing; and a CPU
 * running only SCHED_IDLE threads counts as idle, so its reply wakes the
 * requester right there.  At normal priority the scheduler moved the
 * requester to the other, halted CPU on almost every reply: 40.8 us per
 * request against 4.6 us, and cold reads in shard order at 206 against
 * 516 MB/s (2-CPU VM).  With two CPU hogs per CPU, requests still took
 * 4.3 us (p50), 6 us (p99): nothing waits for the hogs.
 */
static void *worker_main(void *arg)
{
	static const struct sched_param idle = { 0 };
	struct uring_worker *w = arg;
	char name[16];
	cpu_set_t cpu;
	int rc;

	snprintf(name, sizeof(name), "shardfs-q%u", w->qid);
	pthread_setname_np(pthread_self(), name);
	CPU_ZERO(&cpu);
	CPU_SET(w->qid, &cpu);
	if (pthread_setaffinity_np(pthread_self(), sizeof(cpu), &cpu))
		log_debug("io_uring queue %u: cannot pin to its CPU", w->qid);
	if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle))
		log_debug("io_uring queue %u: no SCHED_IDLE", w->qid);
	current_worker = w;
	rc = worker_setup(w);
	worker_report(w, !rc);
	if (rc) {
		log_warn("io_uring queue %u: %s; requests stay on /dev/fuse",
			 w->qid, strerror(-rc));
		return NULL;
	}
	if (worker_wait_go(w->u) && !worker_register(w))
		worker_loop(w);
	io_uring_queue_exit(&w->ring);
	return NULL;
}

/*
 * Create the ring threads, with every signal blocked as libfuse's are.
 * Returns how many were started.
 */
static unsigned start_workers(struct ll_uring *u)
{
	unsigned started = 0;
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (unsigned i = 0; i < u->nr_workers; i++) {
		struct uring_worker *w = &u->workers[i];

		w->started = !pthread_create(&w->thread, NULL, worker_main, w);
		if (!w->started)
			log_warn("io_uring queue %u: cannot start a thread", w->qid);
		started += w->started;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	log_debug("io_uring: %u threads for %u CPU queues, %zu-byte payloads",
		  started, u->nr_queues, u->payload_size);
	return started;
}

/* Lay the workers out: @threads per queue on CPUs this process may use. */
static int plan_workers(struct ll_uring *u)
{
	cpu_set_t allowed;
	unsigned i = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		CPU_ZERO(&allowed);
	u->workers = calloc((size_t)u->nr_queues * u->threads, sizeof(*u->workers));
	if (!u->workers)
		return -ENOMEM;
	for (unsigned q = 0; q < u->nr_queues; q++) {
		/* a CPU nothing of ours runs on needs an entry, not a crowd */
		unsigned n = CPU_ISSET(q, &allowed) ? u->threads : 1;

		for (unsigned t = 0; t < n; t++)
			u->workers[i++] = (struct uring_worker){ .u = u, .qid = q };
	}
	u->nr_workers = i;
	return 0;
}

/* Whether every queue has a worker set up; under u->lock. */
static bool every_queue_ready(const struct ll_uring *u)
{
	unsigned i = 0;

	for (unsigned q = 0; q < u->nr_queues; q++) {
		bool ready = false;

		/* workers come queue after queue */
		for (; i < u->nr_workers && u->workers[i].qid == q; i++)
			ready = ready || u->workers[i].ready;
		if (!ready)
			return false;
	}
	return true;
}

/*
 * Start the ring threads and wait until each has set its ring up.  True
 * if every queue has one: io_uring can be acknowledged.
 */
static bool prepare_workers(struct ll_uring *u, const struct fuse_init_out *init)
{
	unsigned started;
	bool ready;
	size_t need;

	need = init->max_write;
	if ((size_t)init->max_pages * u->page > need)
		need = (size_t)init->max_pages * u->page;
	u->payload_size = (need + u->page - 1) / u->page * u->page;
	if (plan_workers(u)) {
		log_warn("io_uring: out of memory; requests stay on /dev/fuse");
		return false;
	}
	started = start_workers(u);
	pthread_mutex_lock(&u->lock);
	while (u->reported < started)
		pthread_cond_wait(&u->cond, &u->lock);
	ready = every_queue_ready(u);
	pthread_mutex_unlock(&u->lock);
	if (!ready)
		log_warn("io_uring: a CPU queue has no ring; requests stay on /dev/fuse");
	return ready;
}

/* Let the set-up workers register (@go GO_REGISTER) or end. */
static void release_workers(struct ll_uring *u, enum go go)
{
	pthread_mutex_lock(&u->lock);
	u->go = go;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
}

/*
 * Answer INIT.  If the kernel offered io_uring and every queue has a ring
 * set up, the reply acknowledges it (which pins io_uring to this
 * connection whatever enable_uring becomes) and the rings register once
 * the kernel has the reply; otherwise the rings end unregistered and
 * everything goes over /dev/fuse.
 */
static ssize_t answer_init(struct ll_uring *u, int fd, struct iovec *iov,
			   int count)
{
	struct fuse_out_header *out = iov[0].iov_base;
	struct fuse_init_out *init = count > 1 ? iov[1].iov_base : NULL;
	bool ack;
	ssize_t n;

	atomic_store(&u->init, INIT_DONE);
	ack = u->offered && !out->error && init &&
	      iov[1].iov_len >= sizeof(*init) && prepare_workers(u, init);
	if (!ack)
		log_debug("io_uring: not used (fuse.enable_uring, or no rings)");
	if (ack) {
		init->flags |= FUSE_INIT_EXT;
		init->flags2 |= INIT_FLAGS2_OVER_IO_URING;
		pushahead_cheap_reads(&u->ls->fs->push);
	}
	n = writev(fd, iov, count);
	release_workers(u, ack && n >= 0 ? GO_REGISTER : GO_ABANDON);
	return n;
}

static ssize_t uring_read(int fd, void *buf, size_t len, void *userdata)
{
	struct ll_uring *u = ((struct ll_session *)userdata)->uring;
	const struct fuse_in_header *in = buf;
	const struct fuse_init_in *init = (const void *)(in + 1);
	ssize_t n = read(fd, buf, len);

	if (n >= (ssize_t)(sizeof(*in) + sizeof(*init)) &&
	    in->opcode == FUSE_INIT && atomic_load(&u->init) == INIT_WAIT) {
		u->init_unique = in->unique;
		u->offered = (init->flags & FUSE_INIT_EXT) &&
			     (init->flags2 & INIT_FLAGS2_OVER_IO_URING);
		atomic_store(&u->init, INIT_SEEN);
	}
	return n;
}

static ssize_t uring_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct ll_uring *u = ((struct ll_session *)userdata)->uring;
	const struct fuse_out_header *out = iov[0].iov_base;
	struct uring_worker *w = current_worker;

	if (w && out->unique == w->unique && !w->replied)
		return worker_reply(w, iov, count);
	if (atomic_load(&u->init) == INIT_SEEN && out->unique == u->init_unique)
		return answer_init(u, fd, iov, count);
	return writev(fd, iov, count);
}

/* A spliced READ reply (ll.c) goes to /dev/fuse as it would without this
 * custom io: ring threads reply from their payload buffer, never so. */
static ssize_t uring_splice_send(int fdin, off_t *offin, int fdout,
				 off_t *offout, size_t len, unsigned int flags,
				 void *userdata)
{
	(void)userdata;
	assert(!current_worker);
	return splice(fdin, offin, fdout, offout, len, flags);
}

char *ll_uring_reply_buf(size_t *size)
{
	struct uring_worker *w = current_worker;

	if (!w)
		return NULL;
	*size = w->u->payload_size;
	return w->payload;
}

/* The test hook's setting, from the environment. */
static enum test_register test_register_setting(void)
{
	const char *v = getenv(TEST_REGISTER_ENV);

	if (!v)
		return TEST_REGISTER_OK;
	if (!strcmp(v, "fail"))
		return TEST_REGISTER_FAIL;
	if (!strcmp(v, "fail-decline"))
		return TEST_DECLINE_FAIL;
	log_warn("%s=%s: not fail or fail-decline; ignored", TEST_REGISTER_ENV, v);
	return TEST_REGISTER_OK;
}

int ll_uring_attach(struct ll_session *ls, struct fuse_session *se,
		    unsigned threads)
{
	static const struct fuse_custom_io io = {
		.read = uring_read, .writev = uring_writev,
		.splice_send = uring_splice_send,
	};
	struct ll_uring *u = calloc(1, sizeof(*u));
	int rc = -ENOMEM;

	if (!u)
		goto out_log;
	*u = (struct ll_uring){
		.ls = ls, .se = se, .fd = fuse_session_fd(se), .threads = threads,
		.nr_queues = possible_cpus(), .page = (size_t)sysconf(_SC_PAGESIZE),
		.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
		.test = test_register_setting(),
	};
	assert(u->page >= sizeof(struct fuse_uring_req_header) + REQUEST_PREFIX);
	rc = -ENODEV;
	if (!u->nr_queues)
		goto out_free;
	u->stop_fd = eventfd(0, EFD_CLOEXEC);
	rc = -errno;
	if (u->stop_fd < 0)
		goto out_free;
	ls->uring = u;
	rc = fuse_session_custom_io(se, &io, u->fd);
	if (!rc)
		return 0;
	ls->uring = NULL;
	close(u->stop_fd);
out_free:
	free(u);
out_log:
	log_warn("io_uring transport unavailable: %s", strerror(-rc));
	return rc;
}

int ll_uring_free(struct ll_uring *u)
{
	int rc;

	if (!u)
		return 0;
	if (eventfd_write(u->stop_fd, 1))
		log_error("io_uring: cannot stop the ring threads: %s", strerror(errno));
	for (unsigned i = 0; i < u->nr_workers; i++) {
		struct uring_worker *w = &u->workers[i];

		if (w->started)
			pthread_join(w->thread, NULL);
		/* the thread is gone: the kernel copies nothing here any more */
		if (w->map)
			munmap(w->map, u->page + u->payload_size);
	}
	close(u->stop_fd);
	rc = atomic_load(&u->failed) ? -EIO : 0;
	free(u->workers);
	free(u);
	return rc;
}
