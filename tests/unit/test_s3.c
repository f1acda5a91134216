/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the S3 client's parts that need no server (remote/s3_int.h):
 * the ListObjectsV2 query and percent coding, the streaming page parser
 * fed odd, split, hostile and truncated XML, the INI reader of the shared
 * files, credential JSON, Content-Range and ETag checks, the refresh time,
 * the full-jitter backoff bounds, the connection
 * pool's per-thread handles, and remote_s3_create's configuration checks
 * and URL building (no request is made); and against a scripted server of
 * its own on loopback, the checks of a ranged GET that keep the wrong
 * bytes out: If-Match sent, the answer's ETag and total size checked, a
 * 503 retried. The real-server behaviour is
 * tests/integration/test_s3_client.py's.
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
#include "tests/unit/check_run.h"

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

/* ---- pool ------------------------------------------------------------- */

struct thread_arg {
	struct remote_http *pool;
	CURL *got;
	_Atomic int done;
};

static void *thread_get(void *arg)
{
	struct thread_arg *t = arg;

	t->got = remote_http_get(t->pool);
	atomic_store(&t->done, 1);
	return NULL;
}

START_TEST(test_pool_handles)
{
	struct remote_http *pool;
	struct thread_arg a = {0};
	pthread_t ta;

	ck_assert_int_eq(remote_http_create(2, &pool), 0);
	CURL *one = remote_http_get(pool), *two = remote_http_get(pool);

	ck_assert_ptr_nonnull(one);
	ck_assert_ptr_nonnull(two);
	ck_assert_ptr_ne(one, two);
	/* The pool is exhausted: a third checkout waits for a handle back. */
	a.pool = pool;
	ck_assert_int_eq(pthread_create(&ta, NULL, thread_get, &a), 0);
	usleep(200 * 1000);
	ck_assert_int_eq(atomic_load(&a.done), 0);
	remote_http_put(pool, two);
	ck_assert_int_eq(pthread_join(ta, NULL), 0);
	ck_assert_ptr_eq(a.got, two); /* the same handle, connections and all */
	/* Last in, first out: the warmest handle goes out again. */
	remote_http_put(pool, one);
	remote_http_put(pool, a.got);
	ck_assert_ptr_eq(remote_http_get(pool), two);
	remote_http_put(pool, two);
	remote_http_put(pool, NULL);
	/* A handle outside the pool never counts against it. */
	CURL *extra = remote_http_new(pool);
	ck_assert_ptr_nonnull(extra);
	curl_easy_cleanup(extra);
	remote_http_destroy(pool);
	remote_http_destroy(NULL);
}
END_TEST

/* ---- create: configuration and URLs ----------------------------------- */

static void clear_aws_env(void)
{
	const char *vars[] = {"AWS_ACCESS_KEY_ID",
			      "AWS_SECRET_ACCESS_KEY",
			      "AWS_SESSION_TOKEN",
			      "AWS_PROFILE",
			      "AWS_REGION",
			      "AWS_DEFAULT_REGION",
			      "AWS_CONTAINER_CREDENTIALS_FULL_URI",
			      "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
			      "AWS_EC2_METADATA_SERVICE_ENDPOINT"};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/coordfs-test/credentials", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/coordfs-test/config", 1);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

static int create(const struct remote_s3_config *cfg, struct remote_s3 **s, char *err)
{
	struct remote_http *pool;

	ck_assert_int_eq(remote_http_create(4, &pool), 0);
	int r = remote_s3_create(cfg, pool, s, err, 256);

	if (r)
		remote_http_destroy(pool);
	return r;
}

static void destroy(struct remote_s3 *s)
{
	struct remote_http *pool = s->http;

	remote_s3_destroy(s);
	remote_http_destroy(pool);
}

/* ---- a scripted server: the checks of a GET ---------------------------- */

/* Answers requests on loopback with the scripted responses, in order (the
 * last one repeats), keeping each request's head for the test to read. */
struct script {
	int fd;
	unsigned port;
	const char *const *answers;
	unsigned nanswers;
	_Atomic unsigned served;
	char heads[8][2048];
	pthread_t thread;
};

static void *script_run(void *arg)
{
	struct script *sc = arg;
	int c;

	while ((c = accept(sc->fd, NULL, NULL)) >= 0) {
		char buf[4096];
		size_t got = 0;

		for (;;) {
			ssize_t n = recv(c, buf + got, sizeof(buf) - 1 - got, 0);
			if (n <= 0)
				break;
			got += (size_t)n;
			buf[got] = '\0';
			char *end = strstr(buf, "\r\n\r\n");
			if (!end)
				continue;
			unsigned i = atomic_fetch_add(&sc->served, 1);
			if (i < 8)
				snprintf(sc->heads[i], sizeof(sc->heads[i]), "%.*s", (int)(end - buf), buf);
			const char *a = sc->answers[i < sc->nanswers ? i : sc->nanswers - 1];
			(void)send(c, a, strlen(a), MSG_NOSIGNAL);
			got -= (size_t)(end + 4 - buf);
			memmove(buf, end + 4, got);
		}
		close(c);
	}
	return NULL;
}

static void script_start(struct script *sc, const char *const *answers, unsigned n)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);

	memset(sc, 0, sizeof(*sc));
	sc->answers = answers;
	sc->nanswers = n;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sc->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(sc->fd, 0);
	ck_assert_int_eq(bind(sc->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(sc->fd, 8), 0);
	ck_assert_int_eq(getsockname(sc->fd, (struct sockaddr *)&sa, &sl), 0);
	sc->port = ntohs(sa.sin_port);
	ck_assert_int_eq(pthread_create(&sc->thread, NULL, script_run, sc), 0);
}

static void script_stop(struct script *sc)
{
	shutdown(sc->fd, SHUT_RDWR);
	close(sc->fd);
	pthread_join(sc->thread, NULL);
}

/* One GET of bytes 2-5 of "obj" (listed with ETag "e1", 10 bytes) against
 * the script: what remote_s3_get returned, the body in out. */
static ssize_t scripted_get(struct script *sc, char out[4])
{
	char err[256], endpoint[64];
	struct remote_s3 *s;

	clear_aws_env();
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%u", sc->port);
	struct remote_s3_config cfg = {.bucket = "bkt", .endpoint = endpoint, .no_sign = true,
				       .max_retries = 2, .backoff_base_ms = 1,
				       .backoff_cap_ms = 5, .timeout_ms = 5000};
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ssize_t n = remote_s3_get(s, "obj", "\"e1\"", 10, 2, 4, out);
	destroy(s);
	return n;
}

#define ANSWER(status, etag, range, body)                                                       \
	"HTTP/1.1 " status "\r\nETag: " etag "\r\nContent-Range: bytes " range                 \
	"\r\nContent-Length: 4\r\n\r\n" body

START_TEST(test_get_checks)
{
	static const char *const good[] = {ANSWER("206 Partial Content", "\"e1\"", "2-5/10", "cdef")};
	static const char *const other_etag[] = {
	    ANSWER("206 Partial Content", "\"e2\"", "2-5/10", "XXXX")};
	static const char *const other_size[] = {
	    ANSWER("206 Partial Content", "\"e1\"", "2-5/11", "XXXX")};
	static const char *const busy_then_good[] = {
	    "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n",
	    ANSWER("206 Partial Content", "\"e1\"", "2-5/10", "cdef")};
	struct script sc;
	char out[4];

	/* The listed ETag goes out as If-Match; a right answer is taken. */
	script_start(&sc, good, 1);
	ck_assert_int_eq(scripted_get(&sc, out), 4);
	ck_assert_int_eq(memcmp(out, "cdef", 4), 0);
	ck_assert_msg(strcasestr(sc.heads[0], "\nIf-Match: \"e1\"") != NULL, "request: %s",
		      sc.heads[0]);
	ck_assert_msg(strcasestr(sc.heads[0], "\nRange: bytes=2-5") != NULL, "request: %s",
		      sc.heads[0]);
	script_stop(&sc);
	/* An answer about another version (ETag, or total size): -ESTALE,
	 * whatever the server says of If-Match, and not retried. */
	script_start(&sc, other_etag, 1);
	ck_assert_int_eq(scripted_get(&sc, out), -ESTALE);
	ck_assert_uint_eq(atomic_load(&sc.served), 1);
	script_stop(&sc);
	script_start(&sc, other_size, 1);
	ck_assert_int_eq(scripted_get(&sc, out), -ESTALE);
	script_stop(&sc);
	/* 503 (throttling) is retried, and the retry's answer taken. */
	script_start(&sc, busy_then_good, 2);
	ck_assert_int_eq(scripted_get(&sc, out), 4);
	ck_assert_int_eq(memcmp(out, "cdef", 4), 0);
	ck_assert_uint_eq(atomic_load(&sc.served), 2);
	script_stop(&sc);
}
END_TEST

START_TEST(test_create_urls)
{
	struct remote_s3 *s;
	char err[256];

	clear_aws_env();
	setenv("AWS_ACCESS_KEY_ID", "AK", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);

	struct remote_s3_config cfg = {.bucket = "bkt", .prefix = "a/b", .region = "eu-west-3"};

	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "https://bkt.s3.eu-west-3.amazonaws.com/");
	ck_assert_str_eq(s->prefix, "a/b/");
	ck_assert_str_eq(s->sigv4, "aws:amz:eu-west-3:s3");
	destroy(s);

	cfg = (struct remote_s3_config){.bucket = "my.bucket"};
	setenv("AWS_REGION", "us-west-2", 1);
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "https://s3.us-west-2.amazonaws.com/my.bucket/");
	ck_assert_str_eq(s->prefix, "");
	destroy(s);
	unsetenv("AWS_REGION");

	cfg = (struct remote_s3_config){
	    .bucket = "bkt", .endpoint = "http://127.0.0.1:9000/", .prefix = "x/"};
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "http://127.0.0.1:9000/bkt/");
	ck_assert_str_eq(s->prefix, "x/");
	ck_assert_str_eq(s->region, "us-east-1");
	destroy(s);

	cfg.addressing = REMOTE_S3_ADDR_VIRTUAL;
	cfg.endpoint = "https://minio.example:443";
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "https://bkt.minio.example:443/");
	destroy(s);
}
END_TEST

START_TEST(test_create_errors)
{
	struct remote_s3 *s = NULL;
	char err[256];

	clear_aws_env();
	setenv("AWS_ACCESS_KEY_ID", "AK", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SUPERSECRET", 1);
	struct remote_s3_config cfg = {.bucket = "a/b"};

	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	ck_assert(strstr(err, "bucket"));
	cfg.bucket = "ab";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	cfg.bucket = "bkt";
	const char *eps[] = {"ftp://x",	     "http://", "http://h/path",
			     "http://u:p@h", "h:80",	"http://h?x"};
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
		cfg.endpoint = eps[i];
		ck_assert_msg(create(&cfg, &s, err) == -EINVAL, "%s", eps[i]);
		ck_assert(strstr(err, "--endpoint"));
	}
	cfg.endpoint = NULL;
	cfg.region = "eu west";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	cfg.region = NULL;
	cfg.prefix = "/abs";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	cfg.prefix = NULL;

	/* half the key pair */
	unsetenv("AWS_SECRET_ACCESS_KEY");
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	ck_assert(strstr(err, "AWS_SECRET_ACCESS_KEY"));
	/* nothing at all, instance role disabled */
	unsetenv("AWS_ACCESS_KEY_ID");
	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert(strstr(err, "--no-sign-request"));
	/* a named profile that exists nowhere */
	cfg.profile = "ghost";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	ck_assert(strstr(err, "ghost"));
	/* anonymous needs nothing */
	cfg.profile = NULL;
	cfg.no_sign = true;
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	/* argument checks of get, no request made */
	char buf[4];

	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"", 10, 0, 0, buf), 0);
	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"", 10, 8, 4, buf), -EINVAL);
	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"", 10, 11, 0, buf), -EINVAL);
	ck_assert_int_eq(remote_s3_get(s, "", "\"e\"", 10, 0, 1, buf), -EINVAL);
	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"\r\nX: y", 10, 0, 1, buf), -EINVAL);
	destroy(s);
}
END_TEST

/* A credential_process that prints more than 64 KiB (here forever) is
 * killed and its pipe closed before the wait: create fails at once. It
 * used to wait for a child blocked on its full pipe, for ever. */
START_TEST(test_credential_process_flood)
{
	struct remote_s3 *s = NULL;
	char err[256], path[] = "/tmp/coordfs-cred-XXXXXX";
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	const char *ini = "[default]\ncredential_process = yes AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n";
	ck_assert_int_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
	close(fd);
	clear_aws_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
	struct remote_s3_config cfg = {.bucket = "bkt"};
	int64_t t0 = deadline_now_ms();

	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert_int_lt(deadline_now_ms() - t0, 10000);
	ck_assert_msg(strstr(err, "more than 64 KiB"), "%s", err);
	/* the child is gone: no zombie, no running process left */
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	unlink(path);
}
END_TEST

/* credential_process is split without a shell and without expanding
 * anything (wordexp expanded $VARS, ~ and globs); container credentials
 * go only where the AWS SDKs send them, and a token cannot add headers. */
START_TEST(test_split_command)
{
	char **v;
	size_t n;
	const char *why;

	ck_assert_int_eq(remote__s3_split_command("  a 'b c' \"d \\\" e\" f\\ g $HOME ~ *  ",
						  &v, &n, &why), 0);
	ck_assert_uint_eq(n, 7);
	ck_assert_str_eq(v[0], "a");
	ck_assert_str_eq(v[1], "b c");
	ck_assert_str_eq(v[2], "d \" e");
	ck_assert_str_eq(v[3], "f g");
	ck_assert_str_eq(v[4], "$HOME");
	ck_assert_str_eq(v[5], "~");
	ck_assert_str_eq(v[6], "*");
	ck_assert_ptr_null(v[7]);
	remote__s3_argv_free(v);
	ck_assert_int_eq(remote__s3_split_command("x'y'\"z\"", &v, &n, &why), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(v[0], "xyz");
	remote__s3_argv_free(v);
	static const char *const bad[] = {"a | b", "a; b", "a > f", "$(x)", "`x`", "a 'b",
					  "a \"b", "", "   ", "a & b", "a\nb"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(remote__s3_split_command(bad[i], &v, &n, &why) == -EINVAL && why,
			      "accepted: %s", bad[i]);
	/* quoted, they are just bytes */
	ck_assert_int_eq(remote__s3_split_command("a '|;&' \"$(x)\"", &v, &n, &why), 0);
	ck_assert_str_eq(v[1], "|;&");
	ck_assert_str_eq(v[2], "$(x)");
	remote__s3_argv_free(v);
}
END_TEST

START_TEST(test_container_uri)
{
	static const char *const ok[] = {
	    "http://127.0.0.1:8080/creds", "http://127.1.2.3/x", "http://localhost:9/c",
	    "http://[::1]:80/c", "http://169.254.170.2/v2/creds", "http://169.254.170.23/v1",
	    "http://[fd00:ec2::23]/v1", "https://creds.example.com/x", "HTTP://127.0.0.1/"};
	static const char *const bad[] = {
	    "http://10.0.0.1/creds", "http://169.254.169.254/latest", "http://example.com/c",
	    "http://127.0.0.1.evil.com/c", "http://user@127.0.0.1/c", "http://[::2]/c",
	    "ftp://127.0.0.1/c", "http://128.0.0.1/", "http://127.0.0.256/", "file:///etc/x",
	    "http://localhost.evil/", "https://u@h/x"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		ck_assert_msg(remote__s3_container_uri_ok(ok[i]), "refused %s", ok[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!remote__s3_container_uri_ok(bad[i]), "accepted %s", bad[i]);
}
END_TEST

/* Through remote_s3_create: the rules hold before any request is made. */
START_TEST(test_container_and_process_rules)
{
	struct remote_s3 *s = NULL;
	char err[256];
	struct remote_s3_config cfg = {.bucket = "bkt"};

	clear_aws_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.1.2.3:9/creds", 1);
	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert_msg(strstr(err, "loopback"), "%s", err);
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds", 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok\r\nX-Injected: 1", 1);
	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert_msg(strstr(err, "line break"), "%s", err);
	ck_assert_msg(!strstr(err, "Injected"), "%s", err);
	unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");

	/* $HOME reaches the command as written */
	char path[] = "/tmp/coordfs-cred-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	const char *ini = "[default]\ncredential_process = printf "
			  "'{\"Version\":1,\"AccessKeyId\":\"%s\",\"SecretAccessKey\":\"s\"}' $HOME\n";
	ck_assert_int_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
	close(fd);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("HOME", "/expanded", 1);
	ck_assert_msg(create(&cfg, &s, err) == 0, "%s", err);
	struct s3_creds cr;
	ck_assert_int_eq(remote__s3_cred_get(s->cred, &cr), 0);
	ck_assert_str_eq(cr.access_key, "$HOME");
	destroy(s);
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	unlink(path);
}
END_TEST

/* What libcurl and jansson free is wiped first: their copies of the
 * session token header, of the key and secret, and the parse tree of a
 * credential document all go through the wiping free. */
START_TEST(test_frees_are_wiped)
{
	uint64_t n0 = remote__wiped_frees();
	struct curl_slist *h = curl_slist_append(NULL, "x-amz-security-token: SECRET-TOKEN");

	ck_assert_ptr_nonnull(h);
	curl_slist_free_all(h);
	uint64_t n1 = remote__wiped_frees();
	ck_assert_uint_ge(n1, n0 + 2); /* the node and its string */

	CURL *e = curl_easy_init();
	ck_assert_ptr_nonnull(e);
	curl_easy_setopt(e, CURLOPT_USERNAME, "AKIDEXAMPLE");
	curl_easy_setopt(e, CURLOPT_PASSWORD, "wJalrXUtnFEMI");
	curl_easy_cleanup(e);
	uint64_t n2 = remote__wiped_frees();
	ck_assert_uint_ge(n2, n1 + 2);

	struct s3_creds cr;
	const char *doc = "{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"}";
	ck_assert_int_eq(remote__s3_cred_json(doc, strlen(doc), &cr), 0);
	ck_assert_uint_gt(remote__wiped_frees(), n2); /* the parse tree */
	explicit_bzero(&cr, sizeof(cr));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("s3");
	TCase *tc = tcase_create("s3");

	log_set_level(LOG_CRIT);
	remote_global_init();
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
	tcase_add_test(tc, test_pool_handles);
	tcase_add_test(tc, test_create_urls);
	tcase_add_test(tc, test_get_checks);
	tcase_add_test(tc, test_create_errors);
	tcase_add_test(tc, test_credential_process_flood);
	tcase_add_test(tc, test_split_command);
	tcase_add_test(tc, test_container_uri);
	tcase_add_test(tc, test_container_and_process_rules);
	tcase_add_test(tc, test_frees_are_wiped);
	suite_add_tcase(s, tc);
	return check_run(s);
}
