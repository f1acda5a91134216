/* SPDX-License-Identifier: MIT */
#include "common/hash.h"

uint64_t hash_bytes(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ULL ^ hash_mix64(seed);

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return hash_mix64(h ^ (uint64_t)len);
}

int hash_ct_compare(const void *a, const void *b, size_t len)
{
	const volatile unsigned char *x = a, *y = b;
	unsigned char diff = 0;

	for (size_t i = 0; i < len; i++)
		diff |= (unsigned char)(x[i] ^ y[i]);
	return diff != 0;
}
