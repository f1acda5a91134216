/* SPDX-License-Identifier: MIT */
/*
 * fsstat's rendering of the daemon's statistics JSON (SPEC §4) as a human
 * table, kept apart from the command so tests can feed it JSON text. It
 * reads only the parsed tree: unknown fields are ignored, missing or
 * ill-typed ones are shown as "-".
 */
#ifndef COORDFS_TOOLS_FSSTAT_H
#define COORDFS_TOOLS_FSSTAT_H

#include <stdbool.h>
#include <stdio.h>

#include "tools/json.h"

#define FSSTAT_BAR_WIDTH 30 /* characters between the brackets of the fill bar */

struct fsstat_view {
	const char *mountpoint; /* shown in the header; may be NULL */
	/* Add the per-second section (watch mode). Rates are computed against
	 * prev, or against zero since mount when prev is NULL or the daemon
	 * restarted in between (its uptime went back). */
	bool rates;
	const struct json_value *prev;
	/* Wall time between prev and stats, used when the samples' uptime_s
	 * is missing; the uptime difference is preferred (it is measured where
	 * the counters are). */
	double interval_s;
};

/*
 * Write the table for stats (one parsed §4 document) to out. view may be
 * NULL (plain table). Returns 0, -EINVAL if stats is not a JSON object, or
 * -EIO if writing to out failed. Does not block beyond stdio.
 */
int fsstat_render(FILE *out, const struct json_value *stats, const struct fsstat_view *view);

/*
 * Fill-bar text for used/capacity into buf (at least FSSTAT_BAR_WIDTH + 3
 * bytes): "[#####.....]", all '.' when capacity is 0. Returns buf.
 */
char *fsstat_bar(double used, double capacity, char *buf, size_t buflen);

#endif
