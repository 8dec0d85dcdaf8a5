/*
 * Data sets in TEXMEX format for the tools: DIR/base.fvecs, DIR/query.fvecs,
 * DIR/gt.ivecs and the `metric:` line of DIR/README.md.  Errors are reported
 * with tool_fail (toolutil.h).
 */
#ifndef VECFS_DATASET_H
#define VECFS_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "vecfs.h"

/* Rows of a .fvecs or .ivecs file: n rows of dim 4-byte values. */
struct ds_vecs {
	size_t n;
	uint32_t dim;
	void *data;   /* float (fvecs) or int32_t (ivecs); free() it */
};

/* "dir/name" into buf; -ENAMETOOLONG (reported) if it does not fit. */
int ds_join_path(char *buf, size_t cap, const char *dir, const char *name);

/* Load at most `limit` rows (0 = all) of a TEXMEX file. */
int ds_load_vecs(const char *path, size_t limit, struct ds_vecs *m);

/* The first `metric:` line of DIR/README.md naming a known metric, e.g.
 * "metric: cosine" or "- **metric:** l2 (squared Euclidean)".  1 if found. */
int ds_readme_metric(const char *dir, vecfs_metric *out);

/* The metric to use: `given` if have_given ("--metric"), else README.md's,
 * else l2 ("default"); *from names the source. */
void ds_pick_metric(const char *dir, int have_given, vecfs_metric given,
		    vecfs_metric *out, const char **from);

/* The data set's name: the last component of dir. */
void ds_name(const char *dir, char *out, size_t cap);

/* DIR/base.fvecs and the first `queries` rows (0 = all) of DIR/query.fvecs,
 * which must have the base's dimension. */
int ds_load_base_query(const char *dir, size_t queries, struct ds_vecs *base,
		       struct ds_vecs *query);

/* A hit's key as a row index: decimal digits only, at most max_digits of
 * them (0 = no limit) and no more than UINT64_MAX. */
int ds_key_row(const vecfs_hit *h, size_t max_digits, uint64_t *out);

#endif
