/* SPDX-License-Identifier: MIT */
/* Growable text buffer for building JSON, Prometheus text and paths. */
#ifndef COORDFS_COMMON_STRBUF_H
#define COORDFS_COMMON_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct strbuf {
	char *buf;   /* NUL-terminated when len > 0 or after any append */
	size_t len;
	size_t cap;
	bool failed; /* an allocation failed; content is truncated */
};

void strbuf_init(struct strbuf *sb);
void strbuf_fini(struct strbuf *sb);
/* strbuf_fini for a buffer that held a secret: zeroed (explicit_bzero)
 * before it is freed. */
void strbuf_fini_wipe(struct strbuf *sb);
void strbuf_reset(struct strbuf *sb);
void strbuf_append(struct strbuf *sb, const char *data, size_t len);
void strbuf_puts(struct strbuf *sb, const char *s);
void strbuf_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append the JSON text of v as jansson's json_dumps(v, flags) would give
 * it, and release v (a new reference is taken over). A NULL v (a failed
 * allocation upstream) or a failed dump sets failed. */
struct json_t;
void strbuf_append_json(struct strbuf *sb, struct json_t *v, size_t flags);

#endif
