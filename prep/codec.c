/* SPDX-License-Identifier: MIT */
/*
 * The table of codecs (prep/codec.h) and what goes through it: sniffing,
 * the header probe (prep_probe) and the working memory of a decode
 * (prep_decode_mem).
 */
#include <errno.h>
#include <stddef.h>

#include "prep/codec.h"
#include "prep/prep.h"

/* Tried in this order; their magics do not overlap. */
static const struct prep__codec *const codecs[] = {
	&prep__codec_jpeg, &prep__codec_png, &prep__codec_bmp,
	&prep__codec_webp, &prep__codec_tiff, &prep__codec_gif, &prep__codec_pnm,
};

const struct prep__codec *prep__codec_of(const void *data, size_t len)
{
	for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++)
		if (codecs[i]->sniff(data, len))
			return codecs[i];
	return NULL;
}

enum prep__format prep__sniff(const void *data, size_t len)
{
	const struct prep__codec *c = prep__codec_of(data, len);

	return c ? c->format : PREP__UNKNOWN;
}

int prep_probe(const void *data, size_t len, unsigned *w, unsigned *h)
{
	if (!data || !w || !h)
		return -EINVAL;
	const struct prep__codec *c = prep__codec_of(data, len);
	if (c)
		return c->probe(data, len, w, h);
	if (len < 8)
		return len == 0 ? -EINVAL : -ENODATA;
	return -EINVAL;
}

int prep_decode_mem(const struct prep_recipe *r, const void *data, size_t len, uint64_t *bytes)
{
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
	const struct prep__codec *c = prep__codec_of(data, len); /* probed: not NULL */
	if (c)
		n += c->work_mem(data, len, W, H);
	*bytes = n;
	return 0;
}
