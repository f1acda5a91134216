/* SPDX-License-Identifier: MIT */
/*
 * What every source shares: telling an object-store SOURCE from a
 * directory, splitting s3://BUCKET[/PREFIX], and the per-thread read
 * deadline.
 */
#include "fs/source.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

#define S3_SCHEME "s3://"
/* Bucket names: S3's rules allow 3 to 63 of [a-z0-9.-]; older buckets and
 * other stores also use upper case and '_'. */
#define S3_BUCKET_MAX 255

/* Per thread: a read's bound travels down to the source through the
 * cache's fill callback, which has no room for it. */
static _Thread_local int64_t source_deadline_ms;

void fs_source_set_deadline(int64_t deadline_ms)
{
	source_deadline_ms = deadline_ms;
}

int64_t fs_source_deadline(void)
{
	return source_deadline_ms;
}

bool fs_source_is_s3(const char *source)
{
	return source && !strncmp(source, S3_SCHEME, strlen(S3_SCHEME));
}

int fs_source_s3_parse_url(const char *url, char **bucket, char **prefix, char *err, size_t errlen)
{
	const char *p, *slash;
	size_t blen;

	*bucket = *prefix = NULL;
	if (!fs_source_is_s3(url)) {
		snprintf(err, errlen, "'%s' is not an s3://BUCKET[/PREFIX] URL", url);
		return -EINVAL;
	}
	p = url + strlen(S3_SCHEME);
	slash = strchr(p, '/');
	blen = slash ? (size_t)(slash - p) : strlen(p);
	if (blen == 0 || blen > S3_BUCKET_MAX) {
		snprintf(err, errlen, "'%s': want s3://BUCKET[/PREFIX] with a bucket name", url);
		return -EINVAL;
	}
	for (size_t i = 0; i < blen; i++) {
		char c = p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == '_')) {
			snprintf(err, errlen, "'%s': bad character in the bucket name", url);
			return -EINVAL;
		}
	}
	const char *pre = slash ? slash + 1 : "";
	while (*pre == '/')
		pre++;
	size_t plen = strlen(pre);
	while (plen && pre[plen - 1] == '/')
		plen--;
	*bucket = strndup(p, blen);
	*prefix = strndup(pre, plen);
	if (!*bucket || !*prefix) {
		free(*bucket);
		free(*prefix);
		*bucket = *prefix = NULL;
		return -ENOMEM;
	}
	return 0;
}

int fs_source_log_init(struct fs_source *src, uint32_t nnodes)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	atomic_store(&src->summary_at, (int64_t)now.tv_sec + FS_SOURCE_SUMMARY_S);
	src->logged = calloc((size_t)nnodes / 64 + 1, sizeof(*src->logged));
	return src->logged ? 0 : -ENOMEM;
}

void fs_source_problem(struct fs_source *src, const struct ns *ns, uint32_t node, const char *fmt,
		       ...)
{
	uint64_t bit = 1ULL << (node % 64);
	struct timespec now;

	if (!src->logged ||
	    !(atomic_fetch_or_explicit(&src->logged[node / 64], bit, memory_order_relaxed) & bit)) {
		char path[PATH_MAX], line[512];
		va_list ap;

		if (ns_path(ns, node, path, sizeof(path)) < 0)
			snprintf(path, sizeof(path), "(path too long)");
		va_start(ap, fmt);
		vsnprintf(line, sizeof(line), fmt, ap);
		va_end(ap);
		log_err("%s: %s (later problems with this file are counted, not logged)", path,
			line);
		return;
	}
	atomic_fetch_add_explicit(&src->unlogged, 1, memory_order_relaxed);
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t due = atomic_load_explicit(&src->summary_at, memory_order_relaxed);
	if (now.tv_sec < due ||
	    !atomic_compare_exchange_strong_explicit(&src->summary_at, &due,
						     now.tv_sec + FS_SOURCE_SUMMARY_S,
						     memory_order_relaxed, memory_order_relaxed))
		return;
	uint64_t n = atomic_exchange_explicit(&src->unlogged, 0, memory_order_relaxed);
	if (n)
		log_err("%llu more SOURCE problems with files already logged",
			(unsigned long long)n);
}
