/* SPDX-License-Identifier: MIT */
/*
 * The prepared view (SPEC §3) in the namespace: MOUNTPOINT/NAME/RECIPE/REL
 * mirrors every directory and image file of the dataset, and reading a
 * mirrored file returns the sample prep/ made of it. Mirrors have no state:
 * their inode numbers encode the recipe and the real node.
 *
 * Every prepared file is opened with direct I/O: a random recipe gives a
 * new sample on every open, so the kernel must neither cache its pages nor
 * skip its opens; deterministic samples are cached by prep/ itself.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/log.h"
#include "fs/fs.h"
#include "fs/prepview.h"
#include "fs/stats.h"
#include "prep/prep.h"

#define PREP_INO_BASE (1ULL << 62)
#define TIMEOUT 86400.0

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

static bool mirrored(struct fs_ctx *fs, uint32_t node)
{
	return ns_is_dir(&fs->ns, node) ||
	       (ns_is_reg(&fs->ns, node) && prep_is_image_name(ns_name(&fs->ns, node)));
}

static void top_attr(struct fs_ctx *fs, struct stat *st)
{
	fs_fill_attr(fs, 0, st);
	st->st_ino = PREP_INO_BASE;
	st->st_mode = S_IFDIR | 0555;
}

/* Attributes of the mirror of node under recipe r. A file whose size cannot
 * be known (an undecodable header) shows size 0; reading it gives EIO. */
static void mirror_attr(struct fs_ctx *fs, const struct prep_recipe *r, uint32_t node,
			struct stat *st)
{
	fs_fill_attr(fs, node, st);
	st->st_ino = mirror_ino(r, node);
	if (ns_is_reg(&fs->ns, node)) {
		uint64_t size = 0;
		if (prep_view_size(fs->prep, node, r, &size) < 0)
			size = 0;
		st->st_size = (off_t)size;
		st->st_blocks = (blkcnt_t)((size + 511) / 512);
		st->st_mode = S_IFREG | 0444;
	}
}

static void entry_of(struct fuse_entry_param *e, const struct stat *st)
{
	memset(e, 0, sizeof(*e));
	e->ino = st->st_ino;
	e->generation = 1;
	e->attr = *st;
	e->attr_timeout = TIMEOUT;
	e->entry_timeout = TIMEOUT;
}

bool fs_prep_owns(struct fs_ctx *fs, fuse_ino_t ino)
{
	return fs->prep && (ino & PREP_INO_BASE);
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
		mirror_attr(fs, &r, 0, &st);
		entry_of(e, &st);
		return 0;
	}
	int rc = ns_lookup(&fs->ns, dir, name, strlen(name), &child);
	if (rc < 0)
		return rc;
	if (!mirrored(fs, child))
		return -ENOENT;
	mirror_attr(fs, &r, child, &st);
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
	if (top)
		top_attr(fs, st);
	else
		mirror_attr(fs, &r, node, st);
	return 0;
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

static int map_mirror(struct fs_ctx *fs, uint32_t child, struct fuse_entry_param *e, void *arg)
{
	struct stat st;

	mirror_attr(fs, arg, child, &st);
	entry_of(e, &st);
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

/*
 * A prepared file's handle. Reads hold a reference across their reply, so
 * a release racing with the tail of a reply never frees the bytes in use.
 */
struct prep_handle {
	struct prep_sample *sample;
	_Atomic int refs;
};

static void handle_put(struct fs_ctx *fs, struct prep_handle *h)
{
	if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1) {
		prep_sample_put(fs->prep, h->sample);
		free(h);
	}
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
	int plen = ns_path(&fs->ns, node, path, sizeof(path));
	if (plen < 0) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	/* The key depends on the path only, so a remount makes the same samples. */
	uint64_t key = hash_bytes(path, (size_t)plen, 0);
	struct prep_handle *h = malloc(sizeof(*h));
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int rc = prep_view_open(fs->prep, fuse_req_ctx(req)->pid, node, key, &r, &sample);
	if (rc < 0) {
		free(h);
		fuse_reply_err(req, rc == -ENOMEM ? ENOMEM : EIO);
		return;
	}
	h->sample = sample;
	atomic_init(&h->refs, 1);
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
	return src_read_prefix(arg, node, (size_t)1 << 30, data, len);
}

static const struct prep_source_ops source_ops = {
	.read_file = src_read_file,
	.read_prefix = src_read_prefix,
};

int fs_prep_start(struct fs_ctx *fs)
{
	if (!fs->opt.prepared)
		return 0;
	struct prep_config cfg = {
		.seed = fs->seed,
		.mem_budget = fs->prep_mem,
		.threads = (unsigned)fs->opt.prep_threads,
		.nfiles = fs->ns.nnodes,
		.job_idle_s = 30,
	};
	fs->prep = prep_view_create(&cfg, &source_ops, fs);
	return fs->prep ? 0 : -ENOMEM;
}

void fs_prep_stop(struct fs_ctx *fs)
{
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
}
