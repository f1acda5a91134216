/* SPDX-License-Identifier: MIT */
/*
 * Unit test `remote` (test_remote.h): the event-driven server under 1,000 keep-alive connections beside strangers (threads and memory bounded), and reads blocked on storage holding workers only.
 */
#include "tests/unit/test_remote.h"

/* ---- many connections, blocked reads ------------------------------------ */

#define SCALE_CONNS 1000
#define SCALE_UNAUTH 100
#define SCALE_MAX_THREADS 64		/* issue #20's bound */
#define SCALE_MAX_RSS_KIB (64 * 1024) /* issue #20's bound, 64 MiB */
/* Long enough for 1,000 connects before the first request (valgrind). */
#define SCALE_HEADER_DEADLINE_MS 3000

/* Threads of this process now (/proc/self/task): the server's, the test's. */
unsigned thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	unsigned n = 0;

	ck_assert_ptr_nonnull(d);
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Resident memory of this process, KiB (VmRSS). */
long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) && sscanf(line, "VmRSS: %ld", &kib) != 1)
		;
	fclose(f);
	ck_assert_int_gt(kib, 0);
	return kib;
}

/* The memory bound for 1,000 connections. Under AddressSanitizer or
 * valgrind every byte the server touches has a shadow (and every block
 * redzones), which multiplies what it holds: the bound then grows by the
 * same factor, said on stderr (the plain build checks the real one). */
long scale_rss_bound_kib(void)
{
	bool shadowed = RUNNING_ON_VALGRIND != 0;

#if defined(__SANITIZE_ADDRESS__)
	shadowed = true;
#endif
	if (!shadowed)
		return SCALE_MAX_RSS_KIB;
	fprintf(stderr, "# under a sanitizer or valgrind: memory bound x4 (shadow memory)\n");
	return 4 * SCALE_MAX_RSS_KIB;
}

/* At least need descriptors (root may raise the hard limit too). */
void raise_nofile(rlim_t need)
{
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur >= need)
		return;
	rl.rlim_cur = need;
	if (rl.rlim_max < need)
		rl.rlim_max = need;
	ck_assert_msg(setrlimit(RLIMIT_NOFILE, &rl) == 0,
		      "this test needs %llu descriptors (RLIMIT_NOFILE): %s",
		      (unsigned long long)need, strerror(errno));
}

/* What connection i asks in round r: 4 KiB of big.bin (every 25th across
 * a 1 MiB slice boundary, so that a worker reads the rest mid-body), or
 * 2000 bytes of copy.bin (a slice released after the answer). */
const unsigned char *scale_range(unsigned i, unsigned r, char *target, size_t tcap,
					 char *range, size_t rcap, size_t *len)
{
	uint64_t k = (uint64_t)i * 7919u + (uint64_t)r * 104729u, off;
	const unsigned char *data;

	if (i % 3 == 0) {
		*len = 2000;
		off = k % (200000 - *len);
		data = big + 7 + off; /* copy.bin */
		snprintf(target, tcap, "/v1/files/copy.bin");
	} else {
		*len = 4096;
		off = i % 25 == 1 ? (1u << 20) * (1 + k % 2) - 1000 : k % (BIG_SIZE - *len);
		data = big + off;
		snprintf(target, tcap, "/v1/files/dir/big.bin");
	}
	snprintf(range, rcap, "bytes=%llu-%llu", (unsigned long long)off,
		 (unsigned long long)(off + *len - 1));
	return data;
}

/* Connection i's signed request of round r (client id 1000 + i). */
void scale_send(int fd, unsigned i, unsigned r)
{
	char target[64], range[64], auth[512];
	size_t len;

	scale_range(i, r, target, sizeof(target), range, sizeof(range), &len);
	ck_assert_msg(send_get(fd, target,
			       signed_get("s3cret", target, range, 0, 1000 + i, r + 1, auth,
					  sizeof(auth))) == 0,
		      "connection %u closed before round %u", i, r);
}

/* Its answer: 206 and exactly the bytes asked. */
void scale_check(int fd, unsigned i, unsigned r, struct strbuf *resp)
{
	char target[64], range[64];
	size_t len, blen;
	const unsigned char *want =
	    scale_range(i, r, target, sizeof(target), range, sizeof(range), &len);
	int st = recv_answer(fd, resp);

	ck_assert_msg(st == 206, "connection %u, round %u (%s %s): status %d", i, r, target, range,
		      st);
	const char *body = body_of(resp, &blen);

	ck_assert_uint_eq(blen, len);
	ck_assert_msg(memcmp(body, want, len) == 0, "connection %u, round %u: other bytes", i, r);
}

/* 1,000 peers' keep-alive connections on one server (all connected before
 * the first request, as when a cluster starts), with 100 strangers
 * (silent, or trickling a request line) before and 100 more while all
 * 1,000 requests are in flight: every request is answered byte-exact,
 * no stranger pushes a peer out, and threads and memory stay bounded. */
START_TEST(thousand_keepalive_connections)
{
	static int fds[SCALE_CONNS], strangers[2 * SCALE_UNAUTH];
	unsigned port, threads;
	struct remote_server_stats ss;
	struct strbuf r;

	raise_nofile(2 * (SCALE_CONNS + 2 * SCALE_UNAUTH) + 256);
	struct remote_server *s = start_server("s3cret", &port);
	long rss0 = rss_kib(), rss;

	strbuf_init(&r);
	remote__server_set_header_deadline_ms(s, SCALE_HEADER_DEADLINE_MS);
	for (unsigned i = 0; i < SCALE_UNAUTH; i++) {
		strangers[i] = connect_port(port);
		if (i % 2)
			(void)send(strangers[i], "GET /v1/fi", 10, MSG_NOSIGNAL);
	}
	/* A cluster starting: 1,000 peers connect before any of them sends
	 * its request; none may push another out (the strangers, older, go
	 * first), every request is answered. */
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		fds[i] = connect_port(port);
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		scale_send(fds[i], i, 0);
	for (unsigned i = 1; i < SCALE_UNAUTH; i += 2)
		(void)send(strangers[i], "l", 1, MSG_NOSIGNAL); /* trickle */
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		scale_check(fds[i], i, 0, &r);
	/* All 1,000 at once, while 100 more strangers connect. */
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		scale_send(fds[i], i, 1);
	for (unsigned i = SCALE_UNAUTH; i < 2 * SCALE_UNAUTH; i++)
		strangers[i] = connect_port(port);
	threads = thread_count();
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		scale_check(fds[i], i, 1, &r);
	rss = rss_kib();
	/* served counts when MHD reports completion, just after the reply */
	for (int i = 0; i < 500; i++) {
		remote_server_get_stats(s, &ss);
		if (ss.served >= 2 * SCALE_CONNS)
			break;
		sleep_ms(10);
	}
	ck_assert_msg(threads <= SCALE_MAX_THREADS, "%u threads with %u connections open", threads,
		      SCALE_CONNS);
	ck_assert_msg(rss - rss0 <= scale_rss_bound_kib(),
		      "%ld KiB more memory with %u connections", rss - rss0, SCALE_CONNS);
	ck_assert_uint_eq(ss.served, 2 * SCALE_CONNS);
	ck_assert_uint_ge(ss.open, SCALE_CONNS);
	ck_assert_uint_eq(ss.recycled, 0); /* far below the idle limit */
	ck_assert_uint_eq(ss.queue_full, 0);
	ck_assert_uint_eq(ss.busy, 0);
	ck_assert_uint_eq(ss.rejected, 0);
	/* every stranger goes, over the cap or at the header deadline */
	for (unsigned i = 0; i < 2 * SCALE_UNAUTH; i++)
		ck_assert_msg(closed_within(strangers[i], SCALE_HEADER_DEADLINE_MS + 2000),
			      "stranger %u still connected", i);
	remote_server_get_stats(s, &ss);
	ck_assert_uint_ge(ss.dropped, 2 * SCALE_UNAUTH);
	/* A third round: no peer's connection was closed under it. */
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		scale_send(fds[i], i, 2);
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		scale_check(fds[i], i, 2, &r);
	fprintf(stderr, "# %u connections: %u threads, %ld KiB more resident\n", SCALE_CONNS,
		threads, rss - rss0);
	for (unsigned i = 0; i < SCALE_CONNS; i++)
		close(fds[i]);
	for (unsigned i = 0; i < 2 * SCALE_UNAUTH; i++)
		close(strangers[i]);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

void gate_set(bool open)
{
	pthread_mutex_lock(&stub.lock);
	stub.gate_open = open;
	pthread_cond_broadcast(&stub.gate_cv);
	pthread_mutex_unlock(&stub.lock);
}

/* Wait (5 s at most) until `working` reads wait at the gate and `queued`
 * requests wait for a worker. */
void wait_blocked(struct remote_server *s, unsigned working, unsigned queued)
{
	struct remote_server_stats ss;
	unsigned gated = 0;

	for (int i = 0; i < 500; i++) {
		pthread_mutex_lock(&stub.lock);
		gated = stub.gated;
		pthread_mutex_unlock(&stub.lock);
		remote_server_get_stats(s, &ss);
		if (gated == working && ss.queued == queued && ss.working == working)
			return;
		sleep_ms(10);
	}
	ck_abort_msg("%u reads blocked, %llu working, %llu queued; expected %u and %u", gated,
		     (unsigned long long)ss.working, (unsigned long long)ss.queued, working,
		     queued);
}

void *stopper_main(void *arg)
{
	remote_server_stop(arg);
	return NULL;
}

/* A read blocked on SOURCE holds a worker, never an event loop: with every
 * worker blocked, a new connection is still answered at once (the queue
 * full: 503 + Retry-After); the blocked and queued requests are served
 * once the reads go on. Stopping answers the queued ones at once (503),
 * waits for the running reads, and returns. */
START_TEST(blocked_reads_hold_workers_only)
{
	enum { W = REMOTE_SERVER_WORKERS, Q = 2 };
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct remote_server_stats ss;
	struct strbuf r;
	int fds[W + Q + 1];
	char v[64];
	size_t blen;

	strbuf_init(&r);
	remote__server_set_queue_cap(s, Q);
	/* one at a time: a request waits in the queue until a worker takes it */
	for (int i = 0; i < W + Q; i++) {
		fds[i] = connect_port(port);
		ck_assert_int_eq(send_get(fds[i], "/v1/files/slow.bin", NULL), 0);
		wait_blocked(s, i < W ? i + 1 : W, i < W ? 0 : i + 1 - W);
	}
	fds[W + Q] = connect_port(port);
	int64_t t0 = mono_ms();

	ck_assert_int_eq(send_get(fds[W + Q], "/v1/files/copy.bin", NULL), 0);
	ck_assert_int_eq(recv_answer(fds[W + Q], &r), 503);
	ck_assert_int_lt(mono_ms() - t0, 2000);
	ck_assert_str_eq(header_value(&r, "Retry-After", v, sizeof(v)), "1");
	/* A file held in memory (the stub calls a.txt ready) needs no worker:
	 * the event loop answers it at once, every worker blocked or not. */
	ck_assert_int_eq(send_get(fds[W + Q], "/v1/files/a.txt", NULL), 0);
	ck_assert_int_eq(recv_answer(fds[W + Q], &r), 200);
	ck_assert_int_lt(mono_ms() - t0, 2000);
	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.queue_full, 1);
	ck_assert_uint_eq(ss.busy, 1);
	gate_set(true);
	for (int i = 0; i < W + Q; i++) {
		ck_assert_int_eq(recv_answer(fds[i], &r), 200);
		const char *body = body_of(&r, &blen);

		ck_assert_uint_eq(blen, 3000);
		ck_assert(memcmp(body, big + 11, 3000) == 0);
	}
	/* the connection that was refused stays usable */
	ck_assert_int_eq(send_get(fds[W + Q], "/metrics", NULL), 0);
	ck_assert_int_eq(recv_answer(fds[W + Q], &r), 200);
	ck_assert_ptr_nonnull(strstr(r.buf, "\ncoordfs_peer_queue_full_total 1\n"));

	/* Again, and stop meanwhile. */
	gate_set(false);
	for (int i = 0; i < W + Q; i++) {
		ck_assert_int_eq(send_get(fds[i], "/v1/files/slow.bin", NULL), 0);
		wait_blocked(s, i < W ? i + 1 : W, i < W ? 0 : i + 1 - W);
	}
	pthread_t stopper;

	ck_assert_int_eq(pthread_create(&stopper, NULL, stopper_main, s), 0);
	for (int i = W; i < W + Q; i++)
		ck_assert_int_eq(recv_answer(fds[i], &r), 503);
	for (int i = 0; i < W; i++)
		ck_assert_msg(!closed_within(fds[i], 0), "a running read's connection closed");
	gate_set(true);
	pthread_join(stopper, NULL);
	for (int i = 0; i <= W + Q; i++)
		close(fds[i]);
	strbuf_fini(&r);
}
END_TEST

void remote_scale_tests(TCase *scale)
{
	tcase_add_test(scale, thousand_keepalive_connections);
	tcase_add_test(scale, blocked_reads_hold_workers_only);
}
