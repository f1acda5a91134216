/* SPDX-License-Identifier: MIT */
/*
 * The peer node's lifecycle (coordfs(1), PEERS): configuring, starting and
 * stopping the peer client and server, and the callbacks through which the
 * server reads the namespace, the cache and the statistics.
 */
#ifndef COORDFS_FS_PEER_SERVER_H
#define COORDFS_FS_PEER_SERVER_H

#include <stddef.h>

struct fs_ctx;

/* Before daemonizing: parse --peers, bind the listener, read the secret.
 * 0, or -errno with err set to one line naming the problem. */
int fs_peer_configure(struct fs_ctx *fs, char *err, size_t errlen);
/* Start/stop the peer server and client (after daemonizing). 0 or -errno. */
int fs_peer_start(struct fs_ctx *fs);
void fs_peer_stop(struct fs_ctx *fs);

#endif
