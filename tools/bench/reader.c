/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' reader: reads every file of a list fully, for a number of
 * epochs, each in a fresh random order, with N threads and a fixed read
 * size. Prints one JSON line per epoch: files, bytes, seconds, and, with
 * -d DEV, the bytes DEV read from storage during that epoch (sectors read
 * of /proc/diskstats times 512). Exits non-zero if any file could not be
 * read or a file's byte count differs from the list, so a benchmark never
 * reports a number from a broken read.
 *
 * With -l, every directory of the list is listed (readdir) once before the
 * first epoch, outside the epoch's time (epoch 1's line gives it as
 * list_seconds), as ImageFolder lists its class directories when the
 * dataset is built: a FUSE file system then gets readdirplus requests.
 *
 * List format: one "SIZE<TAB>RELPATH" per line, RELPATH relative to ROOT.
 * Compiled at bench time by tools/bench/benchlib.py; not part of the build.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct entry {
	char *path;
	uint64_t size;
};

struct job {
	int root_fd;
	struct entry *files;
	size_t nfiles;
	uint32_t *order;
	size_t bufsize;
	_Atomic size_t next;
	_Atomic uint64_t bytes;
	_Atomic uint64_t errors;
};

static uint64_t rng_next(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sectors read by dev (e.g. "loop3") times 512, or -1 if not found. */
static int64_t dev_read_bytes(const char *dev)
{
	FILE *f = fopen("/proc/diskstats", "r");
	char line[512], name[64];
	unsigned maj, min;
	unsigned long long rd, rdm, sect;
	int64_t out = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%u %u %63s %llu %llu %llu", &maj, &min, name, &rd, &rdm, &sect) == 6 &&
		    strcmp(name, dev) == 0) {
			out = (int64_t)(sect * 512ull);
			break;
		}
	}
	fclose(f);
	return out;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	char *buf = malloc(j->bufsize);

	if (!buf) {
		atomic_fetch_add(&j->errors, 1);
		return NULL;
	}
	for (;;) {
		size_t i = atomic_fetch_add(&j->next, 1);
		if (i >= j->nfiles)
			break;
		struct entry *e = &j->files[j->order[i]];
		int fd = openat(j->root_fd, e->path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "reader: open %s: %s\n", e->path, strerror(errno));
			atomic_fetch_add(&j->errors, 1);
			continue;
		}
		uint64_t got = 0;
		for (;;) {
			ssize_t n = read(fd, buf, j->bufsize);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				fprintf(stderr, "reader: read %s: %s\n", e->path, strerror(errno));
				atomic_fetch_add(&j->errors, 1);
				break;
			}
			if (n == 0)
				break;
			got += (uint64_t)n;
		}
		close(fd);
		if (got != e->size) {
			fprintf(stderr, "reader: %s: read %" PRIu64 " bytes, expected %" PRIu64 "\n",
				e->path, got, e->size);
			atomic_fetch_add(&j->errors, 1);
		}
		atomic_fetch_add(&j->bytes, got);
	}
	free(buf);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: reader [-t THREADS] [-b BUFSIZE] [-e EPOCHS] [-s SEED] [-d DEV] [-l] LIST ROOT\n");
	exit(2);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* -l: each distinct directory of the list read through once. 0, or -1 when
 * one cannot be listed. */
static int list_dirs(int root_fd, const struct entry *files, size_t nfiles)
{
	char **dirs = calloc(nfiles, sizeof(*dirs));
	int rc = 0;

	if (!dirs)
		return -1;
	for (size_t i = 0; i < nfiles; i++) {
		const char *slash = strrchr(files[i].path, '/');
		dirs[i] = slash ? strndup(files[i].path, (size_t)(slash - files[i].path)) : strdup(".");
		if (!dirs[i])
			rc = -1;
	}
	if (rc == 0)
		qsort(dirs, nfiles, sizeof(*dirs), cmp_str);
	for (size_t i = 0; rc == 0 && i < nfiles; i++) {
		if (i > 0 && strcmp(dirs[i], dirs[i - 1]) == 0)
			continue;
		int fd = openat(root_fd, dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		if (!d) {
			fprintf(stderr, "reader: list %s: %s\n", dirs[i], strerror(errno));
			if (fd >= 0)
				close(fd);
			rc = -1;
			break;
		}
		while (readdir(d))
			;
		closedir(d);
	}
	for (size_t i = 0; i < nfiles; i++)
		free(dirs[i]);
	free(dirs);
	return rc;
}

int main(int argc, char **argv)
{
	int threads = 1, epochs = 1, opt;
	size_t bufsize = 1 << 20;
	uint64_t seed = 1;
	const char *dev = NULL;
	int list_first = 0;

	while ((opt = getopt(argc, argv, "t:b:e:s:d:l")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'b': bufsize = strtoull(optarg, NULL, 0); break;
		case 'e': epochs = atoi(optarg); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'd': dev = optarg; break;
		case 'l': list_first = 1; break;
		default: usage();
		}
	}
	if (argc - optind != 2 || threads < 1 || threads > 256 || epochs < 1 || bufsize < 512 ||
	    bufsize > (64u << 20))
		usage();

	FILE *lf = fopen(argv[optind], "r");
	if (!lf) {
		perror(argv[optind]);
		return 1;
	}
	struct job j = { .bufsize = bufsize };
	size_t cap = 0;
	char *line = NULL;
	size_t linecap = 0;
	ssize_t len;
	while ((len = getline(&line, &linecap, lf)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = 0;
		char *tab = strchr(line, '\t');
		if (!tab)
			continue;
		*tab = 0;
		if (j.nfiles == cap) {
			cap = cap ? cap * 2 : 1024;
			j.files = realloc(j.files, cap * sizeof(*j.files));
			if (!j.files) {
				perror("realloc");
				return 1;
			}
		}
		j.files[j.nfiles].size = strtoull(line, NULL, 10);
		j.files[j.nfiles].path = strdup(tab + 1);
		j.nfiles++;
	}
	free(line);
	fclose(lf);
	if (j.nfiles == 0 || j.nfiles > UINT32_MAX) {
		fprintf(stderr, "reader: bad list %s\n", argv[optind]);
		return 1;
	}
	j.root_fd = open(argv[optind + 1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (j.root_fd < 0) {
		perror(argv[optind + 1]);
		return 1;
	}
	j.order = malloc(j.nfiles * sizeof(*j.order));
	pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
	if (!j.order || !tids)
		return 1;

	double list_s = -1;
	if (list_first) {
		double t0 = now_s();
		if (list_dirs(j.root_fd, j.files, j.nfiles) < 0)
			return 1;
		list_s = now_s() - t0;
	}
	uint64_t expect = 0;
	for (size_t i = 0; i < j.nfiles; i++)
		expect += j.files[i].size;
	int failed = 0;
	for (int ep = 1; ep <= epochs; ep++) {
		uint64_t s = seed * 1000003u + (uint64_t)ep;
		for (size_t i = 0; i < j.nfiles; i++)
			j.order[i] = (uint32_t)i;
		for (size_t i = j.nfiles - 1; i > 0; i--) {
			size_t k = (size_t)(rng_next(&s) % (i + 1));
			uint32_t t = j.order[i];
			j.order[i] = j.order[k];
			j.order[k] = t;
		}
		atomic_store(&j.next, 0);
		atomic_store(&j.bytes, 0);
		int64_t dev0 = dev ? dev_read_bytes(dev) : -1;
		double t0 = now_s();
		for (int t = 0; t < threads; t++)
			if (pthread_create(&tids[t], NULL, worker, &j) != 0) {
				perror("pthread_create");
				return 1;
			}
		for (int t = 0; t < threads; t++)
			pthread_join(tids[t], NULL);
		double dt = now_s() - t0;
		int64_t dev1 = dev ? dev_read_bytes(dev) : -1;
		uint64_t bytes = atomic_load(&j.bytes);
		printf("{\"epoch\": %d, \"files\": %zu, \"bytes\": %" PRIu64 ", \"seconds\": %.6f", ep,
		       j.nfiles, bytes, dt);
		if (dev)
			printf(", \"dev_read_bytes\": %" PRId64, dev0 >= 0 && dev1 >= 0 ? dev1 - dev0 : -1);
		if (list_s >= 0 && ep == 1)
			printf(", \"list_seconds\": %.6f", list_s);
		printf(", \"errors\": %" PRIu64 "}\n", atomic_load(&j.errors));
		fflush(stdout);
		if (atomic_load(&j.errors) || bytes != expect) {
			fprintf(stderr, "reader: epoch %d: %" PRIu64 " errors, %" PRIu64 " of %" PRIu64 " bytes\n",
				ep, atomic_load(&j.errors), bytes, expect);
			failed = 1;
			break;
		}
	}
	return failed;
}
