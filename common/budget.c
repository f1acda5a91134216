// SPDX-License-Identifier: MIT
/*
 * The transient-memory budget (budget.h): a lock-free fast path (one
 * compare-and-swap on `used`) and a condition variable only for those who
 * must wait for room.
 */
#include "common/budget.h"
#include "common/deadline.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <time.h>

void budget_init(struct budget *b, uint64_t limit)
{
	b->limit = limit;
	atomic_init(&b->used, 0);
	atomic_init(&b->peak, 0);
	atomic_init(&b->kept, 0);
	atomic_init(&b->refused, 0);
	atomic_init(&b->waits, 0);
	atomic_init(&b->waiters, 0);
	pthread_mutex_init(&b->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->room, &ca);
	pthread_condattr_destroy(&ca);
}

void budget_fini(struct budget *b)
{
	pthread_cond_destroy(&b->room);
	pthread_mutex_destroy(&b->lock);
}

static void note_peak(struct budget *b, uint64_t now)
{
	uint64_t p = atomic_load_explicit(&b->peak, memory_order_relaxed);
	while (now > p &&
	       !atomic_compare_exchange_weak_explicit(&b->peak, &p, now, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

bool budget_try(struct budget *b, uint64_t n)
{
	uint64_t cur = atomic_load_explicit(&b->used, memory_order_relaxed);

	for (;;) {
		if (b->limit && (n > b->limit || cur > b->limit - n))
			return false;
		if (atomic_compare_exchange_weak_explicit(&b->used, &cur, cur + n,
							  memory_order_acq_rel,
							  memory_order_relaxed)) {
			note_peak(b, cur + n);
			return true;
		}
	}
}

int budget_reserve(struct budget *b, uint64_t n, unsigned wait_ms)
{
	if (budget_try(b, n))
		return 0;
	if (wait_ms == 0 || (b->limit && n > b->limit)) {
		atomic_fetch_add_explicit(&b->refused, 1, memory_order_relaxed);
		return -ENOMEM;
	}
	atomic_fetch_add_explicit(&b->waits, 1, memory_order_relaxed);
	struct timespec until = deadline_after_ms(wait_ms);
	int rc = 0;
	pthread_mutex_lock(&b->lock);
	atomic_fetch_add_explicit(&b->waiters, 1, memory_order_seq_cst);
	while (!budget_try(b, n)) {
		if (pthread_cond_timedwait(&b->room, &b->lock, &until) == ETIMEDOUT) {
			rc = budget_try(b, n) ? 0 : -ENOMEM;
			break;
		}
	}
	atomic_fetch_sub_explicit(&b->waiters, 1, memory_order_seq_cst);
	pthread_mutex_unlock(&b->lock);
	if (rc < 0)
		atomic_fetch_add_explicit(&b->refused, 1, memory_order_relaxed);
	return rc;
}

void budget_release(struct budget *b, uint64_t n)
{
	if (n == 0)
		return;
	atomic_fetch_sub_explicit(&b->used, n, memory_order_acq_rel);
	if (atomic_load_explicit(&b->waiters, memory_order_seq_cst)) {
		pthread_mutex_lock(&b->lock);
		pthread_cond_broadcast(&b->room);
		pthread_mutex_unlock(&b->lock);
	}
}

void *budget_malloc_aligned(struct budget *b, uint64_t n, size_t align, unsigned wait_ms)
{
	void *p = NULL;

	if (budget_reserve(b, n, wait_ms) < 0)
		return NULL;
	if (align ? posix_memalign(&p, align, n ? n : 1) != 0 : !(p = malloc(n ? n : 1))) {
		budget_release(b, n);
		return NULL;
	}
	return p;
}

void *budget_malloc(struct budget *b, uint64_t n, unsigned wait_ms)
{
	return budget_malloc_aligned(b, n, 0, wait_ms);
}

void budget_free(struct budget *b, void *p, uint64_t n)
{
	if (!p)
		return;
	free(p);
	budget_release(b, n);
}

void budget_trim(struct budget *b)
{
	static _Atomic int64_t last_s; /* process-wide rate limit, not state */
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t prev = atomic_load_explicit(&last_s, memory_order_relaxed);
	if (now.tv_sec <= prev)
		return;
	if (!atomic_compare_exchange_strong(&last_s, &prev, (int64_t)now.tv_sec))
		return;
	uint64_t kept = atomic_load_explicit(&b->kept, memory_order_relaxed);
	uint64_t used = budget_used(b), peak = atomic_load_explicit(&b->peak, memory_order_relaxed);
	if (used - (kept < used ? kept : used) < (peak - (kept < peak ? kept : peak)) / 2)
		malloc_trim(0);
}

void budget_keep(struct budget *b, int64_t delta)
{
	atomic_fetch_add_explicit(&b->kept, (uint64_t)delta, memory_order_relaxed);
}
