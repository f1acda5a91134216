/* SPDX-License-Identifier: MIT */
/*
 * prep/recipe.c and prep/render.c: recipes and output sizes, ROI + DCT-scaled
 * decoding against full decoding, the RandomResizedCrop parameters,
 * determinism.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "prep/prep_int.h"
#include "tests/unit/test_prep_images.h"

/* ---- recipes ---- */

START_TEST(recipe_parsing)
{
	static const char *bad[] = {"",	       "rrc",	  "rrc15",	 "rrc1025",
				    "rrc0224", "rrc224x", "RRC224",	 "crop224",
				    "rrc-1",   "rrc+224", "center99999", "resize 256",
				    "center",  "rrc2240", "resize",	 "rrc224/"};
	struct prep_recipe r = {PREP_RESIZE, 77, false};
	char name[32];

	ck_assert_int_eq(prep_recipe_parse("rrc224", &r), 0);
	ck_assert_int_eq(r.kind, PREP_RRC);
	ck_assert_uint_eq(r.size, 224);
	ck_assert(prep_recipe_is_random(&r));
	ck_assert_int_eq(prep_recipe_parse("center16", &r), 0);
	ck_assert_int_eq(r.kind, PREP_CENTER);
	ck_assert_uint_eq(r.size, 16);
	ck_assert(!prep_recipe_is_random(&r));
	ck_assert_int_eq(prep_recipe_parse("resize1024", &r), 0);
	ck_assert_int_eq(r.kind, PREP_RESIZE);
	ck_assert_uint_eq(r.size, 1024);
	ck_assert_int_eq(prep_recipe_name(&r, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "resize1024");
	ck_assert_int_eq(prep_recipe_name(&r, name, 5), -ENAMETOOLONG);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct prep_recipe keep = {PREP_RRC, 99, false};
		int rc = prep_recipe_parse(bad[i], &keep);
		ck_assert_msg(rc == -EINVAL, "prep_recipe_parse(\"%s\") = %d, want -EINVAL", bad[i],
			      rc);
		ck_assert_uint_eq(keep.size, 99);
	}
	ck_assert_int_eq(prep_recipe_parse(NULL, &r), -EINVAL);

	/* the names ImageFolder lists */
	ck_assert(prep_is_image_name("n01440764_10026.JPEG"));
	ck_assert(prep_is_image_name("a.png"));
	ck_assert(prep_is_image_name("dir.x/b.webp"));
	ck_assert(prep_is_image_name(".jpg")); /* torchvision: name.lower().endswith() */
	ck_assert(!prep_is_image_name("notes.txt"));
	ck_assert(!prep_is_image_name("jpg"));
	ck_assert(!prep_is_image_name(NULL));
}
END_TEST

START_TEST(output_sizes)
{
	struct prep_recipe r;
	unsigned w, h;
	uint64_t bytes;

	prep_recipe_parse("resize256", &r);
	ck_assert_int_eq(prep_output_dims(&r, 500, 375, &w, &h), 0);
	ck_assert_uint_eq(w, 341); /* int(256 * 500 / 375) */
	ck_assert_uint_eq(h, 256);
	ck_assert_int_eq(prep_output_dims(&r, 375, 500, &w, &h), 0);
	ck_assert_uint_eq(w, 256);
	ck_assert_uint_eq(h, 341);
	ck_assert_int_eq(prep_output_size(&r, 375, 500, &bytes), 0);
	ck_assert_uint_eq(bytes, strlen("P6\n256 341\n255\n") + 256 * 341 * 3);
	prep_recipe_parse("rrc224", &r);
	ck_assert_int_eq(prep_output_size(&r, 10, 7000, &bytes), 0);
	ck_assert_uint_eq(bytes, 15 + 224 * 224 * 3);
	prep_recipe_parse("resize1024", &r);
	ck_assert_int_eq(prep_output_dims(&r, 32768, 2, &w, &h), -EFBIG);
	ck_assert_int_eq(prep_output_dims(&r, 0, 2, &w, &h), -EINVAL);
	ck_assert_int_eq(prep_output_dims(&r, 40000, 2, &w, &h), -EFBIG);
	/* sources up to Pillow's DecompressionBombError, not past it */
	prep_recipe_parse("center224", &r);
	ck_assert_int_eq(prep_output_dims(&r, 12000, 9000, &w, &h), 0); /* a 108-Mpx phone */
	ck_assert_int_eq(prep_output_dims(&r, 13377, 13377, &w, &h), 0);	  /* 178,944,129 */
	ck_assert_int_eq(prep_output_dims(&r, 13377, 13378, &w, &h), -EFBIG); /* 178,957,506 */
	ck_assert_int_eq(prep_output_dims(&r, 16320, 12240, &w, &h), -EFBIG); /* 200 Mpx */

	/* center geometry: torchvision Resize(256) + CenterCrop(224) */
	struct prep__geom g;
	prep_recipe_parse("center224", &r);
	ck_assert_int_eq(prep__plan(&r, 500, 375, 0, 0, 0, &g), 0);
	ck_assert_uint_eq(g.vw, 341);
	ck_assert_uint_eq(g.vh, 256);
	ck_assert_uint_eq(g.ox, 58); /* int(round(117 / 2.0)) = 58 (half to even) */
	ck_assert_uint_eq(g.oy, 16);
	ck_assert_uint_eq(g.ow, 224);
	ck_assert_uint_eq(g.oh, 224);
}
END_TEST


/* ---- ROI + DCT scaling against full decoding ---- */

struct fixed_geom {
	struct prep__geom g;
};

static int plan_fixed(void *arg, unsigned W, unsigned H, struct prep__geom *g)
{
	*g = ((struct fixed_geom *)arg)->g;
	return 0;
}

/* Reference: full decode, then the resampler over the whole image. */
static uint8_t *reference_render(const struct prep__image *img, const struct prep__geom *g)
{
	struct prep__coeffs cx, cy;
	uint8_t *out = malloc((size_t)g->ow * g->oh * 3);

	ck_assert_int_eq(prep__coeffs_make(g->box_x0, g->box_x1, g->clip_x0, g->clip_x1, g->vw,
					   g->ox, g->ow, &cx),
			 0);
	ck_assert_int_eq(prep__coeffs_make(g->box_y0, g->box_y1, g->clip_y0, g->clip_y1, g->vh,
					   g->oy, g->oh, &cy),
			 0);
	ck_assert_int_eq(prep__resample(img->rgb, (size_t)img->w * 3, 0, 0, &cx, &cy, g->flip, out,
					(size_t)g->ow * 3),
			 0);
	prep__coeffs_free(&cx);
	prep__coeffs_free(&cy);
	return out;
}

static void roi_case(const uint8_t *jpg, size_t len, const struct prep__image *full,
		     const struct prep__geom *g, const char *what)
{
	struct fixed_geom fg = {*g};
	uint8_t *ref = reference_render(full, g), *ppm;
	size_t plen;
	unsigned w, h;
	const uint8_t *px;

	/* full resolution, region only: the same pixels as the full decode */
	ck_assert_int_eq(prep__render_geom(jpg, len, plan_fixed, &fg, 8, &ppm, &plen), 0);
	parse_ppm(ppm, plen, &w, &h, &px);
	ck_assert_uint_eq(w, g->ow);
	ck_assert_uint_eq(h, g->oh);
	double p8 = psnr(px, ref, (size_t)w * h * 3);
	ck_assert_msg(isinf(p8), "%s: ROI decode at 8/8 vs full decode not identical: PSNR %.1f",
		      what, p8);
	free(ppm);
	/* automatic DCT scale */
	ck_assert_int_eq(prep__render_geom(jpg, len, plan_fixed, &fg, 0, &ppm, &plen), 0);
	parse_ppm(ppm, plen, &w, &h, &px);
	double pa = psnr(px, ref, (size_t)w * h * 3);
	ck_assert_msg(pa >= 32.0, "%s: scaled ROI decode (M=%u) vs full decode: PSNR %.1f", what,
		      prep__pick_scale(g), pa);
	free(ppm);
	free(ref);
}


START_TEST(roi_and_scale_match_full_decode)
{
	const struct jopts *opts = jpeg_kinds;
	/* half the size under valgrind (its time here is per pixel, and this
	 * was its slowest test), the small crop halved with it */
	const unsigned s = RUNNING_ON_VALGRIND ? 2u : 1u, W = 613 / s, H = 427 / s;

	for (size_t i = 0; i < NKINDS; i++) {
		size_t len;
		uint8_t *jpg = make_jpeg(W, H, photo_pixel, &opts[i], &len);
		struct prep__image full;
		struct prep_recipe r;
		struct prep__geom g;
		char what[64];

		ck_assert_int_eq(prep__decode_full(jpg, len, &full), 0);
		for (uint32_t v = 0; v < 6; v++) {
			prep_recipe_parse(v < 3 ? "rrc224" : "rrc64", &r);
			ck_assert_int_eq(prep__plan(&r, W, H, 99, 1234, v, &g), 0);
			snprintf(what, sizeof(what), "jpeg %zu rrc v%u", i, v);
			roi_case(jpg, len, &full, &g, what);
		}
		prep_recipe_parse("center224", &r);
		ck_assert_int_eq(prep__plan(&r, W, H, 0, 0, 0, &g), 0);
		roi_case(jpg, len, &full, &g, "center224");
		prep_recipe_parse("resize100", &r);
		ck_assert_int_eq(prep__plan(&r, W, H, 0, 0, 0, &g), 0);
		roi_case(jpg, len, &full, &g, "resize100");
		/* a small crop far from the origin: exercises crop_scanline + skip */
		g = (struct prep__geom){.box_x0 = 301 / s,
					.box_y0 = 203 / s,
					.box_x1 = 389 / s,
					.box_y1 = 260 / s,
					.clip_x0 = 301 / s,
					.clip_y0 = 203 / s,
					.clip_x1 = 389 / s,
					.clip_y1 = 260 / s,
					.vw = 30,
					.vh = 20,
					.ow = 30,
					.oh = 20,
					.flip = true};
		roi_case(jpg, len, &full, &g, "small crop");
		free(full.rgb);
		free(jpg);
	}
}
END_TEST

/* The resampler against values computed by hand for a 2x downscale. */

/* ---- RandomResizedCrop parameters ---- */

START_TEST(rrc_params_distribution)
{
	const unsigned W = 500, H = 375, N = 20000;
	double sum_scale = 0, sum_logr = 0, min_scale = 2, max_scale = 0;
	double min_r = 10, max_r = 0;
	unsigned flips = 0;

	for (unsigned i = 0; i < N; i++) {
		struct prep__rng g;
		struct prep__rrc c;

		prep__rng_init(&g, 7, i, 3);
		prep__rrc_params(&g, W, H, &c);
		ck_assert(c.w > 0 && c.h > 0 && c.left + c.w <= W && c.top + c.h <= H);
		double scale = (double)c.w * c.h / (W * H), ratio = (double)c.w / c.h;
		sum_scale += scale;
		sum_logr += log(ratio);
		min_scale = fmin(min_scale, scale);
		max_scale = fmax(max_scale, scale);
		min_r = fmin(min_r, ratio);
		max_r = fmax(max_r, ratio);
		flips += prep__rng_uniform(&g, 0, 1) < 0.5;
	}
	/* rounding w and h to integers widens the ranges slightly */
	ck_assert_msg(min_scale >= 0.075 && max_scale <= 1.0, "scale range %f..%f", min_scale,
		      max_scale);
	ck_assert_msg(min_r >= 0.74 && max_r <= 1.35, "ratio range %f..%f", min_r, max_r);
	/* Mean scale: uniform(0.08,1) conditioned on fitting (some large crops
	 * are rejected for a 4:3 image); torchvision gives 0.435 for 500x375. */
	ck_assert_msg(fabs(sum_scale / N - 0.435) < 0.015, "mean scale %f", sum_scale / N);
	ck_assert_msg(fabs(sum_logr / N - 0.031) < 0.015, "mean log ratio %f", sum_logr / N);
	ck_assert_msg(flips > N * 0.47 && flips < N * 0.53, "flips %u of %u", flips, N);
}
END_TEST

START_TEST(rrc_fallback)
{
	struct prep__rng g;
	struct prep__rrc c;

	/* 1000x10: no crop of >= 8% area has an aspect ratio <= 4/3 */
	prep__rng_init(&g, 1, 2, 3);
	prep__rrc_params(&g, 1000, 10, &c);
	ck_assert(c.fallback);
	ck_assert_uint_eq(c.h, 10);
	ck_assert_uint_eq(c.w, 13); /* round(10 * 4/3) */
	ck_assert_uint_eq(c.top, 0);
	ck_assert_uint_eq(c.left, (1000 - 13) / 2);
	prep__rrc_params(&g, 10, 1000, &c);
	ck_assert(c.fallback);
	ck_assert_uint_eq(c.w, 10);
	ck_assert_uint_eq(c.h, 13); /* round(10 / (3/4)) */
	prep__rrc_params(&g, 1, 1, &c);
	ck_assert_uint_eq(c.w, 1);
	ck_assert_uint_eq(c.h, 1);
}
END_TEST

/* ---- determinism ---- */

START_TEST(render_is_deterministic)
{
	struct jopts o = {.kind = J_RGB, .hsamp = 2, .quality = 90};
	size_t len, l1, l2, l3, l4;
	uint8_t *jpg = make_jpeg(320, 240, photo_pixel, &o, &len), *a, *b, *c, *d;
	struct prep_recipe r;
	uint64_t want;

	prep_recipe_parse("rrc112", &r);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 2, &a, &l1), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 2, &b, &l2), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 3, &c, &l3), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 6, 77, 2, &d, &l4), 0);
	ck_assert_int_eq(prep_output_size(&r, 320, 240, &want), 0);
	ck_assert_uint_eq(l1, want);
	ck_assert(l1 == l2 && memcmp(a, b, l1) == 0);
	ck_assert(l1 == l3 && memcmp(a, c, l1) != 0);
	ck_assert(l1 == l4 && memcmp(a, d, l1) != 0);
	free(a);
	free(b);
	free(c);
	free(d);
	/* deterministic recipes ignore the version */
	prep_recipe_parse("resize200", &r);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 0, &a, &l1), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 9, 78, 9, &b, &l2), 0);
	ck_assert_int_eq(prep_output_size(&r, 320, 240, &want), 0);
	ck_assert_uint_eq(l1, want);
	ck_assert(l1 == l2 && memcmp(a, b, l1) == 0);
	free(a);
	free(b);
	free(jpg);
}
END_TEST

/* The rows below the crop are skipped only when the data ends in EOI: a
 * file whose EOI is replaced (same length) fails for every crop, trailing
 * bytes after EOI change nothing, whether the EOI is in the last 64 bytes
 * (rows below the crop skipped) or not (decoded to the end). */

void prep_render_tests(TCase *tc)
{
	tcase_add_test(tc, recipe_parsing);
	tcase_add_test(tc, output_sizes);
	tcase_add_test(tc, roi_and_scale_match_full_decode);
	tcase_add_test(tc, rrc_params_distribution);
	tcase_add_test(tc, rrc_fallback);
	tcase_add_test(tc, render_is_deterministic);
}
