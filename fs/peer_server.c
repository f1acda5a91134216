/* SPDX-License-Identifier: MIT */
/*
 * The peer node's lifecycle (coordfs(1), PEERS): the peer client and server
 * started and stopped, and the callbacks through which the server reads the
 * namespace, the cache and the statistics. The client side is peer.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/log.h"
#include "fs/cluster.h"
#include "fs/fs.h"
#include "fs/io.h"
#include "fs/peer_server.h"
#include "fs/snapshot.h"
#include "fs/source.h"
#include "fs/membership.h"
#include "fs/stats.h"
#include "remote/remote.h"

int fs_peer_configure(struct fs_ctx *fs, char *err, size_t errlen)
{
	struct fs_options *o = &fs->opt;
	struct stat st;
	int rc;

	struct remote_peers *peers = NULL;
	unsigned node = 0;

	if (!o->peers)
		return 0;
	if (strcmp(fs_membership_source(o->peers), "static") != 0) {
		char *list;

		struct fs_membership_args ma = { o->peers, o->node_name, o->listen, o->peer_port,
						 false };

		rc = fs_membership_resolve(&ma, &list, &node, err, (unsigned)errlen);
		if (rc < 0)
			return rc;
		rc = remote_peers_parse(list, &peers, err, errlen);
		if (rc == 0)
			log_msg(LOG_NOTICE, "--peers=%s: %u nodes, this one %u (%s)", o->peers,
				remote_peers_count(peers), node, remote_peers_url(peers, node));
		free(list);
		if (rc < 0)
			return rc;
	} else {
		rc = remote_peers_parse(o->peers, &peers, err, errlen);
		if (rc == 0)
			rc = remote_parse_node(o->node, peers, &node, err, errlen);
		if (rc < 0) {
			remote_peers_destroy(peers);
			return rc;
		}
	}
	/* The listening address is this node's own entry of the list taken at
	 * mount (or --listen): it stays while the list changes. */
	char where_buf[REMOTE_MAX_URL_LEN];
	snprintf(where_buf, sizeof(where_buf), "%s",
		 o->listen ? o->listen : remote_peers_hostport(peers, node));
	if ((rc = fs_cluster_init(fs, peers, node)) < 0)
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
	const char *where = where_buf;
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
	/* A peer may ask first: this node's snapshot is taken now. */
	if ((rc = fs_node_attrs(fs, node)) < 0)
		return rc;
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
	/* Only the file's own units: first + k past its count is another
	 * file's unit (a wrapped count would otherwise hand out its bytes). */
	if (k >= n->count)
		return -EINVAL;
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

/* Whether this node holds the unit at off (memory, or the disk tier): a
 * forwarded request (a handoff) is answered only then. */
static bool srv_held(void *arg, uint32_t file_id, uint64_t off)
{
	struct fs_ctx *fs = arg;
	const struct ns_node *n = &fs->ns.nodes[file_id];
	uint64_t k = off / fs->ns.chunk_size;

	if (off >= n->size || k >= n->count)
		return false;
	if (cache_holds(fs->cache, (uint64_t)n->first + k))
		return true;
	return fs_io_disk_holds(fs, file_id, (uint32_t)k);
}

/* Whether relpath can be answered without blocking: the namespace knows
 * the file's attributes (no stat of SOURCE) and the cache holds every unit
 * of it (never evicted, so it stays so). */
static bool srv_ready(void *arg, const char *relpath)
{
	struct fs_ctx *fs = arg;
	uint32_t node;

	if (ns_resolve(&fs->ns, relpath, &node) < 0 || !ns_is_reg(&fs->ns, node) ||
	    !ns_known(&fs->ns, node))
		return false;
	const struct ns_node *n = &fs->ns.nodes[node];
	for (uint32_t k = 0; k < n->count; k++)
		if (!cache_holds(fs->cache, (uint64_t)n->first + k))
			return false;
	return true;
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
	.held = srv_held,
	.ready = srv_ready,
};

int fs_peer_start(struct fs_ctx *fs)
{
	char err[256];
	int rc;

	if (!fs->cluster)
		return 0;
	if ((rc = remote_global_init()) < 0)
		return rc;
	/* One connection pool for the object store and the peers. */
	if ((rc = fs_cluster_start(fs, fs->src->ops->http_pool ? fs->src->ops->http_pool(fs->src)
							       : NULL)) < 0) {
		fs_cluster_fini(fs);
		remote_global_cleanup();
		return rc;
	}
	fs->server = remote_server_start(fs->listen_fd, fs->secret, &server_ops, fs, err,
					 sizeof(err));
	fs->listen_fd = -1; /* the server owns it now, even on failure */
	if (!fs->server) {
		log_err("peer server: %s", err);
		return -EIO;
	}
	if (fs->opt.accept_bearer) {
		remote_server_accept_bearer(fs->server, true);
		log_warn("peer server: --accept-bearer takes requests that carry the secret itself "
			 "(coordfs 0.1's protocol); drop it once every node signs its requests");
	}
	struct fs_gen *g = fs_gen_get(fs);
	log_msg(LOG_NOTICE, "node %u of %u, peer server up", g->node, remote_peers_count(g->peers));
	fs_gen_put(g);
	return 0;
}

void fs_peer_stop(struct fs_ctx *fs)
{
	remote_server_stop(fs->server);
	fs->server = NULL;
	if (fs->cluster) {
		bool started = fs_cluster_started(fs);

		fs_cluster_fini(fs);
		if (started)
			remote_global_cleanup(); /* fs_peer_start's init */
	}
	if (fs->listen_fd >= 0)
		close(fs->listen_fd);
	fs->listen_fd = -1;
	free(fs->secret);
	fs->secret = NULL;
}

