/* SPDX-License-Identifier: MIT */
/*
 * The fsstat command itself, for the unit test `fsstat` (test_fsstat.c runs
 * these): on a plain directory carrying a user.coordfs.stats xattr (what a
 * mount answers), its table and JSON, its error lines and exit codes, and
 * watch mode until SIGINT.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include "tools/fsstat.h"
#include "tests/unit/test_fsstat.h"

/* ---- the fsstat command ---- */

struct run_result {
	int status; /* exit code, or 128 + signal */
	char out[262144];
	char err[4096];
};

static void slurp(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

static const char *fsstat_bin(void)
{
	const char *bin = getenv("FSSTAT_BIN");

	ck_assert_msg(bin && access(bin, X_OK) == 0, "FSSTAT_BIN must name the built fsstat (got %s)",
		      bin ? bin : "nothing");
	return bin;
}

/* Start fsstat with args, stdout/stderr to files in dir. */
static pid_t spawn_fsstat(const char *dir, char *const args[])
{
	char out_path[512], err_path[512];
	pid_t pid;

	snprintf(out_path, sizeof(out_path), "%s/out", dir);
	snprintf(err_path, sizeof(err_path), "%s/err", dir);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		execv(args[0], args);
		_exit(127);
	}
	return pid;
}

static void collect(pid_t pid, const char *dir, struct run_result *r)
{
	char path[512];
	int ws;

	ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
	r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
	snprintf(path, sizeof(path), "%s/out", dir);
	slurp(path, r->out, sizeof(r->out));
	snprintf(path, sizeof(path), "%s/err", dir);
	slurp(path, r->err, sizeof(r->err));
}

static void run_fsstat(const char *dir, char *const args[], struct run_result *r)
{
	collect(spawn_fsstat(dir, args), dir, r);
}

/* A scratch directory on a file system with user xattrs (ext4, tmpfs >= 6.6). */
static void make_scratch(char *dir, size_t len)
{
	const char *bases[] = { getenv("TMPDIR"), "/tmp", "/var/tmp", "." };
	int last_err = 0;

	for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		if (!bases[i])
			continue;
		snprintf(dir, len, "%s/test_fsstat.XXXXXX", bases[i]);
		if (!mkdtemp(dir))
			continue;
		if (setxattr(dir, "user.coordfs.probe", "1", 1, 0) == 0) {
			removexattr(dir, "user.coordfs.probe");
			return;
		}
		last_err = errno;
		rmdir(dir);
	}
	ck_abort_msg("no scratch directory with user xattrs found (last error: %s)", strerror(last_err));
}

static void remove_scratch(const char *dir)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/out", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/err", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/file", dir);
	unlink(path);
	rmdir(dir);
}

static void set_stats(const char *dir, const char *json, size_t len)
{
	ck_assert_msg(setxattr(dir, "user.coordfs.stats", json, len, 0) == 0, "setxattr: %s", strerror(errno));
}

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

START_TEST(cli_table_and_json)
{
	char dir[256];
	struct run_result *r = malloc(sizeof(*r));

	ck_assert_ptr_nonnull(r);
	make_scratch(dir, sizeof(dir));
	/* The daemon may include a trailing NUL; fsstat drops it. */
	set_stats(dir, fsstat_known_stats, strlen(fsstat_known_stats) + 1);
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), dir, NULL }, r);
	ck_assert_msg(r->status == 0, "exit %d, stderr: %s", r->status, r->err);
	ck_assert_str_eq(r->err, "");
	assert_contains(r->out, dir);
	assert_contains(r->out, "hit ratio 75.0%");
	assert_contains(r->out, "node 1  DOWN  http://10.0.0.2:7070");

	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--json", dir, NULL }, r);
	ck_assert_int_eq(r->status, 0);
	ck_assert_str_eq(r->out, fsstat_known_stats); /* unchanged (it ends in a newline already) */

	set_stats(dir, "{\"version\":1}", 13);
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--json", dir, NULL }, r);
	ck_assert_int_eq(r->status, 0);
	ck_assert_str_eq(r->out, "{\"version\":1}\n");

	/* Malformed JSON: one clear line, non-zero exit. */
	set_stats(dir, "{\"version\":1,", 13);
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), dir, NULL }, r);
	ck_assert_int_ne(r->status, 0);
	ck_assert_uint_eq(count_lines(r->err), 1);
	assert_contains(r->err, "malformed statistics JSON");
	assert_contains(r->err, dir);
	remove_scratch(dir);
	free(r);
}
END_TEST

START_TEST(cli_errors)
{
	char dir[256], path[512], missing[512];
	struct run_result *r = malloc(sizeof(*r));
	int fd;

	ck_assert_ptr_nonnull(r);
	make_scratch(dir, sizeof(dir));
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), missing, NULL }, r);
	ck_assert_int_eq(r->status, 1);
	ck_assert_uint_eq(count_lines(r->err), 1);
	assert_contains(r->err, missing);
	assert_contains(r->err, "No such file or directory");
	ck_assert_str_eq(r->out, "");

	/* A directory without the attribute: not a coordfs mount. */
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), dir, NULL }, r);
	ck_assert_int_eq(r->status, 1);
	ck_assert_uint_eq(count_lines(r->err), 1);
	assert_contains(r->err, "not a coordfs mount");

	snprintf(path, sizeof(path), "%s/file", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), path, NULL }, r);
	ck_assert_int_eq(r->status, 1);
	assert_contains(r->err, "not a directory");

	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), NULL }, r);
	ck_assert_int_eq(r->status, 2);
	assert_contains(r->err, "missing MOUNTPOINT");
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--watch=0", dir, NULL }, r);
	ck_assert_int_eq(r->status, 2);
	assert_contains(r->err, "--watch=0");
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--watch=1x", dir, NULL }, r);
	ck_assert_int_eq(r->status, 2);
	/* decimal only: strtod took these as 16 s and 1 s, watching */
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--watch=0x10", dir, NULL }, r);
	ck_assert_int_eq(r->status, 2);
	assert_contains(r->err, "--watch=0x10");
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--watch=1e0", dir, NULL }, r);
	ck_assert_int_eq(r->status, 2);
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--watch=1.5.", dir, NULL }, r);
	ck_assert_int_eq(r->status, 2);
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--watch", "2", dir, NULL }, r);
	ck_assert_int_eq(r->status, 2);
	assert_contains(r->err, "--watch=2");
	run_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--bogus", dir, NULL }, r);
	ck_assert_int_eq(r->status, 2);
	remove_scratch(dir);
	free(r);
}
END_TEST

static size_t count_occurrences(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* Blocks printed so far by fsstat --watch into dir/out. */
static size_t count_blocks(const char *dir)
{
	char path[512], *buf = malloc(65536);
	size_t n;

	ck_assert_ptr_nonnull(buf);
	snprintf(path, sizeof(path), "%s/out", dir);
	if (access(path, F_OK) < 0) {
		free(buf);
		return 0; /* fsstat has not started yet */
	}
	slurp(path, buf, 65536);
	n = count_occurrences(buf, "rates    ");
	free(buf);
	return n;
}

/* Wait (up to 10 s) until the output holds want blocks. */
static void wait_for_blocks(const char *dir, size_t want)
{
	for (int i = 0; i < 1000 && count_blocks(dir) < want; i++)
		usleep(10000);
	ck_assert_msg(count_blocks(dir) >= want, "fsstat --watch printed %zu blocks, want %zu", count_blocks(dir),
		      want);
}

START_TEST(cli_watch_prints_rates_until_sigint)
{
	char dir[256];
	struct run_result *r = malloc(sizeof(*r));
	pid_t pid;

	ck_assert_ptr_nonnull(r);
	make_scratch(dir, sizeof(dir));
	set_stats(dir, fsstat_rate_prev, strlen(fsstat_rate_prev));
	pid = spawn_fsstat(dir, (char *const[]){ (char *)fsstat_bin(), "--watch=0.05", dir, NULL });
	wait_for_blocks(dir, 1);
	set_stats(dir, fsstat_rate_cur, strlen(fsstat_rate_cur));
	/* Block k+1 may still have been sampled before the change; k+2 was
	 * sampled after it (it follows a block printed after we looked), and
	 * k+3 compares two samples taken after it. */
	wait_for_blocks(dir, count_blocks(dir) + 3);
	kill(pid, SIGINT);
	collect(pid, dir, r);
	ck_assert_msg(r->status == 0, "exit %d after SIGINT, stderr: %s", r->status, r->err);
	/* stdout is a file: no screen clearing, blocks one after another */
	assert_lacks(r->out, "\033[");
	assert_contains(r->out, "since mount (10.0s)");
	assert_contains(r->out, "over 2.0 s");
	assert_contains(r->out, "reads/s 100.0  opens/s 2.0  read 2.0 MB/s");
	assert_contains(r->out, "hit ratio 75.0%");
	/* after the change, equal samples: zero rates */
	assert_contains(r->out, "reads/s 0.0");
	remove_scratch(dir);
	free(r);
}
END_TEST

void fsstat_cli_tests(TCase *tc)
{
	tcase_add_test(tc, cli_table_and_json);
	tcase_add_test(tc, cli_errors);
	tcase_add_test(tc, cli_watch_prints_rates_until_sigint);
}
