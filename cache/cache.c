/* SPDX-License-Identifier: MIT */
/*
 * MinIO cache implementation. Unit state words:
 *   0                 empty
 *   STATE_FILLING     one caller is filling it; others wait on its stripe
 *   (off << 2) | 2    held at arena offset off
 *   STATE_FAILED      its fill failed against the immutable snapshot: -EIO
 *   (ms << 2) | 0     (ms > 0) empty again since a fill failed for a
 *                     passing reason (cache_fill_error_is_transient) at
 *                     CLOCK_MONOTONIC millisecond ms
 * The waiters of a fill that fails because the source failed for now
 * (-EAGAIN; a local shortage such as EMFILE empties the word instead) get
 * its failure (-EAGAIN) instead of taking turns at the same fill: behind a
 * stalled source each would wait through a whole retry ladder. So does
 * every caller for RETRY_QUIET_MS after it (the kernel re-issues a failed
 * page read at once: it must not wait a second time); a caller after that
 * takes the unit as empty and fills.
 *
 * Arena space: a bump pointer (top) plus a list of holes, the reservations
 * of failed fills that were not the last one. A failed fill gives its bytes
 * back exactly (used = top - hole_bytes), its pages to the kernel (a hole
 * punched in the memfd), and its place to a later unit (first fit), so no
 * number of failures ever shrinks the budget.
 */
#include "cache/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define STATE_EMPTY 0u
#define STATE_FILLING 1u
#define STATE_HELD 2u
#define STATE_FAILED 3u
/* How long after a passing failure a unit's callers share it instead of
 * filling again. */
#define RETRY_QUIET_MS 1000
#define NSTRIPES 64
#define ALIGN 64
/* Unit state words live in blocks of 2^16 (512 KiB), allocated when a unit
 * of the block is first filled: unit ids may be handed out long after the
 * cache exists (fs/ numbers a file's units at its first lookup), and ids
 * never filled cost nothing. */
#define BLOCK_SHIFT 16
#define BLOCK_UNITS (1u << BLOCK_SHIFT)

struct cache_stripe {
	pthread_mutex_t lock;
	pthread_cond_t filled;
} __attribute__((aligned(64)));

struct cache {
	uint64_t capacity;
	uint64_t nunits;
	unsigned char *arena;
	int memfd;
	uint64_t nblocks;
	_Atomic(_Atomic uint64_t *) *blocks;
	_Atomic uint64_t top;	     /* bump pointer: end of the highest reservation */
	_Atomic uint64_t hole_bytes; /* bytes below top in holes */
	_Atomic uint64_t nholes;
	pthread_mutex_t holes_lock; /* a leaf; guards holes, taken only after a failure */
	struct cache_hole *holes;
	size_t holes_cap;
	_Atomic uint64_t items, hits, misses, hit_bytes, miss_bytes, admitted, refused, fill_errors;
	_Atomic uint64_t failed_units;
	struct cache_stripe stripes[NSTRIPES];
};

struct cache_hole {
	uint64_t off, len;
};

static inline void count(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_fetch_add_explicit(ctr, n, memory_order_relaxed);
}

int cache_create(uint64_t capacity, uint64_t nunits, struct cache **out)
{
	struct cache *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	c->memfd = -1;
	c->capacity = capacity;
	c->nunits = nunits;
	c->nblocks = (nunits + BLOCK_UNITS - 1) >> BLOCK_SHIFT;
	c->blocks = calloc(c->nblocks ? c->nblocks : 1, sizeof(*c->blocks));
	if (!c->blocks) {
		rc = -ENOMEM;
		goto fail;
	}
	if (capacity > 0) {
		c->memfd = memfd_create("coordfs-cache", MFD_CLOEXEC);
		if (c->memfd < 0) {
			rc = -errno;
			goto fail;
		}
		if (ftruncate(c->memfd, (off_t)capacity) < 0) {
			rc = -errno;
			goto fail;
		}
		c->arena = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
				c->memfd, 0);
		if (c->arena == MAP_FAILED) {
			c->arena = NULL;
			rc = -errno;
			goto fail;
		}
	}
	for (int i = 0; i < NSTRIPES; i++) {
		pthread_mutex_init(&c->stripes[i].lock, NULL);
		pthread_cond_init(&c->stripes[i].filled, NULL);
	}
	pthread_mutex_init(&c->holes_lock, NULL);
	*out = c;
	return 0;
fail:
	if (c->memfd >= 0)
		close(c->memfd);
	free(c->blocks);
	free(c);
	return rc;
}

void cache_destroy(struct cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < NSTRIPES; i++) {
		pthread_mutex_destroy(&c->stripes[i].lock);
		pthread_cond_destroy(&c->stripes[i].filled);
	}
	pthread_mutex_destroy(&c->holes_lock);
	free(c->holes);
	if (c->arena)
		munmap(c->arena, c->capacity);
	if (c->memfd >= 0)
		close(c->memfd);
	for (uint64_t b = 0; b < c->nblocks; b++)
		free(atomic_load_explicit(&c->blocks[b], memory_order_relaxed));
	free(c->blocks);
	free(c);
}

static uint64_t aligned(size_t len)
{
	uint64_t need = (len + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
	return need ? need : ALIGN;
}

/* First fit among the holes; false when none is large enough. */
static bool hole_take(struct cache *c, uint64_t need, uint64_t *off)
{
	bool found = false;

	pthread_mutex_lock(&c->holes_lock);
	for (size_t i = 0; i < atomic_load_explicit(&c->nholes, memory_order_relaxed); i++) {
		struct cache_hole *h = &c->holes[i];
		if (h->len < need)
			continue;
		*off = h->off;
		h->off += need;
		h->len -= need;
		if (h->len == 0) {
			uint64_t last = atomic_load_explicit(&c->nholes, memory_order_relaxed) - 1;
			*h = c->holes[last];
			atomic_store_explicit(&c->nholes, last, memory_order_relaxed);
		}
		atomic_fetch_sub_explicit(&c->hole_bytes, need, memory_order_relaxed);
		found = true;
		break;
	}
	pthread_mutex_unlock(&c->holes_lock);
	return found;
}

#define POPULATE_STEP ((uint64_t)2 << 20)
/* The reservation [from, to) at the top: when it reaches a new
 * POPULATE_STEP of the arena, fault that step in with one call rather than
 * page by page at first touch (a fault each 4 KiB costs ~10 us on a VM).
 * At most one step past the top: the arena holds what it is given, so
 * these pages are filled soon; none past the capacity. */
static void populate_ahead(struct cache *c, uint64_t from, uint64_t to)
{
	if (to <= from)
		return;
	uint64_t step = (to - 1) / POPULATE_STEP;
	if (from != 0 && (from - 1) / POPULATE_STEP == step)
		return;
	uint64_t lo = step * POPULATE_STEP, len = POPULATE_STEP;
	if (lo >= c->capacity)
		return;
	if (len > c->capacity - lo)
		len = c->capacity - lo;
	(void)madvise(c->arena + lo, len, MADV_POPULATE_WRITE);
}

/* Reserve len bytes of arena: at the top while it fits, else in a hole left
 * by a failed fill. false when neither has room. */
static bool arena_alloc(struct cache *c, size_t len, uint64_t *off)
{
	uint64_t need = aligned(len);
	uint64_t cur = atomic_load_explicit(&c->top, memory_order_relaxed);

	do {
		if (cur > c->capacity || need > c->capacity - cur)
			return atomic_load_explicit(&c->nholes, memory_order_relaxed) > 0 &&
			       hole_take(c, need, off);
	} while (!atomic_compare_exchange_weak_explicit(
	    &c->top, &cur, cur + need, memory_order_relaxed, memory_order_relaxed));
	*off = cur;
	populate_ahead(c, cur, cur + need);
	return true;
}

/*
 * Give back the reservation [off, off + aligned(len)) of a failed fill:
 * rewind the top when it was the last reservation, else free its pages and
 * keep it as a hole for later units. When the hole list cannot grow (out of
 * memory) the bytes stay reserved: counted as used, never lost silently.
 */
static void arena_unalloc(struct cache *c, uint64_t off, size_t len)
{
	uint64_t need = aligned(len);
	uint64_t expect = off + need;

	if (atomic_compare_exchange_strong_explicit(&c->top, &expect, off, memory_order_relaxed,
						    memory_order_relaxed))
		return;
	/* The fill may have written some of it: return those pages. */
	if (c->memfd >= 0)
		(void)fallocate(c->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
				(off_t)need);
	pthread_mutex_lock(&c->holes_lock);
	size_t n = atomic_load_explicit(&c->nholes, memory_order_relaxed);
	if (n == c->holes_cap) {
		size_t ncap = c->holes_cap ? c->holes_cap * 2 : 16;
		struct cache_hole *nh = realloc(c->holes, ncap * sizeof(*nh));
		if (!nh) {
			pthread_mutex_unlock(&c->holes_lock);
			return;
		}
		c->holes = nh;
		c->holes_cap = ncap;
	}
	c->holes[n] = (struct cache_hole){off, need};
	atomic_fetch_add_explicit(&c->hole_bytes, need, memory_order_relaxed);
	atomic_store_explicit(&c->nholes, n + 1, memory_order_relaxed);
	pthread_mutex_unlock(&c->holes_lock);
}

/* Whether a fill error is a shortage of this process's own (descriptors,
 * memory), which its waiters may well not meet. */
static bool cache_fill_error_is_shortage(int err)
{
	switch (err) {
	case -EMFILE:
	case -ENFILE:
	case -ENOMEM:
	case -ENOBUFS:
	case -EINTR:
		return true;
	default:
		return false;
	}
}

/* Whether a fill error is a passing one after which a later call
 * retries (cache_fill_fn in cache.h). */
static bool cache_fill_error_is_transient(int err)
{
	return err == -EAGAIN || cache_fill_error_is_shortage(err);
}

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* The state word of a unit whose fill just failed for a passing reason. */
static uint64_t retry_word(void)
{
	uint64_t ms = now_ms();

	return (ms ? ms : 1) << 2;
}

static bool is_retry(uint64_t st)
{
	return st != STATE_EMPTY && (st & 3u) == 0;
}

/* A passing failure recent enough to be shared rather than retried. */
static bool retry_quiet(uint64_t st)
{
	return is_retry(st) && now_ms() - (st >> 2) < RETRY_QUIET_MS;
}

/* Unit's state word; with create, its block is allocated if need be.
 * NULL: a unit of a block never filled (its state is empty), or, with
 * create, no memory for the block. */
static _Atomic uint64_t *slot(const struct cache *c, uint64_t unit, bool create)
{
	_Atomic(_Atomic uint64_t *) *bp = &c->blocks[unit >> BLOCK_SHIFT];
	_Atomic uint64_t *b = atomic_load_explicit(bp, memory_order_acquire);

	if (!b && create) {
		_Atomic uint64_t *nb = calloc(BLOCK_UNITS, sizeof(*nb));
		if (!nb)
			return NULL;
		if (atomic_compare_exchange_strong_explicit(bp, &b, nb, memory_order_acq_rel,
							    memory_order_acquire))
			b = nb;
		else
			free(nb); /* another thread's block is in b */
	}
	return b ? &b[unit & (BLOCK_UNITS - 1)] : NULL;
}

static uint64_t load_state(const struct cache *c, uint64_t unit)
{
	_Atomic uint64_t *w = slot(c, unit, false);
	return w ? atomic_load_explicit(w, memory_order_acquire) : STATE_EMPTY;
}

static void wake_waiters(struct cache *c, uint64_t unit)
{
	struct cache_stripe *s = &c->stripes[unit % NSTRIPES];

	pthread_mutex_lock(&s->lock);
	pthread_cond_broadcast(&s->filled);
	pthread_mutex_unlock(&s->lock);
}

static uint64_t wait_fill(struct cache *c, uint64_t unit)
{
	struct cache_stripe *s = &c->stripes[unit % NSTRIPES];
	uint64_t st;

	pthread_mutex_lock(&s->lock);
	while ((st = load_state(c, unit)) == STATE_FILLING)
		pthread_cond_wait(&s->filled, &s->lock);
	pthread_mutex_unlock(&s->lock);
	return st;
}

/* Fill unit (its state already FILLING, owned by the caller) and publish it. */
static int fill_and_publish(struct cache *c, uint64_t unit, size_t unit_len, cache_fill_fn fill,
		     void *arg, const void **data)
{
	uint64_t off;
	if (!arena_alloc(c, unit_len, &off)) {
		count(&c->refused, 1);
		atomic_store_explicit(slot(c, unit, false), STATE_EMPTY, memory_order_release);
		wake_waiters(c, unit);
		return -ENOSPC;
	}
	int rc = fill(arg, unit, c->arena + off, unit_len);
	if (rc < 0) {
		bool transient = cache_fill_error_is_transient(rc);
		count(&c->fill_errors, 1);
		if (!transient)
			count(&c->failed_units, 1);
		arena_unalloc(c, off, unit_len);
		/* A local shortage (descriptors, memory) passes at once: the
		 * waiters try again. The source failing for now is shared. */
		uint64_t next = !transient		  ? STATE_FAILED
				: cache_fill_error_is_shortage(rc) ? STATE_EMPTY
								  : retry_word();
		atomic_store_explicit(slot(c, unit, false), next,
				      memory_order_release);
		wake_waiters(c, unit);
		return transient ? rc : -EIO;
	}
	count(&c->admitted, 1);
	count(&c->items, 1);
	atomic_store_explicit(slot(c, unit, false), (off << 2) | STATE_HELD, memory_order_release);
	wake_waiters(c, unit);
	*data = c->arena + off;
	return 0;
}

int cache_get(struct cache *c, uint64_t unit, size_t unit_len, size_t want_bytes, bool admit,
	      cache_fill_fn fill, void *arg, const void **data)
{
	if (unit >= c->nunits)
		return -EINVAL;
	uint64_t st = load_state(c, unit);

	if ((st & 3u) == STATE_HELD) {
		count(&c->hits, 1);
		count(&c->hit_bytes, want_bytes);
		*data = c->arena + (st >> 2);
		return 0;
	}
	if (st == STATE_FAILED)
		return -EIO;
	if (retry_quiet(st))
		return -EAGAIN; /* failed for a passing reason a moment ago */
	count(&c->misses, 1);
	count(&c->miss_bytes, want_bytes);
	if (!admit)
		return -ENOSPC;
	_Atomic uint64_t *w = slot(c, unit, true);
	if (!w)
		return -ENOMEM; /* passing: nothing marked, a later call retries */
	for (;;) {
		if (st == STATE_FILLING) {
			st = wait_fill(c, unit);
			/* The fill we waited for failed for a passing reason:
			 * its failure is ours too (see the top of the file). */
			if (is_retry(st))
				return -EAGAIN;
		}
		if ((st & 3u) == STATE_HELD) {
			*data = c->arena + (st >> 2);
			return 0;
		}
		if (st == STATE_FAILED)
			return -EIO;
		/* Empty (or empty again): try to become the filler. */
		uint64_t expect = is_retry(st) ? st : STATE_EMPTY;
		if (atomic_compare_exchange_strong_explicit(w, &expect, STATE_FILLING,
							    memory_order_acq_rel,
							    memory_order_acquire))
			break;
		st = expect;
	}

	return fill_and_publish(c, unit, unit_len, fill, arg, data);
}

int cache_prefill(struct cache *c, uint64_t unit, size_t unit_len, cache_fill_fn fill, void *arg)
{
	const void *data;
	uint64_t expect = STATE_EMPTY;

	if (unit >= c->nunits)
		return -EINVAL;
	_Atomic uint64_t *w = slot(c, unit, true);
	if (!w)
		return -ENOMEM;
	if (!atomic_compare_exchange_strong_explicit(w, &expect, STATE_FILLING,
						     memory_order_acq_rel, memory_order_acquire) &&
	    (!is_retry(expect) || retry_quiet(expect) ||
	     !atomic_compare_exchange_strong_explicit(w, &expect, STATE_FILLING,
						      memory_order_acq_rel, memory_order_acquire)))
		return -EEXIST; /* held, failed, failing just now, or being filled */
	return fill_and_publish(c, unit, unit_len, fill, arg, &data);
}

/* len bytes between the arena at a (if a lies in it) and user memory at u,
 * through the memfd: into the arena (in) or out of it. What the memfd did
 * not take is left for the caller: the bytes copied. */
static size_t memfd_copy(const struct cache *c, const unsigned char *a, unsigned char *u,
			 size_t len, bool in)
{
	size_t done = 0;

	if (c->memfd < 0 || a < c->arena || len > c->capacity ||
	    (uint64_t)(a - c->arena) > c->capacity - len)
		return 0;
	while (done < len) {
		off_t at = (off_t)(a - c->arena) + (off_t)done;
		ssize_t n = in ? pwrite(c->memfd, u + done, len - done, at)
			       : pread(c->memfd, u + done, len - done, at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	return done;
}

void cache_copy_in(struct cache *c, void *dst, const void *src, size_t len)
{
	size_t done = memfd_copy(c, dst, (unsigned char *)src, len, true);

	memcpy((unsigned char *)dst + done, (const unsigned char *)src + done, len - done);
}

void cache_copy_out(const struct cache *c, void *dst, const void *src, size_t len)
{
	size_t done = memfd_copy(c, src, dst, len, false);

	memcpy((unsigned char *)dst + done, (const unsigned char *)src + done, len - done);
}

bool cache_holds(const struct cache *c, uint64_t unit)
{
	if (unit >= c->nunits)
		return false;
	return (load_state(c, unit) & 3u) == STATE_HELD;
}

void cache_get_stats(const struct cache *c, struct cache_stats *out)
{
	struct cache *m = (struct cache *)c;

	out->capacity_bytes = c->capacity;
	/* hole_bytes first: a concurrent hole_take() can only make it smaller,
	 * so used never reads as more than what is reserved plus one unit. */
	uint64_t holes = atomic_load_explicit(&m->hole_bytes, memory_order_relaxed);
	uint64_t top = atomic_load_explicit(&m->top, memory_order_relaxed);
	out->used_bytes = top > holes ? top - holes : 0;
	out->items = atomic_load_explicit(&m->items, memory_order_relaxed);
	out->hits = atomic_load_explicit(&m->hits, memory_order_relaxed);
	out->misses = atomic_load_explicit(&m->misses, memory_order_relaxed);
	out->hit_bytes = atomic_load_explicit(&m->hit_bytes, memory_order_relaxed);
	out->miss_bytes = atomic_load_explicit(&m->miss_bytes, memory_order_relaxed);
	out->admitted = atomic_load_explicit(&m->admitted, memory_order_relaxed);
	out->refused = atomic_load_explicit(&m->refused, memory_order_relaxed);
	out->fill_errors = atomic_load_explicit(&m->fill_errors, memory_order_relaxed);
	out->failed_units = atomic_load_explicit(&m->failed_units, memory_order_relaxed);
}
