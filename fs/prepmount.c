/* SPDX-License-Identifier: MIT */
/*
 * The prepared view's own FUSE session. FUSE no-open support is negotiated
 * per connection: once the dataset's session answers an open with ENOSYS,
 * the kernel sends it no more opens, which raw files want (their pages stay
 * in the page cache, a warm read never reaches the daemon) and prepared
 * samples cannot have (each open is a new version). So the view gets a
 * connection of its own, mounted by this daemon on a private directory:
 *
 *   /run/coordfs/prep-PID-XXXXXX   (root; $XDG_RUNTIME_DIR/coordfs otherwise)
 *
 * and the dataset's session shows MOUNTPOINT/NAME as a symlink to it. The
 * directory is not inside MOUNTPOINT, so `fusermount3 -u MOUNTPOINT`,
 * `umount` and SIGTERM work in one step: the dataset's session ends, and
 * main.c stops this one (unmount, join, rmdir) before anything else goes.
 * A daemon that was killed leaves its directory behind with a dead mount on
 * it; the next daemon to start detaches and removes those whose PID is
 * gone.
 */
#include "fs/prepmount.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <libmount.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "fs/fs.h"

#define PREP_DIR_PREFIX "prep-"

struct fs_prepmount {
	struct fuse_session *se;
	char *path;
	pthread_t thread;
	bool running;
	dev_t dev; /* the mount's device: its connection in fusectl; 0 unknown */
};

/* The device of the mount at path, from the mount table (never from the
 * mount itself, whose session may not be served yet). 0 when unknown. */
static dev_t mount_dev(const char *path)
{
	struct libmnt_table *tb = mnt_new_table_from_file("/proc/self/mountinfo");
	struct libmnt_fs *f;
	dev_t dev = 0;

	if (!tb)
		return 0;
	f = mnt_table_find_target(tb, path, MNT_ITER_BACKWARD);
	if (f)
		dev = mnt_fs_get_devno(f);
	mnt_unref_table(tb);
	return dev;
}

#define FUSECTL_DIR "/sys/fs/fuse/connections"

/* Abort the session's connection (fusectl), so that its loop's reads end
 * even while a reader still holds a file of the lazily detached mount.
 * Where nothing mounted fusectl (systemd does at boot; containers and
 * minimal systems may not), root mounts it at its usual place: without it
 * a held sample would keep the session, and the unmount, waiting. */
static void abort_connection(dev_t dev)
{
	char path[64];
	int fd;

	if (!dev)
		return;
	snprintf(path, sizeof(path), FUSECTL_DIR "/%u/abort", minor(dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && geteuid() == 0) {
		if (mount("fusectl", FUSECTL_DIR, "fusectl", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  NULL) == 0)
			log_msg(LOG_NOTICE, "mounted fusectl on " FUSECTL_DIR
				 " (to end the prepared view's session)");
		fd = open(path, O_WRONLY | O_CLOEXEC);
	}
	if (fd < 0) {
		log_debug("%s: %s", path, strerror(errno));
		return;
	}
	if (write(fd, "1", 1) < 0)
		log_debug("%s: %s", path, strerror(errno));
	close(fd);
}

const char *fs_prepmount_path(const struct fs_prepmount *pm)
{
	return pm->path;
}

/* The parent of the private directories: root's, or the user's runtime
 * directory. Created 0755 (others must traverse it to read the view). */
static int base_dir(char *out, size_t cap)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (geteuid() == 0)
		n = snprintf(out, cap, "/run/coordfs");
	else if (xdg && *xdg == '/')
		n = snprintf(out, cap, "%s/coordfs", xdg);
	else
		return -ENOENT;
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	if (mkdir(out, 0755) < 0 && errno != EEXIST)
		return -errno;
	struct stat st;
	if (lstat(out, &st) < 0)
		return -errno;
	/* never follow a link or use a directory another user controls */
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022))
		return -EPERM;
	return 0;
}

/* Whether pid runs: alive and not a zombie (a daemon killed after it
 * detached waits for init to reap it). */
static bool pid_runs(long pid)
{
	char path[64], buf[256];
	FILE *f;
	bool runs = true;

	if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return errno != ENOENT;
	if (fgets(buf, sizeof(buf), f)) {
		const char *p = strrchr(buf, ')');

		runs = !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
	}
	fclose(f);
	return runs;
}

/* Detach and remove the directories of daemons that no longer run. */
static void clean_stale(const char *base)
{
	DIR *d = opendir(base);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[4096];
		long pid;
		char *end;

		if (strncmp(e->d_name, PREP_DIR_PREFIX, strlen(PREP_DIR_PREFIX)))
			continue;
		pid = strtol(e->d_name + strlen(PREP_DIR_PREFIX), &end, 10);
		if (pid <= 0 || *end != '-' || pid_runs(pid))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", base, e->d_name) >= (int)sizeof(path))
			continue;
		umount2(path, MNT_DETACH);
		if (rmdir(path) == 0)
			log_info("removed %s, left by daemon %ld", path, pid);
	}
	closedir(d);
}

int fs_prepmount_mount(struct fs_ctx *fs, const char *mount_opts,
		       const struct fuse_lowlevel_ops *ops, struct fs_prepmount **out, char *err,
		       size_t errlen)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fs_prepmount *pm = calloc(1, sizeof(*pm));
	char base[4096], path[4096 + 64];
	int rc;

	*out = NULL;
	if (!pm)
		return -ENOMEM;
	if ((rc = base_dir(base, sizeof(base))) < 0) {
		snprintf(err, errlen, "no private directory for the prepared view's mount "
			 "(/run/coordfs as root, else $XDG_RUNTIME_DIR/coordfs): %s", strerror(-rc));
		free(pm);
		return rc;
	}
	clean_stale(base);
	snprintf(path, sizeof(path), "%s/" PREP_DIR_PREFIX "%ld-XXXXXX", base, (long)getpid());
	if (!mkdtemp(path) || chmod(path, 0755) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot create %s: %s", path, strerror(-rc));
		rmdir(path);
		free(pm);
		return rc;
	}
	pm->path = strdup(path);
	if (!pm->path || fuse_opt_add_arg(&args, "coordfs") < 0 ||
	    fuse_opt_add_arg(&args, mount_opts) < 0 ||
	    (fs->opt.allow_other && fuse_opt_add_arg(&args, "-oallow_other") < 0) ||
	    (fs->opt.allow_root && fuse_opt_add_arg(&args, "-oallow_root") < 0)) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	pm->se = fuse_session_new(&args, ops, sizeof(*ops), fs);
	if (!pm->se) {
		rc = -EINVAL;
		snprintf(err, errlen, "cannot create the prepared view's FUSE session");
		goto fail;
	}
	if (fuse_session_mount(pm->se, path) < 0) {
		rc = -EIO;
		snprintf(err, errlen, "cannot mount the prepared view at %s", path);
		goto fail;
	}
	fuse_opt_free_args(&args);
	pm->dev = mount_dev(path);
	*out = pm;
	return 0;
fail:
	fuse_opt_free_args(&args);
	if (pm->se)
		fuse_session_destroy(pm->se);
	rmdir(path);
	free(pm->path);
	free(pm);
	return rc;
}

static void *loop_main(void *arg)
{
	struct fs_prepmount *pm = arg;
	struct fuse_loop_config *lc = fuse_loop_cfg_create();

	if (!lc) {
		log_err("prepared view: out of memory for its session loop");
		return NULL;
	}
	fuse_loop_cfg_set_clone_fd(lc, 1);
	fuse_loop_cfg_set_max_threads(lc, FS_FUSE_THREADS);
	if (fuse_session_loop_mt(pm->se, lc) < 0)
		log_warn("prepared view: its FUSE session ended with an error");
	fuse_loop_cfg_destroy(lc);
	return NULL;
}

int fs_prepmount_start(struct fs_prepmount *pm)
{
	int rc = pthread_create(&pm->thread, NULL, loop_main, pm);

	if (rc)
		return -rc;
	pm->running = true;
	return 0;
}

void fs_prepmount_abandon(struct fs_prepmount *pm)
{
	if (!pm)
		return;
	fuse_session_unmount(pm->se);
	rmdir(pm->path);
}

bool fs_prepmount_stop(struct fs_prepmount *pm)
{
	if (!pm)
		return true;
	fuse_session_exit(pm->se);
	/* the loop's reads end with ENODEV once the connection is gone */
	fuse_session_unmount(pm->se);
	abort_connection(pm->dev);
	if (pm->running) {
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 5;
		if (pthread_timedjoin_np(pm->thread, NULL, &until) != 0) {
			/* a connection that could not be aborted: the process is
			 * ending, leave the session to it */
			log_warn("prepared view: its session did not end; leaving it");
			rmdir(pm->path);
			return false;
		}
	}
	fuse_session_destroy(pm->se);
	if (rmdir(pm->path) < 0)
		log_warn("cannot remove %s: %s", pm->path, strerror(errno));
	free(pm->path);
	free(pm);
	return true;
}
