/* SPDX-License-Identifier: MIT */
/*
 * A small, strict JSON reader for the tools (fsstat): RFC 8259 grammar only
 * (no comments, no trailing commas, no NaN), the whole document held as a
 * tree of plain structs. Everything it reads comes from outside, so input
 * size, nesting depth and value count have hard caps, and any violation is
 * a clean error, never a crash. Strings are valid UTF-8 without NUL bytes
 * ("\u0000" is refused), so they can be used as C strings.
 * Not thread-safe per tree; separate trees are independent.
 */
#ifndef COORDFS_TOOLS_JSON_H
#define COORDFS_TOOLS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_INPUT (1u << 20) /* bytes of text */
#define JSON_MAX_DEPTH 32         /* nested arrays/objects */
#define JSON_MAX_VALUES 65536     /* values of any kind in one document */

enum json_type {
	JSON_NULL,
	JSON_FALSE,
	JSON_TRUE,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json_member;

struct json_value {
	enum json_type type;
	union {
		struct {
			double value;
			/* the literal is a non-negative integer that fits */
			bool is_uint;
			uint64_t uint_value;
		} number;
		struct {
			char *chars; /* NUL-terminated, UTF-8 */
			size_t len;
		} string;
		struct {
			struct json_value *items;
			size_t count;
		} array;
		struct {
			struct json_member *members; /* in document order */
			size_t count;
		} object;
	} u;
};

struct json_member {
	char *key; /* NUL-terminated, UTF-8 */
	struct json_value value;
};

/* Where and why a parse failed. */
struct json_error {
	size_t offset; /* byte offset into the text */
	const char *msg; /* static string */
};

/*
 * Parse text[0..len) as exactly one JSON value (whitespace around it
 * allowed). On success returns 0 and *out owns a new tree (free with
 * json_free). Errors: -EINVAL malformed text, -E2BIG a cap was exceeded
 * (len, depth or value count), -ENOMEM; err (may be NULL) says where.
 */
int json_parse(const char *text, size_t len, struct json_value **out, struct json_error *err);

/* Free a tree returned by json_parse. Accepts NULL. */
void json_free(struct json_value *v);

/*
 * Look up a member of an object by a dotted path ("cache.hits"); every
 * step must be an object member. Duplicate keys: the first one wins.
 * Returns NULL when v is NULL, a step is missing or is not an object.
 */
const struct json_value *json_get(const struct json_value *v, const char *path);

/* Typed look-ups by dotted path. Return 0 and set *out, -ENOENT when the
 * path is missing (or v is NULL), -EINVAL when it has another type (or, for
 * json_get_uint, a number that is not a non-negative integer). */
int json_get_number(const struct json_value *v, const char *path, double *out);
int json_get_uint(const struct json_value *v, const char *path, uint64_t *out);
int json_get_bool(const struct json_value *v, const char *path, bool *out);
int json_get_string(const struct json_value *v, const char *path, const char **out);

#endif
