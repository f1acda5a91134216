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
 * The first image of a TIFF, in strips or tiles, in any compression libtiff
 * decodes (JPEG included; old-style JPEG not), contiguous (or 8-bit
 * samples in separate planes, strips only), with the sample
 * layouts of Pillow's OPEN_INFO table that end in L, 1, I;16, LA, RGB, RGBX,
 * RGBA, CMYK, P or PA, converted as its convert("RGB") does: gray of 1, 2, 4
 * or 8 bits (MinIsWhite inverted; 2/4 bits scaled by 85/17), 16-bit gray
 * (mode I;16, clipped to 255, never inverted: Pillow's table maps
 * MinIsWhite 16-bit to plain I;16), gray + unassociated alpha, RGB of 8 bits
 * (3 samples, or with the extra samples Pillow names: none, unspecified, or
 * unassociated alpha first then unspecified; alpha dropped) or 16 bits
 * (high byte), 8-bit CMYK (ink, as Pillow's cmyk2rgb), palette of 1-8 bits
 * (16-bit colormap entries taken as v / 256, as Pillow does) with or without
 * unassociated alpha, and YCbCr compressed as JPEG, which libtiff's JPEG
 * codec turns into RGB as Pillow has it do. Every row is read, as Pillow
 * does; premultiplied RGBA (8-bit) as Pillow's RGBa unpacker divides it;
 * separate 8-bit planes (strips) read plane by plane. Other layouts
 * (uncompressed YCbCr, 16-bit CMYK or palette, LAB, float, 12 or 32 bits,
 * tiled or 16-bit planes, which Pillow reads as bytes) give -EIO.
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

enum tif_kind { TIF_GRAY, TIF_GRAY16, TIF_RGB, TIF_RGBA_PREMUL, TIF_RGB16, TIF_CMYK, TIF_PALETTE };

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
	bool invert;   /* MinIsWhite */
	unsigned spp;  /* samples per pixel: the first ones are used */
	unsigned bits; /* per sample: 1, 2, 4 or 8 (gray, palette), 8 or 16 */
	uint8_t pal[256][3];
};

/* Sample x of a row of 1, 2, 4 or 8-bit samples, spp per pixel. */
static unsigned tif_sample(const uint8_t *line, unsigned bits, size_t i)
{
	if (bits == 8)
		return line[i];
	unsigned per = 8 / bits;

	return (line[i / per] >> (8 - bits - (unsigned)(i % per) * bits)) & ((1u << bits) - 1);
}

/* Columns [x0, x1) of a scanline to RGB at dst. */
static void tif_row_rgb(const struct tif_layout *l, const uint8_t *line, unsigned x0, unsigned x1,
			uint8_t *dst)
{
	/* Pillow's unpackers: L;1 (bilevel) gives 0/255, L;2 v * 85, L;4 v * 17 */
	static const unsigned scale[9] = {0, 255, 85, 0, 17, 0, 0, 0, 1};

	for (unsigned x = x0; x < x1; x++, dst += 3) {
		const uint16_t *w = (const uint16_t *)(const void *)line + (size_t)x * l->spp;
		unsigned v;
		switch (l->kind) {
		case TIF_GRAY:
			v = tif_sample(line, l->bits, (size_t)x * l->spp) * scale[l->bits];
			dst[0] = dst[1] = dst[2] = (uint8_t)(l->invert ? 255 - v : v);
			break;
		case TIF_GRAY16: /* I;16 -> RGB clips */
			dst[0] = dst[1] = dst[2] = (uint8_t)(w[0] > 255 ? 255 : w[0]);
			break;
		case TIF_RGB:
			memcpy(dst, line + (size_t)x * l->spp, 3);
			break;
		case TIF_RGBA_PREMUL: { /* Pillow's RGBa unpacker: c * 255 / a */
			const uint8_t *p = line + (size_t)x * l->spp;
			for (int c = 0; c < 3; c++) {
				unsigned o = p[3] ? p[c] * 255u / p[3] : 0;
				dst[c] = (uint8_t)(o > 255 ? 255 : o);
			}
			break;
		}
		case TIF_RGB16: /* RGB;16N: the high byte */
			for (int c = 0; c < 3; c++)
				dst[c] = (uint8_t)(w[c] >> 8);
			break;
		case TIF_CMYK: /* ink not inverted */
			prep__cmyk_to_rgb(line + (size_t)x * l->spp, dst);
			break;
		case TIF_PALETTE:
			memcpy(dst, l->pal[tif_sample(line, l->bits, (size_t)x * l->spp)], 3);
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
	case 1:
		sx = x;
		sy = y;
		break;
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

/* A planar image's 8-bit samples (W x H x l->spp), interleaved in raw:
 * each plane read whole in turn (plane by plane, a compressed strip is
 * decoded once), then every row to RGB in img. */
static int tif_read_planar(TIFF *t, const struct tif_layout *l, uint8_t *line, unsigned W,
			   unsigned H, uint8_t *img)
{
	size_t px = l->spp;
	uint8_t *raw = malloc((size_t)W * H * px + PREP__PAD);

	if (!raw)
		return -ENOMEM;
	for (unsigned c = 0; c < l->spp; c++) {
		for (uint32_t y = 0; y < H; y++) {
			if (TIFFReadScanline(t, line, y, (uint16_t)c) < 0) {
				free(raw);
				return -EIO;
			}
			uint8_t *o = raw + (size_t)y * W * px + c;
			for (unsigned x = 0; x < W; x++, o += px)
				*o = line[x];
		}
	}
	for (uint32_t y = 0; y < H; y++)
		tif_row_rgb(l, raw + (size_t)y * W * px, 0, W, img + (size_t)y * W * 3);
	free(raw);
	return 0;
}

/* Every stored pixel to RGB in img (W x H), from the strips' rows or the
 * tiles (line holds a scanline or a tile). */
static int tif_read_image(TIFF *t, const struct tif_layout *l, uint8_t *line, unsigned W,
			  unsigned H, uint8_t *img)
{
	uint16_t planar = PLANARCONFIG_CONTIG;

	TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
	if (planar == PLANARCONFIG_SEPARATE && l->spp > 1)
		return tif_read_planar(t, l, line, W, H, img);
	if (!TIFFIsTiled(t)) {
		for (uint32_t y = 0; y < H; y++) {
			if (TIFFReadScanline(t, line, y, 0) < 0)
				return -EIO;
			tif_row_rgb(l, line, 0, W, img + (size_t)y * W * 3);
		}
		return 0;
	}
	uint32_t tw = 0, th = 0;
	TIFFGetField(t, TIFFTAG_TILEWIDTH, &tw);
	TIFFGetField(t, TIFFTAG_TILELENGTH, &th);
	tmsize_t rs = TIFFTileRowSize(t);
	if (tw == 0 || th == 0 || rs <= 0)
		return -EIO;
	for (uint32_t ty = 0; ty < H; ty += th) {
		for (uint32_t tx = 0; tx < W; tx += tw) {
			if (TIFFReadTile(t, line, tx, ty, 0, 0) < 0)
				return -EIO;
			unsigned cw = W - tx < tw ? W - tx : tw;
			for (uint32_t y = 0; y < th && ty + y < H; y++)
				tif_row_rgb(l, line + (size_t)y * (size_t)rs, 0, cw,
					    img + ((size_t)(ty + y) * W + tx) * 3);
		}
	}
	return 0;
}

/* A tiled or oriented TIFF: the whole image to RGB, then the region's
 * oriented rows to the sink. */
static int tif_read_whole(TIFF *t, const struct tif_layout *l, uint8_t *line, unsigned W,
			  unsigned H, unsigned o, struct prep__sink *d)
{
	uint8_t *img = malloc((size_t)W * H * 3);
	int rc;

	if (!img)
		return -ENOMEM;
	if ((rc = tif_read_image(t, l, line, W, H, img)) < 0) {
		free(img);
		return rc;
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

/* The layout of Pillow's OPEN_INFO this image has, in l (extra samples
 * as Pillow names them: 0 unspecified, 1 associated, 2 unassociated
 * alpha); false when Pillow has none or it is one not decoded here. */
static bool tif_layout_of(TIFF *t, uint16_t photo, uint16_t bps, uint16_t spp, uint16_t nextra,
			  const uint16_t *extra, uint16_t comp, struct tif_layout *l)
{
	uint16_t *cmap[3] = {NULL, NULL, NULL};
	unsigned base = spp - nextra;
	bool unassoc = nextra >= 1 && extra[0] == EXTRASAMPLE_UNASSALPHA;
	bool assoc = nextra >= 1 && extra[0] == EXTRASAMPLE_ASSOCALPHA;

	/* past the first extra sample, Pillow knows only unspecified ones */
	for (unsigned i = 1; i < nextra; i++)
		if (extra[i] != EXTRASAMPLE_UNSPECIFIED)
			return false;
	l->invert = photo == PHOTOMETRIC_MINISWHITE;
	l->spp = spp;
	l->bits = bps;
	switch (photo) {
	case PHOTOMETRIC_MINISBLACK:
	case PHOTOMETRIC_MINISWHITE:
		if (spp == 1 && (bps == 1 || bps == 2 || bps == 4 || bps == 8))
			l->kind = TIF_GRAY;
		else if (spp == 1 && bps == 16)
			l->kind = TIF_GRAY16;
		else if (spp == 2 && nextra == 1 && unassoc && bps == 8 &&
			 photo == PHOTOMETRIC_MINISBLACK)
			l->kind = TIF_GRAY; /* LA */
		else
			return false;
		return true;
	case PHOTOMETRIC_RGB:
		/* RGB, RGBA without ExtraSamples, RGBX..., RGBA... */
		if (base == 3 && spp <= 6 && assoc && bps == 8) { /* RGBa */
			l->kind = TIF_RGBA_PREMUL;
			return true;
		}
		if (base != 3 || spp > 6 || (bps == 16 && spp > 4) ||
		    (nextra >= 1 && extra[0] != EXTRASAMPLE_UNSPECIFIED && !unassoc) ||
		    (spp == 4 && nextra == 0 && bps == 16))
			return spp == 4 && nextra == 0 && bps == 8 ? (l->kind = TIF_RGB, true) : false;
		if (bps == 8)
			l->kind = TIF_RGB;
		else if (bps == 16)
			l->kind = TIF_RGB16;
		else
			return false;
		return true;
	case PHOTOMETRIC_SEPARATED:
		if (bps != 8 || base != 4 || spp > 6 ||
		    (nextra >= 1 && extra[0] != EXTRASAMPLE_UNSPECIFIED))
			return false;
		l->kind = TIF_CMYK;
		return true;
	case PHOTOMETRIC_YCBCR:
		/* compressed as JPEG, contiguous: libtiff's JPEG codec gives
		 * RGB, as Pillow has it do (JPEGCOLORMODE_RGB) */
		if (comp != COMPRESSION_JPEG || bps != 8 || spp != 3 ||
		    !TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB))
			return false;
		l->kind = TIF_RGB;
		return true;
	case PHOTOMETRIC_PALETTE:
		if (!(bps == 1 || bps == 2 || bps == 4 || bps == 8) ||
		    !(spp == 1 || (spp == 2 && bps == 8 && nextra == 1 && unassoc)) ||
		    !TIFFGetField(t, TIFFTAG_COLORMAP, &cmap[0], &cmap[1], &cmap[2]))
			return false;
		l->kind = TIF_PALETTE;
		memset(l->pal, 0, sizeof(l->pal));
		for (unsigned i = 0; i < 1u << bps; i++)
			for (unsigned c = 0; c < 3; c++)
				l->pal[i][c] = (uint8_t)(cmap[c][i] / 256);
		return true;
	default:
		return false;
	}
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
	TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &W);
	TIFFGetField(t, TIFFTAG_IMAGELENGTH, &H);
	TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bps);
	TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &spp);
	TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
	TIFFGetFieldDefaulted(t, TIFFTAG_COMPRESSION, &comp);
	TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &sfmt);
	TIFFGetFieldDefaulted(t, TIFFTAG_EXTRASAMPLES, &nextra, &extra);
	if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &photo) || comp == COMPRESSION_OJPEG ||
	    sfmt != SAMPLEFORMAT_UINT ||
	    (spp > 1 && planar != PLANARCONFIG_CONTIG && (TIFFIsTiled(t) || bps != 8)) ||
	    nextra >= spp || !tif_layout_of(t, photo, bps, spp, nextra, extra, comp, &l))
		goto out;
	/* Pillow reads separate planes band by band with one-letter raw
	 * modes: 16-bit samples as bytes, and "a" or YCbCr not at all */
	if (spp > 1 && planar != PLANARCONFIG_CONTIG &&
	    (l.kind == TIF_RGBA_PREMUL || photo == PHOTOMETRIC_YCBCR))
		goto out;
	unsigned o = tif_orientation(t);
	unsigned OW = o >= 5 ? H : W, OH = o >= 5 ? W : H;
	if ((rc = prep__sink_scale(d, OW, OH, false)) < 0 ||
	    (rc = prep__sink_region(d, OW, OH)) < 0 ||
	    (rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3)) < 0)
		goto out;
	bool tiled = TIFFIsTiled(t);
	uint32_t tw = 0;
	if (tiled)
		TIFFGetField(t, TIFFTAG_TILEWIDTH, &tw);
	/* separate planes: a scanline holds one sample of each pixel */
	bool sep = spp > 1 && planar == PLANARCONFIG_SEPARATE;
	unsigned lspp = sep ? 1 : spp;
	tmsize_t ls = tiled ? TIFFTileSize(t) : TIFFScanlineSize(t);
	if (ls <= 0 || (tiled && (tw == 0 || TIFFTileRowSize(t) <
					      ((tmsize_t)tw * spp * bps + 7) / 8)) ||
	    (!tiled && (uint64_t)ls < ((uint64_t)W * lspp * bps + 7) / 8)) {
		rc = -EIO;
		goto out;
	}
	if (!(line = malloc((size_t)ls))) {
		rc = -ENOMEM;
		goto out;
	}
	d->bx0 = d->rx0;
	if (o != 1 || tiled || sep) {
		if ((rc = tif_read_whole(t, &l, line, W, H, o, d)) < 0)
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
	/* an oriented, tiled or planar image is read whole to RGB first (a
	 * planar one's samples whole too, up to 6 bytes a pixel) */
	uint16_t planar = PLANARCONFIG_CONTIG;
	TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
	uint64_t oriented = tif_orientation(t) != 1 || TIFFIsTiled(t) || planar != PLANARCONFIG_CONTIG
				? (uint64_t)W * H * 3
				: 0;
	if (planar != PLANARCONFIG_CONTIG)
		oriented += (uint64_t)W * H * 6;
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
