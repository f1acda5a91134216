/* SPDX-License-Identifier: MIT */
/*
 * prep/recipe.c's internals: the counter-based generator, torchvision's
 * RandomResizedCrop parameters, each recipe's geometry (prep/geom.h), and a
 * recipe rendered from pixels the decoded tier holds.
 */
#ifndef COORDFS_PREP_RECIPE_H
#define COORDFS_PREP_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prep/geom.h"
#include "prep/prep.h"

/* ---- randomness: splitmix64 over a key of (seed, file_key, version) ---- */

struct prep__rng {
	uint64_t state;
};

void prep__rng_init(struct prep__rng *g, uint64_t seed, uint64_t file_key, uint32_t version);
/* Uniform in [lo, hi). */
double prep__rng_uniform(struct prep__rng *g, double lo, double hi);

/* torchvision RandomResizedCrop.get_params: crop (top, left, h, w). */
struct prep__rrc {
	unsigned top, left, h, w;
	bool fallback; /* the 10 tries failed: center crop */
};
void prep__rrc_params(struct prep__rng *g, unsigned W, unsigned H, struct prep__rrc *out);

/* The geometry of recipe r for a W x H source. 0, -EINVAL, -EFBIG. */
int prep__plan(const struct prep_recipe *r, unsigned W, unsigned H, uint64_t seed,
	       uint64_t file_key, uint32_t version, struct prep__geom *g);

/* The DCT scale prep_render picks for recipe r / version on a W x H source
 * (jpeg: can the decoder scale; else 8). 0 / -errno of prep__plan. */
int prep__sample_scale(const struct prep_recipe *r, unsigned W, unsigned H, bool jpeg,
		       uint64_t seed, uint64_t file_key, uint32_t version, unsigned *M);

struct prep__image; /* prep/render.h */
/* prep_render from decoded pixels (prep__render_pixels with r's plan). */
int prep__render_from_pixels(const struct prep_recipe *r, const struct prep__image *img,
			     unsigned W, unsigned H, uint64_t seed, uint64_t file_key,
			     uint32_t version, uint8_t **out_ppm, size_t *out_len);

#endif
