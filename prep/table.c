/* SPDX-License-Identifier: MIT */
/*
 * The samples of the prepared view (prep/table.h): the table that makes
 * concurrent requests share one decode, the memory policy (random samples
 * kept until no active job still needs them, dropped oldest first under
 * pressure; deterministic samples admitted while their share of the budget
 * has room and never evicted; every sample's bytes and every decode's
 * transient memory reserved from cfg.mem first), and the decode of one
 * sample. See prep/README.md.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/budget.h"
#include "common/hash.h"
#include "common/log.h"
#include "prep/jobs.h"
#include "prep/prep.h"
#include "prep/recipe.h"
#include "prep/render.h"
#include "prep/table.h"
#include "prep/tier.h"
#include "prep/view_state.h"

#define FAIL_LOGS_PER_S 20 /* decode failures logged per second, the rest counted */

/* ---- samples and the table ---- */

static size_t key_hash(uint32_t f, const struct prep_recipe *r, uint32_t version)
{
	uint64_t h = hash_mix64((uint64_t)f << 32 | version);

	return (size_t)hash_mix64(h ^ ((uint64_t)r->kind << 16 | r->size));
}

static void sample_free(struct sample *s)
{
	pthread_cond_destroy(&s->done);
	free(s->data);
	if (s->mem)
		budget_release(s->mem, s->charged);
	free(s);
}

void prep__sample_init(struct prep_view *v, struct sample *s, uint32_t f, uint64_t file_key,
			const struct prep_recipe *r, uint32_t version, bool det, uint64_t charged)
{
	s->mem = v->cfg.mem;
	s->charged = charged;
	s->file_index = f;
	s->version = version;
	s->recipe = *r;
	s->file_key = file_key;
	s->det = det;
	s->state = SAMPLE_PENDING;
	pthread_cond_init(&s->done, NULL);
}

void prep__sample_unref(struct sample *s)
{
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
		sample_free(s);
}

struct sample *prep__table_find(struct prep_view *v, uint32_t f, const struct prep_recipe *r,
				      uint32_t version)
{
	struct sample *s = v->buckets[key_hash(f, r, version) & (v->nbuckets - 1)];

	for (; s; s = s->hnext)
		if (s->file_index == f && s->version == version && s->recipe.kind == r->kind &&
		    s->recipe.size == r->size)
			return s;
	return NULL;
}

static void table_grow(struct prep_view *v)
{
	size_t nb = v->nbuckets * 2;
	struct sample **b = calloc(nb, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < v->nbuckets; i++) {
		struct sample *s = v->buckets[i], *next;
		for (; s; s = next) {
			next = s->hnext;
			size_t h = key_hash(s->file_index, &s->recipe, s->version) & (nb - 1);
			s->hnext = b[h];
			b[h] = s;
		}
	}
	free(v->buckets);
	v->buckets = b;
	v->nbuckets = nb;
}

void prep__table_insert(struct prep_view *v, struct sample *s)
{
	if (v->count >= v->nbuckets)
		table_grow(v);
	size_t h = key_hash(s->file_index, &s->recipe, s->version) & (v->nbuckets - 1);
	s->hnext = v->buckets[h];
	v->buckets[h] = s;
	s->in_table = true;
	v->count++;
}

static void fifo_unlink(struct prep_view *v, struct sample *s)
{
	if (s->fprev)
		s->fprev->fnext = s->fnext;
	else
		v->fifo_head = s->fnext;
	if (s->fnext)
		s->fnext->fprev = s->fprev;
	else
		v->fifo_tail = s->fprev;
	s->fprev = s->fnext = NULL;
}

static void fifo_append(struct prep_view *v, struct sample *s)
{
	s->fprev = v->fifo_tail;
	s->fnext = NULL;
	if (v->fifo_tail)
		v->fifo_tail->fnext = s;
	else
		v->fifo_head = s;
	v->fifo_tail = s;
}

void prep__table_remove(struct prep_view *v, struct sample *s)
{
	size_t h = key_hash(s->file_index, &s->recipe, s->version) & (v->nbuckets - 1);
	struct sample **pp = &v->buckets[h];

	while (*pp && *pp != s)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = s->hnext;
	s->hnext = NULL;
	s->in_table = false;
	v->count--;
	if (s->ahead) {
		stat_add(&v->st_ahead_wasted, 1);
		if (s->staged)
			v->ahead_bytes -= s->len;
		s->ahead = false;
	}
	if (s->staged) {
		v->staged_total -= s->len;
		stat_add(&v->st_staged, -(int64_t)s->len);
		if (s->det)
			v->det_bytes -= s->len;
		else
			fifo_unlink(v, s);
		s->staged = false;
	}
	prep__sample_unref(s);
}

/* Evict unreferenced random samples, oldest first, until n more bytes fit. */
static bool make_room(struct prep_view *v, uint64_t n)
{
	struct sample *s = v->fifo_head, *next;

	if (n > v->cfg.mem_budget)
		return false;
	for (; s && v->staged_total + n > v->cfg.mem_budget; s = next) {
		next = s->fnext;
		if (atomic_load_explicit(&s->refs, memory_order_acquire) == 1)
			prep__table_remove(v, s);
	}
	return v->staged_total + n <= v->cfg.mem_budget;
}


/* Make room for n bytes: drop unreferenced random samples (oldest first),
 * then the version counters of jobs that are inactive and hold no open
 * file, least recently active first, and their slots with them. A job of
 * a process that ended (every run without COORDFS_JOB is a new job) never
 * comes back, so without this its counters (2 bytes a file) would hold the
 * budget until unmount; a named job reclaimed here starts again at version
 * 0 if it returns. Under lock. */
void prep__evict_for_mem(struct prep_view *v, uint64_t n)
{
	struct budget *b = v->cfg.mem;
	struct sample *s = v->fifo_head, *next;
	double now = now_s();

	for (; s && budget_used(b) + n > b->limit; s = next) {
		next = s->fnext;
		if (atomic_load_explicit(&s->refs, memory_order_acquire) == 1)
			prep__table_remove(v, s);
	}
	while (budget_used(b) + n > b->limit && prep__job_reclaim(v, now))
		;
}

_Thread_local bool prep__on_ahead_thread;

int prep__mem_reserve(struct prep_view *v, uint64_t n)
{
	struct budget *b = v->cfg.mem;

	if (!b || n == 0 || budget_try(b, n))
		return 0;
	/* More than the whole budget never fits, whatever is evicted or
	 * waited for (a 100-Mpixel progressive JPEG or interlaced PNG under a
	 * small --prep-mem): -EFBIG fails the decode as an image too large,
	 * counted and logged, instead of a silent -ENOMEM at every open. */
	if (b->limit && n > b->limit)
		return -EFBIG;
	if (prep__on_ahead_thread)
		return -ENOMEM;
	if (b->limit) {
		pthread_mutex_lock(&v->lock);
		prep__evict_for_mem(v, n);
		pthread_mutex_unlock(&v->lock);
	}
	return budget_reserve(b, n, v->cfg.mem_wait_ms);
}

void prep__admit(struct prep_view *v, struct sample *s)
{
	uint64_t n = s->len;
	bool ok;

	if (s->state != SAMPLE_READY) {
		prep__table_remove(v, s);
		return;
	}
	if (s->det)
		ok = v->det_bytes + n <= v->det_cap && make_room(v, n);
	else if (s->ahead) /* only into room that is free */
		ok = v->ahead_bytes + n <= v->ahead_cap && v->staged_total + n <= v->cfg.mem_budget;
	else
		ok = make_room(v, n);
	if (!ok) {
		prep__table_remove(v, s);
		return;
	}
	s->staged = true;
	v->staged_total += n;
	if (s->ahead)
		v->ahead_bytes += n;
	stat_add(&v->st_staged, (int64_t)n);
	if (s->det)
		v->det_bytes += n;
	else
		fifo_append(v, s);
}

/* ---- decoding one sample ---- */

/* At most FAIL_LOGS_PER_S failure lines a second: a reader opening a bad
 * file in a loop must not flood the log. Left-out lines are counted and
 * reported in the next window. */
static bool failure_log_allowed(struct prep_view *v)
{
	int64_t sec = (int64_t)now_s();
	int64_t cur = atomic_load_explicit(&v->log_sec, memory_order_relaxed);

	if (sec != cur && atomic_compare_exchange_strong(&v->log_sec, &cur, sec)) {
		atomic_store(&v->log_count, 0);
		unsigned dropped = atomic_exchange(&v->log_dropped, 0);
		if (dropped)
			log_warn("prep: %u more failed decodes were not logged", dropped);
	}
	if (atomic_fetch_add(&v->log_count, 1) < FAIL_LOGS_PER_S)
		return true;
	atomic_fetch_add(&v->log_dropped, 1);
	return false;
}

/* -EFBIG alone ("File too large") does not say what is too large: the
 * header's size caps, or the memory its decode needs (prep__mem_reserve). */
static const char *failure_hint(int rc)
{
	return rc == -EFBIG ? " (over the size caps, or its decode needs more than --prep-mem)" : "";
}

static void log_failure(struct prep_view *v, const struct sample *s, int rc)
{
	char name[1024], rname[32] = "";

	if (!failure_log_allowed(v))
		return;
	prep_recipe_name(&s->recipe, rname, sizeof(rname));
	if (v->ops.file_name && v->ops.file_name(v->arg, s->file_index, name, sizeof(name)) == 0)
		log_warn("prep: cannot prepare %s for %s: %s%s", name, rname, strerror(-rc),
			 failure_hint(rc));
	else
		log_warn("prep: cannot prepare file #%u for %s: %s%s", s->file_index, rname,
			 strerror(-rc), failure_hint(rc));
}

/* Bytes render_from_pixels allocates besides the PPM: the horizontally
 * reduced rows and the coefficients. */
static uint64_t pixels_work(const struct sample *s, const struct prep__image *img, unsigned W,
			    unsigned H)
{
	unsigned ow = 0, oh = 0;

	if (prep_output_dims(&s->recipe, W, H, &ow, &oh) < 0)
		return 0;
	return (uint64_t)ow * 3 * img->h + 16 * ((uint64_t)ow + oh) + 4096;
}

static int render_from(struct prep_view *v, struct sample *s, const struct dentry *e,
		       uint8_t **ppm, size_t *ppmlen)
{
	uint64_t work = pixels_work(s, &e->img, e->W, e->H);
	int rc = prep__mem_reserve(v, work);

	if (rc < 0)
		return rc;
	rc = prep__render_from_pixels(&s->recipe, &e->img, e->W, e->H, v->cfg.seed, s->file_key,
				      s->version, ppm, ppmlen);
	prep__mem_release(v, work);
	return rc;
}

/* s from the tier without reading the file: 1 when rendered, 0 when the
 * tier does not hold the file at the scale s needs, or -errno. */
static int tier_render(struct prep_view *v, struct sample *s, uint8_t **ppm, size_t *ppmlen)
{
	const struct dentry *e = prep__tier_lookup(v, s);
	int rc;

	if (!e)
		return 0;
	if ((rc = render_from(v, s, e, ppm, ppmlen)) < 0)
		return rc;
	stat_add(&v->st_dec_hits, 1);
	return 1;
}

/* Every byte reserved first: the source (its size from ops.file_size, else
 * once read), the decoder's working memory (prep_decode_mem), and the PPM
 * beyond what the opener reserved. From the decoded tier when it holds the
 * file at the scale s needs. */
int prep__decode_charged(struct prep_view *v, struct sample *s, uint8_t **ppm, size_t *ppmlen)
{
	uint8_t *src = NULL;
	size_t srclen = 0;
	uint64_t src_charge = 0;
	uint64_t work = 0;
	int rc;

	rc = tier_render(v, s, ppm, ppmlen);
	if (rc < 0)
		return rc;
	if (rc > 0)
		goto settle;
	src_charge = v->ops.file_size ? v->ops.file_size(v->arg, s->file_index) : 0;
	if ((rc = prep__mem_reserve(v, src_charge)) < 0)
		return rc;
	rc = v->ops.read_file(v->arg, s->file_index, &src, &srclen);
	if (rc == 0 && srclen > src_charge) {
		if ((rc = prep__mem_reserve(v, srclen - src_charge)) == 0)
			src_charge = srclen;
	}
	if (rc == 0 && v->cfg.mem && prep_decode_mem(&s->recipe, src, srclen, &work) == 0 &&
	    (rc = prep__mem_reserve(v, work)) < 0)
		work = 0;
	if (rc == 0) {
		/* Admitted to the tier: rendered from its pixels; else (not
		 * admitted, or that render failed) from the file. */
		const struct dentry *e = prep__tier_admit(v, s, src, srclen);
		if (!e || render_from(v, s, e, ppm, ppmlen) < 0)
			rc = prep_render(&s->recipe, src, srclen, v->cfg.seed, s->file_key,
					 s->version, ppm, ppmlen);
	}
	free(src);
	prep__mem_release(v, src_charge + work);
	if (rc < 0)
		return rc;
settle:
	/* The opener reserved the expected size (0 when unknown): settle. */
	if (*ppmlen > s->charged) {
		if (prep__mem_reserve(v, *ppmlen - s->charged) < 0) {
			free(*ppm);
			*ppm = NULL;
			return -ENOMEM;
		}
	} else {
		prep__mem_release(v, s->charged - *ppmlen);
	}
	s->charged = *ppmlen;
	return 0;
}

void prep__decode_one(struct prep_view *v, struct sample *s)
{
	uint8_t *ppm = NULL;
	size_t ppmlen = 0;
	int rc;

	rc = prep__decode_charged(v, s, &ppm, &ppmlen);
	stat_add(&v->st_decodes, 1);
	if (rc < 0) {
		prep__mem_release(v, s->charged);
		s->charged = 0;
	}
	pthread_mutex_lock(&v->lock);
	bool report = rc < 0 && rc != -ENOMEM; /* memory refusals are counted per open */
	s->data = ppm;
	s->len = ppmlen;
	s->err = rc;
	s->state = rc < 0 ? SAMPLE_FAILED : SAMPLE_READY;
	prep__admit(v, s);
	pthread_cond_broadcast(&s->done);
	v->active--;
	if (v->q_head)
		pthread_cond_signal(&v->work);
	pthread_mutex_unlock(&v->lock);
	if (report) { /* s stays alive: the caller holds a reference */
		stat_add(&v->st_errors, 1);
		log_failure(v, s, rc);
	}
}

/* When the
 * jobs stop (or stall), their samples go within job_idle_s + SWEEP_S.
 * Under lock. */
void prep__sweep_idle(struct prep_view *v)
{
	double now = now_s();
	struct sample *s = v->fifo_head, *next;

	prep__jobs_check_gone(v, now);
	for (; s; s = next) {
		next = s->fnext;
		if (atomic_load_explicit(&s->refs, memory_order_acquire) == 1 &&
		    !prep__still_needed(v, NULL, s->file_index, s->version, now))
			prep__table_remove(v, s);
	}
}

uint64_t prep__expected_len(struct prep_view *v, uint32_t f, const struct prep_recipe *r)
{
	unsigned w, h;
	uint32_t packed = 1u << 16 | 1u;

	if (r->kind == PREP_RESIZE) {
		packed = v->dims ? atomic_load_explicit(&v->dims[f], memory_order_relaxed) : 0;
		if (!packed)
			return 0;
	}
	if (prep_output_dims(r, packed >> 16, packed & 0xffff, &w, &h) < 0)
		return 0;
	return prep_ppm_size(w, h);
}

struct sample *prep__sample_new(struct prep_view *v, uint32_t f, uint64_t file_key,
				 const struct prep_recipe *r, uint32_t version, bool det,
				 uint64_t charged, bool inline_decode)
{
	struct sample *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	/* table, caller, and the queue's unless decoded inline */
	atomic_init(&s->refs, inline_decode ? 2 : 3);
	prep__sample_init(v, s, f, file_key, r, version, det, charged);
	prep__table_insert(v, s);
	return s;
}
