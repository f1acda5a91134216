/* SPDX-License-Identifier: MIT */
/*
 * prep/ internals shared by its files and its white-box tests: the
 * counter-based generator, torchvision's RandomResizedCrop parameters, the
 * resampling geometry, the PIL-compatible resampler and the decoders.
 */
#ifndef COORDFS_PREP_PREP_INT_H
#define COORDFS_PREP_PREP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prep/prep.h"

#define PREP__JPEG_MAX_SCANS 1000	  /* progressive "scan bombs" */
#define PREP__JPEG_MAX_MEM (768ull << 20) /* libjpeg's own allocations */
#define PREP__EOI_WINDOW 64 /* a JPEG whose EOI starts in its last 64 bytes is complete */
#define PREP__PAD 16 /* slack after pixel buffers: SIMD loads read past the last pixel */

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
};

/* The geometry of recipe r for a W x H source. 0, -EINVAL, -EFBIG. */
int prep__plan(const struct prep_recipe *r, unsigned W, unsigned H, uint64_t seed,
	       uint64_t file_key, uint32_t version, struct prep__geom *g);

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
 * count (<= 4 for the fast path, any is fine) rows whose first pixel is at
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

/* ---- decoding ---------------------------------------------------------- */

enum prep__format { PREP__UNKNOWN, PREP__JPEG, PREP__PNG, PREP__PNM, PREP__BMP, PREP__WEBP, PREP__TIFF };
enum prep__format prep__sniff(const void *data, size_t len);

/* Called once the source size is known; fills the geometry. 0 / -errno. */
typedef int (*prep__plan_fn)(void *arg, unsigned W, unsigned H, struct prep__geom *g);

/*
 * Decode data and resample it along the geometry that plan returns into a
 * malloc'd PPM. scale_num: 0 picks the DCT scale M/8 automatically (the
 * smallest that keeps at least one decoded pixel per output pixel), 1..8
 * forces M (8 = full resolution). Thread-safe.
 */
int prep__render_geom(const void *data, size_t len, prep__plan_fn plan, void *arg,
		      unsigned scale_num, uint8_t **out_ppm, size_t *out_len);

/* A whole image decoded to RGB at full resolution (tests, tools). */
struct prep__image {
	unsigned w, h;
	uint8_t *rgb;	/* w*h*3 (+ PREP__PAD readable bytes): malloc'd, or the caller's */
	unsigned scale; /* M of the DCT scale M/8 it was decoded at */
};
int prep__decode_full(const void *data, size_t len, struct prep__image *out);
/* The whole frame at DCT scale M/8 (JPEG; every other format ignores M and
 * gives full resolution, out->scale 8): what the region decoder of
 * prep__render_geom reconstructs at that scale, for the decoded tier. */
int prep__decode_scaled(const void *data, size_t len, unsigned M, struct prep__image *out);
/* The same into dst (cap bytes; prep__scaled_bytes of the frame fits), so
 * out->rgb == dst: the decoded tier carves its images out of large mappings.
 * -ENOSPC when the frame is larger than cap. */
int prep__decode_scaled_into(const void *data, size_t len, unsigned M, uint8_t *dst, size_t cap,
			     struct prep__image *out);
/* Bytes a prep__decode_scaled image of a W x H source at scale M holds. */
uint64_t prep__scaled_bytes(unsigned W, unsigned H, unsigned M);

/*
 * Resample decoded pixels along the geometry plan returns for their source
 * size W x H: img is that source decoded whole at img->scale (see
 * prep__decode_scaled). Gives the same bytes as prep__render_geom on the
 * file at that scale. Thread-safe; img is only read.
 */
int prep__render_pixels(const struct prep__image *img, unsigned W, unsigned H, prep__plan_fn plan,
			void *arg, uint8_t **out_ppm, size_t *out_len);

/* The DCT scale prep_render picks for recipe r / version on a W x H source
 * (jpeg: can the decoder scale; else 8). 0 / -errno of prep__plan. */
int prep__sample_scale(const struct prep_recipe *r, unsigned W, unsigned H, bool jpeg,
		       uint64_t seed, uint64_t file_key, uint32_t version, unsigned *M);
/* prep_render from decoded pixels (prep__render_pixels with r's plan). */
int prep__render_from_pixels(const struct prep_recipe *r, const struct prep__image *img,
			     unsigned W, unsigned H, uint64_t seed, uint64_t file_key,
			     uint32_t version, uint8_t **out_ppm, size_t *out_len);

/* The DCT scale (M in M/8) picked for a geometry. */
unsigned prep__pick_scale(const struct prep__geom *g);

/* Write the PPM header for w x h into buf (>= 32 bytes); returns its length. */
size_t prep__ppm_header(unsigned w, unsigned h, char *buf);

#endif
