/* SPDX-License-Identifier: MIT */
/*
 * Unit test `remote` (test_remote.h): the server and client over real HTTP on loopback: full and ranged reads, raw statuses, signed and Bearer authentication, traversal attempts, the connection policy (caps, header deadline, idle recycling, floods).
 */
#include "tests/unit/test_remote.h"

/* ---- server and client ------------------------------------------------------- */

START_TEST(fetch_full_and_ranged)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct remote_peers *p = peers_for_port(port);
	struct remote_client *c = NULL;
	unsigned char *buf = malloc(BIG_SIZE);

	ck_assert_int_eq(remote_client_create(p, NULL, NULL, &c), 0);
	stub.cli = c;
	/* Whole small file. */
	ck_assert_int_eq(remote_fetch(c, 0, "a.txt", 0, sizeof(hello) - 1, buf),
			 (ssize_t)sizeof(hello) - 1);
	ck_assert_mem_eq(buf, hello, sizeof(hello) - 1);
	/* Whole big file: the server streams it from 1 MiB slices. */
	memset(buf, 0, BIG_SIZE);
	ck_assert_int_eq(remote_fetch(c, 0, "dir/big.bin", 0, BIG_SIZE, buf), (ssize_t)BIG_SIZE);
	ck_assert_mem_eq(buf, big, BIG_SIZE);
	/* Ranges: inside a slice, across slice boundaries, the last byte. */
	static const struct {
		uint64_t off;
		size_t len;
	} r[] = {{1, 1},	   {4095, 4097},      {(1u << 20) - 3, 7},
		 {1000, 2u << 20}, {BIG_SIZE - 1, 1}, {123457, 65536}};
	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		memset(buf, 0, r[i].len);
		ck_assert_int_eq(remote_fetch(c, 0, "dir/big.bin", r[i].off, r[i].len, buf),
				 (ssize_t)r[i].len);
		ck_assert_mem_eq(buf, big + r[i].off, r[i].len);
	}
	/* Those 8 requests were for files the stub calls ready: answered on
	 * the event loop (big.bin's later slices by a worker), bytes right. */
	struct remote_server_stats ss;

	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.inline_answers, 8);
	/* Slices that must be released, an encoded name. */
	ck_assert_int_eq(remote_fetch(c, 0, "copy.bin", 3, 199990, buf), 199990);
	ck_assert_mem_eq(buf, big + 7 + 3, 199990);
	ck_assert_int_eq(remote_fetch(c, 0, "dir/sp ace+%.bin", 10, 990, buf), 990);
	ck_assert_mem_eq(buf, big + 5 + 10, 990);
	/* Beyond the end: the client asked for bytes the file lacks. */
	ck_assert_int_lt(remote_fetch(c, 0, "a.txt", 0, 100, buf), 0);
	ck_assert(!remote_node_up(c, 0));

	/* Keep-alive: one thread, one connection for all of the above. */
	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.connections, 1);

	struct remote_client_stats cs;

	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.fetches, 2 + 6 + 2 + 1);
	ck_assert_uint_eq(cs.errors, 1);
	remote_server_stop(s);
	/* Every copied slice was released, exactly once. */
	ck_assert_uint_gt(atomic_load(&stub.copies), 0);
	ck_assert_uint_eq(atomic_load(&stub.releases), atomic_load(&stub.copies));
	remote_client_destroy(c);
	remote_peers_destroy(p);
	free(buf);
}
END_TEST

START_TEST(raw_ranges_and_statuses)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct strbuf r;
	char v[128];
	size_t blen;
	const char *b;

	strbuf_init(&r);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", NULL, &r), 200);
	b = body_of(&r, &blen);
	ck_assert_uint_eq(blen, sizeof(hello) - 1);
	ck_assert_mem_eq(b, hello, blen);

	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", "Range: bytes=-5\r\n", &r), 206);
	ck_assert_ptr_nonnull(header_value(&r, "Content-Range", v, sizeof(v)));
	ck_assert_str_eq(v, "bytes 8-12/13");
	b = body_of(&r, &blen);
	ck_assert_uint_eq(blen, 5);
	ck_assert_mem_eq(b, hello + 8, 5);

	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", "Range: bytes=7-\r\n", &r), 206);
	ck_assert_str_eq(header_value(&r, "Content-Range", v, sizeof(v)), "bytes 7-12/13");
	b = body_of(&r, &blen);
	ck_assert_uint_eq(blen, 6);
	ck_assert_mem_eq(b, hello + 7, 6);

	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", "Range: bytes=13-\r\n", &r), 416);
	ck_assert_str_eq(header_value(&r, "Content-Range", v, sizeof(v)), "bytes */13");
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/empty", NULL, &r), 200);
	ck_assert_str_eq(header_value(&r, "Content-Length", v, sizeof(v)), "0");
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/nope", NULL, &r), 404);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/dir", NULL, &r), 404);
	ck_assert_int_eq(http_raw(port, "GET", "/v2/files/a.txt", NULL, &r), 404);
	ck_assert_int_eq(http_raw(port, "GET", "/", NULL, &r), 404);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files", NULL, &r), 404);
	ck_assert_int_eq(http_raw(port, "POST", "/v1/files/a.txt", "Content-Length: 3\r\n", &r),
			 405);
	ck_assert_int_eq(http_raw(port, "DELETE", "/v1/files/a.txt", NULL, &r), 405);
	ck_assert_int_eq(http_raw(port, "HEAD", "/v1/files/a.txt", NULL, &r), 405);

	struct remote_server_stats ss;

	remote_server_get_stats(s, &ss);
	ck_assert_uint_ge(ss.rejected, 9);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

/* "Authorization: <signed value>\r\n" (plus "Range: <range>\r\n" when range
 * is given) for a GET of target, signed with secret at now + dt seconds as
 * client id, request n. */
const char *signed_get(const char *secret, const char *target, const char *range,
			      int64_t dt, uint64_t id, uint64_t n, char *out, size_t outlen)
{
	char v[REMOTE_AUTH_HEADER_MAX];
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	ck_assert_int_eq(remote_auth_sign(secret, strlen(secret), "GET", target, range,
					  now.tv_sec + dt, id, n, v, sizeof(v)), 0);
	snprintf(out, outlen, "Authorization: %s\r\n%s%s%s", v, range ? "Range: " : "",
		 range ? range : "", range ? "\r\n" : "");
	return out;
}

/* Signed requests: the secret never travels; a request is served once,
 * within the clock window, for the target and range it was signed for. */
START_TEST(auth_signed)
{
	unsigned port;
	struct remote_server *s = start_server("s3cret", &port);
	struct strbuf r;
	char v[128], h[512], h2[512];
	const char *a = "/v1/files/a.txt";

	strbuf_init(&r);
	ck_assert_int_eq(http_raw(port, "GET", a, NULL, &r), 401);
	ck_assert_ptr_nonnull(header_value(&r, "WWW-Authenticate", v, sizeof(v)));
	ck_assert_msg(strncmp(v, REMOTE_AUTH_SCHEME, strlen(REMOTE_AUTH_SCHEME)) == 0,
		      "WWW-Authenticate: %s", v);
	/* the secret itself is no longer taken */
	ck_assert_int_eq(http_raw(port, "GET", a, "Authorization: Bearer s3cret\r\n", &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("s3cret", a, NULL, 0, 1, 1, h,
							      sizeof(h)), &r), 200);
	ck_assert(strstr(r.buf, "hello") != NULL);
	/* the same request again: a replay */
	ck_assert_int_eq(http_raw(port, "GET", a, h, &r), 401);
	/* out of order within the window is fine, each once */
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("s3cret", a, NULL, 0, 1, 9, h,
							      sizeof(h)), &r), 200);
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("s3cret", a, NULL, 0, 1, 5, h2,
							      sizeof(h2)), &r), 200);
	ck_assert_int_eq(http_raw(port, "GET", a, h, &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", a, h2, &r), 401);
	/* a signature is for its target, range, secret and time */
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/dir/b.txt",
				  signed_get("s3cret", a, NULL, 0, 1, 20, h, sizeof(h)), &r), 401);
	signed_get("s3cret", a, "bytes=0-1", 0, 1, 21, h, sizeof(h));
	*strstr(h, "bytes=0-1") = '\0';
	strcat(h, "bytes=0-3\r\n");
	ck_assert_int_eq(http_raw(port, "GET", a, h, &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("s3cret", a, "bytes=0-1", 0, 1, 22, h,
							      sizeof(h)), &r), 206);
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("wrong!", a, NULL, 0, 1, 23, h,
							      sizeof(h)), &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("s3cret", a, NULL,
							      -REMOTE_AUTH_WINDOW_S - 2, 2, 1, h,
							      sizeof(h)), &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("s3cret", a, NULL,
							      REMOTE_AUTH_WINDOW_S + 2, 2, 2, h,
							      sizeof(h)), &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", a, signed_get("s3cret", a, NULL,
							      -REMOTE_AUTH_WINDOW_S + 5, 2, 3, h,
							      sizeof(h)), &r), 200);
	/* a tampered signature, and the scheme in another case */
	signed_get("s3cret", a, NULL, 0, 3, 1, h, sizeof(h));
	char *sig = strstr(h, "sig=") + 4, was = sig[0];
	sig[0] = was == '0' ? '1' : '0';
	ck_assert_int_eq(http_raw(port, "GET", a, h, &r), 401);
	sig[0] = was;
	memcpy(h + strlen("Authorization: "), "coordfs-hmac-sha256", strlen(REMOTE_AUTH_SCHEME));
	ck_assert_int_eq(http_raw(port, "GET", a, h, &r), 200);
	/* Every route is protected, the unknown ones too. */
	ck_assert_int_eq(http_raw(port, "GET", "/metrics", NULL, &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/stats", NULL, &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", "/nope", NULL, &r), 401);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/stats",
				  signed_get("s3cret", "/v1/stats", NULL, 0, 3, 2, h, sizeof(h)), &r),
			 200);
	/* Only the 6 signed file requests that passed were resolved. */
	ck_assert_uint_eq(stub.nseen, 6);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

/* The Authorization value of a request built by signed_get, into v. */
static const char *auth_value(const char *req, char *v, size_t cap)
{
	const char *p = req + strlen("Authorization: ");
	size_t n = strcspn(p, "\r");

	ck_assert_uint_lt(n, cap);
	memcpy(v, p, n);
	v[n] = '\0';
	return v;
}

/* Answers to signed requests carry a MAC over what they say and their
 * body that only the secret makes: the requester recomputes it, and one
 * flipped byte, another offset, another request's signature or another
 * secret gives another; a Bearer request has no signature to key one. */
START_TEST(auth_signed_replies)
{
	unsigned port;
	struct remote_server *s = start_server("s3cret", &port);
	struct strbuf r;
	char h[512], h2[512], av[REMOTE_AUTH_HEADER_MAX], av2[REMOTE_AUTH_HEADER_MAX], mac[64];
	char et[REMOTE_MAX_ETAG + 1] = "", want[REMOTE_REPLY_MAC_HEX + 1], other[sizeof(want)];
	const char *a = "/v1/files/a.txt", *b;
	size_t blen;

	strbuf_init(&r);
	signed_get("s3cret", a, "bytes=7-12", 0, 5, 1, h, sizeof(h));
	ck_assert_int_eq(http_raw(port, "GET", a, h, &r), 206);
	ck_assert_ptr_nonnull(header_value(&r, REMOTE_REPLY_MAC_HEADER, mac, sizeof(mac)));
	if (!header_value(&r, "ETag", et, sizeof(et)))
		et[0] = '\0';
	b = body_of(&r, &blen);
	ck_assert_uint_eq(blen, 6);
	auth_value(h, av, sizeof(av));
	ck_assert_int_eq(remote_auth_reply_mac("s3cret", 6, av, 206, et, 7, 6, 13, b, blen, want),
			 0);
	ck_assert_str_eq(mac, want);
	char flipped[6];
	memcpy(flipped, b, 6);
	flipped[3] ^= 1;
	ck_assert_int_eq(
	    remote_auth_reply_mac("s3cret", 6, av, 206, et, 7, 6, 13, flipped, 6, other), 0);
	ck_assert_str_ne(other, want);
	ck_assert_int_eq(remote_auth_reply_mac("s3cret", 6, av, 206, et, 6, 6, 13, b, 6, other), 0);
	ck_assert_str_ne(other, want);
	ck_assert_int_eq(remote_auth_reply_mac("wrong!", 6, av, 206, et, 7, 6, 13, b, 6, other), 0);
	ck_assert_str_ne(other, want);
	auth_value(signed_get("s3cret", a, "bytes=7-12", 0, 5, 2, h2, sizeof(h2)), av2,
		   sizeof(av2));
	ck_assert_int_eq(remote_auth_reply_mac("s3cret", 6, av2, 206, et, 7, 6, 13, b, 6, other),
			 0);
	ck_assert_str_ne(other, want);
	ck_assert_int_eq(remote_auth_reply_mac("s3cret", 6, "Bearer s3cret", 206, et, 7, 6, 13, b,
					       6, other),
			 -EINVAL);
	/* a whole file (200) is signed too */
	signed_get("s3cret", a, NULL, 0, 5, 3, h, sizeof(h));
	ck_assert_int_eq(http_raw(port, "GET", a, h, &r), 200);
	ck_assert_ptr_nonnull(header_value(&r, REMOTE_REPLY_MAC_HEADER, mac, sizeof(mac)));
	b = body_of(&r, &blen);
	ck_assert_int_eq(remote_auth_reply_mac("s3cret", 6, auth_value(h, av, sizeof(av)), 200, et,
					       0, 13, 13, b, blen, want),
			 0);
	ck_assert_str_eq(mac, want);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

/* --accept-bearer: the old "Bearer SECRET" too, for one release. */
START_TEST(auth_bearer)
{
	unsigned port;
	struct remote_server *s = start_server("s3cret", &port);
	struct strbuf r;

	remote_server_accept_bearer(s, true);
	strbuf_init(&r);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/a.txt", NULL, &r), 401);
	static const char *wrong[] = {
	    "Authorization: Bearer s3cre\r\n",	"Authorization: Bearer s3cretX\r\n",
	    "Authorization: Bearer S3cret\r\n", "Authorization: Basic czNjcmV0\r\n",
	    "Authorization: s3cret\r\n",	"Authorization:\r\n"};
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++)
		ck_assert_msg(http_raw(port, "GET", "/v1/files/a.txt", wrong[i], &r) == 401,
			      "accepted %s", wrong[i]);
	ck_assert_int_eq(
	    http_raw(port, "GET", "/v1/files/a.txt", "Authorization: Bearer s3cret\r\n", &r), 200);
	/* The scheme is case-insensitive (RFC 9110), the secret is not. */
	ck_assert_int_eq(
	    http_raw(port, "GET", "/v1/files/a.txt", "authorization: bearer s3cret\r\n", &r), 200);
	ck_assert_int_eq(
	    http_raw(port, "GET", "/v1/files/a.txt", "Authorization: BEARER   s3cret\r\n", &r),
	    200);
	ck_assert_int_eq(
	    http_raw(port, "GET", "/v1/files/a.txt", "Authorization: Bearers3cret\r\n", &r), 401);
	ck_assert_int_eq(
	    http_raw(port, "GET", "/v1/files/a.txt", "Authorization: bearer S3CRET\r\n", &r), 401);
	/* Nothing was resolved for the refused requests. */
	ck_assert_uint_eq(stub.nseen, 3);

	struct remote_peers *p = peers_for_port(port);
	struct remote_client *good = NULL, *bad = NULL, *none = NULL;
	char buf[16];

	ck_assert_int_eq(remote_client_create(p, "s3cret", NULL, &good), 0);
	ck_assert_int_eq(remote_client_create(p, "wrong!", NULL, &bad), 0);
	ck_assert_int_eq(remote_client_create(p, NULL, NULL, &none), 0);
	ck_assert_int_eq(remote_fetch(good, 0, "a.txt", 0, 5, buf), 5);
	ck_assert_mem_eq(buf, hello, 5);
	ck_assert_int_eq(remote_fetch(bad, 0, "a.txt", 0, 5, buf), -EACCES);
	ck_assert(!remote_node_up(bad, 0));
	ck_assert_int_eq(remote_fetch(bad, 0, "a.txt", 0, 5, buf), -EHOSTDOWN);
	ck_assert_int_eq(remote_fetch(none, 0, "a.txt", 0, 5, buf), -EACCES);
	ck_assert(remote_node_up(good, 0));
	remote_client_destroy(good);
	remote_client_destroy(bad);
	remote_client_destroy(none);
	remote_peers_destroy(p);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

START_TEST(traversal_refused)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct strbuf r, longurl;
	static const char *targets[] = {
	    "/v1/files/../etc/passwd",
	    "/v1/files/../../../../etc/passwd",
	    "/v1/files/%2e%2e%2fetc%2fpasswd",
	    "/v1/files/%2E%2E/%2E%2E/etc/passwd",
	    "/v1/files/dir/%2e%2e/%2e%2e/etc/passwd",
	    "/v1/files/dir/../../etc/passwd",
	    "/v1/files//etc/passwd",
	    "/v1/files/%2fetc%2fpasswd",
	    "/v1/files/a.txt%00.jpg",
	    "/v1/files/%00",
	    "/v1/files/dir/./big.bin",
	    "/v1/files/dir//big.bin",
	    "/v1/files/dir/",
	    "/v1/files/",
	    "/v1/files/%",
	    "/v1/files/%zz",
	    "/v1/files/a%0d%0aX-Injected:%201",
	    "/v1/files/..",
	    "/v1/files/%2e%2e",
	    "/v1/files/.%2e/.%2e/etc/passwd",
	    "/../../etc/passwd",
	    "/etc/passwd",
	    "../v1/files/a.txt",
	};

	strbuf_init(&r);
	for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
		int st = http_raw(port, "GET", targets[i], NULL, &r);

		ck_assert_msg(st >= 400 && st < 500, "%s answered %d", targets[i], st);
	}
	/* Overlong: a long URL, and one overlong component. */
	strbuf_init(&longurl);
	strbuf_puts(&longurl, "/v1/files/");
	for (int i = 0; i < 20000; i++)
		strbuf_puts(&longurl, "a");
	int st = http_raw(port, "GET", longurl.buf, NULL, &r);

	ck_assert_msg(st >= 400 && st < 500, "20000-byte URL answered %d", st);
	strbuf_reset(&longurl);
	strbuf_puts(&longurl, "/v1/files/dir/");
	for (int i = 0; i < 300; i++)
		strbuf_puts(&longurl, "%41");
	st = http_raw(port, "GET", longurl.buf, NULL, &r);
	ck_assert_msg(st >= 400 && st < 500, "300-byte component answered %d", st);
	strbuf_reset(&longurl);
	strbuf_puts(&longurl, "/v1/files/");
	for (int i = 0; i < 2100; i++)
		strbuf_puts(&longurl, "ab/");
	strbuf_puts(&longurl, "c");
	st = http_raw(port, "GET", longurl.buf, NULL, &r);
	ck_assert_msg(st >= 400 && st < 500, "6 KiB path answered %d", st);
	strbuf_fini(&longurl);

	/* What resolve received stayed inside the dataset. */
	for (unsigned i = 0; i < stub.nseen; i++)
		ck_assert_msg(path_is_contained(stub.seen[i]), "resolve saw '%s'", stub.seen[i]);
	/* The server still serves. */
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/dir/big.bin", "Range: bytes=0-9\r\n", &r),
			 206);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

int connect_port(unsigned port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Whether the server closed fd within ms (poll, then recv 0 or error). */
bool closed_within(int fd, int ms)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	char c;

	if (poll(&pf, 1, ms) != 1)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* Send "GET target" with extra header lines on an open keep-alive socket:
 * 0, or -1 when the server closed it. */
int send_get(int fd, const char *target, const char *headers)
{
	char req[1024];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", target,
			 headers ? headers : "");

	ck_assert_int_lt(n, (int)sizeof(req));
	return send(fd, req, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -1;
}

/* Read one whole answer (headers, then Content-Length bytes of body) from
 * a keep-alive socket into resp: its status, or -1 (closed, or nothing
 * for 10 s). */
int recv_answer(int fd, struct strbuf *resp)
{
	char buf[65536];
	size_t need = SIZE_MAX;

	strbuf_reset(resp);
	while (resp->len < need) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};

		if (poll(&pf, 1, 10000) != 1)
			return -1;
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n <= 0)
			return -1;
		strbuf_append(resp, buf, (size_t)n);
		ck_assert(!resp->failed);
		const char *end = strstr(resp->buf, "\r\n\r\n");
		const char *cl = end ? strcasestr(resp->buf, "\r\nContent-Length:") : NULL;

		if (end && cl && cl < end)
			need = (size_t)(end + 4 - resp->buf) + (size_t)atol(cl + 17);
		else if (end)
			return -1; /* every answer of this server has a length */
	}
	return atoi(resp->buf + 9);
}

/* One request for a.txt on an open keep-alive socket; the status, or -1. */
int keepalive_get(int fd, const char *auth)
{
	struct strbuf r;
	int st;

	strbuf_init(&r);
	st = send_get(fd, "/v1/files/a.txt", auth) == 0 ? recv_answer(fd, &r) : -1;
	strbuf_fini(&r);
	return st;
}

/* Idle keep-alive connections are recycled once more than the idle limit
 * are open: the least recently used goes, the one used since stays, and
 * the new connection is served. */
START_TEST(idle_keepalive_recycled)
{
	enum { LIMIT = 4 };
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);
	struct remote_server_stats ss;
	int fds[LIMIT + 2];

	remote__server_set_idle_limit(s, LIMIT);
	for (int i = 0; i < LIMIT; i++) {
		fds[i] = connect_port(port);
		ck_assert_int_eq(keepalive_get(fds[i], NULL), 200);
		sleep_ms(20); /* its request completed: idle, in this order */
	}
	for (int i = 0; i < LIMIT; i++)
		ck_assert_msg(!closed_within(fds[i], 0), "connection %d closed at the limit", i);
	ck_assert_int_eq(keepalive_get(fds[0], NULL), 200); /* now the most recent */
	sleep_ms(20);
	/* one over the limit: a newcomer that has not authenticated pushes
	 * no one out... */
	fds[LIMIT] = connect_port(port);
	sleep_ms(100);
	for (int i = 0; i < LIMIT; i++)
		ck_assert_msg(!closed_within(fds[i], 0), "an unauthenticated newcomer closed %d", i);
	/* ...once it has, fds[1], the least recently used, goes */
	ck_assert_int_eq(keepalive_get(fds[LIMIT], NULL), 200);
	ck_assert_msg(closed_within(fds[1], 5000), "the least recently used idle one stayed");
	ck_assert_int_eq(keepalive_get(fds[0], NULL), 200);
	sleep_ms(20);
	/* again: now fds[2] */
	fds[LIMIT + 1] = connect_port(port);
	ck_assert_int_eq(keepalive_get(fds[LIMIT + 1], NULL), 200);
	ck_assert_msg(closed_within(fds[2], 5000), "the next least recently used stayed");
	for (int i = 3; i <= LIMIT; i++)
		ck_assert_msg(!closed_within(fds[i], 0), "connection %d closed", i);
	ck_assert_int_eq(keepalive_get(fds[3], NULL), 200);
	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.recycled, 2);
	ck_assert_uint_eq(ss.dropped, 0);
	/* a burst of two newcomers at the limit closes two idle ones, not more
	 * (one closing already counts as gone) */
	sleep_ms(20);
	int burst[2] = {connect_port(port), connect_port(port)};
	int open_left = 0, live[4] = {fds[0], fds[3], fds[4], fds[5]};
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(keepalive_get(burst[i], NULL), 200);
	sleep_ms(200);
	for (int i = 0; i < 4; i++)
		open_left += !closed_within(live[i], 0);
	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.recycled, 4);
	ck_assert_int_eq(open_left, 2);
	for (int i = 0; i < 2; i++)
		close(burst[i]);
	for (int i = 0; i < LIMIT + 2; i++)
		close(fds[i]);
	remote_server_stop(s);
}
END_TEST

/* The header deadline the three tests of it give their servers. */
#define TEST_HEADER_DEADLINE_MS 1000
/* The unauthenticated cap the two tests of it give theirs (the policy is
 * the same at REMOTE_SERVER_MAX_UNAUTH; thousand_keepalive_connections
 * runs with that one). */
#define TEST_MAX_UNAUTH 64

START_TEST(caps_headers_and_connections)
{
	unsigned port;
	struct remote_server *s = start_server(NULL, &port);

	remote__server_set_header_deadline_ms(s, TEST_HEADER_DEADLINE_MS);
	remote__server_set_max_unauth(s, TEST_MAX_UNAUTH);
	struct strbuf r, hdr;
	int fds[TEST_MAX_UNAUTH + 1];

	/* Headers beyond the per-connection memory cap are refused. */
	strbuf_init(&r);
	strbuf_init(&hdr);
	for (int i = 0; i < 2000; i++)
		strbuf_printf(&hdr, "X-Filler-%d: %060d\r\n", i, i);
	int st = http_raw(port, "GET", "/v1/files/a.txt", hdr.buf, &r);

	ck_assert_msg(st >= 400 && st < 500, "%zu bytes of headers answered %d", hdr.len, st);
	strbuf_fini(&hdr);

	/* One silent connection more than the unauthenticated cap: the
	 * oldest is closed at once (long before the header deadline), the
	 * newest is served. */
	for (int i = 0; i <= TEST_MAX_UNAUTH; i++) {
		fds[i] = connect_port(port);
		sleep_ms(2); /* accepted in this order */
	}
	ck_assert_msg(closed_within(fds[0], TEST_HEADER_DEADLINE_MS / 2),
		      "the oldest silent connection was kept over the cap");
	ck_assert_int_eq(keepalive_get(fds[TEST_MAX_UNAUTH], NULL), 200);
	for (int i = 0; i <= TEST_MAX_UNAUTH; i++)
		close(fds[i]);

	struct remote_server_stats ss;

	remote_server_get_stats(s, &ss);
	ck_assert_uint_ge(ss.dropped, 1);
	strbuf_fini(&r);
	remote_server_stop(s);
}
END_TEST

/* A header trickle (one byte every 400 ms, so never idle) is closed at
 * the header deadline, where an idle timeout alone would keep it open. */
START_TEST(header_deadline_closes_trickle)
{
	unsigned port;
	struct remote_server *s = start_server("s3cret", &port);

	remote__server_set_header_deadline_ms(s, TEST_HEADER_DEADLINE_MS);
	int fd = connect_port(port);
	static const char head[] = "GET /v1/files/a.txt HTTP/1.1\r\nHost: x\r\nX-Slow: ";
	int64_t t0 = mono_ms();
	bool closed = false;

	ck_assert_int_eq(send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(head) - 1);
	/* Bounded: the deadline plus a generous margin, then give up. */
	while (!closed && mono_ms() - t0 < TEST_HEADER_DEADLINE_MS + 8000) {
		if (send(fd, "a", 1, MSG_NOSIGNAL) != 1 || closed_within(fd, 400))
			closed = true;
	}
	ck_assert_msg(closed, "a header trickle was still open after %lld ms",
		      (long long)(mono_ms() - t0));
	close(fd);

	struct remote_server_stats ss;

	remote_server_get_stats(s, &ss);
	ck_assert_uint_ge(ss.dropped, 1);
	remote_server_stop(s);
}
END_TEST

/* A client that asks for a unit the server must buffer (a copy charged to
 * the memory budget), then stops reading: the server closes it at the send
 * deadline and the buffer is released, where it was held as long as the
 * client took a byte now and then (or 30 s of nothing). An honest client
 * before it is served in full and not counted. */
START_TEST(send_deadline_releases_stalled_buffer)
{
	const size_t size = 16u << 20; /* far more than socket buffers hold */
	unsigned char *huge = malloc(size);
	struct strbuf resp;
	unsigned port;

	ck_assert_ptr_nonnull(huge);
	for (size_t i = 0; i < size; i++)
		huge[i] = pattern_byte(i);
	add_file("huge.bin", huge, size, KIND_COPY);
	stub.max_slice = size; /* one buffer for the whole answer */
	struct remote_server *s = start_server(NULL, &port);

	remote__server_set_send_deadline_ms(s, 600);
	/* honest: read at once, in full */
	strbuf_init(&resp);
	ck_assert_int_eq(http_raw(port, "GET", "/v1/files/huge.bin", NULL, &resp), 200);
	size_t blen;

	body_of(&resp, &blen);
	ck_assert_uint_eq(blen, size);
	strbuf_fini(&resp);
	ck_assert_uint_eq(atomic_load(&stub.releases), atomic_load(&stub.copies));

	struct remote_server_stats ss;

	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.slow_receivers, 0);
	/* stalled: a small receive window, nothing read */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int small = 4096;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	unsigned copies = atomic_load(&stub.copies);

	ck_assert_int_eq(send_get(fd, "/v1/files/huge.bin", NULL), 0);
	int64_t t0 = mono_ms();

	while (atomic_load(&stub.copies) == copies && mono_ms() - t0 < 3000)
		sleep_ms(10);
	ck_assert_uint_gt(atomic_load(&stub.copies), copies);
	while (atomic_load(&stub.releases) < atomic_load(&stub.copies) && mono_ms() - t0 < 5000)
		sleep_ms(20);
	ck_assert_msg(atomic_load(&stub.releases) == atomic_load(&stub.copies),
		      "a stalled client still held its buffer after %lld ms",
		      (long long)(mono_ms() - t0));
	remote_server_get_stats(s, &ss);
	ck_assert_uint_eq(ss.slow_receivers, 1);
	close(fd);
	remote_server_stop(s);
	free(huge);
}
END_TEST

struct flooder {
	unsigned port;
	atomic_bool stop;
	atomic_uint opened;
};

/* Opens connection after connection, each sending half a request line,
 * keeping up to 256 of them open. */
void *flooder_main(void *arg)
{
	struct flooder *f = arg;
	int fds[256];
	unsigned n = 0;

	while (!atomic_load(&f->stop)) {
		int fd = connect_port(f->port);

		(void)send(fd, "GET /v1/fi", 10, MSG_NOSIGNAL);
		if (n == 256) {
			close(fds[0]);
			memmove(fds, fds + 1, sizeof(fds) - sizeof(fds[0]));
			n--;
		}
		fds[n++] = fd;
		f->opened++;
		sleep_ms(1);
	}
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
	return NULL;
}

/* An authenticated client gets through a flood of unauthenticated
 * connections, and its keep-alive connection outlives the header
 * deadline. */
START_TEST(authenticated_through_flood)
{
	struct remote_client_config cfg = {.timeout_ms = 5000};
	unsigned port;
	struct remote_server *s = start_server("s3cret", &port);
	struct remote_peers *p = peers_for_port(port);
	struct remote_client *c = NULL;
	struct flooder f = {.port = port};

	remote__server_set_header_deadline_ms(s, TEST_HEADER_DEADLINE_MS);
	remote__server_set_max_unauth(s, TEST_MAX_UNAUTH);
	pthread_t t;
	unsigned char *buf = malloc(1u << 16);
	int ka = connect_port(port);

	char auth[512];

	ck_assert_int_eq(keepalive_get(ka, signed_get("s3cret", "/v1/files/a.txt", NULL, 0, 7, 1,
						      auth, sizeof(auth))),
			 200);
	ck_assert_int_eq(remote_client_create(p, "s3cret", &cfg, &c), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, flooder_main, &f), 0);
	sleep_ms(300);
	for (int i = 0; i < 60; i++) {
		uint64_t off = (uint64_t)i * 40000;

		ck_assert_int_eq(remote_fetch(c, 0, "dir/big.bin", off, 1u << 16, buf), 1 << 16);
		ck_assert_mem_eq(buf, big + off, 1u << 16);
		ck_assert(remote_node_up(c, 0));
		sleep_ms(50);
	}
	/* Past the deadline, the authenticated keep-alive connection lives. */
	while (f.opened < TEST_MAX_UNAUTH * 2)
		sleep_ms(10);
	int64_t t0 = mono_ms();

	while (mono_ms() - t0 < TEST_HEADER_DEADLINE_MS + 1000)
		sleep_ms(100);
	ck_assert_int_eq(keepalive_get(ka, signed_get("s3cret", "/v1/files/a.txt", NULL, 0, 7, 2,
						      auth, sizeof(auth))),
			 200);
	atomic_store(&f.stop, true);
	pthread_join(t, NULL);

	struct remote_server_stats ss;
	struct remote_client_stats cs;

	remote_server_get_stats(s, &ss);
	remote_client_get_stats(c, &cs);
	ck_assert_uint_eq(cs.errors, 0);
	ck_assert_uint_gt(ss.dropped, TEST_MAX_UNAUTH);
	close(ka);
	free(buf);
	remote_client_destroy(c);
	remote_peers_destroy(p);
	remote_server_stop(s);
}
END_TEST

void remote_http_tests(TCase *net)
{
	tcase_add_test(net, fetch_full_and_ranged);
	tcase_add_test(net, raw_ranges_and_statuses);
	tcase_add_test(net, auth_signed);
	tcase_add_test(net, auth_signed_replies);
	tcase_add_test(net, auth_bearer);
	tcase_add_test(net, traversal_refused);
	tcase_add_test(net, idle_keepalive_recycled);
	tcase_add_test(net, caps_headers_and_connections);
	tcase_add_test(net, header_deadline_closes_trickle);
	tcase_add_test(net, send_deadline_releases_stalled_buffer);
	tcase_add_test(net, authenticated_through_flood);
}
