/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll_uring.c - FUSE requests over io_uring, one queue per CPU (see
 * ll_uring.h for why).
 *
 * The kernel keeps one queue per possible CPU and becomes ready only when
 * every queue has a registered entry; until then requests keep coming
 * over /dev/fuse, so a queue that cannot be set up costs speed, never
 * service.  An entry is a header (in/out header, the request's fixed
 * argument, ring bookkeeping) and a payload buffer as large as the
 * largest request or reply.  Each ring thread owns one entry and its own
 * io_uring: it registers the entry, waits for the completion that brings
 * a request, serves it and commits the reply, which also fetches the
 * next request.  Threads of a queue are pinned to its CPU; the kernel
 * gives a request to the entry committed last, i.e. to a thread that is
 * free.
 *
 * A request is rebuilt the way read(2) on /dev/fuse would deliver it
 * (header, fixed argument, payload) in front of the payload buffer, so
 * libfuse parses it without a copy of the payload, and a read whose reply
 * is written into the payload buffer (ll_uring_reply_buf) is committed
 * without a copy of the data.
 */
#include <assert.h>
#include <errno.h>
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
};

/* Where INIT is. */
enum init_state { INIT_WAIT, INIT_SEEN, INIT_DONE };

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
};

/* The ring thread running on this thread, if any. */
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

/* Serve requests until the stop poll fires or the connection ends. */
static void worker_loop(struct uring_worker *w)
{
	struct io_uring_cqe *cqe;
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
			if (res < 0) {	/* unmounted, or io_uring refused */
				log_debug("io_uring queue %u: %s", w->qid,
					  strerror(-res));
				return;
			}
			worker_serve(w);
			queue_cmd(w, FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
				  w->hdr->ring_ent_in_out.commit_id);
		}
	}
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
	if (rc) {
		log_warn("io_uring queue %u: %s; requests stay on /dev/fuse",
			 w->qid, strerror(-rc));
		return NULL;
	}
	worker_loop(w);
	io_uring_queue_exit(&w->ring);
	return NULL;
}

/* Create the ring threads, with every signal blocked as libfuse's are. */
static void start_workers(struct ll_uring *u)
{
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (unsigned i = 0; i < u->nr_workers; i++) {
		struct uring_worker *w = &u->workers[i];

		w->started = !pthread_create(&w->thread, NULL, worker_main, w);
		if (!w->started)
			log_warn("io_uring queue %u: cannot start a thread", w->qid);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	log_debug("io_uring: %u threads for %u CPU queues, %zu-byte payloads",
		  u->nr_workers, u->nr_queues, u->payload_size);
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

/* INIT has been answered: start if the kernel offered io_uring. */
static void init_answered(struct ll_uring *u, const struct iovec *iov, int count)
{
	const struct fuse_out_header *out = iov[0].iov_base;
	const struct fuse_init_out *init = iov[1].iov_base;
	size_t need;

	atomic_store(&u->init, INIT_DONE);
	if (!u->offered || out->error || count < 2 ||
	    iov[1].iov_len < sizeof(*init)) {
		log_debug("io_uring: not offered by the kernel (fuse.enable_uring)");
		return;
	}
	need = init->max_write;
	if ((size_t)init->max_pages * u->page > need)
		need = (size_t)init->max_pages * u->page;
	u->payload_size = (need + u->page - 1) / u->page * u->page;
	if (plan_workers(u))
		log_warn("io_uring: out of memory; requests stay on /dev/fuse");
	else
		start_workers(u);
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
	ssize_t n;

	if (w && out->unique == w->unique && !w->replied)
		return worker_reply(w, iov, count);
	n = writev(fd, iov, count);
	if (n >= 0 && atomic_load(&u->init) == INIT_SEEN &&
	    out->unique == u->init_unique)
		init_answered(u, iov, count);
	return n;
}

char *ll_uring_reply_buf(size_t *size)
{
	struct uring_worker *w = current_worker;

	if (!w)
		return NULL;
	*size = w->u->payload_size;
	return w->payload;
}

int ll_uring_attach(struct ll_session *ls, struct fuse_session *se,
		    unsigned threads)
{
	static const struct fuse_custom_io io = {
		.read = uring_read, .writev = uring_writev,
	};
	struct ll_uring *u = calloc(1, sizeof(*u));
	int rc = -ENOMEM;

	if (!u)
		goto out_log;
	*u = (struct ll_uring){
		.ls = ls, .se = se, .fd = fuse_session_fd(se), .threads = threads,
		.nr_queues = possible_cpus(), .page = (size_t)sysconf(_SC_PAGESIZE),
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

void ll_uring_free(struct ll_uring *u)
{
	if (!u)
		return;
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
	free(u->workers);
	free(u);
}
