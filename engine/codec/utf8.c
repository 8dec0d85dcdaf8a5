/*
 * engine/codec/utf8.c - strict UTF-8 (keys, payload text, filter operands).
 */
#include <stddef.h>

#include "vecfs.h"

int vecfs_utf8_valid(const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *)text;
	for (size_t i = 0; i < len;) {
		unsigned c = s[i];
		size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
			 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
		if (n == 0 || i + n > len)
			return 0;
		/* the second byte's range: where the first alone cannot tell */
		unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
		unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
		if (n > 1 && (s[i + 1] < lo || s[i + 1] > hi))
			return 0;
		for (size_t j = 2; j < n; j++)
			if ((s[i + j] & 0xC0) != 0x80)
				return 0;
		i += n;
	}
	return 1;
}
