/* SPDX-License-Identifier: MIT */
/*
 * --prefill: after the mount is live, a pool of threads fills this node's
 * share of the MinIO cache from SOURCE (with peers, only the units this
 * node owns, so a cluster fetches each object once) until the cache is
 * full or every owned unit is held. Readers that miss the cache go first:
 * a prefill thread starts no new unit while the source's
 * prefill_yield_readers readers (fs/source.h: 1 for a disk, the
 * connections prefill leaves free for S3) wait on it. Unmounting stops it.
 */
#ifndef COORDFS_FS_PREFILL_H
#define COORDFS_FS_PREFILL_H

#include <stdbool.h>
#include <stdint.h>

struct fs_ctx;

/* Start nthreads prefill threads (after the source and peers started).
 * 0 or -errno. Sets fs->prefill. */
int fs_prefill_start(struct fs_ctx *fs, unsigned nthreads);
/* Stop and join (a unit being fetched completes first). NULL-safe on
 * fs->prefill; clears it. */
void fs_prefill_stop(struct fs_ctx *fs);

/*
 * Without --prefill, a mount whose disk tier holds units (a remount) takes
 * the attributes of SOURCE's files on one thread in the background, in
 * the namespace's order (directory by directory), yielding to readers
 * that miss the cache as prefill does: the tier's entries are checked
 * against them, and the first epoch's lookups, which would each wait for a
 * SOURCE lookup and stat in a random order, find them taken. Only for a
 * source whose attributes are taken at first lookup (a directory). From
 * then on, readdirplus also takes the attributes of the files it lists
 * (fs->list_attrs), so that a listing (ImageFolder's) gives the kernel an
 * entry for each, and opening them needs no lookup. walk false: only
 * that, no walk. Sets fs->warm; 0 or -errno.
 */
int fs_warm_start(struct fs_ctx *fs, bool walk);
/* Stop and join; NULL-safe on fs->warm, which it clears. */
void fs_warm_stop(struct fs_ctx *fs);

struct fs_prefill_stats {
	uint64_t target_bytes; /* what it means to fill: min(owned bytes, cache room) */
	uint64_t done_bytes;   /* bytes it admitted */
	bool running;
};
/* Zeros when prefill is off. Thread-safe. */
void fs_prefill_get_stats(struct fs_ctx *fs, struct fs_prefill_stats *out);

#endif
