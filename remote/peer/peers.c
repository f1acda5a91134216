/* SPDX-License-Identifier: MIT */
/*
 * The peer list and ownership. `--peers` is parsed into normalized URLs,
 * and each cacheable unit (a file, or a chunk of a large file) is owned by
 * the node with the highest hash(unit key, node URL): rendezvous hashing.
 * Ownership then depends only on the URL strings, so every node agrees,
 * the load is ~1/n per node, and adding or removing a node moves only the
 * units that node gains or loses. Also reads the shared secret file.
 */
#include "remote/remote.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/hash.h"

/* Seeds of the two hashes; changing them changes every owner. */
#define PEER_URL_SEED 0x636f6f7264667331ULL  /* "coordfs1" */
#define UNIT_PATH_SEED 0x7061746863686b31ULL /* "pathchk1" */

struct remote_peer {
	char url[REMOTE_MAX_URL_LEN + 16];     /* http://host:port */
	char hostport[REMOTE_MAX_URL_LEN + 1]; /* host:port */
	uint64_t seed;			       /* hash of url */
};

struct remote_peers {
	unsigned count;
	struct remote_peer peer[];
};

static void set_err(char *err, size_t errlen, const char *fmt, const char *what)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, what);
}

/* Parse one URL of len bytes into pe. 0 or -EINVAL. */
static int peer_parse(const char *s, size_t len, struct remote_peer *pe)
{
	static const char scheme[] = "http://";
	const size_t slen = sizeof(scheme) - 1;
	char host[REMOTE_MAX_URL_LEN + 1];
	size_t i, hlen = 0;

	if (len > REMOTE_MAX_URL_LEN || len <= slen || strncasecmp(s, scheme, slen) != 0)
		return -EINVAL;
	if (len > slen && s[len - 1] == '/')
		len--;
	i = slen;
	if (s[i] == '[') {
		host[hlen++] = '[';
		for (i++; i < len && s[i] != ']'; i++) {
			if (!isxdigit((unsigned char)s[i]) && s[i] != ':' && s[i] != '.')
				return -EINVAL;
			host[hlen++] = (char)tolower((unsigned char)s[i]);
		}
		if (i >= len || hlen < 3)
			return -EINVAL;
		host[hlen++] = ']';
		i++;
	} else {
		for (; i < len && s[i] != ':'; i++) {
			unsigned char ch = (unsigned char)s[i];

			if (!isalnum(ch) && ch != '.' && ch != '-' && ch != '_')
				return -EINVAL;
			host[hlen++] = (char)tolower(ch);
		}
		if (hlen == 0)
			return -EINVAL;
	}
	host[hlen] = '\0';
	if (i >= len || s[i] != ':')
		return -EINVAL;
	i++;
	unsigned long port = 0;
	size_t digits = 0;

	for (; i < len; i++, digits++) {
		if (!isdigit((unsigned char)s[i]) || digits >= 5)
			return -EINVAL;
		port = port * 10 + (unsigned long)(s[i] - '0');
	}
	if (digits == 0 || port == 0 || port > 65535)
		return -EINVAL;
	if (snprintf(pe->hostport, sizeof(pe->hostport), "%s:%lu", host, port) >=
	    (int)sizeof(pe->hostport))
		return -EINVAL;
	snprintf(pe->url, sizeof(pe->url), "http://%s", pe->hostport);
	pe->seed = hash_bytes(pe->url, strlen(pe->url), PEER_URL_SEED);
	return 0;
}

int remote_peers_parse(const char *list, struct remote_peers **out, char *err, size_t errlen)
{
	struct remote_peers *p;
	unsigned n = 1;

	*out = NULL;
	if (!list || !*list) {
		set_err(err, errlen, "--peers: empty peer list%s", "");
		return -EINVAL;
	}
	for (const char *c = list; *c; c++)
		if (*c == ',')
			n++;
	if (n > REMOTE_MAX_PEERS) {
		char max[16];

		snprintf(max, sizeof(max), "%u", (unsigned)REMOTE_MAX_PEERS);
		set_err(err, errlen, "--peers: more than %s peers", max);
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p) + n * sizeof(p->peer[0]));
	if (!p)
		return -ENOMEM;
	const char *s = list;

	for (unsigned k = 0; k < n; k++) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);

		if (peer_parse(s, len, &p->peer[k]) != 0) {
			if (err && errlen)
				snprintf(err, errlen,
					 "--peers: bad peer URL '%.*s' (expected http://HOST:PORT)",
					 (int)(len > 200 ? 200 : len), s);
			free(p);
			return -EINVAL;
		}
		for (unsigned j = 0; j < k; j++) {
			if (strcmp(p->peer[j].url, p->peer[k].url) == 0) {
				set_err(err, errlen, "--peers: peer %s listed twice",
					p->peer[k].url);
				free(p);
				return -EINVAL;
			}
		}
		p->count++;
		s = end ? end + 1 : s + len;
	}
	*out = p;
	return 0;
}

void remote_peers_destroy(struct remote_peers *p)
{
	free(p);
}

unsigned remote_peers_count(const struct remote_peers *p)
{
	return p ? p->count : 0;
}

const char *remote_peers_url(const struct remote_peers *p, unsigned k)
{
	return p && k < p->count ? p->peer[k].url : NULL;
}

int remote_peers_find(const struct remote_peers *p, const char *url)
{
	for (unsigned k = 0; p && url && k < p->count; k++)
		if (strcmp(p->peer[k].url, url) == 0)
			return (int)k;
	return -1;
}

const char *remote_peers_hostport(const struct remote_peers *p, unsigned k)
{
	return p && k < p->count ? p->peer[k].hostport : NULL;
}

int remote_parse_node(const char *s, const struct remote_peers *p, unsigned *node, char *err,
		      size_t errlen)
{
	unsigned long v = 0;
	size_t i;

	for (i = 0; s && s[i]; i++) {
		if (!isdigit((unsigned char)s[i]) || i >= 6)
			goto bad;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (i == 0)
		goto bad;
	if (v >= remote_peers_count(p)) {
		if (err && errlen)
			snprintf(err, errlen, "--node=%s: out of range, --peers lists %u node(s)",
				 s, remote_peers_count(p));
		return -EINVAL;
	}
	*node = (unsigned)v;
	return 0;
bad:
	if (err && errlen)
		snprintf(err, errlen, "--node=%.40s: not a node index", s ? s : "");
	return -EINVAL;
}

uint64_t remote_unit_key(const char *relpath, size_t len, uint64_t chunk)
{
	uint64_t h = hash_bytes(relpath, len, UNIT_PATH_SEED);

	return hash_mix64(h ^ hash_mix64(chunk ^ 0x6368756e6bULL));
}

/* The highest-weight node of p but skip (UINT_MAX: none skipped), or
 * UINT_MAX when there is none. */
static unsigned owner_but(const struct remote_peers *p, uint64_t key, unsigned skip)
{
	unsigned best = UINT_MAX;
	uint64_t best_w = 0;

	for (unsigned k = 0; p && k < p->count; k++) {
		uint64_t w = hash_mix64(key ^ p->peer[k].seed);

		if (k == skip)
			continue;
		/* Ties (a 2^-64 event) go to the larger seed, then URL order,
		 * which again depends only on the URLs. */
		if (best == UINT_MAX || w > best_w ||
		    (w == best_w && (p->peer[k].seed > p->peer[best].seed ||
				     (p->peer[k].seed == p->peer[best].seed &&
				      strcmp(p->peer[k].url, p->peer[best].url) > 0)))) {
			best = k;
			best_w = w;
		}
	}
	return best;
}

unsigned remote_owner(const struct remote_peers *p, uint64_t key)
{
	unsigned best = owner_but(p, key, UINT_MAX);

	return best == UINT_MAX ? 0 : best;
}

unsigned remote_owner_without(const struct remote_peers *p, uint64_t key, unsigned skip)
{
	return owner_but(p, key, skip);
}

/* The secret file open for reading, or -errno with a message: a regular
 * file (links followed, as Kubernetes mounts secrets) of this user or
 * root. A FIFO would block the mount in open or read; a file another user
 * owns is a secret they know, or may change. */
static int secret_open(const char *path, char *err, size_t errlen)
{
	int fd = file_open_regular(path);
	struct stat st;

	if (fd == -EINVAL) {
		set_err(err, errlen, "--secret-file=%s: not a regular file", path);
		return fd;
	}
	if (fd < 0 || fstat(fd, &st) < 0) {
		int rc = fd < 0 ? fd : -errno;
		if (fd >= 0)
			close(fd);
		if (err && errlen)
			snprintf(err, errlen, "--secret-file=%s: %s", path, strerror(-rc));
		return rc;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		close(fd);
		if (err && errlen)
			snprintf(err, errlen,
				 "--secret-file=%s: belongs to another user (uid %u), who knows it",
				 path, (unsigned)st.st_uid);
		return -EPERM;
	}
	return fd;
}

/* The secret's bytes read from fd into buf (cap bytes at most): the count,
 * or -errno. */
static ssize_t secret_bytes(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n < cap) {
		ssize_t r = read(fd, buf + n, cap - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		n += (size_t)r;
	}
	return (ssize_t)n;
}

int remote_secret_read(const char *path, char **secret, char *err, size_t errlen)
{
	char buf[REMOTE_MAX_SECRET + 2];
	int fd, rc = 0;

	*secret = NULL;
	if ((fd = secret_open(path, err, errlen)) < 0)
		return fd;
	ssize_t got = secret_bytes(fd, buf, sizeof(buf));
	close(fd);
	size_t n = got < 0 ? 0 : (size_t)got;
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		n--;
	if (got < 0) {
		rc = (int)got;
		if (err && errlen)
			snprintf(err, errlen, "--secret-file=%s: %s", path, strerror(-rc));
	} else if (n > REMOTE_MAX_SECRET) {
		rc = -EFBIG;
		if (err && errlen)
			snprintf(err, errlen, "--secret-file=%s: longer than %d bytes", path,
				 REMOTE_MAX_SECRET);
	} else if (n == 0) {
		rc = -EINVAL;
		set_err(err, errlen, "--secret-file=%s: empty secret", path);
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (buf[i] < 0x21 || buf[i] > 0x7e) {
			rc = -EINVAL;
			set_err(err, errlen,
				"--secret-file=%s: secret must be printable ASCII without spaces",
				path);
		}
	}
	if (rc == 0 && !(*secret = malloc(n + 1)))
		rc = -ENOMEM;
	if (rc == 0) {
		memcpy(*secret, buf, n);
		(*secret)[n] = '\0';
	}
	/* On every path: a secret rejected for its length or a byte is still
	 * mostly the secret. */
	explicit_bzero(buf, sizeof(buf));
	return rc;
}
