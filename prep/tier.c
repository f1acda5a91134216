/* SPDX-License-Identifier: MIT */
/*
 * The decoded tier (prep/tier.h): per file, a list of images decoded whole
 * at one DCT scale, each published once and never evicted; their slots,
 * carved out of large anonymous mappings; and its share of the budget.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/budget.h"
#include "prep/codec.h"
#include "prep/recipe.h"
#include "prep/render.h"
#include "prep/tier.h"
#include "prep/view_state.h"

#define DENTRY_SLOT ((sizeof(struct dentry) + 63) & ~(size_t)63)

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
	prep__mem_release(v, n);
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
#define TIER_HUGE_MIN PREP_TIER_HUGE_MIN
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

void prep__tier_init(struct prep_view *v)
{
	tier_layout(v);
	/* The tier's index (a pointer per file) is part of its share. */
	uint64_t index = sizeof(*v->tier) * (uint64_t)v->cfg.nfiles;
	if (v->cfg.decoded_mem > index && tier_reserve(v, index)) {
		v->tier = calloc(v->cfg.nfiles, sizeof(*v->tier));
		if (!v->tier)
			tier_unreserve(v, index);
	}
}

void prep__tier_free(struct prep_view *v)
{
	free((void *)v->tier);
	for (size_t i = 0; i < v->nchunks; i++)
		munmap(v->chunks[i].base, v->chunks[i].size);
	free(v->chunks);
	if (v->cfg.mem)
		budget_keep(v->cfg.mem, -(int64_t)v->tier_used);
	prep__mem_release(v, v->tier_used);
}

const struct dentry *prep__tier_lookup(struct prep_view *v, const struct sample *s)
{
	const struct dentry *any;
	unsigned M;

	if (!v->tier || !(any = atomic_load_explicit(&v->tier[s->file_index],
						     memory_order_acquire)))
		return NULL;
	if (prep__sample_scale(&s->recipe, any->W, any->H, any->jpeg, v->cfg.seed, s->file_key,
			       s->version, &M) < 0)
		return NULL; /* the file path gives the error */
	return tier_find(v, s->file_index, M, &any);
}

const struct dentry *prep__tier_admit(struct prep_view *v, const struct sample *s,
				      const uint8_t *src, size_t srclen)
{
	const struct dentry *any, *e;
	unsigned W, H, M;
	bool jpeg = prep__sniff(src, srclen) == PREP__JPEG;

	if (!v->tier || prep_probe(src, srclen, &W, &H) < 0 ||
	    prep__sample_scale(&s->recipe, W, H, jpeg, v->cfg.seed, s->file_key, s->version,
			       &M) < 0)
		return NULL;
	if ((e = tier_find(v, s->file_index, M, &any))) /* published meanwhile */
		return e;
	uint64_t pix = prep__scaled_bytes(W, H, M);
	size_t cap;
	uint8_t *slot = pix <= SIZE_MAX - DENTRY_SLOT ? tier_carve(v, DENTRY_SLOT + pix, &cap) : NULL;
	if (!slot) {
		stat_add(&v->st_dec_refused, 1);
		return NULL;
	}
	struct dentry *ne = (struct dentry *)slot;
	memset(ne, 0, sizeof(*ne));
	if (prep__decode_scaled_into(src, srclen, M, slot + DENTRY_SLOT, cap - DENTRY_SLOT,
				     &ne->img) < 0 ||
	    ne->img.scale != M || ne->img.w != ((uint64_t)W * M + 7) / 8 ||
	    ne->img.h != ((uint64_t)H * M + 7) / 8) {
		tier_uncarve(v, slot, cap);
		return NULL;
	}
	ne->W = W;
	ne->H = H;
	ne->jpeg = jpeg;
	ne->bytes = cap;
	return tier_insert(v, s->file_index, ne);
}
