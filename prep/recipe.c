/* SPDX-License-Identifier: MIT */
/*
 * Recipes: parsing, output sizes, the counter-based generator, torchvision's
 * RandomResizedCrop parameters, and the geometry each recipe asks of the
 * resampler (see prep/geom.h for what a geometry means).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/hash.h"
#include "prep/geom.h"
#include "prep/prep.h"
#include "prep/recipe.h"
#include "prep/render.h"
#include "prep/sink.h"

static const struct {
	const char *prefix;
	enum prep_kind kind;
} recipe_kinds[] = {
    {"rrc", PREP_RRC},
    {"center", PREP_CENTER},
    {"resize", PREP_RESIZE},
};

int prep_recipe_parse(const char *name, struct prep_recipe *out)
{
	if (!name || !out)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(recipe_kinds) / sizeof(recipe_kinds[0]); i++) {
		size_t plen = strlen(recipe_kinds[i].prefix);
		const char *p = name + plen;
		unsigned v = 0;
		size_t digits = 0;

		if (strncmp(name, recipe_kinds[i].prefix, plen) != 0)
			continue;
		if (*p == '0')
			return -EINVAL;
		for (; *p >= '0' && *p <= '9' && digits < 5; p++, digits++)
			v = v * 10 + (unsigned)(*p - '0');
		if (*p != '\0' || digits == 0 || v < PREP_MIN_SIZE || v > PREP_MAX_SIZE)
			return -EINVAL;
		out->kind = recipe_kinds[i].kind;
		out->size = v;
		out->exact = false;
		return 0;
	}
	return -EINVAL;
}

bool prep_is_image_name(const char *name)
{
	static const char *const exts[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
					   ".pgm", ".tif",  ".tiff", ".webp"};
	size_t len = name ? strlen(name) : 0;

	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		size_t el = strlen(exts[i]);
		if (len >= el && strcasecmp(name + len - el, exts[i]) == 0)
			return true;
	}
	return false;
}

static bool recipe_valid(const struct prep_recipe *r)
{
	return r && (r->kind == PREP_RRC || r->kind == PREP_CENTER || r->kind == PREP_RESIZE) &&
	       r->size >= PREP_MIN_SIZE && r->size <= PREP_MAX_SIZE;
}

int prep_recipe_name(const struct prep_recipe *r, char *buf, size_t buflen)
{
	if (!recipe_valid(r) || !buf)
		return -EINVAL;
	int n = snprintf(buf, buflen, "%s%u", recipe_kinds[r->kind].prefix, r->size);
	if (n < 0 || (size_t)n >= buflen)
		return -ENAMETOOLONG;
	return 0;
}

bool prep_recipe_is_random(const struct prep_recipe *r)
{
	return r && r->kind == PREP_RRC;
}

uint64_t prep_ppm_size(unsigned w, unsigned h)
{
	char hdr[48];

	return prep__ppm_header(w, h, hdr) + 3ull * w * h;
}

/* torchvision's Resize(size) for an int size: shorter side = size, longer =
 * int(size * long / short) (Python true division, then truncation). */
static void resized_dims(unsigned W, unsigned H, unsigned size, unsigned *nw, unsigned *nh)
{
	unsigned shorter = W <= H ? W : H, longer = W <= H ? H : W;
	double l = (double)((uint64_t)size * longer) / (double)shorter;
	unsigned new_long = l >= 4294967295.0 ? 4294967295u : (unsigned)l;

	if (W <= H) {
		*nw = size;
		*nh = new_long;
	} else {
		*nw = new_long;
		*nh = size;
	}
}

/* round(S / 0.875) with Python's round-half-even. */
static unsigned center_resize(unsigned S)
{
	return (unsigned)nearbyint((double)S / 0.875);
}

static int check_src(unsigned W, unsigned H)
{
	if (W == 0 || H == 0)
		return -EINVAL;
	if (W > PREP_MAX_SIDE || H > PREP_MAX_SIDE || (uint64_t)W * H > PREP_MAX_PIXELS)
		return -EFBIG;
	return 0;
}

int prep_output_dims(const struct prep_recipe *r, unsigned src_w, unsigned src_h, unsigned *out_w,
		     unsigned *out_h)
{
	unsigned w, h;
	int rc;

	if (!recipe_valid(r) || !out_w || !out_h)
		return -EINVAL;
	if ((rc = check_src(src_w, src_h)) < 0)
		return rc;
	if (r->kind == PREP_RESIZE) {
		resized_dims(src_w, src_h, r->size, &w, &h);
		if (w == 0 || h == 0)
			return -EINVAL;
		if (w > PREP_MAX_SIDE || h > PREP_MAX_SIDE || (uint64_t)w * h > PREP_MAX_OUT_PIXELS)
			return -EFBIG;
	} else {
		w = h = r->size;
	}
	*out_w = w;
	*out_h = h;
	return 0;
}

int prep_output_size(const struct prep_recipe *r, unsigned src_w, unsigned src_h, uint64_t *bytes)
{
	unsigned w, h;
	int rc;

	if (!bytes)
		return -EINVAL;
	if ((rc = prep_output_dims(r, src_w, src_h, &w, &h)) < 0)
		return rc;
	*bytes = prep_ppm_size(w, h);
	return 0;
}

/* ---- generator ---- */

void prep__rng_init(struct prep__rng *g, uint64_t seed, uint64_t file_key, uint32_t version)
{
	uint64_t k = hash_mix64(seed ^ 0x70726570u); /* "prep" */

	k = hash_mix64(k ^ file_key);
	k = hash_mix64(k ^ ((uint64_t)version << 1 | 1));
	g->state = k;
}

static uint64_t prep__rng_next(struct prep__rng *g)
{
	/* splitmix64: hash_mix64 adds the golden gamma itself. */
	uint64_t out = hash_mix64(g->state);

	g->state += 0x9e3779b97f4a7c15ULL;
	return out;
}

double prep__rng_uniform(struct prep__rng *g, double lo, double hi)
{
	double u = (double)(prep__rng_next(g) >> 11) * 0x1.0p-53;

	return lo + (hi - lo) * u;
}

/* Uniform integer in [0, n), n > 0, unbiased. */
static uint64_t prep__rng_below(struct prep__rng *g, uint64_t n)
{
	uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
	uint64_t x;

	do
		x = prep__rng_next(g);
	while (x >= limit);
	return x % n;
}

void prep__rrc_params(struct prep__rng *g, unsigned W, unsigned H, struct prep__rrc *out)
{
	const double scale_lo = 0.08, scale_hi = 1.0;
	const double ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
	const double log_lo = log(ratio_lo), log_hi = log(ratio_hi);
	double area = (double)W * (double)H;

	for (int attempt = 0; attempt < 10; attempt++) {
		double target_area = area * prep__rng_uniform(g, scale_lo, scale_hi);
		double aspect = exp(prep__rng_uniform(g, log_lo, log_hi));
		double wf = nearbyint(sqrt(target_area * aspect));
		double hf = nearbyint(sqrt(target_area / aspect));

		if (wf > 0 && wf <= W && hf > 0 && hf <= H) {
			unsigned w = (unsigned)wf, h = (unsigned)hf;

			out->top = (unsigned)prep__rng_below(g, H - h + 1);
			out->left = (unsigned)prep__rng_below(g, W - w + 1);
			out->w = w;
			out->h = h;
			out->fallback = false;
			return;
		}
	}
	double in_ratio = (double)W / (double)H;
	unsigned w = W, h = H;

	if (in_ratio < ratio_lo) {
		h = (unsigned)nearbyint(w / ratio_lo);
	} else if (in_ratio > ratio_hi) {
		w = (unsigned)nearbyint(h * ratio_hi);
	}
	if (w == 0)
		w = 1;
	if (h == 0)
		h = 1;
	if (w > W)
		w = W;
	if (h > H)
		h = H;
	out->top = (H - h) / 2;
	out->left = (W - w) / 2;
	out->w = w;
	out->h = h;
	out->fallback = true;
}

int prep__plan(const struct prep_recipe *r, unsigned W, unsigned H, uint64_t seed,
	       uint64_t file_key, uint32_t version, struct prep__geom *g)
{
	unsigned ow, oh;
	int rc;

	if ((rc = prep_output_dims(r, W, H, &ow, &oh)) < 0)
		return rc;
	memset(g, 0, sizeof(*g));
	g->full_scale = r->exact;
	g->box_x1 = W;
	g->box_y1 = H;
	g->clip_x1 = W;
	g->clip_y1 = H;
	g->ow = ow;
	g->oh = oh;
	g->vw = ow;
	g->vh = oh;
	switch (r->kind) {
	case PREP_RRC: {
		struct prep__rng rng;
		struct prep__rrc c;

		prep__rng_init(&rng, seed, file_key, version);
		prep__rrc_params(&rng, W, H, &c);
		g->box_x0 = g->clip_x0 = c.left;
		g->box_y0 = g->clip_y0 = c.top;
		g->clip_x1 = c.left + c.w;
		g->clip_y1 = c.top + c.h;
		g->box_x1 = g->clip_x1;
		g->box_y1 = g->clip_y1;
		g->flip = prep__rng_uniform(&rng, 0.0, 1.0) < 0.5;
		break;
	}
	case PREP_CENTER: {
		unsigned S = r->size, nw, nh;

		resized_dims(W, H, center_resize(S), &nw, &nh);
		if (nw < S || nh < S)
			return -EINVAL; /* cannot happen: round(S/0.875) > S */
		g->vw = nw;
		g->vh = nh;
		g->ox = (unsigned)nearbyint((nw - S) / 2.0);
		g->oy = (unsigned)nearbyint((nh - S) / 2.0);
		break;
	}
	case PREP_RESIZE:
		break;
	}
	return 0;
}

struct render_plan_arg {
	const struct prep_recipe *r;
	uint64_t seed, file_key;
	uint32_t version;
};

static int render_plan(void *arg, unsigned W, unsigned H, struct prep__geom *g)
{
	struct render_plan_arg *a = arg;

	return prep__plan(a->r, W, H, a->seed, a->file_key, a->version, g);
}

int prep_render(const struct prep_recipe *r, const void *data, size_t len, uint64_t seed,
		uint64_t file_key, uint32_t version, uint8_t **out_ppm, size_t *out_len)
{
	struct render_plan_arg a = {r, seed, file_key, prep_recipe_is_random(r) ? version : 0};

	if (!recipe_valid(r) || !data || !out_ppm || !out_len)
		return -EINVAL;
	return prep__render_geom(data, len, render_plan, &a, 0, out_ppm, out_len);
}

int prep__sample_scale(const struct prep_recipe *r, unsigned W, unsigned H, bool jpeg,
		       uint64_t seed, uint64_t file_key, uint32_t version, unsigned *M)
{
	struct prep__geom g;
	int rc;

	if (!recipe_valid(r) || !M)
		return -EINVAL;
	rc = prep__plan(r, W, H, seed, file_key, prep_recipe_is_random(r) ? version : 0, &g);
	if (rc < 0)
		return rc;
	*M = jpeg ? prep__pick_scale(&g) : 8;
	return 0;
}

int prep__render_from_pixels(const struct prep_recipe *r, const struct prep__image *img,
			     unsigned W, unsigned H, uint64_t seed, uint64_t file_key,
			     uint32_t version, uint8_t **out_ppm, size_t *out_len)
{
	struct render_plan_arg a = {r, seed, file_key, prep_recipe_is_random(r) ? version : 0};

	if (!recipe_valid(r) || !img || !out_ppm || !out_len)
		return -EINVAL;
	return prep__render_pixels(img, W, H, render_plan, &a, out_ppm, out_len);
}
