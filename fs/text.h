/*
 * fs/text.h - the blanks of the daemon's own text files (config, ctl):
 * numbers and query and ingest lines are read by the library's codecs.
 */
#ifndef VECFS_FS_TEXT_H
#define VECFS_FS_TEXT_H

#include <stddef.h>

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
