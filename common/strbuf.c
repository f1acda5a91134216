/* SPDX-License-Identifier: MIT */
#include "common/strbuf.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strbuf_init(struct strbuf *sb)
{
	memset(sb, 0, sizeof(*sb));
}

void strbuf_fini(struct strbuf *sb)
{
	free(sb->buf);
	memset(sb, 0, sizeof(*sb));
}

void strbuf_fini_wipe(struct strbuf *sb)
{
	if (sb->buf)
		explicit_bzero(sb->buf, sb->cap);
	strbuf_fini(sb);
}

void strbuf_reset(struct strbuf *sb)
{
	sb->len = 0;
	if (sb->buf)
		sb->buf[0] = '\0';
}

static bool strbuf_reserve(struct strbuf *sb, size_t extra)
{
	if (sb->failed)
		return false;
	if (sb->len + extra + 1 <= sb->cap)
		return true;
	size_t cap = sb->cap ? sb->cap : 256;
	while (cap < sb->len + extra + 1)
		cap *= 2;
	char *nb = realloc(sb->buf, cap);
	if (!nb) {
		sb->failed = true;
		return false;
	}
	sb->buf = nb;
	sb->cap = cap;
	return true;
}

void strbuf_append(struct strbuf *sb, const char *data, size_t len)
{
	if (!strbuf_reserve(sb, len))
		return;
	memcpy(sb->buf + sb->len, data, len);
	sb->len += len;
	sb->buf[sb->len] = '\0';
}

void strbuf_puts(struct strbuf *sb, const char *s)
{
	strbuf_append(sb, s, strlen(s));
}

void strbuf_printf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	char small[256];

	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof(small)) {
		strbuf_append(sb, small, (size_t)n);
		return;
	}
	if (!strbuf_reserve(sb, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t)n;
}

static int append_chunk(const char *buf, size_t size, void *data)
{
	strbuf_append(data, buf, size);
	return 0;
}

void strbuf_append_json(struct strbuf *sb, json_t *v, size_t flags)
{
	if (!v || json_dump_callback(v, append_chunk, sb, flags) < 0)
		sb->failed = true;
	json_decref(v);
}
