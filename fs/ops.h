/* SPDX-License-Identifier: MIT */
/* The FUSE low-level handlers (ops.c). */
#ifndef COORDFS_FS_OPS_H
#define COORDFS_FS_OPS_H

/* The low-level operations table (ops.c). */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops fs_ops;

#endif
