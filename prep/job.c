/* SPDX-License-Identifier: MIT */
/*
 * Job identity of a reading process: COORDFS_JOB from its environment, or a
 * guess from the process tree (the topmost ancestor running the same
 * executable, so DataLoader workers join their training process). See
 * prep_job_of_pid in prep.h for the contract.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prep/prep.h"

#define ENVIRON_MAX (1u << 20) /* bytes of /proc/PID/environ examined */
#define WALK_MAX 64	       /* ancestors examined */

static const char job_var[] = "COORDFS_JOB=";

/* Zero, then free, a buffer that held another process's environment
 * (read as root: other users' secrets). */
static void free_wiped(char *buf, size_t cap)
{
	explicit_bzero(buf, cap);
	free(buf);
}

/* Read up to max bytes of a /proc file into a malloc'd buffer (grown by
 * copy, each old block wiped: no copy of it is left unwiped on the heap). */
static int read_proc(pid_t pid, const char *what, size_t max, char **out, size_t *outlen)
{
	char path[64];
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap + 1);
	int fd;

	if (!buf)
		return -ENOMEM;
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		free_wiped(buf, cap + 1);
		return e == ENOENT ? -ESRCH : -e;
	}
	for (;;) {
		if (len == cap) {
			if (cap >= max)
				break;
			size_t ncap = cap * 2 > max ? max : cap * 2;
			char *nb = malloc(ncap + 1);
			if (!nb) {
				free_wiped(buf, cap + 1);
				close(fd);
				return -ENOMEM;
			}
			memcpy(nb, buf, len);
			free_wiped(buf, cap + 1);
			buf = nb;
			cap = ncap;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			free_wiped(buf, cap + 1);
			close(fd);
			return e == ESRCH ? -ESRCH : -e;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

/* COORDFS_JOB of pid into out; -ENOENT when unset or empty. */
static int job_from_environ(pid_t pid, char *out, size_t outlen)
{
	char *env;
	size_t len;
	int rc = read_proc(pid, "environ", ENVIRON_MAX, &env, &len);

	if (rc < 0)
		return rc;
	rc = -ENOENT;
	for (size_t i = 0; i < len;) {
		const char *entry = env + i;
		size_t elen = strnlen(entry, len - i);

		if (elen > sizeof(job_var) - 1 &&
		    memcmp(entry, job_var, sizeof(job_var) - 1) == 0) {
			const char *val = entry + sizeof(job_var) - 1;
			size_t vlen = elen - (sizeof(job_var) - 1);

			if (vlen >= outlen)
				vlen = outlen - 1;
			memcpy(out, val, vlen);
			out[vlen] = '\0';
			rc = 0; /* keep scanning: the last definition wins, as getenv */
		}
		i += elen + 1;
	}
	free_wiped(env, len + 1);
	return rc;
}

/* ppid and starttime (field 22) from /proc/PID/stat. */
static int read_stat(pid_t pid, pid_t *ppid, unsigned long long *starttime)
{
	char *st;
	size_t len;
	int rc = read_proc(pid, "stat", 4096, &st, &len);

	if (rc < 0)
		return rc;
	/* comm (field 2) may hold spaces and parentheses: parse after the last ')'. */
	char *p = strrchr(st, ')');
	rc = -EIO;
	if (p) {
		char state;
		int pp;
		unsigned long long t;
		/* fields 3..22 */
		if (sscanf(p + 1,
			   " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
			   "%*d %llu",
			   &state, &pp, &t) == 3) {
			*ppid = pp;
			*starttime = t;
			rc = 0;
		}
	}
	free(st);
	return rc;
}

static int read_exe(pid_t pid, char *buf, size_t buflen)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, buf, buflen - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

/* FUSE names the calling thread; jobs are made of processes. The thread
 * group id of tid, or tid itself when /proc does not say. */
static pid_t process_of(pid_t tid)
{
	char path[64], buf[512];
	int tgid = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tid;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return tid;
	buf[n] = '\0';
	const char *t = strstr(buf, "\nTgid:");
	if (!t || sscanf(t + 6, "%d", &tgid) != 1 || tgid <= 0)
		return tid;
	return (pid_t)tgid;
}

int prep_job_of_pid(pid_t pid, char *out, size_t outlen)
{
	char exe[PATH_MAX], pexe[PATH_MAX];
	unsigned long long start, pstart;
	pid_t ppid, pppid;
	int rc;

	if (!out || outlen < 2 || pid <= 0)
		return -EINVAL;
	pid = process_of(pid);
	rc = job_from_environ(pid, out, outlen);
	if (rc == 0)
		return 0;
	if (rc == -ESRCH)
		return rc;
	if ((rc = read_stat(pid, &ppid, &start)) < 0)
		return rc;
	if (read_exe(pid, exe, sizeof(exe)) == 0) {
		for (int depth = 0; depth < WALK_MAX && ppid > 1; depth++) {
			if (read_exe(ppid, pexe, sizeof(pexe)) < 0 || strcmp(exe, pexe) != 0)
				break;
			if (read_stat(ppid, &pppid, &pstart) < 0)
				break;
			pid = ppid;
			start = pstart;
			ppid = pppid;
		}
	}
	int n = snprintf(out, outlen, "pid:%d:%llu", (int)pid, start);
	if (n < 0 || (size_t)n >= outlen)
		return -EINVAL;
	return 0;
}
