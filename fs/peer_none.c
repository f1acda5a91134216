/* SPDX-License-Identifier: MIT */
/* Single-node build of fs/peer.h: every unit is ours, no server. */
#include <errno.h>
#include <stdio.h>

#include "fs/fs.h"
#include "fs/peer.h"
#include "fs/stats.h"
#include "common/strbuf.h"

bool fs_peer_owns(struct fs_ctx *fs, uint32_t node, uint32_t k)
{
	return true;
}

int fs_peer_fetch(struct fs_ctx *fs, uint32_t node, uint32_t k, uint64_t uoff, size_t len,
		  void *buf)
{
	return -ENOTSUP;
}

int fs_peer_start(struct fs_ctx *fs)
{
	return 0;
}

void fs_peer_stop(struct fs_ctx *fs)
{
}

void fs_peer_collect(struct fs_ctx *fs, struct fs_stats *s)
{
}

void fs_peer_nodes_json(struct fs_ctx *fs, struct strbuf *sb)
{
	strbuf_puts(sb, "[]");
}

int fs_peer_configure(struct fs_ctx *fs, char *err, size_t errlen)
{
	if (fs->opt.peers) {
		snprintf(err, errlen, "--peers: this build has no peer support");
		return -ENOTSUP;
	}
	return 0;
}
