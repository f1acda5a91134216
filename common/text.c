/* SPDX-License-Identifier: MIT */
#include "common/text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"

void text_pct_encode(struct strbuf *out, const char *s, size_t len, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
			strbuf_append(out, (const char *)&s[i], 1);
		} else {
			char esc[3] = {'%', hex[c >> 4], hex[c & 15]};

			strbuf_append(out, esc, 3);
		}
	}
}

int text_parse_u64(const char **p, uint64_t *out)
{
	uint64_t v = 0;

	if (**p < '0' || **p > '9')
		return -EINVAL;
	while (**p >= '0' && **p <= '9') {
		unsigned dgt = (unsigned)(**p - '0');

		if (v > (UINT64_MAX - dgt) / 10)
			return -EINVAL;
		v = v * 10 + dgt;
		(*p)++;
	}
	*out = v;
	return 0;
}

#define DIGITS "0123456789"

bool text_is_digits(const char *s)
{
	return *s && s[strspn(s, DIGITS)] == '\0';
}

bool text_is_plain_decimal(const char *s)
{
	size_t before = strspn(s, DIGITS), after = 0;
	const char *rest = s + before;

	if (*rest == '.') {
		after = strspn(rest + 1, DIGITS);
		rest += 1 + after;
	}
	return before + after > 0 && *rest == '\0';
}

const char *text_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}
