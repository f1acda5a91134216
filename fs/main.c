/* SPDX-License-Identifier: MIT */
/*
 * coordfs: with the command line parsed and checked (options.c), build the
 * namespace and the cache while the caller is still attached, mount, then
 * daemonize and serve. Every failure before the mount prints one line and exits 1 with
 * nothing mounted.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <libmount.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/disk.h"
#include "common/log.h"
#include "common/size.h"
#include "fs/fs.h"
#include "fs/io.h"
#include "fs/ops.h"
#include "fs/options.h"
#include "fs/peer_server.h"
#include "fs/prefill.h"
#include "fs/prepmount.h"
#include "fs/prepview.h"
#include "fs/source.h"
#include "remote/remote.h"

/*
 * Let the kernel read ahead up to 1 MiB (READAHEAD_KB) in one FUSE read:
 * the mount's backing device starts at the kernel's 128 KiB default, which
 * splits a 3 MB file into 23 round trips instead of 3. The device is found in
 * the mount table, never by a stat of the mount, which this daemon has yet to
 * serve. Only root may write the setting; otherwise the default stays.
 */
#define READAHEAD_KB 1024
static void raise_readahead(const char *mountpoint)
{
	char real[PATH_MAX], path[96];
	struct libmnt_table *tb;
	struct libmnt_fs *mfs;
	dev_t dev = 0;
	int fd;

	if (!realpath(mountpoint, real))
		return;
	tb = mnt_new_table_from_file("/proc/self/mountinfo");
	if (!tb)
		return;
	mfs = mnt_table_find_target(tb, real, MNT_ITER_BACKWARD);
	if (mfs)
		dev = mnt_fs_get_devno(mfs);
	mnt_unref_table(tb);
	if (!dev)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(dev), minor(dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || dprintf(fd, "%d", READAHEAD_KB) < 0)
		log_msg(LOG_DEBUG, "read-ahead of %s stays at the kernel's default: %s: %s",
			mountpoint, path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/*
 * FUSE mount options: read-only, kernel permission checks, named after
 * SOURCE. libfuse splits -o values at commas and takes a backslash as an
 * escape, so both are escaped: a SOURCE ending in ",suid,dev" stays part of
 * the name and can never turn options back on. Returns a malloc'd "-o..."
 * argument, or NULL when out of memory.
 */
static char *mount_options(const char *source)
{
	static const char head[] = "-ofsname=coordfs:";
	static const char tail[] = ",subtype=coordfs,ro,default_permissions";
	size_t n = strlen(source);
	char *arg = malloc(sizeof(head) + 2 * n + sizeof(tail));
	char *d;

	if (!arg)
		return NULL;
	d = stpcpy(arg, head);
	for (const char *p = source; *p; p++) {
		if (*p == ',' || *p == '\\')
			*d++ = '\\';
		*d++ = *p;
	}
	strcpy(d, tail);
	return arg;
}

/* Open files the daemon asks for: the peer server's connections
 * (REMOTE_SERVER_MAX_CONNECTIONS) and as many SOURCE descriptors and more. */
#define NOFILE_WANTED ((rlim_t)REMOTE_SERVER_MAX_CONNECTIONS * 4)

/*
 * Raise the soft limit on open files to the hard limit: every reader of an
 * uncached file holds a SOURCE descriptor in the daemon, every peer
 * connection a socket, and the default soft limit (1024) would let one
 * user's opens fail everyone else's. A hard limit below NOFILE_WANTED is
 * raised too where that is allowed (root); elsewhere it stays.
 */
static void raise_nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_max < NOFILE_WANTED) {
		struct rlimit up = {NOFILE_WANTED, NOFILE_WANTED};

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			return;
	}
	if (rl.rlim_cur >= rl.rlim_max)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		fprintf(stderr,
			"coordfs: warning: cannot raise the open-file limit from %llu: %s\n",
			(unsigned long long)was, strerror(errno));
}

/* How many SOURCE descriptors open handles may hold (fs_ctx.held_fds_max):
 * half the open-file limit, the rest for the peer server's connections,
 * reads of files not held open, and the daemon's own. */
static unsigned held_fds_max(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 512; /* half the usual default */
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur / 2 > UINT_MAX)
		return UINT_MAX;
	return (unsigned)(rl.rlim_cur / 2);
}

/*
 * Detach from the caller, like fuse_daemonize(), except that the parent
 * waits for the child's report on a pipe: one byte 'R' once everything runs
 * (exit 0), or 'E' and a one-line reason once the child has given up and
 * unmounted (printed, exit 1). A child that dies without a report also
 * gives exit 1; the parent then unmounts what it left. Only the child
 * returns: 0 and *report_fd (-1 in the foreground), or -errno. log_fd >= 0
 * becomes the child's stderr.
 */
static int detach(struct fuse_session *se, bool foreground, int log_fd, int *report_fd)
{
	int p[2];

	*report_fd = -1;
	if (foreground) {
		if (log_fd >= 0)
			dup2(log_fd, STDERR_FILENO);
		return chdir("/") < 0 ? -errno : 0;
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	pid_t child = fork();
	if (child < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (child > 0) {
		char msg[1024];
		size_t got = 0;
		ssize_t n;
		int status = 0;

		close(p[1]);
		while (got < sizeof(msg) - 1 &&
		       ((n = read(p[0], msg + got, sizeof(msg) - 1 - got)) > 0 ||
			(n < 0 && errno == EINTR)))
			got += n > 0 ? (size_t)n : 0;
		msg[got] = '\0';
		if (got > 0 && msg[0] == 'R')
			_exit(0);
		if (got > 0 && msg[0] == 'E') {
			fprintf(stderr, "coordfs: %s\n", msg + 1);
			waitpid(child, &status, 0);
			_exit(1);
		}
		waitpid(child, &status, 0);
		fuse_session_unmount(se);
		fprintf(stderr, "coordfs: the daemon exited during start-up (%s %d)\n",
			WIFSIGNALED(status) ? "signal" : "status",
			WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		_exit(1);
	}
	close(p[0]);
	if (setsid() < 0 || chdir("/") < 0) {
		close(p[1]);
		return -errno;
	}
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(log_fd >= 0 ? log_fd : null, STDERR_FILENO);
		close(null);
	}
	*report_fd = p[1];
	return 0;
}

/* Tell the waiting parent: ready (why NULL), or the one-line reason. */
static void report(int *report_fd, const char *why)
{
	if (*report_fd < 0)
		return;
	char msg[1024];
	int n = snprintf(msg, sizeof(msg), "%c%s", why ? 'E' : 'R', why ? why : "");
	size_t len = n < 1 ? 1 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
	ssize_t w = write(*report_fd, msg, len);
	(void)w;
	close(*report_fd);
	*report_fd = -1;
}

/* Sessions whose FUSE INIT is still to come: the parent hears 'R' after
 * the last (the dataset's, and the prepared view's own when it has one). */
static _Atomic int inits_pending = 1;

/* The FUSE INIT exchange: the mount answers requests from now on. The
 * peer server and the prepared view started before the session loop. */
static void init_then_report(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_ctx *fs = userdata;

	fs_ops.init(userdata, conn);
	if (atomic_fetch_sub(&inits_pending, 1) == 1)
		report(&fs->report_fd, NULL);
}

static void prep_init_then_report(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_ctx *fs = userdata;

	fs_prep_session_ops.init(userdata, conn);
	if (atomic_fetch_sub(&inits_pending, 1) == 1)
		report(&fs->report_fd, NULL);
}

/*
 * Serve the prepared view from a session of its own (prepmount.c), so that
 * this session can skip opens. Without a private directory or a second
 * mount, the view stays in this session (opens kept) after one warning.
 */
static int start_prepmount(struct fs_ctx *fs, struct fs_prepmount **pm)
{
	static struct fuse_lowlevel_ops ops;
	char err[512] = "";
	char *opts = mount_options(fs->opt.source);
	int rc;

	if (!opts)
		return -ENOMEM;
	ops = fs_prep_session_ops;
	ops.init = prep_init_then_report;
	rc = fs_prepmount_mount(fs, opts, &ops, pm, err, sizeof(err));
	free(opts);
	if (rc < 0) {
		log_warn("%s; the prepared view is served in the main mount, whose files then "
			 "keep their opens", err);
		return 0;
	}
	atomic_fetch_add(&inits_pending, 1);
	if ((rc = fs_prepmount_start(*pm)) < 0) {
		atomic_fetch_sub(&inits_pending, 1);
		fs_prepmount_stop(*pm);
		*pm = NULL;
		return rc;
	}
	fs->prep_link = fs_prepmount_path(*pm);
	return 0;
}

/* While the session is made and mounted, libfuse's errors are kept here
 * rather than logged, to end the one line that says the mount failed
 * (coordfs(1), EXIT STATUS): "cannot mount at M: mount failed: EINVAL". */
static bool fuse_errors_kept;
static char fuse_error[512];

/* libfuse logs a message in pieces; gather them per thread into one line. */
static void fuse_log_to_ours(enum fuse_log_level level, const char *fmt, va_list ap)
{
	static _Thread_local char line[1024];
	static _Thread_local size_t used;

	int n = vsnprintf(line + used, sizeof(line) - used, fmt, ap);
	if (n > 0)
		used += (size_t)n < sizeof(line) - used ? (size_t)n : sizeof(line) - used - 1;
	if (used == 0 || (line[used - 1] != '\n' && used < sizeof(line) - 1))
		return;
	while (used && line[used - 1] == '\n')
		line[--used] = '\0';
	/* libfuse starts most of its lines with "fuse: " already */
	const char *text = strncmp(line, "fuse: ", 6) ? line : line + 6;
	size_t kept = strlen(fuse_error);
	if (fuse_errors_kept && level <= FUSE_LOG_ERR && kept < sizeof(fuse_error) - 1) {
		/* a reason too long for the line is cut, as any */
		if (snprintf(fuse_error + kept, sizeof(fuse_error) - kept, "%s%s",
			     kept ? "; " : "", text) < 0)
			fuse_error[kept] = '\0';
	} else if ((int)level <= log_threshold)
		log_write((int)level, "fuse: %s", text);
	used = 0;
}

/* libfuse's handlers end the session loop on SIGTERM, SIGINT and SIGHUP;
 * the loop then joins its threads, which finish the request each is in.
 * Ours first stops every object-store request, so none of them waits out
 * a stalled store (retries, back-off) before unmount can proceed. */
static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP};
static struct sigaction prev_stop[3];

static void on_stop_signal(int sig, siginfo_t *si, void *uc)
{
	fs_source_stop_all();
	for (size_t i = 0; i < 3; i++) {
		const struct sigaction *p = &prev_stop[i];
		if (stop_signals[i] != sig)
			continue;
		if (p->sa_flags & SA_SIGINFO)
			p->sa_sigaction(sig, si, uc);
		else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN)
			p->sa_handler(sig);
	}
}

static int chain_stop_signals(void)
{
	struct sigaction sa = {.sa_sigaction = on_stop_signal, .sa_flags = SA_SIGINFO};

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < 3; i++)
		if (sigaction(stop_signals[i], &sa, &prev_stop[i]) < 0)
			return -errno;
	return 0;
}

/* Give libfuse its own handlers back before it removes them. */
static void unchain_stop_signals(void)
{
	for (size_t i = 0; i < 3; i++)
		if (prev_stop[i].sa_handler || (prev_stop[i].sa_flags & SA_SIGINFO))
			sigaction(stop_signals[i], &prev_stop[i], NULL);
}

/*
 * --log-file, for appending, or -1 after one line. The daemon (often root)
 * opens it on the command's behalf, so never through a symbolic link
 * another user planted (fs.protected_symlinks covers sticky directories
 * only, and may be off), nor into a hard link to some other file, a FIFO
 * (whose open would block the mount) or a device: a regular file of the
 * daemon's user with a single name. A new log is 0600: it names the
 * dataset's files, some of which only their owners may list.
 */
static int open_log_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
				    O_CLOEXEC, 0600);
	const char *why = NULL;
	struct stat st;

	if (fd < 0)
		why = errno == ELOOP   ? "a symbolic link"
		      : errno == ENXIO ? "not a regular file" /* a FIFO nobody reads */
				       : strerror(errno);
	else if (fstat(fd, &st) < 0)
		why = strerror(errno);
	else if (!S_ISREG(st.st_mode))
		why = "not a regular file";
	else if (st.st_nlink != 1)
		why = "a file with other names (hard links)";
	else if (st.st_uid != geteuid())
		why = "a file of another user";
	else if (fcntl(fd, F_SETFL, O_APPEND) < 0) /* blocking writes, as to any log */
		why = strerror(errno);
	if (!why)
		return fd;
	if (fd >= 0)
		close(fd);
	fs_fail("cannot open --log-file '%s': %s", path, why);
	return -1;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fs_ctx *fs = calloc(1, sizeof(*fs));

	if (fs)
		fs_ops_init(fs);
	struct fuse_session *se = NULL;
	char err[512] = "", why[512] = "";
	int ret = 1, log_fd = -1;
	struct fuse_lowlevel_ops ops;
	struct fs_prepmount *pm = NULL;
	bool mounted = false, view_free = true;
	int rc;

	if (!fs)
		return fs_fail("out of memory");
	raise_nofile_limit();
	fs->held_fds_max = held_fds_max();
	fs->listen_fd = -1;
	fs->report_fd = -1;
	if ((rc = fs_options_parse(&args, &fs->opt)) != 0) {
		ret = rc < 0;
		goto out;
	}
	log_set_level(fs->opt.debug ? LOG_DEBUG : LOG_NOTICE);
	fuse_set_log_func(fuse_log_to_ours);
	if (fs_options_check(&fs->opt) < 0)
		goto out;
	/* Taken (scripts pass one set of options to every mount), but said. */
	if (fs->opt.prep_unused)
		log_warn("%s (and the other options of the prepared view) has no effect without "
			 "--prepared", fs->opt.prep_unused);

	/* The daemon changes to "/" when it detaches: keep absolute paths. */
	char *abs = fs_source_is_s3(fs->opt.source) ? NULL : realpath(fs->opt.source, NULL);
	if (abs) {
		free(fs->opt.source);
		fs->opt.source = abs;
	}
	abs = realpath(fs->opt.mountpoint, NULL);
	if (abs) {
		free(fs->opt.mountpoint);
		fs->opt.mountpoint = abs;
	}
	/* Opened now, so that a log file that cannot be written fails the mount. */
	if (fs->opt.log_file && (log_fd = open_log_file(fs->opt.log_file)) < 0)
		goto out;
	if (fs_source_is_s3(fs->opt.source)) {
		struct fs_source_s3_options so = {
			.url = fs->opt.source,
			.endpoint = fs->opt.endpoint,
			.region = fs->opt.region,
			.profile = fs->opt.profile,
			.addressing = fs->opt.s3_addressing,
			.no_sign = fs->opt.no_sign_request,
			.uid = fs->opt.obj_uid,
			.gid = fs->opt.obj_gid,
			.file_mode = fs->opt.obj_file_mode,
			.dir_mode = fs->opt.obj_dir_mode,
			.list_timeout_s = fs->opt.list_timeout_s,
			.source_timeout_s = fs->opt.source_timeout_s,
		};
		rc = fs_source_s3_create(&so, &fs->src, err, sizeof(err));
	} else {
		rc = fs_source_local_create(fs->opt.source, &fs->src, err, sizeof(err));
	}
	if (rc < 0) {
		ret = fs_fail("%s", err);
		goto out;
	}
	/* Listing a bucket is where wrong credentials or a missing bucket show. */
	rc = fs->src->ops->build_ns(fs->src, &fs->ns, fs->opt.chunk_bytes, err, sizeof(err));
	if (rc < 0 && fs_source_is_s3(fs->opt.source)) {
		ret = fs_fail("cannot list source '%s': %s", fs->opt.source, err);
		goto out;
	}
	if (rc < 0) {
		ret = fs_fail("cannot scan source '%s': %s: %s", fs->opt.source, err, strerror(-rc));
		goto out;
	}
	/* Hard links share cache units in memory. Not with a disk tier, whose
	 * units are named by path: a name that took another's units would
	 * leave nothing in the tier under its own, and after a remount read
	 * SOURCE where the tier held the other name's copy. */
	fs->ns.share_links = !fs->opt.disk_cache;
	if (fs_source_log_init(fs->src, fs->ns.nnodes) < 0) {
		ret = fs_fail("out of memory");
		goto out;
	}
	if (fs->opt.prepared) {
		uint32_t child;
		const char *pn = fs->opt.prepared_name;
		if (ns_lookup(&fs->ns, 0, pn, strlen(pn), &child) == 0) {
			ret = fs_fail("source '%s' has a top-level '%s' entry, which would hide the "
				   "prepared view; choose another name with --prepared-name=NAME",
				   fs->opt.source, pn);
			goto out;
		}
	}
	if (fs_peer_configure(fs, err, sizeof(err)) < 0) {
		ret = fs_fail("%s", err);
		goto out;
	}
	/* Units are numbered as files are first looked up: the ids' bound. */
	rc = cache_create(fs->opt.cache_bytes, NS_MAX_UNITS, &fs->cache);
	if (rc < 0) {
		ret = fs_fail("cannot create a cache of %llu bytes: %s",
			   (unsigned long long)fs->opt.cache_bytes, strerror(-rc));
		goto out;
	}
	/* The tier's lock and index before the mount: a second daemon on DIR,
	 * or an index that cannot be read, fails here with nothing mounted. */
	if (fs->opt.disk_cache && (rc = cache_disk_open(fs->opt.disk_cache,
						       fs->opt.disk_cache_bytes, &fs->disk, err,
						       sizeof(err))) < 0) {
		ret = fs_fail("%s", err);
		goto out;
	}
	if (fs_io_init(fs) < 0) {
		ret = fs_fail("out of memory");
		goto out;
	}
	fs_prep_size(fs);
	budget_init(&fs->mem, FS_IO_MEM);
	/* A limit of 0 would mean no limit: --prep-mem=0 holds nothing. */
	budget_init(&fs->prep_mem, fs->opt.prep_mem_bytes ? fs->opt.prep_mem_bytes : 1);
	fs->mem_ready = true;

	char *mount_opts = mount_options(fs->opt.source);
	rc = mount_opts ? fuse_opt_add_arg(&args, mount_opts) : -1;
	free(mount_opts);
	/* No allow_other unless asked for, root's mounts included: a root
	 * mount of a bucket would otherwise let every local user read it with
	 * root's credentials. */
	if (rc < 0) {
		ret = fs_fail("out of memory");
		goto out;
	}
	/* The parent exits 0 only once the kernel's INIT has been answered. */
	ops = fs_ops;
	ops.init = init_then_report;
	fuse_errors_kept = true;
	se = fuse_session_new(&args, &ops, sizeof(ops), fs);
	if (!se) {
		ret = fs_fail("cannot start the FUSE session: %s",
			      fuse_error[0] ? fuse_error : "libfuse gave no reason");
		goto out;
	}
	if (fuse_set_signal_handlers(se) < 0 || chain_stop_signals() < 0) {
		ret = fs_fail("cannot install signal handlers");
		goto out;
	}
	if (fuse_session_mount(se, fs->opt.mountpoint) < 0) {
		ret = fs_fail("cannot mount at '%s': %s", fs->opt.mountpoint,
			      fuse_error[0] ? fuse_error : "libfuse gave no reason");
		goto out;
	}
	mounted = true;
	fuse_errors_kept = false;
	raise_readahead(fs->opt.mountpoint);
	char human[32] = "sizes taken at first lookup";
	if (atomic_load(&fs->ns.known_files) == fs->ns.nfiles)
		size_format(atomic_load(&fs->ns.total_bytes), human, sizeof(human));
	log_info("mounted %s at %s: %u files, %s, cache %s, seed %llu", fs->opt.source,
		 fs->opt.mountpoint, fs->ns.nfiles, human, fs->opt.cache_size,
		 (unsigned long long)fs->opt.seed_value);

	if ((rc = detach(se, fs->opt.foreground, log_fd, &fs->report_fd)) < 0) {
		ret = fs_fail("cannot detach from the terminal: %s", strerror(-rc));
		goto out;
	}
	if (!fs->opt.log_file && !fs->opt.foreground)
		log_use_syslog(true);
	clock_gettime(CLOCK_MONOTONIC, &fs->started);
	log_msg(LOG_NOTICE, "serving %s at %s (%u files, seed %llu)", fs->opt.source,
		fs->opt.mountpoint, fs->ns.nfiles, (unsigned long long)fs->opt.seed_value);

	if (fs->src->ops->start && (rc = fs->src->ops->start(fs->src)) < 0) {
		snprintf(why, sizeof(why), "cannot start reading source %s: %s", fs->opt.source,
			 strerror(-rc));
		goto out;
	}
	/* After detach: the lock file names the daemon, not its parent. */
	if (fs->disk && (rc = cache_disk_start(fs->disk)) < 0) {
		snprintf(why, sizeof(why), "cannot start the disk cache: %s", strerror(-rc));
		goto out;
	}
	if ((rc = fs_peer_start(fs)) < 0) {
		snprintf(why, sizeof(why), "cannot start the peer service: %s", strerror(-rc));
		goto out;
	}
	if ((rc = fs_prep_start(fs)) < 0) {
		snprintf(why, sizeof(why), "cannot start the prepared view: %s", strerror(-rc));
		goto out;
	}
	if (fs->opt.prepared && !fs->opt.no_kernel_cache && (rc = start_prepmount(fs, &pm)) < 0) {
		snprintf(why, sizeof(why), "cannot serve the prepared view: %s", strerror(-rc));
		goto out;
	}
	if (fs->opt.prefill && (rc = fs_prefill_start(fs, fs->src->ops->prefill_parallel)) < 0) {
		snprintf(why, sizeof(why), "cannot start prefill: %s", strerror(-rc));
		goto out;
	}
	const char *no_warm = getenv("COORDFS_NO_WARM");
	if (!fs->opt.prefill && (!no_warm || strcmp(no_warm, "walk") == 0) &&
	    (rc = fs_warm_start(fs, !no_warm)) < 0) {
		snprintf(why, sizeof(why), "cannot start taking attributes: %s", strerror(-rc));
		goto out;
	}
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	if (!lc) {
		snprintf(why, sizeof(why), "out of memory");
		goto out;
	}
	fuse_loop_cfg_set_clone_fd(lc, 1);
	fuse_loop_cfg_set_max_threads(lc, FS_FUSE_THREADS);
	rc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	/* Nothing may wait on the source any more (prefill, the peer
	 * server's and the prepared view's reads, joined below). */
	if (fs->src->ops->cancel)
		fs->src->ops->cancel(fs->src);
	if (fs->report_fd >= 0 && !why[0])
		snprintf(why, sizeof(why),
			 "the FUSE session ended before the kernel's INIT "
			 "(cannot start its threads?)");
	ret = rc < 0 ? 1 : 0;
	log_msg(LOG_NOTICE, "unmounting %s", fs->opt.mountpoint);
out:
	fuse_errors_kept = false;
	/* The view's own session first: it serves from the view freed below. */
	view_free = fs_prepmount_stop(pm);
	fs->prep_link = NULL;
	if (se) {
		if (mounted)
			fuse_session_unmount(se);
		unchain_stop_signals();
		fuse_remove_signal_handlers(se);
		fuse_session_destroy(se);
	}
	fs_ops_fini(fs);
	/* The peer server's /v1/stats reads fs->prep: stop it before the view
	 * goes (fs_peer_stop then skips it). The client stays until the
	 * view's decode threads, which fetch from peers, are joined. */
	remote_server_stop(fs->server);
	fs->server = NULL;
	fs_prefill_stop(fs);
	fs_warm_stop(fs);
	if (view_free)
		fs_prep_stop(fs);
	fs_peer_stop(fs);
	/* Before the memory cache: the tier's queue borrows its arena. */
	cache_disk_close(fs->disk);
	cache_destroy(fs->cache);
	fs_io_fini(fs); /* its units go back to the budget */
	if (fs->mem_ready) {
		budget_fini(&fs->mem);
		budget_fini(&fs->prep_mem);
	}
	ns_fini(&fs->ns);
	fs_source_destroy(fs->src);
	if (why[0])
		log_err("%s; unmounted", why);
	/* Only now, with nothing mounted any more, does the parent exit. */
	report(&fs->report_fd, why[0] ? why : "start-up failed");
	if (log_fd >= 0)
		close(log_fd);
	fs_options_free(&fs->opt);
	free(fs);
	fuse_opt_free_args(&args);
	return ret;
}
