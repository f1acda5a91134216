/* SPDX-License-Identifier: MIT */
/*
 * The disk tier (disk.h; format in cache/README.md, "Disk tier"). Files in
 * the directory: `lock` (flock'd by the daemon, holds its pid), `data`
 * (units back to back, append-only) and `index` (a 64-byte header, then
 * one 64-byte record per unit, append-only). The index is loaded into an
 * open-addressing table at open; the data is never read then.
 *
 * Crash safety comes from order alone: the writer appends a batch of units
 * to `data`, fdatasyncs it, and only then appends their records. A record
 * is valid only if its own checksum matches and its unit lies exactly at
 * the end of the previous valid record's unit, so after SIGKILL or power
 * loss the first invalid record and everything after it (records and
 * data) are cut off at the next open. Bytes that reach the disk torn
 * anyway (a bad sector, a flipped bit) fail the unit's checksum at read.
 *
 * Page cache: the tier costs no memory beyond the index table (48 bytes
 * a slot). Written batches are dropped from the page cache with
 * POSIX_FADV_DONTNEED (the writer's source, the memory arena, is not
 * aligned for O_DIRECT). Reads that may (cache_disk_read_direct) read the
 * whole CACHE_DISK_ALIGN blocks around a unit with O_DIRECT into the
 * caller's aligned buffer: units stay unpadded, and no page is cached,
 * copied or dropped. Otherwise, and on a file system that refuses
 * O_DIRECT, a read is buffered and its pages dropped after it.
 */
#include "cache/disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/deadline.h"
#include "common/log.h"

#define REC_SIZE 64u
#define HDR_SIZE 64u
#define REC_MAGIC 0x31524443u /* "CDR1" little-endian */
static const char hdr_magic[16] = "coordfs-disk-v1";
/* Hard caps on what the index may claim: no more records than this (16 GiB
 * of index), no unit larger than CACHE_DISK_UNIT_MAX. */
#define MAX_RECORDS (1ULL << 28)
/* The writer's queue: jobs, and bytes of copies. A borrowed unit (the
 * memory arena's) costs a job only, and memory never offers it again (its
 * reads are memory hits), so the queue grows for them rather than drop
 * them: up to QUEUE_MAX jobs (48 MiB), past what any arena holds at
 * realistic unit sizes. */
#define QUEUE_MAX (1u << 20)
#define QUEUE_INITIAL 1024u
#define QUEUE_COPY_MAX ((size_t)64 << 20)
/* One batch (one fdatasync): up to this many units or bytes. */
#define BATCH_MAX 64u
#define BATCH_BYTES ((size_t)8 << 20)
#define LOAD_CHUNK 16384u /* records read at once at open (1 MiB) */
/* Records the table is sized for before loading (about 290 MB of table),
 * past the 1.3M of a large dataset; more grow it as they load. */
#define PRESIZE_MAX (1ULL << 22)

enum { E_EMPTY, E_HELD, E_QUEUED, E_DEAD };

/* One record of the index file, little-endian as written by x86/arm64. */
struct rec {
	uint32_t magic, len;
	uint64_t key_lo, key_hi, snap, off, sum, zero;
	uint64_t rsum; /* XXH3-64 of the 56 bytes before it */
};
_Static_assert(sizeof(struct rec) == REC_SIZE, "record size");

struct ent {
	uint64_t lo, hi, snap, off, sum;
	uint32_t len, state;
};

struct job {
	struct cache_disk_key key;
	uint64_t snap;
	const void *data;
	size_t len;
	bool owned; /* a copy, freed once written */
};

struct cache_disk {
	char *dir;
	int dirfd, lockfd, dfd, ifd;
	int rfd; /* data, O_DIRECT, read-only; -1 when the file system refuses it */
	_Atomic bool no_direct; /* a direct read failed with EINVAL: buffered from now on */
	_Atomic bool corrupt_logged; /* a dropped_corrupt was logged (once a mount) */
	uint64_t limit;
	pthread_mutex_t lock; /* a leaf: table, queue, accounting; never held across I/O */
	pthread_cond_t work, idle, ready; /* ready: the records are loaded */
	struct ent *tab;
	size_t tab_cap, tab_used; /* slots; slots not empty */
	struct job *queue; /* a ring of qcap jobs, grown by queue_push */
	unsigned qcap, qhead, qlen, busy; /* busy: jobs popped, being written */
	size_t qcopy;
	uint64_t used;	    /* header + data + records + queued reservations */
	uint64_t data_end;  /* writer's: end of the data file */
	uint64_t index_end; /* writer's: end of the index file */
	bool full, stop, started;
	bool loaded;	     /* the records are in the table (lock) */
	uint64_t isize, dsize; /* the files' sizes at open, for load_records */
	pthread_t writer;
	/* How the writer reads a borrowed unit (cache_disk_set_copier), and
	 * its buffer for that: one unit, grown to the largest it took. */
	cache_disk_copier copy;
	void *copy_arg;
	uint8_t *wbuf;
	size_t wbuf_cap;
	_Atomic uint64_t items, hits, hit_bytes, admitted, refused, dropped_stale, dropped_corrupt,
	    dropped_cut;
	_Atomic uint64_t disabled;
};

static inline void count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t get(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

struct cache_disk_key cache_disk_key(const char *scope, const char *path, uint64_t chunk_size,
				     uint32_t k)
{
	/* scope, NUL, path, NUL, then the numbers: each at most PATH_MAX. */
	unsigned char buf[2 * (PATH_MAX + 1) + 12];
	size_t ns = strnlen(scope, PATH_MAX), np = strnlen(path, PATH_MAX);

	memcpy(buf, scope, ns);
	buf[ns] = '\0';
	memcpy(buf + ns + 1, path, np);
	buf[ns + 1 + np] = '\0';
	size_t n = ns + np + 2;
	memcpy(buf + n, &chunk_size, 8);
	memcpy(buf + n + 8, &k, 4);
	XXH128_hash_t h = XXH3_128bits(buf, n + 12);
	return (struct cache_disk_key){h.low64, h.high64};
}

uint64_t cache_disk_snap(const char *etag, uint64_t size)
{
	return XXH3_64bits_withSeed(etag, strlen(etag), size);
}

static uint64_t rec_sum(const struct rec *r)
{
	return XXH3_64bits(r, offsetof(struct rec, rsum));
}

/* --- the table (lock held) --- */

/* Key's slot, or the empty slot where it would go. */
static struct ent *tab_find(struct cache_disk *d, struct cache_disk_key key)
{
	size_t mask = d->tab_cap - 1;

	for (size_t i = (size_t)key.lo & mask;; i = (i + 1) & mask) {
		struct ent *e = &d->tab[i];
		if (e->state == E_EMPTY || (e->lo == key.lo && e->hi == key.hi))
			return e;
	}
}

/* The table's memory: anonymous pages, on huge pages where the kernel
 * allows (MADV_HUGEPAGE): inserting 1.3M units is one cache and TLB miss
 * after another across 100 MB, and huge pages take the TLB misses away. */
static struct ent *tab_alloc(size_t cap)
{
	void *p = mmap(NULL, cap * sizeof(struct ent), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, cap * sizeof(struct ent), MADV_HUGEPAGE);
	return p;
}

static void tab_free(struct ent *t, size_t cap)
{
	if (t)
		munmap(t, cap * sizeof(struct ent));
}

static int tab_grow(struct cache_disk *d)
{
	size_t ncap = d->tab_cap ? d->tab_cap * 2 : 1024;
	struct ent *old = d->tab;
	size_t ocap = d->tab_cap;
	struct ent *nt = tab_alloc(ncap);

	if (!nt)
		return -ENOMEM;
	d->tab = nt;
	d->tab_cap = ncap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].state != E_EMPTY)
			*tab_find(d, (struct cache_disk_key){old[i].lo, old[i].hi}) = old[i];
	tab_free(old, ocap);
	return 0;
}

/* Key's slot, made if need be (state E_EMPTY when new); NULL: no memory. */
static struct ent *tab_slot(struct cache_disk *d, struct cache_disk_key key)
{
	if ((d->tab_used + 1) * 10 > d->tab_cap * 7 && tab_grow(d) < 0)
		return NULL;
	struct ent *e = tab_find(d, key);
	if (e->state == E_EMPTY) {
		e->lo = key.lo;
		e->hi = key.hi;
		d->tab_used++;
		e->state = E_DEAD; /* not held until the caller says */
	}
	return e;
}

/* --- I/O helpers --- */

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA; /* the file is shorter than the index says */
		done += (size_t)n;
	}
	return 0;
}

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

/* Drop [from, to) of the data file from the page cache, widened to whole
 * pages: the advice drops only whole pages, and units are not page
 * aligned, so the pages a unit shares with its neighbours (clean once
 * written) would otherwise stay, one or two a unit. */
static void drop_pages(struct cache_disk *d, uint64_t from, uint64_t to)
{
	uint64_t lo = from & ~(uint64_t)4095, hi = (to + 4095) & ~(uint64_t)4095;

	(void)posix_fadvise(d->dfd, (off_t)lo, (off_t)(hi - lo), POSIX_FADV_DONTNEED);
}

/* Turn the tier off after an I/O error (once, one line): reads miss and
 * nothing more is admitted. */
static void disable(struct cache_disk *d, const char *what, int err)
{
	uint64_t expect = 0;

	if (atomic_compare_exchange_strong_explicit(&d->disabled, &expect, 1, memory_order_relaxed,
						    memory_order_relaxed))
		log_err("disk cache %s: %s: %s; the disk tier is off, reads go to memory, peers "
			"or SOURCE", d->dir, what, strerror(-err));
}

/* --- open: the lock and the index --- */

/*
 * Open (creating it 0600) one of the tier's files. Only DIR's owner can
 * put anything in it, but a DIR once open to others, or one pointed at a
 * directory that holds other files, may hold a link to another file, a
 * FIFO or a device, and the daemon (often root) truncates and writes what
 * it opens: so no symbolic link is followed, no open waits (a FIFO), and
 * the file must be a regular file of this user with no other name (a hard
 * link). One readable by others (planted so) is made 0600.
 */
static int open_file(struct cache_disk *d, const char *name, int *fd, char *err, size_t errlen)
{
	struct stat st;

	*fd = openat(d->dirfd, name,
		     O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0600);
	if (*fd < 0 || fstat(*fd, &st) < 0) {
		int rc = -errno;
		snprintf(err, errlen, "cannot open disk cache file '%s/%s': %s", d->dir, name,
			 strerror(errno));
		return rc;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
		snprintf(err, errlen,
			 "disk cache file '%s/%s' must be a regular file of uid %u with no other link",
			 d->dir, name, (unsigned)geteuid());
		return -EPERM;
	}
	/* Blocking from here: O_NONBLOCK only kept the open from waiting. */
	if (fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) < 0 ||
	    ((st.st_mode & 0077) && fchmod(*fd, 0600) < 0)) {
		int rc = -errno;
		snprintf(err, errlen, "cannot set up disk cache file '%s/%s': %s", d->dir, name,
			 strerror(errno));
		return rc;
	}
	return 0;
}

/* Name this process in the lock file, for a second daemon's message. */
static int write_pid(struct cache_disk *d)
{
	char pid[24];
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());

	if (ftruncate(d->lockfd, 0) < 0)
		return -errno;
	return pwrite_all(d->lockfd, pid, (size_t)n, 0);
}

static int take_lock(struct cache_disk *d, char *err, size_t errlen)
{
	int rc = open_file(d, "lock", &d->lockfd, err, errlen);

	if (rc < 0)
		return rc;
	if (flock(d->lockfd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK) {
		rc = -errno;
		snprintf(err, errlen, "cannot lock disk cache '%s': %s", d->dir, strerror(errno));
		return rc;
	}
	char pid[24] = "";
	ssize_t n = pread(d->lockfd, pid, sizeof(pid) - 1, 0);
	pid[n > 0 ? n : 0] = '\0';
	pid[strcspn(pid, "\n")] = '\0';
	snprintf(err, errlen, "disk cache '%s' is in use by another coordfs (pid %s)", d->dir,
		 pid[0] ? pid : "unknown");
	return -EBUSY;
}

/* Whether DIR holds nothing but the tier's files. */
static bool only_tier_files(struct cache_disk *d)
{
	int fd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	bool only = dp != NULL;

	if (!dp) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	while (only && (de = readdir(dp)) != NULL)
		only = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		       !strcmp(de->d_name, "lock") || !strcmp(de->d_name, "data") ||
		       !strcmp(de->d_name, "index");
	closedir(dp);
	return only;
}

/* Check the index's header (or write one into a new tier) and note the
 * files' sizes for load_records. 0 or -errno (err set). */
static int load_header(struct cache_disk *d, char *err, size_t errlen)
{
	struct stat ist, dst, lst;
	unsigned char hdr[HDR_SIZE];
	int rc;

	if (fstat(d->ifd, &ist) < 0 || fstat(d->dfd, &dst) < 0 || fstat(d->lockfd, &lst) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot stat disk cache '%s': %s", d->dir, strerror(errno));
		return rc;
	}
	static const unsigned char zeros[HDR_SIZE];
	bool fresh = (uint64_t)ist.st_size < HDR_SIZE;

	/* Starting over truncates the files. Without a header they may be
	 * someone else's (DIR pointed at a directory that has a `data`): a
	 * tier that lost its index holds nothing but its own files, so a
	 * directory with others is refused, its files left alone. */
	if (fresh && (ist.st_size > 0 || dst.st_size > 0 || lst.st_size > 0) &&
	    !only_tier_files(d)) {
		snprintf(err, errlen, "disk cache '%s' holds other files and no index: not a coordfs "
			 "disk cache, its files left alone", d->dir);
		return -EEXIST;
	}

	if (!fresh && (rc = pread_all(d->ifd, hdr, HDR_SIZE, 0)) < 0) {
		snprintf(err, errlen, "cannot read '%s/index': %s", d->dir, strerror(-rc));
		return rc;
	}
	/* A header of zeros: a power loss lost it (file systems may keep a
	 * file's size but not its blocks). Like a short file, start over. */
	if (fresh || memcmp(hdr, zeros, HDR_SIZE) == 0) {
		memset(hdr, 0, sizeof(hdr));
		memcpy(hdr, hdr_magic, sizeof(hdr_magic));
		/* The directory synced too: the index's name is durable
		 * before anything names this tier's data. */
		if (ftruncate(d->dfd, 0) < 0 || ftruncate(d->ifd, 0) < 0 ||
		    (rc = pwrite_all(d->ifd, hdr, HDR_SIZE, 0)) < 0 || fdatasync(d->ifd) < 0 ||
		    fsync(d->dirfd) < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot initialise disk cache '%s': %s", d->dir,
				 strerror(errno));
			return rc;
		}
		d->index_end = HDR_SIZE;
		d->loaded = true;
		return 0;
	}
	if (memcmp(hdr, hdr_magic, sizeof(hdr_magic)) != 0) {
		snprintf(err, errlen, "'%s/index' is not a coordfs disk cache index (v1)", d->dir);
		return -EINVAL;
	}
	d->isize = (uint64_t)ist.st_size;
	d->dsize = (uint64_t)dst.st_size;
	return 0;
}

/*
 * The units a cut loses: the whole, checksummed records from record first
 * on (up to nrec), each one a unit admitted after the damaged record. A
 * crash leaves at most one record half written at the end, so 0 there;
 * a damaged record in the middle (a flipped bit) loses all that follow.
 * The scan stops at the first chunk with no such record (the zeros of a
 * sparse index), so it reads little past the real records.
 */
static uint64_t count_lost(struct cache_disk *d, struct rec *buf, uint64_t first, uint64_t nrec)
{
	uint64_t lost = 0;

	for (uint64_t at = first; at < nrec;) {
		size_t n = nrec - at < LOAD_CHUNK ? (size_t)(nrec - at) : LOAD_CHUNK, found = 0;
		if (pread_all(d->ifd, buf, n * REC_SIZE, HDR_SIZE + at * REC_SIZE) < 0)
			break;
		for (size_t i = 0; i < n; i++)
			found += buf[i].magic == REC_MAGIC && rec_sum(&buf[i]) == buf[i].rsum;
		if (!found)
			break;
		lost += found;
		at += n;
	}
	return lost;
}

/*
 * Take the valid records of the index into the table; cut what follows the
 * last one (records and data). Runs on the writer thread before it writes
 * anything, so that mounting waits for the lock and the header only (a
 * tier of 1.3M units takes about a second to load); readers and
 * admissions wait for it (wait_loaded). 0 or -errno (logged).
 */
static int load_records(struct cache_disk *d)
{
	uint64_t isize = d->isize, dsize = d->dsize;
	int rc;

	struct rec *buf = malloc(LOAD_CHUNK * sizeof(*buf));
	if (!buf) {
		log_err("disk cache %s: out of memory to load its index", d->dir);
		return -ENOMEM;
	}
	uint64_t nrec = (isize - HDR_SIZE) / REC_SIZE, good = 0, data_end = 0;
	bool torn = false;
	if (nrec > MAX_RECORDS)
		nrec = MAX_RECORDS;
	/* Sized for every record at once: no rehash while loading. But what
	 * the index's size claims is no more than a bound: a sparse or
	 * damaged index may claim 2^28 records (18 GB of table, refused as
	 * out of memory at every mount) and hold none. Each valid record has
	 * a byte of data at least, and past PRESIZE_MAX the table grows as
	 * records turn out valid. */
	uint64_t presize = nrec < dsize ? nrec : dsize;
	if (presize > PRESIZE_MAX)
		presize = PRESIZE_MAX;
	while (d->tab_cap * 7 < (presize + 1) * 10)
		if ((rc = tab_grow(d)) < 0) {
			free(buf);
			log_err("disk cache %s: out of memory to load its index", d->dir);
			return rc;
		}
	rc = 0;
	while (good < nrec && !torn) {
		size_t n = nrec - good < LOAD_CHUNK ? (size_t)(nrec - good) : LOAD_CHUNK;
		if ((rc = pread_all(d->ifd, buf, n * REC_SIZE, HDR_SIZE + good * REC_SIZE)) < 0)
			break;
		for (size_t i = 0; i < n; i++) {
			const struct rec *r = &buf[i];
			/* Each unit follows the previous one: a record that says
			 * otherwise, or whose unit is not all in the file, is torn. */
			if (r->magic != REC_MAGIC || rec_sum(r) != r->rsum || r->len == 0 ||
			    r->len > CACHE_DISK_UNIT_MAX || r->off != data_end ||
			    data_end + r->len > dsize) {
				torn = true;
				break;
			}
			struct ent *e = tab_slot(d, (struct cache_disk_key){r->key_lo, r->key_hi});
			if (!e) {
				rc = -ENOMEM;
				torn = true;
				break;
			}
			/* A later record of the same key replaces the earlier one. */
			if (e->state != E_HELD)
				count(&d->items, 1);
			*e = (struct ent){r->key_lo, r->key_hi, r->snap, r->off, r->sum, r->len, E_HELD};
			data_end += r->len;
			good++;
		}
	}
	uint64_t lost = rc == 0 && torn ? count_lost(d, buf, good + 1, nrec) : 0;
	free(buf);
	if (rc < 0) {
		log_err("disk cache %s: cannot load its index: %s", d->dir, strerror(-rc));
		return rc;
	}
	d->index_end = HDR_SIZE + good * REC_SIZE;
	d->data_end = data_end;
	count(&d->dropped_cut, lost);
	if (lost)
		log_warn("disk cache %s: record %llu of its index is damaged; the %llu units "
			 "recorded after it are dropped (dropped_cut) and read elsewhere",
			 d->dir, (unsigned long long)good, (unsigned long long)lost);
	if (isize > d->index_end || dsize > data_end) {
		log_msg(LOG_NOTICE, "disk cache %s: cut an unfinished tail (%llu index bytes, %llu data "
			   "bytes) after %llu units",
			   d->dir, (unsigned long long)(isize - d->index_end),
			   (unsigned long long)(dsize - data_end),
			   (unsigned long long)good);
		if (ftruncate(d->ifd, (off_t)d->index_end) < 0 ||
		    ftruncate(d->dfd, (off_t)data_end) < 0) {
			rc = -errno;
			disable(d, "cannot cut its unfinished tail", rc);
			return rc;
		}
	}
	pthread_mutex_lock(&d->lock);
	d->used += d->data_end + (d->index_end - HDR_SIZE);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void fail_open(struct cache_disk *d)
{
	int fds[] = {d->rfd, d->dfd, d->ifd, d->lockfd, d->dirfd};

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->idle);
	pthread_cond_destroy(&d->ready);
	tab_free(d->tab, d->tab_cap);
	free(d->queue);
	free(d->wbuf);
	free(d->dir);
	free(d);
}

int cache_disk_open(const char *dir, uint64_t limit, struct cache_disk **out, char *err,
		    size_t errlen)
{
	struct cache_disk *d = calloc(1, sizeof(*d));
	struct stat st;
	int rc;

	if (!d || !(d->dir = strdup(dir))) {
		free(d);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	d->dirfd = d->lockfd = d->dfd = d->ifd = d->rfd = -1;
	d->limit = limit;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->ready, NULL);
	pthread_condattr_t ca; /* flush's deadline is on CLOCK_MONOTONIC */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->idle, &ca);
	pthread_condattr_destroy(&ca);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(err, errlen, "cannot create disk cache '%s': %s", dir, strerror(errno));
		goto fail;
	}
	/* No link followed: fs/options.c resolved DIR (trusting only links
	 * of this user or root), so a link here was put in since. */
	d->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (d->dirfd < 0 || fstat(d->dirfd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open disk cache '%s': %s", dir, strerror(errno));
		goto fail;
	}
	/* Someone else's directory could be read or planted by them. */
	if (st.st_uid != geteuid() || (st.st_mode & 0077)) {
		snprintf(err, errlen, "disk cache '%s' must be a directory of uid %u with mode 0700",
			 dir, (unsigned)geteuid());
		rc = -EPERM;
		goto fail;
	}
	if ((rc = take_lock(d, err, errlen)) < 0 || (rc = open_file(d, "data", &d->dfd, err, errlen)) < 0 ||
	    (rc = open_file(d, "index", &d->ifd, err, errlen)) < 0 ||
	    (rc = load_header(d, err, errlen)) < 0)
		goto fail;
	/* Ours from now: until cache_disk_start names the daemon (after the
	 * mount, a listing later), the file held the previous holder's pid,
	 * which a second daemon named as the one in its way. */
	if ((rc = write_pid(d)) < 0) {
		snprintf(err, errlen, "cannot write disk cache lock '%s/lock': %s", d->dir,
			 strerror(-rc));
		goto fail;
	}
	d->used = HDR_SIZE;
	/* Units are read whole, in no order: read-ahead would only fill the
	 * page cache with other units. */
	(void)posix_fadvise(d->dfd, 0, 0, POSIX_FADV_RANDOM);
	/* A file system without O_DIRECT (EINVAL) gets buffered reads. */
	d->rfd = openat(d->dirfd, "data", O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOFOLLOW);
	*out = d;
	return 0;
fail:
	fail_open(d);
	return rc;
}

/* --- the writer --- */

/* Publish a written batch (lock held): its units become held. */
static void publish(struct cache_disk *d, struct job *jobs, const struct rec *recs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct ent *e = tab_find(d, jobs[i].key);
		if (e->state == E_QUEUED && e->snap == jobs[i].snap) {
			e->off = recs[i].off;
			e->sum = recs[i].sum;
			e->state = E_HELD;
			count(&d->items, 1);
			count(&d->admitted, 1);
		}
	}
}

/* Give back a batch that was not written (lock held). */
static void unreserve(struct cache_disk *d, struct job *jobs, unsigned n, bool refused)
{
	for (unsigned i = 0; i < n; i++) {
		struct ent *e = tab_find(d, jobs[i].key);
		if (e->state == E_QUEUED)
			e->state = E_DEAD;
		d->used -= jobs[i].len + REC_SIZE;
		if (refused)
			count(&d->refused, 1);
	}
}

/* The bytes of job j for the writer to checksum and write: a borrowed
 * unit read through the copier into the writer's buffer when there is one
 * (the buffer grows to the unit; without memory for it, the unit itself). */
static const void *job_bytes(struct cache_disk *d, const struct job *j)
{
	if (j->owned || !d->copy)
		return j->data;
	if (d->wbuf_cap < j->len) {
		uint8_t *b = realloc(d->wbuf, j->len);
		if (!b)
			return j->data;
		d->wbuf = b;
		d->wbuf_cap = j->len;
	}
	d->copy(d->copy_arg, d->wbuf, j->data, j->len);
	return d->wbuf;
}

/* Write jobs[0..n) (data, fdatasync, records); 0 or -errno. */
static int write_batch(struct cache_disk *d, struct job *jobs, struct rec *recs, unsigned n)
{
	uint64_t off = d->data_end;
	int rc;

	for (unsigned i = 0; i < n; i++) {
		struct rec *r = &recs[i];
		const void *bytes = job_bytes(d, &jobs[i]);
		*r = (struct rec){.magic = REC_MAGIC, .len = (uint32_t)jobs[i].len,
				  .key_lo = jobs[i].key.lo, .key_hi = jobs[i].key.hi,
				  .snap = jobs[i].snap, .off = off,
				  .sum = XXH3_64bits(bytes, jobs[i].len)};
		r->rsum = rec_sum(r);
		if ((rc = pwrite_all(d->dfd, bytes, jobs[i].len, off)) < 0)
			return rc;
		off += jobs[i].len;
	}
	/* The data is on disk before any record names it. */
	if (fdatasync(d->dfd) < 0)
		return -errno;
	if ((rc = pwrite_all(d->ifd, recs, n * REC_SIZE, d->index_end)) < 0)
		return rc;
	drop_pages(d, d->data_end, off);
	d->data_end = off;
	d->index_end += n * REC_SIZE;
	return 0;
}

static void *writer_main(void *arg)
{
	struct cache_disk *d = arg;
	struct job jobs[BATCH_MAX];
	struct rec recs[BATCH_MAX];

	/* Nobody touches the table before it is loaded (wait_loaded). */
	if (!d->loaded && load_records(d) < 0)
		disable(d, "cannot load its index", -EIO);
	pthread_mutex_lock(&d->lock);
	d->loaded = true;
	pthread_cond_broadcast(&d->ready);
	for (;;) {
		while (!d->stop && d->qlen == 0)
			pthread_cond_wait(&d->work, &d->lock);
		if (d->qlen == 0)
			break;
		unsigned n = 0;
		size_t bytes = 0;
		while (n < BATCH_MAX && d->qlen > 0 && (n == 0 || bytes < BATCH_BYTES)) {
			jobs[n] = d->queue[d->qhead];
			bytes += jobs[n++].len;
			d->qhead = (d->qhead + 1) % d->qcap;
			d->qlen--;
		}
		d->busy = n;
		bool off = get(&d->disabled) != 0;
		pthread_mutex_unlock(&d->lock);

		int rc = off ? -EIO : write_batch(d, jobs, recs, n);
		if (rc < 0 && !off) {
			/* Cut what this batch left so the files end at the last record. */
			if (ftruncate(d->dfd, (off_t)d->data_end) < 0 ||
			    ftruncate(d->ifd, (off_t)d->index_end) < 0)
				rc = -EIO;
			/* One line: batches queued before this one fail too.
			 * Only this thread sets full. */
			if (rc != -ENOSPC && rc != -EDQUOT)
				disable(d, "cannot write", rc);
			else if (!d->full)
				log_warn("disk cache %s: its file system is full; admitting no more",
					 d->dir);
		}
		pthread_mutex_lock(&d->lock);
		if (rc == 0) {
			publish(d, jobs, recs, n);
		} else {
			if (rc == -ENOSPC || rc == -EDQUOT)
				d->full = true;
			unreserve(d, jobs, n, !off);
		}
		for (unsigned i = 0; i < n; i++)
			if (jobs[i].owned) {
				free((void *)jobs[i].data);
				d->qcopy -= jobs[i].len;
			}
		d->busy = 0;
		if (d->qlen == 0)
			pthread_cond_broadcast(&d->idle);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

int cache_disk_start(struct cache_disk *d)
{
	int rc = write_pid(d);

	if (rc < 0)
		return rc;
	/* Said here, once detached, where the log is: refused at the open. */
	if (d->rfd < 0)
		log_msg(LOG_NOTICE, "disk cache %s: direct reads refused; reading through the page "
			"cache", d->dir);
	pthread_mutex_lock(&d->lock);
	d->started = true; /* from now on readers wait for the load */
	pthread_mutex_unlock(&d->lock);
	rc = pthread_create(&d->writer, NULL, writer_main, d);
	if (rc) {
		pthread_mutex_lock(&d->lock);
		d->started = false;
		pthread_cond_broadcast(&d->ready);
		pthread_mutex_unlock(&d->lock);
		return -rc;
	}
	return 0;
}

int cache_disk_flush(struct cache_disk *d, unsigned timeout_ms)
{
	struct timespec until = deadline_after_ms(timeout_ms);
	int rc = 0;

	pthread_mutex_lock(&d->lock);
	while ((d->qlen > 0 || d->busy > 0) && rc == 0)
		rc = pthread_cond_timedwait(&d->idle, &d->lock, &until);
	pthread_mutex_unlock(&d->lock);
	return rc ? -ETIMEDOUT : 0;
}

void cache_disk_close(struct cache_disk *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->lock);
	if (d->started)
		pthread_join(d->writer, NULL);
	/* A writer never started leaves its queue: free the copies. */
	for (; d->qlen > 0; d->qlen--, d->qhead = (d->qhead + 1) % d->qcap)
		if (d->queue[d->qhead].owned)
			free((void *)d->queue[d->qhead].data);
	(void)fdatasync(d->ifd);
	fail_open(d);
}

/* --- reads and admissions --- */

/* Take the lock once the records are loaded (a tier never started, as in
 * a failed start-up, has nothing to wait for). */
static void lock_loaded(struct cache_disk *d)
{
	pthread_mutex_lock(&d->lock);
	while (!d->loaded && d->started)
		pthread_cond_wait(&d->ready, &d->lock);
}

void cache_disk_set_copier(struct cache_disk *d, cache_disk_copier copy, void *arg)
{
	d->copy = copy;
	d->copy_arg = arg;
}

uint64_t cache_disk_wait_loaded(struct cache_disk *d)
{
	lock_loaded(d);
	pthread_mutex_unlock(&d->lock);
	return get(&d->items);
}

/* The entry of a held unit of snapshot snap and length len, copied into
 * *held: 0, -ENOENT or -ESTALE (dropped). */
static int lookup_held(struct cache_disk *d, struct cache_disk_key key, uint64_t snap, size_t len,
		       struct ent *held)
{
	if (get(&d->disabled))
		return -ENOENT;
	lock_loaded(d);
	struct ent *e = d->tab_cap ? tab_find(d, key) : NULL;
	if (!e || e->state != E_HELD) {
		pthread_mutex_unlock(&d->lock);
		return -ENOENT;
	}
	if (e->snap != snap || e->len != len) {
		/* Written for another version of the file: never served. */
		e->state = E_DEAD;
		atomic_fetch_sub_explicit(&d->items, 1, memory_order_relaxed);
		pthread_mutex_unlock(&d->lock);
		count(&d->dropped_stale, 1);
		return -ESTALE;
	}
	*held = *e;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/* The end of a read of held's unit (rc: the read's result): 0 when data
 * holds it, verified; else the unit is dropped or the tier turned off. */
static int finish_read(struct cache_disk *d, struct cache_disk_key key, const struct ent *held,
		       const void *data, int rc)
{
	if (rc < 0 && rc != -ENODATA) {
		disable(d, "cannot read", rc);
		return -EIO;
	}
	if (rc == 0 && XXH3_64bits(data, held->len) == held->sum) {
		count(&d->hits, 1);
		count(&d->hit_bytes, held->len);
		return 0;
	}
	pthread_mutex_lock(&d->lock);
	struct ent *e = tab_find(d, key);
	bool dropped = e->state == E_HELD && e->off == held->off;
	if (dropped) {
		e->state = E_DEAD;
		atomic_fetch_sub_explicit(&d->items, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&d->lock);
	if (dropped) {
		count(&d->dropped_corrupt, 1);
		/* One line a mount: a damaged or cut data file fails every
		 * unit it held, which would be a line per unit. */
		if (!atomic_exchange_explicit(&d->corrupt_logged, true, memory_order_relaxed))
			log_warn("disk cache %s: a unit at offset %llu %s; dropped, read elsewhere "
				 "(more are counted in dropped_corrupt, not logged)",
				 d->dir, (unsigned long long)held->off,
				 rc == -ENODATA ? "lies past the end of data" : "fails its checksum");
	}
	return -EBADMSG;
}

/* Buffered: the unit into dst, its pages dropped after. */
static int read_buffered(struct cache_disk *d, const struct ent *held, void *dst)
{
	int rc = pread_all(d->dfd, dst, held->len, held->off);

	drop_pages(d, held->off, held->off + held->len);
	return rc;
}

int cache_disk_read(struct cache_disk *d, struct cache_disk_key key, uint64_t snap, void *dst,
		    size_t len)
{
	struct ent held;
	int rc = lookup_held(d, key, snap, len, &held);

	if (rc < 0)
		return rc;
	return finish_read(d, key, &held, dst, read_buffered(d, &held, dst));
}

/* Direct: the aligned blocks [lo, hi) around the unit into buf; a read
 * short of the unit's end is -ENODATA (the file is shorter than the
 * index says), one past it is the file's end and fine. */
static int read_direct(struct cache_disk *d, const struct ent *held, uint8_t *buf)
{
	uint64_t lo = held->off & ~(uint64_t)(CACHE_DISK_ALIGN - 1);
	uint64_t hi = (held->off + held->len + CACHE_DISK_ALIGN - 1) &
		      ~(uint64_t)(CACHE_DISK_ALIGN - 1);
	uint64_t need = held->off + held->len - lo;

	for (uint64_t done = 0; done < need;) {
		ssize_t n = pread(d->rfd, buf + done, (size_t)(hi - lo - done), (off_t)(lo + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		done += (uint64_t)n;
		/* A short read not at the end keeps the next one aligned only
		 * if it ended on a block: else it was the file's end. */
		if (done < need && done % CACHE_DISK_ALIGN)
			return -ENODATA;
	}
	return 0;
}

int cache_disk_read_direct(struct cache_disk *d, struct cache_disk_key key, uint64_t snap,
			   void *buf, size_t len, size_t *at)
{
	struct ent held;
	int rc = lookup_held(d, key, snap, len, &held);

	*at = 0;
	if (rc < 0)
		return rc;
	if (d->rfd >= 0 && !atomic_load_explicit(&d->no_direct, memory_order_relaxed)) {
		rc = read_direct(d, &held, buf);
		if (rc != -EINVAL) {
			*at = (size_t)(held.off & (CACHE_DISK_ALIGN - 1));
			return finish_read(d, key, &held, (uint8_t *)buf + *at, rc);
		}
		/* The file system takes the open but not the read (a larger
		 * logical block, say): buffered from now on. */
		if (!atomic_exchange_explicit(&d->no_direct, true, memory_order_relaxed))
			log_msg(LOG_NOTICE, "disk cache %s: direct reads refused; reading through the "
				"page cache", d->dir);
	}
	return finish_read(d, key, &held, buf, read_buffered(d, &held, buf));
}

/* Whether key may be queued now (lock held): 0, or what admit returns. */
static int admissible(struct cache_disk *d, struct cache_disk_key key, uint64_t snap, size_t len,
		      bool count_refusal)
{
	if (get(&d->disabled))
		return -EIO;
	if (len == 0 || len > CACHE_DISK_UNIT_MAX)
		return -ENOSPC;
	if (d->tab_cap) {
		struct ent *e = tab_find(d, key);
		if (e->state == E_QUEUED || (e->state == E_HELD && e->snap == snap))
			return -EEXIST;
	}
	if (d->full || d->used + len + REC_SIZE > d->limit) {
		if (count_refusal)
			count(&d->refused, 1);
		return -ENOSPC;
	}
	if (d->qlen + d->busy >= QUEUE_MAX)
		return -EBUSY;
	return 0;
}

bool cache_disk_holds(struct cache_disk *d, struct cache_disk_key key, uint64_t snap)
{
	bool held = false;

	if (!d)
		return false;
	lock_loaded(d);
	if (!get(&d->disabled) && d->tab_cap) {
		struct ent *e = tab_find(d, key);
		held = e->state == E_HELD && e->snap == snap;
	}
	pthread_mutex_unlock(&d->lock);
	return held;
}

int cache_disk_check(struct cache_disk *d, struct cache_disk_key key, uint64_t snap, size_t len)
{
	lock_loaded(d);
	/* A refusal for room counts here: a caller told so admits nothing. */
	int rc = admissible(d, key, snap, len, true);
	if (rc == 0 && d->qcopy + len > QUEUE_COPY_MAX)
		rc = -EBUSY;
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* Append job to the queue (lock held), growing it: 0, -EBUSY (QUEUE_MAX
 * jobs queued) or -ENOMEM. */
static int queue_push(struct cache_disk *d, struct job job)
{
	if (d->qlen + d->busy >= QUEUE_MAX)
		return -EBUSY;
	if (d->qlen == d->qcap) {
		unsigned ncap = d->qcap ? d->qcap * 2 : QUEUE_INITIAL;
		struct job *nq = malloc(ncap * sizeof(*nq));
		if (!nq)
			return -ENOMEM;
		/* Unrolled from qhead, so the ring starts at 0 again. */
		for (unsigned i = 0; i < d->qlen; i++)
			nq[i] = d->queue[(d->qhead + i) % d->qcap];
		free(d->queue);
		d->queue = nq;
		d->qcap = ncap;
		d->qhead = 0;
	}
	d->queue[(d->qhead + d->qlen) % d->qcap] = job;
	d->qlen++;
	return 0;
}

int cache_disk_admit(struct cache_disk *d, struct cache_disk_key key, uint64_t snap,
		     const void *data, size_t len, bool borrow)
{
	void *copy = NULL;

	if (!borrow) {
		/* Copied before the lock: no memcpy under it. */
		if (len == 0 || len > CACHE_DISK_UNIT_MAX || !(copy = malloc(len)))
			return len && len <= CACHE_DISK_UNIT_MAX ? -ENOMEM : -ENOSPC;
		memcpy(copy, data, len);
	}
	lock_loaded(d);
	int rc = admissible(d, key, snap, len, true);
	if (rc == 0 && copy && d->qcopy + len > QUEUE_COPY_MAX)
		rc = -EBUSY;
	struct ent *e = rc == 0 ? tab_slot(d, key) : NULL;
	if (rc == 0 && !e)
		rc = -ENOMEM;
	if (rc == 0)
		rc = queue_push(d, (struct job){key, snap, copy ? copy : data, len, copy != NULL});
	if (rc == 0) {
		/* A held unit of another snapshot is replaced by this one. */
		if (e->state == E_HELD)
			atomic_fetch_sub_explicit(&d->items, 1, memory_order_relaxed);
		e->snap = snap;
		e->len = (uint32_t)len;
		e->state = E_QUEUED;
		d->used += len + REC_SIZE;
		if (copy)
			d->qcopy += len;
		pthread_cond_signal(&d->work);
	}
	pthread_mutex_unlock(&d->lock);
	if (rc < 0)
		free(copy);
	return rc;
}

void cache_disk_get_stats(struct cache_disk *d, struct cache_disk_stats *out)
{
	out->capacity_bytes = d->limit;
	pthread_mutex_lock(&d->lock);
	out->used_bytes = d->used;
	out->queued = d->qlen + d->busy;
	pthread_mutex_unlock(&d->lock);
	out->items = get(&d->items);
	out->hits = get(&d->hits);
	out->hit_bytes = get(&d->hit_bytes);
	out->admitted = get(&d->admitted);
	out->refused = get(&d->refused);
	out->dropped_stale = get(&d->dropped_stale);
	out->dropped_corrupt = get(&d->dropped_corrupt);
	out->dropped_cut = get(&d->dropped_cut);
	out->disabled = get(&d->disabled);
	out->direct = d->rfd >= 0 && !atomic_load_explicit(&d->no_direct, memory_order_relaxed);
}
