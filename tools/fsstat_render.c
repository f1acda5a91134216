/* SPDX-License-Identifier: MIT */
/*
 * The fsstat table and the statistics document it reads: turns one statistics document (and, in watch mode, the
 * previous one) into the text a person reads, in the spirit of iostat and
 * `juicefs stats`. Strings from the document are printed with control
 * characters masked, so a hostile daemon cannot drive the terminal.
 */
#include "tools/fsstat.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/size.h"

#define LABEL "%-9s"
#define MAX_SHOWN_STRING 200
/* Nodes listed one per line; a larger cluster gets a count and the nodes
 * that are not up (this many at most). */
#define FSSTAT_NODES_LISTED 16
#define MAX_NODE_COUNT 1e9 /* a node count past this is not one */

int fsstat_parse(const char *text, size_t len, json_t **out, char *errbuf, size_t errlen)
{
	json_error_t jerr;
	json_t *doc;

	*out = NULL;
	if (len > FSSTAT_MAX_JSON) {
		if (errbuf)
			snprintf(errbuf, errlen, "%zu bytes, more than the %u accepted", len, FSSTAT_MAX_JSON);
		return -E2BIG;
	}
	doc = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &jerr);
	if (!doc) {
		if (errbuf)
			snprintf(errbuf, errlen, "malformed statistics JSON at byte %d: %s", jerr.position, jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(doc)) {
		if (errbuf)
			snprintf(errbuf, errlen, "statistics JSON is not an object");
		json_decref(doc);
		return -EINVAL;
	}
	*out = doc;
	return 0;
}

json_t *fsstat_field(const json_t *stats, const char *path)
{
	json_t *v = (json_t *)stats;

	if (!path || !*path)
		return NULL;
	for (const char *p = path;;) {
		size_t n = strcspn(p, ".");

		if (n == 0 || !json_is_object(v))
			return NULL;
		v = json_object_getn(v, p, n);
		if (!v || p[n] == '\0')
			return v;
		p += n + 1;
	}
}

/* A counter read from the document; ok is false when missing or ill-typed. */
struct counter {
	bool ok;
	double v;
};

static struct counter get_counter(const json_t *stats, const char *path)
{
	struct counter c = { false, 0 };
	const json_t *f = fsstat_field(stats, path);

	if (json_is_number(f) && json_number_value(f) >= 0) {
		c.ok = true;
		c.v = json_number_value(f);
	}
	return c;
}

/* Dataset bytes read so far, what passes are counted in: raw reads plus the
 * files the prepared view decoded (dataset_read_bytes); a daemon that does
 * not report it counts raw reads only. */
static struct counter dataset_read(const json_t *stats)
{
	struct counter c = get_counter(stats, "dataset_read_bytes");

	return c.ok ? c : get_counter(stats, "fuse.read_bytes");
}

static const char *fmt_count(struct counter c, char *buf, size_t len)
{
	if (!c.ok)
		return "-";
	if (c.v < 1e18 && c.v == floor(c.v))
		snprintf(buf, len, "%llu", (unsigned long long)c.v);
	else
		snprintf(buf, len, "%.6g", c.v);
	return buf;
}

static const char *fmt_size(struct counter c, char *buf, size_t len)
{
	if (!c.ok)
		return "-";
	if (c.v >= 18e18)
		snprintf(buf, len, "%.3g B", c.v);
	else
		size_format((uint64_t)c.v, buf, (unsigned)len);
	return buf;
}

/* part / whole as a percentage, "-" when either is missing or whole is 0. */
static const char *fmt_ratio(struct counter part, struct counter whole, char *buf, size_t len)
{
	if (!part.ok || !whole.ok || whole.v <= 0)
		return "-";
	double pct = 100.0 * part.v / whole.v;

	/* A part past its whole (odd counters) in %f would fill, and be cut
	 * at, the buffer: digits that look like a percentage but are not. */
	snprintf(buf, len, pct < 1e6 ? "%.1f%%" : "%.3g%%", pct);
	return buf;
}

static struct counter sum2(struct counter a, struct counter b)
{
	struct counter s = { a.ok && b.ok, a.v + b.v };

	return s;
}

static const char *fmt_uptime(struct counter c, char *buf, size_t len)
{
	unsigned long long s;

	if (!c.ok || c.v > 1e12)
		return "-";
	s = (unsigned long long)c.v;
	if (s >= 86400)
		snprintf(buf, len, "%llud %02lluh %02llum", s / 86400, s % 86400 / 3600, s % 3600 / 60);
	else if (s >= 3600)
		snprintf(buf, len, "%lluh %02llum %02llus", s / 3600, s % 3600 / 60, s % 60);
	else if (s >= 60)
		snprintf(buf, len, "%llum %02llus", s / 60, s % 60);
	else
		snprintf(buf, len, "%.1fs", c.v);
	return buf;
}

/* Copy s for display: control bytes masked, long strings cut. */
static const char *shown(const char *s, char *buf, size_t len)
{
	size_t i = 0;

	if (!s)
		return "-";
	for (; s[i] && i + 1 < len && i < MAX_SHOWN_STRING; i++) {
		unsigned char c = (unsigned char)s[i];

		buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	buf[i] = '\0';
	return buf;
}

char *fsstat_bar(double used, double capacity, char *buf, size_t buflen)
{
	size_t filled = 0, i = 0;

	if (buflen < FSSTAT_BAR_WIDTH + 3) {
		if (buflen)
			buf[0] = '\0';
		return buf;
	}
	if (capacity > 0 && used > 0) {
		double frac = used / capacity;

		if (frac > 1)
			frac = 1;
		filled = (size_t)(frac * FSSTAT_BAR_WIDTH + 0.5);
		/* Something cached shows at least one mark; not-quite-full never
		 * looks full. */
		if (filled == 0)
			filled = 1;
		if (filled == FSSTAT_BAR_WIDTH && used < capacity)
			filled = FSSTAT_BAR_WIDTH - 1;
	}
	buf[i++] = '[';
	for (size_t k = 0; k < FSSTAT_BAR_WIDTH; k++)
		buf[i++] = k < filled ? '#' : '.';
	buf[i++] = ']';
	buf[i] = '\0';
	return buf;
}

static void render_cache(FILE *out, const json_t *s)
{
	struct counter cap = get_counter(s, "cache.capacity_bytes");
	struct counter used = get_counter(s, "cache.used_bytes");
	struct counter hits = get_counter(s, "cache.hits"), misses = get_counter(s, "cache.misses");
	struct counter hit_b = get_counter(s, "cache.hit_bytes"), miss_b = get_counter(s, "cache.miss_bytes");
	char bar[FSSTAT_BAR_WIDTH + 3], a[32], b[32], c[32], d[32];

	fsstat_bar(used.ok ? used.v : 0, cap.ok ? cap.v : 0, bar, sizeof(bar));
	fprintf(out, LABEL "%s %6s  %s / %s\n", "cache", bar, fmt_ratio(used, cap, a, sizeof(a)),
		fmt_size(used, b, sizeof(b)), fmt_size(cap, c, sizeof(c)));
	fprintf(out, LABEL "items %s  admitted %s  refused %s  fill errors %s\n", "",
		fmt_count(get_counter(s, "cache.items"), a, sizeof(a)),
		fmt_count(get_counter(s, "cache.admitted"), b, sizeof(b)),
		fmt_count(get_counter(s, "cache.refused"), c, sizeof(c)),
		fmt_count(get_counter(s, "cache.fill_errors"), d, sizeof(d)));
	fprintf(out, LABEL "hits %s  misses %s  hit ratio %s  by bytes %s\n", "",
		fmt_count(hits, a, sizeof(a)), fmt_count(misses, b, sizeof(b)),
		fmt_ratio(hits, sum2(hits, misses), c, sizeof(c)),
		fmt_ratio(hit_b, sum2(hit_b, miss_b), d, sizeof(d)));
}

/* The disk tier (cache.disk), only when the mount has one. */
static void render_disk(FILE *out, const json_t *s)
{
	struct counter cap = get_counter(s, "cache.disk.capacity_bytes");
	struct counter used = get_counter(s, "cache.disk.used_bytes");
	char bar[FSSTAT_BAR_WIDTH + 3], a[32], b[32], c[32], d[32], e[32];

	if (!cap.ok || cap.v <= 0)
		return;
	fsstat_bar(used.ok ? used.v : 0, cap.v, bar, sizeof(bar));
	fprintf(out, LABEL "%s %6s  %s / %s%s\n", "disk", bar, fmt_ratio(used, cap, a, sizeof(a)),
		fmt_size(used, b, sizeof(b)), fmt_size(cap, c, sizeof(c)),
		get_counter(s, "cache.disk.disabled").v > 0 ? "  OFF (I/O error)" : "");
	fprintf(out, LABEL "items %s  admitted %s  refused %s  hits %s (%s)\n", "",
		fmt_count(get_counter(s, "cache.disk.items"), a, sizeof(a)),
		fmt_count(get_counter(s, "cache.disk.admitted"), b, sizeof(b)),
		fmt_count(get_counter(s, "cache.disk.refused"), c, sizeof(c)),
		fmt_count(get_counter(s, "cache.disk.hits"), d, sizeof(d)),
		fmt_size(get_counter(s, "cache.disk.hit_bytes"), e, sizeof(e)));
	struct counter direct = get_counter(s, "cache.disk.direct");
	fprintf(out, LABEL "dropped stale %s  corrupt %s  cut %s%s\n", "",
		fmt_count(get_counter(s, "cache.disk.dropped_stale"), a, sizeof(a)),
		fmt_count(get_counter(s, "cache.disk.dropped_corrupt"), b, sizeof(b)),
		fmt_count(get_counter(s, "cache.disk.dropped_cut"), c, sizeof(c)),
		!direct.ok ? "" : direct.v > 0 ? "  reads direct" : "  reads buffered");
}

static void render_origin(FILE *out, const json_t *s)
{
	struct counter from_cache = get_counter(s, "cache.hit_bytes");
	struct counter from_disk = get_counter(s, "cache.disk.hit_bytes");
	struct counter from_source = get_counter(s, "source.bytes");
	struct counter from_peers = get_counter(s, "peers.bytes");
	struct counter total = { false, 0 };
	struct counter disk_cap = get_counter(s, "cache.disk.capacity_bytes");
	bool disk = disk_cap.ok && disk_cap.v > 0;
	char a[32], b[32], c[32], e[32], pa[16], pb[16], pc[16], pe[16], dpart[64] = "";

	/* Shares of whatever is known; a missing origin is simply not counted. */
	if (from_cache.ok || from_source.ok || from_peers.ok) {
		total.ok = true;
		total.v = (from_cache.ok ? from_cache.v : 0) + (from_source.ok ? from_source.v : 0) +
			  (from_peers.ok ? from_peers.v : 0) + (disk && from_disk.ok ? from_disk.v : 0);
	}
	if (disk)
		snprintf(dpart, sizeof(dpart), "  disk %s (%s)", fmt_size(from_disk, e, sizeof(e)),
			 fmt_ratio(from_disk, total, pe, sizeof(pe)));
	fprintf(out, LABEL "cache %s (%s)%s  source %s (%s)  peers %s (%s)\n", "bytes",
		fmt_size(from_cache, a, sizeof(a)), fmt_ratio(from_cache, total, pa, sizeof(pa)), dpart,
		fmt_size(from_source, b, sizeof(b)), fmt_ratio(from_source, total, pb, sizeof(pb)),
		fmt_size(from_peers, c, sizeof(c)), fmt_ratio(from_peers, total, pc, sizeof(pc)));
}

static void render_peers(FILE *out, const json_t *s)
{
	const json_t *nodes = fsstat_field(s, "peers.nodes");
	char a[32], b[32], c[32], d[32], e[32], f[32];

	fprintf(out, LABEL "fetches %s  bytes %s  errors %s  fallbacks %s  served %s (%s)\n",
		"peers", fmt_count(get_counter(s, "peers.fetches"), a, sizeof(a)),
		fmt_size(get_counter(s, "peers.bytes"), b, sizeof(b)),
		fmt_count(get_counter(s, "peers.errors"), c, sizeof(c)),
		fmt_count(get_counter(s, "peers.fallbacks"), f, sizeof(f)),
		fmt_count(get_counter(s, "peers.served"), d, sizeof(d)),
		fmt_size(get_counter(s, "peers.served_bytes"), e, sizeof(e)));
	/* Peers put in back-off for answering slowly (older daemons do not say). */
	struct counter slow = get_counter(s, "peers.slow_downs");

	if (slow.ok && slow.v > 0)
		fprintf(out, LABEL "slow answers %s  marked slow %s\n", "",
			fmt_count(get_counter(s, "peers.slow_answers"), a, sizeof(a)),
			fmt_count(slow, b, sizeof(b)));
	if (!json_is_array(nodes)) {
		fprintf(out, LABEL "nodes -\n", "");
		return;
	}
	/* A large cluster: a count, then only the nodes that are not up. A
	 * daemon whose document would not fit the xattr lists only those
	 * ("nodes_listed": "not_up", each with its "index"). */
	size_t count = json_array_size(nodes), nup = 0, listed = 0;
	size_t entries = count, index;
	bool summary = count > FSSTAT_NODES_LISTED;
	const json_t *only = fsstat_field(s, "peers.nodes_listed");
	struct counter total = get_counter(s, "peers.node_count"), ups = get_counter(s, "peers.nodes_up");

	if (count == 0 && (!total.ok || total.v == 0)) {
		fprintf(out, LABEL "single node (no peers)\n", "");
		return;
	}
	const json_t *msrc = fsstat_field(s, "membership.source");
	struct counter gen = get_counter(s, "membership.generation");

	if (json_is_string(msrc)) {
		char g[32], j[32], l[32], h[32];
		const json_t *member = fsstat_field(s, "membership.member");

		fprintf(out, LABEL "membership %s  generation %s", "",
			shown(json_string_value(msrc), g, sizeof(g)), fmt_count(gen, a, sizeof(a)));
		/* Changes while mounted (older daemons do not say). */
		if (fsstat_field(s, "membership.handoffs"))
			fprintf(out, "  joined %s  left %s  handoffs %s",
				fmt_count(get_counter(s, "membership.joined"), j, sizeof(j)),
				fmt_count(get_counter(s, "membership.left"), l, sizeof(l)),
				fmt_count(get_counter(s, "membership.handoffs"), h, sizeof(h)));
		fprintf(out, "%s\n", json_is_false(member) ? "  (this node is not in the list)" : "");
	}
	/* Counts that cannot be (more up than nodes, past any list's size) are
	 * not shown as counts: (size_t) of them wraps or is undefined. */
	if (json_is_string(only) && !strcmp(json_string_value(only), "not_up")) {
		if (!total.ok || !ups.ok || total.v > MAX_NODE_COUNT || ups.v > total.v) {
			fprintf(out, LABEL "nodes -\n", "");
			return;
		}
		count = (size_t)total.v;
		nup = (size_t)ups.v;
		summary = true;
	} else if (summary) {
		for (size_t i = 0; i < count; i++)
			nup += json_is_true(json_object_get(json_array_get(nodes, i), "up"));
	}
	if (summary)
		fprintf(out, LABEL "nodes %zu  up %zu  not up %zu\n", "", count, nup, count - nup);
	for (size_t i = 0; i < entries; i++) {
		const json_t *n = json_array_get(nodes, i);
		const json_t *ix = json_is_object(n) ? json_object_get(n, "index") : NULL;
		const json_t *up = json_is_object(n) ? json_object_get(n, "up") : NULL;
		const char *url = json_is_object(n) ? json_string_value(json_object_get(n, "url")) : NULL;
		/* SLOW: down for answering slowly, not for failing */
		const char *state = json_is_boolean(up) ? (json_is_true(up) ? "up"
					: json_is_true(json_object_get(n, "slow")) ? "SLOW"
										   : "DOWN")
							: "-";
		char shown_url[MAX_SHOWN_STRING + 1];

		if (summary && json_is_true(up))
			continue;
		if (summary && listed == FSSTAT_NODES_LISTED) {
			if (count - nup > listed)
				fprintf(out, LABEL "... %zu more not up\n", "", count - nup - listed);
			break;
		}
		listed++;
		index = json_is_number(ix) && json_number_value(ix) >= 0 && json_number_value(ix) < 1e9
				? (size_t)json_number_value(ix)
				: i;
		fprintf(out, LABEL "node %zu  %-4s  %s\n", "", index, state,
			shown(url, shown_url, sizeof(shown_url)));
	}
}

void fsstat_passes_init(struct fsstat_passes *p)
{
	memset(p, 0, sizeof(*p));
	p->count = 1; /* boundary 0: at mount nothing was read */
}

static void passes_push(struct fsstat_passes *p, unsigned long long pass, double source_bytes)
{
	if (p->count == FSSTAT_PASSES_KEPT) {
		memmove(&p->known[0], &p->known[1], (FSSTAT_PASSES_KEPT - 1) * sizeof(p->known[0]));
		p->count--;
	}
	p->known[p->count].pass = pass;
	p->known[p->count].source_bytes = source_bytes;
	p->count++;
}

void fsstat_passes_update(struct fsstat_passes *p, const json_t *stats)
{
	struct counter ds = get_counter(stats, "dataset_bytes"), rd = dataset_read(stats);
	struct counter src = get_counter(stats, "source.bytes"), up = get_counter(stats, "uptime_s");
	/* Sizes are taken at first lookup: until every file has been looked
	 * up dataset_bytes is short of the dataset, and the first pass is
	 * still under way (its end is found once the size is whole). */
	struct counter known = get_counter(stats, "namespace.attrs_known");
	struct counter files = get_counter(stats, "files");
	bool partial = known.ok && files.ok && known.v < files.v;
	unsigned long long k0, k1, k;

	if (!rd.ok || !src.ok)
		return;
	/* A restarted daemon counts from zero again. */
	if (p->have_sample && ((up.ok && up.v < p->last_uptime) || rd.v < p->last_read || src.v < p->last_source))
		fsstat_passes_init(p);
	/* No size known yet (nothing looked up): no boundary to place, but the
	 * sample is still where the next one counts from, or a first pass that
	 * ends before the next sample would be merged with the second. */
	if (!ds.ok || ds.v <= 0 || rd.v / ds.v > 1e15)
		goto record;
	if (p->have_sample && rd.v > p->last_read && !partial) {
		k0 = (unsigned long long)(p->last_read / ds.v);
		k1 = (unsigned long long)(rd.v / ds.v);
		/* Only the last boundaries are kept anyway. */
		k = k1 - k0 > FSSTAT_PASSES_KEPT ? k1 - FSSTAT_PASSES_KEPT : k0;
		for (k++; k <= k1; k++) {
			double frac = ((double)k * ds.v - p->last_read) / (rd.v - p->last_read);

			passes_push(p, k, p->last_source + frac * (src.v - p->last_source));
		}
	}
record:
	p->have_sample = true;
	p->last_uptime = up.ok ? up.v : 0;
	p->last_read = rd.v;
	p->last_source = src.v;
}

/*
 * Passes over the dataset: how much of it has been read through the mount,
 * and how many bytes each pass took from SOURCE against the MinIO optimum
 * (the whole dataset in the first pass, then what is not cached: dataset -
 * cache). With a disk tier the cached part is the larger of memory and
 * disk: every unit read from SOURCE goes to disk while it has room, memory's
 * share included (inclusive tiers), so memory holds a subset of the disk's
 * units unless the disk is the smaller.
 * The optimum is shown for a single node only: with peers a node's share
 * depends on what the others read.
 */
static void render_passes(FILE *out, const json_t *s, const struct fsstat_passes *p)
{
	struct counter ds = get_counter(s, "dataset_bytes"), files = get_counter(s, "files");
	struct counter rd = dataset_read(s), src = get_counter(s, "source.bytes");
	struct counter cap = get_counter(s, "cache.capacity_bytes");
	struct counter disk = get_counter(s, "cache.disk.capacity_bytes");
	const json_t *nodes = fsstat_field(s, "peers.nodes");
	struct counter nnodes = get_counter(s, "peers.node_count");
	bool single = nnodes.ok ? nnodes.v == 0 : !json_is_array(nodes) || json_array_size(nodes) == 0;
	struct counter optimum = { false, 0 };
	char a[32], b[32], c[32], d[32];
	size_t first;

	/* A file's size is taken at its first lookup: until every file has
	 * been looked up (one pass), dataset_bytes is the size seen so far. */
	struct counter known = get_counter(s, "namespace.attrs_known");
	bool partial = known.ok && files.ok && known.v < files.v;
	char kn[32];

	if (!ds.ok || ds.v <= 0)
		return;
	if (cap.ok && disk.ok && disk.v > cap.v)
		cap.v = disk.v;
	/* Names that share another's units (hard links) are read from SOURCE
	 * and cached once: what a pass must read is the rest. */
	struct counter shared = get_counter(s, "namespace.hard_links_shared_bytes");
	double stored = shared.ok && shared.v > 0 && shared.v < ds.v ? ds.v - shared.v : ds.v;
	if (cap.ok && single && !partial) {
		optimum.ok = true;
		optimum.v = stored > cap.v ? stored - cap.v : 0;
	}
	fprintf(out, LABEL "dataset %s files, %s%s%s%s  read %s passes  optimum per pass %s\n",
		"passes", fmt_count(files, a, sizeof(a)), fmt_size(ds, b, sizeof(b)),
		partial ? " in the " : "", partial ? fmt_count(known, kn, sizeof(kn)) : "",
		partial ? " looked up" : "",
		rd.ok ? (snprintf(c, sizeof(c), "%.2f", rd.v / ds.v), c) : "-", fmt_size(optimum, d, sizeof(d)));
	if (stored < ds.v) {
		struct counter once = { true, ds.v - stored };
		fprintf(out, LABEL "hard links: %s of it are other names of files, read once\n", "",
			fmt_size(once, a, sizeof(a)));
	}
	if (!p || !p->have_sample) {
		/* One look: the totals since mount. */
		struct counter per = { src.ok && rd.ok && rd.v > 0, 0 };

		if (per.ok)
			per.v = src.v / (rd.v / ds.v);
		fprintf(out, LABEL "from source %s in all, %s per pass on average\n", "", fmt_size(src, a, sizeof(a)),
			fmt_size(per, b, sizeof(b)));
		return;
	}
	first = p->count > FSSTAT_PASSES_SHOWN + 1 ? p->count - FSSTAT_PASSES_SHOWN - 1 : 0;
	for (size_t i = first; i + 1 < p->count; i++) {
		const struct fsstat_boundary *from = &p->known[i], *to = &p->known[i + 1];
		unsigned long long n = to->pass - from->pass;
		struct counter per = { true, (to->source_bytes - from->source_bytes) / (double)n };
		char label[64], vs[48] = "";

		if (per.v < 0)
			per.v = 0;
		if (n == 1)
			snprintf(label, sizeof(label), "pass %llu", to->pass);
		else
			snprintf(label, sizeof(label), "passes %llu-%llu", from->pass + 1, to->pass);
		/* The first pass reads everything, whatever the cache. */
		double best = optimum.v * (double)n + (from->pass == 0 ? stored - optimum.v : 0);

		if (optimum.ok && best > 0)
			snprintf(vs, sizeof(vs), "  %.2fx optimum", per.v * (double)n / best);
		fprintf(out, LABEL "%-12s from source %s%s%s\n", "", label, fmt_size(per, a, sizeof(a)),
			n == 1 ? "" : " per pass", vs);
	}
	/* The pass under way, when its start is known. */
	if (rd.ok && src.ok && p->known[p->count - 1].pass == (unsigned long long)(rd.v / ds.v)) {
		const struct fsstat_boundary *from = &p->known[p->count - 1];
		struct counter so_far = { true, src.v - from->source_bytes };
		char label[64];

		if (so_far.v < 0)
			so_far.v = 0;
		snprintf(label, sizeof(label), "pass %llu", from->pass + 1);
		fprintf(out, LABEL "%-12s from source %s so far, %.0f%% read\n", "", label,
			fmt_size(so_far, a, sizeof(a)), 100.0 * (rd.v / ds.v - (double)from->pass));
	}
}

static const char *fmt_ms(const json_t *s, const char *path, char *buf, size_t len)
{
	struct counter c = get_counter(s, path);

	if (!c.ok)
		return "-";
	snprintf(buf, len, "%.1f ms", c.v);
	return buf;
}

/*
 * Object-store counters: for a source that is not a local directory
 * (source.kind), or whenever requests were counted.
 */
static void render_source_requests(FILE *out, const json_t *s)
{
	const char *kind = json_string_value(fsstat_field(s, "source.kind"));
	struct counter requests = get_counter(s, "source.requests");
	struct counter skipped = get_counter(s, "source.skipped_keys");
	char a[32], b[32], c[32], d[32], e[48] = "", k[MAX_SHOWN_STRING + 1];

	if (kind ? strcmp(kind, "local") == 0 : !(requests.ok && requests.v > 0))
		return;
	if (skipped.ok && skipped.v > 0)
		snprintf(e, sizeof(e), "  skipped keys %s", fmt_count(skipped, a, sizeof(a)));
	fprintf(out, LABEL "%s requests %s  retries %s  latency p50 %s  p99 %s%s\n", "",
		kind ? shown(kind, k, sizeof(k)) : "-", fmt_count(requests, a, sizeof(a)),
		fmt_count(get_counter(s, "source.retries"), b, sizeof(b)),
		fmt_ms(s, "source.latency_ms.p50", c, sizeof(c)), fmt_ms(s, "source.latency_ms.p99", d, sizeof(d)),
		e);
}

static const char *fmt_duration(double s, char *buf, size_t len)
{
	struct counter c = { s >= 0 && s < 1e12, s };

	return fmt_uptime(c, buf, len);
}

/*
 * Prefill progress, only when the daemon reports it. With a previous
 * sample (watch mode) also its rate and the time left at that rate.
 */
static void render_prefill(FILE *out, const json_t *s, const struct fsstat_view *view)
{
	const json_t *pf = fsstat_field(s, "prefill");
	struct counter target = get_counter(s, "prefill.target_bytes");
	struct counter done = get_counter(s, "prefill.done_bytes");
	const json_t *running = fsstat_field(s, "prefill.running");
	char bar[FSSTAT_BAR_WIDTH + 3], a[32], b[32], c[32], d[48];
	const char *state = "-";

	/* Only a mount that prefills (or did) has something to show. */
	if (!json_is_object(pf) || (!json_is_true(running) && !(target.ok && target.v > 0)))
		return;
	if (json_is_boolean(running))
		state = json_is_true(running) ? "running" : "stopped";
	if (json_is_false(running) && target.ok && done.ok && done.v >= target.v)
		state = "done";
	fsstat_bar(done.ok ? done.v : 0, target.ok ? target.v : 0, bar, sizeof(bar));
	fprintf(out, LABEL "%s %6s  %s / %s  %s\n", "prefill", bar, fmt_ratio(done, target, a, sizeof(a)),
		fmt_size(done, b, sizeof(b)), fmt_size(target, c, sizeof(c)), state);
	if (view && view->rates && view->prev && json_is_true(running)) {
		struct counter before = get_counter(view->prev, "prefill.done_bytes");
		struct counter up_now = get_counter(s, "uptime_s"), up_prev = get_counter(view->prev, "uptime_s");
		double dt = view->interval_s;

		if (up_now.ok && up_prev.ok && up_now.v > up_prev.v)
			dt = up_now.v - up_prev.v;
		if (before.ok && done.ok && done.v >= before.v && dt > 0) {
			double rate = (done.v - before.v) / dt;

			if (rate > 0 && target.ok && target.v > done.v)
				fmt_duration((target.v - done.v) / rate, d, sizeof(d));
			else
				snprintf(d, sizeof(d), "-");
			fprintf(out, LABEL "%.1f MB/s  ETA %s\n", "", rate / 1e6, d);
		}
	}
}

static void render_rates(FILE *out, const json_t *cur, const json_t *prev,
			 double interval_s)
{
	static const char *const paths[] = { "fuse.reads", "fuse.opens", "fuse.read_bytes", "cache.hit_bytes",
					     "source.bytes", "peers.bytes", "cache.hits", "cache.misses" };
	enum { READS, OPENS, READ_BYTES, HIT_BYTES, SOURCE_BYTES, PEER_BYTES, HITS, MISSES, N_PATHS };
	struct counter delta[N_PATHS];
	struct counter up_now = get_counter(cur, "uptime_s"), up_prev = get_counter(prev, "uptime_s");
	double dt = interval_s;
	char t[32], r[N_PATHS][32], ratio[16];

	/* A daemon restarted between the samples counts again from zero. */
	if (prev && up_now.ok && up_prev.ok && up_now.v < up_prev.v)
		prev = NULL;
	if (!prev) {
		dt = up_now.ok ? up_now.v : 0;
		fprintf(out, LABEL "since mount (%s)\n", "rates", dt > 0 ? fmt_uptime(up_now, t, sizeof(t)) : "-");
	} else {
		if (up_now.ok && up_prev.ok && up_now.v > up_prev.v)
			dt = up_now.v - up_prev.v;
		if (dt > 0)
			snprintf(t, sizeof(t), "%.1f s", dt);
		fprintf(out, LABEL "over %s\n", "rates", dt > 0 ? t : "-");
	}
	for (int i = 0; i < N_PATHS; i++) {
		struct counter now = get_counter(cur, paths[i]);
		struct counter before = { true, 0 };

		if (prev)
			before = get_counter(prev, paths[i]);
		delta[i].ok = now.ok && before.ok && now.v >= before.v && dt > 0;
		delta[i].v = delta[i].ok ? now.v - before.v : 0;
		if (!delta[i].ok)
			snprintf(r[i], sizeof(r[i]), "-");
		else if (i == READ_BYTES || i == HIT_BYTES || i == SOURCE_BYTES || i == PEER_BYTES)
			snprintf(r[i], sizeof(r[i]), "%.1f MB/s", delta[i].v / dt / 1e6);
		else
			snprintf(r[i], sizeof(r[i]), "%.1f", delta[i].v / dt);
	}
	fprintf(out, LABEL "reads/s %s  opens/s %s  read %s\n", "", r[READS], r[OPENS], r[READ_BYTES]);
	fprintf(out, LABEL "cache %s  source %s  peers %s  hit ratio %s\n", "", r[HIT_BYTES], r[SOURCE_BYTES],
		r[PEER_BYTES], fmt_ratio(delta[HITS], sum2(delta[HITS], delta[MISSES]), ratio, sizeof(ratio)));
}

int fsstat_render(FILE *out, const json_t *stats, const struct fsstat_view *view)
{
	char a[32], b[32], c[32], d[32], e[32], mp[MAX_SHOWN_STRING + 1];

	if (!json_is_object(stats))
		return -EINVAL;
	fprintf(out, LABEL "%s  uptime %s  version %s\n", "coordfs",
		view && view->mountpoint ? shown(view->mountpoint, mp, sizeof(mp)) : "-",
		fmt_uptime(get_counter(stats, "uptime_s"), a, sizeof(a)),
		fmt_count(get_counter(stats, "version"), b, sizeof(b)));
	render_cache(out, stats);
	render_disk(out, stats);
	render_origin(out, stats);
	fprintf(out, LABEL "reads %s  bytes %s  errors %s\n", "source",
		fmt_count(get_counter(stats, "source.reads"), a, sizeof(a)),
		fmt_size(get_counter(stats, "source.bytes"), b, sizeof(b)),
		fmt_count(get_counter(stats, "source.errors"), c, sizeof(c)));
	render_source_requests(out, stats);
	render_prefill(out, stats, view);
	render_peers(out, stats);
	fprintf(out, LABEL "decodes %s  shared %s  errors %s  staged %s\n", "prep",
		fmt_count(get_counter(stats, "prep.decodes"), a, sizeof(a)),
		fmt_count(get_counter(stats, "prep.shared"), b, sizeof(b)),
		fmt_count(get_counter(stats, "prep.errors"), c, sizeof(c)),
		fmt_size(get_counter(stats, "prep.staged_bytes"), d, sizeof(d)));
	/* the share: "auto" when the daemon sized it (no --prep-decoded-mem) */
	const json_t *autosized = json_object_get(json_object_get(stats, "prep"), "decoded_auto");
	fprintf(out, LABEL "held %s  images %s  hits %s  refused %s  share %s%s\n", "decoded",
		fmt_size(get_counter(stats, "prep.decoded_bytes"), a, sizeof(a)),
		fmt_count(get_counter(stats, "prep.decoded_files"), b, sizeof(b)),
		fmt_count(get_counter(stats, "prep.decoded_hits"), c, sizeof(c)),
		fmt_count(get_counter(stats, "prep.decoded_refused"), d, sizeof(d)),
		fmt_size(get_counter(stats, "prep.decoded_mem"), e, sizeof(e)),
		json_is_true(autosized) ? " (auto)" : "");
	fprintf(out, LABEL "read %s  dropped unread %s  waiting %s\n", "ahead",
		fmt_count(get_counter(stats, "prep.ahead"), a, sizeof(a)),
		fmt_count(get_counter(stats, "prep.ahead_wasted"), b, sizeof(b)),
		fmt_size(get_counter(stats, "prep.ahead_bytes"), c, sizeof(c)));
	fprintf(out, LABEL "opens %s  reads %s  read %s\n", "fuse",
		fmt_count(get_counter(stats, "fuse.opens"), a, sizeof(a)),
		fmt_count(get_counter(stats, "fuse.reads"), b, sizeof(b)),
		fmt_size(get_counter(stats, "fuse.read_bytes"), c, sizeof(c)));
	if (json_is_true(json_object_get(json_object_get(stats, "fuse"), "kernel_cache")))
		fprintf(out, LABEL "kernel page cache on: reads it serves are not counted\n", "");
	render_passes(out, stats, view ? view->passes : NULL);
	if (view && view->rates)
		render_rates(out, stats, view->prev, view->interval_s);
	return ferror(out) ? -EIO : 0;
}
