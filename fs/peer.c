/* SPDX-License-Identifier: MIT */
/*
 * fs/'s side of the partitioned cache (coordfs(1), PEERS): ownership of units by
 * rendezvous hashing, fetches from owners with fallback to SOURCE, and the
 * callbacks through which the peer server reads the namespace and cache.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "fs/fs.h"
#include "fs/peer.h"
#include "fs/source.h"
#include "fs/snapshot.h"
#include "fs/stats.h"
#include "remote/remote.h"

int fs_peer_configure(struct fs_ctx *fs, char *err, size_t errlen)
{
	struct fs_options *o = &fs->opt;
	struct stat st;
	int rc;

	if (!o->peers)
		return 0;
	rc = remote_peers_parse(o->peers, &fs->peers, err, errlen);
	if (rc < 0)
		return rc;
	rc = remote_parse_node(o->node, fs->peers, &fs->node, err, errlen);
	if (rc < 0)
		return rc;
	if (o->secret_file) {
		rc = remote_secret_read(o->secret_file, &fs->secret, err, errlen);
		if (rc < 0)
			return rc;
		if (stat(o->secret_file, &st) == 0 && (st.st_mode & 077))
			fprintf(stderr,
				"coordfs: warning: secret file '%s' is readable by group or others "
				"(chmod 600 it)\n",
				o->secret_file);
	}
	const char *where = o->listen ? o->listen : remote_peers_hostport(fs->peers, fs->node);
	rc = remote_listen(where, &fs->listen_fd, err, errlen);
	if (rc < 0)
		return rc;
	if (!fs->secret)
		log_msg(LOG_NOTICE,
			"peer server on %s has no --secret-file: anyone who can reach it can read "
			"the dataset",
			where);
	return 0;
}

static int unit_relpath(struct fs_ctx *fs, uint32_t node, char *buf, size_t len)
{
	return ns_path(&fs->ns, node, buf, len);
}

static unsigned unit_owner(struct fs_ctx *fs, uint32_t node, uint32_t k)
{
	char path[PATH_MAX];
	int len = unit_relpath(fs, node, path, sizeof(path));

	if (len < 0)
		return fs->node; /* unreachable for a scanned tree: keep it local */
	return remote_owner(fs->peers, remote_unit_key(path, (size_t)len, k));
}

bool fs_peer_owns(struct fs_ctx *fs, uint32_t node, uint32_t k)
{
	if (!fs->peers)
		return true;
	return unit_owner(fs, node, k) == fs->node;
}

/* 1, 2, 4, 8, ...: log the first of a repeating event, then ever fewer. */
static bool power_of_two(uint64_t n)
{
	return n && (n & (n - 1)) == 0;
}

int fs_peer_fetch(struct fs_ctx *fs, uint32_t node, uint32_t k, uint64_t uoff, size_t len,
		  void *buf)
{
	char path[PATH_MAX];
	char etag[REMOTE_MAX_ETAG + 1];

	if (!fs->client)
		return -ENOTSUP;
	int plen = unit_relpath(fs, node, path, sizeof(path));
	if (plen < 0)
		return plen;
	unsigned owner = remote_owner(fs->peers, remote_unit_key(path, (size_t)plen, k));
	if (owner == fs->node)
		return -EINVAL;
	int rc = fs_snapshot_etag(fs, node, etag, sizeof(etag));
	if (rc < 0)
		return rc;
	/* Only bytes of the very snapshot this node took are accepted: the
	 * owner's ETag and total size must be ours, else SOURCE is read. */
	const struct remote_expect exp = {.size = fs->ns.nodes[node].size, .etag = etag};
	ssize_t n = remote_fetch_verified(fs->client, owner, path,
					  (uint64_t)k * fs->ns.chunk_size + uoff, len, &exp, buf);
	if (n == (ssize_t)len)
		return 0;
	fs_count(&fs->ctr.peer_fallbacks, 1);
	/* A failure that marks the peer down is logged once: later reads skip it
	 * (-EHOSTDOWN) until it is probed again. A 404 (mismatched datasets)
	 * leaves it up and would repeat for every read: debug only. So would
	 * a file that differs between the nodes, or that the owner cannot
	 * read: logged on the 1st, 2nd, 4th, 8th... occurrence. */
	if (n == -ENOENT) {
		log_debug("%s: peer %s does not have it; reading SOURCE instead", path,
			  remote_node_url(fs->client, owner));
	} else if (n == -ESTALE || n == -EREMOTEIO || n == -EBUSY) {
		struct remote_client_stats cs;

		remote_client_get_stats(fs->client, &cs);
		if (power_of_two(n == -ESTALE ? cs.mismatches : cs.unavailable))
			log_warn("%s: peer %s %s; reading SOURCE instead (peer stays up)", path,
				 remote_node_url(fs->client, owner),
				 n == -ESTALE ? "holds another version of it (size or mtime differ)"
				 : n == -EBUSY ? "is busy"
					       : "cannot read it");
		else
			log_debug("%s: peer %s: %s; reading SOURCE instead", path,
				  remote_node_url(fs->client, owner), strerror((int)-n));
	} else if (n != -EHOSTDOWN)
		log_warn("%s: fetch from peer %s failed (%s); reading SOURCE instead", path,
			 remote_node_url(fs->client, owner), strerror(n < 0 ? (int)-n : EPROTO));
	return n < 0 ? (int)n : -EPROTO;
}

/* ---- server callbacks ---- */

static int srv_resolve(void *arg, const char *relpath, uint32_t *file_id, uint64_t *size)
{
	struct fs_ctx *fs = arg;
	uint32_t node;
	int rc = ns_resolve(&fs->ns, relpath, &node);

	if (rc < 0)
		return -ENOENT;
	if (ns_is_dir(&fs->ns, node))
		return -EISDIR;
	if (!ns_is_reg(&fs->ns, node))
		return -ENOENT;
	*file_id = node;
	*size = fs->ns.nodes[node].size;
	return 0;
}

/* How long a peer's request waits for room in the budget before 503. */
#define SRV_MEM_WAIT_MS 200

/* A response buffer charged to fs->mem, freed (and uncharged) by the
 * server when the response is gone. */
struct srv_buf {
	struct fs_ctx *fs;
	size_t size; /* bytes charged, header included */
	char data[];
};

static void srv_buf_release(void *ctx)
{
	struct srv_buf *b = ctx;
	struct fs_ctx *fs = b->fs;

	budget_free(&fs->mem, b, b->size);
	budget_trim(&fs->mem);
}

static int srv_read(void *arg, uint32_t file_id, uint64_t off, size_t len,
		    struct remote_slice *out)
{
	struct fs_ctx *fs = arg;
	const struct ns_node *n = &fs->ns.nodes[file_id];

	if (off >= n->size)
		return -EINVAL;
	/* One unit at a time: the server asks again for the rest. */
	uint64_t k = off / fs->ns.chunk_size;
	uint64_t unit_end = (k + 1) * fs->ns.chunk_size;
	if (unit_end > n->size)
		unit_end = n->size;
	if (len > unit_end - off)
		len = (size_t)(unit_end - off);
	const void *direct;
	ssize_t got;
	if (cache_holds(fs->cache, (uint64_t)n->first + k) &&
	    cache_get(fs->cache, (uint64_t)n->first + k, ns_unit_len(&fs->ns, file_id, (uint32_t)k),
		      len, false, NULL, NULL, &direct) == 0) {
		/* Held by the cache, which never evicts: sent without a copy
		 * and without a buffer (admit=false never fills). */
		out->data = (const char *)direct + (off - k * fs->ns.chunk_size);
		out->len = len;
		return 0;
	}
	/* Not held: a buffer for the unit's bytes, charged to the one budget;
	 * when it stays full, the peer is told to come back (503). */
	size_t size = sizeof(struct srv_buf) + len;
	struct srv_buf *b = budget_malloc(&fs->mem, size, SRV_MEM_WAIT_MS);
	if (!b)
		return -EBUSY;
	b->fs = fs;
	b->size = size;
	got = fs_read_file_local(fs, file_id, off, len, b->data, &direct);
	if (got <= 0 || direct) {
		budget_free(&fs->mem, b, size);
		if (got > 0) {
			out->data = direct; /* admitted meanwhile */
			out->len = (size_t)got;
			return 0;
		}
		return got < 0 ? (int)got : -EIO;
	}
	out->data = b->data;
	out->len = (size_t)got;
	out->release = srv_buf_release;
	out->ctx = b;
	return 0;
}

static int srv_etag(void *arg, uint32_t file_id, char *buf, size_t len)
{
	return fs_snapshot_etag(arg, file_id, buf, len);
}

/* Peers get the counters, not where SOURCE lives nor the daemon's pid. */
static void srv_stats(void *arg, struct strbuf *out)
{
	fs_stats_json_peer(arg, out);
}

static void srv_metrics(void *arg, struct strbuf *out)
{
	fs_stats_metrics(arg, out);
}

static const struct remote_server_ops server_ops = {
	.resolve = srv_resolve,
	.read = srv_read,
	.stats_json = srv_stats,
	.metrics = srv_metrics,
	.etag = srv_etag,
};

int fs_peer_start(struct fs_ctx *fs)
{
	char err[256];
	int rc;

	if (!fs->peers)
		return 0;
	if ((rc = remote_global_init()) < 0)
		return rc;
	/* One connection pool for the object store and the peers. */
	struct remote_client_config cfg = {
		.pool = fs->src->ops->http_pool ? fs->src->ops->http_pool(fs->src) : NULL,
	};
	if ((rc = remote_client_create(fs->peers, fs->secret, &cfg, &fs->client)) < 0)
		return rc;
	fs->server = remote_server_start(fs->listen_fd, fs->secret, &server_ops, fs, err,
					 sizeof(err));
	fs->listen_fd = -1; /* the server owns it now, even on failure */
	if (!fs->server) {
		log_err("peer server: %s", err);
		return -EIO;
	}
	log_msg(LOG_NOTICE, "node %u of %u, peer server up", fs->node,
		remote_peers_count(fs->peers));
	return 0;
}

void fs_peer_stop(struct fs_ctx *fs)
{
	remote_server_stop(fs->server);
	fs->server = NULL;
	remote_client_destroy(fs->client);
	fs->client = NULL;
	if (fs->listen_fd >= 0)
		close(fs->listen_fd);
	fs->listen_fd = -1;
	remote_peers_destroy(fs->peers);
	fs->peers = NULL;
	free(fs->secret);
	fs->secret = NULL;
}

void fs_peer_collect(struct fs_ctx *fs, struct fs_stats *s)
{
	if (fs->client) {
		struct remote_client_stats cs;
		remote_client_get_stats(fs->client, &cs);
		s->peer_fetches = cs.fetches;
		s->peer_bytes = cs.bytes;
		s->peer_errors = cs.errors;
		s->peer_mismatches = cs.mismatches;
		s->peer_unavailable = cs.unavailable;
		s->peer_fallbacks = atomic_load_explicit(&fs->ctr.peer_fallbacks,
							 memory_order_relaxed);
	}
	if (fs->server) {
		struct remote_server_stats ss;
		remote_server_get_stats(fs->server, &ss);
		s->peer_served = ss.served;
		s->peer_served_bytes = ss.served_bytes;
	}
}

void fs_peer_nodes_json(struct fs_ctx *fs, struct strbuf *sb)
{
	if (fs->client)
		remote_peers_json(fs->client, sb);
	else
		strbuf_puts(sb, "[]");
}

void fs_peer_metrics(struct fs_ctx *fs, struct strbuf *sb)
{
	remote_metrics(fs->client, fs->server, sb);
}
