/* SPDX-License-Identifier: MIT */
/*
 * Where a codec puts what it decodes: the state of one decode, shared by
 * every format. A codec reports the source size (prep__sink_scale: the
 * geometry is asked for and the DCT scale picked), then the decoded size
 * (prep__sink_region: the resampler's coefficients and so the region of
 * rows and columns to decode), then pushes the region's rows. In full mode
 * (prep__decode_scaled) every row is kept; otherwise every 4 rows go through
 * the horizontal pass at once, so a decode holds 4 source rows plus the
 * horizontally reduced region, whatever the source size.
 */
#ifndef COORDFS_PREP_SINK_H
#define COORDFS_PREP_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prep/geom.h"
#include "prep/resample.h"

struct prep__sink {
	/* set by the caller */
	prep__plan_fn plan;
	void *arg;
	unsigned scale_num; /* 0 = auto */
	bool full;	    /* the whole image, full resolution, no plan */
	/* set by prep__sink_scale() and prep__sink_region() */
	struct prep__geom g;
	unsigned M;
	struct prep__coeffs cx, cy;
	unsigned rx0, rx1, ry0, ry1; /* region to decode, in scaled pixels */
	/* Region rows as they are decoded. Full mode: all of them, in buf.
	 * Otherwise up to 4 at a time in buf, then through the horizontal pass
	 * into tmp (cx.n pixels per region row), so memory is 4 source rows
	 * plus the horizontally reduced region, whatever the source size. */
	uint8_t *buf;
	size_t stride; /* bytes per row in buf (4 per pixel for CMYK) */
	unsigned bx0;  /* absolute column of a buf row's first pixel */
	unsigned nbuf; /* rows waiting in buf */
	unsigned done; /* region rows through the horizontal pass */
	uint8_t *tmp;
	size_t buf_cap, tmp_cap; /* buf and tmp come from prep__scratch_get */
	uint8_t *dst;		 /* full mode: the caller's buffer for buf, when it fits */
	size_t dst_cap;
	unsigned W, H; /* source size */
};

/* Step 1, source size known: ask for the geometry and pick the DCT scale
 * (can_scale: the format decodes at M/8). 0 / -errno. */
int prep__sink_scale(struct prep__sink *d, unsigned W, unsigned H, bool can_scale);
/* Step 2, scaled size sw x sh known: coefficients and the region they read.
 * When the geometry flips, cx comes mirrored (prep__coeffs_mirror): the
 * horizontal pass writes the rows flipped, and the vertical pass must not
 * flip them again (flip false). */
int prep__sink_region(struct prep__sink *d, unsigned sw, unsigned sh);
/* Allocate the row buffers once the region's row width (pixels, bytes per
 * pixel) is known. */
int prep__sink_alloc(struct prep__sink *d, unsigned width, unsigned bpp);
/* Rows waiting in buf through the horizontal pass (not in full mode). */
void prep__sink_flush(struct prep__sink *d);

/* Where the decoder puts the next region row. */
static inline uint8_t *prep__sink_row(struct prep__sink *d)
{
	return d->buf + (size_t)d->nbuf * d->stride;
}

/* The row at prep__sink_row() is complete (RGB). */
static inline void prep__sink_push(struct prep__sink *d)
{
	d->nbuf++;
	if (!d->full && d->nbuf == 4)
		prep__sink_flush(d);
}

/* 0 when a w x h source is within PREP_MAX_SIDE and PREP_MAX_PIXELS (what
 * a decode accepts), -EFBIG when over, -EIO when a side is 0. */
int prep__check_caps(uint64_t w, uint64_t h);

/* The DCT scale (M in M/8) picked for a geometry. */
unsigned prep__pick_scale(const struct prep__geom *g);

#endif
