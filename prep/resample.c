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

static void pass_horizontal(const uint8_t *row, unsigned x_base, const struct prep__coeffs *cx,
			    uint8_t *out)
{
	for (unsigned xx = 0; xx < cx->n; xx++) {
		const int32_t *k = &cx->k[(size_t)xx * cx->ksize];
		const uint8_t *p = row + (size_t)(cx->bounds[2 * xx] - (int32_t)x_base) * 3;
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

/* acc[i] += sum over taps of tmp rows * k: the vertical pass of one row. */
#define VERTICAL_BODY                                                                              \
	for (size_t i = 0; i < width; i++)                                                         \
		acc[i] = 1 << (PRECISION_BITS - 1);                                                \
	for (int32_t y = 0; y < n; y++) {                                                          \
		const uint8_t *in = rows + (size_t)y * stride;                                     \
		int32_t kv = k[y];                                                                 \
		for (size_t i = 0; i < width; i++)                                                 \
			acc[i] += in[i] * kv;                                                      \
	}

static void pass_vertical(const uint8_t *rows, size_t stride, size_t width, const int32_t *k,
			  int32_t n, int32_t *acc)
{
	VERTICAL_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SSE41_PATH 1

/*
 * The same passes with SSE4.1: one pixel's R,G,B(,next byte) in four 32-bit
 * lanes, one multiply-add per tap. Integer arithmetic throughout, so the
 * output is bit-identical to the scalar code. Reads one byte past the last
 * pixel of a row (see prep__resample's contract).
 */
__attribute__((target("sse4.1"))) static void pass_horizontal_sse41(const uint8_t *row,
								    unsigned x_base,
								    const struct prep__coeffs *cx,
								    uint8_t *out)
{
	const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));

	for (unsigned xx = 0; xx < cx->n; xx++) {
		const int32_t *k = &cx->k[(size_t)xx * cx->ksize];
		const uint8_t *p = row + (size_t)(cx->bounds[2 * xx] - (int32_t)x_base) * 3;
		int32_t n = cx->bounds[2 * xx + 1];
		__m128i acc = half;

		for (int32_t x = 0; x < n; x++, p += 3) {
			int32_t v;
			memcpy(&v, p, 4);
			__m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(v));
			acc = _mm_add_epi32(acc, _mm_mullo_epi32(px, _mm_set1_epi32(k[x])));
		}
		/* clip8: >> 22, then saturate to 0..255 */
		acc = _mm_srai_epi32(acc, PRECISION_BITS);
		acc = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
		uint32_t px = (uint32_t)_mm_cvtsi128_si32(acc);
		memcpy(out + 3 * xx, &px, 2);
		out[3 * xx + 2] = (uint8_t)(px >> 16);
	}
}

/* Four rows at once: each coefficient is loaded once for four pixels. */
__attribute__((target("sse4.1"))) static void pass_horizontal4_sse41(const uint8_t *const row[4],
								     unsigned x_base,
								     const struct prep__coeffs *cx,
								     uint8_t *const out[4])
{
	const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));

	for (unsigned xx = 0; xx < cx->n; xx++) {
		const int32_t *k = &cx->k[(size_t)xx * cx->ksize];
		size_t off = (size_t)(cx->bounds[2 * xx] - (int32_t)x_base) * 3;
		int32_t n = cx->bounds[2 * xx + 1];
		__m128i a0 = half, a1 = half, a2 = half, a3 = half;

		for (int32_t x = 0; x < n; x++, off += 3) {
			__m128i kv = _mm_set1_epi32(k[x]);
			int32_t v0, v1, v2, v3;
			memcpy(&v0, row[0] + off, 4);
			memcpy(&v1, row[1] + off, 4);
			memcpy(&v2, row[2] + off, 4);
			memcpy(&v3, row[3] + off, 4);
			a0 = _mm_add_epi32(
			    a0, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(v0)), kv));
			a1 = _mm_add_epi32(
			    a1, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(v1)), kv));
			a2 = _mm_add_epi32(
			    a2, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(v2)), kv));
			a3 = _mm_add_epi32(
			    a3, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(v3)), kv));
		}
		__m128i p01 = _mm_packs_epi32(_mm_srai_epi32(a0, PRECISION_BITS),
					      _mm_srai_epi32(a1, PRECISION_BITS));
		__m128i p23 = _mm_packs_epi32(_mm_srai_epi32(a2, PRECISION_BITS),
					      _mm_srai_epi32(a3, PRECISION_BITS));
		__m128i p = _mm_packus_epi16(p01, p23); /* 4 pixels x 4 bytes */
		uint32_t px[4];
		_mm_storeu_si128((__m128i *)px, p);
		for (int r = 0; r < 4; r++) {
			memcpy(out[r] + 3 * xx, &px[r], 2);
			out[r][3 * xx + 2] = (uint8_t)(px[r] >> 16);
		}
	}
}

/* The vertical pass of one output row, clipped to bytes into out. */
__attribute__((target("sse4.1"))) static void vertical_row_sse41(const uint8_t *rows, size_t stride,
								 size_t width, const int32_t *k,
								 int32_t n, int32_t *acc,
								 uint8_t *out)
{
	VERTICAL_BODY
	size_t i = 0;
	for (; i + 16 <= width; i += 16) {
		__m128i a0 =
		    _mm_srai_epi32(_mm_loadu_si128((const __m128i *)(acc + i)), PRECISION_BITS);
		__m128i a1 =
		    _mm_srai_epi32(_mm_loadu_si128((const __m128i *)(acc + i + 4)), PRECISION_BITS);
		__m128i a2 =
		    _mm_srai_epi32(_mm_loadu_si128((const __m128i *)(acc + i + 8)), PRECISION_BITS);
		__m128i a3 = _mm_srai_epi32(_mm_loadu_si128((const __m128i *)(acc + i + 12)),
					    PRECISION_BITS);
		__m128i p = _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3));
		_mm_storeu_si128((__m128i *)(out + i), p);
	}
	for (; i < width; i++)
		out[i] = clip8(acc[i]);
}

static bool use_sse41(void)
{
	/* libgcc fills the CPU model at start-up; this is a load and a test. */
	return __builtin_cpu_supports("sse4.1");
}
#else
#define HAVE_SSE41_PATH 0
#endif

/* Reverse the order of the pixels of an RGB row in place. */
static void mirror_row(uint8_t *row, unsigned n)
{
	for (unsigned a = 0, b = n - 1; a < b; a++, b--) {
		uint8_t t[3];
		memcpy(t, row + 3 * a, 3);
		memcpy(row + 3 * a, row + 3 * b, 3);
		memcpy(row + 3 * b, t, 3);
	}
}

void prep__hpass(const uint8_t *const *rows, unsigned count, unsigned x_base,
		 const struct prep__coeffs *cx, uint8_t *const *out, bool allow_simd)
{
	unsigned i = 0;

#if HAVE_SSE41_PATH
	if (allow_simd && use_sse41()) {
		for (; i + 4 <= count; i += 4)
			pass_horizontal4_sse41(rows + i, x_base, cx, out + i);
		for (; i < count; i++)
			pass_horizontal_sse41(rows[i], x_base, cx, out[i]);
	}
#endif
	for (; i < count; i++)
		pass_horizontal(rows[i], x_base, cx, out[i]);
}

int prep__vpass(const uint8_t *tmp, const struct prep__coeffs *cx, const struct prep__coeffs *cy,
		bool flip, uint8_t *dst, size_t dst_stride, bool allow_simd)
{
	size_t tmp_stride = (size_t)cx->n * 3;
	int32_t *acc = malloc(sizeof(*acc) * tmp_stride);
	bool simd = false;

	if (!acc)
		return -ENOMEM;
#if HAVE_SSE41_PATH
	simd = allow_simd && use_sse41();
#endif
	/* One output row at a time, accumulating whole rows. */
	for (unsigned yy = 0; yy < cy->n; yy++) {
		const int32_t *k = &cy->k[(size_t)yy * cy->ksize];
		int32_t n = cy->bounds[2 * yy + 1];
		uint8_t *out = dst + (size_t)yy * dst_stride;
		const uint8_t *in =
		    tmp + (size_t)(cy->bounds[2 * yy] - (int32_t)cy->lo) * tmp_stride;

#if HAVE_SSE41_PATH
		if (simd) {
			vertical_row_sse41(in, tmp_stride, tmp_stride, k, n, acc, out);
			if (flip)
				mirror_row(out, cx->n);
			continue;
		}
#endif
		pass_vertical(in, tmp_stride, tmp_stride, k, n, acc);
		for (size_t i = 0; i < tmp_stride; i++)
			out[i] = clip8(acc[i]);
		if (flip)
			mirror_row(out, cx->n);
	}
	free(acc);
	return 0;
}

int prep__resample(const uint8_t *src, size_t src_stride, unsigned src_x0, unsigned src_y0,
		   const struct prep__coeffs *cx, const struct prep__coeffs *cy, bool flip,
		   uint8_t *dst, size_t dst_stride)
{
	return prep__resample_with(src, src_stride, src_x0, src_y0, cx, cy, flip, dst, dst_stride,
				   true);
}

int prep__resample_with(const uint8_t *src, size_t src_stride, unsigned src_x0, unsigned src_y0,
			const struct prep__coeffs *cx, const struct prep__coeffs *cy, bool flip,
			uint8_t *dst, size_t dst_stride, bool allow_simd)
{
	if (cx->lo < src_x0 || cy->lo < src_y0)
		return -EINVAL;

	size_t rows = cy->hi - cy->lo;
	size_t tmp_stride = (size_t)cx->n * 3;
	uint8_t *tmp = malloc(tmp_stride * rows);
	int rc;

	if (!tmp)
		return -ENOMEM;
	/* Horizontal pass over the rows the vertical pass reads, four at a time. */
	for (size_t y = 0; y < rows; y += 4) {
		const uint8_t *in[4];
		uint8_t *out[4];
		unsigned count = rows - y < 4 ? (unsigned)(rows - y) : 4;

		for (unsigned i = 0; i < count; i++) {
			in[i] = src + (cy->lo - src_y0 + y + i) * src_stride;
			out[i] = tmp + (y + i) * tmp_stride;
		}
		prep__hpass(in, count, src_x0, cx, out, allow_simd);
	}
	rc = prep__vpass(tmp, cx, cy, flip, dst, dst_stride, allow_simd);
	free(tmp);
	return rc;
}
