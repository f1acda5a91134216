/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for prep/: recipes, decoding of every JPEG/PNG flavour to RGB
 * (images generated here with libjpeg/libpng, so the test is
 * self-contained), ROI + DCT-scaled decoding against full decoding, the
 * RandomResizedCrop parameters, determinism, the staging engine
 * (single-flight, budget, release after every active job read), job
 * identity, and replay of the fuzz corpus (tests/fuzz/corpus_prep).
 *
 * One executable (meson test "prep"), one file per part of prep/:
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
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	prep_render_tests(tc);
	prep_codec_tests(tc);
	prep_resample_tests(tc);
	prep_view_tests(tc);
	prep_tier_tests(tc);
	prep_jobs_tests(tc);
	suite_add_tcase(s, tc);
	return check_run(s);
}
