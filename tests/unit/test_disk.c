/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the disk tier (cache/disk.c): units survive a reopen, a
 * torn index tail is cut and never served, a flipped data byte is caught
 * by the checksum, the limit counts everything written, a unit of another
 * snapshot is dropped as stale, one daemon per directory, modes 0700/0600,
 * direct reads (whole blocks around unaligned units, none left in the
 * page cache).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/disk.h"
#include "tests/unit/check_run.h"

#define UNIT 3000u

static char dir[64];

static void make_dir(void)
{
	char tmpl[] = "/tmp/test_disk.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	/* cache_disk_open creates the tier below it. */
	snprintf(dir, sizeof(dir), "%s/tier", tmpl);
}

static void fill(unsigned char *p, uint32_t k)
{
	for (size_t i = 0; i < UNIT; i++)
		p[i] = (unsigned char)(k * 13 + i);
}

static struct cache_disk *open_tier(uint64_t limit)
{
	struct cache_disk *d;
	char err[256] = "";

	ck_assert_msg(cache_disk_open(dir, limit, &d, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cache_disk_start(d), 0);
	return d;
}

/* Admit units 0..n-1 of "f" (snapshot 1) and wait for them to be written;
 * units held already answer -EEXIST. */
static void admit_units(struct cache_disk *d, uint32_t n)
{
	unsigned char buf[UNIT];
	for (uint32_t k = 0; k < n; k++) {
		fill(buf, k);
		int rc = cache_disk_admit(d, cache_disk_key("/src", "f", 4096, k), 1, buf, UNIT, false);
		ck_assert_msg(rc == 0 || rc == -EEXIST, "unit %u: %d", k, rc);
	}
	ck_assert_int_eq(cache_disk_flush(d, 10000), 0);
}

/* A closed tier holding units 0..2. */
static void tier_of_three(void)
{
	make_dir();
	struct cache_disk *d = open_tier(1 << 20);
	admit_units(d, 3);
	cache_disk_close(d);
}

static int read_unit(struct cache_disk *d, uint32_t k, uint64_t snap)
{
	unsigned char buf[UNIT], want[UNIT];
	int rc = cache_disk_read(d, cache_disk_key("/src", "f", 4096, k), snap, buf, UNIT);
	if (rc == 0) {
		fill(want, k);
		ck_assert_msg(memcmp(buf, want, UNIT) == 0, "unit %u has wrong bytes", k);
	}
	return rc;
}

static off_t file_size(const char *name)
{
	char p[128];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	ck_assert_int_eq(stat(p, &st), 0);
	return st.st_size;
}

START_TEST(units_survive_a_reopen)
{
	struct cache_disk_stats st;
	make_dir();
	struct cache_disk *d = open_tier(1 << 20);
	admit_units(d, 5);
	ck_assert_int_eq(read_unit(d, 2, 1), 0);
	cache_disk_close(d);

	d = open_tier(1 << 20);
	for (uint32_t k = 0; k < 5; k++)
		ck_assert_int_eq(read_unit(d, k, 1), 0);
	ck_assert_int_eq(read_unit(d, 5, 1), -ENOENT);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.items, 5);
	ck_assert_uint_eq(st.hits, 5);
	ck_assert_uint_eq(st.hit_bytes, 5 * UNIT);
	/* header + 5 units + 5 records, exactly the files' sizes */
	ck_assert_uint_eq(st.used_bytes, 64 + 5 * UNIT + 5 * 64);
	ck_assert_uint_eq(st.used_bytes, (uint64_t)(file_size("data") + file_size("index")));
	cache_disk_close(d);
}
END_TEST

/* Opening (what the mount waits for) takes the lock and the header only;
 * the records are loaded by the started tier, and reads wait for them. */
START_TEST(open_reads_no_records)
{
	struct cache_disk_stats st;
	struct cache_disk *d;
	char err[256] = "";

	tier_of_three();
	ck_assert_msg(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)) == 0, "%s", err);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.items, 0);
	ck_assert_uint_eq(st.used_bytes, 64);
	ck_assert_int_eq(cache_disk_start(d), 0);
	ck_assert_int_eq(read_unit(d, 2, 1), 0); /* waits for the load */
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.items, 3);
	ck_assert_uint_eq(st.used_bytes, 64 + 3 * (UNIT + 64));
	cache_disk_close(d);
}
END_TEST

START_TEST(torn_tail_record_is_ignored_and_cut)
{
	tier_of_three();
	/* A crash mid-record: half of the last record, plus data of a unit
	 * whose record never made it. */
	char p[128];
	snprintf(p, sizeof(p), "%s/index", dir);
	ck_assert_int_eq(truncate(p, file_size("index") - 32), 0);
	snprintf(p, sizeof(p), "%s/data", dir);
	int fd = open(p, O_WRONLY | O_APPEND);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "garbage", 7), 7);
	close(fd);

	struct cache_disk *d = open_tier(1 << 20);
	ck_assert_int_eq(read_unit(d, 0, 1), 0);
	ck_assert_int_eq(read_unit(d, 1, 1), 0);
	ck_assert_int_eq(read_unit(d, 2, 1), -ENOENT);
	struct cache_disk_stats st;
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.dropped_cut, 0); /* a crash's half record: no unit lost */
	ck_assert_int_eq(file_size("index"), 64 + 2 * 64);
	ck_assert_int_eq(file_size("data"), 2 * UNIT);
	/* and the tier goes on appending after the cut */
	admit_units(d, 3);
	ck_assert_int_eq(read_unit(d, 2, 1), 0);
	cache_disk_close(d);
	d = open_tier(1 << 20);
	ck_assert_int_eq(read_unit(d, 2, 1), 0);
	cache_disk_close(d);
}
END_TEST

/* A header lost to a power loss (zeros) starts the tier over; anything
 * else that is not a tier's header is refused, never overwritten. */
START_TEST(zeroed_header_starts_over_foreign_index_refused)
{
	static const char zeros[64];
	struct cache_disk *d;
	char p[128], err[256] = "";

	tier_of_three();
	snprintf(p, sizeof(p), "%s/index", dir);
	int fd = open(p, O_WRONLY);
	ck_assert_int_eq(pwrite(fd, zeros, 64, 0), 64);
	d = open_tier(1 << 20);
	ck_assert_int_eq(read_unit(d, 0, 1), -ENOENT);
	ck_assert_int_eq(file_size("data"), 0);
	cache_disk_close(d);
	ck_assert_int_eq(pwrite(fd, "something else", 14, 0), 14);
	close(fd);
	ck_assert_int_eq(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "not a coordfs disk cache index"), "%s", err);
}
END_TEST

/* An index made sparse and huge (a damaged file system, a stray
 * truncate) claims 2^28 records: the table is not sized for them, the
 * zeros after the valid records are cut, and the tier stays on. */
START_TEST(sparse_huge_index_is_cut_not_fatal)
{
	struct cache_disk_stats st;
	char p[128];

	tier_of_three();
	snprintf(p, sizeof(p), "%s/index", dir);
	ck_assert_int_eq(truncate(p, (off_t)200 << 30), 0);
	struct cache_disk *d = open_tier(1 << 20);
	ck_assert_int_eq(read_unit(d, 2, 1), 0);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.disabled, 0);
	ck_assert_uint_eq(st.items, 3);
	ck_assert_uint_eq(st.dropped_cut, 0); /* zeros are no records */
	ck_assert_int_eq(file_size("index"), 64 + 3 * 64);
	cache_disk_close(d);
}
END_TEST

START_TEST(record_checksum_mismatch_cuts_from_there)
{
	tier_of_three();
	char p[128];
	snprintf(p, sizeof(p), "%s/index", dir);
	int fd = open(p, O_WRONLY);
	/* a bit of record 1's offset field */
	ck_assert_int_eq(pwrite(fd, "\x01", 1, 64 + 64 + 32), 1);
	close(fd);
	struct cache_disk *d = open_tier(1 << 20);
	ck_assert_int_eq(read_unit(d, 0, 1), 0);
	ck_assert_int_eq(read_unit(d, 1, 1), -ENOENT);
	ck_assert_int_eq(read_unit(d, 2, 1), -ENOENT);
	struct cache_disk_stats st;
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.dropped_cut, 1); /* unit 2: its record was whole */
	ck_assert_uint_eq(st.items, 1);
	cache_disk_close(d);
}
END_TEST

START_TEST(data_checksum_mismatch_is_dropped)
{
	struct cache_disk_stats st;
	make_dir();
	struct cache_disk *d = open_tier(1 << 20);
	admit_units(d, 3);
	char p[128];
	snprintf(p, sizeof(p), "%s/data", dir);
	int fd = open(p, O_RDWR);
	unsigned char b;
	ck_assert_int_eq(pread(fd, &b, 1, UNIT + 100), 1);
	b ^= 0x20;
	ck_assert_int_eq(pwrite(fd, &b, 1, UNIT + 100), 1);
	close(fd);
	ck_assert_int_eq(read_unit(d, 1, 1), -EBADMSG);
	ck_assert_int_eq(read_unit(d, 1, 1), -ENOENT); /* dropped: never read again */
	ck_assert_int_eq(read_unit(d, 0, 1), 0);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.dropped_corrupt, 1);
	ck_assert_uint_eq(st.items, 2);
	/* a dropped unit may be admitted again */
	admit_units(d, 3);
	ck_assert_int_eq(read_unit(d, 1, 1), 0);
	cache_disk_close(d);
}
END_TEST

/* Unit k by a direct read: its bytes checked; *at as the read gave it. */
static int read_unit_direct(struct cache_disk *d, uint32_t k, size_t *at)
{
	unsigned char want[UNIT];
	void *buf;
	ck_assert_int_eq(posix_memalign(&buf, CACHE_DISK_ALIGN, cache_disk_room(UNIT)), 0);
	int rc = cache_disk_read_direct(d, cache_disk_key("/src", "f", 4096, k), 1, buf, UNIT, at);
	if (rc == 0) {
		fill(want, k);
		ck_assert_msg(memcmp((unsigned char *)buf + *at, want, UNIT) == 0,
			      "unit %u has wrong bytes", k);
	}
	free(buf);
	return rc;
}

/* Pages of the tier's data file in the page cache. */
static size_t data_pages_cached(void)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/data", dir);
	int fd = open(p, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	size_t len = (size_t)file_size("data"), pages = (len + 4095) / 4096, n = 0;
	/* PROT_NONE: mincore needs a mapping, not access, and a readable
	 * mapping is read by valgrind (an ELF check), caching pages itself. */
	void *m = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	unsigned char *vec = malloc(pages);
	ck_assert_int_eq(mincore(m, len, vec), 0);
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	free(vec);
	munmap(m, len);
	close(fd);
	return n;
}

START_TEST(direct_reads_take_whole_blocks_and_cache_nothing)
{
	struct cache_disk_stats st;
	char p[128];
	/* 7 units of 3000 bytes: most straddle a block, the last ends mid-block
	 * at the end of the file. */
	make_dir();
	struct cache_disk *d = open_tier(1 << 20);
	admit_units(d, 7);
	cache_disk_close(d);
	snprintf(p, sizeof(p), "%s/data", dir);
	int fd = open(p, O_RDONLY | O_DIRECT);
	bool direct = fd >= 0;
	if (fd >= 0)
		close(fd);
	else
		ck_assert_int_eq(errno, EINVAL); /* only a file system without it */

	d = open_tier(1 << 20);
	for (uint32_t k = 0; k < 7; k++) {
		size_t at = 99;
		ck_assert_int_eq(read_unit_direct(d, k, &at), 0);
		/* where the unit starts in its first block; 0 when buffered */
		ck_assert_uint_eq(at, direct ? (k * UNIT) % CACHE_DISK_ALIGN : 0);
	}
	ck_assert_uint_eq(data_pages_cached(), 0);
	/* A flipped byte is caught on this path too. */
	fd = open(p, O_RDWR);
	unsigned char b;
	ck_assert_int_eq(pread(fd, &b, 1, 4 * UNIT + 7), 1);
	b ^= 0x01;
	ck_assert_int_eq(pwrite(fd, &b, 1, 4 * UNIT + 7), 1);
	ck_assert_int_eq(fdatasync(fd), 0);
	close(fd);
	size_t at;
	ck_assert_int_eq(read_unit_direct(d, 4, &at), -EBADMSG);
	ck_assert_int_eq(read_unit_direct(d, 4, &at), -ENOENT);
	ck_assert_int_eq(read_unit_direct(d, 5, &at), 0);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.dropped_corrupt, 1);
	ck_assert_uint_eq(st.hits, 8);
	cache_disk_close(d);
}
END_TEST

START_TEST(limit_counts_data_index_and_header)
{
	struct cache_disk_stats st;
	unsigned char buf[UNIT];
	make_dir();
	/* Room for header + 3 units with their records, not 4. */
	uint64_t limit = 64 + 3 * (UNIT + 64) + UNIT / 2;
	struct cache_disk *d = open_tier(limit);
	int ok = 0, refused = 0;
	for (uint32_t k = 0; k < 6; k++) {
		fill(buf, k);
		int rc = cache_disk_admit(d, cache_disk_key("/src", "f", 4096, k), 1, buf, UNIT, k % 2 == 0);
		ck_assert(rc == 0 || rc == -ENOSPC);
		rc == 0 ? ok++ : refused++;
	}
	ck_assert_int_eq(cache_disk_flush(d, 10000), 0);
	ck_assert_int_eq(ok, 3);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.refused, 3);
	ck_assert_uint_eq(st.admitted, 3);
	ck_assert_uint_le(st.used_bytes, limit);
	ck_assert_uint_eq(st.used_bytes, (uint64_t)(file_size("data") + file_size("index")));
	/* Admitted twice is once. */
	fill(buf, 0);
	ck_assert_int_eq(cache_disk_admit(d, cache_disk_key("/src", "f", 4096, 0), 1, buf, UNIT, false),
			 -EEXIST);
	cache_disk_close(d);
	/* Reopened, the limit still holds: nothing more fits. */
	d = open_tier(limit);
	ck_assert_int_eq(cache_disk_check(d, cache_disk_key("/src", "f", 4096, 5), 1, UNIT), -ENOSPC);
	ck_assert_int_eq(cache_disk_check(d, cache_disk_key("/src", "f", 4096, 5), 1, 100), 0);
	ck_assert_int_eq(cache_disk_check(d, cache_disk_key("/src", "f", 4096, 0), 1, UNIT), -EEXIST);
	cache_disk_close(d);
}
END_TEST

/* Borrowed units (memory's) are never offered twice, so the queue grows
 * for them instead of dropping them: 3000 queued before the writer runs. */
START_TEST(queue_grows_for_borrowed_units)
{
	static unsigned char units[3000][100];
	struct cache_disk_stats st;
	struct cache_disk *d;
	char err[256] = "";

	make_dir();
	ck_assert_msg(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)) == 0, "%s", err);
	for (uint32_t k = 0; k < 3000; k++) {
		memset(units[k], (int)(k * 7), sizeof(units[k]));
		ck_assert_int_eq(cache_disk_admit(d, cache_disk_key("/src", "g", 4096, k), 1, units[k],
						  sizeof(units[k]), true), 0);
	}
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.queued, 3000);
	ck_assert_int_eq(cache_disk_start(d), 0);
	ck_assert_int_eq(cache_disk_flush(d, 20000), 0);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.items, 3000);
	unsigned char got[100];
	for (uint32_t k = 0; k < 3000; k += 499) {
		ck_assert_int_eq(cache_disk_read(d, cache_disk_key("/src", "g", 4096, k), 1, got,
						 sizeof(got)), 0);
		ck_assert_int_eq(memcmp(got, units[k], sizeof(got)), 0);
	}
	cache_disk_close(d);
}
END_TEST

/* A borrowed unit is read through the copier when there is one: what it
 * copies is what the tier writes and checksums. */
struct copier_log {
	unsigned calls;
	const void *src;
};

static void copy_logged(void *arg, void *dst, const void *src, size_t len)
{
	struct copier_log *log = arg;

	log->calls++;
	log->src = src;
	memcpy(dst, src, len);
	((unsigned char *)dst)[0] ^= 0xff; /* marks the bytes as the copier's */
}

START_TEST(borrowed_units_read_through_the_copier)
{
	static unsigned char unit[UNIT], copy[UNIT];
	struct copier_log log = {0, NULL};
	struct cache_disk *d;
	char err[256] = "";

	make_dir();
	ck_assert_msg(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)) == 0, "%s", err);
	cache_disk_set_copier(d, copy_logged, &log);
	ck_assert_int_eq(cache_disk_start(d), 0);
	fill(unit, 5);
	ck_assert_int_eq(cache_disk_admit(d, cache_disk_key("/src", "b", 4096, 0), 1, unit, UNIT, true),
			 0);
	fill(copy, 6);
	ck_assert_int_eq(cache_disk_admit(d, cache_disk_key("/src", "b", 4096, 1), 1, copy, UNIT, false),
			 0);
	ck_assert_int_eq(cache_disk_flush(d, 10000), 0);
	ck_assert_uint_eq(log.calls, 1); /* the borrowed one only */
	ck_assert_ptr_eq(log.src, unit);
	unsigned char got[UNIT];
	ck_assert_int_eq(cache_disk_read(d, cache_disk_key("/src", "b", 4096, 0), 1, got, UNIT), 0);
	unit[0] ^= 0xff;
	ck_assert_int_eq(memcmp(got, unit, UNIT), 0);
	ck_assert_int_eq(cache_disk_read(d, cache_disk_key("/src", "b", 4096, 1), 1, got, UNIT), 0);
	ck_assert_int_eq(memcmp(got, copy, UNIT), 0);
	cache_disk_close(d);
}
END_TEST

START_TEST(other_snapshot_is_dropped_as_stale)
{
	struct cache_disk_stats st;
	make_dir();
	struct cache_disk *d = open_tier(1 << 20);
	admit_units(d, 2);
	cache_disk_close(d);
	d = open_tier(1 << 20);
	ck_assert_int_eq(read_unit(d, 0, 2), -ESTALE);
	ck_assert_int_eq(read_unit(d, 0, 1), -ENOENT); /* gone, even for the old one */
	ck_assert_int_eq(read_unit(d, 1, 1), 0);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.dropped_stale, 1);
	ck_assert_uint_eq(st.items, 1);
	ck_assert_uint_eq(cache_disk_snap("\"a\"", 1) == cache_disk_snap("\"a\"", 2), 0);
	ck_assert(cache_disk_key("/src", "f", 4096, 0).lo != cache_disk_key("/src", "f", 8192, 0).lo);
	ck_assert(cache_disk_key("/src", "f", 4096, 0).lo != cache_disk_key("/other", "f", 4096, 0).lo);
	/* the separators keep "a" + "b/c" apart from "a/b" + "c" */
	ck_assert(cache_disk_key("/a", "b/c", 4096, 0).lo != cache_disk_key("/a/b", "c", 4096, 0).lo);
	cache_disk_close(d);
}
END_TEST

START_TEST(second_open_is_refused_with_the_pid)
{
	struct cache_disk *d2;
	char err[256] = "", want[64];
	make_dir();
	struct cache_disk *d = open_tier(1 << 20);
	ck_assert_int_eq(cache_disk_open(dir, 1 << 20, &d2, err, sizeof(err)), -EBUSY);
	snprintf(want, sizeof(want), "(pid %d)", (int)getpid());
	ck_assert_msg(strstr(err, want), "%s", err);
	cache_disk_close(d);
}
END_TEST

/* From the open on, not only from cache_disk_start (after the mount): the
 * lock file held the last holder's pid until then. */
START_TEST(refusal_names_the_holder_before_it_starts)
{
	struct cache_disk *d, *d2;
	char p[128], err[256] = "", want[64];

	tier_of_three();
	snprintf(p, sizeof(p), "%s/lock", dir);
	int fd = open(p, O_WRONLY | O_TRUNC);
	ck_assert_int_eq(write(fd, "999999\n", 7), 7);
	close(fd);
	ck_assert_msg(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cache_disk_open(dir, 1 << 20, &d2, err, sizeof(err)), -EBUSY);
	snprintf(want, sizeof(want), "(pid %d)", (int)getpid());
	ck_assert_msg(strstr(err, want), "%s", err);
	cache_disk_close(d);
}
END_TEST

START_TEST(modes_are_0700_and_0600)
{
	struct stat st;
	char p[128];
	const char *names[] = {"lock", "data", "index"};
	make_dir();
	struct cache_disk *d = open_tier(1 << 20);
	admit_units(d, 1);
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0700);
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		ck_assert_int_eq(stat(p, &st), 0);
		ck_assert_uint_eq(st.st_mode & 07777, 0600);
	}
	cache_disk_close(d);
	/* A directory others may write is refused. */
	ck_assert_int_eq(chmod(dir, 0777), 0);
	char err[256];
	ck_assert_int_eq(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)), -EPERM);
}
END_TEST

/* A file of DIR that is a hard link, a FIFO or another user's is refused
 * (the daemon would truncate and write through it, or hang), one readable
 * by others is made 0600, and a directory that holds other files, a
 * `data` and no index is no tier: its files are never truncated. */
START_TEST(planted_files_are_refused_never_written)
{
	struct cache_disk *d;
	struct stat st;
	char p[128], victim[128], err[256] = "";

	make_dir();
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(victim, sizeof(victim), "%s/../victim", dir);
	int fd = open(victim, O_WRONLY | O_CREAT, 0644);
	ck_assert_int_eq(write(fd, "precious", 8), 8);
	close(fd);
	snprintf(p, sizeof(p), "%s/data", dir);
	ck_assert_int_eq(link(victim, p), 0);
	ck_assert_int_eq(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "no other link"), "%s", err);
	ck_assert_int_eq(stat(victim, &st), 0);
	ck_assert_int_eq(st.st_size, 8);
	ck_assert_int_eq(unlink(p), 0);

	snprintf(p, sizeof(p), "%s/index", dir);
	ck_assert_int_eq(mkfifo(p, 0600), 0);
	ck_assert_int_eq(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)), -EPERM);
	ck_assert_int_eq(unlink(p), 0);

	/* Readable by others: made 0600. */
	snprintf(p, sizeof(p), "%s/data", dir);
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	ck_assert_int_eq(fchmod(fd, 0644), 0);
	close(fd);
	d = open_tier(1 << 20);
	cache_disk_close(d);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);

	/* Someone's directory: a `data` among other files, no index. */
	snprintf(p, sizeof(p), "%s/index", dir);
	ck_assert_int_eq(unlink(p), 0);
	snprintf(p, sizeof(p), "%s/data", dir);
	fd = open(p, O_WRONLY | O_TRUNC);
	ck_assert_int_eq(write(fd, "precious", 8), 8);
	close(fd);
	snprintf(p, sizeof(p), "%s/notes.txt", dir);
	close(open(p, O_WRONLY | O_CREAT, 0600));
	ck_assert_int_eq(cache_disk_open(dir, 1 << 20, &d, err, sizeof(err)), -EEXIST);
	ck_assert_msg(strstr(err, "not a coordfs disk cache"), "%s", err);
	ck_assert_int_eq(file_size("data"), 8);
	/* A tier that lost its index (nothing else in DIR) starts over. */
	ck_assert_int_eq(unlink(p), 0);
	d = open_tier(1 << 20);
	cache_disk_close(d);
	ck_assert_int_eq(file_size("data"), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("disk");
	TCase *tc = tcase_create("core");

	umask(022);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, units_survive_a_reopen);
	tcase_add_test(tc, open_reads_no_records);
	tcase_add_test(tc, torn_tail_record_is_ignored_and_cut);
	tcase_add_test(tc, record_checksum_mismatch_cuts_from_there);
	tcase_add_test(tc, sparse_huge_index_is_cut_not_fatal);
	tcase_add_test(tc, zeroed_header_starts_over_foreign_index_refused);
	tcase_add_test(tc, data_checksum_mismatch_is_dropped);
	tcase_add_test(tc, direct_reads_take_whole_blocks_and_cache_nothing);
	tcase_add_test(tc, limit_counts_data_index_and_header);
	tcase_add_test(tc, queue_grows_for_borrowed_units);
	tcase_add_test(tc, borrowed_units_read_through_the_copier);
	tcase_add_test(tc, other_snapshot_is_dropped_as_stale);
	tcase_add_test(tc, second_open_is_refused_with_the_pid);
	tcase_add_test(tc, refusal_names_the_holder_before_it_starts);
	tcase_add_test(tc, modes_are_0700_and_0600);
	tcase_add_test(tc, planted_files_are_refused_never_written);
	suite_add_tcase(s, tc);
	return check_run(s);
}
