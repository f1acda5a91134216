/* SPDX-License-Identifier: MIT */
/*
 * The prepared view in the namespace (coordfs(1), THE PREPARED VIEW): MOUNTPOINT/NAME/RECIPE/REL
 * mirrors every directory and image file REL of the dataset. NAME is not
 * listed in the root's readdir but lookup finds it.
 *
 * Inodes: bit 62 set; NAME itself is PREP_INO_BASE; RECIPE's mirror of
 * node i is PREP_INO_BASE | code(RECIPE) << 32 | (i + 1).
 */
#ifndef COORDFS_FS_PREPVIEW_H
#define COORDFS_FS_PREPVIEW_H

#include <fuse_lowlevel.h>
#include <stdbool.h>

struct fs_ctx;
struct fs_stats;

/* Start/stop the view's engine (after daemonizing). 0 or -errno. */
/* With no --prep-decoded-mem: size the decoded tier (and, with no
 * --prep-mem, the budget) from the listed dataset and the memory available
 * (prep_default_shares). Before fs->mem is set up from prep_mem_bytes. */
void fs_prep_size(struct fs_ctx *fs);
int fs_prep_start(struct fs_ctx *fs);
void fs_prep_stop(struct fs_ctx *fs);

bool fs_prep_owns(struct fs_ctx *fs, fuse_ino_t ino);
/* The inode of the view's top directory, MOUNTPOINT/NAME. */
fuse_ino_t fs_prep_top_ino(void);
bool fs_prep_is_root_name(struct fs_ctx *fs, const char *name);
int fs_prep_lookup(struct fs_ctx *fs, fuse_ino_t parent, const char *name,
		   struct fuse_entry_param *e);
int fs_prep_getattr(struct fs_ctx *fs, fuse_ino_t ino, struct stat *st);
int fs_prep_opendir(struct fs_ctx *fs, fuse_ino_t ino);
void fs_prep_readdir(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino, size_t size, off_t off,
		     bool plus);
void fs_prep_open(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_prep_read(fuse_req_t req, struct fs_ctx *fs, struct fuse_file_info *fi, size_t size,
		  off_t off);
void fs_prep_release(struct fs_ctx *fs, struct fuse_file_info *fi);

/* The view's counters into s (zero when it is off). */
void fs_prep_collect(struct fs_ctx *fs, struct fs_stats *s);

#endif
