/* SPDX-License-Identifier: MIT */
/*
 * Test helper for the prep/ engine, driven by tests/integration scripts:
 *   prep_render_cli RECIPE SEED VERSION INFILE [FILE_KEY]  -> PPM on stdout
 *   prep_render_cli --scale M RECIPE INFILE                -> PPM, DCT scale forced to M/8
 *   prep_render_cli --rrc-params W H SEED COUNT            -> "top left h w fallback flip" lines
 *   prep_render_cli --bench RECIPE N INFILE...             -> mean CPU ms per render on stdout
 * Exit status 0, or 1 with one line on stderr naming the problem.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/file.h"
#include "prep/prep_int.h"

#define MAX_INPUT (256u << 20)

struct scale_arg {
	const struct prep_recipe *r;
};

static int plan_det(void *arg, unsigned W, unsigned H, struct prep__geom *g)
{
	struct scale_arg *a = arg;

	return prep__plan(a->r, W, H, 0, 0, 0, g);
}

static int write_out(const uint8_t *p, size_t n)
{
	return fwrite(p, 1, n, stdout) == n ? 0 : -EIO;
}

int main(int argc, char **argv)
{
	struct prep_recipe r;
	uint8_t *data = NULL, *ppm = NULL;
	size_t len = 0, plen = 0;
	int rc;

	if (argc == 6 && strcmp(argv[1], "--rrc-params") == 0) {
		unsigned W = (unsigned)strtoul(argv[2], NULL, 10),
			 H = (unsigned)strtoul(argv[3], NULL, 10);
		uint64_t seed = strtoull(argv[4], NULL, 0);
		unsigned long count = strtoul(argv[5], NULL, 10);

		if (W == 0 || H == 0) {
			fprintf(stderr, "prep_render_cli: bad size %sx%s\n", argv[2], argv[3]);
			return 1;
		}
		struct prep_recipe rrc;

		prep_recipe_parse("rrc224", &rrc);
		for (unsigned long i = 0; i < count; i++) {
			struct prep__rng g;
			struct prep__rrc c;
			struct prep__geom plan;

			/* the crop and the flip as the daemon plans them (file key
			 * i, version 0); the crop's draws again for the fallback
			 * flag, which the plan does not keep */
			if (prep__plan(&rrc, W, H, seed, i, 0, &plan) < 0) {
				fprintf(stderr, "prep_render_cli: no plan for %ux%u\n", W, H);
				return 1;
			}
			prep__rng_init(&g, seed, i, 0);
			prep__rrc_params(&g, W, H, &c);
			if (plan.clip_y0 != c.top || plan.clip_x0 != c.left ||
			    plan.clip_y1 - plan.clip_y0 != c.h || plan.clip_x1 - plan.clip_x0 != c.w) {
				fprintf(stderr, "prep_render_cli: the plan's crop is not the rrc draw\n");
				return 1;
			}
			printf("%u %u %u %u %d %d\n", plan.clip_y0, plan.clip_x0,
			       plan.clip_y1 - plan.clip_y0, plan.clip_x1 - plan.clip_x0, c.fallback,
			       plan.flip);
		}
		return 0;
	}
	if (argc >= 5 && strcmp(argv[1], "--bench") == 0) {
		unsigned long n = strtoul(argv[3], NULL, 10);
		struct timespec t0, t1;
		unsigned long renders = 0;
		double total = 0;

		if (prep_recipe_parse(argv[2], &r) < 0 || n == 0) {
			fprintf(stderr, "prep_render_cli: bad recipe %s or count %s\n", argv[2],
				argv[3]);
			return 1;
		}
		for (int f = 4; f < argc; f++) {
			if ((rc = file_read_all(argv[f], MAX_INPUT, &data, &len)) < 0) {
				fprintf(stderr, "prep_render_cli: %s: %s\n", argv[f],
					strerror(-rc));
				return 1;
			}
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
			for (unsigned long i = 0; i < n; i++) {
				if ((rc = prep_render(&r, data, len, 1, (uint64_t)f, (uint32_t)i,
						      &ppm, &plen)) < 0) {
					fprintf(stderr, "prep_render_cli: %s: %s\n", argv[f],
						strerror(-rc));
					return 1;
				}
				free(ppm);
				renders++;
			}
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
			total += (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
			free(data);
		}
		printf("%.4f\n", total / renders);
		return 0;
	}
	if (argc == 5 && strcmp(argv[1], "--scale") == 0) {
		struct scale_arg a = {&r};
		unsigned m = (unsigned)strtoul(argv[2], NULL, 10);

		if (prep_recipe_parse(argv[3], &r) < 0 || m < 1 || m > 8) {
			fprintf(stderr, "prep_render_cli: bad recipe %s or scale %s\n", argv[3],
				argv[2]);
			return 1;
		}
		if ((rc = file_read_all(argv[4], MAX_INPUT, &data, &len)) < 0) {
			fprintf(stderr, "prep_render_cli: %s: %s\n", argv[4], strerror(-rc));
			return 1;
		}
		rc = prep__render_geom(data, len, plan_det, &a, m, &ppm, &plen);
	} else if (argc == 5 || argc == 6) {
		if (prep_recipe_parse(argv[1], &r) < 0) {
			fprintf(stderr, "prep_render_cli: bad recipe %s\n", argv[1]);
			return 1;
		}
		uint64_t seed = strtoull(argv[2], NULL, 0);
		uint32_t version = (uint32_t)strtoul(argv[3], NULL, 0);
		uint64_t key = argc == 6 ? strtoull(argv[5], NULL, 0) : 0;

		if ((rc = file_read_all(argv[4], MAX_INPUT, &data, &len)) < 0) {
			fprintf(stderr, "prep_render_cli: %s: %s\n", argv[4], strerror(-rc));
			return 1;
		}
		rc = prep_render(&r, data, len, seed, key, version, &ppm, &plen);
	} else {
		fprintf(stderr, "usage: prep_render_cli RECIPE SEED VERSION INFILE [FILE_KEY]\n"
				"       prep_render_cli --scale M RECIPE INFILE\n"
				"       prep_render_cli --rrc-params W H SEED COUNT\n");
		return 1;
	}
	free(data);
	if (rc < 0) {
		fprintf(stderr, "prep_render_cli: cannot render: %s\n", strerror(-rc));
		return 1;
	}
	rc = write_out(ppm, plen);
	free(ppm);
	return rc < 0 ? 1 : 0;
}
