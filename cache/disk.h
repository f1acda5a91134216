/* SPDX-License-Identifier: MIT */
/*
 * The disk tier: a second MinIO cache in a directory of local disk, kept
 * across mounts. Units are admitted until the tier's limit is reached and
 * never evicted. A unit is named by a 128-bit key (its file's path, the
 * chunk size and its chunk number: cache_disk_key) and carries the
 * identity of the file's snapshot (cache_disk_snap: ETag and size); a held
 * unit whose snapshot differs from the caller's is dropped, never served.
 *
 * Storage (cache/README.md, "Disk tier"): an append-only data file and an
 * append-only index of checksummed 64-byte records; a unit's data is
 * written and fdatasync'd before its record, so a crash leaves at worst a
 * torn last record, which the next open ignores and truncates. Every read
 * from the tier is verified against the XXH3 checksum taken at admission.
 *
 * Admissions are queued and written by one writer thread, behind the
 * caller's reply; reads are the caller's, with no lock held across I/O.
 * An I/O error on the directory turns the tier off (reads then miss);
 * running out of space stops admissions. No call ever makes a read fail:
 * the caller reads elsewhere on any error.
 *
 * Thread-safety: every function may be called concurrently, except
 * cache_disk_open and cache_disk_close.
 */
#ifndef COORDFS_CACHE_DISK_H
#define COORDFS_CACHE_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache_disk;

/* A unit's name: which file, which chunk (stable across mounts). */
struct cache_disk_key {
	uint64_t lo, hi;
};

struct cache_disk_stats {
	uint64_t capacity_bytes, used_bytes, items;
	uint64_t hits, hit_bytes, admitted, refused;
	uint64_t dropped_stale, dropped_corrupt, disabled;
	uint64_t queued; /* units waiting for the writer */
	uint64_t direct; /* 1 while reads bypass the page cache (O_DIRECT) */
	uint64_t dropped_cut; /* units recorded after a damaged index record, cut at load */
};

/* The largest unit the tier holds: a read of a held unit reads all of it
 * (the checksum covers the unit), so larger chunks are not admitted. */
#define CACHE_DISK_UNIT_MAX ((size_t)16 << 20)

/* The key of chunk k (of chunk_size bytes) of the file at relative path
 * of SOURCE scope (its absolute path, or s3://BUCKET/PREFIX): the same
 * relative path under another SOURCE is another file. */
struct cache_disk_key cache_disk_key(const char *scope, const char *path, uint64_t chunk_size,
				     uint32_t k);
/* The identity of a file's snapshot: the name fs_snapshot_tier_id gives it
 * (for a directory SOURCE size, mtime in ns and inode; for S3 the ETag)
 * and its size. */
uint64_t cache_disk_snap(const char *etag, uint64_t size);

/*
 * Open (creating it 0700 if need be) the tier in dir, limited to limit
 * bytes of everything it writes. Takes the directory's lock: another
 * daemon holding it gives -EBUSY and "... held by pid N" in err. Loads the
 * index (never the data): a torn or invalid tail is cut off, with the
 * data past the last good record. 0, or -errno with one line in err.
 */
int cache_disk_open(const char *dir, uint64_t limit, struct cache_disk **out, char *err,
		    size_t errlen);
/* Start the writer thread and write this process's pid into the lock file
 * (call after any fork: the daemon's pid, not its parent's). 0 or -errno. */
int cache_disk_start(struct cache_disk *d);
/* Write what is queued (up to a bounded time), stop the writer, close. */
void cache_disk_close(struct cache_disk *d);

/*
 * Read held unit key of snapshot snap, len bytes, into dst, and verify it
 * (through the page cache, its pages dropped after: for a dst that is not
 * aligned; cache_disk_read_direct below reads with no page cache).
 *   0        dst holds the unit;
 *   -ENOENT  not held (or still queued for writing, or the tier is off);
 *   -ESTALE  held for another snapshot or length: dropped (dropped_stale);
 *   -EBADMSG its checksum does not match: dropped (dropped_corrupt);
 *   -EIO     the read failed: the tier is turned off (disabled).
 */
int cache_disk_read(struct cache_disk *d, struct cache_disk_key key, uint64_t snap, void *dst,
		    size_t len);

/* Direct reads (cache_disk_read_direct) read whole blocks of this size. */
#define CACHE_DISK_ALIGN ((size_t)4096)
/* The room a direct read of a len-byte unit needs in its buffer. */
static inline size_t cache_disk_room(size_t len)
{
	return len + 2 * CACHE_DISK_ALIGN;
}

/*
 * As cache_disk_read, with no page cache: buf, CACHE_DISK_ALIGN-aligned and
 * cache_disk_room(len) long, receives the blocks around the unit, which
 * starts at buf + *at (0 when the file system takes no direct I/O and the
 * read was buffered). Same returns.
 */
int cache_disk_read_direct(struct cache_disk *d, struct cache_disk_key key, uint64_t snap,
			   void *buf, size_t len, size_t *at);

/* Whether unit key of snapshot snap is written in the tier (not merely
 * queued), so that a read of it needs no SOURCE unless it turns out
 * corrupt. false without a tier or when it is off. */
bool cache_disk_holds(struct cache_disk *d, struct cache_disk_key key, uint64_t snap);

/* Whether an admission of len bytes for key would be taken now: 0, or
 * what cache_disk_admit would return (-EEXIST held or queued already,
 * -ENOSPC over the limit, counted in refused as admit would, -EBUSY
 * queue full, -EIO tier off). */
int cache_disk_check(struct cache_disk *d, struct cache_disk_key key, uint64_t snap, size_t len);

/*
 * Queue unit key (snapshot snap, len bytes at data) for writing. With
 * borrow, data must stay valid until cache_disk_close (the memory cache's
 * arena); else it is copied (bounded: the queue's copies are capped).
 * 0 (queued), -EEXIST (held or queued already), -ENOSPC (over the limit,
 * counted in refused), -EBUSY (queue full: a later read retries),
 * -EIO (tier off), -ENOMEM.
 */
int cache_disk_admit(struct cache_disk *d, struct cache_disk_key key, uint64_t snap,
		     const void *data, size_t len, bool borrow);

/*
 * How the writer reads a unit admitted borrowed (cache_disk_admit with
 * borrow): copy(arg, dst, src, len) puts the len bytes at src into dst.
 * Without one it reads them where they are. For the memory cache's arena,
 * whose pages the process's own mapping may never have touched (a read
 * through the mapping then costs a trap per page under shadow paging),
 * cache_copy_out reads them through the kernel instead; the writer keeps a
 * buffer of one unit for that (up to CACHE_DISK_UNIT_MAX). Before the
 * first admission.
 */
typedef void (*cache_disk_copier)(void *arg, void *dst, const void *src, size_t len);
void cache_disk_set_copier(struct cache_disk *d, cache_disk_copier copy, void *arg);
/* Wait until the index is loaded (after cache_disk_start); the units it
 * holds then. */
uint64_t cache_disk_wait_loaded(struct cache_disk *d);
/* Wait until the queue is empty (tests, prefill): 0, or -ETIMEDOUT. */
int cache_disk_flush(struct cache_disk *d, unsigned timeout_ms);

void cache_disk_get_stats(struct cache_disk *d, struct cache_disk_stats *out);

#endif
