/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for prep/: recipes, decoding of every JPEG/PNG flavour to RGB
 * (images generated here with libjpeg/libpng, so the test is
 * self-contained), ROI + DCT-scaled decoding against full decoding, the
 * RandomResizedCrop parameters, determinism, the staging engine
 * (single-flight, budget, release after every active job read), job
 * identity, and replay of the fuzz corpus (tests/fuzz/corpus_prep).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#include "common/budget.h"
#include "common/hash.h"
#include "prep/prep_int.h"
#include "tests/unit/check_run.h"

#define CORPUS_DIR "../fuzz/corpus_prep"

/* ---- image generators ---- */

struct color {
	uint8_t r, g, b;
};
static const struct color quad_colors[4] = {
    {200, 30, 40}, {20, 220, 90}, {30, 60, 200}, {128, 128, 128}};

/* 4 solid quadrants (aligned to 16-pixel MCUs for 64x64). */
static struct color quad_pixel(unsigned x, unsigned y, unsigned w, unsigned h)
{
	return quad_colors[(y >= h / 2) * 2 + (x >= w / 2)];
}

/* Smooth gradients, deterministic noise and a block: photo-like. */
static struct color photo_pixel(unsigned x, unsigned y, unsigned w, unsigned h)
{
	double n = (double)(hash_mix64((uint64_t)y << 32 | x) % 13) - 6.0;
	double r = 128 + 100 * sin(x / 23.0) + 20 * cos(y / 11.0) + n;
	double g = 128 + 90 * cos((x + y) / 53.0) + n;
	double b = 60 + 150.0 * y / h + n;
	struct color c;

	if (x > w / 3 && x < w / 2 && y > h / 4 && y < h / 2)
		r = 200, g = 30, b = 40;
	c.r = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
	c.g = (uint8_t)(g < 0 ? 0 : g > 255 ? 255 : g);
	c.b = (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
	return c;
}

typedef struct color (*pixel_fn)(unsigned x, unsigned y, unsigned w, unsigned h);

enum jkind { J_RGB, J_GRAY, J_CMYK, J_YCCK };

struct jopts {
	enum jkind kind;
	bool progressive;
	unsigned restart; /* restart_interval in MCUs, 0 = none */
	int hsamp;	  /* luma h sampling factor: 1 (4:4:4) or 2 (4:2:0) */
	int quality;
};

/* CMYK bytes as stored (Adobe polarity: 255 = no ink). */
static void cmyk_of(struct color c, uint8_t out[4])
{
	out[0] = c.r;
	out[1] = c.g;
	out[2] = c.b;
	out[3] = 180;
}

/* What PIL makes of stored CMYK: "CMYK;I" then cmyk2rgb. */
static struct color pil_cmyk_rgb(const uint8_t in[4])
{
	uint8_t v[3];
	int nk = in[3];

	for (int c = 0; c < 3; c++) {
		int tmp = (255 - in[c]) * nk + 128;
		v[c] = (uint8_t)(nk - (((tmp >> 8) + tmp) >> 8));
	}
	return (struct color){v[0], v[1], v[2]};
}

static uint8_t *make_jpeg(unsigned w, unsigned h, pixel_fn px, const struct jopts *o, size_t *len)
{
	struct jpeg_compress_struct ci;
	struct jpeg_error_mgr jerr;
	unsigned char *mem = NULL;
	unsigned long mlen = 0;
	int comps = o->kind == J_GRAY ? 1 : o->kind == J_RGB ? 3 : 4;
	uint8_t *row = malloc((size_t)w * comps);

	ci.err = jpeg_std_error(&jerr);
	jpeg_create_compress(&ci);
	jpeg_mem_dest(&ci, &mem, &mlen);
	ci.image_width = w;
	ci.image_height = h;
	ci.input_components = comps;
	ci.in_color_space = o->kind == J_GRAY  ? JCS_GRAYSCALE
			    : o->kind == J_RGB ? JCS_RGB
					       : JCS_CMYK;
	jpeg_set_defaults(&ci);
	if (o->kind == J_YCCK)
		jpeg_set_colorspace(&ci, JCS_YCCK);
	jpeg_set_quality(&ci, o->quality ? o->quality : 95, TRUE);
	if (o->kind != J_GRAY) {
		ci.comp_info[0].h_samp_factor = o->hsamp ? o->hsamp : 1;
		ci.comp_info[0].v_samp_factor = o->hsamp ? o->hsamp : 1;
		for (int c = 1; c < ci.num_components; c++)
			ci.comp_info[c].h_samp_factor = ci.comp_info[c].v_samp_factor = 1;
		if (o->kind == J_YCCK)
			ci.comp_info[3].h_samp_factor = ci.comp_info[3].v_samp_factor =
			    ci.comp_info[0].h_samp_factor;
	}
	if (o->progressive)
		jpeg_simple_progression(&ci);
	ci.restart_interval = o->restart;
	jpeg_start_compress(&ci, TRUE);
	for (unsigned y = 0; y < h; y++) {
		for (unsigned x = 0; x < w; x++) {
			struct color c = px(x, y, w, h);
			uint8_t *p = row + (size_t)x * comps;
			if (o->kind == J_GRAY)
				p[0] = c.g;
			else if (o->kind == J_RGB)
				p[0] = c.r, p[1] = c.g, p[2] = c.b;
			else
				cmyk_of(c, p);
		}
		JSAMPROW r = row;
		jpeg_write_scanlines(&ci, &r, 1);
	}
	jpeg_finish_compress(&ci);
	jpeg_destroy_compress(&ci);
	free(row);
	*len = mlen;
	return mem;
}

struct pngbuf {
	uint8_t *data;
	size_t len, cap;
};

static void png_write_mem(png_structp png, png_bytep data, size_t n)
{
	struct pngbuf *b = png_get_io_ptr(png);

	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->data = realloc(b->data, b->cap);
		ck_assert_ptr_nonnull(b->data);
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
}

static void png_flush_mem(png_structp png)
{
}

/* Sample value of a PNG pixel for the given type: gray from g, alpha = x. */
static void png_pixel(int ctype, int depth, struct color c, unsigned x, uint8_t *p)
{
	unsigned maxv = (1u << depth) - 1;
	unsigned vals[4], n = 0;

	switch (ctype) {
	case PNG_COLOR_TYPE_GRAY:
		vals[n++] = depth == 16 ? c.g * 3u : c.g * maxv / 255;
		break;
	case PNG_COLOR_TYPE_GRAY_ALPHA:
		vals[n++] = c.g * maxv / 255;
		vals[n++] = (x * 37) % (maxv + 1);
		break;
	case PNG_COLOR_TYPE_RGB:
	case PNG_COLOR_TYPE_RGB_ALPHA:
		vals[n++] = c.r * maxv / 255;
		vals[n++] = c.g * maxv / 255;
		vals[n++] = c.b * maxv / 255;
		if (ctype == PNG_COLOR_TYPE_RGB_ALPHA)
			vals[n++] = (x * 37) % (maxv + 1);
		break;
	}
	for (unsigned i = 0; i < n; i++) {
		if (depth == 16) {
			p[2 * i] = (uint8_t)(vals[i] >> 8);
			p[2 * i + 1] = (uint8_t)vals[i];
		} else {
			p[i] = (uint8_t)vals[i];
		}
	}
}

/* Expected RGB after PIL's convert("RGB") of such a pixel. */
static struct color png_expect(int ctype, int depth, struct color c)
{
	unsigned maxv = (1u << depth) - 1;

	switch (ctype) {
	case PNG_COLOR_TYPE_GRAY:
		if (depth == 16) { /* PIL mode "I": clipped */
			unsigned v = c.g * 3u > 255 ? 255 : c.g * 3u;
			return (struct color){v, v, v};
		} else {
			unsigned v = (c.g * maxv / 255) * 255 / maxv;
			return (struct color){v, v, v};
		}
	case PNG_COLOR_TYPE_GRAY_ALPHA:
		if (depth == 16) {
			uint8_t v = (uint8_t)((c.g * maxv / 255) >> 8);
			return (struct color){v, v, v};
		}
		return (struct color){c.g, c.g, c.g};
	default:
		if (depth == 16)
			return (struct color){(c.r * maxv / 255) >> 8, (c.g * maxv / 255) >> 8,
					      (c.b * maxv / 255) >> 8};
		return c;
	}
}

static uint8_t *make_png(unsigned w, unsigned h, int ctype, int depth, bool interlace, bool trns,
			 size_t *len)
{
	struct pngbuf b = {0};
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	size_t rowbytes = (size_t)w * 8 + 8;
	uint8_t *row = calloc(1, rowbytes);

	ck_assert(png && info && row);
	png_set_write_fn(png, &b, png_write_mem, png_flush_mem);
	png_set_IHDR(png, info, w, h, depth, ctype,
		     interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	if (ctype == PNG_COLOR_TYPE_PALETTE) {
		png_color pal[4];
		for (int i = 0; i < 4; i++)
			pal[i] = (png_color){quad_colors[i].r, quad_colors[i].g, quad_colors[i].b};
		png_set_PLTE(png, info, pal, 4);
		if (trns) {
			png_byte t[4] = {0, 128, 255, 7};
			png_set_tRNS(png, info, t, 4, NULL);
		}
	} else if (trns && ctype == PNG_COLOR_TYPE_GRAY) {
		png_color_16 tc = {.gray = 1};
		png_set_tRNS(png, info, NULL, 0, &tc);
	}
	png_write_info(png, info);
	int passes = png_set_interlace_handling(png);
	for (int pass = 0; pass < passes; pass++) {
		for (unsigned y = 0; y < h; y++) {
			memset(row, 0, rowbytes);
			for (unsigned x = 0; x < w; x++) {
				struct color c = quad_pixel(x, y, w, h);
				if (ctype == PNG_COLOR_TYPE_PALETTE) {
					row[x] = (uint8_t)((y >= h / 2) * 2 + (x >= w / 2));
				} else if (depth < 8) {
					unsigned v = c.g * ((1u << depth) - 1) / 255;
					unsigned bit = x * depth;
					row[bit / 8] |= (uint8_t)(v << (8 - depth - bit % 8));
				} else {
					unsigned ch = ctype == PNG_COLOR_TYPE_GRAY	   ? 1
						      : ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
						      : ctype == PNG_COLOR_TYPE_RGB	   ? 3
											   : 4;
					png_pixel(ctype, depth, c, x,
						  row + (size_t)x * ch * (depth / 8));
				}
			}
			png_write_row(png, row);
		}
	}
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	free(row);
	*len = b.len;
	return b.data;
}

/* ---- helpers ---- */

static void parse_ppm(const uint8_t *p, size_t len, unsigned *w, unsigned *h, const uint8_t **px)
{
	int off = 0, nl = 0;

	char head[48];
	size_t hl = len < sizeof(head) - 1 ? len : sizeof(head) - 1;

	memcpy(head, p, hl);
	head[hl] = '\0';
	ck_assert_int_eq(sscanf(head, "P6\n%u %u\n255", w, h), 2);
	while ((size_t)off < len && nl < 3) /* the header is three lines */
		nl += p[off++] == '\n';
	ck_assert_int_eq(nl, 3);
	ck_assert_uint_eq(len, (size_t)off + (size_t)*w * *h * 3);
	*px = p + off;
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
	double se = 0;

	for (size_t i = 0; i < n; i++)
		se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
	if (se == 0)
		return INFINITY;
	return 10 * log10(255.0 * 255.0 / (se / n));
}

static void assert_color_near(const uint8_t *p, struct color c, int tol, const char *what)
{
	ck_assert_msg(abs(p[0] - c.r) <= tol && abs(p[1] - c.g) <= tol && abs(p[2] - c.b) <= tol,
		      "%s: got (%d,%d,%d), want (%d,%d,%d) +-%d", what, p[0], p[1], p[2], c.r, c.g,
		      c.b, tol);
}

/* ---- recipes ---- */

START_TEST(recipe_parsing)
{
	static const char *bad[] = {"",	       "rrc",	  "rrc15",	 "rrc1025",
				    "rrc0224", "rrc224x", "RRC224",	 "crop224",
				    "rrc-1",   "rrc+224", "center99999", "resize 256",
				    "center",  "rrc2240", "resize",	 "rrc224/"};
	struct prep_recipe r = {PREP_RESIZE, 77};
	char name[32];

	ck_assert_int_eq(prep_recipe_parse("rrc224", &r), 0);
	ck_assert_int_eq(r.kind, PREP_RRC);
	ck_assert_uint_eq(r.size, 224);
	ck_assert(prep_recipe_is_random(&r));
	ck_assert_int_eq(prep_recipe_parse("center16", &r), 0);
	ck_assert_int_eq(r.kind, PREP_CENTER);
	ck_assert_uint_eq(r.size, 16);
	ck_assert(!prep_recipe_is_random(&r));
	ck_assert_int_eq(prep_recipe_parse("resize1024", &r), 0);
	ck_assert_int_eq(r.kind, PREP_RESIZE);
	ck_assert_uint_eq(r.size, 1024);
	ck_assert_int_eq(prep_recipe_name(&r, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "resize1024");
	ck_assert_int_eq(prep_recipe_name(&r, name, 5), -ENAMETOOLONG);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct prep_recipe keep = {PREP_RRC, 99};
		int rc = prep_recipe_parse(bad[i], &keep);
		ck_assert_msg(rc == -EINVAL, "prep_recipe_parse(\"%s\") = %d, want -EINVAL", bad[i],
			      rc);
		ck_assert_uint_eq(keep.size, 99);
	}
	ck_assert_int_eq(prep_recipe_parse(NULL, &r), -EINVAL);

	/* the names ImageFolder lists */
	ck_assert(prep_is_image_name("n01440764_10026.JPEG"));
	ck_assert(prep_is_image_name("a.png"));
	ck_assert(prep_is_image_name("dir.x/b.webp"));
	ck_assert(prep_is_image_name(".jpg")); /* torchvision: name.lower().endswith() */
	ck_assert(!prep_is_image_name("notes.txt"));
	ck_assert(!prep_is_image_name("jpg"));
	ck_assert(!prep_is_image_name(NULL));
}
END_TEST

START_TEST(output_sizes)
{
	struct prep_recipe r;
	unsigned w, h;
	uint64_t bytes;

	prep_recipe_parse("resize256", &r);
	ck_assert_int_eq(prep_output_dims(&r, 500, 375, &w, &h), 0);
	ck_assert_uint_eq(w, 341); /* int(256 * 500 / 375) */
	ck_assert_uint_eq(h, 256);
	ck_assert_int_eq(prep_output_dims(&r, 375, 500, &w, &h), 0);
	ck_assert_uint_eq(w, 256);
	ck_assert_uint_eq(h, 341);
	ck_assert_int_eq(prep_output_size(&r, 375, 500, &bytes), 0);
	ck_assert_uint_eq(bytes, strlen("P6\n256 341\n255\n") + 256 * 341 * 3);
	prep_recipe_parse("rrc224", &r);
	ck_assert_int_eq(prep_output_size(&r, 10, 7000, &bytes), 0);
	ck_assert_uint_eq(bytes, 15 + 224 * 224 * 3);
	prep_recipe_parse("resize1024", &r);
	ck_assert_int_eq(prep_output_dims(&r, 32768, 2, &w, &h), -EFBIG);
	ck_assert_int_eq(prep_output_dims(&r, 0, 2, &w, &h), -EINVAL);
	ck_assert_int_eq(prep_output_dims(&r, 40000, 2, &w, &h), -EFBIG);

	/* center geometry: torchvision Resize(256) + CenterCrop(224) */
	struct prep__geom g;
	prep_recipe_parse("center224", &r);
	ck_assert_int_eq(prep__plan(&r, 500, 375, 0, 0, 0, &g), 0);
	ck_assert_uint_eq(g.vw, 341);
	ck_assert_uint_eq(g.vh, 256);
	ck_assert_uint_eq(g.ox, 58); /* int(round(117 / 2.0)) = 58 (half to even) */
	ck_assert_uint_eq(g.oy, 16);
	ck_assert_uint_eq(g.ow, 224);
	ck_assert_uint_eq(g.oh, 224);
}
END_TEST

/* ---- probe ---- */

START_TEST(probe_headers)
{
	struct jopts o = {.kind = J_RGB};
	size_t jl, pl;
	uint8_t *j = make_jpeg(70, 33, quad_pixel, &o, &jl);
	uint8_t *p = make_png(41, 17, PNG_COLOR_TYPE_RGB, 8, false, false, &pl);
	unsigned w = 0, h = 0;

	ck_assert_int_eq(prep_probe(j, jl, &w, &h), 0);
	ck_assert_uint_eq(w, 70);
	ck_assert_uint_eq(h, 33);
	ck_assert_int_eq(prep_probe(p, pl, &w, &h), 0);
	ck_assert_uint_eq(w, 41);
	ck_assert_uint_eq(h, 17);
	ck_assert_int_eq(prep_probe(j, 40, &w, &h), -ENODATA);
	ck_assert_int_eq(prep_probe(p, 20, &w, &h), -ENODATA);
	ck_assert_int_eq(prep_probe("hello, world, this is text", 26, &w, &h), -EINVAL);
	ck_assert_int_eq(prep_probe("", 0, &w, &h), -EINVAL);
	free(j);
	free(p);
}
END_TEST

/* ---- decoding to RGB ---- */

static void check_quadrants_jpeg(const struct jopts *o, int tol, const char *what)
{
	size_t len;
	uint8_t *j = make_jpeg(64, 64, quad_pixel, o, &len);
	struct prep__image img;

	ck_assert_msg(prep__decode_full(j, len, &img) == 0, "%s: decode failed", what);
	ck_assert_uint_eq(img.w, 64);
	ck_assert_uint_eq(img.h, 64);
	for (int q = 0; q < 4; q++) {
		unsigned x = (q % 2) * 32 + 16, y = (q / 2) * 32 + 16;
		struct color want = quad_colors[q];
		if (o->kind == J_GRAY) {
			want.r = want.b = want.g;
		} else if (o->kind == J_CMYK || o->kind == J_YCCK) {
			uint8_t cmyk[4];
			cmyk_of(quad_colors[q], cmyk);
			want = pil_cmyk_rgb(cmyk);
		}
		assert_color_near(img.rgb + ((size_t)y * 64 + x) * 3, want, tol, what);
	}
	free(img.rgb);
	free(j);
}

START_TEST(decode_jpeg_flavours)
{
	check_quadrants_jpeg(&(struct jopts){.kind = J_RGB}, 4, "baseline 4:4:4");
	check_quadrants_jpeg(&(struct jopts){.kind = J_RGB, .hsamp = 2}, 6, "baseline 4:2:0");
	check_quadrants_jpeg(&(struct jopts){.kind = J_GRAY}, 2, "gray");
	check_quadrants_jpeg(&(struct jopts){.kind = J_CMYK}, 4, "CMYK (Adobe)");
	check_quadrants_jpeg(&(struct jopts){.kind = J_YCCK}, 6, "YCCK (Adobe)");
	check_quadrants_jpeg(&(struct jopts){.kind = J_RGB, .progressive = true, .hsamp = 2}, 6,
			     "progressive");
	check_quadrants_jpeg(&(struct jopts){.kind = J_RGB, .restart = 1, .hsamp = 2}, 6,
			     "restart markers");
	check_quadrants_jpeg(&(struct jopts){.kind = J_CMYK, .progressive = true}, 6,
			     "progressive CMYK");
}
END_TEST

START_TEST(decode_png_flavours)
{
	static const struct {
		int ctype, depth;
		bool interlace, trns;
	} cases[] = {
	    {PNG_COLOR_TYPE_RGB, 8, false, false},
	    {PNG_COLOR_TYPE_RGB, 16, false, false},
	    {PNG_COLOR_TYPE_RGB_ALPHA, 8, false, false},
	    {PNG_COLOR_TYPE_RGB_ALPHA, 16, false, false},
	    {PNG_COLOR_TYPE_GRAY, 1, false, false},
	    {PNG_COLOR_TYPE_GRAY, 2, false, false},
	    {PNG_COLOR_TYPE_GRAY, 4, false, false},
	    {PNG_COLOR_TYPE_GRAY, 8, false, true},
	    {PNG_COLOR_TYPE_GRAY, 16, false, false},
	    {PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, false},
	    {PNG_COLOR_TYPE_GRAY_ALPHA, 16, false, false},
	    {PNG_COLOR_TYPE_PALETTE, 8, false, false},
	    {PNG_COLOR_TYPE_PALETTE, 8, false, true},
	    {PNG_COLOR_TYPE_RGB, 8, true, false},
	    {PNG_COLOR_TYPE_PALETTE, 8, true, true},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len;
		uint8_t *p = make_png(50, 30, cases[i].ctype, cases[i].depth, cases[i].interlace,
				      cases[i].trns, &len);
		struct prep__image img;
		char what[64];

		snprintf(what, sizeof(what), "PNG type %d depth %d%s%s", cases[i].ctype,
			 cases[i].depth, cases[i].interlace ? " interlaced" : "",
			 cases[i].trns ? " tRNS" : "");
		ck_assert_msg(prep__decode_full(p, len, &img) == 0, "%s: decode failed", what);
		ck_assert_uint_eq(img.w, 50);
		ck_assert_uint_eq(img.h, 30);
		for (unsigned y = 0; y < 30; y += 7) {
			for (unsigned x = 0; x < 50; x += 3) {
				struct color c = quad_pixel(x, y, 50, 30), want;
				if (cases[i].ctype == PNG_COLOR_TYPE_PALETTE)
					want = c;
				else
					want = png_expect(cases[i].ctype, cases[i].depth, c);
				assert_color_near(img.rgb + ((size_t)y * 50 + x) * 3, want, 0,
						  what);
			}
		}
		free(img.rgb);
		free(p);
	}
}
END_TEST

/* ---- ROI + DCT scaling against full decoding ---- */

struct fixed_geom {
	struct prep__geom g;
};

static int plan_fixed(void *arg, unsigned W, unsigned H, struct prep__geom *g)
{
	*g = ((struct fixed_geom *)arg)->g;
	return 0;
}

/* Reference: full decode, then the resampler over the whole image. */
static uint8_t *reference_render(const struct prep__image *img, const struct prep__geom *g)
{
	struct prep__coeffs cx, cy;
	uint8_t *out = malloc((size_t)g->ow * g->oh * 3);

	ck_assert_int_eq(prep__coeffs_make(g->box_x0, g->box_x1, g->clip_x0, g->clip_x1, g->vw,
					   g->ox, g->ow, &cx),
			 0);
	ck_assert_int_eq(prep__coeffs_make(g->box_y0, g->box_y1, g->clip_y0, g->clip_y1, g->vh,
					   g->oy, g->oh, &cy),
			 0);
	ck_assert_int_eq(prep__resample(img->rgb, (size_t)img->w * 3, 0, 0, &cx, &cy, g->flip, out,
					(size_t)g->ow * 3),
			 0);
	prep__coeffs_free(&cx);
	prep__coeffs_free(&cy);
	return out;
}

static void roi_case(const uint8_t *jpg, size_t len, const struct prep__image *full,
		     const struct prep__geom *g, const char *what)
{
	struct fixed_geom fg = {*g};
	uint8_t *ref = reference_render(full, g), *ppm;
	size_t plen;
	unsigned w, h;
	const uint8_t *px;

	/* full resolution, region only: the same pixels as the full decode */
	ck_assert_int_eq(prep__render_geom(jpg, len, plan_fixed, &fg, 8, &ppm, &plen), 0);
	parse_ppm(ppm, plen, &w, &h, &px);
	ck_assert_uint_eq(w, g->ow);
	ck_assert_uint_eq(h, g->oh);
	double p8 = psnr(px, ref, (size_t)w * h * 3);
	ck_assert_msg(isinf(p8), "%s: ROI decode at 8/8 vs full decode not identical: PSNR %.1f",
		      what, p8);
	free(ppm);
	/* automatic DCT scale */
	ck_assert_int_eq(prep__render_geom(jpg, len, plan_fixed, &fg, 0, &ppm, &plen), 0);
	parse_ppm(ppm, plen, &w, &h, &px);
	double pa = psnr(px, ref, (size_t)w * h * 3);
	ck_assert_msg(pa >= 32.0, "%s: scaled ROI decode (M=%u) vs full decode: PSNR %.1f", what,
		      prep__pick_scale(g), pa);
	free(ppm);
	free(ref);
}

/* Every kind of JPEG the decoder handles, at q90. */
static const struct jopts jpeg_kinds[] = {
    {.kind = J_RGB, .hsamp = 2, .quality = 90},
    {.kind = J_RGB, .hsamp = 1, .quality = 90},
    {.kind = J_RGB, .hsamp = 2, .progressive = true, .quality = 90},
    {.kind = J_GRAY, .restart = 3, .quality = 90},
    {.kind = J_CMYK, .quality = 90},
    {.kind = J_YCCK, .hsamp = 2, .quality = 90},
};
#define NKINDS (sizeof(jpeg_kinds) / sizeof(jpeg_kinds[0]))

START_TEST(roi_and_scale_match_full_decode)
{
	const struct jopts *opts = jpeg_kinds;
	unsigned W = 613, H = 427;

	for (size_t i = 0; i < NKINDS; i++) {
		size_t len;
		uint8_t *jpg = make_jpeg(W, H, photo_pixel, &opts[i], &len);
		struct prep__image full;
		struct prep_recipe r;
		struct prep__geom g;
		char what[64];

		ck_assert_int_eq(prep__decode_full(jpg, len, &full), 0);
		for (uint32_t v = 0; v < 6; v++) {
			prep_recipe_parse(v < 3 ? "rrc224" : "rrc64", &r);
			ck_assert_int_eq(prep__plan(&r, W, H, 99, 1234, v, &g), 0);
			snprintf(what, sizeof(what), "jpeg %zu rrc v%u", i, v);
			roi_case(jpg, len, &full, &g, what);
		}
		prep_recipe_parse("center224", &r);
		ck_assert_int_eq(prep__plan(&r, W, H, 0, 0, 0, &g), 0);
		roi_case(jpg, len, &full, &g, "center224");
		prep_recipe_parse("resize100", &r);
		ck_assert_int_eq(prep__plan(&r, W, H, 0, 0, 0, &g), 0);
		roi_case(jpg, len, &full, &g, "resize100");
		/* a small crop far from the origin: exercises crop_scanline + skip */
		g = (struct prep__geom){.box_x0 = 301,
					.box_y0 = 203,
					.box_x1 = 389,
					.box_y1 = 260,
					.clip_x0 = 301,
					.clip_y0 = 203,
					.clip_x1 = 389,
					.clip_y1 = 260,
					.vw = 30,
					.vh = 20,
					.ow = 30,
					.oh = 20,
					.flip = true};
		roi_case(jpg, len, &full, &g, "small crop");
		free(full.rgb);
		free(jpg);
	}
}
END_TEST

/* The resampler against values computed by hand for a 2x downscale. */
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
 * and origins; source buffers end PREP__PAD bytes after the last pixel, so
 * an over-read shows under ASan and valgrind.
 */
START_TEST(resampler_levels_identical)
{
	uint64_t rng = 0x5eed;
	int best = prep__simd_set(-1);
	unsigned ran[3] = {0, 0, 0};

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
		free(src);
		free(ref);
		free(got);
		prep__coeffs_free(&cx);
		prep__coeffs_free(&cy);
#undef RND
	}
	for (int level = PREP__SIMD_SSE41; level <= best; level++)
		ck_assert_uint_gt(ran[level], 300);
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

/* ---- RandomResizedCrop parameters ---- */

START_TEST(rrc_params_distribution)
{
	const unsigned W = 500, H = 375, N = 20000;
	double sum_scale = 0, sum_logr = 0, min_scale = 2, max_scale = 0;
	double min_r = 10, max_r = 0;
	unsigned flips = 0;

	for (unsigned i = 0; i < N; i++) {
		struct prep__rng g;
		struct prep__rrc c;

		prep__rng_init(&g, 7, i, 3);
		prep__rrc_params(&g, W, H, &c);
		ck_assert(c.w > 0 && c.h > 0 && c.left + c.w <= W && c.top + c.h <= H);
		double scale = (double)c.w * c.h / (W * H), ratio = (double)c.w / c.h;
		sum_scale += scale;
		sum_logr += log(ratio);
		min_scale = fmin(min_scale, scale);
		max_scale = fmax(max_scale, scale);
		min_r = fmin(min_r, ratio);
		max_r = fmax(max_r, ratio);
		flips += prep__rng_uniform(&g, 0, 1) < 0.5;
	}
	/* rounding w and h to integers widens the ranges slightly */
	ck_assert_msg(min_scale >= 0.075 && max_scale <= 1.0, "scale range %f..%f", min_scale,
		      max_scale);
	ck_assert_msg(min_r >= 0.74 && max_r <= 1.35, "ratio range %f..%f", min_r, max_r);
	/* Mean scale: uniform(0.08,1) conditioned on fitting (some large crops
	 * are rejected for a 4:3 image); torchvision gives 0.435 for 500x375. */
	ck_assert_msg(fabs(sum_scale / N - 0.435) < 0.015, "mean scale %f", sum_scale / N);
	ck_assert_msg(fabs(sum_logr / N - 0.031) < 0.015, "mean log ratio %f", sum_logr / N);
	ck_assert_msg(flips > N * 0.47 && flips < N * 0.53, "flips %u of %u", flips, N);
}
END_TEST

START_TEST(rrc_fallback)
{
	struct prep__rng g;
	struct prep__rrc c;

	/* 1000x10: no crop of >= 8% area has an aspect ratio <= 4/3 */
	prep__rng_init(&g, 1, 2, 3);
	prep__rrc_params(&g, 1000, 10, &c);
	ck_assert(c.fallback);
	ck_assert_uint_eq(c.h, 10);
	ck_assert_uint_eq(c.w, 13); /* round(10 * 4/3) */
	ck_assert_uint_eq(c.top, 0);
	ck_assert_uint_eq(c.left, (1000 - 13) / 2);
	prep__rrc_params(&g, 10, 1000, &c);
	ck_assert(c.fallback);
	ck_assert_uint_eq(c.w, 10);
	ck_assert_uint_eq(c.h, 13); /* round(10 / (3/4)) */
	prep__rrc_params(&g, 1, 1, &c);
	ck_assert_uint_eq(c.w, 1);
	ck_assert_uint_eq(c.h, 1);
}
END_TEST

/* ---- determinism ---- */

START_TEST(render_is_deterministic)
{
	struct jopts o = {.kind = J_RGB, .hsamp = 2, .quality = 90};
	size_t len, l1, l2, l3, l4;
	uint8_t *jpg = make_jpeg(320, 240, photo_pixel, &o, &len), *a, *b, *c, *d;
	struct prep_recipe r;
	uint64_t want;

	prep_recipe_parse("rrc112", &r);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 2, &a, &l1), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 2, &b, &l2), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 3, &c, &l3), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 6, 77, 2, &d, &l4), 0);
	ck_assert_int_eq(prep_output_size(&r, 320, 240, &want), 0);
	ck_assert_uint_eq(l1, want);
	ck_assert(l1 == l2 && memcmp(a, b, l1) == 0);
	ck_assert(l1 == l3 && memcmp(a, c, l1) != 0);
	ck_assert(l1 == l4 && memcmp(a, d, l1) != 0);
	free(a);
	free(b);
	free(c);
	free(d);
	/* deterministic recipes ignore the version */
	prep_recipe_parse("resize200", &r);
	ck_assert_int_eq(prep_render(&r, jpg, len, 5, 77, 0, &a, &l1), 0);
	ck_assert_int_eq(prep_render(&r, jpg, len, 9, 78, 9, &b, &l2), 0);
	ck_assert_int_eq(prep_output_size(&r, 320, 240, &want), 0);
	ck_assert_uint_eq(l1, want);
	ck_assert(l1 == l2 && memcmp(a, b, l1) == 0);
	free(a);
	free(b);
	free(jpg);
}
END_TEST

/* The rows below the crop are skipped only when the data ends in EOI: a
 * file whose EOI is replaced (same length) fails for every crop, trailing
 * bytes after EOI change nothing, whether the EOI is in the last 64 bytes
 * (rows below the crop skipped) or not (decoded to the end). */
START_TEST(eoi_decides_the_tail)
{
	struct jopts o = {.kind = J_RGB, .hsamp = 2, .quality = 90};
	size_t jl;
	uint8_t *jpg = make_jpeg(200, 150, photo_pixel, &o, &jl);
	struct prep_recipe rrc;
	uint8_t *a, *b;
	size_t al, bl;

	ck_assert(jl > 2 && jpg[jl - 2] == 0xff && jpg[jl - 1] == 0xd9);
	prep_recipe_parse("rrc32", &rrc);
	uint8_t *tail = calloc(1, jl + 200);
	ck_assert_ptr_nonnull(tail);
	memcpy(tail, jpg, jl);
	for (uint32_t v = 0; v < 8; v++) {
		ck_assert_int_eq(prep_render(&rrc, jpg, jl, 1, 2, v, &a, &al), 0);
		size_t extra[] = {10, 62, 63, 200};
		for (unsigned k = 0; k < 4; k++) {
			ck_assert_int_eq(prep_render(&rrc, tail, jl + extra[k], 1, 2, v, &b, &bl), 0);
			ck_assert(al == bl && memcmp(a, b, al) == 0);
			free(b);
		}
		free(a);
	}
	memcpy(tail, jpg, jl);
	tail[jl - 2] = tail[jl - 1] = 0;
	for (uint32_t v = 0; v < 8; v++)
		ck_assert_int_eq(prep_render(&rrc, tail, jl, 1, 2, v, &a, &al), -EIO);
	free(tail);
	free(jpg);
}
END_TEST

/* ---- bad input ---- */

START_TEST(truncated_and_corrupt_fail)
{
	struct jopts o = {.kind = J_RGB, .hsamp = 2, .quality = 90};
	struct jopts op = {.kind = J_RGB, .progressive = true};
	size_t jl, pl, ppl;
	uint8_t *jpg = make_jpeg(200, 150, photo_pixel, &o, &jl);
	uint8_t *pjpg = make_jpeg(200, 150, photo_pixel, &op, &ppl);
	uint8_t *png = make_png(60, 40, PNG_COLOR_TYPE_RGB, 8, false, false, &pl);
	struct prep_recipe rrc, center;
	uint8_t *out;
	size_t olen;

	prep_recipe_parse("rrc32", &rrc);
	prep_recipe_parse("center32", &center);
	for (size_t cut = 0; cut < jl; cut += cut < 700 ? 37 : 501) {
		for (uint32_t v = 0; v < 3; v++) {
			int rc = prep_render(&rrc, jpg, cut, 1, 2, v, &out, &olen);
			ck_assert_msg(rc == -EIO || rc == -EINVAL, "jpeg cut at %zu/%zu: %d", cut,
				      jl, rc);
		}
	}
	ck_assert_int_eq(prep_render(&center, jpg, jl - 2, 1, 2, 0, &out, &olen), -EIO);
	for (size_t cut = 0; cut < ppl; cut += 211)
		ck_assert_int_lt(prep_render(&center, pjpg, cut, 1, 2, 0, &out, &olen), 0);
	for (size_t cut = 0; cut < pl; cut += 97)
		ck_assert_int_lt(prep_render(&center, png, cut, 1, 2, 0, &out, &olen), 0);
	/* flipped bits in the entropy-coded data */
	uint8_t *bad = malloc(jl);
	int failures = 0;
	for (int k = 0; k < 20; k++) {
		memcpy(bad, jpg, jl);
		for (int b = 0; b < 8; b++)
			bad[jl / 2 + (size_t)k * 13 + b * 7] ^= 0x5a;
		int rc = prep_render(&center, bad, jl, 1, 2, 0, &out, &olen);
		if (rc == 0)
			free(out);
		else
			failures++;
		ck_assert(rc == 0 || rc == -EIO);
	}
	ck_assert_int_gt(failures, 0);
	/* not an image */
	ck_assert_int_eq(prep_render(&center, "just some text\n", 15, 1, 2, 0, &out, &olen),
			 -EINVAL);
	ck_assert_int_eq(prep_render(&center, "", 0, 1, 2, 0, &out, &olen), -EINVAL);
	free(bad);
	free(jpg);
	free(pjpg);
	free(png);
}
END_TEST

START_TEST(corpus_replay)
{
	DIR *d = opendir(CORPUS_DIR);
	struct dirent *e;
	unsigned files = 0, bad_files = 0;
	struct prep_recipe recipes[3];

	ck_assert_msg(d != NULL, "cannot open %s (tests run from tests/unit)", CORPUS_DIR);
	prep_recipe_parse("rrc64", &recipes[0]);
	prep_recipe_parse("center32", &recipes[1]);
	prep_recipe_parse("resize48", &recipes[2]);
	while ((e = readdir(d))) {
		char path[512];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, e->d_name);
		FILE *f = fopen(path, "rb");
		ck_assert_ptr_nonnull(f);
		uint8_t *buf = malloc(1 << 20);
		size_t n = fread(buf, 1, 1 << 20, f);
		fclose(f);
		files++;
		/* ok_*: must decode; bad_*: must fail; any_* (fuzzer finds):
		 * either, without crashing */
		bool expect_bad = strncmp(e->d_name, "bad_", 4) == 0;
		bool expect_ok = strncmp(e->d_name, "ok_", 3) == 0;
		bad_files += expect_bad;
		for (int i = 0; i < 3; i++) {
			uint8_t *out = NULL;
			size_t olen = 0;
			unsigned w, h;
			int rc = prep_render(&recipes[i], n ? buf : (uint8_t *)"", n, 3, 4, 5, &out,
					     &olen);
			if (expect_bad)
				ck_assert_msg(rc < 0, "%s with recipe %d decoded", e->d_name, i);
			else if (expect_ok)
				ck_assert_msg(rc == 0, "%s with recipe %d: %d", e->d_name, i, rc);
			else
				ck_assert_msg(rc == 0 || rc == -EIO || rc == -EINVAL ||
						  rc == -EFBIG,
					      "%s with recipe %d: unexpected %d", e->d_name, i, rc);
			if (rc == 0) {
				const uint8_t *px;
				parse_ppm(out, olen, &w, &h, &px);
				free(out);
			}
			prep_probe(buf, n, &w, &h); /* must not crash */
		}
		free(buf);
	}
	closedir(d);
	ck_assert_uint_ge(files, 8);
	ck_assert_uint_ge(bad_files, 5);
}
END_TEST

/* ---- the staging engine ---- */

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

static int src_read(void *arg, uint32_t i, uint8_t **data, size_t *len)
{
	struct src *s = arg;

	atomic_fetch_add(&s->reads, 1);
	unsigned now = atomic_fetch_add(&s->inflight, 1) + 1;
	for (unsigned m = atomic_load(&s->max_inflight);
	     now > m && !atomic_compare_exchange_weak(&s->max_inflight, &m, now);)
		;
	for (int t = 0; s->wait_openers && t < 2000 && atomic_load(s->openers) < s->wait_openers; t++)
		usleep(10000);
	if (s->delay_ms)
		usleep(s->delay_ms * 1000);
	atomic_fetch_sub(&s->inflight, 1);
	if (i >= 16 || !s->data[i])
		return -ENOENT;
	*data = malloc(s->len[i] ? s->len[i] : 1);
	if (!*data)
		return -ENOMEM;
	memcpy(*data, s->data[i], s->len[i]);
	*len = s->len[i];
	return 0;
}

static void src_fill(struct src *s, unsigned n)
{
	memset(s, 0, sizeof(*s));
	for (unsigned i = 0; i < n; i++) {
		struct jopts o = {.kind = J_RGB, .hsamp = 2, .quality = 85};
		s->data[i] = make_jpeg(120 + 8 * i, 90 + 4 * i, photo_pixel, &o, &s->len[i]);
	}
}

static void src_free(struct src *s)
{
	for (unsigned i = 0; i < 16; i++)
		free(s->data[i]);
}

static const struct prep_source_ops src_ops = {.read_file = src_read};

struct opener {
	_Atomic unsigned *started;
	struct prep_view *v;
	const char *job;
	struct prep_recipe r;
	struct prep_sample *s;
	int rc;
	uint32_t file;
};

static void *open_thread(void *arg)
{
	struct opener *o = arg;

	if (o->started)
		atomic_fetch_add(o->started, 1);
	o->rc = prep_view_open_job(o->v, 0, o->job, o->file, 1000 + o->file, &o->r, &o->s);
	return NULL;
}

START_TEST(view_single_flight)
{
	struct src s;
	struct prep_config cfg = {.seed = 11, .mem_budget = 64 << 20, .threads = 2, .nfiles = 4};
	enum { N = 8 };
	static const char *jobs[N] = {"a", "b", "c", "d", "e", "f", "g", "h"};
	struct opener o[N];
	pthread_t t[N];
	struct prep_stats st;

	_Atomic unsigned started = 0;

	src_fill(&s, 1);
	s.delay_ms = 300; /* after the last opener started: time to register */
	s.wait_openers = N;
	s.openers = &started;
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int i = 0; i < N; i++) {
		o[i] = (struct opener){.started = &started, .v = v, .job = jobs[i]};
		prep_recipe_parse("rrc64", &o[i].r);
		pthread_create(&t[i], NULL, open_thread, &o[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 1);
	ck_assert_uint_eq(st.shared, N - 1);
	ck_assert_uint_eq(atomic_load(&s.reads), 1);
	uint8_t *ref;
	size_t rlen, len;
	ck_assert_int_eq(prep_render(&o[0].r, s.data[0], s.len[0], 11, 1000, 0, &ref, &rlen), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(o[i].rc, 0);
		const uint8_t *p = prep_sample_data(o[i].s, &len);
		ck_assert(len == rlen && memcmp(p, ref, len) == 0);
	}
	/* every active job has read version 0: nothing left staged */
	ck_assert_uint_eq(st.staged_bytes, 0);
	for (int i = 0; i < N; i++)
		prep_sample_put(v, o[i].s);
	free(ref);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Openers decode on their own thread or hand off to the pool, but never
 * more than cfg.threads decodes run at once, and every sample is made. */
START_TEST(view_decode_bound)
{
	struct src s;
	enum { N = 6 };
	struct prep_config cfg = {.seed = 5, .mem_budget = 64 << 20, .threads = 2, .nfiles = N};
	struct opener o[N];
	pthread_t t[N];
	struct prep_stats st;
	_Atomic unsigned started = 0;

	src_fill(&s, N);
	s.delay_ms = 100;
	s.wait_openers = N;
	s.openers = &started;
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int i = 0; i < N; i++) {
		o[i] = (struct opener){.started = &started, .v = v, .job = "a", .file = i};
		prep_recipe_parse("rrc32", &o[i].r);
		pthread_create(&t[i], NULL, open_thread, &o[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, N);
	ck_assert_uint_eq(st.shared, 0);
	ck_assert_uint_eq(atomic_load(&s.reads), N);
	ck_assert_uint_ge(atomic_load(&s.max_inflight), 1);
	ck_assert_uint_le(atomic_load(&s.max_inflight), cfg.threads);
	for (int i = 0; i < N; i++) {
		uint8_t *ref;
		size_t rlen, len;

		ck_assert_int_eq(o[i].rc, 0);
		ck_assert_int_eq(prep_render(&o[i].r, s.data[i], s.len[i], 5, 1000 + i, 0, &ref,
					     &rlen),
				 0);
		const uint8_t *p = prep_sample_data(o[i].s, &len);
		ck_assert(len == rlen && memcmp(p, ref, len) == 0);
		free(ref);
		prep_sample_put(v, o[i].s);
	}
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

START_TEST(view_versions_and_release)
{
	struct src s;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 2, .nfiles = 4};
	struct prep_recipe r;
	struct prep_sample *a0, *a1, *b0, *b1;
	struct prep_stats st;
	uint32_t ver;

	src_fill(&s, 2);
	prep_recipe_parse("rrc48", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	/* job B exists and is active but has not read file 0 yet */
	ck_assert_int_eq(prep_view_next_version(v, 0, "B", 1, &ver), 0);
	ck_assert_uint_eq(ver, 0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 42, &r, &a0), 0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 42, &r, &a1), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 2);
	size_t l0, l1;
	const uint8_t *p0 = prep_sample_data(a0, &l0), *p1 = prep_sample_data(a1, &l1);
	ck_assert(l0 == l1 && memcmp(p0, p1, l0) != 0); /* versions 0 and 1 differ */
	/* both kept for B */
	ck_assert_uint_eq(st.staged_bytes, l0 + l1);
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 42, &r, &b0), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 2);
	ck_assert_uint_eq(st.shared, 1);
	ck_assert_uint_eq(st.staged_bytes, l1); /* version 0: every active job read it */
	ck_assert_ptr_eq(prep_sample_data(b0, NULL), p0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 42, &r, &b1), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 2);
	ck_assert_uint_eq(st.shared, 2);
	ck_assert_uint_eq(st.staged_bytes, 0);
	prep_sample_put(v, a0);
	prep_sample_put(v, a1);
	prep_sample_put(v, b0);
	prep_sample_put(v, b1);
	/* the k-th call gives version k */
	for (uint32_t k = 0; k < 5; k++) {
		ck_assert_int_eq(prep_view_next_version(v, 0, "C", 3, &ver), 0);
		ck_assert_uint_eq(ver, k);
	}
	ck_assert_int_eq(prep_view_next_version(v, 0, "C", 4, &ver), -EINVAL);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

START_TEST(view_budget_and_redecode)
{
	struct src s;
	struct prep_recipe r;
	uint64_t one;
	struct prep_stats st;

	src_fill(&s, 12);
	prep_recipe_parse("rrc32", &r);
	prep_output_size(&r, 1, 1, &one);
	struct prep_config cfg = {
	    .seed = 3, .mem_budget = 3 * one + one / 2, .threads = 2, .nfiles = 13};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	uint32_t ver;
	ck_assert_int_eq(prep_view_next_version(v, 0, "B", 12, &ver), 0); /* B active */
	uint8_t *first = NULL;
	size_t first_len = 0;
	for (uint32_t f = 0; f < 12; f++) {
		struct prep_sample *x;
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", f, 500 + f, &r, &x), 0);
		if (f == 0) {
			const uint8_t *p = prep_sample_data(x, &first_len);
			first = malloc(first_len);
			memcpy(first, p, first_len);
		}
		prep_sample_put(v, x);
		prep_view_stats(v, &st);
		ck_assert_msg(st.staged_bytes <= cfg.mem_budget, "staged %llu > budget %llu",
			      (unsigned long long)st.staged_bytes,
			      (unsigned long long)cfg.mem_budget);
	}
	ck_assert_uint_eq(st.staged_bytes, 3 * one);
	ck_assert_uint_eq(st.decodes, 12);
	/* file 0 was dropped (oldest first): B decodes it again, bit-identical */
	struct prep_sample *x;
	size_t len;
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 500, &r, &x), 0);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 13);
	const uint8_t *p = prep_sample_data(x, &len);
	ck_assert(len == first_len && memcmp(p, first, len) == 0);
	prep_sample_put(v, x);
	/* the newest (file 11) is still staged: shared */
	ck_assert_int_eq(prep_view_open_job(v, 0, "B", 11, 511, &r, &x), 0);
	prep_sample_put(v, x);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 13);
	free(first);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Jobs are keyed by (uid, name): the same COORDFS_JOB under two uids is
 * two jobs with their own versions. */
START_TEST(view_jobs_per_uid)
{
	struct src s;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 4};
	uint32_t ver;

	src_fill(&s, 2);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (uint32_t k = 0; k < 3; k++) {
		ck_assert_int_eq(prep_view_next_version(v, 1000, "J", 0, &ver), 0);
		ck_assert_uint_eq(ver, k);
	}
	ck_assert_int_eq(prep_view_next_version(v, 1001, "J", 0, &ver), 0);
	ck_assert_uint_eq(ver, 0);
	ck_assert_int_eq(prep_view_next_version(v, 1000, "J", 0, &ver), 0);
	ck_assert_uint_eq(ver, 3);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* A full table never hands out the slot of a job with an open file or a
 * recent request; a uid over its quarter reuses its own slots only. */
START_TEST(view_job_table_full)
{
	struct src s;
	struct prep_recipe r;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 4,
				  .job_idle_s = 1.0, .max_jobs = 8};
	struct prep_stats st;
	struct prep_sample *held, *x;
	uint32_t ver;
	char name[16];

	src_fill(&s, 2);
	prep_recipe_parse("rrc32", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(prep_view_open_job(v, 7, "keep", 0, 1, &r, &held), 0); /* version 0 */
	usleep(1200 * 1000); /* "keep" is idle, but holds an open file */
	/* uid 7 may hold 2 of 8 slots: "keep" and one more, reused while idle */
	ck_assert_int_eq(prep_view_next_version(v, 7, "b", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 7, "c", 0, &ver), -EAGAIN); /* b is active */
	usleep(1200 * 1000);
	ck_assert_int_eq(prep_view_next_version(v, 7, "c", 0, &ver), 0); /* takes b's slot */
	ck_assert_uint_eq(ver, 0);
	/* other uids fill the rest, active */
	for (unsigned u = 0; u < 6; u++) {
		snprintf(name, sizeof(name), "u%u", u);
		ck_assert_int_eq(prep_view_next_version(v, 100 + u, name, 0, &ver), 0);
	}
	ck_assert_int_eq(prep_view_next_version(v, 200, "new", 0, &ver), -EAGAIN);
	ck_assert_int_eq(prep_view_open_job(v, 200, "new", 0, 1, &r, &x), -EAGAIN);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.jobs, 8);
	ck_assert_uint_ge(st.refused, 1);
	usleep(1200 * 1000);
	/* now every job but "keep" is idle: a new one gets a slot, "keep" keeps its own */
	ck_assert_int_eq(prep_view_next_version(v, 200, "new", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 7, "keep", 0, &ver), 0);
	ck_assert_uint_eq(ver, 1);
	prep_sample_put(v, held);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Jobs that ended give their version counters back when memory is wanted:
 * 60 one-off jobs (each run without COORDFS_JOB is a new job) in a budget
 * that holds the counters of 3 (and one decode) never fail for memory; a
 * job with an open file or a recent request keeps its counters. */
START_TEST(view_idle_jobs_reclaimed)
{
	struct src s;
	struct prep_recipe r;
	struct budget b;
	struct prep_stats st;
	struct prep_sample *held;
	const uint32_t nfiles = 1u << 18; /* 512 KiB of counters a job */
	uint64_t one, work;
	uint32_t ver;
	char name[16];

	src_fill(&s, 2);
	prep_recipe_parse("rrc32", &r);
	prep_output_size(&r, 1, 1, &one);
	ck_assert_int_eq(prep_decode_mem(&r, s.data[0], s.len[0], &work), 0);
	/* the counters of 3 jobs, and one decode */
	ck_assert_uint_lt(one + s.len[0] + work + 64, 2 * nfiles);
	budget_init(&b, 3 * 2 * nfiles + one + s.len[0] + work + 64);
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = nfiles,
				  .mem = &b, .mem_wait_ms = 20, .job_idle_s = 0.02, .max_jobs = 1024};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	/* "keep" holds a sample open; "busy" stays active */
	ck_assert_int_eq(prep_view_open_job(v, 0, "keep", 0, 1, &r, &held), 0);
	for (unsigned i = 0; i < 60; i++) {
		snprintf(name, sizeof(name), "run%u", i);
		ck_assert_int_eq(prep_view_next_version(v, 0, name, 1, &ver), 0);
		ck_assert_uint_eq(ver, 0);
		usleep(25000); /* the run ends: inactive after job_idle_s */
	}
	ck_assert_uint_le(atomic_load(&b.peak), b.limit);
	prep_view_stats(v, &st);
	ck_assert_uint_ge(st.jobs_reclaimed, 58);
	ck_assert_uint_eq(st.refused, 0);
	/* "keep" held a file: its counters survived, its next open is version 1 */
	ck_assert_int_eq(prep_view_next_version(v, 0, "keep", 0, &ver), 0);
	ck_assert_uint_eq(ver, 1);
	prep_sample_put(v, held);
	/* an active job is never robbed: with two active holders the third fails */
	usleep(30000);
	ck_assert_int_eq(prep_view_next_version(v, 0, "a", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 0, "b", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 0, "c", 0, &ver), 0);
	ck_assert_int_eq(prep_view_next_version(v, 0, "d", 0, &ver), -ENOMEM);
	ck_assert_int_eq(prep_view_next_version(v, 0, "a", 0, &ver), 0);
	ck_assert_uint_eq(ver, 1);
	prep_view_destroy(v);
	ck_assert_uint_eq(budget_used(&b), 0);
	budget_fini(&b);
	src_free(&s);
}
END_TEST

/* With a byte budget: samples and decodes are charged, a full budget
 * refuses opens with -ENOMEM without consuming the version, and everything
 * is given back at the end. */
START_TEST(view_mem_budget)
{
	struct src s;
	struct prep_recipe r;
	struct budget b;
	uint64_t one, work;
	struct prep_stats st;
	struct prep_sample *x[4], *y;

	src_fill(&s, 2);
	prep_recipe_parse("rrc64", &r);
	prep_output_size(&r, 1, 1, &one);
	ck_assert_int_eq(prep_decode_mem(&r, s.data[0], s.len[0], &work), 0);
	ck_assert_uint_gt(work, one);
	/* three pinned samples, and one decode (source + work) at a time */
	budget_init(&b, 3 * one + s.len[0] + work + 64);
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 2,
				  .mem = &b, .mem_wait_ms = 20};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 9, &r, &x[i]), 0);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 9, &r, &x[3]), -ENOMEM);
	ck_assert_uint_le(atomic_load(&b.peak), b.limit);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.refused, 1);
	ck_assert_uint_eq(st.errors, 0);
	/* room again: the next open is version 3 (the refused one took none),
	 * identical to another job's fourth open */
	prep_sample_put(v, x[0]);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 9, &r, &x[0]), 0);
	size_t la, lb;
	const uint8_t *pa = prep_sample_data(x[0], &la);
	uint8_t *copy = malloc(la);
	memcpy(copy, pa, la);
	for (unsigned i = 0; i < 3; i++)
		prep_sample_put(v, x[i]);
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(prep_view_open_job(v, 0, "B", 0, 9, &r, &y), 0);
		const uint8_t *pb = prep_sample_data(y, &lb);
		if (i == 3)
			ck_assert(lb == la && memcmp(pb, copy, la) == 0);
		else
			ck_assert(lb != la || memcmp(pb, copy, la) != 0);
		prep_sample_put(v, y);
	}
	free(copy);
	prep_view_destroy(v);
	ck_assert_uint_eq(budget_used(&b), 0);
	budget_fini(&b);
	src_free(&s);
}
END_TEST

START_TEST(view_deterministic_cached)
{
	struct src s;
	struct prep_recipe r;
	struct prep_stats st;
	struct prep_config cfg = {.seed = 3, .mem_budget = 64 << 20, .threads = 1, .nfiles = 3};

	src_fill(&s, 2);
	prep_recipe_parse("center32", &r);
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int round = 0; round < 3; round++) {
		for (int j = 0; j < 2; j++) {
			struct prep_sample *x;
			ck_assert_int_eq(prep_view_open_job(v, 0, j ? "B" : "A", 1, 9, &r, &x), 0);
			prep_sample_put(v, x);
		}
	}
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.decodes, 1);
	ck_assert_uint_eq(st.shared, 5);
	ck_assert_uint_eq(st.staged_bytes, prep_ppm_size(32, 32));
	/* resize: size for stat from the header */
	uint64_t bytes, want;
	struct prep_recipe rs;
	prep_recipe_parse("resize64", &rs);
	ck_assert_int_eq(prep_view_size(v, 1, &rs, &bytes), 0);
	ck_assert_int_eq(prep_output_size(&rs, 128, 94, &want), 0);
	ck_assert_uint_eq(bytes, want);
	ck_assert_int_eq(prep_view_size(v, 1, &rs, &bytes), 0); /* cached dims */
	ck_assert_uint_eq(bytes, want);
	ck_assert_int_eq(prep_view_size(v, 2, &rs, &bytes), -ENOENT);
	ck_assert_int_eq(prep_view_size(v, 1, &r, &bytes), 0);
	ck_assert_uint_eq(bytes, prep_ppm_size(32, 32));
	/* a file that does not decode: error, counted, not cached */
	s.len[0] = 100;
	struct prep_sample *x = NULL;
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 1, &r, &x), -EIO);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 0, 1, &r, &x), -EIO);
	ck_assert_int_eq(prep_view_open_job(v, 0, "A", 2, 1, &r, &x), -ENOENT);
	ck_assert_ptr_null(x);
	prep_view_stats(v, &st);
	ck_assert_uint_eq(st.errors, 3);
	ck_assert_uint_eq(st.staged_bytes, prep_ppm_size(32, 32));
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* Several jobs, each with several reader threads, read every file once per
 * epoch in their own order, under a budget of a few samples: every sample
 * must be exactly version (epoch) of its file, whoever decoded it. */
struct stress_job {
	struct prep_view *v;
	struct src *s;
	const char *name;
	unsigned nfiles, epochs, id;
	uint8_t *expect[12][3]; /* [file][version] */
	size_t expect_len[12][3];
	_Atomic unsigned next; /* work counter shared by the job's threads */
	_Atomic unsigned bad;
	pthread_barrier_t *epoch_barrier;
};

static void *stress_reader(void *arg)
{
	struct stress_job *j = arg;
	struct prep_recipe r;

	prep_recipe_parse("rrc32", &r);
	for (unsigned e = 0; e < j->epochs; e++) {
		for (;;) {
			unsigned i = atomic_fetch_add(&j->next, 1);
			if (i >= (e + 1) * j->nfiles) {
				atomic_fetch_sub(&j->next, 1);
				break;
			}
			/* a per-job, per-epoch permutation of the files */
			unsigned f = (unsigned)((i % j->nfiles) * 5 + j->id * 3 + e) % j->nfiles;
			struct prep_sample *x;
			size_t len;
			if (prep_view_open_job(j->v, 0, j->name, f, 900 + f, &r, &x) != 0) {
				atomic_fetch_add(&j->bad, 1);
				continue;
			}
			const uint8_t *p = prep_sample_data(x, &len);
			if (len != j->expect_len[f][e] || memcmp(p, j->expect[f][e], len) != 0)
				atomic_fetch_add(&j->bad, 1);
			prep_sample_put(j->v, x);
		}
		pthread_barrier_wait(j->epoch_barrier);
	}
	return NULL;
}

START_TEST(view_stress_versions)
{
	enum { JOBS = 3, THREADS = 3, FILES = 12, EPOCHS = 3 };
	static const char *names[JOBS] = {"j0", "j1", "j2"};
	struct src s;
	struct prep_recipe r;
	uint64_t one;
	struct stress_job jobs[JOBS];
	pthread_barrier_t barriers[JOBS];
	pthread_t t[JOBS][THREADS];
	struct prep_stats st;

	src_fill(&s, FILES);
	prep_recipe_parse("rrc32", &r);
	prep_output_size(&r, 1, 1, &one);
	struct prep_config cfg = {.seed = 77, .mem_budget = 4 * one, .threads = 2, .nfiles = FILES};
	struct prep_view *v = prep_view_create(&cfg, &src_ops, &s);
	ck_assert_ptr_nonnull(v);
	for (int j = 0; j < JOBS; j++) {
		memset(&jobs[j], 0, sizeof(jobs[j]));
		jobs[j] = (struct stress_job){.v = v,
					      .s = &s,
					      .name = names[j],
					      .nfiles = FILES,
					      .epochs = EPOCHS,
					      .id = (unsigned)j,
					      .epoch_barrier = &barriers[j]};
		pthread_barrier_init(&barriers[j], NULL, THREADS);
		for (unsigned f = 0; f < FILES; f++)
			for (unsigned e = 0; e < EPOCHS; e++) {
				if (j == 0)
					ck_assert_int_eq(prep_render(&r, s.data[f], s.len[f], 77,
								     900 + f, e,
								     &jobs[0].expect[f][e],
								     &jobs[0].expect_len[f][e]),
							 0);
				else {
					jobs[j].expect[f][e] = jobs[0].expect[f][e];
					jobs[j].expect_len[f][e] = jobs[0].expect_len[f][e];
				}
			}
	}
	for (int j = 0; j < JOBS; j++)
		for (int k = 0; k < THREADS; k++)
			pthread_create(&t[j][k], NULL, stress_reader, &jobs[j]);
	for (int j = 0; j < JOBS; j++)
		for (int k = 0; k < THREADS; k++)
			pthread_join(t[j][k], NULL);
	prep_view_stats(v, &st);
	for (int j = 0; j < JOBS; j++)
		ck_assert_msg(atomic_load(&jobs[j].bad) == 0, "job %d: %u wrong samples", j,
			      atomic_load(&jobs[j].bad));
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.decodes + st.shared, JOBS * FILES * EPOCHS);
	ck_assert_uint_ge(st.decodes, FILES * EPOCHS);
	ck_assert_uint_le(st.staged_bytes, cfg.mem_budget);
	for (unsigned f = 0; f < FILES; f++)
		for (unsigned e = 0; e < EPOCHS; e++)
			free(jobs[0].expect[f][e]);
	for (int j = 0; j < JOBS; j++)
		pthread_barrier_destroy(&barriers[j]);
	prep_view_destroy(v);
	src_free(&s);
}
END_TEST

/* ---- the decoded tier ---- */

/* Every kind of JPEG (and PNG): the whole frame decoded at the scale a
 * sample needs, then resampled, gives the bytes prep_render gives on the
 * file, for random and deterministic recipes and several versions. */
START_TEST(tier_pixels_match_file)
{
	const struct jopts *opts = jpeg_kinds;
	static const char *recipes[] = {"rrc224", "rrc64", "center224", "center32", "resize100"};
	enum { NJ = NKINDS };
	unsigned W = 613, H = 427, scales_seen = 0;
	/* 6 versions of each random recipe; 3 under valgrind, where this test
	 * was a third of the unit suite's time (both still reach every scale) */
	const uint32_t nver = RUNNING_ON_VALGRIND ? 3u : 6u;

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

/* ---- job identity ---- */

/* A forked child that waits on fd for the parent to finish with it; with
 * mark, it first installs the handlers PyTorch's DataLoader workers do. */
static pid_t fork_child(int fd, bool mark)
{
	pid_t child = fork();

	if (child == 0) {
		char c;
		if (mark) {
			struct sigaction sa = { .sa_handler = SIG_DFL };
			sigemptyset(&sa.sa_mask);
			sa.sa_handler = (void (*)(int))abort;
			sigaction(SIGBUS, &sa, NULL);
			sigaction(SIGFPE, &sa, NULL);
			sigaction(SIGSEGV, &sa, NULL);
			sigaction(SIGTERM, &sa, NULL);
			if (write(fd, "r", 1) < 0) /* ready */
				_exit(2);
		}
		ssize_t n = read(fd, &c, 1); /* wait until the parent is done */
		_exit(n < 0);
	}
	return child;
}

/* A child exec'd with envp, once the exec is visible in /proc: its job name. */
static pid_t exec_child(char **envp, const char *want, char *job, size_t joblen)
{
	pid_t child = fork();

	if (child == 0) {
		char *argv[] = {"sleep", "5", NULL};
		execve("/bin/sleep", argv, envp);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) { /* until the exec happened */
		if (prep_job_of_pid(child, job, joblen) == 0 && strcmp(job, want) == 0)
			break;
		usleep(10000);
	}
	return child;
}

START_TEST(job_identity)
{
	char me[PREP_JOB_NAME_MAX], child_job[PREP_JOB_NAME_MAX], prefix[64];
	int sv[2];
	char c;

	unsetenv("COORDFS_JOB");
	ck_assert_int_eq(prep_job_of_pid(getpid(), me, 3), -EINVAL);
	if (RUNNING_ON_VALGRIND) {
		/* valgrind catches every signal of the processes it runs, so
		 * each looks like a DataLoader worker: checked outside it */
		fprintf(stderr, "job_identity: the process-tree rule is not checked under valgrind\n");
		return;
	}
	ck_assert_int_eq(prep_job_of_pid(getpid(), me, sizeof(me)), 0);
	/* our own job: this process, whatever runs above us */
	snprintf(prefix, sizeof(prefix), "pid:%d:", (int)getpid());
	ck_assert_msg(strncmp(me, prefix, strlen(prefix)) == 0, "job %s", me);

	/* a forked child is a job of its own (a trial launched by a Python
	 * driver through multiprocessing)... */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid_t child = fork_child(sv[1], false);
	ck_assert_int_ge(child, 0);
	ck_assert_int_eq(prep_job_of_pid(child, child_job, sizeof(child_job)), 0);
	snprintf(prefix, sizeof(prefix), "pid:%d:", (int)child);
	ck_assert_msg(strncmp(child_job, prefix, strlen(prefix)) == 0, "child's job %s", child_job);
	ck_assert_int_eq(write(sv[0], "x", 1), 1);
	waitpid(child, NULL, 0);
	close(sv[0]);
	close(sv[1]);
	/* ...unless it carries a DataLoader worker's signal handlers: then it
	 * is in its parent's job. The parent is a "trainer" process with the
	 * default handlers (a sanitizer may have given this process some). */
	pid_t trainer = fork();
	ck_assert_int_ge(trainer, 0);
	if (trainer == 0) {
		char tj[PREP_JOB_NAME_MAX], wj[PREP_JOB_NAME_MAX];
		int ts[2], ok;
		const int sigs[] = { SIGBUS, SIGFPE, SIGSEGV, SIGTERM, SIGILL };

		for (unsigned i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, ts) != 0)
			_exit(3);
		pid_t worker = fork_child(ts[1], true);
		ok = worker > 0 && read(ts[0], &c, 1) == 1 &&
		     prep_job_of_pid(worker, wj, sizeof(wj)) == 0 &&
		     prep_job_of_pid(getpid(), tj, sizeof(tj)) == 0 && strcmp(wj, tj) == 0;
		if (!ok)
			fprintf(stderr, "job_identity: worker's job %s, trainer's %s\n", wj, tj);
		if (write(ts[0], "x", 1) != 1)
			ok = 0;
		waitpid(worker, NULL, 0);
		_exit(ok ? 0 : 1);
	}
	int tstatus = -1;
	waitpid(trainer, &tstatus, 0);
	ck_assert_msg(WIFEXITED(tstatus) && WEXITSTATUS(tstatus) == 0,
		      "a marked worker is not in its trainer's job");

	/* COORDFS_JOB wins, even in another executable */
	char *named[] = {"PATH=/usr/bin:/bin", "COORDFS_JOB=exp-42", "RANK=0", "WORLD_SIZE=2",
			 "MASTER_PORT=29500", NULL};
	child = exec_child(named, "exp-42", child_job, sizeof(child_job));
	ck_assert_str_eq(child_job, "exp-42");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	/* a gone process */
	ck_assert_int_eq(prep_job_of_pid(child, child_job, sizeof(child_job)), -ESRCH);
	/* a rank of a distributed run: its run's rendezvous address */
	char *rank[] = {"PATH=/usr/bin:/bin", "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT=29511", NULL};
	child = exec_child(rank, "ddp:127.0.0.1:29511", child_job, sizeof(child_job));
	ck_assert_str_eq(child_job, "ddp:127.0.0.1:29511");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	/* MASTER_PORT alone (no RANK/WORLD_SIZE) names nothing */
	char *port_only[] = {"PATH=/usr/bin:/bin", "MASTER_PORT=29511", NULL};
	child = exec_child(port_only, "", child_job, sizeof(child_job));
	snprintf(prefix, sizeof(prefix), "pid:%d:", (int)child);
	ck_assert_msg(strncmp(child_job, prefix, strlen(prefix)) == 0, "job %s", child_job);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prep");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, recipe_parsing);
	tcase_add_test(tc, output_sizes);
	tcase_add_test(tc, probe_headers);
	tcase_add_test(tc, decode_jpeg_flavours);
	tcase_add_test(tc, decode_png_flavours);
	tcase_add_test(tc, roi_and_scale_match_full_decode);
	tcase_add_test(tc, resampler_is_antialiased);
	tcase_add_test(tc, resampler_simd_matches_scalar);
	tcase_add_test(tc, resampler_levels_identical);
	tcase_add_test(tc, scratch_reused_and_bounded);
	tcase_add_test(tc, rrc_params_distribution);
	tcase_add_test(tc, rrc_fallback);
	tcase_add_test(tc, render_is_deterministic);
	tcase_add_test(tc, truncated_and_corrupt_fail);
	tcase_add_test(tc, eoi_decides_the_tail);
	tcase_add_test(tc, corpus_replay);
	tcase_add_test(tc, view_single_flight);
	tcase_add_test(tc, view_decode_bound);
	tcase_add_test(tc, view_versions_and_release);
	tcase_add_test(tc, view_budget_and_redecode);
	tcase_add_test(tc, view_deterministic_cached);
	tcase_add_test(tc, view_jobs_per_uid);
	tcase_add_test(tc, view_job_table_full);
	tcase_add_test(tc, view_mem_budget);
	tcase_add_test(tc, view_idle_jobs_reclaimed);
	tcase_add_test(tc, view_stress_versions);
	tcase_add_test(tc, tier_pixels_match_file);
	tcase_add_test(tc, view_decoded_tier);
	tcase_add_test(tc, view_decoded_share);
	tcase_add_test(tc, view_decoded_failed_not_admitted);
	tcase_add_test(tc, view_tier_huge_slots);
	tcase_add_test(tc, job_identity);
	suite_add_tcase(s, tc);
	return check_run(s);
}
