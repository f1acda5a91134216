/* SPDX-License-Identifier: MIT */
/*
 * The namespace: SOURCE's tree, its names taken once at mount into compact
 * arrays. Node i is a file, directory or symlink; the root is node 0. The
 * children of a directory are consecutive nodes sorted by name (the scan is
 * breadth-first), so lookup is a binary search; names and link targets live
 * in one string pool. A node costs 48 bytes, one state byte and its name:
 * ImageNet's 1.3M files fit in under 100 MiB.
 *
 * Names and types are fixed at mount. A scanned directory's other
 * attributes (size, mode, owner, mtime) are lazy: a node's are unknown
 * until ns_freeze() takes them at the node's first lookup, and fixed from
 * then on (ns_known()). A namespace built from a listing knows them all.
 *
 * Regular files own the cache units first .. first+count-1 (one unit for a
 * file up to chunk_size bytes, else one per chunk), numbered when the
 * file's attributes are frozen.
 *
 * Threads may use it without locks: names never change, and a node's
 * attributes are written once, before its state byte is released.
 */
#ifndef COORDFS_FS_NS_H
#define COORDFS_FS_NS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

struct ns_node {
	uint64_t size;
	int64_t mtime_ns;
	uint32_t parent;
	uint32_t name_off; /* into the pool; NUL-terminated */
	/* dir: first child; file: first cache unit; symlink: pool offset of the target */
	uint32_t first;
	uint32_t count;    /* dir: number of children; file: number of units */
	uint32_t uid, gid;
	union {
		uint32_t etag_off; /* object (ns_build): pool offset of its ETag (ns_etag), 0: none */
		uint32_t ino_fold; /* scanned file: ns_ino_fold of its inode, from ns_freeze */
	};
	uint16_t mode;     /* st_mode (type and permission bits); type only until known */
	uint16_t name_len;
};

struct ns_link { /* 24 bytes */
	uint64_t ino;
	int64_t ctime_ns; /* the inode's st_ctim when node was frozen */
	uint32_t dev;	  /* ns_dev_fold of st_dev */
	uint32_t node;
};

/* st_dev in 32 bits: exact for every device whose major is below 4096
 * and minor below 2^20 (glibc's encoding keeps those in the low 32). */
static inline uint32_t ns_dev_fold(uint64_t dev)
{
	return (uint32_t)(dev ^ (dev >> 32));
}

struct ns {
	struct ns_node *nodes;
	_Atomic uint8_t *known; /* per node: attributes known (frozen) */
	uint32_t nnodes;
	uint32_t nfiles;
	char *pool;
	size_t pool_len;
	uint64_t chunk_size;
	/* Grow as attributes are frozen: cache units numbered so far, files
	 * whose attributes are known and the sum of their sizes. */
	_Atomic uint64_t nunits;
	_Atomic uint64_t known_files;
	_Atomic uint64_t total_bytes;
	pthread_mutex_t freeze_lock;
	/* Hard links: with share_links (set by the daemon before serving),
	 * a file frozen with st_nlink > 1 whose inode another frozen file
	 * has, with the same size, mtime and ctime (which no one can set: a
	 * reused inode number, or a file changed and its mtime put back,
	 * differs there), takes that file's cache units
	 * instead of new ones, so its bytes are cached and read once. links:
	 * open addressing over (dev, ino), at most 3/4 full, under
	 * freeze_lock, holding only such files (24 bytes each, 32-64 bytes a
	 * file with the free slots). */
	bool share_links;
	struct ns_link *links;
	uint32_t links_cap, nlinks;
	_Atomic uint64_t shared_files; /* files frozen onto another's units */
	_Atomic uint64_t shared_bytes; /* and their sizes (in total_bytes too) */
	uint32_t ndirs; /* directories below the root */
	/* Entries left out of the namespace, each logged once at scan. */
	uint64_t skipped_special;    /* fifos, sockets, devices */
	uint64_t skipped_long;	     /* whose path would exceed PATH_MAX */
	uint64_t skipped_unreadable; /* entries not stat'ed, directories not read (whole or rest) */
};

/* An inode number in the 32 bits a scanned file's node keeps of it: two
 * files swapped by renames (same size, mtime, owner and mode, as tar and
 * cp -p leave them) differ here. */
static inline uint32_t ns_ino_fold(uint64_t ino)
{
	return (uint32_t)(ino ^ (ino >> 32));
}

/* Unit ids are 32-bit: a bound for cache_create(). */
#define NS_MAX_UNITS ((uint64_t)UINT32_MAX + 1)

/* Cache units of a file of size bytes, without the wrap of
 * (size + chunk - 1) / chunk near 2^64. */
static inline uint64_t ns_units_of(uint64_t size, uint64_t chunk_size)
{
	return size / chunk_size + (size % chunk_size != 0);
}

/* The largest file a namespace takes: its size must fit off_t, and its
 * unit count a node's 32-bit count. Beyond that the unit numbering would
 * wrap and a file would own another file's units. */
static inline uint64_t ns_max_file_size(uint64_t chunk_size)
{
	uint64_t by_units = (uint64_t)UINT32_MAX * chunk_size; /* chunk <= 2^32: no wrap */
	return by_units < (uint64_t)INT64_MAX ? by_units : (uint64_t)INT64_MAX;
}

/*
 * Scan the directory tree at source_fd (an O_DIRECTORY fd, kept by the
 * caller) for names and types only, as `find` walks a tree: directory
 * entries' d_type, a stat only where the filesystem gives none (then only
 * the type is taken), a readlink per symlink. Only the root's attributes
 * are known afterwards. Entries other than regular files, directories and
 * symlinks (fifos, sockets, devices), entries whose relative path would not
 * fit in PATH_MAX, and entries whose type cannot be learnt are skipped,
 * logged and counted (skipped_*). Trees over 2^32-2 nodes give -EOVERFLOW.
 * Returns 0 or -errno; on error *err names the path concerned.
 */
int ns_scan(struct ns *ns, int source_fd, uint64_t chunk_size, char *err, size_t errlen);
void ns_fini(struct ns *ns);

/* For the builders (ns_scan, ns_build): an empty namespace, and once its
 * nodes are final, their state bytes (all known, or none). */
void ns_reset(struct ns *ns, uint64_t chunk_size);
int ns_set_known(struct ns *ns, bool all);

/* For the builders: growable text (the string pool) addressed by 32-bit
 * offsets. ns_text_put appends len bytes of data, and a NUL when nul is
 * set; *off is where they start. 0, -ENOMEM or -EOVERFLOW (past 4 GiB). */
struct ns_text {
	char *buf;
	size_t len, cap;
};
int ns_text_put(struct ns_text *t, const void *data, size_t len, bool nul, uint32_t *off);

/*
 * A namespace from a key listing (object stores): collect (key, size, ETag,
 * mtime) records in any order with ns_listing_add, then ns_build sorts
 * them, splits keys on '/', and builds the same arrays as ns_scan: files
 * 0444, directories 0555 (mtime: their newest object's), all owned by
 * uid:gid. Keys that cannot be paths are left out, each logged once with
 * control characters escaped, and counted in *skipped: empty components
 * (a leading, doubled or trailing '/'), "." or "..", a component over 255
 * bytes, a NUL byte, an ETag over NS_MAX_ETAG bytes, a size over
 * ns_max_file_size(chunk_size), a repeated key, and a key that is also a
 * directory prefix of other keys (the file is dropped, the keys below it
 * kept).
 *
 * A listing is used by one thread at a time. 0 or -ENOMEM / -EOVERFLOW.
 */
#define NS_MAX_ETAG 128 /* quotes included; REMOTE_S3_MAX_ETAG, REMOTE_MAX_ETAG */
struct ns_listing;
int ns_listing_create(struct ns_listing **out);
void ns_listing_destroy(struct ns_listing *l); /* NULL ok */
int ns_listing_add(struct ns_listing *l, const char *key, size_t key_len, uint64_t size,
		   const char *etag, int64_t mtime_ns);
/* A key the lister could not use (why: a static string, e.g. "key over
 * 1024 bytes"): ns_build skips, logs and counts it like the others. */
int ns_listing_add_unusable(struct ns_listing *l, const char *key, size_t key_len,
			    const char *why);
/* The number of records added. */
size_t ns_listing_count(const struct ns_listing *l);
/* Who owns a listing's files and directories, and their permission bits. */
struct ns_owner {
	uint32_t uid, gid;
	uint32_t file_mode, dir_mode; /* permission bits only: 0444, 0555 by default */
};
/* Build ns from l (l may be destroyed afterwards). 0, or -errno with err
 * naming the problem (-ENOMEM, -EOVERFLOW). */
int ns_build(struct ns *ns, struct ns_listing *l, uint64_t chunk_size, const struct ns_owner *owner,
	     uint64_t *skipped, char *err, size_t errlen);

/* Whether node i's attributes are known. */
static inline bool ns_known(const struct ns *ns, uint32_t i)
{
	return atomic_load_explicit(&ns->known[i], memory_order_acquire) != 0;
}

/*
 * Freeze node i's attributes from st (its first lookup). The first call
 * wins; later ones return 0 and change nothing. A regular file gets its
 * cache units numbered, or, with share_links, those of another name of
 * the same inode frozen before with the same size, mtime and ctime (a hard
 * link).
 * Returns 0, -ESTALE when st's type is not the type
 * listed at mount (nothing is frozen), or -EOVERFLOW (the unit ids left,
 * less one kept for each file not yet frozen, are too few; or a file over
 * ns_max_file_size: nothing is frozen).
 */
int ns_freeze(struct ns *ns, uint32_t i, const struct stat *st);

/* The ETag of object node i (quotes as listed) into buf: its length, or
 * -ENOENT (none: not built from a listing), -ENAMETOOLONG. */
int ns_etag(const struct ns *ns, uint32_t i, char *buf, size_t buflen);

static inline const char *ns_name(const struct ns *ns, uint32_t i)
{
	return ns->pool + ns->nodes[i].name_off;
}

static inline bool ns_is_dir(const struct ns *ns, uint32_t i)
{
	return S_ISDIR(ns->nodes[i].mode);
}

static inline bool ns_is_reg(const struct ns *ns, uint32_t i)
{
	return S_ISREG(ns->nodes[i].mode);
}

/* Child of dir named name (len bytes): 0 and *child, or -ENOENT / -ENOTDIR. */
int ns_lookup(const struct ns *ns, uint32_t dir, const char *name, size_t len, uint32_t *child);

/* Resolve a relative path ("a/b/c", no "." or ".." components, no leading '/')
 * to a node without following symlinks. 0, -ENOENT or -EINVAL. */
int ns_resolve(const struct ns *ns, const char *relpath, uint32_t *node);

/* Relative path of node i into buf (root: ""). Returns its length, or
 * -ENAMETOOLONG when it does not fit. */
int ns_path(const struct ns *ns, uint32_t i, char *buf, size_t buflen);

/* Bytes of unit k of file i. */
static inline uint64_t ns_unit_len(const struct ns *ns, uint32_t i, uint32_t k)
{
	uint64_t off = (uint64_t)k * ns->chunk_size;
	uint64_t rest = ns->nodes[i].size - off;
	return rest < ns->chunk_size ? rest : ns->chunk_size;
}

#endif
