/* SPDX-License-Identifier: MIT */
/*
 * prep/codec*.c: header probes, decoding of every JPEG/PNG flavour to RGB,
 * the JPEG tail, the PNG tail, truncated and corrupt input, the TIFF working
 * memory, a GIF frame past its screen, and replay of the fuzz corpus (tests/fuzz/corpus_prep).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <png.h>
#include <tiffio.h>

#include "prep/prep_int.h"
#include "tests/unit/test_prep_images.h"

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

/* Arithmetic-coded JPEGs as PIL reads them: it feeds libjpeg 64 KiB reads
 * through a suspending source, which libjpeg's arithmetic decoder cannot
 * resume from, so PIL fails one whose entropy data runs past its first read
 * ("broken data stream") and loads a smaller one. Served, the larger file
 * gave a sample where PIL + torchvision raise. Huffman coding resumes. */
START_TEST(arith_jpeg_as_pil)
{
	struct prep_recipe center;
	uint8_t *out, *ref;
	size_t l, olen, rlen;

	prep_recipe_parse("center64", &center);
	for (int prog = 0; prog < 2; prog++) {
		struct jopts small = {.kind = J_RGB, .hsamp = 2, .arith = true, .progressive = prog};
		struct jopts big = {.kind = J_RGB, .arith = true, .progressive = prog, .restart = 4};
		struct jopts huff = {.kind = J_RGB, .progressive = prog, .restart = 4};
		uint8_t *a = make_jpeg(200, 150, photo_pixel, &small, &l);
		ck_assert_uint_lt(l, 65536);
		ck_assert_int_eq(prep_render(&center, a, l, 1, 2, 0, &out, &olen), 0);
		free(out);
		/* the same file with 70 KB after its EOI: the scan lies in
		 * PIL's first read, which it loads */
		uint8_t *t = calloc(1, l + 70000);
		memcpy(t, a, l);
		ck_assert_int_eq(prep_render(&center, t, l + 70000, 1, 2, 0, &out, &olen), 0);
		free(out);
		free(t);
		free(a);
		a = make_jpeg(700, 500, photo_pixel, &big, &l);
		ck_assert_uint_gt(l, 65536);
		ck_assert_int_eq(prep_render(&center, a, l, 1, 2, 0, &out, &olen), -EIO);
		free(a);
		a = make_jpeg(700, 500, photo_pixel, &huff, &l);
		ck_assert_uint_gt(l, 65536);
		ck_assert_int_eq(prep_render(&center, a, l, 1, 2, 0, &ref, &rlen), 0);
		free(ref);
		free(a);
	}
}
END_TEST

/* A PNG whose rows are all there decodes whatever follows them (no IEND,
 * nor the last IDAT's CRC or zlib checksum), as PIL loads it, interlaced or not; cut inside
 * its image data it still fails. */
START_TEST(png_tail_after_rows)
{
	struct prep_recipe center;

	prep_recipe_parse("center32", &center);
	for (int interlace = 0; interlace < 2; interlace++) {
		size_t pl, rlen, olen;
		uint8_t *png = make_png(60, 40, PNG_COLOR_TYPE_RGB, 8, interlace, false, &pl);
		uint8_t *ref, *out;

		ck_assert_int_eq(prep_render(&center, png, pl, 1, 2, 0, &ref, &rlen), 0);
		/* IEND; IEND and a CRC; and 1-4 bytes of the zlib checksum too
		 * (PIL loads those: it stops inflating at the last row, while
		 * libpng read the last IDAT's data whole and failed short) */
		for (size_t cut = 12; cut <= 20; cut += cut < 16 ? 4 : 1) {
			ck_assert_msg(prep_render(&center, png, pl - cut, 1, 2, 0, &out, &olen) == 0,
				      "interlace %d, %zu bytes cut", interlace, cut);
			ck_assert(olen == rlen && memcmp(out, ref, rlen) == 0);
			free(out);
		}
		ck_assert_int_eq(prep_render(&center, png, pl - 60, 1, 2, 0, &out, &olen), -EIO);
		free(ref);
		free(png);
	}
}
END_TEST

/* An 8-bit RGB TIFF of w x h in strips of rps rows, deflated, written by
 * libtiff through a temporary file. */
static uint8_t *make_tiff(unsigned w, unsigned h, unsigned rps, size_t *len)
{
	char path[] = "/tmp/prep-tiff-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	TIFF *t = TIFFFdOpen(fd, path, "w");
	ck_assert_ptr_nonnull(t);
	TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
	TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
	TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
	TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
	TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
	TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
	TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
	TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, rps);
	uint8_t *row = malloc((size_t)w * 3);
	for (unsigned y = 0; y < h; y++) {
		for (unsigned x = 0; x < w; x++) {
			struct color c = photo_pixel(x, y, w, h);
			row[3 * x] = c.r;
			row[3 * x + 1] = c.g;
			row[3 * x + 2] = c.b;
		}
		ck_assert_int_eq(TIFFWriteScanline(t, row, y, 0), 1);
	}
	TIFFClose(t); /* closes fd */
	free(row);
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	rewind(f);
	uint8_t *data = malloc(*len);
	ck_assert_uint_eq(fread(data, 1, *len, f), *len);
	fclose(f);
	unlink(path);
	return data;
}

/* A TIFF's working memory is counted from its strips: a whole image only
 * when a strip is the whole image, not for the small strips most writers
 * cut (counting the whole image for those failed big TIFFs under a
 * --prep-mem that reads them easily). Both decode. */
START_TEST(tiff_work_from_strips)
{
	const unsigned W = 1200, H = 900;
	struct prep_recipe r;
	uint64_t small_work, whole_work;
	size_t ls, lw, olen;
	uint8_t *small = make_tiff(W, H, 8, &ls), *whole = make_tiff(W, H, H, &lw), *out;

	prep_recipe_parse("center32", &r);
	ck_assert_int_eq(prep_decode_mem(&r, small, ls, &small_work), 0);
	ck_assert_int_eq(prep_decode_mem(&r, whole, lw, &whole_work), 0);
	ck_assert_uint_ge(whole_work, (uint64_t)W * H * 3);
	ck_assert_uint_lt(small_work, (uint64_t)W * H);
	ck_assert_int_eq(prep_render(&r, small, ls, 1, 2, 0, &out, &olen), 0);
	free(out);
	ck_assert_int_eq(prep_render(&r, whole, lw, 1, 2, 0, &out, &olen), 0);
	free(out);
	free(small);
	free(whole);
}
END_TEST

/* A 3x2 GIF frame at (4, 1) of a 5x2 screen, 4-colour palette, index 1
 * transparent: Pillow's image is 7x3 (the screen grown to hold the frame),
 * index 1 around the frame (its colour: convert("RGB") drops transparency).
 * The size needs every byte up to the frame's LZW code size (offset 43);
 * a file cut after the data's last sub-block loads, one cut inside fails. */
static const uint8_t gif_offset_frame[51] = {
	0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x05, 0x00, 0x02, 0x00, 0xf1, 0x00, 0x00,
	0xc8, 0x0a, 0x0a, 0x0a, 0xc8, 0x0a, 0x0a, 0x0a, 0xc8, 0xfa, 0xfa, 0x00, /* palette */
	0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x01, 0x00,				/* GCE */
	0x2c, 0x04, 0x00, 0x01, 0x00, 0x03, 0x00, 0x02, 0x00, 0x00,		/* frame */
	0x02, 0x04, 0x44, 0x34, 0x12, 0x05, 0x00, 0x3b};

START_TEST(gif_grown_screen)
{
	static const uint8_t want[3][7] = {{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 1, 2},
					   {1, 1, 1, 1, 3, 2, 1}};
	static const uint8_t pal[4][3] = {{200, 10, 10}, {10, 200, 10}, {10, 10, 200}, {250, 250, 0}};
	struct prep__image img;
	struct prep_recipe r;
	uint64_t work;
	unsigned w = 0, h = 0;

	for (size_t n = 6; n < 44; n++)
		ck_assert_int_eq(prep_probe(gif_offset_frame, n, &w, &h), -ENODATA);
	ck_assert_int_eq(prep_probe(gif_offset_frame, 44, &w, &h), 0);
	ck_assert_uint_eq(w, 7);
	ck_assert_uint_eq(h, 3);
	prep_recipe_parse("center32", &r);
	ck_assert_int_eq(prep_decode_mem(&r, gif_offset_frame, sizeof(gif_offset_frame), &work), 0);
	for (size_t n = 49; n <= sizeof(gif_offset_frame); n++) {
		ck_assert_int_eq(prep__decode_full(gif_offset_frame, n, &img), 0);
		ck_assert_uint_eq(img.w, 7);
		ck_assert_uint_eq(img.h, 3);
		for (unsigned y = 0; y < 3; y++)
			for (unsigned x = 0; x < 7; x++)
				ck_assert_mem_eq(img.rgb + (y * 7 + x) * 3, pal[want[y][x]], 3);
		free(img.rgb);
	}
	for (size_t n = 44; n < 49; n++)
		ck_assert_int_eq(prep__decode_full(gif_offset_frame, n, &img), -EIO);
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

void prep_codec_tests(TCase *tc)
{
	tcase_add_test(tc, probe_headers);
	tcase_add_test(tc, decode_jpeg_flavours);
	tcase_add_test(tc, decode_png_flavours);
	tcase_add_test(tc, eoi_decides_the_tail);
	tcase_add_test(tc, truncated_and_corrupt_fail);
	tcase_add_test(tc, png_tail_after_rows);
	tcase_add_test(tc, arith_jpeg_as_pil);
	tcase_add_test(tc, tiff_work_from_strips);
	tcase_add_test(tc, gif_grown_screen);
	tcase_add_test(tc, corpus_replay);
}
