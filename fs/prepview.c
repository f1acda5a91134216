/* SPDX-License-Identifier: MIT */
/*
 * The prepared view (coordfs(1), THE PREPARED VIEW) in the namespace: MOUNTPOINT/NAME/RECIPE/REL
 * mirrors every directory and image file of the dataset, and reading a
 * mirrored file returns the sample prep/ made of it. Mirrors have no state:
 * their inode numbers encode the recipe and the real node.
 *
 * Every prepared file is opened with direct I/O: a random recipe gives a
 * new sample on every open, so the kernel must neither cache its pages nor
 * skip its opens; deterministic samples are cached by prep/ itself.
 *
 * Permissions: a mirror carries its source's mode (write bits cleared),
 * owner and group, so the kernel's default_permissions decides as for the
 * raw file. A symlink whose name is an image name and whose target, inside
 * SOURCE, is a regular file is mirrored as that file (torchvision's
 * ImageFolder follows links), with the target's attributes, minus the
 * permission classes that some directory on the target's own path denies
 * (the raw path needs search permission there too).
 *
 * Errors: a sample that cannot be made (undecodable file, unreadable
 * source) opens fine and fails every read with EIO (coordfs(1), THE PREPARED VIEW: read, not
 * open). An open refused for memory (the view's budget fs->prep_mem,
 * --prep-mem, stayed full) or because the job table is full fails open()
 * with ENOMEM or EAGAIN: nothing is pinned and the job's version is not
 * consumed, so the reader may simply retry.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/log.h"
#include "common/size.h"
#include "fs/attr.h"
#include "fs/counters.h"
#include "fs/fs.h"
#include "fs/io.h"
#include "fs/prepview.h"
#include "fs/source.h"
#include "prep/prep.h"

#define PREP_INO_BASE (1ULL << 62)

/* FUSE requests on the view's files (stats: prep.opens, prep.reads): the
 * requests per sample a reader costs, countable on a loaded machine. */
static _Atomic uint64_t view_opens, view_reads;

/* Recipe <-> the 30-bit code in an inode; code 0 is NAME itself. */
static uint64_t recipe_code(const struct prep_recipe *r)
{
	return ((uint64_t)r->kind + 1) * 2048 + r->size;
}

static bool code_recipe(uint64_t code, struct prep_recipe *r)
{
	if (code < 2048)
		return false;
	r->kind = (enum prep_kind)(code / 2048 - 1);
	r->size = (unsigned)(code % 2048);
	return r->kind <= PREP_RESIZE && r->size >= PREP_MIN_SIZE && r->size <= PREP_MAX_SIZE;
}

static fuse_ino_t mirror_ino(const struct prep_recipe *r, uint32_t node)
{
	return PREP_INO_BASE | recipe_code(r) << 32 | ((uint64_t)node + 1);
}

/* Decode an inode of the view: NAME itself (*is_top), or recipe + node. */
static int parse_ino(struct fs_ctx *fs, fuse_ino_t ino, bool *is_top, struct prep_recipe *r,
		     uint32_t *node)
{
	if (!(ino & PREP_INO_BASE))
		return -ENOENT;
	uint64_t code = (ino & ~PREP_INO_BASE) >> 32;
	uint64_t idx = ino & 0xffffffffULL;

	*is_top = code == 0 && idx == 0;
	if (*is_top)
		return 0;
	if (!code_recipe(code, r) || idx == 0 || idx > fs->ns.nnodes)
		return -ENOENT;
	*node = (uint32_t)(idx - 1);
	return 0;
}

#define MAX_LINK_HOPS 40

/*
 * Follow symlink node inside the namespace to what it names: relative
 * targets from the link's directory, absolute ones only below SOURCE's
 * real path, "." and ".." (never above SOURCE's root), chains of links up
 * to MAX_LINK_HOPS. Anything leaving SOURCE or naming nothing gives false.
 * On success *out is a file or directory node.
 */
static bool follow_link(struct fs_ctx *fs, uint32_t node, uint32_t *out, unsigned *hops)
{
	const struct ns *ns = &fs->ns;
	const char *t = ns->pool + ns->nodes[node].first;
	uint32_t cur = ns->nodes[node].parent;

	if (++*hops > MAX_LINK_HOPS || *t == '\0')
		return false;
	if (*t == '/') {
		size_t sl = strlen(fs->opt.source);
		if (strncmp(t, fs->opt.source, sl) != 0 || (t[sl] != '/' && t[sl] != '\0'))
			return false;
		t += sl;
		cur = 0;
	}
	while (*t) {
		const char *end = strchr(t, '/');
		size_t len = end ? (size_t)(end - t) : strlen(t);
		uint32_t child;

		if (len == 0 || (len == 1 && t[0] == '.')) {
			/* nothing */
		} else if (len == 2 && t[0] == '.' && t[1] == '.') {
			if (cur == 0)
				return false; /* above SOURCE */
			cur = ns->nodes[cur].parent;
		} else {
			if (!ns_is_dir(ns, cur) || ns_lookup(ns, cur, t, len, &child) < 0)
				return false;
			if (S_ISLNK(ns->nodes[child].mode) && !follow_link(fs, child, &child, hops))
				return false;
			cur = child;
		}
		t += len;
		if (*t == '/')
			t++;
	}
	*out = cur;
	return ns_is_dir(ns, cur) || ns_is_reg(ns, cur);
}

/*
 * What the view shows for node: a directory; an image file (a regular
 * file with an image name, or a symlink with an image name leading to a
 * regular file inside SOURCE: *file is that file); a broken image (a
 * symlink with an image name leading nowhere or out of SOURCE: listed, as
 * ImageFolder lists it, but every read fails); or nothing (other names,
 * symlinks to directories).
 */
enum mirror { MIRROR_NONE, MIRROR_DIR, MIRROR_FILE, MIRROR_BROKEN };

static enum mirror classify(struct fs_ctx *fs, uint32_t node, uint32_t *file)
{
	unsigned hops = 0;
	uint32_t target;

	if (ns_is_dir(&fs->ns, node))
		return MIRROR_DIR;
	if (!prep_is_image_name(ns_name(&fs->ns, node)))
		return MIRROR_NONE;
	if (ns_is_reg(&fs->ns, node)) {
		*file = node;
		return MIRROR_FILE;
	}
	if (!S_ISLNK(fs->ns.nodes[node].mode))
		return MIRROR_NONE;
	if (!follow_link(fs, node, &target, &hops))
		return MIRROR_BROKEN;
	if (ns_is_dir(&fs->ns, target))
		return MIRROR_NONE;
	*file = target;
	return MIRROR_FILE;
}

static bool mirrored(struct fs_ctx *fs, uint32_t node)
{
	uint32_t file;

	return classify(fs, node, &file) != MIRROR_NONE;
}

/* Permission bits of file reached through a link: the raw path needs
 * search permission on every directory of the file's own path too. Where
 * one of them does not grant it to every class, only the file's owner
 * keeps access, and only when it owns that directory and may search it:
 * the mirror is never more open than the raw path. */
static mode_t link_perm(const struct ns *ns, uint32_t file)
{
	const struct ns_node *f = &ns->nodes[file];
	mode_t perm = f->mode & 0555;

	for (uint32_t d = f->parent;; d = ns->nodes[d].parent) {
		const struct ns_node *n = &ns->nodes[d];
		if ((n->mode & 0111) != 0111) {
			perm &= 0500;
			if (n->uid != f->uid || !(n->mode & S_IXUSR))
				perm = 0;
		}
		if (d == 0)
			break;
	}
	return perm;
}

static void top_attr(struct fs_ctx *fs, struct stat *st)
{
	fs_fill_attr(fs, 0, st);
	st->st_ino = PREP_INO_BASE;
	st->st_mode = S_IFDIR | 0555;
}

/* Make the attributes the mirror of file shows known: the file's, and for
 * a file reached through a link (link_perm) its directories'. */
static int mirror_known(struct fs_ctx *fs, uint32_t node, uint32_t file)
{
	int rc = fs_node_attrs(fs, node);

	if (rc == 0 && file != node) {
		rc = fs_node_attrs(fs, file);
		for (uint32_t d = fs->ns.nodes[file].parent; rc == 0 && d != 0;
		     d = fs->ns.nodes[d].parent)
			rc = fs_node_attrs(fs, d);
	}
	return rc;
}

/* Attributes of the mirror of node under recipe r: the source's owner,
 * group and mode without write bits (directories as they are), taken from
 * SOURCE at the first lookup like the raw file's (fs_node_attrs). A file
 * whose size cannot be known (an undecodable header) shows size 0; reading
 * it gives EIO. 0, or -errno from fs_node_attrs. */
static int mirror_attr(struct fs_ctx *fs, const struct prep_recipe *r, uint32_t node,
		       struct stat *st)
{
	uint32_t file = node;
	enum mirror kind = classify(fs, node, &file);
	int rc = mirror_known(fs, node, kind == MIRROR_FILE ? file : node);

	if (rc < 0)
		return rc;
	if (kind != MIRROR_FILE) {
		fs_fill_attr(fs, node, st);
		st->st_ino = mirror_ino(r, node);
		if (kind == MIRROR_BROKEN) {
			st->st_mode = S_IFREG | 0444;
			st->st_size = 0;
			st->st_blocks = 0;
		}
		return 0;
	}
	fs_fill_attr(fs, file, st);
	st->st_ino = mirror_ino(r, node);
	uint64_t size = 0;
	if (prep_view_size(fs->prep, file, r, &size) < 0)
		size = 0;
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	/* The preferred I/O size covers the whole sample (64 KiB to 1 MiB):
	 * buffered readers (Python's open(), hence PIL and ImageFolder) size
	 * their buffer by it, so a sample takes one FUSE read plus the one at
	 * EOF instead of one per 64 KiB (reads are direct I/O). */
	st->st_blksize = 65536;
	while ((uint64_t)st->st_blksize < size && st->st_blksize < (1 << 20))
		st->st_blksize *= 2;
	st->st_mode = S_IFREG | (file == node ? fs->ns.nodes[file].mode & 0555
					      : link_perm(&fs->ns, file));
	return 0;
}

static void entry_of(struct fuse_entry_param *e, const struct stat *st)
{
	memset(e, 0, sizeof(*e));
	e->ino = st->st_ino;
	e->generation = 1;
	e->attr = *st;
	e->attr_timeout = FS_ATTR_TIMEOUT;
	e->entry_timeout = FS_ATTR_TIMEOUT;
}

bool fs_prep_owns(struct fs_ctx *fs, fuse_ino_t ino)
{
	return fs->prep && (ino & PREP_INO_BASE);
}

fuse_ino_t fs_prep_top_ino(void)
{
	return PREP_INO_BASE;
}

bool fs_prep_is_root_name(struct fs_ctx *fs, const char *name)
{
	return fs->prep && !strcmp(name, fs->opt.prepared_name);
}

int fs_prep_lookup(struct fs_ctx *fs, fuse_ino_t parent, const char *name,
		   struct fuse_entry_param *e)
{
	struct stat st;
	struct prep_recipe r;
	bool top;
	uint32_t dir, child;
	int rc;

	if (parent == FUSE_ROOT_ID) {
		top_attr(fs, &st);
		entry_of(e, &st);
		return 0;
	}
	if (parse_ino(fs, parent, &top, &r, &dir) < 0)
		return -ENOENT;
	if (top) {
		char canon[32];
		if (prep_recipe_parse(name, &r) < 0 ||
		    prep_recipe_name(&r, canon, sizeof(canon)) < 0 || strcmp(canon, name))
			return -ENOENT;
		if ((rc = mirror_attr(fs, &r, 0, &st)) < 0)
			return rc;
		entry_of(e, &st);
		return 0;
	}
	rc = ns_lookup(&fs->ns, dir, name, strlen(name), &child);
	if (rc < 0)
		return rc;
	if (!mirrored(fs, child))
		return -ENOENT;
	if ((rc = mirror_attr(fs, &r, child, &st)) < 0)
		return rc;
	entry_of(e, &st);
	return 0;
}

int fs_prep_getattr(struct fs_ctx *fs, fuse_ino_t ino, struct stat *st)
{
	struct prep_recipe r;
	bool top;
	uint32_t node;

	if (parse_ino(fs, ino, &top, &r, &node) < 0)
		return -ENOENT;
	if (top) {
		top_attr(fs, st);
		return 0;
	}
	return mirror_attr(fs, &r, node, st);
}

int fs_prep_opendir(struct fs_ctx *fs, fuse_ino_t ino)
{
	struct prep_recipe r;
	bool top;
	uint32_t node;

	if (parse_ino(fs, ino, &top, &r, &node) < 0)
		return -ENOENT;
	return top || ns_is_dir(&fs->ns, node) ? 0 : -ENOTDIR;
}

static bool filter_mirrored(struct fs_ctx *fs, uint32_t child, void *arg)
{
	return mirrored(fs, child);
}

/* A mirror's listing entry: with attributes (plus) once they are known,
 * else its name, inode and type only, as listings take no attributes from
 * SOURCE (ImageFolder lists every directory and stats nothing). */
static int map_mirror(struct fs_ctx *fs, uint32_t child, bool plus, struct fuse_entry_param *e,
		      void *arg)
{
	struct stat st;
	uint32_t file = child;
	enum mirror kind = classify(fs, child, &file);

	if (plus && ns_known(&fs->ns, child) && ns_known(&fs->ns, file) &&
	    mirror_attr(fs, arg, child, &st) == 0) {
		entry_of(e, &st);
		return 0;
	}
	memset(e, 0, sizeof(*e));
	e->attr.st_ino = mirror_ino(arg, child);
	e->attr.st_mode = kind == MIRROR_DIR ? S_IFDIR : S_IFREG;
	return 0;
}

/* NAME lists a few recipes as examples; any valid one can be looked up. */
static void readdir_top(fuse_req_t req, struct fs_ctx *fs, size_t size, off_t off, bool plus)
{
	static const char *const examples[] = { ".", "..", "center224", "resize256", "rrc224" };
	char *buf = malloc(size);
	size_t used = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (off_t i = off; i < (off_t)(sizeof(examples) / sizeof(examples[0])); i++) {
		struct stat st;
		struct fuse_entry_param e;
		struct prep_recipe r;
		if (i < 2) {
			top_attr(fs, &st);
			if (i == 1)
				fs_fill_attr(fs, 0, &st);
		} else {
			prep_recipe_parse(examples[i], &r);
			mirror_attr(fs, &r, 0, &st);
		}
		size_t need;
		memset(&e, 0, sizeof(e));
		e.attr = st;
		if (plus) {
			if (i >= 2)
				entry_of(&e, &st);
			need = fuse_add_direntry_plus(req, buf + used, size - used, examples[i], &e,
						      i + 1);
		} else {
			need = fuse_add_direntry(req, buf + used, size - used, examples[i], &st,
						 i + 1);
		}
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

void fs_prep_readdir(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino, size_t size, off_t off,
		     bool plus)
{
	struct prep_recipe r;
	bool top;
	uint32_t node;

	if (parse_ino(fs, ino, &top, &r, &node) < 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (top) {
		readdir_top(req, fs, size, off, plus);
		return;
	}
	if (!ns_is_dir(&fs->ns, node)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fuse_ino_t parent = node == 0 ? PREP_INO_BASE : mirror_ino(&r, fs->ns.nodes[node].parent);
	fs_readdir_common(req, fs, node, ino, parent, size, off, plus, filter_mirrored, map_mirror,
			  &r);
}

/* The key of file node's samples: its path's hash, so a remount makes the
 * same samples. 0, or -ENAMETOOLONG. */
static int file_key(struct fs_ctx *fs, uint32_t node, uint64_t *key)
{
	char path[PATH_MAX];
	int plen = ns_path(&fs->ns, node, path, sizeof(path));

	if (plen < 0)
		return plen;
	*key = hash_bytes(path, (size_t)plen, 0);
	return 0;
}

/*
 * A prepared file's handle. Reads hold a reference across their reply, so
 * a release racing with the tail of a reply never frees the bytes in use.
 * Live handles are listed: a session whose connection was aborted at
 * unmount sends no release for files still open, and fs_prep_stop frees
 * those.
 */
struct prep_handle {
	struct prep_sample *sample; /* NULL when err is set */
	int err;		    /* positive errno every read gets */
	_Atomic int refs;
	struct prep_handle *prev, *next; /* live handles */
};

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct prep_handle *live_head;

static struct prep_handle *handle_new(struct prep_sample *sample, int err)
{
	struct prep_handle *h = malloc(sizeof(*h));

	if (!h)
		return NULL;
	h->sample = sample;
	h->err = err;
	atomic_init(&h->refs, 1);
	pthread_mutex_lock(&live_lock);
	h->prev = NULL;
	h->next = live_head;
	if (live_head)
		live_head->prev = h;
	live_head = h;
	pthread_mutex_unlock(&live_lock);
	return h;
}

static void handle_free(struct fs_ctx *fs, struct prep_handle *h)
{
	pthread_mutex_lock(&live_lock);
	if (h->prev)
		h->prev->next = h->next;
	else
		live_head = h->next;
	if (h->next)
		h->next->prev = h->prev;
	pthread_mutex_unlock(&live_lock);
	prep_sample_put(fs->prep, h->sample);
	free(h);
}

static void handle_put(struct fs_ctx *fs, struct prep_handle *h)
{
	if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1)
		handle_free(fs, h);
}

/* An open whose every read fails with err (coordfs(1), THE PREPARED VIEW: reads fail, not opens). */
static void open_failed(fuse_req_t req, struct fuse_file_info *fi, int err)
{
	struct prep_handle *h = handle_new(NULL, err);

	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->keep_cache = 0;
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) != 0)
		handle_free(fuse_req_userdata(req), h);
}

void fs_prep_open(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct prep_recipe r;
	bool top;
	uint32_t node;
	char path[PATH_MAX];
	struct prep_sample *sample;

	if (parse_ino(fs, ino, &top, &r, &node) < 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (top || ns_is_dir(&fs->ns, node)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	uint32_t file;
	enum mirror kind = classify(fs, node, &file);
	if (kind == MIRROR_NONE) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (kind == MIRROR_BROKEN) {
		if (ns_path(&fs->ns, node, path, sizeof(path)) >= 0)
			log_warn("prep: %s is a symlink leading nowhere or out of SOURCE: EIO",
				 path);
		open_failed(req, fi, EIO);
		return;
	}
	node = file;
	uint64_t key;
	if (file_key(fs, node, &key) < 0) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	atomic_fetch_add_explicit(&view_opens, 1, memory_order_relaxed);
	int rc = prep_view_open(fs->prep, ctx->pid, ctx->uid, node, key, &r, &sample);
	if (rc == -ENOMEM || rc == -EAGAIN) {
		fuse_reply_err(req, -rc);
		return;
	}
	struct prep_handle *h = handle_new(rc < 0 ? NULL : sample, rc < 0 ? EIO : 0);
	if (!h) {
		prep_sample_put(fs->prep, rc < 0 ? NULL : sample);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->keep_cache = 0;
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) != 0)
		handle_put(fs, h); /* interrupted or disconnected: no release */
}

void fs_prep_read(fuse_req_t req, struct fs_ctx *fs, struct fuse_file_info *fi, size_t size,
		  off_t off)
{
	struct prep_handle *h = (struct prep_handle *)(uintptr_t)fi->fh;
	size_t len;

	atomic_fetch_add_explicit(&view_reads, 1, memory_order_relaxed);
	if (h->err) {
		fuse_reply_err(req, h->err);
		return;
	}
	const uint8_t *data = prep_sample_data(h->sample, &len);

	if ((uint64_t)off >= len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > len - (size_t)off)
		size = len - (size_t)off;
	fs_count(&fs->ctr.read_bytes, size);
	atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
	fuse_reply_buf(req, (const char *)data + off, size);
	handle_put(fs, h);
}

void fs_prep_release(struct fs_ctx *fs, struct fuse_file_info *fi)
{
	struct prep_handle *h = (struct prep_handle *)(uintptr_t)fi->fh;

	if (h)
		handle_put(fs, h);
}

/* ---- the engine's source: dataset files through the cache and peers ---- */

static int src_read_prefix(void *arg, uint32_t node, size_t max, uint8_t **data, size_t *len)
{
	struct fs_ctx *fs = arg;

	if (node >= fs->ns.nnodes || !ns_is_reg(&fs->ns, node))
		return -ENOENT;
	int rc = fs_node_attrs(fs, node);
	if (rc < 0)
		return rc;
	uint64_t size = fs->ns.nodes[node].size;
	size_t want = size < max ? (size_t)size : max;
	uint8_t *buf = malloc(want ? want : 1);
	if (!buf)
		return -ENOMEM;
	ssize_t n = fs_read_file(fs, node, -1, 0, want, buf);
	if (n < 0) {
		free(buf);
		return (int)n;
	}
	*data = buf;
	*len = (size_t)n;
	return 0;
}

static int src_read_file(void *arg, uint32_t node, uint8_t **data, size_t *len)
{
	/* Dataset files are capped by the decoder's limits; 1 GiB bounds the copy. */
	int rc = src_read_prefix(arg, node, (size_t)1 << 30, data, len);

	/* a whole file read for a decode is one file of a pass (a header read
	 * for a size is not) */
	if (rc == 0)
		fs_count(&((struct fs_ctx *)arg)->ctr.dataset_read_bytes, *len);
	return rc;
}

static int src_file_name(void *arg, uint32_t node, char *buf, size_t len)
{
	struct fs_ctx *fs = arg;

	return ns_path(&fs->ns, node, buf, len) < 0 ? -ENAMETOOLONG : 0;
}

static uint64_t src_file_size(void *arg, uint32_t node)
{
	struct fs_ctx *fs = arg;

	if (node >= fs->ns.nnodes || fs_node_attrs(fs, node) < 0)
		return 0;
	return fs->ns.nodes[node].size;
}

/* For decode-ahead: the key fs_prep_open gives the file (0 when the path
 * cannot be named, which no open would give either). */
static uint64_t src_file_key(void *arg, uint32_t node)
{
	uint64_t key;

	return file_key(arg, node, &key) < 0 ? 0 : key;
}

static const struct prep_source_ops source_ops = {
	.read_file = src_read_file,
	.read_prefix = src_read_prefix,
	.file_name = src_file_name,
	.file_size = src_file_size,
	.file_key = src_file_key,
};

/* MemAvailable of /proc/meminfo in bytes, 0 when it cannot be read. */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

void fs_prep_size(struct fs_ctx *fs)
{
	struct fs_options *o = &fs->opt;

	if (!o->prepared || !o->prep_decoded_auto)
		return;
	/* the dataset's bytes: listed for every file (a bucket), else the
	 * mean size of the files among 64 nodes spread evenly over the
	 * namespace, stat'ed now (a local SOURCE takes sizes at first
	 * lookup), times the files; none found: unknown, and the tier keeps
	 * half of --prep-mem */
	uint64_t bytes = 0;
	if (atomic_load(&fs->ns.known_files) == fs->ns.nfiles) {
		bytes = atomic_load(&fs->ns.total_bytes);
	} else if (fs->src->ops->stat && fs->ns.nnodes) {
		uint64_t sum = 0, n = 0;
		uint32_t step = fs->ns.nnodes / 64 + 1;
		for (uint32_t i = 0; i < fs->ns.nnodes; i += step) {
			struct stat st;
			if (ns_is_reg(&fs->ns, i) && fs->src->ops->stat(fs->src, &fs->ns, i, &st) == 0) {
				sum += (uint64_t)st.st_size;
				n++;
			}
		}
		if (n)
			bytes = sum / n * fs->ns.nfiles;
	}
	/* the cache never evicts: what it may fill is not the tier's */
	uint64_t avail = mem_available();
	avail = avail > o->cache_bytes ? avail - o->cache_bytes : 0;
	uint64_t mem = o->prep_mem_bytes, dec = o->prep_decoded_bytes;
	if (prep_default_shares(o->prep_mem_bytes, !o->prep_mem_default, bytes, fs->ns.nfiles,
				avail, &mem, &dec) < 0)
		return;
	char m[32], d[32];
	log_info("prepared view: memory %s, decoded tier %s (sized from %u files of %llu bytes "
		 "and %llu MiB available%s)",
		 size_format(mem, m, sizeof(m)), size_format(dec, d, sizeof(d)), fs->ns.nfiles,
		 (unsigned long long)bytes, (unsigned long long)(avail >> 20),
		 o->prep_mem_default ? "" : ", within --prep-mem");
	o->prep_mem_bytes = mem;
	o->prep_decoded_bytes = dec;
}

int fs_prep_start(struct fs_ctx *fs)
{
	if (!fs->opt.prepared)
		return 0;
	struct prep_config cfg = {
		.seed = fs->opt.seed_value,
		.mem_budget = fs->opt.prep_mem_bytes,
		.decoded_mem = fs->opt.prep_decoded_bytes,
		.threads = (unsigned)fs->opt.prep_threads,
		.nfiles = fs->ns.nnodes,
		.job_idle_s = 30,
		.mem = &fs->prep_mem,
		.ahead_threads = (unsigned)fs->opt.prep_ahead,
		.ahead_idle = fs->opt.prep_ahead_idle,
		.exact = fs->opt.prep_exact,
	};

	/* Samples and decode buffers come and go by the thousand at up to a
	 * few MiB each. A fixed mmap threshold (setting it turns glibc's
	 * adaptive one off, which would otherwise climb to the sample size)
	 * gives every block over it back to the kernel at free, so memory
	 * returns when the load ends; budget_trim handles the smaller ones.
	 * Below it, a decode thread's arena keeps up to 8 MiB of free top
	 * instead of giving it back (madvise, a TLB shootdown, and page faults
	 * on the next sample's buffers) after every sample: daemon CPU per
	 * rrc224 sample of a 500x375 JPEG measured 1.6 -> 0.35 ms from the
	 * decoded tier, 2.1 -> 1.1 ms decoding the file (tools/bench/
	 * RESULTS-prepared.md); budget_trim still returns it all once the
	 * load drops. */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	mallopt(M_TRIM_THRESHOLD, 8 << 20);
	fs->prep = prep_view_create(&cfg, &source_ops, fs);
	return fs->prep ? 0 : -ENOMEM;
}

void fs_prep_stop(struct fs_ctx *fs)
{
	/* handles of files still open when the connection went (no release
	 * comes for them); every session thread has been joined */
	while (live_head)
		handle_free(fs, live_head);
	prep_view_destroy(fs->prep);
	fs->prep = NULL;
}

void fs_prep_collect(struct fs_ctx *fs, struct fs_stats *s)
{
	struct prep_stats ps;

	if (!fs->prep)
		return;
	prep_view_stats(fs->prep, &ps);
	s->prep_decodes = ps.decodes;
	s->prep_shared = ps.shared;
	s->prep_errors = ps.errors;
	s->prep_staged_bytes = ps.staged_bytes;
	s->prep_refused = ps.refused;
	s->prep_jobs = ps.jobs;
	s->prep_jobs_reclaimed = ps.jobs_reclaimed;
	s->prep_decoded_bytes = ps.decoded_bytes;
	s->prep_decoded_hits = ps.decoded_hits;
	s->prep_decoded_files = ps.decoded_files;
	s->prep_decoded_refused = ps.decoded_refused;
	s->prep_ahead = ps.ahead;
	s->prep_ahead_wasted = ps.ahead_wasted;
	s->prep_ahead_bytes = ps.ahead_bytes;
	s->prep_opens = atomic_load_explicit(&view_opens, memory_order_relaxed);
	s->prep_reads = atomic_load_explicit(&view_reads, memory_order_relaxed);
	s->prep_decoded_mem = fs->opt.prep_decoded_bytes;
	s->prep_decoded_auto = fs->opt.prep_decoded_auto;
}
