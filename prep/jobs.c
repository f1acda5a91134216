/* SPDX-License-Identifier: MIT */
/*
 * The job table of the prepared view and the job of a reading process
 * (prep/jobs.h).
 *
 * Job identity of a reading process (prep_job_of_pid in prep.h has the
 * contract). A job must separate the trials of a hyper-parameter sweep,
 * however they were launched (a shell loop, a Python driver's subprocess or
 * multiprocessing, a notebook kernel), and group each trial's PyTorch
 * DataLoader workers with it, or trials would take each other's versions
 * and share nothing. Measured on PyTorch's workers (fork, spawn and
 * forkserver alike): each one installs its own handlers for SIGBUS, SIGFPE,
 * SIGSEGV and SIGTERM (SigCgt in /proc/PID/status) before it reads, which
 * neither a plain Python process (SIGINT only) nor faulthandler (no
 * SIGTERM, and SIGILL too) does, nor the worker's parent. So a reader is
 * its own job unless it carries that mark and its parent does not;
 * a worker belongs to its parent, or, under the forkserver start method,
 * to the parent of its forkserver. Nothing else of the process tree is
 * guessed: an executable's ancestry says nothing about which trial it is.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/budget.h"
#include "common/log.h"
#include "prep/jobs.h"
#include "prep/prep.h"
#include "prep/view_state.h"

#define PID_TTL_S 5.0
#define ENVIRON_MAX (1u << 20) /* bytes of /proc/PID/environ examined */

/* Variables that name a job, from the environment a process was started
 * with: COORDFS_JOB, else, for a rank of a distributed run (torchrun and
 * torch.distributed's launchers set RANK and WORLD_SIZE), the run's
 * rendezvous address, which concurrent runs on one machine cannot share:
 * the ranks of one run read disjoint shares of each epoch, and must take
 * one version sequence between them. */
enum { VAR_JOB, VAR_RANK, VAR_WORLD_SIZE, VAR_MASTER_ADDR, VAR_MASTER_PORT, NVARS };
static const char *const job_vars[NVARS] = { "COORDFS_JOB=", "RANK=", "WORLD_SIZE=",
					     "MASTER_ADDR=", "MASTER_PORT=" };
#define VAR_MAX 96 /* bytes kept of each value */

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
			/* not realloc: the old copy is wiped (environ holds secrets) */
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

/* The job-naming variables of pid's environment into vals (empty when
 * unset; the last definition wins, as getenv). 0 or -errno. The buffer
 * holds another process's whole environment, secrets included: it is
 * wiped before it is freed. */
static int job_environ(pid_t pid, char vals[NVARS][VAR_MAX])
{
	char *env;
	size_t len;
	int rc = read_proc(pid, "environ", ENVIRON_MAX, &env, &len);

	memset(vals, 0, NVARS * VAR_MAX);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < len;) {
		const char *entry = env + i;
		size_t elen = strnlen(entry, len - i);

		for (int k = 0; k < NVARS; k++) {
			size_t nlen = strlen(job_vars[k]);

			if (elen > nlen && memcmp(entry, job_vars[k], nlen) == 0) {
				size_t vlen = elen - nlen < VAR_MAX ? elen - nlen : VAR_MAX - 1;

				memcpy(vals[k], entry + nlen, vlen);
				vals[k][vlen] = '\0';
			}
		}
		i += elen + 1;
	}
	free_wiped(env, len + 1);
	return 0;
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

/* Whether pid carries the mark of a PyTorch DataLoader worker: handlers of
 * its own for SIGBUS, SIGFPE, SIGSEGV and SIGTERM, and none for SIGILL
 * (faulthandler's, which catches SIGILL too). See the top of this file. */
static bool has_worker_mark(pid_t pid)
{
	const unsigned long long mark = 1ULL << (SIGBUS - 1) | 1ULL << (SIGFPE - 1) |
					 1ULL << (SIGSEGV - 1) | 1ULL << (SIGTERM - 1);
	const unsigned long long not_mark = 1ULL << (SIGILL - 1);
	unsigned long long caught;
	char *st;
	size_t len;
	bool worker = false;

	if (read_proc(pid, "status", 16384, &st, &len) < 0)
		return false;
	const char *p = strstr(st, "\nSigCgt:");
	if (p && sscanf(p + 8, "%llx", &caught) == 1)
		worker = (caught & mark) == mark && !(caught & not_mark);
	free(st);
	return worker;
}

/* Whether pid is a multiprocessing forkserver (its command line runs
 * multiprocessing.forkserver's main). */
static bool is_forkserver(pid_t pid)
{
	static const char needle[] = "from multiprocessing.forkserver import main";
	char *cmd;
	size_t len;
	bool found = false;

	if (read_proc(pid, "cmdline", 4096, &cmd, &len) < 0)
		return false;
	for (size_t i = 0; i < len && !found; i += strnlen(cmd + i, len - i) + 1)
		found = strncmp(cmd + i, needle, sizeof(needle) - 1) == 0;
	free(cmd);
	return found;
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

/* Name the job after the variables of its process's environment, else its
 * process (pid and start time, which guards against pid reuse). */
static int job_name(pid_t job, unsigned long long start, char vals[NVARS][VAR_MAX],
		    char *out, size_t outlen)
{
	int n;

	if (vals[VAR_JOB][0])
		n = snprintf(out, outlen, "%s", vals[VAR_JOB]);
	else if (vals[VAR_RANK][0] && vals[VAR_WORLD_SIZE][0] && vals[VAR_MASTER_PORT][0])
		n = snprintf(out, outlen, "ddp:%s:%s", vals[VAR_MASTER_ADDR], vals[VAR_MASTER_PORT]);
	else
		n = snprintf(out, outlen, "pid:%d:%llu", (int)job, start);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= outlen && !vals[VAR_JOB][0]) /* a COORDFS_JOB is truncated to fit */
		return -EINVAL;
	return 0;
}

int prep_job_of_pid(pid_t pid, char *out, size_t outlen)
{
	static atomic_bool told;
	char vals[NVARS][VAR_MAX];
	unsigned long long start;
	pid_t ppid, job;
	int rc;

	if (!out || outlen < 2 || pid <= 0)
		return -EINVAL;
	job = pid = process_of(pid);
	if ((rc = job_environ(pid, vals)) == -ESRCH)
		return rc;
	if (rc == 0 && vals[VAR_JOB][0])
		return job_name(pid, 0, vals, out, outlen);
	if ((rc = read_stat(pid, &ppid, &start)) < 0)
		return rc;
	/* A worker's parent (its trainer, or a forkserver) never carries the
	 * mark; where both do (a whole tree under a sanitizer that catches
	 * those signals), the reader is taken as its own job. */
	if (ppid > 1 && has_worker_mark(pid) && !has_worker_mark(ppid)) {
		pid_t gp;
		unsigned long long pstart;

		job = ppid;
		if (read_stat(job, &gp, &pstart) < 0)
			return job_name(pid, start, vals, out, outlen); /* the trainer is gone */
		start = pstart;
		if (gp > 1 && is_forkserver(job) && read_stat(gp, &ppid, &pstart) == 0) {
			job = gp;
			start = pstart;
		}
		/* The trainer's environment names the job (a forked worker's
		 * is its trainer's anyway). */
		if (job_environ(job, vals) < 0)
			memset(vals, 0, sizeof(vals));
	}
	if (!vals[VAR_JOB][0] && !atomic_exchange(&told, true))
		log_msg(LOG_NOTICE,
			"prepared view: jobs are told apart by process (process %d is in job of "
			"process %d); set COORDFS_JOB in a job's environment to name it",
			(int)pid, (int)job);
	return job_name(job, start, vals, out, outlen);
}

/* ---- the job table ---- */

bool prep__job_active(const struct prep_view *v, const struct job *j, double now)
{
	return !j->gone && now - j->last_active <= v->cfg.job_idle_s;
}

/* A job named after its process ("pid:PID:START", job_name) has ended when
 * no process PID started at START exists: no request can carry its name
 * again. Checked for jobs quiet for GONE_QUIET_S, each at most every
 * GONE_QUIET_S, so that a trial that finished stops holding other jobs'
 * samples within seconds rather than after job_idle_s. A COORDFS_JOB that
 * happens to look like such a name is at worst taken as gone while it is
 * quiet, and active again at its next request (prep__job_get). */
#define GONE_QUIET_S 1.0
/* /proc reads per call (under the view lock): a full table of quiet jobs
 * is gone through over several sweeps, where it starts turning. */
#define GONE_CHECKS_MAX 64

void prep__jobs_check_gone(struct prep_view *v, double now)
{
	unsigned checks = 0;

	for (unsigned step = 0; step < v->njobs && checks < GONE_CHECKS_MAX; step++) {
		unsigned i = (v->gone_next + step) % v->njobs;
		struct job *j = v->jobs[i];
		int pid, n = 0;
		unsigned long long want, start;
		pid_t ppid;

		v->gone_next = i + 1;
		if (j->gone || now - j->last_active < GONE_QUIET_S ||
		    now - j->gone_checked < GONE_QUIET_S)
			continue;
		j->gone_checked = now;
		if (sscanf(j->name, "pid:%d:%llu%n", &pid, &want, &n) != 2 || n <= 0 ||
		    j->name[n] != '\0' || pid <= 0)
			continue;
		checks++;
		int rc = read_stat(pid, &ppid, &start);
		if (rc == -ESRCH || (rc == 0 && start != want)) {
			j->gone = true;
			log_info("prep: job %s of uid %u has ended: no samples are kept for it",
				 j->name, (unsigned)j->uid);
		}
	}
}

/* A slot may be given to another job only when its job holds no open file
 * and has not opened one for job_idle_s. */
static bool job_reusable(const struct prep_view *v, const struct job *j, double now)
{
	return j->open == 0 && !prep__job_active(v, j, now);
}

struct job *prep__job_get(struct prep_view *v, uid_t uid, const char *name, double now)
{
	struct job *victim = NULL, *own_victim = NULL;
	unsigned own = 0, per_uid = v->cfg.max_jobs / 4 ? v->cfg.max_jobs / 4 : 1;

	for (unsigned i = 0; i < v->njobs; i++) {
		struct job *j = v->jobs[i];
		if (j->uid == uid && strcmp(j->name, name) == 0) {
			j->last_active = now;
			j->gone = false;
			return j;
		}
		bool reusable = job_reusable(v, j, now);
		if (j->uid == uid) {
			own++;
			if (reusable && (!own_victim || j->last_active < own_victim->last_active))
				own_victim = j;
		}
		if (reusable && (!victim || j->last_active < victim->last_active))
			victim = j;
	}
	if (own >= per_uid) {
		victim = own_victim;
	} else if (v->njobs < v->cfg.max_jobs) {
		if (v->njobs == v->jobs_cap) {
			unsigned cap = v->jobs_cap ? v->jobs_cap * 2 : 16;
			struct job **nj = realloc(v->jobs, sizeof(*nj) * cap);
			if (!nj)
				return NULL;
			v->jobs = nj;
			v->jobs_cap = cap;
		}
		struct job *j = calloc(1, sizeof(*j));
		if (!j)
			return NULL;
		v->jobs[v->njobs++] = j;
		atomic_store_explicit(&v->st_jobs, v->njobs, memory_order_relaxed);
		victim = j;
	}
	if (!victim)
		return NULL;
	if (victim->name[0])
		log_info("prep: job %s of uid %u takes the slot of inactive job %s of uid %u",
			 name, (unsigned)uid, victim->name, (unsigned)victim->uid);
	if (victim->next)
		memset(victim->next, 0, sizeof(*victim->next) * v->cfg.nfiles);
	victim->uid = uid;
	snprintf(victim->name, sizeof(victim->name), "%s", name);
	victim->last_active = now;
	victim->open = 0;
	victim->opens = 0;
	victim->seen = 0;
	victim->maxv = 0;
	victim->gone = false;
	victim->gone_checked = now;
	victim->has_recipe = false;
	victim->ahead_at = victim->ahead_seen = victim->ahead_done = 0;
	return victim;
}

uint64_t prep__job_counters_bytes(const struct prep_view *v)
{
	return sizeof(uint16_t) /* job.next[f] */ * (uint64_t)v->cfg.nfiles;
}

/* Charged without waiting: this runs under the view lock. */
int prep__job_take_version(struct prep_view *v, struct job *j, uint32_t f, uint32_t *version)
{
	if (!j->next) {
		uint64_t n = prep__job_counters_bytes(v);
		if (v->cfg.mem && !budget_try(v->cfg.mem, n))
			return -ENOSPC;
		j->next = calloc(v->cfg.nfiles, sizeof(*j->next));
		if (!j->next) {
			prep__mem_release(v, n);
			return -ENOMEM;
		}
	}
	*version = j->next[f];
	if (j->next[f] < UINT16_MAX)
		j->next[f]++;
	if (*version > j->maxv)
		j->maxv = *version;
	j->opens++;
	if (*version == 0)
		j->seen++;
	return 0;
}

void prep__job_untake_version(struct job *j, uint32_t f, uint32_t version)
{
	if (j->next && j->next[f] == version + 1)
		j->next[f]--;
}

bool prep__still_needed(struct prep_view *v, const struct job *self, uint32_t f, uint32_t k,
			 double now)
{
	for (unsigned i = 0; i < v->njobs; i++) {
		const struct job *j = v->jobs[i];
		if (j == self || !prep__job_active(v, j, now))
			continue;
		/* j will read k if it has not passed it, and soon if k is at most
		 * one epoch past the one j is in: a job an epoch or more behind
		 * (or one that read a file or two and stopped) would have every
		 * other job's samples kept for it, in memory charged to
		 * --prep-mem, until it comes to them, if ever. */
		if ((j->next ? j->next[f] : 0) <= k && k <= j->maxv + 1)
			return true;
	}
	return false;
}

bool prep__job_reclaim(struct prep_view *v, double now)
{
	struct job *oldest = NULL;

	for (unsigned i = 0; i < v->njobs; i++) {
		struct job *j = v->jobs[i];
		if (j->next && job_reusable(v, j, now) &&
		    (!oldest || j->last_active < oldest->last_active))
			oldest = j;
	}
	if (!oldest)
		return false;
	log_info("prep: inactive job %s of uid %u gives back its version counters "
		 "for memory", oldest->name, (unsigned)oldest->uid);
	free(oldest->next);
	oldest->next = NULL;
	oldest->maxv = 0;
	prep__mem_release(v, prep__job_counters_bytes(v));
	oldest->name[0] = '\0'; /* a free slot: matches no job, counts for no uid */
	oldest->uid = (uid_t)-1;
	stat_add(&v->st_jobs_reclaimed, 1);
	return true;
}

void prep__jobs_free(struct prep_view *v)
{
	for (unsigned i = 0; i < v->njobs; i++) {
		if (v->jobs[i]->next)
			prep__mem_release(v, prep__job_counters_bytes(v));
		free(v->jobs[i]->next);
		free(v->jobs[i]);
	}
	free(v->jobs);
}

int prep__job_of_pid_cached(struct prep_view *v, pid_t pid, char *name)
{
	struct pid_entry *e = &v->pids[(uint32_t)pid % PID_CACHE];
	double now = now_s();
	int rc;

	pthread_mutex_lock(&v->pid_lock);
	if (e->pid == pid && now - e->when < PID_TTL_S) {
		memcpy(name, e->name, PREP_JOB_NAME_MAX);
		pthread_mutex_unlock(&v->pid_lock);
		return 0;
	}
	pthread_mutex_unlock(&v->pid_lock);
	rc = prep_job_of_pid(pid, name, PREP_JOB_NAME_MAX);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&v->pid_lock);
	e->pid = pid;
	e->when = now;
	memcpy(e->name, name, PREP_JOB_NAME_MAX);
	pthread_mutex_unlock(&v->pid_lock);
	return 0;
}
