/* SPDX-License-Identifier: MIT */
/*
 * The peer client: exact ranged GETs with libcurl over the connection pool
 * of remote/http.h, shared with the object store's client when SOURCE is
 * one. A fetch checks a handle out (waiting up to the timeout when all are
 * busy), uses it alone, and checks it back in; each handle keeps one
 * keep-alive connection per peer, so a node opens at most the pool's
 * max_handles connections to a peer however many threads read.
 *
 * Every answer is checked before a byte is trusted: only 206 with the
 * expected Content-Range (or 200 for a whole-file read from offset 0),
 * exactly len bytes, never more than buf holds; with a snapshot to check
 * (remote_fetch_verified) also the ETag and the total size, before the
 * first body byte is taken. A mismatch (another version of the file), a
 * 409 (the owner cannot read that file) or a 503 (the owner is short of
 * memory) is an answer about one file: the caller reads SOURCE, the peer
 * stays up. Any other failure marks the peer down for a back-off period
 * that doubles while probes keep failing; during it calls fail at once
 * with -EHOSTDOWN so the caller reads SOURCE. When it expires, one caller
 * (and only one) probes the peer again.
 */
#include "remote/peer/remote_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "common/deadline.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/text.h"
#include "common/hash.h"
#include "remote/peer/auth.h"
#include "remote/http.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 500
#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_BACKOFF_MIN_MS 1000
#define DEFAULT_BACKOFF_MAX_MS 30000
#define DEFAULT_SLOW_STREAK 3
/* An answer slower than this many times SOURCE is slow whatever slow_ms. */
#define SLOW_SOURCE_FACTOR 4

struct node_state {
	_Atomic int64_t down_until_ms; /* 0 while up; monotonic ms otherwise */
	_Atomic unsigned backoff_ms;   /* current period, 0 while up */
	_Atomic bool probing;	       /* a re-probe is in flight */
	_Atomic unsigned slow_run;     /* slow answers in a row */
	_Atomic bool slow;	       /* down for answering slowly, not for failing */
	pthread_mutex_t lock;	       /* serializes state changes only */
};

struct remote_client {
	const struct remote_peers *peers;
	unsigned count;
	struct remote_client_config cfg;
	char *secret; /* signs each request (remote/peer/auth.h); NULL without one */
	size_t secret_len;
	uint64_t auth_id;		 /* this client's random name in its signatures */
	_Atomic uint64_t auth_counter; /* its requests, numbered */
	struct remote_http *pool; /* cfg.pool, or own_pool */
	struct remote_http *own_pool;
	_Atomic uint64_t fetches;
	_Atomic uint64_t bytes;
	_Atomic uint64_t errors;
	_Atomic uint64_t skipped;
	_Atomic uint64_t mismatches;
	_Atomic uint64_t unavailable;
	_Atomic uint64_t slow_answers;
	_Atomic uint64_t slow_downs;
	struct node_state node[];
};

/* One transfer's state, seen by the curl callbacks. */
struct xfer {
	CURL *easy;
	char *buf;
	size_t len;
	size_t got;
	uint64_t off;
	long status;
	bool status_checked;
	bool bad_status;
	bool overflow;
	bool have_range;
	uint64_t range_first, range_last;
	bool have_total;
	uint64_t range_total; /* after the '/' of Content-Range */
	const struct remote_expect *exp;
	bool mismatch; /* the answer is about another snapshot */
	bool have_etag;
	bool etag_too_long;
	char etag[REMOTE_MAX_ETAG + 1];
	char mac[REMOTE_REPLY_MAC_HEX + 1]; /* X-Coordfs-Reply-MAC, "" when absent */
};

#define STAT_ADD(c, field, v) atomic_fetch_add_explicit(&(c)->field, (v), memory_order_relaxed)


/* ---- handles ------------------------------------------------------------ */

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata);
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata);

/* A handle of the pool for one fetch, set up for peers: waits up to the
 * request timeout for one to come back. NULL with *rc = -EBUSY (timed out)
 * or -ENOMEM. */
static CURL *handle_get(struct remote_client *c, int *rc)
{
	CURL *e = remote_http_get_wait(c->pool, c->cfg.timeout_ms, rc);
	/* Each handle keeps a connection to every peer it has talked to, up to
	 * REMOTE_CLIENT_CONNS_PER_HANDLE (libcurl closes the least recently
	 * used beyond): in a large cluster, 32 handles times every peer would
	 * be more sockets than a process may open. */
	long maxconn = c->count > 5 ? (long)c->count + 2 : 7;

	if (maxconn > REMOTE_CLIENT_CONNS_PER_HANDLE)
		maxconn = REMOTE_CLIENT_CONNS_PER_HANDLE;

	if (!e)
		return NULL;
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->cfg.connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->cfg.timeout_ms);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(e, CURLOPT_MAXCONNECTS, maxconn);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	return e;
}

static void wipe_free(char *s, size_t len)
{
	if (s)
		explicit_bzero(s, len);
	free(s);
}

int remote_client_create(const struct remote_peers *peers, const char *secret,
			 const struct remote_client_config *cfg, struct remote_client **out)
{
	unsigned n = remote_peers_count(peers);
	struct remote_client *c;

	*out = NULL;
	if (secret && strlen(secret) > REMOTE_MAX_SECRET)
		return -EINVAL;
	c = calloc(1, sizeof(*c) + n * sizeof(c->node[0]));
	if (!c)
		return -ENOMEM;
	c->peers = peers;
	c->count = n;
	if (cfg)
		c->cfg = *cfg;
	if (!c->cfg.connect_timeout_ms)
		c->cfg.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
	if (!c->cfg.timeout_ms)
		c->cfg.timeout_ms = DEFAULT_TIMEOUT_MS;
	if (!c->cfg.backoff_min_ms)
		c->cfg.backoff_min_ms = DEFAULT_BACKOFF_MIN_MS;
	if (!c->cfg.backoff_max_ms)
		c->cfg.backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	if (!c->cfg.max_handles)
		c->cfg.max_handles = REMOTE_CLIENT_MAX_HANDLES;
	if (!c->cfg.slow_ms)
		c->cfg.slow_ms = c->cfg.timeout_ms / 5;
	if (!c->cfg.slow_streak)
		c->cfg.slow_streak = DEFAULT_SLOW_STREAK;
	if (c->cfg.backoff_max_ms < c->cfg.backoff_min_ms)
		c->cfg.backoff_max_ms = c->cfg.backoff_min_ms;
	if (secret) {
		c->secret_len = strlen(secret);
		c->secret = strdup(secret);
		if (!c->secret || getrandom(&c->auth_id, sizeof(c->auth_id), 0) !=
					  (ssize_t)sizeof(c->auth_id)) {
			wipe_free(c->secret, c->secret_len);
			free(c);
			return -ENOMEM;
		}
	}
	c->pool = c->cfg.pool;
	if (!c->pool) {
		int rc = remote_http_create(c->cfg.max_handles, &c->own_pool);
		if (rc < 0) {
			wipe_free(c->secret, c->secret_len);
			free(c);
			return rc;
		}
		c->pool = c->own_pool;
	}
	for (unsigned k = 0; k < n; k++)
		pthread_mutex_init(&c->node[k].lock, NULL);
	*out = c;
	return 0;
}

void remote_client_destroy(struct remote_client *c)
{
	if (!c)
		return;
	remote_http_destroy(c->own_pool);
	for (unsigned k = 0; k < c->count; k++)
		pthread_mutex_destroy(&c->node[k].lock);
	wipe_free(c->secret, c->secret_len);
	free(c);
}

/* ---- back-off ------------------------------------------------------------ */

/* 0 when a request may go to node k (*probe: it is the one re-probe),
 * -EHOSTDOWN while it is in back-off or another probe is in flight. */
static int node_gate(struct remote_client *c, unsigned k, bool *probe)
{
	struct node_state *ns = &c->node[k];
	int64_t until = atomic_load_explicit(&ns->down_until_ms, memory_order_acquire);

	*probe = false;
	if (until == 0)
		return 0;
	if (deadline_now_ms() < until)
		return -EHOSTDOWN;
	if (atomic_exchange_explicit(&ns->probing, true, memory_order_acq_rel))
		return -EHOSTDOWN;
	*probe = true;
	return 0;
}

/* Node k goes down (ns->lock held): for backoff_min_ms, or on a failed
 * re-probe for twice its last period (up to backoff_max_ms). slow: for
 * answering slowly rather than for failing. The period, in ms. */
static unsigned node_down_locked(struct remote_client *c, struct node_state *ns, bool probe,
				 bool slow)
{
	unsigned b = atomic_load_explicit(&ns->backoff_ms, memory_order_relaxed);

	if (probe)
		b = b ? (b > c->cfg.backoff_max_ms / 2 ? c->cfg.backoff_max_ms : b * 2)
		      : c->cfg.backoff_min_ms;
	else
		b = c->cfg.backoff_min_ms;
	atomic_store_explicit(&ns->slow_run, 0, memory_order_relaxed);
	atomic_store_explicit(&ns->slow, slow, memory_order_relaxed);
	atomic_store_explicit(&ns->backoff_ms, b, memory_order_relaxed);
	atomic_store_explicit(&ns->down_until_ms, deadline_now_ms() + b, memory_order_release);
	if (probe)
		atomic_store_explicit(&ns->probing, false, memory_order_release);
	return b;
}

static void node_failed(struct remote_client *c, unsigned k, bool probe, int rc)
{
	struct node_state *ns = &c->node[k];
	const char *url = remote_peers_url(c->peers, k);

	pthread_mutex_lock(&ns->lock);
	if (probe) {
		unsigned b = node_down_locked(c, ns, true, false);

		log_debug("peer %s still down (%s), next try in %u ms", url, strerror(-rc), b);
	} else if (atomic_load_explicit(&ns->down_until_ms, memory_order_relaxed) == 0) {
		unsigned b = node_down_locked(c, ns, false, false);

		log_warn("peer %s marked down (%s), reading its files from SOURCE for %u ms", url,
			 strerror(-rc), b);
	}
	pthread_mutex_unlock(&ns->lock);
}

/* Whether an answer (len bytes of body, 0 for one about one file) that
 * took ms is slow (see remote_client_config.slow_ms). */
static bool answer_slow(const struct remote_client *c, size_t len, const struct remote_expect *exp,
			int64_t ms)
{
	uint64_t limit = c->cfg.slow_ms + (uint64_t)len / (64 * 1024);

	if (exp && (uint64_t)exp->source_ms * SLOW_SOURCE_FACTOR > limit)
		limit = (uint64_t)exp->source_ms * SLOW_SOURCE_FACTOR;
	return ms > 0 && (uint64_t)ms > limit;
}

/* A slow answer from node k: the run of them grows, and at
 * slow_streak (or on the re-probe of a node already down for it) the node
 * goes down for a back-off period as a failed one does, so readers stop
 * waiting on it and read SOURCE. */
static void node_slow(struct remote_client *c, unsigned k, bool probe, int64_t ms)
{
	struct node_state *ns = &c->node[k];
	const char *url = remote_peers_url(c->peers, k);

	STAT_ADD(c, slow_answers, 1);
	pthread_mutex_lock(&ns->lock);
	unsigned run = atomic_fetch_add_explicit(&ns->slow_run, 1, memory_order_relaxed) + 1;

	if (probe) {
		unsigned b = node_down_locked(c, ns, true, true);

		STAT_ADD(c, slow_downs, 1);
		log_debug("peer %s still slow (%" PRId64 " ms), next try in %u ms", url, ms, b);
	} else if (run >= c->cfg.slow_streak &&
		   atomic_load_explicit(&ns->down_until_ms, memory_order_relaxed) == 0) {
		unsigned b = node_down_locked(c, ns, false, true);

		STAT_ADD(c, slow_downs, 1);
		log_warn("peer %s answered %u reads in a row slowly (the last in %" PRId64
			 " ms), reading its files from SOURCE for %u ms",
			 url, run, ms, b);
	}
	pthread_mutex_unlock(&ns->lock);
}

static void node_answered(struct remote_client *c, unsigned k, bool probe)
{
	struct node_state *ns = &c->node[k];

	atomic_store_explicit(&ns->slow_run, 0, memory_order_relaxed);
	if (!probe)
		return;
	pthread_mutex_lock(&ns->lock);
	atomic_store_explicit(&ns->slow, false, memory_order_relaxed);
	atomic_store_explicit(&ns->backoff_ms, 0, memory_order_relaxed);
	atomic_store_explicit(&ns->down_until_ms, 0, memory_order_release);
	atomic_store_explicit(&ns->probing, false, memory_order_release);
	pthread_mutex_unlock(&ns->lock);
	log_info("peer %s is up again", remote_peers_url(c->peers, k));
}

/* Node k answered (a body of body_len bytes, or an answer about one file)
 * in took ms: slow or not. A handoff has its own short timeout and is no
 * read of the node's files: it says nothing of how fast reads are. */
static void node_timed(struct remote_client *c, unsigned k, bool probe,
		       const struct remote_expect *exp, size_t body_len, int64_t took)
{
	if (!(exp && exp->held_only) && answer_slow(c, body_len, exp, took))
		node_slow(c, k, probe, took);
	else
		node_answered(c, k, probe);
}

bool remote_node_up(const struct remote_client *c, unsigned node)
{
	if (!c || node >= c->count)
		return false;
	return atomic_load_explicit(&c->node[node].down_until_ms, memory_order_relaxed) == 0;
}

bool remote_node_slow(const struct remote_client *c, unsigned node)
{
	if (!c || node >= c->count)
		return false;
	return atomic_load_explicit(&c->node[node].down_until_ms, memory_order_relaxed) != 0 &&
	       atomic_load_explicit(&c->node[node].slow, memory_order_relaxed);
}

unsigned remote__node_backoff_ms(const struct remote_client *c, unsigned node)
{
	if (!c || node >= c->count)
		return 0;
	return atomic_load_explicit(&c->node[node].backoff_ms, memory_order_relaxed);
}

const char *remote_node_url(const struct remote_client *c, unsigned node)
{
	return c ? remote_peers_url(c->peers, node) : NULL;
}

void remote_client_get_stats(const struct remote_client *c, struct remote_client_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!c)
		return;
	out->fetches = atomic_load_explicit(&c->fetches, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed);
	out->errors = atomic_load_explicit(&c->errors, memory_order_relaxed);
	out->skipped = atomic_load_explicit(&c->skipped, memory_order_relaxed);
	out->mismatches = atomic_load_explicit(&c->mismatches, memory_order_relaxed);
	out->unavailable = atomic_load_explicit(&c->unavailable, memory_order_relaxed);
	out->slow_answers = atomic_load_explicit(&c->slow_answers, memory_order_relaxed);
	out->slow_downs = atomic_load_explicit(&c->slow_downs, memory_order_relaxed);
}

void remote_client_inherit(struct remote_client *dst, const struct remote_client *src)
{
	struct remote_client_stats st;

	if (!dst || !src)
		return;
	remote_client_get_stats(src, &st);
	STAT_ADD(dst, fetches, st.fetches);
	STAT_ADD(dst, bytes, st.bytes);
	STAT_ADD(dst, errors, st.errors);
	STAT_ADD(dst, skipped, st.skipped);
	STAT_ADD(dst, mismatches, st.mismatches);
	STAT_ADD(dst, unavailable, st.unavailable);
	STAT_ADD(dst, slow_answers, st.slow_answers);
	STAT_ADD(dst, slow_downs, st.slow_downs);
	/* A node that stays keeps its back-off: a membership change must not
	 * send every reader to a peer known to be down. */
	for (unsigned k = 0; k < dst->count; k++) {
		int j = remote_peers_find(src->peers, remote_peers_url(dst->peers, k));

		if (j < 0)
			continue;
		atomic_store(&dst->node[k].down_until_ms, atomic_load(&src->node[j].down_until_ms));
		atomic_store(&dst->node[k].backoff_ms, atomic_load(&src->node[j].backoff_ms));
		atomic_store(&dst->node[k].slow, atomic_load(&src->node[j].slow));
	}
}

/* ---- one transfer --------------------------------------------------------- */

static bool status_acceptable(const struct xfer *x, long status)
{
	return status == 206 || (status == 200 && x->off == 0);
}

/* Whether the answer's headers name the snapshot the caller expects: the
 * same ETag (strong comparison) and the same total size (Content-Range's,
 * or for a 200 the whole body, which then is exactly what was asked). */
static bool snapshot_matches(const struct xfer *x)
{
	const struct remote_expect *e = x->exp;

	if (e->etag && (!x->have_etag || x->etag_too_long || strcmp(x->etag, e->etag) != 0))
		return false;
	if (x->status == 206)
		return x->have_total && x->range_total == e->size;
	/* 200: the whole file; its length is the total. (A whole file of
	 * the right size sent for a smaller range is a framing error, caught
	 * as an overflow, not another version.) */
	curl_off_t cl = -1;

	if (curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) != CURLE_OK ||
	    cl < 0)
		return x->len == e->size; /* no length: only a body of len fits */
	return (uint64_t)cl == e->size;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct xfer *x = userdata;
	size_t n = size * nmemb;

	if (!x->status_checked) {
		long status = 0;

		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
		x->status_checked = true;
		x->status = status;
		x->bad_status = !status_acceptable(x, status);
		/* The headers are complete: check the snapshot before a byte. */
		if (!x->bad_status && x->exp && !snapshot_matches(x))
			x->mismatch = true;
	}
	if (x->bad_status || x->mismatch)
		return 0; /* nothing of an error body or another version lands in buf */
	if (n > x->len - x->got) {
		x->overflow = true;
		return 0; /* aborts the transfer: never write past buf */
	}
	memcpy(x->buf + x->got, ptr, n);
	x->got += n;
	return n;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct xfer *x = userdata;
	size_t n = size * nmemb;
	static const char name[] = "content-range:";
	static const char etag[] = "etag:";
	static const char macname[] = REMOTE_REPLY_MAC_HEADER ":";
	char line[128];

	if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
		/* a new response (after 100 Continue) */
		x->have_range = x->have_total = x->have_etag = x->etag_too_long = false;
		x->mac[0] = '\0';
		return n;
	}
	if (n >= sizeof(macname) - 1 && strncasecmp(ptr, macname, sizeof(macname) - 1) == 0) {
		const char *v = ptr + sizeof(macname) - 1, *end = ptr + n;

		while (v < end && (*v == ' ' || *v == '\t'))
			v++;
		while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
			end--;
		if (end - v == REMOTE_REPLY_MAC_HEX) {
			memcpy(x->mac, v, REMOTE_REPLY_MAC_HEX);
			x->mac[REMOTE_REPLY_MAC_HEX] = '\0';
		}
		return n;
	}
	if (n >= sizeof(etag) - 1 && strncasecmp(ptr, etag, sizeof(etag) - 1) == 0) {
		const char *v = ptr + sizeof(etag) - 1, *end = ptr + n;

		while (v < end && (*v == ' ' || *v == '\t'))
			v++;
		while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' ||
				   end[-1] == '\t'))
			end--;
		if ((size_t)(end - v) > REMOTE_MAX_ETAG) {
			x->etag_too_long = true;
		} else {
			memcpy(x->etag, v, (size_t)(end - v));
			x->etag[end - v] = '\0';
			x->have_etag = true;
		}
		return n;
	}
	if (n < sizeof(name) - 1 || n >= sizeof(line) || strncasecmp(ptr, name, sizeof(name) - 1))
		return n;
	memcpy(line, ptr + sizeof(name) - 1, n - (sizeof(name) - 1));
	line[n - (sizeof(name) - 1)] = '\0';
	char *p = line, *end;

	while (*p == ' ' || *p == '\t')
		p++;
	if (strncasecmp(p, "bytes ", 6) != 0)
		return n;
	p += 6;
	if (*p < '0' || *p > '9')
		return n;
	errno = 0;
	unsigned long long a = strtoull(p, &end, 10);

	if (errno || *end != '-' || end[1] < '0' || end[1] > '9')
		return n;
	unsigned long long b = strtoull(end + 1, &end, 10);

	if (errno || *end != '/')
		return n;
	x->range_first = a;
	x->range_last = b;
	x->have_range = true;
	if (end[1] >= '0' && end[1] <= '9') {
		unsigned long long t = strtoull(end + 1, &end, 10);

		if (!errno && (*end == '\r' || *end == '\n' || *end == '\0')) {
			x->range_total = t;
			x->have_total = true;
		}
	}
	return n;
}

/* Whether a file answer carries the MAC only a node knowing the secret
 * can make (remote/peer/auth.h) over what it says and the body received. */
static bool reply_signed(const struct remote_client *c, const struct xfer *x,
			 const char *authorization)
{
	char want[REMOTE_REPLY_MAC_HEX + 1];
	uint64_t start = 0, total = x->got;

	if (!x->mac[0])
		return false;
	if (x->status == 206) {
		start = x->range_first;
		total = x->range_total;
	}
	if (remote_auth_reply_mac(c->secret, c->secret_len, authorization, (unsigned)x->status,
				  x->have_etag ? x->etag : "", start, x->got, total, x->buf,
				  x->got, want) < 0)
		return false;
	return hash_ct_compare((const unsigned char *)x->mac, (const unsigned char *)want,
			       REMOTE_REPLY_MAC_HEX) == 0;
}

static int curl_errno(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_GOT_NOTHING:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
		return -ECONNRESET;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_PARTIAL_FILE:
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_WRITE_ERROR:
		return -EPROTO;
	default:
		return -EIO;
	}
}

static int status_errno(long status)
{
	if (status == 401 || status == 403)
		return -EACCES;
	if (status == 404)
		return -ENOENT;
	if (status == 412)
		return -ESTALE;
	if (status == 409)
		return -EREMOTEIO;
	if (status == 503)
		return -EBUSY;
	if (status >= 500)
		return -EIO;
	return -EPROTO;
}

ssize_t remote_fetch_verified(struct remote_client *c, unsigned node, const char *relpath,
			      uint64_t off, size_t len, const struct remote_expect *exp,
			      void *buf)
{
	struct xfer x = {0};
	struct strbuf url, im;
	struct curl_slist *headers = NULL;
	CURL *h;
	char range[48];
	bool probe;
	CURLcode cc;
	int rc;

	if (!c || node >= c->count || !relpath || (len && !buf) || len > SSIZE_MAX ||
	    off > UINT64_MAX - len || remote__relpath_check(relpath) != 0 ||
	    (exp && exp->etag && strlen(exp->etag) > REMOTE_MAX_ETAG))
		return -EINVAL;
	if (len == 0)
		return 0;
	if (exp && off + len > exp->size)
		return -EINVAL;
	if (node_gate(c, node, &probe) != 0) {
		STAT_ADD(c, skipped, 1);
		return -EHOSTDOWN;
	}
	h = handle_get(c, &rc);
	if (!h) {
		if (probe)
			atomic_store_explicit(&c->node[node].probing, false, memory_order_release);
		if (rc == -EBUSY)
			STAT_ADD(c, unavailable, 1);
		return rc;
	}
	strbuf_init(&url);
	strbuf_init(&im);
	strbuf_puts(&url, remote_peers_url(c->peers, node));
	size_t target = url.len;
	strbuf_puts(&url, "/v1/files/");
	text_pct_encode(&url, relpath, strlen(relpath), true);
	snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, off, off + len - 1);
	bool signed_ok = !c->secret;
	char hdr[sizeof("Authorization: ") + REMOTE_AUTH_HEADER_MAX] = "";
	if (c->secret && !url.failed) {
		char rv[64];
		struct timespec now;

		clock_gettime(CLOCK_REALTIME, &now);
		snprintf(rv, sizeof(rv), "bytes=%s", range);
		strcpy(hdr, "Authorization: ");
		signed_ok = remote_auth_sign(c->secret, c->secret_len, "GET", url.buf + target, rv,
					     now.tv_sec, c->auth_id,
					     atomic_fetch_add(&c->auth_counter, 1),
					     hdr + strlen(hdr), REMOTE_AUTH_HEADER_MAX) == 0 &&
			    (headers = curl_slist_append(headers, hdr)) != NULL;
	}
	if (exp && exp->etag) {
		strbuf_puts(&im, "If-Match: ");
		strbuf_puts(&im, exp->etag);
		if (!im.failed && signed_ok)
			headers = curl_slist_append(headers, im.buf);
	}
	if (exp && exp->held_only && signed_ok) {
		struct curl_slist *more = curl_slist_append(headers, REMOTE_FORWARDED_HEADER ": held");

		if (more)
			headers = more;
		else
			signed_ok = false;
	}
	if (url.failed || im.failed || !signed_ok || (exp && exp->etag && !headers)) {
		strbuf_fini(&url);
		strbuf_fini(&im);
		curl_slist_free_all(headers);
		remote_http_put(c->pool, h);
		if (probe)
			atomic_store_explicit(&c->node[node].probing, false, memory_order_release);
		return -ENOMEM;
	}
	x.easy = h;
	x.buf = buf;
	x.len = len;
	x.off = off;
	x.exp = exp;
	curl_easy_setopt(h, CURLOPT_URL, url.buf);
	if (exp && exp->timeout_ms) /* handle_get sets the default at every checkout */
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)exp->timeout_ms);
	curl_easy_setopt(h, CURLOPT_RANGE, range);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
	STAT_ADD(c, fetches, 1);
	int64_t t0 = deadline_now_ms();
	cc = curl_easy_perform(h);
	int64_t took = deadline_now_ms() - t0;
	if (!x.status_checked)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x.status);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, NULL);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	remote_http_put(c->pool, h);
	curl_slist_free_all(headers);
	strbuf_fini(&im);

	if (x.bad_status || (cc == CURLE_OK && !status_acceptable(&x, x.status)))
		rc = status_errno(x.status);
	else if (x.mismatch)
		rc = -ESTALE;
	else if (x.overflow)
		rc = -EPROTO;
	else if (cc != CURLE_OK)
		rc = curl_errno(cc);
	else if (x.got != len)
		rc = -EPROTO;
	else if (x.status == 206 &&
		 (!x.have_range || x.range_first != off || x.range_last != off + len - 1))
		rc = -EPROTO;
	else if (exp && !snapshot_matches(&x)) /* an empty body skips on_write */
		rc = -ESTALE;
	else if (c->secret && !reply_signed(c, &x, hdr + strlen("Authorization: ")))
		rc = -EBADMSG;
	else
		rc = 0;

	if (rc == 0) {
		STAT_ADD(c, bytes, len);
		node_timed(c, node, probe, exp, len, took);
		strbuf_fini(&url);
		return (ssize_t)len;
	}
	/* A handoff that finds nothing (not held, or the node not up yet) is
	 * counted by the caller (membership.handoff_misses), not as an error. */
	if (!(exp && exp->held_only))
		STAT_ADD(c, errors, 1);
	if (rc == -ESTALE)
		STAT_ADD(c, mismatches, 1);
	if (rc == -EREMOTEIO || rc == -EBUSY)
		STAT_ADD(c, unavailable, 1);
	log_debug("peer %s: GET %s [%s] failed: %s (HTTP %ld, %s, %zu of %zu bytes)",
		  remote_peers_url(c->peers, node), url.buf, range, strerror(-rc), x.status,
		  curl_easy_strerror(cc), x.got, len);
	if (rc == -ENOENT || rc == -ESTALE || rc == -EREMOTEIO || rc == -EBUSY) {
		/* The peer answered properly about this one file: no reason to
		 * stop asking it for other files, unless it keeps answering
		 * slowly (a 412 that took seconds costs a reader as much). */
		node_timed(c, node, probe, exp, 0, took);
	} else if (rc == -ENOMEM || (exp && exp->held_only)) {
		/* A handoff is a chance, not a need: its failure (a node still
		 * starting, say) must not send every reader to SOURCE for a
		 * back-off period. Reads mark nodes down. */
		if (probe)
			atomic_store_explicit(&c->node[node].probing, false, memory_order_release);
	} else {
		node_failed(c, node, probe, rc);
	}
	strbuf_fini(&url);
	return rc;
}

ssize_t remote_fetch(struct remote_client *c, unsigned node, const char *relpath, uint64_t off,
		     size_t len, void *buf)
{
	return remote_fetch_verified(c, node, relpath, off, len, NULL, buf);
}
