/* SPDX-License-Identifier: MIT */
/* The FUSE low-level handlers of the dataset's tree (ops.c). */
#ifndef COORDFS_FS_OPS_H
#define COORDFS_FS_OPS_H

/* The low-level operations table. */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops fs_ops;
/* The prepared view's own session (fs/prepmount.c): its root is the view's
 * top directory. */
extern const struct fuse_lowlevel_ops fs_prep_session_ops;

struct fs_ctx;
/* Before the session: the list of open files. */
void fs_ops_init(struct fs_ctx *fs);
/* After the session is destroyed (no handler runs any more): the files the
 * kernel never released (the session ended with them open) are closed. */
void fs_ops_fini(struct fs_ctx *fs);

#endif
