/* SPDX-License-Identifier: MIT */
/* UTF-8 validation and U+FFFD replacement (the table of RFC 3629 §4). */
#include "common/utf8.h"

#include <jansson.h>
#include <string.h>

#include "common/strbuf.h"

static bool cont(unsigned char c)
{
	return (c & 0xC0) == 0x80;
}

/* Length of the well-formed sequence starting at s (at most len bytes),
 * or 0 when s[0] does not start one. */
static size_t utf8_seq_len(const unsigned char *s, size_t len)
{
	if (len == 0)
		return 0;
	unsigned char c = s[0];

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return len >= 2 && cont(s[1]) ? 2 : 0;
	if (c >= 0xE0 && c <= 0xEF) {
		/* E0: no overlong (A0..BF); ED: no surrogates (80..9F). */
		unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
		return len >= 3 && s[1] >= lo && s[1] <= hi && cont(s[2]) ? 3 : 0;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		/* F0: no overlong (90..BF); F4: nothing above U+10FFFF (80..8F). */
		unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
		return len >= 4 && s[1] >= lo && s[1] <= hi && cont(s[2]) && cont(s[3]) ? 4 : 0;
	}
	return 0;
}

bool utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;

	while (len > 0) {
		size_t n = utf8_seq_len(p, len);
		if (n == 0)
			return false;
		p += n;
		len -= n;
	}
	return true;
}

void utf8_sanitize(struct strbuf *out, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;

	while (len > 0) {
		size_t n = utf8_seq_len(p, len);
		if (n == 0) {
			strbuf_append(out, "\xEF\xBF\xBD", 3);
			n = 1;
		} else {
			strbuf_append(out, (const char *)p, n);
		}
		p += n;
		len -= n;
	}
}

json_t *utf8_json_string(const char *s)
{
	struct strbuf sb;
	json_t *v;

	strbuf_init(&sb);
	utf8_sanitize(&sb, s, strlen(s));
	v = sb.failed ? NULL : json_stringn(sb.buf ? sb.buf : "", sb.len);
	strbuf_fini(&sb);
	return v;
}
