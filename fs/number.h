/*
 * fs/number.h - numbers as users write them: the library's parsers
 * (engine/codec/number.c) under short names, and trimming.
 */
#ifndef VECFS_FS_NUMBER_H
#define VECFS_FS_NUMBER_H

#include <stddef.h>
#include <stdint.h>

#include "vecfs.h"

static inline int fs_parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	return vecfs_parse_uint(s, n, max, out);
}

static inline int fs_parse_float(const char *s, size_t n, float *out)
{
	return vecfs_parse_float(s, n, out);
}

/* Trim blanks (space, tab, CR) on both sides. */
static inline void fs_trim(const char **s, size_t *n)
{
	const char *p = *s;
	size_t len = *n;
	while (len && (*p == ' ' || *p == '\t' || *p == '\r')) {
		p++;
		len--;
	}
	while (len && (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\r'))
		len--;
	*s = p;
	*n = len;
}

#endif
