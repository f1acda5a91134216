/* SPDX-License-Identifier: MIT */
/* Whole-file reads (file.h): the test helpers' and benchmarks' one copy. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"

int file_read_all(const char *path, size_t max, uint8_t **data, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	int rc = file_read_fd(fd, max, data, len);
	close(fd);
	return rc;
}

int file_read_fd(int fd, size_t max, uint8_t **data, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	uint8_t *buf = NULL;
	int rc = 0;

	for (;;) {
		if (!buf || n == cap) { /* room for max + 1 bytes tells "over max" */
			size_t ncap = !buf ? cap : cap <= max / 2 ? cap * 2 : max + 1;
			uint8_t *nb = realloc(buf, ncap);
			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
			cap = ncap;
		}
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = -errno;
			break;
		}
		if (got == 0)
			break;
		n += (size_t)got;
		if (n > max) {
			rc = -EFBIG;
			break;
		}
	}
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*data = buf;
	*len = n;
	return 0;
}

int file_open_regular(const char *path)
{
	/* O_NONBLOCK: opening a FIFO for reading waits for a writer. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;
	int rc = fd < 0		       ? -errno
		 : fstat(fd, &st) < 0  ? -errno
		 : S_ISREG(st.st_mode) ? 0
				       : -EINVAL;

	if (rc < 0 && fd >= 0)
		close(fd);
	return rc < 0 ? rc : fd;
}

char *file_path_absolute(const char *path)
{
	char cwd[PATH_MAX], *abs;

	if (path[0] == '/')
		return strdup(path);
	if (!getcwd(cwd, sizeof(cwd)))
		return NULL;
	if (asprintf(&abs, "%s/%s", strcmp(cwd, "/") ? cwd : "", path) < 0)
		return NULL;
	return abs;
}
