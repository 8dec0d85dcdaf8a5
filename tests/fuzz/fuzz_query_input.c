/*
 * tests/fuzz/fuzz_query_input.c - a query's input grammar
 * (engine/codec/query.c): the input as .fvecs rows (vecfs_fvecs_rows) and
 * as text, each line through vecfs_query_line_parse: a vector's numbers
 * are finite and within bounds, options are within theirs, a refusal
 * says why; and the whole input gathered (vecfs_query_input_parse), its
 * copy equal to it, every vector's line one of the input's; and the text
 * cut after a line near its middle, the two pieces parsed apart and joined
 * (vecfs_query_input_append), or the tail taken in order where that
 * declines, the same as the text parsed whole.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vecfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void split_same(const char *buf, size_t size)
{
	const char *nl = size > 1 ? memchr(buf + size / 2, '\n', size - size / 2) : NULL;
	if (!nl)
		return;
	size_t cut = (size_t)(nl - buf) + 1;
	vecfs_query_input whole, head, tail;
	char w1[256] = "", w2[256] = "", w3[8];
	memset(&whole, 0, sizeof whole);
	memset(&head, 0, sizeof head);
	memset(&tail, 0, sizeof tail);
	int r1 = vecfs_query_input_text(&whole, buf, size, w1, sizeof w1);
	int r2 = vecfs_query_input_text(&head, buf, cut, w2, sizeof w2), j = 0;
	if (r2 == 0 && vecfs_query_input_text(&tail, buf + cut, size - cut, w3, sizeof w3) == 0)
		j = vecfs_query_input_append(&head, &tail);
	if (r2 == 0 && j == 0)
		r2 = vecfs_query_input_text(&head, buf + cut, size - cut, w2, sizeof w2);
	if (r1 != -ENOMEM && r2 != -ENOMEM && j >= 0 &&
	    (r1 != r2 || strcmp(w1, w2) || whole.lines != head.lines || whole.nq != head.nq ||
	     whole.opts.k != head.opts.k ||
	     (whole.nq && (whole.dim != head.dim ||
			   memcmp(whole.vecs, head.vecs, whole.nq * whole.dim * sizeof(float)) ||
			   memcmp(whole.vline, head.vline, whole.nq * sizeof(unsigned))))))
		abort();
	vecfs_query_input_free(&whole);
	vecfs_query_input_free(&head);
	vecfs_query_input_free(&tail);
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

	split_same(buf, size);

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
