/* SPDX-License-Identifier: MIT */
/*
 * Binary PNM and uncompressed BMP, the layouts Pillow reads with its raw
 * decoder: rows are read in place from the file's buffer, as Pillow reads
 * them. Two codecs (PNM, BMP) over one row reader.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "prep/codec.h"
#include "prep/prep.h"
#include "prep/sink.h"

/* ---- PNM and BMP: uncompressed rows, read where they lie ---- */

/*
 * The layouts Pillow reads with its raw decoder, decoded as it does:
 * binary PBM (P4), PGM (P5) and PPM (P6) with maxval 255; BMP with a 12,
 * 40, 64, 108 or 124-byte header, 1/4/8-bit palette, 24-bit BGR and 32-bit
 * pixels (BI_RGB, or BI_BITFIELDS with the byte-aligned masks Pillow
 * knows), bottom-up or top-down. Others (plain-text PNM, other maxvals,
 * 16-bit or RLE BMP) give -EIO: Pillow reads them, but not bit for bit
 * like this, so they are not claimed.
 */
struct raw_img {
	const uint8_t *data; /* first byte of pixel data */
	size_t stride;	     /* bytes per stored row */
	unsigned w, h;
	unsigned bits;	   /* per pixel: 1 (PBM/BMP), 4, 8, 24, 32 */
	bool gray;	   /* PGM: one byte of gray */
	bool pbm;	   /* P4: bit 1 is black */
	bool rgb_order;	   /* PPM: R G B; else BMP's byte offsets below */
	bool bottom_up;	   /* BMP: the first stored row is the bottom one */
	unsigned off[3];   /* 24/32-bit BMP: byte of R, G, B in a pixel */
	uint8_t pal[256][3]; /* palette, RGB */
	unsigned ncolors;
};

/* Pillow's PpmImageFile._read_token: skip whitespace and '#' comments (to
 * CR or LF), a token of at most 10 bytes ended by one whitespace byte. */
static int pnm_token(const uint8_t *p, size_t len, size_t *i, unsigned *val)
{
	size_t n = 0;
	uint64_t v = 0;

	while (*i < len) {
		uint8_t c = p[(*i)++];
		if (c == ' ' || (c >= 0x09 && c <= 0x0d)) {
			if (n == 0)
				continue;
			break;
		}
		if (c == '#') {
			while (*i < len && p[*i] != '\r' && p[*i] != '\n')
				(*i)++;
			if (*i < len)
				(*i)++;
			continue;
		}
		if (c < '0' || c > '9' || ++n > 10)
			return -EIO;
		v = v * 10 + (c - '0');
	}
	if (n == 0)
		return -ENODATA;
	if (v > UINT32_MAX)
		return -EIO;
	*val = (unsigned)v;
	return 0;
}

static bool pnm_magic(const uint8_t *p, size_t len)
{
	return len >= 3 && p[0] == 'P' && p[1] >= '4' && p[1] <= '6' &&
	       (p[2] == ' ' || (p[2] >= 0x09 && p[2] <= 0x0d));
}

static int pnm_parse(const uint8_t *p, size_t len, struct raw_img *im, bool need_data)
{
	size_t i = 3;
	unsigned maxval = 255;
	int rc;

	memset(im, 0, sizeof(*im));
	if ((rc = pnm_token(p, len, &i, &im->w)) < 0 || (rc = pnm_token(p, len, &i, &im->h)) < 0)
		return rc;
	if (p[1] != '4' && (rc = pnm_token(p, len, &i, &maxval)) < 0)
		return rc;
	if ((rc = prep__check_caps(im->w, im->h)) < 0)
		return rc;
	if (maxval != 255)
		return -EIO;
	im->pbm = p[1] == '4';
	im->gray = p[1] == '5';
	im->rgb_order = true;
	im->bits = im->pbm ? 1 : im->gray ? 8 : 24;
	im->stride = im->pbm ? (im->w + 7) / 8 : (size_t)im->w * (im->bits / 8);
	if (need_data && (i > len || (len - i) / im->stride < im->h))
		return -EIO; /* truncated */
	im->data = p + i;
	return 0;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static unsigned le16(const uint8_t *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static int bmp_parse(const uint8_t *p, size_t len, struct raw_img *im, bool need_data)
{
	memset(im, 0, sizeof(*im));
	if (len < 18)
		return -ENODATA;
	uint32_t offset = le32(p + 10), hsize = le32(p + 14);
	if (hsize != 12 && hsize != 40 && hsize != 64 && hsize != 108 && hsize != 124)
		return -EIO;
	if (len < 14 + (size_t)hsize)
		return -ENODATA;
	const uint8_t *h = p + 18;
	uint32_t compression = 0, colors = 0;
	size_t pal_at = 14 + hsize, pal_entry = 4;
	uint32_t masks[4] = {0, 0, 0, 0};
	if (hsize == 12) {
		im->w = le16(h);
		im->h = le16(h + 2);
		im->bits = le16(h + 6);
		pal_entry = 3;
		im->bottom_up = true;
	} else {
		bool y_flip = h[7] == 0xff;
		im->w = le32(h);
		im->h = y_flip ? (uint32_t)(0x100000000ull - le32(h + 4)) : le32(h + 4);
		im->bottom_up = !y_flip;
		im->bits = le16(h + 10);
		compression = le32(h + 12);
		colors = le32(h + 28);
		if (compression == 3) {
			if (hsize >= 56) {
				for (int k = 0; k < 4; k++)
					masks[k] = le32(h + 36 + 4 * k);
			} else {
				if (len < 14 + (size_t)hsize + 12)
					return -ENODATA;
				for (int k = 0; k < 3; k++)
					masks[k] = le32(p + 14 + hsize + 4 * k);
				pal_at += 12;
			}
		}
	}
	int rc = prep__check_caps(im->w, im->h);
	if (rc < 0)
		return rc;
	unsigned b = im->bits;
	if (compression == 0) {
		if (b != 1 && b != 4 && b != 8 && b != 24 && b != 32)
			return -EIO;
		im->off[0] = 2, im->off[1] = 1, im->off[2] = 0; /* BGR, BGRX */
	} else if (compression == 3 && b == 24 && masks[0] == 0xff0000 && masks[1] == 0xff00 &&
		   masks[2] == 0xff) {
		im->off[0] = 2, im->off[1] = 1, im->off[2] = 0;
	} else if (compression == 3 && b == 32) {
		static const struct {
			uint32_t m[4];
			unsigned off[3];
		} known[] = {
		    {{0xff0000, 0xff00, 0xff, 0}, {2, 1, 0}},		/* BGRX */
		    {{0xff000000u, 0xff0000, 0xff00, 0}, {3, 2, 1}},	/* XBGR */
		    {{0xff000000u, 0xff0000, 0xff00, 0xff}, {3, 2, 1}}, /* ABGR */
		    {{0xff, 0xff00, 0xff0000, 0xff000000u}, {0, 1, 2}}, /* RGBA */
		    {{0xff0000, 0xff00, 0xff, 0xff000000u}, {2, 1, 0}}, /* BGRA */
		    {{0, 0, 0, 0}, {2, 1, 0}},				/* BGRA */
		};
		size_t k = 0;
		for (; k < sizeof(known) / sizeof(known[0]); k++)
			if (!memcmp(known[k].m, masks, sizeof(masks)))
				break;
		if (k == sizeof(known) / sizeof(known[0]))
			return -EIO;
		memcpy(im->off, known[k].off, sizeof(im->off));
	} else {
		return -EIO; /* RLE, 16-bit, other masks */
	}
	if (b <= 8) {
		im->ncolors = colors ? colors : 1u << b;
		if (im->ncolors > 256)
			return -EIO;
		if (len < pal_at + (size_t)im->ncolors * pal_entry)
			return -ENODATA;
		for (unsigned c = 0; c < im->ncolors; c++) {
			const uint8_t *e = p + pal_at + (size_t)c * pal_entry;
			im->pal[c][0] = e[2];
			im->pal[c][1] = e[1];
			im->pal[c][2] = e[0];
		}
		if (offset == 14 + hsize) /* Pillow: an offset that forgot the palette */
			offset += 4 * im->ncolors;
	}
	if (offset == 0)
		offset = (uint32_t)(pal_at + (b <= 8 ? (size_t)im->ncolors * pal_entry : 0));
	im->stride = (((size_t)im->w * b + 31) >> 3) & ~(size_t)3;
	if (need_data) {
		if (offset > len || (len - offset) / im->stride < im->h)
			return -EIO; /* truncated: Pillow wants every row whole */
	}
	im->data = p + offset;
	return 0;
}

/* RGB of stored image row y (top = 0), columns [x0, x1), into dst. 0, or
 * -EIO for a palette index past the palette. */
static int raw_row(const struct raw_img *im, unsigned y, unsigned x0, unsigned x1, uint8_t *dst)
{
	const uint8_t *row = im->data + (size_t)(im->bottom_up ? im->h - 1 - y : y) * im->stride;

	for (unsigned x = x0; x < x1; x++, dst += 3) {
		if (im->pbm) {
			uint8_t v = (row[x / 8] >> (7 - x % 8)) & 1 ? 0 : 255;
			dst[0] = dst[1] = dst[2] = v;
		} else if (im->gray) {
			dst[0] = dst[1] = dst[2] = row[x];
		} else if (im->rgb_order) {
			memcpy(dst, row + (size_t)x * 3, 3);
		} else if (im->bits >= 24) {
			const uint8_t *px = row + (size_t)x * (im->bits / 8);
			dst[0] = px[im->off[0]];
			dst[1] = px[im->off[1]];
			dst[2] = px[im->off[2]];
		} else {
			unsigned idx;
			if (im->bits == 8)
				idx = row[x];
			else if (im->bits == 4)
				idx = (row[x / 2] >> (x % 2 ? 0 : 4)) & 15;
			else
				idx = (row[x / 8] >> (7 - x % 8)) & 1;
			if (idx >= im->ncolors)
				return -EIO;
			memcpy(dst, im->pal[idx], 3);
		}
	}
	return 0;
}

/* The size of a PNM (bmp false) or BMP from its headers. */
static int probe_raw(const uint8_t *p, size_t len, unsigned *w, unsigned *h, bool bmp)
{
	struct raw_img *im = malloc(sizeof(*im));
	if (!im)
		return -ENOMEM;
	int rc = bmp		      ? bmp_parse(p, len, im, false)
	       : pnm_magic(p, len) ? pnm_parse(p, len, im, false)
				   : -EIO;
	if (rc == 0) {
		*w = im->w;
		*h = im->h;
	}
	free(im);
	return rc;
}

static int probe_pnm(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	return probe_raw(p, len, w, h, false);
}

static int probe_bmp(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	return probe_raw(p, len, w, h, true);
}

/* Rows are read where they lie: the parsed headers and one row. */
static uint64_t work_raw(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	return sizeof(struct raw_img) + (uint64_t)W * 3;
}

static int decode_raw(const uint8_t *data, size_t len, struct prep__sink *d, bool bmp)
{
	struct raw_img *im = malloc(sizeof(*im));
	int rc;

	if (!im)
		return -ENOMEM;
	rc = bmp ? bmp_parse(data, len, im, true) : pnm_parse(data, len, im, true);
	if (rc == -ENODATA)
		rc = -EIO;
	if (rc == 0)
		rc = prep__sink_scale(d, im->w, im->h, false);
	if (rc == 0)
		rc = prep__sink_region(d, im->w, im->h);
	if (rc == 0)
		rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3);
	if (rc == 0) {
		d->bx0 = d->rx0;
		/* Pillow decodes every row: a bad palette index anywhere fails */
		uint8_t *scratch = im->bits <= 8 && !im->gray && !im->pbm
				       ? malloc((size_t)im->w * 3 + PREP__PAD)
				       : NULL;
		for (unsigned y = 0; rc == 0 && scratch && y < im->h; y++)
			if (y < d->ry0 || y >= d->ry1)
				rc = raw_row(im, y, 0, im->w, scratch);
		free(scratch);
		for (unsigned y = d->ry0; rc == 0 && y < d->ry1; y++) {
			rc = raw_row(im, y, d->rx0, d->rx1, prep__sink_row(d));
			prep__sink_push(d);
		}
		if (rc == 0)
			prep__sink_flush(d);
	}
	free(im);
	return rc;
}

static int decode_pnm(const uint8_t *p, size_t len, struct prep__sink *d)
{
	return pnm_magic(p, len) ? decode_raw(p, len, d, false) : -EIO;
}

static int decode_bmp(const uint8_t *p, size_t len, struct prep__sink *d)
{
	return decode_raw(p, len, d, true);
}

/* Any PNM magic (plain-text P1-P3 too): those are PNM that this decoder
 * refuses with -EIO, not unknown data (-EINVAL). */
static bool sniff_pnm(const uint8_t *p, size_t len)
{
	return len >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6' &&
	       (p[2] == ' ' || (p[2] >= 0x09 && p[2] <= 0x0d));
}

static bool sniff_bmp(const uint8_t *p, size_t len)
{
	return len >= 2 && p[0] == 'B' && p[1] == 'M';
}

const struct prep__codec prep__codec_pnm = {
	.format = PREP__PNM,
	.sniff = sniff_pnm,
	.probe = probe_pnm,
	.work_mem = work_raw,
	.decode = decode_pnm,
};

const struct prep__codec prep__codec_bmp = {
	.format = PREP__BMP,
	.sniff = sniff_bmp,
	.probe = probe_bmp,
	.work_mem = work_raw,
	.decode = decode_bmp,
};
