/* SPDX-License-Identifier: MIT */
/*
 * Snapshot ETags (see snapshot.h): named by the source from the
 * namespace's frozen attributes only, never from a fresh stat, so the name a node gives a file
 * cannot drift while it is mounted: a file changed since mount keeps the
 * old name, and its reads fail the snapshot check instead.
 */
#include "fs/snapshot.h"

#include <errno.h>
#include <stdio.h>

#include "fs/fs.h"
#include "fs/source.h"

typedef int (*name_fn)(struct fs_source *src, const struct ns *ns, uint32_t node, char *buf,
		       size_t len);

/* The source names its snapshot (name: one of its ops) of regular file node. */
static int snapshot_name(struct fs_ctx *fs, name_fn name, uint32_t node, char *buf, size_t len)
{
	if (node >= fs->ns.nnodes || !ns_is_reg(&fs->ns, node))
		return -EINVAL;
	int rc = name(fs->src, &fs->ns, node, buf, len);
	return rc == -ENAMETOOLONG ? -ENOSPC : rc;
}

int fs_snapshot_etag(struct fs_ctx *fs, uint32_t node, char *buf, size_t len)
{
	/* size and mtime for a directory, the listed ETag for an object store */
	return snapshot_name(fs, fs->src->ops->etag, node, buf, len);
}

int fs_snapshot_tier_id(struct fs_ctx *fs, uint32_t node, char *buf, size_t len)
{
	const struct fs_source_ops *ops = fs->src->ops;

	return snapshot_name(fs, ops->tier_id ? ops->tier_id : ops->etag, node, buf, len);
}
