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
#include <pthread.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep.h"
#include "prep/resample.h"

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

void prep__coeffs_mirror(struct prep__coeffs *c)
{
	for (unsigned a = 0, b = c->n ? c->n - 1 : 0; a < b; a++, b--) {
		int32_t t[2];
		memcpy(t, &c->bounds[2 * a], sizeof(t));
		memcpy(&c->bounds[2 * a], &c->bounds[2 * b], sizeof(t));
		memcpy(&c->bounds[2 * b], t, sizeof(t));
		int32_t *ka = &c->k[(size_t)a * c->ksize], *kb = &c->k[(size_t)b * c->ksize];
		for (unsigned i = 0; i < c->ksize; i++) {
			int32_t v = ka[i];
			ka[i] = kb[i];
			kb[i] = v;
		}
	}
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

/*
 * Output pixel xx of four rows, each the low 3 bytes of px*. When another
 * pixel follows (more), 4 bytes each: the 4th lands on the next pixel's
 * first byte, written right after, so one store per row instead of two.
 */
static inline void put4(uint8_t *restrict o0, uint8_t *restrict o1, uint8_t *restrict o2,
			uint8_t *restrict o3, unsigned xx, bool more, uint32_t px0, uint32_t px1,
			uint32_t px2, uint32_t px3)
{
	uint8_t *restrict o[4] = {o0 + 3 * xx, o1 + 3 * xx, o2 + 3 * xx, o3 + 3 * xx};
	uint32_t px[4] = {px0, px1, px2, px3};

	for (int r = 0; r < 4; r++) {
		if (more) {
			memcpy(o[r], &px[r], 4);
		} else {
			memcpy(o[r], &px[r], 2);
			o[r][2] = (uint8_t)(px[r] >> 16);
		}
	}
}

/* Four rows at once: each coefficient is loaded once for four pixels. The
 * rows and outputs are taken into restrict locals: a byte store may alias
 * anything, and with out[r] read through the array the compiler reloaded
 * each pointer after every store (8 loads per output pixel). */
__attribute__((target("sse4.1"))) static void pass_horizontal4_sse41(const uint8_t *const row[4],
								     unsigned x_base,
								     const struct prep__coeffs *cx,
								     uint8_t *const out[4])
{
	const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
	const uint8_t *const r0 = row[0], *const r1 = row[1], *const r2 = row[2],
			     *const r3 = row[3];
	uint8_t *restrict const o0 = out[0], *restrict const o1 = out[1],
			       *restrict const o2 = out[2], *restrict const o3 = out[3];
	const int32_t *restrict const bounds = cx->bounds, *restrict const kk = cx->k;
	const unsigned n_out = cx->n, ksize = cx->ksize;

	for (unsigned xx = 0; xx < n_out; xx++) {
		const int32_t *k = &kk[(size_t)xx * ksize];
		size_t off = (size_t)(bounds[2 * xx] - (int32_t)x_base) * 3;
		int32_t n = bounds[2 * xx + 1];
		__m128i a0 = half, a1 = half, a2 = half, a3 = half;

		for (int32_t x = 0; x < n; x++, off += 3) {
			__m128i kv = _mm_set1_epi32(k[x]);
			int32_t v0, v1, v2, v3;
			memcpy(&v0, r0 + off, 4);
			memcpy(&v1, r1 + off, 4);
			memcpy(&v2, r2 + off, 4);
			memcpy(&v3, r3 + off, 4);
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
		put4(o0, o1, o2, o3, xx, xx + 1 < n_out, px[0], px[1], px[2], px[3]);
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

/*
 * The vertical pass with AVX2 (compiled for it with a target attribute, run
 * only where the CPU has it): 32 bytes of a row in four registers,
 * accumulated over the taps without touching memory. Same integer
 * arithmetic as the scalar code (sums of non-negative products that cannot
 * overflow, so the order of additions does not matter): identical bytes.
 */
__attribute__((target("avx2"))) static inline __m256i load8_avx2(const uint8_t *p)
{
	return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* The vertical pass of one output row, clipped to bytes into out. */
__attribute__((target("avx2"))) static void vertical_row_avx2(const uint8_t *rows, size_t stride,
							       size_t width, const int32_t *k,
							       int32_t n, uint8_t *out)
{
	const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	size_t i = 0;

	for (; i + 32 <= width; i += 32) {
		__m256i a0 = half, a1 = half, a2 = half, a3 = half;
		const uint8_t *in = rows + i;

		for (int32_t y = 0; y < n; y++, in += stride) {
			__m256i kv = _mm256_set1_epi32(k[y]);
			a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(load8_avx2(in), kv));
			a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(load8_avx2(in + 8), kv));
			a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(load8_avx2(in + 16), kv));
			a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(load8_avx2(in + 24), kv));
		}
		/* >> 22 and saturate to bytes; the packs work per 128-bit lane,
		 * the permute puts the eight 4-byte groups back in order. */
		__m256i p01 = _mm256_packs_epi32(_mm256_srai_epi32(a0, PRECISION_BITS),
						 _mm256_srai_epi32(a1, PRECISION_BITS));
		__m256i p23 = _mm256_packs_epi32(_mm256_srai_epi32(a2, PRECISION_BITS),
						 _mm256_srai_epi32(a3, PRECISION_BITS));
		__m256i p = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
		_mm256_storeu_si256((__m256i *)(out + i), p);
	}
	for (; i + 8 <= width; i += 8) {
		__m256i a = half;
		const uint8_t *in = rows + i;

		for (int32_t y = 0; y < n; y++, in += stride)
			a = _mm256_add_epi32(a, _mm256_mullo_epi32(load8_avx2(in), _mm256_set1_epi32(k[y])));
		a = _mm256_srai_epi32(a, PRECISION_BITS);
		__m128i w = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
		_mm_storel_epi64((__m128i *)(out + i), _mm_packus_epi16(w, w));
	}
	for (; i < width; i++) {
		int32_t s = 1 << (PRECISION_BITS - 1);
		for (int32_t y = 0; y < n; y++)
			s += rows[(size_t)y * stride + i] * k[y];
		out[i] = clip8(s);
	}
}

/* Two pair registers (rows 0,1 and rows 2,3), >> 22 and saturated to
 * bytes, into output pixel xx of o[0..3]. */
__attribute__((target("avx2"))) static inline void put4_avx2(__m256i a01, __m256i a23,
							      uint8_t *const *o, unsigned xx,
							      bool more)
{
	/* the packs work per 128-bit half: the low half ends with rows 0, 2
	 * in its first two 4-byte groups, the high half with rows 1, 3 */
	__m256i p = _mm256_packs_epi32(_mm256_srai_epi32(a01, PRECISION_BITS),
				       _mm256_srai_epi32(a23, PRECISION_BITS));
	p = _mm256_packus_epi16(p, p);
	__m128i lo = _mm256_castsi256_si128(p), hi = _mm256_extracti128_si256(p, 1);
	put4(o[0], o[1], o[2], o[3], xx, more, (uint32_t)_mm_cvtsi128_si32(lo),
	     (uint32_t)_mm_cvtsi128_si32(hi), (uint32_t)_mm_extract_epi32(lo, 1),
	     (uint32_t)_mm_extract_epi32(hi, 1));
}

/* Two rows' pixels at off in one register, widened to 32-bit lanes. */
__attribute__((target("avx2"))) static inline __m256i two_rows_avx2(const uint8_t *a,
								    const uint8_t *b, size_t off)
{
	int32_t va, vb;
	memcpy(&va, a + off, 4);
	memcpy(&vb, b + off, 4);
	return _mm256_cvtepu8_epi32(_mm_insert_epi32(_mm_cvtsi32_si128(va), vb, 1));
}

/*
 * The horizontal pass of four rows with AVX2: two rows per register. A
 * tap's pixel of rows 0 and 1 (R,G,B and the next byte) fill the two
 * 128-bit halves of one register, rows 2 and 3 another; one multiply by the
 * broadcast coefficient and one add per register, so per tap 2 of each
 * where the SSE4.1 pass needs 4. Earlier AVX2 designs that put two taps
 * or two output pixels in a register did not pay: a rrc224 row of a
 * photo has 2-5 taps, and the fold at the end cost what the taps saved
 * (measured: +5% instructions per sample from the decoded tier). Same
 * integer sums as the scalar pass: identical bytes.
 */
__attribute__((target("avx2"), always_inline)) static inline void
pass_horizontal_avx2(const uint8_t *const row[], unsigned x_base, const struct prep__coeffs *cx,
		     uint8_t *const out[], const int groups)
{
	const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
	const int32_t *restrict const bounds = cx->bounds, *restrict const kk = cx->k;
	const unsigned n_out = cx->n, ksize = cx->ksize;
	const uint8_t *r[8];
	uint8_t *o[8];

	/* locals: a byte store may alias row[] and out[], which the compiler
	 * would otherwise load again after every store */
	for (int i = 0; i < 4 * groups; i++) {
		r[i] = row[i];
		o[i] = out[i];
	}
	for (unsigned xx = 0; xx < n_out; xx++) {
		const int32_t *k = &kk[(size_t)xx * ksize];
		size_t off = (size_t)(bounds[2 * xx] - (int32_t)x_base) * 3;
		int32_t n = bounds[2 * xx + 1];
		__m256i a[4] = {half, half, half, half};

		for (int32_t x = 0; x < n; x++, off += 3) {
			__m256i kv = _mm256_set1_epi32(k[x]);
			for (int p = 0; p < 2 * groups; p++)
				a[p] = _mm256_add_epi32(
				    a[p], _mm256_mullo_epi32(two_rows_avx2(r[2 * p], r[2 * p + 1], off), kv));
		}
		for (int g = 0; g < groups; g++)
			put4_avx2(a[2 * g], a[2 * g + 1], o + 4 * g, xx, xx + 1 < n_out);
	}
}

__attribute__((target("avx2"))) static void pass_horizontal4_avx2(const uint8_t *const row[4],
								    unsigned x_base,
								    const struct prep__coeffs *cx,
								    uint8_t *const out[4])
{
	pass_horizontal_avx2(row, x_base, cx, out, 1);
}

/*
 * Eight rows at once (the decoded tier's resamples have every row at
 * hand): the coefficient broadcast and the loop are paid once for eight
 * rows, four pair registers per tap.
 */
__attribute__((target("avx2"))) static void pass_horizontal8_avx2(const uint8_t *const row[8],
								    unsigned x_base,
								    const struct prep__coeffs *cx,
								    uint8_t *const out[8])
{
	pass_horizontal_avx2(row, x_base, cx, out, 2);
}

static int cpu_level(void)
{
	/* libgcc fills the CPU model at start-up; these are loads and tests. */
	if (__builtin_cpu_supports("avx2"))
		return PREP__SIMD_AVX2;
	if (__builtin_cpu_supports("sse4.1"))
		return PREP__SIMD_SSE41;
	return PREP__SIMD_SCALAR;
}
#else
#define HAVE_SSE41_PATH 0
static int cpu_level(void)
{
	return PREP__SIMD_SCALAR;
}
#endif

/* -1: not chosen yet. Relaxed: every value a reader can see is valid. */
static _Atomic int simd_level = -1;

static int level_of_name(const char *s)
{
	if (!strcmp(s, "scalar"))
		return PREP__SIMD_SCALAR;
	if (!strcmp(s, "sse41") || !strcmp(s, "sse4.1"))
		return PREP__SIMD_SSE41;
	if (!strcmp(s, "avx2"))
		return PREP__SIMD_AVX2;
	return -1;
}

const char *prep__simd_name(int level)
{
	return level == PREP__SIMD_AVX2 ? "avx2" : level == PREP__SIMD_SSE41 ? "sse41" : "scalar";
}

int prep__simd_set(int level)
{
	if (level < 0) {
		/* The best the CPU has, lowered by COORDFS_SIMD (an unknown
		 * value is ignored: this is a test and benchmark knob). */
		const char *env = getenv("COORDFS_SIMD");
		int best = cpu_level(), want = env ? level_of_name(env) : -1;

		level = want >= 0 && want < best ? want : best;
	} else if (level > cpu_level()) {
		return -ENOTSUP;
	}
	atomic_store_explicit(&simd_level, level, memory_order_relaxed);
	return level;
}

int prep__simd(void)
{
	int level = atomic_load_explicit(&simd_level, memory_order_relaxed);

	return level >= 0 ? level : prep__simd_set(-1);
}

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
	int level = allow_simd ? prep__simd() : PREP__SIMD_SCALAR;

	if (level == PREP__SIMD_AVX2) {
		for (; i + 8 <= count; i += 8)
			pass_horizontal8_avx2(rows + i, x_base, cx, out + i);
		for (; i + 4 <= count; i += 4)
			pass_horizontal4_avx2(rows + i, x_base, cx, out + i);
	}
	if (level >= PREP__SIMD_SSE41) {
		for (; i + 4 <= count; i += 4)
			pass_horizontal4_sse41(rows + i, x_base, cx, out + i);
		for (; i < count; i++)
			pass_horizontal_sse41(rows[i], x_base, cx, out[i]);
	}
#else
	(void)allow_simd;
#endif
	for (; i < count; i++)
		pass_horizontal(rows[i], x_base, cx, out[i]);
}

/*
 * The scalar and SSE4.1 vertical passes accumulate a whole row in memory:
 * 12 bytes per output pixel, kept per thread up to ACC_KEEP bytes (a
 * 224-pixel row takes 2.6 KiB) so that no sample mallocs it; wider rows
 * get a buffer of their own, freed after the pass.
 */
#define ACC_KEEP (16u << 10)
static _Thread_local int32_t acc_keep[ACC_KEEP / sizeof(int32_t)];

int prep__vpass(const uint8_t *tmp, const struct prep__coeffs *cx, const struct prep__coeffs *cy,
		bool flip, uint8_t *dst, size_t dst_stride, bool allow_simd)
{
	size_t tmp_stride = (size_t)cx->n * 3;
	int level = allow_simd ? prep__simd() : PREP__SIMD_SCALAR;
	int32_t *acc = NULL;

#if !HAVE_SSE41_PATH
	level = PREP__SIMD_SCALAR;
#endif
	if (level != PREP__SIMD_AVX2) {
		acc = tmp_stride <= sizeof(acc_keep) / sizeof(acc_keep[0])
			  ? acc_keep
			  : malloc(sizeof(*acc) * tmp_stride);
		if (!acc)
			return -ENOMEM;
	}
	/* One output row at a time, accumulating whole rows. */
	for (unsigned yy = 0; yy < cy->n; yy++) {
		const int32_t *k = &cy->k[(size_t)yy * cy->ksize];
		int32_t n = cy->bounds[2 * yy + 1];
		uint8_t *out = dst + (size_t)yy * dst_stride;
		const uint8_t *in =
		    tmp + (size_t)(cy->bounds[2 * yy] - (int32_t)cy->lo) * tmp_stride;

#if HAVE_SSE41_PATH
		if (level == PREP__SIMD_AVX2)
			vertical_row_avx2(in, tmp_stride, tmp_stride, k, n, out);
		else if (level == PREP__SIMD_SSE41)
			vertical_row_sse41(in, tmp_stride, tmp_stride, k, n, acc, out);
		else
#endif
		{
			pass_vertical(in, tmp_stride, tmp_stride, k, n, acc);
			for (size_t i = 0; i < tmp_stride; i++)
				out[i] = clip8(acc[i]);
		}
		if (flip)
			mirror_row(out, cx->n);
	}
	if (acc != acc_keep)
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
	size_t tmp_cap = 0;
	/* From the pool: a malloc'd buffer would be fresh pages whenever the
	 * heap's free memory was trimmed or fragmented by samples freed
	 * elsewhere (decode-ahead threads render samples other threads free:
	 * 14 page faults per sample before) */
	uint8_t *tmp = prep__scratch_get(tmp_stride * rows, &tmp_cap);
	int rc;

	if (!tmp)
		return -ENOMEM;
	/* Horizontal pass over the rows the vertical pass reads, eight at a time. */
	for (size_t y = 0; y < rows; y += 8) {
		const uint8_t *in[8];
		uint8_t *out[8];
		unsigned count = rows - y < 8 ? (unsigned)(rows - y) : 8;

		for (unsigned i = 0; i < count; i++) {
			in[i] = src + (cy->lo - src_y0 + y + i) * src_stride;
			out[i] = tmp + (y + i) * tmp_stride;
		}
		prep__hpass(in, count, src_x0, cx, out, allow_simd);
	}
	rc = prep__vpass(tmp, cx, cy, flip, dst, dst_stride, allow_simd);
	prep__scratch_put(tmp, tmp_cap);
	return rc;
}

/*
 * Reusable decode buffers. At most `threads` decodes (and the decode-ahead
 * threads' renders) run at once, each taking a region buffer and a row
 * buffer, or prep__resample's horizontally reduced rows; a few slots of up to
 * SCRATCH_KEEP bytes each keep them between decodes, so a sample mallocs
 * neither (nor page-faults them in again after glibc returned them to the
 * kernel). Larger buffers are freed after use. prep__scratch_drop frees
 * the kept ones (the view calls it when its decode threads are idle).
 */
#define SCRATCH_SLOTS 16
#define SCRATCH_KEEP (1u << 20)
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *p;
	size_t cap;
} scratch[SCRATCH_SLOTS];
static _Atomic size_t scratch_kept;

void *prep__scratch_get(size_t n, size_t *cap)
{
	void *p = NULL, *drop = NULL;
	int best = -1;

	pthread_mutex_lock(&scratch_lock);
	for (int i = 0; i < SCRATCH_SLOTS; i++)
		if (scratch[i].p && scratch[i].cap >= n && (best < 0 || scratch[i].cap < scratch[best].cap))
			best = i;
	if (best < 0 && n <= SCRATCH_KEEP) /* replace the largest smaller one */
		for (int i = 0; i < SCRATCH_SLOTS; i++)
			if (scratch[i].p && (best < 0 || scratch[i].cap > scratch[best].cap))
				best = i;
	if (best >= 0) {
		if (scratch[best].cap >= n) {
			p = scratch[best].p;
			*cap = scratch[best].cap;
		} else {
			drop = scratch[best].p;
		}
		atomic_fetch_sub_explicit(&scratch_kept, scratch[best].cap, memory_order_relaxed);
		scratch[best].p = NULL;
		scratch[best].cap = 0;
	}
	pthread_mutex_unlock(&scratch_lock);
	free(drop);
	if (!p) {
		/* round up so that slightly larger regions reuse the buffer */
		size_t want = n <= SCRATCH_KEEP ? (n + 4095) & ~(size_t)4095 : n;
		if ((p = malloc(want)))
			*cap = want;
	}
	return p;
}

void prep__scratch_put(void *p, size_t cap)
{
	if (!p)
		return;
	if (cap <= SCRATCH_KEEP) {
		pthread_mutex_lock(&scratch_lock);
		for (int i = 0; i < SCRATCH_SLOTS; i++) {
			if (!scratch[i].p) {
				scratch[i].p = p;
				scratch[i].cap = cap;
				atomic_fetch_add_explicit(&scratch_kept, cap, memory_order_relaxed);
				p = NULL;
				break;
			}
		}
		pthread_mutex_unlock(&scratch_lock);
	}
	free(p);
}

void prep__scratch_drop(void)
{
	void *p[SCRATCH_SLOTS];

	pthread_mutex_lock(&scratch_lock);
	for (int i = 0; i < SCRATCH_SLOTS; i++) {
		p[i] = scratch[i].p;
		scratch[i].p = NULL;
		scratch[i].cap = 0;
	}
	atomic_store_explicit(&scratch_kept, 0, memory_order_relaxed);
	pthread_mutex_unlock(&scratch_lock);
	for (int i = 0; i < SCRATCH_SLOTS; i++)
		free(p[i]);
}

size_t prep__scratch_kept(void)
{
	return atomic_load_explicit(&scratch_kept, memory_order_relaxed);
}
