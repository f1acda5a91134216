/* SPDX-License-Identifier: MIT */
/*
 * fsstat: print a coordfs mount's statistics (fsstat(1)). It reads the
 * JSON document from the mount point's "user.coordfs.stats" extended
 * attribute, so it needs nothing but the mount; it never links the daemon.
 * Default: a human table; --json: the document as the daemon wrote it;
 * --watch[=S]: refresh every S seconds with per-second rates, prefill
 * progress and bytes from storage per pass over the dataset, until SIGINT.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/text.h"
#include "tools/fsstat.h"

#define STATS_XATTR "user.coordfs.stats"
#define STATS_MAX_BYTES FSSTAT_MAX_JSON
#define STATS_TRIES 5
#define WATCH_MAX_SECONDS 86400.0

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: fsstat [--json] [--watch[=SECONDS]] MOUNTPOINT\n"
		     "Print the statistics of the coordfs file system mounted at MOUNTPOINT.\n"
		     "  --json             print the raw statistics JSON\n"
		     "  --watch[=SECONDS]  refresh every SECONDS (default 1, decimals allowed)\n"
		     "                     with per-second rates and bytes from storage per\n"
		     "                     pass over the dataset, until interrupted\n"
		     "  -h, --help         show this help\n"
		     "  --version          show the version\n");
}

/* The reason a getxattr on mountpoint failed, as the end of one line. */
static const char *describe_error(int err)
{
	switch (err) {
	case ENODATA:
#if defined(ENOATTR) && ENOATTR != ENODATA
	case ENOATTR:
#endif
	case ENOTSUP:
		return "not a coordfs mount (no " STATS_XATTR " attribute)";
	case ENOTCONN:
		return "the coordfs daemon is gone (stale mount; unmount it with fusermount3 -u)";
	case E2BIG:
	case ERANGE:
		return "statistics larger than " STATS_XATTR " can return";
	default:
		return strerror(err);
	}
}

/*
 * Read the stats document of mountpoint into a new buffer (*out, *out_len,
 * NUL-terminated, trailing NUL bytes of the attribute dropped). The
 * document may grow between the size probe and the read: retry on ERANGE.
 * Returns 0 or a positive errno.
 */
static int read_stats(const char *mountpoint, char **out, size_t *out_len)
{
	size_t room = 0;

	for (int attempt = 0; attempt < STATS_TRIES; attempt++) {
		ssize_t probe = getxattr(mountpoint, STATS_XATTR, NULL, 0);
		ssize_t got;
		char *buf;

		if (probe < 0)
			return errno;
		/* Room for growth, and more on every retry. */
		if ((size_t)probe + 4096 > room)
			room = (size_t)probe + 4096;
		if (room > STATS_MAX_BYTES)
			room = STATS_MAX_BYTES;
		if ((size_t)probe > STATS_MAX_BYTES)
			return E2BIG;
		buf = malloc(room + 1);
		if (!buf)
			return ENOMEM;
		got = getxattr(mountpoint, STATS_XATTR, buf, room);
		if (got < 0) {
			int err = errno;

			free(buf);
			if (err == ERANGE && room < STATS_MAX_BYTES) {
				room *= 2;
				continue;
			}
			return err;
		}
		while (got > 0 && buf[got - 1] == '\0')
			got--;
		buf[got] = '\0';
		*out = buf;
		*out_len = (size_t)got;
		return 0;
	}
	return ERANGE;
}

/* Read and parse one sample. Prints the error line itself; returns 0 or -1. */
static int sample(const char *mountpoint, bool want_tree, char **text, size_t *len, json_t **tree)
{
	char why[256];
	int err;

	*tree = NULL;
	err = read_stats(mountpoint, text, len);
	if (err) {
		fprintf(stderr, "fsstat: %s: %s\n", mountpoint, describe_error(err));
		return -1;
	}
	if (*len == 0) {
		fprintf(stderr, "fsstat: %s: the daemon returned empty statistics\n", mountpoint);
		goto fail;
	}
	if (!want_tree)
		return 0;
	if (fsstat_parse(*text, *len, tree, why, sizeof(why)) < 0) {
		fprintf(stderr, "fsstat: %s: %s\n", mountpoint, why);
		goto fail;
	}
	return 0;
fail:
	free(*text);
	*text = NULL;
	return -1;
}

static int check_mountpoint(const char *mountpoint)
{
	struct stat st;

	if (stat(mountpoint, &st) < 0) {
		fprintf(stderr, "fsstat: %s: %s\n", mountpoint, describe_error(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "fsstat: %s: not a directory (give the mount point)\n", mountpoint);
		return -1;
	}
	return 0;
}

/*
 * The root of the mount that holds path, when path is inside one and has no
 * statistics of its own (only a mount's root answers them): the topmost
 * directory above it on the same device. NULL when path is that root, has
 * statistics, or the root has none either. Free the result.
 */
static char *mount_root(const char *path)
{
	char *dir = realpath(path, NULL), *slash;
	struct stat st, up;

	if (!dir || getxattr(dir, STATS_XATTR, NULL, 0) >= 0 || stat(dir, &st) < 0)
		goto none;
	while ((slash = strrchr(dir, '/')) && slash > dir) {
		*slash = '\0';
		if (stat(dir, &up) < 0 || up.st_dev != st.st_dev) {
			*slash = '/'; /* dir was the mount's root */
			break;
		}
	}
	if (getxattr(dir, STATS_XATTR, NULL, 0) >= 0)
		return dir;
none:
	free(dir);
	return NULL;
}

/* Parse the --watch argument: seconds > 0, decimals allowed. */
static int parse_interval(const char *arg, double *out)
{
	char *end;
	double v;

	if (!arg) {
		*out = 1.0;
		return 0;
	}
	/* Digits and one point only: strtod also takes hexadecimal ("0x10"
	 * is 16 s), exponents, blanks and signs, which fsstat(1) does not. */
	if (!text_is_plain_decimal(arg))
		return -EINVAL;
	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end != '\0' || !isfinite(v) || v < 0.01 || v > WATCH_MAX_SECONDS)
		return -EINVAL;
	*out = v;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleep until the monotonic time deadline or a stop signal. */
static void sleep_until(double deadline)
{
	struct timespec ts;

	ts.tv_sec = (time_t)deadline;
	ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_nsec = 999999999L;
	while (!stop_requested && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static int print_json(const char *text, size_t len)
{
	fwrite(text, 1, len, stdout);
	if (len == 0 || text[len - 1] != '\n')
		putchar('\n');
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : -1;
}

static int run_once(const char *mountpoint, bool json)
{
	struct fsstat_view view = { .mountpoint = mountpoint };
	json_t *tree;
	char *text;
	size_t len;
	int rc;

	if (sample(mountpoint, !json, &text, &len, &tree) < 0)
		return 1;
	if (json)
		rc = print_json(text, len);
	else
		rc = fsstat_render(stdout, tree, &view) == 0 && fflush(stdout) == 0 ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "fsstat: writing the output failed\n");
	json_decref(tree);
	free(text);
	return rc < 0 ? 1 : 0;
}

static int run_watch(const char *mountpoint, bool json, double interval)
{
	json_t *prev = NULL;
	struct fsstat_passes passes;
	double prev_t = 0, next = now_s();
	bool tty = isatty(STDOUT_FILENO);
	struct sigaction sa;
	int status = 0;

	fsstat_passes_init(&passes);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: the sleep must end */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	while (!stop_requested) {
		json_t *cur;
		char *text, stamp[32];
		size_t len;
		double t;
		time_t wall = time(NULL);
		struct tm tm;
		int rc;

		if (sample(mountpoint, !json, &text, &len, &cur) < 0) {
			status = 1;
			break;
		}
		t = now_s();
		if (json) {
			rc = print_json(text, len);
		} else {
			struct fsstat_view view = {
				.mountpoint = mountpoint,
				.rates = true,
				.prev = prev,
				.interval_s = t - prev_t,
				.passes = &passes,
			};

			fsstat_passes_update(&passes, cur);
			strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", localtime_r(&wall, &tm));
			if (tty)
				fputs("\033[H\033[2J", stdout);
			else if (prev)
				putchar('\n');
			printf("%s  (every %g s, Ctrl-C to stop)\n", stamp, interval);
			rc = fsstat_render(stdout, cur, &view) == 0 && fflush(stdout) == 0 ? 0 : -1;
		}
		free(text);
		json_decref(prev);
		prev = cur;
		prev_t = t;
		if (rc < 0) {
			fprintf(stderr, "fsstat: writing the output failed\n");
			status = 1;
			break;
		}
		/* Fixed cadence; after a stall, start again from now. */
		next += interval;
		if (next < t)
			next = t + interval;
		sleep_until(next);
	}
	json_decref(prev);
	return status;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "watch", optional_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = false, watch = false;
	double interval = 1.0;
	const char *mountpoint;
	int opt;

	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			json = true;
			break;
		case 'w':
			watch = true;
			if (parse_interval(optarg, &interval) < 0) {
				fprintf(stderr, "fsstat: --watch=%s: SECONDS must be a number from 0.01 to %g\n",
					optarg, WATCH_MAX_SECONDS);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("fsstat (coordfs) %s\n", COORDFS_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		double ignored;

		if (watch && argc - optind == 2 && parse_interval(argv[optind], &ignored) == 0)
			fprintf(stderr, "fsstat: write the interval as --watch=%s\n", argv[optind]);
		else
			fprintf(stderr, "fsstat: %s\n", optind >= argc ? "missing MOUNTPOINT" : "too many arguments");
		usage(stderr);
		return 2;
	}
	mountpoint = argv[optind];
	if (check_mountpoint(mountpoint) < 0)
		return 1;
	/* A directory inside a mount: its mount's statistics, not "not a
	 * coordfs mount". */
	char *root = mount_root(mountpoint);
	int rc = watch ? run_watch(root ? root : mountpoint, json, interval)
		       : run_once(root ? root : mountpoint, json);

	free(root);
	return rc;
}
