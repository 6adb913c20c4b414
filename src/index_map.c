/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index_map.c - serve an index file from its own pages under a read lease,
 * and switch to a private copy before anyone can change it.
 *
 * The private copy that issue 13 made of every index (anonymous memory,
 * ~81 bytes per member, copied and verified at every mount) is now only
 * what happens when someone writes the file under a mount.  Measured at
 * 2 M members, a 155 MiB index (docs/benchmarks-scale.md): the daemon's
 * anonymous memory after a remount drops from 165 MiB to 10 MiB, none of
 * it the index, whose pages are reclaimable page cache; a load and check
 * takes 0.08-0.16 s of CPU instead of 0.55-0.78 s.  A copy into an
 * O_TMPFILE (copy_file_range) is file-backed too, but still copies the
 * whole index and writes it back to disk at every mount: it is only the
 * fallback where no lease is granted, and what a lease break switches to.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardfs/index_map.h"
#include "shardfs/log.h"

/* Bytes per read(2) while copying into anonymous memory. */
#define INDEX_MAP_READ_CHUNK (8u << 20)

/*
 * The watcher.  file-state: signal dispositions and lease owners are the
 * process's, so its state is too: the SIGIO handler, which gets no
 * argument, only posts wake (async-signal-safe), and the thread looks at
 * every leased map for a break.
 */
static struct {
	pthread_once_t once;	/* sem_init and the fork handlers */
	pthread_mutex_t lock;	/* guards the fields below */
	sem_t wake;		/* posted by a SIGIO */
	struct index_map *maps;	/* maps of leased files */
	pthread_t thread;	/* the watcher, while pid is ours */
	pid_t pid;		/* process whose watcher runs; 0: none */
} watch = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER };

/* Read all @len bytes of @fd; a shorter file changed under us. */
static int read_all(int fd, char *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		size_t chunk = len - done < INDEX_MAP_READ_CHUNK ? len - done
								   : INDEX_MAP_READ_CHUNK;
		ssize_t n = pread(fd, buf + done, chunk, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		done += (size_t)n;
	}
	return 0;
}

/*
 * Map @p (@len bytes, a fresh mapping) read-only at @at, replacing what
 * is there in one step (readers never see a hole), or leave it where it
 * is when @at is NULL.  Returns the address or MAP_FAILED (@p unmapped).
 */
static char *place(char *p, size_t len, char *at)
{
	if (p == MAP_FAILED || !at)
		return p;
	if (mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
		munmap(p, len);
		return MAP_FAILED;
	}
	return at;
}

/* A copy of @fd in an unlinked file of @path's directory, mapped. */
static char *copy_to_file(int fd, size_t len, const char *path)
{
	char dir[PATH_MAX], *p = MAP_FAILED;
	loff_t in = 0, out = 0;
	int tmp;

	snprintf(dir, sizeof(dir), "%s", path);
	tmp = open(dirname(dir), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (tmp < 0)
		return MAP_FAILED;
	while ((size_t)out < len) {
		ssize_t n = copy_file_range(fd, &in, tmp, &out, len - (size_t)out, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto out_close;
	}
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, tmp, 0);
out_close:
	close(tmp);
	return p;
}

/* A copy of @fd in anonymous memory, read-only. */
static char *copy_to_anon(int fd, size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p != MAP_FAILED && (read_all(fd, p, len) || mprotect(p, len, PROT_READ))) {
		munmap(p, len);
		return MAP_FAILED;
	}
	return p;
}

/*
 * Serve @m from a private copy of @fd's first m->len bytes, mapped at
 * m->addr (or anywhere when it is NULL).  0 or -errno.
 */
static int serve_copy(struct index_map *m, int fd)
{
	char *at = (char *)m->addr, *p = place(copy_to_file(fd, m->len, m->path),
					       m->len, at);
	enum index_map_kind kind = INDEX_MAP_COPY;

	if (p == MAP_FAILED) {
		p = place(copy_to_anon(fd, m->len), m->len, at);
		kind = INDEX_MAP_ANON;
	}
	if (p == MAP_FAILED)
		return errno ? -errno : -EIO;
	m->addr = p;
	m->kind = kind;	/* after the switch: readers of kind see it done */
	return 0;
}

/* Someone wants to write m's file: copy, switch, let the lease go. */
static void on_break(struct index_map *m)
{
	int rc = serve_copy(m, m->fd);

	if (rc)
		log_error("%s: the index file is being written and no private copy "
			  "could be made (%s): the mount may fail", m->path, strerror(-rc));
	else
		log_info("%s: the index file is being written; serving a private copy",
			 m->path);
	fcntl(m->fd, F_SETLEASE, F_UNLCK);
	close(m->fd);
	m->fd = -1;
}

/* Is m's lease ours and being broken (or gone)? */
static bool lease_breaking(const struct index_map *m)
{
	return fcntl(m->fd, F_GETOWN) == getpid() &&
	       fcntl(m->fd, F_GETLEASE) != F_RDLCK;
}

static void *watch_run(void *arg)
{
	(void)arg;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	for (;;) {
		/* index_map_free() ends the thread only while it waits */
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		while (sem_wait(&watch.wake) && errno == EINTR)
			;
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		pthread_mutex_lock(&watch.lock);
		for (struct index_map **pp = &watch.maps; *pp;) {
			struct index_map *m = *pp;

			if (!lease_breaking(m)) {
				pp = &m->next;
				continue;
			}
			*pp = m->next;
			on_break(m);
		}
		pthread_mutex_unlock(&watch.lock);
	}
	return NULL;
}

static void on_sigio(int sig)
{
	int saved = errno;	/* of whatever the signal interrupted */

	(void)sig;
	sem_post(&watch.wake);
	errno = saved;
}

/* Threads do not survive fork(2): the child starts its own on adopt. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&watch.lock);
}

static void fork_done(void)
{
	pthread_mutex_unlock(&watch.lock);
}

static void watch_once(void)
{
	sem_init(&watch.wake, 0, 0);
	pthread_atfork(fork_prepare, fork_done, fork_done);
}

/* A break signals SIGIO: it must find the handler before any lease. */
static int handler_install(void)
{
	struct sigaction sa = { .sa_handler = on_sigio, .sa_flags = SA_RESTART };

	sigemptyset(&sa.sa_mask);
	return sigaction(SIGIO, &sa, NULL) ? -errno : 0;
}

/* Start this process's watcher unless it runs.  Caller holds the lock. */
static int watch_start(void)
{
	sigset_t all, old;
	int rc;

	if (watch.pid == getpid())
		return 0;
	rc = handler_install();
	if (rc)
		return rc;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);	/* the handler runs elsewhere */
	rc = pthread_create(&watch.thread, NULL, watch_run, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return -rc;
	watch.pid = getpid();
	return 0;
}

/*
 * Map the file in place under a read lease, watched.  The lease comes
 * first: the size and the bytes are those no one can change any more.
 * -EAGAIN (and -errno) when no lease is granted.
 */
static int map_leased(struct index_map *m)
{
	struct stat st;
	void *p;
	int rc;

	pthread_mutex_lock(&watch.lock);
	rc = handler_install();
	if (!rc && fcntl(m->fd, F_SETLEASE, F_RDLCK))
		rc = -errno;
	/* a thread only for a lease: the copy the fallback makes needs none */
	rc = rc ?: watch_start();
	if (!rc && fstat(m->fd, &st))
		rc = -errno;
	if (!rc) {
		m->len = (size_t)st.st_size;
		p = st.st_size ? mmap(NULL, m->len, PROT_READ, MAP_SHARED, m->fd, 0)
			       : MAP_FAILED;
		rc = p == MAP_FAILED ? -ENODATA : 0;
	}
	if (rc) {
		fcntl(m->fd, F_SETLEASE, F_UNLCK);
	} else {
		m->addr = p;
		m->kind = INDEX_MAP_FILE;
		m->leased = true;
		m->leased_st = st;
		m->next = watch.maps;
		watch.maps = m;
		sem_post(&watch.wake);	/* a break may have begun already */
	}
	pthread_mutex_unlock(&watch.lock);
	return rc;
}

int index_map_open(struct index_map **out, int fd, const char *path,
		   size_t min_len, char *msg, size_t msg_len)
{
	struct index_map *m = calloc(1, sizeof(*m));
	struct stat st;
	int rc;

	pthread_once(&watch.once, watch_once);
	if (!m || !(m->path = strdup(path))) {
		free(m);
		close(fd);
		return log_format(msg, msg_len, -ENOMEM, "offset 0: out of memory");
	}
	m->fd = fd;
	rc = map_leased(m);
	if (rc) {
		/* no lease: a private copy, checked as it is */
		rc = fstat(fd, &st) ? -errno : 0;
		m->len = rc ? 0 : (size_t)st.st_size;
		rc = rc ?: m->len ? serve_copy(m, fd) : -ENODATA;
		close(fd);
		m->fd = -1;
	}
	if (!rc && m->len >= min_len) {
		*out = m;
		return 0;
	}
	index_map_free(m);
	if (rc && rc != -ENODATA)
		return log_format(msg, msg_len, rc, "offset 0: cannot map the file: %s",
				  strerror(-rc));
	return log_format(msg, msg_len, -EINVAL, "offset 0: file too short for a header");
}

/*
 * Take this process's watcher off duty (caller holds the lock): true, with
 * the thread in *@t to end by watch_end() once the lock is let go.
 */
static bool watch_take(pthread_t *t)
{
	if (watch.pid != getpid())
		return false;
	*t = watch.thread;
	watch.pid = 0;
	return true;
}

/* End watcher @t: it can be cancelled only while it waits, holding nothing. */
static void watch_end(pthread_t t)
{
	pthread_cancel(t);
	pthread_join(t, NULL);
}

void index_map_free(struct index_map *m)
{
	pthread_t stop = 0;
	bool last = false;

	if (!m)
		return;
	pthread_mutex_lock(&watch.lock);
	for (struct index_map **pp = &watch.maps; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	if (!watch.maps)
		last = watch_take(&stop);
	pthread_mutex_unlock(&watch.lock);
	if (last)
		watch_end(stop);
	if (m->addr)
		munmap((void *)m->addr, m->len);
	if (m->fd >= 0)
		close(m->fd);	/* the last close lets the lease go */
	free(m->path);
	free(m);
}

/*
 * No thread crosses the fork: a thread of the parent stays in the child's
 * sanitizer and allocator state (LeakSanitizer then warns of a thread it
 * cannot suspend at every exit, and a thread caught starting left the
 * child's threads hung on the allocator's lock under ASan).  The process
 * that serves starts its own in index_map_adopt().
 */
void index_map_handoff(void)
{
	pthread_t stop;
	bool running;

	pthread_mutex_lock(&watch.lock);
	for (struct index_map *m = watch.maps; m; m = m->next)
		fcntl(m->fd, F_SETOWN, 0);
	running = watch_take(&stop);
	pthread_mutex_unlock(&watch.lock);
	if (running)
		watch_end(stop);
}

void index_map_adopt(void)
{
	int rc;

	pthread_once(&watch.once, watch_once);
	pthread_mutex_lock(&watch.lock);
	for (struct index_map *m = watch.maps; m; m = m->next)
		fcntl(m->fd, F_SETOWN, getpid());
	rc = watch.maps ? watch_start() : 0;
	if (rc)
		log_error("cannot watch the index file for writers: %s", strerror(-rc));
	sem_post(&watch.wake);
	pthread_mutex_unlock(&watch.lock);
}
