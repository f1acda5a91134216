/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the S3 client's parsers of outside input
 * (remote/s3_int.h): the ListObjectsV2 page parser (what an endpoint
 * answers), the INI reader (the shared credentials/config files), the
 * credential JSON (container and instance-role endpoints), Content-Range
 * and timestamps. Each result is checked against its contract: a parsed
 * page holds only non-empty keys within S3's limits, ETags within theirs,
 * a next token whenever it is truncated, and the same entries whether the
 * body came in one piece or two; a Content-Range lies inside its total;
 * secrets read from a file or a document are NUL-terminated in their
 * fields. A broken contract prints a message and abort()s.
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   build-fuzz/tests/fuzz/fuzz_s3 tests/fuzz/corpus_s3
 * With -DFUZZ_REPLAY_MAIN, main() replays the files (or directories of
 * files) given as arguments: the `fuzz_s3_replay` unit test.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "remote/s3/s3_int.h"

#define FUZZ_MAX_INPUT (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void contract_fail(const char *what, int line)
{
	fprintf(stderr, "fuzz_s3:%d: contract broken: %s\n", line, what);
	abort();
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			contract_fail(#cond, __LINE__);                                            \
	} while (0)

static int parse_page(struct s3_page *p, const uint8_t *data, size_t size, size_t cut)
{
	if (remote__s3_page_init(p))
		return -ENOMEM;
	int r = remote__s3_page_feed(p, (const char *)data, cut, false);

	if (r == 0)
		r = remote__s3_page_feed(p, (const char *)data + cut, size - cut, true);
	return r;
}

static void check_page(const struct s3_page *p)
{
	for (size_t i = 0; i < p->n_entries; i++) {
		const struct s3_page_entry *e = &p->entries[i];

		CHECK(e->key && e->key_len > 0 && e->key_len <= REMOTE_S3_MAX_KEY);
		CHECK(strlen(e->key) == e->key_len);
		CHECK(strlen(e->etag) <= REMOTE_S3_MAX_ETAG);
	}
	CHECK(p->n_entries <= S3_MAX_PAGE_ENTRIES);
	for (size_t i = 0; i < p->n_prefixes; i++)
		CHECK(p->prefixes[i][0] && strlen(p->prefixes[i]) <= REMOTE_S3_MAX_KEY);
	CHECK(!p->truncated || p->next_token);
	CHECK(strlen(p->error_code) < sizeof(p->error_code));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct s3_page whole, split;
	size_t cut = size ? data[0] % (size + 1) : 0;

	if (size > FUZZ_MAX_INPUT)
		return 0;
	int rw = parse_page(&whole, data, size, size);
	int rs = parse_page(&split, data, size, cut);

	if (rw == 0)
		check_page(&whole);
	if (rs == 0)
		check_page(&split);
	/* where the network cuts a body never changes the page */
	CHECK((rw == 0) == (rs == 0));
	if (rw == 0) {
		CHECK(whole.n_entries == split.n_entries && whole.n_prefixes == split.n_prefixes);
		CHECK(whole.truncated == split.truncated);
		for (size_t i = 0; i < whole.n_entries; i++) {
			CHECK(!strcmp(whole.entries[i].key, split.entries[i].key));
			CHECK(whole.entries[i].size == split.entries[i].size);
		}
	}
	remote__s3_page_fini(&whole);
	remote__s3_page_fini(&split);

	struct s3_profile prof;

	memset(&prof, 0, sizeof(prof));
	if (remote__s3_ini_parse((const char *)data, size, "default", &prof) == 0) {
		CHECK(strlen(prof.access_key) < sizeof(prof.access_key));
		CHECK(strlen(prof.secret_key) < sizeof(prof.secret_key));
		CHECK(strlen(prof.token) < sizeof(prof.token));
		CHECK(strlen(prof.region) < sizeof(prof.region));
	}

	struct s3_creds c;

	if (remote__s3_cred_json((const char *)data, size, &c) == 0) {
		CHECK(c.access_key[0] && strlen(c.access_key) < sizeof(c.access_key));
		CHECK(c.secret_key[0] && strlen(c.secret_key) < sizeof(c.secret_key));
		CHECK(strlen(c.token) < sizeof(c.token));
	} else {
		CHECK(!c.secret_key[0]);
	}

	char *s = malloc(size + 1);
	uint64_t a, b, t;
	int64_t ns;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (remote__s3_content_range(s, &a, &b, &t) == 0)
		CHECK(a <= b && b < t);
	remote__s3_parse_time(s, &ns);
	remote__s3_etag_equal(s, "\"0123\"");
	free(s);
	return 0;
}

#ifdef FUZZ_REPLAY_MAIN
#define FUZZ_NAME "fuzz_s3"
#include "tests/fuzz/replay_main.h"
#endif
