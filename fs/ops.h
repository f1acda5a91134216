/* SPDX-License-Identifier: MIT */
/* The FUSE low-level handlers of the dataset's tree (ops.c). */
#ifndef COORDFS_FS_OPS_H
#define COORDFS_FS_OPS_H

/* The low-level operations table. */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops fs_ops;

#endif
