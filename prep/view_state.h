/* SPDX-License-Identifier: MIT */
/*
 * The prepared view's state (struct prep_view) and the records it keeps
 * (samples, jobs), shared by the files of the staging engine: table.c,
 * view.c, tier.c, ahead.c and jobs.c. Types and three inline helpers only.
 *
 * Locking: one mutex (view->lock) guards the table, the FIFO, the queue, the
 * job table and every sample's state; pid_lock guards the pid cache only and
 * is never held together with view->lock. No lock is held across source
 * I/O, a decode, or /proc reads. Sample reference counts are _Atomic: they
 * are raised under view->lock (lookups) and may drop anywhere; the one that
 * drops the last reference frees the sample (and returns its bytes to the
 * budget). Budget waits happen with no view lock held.
 *
 * An open's reference is a struct prep_sample: the sample (struct sample)
 * and the job that opened it, whose slot stays while it has open files.
 */
#ifndef COORDFS_PREP_VIEW_STATE_H
#define COORDFS_PREP_VIEW_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/budget.h"
#include "prep/prep.h"

#define PID_CACHE 1024

enum sample_state { SAMPLE_PENDING, SAMPLE_READY, SAMPLE_FAILED };

struct sample {
	_Atomic unsigned refs;
	struct budget *mem; /* where `charged` bytes were reserved, or NULL */
	uint64_t charged;   /* set before the sample is shared, then by its decoder */
	/* key */
	uint32_t file_index;
	uint32_t version;
	struct prep_recipe recipe;
	uint64_t file_key;
	/* guarded by view->lock */
	enum sample_state state;
	int err;
	bool in_table, staged, det;
	bool ahead; /* decoded ahead, not opened yet (in the table only once ready) */
	struct sample *hnext;	   /* hash chain */
	struct sample *fprev, *fnext; /* FIFO of staged random samples */
	struct sample *qnext;	   /* decode queue */
	pthread_cond_t done;
	/* immutable once READY */
	uint8_t *data;
	size_t len;
};

struct job {
	uid_t uid;
	char name[PREP_JOB_NAME_MAX];
	double last_active;
	unsigned open;	/* opens not yet put: the slot is not reused meanwhile */
	uint16_t *next; /* next version per file, calloc'd on first use */
	uint32_t maxv;	/* the highest version it has taken: the epoch it is in */
	bool gone;	/* its process has exited (prep__jobs_check_gone): inactive */
	double gone_checked; /* when its process was last looked for */
	/* decode-ahead: versions taken and files opened at least once (their
	 * ratio is the epoch the job is in), the random recipe it opened
	 * last, where the ahead threads look next, and the epoch in which they
	 * found nothing left to do */
	uint64_t opens;
	uint32_t seen;
	bool has_recipe;
	struct prep_recipe recipe;
	uint32_t ahead_at, ahead_seen;
	uint32_t ahead_done; /* maxv + 1 of the epoch found done, 0: none */
};

/* One open: what prep_view_open hands out. */
struct prep_sample {
	struct sample *s;
	struct job *j;
};

struct dentry; /* prep/tier.h */

/* A large anonymous mapping the tier's slots are carved from, front to back. */
struct tier_chunk {
	uint8_t *base;
	size_t size, top;
};
#define TIER_HOLES 32

struct pid_entry {
	pid_t pid;
	double when;
	char name[PREP_JOB_NAME_MAX];
};

struct prep_view {
	struct prep_config cfg;
	struct prep_source_ops ops;
	void *arg;

	pthread_mutex_t lock;
	pthread_cond_t work; /* queue not empty and a decode slot free, or stop */
	bool stop;
	unsigned active; /* decodes running, pool and inline: <= cfg.threads */
	struct sample **buckets;
	size_t nbuckets, count;
	struct sample *fifo_head, *fifo_tail;
	struct sample *q_head, *q_tail;
	struct job **jobs; /* njobs used, room for jobs_cap; each job stays put */
	unsigned njobs, jobs_cap;
	unsigned gone_next; /* where prep__jobs_check_gone looks next */
	uint64_t staged_total, det_bytes, det_cap;
	_Atomic uint32_t *dims; /* resize stat cache: w << 16 | h, 0 = unknown */

	/* The decoded tier (NULL when cfg.decoded_mem is too small for its
	 * index): per file, a list of images, each published once (release)
	 * and read without a lock (acquire). tier_lock guards insertion and
	 * tier_used (the index included), which never exceeds decoded_mem. */
	struct dentry *_Atomic *tier;
	pthread_mutex_t tier_lock;
	uint64_t tier_used;
	/* Its slots (under tier_lock): chunks[nchunks - 1] is carved from;
	 * tier_gran is the step chunks are charged in, tier_chunk their size;
	 * holes are slots given back that are not at a chunk's top. */
	struct tier_chunk *chunks;
	size_t nchunks, chunks_cap, tier_gran, tier_chunk;
	struct {
		uint8_t *p;
		size_t cap;
	} holes[TIER_HOLES];
	unsigned nholes;

	pthread_mutex_t pid_lock;
	struct pid_entry pids[PID_CACHE];

	unsigned nthreads;
	pthread_t *threads;

	/* decode-ahead (cfg.ahead_threads): ahead_bytes of samples decoded
	 * ahead and not opened yet, at most ahead_cap; under lock */
	pthread_cond_t ahead_wake;
	unsigned nahead, ahead_job;
	pthread_t *ahead_tids;
	uint64_t ahead_bytes, ahead_cap;
	_Atomic uint64_t ahead_cpu_ns; /* CPU time of the ahead threads' decodes */

	_Atomic uint64_t st_decodes, st_shared, st_errors, st_staged, st_refused, st_jobs;
	_Atomic uint64_t st_jobs_reclaimed;
	_Atomic uint64_t st_dec_bytes, st_dec_hits, st_dec_files, st_dec_refused;
	_Atomic uint64_t st_ahead, st_ahead_wasted;
	_Atomic int64_t log_sec;			 /* second of the failure-log window */
	_Atomic unsigned log_count, log_dropped; /* lines in it, lines left out */
};

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void stat_add(_Atomic uint64_t *c, int64_t d)
{
	atomic_fetch_add_explicit(c, (uint64_t)d, memory_order_relaxed);
}

/* Give n bytes back to the view's budget (cfg.mem), if it has one. */
static inline void prep__mem_release(struct prep_view *v, uint64_t n)
{
	if (v->cfg.mem)
		budget_release(v->cfg.mem, n);
}

#endif
