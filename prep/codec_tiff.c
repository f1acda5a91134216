/* SPDX-License-Identifier: MIT */
/*
 * TIFF through libtiff, reading the caller's buffer in place; its messages
 * are swallowed per handle.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>

#include "prep/codec.h"
#include "prep/sink.h"

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

/* libtiff on the buffer, quiet, no single allocation over the JPEG cap;
 * NULL when it cannot open it. */
static TIFF *tif_open(struct tiffsrc *src)
{
	TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();

	if (!opts)
		return NULL;
	TIFFOpenOptionsSetErrorHandlerExtR(opts, tif_quiet, NULL);
	TIFFOpenOptionsSetWarningHandlerExtR(opts, tif_quiet, NULL);
	TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)PREP__JPEG_MAX_MEM);
	TIFF *t = TIFFClientOpenExt("prep", "r", src, tif_read, tif_write, tif_seek, tif_close,
				    tif_size, tif_map, tif_unmap, opts);
	TIFFOpenOptionsFree(opts);
	return t;
}

enum tif_kind { TIF_GRAY, TIF_BILEVEL, TIF_RGB, TIF_PALETTE };

/* The Orientation tag, 1 (rows top to bottom, left to right) when absent
 * or out of range. Pillow applies it when it loads a TIFF (a transpose in
 * load_end: 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90
 * clockwise, 7 transverse, 8 rotate 90 counter-clockwise), so the image
 * PIL gives, and the sample, is the oriented one: 5-8 swap its sides. */
static unsigned tif_orientation(TIFF *t)
{
	uint16_t o = ORIENTATION_TOPLEFT;

	TIFFGetField(t, TIFFTAG_ORIENTATION, &o);
	return o >= 2 && o <= 8 ? o : 1;
}

/* TIFF: width and length of the first image, through libtiff. The IFD may
 * lie anywhere in the file (libtiff writes it after the data), so a buffer
 * libtiff cannot open gives -ENODATA: the caller retries with the whole
 * file, where a failure is final. */
static int probe_tiff(const uint8_t *data, size_t len, unsigned *w, unsigned *h)
{
	struct tiffsrc src = {data, len, 0};
	uint32_t W = 0, H = 0;
	TIFF *t = tif_open(&src);

	if (!t) /* the IFD or its arrays may lie past a prefix: read more */
		return -ENODATA;
	int ok = TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &W) && TIFFGetField(t, TIFFTAG_IMAGELENGTH, &H);
	bool swap = tif_orientation(t) >= 5;
	TIFFClose(t);
	if (!ok)
		return -EIO;
	int rc = prep__check_caps(W, H);
	if (rc == 0) {
		*w = swap ? H : W;
		*h = swap ? W : H;
	}
	return rc;
}

/* How one scanline of a TIFF becomes RGB. */
struct tif_layout {
	enum tif_kind kind;
	bool invert; /* MinIsWhite */
	unsigned spp;
	uint8_t pal[256][3];
};

/* Columns [x0, x1) of a scanline to RGB at dst. */
static void tif_row_rgb(const struct tif_layout *l, const uint8_t *line, unsigned x0, unsigned x1,
			uint8_t *dst)
{
	for (unsigned x = x0; x < x1; x++, dst += 3) {
		uint8_t v;
		switch (l->kind) {
		case TIF_GRAY:
			v = l->invert ? (uint8_t)(255 - line[x]) : line[x];
			dst[0] = dst[1] = dst[2] = v;
			break;
		case TIF_BILEVEL:
			v = (line[x / 8] >> (7 - x % 8)) & 1 ? 255 : 0;
			dst[0] = dst[1] = dst[2] = l->invert ? (uint8_t)(255 - v) : v;
			break;
		case TIF_RGB:
			memcpy(dst, line + (size_t)x * l->spp, 3);
			break;
		case TIF_PALETTE:
			memcpy(dst, l->pal[line[x]], 3);
			break;
		}
	}
}

/* The stored pixel (W x H) that oriented pixel (x, y) shows, as Pillow's
 * transposes place it. */
static const uint8_t *tif_oriented_px(const uint8_t *img, unsigned W, unsigned H, unsigned o,
				      unsigned x, unsigned y)
{
	unsigned sx, sy;

	switch (o) {
	case 2:
		sx = W - 1 - x;
		sy = y;
		break;
	case 3:
		sx = W - 1 - x;
		sy = H - 1 - y;
		break;
	case 4:
		sx = x;
		sy = H - 1 - y;
		break;
	case 5:
		sx = y;
		sy = x;
		break;
	case 6:
		sx = y;
		sy = H - 1 - x;
		break;
	case 7:
		sx = W - 1 - y;
		sy = H - 1 - x;
		break;
	default:
		sx = W - 1 - y;
		sy = x;
		break; /* 8 */
	}
	return img + ((size_t)sy * W + sx) * 3;
}

/* An oriented TIFF: every stored row to RGB in img (W x H), then the
 * region's oriented rows to the sink. */
static int tif_read_oriented(TIFF *t, const struct tif_layout *l, uint8_t *line, unsigned W,
			     unsigned H, unsigned o, struct prep__sink *d)
{
	uint8_t *img = malloc((size_t)W * H * 3);

	if (!img)
		return -ENOMEM;
	for (uint32_t y = 0; y < H; y++) {
		if (TIFFReadScanline(t, line, y, 0) < 0) {
			free(img);
			return -EIO;
		}
		tif_row_rgb(l, line, 0, W, img + (size_t)y * W * 3);
	}
	for (unsigned y = d->ry0; y < d->ry1; y++) {
		uint8_t *dst = prep__sink_row(d);
		for (unsigned x = d->rx0; x < d->rx1; x++, dst += 3)
			memcpy(dst, tif_oriented_px(img, W, H, o, x, y), 3);
		prep__sink_push(d);
	}
	free(img);
	return 0;
}

static int decode_tiff(const uint8_t *data, size_t len, struct prep__sink *d)
{
	struct tiffsrc src = {data, len, 0};
	uint8_t *line = NULL;
	struct tif_layout l;
	int rc = -EIO;
	TIFF *t = tif_open(&src);

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
	enum tif_kind kind = TIF_GRAY;
	if ((photo == PHOTOMETRIC_MINISBLACK || photo == PHOTOMETRIC_MINISWHITE) && spp == 1 &&
	    nextra == 0 && (bps == 8 || bps == 1)) {
		kind = bps == 8 ? TIF_GRAY : TIF_BILEVEL;
	} else if (photo == PHOTOMETRIC_RGB && bps == 8 &&
		   ((spp == 3 && nextra == 0) || (spp == 4 && nextra == 1 &&
						  (extra[0] == EXTRASAMPLE_UNSPECIFIED ||
						   extra[0] == EXTRASAMPLE_UNASSALPHA)))) {
		kind = TIF_RGB;
	} else if (photo == PHOTOMETRIC_PALETTE && bps == 8 && spp == 1 && nextra == 0 &&
		   TIFFGetField(t, TIFFTAG_COLORMAP, &cmap[0], &cmap[1], &cmap[2])) {
		kind = TIF_PALETTE;
		for (unsigned i = 0; i < 256; i++)
			for (unsigned c = 0; c < 3; c++)
				l.pal[i][c] = (uint8_t)(cmap[c][i] / 256);
	} else {
		goto out;
	}
	l.kind = kind;
	l.invert = photo == PHOTOMETRIC_MINISWHITE;
	l.spp = spp;
	unsigned o = tif_orientation(t);
	unsigned OW = o >= 5 ? H : W, OH = o >= 5 ? W : H;
	if ((rc = prep__sink_scale(d, OW, OH, false)) < 0 ||
	    (rc = prep__sink_region(d, OW, OH)) < 0 ||
	    (rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3)) < 0)
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
	if (o != 1) {
		if ((rc = tif_read_oriented(t, &l, line, W, H, o, d)) < 0)
			goto out;
	} else {
		for (uint32_t y = 0; y < H; y++) {
			if (TIFFReadScanline(t, line, y, 0) < 0) {
				rc = -EIO;
				goto out;
			}
			if (y < d->ry0 || y >= d->ry1)
				continue;
			tif_row_rgb(&l, line, d->rx0, d->rx1, prep__sink_row(d));
			prep__sink_push(d);
		}
	}
	prep__sink_flush(d);
	rc = 0;
out:
	free(line);
	TIFFClose(t);
	return rc;
}

static bool sniff_tiff(const uint8_t *p, size_t len)
{
	return len >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0);
}

/* What libtiff may hold while the rows are read: one decoded strip (some
 * codecs decode a strip at once), a copy of a raw strip (in a bit-reversed
 * fill order; else it is read in place: never more than the file), the
 * strip arrays, a row. From the file's strips: a strip may be the whole
 * image, but most writers cut ~8-64 KiB strips, and counting the whole
 * image for those failed a 100-Mpixel TIFF under a --prep-mem that reads
 * it easily. A file libtiff cannot open here counts as the whole image. */
static uint64_t work_tiff(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	uint64_t whole = (uint64_t)W * H * 4 + (uint64_t)W * 8 + (64u << 10);
	struct tiffsrc src = {p, len, 0};
	TIFF *t = tif_open(&src);

	if (!t)
		return whole;
	uint64_t strip = TIFFIsTiled(t) ? 0 : TIFFStripSize64(t), raw = 0;
	uint32_t ns = TIFFNumberOfStrips(t);
	for (uint32_t i = 0; i < ns && strip; i++) {
		uint64_t b = TIFFGetStrileByteCount(t, i);
		raw = b > raw ? b : raw;
	}
	raw = raw < len ? raw : len;
	uint64_t n = strip + raw + (uint64_t)ns * 16 + (uint64_t)W * 8 + (64u << 10);
	uint64_t oriented = tif_orientation(t) != 1 ? (uint64_t)W * H * 3 : 0; /* the RGB image */
	TIFFClose(t);
	return (strip && n < whole ? n : whole) + oriented;
}

const struct prep__codec prep__codec_tiff = {
    .format = PREP__TIFF,
    .sniff = sniff_tiff,
    .probe = probe_tiff,
    .work_mem = work_tiff,
    .decode = decode_tiff,
};
