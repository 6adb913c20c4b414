/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll.c - the FUSE low-level glue.
 *
 * Each handler turns one request into one call of the core (fs.c) and
 * exactly one reply.  Nothing a shard set exposes ever changes while it is
 * mounted, so every reply tells the kernel to cache for as long as it can:
 * entries, attributes and negative lookups for a year, file pages and
 * directory listings across opens.  After the first walk of a tree, the
 * kernel answers stat() and readdir() itself (stat() in a huge directory
 * once the daemon listed it for the inodes: below).
 *
 * OPEN is answered ENOSYS, which (FUSE_CAP_NO_OPEN_SUPPORT, Linux 4.19)
 * tells the kernel never to send it, nor RELEASE, again and to keep the
 * page cache across opens.  Measured on 150,000 cached files read by 4
 * threads: 15,440 files/s with an OPEN and a RELEASE per file (7 s of
 * daemon CPU), 50,570 with neither (0.01 s); the round trips were the
 * whole cost.  The exceptions are the changing files of /.shardfs/, whose
 * entries and attributes are not cached at all (control.h).
 *
 * Push-ahead (pushahead.h) stores only into inodes the kernel holds, so
 * every reference the kernel takes (a LOOKUP reply, each READDIRPLUS
 * entry) is reported before the reply goes out, and every FORGET too; a
 * store of no bytes (push_store) asks the kernel where push-ahead has
 * seen no reference.  A READDIRPLUS of a huge directory goes bare, no
 * inode made per entry, and push-ahead has the daemon's own listing
 * thread make them in bulk once LOOKUPs come in it: a cold os.scandir of
 * a million entries 2.5-4.8 -> 0.8-1.3 s (ext4: 0.8-1.1 s), the stats
 * after it as fast (docs/benchmarks-scale.md, "Huge directories listed
 * bare").
 *
 * Read buffers are per thread, allocated on a thread's first read and
 * freed when it ends (a ring thread reads into its reply buffer, see
 * ll_uring.h), so the read path neither allocates nor takes a lock.
 *
 * Over /dev/fuse, a READ of a local shard's member is spliced: the
 * shard's pages go into the thread's pipe (shardfs_splice()) and from
 * there, through libfuse's pipe, into the reply, which copies them once;
 * pread(2) into the buffer and writev(2) of it copied them twice, and
 * pinned the buffer's pages for the second copy.  Measured on one node's
 * share of a shuffled epoch (5,000 files of ~100 KB, cold, 4 threads):
 * the daemon's CPU per file 139 -> 125 and 115 -> 106 us (medians of
 * 10-12 alternated mounts), 63 -> 49 us with the shards cached; the
 * pread copy (10 % of its samples) and the pinning (6 %) are gone
 * (docs/benchmarks.md, tuning record, "read path").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ll.h"
#include "ll_uring.h"
#include "shardfs/fs.h"
#include "shardfs/log.h"
#include "shardfs/prelist.h"
#include "shardfs/util.h"

/* Seconds the kernel may cache entries and attributes: nothing changes. */
#define CACHE_TIMEOUT (365.0 * 24 * 3600)
/* Largest read the kernel sends (libfuse negotiates 256 pages). */
#define READ_BUF_SIZE (1024 * 1024)
/* Room for any attribute value (a shard path or key) or the name list. */
#define XATTR_BUF_SIZE (PATH_MAX + 1)

static struct shardfs *fs_of(fuse_req_t req)
{
	const struct ll_session *ls = fuse_req_userdata(req);

	return ls->fs;
}

/* The push-ahead worker's store: the bytes, from its buffer or spliced
 * from its pipe, go into the inode's page cache. */
static int push_store(void *arg, uint64_t ino, uint64_t off, const void *buf,
		      int pipe_fd, size_t len)
{
	struct ll_session *ls = arg;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);

	if (pipe_fd >= 0) {
		bv.buf[0].flags = FUSE_BUF_IS_FD;
		bv.buf[0].fd = pipe_fd;
	} else {
		bv.buf[0].mem = (void *)buf;
	}
	return fuse_lowlevel_notify_store(ls->se, ino, (off_t)off, &bv, 0);
}

/*
 * The push-ahead worker's listing: @count entries of entry @e's
 * directory, from @e on, through the mount, so that the kernel makes an
 * inode for each.  A directory that one listing covers is listed whole:
 * names need not follow shard order (a class directory of shuffled
 * samples).
 */
static ssize_t push_list(void *arg, uint32_t e, uint32_t count)
{
	struct ll_session *ls = arg;
	const struct shard_index *idx = &ls->fs->idx;
	uint32_t parent = (uint32_t)compact_field(&idx->entries, e, COMPACT_PARENT);
	char path[PATH_MAX];
	struct shard_inode dir;

	shard_index_entry(idx, parent, &dir);
	if (shard_index_entry_path(idx, parent, path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	return prelist_list(ls->prelist, path, shard_index_ino(idx, parent),
			    dir.size <= count ? 0 : e - dir.data, count);
}

/* Listings are an aid: without them push-ahead serves listed trees only. */
static void push_start(struct ll_session *ls)
{
	int rc;

	if (ls->fs->push.bound) {
		rc = ls->mountpoint ? prelist_start(&ls->prelist, ls->mountpoint)
				    : -ENOENT;
		if (rc) {
			log_warn("push-ahead: no listing thread (%s): a reader "
				 "that does not list the tree first is not pushed "
				 "ahead of", strerror(-rc));
		} else {
			ls->lister_tid = prelist_thread_id(ls->prelist);
			ls->lists_long = prelist_clones(ls->prelist);
		}
	}
	pushahead_start(&ls->fs->push, push_store, ls->prelist ? push_list : NULL,
			ls);
}

void ll_push_stop(struct ll_session *ls)
{
	pushahead_stop(&ls->fs->push);
	prelist_stop(ls->prelist);
	ls->prelist = NULL;
}

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ll_session *ls = userdata;
	unsigned want = FUSE_CAP_EXPORT_SUPPORT | FUSE_CAP_READDIRPLUS |
			FUSE_CAP_CACHE_SYMLINKS | FUSE_CAP_ASYNC_READ |
			FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_SPLICE_WRITE;

	ls->no_open = conn->capable & FUSE_CAP_NO_OPEN_SUPPORT;
	conn->want |= want & conn->capable;
	/* Plain readdir for huge directories would force one LOOKUP per
	 * entry on the first stat; READDIRPLUS returns attributes in bulk. */
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	conn->max_readahead = READ_BUF_SIZE;
	push_start(ls);
	log_debug("FUSE protocol %u.%u, capable 0x%x, want 0x%x, max_readahead %u",
		  conn->proto_major, conn->proto_minor, conn->capable,
		  conn->want, conn->max_readahead);
}

/* Nothing is stored into the page cache once the session goes away. */
static void ll_destroy(void *userdata)
{
	ll_push_stop(userdata);
}

static void reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, -rc);
}

/* Seconds the kernel may cache the entry and attributes of @ino. */
static double cache_timeout(const struct shardfs *fs, uint64_t ino)
{
	return shardfs_changes(fs, ino) ? 0 : CACHE_TIMEOUT;
}

static int fill_entry(struct shardfs *fs, uint64_t ino,
		      struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->attr_timeout = cache_timeout(fs, ino);
	e->entry_timeout = e->attr_timeout;
	return shardfs_getattr(fs, ino, &e->attr);
}

/* A /dev/fuse worker thread's means of reading: made on its first read,
 * freed when the thread ends. */
struct read_thread {
	int pipe[2];		/* read and write end of the splice pipe
				 * (splice_pipe_open()); -1: none yet */
	bool no_pipe;		/* a pipe could not be made: copy every READ */
	char buf[READ_BUF_SIZE]; /* the bytes of a READ that is copied */
};

static void read_thread_free(void *arg)
{
	struct read_thread *rt = arg;

	splice_pipe_close(rt->pipe);
	free(rt);
}

/*
 * The calling worker thread's struct read_thread, or NULL without memory.
 * file-state: libfuse starts and ends its worker threads without a hook
 * of ours; a thread-specific key, made once, is the process's.
 */
static pthread_key_t read_thread_key;
static pthread_once_t read_thread_once = PTHREAD_ONCE_INIT;

static void read_thread_key_create(void)
{
	if (pthread_key_create(&read_thread_key, read_thread_free))
		abort();	/* out of keys at start-up: nothing can work */
}

static struct read_thread *read_thread(void)
{
	struct read_thread *rt;

	pthread_once(&read_thread_once, read_thread_key_create);
	rt = pthread_getspecific(read_thread_key);
	if (rt || !(rt = malloc(sizeof(*rt))))
		return rt;
	rt->pipe[0] = rt->pipe[1] = -1;
	rt->no_pipe = false;
	if (pthread_setspecific(read_thread_key, rt)) {
		free(rt);
		return NULL;
	}
	return rt;
}

/* @rt's splice pipe, made if need be; false: copy instead. */
static bool pipe_ready(struct read_thread *rt)
{
	if (rt->pipe[0] < 0 && !rt->no_pipe)
		rt->no_pipe = splice_pipe_open(rt->pipe, SHARDFS_SPLICE_MAX +
					       SHARDFS_SPLICE_MIN) != 0;
	return !rt->no_pipe;
}

/*
 * The calling worker thread's read buffer (its size in *size): a ring
 * thread's reply buffer, or its struct read_thread's.
 */
static char *read_buf(size_t *size)
{
	char *buf = ll_uring_reply_buf(size);
	struct read_thread *rt;

	if (buf)
		return buf;
	*size = READ_BUF_SIZE;
	rt = read_thread();
	return rt ? rt->buf : NULL;
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct shardfs *fs = fs_of(req);
	uint64_t t0 = monotonic_ns(), ino;
	struct fuse_entry_param e;
	int rc = shardfs_lookup(fs, parent, name, &ino);

	if (rc == -ENOENT) {
		/* ino 0 with a timeout: the kernel caches the miss */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = CACHE_TIMEOUT;
		rc = 0;
	} else {
		rc = rc ?: fill_entry(fs, ino, &e);
	}
	shardfs_op_done(fs, SHARDFS_OP_LOOKUP, t0);
	if (rc) {
		reply_err(req, rc);
		return;
	}
	/* counted before the reply, so that its FORGET cannot come first */
	pushahead_lookup(&fs->push, e.ino, 1);
	if (fuse_reply_entry(req, &e))
		pushahead_forget(&fs->push, e.ino, 1);
	else if (e.ino)
		pushahead_lookup_in(&fs->push, parent, e.ino);
}

/* The kernel dropped references: push-ahead must not store there. */
static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	pushahead_forget(&fs_of(req)->push, ino, nlookup);
	fuse_reply_none(req);
}

static void ll_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	struct shardfs *fs = fs_of(req);

	for (size_t i = 0; i < count; i++)
		pushahead_forget(&fs->push, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct shardfs *fs = fs_of(req);
	uint64_t t0 = monotonic_ns();
	struct stat st;
	int rc = shardfs_getattr(fs, ino, &st);

	shardfs_op_done(fs, SHARDFS_OP_GETATTR, t0);
	if (rc)
		reply_err(req, rc);
	else
		fuse_reply_attr(req, &st, cache_timeout(fs, ino));
}

static void ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct shardfs *fs = fs_of(req);
	uint64_t t0 = monotonic_ns();
	const char *target;
	int rc = shardfs_readlink(fs, ino, &target);

	shardfs_op_done(fs, SHARDFS_OP_READLINK, t0);
	if (rc)
		reply_err(req, rc);
	else
		fuse_reply_readlink(req, target);
}

/* Whether @req comes from the daemon's own listing thread (prelist.h). */
static bool from_lister(fuse_req_t req)
{
	const struct ll_session *ls = fuse_req_userdata(req);

	return ls->lister_tid && fuse_req_ctx(req)->pid == ls->lister_tid;
}

/*
 * OPENDIR is still asked for (not NO_OPENDIR): a listing of a mount whose
 * daemon died must fail with ENOTCONN rather than come from the cache,
 * and a listing costs one round trip per directory, not per file.  The
 * daemon's own listing bypasses the cache: it is there to make inodes.
 */
static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int rc = shardfs_getattr(fs_of(req), ino, &st);

	if (!rc && !S_ISDIR(st.st_mode))
		rc = -ENOTDIR;
	if (rc) {
		reply_err(req, rc);
		return;
	}
	fi->keep_cache = 1;
	fi->cache_readdir = !from_lister(req);
	fuse_reply_open(req, fi);
}

/* What a listing's reply carries for each entry. */
enum listing {
	LISTING_NAMES,		/* READDIR: names and types */
	LISTING_BARE,		/* READDIRPLUS, no attributes: no inode made */
	LISTING_INODES,		/* READDIRPLUS: an inode made for each */
};

/*
 * Add the entry at directory offset @off: 0 is ".", 1 is "..", 2 + i the
 * i-th child.  Returns the bytes it needs (0 past the end, -errno).
 */
static ssize_t add_dirent(fuse_req_t req, struct shardfs *fs, fuse_ino_t dir,
			  off_t off, char *buf, size_t size, enum listing how,
			  struct shardfs_dirent *de)
{
	struct fuse_entry_param e;
	int rc = 0;

	de->name = off == 0 ? "." : "..";
	de->ino = off == 0 ? dir : shardfs_parent(fs, dir);
	if (off >= 2)
		rc = shardfs_readdir_entry(fs, dir, off - 2, de);
	if (rc == -ENOENT)
		return 0;
	rc = rc ?: fill_entry(fs, de->ino, &e);
	if (rc)
		return rc;
	if (how == LISTING_NAMES)
		return fuse_add_direntry(req, buf, size, de->name, &e.attr, off + 1);
	/* node 0: the kernel makes no inode (and must not for . or ..) */
	if (off < 2 || how == LISTING_BARE)
		e.ino = 0;
	return fuse_add_direntry_plus(req, buf, size, de->name, &e, off + 1);
}

/*
 * The kernel takes a reference on each inode of a READDIRPLUS reply but
 * "." and "..": count (@n 1) or take back (@n -1) those of [@from, @to).
 */
static void count_plus_refs(struct shardfs *fs, fuse_ino_t dir, off_t from,
			    off_t to, int n)
{
	struct shardfs_dirent de = { 0 };

	for (off_t off = from < 2 ? 2 : from; off < to; off++) {
		if (shardfs_readdir_entry(fs, dir, off - 2, &de))
			continue;
		if (n > 0)
			pushahead_lookup(&fs->push, de.ino, 1);
		else
			pushahead_forget(&fs->push, de.ino, 1);
	}
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       enum listing how)
{
	struct shardfs *fs = fs_of(req);
	uint64_t t0 = monotonic_ns();
	size_t room, used = 0;
	char *buf = read_buf(&room);
	struct shardfs_dirent de = { 0 };
	ssize_t n = -ENOMEM;
	off_t first = off;

	if (size > room)
		size = room;
	for (; buf; off++) {
		n = add_dirent(req, fs, ino, off, buf + used, size - used, how, &de);
		if (n <= 0 || (size_t)n > size - used)
			break;
		used += n;
	}
	shardfs_op_done(fs, SHARDFS_OP_READDIR, t0);
	if (n < 0 && used == 0) {
		reply_err(req, (int)n);
		return;
	}
	if (how == LISTING_INODES)	/* before the reply, as in ll_lookup */
		count_plus_refs(fs, ino, first, off, 1);
	if (fuse_reply_buf(req, buf, used) && how == LISTING_INODES)
		count_plus_refs(fs, ino, first, off, -1);
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, LISTING_NAMES);
}

/*
 * A huge directory goes bare (pushahead_list_bare()) when the daemon can
 * list it whole itself, later, for the inodes: through a clone of the
 * mount, and not to its own listing, whose purpose they are.
 */
static void ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	const struct ll_session *ls = fuse_req_userdata(req);
	bool bare = ls->lists_long && !from_lister(req) &&
		    pushahead_list_bare(&ls->fs->push, ino);

	do_readdir(req, ino, size, off, bare ? LISTING_BARE : LISTING_INODES);
}

/* Kernels before 4.19 need an answer: the flags they would assume. */
static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct ll_session *ls = fuse_req_userdata(req);
	uint64_t t0 = monotonic_ns();

	shardfs_op_done(ls->fs, SHARDFS_OP_OPEN, t0);
	if (ls->no_open) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	fi->keep_cache = !shardfs_changes(ls->fs, ino);
	fi->noflush = 1;
	fuse_reply_open(req, fi);
}

/*
 * Answer READ by splice (shardfs_splice()) where it can be; false: no
 * reply went out, copy it.  A pipe an error may have left bytes in is
 * closed, for the next READ to make a new one.
 */
static bool read_spliced(fuse_req_t req, struct shardfs *fs, fuse_ino_t ino,
			 size_t size, off_t off, uint64_t t0)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct read_thread *rt;
	size_t room;
	ssize_t n;

	if (size > SHARDFS_SPLICE_MAX || ll_uring_reply_buf(&room) ||
	    !(rt = read_thread()) || !pipe_ready(rt))
		return false;
	n = shardfs_splice(fs, ino, rt->pipe[1], size, (uint64_t)off,
			   SHARDFS_SPLICE_MIN);
	if (n == -EAGAIN)
		return false;
	shardfs_op_done(fs, SHARDFS_OP_READ, t0);
	if (n < 0) {
		splice_pipe_close(rt->pipe);
		reply_err(req, (int)n);
		return true;
	}
	bv.buf[0].size = (size_t)n;
	bv.buf[0].flags = FUSE_BUF_IS_FD;
	bv.buf[0].fd = rt->pipe[0];
	if (fuse_reply_data(req, &bv, 0))
		splice_pipe_close(rt->pipe);
	shardfs_splice_done(fs, ino, (size_t)n, (uint64_t)off);
	return true;
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct shardfs *fs = fs_of(req);
	uint64_t t0 = monotonic_ns();
	size_t room;
	char *buf;
	ssize_t n = -ENOMEM;

	if (read_spliced(req, fs, ino, size, off, t0))
		return;
	buf = read_buf(&room);
	if (buf && size > room) {	/* libfuse negotiates at most 256 pages */
		log_error("read of %zu bytes exceeds the %zu byte buffer", size,
			  room);
		n = -EIO;
	} else if (buf) {
		n = shardfs_read(fs, ino, buf, size, off);
	}
	shardfs_op_done(fs, SHARDFS_OP_READ, t0);
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_buf(req, buf, n);
}

/*
 * Answer getxattr (@name set) or listxattr: with @size 0 the length the
 * caller needs, otherwise the bytes.
 */
static void do_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		     size_t size)
{
	struct shardfs *fs = fs_of(req);
	uint64_t t0 = monotonic_ns();
	char buf[XATTR_BUF_SIZE];
	size_t room = size < sizeof(buf) ? size : sizeof(buf);
	ssize_t n = name ? shardfs_getxattr(fs, ino, name, buf, room)
			 : shardfs_listxattr(fs, ino, buf, room);

	shardfs_op_done(fs, SHARDFS_OP_XATTR, t0);
	if (n < 0)
		reply_err(req, (int)n);
	else if (size == 0)
		fuse_reply_xattr(req, n);
	else
		fuse_reply_buf(req, buf, n);
}

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	do_xattr(req, ino, name, size);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	do_xattr(req, ino, NULL, size);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct shardfs *fs = fs_of(req);
	uint64_t t0 = monotonic_ns();
	struct statvfs sv;

	shardfs_statfs(fs, &sv);
	shardfs_op_done(fs, SHARDFS_OP_STATFS, t0);
	fuse_reply_statfs(req, &sv);
}

/*
 * No ioctl is served, but each is counted: the kernel sends every ioctl
 * on a file it does not handle itself, each time, and Python's open()
 * asks isatty() (TCGETS) of every file it opens, so a Python reader
 * costs a round trip a file before its first READ (docs/pytorch.md).
 * ENOTTY is what the kernel makes of ENOSYS here, and does not remember.
 */
static void ll_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	uint64_t t0 = monotonic_ns();

	shardfs_op_done(fs_of(req), SHARDFS_OP_IOCTL, t0);
	reply_err(req, -ENOTTY);
}

static const struct fuse_lowlevel_ops shardfs_ll_ops = {
	.init = ll_init,
	.destroy = ll_destroy,
	.lookup = ll_lookup,
	.forget = ll_forget,
	.forget_multi = ll_forget_multi,
	.getattr = ll_getattr,
	.readlink = ll_readlink,
	.opendir = ll_opendir,
	.readdir = ll_readdir,
	.readdirplus = ll_readdirplus,
	.open = ll_open,
	.read = ll_read,
	.getxattr = ll_getxattr,
	.listxattr = ll_listxattr,
	.statfs = ll_statfs,
	.ioctl = ll_ioctl,
};

struct fuse_session *shardfs_session_new(struct fuse_args *args,
					 struct ll_session *ls)
{
	ls->se = fuse_session_new(args, &shardfs_ll_ops, sizeof(shardfs_ll_ops), ls);
	return ls->se;
}
