/* SPDX-License-Identifier: MIT */
/*
 * Still WebP through libwebp, the library Pillow uses, decoded whole.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>

#include "prep/codec.h"
#include "prep/sink.h"

static bool sniff_webp(const uint8_t *p, size_t len)
{
	return len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0;
}

static int probe_webp(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	int ww, hh;

	if (!WebPGetInfo(p, len, &ww, &hh))
		return len < 64 ? -ENODATA : -EIO;
	int rc = prep__check_caps((unsigned)ww, (unsigned)hh);
	if (rc == 0) {
		*w = (unsigned)ww;
		*h = (unsigned)hh;
	}
	return rc;
}

/* Decoded whole. */
static uint64_t work_webp(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	return (uint64_t)W * H * 4 + (uint64_t)W * 64;
}

/*
 * A still WebP (lossy, lossless, with or without alpha) decoded whole by
 * libwebp to RGB: Pillow decodes it with the same library (to RGBA or RGBX,
 * whose colour bytes are the same) and drops alpha in convert("RGB").
 * Animated files give -EIO (Pillow shows their first frame composited on a
 * canvas; not claimed).
 */
static int decode_webp(const uint8_t *data, size_t len, struct prep__sink *d)
{
	WebPBitstreamFeatures f;
	uint8_t *rgb = NULL;
	int rc;

	if (WebPGetFeatures(data, len, &f) != VP8_STATUS_OK || f.has_animation)
		return -EIO;
	if ((rc = prep__sink_scale(d, (unsigned)f.width, (unsigned)f.height, false)) < 0 ||
	    (rc = prep__sink_region(d, (unsigned)f.width, (unsigned)f.height)) < 0 ||
	    (rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3)) < 0)
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
		memcpy(prep__sink_row(d), rgb + y * stride + (size_t)d->rx0 * 3,
		       (size_t)(d->rx1 - d->rx0) * 3);
		prep__sink_push(d);
	}
	prep__sink_flush(d);
	free(rgb);
	return 0;
}

const struct prep__codec prep__codec_webp = {
	.format = PREP__WEBP,
	.sniff = sniff_webp,
	.probe = probe_webp,
	.work_mem = work_webp,
	.decode = decode_webp,
};
