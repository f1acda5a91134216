/* SPDX-License-Identifier: MIT */
/*
 * fsstat's reading of the daemon's statistics JSON (see fsstat(1) for the
 * fields) and its rendering as a human table, kept apart from the command
 * so tests can feed it JSON text. JSON is parsed by jansson; this layer
 * adds the caps on outside input and dotted-path look-ups. The table reads
 * only the parsed tree: unknown fields are ignored, missing or ill-typed
 * ones are shown as "-", and sections the daemon does not report (object
 * store requests, prefill) are left out.
 *
 * In watch mode the command also keeps a struct fsstat_passes across
 * samples: it splits the run into passes over the dataset (as many bytes
 * read through the mount as the dataset holds) and records how many bytes
 * came from storage in each, which is what the MinIO cache improves.
 */
#ifndef COORDFS_TOOLS_FSSTAT_H
#define COORDFS_TOOLS_FSSTAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define FSSTAT_BAR_WIDTH 30            /* characters between the brackets of a bar */
#define FSSTAT_MAX_JSON (1u << 20)     /* bytes of statistics text accepted */
#define FSSTAT_PASSES_KEPT 64          /* pass boundaries remembered in watch mode */
#define FSSTAT_PASSES_SHOWN 5          /* most recent passes printed */

/*
 * Parse one statistics document (text[0..len), need not be NUL-terminated).
 * Integers are read as doubles, so a counter beyond 2^63 does not make the
 * whole document unreadable. On success *out owns a new JSON object (free
 * with json_decref). Returns 0, -E2BIG (len over FSSTAT_MAX_JSON), -EINVAL
 * (malformed JSON or not an object; errbuf, if not NULL, gets one line
 * saying where and why).
 */
int fsstat_parse(const char *text, size_t len, json_t **out, char *errbuf, size_t errlen);

/*
 * The member at a dotted path ("cache.hits") of nested objects, or NULL
 * when stats is NULL, a step is missing or a step is not an object.
 */
json_t *fsstat_field(const json_t *stats, const char *path);

/* One pass boundary: the counters when fuse.read_bytes reached k × dataset. */
struct fsstat_boundary {
	unsigned long long pass; /* k: passes completed at this point */
	double source_bytes;     /* storage bytes read by then (interpolated) */
};

/*
 * Passes over the dataset seen by a watching fsstat. Boundary 0 (mount:
 * nothing read) is known exactly; a later boundary is known when two
 * consecutive samples straddle it, and its storage bytes are interpolated
 * linearly in fuse.read_bytes between them. Passes the watcher did not
 * see begin and end are reported together. Caller-owned; zero it with
 * fsstat_passes_init.
 */
struct fsstat_passes {
	bool have_sample;
	double last_uptime, last_read, last_source;
	size_t count;                                       /* valid entries */
	struct fsstat_boundary known[FSSTAT_PASSES_KEPT];  /* oldest first */
};

void fsstat_passes_init(struct fsstat_passes *p);

/*
 * Feed one sample. Needs dataset_bytes > 0, fuse.read_bytes and
 * source.bytes; samples without them are ignored. A daemon restart
 * (uptime went back) starts over. Never fails.
 */
void fsstat_passes_update(struct fsstat_passes *p, const json_t *stats);

struct fsstat_view {
	const char *mountpoint; /* shown in the header; may be NULL */
	/* Add the per-second section (watch mode). Rates are computed against
	 * prev, or against zero since mount when prev is NULL or the daemon
	 * restarted in between (its uptime went back). */
	bool rates;
	const json_t *prev;
	/* Wall time between prev and stats, used when the samples' uptime_s
	 * is missing; the uptime difference is preferred (it is measured where
	 * the counters are). */
	double interval_s;
	/* Pass history (watch mode), or NULL: then only the averages since
	 * mount are shown. */
	const struct fsstat_passes *passes;
};

/*
 * Write the table for stats (one parsed document) to out. view may be
 * NULL (plain table). Returns 0, -EINVAL if stats is not a JSON object, or
 * -EIO if writing to out failed. Does not block beyond stdio.
 */
int fsstat_render(FILE *out, const json_t *stats, const struct fsstat_view *view);

/*
 * Bar text for used/capacity into buf (at least FSSTAT_BAR_WIDTH + 3
 * bytes): "[#####.....]", all '.' when capacity is 0. Returns buf.
 */
char *fsstat_bar(double used, double capacity, char *buf, size_t buflen);

#endif
