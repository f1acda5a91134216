/* SPDX-License-Identifier: MIT */
/*
 * The prepared view's own FUSE session (prepmount.c): mounted on a private
 * directory, MOUNTPOINT/NAME a symlink to it, so that the dataset's session
 * can skip opens (FUSE no-open support is per connection) while every
 * prepared sample keeps its open.
 */
#ifndef COORDFS_FS_PREPMOUNT_H
#define COORDFS_FS_PREPMOUNT_H

#include <stdbool.h>
#include <stddef.h>

struct fs_ctx;
struct fuse_lowlevel_ops;
struct fs_prepmount;

/* Remove private directories of daemons that are gone (their mounts
 * detached), create this one's and mount a session with ops on it
 * (mount_opts: one "-o..." argument). 0, or -errno with one line in err;
 * nothing is left behind on failure. */
int fs_prepmount_mount(struct fs_ctx *fs, const char *mount_opts,
		       const struct fuse_lowlevel_ops *ops, struct fs_prepmount **out, char *err,
		       size_t errlen);
/* The private directory MOUNTPOINT/NAME points to. */
const char *fs_prepmount_path(const struct fs_prepmount *pm);
/* Serve the session on threads of its own. 0 or -errno. */
int fs_prepmount_start(struct fs_prepmount *pm);
/* Unmount, join, remove the directory, free. Accepts NULL. false when the
 * session's threads did not end (its connection could not be aborted):
 * they may still use the view, which must then outlive the process. */
bool fs_prepmount_stop(struct fs_prepmount *pm);
/* Unmount and remove the directory only (the parent of a daemon that died
 * during start-up). Accepts NULL. */
void fs_prepmount_abandon(struct fs_prepmount *pm);

#endif
