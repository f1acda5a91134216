/* SPDX-License-Identifier: MIT */
/* Unit tests for cache/: MinIO admission, no eviction, budget, single flight. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "tests/unit/check_run.h"

struct filler {
	_Atomic unsigned calls;
	_Atomic unsigned per_unit[4096];
	unsigned delay_us;
	int fail_unit; /* -1: none */
	int fail_rc;   /* what fail_unit's fill returns (0: -EIO) */
};

/* Fills unit u with byte (u * 7 + i) so content can be checked. */
static int fill_pattern(void *arg, uint64_t unit, void *dst, size_t len)
{
	struct filler *f = arg;

	atomic_fetch_add(&f->calls, 1);
	atomic_fetch_add(&f->per_unit[unit % 4096], 1);
	if (f->delay_us)
		usleep(f->delay_us);
	if ((int)unit == f->fail_unit)
		return f->fail_rc ? f->fail_rc : -EIO;
	unsigned char *p = dst;
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(unit * 7 + i);
	return 0;
}

static void check_pattern(const void *data, uint64_t unit, size_t len)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < len; i++)
		ck_assert_msg(p[i] == (unsigned char)(unit * 7 + i), "unit %llu byte %zu: got %u want %u",
			      (unsigned long long)unit, i, p[i], (unsigned char)(unit * 7 + i));
}

START_TEST(admits_until_full_then_refuses_and_never_evicts)
{
	struct cache *c;
	struct filler f = { .fail_unit = -1 };
	const void *d;
	struct cache_stats st;

	/* 10 units of 1000 bytes (1024 with alignment) into 5000 bytes: 4 fit. */
	ck_assert_int_eq(cache_create(5000, 10, &c), 0);
	int admitted = 0;
	for (uint64_t u = 0; u < 10; u++) {
		int rc = cache_get(c, u, 1000, 1000, true, fill_pattern, &f, &d);
		if (rc == 0) {
			admitted++;
			check_pattern(d, u, 1000);
		} else {
			ck_assert_int_eq(rc, -ENOSPC);
		}
	}
	ck_assert_int_eq(admitted, 4);
	cache_get_stats(c, &st);
	ck_assert_uint_le(st.used_bytes, st.capacity_bytes);
	ck_assert_uint_eq(st.items, 4);
	ck_assert_uint_eq(st.refused, 6);
	/* Second epoch in another order: the same four hit, the rest still refused. */
	unsigned before = atomic_load(&f.calls);
	for (int u = 9; u >= 0; u--) {
		int rc = cache_get(c, (uint64_t)u, 1000, 1000, true, fill_pattern, &f, &d);
		if (u < 4) {
			ck_assert_int_eq(rc, 0);
			check_pattern(d, (uint64_t)u, 1000);
		} else {
			ck_assert_int_eq(rc, -ENOSPC);
		}
	}
	/* Refused units are not filled at all: the allocation fails first. */
	ck_assert_uint_eq(atomic_load(&f.calls), before);
	cache_get_stats(c, &st);
	ck_assert_uint_eq(st.hits, 4);
	ck_assert_uint_eq(st.items, 4);
	for (uint64_t u = 0; u < 4; u++)
		ck_assert(cache_holds(c, u));
	for (uint64_t u = 4; u < 10; u++)
		ck_assert(!cache_holds(c, u));
	cache_destroy(c);
}
END_TEST

/* Unit ids up to 2^32, far apart: each lives in its own block of state
 * words, allocated on first fill; ids never filled read as not held. */
START_TEST(sparse_unit_ids)
{
	struct cache *c;
	struct filler f = { .fail_unit = -1 };
	const void *d;
	/* (not 2^32 - 1: the filler fails the unit whose low 32 bits are -1;
	 * its per-unit counts wrap at 4096) */
	const uint64_t ids[] = { 0, 65535, 65536, 1000000, ((uint64_t)1 << 32) - 2 };

	ck_assert_int_eq(cache_create(1 << 20, (uint64_t)1 << 32, &c), 0);
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		ck_assert(!cache_holds(c, ids[i]));
		ck_assert_int_eq(cache_get(c, ids[i], 1000, 1000, false, fill_pattern, &f, &d),
				 -ENOSPC);
		ck_assert_int_eq(cache_get(c, ids[i], 1000, 1000, true, fill_pattern, &f, &d), 0);
		check_pattern(d, ids[i], 1000);
	}
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		ck_assert(cache_holds(c, ids[i]));
		ck_assert(!cache_holds(c, ids[i] ^ 1));
		ck_assert_int_eq(cache_get(c, ids[i], 1000, 1000, true, fill_pattern, &f, &d), 0);
		check_pattern(d, ids[i], 1000);
	}
	ck_assert_int_eq(cache_get(c, (uint64_t)1 << 32, 1000, 1000, true, fill_pattern, &f, &d),
			 -EINVAL);
	ck_assert_int_eq(cache_prefill(c, 2000000, 1000, fill_pattern, &f), 0);
	ck_assert(cache_holds(c, 2000000));
	cache_destroy(c);
}
END_TEST

START_TEST(zero_capacity_admits_nothing)
{
	struct cache *c;
	struct filler f = { .fail_unit = -1 };
	const void *d;

	ck_assert_int_eq(cache_create(0, 3, &c), 0);
	ck_assert_int_eq(cache_get(c, 1, 10, 10, true, fill_pattern, &f, &d), -ENOSPC);
	ck_assert_uint_eq(atomic_load(&f.calls), 0);
	ck_assert_int_eq(cache_get(c, 3, 10, 10, true, fill_pattern, &f, &d), -EINVAL);
	cache_destroy(c);
	cache_destroy(NULL);
}
END_TEST

START_TEST(transient_fill_error_retries)
{
	struct cache *c;
	struct filler f = {.fail_unit = 2, .fail_rc = -EMFILE};
	const void *d;
	struct cache_stats st;

	ck_assert_int_eq(cache_create(1 << 20, 4, &c), 0);
	ck_assert_int_eq(cache_get(c, 2, 4096, 4096, true, fill_pattern, &f, &d), -EMFILE);
	ck_assert(!cache_holds(c, 2));
	cache_get_stats(c, &st);
	ck_assert_uint_eq(st.used_bytes, 0); /* the reservation was given back */
	ck_assert_uint_eq(st.failed_units, 0);
	f.fail_unit = -1;
	ck_assert_int_eq(cache_get(c, 2, 4096, 4096, true, fill_pattern, &f, &d), 0);
	check_pattern(d, 2, 4096);
	ck_assert_uint_eq(atomic_load(&f.per_unit[2]), 2);
	cache_destroy(c);
}
END_TEST

START_TEST(failed_fill_marks_the_unit_failed)
{
	struct cache *c;
	struct filler f = {.fail_unit = 2, .fail_rc = -ESTALE};
	const void *d;
	struct cache_stats st;

	ck_assert_int_eq(cache_create(1 << 20, 4, &c), 0);
	ck_assert_int_eq(cache_get(c, 2, 4096, 4096, true, fill_pattern, &f, &d), -EIO);
	f.fail_unit = -1; /* even a source that would now work is not asked again */
	ck_assert_int_eq(cache_get(c, 2, 4096, 4096, true, fill_pattern, &f, &d), -EIO);
	ck_assert_int_eq(cache_get(c, 2, 4096, 4096, false, fill_pattern, &f, &d), -EIO);
	ck_assert(!cache_holds(c, 2));
	ck_assert_uint_eq(atomic_load(&f.per_unit[2]), 1);
	cache_get_stats(c, &st);
	ck_assert_uint_eq(st.used_bytes, 0);
	ck_assert_uint_eq(st.failed_units, 1);
	ck_assert_uint_eq(st.fill_errors, 1);
	cache_destroy(c);
}
END_TEST

/* A fill that, before failing, admits another unit: the failed reservation
 * is then not the last one, which the bump allocator alone cannot return. */
struct nested {
	struct cache *c;
	struct filler inner;
};

static int fill_fail_after_other(void *arg, uint64_t unit, void *dst, size_t len)
{
	struct nested *n = arg;
	const void *d;

	memset(dst, 0xAA, len);
	if (cache_get(n->c, unit + 1, len, len, true, fill_pattern, &n->inner, &d) != 0)
		return -ENOEXEC; /* makes the test fail below */
	return -EIO;
}

START_TEST(failed_fill_behind_another_returns_its_space)
{
	struct cache *c;
	struct nested n = {.inner = {.fail_unit = -1}};
	const void *d;
	struct cache_stats st;

	/* Room for exactly 4 units of 4 KiB. */
	ck_assert_int_eq(cache_create(4 * 4096, 16, &c), 0);
	n.c = c;
	ck_assert_int_eq(cache_get(c, 0, 4096, 4096, true, fill_fail_after_other, &n, &d), -EIO);
	ck_assert(cache_holds(c, 1));
	cache_get_stats(c, &st);
	ck_assert_uint_eq(st.used_bytes, 4096); /* unit 1 only */
	/* Three more units fit: the failed unit's place is reused. */
	for (uint64_t u = 2; u < 5; u++)
		ck_assert_int_eq(cache_get(c, u, 4096, 4096, true, fill_pattern, &n.inner, &d), 0);
	ck_assert_int_eq(cache_get(c, 5, 4096, 4096, true, fill_pattern, &n.inner, &d), -ENOSPC);
	for (uint64_t u = 1; u < 5; u++) {
		ck_assert_int_eq(cache_get(c, u, 4096, 4096, true, fill_pattern, &n.inner, &d), 0);
		check_pattern(d, u, 4096);
	}
	cache_get_stats(c, &st);
	ck_assert_uint_eq(st.used_bytes, st.capacity_bytes);
	ck_assert_uint_eq(st.items, 4);
	cache_destroy(c);
}
END_TEST

START_TEST(no_admit_only_hits)
{
	struct cache *c;
	struct filler f = { .fail_unit = -1 };
	const void *d;

	ck_assert_int_eq(cache_create(1 << 20, 4, &c), 0);
	ck_assert_int_eq(cache_get(c, 1, 100, 100, false, fill_pattern, &f, &d), -ENOSPC);
	ck_assert_uint_eq(atomic_load(&f.calls), 0);
	ck_assert_int_eq(cache_get(c, 1, 100, 100, true, fill_pattern, &f, &d), 0);
	ck_assert_int_eq(cache_get(c, 1, 100, 100, false, fill_pattern, &f, &d), 0);
	check_pattern(d, 1, 100);
	cache_destroy(c);
}
END_TEST

struct worker_arg {
	struct cache *c;
	struct filler *f;
	uint64_t nunits;
	size_t unit_len;
	unsigned seed;
	_Atomic unsigned *bad;
};

static void *hammer(void *p)
{
	struct worker_arg *w = p;
	unsigned seed = w->seed;

	for (int i = 0; i < 3000; i++) {
		uint64_t u = (uint64_t)rand_r(&seed) % w->nunits;
		const void *d;
		int rc = cache_get(w->c, u, w->unit_len, w->unit_len, true, fill_pattern, w->f, &d);
		if (rc == 0) {
			const unsigned char *b = d;
			for (size_t k = 0; k < w->unit_len; k += 97)
				if (b[k] != (unsigned char)(u * 7 + k))
					atomic_fetch_add(w->bad, 1);
		} else if (rc != -ENOSPC) {
			atomic_fetch_add(w->bad, 1);
		}
	}
	return NULL;
}

START_TEST(concurrent_fills_stay_in_budget_and_fill_once)
{
	enum { NTHREADS = 8, NUNITS = 512 };
	struct cache *c;
	struct filler *f = calloc(1, sizeof(*f));
	_Atomic unsigned bad = 0;
	pthread_t t[NTHREADS];
	struct worker_arg w[NTHREADS];
	struct cache_stats st;

	f->fail_unit = -1;
	f->delay_us = 50;
	/* Chunk-sized units of 4 KiB; room for about a third of them. */
	ck_assert_int_eq(cache_create(NUNITS * 4096 / 3, NUNITS, &c), 0);
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker_arg){ c, f, NUNITS, 4096, (unsigned)i + 1, &bad };
		pthread_create(&t[i], NULL, hammer, &w[i]);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	cache_get_stats(c, &st);
	ck_assert_uint_eq(atomic_load(&bad), 0);
	ck_assert_uint_le(st.used_bytes, st.capacity_bytes);
	ck_assert_uint_eq(st.items, st.admitted);
	ck_assert_uint_eq(st.items * 4096, st.used_bytes);
	/* Every admitted unit was filled exactly once. */
	for (uint64_t u = 0; u < NUNITS; u++)
		if (cache_holds(c, u))
			ck_assert_uint_eq(atomic_load(&f->per_unit[u]), 1);
	ck_assert_uint_eq(st.hits + st.misses, NTHREADS * 3000);
	cache_destroy(c);
	free(f);
}
END_TEST

struct sf_arg {
	struct cache *c;
	struct filler *f;
	_Atomic unsigned *ok;
};

static void *single_reader(void *p)
{
	struct sf_arg *a = p;
	const void *d;

	if (cache_get(a->c, 5, 65536, 65536, true, fill_pattern, a->f, &d) == 0) {
		const unsigned char *b = d;
		if (b[100] == (unsigned char)(5 * 7 + 100))
			atomic_fetch_add(a->ok, 1);
	}
	return NULL;
}

START_TEST(single_flight_one_fill_for_many_readers)
{
	enum { N = 16 };
	struct cache *c;
	struct filler *f = calloc(1, sizeof(*f));
	_Atomic unsigned ok = 0;
	pthread_t t[N];
	struct sf_arg a;

	f->fail_unit = -1;
	f->delay_us = 200000; /* a slow source: all readers arrive during the fill */
	ck_assert_int_eq(cache_create(1 << 20, 8, &c), 0);
	a = (struct sf_arg){ c, f, &ok };
	for (int i = 0; i < N; i++)
		pthread_create(&t[i], NULL, single_reader, &a);
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	ck_assert_uint_eq(atomic_load(&f->calls), 1);
	ck_assert_uint_eq(atomic_load(&ok), N);
	cache_destroy(c);
	free(f);
}
END_TEST

/*
 * Many threads read every unit for several epochs, in their own orders.
 * A quarter of the units always fail (-EIO: marked failed), a quarter fail
 * twice with -EMFILE first (transient), and failing fills wait until some
 * other fill has started, so their reservations are never the last one.
 */
enum { CF_THREADS = 8, CF_UNITS = 256, CF_LEN = 4096, CF_FIT = 64, CF_EPOCHS = 4 };

struct cf_state {
	struct cache *c;
	_Atomic unsigned starts;
	_Atomic unsigned fills[CF_UNITS];
	_Atomic unsigned transient_left[CF_UNITS];
	_Atomic unsigned unexpected;
};

static void wait_for_other_fill(struct cf_state *s, unsigned seen)
{
	for (int i = 0; i < 400 && atomic_load(&s->starts) == seen; i++)
		usleep(250);
}

static int cf_fill(void *arg, uint64_t unit, void *dst, size_t len)
{
	struct cf_state *s = arg;
	unsigned seen = atomic_fetch_add(&s->starts, 1) + 1;

	atomic_fetch_add(&s->fills[unit], 1);
	memset(dst, 0x55, len); /* partly written before failing, as a real read would */
	if (unit % 4 == 0) {
		wait_for_other_fill(s, seen);
		return -EIO;
	}
	if (unit % 4 == 1) {
		unsigned left = atomic_load(&s->transient_left[unit]);
		while (left > 0 &&
		       !atomic_compare_exchange_weak(&s->transient_left[unit], &left, left - 1))
			;
		if (left > 0) {
			wait_for_other_fill(s, seen);
			return -EMFILE;
		}
	}
	unsigned char *p = dst;
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(unit * 7 + i);
	return 0;
}

struct cf_worker {
	struct cf_state *s;
	unsigned seed;
};

static void cf_read(struct cf_state *s, uint64_t u)
{
	const void *d;
	int rc = cache_get(s->c, u, CF_LEN, CF_LEN, true, cf_fill, s, &d);

	/* Failing units are refused like any other once the budget is full. */
	if (u % 4 == 0 ? (rc != -EIO && rc != -ENOSPC)
		       : (rc != 0 && rc != -ENOSPC && rc != -EMFILE && rc != -EAGAIN))
		atomic_fetch_add(&s->unexpected, 1);
	if (rc == 0 && ((const unsigned char *)d)[9] != (unsigned char)(u * 7 + 9))
		atomic_fetch_add(&s->unexpected, 1);
}

static void *cf_worker(void *p)
{
	struct cf_worker *w = p;
	uint64_t order[CF_UNITS];

	for (int e = 0; e < CF_EPOCHS; e++) {
		for (uint64_t u = 0; u < CF_UNITS; u++)
			order[u] = u;
		for (size_t i = CF_UNITS - 1; i > 0; i--) {
			size_t j = (size_t)rand_r(&w->seed) % (i + 1);
			uint64_t t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (size_t i = 0; i < CF_UNITS; i++)
			cf_read(w->s, order[i]);
	}
	return NULL;
}

START_TEST(concurrent_failing_fills_leak_no_budget)
{
	struct cf_state *s = calloc(1, sizeof(*s));
	pthread_t t[CF_THREADS];
	struct cf_worker w[CF_THREADS];
	struct cache_stats st;

	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(cache_create(CF_FIT * CF_LEN, CF_UNITS, &s->c), 0);
	for (int u = 0; u < CF_UNITS; u++)
		s->transient_left[u] = 2;
	for (int i = 0; i < CF_THREADS; i++) {
		w[i] = (struct cf_worker){s, 1234u + (unsigned)i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, cf_worker, &w[i]), 0);
	}
	for (int i = 0; i < CF_THREADS; i++)
		pthread_join(t[i], NULL);
	/* One more pass alone: whatever room is left must now be taken. */
	for (uint64_t u = 0; u < CF_UNITS; u++)
		cf_read(s, u);
	cache_get_stats(s->c, &st);
	ck_assert_uint_eq(atomic_load(&s->unexpected), 0);
	/* 192 units could be held and 64 fit: the budget is exactly full. */
	ck_assert_uint_eq(st.items, CF_FIT);
	ck_assert_uint_eq(st.admitted, CF_FIT);
	ck_assert_uint_eq(st.used_bytes, st.capacity_bytes);
	unsigned held = 0, failed = 0;
	for (uint64_t u = 0; u < CF_UNITS; u++) {
		if (cache_holds(s->c, u))
			held++;
		if (u % 4 == 0) { /* failed at most once, then never filled again */
			ck_assert_uint_le(atomic_load(&s->fills[u]), 1);
			failed += atomic_load(&s->fills[u]);
		} else if (cache_holds(s->c, u)) {
			ck_assert_uint_le(atomic_load(&s->fills[u]), u % 4 == 1 ? 3 : 1);
		}
	}
	ck_assert_uint_eq(held, CF_FIT);
	ck_assert_uint_eq(st.failed_units, failed);
	/* Not vacuous: failures did happen while others were admitting. */
	ck_assert_uint_gt(failed, 8);
	/* Every failure the fills returned was counted, none more. */
	uint64_t transient_failures = 0;
	for (uint64_t u = 1; u < CF_UNITS; u += 4)
		transient_failures += 2 - atomic_load(&s->transient_left[u]);
	ck_assert_uint_eq(st.fill_errors, failed + transient_failures);
	cache_destroy(s->c);
	free(s);
}
END_TEST

START_TEST(prefill_admits_without_counting_reads)
{
	struct cache *c;
	struct filler f = { .fail_unit = 3 };
	const void *d;
	struct cache_stats st;

	/* 1000-byte units (1024 aligned) into 3072 bytes: 3 fit. */
	ck_assert_int_eq(cache_create(3072, 8, &c), 0);
	ck_assert_int_eq(cache_prefill(c, 0, 1000, fill_pattern, &f), 0);
	ck_assert_int_eq(cache_prefill(c, 0, 1000, fill_pattern, &f), -EEXIST);
	ck_assert_int_eq(cache_prefill(c, 3, 1000, fill_pattern, &f), -EIO);
	ck_assert(!cache_holds(c, 3));
	ck_assert_int_eq(cache_prefill(c, 1, 1000, fill_pattern, &f), 0);
	ck_assert_int_eq(cache_prefill(c, 2, 1000, fill_pattern, &f), 0);
	unsigned calls = atomic_load(&f.calls);
	ck_assert_int_eq(cache_prefill(c, 4, 1000, fill_pattern, &f), -ENOSPC);
	ck_assert_uint_eq(atomic_load(&f.calls), calls); /* no room: never filled */
	ck_assert_int_eq(cache_prefill(c, 99, 1000, fill_pattern, &f), -EINVAL);
	cache_get_stats(c, &st);
	ck_assert_uint_eq(st.hits, 0);
	ck_assert_uint_eq(st.misses, 0);
	ck_assert_uint_eq(st.items, 3);
	ck_assert_uint_eq(st.used_bytes, 3072);
	/* What prefill admitted is a hit for readers. */
	ck_assert_int_eq(cache_get(c, 1, 1000, 1000, true, fill_pattern, &f, &d), 0);
	check_pattern(d, 1, 1000);
	cache_get_stats(c, &st);
	ck_assert_uint_eq(st.hits, 1);
	ck_assert_uint_eq(atomic_load(&f.per_unit[1]), 1);
	cache_destroy(c);
}
END_TEST

struct copy_filler {
	struct cache *c;
	unsigned char src[3 * 4096 + 100];
};

/* Fills through cache_copy_in from a pattern (unit * 7 + i) made here. */
static int fill_by_copy_in(void *arg, uint64_t unit, void *dst, size_t len)
{
	struct copy_filler *f = arg;

	ck_assert_uint_le(len, sizeof(f->src));
	for (size_t i = 0; i < len; i++)
		f->src[i] = (unsigned char)(unit * 7 + i);
	cache_copy_in(f->c, dst, f->src, len);
	return 0;
}

/* cache_copy_in writes through the arena's memfd: the bytes are where the
 * unit's pointer says, whatever their size and place (units of odd sizes
 * cross page boundaries), and a destination outside the arena is copied
 * too. */
START_TEST(copy_in_lands_where_the_unit_is)
{
	struct copy_filler f;
	const void *d;
	const size_t lens[] = { 1, 100, 4096, 5000, 3 * 4096 + 100, 77 };

	ck_assert_int_eq(cache_create(1 << 20, 16, &f.c), 0);
	for (uint64_t u = 0; u < 6; u++)
		ck_assert_int_eq(cache_get(f.c, u, lens[u], lens[u], true, fill_by_copy_in, &f, &d),
				 0);
	for (uint64_t u = 0; u < 6; u++) {
		ck_assert_int_eq(cache_get(f.c, u, lens[u], lens[u], true, fill_by_copy_in, &f, &d),
				 0);
		check_pattern(d, u, lens[u]);
	}
	unsigned char out[200];
	memset(out, 0, sizeof(out));
	cache_copy_in(f.c, out, "outside the arena", 18);
	ck_assert_str_eq((char *)out, "outside the arena");
	/* and out again (the disk tier's writer reads units so) */
	unsigned char back[3 * 4096 + 100];
	for (uint64_t u = 0; u < 6; u++) {
		ck_assert_int_eq(cache_get(f.c, u, lens[u], lens[u], true, fill_by_copy_in, &f, &d),
				 0);
		memset(back, 0, sizeof(back));
		cache_copy_out(f.c, back, d, lens[u]);
		check_pattern(back, u, lens[u]);
	}
	memset(back, 0, sizeof(back));
	cache_copy_out(f.c, back, "outside the arena", 18);
	ck_assert_str_eq((char *)back, "outside the arena");
	cache_destroy(f.c);
}
END_TEST

/* A fill that fails for a passing reason fails its waiters too: they do
 * not take turns at the same fill (behind a stalled source, each would
 * wait through a whole retry ladder). A later caller fills again. */
struct slow_fail {
	_Atomic unsigned calls;
	_Atomic int release;
	struct cache *c;
	_Atomic unsigned eagain, other;
};

static int fill_slow_fail(void *arg, uint64_t unit, void *dst, size_t len)
{
	struct slow_fail *f = arg;

	(void)unit;
	if (atomic_fetch_add(&f->calls, 1) > 0) {
		memset(dst, 1, len); /* a later, fresh caller succeeds */
		return 0;
	}
	while (!atomic_load(&f->release))
		usleep(1000);
	return -EAGAIN;
}

static void *slow_fail_reader(void *p)
{
	struct slow_fail *f = p;
	const void *d;
	int rc = cache_get(f->c, 7, 4096, 4096, true, fill_slow_fail, f, &d);

	atomic_fetch_add(rc == -EAGAIN ? &f->eagain : &f->other, 1);
	return NULL;
}

START_TEST(waiters_share_a_transient_failure)
{
	enum { READERS = 6 };
	static struct slow_fail f;
	pthread_t t[READERS];
	const void *d;

	ck_assert_int_eq(cache_create(1 << 20, 16, &f.c), 0);
	for (int i = 0; i < READERS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, slow_fail_reader, &f), 0);
	/* all but the filler are waiting on its fill */
	while (atomic_load(&f.calls) < 1)
		usleep(1000);
	usleep(200 * 1000);
	atomic_store(&f.release, 1);
	for (int i = 0; i < READERS; i++)
		pthread_join(t[i], NULL);
	ck_assert_uint_eq(atomic_load(&f.calls), 1);
	ck_assert_uint_eq(atomic_load(&f.eagain), READERS);
	ck_assert_uint_eq(atomic_load(&f.other), 0);
	ck_assert(!cache_holds(f.c, 7));
	/* a caller right after shares the failure (the kernel re-issues a
	 * failed page read at once) ... */
	ck_assert_int_eq(cache_get(f.c, 7, 4096, 4096, true, fill_slow_fail, &f, &d), -EAGAIN);
	ck_assert_uint_eq(atomic_load(&f.calls), 1);
	usleep(1100 * 1000);
	/* ... the next one a second later fills again and succeeds */
	ck_assert_int_eq(cache_get(f.c, 7, 4096, 4096, true, fill_slow_fail, &f, &d), 0);
	ck_assert_uint_eq(atomic_load(&f.calls), 2);
	cache_destroy(f.c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cache");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, admits_until_full_then_refuses_and_never_evicts);
	tcase_add_test(tc, sparse_unit_ids);
	tcase_add_test(tc, zero_capacity_admits_nothing);
	tcase_add_test(tc, transient_fill_error_retries);
	tcase_add_test(tc, failed_fill_marks_the_unit_failed);
	tcase_add_test(tc, failed_fill_behind_another_returns_its_space);
	tcase_add_test(tc, concurrent_failing_fills_leak_no_budget);
	tcase_add_test(tc, no_admit_only_hits);
	tcase_add_test(tc, concurrent_fills_stay_in_budget_and_fill_once);
	tcase_add_test(tc, single_flight_one_fill_for_many_readers);
	tcase_add_test(tc, prefill_admits_without_counting_reads);
	tcase_add_test(tc, waiters_share_a_transient_failure);
	tcase_add_test(tc, copy_in_lands_where_the_unit_is);
	suite_add_tcase(s, tc);
	return check_run(s);
}
