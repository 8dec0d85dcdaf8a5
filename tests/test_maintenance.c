/*
 * tests/test_maintenance.c - compaction and rebalancing: results do not
 * change, deltas and tombstones are folded away, queries running meanwhile
 * get complete answers.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "testutil.h"
#include "vecfs.h"

#define D 24
#define N 6000
#define NQ 40

typedef struct churned {
	dataset ds;
	float *moved;     /* new vectors of the upserted keys k0..k199 */
	float q[NQ * D];
} churned;

/* Build over N rows, then deltas (new rows), deletes and upserts that move
 * vectors elsewhere. */
static void churn(vecfs *v, churned *c)
{
	set_config(v, D, VECFS_L2);
	ds_make(&c->ds, 77, N + 1000, D, 30);
	put_range(v, c->ds.x, 0, N, D, "k");
	build(v, 1);
	put_range(v, c->ds.x + (size_t)N * D, 0, 1000, D, "n");
	for (int i = 300; i < 600; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%d", i);
		del_key(v, key);
	}
	c->moved = malloc(sizeof(float) * 200 * D);
	assert_non_null(c->moved);
	for (int i = 0; i < 200; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%d", i);
		ds_fresh(&c->ds, c->moved + i * D);
		assert_int_equal(put_one(v, key, c->moved + i * D, D), 0);
	}
	for (int i = 0; i < NQ; i++)
		ds_fresh(&c->ds, c->q + i * D);
}

static void same_results(const vecfs_results *a, const vecfs_results *b)
{
	assert_int_equal(a->nq, b->nq);
	for (size_t i = 0; i < a->nq; i++) {
		assert_int_equal(a->count[i], b->count[i]);
		for (size_t h = 0; h < a->count[i]; h++) {
			assert_string_equal(a->hits[i][h].key, b->hits[i][h].key);
			assert_true(a->hits[i][h].distance == b->hits[i][h].distance);
		}
	}
}

static void no_deleted(const vecfs_results *r)
{
	for (size_t i = 0; i < r->nq; i++)
		for (size_t h = 0; h < r->count[i]; h++) {
			const char *k = r->hits[i][h].key;
			if (k[0] == 'k') {
				int n = atoi(k + 1);
				assert_false(n >= 300 && n < 600);
			}
		}
}

static void test_compact_keeps_results(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	churned c;
	char err[256] = "", msg[512];
	churn(v, &c);
	vecfs_stats st = stats(v);
	assert_true(st.delta_postings > 0);
	assert_true(st.unindexed > 0);
	vecfs_query_opts ex = {10, 0, 0, 1}, ann = {10, 0, 0, 0};
	vecfs_results *e1 = search_opts(v, c.q, NQ, D, &ex), *a1 = search_opts(v, c.q, NQ, D, &ann);
	uint32_t rewritten = 0;
	assert_int_equal(vecfs_compact(v, &rewritten, err, sizeof err), 0);
	assert_true(rewritten > 0);
	st = stats(v);
	assert_int_equal(st.delta_postings, 0);
	assert_int_equal(st.unindexed, 0);
	assert_int_equal(st.records, N + 1000 - 300);
	vecfs_cluster_info *ci;
	uint32_t nc;
	assert_int_equal(vecfs_gen_clusters(v, vecfs_active(v), &ci, &nc), 0);
	uint64_t total = 0;
	for (uint32_t i = 0; i < nc; i++) {
		assert_int_equal(ci[i].deltas, 0);
		assert_int_equal(ci[i].tombstones, 0);
		total += ci[i].vectors;
	}
	free(ci);
	assert_int_equal(total, st.records);
	vecfs_results *e2 = search_opts(v, c.q, NQ, D, &ex), *a2 = search_opts(v, c.q, NQ, D, &ann);
	same_results(e1, e2);
	no_deleted(a2);
	/* ANN after compaction finds the same neighbours it found before (the
	 * postings are the same codes, only packed) */
	size_t same = 0, total_hits = 0;
	for (size_t i = 0; i < NQ; i++)
		for (size_t h = 0; h < a1->count[i]; h++, total_hits++)
			for (size_t g = 0; g < a2->count[i]; g++)
				if (!strcmp(a1->hits[i][h].key, a2->hits[i][g].key)) {
					same++;
					break;
				}
	assert_true(same * 100 >= total_hits * 99);
	/* the moved keys are found at their new place */
	for (int i = 0; i < 20; i++) {
		vecfs_results *r = search1(v, c.moved + i * D, D, 1, 0);
		char key[16];
		snprintf(key, sizeof key, "k%d", i);
		assert_string_equal(r->hits[0][0].key, key);
		vecfs_results_free(r);
	}
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	/* nothing left to do: a second compaction rewrites nothing */
	assert_int_equal(vecfs_compact(v, &rewritten, err, sizeof err), 0);
	assert_int_equal(rewritten, 0);
	vecfs_results_free(e1);
	vecfs_results_free(e2);
	vecfs_results_free(a1);
	vecfs_results_free(a2);
	free(c.moved);
	ds_free(&c.ds);
}

static void test_compact_after_rollback(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "", msg[512];
	dataset ds;
	set_config(v, D, VECFS_L2);
	ds_make(&ds, 5, 3000, D, 20);
	put_range(v, ds.x, 0, 2000, D, "a");
	uint64_t g1 = build(v, 1);
	put_range(v, ds.x, 2000, 500, D, "a");
	build(v, 1);
	put_range(v, ds.x, 2500, 500, D, "a");
	char e[256];
	assert_int_equal(vecfs_activate(v, g1, e, sizeof e), 0);
	assert_int_equal(stats(v).unindexed, 1000);
	assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).unindexed, 0);
	assert_int_equal(stats(v).delta_postings, 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	for (int i = 2000; i < 3000; i += 97) {
		vecfs_results *r = search1(v, ds.x + (size_t)i * D, D, 1, 0);
		assert_true(r->hits[0][0].distance <= 1e-4f);
		vecfs_results_free(r);
	}
	ds_free(&ds);
}

typedef struct reader {
	vecfs *v;
	const float *q;
	volatile int stop;
	int bad, runs;
} reader;

static void *read_loop(void *arg)
{
	reader *r = arg;
	vecfs_query_opts o = {10, 0, 0, 0};
	while (!r->stop) {
		vecfs_results *res;
		char err[256];
		if (vecfs_search(r->v, r->q, NQ, D, &o, &res, err, sizeof err)) {
			r->bad++;
			continue;
		}
		for (size_t i = 0; i < res->nq; i++)
			if (res->count[i] != 10)
				r->bad++;
		vecfs_results_free(res);
		r->runs++;
	}
	return NULL;
}

static void test_queries_during_compaction(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	churned c;
	char err[256] = "";
	churn(v, &c);
	reader r = {v, c.q, 0, 0, 0};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, read_loop, &r), 0);
	for (int round = 0; round < 5; round++) {
		/* more churn, then compaction, while the reader queries */
		put_range(v, c.ds.x + (size_t)(N + 100 * round) * D, 0, 100, D, "z");
		assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
	}
	uint64_t gen = 0;
	assert_int_equal(vecfs_rebalance(v, 1, &gen, NULL, NULL, err, sizeof err), 0);
	r.stop = 1;
	pthread_join(t, NULL);
	assert_true(r.runs > 0);
	assert_int_equal(r.bad, 0);
	assert_int_equal(vecfs_active(v), gen);
	free(c.moved);
	ds_free(&c.ds);
}

static void test_rebalance_publishes(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	uint64_t gen = 0;
	assert_int_equal(vecfs_rebalance(v, 1, &gen, NULL, NULL, err, sizeof err), -ENOENT);
	churned c;
	churn(v, &c);
	uint64_t before = vecfs_active(v);
	vecfs_query_opts ex = {10, 0, 0, 1};
	vecfs_results *e1 = search_opts(v, c.q, NQ, D, &ex);
	assert_int_equal(vecfs_rebalance(v, 1, &gen, NULL, NULL, err, sizeof err), 0);
	assert_true(gen != before);
	assert_int_equal(vecfs_active(v), gen);
	vecfs_gen_info gi;
	assert_int_equal(vecfs_gen_info_get(v, gen, &gi), 0);
	assert_int_equal(gi.state, VECFS_GEN_READY);
	assert_int_equal(gi.parent, before);
	vecfs_results *e2 = search_opts(v, c.q, NQ, D, &ex);
	same_results(e1, e2);
	vecfs_results_free(e1);
	vecfs_results_free(e2);
	free(c.moved);
	ds_free(&c.ds);
}

static void test_automatic_compaction(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	dataset ds;
	set_config(v, D, VECFS_L2);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.compact_deltas = 20;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&ds, 9, 3000, D, 5);
	put_range(v, ds.x, 0, 2000, D, "a");
	build(v, 1);
	assert_int_equal(stats(v).compactions, 0);
	/* 5 clusters, 1000 new rows: some cluster passes 20 deltas at once */
	put_range(v, ds.x, 2000, 1000, D, "a");
	vecfs_stats st = stats(v);
	for (int i = 0; i < 200 && (st.compactions == 0 || st.delta_postings); i++) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
		st = stats(v);
	}
	assert_true(st.compactions >= 1);
	assert_int_equal(st.delta_postings, 0);
	assert_int_equal(st.records, 3000);
	char msg[512];
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	ds_free(&ds);
}

static void test_old_generations_retired(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	dataset ds;
	set_config(v, D, VECFS_L2);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.keep_generations = 1;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&ds, 10, 1000, D, 5);
	put_range(v, ds.x, 0, 1000, D, "a");
	uint64_t g[4];
	for (int i = 0; i < 4; i++)
		g[i] = build(v, 1);
	/* the active one and one more remain: the newest before it */
	uint64_t ids[16];
	size_t n;
	assert_int_equal(vecfs_gen_list(v, ids, 16, &n), 0);
	assert_int_equal(n, 2);
	assert_true(ids[0] == g[2] && ids[1] == g[3]);
	assert_int_equal(vecfs_active(v), g[3]);
	/* a staged build never retires the active generation */
	uint64_t staged = build(v, 0);
	assert_int_equal(vecfs_active(v), g[3]);
	assert_int_equal(vecfs_gen_list(v, ids, 16, &n), 0);
	assert_int_equal(n, 2);
	assert_true(ids[0] == g[3] && ids[1] == staged);
	ds_free(&ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_compact_keeps_results, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_after_rollback, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_queries_during_compaction, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_publishes, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_automatic_compaction, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_old_generations_retired, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
