/* SPDX-License-Identifier: MIT */
/*
 * The statistics, as JSON (the user.coordfs.stats xattr, the peer server's
 * /v1/stats) and as Prometheus text. The JSON is built with jansson, so it
 * is always well-formed and valid UTF-8 whatever bytes SOURCE's path holds.
 */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/strbuf.h"
#include "common/utf8.h"
#include "fs/counters.h"
#include "fs/fs.h"
#include "fs/cluster.h"
#include "fs/membership.h"
#include "fs/peer.h"
#include "fs/prefill.h"
#include "fs/prepview.h"
#include "fs/source.h"
#include "fs/stats.h"
#include "remote/remote.h"

static uint64_t ld(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* The source's own counters and prefill's progress. */
static void fs_source_collect(struct fs_ctx *fs, struct fs_stats *s)
{
	struct fs_source_stats ss;
	struct fs_prefill_stats ps;

	fs->src->ops->get_stats(fs->src, &ss);
	s->source_requests = ss.requests;
	s->source_retries = ss.retries;
	s->source_skipped_keys = ss.skipped_keys;
	s->source_latency_p50_ms = ss.latency_p50_ms;
	s->source_latency_p99_ms = ss.latency_p99_ms;
	fs_prefill_get_stats(fs, &ps);
	s->prefill_target_bytes = ps.target_bytes;
	s->prefill_done_bytes = ps.done_bytes;
	s->prefill_running = ps.running;
}

static void fs_stats_collect(struct fs_ctx *fs, struct fs_stats *s)
{
	struct timespec now;

	memset(s, 0, sizeof(*s));
	clock_gettime(CLOCK_MONOTONIC, &now);
	s->uptime_s = (double)(now.tv_sec - fs->started.tv_sec) +
		      (double)(now.tv_nsec - fs->started.tv_nsec) / 1e9;
	cache_get_stats(fs->cache, &s->cache);
	if (fs->disk)
		cache_disk_get_stats(fs->disk, &s->disk);
	s->source_reads = ld(&fs->ctr.source_reads);
	s->source_bytes = ld(&fs->ctr.source_bytes);
	s->source_errors = ld(&fs->ctr.source_errors);
	fs_source_collect(fs, s);
	s->opens = ld(&fs->ctr.opens);
	s->ioctls = ld(&fs->ctr.ioctls);
	s->lookups = ld(&fs->ctr.lookups);
	s->reads = ld(&fs->ctr.reads);
	s->read_bytes = ld(&fs->ctr.read_bytes);
	s->dataset_read_bytes = ld(&fs->ctr.dataset_read_bytes);
	fs_peer_collect(fs, s);
	fs_prep_collect(fs, s);
}

static json_t *num(uint64_t v)
{
	return json_integer((json_int_t)v);
}

/* Set key to v (taking it); false when v is NULL or out of memory. */
static bool put(json_t *obj, const char *key, json_t *v)
{
	return v && json_object_set_new(obj, key, v) == 0;
}

/* The disk tier's counters, for the JSON (cache.disk) and /metrics alike. */
static const struct {
	const char *name, *type, *help;
	size_t off;
} disk_fields[] = {
#define DISK_FIELD(f, type, help) {#f, type, help, offsetof(struct cache_disk_stats, f)}
	DISK_FIELD(capacity_bytes, "gauge", "Disk tier limit."),
	DISK_FIELD(used_bytes, "gauge", "Disk tier bytes written or queued (data, index)."),
	DISK_FIELD(items, "gauge", "Units held by the disk tier."),
	DISK_FIELD(hits, "counter", "Unit reads served from the disk tier."),
	DISK_FIELD(hit_bytes, "counter", "Bytes read from the disk tier."),
	DISK_FIELD(admitted, "counter", "Units written to the disk tier."),
	DISK_FIELD(refused, "counter", "Units refused by the disk tier: limit or file system full."),
	DISK_FIELD(dropped_stale, "counter", "Disk tier units of another snapshot, dropped."),
	DISK_FIELD(dropped_corrupt, "counter", "Disk tier units failing their checksum, dropped."),
	DISK_FIELD(disabled, "gauge", "1 once an I/O error turned the disk tier off."),
	DISK_FIELD(queued, "gauge", "Units waiting to be written to the disk tier."),
	DISK_FIELD(direct, "gauge",
		   "1 while disk tier reads bypass the page cache (O_DIRECT); 0: buffered, pages dropped."),
	DISK_FIELD(dropped_cut, "counter",
		   "Disk tier units recorded after a damaged index record, dropped at load."),
#undef DISK_FIELD
};

static uint64_t disk_field(const struct cache_disk_stats *d, size_t i)
{
	return *(const uint64_t *)((const char *)d + disk_fields[i].off);
}

static json_t *disk_json(const struct cache_disk_stats *d)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < sizeof(disk_fields) / sizeof(disk_fields[0]); i++)
		if (!put(o, disk_fields[i].name, num(disk_field(d, i)))) {
			json_decref(o);
			return NULL;
		}
	return o;
}

/* local: the xattr's JSON, with the SOURCE path and pid; else a peer's.
 * summary: the nodes not up only (remote_stats_json_summary). */
static json_t *stats_tree(struct fs_ctx *fs, bool local, bool summary)
{
	struct fs_stats s;
	json_t *root = json_object(), *cache = json_object(), *source = json_object();
	/* remote/'s counters of the client and the server (zeros without peers) */
	struct fs_gen *g = fs_gen_get(fs);
	struct remote_client *client = g ? g->client : NULL;
	struct fs_cluster_stats ms;
	json_t *peers = summary ? remote_stats_json_summary(client, fs->server,
							     STATS_NODES_LISTED_MAX)
				: remote_stats_json_value(client, fs->server);
	json_t *prep = json_object(), *fuse = json_object();
	json_t *names = json_object(), *prefill = json_object(), *latency = json_object();
	const struct ns *ns = &fs->ns;
	bool ok;

	fs_stats_collect(fs, &s);
	ok = root && cache && source && peers && prep && fuse && names && prefill && latency;
	ok = ok && put(root, "version", json_integer(1)) &&
	     /* milliseconds, printed without binary-fraction noise */
	     put(root, "uptime_s", json_real(round(s.uptime_s * 1000.0) / 1000.0)) &&
	     (!local || (put(root, "pid", json_integer((json_int_t)getpid())) &&
			 put(root, "source_dir", utf8_json_string(fs->opt.source)))) &&
	     put(root, "files", num(fs->ns.nfiles)) &&
	     put(root, "dataset_bytes", num(atomic_load(&fs->ns.total_bytes))) &&
	     put(root, "dataset_read_bytes", num(s.dataset_read_bytes));
	ok = ok && put(cache, "capacity_bytes", num(s.cache.capacity_bytes)) &&
	     put(cache, "used_bytes", num(s.cache.used_bytes)) &&
	     put(cache, "items", num(s.cache.items)) && put(cache, "hits", num(s.cache.hits)) &&
	     put(cache, "misses", num(s.cache.misses)) &&
	     put(cache, "hit_bytes", num(s.cache.hit_bytes)) &&
	     put(cache, "miss_bytes", num(s.cache.miss_bytes)) &&
	     put(cache, "admitted", num(s.cache.admitted)) &&
	     put(cache, "refused", num(s.cache.refused)) &&
	     put(cache, "fill_errors", num(s.cache.fill_errors)) &&
	     put(cache, "failed_units", num(s.cache.failed_units)) &&
	     put(cache, "chunk_bytes", num(fs->ns.chunk_size)) &&
	     put(cache, "disk", disk_json(&s.disk));
	ok = ok && put(source, "reads", num(s.source_reads)) &&
	     put(source, "bytes", num(s.source_bytes)) &&
	     put(source, "errors", num(s.source_errors)) &&
	     put(source, "requests", num(s.source_requests)) &&
	     put(source, "retries", num(s.source_retries)) &&
	     put(latency, "p50", json_real(round(s.source_latency_p50_ms * 1000.0) / 1000.0)) &&
	     put(latency, "p99", json_real(round(s.source_latency_p99_ms * 1000.0) / 1000.0)) &&
	     put(source, "latency_ms", json_incref(latency)) &&
	     put(source, "skipped_keys", num(s.source_skipped_keys)) &&
	     put(source, "kind", json_string(fs->src->ops->kind));
	ok = ok && put(prefill, "target_bytes", num(s.prefill_target_bytes)) &&
	     put(prefill, "done_bytes", num(s.prefill_done_bytes)) &&
	     put(prefill, "running", json_boolean(s.prefill_running));
	fs_cluster_get_stats(fs, &ms);
	ok = ok && put(peers, "fallbacks", num(s.peer_fallbacks)) &&
	     put(peers, "node", json_integer(g && g->node != FS_NOT_A_MEMBER ? (json_int_t)g->node
									   : -1));
	fs_gen_put(g);
	/* The node list of now (fs/cluster.c): generation 1 is the mount's. */
	json_t *members = ok ? json_object() : NULL;
	/* root owns members from here, filled or not */
	ok = ok && put(root, "membership", members) &&
	     put(members, "source", json_string(fs_membership_source(fs->opt.peers))) &&
	     put(members, "generation", num(ms.generation)) &&
	     put(members, "changed_at", json_integer(ms.changed_at)) &&
	     put(members, "joined", num(ms.joined)) && put(members, "left", num(ms.left)) &&
	     put(members, "handoffs", num(ms.handoffs)) &&
	     put(members, "handoff_misses", num(ms.handoff_misses)) &&
	     put(members, "refresh_failures", num(ms.refresh_failures)) &&
	     put(members, "member", json_boolean(!fs->cluster || ms.member));
	ok = ok && put(prep, "decodes", num(s.prep_decodes)) &&
	     put(prep, "shared", num(s.prep_shared)) && put(prep, "errors", num(s.prep_errors)) &&
	     put(prep, "staged_bytes", num(s.prep_staged_bytes)) &&
	     put(prep, "refused", num(s.prep_refused)) && put(prep, "jobs", num(s.prep_jobs)) &&
	     put(prep, "jobs_reclaimed", num(s.prep_jobs_reclaimed)) &&
	     put(prep, "decoded_bytes", num(s.prep_decoded_bytes)) &&
	     put(prep, "decoded_hits", num(s.prep_decoded_hits)) &&
	     put(prep, "decoded_files", num(s.prep_decoded_files)) &&
	     put(prep, "decoded_refused", num(s.prep_decoded_refused)) &&
	     put(prep, "ahead", num(s.prep_ahead)) &&
	     put(prep, "ahead_wasted", num(s.prep_ahead_wasted)) &&
	     put(prep, "ahead_bytes", num(s.prep_ahead_bytes)) &&
	     put(prep, "opens", num(s.prep_opens)) && put(prep, "reads", num(s.prep_reads)) &&
	     put(prep, "decoded_mem", num(s.prep_decoded_mem)) &&
	     put(prep, "decoded_auto", json_boolean(s.prep_decoded_auto));
	/* kernel_cache: the kernel may serve reads from its page cache, which
	 * then never reach these counters. */
	ok = ok && put(fuse, "opens", num(s.opens)) && put(fuse, "reads", num(s.reads)) &&
	     put(fuse, "read_bytes", num(s.read_bytes)) && put(fuse, "ioctls", num(s.ioctls)) &&
	     put(fuse, "lookups", num(s.lookups)) &&
	     put(fuse, "kernel_cache", json_boolean(!fs->opt.no_kernel_cache));
	/* What the scan at mount indexed, and what it left out (logged then). */
	/* attrs_known: files whose attributes (size) were taken, at their
	 * first lookup; dataset_bytes sums those, so it is the whole dataset's
	 * size once every file has been looked up (after one pass). */
	ok = ok && put(names, "files", num(ns->nfiles)) && put(names, "dirs", num(ns->ndirs)) &&
	     put(names, "attrs_known", num(atomic_load(&ns->known_files))) &&
	     put(names, "listing_attrs", json_boolean(atomic_load(&fs->list_attrs))) &&
	     put(names, "hard_links_shared", num(atomic_load(&ns->shared_files))) &&
	     put(names, "hard_links_shared_bytes", num(atomic_load(&ns->shared_bytes))) &&
	     put(names, "skipped",
		 num(ns->skipped_special + ns->skipped_long + ns->skipped_unreadable)) &&
	     put(names, "skipped_special", num(ns->skipped_special)) &&
	     put(names, "skipped_long_paths", num(ns->skipped_long)) &&
	     put(names, "skipped_unreadable", num(ns->skipped_unreadable));
	/* The sub-objects go in last so that a failure above frees them too. */
	ok = ok && put(root, "cache", json_incref(cache)) &&
	     put(root, "source", json_incref(source)) &&
	     put(root, "prefill", json_incref(prefill)) && put(root, "peers", json_incref(peers)) &&
	     put(root, "prep", json_incref(prep)) && put(root, "fuse", json_incref(fuse)) &&
	     put(root, "namespace", json_incref(names));
	json_decref(cache);
	json_decref(source);
	json_decref(peers);
	json_decref(prep);
	json_decref(fuse);
	json_decref(names);
	json_decref(prefill);
	json_decref(latency);
	if (!ok) {
		json_decref(root);
		return NULL;
	}
	return root;
}

static void stats_json(struct fs_ctx *fs, struct strbuf *sb, bool local, bool summary)
{
	/* Compact, keys in insertion order (jansson keeps it), reals to 1 ms. */
	strbuf_append_json(sb, stats_tree(fs, local, summary),
			   JSON_COMPACT | JSON_REAL_PRECISION(15));
}

void fs_stats_json(struct fs_ctx *fs, struct strbuf *sb, size_t max_len)
{
	strbuf_reset(sb);
	stats_json(fs, sb, true, false);
	/* A large cluster with long host names: the nodes that are up go,
	 * the whole list stays on the peer port's GET /v1/stats. */
	if (!sb->failed && sb->len > max_len) {
		strbuf_reset(sb);
		stats_json(fs, sb, true, true);
	}
}

void fs_stats_json_peer(struct fs_ctx *fs, struct strbuf *sb)
{
	stats_json(fs, sb, false, false);
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
	struct fs_cluster_stats ms;

	fs_cluster_get_stats(fs, &ms);
	metric(sb, "membership_generation", "gauge",
	       "Node lists in effect since mount (1 at mount; 0 without peers).",
	       (double)ms.generation);
	metric(sb, "membership_joined_total", "counter", "Nodes that joined while mounted.",
	       (double)ms.joined);
	metric(sb, "membership_left_total", "counter", "Nodes that left while mounted.",
	       (double)ms.left);
	metric(sb, "membership_handoffs_total", "counter",
	       "Units this node got from their previous owner after a change.",
	       (double)ms.handoffs);
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
	metric(sb, "cache_fill_errors_total", "counter", "Fills from SOURCE that failed.",
	       (double)s.cache.fill_errors);
	for (size_t i = 0; i < sizeof(disk_fields) / sizeof(disk_fields[0]); i++) {
		char name[64];
		bool counter = !strcmp(disk_fields[i].type, "counter");
		snprintf(name, sizeof(name), "disk_%s%s", disk_fields[i].name, counter ? "_total" : "");
		metric(sb, name, disk_fields[i].type, disk_fields[i].help,
		       (double)disk_field(&s.disk, i));
	}
	metric(sb, "source_reads_total", "counter", "Reads of SOURCE.", (double)s.source_reads);
	metric(sb, "source_bytes_total", "counter", "Bytes read from SOURCE.",
	       (double)s.source_bytes);
	metric(sb, "source_errors_total", "counter", "SOURCE files changed or unreadable.",
	       (double)s.source_errors);
	metric(sb, "source_requests_total", "counter", "Requests to SOURCE, retries included.",
	       (double)s.source_requests);
	metric(sb, "source_retries_total", "counter", "SOURCE requests repeated after a failure.",
	       (double)s.source_retries);
	metric(sb, "source_latency_p50_ms", "gauge", "Median SOURCE request latency.",
	       s.source_latency_p50_ms);
	metric(sb, "source_latency_p99_ms", "gauge", "99th percentile SOURCE request latency.",
	       s.source_latency_p99_ms);
	metric(sb, "source_skipped_keys", "gauge", "Listed objects that cannot be paths.",
	       (double)s.source_skipped_keys);
	metric(sb, "prefill_target_bytes", "gauge", "Bytes prefill means to fetch.",
	       (double)s.prefill_target_bytes);
	metric(sb, "prefill_done_bytes", "gauge", "Bytes prefill has admitted.",
	       (double)s.prefill_done_bytes);
	metric(sb, "prefill_running", "gauge", "1 while prefill runs.", s.prefill_running ? 1 : 0);
	fs_peer_metrics(fs, sb);
	metric(sb, "peer_fallbacks_total", "counter",
	       "Reads of another node's units served from SOURCE instead.",
	       (double)s.peer_fallbacks);
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
	metric(sb, "prep_decoded_bytes", "gauge", "Bytes of the decoded tier.",
	       (double)s.prep_decoded_bytes);
	metric(sb, "prep_decoded_hits_total", "counter",
	       "Prepared samples resampled from the decoded tier.", (double)s.prep_decoded_hits);
	metric(sb, "prep_decoded_files", "gauge", "Images in the decoded tier.",
	       (double)s.prep_decoded_files);
	metric(sb, "prep_decoded_refused_total", "counter",
	       "Decodes not admitted to the decoded tier: its share was full.",
	       (double)s.prep_decoded_refused);
	metric(sb, "prep_ahead_total", "counter", "Samples decoded ahead and then opened.",
	       (double)s.prep_ahead);
	metric(sb, "prep_ahead_wasted_total", "counter",
	       "Samples decoded ahead and dropped unread.", (double)s.prep_ahead_wasted);
	metric(sb, "fuse_opens_total", "counter", "Files opened.", (double)s.opens);
	metric(sb, "fuse_reads_total", "counter", "Read requests.", (double)s.reads);
	metric(sb, "fuse_ioctls_total", "counter", "Ioctl requests (none is answered).",
	       (double)s.ioctls);
	metric(sb, "fuse_lookups_total", "counter", "Name lookups in the dataset's tree.",
	       (double)s.lookups);
	metric(sb, "fuse_read_bytes_total", "counter", "Bytes returned to readers.",
	       (double)s.read_bytes);
}
