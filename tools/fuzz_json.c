/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the JSON reader and the fsstat table: any bytes must be
 * parsed or refused cleanly, and whatever is accepted must render. Built
 * with libFuzzer when -Dfuzz=true (clang); without it, a small main()
 * replays the saved inputs given on the command line as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/fsstat.h"
#include "tools/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *sink;
	struct json_value *v = NULL;
	struct json_value *prev = NULL;
	struct fsstat_view view = { .mountpoint = "/fuzz", .rates = true, .interval_s = 1.0 };

	if (!sink)
		sink = fopen("/dev/null", "w");
	if (json_parse((const char *)data, size, &v, NULL) != 0)
		return 0;
	if (v->type == JSON_OBJECT && sink) {
		fsstat_render(sink, v, NULL);
		/* the document against itself as the previous sample */
		if (json_parse((const char *)data, size, &prev, NULL) == 0) {
			view.prev = prev;
			fsstat_render(sink, v, &view);
		}
	}
	json_free(prev);
	json_free(v);
	return 0;
}

#ifdef FUZZ_REPLAY_MAIN
int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		char *buf = malloc(JSON_MAX_INPUT + 2);
		size_t n;

		if (!f || !buf) {
			fprintf(stderr, "fuzz_json: %s: cannot read\n", argv[i]);
			free(buf);
			if (f)
				fclose(f);
			return 1;
		}
		n = fread(buf, 1, JSON_MAX_INPUT + 1, f);
		fclose(f);
		LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
		free(buf);
	}
	printf("fuzz_json: replayed %d inputs\n", argc - 1);
	return 0;
}
#endif
