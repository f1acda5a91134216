/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the S3 client's parsers and pure parts (remote/s3/s3_int.h),
 * fed odd, split, hostile and truncated input: the ListObjectsV2 query and
 * percent coding, times, Content-Range and ETag checks, the refresh time,
 * the full-jitter backoff bounds, the streaming page parser, the INI reader
 * of the shared files and credential JSON. Part of the unit test `s3`
 * (test_s3.c runs them).
 */
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/deadline.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "remote/http.h"
#include "remote/remote.h"
#include "remote/s3.h"
#include "remote/s3/s3_int.h"
#include "tests/unit/test_s3.h"

/* ---- query and coding ------------------------------------------------- */

START_TEST(test_query_order_and_encoding)
{
	struct strbuf sb;

	strbuf_init(&sb);
	remote__s3_list_query(&sb, "a/b+c=d e", "/", "train/c 1/", 1000, NULL);
	ck_assert_str_eq(sb.buf,
			 "continuation-token=a%2Fb%2Bc%3Dd%20e&delimiter=%2F"
			 "&encoding-type=url&list-type=2&max-keys=1000&prefix=train%2Fc%201%2F");
	strbuf_reset(&sb);
	remote__s3_list_query(&sb, NULL, NULL, "t/", 1000, "t/c1.");
	ck_assert_str_eq(
	    sb.buf, "encoding-type=url&list-type=2&max-keys=1000&prefix=t%2F&start-after=t%2Fc1.");
	strbuf_reset(&sb);
	remote__s3_list_query(&sb, NULL, NULL, "", 0, NULL);
	ck_assert_str_eq(sb.buf, "encoding-type=url&list-type=2&prefix=");
	strbuf_reset(&sb);
	remote__s3_list_query(&sb, NULL, NULL, "\xc3\xbc~-_.", 5, NULL);
	ck_assert_str_eq(sb.buf, "encoding-type=url&list-type=2&max-keys=5&prefix=%C3%BC~-_.");
	strbuf_fini(&sb);
}
END_TEST

/* ---- small parsers ---------------------------------------------------- */

START_TEST(test_parse_time)
{
	int64_t ns = 0;

	ck_assert_int_eq(remote__s3_parse_time("1970-01-01T00:00:01Z", &ns), 0);
	ck_assert_int_eq(ns, 1000000000);
	ck_assert_int_eq(remote__s3_parse_time("2026-12-02T14:37:09.250Z", &ns), 0);
	ck_assert_int_eq(ns, 1796222229LL * 1000000000 + 250000000);
	ck_assert_int_eq(remote__s3_parse_time("2026-12-02T14:37:09+00:00", &ns), 0);
	ck_assert_int_eq(ns, 1796222229LL * 1000000000);
	const char *bad[] = {"",
			     "2026-12-02",
			     "2026-13-02T00:00:00Z",
			     "2026-12-02T24:00:00Z",
			     "2026-12-02T14:37:09.Z",
			     "2026-12-02T14:37:09Zjunk",
			     "2026-12-02T14:37:09+01:00",
			     "x026-12-02T14:37:09Z"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(remote__s3_parse_time(bad[i], &ns) == -EINVAL, "%s", bad[i]);
}
END_TEST

START_TEST(test_content_range)
{
	uint64_t a, b, t;

	ck_assert_int_eq(remote__s3_content_range("bytes 0-9/10", &a, &b, &t), 0);
	ck_assert(a == 0 && b == 9 && t == 10);
	ck_assert_int_eq(remote__s3_content_range("bytes 5-5/18446744073709551615", &a, &b, &t), 0);
	ck_assert(t == UINT64_MAX);
	const char *bad[] = {"bytes */10",
			     "bytes 0-9/*",
			     "bytes 9-0/10",
			     "bytes 0-10/10",
			     "bytes 0-9/10x",
			     "bits 0-9/10",
			     "bytes -9/10",
			     "bytes 0-9",
			     "bytes 0-9/18446744073709551616",
			     "bytes 0-9/10, 1-2/10",
			     ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(remote__s3_content_range(bad[i], &a, &b, &t) == -EINVAL, "%s",
			      bad[i]);
	ck_assert_int_eq(remote__s3_content_range(NULL, &a, &b, &t), -EINVAL);
}
END_TEST

START_TEST(test_etag_equal)
{
	ck_assert(remote__s3_etag_equal("\"abc\"", "\"abc\""));
	ck_assert(remote__s3_etag_equal("abc", "\"abc\""));
	ck_assert(!remote__s3_etag_equal("\"abc\"", "\"abd\""));
	ck_assert(!remote__s3_etag_equal("\"abc\"", "\"abc-1\""));
	ck_assert(!remote__s3_etag_equal("W/\"abc\"", "\"abc\""));
	ck_assert(!remote__s3_etag_equal("\"abc\"", "W/\"abc\""));
	/* weak tags: equal exactly as listed */
	ck_assert(remote__s3_etag_equal("W/\"abc\"", "W/\"abc\""));
	ck_assert(!remote__s3_etag_equal("W/\"abc\"", "W/\"abd\""));
	ck_assert(!remote__s3_etag_equal("W/", "W/"));
	ck_assert(!remote__s3_etag_equal("\"\"", "\"\""));
	ck_assert(!remote__s3_etag_equal("", ""));
	ck_assert(!remote__s3_etag_equal(NULL, "\"abc\""));
}
END_TEST

START_TEST(test_refresh_at)
{
	/* an hour left: 5 minutes before expiry */
	ck_assert_int_eq(remote__s3_refresh_at(1000, 1000 + 3600), 1000 + 3300);
	/* 4 s left: at half */
	ck_assert_int_eq(remote__s3_refresh_at(1000, 1004), 1002);
	/* 10 minutes left: exactly at the 5-minute mark either way */
	ck_assert_int_eq(remote__s3_refresh_at(1000, 1600), 1300);
	/* expired: now */
	ck_assert_int_eq(remote__s3_refresh_at(1000, 900), 1000);
	/* always before expiry when there is time left */
	for (int64_t left = 1; left < 5000; left += 7)
		ck_assert(remote__s3_refresh_at(0, left) < left ||
			  remote__s3_refresh_at(0, left) == 0);
}
END_TEST

START_TEST(test_backoff_bounds)
{
	ck_assert_uint_eq(remote_http_backoff_ms(0, 100, 5000), 0);
	for (unsigned attempt = 1; attempt <= 70; attempt++) {
		uint64_t ceiling = 100;

		for (unsigned i = 1; i < attempt && ceiling < 5000; i++)
			ceiling *= 2;
		if (ceiling > 5000)
			ceiling = 5000;
		unsigned lo = UINT32_MAX, hi = 0;

		for (int i = 0; i < 400; i++) {
			unsigned v = remote_http_backoff_ms(attempt, 100, 5000);

			ck_assert_msg(v <= ceiling, "attempt %u: %u > %llu", attempt, v,
				      (unsigned long long)ceiling);
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
		}
		/* full jitter: spread over the range, not a constant */
		ck_assert_msg(lo < ceiling / 4 && hi > ceiling * 3 / 4, "attempt %u: %u..%u",
			      attempt, lo, hi);
	}
	ck_assert_uint_eq(remote_http_backoff_ms(5, 0, 5000), 0);
	ck_assert_uint_le(remote_http_backoff_ms(40, UINT32_MAX / 2, UINT32_MAX), UINT32_MAX);
}
END_TEST

/* ---- page parser ------------------------------------------------------ */

static const char page_xml[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>b</Name><Prefix>p/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>"
    "<IsTruncated>true</IsTruncated>"
    "<NextContinuationToken>tok/+=&amp;</NextContinuationToken>"
    "<Contents><Key>p/a &amp; b.txt</Key><LastModified>2026-12-02T14:37:09.250Z"
    "</LastModified><ETag>&quot;0123abcd&quot;</ETag><Size>10</Size>"
    "<StorageClass>STANDARD</StorageClass><Owner><ID>x</ID></Owner></Contents>"
    "<Contents><Size>0</Size><Key><![CDATA[p/<cdata>]]></Key>"
    "<ETag>\"e2\"</ETag><Unknown><Key>ignored</Key></Unknown></Contents>"
    "<Contents><Key>p/\xc3\xbc</Key><Size>18446744073709551615</Size></Contents>"
    "<CommonPrefixes><Prefix>p/sub/</Prefix></CommonPrefixes>"
    "<CommonPrefixes><Prefix>p/sub2/</Prefix></CommonPrefixes>"
    "</ListBucketResult>";

static void check_page(const struct s3_page *p)
{
	ck_assert_int_eq(p->failed, 0);
	ck_assert_uint_eq(p->n_entries, 3);
	ck_assert_str_eq(p->entries[0].key, "p/a & b.txt");
	ck_assert_uint_eq(p->entries[0].size, 10);
	ck_assert_str_eq(p->entries[0].etag, "\"0123abcd\"");
	ck_assert_int_eq(p->entries[0].mtime_ns, 1796222229LL * 1000000000 + 250000000);
	ck_assert_str_eq(p->entries[1].key, "p/<cdata>");
	ck_assert_uint_eq(p->entries[1].size, 0);
	ck_assert_str_eq(p->entries[1].etag, "\"e2\"");
	ck_assert_str_eq(p->entries[2].key, "p/\xc3\xbc");
	ck_assert_uint_eq(p->entries[2].key_len, 4);
	ck_assert(p->entries[2].size == UINT64_MAX);
	ck_assert_uint_eq(p->n_prefixes, 2);
	ck_assert_str_eq(p->prefixes[0], "p/sub/");
	ck_assert_str_eq(p->prefixes[1], "p/sub2/");
	ck_assert(p->truncated);
	ck_assert_str_eq(p->next_token, "tok/+=&");
}

START_TEST(test_page_whole)
{
	struct s3_page p;

	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, page_xml, strlen(page_xml), true), 0);
	check_page(&p);
	remote__s3_page_fini(&p);
}
END_TEST

/* The network splits a body anywhere: every split point gives the same page. */
START_TEST(test_page_split_everywhere)
{
	size_t n = strlen(page_xml);

	for (size_t cut = 0; cut <= n; cut++) {
		struct s3_page p;

		ck_assert_int_eq(remote__s3_page_init(&p), 0);
		ck_assert_int_eq(remote__s3_page_feed(&p, page_xml, cut, false), 0);
		ck_assert_int_eq(remote__s3_page_feed(&p, page_xml + cut, n - cut, true), 0);
		check_page(&p);
		remote__s3_page_fini(&p);
	}
	/* and byte by byte */
	struct s3_page p;

	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(remote__s3_page_feed(&p, page_xml + i, 1, false), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, "", 0, true), 0);
	check_page(&p);
	remote__s3_page_fini(&p);
}
END_TEST

static int parse_one(const char *xml)
{
	struct s3_page p;

	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	int r = remote__s3_page_feed(&p, xml, strlen(xml), true);

	remote__s3_page_fini(&p);
	return r;
}

#define LBR(x) "<ListBucketResult>" x "</ListBucketResult>"

START_TEST(test_page_bad_inputs)
{
	const char *bad[] = {
	    "",
	    "not xml at all",
	    "<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents>", /* cut */
	    "<Other/>",
	    LBR("<Contents><Key>a</Key></Contents>"),		   /* no Size */
	    LBR("<Contents><Size>1</Size></Contents>"),		   /* no Key */
	    LBR("<Contents><Key></Key><Size>1</Size></Contents>"), /* empty key */
	    LBR("<Contents><Key>a</Key><Size>-1</Size></Contents>"),
	    LBR("<Contents><Key>a</Key><Size>1x</Size></Contents>"),
	    LBR("<Contents><Key>a</Key><Size>18446744073709551616</Size></Contents>"),
	    LBR("<Contents><Key>a</Key><Size>1</Size><LastModified>yesterday"
		"</LastModified></Contents>"),
	    LBR("<Contents><Key>a&#0;b</Key><Size>1</Size></Contents>"),
	    LBR("<IsTruncated>maybe</IsTruncated>"),
	    LBR("<IsTruncated>true</IsTruncated>"), /* truncated without a token */
	    LBR("<CommonPrefixes><Prefix></Prefix></CommonPrefixes>"),
	    /* entity expansion is refused outright */
	    "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\">"
	    "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]>" LBR("<Name>&b;</Name>"),
	    "<!DOCTYPE l SYSTEM \"file:///etc/passwd\">" LBR(""),
	    LBR("<a><b><c><d><e><f><g><h><i>deep</i></h></g></f></e></d></c></b></a>"),
	    LBR("") "<second/>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(parse_one(bad[i]) < 0, "accepted #%zu: %s", i, bad[i]);
	/* fine: empty page, not truncated, unknown elements */
	ck_assert_int_eq(parse_one(LBR("")), 0);
	ck_assert_int_eq(parse_one(LBR("<IsTruncated>false</IsTruncated><Foo>x</Foo>")), 0);
}
END_TEST

START_TEST(test_page_caps)
{
	struct strbuf sb;
	char *key = malloc(REMOTE_S3_MAX_KEY + 2);

	ck_assert_ptr_nonnull(key);
	memset(key, 'k', REMOTE_S3_MAX_KEY + 1);
	key[REMOTE_S3_MAX_KEY + 1] = '\0';
	strbuf_init(&sb);
	/* a key one byte over S3's limit: that object is unusable, the page
	 * (and the object after it) fine */
	strbuf_printf(&sb, LBR("<Contents><Key>%s</Key><Size>1</Size></Contents>"
			       "<Contents><Key>b</Key><Size>2</Size></Contents>"), key);
	struct s3_page p;
	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, sb.buf, sb.len, true), 0);
	ck_assert_uint_eq(p.n_entries, 2);
	ck_assert_str_eq(p.entries[0].unusable, "key over 1024 bytes");
	ck_assert_ptr_null(p.entries[1].unusable);
	remote__s3_page_fini(&p);
	/* exactly at the limit */
	key[REMOTE_S3_MAX_KEY] = '\0';
	strbuf_reset(&sb);
	strbuf_printf(&sb, LBR("<Contents><Key>%s</Key><Size>1</Size></Contents>"), key);
	ck_assert_int_eq(parse_one(sb.buf), 0);
	/* an oversized ETag: that object only */
	strbuf_reset(&sb);
	strbuf_printf(&sb, LBR("<Contents><Key>a</Key><Size>1</Size><ETag>%.129s</ETag></Contents>"
			       "<Contents><Key>b</Key><Size>2</Size><ETag>\"e\"</ETag></Contents>"),
		      key);
	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, sb.buf, sb.len, true), 0);
	ck_assert_uint_eq(p.n_entries, 2);
	ck_assert_str_eq(p.entries[0].unusable, "ETag over 128 bytes");
	ck_assert_str_eq(p.entries[0].etag, "");
	ck_assert_ptr_null(p.entries[1].unusable);
	ck_assert_str_eq(p.entries[1].etag, "\"e\"");
	remote__s3_page_fini(&p);
	/* a huge text in an element we keep */
	strbuf_reset(&sb);
	strbuf_puts(&sb, "<ListBucketResult><NextContinuationToken>");
	for (int i = 0; i < S3_MAX_XML_TEXT / 1000 + 2; i++)
		strbuf_puts(&sb, key);
	strbuf_puts(&sb, "</NextContinuationToken></ListBucketResult>");
	ck_assert_int_lt(parse_one(sb.buf), 0);
	/* more entries than any page may hold */
	strbuf_reset(&sb);
	strbuf_puts(&sb, "<ListBucketResult>");
	for (int i = 0; i <= S3_MAX_PAGE_ENTRIES; i++)
		strbuf_puts(&sb, "<Contents><Key>a</Key><Size>1</Size></Contents>");
	strbuf_puts(&sb, "</ListBucketResult>");
	ck_assert(!sb.failed);
	ck_assert_int_lt(parse_one(sb.buf), 0);
	strbuf_fini(&sb);
	free(key);
}
END_TEST

START_TEST(test_page_url_encoded)
{
	struct s3_page p;
	/* EncodingType may come after the entries it applies to */
	const char *xml = LBR("<Contents><Key>a%2Fb+c%2Bd%20%C3%BC</Key><Size>1</Size></Contents>"
			      "<Contents><Key>nul%00here</Key><Size>1</Size></Contents>"
			      "<Contents><Key>plain</Key><Size>2</Size></Contents>"
			      "<CommonPrefixes><Prefix>p%2Fq%2F</Prefix></CommonPrefixes>"
			      "<EncodingType>url</EncodingType>");

	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, xml, strlen(xml), true), 0);
	ck_assert_uint_eq(p.n_entries, 2);
	ck_assert_str_eq(p.entries[0].key, "a/b c+d \xc3\xbc");
	ck_assert_uint_eq(p.entries[0].key_len, strlen("a/b c+d \xc3\xbc"));
	ck_assert_str_eq(p.entries[1].key, "plain");
	ck_assert_uint_eq(p.skipped, 1);
	ck_assert_uint_eq(p.n_prefixes, 1);
	ck_assert_str_eq(p.prefixes[0], "p/q/");
	remote__s3_page_fini(&p);

	/* without EncodingType, nothing is decoded */
	const char *raw = LBR("<Contents><Key>a%2Fb+c</Key><Size>1</Size></Contents>");

	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, raw, strlen(raw), true), 0);
	ck_assert_str_eq(p.entries[0].key, "a%2Fb+c");
	remote__s3_page_fini(&p);

	/* bad escapes */
	ck_assert_int_lt(parse_one(LBR("<EncodingType>url</EncodingType><Contents><Key>a%2</Key>"
				       "<Size>1</Size></Contents>")),
			 0);
	ck_assert_int_lt(parse_one(LBR("<EncodingType>url</EncodingType><Contents><Key>a%zz</Key>"
				       "<Size>1</Size></Contents>")),
			 0);
	/* an encoded key may be 3x longer than S3's limit, its decoded form not */
	struct strbuf sb;

	strbuf_init(&sb);
	strbuf_puts(&sb, "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>");
	for (int i = 0; i < REMOTE_S3_MAX_KEY; i++)
		strbuf_puts(&sb, "%41");
	strbuf_puts(&sb, "</Key><Size>1</Size></Contents></ListBucketResult>");
	ck_assert_int_eq(parse_one(sb.buf), 0);
	strbuf_reset(&sb);
	strbuf_puts(&sb, "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>");
	for (int i = 0; i <= REMOTE_S3_MAX_KEY; i++)
		strbuf_puts(&sb, "%41");
	strbuf_puts(&sb, "</Key><Size>1</Size></Contents></ListBucketResult>");
	struct s3_page pg;
	ck_assert_int_eq(remote__s3_page_init(&pg), 0);
	ck_assert_int_eq(remote__s3_page_feed(&pg, sb.buf, sb.len, true), 0);
	ck_assert_uint_eq(pg.n_entries, 1);
	ck_assert_str_eq(pg.entries[0].unusable, "key over 1024 bytes"); /* decoded */
	remote__s3_page_fini(&pg);
	strbuf_fini(&sb);
}
END_TEST

START_TEST(test_page_error_document)
{
	struct s3_page p;
	const char *xml = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>"
			  "<Message>The request signature we calculated does not match"
			  "</Message><RequestId>x</RequestId></Error>";

	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, xml, strlen(xml), true), 0);
	ck_assert_str_eq(p.error_code, "SignatureDoesNotMatch");
	ck_assert(strstr(p.error_message, "does not match"));
	ck_assert_uint_eq(p.n_entries, 0);
	remote__s3_page_fini(&p);
	/* an over-long code is cut, not overflowed */
	struct strbuf sb;

	strbuf_init(&sb);
	strbuf_puts(&sb, "<Error><Code>");
	for (int i = 0; i < 200; i++)
		strbuf_puts(&sb, "C");
	strbuf_puts(&sb, "</Code></Error>");
	ck_assert_int_eq(remote__s3_page_init(&p), 0);
	ck_assert_int_eq(remote__s3_page_feed(&p, sb.buf, sb.len, true), 0);
	ck_assert_uint_eq(strlen(p.error_code), sizeof(p.error_code) - 1);
	remote__s3_page_fini(&p);
	strbuf_fini(&sb);
}
END_TEST

/* ---- INI -------------------------------------------------------------- */

START_TEST(test_ini_profiles)
{
	const char *text = "# comment\n"
			   "[default]\n"
			   "aws_access_key_id = DEFKEY\n"
			   "aws_secret_access_key=DEFSECRET\r\n"
			   "\n"
			   "[ train ]\n"
			   "  AWS_ACCESS_KEY_ID   =  TRAINKEY  \n"
			   "; another comment\n"
			   "aws_secret_access_key = a=b/c+d\n"
			   "aws_session_token = TOKEN\n"
			   "region = eu-west-3\n"
			   "s3 =\n"
			   "  addressing_style = path\n"
			   "[profile other]\n"
			   "region = ap-south-1\n"
			   "credential_process = /opt/get-creds --role 'a b'\n"
			   "[last]\n"
			   "aws_access_key_id = LAST"; /* no final newline */
	struct s3_profile p;

	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(text, strlen(text), "train", &p), 0);
	ck_assert(p.found);
	ck_assert_str_eq(p.access_key, "TRAINKEY");
	ck_assert_str_eq(p.secret_key, "a=b/c+d");
	ck_assert_str_eq(p.token, "TOKEN");
	ck_assert_str_eq(p.region, "eu-west-3");

	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(text, strlen(text), "default", &p), 0);
	ck_assert_str_eq(p.access_key, "DEFKEY");
	ck_assert_str_eq(p.secret_key, "DEFSECRET");
	ck_assert_str_eq(p.region, "");

	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(text, strlen(text), "profile other", &p), 0);
	ck_assert(p.found);
	ck_assert_str_eq(p.region, "ap-south-1");
	ck_assert_str_eq(p.access_key, "");
	ck_assert_str_eq(p.process, "/opt/get-creds --role 'a b'");

	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(text, strlen(text), "last", &p), 0);
	ck_assert_str_eq(p.access_key, "LAST");

	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(text, strlen(text), "missing", &p), 0);
	ck_assert(!p.found);
	/* "other" is not "profile other" */
	ck_assert_int_eq(remote__s3_ini_parse(text, strlen(text), "other", &p), 0);
	ck_assert(!p.found);
}
END_TEST

START_TEST(test_ini_caps)
{
	struct s3_profile p;
	struct strbuf sb;

	strbuf_init(&sb);
	strbuf_puts(&sb, "[a]\naws_access_key_id = ");
	for (int i = 0; i < S3_MAX_ACCESS_KEY; i++)
		strbuf_puts(&sb, "K");
	strbuf_puts(&sb, "\n");
	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(sb.buf, sb.len, "a", &p), -EINVAL);

	strbuf_reset(&sb);
	strbuf_puts(&sb, "[b]\n# ");
	for (int i = 0; i < S3_MAX_INI_LINE; i++)
		strbuf_puts(&sb, "x");
	strbuf_puts(&sb, "\n");
	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(sb.buf, sb.len, "a", &p), -EINVAL);

	const char nul[] = "[a]\naws_access_key_id = A\0B\n";

	memset(&p, 0, sizeof(p));
	ck_assert_int_eq(remote__s3_ini_parse(nul, sizeof(nul) - 1, "a", &p), -EINVAL);
	ck_assert_int_eq(remote__s3_ini_parse("[unclosed\n", 10, "a", &p), -EINVAL);
	strbuf_fini(&sb);
}
END_TEST

/* ---- credential JSON -------------------------------------------------- */

START_TEST(test_cred_json)
{
	struct s3_creds c;
	const char *imds = "{\"Code\":\"Success\",\"LastUpdated\":\"2026-12-02T14:00:00Z\","
			   "\"Type\":\"AWS-HMAC\",\"AccessKeyId\":\"ASIAX\","
			   "\"SecretAccessKey\":\"sec/ret+\",\"Token\":\"tok==\","
			   "\"Expiration\":\"1970-01-01T01:00:00Z\"}";

	ck_assert_int_eq(remote__s3_cred_json(imds, strlen(imds), &c), 0);
	ck_assert_str_eq(c.access_key, "ASIAX");
	ck_assert_str_eq(c.secret_key, "sec/ret+");
	ck_assert_str_eq(c.token, "tok==");
	ck_assert_int_eq(c.expires_s, 3600);

	const char *container = "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}";

	ck_assert_int_eq(remote__s3_cred_json(container, strlen(container), &c), 0);
	ck_assert_str_eq(c.token, "");
	ck_assert_int_eq(c.expires_s, 0);

	/* credential_process: Version 1, SessionToken */
	const char *process = "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
			      "\"SessionToken\":\"st\",\"Expiration\":\"1970-01-01T00:01:00Z\"}";

	ck_assert_int_eq(remote__s3_cred_json(process, strlen(process), &c), 0);
	ck_assert_str_eq(c.token, "st");
	ck_assert_int_eq(c.expires_s, 60);

	const char *bad[] = {
	    "",
	    "[]",
	    "{\"Code\":\"Failure\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}",
	    "{\"AccessKeyId\":\"A\"}",
	    "{\"AccessKeyId\":\"\",\"SecretAccessKey\":\"S\"}",
	    "{\"AccessKeyId\":1,\"SecretAccessKey\":\"S\"}",
	    "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Expiration\":\"soon\"}",
	    "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"",
	    "{\"AccessKeyId\":\"A\",\"AccessKeyId\":\"B\",\"SecretAccessKey\":\"S\"}",
	    "{\"AccessKeyId\":\"A\\u0000B\",\"SecretAccessKey\":\"S\"}",
	    "{\"Version\":2,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}",
	    "{\"Version\":\"1\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}",
	    "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"SessionToken\":7}",
	    /* control characters: a token or key with CR LF would add headers */
	    "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Token\":\"t\\r\\nX-Evil: 1\"}",
	    "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"SessionToken\":\"t\\n\"}",
	    "{\"AccessKeyId\":\"A\\r\\nX: 1\",\"SecretAccessKey\":\"S\"}",
	    "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\\u0001\"}",
	    "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Token\":\"t\\u007f\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(remote__s3_cred_json(bad[i], strlen(bad[i]), &c) == -EINVAL, "%s",
			      bad[i]);
		ck_assert_str_eq(c.secret_key, ""); /* nothing half-filled */
	}
	/* a token over the cap */
	struct strbuf sb;

	strbuf_init(&sb);
	strbuf_puts(&sb, "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Token\":\"");
	for (int i = 0; i < S3_MAX_TOKEN; i++)
		strbuf_puts(&sb, "t");
	strbuf_puts(&sb, "\"}");
	ck_assert_int_eq(remote__s3_cred_json(sb.buf, sb.len, &c), -EINVAL);
	strbuf_fini(&sb);
}
END_TEST

void s3_parse_tests(TCase *tc)
{
	tcase_add_test(tc, test_query_order_and_encoding);
	tcase_add_test(tc, test_parse_time);
	tcase_add_test(tc, test_content_range);
	tcase_add_test(tc, test_etag_equal);
	tcase_add_test(tc, test_refresh_at);
	tcase_add_test(tc, test_backoff_bounds);
	tcase_add_test(tc, test_page_whole);
	tcase_add_test(tc, test_page_split_everywhere);
	tcase_add_test(tc, test_page_bad_inputs);
	tcase_add_test(tc, test_page_caps);
	tcase_add_test(tc, test_page_url_encoded);
	tcase_add_test(tc, test_page_error_document);
	tcase_add_test(tc, test_ini_profiles);
	tcase_add_test(tc, test_ini_caps);
	tcase_add_test(tc, test_cred_json);
}
