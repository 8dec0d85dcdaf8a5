/*
 * fs/sbuf.c - a growing byte buffer, and JSON string literals into it.
 */
#include "sbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- sbuf */

void fs_sb_init(sbuf *b)
{
	memset(b, 0, sizeof *b);
}

void fs_sb_free(sbuf *b)
{
	free(b->p);
	fs_sb_init(b);
}

void fs_sb_reset(sbuf *b)
{
	b->len = 0;
	b->oom = 0;
	if (b->p)
		b->p[0] = 0;
}

int fs_sb_reserve(sbuf *b, size_t extra)
{
	if (b->oom)
		return -ENOMEM;
	if (b->len + extra + 1 <= b->cap)
		return 0;
	size_t nc = b->cap ? b->cap : 256;
	while (nc < b->len + extra + 1) {
		if (nc > SIZE_MAX / 2) {
			b->oom = 1;
			return -ENOMEM;
		}
		nc *= 2;
	}
	char *np = realloc(b->p, nc);
	if (!np) {
		b->oom = 1;
		return -ENOMEM;
	}
	b->p = np;
	b->cap = nc;
	return 0;
}

void fs_sb_add(sbuf *b, const void *data, size_t n)
{
	if (fs_sb_reserve(b, n))
		return;
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = 0;
}

void fs_sb_adds(sbuf *b, const char *s)
{
	fs_sb_add(b, s, strlen(s));
}

void fs_sb_printf(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	char small[256];
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof small) {
		fs_sb_add(b, small, (size_t)n);
		return;
	}
	if (fs_sb_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

char *fs_sb_take(sbuf *b, size_t *len)
{
	char *p = b->p;
	if (b->oom) {
		free(p);
		fs_sb_init(b);
		*len = 0;
		return NULL;
	}
	if (!p) {
		p = calloc(1, 1);
		*len = 0;
	} else {
		*len = b->len;
	}
	fs_sb_init(b);
	return p;
}

/* ---------------------------------------------------------------- JSON */

void fs_sb_json_string(sbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	fs_sb_add(b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		fs_sb_add(b, s + run, i - run);
		run = i + 1;
		char esc[8];
		switch (c) {
		case '"': fs_sb_add(b, "\\\"", 2); break;
		case '\\': fs_sb_add(b, "\\\\", 2); break;
		case '\n': fs_sb_add(b, "\\n", 2); break;
		case '\r': fs_sb_add(b, "\\r", 2); break;
		case '\t': fs_sb_add(b, "\\t", 2); break;
		default:
			esc[0] = '\\';
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			fs_sb_add(b, esc, 6);
		}
	}
	fs_sb_add(b, s + run, n - run);
	fs_sb_add(b, "\"", 1);
}
