/* SPDX-License-Identifier: MIT */
/* Hexadecimal digits, for percent-decoding (peer paths, S3 keys). */
#ifndef COORDFS_COMMON_HEX_H
#define COORDFS_COMMON_HEX_H

/* The value of hexadecimal digit c (either case), or -1. */
static inline int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif
