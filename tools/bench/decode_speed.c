/* SPDX-License-Identifier: MIT */
/*
 * decode_speed: single-thread images/s of the prepared view's decode path
 * against plain full-image decodes, on the same JPEG files held in memory.
 * It shows what region-of-interest decoding and DCT-domain downscaling buy
 * for a recipe (default rrc224), as a 2x2 ablation plus baselines:
 *
 *   entropy_only    libjpeg Huffman-decodes every row but builds only the
 *                   last one (jpeg_skip_scanlines): the floor of any
 *                   baseline-JPEG decoder, which cannot skip entropy data
 *   libjpeg_full    libjpeg, whole image, RGB, ISLOW, fancy upsampling
 *                   (the settings PIL decodes with); decode only
 *   tj_full         tjDecompress2, whole image, RGB, accurate DCT; decode only
 *   tj_full+rs      tj_full + prep's resampler for the recipe's crop: the
 *                   complete sample with neither trick
 *   tj_dct+rs       tjDecompress2 at the DCT scale M/8 prep picks, whole
 *                   frame, + resampler: DCT scaling only
 *   prep_roi        prep's decoder forced to full scale (M = 8): cropped and
 *                   skipped rows/columns only
 *   prep_render     prep_render(): ROI + DCT scaling (what the daemon runs)
 *   prep_pow2       prep's decoder with the scale rounded up to 1, 2, 4 or 8
 *                   eighths (libjpeg-turbo's SIMD IDCT sizes)
 *   tier_rgb        the decoded tier: the sample resampled from the image
 *                   decoded whole (RGB, at the DCT scale prep_render picks)
 *                   beforehand, untimed, as the daemon holds it
 *   proto_roi_pow2[_stop]  a minimal ROI decoder written here (margins
 *                   around the crop, power-of-two scale; _stop: abort after
 *                   the last needed row), to measure proposals for prep/
 *
 * Every mode renders the same (seed, file, version) crops. An untimed pass
 * first compares each ROI result with the whole-frame decode at the same
 * DCT scale resampled the same way (ROI decoding must not change a pixel)
 * and counts the images that differ. Prints one JSON object; exit 3 when
 * the prototypes are not exact. Rates are images per CPU-second of the
 * thread (per-core speed on a shared machine) and per wall-clock second.
 * It uses prep/'s internal header (prep/prep_int.h) for the geometry and the
 * resampler, like prep/'s white-box tests do.
 *
 * Usage: decode_speed [--recipe rrc224] [--rounds N] [--min-time S]
 *                     [--only MODE] [--no-check] [--resample] FILE...
 * (--only times one mode, e.g. under perf; --no-check skips the pixel checks;
 * --resample times only the resampler, once per kernel level the CPU has
 * (scalar, SSE4.1, AVX2), on whole frames decoded untimed, and checks that
 * the levels give identical bytes: {"resample_us": {...}} per sample.)
 * Build: cc -O2 -I REPO tools/bench/decode_speed.c build/prep/libcoordfs_prep.a
 *        build/common/libcoordfs_common.a -lturbojpeg -ljpeg -lpng -lm -lpthread
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpeglib.h>
#include <turbojpeg.h>

#include "common/file.h"
#include "common/hash.h"
#include "prep/prep.h"
#include "prep/prep_int.h"

#define MAX_FILES 100000
#define MAX_FILE_BYTES (64u << 20)
#define SEED 0x5eedULL
#define SLACK 64 /* readable bytes after every pixel buffer (SIMD resampler loads) */

enum mode {
	M_ENTROPY,
	M_LIBJPEG,
	M_TJ_FULL,
	M_TJ_FULL_RS,
	M_TJ_DCT_RS,
	M_PREP_ROI,
	M_PREP,
	M_PREP_POW2,
	M_PROTO,
	M_PROTO_STOP,
	M_TIER,
	NTIMED,
	M_REF_POW2 = NTIMED, /* verification only: tj at the power-of-two scale */
	NMODES
};

static const char *const mode_name[NMODES] = {
	"entropy_only", "libjpeg_full", "tj_full",     "tj_full+rs",      "tj_dct+rs", "prep_roi",
	"prep_render",  "prep_pow2",   "proto_roi_pow2",  "proto_roi_pow2_stop", "tier_rgb", "tj_pow2+rs",
};

struct image {
	const char *path;
	uint8_t *data;
	size_t len;
	unsigned w, h;
	uint64_t key;
	struct prep__image held[4]; /* tier_rgb: decoded whole at 1, 2, 4, 8 eighths */
};

struct ctx {
	struct prep_recipe recipe;
	tjhandle tj;
	uint8_t *full;    /* scratch for full decodes */
	size_t full_cap;
	bool keep;                /* verification pass: keep each mode's pixels */
	uint8_t *res[NMODES];
	size_t res_len[NMODES];
	/* geometry statistics, gathered once per round of prep_render */
	double sum_m, sum_frac;
	unsigned long ngeom;
};

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* CPU time of this thread: on a shared machine, images per CPU-second is the
 * per-core speed; wall time also counts other processes' turns. */
static double cpu_s(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

/* In the verification pass, keep a copy of a mode's result pixels. */
static void keep(struct ctx *c, enum mode mode, const uint8_t *p, size_t n)
{
	if (!c->keep)
		return;
	uint8_t *q = realloc(c->res[mode], n ? n : 1);
	if (!q) {
		c->res_len[mode] = 0;
		return;
	}
	memcpy(q, p, n);
	c->res[mode] = q;
	c->res_len[mode] = n;
}

static int grow_full(struct ctx *c, size_t need)
{
	need += SLACK;
	if (need <= c->full_cap)
		return 0;
	uint8_t *p = realloc(c->full, need);
	if (!p)
		return -ENOMEM;
	c->full = p;
	c->full_cap = need;
	return 0;
}

/* ---- libjpeg full decode ---- */

struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
};

static void jerr_exit(j_common_ptr ci)
{
	longjmp(((struct jerr *)ci->err)->jb, 1);
}

static int libjpeg_full(struct ctx *c, const struct image *im)
{
	struct jpeg_decompress_struct ci;
	struct jerr err;
	volatile int rc = 0;

	memset(&ci, 0, sizeof(ci));
	ci.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = jerr_exit;
	if (setjmp(err.jb)) {
		rc = -EIO;
		goto out;
	}
	jpeg_create_decompress(&ci);
	jpeg_mem_src(&ci, im->data, (unsigned long)im->len);
	jpeg_read_header(&ci, TRUE);
	ci.out_color_space = JCS_RGB;
	ci.dct_method = JDCT_ISLOW;
	ci.do_fancy_upsampling = TRUE;
	jpeg_start_decompress(&ci);
	size_t stride = (size_t)ci.output_width * 3;
	if (grow_full(c, stride * ci.output_height) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	while (ci.output_scanline < ci.output_height) {
		JSAMPROW row = c->full + (size_t)ci.output_scanline * stride;
		jpeg_read_scanlines(&ci, &row, 1);
	}
	jpeg_finish_decompress(&ci);
	keep(c, M_LIBJPEG, c->full, stride * ci.output_height);
out:
	jpeg_destroy_decompress(&ci);
	return rc;
}

/* The power-of-two DCT scale at least as fine as m (libjpeg-turbo has SIMD
 * IDCTs for 8/8, 4/8, 2/8 and 1/8 only; the other sizes run plain C). */
static unsigned pow2_scale(unsigned m)
{
	return m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : 8;
}

/* Entropy decoding alone: skip every row but the last (skipping to the very
 * end would decode nothing at all), then read that one. */
static int entropy_only(struct ctx *c, const struct image *im)
{
	struct jpeg_decompress_struct ci;
	struct jerr err;
	volatile int rc = 0;

	memset(&ci, 0, sizeof(ci));
	ci.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = jerr_exit;
	if (setjmp(err.jb)) {
		rc = -EIO;
		goto out;
	}
	jpeg_create_decompress(&ci);
	jpeg_mem_src(&ci, im->data, (unsigned long)im->len);
	jpeg_read_header(&ci, TRUE);
	ci.out_color_space = JCS_RGB;
	jpeg_start_decompress(&ci);
	if (grow_full(c, (size_t)ci.output_width * 3) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	if (ci.output_height > 1)
		jpeg_skip_scanlines(&ci, ci.output_height - 1);
	JSAMPROW row = c->full;
	jpeg_read_scanlines(&ci, &row, 1);
	jpeg_finish_decompress(&ci);
out:
	jpeg_destroy_decompress(&ci);
	return rc;
}

/* ---- TurboJPEG decodes, optionally resampled with prep's resampler ---- */

struct plan_arg {
	const struct prep_recipe *r;
	uint64_t key;
	uint32_t version;
};

static int plan_cb(void *arg, unsigned W, unsigned H, struct prep__geom *g)
{
	const struct plan_arg *a = arg;

	return prep__plan(a->r, W, H, SEED, a->key, a->version, g);
}

/* Decode at scale M/8 (whole frame) into c->full; sizes out. */
static int tj_decode(struct ctx *c, const struct image *im, unsigned m, unsigned *sw,
		     unsigned *sh)
{
	tjscalingfactor sf = { (int)m, 8 };
	int w = TJSCALED((int)im->w, sf), h = TJSCALED((int)im->h, sf);

	if (grow_full(c, (size_t)w * h * 3) < 0)
		return -ENOMEM;
	if (tjDecompress2(c->tj, im->data, (unsigned long)im->len, c->full, w, w * 3, h, TJPF_RGB,
			  0) != 0)
		return -EIO;
	*sw = (unsigned)w;
	*sh = (unsigned)h;
	return 0;
}

/*
 * The recipe's sample from a whole-frame decode at scale m/8 (m = 0: the
 * scale prep would pick), resampled exactly as prep's decoder does it
 * (coefficients in scaled coordinates, filter clipped to the crop).
 */
static int tj_resampled(struct ctx *c, const struct image *im, uint32_t version, unsigned m,
			enum mode mode)
{
	struct prep__geom g;
	struct prep__coeffs cx, cy;
	unsigned sw, sh;
	uint8_t *out = NULL;
	int rc;

	memset(&cx, 0, sizeof(cx));
	memset(&cy, 0, sizeof(cy));
	if ((rc = prep__plan(&c->recipe, im->w, im->h, SEED, im->key, version, &g)) < 0)
		return rc;
	if (m == 0)
		m = prep__pick_scale(&g);
	else if (m == 100)
		m = pow2_scale(prep__pick_scale(&g));
	if ((rc = tj_decode(c, im, m, &sw, &sh)) < 0)
		return rc;
	double s = m / 8.0;
	unsigned c0x = (unsigned)(g.clip_x0 * s), c1x = (unsigned)ceil(g.clip_x1 * s);
	unsigned c0y = (unsigned)(g.clip_y0 * s), c1y = (unsigned)ceil(g.clip_y1 * s);
	if (c1x > sw)
		c1x = sw;
	if (c1y > sh)
		c1y = sh;
	if (c0x >= c1x)
		c0x = c1x - 1;
	if (c0y >= c1y)
		c0y = c1y - 1;
	rc = prep__coeffs_make(g.box_x0 * s, g.box_x1 * s, c0x, c1x, g.vw, g.ox, g.ow, &cx);
	if (rc == 0)
		rc = prep__coeffs_make(g.box_y0 * s, g.box_y1 * s, c0y, c1y, g.vh, g.oy, g.oh, &cy);
	if (rc < 0)
		goto out;
	out = malloc((size_t)g.ow * g.oh * 3);
	if (!out) {
		rc = -ENOMEM;
		goto out;
	}
	rc = prep__resample(c->full, (size_t)sw * 3, 0, 0, &cx, &cy, g.flip, out, (size_t)g.ow * 3);
	if (rc == 0)
		keep(c, mode, out, (size_t)g.ow * g.oh * 3);
out:
	free(out);
	prep__coeffs_free(&cx);
	prep__coeffs_free(&cy);
	return rc;
}

/* Keep the pixels of a PPM (after its header). */
static void keep_ppm(struct ctx *c, enum mode mode, const struct image *im, const uint8_t *ppm,
		     size_t len, uint32_t version)
{
	struct prep__geom g;

	if (prep__plan(&c->recipe, im->w, im->h, SEED, im->key, version, &g) < 0)
		return;
	size_t px = (size_t)g.ow * g.oh * 3;
	if (len >= px)
		keep(c, mode, ppm + len - px, px);
}

/*
 * Prototype of two proposals for prep's JPEG path, to measure them without
 * touching prep/: (1) crop the decoded columns with a margin on both sides,
 * so that fancy (chroma) upsampling of the first and last needed columns
 * sees their neighbours (libjpeg-turbo treats a cropped scanline's ends as
 * the image's edges); (2) with stop, abort after the last needed row
 * instead of entropy-decoding the rest of the file. DCT scale: power of two.
 * YCbCr/gray/RGB JPEGs only (the benchmark's files).
 */
static int proto_render(struct ctx *c, const struct image *im, uint32_t version, bool stop,
			enum mode mode)
{
	struct jpeg_decompress_struct ci;
	struct jerr err;
	struct prep__geom g;
	struct prep__coeffs cx, cy;
	uint8_t *volatile buf = NULL;
	uint8_t *volatile out = NULL;
	volatile int rc = 0;

	memset(&ci, 0, sizeof(ci));
	memset(&cx, 0, sizeof(cx));
	memset(&cy, 0, sizeof(cy));
	ci.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = jerr_exit;
	if (setjmp(err.jb)) {
		rc = -EIO;
		goto out;
	}
	jpeg_create_decompress(&ci);
	jpeg_mem_src(&ci, im->data, (unsigned long)im->len);
	jpeg_read_header(&ci, TRUE);
	if ((rc = prep__plan(&c->recipe, ci.image_width, ci.image_height, SEED, im->key, version,
			     &g)) < 0)
		goto out;
	unsigned m = pow2_scale(prep__pick_scale(&g));
	ci.out_color_space = JCS_RGB;
	ci.scale_num = m;
	ci.scale_denom = 8;
	ci.dct_method = JDCT_ISLOW;
	ci.do_fancy_upsampling = TRUE;
	jpeg_calc_output_dimensions(&ci);
	unsigned sw = ci.output_width, sh = ci.output_height;
	double s = m / 8.0;
	unsigned c0x = (unsigned)floor(g.clip_x0 * s), c1x = (unsigned)ceil(g.clip_x1 * s);
	unsigned c0y = (unsigned)floor(g.clip_y0 * s), c1y = (unsigned)ceil(g.clip_y1 * s);
	if (c1x > sw)
		c1x = sw;
	if (c1y > sh)
		c1y = sh;
	if (c0x >= c1x)
		c0x = c1x - 1;
	if (c0y >= c1y)
		c0y = c1y - 1;
	if ((rc = prep__coeffs_make(g.box_x0 * s, g.box_x1 * s, c0x, c1x, g.vw, g.ox, g.ow, &cx)) <
		    0 ||
	    (rc = prep__coeffs_make(g.box_y0 * s, g.box_y1 * s, c0y, c1y, g.vh, g.oy, g.oh, &cy)) <
		    0)
		goto out;
	jpeg_start_decompress(&ci);
	/* One iMCU of margin on the right; on the left, jpeg_crop_scanline
	 * rounds down to an iMCU boundary, which leaves no context exactly when
	 * the first needed column is on one: start a column earlier. */
	unsigned margin = (unsigned)ci.max_h_samp_factor * (unsigned)ci.min_DCT_scaled_size;
	unsigned x0 = cx.lo > 0 ? cx.lo - 1 : 0;
	unsigned x1 = cx.hi + margin < sw ? cx.hi + margin : sw;
	JDIMENSION xoff = x0, cw = x1 - x0;
	if (cw < sw)
		jpeg_crop_scanline(&ci, &xoff, &cw);
	size_t stride = (size_t)ci.output_width * 3;
	size_t rows = cy.hi - cy.lo;
	buf = malloc(stride * rows + SLACK);
	out = malloc((size_t)g.ow * g.oh * 3);
	if (!buf || !out) {
		rc = -ENOMEM;
		goto out;
	}
	if (cy.lo > 0)
		jpeg_skip_scanlines(&ci, cy.lo);
	while (ci.output_scanline < cy.hi) {
		JSAMPROW row = buf + (size_t)(ci.output_scanline - cy.lo) * stride;
		jpeg_read_scanlines(&ci, &row, 1);
	}
	if (stop) {
		jpeg_abort_decompress(&ci);
	} else {
		if (ci.output_scanline < sh)
			jpeg_skip_scanlines(&ci, sh - ci.output_scanline);
		jpeg_finish_decompress(&ci);
	}
	rc = prep__resample(buf, stride, xoff, cy.lo, &cx, &cy, g.flip, out, (size_t)g.ow * 3);
	if (rc == 0)
		keep(c, mode, out, (size_t)g.ow * g.oh * 3);
out:
	jpeg_destroy_decompress(&ci);
	free(buf);
	free(out);
	prep__coeffs_free(&cx);
	prep__coeffs_free(&cy);
	return rc;
}

/* prep's own decoder at the power-of-two scale (proposal: pick only those). */
static int prep_pow2(struct ctx *c, const struct image *im, uint32_t version, uint8_t **ppm,
		     size_t *len)
{
	struct prep__geom g;
	struct plan_arg a = { &c->recipe, im->key, version };
	int rc = prep__plan(&c->recipe, im->w, im->h, SEED, im->key, version, &g);

	if (rc < 0)
		return rc;
	return prep__render_geom(im->data, im->len, plan_cb, &a, pow2_scale(prep__pick_scale(&g)),
				 ppm, len);
}

static unsigned log2_scale(unsigned m)
{
	return m >= 8 ? 3 : m >= 4 ? 2 : m >= 2 ? 1 : 0;
}

/* The image tier_rgb renders version from: decoded whole at the scale
 * prep_render picks, once (outside the timed loops, see hold_all). */
static const struct prep__image *held_for(struct image *im, const struct prep_recipe *r,
					  uint32_t version)
{
	unsigned m;

	if (prep__sample_scale(r, im->w, im->h, true, SEED, im->key, version, &m) < 0)
		return NULL;
	struct prep__image *h = &im->held[log2_scale(m)];
	if (!h->rgb && prep__decode_scaled(im->data, im->len, m, h) < 0)
		return NULL;
	return h;
}

static int tier_render(struct ctx *c, struct image *im, uint32_t version, uint8_t **ppm,
		       size_t *len)
{
	const struct prep__image *h = held_for(im, &c->recipe, version);

	if (!h)
		return -EIO;
	return prep__render_from_pixels(&c->recipe, h, im->w, im->h, SEED, im->key, version, ppm,
					len);
}

static int run_one(struct ctx *c, enum mode mode, struct image *im, uint32_t version)
{
	unsigned sw, sh;
	uint8_t *ppm = NULL;
	size_t len = 0;
	int rc;

	switch (mode) {
	case M_ENTROPY:
		return entropy_only(c, im);
	case M_LIBJPEG:
		return libjpeg_full(c, im);
	case M_TJ_FULL:
		if ((rc = tj_decode(c, im, 8, &sw, &sh)) == 0)
			keep(c, mode, c->full, (size_t)sw * sh * 3);
		return rc;
	case M_TJ_FULL_RS:
		return tj_resampled(c, im, version, 8, mode);
	case M_TJ_DCT_RS:
		return tj_resampled(c, im, version, 0, mode);
	case M_PREP_ROI: {
		struct plan_arg a = { &c->recipe, im->key, version };
		rc = prep__render_geom(im->data, im->len, plan_cb, &a, 8, &ppm, &len);
		break;
	}
	case M_PREP:
		rc = prep_render(&c->recipe, im->data, im->len, SEED, im->key, version, &ppm, &len);
		break;
	case M_PREP_POW2:
		rc = prep_pow2(c, im, version, &ppm, &len);
		break;
	case M_PROTO:
	case M_PROTO_STOP:
		return proto_render(c, im, version, mode == M_PROTO_STOP, mode);
	case M_REF_POW2:
		return tj_resampled(c, im, version, 100, mode);
	case M_TIER:
		rc = tier_render(c, im, version, &ppm, &len);
		break;
	default:
		return -EINVAL;
	}
	if (rc == 0)
		keep_ppm(c, mode, im, ppm, len, version);
	free(ppm);
	return rc;
}

/* Mean DCT scale and mean fraction of the full-resolution pixels decoded. */
static void geometry_stats(struct ctx *c, const struct image *ims, size_t n, uint32_t version)
{
	for (size_t i = 0; i < n; i++) {
		struct prep__geom g;

		if (prep__plan(&c->recipe, ims[i].w, ims[i].h, SEED, ims[i].key, version, &g) < 0)
			continue;
		unsigned m = prep__pick_scale(&g);
		double area = (double)(g.clip_x1 - g.clip_x0) * (g.clip_y1 - g.clip_y0);
		c->sum_m += m;
		c->sum_frac += area * (m / 8.0) * (m / 8.0) / ((double)ims[i].w * ims[i].h);
		c->ngeom++;
	}
}

/*
 * Resampling alone, per kernel level: each file is decoded whole (untimed)
 * at the DCT scale prep picks for the version, then its crop is resampled
 * by every level the CPU has in turn (levels interleaved per file), CPU
 * time of this thread. Fills us[level] with mean microseconds per sample
 * (0 for a level the CPU lacks); the levels' bytes must be identical.
 */
static int resample_levels(struct ctx *c, const struct image *ims, size_t n, unsigned rounds,
			   double us[3])
{
	double sum[3] = {0, 0, 0};
	unsigned long count = 0;
	int best = prep__simd_set(-1);

	for (unsigned r = 1; r <= rounds; r++) {
		for (size_t k = 0; k < n; k++) {
			const struct image *im = &ims[k];
			struct prep__geom g;
			struct prep__coeffs cx, cy;
			unsigned sw, sh, m;
			uint8_t *out[3] = {NULL, NULL, NULL};
			int rc;

			if ((rc = prep__plan(&c->recipe, im->w, im->h, SEED, im->key, r, &g)) < 0)
				return rc;
			m = prep__pick_scale(&g);
			if ((rc = tj_decode(c, im, m, &sw, &sh)) < 0)
				return rc;
			double s = m / 8.0;
			unsigned c0x = (unsigned)(g.clip_x0 * s), c1x = (unsigned)ceil(g.clip_x1 * s);
			unsigned c0y = (unsigned)(g.clip_y0 * s), c1y = (unsigned)ceil(g.clip_y1 * s);
			c1x = c1x > sw ? sw : c1x;
			c1y = c1y > sh ? sh : c1y;
			c0x = c0x >= c1x ? c1x - 1 : c0x;
			c0y = c0y >= c1y ? c1y - 1 : c0y;
			if ((rc = prep__coeffs_make(g.box_x0 * s, g.box_x1 * s, c0x, c1x, g.vw, g.ox,
						    g.ow, &cx)) < 0)
				return rc;
			if ((rc = prep__coeffs_make(g.box_y0 * s, g.box_y1 * s, c0y, c1y, g.vh, g.oy,
						    g.oh, &cy)) < 0) {
				prep__coeffs_free(&cx);
				return rc;
			}
			size_t bytes = (size_t)g.ow * g.oh * 3;
			for (int l = 0; l <= best && rc == 0; l++)
				if (!(out[l] = malloc(bytes)))
					rc = -ENOMEM;
				else
					memset(out[l], 0, bytes); /* page faults outside the timing */
			for (int l = 0; l <= best && rc == 0; l++) {
				prep__simd_set(l);
				double c0 = cpu_s();
				if (rc == 0)
					rc = prep__resample(c->full, (size_t)sw * 3, 0, 0, &cx, &cy,
							    g.flip, out[l], (size_t)g.ow * 3);
				sum[l] += cpu_s() - c0;
				if (rc == 0 && l > 0 && memcmp(out[0], out[l], bytes))
					rc = -EPROTO;
			}
			for (int l = 0; l < 3; l++)
				free(out[l]);
			prep__coeffs_free(&cx);
			prep__coeffs_free(&cy);
			if (rc < 0)
				return rc;
			count++;
		}
	}
	prep__simd_set(-1);
	for (int l = 0; l < 3; l++)
		us[l] = l <= best && count ? sum[l] / count * 1e6 : 0;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void usage(void)
{
	fprintf(stderr, "usage: decode_speed [--recipe NAME] [--rounds N] [--min-time S] [--only MODE] [--no-check] [--resample] FILE...\n");
}

int main(int argc, char **argv)
{
	const char *recipe_name = "rrc224";
	const char *only = NULL;
	bool check = true, resample_only = false;
	unsigned rounds = 5;
	double min_time = 0.0;
	int i = 1;

	for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strcmp(argv[i], "--recipe") && i + 1 < argc)
			recipe_name = argv[++i];
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--no-check"))
			check = false;
		else if (!strcmp(argv[i], "--resample"))
			resample_only = true;
		else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
			min_time = strtod(argv[++i], NULL);
		else {
			usage();
			return 2;
		}
	}
	size_t n = (size_t)(argc - i);
	if (n == 0 || n > MAX_FILES || rounds == 0 || rounds > 1000) {
		usage();
		return 2;
	}
	struct ctx c;
	memset(&c, 0, sizeof(c));
	if (prep_recipe_parse(recipe_name, &c.recipe) < 0) {
		fprintf(stderr, "decode_speed: bad recipe %s\n", recipe_name);
		return 2;
	}
	c.tj = tjInitDecompress();
	struct image *ims = calloc(n, sizeof(*ims));
	if (!c.tj || !ims) {
		fprintf(stderr, "decode_speed: out of memory\n");
		return 1;
	}
	uint64_t bytes = 0, pixels = 0;
	for (size_t k = 0; k < n; k++) {
		struct image *im = &ims[k];
		im->path = argv[i + k];
		if (file_read_all(im->path, MAX_FILE_BYTES, &im->data, &im->len) < 0 ||
		    prep_probe(im->data, im->len, &im->w, &im->h) < 0 ||
		    prep__sniff(im->data, im->len) != PREP__JPEG) {
			fprintf(stderr, "decode_speed: %s: not a readable JPEG\n", im->path);
			return 1;
		}
		im->key = hash_bytes(im->path, strlen(im->path), 0);
		bytes += im->len;
		pixels += (uint64_t)im->w * im->h;
	}

	if (resample_only) {
		double us[3];
		/* as the daemon does (fs/): the resampler's row buffer stays on the heap */
		mallopt(M_MMAP_THRESHOLD, 256 << 10);
		mallopt(M_TRIM_THRESHOLD, 64 << 20); /* time the kernels, not brk and page faults */
		int rc = resample_levels(&c, ims, n, rounds, us);
		if (rc < 0) {
			fprintf(stderr, "decode_speed: resampling failed: %s\n",
				rc == -EPROTO ? "kernel levels differ" : strerror(-rc));
			return rc == -EPROTO ? 3 : 1;
		}
		printf("{\"files\": %zu, \"recipe\": \"%s\", \"rounds\": %u, \"resample_us\": "
		       "{\"scalar\": %.1f, \"sse41\": %.1f, \"avx2\": %.1f}}\n",
		       n, recipe_name, rounds, us[0], us[1], us[2]);
		free(c.full);
		tjDestroy(c.tj);
		return 0;
	}
	/* Verification (untimed): ROI decoding must not change a pixel, so each
	 * prep mode equals the whole-frame decode at the same DCT scale. */
	struct cmp {
		enum mode a, b;
		const char *name;
		unsigned long images_differ, max_diff;
	} cmps[] = {
		{ M_LIBJPEG, M_TJ_FULL, "libjpeg_full=tj_full", 0, 0 },
		{ M_TJ_FULL_RS, M_PREP_ROI, "tj_full+rs=prep_roi", 0, 0 },
		{ M_TJ_DCT_RS, M_PREP, "tj_dct+rs=prep_render", 0, 0 },
		{ M_REF_POW2, M_PREP_POW2, "tj_pow2+rs=prep_pow2", 0, 0 },
		{ M_REF_POW2, M_PROTO, "tj_pow2+rs=proto_roi_pow2", 0, 0 },
		{ M_REF_POW2, M_PROTO_STOP, "tj_pow2+rs=proto_roi_pow2_stop", 0, 0 },
		{ M_PREP, M_TIER, "prep_render=tier_rgb", 0, 0 },
	};
	const size_t ncmp = sizeof(cmps) / sizeof(cmps[0]);
	c.keep = true;
	for (size_t k = 0; check && k < n; k++) {
		for (int m = 0; m < NMODES; m++) {
			c.res_len[m] = 0;
			if (run_one(&c, (enum mode)m, &ims[k], 0) < 0) {
				fprintf(stderr, "decode_speed: %s: %s failed\n", ims[k].path,
					mode_name[m]);
				return 1;
			}
		}
		for (size_t j = 0; j < ncmp; j++) {
			struct cmp *q = &cmps[j];
			unsigned long worst = 0;
			if (c.res_len[q->a] != c.res_len[q->b] || !c.res_len[q->a]) {
				worst = 256;
			} else {
				for (size_t b = 0; b < c.res_len[q->a]; b++) {
					int d = (int)c.res[q->a][b] - (int)c.res[q->b][b];
					unsigned long ad = (unsigned long)(d < 0 ? -d : d);
					if (ad > worst)
						worst = ad;
				}
			}
			q->images_differ += worst > 0;
			if (worst > q->max_diff)
				q->max_diff = worst;
		}
	}
	c.keep = false;
	/* tier_rgb's images, decoded before the timed rounds (as the daemon's
	 * tier holds them after the first epoch); their bytes per image */
	uint64_t held_bytes = 0, held_n = 0;
	for (size_t k = 0; k < n; k++) {
		for (unsigned r = 1; r <= rounds; r++)
			if (!held_for(&ims[k], &c.recipe, r)) {
				fprintf(stderr, "decode_speed: %s: whole decode failed\n", ims[k].path);
				return 1;
			}
		for (int s = 0; s < 4; s++)
			if (ims[k].held[s].rgb) {
				held_bytes += prep__scaled_bytes(ims[k].w, ims[k].h, 1u << s);
				held_n++;
			}
	}

	/* Rounds interleave the modes so that noise from other processes on the
	 * machine spreads over all of them; each round uses a new version.
	 * Rates are images per CPU-second of this thread (per-core speed) and
	 * images per wall-clock second. */
	size_t cap = rounds;
	double *rate = calloc(cap * NMODES, sizeof(double));
	double *wrate = calloc(cap * NMODES, sizeof(double));
	if (!rate || !wrate)
		return 1;
	double t_start = now_s();
	unsigned done = 0;
	for (unsigned r = 0; r < 1000 && (r < rounds || now_s() - t_start < min_time); r++) {
		if (r >= cap) {
			cap *= 2;
			double *p = realloc(rate, cap * NMODES * sizeof(double));
			double *q = p ? realloc(wrate, cap * NMODES * sizeof(double)) : NULL;
			if (p)
				rate = p;
			if (!q)
				break;
			wrate = q;
		}
		geometry_stats(&c, ims, n, r + 1);
		for (int m = 0; m < NTIMED; m++) {
			if (only && strcmp(only, mode_name[m]))
				continue;
			double t0 = now_s(), c0 = cpu_s();
			for (size_t k = 0; k < n; k++) {
				int rc = run_one(&c, (enum mode)m, &ims[k], r + 1);
				if (rc < 0) {
					fprintf(stderr, "decode_speed: %s: %s failed: %s\n",
						ims[k].path, mode_name[m], strerror(-rc));
					return 1;
				}
			}
			rate[(size_t)r * NMODES + m] = n / (cpu_s() - c0);
			wrate[(size_t)r * NMODES + m] = n / (now_s() - t0);
		}
		done = r + 1;
	}

	bool ok = true;
	printf("{\"files\": %zu, \"bytes\": %llu, \"mean_pixels\": %.0f, \"recipe\": \"%s\", "
	       "\"rounds\": %u, \"mean_dct_scale_8ths\": %.3f, \"mean_decoded_fraction\": %.4f, "
	       "\"checks\": %s",
	       n, (unsigned long long)bytes, (double)pixels / n, recipe_name, done,
	       c.sum_m / c.ngeom, c.sum_frac / c.ngeom, check ? "{" : "null");
	for (size_t j = 0; check && j < ncmp; j++) {
		printf("%s\"%s\": {\"images_differ\": %lu, \"max_abs_diff\": %lu}", j ? ", " : "",
		       cmps[j].name, cmps[j].images_differ, cmps[j].max_diff);
		if ((cmps[j].a == M_REF_POW2 && cmps[j].b != M_PREP_POW2 && cmps[j].images_differ) ||
		    (cmps[j].b == M_TIER && cmps[j].images_differ))
			ok = false; /* the prototypes and the tier must be exact */
	}
	printf("%s, \"tier_bytes_per_image\": %.0f, \"tier_images\": %llu, \"modes\": {",
	       check ? "}" : "", held_n ? (double)held_bytes / held_n : 0.0,
	       (unsigned long long)held_n);
	double *col = malloc(done * sizeof(double));
	if (!col)
		return 1;
	for (int m = 0; m < NTIMED; m++) {
		printf("%s\"%s\": {", m ? ", " : "", mode_name[m]);
		for (int w = 0; w < 2; w++) {
			const double *src = w ? wrate : rate;
			for (unsigned r = 0; r < done; r++)
				col[r] = src[(size_t)r * NMODES + m];
			qsort(col, done, sizeof(double), cmp_double);
			double median = done % 2 ? col[done / 2]
						 : (col[done / 2 - 1] + col[done / 2]) / 2;
			printf("%s\"%s\": {\"best\": %.1f, \"median\": %.1f, \"rounds\": [",
			       w ? ", " : "", w ? "wall" : "cpu", col[done - 1], median);
			for (unsigned r = 0; r < done; r++)
				printf("%s%.1f", r ? ", " : "", src[(size_t)r * NMODES + m]);
			printf("]}");
		}
		printf("}");
	}
	printf("}}\n");
	free(col);
	free(rate);
	free(wrate);
	for (int m = 0; m < NMODES; m++)
		free(c.res[m]);
	for (size_t k = 0; k < n; k++) {
		free(ims[k].data);
		for (int s = 0; s < 4; s++)
			free(ims[k].held[s].rgb);
	}
	free(ims);
	free(c.full);
	tjDestroy(c.tj);
	return ok ? 0 : 3;
}
