/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for remote/'s parsers of outside input: the percent
 * decoder and relative-path check that guard GET /v1/files/RELPATH, the
 * Range header parser, and the `--peers` list. Every input (cut at its
 * first NUL, as the HTTP layer hands the parsers C strings) goes through
 * all four, and each result is checked against its documented contract:
 * an accepted path is relative, with no empty, "." or ".." component, no
 * control byte and no hidden NUL; a range lies inside the file; decode
 * and encode round-trip; a parsed peer list is normalized and stable.
 * A broken contract prints the input and abort()s.
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   build-fuzz/tests/fuzz/fuzz_remote tests/fuzz/corpus_remote
 * With -DFUZZ_REPLAY_MAIN, main() replays the files (or directories of
 * files) given as arguments: the `fuzz_remote_replay` unit test.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/strbuf.h"
#include "common/text.h"
#include "remote/peer/auth.h"
#include "remote/remote.h"
#include "remote/peer/remote_int.h"

#define FUZZ_MAX_INPUT (REMOTE_MAX_REQUEST_URL + 1) /* bytes looked at */
#define FUZZ_MAX_PEERS_INPUT 4096		    /* --peers inputs tried */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *cur_input; /* for the failure message only */

static void contract_fail(const char *what, int line)
{
	fprintf(stderr, "fuzz_remote:%d: contract broken: %s\n  input: \"", line, what);
	for (const unsigned char *p = (const unsigned char *)cur_input; p && *p; p++)
		fprintf(stderr, isprint(*p) && *p != '"' && *p != '\\' ? "%c" : "\\x%02x", *p);
	fprintf(stderr, "\"\n");
	abort();
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			contract_fail(#cond, __LINE__);                                            \
	} while (0)

static int is_ctl(unsigned char c)
{
	return c < 0x20 || c == 0x7f;
}

static int is_kept(unsigned char c) /* bytes text_pct_encode leaves as they are */
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
}

static int is_upper_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

/* Independent restatement of the remote__relpath_check contract, by
 * scanning byte by byte: *bad for a reason to refuse with -EINVAL,
 * *too_long for one to refuse with -ENAMETOOLONG. */
static void model_relpath(const char *p, int *bad, int *too_long)
{
	size_t total = strlen(p), comp = 0;

	*too_long = total > REMOTE_MAX_RELPATH;
	*bad = total == 0 || p[0] == '/';
	for (size_t i = 0; i <= total; i++) {
		if (i == total || p[i] == '/') {
			const char *c = p + i - comp;

			if (comp == 0 || (comp == 1 && c[0] == '.') ||
			    (comp == 2 && c[0] == '.' && c[1] == '.'))
				*bad = 1;
			if (comp > REMOTE_MAX_NAME)
				*too_long = 1;
			comp = 0;
		} else {
			if (is_ctl((unsigned char)p[i]))
				*bad = 1;
			comp++;
		}
	}
}

/* remote__relpath_check(p) against the model; which error wins when both
 * apply is not part of the contract. */
static int check_relpath(const char *p)
{
	int bad, too_long;
	int rc = remote__relpath_check(p);

	model_relpath(p, &bad, &too_long);
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG);
	CHECK((rc == 0) == (!bad && !too_long));
	if (bad && !too_long)
		CHECK(rc == -EINVAL);
	if (too_long && !bad)
		CHECK(rc == -ENAMETOOLONG);
	return rc;
}

/* An accepted path is safe to hand to resolve. */
static void check_safe_path(const char *p)
{
	size_t n = strlen(p);

	CHECK(n > 0 && n <= REMOTE_MAX_RELPATH);
	CHECK(p[0] != '/' && p[n - 1] != '/');
	CHECK(strstr(p, "//") == NULL);
	CHECK(strcmp(p, ".") != 0 && strcmp(p, "..") != 0);
	CHECK(strncmp(p, "./", 2) != 0 && strncmp(p, "../", 3) != 0);
	CHECK(strstr(p, "/./") == NULL && strstr(p, "/../") == NULL);
	CHECK(!(n >= 2 && strcmp(p + n - 2, "/.") == 0));
	CHECK(!(n >= 3 && strcmp(p + n - 3, "/..") == 0));
	for (size_t i = 0; i < n; i++)
		CHECK(!is_ctl((unsigned char)p[i]));
}

/* Encode then decode s (no control bytes): must give s back, and the
 * encoding must use only kept bytes and upper-case %XX escapes. */
static void check_encode_roundtrip(const char *s)
{
	static char back[REMOTE_MAX_REQUEST_URL * 3 + 1];
	struct strbuf sb;
	const char *enc;

	strbuf_init(&sb);
	text_pct_encode(&sb, s, strlen(s), true);
	if (sb.failed) {
		strbuf_fini(&sb);
		return;
	}
	enc = sb.len ? sb.buf : "";
	for (size_t i = 0; enc[i]; i++) {
		if (enc[i] == '%') {
			CHECK(is_upper_hex(enc[i + 1]) && is_upper_hex(enc[i + 2]));
			i += 2;
		} else {
			CHECK(is_kept((unsigned char)enc[i]));
		}
	}
	CHECK(remote__pct_decode(enc, back, sizeof(back)) == 0);
	CHECK(strcmp(back, s) == 0);
	strbuf_fini(&sb);
}

static void fuzz_path(const char *in)
{
	static char out[REMOTE_MAX_RELPATH + 1]; /* as remote/peer/server.c's serve_file */
	static char exact[REMOTE_MAX_RELPATH + 1];
	size_t in_len = strlen(in), pct = 0, out_len;
	int canonical = 1;
	int rc = remote__pct_decode(in, out, sizeof(out));
	int rc_small;

	CHECK(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG);
	/* the raw input itself, as if it had come undecoded */
	if (check_relpath(in) == 0)
		check_safe_path(in);
	for (size_t i = 0; i < in_len; i++) {
		if (in[i] == '%') {
			pct++;
			canonical = canonical && is_upper_hex(in[i + 1]) && is_upper_hex(in[i + 2]);
			if (canonical) {
				unsigned v;

				sscanf(in + i + 1, "%2X", &v);
				canonical = !is_kept((unsigned char)v);
			}
		} else if (!is_kept((unsigned char)in[i])) {
			canonical = 0; /* hex digits of an escape are kept bytes */
		}
	}
	if (rc != 0) {
		/* with room for any output: a bad escape or byte stays refused,
		 * and a refusal for length was a real overflow or a later one */
		static char big[FUZZ_MAX_INPUT + 1];
		int rc_big = remote__pct_decode(in, big, sizeof(big));

		CHECK(rc_big == 0 || rc_big == -EINVAL);
		if (rc == -EINVAL)
			CHECK(rc_big == -EINVAL);
		if (rc_big == 0)
			CHECK(strlen(big) >= sizeof(out));
		return;
	}
	/* every '%' was a whole escape: no hidden NUL cut the output short */
	out_len = strlen(out);
	CHECK(pct * 3 <= in_len);
	CHECK(out_len == in_len - 2 * pct);
	CHECK(out_len < sizeof(out));
	for (size_t i = 0; i < out_len; i++)
		CHECK(!is_ctl((unsigned char)out[i]));
	if (pct == 0)
		CHECK(strcmp(out, in) == 0);
	/* output that fits exactly is accepted, one byte less is refused */
	CHECK(remote__pct_decode(in, exact, out_len + 1) == 0 && strcmp(exact, out) == 0);
	rc_small = remote__pct_decode(in, exact, out_len);
	CHECK(rc_small == -ENAMETOOLONG);
	/* decode(encode(y)) == y, and encode(decode(x)) == x for canonical x */
	check_encode_roundtrip(out);
	if (canonical) {
		struct strbuf sb;

		strbuf_init(&sb);
		text_pct_encode(&sb, out, strlen(out), true);
		if (!sb.failed)
			CHECK(strcmp(sb.len ? sb.buf : "", in) == 0);
		strbuf_fini(&sb);
	}
	/* what the server hands to resolve */
	if (check_relpath(out) == 0)
		check_safe_path(out);
}

static void fuzz_range(const char *in, uint64_t derived)
{
	const uint64_t sizes[] = {
	    0, 1, 2, 7, 100, 4096, UINT64_C(1) << 32, UINT64_MAX - 1, UINT64_MAX, derived};

	CHECK(remote__range_parse(NULL, 100, &(uint64_t){0}, &(uint64_t){0}) == 0);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t size = sizes[k], start = 0, len = 0;
		int rc = remote__range_parse(in, size, &start, &len);

		CHECK(rc == 0 || rc == 1 || rc == -ERANGE);
		if (rc != 1)
			continue;
		/* a single satisfiable range inside the file, no wrap-around */
		CHECK(size > 0);
		CHECK(len >= 1 && len <= size);
		CHECK(start < size);
		CHECK(start <= size - len);
		/* the same header parses the same way again */
		uint64_t s2 = 1, l2 = 1;

		CHECK(remote__range_parse(in, size, &s2, &l2) == 1 && s2 == start && l2 == len);
	}
}

static void fuzz_peers(const char *in, size_t in_len)
{
	static char sentinel;
	struct remote_peers *p = (struct remote_peers *)&sentinel, *q = NULL;
	char err[256];
	size_t commas = 0;
	int rc;

	if (in_len > FUZZ_MAX_PEERS_INPUT)
		return;
	memset(err, 'x', sizeof(err));
	rc = remote_peers_parse(in, &p, err, sizeof(err));
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
	if (rc != 0) {
		CHECK(p == NULL);
		if (rc == -EINVAL)
			CHECK(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
		return;
	}
	for (size_t i = 0; i < in_len; i++)
		commas += in[i] == ',';
	unsigned n = remote_peers_count(p);
	struct strbuf joined;

	CHECK(n >= 1 && n <= REMOTE_MAX_PEERS && n == commas + 1);
	CHECK(remote_peers_url(p, n) == NULL && remote_peers_hostport(p, n) == NULL);
	strbuf_init(&joined);
	for (unsigned k = 0; k < n; k++) {
		const char *url = remote_peers_url(p, k);
		const char *hp = remote_peers_hostport(p, k);

		CHECK(url && hp && strncmp(url, "http://", 7) == 0 && strcmp(url + 7, hp) == 0);
		CHECK(strlen(url) <= REMOTE_MAX_URL_LEN + 7);
		CHECK(url[strlen(url) - 1] != '/' && strrchr(hp, ':') != NULL);
		for (const char *c = url; *c; c++)
			CHECK(!isupper((unsigned char)*c) && *c != ',' &&
			      !is_ctl((unsigned char)*c));
		for (unsigned j = 0; j < k; j++)
			CHECK(strcmp(url, remote_peers_url(p, j)) != 0);
		if (k)
			strbuf_puts(&joined, ",");
		strbuf_puts(&joined, url);
	}
	/* the normalized list parses to itself: every node agrees on it */
	if (!joined.failed) {
		CHECK(remote_peers_parse(joined.buf, &q, NULL, 0) == 0);
		CHECK(remote_peers_count(q) == n);
		for (unsigned k = 0; k < n; k++)
			CHECK(strcmp(remote_peers_url(q, k), remote_peers_url(p, k)) == 0);
		for (uint64_t key = 0; key < 4; key++) {
			uint64_t ukey = remote_unit_key(in, in_len, key);

			CHECK(remote_owner(p, ukey) < n);
			CHECK(remote_owner(p, ukey) == remote_owner(q, ukey));
		}
		remote_peers_destroy(q);
	}
	strbuf_fini(&joined);
	unsigned node = n;

	CHECK(remote_parse_node("0", p, &node, NULL, 0) == 0 && node == 0);
	remote_peers_destroy(p);
}

/* An Authorization value from the network: never accepted unless it is a
 * signature of the request by the secret (then once only), never a crash. */
static void fuzz_auth(const char *in)
{
	static struct remote_replay *replay;
	const int64_t now = 1700000000;

	if (!replay)
		replay = remote_replay_create(); /* kept across inputs, as a server's */
	CHECK(replay);
	int rc = remote_auth_verify("s3cret", 6, in, "GET", "/v1/files/a", NULL, now, replay);
	CHECK(rc == 0 || rc == -EACCES || rc == -ETIME || rc == -EALREADY);
	if (rc == 0) {
		CHECK(strncasecmp(in, REMOTE_AUTH_SCHEME, strlen(REMOTE_AUTH_SCHEME)) == 0);
		CHECK(remote_auth_verify("s3cret", 6, in, "GET", "/v1/files/a", NULL, now,
					 replay) == -EALREADY);
	}
	CHECK(remote_auth_verify("s3cret", 6, in, "GET", "/v1/files/b", NULL, now, NULL) != 0 ||
	      rc != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n = size > FUZZ_MAX_INPUT ? FUZZ_MAX_INPUT : size;
	char *in = malloc(n + 1);
	uint64_t derived = 0;

	if (!in)
		return 0;
	memcpy(in, data, n);
	in[n] = '\0';
	n = strlen(in);
	cur_input = in;
	/* a file size the input chooses: its last 8 bytes, little-endian */
	for (size_t i = size >= 8 ? size - 8 : 0; i < size; i++)
		derived = derived >> 8 | (uint64_t)data[i] << 56;
	fuzz_path(in);
	fuzz_range(in, derived);
	fuzz_peers(in, n);
	fuzz_auth(in);
	cur_input = NULL;
	free(in);
	return 0;
}

#ifdef FUZZ_REPLAY_MAIN
#define FUZZ_NAME "fuzz_remote"
#include "tests/fuzz/replay_main.h"
#endif
