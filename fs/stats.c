/* SPDX-License-Identifier: MIT */
/* The statistics of SPEC §4, as JSON (xattr, peer /v1/stats) and Prometheus text. */
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/strbuf.h"
#include "fs/fs.h"
#include "fs/stats.h"

static uint64_t ld(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

void fs_stats_collect(struct fs_ctx *fs, struct fs_stats *s)
{
	struct timespec now;

	memset(s, 0, sizeof(*s));
	clock_gettime(CLOCK_MONOTONIC, &now);
	s->uptime_s = (double)(now.tv_sec - fs->started.tv_sec) +
		      (double)(now.tv_nsec - fs->started.tv_nsec) / 1e9;
	cache_get_stats(fs->cache, &s->cache);
	s->source_reads = ld(&fs->ctr.source_reads);
	s->source_bytes = ld(&fs->ctr.source_bytes);
	s->source_errors = ld(&fs->ctr.source_errors);
	s->opens = ld(&fs->ctr.opens);
	s->reads = ld(&fs->ctr.reads);
	s->read_bytes = ld(&fs->ctr.read_bytes);
	fs_peer_collect(fs, s);
	fs_prep_collect(fs, s);
}

void fs_stats_json(struct fs_ctx *fs, struct strbuf *sb)
{
	struct fs_stats s;

	fs_stats_collect(fs, &s);
	strbuf_printf(sb, "{\"version\":1,\"uptime_s\":%.3f,\"pid\":%ld,", s.uptime_s, (long)getpid());
	strbuf_puts(sb, "\"source_dir\":");
	strbuf_json_string(sb, fs->opt.source);
	strbuf_printf(sb, ",\"files\":%u,\"dataset_bytes\":%llu,", fs->ns.nfiles,
		      (unsigned long long)fs->ns.total_bytes);
	strbuf_printf(sb,
		      "\"cache\":{\"capacity_bytes\":%llu,\"used_bytes\":%llu,\"items\":%llu,"
		      "\"hits\":%llu,\"misses\":%llu,\"hit_bytes\":%llu,\"miss_bytes\":%llu,"
		      "\"admitted\":%llu,\"refused\":%llu,\"chunk_bytes\":%llu},",
		      (unsigned long long)s.cache.capacity_bytes,
		      (unsigned long long)s.cache.used_bytes, (unsigned long long)s.cache.items,
		      (unsigned long long)s.cache.hits, (unsigned long long)s.cache.misses,
		      (unsigned long long)s.cache.hit_bytes, (unsigned long long)s.cache.miss_bytes,
		      (unsigned long long)s.cache.admitted, (unsigned long long)s.cache.refused,
		      (unsigned long long)fs->ns.chunk_size);
	strbuf_printf(sb, "\"source\":{\"reads\":%llu,\"bytes\":%llu,\"errors\":%llu},",
		      (unsigned long long)s.source_reads, (unsigned long long)s.source_bytes,
		      (unsigned long long)s.source_errors);
	strbuf_printf(sb,
		      "\"peers\":{\"fetches\":%llu,\"bytes\":%llu,\"errors\":%llu,\"served\":%llu,"
		      "\"served_bytes\":%llu,\"node\":%d,\"nodes\":",
		      (unsigned long long)s.peer_fetches, (unsigned long long)s.peer_bytes,
		      (unsigned long long)s.peer_errors, (unsigned long long)s.peer_served,
		      (unsigned long long)s.peer_served_bytes, fs->peers ? (int)fs->node : -1);
	fs_peer_nodes_json(fs, sb);
	strbuf_printf(sb, "},\"prep\":{\"decodes\":%llu,\"shared\":%llu,\"errors\":%llu,"
			  "\"staged_bytes\":%llu,\"refused\":%llu,\"jobs\":%llu},",
		      (unsigned long long)s.prep_decodes, (unsigned long long)s.prep_shared,
		      (unsigned long long)s.prep_errors, (unsigned long long)s.prep_staged_bytes,
		      (unsigned long long)s.prep_refused, (unsigned long long)s.prep_jobs);
	strbuf_printf(sb, "\"fuse\":{\"opens\":%llu,\"reads\":%llu,\"read_bytes\":%llu}}",
		      (unsigned long long)s.opens, (unsigned long long)s.reads,
		      (unsigned long long)s.read_bytes);
}

static void metric(struct strbuf *sb, const char *name, const char *type, const char *help,
		   double v)
{
	strbuf_printf(sb, "# HELP coordfs_%s %s\n# TYPE coordfs_%s %s\n", name, help, name, type);
	if (v == (double)(uint64_t)v)
		strbuf_printf(sb, "coordfs_%s %llu\n", name, (unsigned long long)v);
	else
		strbuf_printf(sb, "coordfs_%s %.3f\n", name, v);
}

void fs_stats_metrics(struct fs_ctx *fs, struct strbuf *sb)
{
	struct fs_stats s;

	fs_stats_collect(fs, &s);
	metric(sb, "uptime_seconds", "gauge", "Seconds since mount.", s.uptime_s);
	metric(sb, "cache_capacity_bytes", "gauge", "Cache budget.", (double)s.cache.capacity_bytes);
	metric(sb, "cache_used_bytes", "gauge", "Cache bytes in use.", (double)s.cache.used_bytes);
	metric(sb, "cache_items", "gauge", "Units held.", (double)s.cache.items);
	metric(sb, "cache_hits_total", "counter", "Unit reads served from memory.",
	       (double)s.cache.hits);
	metric(sb, "cache_misses_total", "counter", "Unit reads not held in memory.",
	       (double)s.cache.misses);
	metric(sb, "cache_hit_bytes_total", "counter", "Bytes served from memory.",
	       (double)s.cache.hit_bytes);
	metric(sb, "cache_miss_bytes_total", "counter", "Bytes read around the cache.",
	       (double)s.cache.miss_bytes);
	metric(sb, "cache_admitted_total", "counter", "Units admitted.", (double)s.cache.admitted);
	metric(sb, "cache_refused_total", "counter", "Units refused: budget full.",
	       (double)s.cache.refused);
	metric(sb, "source_reads_total", "counter", "Reads of SOURCE.", (double)s.source_reads);
	metric(sb, "source_bytes_total", "counter", "Bytes read from SOURCE.",
	       (double)s.source_bytes);
	metric(sb, "source_errors_total", "counter", "SOURCE files changed or unreadable.",
	       (double)s.source_errors);
	fs_peer_metrics(fs, sb);
	metric(sb, "prep_decodes_total", "counter", "Images decoded.", (double)s.prep_decodes);
	metric(sb, "prep_shared_total", "counter", "Prepared reads served by a shared decode.",
	       (double)s.prep_shared);
	metric(sb, "prep_errors_total", "counter", "Images that failed to decode.",
	       (double)s.prep_errors);
	metric(sb, "prep_staged_bytes", "gauge", "Prepared samples held in memory.",
	       (double)s.prep_staged_bytes);
	metric(sb, "prep_refused_total", "counter",
	       "Prepared opens refused: memory budget full or job table full.",
	       (double)s.prep_refused);
	metric(sb, "fuse_opens_total", "counter", "Files opened.", (double)s.opens);
	metric(sb, "fuse_reads_total", "counter", "Read requests.", (double)s.reads);
	metric(sb, "fuse_read_bytes_total", "counter", "Bytes returned to readers.",
	       (double)s.read_bytes);
}
