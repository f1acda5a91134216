/* SPDX-License-Identifier: MIT */
/*
 * Cluster membership from what the job already runs under, so that no one
 * types a node list: the nodes of the current SLURM job (its node list
 * expanded by Slurm's own `scontrol show hostnames`, not a parser of ours),
 * every address a DNS name has (a Kubernetes headless Service, Consul), or
 * a file of URLs (a ConfigMap, a job script). Each becomes the ordinary
 * --peers list, the same on every node (DNS addresses sorted), and this
 * node is found in it: SLURM_NODEID, its own interface addresses, or
 * --node-name / --listen. Taken at mount, and again while mounted by
 * fs/cluster.c for dns: and file:.
 */
#include "fs/membership.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/deadline.h"
#include "common/file.h"
#include "common/strbuf.h"
#include "common/text.h"
#include "remote/remote.h"

#define SCONTROL_TIMEOUT_MS 10000
#define MAX_NODES 1024 /* as a static --peers list */

extern char **environ;

const char *fs_membership_source(const char *peers)
{
	if (!peers)
		return "none";
	if (!strcmp(peers, "slurm"))
		return "slurm";
	if (!strncmp(peers, "dns:", 4))
		return "dns";
	if (!strncmp(peers, "file:", 5))
		return "file";
	return "static";
}

static int fail(char *err, unsigned errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, unsigned errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

/* `scontrol show hostnames LIST`'s lines into out (one host a line). The
 * child is killed, and its pipe closed, on any error or after
 * SCONTROL_TIMEOUT_MS; its output is capped. */
static int slurm_hostnames(const char *nodelist, struct strbuf *out, char *err, unsigned errlen)
{
	char *argv[] = { "scontrol", "show", "hostnames", (char *)nodelist, NULL };
	posix_spawn_file_actions_t fa;
	int pfd[2], status = 0, rc = 0;
	int64_t deadline = deadline_now_ms() + SCONTROL_TIMEOUT_MS;
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return fail(err, errlen, -errno, "--peers=slurm: pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
	rc = posix_spawnp(&pid, "scontrol", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc != 0) {
		close(pfd[0]);
		return fail(err, errlen, -rc, "--peers=slurm: cannot run scontrol: %s",
			    strerror(rc));
	}
	for (;;) {
		char buf[4096];
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		int64_t left = deadline - deadline_now_ms();

		if (left <= 0 || poll(&p, 1, (int)left) == 0) {
			rc = fail(err, errlen, -ETIMEDOUT,
				  "--peers=slurm: scontrol show hostnames took over %d s",
				  SCONTROL_TIMEOUT_MS / 1000);
			break;
		}
		ssize_t n = read(pfd[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		strbuf_append(out, buf, (size_t)n);
		if (out->len > FS_MEMBERSHIP_MAX_BYTES) {
			rc = fail(err, errlen, -EFBIG, "--peers=slurm: scontrol printed over %u bytes",
				  FS_MEMBERSHIP_MAX_BYTES);
			break;
		}
	}
	if (rc < 0)
		kill(pid, SIGKILL);
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
		rc = fail(err, errlen, -EINVAL,
			  "--peers=slurm: scontrol show hostnames '%s' failed (exit %d)", nodelist,
			  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	return rc;
}

/* The URLs of the lines of text (blank lines and '#' comments skipped),
 * each made http://LINE:PORT when port > 0, comma-joined into list. */
static int lines_to_list(const char *what, const char *text, unsigned port, struct strbuf *list,
			 unsigned *count, char *err, unsigned errlen)
{
	*count = 0;
	for (const char *p = text; *p;) {
		size_t n = strcspn(p, "\n");
		const char *end = p + n;
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
			p++;
		const char *e = end;
		while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			e--;
		if (e > p && *p != '#') {
			if (memchr(p, ',', (size_t)(e - p)))
				return fail(err, errlen, -EINVAL, "%s: '%.*s' has a comma", what,
					    (int)(e - p), p);
			if (++*count > MAX_NODES)
				return fail(err, errlen, -E2BIG, "%s: more than %d nodes", what,
					    MAX_NODES);
			if (list->len)
				strbuf_puts(list, ",");
			if (port)
				strbuf_printf(list, "http://%.*s:%u", (int)(e - p), p, port);
			else
				strbuf_append(list, p, (size_t)(e - p));
		}
		p = *end ? end + 1 : end;
	}
	if (!*count)
		return fail(err, errlen, -ENOENT, "%s: no nodes", what);
	return list->failed ? -ENOMEM : 0;
}

static int read_file(const char *path, struct strbuf *out, char *err, unsigned errlen)
{
	uint8_t *data = NULL;
	size_t len = 0;
	int fd = file_open_regular(path), rc = fd;

	struct stat st;

	/* A FIFO there would block the mount, or the refresh thread for good. */
	if (fd == -EINVAL)
		return fail(err, errlen, fd, "--peers=file:%s: not a regular file", path);
	/* Whoever may write the list chooses the nodes this one fetches the
	 * dataset from, and peers' answers are not signed: only this user's
	 * or root's file, that no one else may write. */
	if (fd >= 0 && fstat(fd, &st) == 0 &&
	    ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022))) {
		close(fd);
		return fail(err, errlen, -EPERM,
			    "--peers=file:%s: %s (uid %u, mode %04o): it would choose the nodes",
			    path, st.st_mode & 022 ? "others may write it" : "belongs to another user",
			    (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	}
	if (fd >= 0) {
		rc = file_read_fd(fd, FS_MEMBERSHIP_MAX_BYTES, &data, &len);
		close(fd);
	}
	if (rc == -EFBIG)
		return fail(err, errlen, rc, "--peers=file:%s: over %u bytes", path,
			    FS_MEMBERSHIP_MAX_BYTES);
	if (rc < 0)
		return fail(err, errlen, rc, "--peers=file:%s: %s", path, strerror(-rc));
	strbuf_append(out, (const char *)data, len);
	free(data);
	return out->failed ? -ENOMEM : 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every address name has, sorted (so that every node builds the same
 * list), as "ADDR\n" lines; IPv6 ones in brackets. */
static int dns_addresses(const char *name, struct strbuf *out, char *err, unsigned errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	char *addrs[MAX_NODES];
	unsigned n = 0;
	int rc = getaddrinfo(name, NULL, &hints, &res);

	if (rc != 0)
		return fail(err, errlen, -EHOSTUNREACH, "--peers=dns:%s: %s", name,
			    gai_strerror(rc));
	for (struct addrinfo *ai = res; ai && n < MAX_NODES; ai = ai->ai_next) {
		char a[INET6_ADDRSTRLEN + 2];
		const void *src = ai->ai_family == AF_INET
					  ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
					  : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;

		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		if (!inet_ntop(ai->ai_family, src, a + 1, sizeof(a) - 2))
			continue;
		if (ai->ai_family == AF_INET6) {
			a[0] = '[';
			strcat(a, "]");
		}
		const char *s = ai->ai_family == AF_INET6 ? a : a + 1;
		bool dup = false;
		for (unsigned k = 0; k < n && !dup; k++)
			dup = !strcmp(addrs[k], s);
		if (!dup && !(addrs[n] = strdup(s)))
			break;
		n += !dup;
	}
	freeaddrinfo(res);
	qsort(addrs, n, sizeof(addrs[0]), cmp_str);
	for (unsigned k = 0; k < n; k++) {
		strbuf_puts(out, addrs[k]);
		strbuf_puts(out, "\n");
		free(addrs[k]);
	}
	if (!n)
		return fail(err, errlen, -EHOSTUNREACH, "--peers=dns:%s: no address", name);
	return out->failed ? -ENOMEM : 0;
}

/* Whether addr (as in a URL: IPv6 in brackets) is one of this host's
 * interface addresses. */
static bool is_local_address(const struct ifaddrs *ifs, const char *addr)
{
	for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		char a[INET6_ADDRSTRLEN + 2] = "";

		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a,
				  sizeof(a));
		else if (i->ifa_addr->sa_family == AF_INET6) {
			a[0] = '[';
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, a + 1,
				  sizeof(a) - 2);
			strcat(a, "]");
		} else
			continue;
		if (!strcmp(a, addr))
			return true;
	}
	return false;
}

/* The index of the node whose host:port is hostport (normalized as
 * remote_peers_parse does), or -1. */
static int find_hostport(const struct remote_peers *p, const char *hostport)
{
	struct remote_peers *one = NULL;
	char url[600], e[256];
	int found = -1;

	snprintf(url, sizeof(url), "%s%s", strncmp(hostport, "http://", 7) ? "http://" : "",
		 hostport);
	if (remote_peers_parse(url, &one, e, sizeof(e)) < 0)
		return -1;
	for (unsigned k = 0; k < remote_peers_count(p) && found < 0; k++)
		if (!strcmp(remote_peers_hostport(p, k), remote_peers_hostport(one, 0)))
			found = (int)k;
	remote_peers_destroy(one);
	return found;
}

int fs_membership_resolve(const struct fs_membership_args *o, char **list, unsigned *node,
			  char *err, unsigned errlen)
{
	const char *src = fs_membership_source(o->peers);
	struct strbuf text, urls;
	struct remote_peers *p = NULL;
	unsigned port = o->peer_port ? o->peer_port : FS_PEER_PORT_DEFAULT, count = 0;
	int rc, self = -1;
	char what[300];

	*list = NULL;
	strbuf_init(&text);
	strbuf_init(&urls);
	if (!strcmp(src, "slurm")) {
		const char *nodes = getenv("SLURM_JOB_NODELIST"), *id = getenv("SLURM_NODEID");
		char *end;
		long id_l;

		snprintf(what, sizeof(what), "--peers=slurm");
		if (!nodes || !*nodes || !id || !*id) {
			rc = fail(err, errlen, -ENOENT,
				  "--peers=slurm: not in a SLURM job step (SLURM_JOB_NODELIST and "
				  "SLURM_NODEID are not both set); run coordfs with srun");
			goto out;
		}
		/* Checked as a long: cast to int first, 4294967297 was node 1.
		 * Digits only: strtol also takes " 1" and "+1". */
		errno = 0;
		id_l = strtol(id, &end, 10);
		if (!text_is_digits(id) || errno || *end || id_l < 0 || id_l > MAX_NODES) {
			rc = fail(err, errlen, -EINVAL, "--peers=slurm: bad SLURM_NODEID '%s'", id);
			goto out;
		}
		self = (int)id_l;
		if ((rc = slurm_hostnames(nodes, &text, err, errlen)) < 0)
			goto out;
	} else if (!strcmp(src, "dns")) {
		char name[256];
		const char *spec = o->peers + 4, *colon = strrchr(spec, ':');

		if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
			/* Over 5 digits is out of range, not atoi's overflow
			 * (4294967297 was port 1). */
			port = strlen(colon + 1) > 5 ? 0 : (unsigned)atoi(colon + 1);
			snprintf(name, sizeof(name), "%.*s", (int)(colon - spec), spec);
		} else {
			snprintf(name, sizeof(name), "%s", spec);
		}
		snprintf(what, sizeof(what), "--peers=dns:%s", name);
		if (!*name || port == 0 || port > 65535) {
			rc = fail(err, errlen, -EINVAL, "bad --peers=dns:NAME[:PORT] '%s'", o->peers);
			goto out;
		}
		if ((rc = dns_addresses(name, &text, err, errlen)) < 0)
			goto out;
	} else if (!strcmp(src, "file")) {
		snprintf(what, sizeof(what), "--peers=%s", o->peers);
		port = 0; /* whole URLs */
		if ((rc = read_file(o->peers + 5, &text, err, errlen)) < 0)
			goto out;
	} else {
		rc = fail(err, errlen, -EINVAL, "--peers '%s' is not a membership source", o->peers);
		goto out;
	}
	strbuf_puts(&text, "");
	if ((rc = lines_to_list(what, text.buf ? text.buf : "", port, &urls, &count, err, errlen)) <
	    0)
		goto out;
	if ((rc = remote_peers_parse(urls.buf, &p, err, errlen)) < 0)
		goto out;
	if (!strcmp(src, "slurm")) {
		if ((unsigned)self >= count) {
			rc = fail(err, errlen, -ENOENT,
				  "--peers=slurm: SLURM_NODEID %d is not among the job's %u nodes",
				  self, count);
			goto out;
		}
	} else if (o->node_name || o->listen) {
		/* file: --node-name names a URL or host:port, else --listen;
		 * dns: --node-name names an address (or host:port) */
		char hp[300];
		const char *want = o->node_name ? o->node_name : o->listen;

		if (!strcmp(src, "dns") && o->node_name && !strchr(o->node_name, ']') &&
		    !strchr(o->node_name, ':'))
			snprintf(hp, sizeof(hp), "%s:%u", o->node_name, port);
		else if (!strcmp(src, "dns") && o->node_name && o->node_name[0] == '[' &&
			 !strstr(o->node_name, "]:"))
			snprintf(hp, sizeof(hp), "%s:%u", o->node_name, port);
		else
			snprintf(hp, sizeof(hp), "%s", want);
		self = find_hostport(p, hp);
		if (self < 0 && !o->allow_absent) {
			rc = fail(err, errlen, -ENOENT, "%s: this node (%s '%s') is not among its %u nodes",
				  what, o->node_name ? "--node-name" : "--listen", want, count);
			goto out;
		}
	} else if (!strcmp(src, "dns")) {
		struct ifaddrs *ifs = NULL;
		char host[300];

		if (getifaddrs(&ifs) < 0) {
			rc = fail(err, errlen, -errno, "%s: cannot list this host's addresses: %s",
				  what, strerror(errno));
			goto out;
		}
		for (unsigned k = 0; k < count; k++) {
			const char *hpk = remote_peers_hostport(p, k);
			const char *c = strrchr(hpk, ':');

			snprintf(host, sizeof(host), "%.*s", (int)(c - hpk), hpk);
			if (is_local_address(ifs, host)) {
				if (self >= 0) {
					freeifaddrs(ifs);
					rc = fail(err, errlen, -EINVAL,
						  "%s: this host has several of its addresses; name "
						  "this node with --node-name",
						  what);
					goto out;
				}
				self = (int)k;
			}
		}
		freeifaddrs(ifs);
		if (self < 0 && !o->allow_absent) {
			rc = fail(err, errlen, -ENOENT,
				  "%s: this node is not among its %u addresses (none is an address of "
				  "this host); name it with --node-name",
				  what, count);
			goto out;
		}
	} else {
		rc = fail(err, errlen, -EINVAL, "%s: name this node with --node-name or --listen",
			  what);
		goto out;
	}
	*node = self < 0 ? UINT_MAX : (unsigned)self;
	*list = strdup(urls.buf);
	rc = *list ? 0 : -ENOMEM;
out:
	remote_peers_destroy(p);
	strbuf_fini(&text);
	strbuf_fini(&urls);
	return rc;
}
