/* SPDX-License-Identifier: MIT */
#include "common/size.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int size_parse(const char *text, uint64_t phys_bytes, uint64_t *out)
{
	const char *p = text;
	char *end;

	if (!text || !*text || !isdigit((unsigned char)*p))
		return -EINVAL;
	errno = 0;
	double v = strtod(p, &end);
	if (errno || end == p || !(v >= 0) || !isfinite(v))
		return -EINVAL;
	/* Decimal digits and one point only: strtod also takes hexadecimal
	 * ("0x10" would be 16 bytes) and exponents ("1e9"), which no one
	 * writing a size means. */
	for (const char *q = p, *point = NULL; q < end; q++)
		if (!isdigit((unsigned char)*q) && (*q != '.' || point || !(point = q)))
			return -EINVAL;
	double mul = 1;
	switch (*end) {
	case '\0':
		break;
	case 'k':
	case 'K':
		mul = 1024.0;
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1024.0 * 1024;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1024.0 * 1024 * 1024;
		end++;
		break;
	case 't':
	case 'T':
		mul = 1024.0 * 1024 * 1024 * 1024;
		end++;
		break;
	case '%':
		if (v <= 0 || v > 100)
			return -EINVAL;
		end++;
		if (*end)
			return -EINVAL;
		*out = (uint64_t)((double)phys_bytes * v / 100.0);
		return 0;
	default:
		return -EINVAL;
	}
	/* Accept an optional "B"/"iB" after a unit, as in "4MiB" or "4MB". */
	if (mul > 1 && (*end == 'i' || *end == 'I') && (end[1] == 'b' || end[1] == 'B'))
		end += 2;
	else if (mul > 1 && (*end == 'b' || *end == 'B'))
		end++;
	if (*end)
		return -EINVAL;
	double bytes = v * mul;
	if (bytes >= 18446744073709551615.0)
		return -EINVAL;
	*out = (uint64_t)bytes;
	return 0;
}

uint64_t size_phys_mem(void)
{
	long pages = sysconf(_SC_PHYS_PAGES);
	long page = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || page <= 0)
		return 0;
	return (uint64_t)pages * (uint64_t)page;
}

char *size_format(uint64_t bytes, char *buf, unsigned buflen)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, buflen, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, buflen, "%.1f %s", v, units[u]);
	return buf;
}
