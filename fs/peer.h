/* SPDX-License-Identifier: MIT */
/*
 * fs/'s client side of the partitioned cache: which node owns a unit,
 * fetching a unit's bytes from its owner, and the peer counters. With no
 * --peers every unit is this node's. The server side is peer_server.h.
 */
#ifndef COORDFS_FS_PEER_H
#define COORDFS_FS_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fs_ctx;
struct fs_stats;
struct strbuf;

/* Whether this node owns unit k of file node (always true without peers). */
bool fs_peer_owns(struct fs_ctx *fs, uint32_t node, uint32_t k);

/* Unit k of file node, whole (len bytes), from its owner of the previous
 * membership generation, when that node is still a member, is up, and
 * holds it (a request marked forwarded: it never reads SOURCE for it nor
 * forwards it). For a new owner filling a unit it does not hold yet: 0, or
 * -errno (-ENOENT: no such previous owner, or it does not hold the unit),
 * and the caller reads SOURCE. Counted in the membership statistics. */
int fs_peer_handoff(struct fs_ctx *fs, uint32_t node, uint32_t k, void *buf, size_t len);

/* Fetch [uoff, uoff+len) of unit k of file node from its owner into buf,
 * accepting only bytes of this node's snapshot of the file (its ETag and
 * size, fs/snapshot.h). 0, or -errno when the owner failed or holds
 * another version (the caller falls back to SOURCE). */
int fs_peer_fetch(struct fs_ctx *fs, uint32_t node, uint32_t k, uint64_t uoff, size_t len,
		  void *buf);

/* The peer counters into s (left as they are without peers). */
void fs_peer_collect(struct fs_ctx *fs, struct fs_stats *s);
/* The client's and server's Prometheus lines into sb. */
void fs_peer_metrics(struct fs_ctx *fs, struct strbuf *sb);

#endif
