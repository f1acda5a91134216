/* SPDX-License-Identifier: MIT */
/* placeholder, filled in below */
#include <check.h>
#include "tests/unit/check_run.h"
int main(void)
{
	Suite *s = suite_create("s3");
	return check_run(s);
}
