/* SPDX-License-Identifier: MIT */
/*
 * PNG through libpng, streaming rows and keeping the region only
 * (interlaced files are read whole), ending in RGB as PIL's convert("RGB")
 * gives it: palette expanded, alpha and tRNS dropped, 16-bit gray clipped as
 * PIL's mode "I". libpng errors longjmp; its warnings are ignored.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "prep/codec.h"
#include "prep/sink.h"
#include "prep/prep.h"

static bool sniff_png(const uint8_t *p, size_t len)
{
	static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

	return len >= 8 && memcmp(p, png_sig, 8) == 0;
}

static int probe_png(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	if (len < 24)
		return -ENODATA;
	if (memcmp(p + 12, "IHDR", 4) != 0)
		return -EIO;
	uint32_t ww = (uint32_t)p[16] << 24 | (uint32_t)p[17] << 16 | (uint32_t)p[18] << 8 | p[19];
	uint32_t hh = (uint32_t)p[20] << 24 | (uint32_t)p[21] << 16 | (uint32_t)p[22] << 8 | p[23];
	if (ww > 0x7fffffffu || hh > 0x7fffffffu)
		return -EIO;
	int rc = prep__check_caps(ww, hh);
	if (rc < 0)
		return rc;
	*w = ww;
	*h = hh;
	return 0;
}

/* Interlaced: read whole. */
static uint64_t work_png(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	return len > 28 && p[28] ? (uint64_t)W * H * 8 + (uint64_t)H * 8 : (uint64_t)W * 8;
}

/* ---- PNG ---- */

struct pngsrc {
	const uint8_t *data;
	size_t len, pos;
	size_t cut_at;	    /* length field of an IDAT the file ends inside, or 0 */
	uint8_t cut_len[4]; /* what it reads as: the bytes the file has */
};

static void png_read_mem(png_structp png, png_bytep out, size_t n)
{
	struct pngsrc *s = png_get_io_ptr(png);

	if (n > s->len - s->pos)
		png_error(png, "truncated");
	memcpy(out, s->data + s->pos, n);
	if (s->cut_at && s->pos <= s->cut_at && s->cut_at + 4 <= s->pos + n)
		memcpy(out + (s->cut_at - s->pos), s->cut_len, 4);
	s->pos += n;
}

/* A file that ends inside an IDAT's data (cut in the zlib checksum, or in
 * the last bytes of the stream after the last row): PIL inflates what is
 * there and loads the image if every row comes out. libpng reads a chunk's
 * data in whole pieces and fails at the short read before inflating the
 * bytes it has; told the chunk is as long as what is left, it inflates
 * them all, and then fails reading on, which png_read_last takes for the
 * tail if every row is in, and the decode fails if not. */
static void png_find_cut(struct pngsrc *s)
{
	size_t i = 8;

	while (s->len - i >= 8) {
		uint32_t n = (uint32_t)s->data[i] << 24 | (uint32_t)s->data[i + 1] << 16 |
			     (uint32_t)s->data[i + 2] << 8 | s->data[i + 3];
		if (n > s->len - i - 8) {
			if (memcmp(s->data + i + 4, "IDAT", 4) == 0) {
				size_t have = s->len - i - 8;
				s->cut_at = i;
				for (int k = 0; k < 4; k++)
					s->cut_len[k] = (uint8_t)(have >> (24 - 8 * k));
			}
			return;
		}
		if (s->len - i - 8 - n < 4)
			return;
		i += 12 + (size_t)n;
	}
}

static void png_err(png_structp png, png_const_charp msg)
{
	png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg)
{
}

/* One decoded PNG row (after libpng's expansions) to RGB, columns [x0, x1). */
static void png_row_to_rgb(const uint8_t *in, unsigned channels, unsigned depth, unsigned x0,
			   unsigned x1, uint8_t *out)
{
	size_t bpp = (size_t)channels * (depth / 8);

	for (unsigned x = x0; x < x1; x++, out += 3) {
		const uint8_t *p = in + x * bpp;

		if (channels <= 2) {
			uint8_t v;
			if (depth == 8)
				v = p[0];
			else if (channels == 1) /* PIL mode "I": clipped, not scaled */
				v = p[0] ? 255 : p[1];
			else /* "LA;16B": high byte */
				v = p[0];
			out[0] = out[1] = out[2] = v;
		} else if (depth == 8) {
			out[0] = p[0];
			out[1] = p[1];
			out[2] = p[2];
		} else {
			out[0] = p[0];
			out[1] = p[2];
			out[2] = p[4];
		}
	}
}

/* PIL stops reading a PNG at its last row, so a file whose image data
 * is whole but whose tail is not (cut or broken in the zlib checksum, the
 * last IDAT's CRC, IEND) loads. libpng checks that tail when it finishes
 * the last row, after the row is delivered and counted (row_number, or pass
 * 7 when interlaced): an error past that count is the tail's. Reads the
 * last row (rows == NULL) or the whole interlaced image; true when the tail
 * failed: every row is in, and libpng must not be called again but to be
 * destroyed. An error before the count goes on to the caller's handler. */
static bool png_read_last(png_structp png, png_bytep row, png_bytepp rows, png_uint_32 H)
{
	jmp_buf outer;

	memcpy(outer, png_jmpbuf(png), sizeof(outer));
	if (setjmp(png_jmpbuf(png))) {
		memcpy(png_jmpbuf(png), outer, sizeof(outer));
		if (rows ? png_get_current_pass_number(png) < 7 : png_get_current_row_number(png) < H)
			png_longjmp(png, 1);
		return true;
	}
	if (rows)
		png_read_image(png, rows);
	else
		png_read_row(png, row, NULL);
	memcpy(png_jmpbuf(png), outer, sizeof(outer));
	return false;
}

/* An index past a short PLTE: PIL shows its default palette's colour
 * there, the gray (i, i, i); libpng would expand it to black. So a palette
 * image gets a full palette, the missing entries gray, before libpng
 * expands it. */
static void png_fill_palette(png_structp png, png_infop info, int depth)
{
	png_colorp pal;
	png_color all[256];
	int n = 0, full = 1 << depth;

	if (!png_get_PLTE(png, info, &pal, &n) || n >= full)
		return;
	memcpy(all, pal, (size_t)n * sizeof(*all));
	for (int i = n; i < full; i++)
		all[i].red = all[i].green = all[i].blue = (png_byte)i;
	png_set_PLTE(png, info, all, full);
}

static int decode_png(const uint8_t *data, size_t len, struct prep__sink *d)
{
	png_structp png;
	png_infop info = NULL;
	struct pngsrc src = {data, len, 0, 0, {0}};
	uint8_t *volatile row = NULL, *volatile whole = NULL;
	png_bytep *volatile rowp = NULL;
	volatile int rc = 0;
	volatile bool rows_done = false, tail_broken = false;

	png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, png_err, png_warn);
	if (!png)
		return -ENOMEM;
	info = png_create_info_struct(png);
	if (!info) {
		png_destroy_read_struct(&png, NULL, NULL);
		return -ENOMEM;
	}
	if (setjmp(png_jmpbuf(png))) {
		if (rc == 0 && !rows_done)
			rc = -EIO;
		goto out;
	}
	png_set_user_limits(png, PREP_MAX_SIDE, PREP_MAX_SIDE);
	png_set_chunk_malloc_max(png, 16u << 20);
	png_find_cut(&src);
	png_set_read_fn(png, &src, png_read_mem);
	/* CRCs as PIL checks them: every chunk's before the image data (where
	 * libpng only warns about an ancillary chunk's, PIL fails the file),
	 * none from the first IDAT on (PIL reads the image data and what
	 * follows without checking them). */
	png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
	png_read_info(png, info);
	png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);

	png_uint_32 W, H;
	int depth, ctype, interlace;
	png_get_IHDR(png, info, &W, &H, &depth, &ctype, &interlace, NULL, NULL);
	if ((rc = prep__sink_scale(d, W, H, false)) < 0)
		goto out;
	if ((rc = prep__sink_region(d, W, H)) < 0)
		goto out;
	if (ctype == PNG_COLOR_TYPE_PALETTE) {
		png_fill_palette(png, info, depth);
		png_set_palette_to_rgb(png);
	}
	if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8)
		png_set_expand_gray_1_2_4_to_8(png);
	int passes = png_set_interlace_handling(png);
	png_read_update_info(png, info);

	unsigned channels = png_get_channels(png, info);
	unsigned odepth = png_get_bit_depth(png, info);
	size_t rowbytes = png_get_rowbytes(png, info);
	if (channels < 1 || channels > 4 || (odepth != 8 && odepth != 16) ||
	    rowbytes < (size_t)W * channels * (odepth / 8)) {
		rc = -EIO;
		goto out;
	}
	if ((rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3)) < 0)
		goto out;
	d->bx0 = d->rx0;
	if (passes > 1 || interlace != PNG_INTERLACE_NONE) {
		if ((uint64_t)rowbytes * H > (768ull << 20)) {
			rc = -EFBIG;
			goto out;
		}
		whole = malloc(rowbytes * H);
		rowp = malloc(sizeof(*rowp) * H);
		if (!whole || !rowp) {
			rc = -ENOMEM;
			goto out;
		}
		for (png_uint_32 y = 0; y < H; y++)
			rowp[y] = whole + (size_t)y * rowbytes;
		tail_broken = png_read_last(png, NULL, rowp, H);
		for (unsigned y = d->ry0; y < d->ry1; y++) {
			png_row_to_rgb(rowp[y], channels, odepth, d->rx0, d->rx1, prep__sink_row(d));
			prep__sink_push(d);
		}
	} else {
		row = malloc(rowbytes);
		if (!row) {
			rc = -ENOMEM;
			goto out;
		}
		/* Every row is read, so a truncated file fails whatever the
		 * region; only the region is kept. */
		for (png_uint_32 y = 0; y < H; y++) {
			if (y + 1 < H)
				png_read_row(png, row, NULL);
			else
				tail_broken = png_read_last(png, row, NULL, H);
			if (y >= d->ry0 && y < d->ry1) {
				png_row_to_rgb(row, channels, odepth, d->rx0, d->rx1, prep__sink_row(d));
				prep__sink_push(d);
			}
		}
	}
	prep__sink_flush(d);
	/* Every row is in: what png_read_end finds wrong after them (no IEND,
	 * a broken chunk after the image data) does not fail the image either. */
	rows_done = true;
	if (!tail_broken)
		png_read_end(png, NULL);
out:
	png_destroy_read_struct(&png, &info, NULL);
	free(row);
	free(whole);
	free(rowp);
	return rc;
}

const struct prep__codec prep__codec_png = {
	.format = PREP__PNG,
	.sniff = sniff_png,
	.probe = probe_png,
	.work_mem = work_png,
	.decode = decode_png,
};
