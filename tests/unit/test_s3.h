/* SPDX-License-Identifier: MIT */
/* The unit test `s3` in two files: test_s3.c (the client: pool, create,
 * credentials, a scripted server) runs test_s3_parse.c's cases too. */
#ifndef COORDFS_TESTS_UNIT_TEST_S3_H
#define COORDFS_TESTS_UNIT_TEST_S3_H

#include <check.h>

void s3_parse_tests(TCase *tc);

#endif
