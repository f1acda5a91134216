/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for remote/: peer parsing and rendezvous ownership, the
 * path/Range parsers, and the server and client talking real HTTP on
 * loopback (ports picked free at run time): byte-exact full and ranged
 * reads, authentication, traversal attempts, metrics, back-off and
 * re-probe, and a client facing tests/helpers/fake_peer.py in each of
 * its misbehaving modes.
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "common/strbuf.h"
#include "common/text.h"
#include "remote/peer/auth.h"
#include "remote/remote.h"
#include "remote/peer/remote_int.h"
#include "tests/unit/check_run.h"

/* ---- helpers ------------------------------------------------------------ */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static unsigned char pattern_byte(uint64_t i)
{
	return (unsigned char)((i * 131 + 7) & 0xff);
}

/* ---- an in-memory dataset behind stub callbacks --------------------------- */

/* KIND_FAIL: the read fails (a file changed on this node); KIND_NOMEM:
 * the read finds no memory for the response; KIND_GATED: the read waits
 * until the test opens the gate (a slow SOURCE), then is an arena slice. */
enum file_kind { KIND_ARENA, KIND_COPY, KIND_DIR, KIND_FAIL, KIND_NOMEM, KIND_GATED };

struct file {
	const char *path;
	unsigned char *data;
	uint64_t size;
	enum file_kind kind;
};

#define MAX_SEEN 512
#define BIG_SIZE (3u << 20)

struct stub {
	struct file files[16];
	unsigned nfiles;
	size_t max_slice; /* read hands out at most this much at once */
	pthread_mutex_t lock;
	char *seen[MAX_SEEN]; /* every path resolve received */
	unsigned nseen;
	_Atomic unsigned copies, releases;
	_Atomic unsigned reads; /* read callbacks */
	unsigned version; /* part of every ETag: another snapshot when bumped */
	pthread_cond_t gate_cv; /* KIND_GATED reads wait for gate_open */
	bool gate_open;
	unsigned gated; /* reads waiting at the gate now */
	struct remote_server *srv;
	struct remote_client *cli;
};

static struct stub stub;
static unsigned char big[BIG_SIZE];
static unsigned char hello[] = "hello, world\n";

static void add_file(const char *path, unsigned char *data, uint64_t size, enum file_kind kind)
{
	struct file *f = &stub.files[stub.nfiles++];

	f->path = path;
	f->data = data;
	f->size = size;
	f->kind = kind;
}

static void stub_setup(void)
{
	memset(&stub, 0, sizeof(stub));
	pthread_mutex_init(&stub.lock, NULL);
	pthread_cond_init(&stub.gate_cv, NULL);
	for (size_t i = 0; i < BIG_SIZE; i++)
		big[i] = pattern_byte(i);
	stub.max_slice = 1u << 20; /* big.bin needs several slices */
	add_file("a.txt", hello, sizeof(hello) - 1, KIND_ARENA);
	add_file("dir/big.bin", big, BIG_SIZE, KIND_ARENA);
	add_file("dir/sp ace+%.bin", big + 5, 1000, KIND_COPY);
	add_file("copy.bin", big + 7, 200000, KIND_COPY);
	add_file("empty", hello, 0, KIND_ARENA);
	add_file("dir", NULL, 0, KIND_DIR);
	add_file("changed.bin", big, 5000, KIND_FAIL);
	add_file("nomem.bin", big, 5000, KIND_NOMEM);
	add_file("slow.bin", big + 11, 3000, KIND_GATED);
}

static void stub_teardown(void)
{
	for (unsigned i = 0; i < stub.nseen; i++)
		free(stub.seen[i]);
}

static int stub_resolve(void *arg, const char *relpath, uint32_t *file_id, uint64_t *size)
{
	struct stub *st = arg;

	pthread_mutex_lock(&st->lock);
	if (st->nseen < MAX_SEEN)
		st->seen[st->nseen++] = strdup(relpath);
	pthread_mutex_unlock(&st->lock);
	for (unsigned i = 0; i < st->nfiles; i++) {
		if (strcmp(st->files[i].path, relpath) == 0) {
			if (st->files[i].kind == KIND_DIR)
				return -EISDIR;
			*file_id = i;
			*size = st->files[i].size;
			return 0;
		}
	}
	return -ENOENT;
}

static void stub_release(void *ctx)
{
	atomic_fetch_add(&stub.releases, 1);
	free(ctx);
}

static int stub_read(void *arg, uint32_t file_id, uint64_t off, size_t len,
		     struct remote_slice *out)
{
	struct stub *st = arg;
	struct file *f;

	ck_assert_uint_lt(file_id, st->nfiles);
	f = &st->files[file_id];
	ck_assert_uint_lt(off, f->size);
	ck_assert_uint_le(off + len, f->size);
	ck_assert_ptr_null(out->data); /* the server prepares the slice */
	atomic_fetch_add(&st->reads, 1);
	if (len > st->max_slice)
		len = st->max_slice;
	out->len = len;
	switch (f->kind) {
	case KIND_ARENA:
		out->data = f->data + off;
		break;
	case KIND_COPY: {
		unsigned char *copy = malloc(len);

		if (!copy)
			return -ENOMEM;
		memcpy(copy, f->data + off, len);
		atomic_fetch_add(&st->copies, 1);
		out->data = copy;
		out->release = stub_release;
		out->ctx = copy;
		break;
	}
	case KIND_NOMEM:
		return -ENOMEM;
	case KIND_GATED:
		pthread_mutex_lock(&st->lock);
		st->gated++;
		while (!st->gate_open)
			pthread_cond_wait(&st->gate_cv, &st->lock);
		st->gated--;
		pthread_mutex_unlock(&st->lock);
		out->data = f->data + off;
		break;
	default:
		return -EIO;
	}
	return 0;
}

/* The stub's snapshot name of a file: its id, size and stub.version. */
static void stub_etag_of(uint32_t file_id, char *buf, size_t len)
{
	snprintf(buf, len, "\"%x-%llx-v%u\"", file_id,
		 (unsigned long long)stub.files[file_id].size, stub.version);
}

/* The stub's id of path (its place in stub.files). */
static uint32_t stub_id(const char *path)
{
	for (unsigned i = 0; i < stub.nfiles; i++)
		if (!strcmp(stub.files[i].path, path))
			return i;
	ck_abort_msg("no stub file %s", path);
	return 0;
}

static int stub_etag(void *arg, uint32_t file_id, char *buf, size_t len)
{
	stub_etag_of(file_id, buf, len);
	return 0;
}

static void stub_stats(void *arg, struct strbuf *out)
{
	struct stub *st = arg;

	strbuf_puts(out, "{\"version\": 1, \"peers\": ");
	remote_stats_json(st->cli, st->srv, out);
	strbuf_puts(out, "}");
}

static void stub_metrics(void *arg, struct strbuf *out)
{
	struct stub *st = arg;

	strbuf_puts(out, "# HELP coordfs_uptime_seconds Seconds since mount.\n"
			 "# TYPE coordfs_uptime_seconds gauge\ncoordfs_uptime_seconds 12.5\n");
	remote_metrics(st->cli, st->srv, out);
}

/* Held: the first 3 bytes of file 0 (a.txt) only. */
static bool stub_held(void *arg, uint32_t file_id, uint64_t off)
{
	(void)arg;
	return file_id == 0 && off < 3;
}

static const struct remote_server_ops stub_ops = {
    .resolve = stub_resolve,
    .held = stub_held,
    .read = stub_read,
    .stats_json = stub_stats,
    .metrics = stub_metrics,
    .etag = stub_etag,
};

static struct remote_server *start_server_at(const char *hostport, const char *secret,
					     unsigned *port)
{
	char err[256] = "";
	int fd = -1;
	int rc = remote_listen(hostport, &fd, err, sizeof(err));

	ck_assert_msg(rc == 0, "remote_listen(%s): %d %s", hostport, rc, err);
	ck_assert_int_eq(remote_listen_port(fd, port), 0);
	ck_assert_uint_gt(*port, 0);
	struct remote_server *s =
	    remote_server_start(fd, secret, &stub_ops, &stub, err, sizeof(err));

	ck_assert_msg(s != NULL, "remote_server_start: %s", err);
	stub.srv = s;
	return s;
}

static struct remote_server *start_server(const char *secret, unsigned *port)
{
	return start_server_at("127.0.0.1:0", secret, port);
}

static struct remote_peers *peers_for_port(unsigned port)
{
	char list[64], err[256];
	struct remote_peers *p = NULL;

	snprintf(list, sizeof(list), "http://127.0.0.1:%u", port);
	ck_assert_int_eq(remote_peers_parse(list, &p, err, sizeof(err)), 0);
	return p;
}

/* Send one raw request (the target exactly as given, which curl would
 * normalize) and read the whole answer. Returns the status or -errno. */
static int http_raw(unsigned port, const char *method, const char *target, const char *headers,
		    struct strbuf *resp)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {5, 0};
	struct strbuf req;
	char buf[65536];
	int fd, status = -EPROTO;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -errno;
	}
	strbuf_init(&req);
	strbuf_printf(&req, "%s ", method);
	strbuf_puts(&req, target);
	strbuf_printf(&req, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n",
		      headers ? headers : "");
	ck_assert(!req.failed);
	/* The server may answer and close before it read a huge request. */
	(void)send(fd, req.buf, req.len, MSG_NOSIGNAL);
	strbuf_fini(&req);
	strbuf_reset(resp);
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n <= 0)
			break;
		strbuf_append(resp, buf, (size_t)n);
	}
	close(fd);
	if (resp->len >= 12 && strncmp(resp->buf, "HTTP/1.", 7) == 0)
		status = atoi(resp->buf + 9);
	return status;
}

/* The value of header name in a raw response, or NULL. */
static const char *header_value(const struct strbuf *resp, const char *name, char *val, size_t cap)
{
	const char *end = resp->buf ? strstr(resp->buf, "\r\n\r\n") : NULL;
	size_t nl = strlen(name);

	for (const char *p = resp->buf ? strstr(resp->buf, "\r\n") : NULL; p && p < end;
	     p = strstr(p + 2, "\r\n")) {
		if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') {
			const char *v = p + 3 + nl;
			const char *e = strstr(v, "\r\n");

			while (*v == ' ')
				v++;
			snprintf(val, cap, "%.*s", (int)(e - v), v);
			return val;
		}
	}
	return NULL;
}

static const char *body_of(const struct strbuf *resp, size_t *len)
{
	const char *b = strstr(resp->buf, "\r\n\r\n");

	ck_assert_ptr_nonnull(b);
	b += 4;
	*len = resp->len - (size_t)(b - resp->buf);
	return b;
}

/* A path resolve may see: relative, no empty, "." or ".." component. */
static bool path_is_contained(const char *p)
{
	if (!*p || p[0] == '/' || strlen(p) > REMOTE_MAX_RELPATH)
		return false;
	for (const char *c = p;;) {
		const char *sl = strchr(c, '/');
		size_t n = sl ? (size_t)(sl - c) : strlen(c);

		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!sl)
			return true;
		c = sl + 1;
	}
}

/* ---- peers and ownership --------------------------------------------------- */

START_TEST(peers_parse_and_normalize)
{
	struct remote_peers *p = NULL;
	char err[256];
	unsigned node = 99;

	ck_assert_int_eq(remote_peers_parse("http://Node-A:8080/,HTTP://10.0.0.2:9000,"
					    "http://[::1]:7000/",
					    &p, err, sizeof(err)),
			 0);
	ck_assert_uint_eq(remote_peers_count(p), 3);
	ck_assert_str_eq(remote_peers_url(p, 0), "http://node-a:8080");
	ck_assert_str_eq(remote_peers_url(p, 1), "http://10.0.0.2:9000");
	ck_assert_str_eq(remote_peers_url(p, 2), "http://[::1]:7000");
	ck_assert_str_eq(remote_peers_hostport(p, 0), "node-a:8080");
	ck_assert_str_eq(remote_peers_hostport(p, 2), "[::1]:7000");
	ck_assert_ptr_null(remote_peers_url(p, 3));
	ck_assert_int_eq(remote_parse_node("2", p, &node, err, sizeof(err)), 0);
	ck_assert_uint_eq(node, 2);
	ck_assert_int_eq(remote_parse_node("0", p, &node, err, sizeof(err)), 0);
	ck_assert_uint_eq(node, 0);
	static const char *bad_nodes[] = {"3", "-1", "x", "", "1x", "99999999"};

	for (size_t i = 0; i < sizeof(bad_nodes) / sizeof(bad_nodes[0]); i++) {
		err[0] = '\0';
		ck_assert_int_eq(remote_parse_node(bad_nodes[i], p, &node, err, sizeof(err)),
				 -EINVAL);
		ck_assert_msg(strstr(err, "--node") != NULL, "no clear message: '%s'", err);
	}
	remote_peers_destroy(p);

	static const char *bad[] = {
	    "",
	    "https://a:1",
	    "http://a",
	    "http://a:",
	    "http://a:0",
	    "http://a:70000",
	    "http://a:80/path",
	    "ftp://a:21",
	    "http://:80",
	    "http://user@a:80",
	    "a:80",
	    "http://a:80,",
	    "http://a:80,http://a:80",
	    "http://a:80//",
	    "http://[zz]:80",
	    "http://a b:80",
	    "http://a:123456",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = (struct remote_peers *)1;
		err[0] = '\0';
		ck_assert_msg(remote_peers_parse(bad[i], &p, err, sizeof(err)) == -EINVAL,
			      "accepted '%s'", bad[i]);
		ck_assert_ptr_null(p);
		ck_assert_msg(strstr(err, "--peers") != NULL, "no clear message for '%s': '%s'",
			      bad[i], err);
	}
}
END_TEST

/* The longest peer list is taken, one more refused with a clear message. */
START_TEST(peers_parse_cluster_sizes)
{
	for (unsigned n = REMOTE_MAX_PEERS; n <= REMOTE_MAX_PEERS + 1; n++) {
		struct strbuf sb;
		struct remote_peers *p = NULL;
		char err[256] = "";

		strbuf_init(&sb);
		for (unsigned i = 0; i < n; i++)
			strbuf_printf(&sb, "%shttp://10.%u.%u.1:7070", i ? "," : "", i / 256, i % 256);
		int rc = remote_peers_parse(sb.buf, &p, err, sizeof(err));
		if (n == REMOTE_MAX_PEERS) {
			ck_assert_int_eq(rc, 0);
			ck_assert_uint_eq(remote_peers_count(p), n);
			remote_peers_destroy(p);
		} else {
			ck_assert_int_eq(rc, -EINVAL);
			ck_assert_ptr_null(p);
			ck_assert_msg(strstr(err, "more than 1024 peers"), "message '%s'", err);
		}
		strbuf_fini(&sb);
	}
}
END_TEST

static const char *const four[] = {"http://10.0.0.1:7000", "http://10.0.0.2:7000",
				   "http://10.0.0.3:7000", "http://10.0.0.4:7000",
				   "http://10.0.0.5:7000"};

static struct remote_peers *make_peers(const unsigned *order, unsigned n)
{
	struct strbuf sb;
	struct remote_peers *p = NULL;
	char err[256];

	strbuf_init(&sb);
	for (unsigned i = 0; i < n; i++) {
		if (i)
			strbuf_puts(&sb, ",");
		strbuf_puts(&sb, four[order[i]]);
	}
	ck_assert_int_eq(remote_peers_parse(sb.buf, &p, err, sizeof(err)), 0);
	strbuf_fini(&sb);
	return p;
}

START_TEST(owner_same_on_every_node)
{
	static const unsigned fwd[] = {0, 1, 2, 3}, rev[] = {3, 1, 0, 2};
	struct remote_peers *a = make_peers(fwd, 4), *b = make_peers(rev, 4);
	char path[64];

	for (unsigned i = 0; i < 20000; i++) {
		int n = snprintf(path, sizeof(path), "train/n%05u/img_%u.JPEG", i % 1000, i);
		uint64_t key = remote_unit_key(path, (size_t)n, i % 3);

		/* Same owner URL whatever the list order. */
		ck_assert_str_eq(remote_peers_url(a, remote_owner(a, key)),
				 remote_peers_url(b, remote_owner(b, key)));
	}
	/* The key depends on path and chunk. */
	ck_assert_uint_eq(remote_unit_key("x/y", 3, 0), remote_unit_key("x/y", 3, 0));
	ck_assert_uint_ne(remote_unit_key("x/y", 3, 0), remote_unit_key("x/y", 3, 1));
	ck_assert_uint_ne(remote_unit_key("x/y", 3, 0), remote_unit_key("x/z", 3, 0));
	ck_assert_uint_eq(remote_owner(NULL, 42), 0);
	remote_peers_destroy(a);
	remote_peers_destroy(b);
}
END_TEST

START_TEST(owner_balance_and_minimal_disruption)
{
	static const unsigned o4[] = {0, 1, 2, 3}, o3[] = {0, 1, 3}, o5[] = {0, 1, 2, 3, 4};
	struct remote_peers *p4 = make_peers(o4, 4), *p3 = make_peers(o3, 3),
			    *p5 = make_peers(o5, 5);
	const unsigned n = 100000;
	unsigned count[4] = {0}, moved_remove = 0, moved_add = 0, to_new = 0;
	char path[64];

	for (unsigned i = 0; i < n; i++) {
		int len = snprintf(path, sizeof(path), "val/cls%03u/%u.jpg", i % 777, i);
		uint64_t key = remote_unit_key(path, (size_t)len, 0);
		const char *own4 = remote_peers_url(p4, remote_owner(p4, key));
		const char *own3 = remote_peers_url(p3, remote_owner(p3, key));
		const char *own5 = remote_peers_url(p5, remote_owner(p5, key));

		count[remote_owner(p4, key)]++;
		/* Removing node 2: only its keys move. */
		if (strcmp(own4, own3) != 0) {
			moved_remove++;
			ck_assert_str_eq(own4, four[2]);
		} else {
			ck_assert_str_ne(own4, four[2]);
		}
		/* Adding node 4: keys move only to it. */
		if (strcmp(own4, own5) != 0) {
			moved_add++;
			ck_assert_str_eq(own5, four[4]);
		}
		if (strcmp(own5, four[4]) == 0)
			to_new++;
		/* A joiner's units were, before it came, the runner-up's:
		 * p5 without node 4 is p4. */
		ck_assert_str_eq(remote_peers_url(p5, remote_owner_without(p5, key, 4)), own4);
	}
	ck_assert_int_eq(remote_peers_find(p5, four[4]), 4);
	ck_assert_int_eq(remote_peers_find(p3, four[2]), -1);
	struct remote_peers *p1 = make_peers(o4, 1);
	ck_assert_uint_eq(remote_owner_without(p1, 1, 0), UINT_MAX);
	remote_peers_destroy(p1);
	for (unsigned k = 0; k < 4; k++)
		ck_assert_msg(count[k] > n / 4 - n / 50 && count[k] < n / 4 + n / 50,
			      "node %u owns %u of %u", k, count[k], n);
	ck_assert_uint_eq(moved_remove, count[2]);
	ck_assert_uint_eq(moved_add, to_new);
	ck_assert_msg(moved_add > n / 5 - n / 50 && moved_add < n / 5 + n / 50,
		      "adding a 5th node moved %u of %u", moved_add, n);
	remote_peers_destroy(p3);
	remote_peers_destroy(p4);
	remote_peers_destroy(p5);
}
END_TEST

/* ---- parsers ---------------------------------------------------------------- */

START_TEST(pct_and_relpath)
{
	char out[64];
	struct strbuf sb;

	ck_assert_int_eq(remote__pct_decode("a%20b/c%2Fd+e", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "a b/c/d+e");
	ck_assert_int_eq(remote__pct_decode("%00", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(remote__pct_decode("a%0a", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(remote__pct_decode("a%", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(remote__pct_decode("a%4", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(remote__pct_decode("a%zz", out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(remote__pct_decode("abcdefgh", out, 8), -ENAMETOOLONG);
	ck_assert_int_eq(remote__pct_decode("abcdefg", out, 8), 0);

	ck_assert_int_eq(remote__relpath_check("a/b.c/..d/..."), 0);
	static const char *bad[] = {"",	 "/etc/passwd", "..",	 "../x", "a/../b", "a/..",
				    ".", "./a",		"a/./b", "a//b", "a/",	   "a\tb"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(remote__relpath_check(bad[i]) == -EINVAL, "accepted '%s'", bad[i]);
	char longname[300];

	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	ck_assert_int_eq(remote__relpath_check(longname), -ENAMETOOLONG);

	strbuf_init(&sb);
	text_pct_encode(&sb, "dir/sp ace+%.bin~\xc3\xa9", strlen("dir/sp ace+%.bin~\xc3\xa9"), true);
	ck_assert_str_eq(sb.buf, "dir/sp%20ace%2B%25.bin~%C3%A9");
	ck_assert_int_eq(remote__pct_decode(sb.buf, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "dir/sp ace+%.bin~\xc3\xa9");
	strbuf_fini(&sb);
}
END_TEST

START_TEST(range_header)
{
	uint64_t s = 0, l = 0;

	ck_assert_int_eq(remote__range_parse(NULL, 100, &s, &l), 0);
	ck_assert_int_eq(remote__range_parse("bytes=10-19", 100, &s, &l), 1);
	ck_assert_uint_eq(s, 10);
	ck_assert_uint_eq(l, 10);
	ck_assert_int_eq(remote__range_parse("bytes=90-", 100, &s, &l), 1);
	ck_assert_uint_eq(s, 90);
	ck_assert_uint_eq(l, 10);
	ck_assert_int_eq(remote__range_parse("bytes=90-1000", 100, &s, &l), 1);
	ck_assert_uint_eq(l, 10);
	ck_assert_int_eq(remote__range_parse("bytes=-30", 100, &s, &l), 1);
	ck_assert_uint_eq(s, 70);
	ck_assert_uint_eq(l, 30);
	ck_assert_int_eq(remote__range_parse("bytes=-300", 100, &s, &l), 1);
	ck_assert_uint_eq(s, 0);
	ck_assert_uint_eq(l, 100);
	ck_assert_int_eq(remote__range_parse("bytes=100-", 100, &s, &l), -ERANGE);
	ck_assert_int_eq(remote__range_parse("bytes=-0", 100, &s, &l), -ERANGE);
	ck_assert_int_eq(remote__range_parse("bytes=0-", 0, &s, &l), -ERANGE);
	/* Malformed or multiple ranges are ignored (whole file). */
	ck_assert_int_eq(remote__range_parse("bytes=5-2", 100, &s, &l), 0);
	ck_assert_int_eq(remote__range_parse("bytes=1-2,4-5", 100, &s, &l), 0);
	ck_assert_int_eq(remote__range_parse("items=1-2", 100, &s, &l), 0);
	ck_assert_int_eq(remote__range_parse("bytes=-", 100, &s, &l), 0);
	ck_assert_int_eq(remote__range_parse("bytes=99999999999999999999-", 100, &s, &l), 0);
}
END_TEST

/* Random inputs through the parsers of outside input: whatever passes
 * decoding and validation is a contained path, and a parsed range lies
 * inside the file. */
START_TEST(parsers_random_inputs)
{
	static const char alphabet[] = "./%2eEfF0a\\-=, bytes";
	uint64_t state = 0x1234567;
	char in[64], out[64];
	unsigned accepted = 0, ranged = 0;

	for (int iter = 0; iter < 200000; iter++) {
		size_t n = 0, want;

		state = state * 6364136223846793005ULL + 1442695040888963407ULL;
		want = (size_t)(state >> 59) + 1;
		for (n = 0; n < want && n < sizeof(in) - 1; n++) {
			state = state * 6364136223846793005ULL + 1442695040888963407ULL;
			unsigned r = (unsigned)(state >> 33);

			in[n] = (r & 7) == 0 ? (char)(r >> 8)
					     : alphabet[(r >> 8) % (sizeof(alphabet) - 1)];
		}
		in[n] = '\0';
		if (remote__pct_decode(in, out, sizeof(out)) == 0 &&
		    remote__relpath_check(out) == 0) {
			ck_assert_msg(path_is_contained(out), "'%s' decoded to '%s'", in, out);
			ck_assert_ptr_null(strstr(out, "/../"));
			accepted++;
		}
	}
	for (int iter = 0; iter < 200000; iter++) {
		static const char ralpha[] = "0123456789-, ";
		size_t n = 6;

		memcpy(in, "bytes=", 6);
		state = state * 6364136223846793005ULL + 1442695040888963407ULL;
		size_t want = 6 + (size_t)(state >> 60) + 1;

		for (; n < want; n++) {
			state = state * 6364136223846793005ULL + 1442695040888963407ULL;
			in[n] = ralpha[(state >> 33) % (sizeof(ralpha) - 1)];
		}
		in[n] = '\0';
		uint64_t size = (state >> 20) % 1000, start = 0, len = 0;
		int rc = remote__range_parse(in, size, &start, &len);

		ck_assert(rc == 0 || rc == 1 || rc == -ERANGE);
		if (rc == 1) {
			ck_assert_msg(len > 0 && start + len <= size, "'%s' over %llu: %llu+%llu",
				      in, (unsigned long long)size, (unsigned long long)start,
				      (unsigned long long)len);
			ranged++;
		}
	}
	ck_assert_uint_gt(accepted, 1000); /* the generator does reach the checks */
	ck_assert_uint_gt(ranged, 0);
}
END_TEST

START_TEST(secret_file)
{
	char path[] = "/tmp/coordfs-secret-XXXXXX";
	char err[256];
	char *secret = NULL;
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "s3cr3t-token\n", 13), 13);
	ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), 0);
	ck_assert_str_eq(secret, "s3cr3t-token");
	free(secret);
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq(pwrite(fd, "two words", 9, 0), 9);
	ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(secret);
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), -EINVAL);
	close(fd);
	unlink(path);
	ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
}
END_TEST

START_TEST(listen_rejects_bad_hostport)
{
	char err[256];
	int fd = 7;

	ck_assert_int_eq(remote_listen("127.0.0.1", &fd, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(fd, -1);
	ck_assert_int_eq(remote_listen("127.0.0.1:99999", &fd, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(remote_listen("::1:80", &fd, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "::1:80") != NULL, "message: %s", err);
	/* A port in use is refused with a message naming it. */
	unsigned port;
	char hp[64];

	ck_assert_int_eq(remote_listen("127.0.0.1:0", &fd, err, sizeof(err)), 0);
	ck_assert_int_eq(remote_listen_port(fd, &port), 0);
	snprintf(hp, sizeof(hp), "127.0.0.1:%u", port);
	int fd2 = -1;

	ck_assert_int_eq(remote_listen(hp, &fd2, err, sizeof(err)), -EADDRINUSE);
	ck_assert_msg(strstr(err, hp) != NULL, "message: %s", err);
	close(fd);
}
END_TEST

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
	/* Slices that must be released, an encoded name. */
	ck_assert_int_eq(remote_fetch(c, 0, "copy.bin", 3, 199990, buf), 199990);
	ck_assert_mem_eq(buf, big + 7 + 3, 199990);
	ck_assert_int_eq(remote_fetch(c, 0, "dir/sp ace+%.bin", 10, 990, buf), 990);
	ck_assert_mem_eq(buf, big + 5 + 10, 990);
	/* Beyond the end: the client asked for bytes the file lacks. */
	ck_assert_int_lt(remote_fetch(c, 0, "a.txt", 0, 100, buf), 0);
	ck_assert(!remote_node_up(c, 0));

	/* Keep-alive: one thread, one connection for all of the above. */
	struct remote_server_stats ss;

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
static const char *signed_get(const char *secret, const char *target, const char *range,
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

static int connect_port(unsigned port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Whether the server closed fd within ms (poll, then recv 0 or error). */
static bool closed_within(int fd, int ms)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	char c;

	if (poll(&pf, 1, ms) != 1)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* Send "GET target" with extra header lines on an open keep-alive socket:
 * 0, or -1 when the server closed it. */
static int send_get(int fd, const char *target, const char *headers)
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
static int recv_answer(int fd, struct strbuf *resp)
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
static int keepalive_get(int fd, const char *auth)
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

struct flooder {
	unsigned port;
	atomic_bool stop;
	atomic_uint opened;
};

/* Opens connection after connection, each sending half a request line,
 * keeping up to 256 of them open. */
static void *flooder_main(void *arg)
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

/* ---- many connections, blocked reads ------------------------------------ */

#define SCALE_CONNS 1000
#define SCALE_UNAUTH 100
#define SCALE_MAX_THREADS 64		/* issue #20's bound */
#define SCALE_MAX_RSS_KIB (64 * 1024) /* issue #20's bound, 64 MiB */
/* Long enough for 1,000 connects before the first request (valgrind). */
#define SCALE_HEADER_DEADLINE_MS 3000

/* Threads of this process now (/proc/self/task): the server's, the test's. */
static unsigned thread_count(void)
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
static long rss_kib(void)
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
static long scale_rss_bound_kib(void)
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
static void raise_nofile(rlim_t need)
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
static const unsigned char *scale_range(unsigned i, unsigned r, char *target, size_t tcap,
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
static void scale_send(int fd, unsigned i, unsigned r)
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
static void scale_check(int fd, unsigned i, unsigned r, struct strbuf *resp)
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

static void gate_set(bool open)
{
	pthread_mutex_lock(&stub.lock);
	stub.gate_open = open;
	pthread_cond_broadcast(&stub.gate_cv);
	pthread_mutex_unlock(&stub.lock);
}

/* Wait (5 s at most) until `working` reads wait at the gate and `queued`
 * requests wait for a worker. */
static void wait_blocked(struct remote_server *s, unsigned working, unsigned queued)
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

static void *stopper_main(void *arg)
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

	ck_assert_int_eq(send_get(fds[W + Q], "/v1/files/a.txt", NULL), 0);
	ck_assert_int_eq(recv_answer(fds[W + Q], &r), 503);
	ck_assert_int_lt(mono_ms() - t0, 2000);
	ck_assert_str_eq(header_value(&r, "Retry-After", v, sizeof(v)), "1");
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

static void *worker_main(void *arg)
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

static const char *const fake_modes[] = {"ok",	 "short",   "wronglen", "shortlen", "500",
					 "hang", "garbage", "norange",	"badrange", "trickle"};

static pid_t spawn_fake(const char *mode, unsigned *port)
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

START_TEST(fake_peer_modes)
{
	const char *mode = fake_modes[_i];
	struct remote_client_config cfg = {.timeout_ms = 1500, .backoff_min_ms = 100};
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

		ck_assert_msg(dt < 1500 + 1000, "mode %s took %lld ms", mode, (long long)dt);
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
	remote_client_destroy(c);
	remote_peers_destroy(p);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	free(buf);
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
	remote_client_destroy(c);
	remote_peers_destroy(p);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	free(buf);
}
END_TEST

struct probe_arg {
	struct remote_client *c;
	ssize_t rc;
};

static void *probe_main(void *arg)
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

int main(void)
{
	Suite *s = suite_create("remote");
	TCase *tc = tcase_create("core");
	TCase *net = tcase_create("http");

	signal(SIGPIPE, SIG_IGN);
	if (remote_global_init() != 0)
		return 1;
	tcase_add_test(tc, peers_parse_and_normalize);
	tcase_add_test(tc, owner_same_on_every_node);
	tcase_add_test(tc, owner_balance_and_minimal_disruption);
	tcase_add_test(tc, pct_and_relpath);
	tcase_add_test(tc, range_header);
	tcase_add_test(tc, parsers_random_inputs);
	tcase_add_test(tc, secret_file);
	tcase_add_test(tc, listen_rejects_bad_hostport);
	tcase_add_test(tc, peers_json_lists_every_node);
	suite_add_tcase(s, tc);

	tcase_add_checked_fixture(net, stub_setup, stub_teardown);
	tcase_set_timeout(net, 60);
	tcase_add_test(net, fetch_full_and_ranged);
	tcase_add_test(net, raw_ranges_and_statuses);
	tcase_add_test(net, auth_signed);
	tcase_add_test(net, auth_bearer);
	tcase_add_test(net, traversal_refused);
	tcase_add_test(net, caps_headers_and_connections);
	tcase_add_test(net, header_deadline_closes_trickle);
	tcase_add_test(net, idle_keepalive_recycled);
	tcase_add_test(net, peers_parse_cluster_sizes);
	tcase_add_test(net, authenticated_through_flood);
	tcase_add_test(net, etag_and_statuses);
	tcase_add_test(net, verified_fetch_per_file_failures);
	tcase_add_test(net, client_connections_bounded);
	tcase_add_test(net, metrics_and_stats);
	tcase_add_test(net, backoff_then_reprobe);
	tcase_add_test(net, concurrent_fetches);
	tcase_add_test(net, single_probe_at_a_time);
	tcase_add_test(net, server_start_failure_closes_socket);
	tcase_add_test(net, fake_peer_flipped_bytes);
	tcase_add_loop_test(net, fake_peer_modes, 0,
			    (int)(sizeof(fake_modes) / sizeof(fake_modes[0])));
	suite_add_tcase(s, net);

	/* The server's threading (CK_RUN_CASE=scale runs only these). */
	TCase *scale = tcase_create("scale");

	tcase_add_checked_fixture(scale, stub_setup, stub_teardown);
	tcase_set_timeout(scale, 60);
	tcase_add_test(scale, thousand_keepalive_connections);
	tcase_add_test(scale, blocked_reads_hold_workers_only);
	suite_add_tcase(s, scale);

	int rc = check_run(s);

	remote_global_cleanup();
	return rc;
}
