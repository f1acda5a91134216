/* SPDX-License-Identifier: MIT */
/* Unit tests for the namespace (fs/ns.c): scan, lookup, resolve, paths, units;
 * and the snapshot ETags derived from it (fs/snapshot.c). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "fs/ns.h"
#include "fs/snapshot.h"
#include "tests/unit/check_run.h"

static char root[256];

static void mkfile(const char *rel, size_t size)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

static void mkd(const char *rel)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	ck_assert_int_eq(mkdir(p, 0755), 0);
}

static void rm_rf(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}

static void setup_tree(void)
{
	strcpy(root, "/tmp/coordfs-ns-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	mkd("train");
	mkd("train/cat");
	mkd("train/dog");
	mkd("empty");
	mkfile("train/cat/b.jpg", 100);
	mkfile("train/cat/a.jpg", 0);
	mkfile("train/cat/c d ü.jpg", 5000);
	mkfile("train/dog/big.bin", 10000); /* 3 chunks of 4096 */
	mkfile("top.txt", 4096);
	char p[512];
	snprintf(p, sizeof(p), "%s/link", root);
	ck_assert_int_eq(symlink("train/cat/b.jpg", p), 0);
	snprintf(p, sizeof(p), "%s/fifo", root);
	ck_assert_int_eq(mkfifo(p, 0644), 0);
}

START_TEST(scan_lookup_resolve)
{
	struct ns ns;
	char err[256] = "";
	uint32_t n, m;
	char path[256];

	setup_tree();
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
	close(fd);

	/* root + train, cat, dog, empty, 5 files, link (fifo skipped) */
	ck_assert_uint_eq(ns.nnodes, 1 + 4 + 5 + 1);
	ck_assert_uint_eq(ns.nfiles, 5);
	ck_assert_uint_eq(ns.total_bytes, 100 + 0 + 5000 + 10000 + 4096);
	/* units: a.jpg 0, b.jpg 1, c 2, big 3, top 1 */
	ck_assert_uint_eq(ns.nunits, 0 + 1 + 2 + 3 + 1);

	ck_assert_int_eq(ns_resolve(&ns, "train/cat/c d ü.jpg", &n), 0);
	ck_assert(ns_is_reg(&ns, n));
	ck_assert_uint_eq(ns.nodes[n].size, 5000);
	ck_assert_int_eq(ns_path(&ns, n, path, sizeof(path)), (int)strlen("train/cat/c d ü.jpg"));
	ck_assert_str_eq(path, "train/cat/c d ü.jpg");
	ck_assert_int_eq(ns_path(&ns, n, path, 5), -ENAMETOOLONG);

	/* children sorted: a.jpg < b.jpg < c d ü.jpg */
	ck_assert_int_eq(ns_resolve(&ns, "train/cat", &m), 0);
	ck_assert_uint_eq(ns.nodes[m].count, 3);
	ck_assert_str_eq(ns_name(&ns, ns.nodes[m].first), "a.jpg");
	ck_assert_str_eq(ns_name(&ns, ns.nodes[m].first + 1), "b.jpg");
	ck_assert_int_eq(ns_lookup(&ns, m, "b.jpg", 5, &n), 0);
	ck_assert_uint_eq(n, ns.nodes[m].first + 1);
	ck_assert_int_eq(ns_lookup(&ns, m, "b.jp", 4, &n), -ENOENT);
	ck_assert_int_eq(ns_lookup(&ns, m, "b.jpgg", 6, &n), -ENOENT);
	ck_assert_int_eq(ns_lookup(&ns, n, "x", 1, &n), -ENOTDIR);

	ck_assert_int_eq(ns_resolve(&ns, "train/dog/big.bin", &n), 0);
	ck_assert_uint_eq(ns.nodes[n].count, 3);
	ck_assert_uint_eq(ns_unit_len(&ns, n, 0), 4096);
	ck_assert_uint_eq(ns_unit_len(&ns, n, 2), 10000 - 8192);

	ck_assert_int_eq(ns_resolve(&ns, "link", &n), 0);
	ck_assert(S_ISLNK(ns.nodes[n].mode));
	ck_assert_str_eq(ns.pool + ns.nodes[n].first, "train/cat/b.jpg");

	ck_assert_int_eq(ns_resolve(&ns, "empty", &n), 0);
	ck_assert(ns_is_dir(&ns, n));
	ck_assert_uint_eq(ns.nodes[n].count, 0);

	/* Hostile paths never resolve. */
	static const char *bad[] = { "../etc/passwd", "/top.txt", "train/../top.txt", "train//cat",
				     "./top.txt", "fifo", "nope", "top.txt/x", "link/x" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(ns_resolve(&ns, bad[i], &n) < 0, "'%s' resolved", bad[i]);
	ck_assert_int_eq(ns_resolve(&ns, "", &n), 0);
	ck_assert_uint_eq(n, 0);

	ns_fini(&ns);
	rm_rf();
}
END_TEST

/* A directory large enough to be stat'ed by several threads. */
START_TEST(large_directory_scanned_in_parallel)
{
	struct ns ns;
	char err[256] = "";
	uint32_t d, n;
	char name[64];
	enum { N = 1000 };

	strcpy(root, "/tmp/coordfs-ns-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	mkd("big");
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "big/f%04d.jpg", (i * 7919) % N);
		mkfile(name, (size_t)i);
	}
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
	close(fd);
	ck_assert_uint_eq(ns.nfiles, N);
	ck_assert_int_eq(ns_resolve(&ns, "big", &d), 0);
	ck_assert_uint_eq(ns.nodes[d].count, N);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "f%04d.jpg", i);
		ck_assert_str_eq(ns_name(&ns, ns.nodes[d].first + (uint32_t)i), name);
		ck_assert_int_eq(ns_lookup(&ns, d, name, strlen(name), &n), 0);
		/* file f(i*7919 % N) was made with size i */
	}
	uint64_t total = 0;
	for (uint32_t i = 0; i < N; i++)
		total += ns.nodes[ns.nodes[d].first + i].size;
	ck_assert_uint_eq(total, (uint64_t)N * (N - 1) / 2);
	ns_fini(&ns);
	rm_rf();
}
END_TEST

/* The snapshot ETag names size and mtime (ns) as frozen at scan, so two
 * copies agree exactly when both agree, and a later change on disk does
 * not rename the snapshot. */
START_TEST(snapshot_etag)
{
	static struct fs_ctx fs; /* only .ns is used */
	char err[256], et[64], want[64], p[512];
	struct timespec ts[2] = {{0, 0}, {1600000000, 123456789}};
	uint32_t node, dir;

	setup_tree();
	snprintf(p, sizeof(p), "%s/train/cat/b.jpg", root);
	ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_eq(ns_scan(&fs.ns, fd, 4096, err, sizeof(err)), 0);
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/b.jpg", &node), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et, sizeof(et)), 0);
	snprintf(want, sizeof(want), "\"%llx-%llx\"", 100ULL, 1600000000123456789ULL);
	ck_assert_str_eq(et, want);
	/* Changed on disk after the scan: the name stays the snapshot's. */
	ts[1].tv_nsec++;
	ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et, sizeof(et)), 0);
	ck_assert_str_eq(et, want);
	/* Another file (another size and mtime) has another name. */
	char et2[64];
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/c d ü.jpg", &node), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et2, sizeof(et2)), 0);
	ck_assert_str_ne(et2, et);
	ck_assert_int_eq(ns_resolve(&fs.ns, "train", &dir), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, dir, et, sizeof(et)), -EINVAL);
	ck_assert_int_eq(fs_snapshot_etag(&fs, fs.ns.nnodes, et, sizeof(et)), -EINVAL);
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/b.jpg", &node), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et, 8), -ENOSPC);
	ns_fini(&fs.ns);
	close(fd);
	rm_rf();
}
END_TEST

START_TEST(node_is_compact)
{
	/* The per-file budget of the namespace (1.3M files) depends on this. */
	ck_assert_uint_le(sizeof(struct ns_node), 48);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ns");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, scan_lookup_resolve);
	tcase_add_test(tc, large_directory_scanned_in_parallel);
	tcase_add_test(tc, node_is_compact);
	tcase_add_test(tc, snapshot_etag);
	suite_add_tcase(s, tc);
	return check_run(s);
}
