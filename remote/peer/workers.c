/* SPDX-License-Identifier: MIT */
/*
 * The peer server's worker pool (workers.h): a FIFO of intrusive jobs
 * under one mutex, a condition variable for the workers.
 */
#include "remote/peer/workers.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

struct remote_workers {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct remote_job *head, *tail;
	unsigned queued;   /* jobs on the queue */
	unsigned reserved; /* reservations not pushed yet */
	unsigned running;
	_Atomic unsigned cap;
	bool stopping, joined;
	_Atomic uint64_t refused;
	unsigned nthreads;
	pthread_t threads[];
};

static void *worker_main(void *arg)
{
	struct remote_workers *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		/* While stopping, stay until the last reservation was pushed
		 * and run: each job must release its connection. */
		while (!w->head && !(w->stopping && w->reserved == 0))
			pthread_cond_wait(&w->wake, &w->lock);
		struct remote_job *j = w->head;

		if (!j)
			break;
		w->head = j->next;
		if (!w->head)
			w->tail = NULL;
		w->queued--;
		w->running++;
		bool cancelled = w->stopping;

		pthread_mutex_unlock(&w->lock);
		j->next = NULL;
		j->run(j, cancelled); /* j may be gone after this */
		pthread_mutex_lock(&w->lock);
		w->running--;
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int remote_workers_create(unsigned threads, unsigned queue_cap, size_t stack_size,
			  struct remote_workers **out)
{
	struct remote_workers *w;
	pthread_attr_t attr;
	int rc = 0;

	if (threads == 0)
		return -EINVAL;
	w = calloc(1, sizeof(*w) + threads * sizeof(pthread_t));
	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	atomic_init(&w->cap, queue_cap);
	pthread_attr_init(&attr);
	if (stack_size)
		pthread_attr_setstacksize(&attr, stack_size);
	for (; w->nthreads < threads; w->nthreads++) {
		rc = pthread_create(&w->threads[w->nthreads], &attr, worker_main, w);
		if (rc != 0)
			break;
	}
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		log_err("peer server: cannot start worker thread %u of %u: %s", w->nthreads + 1,
			threads, strerror(rc));
		remote_workers_destroy(w); /* joins those started */
		return -rc;
	}
	*out = w;
	return 0;
}

int remote_workers_reserve(struct remote_workers *w, bool urgent)
{
	int rc = 0;

	pthread_mutex_lock(&w->lock);
	if (w->stopping)
		rc = -ECANCELED;
	else if (!urgent && w->queued + w->reserved >= atomic_load(&w->cap))
		rc = -EBUSY;
	else
		w->reserved++;
	pthread_mutex_unlock(&w->lock);
	if (rc == -EBUSY)
		atomic_fetch_add_explicit(&w->refused, 1, memory_order_relaxed);
	return rc;
}

void remote_workers_push(struct remote_workers *w, struct remote_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&w->lock);
	w->reserved--;
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	w->queued++;
	/* While stopping, the last push may also end the others' wait. */
	if (w->stopping)
		pthread_cond_broadcast(&w->wake);
	else
		pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void remote_workers_stop(struct remote_workers *w)
{
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	bool join = !w->joined;
	/* What waits is cancelled here and now, not after the running jobs
	 * (reads blocked on SOURCE) free a worker: those peers get their
	 * answer (503) at once. */
	struct remote_job *j = w->head;

	w->head = w->tail = NULL;
	w->running += w->queued;
	w->queued = 0;
	w->joined = true;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	while (j) {
		struct remote_job *next = j->next;

		j->next = NULL;
		j->run(j, true); /* j may be gone after this */
		pthread_mutex_lock(&w->lock);
		w->running--;
		pthread_mutex_unlock(&w->lock);
		j = next;
	}
	if (!join)
		return;
	for (unsigned i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
}

void remote_workers_destroy(struct remote_workers *w)
{
	if (!w)
		return;
	remote_workers_stop(w);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->wake);
	free(w);
}

void remote_workers_get_stats(struct remote_workers *w, struct remote_workers_stats *out)
{
	pthread_mutex_lock(&w->lock);
	out->queued = w->queued + w->reserved;
	out->running = w->running;
	pthread_mutex_unlock(&w->lock);
	out->refused = atomic_load_explicit(&w->refused, memory_order_relaxed);
}

void remote_workers_set_queue_cap(struct remote_workers *w, unsigned cap)
{
	atomic_store(&w->cap, cap);
}
