/* SPDX-License-Identifier: MIT */
/*
 * Unit test `remote` (test_remote.h): ETags and statuses (If-Match, 409, 503, handoffs), per-file failures, statistics and metrics, back-off and re-probe, concurrent fetches, bounded connections, and a client facing tests/helpers/fake_peer.py in each of its misbehaving modes.
 */
#include "tests/unit/test_remote.h"

START_TEST(etag_and_statuses)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct strbuf r;
	char v[128], want[64], hdr[200];

	strbuf_init(&r);
	stub_etag_of(0, want, sizeof(want));
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", NULL, &r), 200);
	ck_assert_ptr_nonnull(header_value(&r, "ETag", v, sizeof(v)));
	ck_assert_str_eq(v, want);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", "Range: bytes=2-4\r\n", &r), 206);
	ck_assert_str_eq(header_value(&r, "ETag", v, sizeof(v)), want);
	/* If-Match: the same snapshot, any, a list holding it: served. */
	snprintf(hdr, sizeof(hdr), "If-Match: %s\r\n", want);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", hdr, &r), 200);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", "If-Match: *\r\n", &r), 200);
	snprintf(hdr, sizeof(hdr), "If-Match: \"x\", %s\r\n", want);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", hdr, &r), 200);
	/* Another snapshot, or a weak tag: 412, no body of the file. */
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", "If-Match: \"0-d-v9\"\r\n", &r),
			 412);
	ck_assert_ptr_null(memmem(r.buf, r.len, hello, sizeof(hello) - 1));
	snprintf(hdr, sizeof(hdr), "If-Match: W/%s\r\n", want);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", hdr, &r), 412);
	/* A file that fails on this node: 409; no memory now: 503. */
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/changed.bin", NULL, &r), 409);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/nomem.bin", NULL, &r), 503);
	ck_assert_ptr_nonnull(header_value(&r, "Retry-After", v, sizeof(v)));

	/* A forwarded request (a handoff) is answered only for what the node
	 * holds: held() says a.txt's first bytes only. */
	unsigned stub_reads_before = atomic_load(&stub.reads);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt",
				  REMOTE_FORWARDED_HEADER ": held\r\n", &r), 200);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt",
				  REMOTE_FORWARDED_HEADER ": held\r\nRange: bytes=3-4\r\n", &r), 404);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/copy.bin",
				  REMOTE_FORWARDED_HEADER ": held\r\n", &r), 404);
	ck_assert_uint_eq(atomic_load(&stub.reads), stub_reads_before + 1);

	struct remote_server_stats ss;

	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.mismatched, 2);
	ck_assert_uint_eq(ss.unavailable, 1);
	ck_assert_uint_eq(ss.busy, 1);
	ck_assert_uint_eq(ss.not_held, 2);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

/* Answers about one file (another snapshot, a file the owner cannot read,
 * no memory on the owner) fall back without marking the node down. */
START_TEST(verified_fetch_per_file_failures)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct remote_peers *p = peers_for_port(port);
	struct remote_client *c = NULL;
	char et[64], buf[64];
	struct remote_expect e = {.size = sizeof(hello) - 1, .etag = et};

	ck_assert_int_eq(remote_client_create(p, NULL, NULL, &c), 0);
	stub_etag_of(0, et, sizeof(et));
	ck_assert_int_eq(remote_fetch_verified(c, 0, "a.txt", 1, 5, &e, buf), 5);
	ck_assert_mem_eq(buf, hello + 1, 5);
	/* The owner's copy changed (another snapshot): 412. */
	stub.version++;
	ck_assert_int_eq(remote_fetch_verified(c, 0, "a.txt", 1, 5, &e, buf), -ESTALE);
	ck_assert(remote_node_up(c, 0));
	/* Same ETag, but our snapshot is longer: the Content-Range total
	 * tells it is not the same file. */
	stub_etag_of(0, et, sizeof(et));
	e.size = sizeof(hello);
	ck_assert_int_eq(remote_fetch_verified(c, 0, "a.txt", 1, 5, &e, buf), -ESTALE);
	ck_assert(remote_node_up(c, 0));
	/* A whole-file read answered 200 must be the whole snapshot too. */
	ck_assert_int_eq(remote_fetch_verified(c, 0, "a.txt", 0, sizeof(hello) - 1, &e, buf),
			 -ESTALE);
	e.size = sizeof(hello) - 1;
	ck_assert_int_eq(remote_fetch_verified(c, 0, "a.txt", 0, sizeof(hello) - 1, &e, buf),
			 (ssize_t)sizeof(hello) - 1);
	struct remote_expect e2 = {.size = 5000, .etag = et};

	stub_etag_of(stub_id("changed.bin"), et, sizeof(et));
	ck_assert_int_eq(remote_fetch_verified(c, 0, "changed.bin", 0, 100, &e2, buf), -EREMOTEIO);
	ck_assert(remote_node_up(c, 0));
	stub_etag_of(stub_id("nomem.bin"), et, sizeof(et));
	ck_assert_int_eq(remote_fetch_verified(c, 0, "nomem.bin", 0, 100, &e2, buf), -EBUSY);
	ck_assert(remote_node_up(c, 0));

	struct remote_client_stats cs;

	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.mismatches, 3);
	ck_assert_uint_eq(cs.unavailable, 2);
	ck_assert_uint_eq(cs.skipped, 0);
	remote_client_destroy(c);
	remote_peers_destroy(p);
	remote_server_stop(s);
}
END_TEST

START_TEST(metrics_and_stats)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct remote_peers *p = peers_for_port(port);
	struct remote_client *c = NULL;
	struct strbuf r;
	regex_t re;
	char v[128];
	char buf[4096];
	size_t blen;

	ck_assert_int_eq(remote_client_create(p, NULL, NULL, &c), 0);
	stub.cli = c;
	ck_assert_int_eq(remote_fetch(c, 0, "dir/big.bin", 10, 4000, buf), 4000);
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 13, buf), 13);
	/* served counts when MHD reports completion, just after the reply. */
	struct remote_server_stats ss = {0};

	for (int i = 0; i < 200; i++) {
		remote_server_get_stats(s, &ss);
		if (ss.served == 2)
			break;
		sleep_ms(10);
	}
	ck_assert_uint_eq(ss.served, 2);
	ck_assert_uint_eq(ss.served_bytes, 4013);

	strbuf_init(&r);
	ck_assert_int_eq(http_raw(port, "GET", "/metrics", NULL, &r), 200);
	ck_assert_ptr_nonnull(header_value(&r, "Content-Type", v, sizeof(v)));
	ck_assert_msg(strncmp(v, "text/plain", 10) == 0 && strstr(v, "version=0.0.4"),
		      "Content-Type: %s", v);
	ck_assert_int_eq(regcomp(&re,
				 "^coordfs_[a-zA-Z0-9_]+"
				 "(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\""
				 "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\")*\\})?"
				 " -?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$",
				 REG_EXTENDED | REG_NOSUB),
			 0);
	const char *body = body_of(&r, &blen);
	char *text = strndup(body, blen);
	unsigned samples = 0;
	bool saw_served = false, saw_up = false;

	ck_assert_uint_gt(blen, 0);
	ck_assert_int_eq(text[blen - 1], '\n');
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#') {
			ck_assert_msg(strncmp(line, "# HELP coordfs_", 15) == 0 ||
					  strncmp(line, "# TYPE coordfs_", 15) == 0,
				      "bad comment line: %s", line);
			continue;
		}
		ck_assert_msg(regexec(&re, line, 0, NULL, 0) == 0, "bad metric line: '%s'", line);
		samples++;
		if (strcmp(line, "coordfs_peer_served_bytes_total 4013") == 0)
			saw_served = true;
		if (strstr(line, "coordfs_peer_up{url=\"http://127.0.0.1:") && strstr(line, "} 1"))
			saw_up = true;
	}
	ck_assert_uint_ge(samples, 8);
	ck_assert(saw_served);
	ck_assert(saw_up);
	free(text);
	regfree(&re);

	ck_assert_int_eq(http_raw(port, "GET", "/v1/stats", NULL, &r), 200);
	ck_assert_str_eq(header_value(&r, "Content-Type", v, sizeof(v)), "application/json");
	body = body_of(&r, &blen);
	text = strndup(body, blen);
	ck_assert_msg(strstr(text, "\"fetches\": 2, \"bytes\": 4013, \"errors\": 0") != NULL, "%s",
		      text);
	ck_assert_msg(strstr(text, "\"served\": 2, \"served_bytes\": 4013") != NULL, "%s", text);
	snprintf(v, sizeof(v), "\"nodes\": [{\"url\": \"http://127.0.0.1:%u\", \"up\": true}]",
		 port);
	ck_assert_msg(strstr(text, v) != NULL, "%s", text);
	free(text);
	strbuf_fini(&r);
	remote_server_stop(s);
	remote_client_destroy(c);
	remote_peers_destroy(p);
}
END_TEST

START_TEST(peers_json_lists_every_node)
{
	struct remote_peers *p = NULL;
	struct remote_client *c = NULL;
	struct strbuf sb;
	char err[128];

	ck_assert_int_eq(remote_peers_parse("http://a:1,http://b:2/", &p, err, sizeof(err)), 0);
	ck_assert_int_eq(remote_client_create(p, NULL, NULL, &c), 0);
	strbuf_init(&sb);
	remote_stats_json(c, NULL, &sb);
	ck_assert_ptr_nonnull(strstr(sb.buf, "\"nodes\": [{\"url\": \"http://a:1\", \"up\": true}, "
					     "{\"url\": \"http://b:2\", \"up\": true}]}"));
	strbuf_reset(&sb);
	remote_stats_json(NULL, NULL, &sb);
	ck_assert_ptr_nonnull(strstr(sb.buf, "\"nodes\": []}"));
	ck_assert_ptr_nonnull(strstr(sb.buf, "\"fetches\": 0"));
	ck_assert_str_eq(remote_node_url(c, 1), "http://b:2");
	ck_assert_ptr_null(remote_node_url(c, 2));
	strbuf_fini(&sb);
	remote_client_destroy(c);
	remote_peers_destroy(p);
}
END_TEST

START_TEST(backoff_then_reprobe)
{
	struct remote_client_config cfg = {.backoff_min_ms = 300, .backoff_max_ms = 1000};
	struct remote_peers *p;
	struct remote_client *c = NULL;
	unsigned port;
	char buf[16], err[128], hp[64];
	int fd;

	/* A port nobody listens on: bind to find one, then close it. */
	ck_assert_int_eq(remote_listen("127.0.0.1:0", &fd, err, sizeof(err)), 0);
	ck_assert_int_eq(remote_listen_port(fd, &port), 0);
	close(fd);
	p = peers_for_port(port);
	ck_assert_int_eq(remote_client_create(p, NULL, &cfg, &c), 0);
	ck_assert(remote_node_up(c, 0));
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 5, buf), -ECONNREFUSED);
	ck_assert(!remote_node_up(c, 0));
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 300);
	/* In back-off: no request at all. */
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 5, buf), -EHOSTDOWN);
	struct remote_client_stats cs;

	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.fetches, 1);
	ck_assert_uint_eq(cs.skipped, 1);
	/* Expired: one re-probe, which fails and doubles the period. */
	sleep_ms(350);
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 5, buf), -ECONNREFUSED);
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 600);
	sleep_ms(650);
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 5, buf), -ECONNREFUSED);
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 1000); /* capped */
	/* Now the peer comes up; it is used again once the period ends. */
	snprintf(hp, sizeof(hp), "127.0.0.1:%u", port);
	unsigned port2;
	struct remote_server *s = start_server_at(hp, NULL, &port2);

	ck_assert_uint_eq(port2, port);
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 5, buf), -EHOSTDOWN);
	sleep_ms(1050);
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 5, buf), 5);
	ck_assert_mem_eq(buf, hello, 5);
	ck_assert(remote_node_up(c, 0));
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 0);
	/* Bad arguments never mark a node down. */
	ck_assert_int_eq(remote_fetch(c, 0, "../etc/passwd", 0, 5, buf), -EINVAL);
	ck_assert_int_eq(remote_fetch(c, 1, "a.txt", 0, 5, buf), -EINVAL);
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, 0, buf), 0);
	ck_assert(remote_node_up(c, 0));
	/* A 404 is an answer, not a failure of the node. */
	ck_assert_int_eq(remote_fetch(c, 0, "missing", 0, 5, buf), -ENOENT);
	ck_assert(remote_node_up(c, 0));
	remote_server_stop(s);
	remote_client_destroy(c);
	remote_peers_destroy(p);
}
END_TEST

struct worker {
	struct remote_client *c;
	unsigned seed;
	int failures;
};

void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned char *buf = malloc(1u << 20);

	for (int i = 0; i < 40 && buf; i++) {
		w->seed = w->seed * 1103515245u + 12345u;
		uint64_t off = w->seed % (BIG_SIZE - 1);
		size_t len = 1 + (w->seed >> 8) % (1u << 20);

		if (off + len > BIG_SIZE)
			len = BIG_SIZE - off;
		if (remote_fetch(w->c, 0, "dir/big.bin", off, len, buf) != (ssize_t)len ||
		    memcmp(buf, big + off, len) != 0)
			w->failures++;
	}
	free(buf);
	return NULL;
}

START_TEST(concurrent_fetches)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct remote_peers *p = peers_for_port(port);
	struct remote_client *c = NULL;
	pthread_t t[4];
	struct worker w[4];

	ck_assert_int_eq(remote_client_create(p, NULL, NULL, &c), 0);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){.c = c, .seed = (unsigned)i * 7919u + 1};
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(w[i].failures, 0);
	}
	struct remote_client_stats cs;

	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.fetches, 160);
	ck_assert_uint_eq(cs.errors, 0);
	remote_client_destroy(c);
	remote_peers_destroy(p);
	remote_server_stop(s);
}
END_TEST

/* However many threads fetch at once, at most max_handles connections. */
START_TEST(client_connections_bounded)
{
	struct remote_client_config cfg = {.max_handles = 2};
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct remote_peers *p = peers_for_port(port);
	struct remote_client *c = NULL;
	pthread_t t[8];
	struct worker w[8];

	ck_assert_int_eq(remote_client_create(p, NULL, &cfg, &c), 0);
	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){.c = c, .seed = (unsigned)i * 31u + 5};
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(w[i].failures, 0);
	}
	struct remote_server_stats ss;

	remote_server_get_stats(s, &ss);
	ck_assert_uint_le(ss.connections, 2);
	ck_assert_uint_ge(ss.connections, 1);
	remote_client_destroy(c);
	remote_peers_destroy(p);
	remote_server_stop(s);
}
END_TEST

/* ---- against a misbehaving peer ---------------------------------------------- */

const char *const fake_modes[] = {"ok",	 "short",   "wronglen", "shortlen", "500",
					 "hang", "garbage", "norange",	"badrange", "trickle",
					 "headers", "chunked", "headclose", "midstall"};

pid_t spawn_fake(const char *mode, unsigned *port)
{
	const char *script = getenv("COORDFS_FAKE_PEER");
	int pfd[2];
	char line[32] = "";
	size_t n = 0;
	pid_t pid;

	ck_assert_msg(script != NULL, "COORDFS_FAKE_PEER is not set (run through meson test)");
	ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pfd[1], STDOUT_FILENO);
		execl("/usr/bin/python3", "python3", script, mode, "0", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	while (n < sizeof(line) - 1 && !strchr(line, '\n')) {
		struct pollfd pf = {.fd = pfd[0], .events = POLLIN};

		ck_assert_msg(poll(&pf, 1, 10000) == 1, "fake peer (%s) did not start", mode);
		ssize_t r = read(pfd[0], line + n, sizeof(line) - 1 - n);

		ck_assert_msg(r > 0, "fake peer (%s) exited", mode);
		n += (size_t)r;
		line[n] = '\0';
	}
	close(pfd[0]);
	*port = (unsigned)atoi(line);
	ck_assert_uint_gt(*port, 0);
	return pid;
}

/* The end of a test against fake_peer.py. */
static void done_with_fake(struct remote_client *c, struct remote_peers *p, pid_t pid, void *buf)
{
	remote_client_destroy(c);
	remote_peers_destroy(p);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	free(buf);
}

START_TEST(fake_peer_modes)
{
	const char *mode = fake_modes[_i];
	/* 1 s: six of the modes hang until it, twice each */
	struct remote_client_config cfg = {.timeout_ms = 1000, .backoff_min_ms = 100};
	const size_t off = 1000, len = 5000, guard = 64;
	unsigned char *buf = malloc(len + guard);
	struct remote_peers *p;
	struct remote_client *c = NULL;
	unsigned port;
	pid_t pid = spawn_fake(mode, &port);

	p = peers_for_port(port);
	ck_assert_int_eq(remote_client_create(p, NULL, &cfg, &c), 0);
	for (int round = 0; round < 2; round++) {
		memset(buf, 0xA5, len + guard);
		int64_t t0 = mono_ms();
		ssize_t got = remote_fetch(c, 0, "some/file.bin", off + (size_t)round, len, buf);
		int64_t dt = mono_ms() - t0;

		ck_assert_msg(dt < 1000 + 1000, "mode %s took %lld ms", mode, (long long)dt);
		for (size_t i = len; i < len + guard; i++)
			ck_assert_msg(buf[i] == 0xA5, "mode %s wrote past the buffer", mode);
		if (strcmp(mode, "ok") == 0) {
			ck_assert_int_eq(got, (ssize_t)len);
			for (size_t i = 0; i < len; i++)
				ck_assert_uint_eq(buf[i], pattern_byte(off + (size_t)round + i));
			ck_assert(remote_node_up(c, 0));
			/* Checked against the snapshot it names: accepted. */
			struct remote_expect e = {.size = 1u << 20, .etag = "\"100000-0\""};

			memset(buf, 0, len);
			ck_assert_int_eq(remote_fetch_verified(c, 0, "some/file.bin", off, len, &e,
							       buf),
					 (ssize_t)len);
			ck_assert_uint_eq(buf[len - 1], pattern_byte(off + len - 1));
		} else {
			ck_assert_msg(got < 0, "mode %s: fetch returned %zd", mode, got);
			ck_assert(!remote_node_up(c, 0));
			sleep_ms(120); /* let the back-off expire: the next one re-probes */
		}
	}
	done_with_fake(c, p, pid, buf);
}
END_TEST

/* A peer whose copy differs (right length, Content-Range and its own
 * ETag, other bytes): taken blindly without a snapshot, refused with one,
 * before a byte lands in the buffer, and the node stays up. */
START_TEST(fake_peer_flipped_bytes)
{
	const size_t off = 1000, len = 5000, guard = 64;
	unsigned char *buf = malloc(len + guard);
	struct remote_peers *p;
	struct remote_client *c = NULL;
	unsigned port;
	pid_t pid = spawn_fake("flip", &port);
	struct remote_expect e = {.size = 1u << 20, .etag = "\"100000-1\""};

	p = peers_for_port(port);
	ck_assert_int_eq(remote_client_create(p, NULL, NULL, &c), 0);
	ck_assert_int_eq(remote_fetch(c, 0, "some/file.bin", off, len, buf), (ssize_t)len);
	ck_assert_uint_eq(buf[0], pattern_byte(off) ^ 0xff); /* the hazard */
	for (int round = 0; round < 3; round++) {
		memset(buf, 0xA5, len + guard);
		ck_assert_int_eq(remote_fetch_verified(c, 0, "some/file.bin", off, len, &e, buf),
				 -ESTALE);
		for (size_t i = 0; i < len + guard; i++)
			ck_assert_msg(buf[i] == 0xA5, "a byte of another version landed at %zu", i);
		ck_assert(remote_node_up(c, 0));
	}
	/* Same ETag but another size in Content-Range: not the same file. */
	e.etag = "\"100000-0\"";
	e.size = (1u << 20) + 1;
	ck_assert_int_eq(remote_fetch_verified(c, 0, "some/file.bin", off, len, &e, buf), -ESTALE);

	struct remote_client_stats cs;

	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.mismatches, 4);
	ck_assert_uint_eq(cs.skipped, 0);
	done_with_fake(c, p, pid, buf);
}
END_TEST

/* A peer that always answers right, but only after 300 ms: three slow
 * answers in a row mark it down (then reads fail over at once), a fast
 * one between resets the run, an answer no slower than 4 times SOURCE is
 * not slow, and the re-probe of a node still slow doubles its back-off. */
START_TEST(slow_peer_demoted)
{
	struct remote_client_config cfg = {.timeout_ms = 3000, .slow_ms = 100,
					   .backoff_min_ms = 500, .backoff_max_ms = 4000};
	const size_t off = 1000, len = 5000;
	unsigned char *buf = malloc(len);
	struct remote_expect slow_src = {.size = 1u << 20, .etag = "\"100000-0\"",
					 .source_ms = 200};
	struct remote_expect fast_src = slow_src;
	struct remote_client_stats cs;
	struct remote_peers *p;
	struct remote_client *c = NULL;
	unsigned port;

	fast_src.source_ms = 1;
	setenv("FAKE_PEER_DELAY", "0.3", 1);
	pid_t pid = spawn_fake("slow", &port);

	unsetenv("FAKE_PEER_DELAY");
	p = peers_for_port(port);
	ck_assert_int_eq(remote_client_create(p, NULL, &cfg, &c), 0);
	/* Slower than the floor but SOURCE is slow too (4 x 200 ms): never
	 * slow, however many. */
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(remote_fetch_verified(c, 0, "f", off, len, &slow_src, buf),
				 (ssize_t)len);
	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.slow_answers, 0);
	ck_assert(remote_node_up(c, 0));
	/* Two slow, one that is not, two slow: the run was reset, still up. */
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(remote_fetch_verified(c, 0, "f", off, len,
						       i == 2 ? &slow_src : &fast_src, buf),
				 (ssize_t)len);
	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.slow_answers, 4);
	ck_assert_uint_eq(cs.slow_downs, 0);
	ck_assert(remote_node_up(c, 0));
	/* The third in a row: its bytes are right and returned, and the node
	 * goes down for slowness. */
	ck_assert_int_eq(remote_fetch_verified(c, 0, "f", off, len, &fast_src, buf),
			 (ssize_t)len);
	ck_assert_uint_eq(buf[0], pattern_byte(off));
	ck_assert(!remote_node_up(c, 0));
	ck_assert(remote_node_slow(c, 0));
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 500);
	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.slow_answers, 5);
	ck_assert_uint_eq(cs.slow_downs, 1);
	/* Readers no longer wait on it. */
	int64_t t0 = mono_ms();

	ck_assert_int_eq(remote_fetch_verified(c, 0, "f", off, len, &fast_src, buf), -EHOSTDOWN);
	ck_assert_int_lt(mono_ms() - t0, 50);
	/* The stats say so. */
	json_t *st = remote_stats_json_value(c, NULL);

	ck_assert_int_eq(json_integer_value(json_object_get(st, "slow_downs")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(st, "slow_answers")), 5);
	ck_assert(json_is_true(
		json_object_get(json_array_get(json_object_get(st, "nodes"), 0), "slow")));
	json_decref(st);
	/* The re-probe is slow too: down again, for twice as long. */
	sleep_ms(550);
	ck_assert_int_eq(remote_fetch_verified(c, 0, "f", off, len, &fast_src, buf),
			 (ssize_t)len);
	ck_assert(!remote_node_up(c, 0));
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 1000);
	/* A re-probe that is quick (SOURCE as slow as it) brings it back. */
	sleep_ms(1050);
	ck_assert_int_eq(remote_fetch_verified(c, 0, "f", off, len, &slow_src, buf),
			 (ssize_t)len);
	ck_assert(remote_node_up(c, 0));
	ck_assert(!remote_node_slow(c, 0));
	/* Slow answers about one file (another snapshot, -ESTALE) cost a
	 * reader as much as slow bytes: three in a row, and it is down. */
	struct remote_expect other = fast_src;

	other.etag = "\"100000-1\"";
	for (int i = 0; i < 3; i++) {
		ck_assert(remote_node_up(c, 0));
		ck_assert_int_eq(remote_fetch_verified(c, 0, "f", off, len, &other, buf), -ESTALE);
	}
	ck_assert(remote_node_slow(c, 0));
	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.slow_downs, 3);
	done_with_fake(c, p, pid, buf);
}
END_TEST

struct probe_arg {
	struct remote_client *c;
	ssize_t rc;
};

void *probe_main(void *arg)
{
	struct probe_arg *pa = arg;
	char buf[100];

	pa->rc = remote_fetch(pa->c, 0, "x", 0, sizeof(buf), buf);
	return NULL;
}

START_TEST(single_probe_at_a_time)
{
	struct remote_client_config cfg = {.timeout_ms = 1000, .backoff_min_ms = 100};
	struct remote_peers *p;
	struct remote_client *c = NULL;
	struct probe_arg pa;
	pthread_t t;
	unsigned port;
	char buf[100];
	pid_t pid = spawn_fake("hang", &port);

	p = peers_for_port(port);
	ck_assert_int_eq(remote_client_create(p, NULL, &cfg, &c), 0);
	int64_t t0 = mono_ms();

	ck_assert_int_eq(remote_fetch(c, 0, "x", 0, sizeof(buf), buf), -ETIMEDOUT);
	ck_assert_int_ge(mono_ms() - t0, 900);
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 100);
	sleep_ms(150);
	/* The period is over: one thread probes (and hangs), the others
	 * keep getting -EHOSTDOWN at once instead of piling up behind it. */
	pa.c = c;
	ck_assert_int_eq(pthread_create(&t, NULL, probe_main, &pa), 0);
	sleep_ms(300);
	t0 = mono_ms();
	ck_assert_int_eq(remote_fetch(c, 0, "x", 0, sizeof(buf), buf), -EHOSTDOWN);
	ck_assert_int_lt(mono_ms() - t0, 100);
	pthread_join(t, NULL);
	ck_assert_int_eq(pa.rc, -ETIMEDOUT);
	ck_assert_uint_eq(remote__node_backoff_ms(c, 0), 200);
	remote_client_destroy(c);
	remote_peers_destroy(p);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}
END_TEST

START_TEST(server_start_failure_closes_socket)
{
	static const struct remote_server_ops no_read = {.resolve = stub_resolve};
	char err[256] = "";
	int fd;

	ck_assert_int_eq(remote_listen("127.0.0.1:0", &fd, err, sizeof(err)), 0);
	ck_assert_ptr_null(remote_server_start(fd, NULL, &no_read, NULL, err, sizeof(err)));
	ck_assert_str_ne(err, "");
	ck_assert_int_eq(fcntl(fd, F_GETFD), -1);
	ck_assert_int_eq(errno, EBADF);
}
END_TEST

void remote_client_tests(TCase *core, TCase *net)
{
	tcase_add_test(net, etag_and_statuses);
	tcase_add_test(net, verified_fetch_per_file_failures);
	tcase_add_test(net, metrics_and_stats);
	tcase_add_test(core, peers_json_lists_every_node);
	tcase_add_test(net, backoff_then_reprobe);
	tcase_add_test(net, concurrent_fetches);
	tcase_add_test(net, client_connections_bounded);
	tcase_add_loop_test(net, fake_peer_modes, 0,
			    (int)(sizeof(fake_modes) / sizeof(fake_modes[0])));
	tcase_add_test(net, fake_peer_flipped_bytes);
	tcase_add_test(net, single_probe_at_a_time);
	tcase_add_test(net, slow_peer_demoted);
	tcase_add_test(net, server_start_failure_closes_socket);
}
