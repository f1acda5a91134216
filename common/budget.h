/* SPDX-License-Identifier: MIT */
/*
 * One byte budget for the daemon's transient memory: pinned prepared
 * samples, in-flight decodes, whole units fetched from peers for a handle,
 * responses the peer server builds. Each user reserves bytes before it
 * allocates and returns them after it frees; when the budget is full new
 * work waits briefly for room, then is refused (-ENOMEM), so memory is
 * bounded by the budget rather than by the number of open files or
 * connections. The MinIO cache has its own fixed arena and is not counted
 * here.
 *
 * Thread-safety: every call may run concurrently with every other except
 * budget_init/budget_fini. Waiting uses a mutex and condition variable that
 * are leaves (no other lock is taken while holding them).
 */
#ifndef COORDFS_COMMON_BUDGET_H
#define COORDFS_COMMON_BUDGET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct budget {
	uint64_t limit;
	_Atomic uint64_t used;
	_Atomic uint64_t peak;
	_Atomic uint64_t kept;    /* of used: held for good (budget_keep) */
	_Atomic uint64_t refused; /* reservations that gave up */
	_Atomic uint64_t waits;   /* reservations that had to wait */
	pthread_mutex_t lock;     /* guards the wait only */
	pthread_cond_t room;
	_Atomic unsigned waiters;
};

/* limit 0 means unlimited (every reservation succeeds at once). */
void budget_init(struct budget *b, uint64_t limit);
void budget_fini(struct budget *b);

/* Reserve n bytes without waiting: true on success. n > limit never fits. */
bool budget_try(struct budget *b, uint64_t n);

/* Reserve n bytes, waiting up to wait_ms for room to be released.
 * 0, or -ENOMEM when there was no room in time (counted in `refused`).
 * Blocks; never call it holding a lock that a releaser might need. */
int budget_reserve(struct budget *b, uint64_t n, unsigned wait_ms);

/* Return n bytes reserved earlier (wakes waiters). */
void budget_release(struct budget *b, uint64_t n);

/* malloc(n) charged to b: NULL when the reservation (with wait_ms) or
 * malloc fails. Free with budget_free(b, p, n) and the same n. */
void *budget_malloc(struct budget *b, uint64_t n, unsigned wait_ms);
/* As budget_malloc, the memory aligned to align (a power of two, at least
 * sizeof(void *); 0: malloc's alignment); freed with budget_free. */
void *budget_malloc_aligned(struct budget *b, uint64_t n, size_t align, unsigned wait_ms);
void budget_free(struct budget *b, void *p, uint64_t n);

static inline uint64_t budget_used(const struct budget *b)
{
	return atomic_load_explicit(&b->used, memory_order_relaxed);
}

/* Give freed heap memory back to the kernel when the daemon is idle
 * (glibc keeps it otherwise). Cheap to call often: it trims at most once
 * per second, and only after usage dropped. */
void budget_trim(struct budget *b);

/* n reserved bytes are (delta > 0) or are no longer (delta < 0) held for
 * the process's life (e.g. a never-evicting tier): budget_trim judges the
 * load by the rest. */
void budget_keep(struct budget *b, int64_t delta);

#endif
