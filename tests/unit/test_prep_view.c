/* SPDX-License-Identifier: MIT */
/*
 * prep/view.c, table.c and jobs.c's table: the staging engine (single
 * flight, the decode bound, versions, budget, deterministic caching, jobs
 * per uid and their reclaim, a stress of versions).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/budget.h"
#include "prep/jobs.h"
#include "prep/prep_int.h"
#include "prep/table.h"
#include "prep/view_state.h"
#include "tests/unit/test_prep_images.h"

/* ---- the staging engine ---- */


struct opener {
	_Atomic unsigned *started;
	struct prep_view *v;
	const char *job;
	struct prep_recipe r;
	struct prep_sample *s;
	int rc;
	uint32_t file;
};

static void *open_thread(void *arg)
{
	struct opener *o = arg;

	if (o->started)
		atomic_fetch_add(o->started, 1);
	o->rc = prep_view_open_job(o->v, 0, o->job, o->file, 1000 + o->file, &o->r, &o->s);
	return NULL;
}

START_TEST(view_single_flight)
{
	struct src s;
	struct prep_config cfg = {.seed = 11, .mem_budget = 64 << 20, .threads = 2, .nfiles = 4};
	enum { N = 8 };
	static const char *jobs[N] = {"a", "b", "c", "d", "e", "f", "g", "h"};
	struct opener o[N];
	pthread_t t[N];
	struct prep_stats st;

	_Atomic unsigned started = 0;

	src_fill(&s, 1);
	s.delay_ms = 300; /* after the last opener started: time to register */
	s.wait_openers = N;
	s.openers = &started;
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int i = 0; i < N; i++) {
		o[i] = (struct opener){.started = &started, .v = v, .job = jobs[i]};
		prep_recipe_parse("rrc64", &o[i].r);
		pthread_create(&t[i], NULL, open_thread, &o[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 1);
	ck_assert_uint_eq(st.shared, N - 1);
	ck_assert_uint_eq(atomic_load(&s.reads), 1);
	uint8_t *ref;
	size_t rlen, len;
	ck_assert_int_eq(prep_render(&o[0].r, s.data[0], s.len[0], 11, 1000, 0, &ref, &rlen), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(o[i].rc, 0);
		const uint8_t *p = prep_sample_data(o[i].s, &len);
		ck_assert(len == rlen && memcmp(p, ref, len) == 0);
	}
	/* every active job has read version 0: nothing left staged */
	ck_assert_uint_eq(st.staged_bytes, 0);
	for (int i = 0; i < N; i++)
		prep_sample_put(v, o[i].s);
	free(ref);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Openers decode on their own thread or hand off to the pool, but never
 * more than cfg.threads decodes run at once, and every sample is made. */
START_TEST(view_decode_bound)
{
	struct src s;
	enum { N = 6 };
	struct prep_config cfg = {.seed = 5, .mem_budget = 64 << 20, .threads = 2, .nfiles = N};
	struct opener o[N];
	pthread_t t[N];
	struct prep_stats st;
	_Atomic unsigned started = 0;

	src_fill(&s, N);
	s.delay_ms = 100;
	s.wait_openers = N;
	s.openers = &started;
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int i = 0; i < N; i++) {
		o[i] = (struct opener){.started = &started, .v = v, .job = "a", .file = i};
		prep_recipe_parse("rrc32", &o[i].r);
		pthread_create(&t[i], NULL, open_thread, &o[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, N);
	ck_assert_uint_eq(st.shared, 0);
	ck_assert_uint_eq(atomic_load(&s.reads), N);
	ck_assert_uint_ge(atomic_load(&s.max_inflight), 1);
	ck_assert_uint_le(atomic_load(&s.max_inflight), cfg.threads);
	for (int i = 0; i < N; i++) {
		uint8_t *ref;
		size_t rlen, len;

		ck_assert_int_eq(o[i].rc, 0);
		ck_assert_int_eq(prep_render(&o[i].r, s.data[i], s.len[i], 5, 1000 + i, 0, &ref,
					     &rlen),
				 0);
		const uint8_t *p = prep_sample_data(o[i].s, &len);
		ck_assert(len == rlen && memcmp(p, ref, len) == 0);
		free(ref);
		prep_sample_put(v, o[i].s);
	}
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

START_TEST(view_versions_and_release)
{
	struct src s;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 2, .nfiles = 4};
	struct prep_recipe r;
	struct prep_sample *a0, *a1, *b0, *b1;
	struct prep_stats st;
	uint32_t ver;

	src_fill(&s, 2);
	prep_recipe_parse("rrc48", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	/* job B exists and is active but has not read file 0 yet */
	ck_assert_int_eq(prep_view_next_version(v, 0, "B", 1, &ver), 0);
	ck_assert_uint_eq(ver, 0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 42, &r, &a0), 0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 42, &r, &a1), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 2);
	size_t l0, l1;
	const uint8_t *p0 = prep_sample_data(a0, &l0), *p1 = prep_sample_data(a1, &l1);
	ck_assert(l0 == l1 && memcmp(p0, p1, l0) != 0); /* versions 0 and 1 differ */
	/* both kept for B */
	ck_assert_uint_eq(st.staged_bytes, l0 + l1);
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 42, &r, &b0), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 2);
	ck_assert_uint_eq(st.shared, 1);
	ck_assert_uint_eq(st.staged_bytes, l1); /* version 0: every active job read it */
	ck_assert_ptr_eq(prep_sample_data(b0, NULL), p0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 42, &r, &b1), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 2);
	ck_assert_uint_eq(st.shared, 2);
	ck_assert_uint_eq(st.staged_bytes, 0);
	prep_sample_put(v, a0);
	prep_sample_put(v, a1);
	prep_sample_put(v, b0);
	prep_sample_put(v, b1);
	/* the k-th call gives version k */
	for (uint32_t k = 0; k < 5; k++) {
		ck_assert_int_eq(prep_view_next_version(v, 0, "C", 3, &ver), 0);
		ck_assert_uint_eq(ver, k);
	}
	ck_assert_int_eq(prep_view_next_version(v, 0, "C", 4, &ver), -EINVAL);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* A version is kept for another job only within an epoch of the one that
 * job is in: B, which read version 0 of one file and stopped, gets versions
 * 0 and 1 of file 0 kept for it, not the versions A reads later. */
START_TEST(view_keeps_within_an_epoch)
{
	struct src s;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 4};
	struct prep_recipe r;
	struct prep_sample *x;
	struct prep_stats st;
	uint32_t ver;
	size_t one = 0;

	src_fill(&s, 2);
	prep_recipe_parse("rrc48", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(prep_view_next_version(v, 0, "B", 1, &ver), 0); /* B: epoch 0 */
	for (uint32_t k = 0; k < 4; k++) {
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 42, &r, &x), 0);
		prep_sample_data(x, &one);
		prep_sample_put(v, x);
	}
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 4);
	ck_assert_uint_eq(st.staged_bytes, 2 * one); /* versions 0 and 1 */
	for (uint32_t k = 0; k < 3; k++) {
		ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 42, &r, &x), 0);
		prep_sample_put(v, x);
	}
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.shared, 2);  /* versions 0 and 1 from A's decodes */
	ck_assert_uint_eq(st.decodes, 5); /* version 2 made again */
	ck_assert_uint_eq(st.staged_bytes, 0);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* A job named after a process that exited keeps nothing: once the sweep
 * finds the process gone, the samples kept for it go. */
START_TEST(view_ended_process_keeps_nothing)
{
	struct src s;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 4};
	struct prep_recipe r;
	struct prep_sample *x;
	struct prep_stats st;
	uint32_t ver;
	char name[64], stat[512];
	int go[2];

	src_fill(&s, 2);
	prep_recipe_parse("rrc48", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(pipe(go), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char c;
		close(go[1]);
		_exit(read(go[0], &c, 1) < 0);
	}
	close(go[0]);
	/* its name as prep_job_of_pid gives it: the job of a reading process */
	ck_assert_int_eq(prep_job_of_pid(pid, name, sizeof(name)), 0);
	snprintf(stat, sizeof(stat), "pid:%d:", (int)pid);
	ck_assert_msg(strncmp(name, stat, strlen(stat)) == 0, "job name %s", name);
	ck_assert_int_eq(prep_view_next_version(v, 0, name, 1, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 0, "live", 1, &ver), 0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 42, &r, &x), 0);
	prep_sample_put(v, x);
	prep_view_stats(v, &st);
	ck_assert_uint_gt(st.staged_bytes, 0);
	usleep(1100 * 1000); /* both quiet for a second: looked for */
	pthread_mutex_lock(&v->lock);
	prep__sweep_idle(v);
	pthread_mutex_unlock(&v->lock);
	prep_view_stats(v, &st);
	ck_assert_uint_gt(st.staged_bytes, 0); /* its process still runs; "live" is a name */
	close(go[1]);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	ck_assert_int_eq(prep_view_next_version(v, 0, "live", 2, &ver), 0);
	usleep(1100 * 1000);
	pthread_mutex_lock(&v->lock);
	prep__sweep_idle(v);
	pthread_mutex_unlock(&v->lock);
	prep_view_stats(v, &st);
	ck_assert_uint_gt(st.staged_bytes, 0); /* "live" is still active */
	ck_assert_int_eq(prep_view_open_job(v, 0, "live", 0, 42, &r, &x), 0);
	prep_sample_put(v, x);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.shared, 1);
	ck_assert_uint_eq(st.staged_bytes, 0); /* nobody left to keep it for */
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

START_TEST(view_budget_and_redecode)
{
	struct src s;
	struct prep_recipe r;
	uint64_t one;
	struct prep_stats st;

	src_fill(&s, 12);
	prep_recipe_parse("rrc32", &r);
	prep_output_size(&r, 1, 1, &one);
	struct prep_config cfg = {
	    .seed = 3, .mem_budget = 3 * one + one / 2, .threads = 2, .nfiles = 13};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	uint32_t ver;
	ck_assert_int_eq(prep_view_next_version(v, 0, "B", 12, &ver), 0); /* B active */
	uint8_t *first = NULL;
	size_t first_len = 0;
	for (uint32_t f = 0; f < 12; f++) {
		struct prep_sample *x;
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", f, 500 + f, &r, &x), 0);
		if (f == 0) {
			const uint8_t *p = prep_sample_data(x, &first_len);
			first = malloc(first_len);
			memcpy(first, p, first_len);
		}
		prep_sample_put(v, x);
		prep_view_stats(v, &st);
		ck_assert_msg(st.staged_bytes <= cfg.mem_budget, "staged %llu > budget %llu",
			      (unsigned long long)st.staged_bytes,
			      (unsigned long long)cfg.mem_budget);
	}
	ck_assert_uint_eq(st.staged_bytes, 3 * one);
	ck_assert_uint_eq(st.decodes, 12);
	/* file 0 was dropped (oldest first): B decodes it again, bit-identical */
	struct prep_sample *x;
	size_t len;
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 500, &r, &x), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 13);
	const uint8_t *p = prep_sample_data(x, &len);
	ck_assert(len == first_len && memcmp(p, first, len) == 0);
	prep_sample_put(v, x);
	/* the newest (file 11) is still staged: shared */
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 11, 511, &r, &x), 0);
	prep_sample_put(v, x);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 13);
	free(first);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Jobs are keyed by (uid, name): the same COORDFS_JOB under two uids is
 * two jobs with their own versions. */
START_TEST(view_jobs_per_uid)
{
	struct src s;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 4};
	uint32_t ver;

	src_fill(&s, 2);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (uint32_t k = 0; k < 3; k++) {
		ck_assert_int_eq(prep_view_next_version(v, 1000, "J", 0, &ver), 0);
		ck_assert_uint_eq(ver, k);
	}
	ck_assert_int_eq(prep_view_next_version(v, 1001, "J", 0, &ver), 0);
	ck_assert_uint_eq(ver, 0);
	ck_assert_int_eq(prep_view_next_version(v, 1000, "J", 0, &ver), 0);
	ck_assert_uint_eq(ver, 3);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* A full table never hands out the slot of a job with an open file or a
 * recent request; a uid over its quarter reuses its own slots only. */
START_TEST(view_job_table_full)
{
	struct src s;
	struct prep_recipe r;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 4,
				  .job_idle_s = 1.0, .max_jobs = 8};
	struct prep_stats st;
	struct prep_sample *held, *x;
	uint32_t ver;
	char name[16];

	src_fill(&s, 2);
	prep_recipe_parse("rrc32", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(prep_view_open_job(v, 7, "keep", 0, 1, &r, &held), 0); /* version 0 */
	usleep(1200 * 1000); /* "keep" is idle, but holds an open file */
	/* uid 7 may hold 2 of 8 slots: "keep" and one more, reused while idle */
	ck_assert_int_eq(prep_view_next_version(v, 7, "b", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 7, "c", 0, &ver), -EAGAIN); /* b is active */
	usleep(1200 * 1000);
	ck_assert_int_eq(prep_view_next_version(v, 7, "c", 0, &ver), 0); /* takes b's slot */
	ck_assert_uint_eq(ver, 0);
	/* other uids fill the rest, active */
	for (unsigned u = 0; u < 6; u++) {
		snprintf(name, sizeof(name), "u%u", u);
		ck_assert_int_eq(prep_view_next_version(v, 100 + u, name, 0, &ver), 0);
	}
	ck_assert_int_eq(prep_view_next_version(v, 200, "new", 0, &ver), -EAGAIN);
	ck_assert_int_eq(prep_view_open_job(v, 200, "new", 0, 1, &r, &x), -EAGAIN);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.jobs, 8);
	ck_assert_uint_ge(st.refused, 1);
	usleep(1200 * 1000);
	/* now every job but "keep" is idle: a new one gets a slot, "keep" keeps its own */
	ck_assert_int_eq(prep_view_next_version(v, 200, "new", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 7, "keep", 0, &ver), 0);
	ck_assert_uint_eq(ver, 1);
	prep_sample_put(v, held);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Jobs that ended give their version counters back when memory is wanted:
 * 60 one-off jobs (each run without COORDFS_JOB is a new job) in a budget
 * that holds the counters of 3 (and one decode) never fail for memory; a
 * job with an open file or a recent request keeps its counters. */
START_TEST(view_idle_jobs_reclaimed)
{
	struct src s;
	struct prep_recipe r;
	struct budget b;
	struct prep_stats st;
	struct prep_sample *held;
	const uint32_t nfiles = 1u << 18; /* 512 KiB of counters a job */
	uint64_t one, work;
	uint32_t ver;
	char name[16];

	src_fill(&s, 2);
	prep_recipe_parse("rrc32", &r);
	prep_output_size(&r, 1, 1, &one);
	ck_assert_int_eq(prep_decode_mem(&r, s.data[0], s.len[0], &work), 0);
	/* the counters of 3 jobs, and one decode */
	ck_assert_uint_lt(one + s.len[0] + work + 64, 2 * nfiles);
	budget_init(&b, 3 * 2 * nfiles + one + s.len[0] + work + 64);
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = nfiles,
				  .mem = &b, .mem_wait_ms = 20, .job_idle_s = 0.02, .max_jobs = 1024};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	/* "keep" holds a sample open; "busy" stays active */
	ck_assert_int_eq(prep_view_open_job(v, 0, "keep", 0, 1, &r, &held), 0);
	for (unsigned i = 0; i < 60; i++) {
		snprintf(name, sizeof(name), "run%u", i);
		ck_assert_int_eq(prep_view_next_version(v, 0, name, 1, &ver), 0);
		ck_assert_uint_eq(ver, 0);
		usleep(25000); /* the run ends: inactive after job_idle_s */
	}
	ck_assert_uint_le(atomic_load(&b.peak), b.limit);
	prep_view_stats(v, &st);
	ck_assert_uint_ge(st.jobs_reclaimed, 58);
	ck_assert_uint_eq(st.refused, 0);
	/* "keep" held a file: its counters survived, its next open is version 1 */
	ck_assert_int_eq(prep_view_next_version(v, 0, "keep", 0, &ver), 0);
	ck_assert_uint_eq(ver, 1);
	prep_sample_put(v, held);
	/* an active job is never robbed: with two active holders the third fails */
	usleep(30000);
	ck_assert_int_eq(prep_view_next_version(v, 0, "a", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 0, "b", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 0, "c", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 0, "d", 0, &ver), -ENOMEM);
	ck_assert_int_eq(prep_view_next_version(v, 0, "a", 0, &ver), 0);
	ck_assert_uint_eq(ver, 1);
	prep_view_destroy(v);
	ck_assert_uint_eq(budget_used(&b), 0);
	budget_fini(&b);
	src_free(&s);
}
END_TEST

/* With a byte budget: samples and decodes are charged, a full budget
 * refuses opens with -ENOMEM without consuming the version, and everything
 * is given back at the end. */
START_TEST(view_mem_budget)
{
	struct src s;
	struct prep_recipe r;
	struct budget b;
	uint64_t one, work;
	struct prep_stats st;
	struct prep_sample *x[4], *y;

	src_fill(&s, 2);
	prep_recipe_parse("rrc64", &r);
	prep_output_size(&r, 1, 1, &one);
	ck_assert_int_eq(prep_decode_mem(&r, s.data[0], s.len[0], &work), 0);
	ck_assert_uint_gt(work, one);
	/* three pinned samples, and one decode (source + work) at a time */
	budget_init(&b, 3 * one + s.len[0] + work + 64);
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 2,
				  .mem = &b, .mem_wait_ms = 20};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 9, &r, &x[i]), 0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 9, &r, &x[3]), -ENOMEM);
	ck_assert_uint_le(atomic_load(&b.peak), b.limit);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.refused, 1);
	ck_assert_uint_eq(st.errors, 0);
	/* room again: the next open is version 3 (the refused one took none),
	 * identical to another job's fourth open */
	prep_sample_put(v, x[0]);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 9, &r, &x[0]), 0);
	size_t la, lb;
	const uint8_t *pa = prep_sample_data(x[0], &la);
	uint8_t *copy = malloc(la);
	memcpy(copy, pa, la);
	for (unsigned i = 0; i < 3; i++)
		prep_sample_put(v, x[i]);
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 9, &r, &y), 0);
		const uint8_t *pb = prep_sample_data(y, &lb);
		if (i == 3)
			ck_assert(lb == la && memcmp(pb, copy, la) == 0);
		else
			ck_assert(lb != la || memcmp(pb, copy, la) != 0);
		prep_sample_put(v, y);
	}
	free(copy);
	prep_view_destroy(v);
	ck_assert_uint_eq(budget_used(&b), 0);
	budget_fini(&b);
	src_free(&s);
}
END_TEST

/* A decode whose working memory exceeds the whole budget can never be
 * served: it fails like a broken image (-EFBIG, counted in errors, logged),
 * not as a memory refusal that every open would meet again in silence. */
START_TEST(view_work_over_budget)
{
	struct src s;
	struct prep_recipe r;
	struct budget b;
	uint64_t one, work;
	struct prep_stats st;
	struct prep_sample *x = NULL;

	src_fill(&s, 2);
	prep_recipe_parse("center32", &r);
	prep_output_size(&r, 1, 1, &one);
	ck_assert_int_eq(prep_decode_mem(&r, s.data[0], s.len[0], &work), 0);
	/* room for the sample and the source, not for the decode */
	budget_init(&b, one + s.len[0] + 64);
	ck_assert_uint_gt(work, b.limit);
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 2,
				  .mem = &b, .mem_wait_ms = 20};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 9, &r, &x), -EFBIG);
	ck_assert_ptr_null(x);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.errors, 1);
	ck_assert_uint_eq(st.refused, 0);
	prep_view_destroy(v);
	ck_assert_uint_eq(budget_used(&b), 0);
	budget_fini(&b);
	src_free(&s);
}
END_TEST

START_TEST(view_deterministic_cached)
{
	struct src s;
	struct prep_recipe r;
	struct prep_stats st;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 3};

	src_fill(&s, 2);
	prep_recipe_parse("center32", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int round = 0; round < 3; round++) {
		for (int j = 0; j < 2; j++) {
			struct prep_sample *x;
			ck_assert_int_eq(prep_view_open_job(v, 0, j ? "B" : "A", 1, 9, &r, &x), 0);
			prep_sample_put(v, x);
		}
	}
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 1);
	ck_assert_uint_eq(st.shared, 5);
	ck_assert_uint_eq(st.staged_bytes, prep_ppm_size(32, 32));
	/* resize: size for stat from the header */
	uint64_t bytes, want;
	struct prep_recipe rs;
	prep_recipe_parse("resize64", &rs);
	ck_assert_int_eq(prep_view_size(v, 1, &rs, &bytes), 0);
	ck_assert_int_eq(prep_output_size(&rs, 128, 94, &want), 0);
	ck_assert_uint_eq(bytes, want);
	ck_assert_int_eq(prep_view_size(v, 1, &rs, &bytes), 0); /* cached dims */
	ck_assert_uint_eq(bytes, want);
	ck_assert_int_eq(prep_view_size(v, 2, &rs, &bytes), -ENOENT);
	ck_assert_int_eq(prep_view_size(v, 1, &r, &bytes), 0);
	ck_assert_uint_eq(bytes, prep_ppm_size(32, 32));
	/* a file that does not decode: error, counted, not cached */
	s.len[0] = 100;
	struct prep_sample *x = NULL;
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 1, &r, &x), -EIO);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 1, &r, &x), -EIO);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 2, 1, &r, &x), -ENOENT);
	ck_assert_ptr_null(x);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.errors, 3);
	ck_assert_uint_eq(st.staged_bytes, prep_ppm_size(32, 32));
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Several jobs, each with several reader threads, read every file once per
 * epoch in their own order, under a budget of a few samples: every sample
 * must be exactly version (epoch) of its file, whoever decoded it. */
struct stress_job {
	struct prep_view *v;
	struct src *s;
	const char *name;
	unsigned nfiles, epochs, id;
	uint8_t *expect[12][3]; /* [file][version] */
	size_t expect_len[12][3];
	_Atomic unsigned next; /* work counter shared by the job's threads */
	_Atomic unsigned bad;
	pthread_barrier_t *epoch_barrier;
};

static void *stress_reader(void *arg)
{
	struct stress_job *j = arg;
	struct prep_recipe r;

	prep_recipe_parse("rrc32", &r);
	for (unsigned e = 0; e < j->epochs; e++) {
		for (;;) {
			unsigned i = atomic_fetch_add(&j->next, 1);
			if (i >= (e + 1) * j->nfiles) {
				atomic_fetch_sub(&j->next, 1);
				break;
			}
			/* a per-job, per-epoch permutation of the files */
			unsigned f = (unsigned)((i % j->nfiles) * 5 + j->id * 3 + e) % j->nfiles;
			struct prep_sample *x;
			size_t len;
			if (prep_view_open_job(j->v, 0, j->name, f, 900 + f, &r, &x) != 0) {
				atomic_fetch_add(&j->bad, 1);
				continue;
			}
			const uint8_t *p = prep_sample_data(x, &len);
			if (len != j->expect_len[f][e] || memcmp(p, j->expect[f][e], len) != 0)
				atomic_fetch_add(&j->bad, 1);
			prep_sample_put(j->v, x);
		}
		pthread_barrier_wait(j->epoch_barrier);
	}
	return NULL;
}

START_TEST(view_stress_versions)
{
	enum { JOBS = 3, THREADS = 3, FILES = 12, EPOCHS = 3 };
	static const char *names[JOBS] = {"j0", "j1", "j2"};
	struct src s;
	struct prep_recipe r;
	uint64_t one;
	struct stress_job jobs[JOBS];
	pthread_barrier_t barriers[JOBS];
	pthread_t t[JOBS][THREADS];
	struct prep_stats st;

	src_fill(&s, FILES);
	prep_recipe_parse("rrc32", &r);
	prep_output_size(&r, 1, 1, &one);
	struct prep_config cfg = {.seed = 77, .mem_budget = 4 * one, .threads = 2, .nfiles = FILES};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int j = 0; j < JOBS; j++) {
		memset(&jobs[j], 0, sizeof(jobs[j]));
		jobs[j] = (struct stress_job){.v = v,
					      .s = &s,
					      .name = names[j],
					      .nfiles = FILES,
					      .epochs = EPOCHS,
					      .id = (unsigned)j,
					      .epoch_barrier = &barriers[j]};
		pthread_barrier_init(&barriers[j], NULL, THREADS);
		for (unsigned f = 0; f < FILES; f++)
			for (unsigned e = 0; e < EPOCHS; e++) {
				if (j == 0)
					ck_assert_int_eq(prep_render(&r, s.data[f], s.len[f], 77,
								     900 + f, e,
								     &jobs[0].expect[f][e],
								     &jobs[0].expect_len[f][e]),
							 0);
				else {
					jobs[j].expect[f][e] = jobs[0].expect[f][e];
					jobs[j].expect_len[f][e] = jobs[0].expect_len[f][e];
				}
			}
	}
	for (int j = 0; j < JOBS; j++)
		for (int k = 0; k < THREADS; k++)
			pthread_create(&t[j][k], NULL, stress_reader, &jobs[j]);
	for (int j = 0; j < JOBS; j++)
		for (int k = 0; k < THREADS; k++)
			pthread_join(t[j][k], NULL);
	prep_view_stats(v, &st);
	for (int j = 0; j < JOBS; j++)
		ck_assert_msg(atomic_load(&jobs[j].bad) == 0, "job %d: %u wrong samples", j,
			      atomic_load(&jobs[j].bad));
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.decodes + st.shared, JOBS * FILES * EPOCHS);
	ck_assert_uint_ge(st.decodes, FILES * EPOCHS);
	ck_assert_uint_le(st.staged_bytes, cfg.mem_budget);
	for (unsigned f = 0; f < FILES; f++)
		for (unsigned e = 0; e < EPOCHS; e++)
			free(jobs[0].expect[f][e]);
	for (int j = 0; j < JOBS; j++)
		pthread_barrier_destroy(&barriers[j]);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

void prep_view_tests(TCase *tc)
{
	tcase_add_test(tc, view_single_flight);
	tcase_add_test(tc, view_decode_bound);
	tcase_add_test(tc, view_versions_and_release);
	tcase_add_test(tc, view_keeps_within_an_epoch);
	tcase_add_test(tc, view_ended_process_keeps_nothing);
	tcase_add_test(tc, view_budget_and_redecode);
	tcase_add_test(tc, view_jobs_per_uid);
	tcase_add_test(tc, view_job_table_full);
	tcase_add_test(tc, view_idle_jobs_reclaimed);
	tcase_add_test(tc, view_mem_budget);
	tcase_add_test(tc, view_work_over_budget);
	tcase_add_test(tc, view_deterministic_cached);
	tcase_add_test(tc, view_stress_versions);
}
