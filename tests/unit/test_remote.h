/* SPDX-License-Identifier: MIT */
/*
 * The unit test `remote` in several files (test_remote.c runs them all):
 * the stub dataset behind the server's callbacks, HTTP helpers, and each
 * file's registration of its cases.
 *   test_remote_peers.c  - peer lists, ownership, the parsers;
 *   test_remote_http.c   - server and client over real HTTP: reads,
 *                          authentication, traversal, connection policy;
 *   test_remote_scale.c  - 1,000 keep-alive connections, blocked reads;
 *   test_remote_client.c - ETags and statuses, statistics, back-off,
 *                          concurrency, misbehaving peers.
 */
#ifndef COORDFS_TESTS_UNIT_TEST_REMOTE_H
#define COORDFS_TESTS_UNIT_TEST_REMOTE_H

#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "common/strbuf.h"
#include "common/text.h"
#include "remote/peer/auth.h"
#include "remote/remote.h"
#include "remote/peer/remote_int.h"
#include "tests/unit/check_run.h"

enum file_kind { KIND_ARENA, KIND_COPY, KIND_DIR, KIND_FAIL, KIND_NOMEM, KIND_GATED };
struct file {
	const char *path;
	unsigned char *data;
	uint64_t size;
	enum file_kind kind;
};

#define MAX_SEEN 512
#define BIG_SIZE (3u << 20)
struct stub {
	struct file files[16];
	unsigned nfiles;
	size_t max_slice; /* read hands out at most this much at once */
	pthread_mutex_t lock;
	char *seen[MAX_SEEN]; /* every path resolve received */
	unsigned nseen;
	_Atomic unsigned copies, releases;
	_Atomic unsigned reads; /* read callbacks */
	unsigned version; /* part of every ETag: another snapshot when bumped */
	pthread_cond_t gate_cv; /* KIND_GATED reads wait for gate_open */
	bool gate_open;
	unsigned gated; /* reads waiting at the gate now */
	struct remote_server *srv;
	struct remote_client *cli;
};

extern struct stub stub;
extern unsigned char big[BIG_SIZE];
extern unsigned char hello[sizeof("hello, world\n")];
extern const char *const four[];
extern const char *const fake_modes[];

int64_t mono_ms(void);
void sleep_ms(unsigned ms);
unsigned char pattern_byte(uint64_t i);
void add_file(const char *path, unsigned char *data, uint64_t size, enum file_kind kind);
void stub_setup(void);
void stub_teardown(void);
int stub_resolve(void *arg, const char *relpath, uint32_t *file_id, uint64_t *size);
void stub_release(void *ctx);
int stub_read(void *arg, uint32_t file_id, uint64_t off, size_t len,
		     struct remote_slice *out);
void stub_etag_of(uint32_t file_id, char *buf, size_t len);
uint32_t stub_id(const char *path);
int stub_etag(void *arg, uint32_t file_id, char *buf, size_t len);
void stub_stats(void *arg, struct strbuf *out);
void stub_metrics(void *arg, struct strbuf *out);
bool stub_held(void *arg, uint32_t file_id, uint64_t off);
bool stub_ready(void *arg, const char *relpath);
struct remote_server *start_server_at(const char *hostport, const char *secret,
					     unsigned *port);
struct remote_server *start_server(const char *secret, unsigned *port);
struct remote_peers *peers_for_port(unsigned port);
int http_raw(unsigned port, const char *method, const char *target, const char *headers,
		    struct strbuf *resp);
const char *header_value(const struct strbuf *resp, const char *name, char *val, size_t cap);
const char *body_of(const struct strbuf *resp, size_t *len);
bool path_is_contained(const char *p);
struct remote_peers *make_peers(const unsigned *order, unsigned n);
const char *signed_get(const char *secret, const char *target, const char *range,
			      int64_t dt, uint64_t id, uint64_t n, char *out, size_t outlen);
int connect_port(unsigned port);
bool closed_within(int fd, int ms);
int send_get(int fd, const char *target, const char *headers);
int recv_answer(int fd, struct strbuf *resp);
int keepalive_get(int fd, const char *auth);
void *flooder_main(void *arg);
unsigned thread_count(void);
long rss_kib(void);
long scale_rss_bound_kib(void);
void raise_nofile(rlim_t need);
const unsigned char *scale_range(unsigned i, unsigned r, char *target, size_t tcap,
					 char *range, size_t rcap, size_t *len);
void scale_send(int fd, unsigned i, unsigned r);
void scale_check(int fd, unsigned i, unsigned r, struct strbuf *resp);
void gate_set(bool open);
void wait_blocked(struct remote_server *s, unsigned working, unsigned queued);
void *stopper_main(void *arg);
void *worker_main(void *arg);
pid_t spawn_fake(const char *mode, unsigned *port);
void *probe_main(void *arg);

void remote_peers_tests(TCase *core, TCase *net);
void remote_http_tests(TCase *net);
void remote_scale_tests(TCase *scale);
void remote_client_tests(TCase *core, TCase *net);

#endif
