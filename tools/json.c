/* SPDX-License-Identifier: MIT */
/*
 * Strict recursive-descent JSON reader (see json.h). The recursion depth is
 * capped by JSON_MAX_DEPTH, so the C stack use is bounded; the value count
 * and input length caps bound the memory a hostile document can claim.
 */
#include "tools/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_NUMBER_LEN 128 /* characters of one number literal */

struct parser {
	const char *text;
	size_t len;
	size_t pos;
	size_t values;
	struct json_error *err;
};

static int fail(struct parser *p, int rc, const char *msg)
{
	if (p->err) {
		p->err->offset = p->pos;
		p->err->msg = msg;
	}
	return rc;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len) {
		char c = p->text[p->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static void value_fini(struct json_value *v)
{
	switch (v->type) {
	case JSON_STRING:
		free(v->u.string.chars);
		break;
	case JSON_ARRAY:
		for (size_t i = 0; i < v->u.array.count; i++)
			value_fini(&v->u.array.items[i]);
		free(v->u.array.items);
		break;
	case JSON_OBJECT:
		for (size_t i = 0; i < v->u.object.count; i++) {
			free(v->u.object.members[i].key);
			value_fini(&v->u.object.members[i].value);
		}
		free(v->u.object.members);
		break;
	default:
		break;
	}
	v->type = JSON_NULL;
}

void json_free(struct json_value *v)
{
	if (!v)
		return;
	value_fini(v);
	free(v);
}

static int hex4(struct parser *p, unsigned *out)
{
	unsigned v = 0;

	if (p->len - p->pos < 4)
		return fail(p, -EINVAL, "truncated \\u escape");
	for (int i = 0; i < 4; i++) {
		char c = p->text[p->pos + i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return fail(p, -EINVAL, "bad hex digit in \\u escape");
	}
	p->pos += 4;
	*out = v;
	return 0;
}

static size_t put_utf8(char *dst, unsigned cp)
{
	if (cp < 0x80) {
		dst[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		dst[0] = (char)(0xC0 | (cp >> 6));
		dst[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		dst[0] = (char)(0xE0 | (cp >> 12));
		dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		dst[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	dst[0] = (char)(0xF0 | (cp >> 18));
	dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	dst[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Length of the valid UTF-8 sequence at s[0..avail), or 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF refused). */
static size_t utf8_seq(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	size_t n;
	unsigned cp, min;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
		cp = c & 0x1F;
		min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		cp = c & 0x0F;
		min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		cp = c & 0x07;
		min = 0x10000;
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

/* At an opening quote: decode the string into a new NUL-terminated buffer. */
static int parse_string(struct parser *p, char **out, size_t *out_len)
{
	size_t start = ++p->pos, end = start;
	char *buf, *dst;
	int rc;

	/* Find the closing quote; the decoded text is never longer than the raw. */
	for (;;) {
		if (end >= p->len) {
			p->pos = p->len;
			return fail(p, -EINVAL, "unterminated string");
		}
		if (p->text[end] == '"')
			break;
		if (p->text[end] == '\\')
			end++;
		end++;
	}
	buf = malloc(end - start + 1);
	if (!buf)
		return fail(p, -ENOMEM, "out of memory");
	dst = buf;
	while (p->pos < end) {
		unsigned char c = (unsigned char)p->text[p->pos];

		if (c < 0x20) {
			rc = fail(p, -EINVAL, "control character in string");
			goto err;
		}
		if (c != '\\') {
			size_t n = utf8_seq((const unsigned char *)p->text + p->pos, end - p->pos);

			if (n == 0) {
				rc = fail(p, -EINVAL, "invalid UTF-8 in string");
				goto err;
			}
			memcpy(dst, p->text + p->pos, n);
			dst += n;
			p->pos += n;
			continue;
		}
		p->pos++;
		c = (unsigned char)p->text[p->pos++];
		switch (c) {
		case '"': *dst++ = '"'; break;
		case '\\': *dst++ = '\\'; break;
		case '/': *dst++ = '/'; break;
		case 'b': *dst++ = '\b'; break;
		case 'f': *dst++ = '\f'; break;
		case 'n': *dst++ = '\n'; break;
		case 'r': *dst++ = '\r'; break;
		case 't': *dst++ = '\t'; break;
		case 'u': {
			unsigned cp, lo;

			if ((rc = hex4(p, &cp)) < 0)
				goto err;
			if (cp >= 0xDC00 && cp <= 0xDFFF) {
				rc = fail(p, -EINVAL, "lone low surrogate");
				goto err;
			}
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (end - p->pos < 6 || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u') {
					rc = fail(p, -EINVAL, "lone high surrogate");
					goto err;
				}
				p->pos += 2;
				if ((rc = hex4(p, &lo)) < 0)
					goto err;
				if (lo < 0xDC00 || lo > 0xDFFF) {
					rc = fail(p, -EINVAL, "bad low surrogate");
					goto err;
				}
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			if (cp == 0) {
				rc = fail(p, -EINVAL, "\\u0000 in string");
				goto err;
			}
			dst += put_utf8(dst, cp);
			break;
		}
		default:
			p->pos--;
			rc = fail(p, -EINVAL, "bad escape in string");
			goto err;
		}
	}
	*dst = '\0';
	p->pos = end + 1;
	*out = buf;
	if (out_len)
		*out_len = (size_t)(dst - buf);
	return 0;
err:
	free(buf);
	return rc;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int parse_number(struct parser *p, struct json_value *v)
{
	size_t start = p->pos, i = p->pos;
	bool negative = false, integral = true;
	char lit[JSON_MAX_NUMBER_LEN + 1];
	char *endp;
	double d;

	if (i < p->len && p->text[i] == '-') {
		negative = true;
		i++;
	}
	if (i >= p->len || !is_digit(p->text[i])) {
		p->pos = i;
		return fail(p, -EINVAL, "bad number");
	}
	if (p->text[i] == '0') {
		i++;
		if (i < p->len && is_digit(p->text[i])) {
			p->pos = i;
			return fail(p, -EINVAL, "leading zero in number");
		}
	} else {
		while (i < p->len && is_digit(p->text[i]))
			i++;
	}
	if (i < p->len && p->text[i] == '.') {
		integral = false;
		i++;
		if (i >= p->len || !is_digit(p->text[i])) {
			p->pos = i;
			return fail(p, -EINVAL, "missing digits after decimal point");
		}
		while (i < p->len && is_digit(p->text[i]))
			i++;
	}
	if (i < p->len && (p->text[i] == 'e' || p->text[i] == 'E')) {
		integral = false;
		i++;
		if (i < p->len && (p->text[i] == '+' || p->text[i] == '-'))
			i++;
		if (i >= p->len || !is_digit(p->text[i])) {
			p->pos = i;
			return fail(p, -EINVAL, "missing digits in exponent");
		}
		while (i < p->len && is_digit(p->text[i]))
			i++;
	}
	if (i - start > JSON_MAX_NUMBER_LEN)
		return fail(p, -E2BIG, "number literal too long");
	memcpy(lit, p->text + start, i - start);
	lit[i - start] = '\0';
	errno = 0;
	d = strtod(lit, &endp);
	if (endp != lit + (i - start) || isinf(d) || isnan(d))
		return fail(p, -EINVAL, "number out of range");
	v->type = JSON_NUMBER;
	v->u.number.value = d;
	v->u.number.is_uint = false;
	v->u.number.uint_value = 0;
	if (integral && !negative) {
		uint64_t u = 0;
		bool fits = true;

		for (size_t k = start; k < i; k++) {
			unsigned digit = (unsigned)(p->text[k] - '0');

			if (u > (UINT64_MAX - digit) / 10) {
				fits = false;
				break;
			}
			u = u * 10 + digit;
		}
		v->u.number.is_uint = fits;
		v->u.number.uint_value = fits ? u : 0;
	}
	p->pos = i;
	return 0;
}

static int parse_literal(struct parser *p, const char *word, enum json_type type, struct json_value *v)
{
	size_t n = strlen(word);

	if (p->len - p->pos < n || memcmp(p->text + p->pos, word, n) != 0)
		return fail(p, -EINVAL, "unexpected character");
	p->pos += n;
	v->type = type;
	return 0;
}

static int parse_value(struct parser *p, struct json_value *v, unsigned depth);

/* Grow *items (of elem_size each) so that index count is valid. */
static int grow(struct parser *p, void **items, size_t count, size_t *cap, size_t elem_size)
{
	void *n;
	size_t new_cap;

	if (count < *cap)
		return 0;
	new_cap = *cap ? *cap * 2 : 4;
	n = realloc(*items, new_cap * elem_size);
	if (!n)
		return fail(p, -ENOMEM, "out of memory");
	*items = n;
	*cap = new_cap;
	return 0;
}

static int parse_array(struct parser *p, struct json_value *v, unsigned depth)
{
	struct json_value *items = NULL;
	size_t count = 0, cap = 0;
	int rc;

	p->pos++; /* '[' */
	v->type = JSON_ARRAY;
	v->u.array.items = NULL;
	v->u.array.count = 0;
	skip_ws(p);
	if (p->pos < p->len && p->text[p->pos] == ']') {
		p->pos++;
		return 0;
	}
	for (;;) {
		if ((rc = grow(p, (void **)&items, count, &cap, sizeof(*items))) < 0)
			goto err;
		skip_ws(p);
		if ((rc = parse_value(p, &items[count], depth + 1)) < 0)
			goto err;
		count++;
		skip_ws(p);
		if (p->pos >= p->len) {
			rc = fail(p, -EINVAL, "unterminated array");
			goto err;
		}
		if (p->text[p->pos] == ']') {
			p->pos++;
			break;
		}
		if (p->text[p->pos] != ',') {
			rc = fail(p, -EINVAL, "expected ',' or ']' in array");
			goto err;
		}
		p->pos++;
	}
	v->u.array.items = items;
	v->u.array.count = count;
	return 0;
err:
	for (size_t i = 0; i < count; i++)
		value_fini(&items[i]);
	free(items);
	v->type = JSON_NULL;
	return rc;
}

static int parse_object(struct parser *p, struct json_value *v, unsigned depth)
{
	struct json_member *members = NULL;
	size_t count = 0, cap = 0;
	int rc;

	p->pos++; /* '{' */
	v->type = JSON_OBJECT;
	v->u.object.members = NULL;
	v->u.object.count = 0;
	skip_ws(p);
	if (p->pos < p->len && p->text[p->pos] == '}') {
		p->pos++;
		return 0;
	}
	for (;;) {
		struct json_member *m;

		if ((rc = grow(p, (void **)&members, count, &cap, sizeof(*members))) < 0)
			goto err;
		m = &members[count];
		skip_ws(p);
		if (p->pos >= p->len || p->text[p->pos] != '"') {
			rc = fail(p, -EINVAL, "expected a string key in object");
			goto err;
		}
		if ((rc = parse_string(p, &m->key, NULL)) < 0)
			goto err;
		skip_ws(p);
		if (p->pos >= p->len || p->text[p->pos] != ':') {
			free(m->key);
			rc = fail(p, -EINVAL, "expected ':' after object key");
			goto err;
		}
		p->pos++;
		skip_ws(p);
		if ((rc = parse_value(p, &m->value, depth + 1)) < 0) {
			free(m->key);
			goto err;
		}
		count++;
		skip_ws(p);
		if (p->pos >= p->len) {
			rc = fail(p, -EINVAL, "unterminated object");
			goto err;
		}
		if (p->text[p->pos] == '}') {
			p->pos++;
			break;
		}
		if (p->text[p->pos] != ',') {
			rc = fail(p, -EINVAL, "expected ',' or '}' in object");
			goto err;
		}
		p->pos++;
	}
	v->u.object.members = members;
	v->u.object.count = count;
	return 0;
err:
	for (size_t i = 0; i < count; i++) {
		free(members[i].key);
		value_fini(&members[i].value);
	}
	free(members);
	v->type = JSON_NULL;
	return rc;
}

static int parse_value(struct parser *p, struct json_value *v, unsigned depth)
{
	v->type = JSON_NULL;
	if (depth > JSON_MAX_DEPTH)
		return fail(p, -E2BIG, "nesting too deep");
	if (++p->values > JSON_MAX_VALUES)
		return fail(p, -E2BIG, "too many values");
	if (p->pos >= p->len)
		return fail(p, -EINVAL, "unexpected end of input");
	switch (p->text[p->pos]) {
	case '{':
		return parse_object(p, v, depth);
	case '[':
		return parse_array(p, v, depth);
	case '"': {
		int rc = parse_string(p, &v->u.string.chars, &v->u.string.len);

		if (rc == 0)
			v->type = JSON_STRING;
		return rc;
	}
	case 't':
		return parse_literal(p, "true", JSON_TRUE, v);
	case 'f':
		return parse_literal(p, "false", JSON_FALSE, v);
	case 'n':
		return parse_literal(p, "null", JSON_NULL, v);
	default:
		if (p->text[p->pos] == '-' || is_digit(p->text[p->pos]))
			return parse_number(p, v);
		return fail(p, -EINVAL, "unexpected character");
	}
}

int json_parse(const char *text, size_t len, struct json_value **out, struct json_error *err)
{
	struct parser p = { .text = text, .len = len, .pos = 0, .values = 0, .err = err };
	struct json_value *v;
	int rc;

	*out = NULL;
	if (err) {
		err->offset = 0;
		err->msg = NULL;
	}
	if (!text)
		return fail(&p, -EINVAL, "no input");
	if (len > JSON_MAX_INPUT)
		return fail(&p, -E2BIG, "document too large");
	v = malloc(sizeof(*v));
	if (!v)
		return fail(&p, -ENOMEM, "out of memory");
	skip_ws(&p);
	rc = parse_value(&p, v, 0);
	if (rc == 0) {
		skip_ws(&p);
		if (p.pos != p.len)
			rc = fail(&p, -EINVAL, "trailing characters after the value");
	}
	if (rc < 0) {
		json_free(v);
		return rc;
	}
	*out = v;
	return 0;
}

const struct json_value *json_get(const struct json_value *v, const char *path)
{
	const char *step = path;

	if (!v || !path)
		return NULL;
	for (;;) {
		const char *dot = strchr(step, '.');
		size_t n = dot ? (size_t)(dot - step) : strlen(step);
		const struct json_value *next = NULL;

		if (n == 0 || v->type != JSON_OBJECT)
			return NULL;
		for (size_t i = 0; i < v->u.object.count; i++) {
			const char *key = v->u.object.members[i].key;

			if (strncmp(key, step, n) == 0 && key[n] == '\0') {
				next = &v->u.object.members[i].value;
				break;
			}
		}
		if (!next || !dot)
			return next;
		v = next;
		step = dot + 1;
	}
}

int json_get_number(const struct json_value *v, const char *path, double *out)
{
	const struct json_value *f = json_get(v, path);

	if (!f)
		return -ENOENT;
	if (f->type != JSON_NUMBER)
		return -EINVAL;
	*out = f->u.number.value;
	return 0;
}

int json_get_uint(const struct json_value *v, const char *path, uint64_t *out)
{
	const struct json_value *f = json_get(v, path);

	if (!f)
		return -ENOENT;
	if (f->type != JSON_NUMBER || !f->u.number.is_uint)
		return -EINVAL;
	*out = f->u.number.uint_value;
	return 0;
}

int json_get_bool(const struct json_value *v, const char *path, bool *out)
{
	const struct json_value *f = json_get(v, path);

	if (!f)
		return -ENOENT;
	if (f->type != JSON_TRUE && f->type != JSON_FALSE)
		return -EINVAL;
	*out = f->type == JSON_TRUE;
	return 0;
}

int json_get_string(const struct json_value *v, const char *path, const char **out)
{
	const struct json_value *f = json_get(v, path);

	if (!f)
		return -ENOENT;
	if (f->type != JSON_STRING)
		return -EINVAL;
	*out = f->u.string.chars;
	return 0;
}
