/* SPDX-License-Identifier: MIT */
/*
 * fsstat's reading of the daemon's statistics JSON (see fsstat(1) for the
 * fields) and its rendering as a human table, kept apart from the command
 * so tests can feed it JSON text. JSON is parsed by jansson; this layer
 * adds the caps on outside input and dotted-path look-ups. The table reads
 * only the parsed tree: unknown fields are ignored, missing or ill-typed
 * ones are shown as "-".
 */
#ifndef COORDFS_TOOLS_FSSTAT_H
#define COORDFS_TOOLS_FSSTAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define FSSTAT_BAR_WIDTH 30            /* characters between the brackets of a bar */
#define FSSTAT_MAX_JSON (1u << 20)     /* bytes of statistics text accepted */

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
