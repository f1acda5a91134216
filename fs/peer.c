/* SPDX-License-Identifier: MIT */
/*
 * fs/'s client side of the partitioned cache (coordfs(1), PEERS): ownership
 * of units by rendezvous hashing, fetches from owners with fallback to
 * SOURCE, and the peer counters. The server side is peer_server.c.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "common/log.h"
#include "fs/cluster.h"
#include "fs/counters.h"
#include "fs/fs.h"
#include "fs/peer.h"
#include "fs/snapshot.h"
#include "fs/source.h"
#include "remote/remote.h"

static int unit_relpath(struct fs_ctx *fs, uint32_t node, char *buf, size_t len)
{
	return ns_path(&fs->ns, node, buf, len);
}

bool fs_peer_owns(struct fs_ctx *fs, uint32_t node, uint32_t k)
{
	char path[PATH_MAX];
	struct fs_gen *g = fs_gen_get(fs);
	bool mine;

	if (!g)
		return true;
	int len = unit_relpath(fs, node, path, sizeof(path));
	/* A path that cannot be named (unreachable for a scanned tree) is
	 * kept local; a node out of the list owns nothing. */
	if (len < 0)
		mine = g->node != FS_NOT_A_MEMBER;
	else
		mine = remote_owner(g->peers, remote_unit_key(path, (size_t)len, k)) == g->node;
	fs_gen_put(g);
	return mine;
}

/* 1, 2, 4, 8, ...: log the first of a repeating event, then ever fewer. */
static bool power_of_two(uint64_t n)
{
	return n && (n & (n - 1)) == 0;
}

/* About how long reading len bytes of SOURCE takes here, in ms (0: no
 * read timed yet, nor a probe at mount): the average read's time, scaled
 * up for a longer read. */
static unsigned source_estimate_ms(struct fs_ctx *fs, size_t len)
{
	uint64_t us = atomic_load_explicit(&fs->ctr.source_avg_us, memory_order_relaxed);
	uint64_t bytes = atomic_load_explicit(&fs->ctr.source_avg_bytes, memory_order_relaxed);

	if (!us) /* no read timed yet: the mount's probe, if any */
		us = atomic_load_explicit(&fs->src->probe_us, memory_order_relaxed);

	if (bytes && len > bytes)
		us = us / bytes * len + us % bytes * len / bytes;
	us /= 1000;
	return us > UINT_MAX ? UINT_MAX : (unsigned)us;
}

/* fs_peer_fetch through generation g. */
static int fetch_from_owner(struct fs_ctx *fs, struct fs_gen *g, uint32_t node, uint32_t k,
			    uint64_t uoff, size_t len, void *buf)
{
	char path[PATH_MAX];
	char etag[REMOTE_MAX_ETAG + 1];

	if (k >= fs->ns.nodes[node].count)
		return -EINVAL; /* not this file's unit */
	int plen = unit_relpath(fs, node, path, sizeof(path));
	if (plen < 0)
		return plen;
	unsigned owner = remote_owner(g->peers, remote_unit_key(path, (size_t)plen, k));
	if (owner == g->node)
		return -EINVAL;
	int rc = fs_snapshot_etag(fs, node, etag, sizeof(etag));
	if (rc < 0)
		return rc;
	/* Only bytes of the very snapshot this node took are accepted: the
	 * owner's ETag and total size must be ours, else SOURCE is read. */
	const struct remote_expect exp = {.size = fs->ns.nodes[node].size,
					  .etag = etag,
					  .source_ms = source_estimate_ms(fs, len)};
	ssize_t n = remote_fetch_verified(g->client, owner, path,
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
			  remote_node_url(g->client, owner));
	} else if (n == -ESTALE || n == -EREMOTEIO || n == -EBUSY) {
		struct remote_client_stats cs;

		remote_client_get_stats(g->client, &cs);
		if (power_of_two(n == -ESTALE ? cs.mismatches : cs.unavailable))
			log_warn("%s: peer %s %s; reading SOURCE instead (peer stays up)", path,
				 remote_node_url(g->client, owner),
				 n == -ESTALE ? "holds another version of it (size or mtime differ)"
				 : n == -EBUSY ? "is busy"
					       : "cannot read it");
		else
			log_debug("%s: peer %s: %s; reading SOURCE instead", path,
				  remote_node_url(g->client, owner), strerror((int)-n));
	} else if (n != -EHOSTDOWN)
		log_warn("%s: fetch from peer %s failed (%s); reading SOURCE instead", path,
			 remote_node_url(g->client, owner), strerror(n < 0 ? (int)-n : EPROTO));
	return n < 0 ? (int)n : -EPROTO;
}

int fs_peer_fetch(struct fs_ctx *fs, uint32_t node, uint32_t k, uint64_t uoff, size_t len,
		  void *buf)
{
	struct fs_gen *g = fs_gen_get(fs);
	int rc = g && g->client ? fetch_from_owner(fs, g, node, k, uoff, len, buf) : -ENOTSUP;

	fs_gen_put(g);
	return rc;
}

/* A handoff is answered from memory: a node that takes longer (stopped,
 * swamped) is not worth a reader's wait; SOURCE is read instead. */
#define FS_HANDOFF_TIMEOUT_MS 300

int fs_peer_handoff(struct fs_ctx *fs, uint32_t node, uint32_t k, void *buf, size_t len)
{
	char path[PATH_MAX], etag[REMOTE_MAX_ETAG + 1];
	struct fs_gen *g = fs_gen_get(fs), *p = fs_gen_prev(fs, g);
	int rc = -ENOENT, plen;

	/* Nobody to ask (one node, a previous generation gone, the runner-up
	 * rule given up): no path to build, no key to hash on this fill. */
	if (!g || !g->client || g->node == FS_NOT_A_MEMBER || k >= fs->ns.nodes[node].count ||
	    (!p && !fs_cluster_joiner_asks(fs)) ||
	    (plen = unit_relpath(fs, node, path, sizeof(path))) < 0)
		goto out;
	uint64_t key = remote_unit_key(path, (size_t)plen, k);
	int now = -1;
	if (p) {
		/* After a change: the unit's owner in the generation before,
		 * asked only if still a member (one that left may be gone;
		 * its partition is read from SOURCE once). */
		unsigned was = remote_owner(p->peers, key);
		if (was != p->node)
			now = remote_peers_find(g->peers, remote_peers_url(p->peers, was));
	}
	if (now < 0 && fs_cluster_joiner_asks(fs)) {
		/* No such owner (this node's first list, or it owned the unit
		 * then too): if this node joined a running cluster, the unit
		 * was the runner-up's before it came, and may still be there. */
		unsigned was = remote_owner_without(g->peers, key, g->node);
		now = was == UINT_MAX ? -1 : (int)was;
	}
	if (now < 0 || (unsigned)now == g->node || !remote_node_up(g->client, (unsigned)now))
		goto out;
	if ((rc = fs_snapshot_etag(fs, node, etag, sizeof(etag))) < 0)
		goto out;
	const struct remote_expect exp = { .size = fs->ns.nodes[node].size, .etag = etag,
					   .held_only = true, .timeout_ms = FS_HANDOFF_TIMEOUT_MS };
	ssize_t n = remote_fetch_verified(g->client, (unsigned)now, path,
					  (uint64_t)k * fs->ns.chunk_size, len, &exp, buf);
	rc = n == (ssize_t)len ? 0 : n < 0 ? (int)n : -EPROTO;
	fs_cluster_count_handoff(fs, rc == 0);
	if (rc < 0 && rc != -ENOENT)
		log_debug("%s: handoff from %s failed (%s); reading SOURCE", path,
			  remote_peers_url(g->peers, (unsigned)now), strerror(-rc));
out:
	fs_gen_put(p);
	fs_gen_put(g);
	return rc;
}

void fs_peer_collect(struct fs_ctx *fs, struct fs_stats *s)
{
	s->peer_fallbacks = atomic_load_explicit(&fs->ctr.peer_fallbacks, memory_order_relaxed);
}

void fs_peer_metrics(struct fs_ctx *fs, struct strbuf *sb)
{
	struct fs_gen *g = fs_gen_get(fs);

	remote_metrics(g ? g->client : NULL, fs->server, sb);
	fs_gen_put(g);
}
