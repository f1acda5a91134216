/* SPDX-License-Identifier: MIT */
/* Unit tests for common/: size parsing, hashing, strbuf. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/file.h"
#include "common/hash.h"
#include "common/hist.h"
#include "common/log.h"
#include "common/size.h"
#include "common/strbuf.h"
#include "common/text.h"
#include "common/utf8.h"
#include "tests/unit/check_run.h"

START_TEST(size_plain_and_suffixes)
{
	uint64_t v = 0;

	ck_assert_int_eq(size_parse("0", 0, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(size_parse("12345", 0, &v), 0);
	ck_assert_uint_eq(v, 12345);
	ck_assert_int_eq(size_parse("4K", 0, &v), 0);
	ck_assert_uint_eq(v, 4096);
	ck_assert_int_eq(size_parse("4M", 0, &v), 0);
	ck_assert_uint_eq(v, 4u << 20);
	ck_assert_int_eq(size_parse("1.5G", 0, &v), 0);
	ck_assert_uint_eq(v, 3ull << 29);
	ck_assert_int_eq(size_parse("2T", 0, &v), 0);
	ck_assert_uint_eq(v, 2ull << 40);
	ck_assert_int_eq(size_parse("8MiB", 0, &v), 0);
	ck_assert_uint_eq(v, 8u << 20);
}
END_TEST

START_TEST(size_percent)
{
	uint64_t v = 0;

	ck_assert_int_eq(size_parse("25%", 1000, &v), 0);
	ck_assert_uint_eq(v, 250);
	ck_assert_int_eq(size_parse("100%", 1000, &v), 0);
	ck_assert_uint_eq(v, 1000);
}
END_TEST

START_TEST(size_rejects_bad_input)
{
	static const char *bad[] = { "", "12Q", "-1", "200%", "0%", "abc", "4KB5", "%", "1e400", "K", " 5", "5 ",
				     "0x100000", "1e9", "1E3M", "0x1p20" };
	uint64_t v = 77;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = size_parse(bad[i], 1000, &v);
		ck_assert_msg(rc == -EINVAL, "size_parse(\"%s\") returned %d, want -EINVAL", bad[i], rc);
	}
	ck_assert_int_eq(size_parse(NULL, 1000, &v), -EINVAL);
	ck_assert_uint_eq(v, 77);
}
END_TEST

START_TEST(hash_is_stable_and_spreads)
{
	ck_assert_uint_eq(hash_bytes("train/a.jpg", 11, 0), hash_bytes("train/a.jpg", 11, 0));
	ck_assert_uint_ne(hash_bytes("train/a.jpg", 11, 0), hash_bytes("train/b.jpg", 11, 0));
	ck_assert_uint_ne(hash_bytes("train/a.jpg", 11, 0), hash_bytes("train/a.jpg", 11, 1));
	ck_assert_int_eq(hash_ct_compare("secret", "secret", 6), 0);
	ck_assert_int_ne(hash_ct_compare("secret", "secreT", 6), 0);
}
END_TEST

START_TEST(utf8_replaces_ill_formed_bytes)
{
	struct strbuf sb;
	/* valid: ASCII, 2-, 3- and 4-byte sequences */
	static const char ok[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
	/* each ill-formed: lone continuation, truncated, overlong, surrogate, > U+10FFFF, 0xFF */
	static const char *const bad[] = {
	    "\x80", "\xC3", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF"};

	ck_assert(utf8_valid(ok, strlen(ok)));
	strbuf_init(&sb);
	utf8_sanitize(&sb, ok, strlen(ok));
	ck_assert_str_eq(sb.buf, ok);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(!utf8_valid(bad[i], strlen(bad[i])), "bad[%zu] taken as valid", i);
		strbuf_reset(&sb);
		utf8_sanitize(&sb, bad[i], strlen(bad[i]));
		ck_assert_msg(utf8_valid(sb.buf, sb.len), "bad[%zu] not repaired", i);
		/* every byte of an ill-formed sequence is replaced on its own */
		ck_assert_uint_eq(sb.len, 3 * strlen(bad[i]));
	}
	strbuf_reset(&sb);
	utf8_sanitize(&sb, "x\xFFy", 3);
	ck_assert_str_eq(sb.buf, "x\xEF\xBF\xBDy");
	strbuf_fini(&sb);
}
END_TEST

START_TEST(log_escapes_control_characters)
{
	int p[2], saved = dup(STDERR_FILENO);
	char got[512];

	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
	/* A file name that tries to forge a second log line. */
	log_write(LOG_ERR, "%s: read failed", "a\ncoordfs: error: forged\x1b[0m\x7f");
	dup2(saved, STDERR_FILENO);
	close(p[1]);
	ssize_t n = read(p[0], got, sizeof(got) - 1);
	close(p[0]);
	close(saved);
	ck_assert_int_gt(n, 0);
	got[n] = '\0';
	ck_assert_str_eq(
	    got, "coordfs: error: a\\x0acoordfs: error: forged\\x1b[0m\\x7f: read failed\n");
}
END_TEST

START_TEST(strbuf_json_escapes)
{
	struct strbuf sb;

	strbuf_init(&sb);
	strbuf_append_json(&sb, json_string("a\"b\\c\n"), JSON_ENCODE_ANY);
	ck_assert_str_eq(sb.buf, "\"a\\\"b\\\\c\\n\"");
	ck_assert(!sb.failed);
	strbuf_append_json(&sb, NULL, 0); /* an allocation failed upstream */
	ck_assert(sb.failed);
	sb.failed = false;
	strbuf_reset(&sb);
	for (int i = 0; i < 1000; i++)
		strbuf_printf(&sb, "%d,", i);
	ck_assert(!sb.failed);
	ck_assert_uint_eq(strlen(sb.buf), sb.len);
	strbuf_fini(&sb);
}
END_TEST

/* A file read whole, growing past the first buffer; empty; over the cap;
 * missing. */
START_TEST(hist_quantiles)
{
	struct hist *h = calloc(1, sizeof(*h));

	ck_assert_ptr_nonnull(h);
	ck_assert(hist_quantile_ms(h, 0.5) == 0);
	/* 1..10000 us uniformly: p50 ~ 5 ms, p99 ~ 9.9 ms */
	for (uint64_t us = 1; us <= 10000; us++)
		hist_add(h, us);
	double p50 = hist_quantile_ms(h, 0.5), p99 = hist_quantile_ms(h, 0.99);

	ck_assert_msg(p50 > 5.0 * 0.94 && p50 < 5.0 * 1.06, "p50 %f", p50);
	ck_assert_msg(p99 > 9.9 * 0.94 && p99 < 9.9 * 1.06, "p99 %f", p99);
	/* 98 at 1 ms and 2 at 100 ms, as a source's requests */
	memset(h, 0, sizeof(*h));
	for (int i = 0; i < 98; i++)
		hist_add(h, 1000);
	hist_add(h, 100000);
	hist_add(h, 100000);
	p50 = hist_quantile_ms(h, 0.5);
	p99 = hist_quantile_ms(h, 0.99);
	ck_assert_msg(p50 > 0.94 && p50 < 1.06, "p50 %f", p50);
	ck_assert_msg(p99 > 94.0 && p99 < 106.0, "p99 %f", p99);
	/* huge values land in the last bucket, no overflow */
	hist_add(h, UINT64_MAX);
	ck_assert(hist_quantile_ms(h, 1.0) > 0);
	free(h);
}
END_TEST

START_TEST(text_pct_u64_env)
{
	struct strbuf sb;
	const char key[] = "d/a b+c&d%e?#\x01\xc3\xa9~-_.";

	strbuf_init(&sb);
	text_pct_encode(&sb, key, strlen(key), true);
	ck_assert_str_eq(sb.buf, "d/a%20b%2Bc%26d%25e%3F%23%01%C3%A9~-_.");
	strbuf_reset(&sb);
	text_pct_encode(&sb, "a/b", 3, false);
	ck_assert_str_eq(sb.buf, "a%2Fb");
	strbuf_fini(&sb);

	const char *p = "18446744073709551615-x";
	uint64_t v = 0;
	ck_assert_int_eq(text_parse_u64(&p, &v), 0);
	ck_assert(v == UINT64_MAX);
	ck_assert_str_eq(p, "-x");
	p = "18446744073709551616";
	ck_assert_int_eq(text_parse_u64(&p, &v), -EINVAL);
	p = "x1";
	ck_assert_int_eq(text_parse_u64(&p, &v), -EINVAL);
	ck_assert_str_eq(p, "x1");

	/* what the options take as a count and as a plain decimal */
	ck_assert(text_is_digits("0") && text_is_digits("0123"));
	static const char *const not_digits[] = {"", " 1", "+1", "-1", "1 ", "0x10", "1\t", "1.0"};
	for (size_t i = 0; i < sizeof(not_digits) / sizeof(not_digits[0]); i++)
		ck_assert_msg(!text_is_digits(not_digits[i]), "'%s'", not_digits[i]);
	ck_assert(text_is_plain_decimal("2") && text_is_plain_decimal("0.5") &&
		  text_is_plain_decimal("2.") && text_is_plain_decimal(".5"));
	static const char *const not_plain[] = {"", ".", "1..2", "1.2.3", "0x1p1", "1e0",
						"-1", " 1", "inf", "nan"};
	for (size_t i = 0; i < sizeof(not_plain) / sizeof(not_plain[0]); i++)
		ck_assert_msg(!text_is_plain_decimal(not_plain[i]), "'%s'", not_plain[i]);

	setenv("COORDFS_TEST_TEXT_ENV", "", 1);
	ck_assert_ptr_null(text_env("COORDFS_TEST_TEXT_ENV"));
	setenv("COORDFS_TEST_TEXT_ENV", "v", 1);
	ck_assert_str_eq(text_env("COORDFS_TEST_TEXT_ENV"), "v");
	unsetenv("COORDFS_TEST_TEXT_ENV");
	ck_assert_ptr_null(text_env("COORDFS_TEST_TEXT_ENV"));
}
END_TEST

/* Relative paths against the current directory, "/" without a double
 * slash, absolute ones as given, and nothing resolved (a link stays a
 * link, ".." stays). */
START_TEST(file_path_absolute_keeps_links)
{
	char cwd[4096], want[4200], *got;

	ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
	got = file_path_absolute("a/../link");
	snprintf(want, sizeof(want), "%s/a/../link", cwd);
	ck_assert_str_eq(got, want);
	free(got);
	got = file_path_absolute("/x/./y");
	ck_assert_str_eq(got, "/x/./y");
	free(got);
	ck_assert_int_eq(chdir("/"), 0);
	got = file_path_absolute("peers");
	ck_assert_str_eq(got, "/peers");
	free(got);
	ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

START_TEST(file_read_all_whole_capped_missing)
{
	char path[] = "/tmp/test_common.XXXXXX";
	int fd = mkstemp(path);
	size_t big = (200u << 10) + 7, len = 1;
	uint8_t *want = malloc(big), *got = NULL;

	ck_assert_int_ge(fd, 0);
	ck_assert_ptr_nonnull(want);
	ck_assert_int_eq(file_read_all(path, 100, &got, &len), 0); /* empty */
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(len, 0);
	free(got);
	for (size_t i = 0; i < big; i++)
		want[i] = (uint8_t)(hash_mix64(i) >> 7);
	ck_assert_int_eq(write(fd, want, big), (ssize_t)big);
	close(fd);
	ck_assert_int_eq(file_read_all(path, big, &got, &len), 0);
	ck_assert_uint_eq(len, big);
	ck_assert_int_eq(memcmp(got, want, big), 0);
	free(got);
	ck_assert_int_eq(file_read_all(path, big - 1, &got, &len), -EFBIG);
	ck_assert_int_eq(file_read_all(path, 10, &got, &len), -EFBIG);
	unlink(path);
	ck_assert_int_eq(file_read_all(path, big, &got, &len), -ENOENT);
	free(want);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("common");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, size_plain_and_suffixes);
	tcase_add_test(tc, size_percent);
	tcase_add_test(tc, size_rejects_bad_input);
	tcase_add_test(tc, hash_is_stable_and_spreads);
	tcase_add_test(tc, strbuf_json_escapes);
	tcase_add_test(tc, utf8_replaces_ill_formed_bytes);
	tcase_add_test(tc, log_escapes_control_characters);
	tcase_add_test(tc, file_read_all_whole_capped_missing);
	tcase_add_test(tc, file_path_absolute_keeps_links);
	tcase_add_test(tc, hist_quantiles);
	tcase_add_test(tc, text_pct_u64_env);
	suite_add_tcase(s, tc);
	return check_run(s);
}
