/*
 * engine/codec/query.c - a query's input as query/ID/in takes it: text
 * lines (options, vectors, blanks and comments), or binary .fvecs rows of
 * one dimension.  No I/O, no state.
 */
#include "vecfs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int vecfs_fvecs_rows(const void *buf, size_t len, uint32_t *dim, size_t *rows, float *out)
{
	const unsigned char *p = buf;
	if (len < 8)
		return 0;
	uint32_t d = le32(p);
	size_t row = 4 + 4 * (size_t)d;
	if (d == 0 || d > VECFS_DIM_MAX || len % row)
		return 0;
	size_t n = len / row;
	for (size_t r = 0; r < n; r++)
		if (le32(p + r * row) != d)
			return 0;
	for (size_t r = 0; out && r < n; r++)
		memcpy(out + r * d, p + r * row + 4, 4 * (size_t)d);
	*dim = d;
	*rows = n;
	return 1;
}

int vecfs_query_line_parse(const char *s, size_t n, vecfs_query_opts *o, float *vec,
			   uint32_t *dim, char *why, size_t wl)
{
	vf_text_trim(&s, &n);
	if (n == 0 || s[0] == '#')
		return 0;
	if (memchr(s, '=', n)) {
		int rc = vecfs_query_opts_parse(s, n, o, why, wl);
		return rc ? rc : 1;
	}
	int bracket = s[0] == '[';
	if (bracket) {
		s++;
		n--;
		vf_text_trim(&s, &n);
		if (!n || s[n - 1] != ']') {
			snprintf(why, wl, "'[' without a closing ']'");
			return -EINVAL;
		}
		n--;
		vf_text_trim(&s, &n);
	}
	uint32_t cnt = 0;
	size_t p = 0;
	while (p < n) {
		while (p < n && (s[p] == ' ' || s[p] == '\t' || s[p] == ','))
			p++;
		if (p >= n)
			break;
		size_t st = p;
		while (p < n && s[p] != ' ' && s[p] != '\t' && s[p] != ',')
			p++;
		if (cnt >= VECFS_DIM_MAX) {
			snprintf(why, wl, "more than %d numbers", VECFS_DIM_MAX);
			return -EINVAL;
		}
		int fr = vecfs_parse_float(s + st, p - st, &vec[cnt]);
		if (fr == -ENOMEM) {
			snprintf(why, wl, "out of memory");
			return -ENOMEM;
		}
		if (fr || !isfinite(vec[cnt])) {
			snprintf(why, wl, "'%.*s' is not a %s", (int)(p - st > 40 ? 40 : p - st), s + st,
				 fr == -ERANGE ? "float32 (overflow)" : fr ? "number" : "finite number");
			return -EINVAL;
		}
		cnt++;
	}
	if (cnt == 0 && bracket) {
		snprintf(why, wl, "no numbers in '[ ]'");
		return -EINVAL;
	}
	if (cnt == 0)
		return 0; /* separators only */
	*dim = cnt;
	return 2;
}
