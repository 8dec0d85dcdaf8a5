/*
 * test_recall.c - the recall target: with nprobe 0 (the default) a query
 * chooses how many clusters to probe so that the mean recall@k reaches
 * the target (config recall_target, or the query's own), from the
 * calibration stored with each generation; a fixed nprobe still wins
 * where it is given.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "handle.h"
#include "testutil.h"
#include "vecfs.h"

#define D 16
#define N 20000
#define NQ 300

/* One Gaussian blob: the hard case for an inverted file (every cluster
 * borders many others), so the number of clusters matters. */
static vecfs *blob_store(fixture *f, dataset *ds, vecfs_metric m)
{
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, m);
	ds_make(ds, 77, N, D, 1);
	put_range(v, ds->x, 0, N, D, "b");
	build(v, 1);
	return v;
}

static void fresh_queries(dataset *ds, float *q, size_t n, float spread)
{
	for (size_t i = 0; i < n; i++) {
		ds_fresh(ds, q + i * D);
		for (uint32_t j = 0; j < D; j++)
			q[i * D + j] = ds->centers[j] + spread * (q[i * D + j] - ds->centers[j]);
	}
}

/* Each target is met on fresh queries, with fewer clusters for lower
 * targets; explain says which target ran. */
static void check_targets(vecfs *v, const float *q, size_t nq, uint32_t k)
{
	static const float targets[] = {0.9f, 0.95f, 0.99f};
	vecfs_query_opts ex = {.k = k, .exact = 1};
	vecfs_results *e = search_opts(v, q, nq, D, &ex);
	double last_clusters = 0;
	for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
		vecfs_query_opts o = {.k = k, .recall = targets[t]};
		vecfs_results *a = search_opts(v, q, nq, D, &o);
		double rec = recall_keys(a, e), cl = (double)a->explain.clusters_probed / (double)nq;
		print_message("k %u target %.2f: recall %.4f, %.1f clusters a query\n", k,
			      targets[t], rec, cl);
		assert_true(rec >= targets[t]);
		assert_true(cl >= last_clusters);
		assert_true(a->explain.recall_target == targets[t]);
		assert_int_equal(a->explain.nprobe, 0);
		last_clusters = cl;
		vecfs_results_free(a);
	}
	vecfs_results_free(e);
}

static void test_targets_met(void **state)
{
	dataset ds;
	vecfs *v = blob_store(*state, &ds, VECFS_L2);
	float *q = malloc(sizeof(float) * NQ * D);
	assert_non_null(q);
	fresh_queries(&ds, q, NQ, 1);
	check_targets(v, q, NQ, 10);
	check_targets(v, q, NQ, 1);
	check_targets(v, q, 100, 100);
	free(q);
	ds_free(&ds);
}

static void test_targets_met_cosine(void **state)
{
	dataset ds;
	vecfs *v = blob_store(*state, &ds, VECFS_COSINE);
	float *q = malloc(sizeof(float) * NQ * D);
	assert_non_null(q);
	fresh_queries(&ds, q, NQ, 1);
	check_targets(v, q, NQ, 10);
	free(q);
	ds_free(&ds);
}

/* Queries unlike the records (from a wider spread than the data's): the
 * second look keeps them near the target. */
static void test_queries_unlike_the_data(void **state)
{
	dataset ds;
	vecfs *v = blob_store(*state, &ds, VECFS_L2);
	float *q = malloc(sizeof(float) * NQ * D);
	assert_non_null(q);
	fresh_queries(&ds, q, NQ, 2.5f);
	vecfs_query_opts ex = {.k = 10, .exact = 1}, o = {.k = 10};
	vecfs_results *e = search_opts(v, q, NQ, D, &ex), *a = search_opts(v, q, NQ, D, &o);
	double rec = recall_keys(a, e);
	print_message("queries 2.5x wider than the data: recall %.4f at the default target\n", rec);
	assert_true(rec >= 0.95);
	vecfs_results_free(a);
	vecfs_results_free(e);
	free(q);
	ds_free(&ds);
}

/* The default config: nprobe 0, recall_target 0.95; a config nprobe is
 * fixed for every query, but a query's recall= or nprobe=0 chooses again;
 * a query's nprobe wins over its recall. */
static void test_who_decides(void **state)
{
	dataset ds;
	vecfs *v = blob_store(*state, &ds, VECFS_L2);
	char err[256] = "";
	float q[D];
	fresh_queries(&ds, q, 1, 1);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	assert_int_equal(c.nprobe, 0);
	assert_true(c.recall_target == 0.95f);

	vecfs_query_opts o = {.k = 10};
	vecfs_results *r = search_opts(v, q, 1, D, &o);
	assert_true(r->explain.recall_target == 0.95f);
	assert_int_equal(r->explain.nprobe, 0);
	vecfs_results_free(r);

	c.nprobe = 7;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	r = search_opts(v, q, 1, D, &o);
	assert_int_equal(r->explain.nprobe, 7);
	assert_true(r->explain.recall_target == 0);
	assert_int_equal(r->explain.clusters_probed, 7);
	vecfs_results_free(r);

	o.recall = 0.99f;
	r = search_opts(v, q, 1, D, &o);
	assert_true(r->explain.recall_target == 0.99f);
	vecfs_results_free(r);

	o.recall = 0;
	o.auto_nprobe = 1;
	r = search_opts(v, q, 1, D, &o);
	assert_true(r->explain.recall_target == 0.95f);
	vecfs_results_free(r);

	o = (vecfs_query_opts){.k = 10, .recall = 0.5f, .nprobe = 3};
	r = search_opts(v, q, 1, D, &o);
	assert_int_equal(r->explain.nprobe, 3);
	assert_int_equal(r->explain.clusters_probed, 3);
	vecfs_results_free(r);

	/* bad targets */
	for (int i = 0; i < 3; i++) {
		static const float bad[] = {1.5f, -0.5f, NAN};
		vecfs_results *x = NULL;
		o = (vecfs_query_opts){.k = 10, .recall = bad[i]};
		assert_int_equal(vecfs_search(v, q, 1, D, &o, &x, err, sizeof err), -EINVAL);
		c.recall_target = bad[i];
		assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), -EINVAL);
	}
	c.recall_target = 0;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), -EINVAL);
	/* the target persists */
	c.recall_target = 0.99f;
	c.nprobe = 0;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	fx_close(*state);
	v = fx_open(*state, NULL);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	assert_true(fabsf(c.recall_target - 0.99f) < 1e-6f);
	ds_free(&ds);
}

/* The calibration table of a generation: more clusters for each higher
 * target, and a generation's nprobe table and the per-query choice agree
 * on the sample. */
static void test_recall_table(void **state)
{
	dataset ds;
	vecfs *v = blob_store(*state, &ds, VECFS_L2);
	vecfs_recall_row rows[32];
	size_t n = 0;
	uint32_t nq = 0;
	assert_int_equal(vecfs_gen_recall_table(v, vecfs_active(v), 10, rows, 32, &n, &nq), 0);
	assert_true(n >= 8);
	assert_true(nq >= 100);
	for (size_t i = 0; i < n; i++) {
		print_message("target %.4f: nprobe %u, %.1f clusters chosen\n", rows[i].target,
			      rows[i].nprobe, rows[i].clusters);
		assert_true(rows[i].clusters <= rows[i].nprobe + 1e-3);
		if (i) {
			assert_true(rows[i].target > rows[i - 1].target);
			assert_true(rows[i].nprobe >= rows[i - 1].nprobe);
		}
	}
	ds_free(&ds);
}

/* A store whose config was saved before recall_target existed (version
 * 1, nprobe 32 the old default) reads back nprobe 0 and target 0.95; a
 * version-1 nprobe that was set stays. */
typedef struct old_cfg {
	vf_store *store;
	uint32_t nprobe;
} old_cfg;

static int save_old(vf_txn *txn, void *arg)
{
	vecfs_config d;
	vecfs_config_defaults(&d);
	vf_stored_config_v2 s = {0};
	s.version = 1;
	s.dim = D;
	s.metric = VECFS_L2;
	s.bits = d.bits;
	s.nprobe = ((old_cfg *)arg)->nprobe;
	s.k = d.k;
	s.refine = d.refine;
	s.compact_deltas = d.compact_deltas;
	s.keep_generations = d.keep_generations;
	s.seed = d.seed;
	s.rebalance_ratio = d.rebalance_ratio;
	return vf_save_config(txn, ((old_cfg *)arg)->store, &s, sizeof s);
}

static void test_old_config(void **state)
{
	fixture *f = *state;
	static const uint32_t olds[] = {32, 12};
	for (int i = 0; i < 2; i++) {
		vecfs *v = fx_open(f, NULL);
		old_cfg oc = {v->store, olds[i]};
		assert_int_equal(vf_write(v->store, save_old, &oc), 0);
		vecfs_config c;
		assert_int_equal(vecfs_config_get(v, &c), 0);
		assert_int_equal(c.nprobe, olds[i] == 32 ? 0 : 12);
		assert_true(c.recall_target == 0.95f);
		fx_close(f);
	}
}

/* The stored configuration's version: a write makes it 4 (records may hold
 * vectors in bytes) in a store of version 3 or 1, keeping its settings; a
 * version past 4 is refused.  set_version() rewrites the stored head's
 * version in place (the form of versions 3 and 4). */
typedef struct cfg_version {
	vf_store *store;
	uint32_t set, got;
} cfg_version;

static int set_version(vf_txn *txn, void *arg)
{
	cfg_version *cv = arg;
	unsigned char buf[1024];
	size_t len = 0;
	int rc = vf_load_config_bytes(txn, cv->store, buf, sizeof buf, &len);
	if (rc)
		return rc;
	memcpy(&cv->got, buf, 4);
	if (!cv->set)
		return 0;
	memcpy(buf, &cv->set, 4);
	return vf_save_config(txn, cv->store, buf, len);
}

static uint32_t stored_version(vecfs *v)
{
	cfg_version cv = {v->store, 0, 0};
	assert_int_equal(vf_write(v->store, set_version, &cv), 0);
	return cv.got;
}

static void test_config_version(void **state)
{
	fixture *f = *state;
	float vec[D];
	for (int i = 0; i < D; i++)
		vec[i] = (float)(i * 3); /* whole numbers: held in bytes */
	/* a store of version 3 with a setting changed, then a write */
	vecfs *v = fx_open(f, "v3");
	set_config(v, D, VECFS_L2);
	char err[256];
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.nprobe = 7;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	assert_int_equal(stored_version(v), 4);
	cfg_version cv = {v->store, 3, 0};
	assert_int_equal(vf_write(v->store, set_version, &cv), 0);
	assert_int_equal(stored_version(v), 3);
	assert_int_equal(vecfs_config_get(v, &c), 0); /* version 3 reads as before */
	assert_int_equal(c.nprobe, 7);
	assert_int_equal(put_one(v, "a", vec, D), 0);
	assert_int_equal(stored_version(v), 4);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	assert_int_equal(c.nprobe, 7);
	assert_int_equal(c.dim, D);
	/* a version this code does not know: refused */
	cv.set = 5;
	assert_int_equal(vf_write(v->store, set_version, &cv), 0);
	assert_int_equal(vecfs_config_get(v, &c), -EIO);
	fx_close(f);
	/* a version-1 store: a write keeps its settings as read */
	v = fx_open(f, "v1");
	old_cfg oc = {v->store, 12};
	assert_int_equal(vf_write(v->store, save_old, &oc), 0);
	assert_int_equal(put_one(v, "b", vec, D), 0);
	assert_int_equal(stored_version(v), 4);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	assert_int_equal(c.nprobe, 12);
	assert_true(c.recall_target == 0.95f);
	fx_close(f);
}

/* The estimate of served queries' recall: none before an ANN query on a
 * generation, then near the true recall of the queries served, with an
 * interval around it; a recall below the target is reported once. */
typedef struct heard {
	int n;
	char line[256];
} heard;

static void hear(void *arg, const char *line)
{
	heard *h = arg;
	h->n++;
	snprintf(h->line, sizeof h->line, "%s", line);
}

static vecfs_stats wait_samples(vecfs *v, uint64_t want)
{
	vecfs_stats st = stats(v);
	for (int i = 0; i < 600 && st.recall_samples < want; i++) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
		st = stats(v);
	}
	return st;
}

/* A store larger than the memory the process may hold is not sampled: an
 * exact re-run reads every record, which would push the pages searches read
 * out of the page cache.  The same store and queries with room are. */
static void test_no_samples_past_memory(void **state)
{
	fixture *f = *state;
	dataset ds;
	blob_store(f, &ds, VECFS_L2);
	fx_close(f);
	enum { Q = 400 };
	float *q = malloc(sizeof(float) * Q * D);
	assert_non_null(q);
	fresh_queries(&ds, q, Q, 1);
	vecfs_query_opts ann = {.k = 10};
	for (int room = 0; room < 2; room++) {
		if (!room)
			setenv("VECFS_MEMORY_LIMIT", "4194304", 1); /* 4 MiB */
		vecfs *v = fx_open(f, NULL);
		unsetenv("VECFS_MEMORY_LIMIT");
		for (size_t i = 0; i < Q; i++)
			vecfs_results_free(search_opts(v, q + i * D, 1, D, &ann));
		vecfs_stats st;
		if (room) {
			st = wait_samples(v, 1);
			assert_true(st.recall_samples >= 1);
		} else {
			struct timespec ts = {1, 0}; /* what a sampler would have done by now */
			nanosleep(&ts, NULL);
			st = stats(v);
			assert_int_equal(st.recall_samples, 0);
			assert_true(st.recall_estimate < 0);
		}
		fx_close(f);
	}
	free(q);
	ds_free(&ds);
}

static void test_recall_estimate(void **state)
{
	dataset ds;
	vecfs *v = blob_store(*state, &ds, VECFS_L2);
	heard h = {0};
	vecfs_set_notice_fn(v, hear, &h);
	vecfs_stats st = stats(v);
	assert_true(st.recall_estimate < 0);
	assert_int_equal(st.recall_samples, 0);
	enum { Q = 1000 };
	float *q = malloc(sizeof(float) * Q * D);
	assert_non_null(q);
	fresh_queries(&ds, q, Q, 1);
	/* exact queries are not sampled */
	vecfs_query_opts ex = {.k = 10, .exact = 1}, ann = {.k = 10};
	vecfs_results *e = search_opts(v, q, Q, D, &ex);
	assert_true(stats(v).recall_estimate < 0);
	/* ANN queries one at a time, as a client sends them */
	size_t found = 0, want = 0;
	for (size_t i = 0; i < Q; i++) {
		vecfs_results *a = search_opts(v, q + i * D, 1, D, &ann);
		for (size_t hh = 0; hh < e->count[i]; hh++, want++)
			for (size_t g = 0; g < a->count[0]; g++)
				if (!strcmp(e->hits[i][hh].key, a->hits[0][g].key)) {
					found++;
					break;
				}
		vecfs_results_free(a);
	}
	double truth = (double)found / (double)want;
	st = wait_samples(v, 50);
	print_message("served recall %.4f; estimate %.4f [%.4f, %.4f] over %llu samples\n", truth,
		      st.recall_estimate, st.recall_low, st.recall_high,
		      (unsigned long long)st.recall_samples);
	assert_true(st.recall_samples >= 50);
	assert_true(fabs(st.recall_estimate - truth) <= 0.03);
	assert_true(st.recall_low <= st.recall_estimate && st.recall_estimate <= st.recall_high);
	assert_int_equal(h.n, 0);

	/* nprobe 1 with a target of 0.999: below it, said once */
	vecfs_config c;
	char err[256];
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.recall_target = 0.999f;
	c.nprobe = 1;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	for (int round = 0; round < 4; round++) {
		for (size_t i = 0; i < Q; i++)
			vecfs_results_free(search_opts(v, q + i * D, 1, D, &ann));
		st = wait_samples(v, st.recall_samples + 40);
	}
	print_message("at nprobe 1: estimate %.4f [%.4f, %.4f]; heard %d: %s\n",
		      st.recall_estimate, st.recall_low, st.recall_high, h.n, h.line);
	assert_true(st.recall_estimate < 0.9);
	assert_int_equal(h.n, 1);
	assert_non_null(strstr(h.line, "below recall_target 0.999"));
	vecfs_results_free(e);
	free(q);
	ds_free(&ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_targets_met, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_targets_met_cosine, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_queries_unlike_the_data, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_who_decides, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_recall_table, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_old_config, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_config_version, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_recall_estimate, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_samples_past_memory, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
