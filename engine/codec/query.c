/*
 * engine/codec/query.c - a query's input as query/ID/in takes it: text
 * lines (options, vectors, blanks and comments), or binary .fvecs rows of
 * one dimension; and the accumulator of a whole input
 * (vecfs_query_input).  No I/O, no state but the caller's.
 */
#include "vecfs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "number.h"
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
		size_t st = p, used;
		/* the usual number read in one pass, when a separator or the
		 * line's end follows it; else the token's end first */
		if (cnt < VECFS_DIM_MAX &&
		    (vf_decimal_fast(s + st, n - st, &vec[cnt], &used) == 0 ||
		     vf_decimal_prefix(s + st, n - st, &vec[cnt], &used) == 0) &&
		    (st + used == n || s[st + used] == ' ' || s[st + used] == '\t' ||
		     s[st + used] == ',')) {
			p = st + used;
			cnt++;
			continue;
		}
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

/* A filter= line's text, kept (o.filter pointed into the line). */
static int keep_filter(vecfs_query_input *qi, char *why, size_t wl)
{
	char *f = malloc(qi->opts.filter_len + 1);
	if (!f) {
		snprintf(why, wl, "out of memory");
		return -ENOMEM;
	}
	memcpy(f, qi->opts.filter, qi->opts.filter_len);
	f[qi->opts.filter_len] = 0;
	free(qi->filter);
	qi->filter = f;
	qi->opts.filter = f;
	qi->filter_line = qi->lines;
	return 0;
}

/* Room for nc vectors of dim numbers and their lines: 0 or -ENOMEM (qi
 * keeps what it held). */
static int resize(vecfs_query_input *qi, size_t nc, uint32_t dim)
{
	float *nv = realloc(qi->vecs, nc * dim * sizeof(float));
	if (!nv)
		return -ENOMEM;
	qi->vecs = nv;
	unsigned *nl = realloc(qi->vline, nc * sizeof(unsigned));
	if (!nl)
		return -ENOMEM;
	qi->vline = nl;
	qi->cap = nc;
	return 0;
}

/* Room for one more vector of dim numbers (and its line). */
static int reserve_one(vecfs_query_input *qi, uint32_t dim)
{
	return qi->nq < qi->cap ? 0 : resize(qi, qi->cap ? qi->cap * 2 : 16, dim);
}

/* One line (qi->lines already counts it), its numbers parsed into tmp. */
static int take_line(vecfs_query_input *qi, const char *s, size_t n, float *tmp, char *why,
		     size_t wl)
{
	const char *filter = qi->opts.filter;
	uint32_t cnt = 0;
	int rc = vecfs_query_line_parse(s, n, &qi->opts, tmp, &cnt, why, wl);
	qi->opt_lines += rc == 1;
	if (rc == 1 && qi->opts.filter != filter) /* it points into the line */
		return keep_filter(qi, why, wl);
	if (rc != 2)
		return rc < 0 ? rc : 0;
	if (qi->nq && cnt != qi->dim) {
		snprintf(why, wl, "%u numbers, the vectors before have %u", cnt, qi->dim);
		return -EINVAL;
	}
	if (!qi->nq && qi->want_dim && cnt != qi->want_dim) {
		snprintf(why, wl, "%u numbers, the store has dim %u", cnt, qi->want_dim);
		return -EINVAL;
	}
	if (qi->nq && !qi->vline) { /* after binary rows: text starts over */
		snprintf(why, wl, "text after binary rows");
		return -EINVAL;
	}
	if (reserve_one(qi, cnt)) {
		snprintf(why, wl, "out of memory");
		return -ENOMEM;
	}
	qi->dim = cnt;
	memcpy(qi->vecs + qi->nq * cnt, tmp, cnt * sizeof(float));
	qi->vline[qi->nq++] = qi->lines;
	return 0;
}

int vecfs_query_input_text(vecfs_query_input *qi, const char *buf, size_t len, char *why,
			   size_t wl)
{
	if (len == 0)
		return 0;
	float *tmp = malloc(sizeof(float) * VECFS_DIM_MAX);
	if (!tmp) {
		snprintf(why, wl, "out of memory");
		return -ENOMEM;
	}
	int rc = 0;
	for (size_t pos = 0; rc == 0 && pos < len;) {
		const char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;
		pos += n + (nl != NULL);
		qi->lines++;
		rc = take_line(qi, s, n, tmp, why, wl);
	}
	free(tmp);
	return rc;
}

int vecfs_query_input_fvecs(vecfs_query_input *qi, const void *buf, size_t len)
{
	uint32_t d;
	size_t rows;
	if (!vecfs_fvecs_rows(buf, len, &d, &rows, NULL))
		return 0;
	float *v = malloc(rows * d * sizeof(float));
	if (!v)
		return -ENOMEM;
	vecfs_fvecs_rows(buf, len, &d, &rows, v);
	free(qi->vecs);
	free(qi->vline);
	qi->vecs = v;
	qi->vline = NULL;
	qi->nq = qi->cap = rows;
	qi->dim = d;
	return 1;
}

int vecfs_query_input_parse(vecfs_query_input *qi, const void *buf, size_t len, unsigned *line,
			    char *why, size_t wl)
{
	why[0] = 0;
	*line = 0;
	int rc = vecfs_query_input_fvecs(qi, buf, len);
	if (rc < 0) {
		snprintf(why, wl, "out of memory");
		return rc;
	}
	if (rc == 0 && (rc = vecfs_query_input_text(qi, buf, len, why, wl))) {
		*line = qi->lines;
		return rc;
	}
	if (qi->nq == 0) {
		snprintf(why, wl, len ? "no query vector" : "no query vector (empty)");
		return -EINVAL;
	}
	return 0;
}

int vecfs_query_input_append(vecfs_query_input *dst, const vecfs_query_input *src)
{
	if (src->opt_lines || (src->nq && !src->vline)) /* (src's binary rows: not text) */
		return 0;
	if (src->nq) {
		uint32_t want = dst->nq ? dst->dim : dst->want_dim;
		if ((dst->nq && !dst->vline) || (want && src->dim != want))
			return 0;
		size_t nq = dst->nq + src->nq;
		if (nq > dst->cap && resize(dst, nq, src->dim))
			return -ENOMEM;
		memcpy(dst->vecs + dst->nq * src->dim, src->vecs, src->nq * src->dim * sizeof(float));
		for (size_t i = 0; i < src->nq; i++)
			dst->vline[dst->nq + i] = dst->lines + src->vline[i];
		dst->dim = src->dim;
		dst->nq = nq;
	}
	dst->lines += src->lines;
	return 1;
}

int vecfs_query_input_copy(vecfs_query_input *dst, const vecfs_query_input *src)
{
	*dst = *src;
	dst->vecs = NULL;
	dst->vline = NULL;
	dst->filter = NULL;
	dst->opts.filter = NULL;
	dst->cap = 0;
	if (src->filter) { /* its text may hold NULs: it has a length */
		if (!(dst->filter = malloc(src->opts.filter_len + 1)))
			goto oom;
		memcpy(dst->filter, src->filter, src->opts.filter_len + 1);
		dst->opts.filter = dst->filter;
	}
	if (src->nq) {
		if (!(dst->vecs = malloc(src->nq * src->dim * sizeof(float))))
			goto oom;
		memcpy(dst->vecs, src->vecs, src->nq * src->dim * sizeof(float));
		if (src->vline) {
			if (!(dst->vline = malloc(src->nq * sizeof(unsigned))))
				goto oom;
			memcpy(dst->vline, src->vline, src->nq * sizeof(unsigned));
		}
		dst->cap = src->nq;
	}
	return 0;
oom:
	vecfs_query_input_free(dst);
	return -ENOMEM;
}

unsigned vecfs_query_input_line_of(const vecfs_query_input *qi, const char *why)
{
	size_t n;
	if (!strncmp(why, "filter", 6))
		return qi->filter_line;
	if (qi->vline && sscanf(why, "query %zu", &n) == 1 && n >= 1 && n <= qi->nq)
		return qi->vline[n - 1];
	return 0;
}

void vecfs_query_input_free(vecfs_query_input *qi)
{
	free(qi->vecs);
	free(qi->vline);
	free(qi->filter);
	memset(qi, 0, sizeof *qi);
}
