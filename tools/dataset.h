/*
 * Data sets in TEXMEX format for the tools: DIR/base.fvecs, DIR/query.fvecs,
 * DIR/gt.ivecs and the `metric:` line of DIR/README.md.  Errors are reported
 * with tool_fail (toolutil.h).
 */
#ifndef VECFS_DATASET_H
#define VECFS_DATASET_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "toolutil.h"
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

/* ---------------------------------------------------------------- tools that measure a store built from a data set */

/* The options they all take: DIR, --metric, --queries, --store, --keep,
 * --json, --help (-h). */
struct ds_opts {
	const char *dir;
	const char *store;     /* --store PATH; NULL: a temporary store */
	int have_metric;       /* --metric given */
	vecfs_metric metric;
	size_t queries;        /* --queries Q: the first Q (0: all) */
	int keep, json, help;
};

/* Parse argv (tool_parse_sets()): the tool's own options (table, apply,
 * ctx) and the common ones into *common, over what the tool set before
 * (its defaults).  0 or -EINVAL, after a message on stderr. */
int ds_parse_args(int argc, char **argv, const struct tool_opt *table, size_t n,
		  tool_apply_fn apply, void *ctx, struct ds_opts *common);

/* The data set such a tool loads. */
struct ds_data {
	char name[256];          /* the last component of DIR */
	vecfs_metric metric;     /* ds_pick_metric() */
	const char *metric_from;
	struct ds_vecs base, query;
};

/* Its name, metric, DIR/base.fvecs and the first --queries rows of
 * DIR/query.fvecs (ds_load_base_query()). */
int ds_load(const struct ds_opts *o, struct ds_data *d);
void ds_data_free(struct ds_data *d);

/* A store the tool makes. */
struct ds_store {
	const char *label;     /* "churned": in its messages, its progress lines
				* and its temporary directory's name; NULL:
				* the tool's one store */
	char dir[PATH_MAX];
	int is_temp;           /* made in $TMPDIR: removed at the close */
	vecfs *v;
	uint64_t gen;          /* the generation ds_store_build() built */
	double load_s, build_s; /* the seconds its rows and its build took */
};

/* A new store: its directory (tool_store_dir(path, s->label)), opened,
 * its configuration read into *cfg with dim, metric and auto_build = 0
 * (nothing builds in the background) set, to be completed and set by
 * ds_store_config(). */
int ds_store_create(struct ds_store *s, const char *path, uint32_t dim, vecfs_metric metric,
		    vecfs_config *cfg);
/* Set *cfg and read back what is stored. */
int ds_store_config(struct ds_store *s, vecfs_config *cfg);
/* vecfs_build of one generation into s->gen, with a progress line (the
 * label, or "build"), timed in s->build_s; a failure or an interrupt is
 * reported. */
int ds_store_build(struct ds_store *s);
/* Query qi of d, one vecfs_search() call on s; *ns (unless NULL): its
 * time.  A failure is reported (naming the query and s's label). */
int ds_search(const struct ds_store *s, const struct ds_data *d, size_t qi,
	      const vecfs_query_opts *qo, vecfs_results **r, uint64_t *ns);
/* Close it; a temporary one is removed, or with keep kept and its path
 * printed on stderr. */
void ds_store_close(struct ds_store *s, int keep);

#endif
