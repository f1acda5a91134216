/* SPDX-License-Identifier: MIT */
/*
 * fs/'s side of the partitioned cache: which node owns a unit, fetching a
 * unit's bytes from its owner, and the peer server's callbacks. With no
 * --peers every unit is this node's.
 */
#ifndef COORDFS_FS_PEER_H
#define COORDFS_FS_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fs_ctx;

/* Whether this node owns unit k of file node (always true without peers). */
bool fs_peer_owns(struct fs_ctx *fs, uint32_t node, uint32_t k);

/* Fetch [uoff, uoff+len) of unit k of file node from its owner into buf,
 * accepting only bytes of this node's snapshot of the file (its ETag and
 * size, fs/snapshot.h). 0, or -errno when the owner failed or holds
 * another version (the caller falls back to SOURCE). */
int fs_peer_fetch(struct fs_ctx *fs, uint32_t node, uint32_t k, uint64_t uoff, size_t len,
		  void *buf);

/* Start/stop the peer server and client (after daemonizing). 0 or -errno. */
/* Before daemonizing: parse --peers, bind the listener, read the secret.
 * 0, or -errno with err set to one line naming the problem. */
int fs_peer_configure(struct fs_ctx *fs, char *err, size_t errlen);
int fs_peer_start(struct fs_ctx *fs);
void fs_peer_stop(struct fs_ctx *fs);

#endif
