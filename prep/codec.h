/* SPDX-License-Identifier: MIT */
/*
 * The image formats prep/ decodes, one file each (codec_*.c), behind one
 * table of operations: recognise the magic bytes, read the size from the
 * header, estimate the working memory of a decode, decode into a sink
 * (prep/sink.h). codec.c holds the table and what goes through it:
 * prep__sniff, prep_probe and prep_decode_mem of prep/prep.h.
 */
#ifndef COORDFS_PREP_CODEC_H
#define COORDFS_PREP_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREP__JPEG_MAX_SCANS 1000	  /* progressive "scan bombs" */
#define PREP__JPEG_MAX_MEM (768ull << 20) /* libjpeg's (and libtiff's) own allocations */
#define PREP__EOI_WINDOW 64 /* a JPEG whose EOI starts in its last 64 bytes is complete */

enum prep__format {
	PREP__UNKNOWN,
	PREP__JPEG,
	PREP__PNG,
	PREP__PNM,
	PREP__BMP,
	PREP__WEBP,
	PREP__TIFF,
	PREP__GIF
};
enum prep__format prep__sniff(const void *data, size_t len);

/* Pillow's cmyk2rgb of one pixel of ink values (0: none, 255: full), as
 * its JPEG and TIFF decoders end in: rgb may be cmyk itself. */
static inline void prep__cmyk_to_rgb(const uint8_t cmyk[4], uint8_t rgb[3])
{
	int nk = 255 - cmyk[3];
	int c3[3] = {cmyk[0], cmyk[1], cmyk[2]};

	for (int c = 0; c < 3; c++) {
		int tmp = c3[c] * nk + 128;
		int v = nk - (((tmp >> 8) + tmp) >> 8);
		rgb[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
	}
}

struct prep__sink; /* prep/sink.h */

struct prep__codec {
	enum prep__format format;
	/* Do the first bytes carry this format's magic? */
	bool (*sniff)(const uint8_t *p, size_t len);
	/* W x H from the header, within the caps (prep__check_caps of
	 * prep/sink.h): 0, -ENODATA
	 * when the bytes end before the size (the caller may retry with more),
	 * -EIO, -EFBIG. */
	int (*probe)(const uint8_t *p, size_t len, unsigned *w, unsigned *h);
	/* Bytes this format's decoder holds for a W x H source beyond what
	 * every decode holds (prep_decode_mem adds them). */
	uint64_t (*work_mem)(const uint8_t *p, size_t len, unsigned W, unsigned H);
	/* Decode p into d (prep__sink_scale, _region, _alloc, then the region
	 * rows pushed and flushed). 0 / -errno. */
	int (*decode)(const uint8_t *p, size_t len, struct prep__sink *d);
};

extern const struct prep__codec prep__codec_jpeg, prep__codec_png, prep__codec_bmp,
    prep__codec_webp, prep__codec_tiff, prep__codec_gif, prep__codec_pnm;

/* The codec whose magic data starts with, or NULL. */
const struct prep__codec *prep__codec_of(const void *data, size_t len);

#endif
