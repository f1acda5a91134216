/* SPDX-License-Identifier: MIT */
/*
 * One libcurl connection pool for every HTTP client of the daemon (the S3
 * source and the peer client): a curl share of connections, DNS answers
 * and TLS sessions, and one easy handle per calling thread attached to it.
 * A connection opened by one thread is reused by any other, so a node
 * keeps a few connections per host instead of one per thread per host.
 *
 * Also the one retry policy: exponential backoff with full jitter.
 *
 * Thread-safety: remote_http_easy() and remote_http_backoff_ms() may be
 * called from any thread; create/destroy from one thread while no request
 * runs. Call remote_global_init() (curl_global_init) before create.
 */
#ifndef COORDFS_REMOTE_HTTP_H
#define COORDFS_REMOTE_HTTP_H

#include <stdint.h>

typedef void CURL;
struct remote_http;

/* max_connections: cap on pooled connections in all ([64] when 0).
 * 0 and *out, or -ENOMEM / -EIO. */
int remote_http_create(unsigned max_connections, struct remote_http **out);
/* Frees the pool and every thread's handle. NULL ok. */
void remote_http_destroy(struct remote_http *h);

/* The calling thread's easy handle, attached to the pool's share, with
 * every option reset (curl_easy_reset) and the pool's defaults applied
 * (no signals, TCP_NODELAY, keep-alive probes, HTTP/1.1, the system CA
 * store for https). The caller sets URL, headers, callbacks and timeouts.
 * NULL on allocation failure. Valid until the thread exits or destroy. */
CURL *remote_http_easy(struct remote_http *h);

/* Delay before retry number attempt (1, 2, ...): a uniformly random value
 * in [0, min(cap_ms, base_ms * 2^(attempt-1))] ("full jitter"). */
unsigned remote_http_backoff_ms(unsigned attempt, unsigned base_ms, unsigned cap_ms);

#endif
