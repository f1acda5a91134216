/* SPDX-License-Identifier: MIT */
/* The per-handle readahead window (readahead.h). */
#include "fs/readahead.h"

#include <string.h>

#include "common/budget.h"

void fs_readahead_init(struct fs_readahead *ra)
{
	memset(ra, 0, sizeof(*ra));
	pthread_mutex_init(&ra->lock, NULL);
}

void fs_readahead_fini(struct fs_readahead *ra, struct budget *mem)
{
	if (ra->data)
		budget_free(mem, ra->data, ra->len);
	ra->data = NULL;
	pthread_mutex_destroy(&ra->lock);
}

int fs_readahead_read(struct fs_readahead *ra, struct budget *mem, uint64_t file_size, uint64_t off,
		      size_t len, void *buf, fs_readahead_fetch_fn fetch, void *arg)
{
	size_t want;

	pthread_mutex_lock(&ra->lock);
	if (ra->data && off >= ra->start && off + len <= ra->start + ra->len) {
		memcpy(buf, ra->data + (off - ra->start), len);
		ra->next = off + len;
		pthread_mutex_unlock(&ra->lock);
		return 0;
	}
	/* Sequential: the start of the file, or where the last read ended. */
	if (off == ra->next)
		ra->window = ra->window ? (ra->window * 2 < FS_RA_MAX ? ra->window * 2 : FS_RA_MAX)
					: FS_RA_MIN;
	else
		ra->window = 0;
	ra->next = off + len;
	want = ra->window;
	pthread_mutex_unlock(&ra->lock);

	if (want <= len || off >= file_size)
		return fetch(arg, off, len, buf);
	if (want > file_size - off)
		want = (size_t)(file_size - off);
	if (want <= len)
		return fetch(arg, off, len, buf);
	uint8_t *win = budget_malloc(mem, want, 0);
	if (!win)
		return fetch(arg, off, len, buf); /* no room: just this read */
	int rc = fetch(arg, off, want, win);
	if (rc < 0) {
		budget_free(mem, win, want);
		return rc;
	}
	memcpy(buf, win, len);
	pthread_mutex_lock(&ra->lock);
	uint8_t *old = ra->data;
	size_t old_len = ra->len;
	ra->data = win;
	ra->start = off;
	ra->len = want;
	pthread_mutex_unlock(&ra->lock);
	if (old)
		budget_free(mem, old, old_len);
	return 0;
}
