/* SPDX-License-Identifier: MIT */
/*
 * Attributes, entries and directory listings of namespace nodes, shared by
 * the dataset's tree (ops.c) and the prepared view's mirrors (prepview.c).
 */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <string.h>

#include "fs/attr.h"
#include "fs/fs.h"
#include "fs/io.h"

void fs_fill_attr(struct fs_ctx *fs, uint32_t node, struct stat *st)
{
	const struct ns_node *n = &fs->ns.nodes[node];

	memset(st, 0, sizeof(*st));
	st->st_ino = node + 1;
	st->st_mode = n->mode & ~(mode_t)0222;
	st->st_nlink = S_ISDIR(n->mode) ? 2 : 1;
	st->st_uid = n->uid;
	st->st_gid = n->gid;
	st->st_size = (off_t)n->size;
	if (S_ISLNK(n->mode))
		st->st_size = (off_t)strlen(fs->ns.pool + n->first);
	st->st_blksize = 65536;
	st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
	st->st_mtim.tv_sec = n->mtime_ns / 1000000000LL;
	st->st_mtim.tv_nsec = n->mtime_ns % 1000000000LL;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

void fs_fill_entry(struct fs_ctx *fs, uint32_t node, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = node + 1;
	e->generation = 1;
	e->attr_timeout = FS_ATTR_TIMEOUT;
	e->entry_timeout = FS_ATTR_TIMEOUT;
	fs_fill_attr(fs, node, &e->attr);
}

/* A file's attributes for readdirplus when the mount takes them in
 * listings (fs->list_attrs): a SOURCE stat, as the file's lookup would do
 * right after. A file that fails is listed without them; its lookup then
 * reports the error. */
static bool listed_attrs(struct fs_ctx *fs, uint32_t child)
{
	return atomic_load_explicit(&fs->list_attrs, memory_order_relaxed) &&
	       ns_is_reg(&fs->ns, child) && fs_node_attrs(fs, child) == 0;
}

/*
 * Directory offsets: 1 is ".", 2 is "..", 3 + i is child i. The same code
 * lists the prepared view's directories, which mirror real ones.
 */
void fs_readdir_common(fuse_req_t req, struct fs_ctx *fs, uint32_t dir, fuse_ino_t self_ino,
		       fuse_ino_t parent_ino, size_t size, off_t off, bool plus,
		       fs_readdir_filter_fn filter, fs_readdir_ino_fn ino_map, void *arg)
{
	char *buf = malloc(size);
	size_t used = 0;
	const struct ns_node *d = &fs->ns.nodes[dir];

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (off_t pos = off; pos < (off_t)d->count + 2; pos++) {
		struct fuse_entry_param e;
		const char *name;
		memset(&e, 0, sizeof(e));
		if (pos == 0) {
			name = ".";
			e.attr.st_ino = self_ino;
			e.attr.st_mode = S_IFDIR;
		} else if (pos == 1) {
			name = "..";
			e.attr.st_ino = parent_ino;
			e.attr.st_mode = S_IFDIR;
		} else {
			uint32_t child = d->first + (uint32_t)(pos - 2);
			if (filter && !filter(fs, child, arg))
				continue;
			name = ns_name(&fs->ns, child);
			if (ino_map) {
				if (ino_map(fs, child, plus, &e, arg) < 0)
					continue;
			} else if (plus && (ns_known(&fs->ns, child) || listed_attrs(fs, child))) {
				fs_fill_entry(fs, child, &e);
			} else {
				e.attr.st_ino = child + 1;
				e.attr.st_mode = fs->ns.nodes[child].mode & S_IFMT;
			}
		}
		size_t need;
		if (plus && pos >= 2) {
			need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, pos + 1);
		} else {
			struct stat st = e.attr;
			if (plus) {
				/* "." and ".." carry no lookup count in readdirplus. */
				memset(&e, 0, sizeof(e));
				e.attr = st;
				need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
							      pos + 1);
			} else {
				need = fuse_add_direntry(req, buf + used, size - used, name, &st,
							 pos + 1);
			}
		}
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}
