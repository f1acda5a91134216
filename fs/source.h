/* SPDX-License-Identifier: MIT */
/*
 * SOURCE behind the mount, as one small table of operations: build the
 * namespace (a local directory is scanned, a bucket is listed), open and
 * close a per-file read handle where the implementation has one (a local
 * fd), read a range of a file, and name a file's snapshot (local: size and
 * mtime; S3: size and ETag) for the peer protocol. fs/io.c reads only
 * through this table; the implementations are fs/source_local.c and
 * fs/source_s3.c.
 *
 * Conventions: 0 or -errno. A file that no longer matches its snapshot
 * gives -EIO and one log line naming it; the source never returns mixed
 * bytes. The source logs its own failures (it knows the cause); the caller
 * counts them.
 *
 * Thread-safety: after build_ns every operation may run concurrently.
 */
#ifndef COORDFS_FS_SOURCE_H
#define COORDFS_FS_SOURCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "fs/ns.h"

struct fs_source;
struct remote_http;

/* Request-level counters of a source, beyond what fs/io.c counts. */
struct fs_source_stats {
	uint64_t requests;     /* requests sent (local: reads), retries included */
	uint64_t retries;      /* repeats after a retryable failure */
	uint64_t skipped_keys; /* listed objects that cannot be paths */
	double latency_p50_ms; /* time to first byte (local: of a pread) */
	double latency_p99_ms;
};

/* The S3 source's connections (source_s3.c), of which --prefill uses
 * FS_S3_PREFILL_PARALLEL; prefill stands back while the readers missing
 * the cache could use every connection it leaves them
 * (prefill_yield_readers). fs/fs.h's FS_SOURCE_WAITERS holds up with them. */
#define FS_S3_CONNECTIONS 64
#define FS_S3_PREFILL_PARALLEL 24

struct fs_source_ops {
	const char *kind; /* "local", "s3" */
	/* Requests worth keeping in flight to fill the cache (--prefill). */
	unsigned prefill_parallel;
	/* Prefill waits while at least this many readers miss the cache: 1
	 * (also 0) for a source whose requests queue behind each other (a
	 * disk); more for one that serves many at once, so that readers who
	 * are always missing (a DataLoader's workers over half-cached data)
	 * cannot starve the prefill. */
	unsigned prefill_yield_readers;
	/* Whether sequential reads that bypass the cache benefit from a
	 * readahead window per open file (high-latency sources). */
	bool wants_readahead;
	/* Build ns (chunk_size: the cache unit). Before the mount; may print
	 * nothing, but fills err with one line naming the cause. */
	int (*build_ns)(struct fs_source *src, struct ns *ns, uint64_t chunk_size, char *err,
			size_t errlen);
	/* The current attributes of node (any type, symlinks not followed)
	 * for its first lookup (ns_freeze), taken so that no symlink in SOURCE
	 * is followed. 0, or -errno: -ENOENT when it is gone. NULL: the
	 * namespace's attributes are all known when it is built. */
	int (*stat)(struct fs_source *src, const struct ns *ns, uint32_t node, struct stat *st);
	/* After daemonizing, before the first read (threads, connections).
	 * May be NULL. */
	int (*start)(struct fs_source *src);
	/* A read handle for regular file node, checked against the snapshot:
	 * 0 and *fh (>= 0, or -1 when the source has no handles), or -errno
	 * (-EIO final, -EAGAIN passing, as for read). */
	int (*open)(struct fs_source *src, const struct ns *ns, uint32_t node, int *fh);
	void (*close)(struct fs_source *src, int fh); /* fh >= 0 only */
	/* Read exactly len bytes at off of file node into buf, through fh
	 * (>= 0) or without a handle (-1). 0, or -EIO only when the snapshot
	 * no longer holds (changed, shrank, gone, 412/404; logged: final for
	 * this file), -EAGAIN for every other failure (an endpoint down after
	 * the retries, an S3 400/401/403, an NFS ETIMEDOUT or ESTALE: this
	 * read fails with EIO, a later read retries), -errno. Blocks. */
	int (*read)(struct fs_source *src, const struct ns *ns, uint32_t node, int fh, uint64_t off,
		    size_t len, void *buf);
	/* The snapshot of file node as an ETag for the peer protocol (quotes
	 * included), NUL-terminated. 0, or -ENAMETOOLONG when len is short. */
	int (*etag)(struct fs_source *src, const struct ns *ns, uint32_t node, char *buf,
		    size_t len);
	/* The snapshot of file node as the disk tier names it, across mounts
	 * of this node only, where etag (which other nodes' copies must match)
	 * is too weak: as for etag. NULL: etag. */
	int (*tier_id)(struct fs_source *src, const struct ns *ns, uint32_t node, char *buf,
		       size_t len);
	void (*get_stats)(struct fs_source *src, struct fs_source_stats *out);
	/* After start: the HTTP connection pool the source reads through, for
	 * the peer client to share (remote/http.h), or NULL. May be NULL. */
	struct remote_http *(*http_pool)(struct fs_source *src);
	/* Unmount: every request in flight and to come fails at once
	 * (-EAGAIN), so that no thread stays blocked on the source. May be
	 * NULL (a local read cannot be interrupted). */
	void (*cancel)(struct fs_source *src);
	void (*destroy)(struct fs_source *src);
};

struct fs_source {
	const struct fs_source_ops *ops;
	/* fs_source_problem's state (zero-initialized by the implementation's
	 * calloc): a bit per node, set once that file's first problem is
	 * logged; later ones are summed up in one line at most every
	 * FS_SOURCE_SUMMARY_S seconds. */
	_Atomic uint64_t *logged;
	_Atomic uint64_t unlogged;
	_Atomic int64_t summary_at;
	/* How long one small read took at mount, in microseconds (the object
	 * store's probe GET; 0: none made): fs/peer.c's guess of a SOURCE
	 * read's time until reads through fs are timed, so that a peer
	 * reading through a slow store at start is not taken for slow. */
	_Atomic uint64_t probe_us;
};

#define FS_SOURCE_SUMMARY_S 60

/*
 * The calling thread's deadline for source reads (CLOCK_MONOTONIC ms, as
 * deadline_now_ms(); 0: none), set by the read path (--source-timeout)
 * before it may reach the source: a source that can bound its waits (an
 * object store) starts no attempt after it and gives -EAGAIN.
 */
void fs_source_set_deadline(int64_t deadline_ms);
int64_t fs_source_deadline(void);

/* From a SIGTERM/SIGINT/SIGHUP handler (async-signal-safe): every
 * object-store request of the process in flight and to come fails within
 * about a second, so the FUSE threads blocked on one can be joined. */
void fs_source_stop_all(void);

/* After build_ns: room for one "logged" bit per node. 0 or -ENOMEM. */
int fs_source_log_init(struct fs_source *src, uint32_t nnodes);

/*
 * Log a problem with node's SOURCE file ("PATH: MESSAGE"): the first one per
 * file in full, later ones only counted, with a summary of those at most
 * every FS_SOURCE_SUMMARY_S seconds, so that a file read in a loop (or a
 * flood of EMFILE) cannot fill the log. Thread-safe.
 */
void fs_source_problem(struct fs_source *src, const struct ns *ns, uint32_t node, const char *fmt,
		       ...) __attribute__((format(printf, 4, 5)));

/* NULL ok. */
static inline void fs_source_destroy(struct fs_source *src)
{
	if (src) {
		void *logged = (void *)src->logged;
		src->ops->destroy(src);
		free(logged);
	}
}

/*
 * The local directory dir (an absolute path) as a source. 0 and *out, or
 * -errno with one line in err (missing, not a directory, unreadable).
 */
int fs_source_local_create(const char *dir, struct fs_source **out, char *err, size_t errlen);

/* S3 settings from the command line (coordfs(1), OPTIONS and SOURCE). Strings are borrowed. */
struct fs_source_s3_options {
	const char *url; /* s3://BUCKET[/PREFIX] */
	const char *endpoint, *region, *profile, *addressing;
	bool no_sign;
	uid_t uid; /* the objects' owner and group (--uid, --gid) */
	gid_t gid;
	mode_t file_mode, dir_mode; /* their permission bits (--file-mode, --dir-mode) */
	unsigned list_timeout_s; /* --list-timeout; 0: none */
	unsigned source_timeout_s; /* --source-timeout (the mount's GET probe too); 0: none */
};

/* Whether SOURCE names an object store (s3://...). */
bool fs_source_is_s3(const char *source);

/*
 * Split s3://BUCKET[/PREFIX] into malloc'ed *bucket and *prefix (without
 * leading or trailing '/', "" when absent). 0, -EINVAL (with one line in
 * err) or -ENOMEM.
 */
int fs_source_s3_parse_url(const char *url, char **bucket, char **prefix, char *err, size_t errlen);

/*
 * An S3 bucket as a source. Makes no request (the listing is build_ns).
 * 0 and *out, or -errno with one line in err (-EINVAL: bad URL or option;
 * -ENOTSUP: this build has no S3 client).
 */
int fs_source_s3_create(const struct fs_source_s3_options *o, struct fs_source **out, char *err,
			size_t errlen);

#endif
