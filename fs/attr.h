/* SPDX-License-Identifier: MIT */
/*
 * Attributes, entries and listings of namespace nodes (attr.c), used by the
 * dataset's tree (ops.c) and the prepared view (prepview.c).
 */
#ifndef COORDFS_FS_ATTR_H
#define COORDFS_FS_ATTR_H

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>

/* The tree is immutable: entries and attributes are cached this long (s). */
#define FS_ATTR_TIMEOUT 86400.0

struct fs_ctx;

typedef bool (*fs_readdir_filter_fn)(struct fs_ctx *fs, uint32_t child, void *arg);
/* A child's entry: with its attributes when plus and they are known, else
 * e->ino 0 (the kernel then makes no dentry and looks the name up later)
 * with e->attr's inode and type. <0: leave the child out. */
typedef int (*fs_readdir_ino_fn)(struct fs_ctx *fs, uint32_t child, bool plus,
				 struct fuse_entry_param *e, void *arg);

/* List directory node dir (shared by the real tree and its mirrors).
 * Listings never take attributes from SOURCE: a readdirplus entry of a
 * child not yet looked up carries its name, inode and type only. */
void fs_readdir_common(fuse_req_t req, struct fs_ctx *fs, uint32_t dir, fuse_ino_t self_ino,
		       fuse_ino_t parent_ino, size_t size, off_t off, bool plus,
		       fs_readdir_filter_fn filter, fs_readdir_ino_fn ino_map, void *arg);
/* The attributes of node (read-only, inode node + 1). */
void fs_fill_attr(struct fs_ctx *fs, uint32_t node, struct stat *st);
/* The entry of node for a lookup or readdirplus reply. */
void fs_fill_entry(struct fs_ctx *fs, uint32_t node, struct fuse_entry_param *e);

#endif
