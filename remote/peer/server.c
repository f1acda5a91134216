/* SPDX-License-Identifier: MIT */
/*
 * The peer server: libmicrohttpd in epoll mode, a few event-loop threads
 * (REMOTE_SERVER_POLL_THREADS) that hold every connection, and a bounded
 * pool of workers (workers.c) for the part of a request that calls the
 * filesystem's callbacks. Those may block on SOURCE (the read-through
 * can take seconds), so an event loop never runs them: it checks the
 * request (authentication, method, length), suspends the connection and
 * queues the route (route(): the file, the stats, the metrics) for a
 * worker, which queues the answer and resumes the connection. A body
 * that needs a further slice (read returned a prefix) suspends again and
 * asks a worker for it. So threads are bounded whatever the number of
 * connections, an idle keep-alive connection costs only its libmicrohttpd
 * state, and a slow read holds one worker, never a loop. When the queue
 * is full the answer is 503 + Retry-After (the peer reads SOURCE).
 *
 * The server never opens files: a request path is percent-decoded,
 * validated (remote__relpath_check) and handed to the resolve callback,
 * the namespace, which is the only door into the dataset.
 *
 * Connection slots go to peers first: who keeps one, and when an idle or
 * silent connection is closed for room, is the policy of conns.c
 * (conns.h), which this file calls from libmicrohttpd's callbacks.
 */
#include "remote/peer/remote_int.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "remote/peer/auth.h"
#include "remote/peer/conns.h"
#include "remote/peer/workers.h"

#define FILES_PREFIX "/v1/files/"
#define AUTH_SCHEME "bearer"
/* A thousand peers may connect at once (the kernel caps it at somaxconn). */
#define LISTEN_BACKLOG 4096
#define STACK_SIZE (1024 * 1024)

struct remote_server {
	struct MHD_Daemon *daemon;
	const struct remote_server_ops *ops;
	void *arg;
	char *secret; /* NULL without a secret */
	size_t secret_len;
	struct remote_replay *replay; /* (client, counter) pairs already served */
	_Atomic bool accept_bearer;   /* also "Bearer SECRET" (remote_server_accept_bearer) */
	struct remote_conns *conns; /* who keeps a connection slot (conns.h) */
	struct remote_workers *workers; /* where routes and reads run (workers.h) */
	_Atomic uint64_t served;
	_Atomic uint64_t served_bytes;
	_Atomic uint64_t rejected;
	_Atomic uint64_t busy;
	_Atomic uint64_t unavailable;
	_Atomic uint64_t mismatched;
	_Atomic uint64_t not_held;
	_Atomic uint64_t inline_answers; /* answered on the event loop (ops->ready) */
};

/* The answer to a forwarded request for a unit this node does not hold
 * (counted in not_held, not as a rejected request). */
static const char not_held_text[] = "not held by this node\n";

/* Per request, in MHD's con_cls. */
struct request {
	bool responded;
	bool is_file;
	bool failed; /* the worker could not queue an answer: close */
	uint64_t body_len;
	/* Handed to a worker while the connection is suspended. */
	struct remote_job job;
	struct remote_server *srv;
	struct MHD_Connection *conn;
	const char *url; /* MHD's, valid until the request completes */
};

/* A response streamed from several slices (read returned a prefix). */
struct stream {
	struct remote_server *srv;
	struct MHD_Connection *conn; /* suspended while a worker reads */
	struct remote_job job;
	bool fetched; /* a worker read the next slice (fetch_rc, slice) */
	int fetch_rc;
	uint64_t fetch_off; /* what it was asked for */
	size_t fetch_len;
	uint32_t file_id;
	uint64_t start; /* file offset of body byte 0 */
	uint64_t len;	/* body length */
	struct remote_slice slice;
	uint64_t slice_off; /* file offset of slice byte 0 */
	bool have_slice;
};

static struct remote_conn *conn_of(struct MHD_Connection *mc);

static void slice_release(struct remote_slice *sl)
{
	if (sl->release)
		sl->release(sl->ctx);
	sl->release = NULL;
}

static void slice_reset(struct remote_slice *sl)
{
	memset(sl, 0, sizeof(*sl));
}

/* ---- listening socket --------------------------------------------------- */

int remote_listen(const char *hostport, int *fd, char *err, size_t errlen)
{
	char host[REMOTE_MAX_URL_LEN + 1];
	const char *colon = hostport ? strrchr(hostport, ':') : NULL;
	const char *port = colon ? colon + 1 : NULL;
	struct addrinfo hints = {0}, *res = NULL, *ai;
	size_t hlen;
	int rc, last = -EADDRNOTAVAIL;

	*fd = -1;
	if (!colon || !*port || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port) ||
	    atoi(port) > 65535)
		goto bad;
	hlen = (size_t)(colon - hostport);
	if (hlen >= sizeof(host))
		goto bad;
	memcpy(host, hostport, hlen);
	host[hlen] = '\0';
	if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
		memmove(host, host + 1, hlen - 2);
		host[hlen - 2] = '\0';
	} else if (strchr(host, ':') || strchr(host, '[') || strchr(host, ']')) {
		goto bad;
	}
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	const char *node = (host[0] == '\0' || strcmp(host, "*") == 0) ? NULL : host;

	rc = getaddrinfo(node, port, &hints, &res);
	if (rc != 0) {
		if (err && errlen)
			snprintf(err, errlen, "--listen=%s: %s", hostport, gai_strerror(rc));
		return -EADDRNOTAVAIL;
	}
	/* With no host, prefer the IPv6 wildcard (it also takes IPv4). */
	for (int pass = 0; pass < 2 && *fd < 0; pass++) {
		for (ai = res; ai; ai = ai->ai_next) {
			if (!node && (pass == 0) != (ai->ai_family == AF_INET6))
				continue;
			if (node && pass == 1)
				break;
			int s =
			    socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				   ai->ai_protocol);
			int one = 1, off = 0;

			if (s < 0) {
				last = -errno;
				continue;
			}
			setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (ai->ai_family == AF_INET6 && !node)
				setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
			if (bind(s, ai->ai_addr, ai->ai_addrlen) != 0 ||
			    listen(s, LISTEN_BACKLOG) != 0) {
				last = -errno;
				close(s);
				continue;
			}
			*fd = s;
			break;
		}
	}
	freeaddrinfo(res);
	if (*fd < 0) {
		if (err && errlen)
			snprintf(err, errlen, "--listen=%s: %s", hostport, strerror(-last));
		return last;
	}
	return 0;
bad:
	if (err && errlen)
		snprintf(err, errlen, "--listen=%.200s: expected HOST:PORT",
			 hostport ? hostport : "");
	return -EINVAL;
}

int remote_listen_port(int fd, unsigned *port)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else if (ss.ss_family == AF_INET6)
		*port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	else
		return -EAFNOSUPPORT;
	return 0;
}

/* ---- responses ---------------------------------------------------------- */

static enum MHD_Result queue_text(struct remote_server *s, struct MHD_Connection *conn,
				  unsigned status, const char *text)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
					REMOTE_AUTH_SCHEME " realm=\"coordfs\"");
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET");
	if (status == MHD_HTTP_SERVICE_UNAVAILABLE) {
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
		atomic_fetch_add_explicit(&s->busy, 1, memory_order_relaxed);
	} else if (status == MHD_HTTP_CONFLICT) {
		atomic_fetch_add_explicit(&s->unavailable, 1, memory_order_relaxed);
	} else if (status == MHD_HTTP_PRECONDITION_FAILED) {
		atomic_fetch_add_explicit(&s->mismatched, 1, memory_order_relaxed);
	} else if (text == not_held_text) {
		atomic_fetch_add_explicit(&s->not_held, 1, memory_order_relaxed);
	} else if (status >= 400 && status < 500) {
		atomic_fetch_add_explicit(&s->rejected, 1, memory_order_relaxed);
	}
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result queue_strbuf(struct remote_server *s, struct MHD_Connection *conn,
				    struct strbuf *sb, const char *content_type)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (sb->failed) {
		strbuf_fini(sb);
		return queue_text(s, conn, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n");
	}
	if (sb->len == 0) {
		strbuf_fini(sb);
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	} else {
		r = MHD_create_response_from_buffer(sb->len, sb->buf, MHD_RESPMEM_MUST_FREE);
		if (!r)
			strbuf_fini(sb);
	}
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* A worker reads the slice a suspended body needs next, then resumes it. */
static void stream_fetch_run(struct remote_job *j, bool cancelled)
{
	struct stream *st = (struct stream *)((char *)j - offsetof(struct stream, job));
	struct remote_server *s = st->srv;

	slice_reset(&st->slice);
	st->fetch_rc =
	    cancelled ? -ECANCELED
		      : s->ops->read(s->arg, st->file_id, st->fetch_off, st->fetch_len, &st->slice);
	st->fetched = true;
	MHD_resume_connection(st->conn); /* st is MHD's again */
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	struct remote_server *s = st->srv;

	if (pos >= st->len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	uint64_t foff = st->start + pos;

	if (!st->have_slice || foff < st->slice_off || foff >= st->slice_off + st->slice.len) {
		uint64_t rest = st->len - pos;

		if (!st->fetched) {
			/* The read may block: a worker does it while the
			 * connection is suspended. Urgent: a body begun must
			 * not be cut for a full queue (each connection has at
			 * most one job); refused only while stopping. */
			if (st->have_slice)
				slice_release(&st->slice);
			st->have_slice = false;
			slice_reset(&st->slice);
			if (remote_workers_reserve(s->workers, true) != 0) {
				log_info("peer server: stopping, response for file %u cut short",
					 st->file_id);
				return MHD_CONTENT_READER_END_WITH_ERROR;
			}
			st->fetch_off = foff;
			st->fetch_len = rest > SIZE_MAX ? SIZE_MAX : (size_t)rest;
			MHD_suspend_connection(st->conn);
			remote_workers_push(s->workers, &st->job);
			return 0; /* called again once resumed */
		}
		st->fetched = false;
		if (st->fetch_rc != 0 || st->fetch_off != foff || st->slice.len == 0 ||
		    !st->slice.data) {
			if (st->fetch_rc == 0)
				slice_release(&st->slice);
			log_warn("peer server: read of file %u at %llu failed mid-response",
				 st->file_id, (unsigned long long)foff);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		st->have_slice = true;
		st->slice_off = foff;
	}
	uint64_t in = foff - st->slice_off;
	uint64_t n = st->slice.len - in;

	if (n > max)
		n = max;
	if (n > st->len - pos)
		n = st->len - pos;
	memcpy(buf, (const char *)st->slice.data + in, (size_t)n);
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	struct stream *st = cls;

	if (st->have_slice)
		slice_release(&st->slice);
	free(st);
}

/* Build the body response for [start, start+len) given the first slice,
 * which it consumes (released on every path). NULL on failure. */
static struct MHD_Response *body_response(struct remote_server *s, struct MHD_Connection *conn,
					  uint32_t file_id, uint64_t start, uint64_t len,
					  struct remote_slice *sl)
{
	struct MHD_Response *r = NULL;

	if (sl->len >= len) {
		if (!sl->release)
			return MHD_create_response_from_buffer((size_t)len, (void *)sl->data,
							       MHD_RESPMEM_PERSISTENT);
		r = MHD_create_response_from_buffer_with_free_callback_cls(
		    (size_t)len, (void *)sl->data, sl->release, sl->ctx);
		if (!r)
			slice_release(sl);
		return r;
	}
	struct stream *st = calloc(1, sizeof(*st));

	if (!st) {
		slice_release(sl);
		return NULL;
	}
	st->srv = s;
	st->conn = conn;
	st->job.run = stream_fetch_run;
	st->file_id = file_id;
	st->start = start;
	st->len = len;
	st->slice = *sl;
	st->slice_off = start;
	st->have_slice = true;
	r = MHD_create_response_from_callback(len, 32 * 1024, stream_read, st, stream_free);
	if (!r)
		stream_free(st);
	return r;
}

/* An If-Match value (RFC 9110 §13.1.1) against our strong ETag: absent
 * or "*" matches; else one of the comma-separated tags must be equal
 * (strong comparison, so a weak W/ tag never matches). */
static bool if_match_ok(const char *v, const char *etag)
{
	size_t el = strlen(etag);

	if (!v)
		return true;
	while (*v) {
		while (*v == ' ' || *v == '\t' || *v == ',')
			v++;
		const char *e = v;

		while (*e && *e != ',')
			e++;
		const char *t = e;

		while (t > v && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		if ((t - v == 1 && *v == '*') || ((size_t)(t - v) == el && memcmp(v, etag, el) == 0))
			return true;
		v = e;
	}
	return false;
}

/* The MAC of a file answer (remote/peer/auth.h) into mac, when the request
 * was signed; mac stays "" otherwise (no secret, or a Bearer request). */
static void reply_mac(struct remote_server *s, struct MHD_Connection *conn, unsigned status,
		      const char *etag, uint64_t start, uint64_t len, uint64_t size,
		      const void *body, char mac[REMOTE_REPLY_MAC_HEX + 1])
{
	if (!s->secret)
		return;
	if (remote_auth_reply_mac(s->secret, s->secret_len,
				  MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							      MHD_HTTP_HEADER_AUTHORIZATION),
				  status, etag, start, len, size, body, (size_t)len, mac) < 0)
		mac[0] = '\0';
}

/* A GET of a validated relative path (remote__relpath_check). */
static enum MHD_Result serve_path(struct remote_server *s, struct MHD_Connection *conn,
				  struct request *req, const char *path)
{
	char hdr[96];
	char etag[REMOTE_MAX_ETAG + 1] = "";
	uint32_t file_id = 0;
	uint64_t size = 0, start = 0, len = 0;
	struct remote_slice sl;
	struct MHD_Response *r;
	enum MHD_Result ret;
	unsigned status = MHD_HTTP_OK;
	int rc = s->ops->resolve(s->arg, path, &file_id, &size);

	if (rc == -ENOENT || rc == -EISDIR || rc == -ENOTDIR)
		return queue_text(s, conn, MHD_HTTP_NOT_FOUND, "not found\n");
	if (rc != 0)
		return queue_text(s, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "resolve failed\n");
	if (s->ops->etag) {
		rc = s->ops->etag(s->arg, file_id, etag, sizeof(etag));
		if (rc != 0 || etag[0] == '\0' || strlen(etag) >= sizeof(etag))
			return queue_text(s, conn, MHD_HTTP_CONFLICT,
					  "no snapshot of this file on this node\n");
		if (!if_match_ok(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_IF_MATCH),
				 etag))
			return queue_text(s, conn, MHD_HTTP_PRECONDITION_FAILED,
					  "this node holds another version of the file\n");
	}

	rc = remote__range_parse(
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE), size, &start,
	    &len);
	if (rc == -ERANGE) {
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		if (!r)
			return MHD_NO;
		snprintf(hdr, sizeof(hdr), "bytes */%llu", (unsigned long long)size);
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, hdr);
		atomic_fetch_add_explicit(&s->rejected, 1, memory_order_relaxed);
		ret = MHD_queue_response(conn, MHD_HTTP_RANGE_NOT_SATISFIABLE, r);
		MHD_destroy_response(r);
		return ret;
	}
	if (rc == 1) {
		status = MHD_HTTP_PARTIAL_CONTENT;
	} else {
		start = 0;
		len = size;
	}
	/* A forwarded request (a handoff) is answered only from what this
	 * node holds: never from SOURCE, never forwarded again. */
	if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, REMOTE_FORWARDED_HEADER) &&
	    (!s->ops->held || !s->ops->held(s->arg, file_id, start)))
		return queue_text(s, conn, MHD_HTTP_NOT_FOUND, not_held_text);
	char mac[REMOTE_REPLY_MAC_HEX + 1] = "";
	bool holds_buffer = false;
	if (len == 0) {
		reply_mac(s, conn, status, etag, start, len, size, "", mac);
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	} else {
		slice_reset(&sl);
		rc = s->ops->read(s->arg, file_id, start, len > SIZE_MAX ? SIZE_MAX : (size_t)len,
				  &sl);
		if (rc != 0 || sl.len == 0 || !sl.data) {
			if (rc == 0)
				slice_release(&sl);
			if (rc == -ENOENT)
				return queue_text(s, conn, MHD_HTTP_NOT_FOUND, "not found\n");
			if (rc == -ENOMEM || rc == -EAGAIN || rc == -EBUSY)
				return queue_text(s, conn, MHD_HTTP_SERVICE_UNAVAILABLE,
						  "no memory for this response now, retry\n");
			log_warn("peer server: read of %s failed: %s", path,
				 strerror(rc ? -rc : EIO));
			return queue_text(s, conn, MHD_HTTP_CONFLICT,
					  "this file cannot be read on this node (changed since "
					  "mount, or unreadable)\n");
		}
		/* A body sent from several slices goes unsigned (its requester,
		 * another node, asks one unit at a time, never such a range). */
		if (sl.len >= len)
			reply_mac(s, conn, status, etag, start, len, size, sl.data, mac);
		/* A buffer of the memory budget, held until the client has
		 * taken it all: timed (REMOTE_SERVER_SEND_DEADLINE_MS). */
		holds_buffer = sl.release != NULL && sl.len >= len;
		r = body_response(s, conn, file_id, start, len, &sl);
	}
	if (!r)
		return queue_text(s, conn, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory, retry\n");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
	if (etag[0])
		MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
	if (mac[0])
		MHD_add_response_header(r, REMOTE_REPLY_MAC_HEADER, mac);
	if (status == MHD_HTTP_PARTIAL_CONTENT) {
		snprintf(hdr, sizeof(hdr), "bytes %llu-%llu/%llu", (unsigned long long)start,
			 (unsigned long long)(start + len - 1), (unsigned long long)size);
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, hdr);
	}
	req->is_file = true;
	req->body_len = len;
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	if (ret == MHD_YES && holds_buffer)
		remote_conns_sending(s->conns, conn_of(conn));
	return ret;
}

/* "Bearer SECRET", the scheme in any case (RFC 9110 §11.1) and one or more
 * spaces after it. Constant time in the secret's length: the credentials
 * are copied into a buffer of exactly that length, then compared with
 * hash_ct_compare; a length mismatch is folded in without an early exit. */
static bool bearer_ok(const struct remote_server *s, const char *h)
{
	unsigned char got[REMOTE_MAX_SECRET];
	const size_t sl = sizeof(AUTH_SCHEME) - 1;
	size_t n;
	int diff;

	if (!h || strncasecmp(h, AUTH_SCHEME, sl) != 0 || h[sl] != ' ')
		return false;
	h += sl;
	while (*h == ' ')
		h++;
	n = strlen(h);
	memset(got, 0, s->secret_len);
	memcpy(got, h, n < s->secret_len ? n : s->secret_len);
	diff = hash_ct_compare(got, s->secret, s->secret_len);
	diff |= (n != s->secret_len);
	explicit_bzero(got, s->secret_len);
	return diff == 0;
}

/* A signed request (remote/peer/auth.h) over method, target and Range, within
 * the clock window and never seen before; "Bearer SECRET" only where
 * remote_server_accept_bearer allowed it. */
static bool auth_ok(struct remote_server *s, struct MHD_Connection *conn, const char *method,
		    const char *url)
{
	const char *h;
	struct timespec now;
	int rc;

	if (!s->secret)
		return true;
	h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (atomic_load_explicit(&s->accept_bearer, memory_order_relaxed) && bearer_ok(s, h))
		return true;
	clock_gettime(CLOCK_REALTIME, &now);
	rc = remote_auth_verify(s->secret, s->secret_len, h, method, url,
				MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							    MHD_HTTP_HEADER_RANGE),
				now.tv_sec, s->replay);
	if (rc == -ETIME || rc == -EALREADY)
		log_info("peer server: refused a signed request for %.200s: %s", url,
			 rc == -ETIME ? "its time is outside the window (clocks apart?)"
				      : "a replay");
	return rc == 0;
}

/* The path of a request target after FILES_PREFIX, decoded and validated
 * into path (REMOTE_MAX_RELPATH + 1 bytes): 0, or the status to answer. */
static unsigned decode_path(const char *encoded, char *path)
{
	int rc = remote__pct_decode(encoded, path, REMOTE_MAX_RELPATH + 1);

	if (rc == 0)
		rc = remote__relpath_check(path);
	return rc == 0 ? 0 : rc == -ENAMETOOLONG ? MHD_HTTP_URI_TOO_LONG : MHD_HTTP_BAD_REQUEST;
}

static enum MHD_Result serve_file(struct remote_server *s, struct MHD_Connection *conn,
				  struct request *req, const char *encoded)
{
	char path[REMOTE_MAX_RELPATH + 1];
	unsigned status = decode_path(encoded, path);

	if (status)
		return queue_text(s, conn, status,
				  status == MHD_HTTP_URI_TOO_LONG ? "path too long\n" : "bad path\n");
	return serve_path(s, conn, req, path);
}

/* ---- routes, on a worker (they call the filesystem's callbacks) ------------ */

/* Answer an authenticated GET; the connection is suspended meanwhile, and
 * MHD_queue_response on a suspended connection is allowed from any thread. */
static enum MHD_Result route(struct remote_server *s, struct MHD_Connection *conn,
			     struct request *req, const char *url)
{
	if (strncmp(url, FILES_PREFIX, sizeof(FILES_PREFIX) - 1) == 0)
		return serve_file(s, conn, req, url + sizeof(FILES_PREFIX) - 1);
	if (strcmp(url, "/v1/stats") == 0 && s->ops->stats_json) {
		struct strbuf sb;

		strbuf_init(&sb);
		s->ops->stats_json(s->arg, &sb);
		return queue_strbuf(s, conn, &sb, "application/json");
	}
	if (strcmp(url, "/metrics") == 0 && s->ops->metrics) {
		struct strbuf sb;

		strbuf_init(&sb);
		s->ops->metrics(s->arg, &sb);
		return queue_strbuf(s, conn, &sb, "text/plain; version=0.0.4; charset=utf-8");
	}
	return queue_text(s, conn, MHD_HTTP_NOT_FOUND, "not found\n");
}

static void request_run(struct remote_job *j, bool cancelled)
{
	struct request *req = (struct request *)((char *)j - offsetof(struct request, job));
	struct remote_server *s = req->srv;
	enum MHD_Result ret;

	if (cancelled)
		ret = queue_text(s, req->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "stopping\n");
	else
		ret = route(s, req->conn, req, req->url);
	req->failed = ret != MHD_YES;
	MHD_resume_connection(req->conn); /* req is MHD's again */
}

/* Hand the route to a worker: suspend the connection (after reserving room,
 * so that a refusal is answered here), queue it. A full queue is 503. */
static enum MHD_Result dispatch(struct remote_server *s, struct MHD_Connection *conn,
				struct request *req, const char *url)
{
	/* A file held in memory is answered here: a worker's hand-off would
	 * cost more than the answer (a suspend, a wake-up, a resume). */
	if (s->ops->ready && strncmp(url, FILES_PREFIX, sizeof(FILES_PREFIX) - 1) == 0) {
		char path[REMOTE_MAX_RELPATH + 1];

		if (decode_path(url + sizeof(FILES_PREFIX) - 1, path) == 0 &&
		    s->ops->ready(s->arg, path)) {
			atomic_fetch_add_explicit(&s->inline_answers, 1, memory_order_relaxed);
			return serve_path(s, conn, req, path);
		}
	}
	int rc = remote_workers_reserve(s->workers, false);

	if (rc != 0)
		return queue_text(s, conn, MHD_HTTP_SERVICE_UNAVAILABLE,
				  rc == -EBUSY ? "too many requests waiting, retry\n"
					       : "stopping\n");
	req->job.run = request_run;
	req->srv = s;
	req->conn = conn;
	req->url = url;
	MHD_suspend_connection(conn);
	remote_workers_push(s->workers, &req->job);
	return MHD_YES;
}

/* ---- connection slots (conns.c) ---------------------------------------------- */

static struct remote_conn *conn_of(struct MHD_Connection *mc)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct remote_server *s = cls;
	struct request *req = *con_cls;

	if (!req) {
		remote_conns_busy(s->conns, conn_of(conn));
		req = calloc(1, sizeof(*req));
		if (!req)
			return MHD_NO;
		*con_cls = req;
		/* A response queued before the request is complete makes MHD
		 * close the connection: answer GETs on the next call, keeping
		 * the connection alive. Anything else is refused right away. */
		if (strcmp(method, MHD_HTTP_METHOD_GET) == 0)
			return MHD_YES;
	}
	if (req->responded) {
		*upload_data_size = 0; /* discard any body */
		return req->failed ? MHD_NO : MHD_YES; /* MHD_NO closes */
	}
	req->responded = true;
	if (*upload_data_size != 0) {
		*upload_data_size = 0;
		return queue_text(s, conn, MHD_HTTP_BAD_REQUEST, "unexpected request body\n");
	}
	if (!auth_ok(s, conn, method, url))
		return queue_text(s, conn, MHD_HTTP_UNAUTHORIZED, "unauthorized\n");
	remote_conns_authed(s->conns, conn_of(conn));
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
		return queue_text(s, conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
	if (strlen(url) > REMOTE_MAX_REQUEST_URL)
		return queue_text(s, conn, MHD_HTTP_URI_TOO_LONG, "URI too long\n");
	return dispatch(s, conn, req, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct remote_server *s = cls;
	struct request *req = *con_cls;

	if (!req)
		return;
	if (req->is_file && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
		atomic_fetch_add_explicit(&s->served, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->served_bytes, req->body_len, memory_order_relaxed);
	}
	free(req);
	*con_cls = NULL;
	if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		remote_conns_idle(s->conns, conn_of(conn)); /* NOTIFY_CLOSED unlists it */
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct remote_server *s = cls;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		remote_conns_closed(s->conns, *socket_context);
		*socket_context = NULL;
		return;
	}
	if (toe != MHD_CONNECTION_NOTIFY_STARTED)
		return;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	*socket_context = remote_conns_opened(s->conns, ci ? ci->connect_fd : -1);
}

/* The path is decoded by serve_file, strictly; MHD must not decode it
 * first (its decoder would turn %00 into a silent truncation). */
static size_t unescape_none(void *cls, struct MHD_Connection *conn, char *s)
{
	return strlen(s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	if (LOG_INFO > log_threshold)
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\r\n")] = '\0';
	log_info("peer server: %s", line);
}

struct remote_server *remote_server_start(int listen_fd, const char *secret,
					  const struct remote_server_ops *ops, void *arg, char *err,
					  size_t errlen)
{
	struct remote_server *s;
	int mhd_fd;

	if (!ops || !ops->resolve || !ops->read || listen_fd < 0) {
		if (err && errlen)
			snprintf(err, errlen, "peer server: missing callbacks or socket");
		if (listen_fd >= 0)
			close(listen_fd);
		return NULL;
	}
	if (secret && strlen(secret) > REMOTE_MAX_SECRET) {
		if (err && errlen)
			snprintf(err, errlen, "peer server: secret longer than %d bytes",
				 REMOTE_MAX_SECRET);
		close(listen_fd);
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		goto nomem;
	s->ops = ops;
	s->arg = arg;
	if ((errno = -remote_conns_create(REMOTE_SERVER_HEADER_DEADLINE_MS, REMOTE_SERVER_IDLE_LIMIT,
					  REMOTE_SERVER_MAX_UNAUTH, &s->conns)) != 0)
		goto fail_errno;
	if ((errno = -remote_workers_create(REMOTE_SERVER_WORKERS, REMOTE_SERVER_QUEUE, STACK_SIZE,
					    &s->workers)) != 0)
		goto fail_errno;
	if (secret) {
		s->secret_len = strlen(secret);
		s->secret = strdup(secret);
		s->replay = remote_replay_create();
		if (!s->secret || !s->replay)
			goto nomem;
	}
	/* MHD gets its own descriptor, so that whatever it does with it on
	 * failure, ours is closed exactly once. */
	mhd_fd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 0);
	if (mhd_fd < 0)
		goto fail_errno;
	/* epoll loops (each of the pool's threads accepts and serves its own
	 * connections), suspend/resume for the workers. */
	s->daemon = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
		MHD_USE_ERROR_LOG,
	    0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)mhd_fd,
	    MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)REMOTE_SERVER_POLL_THREADS,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned int)REMOTE_SERVER_MAX_CONNECTIONS,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)REMOTE_SERVER_CONN_TIMEOUT_S,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)REMOTE_SERVER_CONN_MEMORY,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
	    on_connection, s, MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, NULL,
	    MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_THREAD_STACK_SIZE,
	    (size_t)STACK_SIZE, MHD_OPTION_END);
	if (!s->daemon) {
		if (err && errlen)
			snprintf(err, errlen, "peer server: libmicrohttpd failed to start");
		goto fail;
	}
	close(listen_fd);
	return s;
fail_errno:
	if (err && errlen)
		snprintf(err, errlen, "peer server: %s", strerror(errno));
	goto fail;
nomem:
	if (err && errlen)
		snprintf(err, errlen, "peer server: out of memory");
fail:
	if (s && s->secret)
		explicit_bzero(s->secret, s->secret_len);
	if (s) {
		free(s->secret);
		remote_replay_destroy(s->replay);
		remote_workers_destroy(s->workers);
		remote_conns_destroy(s->conns);
	}
	free(s);
	close(listen_fd);
	return NULL;
}

void remote_server_stop(struct remote_server *s)
{
	if (!s)
		return;
	/* libmicrohttpd must not stop with a suspended connection: the
	 * workers first answer what waits for them (503) and finish what they
	 * run (a read blocked on SOURCE is waited for), resuming each; then
	 * new requests and further slices are refused, without suspending.
	 * Connections report themselves closed while the daemon stops: the
	 * policy goes after it. */
	remote_workers_stop(s->workers);
	MHD_stop_daemon(s->daemon);
	remote_workers_destroy(s->workers);
	remote_conns_destroy(s->conns);
	if (s->secret)
		explicit_bzero(s->secret, s->secret_len);
	free(s->secret);
	remote_replay_destroy(s->replay);
	free(s);
}

void remote_server_accept_bearer(struct remote_server *s, bool on)
{
	if (s)
		atomic_store_explicit(&s->accept_bearer, on, memory_order_relaxed);
}

void remote_server_get_stats(const struct remote_server *s, struct remote_server_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	out->served = atomic_load_explicit(&s->served, memory_order_relaxed);
	out->served_bytes = atomic_load_explicit(&s->served_bytes, memory_order_relaxed);
	out->rejected = atomic_load_explicit(&s->rejected, memory_order_relaxed);
	struct remote_conns_stats cs;

	remote_conns_get_stats(s->conns, &cs);
	out->connections = cs.connections;
	out->dropped = cs.dropped;
	out->recycled = cs.recycled;
	out->slow_receivers = cs.slow_receivers;
	out->busy = atomic_load_explicit(&s->busy, memory_order_relaxed);
	out->unavailable = atomic_load_explicit(&s->unavailable, memory_order_relaxed);
	out->mismatched = atomic_load_explicit(&s->mismatched, memory_order_relaxed);
	out->not_held = atomic_load_explicit(&s->not_held, memory_order_relaxed);
	out->inline_answers = atomic_load_explicit(&s->inline_answers, memory_order_relaxed);
	out->open = cs.open;

	struct remote_workers_stats ws;

	remote_workers_get_stats(s->workers, &ws);
	out->queued = ws.queued;
	out->working = ws.running;
	out->queue_full = ws.refused;
}

void remote__server_set_header_deadline_ms(struct remote_server *s, unsigned ms)
{
	remote_conns_set_header_deadline_ms(s->conns, ms);
}

void remote__server_set_idle_limit(struct remote_server *s, unsigned n)
{
	remote_conns_set_idle_limit(s->conns, n);
}

void remote__server_set_queue_cap(struct remote_server *s, unsigned n)
{
	remote_workers_set_queue_cap(s->workers, n);
}

void remote__server_set_send_deadline_ms(struct remote_server *s, unsigned ms)
{
	remote_conns_set_send_deadline_ms(s->conns, ms);
}

void remote__server_set_max_unauth(struct remote_server *s, unsigned n)
{
	remote_conns_set_max_unauth(s->conns, n);
}
