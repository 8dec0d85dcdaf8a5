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

void fs_sb_init(sbuf *b);
void fs_sb_free(sbuf *b);
void fs_sb_reset(sbuf *b);
int fs_sb_reserve(sbuf *b, size_t extra);
void fs_sb_add(sbuf *b, const void *data, size_t n);
void fs_sb_adds(sbuf *b, const char *s);
void fs_sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the contents over (NUL-terminated) and leave the buffer empty. */
char *fs_sb_take(sbuf *b, size_t *len);

/* Append a JSON string literal. */
void fs_sb_json_string(sbuf *b, const char *s, size_t n);

#endif
