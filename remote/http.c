/* SPDX-License-Identifier: MIT */
/*
 * The shared libcurl connection pool (remote/http.h): one CURLSH sharing
 * connections, DNS answers and TLS sessions between every thread, one easy
 * handle per thread (a pthread key) attached to it and reset before each
 * use, and the full-jitter backoff every client retries with.
 *
 * curl calls the share's lock callbacks around every access to a shared
 * cache; each kind of data has its own mutex so a DNS look-up never waits
 * for the connection cache. The easy handles are kept on a list as well as
 * in the key, so destroy frees the handles of threads that are still alive.
 */
#include "remote/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>

#define DEFAULT_MAX_CONNECTIONS 64

struct http_handle {
	CURL *easy;
	struct remote_http *pool;
	struct http_handle *prev, *next;
};

struct remote_http {
	CURLSH *share;
	pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
	pthread_key_t key;
	unsigned max_connections;
	pthread_mutex_t handles_lock; /* protects handles */
	struct http_handle *handles;
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

static void handle_free_locked(struct http_handle *hd)
{
	struct remote_http *h = hd->pool;

	if (hd->prev)
		hd->prev->next = hd->next;
	else
		h->handles = hd->next;
	if (hd->next)
		hd->next->prev = hd->prev;
	curl_easy_cleanup(hd->easy);
	free(hd);
}

/* pthread key destructor: the thread is exiting. */
static void handle_destructor(void *arg)
{
	struct http_handle *hd = arg;
	struct remote_http *h = hd->pool;

	pthread_mutex_lock(&h->handles_lock);
	handle_free_locked(hd);
	pthread_mutex_unlock(&h->handles_lock);
}

int remote_http_create(unsigned max_connections, struct remote_http **out)
{
	struct remote_http *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->max_connections = max_connections ? max_connections : DEFAULT_MAX_CONNECTIONS;
	for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&h->locks[i], NULL);
	pthread_mutex_init(&h->handles_lock, NULL);
	if (pthread_key_create(&h->key, handle_destructor) != 0)
		goto fail_key;
	h->share = curl_share_init();
	if (!h->share)
		goto fail_share;
	if (curl_share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_USERDATA, h) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
		goto fail_opts;
	*out = h;
	return 0;

fail_opts:
	curl_share_cleanup(h->share);
fail_share:
	pthread_key_delete(h->key);
fail_key:
	for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&h->locks[i]);
	pthread_mutex_destroy(&h->handles_lock);
	free(h);
	return -EIO;
}

void remote_http_destroy(struct remote_http *h)
{
	if (!h)
		return;
	/* No destructor runs after the key is deleted: free every handle here. */
	pthread_key_delete(h->key);
	pthread_mutex_lock(&h->handles_lock);
	while (h->handles)
		handle_free_locked(h->handles);
	pthread_mutex_unlock(&h->handles_lock);
	curl_share_cleanup(h->share);
	for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&h->locks[i]);
	pthread_mutex_destroy(&h->handles_lock);
	free(h);
}

CURL *remote_http_easy(struct remote_http *h)
{
	struct http_handle *hd = pthread_getspecific(h->key);

	if (!hd) {
		hd = calloc(1, sizeof(*hd));
		if (!hd)
			return NULL;
		hd->easy = curl_easy_init();
		if (!hd->easy) {
			free(hd);
			return NULL;
		}
		hd->pool = h;
		pthread_mutex_lock(&h->handles_lock);
		hd->next = h->handles;
		if (h->handles)
			h->handles->prev = hd;
		h->handles = hd;
		pthread_mutex_unlock(&h->handles_lock);
		if (pthread_setspecific(h->key, hd) != 0) {
			pthread_mutex_lock(&h->handles_lock);
			handle_free_locked(hd);
			pthread_mutex_unlock(&h->handles_lock);
			return NULL;
		}
	}
	CURL *e = hd->easy;

	/* Reset keeps the handle's live connections and caches, not options. */
	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_SHARE, h->share);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 15L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_MAXCONNECTS, (long)h->max_connections);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_PROXY, "");
	/* libcurl's default CA store is the system one (ca-certificates). */
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
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
