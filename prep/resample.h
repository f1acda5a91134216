/* SPDX-License-Identifier: MIT */
/*
 * prep/resample.c: PIL's antialiased bilinear resampler (coefficients, the
 * horizontal and vertical passes, scalar and SIMD kernels) and the pool of
 * work buffers reused across decodes.
 */
#ifndef COORDFS_PREP_RESAMPLE_H
#define COORDFS_PREP_RESAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREP__PAD 16 /* slack after pixel buffers: SIMD loads read past the last pixel */

/* ---- resampling (PIL's ImagingResample, BILINEAR, 8 bits per channel) ---- */

struct prep__coeffs {
	unsigned n;	 /* outputs */
	unsigned ksize;	 /* taps per output (stride of k) */
	int32_t *bounds; /* per output: first input (absolute), tap count */
	int32_t *k;	 /* fixed-point weights, 22 fractional bits */
	unsigned lo, hi; /* inputs read: [lo, hi) */
};

/*
 * Coefficients of one axis: box [box0, box1) onto a virtual grid of vsize
 * outputs, producing outputs o0..o0+n-1; the filter reads only [clip0, clip1).
 * Everything in the coordinates of the image being resampled.
 */
int prep__coeffs_make(double box0, double box1, unsigned clip0, unsigned clip1, unsigned vsize,
		      unsigned o0, unsigned n, struct prep__coeffs *c);
void prep__coeffs_free(struct prep__coeffs *c);
/*
 * Reverse the order of c's outputs: resampling with the result gives the
 * rows a flip (mirror_row) of the unmirrored output would, byte for byte
 * (each output is computed alone), without the pass over the finished
 * rows that the flip costs (~8% of a sample rendered from the tier).
 */
void prep__coeffs_mirror(struct prep__coeffs *c);

/*
 * Resample RGB src (its pixel (0,0) is at absolute (src_x0, src_y0); it must
 * cover [cx.lo,cx.hi) x [cy.lo,cy.hi), and PREP__PAD readable bytes must
 * follow its last pixel) into dst (cx.n x cy.n RGB).
 * Horizontal pass then vertical, each rounded to 8 bits, as PIL does.
 */
int prep__resample(const uint8_t *src, size_t src_stride, unsigned src_x0, unsigned src_y0,
		   const struct prep__coeffs *cx, const struct prep__coeffs *cy, bool flip,
		   uint8_t *dst, size_t dst_stride);
/*
 * The two passes separately, for decoders that stream rows. prep__hpass:
 * count (any; 4 or 8 take the fast paths) rows whose first pixel is at
 * absolute column x_base, each followed by PREP__PAD readable bytes, into
 * out rows of cx->n RGB pixels. prep__vpass: tmp holds rows cy->lo ..
 * cy->hi - 1 of the horizontal pass, cx->n pixels each; writes cy->n rows.
 */
void prep__hpass(const uint8_t *const *rows, unsigned count, unsigned x_base,
		 const struct prep__coeffs *cx, uint8_t *const *out, bool allow_simd);
int prep__vpass(const uint8_t *tmp, const struct prep__coeffs *cx, const struct prep__coeffs *cy,
		bool flip, uint8_t *dst, size_t dst_stride, bool allow_simd);
/* The same, with the SIMD kernels allowed or not (they give identical bytes). */
int prep__resample_with(const uint8_t *src, size_t src_stride, unsigned src_x0, unsigned src_y0,
			const struct prep__coeffs *cx, const struct prep__coeffs *cy, bool flip,
			uint8_t *dst, size_t dst_stride, bool allow_simd);

/*
 * Which resampling kernels run: PREP__SIMD_AVX2, _SSE41 or _SCALAR (all give
 * identical bytes). prep__simd: the current level; the first call picks the
 * best the CPU has, lowered by the environment variable COORDFS_SIMD
 * (scalar, sse41, avx2; a test and benchmark knob). prep__simd_set(level):
 * force a level for the whole process (-1: pick again as above); returns
 * the level or -ENOTSUP when the CPU lacks it. Thread-safe.
 */
enum { PREP__SIMD_SCALAR, PREP__SIMD_SSE41, PREP__SIMD_AVX2 };
int prep__simd(void);
int prep__simd_set(int level);
const char *prep__simd_name(int level);

/*
 * Work buffers reused across decodes (prep__render_geom's row and region
 * buffers): get returns at least n bytes (*cap: how many), put hands them
 * back (kept while at most 16 buffers of <= 1 MiB are, else freed), drop
 * frees every kept one; kept: their bytes. Thread-safe.
 */
void *prep__scratch_get(size_t n, size_t *cap);
void prep__scratch_put(void *p, size_t cap);
void prep__scratch_drop(void);
size_t prep__scratch_kept(void);

#endif
