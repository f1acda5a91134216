/* SPDX-License-Identifier: MIT */
/*
 * The staging engine behind the prepared view: decodes on the opening
 * thread or, when cfg.threads decodes already run, a pool of decode threads, a
 * table of samples keyed by (file, recipe, version) that makes concurrent
 * requests share one decode, per-job version counters, and the memory policy
 * (random samples kept until no active job still needs them, dropped oldest
 * first under pressure; deterministic samples admitted while their share of
 * the budget has room and never evicted). Every sample's bytes and every
 * decode's transient memory are reserved from the caller's byte budget
 * (cfg.mem) first. See prep/README.md.
 *
 * Locking: one mutex (view->lock) guards the table, the FIFO, the queue, the
 * job table and every sample's state; pid_lock guards the pid cache only and
 * is never held together with view->lock. No lock is held across source
 * I/O, a decode, or /proc reads. Sample reference counts are _Atomic: they
 * are raised under view->lock (lookups) and may drop anywhere; the one that
 * drops the last reference frees the sample (and returns its bytes to the
 * budget). Budget waits happen with no view lock held.
 *
 * An open's reference is a struct sample: the sample (struct sample)
 * and the job that opened it, whose slot stays while it has open files.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/budget.h"
#include "common/hash.h"
#include "common/log.h"
#include "prep/codec.h"
#include "prep/prep.h"
#include "prep/recipe.h"
#include "prep/render.h"
#include "prep/resample.h"

#define DEFAULT_WAIT_MS 250
#define SWEEP_S 5 /* idle decode threads look for unneeded samples this often */
#define FAIL_LOGS_PER_S 20 /* decode failures logged per second, the rest counted */
#define MAX_THREADS 256
#define PID_CACHE 1024
#define PID_TTL_S 5.0
#define PREFIX_BYTES (64u << 10)
#define AHEAD_SCAN 4096 /* files a decode-ahead thread looks at per lock hold */
#define AHEAD_NICE 19
#define AHEAD_IDLE_MS 100  /* how often decode-ahead looks at the CPUs' idle time */
#define AHEAD_IDLE_MIN 0.5 /* cores idle, at least, for decoding ahead (default) */

enum sample_state { SAMPLE_PENDING, SAMPLE_READY, SAMPLE_FAILED };

struct sample {
	_Atomic unsigned refs;
	struct budget *mem; /* where `charged` bytes were reserved, or NULL */
	uint64_t charged;   /* set before the sample is shared, then by its decoder */
	/* key */
	uint32_t file_index;
	uint32_t version;
	struct prep_recipe recipe;
	uint64_t file_key;
	/* guarded by view->lock */
	enum sample_state state;
	int err;
	bool in_table, staged, det;
	bool ahead; /* decoded ahead, not opened yet (in the table only once ready) */
	struct sample *hnext;	   /* hash chain */
	struct sample *fprev, *fnext; /* FIFO of staged random samples */
	struct sample *qnext;	   /* decode queue */
	pthread_cond_t done;
	/* immutable once READY */
	uint8_t *data;
	size_t len;
};

struct job {
	uid_t uid;
	char name[PREP_JOB_NAME_MAX];
	double last_active;
	unsigned open;	/* opens not yet put: the slot is not reused meanwhile */
	uint16_t *next; /* next version per file, calloc'd on first use */
	/* decode-ahead: versions taken and files opened at least once (their
	 * ratio is the epoch the job is in), the random recipe it opened
	 * last, where the ahead threads look next, and the epoch in which they
	 * found nothing left to do */
	uint64_t opens;
	uint32_t seen;
	bool has_recipe;
	struct prep_recipe recipe;
	uint32_t ahead_at, ahead_seen;
	uint32_t ahead_done; /* maxv + 1 of the epoch found done, 0: none */
};

/* One open: what prep_view_open hands out. */
struct prep_sample {
	struct sample *s;
	struct job *j;
};

/* One image of the decoded tier: a source decoded whole at one DCT scale,
 * its pixels right after it in a slot carved out of a tier chunk.
 * Immutable once published in tier[file]; freed only with the view. */
struct dentry {
	struct dentry *next; /* the same file at other scales */
	unsigned W, H;	     /* source size */
	bool jpeg;	     /* scales other than 8/8 exist */
	uint64_t bytes;	     /* the slot's size */
	struct prep__image img;
};
#define DENTRY_SLOT ((sizeof(struct dentry) + 63) & ~(size_t)63)

/* A large anonymous mapping the tier's slots are carved from, front to back. */
struct tier_chunk {
	uint8_t *base;
	size_t size, top;
};
#define TIER_HOLES 32

struct pid_entry {
	pid_t pid;
	double when;
	char name[PREP_JOB_NAME_MAX];
};

struct prep_view {
	struct prep_config cfg;
	struct prep_source_ops ops;
	void *arg;

	pthread_mutex_t lock;
	pthread_cond_t work; /* queue not empty and a decode slot free, or stop */
	bool stop;
	unsigned active; /* decodes running, pool and inline: <= cfg.threads */
	struct sample **buckets;
	size_t nbuckets, count;
	struct sample *fifo_head, *fifo_tail;
	struct sample *q_head, *q_tail;
	struct job **jobs; /* njobs used, room for jobs_cap; each job stays put */
	unsigned njobs, jobs_cap;
	uint64_t staged_total, det_bytes, det_cap;
	_Atomic uint32_t *dims; /* resize stat cache: w << 16 | h, 0 = unknown */

	/* The decoded tier (NULL when cfg.decoded_mem is too small for its
	 * index): per file, a list of images, each published once (release)
	 * and read without a lock (acquire). tier_lock guards insertion and
	 * tier_used (the index included), which never exceeds decoded_mem. */
	_Atomic(struct dentry *) *tier;
	pthread_mutex_t tier_lock;
	uint64_t tier_used;
	/* Its slots (under tier_lock): chunks[nchunks - 1] is carved from;
	 * tier_gran is the step chunks are charged in, tier_chunk their size;
	 * holes are slots given back that are not at a chunk's top. */
	struct tier_chunk *chunks;
	size_t nchunks, chunks_cap, tier_gran, tier_chunk;
	struct {
		uint8_t *p;
		size_t cap;
	} holes[TIER_HOLES];
	unsigned nholes;

	pthread_mutex_t pid_lock;
	struct pid_entry pids[PID_CACHE];

	unsigned nthreads;
	pthread_t *threads;

	/* decode-ahead (cfg.ahead_threads): ahead_bytes of samples decoded
	 * ahead and not opened yet, at most ahead_cap; under lock */
	pthread_cond_t ahead_wake;
	unsigned nahead, ahead_job;
	pthread_t *ahead_tids;
	uint64_t ahead_bytes, ahead_cap;
	_Atomic uint64_t ahead_cpu_ns; /* CPU time of the ahead threads' decodes */

	_Atomic uint64_t st_decodes, st_shared, st_errors, st_staged, st_refused, st_jobs;
	_Atomic uint64_t st_jobs_reclaimed;
	_Atomic uint64_t st_dec_bytes, st_dec_hits, st_dec_files, st_dec_refused;
	_Atomic uint64_t st_ahead, st_ahead_wasted;
	_Atomic int64_t log_sec;			 /* second of the failure-log window */
	_Atomic unsigned log_count, log_dropped; /* lines in it, lines left out */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void stat_add(_Atomic uint64_t *c, int64_t d)
{
	atomic_fetch_add_explicit(c, (uint64_t)d, memory_order_relaxed);
}

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

static void sample_init(struct prep_view *v, struct sample *s, uint32_t f, uint64_t file_key,
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

static void sample_unref(struct sample *s)
{
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
		sample_free(s);
}

static struct sample *table_find(struct prep_view *v, uint32_t f, const struct prep_recipe *r,
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

static void table_insert(struct prep_view *v, struct sample *s)
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

/* Take s out of the table and drop the table's reference. Under lock; the
 * caller must hold another reference or accept that s is freed. */
static void table_remove(struct prep_view *v, struct sample *s)
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
	sample_unref(s);
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
			table_remove(v, s);
	}
	return v->staged_total + n <= v->cfg.mem_budget;
}

/* Drop unreferenced random samples, oldest first, until n more bytes fit in
 * the budget. Under lock. */
static bool job_reusable(const struct prep_view *v, const struct job *j, double now);
static void mem_release(struct prep_view *v, uint64_t n);

/* Make room for n bytes: drop unreferenced random samples (oldest first),
 * then the version counters of jobs that are inactive and hold no open
 * file, least recently active first, and their slots with them. A job of
 * a process that ended (every run without COORDFS_JOB is a new job) never
 * comes back, so without this its counters (2 bytes a file) would hold the
 * budget until unmount; a named job reclaimed here starts again at version
 * 0 if it returns. Under lock. */
static void evict_for_mem(struct prep_view *v, uint64_t n)
{
	struct budget *b = v->cfg.mem;
	struct sample *s = v->fifo_head, *next;
	double now = now_s();

	for (; s && budget_used(b) + n > b->limit; s = next) {
		next = s->fnext;
		if (atomic_load_explicit(&s->refs, memory_order_acquire) == 1)
			table_remove(v, s);
	}
	while (budget_used(b) + n > b->limit) {
		struct job *oldest = NULL;

		for (unsigned i = 0; i < v->njobs; i++) {
			struct job *j = v->jobs[i];
			if (j->next && job_reusable(v, j, now) &&
			    (!oldest || j->last_active < oldest->last_active))
				oldest = j;
		}
		if (!oldest)
			break;
		log_info("prep: inactive job %s of uid %u gives back its version counters "
			 "for memory", oldest->name, (unsigned)oldest->uid);
		free(oldest->next);
		oldest->next = NULL;
		mem_release(v, sizeof(*oldest->next) * (uint64_t)v->cfg.nfiles);
		oldest->name[0] = '\0'; /* a free slot: matches no job, counts for no uid */
		oldest->uid = (uid_t)-1;
		stat_add(&v->st_jobs_reclaimed, 1);
	}
}

/* Reserve n bytes of the budget: at once, else after dropping unreferenced
 * random samples, else waiting up to mem_wait_ms. 0 or -ENOMEM. Never
 * called with view->lock held. */
/* Set on decode-ahead threads: they take only memory that is free. */
static _Thread_local bool on_ahead_thread;

static int mem_reserve(struct prep_view *v, uint64_t n)
{
	struct budget *b = v->cfg.mem;

	if (!b || n == 0 || budget_try(b, n))
		return 0;
	if (on_ahead_thread)
		return -ENOMEM;
	if (b->limit && n <= b->limit) {
		pthread_mutex_lock(&v->lock);
		evict_for_mem(v, n);
		pthread_mutex_unlock(&v->lock);
	}
	return budget_reserve(b, n, v->cfg.mem_wait_ms);
}

static void mem_release(struct prep_view *v, uint64_t n)
{
	if (v->cfg.mem)
		budget_release(v->cfg.mem, n);
}

/* A finished decode: stage it, or take it out of the table. Under lock. */
static void admit(struct prep_view *v, struct sample *s)
{
	uint64_t n = s->len;
	bool ok;

	if (s->state != SAMPLE_READY) {
		table_remove(v, s);
		return;
	}
	if (s->det)
		ok = v->det_bytes + n <= v->det_cap && make_room(v, n);
	else if (s->ahead) /* only into room that is free */
		ok = v->ahead_bytes + n <= v->ahead_cap && v->staged_total + n <= v->cfg.mem_budget;
	else
		ok = make_room(v, n);
	if (!ok) {
		table_remove(v, s);
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

/* ---- decode threads ---- */

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

static void log_failure(struct prep_view *v, const struct sample *s, int rc)
{
	char name[1024], rname[32] = "";

	if (!failure_log_allowed(v))
		return;
	prep_recipe_name(&s->recipe, rname, sizeof(rname));
	if (v->ops.file_name && v->ops.file_name(v->arg, s->file_index, name, sizeof(name)) == 0)
		log_warn("prep: cannot prepare %s for %s: %s", name, rname, strerror(-rc));
	else
		log_warn("prep: cannot prepare file #%u for %s: %s", s->file_index, rname,
			 strerror(-rc));
}

/* ---- the decoded tier ---- */

/* Room for n more bytes in the tier's share and in cfg.mem (kept until the
 * view is destroyed: the tier never evicts). Under tier_lock. */
static bool tier_charge(struct prep_view *v, uint64_t n)
{
	if (v->tier_used + n > v->cfg.decoded_mem || (v->cfg.mem && !budget_try(v->cfg.mem, n)))
		return false;
	v->tier_used += n;
	if (v->cfg.mem)
		budget_keep(v->cfg.mem, (int64_t)n);
	stat_add(&v->st_dec_bytes, (int64_t)n);
	return true;
}

/* Under tier_lock. */
static void tier_uncharge(struct prep_view *v, uint64_t n)
{
	v->tier_used -= n;
	if (v->cfg.mem)
		budget_keep(v->cfg.mem, -(int64_t)n);
	mem_release(v, n);
	stat_add(&v->st_dec_bytes, -(int64_t)n);
}

static bool tier_reserve(struct prep_view *v, uint64_t n)
{
	pthread_mutex_lock(&v->tier_lock);
	bool ok = tier_charge(v, n);
	pthread_mutex_unlock(&v->tier_lock);
	return ok;
}

static void tier_unreserve(struct prep_view *v, uint64_t n)
{
	pthread_mutex_lock(&v->tier_lock);
	tier_uncharge(v, n);
	pthread_mutex_unlock(&v->tier_lock);
}

/*
 * Slots. A malloc'd image per file cost the first decode of every file its
 * page faults (a 500x375 sample took 3.2 ms of daemon CPU in epoch 1 with
 * the tier, 1.2 ms without it), so images live in large mappings that are
 * never freed one by one: with a share of TIER_HUGE_MIN or more, chunks ask
 * for transparent huge pages and are charged in 2 MiB steps as their used
 * front grows (what such a chunk has resident); smaller shares in pages.
 */
#define TIER_HUGE_MIN (64ull << 20)
#define TIER_HUGE (2ull << 20)

static size_t round_to(size_t n, size_t g)
{
	return (n + g - 1) / g * g;
}

static void tier_layout(struct prep_view *v)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t chunk = v->cfg.decoded_mem / 16;

	v->tier_gran = v->cfg.decoded_mem >= TIER_HUGE_MIN ? TIER_HUGE : (size_t)(pg > 0 ? pg : 4096);
	if (chunk < (1u << 20))
		chunk = 1u << 20;
	if (chunk > (256u << 20))
		chunk = 256u << 20;
	v->tier_chunk = round_to((size_t)chunk, v->tier_gran);
}

/* A mapping of size bytes aligned to the charging step (so that each step
 * is one huge page), or NULL. */
static uint8_t *chunk_map(size_t size, size_t align)
{
	uint8_t *p = mmap(NULL, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	uint8_t *base = (uint8_t *)round_to((uintptr_t)p, align);
	if (base > p)
		munmap(p, (size_t)(base - p));
	if (base + size < p + size + align)
		munmap(base + size, (size_t)(p + size + align - (base + size)));
#ifdef MADV_HUGEPAGE
	if (align >= TIER_HUGE)
		madvise(base, size, MADV_HUGEPAGE); /* advice: without THP, small pages */
#endif
	return base;
}

/* A slot of at least n bytes (64-aligned), charged to the tier, its size in
 * *cap; NULL when the share (or cfg.mem) has no room. */
static uint8_t *tier_carve(struct prep_view *v, size_t n, size_t *cap)
{
	uint8_t *p = NULL;
	int best = -1;

	n = round_to(n, 64);
	pthread_mutex_lock(&v->tier_lock);
	for (unsigned i = 0; i < v->nholes; i++)
		if (v->holes[i].cap >= n && (best < 0 || v->holes[i].cap < v->holes[best].cap))
			best = (int)i;
	if (best >= 0) { /* already charged */
		p = v->holes[best].p;
		*cap = v->holes[best].cap;
		v->holes[best] = v->holes[--v->nholes];
		goto out;
	}
	struct tier_chunk *c = v->nchunks ? &v->chunks[v->nchunks - 1] : NULL;
	size_t g = v->tier_gran;
	if (c && c->size - c->top >= n) {
		if (!tier_charge(v, round_to(c->top + n, g) - round_to(c->top, g)))
			goto out;
		p = c->base + c->top;
		c->top += n;
		*cap = n;
		goto out;
	}
	size_t size = n > v->tier_chunk ? round_to(n, g) : v->tier_chunk;
	if (!tier_charge(v, round_to(n, g)))
		goto out;
	if (v->nchunks == v->chunks_cap) {
		size_t ncap = v->chunks_cap ? 2 * v->chunks_cap : 16;
		struct tier_chunk *nc = realloc(v->chunks, ncap * sizeof(*nc));
		if (!nc)
			goto unmapped;
		v->chunks = nc;
		v->chunks_cap = ncap;
	}
	uint8_t *base = chunk_map(size, g);
	if (!base)
		goto unmapped;
	/* The chunk before keeps its unused end: it is not charged. */
	v->chunks[v->nchunks++] = (struct tier_chunk){.base = base, .size = size, .top = n};
	p = base;
	*cap = n;
	goto out;
unmapped:
	tier_uncharge(v, round_to(n, g));
out:
	pthread_mutex_unlock(&v->tier_lock);
	return p;
}

/* A slot from tier_carve that holds no published image: back to its
 * chunk's top when nothing was carved after it, else a hole for a later
 * image (when the hole list is full, it stays charged, unused). */
static void tier_uncarve(struct prep_view *v, uint8_t *p, size_t cap)
{
	pthread_mutex_lock(&v->tier_lock);
	struct tier_chunk *c = v->nchunks ? &v->chunks[v->nchunks - 1] : NULL;
	if (c && p + cap == c->base + c->top) {
		size_t g = v->tier_gran, was = round_to(c->top, g);
		c->top -= cap;
		tier_uncharge(v, was - round_to(c->top, g));
	} else if (v->nholes < TIER_HOLES) {
		v->holes[v->nholes].p = p;
		v->holes[v->nholes++].cap = cap;
	}
	pthread_mutex_unlock(&v->tier_lock);
}

static const struct dentry *tier_find(struct prep_view *v, uint32_t f, unsigned M,
				      const struct dentry **any)
{
	const struct dentry *e = atomic_load_explicit(&v->tier[f], memory_order_acquire);

	*any = e;
	for (; e; e = e->next)
		if (e->img.scale == M)
			return e;
	return NULL;
}

/* Publish e (its bytes reserved) as file f's image at its scale; when
 * another decode published that scale first, e is freed and that one
 * returned. */
static const struct dentry *tier_insert(struct prep_view *v, uint32_t f, struct dentry *e)
{
	const struct dentry *any, *have;

	pthread_mutex_lock(&v->tier_lock);
	have = tier_find(v, f, e->img.scale, &any);
	if (!have) {
		e->next = (struct dentry *)any;
		atomic_store_explicit(&v->tier[f], e, memory_order_release);
	}
	pthread_mutex_unlock(&v->tier_lock);
	if (have) {
		tier_uncarve(v, (uint8_t *)e, e->bytes);
		return have;
	}
	stat_add(&v->st_dec_files, 1);
	return e;
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
	int rc = mem_reserve(v, work);

	if (rc < 0)
		return rc;
	rc = prep__render_from_pixels(&s->recipe, &e->img, e->W, e->H, v->cfg.seed, s->file_key,
				      s->version, ppm, ppmlen);
	mem_release(v, work);
	return rc;
}

/* s from the tier without reading the file: 1 when rendered, 0 when the
 * tier does not hold the file at the scale s needs, or -errno. */
static int tier_render(struct prep_view *v, struct sample *s, uint8_t **ppm, size_t *ppmlen)
{
	const struct dentry *any, *e;
	unsigned M;
	int rc;

	if (!v->tier || !(any = atomic_load_explicit(&v->tier[s->file_index],
						     memory_order_acquire)))
		return 0;
	if (prep__sample_scale(&s->recipe, any->W, any->H, any->jpeg, v->cfg.seed, s->file_key,
			       s->version, &M) < 0)
		return 0; /* the file path gives the error */
	if (!(e = tier_find(v, s->file_index, M, &any)))
		return 0;
	if ((rc = render_from(v, s, e, ppm, ppmlen)) < 0)
		return rc;
	stat_add(&v->st_dec_hits, 1);
	return 1;
}

/* First successful decode of src at the scale s needs, while the tier has
 * room: decode the whole frame, publish it, render s from it (1). 0 when
 * not admitted (no room, or the whole-frame decode failed: the file path
 * then decides, so a file that fails is never admitted), or -errno. */
static int tier_admit(struct prep_view *v, struct sample *s, const uint8_t *src, size_t srclen,
		      uint8_t **ppm, size_t *ppmlen)
{
	const struct dentry *any, *e;
	unsigned W, H, M;
	bool jpeg = prep__sniff(src, srclen) == PREP__JPEG;

	if (!v->tier || prep_probe(src, srclen, &W, &H) < 0 ||
	    prep__sample_scale(&s->recipe, W, H, jpeg, v->cfg.seed, s->file_key, s->version,
			       &M) < 0)
		return 0;
	if ((e = tier_find(v, s->file_index, M, &any))) /* published meanwhile */
		return render_from(v, s, e, ppm, ppmlen) < 0 ? 0 : 1;
	uint64_t pix = prep__scaled_bytes(W, H, M);
	size_t cap;
	uint8_t *slot = pix <= SIZE_MAX - DENTRY_SLOT ? tier_carve(v, DENTRY_SLOT + pix, &cap) : NULL;
	if (!slot) {
		stat_add(&v->st_dec_refused, 1);
		return 0;
	}
	struct dentry *ne = (struct dentry *)slot;
	memset(ne, 0, sizeof(*ne));
	if (prep__decode_scaled_into(src, srclen, M, slot + DENTRY_SLOT, cap - DENTRY_SLOT,
				     &ne->img) < 0 ||
	    ne->img.scale != M || ne->img.w != ((uint64_t)W * M + 7) / 8 ||
	    ne->img.h != ((uint64_t)H * M + 7) / 8) {
		tier_uncarve(v, slot, cap);
		return 0;
	}
	ne->W = W;
	ne->H = H;
	ne->jpeg = jpeg;
	ne->bytes = cap;
	e = tier_insert(v, s->file_index, ne);
	return render_from(v, s, e, ppm, ppmlen) < 0 ? 0 : 1;
}

/* Read and render s, every byte reserved first: the source (its size from
 * ops.file_size, else once read), the decoder's working memory
 * (prep_decode_mem), and the PPM beyond what the opener reserved. From the
 * decoded tier when it holds the file at the scale s needs. */
static int decode_charged(struct prep_view *v, struct sample *s, uint8_t **ppm, size_t *ppmlen)
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
	if ((rc = mem_reserve(v, src_charge)) < 0)
		return rc;
	rc = v->ops.read_file(v->arg, s->file_index, &src, &srclen);
	if (rc == 0 && srclen > src_charge) {
		if ((rc = mem_reserve(v, srclen - src_charge)) == 0)
			src_charge = srclen;
	}
	if (rc == 0 && v->cfg.mem && prep_decode_mem(&s->recipe, src, srclen, &work) == 0 &&
	    (rc = mem_reserve(v, work)) < 0)
		work = 0;
	if (rc == 0 && tier_admit(v, s, src, srclen, ppm, ppmlen) == 0)
		rc = prep_render(&s->recipe, src, srclen, v->cfg.seed, s->file_key, s->version, ppm,
				 ppmlen);
	free(src);
	mem_release(v, src_charge + work);
	if (rc < 0)
		return rc;
settle:
	/* The opener reserved the expected size (0 when unknown): settle. */
	if (*ppmlen > s->charged) {
		if (mem_reserve(v, *ppmlen - s->charged) < 0) {
			free(*ppm);
			*ppm = NULL;
			return -ENOMEM;
		}
	} else {
		mem_release(v, s->charged - *ppmlen);
	}
	s->charged = *ppmlen;
	return 0;
}

/* Decode s and publish the result. The caller holds one of the
 * cfg.threads decode slots (v->active) and gives it back here. */
static void decode_one(struct prep_view *v, struct sample *s)
{
	uint8_t *ppm = NULL;
	size_t ppmlen = 0;
	int rc;

	rc = decode_charged(v, s, &ppm, &ppmlen);
	stat_add(&v->st_decodes, 1);
	if (rc < 0) {
		mem_release(v, s->charged);
		s->charged = 0;
	}
	pthread_mutex_lock(&v->lock);
	bool report = rc < 0 && rc != -ENOMEM; /* memory refusals are counted per open */
	s->data = ppm;
	s->len = ppmlen;
	s->err = rc;
	s->state = rc < 0 ? SAMPLE_FAILED : SAMPLE_READY;
	admit(v, s);
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

static bool still_needed(struct prep_view *v, const struct job *self, uint32_t f, uint32_t k,
			 double now);

/* Drop the staged random samples that no active job will read: when the
 * jobs stop (or stall), their samples go within job_idle_s + SWEEP_S.
 * Under lock. */
static void sweep_idle(struct prep_view *v)
{
	double now = now_s();
	struct sample *s = v->fifo_head, *next;

	for (; s; s = next) {
		next = s->fnext;
		if (atomic_load_explicit(&s->refs, memory_order_acquire) == 1 &&
		    !still_needed(v, NULL, s->file_index, s->version, now))
			table_remove(v, s);
	}
}

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
				sweep_idle(v);
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
		decode_one(v, s);
		sample_unref(s); /* the queue's reference */
		pthread_mutex_lock(&v->lock);
	}
	pthread_mutex_unlock(&v->lock);
	return NULL;
}

/* ---- decode-ahead ---- */

static bool job_active(const struct prep_view *v, const struct job *j, double now);
static uint64_t expected_len(struct prep_view *v, uint32_t f, const struct prep_recipe *r);

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

		if (!job_active(v, j, now) || !j->next || !j->has_recipe || j->seen == 0)
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
			if (j->next[f] != e || table_find(v, f, &j->recipe, e))
				continue;
			uint64_t want = expected_len(v, f, &j->recipe);
			if (v->cfg.mem && !budget_try(v->cfg.mem, want))
				return NULL; /* no free memory: wait for some */
			struct sample *s = calloc(1, sizeof(*s));
			if (!s) {
				mem_release(v, want);
				return NULL;
			}
			atomic_init(&s->refs, 1);
			sample_init(v, s, f, v->ops.file_key(v->arg, f), &j->recipe, e, false, want);
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
 * it does not fit where decode-ahead may stage (admit): then it is dropped
 * (ahead_wasted). A failure is left to the open that decodes the file. */
static void ahead_decode(struct prep_view *v, struct sample *s)
{
	uint8_t *ppm = NULL;
	size_t ppmlen = 0;
	int rc = decode_charged(v, s, &ppm, &ppmlen);

	stat_add(&v->st_decodes, 1);
	if (rc < 0) {
		mem_release(v, s->charged);
		s->charged = 0;
		sample_unref(s);
		return;
	}
	s->data = ppm;
	s->len = ppmlen;
	s->state = SAMPLE_READY;
	pthread_mutex_lock(&v->lock);
	if (table_find(v, s->file_index, &s->recipe, s->version) ||
	    !still_needed(v, NULL, s->file_index, s->version, now_s())) {
		stat_add(&v->st_ahead_wasted, 1);
		pthread_mutex_unlock(&v->lock);
		sample_unref(s);
		return;
	}
	table_insert(v, s); /* our reference becomes the table's */
	admit(v, s);
	pthread_mutex_unlock(&v->lock);
}

static void *ahead_main(void *arg)
{
	struct prep_view *v = arg;
	struct idle_probe probe = {0};
	pid_t self = (pid_t)syscall(SYS_gettid);

	on_ahead_thread = true;
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

/* ---- jobs ---- */

static bool job_active(const struct prep_view *v, const struct job *j, double now)
{
	return now - j->last_active <= v->cfg.job_idle_s;
}

/* A slot may be given to another job only when its job holds no open file
 * and has not opened one for job_idle_s. */
static bool job_reusable(const struct prep_view *v, const struct job *j, double now)
{
	return j->open == 0 && !job_active(v, j, now);
}

/* The slot of job (uid, name), made if new: appended while the table is
 * below max_jobs, else the least recently active reusable slot. A uid
 * holding a quarter of the table already reuses its own slots only, so one
 * user cannot crowd the others out. NULL when no slot can be had. Under
 * lock. */
static struct job *job_get(struct prep_view *v, uid_t uid, const char *name, double now)
{
	struct job *victim = NULL, *own_victim = NULL;
	unsigned own = 0, per_uid = v->cfg.max_jobs / 4 ? v->cfg.max_jobs / 4 : 1;

	for (unsigned i = 0; i < v->njobs; i++) {
		struct job *j = v->jobs[i];
		if (j->uid == uid && strcmp(j->name, name) == 0) {
			j->last_active = now;
			return j;
		}
		bool reusable = job_reusable(v, j, now);
		if (j->uid == uid) {
			own++;
			if (reusable && (!own_victim || j->last_active < own_victim->last_active))
				own_victim = j;
		}
		if (reusable && (!victim || j->last_active < victim->last_active))
			victim = j;
	}
	if (own >= per_uid) {
		victim = own_victim;
	} else if (v->njobs < v->cfg.max_jobs) {
		if (v->njobs == v->jobs_cap) {
			unsigned cap = v->jobs_cap ? v->jobs_cap * 2 : 16;
			struct job **nj = realloc(v->jobs, sizeof(*nj) * cap);
			if (!nj)
				return NULL;
			v->jobs = nj;
			v->jobs_cap = cap;
		}
		struct job *j = calloc(1, sizeof(*j));
		if (!j)
			return NULL;
		v->jobs[v->njobs++] = j;
		atomic_store_explicit(&v->st_jobs, v->njobs, memory_order_relaxed);
		victim = j;
	}
	if (!victim)
		return NULL;
	if (victim->name[0])
		log_info("prep: job %s of uid %u takes the slot of inactive job %s of uid %u",
			 name, (unsigned)uid, victim->name, (unsigned)victim->uid);
	if (victim->next)
		memset(victim->next, 0, sizeof(*victim->next) * v->cfg.nfiles);
	victim->uid = uid;
	snprintf(victim->name, sizeof(victim->name), "%s", name);
	victim->last_active = now;
	victim->open = 0;
	victim->opens = 0;
	victim->seen = 0;
	victim->has_recipe = false;
	victim->ahead_at = victim->ahead_seen = victim->ahead_done = 0;
	return victim;
}

/* The version counters of a job cost 2 bytes per file, charged to the
 * budget (without waiting: this runs under the view lock). */
static int job_take_version(struct prep_view *v, struct job *j, uint32_t f, uint32_t *version)
{
	if (!j->next) {
		uint64_t n = sizeof(*j->next) * (uint64_t)v->cfg.nfiles;
		if (v->cfg.mem && !budget_try(v->cfg.mem, n)) {
			evict_for_mem(v, n);
			if (!budget_try(v->cfg.mem, n))
				return -ENOMEM;
		}
		j->next = calloc(v->cfg.nfiles, sizeof(*j->next));
		if (!j->next) {
			mem_release(v, n);
			return -ENOMEM;
		}
	}
	*version = j->next[f];
	if (j->next[f] < UINT16_MAX)
		j->next[f]++;
	j->opens++;
	if (*version == 0)
		j->seen++;
	return 0;
}

/* Give back a version taken by an open that was refused, unless the job
 * has taken another one of f meanwhile. Under lock. */
static void job_untake_version(struct job *j, uint32_t f, uint32_t version)
{
	if (j->next && j->next[f] == version + 1)
		j->next[f]--;
}

/* Does an active job other than self still have to read version k of f? */
static bool still_needed(struct prep_view *v, const struct job *self, uint32_t f, uint32_t k,
			 double now)
{
	for (unsigned i = 0; i < v->njobs; i++) {
		const struct job *j = v->jobs[i];
		if (j == self || !job_active(v, j, now))
			continue;
		if ((j->next ? j->next[f] : 0) <= k)
			return true;
	}
	return false;
}

/* ---- public API ---- */

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
	tier_layout(v);
	/* The tier's index (a pointer per file) is part of its share. */
	uint64_t index = sizeof(*v->tier) * (uint64_t)v->cfg.nfiles;
	if (v->cfg.decoded_mem > index && tier_reserve(v, index)) {
		v->tier = calloc(v->cfg.nfiles, sizeof(*v->tier));
		if (!v->tier)
			tier_unreserve(v, index);
	}
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
			if (pthread_create(&v->ahead_tids[i], NULL, ahead_main, v) != 0) {
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
		sample_unref(s);
	}
	for (size_t i = 0; i < v->nbuckets; i++) {
		struct sample *s = v->buckets[i], *next;
		for (; s; s = next) {
			next = s->hnext;
			sample_unref(s);
		}
	}
	for (unsigned i = 0; i < v->njobs; i++) {
		if (v->jobs[i]->next)
			mem_release(v, sizeof(*v->jobs[i]->next) * (uint64_t)v->cfg.nfiles);
		free(v->jobs[i]->next);
		free(v->jobs[i]);
	}
	free(v->jobs);
	free(v->buckets);
	free(v->threads);
	free((void *)v->dims);
	free((void *)v->tier);
	for (size_t i = 0; i < v->nchunks; i++)
		munmap(v->chunks[i].base, v->chunks[i].size);
	free(v->chunks);
	if (v->cfg.mem)
		budget_keep(v->cfg.mem, -(int64_t)v->tier_used);
	mem_release(v, v->tier_used);
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
	struct job *j = job_get(v, uid, job, now_s());
	if (j)
		rc = job_take_version(v, j, file_index, version);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

/* Bytes a new sample of f under r will take, as far as known without I/O
 * (resize: 0 until the file's dimensions were probed). */
static uint64_t expected_len(struct prep_view *v, uint32_t f, const struct prep_recipe *r)
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

/* A new sample of (f, r, version), in the table, with the caller's
 * reference and `charged` bytes already reserved. Under lock. */
static struct sample *sample_new(struct prep_view *v, uint32_t f, uint64_t file_key,
				 const struct prep_recipe *r, uint32_t version, bool det,
				 uint64_t charged, bool inline_decode)
{
	struct sample *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	/* table, caller, and the queue's unless decoded inline */
	atomic_init(&s->refs, inline_decode ? 2 : 3);
	sample_init(v, s, f, file_key, r, version, det, charged);
	table_insert(v, s);
	return s;
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
	bool det = !prep_recipe_is_random(r);
	struct prep_sample *o = malloc(sizeof(*o));
	if (!o)
		return -ENOMEM;

	pthread_mutex_lock(&v->lock);
	struct job *j = job_get(v, uid, job, now);
	if (!j) {
		pthread_mutex_unlock(&v->lock);
		free(o);
		stat_add(&v->st_refused, 1);
		return -EAGAIN;
	}
	j->open++; /* the slot stays ours while we wait, decode or hold it */
	bool taken = false;
	if (!det) {
		if ((rc = job_take_version(v, j, file_index, &version)) < 0)
			goto refused;
		taken = true;
		j->recipe = rr;
		j->has_recipe = true;
		if (v->nahead)
			pthread_cond_signal(&v->ahead_wake);
	}
	s = table_find(v, file_index, &rr, version);
	if (!s) {
		/* A new sample: its bytes are reserved before anything is
		 * allocated, waiting (unlocked) for room if need be. */
		uint64_t want = expected_len(v, file_index, &rr);
		if (v->cfg.mem && !budget_try(v->cfg.mem, want)) {
			pthread_mutex_unlock(&v->lock);
			rc = mem_reserve(v, want);
			pthread_mutex_lock(&v->lock);
			if (rc < 0)
				goto refused;
			s = table_find(v, file_index, &rr, version); /* made meanwhile? */
			if (s)
				mem_release(v, want);
		}
		if (!s) {
			/* Neither staged nor in flight: the calling thread, which
			 * would only wait, decodes it itself when a decode slot is
			 * free (no hand-off to the pool, no extra wake-up); else the
			 * pool does. */
			bool inline_decode = v->active < v->cfg.threads;

			s = sample_new(v, file_index, file_key, &rr, version, det, want,
				       inline_decode);
			if (!s) {
				mem_release(v, want);
				rc = -ENOMEM;
				goto refused;
			}
			if (inline_decode) {
				v->active++;
				pthread_mutex_unlock(&v->lock);
				decode_one(v, s);
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
	} else if (!det && s->in_table && !still_needed(v, j, file_index, version, now)) {
		table_remove(v, s); /* every active job has read it */
	}
	if (rc < 0) {
		pthread_mutex_unlock(&v->lock);
		sample_unref(s);
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
		job_untake_version(j, file_index, version);
	j->open--;
	pthread_mutex_unlock(&v->lock);
	free(o);
	stat_add(&v->st_refused, 1);
	return -ENOMEM;
}

/* The job of pid through a small cache: /proc is read at most every few
 * seconds per pid. */
static int job_of_pid_cached(struct prep_view *v, pid_t pid, char *name)
{
	struct pid_entry *e = &v->pids[(uint32_t)pid % PID_CACHE];
	double now = now_s();
	int rc;

	pthread_mutex_lock(&v->pid_lock);
	if (e->pid == pid && now - e->when < PID_TTL_S) {
		memcpy(name, e->name, PREP_JOB_NAME_MAX);
		pthread_mutex_unlock(&v->pid_lock);
		return 0;
	}
	pthread_mutex_unlock(&v->pid_lock);
	rc = prep_job_of_pid(pid, name, PREP_JOB_NAME_MAX);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&v->pid_lock);
	e->pid = pid;
	e->when = now;
	memcpy(e->name, name, PREP_JOB_NAME_MAX);
	pthread_mutex_unlock(&v->pid_lock);
	return 0;
}

int prep_view_open(struct prep_view *v, pid_t pid, uid_t uid, uint32_t file_index,
		   uint64_t file_key, const struct prep_recipe *r, struct prep_sample **out)
{
	char name[PREP_JOB_NAME_MAX];

	if (!v)
		return -EINVAL;
	if (job_of_pid_cached(v, pid, name) < 0)
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
	sample_unref(o->s);
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
		if ((rc = mem_reserve(v, PREFIX_BYTES)) < 0)
			return rc;
		rc = v->ops.read_prefix(v->arg, f, PREFIX_BYTES, &data, &len);
		if (rc == 0) {
			rc = prep_probe(data, len, w, h);
			free(data);
		}
		mem_release(v, PREFIX_BYTES);
		if (rc != -ENODATA || len < PREFIX_BYTES)
			return rc == -ENODATA ? -EIO : rc;
	}
	uint64_t charge = v->ops.file_size ? v->ops.file_size(v->arg, f) : 0;
	if ((rc = mem_reserve(v, charge)) < 0)
		return rc;
	rc = v->ops.read_file(v->arg, f, &data, &len);
	if (rc == 0) {
		rc = prep_probe(data, len, w, h);
		free(data);
	}
	mem_release(v, charge);
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
