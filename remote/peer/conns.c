/* SPDX-License-Identifier: MIT */
/*
 * The peer server's connection policy: three lists under one mutex and a
 * reaper thread (conns.h says what it guarantees).
 */
#include "remote/peer/conns.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "common/deadline.h"
#include "remote/remote.h"

#define REAPER_PERIOD_MS 200

struct remote_conn {
	int fd;
	int64_t started_ms; /* opened, or (on the sending list) began sending */
	enum { LIST_NONE, LIST_UNAUTH, LIST_IDLE, LIST_SENDING } list; /* which list it is on */
	bool authed;	/* a request of it passed authentication */
	bool recycling; /* closed for room, not yet reported closed */
	struct remote_conn *prev, *next;
};

/* A list of connections, oldest (or least recently used) first. */
struct conn_list {
	struct remote_conn *head, *tail;
	unsigned count;
};

struct remote_conns {
	pthread_mutex_t lock;
	pthread_cond_t reaper_wake;
	struct conn_list unauth, idle, sending;
	unsigned live, recycling; /* open; of those, closed for room and not gone yet */
	_Atomic unsigned idle_limit;
	_Atomic unsigned max_unauth;
	_Atomic unsigned header_deadline_ms;
	_Atomic unsigned send_deadline_ms;
	bool stopping;
	pthread_t reaper;
	_Atomic uint64_t connections, dropped, recycled, slow_receivers;
	_Atomic unsigned open; /* live, for the stats without the lock */
};

static struct conn_list *list_of(struct remote_conns *p, const struct remote_conn *c)
{
	return c->list == LIST_UNAUTH	 ? &p->unauth
	       : c->list == LIST_IDLE	 ? &p->idle
	       : c->list == LIST_SENDING ? &p->sending
					 : NULL;
}

/* Under lock. */
static void unlist(struct remote_conns *p, struct remote_conn *c)
{
	struct conn_list *l = list_of(p, c);

	if (!l)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		l->tail = c->prev;
	c->prev = c->next = NULL;
	c->list = LIST_NONE;
	l->count--;
}

/* Under lock: c (on no list) to the tail of list `which`. */
static void enlist(struct remote_conns *p, struct remote_conn *c, int which)
{
	c->list = which;
	struct conn_list *l = list_of(p, c);

	c->prev = l->tail;
	c->next = NULL;
	if (l->tail)
		l->tail->next = c;
	else
		l->head = c;
	l->tail = c;
	l->count++;
}

/* Under lock: close a connection of one of the lists (its event loop sees the
 * socket end and libmicrohttpd closes it), counted in *counter first:
 * whoever sees the socket end may read the count. */
static void drop_counted(struct remote_conns *p, struct remote_conn *c, _Atomic uint64_t *counter)
{
	unlist(p, c);
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
	if (c->fd >= 0)
		shutdown(c->fd, SHUT_RDWR);
}

static void *reaper_main(void *arg)
{
	struct remote_conns *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stopping) {
		struct timespec until = deadline_after_ms(REAPER_PERIOD_MS);

		pthread_cond_timedwait(&p->reaper_wake, &p->lock, &until);
		int64_t now = deadline_now_ms();

		while (p->unauth.head &&
		       now - p->unauth.head->started_ms >= (int64_t)atomic_load(&p->header_deadline_ms))
			drop_counted(p, p->unauth.head, &p->dropped);
		while (p->sending.head &&
		       now - p->sending.head->started_ms >= (int64_t)atomic_load(&p->send_deadline_ms))
			drop_counted(p, p->sending.head, &p->slow_receivers);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int remote_conns_create(unsigned header_deadline_ms, unsigned idle_limit, unsigned max_unauth,
			struct remote_conns **out)
{
	struct remote_conns *p = calloc(1, sizeof(*p));
	pthread_condattr_t ca;
	int rc;

	if (!p)
		return -ENOMEM;
	atomic_init(&p->header_deadline_ms, header_deadline_ms);
	atomic_init(&p->send_deadline_ms, REMOTE_SERVER_SEND_DEADLINE_MS);
	atomic_init(&p->idle_limit, idle_limit);
	atomic_init(&p->max_unauth, max_unauth);
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->reaper_wake, &ca);
	pthread_condattr_destroy(&ca);
	if ((rc = pthread_create(&p->reaper, NULL, reaper_main, p)) != 0) {
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->reaper_wake);
		free(p);
		return -rc;
	}
	*out = p;
	return 0;
}

void remote_conns_destroy(struct remote_conns *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_signal(&p->reaper_wake);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->reaper, NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->reaper_wake);
	free(p);
}

struct remote_conn *remote_conns_opened(struct remote_conns *p, int fd)
{
	struct remote_conn *c = calloc(1, sizeof(*c));

	atomic_fetch_add_explicit(&p->connections, 1, memory_order_relaxed);
	if (!c) {
		/* Untracked, it cannot be dropped later: close it now. */
		if (fd >= 0)
			shutdown(fd, SHUT_RDWR);
		return NULL;
	}
	c->fd = fd;
	c->started_ms = deadline_now_ms();
	pthread_mutex_lock(&p->lock);
	p->live++;
	atomic_store_explicit(&p->open, p->live, memory_order_relaxed);
	enlist(p, c, LIST_UNAUTH);
	/* Over the cap, the oldest goes: a peer's fresh connection sends its
	 * request at once and is unlisted long before it becomes the oldest. */
	while (p->unauth.count > atomic_load(&p->max_unauth))
		drop_counted(p, p->unauth.head, &p->dropped);
	pthread_mutex_unlock(&p->lock);
	return c;
}

void remote_conns_closed(struct remote_conns *p, struct remote_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&p->lock);
	unlist(p, c);
	p->live--;
	atomic_store_explicit(&p->open, p->live, memory_order_relaxed);
	p->recycling -= c->recycling;
	pthread_mutex_unlock(&p->lock);
	free(c);
}

void remote_conns_authed(struct remote_conns *p, struct remote_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&p->lock);
	if (!c->authed) {
		c->authed = true;
		unlist(p, c); /* off the unauthenticated list for good */
		/* Room for the next ones: the least recently used idle
		 * connections, and only for a newcomer that authenticated, so
		 * that no stranger can push a peer out (those already closing
		 * count as gone: a burst of newcomers closes one each). */
		while (p->live - p->recycling > atomic_load(&p->idle_limit) && p->idle.head) {
			p->idle.head->recycling = true;
			p->recycling++;
			drop_counted(p, p->idle.head, &p->recycled);
		}
	}
	pthread_mutex_unlock(&p->lock);
}

void remote_conns_busy(struct remote_conns *p, struct remote_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&p->lock);
	if (c->list == LIST_IDLE)
		unlist(p, c);
	pthread_mutex_unlock(&p->lock);
}

void remote_conns_idle(struct remote_conns *p, struct remote_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&p->lock);
	if (c->list == LIST_SENDING)
		unlist(p, c); /* its response is complete */
	if (c->authed && c->list == LIST_NONE)
		enlist(p, c, LIST_IDLE);
	pthread_mutex_unlock(&p->lock);
}

void remote_conns_sending(struct remote_conns *p, struct remote_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&p->lock);
	if (c->list == LIST_NONE) {
		c->started_ms = deadline_now_ms();
		enlist(p, c, LIST_SENDING);
	}
	pthread_mutex_unlock(&p->lock);
}

void remote_conns_get_stats(const struct remote_conns *p, struct remote_conns_stats *out)
{
	out->connections = atomic_load_explicit(&p->connections, memory_order_relaxed);
	out->dropped = atomic_load_explicit(&p->dropped, memory_order_relaxed);
	out->recycled = atomic_load_explicit(&p->recycled, memory_order_relaxed);
	out->slow_receivers = atomic_load_explicit(&p->slow_receivers, memory_order_relaxed);
	out->open = atomic_load_explicit(&p->open, memory_order_relaxed);
}

void remote_conns_set_header_deadline_ms(struct remote_conns *p, unsigned ms)
{
	atomic_store(&p->header_deadline_ms, ms);
}

void remote_conns_set_idle_limit(struct remote_conns *p, unsigned n)
{
	atomic_store(&p->idle_limit, n);
}

void remote_conns_set_send_deadline_ms(struct remote_conns *p, unsigned ms)
{
	atomic_store(&p->send_deadline_ms, ms);
}

void remote_conns_set_max_unauth(struct remote_conns *p, unsigned n)
{
	atomic_store(&p->max_unauth, n);
}
