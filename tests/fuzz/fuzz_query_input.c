/*
 * tests/fuzz/fuzz_query_input.c - a query's input grammar
 * (engine/codec/query.c): the input as .fvecs rows (vecfs_fvecs_rows) and
 * as text, each line through vecfs_query_line_parse: a vector's numbers
 * are finite and within bounds, options are within theirs, a refusal
 * says why; and the whole input gathered (vecfs_query_input_parse), its
 * copy equal to it, every vector's line one of the input's; and the text
 * cut after lines into 2-8 pieces as the daemon cuts it, the pieces parsed
 * apart and joined (vecfs_query_input_append), or the rest taken in order
 * where that declines, the same as the text parsed whole (vectors, lines,
 * options, filter, error and its line), with and without a store's
 * dimension.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vecfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether two inputs took the same: vectors, their lines, options, filter. */
static int same_input(const vecfs_query_input *a, const vecfs_query_input *b)
{
	vecfs_query_opts oa = a->opts, ob = b->opts;
	if ((a->filter == NULL) != (b->filter == NULL) || a->filter_line != b->filter_line ||
	    oa.filter_len != ob.filter_len ||
	    (a->filter && memcmp(a->filter, b->filter, oa.filter_len + 1)))
		return 0;
	oa.filter = ob.filter = NULL;
	if (memcmp(&oa, &ob, sizeof oa) || a->lines != b->lines || a->nq != b->nq)
		return 0;
	return !a->nq || (a->dim == b->dim &&
			  !memcmp(a->vecs, b->vecs, a->nq * a->dim * sizeof(float)) &&
			  !memcmp(a->vline, b->vline, a->nq * sizeof(unsigned)));
}

/* The text cut after lines into 2-8 pieces as fs/query.c's parse_text()
 * cuts it (at the first newline from each i * size / np on), from a
 * store's dimension or none, the pieces parsed apart and joined in order
 * (vecfs_query_input_append()), the rest taken in order from the first
 * piece that fails or is declined: the same as the text parsed whole. */
#define PIECES_MAX 8
static void split_same(const char *buf, size_t size, uint32_t want_dim)
{
	size_t np = 2 + size % (PIECES_MAX - 1), at[PIECES_MAX + 1], n = 0;
	at[n++] = 0;
	while (n < np && at[n - 1] < size) {
		size_t aim = n * (size / np);
		aim = aim > at[n - 1] ? aim : at[n - 1];
		const char *nl = aim < size ? memchr(buf + aim, '\n', size - aim) : NULL;
		if (!nl || (size_t)(nl - buf) + 1 >= size)
			break;
		at[n++] = (size_t)(nl - buf) + 1;
	}
	if (n < 2)
		return;
	at[n] = size;
	vecfs_query_input whole, head, piece[PIECES_MAX];
	char w1[256] = "", w2[256] = "", w3[8];
	memset(&whole, 0, sizeof whole);
	memset(&head, 0, sizeof head);
	memset(piece, 0, sizeof piece);
	whole.want_dim = head.want_dim = want_dim;
	int r1 = vecfs_query_input_text(&whole, buf, size, w1, sizeof w1);
	int r2 = vecfs_query_input_text(&head, buf, at[1], w2, sizeof w2), pr[PIECES_MAX];
	for (size_t i = 1; i < n; i++)
		pr[i] = vecfs_query_input_text(&piece[i], buf + at[i], at[i + 1] - at[i], w3,
					       sizeof w3);
	for (size_t i = 1; i < n && r2 == 0; i++) {
		int j = pr[i] == 0 ? vecfs_query_input_append(&head, &piece[i]) : 0;
		if (j < 0) {
			r2 = -ENOMEM;
		} else if (j == 0) {
			r2 = vecfs_query_input_text(&head, buf + at[i], size - at[i], w2, sizeof w2);
			break;
		}
	}
	if (r1 != -ENOMEM && r2 != -ENOMEM &&
	    (r1 != r2 || strcmp(w1, w2) || !same_input(&whole, &head)))
		abort();
	vecfs_query_input_free(&whole);
	vecfs_query_input_free(&head);
	for (size_t i = 1; i < n; i++)
		vecfs_query_input_free(&piece[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	uint32_t dim = 0;
	size_t rows = 0;
	if (vecfs_fvecs_rows(buf, size, &dim, &rows, NULL)) {
		if (dim == 0 || dim > VECFS_DIM_MAX || rows * (4 + 4 * (size_t)dim) != size)
			abort();
		float *v = malloc(rows * dim * sizeof(float));
		if (v && vecfs_fvecs_rows(buf, size, &dim, &rows, v) != 1)
			abort();
		free(v);
	}
	static float vec[VECFS_DIM_MAX];
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	for (size_t pos = 0; pos < size;) {
		const char *s = buf + pos, *nl = memchr(s, '\n', size - pos);
		size_t n = nl ? (size_t)(nl - s) : size - pos;
		pos += n + (nl != NULL);
		char why[256] = "";
		uint32_t cnt = 0;
		int rc = vecfs_query_line_parse(s, n, &o, vec, &cnt, why, sizeof why);
		if (rc < 0 && (rc != -EINVAL || !why[0]))
			abort();
		if (rc == 2) {
			if (cnt == 0 || cnt > VECFS_DIM_MAX)
				abort();
			for (uint32_t i = 0; i < cnt; i++)
				if (!isfinite(vec[i]))
					abort();
		}
		if (o.k > VECFS_K_MAX || o.refine > VECFS_REFINE_MAX)
			abort();
		if (o.filter && rc == 1 && (o.filter < s || o.filter + o.filter_len > s + n))
			abort();
		o.filter = NULL; /* it pointed into this line */
		o.filter_len = 0;
	}

	split_same(buf, size, 0);
	if (size > 1) /* a store's dimension: 1-8, from the first byte */
		split_same(buf + 1, size - 1, 1 + (uint8_t)buf[0] % 8);

	vecfs_query_input qi, cp;
	memset(&qi, 0, sizeof qi);
	char why[256] = "";
	unsigned line = 0;
	int rc = vecfs_query_input_parse(&qi, buf, size, &line, why, sizeof why);
	if (rc < 0 && (!why[0] || (rc != -EINVAL && rc != -ENOMEM)))
		abort();
	if (rc == 0) {
		if (qi.nq == 0 || qi.dim == 0 || qi.dim > VECFS_DIM_MAX || line)
			abort();
		for (size_t i = 0; qi.vline && i < qi.nq; i++)
			if (qi.vline[i] == 0 || qi.vline[i] > qi.lines || (i && qi.vline[i] <= qi.vline[i - 1]))
				abort();
		if (qi.filter && (qi.opts.filter != qi.filter || qi.filter[qi.opts.filter_len] ||
				  !qi.filter_line || qi.filter_line > qi.lines))
			abort();
		if (vecfs_query_input_copy(&cp, &qi) == 0) {
			if (cp.nq != qi.nq || cp.dim != qi.dim || cp.lines != qi.lines ||
			    memcmp(cp.vecs, qi.vecs, qi.nq * qi.dim * sizeof(float)) ||
			    (qi.vline && memcmp(cp.vline, qi.vline, qi.nq * sizeof(unsigned))) ||
			    (qi.filter && (cp.opts.filter != cp.filter || cp.opts.filter_len != qi.opts.filter_len ||
					   memcmp(cp.filter, qi.filter, qi.opts.filter_len + 1))))
				abort();
			vecfs_query_input_free(&cp);
		}
	} else if (rc == -EINVAL && line > qi.lines) {
		abort();
	}
	vecfs_query_input_free(&qi);
	return 0;
}
