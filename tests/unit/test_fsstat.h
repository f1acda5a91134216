/* SPDX-License-Identifier: MIT */
/* The unit test `fsstat` in two files: test_fsstat.c (the document and the
 * table) runs test_fsstat_cli.c's cases (the command) too. */
#ifndef COORDFS_TESTS_UNIT_TEST_FSSTAT_H
#define COORDFS_TESTS_UNIT_TEST_FSSTAT_H

#include <check.h>
#include <string.h>

/* A full statistics document plus fields fsstat does not know; two
 * samples two seconds apart, for watch-mode rates. */
extern const char fsstat_known_stats[];
extern const char fsstat_rate_prev[];
extern const char fsstat_rate_cur[];

#define assert_contains(hay, needle)                                                                       \
	ck_assert_msg(strstr((hay), (needle)) != NULL, "expected \"%s\" in output:\n%s", (needle), (hay))
#define assert_lacks(hay, needle)                                                                          \
	ck_assert_msg(strstr((hay), (needle)) == NULL, "did not expect \"%s\" in output:\n%s", (needle), (hay))


void fsstat_cli_tests(TCase *tc);

#endif
