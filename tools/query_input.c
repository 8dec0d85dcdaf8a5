/* The input of a query, as query/ID/in takes it; see query_input.h. */
#include "query_input.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 1 when the whole input is fvecs rows of one dimension (then parsed),
 * 0 when it is not, -ENOMEM. */
static int parse_fvecs(const char *buf, size_t len, query_input *qi)
{
	const unsigned char *p = (const unsigned char *)buf;
	if (len < 8)
		return 0;
	uint32_t d = le32(p);
	size_t row = 4 + 4 * (size_t)d;
	if (d == 0 || d > VECFS_DIM_MAX || len % row)
		return 0;
	for (size_t o = 0; o < len; o += row)
		if (le32(p + o) != d)
			return 0;
	qi->nq = len / row;
	qi->dim = d;
	if (!(qi->vecs = malloc(qi->nq * d * sizeof(float))))
		return -ENOMEM;
	for (size_t r = 0; r < qi->nq; r++)
		memcpy(qi->vecs + r * d, p + r * row + 4, 4 * (size_t)d);
	return 1;
}

static int is_sep(char c)
{
	return c == ' ' || c == '\t' || c == ',';
}

/* The next token of s[*pos..n) (separators skipped): its length, 0 at the end. */
static size_t token(const char *s, size_t n, size_t *pos, const char **t)
{
	while (*pos < n && is_sep(s[*pos]))
		(*pos)++;
	*t = s + *pos;
	while (*pos < n && !is_sep(s[*pos]))
		(*pos)++;
	return (size_t)(s + *pos - *t);
}

/* One line of text: blank, comment, options or a vector. */
static int parse_line(const char *s, size_t n, query_input *qi, size_t *cap, char *why,
		      size_t wl)
{
	while (n && (s[0] == ' ' || s[0] == '\t'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		n--;
	if (n == 0 || s[0] == '#')
		return 0;
	const char *t;
	size_t pos = 0, tl;
	if (memchr(s, '=', n)) {
		const char *filter = qi->opts.filter;
		if (vecfs_query_opts_parse(s, n, &qi->opts, why, wl))
			return -EINVAL;
		if (qi->opts.filter != filter) { /* it points into the line: kept */
			char *f = malloc(qi->opts.filter_len + 1);
			if (!f)
				return -ENOMEM;
			memcpy(f, qi->opts.filter, qi->opts.filter_len);
			f[qi->opts.filter_len] = 0;
			free(qi->filter);
			qi->filter = f;
			qi->opts.filter = f;
		}
		return 0;
	}
	int bracket = s[0] == '[';
	if (bracket) {
		if (s[n - 1] != ']' || n < 2) {
			snprintf(why, wl, "'[' without a closing ']'");
			return -EINVAL;
		}
		s++;
		n -= 2;
	}
	if (qi->nq == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		size_t d = qi->nq ? qi->dim : VECFS_DIM_MAX;
		float *nv = realloc(qi->vecs, nc * d * sizeof(float));
		if (!nv)
			return -ENOMEM;
		qi->vecs = nv;
		*cap = nc;
	}
	float *row = qi->vecs + qi->nq * (qi->nq ? qi->dim : 0);
	uint32_t cnt = 0, limit = qi->nq ? qi->dim : VECFS_DIM_MAX;
	while ((tl = token(s, n, &pos, &t))) {
		if (cnt == limit) {
			if (qi->nq)
				snprintf(why, wl, "more than %u numbers, the vectors before have %u",
					 limit, limit);
			else
				snprintf(why, wl, "more than %u numbers", limit);
			return -EINVAL;
		}
		float x;
		if (vecfs_parse_float(t, tl, &x) || !isfinite(x)) {
			snprintf(why, wl, "'%.*s' is not a finite number", (int)(tl > 40 ? 40 : tl), t);
			return -EINVAL;
		}
		row[cnt++] = x;
	}
	if (cnt == 0 && !bracket)
		return 0; /* separators only */
	if (cnt == 0) {
		snprintf(why, wl, "no numbers in '[ ]'");
		return -EINVAL;
	}
	if (qi->nq && cnt != qi->dim) {
		snprintf(why, wl, "%u numbers, the vectors before have %u", cnt, qi->dim);
		return -EINVAL;
	}
	if (!qi->nq) { /* the first vector fixes the row size */
		qi->dim = cnt;
		float *nv = realloc(qi->vecs, *cap * cnt * sizeof(float));
		if (nv)
			qi->vecs = nv;
	}
	qi->nq++;
	return 0;
}

int query_input_parse(const char *buf, size_t len, query_input *qi, char *why, size_t wl)
{
	memset(qi, 0, sizeof *qi);
	why[0] = 0;
	int rc = parse_fvecs(buf, len, qi);
	if (rc < 0)
		return rc;
	size_t cap = 0;
	for (size_t pos = 0; rc == 0 && pos < len;) {
		const char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;
		pos += n + (nl != NULL);
		qi->line++;
		rc = parse_line(s, n, qi, &cap, why, wl);
	}
	if (rc < 0)
		return rc;
	qi->line = 0;
	if (qi->nq == 0) {
		snprintf(why, wl, len ? "no query vector" : "no query vector (empty)");
		return -EINVAL;
	}
	return 0;
}

void query_input_free(query_input *qi)
{
	free(qi->vecs);
	free(qi->filter);
	qi->vecs = NULL;
	qi->filter = NULL;
	qi->opts.filter = NULL;
}
