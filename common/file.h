/* SPDX-License-Identifier: MIT */
/* Reading a whole (small) file into memory. */
#ifndef COORDFS_COMMON_FILE_H
#define COORDFS_COMMON_FILE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Read the file at path into a malloc'd buffer (*data, *len bytes; freed by
 * the caller). Read as a stream, so pipes and /proc files work too.
 * 0, -errno of open/read, -EFBIG when it holds more than max bytes,
 * -ENOMEM.
 */
int file_read_all(const char *path, size_t max, uint8_t **data, size_t *len);

/* The same from an open descriptor, read to its end (and left open). */
int file_read_fd(int fd, size_t max, uint8_t **data, size_t *len);

/*
 * Open path (links followed) for reading only if it is a regular file: a
 * descriptor, or -errno, -EINVAL for anything else. For files a daemon
 * reads at a path others may be able to put things at: a FIFO there would
 * block it for good in open or read, a device feed it without end.
 */
int file_open_regular(const char *path);

/*
 * path made absolute against the current directory, malloc'd; NULL with
 * errno set. Not resolved (no realpath): a symbolic link, such as a
 * Kubernetes volume's file that an update swaps, is still followed at each
 * open. For paths a daemon opens again after it changed to "/".
 */
char *file_path_absolute(const char *path);

#endif
