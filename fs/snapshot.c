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

int fs_snapshot_etag(struct fs_ctx *fs, uint32_t node, char *buf, size_t len)
{
	if (node >= fs->ns.nnodes || !ns_is_reg(&fs->ns, node))
		return -EINVAL;
	/* The source names its snapshot: size and mtime for a directory,
	 * the listed ETag for an object store. */
	int rc = fs->src->ops->etag(fs->src, &fs->ns, node, buf, len);
	return rc == -ENAMETOOLONG ? -ENOSPC : rc;
}

int fs_snapshot_tier_id(struct fs_ctx *fs, uint32_t node, char *buf, size_t len)
{
	if (!fs->src->ops->tier_id)
		return fs_snapshot_etag(fs, node, buf, len);
	if (node >= fs->ns.nnodes || !ns_is_reg(&fs->ns, node))
		return -EINVAL;
	int rc = fs->src->ops->tier_id(fs->src, &fs->ns, node, buf, len);
	return rc == -ENAMETOOLONG ? -ENOSPC : rc;
}
