/* SPDX-License-Identifier: MIT */
/*
 * Attributes, entries and directory listings of namespace nodes, shared by
 * the real tree (ops.c) and the prepared view (prepview.c), which mirrors
 * its directories. Node i is inode i + 1.
 */
#ifndef COORDFS_FS_ATTR_H
#define COORDFS_FS_ATTR_H

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

/* Entry and attribute timeout (s): the tree never changes while mounted. */
#define FS_ATTR_TIMEOUT 86400.0

struct fs_ctx;

/* The attributes of node (read-only: no write bits). */
void fs_fill_attr(struct fs_ctx *fs, uint32_t node, struct stat *st);
/* A lookup entry for node, with its attributes and FS_ATTR_TIMEOUT. */
void fs_fill_entry(struct fs_ctx *fs, uint32_t node, struct fuse_entry_param *e);

typedef bool (*fs_readdir_filter_fn)(struct fs_ctx *fs, uint32_t child, void *arg);
typedef int (*fs_readdir_ino_fn)(struct fs_ctx *fs, uint32_t child, struct fuse_entry_param *e,
				 void *arg);

/* List directory node dir (shared by the real tree and its mirrors): the
 * children filter accepts (all when NULL), their entries from ino_map (the
 * real ones when NULL). */
void fs_readdir_common(fuse_req_t req, struct fs_ctx *fs, uint32_t dir, fuse_ino_t self_ino,
		       fuse_ino_t parent_ino, size_t size, off_t off, bool plus,
		       fs_readdir_filter_fn filter, fs_readdir_ino_fn ino_map, void *arg);

#endif
