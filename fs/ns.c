/* SPDX-License-Identifier: MIT */
/*
 * Breadth-first scan of SOURCE into the arrays of ns.h. Directories are
 * visited in node order, so each directory's children are appended as one
 * sorted run right after all earlier runs. The scan reads directories
 * only; attributes are frozen at first lookup (ns_freeze).
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

int ns_text_put(struct ns_text *t, const void *data, size_t len, bool nul, uint32_t *off)
{
	size_t need = len + (nul ? 1 : 0);

	if (t->len + need > UINT32_MAX)
		return -EOVERFLOW;
	if (t->len + need > t->cap) {
		size_t ncap = t->cap ? t->cap : 4096;
		while (t->len + need > ncap)
			ncap *= 2;
		char *nb = realloc(t->buf, ncap);
		if (!nb)
			return -ENOMEM;
		t->buf = nb;
		t->cap = ncap;
	}
	memcpy(t->buf + t->len, data, len);
	if (nul)
		t->buf[t->len + len] = '\0';
	*off = (uint32_t)t->len;
	t->len += need;
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

static int64_t ts_ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void fill_attrs(struct ns_node *n, const struct stat *st)
{
	n->mode = (uint16_t)st->st_mode;
	n->uid = st->st_uid;
	n->gid = st->st_gid;
	n->size = S_ISDIR(st->st_mode) ? 0 : (uint64_t)st->st_size;
	n->mtime_ns = ts_ns(st->st_mtim);
}

/*
 * Reading directories dominates a scan (find, which does nothing else, is
 * the yardstick), and on network filesystems each one waits on a round
 * trip. Directories are therefore read by several threads ahead of the one
 * building the arrays, which takes their sorted entries in node order, so
 * that the nodes come out exactly as a serial breadth-first scan makes
 * them.
 */
#define SCAN_THREADS 3
#define SCAN_AHEAD 256 /* directories read but not yet taken, at most */
#define NO_LINK UINT32_MAX

struct scan_entry {
	uint32_t name; /* offsets into the directory's text */
	uint32_t link; /* symlink target, or NO_LINK */
	uint16_t name_len;
	uint16_t type; /* S_IFREG, S_IFDIR or S_IFLNK */
};

/* One directory to read (path relative to SOURCE, "" for the root), and
 * once done its entries sorted by name. */
struct dir_job {
	uint32_t dir;
	bool done;
	int rc;
	size_t plen;
	struct scan_entry *v;
	size_t n, cap;
	struct ns_text text; /* names and link targets */
	char path[];
};

struct scan {
	int source_fd;
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job to claim, or stop */
	pthread_cond_t done; /* a job finished */
	struct dir_job **jobs;
	size_t njobs, jobs_cap;
	size_t claimed;	 /* jobs before this one are taken by a reader */
	size_t consumed; /* jobs before this one are in the arrays (and freed) */
	bool stop;
	_Atomic uint64_t special, longp, unreadable;
};

static void job_free(struct dir_job *j)
{
	if (j) {
		free(j->v);
		free(j->text.buf);
		free(j);
	}
}

static int cmp_entry(const void *a, const void *b, void *text)
{
	return strcmp((const char *)text + ((const struct scan_entry *)a)->name,
		      (const char *)text + ((const struct scan_entry *)b)->name);
}

/* Skip a fifo, socket or device: the first one at warning level, the
 * rest at info (ns_scan logs the total). */
static void skip_special(struct scan *sc, const char *path, const char *name)
{
	int level = atomic_fetch_add(&sc->special, 1) ? LOG_INFO : LOG_WARNING;

	log_msg(level, "skipping %s/%s: not a file, directory or symlink (fifo, socket or device)",
		path, name);
}

/* The type of a directory entry: d_type, or a stat where the filesystem
 * gives DT_UNKNOWN (only the type is kept). 0: not shown (logged and
 * counted here). */
static uint16_t entry_type(struct scan *sc, int dfd, const struct dirent *de, const char *path)
{
	unsigned char t = de->d_type;

	if (t == DT_UNKNOWN) {
		struct stat st;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			log_warn("skipping %s/%s: %s", path, de->d_name, strerror(errno));
			atomic_fetch_add(&sc->unreadable, 1);
			return 0;
		}
		t = S_ISREG(st.st_mode) ? DT_REG : S_ISDIR(st.st_mode) ? DT_DIR
				       : S_ISLNK(st.st_mode) ? DT_LNK : DT_FIFO;
	}
	switch (t) {
	case DT_REG:
		return S_IFREG;
	case DT_DIR:
		return S_IFDIR;
	case DT_LNK:
		return S_IFLNK;
	default:
		skip_special(sc, path, de->d_name);
		return 0;
	}
}

static int entry_add(struct scan *sc, struct dir_job *j, int dfd, const struct dirent *de,
		     const char *shown)
{
	/* "dir/name" and its NUL must fit in PATH_MAX for every later open. */
	size_t nlen = strlen(de->d_name);
	if (nlen > 255 || (j->plen ? j->plen + 1 : 0) + nlen + 1 > PATH_MAX) {
		/* Reason first: the path itself is too long for one line. */
		log_warn("skipping an entry whose path is longer than PATH_MAX (%d): "
			 "%.200s%s/%.64s%s",
			 PATH_MAX, shown, j->plen > 200 ? "..." : "", de->d_name,
			 nlen > 64 ? "..." : "");
		atomic_fetch_add(&sc->longp, 1);
		return 0;
	}
	uint16_t type = entry_type(sc, dfd, de, shown);
	if (!type)
		return 0;
	if (j->n == j->cap) {
		size_t ncap = j->cap ? j->cap * 2 : 64;
		struct scan_entry *nv = realloc(j->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		j->v = nv;
		j->cap = ncap;
	}
	struct scan_entry *e = &j->v[j->n];
	e->type = type;
	e->name_len = (uint16_t)nlen;
	e->link = NO_LINK;
	int rc = ns_text_put(&j->text, de->d_name, nlen, true, &e->name);
	if (rc == 0 && type == S_IFLNK) {
		char target[PATH_MAX];
		ssize_t tl = readlinkat(dfd, de->d_name, target, sizeof(target) - 1);
		rc = ns_text_put(&j->text, target, tl < 0 ? 0 : (size_t)tl, true, &e->link);
	}
	if (rc == 0)
		j->n++;
	return rc;
}

/* Read job j's directory: its entries sorted by name, or j->rc < 0 (out
 * of memory). A directory that cannot be opened is shown empty, one whose
 * reading fails part way keeps the entries read before: each is logged
 * and counted in skipped_unreadable, and the rest of the tree is mounted. */
static void read_dir(struct scan *sc, struct dir_job *j)
{
	const char *shown = j->plen ? j->path : ".";
	int dfd = j->plen ? openat(sc->source_fd, j->path,
				   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
			  : dup(sc->source_fd);
	if (dfd < 0) {
		log_warn("cannot read directory %s: %s; shown empty", shown, strerror(errno));
		atomic_fetch_add(&sc->unreadable, 1);
		return;
	}
	DIR *d = fdopendir(dfd);
	if (!d) {
		j->rc = -errno;
		close(dfd);
		return;
	}
	struct dirent *de;

	errno = 0;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.' &&
		    (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0')))
			continue;
		if ((j->rc = entry_add(sc, j, dfd, de, shown)) < 0)
			break;
		errno = 0;
	}
	if (!j->rc && errno) {
		log_warn("reading directory %s failed after %zu entries: %s; the rest of it "
			 "is left out", shown, j->n, strerror(errno));
		atomic_fetch_add(&sc->unreadable, 1);
	}
	closedir(d);
	if (!j->rc && j->n > 1)
		qsort_r(j->v, j->n, sizeof(*j->v), cmp_entry, j->text.buf);
}

static void *reader(void *arg)
{
	struct scan *sc = arg;

	pthread_mutex_lock(&sc->lock);
	for (;;) {
		while (!sc->stop &&
		       (sc->claimed >= sc->njobs || sc->claimed >= sc->consumed + SCAN_AHEAD))
			pthread_cond_wait(&sc->work, &sc->lock);
		if (sc->stop)
			break;
		struct dir_job *j = sc->jobs[sc->claimed++];
		pthread_mutex_unlock(&sc->lock);
		read_dir(sc, j);
		pthread_mutex_lock(&sc->lock);
		j->done = true;
		pthread_cond_broadcast(&sc->done);
	}
	pthread_mutex_unlock(&sc->lock);
	return NULL;
}

/* Queue directory node dir at path (parent's path + '/' + name). */
static int job_push(struct scan *sc, uint32_t dir, const char *ppath, size_t pplen,
		    const char *name, size_t nlen)
{
	size_t plen = pplen ? pplen + 1 + nlen : nlen;
	struct dir_job *j = calloc(1, sizeof(*j) + plen + 1);

	if (!j)
		return -ENOMEM;
	j->dir = dir;
	j->plen = plen;
	if (pplen) {
		memcpy(j->path, ppath, pplen);
		j->path[pplen] = '/';
		memcpy(j->path + pplen + 1, name, nlen);
	} else {
		memcpy(j->path, name, nlen);
	}
	pthread_mutex_lock(&sc->lock);
	if (sc->njobs == sc->jobs_cap) {
		size_t ncap = sc->jobs_cap ? sc->jobs_cap * 2 : 1024;
		struct dir_job **nj = realloc(sc->jobs, ncap * sizeof(*nj));
		if (!nj) {
			pthread_mutex_unlock(&sc->lock);
			free(j);
			return -ENOMEM;
		}
		sc->jobs = nj;
		sc->jobs_cap = ncap;
	}
	sc->jobs[sc->njobs++] = j;
	pthread_cond_signal(&sc->work);
	pthread_mutex_unlock(&sc->lock);
	return 0;
}

/* The next directory in node order, read (by a reader, or here when none
 * has taken it yet). NULL when the tree is done. */
static struct dir_job *job_next(struct scan *sc)
{
	struct dir_job *j;

	pthread_mutex_lock(&sc->lock);
	if (sc->consumed == sc->njobs) {
		pthread_mutex_unlock(&sc->lock);
		return NULL;
	}
	j = sc->jobs[sc->consumed];
	if (sc->claimed == sc->consumed) {
		sc->claimed++;
		pthread_mutex_unlock(&sc->lock);
		read_dir(sc, j);
		pthread_mutex_lock(&sc->lock);
		j->done = true;
	}
	while (!j->done)
		pthread_cond_wait(&sc->done, &sc->lock);
	sc->jobs[sc->consumed++] = NULL;
	pthread_cond_broadcast(&sc->work); /* the window moved */
	pthread_mutex_unlock(&sc->lock);
	return j;
}

/* Append directory j's entries as the children of its node. */
static int take_dir(struct ns *ns, struct scan *sc, struct dir_job *j, size_t *node_cap,
		    struct ns_text *pool)
{
	uint32_t idx;
	int rc = 0;

	ns->nodes[j->dir].first = ns->nnodes;
	ns->nodes[j->dir].count = (uint32_t)j->n;
	for (size_t k = 0; k < j->n && rc == 0; k++) {
		const struct scan_entry *e = &j->v[k];
		if ((rc = node_add(ns, node_cap, &idx)) < 0)
			break;
		struct ns_node *n = &ns->nodes[idx];
		n->mode = e->type;
		n->parent = j->dir;
		n->name_len = e->name_len;
		const char *text = j->text.buf;
		rc = ns_text_put(pool, text + e->name, e->name_len, true, &n->name_off);
		if (rc == 0 && e->link != NO_LINK)
			rc = ns_text_put(pool, text + e->link, strlen(text + e->link), true,
					 &n->first);
		if (S_ISREG(e->type))
			ns->nfiles++;
		if (rc == 0 && S_ISDIR(e->type)) {
			ns->ndirs++;
			rc = job_push(sc, idx, j->path, j->plen, j->text.buf + e->name, e->name_len);
		}
	}
	return rc;
}

int ns_scan(struct ns *ns, int source_fd, uint64_t chunk_size, char *err, size_t errlen)
{
	size_t node_cap = 0;
	struct ns_text pool = {0};
	uint32_t idx;
	struct stat st;
	struct scan sc = { .source_fd = source_fd };
	pthread_t tids[SCAN_THREADS];
	unsigned started = 0;
	struct dir_job *j = NULL;
	int rc;

	ns_reset(ns, chunk_size);
	pthread_mutex_init(&sc.lock, NULL);
	pthread_cond_init(&sc.work, NULL);
	pthread_cond_init(&sc.done, NULL);
	if (fstat(source_fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if ((rc = node_add(ns, &node_cap, &idx)) < 0)
		goto out;
	fill_attrs(&ns->nodes[0], &st);
	if ((rc = ns_text_put(&pool, "", 0, true, &ns->nodes[0].name_off)) < 0 ||
	    (rc = job_push(&sc, 0, "", 0, "", 0)) < 0)
		goto out;
	/* Readers that cannot start leave their share to this thread. */
	for (unsigned t = 0; t < SCAN_THREADS; t++)
		if (pthread_create(&tids[started], NULL, reader, &sc) == 0)
			started++;
	while ((j = job_next(&sc)) != NULL) {
		if (j->rc < 0 || (rc = take_dir(ns, &sc, j, &node_cap, &pool)) < 0) {
			if (j->rc < 0)
				rc = j->rc;
			snprintf(err, errlen, "cannot %s %s", j->rc < 0 ? "read directory" : "index",
				 j->plen ? j->path : ".");
			goto out;
		}
		job_free(j);
	}
	ns->skipped_special = atomic_load(&sc.special);
	ns->skipped_long = atomic_load(&sc.longp);
	ns->skipped_unreadable = atomic_load(&sc.unreadable);
	if (ns->skipped_special || ns->skipped_long || ns->skipped_unreadable)
		log_msg(LOG_NOTICE,
			"left out of the mount: %llu fifos, sockets or devices, %llu paths longer "
			"than PATH_MAX, %llu entries or directories that could not be read",
			(unsigned long long)ns->skipped_special,
			(unsigned long long)ns->skipped_long,
			(unsigned long long)ns->skipped_unreadable);
	/* Give back the slack of the doubling growth. */
	struct ns_node *shrunk = realloc(ns->nodes, (size_t)ns->nnodes * sizeof(*shrunk));
	if (shrunk)
		ns->nodes = shrunk;
	char *pshrunk = realloc(pool.buf, pool.len);
	ns->pool = pshrunk ? pshrunk : pool.buf;
	ns->pool_len = pool.len;
	pool.buf = NULL;
	if ((rc = ns_set_known(ns, false)) < 0)
		goto out;
	atomic_store_explicit(&ns->known[0], 1, memory_order_release);
out:
	pthread_mutex_lock(&sc.lock);
	sc.stop = true;
	pthread_cond_broadcast(&sc.work);
	pthread_mutex_unlock(&sc.lock);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	job_free(j);
	for (size_t i = sc.consumed; i < sc.njobs; i++)
		job_free(sc.jobs[i]);
	free(sc.jobs);
	free(pool.buf);
	pthread_cond_destroy(&sc.work);
	pthread_cond_destroy(&sc.done);
	pthread_mutex_destroy(&sc.lock);
	if (rc < 0)
		ns_fini(ns);
	return rc;
}

void ns_reset(struct ns *ns, uint64_t chunk_size)
{
	memset(ns, 0, sizeof(*ns));
	ns->chunk_size = chunk_size;
	pthread_mutex_init(&ns->freeze_lock, NULL);
}

int ns_set_known(struct ns *ns, bool all)
{
	ns->known = calloc(ns->nnodes ? ns->nnodes : 1, sizeof(*ns->known));
	if (!ns->known)
		return -ENOMEM;
	if (all) {
		for (uint32_t i = 0; i < ns->nnodes; i++)
			atomic_init(&ns->known[i], 1);
		atomic_store(&ns->known_files, ns->nfiles);
	}
	return 0;
}

_Static_assert(sizeof(struct ns_link) == 24, "a hard-linked file's slot stays 24 bytes");

static uint32_t link_slot(const struct ns *ns, uint32_t dev, uint64_t ino)
{
	uint64_t h = (ino ^ ((uint64_t)dev << 40)) * 0x9E3779B97F4A7C15ULL;
	uint32_t mask = ns->links_cap - 1, at = (uint32_t)(h >> 32) & mask;

	while (ns->links[at].node != UINT32_MAX &&
	       (ns->links[at].dev != dev || ns->links[at].ino != ino))
		at = (at + 1) & mask;
	return at;
}

/* The entry of the node last frozen with st's inode, or NULL. */
static const struct ns_link *link_find(const struct ns *ns, const struct stat *st)
{
	if (!ns->links_cap)
		return NULL;
	const struct ns_link *l =
	    &ns->links[link_slot(ns, ns_dev_fold((uint64_t)st->st_dev), (uint64_t)st->st_ino)];
	return l->node == UINT32_MAX ? NULL : l;
}

/* Remember node i as the holder of st's inode's units (in place of an
 * entry for an earlier state of that inode). Without memory it is not
 * remembered: its links are then cached apart, as before. */
static void link_add(struct ns *ns, const struct stat *st, uint32_t i)
{
	if ((uint64_t)ns->nlinks + 1 > (uint64_t)ns->links_cap / 4 * 3) {
		uint32_t ncap = ns->links_cap ? ns->links_cap * 2 : 64;
		if (ncap <= ns->links_cap)
			return;
		struct ns_link *nl = malloc((size_t)ncap * sizeof(*nl));
		if (!nl)
			return;
		for (uint32_t k = 0; k < ncap; k++)
			nl[k].node = UINT32_MAX;
		struct ns_link *old = ns->links;
		uint32_t ocap = ns->links_cap;
		ns->links = nl;
		ns->links_cap = ncap;
		for (uint32_t k = 0; k < ocap; k++)
			if (old[k].node != UINT32_MAX)
				ns->links[link_slot(ns, old[k].dev, old[k].ino)] = old[k];
		free(old);
	}
	uint32_t dev = ns_dev_fold((uint64_t)st->st_dev);
	uint32_t at = link_slot(ns, dev, (uint64_t)st->st_ino);
	if (ns->links[at].node == UINT32_MAX)
		ns->nlinks++;
	ns->links[at] = (struct ns_link){ (uint64_t)st->st_ino, ts_ns(st->st_ctim), dev, i };
}

int ns_freeze(struct ns *ns, uint32_t i, const struct stat *st)
{
	struct ns_node *n = &ns->nodes[i];
	int rc = 0;

	if (ns_known(ns, i))
		return 0;
	pthread_mutex_lock(&ns->freeze_lock);
	if (atomic_load_explicit(&ns->known[i], memory_order_relaxed))
		goto out;
	if ((st->st_mode & S_IFMT) != (n->mode & S_IFMT)) {
		rc = -ESTALE;
		goto out;
	}
	if (S_ISREG(st->st_mode)) {
		uint64_t size = (uint64_t)st->st_size;
		bool linked = ns->share_links && st->st_nlink > 1;
		const struct ns_link *l = linked ? link_find(ns, st) : NULL;
		const struct ns_node *o = l ? &ns->nodes[l->node] : NULL;
		if (o && st->st_size >= 0 && o->size == size && o->mtime_ns == ts_ns(st->st_mtim) &&
		    l->ctime_ns == ts_ns(st->st_ctim)) {
			/* Another name of a file already frozen, unchanged
			 * since: its units, cached once. */
			n->first = o->first;
			n->count = o->count;
			atomic_fetch_add_explicit(&ns->shared_files, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&ns->shared_bytes, size, memory_order_relaxed);
		} else {
			/* Units of its own (for a name whose inode changed since
			 * its other name was frozen, or another file under a
			 * reused inode number, too: later names of this state
			 * share them). */
			uint64_t units = ns_units_of(size, ns->chunk_size);
			uint64_t first = atomic_load_explicit(&ns->nunits, memory_order_relaxed);
			/* One unit id stays kept for each file not looked up
			 * yet, so a few huge (sparse) files looked up first
			 * cannot use up the ids and leave every later file
			 * unreadable. */
			uint64_t later = ns->nfiles -
					 atomic_load_explicit(&ns->known_files, memory_order_relaxed) - 1;
			/* count is 32-bit: 2^32 units would be stored as 0 and
			 * the file would read the next file's units. */
			if (st->st_size < 0 || size > ns_max_file_size(ns->chunk_size) ||
			    units + later > NS_MAX_UNITS - first) {
				rc = -EOVERFLOW;
				goto out;
			}
			n->first = (uint32_t)first;
			n->count = (uint32_t)units;
			atomic_store_explicit(&ns->nunits, first + units, memory_order_relaxed);
			if (linked)
				link_add(ns, st, i);
		}
		atomic_fetch_add_explicit(&ns->known_files, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&ns->total_bytes, size, memory_order_relaxed);
		n->ino_fold = ns_ino_fold((uint64_t)st->st_ino);
	}
	fill_attrs(n, st);
	atomic_store_explicit(&ns->known[i], 1, memory_order_release);
out:
	pthread_mutex_unlock(&ns->freeze_lock);
	return rc;
}

void ns_fini(struct ns *ns)
{
	free(ns->nodes);
	free(ns->pool);
	free((void *)ns->known);
	free(ns->links);
	pthread_mutex_destroy(&ns->freeze_lock);
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
