/* SPDX-License-Identifier: MIT */
/*
 * The peer server's worker pool: a fixed number of threads and a bounded
 * queue of jobs, for the part of a request that may block on SOURCE.
 * server.c suspends the connection, queues the job, and the job resumes
 * it; the event loops never wait on storage, and threads stay bounded
 * whatever the number of connections.
 *
 * A job is queued in two steps, so that the caller can suspend its
 * connection in between (the job resumes it, which must come after):
 * remote_workers_reserve() takes room in the queue (or fails, and the
 * caller answers at once), remote_workers_push() then queues the job and
 * cannot fail. Jobs are intrusive (no allocation) and each one runs
 * exactly once: normally, or with cancelled = true once the pool stops.
 * Thread-safe; one mutex, never held while a job runs.
 */
#ifndef COORDFS_REMOTE_WORKERS_H
#define COORDFS_REMOTE_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct remote_workers;

struct remote_job {
	/* Called once, on a worker thread. cancelled: the pool is stopping,
	 * do no I/O, just release the caller. The pool never touches the
	 * job again once run was called (run may free it). */
	void (*run)(struct remote_job *j, bool cancelled);
	struct remote_job *next;
};

/* threads workers with stack_size stacks, at most queue_cap jobs waiting:
 * 0 and *out, or -errno. */
int remote_workers_create(unsigned threads, unsigned queue_cap, size_t stack_size,
			  struct remote_workers **out);

/* Room for one job: 0; -EBUSY when queue_cap jobs wait already (unless
 * urgent: a job that must not be refused, such as the rest of a body
 * already begun; each connection has at most one job, so these stay
 * bounded by the connections); -ECANCELED once the pool stops. */
int remote_workers_reserve(struct remote_workers *w, bool urgent);
/* Queue j on a reservation taken before. */
void remote_workers_push(struct remote_workers *w, struct remote_job *j);

/* Stop: no more reservations; jobs queued run with cancelled = true at
 * once (on the caller's thread), as do those pushed later on an earlier
 * reservation (on a worker); running ones finish; the threads are
 * joined. Idempotent (a second call returns at once). */
void remote_workers_stop(struct remote_workers *w);
/* Stop if needed and free. NULL ok. */
void remote_workers_destroy(struct remote_workers *w);

struct remote_workers_stats {
	uint64_t queued;  /* jobs waiting now */
	uint64_t running; /* jobs running now */
	uint64_t refused; /* reservations refused because the queue was full */
};
void remote_workers_get_stats(struct remote_workers *w, struct remote_workers_stats *out);

/* For tests: the queue's cap. */
void remote_workers_set_queue_cap(struct remote_workers *w, unsigned cap);

#endif
