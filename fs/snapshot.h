/* SPDX-License-Identifier: MIT */
/*
 * The name of this node's snapshot of a file, as peers see it: the ETag
 * the peer server puts on every file response and the one a reader asks
 * an owner for (If-Match). Two nodes whose names of a file differ hold
 * different versions of it, and never trust each other's bytes for it.
 * This is the one place that names a snapshot, whatever the source.
 */
#ifndef COORDFS_FS_SNAPSHOT_H
#define COORDFS_FS_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

struct fs_ctx;

/* The ETag of regular file `node` (quoted, NUL-terminated) into buf of len
 * bytes. For a local SOURCE it is "<size hex>-<mtime ns hex>" of the
 * attributes frozen at mount, so copies made with their mtimes kept
 * (rsync -t, cp -p) agree across nodes; for an object store it is the
 * object's ETag from the listing. 0, -EINVAL (not a regular file
 * of the namespace) or -ENOSPC (buf too small). */
int fs_snapshot_etag(struct fs_ctx *fs, uint32_t node, char *buf, size_t len);

/* The name the disk tier keeps with each unit of regular file `node`, and
 * checks at a later mount: the ETag, and for a local SOURCE the inode's
 * fold too (a tier is this node's own, its inode numbers mean the same
 * across mounts). As fs_snapshot_etag otherwise. */
int fs_snapshot_tier_id(struct fs_ctx *fs, uint32_t node, char *buf, size_t len);

#endif
