/* SPDX-License-Identifier: MIT */
#include "common/hist.h"

static unsigned hist_index(uint64_t us)
{
	if (us < HIST_SUB)
		return (unsigned)us;
	unsigned exp = 63 - (unsigned)__builtin_clzll(us); /* >= 3 */
	unsigned sub = (unsigned)((us >> (exp - 3)) & (HIST_SUB - 1));
	unsigned idx = (exp - 2) * HIST_SUB + sub;

	return idx < HIST_BUCKETS ? idx : HIST_BUCKETS - 1;
}

/* Lower bound (us) of bucket idx; the inverse of hist_index. */
static double hist_lower(unsigned idx)
{
	if (idx < HIST_SUB)
		return idx;
	unsigned exp = idx / HIST_SUB + 2, sub = idx % HIST_SUB;

	return (double)((uint64_t)(HIST_SUB + sub) << (exp - 3));
}

void hist_add(struct hist *h, uint64_t us)
{
	atomic_fetch_add_explicit(&h->count[hist_index(us)], 1, memory_order_relaxed);
}

double hist_quantile_ms(struct hist *h, double q)
{
	uint64_t snap[HIST_BUCKETS], total = 0;

	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		snap[i] = atomic_load_explicit(&h->count[i], memory_order_relaxed);
		total += snap[i];
	}
	if (!total)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)total);

	if (rank >= total)
		rank = total - 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		if (rank < snap[i]) {
			double lo = hist_lower(i);
			double hi = i + 1 < HIST_BUCKETS ? hist_lower(i + 1) : lo;

			return (lo + hi) / 2 / 1000.0;
		}
		rank -= snap[i];
	}
	return 0;
}
