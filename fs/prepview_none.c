/* SPDX-License-Identifier: MIT */
/* Placeholder for builds without the prepared view: nothing is virtual. */
#include <errno.h>

#include "fs/fs.h"
#include "fs/prepview.h"
#include "fs/stats.h"

int fs_prep_start(struct fs_ctx *fs)
{
	return fs->opt.prepared ? -ENOTSUP : 0;
}
void fs_prep_stop(struct fs_ctx *fs)
{
}
bool fs_prep_owns(struct fs_ctx *fs, fuse_ino_t ino)
{
	return false;
}
bool fs_prep_is_root_name(struct fs_ctx *fs, const char *name)
{
	return false;
}
int fs_prep_lookup(struct fs_ctx *fs, fuse_ino_t parent, const char *name,
		   struct fuse_entry_param *e)
{
	return -ENOENT;
}
int fs_prep_getattr(struct fs_ctx *fs, fuse_ino_t ino, struct stat *st)
{
	return -ENOENT;
}
int fs_prep_opendir(struct fs_ctx *fs, fuse_ino_t ino)
{
	return -ENOENT;
}
void fs_prep_readdir(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino, size_t size, off_t off,
		     bool plus)
{
	fuse_reply_err(req, ENOENT);
}
void fs_prep_open(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, ENOENT);
}
void fs_prep_read(fuse_req_t req, struct fs_ctx *fs, struct fuse_file_info *fi, size_t size,
		  off_t off)
{
	fuse_reply_err(req, EBADF);
}
void fs_prep_release(struct fs_ctx *fs, struct fuse_file_info *fi)
{
}

void fs_prep_collect(struct fs_ctx *fs, struct fs_stats *s)
{
}
