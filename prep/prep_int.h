/* SPDX-License-Identifier: MIT */
/*
 * Every internal header of prep/ at once, for its white-box tests
 * (tests/unit/test_prep*.c) and the tools that drive its stages one by one
 * (tests/helpers/prep_render_cli.c, tools/bench/decode_speed.c). No source
 * of prep/ includes it: each includes the small headers it uses (see
 * prep/README.md).
 */
#ifndef COORDFS_PREP_PREP_INT_H
#define COORDFS_PREP_PREP_INT_H

#include "prep/codec.h"
#include "prep/geom.h"
#include "prep/prep.h"
#include "prep/recipe.h"
#include "prep/render.h"
#include "prep/resample.h"
#include "prep/sink.h"

#endif
