/* SPDX-License-Identifier: MIT */
/*
 * The read path below FUSE: a read of a dataset file is split into cache
 * units; each unit comes from the MinIO cache, from the peer that owns it,
 * or from SOURCE. SOURCE reads drop their pages from the kernel page cache
 * (POSIX_FADV_DONTNEED), so the daemon's memory is the only cache and its
 * budget is honest.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/log.h"
#include "fs/fs.h"
#include "fs/peer.h"

static int open_beneath(int dirfd, const char *relpath)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, /* a FIFO must not block */
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, relpath, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(dirfd, relpath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	return (int)fd;
}

static bool matches_snapshot(const struct ns_node *n, const struct stat *st)
{
	int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	return S_ISREG(st->st_mode) && (uint64_t)st->st_size == n->size && mt == n->mtime_ns;
}

int fs_io_init(struct fs_ctx *fs)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	atomic_store(&fs->src_summary_at, (int64_t)now.tv_sec + FS_LOG_SUMMARY_S);
	fs->src_logged = calloc(fs->ns.nnodes / 64 + 1, sizeof(*fs->src_logged));
	return fs->src_logged ? 0 : -ENOMEM;
}

void fs_io_fini(struct fs_ctx *fs)
{
	free(fs->src_logged);
	fs->src_logged = NULL;
}

/*
 * Log a problem with node's SOURCE file: the first one per file in full,
 * later ones only counted, and a summary of those at most every
 * FS_LOG_SUMMARY_S seconds, so a file read in a loop (or a flood of
 * EMFILE) cannot fill the log. source.errors counts them all when count.
 */
static void source_problem(struct fs_ctx *fs, uint32_t node, bool count, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void source_problem(struct fs_ctx *fs, uint32_t node, bool count, const char *fmt, ...)
{
	uint64_t bit = 1ULL << (node % 64);
	struct timespec now;

	if (count)
		fs_count(&fs->ctr.source_errors, 1);
	if (!fs->src_logged ||
	    !(atomic_fetch_or_explicit(&fs->src_logged[node / 64], bit, memory_order_relaxed) &
	      bit)) {
		char path[PATH_MAX], line[512];
		va_list ap;

		if (ns_path(&fs->ns, node, path, sizeof(path)) < 0)
			strcpy(path, "(path too long)");
		va_start(ap, fmt);
		vsnprintf(line, sizeof(line), fmt, ap);
		va_end(ap);
		log_err("%s: %s (later problems with this file are counted, not logged)", path,
			line);
		return;
	}
	atomic_fetch_add_explicit(&fs->src_unlogged, 1, memory_order_relaxed);
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t due = atomic_load_explicit(&fs->src_summary_at, memory_order_relaxed);
	if (now.tv_sec < due || !atomic_compare_exchange_strong_explicit(
				    &fs->src_summary_at, &due, now.tv_sec + FS_LOG_SUMMARY_S,
				    memory_order_relaxed, memory_order_relaxed))
		return;
	uint64_t n = atomic_exchange_explicit(&fs->src_unlogged, 0, memory_order_relaxed);
	if (n)
		log_err("%llu more SOURCE read problems with files already logged",
			(unsigned long long)n);
}

static void report_changed(struct fs_ctx *fs, uint32_t node, const char *why)
{
	source_problem(fs, node, true, "%s since mount; reads fail with EIO", why);
}

int fs_open_source(struct fs_ctx *fs, uint32_t node)
{
	char path[PATH_MAX];
	struct stat st;

	if (ns_path(&fs->ns, node, path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	int fd = open_beneath(fs->source_fd, path);
	if (fd < 0) {
		int e = errno;
		/* Out of descriptors is the daemon's state, not the file's: the
		 * reader gets EMFILE and may retry; nothing is marked failed. */
		if (e == EMFILE || e == ENFILE) {
			source_problem(fs, node, false,
				       "cannot open source file: %s; EMFILE to the "
				       "reader",
				       strerror(e));
			return -EMFILE;
		}
		source_problem(fs, node, true, "cannot open source file: %s", strerror(e));
		return -EIO;
	}
	if (fstat(fd, &st) < 0 || !matches_snapshot(&fs->ns.nodes[node], &st)) {
		close(fd);
		report_changed(fs, node, "changed (size, mtime or type)");
		return -EIO;
	}
	return fd;
}

/* pread exactly len bytes at off, then drop them from the page cache. A short
 * read means the file shrank: -EIO. */
static int source_pread(struct fs_ctx *fs, uint32_t node, int fd, uint64_t off, size_t len,
			void *buf)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			source_problem(fs, node, true, "read failed: %s", strerror(errno));
			return -EIO;
		}
		if (n == 0) {
			report_changed(fs, node, "shrank");
			return -EIO;
		}
		fs_count(&fs->ctr.source_reads, 1);
		fs_count(&fs->ctr.source_bytes, (uint64_t)n);
		done += (size_t)n;
	}
	posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
	/* Catch a file rewritten in place while we read it: never mixed bytes. */
	struct stat st;
	if (fstat(fd, &st) < 0 || !matches_snapshot(&fs->ns.nodes[node], &st)) {
		report_changed(fs, node, "changed while being read");
		return -EIO;
	}
	return 0;
}

struct fill_ctx {
	struct fs_ctx *fs;
	uint32_t node;
	int fd; /* -1 until opened here */
	bool own_fd;
	bool allow_peer; /* false when serving a peer: never forward */
	struct fs_peer_buf *pb;
};

void fs_peer_buf_init(struct fs_peer_buf *pb)
{
	pthread_mutex_init(&pb->lock, NULL);
	pb->data = NULL;
	pb->unit = 0;
	pb->len = 0;
}

void fs_peer_buf_fini(struct fs_peer_buf *pb)
{
	pthread_mutex_destroy(&pb->lock);
	free(pb->data);
}

/* [uoff, uoff+len) of unit k from its owner: from the handle's last fetched
 * unit, else by fetching the whole unit once. 0 or -errno. */
static int peer_read(struct fill_ctx *fc, uint32_t k, uint64_t uoff, size_t len, void *buf)
{
	struct fs_peer_buf *pb = fc->pb;
	size_t unit_len = (size_t)ns_unit_len(&fc->fs->ns, fc->node, k);

	/* Whole units up to 16 MiB per handle; larger chunks are fetched as read. */
	if (!pb || unit_len > ((size_t)16 << 20))
		return fs_peer_fetch(fc->fs, fc->node, k, uoff, len, buf);
	pthread_mutex_lock(&pb->lock);
	if (pb->data && pb->unit == k) {
		memcpy(buf, pb->data + uoff, len);
		pthread_mutex_unlock(&pb->lock);
		return 0;
	}
	pthread_mutex_unlock(&pb->lock);
	uint8_t *whole = malloc(unit_len);
	if (!whole)
		return fs_peer_fetch(fc->fs, fc->node, k, uoff, len, buf);
	int rc = fs_peer_fetch(fc->fs, fc->node, k, 0, unit_len, whole);
	if (rc < 0) {
		free(whole);
		return rc;
	}
	memcpy(buf, whole + uoff, len);
	pthread_mutex_lock(&pb->lock);
	free(pb->data);
	pb->data = whole;
	pb->unit = k;
	pb->len = unit_len;
	pthread_mutex_unlock(&pb->lock);
	return 0;
}

static int fill_ctx_fd(struct fill_ctx *fc)
{
	if (fc->fd < 0) {
		int fd = fs_open_source(fc->fs, fc->node);
		if (fd < 0)
			return fd;
		fc->fd = fd;
		fc->own_fd = true;
	}
	return fc->fd;
}

static int fill_unit(void *arg, uint64_t unit, void *dst, size_t len)
{
	struct fill_ctx *fc = arg;
	const struct ns_node *n = &fc->fs->ns.nodes[fc->node];
	uint64_t k = unit - n->first;
	int fd = fill_ctx_fd(fc);

	if (fd < 0)
		return fd;
	return source_pread(fc->fs, fc->node, fd, k * fc->fs->ns.chunk_size, len, dst);
}

/*
 * One unit's share of a read: [uoff, uoff+len) of unit k. Either *direct is
 * set to cached bytes, or buf receives them.
 */
static int read_unit(struct fill_ctx *fc, uint32_t k, uint64_t uoff, size_t len, void *buf,
		     const void **direct)
{
	struct fs_ctx *fs = fc->fs;
	const struct ns_node *n = &fs->ns.nodes[fc->node];
	uint64_t unit = (uint64_t)n->first + k;
	uint64_t unit_len = ns_unit_len(&fs->ns, fc->node, k);
	const void *data;
	/* Ownership only matters on a miss; a hit skips the hashing. */
	bool mine = cache_holds(fs->cache, unit) || fs_peer_owns(fs, fc->node, k);
	/* A node serving a peer admits what it owns; what it does not own it
	 * reads from SOURCE rather than forwarding (no loops). */
	int rc = cache_get(fs->cache, unit, unit_len, len, mine, fill_unit, fc, &data);
	if (rc == 0) {
		*direct = (const char *)data + uoff;
		return 0;
	}
	if (rc != -ENOSPC)
		return rc;
	*direct = NULL;
	if (!mine && fc->allow_peer && peer_read(fc, k, uoff, len, buf) == 0)
		return 0;
	int fd = fill_ctx_fd(fc);
	if (fd < 0)
		return fd;
	return source_pread(fs, fc->node, fd, (uint64_t)k * fs->ns.chunk_size + uoff, len, buf);
}

static ssize_t read_file(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			 uint64_t off, size_t len, void *buf, const void **direct, bool allow_peer)
{
	const struct ns_node *n = &fs->ns.nodes[node];
	struct fill_ctx fc = { fs, node, fd, false, allow_peer, pb };
	size_t done = 0;
	ssize_t ret;

	*direct = NULL;
	if (off >= n->size)
		return 0;
	if (len > n->size - off)
		len = (size_t)(n->size - off);
	while (done < len) {
		uint64_t pos = off + done;
		uint32_t k = (uint32_t)(pos / fs->ns.chunk_size);
		uint64_t uoff = pos - (uint64_t)k * fs->ns.chunk_size;
		size_t piece = (size_t)(ns_unit_len(&fs->ns, node, k) - uoff);
		const void *d;

		if (piece > len - done)
			piece = len - done;
		int rc = read_unit(&fc, k, uoff, piece, (char *)buf + done, &d);
		if (rc < 0) {
			ret = rc;
			goto out;
		}
		if (d && done == 0 && piece == len) {
			*direct = d; /* the whole read lies in one held unit */
			break;
		}
		if (d)
			memcpy((char *)buf + done, d, piece);
		done += piece;
	}
	ret = (ssize_t)len;
out:
	if (fc.own_fd)
		close(fc.fd);
	return ret;
}

ssize_t fs_read_file_ref(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			 uint64_t off, size_t len, void *buf, const void **direct)
{
	return read_file(fs, node, fd, pb, off, len, buf, direct, true);
}

ssize_t fs_read_file_local(struct fs_ctx *fs, uint32_t node, uint64_t off, size_t len, void *buf,
			   const void **direct)
{
	return read_file(fs, node, -1, NULL, off, len, buf, direct, false);
}

ssize_t fs_read_file(struct fs_ctx *fs, uint32_t node, int fd, uint64_t off, size_t len, void *buf)
{
	const void *direct;
	ssize_t n = fs_read_file_ref(fs, node, fd, NULL, off, len, buf, &direct);

	if (n > 0 && direct)
		memcpy(buf, direct, (size_t)n);
	return n;
}

bool fs_file_cached(struct fs_ctx *fs, uint32_t node)
{
	const struct ns_node *n = &fs->ns.nodes[node];

	for (uint32_t k = 0; k < n->count; k++)
		if (!cache_holds(fs->cache, (uint64_t)n->first + k))
			return false;
	return true;
}
