/* SPDX-License-Identifier: MIT */
/*
 * Unit test `remote` (test_remote.h): peer lists, rendezvous ownership (and the runner-up), the path, Range and secret-file parsers, listen addresses.
 */
#include <sys/stat.h>

#include "tests/unit/test_remote.h"

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

const char *const four[] = {"http://10.0.0.1:7000", "http://10.0.0.2:7000",
				   "http://10.0.0.3:7000", "http://10.0.0.4:7000",
				   "http://10.0.0.5:7000"};

struct remote_peers *make_peers(const unsigned *order, unsigned n)
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

/* What another local user could put at the secret file's path: a FIFO
 * (whose open would block the mount) and a device are refused at once, a
 * huge file is read no further than a secret can be long, and a file
 * another user owns (who knows the secret) is refused. */
START_TEST(secret_file_hostile)
{
	char dir[] = "/tmp/coordfs-secret-XXXXXX", path[64], err[256];
	char *secret = NULL;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);
	ck_assert_ptr_null(secret);
	unlink(path);
	ck_assert_int_eq(remote_secret_read("/dev/zero", &secret, err, sizeof(err)), -EINVAL);

	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)1 << 40), 0); /* a sparse terabyte of zeros */
	ck_assert_int_eq(pwrite(fd, "A", 1, 0), 1);
	ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), -EFBIG);
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq(pwrite(fd, "s3cr3t\n", 7, 0), 7);
	close(fd);
	ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), 0);
	free(secret);
	secret = NULL;
	/* Only root can give a file away. */
	if (geteuid() == 0) {
		ck_assert_int_eq(chown(path, 65534, 65534), 0);
		ck_assert_int_eq(remote_secret_read(path, &secret, err, sizeof(err)), -EPERM);
		ck_assert_msg(strstr(err, "another user") != NULL, "%s", err);
		ck_assert_ptr_null(secret);
	} else {
		fprintf(stderr, "secret_file_hostile: not root, another user's file not tried\n");
	}
	unlink(path);
	rmdir(dir);
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

void remote_peers_tests(TCase *core, TCase *net)
{
	tcase_add_test(core, peers_parse_and_normalize);
	tcase_add_test(net, peers_parse_cluster_sizes);
	tcase_add_test(core, owner_same_on_every_node);
	tcase_add_test(core, owner_balance_and_minimal_disruption);
	tcase_add_test(core, pct_and_relpath);
	tcase_add_test(core, range_header);
	tcase_add_test(core, parsers_random_inputs);
	tcase_add_test(core, secret_file);
	tcase_add_test(core, secret_file_hostile);
	tcase_add_test(core, listen_rejects_bad_hostport);
}
