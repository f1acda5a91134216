/* SPDX-License-Identifier: MIT */
/*
 * ListObjectsV2 of a whole prefix (remote_s3_list): every page, parsed as
 * it streams in (page.c's parser, capped).
 *
 * With parallel <= 1 it is one flat listing: fewest requests. With more,
 * the tree is discovered level by level with delimiter=/ ("discover"
 * tasks) and listed by a pool of worker threads. A level with few common
 * prefixes (at most `parallel`) gives one discover task per prefix, so the
 * walk recurses in parallel. A level with many (train/<1000 classes>/) is
 * cut into `parallel` ranges of consecutive prefixes, each listed flat
 * ("range" tasks: prefix=LEVEL, start-after just before its first prefix,
 * stopping at the next range's first prefix), so the listing takes as
 * many requests as a flat one (1000 keys a page, not one request per small
 * class) with `parallel` of them in flight.
 *
 * A range owns exactly the keys k with lo <= k < hi that lie below a
 * common prefix of its level: level prefixes are P + segment + '/', none
 * a prefix of another, so every key below one of them sorts between the
 * range's bounds exactly when its common prefix does. Keys directly in
 * the level were listed by the discover task and are skipped by ranges.
 *
 * A page's objects reach the callback only after the page parsed
 * completely (a retried page never repeats objects), under one mutex (the
 * callback is serialized). The first error stops every worker.
 *
 * A listing that never ends is stopped: a continuation token seen before
 * in the same task (A, B, A, B... as well as A, A) is an error (a set of
 * the tokens' 64-bit hashes: a false alarm would need a collision, about
 * 2^-40 for a million pages); the keys and bytes passed on are capped
 * (list_max_keys, list_max_bytes: endless pages of new keys would fill
 * memory); and the whole listing is bounded in time (list_timeout_ms).
 */
#include "remote/s3/s3_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/deadline.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "remote/http.h"

#define LIST_MAX_THREADS 256
#define LIST_PAGE_KEYS 1000
/* Bytes a listed key costs its user beyond its key and ETag, for
 * list_max_bytes (ns_listing's record and arena terminators, rounded up). */
#define LIST_KEY_OVERHEAD 64

enum task_kind {
	TASK_FLAT,     /* everything below prefix, no delimiter */
	TASK_DISCOVER, /* one level: its objects, then its common prefixes */
	TASK_RANGE,    /* below prefix, keys in [lo, hi) under a subprefix */
};

struct task {
	enum task_kind kind;
	char *prefix;
	char *lo, *hi; /* TASK_RANGE: first prefix of the range, first after it (NULL: none) */
};

struct list_ctx {
	struct remote_s3 *s;
	remote_s3_list_fn fn;
	void *arg;
	unsigned parallel;
	pthread_mutex_t lock; /* queue, busy, error */
	pthread_cond_t cond;
	struct task **queue;
	size_t qlen, qcap;
	unsigned busy;
	int error;
	char err[512];
	pthread_mutex_t cb_lock; /* serializes fn; keys and bytes */
	uint64_t keys, bytes;	 /* passed on so far (caps) */
	uint64_t outside;	 /* keys listed outside the prefix asked for */
	int64_t deadline_ms;	 /* list_timeout_ms from the start, or 0 */
};

/* The continuation tokens one task has followed (their hashes), an
 * open-addressing set that doubles when half full. */
struct token_set {
	uint64_t *v; /* 0: free (a hash of 0 is stored as 1) */
	size_t n, cap;
};

/* Add token: 1 when it was there already, 0 when added, -ENOMEM. */
static int token_seen(struct token_set *ts, const char *token)
{
	uint64_t h = hash_bytes(token, strlen(token), 0x746f6b656e73ULL) ?: 1;

	if (2 * (ts->n + 1) > ts->cap) {
		size_t ncap = ts->cap ? ts->cap * 2 : 64;
		uint64_t *nv = calloc(ncap, sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		for (size_t i = 0; i < ts->cap; i++) {
			if (!ts->v[i])
				continue;
			size_t j = ts->v[i] & (ncap - 1);
			while (nv[j])
				j = (j + 1) & (ncap - 1);
			nv[j] = ts->v[i];
		}
		free(ts->v);
		ts->v = nv;
		ts->cap = ncap;
	}
	size_t j = h & (ts->cap - 1);
	while (ts->v[j]) {
		if (ts->v[j] == h)
			return 1;
		j = (j + 1) & (ts->cap - 1);
	}
	ts->v[j] = h;
	ts->n++;
	return 0;
}

struct page_xfer {
	struct s3_page page;
	size_t body;
	long status;
	char errbody[S3_MAX_ERROR_BODY];
	size_t errlen;
	bool errbody_cut; /* the error body went past the cap: not read on */
	bool too_big;
};

static size_t page_header_cb(char *line, size_t size, size_t n, void *arg)
{
	struct page_xfer *x = arg;
	size_t len = size * n;

	remote__s3_status_line(line, len, &x->status);
	return len;
}

static size_t page_write_cb(char *data, size_t size, size_t n, void *arg)
{
	struct page_xfer *x = arg;
	size_t len = size * n;

	if (x->status != 200)
		return remote__s3_errbody_take(x->errbody, &x->errlen, &x->errbody_cut, data, len);
	x->body += len;
	if (x->body > S3_MAX_LIST_BODY) {
		x->too_big = true;
		return 0;
	}
	return remote__s3_page_feed(&x->page, data, len, false) ? 0 : len;
}

static void ctx_fail(struct list_ctx *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ctx_fail(struct list_ctx *c, int err, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->lock);
	if (!c->error) {
		c->error = err;
		va_start(ap, fmt);
		vsnprintf(c->err, sizeof(c->err), fmt, ap);
		va_end(ap);
	}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static bool ctx_failed(struct list_ctx *c)
{
	pthread_mutex_lock(&c->lock);
	bool f = c->error != 0;
	pthread_mutex_unlock(&c->lock);
	return f;
}

/* Fetch and parse one page, with retries. 0 and x->page, or -errno (the
 * context's error set). */
static int fetch_page(struct list_ctx *c, const char *prefix, bool delimiter,
		      const char *start_after, const char *token, struct page_xfer *x)
{
	struct remote_s3 *s = c->s;
	struct strbuf url;
	struct s3_guard guard = {.s = s, .deadline_ms = c->deadline_ms, .whole = true};
	char cerr[CURL_ERROR_SIZE];
	int ret = -EIO;

	strbuf_init(&url);
	strbuf_printf(&url, "%s?", s->bucket_url);
	remote__s3_list_query(&url, token, delimiter ? "/" : NULL, prefix, LIST_PAGE_KEYS,
			      token ? NULL : start_after);
	if (url.failed) {
		strbuf_fini(&url);
		ctx_fail(c, -ENOMEM, "s3://%s: out of memory", s->bucket);
		return -ENOMEM;
	}
	for (unsigned attempt = 0;; attempt++) {
		CURL *e = NULL;
		struct curl_slist *hdrs = NULL;
		int r;

		remote__s3_page_fini(&x->page);
		memset(x, 0, sizeof(*x));
		if (remote__s3_page_init(&x->page)) {
			ctx_fail(c, -ENOMEM, "s3://%s: out of memory", s->bucket);
			ret = -ENOMEM;
			break;
		}
		r = remote__s3_easy(s, &hdrs, (void **)&e);
		if (r) {
			curl_slist_free_all(hdrs);
			if (r == -EACCES)
				ctx_fail(c, r, "s3://%s: no valid credentials (refresh failed)",
					 s->bucket);
			else
				ctx_fail(c, r, "s3://%s: out of memory", s->bucket);
			ret = r;
			break;
		}
		remote__s3_easy_request(e, url.buf, hdrs, page_header_cb, page_write_cb, x, cerr);
		remote__s3_guard(e, &guard);
		atomic_fetch_add_explicit(&s->requests, 1, memory_order_relaxed);
		CURLcode rc = curl_easy_perform(e);

		if (rc == CURLE_WRITE_ERROR && x->errbody_cut)
			rc = CURLE_OK; /* the error answer as far as it was read */
		curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
		curl_slist_free_all(hdrs);
		remote_http_put(s->http, e); /* the rest looks at x only */

		if (guard.why != S3_ABORT_NONE) {
			ret = guard.why == S3_ABORT_STOP ? -ECANCELED : -ETIMEDOUT;
			if (ret == -ECANCELED)
				ctx_fail(c, ret, "s3://%s: listing cancelled", s->bucket);
			else
				ctx_fail(c, ret, "s3://%s/%s: the listing took over %u s (--list-timeout)",
					 s->bucket, prefix, s->list_timeout_ms / 1000);
			break;
		}
		if (rc == CURLE_OK && x->status == 200) {
			if (remote__s3_page_feed(&x->page, "", 0, true) == 0) {
				ret = 0;
				break;
			}
			ctx_fail(c, -EIO, "s3://%s/%s: malformed ListObjectsV2 answer", s->bucket,
				 prefix);
			break;
		}
		if (x->too_big || (rc == CURLE_WRITE_ERROR && x->status == 200)) {
			ctx_fail(c, -EIO, "s3://%s/%s: %s ListObjectsV2 answer", s->bucket, prefix,
				 x->too_big ? "oversized" : "malformed");
			break;
		}
		if (remote__s3_retryable(rc, x->status) && attempt < s->max_retries &&
		    !ctx_failed(c) && remote__s3_backoff(s, attempt + 1, c->deadline_ms))
			continue;
		if (rc != CURLE_OK) {
			ret = rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO;
			ctx_fail(c, ret, "s3://%s: %s: %s (after %u attempts)", s->bucket,
				 s->bucket_url, cerr[0] ? cerr : curl_easy_strerror(rc),
				 attempt + 1);
			break;
		}
		struct s3_page ep;
		char code[64] = "";

		if (x->errlen && remote__s3_page_init(&ep) == 0) {
			remote__s3_page_feed(&ep, x->errbody, x->errlen, true);
			snprintf(code, sizeof(code), "%s", ep.error_code);
			remote__s3_page_fini(&ep);
		}
		ret = remote__s3_status_errno(x->status, code);
		if (ret == -EACCES)
			ctx_fail(c, ret, "s3://%s: access denied (%s): check the credentials%s",
				 s->bucket, code[0] ? code : "HTTP 403",
				 remote__s3_cred_source(s->cred) == S3_CRED_NONE
				     ? " (the request was anonymous)"
				     : " and the bucket's policy");
		else if (ret == -ENOENT)
			ctx_fail(c, ret, "s3://%s: no such bucket (%s at %s)", s->bucket,
				 code[0] ? code : "HTTP 404", s->bucket_url);
		else if (x->status == 301 || !strcmp(code, "PermanentRedirect") ||
			 !strcmp(code, "AuthorizationHeaderMalformed"))
			ctx_fail(c, ret = -EINVAL,
				 "s3://%s: HTTP %ld (%s): the bucket is in another region than %s "
				 "(set --region)",
				 s->bucket, x->status, code[0] ? code : "redirect", s->region);
		else
			ctx_fail(c, ret, "s3://%s: HTTP %ld%s%s%s after %u attempts", s->bucket,
				 x->status, code[0] ? " (" : "", code, code[0] ? ")" : "",
				 attempt + 1);
		break;
	}
	strbuf_fini(&url);
	return ret;
}

static void task_free(struct task *t)
{
	if (!t)
		return;
	free(t->prefix);
	free(t->lo);
	free(t->hi);
	free(t);
}

/* Queue a task (strings copied). 0 or -ENOMEM (the context's error set). */
static int push_task(struct list_ctx *c, enum task_kind kind, const char *prefix, const char *lo,
		     const char *hi)
{
	struct task *t = calloc(1, sizeof(*t));
	bool ok = t != NULL;

	if (ok) {
		t->kind = kind;
		t->prefix = strdup(prefix);
		t->lo = lo ? strdup(lo) : NULL;
		t->hi = hi ? strdup(hi) : NULL;
		ok = t->prefix && (!lo || t->lo) && (!hi || t->hi);
	}
	pthread_mutex_lock(&c->lock);
	if (ok && c->qlen == c->qcap) {
		size_t ncap = c->qcap ? c->qcap * 2 : 256;
		struct task **nq = realloc(c->queue, ncap * sizeof(*nq));

		if (nq) {
			c->queue = nq;
			c->qcap = ncap;
		}
	}
	if (!ok || c->qlen == c->qcap) {
		pthread_mutex_unlock(&c->lock);
		task_free(t);
		ctx_fail(c, -ENOMEM, "s3://%s: out of memory", c->s->bucket);
		return -ENOMEM;
	}
	c->queue[c->qlen++] = t;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* Which entries of a page a task passes on. */
static bool task_wants(const struct task *t, const char *key)
{
	if (t->kind != TASK_RANGE)
		return true;
	if (strcmp(key, t->lo) < 0 || (t->hi && strcmp(key, t->hi) >= 0))
		return false;
	/* keys directly in the level were the discover task's */
	return strchr(key + strlen(t->prefix), '/') != NULL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The common prefixes a discover task found: recurse into each, or cut
 * them into ranges listed flat. */
static void split_level(struct list_ctx *c, const char *prefix, char **cps, size_t n)
{
	qsort(cps, n, sizeof(*cps), cmp_str);
	if (n <= c->parallel) {
		for (size_t i = 0; i < n; i++)
			if (push_task(c, TASK_DISCOVER, cps[i], NULL, NULL))
				return;
		return;
	}
	for (size_t r = 0; r < c->parallel; r++) {
		size_t first = n * r / c->parallel, next = n * (r + 1) / c->parallel;

		if (first == next)
			continue;
		if (push_task(c, TASK_RANGE, prefix, cps[first], next < n ? cps[next] : NULL))
			return;
	}
}

/* Count one entry of bytes against the listing's caps, with cb_lock held:
 * 0, or -EFBIG once over them. */
static int count_entry(struct list_ctx *c, size_t bytes)
{
	const struct remote_s3 *s = c->s;

	c->keys++;
	c->bytes += bytes + LIST_KEY_OVERHEAD;
	if ((s->list_max_keys && c->keys > s->list_max_keys) ||
	    (s->list_max_bytes && c->bytes > s->list_max_bytes))
		return -EFBIG;
	return 0;
}

static void fail_too_big(struct list_ctx *c)
{
	ctx_fail(c, -EFBIG,
		 "s3://%s: the listing is over %llu keys or %llu MiB: too large "
		 "to hold (or an endpoint that never ends it)",
		 c->s->bucket, (unsigned long long)c->s->list_max_keys,
		 (unsigned long long)(c->s->list_max_bytes >> 20));
}

/* Keep a page's common prefixes for split_level. They count against the
 * caps as keys do: a walk keeps every prefix of a level until its last
 * page, and an endpoint that answers page after page of new ones would
 * otherwise take all memory before --list-timeout. */
static int keep_prefixes(struct list_ctx *c, const char *prefix, struct s3_page *p, char ***cps,
			 size_t *n, size_t *cap)
{
	size_t plen = strlen(prefix);
	int r = 0;

	pthread_mutex_lock(&c->cb_lock);
	for (size_t i = 0; i < p->n_prefixes && !r; i++)
		r = count_entry(c, strlen(p->prefixes[i]));
	pthread_mutex_unlock(&c->cb_lock);
	if (r) {
		fail_too_big(c);
		return r;
	}

	for (size_t i = 0; i < p->n_prefixes; i++) {
		char *cp = p->prefixes[i];
		size_t len = strlen(cp);

		/* P + segment + '/', where the segment may be empty (a key with
		 * "//" in it: listed so that the namespace can skip and count
		 * it); anything else would break the ranges (or never end the
		 * walk) */
		if (len <= plen || strncmp(cp, prefix, plen) || cp[len - 1] != '/' ||
		    memchr(cp + plen, '/', len - plen - 1)) {
			ctx_fail(c, -EIO, "s3://%s/%s: bad CommonPrefixes in the answer",
				 c->s->bucket, prefix);
			return -EIO;
		}
		if (*n == *cap) {
			size_t ncap = *cap ? *cap * 2 : 256;
			char **na = realloc(*cps, ncap * sizeof(*na));

			if (!na) {
				ctx_fail(c, -ENOMEM, "s3://%s: out of memory", c->s->bucket);
				return -ENOMEM;
			}
			*cps = na;
			*cap = ncap;
		}
		(*cps)[(*n)++] = cp;
		p->prefixes[i] = NULL; /* ours now */
	}
	return 0;
}

/* Run one task: every page of its listing. */
static void run_task(struct list_ctx *c, const struct task *t)
{
	struct remote_s3 *s = c->s;
	struct page_xfer *x = calloc(1, sizeof(*x));
	char *token = NULL, *start_after = NULL;
	size_t plen = strlen(s->prefix);
	char **cps = NULL;
	size_t n_cps = 0, cap_cps = 0;
	struct token_set seen = {0};
	bool done = false;

	if (!x) {
		ctx_fail(c, -ENOMEM, "s3://%s: out of memory", s->bucket);
		return;
	}
	if (t->kind == TASK_RANGE) {
		/* just before every key below lo: lo without its '/', then '.'
		 * (the byte before '/'); keys of the previous range that sort
		 * after it are filtered by task_wants */
		size_t lolen = strlen(t->lo);

		start_after = strdup(t->lo);
		if (!start_after) {
			ctx_fail(c, -ENOMEM, "s3://%s: out of memory", s->bucket);
			goto out;
		}
		start_after[lolen - 1] = '.';
	}
	while (!done) {
		if (ctx_failed(c))
			break;
		if (c->deadline_ms && deadline_now_ms() >= c->deadline_ms) {
			ctx_fail(c, -ETIMEDOUT, "s3://%s/%s: the listing took over %u s (--list-timeout)",
				 s->bucket, t->prefix, s->list_timeout_ms / 1000);
			break;
		}
		if (fetch_page(c, t->prefix, t->kind == TASK_DISCOVER, start_after, token, x))
			break;
		struct s3_page *p = &x->page;
		int r = 0;

		if (p->skipped) {
			log_warn("s3://%s/%s: %zu keys with a NUL byte or prefixes over 1024 bytes "
				 "left out", s->bucket, t->prefix, p->skipped);
			atomic_fetch_add_explicit(&s->left_out, p->skipped, memory_order_relaxed);
		}
		pthread_mutex_lock(&c->cb_lock);
		for (size_t i = 0; i < p->n_entries && !r; i++) {
			struct s3_page_entry *en = &p->entries[i];
			struct remote_s3_object obj;

			if (t->kind == TASK_RANGE && t->hi && strcmp(en->key, t->hi) >= 0)
				done = true; /* sorted: the rest is the next range's */
			/* Not under the prefix asked for: a store that ignores
			 * prefix= (or lies). Never a file; counted and told once,
			 * at the end, not per key: such a store may list a whole
			 * bucket. */
			if (en->key_len < plen || memcmp(en->key, s->prefix, plen) ||
			    strncmp(en->key, t->prefix, strlen(t->prefix))) {
				c->outside++;
				continue;
			}
			/* the prefix itself (a directory marker for the root),
			 * or another task's key: not a file here */
			if (en->key_len == plen || !task_wants(t, en->key))
				continue;
			obj.key = en->key + plen;
			obj.key_len = en->key_len - plen;
			obj.size = en->size;
			obj.etag = en->etag;
			obj.mtime_ns = en->mtime_ns;
			obj.unusable = en->unusable;
			if ((r = count_entry(c, obj.key_len + strlen(en->etag))) != 0)
				break;
			r = c->fn(c->arg, &obj);
		}
		pthread_mutex_unlock(&c->cb_lock);
		if (r == -EFBIG) {
			fail_too_big(c);
			break;
		}
		if (r) {
			ctx_fail(c, r, "s3://%s: listing stopped: %s", s->bucket, strerror(-r));
			break;
		}
		if (t->kind == TASK_DISCOVER &&
		    keep_prefixes(c, t->prefix, p, &cps, &n_cps, &cap_cps))
			break;
		if (!p->truncated || done)
			break;
		int seen_rc = token_seen(&seen, p->next_token);
		if (seen_rc) {
			/* a page seen before: a broken server, not a long listing */
			if (seen_rc < 0)
				ctx_fail(c, -ENOMEM, "s3://%s: out of memory", s->bucket);
			else
				ctx_fail(c, -ELOOP,
					 "s3://%s/%s: the endpoint repeats its continuation token "
					 "(a listing that would never end)",
					 s->bucket, t->prefix);
			break;
		}
		free(token);
		token = strdup(p->next_token);
		if (!token) {
			ctx_fail(c, -ENOMEM, "s3://%s: out of memory", s->bucket);
			break;
		}
	}
	if (n_cps && !ctx_failed(c))
		split_level(c, t->prefix, cps, n_cps);
out:
	for (size_t i = 0; i < n_cps; i++)
		free(cps[i]);
	free(cps);
	free(seen.v);
	free(token);
	free(start_after);
	remote__s3_page_fini(&x->page);
	free(x);
}

static void *list_worker(void *arg)
{
	struct list_ctx *c = arg;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->error && c->qlen == 0 && c->busy > 0)
			pthread_cond_wait(&c->cond, &c->lock);
		if (c->error || c->qlen == 0)
			break;
		struct task *t = c->queue[--c->qlen];

		c->busy++;
		pthread_mutex_unlock(&c->lock);
		run_task(c, t);
		task_free(t);
		pthread_mutex_lock(&c->lock);
		c->busy--;
		if (c->busy == 0 && c->qlen == 0)
			pthread_cond_broadcast(&c->cond);
	}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int remote_s3_list(struct remote_s3 *s, unsigned parallel, remote_s3_list_fn fn, void *arg,
		   char *err, size_t errlen)
{
	struct list_ctx c = {.s = s, .fn = fn, .arg = arg};
	pthread_t tids[LIST_MAX_THREADS];
	unsigned started = 0;

	if (!s || !fn)
		return -EINVAL;
	if (parallel > LIST_MAX_THREADS)
		parallel = LIST_MAX_THREADS;
	c.parallel = parallel ? parallel : 1;
	c.deadline_ms = s->list_timeout_ms ? deadline_now_ms() + s->list_timeout_ms : 0;
	pthread_mutex_init(&c.lock, NULL);
	pthread_cond_init(&c.cond, NULL);
	pthread_mutex_init(&c.cb_lock, NULL);
	if (push_task(&c, parallel > 1 ? TASK_DISCOVER : TASK_FLAT, s->prefix, NULL, NULL) == 0) {
		if (parallel <= 1) {
			list_worker(&c);
		} else {
			for (unsigned i = 0; i < parallel; i++) {
				if (pthread_create(&tids[i], NULL, list_worker, &c) != 0)
					break;
				started++;
			}
			if (started == 0)
				list_worker(&c);
			for (unsigned i = 0; i < started; i++)
				pthread_join(tids[i], NULL);
		}
	}
	for (size_t i = 0; i < c.qlen; i++)
		task_free(c.queue[i]);
	free(c.queue);
	pthread_mutex_destroy(&c.lock);
	pthread_cond_destroy(&c.cond);
	pthread_mutex_destroy(&c.cb_lock);
	if (c.outside) {
		atomic_fetch_add_explicit(&s->left_out, c.outside, memory_order_relaxed);
		log_warn("s3://%s/%s: %" PRIu64 " listed keys outside the prefix asked for left "
			 "out (the endpoint does not honour prefix=)",
			 s->bucket, s->prefix, c.outside);
	}
	if (c.error) {
		atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
		if (err && errlen)
			snprintf(err, errlen, "%s", c.err);
		log_debug("%s", c.err);
	}
	return c.error;
}
