/*
 * engine/codec/text.h - blanks of the text codecs: space, tab, CR.
 */
#ifndef VECFS_CODEC_TEXT_H
#define VECFS_CODEC_TEXT_H

#include <stddef.h>

static inline int vf_text_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* Trim blanks on both sides. */
static inline void vf_text_trim(const char **s, size_t *n)
{
	while (*n && vf_text_blank(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && vf_text_blank((*s)[*n - 1]))
		(*n)--;
}

#endif
