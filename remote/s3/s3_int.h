/* SPDX-License-Identifier: MIT */
/*
 * Internals of the S3 client (remote/s3/: client.c, list.c, cred.c,
 * cred_parse.c, page.c, proto.c), shared with the white-box unit test:
 * query and URL building, the ListObjectsV2 page parser, the shared-file
 * (INI) reader, credential JSON and answer checks. Nothing here is for fs/.
 *
 * Files depend on each other one way: list.c calls client.c; both call
 * cred.c, page.c and proto.c; cred.c calls cred_parse.c and proto.c;
 * page.c and cred_parse.c call proto.c.
 */
#ifndef COORDFS_REMOTE_S3_INT_H
#define COORDFS_REMOTE_S3_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/hist.h"
#include "remote/s3.h"

struct curl_slist;

struct strbuf;
struct curl_slist;

/* Caps on what the network or a file may hand us. */
#define S3_MAX_ACCESS_KEY 128
#define S3_MAX_SECRET 256
#define S3_MAX_TOKEN 4096 /* session tokens are ~1-2 KiB */
#define S3_MAX_REGION 64
#define S3_MAX_ERROR_BODY 8192	     /* XML error document we keep */
#define S3_MAX_LIST_BODY (32u << 20) /* one ListObjectsV2 page */
#define S3_MAX_PAGE_ENTRIES 20000    /* S3 sends at most 1000 */
#define S3_MAX_XML_TEXT 4096	     /* one element's text */
#define S3_MAX_CRED_BODY 65536	     /* a credential endpoint's answer */
#define S3_MAX_INI_LINE 4096
#define S3_MAX_INI_FILE (1u << 20)

/* ---- proto.c; and client.c's request setup ---------------------------- */

/* Point the curl easy handle easy at url with headers hdrs (client.c): response
 * headers go to header_cb, the body to write_cb (both get ctx), curl's
 * error text to cerr (CURL_ERROR_SIZE bytes, emptied here). */
void remote__s3_easy_request(void *easy, const char *url, struct curl_slist *hdrs,
			     size_t (*header_cb)(char *, size_t, size_t, void *),
			     size_t (*write_cb)(char *, size_t, size_t, void *), void *ctx,
			     char *cerr);

/* Keep data, the n bytes of an error answer's body that just arrived, in
 * body (S3_MAX_ERROR_BODY bytes, *len used so far, NUL kept free), for a
 * write callback to return: n, or 0 with *cut set once the document is
 * over the cap, which ends the transfer. An error document is small, and
 * a body that never ends but keeps moving would outlast every timeout (a
 * deadline only stops an attempt still waiting for its body, the
 * low-speed limit only one that stalls). The caller then takes the
 * answer as complete: CURLE_WRITE_ERROR with *cut is CURLE_OK. */
size_t remote__s3_errbody_take(char *body, size_t *len, bool *cut, const char *data, size_t n);

/* One line of error text into err (errlen bytes; NULL or 0: nothing). */
void remote__s3_set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The ListObjectsV2 query (no '?'), parameters in alphabetical order and
 * values percent-encoded, as curl 7.88's SigV4 signs the query as written.
 * token, delimiter and start_after may be NULL; max_keys 0 leaves it out. */
void remote__s3_list_query(struct strbuf *out, const char *token, const char *delimiter,
			   const char *prefix, unsigned max_keys, const char *start_after);

/* "2026-12-02T14:37:09.123Z" (fraction and zone optional, Z or +00:00):
 * 0 and *ns since the epoch, or -EINVAL. */
int remote__s3_parse_time(const char *s, int64_t *ns);

/* "bytes FIRST-LAST/TOTAL": 0 and the numbers, or -EINVAL (also for '*'). */
int remote__s3_content_range(const char *value, uint64_t *first, uint64_t *last, uint64_t *total);

/* Whether the len bytes at s hold a control character (C0 or DEL): what
 * the network hands us for a request header (an ETag for If-Match, a
 * credential) must not, or it would add headers of its own. */
bool remote__s3_has_control(const char *s, size_t len);

/* Strong ETag equality; the quotes may be missing on either side. */
bool remote__s3_etag_equal(const char *a, const char *b);

/* When temporary credentials expiring at expires_s should be replaced,
 * fetched at now_s: 5 minutes before, or at half their remaining life when
 * that is shorter. */
int64_t remote__s3_refresh_at(int64_t now_s, int64_t expires_s);

/* ---- ListObjectsV2 pages (page.c, libexpat) --------------------------- */

struct s3_page_entry {
	char *key; /* full key, NUL-terminated */
	size_t key_len;
	uint64_t size;
	char etag[REMOTE_S3_MAX_ETAG + 1];
	int64_t mtime_ns;
	const char *unusable; /* remote_s3_object.unusable */
};

struct s3_page {
	struct s3_page_entry *entries;
	size_t n_entries, cap_entries;
	char **prefixes; /* CommonPrefixes */
	size_t n_prefixes, cap_prefixes;
	bool truncated;
	bool url_encoded; /* <EncodingType>url</EncodingType>: keys and prefixes decoded at the end
			   */
	size_t skipped;	  /* keys dropped: their decoded form holds a NUL byte, and
			     CommonPrefixes over REMOTE_S3_MAX_KEY */
	char *next_token;
	char error_code[64]; /* from an <Error> document */
	char error_message[256];
	/* parser state */
	void *parser; /* XML_Parser */
	unsigned depth;
	int root; /* 1: ListBucketResult, 2: Error */
	bool in_contents, in_prefixes;
	int where; /* which text-bearing element we are in */
	char *text;
	size_t text_len;
	struct s3_page_entry cur;
	bool have_key, have_size, have_etag;
	int failed; /* -errno once the page is unusable */
};

/* Start a page parse. 0 or -ENOMEM. */
int remote__s3_page_init(struct s3_page *p);
/* Feed body bytes; final on the last call. 0 or -EINVAL (bad XML, missing
 * fields, over a cap, a bad %-escape in a url-encoded page) / -ENOMEM.
 * Pages answered to encoding-type=url have their keys and prefixes decoded
 * ('+' is a space) on the final call; keys that decode to a NUL byte are
 * dropped and counted in skipped. */
int remote__s3_page_feed(struct s3_page *p, const char *data, size_t len, bool final);
void remote__s3_page_fini(struct s3_page *p);

/* ---- shared files and credential answers (cred_parse.c) -------------- */

struct s3_profile {
	char access_key[S3_MAX_ACCESS_KEY];
	char secret_key[S3_MAX_SECRET];
	char token[S3_MAX_TOKEN];
	char region[S3_MAX_REGION];
	char process[S3_MAX_INI_LINE]; /* credential_process: a command line */
	bool found; /* the section exists */
};

/* Read section `section` of INI text into p (fields it sets overwrite, the
 * others stay). Keys are matched case-insensitively, around '=' spaces are
 * trimmed, ';' and '#' start comments. -EINVAL on a line over
 * S3_MAX_INI_LINE or a value over its field. */
/* Copy the string v into dst (cap bytes): 0, or -EINVAL when it does not
 * fit (dst untouched). */
int remote__s3_copy_str(char *dst, size_t cap, const char *v);

int remote__s3_ini_parse(const char *text, size_t len, const char *section, struct s3_profile *p);

struct s3_creds {
	char access_key[S3_MAX_ACCESS_KEY];
	char secret_key[S3_MAX_SECRET];
	char token[S3_MAX_TOKEN];
	int64_t expires_s; /* 0: never */
};

/* A container / IMDS credential document (AccessKeyId, SecretAccessKey,
 * Token, Expiration), or a credential_process one (Version 1,
 * SessionToken instead of Token). 0 or -EINVAL (bad JSON, missing or
 * oversized field, Code other than Success, Version other than 1). */
int remote__s3_cred_json(const char *json, size_t len, struct s3_creds *out);

/*
 * Split a credential_process command line into words, without a shell
 * and without expanding anything ($VAR, ~, globs stay as written):
 * blanks separate words; '...' is literal; "..." is literal but for \"
 * \\ \$ \` ; a backslash outside quotes takes the next byte as is. An
 * unquoted $( or ` (command substitution), | & ; < > ( ) { } or newline
 * (shell constructs that would not do what they say) is refused. 0 and *argv (NULL-terminated, *argc
 * words, free with remote__s3_argv_free), -EINVAL with *why (static), or
 * -ENOMEM.
 */
int remote__s3_split_command(const char *line, char ***argv, size_t *argc, const char **why);
void remote__s3_argv_free(char **argv);

/*
 * Whether AWS_CONTAINER_CREDENTIALS_FULL_URI may be asked for credentials
 * (as the AWS SDKs restrict it): https to any host, or http to a loopback
 * address (127.0.0.0/8, [::1], localhost), the ECS endpoint 169.254.170.2
 * or the EKS one, 169.254.170.23 / [fd00:ec2::23]. No user info.
 */
bool remote__s3_container_uri_ok(const char *url);

/* ---- credential provider (cred.c) ------------------------------------- */

struct s3_cred;

enum s3_cred_source {
	S3_CRED_NONE = 0, /* anonymous */
	S3_CRED_ENV,
	S3_CRED_PROFILE,
	S3_CRED_CONTAINER,
	S3_CRED_IMDS,
	S3_CRED_PROCESS, /* the profile's credential_process */
};

/* Walk the chain (see remote/s3/README.md) and fetch the first credentials.
 * region_out receives the profile's region when it has one (else left
 * alone). 0 or -EACCES / -EINVAL / -ENOMEM with one line in err. */
int remote__s3_cred_create(const struct remote_s3_config *cfg, struct remote_http *pool,
			   char *region_out, size_t region_cap, struct s3_cred **out, char *err,
			   size_t errlen);
void remote__s3_cred_destroy(struct s3_cred *c);
/* Current credentials, refreshed first when due. One thread refreshes;
 * the others go on with the old ones while those are still valid.
 * 0 or -EACCES (expired and the refresh failed). */
int remote__s3_cred_get(struct s3_cred *c, struct s3_creds *out);
/* The store said the credentials expired: make temporary ones due for a
 * refresh now (the next remote__s3_cred_get fetches). false when they
 * cannot be refreshed (static keys, anonymous, NULL). */
bool remote__s3_cred_expire(struct s3_cred *c);
enum s3_cred_source remote__s3_cred_source(const struct s3_cred *c);
/* How many times credentials were fetched from an endpoint. */
unsigned remote__s3_cred_fetches(const struct s3_cred *c);

/* ---- the client (client.c), used by list.c ---------------------------- */

struct remote_s3 {
	struct remote_http *http;
	struct s3_cred *cred; /* NULL when anonymous */
	char *bucket;
	char *prefix;	  /* "" or ends in '/' */
	char *base_url;	  /* scheme://host[:port]/[bucket/] : keys follow */
	char *bucket_url; /* base_url for bucket-level requests, ends in '/' */
	char *sigv4;	  /* "aws:amz:REGION:s3" */
	char *ca_bundle;  /* AWS_CA_BUNDLE, or NULL: the system store */
	char region[S3_MAX_REGION];
	unsigned connect_timeout_ms, timeout_ms, max_retries, backoff_base_ms, backoff_cap_ms;
	unsigned list_timeout_ms;
	uint64_t list_max_keys, list_max_bytes;
	/* remote_s3_cancel: every request aborts (from curl's progress
	 * callback) and no back-off sleeps on; stop_cond wakes the sleepers. */
	_Atomic bool stop;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond; /* CLOCK_MONOTONIC */
	_Atomic uint64_t requests, retries, errors, bytes;
	/* listed keys no file can come from: outside the prefix asked (a
	 * store that ignores it), holding a NUL byte */
	_Atomic uint64_t left_out;
	struct hist latency;
};

/* One signed request's outcome. */
struct s3_result {
	int curl_code; /* CURLcode */
	long status;   /* HTTP status, 0 when none */
	char error_code[64];
};

/* A handle checked out of the pool for one S3 request (put it back with
 * remote_http_put), reset, with signing (credentials, SigV4,
 * UNSIGNED-PAYLOAD, session token) and the client's timeouts applied; the
 * caller sets URL, headers and callbacks. Credentials are fetched first
 * (a refresh runs its requests on a handle of its own, remote_http_new),
 * so nothing of a refresh leaks into the request and a thread never holds
 * two pooled handles. hdrs is the caller's header list, appended to (freed
 * by the caller). 0 and *easy, or -EACCES (no valid credentials) /
 * -ENOMEM with no handle held. */
int remote__s3_easy(struct remote_s3 *s, struct curl_slist **hdrs, void **easy);

/* Whether a failed attempt is worth repeating: transport errors, 500,
 * 502, 503, 504 (and 429). */
bool remote__s3_retryable(int curl_code, long status);
/* Sleep before retry number attempt, counting it; the sleep is a timed
 * wait that remote_s3_cancel (or remote_s3_stop_all, seen within 200 ms)
 * cuts short. false, without sleeping past it, when the client is stopped
 * or the retry would start at or after deadline_ms (CLOCK_MONOTONIC ms;
 * 0: none): do not retry. */
bool remote__s3_backoff(struct remote_s3 *s, unsigned attempt, int64_t deadline_ms);

/* Why a request was aborted by its guard (remote__s3_guard). */
enum s3_abort { S3_ABORT_NONE = 0, S3_ABORT_STOP, S3_ABORT_DEADLINE };
struct s3_guard {
	struct remote_s3 *s;
	int64_t deadline_ms; /* 0: none */
	bool whole;	     /* the deadline cuts a body that keeps coming too */
	enum s3_abort why;
};
/* Watch a request from curl's progress callback: it is aborted
 * (CURLE_ABORTED_BY_CALLBACK, g->why set) once the client is stopped, or
 * when deadline_ms passes before the first byte of the answer's body (a
 * body that keeps coming is bounded by the low-speed limit instead, so a
 * large unit on a slow link is not cut), or at all with whole (a listing,
 * whose --list-timeout bounds everything: a page is at most 32 MiB, which
 * a store may dribble for hours above the low-speed limit). g must
 * outlive the transfer. */
void remote__s3_guard(void *easy, struct s3_guard *g);
bool remote__s3_stopped(struct remote_s3 *s);

/* Text for an S3 error code in a user-facing line. */
int remote__s3_status_errno(long status, const char *code);

/* A header line of len bytes that starts a response ("HTTP/1.1 206 ..."):
 * true and *status (0 when unreadable); false for any other line. */
bool remote__s3_status_line(const char *line, size_t len, long *status);

#endif
