/* SPDX-License-Identifier: MIT */
/*
 * prep/tier.c: the decoded tier, sources decoded whole at one DCT scale and
 * kept for the view's life (cfg.decoded_mem), so that later versions of a
 * file resample its pixels instead of decoding it again. Its slots are
 * carved out of large (huge-page) mappings.
 */
#ifndef COORDFS_PREP_TIER_H
#define COORDFS_PREP_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prep/render.h"
#include "prep/view_state.h"

/* One image of the decoded tier: a source decoded whole at one DCT scale,
 * its pixels right after it in a slot carved out of a tier chunk.
 * Immutable once published in tier[file]; freed only with the view. */
struct dentry {
	struct dentry *next; /* the same file at other scales */
	unsigned W, H;	     /* source size */
	bool jpeg;	     /* scales other than 8/8 exist */
	uint64_t bytes;	     /* the slot's size */
	struct prep__image img;
};

/* Size the tier's chunks and reserve its index (a pointer per file) when
 * cfg.decoded_mem has room for it; without one v->tier stays NULL and the
 * tier holds nothing. */
void prep__tier_init(struct prep_view *v);
/* Unmap every chunk and give the tier's bytes back (prep_view_destroy). */
void prep__tier_free(struct prep_view *v);
/* The image of s's file at the scale s needs, or NULL when the tier does
 * not hold it. Lock-free. */
const struct dentry *prep__tier_lookup(struct prep_view *v, const struct sample *s);
/* First successful decode of src at the scale s needs, while the tier has
 * room: decode the whole frame and publish it. The image (this one, or one
 * another decode published meanwhile), or NULL when not admitted (no room,
 * or the whole-frame decode failed: the file path then decides, so a file
 * that fails is never admitted). */
const struct dentry *prep__tier_admit(struct prep_view *v, const struct sample *s,
				      const uint8_t *src, size_t srclen);

#endif
