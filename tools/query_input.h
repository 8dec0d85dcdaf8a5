/*
 * The input of a query, as a mount's query/ID/in takes it: option lines
 * (`k=10 nprobe=0 recall=0.9 refine=10 mode=exact filter={...}`, read by
 * the library's vecfs_query_opts_parse()) and one vector a line (numbers separated by
 * spaces, tabs or commas, optionally in [ ]), blank and `#` lines ignored;
 * or binary fvecs rows (int32 dim, then dim float32), when every row
 * header of the whole input holds the same dimension.
 */
#ifndef VECFS_QUERY_INPUT_H
#define VECFS_QUERY_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "vecfs.h"

#define QUERY_INPUT_MAX ((size_t)256 << 20) /* as one `in` of a mount */

typedef struct query_input {
	vecfs_query_opts opts;
	char *filter;    /* opts.filter's text (malloc'd), or NULL */
	float *vecs;     /* nq x dim */
	size_t nq;
	uint32_t dim;
	unsigned line;   /* of text input: the line a failure is on (0: none) */
} query_input;

/* Parse buf[0..len): 0, or -EINVAL (or -ENOMEM) with the reason in why
 * (and qi->line for text).  No vector is -EINVAL too.  Free with
 * query_input_free() either way. */
int query_input_parse(const char *buf, size_t len, query_input *qi, char *why, size_t wl);
void query_input_free(query_input *qi);

#endif
