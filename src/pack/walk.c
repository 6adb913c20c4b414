/* SPDX-License-Identifier: Apache-2.0 */
/*
 * walk.c - read SRC_DIR into a flat list of entries, with several threads.
 *
 * Directories are work items on a shared stack.  A worker pops one, reads
 * it with readdir() and fstatat() relative to the open directory, keeps
 * what it finds in a list of its own and pushes subdirectories back onto
 * the stack.  On a cold cache or a network filesystem a walk waits on
 * stat calls, and several in flight hide that latency; on a warm cache
 * the extra threads cost next to nothing.  The order in which entries are
 * found does not matter: the planner sorts them.
 *
 * Each directory remembers its parent, so that a symbolic link (with
 * --follow-symlinks) or a bind mount leading back to an ancestor is
 * noticed and not followed forever.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"
#include "shardfs/path.h"
#include "shardfs/util.h"

/* A directory to read; all of them live until the walk ends. */
struct walk_dir {
	const char *path;		/* entry's path ("x/y/"), "" for root */
	size_t path_len;		/* bytes in path */
	dev_t dev;			/* device and inode: the identity of */
	ino_t ino;			/* the directory, to recognise loops */
	const struct walk_dir *parent;	/* enclosing directory, NULL at root */
	struct walk_dir *next_todo;	/* next on the stack of work */
	struct walk_dir *next_all;	/* next in the list of all of them */
};

/* State shared by the workers. */
struct walk {
	const char *root;		/* SRC_DIR, without a trailing '/' */
	const struct pack_walk_options *opt; /* how to treat what is found */
	pthread_mutex_t lock;		/* guards the fields below */
	pthread_cond_t wake;		/* work arrived, or the walk is over */
	struct walk_dir *todo;		/* directories waiting to be read */
	struct walk_dir *all;		/* every directory, for release */
	unsigned busy;			/* workers reading a directory now */
	int error;			/* first failure; stops the walk */
};

/* One worker thread and what it found. */
struct walk_worker {
	struct walk *walk;		/* shared state */
	pthread_t thread;		/* runs walk_worker_main() */
	struct pack_tree found;		/* entries this worker found */
	size_t cap;			/* entries allocated in found */
	char path[PACK_PATH_MAX];	/* SRC_DIR/path of the current entry */
};

/* Put SRC_DIR/DIR/NAME into w->path. */
static int walk_full_path(struct walk_worker *w, const struct walk_dir *d,
			  const char *name)
{
	int n = snprintf(w->path, sizeof(w->path), "%s/%s%s", w->walk->root,
			 d->path, name);

	if (n < 0 || (size_t)n >= sizeof(w->path)) {
		pack_error("%s/%s%s: path longer than %u bytes", w->walk->root,
			   d->path, name, PACK_PATH_MAX - 1);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* Queue directory @path for reading. */
static int walk_push(struct walk *walk, const struct walk_dir *parent,
		     const char *path, size_t len, const struct stat *st)
{
	struct walk_dir *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->path = path;
	d->path_len = len;
	d->dev = st->st_dev;
	d->ino = st->st_ino;
	d->parent = parent;
	pthread_mutex_lock(&walk->lock);
	d->next_all = walk->all;
	walk->all = d;
	d->next_todo = walk->todo;
	walk->todo = d;
	pthread_cond_signal(&walk->wake);
	pthread_mutex_unlock(&walk->lock);
	return 0;
}

/* Take a directory to read; NULL when the walk is over or failed. */
static struct walk_dir *walk_pop(struct walk *walk)
{
	struct walk_dir *d;

	pthread_mutex_lock(&walk->lock);
	while (!walk->todo && walk->busy && !walk->error)
		pthread_cond_wait(&walk->wake, &walk->lock);
	d = walk->error ? NULL : walk->todo;
	if (d) {
		walk->todo = d->next_todo;
		walk->busy++;
	}
	pthread_mutex_unlock(&walk->lock);
	return d;
}

/* A worker finished a directory, with result @rc. */
static void walk_done(struct walk *walk, int rc)
{
	pthread_mutex_lock(&walk->lock);
	walk->busy--;
	if (rc && !walk->error)
		walk->error = rc;
	if (!walk->busy || walk->error)
		pthread_cond_broadcast(&walk->wake);
	pthread_mutex_unlock(&walk->lock);
}

/*
 * stat @name in the directory open on @dfd, following a symbolic link if
 * the options ask to; a link that cannot be followed is kept as a link.
 */
static int walk_stat(struct walk_worker *w, int dfd, const char *name,
		     struct stat *st)
{
	int follow_error = 0;

	if (w->walk->opt->follow_symlinks) {
		if (!fstatat(dfd, name, st, 0))
			return 0;
		follow_error = errno;
	}
	if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW))
		return pack_errno(w->path, "cannot stat");
	if (follow_error)
		pack_warn("%s: cannot follow symlink (%s), stored as a link",
			  w->path, strerror(follow_error));
	return 0;
}

/* Append an entry for @name in @d, of tar type @type, to w->found. */
static struct pack_entry *walk_new_entry(struct walk_worker *w,
					 const struct walk_dir *d,
					 const char *name,
					 const struct stat *st, char type)
{
	const struct pack_walk_options *opt = w->walk->opt;
	size_t name_len = strlen(name), len = d->path_len + name_len;
	struct pack_entry *e;
	char *path;

	if (array_grow((void **)&w->found.entries, &w->cap, w->found.count + 1,
		       sizeof(*w->found.entries)))
		return NULL;
	path = malloc(len + 2);
	if (!path)
		return NULL;
	memcpy(path, d->path, d->path_len);
	memcpy(path + d->path_len, name, name_len);
	if (type == '5')
		path[len++] = '/';
	path[len] = '\0';
	e = &w->found.entries[w->found.count++];
	*e = (struct pack_entry){
		.path = path,
		.path_len = len,
		.key_len = type == '5' ? len : path_sample_key_len(path, len),
		.size = type == '0' ? (uint64_t)st->st_size : 0,
		.mtime_sec = st->st_mtim.tv_sec,
		.mtime_nsec = opt->whole_seconds ? 0 : st->st_mtim.tv_nsec,
		.mode = st->st_mode & 07777,
		.uid = opt->keep_owner ? st->st_uid : 0,
		.gid = opt->keep_owner ? st->st_gid : 0,
		.uname = "",
		.gname = "",
		.type = type,
	};
	return e;
}

/* Record the symbolic link @name in @d. */
static int walk_add_link(struct walk_worker *w, const struct walk_dir *d,
			 int dfd, const char *name, const struct stat *st)
{
	char target[PACK_PATH_MAX];
	struct pack_entry *e;
	ssize_t n;

	n = readlinkat(dfd, name, target, sizeof(target));
	if (n < 0)
		return pack_errno(w->path, "cannot read symlink");
	if ((size_t)n == sizeof(target)) {
		pack_error("%s: symlink target longer than %u bytes", w->path,
			   PACK_PATH_MAX - 1);
		return -ENAMETOOLONG;
	}
	e = walk_new_entry(w, d, name, st, '2');
	if (!e)
		return -ENOMEM;
	e->link = strndup(target, (size_t)n);
	return e->link ? 0 : -ENOMEM;
}

/* Record the directory @name in @d and queue it for reading. */
static int walk_add_dir(struct walk_worker *w, const struct walk_dir *d,
			const char *name, const struct stat *st)
{
	const struct pack_entry *e;

	for (const struct walk_dir *a = d; a; a = a->parent) {
		if (a->dev == st->st_dev && a->ino == st->st_ino) {
			pack_warn("%s: leads back to %s/%s, not followed",
				  w->path, w->walk->root, a->path);
			w->found.skipped++;
			return 0;
		}
	}
	e = walk_new_entry(w, d, name, st, '5');
	if (!e)
		return -ENOMEM;
	return walk_push(w->walk, d, e->path, e->path_len, st);
}

/* Record whatever @name in @d is. */
static int walk_add(struct walk_worker *w, const struct walk_dir *d, int dfd,
		    const char *name)
{
	struct stat st;
	int rc;

	rc = walk_full_path(w, d, name);
	if (!rc)
		rc = walk_stat(w, dfd, name, &st);
	if (rc)
		return rc;
	switch (st.st_mode & S_IFMT) {
	case S_IFREG:
		return walk_new_entry(w, d, name, &st, '0') ? 0 : -ENOMEM;
	case S_IFLNK:
		return walk_add_link(w, d, dfd, name, &st);
	case S_IFDIR:
		return walk_add_dir(w, d, name, &st);
	default:
		pack_warn("%s: special file, skipped", w->path);
		w->found.skipped++;
		return 0;
	}
}

/* Read directory @d and record everything in it. */
static int walk_read_dir(struct walk_worker *w, const struct walk_dir *d)
{
	struct dirent *de;
	DIR *dir;
	int rc;

	rc = walk_full_path(w, d, "");
	if (rc)
		return rc;
	dir = opendir(w->path);
	if (!dir)
		return pack_errno(w->path, "cannot open directory");
	for (;;) {
		errno = 0;
		de = readdir(dir);
		if (!de) {
			rc = errno ? -errno : 0;
			if (rc && !walk_full_path(w, d, ""))
				pack_error("%s: cannot read directory: %s",
					   w->path, strerror(-rc));
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		rc = walk_add(w, d, dirfd(dir), de->d_name);
		if (rc)
			break;
	}
	closedir(dir);
	return rc;
}

static void *walk_worker_main(void *arg)
{
	struct walk_worker *w = arg;
	struct walk_dir *d;

	while ((d = walk_pop(w->walk)))
		walk_done(w->walk, walk_read_dir(w, d));
	return NULL;
}

/* Move what the workers found into @tree. */
static int walk_merge(struct walk_worker *workers, unsigned count,
		      struct pack_tree *tree)
{
	size_t total = 0;

	for (unsigned i = 0; i < count; i++)
		total += workers[i].found.count;
	tree->entries = malloc((total ? total : 1) * sizeof(*tree->entries));
	if (!tree->entries)
		return -ENOMEM;
	for (unsigned i = 0; i < count; i++) {
		struct pack_tree *found = &workers[i].found;

		if (found->count)
			memcpy(tree->entries + tree->count, found->entries,
			       found->count * sizeof(*found->entries));
		tree->count += found->count;
		tree->skipped += found->skipped;
		found->count = 0;
	}
	return 0;
}

/* Run @jobs workers until every queued directory has been read. */
static int walk_run(struct walk *walk, struct walk_worker *workers,
		    unsigned jobs)
{
	unsigned started = 0;

	for (unsigned i = 0; i < jobs; i++) {
		workers[i].walk = walk;
		if (pthread_create(&workers[i].thread, NULL, walk_worker_main,
				   &workers[i]))
			break;
		started++;
	}
	if (!started)
		walk_worker_main(&workers[started]);
	for (unsigned i = 0; i < started; i++)
		pthread_join(workers[i].thread, NULL);
	return walk->error;
}

/* Queue SRC_DIR itself, which must be a directory. */
static int walk_root(struct walk *walk, struct walk_worker *w)
{
	static const struct walk_dir top = { .path = "" };
	struct stat st;
	int rc;

	w->walk = walk;
	rc = walk_full_path(w, &top, "");
	if (rc)
		return rc;
	if (stat(w->path, &st))
		return pack_errno(w->path, "cannot read source directory");
	return walk_push(walk, NULL, "", 0, &st);
}

/* Free what the walk used, except the entries moved to the tree. */
static void walk_release(struct walk *walk, struct walk_worker *workers,
			 unsigned jobs)
{
	for (unsigned i = 0; i < jobs; i++)
		pack_tree_release(&workers[i].found);
	free(workers);
	while (walk->all) {
		struct walk_dir *next = walk->all->next_all;

		free(walk->all);
		walk->all = next;
	}
}

int pack_walk(const char *root, const struct pack_walk_options *opt,
	      struct pack_tree *tree)
{
	struct walk walk = {
		.root = root,
		.opt = opt,
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.wake = PTHREAD_COND_INITIALIZER,
	};
	struct walk_worker *workers;
	int rc;

	memset(tree, 0, sizeof(*tree));
	workers = calloc(opt->jobs, sizeof(*workers));
	if (!workers)
		return -ENOMEM;
	rc = walk_root(&walk, &workers[0]);
	if (!rc)
		rc = walk_run(&walk, workers, opt->jobs);
	if (!rc)
		rc = walk_merge(workers, opt->jobs, tree);
	walk_release(&walk, workers, opt->jobs);
	return rc;
}

void pack_tree_release(struct pack_tree *tree)
{
	for (size_t i = 0; i < tree->count; i++) {
		free(tree->entries[i].path);
		free(tree->entries[i].link);
	}
	for (size_t i = 0; i < tree->owner_name_count; i++)
		free(tree->owner_names[i]);
	free(tree->owner_names);
	free(tree->entries);
	memset(tree, 0, sizeof(*tree));
}
