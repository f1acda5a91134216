/* SPDX-License-Identifier: MIT */
/*
 * WebP through libwebp, the library Pillow uses, decoded whole: still
 * images by libwebp's decoder, animated ones by its animation decoder
 * (libwebpdemux), first frame, as Pillow reads both.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

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

/* Decoded whole; an animation's decoder holds two RGBA canvases and the
 * frame it decodes. */
static uint64_t work_webp(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	WebPBitstreamFeatures f;
	bool anim = WebPGetFeatures(p, len, &f) == VP8_STATUS_OK && f.has_animation;

	return (uint64_t)W * H * (anim ? 12 : 4) + (uint64_t)W * 64;
}

/*
 * The first frame of an animated WebP as Pillow (9.x, built with libwebp's
 * animation API) shows it: WebPAnimDecoder's canvas in MODE_RGBA, the frame
 * drawn on a transparent black canvas (black where it does not reach), its
 * alpha dropped by convert("RGB"). The canvas rows [y0, y1) go to the sink.
 */
static int webp_first_frame(const uint8_t *data, size_t len, unsigned W, struct prep__sink *d)
{
	WebPAnimDecoderOptions o;
	WebPData wd = {data, len};
	WebPAnimInfo info;
	uint8_t *canvas = NULL;
	int ts, rc = -EIO;

	if (!WebPAnimDecoderOptionsInit(&o))
		return -EIO;
	o.color_mode = MODE_RGBA;
	o.use_threads = 0;
	WebPAnimDecoder *dec = WebPAnimDecoderNew(&wd, &o);
	if (!dec)
		return -EIO; /* also out of memory: it does not say which */
	if (!WebPAnimDecoderGetInfo(dec, &info) || info.canvas_width != W ||
	    !WebPAnimDecoderGetNext(dec, &canvas, &ts))
		goto out;
	for (unsigned y = d->ry0; y < d->ry1; y++) {
		const uint8_t *in = canvas + ((size_t)y * W + d->rx0) * 4;
		uint8_t *out = prep__sink_row(d);
		for (unsigned x = d->rx0; x < d->rx1; x++, in += 4, out += 3)
			memcpy(out, in, 3);
		prep__sink_push(d);
	}
	prep__sink_flush(d);
	rc = 0;
out:
	WebPAnimDecoderDelete(dec);
	return rc;
}

/*
 * A still WebP (lossy, lossless, with or without alpha) decoded whole by
 * libwebp to RGB: Pillow decodes it with the same library (to RGBA or RGBX,
 * whose colour bytes are the same) and drops alpha in convert("RGB").
 * An animated one: its first frame (webp_first_frame).
 */
static int decode_webp(const uint8_t *data, size_t len, struct prep__sink *d)
{
	WebPBitstreamFeatures f;
	uint8_t *rgb = NULL;
	int rc;

	if (WebPGetFeatures(data, len, &f) != VP8_STATUS_OK)
		return -EIO;
	if ((rc = prep__sink_scale(d, (unsigned)f.width, (unsigned)f.height, false)) < 0 ||
	    (rc = prep__sink_region(d, (unsigned)f.width, (unsigned)f.height)) < 0 ||
	    (rc = prep__sink_alloc(d, d->rx1 - d->rx0, 3)) < 0)
		return rc;
	d->bx0 = d->rx0;
	if (f.has_animation)
		return webp_first_frame(data, len, (unsigned)f.width, d);
	size_t stride = (size_t)f.width * 3;
	rgb = malloc(stride * (size_t)f.height + PREP__PAD);
	if (!rgb)
		return -ENOMEM;
	if (!WebPDecodeRGBInto(data, len, rgb, stride * (size_t)f.height, (int)stride)) {
		free(rgb);
		return -EIO;
	}
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
