/* SPDX-License-Identifier: MIT */
/*
 * The staging engine behind the prepared view, its public face
 * (prep_view_* of prep/prep.h): creating and destroying a view, opens (on
 * the opening thread or, when cfg.threads decodes already run, through the
 * pool of decode threads here), puts, stat sizes and statistics. The
 * samples and their memory are in table.c, the decoded tier in tier.c,
 * decode-ahead in ahead.c, the jobs in jobs.c; their shared state and its
 * locking in view_state.h. See prep/README.md.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/budget.h"
#include "common/log.h"
#include "prep/ahead.h"
#include "prep/jobs.h"
#include "prep/prep.h"
#include "prep/resample.h"
#include "prep/table.h"
#include "prep/tier.h"
#include "prep/view_state.h"

#define DEFAULT_WAIT_MS 250
#define SWEEP_S 5 /* idle decode threads look for unneeded samples this often */
#define MAX_THREADS 256
#define PREFIX_BYTES (64u << 10)

/* A pool thread: takes the queue in FIFO order when a decode slot is free;
 * every SWEEP_S with nothing to do, frees the kept decode buffers and drops
 * the samples no active job will read. */
static void *worker_main(void *arg)
{
	struct prep_view *v = arg;
	struct timespec next_sweep;

	clock_gettime(CLOCK_REALTIME, &next_sweep);
	next_sweep.tv_sec += SWEEP_S;
	pthread_mutex_lock(&v->lock);
	for (;;) {
		while ((!v->q_head || v->active >= v->cfg.threads) && !v->stop) {
			if (pthread_cond_timedwait(&v->work, &v->lock, &next_sweep) != ETIMEDOUT)
				continue;
			if (v->active == 0 && prep__scratch_kept()) {
				/* no decode running: free the kept decode buffers */
				pthread_mutex_unlock(&v->lock);
				prep__scratch_drop();
				pthread_mutex_lock(&v->lock);
			}
			if (v->fifo_head) {
				prep__sweep_idle(v);
				if (v->cfg.mem) { /* malloc_trim may take a while */
					pthread_mutex_unlock(&v->lock);
					budget_trim(v->cfg.mem);
					pthread_mutex_lock(&v->lock);
				}
			}
			clock_gettime(CLOCK_REALTIME, &next_sweep);
			next_sweep.tv_sec += SWEEP_S;
		}
		if (v->stop)
			break;
		struct sample *s = v->q_head;
		v->q_head = s->qnext;
		if (!v->q_head)
			v->q_tail = NULL;
		s->qnext = NULL;
		v->active++;
		pthread_mutex_unlock(&v->lock);
		prep__decode_one(v, s);
		prep__sample_unref(s); /* the queue's reference */
		pthread_mutex_lock(&v->lock);
	}
	pthread_mutex_unlock(&v->lock);
	return NULL;
}

/* The next version of f for j, its version counters charged first (under
 * lock, so without waiting: after making room when the budget is full). */
static int take_version(struct prep_view *v, struct job *j, uint32_t f, uint32_t *version)
{
	int rc = prep__job_take_version(v, j, f, version);

	if (rc == -ENOSPC) {
		prep__evict_for_mem(v, prep__job_counters_bytes(v));
		rc = prep__job_take_version(v, j, f, version);
	}
	return rc == -ENOSPC ? -ENOMEM : rc;
}

int prep_default_shares(uint64_t mem, bool mem_given, uint64_t dataset_bytes, uint64_t nfiles,
			uint64_t avail, uint64_t *mem_out, uint64_t *decoded_out)
{
	if (!mem_out || !decoded_out)
		return -EINVAL;
	uint64_t half = mem / 2, need = UINT64_MAX;

	/* JPEG photos decode to 6-10x their bytes (a 95 KB 500x375 q90 file
	 * to 562 KB): 8 covers most. The tier is charged only for what it
	 * holds, so an estimate too high takes no memory, only staging room
	 * within a given --prep-mem; one too low costs decodes (refused
	 * admissions) */
	if (dataset_bytes && dataset_bytes <= UINT64_MAX / 16 / PREP_DECODED_PER_BYTE &&
	    nfiles <= UINT64_MAX / 16)
		need = dataset_bytes * PREP_DECODED_PER_BYTE + 8 * nfiles;
	if (need < PREP_TIER_HUGE_MIN)
		need = PREP_TIER_HUGE_MIN;
	if (mem_given) {
		*mem_out = mem;
		*decoded_out = need <= mem / 4 * 3 ? need : half;
		return 0;
	}
	uint64_t d = need < avail / 2 ? need : avail / 2;
	if (need == UINT64_MAX || d < half)
		d = need < half ? need : half;
	*decoded_out = d;
	*mem_out = d + half > mem ? d + half : mem;
	return 0;
}

struct prep_view *prep_view_create(const struct prep_config *cfg, const struct prep_source_ops *ops,
				   void *arg)
{
	struct prep_view *v;

	if (!cfg || !ops || !ops->read_file || cfg->nfiles == 0) {
		errno = EINVAL;
		return NULL;
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		errno = ENOMEM;
		return NULL;
	}
	v->cfg = *cfg;
	if (v->cfg.job_idle_s <= 0)
		v->cfg.job_idle_s = 30.0;
	if (v->cfg.threads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		v->cfg.threads = n > 0 ? (unsigned)n : 1;
	}
	if (v->cfg.threads > MAX_THREADS)
		v->cfg.threads = MAX_THREADS;
	if (v->cfg.mem_wait_ms == 0)
		v->cfg.mem_wait_ms = DEFAULT_WAIT_MS;
	if (v->cfg.max_jobs == 0)
		v->cfg.max_jobs = PREP_MAX_JOBS;
	if (v->cfg.decoded_mem > v->cfg.mem_budget)
		v->cfg.decoded_mem = v->cfg.mem_budget;
	v->det_cap = (v->cfg.mem_budget - v->cfg.decoded_mem) / 4 * 3;
	v->ops = *ops;
	v->arg = arg;
	v->nbuckets = 1024;
	v->buckets = calloc(v->nbuckets, sizeof(*v->buckets));
	v->threads = calloc(v->cfg.threads, sizeof(*v->threads));
	if (!v->buckets || !v->threads) {
		free(v->buckets);
		free(v->threads);
		free(v);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&v->lock, NULL);
	pthread_mutex_init(&v->pid_lock, NULL);
	pthread_mutex_init(&v->tier_lock, NULL);
	prep__tier_init(v);
	pthread_cond_init(&v->work, NULL);
	pthread_cond_init(&v->ahead_wake, NULL);
	v->ahead_cap = (v->cfg.mem_budget - v->cfg.decoded_mem) / 4;
	if (v->cfg.ahead_idle < 0)
		v->cfg.ahead_idle = AHEAD_IDLE_MIN;
	for (unsigned i = 0; i < v->cfg.threads; i++) {
		if (pthread_create(&v->threads[i], NULL, worker_main, v) != 0) {
			log_err("prep: cannot start decode thread %u", i);
			if (i == 0) {
				prep_view_destroy(v);
				errno = EAGAIN;
				return NULL;
			}
			break;
		}
		v->nthreads++;
	}
	if (v->cfg.ahead_threads && v->ops.file_key && v->ahead_cap) {
		unsigned n = v->cfg.ahead_threads < MAX_THREADS ? v->cfg.ahead_threads : MAX_THREADS;
		v->ahead_tids = calloc(n, sizeof(*v->ahead_tids));
		for (unsigned i = 0; v->ahead_tids && i < n; i++) {
			if (pthread_create(&v->ahead_tids[i], NULL, prep__ahead_main, v) != 0) {
				log_warn("prep: started %u of %u decode-ahead threads", i, n);
				break;
			}
			v->nahead++;
		}
	}
	return v;
}

void prep_view_destroy(struct prep_view *v)
{
	if (!v)
		return;
	pthread_mutex_lock(&v->lock);
	v->stop = true;
	pthread_cond_broadcast(&v->work);
	pthread_cond_broadcast(&v->ahead_wake);
	pthread_mutex_unlock(&v->lock);
	for (unsigned i = 0; i < v->nthreads; i++)
		pthread_join(v->threads[i], NULL);
	for (unsigned i = 0; i < v->nahead; i++)
		pthread_join(v->ahead_tids[i], NULL);
	free(v->ahead_tids);
	/* Queued samples hold a queue reference besides the table's. */
	for (struct sample *s = v->q_head, *next; s; s = next) {
		next = s->qnext;
		prep__sample_unref(s);
	}
	for (size_t i = 0; i < v->nbuckets; i++) {
		struct sample *s = v->buckets[i], *next;
		for (; s; s = next) {
			next = s->hnext;
			prep__sample_unref(s);
		}
	}
	prep__jobs_free(v);
	free(v->buckets);
	free(v->threads);
	free((void *)v->dims);
	prep__tier_free(v);
	pthread_mutex_destroy(&v->tier_lock);
	pthread_cond_destroy(&v->work);
	pthread_cond_destroy(&v->ahead_wake);
	pthread_mutex_destroy(&v->lock);
	pthread_mutex_destroy(&v->pid_lock);
	free(v);
	prep__scratch_drop();
}

int prep_view_next_version(struct prep_view *v, uid_t uid, const char *job, uint32_t file_index,
			   uint32_t *version)
{
	int rc = -EAGAIN;

	if (!v || !job || !*job || strlen(job) >= PREP_JOB_NAME_MAX || !version ||
	    file_index >= v->cfg.nfiles)
		return -EINVAL;
	pthread_mutex_lock(&v->lock);
	struct job *j = prep__job_get(v, uid, job, now_s());
	if (j)
		rc = take_version(v, j, file_index, version);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int prep_view_open_job(struct prep_view *v, uid_t uid, const char *job, uint32_t file_index,
		       uint64_t file_key, const struct prep_recipe *r, struct prep_sample **out)
{
	struct prep_recipe rr;
	struct sample *s;
	uint32_t version = 0;
	double now = now_s();
	int rc = 0;

	if (!v || !job || !*job || strlen(job) >= PREP_JOB_NAME_MAX || !r || !out ||
	    file_index >= v->cfg.nfiles)
		return -EINVAL;
	char name[32];
	if (prep_recipe_name(r, name, sizeof(name)) < 0)
		return -EINVAL;
	rr = *r;
	rr.exact = v->cfg.exact;
	bool det = !prep_recipe_is_random(r);
	struct prep_sample *o = malloc(sizeof(*o));
	if (!o)
		return -ENOMEM;

	pthread_mutex_lock(&v->lock);
	struct job *j = prep__job_get(v, uid, job, now);
	if (!j) {
		pthread_mutex_unlock(&v->lock);
		free(o);
		stat_add(&v->st_refused, 1);
		return -EAGAIN;
	}
	j->open++; /* the slot stays ours while we wait, decode or hold it */
	bool taken = false;
	if (!det) {
		if ((rc = take_version(v, j, file_index, &version)) < 0)
			goto refused;
		taken = true;
		j->recipe = rr;
		j->has_recipe = true;
		if (v->nahead)
			pthread_cond_signal(&v->ahead_wake);
	}
	s = prep__table_find(v, file_index, &rr, version);
	if (!s) {
		/* A new sample: its bytes are reserved before anything is
		 * allocated, waiting (unlocked) for room if need be. */
		uint64_t want = prep__expected_len(v, file_index, &rr);
		if (v->cfg.mem && !budget_try(v->cfg.mem, want)) {
			pthread_mutex_unlock(&v->lock);
			rc = prep__mem_reserve(v, want);
			pthread_mutex_lock(&v->lock);
			if (rc < 0)
				goto refused;
			s = prep__table_find(v, file_index, &rr, version); /* made meanwhile? */
			if (s)
				prep__mem_release(v, want);
		}
		if (!s) {
			/* Neither staged nor in flight: the calling thread, which
			 * would only wait, decodes it itself when a decode slot is
			 * free (no hand-off to the pool, no extra wake-up); else the
			 * pool does. */
			bool inline_decode = v->active < v->cfg.threads;

			s = prep__sample_new(v, file_index, file_key, &rr, version, det, want,
				       inline_decode);
			if (!s) {
				prep__mem_release(v, want);
				rc = -ENOMEM;
				goto refused;
			}
			if (inline_decode) {
				v->active++;
				pthread_mutex_unlock(&v->lock);
				prep__decode_one(v, s);
				pthread_mutex_lock(&v->lock);
			} else {
				if (v->q_tail)
					v->q_tail->qnext = s;
				else
					v->q_head = s;
				v->q_tail = s;
				pthread_cond_signal(&v->work);
			}
		} else {
			atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
			stat_add(&v->st_shared, 1);
		}
	} else {
		atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
		stat_add(&v->st_shared, 1);
		if (s->ahead) { /* decoded ahead for this open */
			s->ahead = false;
			stat_add(&v->st_ahead, 1);
			if (s->staged)
				v->ahead_bytes -= s->len;
		}
	}
	while (s->state == SAMPLE_PENDING)
		pthread_cond_wait(&s->done, &v->lock);
	if (s->state == SAMPLE_FAILED) {
		rc = s->err;
	} else if (!det && s->in_table && !prep__still_needed(v, j, file_index, version, now)) {
		prep__table_remove(v, s); /* every active job has read it */
	}
	if (rc < 0) {
		pthread_mutex_unlock(&v->lock);
		prep__sample_unref(s);
		pthread_mutex_lock(&v->lock);
		if (rc == -ENOMEM)
			goto refused;
		j->open--;
		pthread_mutex_unlock(&v->lock);
		free(o);
		return rc;
	}
	pthread_mutex_unlock(&v->lock);
	o->s = s;
	o->j = j;
	*out = o;
	return 0;

refused:
	if (taken)
		prep__job_untake_version(j, file_index, version);
	j->open--;
	pthread_mutex_unlock(&v->lock);
	free(o);
	stat_add(&v->st_refused, 1);
	return -ENOMEM;
}

int prep_view_open(struct prep_view *v, pid_t pid, uid_t uid, uint32_t file_index,
		   uint64_t file_key, const struct prep_recipe *r, struct prep_sample **out)
{
	char name[PREP_JOB_NAME_MAX];

	if (!v)
		return -EINVAL;
	if (prep__job_of_pid_cached(v, pid, name) < 0)
		snprintf(name, sizeof(name), "pid:%d", (int)pid); /* process gone: its own job */
	return prep_view_open_job(v, uid, name, file_index, file_key, r, out);
}

const uint8_t *prep_sample_data(const struct prep_sample *o, size_t *len)
{
	if (len)
		*len = o ? o->s->len : 0;
	return o ? o->s->data : NULL;
}

void prep_sample_put(struct prep_view *v, struct prep_sample *o)
{
	if (!o)
		return;
	prep__sample_unref(o->s);
	pthread_mutex_lock(&v->lock);
	o->j->open--;
	o->j->last_active = now_s(); /* read until now */
	pthread_mutex_unlock(&v->lock);
	free(o);
	if (v->cfg.mem)
		budget_trim(v->cfg.mem);
}

/* The header's dimensions: from a prefix, else the whole file; both
 * buffers charged to the budget while they live. */
static int read_dims(struct prep_view *v, uint32_t f, unsigned *w, unsigned *h)
{
	uint8_t *data = NULL;
	size_t len = 0;
	int rc;

	if (v->ops.read_prefix) {
		if ((rc = prep__mem_reserve(v, PREFIX_BYTES)) < 0)
			return rc;
		rc = v->ops.read_prefix(v->arg, f, PREFIX_BYTES, &data, &len);
		if (rc == 0) {
			rc = prep_probe(data, len, w, h);
			free(data);
		}
		prep__mem_release(v, PREFIX_BYTES);
		if (rc != -ENODATA || len < PREFIX_BYTES)
			return rc == -ENODATA ? -EIO : rc;
	}
	uint64_t charge = v->ops.file_size ? v->ops.file_size(v->arg, f) : 0;
	if ((rc = prep__mem_reserve(v, charge)) < 0)
		return rc;
	rc = v->ops.read_file(v->arg, f, &data, &len);
	if (rc == 0) {
		rc = prep_probe(data, len, w, h);
		free(data);
	}
	prep__mem_release(v, charge);
	return rc == -ENODATA ? -EIO : rc;
}

int prep_view_size(struct prep_view *v, uint32_t file_index, const struct prep_recipe *r,
		   uint64_t *bytes)
{
	unsigned w, h;
	int rc;

	if (!v || !r || !bytes || file_index >= v->cfg.nfiles)
		return -EINVAL;
	if (r->kind != PREP_RESIZE) {
		if (prep_output_dims(r, 1, 1, &w, &h) < 0)
			return -EINVAL;
		*bytes = prep_ppm_size(w, h);
		return 0;
	}
	pthread_mutex_lock(&v->lock);
	if (!v->dims)
		v->dims = calloc(v->cfg.nfiles, sizeof(*v->dims));
	_Atomic uint32_t *dims = v->dims;
	pthread_mutex_unlock(&v->lock);
	uint32_t packed = dims ? atomic_load_explicit(&dims[file_index], memory_order_relaxed) : 0;
	if (packed) {
		w = packed >> 16;
		h = packed & 0xffff;
	} else {
		if ((rc = read_dims(v, file_index, &w, &h)) < 0)
			return rc;
		if (dims) /* sides <= PREP_MAX_SIDE fit in 16 bits */
			atomic_store_explicit(&dims[file_index], (uint32_t)w << 16 | h,
					      memory_order_relaxed);
	}
	return prep_output_size(r, w, h, bytes);
}

void prep_view_stats(struct prep_view *v, struct prep_stats *out)
{
	if (!v || !out)
		return;
	out->decodes = atomic_load_explicit(&v->st_decodes, memory_order_relaxed);
	out->shared = atomic_load_explicit(&v->st_shared, memory_order_relaxed);
	out->errors = atomic_load_explicit(&v->st_errors, memory_order_relaxed);
	out->staged_bytes = atomic_load_explicit(&v->st_staged, memory_order_relaxed);
	out->refused = atomic_load_explicit(&v->st_refused, memory_order_relaxed);
	out->jobs = atomic_load_explicit(&v->st_jobs, memory_order_relaxed);
	out->jobs_reclaimed = atomic_load_explicit(&v->st_jobs_reclaimed, memory_order_relaxed);
	out->decoded_bytes = atomic_load_explicit(&v->st_dec_bytes, memory_order_relaxed);
	out->decoded_hits = atomic_load_explicit(&v->st_dec_hits, memory_order_relaxed);
	out->decoded_files = atomic_load_explicit(&v->st_dec_files, memory_order_relaxed);
	out->decoded_refused = atomic_load_explicit(&v->st_dec_refused, memory_order_relaxed);
	out->ahead = atomic_load_explicit(&v->st_ahead, memory_order_relaxed);
	out->ahead_wasted = atomic_load_explicit(&v->st_ahead_wasted, memory_order_relaxed);
	pthread_mutex_lock(&v->lock);
	out->ahead_bytes = v->ahead_bytes;
	pthread_mutex_unlock(&v->lock);
}
