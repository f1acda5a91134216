/* SPDX-License-Identifier: MIT */
/*
 * The geometry of one sample and the callback that computes it once the
 * source size is known. Types only: prep/recipe.c makes geometries,
 * prep/sink.c and prep/render.c follow them.
 */
#ifndef COORDFS_PREP_GEOM_H
#define COORDFS_PREP_GEOM_H

#include <stdbool.h>

/*
 * What to produce from a source image, in source pixel coordinates:
 * the box [box_x0,box_x1) x [box_y0,box_y1) is resampled onto a virtual
 * vw x vh grid, of which the window (ox, oy, ow, oh) is produced. The filter
 * reads only pixels inside clip (x0,y0,x1,y1): PIL crops first and resizes
 * the crop, so its filter is clamped at the crop's edges.
 */
struct prep__geom {
	double box_x0, box_y0, box_x1, box_y1;
	unsigned clip_x0, clip_y0, clip_x1, clip_y1;
	unsigned vw, vh;
	unsigned ox, oy, ow, oh;
	bool flip; /* mirror the output left-right */
	bool full_scale; /* a JPEG is decoded at 8/8 (the recipe is exact) */
};

/* Called once the source size is known; fills the geometry. 0 / -errno. */
typedef int (*prep__plan_fn)(void *arg, unsigned W, unsigned H, struct prep__geom *g);

#endif
