/* SPDX-License-Identifier: MIT */
/*
 * The shared libcurl connection pool (remote/http.h): a LIFO stack of idle
 * easy handles (the most recently used one, whose connections are warmest,
 * goes out first), at most max_handles in all, and a curl share for DNS
 * answers and TLS sessions. curl calls the share's lock callbacks around
 * every access to a shared cache; each kind of data has its own mutex.
 * Lock order: the pool's lock is a leaf, never held across a transfer.
 *
 * libcurl's global state is set up here too (remote_global_init), with
 * allocators that wipe what they free: libcurl keeps its own copies of
 * the credentials we give it (CURLOPT_USERNAME/PASSWORD, the header list
 * holding x-amz-security-token) and frees them with its free callback,
 * so every byte it frees is zeroed first. jansson, which parses the
 * credential documents, gets the same free (json_set_alloc_funcs is
 * process-global: its malloc stays malloc, so memory jansson allocated
 * before the switch is freed correctly after it).
 */
#include "remote/http.h"

#include "common/deadline.h"
#include "remote/remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define DEFAULT_MAX_HANDLES 64
/* Connections one handle keeps (one host, plus spares for a redirect-free
 * endpoint change such as a credential server). */
#define HANDLE_MAX_CONNECTS 4L

/* ---- wiping allocators for libcurl and jansson ---- */

static _Atomic uint64_t wiped_frees; /* remote__wiped_frees: for the test */

static void wipe_free(void *p)
{
	if (!p)
		return;
	explicit_bzero(p, malloc_usable_size(p));
	atomic_fetch_add_explicit(&wiped_frees, 1, memory_order_relaxed);
	free(p);
}

/* Never leaves the old block behind unwiped: grow by copy. */
static void *wipe_realloc(void *p, size_t n)
{
	if (!p)
		return malloc(n);
	size_t old = malloc_usable_size(p);
	if (n <= old && n > 0)
		return p;
	void *q = malloc(n ? n : 1);
	if (!q)
		return NULL;
	memcpy(q, p, old < n ? old : n);
	wipe_free(p);
	return q;
}

uint64_t remote__wiped_frees(void)
{
	return atomic_load_explicit(&wiped_frees, memory_order_relaxed);
}

static void set_jansson_free(void)
{
	json_set_alloc_funcs(malloc, wipe_free);
}

int remote_global_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, set_jansson_free);
	return curl_global_init_mem(CURL_GLOBAL_DEFAULT, malloc, wipe_free, wipe_realloc, strdup,
				    calloc) == CURLE_OK
		   ? 0
		   : -EIO;
}

void remote_global_cleanup(void)
{
	curl_global_cleanup();
}

struct remote_http {
	CURLSH *share;
	pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
	pthread_mutex_t lock; /* guards idle, nidle, total */
	pthread_cond_t freed;
	CURL **idle;	      /* max_handles slots */
	unsigned nidle;
	unsigned total; /* handles in existence (idle or checked out) */
	unsigned max_handles;
};

static void share_lock(CURL *easy, curl_lock_data data, curl_lock_access access, void *arg)
{
	struct remote_http *h = arg;

	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&h->locks[data]);
}

static void share_unlock(CURL *easy, curl_lock_data data, void *arg)
{
	struct remote_http *h = arg;

	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&h->locks[data]);
}

int remote_http_create(unsigned max_handles, struct remote_http **out)
{
	struct remote_http *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->max_handles = max_handles ? max_handles : DEFAULT_MAX_HANDLES;
	h->idle = calloc(h->max_handles, sizeof(*h->idle));
	if (!h->idle) {
		free(h);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&h->locks[i], NULL);
	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->freed, &ca);
	pthread_condattr_destroy(&ca);
	h->share = curl_share_init();
	if (!h->share)
		goto fail;
	if (curl_share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_USERDATA, h) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
		goto fail;
	*out = h;
	return 0;

fail:
	remote_http_destroy(h); /* no handle yet; curl_share_cleanup(NULL) does nothing */
	return -EIO;
}

void remote_http_destroy(struct remote_http *h)
{
	if (!h)
		return;
	while (h->nidle)
		curl_easy_cleanup(h->idle[--h->nidle]);
	curl_share_cleanup(h->share);
	for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&h->locks[i]);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->freed);
	free(h->idle);
	free(h);
}

static void apply_defaults(struct remote_http *h, CURL *e)
{
	curl_easy_setopt(e, CURLOPT_SHARE, h->share);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 15L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_MAXCONNECTS, HANDLE_MAX_CONNECTS);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_PROXY, "");
	/* libcurl's default CA store is the system one (ca-certificates). */
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
}

/* A handle within the deadline (until NULL: none), or NULL with *err. */
static CURL *checkout(struct remote_http *h, const struct timespec *until, int *err)
{
	CURL *e = NULL;
	bool create = false;

	*err = -EBUSY;
	pthread_mutex_lock(&h->lock);
	for (;;) {
		if (h->nidle) {
			e = h->idle[--h->nidle];
			break;
		}
		if (h->total < h->max_handles) {
			h->total++; /* reserve the slot; created outside the lock */
			create = true;
			break;
		}
		if (!until)
			pthread_cond_wait(&h->freed, &h->lock);
		else if (pthread_cond_timedwait(&h->freed, &h->lock, until) == ETIMEDOUT &&
			 !h->nidle)
			break;
	}
	pthread_mutex_unlock(&h->lock);
	if (create) {
		e = curl_easy_init();
		if (!e) {
			pthread_mutex_lock(&h->lock);
			h->total--;
			pthread_cond_signal(&h->freed);
			pthread_mutex_unlock(&h->lock);
			*err = -ENOMEM;
			return NULL;
		}
	}
	if (!e)
		return NULL;
	/* Reset keeps the handle's live connections and caches, not options. */
	curl_easy_reset(e);
	apply_defaults(h, e);
	return e;
}

CURL *remote_http_get(struct remote_http *h)
{
	int err;

	return checkout(h, NULL, &err);
}

CURL *remote_http_get_wait(struct remote_http *h, unsigned wait_ms, int *err)
{
	struct timespec until = deadline_after_ms(wait_ms);

	return checkout(h, &until, err);
}

void remote_http_put(struct remote_http *h, CURL *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&h->lock);
	h->idle[h->nidle++] = e; /* nidle < total <= max_handles */
	pthread_cond_signal(&h->freed);
	pthread_mutex_unlock(&h->lock);
}

CURL *remote_http_new(struct remote_http *h)
{
	CURL *e = curl_easy_init();

	if (e)
		apply_defaults(h, e);
	return e;
}

unsigned remote_http_backoff_ms(unsigned attempt, unsigned base_ms, unsigned cap_ms)
{
	uint64_t ceiling = base_ms;
	uint32_t r = 0;

	if (attempt == 0)
		return 0;
	for (unsigned i = 1; i < attempt && ceiling < cap_ms; i++)
		ceiling *= 2;
	if (ceiling > cap_ms)
		ceiling = cap_ms;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
		r = (uint32_t)(uintptr_t)&r ^ (uint32_t)attempt * 2654435761u;
	return (unsigned)((uint64_t)r % (ceiling + 1));
}
