/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for fs/'s read path (io.c, readahead.c, prefill.c)
 * over a fake source (fs/source.h) that serves computed bytes and counts
 * requests: a cache unit is one request, reads that bypass the cache go
 * through the per-handle readahead window when the source wants one, and
 * errors reach the reader as EIO.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "cache/disk.h"
#include "fs/fs.h"
#include "fs/io.h"
#include "fs/prefill.h"
#include "fs/readahead.h"
#include "fs/source.h"
#include "tests/unit/check_run.h"

#define MIB ((uint64_t)1 << 20)

struct fake_source {
	struct fs_source base;
	struct fs_source_ops ops;
	_Atomic unsigned requests;
	_Atomic uint64_t bytes;
	int fail;			/* -errno for every read, or 0 */
	_Atomic unsigned *readers;	/* the rig's fs->readers_missing */
	_Atomic unsigned while_readers; /* reads that started while a reader waited */
};

static uint8_t byte_at(uint32_t node, uint64_t off)
{
	return (uint8_t)(off * 31 + off / 4099 + node);
}

static int fake_open(struct fs_source *src, const struct ns *ns, uint32_t node, int *fh)
{
	*fh = -1;
	return 0;
}

static int fake_read(struct fs_source *src, const struct ns *ns, uint32_t node, int fh,
		     uint64_t off, size_t len, void *buf)
{
	struct fake_source *f = (struct fake_source *)src;

	atomic_fetch_add(&f->requests, 1);
	if (f->readers && atomic_load(f->readers) > 0)
		atomic_fetch_add(&f->while_readers, 1);
	if (f->fail)
		return f->fail;
	ck_assert_uint_le(off + len, ns->nodes[node].size);
	for (size_t i = 0; i < len; i++)
		((uint8_t *)buf)[i] = byte_at(node, off + i);
	atomic_fetch_add(&f->bytes, len);
	return 0;
}

static void fake_stats(struct fs_source *src, struct fs_source_stats *out)
{
	memset(out, 0, sizeof(*out));
}

static int fake_etag(struct fs_source *src, const struct ns *ns, uint32_t node, char *buf,
		     size_t len)
{
	return snprintf(buf, len, "\"n%u\"", node) < (int)len ? 0 : -ENAMETOOLONG;
}

struct rig {
	struct fs_ctx fs;
	struct fake_source src;
	uint32_t small, large; /* nodes */
};

/* A 100 KB file and a 20 MiB one; chunk 4 MiB; cache of cache_bytes; a
 * disk tier when disk is not NULL (the rig's: rig_fini closes it). */
static void rig_init_tier(struct rig *r, uint64_t cache_bytes, bool readahead, uint64_t mem,
			  struct cache_disk *disk)
{
	struct ns_listing *l;
	char err[128];
	uint64_t skipped;

	memset(r, 0, sizeof(*r));
	r->src.ops = (struct fs_source_ops){
	    .kind = "fake",
	    .wants_readahead = readahead,
	    .open = fake_open,
	    .read = fake_read,
	    .etag = fake_etag,
	    .get_stats = fake_stats,
	};
	r->src.base.ops = &r->src.ops;
	r->fs.src = &r->src.base;
	ck_assert_int_eq(ns_listing_create(&l), 0);
	ck_assert_int_eq(ns_listing_add(l, "small", 5, 100000, "\"e1\"", 0), 0);
	ck_assert_int_eq(ns_listing_add(l, "large", 5, 20 * MIB, "\"e2\"", 0), 0);
	struct ns_owner owner = { 0, 0, 0444, 0555 };
	ck_assert_int_eq(ns_build(&r->fs.ns, l, 4 * MIB, &owner, &skipped, err, sizeof(err)), 0);
	ns_listing_destroy(l);
	ck_assert_int_eq(ns_resolve(&r->fs.ns, "small", &r->small), 0);
	ck_assert_int_eq(ns_resolve(&r->fs.ns, "large", &r->large), 0);
	ck_assert_int_eq(cache_create(cache_bytes, r->fs.ns.nunits, &r->fs.cache), 0);
	budget_init(&r->fs.mem, mem);
	r->fs.disk = disk;
	r->fs.opt.source = "/fake";
	ck_assert_int_eq(fs_io_init(&r->fs), 0);
}

static void rig_init(struct rig *r, uint64_t cache_bytes, bool readahead, uint64_t mem)
{
	rig_init_tier(r, cache_bytes, readahead, mem, NULL);
}

static void rig_fini(struct rig *r)
{
	fs_io_fini(&r->fs);
	if (r->fs.disk)
		cache_disk_close(r->fs.disk);
	ck_assert_uint_eq(budget_used(&r->fs.mem), 0); /* the fill buffers went back */
	cache_destroy(r->fs.cache);
	budget_fini(&r->fs.mem);
	ns_fini(&r->fs.ns);
}

static void check_bytes(const uint8_t *buf, uint32_t node, uint64_t off, size_t len)
{
	size_t i = 0;

	while (i < len && buf[i] == byte_at(node, off + i))
		i++;
	ck_assert_msg(i == len, "byte %llu: got %u want %u", (unsigned long long)(off + i),
		      i < len ? buf[i] : 0, i < len ? byte_at(node, off + i) : 0);
}

/* Read 1 MiB at off of the large file without a handle. */
static void read_checked_local(struct rig *r, uint64_t off)
{
	uint8_t *buf = malloc(MIB);
	const void *direct = NULL;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(fs_read_file_local(&r->fs, r->large, off, MIB, buf, &direct), MIB);
	check_bytes(direct ? direct : buf, r->large, off, MIB);
	free(buf);
}

/* Read [off, off+len) through a handle with window ra (NULL: none). */
static void read_checked(struct rig *r, uint32_t node, struct fs_readahead *ra, uint64_t off,
			 size_t len)
{
	uint8_t *buf = malloc(len);
	const void *direct;

	ck_assert_ptr_nonnull(buf);
	ssize_t n = fs_read_file_handle(&r->fs, node, -1, NULL, ra, off, len, buf, len, &direct);
	ck_assert_int_eq(n, (ssize_t)len);
	check_bytes(direct ? direct : buf, node, off, len);
	free(buf);
}

START_TEST(unit_is_one_request)
{
	struct rig r;

	rig_init(&r, 64 * MIB, true, 64 * MIB);
	read_checked(&r, r.small, NULL, 0, 4096);
	ck_assert_uint_eq(r.src.requests, 1);
	ck_assert_uint_eq(r.src.bytes, 100000); /* the whole object, admitted */
	read_checked(&r, r.small, NULL, 50000, 50000);
	ck_assert_uint_eq(r.src.requests, 1);
	read_checked(&r, r.large, NULL, 4 * MIB + 10, 100);
	ck_assert_uint_eq(r.src.requests, 2);
	ck_assert_uint_eq(r.src.bytes, 100000 + 4 * MIB); /* one chunk */
	ck_assert_uint_eq(r.fs.ctr.source_reads, 2);
	ck_assert_uint_eq(r.fs.ctr.source_bytes, 100000 + 4 * MIB);
	rig_fini(&r);
}
END_TEST

/* Cache admits nothing: a sequential reader gets growing windows, and
 * reads no byte twice and none past the end. */
/* Admissions read into a kept fill buffer (charged to the I/O budget, as
 * large as the largest unit it took) and are copied into the arena: the
 * cached bytes are the file's; without budget for a buffer a fill reads
 * into the arena directly, with the same bytes. */
START_TEST(fills_go_through_a_kept_buffer)
{
	struct rig r;

	rig_init(&r, 64 * MIB, false, 64 * MIB);
	read_checked(&r, r.small, NULL, 0, 100000);
	uint64_t held = budget_used(&r.fs.mem);
	ck_assert_uint_ge(held, 100000);
	ck_assert_uint_lt(held, 100000 + 65536);
	read_checked(&r, r.small, NULL, 0, 100000); /* a hit: from the arena */
	read_checked(&r, r.large, NULL, 0, 4 * MIB);
	read_checked(&r, r.large, NULL, 8 * MIB + 1, 3 * MIB);
	ck_assert_uint_eq(budget_used(&r.fs.mem), 4 * MIB); /* grown to a chunk, once */
	ck_assert_uint_eq(r.src.requests, 3);
	rig_fini(&r);

	rig_init(&r, 64 * MIB, false, 4096); /* no room for a buffer */
	read_checked(&r, r.small, NULL, 0, 100000);
	read_checked(&r, r.large, NULL, 4 * MIB, 4 * MIB);
	ck_assert_uint_eq(budget_used(&r.fs.mem), 0);
	ck_assert_uint_eq(r.src.requests, 2);
	rig_fini(&r);
}
END_TEST

/* Reads without a handle (the kernel cache's) of a unit the disk tier
 * holds: the whole unit is read from disk once and kept for the others,
 * whatever order they come in (the kernel's readahead sends several at
 * once, on several threads), and given back once all of it was taken. */
struct piece_reader {
	struct rig *r;
	uint64_t off;
	pthread_barrier_t *go;
};

static void *read_piece(void *arg)
{
	struct piece_reader *p = arg;
	uint8_t *buf = malloc(MIB);
	const void *direct = NULL;

	ck_assert_ptr_nonnull(buf);
	pthread_barrier_wait(p->go);
	ck_assert_int_eq(fs_read_file_local(&p->r->fs, p->r->large, p->off, MIB, buf, &direct), MIB);
	check_bytes(direct ? direct : buf, p->r->large, p->off, MIB);
	free(buf);
	return NULL;
}

START_TEST(tier_unit_read_once_for_pieces)
{
	char dir[] = "/tmp/coordfs-test-io-XXXXXX", err[256] = "";
	struct cache_disk_stats st;
	struct cache_disk *d;
	struct rig r;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	char tier[sizeof(dir) + 8];
	snprintf(tier, sizeof(tier), "%s/tier", dir);
	ck_assert_msg(cache_disk_open(tier, 256 * MIB, &d, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cache_disk_start(d), 0);
	rig_init_tier(&r, 0, false, 64 * MIB, d); /* no memory cache: every read misses it */
	for (uint32_t k = 0; k < 3; k++)
		ck_assert_int_eq(fs_prefill_disk_unit(&r.fs, r.large, k), 0);
	ck_assert_int_eq(cache_disk_flush(d, 10000), 0);
	unsigned from_source = r.src.requests;

	/* Unit 0 in four pieces, the last first. */
	for (int i = 3; i >= 0; i -= 3)
		read_checked_local(&r, (uint64_t)i * MIB);
	for (int i = 1; i <= 2; i++)
		read_checked_local(&r, (uint64_t)i * MIB);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.hit_bytes, 4 * MIB);
	/* all of it taken: the slot went back to the budget */
	ck_assert_uint_eq(budget_used(&r.fs.mem), 0);

	/* Units 1 and 2 in four pieces each, on eight threads at once. */
	pthread_barrier_t go;
	pthread_t t[8];
	struct piece_reader p[8];
	ck_assert_int_eq(pthread_barrier_init(&go, NULL, 8), 0);
	for (int i = 0; i < 8; i++) {
		p[i] = (struct piece_reader){&r, (uint64_t)(4 + i) * MIB, &go};
		ck_assert_int_eq(pthread_create(&t[i], NULL, read_piece, &p[i]), 0);
	}
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	cache_disk_get_stats(d, &st);
	ck_assert_uint_eq(st.hit_bytes, 12 * MIB);
	ck_assert_uint_eq(budget_used(&r.fs.mem), 0);
	ck_assert_uint_eq(r.src.requests, from_source); /* nothing from SOURCE */
	rig_fini(&r);
	char cmd[sizeof(dir) + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(sequential_bypass_reads_ahead)
{
	struct rig r;
	struct fs_readahead ra;
	const size_t piece = 128 * 1024;
	unsigned reads = 0;

	rig_init(&r, 0, true, 64 * MIB);
	fs_readahead_init(&ra);
	for (uint64_t off = 0; off < 20 * MIB; off += piece, reads++)
		read_checked(&r, r.large, &ra, off, piece);
	ck_assert_uint_eq(r.src.bytes, 20 * MIB);
	ck_assert_uint_le(r.src.requests, 20 * MIB / FS_RA_MIN);
	ck_assert_uint_lt(r.src.requests, reads / 8);
	/* The window's memory is charged while the handle is open. */
	ck_assert_uint_gt(budget_used(&r.fs.mem), 0);
	ck_assert_uint_le(budget_used(&r.fs.mem), FS_RA_MAX);
	fs_readahead_fini(&ra, &r.fs.mem);
	ck_assert_uint_eq(budget_used(&r.fs.mem), 0);
	rig_fini(&r);
}
END_TEST

/* A reader that seeks every time fetches exactly what it reads. */
START_TEST(random_bypass_reads_no_more)
{
	struct rig r;
	struct fs_readahead ra;
	const size_t piece = 64 * 1024;

	rig_init(&r, 0, true, 64 * MIB);
	fs_readahead_init(&ra);
	for (unsigned i = 0; i < 50; i++)
		read_checked(&r, r.large, &ra, (uint64_t)((i * 7919) % 300 + 1) * piece, piece);
	ck_assert_uint_eq(r.src.requests, 50);
	ck_assert_uint_eq(r.src.bytes, 50 * piece);
	fs_readahead_fini(&ra, &r.fs.mem);
	rig_fini(&r);
}
END_TEST

/* No readahead without room in the budget, or for a source that does not
 * want it: one request per read, correct bytes. */
START_TEST(no_window_without_budget_or_wish)
{
	for (int variant = 0; variant < 2; variant++) {
		struct rig r;
		struct fs_readahead ra;
		const size_t piece = 128 * 1024;

		rig_init(&r, 0, variant == 0, variant == 0 ? 256 * 1024 : 64 * MIB);
		fs_readahead_init(&ra);
		for (uint64_t off = 0; off < 4 * MIB; off += piece)
			read_checked(&r, r.large, &ra, off, piece);
		ck_assert_uint_eq(r.src.requests, 4 * MIB / piece);
		ck_assert_uint_eq(r.src.bytes, 4 * MIB);
		fs_readahead_fini(&ra, &r.fs.mem);
		rig_fini(&r);
	}
}
END_TEST

START_TEST(source_error_is_eio)
{
	struct rig r;
	uint8_t buf[100];
	const void *direct;

	for (int cache = 0; cache < 2; cache++) {
		rig_init(&r, cache ? 64 * MIB : 0, true, 64 * MIB);
		r.src.fail = -EIO;
		ck_assert_int_eq(fs_read_file_handle(&r.fs, r.small, -1, NULL, NULL, 0, sizeof(buf),
						     buf, sizeof(buf), &direct),
				 -EIO);
		ck_assert_uint_eq(r.fs.ctr.source_errors, 1);
		ck_assert(!cache_holds(r.fs.cache, r.fs.ns.nodes[r.small].first));
		rig_fini(&r);
	}
}
END_TEST

/* A file whose unit count does not cover its size (a count wrapped to 0,
 * its first unit the next file's) must not be served another file's
 * bytes: a unit index past the file's own count is EIO. */
START_TEST(unit_past_count_is_eio)
{
	struct rig r;
	uint8_t buf[100];
	const void *direct;

	rig_init(&r, 64 * MIB, false, 64 * MIB);
	read_checked(&r, r.small, NULL, 0, sizeof(buf)); /* small's unit now held */
	struct ns_node *big = &r.fs.ns.nodes[r.large];
	big->first = r.fs.ns.nodes[r.small].first;
	big->count = 0;
	ck_assert_int_eq(fs_read_file_handle(&r.fs, r.large, -1, NULL, NULL, 0, sizeof(buf), buf,
					     sizeof(buf), &direct),
			 -EIO);
	ck_assert_int_eq(fs_prefill_unit(&r.fs, r.large, 0), -EINVAL);
	rig_fini(&r);
}
END_TEST

START_TEST(prefill_unit_admits_once)
{
	struct rig r;

	rig_init(&r, 64 * MIB, true, 64 * MIB);
	ck_assert_int_eq(fs_prefill_unit(&r.fs, r.large, 1), 0);
	ck_assert_int_eq(fs_prefill_unit(&r.fs, r.large, 1), -EEXIST);
	ck_assert_uint_eq(r.src.requests, 1);
	ck_assert_uint_eq(r.src.bytes, 4 * MIB);
	read_checked(&r, r.large, NULL, 4 * MIB, 1000);
	ck_assert_uint_eq(r.src.requests, 1); /* a hit */
	rig_fini(&r);
}
END_TEST

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static struct fs_prefill_stats prefill_wait(struct rig *r)
{
	struct fs_prefill_stats ps;

	for (int i = 0; i < 6000; i++) {
		fs_prefill_get_stats(&r->fs, &ps);
		if (!ps.running)
			break;
		sleep_ms(10);
	}
	fs_prefill_get_stats(&r->fs, &ps);
	return ps;
}

/* Everything fits: every unit admitted once, no hit or miss counted. */
START_TEST(prefill_fills_everything_once)
{
	struct rig r;
	struct cache_stats cs;

	rig_init(&r, 64 * MIB, true, 64 * MIB);
	ck_assert_int_eq(fs_prefill_start(&r.fs, 4), 0);
	struct fs_prefill_stats ps = prefill_wait(&r);
	ck_assert(!ps.running);
	ck_assert_uint_eq(ps.target_bytes, 100000 + 20 * MIB);
	ck_assert_uint_eq(ps.done_bytes, 100000 + 20 * MIB);
	ck_assert_uint_eq(r.src.requests, 1 + 5); /* one per unit */
	cache_get_stats(r.fs.cache, &cs);
	ck_assert_uint_eq(cs.items, 6);
	ck_assert_uint_eq(cs.hits + cs.misses, 0);
	fs_prefill_stop(&r.fs);
	ck_assert_ptr_null(r.fs.prefill);
	rig_fini(&r);
}
END_TEST

/* Room for 2 of the 4 MiB chunks only: prefill never fetches what has no
 * room, and stops at a full cache. */
START_TEST(prefill_stops_at_full)
{
	struct rig r;

	rig_init(&r, 8 * MIB, true, 64 * MIB);
	ck_assert_int_eq(fs_prefill_start(&r.fs, 4), 0);
	struct fs_prefill_stats ps = prefill_wait(&r);
	ck_assert(!ps.running);
	/* ended by itself: the target shrinks to what it fetched, so a
	 * finished prefill never reads as cut short */
	ck_assert_uint_eq(ps.target_bytes, ps.done_bytes);
	/* the small file (first in the namespace or not) and one chunk, or two chunks */
	ck_assert_uint_le(ps.done_bytes, 8 * MIB);
	ck_assert_uint_eq(r.src.bytes, ps.done_bytes);
	ck_assert_uint_ge(ps.done_bytes, 4 * MIB + 100000);
	fs_prefill_stop(&r.fs);
	rig_fini(&r);
}
END_TEST

/* While a reader waits on SOURCE, prefill starts no fetch; it goes on once
 * the reader is served; unmounting stops it even while it yields. */
START_TEST(prefill_yields_to_readers)
{
	struct rig r;
	struct fs_prefill_stats ps;

	rig_init(&r, 64 * MIB, true, 64 * MIB);
	r.src.readers = &r.fs.readers_missing;
	atomic_store(&r.fs.readers_missing, 1);
	ck_assert_int_eq(fs_prefill_start(&r.fs, 4), 0);
	sleep_ms(300); /* room to misbehave */
	fs_prefill_get_stats(&r.fs, &ps);
	ck_assert(ps.running);
	ck_assert_uint_eq(r.src.requests, 0);
	atomic_store(&r.fs.readers_missing, 0);
	ps = prefill_wait(&r);
	ck_assert(!ps.running);
	ck_assert_uint_eq(r.src.requests, 6);
	ck_assert_uint_eq(r.src.while_readers, 0);
	fs_prefill_stop(&r.fs);
	rig_fini(&r);

	rig_init(&r, 64 * MIB, true, 64 * MIB);
	atomic_store(&r.fs.readers_missing, 1);
	ck_assert_int_eq(fs_prefill_start(&r.fs, 4), 0);
	sleep_ms(50);
	fs_prefill_stop(&r.fs); /* returns although readers never leave */
	ck_assert_uint_eq(r.src.requests, 0);
	rig_fini(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("io");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, unit_is_one_request);
	tcase_add_test(tc, fills_go_through_a_kept_buffer);
	tcase_add_test(tc, tier_unit_read_once_for_pieces);
	tcase_add_test(tc, sequential_bypass_reads_ahead);
	tcase_add_test(tc, random_bypass_reads_no_more);
	tcase_add_test(tc, no_window_without_budget_or_wish);
	tcase_add_test(tc, source_error_is_eio);
	tcase_add_test(tc, unit_past_count_is_eio);
	tcase_add_test(tc, prefill_unit_admits_once);
	tcase_add_test(tc, prefill_fills_everything_once);
	tcase_add_test(tc, prefill_stops_at_full);
	tcase_add_test(tc, prefill_yields_to_readers);
	suite_add_tcase(s, tc);
	return check_run(s);
}
