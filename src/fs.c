/*
 * fs.c - attributes, lookups and reads over a built index.
 *
 * Nothing here touches the shard storage except shardfs_read(): every
 * metadata answer comes from the in-memory index, which is the point of
 * shardfs (a loose-file tree costs several metadata round trips per
 * sample on network storage).
 *
 * Reads pread(2) the member's bytes at their offset in the shard.  A short
 * read means the shard is no longer what was indexed (truncated or
 * rewritten under the mount); it is answered with EIO, never with the
 * wrong bytes, and logged once per shard.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardfs/fs.h"
#include "shardfs/log.h"
#include "shardfs/path.h"

int shardfs_init(struct shardfs *fs, const char *spec,
		 const struct shard_index_build_options *opt)
{
	struct timespec t0, t1;
	char msg[512];
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = shard_set_expand(&fs->set, spec, msg, sizeof(msg));
	if (!rc)
		rc = shard_set_open(&fs->set, msg, sizeof(msg));
	if (rc) {
		log_error("%s", msg);
		goto out_release_set;
	}
	rc = shard_index_build(&fs->idx, &fs->set, opt);
	if (rc)
		goto out_release_set;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fs->build_seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	return 0;

out_release_set:
	shard_set_release(&fs->set);
	return rc;
}

void shardfs_release(struct shardfs *fs)
{
	shard_index_release(&fs->idx);
	shard_set_release(&fs->set);
}

/* Inode reported for an entry: hard links report their group's first. */
static uint64_t entry_ino(const struct shard_index *idx, uint64_t entry)
{
	const struct shard_inode *in = &idx->inodes[entry];

	return S_ISDIR(in->mode) ? entry + 1 : (uint64_t)in->parent + 1;
}

int shardfs_getattr(const struct shardfs *fs, uint64_t ino, struct stat *st)
{
	const struct shard_inode *in = shard_index_get(&fs->idx, ino);

	if (!in)
		return -ENOENT;
	memset(st, 0, sizeof(*st));
	st->st_ino = entry_ino(&fs->idx, ino - 1);
	st->st_mode = in->mode & ~(mode_t)fs->opt.umask;
	st->st_nlink = in->nlink;
	st->st_uid = fs->opt.set_uid ? fs->opt.uid : in->uid;
	st->st_gid = fs->opt.set_gid ? fs->opt.gid : in->gid;
	st->st_size = S_ISDIR(in->mode) ? SHARDFS_BLKSIZE / 32 : (off_t)in->size;
	st->st_blksize = SHARDFS_BLKSIZE;
	st->st_blocks = S_ISREG(in->mode) ? (blkcnt_t)((in->size + 511) / 512) : 0;
	st->st_mtim.tv_sec = in->mtime_sec;
	st->st_mtim.tv_nsec = in->mtime_nsec;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
	return 0;
}

int shardfs_lookup(const struct shardfs *fs, uint64_t parent, const char *name,
		   uint64_t *ino)
{
	size_t len = strlen(name);
	int64_t e;

	if (!shard_index_get(&fs->idx, parent))
		return -ENOENT;
	if (len > PATH_COMPONENT_MAX)
		return -ENAMETOOLONG;
	e = shard_index_lookup(&fs->idx, (uint32_t)(parent - 1), name, len);
	if (e < 0)
		return (int)e;
	*ino = entry_ino(&fs->idx, (uint64_t)e);
	return 0;
}

int shardfs_readdir_entry(const struct shardfs *fs, uint64_t dir, uint64_t pos,
			  const char **name, uint64_t *ino)
{
	const struct shard_inode *d = shard_index_get(&fs->idx, dir);
	uint64_t e;

	if (!d)
		return -ENOENT;
	if (!S_ISDIR(d->mode))
		return -ENOTDIR;
	if (pos >= d->size)
		return -ENOENT;
	e = d->data + pos;
	*name = shard_index_name(&fs->idx, &fs->idx.inodes[e]);
	*ino = entry_ino(&fs->idx, e);
	return 0;
}

uint64_t shardfs_parent(const struct shardfs *fs, uint64_t dir)
{
	const struct shard_inode *d = shard_index_get(&fs->idx, dir);

	return d && S_ISDIR(d->mode) ? (uint64_t)d->parent + 1 : 1;
}

int shardfs_readlink(const struct shardfs *fs, uint64_t ino, const char **target)
{
	const struct shard_inode *in = shard_index_get(&fs->idx, ino);

	if (!in)
		return -ENOENT;
	if (!S_ISLNK(in->mode))
		return -EINVAL;
	*target = fs->idx.names + in->data;
	return 0;
}

int shardfs_open(const struct shardfs *fs, uint64_t ino)
{
	const struct shard_inode *in = shard_index_get(&fs->idx, ino);

	if (!in)
		return -ENOENT;
	return S_ISDIR(in->mode) ? -EISDIR : 0;
}

/* Log once that @shard no longer matches the index, and why. */
static void shard_changed(struct shardfs *fs, uint32_t shard, uint64_t off)
{
	struct shard *s = &fs->set.shards[shard];
	struct stat st;

	if (__atomic_exchange_n(&s->stale_logged, 1, __ATOMIC_RELAXED))
		return;
	if (!fstat(s->fd, &st) && (uint64_t)st.st_size != s->size)
		log_error("%s: shard changed size under the mount (%llu -> %llu bytes); "
			  "its members now fail with EIO", s->path,
			  (unsigned long long)s->size, (unsigned long long)st.st_size);
	else
		log_error("%s: offset %llu: short read; the shard was modified under "
			  "the mount, its members now fail with EIO", s->path,
			  (unsigned long long)off);
}

/* Read exactly @size bytes at @off of @shard, or fail with -EIO. */
static ssize_t shard_pread(struct shardfs *fs, uint32_t shard, char *buf,
			   size_t size, uint64_t off)
{
	const struct shard *s = &fs->set.shards[shard];
	size_t done = 0;

	while (done < size) {
		ssize_t n = pread(s->fd, buf + done, size - done, off + done);

		atomic_fetch_add_explicit(&fs->counters.backing_reads, 1,
					  memory_order_relaxed);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			log_error("%s: offset %llu: read failed: %s", s->path,
				  (unsigned long long)(off + done), strerror(errno));
			return -EIO;
		}
		if (n == 0) {
			shard_changed(fs, shard, off + done);
			return -EIO;
		}
		done += n;
	}
	return (ssize_t)done;
}

/* First run of @sp that ends after @off (binary search). */
static uint64_t extent_at(const struct shard_index *idx,
			  const struct shard_sparse *sp, uint64_t off)
{
	uint64_t lo = sp->first, hi = sp->first + sp->count;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		const struct shard_extent *e = &idx->extents[mid];

		if (e->logical + e->length <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Holes read as zeros; runs come from the shard. */
static ssize_t read_sparse(struct shardfs *fs, const struct shard_inode *in,
			   char *buf, size_t size, uint64_t off)
{
	const struct shard_sparse *sp = &fs->idx.sparse[in->data];
	uint64_t end = off + size;

	memset(buf, 0, size);
	for (uint64_t i = extent_at(&fs->idx, sp, off);
	     i < sp->first + sp->count; i++) {
		const struct shard_extent *e = &fs->idx.extents[i];
		uint64_t from = e->logical > off ? e->logical : off;
		uint64_t to = e->logical + e->length < end ? e->logical + e->length : end;
		ssize_t rc;

		if (e->logical >= end)
			break;
		if (from >= to)
			continue;
		rc = shard_pread(fs, in->shard, buf + (from - off), to - from,
				 e->physical + (from - e->logical));
		if (rc < 0)
			return rc;
	}
	return (ssize_t)size;
}

ssize_t shardfs_read(struct shardfs *fs, uint64_t ino, char *buf, size_t size,
		     uint64_t off)
{
	const struct shard_inode *in = shard_index_get(&fs->idx, ino);
	ssize_t rc;

	if (!in)
		return -ENOENT;
	if (!S_ISREG(in->mode))
		return -EISDIR;
	if (off >= in->size)
		return 0;
	if (size > in->size - off)
		size = in->size - off;
	if (in->flags & SHARD_INODE_SPARSE)
		rc = read_sparse(fs, in, buf, size, off);
	else
		rc = shard_pread(fs, in->shard, buf, size, in->data + off);
	if (rc < 0)
		atomic_fetch_add_explicit(&fs->counters.read_errors, 1,
					  memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&fs->counters.read_bytes, rc,
					  memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->counters.reads, 1, memory_order_relaxed);
	return rc;
}

void shardfs_statfs(const struct shardfs *fs, struct statvfs *sv)
{
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = SHARDFS_BLKSIZE;
	sv->f_frsize = 512;
	sv->f_blocks = (fs->idx.counts.bytes + 511) / 512;
	sv->f_files = fs->idx.nr_inodes;
	sv->f_namemax = PATH_COMPONENT_MAX;
	sv->f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
}
