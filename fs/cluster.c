/* SPDX-License-Identifier: MIT */
/*
 * Membership while mounted (coordfs(1), PEERS): generations of the node
 * list, referenced by readers, and the thread that re-reads a dns: or
 * file: source and installs a new generation when the nodes change.
 *
 * A generation is immutable once installed; a change builds a whole new
 * one (list, index, client) and swaps the pointer under a mutex. Readers
 * hold a reference for one fetch, so the old list and client live until
 * the last fetch through them ends. Only one generation back is kept, for
 * handoffs: a new owner asks the unit's owner of the generation before,
 * if that node is still a member (fs/peer.c's fs_peer_handoff).
 *
 * A peers file is taken only when two reads 100 ms apart agree, so a file
 * being rewritten in place is never taken half written; a source that
 * fails to read keeps the current list (one warning per failing streak).
 */
#include "fs/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "fs/fs.h"
#include "fs/membership.h"
#include "remote/remote.h"

/* How long a changed peers file must stay the same before it is taken. */
#define SETTLE_MS 100
/* How long unmount waits for a re-read in progress (a DNS lookup cannot
 * be interrupted) before leaving the thread behind. */
#define STOP_WAIT_S 3

struct fs_cluster {
	pthread_mutex_t lock;
	struct fs_gen *gen; /* current; a reference */
	int64_t changed_at;
	uint64_t joined, left; /* under lock */
	_Atomic uint64_t handoffs, handoff_misses, refresh_failures;
	_Atomic unsigned miss_streak; /* handoff asks in a row that found nothing */
	struct remote_http *pool;
	const char *secret;	      /* fs->secret */
	struct fs_membership_args args; /* its strings are the copies below */
	char *peers_s, *node_name_s, *listen_s;
	unsigned refresh_s;
	bool watching;
	_Atomic bool stopping;
	int stop_pipe[2];
	pthread_t thread;
};

static void gen_free(struct fs_gen *g)
{
	remote_client_destroy(g->client);
	remote_peers_destroy(g->peers);
	free(g);
}

void fs_gen_put(struct fs_gen *g)
{
	while (g && atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1) {
		struct fs_gen *prev = g->prev; /* no one else can reach g now */

		gen_free(g);
		g = prev;
	}
}

static struct fs_gen *ref(struct fs_gen *g)
{
	if (g)
		atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
	return g;
}

struct fs_gen *fs_gen_get(struct fs_ctx *fs)
{
	struct fs_cluster *c = fs->cluster;
	struct fs_gen *g;

	if (!c)
		return NULL;
	pthread_mutex_lock(&c->lock);
	g = ref(c->gen);
	pthread_mutex_unlock(&c->lock);
	return g;
}

struct fs_gen *fs_gen_prev(struct fs_ctx *fs, struct fs_gen *g)
{
	struct fs_cluster *c = fs->cluster;
	struct fs_gen *p;

	if (!c || !g)
		return NULL;
	pthread_mutex_lock(&c->lock);
	p = ref(g->prev);
	pthread_mutex_unlock(&c->lock);
	return p;
}

int fs_cluster_init(struct fs_ctx *fs, struct remote_peers *peers, unsigned node)
{
	struct fs_cluster *c = calloc(1, sizeof(*c));
	struct fs_gen *g = calloc(1, sizeof(*g));

	if (!c || !g) {
		free(c);
		free(g);
		remote_peers_destroy(peers);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	g->peers = peers;
	g->node = node;
	g->number = 1;
	atomic_init(&g->refs, 1);
	c->gen = g;
	c->changed_at = (int64_t)time(NULL);
	c->stop_pipe[0] = c->stop_pipe[1] = -1;
	fs->cluster = c;
	return 0;
}

/* Whether a and b list the same URLs in the same order (same owners and
 * indices: nothing to change). */
static bool same_list(const struct remote_peers *a, const struct remote_peers *b)
{
	unsigned n = remote_peers_count(a);

	if (n != remote_peers_count(b))
		return false;
	for (unsigned k = 0; k < n; k++)
		if (strcmp(remote_peers_url(a, k), remote_peers_url(b, k)) != 0)
			return false;
	return true;
}

/* Install the list as the next generation unless it is the current one.
 * Takes peers. 0, or -errno (the current generation stays). */
static int apply(struct fs_cluster *c, struct remote_peers *peers, unsigned node)
{
	struct fs_gen *g = calloc(1, sizeof(*g)), *old, *drop;
	unsigned joined = 0, left = 0;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	old = c->gen;
	if (!g || (same_list(old->peers, peers) && old->node == node) ||
	    atomic_load(&c->stopping)) {
		pthread_mutex_unlock(&c->lock);
		free(g);
		remote_peers_destroy(peers);
		return g ? 0 : -ENOMEM;
	}
	if (old->client) {
		struct remote_client_config cfg = { .pool = c->pool };

		rc = remote_client_create(peers, c->secret, &cfg, &g->client);
		if (rc < 0) {
			pthread_mutex_unlock(&c->lock);
			free(g);
			remote_peers_destroy(peers);
			return rc;
		}
		remote_client_inherit(g->client, old->client);
	}
	for (unsigned k = 0; k < remote_peers_count(peers); k++)
		joined += remote_peers_find(old->peers, remote_peers_url(peers, k)) < 0;
	for (unsigned k = 0; k < remote_peers_count(old->peers); k++)
		left += remote_peers_find(peers, remote_peers_url(old->peers, k)) < 0;
	g->peers = peers;
	g->node = node;
	g->number = old->number + 1;
	atomic_init(&g->refs, 1);
	g->prev = old; /* the cluster's reference moves to the new generation */
	drop = old->prev;
	old->prev = NULL;
	c->gen = g;
	c->joined += joined;
	c->left += left;
	c->changed_at = (int64_t)time(NULL);
	pthread_mutex_unlock(&c->lock);
	fs_gen_put(drop);
	if (node == FS_NOT_A_MEMBER)
		log_warn("membership generation %llu: %u nodes (+%u, -%u); this node is not among "
			 "them: it owns nothing now and reads from the others",
			 (unsigned long long)g->number, remote_peers_count(peers), joined, left);
	else
		log_msg(LOG_NOTICE, "membership generation %llu: %u nodes (+%u, -%u), this one %u (%s)",
			(unsigned long long)g->number, remote_peers_count(peers), joined, left, node,
			remote_peers_url(peers, node));
	return 0;
}

/* Wait ms, or less when unmount asks the thread to stop: false then. */
static bool settle(struct fs_cluster *c, unsigned ms)
{
	struct pollfd p = { c->stop_pipe[0], POLLIN, 0 };

	return poll(&p, 1, (int)ms) == 0 && !atomic_load(&c->stopping);
}

/* One re-read of the source: the node list, and this node in it. */
static int read_source(struct fs_cluster *c, char **list, unsigned *node, char *err,
		       unsigned errlen)
{
	int rc = fs_membership_resolve(&c->args, list, node, err, errlen);

	if (rc < 0 || strcmp(fs_membership_source(c->args.peers), "file") != 0)
		return rc;
	/* A file may be in the middle of a rewrite: take it when it holds
	 * still. */
	for (int tries = 0; tries < 20; tries++) {
		char *again = NULL;
		unsigned node2;

		if (!settle(c, SETTLE_MS)) {
			free(*list);
			*list = NULL;
			return -ECANCELED;
		}
		rc = fs_membership_resolve(&c->args, &again, &node2, err, errlen);
		if (rc < 0) {
			free(*list);
			*list = NULL;
			return rc;
		}
		if (!strcmp(again, *list) && node2 == *node) {
			free(again);
			return 0;
		}
		free(*list);
		*list = again;
		*node = node2;
	}
	free(*list);
	*list = NULL;
	snprintf(err, errlen, "%s: still changing after %d reads", c->args.peers, 20);
	return -EAGAIN;
}

static void refresh(struct fs_cluster *c, bool *failing)
{
	char err[512] = "", *list = NULL;
	unsigned node = 0;
	struct remote_peers *peers = NULL;
	int rc = read_source(c, &list, &node, err, sizeof(err));

	if (rc == -ECANCELED)
		return; /* unmounting */
	if (rc == 0)
		rc = remote_peers_parse(list, &peers, err, sizeof(err));
	free(list);
	if (rc == 0)
		rc = apply(c, peers, node);
	if (rc < 0) {
		atomic_fetch_add_explicit(&c->refresh_failures, 1, memory_order_relaxed);
		if (!*failing)
			log_warn("membership: %s; keeping the current list of nodes",
				 err[0] ? err : strerror(-rc));
		*failing = true;
		return;
	}
	if (*failing)
		log_msg(LOG_NOTICE, "membership: %s reads again", c->args.peers);
	*failing = false;
}

/* An inotify descriptor watching the peers file's directory (a rename
 * over the file, or a ConfigMap's symlink swap, is an event of the
 * directory), or -1: then only the periodic re-read sees changes. */
static int watch_dir(const char *path)
{
	char *copy = strdup(path);
	int fd = copy ? inotify_init1(IN_NONBLOCK | IN_CLOEXEC) : -1;

	if (fd >= 0 && inotify_add_watch(fd, dirname(copy),
					 IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
					     IN_DELETE | IN_ATTRIB) < 0) {
		log_warn("membership: cannot watch %s (%s); re-reading it every refresh instead",
			 path, strerror(errno));
		close(fd);
		fd = -1;
	}
	free(copy);
	return fd;
}

static void *watcher(void *arg)
{
	struct fs_cluster *c = arg;
	bool file = !strcmp(fs_membership_source(c->args.peers), "file"), failing = false;
	int ino = file ? watch_dir(c->args.peers + 5) : -1;

	while (!atomic_load(&c->stopping)) {
		struct pollfd p[2] = { { c->stop_pipe[0], POLLIN, 0 }, { ino, POLLIN, 0 } };
		int n = poll(p, ino >= 0 ? 2 : 1, (int)c->refresh_s * 1000);

		if (n < 0 && errno != EINTR)
			break;
		if (atomic_load(&c->stopping) || (p[0].revents & POLLIN))
			break;
		if (ino >= 0 && (p[1].revents & POLLIN)) {
			char buf[4096];

			while (read(ino, buf, sizeof(buf)) > 0)
				;
		}
		refresh(c, &failing);
	}
	if (ino >= 0)
		close(ino);
	return NULL;
}

int fs_cluster_start(struct fs_ctx *fs, struct remote_http *pool)
{
	struct fs_cluster *c = fs->cluster;
	const char *src;
	int rc;

	if (!c)
		return 0;
	c->pool = pool;
	c->secret = fs->secret;
	struct remote_client_config cfg = { .pool = pool };
	if ((rc = remote_client_create(c->gen->peers, fs->secret, &cfg, &c->gen->client)) < 0)
		return rc;
	src = fs_membership_source(fs->opt.peers);
	if (strcmp(src, "dns") != 0 && strcmp(src, "file") != 0)
		return 0;
	/* Copies: a thread left behind at unmount outlives fs->opt. */
	c->peers_s = strdup(fs->opt.peers);
	c->node_name_s = fs->opt.node_name ? strdup(fs->opt.node_name) : NULL;
	c->listen_s = fs->opt.listen ? strdup(fs->opt.listen) : NULL;
	if (!c->peers_s || (fs->opt.node_name && !c->node_name_s) ||
	    (fs->opt.listen && !c->listen_s))
		return -ENOMEM;
	c->args = (struct fs_membership_args){ c->peers_s, c->node_name_s, c->listen_s,
					      fs->opt.peer_port, true };
	c->refresh_s = fs->opt.peers_refresh_s ? fs->opt.peers_refresh_s : FS_PEERS_REFRESH_DEFAULT;
	if (pipe2(c->stop_pipe, O_CLOEXEC) < 0)
		return -errno;
	if ((rc = pthread_create(&c->thread, NULL, watcher, c)) != 0) {
		log_err("membership: cannot start its thread: %s", strerror(rc));
		return -rc;
	}
	c->watching = true;
	return 0;
}

bool fs_cluster_started(struct fs_ctx *fs)
{
	return fs->cluster && fs->cluster->gen->client;
}

void fs_cluster_fini(struct fs_ctx *fs)
{
	struct fs_cluster *c = fs->cluster;

	if (!c)
		return;
	fs->cluster = NULL;
	if (c->watching) {
		struct timespec until;

		atomic_store(&c->stopping, true);
		if (write(c->stop_pipe[1], "x", 1) < 0)
			log_debug("membership: stop: %s", strerror(errno));
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += STOP_WAIT_S;
		if (pthread_timedjoin_np(c->thread, NULL, &until) != 0) {
			/* A DNS lookup that does not return: the thread is left
			 * with the cluster (it installs nothing once stopping),
			 * which is not freed; the process is about to exit. */
			log_warn("membership: a re-read of %s did not end within %d s; not waiting "
				 "for it", c->args.peers, STOP_WAIT_S);
			pthread_detach(c->thread);
			return;
		}
	}
	if (c->stop_pipe[0] >= 0) {
		close(c->stop_pipe[0]);
		close(c->stop_pipe[1]);
	}
	fs_gen_put(c->gen);
	pthread_mutex_destroy(&c->lock);
	free(c->peers_s);
	free(c->node_name_s);
	free(c->listen_s);
	free(c);
}

void fs_cluster_get_stats(struct fs_ctx *fs, struct fs_cluster_stats *out)
{
	struct fs_cluster *c = fs->cluster;

	memset(out, 0, sizeof(*out));
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	out->generation = c->gen->number;
	out->changed_at = c->changed_at;
	out->joined = c->joined;
	out->left = c->left;
	out->member = c->gen->node != FS_NOT_A_MEMBER;
	pthread_mutex_unlock(&c->lock);
	out->handoffs = atomic_load_explicit(&c->handoffs, memory_order_relaxed);
	out->handoff_misses = atomic_load_explicit(&c->handoff_misses, memory_order_relaxed);
	out->refresh_failures = atomic_load_explicit(&c->refresh_failures, memory_order_relaxed);
}

void fs_cluster_count_handoff(struct fs_ctx *fs, bool got)
{
	struct fs_cluster *c = fs->cluster;

	if (!c)
		return;
	atomic_fetch_add_explicit(got ? &c->handoffs : &c->handoff_misses, 1,
				  memory_order_relaxed);
	if (got)
		atomic_store_explicit(&c->miss_streak, 0, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&c->miss_streak, 1, memory_order_relaxed);
}

bool fs_cluster_joiner_asks(struct fs_ctx *fs)
{
	struct fs_cluster *c = fs->cluster;

	return c && atomic_load_explicit(&c->miss_streak, memory_order_relaxed) <
			    FS_JOINER_MISS_LIMIT;
}
