/* SPDX-License-Identifier: MIT */
/*
 * prep/tier.c: the decoded tier against the file path, its share of the
 * budget, failed files, huge-page slots.
 */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "common/budget.h"
#include "common/hash.h"
#include "prep/prep_int.h"
#include "tests/unit/test_prep_images.h"

/* ---- the decoded tier ---- */

/* Every kind of JPEG (and PNG): the whole frame decoded at the scale a
 * sample needs, then resampled, gives the bytes prep_render gives on the
 * file, for random and deterministic recipes and several versions. */
START_TEST(tier_pixels_match_file)
{
	const struct jopts *opts = jpeg_kinds;
	static const char *recipes[] = {"rrc224", "rrc64", "center224", "center32", "resize100"};
	enum { NJ = NKINDS };
	/* 6 versions of each random recipe of a 613x427 image; under valgrind,
	 * where this test was a third of the unit suite's time, 3 versions of
	 * a 307x213 one (both still reach every scale, odd sizes both) */
	const unsigned W = RUNNING_ON_VALGRIND ? 307u : 613u, H = RUNNING_ON_VALGRIND ? 213u : 427u;
	const uint32_t nver = RUNNING_ON_VALGRIND ? 3u : 6u;
	unsigned scales_seen = 0;

	for (size_t i = 0; i < NJ + 3; i++) {
		size_t len;
		uint8_t *data = i < NJ ? make_jpeg(W, H, photo_pixel, &opts[i], &len)
				: i == NJ ? make_png(W, H, PNG_COLOR_TYPE_RGB, 8, false, false, &len)
				: i == NJ + 1 ? make_png(W, H, PNG_COLOR_TYPE_PALETTE, 8, true, true, &len)
					      : make_png(W, H, PNG_COLOR_TYPE_GRAY, 16, false, false, &len);
		for (size_t k = 0; k < sizeof(recipes) / sizeof(recipes[0]); k++) {
			struct prep_recipe r;
			ck_assert_int_eq(prep_recipe_parse(recipes[k], &r), 0);
			for (uint32_t v = 0; v < (prep_recipe_is_random(&r) ? nver : 1u); v++) {
				unsigned M;
				struct prep__image img;
				uint8_t *a, *b;
				size_t la, lb;

				ck_assert_int_eq(prep__sample_scale(&r, W, H, i < NJ, 5, 77, v, &M), 0);
				scales_seen |= 1u << M;
				ck_assert_int_eq(prep__decode_scaled(data, len, M, &img), 0);
				ck_assert_uint_eq(img.scale, i < NJ ? M : 8);
				ck_assert_uint_eq(img.w * 3 * (uint64_t)img.h + PREP__PAD,
						  prep__scaled_bytes(W, H, img.scale));
				ck_assert_int_eq(prep_render(&r, data, len, 5, 77, v, &a, &la), 0);
				ck_assert_int_eq(prep__render_from_pixels(&r, &img, W, H, 5, 77, v,
									  &b, &lb),
						 0);
				ck_assert_msg(la == lb && memcmp(a, b, la) == 0,
					      "image %zu %s v%u (scale %u/8): tier != file", i,
					      recipes[k], v, M);
				/* into a caller's buffer (the tier's slots): the same
				 * pixels (CMYK decodes wider rows, then copies), and a
				 * buffer one byte short is refused */
				size_t cap = prep__scaled_bytes(W, H, img.scale);
				uint8_t *slot = malloc(cap);
				struct prep__image into;
				ck_assert_ptr_nonnull(slot);
				ck_assert_int_eq(prep__decode_scaled_into(data, len, M, slot, cap, &into), 0);
				ck_assert_ptr_eq(into.rgb, slot);
				ck_assert(into.w == img.w && into.h == img.h && into.scale == img.scale);
				ck_assert_msg(memcmp(slot, img.rgb, (size_t)img.w * 3 * img.h) == 0,
					      "image %zu scale %u/8: decoded into a slot differs", i, M);
				ck_assert_int_eq(prep__decode_scaled_into(data, len, M, slot, cap - 1, &into),
						 -ENOSPC);
				free(slot);
				free(a);
				free(b);
				free(img.rgb);
			}
		}
		free(data);
	}
	/* the cases covered full size and DCT-scaled decodes */
	ck_assert(scales_seen & (1u << 8));
	ck_assert(scales_seen & ~(1u << 8));
}
END_TEST

static void tier_src_fill(struct src *s, unsigned n)
{
	memset(s, 0, sizeof(*s));
	for (unsigned i = 0; i < n; i++) {
		struct jopts o = {.kind = i % 3 == 2 ? J_GRAY : J_RGB,
				  .hsamp = 1 + (int)(i % 2),
				  .progressive = i % 4 == 3,
				  .quality = 90};
		s->data[i] = make_jpeg(200 + 16 * i, 150 + 8 * i, photo_pixel, &o, &s->len[i]);
	}
}

/* The end of a tier test: the view gone, everything back in the budget. */
static void tier_view_end(struct prep_view *v, struct budget *b, struct src *s)
{
	prep_view_destroy(v);
	ck_assert_uint_eq(budget_used(b), 0);
	ck_assert_uint_eq(atomic_load(&b->kept), 0);
	budget_fini(b);
	src_free(s);
}

/* Through the view: the first decode of a file admits it, later versions
 * and recipes at that scale are hits (no source read), and every sample
 * equals prep_render on the file. */
START_TEST(view_decoded_tier)
{
	struct src s;
	struct prep_stats st;
	struct budget b;
	enum { N = 5 };
	/* on these sources (at most 312 x 190) every sample of these recipes
	 * is decoded at full size */
	static const char *recipes[] = {"rrc160", "center96", "resize120"};

	tier_src_fill(&s, N);
	budget_init(&b, 256 << 20);
	struct prep_config cfg = {.seed = 21, .mem_budget = 64 << 20, .threads = 2, .nfiles = N,
				  .mem = &b, .decoded_mem = 32 << 20};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (unsigned epoch = 0; epoch < 3; epoch++) {
		for (size_t k = 0; k < 3; k++) {
			struct prep_recipe r;
			prep_recipe_parse(recipes[k], &r);
			for (uint32_t f = 0; f < N; f++) {
				struct prep_sample *x;
				uint8_t *ref;
				size_t rl, l;
				ck_assert_int_eq(prep_view_open_job(v, 0, "A", f, 500 + f, &r, &x), 0);
				uint32_t ver = prep_recipe_is_random(&r) ? epoch : 0;
				ck_assert_int_eq(prep_render(&r, s.data[f], s.len[f], 21, 500 + f,
							     ver, &ref, &rl),
						 0);
				const uint8_t *p = prep_sample_data(x, &l);
				ck_assert_msg(l == rl && memcmp(p, ref, l) == 0,
					      "file %u %s epoch %u differs", f, recipes[k], epoch);
				free(ref);
				prep_sample_put(v, x);
			}
		}
	}
	prep_view_stats(v, &st);
	/* small sources: every sample is decoded at full size, one image per file */
	ck_assert_uint_eq(st.decoded_files, N);
	ck_assert_uint_eq(atomic_load(&s.reads), N);
	ck_assert_uint_gt(st.decoded_hits, 0);
	ck_assert_uint_eq(st.decoded_refused, 0);
	ck_assert_uint_le(st.decoded_bytes, cfg.decoded_mem);
	uint64_t want = sizeof(void *) * (uint64_t)N;
	for (unsigned f = 0; f < N; f++) {
		unsigned w, h;
		ck_assert_int_eq(prep_probe(s.data[f], s.len[f], &w, &h), 0);
		want += prep__scaled_bytes(w, h, 8);
	}
	ck_assert_uint_ge(st.decoded_bytes, want);
	/* slots (dentry + pixels, 64-aligned) carved from one chunk, charged in pages */
	ck_assert_uint_le(st.decoded_bytes, want + N * 256 + 4096);
	ck_assert_uint_ge(budget_used(&b), st.decoded_bytes);
	/* held for good: budget_trim leaves them out of its load test */
	ck_assert_uint_eq(atomic_load(&b.kept), st.decoded_bytes);
	tier_view_end(v, &b, &s);
}
END_TEST

/* The tier never holds more than its share: what does not fit is refused
 * and still served from the file, identically. */
START_TEST(view_decoded_share)
{
	struct src s;
	struct prep_stats st;
	struct budget b;
	struct prep_recipe r;
	enum { N = 8 };

	tier_src_fill(&s, N);
	prep_recipe_parse("rrc224", &r); /* always full size on these sources */
	unsigned w, h;
	ck_assert_int_eq(prep_probe(s.data[2], s.len[2], &w, &h), 0);
	uint64_t share = sizeof(void *) * (uint64_t)N + 2 * prep__scaled_bytes(w, h, 8) + 1024;
	budget_init(&b, 256 << 20);
	struct prep_config cfg = {.seed = 2, .mem_budget = 64 << 20, .threads = 1, .nfiles = N,
				  .mem = &b, .decoded_mem = share};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (unsigned epoch = 0; epoch < 2; epoch++) {
		for (uint32_t f = 0; f < N; f++) {
			struct prep_sample *x;
			uint8_t *ref;
			size_t rl, l;
			ck_assert_int_eq(prep_view_open_job(v, 0, "A", f, f, &r, &x), 0);
			ck_assert_int_eq(prep_render(&r, s.data[f], s.len[f], 2, f, epoch, &ref, &rl), 0);
			const uint8_t *p = prep_sample_data(x, &l);
			ck_assert(l == rl && memcmp(p, ref, l) == 0);
			free(ref);
			prep_sample_put(v, x);
			prep_view_stats(v, &st);
			ck_assert_uint_le(st.decoded_bytes, share);
		}
	}
	prep_view_stats(v, &st);
	ck_assert_uint_ge(st.decoded_files, 2);
	ck_assert_uint_lt(st.decoded_files, N);
	ck_assert_uint_gt(st.decoded_refused, 0);
	/* the second epoch read from the source exactly the files not held */
	ck_assert_uint_eq(atomic_load(&s.reads), 2 * N - st.decoded_files);
	ck_assert_uint_eq(st.decoded_hits, st.decoded_files);
	/* a share smaller than the index: no tier at all */
	struct prep_config tiny = cfg;
	tiny.decoded_mem = sizeof(void *) * (uint64_t)N - 1;
	struct prep_view *v2 = prep_view_create(&tiny, &src_ops, &s);
	ck_assert_ptr_nonnull(v2);
	struct prep_sample *x;
	ck_assert_int_eq(prep_view_open_job(v2, 0, "A", 0, 0, &r, &x), 0);
	prep_sample_put(v2, x);
	prep_view_stats(v2, &st);
	ck_assert_uint_eq(st.decoded_bytes, 0);
	ck_assert_uint_eq(st.decoded_files, 0);
	prep_view_destroy(v2);
	prep_view_destroy(v);
	ck_assert_uint_eq(budget_used(&b), 0);
	budget_fini(&b);
	src_free(&s);
}
END_TEST

/* A file whose decode fails is never admitted, however often it is read;
 * the good file next to it is. */
START_TEST(view_decoded_failed_not_admitted)
{
	struct src s;
	struct prep_stats st;
	struct prep_recipe r;

	tier_src_fill(&s, 3);
	s.len[1] = s.len[1] * 2 / 3; /* truncated in its scan data */
	memset(s.data[2] + s.len[2] / 2, 0xff, 64); /* corrupt middle, EOI kept */
	prep_recipe_parse("rrc64", &r);
	struct prep_config cfg = {.seed = 2, .mem_budget = 64 << 20, .threads = 1, .nfiles = 3,
				  .decoded_mem = 16 << 20};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (unsigned epoch = 0; epoch < 3; epoch++) {
		struct prep_sample *x;
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 0, &r, &x), 0);
		prep_sample_put(v, x);
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", 1, 1, &r, &x), -EIO);
		ck_assert_int_lt(prep_view_open_job(v, 0, "A", 2, 2, &r, &x), 0);
	}
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decoded_files, 1);
	ck_assert_uint_eq(st.decoded_hits, 2);
	ck_assert_uint_eq(st.errors, 6);
	unsigned w, h;
	ck_assert_int_eq(prep_probe(s.data[0], s.len[0], &w, &h), 0);
	/* one slot (entry + pixels), charged in pages */
	ck_assert_uint_le(st.decoded_bytes, 3 * sizeof(void *) + prep__scaled_bytes(w, h, 8) + 4096);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* A share of 64 MiB or more: images carved out of huge-page mappings,
 * charged in 2 MiB steps as they fill; a failed decode gives its slot back,
 * charge included; everything returns to the budget with the view. */
START_TEST(view_tier_huge_slots)
{
	struct src s;
	struct prep_stats st;
	struct prep_recipe r;
	struct budget b;
	enum { N = 4 };
	const uint64_t index = N * sizeof(void *), step = 2u << 20;

	tier_src_fill(&s, N);
	s.len[1] = s.len[1] * 2 / 3; /* truncated in its scan data */
	prep_recipe_parse("center96", &r); /* full size on these sources */
	budget_init(&b, 512u << 20);
	struct prep_config cfg = {.seed = 3, .mem_budget = 256u << 20, .threads = 1, .nfiles = N,
				  .mem = &b, .decoded_mem = 128u << 20};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	struct prep_sample *x;
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 0, &r, &x), 0);
	prep_sample_put(v, x);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decoded_files, 1);
	ck_assert_uint_eq(st.decoded_bytes, index + step);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 1, 1, &r, &x), -EIO);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decoded_files, 1);
	ck_assert_uint_eq(st.decoded_bytes, index + step);
	for (uint32_t f = 2; f < N; f++) {
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", f, f, &r, &x), 0);
		prep_sample_put(v, x);
	}
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decoded_files, N - 1);
	uint64_t pixels = 0;
	for (uint32_t f = 0; f < N; f++) {
		unsigned w, h;
		ck_assert_int_eq(prep_probe(s.data[f], s.len[f], &w, &h), 0);
		pixels += f == 1 ? 0 : prep__scaled_bytes(w, h, 8);
	}
	ck_assert_uint_eq(st.decoded_bytes, index + (pixels + N * 256 + step - 1) / step * step);
	ck_assert_uint_eq(atomic_load(&b.kept), st.decoded_bytes);
	/* another job's random samples of the held files are hits */
	struct prep_recipe rr;
	prep_recipe_parse("rrc160", &rr);
	for (uint32_t f = 0; f < N; f += 2) {
		ck_assert_int_eq(prep_view_open_job(v, 0, "B", f, f, &rr, &x), 0);
		prep_sample_put(v, x);
	}
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decoded_hits, 2);
	tier_view_end(v, &b, &s);
}
END_TEST

/*
 * The default shares: a given --prep-mem bounds everything, the tier takes
 * the dataset's estimate when it fits in three quarters of it; without
 * one, the tier grows to the dataset within half of the available memory
 * and the budget with it, never below the old defaults.
 */
START_TEST(default_shares)
{
	const uint64_t G = 1ull << 30, M = 1ull << 20;
	uint64_t rng = 0xd5;
	uint64_t mem, dec;

	ck_assert_int_eq(prep_default_shares(G, true, 1, 1, G, NULL, &dec), -EINVAL);
	for (int it = 0; it < 2000; it++) {
		uint64_t m = 1 + (rng = hash_mix64(rng)) % (8 * G);
		uint64_t bytes = it % 7 == 0 ? 0 : (rng = hash_mix64(rng)) % (4 * G);
		uint64_t files = 1 + (rng = hash_mix64(rng)) % 2000000;
		uint64_t avail = (rng = hash_mix64(rng)) % (64 * G);
		uint64_t need = bytes ? bytes * PREP_DECODED_PER_BYTE + 8 * files : UINT64_MAX;
		if (need < PREP_TIER_HUGE_MIN)
			need = PREP_TIER_HUGE_MIN;

		/* given: a hard bound, staging keeps a quarter, or the old half */
		ck_assert_int_eq(prep_default_shares(m, true, bytes, files, avail, &mem, &dec), 0);
		ck_assert_uint_eq(mem, m);
		ck_assert_uint_le(dec, m);
		ck_assert_uint_eq(dec, need <= m / 4 * 3 ? need : m / 2);
		/* default: the tier holds the dataset when half of avail has room */
		ck_assert_int_eq(prep_default_shares(m, false, bytes, files, avail, &mem, &dec), 0);
		ck_assert_uint_le(dec, mem);
		ck_assert_uint_ge(mem, m);
		ck_assert_uint_ge(mem - dec, m / 2);
		ck_assert_uint_le(dec, need);
		if (bytes && need <= avail / 2)
			ck_assert_uint_eq(dec, need);
		if (dec > m / 2)
			ck_assert_uint_le(dec, avail / 2);
	}
	/* a small dataset gets the share whose images live in huge pages */
	ck_assert_int_eq(prep_default_shares(G, true, 4 * M, 40, 20 * G, &mem, &dec), 0);
	ck_assert_uint_eq(dec, PREP_TIER_HUGE_MIN);
	/* the benchmark's 1,000 500x375 JPEGs (95 MB): 1G given holds them
	 * (the old half did not: 536 MiB of pixels) */
	ck_assert_int_eq(prep_default_shares(G, true, 95 * M, 1000, 20 * G, &mem, &dec), 0);
	ck_assert_uint_ge(dec, 536 * M);
	ck_assert_uint_le(dec, G / 4 * 3);
	/* 10 GiB of files, 200 GiB available, no --prep-mem: the tier takes all */
	ck_assert_int_eq(prep_default_shares(G, false, 10 * G, 1000, 200 * G, &mem, &dec), 0);
	ck_assert_uint_eq(dec, 10 * G * PREP_DECODED_PER_BYTE + 8000);
	ck_assert_uint_eq(mem, dec + G / 2);
}
END_TEST

void prep_tier_tests(TCase *tc)
{
	tcase_add_test(tc, default_shares);
	tcase_add_test(tc, tier_pixels_match_file);
	tcase_add_test(tc, view_decoded_tier);
	tcase_add_test(tc, view_decoded_share);
	tcase_add_test(tc, view_decoded_failed_not_admitted);
	tcase_add_test(tc, view_tier_huge_slots);
}
