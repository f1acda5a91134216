/* SPDX-License-Identifier: MIT */
/*
 * s3_cli: drives the S3 client library (remote/s3.h) for the integration
 * test tests/integration/test_s3_client.py, one command per stdin line,
 * one answer per command on stdout (flushed), so a test can keep one
 * client (one connection pool, one credential cache) across steps:
 *
 *   list PARALLEL        -> "ok N" then N lines "KEY<TAB>SIZE<TAB>ETAG<TAB>MTIME_NS"
 *   get KEY ETAG SIZE OFF LEN   (KEY percent-encoded)
 *                        -> "ok LEN HEX" (the bytes, hex) or "err -ERRNO"
 *   pget THREADS ROUNDS KEY ETAG SIZE
 *                        -> THREADS threads start together and read the
 *                           object 1+2*ROUNDS times each (whole, then a
 *                           moving range); every read must equal every
 *                           other: "ok SIZE HEX" (the bytes) or "err -ERRNO"
 *   stats                -> "ok requests R retries T errors E bytes B fetches F"
 *   quit
 *
 * Failures answer "err -ERRNO MESSAGE". Usage:
 *   s3_cli [--endpoint=URL] [--region=R] [--profile=P] [--no-sign]
 *          [--addressing=path|virtual] [--retries=N] [--timeout-ms=N]
 *          [--connect-timeout-ms=N] [--backoff-base-ms=N] [--backoff-cap-ms=N]
 *          [--list-timeout-ms=N] [--list-max-keys=N] [--list-max-bytes=N]
 *          [-v] BUCKET[/PREFIX]
 * A failed create prints "err -ERRNO MESSAGE" and exits 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "remote/http.h"
#include "remote/remote.h"
#include "remote/s3.h"
#include "remote/s3/s3_int.h"

/* %XX-decode a command argument (any byte but NUL; the peer path decoder
 * refuses control bytes, which S3 keys may hold). */
static int arg_decode(const char *in, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; in[i]; i++) {
		unsigned v;

		if (o + 1 >= cap)
			return -ENAMETOOLONG;
		if (in[i] == '%') {
			if (sscanf(in + i + 1, "%2x", &v) != 1 || v == 0 || !in[i + 1] ||
			    !in[i + 2])
				return -EINVAL;
			out[o++] = (char)v;
			i += 2;
		} else {
			out[o++] = in[i];
		}
	}
	out[o] = '\0';
	return 0;
}

struct listing {
	char **lines;
	size_t n, cap;
};

static int on_object(void *arg, const struct remote_s3_object *o)
{
	struct listing *l = arg;
	char *line;

	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 1024;
		char **nl = realloc(l->lines, ncap * sizeof(*nl));

		if (!nl)
			return -ENOMEM;
		l->lines = nl;
		l->cap = ncap;
	}
	if (asprintf(&line, "%s\t%" PRIu64 "\t%s\t%" PRId64, o->key, o->size, o->etag,
		     o->mtime_ns) < 0)
		return -ENOMEM;
	l->lines[l->n++] = line;
	return 0;
}

static void do_list(struct remote_s3 *s, unsigned parallel)
{
	struct listing l = {0};
	char err[512] = "";
	int r = remote_s3_list(s, parallel, on_object, &l, err, sizeof(err));

	if (r)
		printf("err %d %s\n", r, err);
	else
		printf("ok %zu\n", l.n);
	for (size_t i = 0; i < l.n; i++) {
		if (!r)
			printf("%s\n", l.lines[i]);
		free(l.lines[i]);
	}
	free(l.lines);
}

static void do_get(struct remote_s3 *s, char *args)
{
	char raw[3 * REMOTE_S3_MAX_KEY + 1], key[REMOTE_S3_MAX_KEY + 1];
	char etag[REMOTE_S3_MAX_ETAG + 1];
	uint64_t size, off, len;

	if (sscanf(args, "%3072s %128s %" SCNu64 " %" SCNu64 " %" SCNu64, raw, etag, &size, &off,
		   &len) != 5 ||
	    len > (256u << 20) || arg_decode(raw, key, sizeof(key))) {
		printf("err %d bad get arguments\n", -EINVAL);
		return;
	}
	unsigned char *buf = malloc(len ? len : 1);

	if (!buf) {
		printf("err %d\n", -ENOMEM);
		return;
	}
	ssize_t n = remote_s3_get(s, key, etag, size, off, len, buf);

	if (n < 0) {
		printf("err %zd\n", n);
	} else {
		printf("ok %zd ", n);
		for (ssize_t i = 0; i < n; i++)
			printf("%02x", buf[i]);
		printf("\n");
	}
	free(buf);
}

struct pget {
	struct remote_s3 *s;
	const char *key, *etag;
	uint64_t size;
	unsigned rounds;
	pthread_barrier_t *start; /* every thread's first read at once */
	unsigned char *first;	  /* this thread's first read; later reads must equal it */
	int result;
};

static void *pget_thread(void *arg)
{
	struct pget *g = arg;
	unsigned char *buf = malloc(g->size ? g->size : 1);

	g->first = malloc(g->size ? g->size : 1);
	pthread_barrier_wait(g->start);
	if (!buf || !g->first) {
		g->result = -ENOMEM;
		free(buf);
		return NULL;
	}
	ssize_t n = remote_s3_get(g->s, g->key, g->etag, g->size, 0, g->size, g->first);

	g->result = n == (ssize_t)g->size ? 0 : n < 0 ? (int)n : -EIO;
	for (unsigned i = 0; i < g->rounds && !g->result; i++) {
		/* the whole object, then a range that moves each round */
		uint64_t off = g->size ? (i * 7919u) % g->size : 0;
		uint64_t len = g->size - off;

		n = remote_s3_get(g->s, g->key, g->etag, g->size, 0, g->size, buf);
		if (n != (ssize_t)g->size || memcmp(buf, g->first, g->size)) {
			g->result = n < 0 ? (int)n : -EIO;
			break;
		}
		n = remote_s3_get(g->s, g->key, g->etag, g->size, off, len, buf);
		if (n != (ssize_t)len || memcmp(buf, g->first + off, len))
			g->result = n < 0 ? (int)n : -EIO;
	}
	free(buf);
	return NULL;
}

/* pget THREADS ROUNDS KEY ETAG SIZE: THREADS threads start together and
 * read the object 1+2*ROUNDS times each; every read must return the same
 * bytes as every other. */
static void do_pget(struct remote_s3 *s, char *args)
{
	char raw[3 * REMOTE_S3_MAX_KEY + 1], key[REMOTE_S3_MAX_KEY + 1];
	char etag[REMOTE_S3_MAX_ETAG + 1];
	unsigned threads, rounds;
	uint64_t size;

	if (sscanf(args, "%u %u %3072s %128s %" SCNu64, &threads, &rounds, raw, etag, &size) != 5 ||
	    threads == 0 || threads > 64 || size > (64u << 20) ||
	    arg_decode(raw, key, sizeof(key))) {
		printf("err %d bad pget arguments\n", -EINVAL);
		return;
	}
	struct pget g[64];
	pthread_t tid[64];
	pthread_barrier_t start;
	int result = 0;

	pthread_barrier_init(&start, NULL, threads);
	for (unsigned i = 0; i < threads; i++) {
		g[i] = (struct pget){s, key, etag, size, rounds, &start, NULL, 0};
		if (pthread_create(&tid[i], NULL, pget_thread, &g[i]) != 0) {
			/* the barrier would never open: give up, loudly */
			fprintf(stderr, "s3_cli: pthread_create failed\n");
			exit(3);
		}
	}
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		if (g[i].result && !result)
			result = g[i].result;
	}
	pthread_barrier_destroy(&start);
	for (unsigned i = 1; i < threads && !result; i++)
		if (memcmp(g[i].first, g[0].first, size))
			result = -EIO;
	if (result) {
		printf("err %d\n", result);
	} else {
		printf("ok %" PRIu64 " ", size);
		for (uint64_t i = 0; i < size; i++)
			printf("%02x", g[0].first[i]);
		printf("\n");
	}
	for (unsigned i = 0; i < threads; i++)
		free(g[i].first);
}

static unsigned opt_uint(const char *arg, const char *name)
{
	return (unsigned)strtoul(arg + strlen(name), NULL, 10);
}

int main(int argc, char **argv)
{
	struct remote_s3_config cfg = {0};
	struct remote_http *pool = NULL;
	struct remote_s3 *s = NULL;
	char err[512] = "", line[4096];
	const char *target = NULL;

	log_set_level(LOG_WARNING);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strncmp(a, "--endpoint=", 11))
			cfg.endpoint = a + 11;
		else if (!strncmp(a, "--region=", 9))
			cfg.region = a + 9;
		else if (!strncmp(a, "--profile=", 10))
			cfg.profile = a + 10;
		else if (!strcmp(a, "--no-sign"))
			cfg.no_sign = true;
		else if (!strcmp(a, "--addressing=path"))
			cfg.addressing = REMOTE_S3_ADDR_PATH;
		else if (!strcmp(a, "--addressing=virtual"))
			cfg.addressing = REMOTE_S3_ADDR_VIRTUAL;
		else if (!strncmp(a, "--retries=", 10))
			cfg.max_retries = opt_uint(a, "--retries=");
		else if (!strncmp(a, "--timeout-ms=", 13))
			cfg.timeout_ms = opt_uint(a, "--timeout-ms=");
		else if (!strncmp(a, "--connect-timeout-ms=", 21))
			cfg.connect_timeout_ms = opt_uint(a, "--connect-timeout-ms=");
		else if (!strncmp(a, "--backoff-base-ms=", 18))
			cfg.backoff_base_ms = opt_uint(a, "--backoff-base-ms=");
		else if (!strncmp(a, "--backoff-cap-ms=", 17))
			cfg.backoff_cap_ms = opt_uint(a, "--backoff-cap-ms=");
		else if (!strncmp(a, "--list-timeout-ms=", 18))
			cfg.list_timeout_ms = opt_uint(a, "--list-timeout-ms=");
		else if (!strncmp(a, "--list-max-keys=", 16))
			cfg.list_max_keys = strtoull(a + 16, NULL, 10);
		else if (!strncmp(a, "--list-max-bytes=", 17))
			cfg.list_max_bytes = strtoull(a + 17, NULL, 10);
		else if (!strcmp(a, "-v"))
			log_set_level(LOG_DEBUG);
		else if (a[0] != '-' && !target)
			target = a;
		else {
			fprintf(stderr, "s3_cli: unknown argument %s\n", a);
			return 2;
		}
	}
	if (!target) {
		fprintf(stderr, "usage: s3_cli [options] BUCKET[/PREFIX]\n");
		return 2;
	}
	char *bucket = strdup(target), *slash = strchr(bucket, '/');

	if (slash) {
		*slash = '\0';
		cfg.prefix = slash + 1;
	}
	cfg.bucket = bucket;
	if (remote_global_init() || remote_http_create(0, &pool)) {
		printf("err %d init\n", -EIO);
		return 1;
	}
	int r = remote_s3_create(&cfg, pool, &s, err, sizeof(err));

	if (r) {
		printf("err %d %s\n", r, err);
		fflush(stdout);
		remote_http_destroy(pool);
		free(bucket);
		return 1;
	}
	printf("ok ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "list", 4)) {
			do_list(s, (unsigned)strtoul(line + 4, NULL, 10));
		} else if (!strncmp(line, "pget ", 5)) {
			do_pget(s, line + 5);
		} else if (!strncmp(line, "get ", 4)) {
			do_get(s, line + 4);
		} else if (!strcmp(line, "stats")) {
			struct remote_s3_stats st;

			remote_s3_get_stats(s, &st);
			printf("ok requests %" PRIu64 " retries %" PRIu64 " errors %" PRIu64
			       " bytes %" PRIu64 " fetches %u p50 %.3f p99 %.3f\n",
			       st.requests, st.retries, st.errors, st.bytes,
			       remote__s3_cred_fetches(s->cred), st.latency_p50_ms,
			       st.latency_p99_ms);
		} else if (!strcmp(line, "quit")) {
			break;
		} else {
			printf("err %d unknown command\n", -EINVAL);
		}
		fflush(stdout);
	}
	remote_s3_destroy(s);
	remote_http_destroy(pool);
	remote_global_cleanup();
	free(bucket);
	return 0;
}
