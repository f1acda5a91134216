/* SPDX-License-Identifier: MIT */
/*
 * prep/resample.c: antialiasing, the SIMD kernels against the scalar one,
 * the scratch buffers.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "prep/prep_int.h"
#include "tests/unit/test_prep_images.h"

START_TEST(resampler_is_antialiased)
{
	/* 1-row image 0,0,0,0,255,255,255,255 downscaled 8 -> 2: triangle
	 * support 2, so output 0 sees 0,0,0,0 (and weights on 255 near edge) */
	uint8_t src[8 * 3 + PREP__PAD], dst[4 * 3];
	struct prep__coeffs cx, cy;

	for (int x = 0; x < 8; x++)
		src[3 * x] = src[3 * x + 1] = src[3 * x + 2] = x < 4 ? 0 : 255;
	ck_assert_int_eq(prep__coeffs_make(0, 8, 0, 8, 4, 0, 4, &cx), 0);
	ck_assert_int_eq(prep__coeffs_make(0, 1, 0, 1, 1, 0, 1, &cy), 0);
	ck_assert_uint_eq(cx.ksize, 5);
	ck_assert_int_eq(prep__resample(src, 8 * 3, 0, 0, &cx, &cy, false, dst, sizeof(dst)), 0);
	/* PIL: Image.new('L',(8,1)) [0,0,0,0,255,255,255,255].resize((4,1), BILINEAR)
	 * = [0, 32, 223, 255]: a 2x2 box/bilinear would give [0, 0, 255, 255]. */
	ck_assert_uint_eq(dst[0], 0);
	ck_assert_uint_eq(dst[3], 32);
	ck_assert_uint_eq(dst[6], 223);
	ck_assert_uint_eq(dst[9], 255);
	prep__coeffs_free(&cx);
	prep__coeffs_free(&cy);
}
END_TEST

/* The SIMD kernels give the same bytes as the scalar code. */
START_TEST(resampler_simd_matches_scalar)
{
	static const struct {
		double b0, b1;
		unsigned c0, c1, v, o0, n;
	} axes[] = {
	    {0, 97, 0, 97, 31, 0, 31},	      /* downscale ~3.1 */
	    {10.5, 80.25, 10, 81, 50, 0, 50}, /* fractional box */
	    {0, 97, 0, 97, 150, 20, 100},     /* upscale, window */
	    {3, 40, 3, 40, 37, 0, 37},	      /* identity */
	    {0, 97, 0, 97, 1, 0, 1},	      /* to one pixel */
	};
	const unsigned W = 97, H = 61;
	uint8_t *src = malloc((size_t)W * H * 3 + PREP__PAD);

	for (size_t i = 0; i < (size_t)W * H * 3 + PREP__PAD; i++)
		src[i] = (uint8_t)hash_mix64(i);
	for (size_t a = 0; a < sizeof(axes) / sizeof(axes[0]); a++) {
		for (size_t b = 0; b < sizeof(axes) / sizeof(axes[0]); b++) {
			struct prep__coeffs cx, cy;
			double sy = (double)H / W;
			ck_assert_int_eq(prep__coeffs_make(axes[a].b0, axes[a].b1, axes[a].c0,
							   axes[a].c1, axes[a].v, axes[a].o0,
							   axes[a].n, &cx),
					 0);
			ck_assert_int_eq(prep__coeffs_make(axes[b].b0 * sy, axes[b].b1 * sy,
							   (unsigned)(axes[b].c0 * sy),
							   (unsigned)ceil(axes[b].c1 * sy),
							   axes[b].v, axes[b].o0, axes[b].n, &cy),
					 0);
			for (int flip = 0; flip < 2; flip++) {
				size_t n = (size_t)cx.n * cy.n * 3;
				uint8_t *d1 = malloc(n), *d2 = malloc(n);
				ck_assert_int_eq(prep__resample_with(src, W * 3, 0, 0, &cx, &cy,
								     flip, d1, cx.n * 3, false),
						 0);
				ck_assert_int_eq(prep__resample_with(src, W * 3, 0, 0, &cx, &cy,
								     flip, d2, cx.n * 3, true),
						 0);
				ck_assert_msg(memcmp(d1, d2, n) == 0, "axes %zu/%zu flip %d differ",
					      a, b, flip);
				free(d1);
				free(d2);
			}
			prep__coeffs_free(&cx);
			prep__coeffs_free(&cy);
		}
	}
	free(src);
}
END_TEST

/* Decode buffers are reused, kept within 16 x 1 MiB, and dropped on demand. */
START_TEST(scratch_reused_and_bounded)
{
	size_t cap, cap2;
	void *bufs[20];

	prep__scratch_drop();
	ck_assert_uint_eq(prep__scratch_kept(), 0);
	uint8_t *a = prep__scratch_get(1000, &cap);
	ck_assert_ptr_nonnull(a);
	ck_assert_uint_ge(cap, 1000);
	memset(a, 1, cap);
	prep__scratch_put(a, cap);
	ck_assert_uint_eq(prep__scratch_kept(), cap);
	uint8_t *b = prep__scratch_get(500, &cap2);
	ck_assert_ptr_eq(a, b);
	ck_assert_uint_eq(cap2, cap);
	ck_assert_uint_eq(prep__scratch_kept(), 0);
	prep__scratch_put(b, cap2);
	/* a larger request replaces the kept buffer instead of adding one */
	b = prep__scratch_get(cap + 1, &cap2);
	ck_assert_uint_ge(cap2, cap + 1);
	ck_assert_uint_eq(prep__scratch_kept(), 0);
	prep__scratch_put(b, cap2);
	/* more than 1 MiB is never kept */
	b = prep__scratch_get((2u << 20) + 1, &cap);
	ck_assert_ptr_nonnull(b);
	prep__scratch_put(b, cap);
	ck_assert_uint_eq(prep__scratch_kept(), cap2);
	/* at most 16 kept */
	for (int i = 0; i < 20; i++)
		ck_assert_ptr_nonnull(bufs[i] = prep__scratch_get(1u << 20, &cap));
	for (int i = 0; i < 20; i++)
		prep__scratch_put(bufs[i], 1u << 20);
	ck_assert_uint_le(prep__scratch_kept(), 16u << 20);
	ck_assert_uint_ge(prep__scratch_kept(), 15u << 20);
	prep__scratch_drop();
	ck_assert_uint_eq(prep__scratch_kept(), 0);
}
END_TEST

/*
 * Every kernel level the CPU has (scalar, SSE4.1, AVX2), forced in turn,
 * gives the scalar bytes on random sizes, boxes, clips, windows, strides
 * and origins, and mirrored x coefficients give the flipped rows; source buffers end PREP__PAD bytes after the last pixel, so
 * an over-read shows under ASan and valgrind.
 */
START_TEST(resampler_levels_identical)
{
	uint64_t rng = 0x5eed;
	int best = prep__simd_set(-1);
	unsigned ran[3] = {0, 0, 0}, mirrored = 0;

	ck_assert_int_ge(best, PREP__SIMD_SCALAR);
	if (__builtin_cpu_supports("avx2"))
		ck_assert_int_eq(best, PREP__SIMD_AVX2);
	for (int it = 0; it < 400; it++) {
#define RND(n) ((unsigned)((rng = hash_mix64(rng)) % (n)))
		unsigned W = 1 + RND(it % 4 ? 120 : 700), H = 1 + RND(90);
		unsigned pad = RND(2) ? 0 : RND(17);
		size_t stride = (size_t)W * 3 + pad;
		unsigned cx0 = RND(W), cx1 = cx0 + 1 + RND(W - cx0);
		unsigned cy0 = RND(H), cy1 = cy0 + 1 + RND(H - cy0);
		double bx0 = cx0 + (cx1 - cx0) * RND(1000) / 2000.0;
		double bx1 = cx1 - (cx1 - bx0) * RND(1000) / 2000.0;
		double by0 = cy0 + (cy1 - cy0) * RND(1000) / 2000.0;
		double by1 = cy1 - (cy1 - by0) * RND(1000) / 2000.0;
		unsigned vw = 1 + RND(it % 3 ? 260 : 40), vh = 1 + RND(it % 3 ? 260 : 40);
		unsigned ox = RND(vw), oy = RND(vh);
		unsigned nx = 1 + RND(vw - ox), ny = 1 + RND(vh - oy);
		struct prep__coeffs cx, cy;
		bool flip = RND(2);

		if (bx1 <= bx0 || by1 <= by0)
			continue;
		ck_assert_int_eq(prep__coeffs_make(bx0, bx1, cx0, cx1, vw, ox, nx, &cx), 0);
		ck_assert_int_eq(prep__coeffs_make(by0, by1, cy0, cy1, vh, oy, ny, &cy), 0);
		/* the source buffer starts at an absolute pixel at or before lo */
		unsigned x0 = cx.lo - RND(cx.lo + 1), y0 = cy.lo - RND(cy.lo + 1);
		size_t rows = H - y0, len = (rows - 1) * stride + (size_t)(W - x0) * 3 + PREP__PAD;
		uint8_t *src = malloc(len);
		size_t out_stride = (size_t)cx.n * 3 + RND(5), n = out_stride * cy.n;
		uint8_t *ref = malloc(n), *got = malloc(n);

		ck_assert_ptr_nonnull(src);
		for (size_t i = 0; i < len; i++)
			src[i] = it % 5 == 0 ? (uint8_t)(RND(2) * 255) : (uint8_t)hash_mix64(rng + i);
		memset(ref, 0xa5, n);
		ck_assert_int_eq(prep__simd_set(PREP__SIMD_SCALAR), PREP__SIMD_SCALAR);
		ck_assert_int_eq(
		    prep__resample(src, stride, x0, y0, &cx, &cy, flip, ref, out_stride), 0);
		for (int level = PREP__SIMD_SSE41; level <= best; level++) {
			ck_assert_int_eq(prep__simd_set(level), level);
			memset(got, 0xa5, n);
			ck_assert_int_eq(
			    prep__resample(src, stride, x0, y0, &cx, &cy, flip, got, out_stride), 0);
			ck_assert_msg(memcmp(ref, got, n) == 0,
				      "%s differs from scalar: case %d, %ux%u stride %zu, box "
				      "%g..%g x %g..%g -> %ux%u window %u+%u x %u+%u",
				      prep__simd_name(level), it, W, H, stride, bx0, bx1, by0, by1,
				      vw, vh, ox, nx, oy, ny);
			ran[level]++;
		}
		/* mirrored coefficients flip (or unflip) the rows, byte for byte */
		ck_assert_int_eq(prep__simd_set(PREP__SIMD_SCALAR), PREP__SIMD_SCALAR);
		memset(ref, 0xa5, n);
		ck_assert_int_eq(
		    prep__resample(src, stride, x0, y0, &cx, &cy, !flip, ref, out_stride), 0);
		prep__coeffs_mirror(&cx);
		for (int level = PREP__SIMD_SCALAR; level <= best; level++) {
			ck_assert_int_eq(prep__simd_set(level), level);
			memset(got, 0xa5, n);
			ck_assert_int_eq(
			    prep__resample(src, stride, x0, y0, &cx, &cy, flip, got, out_stride), 0);
			ck_assert_msg(memcmp(ref, got, n) == 0, "%s: mirrored coefficients differ "
				      "from a flip: case %d", prep__simd_name(level), it);
			mirrored++;
		}
		free(src);
		free(ref);
		free(got);
		prep__coeffs_free(&cx);
		prep__coeffs_free(&cy);
#undef RND
	}
	for (int level = PREP__SIMD_SSE41; level <= best; level++)
		ck_assert_uint_gt(ran[level], 300);
	ck_assert_uint_gt(mirrored, 300);
	/* The environment lowers the pick, never raises it. */
	setenv("COORDFS_SIMD", "scalar", 1);
	ck_assert_int_eq(prep__simd_set(-1), PREP__SIMD_SCALAR);
	ck_assert_int_eq(prep__simd(), PREP__SIMD_SCALAR);
	setenv("COORDFS_SIMD", "sse41", 1);
	ck_assert_int_eq(prep__simd_set(-1), best < PREP__SIMD_SSE41 ? best : PREP__SIMD_SSE41);
	unsetenv("COORDFS_SIMD");
	ck_assert_int_eq(prep__simd_set(-1), best);
	if (best < PREP__SIMD_AVX2)
		ck_assert_int_eq(prep__simd_set(PREP__SIMD_AVX2), -ENOTSUP);
	fprintf(stderr, "resampler_levels_identical: best level %s, compared %u sse41, %u avx2\n",
		prep__simd_name(best), ran[1], ran[2]);
}
END_TEST

/*
 * The horizontal pass alone, every level against the scalar one, on 1 to 8
 * rows (the 8-row, 4-row and single-row kernels) that each live in a buffer of their own ending PREP__PAD bytes after
 * the last pixel (ASan sees a read past it), on random widths and scales
 * from 1 tap per output (upscaling a 1-pixel clip) to dozens: the AVX2
 * pass's pair blocks, odd tap counts' last block and single taps all run,
 * and each count of taps seen is asserted.
 */
START_TEST(hpass_levels_identical)
{
	uint64_t rng = 0x4a55;
	int best = prep__simd_set(-1);
	unsigned seen[8] = {0}; /* outputs by tap count: 1, 2, ..., 7+ */
	unsigned counts[9] = {0}; /* calls by row count */

	for (int it = 0; it < 300; it++) {
#define RND(n) ((unsigned)((rng = hash_mix64(rng)) % (n)))
		unsigned W = 1 + RND(it % 3 ? 90 : 600);
		unsigned c0 = RND(W), c1 = c0 + 1 + RND(W - c0);
		unsigned vw = 1 + RND(it % 2 ? 300 : 30), ox = RND(vw), nx = 1 + RND(vw - ox);
		struct prep__coeffs cx;

		ck_assert_int_eq(prep__coeffs_make(c0, c1, c0, c1, vw, ox, nx, &cx), 0);
		unsigned x_base = cx.lo - RND(cx.lo + 1);
		size_t len = (size_t)(W - x_base) * 3;
		uint8_t *in[8], *ref[8], *got[8];
		unsigned count = 1 + RND(8);

		for (unsigned r = 0; r < 8; r++) {
			in[r] = malloc(len + PREP__PAD);
			ref[r] = malloc((size_t)cx.n * 3);
			got[r] = malloc((size_t)cx.n * 3);
			ck_assert(in[r] && ref[r] && got[r]);
			for (size_t i = 0; i < len + PREP__PAD; i++)
				in[r][i] = it % 4 == 0 ? (uint8_t)(RND(2) * 255) : (uint8_t)RND(256);
		}
		for (unsigned xx = 0; xx < cx.n; xx++) {
			int32_t n = cx.bounds[2 * xx + 1];
			seen[n < 7 ? n : 7]++;
		}
		counts[count]++;
		prep__hpass((const uint8_t *const *)in, count, x_base, &cx, ref, false);
		for (int level = PREP__SIMD_SSE41; level <= best; level++) {
			ck_assert_int_eq(prep__simd_set(level), level);
			for (unsigned r = 0; r < count; r++)
				memset(got[r], 0x5a, (size_t)cx.n * 3);
			prep__hpass((const uint8_t *const *)in, count, x_base, &cx, got, true);
			for (unsigned r = 0; r < count; r++)
				ck_assert_msg(memcmp(ref[r], got[r], (size_t)cx.n * 3) == 0,
					      "%s hpass differs: case %d row %u of %u, clip %u..%u of %u -> "
					      "%u+%u of %u",
					      prep__simd_name(level), it, r, count, c0, c1, W, ox, nx, vw);
		}
		for (unsigned r = 0; r < 8; r++) {
			free(in[r]);
			free(ref[r]);
			free(got[r]);
		}
		prep__coeffs_free(&cx);
#undef RND
	}
	for (int n = 1; n < 8; n++)
		ck_assert_msg(seen[n] > 0, "no output with %d taps", n);
	for (int n = 1; n <= 8; n++) /* 8: the 8-row pass; 4-7: the 4-row one */
		ck_assert_msg(counts[n] > 0, "no call with %d rows", n);
	prep__simd_set(-1);
}
END_TEST

void prep_resample_tests(TCase *tc)
{
	tcase_add_test(tc, resampler_is_antialiased);
	tcase_add_test(tc, resampler_simd_matches_scalar);
	tcase_add_test(tc, scratch_reused_and_bounded);
	tcase_add_test(tc, resampler_levels_identical);
	tcase_add_test(tc, hpass_levels_identical);
}
