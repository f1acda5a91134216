/* SPDX-License-Identifier: MIT */
/*
 * Binary PNM and uncompressed BMP, the layouts Pillow reads with its raw
 * decoder: rows are read in place from the file's buffer, as Pillow reads
 * them. Two codecs (PNM, BMP) over one row reader.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prep/codec.h"
#include "prep/prep.h"
#include "prep/sink.h"

/* ---- PNM and BMP: uncompressed rows, read where they lie ---- */

/*
 * The layouts Pillow reads with its raw decoder, decoded as it does:
 * binary PBM (P4), PGM (P5) and PPM (P6), any maxval (scaled as Pillow's
 * PpmDecoder does, pnm_sample); BMP with a 12,
 * 40, 64, 108 or 124-byte header, 1/4/8-bit palette, 16-bit (BI_RGB 5-5-5,
 * or BI_BITFIELDS 5-6-5 or 5-5-5, as Pillow's BGR;16 and BGR;15 unpackers
 * scale them), 24-bit BGR and 32-bit pixels (BI_RGB, or BI_BITFIELDS with
 * the byte-aligned masks Pillow knows), bottom-up or top-down; and RLE8 and
 * RLE4 BMP, run through Pillow's BmpRleDecoder's steps (bmp_rle) into an
 * index image first; plain-text PBM, PGM and PPM (P1-P3) through the
 * steps of Pillow's PpmPlainDecoder (pnm_plain) into bytes first.
 */
struct raw_img {
	const uint8_t *data; /* first byte of pixel data */
	size_t stride;	     /* bytes per stored row */
	unsigned w, h;
	unsigned bits;	   /* per pixel: 1 (PBM/BMP), 4, 8, 16, 24, 32 */
	unsigned rle;	   /* BMP: 8 (RLE8) or 4 (RLE4) run-length coded, else 0 */
	bool g6;	   /* 16-bit BMP: 5-6-5, else 5-5-5 */
	bool gray_pal;	   /* BMP: a palette Pillow takes for L: the index is the gray */
	bool gray;	   /* PGM: one byte of gray */
	bool pbm;	   /* P4: bit 1 is black */
	bool rgb_order;	   /* PPM: R G B; else BMP's byte offsets below */
	unsigned maxval;   /* PGM/PPM: 1-65535; samples of 2 bytes past 255 */
	bool plain;	   /* P1-P3: samples in text from data on */
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
	return len >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6' &&
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
	if (p[1] != '4' && p[1] != '1' && (rc = pnm_token(p, len, &i, &maxval)) < 0)
		return rc;
	if ((rc = prep__check_caps(im->w, im->h)) < 0)
		return rc;
	if (maxval == 0 || maxval > 65535)
		return -EIO; /* Pillow: "maxval must be greater than 0 and less than 65536" */
	im->plain = p[1] <= '3';
	im->pbm = p[1] == '4' || p[1] == '1';
	im->gray = p[1] == '5' || p[1] == '2' || p[1] == '1';
	im->rgb_order = true;
	im->maxval = p[1] == '1' ? 1 : maxval;
	im->bits = (im->pbm ? 1 : im->gray ? 8 : 24) * (maxval > 255 ? 2 : 1);
	im->stride = im->pbm ? (im->w + 7) / 8 : (size_t)im->w * (im->bits / 8);
	if (need_data && i > len)
		return -EIO;
	if (need_data && !im->plain && (len - i) / im->stride < im->h)
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
		if (b != 1 && b != 4 && b != 8 && b != 16 && b != 24 && b != 32)
			return -EIO;
		im->off[0] = 2, im->off[1] = 1, im->off[2] = 0; /* BGR, BGRX */
	} else if ((compression == 1 && b == 8) || (compression == 2 && b == 4)) {
		im->rle = b;
	} else if (compression == 3 && b == 16 && masks[1] == 0x7e0 && masks[0] == 0xf800 &&
		   masks[2] == 0x1f) {
		im->g6 = true;
	} else if (compression == 3 && b == 16 && masks[0] == 0x7c00 && masks[1] == 0x3e0 &&
		   masks[2] == 0x1f) {
		/* 5-5-5, as BI_RGB */
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
		/* Pillow: a palette of grays (i, i, i), or black and white for
		 * two colours, makes the image L (or 1): the index is the gray */
		im->gray_pal = true;
		for (unsigned c = 0; c < im->ncolors; c++) {
			unsigned v = im->ncolors == 2 ? c * 255 : c;
			if (im->pal[c][0] != v || im->pal[c][1] != v || im->pal[c][2] != v)
				im->gray_pal = false;
		}
		/* as 1, Pillow unpacks an 8-bit or RLE image as bits, and as L a
		 * 1 or 4-bit one as bytes: not the picture; not claimed */
		if (im->gray_pal && (im->ncolors == 2 ? b != 1 || im->rle : b < 8 && !im->rle))
			return -EIO;
	}
	if (offset == 0)
		offset = (uint32_t)(pal_at + (b <= 8 ? (size_t)im->ncolors * pal_entry : 0));
	im->stride = (((size_t)im->w * b + 31) >> 3) & ~(size_t)3;
	if (need_data && offset > len)
		return -EIO;
	if (need_data && !im->rle && (len - offset) / im->stride < im->h)
		return -EIO; /* truncated: Pillow wants every row whole */
	im->data = p + offset;
	return 0;
}

/*
 * A PGM/PPM sample as Pillow makes it. maxval 255: the byte. Else its
 * PpmDecoder: round(v / maxval * 255) (Python's round, half to even, on
 * the same doubles), capped at 255; a PGM past maxval 255 is mode I,
 * scaled to 65535 the same way (65535: read raw), which convert("RGB")
 * then clips at 255.
 */
static uint8_t pnm_scale(unsigned v, unsigned maxval, bool gray)
{
	double out = gray && maxval > 255 ? 65535.0 : 255.0;
	double r = nearbyint((double)v / (double)maxval * out);

	return (uint8_t)(r > 255.0 ? 255 : r);
}

static uint8_t pnm_sample(const struct raw_img *im, const uint8_t *p)
{
	if (im->maxval == 255)
		return p[0];
	return pnm_scale(im->maxval > 255 ? (unsigned)p[0] << 8 | p[1] : p[0], im->maxval, im->gray);
}

#define PIL_SAFEBLOCK (1u << 20) /* Pillow's ImageFile.SAFEBLOCK: its plain PNM reads */

static bool pnm_space(int c)
{
	return c == ' ' || (c >= 0x09 && c <= 0x0d);
}

/* Pillow's plain PNM reading state: the file read in blocks, and whether
 * a comment runs on past the last block. */
struct plain_rd {
	const uint8_t *p;
	size_t len, pos;
	bool spans;
};

/* fd.read(SAFEBLOCK) into b. */
static size_t plain_read(struct plain_rd *r, uint8_t *b)
{
	size_t n = r->len - r->pos < PIL_SAFEBLOCK ? r->len - r->pos : PIL_SAFEBLOCK;

	memcpy(b, r->p + r->pos, n);
	r->pos += n;
	return n;
}

/* _find_comment_end: the first LF or CR from `from` on, as Pillow picks it
 * (min of the two if a * b > 0, else max: an LF at 0 with a CR later
 * gives the CR). -1 when none. */
static long long plain_comment_end(const uint8_t *b, size_t n, size_t from)
{
	const uint8_t *lf = memchr(b + from, '\n', n - from), *cr = memchr(b + from, '\r', n - from);
	long long a = lf ? lf - b : -1, c = cr ? cr - b : -1;

	return a * c > 0 ? (a < c ? a : c) : (a > c ? a : c);
}

/* _ignore_comments on the n bytes at b (in place, reading on while a
 * comment spans blocks); the bytes left. */
static size_t plain_uncomment(struct plain_rd *r, uint8_t *b, size_t n)
{
	if (r->spans) {
		while (n) {
			long long e = plain_comment_end(b, n, 0);
			if (e >= 0) {
				memmove(b, b + e + 1, n - (size_t)e - 1);
				n -= (size_t)e + 1;
				break;
			}
			n = plain_read(r, b);
		}
	}
	r->spans = false;
	for (;;) {
		const uint8_t *h = memchr(b, '#', n);
		if (!h)
			break;
		size_t cs = (size_t)(h - b);
		long long ce = plain_comment_end(b, n, cs);
		if (ce < 0) {
			n = cs;
			r->spans = true;
			break;
		}
		memmove(b + cs, b + ce + 1, n - (size_t)ce - 1);
		n -= (size_t)ce + 1 - cs;
	}
	return n;
}

/*
 * A plain PBM/PGM/PPM's samples, from p[i] on, to W x H x bands bytes at out,
 * step by step as Pillow's PpmPlainDecoder (9.x) makes them, since its
 * quirks decide the pixels: 1 MiB blocks, comments (from '#' to CR or LF,
 * both removed, so "12#c\n3" is 123) removed block by block; P1: every
 * non-space byte of a block read must be 0 or 1 (1 black); P2/P3: a token
 * cut by a block's end is kept and put before the next block, and kept
 * again (never cleared) when a later block ends in a space: put before
 * every block after, it adds a sample or joins a token (a Pillow bug, which
 * shifts the image or fails it); at the end of the file it is repeated
 * until the samples are all there. Tokens of over 10 characters, or over
 * maxval, fail; samples scale as pnm_scale. Too few samples fail ("not
 * enough image data"). A token Python's int() takes that is not all digits
 * (a sign, an underscore) fails here where PIL may read it.
 */
static int pnm_plain(const uint8_t *p, size_t len, size_t i, const struct raw_img *im,
		     uint8_t *out)
{
	struct plain_rd r = {p, len, i, false};
	size_t need = (size_t)im->w * im->h * (im->gray ? 1 : 3), have = 0, hn = 0;
	uint8_t half[16];
	uint8_t *buf = malloc(PIL_SAFEBLOCK + sizeof(half));
	int rc = -EIO;

	if (!buf)
		return -ENOMEM;
	while (have < need) {
		uint8_t *b = buf + sizeof(half);
		size_t n = plain_read(&r, b);
		if (n == 0 && (im->pbm || !hn))
			break; /* the end of the file */
		if (n == 0)
			b[n++] = ' '; /* flushes the kept token */
		n = plain_uncomment(&r, b, n);
		if (im->pbm) { /* every byte of the block is checked */
			for (size_t k = 0; k < n; k++)
				if (!pnm_space(b[k]) && b[k] != '0' && b[k] != '1')
					goto out;
			for (size_t k = 0; k < n && have < need; k++)
				if (!pnm_space(b[k]))
					out[have++] = b[k] == '1' ? 0 : 255;
			continue;
		}
		if (hn) { /* the kept token, before the block */
			b -= hn;
			memcpy(b, half, hn);
			n += hn;
		}
		size_t end = n;
		if (n && !pnm_space(b[n - 1])) { /* keep the last token */
			size_t ts = n;
			while (ts > 0 && !pnm_space(b[ts - 1]))
				ts--;
			if (n - ts > 10)
				goto out;
			hn = n - ts;
			memcpy(half, b + ts, hn);
			end = ts;
		}
		for (size_t k = 0; k < end && have < need;) {
			if (pnm_space(b[k])) {
				k++;
				continue;
			}
			uint64_t v = 0;
			size_t t = 0;
			for (; k < end && !pnm_space(b[k]); k++, t++) {
				if (t >= 10 || b[k] < '0' || b[k] > '9')
					goto out;
				v = v * 10 + (unsigned)(b[k] - '0');
			}
			if (v > im->maxval)
				goto out;
			out[have++] = pnm_scale((unsigned)v, im->maxval, im->gray);
		}
	}
	rc = have < need ? -EIO : 0;
out:
	free(buf);
	return rc;
}

/*
 * An RLE8 or RLE4 BMP's pixel data to W x H indexes in the order stored,
 * as Pillow's BmpRleDecoder (9.x) makes them, quirks included, so that a
 * sample shows what PIL gives: a run is cut at the row's end, an end of
 * line pads the row with index 0, a delta reads two bytes and then takes
 * its offsets from the next two, an RLE4 literal of n pixels reads n / 2
 * bytes (an odd last pixel lost), a literal is followed by a pad byte when
 * it ends at an odd offset in the file, and pixels past the image are
 * dropped. Data that ends (end of bitmap, or the file) before the image is
 * filled fails, as in Pillow ("not enough image data").
 */
static int bmp_rle(const uint8_t *p, size_t len, size_t i, unsigned W, unsigned H, bool rle4,
		   uint8_t *out)
{
	size_t n = (size_t)W * H, have = 0, x = 0;

#define PUT(v)                                                                                    \
	do {                                                                                       \
		if (have < n)                                                                      \
			out[have] = (uint8_t)(v);                                                  \
		have++;                                                                            \
	} while (0)
	memset(out, 0, n);
	while (have < n) {
		if (i >= len || len - i < 2)
			break;
		size_t cnt = p[i];
		unsigned b = p[i + 1];
		i += 2;
		if (cnt) { /* a run */
			if (x + cnt > W)
				cnt = x < W ? W - x : 0;
			for (size_t k = 0; k < cnt; k++)
				PUT(rle4 ? (k % 2 ? b & 15 : b >> 4) : b);
			x += cnt;
		} else if (b == 0) { /* end of line */
			while (have % W)
				PUT(0);
			x = 0;
		} else if (b == 1) { /* end of bitmap */
			break;
		} else if (b == 2) { /* delta */
			if (i >= len || len - i < 2)
				break;
			i += 2;
			if (i >= len || len - i < 2)
				return -EIO; /* Pillow: too few values to unpack */
			size_t skip = p[i] + (size_t)p[i + 1] * W;
			i += 2;
			have = have + skip < n ? have + skip : n;
			x = have % W;
		} else { /* a literal of b pixels */
			size_t bytes = rle4 ? b / 2 : b, got = len - i < bytes ? len - i : bytes;
			for (size_t k = 0; k < got; k++) {
				if (rle4) {
					PUT(p[i + k] >> 4);
					PUT(p[i + k] & 15);
				} else {
					PUT(p[i + k]);
				}
			}
			i += got;
			if (got < bytes)
				break;
			x += b;
			if (i % 2)
				i++;
		}
	}
#undef PUT
	return have < n ? -EIO : 0;
}

/* RGB of stored image row y (top = 0), columns [x0, x1), into dst. A
 * palette index past the palette shows PIL's default palette there, the
 * gray (i, i, i), as Pillow's convert("RGB") does. */
static void raw_row(const struct raw_img *im, unsigned y, unsigned x0, unsigned x1, uint8_t *dst)
{
	const uint8_t *row = im->data + (size_t)(im->bottom_up ? im->h - 1 - y : y) * im->stride;

	for (unsigned x = x0; x < x1; x++, dst += 3) {
		if (im->pbm) {
			uint8_t v = (row[x / 8] >> (7 - x % 8)) & 1 ? 0 : 255;
			dst[0] = dst[1] = dst[2] = v;
		} else if (im->gray) {
			dst[0] = dst[1] = dst[2] = pnm_sample(im, row + (size_t)x * (im->bits / 8));
		} else if (im->rgb_order) {
			size_t b = im->bits / 24;
			for (size_t c = 0; c < 3; c++)
				dst[c] = pnm_sample(im, row + ((size_t)x * 3 + c) * b);
		} else if (im->bits == 16) { /* Pillow's BGR;15 / BGR;16 */
			unsigned v = row[2 * (size_t)x] | (unsigned)row[2 * (size_t)x + 1] << 8;
			dst[0] = (uint8_t)(im->g6 ? (v >> 11 & 31) * 255 / 31 : (v >> 10 & 31) * 255 / 31);
			dst[1] = (uint8_t)(im->g6 ? (v >> 5 & 63) * 255 / 63 : (v >> 5 & 31) * 255 / 31);
			dst[2] = (uint8_t)((v & 31) * 255 / 31);
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
			if (im->gray_pal && im->bits == 8) { /* L: any index is a gray */
				dst[0] = dst[1] = dst[2] = (uint8_t)idx;
				continue;
			}
			if (idx >= im->ncolors) {
				dst[0] = dst[1] = dst[2] = (uint8_t)idx;
				continue;
			}
			memcpy(dst, im->pal[idx], 3);
		}
	}
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

/* Rows are read where they lie: the parsed headers and one row; an RLE
 * BMP's indexes or a plain PNM's samples first, whole. */
static uint64_t work_raw(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	bool rle = len >= 34 && p[0] == 'B' && le32(p + 14) >= 40 && (le32(p + 30) == 1 || le32(p + 30) == 2);
	bool plain = len >= 2 && p[0] == 'P' && p[1] >= '1' && p[1] <= '3';

	return sizeof(struct raw_img) + (uint64_t)W * 3 + (rle ? (uint64_t)W * H : 0) +
	       (plain ? (uint64_t)W * H * 3 + PIL_SAFEBLOCK : 0);
}

static int decode_raw(const uint8_t *data, size_t len, struct prep__sink *d, bool bmp)
{
	struct raw_img *im = malloc(sizeof(*im));
	int rc;

	if (!im)
		return -ENOMEM;
	uint8_t *idx = NULL;
	rc = bmp ? bmp_parse(data, len, im, true) : pnm_parse(data, len, im, true);
	if (rc == -ENODATA)
		rc = -EIO;
	if (rc == 0 && im->plain) { /* to bytes: P5 or P6 of maxval 255 */
		idx = malloc((size_t)im->w * im->h * (im->gray ? 1 : 3) + PREP__PAD);
		if (!idx)
			rc = -ENOMEM;
		else
			rc = pnm_plain(data, len, (size_t)(im->data - data), im, idx);
		im->data = idx;
		im->pbm = false;
		im->maxval = 255;
		im->bits = im->gray ? 8 : 24;
		im->stride = (size_t)im->w * (im->bits / 8);
	}
	if (rc == 0 && im->rle) { /* to an 8-bit index image, stored order */
		idx = malloc((size_t)im->w * im->h + PREP__PAD);
		if (!idx)
			rc = -ENOMEM;
		else
			rc = bmp_rle(data, len, (size_t)(im->data - data), im->w, im->h, im->rle == 4, idx);
		im->data = idx;
		im->stride = im->w;
		im->bits = 8;
	}
	if (rc == 0)
		rc = prep__sink_scale(d, im->w, im->h, false);
	if (rc == 0)
		rc = prep__sink_region(d, im->w, im->h);
	if (rc == 0)
		rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3);
	if (rc == 0) {
		d->bx0 = d->rx0;
		for (unsigned y = d->ry0; y < d->ry1; y++) {
			raw_row(im, y, d->rx0, d->rx1, prep__sink_row(d));
			prep__sink_push(d);
		}
		prep__sink_flush(d);
	}
	free(idx);
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

/* Any PNM magic, binary or plain-text. */
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
