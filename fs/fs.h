/* SPDX-License-Identifier: MIT */
/*
 * fs/: the FUSE front end. It owns the context of a mount and wires the
 * namespace, the MinIO cache, the peers (remote/) and the prepared view
 * (prep/) together. Only this module knows FUSE.
 *
 * Inode numbers: node i of the namespace is inode i + 1 (the root is
 * FUSE_ROOT_ID). Inodes of the prepared view have bit 62 set; see prepview.c.
 */
#ifndef COORDFS_FS_FS_H
#define COORDFS_FS_FS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/budget.h"
#include "fs/ns.h"
#include "fs/options.h"

struct cache;
struct cache_disk;
struct fs_cluster;
struct remote_server;
struct prep_view;
struct fs_source;
struct fs_prefill;
struct fs_disk_recent;
struct fs_fill_bounce;


struct fs_counters {
	_Atomic uint64_t source_reads, source_bytes, source_errors;
	_Atomic uint64_t opens, reads, read_bytes, ioctls, lookups;
	/* dataset bytes consumed: raw file reads, and the files decodes read */
	_Atomic uint64_t dataset_read_bytes;
	_Atomic uint64_t peer_fallbacks;
	/* How long a read of SOURCE takes here, and how much it reads: moving
	 * averages (1/8 weight per read) that tell a peer's slow answer from
	 * a slow SOURCE (fs/peer.c, remote_expect.source_ms). 0: no read yet. */
	_Atomic uint64_t source_avg_us, source_avg_bytes;
};

struct fs_handle;

struct fs_ctx {
	struct fs_options opt;
	/* open dataset files (ops.c): freed at unmount when the kernel sent
	 * no release for them (a session that ended with files open) */
	pthread_mutex_t handles_lock;
	struct fs_handle *handles;
	/* SOURCE descriptors that open handles hold (ops.c), and how many they
	 * may hold: half the daemon's open-file limit (main.c). Past it an
	 * open only checks its file and the handle's reads open their own, so
	 * that one user holding thousands of files open cannot use up the
	 * daemon's descriptors and fail every other user's opens (EMFILE). */
	_Atomic unsigned held_fds;
	unsigned held_fds_max;
	struct ns ns;
	struct fs_source *src; /* SOURCE: a directory or a bucket (fs/source.h) */
	struct cache *cache;
	struct cache_disk *disk; /* --disk-cache's tier, or NULL */
	struct fs_disk_recent *disk_recent; /* io.c's, with a tier */
	struct fs_fill_bounce *fill_bounce; /* io.c's, FS_FILL_BOUNCE of them */
	/* Transient memory outside the cache arena: FS_IO_MEM for I/O buffers
	 * (peer buffers, server responses, readahead windows), and the
	 * prepared view's --prep-mem (samples, decodes, its decoded tier) of
	 * its own. One budget for both let the view take the I/O allowance
	 * too, past its hard bound, and a user holding samples open starve
	 * everyone's I/O buffers. */
	struct budget mem;
	struct budget prep_mem;
	bool mem_ready;
	struct fs_counters ctr;
	bool no_open; /* the kernel sends no opens (FUSE_CAP_NO_OPEN_SUPPORT) */
	int report_fd; /* main.c: pipe to the waiting parent until ready, else -1 */
	/* Readers that missed the cache and wait on SOURCE or a peer: prefill
	 * yields to them. */
	_Atomic unsigned readers_missing;
	/* Reader threads waiting on SOURCE (or a peer) for a miss, at most
	 * FS_SOURCE_WAITERS (io.c): the other FUSE threads stay free for
	 * hits and metadata however slow SOURCE is. Zero-initialized: valid
	 * as PTHREAD_MUTEX_INITIALIZER / PTHREAD_COND_INITIALIZER. */
	pthread_mutex_t waiters_lock;
	pthread_cond_t waiters_cond;
	unsigned source_waiters;
	struct fs_prefill *prefill; /* NULL without --prefill */
	struct fs_prefill *warm;    /* prefill.h's fs_warm_start, or NULL */
	bool warm_walk;             /* its thread also walks the namespace */
	/* Set by that thread once the tier's index shows units: readdirplus
	 * then takes the attributes of the files it lists (attr.c). */
	atomic_bool list_attrs;
	struct timespec started;
	/* peers: the membership's generations (fs/cluster.h; NULL when single
	 * node), the server, the secret */
	struct fs_cluster *cluster;
	struct remote_server *server;
	int listen_fd;
	char *secret;
	/* prepared view (NULL when off) */
	struct prep_view *prep;
	/* its own session's private mount (prepmount.c), which MOUNTPOINT/NAME
	 * links to; NULL when the view is served in this session */
	const char *prep_link;
};

/*
 * FUSE threads of a session (main.c, prepmount.c), and how many of them may
 * wait on SOURCE at once (io.c): the rest always serve cache hits and
 * metadata. They hold up with the S3 source's connections (fs/source.h's
 * FS_S3_CONNECTIONS, FS_S3_PREFILL_PARALLEL): the waiters outnumber the
 * connections readers have beside --prefill, so a healthy store never makes
 * a reader wait for a place (checked in io.c).
 */
#define FS_FUSE_THREADS 64
#define FS_SOURCE_WAITERS 56

/* The budget's allowance for I/O buffers beside the prepared view's
 * --prep-mem (main.c): the readahead windows of files read around the
 * cache (readahead.c), whole peer units kept by open handles and disk-tier
 * units being read (io.c), and the peer server's replies for units the
 * cache does not hold (peer_server.c). Each of them takes what it can
 * without waiting, or falls back (a smaller read, a 503), so one user never
 * blocks the others for long. */
#define FS_IO_MEM (64ULL << 20)

static inline void fs_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* One more moving average: avg += (v - avg) / 8, the first value as is.
 * Relaxed and racy: a lost update only delays the average a little. */
static inline void fs_avg_add(_Atomic uint64_t *avg, uint64_t v)
{
	uint64_t a = atomic_load_explicit(avg, memory_order_relaxed);

	atomic_store_explicit(avg, a ? a - a / 8 + v / 8 : (v ? v : 1), memory_order_relaxed);
}

/* A read of len bytes from SOURCE took us microseconds (io.c). */
static inline void fs_source_timed(struct fs_ctx *fs, uint64_t us, size_t len)
{
	fs_avg_add(&fs->ctr.source_avg_us, us);
	fs_avg_add(&fs->ctr.source_avg_bytes, len);
}

#endif
