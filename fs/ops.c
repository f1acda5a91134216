/* SPDX-License-Identifier: MIT */
/*
 * FUSE low-level handlers. Every handler ends in exactly one fuse_reply_*.
 * The tree is immutable, so entries and attributes carry long timeouts and
 * lookups are not reference-counted (forget is a no-op). Everything that
 * would write fails with EROFS.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/limits.h> /* XATTR_SIZE_MAX */
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/disk.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "fs/attr.h"
#include "fs/fs.h"
#include "fs/io.h"
#include "fs/ops.h"
#include "fs/prepview.h"
#include "fs/readahead.h"
#include "fs/stats.h"

#define STATS_XATTR "user.coordfs.stats"
#define CACHED_XATTR "user.coordfs.cached"
/* Extra room promised on a size probe of the stats xattr: counters may grow. */
#define STATS_SLACK 1024

/* MOUNTPOINT/NAME when the prepared view has a session of its own: a
 * symlink to its mount (prepmount.c). Above every real and prepared inode. */
#define PREP_LINK_INO (1ULL << 61)

static inline struct fs_ctx *ctx_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* Real inode -> node index; false for prepared-view inodes and junk. */
static bool node_of(struct fs_ctx *fs, fuse_ino_t ino, uint32_t *node)
{
	if (ino == 0 || ino > fs->ns.nnodes)
		return false;
	*node = (uint32_t)(ino - 1);
	return true;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_ctx *fs = userdata;

	/* By default, without the prepared view (whose samples change at every
	 * open), opens need no round trip: the kernel keeps pages and serves
	 * them; the daemon sees only reads of what the kernel lacks. A SOURCE
	 * file is then checked when a read first misses the daemon's cache. */
	fs->no_open = !fs->opt.no_kernel_cache && (!fs->opt.prepared || fs->prep_link) &&
		      (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT);
	if (fs->no_open)
		conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
	/* Pages of an immutable tree never need invalidating on mtime changes. */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/* No FUSE_CAP_SPLICE_WRITE: replies copy (fuse_reply_buf). Splicing
	 * cached bytes from the memfd was measured slower here: the kernel
	 * copies a spliced reply all the same, and the cache's pages must
	 * not be moved (tools/bench/RESULTS.md, "Reply path"). */
	/* 1 MiB read-ahead: the kernel offers its device's setting, which main.c
	 * raises right after the mount (as root), and keeps the smaller of the
	 * two; a larger value here is not an error. */
	conn->max_readahead = 1u << 20;
	if (fs->opt.max_read)
		conn->max_read = fs->opt.max_read;
}

static void link_attr(struct fs_ctx *fs, struct stat *st)
{
	fs_fill_attr(fs, 0, st);
	st->st_ino = PREP_LINK_INO;
	st->st_mode = S_IFLNK | 0777;
	st->st_nlink = 1;
	st->st_size = (off_t)strlen(fs->prep_link);
	st->st_blocks = 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_ctx *fs = ctx_of(req);
	struct fuse_entry_param e;
	uint32_t dir, child;

	if (fs->prep_link && parent == FUSE_ROOT_ID && fs_prep_is_root_name(fs, name)) {
		memset(&e, 0, sizeof(e));
		e.ino = PREP_LINK_INO;
		e.attr_timeout = FS_ATTR_TIMEOUT;
		e.entry_timeout = FS_ATTR_TIMEOUT;
		link_attr(fs, &e.attr);
		fuse_reply_entry(req, &e);
		return;
	}
	if (fs_prep_owns(fs, parent) || (parent == FUSE_ROOT_ID && fs_prep_is_root_name(fs, name))) {
		int rc = fs_prep_lookup(fs, parent, name, &e);
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_entry(req, &e);
		return;
	}
	if (!node_of(fs, parent, &dir)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fs_count(&fs->ctr.lookups, 1);
	int rc = ns_lookup(&fs->ns, dir, name, strlen(name), &child);
	if (rc == 0)
		rc = fs_node_attrs(fs, child); /* the first lookup takes them */
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	fs_fill_entry(fs, child, &e);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	struct stat st;
	uint32_t node;

	if (fs->prep_link && ino == PREP_LINK_INO) {
		link_attr(fs, &st);
		fuse_reply_attr(req, &st, FS_ATTR_TIMEOUT);
		return;
	}
	if (fs_prep_owns(fs, ino)) {
		int rc = fs_prep_getattr(fs, ino, &st);
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_attr(req, &st, FS_ATTR_TIMEOUT);
		return;
	}
	if (!node_of(fs, ino, &node)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = fs_node_attrs(fs, node);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	fs_fill_attr(fs, node, &st);
	fuse_reply_attr(req, &st, FS_ATTR_TIMEOUT);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t node;

	if (fs->prep_link && ino == PREP_LINK_INO) {
		fuse_reply_readlink(req, fs->prep_link);
		return;
	}
	if (!node_of(fs, ino, &node) || !S_ISLNK(fs->ns.nodes[node].mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	fuse_reply_readlink(req, fs->ns.pool + fs->ns.nodes[node].first);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t node;

	if (fs_prep_owns(fs, ino)) {
		int rc = fs_prep_opendir(fs, ino);
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_open(req, fi);
		return;
	}
	if (!node_of(fs, ino, &node)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!ns_is_dir(&fs->ns, node)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void readdir_any(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t node;

	if (fs_prep_owns(fs, ino)) {
		fs_prep_readdir(req, fs, ino, size, off, plus);
		return;
	}
	if (!node_of(fs, ino, &node) || !ns_is_dir(&fs->ns, node)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fuse_ino_t parent = node == 0 ? FUSE_ROOT_ID : fs->ns.nodes[node].parent + 1;
	fs_readdir_common(req, fs, node, ino, parent, size, off, plus, NULL, NULL, NULL);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, true);
}

struct fs_handle {
	uint32_t node;
	int fd; /* SOURCE handle, or -1 (cached at open, or a source without handles) */
	struct fs_peer_buf peer; /* used only with --peers or --disk-cache */
	struct fs_readahead ra;  /* used only by sources that want readahead */
	struct fs_handle *prev, *next; /* fs->handles */
};

static void handle_track(struct fs_ctx *fs, struct fs_handle *h)
{
	pthread_mutex_lock(&fs->handles_lock);
	h->prev = NULL;
	h->next = fs->handles;
	if (h->next)
		h->next->prev = h;
	fs->handles = h;
	pthread_mutex_unlock(&fs->handles_lock);
}

static void handle_untrack(struct fs_ctx *fs, struct fs_handle *h)
{
	pthread_mutex_lock(&fs->handles_lock);
	if (h->prev)
		h->prev->next = h->next;
	else
		fs->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	pthread_mutex_unlock(&fs->handles_lock);
}

static void handle_free(struct fs_ctx *fs, struct fs_handle *h)
{
	if (!h)
		return;
	handle_untrack(fs, h);
	if (h->fd >= 0)
		atomic_fetch_sub(&fs->held_fds, 1);
	fs_close_source(fs, h->fd);
	fs_peer_buf_fini(&h->peer);
	fs_readahead_fini(&h->ra, &fs->mem);
	free(h);
}

void fs_ops_init(struct fs_ctx *fs)
{
	pthread_mutex_init(&fs->handles_lock, NULL);
	fs->handles = NULL;
}

void fs_ops_fini(struct fs_ctx *fs)
{
	while (fs->handles)
		handle_free(fs, fs->handles);
	pthread_mutex_destroy(&fs->handles_lock);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t node;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_CREAT))) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fs_count(&fs->ctr.opens, 1);
	if (fs_prep_owns(fs, ino)) {
		fs_prep_open(req, fs, ino, fi);
		return;
	}
	if (!node_of(fs, ino, &node)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (ns_is_dir(&fs->ns, node)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (!ns_is_reg(&fs->ns, node)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int arc = fs_node_attrs(fs, node);
	if (arc < 0) {
		fuse_reply_err(req, -arc);
		return;
	}
	if (fs->no_open) {
		fuse_reply_err(req, ENOSYS); /* the kernel stops sending opens */
		return;
	}
	struct fs_handle *h = malloc(sizeof(*h));
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->node = node;
	h->fd = -1;
	fs_peer_buf_init(&h->peer);
	fs_readahead_init(&h->ra);
	handle_track(fs, h);
	/* A file wholly in memory needs no SOURCE fd; otherwise open and check it now. */
	if (!fs_file_cached(fs, node)) {
		int fd = -1, rc = fs_open_source(fs, node, &fd);
		if (rc < 0) {
			handle_free(fs, h);
			/* a passing failure: EIO for this open, a later one tries */
			fuse_reply_err(req, rc == -EAGAIN ? EIO : -rc);
			return;
		}
		/* Checked against the snapshot either way; past the cap the
		 * handle's reads open the file for themselves (see fs.h). */
		if (fd >= 0 && atomic_fetch_add(&fs->held_fds, 1) >= fs->held_fds_max) {
			atomic_fetch_sub(&fs->held_fds, 1);
			fs_close_source(fs, fd);
			fd = -1;
		}
		h->fd = fd;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->keep_cache = !fs->opt.no_kernel_cache;
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) != 0)
		handle_free(fs, h); /* interrupted or disconnected: no release will come */
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);

	fs_count(&fs->ctr.reads, 1);
	if (fs_prep_owns(fs, ino)) {
		fs_prep_read(req, fs, fi, size, off);
		return;
	}
	struct fs_handle *h = (struct fs_handle *)(uintptr_t)fi->fh;
	uint32_t node = 0;
	const void *direct;

	/* Without an open (no-open mode) there is no handle: use the inode. */
	if (!h && (!node_of(fs, ino, &node) || !ns_is_reg(&fs->ns, node))) {
		fuse_reply_err(req, EBADF);
		return;
	}
	/* With a disk tier, room for a unit's blocks: a read of a whole unit
	 * lands here straight from disk. */
	size_t room = fs->disk ? cache_disk_room(size) : (size ? size : 1);
	char *buf = NULL;
	if (fs->disk ? posix_memalign((void **)&buf, CACHE_DISK_ALIGN, room) != 0
		     : !(buf = malloc(room))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* The handle keeps the last whole unit read from a peer or the disk tier. */
	struct fs_peer_buf *pb = h && (fs->cluster || fs->disk) ? &h->peer : NULL;
	ssize_t n = h ? fs_read_file_handle(fs, h->node, h->fd, pb, &h->ra, (uint64_t)off, size,
					    buf, room, &direct)
		      : fs_read_file_ref(fs, node, -1, NULL, (uint64_t)off, size, buf, room,
					 &direct);
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
	} else {
		fs_count(&fs->ctr.read_bytes, (uint64_t)n);
		fs_count(&fs->ctr.dataset_read_bytes, (uint64_t)n);
		fuse_reply_buf(req, direct ? direct : buf, (size_t)n);
	}
	free(buf);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);

	if (fs_prep_owns(fs, ino)) {
		fs_prep_release(fs, fi);
	} else {
		handle_free(fs, (struct fs_handle *)(uintptr_t)fi->fh);
	}
	fuse_reply_err(req, 0);
}

/*
 * No file here answers an ioctl. The kernel still sends every one (it does
 * not remember an ENOSYS for ioctls), and Python's open() makes one on every
 * file it opens (TCGETS, for isatty) before Python 3.14: a round trip per
 * open, counted (fuse.ioctls) so that it shows in a sample's breakdown.
 */
static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	fs_count(&ctx_of(req)->ctr.ioctls, 1);
	fuse_reply_err(req, ENOTTY);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs_ctx *fs = ctx_of(req);
	struct statvfs sv;

	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (atomic_load(&fs->ns.total_bytes) + 4095) / 4096;
	sv.f_files = fs->ns.nnodes;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

static void reply_xattr_value(fuse_req_t req, const char *val, size_t len, size_t size,
			      size_t slack)
{
	if (size == 0)
		fuse_reply_xattr(req, len + slack);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t node;

	if (ino == FUSE_ROOT_ID && !strcmp(name, STATS_XATTR)) {
		struct strbuf sb;
		strbuf_init(&sb);
		/* The kernel caps an xattr value at XATTR_SIZE_MAX, the size
		 * probe's slack included. */
		fs_stats_json(fs, &sb, XATTR_SIZE_MAX - STATS_SLACK);
		if (sb.failed)
			fuse_reply_err(req, ENOMEM);
		else
			reply_xattr_value(req, sb.buf, sb.len, size, STATS_SLACK);
		strbuf_fini(&sb);
		return;
	}
	if (!strcmp(name, CACHED_XATTR) && node_of(fs, ino, &node) && ns_is_reg(&fs->ns, node)) {
		const char *v = fs_file_cached(fs, node) ? "1" : "0";
		reply_xattr_value(req, v, 1, size, 0);
		return;
	}
	fuse_reply_err(req, ENODATA);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t node;
	const char *list = "";
	size_t len = 0;

	if (ino == FUSE_ROOT_ID) {
		list = STATS_XATTR;
		len = sizeof(STATS_XATTR);
	} else if (node_of(fs, ino, &node) && ns_is_reg(&fs->ns, node)) {
		list = CACHED_XATTR;
		len = sizeof(CACHED_XATTR);
	}
	reply_xattr_value(req, list, len, size, 0);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
}

/* Everything that writes. */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	fuse_reply_err(req, EROFS);
}
static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	fuse_reply_err(req, EROFS);
}
static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}
static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}
static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	fuse_reply_err(req, EROFS);
}
static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	fuse_reply_err(req, EROFS);
}
static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}
static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	fuse_reply_err(req, EROFS);
}
static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, EROFS);
}
static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}
static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

/* Both sessions' handlers of everything that writes. */
#define WRITES_REFUSED                                                                        \
	.setattr = op_setattr, .mknod = op_mknod, .mkdir = op_mkdir, .unlink = op_unlink,      \
	.rmdir = op_unlink, .symlink = op_symlink, .rename = op_rename, .link = op_link,      \
	.write = op_write, .setxattr = op_setxattr, .removexattr = op_removexattr,            \
	.create = op_create, .fallocate = op_fallocate

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.readlink = op_readlink,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.statfs = op_statfs,
	.ioctl = op_ioctl,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.access = op_access,
	WRITES_REFUSED,
};

/*
 * The prepared view's own session (prepmount.c): its root is MOUNTPOINT/NAME,
 * so inode 1 there is the view's top directory; every other inode is the
 * view's own. Opens are kept (no no-open): each is a new version.
 */
static fuse_ino_t prep_ino(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? fs_prep_top_ino() : ino;
}

static void prep_op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_ctx *fs = userdata;

	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	conn->max_readahead = 1u << 20;
	if (fs->opt.max_read) /* the same -o options as the main mount */
		conn->max_read = fs->opt.max_read;
}

static void prep_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	op_lookup(req, prep_ino(parent), name);
}

static void prep_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	op_getattr(req, prep_ino(ino), fi);
}

static void prep_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	op_opendir(req, prep_ino(ino), fi);
}

static void prep_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			    struct fuse_file_info *fi)
{
	readdir_any(req, prep_ino(ino), size, off, false);
}

static void prep_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
				struct fuse_file_info *fi)
{
	readdir_any(req, prep_ino(ino), size, off, true);
}

static void prep_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	op_open(req, prep_ino(ino), fi);
}

static void prep_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			 struct fuse_file_info *fi)
{
	op_read(req, prep_ino(ino), size, off, fi);
}

static void prep_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	op_release(req, prep_ino(ino), fi);
}

static void prep_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	fuse_reply_err(req, ENODATA);
}

static void prep_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	reply_xattr_value(req, "", 0, size, 0);
}

const struct fuse_lowlevel_ops fs_prep_session_ops = {
	.init = prep_op_init,
	.lookup = prep_op_lookup,
	.getattr = prep_op_getattr,
	.opendir = prep_op_opendir,
	.readdir = prep_op_readdir,
	.readdirplus = prep_op_readdirplus,
	.open = prep_op_open,
	.read = prep_op_read,
	.release = prep_op_release,
	.statfs = op_statfs,
	.ioctl = op_ioctl,
	.getxattr = prep_op_getxattr,
	.listxattr = prep_op_listxattr,
	.access = op_access,
	WRITES_REFUSED,
};
