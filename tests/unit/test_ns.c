/* SPDX-License-Identifier: MIT */
/* Unit tests for the namespace (fs/ns.c, fs/ns_list.c): scan, listings, lookup, resolve,
 * paths, units, ETags; and the snapshot ETags peers see (fs/snapshot.c). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "fs/ns.h"
#include "fs/snapshot.h"
#include "fs/source.h"
#include "tests/unit/check_run.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

static char root[256];
/* Every test's tree is made under base, which the parent process makes
 * before the tests and removes after them: a test that fails (its forked
 * process exits at the failed assertion) leaves nothing in /tmp. */
static char base[64];

static void base_make(void)
{
	strcpy(base, "/tmp/coordfs-ns-XXXXXX");
	if (!mkdtemp(base))
		base[0] = '\0';
}

static void base_remove(void)
{
	char cmd[128];

	if (!base[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "test_ns: could not remove %s\n", base);
}

/* A fresh directory under base into root. */
static void root_make(void)
{
	ck_assert_msg(base[0], "no base directory");
	snprintf(root, sizeof(root), "%s/t-XXXXXX", base);
	ck_assert_ptr_nonnull(mkdtemp(root));
}

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
	root_make();
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

/* Take every node's attributes, as first lookups do (in node order). */
static void freeze_all(struct ns *ns, int rootfd)
{
	char path[PATH_MAX];
	struct stat st;

	for (uint32_t i = 1; i < ns->nnodes; i++) {
		ck_assert_int_ge(ns_path(ns, i, path, sizeof(path)), 0);
		ck_assert_int_eq(fstatat(rootfd, path, &st, AT_SYMLINK_NOFOLLOW), 0);
		ck_assert_int_eq(ns_freeze(ns, i, &st), 0);
	}
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
	/* Names and types only: nothing but the root is known yet. */
	ck_assert(ns_known(&ns, 0));
	for (uint32_t i = 1; i < ns.nnodes; i++)
		ck_assert(!ns_known(&ns, i));
	ck_assert_uint_eq(ns.total_bytes, 0);
	ck_assert_uint_eq(ns.nunits, 0);
	freeze_all(&ns, fd);
	close(fd);

	/* root + train, cat, dog, empty, 5 files, link (fifo skipped) */
	ck_assert_uint_eq(ns.nnodes, 1 + 4 + 5 + 1);
	ck_assert_uint_eq(ns.nfiles, 5);
	ck_assert_uint_eq(ns.known_files, 5);
	ck_assert_uint_eq(ns.total_bytes, 100 + 0 + 5000 + 10000 + 4096);
	/* units: a.jpg 0, b.jpg 1, c 2, big 3, top 1 */
	ck_assert_uint_eq(ns.nunits, 0 + 1 + 2 + 3 + 1);
	ck_assert_uint_eq(ns.ndirs, 4);
	ck_assert_uint_eq(ns.skipped_special, 1); /* the fifo */
	ck_assert_uint_eq(ns.skipped_long, 0);

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

/* Directories nested past PATH_MAX: the too-deep entries are skipped and
 * counted, everything else is still mounted. */
START_TEST(paths_over_path_max_are_skipped)
{
	struct ns ns;
	char err[256] = "";
	char name[201];
	uint32_t n;
	int depth = 0;

	root_make();
	mkfile("ok.bin", 10);
	memset(name, 'd', 200);
	name[200] = '\0';
	int dfd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(dfd, 0);
	/* 25 levels of 200-byte names: about 5000 bytes, so the deepest levels
	 * (and the file at the bottom) cannot be named in PATH_MAX bytes. */
	for (depth = 0; depth < 25; depth++) {
		ck_assert_int_eq(mkdirat(dfd, name, 0755), 0);
		int next = openat(dfd, name, O_RDONLY | O_DIRECTORY);
		ck_assert_int_ge(next, 0);
		close(dfd);
		dfd = next;
	}
	int fd = openat(dfd, "deep.bin", O_WRONLY | O_CREAT, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	close(dfd);

	fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
	close(fd);
	ck_assert_uint_eq(ns.skipped_long, 1); /* the first level that does not fit */
	ck_assert_uint_eq(ns.nfiles, 1);
	ck_assert_int_eq(ns_resolve(&ns, "ok.bin", &n), 0);
	/* Every directory kept has a path that fits. */
	char *path = malloc(PATH_MAX);
	ck_assert_ptr_nonnull(path);
	for (uint32_t i = 0; i < ns.nnodes; i++)
		ck_assert_int_ge(ns_path(&ns, i, path, PATH_MAX), 0);
	/* (4096 - 1) / 201 = 20 levels fit. */
	ck_assert_uint_eq(ns.ndirs, (PATH_MAX - 1) / 201);
	free(path);
	ns_fini(&ns);
	rm_rf();
}
END_TEST

/* A directory the daemon may not open is shown empty and counted; the
 * rest of the tree is still mounted. As root the scan drops to nobody
 * first (root opens any directory), as another user it runs as is. */
START_TEST(unopenable_directory_is_counted)
{
	struct ns ns;
	char err[256] = "";
	char p[512];
	uint32_t n;

	root_make();
	ck_assert_int_eq(chmod(base, 0711), 0);
	ck_assert_int_eq(chmod(root, 0755), 0);
	mkd("open");
	mkfile("open/a.bin", 10);
	mkd("locked");
	mkfile("locked/b.bin", 10);
	mkfile("top.bin", 10);
	snprintf(p, sizeof(p), "%s/locked", root);
	ck_assert_int_eq(chmod(p, 0), 0);
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	bool root = geteuid() == 0;
	if (root) /* for the scan only: valgrind removes its files as root at exit */
		ck_assert_int_eq(seteuid(65534), 0);
	ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
	if (root)
		ck_assert_int_eq(seteuid(0), 0);
	close(fd);
	ck_assert_uint_eq(ns.skipped_unreadable, 1);
	ck_assert_uint_eq(ns.ndirs, 2);
	ck_assert_uint_eq(ns.nfiles, 2); /* open/a.bin and top.bin */
	ck_assert_int_eq(ns_resolve(&ns, "open/a.bin", &n), 0);
	ck_assert_int_eq(ns_resolve(&ns, "locked", &n), 0);
	ck_assert_uint_eq(ns.nodes[n].count, 0);
	ns_fini(&ns);
}
END_TEST

/* Unit ids are 32-bit: a huge (sparse) file looked up first may take
 * only what leaves one id for each file not looked up yet, so the others
 * stay readable. */
START_TEST(huge_file_leaves_ids_for_the_rest)
{
	struct ns ns;
	char err[256] = "";
	uint32_t a, b, c;
	struct stat st;

	root_make();
	mkfile("a", 10);
	mkfile("b", 10);
	mkfile("c", 10);
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
	ck_assert_int_eq(ns_resolve(&ns, "a", &a), 0);
	ck_assert_int_eq(ns_resolve(&ns, "b", &b), 0);
	ck_assert_int_eq(ns_resolve(&ns, "c", &c), 0);
	ck_assert_int_eq(fstatat(fd, "a", &st, AT_SYMLINK_NOFOLLOW), 0);
	/* every id but one (the largest file a namespace takes): b or c
	 * would find none */
	st.st_size = (off_t)((NS_MAX_UNITS - 1) * 4096);
	ck_assert_int_eq(ns_freeze(&ns, a, &st), -EOVERFLOW);
	ck_assert(!ns_known(&ns, a));
	/* all but two: one each left for b and c */
	st.st_size = (off_t)((NS_MAX_UNITS - 2) * 4096);
	ck_assert_int_eq(ns_freeze(&ns, a, &st), 0);
	ck_assert_int_eq(fstatat(fd, "b", &st, AT_SYMLINK_NOFOLLOW), 0);
	st.st_size = 8192; /* two units: would take c's */
	ck_assert_int_eq(ns_freeze(&ns, b, &st), -EOVERFLOW);
	st.st_size = 10;
	ck_assert_int_eq(ns_freeze(&ns, b, &st), 0);
	ck_assert_int_eq(fstatat(fd, "c", &st, AT_SYMLINK_NOFOLLOW), 0);
	ck_assert_int_eq(ns_freeze(&ns, c, &st), 0);
	ck_assert_uint_eq(ns.nunits, NS_MAX_UNITS);
	ck_assert_uint_eq(ns.known_files, 3);
	close(fd);
	ns_fini(&ns);
	rm_rf();
}
END_TEST

/* Hard links: with share_links, a second name of an inode takes the first
 * name's units (cached once); changed attributes, a namespace without
 * share_links, and plain files get units of their own. Many inodes, so
 * the link table grows. */
START_TEST(hard_links_share_units)
{
	struct ns ns;
	char err[256] = "", p[512], q[512];
	enum { N = 300 };
	uint32_t a, b;
	struct stat st;

	for (int share = 0; share <= 1; share++) {
		root_make();
		for (int i = 0; i < N; i++) {
			snprintf(p, sizeof(p), "f%03d", i);
			mkfile(p, 5000 + (size_t)i);
			snprintf(p, sizeof(p), "%s/f%03d", root, i);
			snprintf(q, sizeof(q), "%s/g%03d", root, i);
			ck_assert_int_eq(link(p, q), 0);
		}
		mkfile("plain", 9000);
		int fd = open(root, O_RDONLY | O_DIRECTORY);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
		ns.share_links = share;
		freeze_all(&ns, fd);
		/* 300 files of 2 units each, named twice, and one of 3 */
		ck_assert_uint_eq(ns.nunits, (uint64_t)N * 2 * (share ? 1 : 2) + 3);
		ck_assert_uint_eq(ns.shared_files, share ? N : 0);
		ck_assert_uint_eq(ns.known_files, 2 * N + 1);
		for (int i = 0; i < N; i++) {
			snprintf(p, sizeof(p), "f%03d", i);
			snprintf(q, sizeof(q), "g%03d", i);
			ck_assert_int_eq(ns_resolve(&ns, p, &a), 0);
			ck_assert_int_eq(ns_resolve(&ns, q, &b), 0);
			ck_assert_uint_eq(ns.nodes[b].size, 5000 + (uint64_t)i);
			ck_assert_uint_eq(ns.nodes[b].count, 2);
			if (share)
				ck_assert_uint_eq(ns.nodes[a].first, ns.nodes[b].first);
			else
				ck_assert_uint_ne(ns.nodes[a].first, ns.nodes[b].first);
		}
		close(fd);
		ns_fini(&ns);
		rm_rf();
	}

	/* x, y and z, names of one inode, frozen with a later mtime, then a
	 * later ctime, for y and z than for x: an inode changed since x was
	 * frozen (its mtime put back or not), or another file under a reused
	 * inode number. y gets units of its own, and z, a name of y's state,
	 * shares them. */
	for (int which = 0; which < 2; which++) {
		uint32_t z;
		root_make();
		mkfile("x", 100);
		snprintf(p, sizeof(p), "%s/x", root);
		snprintf(q, sizeof(q), "%s/y", root);
		ck_assert_int_eq(link(p, q), 0);
		snprintf(q, sizeof(q), "%s/z", root);
		ck_assert_int_eq(link(p, q), 0);
		int fd = open(root, O_RDONLY | O_DIRECTORY);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
		ns.share_links = true;
		ck_assert_int_eq(ns_resolve(&ns, "x", &a), 0);
		ck_assert_int_eq(ns_resolve(&ns, "y", &b), 0);
		ck_assert_int_eq(ns_resolve(&ns, "z", &z), 0);
		ck_assert_int_eq(fstatat(fd, "x", &st, AT_SYMLINK_NOFOLLOW), 0);
		ck_assert_int_eq(ns_freeze(&ns, a, &st), 0);
		if (which == 0)
			st.st_mtim.tv_nsec = (st.st_mtim.tv_nsec + 1) % 1000000000;
		else
			st.st_ctim.tv_sec += 5;
		ck_assert_int_eq(ns_freeze(&ns, b, &st), 0);
		ck_assert_uint_ne(ns.nodes[a].first, ns.nodes[b].first);
		ck_assert_int_eq(ns_freeze(&ns, z, &st), 0);
		ck_assert_uint_eq(ns.nodes[z].first, ns.nodes[b].first);
		ck_assert_uint_eq(ns.shared_files, 1);
		ck_assert_uint_eq(ns.nlinks, 1);
		close(fd);
		ns_fini(&ns);
		rm_rf();
	}
}
END_TEST

/* A large directory: names sorted, sizes as frozen at first lookup. */
START_TEST(large_directory_scanned_in_parallel)
{
	struct ns ns;
	char err[256] = "";
	uint32_t d, n;
	char name[64];
	enum { N = 1000 };

	root_make();
	mkd("big");
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "big/f%04d.jpg", (i * 7919) % N);
		mkfile(name, (size_t)i);
	}
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
	freeze_all(&ns, fd);
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
	static struct fs_ctx fs; /* only .ns and .src are used */
	char err[256], et[64], want[64], p[512];
	struct timespec ts[2] = {{0, 0}, {1600000000, 123456789}};
	uint32_t node, dir;

	setup_tree();
	snprintf(p, sizeof(p), "%s/train/cat/b.jpg", root);
	ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
	ck_assert_int_eq(fs_source_local_create(root, &fs.src, err, sizeof(err)), 0);
	ck_assert_int_eq(fs.src->ops->build_ns(fs.src, &fs.ns, 4096, err, sizeof(err)), 0);
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/b.jpg", &node), 0);
	struct stat st;
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, node, &st), 0);
	ck_assert_int_eq(ns_freeze(&fs.ns, node, &st), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et, sizeof(et)), 0);
	snprintf(want, sizeof(want), "\"%llx-%llx\"", 100ULL, 1600000000123456789ULL);
	ck_assert_str_eq(et, want);
	/* Changed on disk after the first lookup: the name stays the snapshot's,
	 * and freezing again changes nothing. */
	ts[1].tv_nsec++;
	ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, node, &st), 0);
	ck_assert_int_eq(ns_freeze(&fs.ns, node, &st), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et, sizeof(et)), 0);
	ck_assert_str_eq(et, want);
	/* Another file (another size and mtime) has another name. */
	char et2[64];
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/c d ü.jpg", &node), 0);
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, node, &st), 0);
	ck_assert_int_eq(ns_freeze(&fs.ns, node, &st), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et2, sizeof(et2)), 0);
	ck_assert_str_ne(et2, et);
	ck_assert_int_eq(ns_resolve(&fs.ns, "train", &dir), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, dir, et, sizeof(et)), -EINVAL);
	ck_assert_int_eq(fs_snapshot_etag(&fs, fs.ns.nnodes, et, sizeof(et)), -EINVAL);
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/b.jpg", &node), 0);
	ck_assert_int_eq(fs_snapshot_etag(&fs, node, et, 8), -ENOSPC);
	ns_fini(&fs.ns);
	fs_source_destroy(fs.src);
	rm_rf();
}
END_TEST

/* Attributes are taken at the first lookup, not at the scan: a file
 * changed between the two shows the change; a file created after the scan
 * is not in the namespace; the first freeze wins; a file whose type
 * changed is refused; units are numbered in freeze order. */
START_TEST(attributes_at_first_lookup)
{
	static struct fs_ctx fs;
	char err[256], p[512];
	struct stat st;
	uint32_t big, top, dir, n;

	setup_tree();
	ck_assert_int_eq(fs_source_local_create(root, &fs.src, err, sizeof(err)), 0);
	ck_assert_int_eq(fs.src->ops->build_ns(fs.src, &fs.ns, 4096, err, sizeof(err)), 0);
	mkfile("top.txt", 9000);	  /* grew after the scan, before its lookup */
	mkfile("train/cat/new.jpg", 10); /* created after the scan */
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/new.jpg", &n), -ENOENT);

	ck_assert_int_eq(ns_resolve(&fs.ns, "top.txt", &top), 0);
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/dog/big.bin", &big), 0);
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, top, &st), 0);
	ck_assert_int_eq(ns_freeze(&fs.ns, top, &st), 0);
	ck_assert(ns_known(&fs.ns, top));
	ck_assert_uint_eq(fs.ns.nodes[top].size, 9000);
	ck_assert_uint_eq(fs.ns.nodes[top].first, 0);
	ck_assert_uint_eq(fs.ns.nodes[top].count, 3);
	ck_assert_uint_eq(fs.ns.nodes[top].mode, S_IFREG | 0644);
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, big, &st), 0);
	ck_assert_int_eq(ns_freeze(&fs.ns, big, &st), 0);
	ck_assert_uint_eq(fs.ns.nodes[big].first, 3);
	ck_assert_uint_eq(fs.ns.nodes[big].count, 3);
	ck_assert_uint_eq(fs.ns.nunits, 6);
	ck_assert_uint_eq(fs.ns.known_files, 2);
	ck_assert_uint_eq(fs.ns.total_bytes, 9000 + 10000);

	/* Later changes never move a frozen node. */
	mkfile("top.txt", 1);
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, top, &st), 0);
	ck_assert_int_eq(ns_freeze(&fs.ns, top, &st), 0);
	ck_assert_uint_eq(fs.ns.nodes[top].size, 9000);
	ck_assert_uint_eq(fs.ns.nunits, 6);

	/* A file turned into a directory is refused and stays unknown. */
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/a.jpg", &n), 0);
	snprintf(p, sizeof(p), "%s/train/cat/a.jpg", root);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, n, &st), -ENOENT);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	ck_assert_int_eq(fs.src->ops->stat(fs.src, &fs.ns, n, &st), 0);
	ck_assert_int_eq(ns_freeze(&fs.ns, n, &st), -ESTALE);
	ck_assert(!ns_known(&fs.ns, n));

	/* A directory swapped for a symlink lends nothing from outside. */
	ck_assert_int_eq(ns_resolve(&fs.ns, "train/cat/b.jpg", &n), 0);
	char q[512];
	snprintf(p, sizeof(p), "%s/train/cat", root);
	snprintf(q, sizeof(q), "%s/train/cat.moved", root);
	ck_assert_int_eq(rename(p, q), 0);
	ck_assert_int_eq(symlink("/etc", p), 0);
	ck_assert_int_lt(fs.src->ops->stat(fs.src, &fs.ns, n, &st), 0);

	/* Directories are lazy too; the root is known from the scan. */
	ck_assert_int_eq(ns_resolve(&fs.ns, "train", &dir), 0);
	ck_assert(!ns_known(&fs.ns, dir));
	ck_assert(ns_known(&fs.ns, 0));
	ns_fini(&fs.ns);
	fs_source_destroy(fs.src);
	rm_rf();
}
END_TEST

START_TEST(node_is_compact)
{
	/* The per-file budget of the namespace (1.3M files) depends on this. */
	ck_assert_uint_le(sizeof(struct ns_node), 48);
}
END_TEST


/* ---- namespaces from object listings (ns_build) ---- */

static const struct ns_owner default_owner = { 0, 0, 0444, 0555 };

static void add(struct ns_listing *l, const char *key, uint64_t size, const char *etag,
		int64_t mtime)
{
	ck_assert_int_eq(ns_listing_add(l, key, strlen(key), size, etag, mtime), 0);
}

START_TEST(listing_builds_tree)
{
	struct ns_listing *l;
	struct ns ns;
	char err[256] = "", path[256], etag[300];
	uint64_t skipped = 99;
	uint32_t n, d;
	const char *md5 = "\"0123456789abcdef0123456789abcdef\"";
	const char *multi = "\"0123456789abcdef0123456789abcdef-12\"";

	ck_assert_int_eq(ns_listing_create(&l), 0);
	/* out of order on purpose; "a-b" sorts between "a" and "a/..." bytewise */
	add(l, "train/dog/2.jpg", 200, md5, 5000);
	add(l, "train/cat/1.jpg", 100, multi, 3000);
	add(l, "train/cat/0.jpg", 0, "W/\"weak\"", 1000);
	add(l, "a-b", 7, md5, 10);
	add(l, "train/dog/big.bin", 10000, md5, 7000);
	add(l, "top", 1, md5, 20);
	add(l, "ctl\x01" "char", 3, md5, 30);
	add(l, "a/z", 9, NULL, 40);
	ck_assert_uint_eq(ns_listing_count(l), 8);
	/* --uid/--gid/--file-mode/--dir-mode as the daemon passes them */
	struct ns_owner owner = { 1234, 5678, 0440, 0550 };
	ck_assert_int_eq(ns_build(&ns, l, 4096, &owner, &skipped, err, sizeof(err)), 0);
	ns_listing_destroy(l);

	ck_assert_uint_eq(skipped, 0);
	/* root, a, train, cat, dog + 8 objects */
	ck_assert_uint_eq(ns.nnodes, 1 + 4 + 8);
	ck_assert_uint_eq(ns.nfiles, 8);
	ck_assert_uint_eq(ns.total_bytes, 200 + 100 + 0 + 7 + 10000 + 1 + 3 + 9);
	ck_assert_uint_eq(ns.nunits, 1 + 1 + 0 + 1 + 3 + 1 + 1 + 1);
	/* root's children sorted bytewise as ns_lookup expects */
	ck_assert_uint_eq(ns.nodes[0].count, 5);
	ck_assert_str_eq(ns_name(&ns, ns.nodes[0].first), "a");
	ck_assert_str_eq(ns_name(&ns, ns.nodes[0].first + 1), "a-b");
	ck_assert_str_eq(ns_name(&ns, ns.nodes[0].first + 2), "ctl\x01" "char");
	ck_assert_str_eq(ns_name(&ns, ns.nodes[0].first + 3), "top");
	ck_assert_str_eq(ns_name(&ns, ns.nodes[0].first + 4), "train");

	ck_assert_int_eq(ns_resolve(&ns, "train/cat", &d), 0);
	ck_assert(ns_is_dir(&ns, d));
	ck_assert_uint_eq(ns.nodes[d].mode, S_IFDIR | 0550);
	ck_assert_uint_eq(ns.nodes[d].uid, 1234);
	ck_assert_uint_eq(ns.nodes[d].count, 2);
	ck_assert_int_eq(ns.nodes[d].mtime_ns, 3000); /* its newest object */
	ck_assert_int_eq(ns_resolve(&ns, "train", &d), 0);
	ck_assert_int_eq(ns.nodes[d].mtime_ns, 7000);
	ck_assert_int_eq(ns.nodes[0].mtime_ns, 7000);

	ck_assert_int_eq(ns_resolve(&ns, "train/dog/big.bin", &n), 0);
	ck_assert(ns_is_reg(&ns, n));
	ck_assert_uint_eq(ns.nodes[n].mode, S_IFREG | 0440);
	ck_assert_uint_eq(ns.nodes[n].uid, 1234);
	ck_assert_uint_eq(ns.nodes[n].gid, 5678);
	ck_assert_uint_eq(ns.nodes[n].size, 10000);
	ck_assert_uint_eq(ns.nodes[n].count, 3);
	ck_assert_uint_eq(ns_unit_len(&ns, n, 2), 10000 - 8192);
	ck_assert_int_eq(ns.nodes[n].mtime_ns, 7000);
	ck_assert_int_eq(ns_path(&ns, n, path, sizeof(path)), 17);
	ck_assert_str_eq(path, "train/dog/big.bin");
	ck_assert_int_eq(ns_etag(&ns, n, etag, sizeof(etag)), 34);
	ck_assert_str_eq(etag, md5);
	ck_assert_int_eq(ns_etag(&ns, n, etag, 34), -ENAMETOOLONG);

	ck_assert_int_eq(ns_resolve(&ns, "train/cat/1.jpg", &n), 0);
	ck_assert_int_eq(ns_etag(&ns, n, etag, sizeof(etag)), (int)strlen(multi));
	ck_assert_str_eq(etag, multi);
	ck_assert_int_eq(ns_resolve(&ns, "train/cat/0.jpg", &n), 0);
	ck_assert_str_eq(ns_etag(&ns, n, etag, sizeof(etag)) > 0 ? etag : "", "W/\"weak\"");
	ck_assert_uint_eq(ns.nodes[n].count, 0);
	ck_assert_int_eq(ns_resolve(&ns, "a/z", &n), 0);
	ck_assert_int_eq(ns_etag(&ns, n, etag, sizeof(etag)), -ENOENT);
	ck_assert_int_eq(ns_etag(&ns, d, etag, sizeof(etag)), -ENOENT); /* a directory */
	ck_assert_int_eq(ns_resolve(&ns, "ctl\x01" "char", &n), 0);
	ck_assert_int_eq(ns_resolve(&ns, "a-b", &n), 0);
	ck_assert_uint_eq(ns.nodes[n].size, 7);
	ns_fini(&ns);
}
END_TEST

START_TEST(listing_skips_bad_keys)
{
	struct ns_listing *l;
	struct ns ns;
	char err[256] = "", long_name[300], long_etag[300];
	uint64_t skipped = 0;
	uint32_t n;
	static const char *const bad[] = {
		"/lead", "a//b", "trail//", "./x", "x/.", "x/../y", "..", ".",
	};

	memset(long_name, 'n', 256);
	strcpy(long_name + 256, "/f");
	memset(long_etag, 'e', 256);
	long_etag[256] = '\0';
	ck_assert_int_eq(ns_listing_create(&l), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		add(l, bad[i], 1, NULL, 0);
	ck_assert_int_eq(ns_listing_add(l, "", 0, 1, NULL, 0), 0);       /* empty key */
	ck_assert_int_eq(ns_listing_add(l, "nul\0x", 5, 1, NULL, 0), 0); /* NUL inside */
	add(l, long_name, 1, NULL, 0);                                    /* component of 256 bytes */
	long_name[255] = '\0';
	add(l, long_name, 2, NULL, 0);                                    /* 255 bytes: fine */
	add(l, "big-etag", 1, long_etag, 0);
	add(l, "dup", 1, NULL, 0);
	add(l, "dup", 2, NULL, 0);                                        /* one of the two kept */
	add(l, "x", 1, NULL, 0);                                          /* also a directory: dropped */
	add(l, "x/y", 3, NULL, 0);
	add(l, "x-y", 4, NULL, 0);                                        /* sorts between bytewise */
	add(l, "p", 5, NULL, 0);                                          /* only bad keys below: kept */
	add(l, "p//q", 6, NULL, 0);
	add(l, "good/ctl\x7f\x1b", 7, NULL, 0);                           /* control characters are fine */
	ck_assert_int_eq(ns_build(&ns, l, 4096, &default_owner, &skipped, err, sizeof(err)), 0);
	ns_listing_destroy(l);

	/* 8 + empty + NUL + 256-byte + etag + one dup + "x" + "p//q" */
	ck_assert_uint_eq(skipped, 8 + 1 + 1 + 1 + 1 + 1 + 1 + 1);
	/* kept: the 255-byte name, dup, x/y, x-y, p, good/ctl.. */
	ck_assert_uint_eq(ns.nfiles, 6);
	ck_assert_int_eq(ns_resolve(&ns, long_name, &n), 0);
	ck_assert_uint_eq(ns.nodes[n].size, 2);
	ck_assert_int_eq(ns_resolve(&ns, "dup", &n), 0);
	ck_assert(ns_is_reg(&ns, n));
	ck_assert_int_eq(ns_resolve(&ns, "x", &n), 0);
	ck_assert(ns_is_dir(&ns, n));
	ck_assert_int_eq(ns_resolve(&ns, "x/y", &n), 0);
	ck_assert_uint_eq(ns.nodes[n].size, 3);
	ck_assert_int_eq(ns_resolve(&ns, "x-y", &n), 0);
	ck_assert_uint_eq(ns.nodes[n].size, 4);
	ck_assert_int_eq(ns_resolve(&ns, "p", &n), 0);
	ck_assert(ns_is_reg(&ns, n));
	ck_assert_int_eq(ns_resolve(&ns, "good/ctl\x7f\x1b", &n), 0);
	ck_assert_int_eq(ns_resolve(&ns, "big-etag", &n), -ENOENT);
	ck_assert_int_eq(ns_resolve(&ns, "trail", &n), -ENOENT);
	ck_assert_int_eq(ns_resolve(&ns, "lead", &n), -ENOENT);
	ns_fini(&ns);
}
END_TEST

/* Keys ending in '/' are directory markers: each makes its directory, empty
 * ones included, none is a file or a skipped key; a file named like a
 * marker's directory gives way to it, as to any directory. */
START_TEST(listing_directory_markers)
{
	struct ns_listing *l;
	struct ns ns;
	char err[256] = "";
	uint64_t skipped = 99;
	uint32_t n;

	ck_assert_int_eq(ns_listing_create(&l), 0);
	add(l, "cat/", 0, NULL, 0);
	add(l, "cat/1.jpg", 10, NULL, 0);
	add(l, "empty/", 0, NULL, 0);		/* nothing under it */
	add(l, "deep/er/", 0, NULL, 0);		/* makes both */
	add(l, "sized/", 3, NULL, 0);		/* a marker with bytes: still no file */
	add(l, "shadow", 4, NULL, 0);		/* a file and a marker of the same name */
	add(l, "shadow/", 0, NULL, 0);
	add(l, "bad//", 0, NULL, 0);		/* an empty component: skipped */
	ck_assert_int_eq(ns_build(&ns, l, 4096, &default_owner, &skipped, err, sizeof(err)), 0);
	ns_listing_destroy(l);

	ck_assert_uint_eq(skipped, 2); /* "shadow" (also a directory) and "bad//" */
	ck_assert_uint_eq(ns.nfiles, 1);
	ck_assert_int_eq(ns_resolve(&ns, "cat/1.jpg", &n), 0);
	ck_assert_uint_eq(ns.nodes[n].size, 10);
	static const char *const dirs[] = {"cat", "empty", "deep", "deep/er", "sized", "shadow"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		ck_assert_int_eq(ns_resolve(&ns, dirs[i], &n), 0);
		ck_assert_msg(ns_is_dir(&ns, n), "%s is a directory", dirs[i]);
	}
	ck_assert_int_eq(ns_resolve(&ns, "bad", &n), -ENOENT);
	ck_assert_int_eq(ns_resolve(&ns, "a", &n), -ENOENT);
	ns_fini(&ns);
}
END_TEST

/* Sizes no file can have (near 2^64, over off_t, over 2^32 units) are
 * skipped and counted: (size + chunk - 1) / chunk wrapped to 0 units, and
 * the next file's unit numbers were then handed to the huge one. */
START_TEST(listing_skips_impossible_sizes)
{
	struct ns_listing *l;
	struct ns ns;
	char err[256] = "";
	uint64_t skipped = 0, max = ns_max_file_size(4096);
	uint32_t n, a;

	ck_assert_uint_eq(max, (uint64_t)UINT32_MAX * 4096);
	ck_assert_uint_eq(ns_max_file_size(1ULL << 30), (uint64_t)UINT32_MAX << 30);
	ck_assert_int_eq(ns_listing_create(&l), 0);
	add(l, "w", UINT64_MAX, NULL, 0);
	add(l, "v", (uint64_t)INT64_MAX + 1, NULL, 0);
	add(l, "u", max + 1, NULL, 0);
	add(l, "a/first.bin", 5000, NULL, 0);
	add(l, "z/after.bin", 100, NULL, 0);
	ck_assert_int_eq(ns_build(&ns, l, 4096, &default_owner, &skipped, err, sizeof(err)), 0);
	ns_listing_destroy(l);
	ck_assert_uint_eq(skipped, 3);
	ck_assert_uint_eq(ns.nfiles, 2);
	ck_assert_int_eq(ns_resolve(&ns, "w", &n), -ENOENT);
	ck_assert_int_eq(ns_resolve(&ns, "v", &n), -ENOENT);
	ck_assert_int_eq(ns_resolve(&ns, "u", &n), -ENOENT);
	ck_assert_int_eq(ns_resolve(&ns, "a/first.bin", &a), 0);
	ck_assert_int_eq(ns_resolve(&ns, "z/after.bin", &n), 0);
	ck_assert_uint_eq(ns.nodes[a].count, 2);
	ck_assert_uint_eq(ns.nodes[n].count, 1);
	ck_assert_uint_eq(ns.nodes[n].first, ns.nodes[a].first + 2);
	ck_assert_uint_eq(ns.nunits, 3);
	ck_assert_uint_eq(ns.total_bytes, 5100);
	ns_fini(&ns);
}
END_TEST

/* A local file of 2^32 units (a sparse file) would store a count of 0 and
 * read the next file's units: its attributes are refused instead. */
START_TEST(freeze_refuses_2_32_units)
{
	struct ns ns;
	char err[256];
	struct stat st;
	uint32_t top;

	setup_tree();
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ns_scan(&ns, fd, 4096, err, sizeof(err)), 0);
	ck_assert_int_eq(ns_resolve(&ns, "top.txt", &top), 0);
	ck_assert_int_eq(fstatat(fd, "top.txt", &st, 0), 0);
	st.st_size = (off_t)((uint64_t)1 << 44); /* 2^32 units of 4096 */
	ck_assert_int_eq(ns_freeze(&ns, top, &st), -EOVERFLOW);
	ck_assert(!ns_known(&ns, top));
	ck_assert_uint_eq(ns.nunits, 0);
	st.st_size = 9000;
	ck_assert_int_eq(ns_freeze(&ns, top, &st), 0);
	ck_assert_uint_eq(ns.nodes[top].count, 3);
	ns_fini(&ns);
	close(fd);
	rm_rf();
}
END_TEST

START_TEST(listing_empty)
{
	struct ns_listing *l;
	struct ns ns;
	char err[256] = "";
	uint64_t skipped = 1;

	ck_assert_int_eq(ns_listing_create(&l), 0);
	ck_assert_int_eq(ns_build(&ns, l, 4096, &default_owner, &skipped, err, sizeof(err)), 0);
	ns_listing_destroy(l);
	ck_assert_uint_eq(skipped, 0);
	ck_assert_uint_eq(ns.nnodes, 1);
	ck_assert(ns_is_dir(&ns, 0));
	ck_assert_uint_eq(ns.nodes[0].count, 0);
	ns_fini(&ns);
}
END_TEST

/* 30,000 objects in 300 directories of two levels, listed in a random
 * order: every key resolves to its own size and ETag, and the namespace
 * stays within its per-object memory budget. */
START_TEST(listing_many_keys)
{
	/* 30,000 keys; 3,000 under valgrind (a third of the unit suite's
	 * time there), through the same paths */
	const uint32_t DIRS = RUNNING_ON_VALGRIND ? 30u : 300u, PER = 100;
	struct ns_listing *l;
	struct ns ns;
	char err[256] = "", key[128], etag[64], got[64];
	uint64_t skipped = 1;
	uint32_t n;
	uint32_t *perm = malloc(sizeof(uint32_t) * DIRS * PER);

	ck_assert_ptr_nonnull(perm);
	for (uint32_t i = 0; i < DIRS * PER; i++)
		perm[i] = i;
	srand(42);
	for (uint32_t i = DIRS * PER - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rand() % (i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	ck_assert_int_eq(ns_listing_create(&l), 0);
	for (uint32_t i = 0; i < DIRS * PER; i++) {
		uint32_t k = perm[i];
		snprintf(key, sizeof(key), "train/n%05u/img_%06u.JPEG", k / PER,
			 k);
		snprintf(etag, sizeof(etag), "\"%032x\"", k * 2654435761u);
		add(l, key, 1000 + k, etag, k);
	}
	ck_assert_int_eq(ns_build(&ns, l, 4u << 20, &default_owner, &skipped, err, sizeof(err)), 0);
	ns_listing_destroy(l);
	free(perm);
	ck_assert_uint_eq(skipped, 0);
	ck_assert_uint_eq(ns.nfiles, DIRS * PER);
	ck_assert_uint_eq(ns.nnodes, 1 + 1 + DIRS + DIRS * PER);
	for (uint32_t k = 0; k < DIRS * PER; k++) {
		snprintf(key, sizeof(key), "train/n%05u/img_%06u.JPEG", k / PER, k);
		ck_assert_int_eq(ns_resolve(&ns, key, &n), 0);
		ck_assert_uint_eq(ns.nodes[n].size, 1000 + k);
		snprintf(etag, sizeof(etag), "\"%032x\"", k * 2654435761u);
		ck_assert_int_eq(ns_etag(&ns, n, got, sizeof(got)), 34);
		ck_assert_str_eq(got, etag);
	}
	/* Per object: the 48-byte node, the name and 17 bytes of ETag, plus a
	 * share of the directories: at most 100 bytes beyond the name. */
	uint64_t names = 0;
	for (uint32_t i = 0; i < ns.nnodes; i++)
		if (ns_is_reg(&ns, i))
			names += ns.nodes[i].name_len + 1;
	uint64_t bytes = (uint64_t)ns.nnodes * sizeof(struct ns_node) + ns.pool_len;
	ck_assert_uint_le((bytes - names) / ns.nfiles, 100);
	ns_fini(&ns);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ns");
	TCase *tc = tcase_create("core");

	tcase_add_unchecked_fixture(tc, base_make, base_remove);

	tcase_add_test(tc, scan_lookup_resolve);
	tcase_add_test(tc, large_directory_scanned_in_parallel);
	tcase_add_test(tc, node_is_compact);
	tcase_add_test(tc, paths_over_path_max_are_skipped);
	tcase_add_test(tc, unopenable_directory_is_counted);
	tcase_add_test(tc, huge_file_leaves_ids_for_the_rest);
	tcase_add_test(tc, listing_builds_tree);
	tcase_add_test(tc, listing_skips_bad_keys);
	tcase_add_test(tc, listing_directory_markers);
	tcase_add_test(tc, listing_empty);
	tcase_add_test(tc, listing_skips_impossible_sizes);
	tcase_add_test(tc, freeze_refuses_2_32_units);
	tcase_add_test(tc, listing_many_keys);
	tcase_add_test(tc, snapshot_etag);
	tcase_add_test(tc, attributes_at_first_lookup);
	tcase_add_test(tc, hard_links_share_units);
	suite_add_tcase(s, tc);
	return check_run(s);
}
