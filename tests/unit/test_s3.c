/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the S3 client (remote/s3/s3_int.h) beyond its parsers
 * (test_s3_parse.c, run from here): the connection pool's per-thread
 * handles, remote_s3_create's configuration checks and URL building (no
 * request made), the credential chain's rules (credential_process, the
 * container endpoint), wiped frees; and against a scripted server of its
 * own on loopback, the checks of a ranged GET that keep the wrong bytes
 * out: If-Match sent, the answer's ETag and total size checked, a 503
 * retried. The real-server behaviour is tests/integration/test_s3_client.py's.
 */
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/deadline.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "remote/http.h"
#include "remote/remote.h"
#include "remote/s3.h"
#include "remote/s3/s3_int.h"
#include "tests/unit/check_run.h"
#include "tests/unit/test_s3.h"

/* ---- pool ------------------------------------------------------------- */

struct thread_arg {
	struct remote_http *pool;
	CURL *got;
	_Atomic int done;
};

static void *thread_get(void *arg)
{
	struct thread_arg *t = arg;

	t->got = remote_http_get(t->pool);
	atomic_store(&t->done, 1);
	return NULL;
}

START_TEST(test_pool_handles)
{
	struct remote_http *pool;
	struct thread_arg a = {0};
	pthread_t ta;

	ck_assert_int_eq(remote_http_create(2, &pool), 0);
	CURL *one = remote_http_get(pool), *two = remote_http_get(pool);

	ck_assert_ptr_nonnull(one);
	ck_assert_ptr_nonnull(two);
	ck_assert_ptr_ne(one, two);
	/* The pool is exhausted: a third checkout waits for a handle back. */
	a.pool = pool;
	ck_assert_int_eq(pthread_create(&ta, NULL, thread_get, &a), 0);
	usleep(200 * 1000);
	ck_assert_int_eq(atomic_load(&a.done), 0);
	remote_http_put(pool, two);
	ck_assert_int_eq(pthread_join(ta, NULL), 0);
	ck_assert_ptr_eq(a.got, two); /* the same handle, connections and all */
	/* Last in, first out: the warmest handle goes out again. */
	remote_http_put(pool, one);
	remote_http_put(pool, a.got);
	ck_assert_ptr_eq(remote_http_get(pool), two);
	remote_http_put(pool, two);
	remote_http_put(pool, NULL);
	/* A handle outside the pool never counts against it. */
	CURL *extra = remote_http_new(pool);
	ck_assert_ptr_nonnull(extra);
	curl_easy_cleanup(extra);
	remote_http_destroy(pool);
	remote_http_destroy(NULL);
}
END_TEST

/* ---- create: configuration and URLs ----------------------------------- */

static void clear_aws_env(void)
{
	const char *vars[] = {"AWS_ACCESS_KEY_ID",
			      "AWS_SECRET_ACCESS_KEY",
			      "AWS_SESSION_TOKEN",
			      "AWS_PROFILE",
			      "AWS_REGION",
			      "AWS_DEFAULT_REGION",
			      "AWS_CONTAINER_CREDENTIALS_FULL_URI",
			      "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
			      "AWS_EC2_METADATA_SERVICE_ENDPOINT"};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/coordfs-test/credentials", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/coordfs-test/config", 1);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

static int create(const struct remote_s3_config *cfg, struct remote_s3 **s, char *err)
{
	struct remote_http *pool;

	ck_assert_int_eq(remote_http_create(4, &pool), 0);
	int r = remote_s3_create(cfg, pool, s, err, 256);

	if (r)
		remote_http_destroy(pool);
	return r;
}

static void destroy(struct remote_s3 *s)
{
	struct remote_http *pool = s->http;

	remote_s3_destroy(s);
	remote_http_destroy(pool);
}

/* ---- a scripted server: the checks of a GET ---------------------------- */

/* Answers requests on loopback with the scripted responses, in order (the
 * last one repeats), keeping each request's head for the test to read. */
struct script {
	int fd;
	unsigned port;
	const char *const *answers;
	unsigned nanswers;
	_Atomic unsigned served;
	char heads[8][2048];
	pthread_t thread;
};

static void *script_run(void *arg)
{
	struct script *sc = arg;
	int c;

	while ((c = accept(sc->fd, NULL, NULL)) >= 0) {
		char buf[4096];
		size_t got = 0;

		for (;;) {
			ssize_t n = recv(c, buf + got, sizeof(buf) - 1 - got, 0);
			if (n <= 0)
				break;
			got += (size_t)n;
			buf[got] = '\0';
			char *end = strstr(buf, "\r\n\r\n");
			if (!end)
				continue;
			unsigned i = atomic_fetch_add(&sc->served, 1);
			if (i < 8)
				snprintf(sc->heads[i], sizeof(sc->heads[i]), "%.*s", (int)(end - buf), buf);
			const char *a = sc->answers[i < sc->nanswers ? i : sc->nanswers - 1];
			(void)send(c, a, strlen(a), MSG_NOSIGNAL);
			got -= (size_t)(end + 4 - buf);
			memmove(buf, end + 4, got);
		}
		close(c);
	}
	return NULL;
}

static void script_start(struct script *sc, const char *const *answers, unsigned n)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);

	memset(sc, 0, sizeof(*sc));
	sc->answers = answers;
	sc->nanswers = n;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sc->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(sc->fd, 0);
	ck_assert_int_eq(bind(sc->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(sc->fd, 8), 0);
	ck_assert_int_eq(getsockname(sc->fd, (struct sockaddr *)&sa, &sl), 0);
	sc->port = ntohs(sa.sin_port);
	ck_assert_int_eq(pthread_create(&sc->thread, NULL, script_run, sc), 0);
}

static void script_stop(struct script *sc)
{
	shutdown(sc->fd, SHUT_RDWR);
	close(sc->fd);
	pthread_join(sc->thread, NULL);
}

/* One GET of bytes 2-5 of "obj" (listed with ETag "e1", 10 bytes) against
 * the script: what remote_s3_get returned, the body in out. */
static ssize_t scripted_get(struct script *sc, char out[4])
{
	char err[256], endpoint[64];
	struct remote_s3 *s;

	clear_aws_env();
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%u", sc->port);
	struct remote_s3_config cfg = {.bucket = "bkt", .endpoint = endpoint, .no_sign = true,
				       .max_retries = 2, .backoff_base_ms = 1,
				       .backoff_cap_ms = 5, .timeout_ms = 5000};
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ssize_t n = remote_s3_get(s, "obj", "\"e1\"", 10, 2, 4, out);
	destroy(s);
	return n;
}

#define ANSWER(status, etag, range, body)                                                       \
	"HTTP/1.1 " status "\r\nETag: " etag "\r\nContent-Range: bytes " range                 \
	"\r\nContent-Length: 4\r\n\r\n" body

START_TEST(test_get_checks)
{
	static const char *const good[] = {ANSWER("206 Partial Content", "\"e1\"", "2-5/10", "cdef")};
	static const char *const other_etag[] = {
	    ANSWER("206 Partial Content", "\"e2\"", "2-5/10", "XXXX")};
	static const char *const other_size[] = {
	    ANSWER("206 Partial Content", "\"e1\"", "2-5/11", "XXXX")};
	static const char *const busy_then_good[] = {
	    "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n",
	    ANSWER("206 Partial Content", "\"e1\"", "2-5/10", "cdef")};
	struct script sc;
	char out[4];

	/* The listed ETag goes out as If-Match; a right answer is taken. */
	script_start(&sc, good, 1);
	ck_assert_int_eq(scripted_get(&sc, out), 4);
	ck_assert_int_eq(memcmp(out, "cdef", 4), 0);
	ck_assert_msg(strcasestr(sc.heads[0], "\nIf-Match: \"e1\"") != NULL, "request: %s",
		      sc.heads[0]);
	ck_assert_msg(strcasestr(sc.heads[0], "\nRange: bytes=2-5") != NULL, "request: %s",
		      sc.heads[0]);
	script_stop(&sc);
	/* An answer about another version (ETag, or total size): -ESTALE,
	 * whatever the server says of If-Match, and not retried. */
	script_start(&sc, other_etag, 1);
	ck_assert_int_eq(scripted_get(&sc, out), -ESTALE);
	ck_assert_uint_eq(atomic_load(&sc.served), 1);
	script_stop(&sc);
	script_start(&sc, other_size, 1);
	ck_assert_int_eq(scripted_get(&sc, out), -ESTALE);
	script_stop(&sc);
	/* 503 (throttling) is retried, and the retry's answer taken. */
	script_start(&sc, busy_then_good, 2);
	ck_assert_int_eq(scripted_get(&sc, out), 4);
	ck_assert_int_eq(memcmp(out, "cdef", 4), 0);
	ck_assert_uint_eq(atomic_load(&sc.served), 2);
	script_stop(&sc);
}
END_TEST

START_TEST(test_create_urls)
{
	struct remote_s3 *s;
	char err[256];

	clear_aws_env();
	setenv("AWS_ACCESS_KEY_ID", "AK", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);

	struct remote_s3_config cfg = {.bucket = "bkt", .prefix = "a/b", .region = "eu-west-3"};

	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "https://bkt.s3.eu-west-3.amazonaws.com/");
	ck_assert_str_eq(s->prefix, "a/b/");
	ck_assert_str_eq(s->sigv4, "aws:amz:eu-west-3:s3");
	destroy(s);

	cfg = (struct remote_s3_config){.bucket = "my.bucket"};
	setenv("AWS_REGION", "us-west-2", 1);
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "https://s3.us-west-2.amazonaws.com/my.bucket/");
	ck_assert_str_eq(s->prefix, "");
	destroy(s);
	unsetenv("AWS_REGION");

	cfg = (struct remote_s3_config){
	    .bucket = "bkt", .endpoint = "http://127.0.0.1:9000/", .prefix = "x/"};
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "http://127.0.0.1:9000/bkt/");
	ck_assert_str_eq(s->prefix, "x/");
	ck_assert_str_eq(s->region, "us-east-1");
	destroy(s);

	cfg.addressing = REMOTE_S3_ADDR_VIRTUAL;
	cfg.endpoint = "https://minio.example:443";
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	ck_assert_str_eq(s->bucket_url, "https://bkt.minio.example:443/");
	destroy(s);
}
END_TEST

START_TEST(test_create_errors)
{
	struct remote_s3 *s = NULL;
	char err[256];

	clear_aws_env();
	setenv("AWS_ACCESS_KEY_ID", "AK", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SUPERSECRET", 1);
	struct remote_s3_config cfg = {.bucket = "a/b"};

	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	ck_assert(strstr(err, "bucket"));
	cfg.bucket = "ab";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	cfg.bucket = "bkt";
	const char *eps[] = {"ftp://x",	     "http://", "http://h/path",
			     "http://u:p@h", "h:80",	"http://h?x"};
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
		cfg.endpoint = eps[i];
		ck_assert_msg(create(&cfg, &s, err) == -EINVAL, "%s", eps[i]);
		ck_assert(strstr(err, "--endpoint"));
	}
	cfg.endpoint = NULL;
	cfg.region = "eu west";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	cfg.region = NULL;
	cfg.prefix = "/abs";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	cfg.prefix = NULL;

	/* half the key pair */
	unsetenv("AWS_SECRET_ACCESS_KEY");
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	ck_assert(strstr(err, "AWS_SECRET_ACCESS_KEY"));
	/* nothing at all, instance role disabled */
	unsetenv("AWS_ACCESS_KEY_ID");
	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert(strstr(err, "--no-sign-request"));
	/* a named profile that exists nowhere */
	cfg.profile = "ghost";
	ck_assert_int_eq(create(&cfg, &s, err), -EINVAL);
	ck_assert(strstr(err, "ghost"));
	/* anonymous needs nothing */
	cfg.profile = NULL;
	cfg.no_sign = true;
	ck_assert_int_eq(create(&cfg, &s, err), 0);
	/* argument checks of get, no request made */
	char buf[4];

	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"", 10, 0, 0, buf), 0);
	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"", 10, 8, 4, buf), -EINVAL);
	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"", 10, 11, 0, buf), -EINVAL);
	ck_assert_int_eq(remote_s3_get(s, "", "\"e\"", 10, 0, 1, buf), -EINVAL);
	ck_assert_int_eq(remote_s3_get(s, "k", "\"e\"\r\nX: y", 10, 0, 1, buf), -EINVAL);
	destroy(s);
}
END_TEST

/* A credentials file holding ini at path (a mkstemp template), named by
 * AWS_SHARED_CREDENTIALS_FILE with no config file: the chain's only profile. */
static void use_credentials_file(char *path, const char *ini)
{
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
	close(fd);
	clear_aws_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
}

/* A credential_process that prints more than 64 KiB (here forever) is
 * killed and its pipe closed before the wait: create fails at once. It
 * used to wait for a child blocked on its full pipe, for ever. */
START_TEST(test_credential_process_flood)
{
	struct remote_s3 *s = NULL;
	char err[256], path[] = "/tmp/coordfs-cred-XXXXXX";

	use_credentials_file(path, "[default]\ncredential_process = yes "
			     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n");
	struct remote_s3_config cfg = {.bucket = "bkt"};
	int64_t t0 = deadline_now_ms();

	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert_int_lt(deadline_now_ms() - t0, 10000);
	ck_assert_msg(strstr(err, "more than 64 KiB"), "%s", err);
	/* the child is gone: no zombie, no running process left */
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	unlink(path);
}
END_TEST

/* A credential_process whose document has already expired: the mount
 * fails at once saying so (it used to install them, then fail every
 * request with the server's refusal or a bare EACCES). */
START_TEST(test_credential_process_expired)
{
	struct remote_s3 *s = NULL;
	char err[256], path[] = "/tmp/coordfs-cred-XXXXXX";

	use_credentials_file(path, "[default]\ncredential_process = printf "
			     "'{\"Version\":1,\"AccessKeyId\":\"a\",\"SecretAccessKey\":\"s\","
			     "\"SessionToken\":\"t\",\"Expiration\":\"2020-01-01T00:00:00Z\"}'\n");
	struct remote_s3_config cfg = {.bucket = "bkt"};

	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert_msg(strstr(err, "credential_process") && strstr(err, "expired"), "%s", err);
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	unlink(path);
}
END_TEST

/* The profile files are run from (credential_process) by a daemon that
 * is often root: one another user owns (root's HOME kept pointing at
 * theirs, as sudo -E does) or that others may write is refused, its
 * command never run; a FIFO there fails at once instead of blocking. */
START_TEST(test_foreign_profile_files)
{
	struct remote_s3 *s = NULL;
	char err[256], dir[] = "/tmp/coordfs-cred-XXXXXX", ini_path[64], ran[64], ini[256];
	struct remote_s3_config cfg = {.bucket = "bkt"};

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(ini_path, sizeof(ini_path), "%s/config", dir);
	snprintf(ran, sizeof(ran), "%s/ran", dir);
	snprintf(ini, sizeof(ini), "[default]\ncredential_process = touch %s\n", ran);
	int fd = open(ini_path, O_WRONLY | O_CREAT | O_EXCL, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
	close(fd);
	clear_aws_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
	setenv("AWS_CONFIG_FILE", ini_path, 1);

	ck_assert_int_eq(chmod(ini_path, 0666), 0);
	ck_assert_int_lt(create(&cfg, &s, err), 0);
	ck_assert_msg(strstr(err, "others may write it"), "%s", err);
	ck_assert_int_eq(access(ran, F_OK), -1);
	ck_assert_int_eq(chmod(ini_path, 0644), 0);
	/* Only root can give a file away. */
	if (geteuid() == 0) {
		ck_assert_int_eq(chown(ini_path, 65534, 65534), 0);
		ck_assert_int_lt(create(&cfg, &s, err), 0);
		ck_assert_msg(strstr(err, "belongs to another user"), "%s", err);
		ck_assert_int_eq(access(ran, F_OK), -1);
	} else {
		fprintf(stderr, "test_foreign_profile_files: not root, another user's file "
				"not tried\n");
	}
	unlink(ini_path);
	ck_assert_int_eq(mkfifo(ini_path, 0600), 0);
	int64_t t0 = deadline_now_ms();
	ck_assert_int_lt(create(&cfg, &s, err), 0);
	ck_assert_int_lt(deadline_now_ms() - t0, 10000);
	ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
	unlink(ini_path);
	rmdir(dir);
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
}
END_TEST

/* credential_process is split without a shell and without expanding
 * anything (wordexp expanded $VARS, ~ and globs); container credentials
 * go only where the AWS SDKs send them, and a token cannot add headers. */
START_TEST(test_split_command)
{
	char **v;
	size_t n;
	const char *why;

	ck_assert_int_eq(remote__s3_split_command("  a 'b c' \"d \\\" e\" f\\ g $HOME ~ *  ",
						  &v, &n, &why), 0);
	ck_assert_uint_eq(n, 7);
	ck_assert_str_eq(v[0], "a");
	ck_assert_str_eq(v[1], "b c");
	ck_assert_str_eq(v[2], "d \" e");
	ck_assert_str_eq(v[3], "f g");
	ck_assert_str_eq(v[4], "$HOME");
	ck_assert_str_eq(v[5], "~");
	ck_assert_str_eq(v[6], "*");
	ck_assert_ptr_null(v[7]);
	remote__s3_argv_free(v);
	ck_assert_int_eq(remote__s3_split_command("x'y'\"z\"", &v, &n, &why), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(v[0], "xyz");
	remote__s3_argv_free(v);
	static const char *const bad[] = {"a | b", "a; b", "a > f", "$(x)", "`x`", "a 'b",
					  "a \"b", "", "   ", "a & b", "a\nb"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(remote__s3_split_command(bad[i], &v, &n, &why) == -EINVAL && why,
			      "accepted: %s", bad[i]);
	/* quoted, they are just bytes */
	ck_assert_int_eq(remote__s3_split_command("a '|;&' \"$(x)\"", &v, &n, &why), 0);
	ck_assert_str_eq(v[1], "|;&");
	ck_assert_str_eq(v[2], "$(x)");
	remote__s3_argv_free(v);
}
END_TEST

START_TEST(test_container_uri)
{
	static const char *const ok[] = {
	    "http://127.0.0.1:8080/creds", "http://127.1.2.3/x", "http://localhost:9/c",
	    "http://[::1]:80/c", "http://169.254.170.2/v2/creds", "http://169.254.170.23/v1",
	    "http://[fd00:ec2::23]/v1", "https://creds.example.com/x", "HTTP://127.0.0.1/"};
	static const char *const bad[] = {
	    "http://10.0.0.1/creds", "http://169.254.169.254/latest", "http://example.com/c",
	    "http://127.0.0.1.evil.com/c", "http://user@127.0.0.1/c", "http://[::2]/c",
	    "ftp://127.0.0.1/c", "http://128.0.0.1/", "http://127.0.0.256/", "file:///etc/x",
	    "http://localhost.evil/", "https://u@h/x"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		ck_assert_msg(remote__s3_container_uri_ok(ok[i]), "refused %s", ok[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!remote__s3_container_uri_ok(bad[i]), "accepted %s", bad[i]);
}
END_TEST

/* Through remote_s3_create: the rules hold before any request is made. */
START_TEST(test_container_and_process_rules)
{
	struct remote_s3 *s = NULL;
	char err[256];
	struct remote_s3_config cfg = {.bucket = "bkt"};

	clear_aws_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.1.2.3:9/creds", 1);
	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert_msg(strstr(err, "loopback"), "%s", err);
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds", 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok\r\nX-Injected: 1", 1);
	ck_assert_int_eq(create(&cfg, &s, err), -EACCES);
	ck_assert_msg(strstr(err, "line break"), "%s", err);
	ck_assert_msg(!strstr(err, "Injected"), "%s", err);
	unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");

	/* $HOME reaches the command as written */
	char path[] = "/tmp/coordfs-cred-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	const char *ini = "[default]\ncredential_process = printf "
			  "'{\"Version\":1,\"AccessKeyId\":\"%s\",\"SecretAccessKey\":\"s\"}' $HOME\n";
	ck_assert_int_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
	close(fd);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("HOME", "/expanded", 1);
	ck_assert_msg(create(&cfg, &s, err) == 0, "%s", err);
	struct s3_creds cr;
	ck_assert_int_eq(remote__s3_cred_get(s->cred, &cr), 0);
	ck_assert_str_eq(cr.access_key, "$HOME");
	destroy(s);
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	unlink(path);
}
END_TEST

/* What libcurl and jansson free is wiped first: their copies of the
 * session token header, of the key and secret, and the parse tree of a
 * credential document all go through the wiping free. */
START_TEST(test_frees_are_wiped)
{
	uint64_t n0 = remote__wiped_frees();
	struct curl_slist *h = curl_slist_append(NULL, "x-amz-security-token: SECRET-TOKEN");

	ck_assert_ptr_nonnull(h);
	curl_slist_free_all(h);
	uint64_t n1 = remote__wiped_frees();
	ck_assert_uint_ge(n1, n0 + 2); /* the node and its string */

	CURL *e = curl_easy_init();
	ck_assert_ptr_nonnull(e);
	curl_easy_setopt(e, CURLOPT_USERNAME, "AKIDEXAMPLE");
	curl_easy_setopt(e, CURLOPT_PASSWORD, "wJalrXUtnFEMI");
	curl_easy_cleanup(e);
	uint64_t n2 = remote__wiped_frees();
	ck_assert_uint_ge(n2, n1 + 2);

	struct s3_creds cr;
	const char *doc = "{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"}";
	ck_assert_int_eq(remote__s3_cred_json(doc, strlen(doc), &cr), 0);
	ck_assert_uint_gt(remote__wiped_frees(), n2); /* the parse tree */
	explicit_bzero(&cr, sizeof(cr));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("s3");
	TCase *tc = tcase_create("s3");

	log_set_level(LOG_CRIT);
	remote_global_init();
	s3_parse_tests(tc);
	tcase_add_test(tc, test_pool_handles);
	tcase_add_test(tc, test_create_urls);
	tcase_add_test(tc, test_get_checks);
	tcase_add_test(tc, test_create_errors);
	tcase_add_test(tc, test_credential_process_flood);
	tcase_add_test(tc, test_credential_process_expired);
	tcase_add_test(tc, test_foreign_profile_files);
	tcase_add_test(tc, test_split_command);
	tcase_add_test(tc, test_container_uri);
	tcase_add_test(tc, test_container_and_process_rules);
	tcase_add_test(tc, test_frees_are_wiped);
	suite_add_tcase(s, tc);
	return check_run(s);
}
