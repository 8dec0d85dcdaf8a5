/*
 * test_search.c - search behaviour of the vecfs library: exact scans against
 * brute force, ANN recall, delta postings, deletes, upserts, input checks,
 * assigned keys, persistence and batch queries.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <time.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handle.h"
#include "math/parallel.h"
#include "query/query.h"
#include "query/search_internal.h"
#include "query/prefetch.h"
#include "block.h"
#include "io.h"
#include "keys.h"
#include "testutil.h"
#include "vecfs.h"

/* ------------------------------------------------------------ search */

static int hits_have(const vecfs_hit *h, size_t cnt, const char *key)
{
	for (size_t i = 0; i < cnt; i++)
		if (strcmp(h[i].key, key) == 0)
			return (int)i;
	return -1;
}

/* ------------------------------------------------------------ 1. exact */

static void test_exact_equals_brute_force(void **state)
{
	fixture *f = *state;
	const vecfs_metric metrics[] = { VECFS_L2, VECFS_COSINE, VECFS_DOT };
	const uint32_t D = 24;
	const size_t N = 2500, NQ = 24, K = 15;

	for (size_t mi = 0; mi < 3; mi++) {
		vecfs_metric m = metrics[mi];
		vecfs *v = fx_open(f, vecfs_metric_name(m));
		set_config(v, D, m);
		dataset ds;
		ds_make(&ds, 1000 + mi, N, D, 20);
		put_range(v, ds.x, 0, N, D, "k");

		float *qs = malloc(NQ * D * sizeof(float));
		assert_non_null(qs);
		for (size_t i = 0; i < NQ; i++) {
			if (i % 4 == 3) /* a stored vector: its key at rank 0 */
				memcpy(qs + i * D, ds.x + (i * 97 % N) * D,
				       D * sizeof(float));
			else
				ds_fresh(&ds, qs + i * D);
		}
		for (int pass = 0; pass < 2; pass++) {
			if (pass == 1)
				build(v, 1);
			for (size_t i = 0; i < NQ; i++) {
				vecfs_results *r = search1(v, qs + i * D, D, K, 1);
				check_exact(r->hits[0], r->count[0], m, ds.x, N, D,
					    NULL, "k", qs + i * D, K);
				if (i % 4 == 3 && m != VECFS_DOT) {
					char key[32];
					snprintf(key, sizeof key, "k%zu", i * 97 % N);
					assert_string_equal(r->hits[0][0].key, key);
				}
				vecfs_results_free(r);
			}
		}
		free(qs);
		ds_free(&ds);
		fx_close(f);
	}
}

/* ------------------------------------------------------------ 2. recall */

static void test_recall_default_settings(void **state)
{
	fixture *f = *state;
	const uint32_t D = 32;
	const size_t N = 20000, NQ = 200, K = 10;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 42, N, D, 50);
	put_range(v, ds.x, 0, N, D, NULL); /* assigned keys "0".."19999" */
	assert_int_equal(stats(v).records, N);

	char err[256] = "";
	uint64_t gen = 0;
	int rc = vecfs_build(v, 1, &gen, NULL, NULL, err, sizeof err);
	if (rc != 0)
		print_message("vecfs_build: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	assert_true(gen != 0);
	assert_true(vecfs_active(v) == gen);

	float *q = malloc(D * sizeof(float));
	size_t idx[10];
	double dist[10];
	size_t found = 0;
	vecfs_explain sum;
	memset(&sum, 0, sizeof sum);
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	o.k = K;
	for (size_t i = 0; i < NQ; i++) {
		ds_fresh(&ds, q);
		vecfs_results *r = search_opts(v, q, 1, D, &o);
		assert_int_equal(r->count[0], K);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, NULL, "",
			   q);
		assert_true(r->generation == gen);
		knn_ref(VECFS_L2, ds.x, N, D, NULL, q, K, idx, dist);
		for (size_t a = 0; a < K; a++) {
			char key[32];
			snprintf(key, sizeof key, "%zu", idx[a]);
			if (hits_have(r->hits[0], r->count[0], key) >= 0)
				found++;
		}
		if (i == 0)
			print_message("explain: gen %llu probed %llu pass1 %llu/%llu "
				      "pass2 %llu/%llu reranked %llu delta %llu "
				      "uncovered %llu %llu us\n",
				      (unsigned long long)r->explain.generation,
				      (unsigned long long)r->explain.clusters_probed,
				      (unsigned long long)r->explain.pass1_scored,
				      (unsigned long long)r->explain.pass1_pruned,
				      (unsigned long long)r->explain.pass2_scored,
				      (unsigned long long)r->explain.pass2_pruned,
				      (unsigned long long)r->explain.reranked,
				      (unsigned long long)r->explain.delta_scanned,
				      (unsigned long long)r->explain.uncovered_scanned,
				      (unsigned long long)r->explain.micros);
		assert_true(r->explain.generation == gen);
		assert_true(r->explain.clusters_probed > 0);
		assert_true(r->explain.pass1_scored > 0);
		assert_true(r->explain.reranked > 0);
		/* ANN must not be an exhaustive scan in disguise */
		assert_true(r->explain.pass1_scored < N);
		assert_true(r->explain.reranked >= K);
		assert_true(r->explain.uncovered_scanned == 0);
		sum.clusters_probed += r->explain.clusters_probed;
		vecfs_results_free(r);
	}
	double recall = (double)found / (double)(NQ * K);
	print_message("recall@10 = %.4f (%zu queries, %.1f clusters probed/query)\n",
		      recall, NQ, (double)sum.clusters_probed / NQ);
	assert_true(recall >= 0.95);
	free(q);
	ds_free(&ds);
}

static vf_store *g_v1_store;

/* Rewrite generation *arg's meta as it was written before generations had
 * flags: its first VF_GENMETA_V1_SIZE bytes. */
static int write_v1_meta(vf_txn *txn, void *arg)
{
	uint64_t gen = *(uint64_t *)arg;
	vf_genmeta m;
	int rc = vf_load_genmeta(txn, g_v1_store, gen, &m);
	if (rc)
		return rc;
	assert_int_equal(m.flags, 0);
	vf_genkey k = vf_gen_key(gen, VF_GK_META, 0);
	return vf_put(txn, g_v1_store->gens, k.b, sizeof k.b, &m, VF_GENMETA_V1_SIZE, 0);
}

/* Recall@10 of NQ fresh queries at nprobe 6 against exact scans, and the
 * mean second-pass work. */
static double recall_at(vecfs *v, dataset *ds, uint32_t D, size_t NQ, uint64_t gen,
			double *pass2)
{
	float *q = malloc(D * sizeof(float));
	assert_non_null(q);
	vecfs_query_opts o, ox;
	memset(&o, 0, sizeof o);
	o.k = 10;
	o.nprobe = 6;
	ox = o;
	ox.exact = 1;
	double sum = 0, p2 = 0;
	rng keep = ds->r;
	ds->r.s = 777; /* the same queries each time */
	for (size_t i = 0; i < NQ; i++) {
		ds_fresh(ds, q);
		vecfs_results *a = search_opts(v, q, 1, D, &o);
		vecfs_results *x = search_opts(v, q, 1, D, &ox);
		assert_true(a->generation == gen);
		sum += recall_keys(a, x);
		p2 += (double)a->explain.pass2_scored;
		vecfs_results_free(a);
		vecfs_results_free(x);
	}
	ds->r = keep;
	free(q);
	*pass2 = p2 / NQ;
	return sum / NQ;
}

/* Generations built before the first-pass table was a query's (their meta
 * without flags, their codes for a table a cluster) are searched with a
 * table a cluster, and new ones with a table a query: both find the true
 * neighbours.  (Scoring either kind of code with the other kind of table
 * puts each estimate off by its cluster's share, and the pruning loses
 * them.)  The clusters lie far from the origin, where the share is large. */
static void test_first_pass_tables(void **state)
{
	fixture *f = *state;
	const uint32_t D = 40;
	const size_t N = 8000, NQ = 150;
	const vecfs_metric metrics[] = { VECFS_L2, VECFS_DOT };
	for (size_t mi = 0; mi < 2; mi++) {
		vecfs_metric m = metrics[mi];
		char sub[32];
		snprintf(sub, sizeof sub, "tables-%s", vecfs_metric_name(m));
		vecfs *v = fx_open(f, sub);
		set_config(v, D, m);
		dataset ds;
		ds_make(&ds, 4242 + mi, N, D, 24);
		for (size_t i = 0; i < N * D; i++)
			ds.x[i] += 40.0f;
		for (size_t c = 0; c < 24 * (size_t)D; c++)
			ds.centers[c] += 40.0f;
		put_range(v, ds.x, 0, N, D, NULL);

		/* the older kind, its meta as it was written then */
		v->gen_flags = 0;
		uint64_t old = build(v, 1);
		g_v1_store = v->store;
		assert_int_equal(vf_write(v->store, write_v1_meta, &old), 0);
		fx_close(f);
		v = fx_open(f, sub);
		vecfs_gen_info gi;
		assert_int_equal(vecfs_gen_info_get(v, old, &gi), 0);
		assert_int_equal(gi.query_table, 0);
		double p2old, p2new;
		double rold = recall_at(v, &ds, D, NQ, old, &p2old);

		assert_int_equal(v->gen_flags, VF_GEN_QUERY_TABLE);
		uint64_t gen = build(v, 1);
		assert_int_equal(vecfs_gen_info_get(v, gen, &gi), 0);
		assert_int_equal(gi.query_table, 1);
		double rnew = recall_at(v, &ds, D, NQ, gen, &p2new);
		print_message("%s: recall@10 at nprobe 6 %.4f with a table a cluster, %.4f a "
			      "query; pass 2 scored %.1f, %.1f\n", vecfs_metric_name(m), rold,
			      rnew, p2old, p2new);
		assert_true(rold >= 0.95);
		assert_true(rnew >= 0.95);
		ds_free(&ds);
		fx_close(f);
	}
}

/* ------------------------------------------------------------ 3. min(k, n) */

static void test_min_k_live(void **state)
{
	fixture *f = *state;
	const uint32_t D = 8;
	vecfs *v = fx_open(f, "three");
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 7, 3, D, 2);
	put_range(v, ds.x, 0, 3, D, "k");
	float q[8];
	ds_fresh(&ds, q);

	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1)
			build(v, 1);
		for (int exact = 0; exact < 2; exact++) {
			vecfs_results *r = search1(v, q, D, 10, exact);
			if (r->count[0] != 3)
				print_message("gen %d exact %d: %zu hits\n", pass, exact,
					      r->count[0]);
			check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, 3, D,
				    NULL, "k", q, 10);
			assert_int_equal(r->count[0], 3);
			vecfs_results_free(r);
			r = search1(v, q, D, 2, exact);
			check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, 3, D,
				    NULL, "k", q, 2);
			vecfs_results_free(r);
		}
	}
	/* one deleted: two left */
	unsigned char alive[3] = { 1, 0, 1 };
	del_key(v, "k1");
	for (int exact = 0; exact < 2; exact++) {
		vecfs_results *r = search1(v, q, D, 10, exact);
		check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, 3, D, alive,
			    "k", q, 10);
		assert_int_equal(r->count[0], 2);
		vecfs_results_free(r);
	}
	ds_free(&ds);
	fx_close(f);

	/* duplicate vectors (postings equal to their centroid) count too:
	 * 200 records, 5 distinct vectors */
	const size_t N = 200;
	v = fx_open(f, "dups");
	set_config(v, D, VECFS_L2);
	ds_make(&ds, 8, N, D, 5);
	for (size_t i = 5; i < N; i++)
		memcpy(ds.x + i * D, ds.x + (i % 5) * D, D * sizeof(float));
	put_range(v, ds.x, 0, N, D, "d");
	build(v, 1);
	for (size_t t = 0; t < 6; t++) {
		if (t < 5)
			memcpy(q, ds.x + t * D, sizeof q);
		else
			ds_fresh(&ds, q);
		vecfs_results *r = search1(v, q, D, 10, 0);
		if (r->count[0] != 10)
			print_message("duplicates: query %zu got %zu hits, want 10\n", t,
				      r->count[0]);
		check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, NULL,
			    "d", q, 10);
		vecfs_results_free(r);
	}
	ds_free(&ds);
}

/* Probing fewer clusters than hold k records still gives min(k, live)
 * results: the search probes more until it has them; an nprobe past the
 * number of clusters probes them all. */
static void test_min_k_few_clusters(void **state)
{
	fixture *f = *state;
	const uint32_t D = 8;
	const size_t N = 2000;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 9, N + 10, D, 40);
	put_range(v, ds.x, 0, N, D, "w");
	build(v, 1);
	static const uint32_t ks[] = { 150, 700, 2000, 5000 };
	static const uint32_t nprobes[] = { 1, 2, UINT32_MAX };
	for (size_t t = 0; t < 4; t++) {
		float q[8];
		ds_fresh(&ds, q);
		for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
			for (size_t b = 0; b < sizeof nprobes / sizeof *nprobes; b++) {
				vecfs_query_opts o = { .k = ks[a], .nprobe = nprobes[b] };
				vecfs_results *r = search_opts(v, q, 1, D, &o);
				size_t want = ks[a] < N ? ks[a] : N;
				if (r->count[0] != want)
					print_message("k %u nprobe %u: %zu hits, want %zu\n", ks[a],
						      nprobes[b], r->count[0], want);
				assert_int_equal(r->count[0], want);
				check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, NULL,
					   "w", q);
				/* the option as given; every cluster probed once at most */
				assert_int_equal(r->explain.nprobe, nprobes[b]);
				if (nprobes[b] == UINT32_MAX) {
					vecfs_gen_info gi;
					assert_int_equal(vecfs_gen_info_get(v, vecfs_active(v), &gi), 0);
					assert_int_equal(r->explain.clusters_probed, gi.nlist);
				}
				vecfs_results_free(r);
			}
	}
	ds_free(&ds);
}

/* Distances that overflow float32 are results too (+inf under l2, -inf
 * under dot), as many as min(k, live), with or without an index. */
static void test_overflowing_distances(void **state)
{
	fixture *f = *state;
	const uint32_t D = 4;
	static const vecfs_metric metrics[] = { VECFS_L2, VECFS_DOT };
	for (size_t mi = 0; mi < 2; mi++) {
		char sub[16];
		snprintf(sub, sizeof sub, "m%zu", mi);
		vecfs *v = fx_open(f, sub);
		set_config(v, D, metrics[mi]);
		float x[300 * 4];
		for (size_t i = 0; i < 300; i++) {
			x[i * D] = (float)i * 0.1f;
			x[i * D + 1] = 1;
			x[i * D + 2] = 2;
			x[i * D + 3] = (float)(i % 7);
		}
		put_range(v, x, 0, 300, D, "o");
		const float q[4] = { 1e38f, 1e38f, 1e38f, 3 };
		for (int pass = 0; pass < 2; pass++) {
			if (pass == 1)
				build(v, 1);
			for (int exact = 0; exact < 2; exact++) {
				vecfs_results *r = search1(v, q, D, 7, exact);
				if (r->count[0] != 7)
					print_message("%s gen %d exact %d: %zu hits\n",
						      vecfs_metric_name(metrics[mi]), pass, exact,
						      r->count[0]);
				assert_int_equal(r->count[0], 7);
				for (size_t j = 0; j < 7; j++) {
					float d = r->hits[0][j].distance;
					assert_true(isinf(d));
					assert_true(metrics[mi] == VECFS_L2 ? d > 0 : d < 0);
					assert_true(key_index(r->hits[0][j].key, "o") >= 0);
					for (size_t i = 0; i < j; i++)
						assert_string_not_equal(r->hits[0][i].key,
									r->hits[0][j].key);
				}
				vecfs_results_free(r);
			}
		}
		fx_close(f);
	}
}

/* ------------------------------------------------------------ 4. deltas */

static void test_delta_postings_found(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000, EXTRA = 300;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 11, N + EXTRA + 2, D, 20);
	put_range(v, ds.x, 0, N, D, "k");
	uint64_t gen = build(v, 1);

	/* row N: far from everything; row N+1: a fresh point in a cluster */
	for (uint32_t j = 0; j < D; j++)
		ds.x[N * D + j] = 100.0f + (float)j;
	put_range(v, ds.x, N, 2, D, "k");
	for (size_t i = N; i < N + 2; i++) {
		const float *q = ds.x + i * D;
		vecfs_results *r = search1(v, q, D, 10, 0);
		char key[32];
		snprintf(key, sizeof key, "k%zu", i);
		assert_int_equal(r->count[0], 10);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N + 2, D, NULL,
			   "k", q);
		if (strcmp(r->hits[0][0].key, key) != 0)
			print_message("query at new row %s: rank 0 is %s (%g), delta_scanned %llu\n",
				      key, r->hits[0][0].key, r->hits[0][0].distance,
				      (unsigned long long)r->explain.delta_scanned);
		assert_string_equal(r->hits[0][0].key, key);
		assert_true(near_zero(VECFS_L2, r->hits[0][0].distance, q, D));
		assert_true(r->explain.delta_scanned > 0);
		assert_true(r->generation == gen);
		vecfs_results_free(r);
	}

	/* a larger batch of new rows: each found at its own vector */
	put_range(v, ds.x, N + 2, EXTRA, D, "k");
	size_t total = N + 2 + EXTRA, missed = 0;
	for (size_t i = N + 2; i < total; i += 5) {
		const float *q = ds.x + i * D;
		vecfs_results *r = search1(v, q, D, 5, 0);
		char key[32];
		snprintf(key, sizeof key, "k%zu", i);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, total, D, NULL,
			   "k", q);
		if (strcmp(r->hits[0][0].key, key) != 0) {
			print_message("new row %s not at rank 0 (got %s %g)\n", key,
				      r->hits[0][0].key, r->hits[0][0].distance);
			missed++;
		}
		assert_true(r->explain.delta_scanned > 0);
		vecfs_results_free(r);
	}
	assert_int_equal(missed, 0);
	vecfs_stats s = stats(v);
	assert_int_equal(s.records, total);
	/* rows in delta postings are not in packed blocks until compaction */
	assert_int_equal(s.delta_postings, total - N);
	assert_int_equal(s.unindexed, total - N);
	char err[256];
	assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
	s = stats(v);
	assert_int_equal(s.delta_postings, 0);
	assert_int_equal(s.unindexed, 0);
	ds_free(&ds);
}

/* Probing keeps the np best centroid scores, nearest first, by insertion
 * into a sorted list (np up to VF_BEST_SORTED_MAX) or a heap (more): both
 * must give the np smallest scores in ascending order, each with its own
 * index, whatever the ties; checked against a plain sort. */
static int cmp_pair_ref(const void *a, const void *b)
{
	const float *x = a, *y = b;
	return (x[0] > y[0]) - (x[0] < y[0]);
}

static void test_probe_selection(void **state)
{
	(void)state;
	static const uint32_t ns[] = {1, 2, 7, 141, 300, 2000};
	static const uint32_t nps[] = {1, 2, 5, 24, 127, 128, 129, 200, 2000, 5000};
	rng r = {77, 0, 0};
	for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
		for (int ties = 0; ties < 2; ties++) {
			uint32_t n = ns[a];
			float *score = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
			float *pd = malloc(sizeof(float) * (n + 1));
			uint32_t *pc = malloc(sizeof(uint32_t) * (n + 1));
			assert_true(score && ref && pd && pc);
			for (uint32_t i = 0; i < n; i++) {
				double g = rng_gauss(&r);
				score[i] = ties ? (float)floor(g * 3) : (float)g;
				ref[i] = score[i];
			}
			qsort(ref, n, sizeof(float), cmp_pair_ref);
			for (size_t b = 0; b < sizeof nps / sizeof *nps; b++)
				for (int heap = 0; heap < 2; heap++) {
					uint32_t np = nps[b];
					uint32_t got = heap ? vf_best_heap(score, n, np, pd, pc)
							    : vf_best_sorted(score, n, np, pd, pc);
					uint32_t want = np < n ? np : n;
					assert_int_equal(got, want);
					for (uint32_t i = 0; i < got; i++) {
						assert_true(pd[i] == ref[i]);
						assert_true(pc[i] < n);
						assert_true(score[pc[i]] == pd[i]);
						for (uint32_t j = 0; j < i; j++)
							assert_true(pc[j] != pc[i]);
					}
				}
			free(score);
			free(ref);
			free(pd);
			free(pc);
		}
}

/* The first block a query scans, before any candidate exists, sends on
 * the first-pass survivors whose lower bound is below the k-th smallest
 * of their upper bounds (score.c): vf_kth_smallest() must be that value,
 * a NaN counted as +inf and +inf when there are fewer than k, by every
 * kernel table this CPU has, for k up to VF_KTH_SORTED_MAX (kept in order)
 * and past it (a heap); the lengths end inside a SIMD vector and after. */
static int cmp_float_nan_last(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	x = x == x ? x : INFINITY;
	y = y == y ? y : INFINITY;
	return x < y ? -1 : x > y;
}

static void test_kth_smallest(void **state)
{
	(void)state;
	static const uint32_t ns[] = {1, 9, 10, 17, 64, 65, 158, 1000, 4096};
	static const uint32_t ks[] = {1, 2, 10, 16, VF_KTH_SORTED_MAX - 1, VF_KTH_SORTED_MAX,
				      VF_KTH_SORTED_MAX + 1, 300};
	static const char *const names[] = {"scalar", "avx2", "avx512", "avx512vnni"};
	rng r = {91, 0, 0};
	float *v = malloc(sizeof(float) * 4096), *ref = malloc(sizeof(float) * 4096);
	float *buf = malloc(sizeof(float) * 300);
	uint32_t *idx = malloc(sizeof(uint32_t) * VF_KTH_SORTED_MAX);
	assert_true(v && ref && buf && idx);
	for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
		for (int kind = 0; kind < 3; kind++) { /* plain, ties, NaN and inf */
			uint32_t n = ns[a];
			for (uint32_t i = 0; i < n; i++) {
				double g = rng_gauss(&r);
				v[i] = kind == 1 ? (float)floor(g * 2) : (float)g;
				if (kind == 2 && i % 7 == 3)
					v[i] = i % 2 ? NAN : INFINITY;
			}
			memcpy(ref, v, sizeof(float) * n);
			qsort(ref, n, sizeof(float), cmp_float_nan_last);
			for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
				for (size_t t = 0; t < sizeof names / sizeof *names; t++) {
					const vf_kernels *kn = vf_kernels_named(names[t]);
					if (!kn)
						continue;
					uint32_t k = ks[b];
					float want = k <= n ? ref[k - 1] : INFINITY;
					want = want == want ? want : INFINITY;
					float got = vf_kth_smallest(kn, v, n, k, buf, idx);
					if (!(got == want))
						print_message("%s n %u k %u kind %d: %g, want %g\n",
							      names[t], n, k, kind, got, want);
					assert_true(got == want);
				}
		}
	assert_true(vf_kth_smallest(vf_kernels_named("scalar"), v, 5, 0, buf, idx) == INFINITY);
	free(v);
	free(ref);
	free(buf);
	free(idx);
}

/* With a recall target the first pass probes the clusters within a width
 * of the nearest, nprobe at most: vf_within_sorted() finds them by two
 * scans and sorts them alone.  They must be exactly the first entries of
 * vf_best_sorted()'s list (same scores, same indexes, ties in index
 * order) up to the limit, and `next` the score of the entry after them;
 * widths of zero, small, large and infinite (none: 0 returned), NaN. */
static void test_probe_within(void **state)
{
	(void)state;
	static const uint32_t ns[] = {1, 2, 7, 141, 300, 2000};
	static const uint32_t wants[] = {1, 2, 5, 20, 59, 2000};
	static const float widths[] = {0.0f, 0.05f, 0.5f, 3.0f, 100.0f};
	rng r = {78, 0, 0};
	for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
		for (int ties = 0; ties < 2; ties++) {
			uint32_t n = ns[a];
			float *score = malloc(sizeof(float) * n), *pd = malloc(sizeof(float) * (n + 1));
			float *rd = malloc(sizeof(float) * (n + 1));
			uint32_t *pc = malloc(sizeof(uint32_t) * (n + 1)), *near = malloc(sizeof(uint32_t) * n);
			uint32_t *rc = malloc(sizeof(uint32_t) * (n + 1));
			assert_true(score && pd && rd && pc && near && rc);
			for (uint32_t i = 0; i < n; i++) {
				double g = rng_gauss(&r);
				score[i] = ties ? (float)floor(g * 3) / 8 : (float)g;
			}
			uint32_t all = vf_best_sorted(score, n, n, rd, rc);
			assert_int_equal(all, n);
			for (size_t b = 0; b < sizeof wants / sizeof *wants; b++)
				for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
					uint32_t want = wants[b];
					float next = -1, lim = rd[0] + widths[w];
					uint32_t got = vf_within_sorted(score, n, widths[w], want, near, pd, pc,
								       &next);
					uint32_t m = 0;
					while (m < n && m < want && rd[m] <= lim)
						m++;
					assert_int_equal(got, m);
					for (uint32_t i = 0; i < got; i++) {
						assert_true(pd[i] == rd[i]);
						assert_int_equal(pc[i], rc[i]);
					}
					if (m < n)
						assert_true(next == rd[m]);
					else
						assert_true(isinf(next) && next > 0);
				}
			float next = 0;
			assert_int_equal(vf_within_sorted(score, n, INFINITY, 5, near, pd, pc, &next), 0);
			assert_int_equal(vf_within_sorted(score, n, NAN, 5, near, pd, pc, &next), 0);
			assert_int_equal(vf_within_sorted(score, n, 1.0f, 0, near, pd, pc, &next), 0);
			free(score);
			free(pd);
			free(rd);
			free(pc);
			free(near);
			free(rc);
		}
}

/* ------------------------------------------------------------ 5. deletes */

struct live_check {
	const unsigned char *alive;
	size_t n, seen, bad;
};

/* A store of N clustered points k0..k(N-1) (l2, dim D) with an active
 * generation. */
static vecfs *open_built(fixture *f, dataset *ds, uint64_t seed, size_t N, uint32_t D)
{
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	ds_make(ds, seed, N, D, 20);
	put_range(v, ds->x, 0, N, D, "k");
	build(v, 1);
	return v;
}

/* One put of more rows than the writer keeps before it writes them (their
 * delta postings pass its pending_bytes, set to 1 MiB here, 32 MiB by
 * default): kept postings are written in key order in rounds, and every
 * row is found, every overwritten row once, at its new vector only, and the
 * store checks whole. */
static void test_many_deltas_in_one_put(void **state)
{
	const uint32_t D = 8;
	const size_t N = 2000, M = 40000, OVER = 1000;
	dataset ds;
	vecfs *v = open_built(*state, &ds, 12, N, D);
	v->pending_bytes = 1 << 20; /* its 4 MB of postings: four rounds */
	/* rows k0..k999 get new vectors, then k2000.. are new: all fresh
	 * points of the same clusters */
	float *nw = malloc(sizeof(float) * M * D);
	assert_non_null(nw);
	for (size_t i = 0; i < M; i++)
		ds_fresh(&ds, nw + i * D);
	vecfs_row *rows = calloc(M, sizeof *rows);
	char *keys = calloc(M, 16);
	assert_non_null(rows);
	assert_non_null(keys);
	for (size_t i = 0; i < M; i++) {
		size_t k = i < OVER ? i : N + i - OVER;
		int n = snprintf(keys + i * 16, 16, "k%zu", k);
		rows[i] = (vecfs_row){keys + i * 16, (size_t)n, nw + i * D, NULL, 0};
	}
	char err[256] = "";
	size_t bad = SIZE_MAX;
	assert_int_equal(vecfs_put(v, rows, M, D, &bad, err, sizeof err), 0);
	vecfs_stats s = stats(v);
	assert_int_equal(s.records, N + M - OVER);
	assert_int_equal(s.delta_postings, M);
	assert_int_equal(vecfs_verify(v, err, sizeof err), 0);
	for (size_t i = 0; i < M; i += 997) {
		const float *q = rows[i].vec;
		vecfs_results *r = search1(v, q, D, 3, 0);
		assert_true(r->count[0] > 0);
		assert_int_equal(r->hits[0][0].keylen, rows[i].keylen);
		assert_memory_equal(r->hits[0][0].key, rows[i].key, rows[i].keylen);
		assert_true(near_zero(VECFS_L2, r->hits[0][0].distance, q, D));
		vecfs_results_free(r);
	}
	/* an overwritten row is not found at its old vector */
	for (size_t i = 0; i < OVER; i += 97) {
		const float *q = ds.x + i * D;
		vecfs_results *r = search1(v, q, D, 1, 0);
		assert_true(r->count[0] == 1);
		assert_false(near_zero(VECFS_L2, r->hits[0][0].distance, q, D) &&
			     r->hits[0][0].keylen == rows[i].keylen &&
			     !memcmp(r->hits[0][0].key, rows[i].key, rows[i].keylen));
		vecfs_results_free(r);
	}
	free(rows);
	free(keys);
	free(nw);
	ds_free(&ds);
}

static int check_live_key(void *arg, const char *key, size_t keylen)
{
	struct live_check *lc = arg;
	char buf[32];
	lc->seen++;
	if (keylen >= sizeof buf) {
		lc->bad++;
		return 0;
	}
	memcpy(buf, key, keylen);
	buf[keylen] = 0;
	long i = key_index(buf, "k");
	if (i < 0 || (size_t)i >= lc->n || !lc->alive[i]) {
		print_message("listed key '%s' is not live\n", buf);
		lc->bad++;
	}
	return 0;
}

static void test_deletes_never_returned(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000;
	dataset ds;
	vecfs *v = open_built(f, &ds, 12, N, D);

	unsigned char *alive = malloc(N);
	memset(alive, 1, N);
	size_t ndel = 0;
	for (size_t i = 0; i < N; i += 10) {
		char key[32];
		snprintf(key, sizeof key, "k%zu", i);
		del_key(v, key);
		alive[i] = 0;
		ndel++;
	}
	vecfs_stats s = stats(v);
	assert_int_equal(s.records, N - ndel);
	assert_int_equal(s.deleted, ndel);

	/* missing and already-deleted keys */
	assert_int_equal(vecfs_delete(v, "k0", 2), -ENOENT);
	assert_int_equal(vecfs_delete(v, "nope", 4), -ENOENT);
	float buf[16];
	uint32_t dim = 0;
	assert_int_equal(vecfs_get(v, "k10", 3, buf, D, &dim, NULL, 0, NULL),
			 -ENOENT);
	assert_int_equal(vecfs_get(v, "k11", 3, buf, D, &dim, NULL, 0, NULL), 0);
	assert_int_equal(dim, D);
	assert_memory_equal(buf, ds.x + 11 * D, D * sizeof(float));
	assert_int_equal(stats(v).deleted, ndel);

	float q[16];
	for (size_t t = 0; t < 80; t++) {
		/* half the queries sit exactly on a deleted vector */
		if (t % 2 == 0)
			memcpy(q, ds.x + (t * 10 % N) * D, sizeof q);
		else
			ds_fresh(&ds, q);
		int exact = t % 4 == 1;
		vecfs_results *r = search1(v, q, D, 20, exact);
		assert_int_equal(r->count[0], 20);
		if (exact)
			check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D,
				    alive, "k", q, 20);
		else
			check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D,
				   alive, "k", q);
		vecfs_results_free(r);
	}
	/* the key listing holds exactly the live keys */
	struct live_check lc = { alive, N, 0, 0 };
	assert_int_equal(vecfs_keys(v, NULL, 0, N + 10, check_live_key, &lc), 0);
	assert_int_equal(lc.bad, 0);
	assert_int_equal(lc.seen, N - ndel);
	ds_free(&ds);
	free(alive);
}

/* ------------------------------------------------------------ 6. upsert */

static void test_upsert_moves_vector(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000, MOVES = 20;
	dataset ds;
	vecfs *v = open_built(f, &ds, 13, N, D);

	float *old = malloc(MOVES * D * sizeof(float));
	size_t moved[20];
	for (size_t t = 0; t < MOVES; t++) {
		size_t x = t * 149 % N;
		moved[t] = x;
		memcpy(old + t * D, ds.x + x * D, D * sizeof(float));
		/* a fresh point around a different center */
		uint32_t c = (ds.label[x] + 1 + (uint32_t)t % (ds.nc - 1)) % ds.nc;
		float nv[16];
		ds_point(&ds, c, nv);
		if (t % 5 == 0) { /* moved twice: only the last place counts */
			float mid[16];
			ds_point(&ds, (c + 3) % ds.nc, mid);
			char key[32];
			snprintf(key, sizeof key, "k%zu", x);
			assert_int_equal(put_one(v, key, mid, D), 0);
		}
		memcpy(ds.x + x * D, nv, sizeof nv);
		put_range(v, ds.x, x, 1, D, "k");
	}
	assert_int_equal(stats(v).records, N);

	for (size_t t = 0; t < MOVES; t++) {
		size_t x = moved[t];
		char key[32];
		snprintf(key, sizeof key, "k%zu", x);
		float got[16];
		uint32_t dim = 0;
		assert_int_equal(vecfs_get(v, key, strlen(key), got, D, &dim, NULL,
					   0, NULL), 0);
		assert_memory_equal(got, ds.x + x * D, D * sizeof(float));

		/* at the new place: found, distance ~0 */
		vecfs_results *r = search1(v, ds.x + x * D, D, 10, 0);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, NULL, "k",
			   ds.x + x * D);
		if (strcmp(r->hits[0][0].key, key) != 0)
			print_message("moved %s not at rank 0 at its new place (got %s)\n",
				      key, r->hits[0][0].key);
		assert_string_equal(r->hits[0][0].key, key);
		assert_true(near_zero(VECFS_L2, r->hits[0][0].distance, ds.x + x * D, D));
		vecfs_results_free(r);

		/* at the old place: not returned with its old distance */
		for (int exact = 0; exact < 2; exact++) {
			r = search1(v, old + t * D, D, 10, exact);
			check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, NULL,
				   "k", old + t * D);
			int at = hits_have(r->hits[0], r->count[0], key);
			if (at >= 0) {
				print_message("moved %s returned at old place, rank %d dist %g\n",
					      key, at, r->hits[0][at].distance);
				assert_false(near_zero(VECFS_L2, r->hits[0][at].distance,
						       old + t * D, D));
			}
			if (exact)
				check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, N,
					    D, NULL, "k", old + t * D, 10);
			vecfs_results_free(r);
		}
	}
	free(old);
	ds_free(&ds);
}

/* Re-rank reads records where they were last seen (location hints).  After
 * every record moved (upserts and deletes rewrite the pages and free the
 * old ones for reuse), stale hints must never show: each query still sees
 * every live record at its current vector and no deleted one, with exact
 * distances; the same after reopening (hints filled in the background). */
static void check_every_point(vecfs *v, const dataset *ds, const unsigned char *alive,
			      size_t N, uint32_t D)
{
	for (size_t x = 0; x < N; x += 7) {
		char key[32];
		snprintf(key, sizeof key, "k%zu", x);
		vecfs_results *r = search1(v, ds->x + x * D, D, 10, 0);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds->x, N, D, alive, "k",
			   ds->x + x * D);
		int at = hits_have(r->hits[0], r->count[0], key);
		if (alive[x]) {
			assert_int_equal(at, 0);
			assert_true(near_zero(VECFS_L2, r->hits[0][0].distance, ds->x + x * D, D));
		} else {
			assert_int_equal(at, -1);
		}
		vecfs_results_free(r);
	}
}

static void test_stale_location_hints(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000;
	dataset ds;
	vecfs *v = open_built(f, &ds, 17, N, D);
	unsigned char *alive = malloc(N);
	memset(alive, 1, N);
	check_every_point(v, &ds, alive, N, D); /* the hints are set */
	for (int round = 0; round < 3; round++) {
		/* new vectors for a third, deletes for a tenth */
		for (size_t x = (size_t)round; x < N; x += 3) {
			if (!alive[x])
				continue;
			ds_point(&ds, (ds.label[x] + 1 + (uint32_t)round) % ds.nc, ds.x + x * D);
			put_range(v, ds.x, x, 1, D, "k");
		}
		for (size_t x = (size_t)round * 3 + 1; x < N; x += 10)
			if (alive[x]) {
				char key[32];
				snprintf(key, sizeof key, "k%zu", x);
				del_key(v, key);
				alive[x] = 0;
			}
		check_every_point(v, &ds, alive, N, D);
	}
	fx_close(f);
	v = fx_open(f, NULL);
	check_every_point(v, &ds, alive, N, D);
	free(alive);
	ds_free(&ds);
}

/* At open the location hints of all records are filled in the background,
 * a read transaction for each 65536 records, resuming where the last one
 * stopped: the hints cover the records of every chunk, and each points at
 * the record's value. */
/* The same keys and distances (bit for bit) and the same work. */
static void results_same(const vecfs_results *a, const vecfs_results *b)
{
	assert_int_equal(a->nq, b->nq);
	for (size_t i = 0; i < a->nq; i++) {
		assert_int_equal(a->count[i], b->count[i]);
		for (size_t j = 0; j < a->count[i]; j++) {
			assert_string_equal(a->hits[i][j].key, b->hits[i][j].key);
			assert_memory_equal(&a->hits[i][j].distance, &b->hits[i][j].distance,
					    sizeof(float));
		}
	}
	assert_int_equal(a->explain.clusters_probed, b->explain.clusters_probed);
	assert_int_equal(a->explain.pass2_scored, b->explain.pass2_scored);
	assert_int_equal(a->explain.reranked, b->explain.reranked);
}

/* The store's file out of the page cache (but for pages a process maps). */
static void drop_file_cache(const fixture *f)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/data.mdb", f->dir);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fdatasync(fd), 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
}

/* A store of n rows of ds (made from seed, nc clusters) under l2, with an
 * active generation. */
static vecfs *built_store(fixture *f, dataset *ds, uint64_t seed, size_t n, uint32_t d,
			  uint32_t nc)
{
	vecfs *v = fx_open(f, NULL);
	set_config(v, d, VECFS_L2);
	ds_make(ds, seed, n, d, nc);
	put_range(v, ds->x, 0, n, d, NULL);
	build(v, 1);
	return v;
}

/* The pages a search waited to read: none once the store is in memory; some
 * when its file was just dropped from the page cache (and no location-hint
 * fill reads it first); the store's counter sums the searches'. */
static void test_pages_read_counted(void **state)
{
	fixture *f = *state;
	const uint32_t D = 64;
	const size_t N = 20000, NQ = 16, K = 10;
	dataset ds;
	built_store(f, &ds, 77, N, D, 40);
	fx_close(f);
	setenv("VECFS_NO_HINT_FILL", "1", 1);
	vecfs *v = fx_open(f, NULL);
	unsetenv("VECFS_NO_HINT_FILL");
	/* the file's pages out of the page cache, but for the few the open
	 * mapped */
	drop_file_cache(f);
	float *q = malloc(NQ * D * sizeof(float));
	assert_non_null(q);
	for (size_t i = 0; i < NQ; i++)
		ds_fresh(&ds, q + i * D);
	vecfs_results *r = search_opts(v, q, NQ, D, &(vecfs_query_opts){.k = K});
	uint64_t counted = r->explain.pages_read;
	assert_true(counted > 0);
	vecfs_results_free(r);
	r = search_opts(v, q, NQ, D, &(vecfs_query_opts){.k = K});
	assert_int_equal(r->explain.pages_read, 0);
	vecfs_results_free(r);
	assert_int_equal(stats(v).pages_read, counted);
	free(q);
	ds_free(&ds);
	fx_close(f);
}

/* Planning reads turns itself on when a search waits for pages and off
 * again once searches stop waiting: at the end of the hold, or after
 * VF_PREFETCH_CALM searches in a row that waited for none (a few faults
 * while the store is in memory must not tax every query for the hold). */
static void test_prefetch_calms_down(void **state)
{
	fixture *f = *state;
	vecfs *v = f->v = fx_open(f, NULL);
	v->prefetch_mode = 0;
	assert_true(vf_prefetch_wanted(v)); /* before the first search */
	vf_prefetch_note(v, 0);
	assert_false(vf_prefetch_wanted(v)); /* the first did not wait */
	vf_prefetch_note(v, 5);
	assert_true(vf_prefetch_wanted(v));
	for (int i = 0; i < VF_PREFETCH_CALM - 1; i++) {
		vf_prefetch_note(v, 0);
		assert_true(vf_prefetch_wanted(v));
	}
	vf_prefetch_note(v, 1); /* a wait starts the count again */
	for (int i = 0; i < VF_PREFETCH_CALM - 1; i++)
		vf_prefetch_note(v, 0);
	assert_true(vf_prefetch_wanted(v));
	vf_prefetch_note(v, 0);
	assert_false(vf_prefetch_wanted(v));
}

/* Planning a search's reads ahead changes nothing it finds, with the reads
 * planned or not, one query a call or a batch, the store in memory or just
 * dropped from the page cache. */
static void test_prefetch_same_results(void **state)
{
	fixture *f = *state;
	const uint32_t D = 48;
	const size_t N = 30000, NQ = 40, K = 10;
	dataset ds;
	vecfs *v = built_store(f, &ds, 91, N, D, 60);
	float *q = malloc(NQ * D * sizeof(float));
	assert_non_null(q);
	for (size_t i = 0; i < NQ; i++)
		ds_fresh(&ds, q + i * D);
	vecfs_query_opts o = {.k = K};
	for (int cold = 0; cold < 2; cold++) {
		vecfs_results *off, *on;
		v->prefetch_mode = -1;
		if (cold)
			drop_file_cache(f);
		off = search_opts(v, q, NQ, D, &o);
		v->prefetch_mode = 1;
		if (cold)
			drop_file_cache(f);
		on = search_opts(v, q, NQ, D, &o);
		results_same(off, on);
		vecfs_results_free(off);
		vecfs_results_free(on);
		for (size_t i = 0; i < NQ; i += 7) {
			v->prefetch_mode = -1;
			off = search_opts(v, q + i * D, 1, D, &o);
			v->prefetch_mode = 1;
			if (cold)
				drop_file_cache(f);
			on = search_opts(v, q + i * D, 1, D, &o);
			results_same(off, on);
			vecfs_results_free(off);
			vecfs_results_free(on);
		}
	}
	free(q);
	ds_free(&ds);
	fx_close(f);
}

/* Vectors of whole numbers 0..255 are held in a byte a number: searched
 * and read back exactly as the same vectors held in float32.
 * Store A holds them as they are; store B the same with coordinate 0
 * (always 0) written as -0, which keeps each in float32 and gives every
 * distance the same value. */
/* Rows x[0..n) under keys PREFIX0.., with coordinate 0 written as -0 on
 * side 1 (x as it was after). */
static void put_side(vecfs *v, float *x, size_t n, uint32_t D, const char *prefix, int side)
{
	for (size_t i = 0; side && i < n; i++)
		x[i * D] = -0.0f;
	put_range(v, x, 0, n, D, prefix);
	for (size_t i = 0; i < n; i++)
		x[i * D] = 0;
}

static void test_byte_vectors_same_results(void **state)
{
	fixture *f = *state;
	const vecfs_metric metrics[] = { VECFS_L2, VECFS_COSINE, VECFS_DOT };
	const uint32_t D = 24;
	const size_t N = 3000, NQ = 30;
	float *x = malloc(sizeof(float) * N * D), *q = malloc(sizeof(float) * NQ * D);
	float *back = malloc(sizeof(float) * D);
	assert_non_null(x);
	assert_non_null(q);
	assert_non_null(back);
	rng r = { .s = 77 };
	for (size_t i = 0; i < N; i++) {
		uint32_t c = (uint32_t)(rng_next(&r) % 8); /* 8 loose clusters */
		x[i * D] = 0;
		for (uint32_t j = 1; j < D; j++) {
			long val = (long)(32 * ((c + j) % 8)) + (long)(rng_next(&r) % 40);
			x[i * D + j] = (float)(val > 255 ? 255 : val);
		}
	}
	for (size_t i = 0; i < NQ * D; i++)
		q[i] = (float)(rng_unif(&r) * 255);
	for (size_t mi = 0; mi < 3; mi++) {
		vecfs_results *res[2][5];
		for (int side = 0; side < 2; side++) {
			char sub[32];
			snprintf(sub, sizeof sub, "%s-%d", vecfs_metric_name(metrics[mi]), side);
			vecfs *v = fx_open(f, sub);
			set_config(v, D, metrics[mi]);
			put_side(v, x, N, D, "k", side);
			/* each read back bit for bit */
			for (size_t i = 0; i < N; i += 97) {
				char key[32];
				uint32_t dim = 0;
				snprintf(key, sizeof key, "k%zu", i);
				assert_int_equal(vecfs_get(v, key, strlen(key), back, D, &dim, NULL, 0,
							   NULL), 0);
				assert_int_equal(dim, D);
				assert_int_equal(signbit(back[0]) != 0, side);
				assert_memory_equal(back + 1, x + i * D + 1, sizeof(float) * (D - 1));
			}
			vecfs_query_opts o = {.k = 10, .exact = 1};
			res[side][0] = search_opts(v, q, NQ, D, &o);
			/* one query: under l2 its distances read the bytes in place */
			res[side][3] = search_opts(v, q + D, 1, D, &o);
			build(v, 1);
			o.exact = 0;
			o.nprobe = 3;
			res[side][1] = search_opts(v, q, NQ, D, &o);
			res[side][2] = search_opts(v, q, 1, D, &o);
			/* rows the active generation does not cover (written after
			 * a newer build, then the older one made active again),
			 * scanned for one query */
			uint64_t older = vecfs_active(v);
			build(v, 1);
			put_side(v, x, 60, D, "u", side);
			char err[256] = "";
			assert_int_equal(vecfs_activate(v, older, err, sizeof err), 0);
			res[side][4] = search_opts(v, q + 2 * D, 1, D, &o);
			assert_true(res[side][4]->explain.uncovered_scanned > 0);
			fx_close(f);
		}
		for (int t = 0; t < 5; t++) {
			results_same(res[0][t], res[1][t]);
			vecfs_results_free(res[0][t]);
			vecfs_results_free(res[1][t]);
		}
	}
	free(x);
	free(q);
	free(back);
}

/* The ranges a search asked the disk for ahead (vf_io_ops.willneed). */
static struct {
	uintptr_t lo[8192], hi[8192];
	size_t n, lost;
} asked;

static void record_willneed(void *addr, size_t len)
{
	size_t i = __atomic_fetch_add(&asked.n, 1, __ATOMIC_RELAXED);
	if (i >= 8192) {
		__atomic_fetch_add(&asked.lost, 1, __ATOMIC_RELAXED);
		return;
	}
	asked.lo[i] = (uintptr_t)addr;
	asked.hi[i] = (uintptr_t)addr + len;
}

/* A search that plans its reads asks for the columns of the posting blocks
 * it scans and not for their keys, which only maintenance and verify read:
 * under a memory cap those pages pushed out the ones the next queries
 * needed (the 1M set at a quarter of its store: 3-4x fewer QPS). */
static void test_prefetch_skips_block_keys(void **state)
{
	fixture *f = *state;
	const uint32_t D = 32;
	const size_t N = 30000, NQ = 40;
	dataset ds;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	vecfs_config c;
	char err[256] = "";
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.nlist = 40; /* blocks of ~750 vectors */
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&ds, 23, N, D, 30);
	/* keys long enough that each block's key column spans whole pages
	 * (put_range() keeps 31 bytes of a key) */
	put_range(v, ds.x, 0, N, D, "a-key-with-a-long-name-");
	build(v, 1);
	float *q = malloc(NQ * D * sizeof(float));
	assert_non_null(q);
	for (size_t i = 0; i < NQ; i++)
		ds_fresh(&ds, q + i * D);
	v->prefetch_mode = 1;
	v->on_search = NULL; /* no recall sampler reading ahead beside the searches */
	memset(&asked, 0, sizeof asked);
	vf_io_ops.willneed = record_willneed;
	vecfs_results *r = search_opts(v, q, NQ, D, &(vecfs_query_opts){.k = 10});
	vecfs_results_free(r);
	r = search_opts(v, q, 1, D, &(vecfs_query_opts){.k = 10});
	vecfs_results_free(r);
	vf_io_reset();
	assert_int_equal(asked.lost, 0);
	assert_true(asked.n > 0);
	const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	vf_txn *txn;
	vf_cursor *cur;
	vf_val k, d;
	size_t blocks = 0, with_keys = 0, scanned = 0;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_cursor_open(txn, v->store->postings, &cur), 0);
	for (int rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		vf_block b;
		if (vf_postkey_kind(k.data) != VF_PK_BLOCK)
			continue;
		assert_int_equal(vf_block_open(d.data, d.len, &b), 0);
		blocks++;
		uintptr_t start = (uintptr_t)d.data, end = start + d.len;
		uintptr_t keys = (uintptr_t)b.col[VF_COL_KEYS];
		/* the first page wholly inside the key column */
		uintptr_t whole = (keys + page - 1) & ~(page - 1);
		int asked_cols = 0;
		for (size_t i = 0; i < asked.n; i++) {
			if (whole + page <= end)
				assert_false(asked.lo[i] < end && asked.hi[i] > whole);
			if (asked.lo[i] <= start && asked.hi[i] >= keys)
				asked_cols = 1;
		}
		with_keys += whole + page <= end;
		scanned += asked_cols;
	}
	vf_cursor_close(cur);
	vf_read_end(v->store, txn);
	assert_true(blocks >= 40);
	assert_int_equal(with_keys, blocks); /* the check above ran for each */
	assert_true(scanned > 0 && scanned < blocks); /* probed ones, not all */
	free(q);
	ds_free(&ds);
	fx_close(f);
}

/* The location-hint table yields to the page cache when the store does
 * not fit in the memory the process may hold (layout/store.h): a table of
 * at most 1/32 of it, not filled ahead at open, and searches answer as
 * with the full one. */
static void test_location_hints_sized_to_memory(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 30000, NQ = 20;
	dataset ds;
	vecfs *v = built_store(f, &ds, 17, N, D, 40);
	fx_close(f);
	v = fx_open(f, NULL); /* a table sized at open for the records there */
	uint64_t full = v->store->hint_mask + 1;
	assert_true(full >= 4 * N); /* four slots a record */
	float *q = malloc(NQ * D * sizeof(float));
	assert_non_null(q);
	for (size_t i = 0; i < NQ; i++)
		ds_fresh(&ds, q + i * D);
	vecfs_query_opts o = {.k = 10};
	vecfs_results *a = search_opts(v, q, NQ, D, &o);
	fx_close(f);
	setenv("VECFS_MEMORY_LIMIT", "4194304", 1); /* 4 MiB: the store does not fit */
	v = fx_open(f, NULL);
	unsetenv("VECFS_MEMORY_LIMIT");
	assert_int_equal(v->store->hint_mask + 1, 8192); /* 128 KiB: 4 MiB / 32 */
	/* nor filled ahead: that walk would read the whole store */
	assert_false(v->hint_started);
	vecfs_results *b = search_opts(v, q, NQ, D, &o);
	results_same(a, b);
	vecfs_results_free(b);
	fx_close(f);
	setenv("VECFS_MEMORY_LIMIT", "1099511627776", 1); /* 1 TiB: it does */
	v = fx_open(f, NULL);
	unsetenv("VECFS_MEMORY_LIMIT");
	assert_int_equal(v->store->hint_mask + 1, full);
	assert_true(v->hint_started);
	vecfs_results_free(a);
	free(q);
	ds_free(&ds);
	fx_close(f);
}

static void test_location_hints_filled_at_open(void **state)
{
	fixture *f = *state;
	const uint32_t D = 4;
	const size_t N = 140000; /* three transactions */
	float *x = malloc(N * D * sizeof(float));
	assert_non_null(x);
	for (size_t i = 0; i < N * D; i++)
		x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
	vecfs *v = fx_open(f, NULL);
	put_range(v, x, 0, N, D, "k");
	fx_close(f);
	v = fx_open(f, NULL);
	size_t seen = 0, hinted[3] = {0, 0, 0}, total[3] = {0, 0, 0};
	for (int wait = 0; wait < 1200; wait++) { /* until the fill has ended (2 min at most: slow under sanitizers and load) */
		vf_txn *txn;
		vf_cursor *cur;
		vf_val k, d;
		size_t n = 0, len;
		vf_hint_view view;
		assert_int_equal(vf_read_begin(v->store, &txn), 0);
		vf_hint_view_of(v->store, txn, &view);
		assert_int_equal(vf_cursor_open(txn, v->store->records, &cur), 0);
		memset(hinted, 0, sizeof hinted);
		memset(total, 0, sizeof total);
		for (int rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
		     rc = vf_cursor_get(cur, &k, &d, VF_NEXT), n++) {
			int stable;
			const void *p = vf_hint_get(v->store, &view, vf_rd_be64(k.data), &len,
						    &stable);
			size_t chunk = n / 65536 < 2 ? n / 65536 : 2;
			total[chunk]++;
			if (!p)
				continue;
			assert_ptr_equal(p, d.data);
			/* nothing written since the fill's reads: in this snapshot
			 * (the fill does not check the records) */
			assert_int_equal(stable, VF_HINT_STABLE);
			assert_int_equal(len, d.len);
			hinted[chunk]++;
		}
		vf_cursor_close(cur);
		vf_read_end(v->store, txn);
		seen = n;
		int filled = 1; /* what is asserted below, for every chunk */
		for (int c = 0; c < 3; c++)
			filled &= hinted[c] > total[c] * 95 / 100;
		if (filled)
			break;
		usleep(100000);
	}
	assert_int_equal(seen, N);
	for (int c = 0; c < 3; c++) {
		print_message("chunk %d: %zu of %zu records hinted\n", c, hinted[c], total[c]);
		assert_true(hinted[c] > total[c] * 95 / 100);
	}
	free(x);
}

/* Queries of one snapshot share where each cluster's postings were found;
 * a write makes a new snapshot, so a delta posting, a delete and a
 * compaction are seen by the very next query on a cluster just read. */
static void test_located_clusters_follow_writes(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000;
	dataset ds;
	vecfs *v = open_built(f, &ds, 19, N, D);
	for (size_t t = 0; t < 20; t++) {
		const float *p = ds.x + (t * 131 % N) * D;
		float nv[16];
		for (uint32_t i = 0; i < D; i++)
			nv[i] = p[i] + 1e-3f;
		vecfs_results *r = search1(v, nv, D, 10, 0); /* the clusters are read */
		assert_int_equal(hits_have(r->hits[0], r->count[0], "new"), -1);
		vecfs_results_free(r);
		assert_int_equal(put_one(v, "new", nv, D), 0);
		r = search1(v, nv, D, 10, 0);
		assert_int_equal(hits_have(r->hits[0], r->count[0], "new"), 0);
		vecfs_results_free(r);
		if (t % 4 == 3) { /* folded into the blocks, then deleted from them */
			char err[256] = "";
			assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
			r = search1(v, nv, D, 10, 0);
			assert_int_equal(hits_have(r->hits[0], r->count[0], "new"), 0);
			vecfs_results_free(r);
		}
		del_key(v, "new");
	}
	vecfs_results *r = search1(v, ds.x, D, 10, 0);
	check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, NULL, "k", ds.x, 10);
	vecfs_results_free(r);
	ds_free(&ds);
}

/* A search takes the config, the counters and the active generation of its
 * own snapshot, though searches of one snapshot share them: after each
 * change (k, nprobe, a flip of the active generation, a delete) the next
 * search follows it. */
static void test_search_follows_meta(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 2000;
	dataset ds;
	vecfs *v = open_built(f, &ds, 23, N, D);
	uint64_t g2 = build(v, 0);
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	for (uint32_t round = 0; round < 4; round++) {
		vecfs_config c;
		char err[256] = "";
		assert_int_equal(vecfs_config_get(v, &c), 0);
		c.k = 3 + round;
		c.nprobe = 2 + round;
		assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
		uint64_t gen = round % 2 ? g2 : 1;
		assert_int_equal(vecfs_activate(v, gen, err, sizeof err), 0);
		for (int twice = 0; twice < 2; twice++) {
			vecfs_results *r = search_opts(v, ds.x, 1, D, &o);
			assert_int_equal(r->count[0], 3 + round);
			assert_int_equal(r->explain.k, 3 + round);
			assert_int_equal(r->explain.nprobe, 2 + round);
			assert_int_equal(r->generation, gen);
			vecfs_results_free(r);
		}
	}
	/* down to two live records: two results */
	char key[32];
	for (size_t i = 2; i < N; i++) {
		snprintf(key, sizeof key, "k%zu", i);
		del_key(v, key);
	}
	vecfs_results *r = search_opts(v, ds.x, 1, D, &o);
	assert_int_equal(r->count[0], 2);
	vecfs_results_free(r);
	ds_free(&ds);
}

/* With 1,009 clusters or more a generation keeps its centroids in 8 bits
 * too, and probing scores in binary16 only the panels its bounds cannot
 * rule out: every search gives the same results and counts as with every
 * panel scored (the 8-bit copy taken away), under l2 and dot and at 1e-13
 * scales, at fixed nprobe, with recall targets (the second look included)
 * and with queries far from the data. */
static void test_probe_first_look(void **state)
{
	fixture *f = *state;
	const uint32_t D = 24;
	const size_t N = 12000;
	for (int m = 0; m < 3; m++) { /* l2, dot, l2 at 1e-13 */
		vecfs_metric metric = m == 1 ? VECFS_DOT : VECFS_L2;
		vecfs *v = fx_open(f, m == 0 ? "l2" : m == 1 ? "dot" : "small");
		set_config(v, D, metric);
		vecfs_config c;
		char err[256] = "";
		assert_int_equal(vecfs_config_get(v, &c), 0);
		c.nlist = 64 * VF_PANEL;
		assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
		dataset ds;
		ds_make(&ds, 31 + m, N, D, 40);
		for (size_t i = 0; m == 2 && i < N * D; i++)
			ds.x[i] *= 1e-13f;
		put_range(v, ds.x, 0, N, D, "k");
		uint64_t gid = build(v, 1);
		vf_txn *txn;
		vf_gen *g;
		assert_int_equal(vf_read_begin(v->store, &txn), 0);
		assert_int_equal(vf_gen_get(v, txn, gid, &g), 0);
		vf_read_end(v->store, txn);
		assert_non_null(g->ci.q8);
		int8_t *q8 = g->ci.q8;
		const uint32_t nprobes[] = {1, 7, 40, 0, 0, 0};
		const float recalls[] = {0, 0, 0, 0.9f, 0.99f, 0.999f};
		size_t diff = 0;
		for (size_t t = 0; t < 6; t++)
			for (size_t i = 0; i < 60; i++) {
				float qv[24];
				const float *p = ds.x + (i * 97 % N) * D;
				float unit = m == 2 ? 1e-13f : 1;
				for (uint32_t d = 0; d < D; d++) /* some near the data, some far */
					qv[d] = i % 3 == 2 ? 40 * p[d] + unit * (float)(d % 5)
							   : p[d] + unit * 0.01f * (float)d;
				vecfs_query_opts o;
				memset(&o, 0, sizeof o);
				o.k = 10;
				o.nprobe = nprobes[t];
				o.recall = recalls[t];
				vecfs_results *r[2];
				for (int off = 0; off < 2; off++) {
					g->ci.q8 = off ? NULL : q8;
					r[off] = search_opts(v, qv, 1, D, &o);
				}
				g->ci.q8 = q8;
				diff += r[0]->count[0] != r[1]->count[0] ||
					r[0]->explain.clusters_probed != r[1]->explain.clusters_probed ||
					r[0]->explain.pass1_scored != r[1]->explain.pass1_scored;
				for (size_t h = 0; h < r[0]->count[0] && h < r[1]->count[0]; h++)
					diff += strcmp(r[0]->hits[0][h].key, r[1]->hits[0][h].key) != 0 ||
						r[0]->hits[0][h].distance != r[1]->hits[0][h].distance;
				vecfs_results_free(r[0]);
				vecfs_results_free(r[1]);
			}
		assert_int_equal(diff, 0);
		vf_gen_put(v, g);
		ds_free(&ds);
		fx_close(f);
	}
}

/* ------------------------------------------------------------ 7. bad input */

static void expect_put_einval(vecfs *v, const vecfs_row *rows, size_t n,
			      uint32_t dim, size_t want_bad, const char *what)
{
	vecfs_stats before = stats(v);
	size_t bad = (size_t)-1;
	char err[256] = "";
	int rc = vecfs_put(v, rows, n, dim, &bad, err, sizeof err);
	if (rc != -EINVAL || bad != want_bad)
		print_message("%s: rc %d (want -EINVAL) bad_row %zu (want %zu) '%s'\n",
			      what, rc, bad, want_bad, err);
	assert_int_equal(rc, -EINVAL);
	assert_int_equal(bad, want_bad);
	assert_true(err[0] != '\0');
	vecfs_stats after = stats(v);
	assert_int_equal(after.records, before.records);
	assert_int_equal(after.next_key, before.next_key);
	assert_int_equal(after.ingest_rows, before.ingest_rows);
	/* the same bad row is refused by the row check too */
	err[0] = 0;
	assert_int_equal(vecfs_row_check(v, &rows[want_bad], dim, err, sizeof err),
			 -EINVAL);
	/* and by the check against the configuration read once, with the
	 * same reason */
	vecfs_config c;
	char err2[256] = "";
	assert_int_equal(vecfs_config_get(v, &c), 0);
	assert_int_equal(vecfs_row_check_config(&c, &rows[want_bad], dim, err2, sizeof err2),
			 -EINVAL);
	assert_string_equal(err2, err);
}

static void test_bad_input_rejected(void **state)
{
	fixture *f = *state;
	const uint32_t D = 8;
	vecfs *v = fx_open(f, "l2");
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.auto_build = 0;
	assert_int_equal(vecfs_config_set(v, &c, NULL, 0), 0);

	float good[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	float good2[8] = { 2, 2, 3, 4, 5, 6, 7, 8 };
	/* first write fixes dim = 8 */
	assert_int_equal(put_one(v, "first", good, D), 0);
	assert_int_equal(stats(v).dim, D);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	assert_int_equal(c.dim, D);
	uint64_t nk = stats(v).next_key;

	vecfs_row row;
	memset(&row, 0, sizeof row);
	row.key = "a";
	row.keylen = 1;
	row.vec = good;
	char err[256];
	assert_int_equal(vecfs_row_check(v, &row, D, err, sizeof err), 0);

	float nanv[8], infv[8], ninf[8];
	memcpy(nanv, good, sizeof good);
	memcpy(infv, good, sizeof good);
	memcpy(ninf, good, sizeof good);
	nanv[3] = NAN;
	infv[5] = INFINITY;
	ninf[0] = -INFINITY;
	row.vec = nanv;
	expect_put_einval(v, &row, 1, D, 0, "NaN");
	row.vec = infv;
	expect_put_einval(v, &row, 1, D, 0, "+Inf");
	row.vec = ninf;
	expect_put_einval(v, &row, 1, D, 0, "-Inf");
	row.vec = good;
	expect_put_einval(v, &row, 1, D - 1, 0, "wrong dim (7)");
	float big[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
	row.vec = big;
	expect_put_einval(v, &row, 1, D + 1, 0, "wrong dim (9)");
	row.vec = good;

	static char longkey[VECFS_KEY_MAX + 2];
	memset(longkey, 'x', VECFS_KEY_MAX + 1);
	/* and UTF-8 strictly: truncated, a stray continuation byte, overlong
	 * forms, surrogates, past U+10FFFF, bytes that never start one */
	const char *badkeys[] = { "a/b", "/", "", ".", "..", "a\tb", "a\nb",
				  longkey, "a\xC3", "\x80", "a\xC0\x80" "b", "\xE0\x80\xAF",
				  "\xF0\x80\x80\xAF", "c\xED\xA0\x80", "d\xF4\x90\x80\x80",
				  "\xF5\x80\x80\x80", "\xFF" };
	for (size_t i = 0; i < sizeof badkeys / sizeof *badkeys; i++) {
		char what[64];
		snprintf(what, sizeof what, "bad key #%zu (len %zu)", i,
			 strlen(badkeys[i]));
		row.key = badkeys[i];
		row.keylen = strlen(badkeys[i]);
		expect_put_einval(v, &row, 1, D, 0, what);
	}
	/* UTF-8 keys of two, three and four bytes a character are fine */
	const char *goodkeys[] = { "\xC3\xA9", "\xE2\x82\xAC", "\xED\x9F\xBF", "\xF0\x9D\x84\x9E",
				   "\xF4\x8F\xBF\xBF" };
	for (size_t i = 0; i < sizeof goodkeys / sizeof *goodkeys; i++) {
		row.key = goodkeys[i];
		row.keylen = strlen(goodkeys[i]);
		assert_int_equal(vecfs_put(v, &row, 1, D, NULL, err, sizeof err), 0);
		assert_int_equal(vecfs_delete(v, goodkeys[i], strlen(goodkeys[i])), 0);
	}
	/* a key with an embedded NUL */
	row.key = "ab\0c";
	row.keylen = 4;
	expect_put_einval(v, &row, 1, D, 0, "key with NUL");
	/* a key of exactly VECFS_KEY_MAX bytes is fine */
	longkey[VECFS_KEY_MAX] = 0;
	row.key = longkey;
	row.keylen = VECFS_KEY_MAX;
	assert_int_equal(vecfs_put(v, &row, 1, D, NULL, err, sizeof err), 0);

	/* payload too large */
	char *payload = calloc(1, VECFS_PAYLOAD_MAX + 1);
	row.key = "p";
	row.keylen = 1;
	row.payload = payload;
	row.payload_len = VECFS_PAYLOAD_MAX + 1;
	expect_put_einval(v, &row, 1, D, 0, "payload too large");
	row.payload_len = VECFS_PAYLOAD_MAX;
	assert_int_equal(vecfs_put(v, &row, 1, D, NULL, err, sizeof err), 0);
	free(payload);
	row.payload = NULL;
	row.payload_len = 0;
	assert_int_equal(stats(v).records, 3);

	/* a batch with one bad row among good ones commits none of them */
	vecfs_row rows[6];
	memset(rows, 0, sizeof rows);
	const char *bk[6] = { "g0", "g1", "g2", "g3", NULL, "g5" };
	for (int i = 0; i < 6; i++) {
		rows[i].key = bk[i];
		rows[i].keylen = bk[i] ? strlen(bk[i]) : 0;
		rows[i].vec = i % 2 ? good : good2;
	}
	rows[3].vec = nanv;
	expect_put_einval(v, rows, 6, D, 3, "batch, row 3 NaN");
	rows[3].vec = good;
	rows[5].key = "g/5";
	rows[5].keylen = 3;
	expect_put_einval(v, rows, 6, D, 5, "batch, row 5 bad key");
	rows[5].key = "g5";
	rows[5].keylen = 2;
	for (int i = 0; i < 6; i++) {
		float tmp[8];
		uint32_t dim;
		if (bk[i])
			assert_int_equal(vecfs_get(v, bk[i], strlen(bk[i]), tmp, D,
						   &dim, NULL, 0, NULL), -ENOENT);
	}
	assert_int_equal(stats(v).next_key, nk);

	/* search with a wrong dimension */
	vecfs_results *r = NULL;
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	o.k = 3;
	assert_int_equal(vecfs_search(v, good, 1, D - 1, &o, &r, err, sizeof err),
			 -EINVAL);
	assert_int_equal(vecfs_search(v, big, 1, D + 1, &o, &r, err, sizeof err),
			 -EINVAL);
	o.exact = 1;
	assert_int_equal(vecfs_search(v, good, 1, D - 1, &o, &r, err, sizeof err),
			 -EINVAL);
	/* a NaN query vector */
	o.exact = 0;
	assert_int_equal(vecfs_search(v, nanv, 1, D, &o, &r, err, sizeof err),
			 -EINVAL);
	assert_string_equal(err, "query 1: value 4 is not finite");
	/* in a batch: the first value not finite is named, by query and
	 * value, wherever it lies (past the first eight values, or after
	 * them in the batch's tail) */
	float batch[5 * D];
	for (size_t i = 0; i < 5; i++)
		memcpy(batch + i * D, good, sizeof good);
	batch[4 * D + 6] = -INFINITY;
	assert_int_equal(vecfs_search(v, batch, 5, D, &o, &r, err, sizeof err), -EINVAL);
	assert_string_equal(err, "query 5: value 7 is not finite");
	batch[2 * D + 1] = NAN;
	assert_int_equal(vecfs_search(v, batch, 5, D, &o, &r, err, sizeof err), -EINVAL);
	assert_string_equal(err, "query 3: value 2 is not finite");
	batch[2 * D + 1] = 1.0f;
	batch[4 * D + 6] = 1.0f;
	batch[D - 1] = 3e38f; /* large, finite */
	assert_int_equal(vecfs_search(v, batch, 5, D, &o, &r, err, sizeof err), 0);
	vecfs_results_free(r);
	r = NULL;
	/* the good batch then goes in whole */
	assert_int_equal(vecfs_put(v, rows, 6, D, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).records, 3 + 6);
	fx_close(f);

	/* zero vector under cosine */
	v = fx_open(f, "cos");
	set_config(v, D, VECFS_COSINE);
	float zero[8] = { 0 };
	row.key = "z";
	row.keylen = 1;
	row.vec = zero;
	expect_put_einval(v, &row, 1, D, 0, "zero vector under cosine");
	rows[2].vec = zero;
	expect_put_einval(v, rows, 6, D, 2, "batch, zero vector under cosine");
	assert_int_equal(stats(v).records, 0);
	/* negative zeros are zero too; the least denormal alone is not */
	float negz[8], tiny[8] = { 0 };
	for (uint32_t i = 0; i < D; i++)
		negz[i] = -0.0f;
	tiny[D - 1] = 1e-45f;
	row.vec = negz;
	expect_put_einval(v, &row, 1, D, 0, "negative zeros under cosine");
	row.vec = tiny;
	assert_int_equal(vecfs_row_check(v, &row, D, err, sizeof err), 0);
	/* the first value that is not finite is the one named */
	float late[8];
	for (uint32_t i = 0; i < D; i++)
		late[i] = 1.0f;
	late[D - 1] = -INFINITY;
	row.vec = late;
	assert_int_equal(vecfs_row_check(v, &row, D, err, sizeof err), -EINVAL);
	char want[64];
	snprintf(want, sizeof want, "value %u is infinite", D);
	assert_string_equal(err, want);
	late[2] = NAN;
	assert_int_equal(vecfs_row_check(v, &row, D, err, sizeof err), -EINVAL);
	assert_string_equal(err, "value 3 is NaN");
	row.vec = good;
	assert_int_equal(vecfs_put(v, &row, 1, D, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).records, 1);
	/* the zero vector is a fine l2 row, and a zero cosine query is refused
	 * or answered, never a crash */
	o.exact = 1;
	int rc = vecfs_search(v, zero, 1, D, &o, &r, err, sizeof err);
	if (rc == 0)
		vecfs_results_free(r);
	else
		assert_int_equal(rc, -EINVAL);
}

/* ------------------------------------------------------------ 8. keys */

typedef struct keylist {
	char keys[64][32];
	size_t n;
} keylist;

static int collect_key(void *arg, const char *key, size_t keylen)
{
	keylist *kl = arg;
	if (kl->n < 64 && keylen < 32) {
		memcpy(kl->keys[kl->n], key, keylen);
		kl->keys[kl->n][keylen] = 0;
	}
	kl->n++;
	return 0;
}

static void expect_vec(vecfs *v, const char *key, const float *want, uint32_t D)
{
	float got[16];
	uint32_t dim = 0;
	int rc = vecfs_get(v, key, strlen(key), got, 16, &dim, NULL, 0, NULL);
	if (rc != 0)
		print_message("vecfs_get(%s): %d\n", key, rc);
	assert_int_equal(rc, 0);
	assert_int_equal(dim, D);
	assert_memory_equal(got, want, D * sizeof(float));
}

static void test_assigned_keys(void **state)
{
	fixture *f = *state;
	const uint32_t D = 4;
	vecfs *v = fx_open(f, NULL);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.auto_build = 0;
	assert_int_equal(vecfs_config_set(v, &c, NULL, 0), 0);
	assert_int_equal(stats(v).next_key, 0);

	float x[20][4];
	for (int i = 0; i < 20; i++)
		for (int j = 0; j < 4; j++)
			x[i][j] = (float)(i * 4 + j) + 0.5f;
	put_range(v, &x[0][0], 0, 5, D, NULL);
	assert_int_equal(stats(v).next_key, 5);
	put_range(v, &x[0][0], 5, 3, D, NULL);
	assert_int_equal(stats(v).next_key, 8);
	put_range(v, &x[0][0], 8, 4, D, NULL);
	assert_int_equal(stats(v).next_key, 12);
	assert_int_equal(stats(v).records, 12);
	for (int i = 0; i < 12; i++) {
		char key[16];
		snprintf(key, sizeof key, "%d", i);
		expect_vec(v, key, x[i], D);
	}
	float tmp[4];
	uint32_t dim;
	assert_int_equal(vecfs_get(v, "12", 2, tmp, 4, &dim, NULL, 0, NULL),
			 -ENOENT);

	keylist kl;
	memset(&kl, 0, sizeof kl);
	assert_int_equal(vecfs_keys(v, NULL, 0, 1000, collect_key, &kl), 0);
	assert_int_equal(kl.n, 12);
	for (size_t i = 1; i < kl.n; i++)
		assert_true(strcmp(kl.keys[i - 1], kl.keys[i]) < 0);

	/* within one batch the last row for a key wins */
	vecfs_row rows[5];
	memset(rows, 0, sizeof rows);
	const char *keys[5] = { "dup", "other", "dup", "3", "dup" };
	for (int i = 0; i < 5; i++) {
		rows[i].key = keys[i];
		rows[i].keylen = strlen(keys[i]);
		rows[i].vec = x[12 + i];
	}
	char err[256] = "";
	assert_int_equal(vecfs_put(v, rows, 5, D, NULL, err, sizeof err), 0);
	expect_vec(v, "dup", x[16], D);
	expect_vec(v, "other", x[13], D);
	expect_vec(v, "3", x[15], D); /* given keys upsert assigned ones */
	assert_int_equal(stats(v).records, 14);

	/* a query at the earlier "dup" rows finds only the final one */
	vecfs_results *r = search1(v, x[12], D, 20, 1);
	assert_int_equal(r->count[0], 14);
	int seen = 0;
	for (size_t i = 0; i < r->count[0]; i++)
		if (strcmp(r->hits[0][i].key, "dup") == 0) {
			seen++;
			double want = dist_ref(VECFS_L2, x[12], x[16], D);
			assert_true(fabs(r->hits[0][i].distance - want) <=
				    dist_tol(VECFS_L2, x[12], x[16], D, want));
		}
	assert_int_equal(seen, 1);
	vecfs_results_free(r);

	/* assigned keys continue after given keys were used */
	put_range(v, &x[0][0], 17, 2, D, NULL);
	assert_int_equal(stats(v).next_key, 14);
	expect_vec(v, "12", x[17], D);
	expect_vec(v, "13", x[18], D);
	assert_int_equal(stats(v).records, 16);
}

/* Many keys and a filter deleted in one commit: named keys (missing ones
 * and repeats skipped) and the filter's records go, nothing else; a bad
 * filter deletes nothing; results and verify agree afterwards, with a
 * generation active. */
static void test_delete_many(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	enum { N = 3000, D = 8 };
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 71, N, D, 12);
	vecfs_row *rows = calloc(N, sizeof *rows);
	char (*keys)[16] = calloc(N, 16), (*pay)[32] = calloc(N, 32);
	assert_true(rows && keys && pay);
	for (size_t i = 0; i < N; i++) {
		snprintf(keys[i], 16, "d%zu", i);
		snprintf(pay[i], 32, "{\"i\": %zu}", i);
		rows[i] = (vecfs_row){keys[i], strlen(keys[i]), ds.x + i * D, pay[i], strlen(pay[i])};
	}
	assert_int_equal(vecfs_put(v, rows, N, D, NULL, NULL, 0), 0);
	build(v, 1);
	/* every third key below 1500, one of them twice, and keys that are not there */
	vecfs_key *del = calloc(N, sizeof *del);
	size_t nd = 0;
	for (size_t i = 0; i < 1500; i += 3)
		del[nd++] = (vecfs_key){keys[i], strlen(keys[i])};
	del[nd++] = (vecfs_key){keys[3], strlen(keys[3])};
	del[nd++] = (vecfs_key){"nope", 4};
	del[nd++] = (vecfs_key){"a/b", 3};
	uint64_t gone = 0;
	char err[256] = "";
	/* a bad filter: nothing is deleted */
	assert_int_equal(vecfs_delete_many(v, del, nd, "{\"i\": {\"$gte\"", 14, &gone, err, sizeof err), -EINVAL);
	assert_true(err[0] != 0);
	assert_int_equal(stats(v).records, N);
	/* the keys, and the filter i >= 2500 (whose records are not named) */
	const char *flt = "{\"i\": {\"$gte\": 2500}}";
	assert_int_equal(vecfs_delete_many(v, del, nd, flt, strlen(flt), &gone, err, sizeof err), 0);
	assert_int_equal(gone, 500 + 500);
	assert_int_equal(stats(v).records, N - 1000);
	for (size_t i = 0; i < N; i++) {
		uint32_t d = 0;
		float vec[D];
		int want = (i < 1500 && i % 3 == 0) || i >= 2500 ? -ENOENT : 0;
		assert_int_equal(vecfs_get(v, keys[i], strlen(keys[i]), vec, D, &d, NULL, 0, NULL), want);
	}
	/* a filter alone, overlapping what is gone; then the search of every
	 * record's vector finds itself unless it was deleted */
	flt = "{\"i\": {\"$lt\": 300}}";
	assert_int_equal(vecfs_delete_many(v, NULL, 0, flt, strlen(flt), &gone, err, sizeof err), 0);
	assert_int_equal(gone, 200);
	assert_int_equal(stats(v).records, N - 1200);
	char msg[256];
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	vecfs_query_opts o = {.k = 1, .exact = 1};
	for (size_t i = 0; i < N; i += 37) {
		vecfs_results *r = search_opts(v, ds.x + i * D, 1, D, &o);
		int deleted = i < 300 || (i < 1500 && i % 3 == 0) || i >= 2500;
		assert_int_equal(r->count[0], 1);
		if (deleted)
			assert_true(key_index(r->hits[0][0].key, "d") != (long)i || r->hits[0][0].distance > 0);
		else
			assert_true(r->hits[0][0].distance == 0);
		vecfs_results_free(r);
	}
	/* "{}" matches every record */
	assert_int_equal(vecfs_delete_many(v, NULL, 0, "{}", 2, &gone, err, sizeof err), 0);
	assert_int_equal(gone, N - 1200);
	assert_int_equal(stats(v).records, 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	free(del);
	free(rows);
	free(keys);
	free(pay);
	ds_free(&ds);
}

/* ------------------------------------------------------------ 9. reopen */

static void test_persistence(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 2000, NQ = 10, K = 10;
	vecfs *v = fx_open(f, NULL);
	vecfs_config c;
	char err[256] = "";
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.dim = D;
	c.metric = VECFS_COSINE;
	c.auto_build = 0;
	c.nlist = 12;
	c.bits = 3;
	c.refine = 7;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	dataset ds;
	ds_make(&ds, 21, N, D, 16);

	/* rows with payloads */
	vecfs_row *rows = calloc(N, sizeof *rows);
	char (*keys)[16] = calloc(N, sizeof *keys);
	char (*pay)[24] = calloc(N, sizeof *pay);
	for (size_t i = 0; i < N; i++) {
		snprintf(keys[i], sizeof keys[i], "k%zu", i);
		snprintf(pay[i], sizeof pay[i], "payload-%zu", i);
		rows[i].key = keys[i];
		rows[i].keylen = strlen(keys[i]);
		rows[i].vec = ds.x + i * D;
		rows[i].payload = pay[i];
		rows[i].payload_len = strlen(pay[i]);
	}
	assert_int_equal(vecfs_put(v, rows, N, D, NULL, err, sizeof err), 0);
	uint64_t gen = build(v, 1);
	/* a few rows after the build (delta postings) and a delete */
	assert_int_equal(put_one(v, "late", ds.x + 5 * D, D), 0);
	del_key(v, "k7");
	vecfs_stats s0 = stats(v);

	float *qs = malloc(NQ * D * sizeof(float));
	for (size_t i = 0; i < NQ; i++)
		ds_fresh(&ds, qs + i * D);
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	o.k = K;
	vecfs_results *before = search_opts(v, qs, NQ, D, &o);
	for (size_t i = 0; i < NQ; i++)
		for (size_t h = 0; h < before->count[i]; h++) {
			const vecfs_hit *ht = &before->hits[i][h];
			if (strcmp(ht->key, "late") == 0)
				continue;
			char want[24];
			snprintf(want, sizeof want, "payload-%ld", key_index(ht->key, "k"));
			assert_int_equal(ht->payload_len, strlen(want));
			assert_memory_equal(ht->payload, want, strlen(want));
		}
	fx_close(f);

	v = fx_open(f, NULL);
	vecfs_config c2;
	assert_int_equal(vecfs_config_get(v, &c2), 0);
	assert_int_equal(c2.dim, D);
	assert_int_equal(c2.metric, VECFS_COSINE);
	assert_int_equal(c2.nlist, 12);
	assert_int_equal(c2.bits, 3);
	assert_int_equal(c2.refine, 7);
	assert_int_equal(c2.auto_build, 0);
	assert_int_equal(c2.nprobe, c.nprobe);
	assert_int_equal(c2.k, c.k);
	assert_true(vecfs_active(v) == gen);
	vecfs_stats s1 = stats(v);
	assert_int_equal(s1.records, s0.records);
	assert_int_equal(s1.records, N);
	assert_int_equal(s1.deleted, s0.deleted);
	assert_int_equal(s1.generations, s0.generations);
	assert_true(s1.active == gen);
	assert_int_equal(s1.next_key, s0.next_key);
	assert_int_equal(s1.dim, D);
	assert_int_equal(s1.metric, VECFS_COSINE);
	vecfs_gen_info gi;
	assert_int_equal(vecfs_gen_info_get(v, gen, &gi), 0);
	assert_int_equal(gi.state, VECFS_GEN_READY);
	assert_int_equal(gi.nlist, 12);
	assert_int_equal(gi.bits, 3);

	char pbuf[64];
	size_t plen = 0;
	float vec[16];
	uint32_t dim = 0;
	assert_int_equal(vecfs_get(v, "k42", 3, vec, D, &dim, pbuf, sizeof pbuf,
				   &plen), 0);
	assert_int_equal(plen, strlen("payload-42"));
	assert_memory_equal(pbuf, "payload-42", plen);
	assert_memory_equal(vec, ds.x + 42 * D, D * sizeof(float));
	assert_int_equal(vecfs_get(v, "k7", 2, vec, D, &dim, NULL, 0, NULL),
			 -ENOENT);
	assert_int_equal(vecfs_get(v, "late", 4, vec, D, &dim, NULL, 0, NULL), 0);

	vecfs_results *after = search_opts(v, qs, NQ, D, &o);
	assert_true(after->generation == gen);
	for (size_t i = 0; i < NQ; i++) {
		assert_int_equal(after->count[i], before->count[i]);
		for (size_t h = 0; h < after->count[i]; h++) {
			if (strcmp(after->hits[i][h].key, before->hits[i][h].key) != 0)
				print_message("query %zu rank %zu: %s before, %s after reopen\n",
					      i, h, before->hits[i][h].key,
					      after->hits[i][h].key);
			assert_string_equal(after->hits[i][h].key,
					    before->hits[i][h].key);
			assert_true(after->hits[i][h].distance ==
				    before->hits[i][h].distance);
			assert_int_equal(after->hits[i][h].payload_len,
					 before->hits[i][h].payload_len);
		}
	}
	vecfs_results_free(before);
	vecfs_results_free(after);
	free(qs);
	free(rows);
	free(keys);
	free(pay);
	ds_free(&ds);
}

/* ------------------------------------------------------------ 10. batch */

/* A batch answers each query as a search of it alone would; a larger batch
 * is searched in parts on every CPU, on one snapshot (engine/search.c:
 * parts of PART_ANN queries with an index, PART_EXACT a CPU without), and
 * answers alike too. */
static void test_batch_equals_single(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000, NQMAX = 70;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 31, N, D, 20);
	put_range(v, ds.x, 0, N, D, "k");

	float qs[70 * 16];
	for (size_t i = 0; i < NQMAX; i++)
		ds_fresh(&ds, qs + i * D);
	for (int pass = 0; pass < 4; pass++) {
		const size_t NQ = pass < 2 ? 5 : NQMAX;
		if (pass == 1) {
			build(v, 1);
			/* deltas and a delete too */
			put_range(v, qs, 0, 2, D, "q");
			del_key(v, "k3");
		}
		if (pass == 3) {
			/* roll back past a newer build: the rows written since the
			 * older one's are not covered by it, and are scanned */
			uint64_t older = vecfs_active(v);
			build(v, 1);
			put_range(v, ds.x, 0, 40, D, "u");
			char err[256] = "";
			assert_int_equal(vecfs_activate(v, older, err, sizeof err), 0);
		}
		for (int exact = 0; exact < 2; exact++) {
			vecfs_query_opts o;
			memset(&o, 0, sizeof o);
			o.k = 12;
			o.exact = exact;
			vecfs_results *b = search_opts(v, qs, NQ, D, &o);
			uint64_t probed = 0, reranked = 0, deltas = 0, uncovered = 0;
			for (size_t i = 0; i < NQ; i++) {
				vecfs_results *s = search_opts(v, qs + i * D, 1, D, &o);
				assert_int_equal(b->count[i], s->count[0]);
				assert_int_equal(b->count[i], 12);
				for (size_t h = 0; h < s->count[0]; h++) {
					if (strcmp(b->hits[i][h].key, s->hits[0][h].key) != 0)
						print_message("pass %d exact %d q %zu rank %zu: batch %s, single %s\n",
							      pass, exact, i, h, b->hits[i][h].key,
							      s->hits[0][h].key);
					assert_string_equal(b->hits[i][h].key,
							    s->hits[0][h].key);
					assert_true(fabsf(b->hits[i][h].distance -
							  s->hits[0][h].distance) <=
						    1e-6f * (1 + fabsf(s->hits[0][h].distance)));
				}
				assert_true(s->generation == b->generation);
				probed += s->explain.clusters_probed;
				reranked += s->explain.reranked;
				deltas += s->explain.delta_scanned;
				uncovered += s->explain.uncovered_scanned;
				vecfs_results_free(s);
			}
			/* explain is summed over the batch */
			assert_int_equal(b->nq, NQ);
			if (b->explain.clusters_probed != probed)
				print_message("batch clusters_probed %llu, singles sum %llu\n",
					      (unsigned long long)b->explain.clusters_probed,
					      (unsigned long long)probed);
			assert_true(b->explain.clusters_probed == probed);
			assert_true(b->explain.reranked == reranked);
			/* (the postings each pass scores depend on the order in
			 * which a batch meets the clusters: not compared) */
			assert_true(b->explain.delta_scanned == deltas);
			assert_true(b->explain.uncovered_scanned == uncovered);
			if (pass == 3 && !exact)
				assert_true(uncovered > 0 && deltas > 0);
			vecfs_results_free(b);
		}
	}
	ds_free(&ds);
}

/* A batch split among the CPUs sees one snapshot: while a writer puts and
 * deletes a row over and over, a batch of 64 copies of its vector finds it
 * in all 64 answers or in none. */
typedef struct churner {
	vecfs *v;
	const float *vec;
	_Atomic int stop;
	long ops, failed;
} churner;

static void *churn_row(void *arg)
{
	churner *c = arg;
	while (!c->stop) {
		/* no cmocka assertion off the test's thread */
		if (put_one(c->v, "w", c->vec, 16) != 0 || vecfs_delete(c->v, "w", 1) != 0)
			c->failed++;
		c->ops++;
	}
	return NULL;
}

static void test_batch_one_snapshot(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 77, 200, D, 4);
	put_range(v, ds.x, 0, 200, D, "k");
	float a[16], q[64 * 16];
	for (uint32_t i = 0; i < D; i++)
		a[i] = 50.0f + (float)i;
	for (int i = 0; i < 64; i++)
		memcpy(q + i * D, a, sizeof a);
	churner c = {v, a, 0, 0, 0};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, churn_row, &c), 0);
	vecfs_query_opts o = {.k = 1, .nprobe = 0, .refine = 0, .exact = 1};
	int mixed = 0, seen = 0;
	for (int it = 0; it < 3000; it++) {
		vecfs_results *r = search_opts(v, q, 64, D, &o);
		int n = 0;
		for (int i = 0; i < 64; i++)
			n += r->count[i] && !strcmp(r->hits[i][0].key, "w");
		mixed += n != 0 && n != 64;
		seen += n == 64;
		vecfs_results_free(r);
	}
	c.stop = 1;
	pthread_join(th, NULL);
	if (mixed)
		print_message("%d of 3000 batches saw two snapshots (%ld writes)\n", mixed, c.ops);
	assert_int_equal(mixed, 0);
	assert_true(seen > 0 && c.ops > 0);
	assert_int_equal(c.failed, 0);
	ds_free(&ds);
}

/* Location hints point into pages a writer may free and reuse while a
 * query reads them: a query's answers must come from bytes it checked, not
 * from whatever lies there later.  A writer rewrites rows (two versions
 * each) as fast as it can while queries run; every hit must be a row's key
 * at its exact distance to one of the row's two versions. */
typedef struct rewriter {
	vecfs *v;
	const float *a, *b; /* the versions */
	size_t n;
	uint32_t d;
	_Atomic int stop;
	long ops, failed;
} rewriter;

static void *rewrite_rows(void *arg)
{
	rewriter *w = arg;
	rng r = {.s = 99};
	while (!w->stop) {
		size_t x = rng_next(&r) % w->n;
		char key[32];
		snprintf(key, sizeof key, "k%zu", x);
		const float *vec = (rng_next(&r) & 1 ? w->a : w->b) + x * w->d;
		if (put_one(w->v, key, vec, w->d) != 0) /* (no cmocka off the test's thread) */
			w->failed++;
		w->ops++;
	}
	return NULL;
}

static void test_hints_under_writes(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000;
	dataset ds;
	vecfs *v = open_built(f, &ds, 23, N, D);
	float *b = malloc(N * D * sizeof(float));
	assert_non_null(b);
	for (size_t i = 0; i < N * D; i++)
		b[i] = ds.x[i] + 0.25f;
	rewriter w = {v, ds.x, b, N, D, 0, 0, 0};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, rewrite_rows, &w), 0);
	rng r = {.s = 5};
	long queries = 0, hits = 0, bad = 0;
	time_t t0 = time(NULL);
	while (time(NULL) - t0 < 3 || queries < 200) {
		size_t x = rng_next(&r) % N;
		vecfs_results *res = search1(v, ds.x + x * D, D, 10, 0);
		for (size_t h = 0; h < res->count[0]; h++) {
			const vecfs_hit *ht = &res->hits[0][h];
			long j = key_index(ht->key, "k");
			hits++;
			if (j < 0 || (size_t)j >= N) {
				if (bad++ < 5)
					print_message("hit '%s': no such key\n", ht->key);
				continue;
			}
			const float *q = ds.x + x * D;
			double da = dist_ref(VECFS_L2, q, ds.x + j * D, D);
			double db = dist_ref(VECFS_L2, q, b + j * D, D);
			double got = ht->distance, tol = 1e-4 * (1 + got);
			if (fabs(got - da) > tol && fabs(got - db) > tol && bad++ < 5)
				print_message("hit %s at %g: its versions are at %g and %g\n", ht->key,
					      got, da, db);
		}
		vecfs_results_free(res);
		queries++;
	}
	w.stop = 1;
	pthread_join(th, NULL);
	print_message("%ld queries, %ld hits, %ld writes: %ld bad hits\n", queries, hits, w.ops,
		      bad);
	assert_int_equal(bad, 0);
	assert_int_equal(w.failed, 0);
	assert_true(w.ops > 100);
	free(b);
	ds_free(&ds);
}

static double cpu_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The sampler's exact batches run on its own thread alone
 * (vf_search_threads(..., 1)): all the CPU time of the search is the
 * calling thread's, so the sampler's duty cycle, which counts its thread's
 * time, bounds it all.  The same batch through vecfs_search() takes other
 * threads' time too where there are several CPUs (the check can see them),
 * and both give the same results. */
static void test_sampler_search_serial(void **state)
{
	fixture *f = *state;
	const uint32_t D = 64;
	const size_t N = 20000, NQ = 64;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 41, N, D, 20);
	put_range(v, ds.x, 0, N, D, "k");
	float *qs = malloc(sizeof(float) * NQ * D);
	assert_non_null(qs);
	for (size_t i = 0; i < NQ; i++)
		ds_fresh(&ds, qs + i * D);
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	o.k = 10;
	o.exact = 1;
	o.uncounted = 1;
	for (int serial = 1; serial >= 0; serial--) {
		double thr = 0, proc = 0;
		vecfs_results *r = NULL;
		for (int round = 0; round < 3; round++) {
			char err[256] = "";
			vecfs_results_free(r);
			double t0 = cpu_s(CLOCK_THREAD_CPUTIME_ID), p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
			int rc = serial ? vf_search_threads(v, qs, NQ, D, &o, 1, &r, err, sizeof err)
					: vecfs_search(v, qs, NQ, D, &o, &r, err, sizeof err);
			proc += cpu_s(CLOCK_PROCESS_CPUTIME_ID) - p0;
			thr += cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0;
			assert_int_equal(rc, 0);
		}
		print_message("%s: %.1f ms on this thread, %.1f ms in all\n",
			      serial ? "one thread" : "the store's threads", thr * 1e3, proc * 1e3);
		if (serial)
			assert_true(proc - thr < 0.2 * thr + 0.002);
		else if (v->threads > 1)
			assert_true(proc - thr > 0.3 * thr);
		/* the same results either way: exact, so the true neighbours */
		for (size_t i = 0; i < NQ; i++)
			check_exact(r->hits[i], r->count[i], VECFS_L2, ds.x, N, D, NULL, "k",
				    qs + i * D, 10);
		vecfs_results_free(r);
	}
	free(qs);
	ds_free(&ds);
}

/* k-means' training sample: 128 rows a cluster and 20 iterations for
 * small sets, the whole set when it is smaller, and a cost bound that shrinks
 * it for large ones, never below 40 rows a cluster or 20,000 rows. */
static void test_train_sample(void **state)
{
	(void)state;
	int it = 0;
	/* glove-100: 100,000 rows, 316 clusters */
	assert_int_equal(vf_train_sample(100000, 316, 100, &it), 316 * 128);
	assert_int_equal(it, 20);
	/* fashion-mnist-784: the whole set */
	assert_int_equal(vf_train_sample(6000, 77, 784, &it), 6000);
	assert_int_equal(it, 20);
	/* few clusters: at least 20,000 rows */
	assert_int_equal(vf_train_sample(1000000, 10, 128, &it), 20000);
	assert_int_equal(it, 8);
	/* the 1M set: 128 a cluster fits the bound */
	assert_int_equal(vf_train_sample(1000000, 2000, 128, &it), 2000 * 128);
	/* within the bound: shrunk below 128 a cluster */
	uint64_t ns = vf_train_sample(4000000, 3000, 256, &it);
	assert_true(ns < 3000 * 128 && ns > 3000 * 40);
	assert_true((double)ns * 3000 * 256 * it <= 1.2e12);
	/* 10M rows: the floor of 40 a cluster */
	assert_int_equal(vf_train_sample(10000000, 6325, 128, &it), 6325 * 40);
	/* wide vectors: at most 256 MiB of sample, above the floor */
	ns = vf_train_sample(100000, 316, 2048, &it);
	assert_int_equal(ns, 32768);
	/* the floor wins over the memory bound, as before */
	assert_int_equal(vf_train_sample(200000, 447, 16384, &it), 20000);
}

/* vecfs_parallel(): every argument taken once, with any count (more than
 * 16 in rounds), from two threads at once (the handle's kept threads
 * shared: one busy, the other call starts threads of its own), and in a
 * child forked after the kept threads started (it has none of them); a
 * caller pinned to one CPU has its second job run on another (a thread
 * beside a pinned one once took turns with it on its CPU). */
typedef struct pjob {
	_Atomic int runs;
	int cpu;
} pjob;

static void pjob_run(void *arg)
{
	pjob *j = arg;
	j->cpu = sched_getcpu();
	for (volatile int i = 0; i < 20000; i++)
		;
	atomic_fetch_add(&j->runs, 1);
}

typedef struct pcaller {
	vecfs *v;
	int bad;
} pcaller;

static void *pcaller_run(void *arg)
{
	pcaller *c = arg;
	for (int it = 0; it < 300; it++) {
		pjob jobs[5];
		memset(jobs, 0, sizeof jobs);
		vecfs_parallel(c->v, pjob_run, jobs, sizeof jobs[0], 1 + it % 5);
		for (int i = 0; i < 1 + it % 5; i++)
			c->bad += atomic_load(&jobs[i].runs) != 1;
		for (int i = 1 + it % 5; i < 5; i++)
			c->bad += atomic_load(&jobs[i].runs) != 0;
	}
	return NULL;
}

static void test_parallel(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	assert_int_equal(vecfs_open(f->dir, &f->v, err, sizeof err), 0);
	assert_true(vecfs_cpus(f->v) >= 1);
	for (int n = 0; n <= 40; n++) {
		pjob jobs[40];
		memset(jobs, 0, sizeof jobs);
		vecfs_parallel(f->v, pjob_run, jobs, sizeof jobs[0], n);
		for (int i = 0; i < 40; i++)
			assert_int_equal(atomic_load(&jobs[i].runs), i < n);
	}
	/* the kept threads are named, so that tests and people can tell them
	 * from the threads that come and go */
	if (vecfs_cpus(f->v) >= 2) {
		int named = 0;
		DIR *d = opendir("/proc/self/task");
		assert_non_null(d);
		for (struct dirent *e; (e = readdir(d));) {
			char path[300], comm[32] = "";
			snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
			FILE *fp = fopen(path, "r");
			if (!fp)
				continue;
			if (fgets(comm, sizeof comm, fp))
				named += strncmp(comm, VF_KEPT_THREAD_NAME "\n", sizeof comm) == 0;
			fclose(fp);
		}
		closedir(d);
		assert_true(named >= 1);
	}
	pcaller c[2] = {{f->v, 0}, {f->v, 0}};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, pcaller_run, &c[1]), 0);
	pcaller_run(&c[0]);
	pthread_join(th, NULL);
	assert_int_equal(c[0].bad + c[1].bad, 0);

#if !defined(__SANITIZE_THREAD__) /* (TSan cannot start threads in a forked child) */
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(30); /* (a wait for a thread it does not have: killed) */
		pjob jobs[3];
		memset(jobs, 0, sizeof jobs);
		vecfs_parallel(f->v, pjob_run, jobs, sizeof jobs[0], 3);
		_exit(atomic_load(&jobs[0].runs) == 1 && atomic_load(&jobs[1].runs) == 1 &&
		      atomic_load(&jobs[2].runs) == 1 ? 0 : 1);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
#endif

	cpu_set_t all, one;
	assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
	if (CPU_COUNT(&all) >= 2 && vecfs_cpus(f->v) >= 2) {
		int here = 0; /* the first of them, where the first kept thread is */
		while (!CPU_ISSET(here, &all))
			here++;
		CPU_ZERO(&one);
		CPU_SET(here, &one);
		assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
		for (int it = 0; it < 20; it++) {
			pjob jobs[2];
			memset(jobs, 0, sizeof jobs);
			vecfs_parallel(f->v, pjob_run, jobs, sizeof jobs[0], 2);
			assert_int_equal(jobs[0].cpu, here);
			assert_int_not_equal(jobs[1].cpu, here);
		}
		assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof all, &all), 0);
	}

	/* vecfs_cpus() counts the CPUs the program started on, not the
	 * machine's: this program run again on one CPU (as under taskset or
	 * in a container's cpuset) reports 1, and on all of them their count */
	int want = CPU_COUNT(&all) < 16 ? CPU_COUNT(&all) : 16;
	assert_int_equal(vecfs_cpus(f->v), want);
	for (int pass = 0; pass < 2 && CPU_COUNT(&all) >= 2; pass++) {
		fflush(NULL);
		pid_t cp = fork();
		assert_true(cp >= 0);
		if (cp == 0) {
			int first = 0;
			while (!CPU_ISSET(first, &all))
				first++;
			CPU_ZERO(&one);
			CPU_SET(first, &one);
			if (pass == 0 && sched_setaffinity(0, sizeof one, &one) != 0)
				_exit(100);
			setenv("VF_TEST_CPUS_DIR", f->dir, 1);
			execl("/proc/self/exe", "test_search", (char *)NULL);
			_exit(101);
		}
		int cst = 0;
		assert_int_equal(waitpid(cp, &cst, 0), cp);
		assert_true(WIFEXITED(cst));
		assert_int_equal(WEXITSTATUS(cst), pass == 0 ? 1 : want);
	}
}

/* A pool's kept threads after fork(): a child has none of them.  Its
 * vf_pool_free() leaves the copies of their mutexes and condition
 * variables alone (glibc's pthread_cond_destroy() waits for the waiters
 * the parent had, forever); and a process that has its pool's maker's pid
 * without being it (pid 1 of a nested PID namespace here, or any process
 * once that pid is free again) starts threads for the jobs like any
 * child, not waiting for kept threads it does not have.  Not under TSan,
 * which cannot start threads in a forked child. */
#if !defined(__SANITIZE_THREAD__)
static void *pool_job(void *arg)
{
	atomic_fetch_add((_Atomic int *)arg, 1);
	return NULL;
}

/* every job of a vf_parallel_on() on p run once: 0 or 1 */
static int pool_runs_all(vf_pool *p)
{
	_Atomic int runs[VF_PARALLEL_MAX];
	for (int i = 0; i < VF_PARALLEL_MAX; i++)
		atomic_init(&runs[i], 0);
	vf_parallel_on(p, pool_job, runs, sizeof runs[0], VF_PARALLEL_MAX);
	for (int i = 0; i < VF_PARALLEL_MAX; i++)
		if (atomic_load(&runs[i]) != 1)
			return 1;
	return 0;
}

static void pool_timeout(int sig)
{
	(void)sig;
	_exit(99); /* (a handler: pid 1 of a namespace ignores SIGALRM's default) */
}

/* fork(); the child runs fn(p) within 10 s and exits with what it returns:
 * the child's exit status (99: it hung) */
static int pool_in_child(vf_pool *p, int (*fn)(vf_pool *))
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGALRM, pool_timeout);
		alarm(10);
		_exit(fn(p));
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static int pool_free_child(vf_pool *p)
{
	vf_pool_free(p);
	return 0;
}

static int pool_reused_pid(vf_pool *p)
{
	/* this process is pid 1 of its namespace, as the pool's maker was of
	 * its own: a child in a namespace of its own has that pid too */
	(void)p;
	vf_pool *q = vf_pool_new();
	if (!q || pool_runs_all(q)) /* (kept threads started) */
		return 2;
	if (unshare(CLONE_NEWPID) != 0)
		return 77;
	int rc = pool_in_child(q, pool_runs_all);
	vf_pool_free(q);
	return rc;
}

#endif

static void test_pool_fork(void **state)
{
	(void)state;
#if defined(__SANITIZE_THREAD__)
	skip();
#else
	vf_pool *p = vf_pool_new();
	if (!p)
		skip(); /* one CPU: no pool */
	assert_int_equal(pool_runs_all(p), 0); /* a kept thread started and waits */
	assert_int_equal(pool_in_child(p, pool_runs_all), 0);
	assert_int_equal(pool_in_child(p, pool_free_child), 0);
	assert_int_equal(pool_runs_all(p), 0);
	vf_pool_free(p);

	/* the maker pid 1 of a new PID namespace (root only) */
	fflush(NULL);
	pid_t h = fork();
	assert_true(h >= 0);
	if (h == 0) {
		if (unshare(CLONE_NEWPID) != 0)
			_exit(77);
		_exit(pool_in_child(NULL, pool_reused_pid));
	}
	int st = 0;
	assert_int_equal(waitpid(h, &st, 0), h);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		skip(); /* (no CAP_SYS_ADMIN) */
	assert_int_equal(WEXITSTATUS(st), 0);
#endif
}

/* The child of test_parallel(): exits with vecfs_cpus() of the store at
 * dir, opened read-only beside the parent's handle. */
static int cpus_child(const char *dir)
{
	vecfs *v = NULL;
	char err[256] = "";
	if (vecfs_open_readonly(dir, &v, err, sizeof err) != 0)
		return 102;
	int n = vecfs_cpus(v);
	vecfs_close(v);
	return n;
}

int main(void)
{
	const char *cpus_dir = getenv("VF_TEST_CPUS_DIR");
	if (cpus_dir)
		return cpus_child(cpus_dir);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_exact_equals_brute_force, fx_setup, fx_teardown),
	cmocka_unit_test_setup_teardown(test_first_pass_tables, fx_setup, fx_teardown),
			cmocka_unit_test_setup_teardown(test_recall_default_settings, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_min_k_live, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_parallel, fx_setup, fx_teardown),
		cmocka_unit_test(test_pool_fork),
		cmocka_unit_test_setup_teardown(test_min_k_few_clusters, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_overflowing_distances, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_delta_postings_found, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_many_deltas_in_one_put, fx_setup, fx_teardown),
		cmocka_unit_test(test_probe_selection),
		cmocka_unit_test(test_probe_within),
		cmocka_unit_test(test_kth_smallest),
		cmocka_unit_test_setup_teardown(test_deletes_never_returned, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_upsert_moves_vector, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_bad_input_rejected, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_assigned_keys, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_persistence, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_delete_many, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_batch_equals_single, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_batch_one_snapshot, fx_setup, fx_teardown),
		cmocka_unit_test(test_train_sample),
		cmocka_unit_test_setup_teardown(test_sampler_search_serial, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stale_location_hints, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_hints_under_writes, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_location_hints_filled_at_open, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_located_clusters_follow_writes, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_pages_read_counted, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_prefetch_same_results, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_byte_vectors_same_results, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_prefetch_calms_down, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_prefetch_skips_block_keys, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_search_follows_meta, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_probe_first_look, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_location_hints_sized_to_memory, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
