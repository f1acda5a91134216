/* SPDX-License-Identifier: MIT */
/*
 * A latency histogram cheap enough for every request: log-linear buckets of
 * microseconds (8 per power of two, so a quantile is within 1/16 of the
 * truth), relaxed atomic counts, no lock. Zero-initialized is empty.
 */
#ifndef COORDFS_COMMON_HIST_H
#define COORDFS_COMMON_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define HIST_SUB 8		      /* buckets per power of two */
#define HIST_BUCKETS (40 * HIST_SUB) /* up to 2^41 us, ~25 days */

struct hist {
	_Atomic uint64_t count[HIST_BUCKETS];
};

void hist_add(struct hist *h, uint64_t us);
/* The q-quantile (0 <= q <= 1) in milliseconds, the middle of its bucket;
 * 0 with no samples. */
double hist_quantile_ms(struct hist *h, double q);

#endif
