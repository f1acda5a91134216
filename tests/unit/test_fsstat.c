/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for tools/: reading the statistics document (odd but valid
 * documents, malformed ones, non-objects, caps), the fsstat table and its
 * watch-mode rates; and (test_fsstat_cli.c, run from here) the fsstat
 * command itself.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "tools/fsstat.h"
#include "tests/unit/check_run.h"
#include "tests/unit/test_fsstat.h"

/* A full statistics document (coordfs(1), STATISTICS) plus fields fsstat does not know, which it must ignore. */
const char fsstat_known_stats[] =
	"{ \"version\": 1, \"uptime_s\": 3723.5,\n"
	"  \"cache\": { \"capacity_bytes\": 2899102925, \"used_bytes\": 1310720000, \"items\": 12000,\n"
	"             \"hits\": 3, \"misses\": 1, \"hit_bytes\": 600, \"miss_bytes\": 400,\n"
	"             \"admitted\": 11990, \"refused\": 10, \"fill_errors\": 4,\n"
	"             \"future_field\": \"x\" },\n"
	"  \"source\": { \"reads\": 21, \"bytes\": 400, \"errors\": 2 },\n"
	"  \"peers\": { \"fetches\": 7, \"bytes\": 1000, \"errors\": 1, \"served\": 5, \"served_bytes\": 5242880,\n"
	"             \"fallbacks\": 3,\n"
	"             \"nodes\": [ { \"url\": \"http://10.0.0.1:7070\", \"up\": true },\n"
	"                        { \"url\": \"http://10.0.0.2:7070\", \"up\": false } ] },\n"
	"  \"prep\": { \"decodes\": 100, \"shared\": 20, \"errors\": 0, \"staged_bytes\": 33554432,\n"
	"    \"decoded_bytes\": 1048576, \"decoded_hits\": 7, \"decoded_files\": 3, \"decoded_refused\": 2,\n"
	"    \"decoded_mem\": 67108864, \"decoded_auto\": true },\n"
	"  \"fuse\": { \"opens\": 40, \"reads\": 1000, \"read_bytes\": 1610612736 },\n"
	"  \"extra\": { \"deep\": [1, [2, {\"x\": null}]] } }\n";

static json_t *parse_ok(const char *text)
{
	json_t *v = NULL;
	char why[256] = "";
	int rc = fsstat_parse(text, strlen(text), &v, why, sizeof(why));

	ck_assert_msg(rc == 0, "fsstat_parse(%s) = %d (%s), want 0", text, rc, why);
	ck_assert_ptr_nonnull(v);
	return v;
}

/* Render into a malloc'd string (caller frees). */
static char *render(const json_t *stats, const struct fsstat_view *view, int *rc)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	*rc = fsstat_render(f, stats, view);
	fclose(f);
	return text;
}

static char *render_text(const char *json, const struct fsstat_view *view)
{
	json_t *v = parse_ok(json);
	int rc;
	char *out = render(v, view, &rc);

	ck_assert_int_eq(rc, 0);
	json_decref(v);
	return out;
}

/* The line of text that starts with prefix (copied into buf). */
static const char *line_starting(const char *text, const char *prefix, char *buf, size_t len)
{
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, prefix, strlen(prefix)) == 0) {
			size_t n = strcspn(l, "\n");

			if (n >= len)
				n = len - 1;
			memcpy(buf, l, n);
			buf[n] = '\0';
			return buf;
		}
	}
	ck_abort_msg("no line starting with \"%s\" in:\n%s", prefix, text);
	return NULL;
}

/* ---- reading the document ---- */

START_TEST(parse_accepts_stats_and_odd_documents)
{
	json_t *v = parse_ok(fsstat_known_stats);

	ck_assert_double_eq(json_number_value(fsstat_field(v, "cache.capacity_bytes")), 2899102925.0);
	ck_assert_str_eq(json_string_value(fsstat_field(v, "cache.future_field")), "x");
	json_decref(v);

	/* Counters past 2^63 (a daemon bug or a very long life) still parse:
	 * integers are read as doubles. */
	v = parse_ok("{\"fuse\": {\"read_bytes\": 18446744073709551616, \"reads\": 1e3}, \"dup\": 1, \"dup\": 2,"
		     " \"s\": \"a\\u00e9\\ud83d\\ude00\xc3\xa9\", \"o\": {\"p\": {\"q\": 7}}}");
	ck_assert_double_eq_tol(json_number_value(fsstat_field(v, "fuse.read_bytes")), 18446744073709551616.0, 1e5);
	ck_assert_double_eq(json_number_value(fsstat_field(v, "fuse.reads")), 1000.0);
	ck_assert_str_eq(json_string_value(fsstat_field(v, "s")), "a\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9");
	ck_assert_double_eq(json_number_value(fsstat_field(v, "o.p.q")), 7.0);
	ck_assert_ptr_null(fsstat_field(v, "o.p.missing"));
	ck_assert_ptr_null(fsstat_field(v, "o.p.q.deeper"));
	ck_assert_ptr_nonnull(fsstat_field(v, "o.p"));
	ck_assert_ptr_null(fsstat_field(v, "o.pq"));
	ck_assert_ptr_null(fsstat_field(v, "o.p.q."));
	ck_assert_ptr_null(fsstat_field(v, "o..p"));
	ck_assert_ptr_null(fsstat_field(v, ".o"));
	ck_assert_ptr_null(fsstat_field(v, ""));
	ck_assert_ptr_null(fsstat_field(NULL, "o"));
	json_decref(v);
}
END_TEST

static void expect_reject(const char *text, size_t len, int want)
{
	json_t *v = (json_t *)&v; /* must be reset to NULL */
	char why[256] = "";
	int rc = fsstat_parse(text, len, &v, why, sizeof(why));

	ck_assert_msg(rc == want, "fsstat_parse(\"%.*s\") = %d, want %d", (int)(len > 60 ? 60 : len), text, rc,
		      want);
	ck_assert_ptr_null(v);
	ck_assert_msg(why[0] != '\0', "no reason given for rejecting \"%.*s\"", (int)(len > 60 ? 60 : len), text);
}

START_TEST(parse_rejects_malformed_and_non_objects)
{
	static const char *bad[] = {
		"", " ", "{", "}", "[1,]", "{\"a\":1,}", "{a:1}", "{\"a\" 1}", "{\"a\":}", "{\"a\":01}",
		"{\"a\":NaN}", "{\"a\":tru}", "{\"a\":\"abc}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}",
		"{\"a\":\"\\u0000\"}", "{\"a\":\"a\tb\"}", "{\"a\":\"\xff\"}", "{\"a\":\"\xc0\xaf\"}",
		"{\"a\":\"\xed\xa0\x80\"}", "{\"a\":1}}", "{\"a\":1} 2", "// c\n{}", "{'a':1}",
		/* valid JSON, but not a statistics object */
		"[1, 2]", "0", "\"x\"", "null", "true",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_reject(bad[i], strlen(bad[i]), -EINVAL);
	expect_reject("{\"a\":\"a\0b\"}", 11, -EINVAL);
	expect_reject("{}\0", 3, -EINVAL); /* embedded NUL after the value */
}
END_TEST

START_TEST(parse_every_prefix_of_a_document_is_rejected)
{
	size_t n = strlen(fsstat_known_stats);
	json_t *v = NULL;

	/* Cut anywhere before the closing brace: never a valid document. */
	for (size_t len = 0; len < n - 1; len++)
		expect_reject(fsstat_known_stats, len, -EINVAL);
	ck_assert_int_eq(fsstat_parse(fsstat_known_stats, n, &v, NULL, 0), 0);
	json_decref(v);
}
END_TEST

START_TEST(parse_and_render_survive_byte_mutations)
{
	size_t n = strlen(fsstat_known_stats);
	char *buf = malloc(n);
	static const char subst[] = { '{', '}', '[', ']', '"', '\\', ',', ':', '0', 'e', '-', '\0', '\x80', ' ' };
	unsigned accepted = 0, rejected = 0;

	ck_assert_ptr_nonnull(buf);
	for (size_t pos = 0; pos < n; pos++) {
		for (size_t k = 0; k < sizeof(subst); k++) {
			json_t *v = NULL;
			int rc;

			memcpy(buf, fsstat_known_stats, n);
			buf[pos] = subst[k];
			rc = fsstat_parse(buf, n, &v, NULL, 0);
			ck_assert_msg(rc == 0 || rc == -EINVAL, "mutation at %zu gave %d", pos, rc);
			ck_assert_msg((rc == 0) == (v != NULL), "tree and result disagree at %zu", pos);
			if (rc == 0) {
				/* Rendering whatever was accepted must not fail either. */
				char *text = render(v, NULL, &rc);

				ck_assert_int_eq(rc, 0);
				free(text);
				accepted++;
			} else {
				rejected++;
			}
			json_decref(v);
		}
	}
	ck_assert_uint_gt(accepted, 0);
	ck_assert_uint_gt(rejected, 0);
	free(buf);
}
END_TEST

START_TEST(parse_caps)
{
	json_t *v = NULL;
	size_t levels = 200000, n;
	char *s = malloc(2 * levels + 7);

	/* Nesting far beyond any statistics document: refused, not a stack
	 * overflow. */
	ck_assert_ptr_nonnull(s);
	s[0] = '{';
	memcpy(s + 1, "\"a\":", 4);
	memset(s + 5, '[', levels);
	memset(s + 5 + levels, ']', levels);
	memcpy(s + 5 + 2 * levels, "}", 2);
	expect_reject(s, strlen(s), -EINVAL);
	free(s);

	/* Input size cap: whitespace around a valid object, one byte too many. */
	n = FSSTAT_MAX_JSON + 1;
	s = malloc(n);
	ck_assert_ptr_nonnull(s);
	memset(s, ' ', n);
	memcpy(s, "{}", 2);
	expect_reject(s, n, -E2BIG);
	ck_assert_int_eq(fsstat_parse(s, n - 1, &v, NULL, 0), 0);
	json_decref(v);
	free(s);
}
END_TEST

/* ---- table ---- */

START_TEST(table_shows_known_numbers)
{
	struct fsstat_view view = { .mountpoint = "/mnt/data" };
	char *out = render_text(fsstat_known_stats, &view);
	char line[512], bar[FSSTAT_BAR_WIDTH + 3];
	size_t marks = 0;

	assert_contains(out, "/mnt/data");
	assert_contains(out, "uptime 1h 02m 03s");
	assert_contains(out, "version 1");
	/* 1310720000 / 2899102925 = 45.21%; 1.2 GiB of 2.7 GiB */
	line_starting(out, "cache ", line, sizeof(line));
	assert_contains(line, " 45.2%  1.2 GiB / 2.7 GiB");
	ck_assert_ptr_nonnull(strchr(line, '['));
	for (const char *p = strchr(line, '['); *p && *p != ']'; p++)
		marks += *p == '#';
	/* round(0.4521 * 30) = 14 marks */
	ck_assert_uint_eq(marks, 14);
	assert_contains(line, fsstat_bar(1310720000.0, 2899102925.0, bar, sizeof(bar)));
	assert_contains(out, "items 12000  admitted 11990  refused 10  fill errors 4");
	assert_contains(out, "hits 3  misses 1  hit ratio 75.0%  by bytes 60.0%");
	/* origins: 600 + 400 + 1000 = 2000 bytes */
	assert_contains(out, "cache 600 B (30.0%)  source 400 B (20.0%)  peers 1000 B (50.0%)");
	assert_contains(out, "reads 21  bytes 400 B  errors 2");
	assert_contains(out, "fetches 7  bytes 1000 B  errors 1  fallbacks 3  served 5 (5.0 MiB)");
	assert_contains(out, "node 0  up    http://10.0.0.1:7070");
	assert_contains(out, "node 1  DOWN  http://10.0.0.2:7070");
	assert_contains(out, "decodes 100  shared 20  errors 0  staged 32.0 MiB");
	assert_contains(out, "decoded  held 1.0 MiB  images 3  hits 7  refused 2  share 64.0 MiB (auto)");
	assert_contains(out, "opens 40  reads 1000  read 1.5 GiB");
	assert_lacks(out, "rates");
	assert_lacks(out, "future_field");
	free(out);
}
END_TEST

START_TEST(table_shows_missing_fields_as_dash)
{
	char *out = render_text("{\"version\": 1, \"cache\": {\"hits\": 5, \"used_bytes\": \"lots\"},"
				" \"peers\": {\"nodes\": [{\"url\": 7}, {}]}, \"fuse\": 3}",
				NULL);
	char line[512];

	assert_contains(out, "uptime -");
	line_starting(out, "cache ", line, sizeof(line));
	assert_contains(line, "[" /* empty bar */ "..............................]");
	assert_contains(line, " -  - / -");
	assert_contains(out, "hits 5  misses -  hit ratio -  by bytes -");
	assert_contains(out, "items -  admitted -  refused -  fill errors -");
	assert_contains(out, "reads -  bytes -  errors -");
	assert_contains(out, "node 0  -     -");
	assert_contains(out, "node 1  -     -");
	assert_contains(out, "decodes -  shared -  errors -  staged -");
	assert_contains(out, "decoded  held -  images -  hits -  refused -  share -\n");
	assert_contains(out, "opens -  reads -  read -");
	free(out);

	out = render_text("{\"peers\": {\"nodes\": []}}", NULL);
	assert_contains(out, "single node");
	free(out);
	out = render_text("{}", NULL);
	assert_contains(out, "nodes -");
	free(out);
}
END_TEST

/* Up to 16 nodes, one line each; more: a count, and only the nodes that
 * are not up (16 of them at most, then how many more). */
START_TEST(render_large_cluster_summarized)
{
	char *doc = NULL, *out;
	size_t len = 0;
	FILE *f = open_memstream(&doc, &len);

	ck_assert_ptr_nonnull(f);
	fputs("{\"peers\": {\"nodes\": [", f);
	for (int i = 0; i < 40; i++) /* 38, 39 down; 20 without a state */
		fprintf(f, "%s{\"url\": \"http://10.0.0.%d:7070\"%s}", i ? ", " : "", i,
			i >= 38 ? ", \"up\": false" : i == 20 ? "" : ", \"up\": true");
	fputs("]}}", f);
	fclose(f);
	out = render_text(doc, NULL);
	assert_contains(out, "nodes 40  up 37  not up 3");
	assert_contains(out, "node 20  -     http://10.0.0.20:7070");
	assert_contains(out, "node 38  DOWN  http://10.0.0.38:7070");
	assert_contains(out, "node 39  DOWN  http://10.0.0.39:7070");
	assert_lacks(out, "node 0  up");
	assert_lacks(out, "more not up");
	free(out);
	free(doc);

	/* a node down for answering slowly says so, with the counts */
	out = render_text("{\"peers\": {\"slow_answers\": 7, \"slow_downs\": 2, \"nodes\": ["
			  "{\"url\": \"http://a:1\", \"up\": true}, "
			  "{\"url\": \"http://b:1\", \"up\": false, \"slow\": true}, "
			  "{\"url\": \"http://c:1\", \"up\": false}]}}",
			  NULL);
	assert_contains(out, "slow answers 7  marked slow 2");
	assert_contains(out, "node 0  up    http://a:1");
	assert_contains(out, "node 1  SLOW  http://b:1");
	assert_contains(out, "node 2  DOWN  http://c:1");
	free(out);

	/* 100 nodes, all down: 16 listed, then the rest counted */
	doc = NULL;
	f = open_memstream(&doc, &len);
	fputs("{\"peers\": {\"nodes\": [", f);
	for (int i = 0; i < 100; i++)
		fprintf(f, "%s{\"url\": \"http://n%d\", \"up\": false}", i ? ", " : "", i);
	fputs("]}}", f);
	fclose(f);
	out = render_text(doc, NULL);
	assert_contains(out, "nodes 100  up 0  not up 100");
	assert_contains(out, "node 15  DOWN  http://n15");
	assert_lacks(out, "node 16  DOWN");
	assert_contains(out, "... 84 more not up");
	free(out);
	free(doc);

	/* 16 nodes: listed one by one, as before */
	out = render_text("{\"peers\": {\"nodes\": [{\"url\": \"a\", \"up\": true}, "
			  "{\"url\": \"b\", \"up\": true}, {\"url\": \"c\", \"up\": true}, "
			  "{\"url\": \"d\", \"up\": true}, {\"url\": \"e\", \"up\": true}, "
			  "{\"url\": \"f\", \"up\": true}, {\"url\": \"g\", \"up\": true}, "
			  "{\"url\": \"h\", \"up\": true}, {\"url\": \"i\", \"up\": true}, "
			  "{\"url\": \"j\", \"up\": true}, {\"url\": \"k\", \"up\": true}, "
			  "{\"url\": \"l\", \"up\": true}, {\"url\": \"m\", \"up\": true}, "
			  "{\"url\": \"n\", \"up\": true}, {\"url\": \"o\", \"up\": true}, "
			  "{\"url\": \"p\", \"up\": false}]}}",
			  NULL);
	assert_contains(out, "node 0  up    a");
	assert_contains(out, "node 15  DOWN  p");
	assert_lacks(out, "not up");
	free(out);

	/* A daemon whose xattr lists only the nodes not up: the counts come
	 * from node_count/nodes_up, the numbers from each node's index, and
	 * an empty list is still a cluster */
	out = render_text("{\"peers\": {\"node_count\": 1024, \"nodes_up\": 1022, "
			  "\"nodes_listed\": \"not_up\", \"nodes\": ["
			  "{\"url\": \"http://x7:1\", \"up\": false, \"index\": 7}, "
			  "{\"url\": \"http://x900:1\", \"up\": false, \"index\": 900}]},"
			  " \"cache\": {\"capacity_bytes\": 10}, \"dataset_bytes\": 100,"
			  " \"fuse\": {\"read_bytes\": 50}, \"source\": {\"bytes\": 50}}",
			  NULL);
	assert_contains(out, "nodes 1024  up 1022  not up 2");
	assert_contains(out, "node 7  DOWN  http://x7:1");
	assert_contains(out, "node 900  DOWN  http://x900:1");
	assert_contains(out, "optimum per pass -"); /* not a single node's to say */
	free(out);
	out = render_text("{\"peers\": {\"node_count\": 1024, \"nodes_up\": 1024, "
			  "\"nodes_listed\": \"not_up\", \"nodes\": []}}", NULL);
	assert_contains(out, "nodes 1024  up 1024  not up 0");
	assert_lacks(out, "single node");
	free(out);
}
END_TEST

/* Counts that cannot be (more up than nodes, a count past any size) and a
 * part past its whole: shown as unknown or in exponent form, never as the
 * wrapped or cut-off digits of a size_t or a %f. */
START_TEST(render_impossible_counts)
{
	char *out = render_text("{\"peers\": {\"node_count\": 3, \"nodes_up\": 5, "
				"\"nodes_listed\": \"not_up\", \"nodes\": []}}", NULL);

	assert_lacks(out, "184467");
	assert_contains(out, "nodes -");
	free(out);
	out = render_text("{\"peers\": {\"node_count\": 1e300, \"nodes_up\": 0, "
			  "\"nodes_listed\": \"not_up\", \"nodes\": []}}", NULL);
	assert_contains(out, "nodes -");
	assert_lacks(out, "nodes 0");
	free(out);
	/* more entries not up than the counts leave room for */
	out = render_text("{\"peers\": {\"node_count\": 20, \"nodes_up\": 19, "
			  "\"nodes_listed\": \"not_up\", \"nodes\": ["
			  "{\"up\": false}, {\"up\": false}, {\"up\": false}, {\"up\": false}, "
			  "{\"up\": false}, {\"up\": false}, {\"up\": false}, {\"up\": false}, "
			  "{\"up\": false}, {\"up\": false}, {\"up\": false}, {\"up\": false}, "
			  "{\"up\": false}, {\"up\": false}, {\"up\": false}, {\"up\": false}, "
			  "{\"up\": false}, {\"up\": false}]}}", NULL);
	assert_lacks(out, "184467");
	free(out);
	out = render_text("{\"cache\": {\"used_bytes\": 1e30, \"capacity_bytes\": 1}}", NULL);
	assert_contains(out, "1e+32%");
	free(out);
}
END_TEST

START_TEST(table_refuses_non_objects_and_masks_control_chars)
{
	json_t *v = json_loads("[1, 2]", 0, NULL);
	int rc;
	char *out = render(v, NULL, &rc);

	ck_assert_int_eq(rc, -EINVAL);
	free(out);
	json_decref(v);
	ck_assert_int_eq(fsstat_render(stdout, NULL, NULL), -EINVAL);

	out = render_text("{\"peers\": {\"nodes\": [{\"url\": \"http://x\\u001b[2J\\u0007y\", \"up\": true}]}}", NULL);
	assert_lacks(out, "\033");
	assert_lacks(out, "\a");
	assert_contains(out, "node 0  up    http://x?[2J?y");
	free(out);
}
END_TEST

static size_t marks(const char *bar)
{
	size_t n = 0;

	for (; *bar; bar++)
		n += *bar == '#';
	return n;
}

START_TEST(bar_fill)
{
	char bar[FSSTAT_BAR_WIDTH + 3], tiny[4];

	ck_assert_uint_eq(strlen(fsstat_bar(0, 100, bar, sizeof(bar))), FSSTAT_BAR_WIDTH + 2);
	ck_assert_uint_eq(marks(bar), 0);
	ck_assert_int_eq(bar[0], '[');
	ck_assert_int_eq(bar[FSSTAT_BAR_WIDTH + 1], ']');
	ck_assert_uint_eq(marks(fsstat_bar(100, 100, bar, sizeof(bar))), FSSTAT_BAR_WIDTH);
	ck_assert_uint_eq(marks(fsstat_bar(200, 100, bar, sizeof(bar))), FSSTAT_BAR_WIDTH);
	ck_assert_uint_eq(marks(fsstat_bar(99.9, 100, bar, sizeof(bar))), FSSTAT_BAR_WIDTH - 1);
	ck_assert_uint_eq(marks(fsstat_bar(1, 1e12, bar, sizeof(bar))), 1);
	ck_assert_uint_eq(marks(fsstat_bar(50, 100, bar, sizeof(bar))), FSSTAT_BAR_WIDTH / 2);
	ck_assert_uint_eq(marks(fsstat_bar(5, 0, bar, sizeof(bar))), 0);
	ck_assert_str_eq(fsstat_bar(50, 100, tiny, sizeof(tiny)), "");
}
END_TEST

/* ---- watch-mode rates ---- */

const char fsstat_rate_prev[] = "{\"uptime_s\": 10, \"cache\": {\"hits\": 10, \"misses\": 0, \"hit_bytes\": 0},"
				" \"source\": {\"bytes\": 0}, \"peers\": {\"bytes\": 0},"
				" \"fuse\": {\"opens\": 4, \"reads\": 100, \"read_bytes\": 0}}";
const char fsstat_rate_cur[] = "{\"uptime_s\": 12, \"cache\": {\"hits\": 40, \"misses\": 10, \"hit_bytes\": 3000000},"
			       " \"source\": {\"bytes\": 1000000}, \"peers\": {\"bytes\": 0},"
			       " \"fuse\": {\"opens\": 8, \"reads\": 300, \"read_bytes\": 4000000}}";

START_TEST(watch_rates_from_two_samples)
{
	json_t *prev = parse_ok(fsstat_rate_prev);
	struct fsstat_view view = { .rates = true, .prev = prev, .interval_s = 5.0 };
	char *out = render_text(fsstat_rate_cur, &view);

	/* The daemon's uptime difference (2 s) wins over the wall interval. */
	assert_contains(out, "rates    over 2.0 s");
	assert_contains(out, "reads/s 100.0  opens/s 2.0  read 2.0 MB/s");
	/* 30 hits, 10 misses in the interval */
	assert_contains(out, "cache 1.5 MB/s  source 0.5 MB/s  peers 0.0 MB/s  hit ratio 75.0%");
	/* while the totals say 40 / 50 */
	assert_contains(out, "hit ratio 80.0%");
	free(out);
	json_decref(prev);
}
END_TEST

START_TEST(watch_rates_fallbacks)
{
	json_t *prev = parse_ok("{\"fuse\": {\"reads\": 100, \"read_bytes\": 5}, \"cache\": {\"hits\": 1}}");
	struct fsstat_view view = { .rates = true, .prev = prev, .interval_s = 4.0 };
	char *out;

	/* No uptime in the samples: the wall interval is used. A counter that
	 * went down shows no rate rather than a negative one. */
	out = render_text("{\"fuse\": {\"reads\": 300, \"read_bytes\": 1}, \"cache\": {\"hits\": 1}}", &view);
	assert_contains(out, "over 4.0 s");
	assert_contains(out, "reads/s 50.0  opens/s -  read -");
	assert_contains(out, "cache -  source -  peers -  hit ratio -");
	free(out);
	json_decref(prev);

	/* First sample: rates since mount, over the uptime. */
	view.prev = NULL;
	out = render_text(fsstat_rate_cur, &view);
	assert_contains(out, "since mount (12.0s)");
	assert_contains(out, "reads/s 25.0  opens/s 0.7");
	assert_contains(out, "hit ratio 80.0%  by bytes");
	free(out);

	/* The daemon restarted between samples (uptime went back): since mount. */
	prev = parse_ok(fsstat_rate_cur);
	view.prev = prev;
	out = render_text(fsstat_rate_prev, &view);
	assert_contains(out, "since mount (10.0s)");
	assert_contains(out, "reads/s 10.0");
	free(out);
	json_decref(prev);
}
END_TEST

/* ---- passes over the dataset, prefill, object-store counters ---- */

/* A sample of a 1000-byte dataset in 4 files with a 600-byte cache. */
static json_t *pass_sample(double uptime, double read, double source, bool peers)
{
	char text[512];

	snprintf(text, sizeof(text),
		 "{\"uptime_s\": %g, \"files\": 4, \"dataset_bytes\": 1000,"
		 " \"cache\": {\"capacity_bytes\": 600}, \"source\": {\"bytes\": %g},"
		 " \"fuse\": {\"read_bytes\": %g}, \"peers\": {\"nodes\": %s}}",
		 uptime, source, read, peers ? "[{\"url\": \"http://a:1\", \"up\": true}]" : "[]");
	return parse_ok(text);
}

/* Feed a sample to the tracker and render it with the passes section. */
static char *feed(struct fsstat_passes *p, double uptime, double read, double source)
{
	json_t *v = pass_sample(uptime, read, source, false);
	struct fsstat_view view = { .passes = p };
	char *out;
	int rc;

	fsstat_passes_update(p, v);
	out = render(v, &view, &rc);
	ck_assert_int_eq(rc, 0);
	json_decref(v);
	return out;
}

START_TEST(passes_from_mount)
{
	struct fsstat_passes p;
	char *out;

	fsstat_passes_init(&p);
	free(feed(&p, 1, 0, 0));
	out = feed(&p, 2, 500, 500);
	/* optimum: 1000 - 600 */
	assert_contains(out, "dataset 4 files, 1000 B  read 0.50 passes  optimum per pass 400 B");
	assert_contains(out, "pass 1       from source 500 B so far, 50% read");
	free(out);
	/* Pass 1 ends at 1000 bytes read, half way between the samples:
	 * 500 + 0.5 * 700 = 850 bytes from source. */
	out = feed(&p, 3, 1500, 1200);
	/* optimum of a first pass: the whole dataset */
	assert_contains(out, "pass 1       from source 850 B  0.85x optimum\n");
	assert_contains(out, "pass 2       from source 350 B so far, 50% read");
	free(out);
	out = feed(&p, 4, 2000, 1400);
	assert_contains(out, "pass 1       from source 850 B  0.85x optimum\n");
	/* 1400 - 850 = 550 = 1.375 x 400 */
	assert_contains(out, "pass 2       from source 550 B  1.38x optimum");
	assert_contains(out, "pass 3       from source 0 B so far, 0% read");
	free(out);
	/* Three passes between two samples: each gets its interpolated share
	 * (400 source bytes per 1000 read). */
	out = feed(&p, 5, 5000, 2600);
	assert_contains(out, "pass 3       from source 400 B  1.00x optimum");
	assert_contains(out, "pass 5       from source 400 B  1.00x optimum");
	assert_contains(out, "pass 1       from source 850 B");
	free(out);
	/* Only the last FSSTAT_PASSES_SHOWN (5) complete passes are listed. */
	out = feed(&p, 6, 7000, 3400);
	assert_lacks(out, "pass 1 ");
	assert_lacks(out, "pass 2 ");
	assert_contains(out, "pass 3       from source 400 B");
	assert_contains(out, "pass 7       from source 400 B  1.00x optimum");
	free(out);
	/* The daemon restarted: from mount again. */
	out = feed(&p, 1, 300, 300);
	assert_contains(out, "read 0.30 passes");
	assert_lacks(out, "pass 2");
	assert_contains(out, "pass 1       from source 300 B so far, 30% read");
	free(out);
}
END_TEST

/* Hard links: names sharing another's units are read once, so the optimum
 * counts the dataset without them. */
START_TEST(passes_hard_links_read_once)
{
	struct fsstat_passes p;
	const char *tmpl = "{\"uptime_s\": %d, \"files\": 4, \"dataset_bytes\": 1000,"
			   " \"namespace\": {\"hard_links_shared_bytes\": 200},"
			   " \"cache\": {\"capacity_bytes\": 600}, \"source\": {\"bytes\": %d},"
			   " \"fuse\": {\"read_bytes\": %d}, \"peers\": {\"nodes\": []}}";
	char text[512];
	struct fsstat_view view = { .passes = &p };
	char *out = NULL;
	int rc;

	fsstat_passes_init(&p);
	for (int i = 0; i < 3; i++) {
		static const int read[] = { 0, 1000, 2000 }, source[] = { 0, 800, 1000 };
		snprintf(text, sizeof(text), tmpl, i + 1, source[i], read[i]);
		json_t *v = parse_ok(text);
		fsstat_passes_update(&p, v);
		free(out);
		out = render(v, &view, &rc);
		ck_assert_int_eq(rc, 0);
		json_decref(v);
	}
	/* 1000 - 200 shared - 600 cached */
	assert_contains(out, "optimum per pass 200 B");
	assert_contains(out, "hard links: 200 B of it are other names of files, read once");
	/* the first pass reads the 800 stored bytes, the second the 200 not cached */
	assert_contains(out, "pass 1       from source 800 B  1.00x optimum");
	assert_contains(out, "pass 2       from source 200 B  1.00x optimum");
	free(out);
}
END_TEST

/* A disk tier: its lines, and an optimum counting memory and disk. */
START_TEST(disk_tier_line_and_optimum)
{
	char line[256];
	char *out = render_text(
	    "{\"files\": 4, \"dataset_bytes\": 1000, \"source\": {\"bytes\": 0},"
	    " \"cache\": {\"capacity_bytes\": 300, \"disk\": {\"capacity_bytes\": 800,"
	    " \"used_bytes\": 200, \"items\": 5, \"hits\": 7, \"hit_bytes\": 2048,"
	    " \"admitted\": 6, \"refused\": 2, \"dropped_stale\": 1, \"dropped_corrupt\": 3,"
	    " \"dropped_cut\": 4, \"disabled\": 0, \"direct\": 1}}, \"peers\": {\"nodes\": []}}",
	    NULL);

	assert_contains(line_starting(out, "disk ", line, sizeof(line)), "25.0%  200 B / 800 B");
	assert_lacks(line, "OFF");
	assert_contains(out, "items 5  admitted 6  refused 2  hits 7 (2.0 KiB)");
	assert_contains(out, "dropped stale 1  corrupt 3  cut 4  reads direct");
	assert_contains(out, "cache - (-)  disk 2.0 KiB (100.0%)  source 0 B (0.0%)");
	/* inclusive tiers: 1000 - max(300, 800) */
	assert_contains(out, "optimum per pass 200 B");
	free(out);

	out = render_text("{\"cache\": {\"disk\": {\"capacity_bytes\": 800, \"disabled\": 1,"
			  " \"direct\": 0}}}", NULL);
	assert_contains(line_starting(out, "disk ", line, sizeof(line)), "OFF (I/O error)");
	assert_contains(out, "reads buffered");
	free(out);
	/* No tier (capacity 0, or an older daemon): no disk line, memory's optimum. */
	out = render_text("{\"files\": 4, \"dataset_bytes\": 1000, \"peers\": {\"nodes\": []},"
			  " \"cache\": {\"capacity_bytes\": 300, \"disk\": {\"capacity_bytes\": 0}}}",
			  NULL);
	ck_assert_ptr_null(strstr(out, "\ndisk "));
	assert_contains(out, "optimum per pass 700 B");
	free(out);
}
END_TEST

START_TEST(passes_seen_from_the_middle)
{
	struct fsstat_passes p;
	char *out;

	fsstat_passes_init(&p);
	/* fsstat started during pass 3: passes 1-3 are known only together. */
	out = feed(&p, 10, 2500, 1600);
	assert_lacks(out, "so far");
	free(out);
	out = feed(&p, 11, 3500, 2000);
	/* pass 3 ends at 3000 read: 1600 + 0.5 * 400 = 1800, 600 per pass;
	 * the optimum of passes 1-3 is 1000 + 400 + 400 */
	assert_contains(out, "passes 1-3   from source 600 B per pass  1.00x optimum");
	assert_contains(out, "pass 4       from source 200 B so far, 50% read");
	free(out);
}
END_TEST

/* fsstat --watch started right after mount, before any file was looked up
 * (dataset_bytes 0), and the whole first pass ended before its next sample:
 * pass 1's boundary is still placed, so passes 1 and 2 are not merged. */
START_TEST(passes_first_sample_before_any_lookup)
{
	struct fsstat_passes p;
	json_t *v;
	char *out;

	fsstat_passes_init(&p);
	v = parse_ok("{\"uptime_s\": 0.2, \"files\": 4, \"dataset_bytes\": 0,"
		     " \"source\": {\"bytes\": 0}, \"fuse\": {\"read_bytes\": 0}}");
	fsstat_passes_update(&p, v);
	json_decref(v);
	/* Pass 1 ends two thirds of the way to this sample: 1500 * 2/3. */
	free(feed(&p, 2, 1500, 1500));
	out = feed(&p, 3, 2000, 1600);
	assert_contains(out, "pass 1       from source 1000 B  1.00x optimum\n");
	assert_contains(out, "pass 2       from source 600 B  1.50x optimum");
	assert_lacks(out, "passes 1-2");
	free(out);
}
END_TEST

START_TEST(passes_without_tracker_or_dataset)
{
	json_t *v = pass_sample(5, 2500, 1600, false);
	char *out;
	int rc;

	/* One look: averages since mount, 1600 / 2.5 passes = 640 B. */
	out = render(v, NULL, &rc);
	assert_contains(out, "read 2.50 passes  optimum per pass 400 B");
	assert_contains(out, "from source 1.6 KiB in all, 640 B per pass on average");
	free(out);
	json_decref(v);

	/* With peers the optimum is not one node's to say. */
	v = pass_sample(5, 2500, 1600, true);
	out = render(v, NULL, &rc);
	assert_contains(out, "optimum per pass -");
	free(out);
	json_decref(v);

	/* No dataset size: no passes section, and the tracker ignores it. */
	out = render_text(fsstat_known_stats, NULL);
	assert_lacks(out, "passes");
	free(out);
}
END_TEST

START_TEST(kernel_cache_note_only_when_on)
{
	char *out = render_text("{\"fuse\": {\"opens\": 1, \"reads\": 2, \"kernel_cache\": true}}", NULL);

	assert_contains(out, "kernel page cache on: reads it serves are not counted");
	free(out);
	out = render_text("{\"fuse\": {\"opens\": 1, \"reads\": 2, \"kernel_cache\": false}}", NULL);
	assert_lacks(out, "kernel page cache");
	free(out);
	/* A daemon from before the field: no claim either way. */
	out = render_text("{\"fuse\": {\"opens\": 1, \"reads\": 2}}", NULL);
	assert_lacks(out, "kernel page cache");
	free(out);
}
END_TEST

START_TEST(prefill_and_requests_only_when_reported)
{
	json_t *prev = parse_ok("{\"uptime_s\": 10, \"prefill\": {\"target_bytes\": 1000000, \"done_bytes\": 50000,"
				" \"running\": true}}");
	struct fsstat_view view = { .rates = true, .prev = prev, .interval_s = 1 };
	const char *cur = "{\"uptime_s\": 12, \"prefill\": {\"target_bytes\": 1000000, \"done_bytes\": 250000,"
			  " \"running\": true}, \"source\": {\"reads\": 3, \"requests\": 10, \"retries\": 2,"
			  " \"latency_ms\": {\"p50\": 12.5, \"p99\": 80}, \"kind\": \"s3\", \"skipped_keys\": 4}}";
	char *out = render_text(cur, &view), line[512];

	line_starting(out, "prefill", line, sizeof(line));
	assert_contains(line, " 25.0%  244.1 KiB / 976.6 KiB  running");
	/* round(0.25 * 30) = 8 marks */
	assert_contains(line, "[########......................]");
	/* 200000 bytes in 2 s: 0.1 MB/s, 750000 bytes left: 7.5 s */
	assert_contains(out, "0.1 MB/s  ETA 7.5s");
	assert_contains(out, "s3 requests 10  retries 2  latency p50 12.5 ms  p99 80.0 ms  skipped keys 4");
	free(out);

	/* A local directory reports zeros there, and no prefill unless asked:
	 * neither is shown. Requests without a kind are. */
	out = render_text("{\"source\": {\"requests\": 0, \"retries\": 0, \"latency_ms\": {\"p50\": 0, \"p99\": 0},"
			  " \"kind\": \"local\", \"skipped_keys\": 0},"
			  " \"prefill\": {\"target_bytes\": 0, \"done_bytes\": 0, \"running\": false}}", &view);
	assert_lacks(out, "requests");
	assert_lacks(out, "prefill");
	free(out);
	out = render_text("{\"source\": {\"requests\": 5}}", NULL);
	assert_contains(out, "- requests 5  retries -  latency p50 -  p99 -\n");
	free(out);

	out = render_text("{\"prefill\": {\"target_bytes\": 100, \"done_bytes\": 100, \"running\": false}}", NULL);
	assert_contains(out, "100.0%  100 B / 100 B  done");
	assert_lacks(out, "ETA");
	free(out);

	out = render_text(fsstat_known_stats, &view);
	assert_lacks(out, "prefill");
	assert_lacks(out, "requests");
	assert_lacks(out, "latency");
	free(out);
	json_decref(prev);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fsstat");
	TCase *json = tcase_create("json");
	TCase *table = tcase_create("table");
	TCase *cli = tcase_create("cli");

	tcase_add_test(json, parse_accepts_stats_and_odd_documents);
	tcase_add_test(json, parse_rejects_malformed_and_non_objects);
	tcase_add_test(json, parse_every_prefix_of_a_document_is_rejected);
	tcase_add_test(json, parse_and_render_survive_byte_mutations);
	tcase_add_test(json, parse_caps);
	tcase_add_test(table, table_shows_known_numbers);
	tcase_add_test(table, table_shows_missing_fields_as_dash);
	tcase_add_test(table, table_refuses_non_objects_and_masks_control_chars);
	tcase_add_test(table, render_large_cluster_summarized);
	tcase_add_test(table, render_impossible_counts);
	tcase_add_test(table, bar_fill);
	tcase_add_test(table, watch_rates_from_two_samples);
	tcase_add_test(table, watch_rates_fallbacks);
	tcase_add_test(table, passes_from_mount);
	tcase_add_test(table, passes_seen_from_the_middle);
	tcase_add_test(table, disk_tier_line_and_optimum);
	tcase_add_test(table, passes_hard_links_read_once);
	tcase_add_test(table, passes_first_sample_before_any_lookup);
	tcase_add_test(table, kernel_cache_note_only_when_on);
	tcase_add_test(table, passes_without_tracker_or_dataset);
	tcase_add_test(table, prefill_and_requests_only_when_reported);
	fsstat_cli_tests(cli);
	suite_add_tcase(s, json);
	suite_add_tcase(s, table);
	suite_add_tcase(s, cli);
	return check_run(s);
}
