/* SPDX-License-Identifier: MIT */
/* Whole-file reads (file.h): the test helpers' and benchmarks' one copy. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/file.h"

int file_read_all(const char *path, size_t max, uint8_t **data, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t cap = 1 << 16, n = 0;
	uint8_t *buf = NULL;
	int rc = 0;

	if (fd < 0)
		return -errno;
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
	close(fd);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*data = buf;
	*len = n;
	return 0;
}
