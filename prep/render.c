/* SPDX-License-Identifier: MIT */
/*
 * One sample from plan to PPM: the file's codec (prep/codec.h) decodes the
 * region the plan's geometry reads into a sink (prep/sink.h), the vertical
 * pass finishes the resampling into the PPM. Also the whole frame at one
 * DCT scale for the decoded tier, and a sample resampled from such a frame.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep/codec.h"
#include "prep/prep.h"
#include "prep/render.h"
#include "prep/resample.h"
#include "prep/sink.h"

static int decode_any(const void *data, size_t len, struct prep__sink *d)
{
	const struct prep__codec *c = prep__codec_of(data, len);

	return c ? c->decode(data, len, d) : -EINVAL;
}

size_t prep__ppm_header(unsigned w, unsigned h, char *buf)
{
	return (size_t)sprintf(buf, "P6\n%u %u\n255\n", w, h);
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
	struct prep__sink d;
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
	/* a flip is in d.cx (prep__sink_region) */
	rc = prep__vpass(d.tmp, &d.cx, &d.cy, false, ppm + hlen, (size_t)d.g.ow * 3, true);
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
	struct prep__sink d;
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
	struct prep__sink d;
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
	if ((rc = prep__sink_scale(&d, W, H, true)) < 0)
		goto out;
	if ((rc = prep__sink_region(&d, img->w, img->h)) < 0)
		goto out;
	size_t hlen, total;
	if ((rc = ppm_alloc(&d.g, &ppm, &hlen, &total)) < 0)
		goto out;
	rc = prep__resample(img->rgb, (size_t)img->w * 3, 0, 0, &d.cx, &d.cy, false, ppm + hlen,
			    (size_t)d.g.ow * 3); /* a flip is in d.cx (prep__sink_region) */
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
