/* SPDX-License-Identifier: MIT */
/*
 * A readahead window per open file, for reads that bypass the cache (it is
 * full, or this node does not own the unit) from a high-latency SOURCE: a
 * reader going through a large file sequentially then costs one request
 * per window instead of one per FUSE read. The window starts at
 * FS_RA_MIN, doubles while the reader stays sequential, up to FS_RA_MAX,
 * and resets on a seek; a reader that seeks every time gets no readahead
 * at all. Window memory is charged to the mount's budget (fs->mem); when
 * the budget has no room the read goes to SOURCE as it is.
 *
 * Thread-safety: concurrent reads of one handle are safe; the lock guards
 * the window's state only, never a fetch. A read that falls inside a
 * window being fetched waits for that fetch instead of fetching again (the
 * kernel sends a sequential reader's reads several at a time).
 */
#ifndef COORDFS_FS_READAHEAD_H
#define COORDFS_FS_READAHEAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FS_RA_MIN ((size_t)1 << 20)
#define FS_RA_MAX ((size_t)8 << 20)

struct budget;

struct fs_readahead {
	pthread_mutex_t lock;
	pthread_cond_t fetched; /* a window fetch ended */
	uint8_t *data;		/* NULL: empty; len bytes of the file from start */
	uint64_t start;
	size_t len;
	uint64_t next; /* where a sequential reader reads next */
	size_t window; /* 0 until the reader has been sequential once */
	bool fetching; /* a window [fetch_start, fetch_end) is on its way */
	uint64_t fetch_start, fetch_end;
};

void fs_readahead_init(struct fs_readahead *ra);
/* Frees the window and returns its bytes to mem. */
void fs_readahead_fini(struct fs_readahead *ra, struct budget *mem);

/* Reads exactly len bytes at off of the file into buf; 0 or -errno. */
typedef int (*fs_readahead_fetch_fn)(void *arg, uint64_t off, size_t len, void *buf);

/*
 * Serve [off, off+len) of a file of file_size bytes: from the window, or
 * by fetching a new window (or just the range, for a reader that seeks).
 * 0 or the fetch's -errno. Blocks during a fetch.
 */
int fs_readahead_read(struct fs_readahead *ra, struct budget *mem, uint64_t file_size, uint64_t off,
		      size_t len, void *buf, fs_readahead_fetch_fn fetch, void *arg);

#endif
