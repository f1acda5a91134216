/* SPDX-License-Identifier: MIT */
/*
 * The replay driver shared by the fuzz targets built with
 * -DFUZZ_REPLAY_MAIN: main() feeds every file given (or every regular file
 * of every directory given) to LLVMFuzzerTestOneInput once, so the saved
 * corpora run as ordinary tests in every build. Include it at the end of a
 * target after defining FUZZ_NAME (its name, for messages) and
 * FUZZ_MAX_INPUT (bytes read from one file; a longer file is cut there).
 * Exit status 1 when a file cannot be read or nothing was replayed.
 */
#ifndef COORDFS_TESTS_FUZZ_REPLAY_MAIN_H
#define COORDFS_TESTS_FUZZ_REPLAY_MAIN_H

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = malloc((size_t)FUZZ_MAX_INPUT + 1);
	size_t n;

	if (!f || !buf) {
		fprintf(stderr, "%s: %s: %s\n", FUZZ_NAME, path, strerror(errno));
		free(buf);
		if (f)
			fclose(f);
		return -1;
	}
	n = fread(buf, 1, (size_t)FUZZ_MAX_INPUT, f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 1;
}

static int replay(const char *path, unsigned *count)
{
	struct stat st;
	struct dirent **names;
	int n, rc = 0;

	if (stat(path, &st) != 0) {
		fprintf(stderr, "%s: %s: %s\n", FUZZ_NAME, path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		rc = replay_file(path);
		*count += rc > 0;
		return rc < 0 ? -1 : 0;
	}
	n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "%s: %s: %s\n", FUZZ_NAME, path, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char full[4096];

		if (names[i]->d_name[0] != '.' &&
		    snprintf(full, sizeof(full), "%s/%s", path, names[i]->d_name) <
			(int)sizeof(full) &&
		    stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
			int r = replay_file(full);

			if (r < 0)
				rc = -1;
			*count += r > 0;
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int rc = 0;

	for (int i = 1; i < argc; i++)
		if (replay(argv[i], &count) != 0)
			rc = 1;
	printf("%s: replayed %u inputs\n", FUZZ_NAME, count);
	if (count == 0) {
		fprintf(stderr, "%s: no inputs to replay\n", FUZZ_NAME);
		return 1;
	}
	return rc;
}

#endif
