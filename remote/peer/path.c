/* SPDX-License-Identifier: MIT */
/*
 * Percent coding, relative-path validation and Range parsing: the parsers
 * of outside input that stand between an HTTP request and the namespace.
 * They are strict on purpose: whatever they let through reaches resolve.
 */
#include "remote/peer/remote_int.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "common/hex.h"
#include "common/strbuf.h"
#include "common/text.h"

int remote__pct_decode(const char *in, char *out, size_t outcap)
{
	size_t o = 0;

	if (outcap == 0)
		return -ENAMETOOLONG;
	for (size_t i = 0; in[i]; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c == '%') {
			int hi = hex_value(in[i + 1]);
			int lo = hi < 0 ? -1 : hex_value(in[i + 2]);

			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = (unsigned char)(hi << 4 | lo);
			i += 2;
		}
		if (c < 0x20 || c == 0x7f)
			return -EINVAL;
		if (o + 1 >= outcap)
			return -ENAMETOOLONG;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return 0;
}

int remote__relpath_check(const char *p)
{
	size_t total = strlen(p);

	if (total == 0 || p[0] == '/')
		return -EINVAL;
	if (total > REMOTE_MAX_RELPATH)
		return -ENAMETOOLONG;
	for (const char *c = p;;) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);

		if (n == 0)
			return -EINVAL; /* "a//b" or trailing '/' */
		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return -EINVAL;
		if (n > REMOTE_MAX_NAME)
			return -ENAMETOOLONG;
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f)
				return -EINVAL;
		if (!slash)
			break;
		c = slash + 1;
	}
	return 0;
}

int remote__range_parse(const char *value, uint64_t size, uint64_t *start, uint64_t *len)
{
	const char *p = value;
	uint64_t a = 0, b = 0;
	bool have_a = false, have_b = false;

	if (!p)
		return 0;
	while (*p == ' ' || *p == '\t')
		p++;
	if (strncasecmp(p, "bytes=", 6) != 0)
		return 0;
	p += 6;
	while (*p == ' ')
		p++;
	if (*p != '-') {
		if (text_parse_u64(&p, &a) != 0)
			return 0;
		have_a = true;
	}
	if (*p != '-')
		return 0;
	p++;
	if (*p >= '0' && *p <= '9') {
		if (text_parse_u64(&p, &b) != 0)
			return 0;
		have_b = true;
	}
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p != '\0')
		return 0; /* several ranges or junk: ignored, as RFC 9110 allows */
	if (!have_a && !have_b)
		return 0;
	if (!have_a) { /* suffix: the last b bytes */
		if (b == 0 || size == 0)
			return -ERANGE;
		if (b > size)
			b = size;
		*start = size - b;
		*len = b;
		return 1;
	}
	if (have_b && b < a)
		return 0; /* invalid: ignored */
	if (a >= size)
		return -ERANGE;
	if (!have_b || b >= size)
		b = size - 1;
	*start = a;
	*len = b - a + 1;
	return 1;
}
