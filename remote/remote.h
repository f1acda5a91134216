/* SPDX-License-Identifier: MIT */
/*
 * remote/: the partitioned cache's peer layer. Three parts, none of which
 * knows FUSE or the cache (fs/ wires them together with callbacks):
 *
 *  - the peer list and ownership: `--peers`/`--node` parsing and
 *    rendezvous (highest-random-weight) hashing of (relative path, chunk)
 *    over the peer URLs, so that every node computes the same owner;
 *  - the server (libmicrohttpd): GET /v1/files/RELPATH with Range, ETag
 *    and If-Match, GET /v1/stats, GET /metrics, optional Bearer secret,
 *    connection slots kept for authenticated peers;
 *  - the client (libcurl): exact ranged fetches from the owner, checked
 *    against the caller's snapshot of the file (ETag and size), over a
 *    bounded pool of keep-alive connections, with an exponential back-off
 *    that marks a failing peer down so callers fall back to SOURCE.
 *
 * Conventions: 0 or -errno, results through out-parameters, error text
 * (one line naming the option or peer) through err/errlen where given.
 * See remote/peer/README.md for the protocol, caps and back-off.
 */
#ifndef COORDFS_REMOTE_REMOTE_H
#define COORDFS_REMOTE_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct strbuf;

/* ---- hard caps ---------------------------------------------------------- */

#define REMOTE_MAX_PEERS 1024		  /* entries in --peers */
#define REMOTE_MAX_URL_LEN 256		  /* one peer URL */
#define REMOTE_MAX_RELPATH 4096		  /* decoded relative path, bytes */
#define REMOTE_MAX_NAME 255		  /* one path component, bytes */
#define REMOTE_MAX_REQUEST_URL 16384	  /* raw request target, bytes */
#define REMOTE_MAX_SECRET 1024		  /* secret, bytes */
#define REMOTE_MAX_ETAG 128		  /* one ETag, quotes included, bytes */
/* Open connections the peer server holds. They are not threads: a few
 * epoll loops hold them all (an idle one costs its libmicrohttpd state,
 * about REMOTE_SERVER_CONN_MEMORY once it served a request), so the
 * keep-alive connections of 1,000 peers fit in ~36 MiB; beyond the idle
 * limit the least recently used idle ones make room. */
#define REMOTE_SERVER_MAX_CONNECTIONS 4096
/* Event-loop threads (libmicrohttpd's epoll thread pool): parse requests,
 * check authentication, send answers; never wait on storage. */
#define REMOTE_SERVER_POLL_THREADS 4
/* Worker threads: run the routes, whose callbacks (resolve, read, stats)
 * may block on SOURCE; a blocked read holds one worker, not a loop. */
#define REMOTE_SERVER_WORKERS 16
/* Requests waiting for a worker; over this, 503 + Retry-After (the peer
 * reads SOURCE itself, without marking this node down). As many as 1,000
 * peers asking at once fit; more than that would wait longer than reading
 * SOURCE, since a full queue means storage is the bottleneck. */
#define REMOTE_SERVER_QUEUE 1024
/* Connections that have not yet sent a complete, authenticated request
 * (every new one). Over this, the oldest of them is dropped, so a flood of
 * idle or trickling connections never holds the slots peers need. As
 * many as 1,000 peers may connect at once (a cluster starting): their
 * connections are on this list between accept and their request's
 * headers, and must not push each other out; a silent one costs a few
 * KiB, not a thread. */
#define REMOTE_SERVER_MAX_UNAUTH 1024
/* Open connections over which a new one closes the least recently used
 * idle keep-alive connection, so peers' idle connections never fill the
 * cap: leaves room for the unauthenticated ones and a burst of new peers. */
#define REMOTE_SERVER_IDLE_LIMIT (REMOTE_SERVER_MAX_CONNECTIONS - REMOTE_SERVER_MAX_UNAUTH - 32)
/* Whole time a connection has to send one authenticated request (its
 * headers complete) before it is dropped: defeats a header trickle. */
#define REMOTE_SERVER_HEADER_DEADLINE_MS 5000
#define REMOTE_SERVER_CONN_TIMEOUT_S 30	      /* idle keep-alive / stalled client */
/* A response that holds a buffer of the memory budget (a unit not in the
 * cache) must be taken by its client within this: three times the
 * client's whole-request timeout, after which an honest client has given
 * up. A peer that stopped reading (SIGSTOP, a dying host) or reads a byte
 * at a time would otherwise hold the buffer as long as bytes trickle. */
#define REMOTE_SERVER_SEND_DEADLINE_MS 15000
/* libmicrohttpd's pool per connection: request line + headers (a 16 KiB
 * target and its signed headers fit), then the answer's headers. A
 * kept-alive connection holds all of it once it served a request
 * (measured: 64 KiB made 1,000 connections cost 66 MiB, 32 KiB 36). */
#define REMOTE_SERVER_CONN_MEMORY (32 * 1024)
#define REMOTE_CLIENT_MAX_HANDLES 32	      /* default concurrent fetches (= connections per peer) */
#define REMOTE_CLIENT_CONNS_PER_HANDLE 64  /* keep-alive connections one handle keeps */

/* ---- peer list and ownership -------------------------------------------- */

struct remote_peers; /* opaque, immutable once parsed: thread-safe to share */

/* Parse a comma-separated `--peers` value. Each URL must be
 * http://HOST:PORT with an optional trailing slash (no path, no user info,
 * no https). HOST is a name, an IPv4 address or [IPv6]. The scheme and
 * host are lower-cased and the slash dropped, so the normalized URLs (and
 * hence ownership) are the same on every node. Duplicates are refused.
 * Returns 0 and *out (free with remote_peers_destroy), or -EINVAL with a
 * message in err, or -ENOMEM. */
int remote_peers_parse(const char *list, struct remote_peers **out, char *err, size_t errlen);
void remote_peers_destroy(struct remote_peers *p);

unsigned remote_peers_count(const struct remote_peers *p);
/* Normalized URL of node k ("http://host:port"), or NULL when k is out of
 * range. Valid as long as p. */
const char *remote_peers_url(const struct remote_peers *p, unsigned k);
/* "host:port" of node k (IPv6 keeps its brackets), the default `--listen`. */
const char *remote_peers_hostport(const struct remote_peers *p, unsigned k);

/* The index of the node whose normalized URL is url ("http://host:port",
 * as remote_peers_url gives it), or -1. Linear: for membership changes,
 * not per read. */
int remote_peers_find(const struct remote_peers *p, const char *url);

/* Parse `--node=K` against the list: a decimal index < count.
 * 0, or -EINVAL with a message. */
int remote_parse_node(const char *s, const struct remote_peers *p, unsigned *node, char *err,
		      size_t errlen);

/* The key of one cacheable unit: relpath (relative to SOURCE, no leading
 * slash, len bytes) mixed with the chunk index (0 for whole files).
 * Stable across machines and builds. */
uint64_t remote_unit_key(const char *relpath, size_t len, uint64_t chunk);

/* The owner of key: the node whose weight hash(key, url) is highest.
 * Depends only on the URL strings, not on their order or on this node.
 * Returns 0 for a NULL or empty list. Lock-free, thread-safe. */
unsigned remote_owner(const struct remote_peers *p, uint64_t key);
/* The owner key would have if node skip were not in the list: for a node
 * that joined, the unit's owner before it came (rendezvous hashing moves
 * to a new node only units it takes from their owner then). UINT_MAX when
 * skip is the only node. */
unsigned remote_owner_without(const struct remote_peers *p, uint64_t key, unsigned skip);

/* Read a secret file: at most REMOTE_MAX_SECRET bytes, trailing
 * whitespace (newline) removed, must be non-empty printable ASCII without
 * spaces. It must be a regular file (links followed) of this user or root:
 * -EINVAL for a FIFO or a device, -EPERM for another user's file. Returns 0
 * and *secret (free() it), or -errno with a message. */
int remote_secret_read(const char *path, char **secret, char *err, size_t errlen);

/* ---- server -------------------------------------------------------------- */

/* A piece of file data (data, len) handed to the server by the read
 * callback. release(ctx), when set, is called exactly once when the server
 * no longer needs the slice; a slice without release must stay valid for
 * the server's lifetime (e.g. it points into the never-evicting cache
 * arena) and is sent without a copy. The server sets every field to zero
 * before each call. */
struct remote_slice {
	const void *data;
	size_t len;
	void (*release)(void *ctx);
	void *ctx;
};

/* Callbacks, called concurrently from the server's worker threads
 * (REMOTE_SERVER_WORKERS, 1 MiB stacks; they may block on SOURCE). */
struct remote_server_ops {
	/* Look up a validated relative path (no leading '/', no "." or ".."
	 * components, no empty components, no NUL) in the namespace.
	 * 0 with *file_id and *size, -ENOENT, -EISDIR, or another -errno. */
	int (*resolve)(void *arg, const char *relpath, uint32_t *file_id, uint64_t *size);
	/* Read-through: give bytes [off, off+len) of the file, or a prefix
	 * of them (at least 1 byte); the server asks again for the rest.
	 * 0, or -errno with
	 * nothing left to release: -ENOENT answers 404; -ENOMEM, -EAGAIN
	 * or -EBUSY (no memory for it now) 503; anything else is a failure
	 * of this one file (e.g. it changed since mount): 409. A failure
	 * after the first slice cuts the body short. */
	int (*read)(void *arg, uint32_t file_id, uint64_t off, size_t len,
		    struct remote_slice *out);
	/* Optional: the file's snapshot ETag (quoted, NUL-terminated, fewer
	 * than len bytes) into buf; 0 or -errno. When set, every file
	 * response carries it and an If-Match naming another gets 412. */
	int (*etag)(void *arg, uint32_t file_id, char *buf, size_t len);
	/* Optional: whether this node holds the unit of the file at off now
	 * (memory or disk), so that answering needs no read of SOURCE. A
	 * request marked "Coordfs-Forwarded: held" (a new owner asking the
	 * previous one for a unit after a membership change) is answered only
	 * when it does, else 404: it is never read from SOURCE nor forwarded
	 * again. Without the callback such requests always get 404. */
	bool (*held)(void *arg, uint32_t file_id, uint64_t off);
	/* Optional: whether a file request for this validated relative path
	 * can be answered without anything that may block: the namespace
	 * knows the file and every byte of it is in memory. Must not block
	 * itself. The event loop then answers it directly, without handing it
	 * to a worker (what a peer mostly asks of a warm cluster). */
	bool (*ready)(void *arg, const char *relpath);
	/* Append the statistics JSON object (coordfs(1), STATISTICS) to out. */
	void (*stats_json)(void *arg, struct strbuf *out);
	/* Append Prometheus text (format 0.0.4) to out. */
	void (*metrics)(void *arg, struct strbuf *out);
};

struct remote_server;

struct remote_server_stats {
	uint64_t served;       /* file requests answered 200/206 to completion */
	uint64_t served_bytes; /* body bytes of those */
	uint64_t rejected;     /* 4xx answers (auth, bad path, unknown route) */
	uint64_t connections;  /* TCP connections accepted */
	uint64_t dropped;      /* unauthenticated connections closed (deadline, cap) */
	uint64_t recycled;     /* idle keep-alive connections closed to make room */
	uint64_t slow_receivers; /* connections closed for not taking a buffered
				    response within REMOTE_SERVER_SEND_DEADLINE_MS */
	uint64_t busy;	       /* 503 answers: no memory for the response now */
	uint64_t unavailable;  /* 409 answers: the file failed on this node */
	uint64_t mismatched;   /* 412 answers: If-Match named another snapshot */
	uint64_t not_held;     /* 404 answers to forwarded requests for units not held */
	uint64_t inline_answers; /* file requests the event loop answered itself (ops->ready) */
	uint64_t open;	       /* connections open now */
	uint64_t queued;       /* requests waiting for a worker now */
	uint64_t working;      /* requests a worker is serving now */
	uint64_t queue_full;   /* 503 answers because REMOTE_SERVER_QUEUE were waiting (in busy) */
};

/* Bind and listen on "HOST:PORT" (IPv4, name, or [IPv6]; empty HOST or
 * "*" = all interfaces; PORT 0 = any free port). Call this before
 * daemonizing; start the server (threads) after. *fd is non-blocking and
 * close-on-exec. 0, or -errno with a message naming hostport. */
int remote_listen(const char *hostport, int *fd, char *err, size_t errlen);
/* The local port of a listening socket (useful after port 0). */
int remote_listen_port(int fd, unsigned *port);

/* Start serving on listen_fd, which the server takes over in every case
 * (closed on failure, or later by remote_server_stop). secret NULL means
 * no authentication: anyone who reaches the port can read the dataset.
 * ops and arg must outlive the server; stats_json/metrics may be NULL
 * (the route then answers 404). Returns NULL with a message on failure. */
struct remote_server *remote_server_start(int listen_fd, const char *secret,
					  const struct remote_server_ops *ops, void *arg, char *err,
					  size_t errlen);
/* Also take "Authorization: Bearer SECRET" (the protocol of coordfs 0.1,
 * which sent the secret itself in every request), besides signed requests;
 * off by default (--accept-bearer). For one release, for clusters that
 * mix versions. */
void remote_server_accept_bearer(struct remote_server *s, bool on);
/* Stop: answers requests still queued 503, waits for the reads running,
 * closes every connection and the socket, joins the threads. NULL ok. */
void remote_server_stop(struct remote_server *s);
void remote_server_get_stats(const struct remote_server *s, struct remote_server_stats *out);

/* ---- client -------------------------------------------------------------- */

struct remote_client;

/* Zero fields take the defaults in brackets. */
struct remote_client_config {
	unsigned connect_timeout_ms; /* [500] */
	unsigned timeout_ms;	     /* [5000] whole request */
	unsigned backoff_min_ms;     /* [1000] first down period */
	unsigned backoff_max_ms;     /* [30000] doubling stops here */
	unsigned max_handles;	     /* [REMOTE_CLIENT_MAX_HANDLES] concurrent fetches
					(with a pool of its own) */
	/* The connection pool to take handles from, shared with the object
	 * store's client (remote/http.h); it must outlive the client. NULL:
	 * the client makes its own of max_handles. */
	struct remote_http *pool;
	/* A peer that answers, but always slowly, is as bad as one that is
	 * down: every read of its files waits. An answer (bytes, or a 404,
	 * 412, 409 or 503 about one file) is slow when it took more than
	 * slow_ms [timeout_ms / 5] plus 1 ms per 64 KiB of body (a floor of
	 * 64 MiB/s for large units), and more than 4 times what the caller
	 * says SOURCE would take (remote_expect.source_ms). slow_streak [3]
	 * slow answers in a row mark the node down for a back-off period as
	 * a failure does; one fast answer resets the run, so a single slow
	 * read (a cold unit the owner reads through) never demotes it. */
	unsigned slow_ms;
	unsigned slow_streak;
};

struct remote_client_stats {
	uint64_t fetches; /* requests sent */
	uint64_t bytes;	  /* bytes received by successful fetches */
	uint64_t errors;  /* failed requests */
	uint64_t skipped; /* calls answered -EHOSTDOWN without a request */
	uint64_t mismatches;  /* answers about another snapshot of the file */
	uint64_t unavailable; /* 409/503 answers and pool waits that timed out */
	uint64_t slow_answers; /* answers that took too long (see slow_ms) */
	uint64_t slow_downs;   /* nodes marked down for answering slowly */
};

/* libcurl's global state (curl_global_init/cleanup, counted: every
 * successful init is paired with one cleanup, after its user is gone).
 * init: 0/-EIO. It installs allocators that zero every block libcurl and
 * jansson free (their copies of credentials), process-wide. */
int remote_global_init(void);
void remote_global_cleanup(void);
/* Blocks wiped so far by those allocators (for the tests). */
uint64_t remote__wiped_frees(void);

/* peers must outlive the client. secret may be NULL; cfg may be NULL.
 * 0 and *out, or -ENOMEM/-EIO. */
int remote_client_create(const struct remote_peers *peers, const char *secret,
			 const struct remote_client_config *cfg, struct remote_client **out);
/* Frees the pooled handles. No fetch may be running. NULL ok. */
void remote_client_destroy(struct remote_client *c);

/* What the caller knows of the file: its snapshot's size and ETag (as
 * the owner's fs would name it, quotes included). */
/* The request header that marks a forwarded request (remote_expect's
 * held_only): "Coordfs-Forwarded: held". */
#define REMOTE_FORWARDED_HEADER "Coordfs-Forwarded"

struct remote_expect {
	uint64_t size;
	const char *etag;
	/* Ask only for what the node holds (a handoff, see
	 * remote_server_ops.held): the request is marked forwarded, and a node
	 * that does not hold the unit answers 404 (-ENOENT) instead of reading
	 * SOURCE. Its failures never mark the node down (reads do). */
	bool held_only;
	/* The whole request's limit in ms instead of the client's timeout_ms
	 * (0: that one): a handoff answered from memory is quick or not worth
	 * waiting for. */
	unsigned timeout_ms;
	/* What reading these bytes from SOURCE takes on this node, in ms (an
	 * estimate; 0: unknown): an answer is slow only when it took more
	 * than 4 times this (remote_client_config.slow_ms). */
	unsigned source_ms;
};

/* Read bytes [off, off+len) of relpath from node's server into buf,
 * checked against exp: the request carries If-Match: exp->etag, and the
 * answer must name the same ETag and, in its Content-Range (or a 200's
 * length), the same total size; else it is another version of the file.
 * Returns len exactly, or a negative errno (buf contents then unspecified):
 * -EHOSTDOWN (node in back-off, no request made), -ECONNREFUSED,
 * -ETIMEDOUT, -ENOENT (404), -EACCES (401), -EPROTO (wrong status, length
 * or range), -EIO, -EINVAL (bad arguments); and, leaving the node up,
 * -ESTALE (412 or ETag/size mismatch: "not the same file", counted in
 * `mismatches`), -EREMOTEIO (409: the owner cannot read this file),
 * -EBUSY (503, or no pooled connection free within the timeout).
 * Every other failure but -ENOENT and -EINVAL marks the node down.
 * Blocks up to the timeout. Thread-safe: handles come from a bounded pool,
 * so at most max_handles connections go to each peer. */
ssize_t remote_fetch_verified(struct remote_client *c, unsigned node, const char *relpath,
			      uint64_t off, size_t len, const struct remote_expect *exp,
			      void *buf);
/* The same without a snapshot to check against (exp NULL): any version of
 * the file is accepted. Only for tools and tests; the filesystem always
 * uses remote_fetch_verified. */
ssize_t remote_fetch(struct remote_client *c, unsigned node, const char *relpath, uint64_t off,
		     size_t len, void *buf);

/* Carry what src learned into dst, a client for a new membership of the
 * same cluster: its counters (so statistics keep counting across
 * membership changes) and the back-off of each node whose URL is in both.
 * src may still be fetching; a count it adds later is not carried. */
void remote_client_inherit(struct remote_client *dst, const struct remote_client *src);

/* false while node is in back-off. Lock-free. */
bool remote_node_up(const struct remote_client *c, unsigned node);
/* true while node is in a back-off it earned by answering slowly. */
bool remote_node_slow(const struct remote_client *c, unsigned node);
const char *remote_node_url(const struct remote_client *c, unsigned node);
void remote_client_get_stats(const struct remote_client *c, struct remote_client_stats *out);

/* ---- statistics output ----------------------------------------------------- */

/* The "peers" object of the statistics (coordfs(1), STATISTICS):
 * {"fetches": .., "bytes": .., "errors": .., "skipped": .., "mismatches": ..,
 * "unavailable": .., "served": .., "served_bytes": .., "rejected": ..,
 * "dropped": .., "nodes": [{"url": "...", "up": true}, ...]}, as a jansson
 * tree (a new reference; NULL when out of memory) for callers composing a
 * larger document. c or s may be NULL (counters 0, nodes []). Strings are
 * made valid UTF-8 (U+FFFD for ill-formed bytes). */
struct json_t;
struct json_t *remote_stats_json_value(const struct remote_client *c,
				       const struct remote_server *s);
/* The same, for a document that must stay small (the stats xattr, at most
 * 64 KiB, whatever the cluster's size and its host names): "nodes" lists
 * only the nodes not up, at most listed_max of them, each with its "index"
 * in --peers, and "nodes_listed": "not_up" says so. Both forms carry
 * "node_count" and "nodes_up". */
struct json_t *remote_stats_json_summary(const struct remote_client *c,
					 const struct remote_server *s, unsigned listed_max);

/* The same object appended to out as text. */
void remote_stats_json(const struct remote_client *c, const struct remote_server *s,
		       struct strbuf *out);
/* Append Prometheus lines (coordfs_peer_*) for the same counters and a
 * coordfs_peer_up{url="..."} gauge per node. c or s may be NULL. */
void remote_metrics(const struct remote_client *c, const struct remote_server *s,
		    struct strbuf *out);

#endif
