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

#endif
