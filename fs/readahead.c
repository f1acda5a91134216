/* SPDX-License-Identifier: MIT */
/* The per-handle readahead window (readahead.h). */
#include "fs/readahead.h"

#include <string.h>

#include "common/budget.h"

void fs_readahead_init(struct fs_readahead *ra)
{
	memset(ra, 0, sizeof(*ra));
	pthread_mutex_init(&ra->lock, NULL);
	pthread_cond_init(&ra->fetched, NULL);
}

void fs_readahead_fini(struct fs_readahead *ra, struct budget *mem)
{
	if (ra->data)
		budget_free(mem, ra->data, ra->len);
	ra->data = NULL;
	pthread_cond_destroy(&ra->fetched);
	pthread_mutex_destroy(&ra->lock);
}

/* End a window fetch (installing win when it is not NULL) and wake waiters. */
static void fetch_done(struct fs_readahead *ra, struct budget *mem, uint8_t *win, uint64_t start,
		       size_t len)
{
	uint8_t *old = NULL;
	size_t old_len = 0;

	pthread_mutex_lock(&ra->lock);
	if (win) {
		old = ra->data;
		old_len = ra->len;
		ra->data = win;
		ra->start = start;
		ra->len = len;
	}
	ra->fetching = false;
	pthread_cond_broadcast(&ra->fetched);
	pthread_mutex_unlock(&ra->lock);
	if (old)
		budget_free(mem, old, old_len);
}

int fs_readahead_read(struct fs_readahead *ra, struct budget *mem, uint64_t file_size, uint64_t off,
		      size_t len, void *buf, fs_readahead_fetch_fn fetch, void *arg)
{
	size_t want;

	pthread_mutex_lock(&ra->lock);
	for (;;) {
		if (ra->data && off >= ra->start && off < ra->start + ra->len) {
			/* The window holds the read, or its head: the rest (at the
			 * window's end, so sequential) is fetched below. */
			size_t n = (size_t)(ra->start + ra->len - off);

			if (n > len)
				n = len;
			memcpy(buf, ra->data + (off - ra->start), n);
			ra->next = off + n;
			off += n;
			buf = (char *)buf + n;
			len -= n;
			if (len == 0) {
				pthread_mutex_unlock(&ra->lock);
				return 0;
			}
			continue;
		}
		/* A window on its way brings some of this range: wait for it
		 * rather than fetch those bytes twice. */
		if (!(ra->fetching && off < ra->fetch_end && off + len > ra->fetch_start))
			break;
		pthread_cond_wait(&ra->fetched, &ra->lock);
	}
	/* Sequential: the start of the file, or where the last read ended. */
	if (off == ra->next)
		ra->window = ra->window ? (ra->window * 2 < FS_RA_MAX ? ra->window * 2 : FS_RA_MAX)
					: FS_RA_MIN;
	else
		ra->window = 0;
	ra->next = off + len;
	want = ra->window;
	if (off < file_size && want > file_size - off)
		want = (size_t)(file_size - off);
	if (want <= len || off >= file_size || ra->fetching) {
		pthread_mutex_unlock(&ra->lock);
		return fetch(arg, off, len, buf); /* no window (or one is already coming) */
	}
	ra->fetching = true;
	ra->fetch_start = off;
	ra->fetch_end = off + want;
	pthread_mutex_unlock(&ra->lock);

	uint8_t *win = budget_malloc(mem, want, 0);
	if (!win) {
		fetch_done(ra, mem, NULL, 0, 0);
		return fetch(arg, off, len, buf); /* no room: just this read */
	}
	int rc = fetch(arg, off, want, win);
	if (rc < 0) {
		budget_free(mem, win, want);
		fetch_done(ra, mem, NULL, 0, 0);
		return rc;
	}
	memcpy(buf, win, len);
	fetch_done(ra, mem, win, off, want);
	return 0;
}
