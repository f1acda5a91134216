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

#endif
