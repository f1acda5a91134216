/* SPDX-License-Identifier: MIT */
/*
 * SOURCE as a local directory (any mounted filesystem). The namespace is a
 * scan (ns_scan); a file is opened with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS) and O_NONBLOCK, checked against its snapshot (type,
 * size, mtime) at open and again after every read, so a file rewritten in
 * place gives EIO, never mixed bytes. Pages read are dropped from the
 * kernel page cache (POSIX_FADV_DONTNEED): the daemon's own cache is the
 * only one, and its budget is honest.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/deadline.h"
#include "common/hist.h"
#include "common/log.h"
#include "fs/source.h"

struct local_source {
	struct fs_source base;
	char *dir;
	int dir_fd;
	_Atomic uint64_t requests;
	struct hist latency; /* of preads (common/hist.h) */
};

static struct local_source *local_of(struct fs_source *src)
{
	return (struct local_source *)src;
}

/* relpath under dirfd with no symlink followed on the way (flags get
 * O_CLOEXEC | O_NOFOLLOW). */
static int open_beneath(int dirfd, const char *relpath, int flags)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, relpath, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(dirfd, relpath, flags | O_CLOEXEC | O_NOFOLLOW);
	return (int)fd;
}

static int local_stat(struct fs_source *src, const struct ns *ns, uint32_t node, struct stat *st)
{
	char path[PATH_MAX];
	int dfd = local_of(src)->dir_fd;

	if (node == 0)
		return fstat(dfd, st) < 0 ? -errno : 0;
	if (ns_path(ns, node, path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	/* An O_PATH handle of the entry itself (a symlink as the link), with
	 * no symlink followed on the way: a directory of SOURCE replaced by a
	 * symlink after mount cannot lend its target's attributes. */
	int fd = open_beneath(dfd, path, O_PATH);
	if (fd < 0)
		return -errno;
	int rc = fstat(fd, st) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

/* Whether st is still the file whose attributes were frozen: size and
 * mtime, owner and mode, and inode. The kernel decides who may read by
 * the frozen ones, so another file put in its place (a hard link to a
 * file of root's, made where fs.protected_hardlinks is off, with the size
 * and mtime anyone can stat) must not be served under them; and a file
 * swapped with its twin by renames (same size and mtime, as tar or cp -p
 * leave them) would give the units not cached yet from the other file. */
static bool matches_snapshot(const struct ns_node *n, const struct stat *st)
{
	int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	return S_ISREG(st->st_mode) && (uint64_t)st->st_size == n->size && mt == n->mtime_ns &&
	       (uint16_t)st->st_mode == n->mode && st->st_uid == n->uid && st->st_gid == n->gid &&
	       ns_ino_fold((uint64_t)st->st_ino) == n->ino_fold;
}

static void report_changed(struct fs_source *src, const struct ns *ns, uint32_t node,
			   const char *why)
{
	fs_source_problem(src, ns, node, "%s since mount; reads fail with EIO", why);
}

static int local_build_ns(struct fs_source *src, struct ns *ns, uint64_t chunk_size, char *err,
			  size_t errlen)
{
	return ns_scan(ns, local_of(src)->dir_fd, chunk_size, err, errlen);
}

static int local_open(struct fs_source *src, const struct ns *ns, uint32_t node, int *fh)
{
	char path[PATH_MAX];
	struct stat st;

	if (ns_path(ns, node, path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	int fd = open_beneath(local_of(src)->dir_fd, path,
			      O_RDONLY | O_NONBLOCK /* a FIFO must not block */);
	if (fd < 0) {
		int e = errno;
		/* Out of descriptors is the daemon's state, not the file's: the
		 * reader gets EMFILE and may retry; nothing is marked failed. */
		if (e == EMFILE || e == ENFILE) {
			fs_source_problem(src, ns, node,
					  "cannot open source file: %s; EMFILE to the reader",
					  strerror(e));
			return -EMFILE;
		}
		fs_source_problem(src, ns, node, "cannot open source file: %s", strerror(e));
		/* Gone is final; anything else (an NFS server timing out,
		 * ESTALE, EACCES) may pass: this read fails, a later one tries. */
		return e == ENOENT ? -EIO : -EAGAIN;
	}
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		fs_source_problem(src, ns, node, "cannot stat source file: %s", strerror(e));
		return -EAGAIN;
	}
	if (!matches_snapshot(&ns->nodes[node], &st)) {
		close(fd);
		report_changed(src, ns, node, "replaced or changed (type, size, mtime, owner, mode or inode)");
		return -EIO;
	}
	*fh = fd;
	return 0;
}

static void local_close(struct fs_source *src, int fh)
{
	close(fh);
}

/* pread exactly len bytes at off, then drop them from the page cache. A short
 * read means the file shrank: -EIO. */
static int local_pread(struct local_source *ls, const struct ns *ns, uint32_t node, int fd,
		       uint64_t off, size_t len, void *buf)
{
	size_t done = 0;

	while (done < len) {
		uint64_t t0 = deadline_now_us();
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		atomic_fetch_add_explicit(&ls->requests, 1, memory_order_relaxed);
		hist_add(&ls->latency, deadline_now_us() - t0);
		if (n < 0) {
			/* EIO, ETIMEDOUT, ESTALE from NFS: not the file's last word */
			fs_source_problem(&ls->base, ns, node, "read failed: %s", strerror(errno));
			return -EAGAIN;
		}
		if (n == 0) {
			report_changed(&ls->base, ns, node, "shrank");
			return -EIO;
		}
		done += (size_t)n;
	}
	posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
	/* Catch a file rewritten in place while we read it: never mixed bytes. */
	struct stat st;
	if (fstat(fd, &st) < 0) {
		fs_source_problem(&ls->base, ns, node, "cannot stat source file: %s",
				  strerror(errno));
		return -EAGAIN;
	}
	if (!matches_snapshot(&ns->nodes[node], &st)) {
		report_changed(&ls->base, ns, node, "changed while being read");
		return -EIO;
	}
	return 0;
}

static int local_read(struct fs_source *src, const struct ns *ns, uint32_t node, int fh,
		      uint64_t off, size_t len, void *buf)
{
	struct local_source *ls = local_of(src);
	int fd = fh, rc;

	if (fd < 0 && (rc = local_open(src, ns, node, &fd)) < 0)
		return rc;
	rc = local_pread(ls, ns, node, fd, off, len, buf);
	if (fh < 0)
		close(fd);
	return rc;
}

static int local_etag(struct fs_source *src, const struct ns *ns, uint32_t node, char *buf,
		      size_t len)
{
	const struct ns_node *n = &ns->nodes[node];
	int w = snprintf(buf, len, "\"%llx-%llx\"", (unsigned long long)n->size,
			 (unsigned long long)n->mtime_ns);
	return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

/* The tier's name adds the inode: another file put at the path between
 * two mounts (a dataset extracted again from an archive whose files keep
 * their sizes and mtimes, twins swapped by renames) is a new inode. A
 * dataset copied anew, contents unchanged, is read from SOURCE once more. */
static int local_tier_id(struct fs_source *src, const struct ns *ns, uint32_t node, char *buf,
			 size_t len)
{
	const struct ns_node *n = &ns->nodes[node];
	(void)src;
	int w = snprintf(buf, len, "\"%llx-%llx-%x\"", (unsigned long long)n->size,
			 (unsigned long long)n->mtime_ns, (unsigned)n->ino_fold);
	return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

static void local_get_stats(struct fs_source *src, struct fs_source_stats *out)
{
	struct local_source *ls = local_of(src);

	memset(out, 0, sizeof(*out));
	out->requests = atomic_load_explicit(&ls->requests, memory_order_relaxed);
	out->latency_p50_ms = hist_quantile_ms(&ls->latency, 0.50);
	out->latency_p99_ms = hist_quantile_ms(&ls->latency, 0.99);
}

static void local_destroy(struct fs_source *src)
{
	struct local_source *ls = local_of(src);

	if (ls->dir_fd >= 0)
		close(ls->dir_fd);
	free(ls->dir);
	free(ls);
}

static const struct fs_source_ops local_ops = {
    .kind = "local",
    .prefill_parallel = 4,
    .wants_readahead = false,
    .build_ns = local_build_ns,
    .stat = local_stat,
    .open = local_open,
    .close = local_close,
    .read = local_read,
    .etag = local_etag,
    .tier_id = local_tier_id,
    .get_stats = local_get_stats,
    .destroy = local_destroy,
};

int fs_source_local_create(const char *dir, struct fs_source **out, char *err, size_t errlen)
{
	struct local_source *ls = calloc(1, sizeof(*ls));

	if (!ls)
		return -ENOMEM;
	ls->base.ops = &local_ops;
	ls->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ls->dir_fd < 0) {
		int rc = -errno;
		snprintf(err, errlen, "source '%s': %s", dir, strerror(errno));
		free(ls);
		return rc;
	}
	ls->dir = strdup(dir);
	if (!ls->dir) {
		local_destroy(&ls->base);
		return -ENOMEM;
	}
	*out = &ls->base;
	return 0;
}
