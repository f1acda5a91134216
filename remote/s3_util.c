/* SPDX-License-Identifier: MIT */
/*
 * The S3 client's pure functions, free of I/O so the unit test drives
 * them with odd inputs: percent coding and the ListObjectsV2 query, time
 * and Content-Range parsing, ETag comparison, the credential refresh time,
 * the latency histogram, the streaming ListObjectsV2 page parser (libexpat,
 * every text and count capped, DOCTYPEs refused), the INI reader for the
 * shared credentials/config files and the credential JSON (jansson).
 */
#include "remote/s3_int.h"

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

/* ---- ListObjectsV2 page ----------------------------------------------- */

enum where {
	W_NONE = 0,
	W_KEY,
	W_SIZE,
	W_ETAG,
	W_MTIME,
	W_PREFIX, /* CommonPrefixes/Prefix */
	W_TRUNCATED,
	W_TOKEN,
	W_ENCODING,
	W_ERR_CODE,
	W_ERR_MESSAGE,
};

#define ROOT_LIST 1
#define ROOT_ERROR 2

static void page_fail(struct s3_page *p, int err)
{
	if (!p->failed)
		p->failed = err;
	XML_StopParser((XML_Parser)p->parser, XML_FALSE);
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	struct s3_page *p = ud;

	p->depth++;
	p->text_len = 0;
	p->where = W_NONE;
	if (p->depth > 8) {
		page_fail(p, -EINVAL);
		return;
	}
	if (p->depth == 1) {
		if (!strcmp(name, "ListBucketResult"))
			p->root = ROOT_LIST;
		else if (!strcmp(name, "Error"))
			p->root = ROOT_ERROR;
		else
			page_fail(p, -EINVAL);
		return;
	}
	if (p->root == ROOT_ERROR) {
		if (p->depth == 2 && !strcmp(name, "Code"))
			p->where = W_ERR_CODE;
		else if (p->depth == 2 && !strcmp(name, "Message"))
			p->where = W_ERR_MESSAGE;
		return;
	}
	if (p->depth == 2) {
		if (!strcmp(name, "Contents")) {
			p->in_contents = true;
			p->have_key = p->have_size = p->have_etag = false;
			free(p->cur.key);
			memset(&p->cur, 0, sizeof(p->cur));
		} else if (!strcmp(name, "CommonPrefixes")) {
			p->in_prefixes = true;
		} else if (!strcmp(name, "IsTruncated")) {
			p->where = W_TRUNCATED;
		} else if (!strcmp(name, "NextContinuationToken")) {
			p->where = W_TOKEN;
		} else if (!strcmp(name, "EncodingType")) {
			p->where = W_ENCODING;
		}
		return;
	}
	if (p->depth == 3 && p->in_contents) {
		if (!strcmp(name, "Key"))
			p->where = W_KEY;
		else if (!strcmp(name, "Size"))
			p->where = W_SIZE;
		else if (!strcmp(name, "ETag"))
			p->where = W_ETAG;
		else if (!strcmp(name, "LastModified"))
			p->where = W_MTIME;
	} else if (p->depth == 3 && p->in_prefixes && !strcmp(name, "Prefix")) {
		p->where = W_PREFIX;
	}
}

static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return true;
	size_t ncap = *cap ? *cap * 2 : 64;
	void *na = realloc(*arr, ncap * elem);

	if (!na)
		return false;
	*arr = na;
	*cap = ncap;
	return true;
}

static void copy_text(char *dst, size_t cap, const char *src, size_t len, struct s3_page *p)
{
	if (len >= cap) {
		page_fail(p, -EINVAL);
		return;
	}
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* Text of the element that just ended, NUL-terminated in p->text. */
static void end_text(struct s3_page *p)
{
	char *t = p->text;
	const char *q;
	uint64_t v;

	t[p->text_len] = '\0';
	switch (p->where) {
	case W_KEY:
		/* the length is checked at the end, once a url-encoded key is decoded */
		if (p->text_len == 0 || memchr(t, '\0', p->text_len)) {
			page_fail(p, -EINVAL);
			return;
		}
		free(p->cur.key);
		p->cur.key = strndup(t, p->text_len);
		if (!p->cur.key)
			page_fail(p, -ENOMEM);
		p->cur.key_len = p->text_len;
		p->have_key = true;
		break;
	case W_SIZE:
		q = t;
		if (text_parse_u64(&q, &v) || *q) {
			page_fail(p, -EINVAL);
			return;
		}
		p->cur.size = v;
		p->have_size = true;
		break;
	case W_ETAG:
		/* One odd ETag makes its object unreadable, not the page. */
		if (p->text_len > REMOTE_S3_MAX_ETAG) {
			p->cur.etag[0] = '\0';
			p->cur.unusable = "ETag over 128 bytes";
			break;
		}
		copy_text(p->cur.etag, sizeof(p->cur.etag), t, p->text_len, p);
		p->have_etag = p->text_len > 0;
		break;
	case W_MTIME:
		if (remote__s3_parse_time(t, &p->cur.mtime_ns))
			page_fail(p, -EINVAL);
		break;
	case W_PREFIX:
		if (p->text_len == 0 || memchr(t, '\0', p->text_len) ||
		    p->n_prefixes >= S3_MAX_PAGE_ENTRIES ||
		    !grow((void **)&p->prefixes, &p->cap_prefixes, p->n_prefixes, sizeof(char *))) {
			page_fail(p, -EINVAL);
			return;
		}
		p->prefixes[p->n_prefixes] = strndup(t, p->text_len);
		if (!p->prefixes[p->n_prefixes])
			page_fail(p, -ENOMEM);
		else
			p->n_prefixes++;
		break;
	case W_TRUNCATED:
		if (!strcmp(t, "true"))
			p->truncated = true;
		else if (!strcmp(t, "false"))
			p->truncated = false;
		else
			page_fail(p, -EINVAL);
		break;
	case W_ENCODING:
		p->url_encoded = !strcmp(t, "url");
		break;
	case W_TOKEN:
		free(p->next_token);
		p->next_token = p->text_len ? strndup(t, p->text_len) : NULL;
		if (p->text_len && !p->next_token)
			page_fail(p, -ENOMEM);
		break;
	case W_ERR_CODE:
		copy_text(p->error_code, sizeof(p->error_code), t,
			  p->text_len < sizeof(p->error_code) ? p->text_len
							      : sizeof(p->error_code) - 1,
			  p);
		break;
	case W_ERR_MESSAGE:
		copy_text(p->error_message, sizeof(p->error_message), t,
			  p->text_len < sizeof(p->error_message) ? p->text_len
								 : sizeof(p->error_message) - 1,
			  p);
		break;
	default:
		break;
	}
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
	struct s3_page *p = ud;

	if (p->where != W_NONE)
		end_text(p);
	p->where = W_NONE;
	if (p->failed)
		return;
	if (p->depth == 2 && p->in_contents) {
		p->in_contents = false;
		if (!p->have_key || !p->have_size || p->n_entries >= S3_MAX_PAGE_ENTRIES) {
			page_fail(p, -EINVAL);
			return;
		}
		if (!grow((void **)&p->entries, &p->cap_entries, p->n_entries,
			  sizeof(*p->entries))) {
			page_fail(p, -ENOMEM);
			return;
		}
		p->entries[p->n_entries++] = p->cur;
		memset(&p->cur, 0, sizeof(p->cur));
	} else if (p->depth == 2 && p->in_prefixes) {
		p->in_prefixes = false;
	}
	p->depth--;
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
	struct s3_page *p = ud;

	if (p->where == W_NONE || p->failed)
		return;
	if (p->text_len + (size_t)len > S3_MAX_XML_TEXT) {
		page_fail(p, -EINVAL);
		return;
	}
	memcpy(p->text + p->text_len, s, (size_t)len);
	p->text_len += (size_t)len;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
			       const XML_Char *pubid, int has_internal)
{
	page_fail(ud, -EINVAL); /* no DTD: no entities to expand, nothing external */
}

int remote__s3_page_init(struct s3_page *p)
{
	memset(p, 0, sizeof(*p));
	p->text = malloc(S3_MAX_XML_TEXT + 1);
	XML_Parser xp = XML_ParserCreate("UTF-8");

	if (!p->text || !xp) {
		free(p->text);
		if (xp)
			XML_ParserFree(xp);
		p->text = NULL;
		return -ENOMEM;
	}
	p->parser = xp;
	XML_SetUserData(xp, p);
	XML_SetElementHandler(xp, on_start, on_end);
	XML_SetCharacterDataHandler(xp, on_text);
	XML_SetStartDoctypeDeclHandler(xp, on_doctype);
	return 0;
}

void remote__s3_page_fini(struct s3_page *p)
{
	for (size_t i = 0; i < p->n_entries; i++)
		free(p->entries[i].key);
	free(p->entries);
	for (size_t i = 0; i < p->n_prefixes; i++)
		free(p->prefixes[i]);
	free(p->prefixes);
	free(p->next_token);
	free(p->text);
	free(p->cur.key);
	if (p->parser)
		XML_ParserFree((XML_Parser)p->parser);
	memset(p, 0, sizeof(*p));
}

/* Decode in place ('+' is a space, %XX a byte); the length through *len.
 * -EINVAL on a bad escape. */
static int url_decode(char *s, size_t *len)
{
	size_t o = 0;

	for (size_t i = 0; s[i]; i++) {
		if (s[i] == '%') {
			int hi = hex_value(s[i + 1]), lo = hi < 0 ? -1 : hex_value(s[i + 2]);

			if (hi < 0 || lo < 0)
				return -EINVAL;
			s[o++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			s[o++] = s[i] == '+' ? ' ' : s[i];
		}
	}
	s[o] = '\0';
	*len = o;
	return 0;
}

/* Decode every key and prefix in place; the ones holding a NUL byte are
 * freed (NULL in their slot) and, once all decoded, squeezed out. Every
 * slot stays owned by the page until then, so an error half-way leaves
 * nothing freed twice. */
static int page_url_decode(struct s3_page *p)
{
	size_t kept, n;

	for (size_t i = 0; i < p->n_entries; i++) {
		struct s3_page_entry *e = &p->entries[i];

		if (url_decode(e->key, &n))
			return -EINVAL;
		e->key_len = n;
		if (n == 0 || memchr(e->key, '\0', n)) {
			free(e->key);
			e->key = NULL;
			p->skipped++;
		}
	}
	for (size_t i = 0; i < p->n_prefixes; i++) {
		if (url_decode(p->prefixes[i], &n))
			return -EINVAL;
		if (n == 0 || memchr(p->prefixes[i], '\0', n)) {
			free(p->prefixes[i]);
			p->prefixes[i] = NULL;
			p->skipped++;
		}
	}
	kept = 0;
	for (size_t i = 0; i < p->n_entries; i++)
		if (p->entries[i].key)
			p->entries[kept++] = p->entries[i];
	p->n_entries = kept;
	kept = 0;
	for (size_t i = 0; i < p->n_prefixes; i++)
		if (p->prefixes[i])
			p->prefixes[kept++] = p->prefixes[i];
	p->n_prefixes = kept;
	return 0;
}

int remote__s3_page_feed(struct s3_page *p, const char *data, size_t len, bool final)
{
	if (p->failed)
		return p->failed;
	if (len > INT32_MAX)
		return -EINVAL;
	if (XML_Parse((XML_Parser)p->parser, data, (int)len, final) != XML_STATUS_OK) {
		if (!p->failed)
			p->failed = -EINVAL;
		return p->failed;
	}
	if (final && (p->depth != 0 || p->root == 0))
		p->failed = -EINVAL;
	if (final && !p->failed && p->root == ROOT_LIST && p->truncated && !p->next_token)
		p->failed = -EINVAL; /* we could never ask for the next page */
	if (final && !p->failed && p->url_encoded)
		p->failed = page_url_decode(p);
	/* A key over S3's own limit cannot be read back (remote_s3_get refuses
	 * it): that object is skipped, not the page. A prefix over it holds
	 * only such keys: not walked into. */
	for (size_t i = 0; final && !p->failed && i < p->n_entries; i++)
		if (p->entries[i].key_len > REMOTE_S3_MAX_KEY)
			p->entries[i].unusable = "key over 1024 bytes";
	size_t kept = 0;
	for (size_t i = 0; final && !p->failed && i < p->n_prefixes; i++) {
		if (strlen(p->prefixes[i]) > REMOTE_S3_MAX_KEY) {
			free(p->prefixes[i]);
			p->skipped++;
		} else {
			p->prefixes[kept++] = p->prefixes[i];
		}
	}
	if (final && !p->failed)
		p->n_prefixes = kept;
	return p->failed;
}

/* ---- credential_process command line ------------------------------------ */

void remote__s3_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **a = argv; *a; a++)
		free(*a);
	free(argv);
}

int remote__s3_split_command(const char *line, char ***argv, size_t *argc, const char **why)
{
	size_t len = strlen(line), n = 0;
	/* at most len/2 + 1 words, each at most len bytes */
	char **v = calloc(len / 2 + 2, sizeof(*v));
	char *word = malloc(len + 1);
	const char *p = line;
	int r = 0;

	*why = NULL;
	if (!v || !word) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		size_t w = 0;
		while (*p && *p != ' ' && *p != '\t') {
			char ch = *p++;
			if (ch == '\'') {
				const char *end = strchr(p, '\'');
				if (!end) {
					*why = "unbalanced quotes";
					r = -EINVAL;
					goto out;
				}
				memcpy(word + w, p, (size_t)(end - p));
				w += (size_t)(end - p);
				p = end + 1;
			} else if (ch == '"') {
				while (*p && *p != '"') {
					if (*p == '\\' && p[1] && strchr("\"\\$`", p[1]))
						p++;
					word[w++] = *p++;
				}
				if (*p != '"') {
					*why = "unbalanced quotes";
					r = -EINVAL;
					goto out;
				}
				p++;
			} else if (ch == '\\') {
				if (*p)
					word[w++] = *p++;
			} else if (ch == '`' || (ch == '$' && *p == '(')) {
				*why = "command substitution is not allowed";
				r = -EINVAL;
				goto out;
			} else if (strchr("|&;<>(){}\n", ch)) {
				*why = "unquoted | & ; < > ( ) { } or newline";
				r = -EINVAL;
				goto out;
			} else {
				word[w++] = ch;
			}
		}
		v[n] = strndup(word, w);
		if (!v[n]) {
			r = -ENOMEM;
			goto out;
		}
		n++;
	}
	if (n == 0) {
		*why = "empty command";
		r = -EINVAL;
	}
out:
	free(word);
	if (r) {
		remote__s3_argv_free(v);
		return r;
	}
	*argv = v;
	*argc = n;
	return 0;
}

/* ---- container credentials endpoint ------------------------------------ */

bool remote__s3_container_uri_ok(const char *url)
{
	static const char *const allowed[] = {"169.254.170.2", "169.254.170.23", "[fd00:ec2::23]",
					      "[::1]", "localhost"};
	const char *h;
	char host[64];

	if (!strncasecmp(url, "https://", 8))
		h = url + 8;
	else if (!strncasecmp(url, "http://", 7))
		h = url + 7;
	else
		return false;
	size_t n = strcspn(h, "/?#");
	if (memchr(h, '@', n))
		return false; /* user info: not a host we can vouch for */
	if (h == url + 8)
		return n > 0;
	/* the host without its port ([v6]:port, v4:port, name:port) */
	size_t hn;
	if (h[0] == '[') {
		const char *close = memchr(h, ']', n);
		hn = close ? (size_t)(close - h) + 1 : 0;
	} else {
		hn = strcspn(h, ":/?#");
	}
	if (hn == 0 || hn >= sizeof(host) || (hn < n && h[hn] != ':'))
		return false;
	memcpy(host, h, hn);
	host[hn] = '\0';
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		if (!strcasecmp(host, allowed[i]))
			return true;
	/* 127.0.0.0/8, as a dotted quad and nothing else */
	unsigned a, b, c, d;
	char tail;
	return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
	       c < 256 && d < 256;
}

/* ---- INI -------------------------------------------------------------- */

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	char *e = s + strlen(s);

	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

int remote__s3_copy_str(char *dst, size_t cap, const char *v)
{
	size_t n = strlen(v);

	if (n >= cap)
		return -EINVAL;
	memcpy(dst, v, n + 1);
	return 0;
}

int remote__s3_ini_parse(const char *text, size_t len, const char *section, struct s3_profile *p)
{
	char line[S3_MAX_INI_LINE + 1];
	bool in_section = false;
	size_t pos = 0;

	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;

		if (n > S3_MAX_INI_LINE)
			return -EINVAL;
		memcpy(line, text + pos, n);
		line[n] = '\0';
		pos += n + (nl ? 1 : 0);
		if (memchr(line, '\0', n))
			return -EINVAL;

		char *l = trim(line);

		if (*l == '\0' || *l == '#' || *l == ';')
			continue;
		if (*l == '[') {
			char *e = strchr(l, ']');

			if (!e)
				return -EINVAL;
			*e = '\0';
			in_section = !strcmp(trim(l + 1), section);
			if (in_section)
				p->found = true;
			continue;
		}
		if (!in_section)
			continue;
		char *eq = strchr(l, '=');

		if (!eq)
			continue; /* a nested-value line or junk: not ours */
		*eq = '\0';
		char *k = trim(l), *v = trim(eq + 1);
		int r = 0;

		if (!strcasecmp(k, "aws_access_key_id"))
			r = remote__s3_copy_str(p->access_key, sizeof(p->access_key), v);
		else if (!strcasecmp(k, "aws_secret_access_key"))
			r = remote__s3_copy_str(p->secret_key, sizeof(p->secret_key), v);
		else if (!strcasecmp(k, "aws_session_token"))
			r = remote__s3_copy_str(p->token, sizeof(p->token), v);
		else if (!strcasecmp(k, "region"))
			r = remote__s3_copy_str(p->region, sizeof(p->region), v);
		else if (!strcasecmp(k, "credential_process"))
			r = remote__s3_copy_str(p->process, sizeof(p->process), v);
		if (r)
			return r;
	}
	return 0;
}

/* ---- credential JSON -------------------------------------------------- */

static int json_field(json_t *root, const char *name, char *dst, size_t cap, bool required)
{
	json_t *v = json_object_get(root, name);

	if (!v || json_is_null(v)) {
		if (required)
			return -EINVAL;
		dst[0] = '\0';
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return -EINVAL;
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

int remote__s3_cred_json(const char *json, size_t len, struct s3_creds *out)
{
	json_error_t jerr;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	char expiration[64], code[64];
	json_t *version;
	int r = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (!root || !json_is_object(root))
		goto out;
	if (json_field(root, "Code", code, sizeof(code), false) ||
	    (code[0] && strcmp(code, "Success")))
		goto out;
	version = json_object_get(root, "Version");
	if (version && !(json_is_integer(version) && json_integer_value(version) == 1))
		goto out;
	if (json_field(root, "AccessKeyId", out->access_key, sizeof(out->access_key), true) ||
	    json_field(root, "SecretAccessKey", out->secret_key, sizeof(out->secret_key), true) ||
	    json_field(root, "Token", out->token, sizeof(out->token), false) ||
	    (!out->token[0] &&
	     json_field(root, "SessionToken", out->token, sizeof(out->token), false)) ||
	    json_field(root, "Expiration", expiration, sizeof(expiration), false))
		goto out;
	if (!out->access_key[0] || !out->secret_key[0])
		goto out;
	if (expiration[0]) {
		int64_t ns;

		if (remote__s3_parse_time(expiration, &ns))
			goto out;
		out->expires_s = ns / 1000000000;
	}
	r = 0;
out:
	if (root)
		json_decref(root);
	if (r)
		memset(out, 0, sizeof(*out));
	return r;
}
