/* SPDX-License-Identifier: MIT */
/*
 * The S3 client behind the object-store source (`s3://BUCKET[/PREFIX]`):
 * ListObjectsV2 of a whole prefix, many listings at once; ranged GETs
 * checked against the listed snapshot of each object; the AWS credential
 * chain with refresh; SigV4 by libcurl (CURLOPT_AWS_SIGV4); XML by libexpat.
 * It knows nothing of FUSE, the namespace or the cache.
 *
 * Conventions: 0 or -errno, results through out-parameters, one line of
 * error text (naming the bucket, key or option, never a secret) through
 * err/errlen where given.
 *
 * Thread-safety: after remote_s3_create every call may run concurrently.
 * Requests go through the shared connection pool (remote/http.h).
 */
#ifndef COORDFS_REMOTE_S3_H
#define COORDFS_REMOTE_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct remote_http;
struct strbuf;

#define REMOTE_S3_MAX_KEY 1024	/* bytes of a key (S3's own limit) */
#define REMOTE_S3_MAX_ETAG 128	/* bytes of an ETag, quotes included */

enum remote_s3_addressing {
	REMOTE_S3_ADDR_AUTO = 0, /* virtual on AWS, path with an explicit endpoint */
	REMOTE_S3_ADDR_PATH,
	REMOTE_S3_ADDR_VIRTUAL,
};

/* Zero/NULL fields take the defaults in brackets. Strings are copied. */
struct remote_s3_config {
	const char *bucket;   /* required */
	const char *prefix;   /* key prefix without leading '/', [""]; a
				 trailing '/' is added when missing */
	const char *endpoint; /* http(s)://host[:port] [AWS from region] */
	const char *region;   /* [AWS_REGION, AWS_DEFAULT_REGION, profile, us-east-1] */
	const char *profile;  /* [AWS_PROFILE, "default"] */
	bool no_sign;	      /* anonymous requests */
	enum remote_s3_addressing addressing;
	unsigned connect_timeout_ms; /* [3000] */
	unsigned timeout_ms;	     /* [30000] a request that moves under 1 KiB/s this
					long (whole seconds, at least 1) is dropped and
					retried; there is no cap on a whole transfer, so
					a large unit on a slow link still completes */
	unsigned max_retries;	     /* [6] after the first attempt */
	unsigned backoff_base_ms;    /* [100] */
	unsigned backoff_cap_ms;     /* [5000] */
	/* A listing that never ends is stopped (remote_s3_list): */
	unsigned list_timeout_ms;    /* [none] the whole listing */
	uint64_t list_max_keys;	     /* [none] keys passed to the callback */
	uint64_t list_max_bytes;     /* [none] their keys + ETags + 64 bytes each */
};

struct remote_s3;

/*
 * Resolve the configuration and credentials (environment, shared files,
 * container or instance-role endpoint; see remote/s3/README.md). Makes no
 * request to the bucket itself. 0 and *out, or -EINVAL / -EACCES / -ENOMEM
 * with one line in err. pool must outlive the client.
 */
int remote_s3_create(const struct remote_s3_config *cfg, struct remote_http *pool,
		     struct remote_s3 **out, char *err, size_t errlen);
void remote_s3_destroy(struct remote_s3 *s); /* NULL ok */

/* One listed object. key is relative to the prefix and NUL-terminated;
 * everything is valid during the callback only. */
struct remote_s3_object {
	const char *key;
	size_t key_len;
	uint64_t size;
	const char *etag; /* as listed, quotes included, NUL-terminated */
	int64_t mtime_ns; /* LastModified */
	/* NULL, or why this client cannot read the object (a key over
	 * REMOTE_S3_MAX_KEY, an ETag over REMOTE_S3_MAX_ETAG: etag is then
	 * ""): passed on so that the caller can skip, log and count it
	 * instead of the whole listing failing. */
	const char *unusable;
};

/* Called once per object, serialized (never concurrently), in no
 * particular order. Return 0 to go on, -errno to stop the listing. */
typedef int (*remote_s3_list_fn)(void *arg, const struct remote_s3_object *obj);

/*
 * List every object under the prefix (ListObjectsV2, every page), with up
 * to `parallel` requests in flight (splitting by common prefixes; 0 or 1:
 * one flat listing). Keys are passed as listed, relative to the prefix;
 * an object named exactly like the prefix (its "directory marker") is not
 * passed. Blocks until done; fn runs on the worker threads. 0, or
 * -errno with one line in err naming the cause (-EACCES: credentials or
 * signature refused; -ENOENT: no such bucket; -EIO / -ETIMEDOUT: the
 * endpoint failed after the retries; -ELOOP: a continuation token seen
 * before in the same walk; -EFBIG: over list_max_keys or list_max_bytes;
 * -ETIMEDOUT: over list_timeout_ms).
 */
int remote_s3_list(struct remote_s3 *s, unsigned parallel, remote_s3_list_fn fn, void *arg,
		   char *err, size_t errlen);

/*
 * Read bytes [off, off+len) of key (relative to the prefix) into buf: one
 * signed GET with `Range` and `If-Match: etag`; the answer's ETag and
 * Content-Range total must equal etag and size too. Throttling (503),
 * other 5xx, timeouts and dropped connections are retried with backoff.
 * Returns len exactly, or -ESTALE (412, 404, another ETag or total size:
 * the listed version of the object is gone, final), -EIO (any other
 * answer: 400, 401, 403, a wrong range, too many bytes; a later call may
 * get a good one), -EAGAIN (the endpoint kept failing, 5xx or dropped
 * connections, through the retries), -ETIMEDOUT (likewise, timed out),
 * -EINVAL; each error with one log line naming the key. An ExpiredToken
 * answer refreshes temporary credentials and is retried once.
 * Blocks up to the retries' total time.
 */
ssize_t remote_s3_get(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
		      uint64_t off, size_t len, void *buf);
/* remote_s3_get bounded by deadline_ms (CLOCK_MONOTONIC milliseconds, as
 * deadline_now_ms(); 0: none): no attempt starts after it, and an attempt
 * still waiting for its answer's body then is aborted: -ETIMEDOUT.
 * -ECANCELED once the client is stopped (remote_s3_cancel,
 * remote_s3_stop_all). */
ssize_t remote_s3_get_by(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
			 uint64_t off, size_t len, void *buf, int64_t deadline_ms);

/* At mount, after the listing: one signed GET of the first byte of key (a
 * listed object; nothing when size is 0), so that a store refusing GETs
 * (a signature it computes differently, a policy without GetObject) says
 * so in one line rather than EIO on every read. Bounded by deadline_ms
 * as remote_s3_get_by is (0: none). 0 (including any failure that is not
 * a refusal, and no answer by the deadline), or -EACCES with err naming
 * the S3 error code. */
int remote_s3_check_get(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
			int64_t deadline_ms, char *err, size_t errlen);

/* Stop s: requests in flight abort within about a second (curl's progress
 * callback), back-off sleeps end at once, and every later request fails
 * with -ECANCELED. For unmount: nothing waits on the store any more. */
void remote_s3_cancel(struct remote_s3 *s);
/* The same for every client of the process, and async-signal-safe (a
 * lock-free store: a SIGTERM handler calls it); sleepers notice within
 * 200 ms. Cannot be undone. */
void remote_s3_stop_all(void);

struct remote_s3_stats {
	uint64_t requests;	 /* HTTP requests sent, retries included */
	uint64_t retries;	 /* of those, repeats after a retryable failure */
	uint64_t errors;	 /* calls that returned an error */
	uint64_t bytes;		 /* body bytes of successful GETs */
	uint64_t left_out;	 /* listed keys left out: outside the prefix, NUL byte */
	double latency_p50_ms;	 /* time to first byte of GETs, since create */
	double latency_p99_ms;
};
void remote_s3_get_stats(struct remote_s3 *s, struct remote_s3_stats *out);

#endif
