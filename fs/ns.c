/* SPDX-License-Identifier: MIT */
/*
 * Breadth-first scan of SOURCE into the arrays of ns.h. Directories are
 * visited in node order, so each directory's children are appended as one
 * sorted run right after all earlier runs.
 */
#include "fs/ns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

struct scan_entry {
	ino_t ino; /* from readdir: stat in inode order, which is storage order on ext4/xfs */
	char *name;
	struct stat st;
	char *link;
};

static int pool_add(struct ns *ns, size_t *cap, const char *s, size_t len, uint32_t *off)
{
	if (ns->pool_len + len + 1 > UINT32_MAX)
		return -EOVERFLOW;
	if (ns->pool_len + len + 1 > *cap) {
		size_t ncap = *cap ? *cap : 65536;
		while (ns->pool_len + len + 1 > ncap)
			ncap *= 2;
		char *np = realloc(ns->pool, ncap);
		if (!np)
			return -ENOMEM;
		ns->pool = np;
		*cap = ncap;
	}
	memcpy(ns->pool + ns->pool_len, s, len);
	ns->pool[ns->pool_len + len] = '\0';
	*off = (uint32_t)ns->pool_len;
	ns->pool_len += len + 1;
	return 0;
}

static int node_add(struct ns *ns, size_t *cap, uint32_t *idx)
{
	if (ns->nnodes >= UINT32_MAX - 1)
		return -EOVERFLOW;
	if (ns->nnodes == *cap) {
		size_t ncap = *cap ? *cap * 2 : 1024;
		struct ns_node *nn = realloc(ns->nodes, ncap * sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		ns->nodes = nn;
		*cap = ncap;
	}
	*idx = ns->nnodes++;
	memset(&ns->nodes[*idx], 0, sizeof(ns->nodes[*idx]));
	return 0;
}

static int cmp_ino(const void *a, const void *b)
{
	ino_t x = ((const struct scan_entry *)a)->ino, y = ((const struct scan_entry *)b)->ino;
	return (x > y) - (x < y);
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct scan_entry *)a)->name, ((const struct scan_entry *)b)->name);
}

static void fill_node(struct ns_node *n, const struct stat *st)
{
	n->mode = (uint16_t)st->st_mode;
	n->uid = st->st_uid;
	n->gid = st->st_gid;
	n->size = S_ISDIR(st->st_mode) ? 0 : (uint64_t)st->st_size;
	n->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/*
 * stat() dominates a scan (find, which only reads directories, is several
 * times faster), and cold inodes come from storage one at a time. Large
 * directories are therefore stat'ed by several threads, which keeps more
 * inode reads in flight and uses every core when they are cached.
 */
#define STAT_THREADS 8
#define STAT_PER_THREAD 64

struct stat_job {
	int dfd;
	struct scan_entry *v;
	int *err;
	size_t first, n; /* a contiguous run [first, n) of inode-sorted entries */
};

static void *stat_slice(void *arg)
{
	struct stat_job *j = arg;

	for (size_t i = j->first; i < j->n; i++)
		j->err[i] = fstatat(j->dfd, j->v[i].name, &j->v[i].st, AT_SYMLINK_NOFOLLOW) < 0 ? errno
												: 0;
	return NULL;
}

static void stat_all(int dfd, struct scan_entry *v, int *err, size_t n)
{
	struct stat_job jobs[STAT_THREADS];
	pthread_t tid[STAT_THREADS];
	size_t nthreads = n / STAT_PER_THREAD;
	size_t started = 1;

	if (nthreads > STAT_THREADS)
		nthreads = STAT_THREADS;
	if (nthreads < 2)
		nthreads = 1;
	for (size_t t = 0; t < nthreads; t++)
		jobs[t] = (struct stat_job){ dfd, v, err, n * t / nthreads, n * (t + 1) / nthreads };
	/* Thread 0's share runs here; a thread that cannot start leaves its
	 * share to this one. */
	for (size_t t = 1; t < nthreads; t++) {
		if (pthread_create(&tid[t], NULL, stat_slice, &jobs[t]) != 0)
			break;
		started++;
	}
	for (size_t t = started; t < nthreads; t++)
		stat_slice(&jobs[t]);
	stat_slice(&jobs[0]);
	for (size_t t = 1; t < started; t++)
		pthread_join(tid[t], NULL);
}

static void free_entries(struct scan_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].link);
	}
	free(v);
}

/* Skip a fifo, socket or device: the first one at warning level, the
 * rest at info (ns_scan logs the total). */
static void skip_special(struct ns *ns, const char *path, const char *name)
{
	int level = ns->skipped_special++ ? LOG_INFO : LOG_WARNING;

	log_msg(level, "skipping %s/%s: not a file, directory or symlink (fifo, socket or device)",
		path, name);
}

/* Read one directory's entries (stat'ed, sorted) into *out. plen is the
 * length of path, the directory's relative path ("." for the root, plen 0). */
static int read_dir(struct ns *ns, int dfd, struct scan_entry **out, size_t *nout, char *err,
		    size_t errlen, const char *path, size_t plen)
{
	int fd2 = dup(dfd);
	if (fd2 < 0)
		return -errno;
	DIR *d = fdopendir(fd2);
	if (!d) {
		int rc = -errno;
		close(fd2);
		return rc;
	}
	struct scan_entry *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	struct dirent *de;

	errno = 0;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_type != DT_UNKNOWN && de->d_type != DT_REG && de->d_type != DT_DIR &&
		    de->d_type != DT_LNK) {
			skip_special(ns, path, de->d_name);
			continue;
		}
		/* "dir/name" and its NUL must fit in PATH_MAX for every later open. */
		size_t nlen = strlen(de->d_name);
		if (nlen > 255 || (plen ? plen + 1 : 0) + nlen + 1 > PATH_MAX) {
			log_warn("skipping %s/%.64s...: its path is longer than PATH_MAX (%d)", path,
				 de->d_name, PATH_MAX);
			ns->skipped_long++;
			continue;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct scan_entry *nv = realloc(v, ncap * sizeof(*nv));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
			cap = ncap;
		}
		v[n].ino = de->d_ino;
		v[n].name = strdup(de->d_name);
		v[n].link = NULL;
		if (!v[n].name) {
			rc = -ENOMEM;
			break;
		}
		n++;
		errno = 0;
	}
	if (!rc && errno)
		rc = -errno;
	closedir(d);
	int *st_err = rc ? NULL : malloc((n ? n : 1) * sizeof(int));
	if (!rc && !st_err)
		rc = -ENOMEM;
	if (rc) {
		free_entries(v, n);
		return rc;
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_ino);
	stat_all(dfd, v, st_err, n);

	/* Keep what can be shown; read link targets. */
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		struct scan_entry e = v[i];
		mode_t m = e.st.st_mode;
		if (st_err[i]) {
			log_warn("skipping %s/%s: %s", path, e.name, strerror(st_err[i]));
			ns->skipped_unreadable++;
			free(e.name);
			continue;
		}
		if (!S_ISREG(m) && !S_ISDIR(m) && !S_ISLNK(m)) {
			skip_special(ns, path, e.name);
			free(e.name);
			continue;
		}
		if (S_ISLNK(m)) {
			char target[PATH_MAX];
			ssize_t tl = readlinkat(dfd, e.name, target, sizeof(target) - 1);
			if (tl < 0)
				tl = 0;
			target[tl] = '\0';
			e.link = strdup(target);
			if (!e.link)
				rc = -ENOMEM;
		}
		v[kept++] = e;
	}
	free(st_err);
	if (rc) {
		free_entries(v, kept);
		return rc;
	}
	if (kept > 1)
		qsort(v, kept, sizeof(*v), cmp_entry);
	*out = v;
	*nout = kept;
	return 0;
}

int ns_scan(struct ns *ns, int source_fd, uint64_t chunk_size, char *err, size_t errlen)
{
	size_t node_cap = 0, pool_cap = 0;
	uint32_t idx;
	struct stat st;
	int rc;
	char *path = malloc(PATH_MAX);

	memset(ns, 0, sizeof(*ns));
	ns->chunk_size = chunk_size;
	if (!path)
		return -ENOMEM;
	if (fstat(source_fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if ((rc = node_add(ns, &node_cap, &idx)) < 0)
		goto out;
	fill_node(&ns->nodes[0], &st);
	if ((rc = pool_add(ns, &pool_cap, "", 0, &ns->nodes[0].name_off)) < 0)
		goto out;

	for (uint32_t dir = 0; dir < ns->nnodes; dir++) {
		if (!ns_is_dir(ns, dir))
			continue;
		int plen = ns_path(ns, dir, path, PATH_MAX);
		if (plen < 0) {
			snprintf(err, errlen, "path too long below %s", ns_name(ns, dir));
			rc = plen;
			goto out;
		}
		int dfd = dir == 0 ? dup(source_fd)
				   : openat(source_fd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0) {
			log_warn("cannot read directory %s: %s; shown empty", path, strerror(errno));
			continue;
		}
		struct scan_entry *ents = NULL;
		size_t nents = 0;
		rc = read_dir(ns, dfd, &ents, &nents, err, errlen, plen ? path : ".", (size_t)plen);
		close(dfd);
		if (rc < 0) {
			if (!*err)
				snprintf(err, errlen, "cannot read directory %s", plen ? path : ".");
			goto out;
		}
		ns->nodes[dir].first = ns->nnodes;
		ns->nodes[dir].count = (uint32_t)nents;
		for (size_t k = 0; k < nents; k++) {
			if (rc == 0 && (rc = node_add(ns, &node_cap, &idx)) == 0) {
				struct ns_node *n = &ns->nodes[idx];
				fill_node(n, &ents[k].st);
				n->parent = dir;
				n->name_len = (uint16_t)strlen(ents[k].name);
				rc = pool_add(ns, &pool_cap, ents[k].name, n->name_len, &n->name_off);
				if (S_ISDIR(n->mode))
					ns->ndirs++;
				if (rc == 0 && ents[k].link)
					rc = pool_add(ns, &pool_cap, ents[k].link, strlen(ents[k].link),
						      &n->first);
				if (rc == 0 && S_ISREG(n->mode)) {
					uint64_t units = (n->size + chunk_size - 1) / chunk_size;
					if (units > UINT32_MAX || ns->nunits + units > UINT32_MAX)
						rc = -EOVERFLOW;
					n->first = (uint32_t)ns->nunits;
					n->count = (uint32_t)units;
					ns->nunits += units;
					ns->nfiles++;
					ns->total_bytes += n->size;
				}
			}
			free(ents[k].name);
			free(ents[k].link);
		}
		free(ents);
		if (rc < 0) {
			snprintf(err, errlen, "cannot index %s", plen ? path : ".");
			goto out;
		}
	}
	if (ns->skipped_special || ns->skipped_long || ns->skipped_unreadable)
		log_msg(LOG_NOTICE,
			"left out of the mount: %llu fifos, sockets or devices, %llu paths longer "
			"than PATH_MAX, %llu entries that could not be stat'ed",
			(unsigned long long)ns->skipped_special, (unsigned long long)ns->skipped_long,
			(unsigned long long)ns->skipped_unreadable);
	/* Give back the slack of the doubling growth. */
	struct ns_node *shrunk = realloc(ns->nodes, (size_t)ns->nnodes * sizeof(*shrunk));
	if (shrunk)
		ns->nodes = shrunk;
	char *pshrunk = realloc(ns->pool, ns->pool_len);
	if (pshrunk)
		ns->pool = pshrunk;
	rc = 0;
out:
	free(path);
	if (rc < 0)
		ns_fini(ns);
	return rc;
}

void ns_fini(struct ns *ns)
{
	free(ns->nodes);
	free(ns->pool);
	memset(ns, 0, sizeof(*ns));
}

int ns_lookup(const struct ns *ns, uint32_t dir, const char *name, size_t len, uint32_t *child)
{
	if (dir >= ns->nnodes)
		return -ENOENT;
	if (!ns_is_dir(ns, dir))
		return -ENOTDIR;
	uint32_t lo = ns->nodes[dir].first, hi = lo + ns->nodes[dir].count;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct ns_node *n = &ns->nodes[mid];
		size_t m = n->name_len < len ? n->name_len : len;
		int c = memcmp(ns->pool + n->name_off, name, m);
		if (c == 0)
			c = (n->name_len > len) - (n->name_len < len);
		if (c == 0) {
			*child = mid;
			return 0;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -ENOENT;
}

int ns_resolve(const struct ns *ns, const char *relpath, uint32_t *node)
{
	uint32_t cur = 0;
	const char *p = relpath;

	if (*p == '/')
		return -EINVAL;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		if (memchr(p, '\0', len))
			return -EINVAL;
		int rc = ns_lookup(ns, cur, p, len, &cur);
		if (rc < 0)
			return rc == -ENOTDIR ? -ENOENT : rc;
		p += len;
		if (*p == '/')
			p++;
	}
	*node = cur;
	return 0;
}

int ns_path(const struct ns *ns, uint32_t i, char *buf, size_t buflen)
{
	size_t total = 0;

	for (uint32_t j = i; j != 0; j = ns->nodes[j].parent)
		total += ns->nodes[j].name_len + (total ? 1 : 0);
	if (total + 1 > buflen)
		return -ENAMETOOLONG;
	buf[total] = '\0';
	size_t end = total;
	for (uint32_t j = i; j != 0; j = ns->nodes[j].parent) {
		size_t l = ns->nodes[j].name_len;
		if (end != total)
			buf[--end] = '/';
		end -= l;
		memcpy(buf + end, ns->pool + ns->nodes[j].name_off, l);
	}
	return (int)total;
}
