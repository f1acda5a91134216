/* SPDX-License-Identifier: MIT */
/*
 * coordfs: parse the command line (coordfs(1), OPTIONS), check everything that can be
 * checked while the caller is still attached, mount, then daemonize and
 * serve. Every failure before the mount prints one line and exits 1 with
 * nothing mounted.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <libmount.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/log.h"
#include "common/size.h"
#include "fs/fs.h"
#include "fs/peer.h"
#include "fs/prefill.h"
#include "fs/prepview.h"
#include "fs/source.h"
#include "remote/remote.h"

enum { KEY_HELP, KEY_VERSION, KEY_FOREGROUND, KEY_DEBUG, KEY_IGNORED };

#define OPT2(dash, key, field) {dash, offsetof(struct fs_options, field), 0}, {key, offsetof(struct fs_options, field), 0}

static const struct fuse_opt fs_opt_spec[] = {
	OPT2("--cache-size=%s", "cache_size=%s", cache_size),
	OPT2("--chunk-size=%s", "chunk_size=%s", chunk_size),
	OPT2("--peers=%s", "peers=%s", peers),
	OPT2("--node=%s", "node=%s", node),
	OPT2("--listen=%s", "listen=%s", listen),
	OPT2("--secret-file=%s", "secret_file=%s", secret_file),
	{"--prepared", offsetof(struct fs_options, prepared), 1},
	{"prepared", offsetof(struct fs_options, prepared), 1},
	OPT2("--prepared-name=%s", "prepared_name=%s", prepared_name),
	OPT2("--prep-threads=%s", "prep_threads=%s", prep_threads_arg),
	OPT2("--prep-mem=%s", "prep_mem=%s", prep_mem),
	OPT2("--prep-decoded-mem=%s", "prep_decoded_mem=%s", prep_decoded_mem),
	OPT2("--seed=%s", "seed=%s", seed),
	OPT2("--log-file=%s", "log_file=%s", log_file),
	{"--no-kernel-cache", offsetof(struct fs_options, no_kernel_cache), 1},
	{"no_kernel_cache", offsetof(struct fs_options, no_kernel_cache), 1},
	/* The kernel cache is on by default; scripts written before may still ask for it. */
	FUSE_OPT_KEY("--kernel-cache", KEY_IGNORED),
	FUSE_OPT_KEY("kernel_cache", KEY_IGNORED),
	{"--prefill", offsetof(struct fs_options, prefill), 1},
	{"prefill", offsetof(struct fs_options, prefill), 1},
	OPT2("--endpoint=%s", "endpoint=%s", endpoint),
	OPT2("--region=%s", "region=%s", region),
	OPT2("--profile=%s", "profile=%s", profile),
	{"--no-sign-request", offsetof(struct fs_options, no_sign_request), 1},
	{"no_sign_request", offsetof(struct fs_options, no_sign_request), 1},
	OPT2("--s3-addressing=%s", "s3_addressing=%s", s3_addressing),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("--foreground", KEY_FOREGROUND),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("--debug", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_END,
};

static const char usage[] =
	"usage: coordfs [OPTIONS] SOURCE MOUNTPOINT\n"
	"Mount SOURCE read-only at MOUNTPOINT through a MinIO memory cache.\n"
	"SOURCE is a directory or an S3 bucket, s3://BUCKET[/PREFIX].\n\n"
	"  -f, --foreground         stay in the foreground, log to stderr\n"
	"  -d, --debug              verbose logging (implies -f)\n"
	"  --cache-size=SIZE        cache budget: bytes, K/M/G/T, or N% of RAM (25%)\n"
	"  --chunk-size=SIZE        caching unit for larger files (4M)\n"
	"  --peers=URL,URL,...      every node's peer address, same order everywhere\n"
	"  --node=K                 this node's index in --peers\n"
	"  --listen=HOST:PORT       peer server address (from --peers[K])\n"
	"  --secret-file=FILE       shared secret for peer requests\n"
	"  --prepared               enable the prepared view\n"
	"  --prepared-name=NAME     its directory name (prepared)\n"
	"  --prep-threads=N         decode threads (cores)\n"
	"  --prep-mem=SIZE          memory for prepared samples (1G)\n"
	"  --prep-decoded-mem=SIZE  of it, for decoded images kept across epochs (half)\n"
	"  --seed=N                 seed of the prepared view (random, logged)\n"
	"  --log-file=FILE          log here instead of syslog once detached\n"
	"  --no-kernel-cache        keep file data out of the kernel's page cache: every\n"
	"                           read reaches the daemon and is counted (slower)\n"
	"  --kernel-cache           accepted and ignored: the kernel cache is the default\n"
	"  --prefill                after mounting, fill this node's share of the cache\n"
	"                           from SOURCE in the background (readers go first)\n"
	"S3 sources (credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared\n"
	"credentials and config files, or the container/instance role; never options):\n"
	"  --endpoint=URL           S3-compatible endpoint, http(s)://host[:port] (AWS)\n"
	"  --region=NAME            region (AWS_REGION, the profile's, else us-east-1)\n"
	"  --profile=NAME           profile of the shared files (AWS_PROFILE, else default)\n"
	"  --no-sign-request        anonymous requests (public buckets)\n"
	"  --s3-addressing=path|virtual  bucket in the path or the host name (virtual on\n"
	"                           AWS, path with --endpoint)\n"
	"  -o OPT[,OPT...]          the same as key=value (cache_size=8G), and FUSE mount options\n"
	"  -V, --version, -h, --help\n";

/* Mount options: 1 passed on to libfuse and the kernel, 0 dropped as harmless
 * (mount(8) and fstab put some of them on every command line; the mount is
 * read-only and nodev/nosuid anyway), -1 unknown. */
static int known_mount_option(const char *arg)
{
	static const char *const pass[] = { "allow_other", "allow_root", "auto_unmount",
					    "default_permissions", "fsname=", "subtype=",
					    "max_read=", "blksize=", "context=", "fscontext=",
					    "defcontext=", "rootcontext=" };
	static const char *const drop[] = { "ro", "rw", "dev", "nodev", "suid", "nosuid", "exec",
					    "noexec", "async", "sync", "atime", "noatime",
					    "nodiratime", "relatime", "strictatime", "dirsync",
					    "_netdev", "user", "nouser", "users", "auto", "noauto",
					    "defaults", "nofail", "x-" };
	for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++) {
		size_t n = strlen(pass[i]);
		if (pass[i][n - 1] == '=' ? !strncmp(arg, pass[i], n) : !strcmp(arg, pass[i]))
			return 1;
	}
	for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
		size_t n = strlen(drop[i]);
		if (drop[i][n - 1] == '-' ? !strncmp(arg, drop[i], n) : !strcmp(arg, drop[i]))
			return 0;
	}
	return -1;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct fs_options *o = data;

	switch (key) {
	case KEY_HELP:
		o->show_help = true;
		return 0;
	case KEY_VERSION:
		o->show_version = true;
		return 0;
	case KEY_FOREGROUND:
		o->foreground = true;
		return 0;
	case KEY_DEBUG:
		o->debug = true;
		o->foreground = true;
		return 0;
	case KEY_IGNORED:
		return 0;
	case FUSE_OPT_KEY_NONOPT:
		if (o->npos == 0)
			o->source = strdup(arg);
		else if (o->npos == 1)
			o->mountpoint = strdup(arg);
		else if (!o->parse_error && asprintf(&o->parse_error, "unexpected argument '%s'", arg) < 0)
			o->parse_error = NULL;
		o->npos++;
		return 0;
	default:
		if (arg[0] == '-') {
			if (!o->parse_error && asprintf(&o->parse_error, "unknown option '%s' (see --help)", arg) < 0)
				o->parse_error = NULL;
			return 0;
		}
		int known = known_mount_option(arg);
		if (known < 0 && !o->parse_error &&
		    asprintf(&o->parse_error, "unknown mount option '%s' (see --help)", arg) < 0)
			o->parse_error = NULL;
		return known > 0; /* an -o option for FUSE itself (allow_other, ...) */
	}
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;
	char line[1024];

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "coordfs: %s\n", line);
	return 1;
}

/* Whether path is a mount point, by the kernel's mount table read with libmount. */
static bool is_mounted(const char *path)
{
	char real[PATH_MAX];
	struct libmnt_table *tb;
	bool found;

	if (!realpath(path, real))
		return false;
	tb = mnt_new_table_from_file("/proc/self/mountinfo");
	if (!tb)
		return false;
	found = mnt_table_find_target(tb, real, MNT_ITER_BACKWARD) != NULL;
	mnt_unref_table(tb);
	return found;
}

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

static int check_paths(struct fs_options *o)
{
	struct stat st;

	if (!o->source || !o->mountpoint)
		return fail("need SOURCE and MOUNTPOINT (see --help)");
	/* An s3:// SOURCE is checked by listing it, still before the mount. */
	if (!fs_source_is_s3(o->source)) {
		if (stat(o->source, &st) < 0)
			return fail("source '%s': %s", o->source, strerror(errno));
		if (!S_ISDIR(st.st_mode))
			return fail("source '%s' is not a directory", o->source);
	}
	if (stat(o->mountpoint, &st) < 0)
		return fail("mount point '%s': %s", o->mountpoint, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail("mount point '%s' is not a directory", o->mountpoint);
	if (is_mounted(o->mountpoint))
		return fail("mount point '%s' is already mounted", o->mountpoint);
	DIR *d = opendir(o->mountpoint);
	if (!d)
		return fail("mount point '%s': %s", o->mountpoint, strerror(errno));
	struct dirent *de;
	bool empty = true;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = false;
	closedir(d);
	if (!empty)
		return fail("mount point '%s' is not empty", o->mountpoint);
	return 0;
}

static int parse_sizes(struct fs_ctx *fs)
{
	struct fs_options *o = &fs->opt;
	uint64_t phys = size_phys_mem();

	if (size_parse(o->cache_size, phys, &fs->cache_bytes) < 0)
		return fail("bad --cache-size '%s': want bytes, K/M/G/T, or N%% (0 < N <= 100)",
			    o->cache_size);
	/* The cache never evicts: a budget over the machine's memory would end
	 * in the OOM killer, not in a full cache. */
	if (phys && fs->cache_bytes > phys) {
		char want[32], have[32];
		return fail("--cache-size '%s' (%s) is larger than this machine's memory (%s)",
			    o->cache_size, size_format(fs->cache_bytes, want, sizeof(want)),
			    size_format(phys, have, sizeof(have)));
	}
	if (fs->cache_bytes == 0)
		fprintf(stderr,
			"coordfs: warning: --cache-size is 0: nothing will be cached, "
			"every read goes to SOURCE%s\n",
			o->peers ? " or a peer" : "");
	if (size_parse(o->chunk_size, phys, &fs->chunk_bytes) < 0 || fs->chunk_bytes < 4096 ||
	    fs->chunk_bytes > (1ULL << 30) || strchr(o->chunk_size, '%'))
		return fail("bad --chunk-size '%s': want 4K to 1G", o->chunk_size);
	if (size_parse(o->prep_mem, phys, &fs->prep_mem) < 0)
		return fail("bad --prep-mem '%s': want bytes, K/M/G/T, or N%%", o->prep_mem);
	fs->prep_decoded_mem = fs->prep_mem / 2;
	if (o->prep_decoded_mem) {
		if (size_parse(o->prep_decoded_mem, phys, &fs->prep_decoded_mem) < 0)
			return fail("bad --prep-decoded-mem '%s': want bytes, K/M/G/T, or N%%",
				    o->prep_decoded_mem);
		if (fs->prep_decoded_mem > fs->prep_mem)
			return fail("--prep-decoded-mem '%s' is more than --prep-mem '%s'",
				    o->prep_decoded_mem, o->prep_mem);
	}
	if (o->prep_threads_arg) {
		char *end;
		errno = 0;
		long n = strtol(o->prep_threads_arg, &end, 10);
		if (errno || *end || end == o->prep_threads_arg || n < 1 || n > 256)
			return fail("bad --prep-threads '%s': want 1 to 256", o->prep_threads_arg);
		o->prep_threads = (int)n;
	}
	if (o->seed) {
		char *end;
		errno = 0;
		fs->seed = strtoull(o->seed, &end, 0);
		if (errno || *end || !*o->seed || o->seed[0] == '-')
			return fail("bad --seed '%s': want an unsigned integer", o->seed);
	} else if (getrandom(&fs->seed, sizeof(fs->seed), 0) != sizeof(fs->seed)) {
		fs->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	}
	if (o->peers && !o->node)
		return fail("--peers needs --node=K (this node's index in the list)");
	if (!o->peers && o->node)
		return fail("--node needs --peers");
	if (!o->peers && o->secret_file)
		return fail("--secret-file needs --peers (it authenticates peer requests)");
	if (!o->peers && o->listen)
		return fail("--listen needs --peers");
	if (o->s3_addressing && strcmp(o->s3_addressing, "path") && strcmp(o->s3_addressing, "virtual"))
		return fail("bad --s3-addressing '%s': want path or virtual", o->s3_addressing);
	if (!fs_source_is_s3(o->source)) {
		const char *s3_only = o->endpoint	    ? "--endpoint"
				      : o->region	    ? "--region"
				      : o->profile	    ? "--profile"
				      : o->no_sign_request ? "--no-sign-request"
				      : o->s3_addressing   ? "--s3-addressing"
							    : NULL;
		if (s3_only)
			return fail("%s applies only to an s3://BUCKET[/PREFIX] SOURCE", s3_only);
	}
	if (o->prepared_name && (!*o->prepared_name || strchr(o->prepared_name, '/') ||
				 !strcmp(o->prepared_name, ".") || !strcmp(o->prepared_name, "..")))
		return fail("bad --prepared-name '%s': want a plain file name", o->prepared_name);
	return 0;
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

/*
 * Raise the soft limit on open files to the hard limit: every reader of an
 * uncached file holds a SOURCE descriptor in the daemon, and the default
 * soft limit (1024) would let one user's opens fail everyone else's.
 */
static void raise_nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		fprintf(stderr,
			"coordfs: warning: cannot raise the open-file limit from %llu: %s\n",
			(unsigned long long)was, strerror(errno));
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

/* The FUSE INIT exchange: the mount answers requests from now on. The
 * peer server and the prepared view started before the session loop. */
static void init_then_report(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_ctx *fs = userdata;

	fs_ops.init(userdata, conn);
	report(&fs->report_fd, NULL);
}

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
	if ((int)level <= log_threshold)
		log_write((int)level, "fuse: %s", line);
	used = 0;
}

static void free_options(struct fs_options *o)
{
	free(o->source);
	free(o->mountpoint);
	free(o->cache_size);
	free(o->chunk_size);
	free(o->peers);
	free(o->node);
	free(o->prep_threads_arg);
	free(o->listen);
	free(o->secret_file);
	free(o->prepared_name);
	free(o->prep_mem);
	free(o->prep_decoded_mem);
	free(o->seed);
	free(o->log_file);
	free(o->endpoint);
	free(o->region);
	free(o->profile);
	free(o->s3_addressing);
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fs_ctx *fs = calloc(1, sizeof(*fs));
	struct fuse_session *se = NULL;
	char err[512] = "", why[512] = "";
	int ret = 1, log_fd = -1;
	struct fuse_lowlevel_ops ops;
	bool mounted = false;

	if (!fs)
		return fail("out of memory");
	raise_nofile_limit();
	fs->listen_fd = -1;
	fs->report_fd = -1;
	if (fuse_opt_parse(&args, &fs->opt, fs_opt_spec, opt_proc) < 0) {
		ret = fail("cannot parse the command line (see --help)");
		goto out;
	}
	if (fs->opt.parse_error) {
		ret = fail("%s", fs->opt.parse_error);
		goto out;
	}
	if (fs->opt.show_help) {
		fputs(usage, stdout);
		ret = 0;
		goto out;
	}
	if (fs->opt.show_version) {
		printf("coordfs %s (libfuse %d)\n", COORDFS_VERSION, fuse_version());
		ret = 0;
		goto out;
	}
	if (!fs->opt.cache_size)
		fs->opt.cache_size = strdup("25%");
	if (!fs->opt.chunk_size)
		fs->opt.chunk_size = strdup("4M");
	if (!fs->opt.prep_mem)
		fs->opt.prep_mem = strdup("1G");
	if (!fs->opt.prepared_name)
		fs->opt.prepared_name = strdup("prepared");
	if (fs->opt.prep_threads == 0)
		fs->opt.prep_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (fs->opt.prep_threads <= 0)
		fs->opt.prep_threads = 1;
	log_set_level(fs->opt.debug ? LOG_DEBUG : LOG_NOTICE);
	fuse_set_log_func(fuse_log_to_ours);
	if (parse_sizes(fs) || check_paths(&fs->opt))
		goto out;

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
	if (fs->opt.log_file) {
		log_fd = open(fs->opt.log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
		if (log_fd < 0) {
			ret = fail("cannot open --log-file '%s': %s", fs->opt.log_file,
				   strerror(errno));
			goto out;
		}
	}
	int rc;
	if (fs_source_is_s3(fs->opt.source)) {
		struct fs_source_s3_options so = {
			.url = fs->opt.source,
			.endpoint = fs->opt.endpoint,
			.region = fs->opt.region,
			.profile = fs->opt.profile,
			.addressing = fs->opt.s3_addressing,
			.no_sign = fs->opt.no_sign_request,
			.uid = getuid(),
			.gid = getgid(),
		};
		rc = fs_source_s3_create(&so, &fs->src, err, sizeof(err));
	} else {
		rc = fs_source_local_create(fs->opt.source, &fs->src, err, sizeof(err));
	}
	if (rc < 0) {
		ret = fail("%s", err);
		goto out;
	}
	/* Listing a bucket is where wrong credentials or a missing bucket show. */
	rc = fs->src->ops->build_ns(fs->src, &fs->ns, fs->chunk_bytes, err, sizeof(err));
	if (rc < 0 && fs_source_is_s3(fs->opt.source)) {
		ret = fail("cannot list source '%s': %s", fs->opt.source, err);
		goto out;
	}
	if (rc < 0) {
		ret = fail("cannot scan source '%s': %s: %s", fs->opt.source, err, strerror(-rc));
		goto out;
	}
	if (fs_source_log_init(fs->src, fs->ns.nnodes) < 0) {
		ret = fail("out of memory");
		goto out;
	}
	if (fs->opt.prepared) {
		uint32_t child;
		const char *pn = fs->opt.prepared_name;
		if (ns_lookup(&fs->ns, 0, pn, strlen(pn), &child) == 0) {
			ret = fail("source '%s' has a top-level '%s' entry, which would hide the "
				   "prepared view; choose another name with --prepared-name=NAME",
				   fs->opt.source, pn);
			goto out;
		}
	}
	if (fs_peer_configure(fs, err, sizeof(err)) < 0) {
		ret = fail("%s", err);
		goto out;
	}
	rc = cache_create(fs->cache_bytes, fs->ns.nunits, &fs->cache);
	if (rc < 0) {
		ret = fail("cannot create a cache of %llu bytes: %s",
			   (unsigned long long)fs->cache_bytes, strerror(-rc));
		goto out;
	}
	budget_init(&fs->mem, (fs->opt.prepared ? fs->prep_mem : 0) + FS_IO_MEM);
	fs->mem_ready = true;

	char *mount_opts = mount_options(fs->opt.source);
	rc = mount_opts ? fuse_opt_add_arg(&args, mount_opts) : -1;
	free(mount_opts);
	if (rc < 0 || (geteuid() == 0 && fuse_opt_add_arg(&args, "-oallow_other") < 0)) {
		ret = fail("out of memory");
		goto out;
	}
	/* The parent exits 0 only once the kernel's INIT has been answered. */
	ops = fs_ops;
	ops.init = init_then_report;
	se = fuse_session_new(&args, &ops, sizeof(ops), fs);
	if (!se)
		goto out; /* libfuse printed the reason */
	if (fuse_set_signal_handlers(se) < 0) {
		ret = fail("cannot install signal handlers");
		goto out;
	}
	if (fuse_session_mount(se, fs->opt.mountpoint) < 0) {
		ret = fail("cannot mount at '%s' (see the message above)", fs->opt.mountpoint);
		goto out;
	}
	mounted = true;
	raise_readahead(fs->opt.mountpoint);
	char human[32];
	log_info("mounted %s at %s: %u files, %s, cache %s, seed %llu", fs->opt.source,
		 fs->opt.mountpoint, fs->ns.nfiles,
		 size_format(fs->ns.total_bytes, human, sizeof(human)), fs->opt.cache_size,
		 (unsigned long long)fs->seed);

	if ((rc = detach(se, fs->opt.foreground, log_fd, &fs->report_fd)) < 0) {
		ret = fail("cannot detach from the terminal: %s", strerror(-rc));
		goto out;
	}
	if (!fs->opt.log_file && !fs->opt.foreground)
		log_use_syslog(true);
	clock_gettime(CLOCK_MONOTONIC, &fs->started);
	log_msg(LOG_NOTICE, "serving %s at %s (%u files, seed %llu)", fs->opt.source,
		fs->opt.mountpoint, fs->ns.nfiles, (unsigned long long)fs->seed);

	if (fs->src->ops->start && (rc = fs->src->ops->start(fs->src)) < 0) {
		snprintf(why, sizeof(why), "cannot start reading source %s: %s", fs->opt.source,
			 strerror(-rc));
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
	if (fs->opt.prefill && (rc = fs_prefill_start(fs, fs->src->ops->prefill_parallel)) < 0) {
		snprintf(why, sizeof(why), "cannot start prefill: %s", strerror(-rc));
		goto out;
	}
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	if (!lc) {
		snprintf(why, sizeof(why), "out of memory");
		goto out;
	}
	fuse_loop_cfg_set_clone_fd(lc, 1);
	fuse_loop_cfg_set_max_threads(lc, 32);
	rc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	if (fs->report_fd >= 0 && !why[0])
		snprintf(why, sizeof(why),
			 "the FUSE session ended before the kernel's INIT "
			 "(cannot start its threads?)");
	ret = rc < 0 ? 1 : 0;
	log_msg(LOG_NOTICE, "unmounting %s", fs->opt.mountpoint);
out:
	if (se) {
		if (mounted)
			fuse_session_unmount(se);
		fuse_remove_signal_handlers(se);
		fuse_session_destroy(se);
	}
	/* The peer server's /v1/stats reads fs->prep: stop it before the view
	 * goes (fs_peer_stop then skips it). The client stays until the
	 * view's decode threads, which fetch from peers, are joined. */
	remote_server_stop(fs->server);
	fs->server = NULL;
	fs_prefill_stop(fs);
	fs_prep_stop(fs);
	fs_peer_stop(fs);
	cache_destroy(fs->cache);
	if (fs->mem_ready)
		budget_fini(&fs->mem);
	ns_fini(&fs->ns);
	fs_source_destroy(fs->src);
	if (why[0])
		log_err("%s; unmounted", why);
	/* Only now, with nothing mounted any more, does the parent exit. */
	report(&fs->report_fd, why[0] ? why : "start-up failed");
	if (log_fd >= 0)
		close(log_fd);
	free(fs->opt.parse_error);
	free_options(&fs->opt);
	free(fs);
	fuse_opt_free_args(&args);
	return ret;
}
