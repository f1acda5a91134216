/* SPDX-License-Identifier: MIT */
/*
 * One libcurl connection pool for every HTTP client of the daemon's object
 * store source: a bounded set of easy handles that threads check out for one
 * request and check back in. A handle keeps its live connections (keep-alive)
 * while it sits in the pool, so a connection opened by one thread is reused
 * by whichever thread takes that handle next, and a node keeps at most
 * max_handles connections per host however many threads read. DNS answers
 * and TLS sessions are shared between the handles through a curl share;
 * connections themselves are not, since libcurl does not support sharing its
 * connection cache between concurrent threads.
 *
 * Also the one retry policy: exponential backoff with full jitter.
 *
 * Thread-safety: get/put/new and remote_http_backoff_ms() may be called from
 * any thread; create/destroy from one thread while no request runs. Call
 * remote_global_init() (curl_global_init) before create.
 */
#ifndef COORDFS_REMOTE_HTTP_H
#define COORDFS_REMOTE_HTTP_H

#include <stdint.h>

typedef void CURL;
struct remote_http;

/* max_handles: cap on handles, hence on connections per host ([64] when 0).
 * 0 and *out, or -ENOMEM / -EIO. */
int remote_http_create(unsigned max_handles, struct remote_http **out);
/* Frees the pool and its handles; every handle must have been put back.
 * NULL ok. */
void remote_http_destroy(struct remote_http *h);

/* Check out a handle for one request, with every option reset
 * (curl_easy_reset keeps its connections) and the pool's defaults applied
 * (no signals, TCP_NODELAY, keep-alive probes, HTTP/1.1, the system CA
 * store for https). Blocks while max_handles are checked out. The caller
 * sets URL, headers, callbacks and timeouts, and must not check out a
 * second handle before putting this one back. NULL on allocation failure. */
CURL *remote_http_get(struct remote_http *h);
/* The same, waiting at most wait_ms for a handle to come back: NULL with
 * *err = -EBUSY when none did, or -ENOMEM. */
CURL *remote_http_get_wait(struct remote_http *h, unsigned wait_ms, int *err);
/* Check a handle from remote_http_get back in (NULL ok). */
void remote_http_put(struct remote_http *h, CURL *e);

/* A handle outside the pool, with the same defaults, for rare requests
 * made while a pooled handle may be held (credential refresh). Free it with
 * curl_easy_cleanup(). NULL on allocation failure. */
CURL *remote_http_new(struct remote_http *h);

/* Delay before retry number attempt (1, 2, ...): a uniformly random value
 * in [0, min(cap_ms, base_ms * 2^(attempt-1))] ("full jitter"). */
unsigned remote_http_backoff_ms(unsigned attempt, unsigned base_ms, unsigned cap_ms);

#endif
