/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for remote/peer/ (the unit test `remote`; its cases are in
 * test_remote_*.c, see test_remote.h): peer parsing and rendezvous
 * ownership, the path/Range parsers, and the server and client talking
 * real HTTP on loopback (ports picked free at run time). This file holds
 * the stub dataset behind the server's callbacks, the HTTP helpers the
 * cases share, and main.
 */
#include "tests/unit/test_remote.h"

/* ---- helpers ------------------------------------------------------------ */

int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

unsigned char pattern_byte(uint64_t i)
{
	return (unsigned char)((i * 131 + 7) & 0xff);
}

/* ---- an in-memory dataset behind stub callbacks --------------------------- */

/* KIND_FAIL: the read fails (a file changed on this node); KIND_NOMEM:
 * the read finds no memory for the response; KIND_GATED: the read waits
 * until the test opens the gate (a slow SOURCE), then is an arena slice. */




struct stub stub;
unsigned char big[BIG_SIZE];
unsigned char hello[] = "hello, world\n";

void add_file(const char *path, unsigned char *data, uint64_t size, enum file_kind kind)
{
	struct file *f = &stub.files[stub.nfiles++];

	f->path = path;
	f->data = data;
	f->size = size;
	f->kind = kind;
}

void stub_setup(void)
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

void stub_teardown(void)
{
	for (unsigned i = 0; i < stub.nseen; i++)
		free(stub.seen[i]);
}

int stub_resolve(void *arg, const char *relpath, uint32_t *file_id, uint64_t *size)
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

void stub_release(void *ctx)
{
	atomic_fetch_add(&stub.releases, 1);
	free(ctx);
}

int stub_read(void *arg, uint32_t file_id, uint64_t off, size_t len,
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
void stub_etag_of(uint32_t file_id, char *buf, size_t len)
{
	snprintf(buf, len, "\"%x-%llx-v%u\"", file_id,
		 (unsigned long long)stub.files[file_id].size, stub.version);
}

/* The stub's id of path (its place in stub.files). */
uint32_t stub_id(const char *path)
{
	for (unsigned i = 0; i < stub.nfiles; i++)
		if (!strcmp(stub.files[i].path, path))
			return i;
	ck_abort_msg("no stub file %s", path);
	return 0;
}

int stub_etag(void *arg, uint32_t file_id, char *buf, size_t len)
{
	stub_etag_of(file_id, buf, len);
	return 0;
}

void stub_stats(void *arg, struct strbuf *out)
{
	struct stub *st = arg;

	strbuf_puts(out, "{\"version\": 1, \"peers\": ");
	remote_stats_json(st->cli, st->srv, out);
	strbuf_puts(out, "}");
}

void stub_metrics(void *arg, struct strbuf *out)
{
	struct stub *st = arg;

	strbuf_puts(out, "# HELP coordfs_uptime_seconds Seconds since mount.\n"
			 "# TYPE coordfs_uptime_seconds gauge\ncoordfs_uptime_seconds 12.5\n");
	remote_metrics(st->cli, st->srv, out);
}

/* Held: the first 3 bytes of file 0 (a.txt) only. */
/* Ready (answered on the event loop): a.txt and dir/big.bin, whose later
 * slices still go to a worker. */
bool stub_ready(void *arg, const char *relpath)
{
	(void)arg;
	return !strcmp(relpath, "a.txt") || !strcmp(relpath, "dir/big.bin");
}

bool stub_held(void *arg, uint32_t file_id, uint64_t off)
{
	(void)arg;
	return file_id == 0 && off < 3;
}

static const struct remote_server_ops stub_ops = {
    .resolve = stub_resolve,
    .held = stub_held,
    .ready = stub_ready,
    .read = stub_read,
    .stats_json = stub_stats,
    .metrics = stub_metrics,
    .etag = stub_etag,
};

struct remote_server *start_server_at(const char *hostport, const char *secret,
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

struct remote_server *start_server(const char *secret, unsigned *port)
{
	return start_server_at("127.0.0.1:0", secret, port);
}

struct remote_peers *peers_for_port(unsigned port)
{
	char list[64], err[256];
	struct remote_peers *p = NULL;

	snprintf(list, sizeof(list), "http://127.0.0.1:%u", port);
	ck_assert_int_eq(remote_peers_parse(list, &p, err, sizeof(err)), 0);
	return p;
}

/* Send one raw request (the target exactly as given, which curl would
 * normalize) and read the whole answer. Returns the status or -errno. */
int http_raw(unsigned port, const char *method, const char *target, const char *headers,
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
const char *header_value(const struct strbuf *resp, const char *name, char *val, size_t cap)
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

const char *body_of(const struct strbuf *resp, size_t *len)
{
	const char *b = strstr(resp->buf, "\r\n\r\n");

	ck_assert_ptr_nonnull(b);
	b += 4;
	*len = resp->len - (size_t)(b - resp->buf);
	return b;
}

/* A path resolve may see: relative, no empty, "." or ".." component. */
bool path_is_contained(const char *p)
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

int main(void)
{
	Suite *s = suite_create("remote");
	TCase *tc = tcase_create("core");
	TCase *net = tcase_create("http");

	signal(SIGPIPE, SIG_IGN);
	if (remote_global_init() != 0)
		return 1;
	tcase_set_tags(tc, "core");
	tcase_set_tags(net, "http");
	tcase_add_checked_fixture(net, stub_setup, stub_teardown);
	tcase_set_timeout(net, 60);
	remote_peers_tests(tc, net);
	remote_http_tests(net);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, net);

	/* The client's cases apart (meson test remote_client), so that the
	 * waits on deadlines of both halves overlap. */
	TCase *cli = tcase_create("client");

	tcase_set_tags(cli, "client");
	tcase_add_checked_fixture(cli, stub_setup, stub_teardown);
	tcase_set_timeout(cli, 60);
	remote_client_tests(tc, cli);
	suite_add_tcase(s, cli);

	/* The server's threading (meson test remote_scale: CK_INCLUDE_TAGS=scale). */
	TCase *scale = tcase_create("scale");

	tcase_set_tags(scale, "scale");
	tcase_add_checked_fixture(scale, stub_setup, stub_teardown);
	tcase_set_timeout(scale, 60);
	remote_scale_tests(scale);
	suite_add_tcase(s, scale);

	int rc = check_run(s);

	remote_global_cleanup();
	return rc;
}
