/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for prep/: recipes, decoding of every JPEG/PNG flavour to RGB
 * (images generated here with libjpeg/libpng, so the test is
 * self-contained), ROI + DCT-scaled decoding against full decoding, the
 * RandomResizedCrop parameters, determinism, the staging engine
 * (single-flight, budget, release after every active job read), job
 * identity, and replay of the fuzz corpus (tests/fuzz/corpus_prep).
 *
 * One executable, three meson tests by Check tag (prep: pixels;
 * prep_view: view; prep_tiers: tiers), one file per part of prep/:
 * test_prep_render.c, test_prep_codec.c, test_prep_resample.c,
 * test_prep_view.c, test_prep_tier.c, test_prep_jobs.c; what they share is
 * in test_prep_images.c.
 */
#include <check.h>

#include "tests/unit/check_run.h"
#include "tests/unit/test_prep_images.h"

int main(void)
{
	Suite *s = suite_create("prep");
	/* Three cases, so that meson runs them as tests side by side (the
	 * valgrind pass waited on this one executable): pixels (render,
	 * codecs, resampler), view (staging) and tiers (the decoded tier,
	 * jobs). */
	TCase *pixels = tcase_create("pixels");
	TCase *view = tcase_create("view");
	TCase *tiers = tcase_create("tiers");

	tcase_set_timeout(pixels, 120);
	tcase_set_timeout(view, 120);
	tcase_set_timeout(tiers, 120);
	tcase_set_tags(pixels, "pixels");
	tcase_set_tags(view, "view");
	tcase_set_tags(tiers, "tiers");
	prep_render_tests(pixels);
	prep_codec_tests(pixels);
	prep_resample_tests(pixels);
	prep_view_tests(view);
	prep_tier_tests(tiers);
	prep_jobs_tests(tiers);
	suite_add_tcase(s, pixels);
	suite_add_tcase(s, view);
	suite_add_tcase(s, tiers);
	return check_run(s);
}
