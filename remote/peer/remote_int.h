/* SPDX-License-Identifier: MIT */
/*
 * remote/ internals shared by its own files and the white-box unit test:
 * the percent coding and path validation that guard the server's only
 * door into the namespace, Range parsing, and back-off introspection.
 */
#ifndef COORDFS_REMOTE_REMOTE_INT_H
#define COORDFS_REMOTE_REMOTE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "remote/remote.h"

struct strbuf;

/* Decode a percent-encoded path into out (outcap bytes, NUL included).
 * Refuses malformed escapes, %00, and raw or decoded control characters
 * (-EINVAL) and output that does not fit (-ENAMETOOLONG). '+' stays '+'. */
int remote__pct_decode(const char *in, char *out, size_t outcap);

/* 0 when p is a safe relative path: non-empty, no leading '/', no empty,
 * "." or ".." component, components <= REMOTE_MAX_NAME, total <=
 * REMOTE_MAX_RELPATH, no control characters. -EINVAL / -ENAMETOOLONG. */
int remote__relpath_check(const char *p);

/* Parse a Range header value against a file of size bytes.
 * 0: no usable range (absent, malformed, several ranges): serve it all.
 * 1: a single satisfiable range, [*start, *start + *len).
 * -ERANGE: unsatisfiable (answer 416). */
int remote__range_parse(const char *value, uint64_t size, uint64_t *start, uint64_t *len);

/* Current back-off period of node (0 when up). */
unsigned remote__node_backoff_ms(const struct remote_client *c, unsigned node);

/* Set the server's header deadline (REMOTE_SERVER_HEADER_DEADLINE_MS by
 * default), so that the tests of it need not wait the full 5 s. */
void remote__server_set_header_deadline_ms(struct remote_server *s, unsigned ms);
/* Set the send deadline of responses that hold a buffer
 * (REMOTE_SERVER_SEND_DEADLINE_MS by default), for its test. */
void remote__server_set_send_deadline_ms(struct remote_server *s, unsigned ms);
/* Set the open connections over which a new one recycles idle ones
 * (REMOTE_SERVER_IDLE_LIMIT by default), for its test. */
void remote__server_set_idle_limit(struct remote_server *s, unsigned n);
/* Set the cap of unauthenticated connections (REMOTE_SERVER_MAX_UNAUTH by
 * default), so that the tests of it need not open a thousand. */
void remote__server_set_max_unauth(struct remote_server *s, unsigned n);
/* Set the requests that may wait for a worker (REMOTE_SERVER_QUEUE by
 * default), so that its test need not block 1,024 of them. */
void remote__server_set_queue_cap(struct remote_server *s, unsigned n);

#endif
