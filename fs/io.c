/* SPDX-License-Identifier: MIT */
/*
 * The read path below FUSE: a read of a dataset file is split into cache
 * units; each unit comes from the MinIO cache, from the peer that owns it,
 * or from SOURCE, through the source's operations (fs/source.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/cache.h"
#include "cache/disk.h"
#include "common/deadline.h"
#include "common/log.h"
#include "fs/fs.h"
#include "fs/io.h"
#include "fs/peer.h"
#include "fs/readahead.h"
#include "fs/snapshot.h"
#include "fs/source.h"

int fs_open_source(struct fs_ctx *fs, uint32_t node, int *fh)
{
	int rc = fs->src->ops->open(fs->src, &fs->ns, node, fh);

	/* Out of descriptors is the daemon's state, not the file's: the reader
	 * gets EMFILE and may retry; it is not a source error. */
	if (rc < 0 && rc != -EMFILE)
		fs_count(&fs->ctr.source_errors, 1);
	return rc;
}

void fs_close_source(struct fs_ctx *fs, int fh)
{
	if (fh >= 0)
		fs->src->ops->close(fs->src, fh);
}

/* Exactly len bytes at off of file node from SOURCE (the source logs why
 * it failed; the count is ours). */
static int source_read(struct fs_ctx *fs, uint32_t node, int fh, uint64_t off, size_t len,
		       void *buf)
{
	uint64_t t0 = deadline_now_us();
	int rc = fs->src->ops->read(fs->src, &fs->ns, node, fh, off, len, buf);

	if (rc < 0) {
		fs_count(&fs->ctr.source_errors, 1);
		return rc;
	}
	fs_count(&fs->ctr.source_reads, 1);
	fs_count(&fs->ctr.source_bytes, len);
	fs_source_timed(fs, deadline_now_us() - t0, len);
	return 0;
}

struct fill_ctx {
	struct fs_ctx *fs;
	uint32_t node;
	int fd; /* SOURCE handle, -1 until opened here (or none for this source) */
	bool own_fd;
	bool opened;
	bool allow_peer; /* false when serving a peer: never forward */
	bool limit_waiters; /* a reader's thread: at most FS_SOURCE_WAITERS wait */
	struct fs_peer_buf *pb;
	struct fs_readahead *ra; /* the handle's window, or NULL */
	/* The read's length when its buffer can take a whole unit of that
	 * length straight from the disk tier (aligned, with room for the
	 * blocks around it); else 0. */
	size_t in_place;
};

void fs_peer_buf_init(struct fs_peer_buf *pb)
{
	pthread_mutex_init(&pb->lock, NULL);
	pb->data = pb->base = NULL;
	pb->room = 0;
	pb->unit = 0;
	pb->len = 0;
	pb->taken = 0;
	pb->mem = NULL;
}

void fs_peer_buf_fini(struct fs_peer_buf *pb)
{
	pthread_mutex_destroy(&pb->lock);
	if (pb->base) {
		budget_free(pb->mem, pb->base, pb->room);
		budget_trim(pb->mem);
	}
	pb->data = pb->base = NULL;
}

/* Whole units up to this size are fetched at once for a handle. */
#define PEER_UNIT_MAX ((size_t)16 << 20)

/* [uoff, uoff+len) of unit k from the handle's kept unit, if it is k (the
 * buffer goes back once reads took as many bytes as the unit has: a
 * sequential reader's read that reaches its end, or the last of reads
 * that came out of order, as the kernel's readahead sends them on several
 * threads). */
static bool pb_take(struct fs_peer_buf *pb, uint32_t node, uint32_t k, uint64_t uoff, size_t len,
		    void *buf)
{
	uint8_t *done = NULL;
	size_t done_len = 0;

	if (!pb)
		return false;
	pthread_mutex_lock(&pb->lock);
	if (!pb->data || pb->node != node || pb->unit != k) {
		pthread_mutex_unlock(&pb->lock);
		return false;
	}
	memcpy(buf, pb->data + uoff, len);
	pb->taken += len;
	if (pb->taken >= pb->len) {
		done = pb->base;
		done_len = pb->room;
		pb->data = pb->base = NULL;
	}
	pthread_mutex_unlock(&pb->lock);
	if (done) {
		budget_free(pb->mem, done, done_len);
		budget_trim(pb->mem);
	}
	return true;
}

/* Unit k, whole at `whole` (unit_len bytes) in an allocation of room
 * bytes at base charged to mem, of which a read took `taken` bytes: kept
 * for the handle's next reads, or given back when that read took it all or
 * there is no handle. */
static void pb_keep(struct fs_peer_buf *pb, struct budget *mem, uint8_t *base, size_t room,
		    uint8_t *whole, uint32_t node, uint32_t k, size_t unit_len, size_t taken)
{
	if (!pb || taken >= unit_len) {
		budget_free(mem, base, room);
		return;
	}
	pthread_mutex_lock(&pb->lock);
	uint8_t *done = pb->base;
	size_t done_len = pb->room;
	pb->data = whole;
	pb->base = base;
	pb->room = room;
	pb->node = node;
	pb->unit = k;
	pb->len = unit_len;
	pb->taken = taken;
	pb->mem = mem;
	pthread_mutex_unlock(&pb->lock);
	if (done)
		budget_free(mem, done, done_len);
}

/* [uoff, uoff+len) of unit k from its owner: from the handle's last fetched
 * unit, else by fetching the whole unit once into a buffer charged to the
 * budget (never waiting for room: a full budget means fetching only the
 * range asked). A read that reaches the unit's end gives the buffer back
 * at once: sequential readers hold no memory between units. 0 or -errno. */
static int peer_read(struct fill_ctx *fc, uint32_t k, uint64_t uoff, size_t len, void *buf)
{
	struct fs_peer_buf *pb = fc->pb;
	struct budget *mem = &fc->fs->mem;
	size_t unit_len = (size_t)ns_unit_len(&fc->fs->ns, fc->node, k);

	if (!pb || unit_len > PEER_UNIT_MAX)
		return fs_peer_fetch(fc->fs, fc->node, k, uoff, len, buf);
	if (pb_take(pb, fc->node, k, uoff, len, buf))
		return 0;
	/* One read covering the whole unit needs no buffer of its own. */
	if (uoff == 0 && len == unit_len)
		return fs_peer_fetch(fc->fs, fc->node, k, 0, len, buf);
	uint8_t *whole = budget_malloc(mem, unit_len, 0);
	if (!whole)
		return fs_peer_fetch(fc->fs, fc->node, k, uoff, len, buf);
	int rc = fs_peer_fetch(fc->fs, fc->node, k, 0, unit_len, whole);
	if (rc < 0) {
		budget_free(mem, whole, unit_len);
		return rc;
	}
	memcpy(buf, whole + uoff, len);
	pb_keep(pb, mem, whole, unit_len, whole, fc->node, k, unit_len, len);
	return 0;
}

/* The handle for fc's file, opened (and checked) once per read; 0 or -errno. */
static int fill_ctx_open(struct fill_ctx *fc)
{
	if (fc->fd < 0 && !fc->opened) {
		int rc = fs_open_source(fc->fs, fc->node, &fc->fd);
		if (rc < 0)
			return rc;
		fc->opened = true;
		fc->own_fd = fc->fd >= 0;
	}
	return 0;
}

/* Give back a kept unit, if any. */
static void pb_drop(struct fs_peer_buf *pb)
{
	pthread_mutex_lock(&pb->lock);
	uint8_t *base = pb->base;
	size_t room = pb->room;
	pb->data = pb->base = NULL;
	pthread_mutex_unlock(&pb->lock);
	if (base)
		budget_free(pb->mem, base, room);
}

/* [uoff, uoff+len) of unit k of node from a recent disk unit (dr may be
 * NULL): true when one held it. */
static bool recent_take(struct fs_disk_recent *dr, uint32_t node, uint32_t k, uint64_t uoff,
			size_t len, void *buf)
{
	for (unsigned i = 0; dr && i < FS_DISK_RECENT; i++)
		if (pb_take(&dr->slot[i], node, k, uoff, len, buf))
			return true;
	return false;
}

/* Before reading unit k of node from disk for a read without a handle:
 * true when a slot served [uoff, uoff+len) into buf, after waiting for
 * another thread that was reading the unit; false when this thread reads
 * it, with *flight its entry (-1: none free) for recent_end. */
static bool recent_begin(struct fs_disk_recent *dr, uint32_t node, uint32_t k, uint64_t uoff,
			 size_t len, void *buf, int *flight)
{
	pthread_mutex_lock(&dr->lock);
	while (!recent_take(dr, node, k, uoff, len, buf)) {
		int free_at = -1, i;

		for (i = 0; i < FS_DISK_RECENT; i++) {
			if (dr->flight[i].busy && dr->flight[i].node == node && dr->flight[i].unit == k)
				break;
			if (!dr->flight[i].busy && free_at < 0)
				free_at = i;
		}
		if (i < FS_DISK_RECENT) { /* being read: wait, then look again */
			pthread_cond_wait(&dr->done, &dr->lock);
			continue;
		}
		if (free_at >= 0)
			dr->flight[free_at] = (struct fs_disk_flight){node, k, true};
		*flight = free_at;
		pthread_mutex_unlock(&dr->lock);
		return false;
	}
	pthread_mutex_unlock(&dr->lock);
	return true;
}

/* The unit of recent_begin's entry is in a slot, or failed: its waiters
 * look again. */
static void recent_end(struct fs_disk_recent *dr, int flight)
{
	if (flight < 0)
		return;
	pthread_mutex_lock(&dr->lock);
	dr->flight[flight].busy = false;
	pthread_cond_broadcast(&dr->done);
	pthread_mutex_unlock(&dr->lock);
}

/* The tier's writer reads units it borrows from the arena (cache_copy_out). */
static void arena_copy_out(void *arg, void *dst, const void *src, size_t len)
{
	cache_copy_out(arg, dst, src, len);
}

int fs_io_init(struct fs_ctx *fs)
{
	fs->fill_bounce = calloc(FS_FILL_BOUNCE, sizeof(*fs->fill_bounce));
	if (!fs->fill_bounce)
		return -ENOMEM;
	for (unsigned i = 0; i < FS_FILL_BOUNCE; i++)
		pthread_mutex_init(&fs->fill_bounce[i].lock, NULL);
	if (!fs->disk)
		return 0;
	cache_disk_set_copier(fs->disk, arena_copy_out, fs->cache);
	fs->disk_recent = calloc(1, sizeof(*fs->disk_recent));
	if (!fs->disk_recent)
		return -ENOMEM;
	for (unsigned i = 0; i < FS_DISK_RECENT; i++)
		fs_peer_buf_init(&fs->disk_recent->slot[i]);
	pthread_mutex_init(&fs->disk_recent->lock, NULL);
	pthread_cond_init(&fs->disk_recent->done, NULL);
	return 0;
}

void fs_io_fini(struct fs_ctx *fs)
{
	for (unsigned i = 0; fs->fill_bounce && i < FS_FILL_BOUNCE; i++) {
		struct fs_fill_bounce *b = &fs->fill_bounce[i];
		if (b->buf)
			budget_free(&fs->mem, b->buf, b->cap);
		pthread_mutex_destroy(&b->lock);
	}
	free(fs->fill_bounce);
	fs->fill_bounce = NULL;
	if (!fs->disk_recent)
		return;
	for (unsigned i = 0; i < FS_DISK_RECENT; i++)
		fs_peer_buf_fini(&fs->disk_recent->slot[i]);
	pthread_mutex_destroy(&fs->disk_recent->lock);
	pthread_cond_destroy(&fs->disk_recent->done);
	free(fs->disk_recent);
	fs->disk_recent = NULL;
}

/* Unit k of file node in the disk tier: its key and snapshot (from
 * fs_snapshot_tier_id). false when there is no tier, or the file's path or
 * snapshot cannot be named. */
static bool disk_unit(struct fs_ctx *fs, uint32_t node, uint32_t k, struct cache_disk_key *key,
		      uint64_t *snap)
{
	char path[PATH_MAX], etag[256];

	if (!fs->disk || ns_path(&fs->ns, node, path, sizeof(path)) < 0 ||
	    fs_snapshot_tier_id(fs, node, etag, sizeof(etag)) < 0)
		return false;
	*key = cache_disk_key(fs->opt.source, path, fs->ns.chunk_size, k);
	*snap = cache_disk_snap(etag, fs->ns.nodes[node].size);
	return true;
}

bool fs_io_disk_holds(struct fs_ctx *fs, uint32_t node, uint32_t k)
{
	struct cache_disk_key key;
	uint64_t snap;

	return disk_unit(fs, node, k, &key, &snap) && cache_disk_holds(fs->disk, key, snap);
}

/* Unit key (len bytes) from the disk tier into dst, the memory arena:
 * read direct into a buffer charged to the budget and copied (the arena is
 * not aligned for O_DIRECT), or buffered when the budget is short. 0 or
 * what cache_disk_read returns. */
static int tier_fill(struct fs_ctx *fs, struct cache_disk_key key, uint64_t snap, void *dst,
		     size_t len)
{
	size_t room = cache_disk_room(len), at;

	/* No buffer for a unit the tier does not hold for this snapshot (a
	 * first epoch's fills): cache_disk_read answers those without I/O,
	 * dropping (and counting) a unit of another snapshot. */
	if (len > CACHE_DISK_UNIT_MAX || !cache_disk_holds(fs->disk, key, snap))
		return cache_disk_read(fs->disk, key, snap, dst, len);
	uint8_t *base = budget_malloc_aligned(&fs->mem, room, CACHE_DISK_ALIGN, 0);
	if (!base)
		return cache_disk_read(fs->disk, key, snap, dst, len);
	int rc = cache_disk_read_direct(fs->disk, key, snap, base, len, &at);
	if (rc == 0)
		cache_copy_in(fs->cache, dst, base + at, len);
	budget_free(&fs->mem, base, room);
	return rc;
}

/* A free fill buffer of len bytes or more (locked: the caller unlocks it), or
 * NULL: the fill reads into the arena. */
static struct fs_fill_bounce *fill_bounce_take(struct fs_ctx *fs, size_t len)
{
	if (!fs->fill_bounce || len > fs->ns.chunk_size)
		return NULL;
	for (unsigned i = 0; i < FS_FILL_BOUNCE; i++) {
		struct fs_fill_bounce *b = &fs->fill_bounce[i];
		if (pthread_mutex_trylock(&b->lock) != 0)
			continue;
		if (b->cap >= len)
			return b;
		/* Grow in 64 KiB steps, so that units of about the same size
		 * do not make it grow each time. */
		size_t cap = (len + 65535) & ~(size_t)65535;
		if (cap > fs->ns.chunk_size)
			cap = len;
		uint8_t *p = budget_malloc(&fs->mem, cap, 0);
		if (p) {
			if (b->buf)
				budget_free(&fs->mem, b->buf, b->cap);
			b->buf = p;
			b->cap = cap;
			return b;
		}
		pthread_mutex_unlock(&b->lock);
		return NULL;
	}
	return NULL;
}

/* Unit k (len bytes, whole) into buf from its previous owner (a handoff)
 * or else SOURCE: 0 or the read's -errno. */
static int unit_from_elsewhere(struct fill_ctx *fc, uint32_t k, void *buf, size_t len)
{
	int rc = fs_peer_handoff(fc->fs, fc->node, k, buf, len);

	if (rc < 0 && (rc = fill_ctx_open(fc)) == 0)
		rc = source_read(fc->fs, fc->node, fc->fd, (uint64_t)k * fc->fs->ns.chunk_size,
				 len, buf);
	return rc;
}

/* unit_from_elsewhere into dst, the memory arena: through a fill buffer
 * when one is free. */
static int fill_from_elsewhere(struct fill_ctx *fc, uint32_t k, void *dst, size_t len)
{
	struct fs_ctx *fs = fc->fs;
	struct fs_fill_bounce *b = fill_bounce_take(fs, len);
	int rc = unit_from_elsewhere(fc, k, b ? b->buf : dst, len);

	if (b) {
		if (rc == 0)
			cache_copy_in(fs->cache, dst, b->buf, len);
		pthread_mutex_unlock(&b->lock);
	}
	return rc;
}

/* Fill a unit of the memory cache: from the disk tier when it holds it
 * (a remount warms memory from disk, not from SOURCE), else from its
 * previous owner when membership changed and that node holds it (a
 * handoff), else from SOURCE,
 * and then queue it for the tier: dst is the memory arena, which stays
 * valid until unmount, so the tier borrows it without a copy. */
static int fill_unit(void *arg, uint64_t unit, void *dst, size_t len)
{
	struct fill_ctx *fc = arg;
	const struct ns_node *n = &fc->fs->ns.nodes[fc->node];
	uint32_t k = (uint32_t)(unit - n->first);
	struct cache_disk_key key;
	uint64_t snap;
	bool tier = disk_unit(fc->fs, fc->node, k, &key, &snap);

	if (tier && tier_fill(fc->fs, key, snap, dst, len) == 0)
		return 0;
	int rc = fill_from_elsewhere(fc, k, dst, len);
	if (rc == 0 && tier)
		(void)cache_disk_admit(fc->fs->disk, key, snap, dst, len, true);
	return rc;
}

/* Unit k (unit_len bytes) whole from SOURCE into buf, queued for the disk
 * tier as a copy (the writer frees it): 0 or the read's -errno. */
static int spill_unit(struct fill_ctx *fc, uint32_t k, struct cache_disk_key key, uint64_t snap,
		      void *buf, size_t unit_len)
{
	int rc = unit_from_elsewhere(fc, k, buf, unit_len);

	if (rc == 0)
		(void)cache_disk_admit(fc->fs->disk, key, snap, buf, unit_len, false);
	return rc;
}

/* disk_read's read of the whole unit (below), kept in the handle's buffer
 * or a recent slot. */
static int disk_read_unit(struct fill_ctx *fc, uint32_t k, size_t unit_len,
			  struct cache_disk_key key, uint64_t snap, uint64_t uoff, size_t len,
			  void *buf, bool mine, bool in_place, const void **direct)
{
	struct fs_ctx *fs = fc->fs;
	struct budget *mem = &fs->mem;
	struct fs_disk_recent *dr = fs->disk_recent;
	/* Direct I/O: aligned, with room for the blocks around the unit. */
	size_t room = cache_disk_room(unit_len), at = 0;
	uint8_t *base = in_place ? buf : budget_malloc_aligned(mem, room, CACHE_DISK_ALIGN, 0);
	if (!base && !fc->pb && dr) {
		/* The recent units hold the budget: they go first. */
		for (unsigned i = 0; i < FS_DISK_RECENT; i++)
			pb_drop(&dr->slot[i]);
		base = budget_malloc_aligned(mem, room, CACHE_DISK_ALIGN, 0);
	}
	if (!base)
		return -ENOMEM;
	int rc = cache_disk_read_direct(fs->disk, key, snap, base, unit_len, &at);
	if (rc < 0 && mine && cache_disk_check(fs->disk, key, snap, unit_len) == 0) {
		at = 0;
		rc = spill_unit(fc, k, key, snap, base, unit_len);
	}
	if (in_place) {
		if (rc == 0)
			*direct = base + at;
		return rc;
	}
	if (rc < 0) {
		budget_free(mem, base, room);
		return rc;
	}
	memcpy(buf, base + at + uoff, len);
	struct fs_peer_buf *keep = fc->pb;
	if (!keep && dr)
		keep = &dr->slot[atomic_fetch_add_explicit(&dr->next, 1, memory_order_relaxed) %
				 FS_DISK_RECENT];
	pb_keep(keep, mem, base, room, base + at, fc->node, k, unit_len, len);
	return 0;
}

/*
 * [uoff, uoff+len) of unit k, which memory does not hold, from the disk
 * tier: the whole unit is read (its checksum covers all of it) into a
 * buffer charged to the budget, kept for the handle's next read. When the
 * tier lacks it and would take it (mine: this node owns the unit), the
 * whole unit is read from SOURCE instead and queued for the tier (a copy:
 * the writer frees it): memory's refusals spill to disk. A read of the
 * whole unit into a buffer that has room for the blocks around it (and
 * its alignment) reads there instead, with no buffer and no copy: *direct
 * points at the unit in buf. 0, or -errno: the caller then reads the range
 * elsewhere.
 */
static int disk_read(struct fill_ctx *fc, uint32_t k, uint64_t uoff, size_t len, void *buf,
		     bool mine, const void **direct)
{
	struct fs_ctx *fs = fc->fs;
	size_t unit_len = (size_t)ns_unit_len(&fs->ns, fc->node, k);
	struct cache_disk_key key;
	uint64_t snap;
	int flight = -1;

	if (unit_len > CACHE_DISK_UNIT_MAX || !disk_unit(fs, fc->node, k, &key, &snap))
		return -ENOENT;
	struct fs_disk_recent *dr = fs->disk_recent;
	/* In place only when this unit is the whole read (so buf is the read's
	 * buffer): *direct is then the reply, never copied into buf over itself. */
	bool in_place = uoff == 0 && len == unit_len && fc->in_place == len;
	if (fc->pb) {
		if (pb_take(fc->pb, fc->node, k, uoff, len, buf))
			return 0;
	} else if (dr && !in_place) {
		if (recent_begin(dr, fc->node, k, uoff, len, buf, &flight))
			return 0;
	} else if (recent_take(dr, fc->node, k, uoff, len, buf)) {
		return 0;
	}
	int rc = disk_read_unit(fc, k, unit_len, key, snap, uoff, len, buf, mine, in_place, direct);
	recent_end(dr, flight); /* flight is -1 without dr */
	return rc;
}

static int ra_fetch(void *arg, uint64_t off, size_t len, void *buf)
{
	struct fill_ctx *fc = arg;

	return source_read(fc->fs, fc->node, fc->fd, off, len, buf);
}

/*
 * One unit's share of a read: [uoff, uoff+len) of unit k. Either *direct is
 * set to cached bytes, or buf receives them.
 */
static int read_unit_from(struct fill_ctx *fc, uint32_t k, uint64_t uoff, size_t len, void *buf,
		     const void **direct)
{
	struct fs_ctx *fs = fc->fs;
	const struct ns_node *n = &fs->ns.nodes[fc->node];
	uint64_t unit = (uint64_t)n->first + k;
	uint64_t unit_len = ns_unit_len(&fs->ns, fc->node, k);
	const void *data;
	/* Ownership only matters on a miss; a hit skips the hashing. A node
	 * serving a peer takes the asker's word that it owns the unit: the
	 * two agree unless membership just changed, and then the asker's list
	 * is the newer one more often than not (a node that joined, or one
	 * that saw the change first), so the unit is admitted here once
	 * rather than read from SOURCE again when this node catches up. It
	 * never forwards (no loops). */
	bool mine = cache_holds(fs->cache, unit) || !fc->allow_peer ||
		    fs_peer_owns(fs, fc->node, k);
	int rc = cache_get(fs->cache, unit, unit_len, len, mine, fill_unit, fc, &data);
	if (rc == 0) {
		*direct = (const char *)data + uoff;
		return 0;
	}
	if (rc != -ENOSPC)
		return rc;
	*direct = NULL;
	if (fs->disk && disk_read(fc, k, uoff, len, buf, mine, direct) == 0)
		return 0;
	if (!mine && fc->allow_peer && peer_read(fc, k, uoff, len, buf) == 0)
		return 0;
	if ((rc = fill_ctx_open(fc)) < 0)
		return rc;
	uint64_t off = (uint64_t)k * fs->ns.chunk_size + uoff;
	if (fc->ra && fs->src->ops->wants_readahead)
		return fs_readahead_read(fc->ra, &fs->mem, n->size, off, len, buf, ra_fetch, fc);
	return source_read(fs, fc->node, fc->fd, off, len, buf);
}

_Static_assert(FS_SOURCE_WAITERS >= FS_S3_CONNECTIONS - FS_S3_PREFILL_PARALLEL,
	       "readers could wait for a place while S3 connections are free");
_Static_assert(FS_SOURCE_WAITERS < FS_FUSE_THREADS,
	       "a stalled source would hold every FUSE thread");

/* The deadline of a read starting now (0: none, options not checked). */
static int64_t read_deadline(const struct fs_ctx *fs)
{
	unsigned s = fs->opt.source_timeout_s;

	return s ? deadline_now_ms() + (int64_t)s * 1000 : 0;
}

/* How long a reader waits for one of the FS_SOURCE_WAITERS places. Short:
 * a waiting reader holds a FUSE thread too; against a healthy source
 * places free up in a request's time. */
#define WAITER_SLOT_MS 500

/* A place among the threads that may block on SOURCE: true, or false
 * when none freed up within WAITER_SLOT_MS (the source is stalled: the
 * reader gets EIO rather than one more thread stuck). */
static bool waiter_enter(struct fs_ctx *fs)
{
	struct timespec until;
	bool ok = true;

	/* CLOCK_REALTIME: the zero-initialized condition variable's clock. */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += WAITER_SLOT_MS * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&fs->waiters_lock);
	while (fs->source_waiters >= FS_SOURCE_WAITERS && ok)
		ok = pthread_cond_timedwait(&fs->waiters_cond, &fs->waiters_lock, &until) == 0 ||
		     fs->source_waiters < FS_SOURCE_WAITERS;
	if (ok)
		fs->source_waiters++;
	pthread_mutex_unlock(&fs->waiters_lock);
	return ok;
}

static void waiter_leave(struct fs_ctx *fs)
{
	pthread_mutex_lock(&fs->waiters_lock);
	fs->source_waiters--;
	pthread_cond_signal(&fs->waiters_cond);
	pthread_mutex_unlock(&fs->waiters_lock);
}

/* read_unit_from, counting a reader that misses the cache while it waits:
 * prefill (fs/prefill.c) yields to such readers. A reader thread
 * (limit_waiters) must first get one of FS_SOURCE_WAITERS places. */
static int read_unit(struct fill_ctx *fc, uint32_t k, uint64_t uoff, size_t len, void *buf,
		     const void **direct)
{
	struct fs_ctx *fs = fc->fs;

	if (cache_holds(fs->cache, (uint64_t)fs->ns.nodes[fc->node].first + k))
		return read_unit_from(fc, k, uoff, len, buf, direct);
	if (fc->limit_waiters && !waiter_enter(fs)) {
		fs_source_problem(fs->src, &fs->ns, fc->node,
				  "%u reads already wait on the source; EIO", FS_SOURCE_WAITERS);
		fs_count(&fs->ctr.source_errors, 1);
		return -EIO;
	}
	atomic_fetch_add_explicit(&fs->readers_missing, 1, memory_order_relaxed);
	int rc = read_unit_from(fc, k, uoff, len, buf, direct);
	atomic_fetch_sub_explicit(&fs->readers_missing, 1, memory_order_relaxed);
	if (fc->limit_waiters)
		waiter_leave(fs);
	return rc;
}

int fs_prefill_unit(struct fs_ctx *fs, uint32_t node, uint32_t k)
{
	const struct ns_node *n = &fs->ns.nodes[node];
	struct fill_ctx fc = { .fs = fs, .node = node, .fd = -1 };

	if (k >= n->count)
		return -EINVAL;
	/* A bound per unit, as for a reader: one stalled GET cannot hold a
	 * prefill worker (and readers waiting on its fill) for long. */
	fs_source_set_deadline(read_deadline(fs));
	int rc = cache_prefill(fs->cache, (uint64_t)n->first + k, ns_unit_len(&fs->ns, node, k),
			       fill_unit, &fc);

	if (fc.own_fd)
		fs_close_source(fs, fc.fd);
	return rc;
}

static ssize_t read_file(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			 struct fs_readahead *ra, uint64_t off, size_t len, void *buf, size_t room,
			 const void **direct, bool allow_peer)
{
	const struct ns_node *n = &fs->ns.nodes[node];
	struct fill_ctx fc = { fs, node, fd, false, false, allow_peer, allow_peer, pb, ra, 0 };
	size_t done = 0;
	ssize_t ret;
	int rc = fs_node_attrs(fs, node);

	/* --source-timeout bounds this whole read, retries included. */
	fs_source_set_deadline(read_deadline(fs));
	*direct = NULL;
	if (rc < 0)
		return rc;
	if (off >= n->size)
		return 0;
	if (len > n->size - off)
		len = (size_t)(n->size - off);
	if (room >= cache_disk_room(len) && (uintptr_t)buf % CACHE_DISK_ALIGN == 0)
		fc.in_place = len;
	while (done < len) {
		uint64_t pos = off + done;
		/* Never a unit past the file's own: unit first + k of another
		 * file would serve that file's bytes. ns.c keeps sizes and
		 * counts consistent; this is the check that makes it so. */
		if (pos / fs->ns.chunk_size >= n->count) {
			ret = -EIO;
			goto out;
		}
		uint32_t k = (uint32_t)(pos / fs->ns.chunk_size);
		uint64_t uoff = pos - (uint64_t)k * fs->ns.chunk_size;
		size_t piece = (size_t)(ns_unit_len(&fs->ns, node, k) - uoff);
		const void *d = NULL;

		if (piece > len - done)
			piece = len - done;
		rc = read_unit(&fc, k, uoff, piece, (char *)buf + done, &d);
		if (rc < 0) {
			/* A source's passing failure (its endpoint down after the
			 * retries) is EIO for this read; a later read retries. */
			ret = rc == -EAGAIN ? -EIO : rc;
			goto out;
		}
		if (d && done == 0 && piece == len) {
			*direct = d; /* the whole read lies in one held unit */
			break;
		}
		if (d)
			memcpy((char *)buf + done, d, piece);
		done += piece;
	}
	ret = (ssize_t)len;
out:
	if (fc.own_fd)
		fs_close_source(fs, fc.fd);
	return ret;
}

ssize_t fs_read_file_ref(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			 uint64_t off, size_t len, void *buf, size_t room, const void **direct)
{
	return read_file(fs, node, fd, pb, NULL, off, len, buf, room, direct, true);
}

ssize_t fs_read_file_handle(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			    struct fs_readahead *ra, uint64_t off, size_t len, void *buf,
			    size_t room, const void **direct)
{
	return read_file(fs, node, fd, pb, ra, off, len, buf, room, direct, true);
}

ssize_t fs_read_file_local(struct fs_ctx *fs, uint32_t node, uint64_t off, size_t len, void *buf,
			   const void **direct)
{
	return read_file(fs, node, -1, NULL, NULL, off, len, buf, len, direct, false);
}

int fs_node_attrs(struct fs_ctx *fs, uint32_t node)
{
	struct stat st;
	int rc;

	if (ns_known(&fs->ns, node))
		return 0;
	rc = fs->src->ops->stat ? fs->src->ops->stat(fs->src, &fs->ns, node, &st) : -EIO;
	if (rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM)
		return rc == -ENOMEM ? rc : -EMFILE; /* the daemon's state, not the file's */
	if (rc == 0) {
		rc = ns_freeze(&fs->ns, node, &st);
		if (rc == 0)
			return 0;
		fs_source_problem(fs->src, &fs->ns, node, "%s; EIO",
				  rc == -ESTALE ? "its type changed since mount"
						: "too large for the cache unit ids left in the "
						  "namespace (2^32, one kept for each file not "
						  "looked up yet)");
		fs_count(&fs->ctr.source_errors, 1);
		return -EIO;
	}
	fs_count(&fs->ctr.source_errors, 1);
	if (rc == -ENOENT) {
		fs_source_problem(fs->src, &fs->ns, node, "gone since mount; ENOENT");
		return -ENOENT;
	}
	fs_source_problem(fs->src, &fs->ns, node, "cannot read its attributes: %s; EIO",
			  strerror(-rc));
	return -EIO;
}

ssize_t fs_read_file(struct fs_ctx *fs, uint32_t node, int fd, uint64_t off, size_t len, void *buf)
{
	const void *direct;
	ssize_t n = fs_read_file_ref(fs, node, fd, NULL, off, len, buf, len, &direct);

	if (n > 0 && direct)
		memcpy(buf, direct, (size_t)n);
	return n;
}

int fs_prefill_disk_unit(struct fs_ctx *fs, uint32_t node, uint32_t k)
{
	size_t unit_len = (size_t)ns_unit_len(&fs->ns, node, k);
	struct fill_ctx fc = { .fs = fs, .node = node, .fd = -1 };
	struct cache_disk_key key;
	uint64_t snap;

	if (!disk_unit(fs, node, k, &key, &snap))
		return -ENOSPC;
	if (unit_len > CACHE_DISK_UNIT_MAX)
		return -EFBIG;
	int rc = cache_disk_check(fs->disk, key, snap, unit_len);
	if (rc < 0)
		return rc;
	/* Prefill may wait for room in the budget; readers never do. */
	void *whole = budget_malloc(&fs->mem, unit_len, 1000);
	if (!whole)
		return -EBUSY;
	rc = spill_unit(&fc, k, key, snap, whole, unit_len);
	budget_free(&fs->mem, whole, unit_len);
	if (fc.own_fd)
		fs_close_source(fs, fc.fd);
	return rc;
}

bool fs_file_cached(struct fs_ctx *fs, uint32_t node)
{
	const struct ns_node *n = &fs->ns.nodes[node];

	for (uint32_t k = 0; k < n->count; k++)
		if (!cache_holds(fs->cache, (uint64_t)n->first + k))
			return false;
	return true;
}
