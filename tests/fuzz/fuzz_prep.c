/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for prep/'s parsers of outside input: the header probe,
 * the memory estimate and the decode + transform path of every format. The input is the image file itself
 * (so saved inputs are plain files); its length picks the recipe and the
 * version. Saved inputs live in
 * tests/fuzz/corpus_prep and are replayed by tests/unit/test_prep_codec.c.
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   build-fuzz/tests/fuzz/fuzz_prep tests/fuzz/corpus_prep
 */
#include <stdint.h>
#include <stdlib.h>

#include "prep/prep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *names[] = {"rrc16",	  "rrc64",    "center16",
				      "center48", "resize16", "resize40"};
	struct prep_recipe r;
	unsigned w, h;
	uint8_t *out = NULL;
	size_t len = 0;

	unsigned sel = (unsigned)(size % 251);
	(void)prep_probe(data, size, &w, &h);
	if (prep_recipe_parse(names[sel % 6], &r) != 0)
		abort();
	uint64_t mem;
	(void)prep_decode_mem(&r, data, size, &mem);
	if (prep_render(&r, data, size, 1, sel, sel >> 3, &out, &len) == 0) {
		uint64_t want;
		/* the output size must be what stat() promised */
		if (prep_probe(data, size, &w, &h) != 0 || prep_output_size(&r, w, h, &want) != 0 ||
		    want != len)
			abort();
		free(out);
	}
	return 0;
}
