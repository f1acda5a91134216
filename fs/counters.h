/* SPDX-License-Identifier: MIT */
/*
 * One snapshot of every counter (types only): each module fills its part
 * (fs_peer_collect, fs_prep_collect, ...) and stats.c writes it out.
 */
#ifndef COORDFS_FS_COUNTERS_H
#define COORDFS_FS_COUNTERS_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cache/disk.h"

struct fs_stats {
	double uptime_s;
	struct cache_stats cache;
	struct cache_disk_stats disk; /* zeros without --disk-cache */
	uint64_t source_reads, source_bytes, source_errors;
	uint64_t source_requests, source_retries, source_skipped_keys;
	double source_latency_p50_ms, source_latency_p99_ms;
	uint64_t prefill_target_bytes, prefill_done_bytes;
	bool prefill_running;
	/* the other peer counters are remote/'s (remote_stats_json_value) */
	uint64_t peer_fallbacks; /* reads of another node's unit served from SOURCE */
	uint64_t prep_decodes, prep_shared, prep_errors, prep_staged_bytes, prep_refused, prep_jobs;
	uint64_t prep_jobs_reclaimed;
	uint64_t prep_decoded_bytes, prep_decoded_hits, prep_decoded_files, prep_decoded_refused;
	uint64_t prep_ahead, prep_ahead_wasted, prep_ahead_bytes;
	/* the prepared view's FUSE opens and reads (fs/prepview.c), and the
	 * decoded tier's share: its bound, and whether the daemon sized it */
	uint64_t prep_opens, prep_reads, prep_decoded_mem;
	bool prep_decoded_auto;
	uint64_t opens, reads, read_bytes, ioctls, lookups;
	uint64_t dataset_read_bytes; /* raw file reads + files read for decodes */
};

#endif
