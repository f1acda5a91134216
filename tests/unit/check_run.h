/* SPDX-License-Identifier: MIT */
/*
 * The one way the unit tests run their Check suite: verbosity from the
 * environment (CK_VERBOSITY; meson sets "silent" and reads the TAP stream),
 * exit status non-zero when any test failed.
 */
#ifndef COORDFS_TESTS_CHECK_RUN_H
#define COORDFS_TESTS_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int check_run(Suite *s)
{
	SRunner *sr = srunner_create(s);

	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
