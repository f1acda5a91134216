/* SPDX-License-Identifier: MIT */
/*
 * Snapshot ETags (see snapshot.h): derived from the namespace's frozen
 * attributes only, never from a fresh stat, so the name a node gives a file
 * cannot drift while it is mounted: a file changed since mount keeps the
 * old name, and its reads fail the snapshot check instead.
 */
#include "fs/snapshot.h"

#include <errno.h>
#include <stdio.h>

#include "fs/fs.h"

int fs_snapshot_etag(struct fs_ctx *fs, uint32_t node, char *buf, size_t len)
{
	if (node >= fs->ns.nnodes || !ns_is_reg(&fs->ns, node))
		return -EINVAL;
	const struct ns_node *n = &fs->ns.nodes[node];
	int w = snprintf(buf, len, "\"%llx-%llx\"", (unsigned long long)n->size,
			 (unsigned long long)(uint64_t)n->mtime_ns);

	if (w < 0 || (size_t)w >= len)
		return -ENOSPC;
	return 0;
}
