/* SPDX-License-Identifier: MIT */
/*
 * prep/jobs.c: the job table of the prepared view (a job's version counter
 * per file, whether it is active, which slot a new job takes) and which job
 * a reading process belongs to (prep_job_of_pid of prep/prep.h, and a small
 * cache of it per view). Every function taking a view runs under its lock,
 * but prep__job_of_pid_cached (pid_lock only).
 */
#ifndef COORDFS_PREP_JOBS_H
#define COORDFS_PREP_JOBS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "prep/view_state.h"

/* Made a request in the last cfg.job_idle_s seconds. */
bool prep__job_active(const struct prep_view *v, const struct job *j, double now);
/* The slot of job (uid, name), made if new: appended while the table is
 * below max_jobs, else the least recently active reusable slot. A uid
 * holding a quarter of the table already reuses its own slots only, so one
 * user cannot crowd the others out. NULL when no slot can be had. */
struct job *prep__job_get(struct prep_view *v, uid_t uid, const char *name, double now);
/* The next version of f for j. Its version counters cost 2 bytes per file,
 * charged to the budget on first use without waiting: -ENOSPC when the
 * budget has no room for them now (the caller may make room and retry),
 * -ENOMEM. */
int prep__job_take_version(struct prep_view *v, struct job *j, uint32_t f, uint32_t *version);
/* Give back a version taken by an open that was refused, unless the job
 * has taken another one of f meanwhile. */
void prep__job_untake_version(struct job *j, uint32_t f, uint32_t version);
/* Bytes of one job's version counters. */
uint64_t prep__job_counters_bytes(const struct prep_view *v);
/* Mark the jobs named after a process that has exited as gone (inactive
 * for good, unless a request names them again). Under the view lock; reads
 * /proc for jobs quiet for a second, each at most once a second. */
void prep__jobs_check_gone(struct prep_view *v, double now);
/* Does an active job other than self (NULL: any) still have to read
 * version k of f, within an epoch of the one it is in? */
bool prep__still_needed(struct prep_view *v, const struct job *self, uint32_t f, uint32_t k,
			double now);
/* Free the version counters of the job that is inactive, holds no open
 * file and was active least recently, and its slot with them. false when
 * no job can give any. */
bool prep__job_reclaim(struct prep_view *v, double now);
/* Free every job and its counters (prep_view_destroy). */
void prep__jobs_free(struct prep_view *v);
/* prep_job_of_pid through a small cache: /proc is read at most every few
 * seconds per pid. Takes pid_lock, never view->lock. */
int prep__job_of_pid_cached(struct prep_view *v, pid_t pid, char *name);

#endif
