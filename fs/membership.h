/* SPDX-License-Identifier: MIT */
/*
 * Where the cluster's nodes come from (coordfs(1), PEERS): --peers=slurm,
 * dns:NAME[:PORT] or file:PATH, resolved at mount into the same list of
 * URLs as a hand-typed --peers and this node's index in it.
 */
#ifndef COORDFS_FS_MEMBERSHIP_H
#define COORDFS_FS_MEMBERSHIP_H

#include <stdbool.h>

#define FS_PEER_PORT_DEFAULT 7079 /* --peer-port, for slurm and dns: sources */
#define FS_MEMBERSHIP_MAX_BYTES (1u << 20) /* a peers file or scontrol's answer */
#define FS_PEERS_REFRESH_DEFAULT 10	    /* --peers-refresh, seconds */

/* "static", "slurm", "dns" or "file": how --peers names the nodes. */
const char *fs_membership_source(const char *peers);

/*
 * For a discovered source: the nodes, as a comma-separated URL list (a
 * malloc'd *list, for remote_peers_parse) and this node's index in it into
 * *node. 0, or -errno with one line in err naming the problem: no SLURM
 * job, a name that does not resolve, this node not among them, a file
 * that cannot be read. Blocks (DNS, scontrol). Not for a static list.
 */
/* What the command line says of the nodes (coordfs(1), PEERS); strings
 * borrowed, NULL when not given. */
struct fs_membership_args {
	const char *peers;	/* --peers: slurm, dns:NAME[:PORT] or file:PATH */
	const char *node_name; /* --node-name */
	const char *listen;	/* --listen */
	unsigned peer_port;	/* --peer-port, 0: FS_PEER_PORT_DEFAULT */
	/* While mounted: a list that does not name this node is taken, with
	 * *node = UINT_MAX (fs/cluster.h's FS_NOT_A_MEMBER), not refused. */
	bool allow_absent;
};
int fs_membership_resolve(const struct fs_membership_args *o, char **list, unsigned *node,
			  char *err, unsigned errlen);

#endif
