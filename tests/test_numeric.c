/*
 * test_numeric.c - numbers at the edges of float32: the exact distances of
 * every kernel table against a double-precision reference for magnitudes
 * 1e-38 .. 3e38, exact search at tiny and huge scales under each metric,
 * and outliers that may not spoil the index for ordinary records.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "math/kernels.h"
#include "math/kmeans.h"
#include "testutil.h"
#include "vecfs.h"

/* ------------------------------------------------------------ kernels */

/* The tables this CPU has, NULL-terminated. */
static const vf_kernels *tables[5];

static const vf_kernels *const *all_tables(void)
{
	static const char *const names[] = {"scalar", "avx2", "avx512", "avx512vnni"};
	int n = 0;
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (vf_kernels_named(names[i]))
			tables[n++] = vf_kernels_named(names[i]);
	tables[n] = NULL;
	return tables;
}

/* A float of magnitude about 10^e (its sign and mantissa random), the
 * exponent spread over [e - spread, e + spread] and kept inside the
 * finite range. */
static float at_scale(rng *r, double e, double spread)
{
	double x = e + spread * (2 * rng_unif(r) - 1);
	if (x > 38.5)
		x = 38.5;
	if (x < -45)
		x = -45;
	double m = pow(10, x) * (0.5 + rng_unif(r));
	float f = (float)m;
	if (!isfinite(f))
		f = FLT_MAX;
	return rng_unif(r) < 0.5 ? -f : f;
}

/* The reference: what the metric's exact distance is, in double. */
static double ref_l2(const float *a, const float *b, uint32_t d)
{
	double s = 0;
	for (uint32_t i = 0; i < d; i++)
		s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
	return s;
}

static double ref_dot(const float *a, const float *b, uint32_t d, double *mag)
{
	double s = 0, m = 0;
	for (uint32_t i = 0; i < d; i++) {
		s += (double)a[i] * b[i];
		m += fabs((double)a[i] * b[i]);
	}
	*mag = m;
	return s;
}

/* got (double) against the reference: relative 2^-20 of the sum of the
 * magnitudes of the terms (float accumulation); where the reference is
 * past float32, got is too. */
static void check_close(const char *what, const char *kn, double e, uint32_t d, double got,
			double want, double mag)
{
	int ok;
	if (fabs(want) > FLT_MAX)
		ok = fabs(got) > FLT_MAX * 0.999 && (got > 0) == (want > 0);
	else
		ok = fabs(got - want) <= mag * 0x1p-20 + 0x1p-149 * d;
	if (!ok)
		print_message("%s %s 1e%g d %u: got %.9g, want %.9g (terms %.3g)\n", what, kn, e,
			      d, got, want, mag);
	assert_true(ok);
}

/* Every table's l2sq, dot and cosine of records against queries whose
 * components are about 10^e, for e from -38 to 38 (and 3e38): within
 * float32 accuracy of the double reference, never NaN, infinite only
 * where the reference is past float32. */
static void test_kernels_across_magnitudes(void **state)
{
	(void)state;
	static const uint32_t dims[] = {1, 4, 7, 16, 33, 128};
	rng r = {.s = 7};
	float a[128], b[128];
	for (const vf_kernels *const *k = all_tables(); *k; k++)
		for (int ei = -38; ei <= 39; ei++) {
			double e = ei == 39 ? 38.47 : ei;
			for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
				for (int rep = 0; rep < 4; rep++) {
					uint32_t d = dims[di];
					/* rep 0, 1: both at 10^e; 2: b ordinary; 3:
					 * exponents spread 8 decades */
					for (uint32_t i = 0; i < d; i++) {
						a[i] = at_scale(&r, e, rep == 3 ? 4 : 0.3);
						b[i] = rep == 2 ? at_scale(&r, 0, 1)
						       : rep == 1 ? a[i] * (1 + 1e-3f * (float)rng_gauss(&r))
								  : at_scale(&r, e, rep == 3 ? 4 : 0.3);
						if (!isfinite(b[i]))
							b[i] = a[i];
					}
					double mag, w = ref_l2(a, b, d);
					check_close("l2sq", (*k)->name, e, d, vf_l2sq_exact(*k, a, b, d),
						    w, w);
					w = ref_dot(a, b, d, &mag);
					check_close("dot", (*k)->name, e, d, vf_dot_exact(*k, a, b, d), w,
						    mag);
					/* cosine: a unit query against the raw b */
					double na = 0, nb = 0;
					for (uint32_t i = 0; i < d; i++)
						na += (double)a[i] * a[i];
					float qa[128];
					for (uint32_t i = 0; i < d; i++) {
						qa[i] = (float)(a[i] / sqrt(na));
						nb += (double)b[i] * b[i];
					}
					double qb = ref_dot(qa, b, d, &mag);
					double cw = 2 * (1 - qb / sqrt(nb));
					if (cw < 0)
						cw = 0;
					double cg = vf_cosine_exact(*k, qa, b, d);
					if (!(fabs(cg - cw) <= 1e-5))
						print_message("cosine %s 1e%g d %u: got %.9g, want %.9g\n",
							      (*k)->name, e, d, cg, cw);
					assert_true(fabs(cg - cw) <= 1e-5);
				}
		}
}

/* The index space of a cosine vector: unit length at every magnitude. */
static void test_unit_at_every_scale(void **state)
{
	(void)state;
	rng r = {.s = 9};
	float a[16], u[16];
	for (int e = -45; e <= 38; e++) {
		for (int i = 0; i < 16; i++)
			a[i] = at_scale(&r, e, 0.3);
		assert_int_equal(vf_to_index_space(VECFS_COSINE, a, u, 16), 0);
		double n = 0;
		for (int i = 0; i < 16; i++) {
			assert_true(isfinite(u[i]));
			n += (double)u[i] * u[i];
		}
		if (fabs(n - 1) > 1e-5)
			print_message("1e%d: |u|^2 = %.9g\n", e, n);
		assert_true(fabs(n - 1) <= 1e-5);
	}
}

/* The nearest centroid of a point whose dots overflow float32: by the
 * double distance, not the first of the centroids tied at -inf. */
static void test_nearest_past_float(void **state)
{
	(void)state;
	float cent[3 * 2] = {1, 1, 2, 2, -1, 5}, x[2] = {3e38f, 3e38f};
	vf_cindex ci;
	assert_int_equal(vf_cindex_init(&ci, cent, 3, 2), 0);
	uint32_t out = 9;
	float dist;
	vf_nearest(&ci, x, 1, &out, &dist, 1);
	assert_int_equal(out, 1);
	assert_true(dist == -INFINITY);
	vf_cindex_free(&ci);
}

/* ------------------------------------------------------------ exact search */

#define XD 8
#define XN 300
#define XQ 20

/* For each query the hits are the k records nearest by the double
 * reference (its ranking, to 1e-6 of the distances' scale), each
 * distance that reference rounded to float32 (inf past it). */
static void check_ranking(vecfs *v, vecfs_metric m, const float *x, size_t n, const float *q,
			  size_t nq, uint32_t k, int exact)
{
	vecfs_query_opts o = {.k = k, .exact = exact};
	vecfs_results *res = search_opts(v, q, nq, XD, &o);
	double *all = malloc(sizeof(double) * n), *sorted = malloc(sizeof(double) * n);
	assert_non_null(all);
	assert_non_null(sorted);
	for (size_t i = 0; i < nq; i++) {
		const float *qi = q + i * XD;
		double scale = 0;
		for (size_t j = 0; j < n; j++) {
			all[j] = dist_ref(m, qi, x + j * XD, XD);
			double s = m == VECFS_COSINE ? 1
				   : m == VECFS_L2   ? sqnorm(qi, XD) + sqnorm(x + j * XD, XD)
						     : sqrt(sqnorm(qi, XD) * sqnorm(x + j * XD, XD));
			if (s > scale)
				scale = s;
		}
		memcpy(sorted, all, sizeof(double) * n);
		for (size_t a = 1; a < n; a++) /* insertion sort */
			for (size_t b = a; b > 0 && sorted[b - 1] > sorted[b]; b--) {
				double t = sorted[b];
				sorted[b] = sorted[b - 1];
				sorted[b - 1] = t;
			}
		assert_int_equal(res->count[i], k < n ? k : n);
		for (size_t h = 0; h < res->count[i]; h++) {
			long j = key_index(res->hits[i][h].key, "x");
			assert_true(j >= 0 && (size_t)j < n);
			double tol = 1e-6 * scale;
			if (!(all[j] <= sorted[h] + tol))
				print_message("%s %s query %zu rank %zu: %s at %.9g, the rank's %.9g\n",
					      vecfs_metric_name(m), exact ? "exact" : "ann", i, h,
					      res->hits[i][h].key, all[j], sorted[h]);
			assert_true(all[j] <= sorted[h] + tol);
			float want = (float)all[j], got = res->hits[i][h].distance;
			int ok = isinf(want) ? got == want
					      : fabs(got - all[j]) <= 1e-4 * fabs(all[j]) + tol + 0x1p-149;
			if (!ok)
				print_message("%s query %zu rank %zu: distance %.9g, want %.9g\n",
					      vecfs_metric_name(m), i, h, got, all[j]);
			assert_true(ok);
		}
	}
	vecfs_results_free(res);
	free(all);
	free(sorted);
}

/* Records and queries with every component about `scale` (Gaussian
 * times scale), exact search with and without a generation. */
static void exact_at_scale(fixture *f, vecfs_metric m, float scale, const char *sub)
{
	vecfs *v = fx_open(f, sub);
	set_config(v, XD, m);
	rng r = {.s = 11};
	float *x = malloc(sizeof(float) * XN * XD), q[XQ * XD];
	assert_non_null(x);
	for (size_t i = 0; i < XN * XD; i++)
		x[i] = (float)rng_gauss(&r) * scale;
	for (size_t i = 0; i < XQ * XD; i++)
		q[i] = (float)rng_gauss(&r) * scale;
	/* the queries' own vectors among the records too */
	memcpy(x, q, sizeof q);
	put_range(v, x, 0, XN, XD, "x");
	check_ranking(v, m, x, XN, q, XQ, 10, 1);
	build(v, 1);
	check_ranking(v, m, x, XN, q, XQ, 10, 1);
	if (getenv("ANN_ALL") || (scale > 1e-15f && scale < 1e15f))
		check_ranking(v, m, x, XN, q, XQ, 1, 0);
	free(x);
	fx_close(f);
}

static void test_exact_tiny_and_huge(void **state)
{
	static const vecfs_metric ms[] = {VECFS_L2, VECFS_COSINE, VECFS_DOT};
	static const float scales[] = {1e-30f, 1e20f, 1e-19f, 3e18f, 1e-12f, 1e12f};
	char sub[32];
	for (int mi = 0; mi < 3; mi++)
		for (int si = 0; si < 6; si++) {
			snprintf(sub, sizeof sub, "s%d_%d", mi, si);
			print_message("%s at %g\n", vecfs_metric_name(ms[mi]), scales[si]);
			exact_at_scale(*state, ms[mi], scales[si], sub);
		}
}

/* The cases one by one: (1e20,0,0,0) and (1e-30,0,0,0) are at cosine
 * distance 0 from (1,0,0,0), ahead of a record at 0.29. */
static void test_cosine_axis(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	set_config(v, 4, VECFS_COSINE);
	float big[4] = {1e20f, 0, 0, 0}, tiny[4] = {1e-30f, 0, 0, 0}, mid[4] = {1, 0.9f, 0, 0};
	float q[4] = {1, 0, 0, 0};
	assert_int_equal(put_one(v, "big", big, 4), 0);
	assert_int_equal(put_one(v, "tiny", tiny, 4), 0);
	assert_int_equal(put_one(v, "mid", mid, 4), 0);
	vecfs_results *r = search1(v, q, 4, 3, 1);
	assert_int_equal(r->count[0], 3);
	assert_true(r->hits[0][0].distance == 0 && r->hits[0][1].distance == 0);
	assert_string_equal(r->hits[0][2].key, "mid");
	vecfs_results_free(r);
}

/* ------------------------------------------------------------ outliers */

#define OD 32
#define ON 3000
#define OQ 200

/* Fresh queries like ds's records: recall@10 >= 0.95 at the defaults and
 * with every cluster probed; record `self` is found by its own vector (by
 * an exact search when `exact`). */
static void ordinary_recall(vecfs *v, dataset *ds, size_t self, int exact)
{
	float *q = malloc(sizeof(float) * OQ * OD);
	assert_non_null(q);
	for (size_t i = 0; i < OQ; i++)
		ds_fresh(ds, q + i * OD);
	vecfs_query_opts ex = {.k = 10, .exact = 1}, o = {.k = 10}, all = {.k = 10, .nprobe = 100000};
	vecfs_results *e = search_opts(v, q, OQ, OD, &ex), *a = search_opts(v, q, OQ, OD, &o),
		      *b = search_opts(v, q, OQ, OD, &all);
	double ra = recall_keys(a, e), rb = recall_keys(b, e);
	print_message("recall@10 %.3f at the defaults, %.3f all clusters\n", ra, rb);
	assert_true(ra >= 0.95);
	assert_true(rb >= 0.95);
	vecfs_results_free(a);
	vecfs_results_free(b);
	vecfs_results_free(e);
	vecfs_results *r = search1(v, ds->x + self * OD, OD, 1, exact);
	assert_int_equal(r->count[0], 1);
	assert_true(key_index(r->hits[0][0].key, "x") == (long)self);
	vecfs_results_free(r);
	free(q);
}

/* One record at `scale` times an ordinary one among ON clustered
 * records: ordinary queries keep recall@10 >= 0.95 at the defaults (and
 * with every cluster probed), and the outlier is found by its own vector. */
static void outlier_recall(fixture *f, vecfs_metric m, float scale, const char *sub)
{
	vecfs *v = fx_open(f, sub);
	set_config(v, OD, m);
	dataset ds;
	ds_make(&ds, 5, ON, OD, 30);
	for (uint32_t j = 0; j < OD; j++)
		ds.x[(ON / 2) * OD + j] *= scale;
	put_range(v, ds.x, 0, ON, OD, "x");
	build(v, 1);
	print_message("%s outlier x%g\n", vecfs_metric_name(m), scale);
	ordinary_recall(v, &ds, ON / 2, 0);
	ds_free(&ds);
	fx_close(f);
}

static void test_outlier_l2(void **state)
{
	outlier_recall(*state, VECFS_L2, 1e13f, "a");
	outlier_recall(*state, VECFS_L2, 1e11f, "b");
	outlier_recall(*state, VECFS_L2, 1e17f, "c");
}

static void test_outlier_dot(void **state)
{
	outlier_recall(*state, VECFS_DOT, 1e13f, "a");
}

static void test_outlier_cosine(void **state)
{
	outlier_recall(*state, VECFS_COSINE, 1e13f, "a");
}

/* One record with a component at 3e38 (and one at 1e-30 scale): every
 * centroid finite, recall of ordinary queries kept, the record found by
 * its own vector. */
static void huge_component(fixture *f, vecfs_metric m, const char *sub)
{
	vecfs *v = fx_open(f, sub);
	set_config(v, OD, m);
	print_message("%s, a component at 3e38\n", vecfs_metric_name(m));
	dataset ds;
	ds_make(&ds, 6, ON, OD, 30);
	ds.x[7 * OD + 3] = 3e38f;
	for (uint32_t j = 0; j < OD; j++)
		ds.x[9 * OD + j] *= 1e-30f;
	put_range(v, ds.x, 0, ON, OD, "x");
	uint64_t gen = build(v, 1);
	vf_txn *txn;
	vf_gen *g;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_gen_get(v, txn, gen, &g), 0);
	size_t bad = 0;
	for (size_t i = 0; i < (size_t)g->meta.nlist * OD; i++)
		bad += !isfinite(g->centroids[i]);
	vf_gen_put(v, g);
	vf_read_end(v->store, txn);
	assert_int_equal(bad, 0);
	/* a query whose |q|^2 is past float32 finds it by an exact search
	 * (the index's estimates are float32) */
	ordinary_recall(v, &ds, 7, m != VECFS_COSINE);
	ds_free(&ds);
	fx_close(f);
}

static void test_huge_component(void **state)
{
	huge_component(*state, VECFS_COSINE, "c");
	huge_component(*state, VECFS_L2, "l");
	huge_component(*state, VECFS_DOT, "d");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernels_across_magnitudes),
		cmocka_unit_test(test_unit_at_every_scale),
		cmocka_unit_test(test_nearest_past_float),
		cmocka_unit_test_setup_teardown(test_exact_tiny_and_huge, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_cosine_axis, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_outlier_l2, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_outlier_dot, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_outlier_cosine, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_huge_component, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
