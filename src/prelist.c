/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prelist.c - the daemon lists its own mount ahead of a reader
 * (prelist.h).
 *
 * Measured on a fresh mount over /dev/fuse, one thread reading 4,500
 * files in shard order with the shards in the page cache: a LOOKUP and a
 * READ per file, about 50 us each on this 2-vCPU machine (each wakes a
 * halted vCPU), were the whole cost.  A READDIRPLUS answers tens of
 * entries at once, and once the kernel holds the inodes push-ahead
 * serves the reader with no request at all (docs/benchmarks.md).
 *
 * One request at a time, handed over under a mutex: the push worker is
 * the only caller and waits for each listing anyway.  The state is
 * reference-counted because the thread may outlive prelist_stop().
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/prelist.h"
#include "shardfs/util.h"

/* Bytes of directory records asked for per getdents64 call. */
#define PRELIST_DENTS_BUF (32 * 1024)

struct prelist {
	pthread_mutex_t lock;	/* guards everything below but buf */
	pthread_cond_t asked;	/* a request or the stop is posted */
	pthread_cond_t answered; /* a listing finished */
	atomic_int refs;	/* the caller's and the thread's */
	pid_t tid;		/* the thread's id (set before prelist_start()
				 * returns) */
	bool clones;		/* this process may clone a mount (open_tree) */
	bool stop;		/* prelist_stop() was called */
	bool stale;		/* a path led elsewhere: refuse all */
	uint64_t asked_seq;	/* number of the latest request */
	uint64_t done_seq;	/* number of the latest one finished */
	ssize_t result;		/* what the latest finished one returned */
	uint64_t dir_ino;	/* request: the directory's inode */
	uint64_t pos;		/* request: its first entry to list */
	uint64_t count;		/* request: the most entries to list */
	char dir[PATH_MAX];	/* request: the directory, relative to root
				 * ("" for root itself) */
	char root[PATH_MAX];	/* the mountpoint */
	char buf[PRELIST_DENTS_BUF]; /* the thread's getdents64 records */
};

static void put(struct prelist *pl)
{
	if (atomic_fetch_sub(&pl->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&pl->lock);
	pthread_cond_destroy(&pl->asked);
	pthread_cond_destroy(&pl->answered);
	free(pl);
}

/* Records in @n bytes of getdents64 output. */
static ssize_t count_records(const char *buf, ssize_t n)
{
	ssize_t count = 0;

	for (ssize_t at = 0; at < n; count++)
		at += ((const struct dirent64 *)(buf + at))->d_reclen;
	return count;
}

/*
 * Open the requested directory, preferably through a private clone of the
 * mount (the clone's file is *@tree, else -1).  An open directory keeps
 * a mount busy, so an unmount that met a listing through the mount itself
 * would fail with EBUSY; one through a clone is not seen (the session
 * ends once the listing closes it).  Cloning needs CAP_SYS_ADMIN: without
 * it the listing goes through the mount, and that short window stays.
 */
static int open_dir(const struct prelist *pl, int *tree)
{
	const char *rel = *pl->dir ? pl->dir : ".";
	int root, fd, err;

	*tree = open_tree(AT_FDCWD, pl->root, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (*tree >= 0)
		return openat(*tree, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	root = open(pl->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return -1;
	fd = openat(root, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	err = errno;
	close(root);
	errno = err;
	return fd;
}

/* Whether prelist_stop() was called: a long listing ends early. */
static bool stopped(struct prelist *pl)
{
	bool stop;

	pthread_mutex_lock(&pl->lock);
	stop = pl->stop;
	pthread_mutex_unlock(&pl->lock);
	return stop;
}

/* Read @count entries of the requested directory from entry @pos on. */
static ssize_t list_dir(struct prelist *pl, uint64_t dir_ino, uint64_t pos,
			uint64_t count)
{
	struct statfs sfs;
	struct stat st;
	ssize_t listed = 0;
	int tree, fd = open_dir(pl, &tree);

	if (fd < 0) {
		listed = errno == ENOENT || errno == ENOTDIR ? -ESTALE : -errno;
		goto out_close_tree;
	}
	if (fstat(fd, &st) || fstatfs(fd, &sfs) ||
	    sfs.f_type != FUSE_SUPER_MAGIC || (uint64_t)st.st_ino != dir_ino) {
		listed = -ESTALE;
		goto out_close_fd;
	}
	/* directory offsets: 0 ".", 1 "..", 2 + i the i-th entry */
	if (lseek(fd, (off_t)(pos + 2), SEEK_SET) < 0) {
		listed = -errno;
		goto out_close_fd;
	}
	while ((uint64_t)listed < count && !stopped(pl)) {
		ssize_t n = getdents64(fd, pl->buf, sizeof(pl->buf));

		if (n <= 0) {
			if (n < 0 && !listed)
				listed = -errno;
			break;
		}
		listed += count_records(pl->buf, n);
	}
out_close_fd:
	close(fd);
out_close_tree:
	if (tree >= 0)
		close(tree);
	return listed;
}

static void *thread_main(void *arg)
{
	struct prelist *pl = arg;

	pthread_setname_np(pthread_self(), "shardfs-list");
	pthread_mutex_lock(&pl->lock);
	pl->tid = gettid();
	pthread_cond_broadcast(&pl->answered);
	for (;;) {
		uint64_t seq;
		ssize_t n;

		while (!pl->stop && pl->done_seq == pl->asked_seq)
			pthread_cond_wait(&pl->asked, &pl->lock);
		if (pl->stop)
			break;
		seq = pl->asked_seq;
		pthread_mutex_unlock(&pl->lock);
		/* the request stays put until done_seq catches up */
		n = list_dir(pl, pl->dir_ino, pl->pos, pl->count);
		pthread_mutex_lock(&pl->lock);
		pl->result = n;
		pl->stale |= n == -ESTALE;
		pl->done_seq = seq;
		pthread_cond_broadcast(&pl->answered);
	}
	pthread_mutex_unlock(&pl->lock);
	put(pl);
	return NULL;
}

/* Whether open_dir() can list through a clone: cloning "/" takes the
 * same capability as cloning the mount, without a request to it. */
static bool may_clone(void)
{
	int tree = open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);

	if (tree < 0)
		return false;
	close(tree);
	return true;
}

int prelist_start(struct prelist **out, const char *mountpoint)
{
	struct prelist *pl = calloc(1, sizeof(*pl));
	pthread_condattr_t ca;
	sigset_t all, old;
	pthread_attr_t ta;
	pthread_t t;
	int rc;

	if (!pl)
		return -ENOMEM;
	if (strlen(mountpoint) >= sizeof(pl->root)) {
		free(pl);
		return -ENAMETOOLONG;
	}
	strcpy(pl->root, mountpoint);
	pl->clones = may_clone();
	pthread_mutex_init(&pl->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pl->asked, &ca);
	pthread_cond_init(&pl->answered, &ca);
	pthread_condattr_destroy(&ca);
	atomic_init(&pl->refs, 2);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);	/* signals go to the loop thread */
	rc = pthread_create(&t, &ta, thread_main, pl);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&ta);
	if (rc) {
		atomic_store(&pl->refs, 1);
		put(pl);
		return -rc;
	}
	pthread_mutex_lock(&pl->lock);
	while (!pl->tid)
		pthread_cond_wait(&pl->answered, &pl->lock);
	pthread_mutex_unlock(&pl->lock);
	*out = pl;
	return 0;
}

/* Post a request: a copy of @dir. */
static int post(struct prelist *pl, const char *dir, uint64_t dir_ino,
		uint64_t pos, uint64_t count)
{
	size_t len = strlen(dir);

	if (pl->stop || pl->stale)
		return pl->stale ? -ESTALE : -ESHUTDOWN;
	if (pl->asked_seq != pl->done_seq)	/* one under way */
		return -EBUSY;
	if (len >= sizeof(pl->dir))
		return -ENAMETOOLONG;
	memcpy(pl->dir, dir, len + 1);
	pl->dir_ino = dir_ino;
	pl->pos = pos;
	pl->count = count;
	pl->asked_seq++;
	pthread_cond_signal(&pl->asked);
	return 0;
}

ssize_t prelist_list(struct prelist *pl, const char *dir, uint64_t dir_ino,
		     uint64_t pos, uint64_t count)
{
	/* the condition variable waits on CLOCK_MONOTONIC (prelist_start()) */
	struct timespec until = deadline_after_ms(CLOCK_MONOTONIC, PRELIST_WAIT_MS);
	ssize_t rc;
	uint64_t seq;

	pthread_mutex_lock(&pl->lock);
	rc = post(pl, dir, dir_ino, pos, count);
	seq = pl->asked_seq;
	while (!rc && pl->done_seq != seq &&
	       !pthread_cond_timedwait(&pl->answered, &pl->lock, &until))
		;
	if (!rc)
		rc = pl->done_seq == seq ? pl->result : -ETIMEDOUT;
	pthread_mutex_unlock(&pl->lock);
	return rc;
}

pid_t prelist_thread_id(const struct prelist *pl)
{
	return pl->tid;
}

bool prelist_clones(const struct prelist *pl)
{
	return pl->clones;
}

void prelist_stop(struct prelist *pl)
{
	if (!pl)
		return;
	pthread_mutex_lock(&pl->lock);
	pl->stop = true;
	pthread_cond_signal(&pl->asked);
	pthread_mutex_unlock(&pl->lock);
	put(pl);
}
