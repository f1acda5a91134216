/* SPDX-License-Identifier: MIT */
/*
 * tier_index: what a disk tier of many entries costs a mount. Fills a tier
 * in DIR with N small units (one record each in its index, the count that
 * matters; their data is 64 bytes), closes it, drops the page cache of its
 * files, then opens it again as a mount does and times:
 *   open  - cache_disk_open: lock, index header (what the mount waits for);
 *   load  - from cache_disk_start until the first lookup returns (the
 *           records loaded into the table in the background: what the
 *           first reads wait for);
 * and checks that every unit is found again. Prints one markdown row.
 *
 * Build (tools/bench/tier_index runs this):
 *   cc -O2 -I REPO tools/bench/tier_index.c BUILD/cache/libcoordfs_cache.a \
 *      BUILD/common/libcoordfs_common.a -lxxhash -ljansson -lm -lpthread
 * Usage: tier_index DIR N
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/disk.h"

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static struct cache_disk_key key_of(unsigned i)
{
	char path[32];

	snprintf(path, sizeof(path), "d%04u/f%07u.jpg", i % 1000, i);
	return cache_disk_key("/data", path, 4 << 20, 0);
}

static void drop_file(const char *dir, const char *name)
{
	char p[4096];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_RDONLY);
	if (fd >= 0) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

int main(int argc, char **argv)
{
	char err[512], data[64];
	struct cache_disk *d;
	struct cache_disk_stats st;

	if (argc != 3) {
		fprintf(stderr, "usage: tier_index DIR N\n");
		return 2;
	}
	const char *dir = argv[1];
	unsigned n = (unsigned)strtoul(argv[2], NULL, 10);
	uint64_t limit = (uint64_t)n * 256 + (64 << 20);

	memset(data, 'x', sizeof(data));
	double t0 = now_s();
	if (cache_disk_open(dir, limit, &d, err, sizeof(err)) < 0 || cache_disk_start(d) < 0) {
		fprintf(stderr, "tier_index: %s\n", err);
		return 1;
	}
	for (unsigned i = 0; i < n; i++) {
		int rc;

		while ((rc = cache_disk_admit(d, key_of(i), 1, data, sizeof(data), false)) == -EBUSY)
			cache_disk_flush(d, 60000);
		if (rc < 0) {
			fprintf(stderr, "tier_index: admit %u: %s\n", i, strerror(-rc));
			return 1;
		}
	}
	if (cache_disk_flush(d, 600000) < 0) {
		fprintf(stderr, "tier_index: the writer did not catch up\n");
		return 1;
	}
	double fill = now_s() - t0;
	cache_disk_close(d);
	drop_file(dir, "index");
	drop_file(dir, "data");

	t0 = now_s();
	if (cache_disk_open(dir, limit, &d, err, sizeof(err)) < 0) {
		fprintf(stderr, "tier_index: reopen: %s\n", err);
		return 1;
	}
	double open_s = now_s() - t0;
	t0 = now_s();
	if (cache_disk_start(d) < 0) {
		fprintf(stderr, "tier_index: start failed\n");
		return 1;
	}
	/* The first lookup waits for the load. */
	int first = cache_disk_check(d, key_of(0), 1, sizeof(data));
	double load_s = now_s() - t0;
	unsigned found = 0;
	for (unsigned i = 0; i < n; i++)
		found += cache_disk_check(d, key_of(i), 1, sizeof(data)) == -EEXIST;
	cache_disk_get_stats(d, &st);
	cache_disk_close(d);
	printf("| %u | %.1f | %.3f | %.3f | %u | %llu |\n", n, fill, open_s, load_s, found,
	       (unsigned long long)st.items);
	if (first != -EEXIST || found != n) {
		fprintf(stderr, "tier_index: %u of %u units found again\n", found, n);
		return 1;
	}
	return 0;
}
