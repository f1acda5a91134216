/* SPDX-License-Identifier: MIT */
/*
 * fs/: the FUSE front end. It owns the context of a mount and wires the
 * namespace, the MinIO cache, the peers (remote/) and the prepared view
 * (prep/) together. Only this module knows FUSE.
 *
 * Inode numbers: node i of the namespace is inode i + 1 (the root is
 * FUSE_ROOT_ID). Inodes of the prepared view have bit 62 set; see prepview.c.
 */
#ifndef COORDFS_FS_FS_H
#define COORDFS_FS_FS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/budget.h"
#include "fs/ns.h"

struct cache;
struct remote_peers;
struct remote_client;
struct remote_server;
struct prep_view;
struct fs_source;
struct fs_prefill;

/* Options from the command line / -o (coordfs(1), OPTIONS). */
struct fs_options {
	char *source;
	char *mountpoint;
	bool foreground;
	bool debug;
	char *cache_size;
	char *chunk_size;
	char *peers;
	char *node;
	char *listen;
	char *secret_file;
	bool prepared;
	char *prepared_name;
	char *prep_threads_arg;
	int prep_threads;
	char *prep_mem;
	char *prep_decoded_mem;
	char *seed;
	char *log_file;
	bool no_kernel_cache; /* --no-kernel-cache: every read reaches the daemon */
	bool prefill;
	/* object-store SOURCE (s3://BUCKET[/PREFIX]) */
	char *endpoint;
	char *region;
	char *profile;
	bool no_sign_request;
	char *s3_addressing;
	bool show_help;
	bool show_version;
	int npos;          /* positional arguments seen while parsing */
	char *parse_error; /* first problem found while parsing */
};

struct fs_counters {
	_Atomic uint64_t source_reads, source_bytes, source_errors;
	_Atomic uint64_t opens, reads, read_bytes;
	_Atomic uint64_t peer_fallbacks;
};

struct fs_ctx {
	struct fs_options opt;
	struct ns ns;
	struct fs_source *src; /* SOURCE: a directory or a bucket (fs/source.h) */
	struct cache *cache;
	uint64_t cache_bytes;
	uint64_t chunk_bytes;
	/* Transient memory outside the cache arena (prepared samples, decodes,
	 * peer buffers, server responses): --prep-mem when the prepared view
	 * is on, plus FS_IO_MEM for I/O buffers. */
	struct budget mem;
	bool mem_ready;
	struct fs_counters ctr;
	bool no_open; /* the kernel sends no opens (FUSE_CAP_NO_OPEN_SUPPORT) */
	int report_fd; /* main.c: pipe to the waiting parent until ready, else -1 */
	/* Readers that missed the cache and wait on SOURCE or a peer: prefill
	 * yields to them. */
	_Atomic unsigned readers_missing;
	struct fs_prefill *prefill; /* NULL without --prefill */
	struct timespec started;
	/* peers (NULL when single node) */
	struct remote_peers *peers;
	struct remote_client *client;
	struct remote_server *server;
	int listen_fd;
	char *secret;
	unsigned node;
	/* prepared view (NULL when off) */
	struct prep_view *prep;
	uint64_t prep_mem;
	uint64_t prep_decoded_mem; /* of prep_mem, the decoded tier's share */
	uint64_t seed;
};

/* The budget's allowance for I/O buffers (peer units, server responses). */
#define FS_IO_MEM (64ULL << 20)

static inline void fs_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* The low-level operations table (ops.c). */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops fs_ops;

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
	uint8_t *data; /* NULL: empty; else charged to *mem */
	uint32_t unit;
	size_t len;
	struct budget *mem;
};

void fs_peer_buf_init(struct fs_peer_buf *pb);
void fs_peer_buf_fini(struct fs_peer_buf *pb);

/*
 * Like fs_read_file, but when the range lies in one held unit, returns a
 * pointer into the cache instead of copying (*direct set, buf untouched).
 * pb (may be NULL) keeps whole units fetched from peers for this handle.
 */
ssize_t fs_read_file_ref(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			 uint64_t off, size_t len, void *buf, const void **direct);

/* The same for an open handle, with its readahead window (readahead.h) for
 * reads that bypass the cache. */
struct fs_readahead;
ssize_t fs_read_file_handle(struct fs_ctx *fs, uint32_t node, int fd, struct fs_peer_buf *pb,
			    struct fs_readahead *ra, uint64_t off, size_t len, void *buf,
			    const void **direct);

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

/* The statistics JSON (coordfs(1), STATISTICS) into sb (stats.c). */
struct strbuf;
void fs_stats_json(struct fs_ctx *fs, struct strbuf *sb);
void fs_stats_metrics(struct fs_ctx *fs, struct strbuf *sb);

/* Admit unit k of file node from SOURCE ahead of any read (io.c; see
 * cache_prefill): 0, -EEXIST (held or being filled), -ENOSPC, -errno. */
int fs_prefill_unit(struct fs_ctx *fs, uint32_t node, uint32_t k);

/* Whether every unit of file node is held by the cache. */
bool fs_file_cached(struct fs_ctx *fs, uint32_t node);

#endif
