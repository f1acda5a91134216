/* SPDX-License-Identifier: MIT */
/* Hashing shared by the modules: a 64-bit string hash and splitmix64 mixing. */
#ifndef COORDFS_COMMON_HASH_H
#define COORDFS_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64 finalizer: a bijective mix of 64 bits. */
static inline uint64_t hash_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* 64-bit hash of len bytes (FNV-1a folded through hash_mix64), stable across
 * machines and builds: peers rely on it for ownership. */
uint64_t hash_bytes(const void *data, size_t len, uint64_t seed);

/* Constant-time comparison: 0 when equal. Runs in time dependent only on len. */
int hash_ct_compare(const void *a, const void *b, size_t len);

#endif
