/* SPDX-License-Identifier: MIT */
/*
 * The peer layer's part of the statistics: the "peers" JSON object
 * (built with jansson, so always valid UTF-8 JSON) and its Prometheus
 * rendering. fs/ composes these into the full answer.
 */
#include "remote/remote.h"

#include <inttypes.h>
#include <limits.h>
#include <jansson.h>
#include <string.h>

#include "common/strbuf.h"
#include "common/utf8.h"

/* The "nodes" array: [{"url": "...", "up": true}, ...]; [] for a NULL c.
 * A node down for answering slowly also has "slow": true (only then: a
 * thousand nodes' "slow": false would crowd the xattr's document).
 * With listed_max < UINT_MAX, only nodes not up, at most listed_max of
 * them, each with its "index" in --peers. */
static json_t *peers_json_value(const struct remote_client *c, unsigned listed_max)
{
	json_t *arr = json_array();
	unsigned listed = 0;

	for (unsigned k = 0; arr && c && remote_node_url(c, k); k++) {
		bool up = remote_node_up(c, k);

		if (listed_max < UINT_MAX && (up || listed++ == listed_max)) {
			if (!up)
				break;
			continue;
		}
		json_t *node = json_object();
		if (!node || json_array_append_new(arr, node) < 0 ||
		    json_object_set_new(node, "url", utf8_json_string(remote_node_url(c, k))) < 0 ||
		    json_object_set_new(node, "up", json_boolean(up)) < 0 ||
		    (remote_node_slow(c, k) && json_object_set_new(node, "slow", json_true()) < 0) ||
		    (listed_max < UINT_MAX &&
		     json_object_set_new(node, "index", json_integer(k)) < 0)) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

json_t *remote_stats_json_value(const struct remote_client *c, const struct remote_server *s)
{
	return remote_stats_json_summary(c, s, UINT_MAX);
}

json_t *remote_stats_json_summary(const struct remote_client *c, const struct remote_server *s,
				  unsigned listed_max)
{
	unsigned count = 0, up = 0;
	struct remote_client_stats cs;
	struct remote_server_stats ss;
	json_t *obj;

	remote_client_get_stats(c, &cs);
	remote_server_get_stats(s, &ss);
	obj = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			"fetches",
			(json_int_t)cs.fetches, "bytes", (json_int_t)cs.bytes, "errors",
			(json_int_t)cs.errors, "skipped", (json_int_t)cs.skipped, "mismatches",
			(json_int_t)cs.mismatches, "unavailable", (json_int_t)cs.unavailable,
			"served", (json_int_t)ss.served, "served_bytes", (json_int_t)ss.served_bytes,
			"rejected", (json_int_t)ss.rejected, "dropped", (json_int_t)ss.dropped,
			"recycled", (json_int_t)ss.recycled, "connections_open",
			(json_int_t)ss.open, "queued", (json_int_t)ss.queued, "queue_full",
			(json_int_t)ss.queue_full);
	for (; c && remote_node_url(c, count); count++)
		up += remote_node_up(c, count);
	if (obj && (json_object_set_new(obj, "inline_answers",
					json_integer((json_int_t)ss.inline_answers)) < 0 ||
		    json_object_set_new(obj, "not_held", json_integer((json_int_t)ss.not_held)) < 0 ||
		    json_object_set_new(obj, "slow_answers",
					json_integer((json_int_t)cs.slow_answers)) < 0 ||
		    json_object_set_new(obj, "slow_downs", json_integer((json_int_t)cs.slow_downs)) <
			    0 ||
		    json_object_set_new(obj, "slow_receivers",
					json_integer((json_int_t)ss.slow_receivers)) < 0 ||
		    json_object_set_new(obj, "node_count", json_integer(count)) < 0 ||
		    json_object_set_new(obj, "nodes_up", json_integer(up)) < 0 ||
		    json_object_set_new(obj, "nodes", peers_json_value(c, listed_max)) < 0 ||
		    (listed_max < UINT_MAX &&
		     json_object_set_new(obj, "nodes_listed", json_string("not_up")) < 0))) {
		json_decref(obj);
		obj = NULL;
	}
	return obj;
}

void remote_stats_json(const struct remote_client *c, const struct remote_server *s,
		       struct strbuf *out)
{
	strbuf_append_json(out, remote_stats_json_value(c, s), JSON_ENCODE_ANY);
}

static void metric(struct strbuf *out, const char *name, const char *type, const char *help,
		   uint64_t v)
{
	strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type,
		      name, v);
}

/* Prometheus label values escape backslash, quote and newline. */
static void label_value(struct strbuf *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			strbuf_append(out, "\\", 1);
		if (*s == '\n')
			strbuf_puts(out, "\\n");
		else
			strbuf_append(out, s, 1);
	}
}

void remote_metrics(const struct remote_client *c, const struct remote_server *s,
		    struct strbuf *out)
{
	struct remote_client_stats cs;
	struct remote_server_stats ss;

	remote_client_get_stats(c, &cs);
	remote_server_get_stats(s, &ss);
	const struct {
		const char *name, *type, *help;
		uint64_t v;
	} rows[] = {
	    {"coordfs_peer_fetches_total", "counter", "Ranged reads sent to peers.", cs.fetches},
	    {"coordfs_peer_bytes_total", "counter", "Bytes received from peers.", cs.bytes},
	    {"coordfs_peer_errors_total", "counter", "Failed reads from peers.", cs.errors},
	    {"coordfs_peer_skipped_total", "counter",
	     "Reads not sent because the owner was marked down.", cs.skipped},
	    {"coordfs_peer_served_total", "counter", "File requests served to peers.", ss.served},
	    {"coordfs_peer_served_bytes_total", "counter", "Bytes served to peers.",
	     ss.served_bytes},
	    {"coordfs_peer_rejected_total", "counter", "Peer requests answered with a 4xx status.",
	     ss.rejected},
	    {"coordfs_peer_connections_total", "counter", "Connections accepted by the peer server.",
	     ss.connections},
	    {"coordfs_peer_mismatches_total", "counter",
	     "Peer answers about another version of the file (read from SOURCE).", cs.mismatches},
	    {"coordfs_peer_unavailable_total", "counter",
	     "Peer answers 409/503 for one file, or no free connection (read from SOURCE).",
	     cs.unavailable},
	    {"coordfs_peer_slow_answers_total", "counter",
	     "Correct peer answers that took too long (slower than the floor and than SOURCE).",
	     cs.slow_answers},
	    {"coordfs_peer_slow_downs_total", "counter",
	     "Peers marked down for answering slowly (their files read from SOURCE).",
	     cs.slow_downs},
	    {"coordfs_peer_dropped_total", "counter",
	     "Unauthenticated connections dropped (header deadline or cap).", ss.dropped},
	    {"coordfs_peer_recycled_total", "counter",
	     "Idle keep-alive connections closed to make room for new ones.", ss.recycled},
	    {"coordfs_peer_slow_receivers_total", "counter",
	     "Connections closed for not taking a buffered response within 15 s.",
	     ss.slow_receivers},
	    {"coordfs_peer_busy_total", "counter",
	     "Peer requests answered 503: no memory for the response.", ss.busy},
	    {"coordfs_peer_inline_answers_total", "counter",
	     "File requests answered on the server's event loop (held in memory, no worker).",
	     ss.inline_answers},
	    {"coordfs_peer_not_held_total", "counter",
	     "Forwarded requests (handoffs) answered 404: the unit is not held here.",
	     ss.not_held},
	    {"coordfs_peer_queue_full_total", "counter",
	     "Peer requests answered 503 because too many waited for a server worker.",
	     ss.queue_full},
	    {"coordfs_peer_connections_open", "gauge", "Connections open on the peer server now.",
	     ss.open},
	    {"coordfs_peer_queued", "gauge", "Peer requests waiting for a server worker now.",
	     ss.queued},
	    {"coordfs_peer_working", "gauge", "Peer requests a server worker is serving now.",
	     ss.working},
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		metric(out, rows[i].name, rows[i].type, rows[i].help, rows[i].v);
	strbuf_puts(out, "# HELP coordfs_peer_up Whether a peer is usable (1) or in back-off (0).\n"
			 "# TYPE coordfs_peer_up gauge\n");
	for (unsigned k = 0; c && remote_node_url(c, k); k++) {
		strbuf_puts(out, "coordfs_peer_up{url=\"");
		label_value(out, remote_node_url(c, k));
		strbuf_printf(out, "\"} %d\n", remote_node_up(c, k) ? 1 : 0);
	}
}
