/* SPDX-License-Identifier: MIT */
/*
 * PIL-compatible antialiased bilinear resampling (Pillow's Resample.c,
 * BILINEAR, reducing_gap=None): a separable triangle filter whose support
 * grows with the downscale factor, coefficients precomputed per output
 * column/row in double, normalised, then turned into 22-bit fixed point;
 * a horizontal pass then a vertical pass, each rounded to 8 bits. Given the
 * same input pixels the result is bit-identical to PIL's resize().
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep_int.h"

#define PRECISION_BITS (32 - 8 - 2)

static double bilinear_filter(double x)
{
	if (x < 0.0)
		x = -x;
	if (x < 1.0)
		return 1.0 - x;
	return 0.0;
}

void prep__coeffs_free(struct prep__coeffs *c)
{
	if (!c)
		return;
	free(c->bounds);
	free(c->k);
	c->bounds = NULL;
	c->k = NULL;
}

int prep__coeffs_make(double box0, double box1, unsigned clip0, unsigned clip1, unsigned vsize,
		      unsigned o0, unsigned n, struct prep__coeffs *c)
{
	memset(c, 0, sizeof(*c));
	if (vsize == 0 || n == 0 || clip1 <= clip0 || box1 <= box0 || (uint64_t)o0 + n > vsize)
		return -EINVAL;

	double scale = (box1 - box0) / vsize;
	double filterscale = scale < 1.0 ? 1.0 : scale;
	double support = 1.0 * filterscale;
	double ss = 1.0 / filterscale;
	int in_size = (int)(clip1 - clip0);
	double in0 = box0 - clip0;

	if (support > PREP_MAX_SIDE)
		return -EFBIG;
	unsigned ksize = (unsigned)ceil(support) * 2 + 1;
	double *w = malloc(sizeof(*w) * ksize);

	c->bounds = malloc(sizeof(*c->bounds) * 2 * n);
	c->k = calloc((size_t)n * ksize, sizeof(*c->k));
	if (!w || !c->bounds || !c->k) {
		free(w);
		prep__coeffs_free(c);
		return -ENOMEM;
	}
	c->n = n;
	c->ksize = ksize;
	c->lo = clip1;
	c->hi = clip0;
	for (unsigned xx = 0; xx < n; xx++) {
		double center = in0 + (o0 + xx + 0.5) * scale;
		double ww = 0.0;
		int xmin = (int)(center - support + 0.5);
		int xmax = (int)(center + support + 0.5);

		if (xmin < 0)
			xmin = 0;
		if (xmin > in_size - 1)
			xmin = in_size - 1;
		if (xmax > in_size)
			xmax = in_size;
		xmax -= xmin;
		if (xmax > (int)ksize)
			xmax = (int)ksize;
		for (int x = 0; x < xmax; x++) {
			w[x] = bilinear_filter((x + xmin - center + 0.5) * ss);
			ww += w[x];
		}
		if (xmax <= 0 || ww == 0.0) {
			/* Degenerate (cannot happen for boxes inside the clip):
			 * take the nearest pixel. */
			xmax = 1;
			w[0] = 1.0;
			ww = 1.0;
		}
		int32_t *k = &c->k[(size_t)xx * ksize];
		for (int x = 0; x < xmax; x++) {
			double v = w[x] / ww;

			k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
				     : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
		}
		c->bounds[2 * xx] = xmin + (int)clip0;
		c->bounds[2 * xx + 1] = xmax;
		if ((unsigned)c->bounds[2 * xx] < c->lo)
			c->lo = (unsigned)c->bounds[2 * xx];
		if ((unsigned)(c->bounds[2 * xx] + xmax) > c->hi)
			c->hi = (unsigned)(c->bounds[2 * xx] + xmax);
	}
	free(w);
	return 0;
}

static inline uint8_t clip8(int32_t in)
{
	if (in >= (1 << PRECISION_BITS << 8))
		return 255;
	if (in <= 0)
		return 0;
	return (uint8_t)(in >> PRECISION_BITS);
}

static void pass_horizontal(const uint8_t *row, const struct prep__coeffs *cx, uint8_t *out)
{
	for (unsigned xx = 0; xx < cx->n; xx++) {
		const int32_t *k = &cx->k[(size_t)xx * cx->ksize];
		const uint8_t *p = row + (size_t)cx->bounds[2 * xx] * 3;
		int32_t n = cx->bounds[2 * xx + 1];
		int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;

		for (int32_t x = 0; x < n; x++, p += 3) {
			s0 += p[0] * k[x];
			s1 += p[1] * k[x];
			s2 += p[2] * k[x];
		}
		out[3 * xx] = clip8(s0);
		out[3 * xx + 1] = clip8(s1);
		out[3 * xx + 2] = clip8(s2);
	}
}

int prep__resample(const uint8_t *src, size_t src_stride, unsigned src_x0, unsigned src_y0,
		   const struct prep__coeffs *cx, const struct prep__coeffs *cy, bool flip,
		   uint8_t *dst, size_t dst_stride)
{
	if (cx->lo < src_x0 || cy->lo < src_y0)
		return -EINVAL;

	size_t rows = cy->hi - cy->lo;
	size_t tmp_stride = (size_t)cx->n * 3;
	uint8_t *tmp = malloc(tmp_stride * rows);
	int32_t *acc = malloc(sizeof(*acc) * tmp_stride);

	if (!tmp || !acc) {
		free(tmp);
		free(acc);
		return -ENOMEM;
	}
	/* Horizontal pass over the rows the vertical pass reads. The bounds are
	 * absolute; shift the row pointer so they index it directly. */
	for (size_t y = 0; y < rows; y++) {
		const uint8_t *row = src + (cy->lo - src_y0 + y) * src_stride;

		pass_horizontal(row - (size_t)src_x0 * 3, cx, tmp + y * tmp_stride);
	}
	/* Vertical pass, one output row at a time, accumulating whole rows. */
	for (unsigned yy = 0; yy < cy->n; yy++) {
		const int32_t *k = &cy->k[(size_t)yy * cy->ksize];
		int32_t ymin = cy->bounds[2 * yy] - (int32_t)cy->lo;
		int32_t n = cy->bounds[2 * yy + 1];
		uint8_t *out = dst + (size_t)yy * dst_stride;

		for (size_t i = 0; i < tmp_stride; i++)
			acc[i] = 1 << (PRECISION_BITS - 1);
		for (int32_t y = 0; y < n; y++) {
			const uint8_t *in = tmp + (size_t)(ymin + y) * tmp_stride;
			int32_t kv = k[y];

			for (size_t i = 0; i < tmp_stride; i++)
				acc[i] += in[i] * kv;
		}
		if (!flip) {
			for (size_t i = 0; i < tmp_stride; i++)
				out[i] = clip8(acc[i]);
		} else {
			for (unsigned x = 0; x < cx->n; x++) {
				const int32_t *a = &acc[3 * (size_t)(cx->n - 1 - x)];

				out[3 * x] = clip8(a[0]);
				out[3 * x + 1] = clip8(a[1]);
				out[3 * x + 2] = clip8(a[2]);
			}
		}
	}
	free(tmp);
	free(acc);
	return 0;
}
