/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the S3 source glue (fs/source_s3.c) against a fake S3
 * client: this file defines the remote/s3.h and remote/http.h functions
 * the glue calls, records their arguments and answers from a fixed
 * listing. Checks: options reach the client's configuration, the listing
 * becomes the namespace (bad keys skipped and counted), no client outlives
 * the listing (it happens before the daemon forks), reads ask for the
 * object's key, listed ETag and size, and every failure is EIO.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/source.h"
#include "remote/http.h"
#include "remote/remote.h"
#include "remote/s3.h"
#include "tests/unit/check_run.h"

/* ---- the fake client ---- */

struct remote_http {
	int dummy;
};
struct remote_s3 {
	int dummy;
};

static struct {
	int live_clients, live_pools;
	char bucket[64], prefix[64], endpoint[64], region[64], profile[64];
	bool no_sign;
	enum remote_s3_addressing addressing;
	int list_rc;
	ssize_t get_rc;	  /* 0: answer the bytes */
	bool get_retries; /* the failing GET retried first */
	uint64_t retries;
	char key[256], etag[256];
	bool etag_null;
	uint64_t size, off;
	size_t len;
} fake;

static const struct remote_s3_object listing[] = {
    {"train/cat/1.jpg", 15, 1000, "\"0123456789abcdef0123456789abcdef\"", 5, NULL},
    {"train/dog/2.jpg", 15, 2000, "\"0123456789ABCDEF0123456789ABCDEF-3\"", 6, NULL},
    {"train//bad.jpg", 14, 10, "\"x\"", 7, NULL},
    {"top.bin", 7, 10 << 20, "\"etag-top\"", 8, NULL},
};

static int curl_inits; /* remote_global_init calls not yet cleaned up */

int remote_global_init(void)
{
	curl_inits++;
	return 0;
}

void remote_global_cleanup(void)
{
	ck_assert_int_gt(curl_inits, 0);
	curl_inits--;
}

int remote_http_create(unsigned max_connections, struct remote_http **out)
{
	*out = calloc(1, sizeof(**out));
	fake.live_pools++;
	return 0;
}

void remote_http_destroy(struct remote_http *h)
{
	if (h)
		fake.live_pools--;
	free(h);
}

static void copy(char *dst, const char *src)
{
	snprintf(dst, 64, "%s", src ? src : "(null)");
}

int remote_s3_create(const struct remote_s3_config *cfg, struct remote_http *pool,
		     struct remote_s3 **out, char *err, size_t errlen)
{
	ck_assert_ptr_nonnull(pool);
	copy(fake.bucket, cfg->bucket);
	copy(fake.prefix, cfg->prefix);
	copy(fake.endpoint, cfg->endpoint);
	copy(fake.region, cfg->region);
	copy(fake.profile, cfg->profile);
	fake.no_sign = cfg->no_sign;
	fake.addressing = cfg->addressing;
	*out = calloc(1, sizeof(**out));
	fake.live_clients++;
	return 0;
}

void remote_s3_destroy(struct remote_s3 *s)
{
	if (s)
		fake.live_clients--;
	free(s);
}

int remote_s3_list(struct remote_s3 *s, unsigned parallel, remote_s3_list_fn fn, void *arg,
		   char *err, size_t errlen)
{
	if (fake.list_rc) {
		snprintf(err, errlen, "bucket 'b': access denied (check the credentials)");
		return fake.list_rc;
	}
	for (size_t i = 0; i < sizeof(listing) / sizeof(listing[0]); i++) {
		int rc = fn(arg, &listing[i]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

ssize_t remote_s3_get(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
		      uint64_t off, size_t len, void *buf)
{
	snprintf(fake.key, sizeof(fake.key), "%s", key);
	fake.etag_null = !etag;
	snprintf(fake.etag, sizeof(fake.etag), "%s", etag ? etag : "");
	fake.size = size;
	fake.off = off;
	fake.len = len;
	if (fake.get_retries)
		fake.retries += 6;
	if (fake.get_rc)
		return fake.get_rc;
	memset(buf, 'x', len);
	return (ssize_t)len;
}

ssize_t remote_s3_get_by(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
			 uint64_t off, size_t len, void *buf, int64_t deadline_ms)
{
	(void)deadline_ms;
	return remote_s3_get(s, key, etag, size, off, len, buf);
}

void remote_s3_cancel(struct remote_s3 *s)
{
	(void)s;
}

void remote_s3_stop_all(void)
{
}

int remote_s3_check_get(struct remote_s3 *s, const char *key, const char *etag, uint64_t size,
			int64_t deadline_ms, char *err, size_t errlen)
{
	(void)s, (void)key, (void)etag, (void)size, (void)deadline_ms, (void)err, (void)errlen;
	return 0;
}

void remote_s3_get_stats(struct remote_s3 *s, struct remote_s3_stats *out)
{
	*out = (struct remote_s3_stats){.requests = 7,
					.retries = 2 + fake.retries,
					.errors = 1,
					.bytes = 9,
					.latency_p50_ms = 16.5,
					.latency_p99_ms = 80.25};
}

/* ---- tests ---- */

static struct fs_source *make(const char *url, const char *endpoint, const char *addressing)
{
	struct fs_source_s3_options o = {.url = url,
					 .endpoint = endpoint,
					 .region = "eu-west-1",
					 .profile = "p1",
					 .addressing = addressing,
					 .no_sign = true,
					 .uid = 1000,
					 .gid = 100,
					 .file_mode = 0444,
					 .dir_mode = 0555};
	struct fs_source *src = NULL;
	char err[256] = "";

	ck_assert_int_eq(fs_source_s3_create(&o, &src, err, sizeof(err)), 0);
	return src;
}

START_TEST(url_parsing)
{
	char *b, *p, err[256];

	ck_assert_int_eq(fs_source_s3_parse_url("s3://bkt", &b, &p, err, sizeof(err)), 0);
	ck_assert_str_eq(b, "bkt");
	ck_assert_str_eq(p, "");
	free(b);
	free(p);
	ck_assert_int_eq(fs_source_s3_parse_url("s3://bkt//a/b/", &b, &p, err, sizeof(err)), 0);
	ck_assert_str_eq(b, "bkt");
	ck_assert_str_eq(p, "a/b");
	free(b);
	free(p);
	static const char *const bad[] = {"s3://", "s3:///x", "s3://a b", "/data", "s3://a*b/x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_int_eq(fs_source_s3_parse_url(bad[i], &b, &p, err, sizeof(err)), -EINVAL);
		ck_assert_msg(strstr(err, bad[i]) != NULL, "'%s': %s", bad[i], err);
	}
	ck_assert(fs_source_is_s3("s3://x"));
	ck_assert(!fs_source_is_s3("/s3://x"));
}
END_TEST

START_TEST(options_reach_the_client)
{
	struct fs_source *src = make("s3://bkt/pre/fix/", "http://127.0.0.1:9", "path");
	struct ns ns;
	char err[256];

	ck_assert_str_eq(src->ops->kind, "s3");
	ck_assert_int_eq(src->ops->build_ns(src, &ns, 4 << 20, err, sizeof(err)), 0);
	ck_assert_str_eq(fake.bucket, "bkt");
	ck_assert_str_eq(fake.prefix, "pre/fix");
	ck_assert_str_eq(fake.endpoint, "http://127.0.0.1:9");
	ck_assert_str_eq(fake.region, "eu-west-1");
	ck_assert_str_eq(fake.profile, "p1");
	ck_assert(fake.no_sign);
	ck_assert_int_eq(fake.addressing, REMOTE_S3_ADDR_PATH);
	ns_fini(&ns);
	fs_source_destroy(src);

	src = make("s3://bkt", NULL, "virtual");
	ck_assert_int_eq(src->ops->build_ns(src, &ns, 4 << 20, err, sizeof(err)), 0);
	ck_assert_int_eq(fake.addressing, REMOTE_S3_ADDR_VIRTUAL);
	ck_assert_str_eq(fake.endpoint, "(null)");
	ns_fini(&ns);
	fs_source_destroy(src);
	src = make("s3://bkt", NULL, NULL);
	ck_assert_int_eq(src->ops->build_ns(src, &ns, 4 << 20, err, sizeof(err)), 0);
	ck_assert_int_eq(fake.addressing, REMOTE_S3_ADDR_AUTO);
	ns_fini(&ns);
	fs_source_destroy(src);

	struct fs_source_s3_options o = {.url = "s3://bkt", .endpoint = "ftp://x"};
	ck_assert_int_eq(fs_source_s3_create(&o, &src, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--endpoint"));
}
END_TEST

START_TEST(listing_becomes_namespace)
{
	struct fs_source *src = make("s3://bkt", NULL, NULL);
	struct fs_source_stats st;
	struct ns ns;
	char err[256], etag[128];
	uint32_t n;

	ck_assert_int_eq(src->ops->build_ns(src, &ns, 4 << 20, err, sizeof(err)), 0);
	/* The listing's client is gone before the daemon would fork. */
	ck_assert_int_eq(fake.live_clients, 0);
	ck_assert_int_eq(fake.live_pools, 0);
	ck_assert_int_eq(curl_inits, 0); /* every init cleaned up */
	ck_assert_uint_eq(ns.nfiles, 3);
	ck_assert_int_eq(ns_resolve(&ns, "train/cat/1.jpg", &n), 0);
	ck_assert_uint_eq(ns.nodes[n].uid, 1000);
	ck_assert_uint_eq(ns.nodes[n].gid, 100);
	ck_assert_uint_eq(ns.nodes[n].mode, S_IFREG | 0444);
	ck_assert_int_eq(ns.nodes[n].mtime_ns, 5);
	ck_assert_int_eq(src->ops->etag(src, &ns, n, etag, sizeof(etag)), 0);
	ck_assert_str_eq(etag, "\"0123456789abcdef0123456789abcdef\"");
	ck_assert_int_eq(ns_resolve(&ns, "train/dog/2.jpg", &n), 0);
	ck_assert_int_eq(src->ops->etag(src, &ns, n, etag, sizeof(etag)), 0);
	ck_assert_str_eq(etag, "\"0123456789ABCDEF0123456789ABCDEF-3\"");
	src->ops->get_stats(src, &st);
	ck_assert_uint_eq(st.skipped_keys, 1);
	ck_assert_uint_eq(st.requests, 0); /* no client yet */
	ns_fini(&ns);
	fs_source_destroy(src);
}
END_TEST

START_TEST(list_failure_names_cause)
{
	struct fs_source *src = make("s3://bkt", NULL, NULL);
	struct ns ns;
	char err[256] = "";

	fake.list_rc = -EACCES;
	ck_assert_int_eq(src->ops->build_ns(src, &ns, 4 << 20, err, sizeof(err)), -EACCES);
	fake.list_rc = 0;
	ck_assert_ptr_nonnull(strstr(err, "access denied"));
	ck_assert_int_eq(fake.live_clients, 0);
	fs_source_destroy(src);
}
END_TEST

START_TEST(reads_are_checked_gets)
{
	struct fs_source *src = make("s3://bkt/pre", NULL, NULL);
	struct fs_source_stats st;
	struct ns ns;
	char err[256];
	uint32_t n;
	int fh = 42;
	char buf[100];

	ck_assert_int_eq(src->ops->build_ns(src, &ns, 4 << 20, err, sizeof(err)), 0);
	ck_assert_int_eq(src->ops->start(src), 0);
	ck_assert_int_eq(fake.live_clients, 1);
	ck_assert_int_eq(ns_resolve(&ns, "top.bin", &n), 0);
	ck_assert_int_eq(src->ops->open(src, &ns, n, &fh), 0);
	ck_assert_int_eq(fh, -1);
	ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 4 << 20, sizeof(buf), buf), 0);
	ck_assert_str_eq(fake.key, "top.bin"); /* relative to the prefix */
	ck_assert(!fake.etag_null);
	ck_assert_str_eq(fake.etag, "\"etag-top\"");
	ck_assert_uint_eq(fake.size, 10 << 20);
	ck_assert_uint_eq(fake.off, 4 << 20);
	ck_assert_uint_eq(fake.len, sizeof(buf));
	ck_assert_int_eq(buf[99], 'x');

	ck_assert_int_eq(ns_resolve(&ns, "train/cat/1.jpg", &n), 0);
	char whole[1000];
	ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 0, sizeof(whole), whole), 0);
	ck_assert_str_eq(fake.key, "train/cat/1.jpg");
	ck_assert_str_eq(fake.etag, "\"0123456789abcdef0123456789abcdef\"");

	/* Only an answer about the snapshot is final: -EIO (the cache marks
	 * the unit failed); any other answer passes: -EAGAIN. */
	fake.get_rc = -ESTALE;
	ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 0, sizeof(buf), buf), -EIO);
	static const ssize_t passing[] = {-EIO, -EACCES};
	for (size_t i = 0; i < sizeof(passing) / sizeof(passing[0]); i++) {
		fake.get_rc = passing[i];
		ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 0, sizeof(buf), buf), -EAGAIN);
	}
	fake.get_rc = 50; /* short: cannot happen, taken as final */
	ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 0, sizeof(buf), buf), -EIO);
	/* The endpoint failing through the retries, or timing out, passes,
	 * even when other requests retried meanwhile. */
	fake.get_rc = -ETIMEDOUT;
	ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 0, sizeof(buf), buf), -EAGAIN);
	fake.get_rc = -EAGAIN;
	ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 0, sizeof(buf), buf), -EAGAIN);
	fake.get_rc = -ESTALE;
	fake.get_retries = true;
	ck_assert_int_eq(src->ops->read(src, &ns, n, -1, 0, sizeof(buf), buf), -EIO);
	fake.get_retries = false;
	fake.retries = 0;
	fake.get_rc = 0;
	src->ops->get_stats(src, &st);
	ck_assert_uint_eq(st.requests, 7);
	ck_assert_uint_eq(st.retries, 2);
	ck_assert(st.latency_p50_ms == 16.5);
	ck_assert(st.latency_p99_ms == 80.25);
	ck_assert_uint_eq(st.skipped_keys, 1);
	ns_fini(&ns);
	fs_source_destroy(src);
	ck_assert_int_eq(fake.live_clients, 0);
	ck_assert_int_eq(fake.live_pools, 0);
	ck_assert_int_eq(curl_inits, 0); /* every init cleaned up */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("source_s3");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, url_parsing);
	tcase_add_test(tc, options_reach_the_client);
	tcase_add_test(tc, listing_becomes_namespace);
	tcase_add_test(tc, list_failure_names_cause);
	tcase_add_test(tc, reads_are_checked_gets);
	suite_add_tcase(s, tc);
	return check_run(s);
}
