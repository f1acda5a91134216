/* SPDX-License-Identifier: MIT */
/*
 * Signed peer requests (coordfs(1), SECURITY). A request carries
 *
 *   Authorization: Coordfs-HMAC-SHA256 t=UNIX,id=HEX16,n=COUNTER,sig=HEX64
 *
 * sig = HMAC-SHA256(secret, "coordfs-peer-v1\n" METHOD "\n" TARGET "\n"
 *                   RANGE "\n" t "\n" id "\n" n)
 *
 * TARGET is the request path exactly as sent (percent-encoded, no query),
 * RANGE the Range header's value or empty. id is a random 64-bit name of
 * the sending client (new at every start), n its request counter. The
 * secret never goes on the wire; a server takes a request only within
 * REMOTE_AUTH_WINDOW_S of its own clock, and each (id, n) once.
 */
#ifndef COORDFS_REMOTE_AUTH_H
#define COORDFS_REMOTE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REMOTE_AUTH_SCHEME "Coordfs-HMAC-SHA256"
#define REMOTE_AUTH_WINDOW_S 30 /* clock difference tolerated, seconds, either way */
#define REMOTE_AUTH_HEADER_MAX 192 /* an Authorization value, with its NUL */

/* The Authorization header's value for a request into out (at least
 * REMOTE_AUTH_HEADER_MAX bytes). range may be NULL. 0, or -EINVAL when
 * method/target do not fit a request, -EIO when the HMAC failed. */
int remote_auth_sign(const char *secret, size_t secret_len, const char *method,
		     const char *target, const char *range, int64_t unix_s, uint64_t id,
		     uint64_t counter, char *out, size_t outlen);

/* The counters each client id has used: (id, n) pairs seen within the
 * window are refused again. Bounded: at most REMOTE_AUTH_CLIENTS ids, the
 * least recently seen forgotten first, and then nothing older than what
 * was forgotten is taken. Thread-safe. */
#define REMOTE_AUTH_CLIENTS 4096
struct remote_replay;
struct remote_replay *remote_replay_create(void);
void remote_replay_destroy(struct remote_replay *r); /* NULL ok */

/*
 * Check a request's Authorization value (header may be NULL): the scheme
 * (any case), the fields, the signature in constant time, the clock window
 * and, last, that (id, n) is new (recorded then). 0 when it may be served;
 * -EACCES (missing, malformed or wrong signature), -ETIME (outside the
 * window), -EALREADY (a replay).
 */
int remote_auth_verify(const char *secret, size_t secret_len, const char *header,
		       const char *method, const char *target, const char *range, int64_t unix_s,
		       struct remote_replay *replay);

/*
 * Signed answers. A file answer (200 or 206) to a signed request carries
 *
 *   X-Coordfs-Reply-MAC: HEX32
 *
 * = Poly1305(k, STATUS "\n" ETAG "\n" START "\n" LEN "\n" TOTAL "\n" BODY),
 * k = HMAC-SHA256(secret, "coordfs-peer-reply-v1\n" SIG), SIG the request's
 * sig= (unique per request: a one-time key, as Poly1305 needs). Whoever
 * answers on a node's address without the secret (a local user on a node
 * whose daemon is down) cannot make one: the requester takes no bytes
 * without it. authorization is the request's Authorization value; etag ""
 * when there is none. 0, -EINVAL when authorization is not a signed
 * request's (Bearer), -EIO when the crypto failed.
 */
#define REMOTE_REPLY_MAC_HEADER "X-Coordfs-Reply-MAC"
#define REMOTE_REPLY_MAC_HEX 32
int remote_auth_reply_mac(const char *secret, size_t secret_len, const char *authorization,
			  unsigned status, const char *etag, uint64_t start, uint64_t len,
			  uint64_t total, const void *body, size_t body_len,
			  char hex[REMOTE_REPLY_MAC_HEX + 1]);

#endif
