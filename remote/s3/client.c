/* SPDX-License-Identifier: MIT */
/*
 * The S3 client (remote/s3.h): configuration and endpoint resolution,
 * request signing by libcurl (CURLOPT_AWS_SIGV4, never by hand), the
 * retry policy, and ranged GETs checked against the listed snapshot of
 * the object. Listing lives in list.c, credentials in cred.c.
 *
 * A GET is trusted only when it is 206 with exactly the Content-Range
 * asked (total = the listed size) or 200 for a whole-object read, carries
 * the listed ETag, and delivers exactly len bytes; the write callback never
 * writes past the caller's buffer, and error bodies never reach it.
 */
#include "remote/s3/s3_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/deadline.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/text.h"
#include "remote/http.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 3000
#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_MAX_RETRIES 6
#define DEFAULT_BACKOFF_BASE_MS 100
#define DEFAULT_BACKOFF_CAP_MS 5000

#define STAT_ADD(s, field, v) atomic_fetch_add_explicit(&(s)->field, (v), memory_order_relaxed)

/* Bucket names as S3 and its clones accept them (legacy upper case and
 * '_' included): nothing that could change the URL's meaning. */
static bool bucket_ok(const char *b)
{
	size_t n = strlen(b);

	if (n < 3 || n > 255)
		return false;
	for (const char *p = b; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
			return false;
	return true;
}

static bool region_ok(const char *r)
{
	size_t n = strlen(r);

	if (n == 0 || n >= S3_MAX_REGION)
		return false;
	for (const char *p = r; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	return true;
}

/* Split "http(s)://host[:port][/]" into scheme and authority. */
static int parse_endpoint(const char *ep, char *scheme, size_t scap, char *auth, size_t acap)
{
	const char *p;

	if (!strncasecmp(ep, "http://", 7)) {
		snprintf(scheme, scap, "http");
		p = ep + 7;
	} else if (!strncasecmp(ep, "https://", 8)) {
		snprintf(scheme, scap, "https");
		p = ep + 8;
	} else {
		return -EINVAL;
	}
	size_t n = strcspn(p, "/?#");

	if (n == 0 || n >= acap || strchr(p + n, '?') || strchr(p + n, '#') ||
	    (p[n] == '/' && p[n + 1] != '\0') || memchr(p, '@', n))
		return -EINVAL;
	memcpy(auth, p, n);
	auth[n] = '\0';
	return 0;
}

int remote_s3_create(const struct remote_s3_config *cfg, struct remote_http *pool,
		     struct remote_s3 **out, char *err, size_t errlen)
{
	struct remote_s3 *s;
	char scheme[8], host[512], region[S3_MAX_REGION] = "";
	struct strbuf sb;
	int r;

	if (!cfg || !cfg->bucket || !pool || !out) {
		remote__s3_set_err(err, errlen, "s3: bad arguments");
		return -EINVAL;
	}
	if (!bucket_ok(cfg->bucket)) {
		remote__s3_set_err(err, errlen, "s3://%.64s: not a valid bucket name", cfg->bucket);
		return -EINVAL;
	}
	if (cfg->prefix && (cfg->prefix[0] == '/' || strlen(cfg->prefix) >= REMOTE_S3_MAX_KEY)) {
		remote__s3_set_err(err, errlen, "s3://%s: bad prefix", cfg->bucket);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->stop_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->stop_lock, NULL);
	s->http = pool;
	s->connect_timeout_ms = cfg->connect_timeout_ms ?: DEFAULT_CONNECT_TIMEOUT_MS;
	s->timeout_ms = cfg->timeout_ms ?: DEFAULT_TIMEOUT_MS;
	s->max_retries = cfg->max_retries ?: DEFAULT_MAX_RETRIES;
	s->backoff_base_ms = cfg->backoff_base_ms ?: DEFAULT_BACKOFF_BASE_MS;
	s->backoff_cap_ms = cfg->backoff_cap_ms ?: DEFAULT_BACKOFF_CAP_MS;
	s->list_timeout_ms = cfg->list_timeout_ms;
	s->list_max_keys = cfg->list_max_keys;
	s->list_max_bytes = cfg->list_max_bytes;
	s->bucket = strdup(cfg->bucket);
	if (!s->bucket) {
		r = -ENOMEM;
		goto fail;
	}
	const char *pfx = cfg->prefix ? cfg->prefix : "";
	size_t plen = strlen(pfx);

	if (asprintf(&s->prefix, "%s%s", pfx, plen && pfx[plen - 1] != '/' ? "/" : "") < 0) {
		s->prefix = NULL;
		r = -ENOMEM;
		goto fail;
	}

	if (text_env("AWS_CA_BUNDLE") && !(s->ca_bundle = strdup(text_env("AWS_CA_BUNDLE")))) {
		r = -ENOMEM;
		goto fail;
	}
	/* Credentials first: the profile may name the region. */
	r = remote__s3_cred_create(cfg, pool, region, sizeof(region), &s->cred, err, errlen);
	if (r)
		goto fail;
	const char *reg = cfg->region && *cfg->region ? cfg->region
			  : text_env("AWS_REGION")	      ? text_env("AWS_REGION")
			  : text_env("AWS_DEFAULT_REGION") ? text_env("AWS_DEFAULT_REGION")
			  : region[0]		      ? region
						      : "us-east-1";
	if (!region_ok(reg)) {
		remote__s3_set_err(err, errlen, "s3://%s: bad region '%.64s'", cfg->bucket, reg);
		r = -EINVAL;
		goto fail;
	}
	snprintf(s->region, sizeof(s->region), "%s", reg);
	if (asprintf(&s->sigv4, "aws:amz:%s:s3", s->region) < 0) {
		s->sigv4 = NULL;
		r = -ENOMEM;
		goto fail;
	}

	bool virtual_host;

	if (cfg->endpoint && *cfg->endpoint) {
		if (parse_endpoint(cfg->endpoint, scheme, sizeof(scheme), host, sizeof(host))) {
			remote__s3_set_err(
			    err, errlen,
			    "--endpoint=%.200s: expected http://HOST[:PORT] or https://HOST[:PORT]",
			    cfg->endpoint);
			r = -EINVAL;
			goto fail;
		}
		virtual_host = cfg->addressing == REMOTE_S3_ADDR_VIRTUAL;
	} else {
		snprintf(scheme, sizeof(scheme), "https");
		snprintf(host, sizeof(host), "s3.%s.amazonaws.com", s->region);
		/* a dotted bucket would not match the wildcard certificate */
		virtual_host = cfg->addressing == REMOTE_S3_ADDR_VIRTUAL ||
			       (cfg->addressing == REMOTE_S3_ADDR_AUTO && !strchr(s->bucket, '.'));
	}
	strbuf_init(&sb);
	if (virtual_host)
		strbuf_printf(&sb, "%s://%s.%s/", scheme, s->bucket, host);
	else
		strbuf_printf(&sb, "%s://%s/%s/", scheme, host, s->bucket);
	if (sb.failed) {
		strbuf_fini(&sb);
		r = -ENOMEM;
		goto fail;
	}
	s->bucket_url = sb.buf;
	s->base_url = strdup(sb.buf);
	if (!s->base_url) {
		r = -ENOMEM;
		goto fail;
	}
	log_info("s3://%s/%s: %s, region %s, %s credentials", s->bucket, s->prefix, s->bucket_url,
		 s->region,
		 (const char *[]){"no (anonymous)", "environment", "profile", "container",
				  "instance-role", "credential_process"}[remote__s3_cred_source(s->cred)]);
	*out = s;
	return 0;
fail:
	remote_s3_destroy(s);
	return r;
}

void remote_s3_destroy(struct remote_s3 *s)
{
	if (!s)
		return;
	remote__s3_cred_destroy(s->cred);
	free(s->bucket);
	free(s->prefix);
	free(s->base_url);
	free(s->bucket_url);
	free(s->sigv4);
	free(s->ca_bundle);
	pthread_cond_destroy(&s->stop_cond);
	pthread_mutex_destroy(&s->stop_lock);
	free(s);
}

/* Set from a signal handler: a lock-free atomic store, nothing else. */
static atomic_bool s3_stop_all;

void remote_s3_stop_all(void)
{
	atomic_store_explicit(&s3_stop_all, true, memory_order_relaxed);
}

void remote_s3_cancel(struct remote_s3 *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->stop_lock);
	atomic_store_explicit(&s->stop, true, memory_order_relaxed);
	pthread_cond_broadcast(&s->stop_cond);
	pthread_mutex_unlock(&s->stop_lock);
}

bool remote__s3_stopped(struct remote_s3 *s)
{
	return atomic_load_explicit(&s->stop, memory_order_relaxed) ||
	       atomic_load_explicit(&s3_stop_all, memory_order_relaxed);
}

/* curl calls this about once a second even while nothing arrives, and
 * more often while bytes move: the one place a blocked transfer can be
 * ended from outside. */
static int guard_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		    curl_off_t ulnow)
{
	struct s3_guard *g = arg;

	(void)dltotal;
	(void)ultotal;
	(void)ulnow;
	if (remote__s3_stopped(g->s)) {
		g->why = S3_ABORT_STOP;
		return 1;
	}
	if (g->deadline_ms && (dlnow == 0 || g->whole) && deadline_now_ms() >= g->deadline_ms) {
		g->why = S3_ABORT_DEADLINE;
		return 1;
	}
	return 0;
}

void remote__s3_guard(void *easy, struct s3_guard *g)
{
	g->why = S3_ABORT_NONE;
	curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, guard_cb);
	curl_easy_setopt(easy, CURLOPT_XFERINFODATA, g);
	curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
}

int remote__s3_easy(struct remote_s3 *s, struct curl_slist **hdrs, void **easy)
{
	CURL *e;
	struct curl_slist *n;
	struct s3_creds c;
	bool sign = remote__s3_cred_source(s->cred) != S3_CRED_NONE;

	/* Credentials first, so that the pooled handle is held only for the
	 * request itself. */
	if (sign) {
		int r = remote__s3_cred_get(s->cred, &c);

		if (r)
			return r;
	}
	e = remote_http_get(s->http);
	if (!e) {
		explicit_bzero(&c, sizeof(c));
		return -ENOMEM;
	}
	curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	/* keys are sent as listed: no "." or ".." folding by curl */
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)s->connect_timeout_ms);
	/* No cap on a whole transfer (a 1 GiB unit on a slow link must
	 * complete): a request that stalls, under 1 KiB/s for timeout_ms, is
	 * dropped and retried instead. */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
			 (long)(s->timeout_ms < 1000 ? 1 : (s->timeout_ms + 999) / 1000));
	if (s->ca_bundle)
		curl_easy_setopt(e, CURLOPT_CAINFO, s->ca_bundle);
	/* The pool's handles use no proxy (peers, credential endpoints); the
	 * bucket honours http_proxy, https_proxy, all_proxy and no_proxy, as
	 * the AWS tools do. */
	curl_easy_setopt(e, CURLOPT_PROXY, NULL);
	*easy = e;
	if (!sign)
		return 0;
	n = curl_slist_append(*hdrs, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (!n)
		goto nomem;
	*hdrs = n;
	if (c.token[0]) {
		struct strbuf tok;

		strbuf_init(&tok);
		strbuf_printf(&tok, "x-amz-security-token: %s", c.token);
		n = tok.failed ? NULL : curl_slist_append(*hdrs, tok.buf);
		strbuf_fini_wipe(&tok);
		if (!n)
			goto nomem;
		*hdrs = n;
	}
	/* curl copies the strings it is given */
	curl_easy_setopt(e, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(e, CURLOPT_USERNAME, c.access_key);
	curl_easy_setopt(e, CURLOPT_PASSWORD, c.secret_key);
	explicit_bzero(&c, sizeof(c));
	return 0;
nomem:
	explicit_bzero(&c, sizeof(c));
	remote_http_put(s->http, e);
	*easy = NULL;
	return -ENOMEM;
}

bool remote__s3_retryable(int curl_code, long status)
{
	switch (curl_code) {
	case CURLE_OK:
		return status == 500 || status == 502 || status == 503 || status == 504 ||
		       status == 429;
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

/* A signal handler cannot signal the condition variable: sleepers look
 * at remote_s3_stop_all's flag at least this often. */
#define STOP_POLL_MS 200

bool remote__s3_backoff(struct remote_s3 *s, unsigned attempt, int64_t deadline_ms)
{
	unsigned ms = remote_http_backoff_ms(attempt, s->backoff_base_ms, s->backoff_cap_ms);
	int64_t until = deadline_now_ms() + ms;
	bool go = true;

	if (deadline_ms && until >= deadline_ms)
		return false; /* the retry would start too late to help */
	STAT_ADD(s, retries, 1);
	pthread_mutex_lock(&s->stop_lock);
	for (;;) {
		if (remote__s3_stopped(s)) {
			go = false;
			break;
		}
		int64_t left = until - deadline_now_ms();
		if (left <= 0)
			break;
		struct timespec ts = deadline_after_ms(left < STOP_POLL_MS ? (unsigned)left
									 : STOP_POLL_MS);
		pthread_cond_timedwait(&s->stop_cond, &s->stop_lock, &ts);
	}
	pthread_mutex_unlock(&s->stop_lock);
	return go;
}

int remote__s3_status_errno(long status, const char *code)
{
	if (code && !strcmp(code, "NoSuchBucket"))
		return -ENOENT;
	if (status == 403 || status == 401)
		return -EACCES;
	if (status == 404)
		return -ENOENT;
	return -EIO;
}

/* ---- GET -------------------------------------------------------------- */

struct get_xfer {
	char *buf;
	size_t len, got;
	long status;
	bool overflow;
	char etag[REMOTE_S3_MAX_ETAG + 1];
	char content_range[128];
	char errbody[S3_MAX_ERROR_BODY];
	size_t errlen;
	bool errbody_cut; /* the error body went past the cap: not read on */
};

/* Copy a header's value (trimmed, capped; too long leaves it empty). */
static void header_value(const char *line, size_t n, size_t name_len, char *dst, size_t cap)
{
	const char *v = line + name_len;
	size_t vn = n - name_len;

	while (vn && (*v == ' ' || *v == '\t')) {
		v++;
		vn--;
	}
	while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
		vn--;
	if (vn >= cap) {
		dst[0] = '\0';
		return;
	}
	memcpy(dst, v, vn);
	dst[vn] = '\0';
}

void remote__s3_easy_request(void *easy, const char *url, struct curl_slist *hdrs,
			     size_t (*header_cb)(char *, size_t, size_t, void *),
			     size_t (*write_cb)(char *, size_t, size_t, void *), void *ctx,
			     char *cerr)
{
	CURL *e = easy;

	cerr[0] = '\0';
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, ctx);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, ctx);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, cerr);
}

static size_t get_header_cb(char *line, size_t size, size_t n, void *arg)
{
	struct get_xfer *x = arg;
	size_t len = size * n;

	if (remote__s3_status_line(line, len, &x->status)) {
		/* a new response (after a 100 Continue, say): forget the last one */
		x->etag[0] = x->content_range[0] = '\0';
	} else if (len > 5 && !strncasecmp(line, "ETag:", 5)) {
		header_value(line, len, 5, x->etag, sizeof(x->etag));
	} else if (len > 14 && !strncasecmp(line, "Content-Range:", 14)) {
		header_value(line, len, 14, x->content_range, sizeof(x->content_range));
	}
	return len;
}

static size_t get_write_cb(char *data, size_t size, size_t n, void *arg)
{
	struct get_xfer *x = arg;
	size_t len = size * n;

	if (x->status == 200 || x->status == 206) {
		if (len > x->len - x->got) {
			x->overflow = true;
			return 0; /* abort: never past the caller's buffer */
		}
		memcpy(x->buf + x->got, data, len);
		x->got += len;
		return len;
	}
	return remote__s3_errbody_take(x->errbody, &x->errlen, &x->errbody_cut, data, len);
}

size_t remote__s3_errbody_take(char *body, size_t *len, bool *cut, const char *data, size_t n)
{
	size_t room = S3_MAX_ERROR_BODY - 1 - *len;
	size_t take = n < room ? n : room;

	memcpy(body + *len, data, take);
	*len += take;
	if (take < n) {
		*cut = true;
		return 0;
	}
	return n;
}

/* The Code of an S3 error document, "" when there is none. */
static void error_code(const char *body, size_t len, char *code, size_t cap)
{
	struct s3_page p;

	code[0] = '\0';
	if (!len || remote__s3_page_init(&p))
		return;
	remote__s3_page_feed(&p, body, len, true);
	snprintf(code, cap, "%s", p.error_code);
	remote__s3_page_fini(&p);
}

/* Check a finished 200/206 answer against the request and the snapshot.
 * *changed: the answer is about another version of the object (final);
 * otherwise a bad answer may be followed by a good one. */
static const char *get_mismatch(const struct get_xfer *x, const char *etag, uint64_t size,
				uint64_t off, size_t len, bool *changed)
{
	uint64_t first, last, total;

	*changed = true;
	if (!remote__s3_etag_equal(x->etag, etag))
		return "ETag differs from the listing: the object changed";
	if (x->status == 206) {
		*changed = false;
		if (remote__s3_content_range(x->content_range, &first, &last, &total))
			return "206 without a valid Content-Range";
		*changed = true;
		if (total != size)
			return "size differs from the listing: the object changed";
		*changed = false;
		if (first != off || last != off + len - 1)
			return "Content-Range is not the range asked for";
	} else if (off != 0 || len != size) {
		*changed = false;
		return "whole object sent for a partial read";
	}
	*changed = false;
	if (x->got != len)
		return "short body";
	return NULL;
}

/* An error code saying the request's temporary credentials expired
 * (clocks apart, a refresh that came late): worth one refresh. */
static bool token_expired(const char *code)
{
	return !strcmp(code, "ExpiredToken") || !strcmp(code, "TokenRefreshRequired");
}

/* The answer behind this thread's last failed GET, for remote_s3_check_get. */
static _Thread_local struct {
	long status;
	char code[64];
	bool quiet; /* the caller reports a 401/403 itself, in one line */
} last_refusal;

ssize_t remote_s3_get(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
		      uint64_t off, size_t len, void *buf)
{
	return remote_s3_get_by(s, key, etag, size, off, len, buf, 0);
}

ssize_t remote_s3_get_by(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
			 uint64_t off, size_t len, void *buf, int64_t deadline_ms)
{
	struct s3_guard guard = {.s = s, .deadline_ms = deadline_ms};
	bool refreshed = false;
	struct get_xfer *x;
	struct strbuf url;
	char range[80], ifmatch[REMOTE_S3_MAX_ETAG + 16], code[64] = "";
	char cerr[CURL_ERROR_SIZE];
	ssize_t ret = -EIO;

	if (!s || !key || !etag || !*key || strlen(key) + strlen(s->prefix) > REMOTE_S3_MAX_KEY ||
	    strlen(etag) > REMOTE_S3_MAX_ETAG || strpbrk(etag, "\r\n") || off > size ||
	    len > size - off || len > SSIZE_MAX || (len && !buf))
		return -EINVAL;
	if (len == 0)
		return 0;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	strbuf_init(&url);
	strbuf_puts(&url, s->base_url);
	text_pct_encode(&url, s->prefix, strlen(s->prefix), true);
	text_pct_encode(&url, key, strlen(key), true);
	snprintf(range, sizeof(range), "Range: bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
	/* If-Match compares strongly (RFC 9110): a weak listed tag would never
	 * match, so it is not sent; the answer's ETag is still checked,
	 * exactly as listed. */
	bool weak = !strncmp(etag, "W/", 2);
	snprintf(ifmatch, sizeof(ifmatch), "If-Match: %s", etag);
	if (url.failed) {
		ret = -ENOMEM;
		goto out;
	}

	for (unsigned attempt = 0;; attempt++) {
		CURL *e = NULL;
		struct curl_slist *hdrs = NULL, *h1, *h2;
		int r;

		if (remote__s3_stopped(s)) {
			ret = -ECANCELED;
			goto out;
		}

		h1 = curl_slist_append(NULL, range);
		h2 = h1 && !weak ? curl_slist_append(h1, ifmatch) : h1;
		if (!h2) {
			curl_slist_free_all(h1);
			ret = -ENOMEM;
			goto out;
		}
		hdrs = h2;
		r = remote__s3_easy(s, &hdrs, (void **)&e);
		if (r) {
			curl_slist_free_all(hdrs);
			if (r == -EACCES)
				log_err("s3://%s/%s%s: no valid credentials", s->bucket, s->prefix,
					key);
			ret = r == -EACCES ? -EIO : r;
			goto out;
		}
		memset(x, 0, sizeof(*x));
		x->buf = buf;
		x->len = len;
		remote__s3_easy_request(e, url.buf, hdrs, get_header_cb, get_write_cb, x, cerr);
		remote__s3_guard(e, &guard);
		STAT_ADD(s, requests, 1);
		CURLcode rc = curl_easy_perform(e);
		curl_off_t ttfb = 0;

		if (rc == CURLE_WRITE_ERROR && x->errbody_cut)
			rc = CURLE_OK; /* the error answer as far as it was read */

		curl_easy_getinfo(e, CURLINFO_STARTTRANSFER_TIME_T, &ttfb);
		curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
		curl_slist_free_all(hdrs);
		remote_http_put(s->http, e); /* the rest looks at x only */

		if (guard.why != S3_ABORT_NONE) {
			/* Not the object's fault: the mount is going away, or the
			 * reader has waited long enough. */
			if (guard.why == S3_ABORT_DEADLINE)
				log_err("s3://%s/%s%s: no answer within the source timeout "
					"(after %u attempts)",
					s->bucket, s->prefix, key, attempt + 1);
			ret = guard.why == S3_ABORT_STOP ? -ECANCELED : -ETIMEDOUT;
			goto out;
		}
		if (x->overflow) {
			log_err("s3://%s/%s%s: more bytes than asked for", s->bucket, s->prefix,
				key);
			ret = -EIO;
			goto out;
		}
		if (rc == CURLE_OK && (x->status == 200 || x->status == 206)) {
			bool changed;
			const char *why = get_mismatch(x, etag, size, off, len, &changed);

			if (why) {
				log_err("s3://%s/%s%s: %s", s->bucket, s->prefix, key, why);
				ret = changed ? -ESTALE : -EIO;
				goto out;
			}
			hist_add(&s->latency, (uint64_t)ttfb);
			STAT_ADD(s, bytes, len);
			ret = (ssize_t)len;
			goto out;
		}
		if (remote__s3_retryable(rc, x->status) && attempt < s->max_retries) {
			log_debug("s3://%s/%s%s: retrying (%s)", s->bucket, s->prefix, key,
				  rc != CURLE_OK ? curl_easy_strerror(rc) : "5xx");
			if (remote__s3_backoff(s, attempt + 1, deadline_ms))
				continue;
			if (remote__s3_stopped(s)) {
				ret = -ECANCELED;
				goto out;
			}
			/* past the deadline: report this attempt's failure */
		}
		if (rc != CURLE_OK) {
			log_err("s3://%s/%s%s: %s (after %u attempts)", s->bucket, s->prefix, key,
				cerr[0] ? cerr : curl_easy_strerror(rc), attempt + 1);
			/* The endpoint, not the object: a later call may succeed. */
			ret = rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EAGAIN;
			goto out;
		}
		error_code(x->errbody, x->errlen, code, sizeof(code));
		if (token_expired(code) && !refreshed && remote__s3_cred_expire(s->cred)) {
			/* The next remote__s3_easy fetches new credentials. */
			log_info("s3://%s/%s%s: %s: refreshing the credentials", s->bucket,
				 s->prefix, key, code);
			refreshed = true;
			continue;
		}
		last_refusal.status = x->status;
		snprintf(last_refusal.code, sizeof(last_refusal.code), "%s", code);
		if (!(last_refusal.quiet && (x->status == 401 || x->status == 403)))
			log_err("s3://%s/%s%s: HTTP %ld%s%s%s%s", s->bucket, s->prefix, key,
				x->status, code[0] ? " (" : "", code, code[0] ? ")" : "",
				x->status == 412   ? ": the object changed since it was listed"
				: x->status == 403 ? ": access denied"
				: x->status == 404 ? ": the object is gone"
				: x->status / 100 == 3
					? ": a redirect, not followed (a store answers for its own "
					  "objects; check --endpoint and --region)"
					: "");
		/* 5xx through every retry is the endpoint's state, not the
		 * object's. Only 412 and 404 speak of the snapshot; any other
		 * answer (400 RequestTimeout, 403 RequestTimeTooSkewed, 401) may
		 * be followed by a good one. */
		ret = remote__s3_retryable(rc, x->status)	   ? -EAGAIN
		      : x->status == 412 || x->status == 404 ? -ESTALE
							       : -EIO;
		goto out;
	}
out:
	if (ret < 0)
		STAT_ADD(s, errors, 1);
	strbuf_fini(&url);
	free(x);
	return ret;
}

int remote_s3_check_get(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
			int64_t deadline_ms, char *err, size_t errlen)
{
	char byte;

	if (size == 0)
		return 0;
	last_refusal.status = 0;
	last_refusal.code[0] = '\0';
	last_refusal.quiet = true;
	ssize_t n = remote_s3_get_by(s, key, etag, size, 0, 1, &byte, deadline_ms);
	last_refusal.quiet = false;
	if (n == 1)
		return 0;
	if (last_refusal.status == 401 || last_refusal.status == 403) {
		const char *code = last_refusal.code[0] ? last_refusal.code : "HTTP 403";
		remote__s3_set_err(err, errlen,
			"s3://%s/%s%s: a signed GET is refused (%s)%s", s->bucket, s->prefix, key,
			code,
			!strcmp(code, "SignatureDoesNotMatch")
			    ? ": the store computes another signature (a proxy rewriting requests, "
			      "or a libcurl that ignores x-amz-content-sha256)"
			    : ": every read would fail; check the credentials and the bucket's "
			      "policy for GetObject");
		return -EACCES;
	}
	/* anything else (the object changed, the store busy) is no
	 * verdict on signing: reads will tell */
	return 0;
}

void remote_s3_get_stats(struct remote_s3 *s, struct remote_s3_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	out->requests = atomic_load_explicit(&s->requests, memory_order_relaxed);
	out->retries = atomic_load_explicit(&s->retries, memory_order_relaxed);
	out->errors = atomic_load_explicit(&s->errors, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed);
	out->left_out = atomic_load_explicit(&s->left_out, memory_order_relaxed);
	out->latency_p50_ms = hist_quantile_ms(&s->latency, 0.50);
	out->latency_p99_ms = hist_quantile_ms(&s->latency, 0.99);
}
