/*
 * vecfs-filterbench - filtered search: recall and speed by the share of
 * records a filter matches.
 *
 * Reads DIR/base.fvecs and DIR/query.fvecs (TEXMEX format), loads the base
 * into a fresh store under keys "0".."N-1", each row with the payload
 * {"r": R, "c": "cX"}, R a fixed permutation of the rows taken mod 10000,
 * and builds one generation.  For each share s the filter {"r": {"$lt":
 * 10000 s}} matches s of the records.  The exact filtered top k of each
 * query (mode exact) is the truth; the index search with the same filter is
 * scored against it (recall@k by distance, ties count) and must return
 * min(k, matches) results.  Every search is one query per call on one
 * thread; QPS is queries over the time spent in vecfs_search.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dataset.h"
#include "toolutil.h"
#include "vecfs.h"

#define PROG "vecfs-filterbench"
#define ERRLEN 256
#define LOAD_BATCH 10000
#define BUCKETS 10000

static const char usage_text[] =
	"usage: " PROG " DIR [options]\n"
	"\n"
	"Recall and QPS of filtered searches over DIR/base.fvecs and\n"
	"DIR/query.fvecs, for filters matching 50%, 10%, 1%, 0.1% and 0.01% of\n"
	"the records, next to the unfiltered search and the exact filtered scan.\n"
	"\n"
	"options:\n"
	"  --queries Q       use the first Q queries (default 200)\n"
	"  --exact-queries Q time the exact scans on the first Q of them\n"
	"                    (default 50; the truth is taken for all)\n"
	"  --k K             results per query (default 10)\n"
	"  --store PATH      keep the loaded store at PATH; when PATH already\n"
	"                    holds the base, it is queried as it is\n"
	"  --help            show this help\n"
	"\n"
	"Columns: share, the filter's share of the records; matches, how many\n"
	"records it matches; recall, of the exact filtered top k; short, queries\n"
	"that returned fewer than min(k, matches); ann_QPS and p50_us, the index\n"
	"search with the filter, after one untimed query that finds its set\n"
	"(the store keeps it for the queries that repeat the filter); cold_QPS,\n"
	"the same with a filter text of its own for each query (the same\n"
	"records match): each finds its set anew; exact_QPS, the exact filtered scan, cold; passed, the stats'\n"
	"filter_passed of the last query; tested, its filter_tested in a cold\n"
	"query (the payloads tested to find the set: the payload index's\n"
	"candidates, or every record when it cannot narrow the filter).\n";

struct options {
	const char *dir, *store;
	size_t queries, exact_queries;
	uint64_t k;
	int help;
};

enum { OPT_QUERIES, OPT_EXACTQ, OPT_K, OPT_STORE, OPT_HELP };

static const struct tool_opt opt_table[] = {
	{"--queries", 1, OPT_QUERIES}, {"--exact-queries", 1, OPT_EXACTQ},
	{"--k", 1, OPT_K},             {"--store", 1, OPT_STORE},
	{"--help", 0, OPT_HELP},       {"-h", 0, OPT_HELP},
};

static int apply_opt(void *ctx, const struct tool_opt *spec, const char *val)
{
	struct options *o = ctx;
	uint64_t u;
	switch (spec->id) {
	case OPT_QUERIES:
	case OPT_EXACTQ:
		if (tool_parse_uint(val, 1, 1000000, &u))
			return 1;
		*(spec->id == OPT_QUERIES ? &o->queries : &o->exact_queries) = (size_t)u;
		return 0;
	case OPT_K:
		return tool_parse_uint(val, 1, 1000, &o->k);
	case OPT_STORE:
		o->store = val;
		return 0;
	case OPT_HELP:
		o->help = 1;
		return 0;
	}
	return 1;
}

static uint32_t bucket(size_t row)
{
	return (uint32_t)((row * 2654435761u) % BUCKETS);
}

static int load(vecfs *v, const struct ds_vecs *base)
{
	vecfs_row *rows = calloc(LOAD_BATCH, sizeof *rows);
	char (*keys)[24] = calloc(LOAD_BATCH, sizeof *keys);
	char (*pay)[48] = calloc(LOAD_BATCH, sizeof *pay);
	char err[ERRLEN] = "";
	int rc = 0;
	if (!rows || !keys || !pay)
		rc = -ENOMEM;
	for (size_t off = 0; rc == 0 && off < base->n; off += LOAD_BATCH) {
		size_t m = base->n - off < LOAD_BATCH ? base->n - off : LOAD_BATCH;
		for (size_t i = 0; i < m; i++) {
			size_t r = off + i;
			rows[i].keylen = (size_t)snprintf(keys[i], sizeof keys[i], "%zu", r);
			rows[i].key = keys[i];
			rows[i].vec = (const float *)base->data + r * base->dim;
			rows[i].payload_len = (size_t)snprintf(pay[i], sizeof pay[i],
							       "{\"r\": %u, \"c\": \"c%zu\"}",
							       bucket(r), r % 7);
			rows[i].payload = pay[i];
		}
		rc = vecfs_put(v, rows, m, base->dim, NULL, err, sizeof err);
	}
	free(rows);
	free(keys);
	free(pay);
	return rc ? tool_fail(rc, err, "%s", "loading the base") : 0;
}

typedef struct run {
	double qps, p50_us;
	vecfs_results **res; /* one a query */
	uint64_t passed, tested;
} run;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Each of the first nq queries alone, keeping the results when asked;
 * cold: each query's filter a text of its own (the same records match), so
 * that none finds the set of another in the store's cache. */
static int timed(vecfs *v, const struct ds_vecs *q, size_t nq, const vecfs_query_opts *o,
		 run *out, int keep, int cold)
{
	double *lat = malloc(nq * sizeof(double)), total = 0;
	char err[ERRLEN] = "";
	if (!lat)
		return -ENOMEM;
	out->res = keep ? calloc(nq, sizeof(vecfs_results *)) : NULL;
	for (size_t i = 0; i < nq; i++) {
		vecfs_results *r;
		vecfs_query_opts qo = *o;
		char text[128];
		if (cold) {
			qo.filter_len = (size_t)snprintf(text, sizeof text, "{\"$and\": [%.*s, {\"c\": {\"$ne\": \"q%zu\"}}]}",
							 (int)o->filter_len, o->filter, i);
			qo.filter = text;
		}
		uint64_t t0 = tool_now_ns();
		int rc = vecfs_search(v, (const float *)q->data + i * q->dim, 1, q->dim, &qo, &r, err,
				      sizeof err);
		lat[i] = tool_seconds_since(t0);
		if (rc) {
			free(lat);
			return tool_fail(rc, err, "%s", "search");
		}
		total += lat[i];
		out->passed = r->explain.filter_passed;
		out->tested = r->explain.filter_tested;
		if (out->res)
			out->res[i] = r;
		else
			vecfs_results_free(r);
	}
	qsort(lat, nq, sizeof(double), cmp_double);
	out->qps = (double)nq / total;
	out->p50_us = lat[nq / 2] * 1e6;
	free(lat);
	return 0;
}

/* recall@k of a's results against the truth t's: the hits within t's k-th
 * distance (ties count). */
static double recall(const run *t, const run *a, size_t nq)
{
	size_t hits = 0, want = 0;
	for (size_t i = 0; i < nq; i++) {
		const vecfs_results *e = t->res[i], *r = a->res[i];
		if (!e->count[0])
			continue;
		float kth = e->hits[0][e->count[0] - 1].distance;
		for (size_t j = 0; j < r->count[0]; j++)
			hits += r->hits[0][j].distance <= kth + 1e-6f * (1 + fabsf(kth));
		want += e->count[0];
	}
	return want ? (double)hits / (double)want : 1.0;
}

static void run_free(run *r, size_t nq)
{
	for (size_t i = 0; r->res && i < nq; i++)
		vecfs_results_free(r->res[i]);
	free(r->res);
	r->res = NULL;
}

int main(int argc, char **argv)
{
	struct options o = {.queries = 200, .exact_queries = 50, .k = 10};
	struct ds_vecs base = {0}, q = {0};
	char err[ERRLEN] = "", tmp[] = "/tmp/vecfs-filterbench-XXXXXX";
	static const double shares[] = {0.5, 0.1, 0.05, 0.02, 0.01, 0.001, 0.0001};
	vecfs *v = NULL;
	vecfs_stats st;
	int rc;

	tool_init(PROG, NULL);
	if (tool_parse_args(argc, argv, opt_table, sizeof opt_table / sizeof opt_table[0],
			    apply_opt, &o, &o.dir, &o.help))
		return 2;
	if (o.help) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (ds_load_base_query(o.dir, o.queries, &base, &q))
		return 2;
	if (o.exact_queries > q.n)
		o.exact_queries = q.n;
	const char *path = o.store;
	if (!path && !(path = mkdtemp(tmp)))
		return tool_fail(-errno, NULL, "%s", "mkdtemp");
	if ((rc = vecfs_open(path, &v, err, sizeof err)))
		return tool_fail(rc, err, "opening %s", path);
	if ((rc = vecfs_stats_get(v, &st)))
		return tool_fail(rc, NULL, "%s", "stats");
	if (st.records != base.n || !st.active) {
		vecfs_config c;
		vecfs_config_get(v, &c);
		c.auto_build = 0;
		if ((rc = vecfs_config_set(v, &c, err, sizeof err)))
			return tool_fail(rc, err, "%s", "config");
		uint64_t t0 = tool_now_ns(), g;
		if (load(v, &base))
			return 2;
		double ls = tool_seconds_since(t0);
		t0 = tool_now_ns();
		if ((rc = vecfs_build(v, 1, &g, NULL, NULL, err, sizeof err)))
			return tool_fail(rc, err, "%s", "build");
		printf("loaded %zu x %u in %.1f s, built in %.1f s\n", base.n, base.dim, ls,
		       tool_seconds_since(t0));
	}
	vecfs_config c;
	vecfs_config_get(v, &c);
	run plain, plain_exact;
	vecfs_query_opts po = {.k = (uint32_t)o.k};
	if (timed(v, &q, q.n, &po, &plain, 0, 0) || timed(v, &q, q.n, &po, &plain, 1, 0))
		return 2; /* (the first pass reads the store into memory) */
	po.exact = 1;
	if (timed(v, &q, q.n, &po, &plain_exact, 1, 0))
		return 2;
	printf("%zu queries, k %llu, nprobe %u: unfiltered recall %.4f ann_QPS %.0f p50_us %.0f, "
	       "exact_QPS %.1f\n", q.n, (unsigned long long)o.k, c.nprobe,
	       recall(&plain_exact, &plain, q.n), plain.qps, plain.p50_us, plain_exact.qps);
	run_free(&plain, q.n);
	run_free(&plain_exact, q.n);
	printf("%8s %8s %7s %6s %9s %8s %9s %10s %8s %8s\n", "share", "matches", "recall", "short",
	       "ann_QPS", "p50_us", "cold_QPS", "exact_QPS", "passed", "tested");
	int bad = 0;
	for (size_t si = 0; si < sizeof shares / sizeof shares[0]; si++) {
		char filter[64];
		unsigned t = (unsigned)lround(shares[si] * BUCKETS);
		snprintf(filter, sizeof filter, "{\"r\": {\"$lt\": %u}}", t);
		size_t matches = 0;
		for (size_t i = 0; i < base.n; i++)
			matches += bucket(i) < t;
		vecfs_query_opts fo = {.k = (uint32_t)o.k, .filter = filter, .filter_len = strlen(filter)};
		run ex, ann, ex_t, cold;
		fo.exact = 1;
		if (timed(v, &q, q.n, &fo, &ex, 1, 0) ||
		    timed(v, &q, o.exact_queries, &fo, &ex_t, 0, 1))
			return 2;
		fo.exact = 0;
		if (timed(v, &q, 1, &fo, &ann, 0, 0)) /* the first finds the set */
			return 2;
		if (timed(v, &q, q.n, &fo, &ann, 1, 0) ||
		    timed(v, &q, o.exact_queries, &fo, &cold, 0, 1))
			return 2;
		size_t shortq = 0, need = matches < o.k ? matches : o.k;
		for (size_t i = 0; i < q.n; i++) {
			if (ex.res[i]->count[0] != need)
				bad = 1; /* the exact scan is the truth: it must be whole */
			shortq += ann.res[i]->count[0] < need;
		}
		bad |= shortq > 0;
		printf("%7.2f%% %8zu %7.4f %6zu %9.0f %8.0f %9.1f %10.1f %8llu %8llu\n",
		       shares[si] * 100, matches, recall(&ex, &ann, q.n), shortq, ann.qps,
		       ann.p50_us, cold.qps, ex_t.qps, (unsigned long long)ann.passed,
		       (unsigned long long)cold.tested);
		run_free(&ex, q.n);
		run_free(&ann, q.n);
	}
	vecfs_close(v);
	if (!o.store)
		tool_remove_tree(path);
	free(base.data);
	free(q.data);
	return bad;
}
