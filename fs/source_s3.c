/* SPDX-License-Identifier: MIT */
/*
 * SOURCE as an S3 bucket, s3://BUCKET[/PREFIX], through the client of
 * remote/s3.h. The namespace is the listing of the prefix (ns_build); a
 * read is one ranged GET checked against the object's listed ETag and
 * size (If-Match, then the answer's ETag and Content-Range total), so an
 * object overwritten since the mount gives EIO, never mixed bytes. Objects
 * have no per-file handle.
 *
 * The client and its connection pool exist twice: once for the listing
 * before the mount (in the process that will fork), and again from start(),
 * after daemonizing, for reads: no connection or thread crosses the fork.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/deadline.h"
#include "common/file.h"
#include "common/log.h"
#include "common/size.h"
#include "fs/source.h"
#include "remote/http.h"
#include "remote/remote.h"
#include "remote/s3.h"

/* Listings in flight at mount. Connections: fs/fs.h's FS_S3_CONNECTIONS. */
#define S3_LIST_PARALLEL 8
#define S3_LIST_MAX_KEYS ((uint64_t)1 << 31)

struct s3_source {
	struct fs_source base;
	char *url, *bucket, *prefix, *endpoint, *region, *profile;
	struct remote_s3_config cfg;
	struct ns_owner owner;
	struct remote_http *pool;
	struct remote_s3 *s3;
	uint64_t skipped;
	/* the first non-empty object listed: the mount's signed GET probe */
	char *probe_key, probe_etag[NS_MAX_ETAG + 1];
	uint64_t probe_size;
	unsigned probe_timeout_ms; /* --source-timeout (0: none): a store that
				    * stalls GETs must not hold the mount for minutes */
};

static struct s3_source *s3_of(struct fs_source *src)
{
	return (struct s3_source *)src;
}

static void s3_disconnect(struct s3_source *ss)
{
	if (!ss->pool)
		return;
	remote_s3_destroy(ss->s3);
	ss->s3 = NULL;
	remote_http_destroy(ss->pool);
	ss->pool = NULL;
	remote_global_cleanup(); /* s3_connect's init */
}

static int s3_connect(struct s3_source *ss, char *err, size_t errlen)
{
	int rc = remote_global_init();

	if (rc < 0) {
		snprintf(err, errlen, "cannot initialize libcurl");
		return rc;
	}
	if ((rc = remote_http_create(FS_S3_CONNECTIONS, &ss->pool)) < 0) {
		remote_global_cleanup();
		snprintf(err, errlen, "cannot create the HTTP connection pool: %s", strerror(-rc));
		return rc;
	}
	if ((rc = remote_s3_create(&ss->cfg, ss->pool, &ss->s3, err, errlen)) < 0) {
		s3_disconnect(ss);
		return rc;
	}
	return 0;
}

/* One limit for an ETag everywhere: the listing, the namespace and the
 * peer protocol that carries it. */
_Static_assert(NS_MAX_ETAG == REMOTE_S3_MAX_ETAG && NS_MAX_ETAG == REMOTE_MAX_ETAG,
	       "ETag limits differ");

struct list_arg {
	struct s3_source *ss;
	struct ns_listing *l;
};

static int list_one(void *arg, const struct remote_s3_object *obj)
{
	struct list_arg *la = arg;
	struct s3_source *ss = la->ss;

	if (obj->unusable) /* skipped, logged and counted by ns_build */
		return ns_listing_add_unusable(la->l, obj->key, obj->key_len, obj->unusable);
	if (!ss->probe_key && obj->size > 0 && obj->etag[0] && !memchr(obj->key, '\0', obj->key_len)) {
		ss->probe_key = strndup(obj->key, obj->key_len);
		snprintf(ss->probe_etag, sizeof(ss->probe_etag), "%s", obj->etag);
		ss->probe_size = obj->size;
	}
	return ns_listing_add(la->l, obj->key, obj->key_len, obj->size, obj->etag, obj->mtime_ns);
}

static int s3_build_ns(struct fs_source *src, struct ns *ns, uint64_t chunk_size, char *err,
		       size_t errlen)
{
	struct s3_source *ss = s3_of(src);
	struct ns_listing *l = NULL;
	int rc;

	if ((rc = s3_connect(ss, err, errlen)) < 0)
		return rc;
	if ((rc = ns_listing_create(&l)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	struct list_arg la = {ss, l};
	rc = remote_s3_list(ss->s3, S3_LIST_PARALLEL, list_one, &la, err, errlen);
	if (rc < 0)
		goto out;
	/* The listing proved the credentials can list; reads are GETs, with
	 * other headers signed: a refusal now is one line, not EIO on every
	 * read. */
	int64_t probe_until = ss->probe_timeout_ms ? deadline_now_ms() + ss->probe_timeout_ms : 0;

	uint64_t t0 = deadline_now_us();

	if (ss->probe_key &&
	    (rc = remote_s3_check_get(ss->s3, ss->probe_key, ss->probe_etag, ss->probe_size,
				      probe_until, err, errlen)) < 0)
		goto out;
	if (ss->probe_key)
		atomic_store_explicit(&src->probe_us, deadline_now_us() - t0 ?: 1,
				      memory_order_relaxed);
	rc = ns_build(ns, l, chunk_size, &ss->owner, &ss->skipped, err, errlen);
	if (rc == 0) {
		struct remote_s3_stats st;

		/* and the keys the listing itself left out (outside the
		 * prefix, a NUL byte): logged there, counted here */
		remote_s3_get_stats(ss->s3, &st);
		ss->skipped += st.left_out;
		log_info("listed %s: %zu objects, %llu skipped", ss->url, ns_listing_count(l),
			 (unsigned long long)ss->skipped);
	}
out:
	ns_listing_destroy(l);
	s3_disconnect(ss);
	return rc;
}

static int s3_start(struct fs_source *src)
{
	struct s3_source *ss = s3_of(src);
	char err[256];
	int rc = s3_connect(ss, err, sizeof(err));

	if (rc < 0)
		log_err("%s: %s", ss->url, err);
	return rc;
}

static int s3_open(struct fs_source *src, const struct ns *ns, uint32_t node, int *fh)
{
	*fh = -1; /* every GET carries the snapshot check itself */
	return 0;
}

static void s3_close(struct fs_source *src, int fh)
{
}

static int s3_read(struct fs_source *src, const struct ns *ns, uint32_t node, int fh, uint64_t off,
		   size_t len, void *buf)
{
	struct s3_source *ss = s3_of(src);
	char key[PATH_MAX], etag[NS_MAX_ETAG + 1];

	if (!ss->s3)
		return -EIO;
	if (ns_path(ns, node, key, sizeof(key)) < 0)
		return -ENAMETOOLONG;
	if (ns_etag(ns, node, etag, sizeof(etag)) < 0) {
		fs_source_problem(src, ns, node, "listed without an ETag: cannot be read safely");
		return -EIO;
	}
	ssize_t n = remote_s3_get_by(ss->s3, key, etag, ns->nodes[node].size, off, len, buf,
				     fs_source_deadline());
	if (n == (ssize_t)len)
		return 0;
	if (n >= 0) {
		fs_source_problem(src, ns, node,
				  "short read from the object store (%zd of %zu bytes)", n, len);
		return -EIO;
	}
	/* Only an answer about the snapshot (412, 404, another ETag or size)
	 * is final: -EIO, and the cache marks the unit failed. Anything else
	 * (an endpoint failing through the retries, 400 RequestTimeout, 403
	 * RequestTimeTooSkewed, no memory) fails this read only: -EAGAIN, the
	 * reader gets EIO (fs/io.c) and a later read asks again. */
	return n == -ESTALE ? -EIO : -EAGAIN;
}

static int s3_etag(struct fs_source *src, const struct ns *ns, uint32_t node, char *buf, size_t len)
{
	int n = ns_etag(ns, node, buf, len);

	if (n == -ENOENT) {
		/* Listed without an ETag: name the snapshot by its size. */
		int w =
		    snprintf(buf, len, "\"size-%llx\"", (unsigned long long)ns->nodes[node].size);
		return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
	}
	return n < 0 ? n : 0;
}

static void s3_get_stats(struct fs_source *src, struct fs_source_stats *out)
{
	struct s3_source *ss = s3_of(src);
	struct remote_s3_stats st;

	memset(out, 0, sizeof(*out));
	out->skipped_keys = ss->skipped;
	if (!ss->s3)
		return;
	remote_s3_get_stats(ss->s3, &st);
	out->requests = st.requests;
	out->retries = st.retries;
	out->latency_p50_ms = st.latency_p50_ms;
	out->latency_p99_ms = st.latency_p99_ms;
}

static void s3_destroy(struct fs_source *src)
{
	struct s3_source *ss = s3_of(src);

	s3_disconnect(ss);
	free(ss->probe_key);
	free(ss->url);
	free(ss->bucket);
	free(ss->prefix);
	free(ss->endpoint);
	free(ss->region);
	free(ss->profile);
	free(ss);
}

static struct remote_http *s3_http_pool(struct fs_source *src)
{
	return s3_of(src)->pool;
}

void fs_source_stop_all(void)
{
	remote_s3_stop_all();
}

static void s3_cancel(struct fs_source *src)
{
	remote_s3_cancel(s3_of(src)->s3);
}

static const struct fs_source_ops s3_ops = {
	.kind = "s3",
	.prefill_parallel = FS_S3_PREFILL_PARALLEL,
	/* fs/fs.h: the connections prefill leaves to readers all busy */
	.prefill_yield_readers = FS_S3_CONNECTIONS - FS_S3_PREFILL_PARALLEL,
	.wants_readahead = true,
	.build_ns = s3_build_ns,
	.start = s3_start,
	.open = s3_open,
	.close = s3_close,
	.read = s3_read,
	.etag = s3_etag,
	.get_stats = s3_get_stats,
	.http_pool = s3_http_pool,
	.cancel = s3_cancel,
	.destroy = s3_destroy,
};

static int dup_opt(const char *in, char **out)
{
	*out = NULL;
	if (!in)
		return 0;
	*out = strdup(in);
	return *out ? 0 : -ENOMEM;
}

/*
 * The files the environment names for the S3 client, made absolute: the
 * client that serves reads is made after the daemon changed to "/" (and
 * reads the token file at each renewal), so a relative name, read from the
 * caller's directory for the listing, was then looked for under "/" and the
 * mount failed once listed ("cannot start reading source"). Done here, on
 * the main thread before any other starts: setenv is not thread-safe.
 */
static int absolute_env_files(char *err, size_t errlen)
{
	static const char *const names[] = { "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
					     "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
					     "AWS_CA_BUNDLE" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *v = getenv(names[i]);
		char *abs;

		if (!v || !*v || v[0] == '/')
			continue;
		if (!(abs = file_path_absolute(v)) || setenv(names[i], abs, 1) < 0) {
			snprintf(err, errlen, "%s: cannot make '%s' absolute: %s", names[i], v,
				 strerror(errno));
			free(abs);
			return -EINVAL;
		}
		free(abs);
	}
	return 0;
}

int fs_source_s3_create(const struct fs_source_s3_options *o, struct fs_source **out, char *err,
			size_t errlen)
{
	struct s3_source *ss = calloc(1, sizeof(*ss));
	int rc;

	if (!ss)
		return -ENOMEM;
	if ((rc = absolute_env_files(err, errlen)) < 0)
		goto fail;
	ss->base.ops = &s3_ops;
	ss->owner = (struct ns_owner){ o->uid, o->gid, o->file_mode, o->dir_mode };
	if ((rc = fs_source_s3_parse_url(o->url, &ss->bucket, &ss->prefix, err, errlen)) < 0)
		goto fail;
	if (o->endpoint && strncmp(o->endpoint, "http://", 7) &&
	    strncmp(o->endpoint, "https://", 8)) {
		snprintf(err, errlen, "bad --endpoint '%s': want http://HOST[:PORT] or https://...",
			 o->endpoint);
		rc = -EINVAL;
		goto fail;
	}
	if (dup_opt(o->url, &ss->url) || dup_opt(o->endpoint, &ss->endpoint) ||
	    dup_opt(o->region, &ss->region) || dup_opt(o->profile, &ss->profile)) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	ss->cfg = (struct remote_s3_config){
	    .bucket = ss->bucket,
	    .prefix = ss->prefix,
	    .endpoint = ss->endpoint,
	    .region = ss->region,
	    .profile = ss->profile,
	    .no_sign = o->no_sign,
	    .addressing = !o->addressing		   ? REMOTE_S3_ADDR_AUTO
			  : !strcmp(o->addressing, "path") ? REMOTE_S3_ADDR_PATH
							   : REMOTE_S3_ADDR_VIRTUAL,
	    .list_timeout_ms = o->list_timeout_s * 1000,
	    /* A listing that never ends must not take the machine's memory:
	     * the namespace holds at most 2^31 keys, and the listing at most
	     * a quarter of the memory (the namespace built from it needs
	     * about as much again). */
	    .list_max_keys = S3_LIST_MAX_KEYS,
	    .list_max_bytes = size_phys_mem() / 4,
	};
	ss->probe_timeout_ms = o->source_timeout_s * 1000;
	*out = &ss->base;
	return 0;
fail:
	s3_destroy(&ss->base);
	return rc;
}
