/* SPDX-License-Identifier: MIT */
/*
 * GIF, first frame, as Pillow shows it after convert("RGB"). giflib reads
 * the header, the palettes, the frame's descriptor and its LZW data (from
 * memory, through a read callback); which bytes are the first frame, and
 * what the pixels become, follow Pillow's GIF plugin and its C decoder,
 * which differ from the GIF specification:
 *
 * - The walk to the first image descriptor is Pillow's: a byte that starts
 *   no block is skipped (giflib's record reader would fail the file); an
 *   extension whose first sub-block is the terminator is skipped on past
 *   it, over whatever follows read as sub-blocks up to a zero byte (a
 *   comment excepted); a graphic control extension shorter than 3 bytes
 *   (4 with the transparency flag), an empty application extension or a
 *   NETSCAPE2.0 one with no second sub-block fail.
 * - The image is the logical screen grown to hold the frame when the frame
 *   reaches past it; outside the frame it holds index 0, or the frame's
 *   transparency index when its graphic control extension sets one
 *   (convert("RGB") then gives that index's colour: transparency is
 *   dropped, not composited).
 * - A palette whose every entry i is (i, i, i) is no palette: the image is
 *   mode L, each index its own gray. Pillow colours the pixels with the
 *   local palette unless it is such a gray ramp, then with the global one
 *   unless it is too, else gray. Indexes past the palette's entries are
 *   the gray (i, i, i) of Pillow's default palette.
 * - Pillow decodes a data sub-block only once it has all of it, and stops
 *   at the frame's last pixel: a file cut after the sub-block that holds
 *   it loads (the terminator and trailer may be missing), one cut before
 *   fails. So giflib is shown the sub-blocks the file holds whole, then a
 *   terminator.
 * - Pillow's decoder refuses codes that giflib turns into pixels all the
 *   same (gif_codes_ok): those are failed before giflib decodes the frame.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>

#include "prep/codec.h"
#include "prep/prep.h"
#include "prep/sink.h"

/* What Pillow's walk finds up to the first frame's LZW data. */
struct gif_info {
	unsigned W, H;		 /* the image: the screen grown to hold the frame */
	unsigned fx, fy, fw, fh; /* the frame */
	bool interlace;
	int trans;	    /* transparency index of the frame, or -1 */
	unsigned code_size; /* LZW minimum code size */
	size_t desc;	    /* offset of the frame's descriptor, after ',' */
	size_t data;	    /* offset of its first data sub-block */
};

static unsigned le16(const uint8_t *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static bool sniff_gif(const uint8_t *p, size_t len)
{
	return len >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0);
}

/* Skips sub-blocks from *i up to and past a zero length byte, as Pillow's
 * `while self.data()`; false when the bytes end first. */
static bool skip_blocks(const uint8_t *p, size_t len, size_t *i)
{
	while (*i < len) {
		size_t n = p[(*i)++];
		if (n == 0)
			return true;
		*i += n;
	}
	return false;
}

/* Pillow's walk from the header to the first frame's LZW code size (_open,
 * then _seek(0)). 0; -ENODATA when the bytes end before that (a prefix of
 * the file, or a file cut short: Pillow fails it); -EIO where Pillow fails;
 * -EFBIG over the caps. */
static int gif_scan(const uint8_t *p, size_t len, struct gif_info *g)
{
	if (len < 13)
		return -ENODATA;
	unsigned sw = le16(p + 6), sh = le16(p + 8);
	size_t i = 13;
	if (p[10] & 0x80)
		i += (size_t)3 << ((p[10] & 7) + 1);
	g->trans = -1;
	for (;;) {
		if (i >= len)
			return -ENODATA;
		uint8_t c = p[i++];
		if (c == ';')
			return -EIO; /* no frame */
		if (c == ',')
			break;
		if (c != '!')
			continue; /* Pillow skips a byte that starts nothing */
		if (i + 1 >= len)
			return -ENODATA;
		uint8_t label = p[i++];
		size_t n = p[i++]; /* the first sub-block, n bytes; none when 0 */
		if (n == 0 && (label == 0xf9 || label == 0xff))
			return -EIO; /* Pillow indexes the missing block */
		if (i + n > len)
			return -ENODATA;
		const uint8_t *b = p + i;
		i += n;
		if (label == 0xfe) { /* comment: read up to its terminator */
			if (n && !skip_blocks(p, len, &i))
				return -ENODATA;
			continue;
		}
		if (label == 0xf9) {
			if (n < 3 || (n < 4 && (b[0] & 1)))
				return -EIO;
			if (b[0] & 1)
				g->trans = b[3];
		} else if (label == 0xff && n >= 11 && memcmp(b, "NETSCAPE2.0", 11) == 0) {
			if (i >= len)
				return -ENODATA;
			size_t m = p[i++]; /* the loop count's sub-block must be there */
			if (m == 0)
				return -EIO;
			i += m;
		}
		/* then `while self.data()`: from the end of the first sub-block
		 * (the terminator already, for an empty extension) to the next
		 * zero length byte */
		if (!skip_blocks(p, len, &i))
			return -ENODATA;
	}
	if (i + 9 > len)
		return -ENODATA;
	g->desc = i;
	g->fx = le16(p + i);
	g->fy = le16(p + i + 2);
	g->fw = le16(p + i + 4);
	g->fh = le16(p + i + 6);
	uint8_t flags = p[i + 8];
	g->interlace = (flags & 0x40) != 0;
	i += 9;
	if (flags & 0x80)
		i += (size_t)3 << ((flags & 7) + 1);
	if (i >= len)
		return -ENODATA;
	g->code_size = p[i];
	g->data = i + 1;
	/* Pillow fails a frame of no pixels; code sizes of 0 and 1 its
	 * decoder never widens (and giflib does), over 8 GIF has no palette for */
	if (g->fw == 0 || g->fh == 0 || g->code_size < 2 || g->code_size > 8)
		return -EIO;
	g->W = g->fx + g->fw > sw ? g->fx + g->fw : sw;
	g->H = g->fy + g->fh > sh ? g->fy + g->fh : sh;
	return prep__check_caps(g->W, g->H);
}

static int probe_gif(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	struct gif_info g;
	int rc = gif_scan(p, len, &g);

	if (rc == 0) {
		*w = g.W;
		*h = g.H;
	}
	return rc;
}

/* giflib's decoder state (its LZW tables, ~30 KiB, and palettes), a row of
 * the frame; an interlaced frame is read whole. */
static uint64_t work_gif(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	struct gif_info g;
	uint64_t n = (64u << 10) + (uint64_t)W;

	if (gif_scan(p, len, &g) == 0 && g.interlace)
		n += (uint64_t)g.fw * g.fh;
	return n;
}

/* The bytes giflib reads: the file up to end, then a terminator when term
 * (the file ends inside the frame's data: the sub-blocks it holds whole,
 * then the end of the data), then nothing. */
struct gifsrc {
	const uint8_t *p;
	size_t pos, end;
	bool term;
};

static int gif_read(GifFileType *gf, GifByteType *out, int n)
{
	struct gifsrc *s = gf->UserData;
	size_t k = 0;

	if (n <= 0)
		return 0;
	if (s->pos < s->end) {
		k = s->end - s->pos < (size_t)n ? s->end - s->pos : (size_t)n;
		memcpy(out, s->p + s->pos, k);
		s->pos += k;
	}
	if (k < (size_t)n && s->term && s->pos == s->end) {
		out[k++] = 0;
		s->pos++;
	}
	return (int)k;
}

/* Where the data sub-blocks from i stop: after the terminator, or, when
 * the file ends inside them, after the last one it holds whole (*cut). */
static size_t gif_data_end(const uint8_t *p, size_t len, size_t i, bool *cut)
{
	*cut = false;
	while (i < len) {
		size_t n = p[i];
		if (n == 0)
			return i + 1;
		if (len - i - 1 < n)
			break;
		i += n + 1;
	}
	*cut = true;
	return i;
}

/* A palette of entries (i, i, i) is none to Pillow (_is_palette_needed). */
static bool gif_palette_needed(const ColorMapObject *m)
{
	for (int i = 0; m && i < m->ColorCount; i++)
		if (m->Colors[i].Red != i || m->Colors[i].Green != i || m->Colors[i].Blue != i)
			return true;
	return false;
}

/* Index -> RGB: the palette's entries, Pillow's default gray past them. */
static void gif_lut(const ColorMapObject *m, uint8_t lut[256][3])
{
	for (int i = 0; i < 256; i++) {
		if (m && i < m->ColorCount) {
			lut[i][0] = m->Colors[i].Red;
			lut[i][1] = m->Colors[i].Green;
			lut[i][2] = m->Colors[i].Blue;
		} else {
			lut[i][0] = lut[i][1] = lut[i][2] = (uint8_t)i;
		}
	}
}

/* Row y of an interlaced frame's k-th stored row (passes from rows 0, 4,
 * 2, 1 in steps of 8, 8, 4, 2). */
static unsigned gif_interlaced_row(unsigned k, unsigned h)
{
	static const unsigned start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};

	for (int pass = 0; pass < 4; pass++) {
		unsigned n = h > start[pass] ? (h - start[pass] + step[pass] - 1) / step[pass] : 0;
		if (k < n)
			return start[pass] + k * step[pass];
		k -= n;
	}
	return h; /* not reached: k < h */
}

/* Image row y, columns [d->rx0, d->rx1), to RGB: frame is the frame's
 * row of indexes when y crosses the frame, else NULL. */
static void gif_emit(struct prep__sink *d, const struct gif_info *g, const uint8_t *frame,
		     uint8_t fill, const uint8_t lut[256][3])
{
	uint8_t *out = prep__sink_row(d);

	for (unsigned x = d->rx0; x < d->rx1; x++, out += 3) {
		uint8_t v = frame && x >= g->fx && x - g->fx < g->fw ? frame[x - g->fx] : fill;
		memcpy(out, lut[v], 3);
	}
	prep__sink_push(d);
}

/* giflib on the frame's data, from its descriptor (the file's header read
 * first), up to the end of what the file holds whole: NULL when giflib
 * cannot read the descriptor. */
static GifFileType *gif_open_frame(struct gifsrc *src, const struct gif_info *g, size_t len,
				   int *err)
{
	src->pos = 0;
	src->end = len;
	src->term = false;
	GifFileType *gf = DGifOpen(src, gif_read, err);
	if (!gf)
		return NULL;
	src->pos = g->desc;
	src->end = gif_data_end(src->p, len, g->data, &src->term);
	if (DGifGetImageDesc(gf) != GIF_OK || (unsigned)gf->Image.Left != g->fx ||
	    (unsigned)gf->Image.Top != g->fy || (unsigned)gf->Image.Width != g->fw ||
	    (unsigned)gf->Image.Height != g->fh) {
		DGifCloseFile(gf, err);
		return NULL;
	}
	return gf;
}

/*
 * Does Pillow's GIF decoder take the frame's codes, up to its last pixel?
 * It raises ("broken data stream") on a code past the next free table
 * entry, and on a first code after a clear that is not a pixel value;
 * giflib decodes both into something. The codes come from giflib
 * (DGifGetLZCodes, whose code widths grow as Pillow's do); what is kept is
 * Pillow's count of table entries and each entry's length, to know where
 * the frame's last pixel is: the codes after it are never read by Pillow.
 * An end code (or the data's end) before that pixel fails here, as it does
 * in giflib's decode.
 */
static bool gif_codes_ok(GifFileType *gf, unsigned code_size, uint64_t pixels)
{
	uint16_t len[4096];
	unsigned clear = 1u << code_size, next = clear + 2, last = 0;
	bool first = true;
	uint64_t have = 0;
	int c;

	while (have < pixels) {
		if (DGifGetLZCodes(gf, &c) != GIF_OK || c < 0 || (unsigned)c == clear + 1)
			return false;
		unsigned u = (unsigned)c;
		if (u == clear) {
			first = true;
			next = clear + 2;
			continue;
		}
		if (first) {
			if (u > clear)
				return false;
			first = false;
			have++;
			last = u;
			continue;
		}
		if (u > next)
			return false;
		unsigned prev = last < clear ? 1 : len[last];
		have += u < clear ? 1 : u == next ? prev + 1u : len[u];
		if (next < 4096)
			len[next++] = (uint16_t)(prev + 1);
		last = u;
	}
	return true;
}

static int decode_gif(const uint8_t *data, size_t len, struct prep__sink *d)
{
	struct gif_info g;
	struct gifsrc src = {data, 0, len, false};
	uint8_t lut[256][3], *rows = NULL;
	int rc, err = 0;

	if ((rc = gif_scan(data, len, &g)) < 0)
		return rc == -ENODATA ? -EIO : rc;
	/* Pillow's checks of the codes on a first pass, then the pixels */
	GifFileType *gf = gif_open_frame(&src, &g, len, &err);
	if (!gf)
		return err == D_GIF_ERR_NOT_ENOUGH_MEM ? -ENOMEM : -EIO;
	bool ok = gif_codes_ok(gf, g.code_size, (uint64_t)g.fw * g.fh);
	DGifCloseFile(gf, &err);
	if (!ok)
		return -EIO;
	if (!(gf = gif_open_frame(&src, &g, len, &err)))
		return err == D_GIF_ERR_NOT_ENOUGH_MEM ? -ENOMEM : -EIO;
	const GifImageDesc *im = &gf->Image;
	if ((rc = prep__sink_scale(d, g.W, g.H, false)) < 0 ||
	    (rc = prep__sink_region(d, g.W, g.H)) < 0 ||
	    (rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3)) < 0)
		goto out;
	d->bx0 = d->rx0;
	const ColorMapObject *pal = NULL;
	if (gif_palette_needed(im->ColorMap))
		pal = im->ColorMap;
	else if (gif_palette_needed(gf->SColorMap))
		pal = gf->SColorMap;
	gif_lut(pal, lut);
	uint8_t fill = g.trans >= 0 ? (uint8_t)g.trans : 0;

	/* Every row of the frame is read, as Pillow does: data that ends
	 * before the frame's last pixel fails whatever the region. */
	rc = -ENOMEM;
	size_t nrows = g.interlace ? g.fh : 1;
	if (!(rows = malloc((size_t)g.fw * nrows)))
		goto out;
	rc = -EIO;
	if (g.interlace) {
		for (unsigned k = 0; k < g.fh; k++)
			if (DGifGetLine(gf, rows + (size_t)gif_interlaced_row(k, g.fh) * g.fw,
					(int)g.fw) != GIF_OK)
				goto out;
		for (unsigned y = d->ry0; y < d->ry1; y++) {
			bool in = y >= g.fy && y - g.fy < g.fh;
			gif_emit(d, &g, in ? rows + (size_t)(y - g.fy) * g.fw : NULL, fill, lut);
		}
	} else {
		unsigned last = g.fy + g.fh > d->ry1 ? g.fy + g.fh : d->ry1;
		for (unsigned y = 0; y < last; y++) {
			bool in = y >= g.fy && y - g.fy < g.fh;
			if (in && DGifGetLine(gf, rows, (int)g.fw) != GIF_OK)
				goto out;
			if (y >= d->ry0 && y < d->ry1)
				gif_emit(d, &g, in ? rows : NULL, fill, lut);
		}
	}
	prep__sink_flush(d);
	rc = 0;
out:
	DGifCloseFile(gf, &err);
	free(rows);
	return rc;
}

const struct prep__codec prep__codec_gif = {
	.format = PREP__GIF,
	.sniff = sniff_gif,
	.probe = probe_gif,
	.work_mem = work_gif,
	.decode = decode_gif,
};
