/* SPDX-License-Identifier: MIT */
/*
 * Decode-ahead (prep/ahead.h): which sample to decode next, whether the
 * machine leaves idle CPU for it (the /proc/stat probe), and the threads
 * that decode and stage those samples.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/budget.h"
#include "common/log.h"
#include "prep/ahead.h"
#include "prep/jobs.h"
#include "prep/table.h"
#include "prep/view_state.h"

#define AHEAD_SCAN 4096 /* files a decode-ahead thread looks at per lock hold */
#define AHEAD_NICE 19
#define AHEAD_IDLE_MS 100  /* how often decode-ahead looks at the CPUs' idle time */

/* The next sample to decode ahead, outside the table (opens never wait
 * for a decode at low priority: the sample joins the table once ready,
 * ahead_publish), with its expected bytes reserved, or NULL. For an active job
 * that has opened each of its files e >= 1 times and is part way into its
 * next pass (opens = e x files + some): a file it has not read in this
 * pass (next[f] == e), whose version e is neither staged nor in flight,
 * under the random recipe it opened last. Nothing at a pass boundary, so a
 * job that ends leaves nothing decoded for a pass that never comes. Looks
 * at AHEAD_SCAN files per call, taking up where it left off; a job whose
 * whole table was seen without a candidate is skipped until its next pass.
 * Under lock. */
static struct sample *ahead_pick(struct prep_view *v)
{
	double now = now_s();

	if (v->ahead_bytes >= v->ahead_cap)
		return NULL;
	for (unsigned t = 0; t < v->njobs; t++) {
		unsigned ji = (v->ahead_job + t) % v->njobs;
		struct job *j = v->jobs[ji];

		if (!prep__job_active(v, j, now) || !j->next || !j->has_recipe || j->seen == 0)
			continue;
		uint64_t pass = j->opens / j->seen;
		if (pass == 0 || pass >= UINT16_MAX || j->opens % j->seen == 0 ||
		    j->ahead_done == pass + 1)
			continue;
		uint32_t e = (uint32_t)pass;
		for (uint32_t step = 0; step < AHEAD_SCAN; step++) {
			uint32_t f = j->ahead_at;
			j->ahead_at = f + 1 < v->cfg.nfiles ? f + 1 : 0;
			if (++j->ahead_seen >= v->cfg.nfiles) {
				j->ahead_seen = 0;
				j->ahead_done = e + 1; /* nothing left this epoch */
				break;
			}
			if (j->next[f] != e || prep__table_find(v, f, &j->recipe, e))
				continue;
			uint64_t want = prep__expected_len(v, f, &j->recipe);
			if (v->cfg.mem && !budget_try(v->cfg.mem, want))
				return NULL; /* no free memory: wait for some */
			struct sample *s = calloc(1, sizeof(*s));
			if (!s) {
				prep__mem_release(v, want);
				return NULL;
			}
			atomic_init(&s->refs, 1);
			prep__sample_init(v, s, f, v->ops.file_key(v->arg, f), &j->recipe, e, false, want);
			s->ahead = true;
			j->ahead_seen = 0;
			v->ahead_job = ji;
			return s;
		}
	}
	return NULL;
}

/* Idle time of the machine as decode-ahead sees it: cores idle (idle +
 * iowait in /proc/stat) plus the cores the ahead threads themselves use,
 * over the time since the last look. */
struct idle_probe {
	double at;	 /* monotonic seconds of the last look */
	double idle_s;	 /* /proc/stat idle + iowait, in seconds, then */
	double ahead_s;	 /* CPU seconds of the ahead threads, then */
	bool verdict;	 /* at least cfg.ahead_idle cores idle in the last window */
};

static double proc_idle_s(void)
{
	unsigned long long v[5] = {0};
	FILE *f = fopen("/proc/stat", "re");
	int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4])
		  : 0;

	if (f)
		fclose(f);
	long hz = sysconf(_SC_CLK_TCK);
	return n == 5 && hz > 0 ? (double)(v[3] + v[4]) / (double)hz : -1;
}

/* Whether decoding ahead may go on: looks again once AHEAD_IDLE_MS have
 * passed, and while the verdict is no, sleeps (without the lock) and looks
 * again. Decoding ahead only uses time the loaders leave: on cores they
 * keep busy it does nothing at all (its decodes would take turns on the
 * CPU, and their samples might be waited for). false: stop. */
static bool ahead_may_run(struct prep_view *v, struct idle_probe *p)
{
	if (v->cfg.ahead_idle <= 0)
		return true;
	for (;;) {
		double now = now_s();
		if (now - p->at >= AHEAD_IDLE_MS / 1000.0) {
			double idle = proc_idle_s();
			double ahead = (double)atomic_load(&v->ahead_cpu_ns) / 1e9;
			if (idle < 0) {
				p->verdict = true; /* no /proc/stat: nice 19 alone */
			} else if (p->at > 0) {
				double cores = (idle - p->idle_s + ahead - p->ahead_s) / (now - p->at);
				p->verdict = cores >= v->cfg.ahead_idle;
			}
			p->at = now;
			p->idle_s = idle;
			p->ahead_s = ahead;
		}
		if (p->verdict)
			return true;
		struct timespec ts = {0, AHEAD_IDLE_MS * 1000000L};
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&v->lock);
		bool stop = v->stop;
		pthread_mutex_unlock(&v->lock);
		if (stop)
			return false;
	}
}

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Decode s (from ahead_pick) and put it in the table, staged, unless an
 * open made the same sample meanwhile, no active job needs it any more, or
 * it does not fit where decode-ahead may stage (prep__admit): then it is dropped
 * (ahead_wasted). A failure is left to the open that decodes the file. */
static void ahead_decode(struct prep_view *v, struct sample *s)
{
	uint8_t *ppm = NULL;
	size_t ppmlen = 0;
	int rc = prep__decode_charged(v, s, &ppm, &ppmlen);

	stat_add(&v->st_decodes, 1);
	if (rc < 0) {
		prep__mem_release(v, s->charged);
		s->charged = 0;
		prep__sample_unref(s);
		return;
	}
	s->data = ppm;
	s->len = ppmlen;
	s->state = SAMPLE_READY;
	pthread_mutex_lock(&v->lock);
	if (prep__table_find(v, s->file_index, &s->recipe, s->version) ||
	    !prep__still_needed(v, NULL, s->file_index, s->version, now_s())) {
		stat_add(&v->st_ahead_wasted, 1);
		pthread_mutex_unlock(&v->lock);
		prep__sample_unref(s);
		return;
	}
	prep__table_insert(v, s); /* our reference becomes the table's */
	prep__admit(v, s);
	pthread_mutex_unlock(&v->lock);
}

void *prep__ahead_main(void *arg)
{
	struct prep_view *v = arg;
	struct idle_probe probe = {0};
	pid_t self = (pid_t)syscall(SYS_gettid);

	prep__on_ahead_thread = true;
	/* Low priority: the loader's processes come first on every core. */
	if (setpriority(PRIO_PROCESS, (id_t)self, AHEAD_NICE) < 0)
		log_warn("prep: decode-ahead thread: cannot lower its priority: %s",
			 strerror(errno));
	for (;;) {
		/* Look at the CPUs first: a sample in the table is waited for
		 * by its opener, so nothing is picked before it can be decoded. */
		if (!ahead_may_run(v, &probe))
			return NULL;
		pthread_mutex_lock(&v->lock);
		struct sample *s = v->stop ? NULL : ahead_pick(v);
		if (!s) {
			if (!v->stop) {
				struct timespec until;
				clock_gettime(CLOCK_REALTIME, &until);
				until.tv_sec += 1;
				pthread_cond_timedwait(&v->ahead_wake, &v->lock, &until);
			}
			bool stop = v->stop;
			pthread_mutex_unlock(&v->lock);
			if (stop)
				return NULL;
			continue;
		}
		pthread_mutex_unlock(&v->lock);
		double t0 = thread_cpu_s();
		ahead_decode(v, s);
		atomic_fetch_add(&v->ahead_cpu_ns, (uint64_t)((thread_cpu_s() - t0) * 1e9));
	}
}
