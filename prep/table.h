/* SPDX-License-Identifier: MIT */
/*
 * prep/table.c: the samples of the prepared view. The table keyed by
 * (file, recipe, version) that makes concurrent opens share one decode, the
 * FIFO of staged random samples and the memory policy over them (staging,
 * eviction, reservations against cfg.mem), and the decode of one sample
 * (from the decoded tier when it holds the file, else from the source).
 * "Under lock": with view->lock held.
 */
#ifndef COORDFS_PREP_TABLE_H
#define COORDFS_PREP_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prep/view_state.h"

/* Set on decode-ahead threads: they take only memory that is free. */
extern _Thread_local bool prep__on_ahead_thread;

void prep__sample_init(struct prep_view *v, struct sample *s, uint32_t f, uint64_t file_key,
		       const struct prep_recipe *r, uint32_t version, bool det, uint64_t charged);
/* Drop a reference; the last one frees s and returns its bytes. */
void prep__sample_unref(struct sample *s);
/* A new sample of (f, r, version), in the table, with the caller's
 * reference (and the queue's unless inline_decode) and `charged` bytes
 * already reserved. Under lock. */
struct sample *prep__sample_new(struct prep_view *v, uint32_t f, uint64_t file_key,
				const struct prep_recipe *r, uint32_t version, bool det,
				uint64_t charged, bool inline_decode);
/* Bytes a new sample of f under r will take, as far as known without I/O
 * (resize: 0 until the file's dimensions were probed). */
uint64_t prep__expected_len(struct prep_view *v, uint32_t f, const struct prep_recipe *r);

/* Under lock. */
struct sample *prep__table_find(struct prep_view *v, uint32_t f, const struct prep_recipe *r,
				uint32_t version);
void prep__table_insert(struct prep_view *v, struct sample *s);
/* Take s out of the table and drop the table's reference. Under lock; the
 * caller must hold another reference or accept that s is freed. */
void prep__table_remove(struct prep_view *v, struct sample *s);
/* A finished decode: stage it, or take it out of the table. Under lock. */
void prep__admit(struct prep_view *v, struct sample *s);
/* Drop the staged random samples that no active job will read. Under lock. */
void prep__sweep_idle(struct prep_view *v);

/* Make room for n bytes in cfg.mem: unreferenced random samples, then the
 * version counters of inactive jobs. Under lock. */
void prep__evict_for_mem(struct prep_view *v, uint64_t n);
/* Reserve n bytes of the budget: at once, else after dropping unreferenced
 * random samples, else waiting up to mem_wait_ms. 0 or -ENOMEM. Never
 * called with view->lock held. */
int prep__mem_reserve(struct prep_view *v, uint64_t n);

/* Read and render s into a malloc'd PPM, every byte reserved first. */
int prep__decode_charged(struct prep_view *v, struct sample *s, uint8_t **ppm, size_t *ppmlen);
/* Decode s and publish the result. The caller holds one of the
 * cfg.threads decode slots (v->active) and gives it back here. */
void prep__decode_one(struct prep_view *v, struct sample *s);

#endif
