/* SPDX-License-Identifier: MIT */
/* Small text helpers shared by the modules: ASCII percent-encoding (URLs of
 * peers and of the object store), decimal numbers, environment variables. */
#ifndef COORDFS_COMMON_TEXT_H
#define COORDFS_COMMON_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strbuf;

/* Append len bytes of s to out, every byte but RFC 3986's unreserved ASCII
 * (A-Z a-z 0-9 - . _ ~), and '/' when keep_slash, as %XX (upper-case hex).
 * Locale-independent: the same bytes on every machine (peers and S3
 * signatures depend on it). */
void text_pct_encode(struct strbuf *out, const char *s, size_t len, bool keep_slash);

/* Parse the decimal digits at *p into *out and advance *p past them.
 * 0, or -EINVAL when there is no digit or the value overflows 64 bits. */
int text_parse_u64(const char **p, uint64_t *out);

/* Whether s is one or more decimal digits and nothing else: what the
 * options take for a count, where strtol and strtoull also take blanks,
 * signs ("-1" wraps to 2^64-1) and, in base 0, hex and octal. */
bool text_is_digits(const char *s);

/* Whether s is decimal digits with at most one point among or after them
 * ("0.5", "2", "2."): strtod also takes blanks, signs, hexadecimal
 * ("0x1p1" is 2), exponents, "inf" and "nan". */
bool text_is_plain_decimal(const char *s);

/* getenv(name) when set and not empty, else NULL. */
const char *text_env(const char *name);

#endif
