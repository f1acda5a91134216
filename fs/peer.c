/* SPDX-License-Identifier: MIT */
/*
 * fs/'s client side of the partitioned cache (coordfs(1), PEERS): the
 * --peers configuration, ownership of units by rendezvous hashing, fetches
 * from owners (the caller falls back to SOURCE) and the peers' counters.
 * The server side is peer_server.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "fs/fs.h"
#include "fs/peer.h"
#include "fs/snapshot.h"
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

uint64_t fs_peer_fallbacks(struct fs_ctx *fs)
{
	return atomic_load_explicit(&fs->ctr.peer_fallbacks, memory_order_relaxed);
}

void fs_peer_metrics(struct fs_ctx *fs, struct strbuf *sb)
{
	remote_metrics(fs->client, fs->server, sb);
}
