/* SPDX-License-Identifier: MIT */
/* The statistics (stats.c): every counter gathered from the modules, written out. */
#ifndef COORDFS_FS_STATS_H
#define COORDFS_FS_STATS_H

struct fs_ctx;
struct strbuf;

/* The statistics JSON (coordfs(1), STATISTICS) into sb (emptied first), and
 * the same counters as Prometheus text. A document longer than max_len
 * lists only the nodes not up (at most STATS_NODES_LISTED_MAX of them,
 * "nodes_listed": "not_up"), which keeps the stats xattr within the
 * kernel's 64 KiB for clusters of 1,024 nodes with long host names. */
#define STATS_NODES_LISTED_MAX 64
void fs_stats_json(struct fs_ctx *fs, struct strbuf *sb, size_t max_len);
void fs_stats_metrics(struct fs_ctx *fs, struct strbuf *sb);

/* The statistics JSON as peers get it (GET /v1/stats): the same counters, without
 * the SOURCE path or the daemon's pid, which are for local users only. */
void fs_stats_json_peer(struct fs_ctx *fs, struct strbuf *sb);

#endif
