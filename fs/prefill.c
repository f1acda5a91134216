/* SPDX-License-Identifier: MIT */
/*
 * --prefill (prefill.h). A coordinator thread sizes the job (the bytes of
 * the units this node owns and lacks, capped by the cache's free room (or
 * the disk tier's, when larger: memory first, then disk),
 * once the workers have taken every file's attributes, which the mount
 * does not), then runs the workers: each takes the next file from a shared cursor and
 * admits its owned units with cache_prefill, which never fetches a unit
 * that has no room. Before each unit a worker waits while readers are
 * missing the cache (fs->readers_missing): any reader for a source whose
 * requests queue (a disk), so readers' fetches never queue behind
 * prefill's; as many readers as the source has room for beside prefill's
 * requests (prefill_yield_readers) for one that serves many requests at
 * once (S3), where waiting for every reader would starve the prefill
 * whenever a loader's workers keep missing.
 */
#include "fs/prefill.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "cache/disk.h"
#include "common/log.h"
#include "common/size.h"
#include "fs/fs.h"
#include "fs/io.h"
#include "fs/peer.h"
#include "fs/source.h"

/* How long a worker sleeps before looking again for waiting readers. */
#define YIELD_NS (2 * 1000 * 1000)
#define MAX_THREADS 64

struct fs_prefill {
	struct fs_ctx *fs;
	unsigned nthreads;
	pthread_t coordinator;
	_Atomic bool stop;
	_Atomic uint32_t cursor;      /* next node to look at */
	_Atomic uint32_t attr_cursor; /* next node whose attributes to take */
	_Atomic bool full;	 /* no room left for any unit */
	_Atomic uint64_t target, done;
	_Atomic bool running;
};

static void sleep_ns(long ns)
{
	struct timespec ts = {0, ns};

	nanosleep(&ts, NULL);
}

/* Room left in the cache (an estimate: units are aligned inside it). */
static uint64_t cache_room(struct fs_ctx *fs)
{
	struct cache_stats st;

	cache_get_stats(fs->cache, &st);
	return st.used_bytes < st.capacity_bytes ? st.capacity_bytes - st.used_bytes : 0;
}

/* Room left in the disk tier (0 without one). */
static uint64_t disk_room(struct fs_ctx *fs)
{
	struct cache_disk_stats st;

	if (!fs->disk)
		return 0;
	cache_disk_get_stats(fs->disk, &st);
	return st.used_bytes < st.capacity_bytes ? st.capacity_bytes - st.used_bytes : 0;
}

/* Unit k into the disk tier when memory is full: waits while the tier's
 * writer is behind. 0 (queued), -EEXIST/-EFBIG (skip it), or -ENOSPC/-EIO
 * (the tier takes nothing more). */
static int prefill_disk(struct fs_prefill *p, uint32_t node, uint32_t k)
{
	int rc;

	while ((rc = fs_prefill_disk_unit(p->fs, node, k)) == -EBUSY && !atomic_load(&p->stop))
		sleep_ns(5 * YIELD_NS);
	return rc == -EIO || rc == -ENOSPC ? rc : rc == 0 ? 0 : -EEXIST;
}

/* Wait while readers miss the cache (as many as the source's
 * prefill_yield_readers, at least 1): false once asked to stop. */
static bool yield_to_readers(struct fs_prefill *p)
{
	unsigned yield_at = p->fs->src->ops->prefill_yield_readers;

	if (yield_at < 1)
		yield_at = 1;
	while (!atomic_load(&p->stop) &&
	       atomic_load_explicit(&p->fs->readers_missing, memory_order_relaxed) >= yield_at)
		sleep_ns(YIELD_NS);
	return !atomic_load(&p->stop);
}

static void prefill_file(struct fs_prefill *p, uint32_t node)
{
	struct fs_ctx *fs = p->fs;
	const struct ns_node *n = &fs->ns.nodes[node];

	for (uint32_t k = 0; k < n->count && !atomic_load(&p->stop); k++) {
		uint64_t len = ns_unit_len(&fs->ns, node, k);
		if (cache_holds(fs->cache, (uint64_t)n->first + k) || !fs_peer_owns(fs, node, k))
			continue;
		uint64_t room = cache_room(fs);
		/* Memory first; once it is full, the disk tier (coordfs(1)). */
		bool to_disk = len > room;
		if (to_disk && !fs->disk) {
			if (room == 0) {
				atomic_store(&p->full, true);
				return;
			}
			continue; /* a smaller unit may still fit */
		}
		if (!yield_to_readers(p))
			return;
		int rc = to_disk ? -ENOSPC : fs_prefill_unit(fs, node, k);
		/* Memory may have filled since room was read (other workers). */
		if (rc == -ENOSPC && fs->disk) {
			to_disk = true;
			rc = prefill_disk(p, node, k);
		}
		if (rc == -ENOSPC || rc == -EIO) {
			if (to_disk) {
				atomic_store(&p->full, true);
				return;
			}
			continue;
		}
		if (rc == 0)
			atomic_fetch_add_explicit(&p->done, len, memory_order_relaxed);
	}
}

static void *worker(void *arg)
{
	struct fs_prefill *p = arg;
	struct fs_ctx *fs = p->fs;

	while (!atomic_load(&p->stop) && !atomic_load(&p->full)) {
		uint32_t node = atomic_fetch_add(&p->cursor, 1);
		if (node >= fs->ns.nnodes)
			break;
		if (ns_is_reg(&fs->ns, node) && ns_known(&fs->ns, node))
			prefill_file(p, node);
	}
	return NULL;
}

/* The mount took names only: take every file's attributes (a stat each,
 * in parallel, as latency-bound as a cold tree walk) so the job can be
 * sized. A file gone or changed since mount is left to its readers. */
static void *attrs_worker(void *arg)
{
	struct fs_prefill *p = arg;
	struct fs_ctx *fs = p->fs;

	while (!atomic_load(&p->stop)) {
		uint32_t node = atomic_fetch_add(&p->attr_cursor, 1);
		if (node >= fs->ns.nnodes)
			break;
		if (ns_is_reg(&fs->ns, node))
			(void)fs_node_attrs(fs, node);
	}
	return NULL;
}

/* Run fn on p->nthreads threads (on this one when none can start). */
static void run_threads(struct fs_prefill *p, void *(*fn)(void *))
{
	pthread_t tids[MAX_THREADS];
	unsigned started = 0;

	for (unsigned t = 0; t < p->nthreads; t++) {
		if (pthread_create(&tids[t], NULL, fn, p) != 0)
			break;
		started++;
	}
	if (started == 0)
		fn(p);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
}

static void *coordinate(void *arg)
{
	struct fs_prefill *p = arg;
	struct fs_ctx *fs = p->fs;
	uint64_t owned = 0;
	struct timespec t0, t1;
	char human[32];

	clock_gettime(CLOCK_MONOTONIC, &t0);
	run_threads(p, attrs_worker);
	for (uint32_t node = 0; node < fs->ns.nnodes && !atomic_load(&p->stop); node++) {
		const struct ns_node *n = &fs->ns.nodes[node];
		if (!ns_is_reg(&fs->ns, node) || !ns_known(&fs->ns, node))
			continue;
		for (uint32_t k = 0; k < n->count; k++)
			if (!cache_holds(fs->cache, (uint64_t)n->first + k) &&
			    fs_peer_owns(fs, node, k))
				owned += ns_unit_len(&fs->ns, node, k);
	}
	/* Inclusive tiers: what memory takes goes to disk too. */
	uint64_t room = cache_room(fs), droom = disk_room(fs);
	if (droom > room)
		room = droom;
	atomic_store(&p->target, owned < room ? owned : room);
	log_info("prefill: %s to fetch with %u threads",
		 size_format(atomic_load(&p->target), human, sizeof(human)), p->nthreads);
	run_threads(p, worker);
	/* Ended by itself: what it fetched is all it will (units bigger than
	 * the room left, files gone since mount), so the counters end equal
	 * and the stats do not show a finished prefill as cut short. */
	if (!atomic_load(&p->stop))
		atomic_store(&p->target, atomic_load(&p->done));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	log_msg(LOG_NOTICE, "prefill %s: %s in %.1f s", atomic_load(&p->stop) ? "stopped" : "done",
		size_format(atomic_load(&p->done), human, sizeof(human)),
		(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	atomic_store(&p->running, false);
	return NULL;
}

/* Start fn on a thread of its own with a fresh state, stored at *slot. */
static int start_state(struct fs_ctx *fs, unsigned nthreads, void *(*fn)(void *),
		       struct fs_prefill **slot)
{
	struct fs_prefill *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->fs = fs;
	p->nthreads = nthreads < 1 ? 1 : nthreads > MAX_THREADS ? MAX_THREADS : nthreads;
	atomic_store(&p->running, true);
	int rc = pthread_create(&p->coordinator, NULL, fn, p);
	if (rc != 0) {
		free(p);
		return -rc;
	}
	*slot = p;
	return 0;
}

static void stop_state(struct fs_prefill **slot)
{
	struct fs_prefill *p = *slot;

	if (!p)
		return;
	atomic_store(&p->stop, true);
	pthread_join(p->coordinator, NULL);
	*slot = NULL;
	free(p);
}

int fs_prefill_start(struct fs_ctx *fs, unsigned nthreads)
{
	return start_state(fs, nthreads, coordinate, &fs->prefill);
}

void fs_prefill_stop(struct fs_ctx *fs)
{
	stop_state(&fs->prefill);
}

void fs_prefill_get_stats(struct fs_ctx *fs, struct fs_prefill_stats *out)
{
	struct fs_prefill *p = fs->prefill;

	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	out->target_bytes = atomic_load_explicit(&p->target, memory_order_relaxed);
	out->done_bytes = atomic_load_explicit(&p->done, memory_order_relaxed);
	out->running = atomic_load_explicit(&p->running, memory_order_relaxed);
}

/* fs_warm_start's thread: a prefill state of its own, on one thread. */
static void *warm_attrs(void *arg)
{
	struct fs_prefill *p = arg;
	struct fs_ctx *fs = p->fs;

	/* Waits for the tier's index: an empty tier (a first mount) leaves
	 * every file's attributes to its first lookup. */
	if (cache_disk_wait_loaded(fs->disk) == 0)
		return NULL;
	atomic_store(&fs->list_attrs, true);
	if (!fs->warm_walk)
		return NULL;
	for (uint32_t node = 0; node < fs->ns.nnodes && !atomic_load(&p->stop); node++) {
		if (!ns_is_reg(&fs->ns, node) || ns_known(&fs->ns, node))
			continue;
		if (!yield_to_readers(p))
			break;
		(void)fs_node_attrs(fs, node); /* a file gone or changed is its readers' */
	}
	return NULL;
}

int fs_warm_start(struct fs_ctx *fs, bool walk)
{
	if (!fs->disk || !fs->src->ops->stat)
		return 0;
	fs->warm_walk = walk;
	return start_state(fs, 1, warm_attrs, &fs->warm);
}

void fs_warm_stop(struct fs_ctx *fs)
{
	stop_state(&fs->warm);
}
