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
#include "fs/counters.h"
#include "fs/fs.h"
#include "fs/peer.h"
#include "fs/snapshot.h"
#include "remote/remote.h"

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
	if (k >= fs->ns.nodes[node].count)
		return -EINVAL; /* not this file's unit */
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

void fs_peer_collect(struct fs_ctx *fs, struct fs_stats *s)
{
	s->peer_fallbacks = atomic_load_explicit(&fs->ctr.peer_fallbacks, memory_order_relaxed);
}

void fs_peer_metrics(struct fs_ctx *fs, struct strbuf *sb)
{
	remote_metrics(fs->client, fs->server, sb);
}
