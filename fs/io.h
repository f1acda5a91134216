/* SPDX-License-Identifier: MIT */
/* The read path below FUSE (io.c): cache, owning peer or SOURCE. */
#ifndef COORDFS_FS_IO_H
#define COORDFS_FS_IO_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct budget;
struct fs_ctx;

/*
 * Make node's attributes known (ns_freeze): its first lookup takes them from
 * SOURCE and they are fixed from then on; later calls cost one load.
 * 0, or -ENOENT (gone since mount), -EIO (its type changed, or SOURCE
 * cannot tell: logged once per file, counted in source.errors), -EMFILE.
 * Every path that serves a node's attributes or bytes calls it first.
 */
int fs_node_attrs(struct fs_ctx *fs, uint32_t node);

/*
 * Read [off, off+len) of regular file node into buf, through the cache,
 * the owning peer or SOURCE (io.c). fd is a SOURCE handle from
 * fs_open_source, or -1 to open one when needed. Returns the bytes read (short only at EOF)
 * or -errno (-EIO when the source file changed since mount).
 */
ssize_t fs_read_file(struct fs_ctx *fs, uint32_t node, int fd, uint64_t off, size_t len, void *buf);

/*
 * The last unit fetched from a peer for one open file: a reader of a file
 * another node owns gets it in one request, not one per FUSE read. The
 * buffer is charged to fs->mem; when the budget is full, reads fetch just
 * the range asked instead. It is given back when the handle's reader
 * reaches the unit's end, or at release.
 * Concurrent reads of one handle are safe (the lock guards the swap only).
 */
struct fs_peer_buf {
	pthread_mutex_t lock;
	uint8_t *data; /* the unit; NULL: empty */
	uint8_t *base; /* the allocation holding it (NULL with data), room bytes charged to *mem */
	size_t room;
	uint32_t node; /* the file (a handle's is always its own) */
	uint32_t unit;
	size_t len;
	size_t taken; /* bytes of it served so far (overlaps counted again) */
	struct budget *mem;
};

void fs_peer_buf_init(struct fs_peer_buf *pb);
void fs_peer_buf_fini(struct fs_peer_buf *pb);

/*
 * Whole units lately read from the disk tier for reads without a handle
 * (the kernel cache's no-open reads): a reader of a chunk in several FUSE
 * reads reads it from disk once. Made by fs_io_init when the mount has a
 * disk tier, given back by fs_io_fini.
 */
#define FS_DISK_RECENT 8
struct fs_disk_recent {
	struct fs_peer_buf slot[FS_DISK_RECENT];
	_Atomic unsigned next;
	/* Units being read from disk into a slot, so that the kernel's
	 * readahead, several FUSE reads of one unit on several threads at
	 * once, reads it once: the others wait for the slot. */
	pthread_mutex_t lock;
	pthread_cond_t done;
	struct fs_disk_flight {
		uint32_t node, unit;
		bool busy;
	} flight[FS_DISK_RECENT];
};
/*
 * Buffers that fills of the memory cache read into before the copy into
 * the arena (cache_copy_in): kept for the mount's life, so their pages
 * stay mapped and were touched before, where a read straight into fresh
 * arena pages pays a first touch per page (a hypervisor trap under shadow
 * paging). Each grows to the largest unit it took, up to the chunk size,
 * charged to the I/O budget; a fill that finds none free (or no budget)
 * reads into the arena directly.
 */
#define FS_FILL_BOUNCE 2
struct fs_fill_bounce {
	pthread_mutex_t lock;
	uint8_t *buf;
	size_t cap;
};
/* 0 or -ENOMEM. */
int fs_io_init(struct fs_ctx *fs);
/* Whether the disk tier holds unit k of file node (written, this
 * snapshot). */
bool fs_io_disk_holds(struct fs_ctx *fs, uint32_t node, uint32_t k);
void fs_io_fini(struct fs_ctx *fs);

/*
 * Like fs_read_file, but when the range lies in one held unit, returns a
 * pointer into the cache instead of copying (*direct set, buf untouched).
 * pb (may be NULL) keeps whole units fetched from peers for this handle.
 * room: the bytes at buf (at least len). A buffer aligned to
 * CACHE_DISK_ALIGN with cache_disk_room(len) bytes (cache/disk.h) lets a
 * read of a whole unit from the disk tier land in it with no copy
 * (*direct then points into buf).
 */
ssize_t fs_read_file_ref(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			 uint64_t off, size_t len, void *buf, size_t room, const void **direct);

/* The same for an open handle, with its readahead window (readahead.h) for
 * reads that bypass the cache. */
struct fs_readahead;
ssize_t fs_read_file_handle(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			    struct fs_readahead *ra, uint64_t off, size_t len, void *buf,
			    size_t room, const void **direct);

/* The same for a peer's request: never forwarded to another node. */
ssize_t fs_read_file_local(struct fs_ctx *fs, uint32_t node, uint64_t off, size_t len, void *buf,
			   const void **direct);

/* Open SOURCE's file for node, checking it still matches the snapshot:
 * 0 and *fh (a handle >= 0, or -1 for a source without handles), or -errno:
 * -EIO (and a log line) when it changed or cannot be opened, -EMFILE when
 * the daemon is out of descriptors (EMFILE or ENFILE). */
int fs_open_source(struct fs_ctx *fs, uint32_t node, int *fh);
/* Close a handle from fs_open_source (-1 ok). */
void fs_close_source(struct fs_ctx *fs, int fh);

/* Admit unit k of file node from SOURCE ahead of any read (io.c; see
 * cache_prefill): 0, -EEXIST (held or being filled), -ENOSPC, -errno. */
int fs_prefill_unit(struct fs_ctx *fs, uint32_t node, uint32_t k);

/* Queue unit k of file node for the disk tier, read from SOURCE, when
 * memory has no room (prefill, after memory): 0, or -EEXIST (held or
 * queued already), -ENOSPC (no tier, or it is full), -EFBIG (a unit over
 * CACHE_DISK_UNIT_MAX), -EBUSY (its queue or
 * the budget is full: retry later), -EIO (tier off), the read's -errno. */
int fs_prefill_disk_unit(struct fs_ctx *fs, uint32_t node, uint32_t k);

/* Whether every unit of file node is held by the cache. */
bool fs_file_cached(struct fs_ctx *fs, uint32_t node);

#endif
