/* SPDX-License-Identifier: MIT */
/*
 * Decoding: JPEG through the libjpeg API of libjpeg-turbo with DCT-domain
 * downscaling (scale_num/8), horizontal cropping (jpeg_crop_scanline) and
 * row skipping (jpeg_skip_scanlines), so only the pixels the resampler reads
 * are reconstructed; PNG through libpng, streaming rows and keeping the
 * region only; WebP through libwebp, whole; TIFF through libtiff, row by
 * row; binary PNM and uncompressed
 * BMP read in place, as Pillow's raw decoder reads them. All end in RGB
 * exactly as PIL's convert("RGB") would give
 * (CMYK with Adobe polarity, alpha and tRNS dropped, 16-bit gray clipped as
 * PIL's mode "I"). Every error, and every libjpeg warning, unwinds through a
 * setjmp/longjmp error manager: nothing here exits or prints.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "prep/prep_int.h"

enum prep__format prep__sniff(const void *data, size_t len)
{
	static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	const uint8_t *p = data;

	if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
		return PREP__JPEG;
	if (len >= 8 && memcmp(p, png_sig, 8) == 0)
		return PREP__PNG;
	if (len >= 2 && p[0] == 'B' && p[1] == 'M')
		return PREP__BMP;
	if (len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
		return PREP__WEBP;
	if (len >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0))
		return PREP__TIFF;
	if (len >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6' &&
	    (p[2] == ' ' || (p[2] >= 0x09 && p[2] <= 0x0d)))
		return PREP__PNM;
	return PREP__UNKNOWN;
}

static int check_caps(uint64_t w, uint64_t h)
{
	if (w == 0 || h == 0)
		return -EIO;
	if (w > PREP_MAX_SIDE || h > PREP_MAX_SIDE || w * h > PREP_MAX_PIXELS)
		return -EFBIG;
	return 0;
}

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
	if ((rc = check_caps(im->w, im->h)) < 0)
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
	int rc = check_caps(im->w, im->h);
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

static int probe_jpeg(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	size_t i = 2;

	for (;;) {
		/* Find the next marker, skipping fill bytes (and, leniently,
		 * garbage between segments, as libjpeg does with a warning). */
		while (i < len && p[i] != 0xff)
			i++;
		while (i < len && p[i] == 0xff)
			i++;
		if (i >= len)
			return -ENODATA;
		uint8_t m = p[i++];

		if (m == 0x00 || m == 0x01 || m == 0xd8 || (m >= 0xd0 && m <= 0xd7))
			continue;
		if (m == 0xd9 || m == 0xda)
			return -EIO; /* EOI or SOS before any frame header */
		if (i + 2 > len)
			return -ENODATA;
		size_t seglen = (size_t)p[i] << 8 | p[i + 1];
		if (seglen < 2)
			return -EIO;
		bool sof = m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
		if (sof) {
			if (seglen < 8)
				return -EIO;
			if (i + 7 > len)
				return -ENODATA;
			unsigned hh = (unsigned)p[i + 3] << 8 | p[i + 4];
			unsigned ww = (unsigned)p[i + 5] << 8 | p[i + 6];
			int rc = check_caps(ww, hh);
			if (rc < 0)
				return rc;
			*w = ww;
			*h = hh;
			return 0;
		}
		i += seglen;
	}
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
	int rc = check_caps(ww, hh);
	if (rc < 0)
		return rc;
	*w = ww;
	*h = hh;
	return 0;
}

/* TIFF: width and length of the first image, through libtiff. The IFD may
 * lie anywhere in the file (libtiff writes it after the data), so a buffer
 * libtiff cannot open gives -ENODATA: the caller retries with the whole
 * file, where a failure is final. */
static int probe_tiff(const uint8_t *data, size_t len, unsigned *w, unsigned *h);

int prep_probe(const void *data, size_t len, unsigned *w, unsigned *h)
{
	if (!data || !w || !h)
		return -EINVAL;
	switch (prep__sniff(data, len)) {
	case PREP__JPEG:
		return probe_jpeg(data, len, w, h);
	case PREP__PNG:
		return probe_png(data, len, w, h);
	case PREP__WEBP: {
		int ww, hh;
		if (!WebPGetInfo(data, len, &ww, &hh))
			return len < 64 ? -ENODATA : -EIO;
		int rc = check_caps((unsigned)ww, (unsigned)hh);
		if (rc == 0) {
			*w = (unsigned)ww;
			*h = (unsigned)hh;
		}
		return rc;
	}
	case PREP__TIFF:
		return probe_tiff(data, len, w, h);
	case PREP__PNM:
	case PREP__BMP: {
		struct raw_img *im = malloc(sizeof(*im));
		if (!im)
			return -ENOMEM;
		int rc = prep__sniff(data, len) == PREP__BMP ? bmp_parse(data, len, im, false)
		       : pnm_magic(data, len)		      ? pnm_parse(data, len, im, false)
							      : -EIO;
		if (rc == 0) {
			*w = im->w;
			*h = im->h;
		}
		free(im);
		return rc;
	}
	default:
		if (len < 8)
			return len == 0 ? -EINVAL : -ENODATA;
		return -EINVAL;
	}
}

/* Does libjpeg need its whole-image coefficient buffer for this file
 * (progressive, or a first scan without every component)? When the data
 * ends before the first scan, assume it does. */
static bool jpeg_buffers_whole(const uint8_t *p, size_t len)
{
	size_t i = 2;
	unsigned ncomp = 0;
	bool progressive = false;

	for (;;) {
		while (i < len && p[i] != 0xff)
			i++;
		while (i < len && p[i] == 0xff)
			i++;
		if (i >= len)
			return true;
		uint8_t m = p[i++];
		if (m == 0x00 || m == 0x01 || m == 0xd8 || (m >= 0xd0 && m <= 0xd7))
			continue;
		if (m == 0xd9 || i + 3 > len)
			return true;
		size_t seglen = (size_t)p[i] << 8 | p[i + 1];
		if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
			progressive = m == 0xc2 || m == 0xc6 || m == 0xca || m == 0xce;
			if (i + 8 > len)
				return true;
			ncomp = p[i + 7];
		} else if (m == 0xda) {
			return progressive || p[i + 2] < ncomp;
		}
		if (seglen < 2)
			return true;
		i += seglen;
	}
}

int prep_decode_mem(const struct prep_recipe *r, const void *data, size_t len, uint64_t *bytes)
{
	const uint8_t *p = data;
	unsigned W, H, ow, oh;
	int rc;

	if (!r || !data || !bytes)
		return -EINVAL;
	if ((rc = prep_probe(data, len, &W, &H)) < 0)
		return rc;
	if ((rc = prep_output_dims(r, W, H, &ow, &oh)) < 0)
		return rc;
	/* the horizontally reduced region (at most every source row), the
	 * row buffers, both axes' coefficients, the codec's fixed state */
	uint64_t n = (uint64_t)ow * 3 * H + (uint64_t)W * 4 * 6 + 8 * ((uint64_t)W + H) +
		     16 * ((uint64_t)ow + oh) + (256u << 10);
	if (prep__sniff(data, len) == PREP__JPEG)
		n += jpeg_buffers_whole(p, len) ? (uint64_t)W * H * 8 : (uint64_t)W * 64 * 2;
	else if (prep__sniff(data, len) == PREP__PNG) /* interlaced: read whole */
		n += len > 28 && p[28] ? (uint64_t)W * H * 8 + (uint64_t)H * 8 : (uint64_t)W * 8;
	else if (prep__sniff(data, len) == PREP__TIFF) /* a strip may be the image */
		n += (uint64_t)W * H * 4 + (uint64_t)W * 8 + (64u << 10);
	else if (prep__sniff(data, len) == PREP__WEBP) /* decoded whole */
		n += (uint64_t)W * H * 4 + (uint64_t)W * 64;
	else /* PNM, BMP: rows are read where they lie */
		n += sizeof(struct raw_img) + (uint64_t)W * 3;
	*bytes = n;
	return 0;
}

unsigned prep__pick_scale(const struct prep__geom *g)
{
	double fx = (g->box_x1 - g->box_x0) / g->vw;
	double fy = (g->box_y1 - g->box_y0) / g->vh;
	double f = fx < fy ? fx : fy; /* source pixels per output pixel */

	/* Powers of two only: libjpeg-turbo has SIMD IDCTs for 1/8 (DC only),
	 * 2/8 and 4/8 (and 8/8), and for 4:2:0 at 4/8 the chroma is decoded 1:1
	 * by the SIMD 8x8 IDCT. Its 3/8, 5/8, 6/8 and 7/8 IDCTs are plain C (and
	 * 4:2:0 chroma then needs 6x6..14x14 ones): measured slower than the full
	 * 8/8 decode on 500x375 photos. */
	for (unsigned m = 1; m < 8; m *= 2)
		if (f * m / 8.0 >= 1.0 - 1e-9)
			return m;
	return 8;
}

/* State of one decode, shared by the JPEG and PNG paths. */
struct dctx {
	/* set by the caller */
	prep__plan_fn plan;
	void *arg;
	unsigned scale_num; /* 0 = auto */
	bool full;	    /* the whole image, full resolution, no plan */
	/* set by plan_scale() and plan_region() */
	struct prep__geom g;
	unsigned M;
	struct prep__coeffs cx, cy;
	unsigned rx0, rx1, ry0, ry1; /* region to decode, in scaled pixels */
	/* Region rows as they are decoded. Full mode: all of them, in buf.
	 * Otherwise up to 4 at a time in buf, then through the horizontal pass
	 * into tmp (cx.n pixels per region row), so memory is 4 source rows
	 * plus the horizontally reduced region, whatever the source size. */
	uint8_t *buf;
	size_t stride; /* bytes per row in buf (4 per pixel for CMYK) */
	unsigned bx0;  /* absolute column of a buf row's first pixel */
	unsigned nbuf; /* rows waiting in buf */
	unsigned done; /* region rows through the horizontal pass */
	uint8_t *tmp;
	size_t buf_cap, tmp_cap; /* buf and tmp come from prep__scratch_get */
	uint8_t *dst;		 /* full mode: the caller's buffer for buf, when it fits */
	size_t dst_cap;
	unsigned W, H; /* source size */
};

/* Allocate the row buffers once the region's row width (pixels, bytes per
 * pixel) is known. */
static int rows_alloc(struct dctx *d, unsigned width, unsigned bpp)
{
	size_t nrows = d->full ? d->ry1 - d->ry0 : 4;

	d->stride = (size_t)width * bpp;
	if (d->full) { /* handed to the caller */
		size_t n = d->stride * nrows + PREP__PAD;
		d->buf = d->dst && n <= d->dst_cap ? d->dst : malloc(n);
		return d->buf ? 0 : -ENOMEM;
	}
	d->buf = prep__scratch_get(d->stride * nrows + PREP__PAD, &d->buf_cap);
	d->tmp = prep__scratch_get((size_t)d->cx.n * 3 * (d->ry1 - d->ry0), &d->tmp_cap);
	return d->buf && d->tmp ? 0 : -ENOMEM;
}

/* Where the decoder puts the next region row. */
static uint8_t *row_slot(struct dctx *d)
{
	return d->buf + (size_t)d->nbuf * d->stride;
}

static void rows_flush(struct dctx *d)
{
	const uint8_t *in[4];
	uint8_t *out[4];

	if (d->full || d->nbuf == 0)
		return;
	for (unsigned i = 0; i < d->nbuf; i++) {
		in[i] = d->buf + (size_t)i * d->stride;
		out[i] = d->tmp + (size_t)(d->done + i) * d->cx.n * 3;
	}
	prep__hpass(in, d->nbuf, d->bx0, &d->cx, out, true);
	d->done += d->nbuf;
	d->nbuf = 0;
}

/* The row at row_slot() is complete (RGB). */
static void row_push(struct dctx *d)
{
	d->nbuf++;
	if (!d->full && d->nbuf == 4)
		rows_flush(d);
}

/* Step 1, source size known: ask for the geometry and pick the DCT scale. */
static int plan_scale(struct dctx *d, unsigned W, unsigned H, bool can_scale)
{
	int rc = check_caps(W, H);

	if (rc < 0)
		return rc;
	d->W = W;
	d->H = H;
	if (d->full) {
		d->M = can_scale && d->scale_num >= 1 && d->scale_num <= 8 ? d->scale_num : 8;
		return 0;
	}
	if ((rc = d->plan(d->arg, W, H, &d->g)) < 0)
		return rc;
	if (!can_scale)
		d->M = 8;
	else if (d->scale_num >= 1 && d->scale_num <= 8)
		d->M = d->scale_num;
	else
		d->M = prep__pick_scale(&d->g);
	return 0;
}

/* Step 2, scaled size sw x sh known: coefficients and the region they read. */
static int plan_region(struct dctx *d, unsigned sw, unsigned sh)
{
	if (d->full) {
		d->rx0 = d->ry0 = 0;
		d->rx1 = sw;
		d->ry1 = sh;
		return 0;
	}
	const struct prep__geom *g = &d->g;
	double s = d->M / 8.0;
	unsigned c0x = (unsigned)floor(g->clip_x0 * s), c1x = (unsigned)ceil(g->clip_x1 * s);
	unsigned c0y = (unsigned)floor(g->clip_y0 * s), c1y = (unsigned)ceil(g->clip_y1 * s);

	if (c1x > sw)
		c1x = sw;
	if (c1y > sh)
		c1y = sh;
	if (c0x >= c1x)
		c0x = c1x - 1;
	if (c0y >= c1y)
		c0y = c1y - 1;
	int rc =
	    prep__coeffs_make(g->box_x0 * s, g->box_x1 * s, c0x, c1x, g->vw, g->ox, g->ow, &d->cx);
	if (rc == 0)
		rc = prep__coeffs_make(g->box_y0 * s, g->box_y1 * s, c0y, c1y, g->vh, g->oy, g->oh,
				       &d->cy);
	if (rc < 0)
		return rc;
	d->rx0 = d->cx.lo;
	d->rx1 = d->cx.hi;
	d->ry0 = d->cy.lo;
	d->ry1 = d->cy.hi;
	return 0;
}

/* PIL: CMYK JPEGs are read as "CMYK;I" (Adobe polarity), then cmyk2rgb. */
static void cmyk_to_rgb(uint8_t *px, size_t n)
{
	const uint8_t *in = px;
	uint8_t *out = px;

	for (size_t i = 0; i < n; i++, in += 4, out += 3) {
		int nk = in[3]; /* 255 - (255 - k) */
		for (int c = 0; c < 3; c++) {
			int inv = 255 - in[c];
			int tmp = inv * nk + 128;
			int v = nk - (((tmp >> 8) + tmp) >> 8);
			out[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
		}
	}
}

/* ---- JPEG ---- */

struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	int code;
};

static void jerr_exit(j_common_ptr ci)
{
	struct jerr *e = (struct jerr *)ci->err;

	if (!e->code)
		e->code = ci->err->msg_code == JERR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	longjmp(e->jb, 1);
}

static void jerr_emit(j_common_ptr ci, int level)
{
	struct jerr *e = (struct jerr *)ci->err;

	if (level < 0) { /* a warning: corrupt or truncated data */
		e->code = -EIO;
		longjmp(e->jb, 1);
	}
}

static void jerr_output(j_common_ptr ci)
{
}

static void jprogress(j_common_ptr ci)
{
	j_decompress_ptr di = (j_decompress_ptr)ci;

	if (ci->is_decompressor && di->input_scan_number > PREP__JPEG_MAX_SCANS) {
		struct jerr *e = (struct jerr *)ci->err;

		e->code = -EIO;
		longjmp(e->jb, 1);
	}
}

/* Does an EOI marker (FF D9) start within the last PREP__EOI_WINDOW bytes?
 * Entropy-coded data cannot contain FF D9 (an FF there is stuffed as
 * FF 00), so in a file cut inside its scan data these bytes never form one. */
static bool jpeg_has_eoi(const uint8_t *data, size_t len)
{
	if (len < 2)
		return false;
	size_t stop = len > PREP__EOI_WINDOW ? len - PREP__EOI_WINDOW : 0;

	for (size_t i = len - 2;; i--) {
		if (data[i] == 0xff && data[i + 1] == 0xd9)
			return true;
		if (i == stop)
			return false;
	}
}

static int decode_jpeg(const uint8_t *data, size_t len, struct dctx *d)
{
	struct jpeg_decompress_struct ci;
	struct jpeg_progress_mgr prog = {.progress_monitor = jprogress};
	struct jerr err;
	uint8_t *volatile scratch = NULL;
	volatile int rc = 0;

	memset(&ci, 0, sizeof(ci));
	ci.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = jerr_exit;
	err.pub.emit_message = jerr_emit;
	err.pub.output_message = jerr_output;
	err.code = 0;
	if (setjmp(err.jb)) {
		rc = err.code ? err.code : -EIO;
		goto out;
	}
	jpeg_create_decompress(&ci);
	ci.progress = &prog;
	ci.mem->max_memory_to_use = PREP__JPEG_MAX_MEM;
	jpeg_mem_src(&ci, data, (unsigned long)len);
	if (jpeg_read_header(&ci, TRUE) != JPEG_HEADER_OK) {
		rc = -EIO;
		goto out;
	}
	bool cmyk = false;
	switch (ci.jpeg_color_space) {
	case JCS_GRAYSCALE:
	case JCS_YCbCr:
	case JCS_RGB:
		ci.out_color_space = JCS_RGB;
		break;
	case JCS_CMYK:
	case JCS_YCCK:
		ci.out_color_space = JCS_CMYK;
		cmyk = true;
		break;
	default:
		rc = -EIO;
		goto out;
	}
	if ((rc = plan_scale(d, ci.image_width, ci.image_height, true)) < 0)
		goto out;
	ci.scale_num = d->M;
	ci.scale_denom = 8;
	ci.dct_method = JDCT_ISLOW;
	ci.do_fancy_upsampling = TRUE;
	jpeg_calc_output_dimensions(&ci);
	if ((rc = plan_region(d, ci.output_width, ci.output_height)) < 0)
		goto out;
	jpeg_start_decompress(&ci);

	unsigned sh = ci.output_height;
	/* One spare column each side: fancy upsampling is approximate at the
	 * edges of a cropped row, so the edges are kept out of the region. */
	JDIMENSION xoff = d->rx0 > 0 ? d->rx0 - 1 : 0;
	JDIMENSION cw = (d->rx1 < ci.output_width ? d->rx1 + 1 : ci.output_width) - xoff;
	if (cw < ci.output_width)
		jpeg_crop_scanline(&ci, &xoff, &cw);
	else
		xoff = 0;
	if ((rc = rows_alloc(d, ci.output_width, cmyk ? 4 : 3)) < 0)
		goto out;
	d->bx0 = xoff;
	if (d->ry0 > 0 && jpeg_skip_scanlines(&ci, d->ry0) != d->ry0) {
		rc = -EIO;
		goto out;
	}
	while (ci.output_scanline < d->ry1) {
		JSAMPROW row = row_slot(d);

		if (jpeg_read_scanlines(&ci, &row, 1) != 1) {
			rc = -EIO;
			goto out;
		}
		if (cmyk)
			cmyk_to_rgb(row, cw);
		row_push(d);
	}
	rows_flush(d);
	/* A truncated file must fail whatever the crop. When the data ends in
	 * an EOI marker (a cut file does not) the rows below the region are not
	 * decoded: jpeg_destroy_decompress aborts the decode. Otherwise the
	 * rest is consumed: skipped rows are entropy-decoded only. Skipping to
	 * the very bottom would decode nothing (libjpeg-turbo just declares
	 * EOI), so the last row is read for real. Progressive and multi-scan
	 * files have been read whole by jpeg_start_decompress already. */
	if (ci.output_scanline < sh && jpeg_has_eoi(data, len))
		goto out;
	if (ci.output_scanline < sh) {
		if (ci.output_scanline < sh - 1)
			jpeg_skip_scanlines(&ci, sh - 1 - ci.output_scanline);
		scratch = malloc(d->stride);
		if (!scratch) {
			rc = -ENOMEM;
			goto out;
		}
		JSAMPROW row = scratch;
		if (jpeg_read_scanlines(&ci, &row, 1) != 1) {
			rc = -EIO;
			goto out;
		}
	}
	jpeg_finish_decompress(&ci);
out:
	jpeg_destroy_decompress(&ci);
	free(scratch);
	return rc;
}

/* ---- PNG ---- */

struct pngsrc {
	const uint8_t *data;
	size_t len, pos;
};

static void png_read_mem(png_structp png, png_bytep out, size_t n)
{
	struct pngsrc *s = png_get_io_ptr(png);

	if (n > s->len - s->pos)
		png_error(png, "truncated");
	memcpy(out, s->data + s->pos, n);
	s->pos += n;
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

static int decode_png(const uint8_t *data, size_t len, struct dctx *d)
{
	png_structp png;
	png_infop info = NULL;
	struct pngsrc src = {data, len, 0};
	uint8_t *volatile row = NULL, *volatile whole = NULL;
	png_bytep *volatile rowp = NULL;
	volatile int rc = 0;

	png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, png_err, png_warn);
	if (!png)
		return -ENOMEM;
	info = png_create_info_struct(png);
	if (!info) {
		png_destroy_read_struct(&png, NULL, NULL);
		return -ENOMEM;
	}
	if (setjmp(png_jmpbuf(png))) {
		if (rc == 0)
			rc = -EIO;
		goto out;
	}
	png_set_user_limits(png, PREP_MAX_SIDE, PREP_MAX_SIDE);
	png_set_chunk_malloc_max(png, 16u << 20);
	png_set_read_fn(png, &src, png_read_mem);
	png_read_info(png, info);

	png_uint_32 W, H;
	int depth, ctype, interlace;
	png_get_IHDR(png, info, &W, &H, &depth, &ctype, &interlace, NULL, NULL);
	if ((rc = plan_scale(d, W, H, false)) < 0)
		goto out;
	if ((rc = plan_region(d, W, H)) < 0)
		goto out;
	if (ctype == PNG_COLOR_TYPE_PALETTE)
		png_set_palette_to_rgb(png);
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
	if ((rc = rows_alloc(d, d->rx1 - d->rx0, 3)) < 0)
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
		png_read_image(png, rowp);
		for (unsigned y = d->ry0; y < d->ry1; y++) {
			png_row_to_rgb(rowp[y], channels, odepth, d->rx0, d->rx1, row_slot(d));
			row_push(d);
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
			png_read_row(png, row, NULL);
			if (y >= d->ry0 && y < d->ry1) {
				png_row_to_rgb(row, channels, odepth, d->rx0, d->rx1, row_slot(d));
				row_push(d);
			}
		}
	}
	rows_flush(d);
	png_read_end(png, NULL);
out:
	png_destroy_read_struct(&png, &info, NULL);
	free(row);
	free(whole);
	free(rowp);
	return rc;
}

/* ---- PNM, BMP ---- */

static int decode_raw(const uint8_t *data, size_t len, struct dctx *d, bool bmp)
{
	struct raw_img *im = malloc(sizeof(*im));
	int rc;

	if (!im)
		return -ENOMEM;
	rc = bmp ? bmp_parse(data, len, im, true) : pnm_parse(data, len, im, true);
	if (rc == -ENODATA)
		rc = -EIO;
	if (rc == 0)
		rc = plan_scale(d, im->w, im->h, false);
	if (rc == 0)
		rc = plan_region(d, im->w, im->h);
	if (rc == 0)
		rc = rows_alloc(d, d->rx1 - d->rx0, 3);
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
			rc = raw_row(im, y, d->rx0, d->rx1, row_slot(d));
			row_push(d);
		}
		if (rc == 0)
			rows_flush(d);
	}
	free(im);
	return rc;
}

/* ---- TIFF ---- */

/*
 * The first image of a TIFF, in strips, uncompressed or in any compression
 * libtiff decodes but JPEG, with the sample layouts Pillow maps to L, 1,
 * RGB, RGBX, RGBA and P: 8-bit gray (MinIsBlack or MinIsWhite), bilevel,
 * 8-bit RGB (alone, or with an unspecified or unassociated fourth sample,
 * dropped as convert("RGB") does), 8-bit palette (16-bit colormap entries
 * taken as v / 256, as Pillow does), contiguous. Every row is read, as
 * Pillow does. Other layouts (tiles, 16-bit, YCbCr, CMYK, premultiplied
 * alpha, planar) give -EIO.
 */
struct tiffsrc {
	const uint8_t *data;
	size_t len, pos;
};

static tmsize_t tif_read(thandle_t h, void *buf, tmsize_t n)
{
	struct tiffsrc *s = h;

	if (n < 0 || s->pos >= s->len)
		return 0;
	size_t k = s->len - s->pos < (size_t)n ? s->len - s->pos : (size_t)n;
	memcpy(buf, s->data + s->pos, k);
	s->pos += k;
	return (tmsize_t)k;
}

static tmsize_t tif_write(thandle_t h, void *buf, tmsize_t n)
{
	return -1;
}

static toff_t tif_seek(thandle_t h, toff_t off, int whence)
{
	struct tiffsrc *s = h;
	uint64_t base = whence == SEEK_CUR ? s->pos : whence == SEEK_END ? s->len : 0;

	if (off > UINT64_MAX - base)
		return (toff_t)-1;
	s->pos = base + off > s->len ? s->len : (size_t)(base + off);
	return base + off;
}

static int tif_close(thandle_t h)
{
	return 0;
}

static toff_t tif_size(thandle_t h)
{
	return ((struct tiffsrc *)h)->len;
}

static int tif_map(thandle_t h, void **base, toff_t *size)
{
	struct tiffsrc *s = h;

	*base = (void *)s->data;
	*size = s->len;
	return 1;
}

static void tif_unmap(thandle_t h, void *base, toff_t size)
{
}

static int tif_quiet(TIFF *t, void *ud, const char *module, const char *fmt, va_list ap)
{
	return 1; /* handled: nothing prints */
}

enum tif_kind { TIF_GRAY, TIF_BILEVEL, TIF_RGB, TIF_PALETTE };

static int probe_tiff(const uint8_t *data, size_t len, unsigned *w, unsigned *h)
{
	struct tiffsrc src = {data, len, 0};
	TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
	uint32_t W = 0, H = 0;

	if (!opts)
		return -ENOMEM;
	TIFFOpenOptionsSetErrorHandlerExtR(opts, tif_quiet, NULL);
	TIFFOpenOptionsSetWarningHandlerExtR(opts, tif_quiet, NULL);
	TIFF *t = TIFFClientOpenExt("prep", "r", &src, tif_read, tif_write, tif_seek, tif_close,
				    tif_size, tif_map, tif_unmap, opts);
	TIFFOpenOptionsFree(opts);
	if (!t) /* the IFD or its arrays may lie past a prefix: read more */
		return -ENODATA;
	int ok = TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &W) && TIFFGetField(t, TIFFTAG_IMAGELENGTH, &H);
	TIFFClose(t);
	if (!ok)
		return -EIO;
	int rc = check_caps(W, H);
	if (rc == 0) {
		*w = W;
		*h = H;
	}
	return rc;
}

static int decode_tiff(const uint8_t *data, size_t len, struct dctx *d)
{
	struct tiffsrc src = {data, len, 0};
	TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
	uint8_t *line = NULL;
	uint8_t pal[256][3];
	int rc = -EIO;

	if (!opts)
		return -ENOMEM;
	TIFFOpenOptionsSetErrorHandlerExtR(opts, tif_quiet, NULL);
	TIFFOpenOptionsSetWarningHandlerExtR(opts, tif_quiet, NULL);
	TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)PREP__JPEG_MAX_MEM);
	TIFF *t = TIFFClientOpenExt("prep", "r", &src, tif_read, tif_write, tif_seek, tif_close,
				    tif_size, tif_map, tif_unmap, opts);
	TIFFOpenOptionsFree(opts);
	if (!t)
		return -EIO;
	uint32_t W = 0, H = 0;
	uint16_t bps = 1, spp = 1, photo = 0xffff, planar = PLANARCONFIG_CONTIG, comp = 1;
	uint16_t sfmt = SAMPLEFORMAT_UINT, nextra = 0, *extra = NULL;
	uint16_t *cmap[3] = {NULL, NULL, NULL};
	TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &W);
	TIFFGetField(t, TIFFTAG_IMAGELENGTH, &H);
	TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bps);
	TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &spp);
	TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
	TIFFGetFieldDefaulted(t, TIFFTAG_COMPRESSION, &comp);
	TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &sfmt);
	TIFFGetFieldDefaulted(t, TIFFTAG_EXTRASAMPLES, &nextra, &extra);
	if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &photo) || TIFFIsTiled(t) ||
	    comp == COMPRESSION_JPEG || comp == COMPRESSION_OJPEG || sfmt != SAMPLEFORMAT_UINT ||
	    (spp > 1 && planar != PLANARCONFIG_CONTIG))
		goto out;
	enum tif_kind kind;
	if ((photo == PHOTOMETRIC_MINISBLACK || photo == PHOTOMETRIC_MINISWHITE) && spp == 1 &&
	    nextra == 0 && (bps == 8 || bps == 1)) {
		kind = bps == 8 ? TIF_GRAY : TIF_BILEVEL;
	} else if (photo == PHOTOMETRIC_RGB && bps == 8 &&
		   ((spp == 3 && nextra == 0) ||
		    (spp == 4 && nextra == 1 &&
		     (extra[0] == EXTRASAMPLE_UNSPECIFIED || extra[0] == EXTRASAMPLE_UNASSALPHA)))) {
		kind = TIF_RGB;
	} else if (photo == PHOTOMETRIC_PALETTE && bps == 8 && spp == 1 && nextra == 0 &&
		   TIFFGetField(t, TIFFTAG_COLORMAP, &cmap[0], &cmap[1], &cmap[2])) {
		kind = TIF_PALETTE;
		for (unsigned i = 0; i < 256; i++)
			for (unsigned c = 0; c < 3; c++)
				pal[i][c] = (uint8_t)(cmap[c][i] / 256);
	} else {
		goto out;
	}
	bool invert = photo == PHOTOMETRIC_MINISWHITE;
	if ((rc = plan_scale(d, W, H, false)) < 0 || (rc = plan_region(d, W, H)) < 0 ||
	    (rc = rows_alloc(d, d->rx1 - d->rx0, 3)) < 0)
		goto out;
	tmsize_t ls = TIFFScanlineSize(t);
	if (ls <= 0 || (uint64_t)ls < ((uint64_t)W * spp * bps + 7) / 8) {
		rc = -EIO;
		goto out;
	}
	if (!(line = malloc((size_t)ls))) {
		rc = -ENOMEM;
		goto out;
	}
	d->bx0 = d->rx0;
	for (uint32_t y = 0; y < H; y++) {
		if (TIFFReadScanline(t, line, y, 0) < 0) {
			rc = -EIO;
			goto out;
		}
		if (y < d->ry0 || y >= d->ry1)
			continue;
		uint8_t *dst = row_slot(d);
		for (unsigned x = d->rx0; x < d->rx1; x++, dst += 3) {
			uint8_t v;
			switch (kind) {
			case TIF_GRAY:
				v = invert ? (uint8_t)(255 - line[x]) : line[x];
				dst[0] = dst[1] = dst[2] = v;
				break;
			case TIF_BILEVEL:
				v = (line[x / 8] >> (7 - x % 8)) & 1 ? 255 : 0;
				dst[0] = dst[1] = dst[2] = invert ? (uint8_t)(255 - v) : v;
				break;
			case TIF_RGB:
				memcpy(dst, line + (size_t)x * spp, 3);
				break;
			case TIF_PALETTE:
				memcpy(dst, pal[line[x]], 3);
				break;
			}
		}
		row_push(d);
	}
	rows_flush(d);
	rc = 0;
out:
	free(line);
	TIFFClose(t);
	return rc;
}

/* ---- WebP ---- */

/*
 * A still WebP (lossy, lossless, with or without alpha) decoded whole by
 * libwebp to RGB: Pillow decodes it with the same library (to RGBA or RGBX,
 * whose colour bytes are the same) and drops alpha in convert("RGB").
 * Animated files give -EIO (Pillow shows their first frame composited on a
 * canvas; not claimed).
 */
static int decode_webp(const uint8_t *data, size_t len, struct dctx *d)
{
	WebPBitstreamFeatures f;
	uint8_t *rgb = NULL;
	int rc;

	if (WebPGetFeatures(data, len, &f) != VP8_STATUS_OK || f.has_animation)
		return -EIO;
	if ((rc = plan_scale(d, (unsigned)f.width, (unsigned)f.height, false)) < 0 ||
	    (rc = plan_region(d, (unsigned)f.width, (unsigned)f.height)) < 0 ||
	    (rc = rows_alloc(d, d->rx1 - d->rx0, 3)) < 0)
		return rc;
	size_t stride = (size_t)f.width * 3;
	rgb = malloc(stride * (size_t)f.height + PREP__PAD);
	if (!rgb)
		return -ENOMEM;
	if (!WebPDecodeRGBInto(data, len, rgb, stride * (size_t)f.height, (int)stride)) {
		free(rgb);
		return -EIO;
	}
	d->bx0 = d->rx0;
	for (unsigned y = d->ry0; y < d->ry1; y++) {
		memcpy(row_slot(d), rgb + y * stride + (size_t)d->rx0 * 3,
		       (size_t)(d->rx1 - d->rx0) * 3);
		row_push(d);
	}
	rows_flush(d);
	free(rgb);
	return 0;
}

static int decode_any(const void *data, size_t len, struct dctx *d)
{
	switch (prep__sniff(data, len)) {
	case PREP__JPEG:
		return decode_jpeg(data, len, d);
	case PREP__PNG:
		return decode_png(data, len, d);
	case PREP__BMP:
		return decode_raw(data, len, d, true);
	case PREP__PNM:
		return pnm_magic(data, len) ? decode_raw(data, len, d, false) : -EIO;
	case PREP__WEBP:
		return decode_webp(data, len, d);
	case PREP__TIFF:
		return decode_tiff(data, len, d);
	default:
		return -EINVAL;
	}
}

/* The output PPM of geometry g, its header written: *hlen header bytes
 * of *total. 0, -EFBIG or -ENOMEM. */
static int ppm_alloc(const struct prep__geom *g, uint8_t **ppm, size_t *hlen, size_t *total)
{
	char hdr[48];

	if ((uint64_t)g->ow * g->oh > PREP_MAX_OUT_PIXELS)
		return -EFBIG;
	*hlen = prep__ppm_header(g->ow, g->oh, hdr);
	*total = *hlen + (size_t)g->ow * g->oh * 3;
	if (!(*ppm = malloc(*total)))
		return -ENOMEM;
	memcpy(*ppm, hdr, *hlen);
	return 0;
}

int prep__render_geom(const void *data, size_t len, prep__plan_fn plan, void *arg,
		      unsigned scale_num, uint8_t **out_ppm, size_t *out_len)
{
	struct dctx d;
	uint8_t *ppm = NULL;
	int rc;

	if (!data || !plan || !out_ppm || !out_len)
		return -EINVAL;
	memset(&d, 0, sizeof(d));
	d.plan = plan;
	d.arg = arg;
	d.scale_num = scale_num;
	if ((rc = decode_any(data, len, &d)) < 0)
		goto out;
	size_t hlen, total;
	if ((rc = ppm_alloc(&d.g, &ppm, &hlen, &total)) < 0)
		goto out;
	rc = prep__vpass(d.tmp, &d.cx, &d.cy, d.g.flip, ppm + hlen, (size_t)d.g.ow * 3, true);
	if (rc < 0)
		goto out;
	*out_ppm = ppm;
	*out_len = total;
	ppm = NULL;
out:
	free(ppm);
	prep__scratch_put(d.buf, d.buf_cap);
	prep__scratch_put(d.tmp, d.tmp_cap);
	prep__coeffs_free(&d.cx);
	prep__coeffs_free(&d.cy);
	return rc;
}

int prep__decode_full(const void *data, size_t len, struct prep__image *out)
{
	return prep__decode_scaled(data, len, 8, out);
}

int prep__decode_scaled(const void *data, size_t len, unsigned M, struct prep__image *out)
{
	return prep__decode_scaled_into(data, len, M, NULL, 0, out);
}

int prep__decode_scaled_into(const void *data, size_t len, unsigned M, uint8_t *dst, size_t cap,
			     struct prep__image *out)
{
	struct dctx d;
	int rc;

	if (!data || !out || M < 1 || M > 8)
		return -EINVAL;
	memset(&d, 0, sizeof(d));
	d.full = true;
	d.scale_num = M;
	d.dst = dst;
	d.dst_cap = cap;
	if ((rc = decode_any(data, len, &d)) < 0) {
		if (d.buf != dst)
			free(d.buf);
		return rc;
	}
	/* Pack rows to w*3 (CMYK rows keep a 4-byte stride). */
	size_t row = (size_t)d.rx1 * 3;
	if (d.stride != row)
		for (unsigned y = 1; y < d.ry1; y++)
			memmove(d.buf + y * row, d.buf + y * d.stride, row);
	if (dst && d.buf != dst) { /* decoded at a wider stride than dst holds */
		if (row * d.ry1 + PREP__PAD > cap) {
			free(d.buf);
			return -ENOSPC;
		}
		memcpy(dst, d.buf, row * d.ry1);
		free(d.buf);
		d.buf = dst;
	}
	out->w = d.rx1; /* the scaled size: libjpeg's ceil(W * M / 8) */
	out->h = d.ry1;
	out->rgb = d.buf;
	out->scale = d.M;
	return 0;
}

uint64_t prep__scaled_bytes(unsigned W, unsigned H, unsigned M)
{
	/* libjpeg's scaled size: ceil(W * M / 8) */
	uint64_t sw = ((uint64_t)W * M + 7) / 8, sh = ((uint64_t)H * M + 7) / 8;

	return sw * sh * 3 + PREP__PAD;
}

int prep__render_pixels(const struct prep__image *img, unsigned W, unsigned H, prep__plan_fn plan,
			void *arg, uint8_t **out_ppm, size_t *out_len)
{
	struct dctx d;
	uint8_t *ppm = NULL;
	int rc;

	if (!img || !img->rgb || !plan || !out_ppm || !out_len)
		return -EINVAL;
	memset(&d, 0, sizeof(d));
	d.plan = plan;
	d.arg = arg;
	/* The same steps as a decode of the file at img->scale: the geometry
	 * of the source size, then the coefficients (and so the region) on the
	 * scaled size; the region's pixels are already here. */
	d.scale_num = img->scale;
	if ((rc = plan_scale(&d, W, H, true)) < 0)
		goto out;
	if ((rc = plan_region(&d, img->w, img->h)) < 0)
		goto out;
	size_t hlen, total;
	if ((rc = ppm_alloc(&d.g, &ppm, &hlen, &total)) < 0)
		goto out;
	rc = prep__resample(img->rgb, (size_t)img->w * 3, 0, 0, &d.cx, &d.cy, d.g.flip, ppm + hlen,
			    (size_t)d.g.ow * 3);
	if (rc < 0)
		goto out;
	*out_ppm = ppm;
	*out_len = total;
	ppm = NULL;
out:
	free(ppm);
	prep__coeffs_free(&d.cx);
	prep__coeffs_free(&d.cy);
	return rc;
}
