/* Data sets in TEXMEX format for the tools; see dataset.h. */
#include "dataset.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "toolutil.h"

int ds_join_path(char *buf, size_t cap, const char *dir, const char *name)
{
	if ((size_t)snprintf(buf, cap, "%s/%s", dir, name) >= cap)
		return tool_fail(-ENAMETOOLONG, NULL, "%s/%s", dir, name);
	return 0;
}

static int read_rows(FILE *f, const char *path, struct ds_vecs *m)
{
	unsigned char *out = m->data;
	size_t row_bytes = (size_t)m->dim * 4;
	char detail[64];

	for (size_t i = 0; i < m->n; i++) {
		int32_t d;

		if (fread(&d, 4, 1, f) != 1 ||
		    fread(out + i * row_bytes, 4, m->dim, f) != m->dim) {
			if (ferror(f))
				return tool_fail(-EIO, NULL, "read %s", path);
			snprintf(detail, sizeof detail, "row %zu is truncated", i);
			return tool_fail(-EINVAL, detail, "read %s", path);
		}
		if (d != (int32_t)m->dim) {
			snprintf(detail, sizeof detail,
				 "row %zu has dimension %d, not %u", i, (int)d, m->dim);
			return tool_fail(-EINVAL, detail, "read %s", path);
		}
	}
	return 0;
}

int ds_load_vecs(const char *path, size_t limit, struct ds_vecs *m)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	int32_t d;
	size_t row_bytes;
	char detail[96];
	int rc;

	if (!f)
		return tool_fail(-errno, NULL, "open %s", path);
	if (fstat(fileno(f), &st)) {
		rc = tool_fail(-errno, NULL, "stat %s", path);
		goto out;
	}
	if (fread(&d, 4, 1, f) != 1 || d < 1 || d > VECFS_DIM_MAX) {
		rc = tool_fail(-EINVAL, "no valid first row", "read %s", path);
		goto out;
	}
	row_bytes = 4 + 4 * (size_t)d;
	if ((uint64_t)st.st_size % row_bytes) {
		snprintf(detail, sizeof detail,
			 "size %lld is not a multiple of the row size %zu",
			 (long long)st.st_size, row_bytes);
		rc = tool_fail(-EINVAL, detail, "read %s", path);
		goto out;
	}
	m->dim = (uint32_t)d;
	m->n = (size_t)((uint64_t)st.st_size / row_bytes);
	if (limit && m->n > limit)
		m->n = limit;
	m->data = malloc(m->n * (size_t)m->dim * 4);
	if (!m->data) {
		rc = tool_fail(-ENOMEM, NULL, "load %s", path);
		goto out;
	}
	rewind(f);
	rc = read_rows(f, path, m);
out:
	fclose(f);
	return rc;
}

int ds_readme_metric(const char *dir, vecfs_metric *out)
{
	char path[PATH_MAX], line[1024];
	FILE *f;
	int found = 0;

	if ((size_t)snprintf(path, sizeof path, "%s/README.md", dir) >= sizeof path)
		return 0;
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof line, f)) {
		const char *p = strcasestr(line, "metric:");
		char word[16];
		size_t n = 0;

		if (!p)
			continue;
		p += strlen("metric:");
		while (*p && strchr(" \t*`_\"'", *p))
			p++;
		while (isalnum((unsigned char)*p) && n + 1 < sizeof word)
			word[n++] = (char)tolower((unsigned char)*p++);
		word[n] = '\0';
		found = n > 0 && vecfs_metric_parse(word, out) == 0;
	}
	fclose(f);
	return found;
}

void ds_pick_metric(const char *dir, int have_given, vecfs_metric given,
		    vecfs_metric *out, const char **from)
{
	if (have_given) {
		*out = given;
		*from = "--metric";
	} else if (ds_readme_metric(dir, out)) {
		*from = "README.md";
	} else {
		*out = VECFS_L2;
		*from = "default";
	}
}

void ds_name(const char *dir, char *out, size_t cap)
{
	size_t end = strlen(dir), start;

	while (end > 1 && dir[end - 1] == '/')
		end--;
	start = end;
	while (start > 0 && dir[start - 1] != '/')
		start--;
	if (end - start >= cap)
		end = start + cap - 1;
	memcpy(out, dir + start, end - start);
	out[end - start] = '\0';
}

int ds_load_base_query(const char *dir, size_t queries, struct ds_vecs *base,
		       struct ds_vecs *query)
{
	char path[PATH_MAX], detail[96];
	int rc;

	if ((rc = ds_join_path(path, sizeof path, dir, "base.fvecs")) ||
	    (rc = ds_load_vecs(path, 0, base)))
		return rc;
	if ((rc = ds_join_path(path, sizeof path, dir, "query.fvecs")) ||
	    (rc = ds_load_vecs(path, queries, query)))
		return rc;
	if (query->dim != base->dim) {
		snprintf(detail, sizeof detail, "queries have dimension %u, base %u",
			 query->dim, base->dim);
		return tool_fail(-EINVAL, detail, "load %s", path);
	}
	return 0;
}

int ds_key_row(const vecfs_hit *h, size_t max_digits, uint64_t *out)
{
	uint64_t x = 0;

	if (!h->key || h->keylen == 0 || (max_digits && h->keylen > max_digits))
		return -EINVAL;
	for (size_t i = 0; i < h->keylen; i++) {
		unsigned d = (unsigned char)h->key[i] - '0';

		if (d > 9 || x > (UINT64_MAX - d) / 10)
			return -EINVAL;
		x = x * 10 + d;
	}
	*out = x;
	return 0;
}

/* ---------------------------------------------------------------- tools that measure a store built from a data set */

enum { DS_OPT_METRIC = 1000, DS_OPT_QUERIES, DS_OPT_STORE, DS_OPT_KEEP, DS_OPT_JSON, DS_OPT_HELP };

static const struct tool_opt common_table[] = {
	{ "--metric", 1, DS_OPT_METRIC }, { "--queries", 1, DS_OPT_QUERIES },
	{ "--store", 1, DS_OPT_STORE },   { "--keep", 0, DS_OPT_KEEP },
	{ "--json", 0, DS_OPT_JSON },     { "--help", 0, DS_OPT_HELP },
	{ "-h", 0, DS_OPT_HELP },
};

/* Non-zero when the value is bad. */
static int apply_common(void *ctx, const struct tool_opt *spec, const char *val)
{
	struct ds_opts *o = ctx;
	uint64_t x = 0;
	int bad;

	if (spec->id == DS_OPT_METRIC) {
		o->have_metric = 1;
		return vecfs_metric_parse(val, &o->metric) != 0;
	}
	if (spec->id == DS_OPT_QUERIES) {
		bad = tool_parse_uint(val, 1, SIZE_MAX, &x) != 0;
		o->queries = (size_t)x;
		return bad;
	}
	if (spec->id == DS_OPT_STORE) {
		o->store = val;
		return *val == '\0';
	}
	/* the flags */
	*(spec->id == DS_OPT_KEEP ? &o->keep : spec->id == DS_OPT_JSON ? &o->json : &o->help) = 1;
	return 0;
}

int ds_parse_args(int argc, char **argv, const struct tool_opt *table, size_t n,
		  tool_apply_fn apply, void *ctx, struct ds_opts *common)
{
	const struct tool_opt_set sets[] = {
		{ table, n, apply, ctx },
		{ common_table, sizeof common_table / sizeof common_table[0], apply_common, common },
	};

	return tool_parse_sets(argc, argv, sets, 2, &common->dir, &common->help);
}

int ds_load(const struct ds_opts *o, struct ds_data *d)
{
	ds_name(o->dir, d->name, sizeof d->name);
	ds_pick_metric(o->dir, o->have_metric, o->metric, &d->metric, &d->metric_from);
	return ds_load_base_query(o->dir, o->queries, &d->base, &d->query);
}

void ds_data_free(struct ds_data *d)
{
	free(d->base.data);
	free(d->query.data);
	d->base.data = d->query.data = NULL;
}

int ds_store_create(struct ds_store *s, const char *path, uint32_t dim, vecfs_metric metric,
		    vecfs_config *cfg)
{
	char err[256] = "";
	int rc;

	if ((rc = tool_store_dir(s->dir, sizeof s->dir, path, s->label, &s->is_temp)))
		return rc;
	if ((rc = vecfs_open(s->dir, &s->v, err, sizeof err)))
		return tool_fail(rc, err, "vecfs_open %s", s->dir);
	if ((rc = vecfs_config_get(s->v, cfg)))
		return tool_fail(rc, NULL, "vecfs_config_get");
	cfg->dim = dim;
	cfg->metric = metric;
	cfg->auto_build = 0;
	return 0;
}

int ds_store_config(struct ds_store *s, vecfs_config *cfg)
{
	char err[256] = "";
	int rc;

	if ((rc = vecfs_config_set(s->v, cfg, err, sizeof err)))
		return tool_fail(rc, err, "vecfs_config_set");
	if ((rc = vecfs_config_get(s->v, cfg)))
		return tool_fail(rc, NULL, "vecfs_config_get");
	return 0;
}

int ds_store_build(struct ds_store *s)
{
	struct tool_progress p;
	char err[256] = "";
	uint64_t t0;
	int rc;

	tool_progress_init(&p, s->label ? s->label : "build", NULL);
	t0 = tool_now_ns();
	rc = vecfs_build(s->v, 1, &s->gen, tool_build_progress, &p, err, sizeof err);
	s->build_s = tool_seconds_since(t0);
	tool_progress_end(&p);
	if (rc && tool_interrupted())
		return tool_report_interrupt();
	if (rc && s->label)
		return tool_fail(rc, err, "vecfs_build (%s store)", s->label);
	if (rc)
		return tool_fail(rc, err, "vecfs_build");
	return 0;
}

int ds_search(const struct ds_store *s, const struct ds_data *d, size_t qi,
	      const vecfs_query_opts *qo, vecfs_results **r, uint64_t *ns)
{
	uint64_t t0 = tool_now_ns();
	const float *q = (const float *)d->query.data + qi * d->query.dim;
	char err[256] = "";
	int rc = vecfs_search(s->v, q, 1, d->query.dim, qo, r, err, sizeof err);

	if (ns)
		*ns = tool_now_ns() - t0;
	if (rc && s->label)
		return tool_fail(rc, err, "vecfs_search (%s store, query %zu)", s->label, qi);
	if (rc)
		return tool_fail(rc, err, "vecfs_search (query %zu)", qi);
	return 0;
}

void ds_store_close(struct ds_store *s, int keep)
{
	if (s->v)
		vecfs_close(s->v);
	s->v = NULL;
	if (!s->is_temp)
		return;
	if (keep && s->label)
		tool_say("kept %s store %s", s->label, s->dir);
	else if (keep)
		tool_say("kept store %s", s->dir);
	else
		tool_remove_tree(s->dir);
	s->is_temp = 0;
}
