/*
 * fs/sbuf.h - a growing byte buffer, and JSON string literals into it.
 */
#ifndef VECFS_FS_SBUF_H
#define VECFS_FS_SBUF_H

#include <stddef.h>

/* On allocation failure `oom` is set and further appends are dropped. */
typedef struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
} sbuf;

void sb_init(sbuf *b);
void sb_free(sbuf *b);
void sb_reset(sbuf *b);
int sb_reserve(sbuf *b, size_t extra);
void sb_add(sbuf *b, const void *data, size_t n);
void sb_adds(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the contents over (NUL-terminated) and leave the buffer empty. */
char *sb_take(sbuf *b, size_t *len);

/* Append a JSON string literal. */
void sb_json_string(sbuf *b, const char *s, size_t n);

#endif
