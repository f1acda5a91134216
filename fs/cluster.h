/* SPDX-License-Identifier: MIT */
/*
 * The cluster as this node sees it now (coordfs(1), PEERS): a generation
 * of the membership (the node list, this node's place in it, the client
 * that talks to it), replaced whole when a discovered source (dns:,
 * file:) changes while mounted. Readers take a reference to the current
 * generation for the length of one operation, so a change never pulls the
 * list from under a fetch; the generation before stays reachable from the
 * current one, so that a new owner can ask a unit's previous owner for it
 * (a handoff) instead of SOURCE.
 */
#ifndef COORDFS_FS_CLUSTER_H
#define COORDFS_FS_CLUSTER_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct fs_ctx;
struct remote_peers;
struct remote_client;
struct remote_http;

/* A node that is not in the current list (drained, or not yet listed):
 * it owns nothing and reads every unit from its owner. */
#define FS_NOT_A_MEMBER UINT_MAX

struct fs_gen {
	struct remote_peers *peers;
	struct remote_client *client; /* NULL until the peer client starts */
	unsigned node;		      /* this node's index, or FS_NOT_A_MEMBER */
	uint64_t number;	      /* 1 at mount, +1 per change */
	_Atomic unsigned refs;
	struct fs_gen *prev; /* the generation before (a reference), under the cluster's lock */
};

/* Membership counters since mount (the statistics' "membership"). */
struct fs_cluster_stats {
	uint64_t generation;
	int64_t changed_at; /* unix time of the last change (or of the mount) */
	uint64_t joined;    /* nodes that appeared, over every change */
	uint64_t left;	    /* nodes that went */
	uint64_t handoffs;  /* units this node got from their previous owner */
	uint64_t handoff_misses; /* asked of the previous owner, which did not hold them */
	uint64_t refresh_failures; /* re-reads of the source that failed (list kept) */
	bool member;		   /* this node is in the current list */
};

/* Generation 1 from the list taken at mount; takes peers. 0 or -ENOMEM. */
int fs_cluster_init(struct fs_ctx *fs, struct remote_peers *peers, unsigned node);
/* The peer client of the current generation (after daemonizing), over
 * pool (may be NULL), and, for dns: and file:, the thread that re-reads
 * the source and applies changes. 0 or -errno. */
int fs_cluster_start(struct fs_ctx *fs, struct remote_http *pool);
/* Whether fs_cluster_start made the peer client (its libcurl global
 * init is then to be undone after fs_cluster_fini). */
bool fs_cluster_started(struct fs_ctx *fs);
/* Stop the thread, drop the generations. Safe without init. */
void fs_cluster_fini(struct fs_ctx *fs);

/* The current generation, referenced (release with fs_gen_put); NULL for
 * a single node. */
struct fs_gen *fs_gen_get(struct fs_ctx *fs);
void fs_gen_put(struct fs_gen *g);
/* g's previous generation, referenced, or NULL. */
struct fs_gen *fs_gen_prev(struct fs_ctx *fs, struct fs_gen *g);

void fs_cluster_get_stats(struct fs_ctx *fs, struct fs_cluster_stats *out);
/* Count one handoff attempt's outcome. */
void fs_cluster_count_handoff(struct fs_ctx *fs, bool got);
/* Whether a node filling a unit that has no previous owner to ask asks
 * the unit's runner-up (it may have joined a running cluster, whose
 * runner-up held the unit before): until FS_JOINER_MISS_LIMIT asks in a
 * row found nothing (a cluster that started together holds nothing to
 * hand off; a hit starts the count again). */
#define FS_JOINER_MISS_LIMIT 16
bool fs_cluster_joiner_asks(struct fs_ctx *fs);

#endif
