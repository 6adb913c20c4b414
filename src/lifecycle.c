/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lifecycle.c - readiness notification, the idle timeout and the signals
 * that end the session.
 *
 * The kernel's readahead for a FUSE mount is capped at the backing device
 * info's 128 KiB default, which halves cold sequential reads of large
 * members (measured: 124-219 MB/s at 128 KiB, 275-441 MB/s at 1 MiB, on a
 * disk that reads 950 MB/s).  It can only be raised through sysfs once the
 * mount exists, so lifecycle_set_readahead() finds the mount's device in
 * /proc/self/mountinfo (stat() of the mountpoint would deadlock: nobody
 * serves requests yet) and writes read_ahead_kb.
 *
 * sd_notify is implemented directly (one datagram to $NOTIFY_SOCKET)
 * rather than linking libsystemd for one call.  The idle timer polls the
 * request counters once a second: cheaper than touching a timestamp on
 * every request, and a second of slack is nothing against a timeout.  It
 * unmounts without MNT_DETACH, so a mount with open files stays.
 *
 * SIGTERM, SIGINT and SIGHUP are handled here, not by libfuse's handlers,
 * which end the session loop at once.  libfuse's worker threads then drop
 * a request they receive unanswered, and a push-ahead store waiting for a
 * page that such a READ keeps locked waits for ever: SIGTERM while a
 * reader streamed hung the daemon in fuse_lowlevel_notify_store.  So a
 * thread of ours stops push-ahead first, while the loop still answers,
 * and only then ends the loop.
 */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lifecycle.h"
#include "shardfs/fs.h"
#include "shardfs/log.h"
#include "shardfs/util.h"

static void notify_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	int fd;

	if (len >= sizeof(sa.sun_path))
		return log_warn("NOTIFY_SOCKET path too long");
	memcpy(sa.sun_path, path, len);
	if (sa.sun_path[0] == '@')	/* abstract namespace */
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || sendto(fd, "READY=1", 7, 0, (struct sockaddr *)&sa,
			     offsetof(struct sockaddr_un, sun_path) + len) < 0)
		log_warn("NOTIFY_SOCKET %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

void lifecycle_notify_ready(int notify_fd)
{
	const char *sock = getenv("NOTIFY_SOCKET");

	if (notify_fd >= 0) {
		if (write(notify_fd, "READY=1\n", 8) != 8)
			log_warn("notify_fd %d: %s", notify_fd, strerror(errno));
		close(notify_fd);
	}
	if (sock && *sock)
		notify_socket(sock);
}

/* "MAJOR:MINOR" of the mount at @mp, from mountinfo.  0 or -ENOENT. */
static int mount_device(const char *mp, char *dev, size_t size)
{
	char line[PATH_MAX + 512], point[PATH_MAX], devno[32];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	int rc = -ENOENT;

	if (!f)
		return -errno;
	while (rc && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %31s %*s %4095s", devno, point) == 2 &&
		    !strcmp(point, mp) && (size_t)snprintf(dev, size, "%s", devno) < size)
			rc = 0;
	fclose(f);
	return rc;
}

void lifecycle_set_readahead(const char *mountpoint, unsigned kib)
{
	char *mp = realpath(mountpoint, NULL), dev[32], path[96];
	FILE *f;

	if (!mp || mount_device(mp, dev, sizeof(dev))) {
		log_debug("readahead: cannot find the mount's device");
		goto out_free;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	f = fopen(path, "we");
	if (!f || fprintf(f, "%u\n", kib) < 0 || fclose(f)) {
		log_debug("readahead: %s: %s (kernel default kept)", path, strerror(errno));
		goto out_free;
	}
	log_debug("readahead: %s = %u", path, kib);
out_free:
	free(mp);
}

struct idle_timer {
	struct fuse_session *se;	/* the session to end */
	struct shardfs *fs;		/* whose counters show activity */
	char *mountpoint;		/* what to unmount */
	unsigned seconds;		/* allowed idle time */
	pthread_t thread;		/* the timer */
	pthread_mutex_t lock;		/* guards stop */
	pthread_cond_t wake;		/* signalled by lifecycle_idle_stop */
	bool stop;			/* the session is ending anyway */
};

/*
 * A plain unmount, which fails with EBUSY while a file or a working
 * directory is open in the mount: idle means unused, not just quiet.
 * As root directly, otherwise through fusermount3.  0 when unmounted.
 */
static int unmount_if_unused(const char *mountpoint)
{
	int status;
	pid_t pid;

	if (!umount2(mountpoint, 0))
		return 0;
	if (errno != EPERM)
		return -errno;
	pid = fork();
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", "-q", "--", mountpoint,
		       (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EBUSY;
}

/* Sleep a second unless stopped; true when stopped. */
static bool idle_wait(struct idle_timer *t)
{
	struct timespec ts;
	bool stop;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec++;
	pthread_mutex_lock(&t->lock);
	if (!t->stop)
		pthread_cond_timedwait(&t->wake, &t->lock, &ts);
	stop = t->stop;
	pthread_mutex_unlock(&t->lock);
	return stop;
}

static void *idle_thread(void *arg)
{
	struct idle_timer *t = arg;
	unsigned long long seen = shardfs_requests(t->fs), now;
	unsigned idle = 0;

	while (!idle_wait(t)) {
		now = shardfs_requests(t->fs);
		idle = now == seen ? idle + 1 : 0;
		seen = now;
		if (idle < t->seconds)
			continue;
		if (!unmount_if_unused(t->mountpoint)) {
			log_info("no requests for %u s: unmounted %s", t->seconds,
				 t->mountpoint);
			fuse_session_exit(t->se);
			break;
		}
		idle = 0;	/* in use: try again after another idle period */
	}
	return NULL;
}

struct idle_timer *lifecycle_idle_start(struct fuse_session *se,
					struct shardfs *fs,
					const char *mountpoint, unsigned seconds)
{
	struct idle_timer *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	*t = (struct idle_timer){ .se = se, .fs = fs, .seconds = seconds };
	t->mountpoint = realpath(mountpoint, NULL);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->wake, NULL);
	if (t->mountpoint && !pthread_create(&t->thread, NULL, idle_thread, t))
		return t;
	log_error("cannot start the idle timer");
	free(t->mountpoint);
	free(t);
	return NULL;
}

void lifecycle_idle_stop(struct idle_timer *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_cond_signal(&t->wake);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->wake);
	free(t->mountpoint);
	free(t);
}

/*
 * The signal stopper.  file-state: signal dispositions are the process's,
 * so its state is too; the handler, which gets no argument, only posts
 * the semaphore, which is async-signal-safe.
 */
static struct {
	sem_t wake;		/* posted by a signal, or to make the thread quit */
	atomic_bool quit;	/* the loop has returned: the thread must too */
	bool running;		/* the thread exists */
	pthread_t thread;	/* the stopper */
	pthread_t loop;		/* the thread that runs the session loop */
	struct fuse_session *se; /* the session to end */
	void (*before_exit)(void *); /* run while the loop still answers */
	void *arg;		/* passed to before_exit */
} stopper;

/* Signals that end the session; SIGPIPE is ignored, as libfuse does. */
static const int stop_signals[] = { SIGHUP, SIGINT, SIGTERM };

/* Between two wake-ups of the session loop, in nanoseconds. */
#define STOPPER_NUDGE_NS (50 * 1000 * 1000L)

static void on_stop_signal(int sig)
{
	int saved = errno;	/* of whatever the signal interrupted */

	(void)sig;
	sem_post(&stopper.wake);
	errno = saved;
}

static int set_dispositions(void (*handler)(int), void (*pipe_handler)(int))
{
	struct sigaction sa = { .sa_handler = handler };

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ARRAY_SIZE(stop_signals); i++)
		if (sigaction(stop_signals[i], &sa, NULL))
			return -errno;
	sa.sa_handler = pipe_handler;
	return sigaction(SIGPIPE, &sa, NULL) ? -errno : 0;
}

int lifecycle_signals_install(void)
{
	int rc;

	if (sem_init(&stopper.wake, 0, 0))
		return -errno;
	rc = set_dispositions(on_stop_signal, SIG_IGN);
	if (rc)
		log_error("cannot install signal handlers: %s", strerror(-rc));
	return rc;
}

/*
 * Wait for a signal; then stop what must stop while requests are still
 * answered, end the session and wake the loop (its thread waits in
 * sem_wait(), or in read() under -s, which a signal interrupts) until it
 * has returned: one wake-up can come before the loop sleeps.
 */
static void *stopper_main(void *arg)
{
	struct timespec nudge = { .tv_nsec = STOPPER_NUDGE_NS };

	(void)arg;
	pthread_setname_np(pthread_self(), "shardfs-stop");
	while (sem_wait(&stopper.wake) && errno == EINTR)
		;
	if (atomic_load(&stopper.quit))
		return NULL;
	log_info("signal received: ending the session");
	stopper.before_exit(stopper.arg);
	fuse_session_exit(stopper.se);
	while (!atomic_load(&stopper.quit)) {
		pthread_kill(stopper.loop, SIGTERM);
		nanosleep(&nudge, NULL);
	}
	return NULL;
}

int lifecycle_signals_start(struct fuse_session *se,
			    void (*before_exit)(void *), void *arg)
{
	sigset_t all, old;
	int rc;

	stopper.se = se;
	stopper.before_exit = before_exit;
	stopper.arg = arg;
	stopper.loop = pthread_self();
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);	/* the handler runs elsewhere */
	rc = pthread_create(&stopper.thread, NULL, stopper_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		log_error("cannot start the signal thread: %s", strerror(rc));
		return -rc;
	}
	stopper.running = true;
	return 0;
}

void lifecycle_signals_stop(void)
{
	atomic_store(&stopper.quit, true);
	if (!stopper.running)
		return;
	sem_post(&stopper.wake);
	pthread_join(stopper.thread, NULL);
	stopper.running = false;
}

void lifecycle_signals_remove(void)
{
	lifecycle_signals_stop();
	set_dispositions(SIG_DFL, SIG_DFL);
	sem_destroy(&stopper.wake);
}
