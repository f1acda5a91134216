/* SPDX-License-Identifier: MIT */
/*
 * Deadlines for pthread_cond_timedwait on CLOCK_MONOTONIC condition
 * variables (pthread_condattr_setclock): "now plus ms" as a timespec; and
 * CLOCK_MONOTONIC in milliseconds (or microseconds, for latencies), for
 * deadlines and times kept as numbers.
 */
#ifndef COORDFS_COMMON_DEADLINE_H
#define COORDFS_COMMON_DEADLINE_H

#include <stdint.h>
#include <time.h>

static inline int64_t deadline_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static inline uint64_t deadline_now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000ULL + (uint64_t)t.tv_nsec / 1000;
}

static inline struct timespec deadline_after_ms(unsigned ms)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

#endif
