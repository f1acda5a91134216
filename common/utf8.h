/* SPDX-License-Identifier: MIT */
/*
 * Valid UTF-8 from arbitrary bytes. File names and paths are bytes on
 * Linux, but JSON (and anything a script parses) must be UTF-8: a byte that
 * does not start a well-formed sequence (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) is replaced by U+FFFD.
 */
#ifndef COORDFS_COMMON_UTF8_H
#define COORDFS_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

struct strbuf;

/* Whether all len bytes of s are well-formed UTF-8. */
bool utf8_valid(const char *s, size_t len);

/* Append s (len bytes) to out, each ill-formed byte replaced by U+FFFD. */
void utf8_sanitize(struct strbuf *out, const char *s, size_t len);

/* A new jansson string of s (NUL-terminated bytes) made valid UTF-8 the
 * same way, or NULL when out of memory. */
struct json_t;
struct json_t *utf8_json_string(const char *s);

#endif
