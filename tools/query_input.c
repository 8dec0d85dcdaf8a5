/* The input of a query, as query/ID/in takes it; see query_input.h. */
#include "query_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when the whole input is fvecs rows of one dimension (then parsed),
 * 0 when it is not, -ENOMEM. */
static int parse_fvecs(const char *buf, size_t len, query_input *qi)
{
	if (!vecfs_fvecs_rows(buf, len, &qi->dim, &qi->nq, NULL))
		return 0;
	if (!(qi->vecs = malloc(qi->nq * qi->dim * sizeof(float))))
		return -ENOMEM;
	vecfs_fvecs_rows(buf, len, &qi->dim, &qi->nq, qi->vecs);
	return 1;
}

/* One line of text: blank, comment, options or a vector (the library's
 * grammar of a query's input, vecfs_query_line_parse()). */
static int parse_line(const char *s, size_t n, query_input *qi, size_t *cap, float *tmp,
		      char *why, size_t wl)
{
	const char *filter = qi->opts.filter;
	uint32_t cnt = 0;
	int rc = vecfs_query_line_parse(s, n, &qi->opts, tmp, &cnt, why, wl);
	if (rc < 0)
		return rc;
	if (rc == 1 && qi->opts.filter != filter) { /* it points into the line: kept */
		char *f = malloc(qi->opts.filter_len + 1);
		if (!f)
			return -ENOMEM;
		memcpy(f, qi->opts.filter, qi->opts.filter_len);
		f[qi->opts.filter_len] = 0;
		free(qi->filter);
		qi->filter = f;
		qi->opts.filter = f;
	}
	if (rc != 2)
		return 0;
	if (qi->nq && cnt != qi->dim) {
		snprintf(why, wl, "%u numbers, the vectors before have %u", cnt, qi->dim);
		return -EINVAL;
	}
	if (qi->nq == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		float *nv = realloc(qi->vecs, nc * cnt * sizeof(float));
		if (!nv)
			return -ENOMEM;
		qi->vecs = nv;
		*cap = nc;
	}
	qi->dim = cnt;
	memcpy(qi->vecs + qi->nq * cnt, tmp, cnt * sizeof(float));
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
	float *tmp = malloc(sizeof(float) * VECFS_DIM_MAX);
	if (!tmp)
		return -ENOMEM;
	for (size_t pos = 0; rc == 0 && pos < len;) {
		const char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;
		pos += n + (nl != NULL);
		qi->line++;
		rc = parse_line(s, n, qi, &cap, tmp, why, wl);
	}
	free(tmp);
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
