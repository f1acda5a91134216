/* SPDX-License-Identifier: MIT */
/*
 * Signed peer requests: the signer the client calls, the checker the
 * server calls, and the server's memory of counters already used (an
 * anti-replay window per client id, as IPsec keeps per association:
 * requests of one client may arrive out of order, by up to WINDOW_BITS).
 * HMAC-SHA256 is OpenSSL's; comparisons of secrets are constant time.
 */
#include "remote/peer/auth.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/hash.h"
#include "remote/remote.h"

#define SIGN_PREFIX "coordfs-peer-v1\n"
#define REPLY_PREFIX "coordfs-peer-reply-v1\n"
#define TARGET_MAX 8192 /* request targets longer than this are refused anyway */
#define WINDOW_BITS 1024
#define NBUCKETS 1024

static int hmac_hex(const char *secret, size_t secret_len, const char *method, const char *target,
		    const char *range, int64_t t, uint64_t id, uint64_t n, char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t cap = sizeof(SIGN_PREFIX) + strlen(method) + strlen(target) + strlen(range) + 96;
	char *msg;
	int len;

	if (strlen(target) > TARGET_MAX || strlen(method) > 16 || strlen(range) > 128)
		return -EINVAL;
	msg = malloc(cap);
	if (!msg)
		return -ENOMEM;
	len = snprintf(msg, cap, SIGN_PREFIX "%s\n%s\n%s\n%" PRId64 "\n%016" PRIx64 "\n%" PRIu64,
		       method, target, range, t, id, n);
	if (len < 0 || (size_t)len >= cap ||
	    !HMAC(EVP_sha256(), secret, (int)secret_len, (const unsigned char *)msg, (size_t)len,
		  md, &mdlen) ||
	    mdlen != 32) {
		free(msg);
		return -EIO;
	}
	free(msg);
	for (unsigned i = 0; i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = '\0';
	return 0;
}

int remote_auth_sign(const char *secret, size_t secret_len, const char *method,
		     const char *target, const char *range, int64_t unix_s, uint64_t id,
		     uint64_t counter, char *out, size_t outlen)
{
	char sig[65];
	int rc = hmac_hex(secret, secret_len, method, target, range ? range : "", unix_s, id,
			  counter, sig);

	if (rc < 0)
		return rc;
	int n = snprintf(out, outlen, REMOTE_AUTH_SCHEME " t=%" PRId64 ",id=%016" PRIx64
				      ",n=%" PRIu64 ",sig=%s",
			 unix_s, id, counter, sig);
	return n < 0 || (size_t)n >= outlen ? -EINVAL : 0;
}

/* ---- the replay window ------------------------------------------------------ */

struct client_entry {
	uint64_t id;
	uint64_t top;			   /* highest counter seen */
	uint64_t seen[WINDOW_BITS / 64];   /* bit d: counter top - d was used */
	int64_t last_t;			   /* newest request time */
	int32_t next;			   /* bucket chain, -1 at the end */
};

struct remote_replay {
	pthread_mutex_t lock;
	int32_t bucket[NBUCKETS];
	struct client_entry e[REMOTE_AUTH_CLIENTS];
	unsigned used;
	int64_t floor_t; /* newest time of a forgotten client: older requests are refused */
};

struct remote_replay *remote_replay_create(void)
{
	struct remote_replay *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	pthread_mutex_init(&r->lock, NULL);
	for (unsigned i = 0; i < NBUCKETS; i++)
		r->bucket[i] = -1;
	r->floor_t = INT64_MIN;
	return r;
}

void remote_replay_destroy(struct remote_replay *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static unsigned bucket_of(uint64_t id)
{
	return (unsigned)(hash_mix64(id) % NBUCKETS);
}

/* Under lock: take entry i off its chain. */
static void unchain(struct remote_replay *r, int32_t i)
{
	int32_t *p = &r->bucket[bucket_of(r->e[i].id)];

	while (*p != i && *p != -1)
		p = &r->e[*p].next;
	if (*p == i)
		*p = r->e[i].next;
}

/* Under lock: the entry of id, made if new (forgetting the least recently
 * seen client when full); NULL when a new client's request is not newer
 * than what was forgotten. */
static struct client_entry *entry_of(struct remote_replay *r, uint64_t id, int64_t t, bool *fresh)
{
	unsigned b = bucket_of(id);
	int32_t i;

	*fresh = false;
	for (i = r->bucket[b]; i != -1; i = r->e[i].next)
		if (r->e[i].id == id)
			return &r->e[i];
	if (t <= r->floor_t)
		return NULL;
	if (r->used < REMOTE_AUTH_CLIENTS) {
		i = (int32_t)r->used++;
	} else {
		i = 0;
		for (int32_t k = 1; k < REMOTE_AUTH_CLIENTS; k++)
			if (r->e[k].last_t < r->e[i].last_t)
				i = k;
		if (r->e[i].last_t > r->floor_t)
			r->floor_t = r->e[i].last_t;
		unchain(r, i);
	}
	memset(&r->e[i], 0, sizeof(r->e[i]));
	r->e[i].id = id;
	r->e[i].next = r->bucket[b];
	r->bucket[b] = i;
	*fresh = true;
	return &r->e[i];
}

static bool bit_get(const struct client_entry *e, uint64_t d)
{
	return e->seen[d / 64] >> (d % 64) & 1;
}

static void bit_set(struct client_entry *e, uint64_t d)
{
	e->seen[d / 64] |= 1ULL << (d % 64);
}

/* Under lock: shift the window so that counter n becomes the top. */
static void advance(struct client_entry *e, uint64_t n)
{
	uint64_t shift = n - e->top;

	if (shift >= WINDOW_BITS) {
		memset(e->seen, 0, sizeof(e->seen));
	} else {
		for (uint64_t d = WINDOW_BITS; d-- > shift;)
			if (bit_get(e, d - shift))
				bit_set(e, d);
			else
				e->seen[d / 64] &= ~(1ULL << (d % 64));
		for (uint64_t d = 0; d < shift; d++)
			e->seen[d / 64] &= ~(1ULL << (d % 64));
	}
	e->top = n;
}

/* Record (id, n) at time t: 0, or -EALREADY for a pair used before (or
 * too old to tell). */
static int replay_record(struct remote_replay *r, uint64_t id, uint64_t n, int64_t t)
{
	bool fresh;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	struct client_entry *e = entry_of(r, id, t, &fresh);

	if (!e) {
		rc = -EALREADY;
	} else if (fresh || n > e->top) {
		if (fresh)
			e->top = n;
		else
			advance(e, n);
		bit_set(e, 0);
	} else if (e->top - n >= WINDOW_BITS || bit_get(e, e->top - n)) {
		rc = -EALREADY;
	} else {
		bit_set(e, e->top - n);
	}
	if (e && rc == 0 && t > e->last_t)
		e->last_t = t;
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* ---- checking a request ------------------------------------------------------ */

/* "key=" then digits of base up to a ',' or the end: 0, or -1. */
static int field(const char **p, const char *key, int base, uint64_t *out, int64_t *sout)
{
	size_t kl = strlen(key);
	char *end;

	while (**p == ' ')
		(*p)++;
	if (strncmp(*p, key, kl) != 0)
		return -1;
	*p += kl;
	if (!((**p >= '0' && **p <= '9') || (base == 16 && **p >= 'a' && **p <= 'f')))
		return -1;
	errno = 0;
	if (sout)
		*sout = strtoll(*p, &end, base);
	else
		*out = strtoull(*p, &end, base);
	if (errno || (*end != ',' && *end != '\0'))
		return -1;
	*p = *end == ',' ? end + 1 : end;
	return 0;
}

int remote_auth_verify(const char *secret, size_t secret_len, const char *header,
		       const char *method, const char *target, const char *range, int64_t unix_s,
		       struct remote_replay *replay)
{
	const size_t sl = sizeof(REMOTE_AUTH_SCHEME) - 1;
	uint64_t id, n;
	int64_t t;
	char want[65];
	const char *p;

	if (!header || strncasecmp(header, REMOTE_AUTH_SCHEME, sl) != 0 || header[sl] != ' ')
		return -EACCES;
	p = header + sl;
	if (field(&p, "t=", 10, NULL, &t) < 0 || field(&p, "id=", 16, &id, NULL) < 0 ||
	    field(&p, "n=", 10, &n, NULL) < 0)
		return -EACCES;
	while (*p == ' ')
		p++;
	if (strncmp(p, "sig=", 4) != 0 || strlen(p + 4) != 64)
		return -EACCES;
	if (hmac_hex(secret, secret_len, method, target, range ? range : "", t, id, n, want) < 0)
		return -EACCES;
	if (hash_ct_compare((const unsigned char *)p + 4, (const unsigned char *)want, 64) != 0)
		return -EACCES;
	if (t < unix_s - REMOTE_AUTH_WINDOW_S || t > unix_s + REMOTE_AUTH_WINDOW_S)
		return -ETIME;
	return replay ? replay_record(replay, id, n, t) : 0;
}

/* ---- signed answers ---------------------------------------------------------- */

static EVP_MAC *poly1305;
static pthread_once_t poly1305_once = PTHREAD_ONCE_INIT;

static void poly1305_fetch(void)
{
	poly1305 = EVP_MAC_fetch(NULL, "POLY1305", NULL);
}

/* The sig= of a signed request's Authorization value, 64 hex digits. */
static const char *request_sig(const char *authorization)
{
	const size_t sl = sizeof(REMOTE_AUTH_SCHEME) - 1;
	const char *p;

	if (!authorization || strncasecmp(authorization, REMOTE_AUTH_SCHEME, sl) != 0 ||
	    !(p = strstr(authorization + sl, "sig=")) || strlen(p + 4) != 64)
		return NULL;
	return p + 4;
}

int remote_auth_reply_mac(const char *secret, size_t secret_len, const char *authorization,
			  unsigned status, const char *etag, uint64_t start, uint64_t len,
			  uint64_t total, const void *body, size_t body_len,
			  char hex[REMOTE_REPLY_MAC_HEX + 1])
{
	static const char digits[] = "0123456789abcdef";
	const char *sig = request_sig(authorization);
	char msg[sizeof(REPLY_PREFIX) + 64], meta[REMOTE_MAX_ETAG + 96];
	unsigned char key[EVP_MAX_MD_SIZE], tag[16];
	unsigned int keylen = 0;
	size_t taglen = 0;
	int rc = -EIO;

	if (!sig)
		return -EINVAL;
	int n = snprintf(msg, sizeof(msg), REPLY_PREFIX "%.64s", sig);
	int m = snprintf(meta, sizeof(meta), "%u\n%s\n%" PRIu64 "\n%" PRIu64 "\n%" PRIu64 "\n",
			 status, etag ? etag : "", start, len, total);
	if (n < 0 || (size_t)n >= sizeof(msg) || m < 0 || (size_t)m >= sizeof(meta))
		return -EINVAL;
	pthread_once(&poly1305_once, poly1305_fetch);
	if (!poly1305 || !HMAC(EVP_sha256(), secret, (int)secret_len, (const unsigned char *)msg,
			       (size_t)n, key, &keylen) || keylen != 32)
		return -EIO;
	EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(poly1305);
	if (ctx && EVP_MAC_init(ctx, key, 32, NULL) &&
	    EVP_MAC_update(ctx, (const unsigned char *)meta, (size_t)m) &&
	    (body_len == 0 || EVP_MAC_update(ctx, body, body_len)) &&
	    EVP_MAC_final(ctx, tag, &taglen, sizeof(tag)) && taglen == sizeof(tag)) {
		for (unsigned i = 0; i < sizeof(tag); i++) {
			hex[2 * i] = digits[tag[i] >> 4];
			hex[2 * i + 1] = digits[tag[i] & 15];
		}
		hex[REMOTE_REPLY_MAC_HEX] = '\0';
		rc = 0;
	}
	EVP_MAC_CTX_free(ctx);
	explicit_bzero(key, sizeof(key));
	return rc;
}
