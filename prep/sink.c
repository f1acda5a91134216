/* SPDX-License-Identifier: MIT */
/*
 * The sink a codec decodes into (prep/sink.h): the geometry asked of the
 * plan, the DCT scale, the resampler's coefficients and the region they
 * read, and the row buffers (from the scratch pool of prep/resample.h),
 * every 4 rows through the horizontal pass.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "prep/prep.h"
#include "prep/sink.h"

int prep__check_caps(uint64_t w, uint64_t h)
{
	if (w == 0 || h == 0)
		return -EIO;
	if (w > PREP_MAX_SIDE || h > PREP_MAX_SIDE || w * h > PREP_MAX_PIXELS)
		return -EFBIG;
	return 0;
}

unsigned prep__pick_scale(const struct prep__geom *g)
{
	double fx = (g->box_x1 - g->box_x0) / g->vw;
	double fy = (g->box_y1 - g->box_y0) / g->vh;
	double f = fx < fy ? fx : fy; /* source pixels per output pixel */

	if (g->full_scale)
		return 8;

	/* Powers of two only: libjpeg-turbo has SIMD IDCTs for 1/8 (DC only),
	 * 2/8 and 4/8 (and 8/8), and for 4:2:0 at 4/8 the chroma is decoded 1:1
	 * by the SIMD 8x8 IDCT. Its 3/8, 5/8, 6/8 and 7/8 IDCTs are plain C (and
	 * 4:2:0 chroma then needs 6x6..14x14 ones): measured slower than the full
	 * 8/8 decode on 500x375 photos. */
	for (unsigned m = 1; m < 8; m *= 2)
		if (f * m / 8.0 >= 1.0 - 1e-9)
			return m;
	return 8;
}

/* Allocate the row buffers once the region's row width (pixels, bytes per
 * pixel) is known. */
int prep__sink_alloc(struct prep__sink *d, unsigned width, unsigned bpp)
{
	size_t nrows = d->full ? d->ry1 - d->ry0 : 4;

	d->stride = (size_t)width * bpp;
	if (d->full) { /* handed to the caller */
		size_t n = d->stride * nrows + PREP__PAD;
		d->buf = d->dst && n <= d->dst_cap ? d->dst : malloc(n);
		return d->buf ? 0 : -ENOMEM;
	}
	d->buf = prep__scratch_get(d->stride * nrows + PREP__PAD, &d->buf_cap);
	d->tmp = prep__scratch_get((size_t)d->cx.n * 3 * (d->ry1 - d->ry0), &d->tmp_cap);
	return d->buf && d->tmp ? 0 : -ENOMEM;
}


void prep__sink_flush(struct prep__sink *d)
{
	const uint8_t *in[4];
	uint8_t *out[4];

	if (d->full || d->nbuf == 0)
		return;
	for (unsigned i = 0; i < d->nbuf; i++) {
		in[i] = d->buf + (size_t)i * d->stride;
		out[i] = d->tmp + (size_t)(d->done + i) * d->cx.n * 3;
	}
	prep__hpass(in, d->nbuf, d->bx0, &d->cx, out, true);
	d->done += d->nbuf;
	d->nbuf = 0;
}


/* Step 1, source size known: ask for the geometry and pick the DCT scale. */
int prep__sink_scale(struct prep__sink *d, unsigned W, unsigned H, bool can_scale)
{
	int rc = prep__check_caps(W, H);

	if (rc < 0)
		return rc;
	d->W = W;
	d->H = H;
	if (d->full) {
		d->M = can_scale && d->scale_num >= 1 && d->scale_num <= 8 ? d->scale_num : 8;
		return 0;
	}
	if ((rc = d->plan(d->arg, W, H, &d->g)) < 0)
		return rc;
	if (!can_scale)
		d->M = 8;
	else if (d->scale_num >= 1 && d->scale_num <= 8)
		d->M = d->scale_num;
	else
		d->M = prep__pick_scale(&d->g);
	return 0;
}

/* Step 2, scaled size sw x sh known: coefficients and the region they read. */
int prep__sink_region(struct prep__sink *d, unsigned sw, unsigned sh)
{
	if (d->full) {
		d->rx0 = d->ry0 = 0;
		d->rx1 = sw;
		d->ry1 = sh;
		return 0;
	}
	const struct prep__geom *g = &d->g;
	double s = d->M / 8.0;
	unsigned c0x = (unsigned)floor(g->clip_x0 * s), c1x = (unsigned)ceil(g->clip_x1 * s);
	unsigned c0y = (unsigned)floor(g->clip_y0 * s), c1y = (unsigned)ceil(g->clip_y1 * s);

	if (c1x > sw)
		c1x = sw;
	if (c1y > sh)
		c1y = sh;
	if (c0x >= c1x)
		c0x = c1x - 1;
	if (c0y >= c1y)
		c0y = c1y - 1;
	int rc =
	    prep__coeffs_make(g->box_x0 * s, g->box_x1 * s, c0x, c1x, g->vw, g->ox, g->ow, &d->cx);
	if (rc == 0)
		rc = prep__coeffs_make(g->box_y0 * s, g->box_y1 * s, c0y, c1y, g->vh, g->oy, g->oh,
				       &d->cy);
	if (rc < 0)
		return rc;
	if (g->flip)
		prep__coeffs_mirror(&d->cx);
	d->rx0 = d->cx.lo;
	d->rx1 = d->cx.hi;
	d->ry0 = d->cy.lo;
	d->ry1 = d->cy.hi;
	return 0;
}
