/* SPDX-License-Identifier: MIT */
/*
 * What the prep/ unit tests (test_prep*.c, one executable: test "prep")
 * share: images generated with libjpeg/libpng, so the tests are
 * self-contained; PPM and colour checks; an in-memory source for the
 * staging engine.
 */
#ifndef COORDFS_TESTS_UNIT_TEST_PREP_IMAGES_H
#define COORDFS_TESTS_UNIT_TEST_PREP_IMAGES_H

#include <check.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prep/prep.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define CORPUS_DIR "../fuzz/corpus_prep"

struct color {
	uint8_t r, g, b;
};
extern const struct color quad_colors[4];

/* 4 solid quadrants (aligned to 16-pixel MCUs for 64x64). */
struct color quad_pixel(unsigned x, unsigned y, unsigned w, unsigned h);
/* Smooth gradients, deterministic noise and a block: photo-like. */
struct color photo_pixel(unsigned x, unsigned y, unsigned w, unsigned h);

typedef struct color (*pixel_fn)(unsigned x, unsigned y, unsigned w, unsigned h);

enum jkind { J_RGB, J_GRAY, J_CMYK, J_YCCK };

struct jopts {
	enum jkind kind;
	bool progressive;
	unsigned restart; /* restart_interval in MCUs, 0 = none */
	int hsamp;	  /* luma h sampling factor: 1 (4:4:4), 2 (4:2:0) or 4 */
	int vsamp;	  /* luma v sampling factor; 0: as hsamp */
	int quality;
	bool arith; /* arithmetic coding */
};

/* Every kind of JPEG the decoder handles, at q90. */
extern const struct jopts jpeg_kinds[8];
#define NKINDS (sizeof(jpeg_kinds) / sizeof(jpeg_kinds[0]))

/* CMYK bytes as stored (Adobe polarity: 255 = no ink). */
void cmyk_of(struct color c, uint8_t out[4]);
/* What PIL makes of stored CMYK: "CMYK;I" then cmyk2rgb. */
struct color pil_cmyk_rgb(const uint8_t in[4]);
/* A w x h JPEG of px's pixels, malloc'd; its size in *len. */
uint8_t *make_jpeg(unsigned w, unsigned h, pixel_fn px, const struct jopts *o, size_t *len);
/* What PIL's convert("RGB") gives for colour c stored as ctype/depth. */
struct color png_expect(int ctype, int depth, struct color c);
/* A w x h PNG of quadrants, malloc'd; its size in *len. */
uint8_t *make_png(unsigned w, unsigned h, int ctype, int depth, bool interlace, bool trns,
		  size_t *len);

/* The size and pixels of a PPM, asserting its header and length. */
void parse_ppm(const uint8_t *p, size_t len, unsigned *w, unsigned *h, const uint8_t **px);
double psnr(const uint8_t *a, const uint8_t *b, size_t n);
void assert_color_near(const uint8_t *p, struct color c, int tol, const char *what);

/* An in-memory source of up to 16 files for the staging engine. */
struct src {
	uint8_t *data[16];
	size_t len[16];
	_Atomic unsigned reads;
	unsigned delay_ms;
	/* When set, a read first waits (up to 20 s) for this many openers to
	 * have started, so single-flight tests do not depend on timing (they
	 * also run under valgrind). */
	unsigned wait_openers;
	_Atomic unsigned *openers;
	/* reads in progress, and the most seen at once */
	_Atomic unsigned inflight, max_inflight;
};

int src_read(void *arg, uint32_t i, uint8_t **data, size_t *len);
/* n photo-like JPEGs of growing sizes. */
void src_fill(struct src *s, unsigned n);
void src_free(struct src *s);
extern const struct prep_source_ops src_ops;

/* Each file's tests, added to the one test case in test_prep.c's order. */
void prep_render_tests(TCase *tc);
void prep_codec_tests(TCase *tc);
void prep_resample_tests(TCase *tc);
void prep_view_tests(TCase *tc);
void prep_tier_tests(TCase *tc);
void prep_jobs_tests(TCase *tc);

#endif
