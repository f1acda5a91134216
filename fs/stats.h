/* SPDX-License-Identifier: MIT */
/* One snapshot of every counter, gathered from the modules for the stats outputs. */
#ifndef COORDFS_FS_STATS_H
#define COORDFS_FS_STATS_H

#include <stdint.h>
#include <string.h>

#include "cache/cache.h"

struct fs_ctx;
struct strbuf;

struct fs_stats {
	double uptime_s;
	struct cache_stats cache;
	uint64_t source_reads, source_bytes, source_errors;
	uint64_t peer_fetches, peer_bytes, peer_errors, peer_served, peer_served_bytes;
	uint64_t prep_decodes, prep_shared, prep_errors, prep_staged_bytes, prep_refused, prep_jobs;
	uint64_t opens, reads, read_bytes;
};

void fs_stats_collect(struct fs_ctx *fs, struct fs_stats *s);
/* Filled by the peer and prepared-view glue. */
void fs_peer_collect(struct fs_ctx *fs, struct fs_stats *s);
void fs_peer_nodes_json(struct fs_ctx *fs, struct strbuf *sb);
void fs_peer_metrics(struct fs_ctx *fs, struct strbuf *sb);
void fs_prep_collect(struct fs_ctx *fs, struct fs_stats *s);

#endif
