/* SPDX-License-Identifier: MIT */
/*
 * The peer server (it serves this node's units to the others) and the
 * start and stop of both sides of the partitioned cache.
 */
#ifndef COORDFS_FS_PEER_SERVER_H
#define COORDFS_FS_PEER_SERVER_H

struct fs_ctx;

/* Start the peer client and server (after daemonizing, after
 * fs_peer_configure). 0 or -errno. Nothing to do without --peers. */
int fs_peer_start(struct fs_ctx *fs);
/* Stop both and free what fs_peer_configure set up. */
void fs_peer_stop(struct fs_ctx *fs);

#endif
