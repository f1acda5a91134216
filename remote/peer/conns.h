/* SPDX-License-Identifier: MIT */
/*
 * The peer server's connection policy (server.c calls it from
 * libmicrohttpd's callbacks): which connections may keep a slot.
 *
 * Every new connection starts on the "unauthenticated" list, oldest first,
 * and leaves it for good with its first request that passed
 * authentication. The list is capped (max_unauth: a new
 * connection over the cap drops the oldest) and a reaper thread drops
 * whatever is still on it after the header deadline, however slowly it
 * trickles bytes. Authenticated keep-alive connections between requests
 * sit on the "idle" list, least recently used first; when a newcomer
 * authenticates while more than the idle limit are open, the least
 * recently used idle one is closed (`recycled`), so idle connections of
 * many peers cannot fill the server, and no stranger can push a peer out.
 * A connection sending a response that holds a buffer of the memory
 * budget sits on the "sending" list, oldest first, until the response is
 * complete; the reaper closes it once it has sent for longer than the send
 * deadline (`slow_receivers`): a client that stopped reading would hold
 * the buffer as long as it takes a byte now and then.
 * Closing is shutdown(2) under the lock: the server's event loop sees the end
 * and libmicrohttpd reports the connection closed (remote_conns_closed)
 * before it closes the descriptor, so the one shut down is always its own.
 * Thread-safe; one mutex, never held across I/O.
 */
#ifndef COORDFS_REMOTE_CONNS_H
#define COORDFS_REMOTE_CONNS_H

#include <stdint.h>

struct remote_conns;
struct remote_conn;

/* The policy with its reaper thread: 0 and *out, or -errno. */
int remote_conns_create(unsigned header_deadline_ms, unsigned idle_limit, unsigned max_unauth,
			struct remote_conns **out);
/* Stop the reaper and free the policy (connections closed already). NULL ok. */
void remote_conns_destroy(struct remote_conns *p);

/* A connection on socket fd was accepted: its state (NULL when out of
 * memory: the socket is then shut down, since it could never be dropped). */
struct remote_conn *remote_conns_opened(struct remote_conns *p, int fd);
/* It closed: off every list, freed. */
void remote_conns_closed(struct remote_conns *p, struct remote_conn *c);
/* A request of it passed authentication (recycles idle ones for room). */
void remote_conns_authed(struct remote_conns *p, struct remote_conn *c);
/* A new request's headers arrived: off the idle list while it is served. */
void remote_conns_busy(struct remote_conns *p, struct remote_conn *c);
/* A request ended and the connection stays open: the most recently used idle one. */
void remote_conns_idle(struct remote_conns *p, struct remote_conn *c);
/* c's response holds a buffer: on the sending list until it is complete
 * (remote_conns_idle) or closed. */
void remote_conns_sending(struct remote_conns *p, struct remote_conn *c);

struct remote_conns_stats {
	uint64_t connections;	 /* accepted */
	uint64_t dropped;	 /* unauthenticated ones closed at the deadline or cap */
	uint64_t recycled;	 /* idle authenticated ones closed for room */
	uint64_t slow_receivers; /* sending ones closed at the send deadline */
	uint64_t open;		 /* open now */
};
void remote_conns_get_stats(const struct remote_conns *p, struct remote_conns_stats *out);

/* For tests: the deadline, the idle limit and the unauthenticated cap. */
void remote_conns_set_header_deadline_ms(struct remote_conns *p, unsigned ms);
void remote_conns_set_idle_limit(struct remote_conns *p, unsigned n);
void remote_conns_set_max_unauth(struct remote_conns *p, unsigned n);
void remote_conns_set_send_deadline_ms(struct remote_conns *p, unsigned ms);

#endif
