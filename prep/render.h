/* SPDX-License-Identifier: MIT */
/*
 * prep/render.c: one sample from plan to PPM. A file is decoded through
 * its codec (prep/codec.h) into a sink (prep/sink.h) along the geometry a
 * plan returns, resampled, and written as a binary PPM; or decoded whole at
 * one DCT scale for the decoded tier, whose pixels are later resampled
 * along any geometry.
 */
#ifndef COORDFS_PREP_RENDER_H
#define COORDFS_PREP_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "prep/geom.h"

/*
 * Decode data and resample it along the geometry that plan returns into a
 * malloc'd PPM. scale_num: 0 picks the DCT scale M/8 automatically (the
 * smallest that keeps at least one decoded pixel per output pixel), 1..8
 * forces M (8 = full resolution). Thread-safe.
 */
int prep__render_geom(const void *data, size_t len, prep__plan_fn plan, void *arg,
		      unsigned scale_num, uint8_t **out_ppm, size_t *out_len);

/* A whole image decoded to RGB at full resolution (tests, tools). */
struct prep__image {
	unsigned w, h;
	uint8_t *rgb;	/* w*h*3 (+ PREP__PAD readable bytes): malloc'd, or the caller's */
	unsigned scale; /* M of the DCT scale M/8 it was decoded at */
};
int prep__decode_full(const void *data, size_t len, struct prep__image *out);
/* The whole frame at DCT scale M/8 (JPEG; every other format ignores M and
 * gives full resolution, out->scale 8): what the region decoder of
 * prep__render_geom reconstructs at that scale, for the decoded tier. */
int prep__decode_scaled(const void *data, size_t len, unsigned M, struct prep__image *out);
/* The same into dst (cap bytes; prep__scaled_bytes of the frame fits), so
 * out->rgb == dst: the decoded tier carves its images out of large mappings.
 * -ENOSPC when the frame is larger than cap. */
int prep__decode_scaled_into(const void *data, size_t len, unsigned M, uint8_t *dst, size_t cap,
			     struct prep__image *out);
/* Bytes a prep__decode_scaled image of a W x H source at scale M holds. */
uint64_t prep__scaled_bytes(unsigned W, unsigned H, unsigned M);

/*
 * Resample decoded pixels along the geometry plan returns for their source
 * size W x H: img is that source decoded whole at img->scale (see
 * prep__decode_scaled). Gives the same bytes as prep__render_geom on the
 * file at that scale. Thread-safe; img is only read.
 */
int prep__render_pixels(const struct prep__image *img, unsigned W, unsigned H, prep__plan_fn plan,
			void *arg, uint8_t **out_ppm, size_t *out_len);

/* Write the PPM header for w x h into buf (>= 32 bytes); returns its length. */
size_t prep__ppm_header(unsigned w, unsigned h, char *buf);

#endif
