/* SPDX-License-Identifier: MIT */
/*
 * One ListObjectsV2 answer, parsed as it streams in (libexpat): every text
 * and count capped, DOCTYPEs refused, url-encoded keys decoded. Free of
 * I/O: remote/s3/list.c feeds it, the unit test and the fuzzer too.
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
		/* It goes into If-Match headers, to the store and to peers: a
		 * line feed (expat passes one written as is) would add headers. */
		if (remote__s3_has_control(t, p->text_len)) {
			p->cur.etag[0] = '\0';
			p->cur.unusable = "ETag with a control character";
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
