/* SPDX-License-Identifier: MIT */
/* Parsing of SIZE arguments: bytes, K/M/G/T suffixes (powers of 1024), or N%. */
#ifndef COORDFS_COMMON_SIZE_H
#define COORDFS_COMMON_SIZE_H

#include <stdint.h>

/*
 * Parse text as a size. "N%" is N percent (0 < N <= 100, decimals allowed)
 * of phys_bytes. Returns 0 and sets *out, or -EINVAL for anything else
 * (empty, negative, unknown suffix, trailing junk, overflow).
 */
int size_parse(const char *text, uint64_t phys_bytes, uint64_t *out);

/* Physical memory of the machine in bytes (sysconf). */
uint64_t size_phys_mem(void);

/* Human-readable size ("1.5 GiB") into buf. Returns buf. */
char *size_format(uint64_t bytes, char *buf, unsigned buflen);

#endif
