/* SPDX-License-Identifier: MIT */
/*
 * The cost of first touching anonymous memory: maps 256 MiB, writes one
 * byte per 4 KiB page, three times with small pages and twice with
 * MADV_HUGEPAGE, and prints the time per 4 KiB and the rate. Compiled and
 * run by tools/bench/loader_cost; not part of the build.
 */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

static double touch(char *p, size_t n)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (size_t i = 0; i < n; i += 4096)
		p[i] = 1;
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

int main(void)
{
	const size_t n = 256u << 20, huge = 2u << 20;

	for (int r = 0; r < 5; r++) {
		int thp = r >= 3;
		char *m = mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (m == MAP_FAILED)
			return 1;
		char *p = (char *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
		if (thp)
			madvise(p, n, MADV_HUGEPAGE);
		double s = touch(p, n);
		printf("| %s | %.2f | %.2f |\n", thp ? "huge pages" : "4 KiB pages",
		       s * 1e6 / (double)(n / 4096), (double)n / s / 1e9);
		munmap(m, n + huge);
	}
	return 0;
}
