/* SPDX-License-Identifier: MIT */
/*
 * The MinIO cache: units (whole files, or fixed chunks of large files) are
 * admitted on first read until the budget is full, and never evicted. Under
 * random per-epoch access every later epoch then hits exactly the cached
 * fraction, which no LRU-like policy achieves.
 *
 * Because nothing is ever freed, storage is a bump allocator over one
 * memfd mapped once. A pointer returned by cache_get() stays valid until
 * cache_destroy().
 *
 * Units are ids 0..nunits-1 chosen by the caller (fs/ numbers the units
 * of each file consecutively when the file is first looked up). Per unit
 * the cache keeps one 8-byte atomic word, so the hit path is a single
 * acquire load (two with the block pointer); the words come in blocks of
 * 65536 allocated when a unit of the block is first filled, so nunits may
 * be a bound far above the ids in use.
 *
 * Thread-safety: every function may be called concurrently, except
 * cache_destroy(). Lock order: a stripe lock is a leaf; no lock is held
 * while the fill callback runs.
 */
#ifndef COORDFS_CACHE_H
#define COORDFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;

/*
 * Fill dst with exactly len bytes of unit. Returns 0 or -errno. Called
 * without any cache lock held; may block on I/O. A passing failure
 * (-EAGAIN: the source failed for now; -EMFILE, -ENFILE, -ENOMEM,
 * -ENOBUFS, -EINTR: a shortage of this process) leaves the unit to be
 * filled by a later call; any other error means the unit cannot be read
 * as snapshotted (changed, shrunk, gone): the unit is marked failed for
 * the cache's lifetime. So a fill returns another error only for a
 * snapshot that no longer holds.
 */
typedef int (*cache_fill_fn)(void *arg, uint64_t unit, void *dst, size_t len);

struct cache_stats {
	uint64_t capacity_bytes, used_bytes, items;
	uint64_t hits, misses, hit_bytes, miss_bytes;
	uint64_t admitted, refused, fill_errors;
	uint64_t failed_units; /* units marked failed (fill_errors counts every failure) */
};

/*
 * Create a cache of capacity bytes for unit ids below nunits (a bound: an
 * index of nunits/65536 pointers is allocated now, the rest on use). capacity 0 is a valid
 * cache that admits nothing. Returns 0 and *out, or -errno (memfd/mmap
 * failure, -ENOMEM).
 */
int cache_create(uint64_t capacity, uint64_t nunits, struct cache **out);
void cache_destroy(struct cache *c);

/*
 * Get unit's bytes (unit_len of them), admitting it if it is not held and
 * there is room: the first caller fills it through fill(arg, ...), while
 * concurrent callers for the same unit wait for that fill only (single
 * flight). On success *data points into the cache, valid until destroy.
 * want_bytes is the size of the caller's read, for the hit/miss byte
 * counters. Returns:
 *   0        *data set (hit, or a miss that was admitted);
 *   -ENOSPC  not held and no room: the caller reads it elsewhere;
 *   -EIO     the unit is marked failed (this fill's error, or an earlier
 *            one): every later call returns -EIO at once, without a fill;
 *   -errno   a transient fill error (nothing admitted; a later call retries);
 *            a caller that waited on another's fill that failed this way,
 *            or that comes within 1 s of such a failure, gets -EAGAIN
 *            rather than filling again itself.
 * A failed fill never costs budget: its reservation is returned in full and
 * its place reused by later units.
 * Blocks while the unit is being filled. admit=false never fills (used by
 * nodes that do not own the unit): it returns 0 on a hit, else -ENOSPC.
 */
int cache_get(struct cache *c, uint64_t unit, size_t unit_len, size_t want_bytes, bool admit,
	      cache_fill_fn fill, void *arg, const void **data);

/*
 * Admit unit ahead of any read (prefill): fill it through fill(arg, ...)
 * unless it is held or being filled already. Hits and misses do not move.
 * Returns 0 (filled by this call), -EEXIST (held or being filled), -ENOSPC
 * (no room: fill was not called), or the fill's -errno. Blocks during the
 * fill; concurrent cache_get callers of the unit wait for it.
 */
int cache_prefill(struct cache *c, uint64_t unit, size_t unit_len, cache_fill_fn fill, void *arg);

/*
 * Copy len bytes from src to dst, a fill's destination (inside c's arena),
 * with pwrite on the arena's memfd rather than memcpy: the kernel copies
 * through its own mapping of the pages, so this process's mapping of them
 * is not touched. Under shadow paging (a VM without EPT) the first touch of
 * each new page through a process's mapping costs a trap (~8 us per 4 KiB
 * measured; the copy itself ~0.6 us), and the arena's other readers (FUSE
 * replies, pinned with get_user_pages) never need that mapping at all.
 * Falls back to memcpy for what pwrite does not take.
 */
void cache_copy_in(struct cache *c, void *dst, const void *src, size_t len);
/* The other way: len bytes at src (in the arena, else anywhere) into dst,
 * with pread on the memfd, so this process's mapping of the arena is not
 * touched (cache_copy_in). */
void cache_copy_out(const struct cache *c, void *dst, const void *src, size_t len);

/* Whether unit is held (a cheap load; no counters move). */
bool cache_holds(const struct cache *c, uint64_t unit);


void cache_get_stats(const struct cache *c, struct cache_stats *out);

#endif
