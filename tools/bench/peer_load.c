/* SPDX-License-Identifier: MIT */
/*
 * Closed-loop HTTP/1.1 load against one peer server, for
 * tools/bench/peer_server_scale: CONNS keep-alive connections, each with
 * one request in flight at a time (GET /v1/files/PATH, the paths of
 * PATHLIST in turn), for SECONDS. One thread and one epoll set, so that
 * 1,000 connections cost the client no more per request than 10 do.
 *
 *   peer_load HOST PORT CONNS SECONDS PATHLIST
 *
 * Prints one JSON line: requests answered 200 within the window, errors
 * (other statuses, closed or refused connections: each reconnects after
 * 50 ms), requests/s, latency p50/p99 in ms, the connections open at the
 * end and the most open at once. Answers must carry Content-Length (the
 * peer server's always do); the body is counted, not checked.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct conn {
	int fd;
	bool open;
	char req[4608];
	size_t req_len, req_sent;
	char head[8192];
	size_t head_len;
	long long body_left; /* -1 while reading the head */
	int status;
	int64_t sent_ns, retry_ns;
};

static struct sockaddr_in addr;
static char **paths;
static size_t npaths, next_path;
static int ep;
static unsigned open_now, open_max, closed_now; /* closed: waiting to reconnect */
static uint64_t errors, answered, bytes;
static uint32_t *lat_us;
static size_t nlat, lat_cap;
static bool counting;

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void next_request(struct conn *c)
{
	c->req_len = (size_t)snprintf(c->req, sizeof(c->req),
				      "GET /v1/files/%s HTTP/1.1\r\nHost: peer\r\n\r\n",
				      paths[next_path++ % npaths]);
	c->req_sent = 0;
	c->head_len = 0;
	c->body_left = -1;
	c->sent_ns = now_ns();
}

static void conn_open(struct conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		perror("socket");
		exit(1);
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 && errno != EINPROGRESS) {
		close(c->fd);
		c->fd = -1;
		errors += counting;
		closed_now++;
		c->retry_ns = now_ns() + 50000000;
		return;
	}
	c->open = true;
	if (++open_now > open_max)
		open_max = open_now;
	next_request(c);
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static void conn_fail(struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->open = false;
	open_now--;
	closed_now++;
	errors += counting;
	c->retry_ns = now_ns() + 50000000;
}

static void record(struct conn *c)
{
	if (!counting)
		return;
	if (c->status != 200) {
		errors++;
		return;
	}
	answered++;
	if (nlat == lat_cap) {
		lat_cap = lat_cap ? 2 * lat_cap : 1 << 16;
		lat_us = realloc(lat_us, lat_cap * sizeof(*lat_us));
		if (!lat_us) {
			perror("realloc");
			exit(1);
		}
	}
	lat_us[nlat++] = (uint32_t)((now_ns() - c->sent_ns) / 1000);
}

/* Parse what arrived; false when the connection must be dropped. */
static bool on_data(struct conn *c, const char *p, size_t n)
{
	while (n > 0) {
		if (c->body_left < 0) {
			size_t take = sizeof(c->head) - 1 - c->head_len;

			if (take == 0)
				return false;
			if (take > n)
				take = n;
			memcpy(c->head + c->head_len, p, take);
			c->head_len += take;
			c->head[c->head_len] = '\0';
			char *end = strstr(c->head, "\r\n\r\n");

			if (!end) {
				p += take;
				n -= take;
				continue;
			}
			size_t used = (size_t)(end + 4 - c->head) - (c->head_len - take);
			char *cl = strcasestr(c->head, "\r\nContent-Length:");

			if (!cl || cl > end)
				return false;
			c->status = atoi(c->head + 9);
			c->body_left = atoll(cl + 17);
			p += used;
			n -= used;
		}
		size_t b = n < (size_t)c->body_left ? n : (size_t)c->body_left;

		c->body_left -= (long long)b;
		bytes += counting ? b : 0;
		p += b;
		n -= b;
		if (c->body_left == 0) {
			record(c);
			if (n > 0)
				return false; /* one request in flight: nothing may follow */
			next_request(c);
			struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};

			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
		}
	}
	return true;
}

static void on_event(struct conn *c, uint32_t events)
{
	if (events & EPOLLOUT && c->req_sent < c->req_len) {
		ssize_t w =
		    send(c->fd, c->req + c->req_sent, c->req_len - c->req_sent, MSG_NOSIGNAL);

		if (w < 0 && errno != EAGAIN) {
			conn_fail(c);
			return;
		}
		if (w > 0)
			c->req_sent += (size_t)w;
		if (c->req_sent == c->req_len) {
			struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};

			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
		}
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		char buf[65536];
		ssize_t r = recv(c->fd, buf, sizeof(buf), 0);

		if (r == 0 || (r < 0 && errno != EAGAIN) || (r > 0 && !on_data(c, buf, (size_t)r)))
			conn_fail(c);
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: peer_load HOST PORT CONNS SECONDS PATHLIST\n");
		return 2;
	}
	unsigned nconns = (unsigned)atoi(argv[3]);
	double secs = atof(argv[4]);
	FILE *f = fopen(argv[5], "r");
	char line[4096];
	struct rlimit rl;

	if (!f || nconns == 0 || secs <= 0) {
		fprintf(stderr, "peer_load: bad arguments or %s: %s\n", argv[5], strerror(errno));
		return 2;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!line[0])
			continue;
		paths = realloc(paths, (npaths + 1) * sizeof(*paths));
		paths[npaths++] = strdup(line);
	}
	fclose(f);
	if (npaths == 0) {
		fprintf(stderr, "peer_load: no paths in %s\n", argv[5]);
		return 2;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < nconns + 64) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
		fprintf(stderr, "peer_load: HOST must be an IPv4 address\n");
		return 2;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct conn *conns = calloc(nconns, sizeof(*conns));
	struct epoll_event evs[256];

	for (unsigned i = 0; i < nconns; i++)
		conn_open(&conns[i]);
	closed_now = 0; /* those refused at once are retried below */
	for (unsigned i = 0; i < nconns; i++)
		closed_now += !conns[i].open;
	/* Half a second of warm-up (every connection answered once), then
	 * the measured window. */
	int64_t t_start = now_ns() + 500000000, t_end = t_start + (int64_t)(secs * 1e9),
		last_scan = 0;

	for (;;) {
		int64_t t = now_ns();

		if (!counting && t >= t_start)
			counting = true;
		if (t >= t_end)
			break;
		int n = epoll_wait(ep, evs, 256, 20);

		for (int i = 0; i < n; i++)
			on_event(evs[i].data.ptr, evs[i].events);
		/* reconnections: a scan every 10 ms at most (O(CONNS) each) */
		if (!closed_now || t < last_scan + 10000000)
			continue;
		last_scan = t;
		for (unsigned i = 0; closed_now && i < nconns; i++) {
			if (!conns[i].open && conns[i].retry_ns <= t) {
				closed_now--;
				conn_open(&conns[i]);
			}
		}
	}
	double window = (double)(t_end - t_start) / 1e9;

	qsort(lat_us, nlat, sizeof(*lat_us), cmp_u32);
	printf("{\"conns\": %u, \"requests\": %llu, \"errors\": %llu, \"seconds\": %.3f, "
	       "\"rps\": %.1f, \"mb_per_s\": %.2f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
	       "\"open_end\": %u, \"open_max\": %u}\n",
	       nconns, (unsigned long long)answered, (unsigned long long)errors, window,
	       (double)answered / window, (double)bytes / window / 1e6,
	       nlat ? lat_us[nlat / 2] / 1000.0 : 0.0,
	       nlat ? lat_us[(size_t)((double)nlat * 0.99)] / 1000.0 : 0.0, open_now, open_max);
	return 0;
}
