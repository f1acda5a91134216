/* SPDX-License-Identifier: MIT */
/*
 * The S3 protocol's small parts, free of I/O so the unit test drives them
 * with odd inputs: status lines, the ListObjectsV2 query (percent coding
 * from common/text.h), ISO 8601 times, Content-Range, ETag comparison, and
 * when temporary credentials are due for refresh.
 */
#include "remote/s3/s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <expat.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/hex.h"
#include "common/strbuf.h"
#include "common/text.h"

/* ---- query and URL ---------------------------------------------------- */

bool remote__s3_status_line(const char *line, size_t len, long *status)
{
	if (len < 5 || strncmp(line, "HTTP/", 5))
		return false;
	const char *sp = memchr(line, ' ', len);

	*status = sp ? strtol(sp + 1, NULL, 10) : 0;
	return true;
}

void remote__s3_set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

void remote__s3_list_query(struct strbuf *out, const char *token, const char *delimiter,
			   const char *prefix, unsigned max_keys, const char *start_after)
{
	/* Alphabetical: continuation-token, delimiter, encoding-type,
	 * list-type, max-keys, prefix, start-after. */
	if (token) {
		strbuf_puts(out, "continuation-token=");
		text_pct_encode(out, token, strlen(token), false);
		strbuf_puts(out, "&");
	}
	if (delimiter) {
		strbuf_puts(out, "delimiter=");
		text_pct_encode(out, delimiter, strlen(delimiter), false);
		strbuf_puts(out, "&");
	}
	/* keys come back %-encoded: any byte survives XML 1.0 */
	strbuf_puts(out, "encoding-type=url&list-type=2");
	if (max_keys)
		strbuf_printf(out, "&max-keys=%u", max_keys);
	strbuf_puts(out, "&prefix=");
	text_pct_encode(out, prefix ? prefix : "", prefix ? strlen(prefix) : 0, false);
	if (start_after) {
		strbuf_puts(out, "&start-after=");
		text_pct_encode(out, start_after, strlen(start_after), false);
	}
}

/* ---- small parsers ---------------------------------------------------- */

static int parse_digits(const char **p, unsigned n, int *out)
{
	int v = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!isdigit((unsigned char)**p))
			return -EINVAL;
		v = v * 10 + (**p - '0');
		(*p)++;
	}
	*out = v;
	return 0;
}

int remote__s3_parse_time(const char *s, int64_t *ns)
{
	struct tm tm = {0};
	int y, mo, d, h, mi, sec;
	int64_t frac = 0;
	const char *p = s;

	if (!s || parse_digits(&p, 4, &y) || *p++ != '-' || parse_digits(&p, 2, &mo) ||
	    *p++ != '-' || parse_digits(&p, 2, &d) || (*p != 'T' && *p != ' '))
		return -EINVAL;
	p++;
	if (parse_digits(&p, 2, &h) || *p++ != ':' || parse_digits(&p, 2, &mi) || *p++ != ':' ||
	    parse_digits(&p, 2, &sec))
		return -EINVAL;
	if (*p == '.') {
		int64_t scale = 100000000;

		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		for (; isdigit((unsigned char)*p); p++) {
			frac += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (*p == 'Z')
		p++;
	else if (!strcmp(p, "+00:00"))
		p += 6;
	if (*p)
		return -EINVAL;
	if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
		return -EINVAL;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	*ns = (int64_t)timegm(&tm) * 1000000000 + frac;
	return 0;
}

int remote__s3_content_range(const char *value, uint64_t *first, uint64_t *last, uint64_t *total)
{
	const char *p = value;

	if (!p || strncasecmp(p, "bytes", 5))
		return -EINVAL;
	p += 5;
	while (*p == ' ')
		p++;
	if (text_parse_u64(&p, first) || *p++ != '-' || text_parse_u64(&p, last) || *p++ != '/' ||
	    text_parse_u64(&p, total))
		return -EINVAL;
	while (*p == ' ' || *p == '\r' || *p == '\n')
		p++;
	if (*p || *first > *last || *last >= *total)
		return -EINVAL;
	return 0;
}

static void etag_inner(const char *s, const char **b, size_t *n)
{
	size_t len = strlen(s);

	if (len >= 2 && s[0] == '"' && s[len - 1] == '"') {
		s++;
		len -= 2;
	}
	*b = s;
	*n = len;
}

bool remote__s3_has_control(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return true;
	return false;
}

bool remote__s3_etag_equal(const char *a, const char *b)
{
	const char *pa, *pb;
	size_t na, nb;

	if (!a || !b)
		return false;
	/* A weak tag names the version only as the server wrote it: equal
	 * exactly as listed, never to a strong one. */
	if (!strncmp(a, "W/", 2) || !strncmp(b, "W/", 2))
		return a[2] && !strcmp(a, b);
	etag_inner(a, &pa, &na);
	etag_inner(b, &pb, &nb);
	return na > 0 && na == nb && !memcmp(pa, pb, na);
}

int64_t remote__s3_refresh_at(int64_t now_s, int64_t expires_s)
{
	int64_t left = expires_s - now_s;

	if (left <= 0)
		return now_s;
	if (left / 2 < 300)
		return now_s + left / 2;
	return expires_s - 300;
}
