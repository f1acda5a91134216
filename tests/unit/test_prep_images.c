/* SPDX-License-Identifier: MIT */
/*
 * The images, checks and source the prep/ unit tests share
 * (test_prep_images.h).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "common/hash.h"
#include "prep/prep_int.h"
#include "tests/unit/test_prep_images.h"

/* ---- image generators ---- */

const struct color quad_colors[4] = {
    {200, 30, 40}, {20, 220, 90}, {30, 60, 200}, {128, 128, 128}};

struct color quad_pixel(unsigned x, unsigned y, unsigned w, unsigned h)
{
	return quad_colors[(y >= h / 2) * 2 + (x >= w / 2)];
}

struct color photo_pixel(unsigned x, unsigned y, unsigned w, unsigned h)
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


void cmyk_of(struct color c, uint8_t out[4])
{
	out[0] = c.r;
	out[1] = c.g;
	out[2] = c.b;
	out[3] = 180;
}

struct color pil_cmyk_rgb(const uint8_t in[4])
{
	uint8_t v[3];
	int nk = in[3];

	for (int c = 0; c < 3; c++) {
		int tmp = (255 - in[c]) * nk + 128;
		v[c] = (uint8_t)(nk - (((tmp >> 8) + tmp) >> 8));
	}
	return (struct color){v[0], v[1], v[2]};
}

uint8_t *make_jpeg(unsigned w, unsigned h, pixel_fn px, const struct jopts *o, size_t *len)
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
		ci.comp_info[0].v_samp_factor = o->vsamp ? o->vsamp : o->hsamp ? o->hsamp : 1;
		for (int c = 1; c < ci.num_components; c++)
			ci.comp_info[c].h_samp_factor = ci.comp_info[c].v_samp_factor = 1;
		if (o->kind == J_YCCK) {
			ci.comp_info[3].h_samp_factor = ci.comp_info[0].h_samp_factor;
			ci.comp_info[3].v_samp_factor = ci.comp_info[0].v_samp_factor;
		}
	}
	if (o->progressive)
		jpeg_simple_progression(&ci);
	ci.restart_interval = o->restart;
	ci.arith_code = o->arith;
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
struct color png_expect(int ctype, int depth, struct color c)
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

uint8_t *make_png(unsigned w, unsigned h, int ctype, int depth, bool interlace, bool trns,
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

void parse_ppm(const uint8_t *p, size_t len, unsigned *w, unsigned *h, const uint8_t **px)
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

double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
	double se = 0;

	for (size_t i = 0; i < n; i++)
		se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
	if (se == 0)
		return INFINITY;
	return 10 * log10(255.0 * 255.0 / (se / n));
}

void assert_color_near(const uint8_t *p, struct color c, int tol, const char *what)
{
	ck_assert_msg(abs(p[0] - c.r) <= tol && abs(p[1] - c.g) <= tol && abs(p[2] - c.b) <= tol,
		      "%s: got (%d,%d,%d), want (%d,%d,%d) +-%d", what, p[0], p[1], p[2], c.r, c.g,
		      c.b, tol);
}

const struct jopts jpeg_kinds[8] = {
    {.kind = J_RGB, .hsamp = 2, .quality = 90},
    {.kind = J_RGB, .hsamp = 1, .quality = 90},
    {.kind = J_RGB, .hsamp = 2, .progressive = true, .quality = 90},
    {.kind = J_GRAY, .restart = 3, .quality = 90},
    {.kind = J_CMYK, .quality = 90},
    {.kind = J_YCCK, .hsamp = 2, .quality = 90},
    /* 4:1:0 and its transpose: when DCT-scaled, libjpeg scales their chroma
     * IDCT up and still upsamples it, which jpeg_crop_scanline gets wrong */
    {.kind = J_RGB, .hsamp = 4, .vsamp = 2, .quality = 90},
    {.kind = J_RGB, .hsamp = 2, .vsamp = 4, .quality = 90},
};

int src_read(void *arg, uint32_t i, uint8_t **data, size_t *len)
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

void src_fill(struct src *s, unsigned n)
{
	memset(s, 0, sizeof(*s));
	for (unsigned i = 0; i < n; i++) {
		struct jopts o = {.kind = J_RGB, .hsamp = 2, .quality = 85};
		s->data[i] = make_jpeg(120 + 8 * i, 90 + 4 * i, photo_pixel, &o, &s->len[i]);
	}
}

void src_free(struct src *s)
{
	for (unsigned i = 0; i < 16; i++)
		free(s->data[i]);
}

const struct prep_source_ops src_ops = {.read_file = src_read};
