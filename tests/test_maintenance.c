/*
 * tests/test_maintenance.c - compaction and rebalancing: results do not
 * change, deltas and tombstones are folded away, queries running meanwhile
 * get complete answers; a rebalance splits crowded clusters and merges
 * emptied ones locally, copying the clusters it leaves alone, and keeps
 * the writes made while it runs.
 */
#include <errno.h>
#include <lmdb.h> /* the change log's size, from LMDB itself */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "maint/maint.h" /* vf_compact_steps */
#include "testutil.h"
#include "vecfs.h"

#define D 24
#define N 6000
#define NQ 40
#define RB_TEST_RATIO 3 /* the default rebalance_ratio */

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
	vecfs_query_opts ex = {.k = 10, .exact = 1}, ann = {.k = 10};
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
	_Atomic int stop;
	int bad, runs;
} reader;

static void *read_loop(void *arg)
{
	reader *r = arg;
	vecfs_query_opts o = {.k = 10};
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
	vecfs_query_opts ex = {.k = 10, .exact = 1};
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

/* A store of dimension D whose background compaction starts at
 * compact_deltas (set_config turns it off). */
static vecfs *open_compacting(fixture *f, uint32_t compact_deltas)
{
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	vecfs_config c;
	set_config(v, D, VECFS_L2);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.compact_deltas = compact_deltas;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	return v;
}

/* The stats once background maintenance went idle with no delta postings
 * left (or after 10 s). */
static vecfs_stats settled(vecfs *v)
{
	vecfs_stats st = stats(v);
	for (int i = 0; i < 200 && (st.maintenance || st.delta_postings); i++) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
		st = stats(v);
	}
	return st;
}

static void test_automatic_compaction(void **state)
{
	fixture *f = *state;
	vecfs *v = open_compacting(f, 20);
	dataset ds;
	ds_make(&ds, 9, 3000, D, 5);
	put_range(v, ds.x, 0, 2000, D, "a");
	build(v, 1);
	assert_int_equal(stats(v).compactions, 0);
	/* 5 clusters, 1000 new rows: some cluster passes 20 deltas at once */
	put_range(v, ds.x, 2000, 1000, D, "a");
	vecfs_stats st = settled(v);
	assert_true(st.compactions >= 1);
	assert_int_equal(st.delta_postings, 0);
	assert_int_equal(st.records, 3000);
	char msg[512];
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	ds_free(&ds);
}

/* A backlog too small to be due folds once writes pause; a smaller one
 * stays (folding it would cost more than scanning it). */
static void test_idle_compaction(void **state)
{
	fixture *f = *state;
	vecfs *v = open_compacting(f, 200); /* no cluster gets there; nor 4 x 200 in all */
	dataset ds;
	ds_make(&ds, 12, 2300, D, 5);
	put_range(v, ds.x, 0, 2000, D, "a");
	build(v, 1);
	put_range(v, ds.x, 2000, 250, D, "a");
	vecfs_stats st = stats(v);
	assert_int_equal(st.maintenance, 1); /* due once writes pause */
	st = settled(v);
	assert_int_equal(st.compactions, 1);
	assert_int_equal(st.delta_postings, 0);
	assert_int_equal(st.maintenance, 0);
	/* 10 more: under the idle backlog, they stay as delta postings */
	put_range(v, ds.x, 2250, 10, D, "a");
	st = stats(v);
	assert_int_equal(st.maintenance, 0);
	struct timespec ts = {1, 0};
	nanosleep(&ts, NULL);
	st = stats(v);
	assert_int_equal(st.compactions, 1);
	assert_int_equal(st.delta_postings, 10);
	assert_int_equal(st.records, 2260);
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

/* ------------------------------------------------------------ local rebalance */

#define SKB 3000   /* base rows, balanced */
#define SKH 1500   /* rows added later around one centre */
#define SKQ 60

typedef struct skewed {
	dataset ds;
	unsigned char *alive;  /* per row of ds.x */
	float q[SKQ * D];
} skewed;

/* A balanced base, built; then many rows around one centre (delta
 * postings that compaction folds into the clusters there) and deletes. */
static void skew(vecfs *v, skewed *k, uint64_t seed)
{
	vecfs_config c;
	char err[256] = "";
	set_config(v, D, VECFS_L2);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.compact_deltas = 100000; /* compaction only when asked */
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&k->ds, seed, SKB + SKH, D, 15);
	for (size_t i = SKB; i < SKB + SKH; i++)
		for (uint32_t j = 0; j < D; j++)
			k->ds.x[i * D + j] = k->ds.centers[j] + 0.7f * (float)rng_gauss(&k->ds.r);
	k->alive = malloc(SKB + SKH);
	assert_non_null(k->alive);
	memset(k->alive, 1, SKB + SKH);
	put_range(v, k->ds.x, 0, SKB, D, "s");
	build(v, 1);
	put_range(v, k->ds.x, SKB, SKH, D, "s");
	for (int i = 0; i < SKB + SKH; i += 23) {
		char key[16];
		snprintf(key, sizeof key, "s%d", i);
		del_key(v, key);
		k->alive[i] = 0;
	}
	/* queries: half at the crowded centre, half anywhere */
	for (int i = 0; i < SKQ; i++) {
		if (i % 2 == 0)
			for (uint32_t j = 0; j < D; j++)
				k->q[i * D + j] = k->ds.centers[j] + 0.7f * (float)rng_gauss(&k->ds.r);
		else
			ds_fresh(&k->ds, k->q + i * D);
	}
}

/* Every hit is a live row of `alive` (keys "s<i>"). */
static void only_alive(const vecfs_results *r, const unsigned char *alive, size_t n)
{
	for (size_t i = 0; i < r->nq; i++)
		for (size_t h = 0; h < r->count[i]; h++) {
			long ix = key_index(r->hits[i][h].key, "s");
			if (ix >= 0) {
				assert_true((size_t)ix < n);
				assert_true(alive[ix]);
			}
		}
}

static double imbalance_of(vecfs *v, uint64_t gen, uint32_t *nlist)
{
	vecfs_cluster_info *ci;
	uint32_t n;
	assert_int_equal(vecfs_gen_clusters(v, gen, &ci, &n), 0);
	uint64_t total = 0, largest = 0;
	for (uint32_t i = 0; i < n; i++) {
		total += ci[i].vectors;
		if (ci[i].vectors > largest)
			largest = ci[i].vectors;
	}
	free(ci);
	*nlist = n;
	return total ? (double)largest * n / (double)total : 0;
}

static uint64_t rebalance(vecfs *v, int activate)
{
	char err[256] = "";
	uint64_t gen = 0;
	int rc = vecfs_rebalance(v, activate, &gen, NULL, NULL, err, sizeof err);
	if (rc)
		print_message("vecfs_rebalance: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	assert_true(gen != 0);
	return gen;
}

static void test_rebalance_splits_skewed(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	skewed k;
	char msg[512];
	skew(v, &k, 4242);
	uint64_t parent = vecfs_active(v);
	vecfs_query_opts ex = {.k = 10, .exact = 1}, ann = {.k = 10};
	vecfs_results *e1 = search_opts(v, k.q, SKQ, D, &ex);
	uint64_t gen = rebalance(v, 1);
	assert_true(gen != parent);
	assert_int_equal(vecfs_active(v), gen);
	vecfs_gen_info gi;
	assert_int_equal(vecfs_gen_info_get(v, gen, &gi), 0);
	assert_int_equal(gi.state, VECFS_GEN_READY);
	assert_int_equal(gi.parent, parent);
	vecfs_gen_info pi;
	assert_int_equal(vecfs_gen_info_get(v, parent, &pi), 0);
	assert_int_equal(gi.seed, pi.seed);
	assert_int_equal(gi.bits, pi.bits);
	vecfs_stats st = stats(v);
	assert_int_equal(st.rebalances, 1);
	assert_int_equal(st.unindexed, 0);
	assert_int_equal(st.delta_postings, 0);

	/* the parent (compacted first) was lopsided; the child less so */
	uint32_t pn, cn;
	double pr = imbalance_of(v, parent, &pn), cr = imbalance_of(v, gen, &cn);
	print_message("rebalance: nlist %u -> %u, max/mean %.2f -> %.2f (stats %.2f)\n", pn, cn,
		      pr, cr, st.cluster_imbalance);
	assert_true(pr > 2 * RB_TEST_RATIO);
	assert_true(cr < pr);
	assert_true(st.cluster_imbalance < pr);

	/* local: most clusters kept their centroid and their postings */
	float *pc, *cc;
	uint32_t pd, cd, pn2, cn2;
	vecfs_cluster_info *pci, *cci;
	assert_int_equal(vecfs_gen_centroids(v, parent, &pc, &pn2, &pd), 0);
	assert_int_equal(vecfs_gen_centroids(v, gen, &cc, &cn2, &cd), 0);
	assert_int_equal(vecfs_gen_clusters(v, parent, &pci, &pn), 0);
	assert_int_equal(vecfs_gen_clusters(v, gen, &cci, &cn), 0);
	assert_int_equal(pn2, pn);
	assert_int_equal(cn2, cn);
	/* (a cluster may have moved to the id of a merged one) */
	uint32_t same = 0, kept = 0, fresh = 0;
	for (uint32_t c = 0; c < cn; c++) {
		uint32_t p = 0;
		while (p < pn && memcmp(pc + (size_t)p * D, cc + (size_t)c * D, sizeof(float) * D))
			p++;
		if (p == pn) {
			fresh++;
			continue;
		}
		kept++;
		same += pci[p].vectors == cci[c].vectors && pci[p].blocks == cci[c].blocks;
	}
	print_message("rebalance: %u clusters kept their centroid, %u of them their postings; "
		      "%u new centroids\n", kept, same, fresh);
	assert_true(fresh >= 2);
	assert_true(same * 2 >= pn);
	uint64_t total = 0;
	for (uint32_t c = 0; c < cn; c++)
		total += cci[c].vectors;
	assert_int_equal(total, st.records);
	free(pc);
	free(cc);
	free(pci);
	free(cci);

	/* exact results unchanged, ANN recall against them, no deleted key */
	vecfs_results *e2 = search_opts(v, k.q, SKQ, D, &ex);
	vecfs_results *a2 = search_opts(v, k.q, SKQ, D, &ann);
	same_results(e1, e2);
	assert_int_equal(a2->generation, gen);
	double rec = recall_keys(a2, e2);
	print_message("rebalance: recall@10 %.3f\n", rec);
	assert_true(rec >= 0.95);
	only_alive(a2, k.alive, SKB + SKH);
	only_alive(e2, k.alive, SKB + SKH);
	for (int i = SKB; i < SKB + SKH; i += 97) {
		if (!k.alive[i])
			continue;
		vecfs_results *r = search1(v, k.ds.x + (size_t)i * D, D, 1, 0);
		char key[16];
		snprintf(key, sizeof key, "s%d", i);
		assert_string_equal(r->hits[0][0].key, key);
		vecfs_results_free(r);
	}
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);

	/* a second pass keeps going where clusters are still too large */
	uint64_t gen2 = rebalance(v, 1);
	double cr2 = imbalance_of(v, gen2, &cn2);
	print_message("second rebalance: nlist %u -> %u, max/mean %.2f -> %.2f\n", cn, cn2, cr, cr2);
	assert_true(cr2 <= cr);
	vecfs_results *a3 = search_opts(v, k.q, SKQ, D, &ann);
	assert_true(recall_keys(a3, e2) >= 0.95);
	only_alive(a3, k.alive, SKB + SKH);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	vecfs_results_free(e1);
	vecfs_results_free(e2);
	vecfs_results_free(a2);
	vecfs_results_free(a3);
	free(k.alive);
	ds_free(&k.ds);
}

/* Writes from the progress callback land after the snapshot and before
 * the generation is published. */
typedef struct writer {
	vecfs *v;
	skewed *k;
	float *fresh;       /* WN new rows */
	float *moved;       /* WM upserted rows' new vectors */
	int done, deleted, upserted;
	char phases[128];
} writer;

/* More new rows than a step of the publish's catch-up (CATCHUP_STEP in
 * engine/build.c), the first WD of them deleted after the rest. */
#define WN 9000
#define WD 100
#define WM 50

static int write_meanwhile(void *arg, const char *phase, int pct)
{
	writer *w = arg;
	size_t len = strlen(w->phases);
	const char *last = strrchr(w->phases, ' ');
	last = last ? last + 1 : w->phases;
	if (strcmp(last, phase) && len + strlen(phase) + 2 < sizeof w->phases)
		snprintf(w->phases + len, sizeof w->phases - len, "%s%s", len ? " " : "", phase);
	if (w->done || strcmp(phase, "publish"))
		return 0;
	w->done = 1;
	put_range(w->v, w->fresh, 0, WN, D, "w");
	for (int i = 0; i < WD; i++) {
		char key[16];
		snprintf(key, sizeof key, "w%d", i);
		del_key(w->v, key);
	}
	for (int i = 0; i < WM; i++) {
		char key[16];
		/* rows in the crowded clusters and elsewhere */
		int r = i % 2 ? 1 + 40 * i : SKB + 1 + 20 * i;
		snprintf(key, sizeof key, "s%d", r);
		if (!w->k->alive[r])
			continue;
		if (i % 5 == 0) {
			del_key(w->v, key);
			w->k->alive[r] = 0;
			w->deleted++;
		} else {
			w->upserted++;
			assert_int_equal(put_one(w->v, key, w->moved + i * D, D), 0);
			memcpy(w->k->ds.x + (size_t)r * D, w->moved + i * D, sizeof(float) * D);
		}
	}
	return 0;
}

static void find_own(vecfs *v, const float *x, const char *key)
{
	vecfs_results *r = search1(v, x, D, 1, 0);
	assert_int_equal(r->count[0], 1);
	assert_string_equal(r->hits[0][0].key, key);
	assert_true(r->hits[0][0].distance <= 1e-4f);
	vecfs_results_free(r);
}

static void test_rebalance_keeps_writes(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	skewed k;
	char err[256] = "", msg[512];
	skew(v, &k, 777);
	writer w = {v, &k, malloc(sizeof(float) * WN * D), malloc(sizeof(float) * WM * D), 0, 0, 0, ""};
	assert_non_null(w.fresh);
	assert_non_null(w.moved);
	for (int i = 0; i < WN; i++)
		ds_fresh(&k.ds, w.fresh + i * D);
	for (int i = 0; i < WM; i++)
		ds_fresh(&k.ds, w.moved + i * D);
	uint64_t parent = vecfs_active(v), records = stats(v).records;
	uint64_t gen = 0;
	int rc = vecfs_rebalance(v, 1, &gen, write_meanwhile, &w, err, sizeof err);
	print_message("rebalance with writes: %d %s, phases: %s\n", rc, err, w.phases);
	assert_int_equal(rc, 0);
	assert_true(w.done);
	assert_true(gen != parent);
	assert_int_equal(vecfs_active(v), gen);
	assert_true(w.deleted > 0 && w.upserted > 0);
	vecfs_stats st = stats(v);
	assert_int_equal(st.records, records + WN - WD - w.deleted);
	/* what was written meanwhile sits in delta postings of the new one */
	assert_int_equal(st.unindexed, WN - WD + w.upserted);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	for (int i = WD; i < WN; i += 37) {
		char key[16];
		snprintf(key, sizeof key, "w%d", i);
		find_own(v, w.fresh + i * D, key);
	}
	for (int i = 0; i < WD; i += 9) {
		vecfs_results *r = search1(v, w.fresh + i * D, D, 10, 0);
		char key[16];
		snprintf(key, sizeof key, "w%d", i);
		for (size_t h = 0; h < r->count[0]; h++)
			assert_string_not_equal(r->hits[0][h].key, key);
		vecfs_results_free(r);
	}
	for (int i = 0; i < WM; i++) {
		int r = i % 2 ? 1 + 40 * i : SKB + 1 + 20 * i;
		char key[16];
		snprintf(key, sizeof key, "s%d", r);
		if (k.alive[r])
			find_own(v, k.ds.x + (size_t)r * D, key);
	}
	vecfs_query_opts ex = {.k = 10, .exact = 1}, ann = {.k = 10};
	vecfs_results *e = search_opts(v, k.q, SKQ, D, &ex), *a = search_opts(v, k.q, SKQ, D, &ann);
	only_alive(e, k.alive, SKB + SKH);
	only_alive(a, k.alive, SKB + SKH);
	print_message("recall@10 %.3f\n", recall_keys(a, e));
	assert_true(recall_keys(a, e) >= 0.95);
	vecfs_results_free(e);
	vecfs_results_free(a);

	/* and after it: more writes, a staged rebalance, writes, then flip */
	float extra[20 * D];
	for (int i = 0; i < 20; i++)
		ds_fresh(&k.ds, extra + i * D);
	put_range(v, extra, 0, 10, D, "x");
	del_key(v, "s5");
	k.alive[5] = 0;
	uint64_t staged = rebalance(v, 0);
	assert_int_equal(vecfs_active(v), gen);
	put_range(v, extra, 10, 10, D, "x");
	del_key(v, "s7");
	k.alive[7] = 0;
	assert_int_equal(vecfs_activate(v, staged, err, sizeof err), 0);
	for (int i = 0; i < 20; i++) {
		char key[16];
		snprintf(key, sizeof key, "x%d", i);
		find_own(v, extra + i * D, key);
	}
	e = search_opts(v, k.q, SKQ, D, &ex);
	a = search_opts(v, k.q, SKQ, D, &ann);
	assert_int_equal(a->generation, staged);
	only_alive(e, k.alive, SKB + SKH);
	only_alive(a, k.alive, SKB + SKH);
	print_message("recall@10 %.3f\n", recall_keys(a, e));
	assert_true(recall_keys(a, e) >= 0.95);
	vecfs_results_free(e);
	vecfs_results_free(a);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
	st = stats(v);
	assert_int_equal(st.unindexed, 0);
	assert_int_equal(st.delta_postings, 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	free(w.fresh);
	free(w.moved);
	free(k.alive);
	ds_free(&k.ds);
}

static int stop_at_publish(void *arg, const char *phase, int pct)
{
	int *calls = arg;
	(*calls)++;
	return !strcmp(phase, "publish");
}

static void test_rebalance_merges(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "", msg[512];
	dataset ds;
	vecfs_config c;
	set_config(v, D, VECFS_COSINE);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.nlist = 40;
	c.compact_deltas = 100000;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&ds, 515, 3000, D, 12);
	put_range(v, ds.x, 0, 3000, D, "s");
	uint64_t parent = build(v, 1);
	/* empty three of the twelve groups: their clusters become tiny */
	unsigned char *alive = malloc(3000);
	assert_non_null(alive);
	for (int i = 0; i < 3000; i++) {
		alive[i] = ds.label[i] >= 3;
		if (!alive[i]) {
			char key[16];
			snprintf(key, sizeof key, "s%d", i);
			del_key(v, key);
		}
	}
	float q[SKQ * D];
	for (int i = 0; i < SKQ; i++)
		ds_fresh(&ds, q + i * D);
	uint64_t gen = rebalance(v, 1);
	vecfs_gen_info pi, gi;
	assert_int_equal(vecfs_gen_info_get(v, parent, &pi), 0);
	assert_int_equal(vecfs_gen_info_get(v, gen, &gi), 0);
	print_message("rebalance after deletes: nlist %u -> %u\n", pi.nlist, gi.nlist);
	assert_true(gi.nlist < pi.nlist);
	vecfs_cluster_info *ci;
	uint32_t n;
	assert_int_equal(vecfs_gen_clusters(v, gen, &ci, &n), 0);
	uint64_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += ci[i].vectors;
	free(ci);
	assert_int_equal(total, stats(v).records);
	/* every id has a centroid; clusters past the new end moved into the
	 * ids merged clusters left, with their postings */
	float *cent, *pcent;
	uint32_t nl, dim, pnl;
	assert_int_equal(vecfs_gen_centroids(v, gen, &cent, &nl, &dim), 0);
	assert_int_equal(vecfs_gen_centroids(v, parent, &pcent, &pnl, &dim), 0);
	assert_int_equal(nl, gi.nlist);
	for (size_t i = 0; i < (size_t)nl * dim; i++)
		assert_true(isfinite(cent[i]));
	uint32_t moved = 0;
	for (uint32_t p = nl; p < pnl; p++)
		for (uint32_t j = 0; j < nl; j++)
			moved += !memcmp(pcent + (size_t)p * dim, cent + (size_t)j * dim,
					 sizeof(float) * dim);
	print_message("rebalance after deletes: %u clusters moved down\n", moved);
	assert_true(moved >= 1);
	free(cent);
	free(pcent);
	vecfs_query_opts ex = {.k = 10, .exact = 1}, ann = {.k = 10};
	vecfs_results *e = search_opts(v, q, SKQ, D, &ex), *a = search_opts(v, q, SKQ, D, &ann);
	only_alive(e, alive, 3000);
	only_alive(a, alive, 3000);
	print_message("recall@10 %.3f\n", recall_keys(a, e));
	assert_true(recall_keys(a, e) >= 0.95);
	vecfs_results_free(e);
	vecfs_results_free(a);
	for (int i = 0; i < 3000; i += 61)
		if (alive[i]) {
			char key[16];
			snprintf(key, sizeof key, "s%d", i);
			vecfs_results *r = search1(v, ds.x + (size_t)i * D, D, 1, 0);
			assert_string_equal(r->hits[0][0].key, key);
			vecfs_results_free(r);
		}
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	/* a cancelled rebalance leaves a failed generation and nothing else */
	int calls = 0;
	uint64_t none = 0;
	assert_int_equal(vecfs_rebalance(v, 1, &none, stop_at_publish, &calls, err, sizeof err),
			 -ECANCELED);
	assert_true(calls > 0);
	assert_int_equal(none, 0);
	assert_int_equal(vecfs_active(v), gen);
	uint64_t ids[16];
	size_t ng;
	assert_int_equal(vecfs_gen_list(v, ids, 16, &ng), 0);
	assert_true(ng >= 2 && ng <= 16);
	vecfs_gen_info fi;
	assert_int_equal(vecfs_gen_info_get(v, ids[ng - 1], &fi), 0);
	assert_int_equal(fi.state, VECFS_GEN_FAILED);
	assert_int_equal(vecfs_gen_clusters(v, ids[ng - 1], &ci, &n), 0);
	free(ci);
	assert_int_equal(n, 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	/* upserts and deletes land in the right clusters of the new one */
	put_one(v, "s3000", ds.x, D);
	del_key(v, "s3000");
	for (int i = 0; i < 3000; i += 250)
		if (alive[i]) {
			char key[16];
			snprintf(key, sizeof key, "s%d", i);
			assert_int_equal(put_one(v, key, ds.x + (size_t)(i + 1) * D, D), 0);
		}
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	free(alive);
	ds_free(&ds);
}

/* Nothing to split or merge (one cluster): the new generation is a copy. */
static void test_rebalance_copy(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "", msg[512];
	dataset ds;
	vecfs_config c;
	set_config(v, D, VECFS_DOT);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.nlist = 1;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&ds, 8, 1500, D, 4);
	put_range(v, ds.x, 0, 1400, D, "s");
	uint64_t parent = build(v, 1);
	put_range(v, ds.x, 1400, 100, D, "s");
	del_key(v, "s3");
	uint64_t gen = rebalance(v, 1);
	vecfs_cluster_info *pci, *cci;
	uint32_t pn, cn, pd, cd;
	float *pc, *cc;
	assert_int_equal(vecfs_gen_clusters(v, parent, &pci, &pn), 0);
	assert_int_equal(vecfs_gen_clusters(v, gen, &cci, &cn), 0);
	assert_int_equal(pn, 1);
	assert_int_equal(cn, 1);
	assert_int_equal(cci[0].vectors, 1499);
	assert_int_equal(cci[0].vectors, pci[0].vectors);
	assert_int_equal(cci[0].blocks, pci[0].blocks);
	assert_int_equal(vecfs_gen_centroids(v, parent, &pc, &pn, &pd), 0);
	assert_int_equal(vecfs_gen_centroids(v, gen, &cc, &cn, &cd), 0);
	assert_memory_equal(pc, cc, sizeof(float) * D);
	free(pci);
	free(cci);
	free(pc);
	free(cc);
	assert_int_equal(stats(v).rebalances, 1);
	vecfs_query_opts ex = {.k = 10, .exact = 1}, ann = {.k = 10};
	vecfs_results *e = search_opts(v, ds.x + 7 * D, 1, D, &ex);
	vecfs_results *a = search_opts(v, ds.x + 7 * D, 1, D, &ann);
	assert_int_equal(a->generation, gen);
	same_results(e, a);
	vecfs_results_free(e);
	vecfs_results_free(a);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	ds_free(&ds);
}

static void test_automatic_rebalance(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	skewed k;
	char err[256] = "", msg[512];
	vecfs_config c;
	vecfs_config d;
	vecfs_config_defaults(&d);
	assert_int_equal(d.rebalance_ratio, RB_TEST_RATIO);
	set_config(v, D, VECFS_L2);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.rebalance_ratio = RB_TEST_RATIO;
	c.keep_generations = d.keep_generations;
	c.rebalance_ratio = 1;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), -EINVAL);
	c.rebalance_ratio = 0;
	c.compact_deltas = 100;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&k.ds, 99, SKB + SKH, D, 15);
	for (size_t i = SKB; i < SKB + SKH; i++)
		for (uint32_t j = 0; j < D; j++)
			k.ds.x[i * D + j] = k.ds.centers[j] + 0.7f * (float)rng_gauss(&k.ds.r);
	put_range(v, k.ds.x, 0, SKB, D, "s");
	uint64_t g1 = build(v, 1);
	/* rebalance_ratio 0: compaction only */
	put_range(v, k.ds.x, SKB, SKH / 2, D, "s");
	vecfs_stats st = stats(v);
	for (int i = 0; i < 200 && (st.compactions == 0 || st.delta_postings); i++) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
		st = stats(v);
	}
	assert_true(st.compactions >= 1);
	assert_int_equal(st.rebalances, 0);
	assert_int_equal(vecfs_active(v), g1);
	assert_true(st.cluster_imbalance > RB_TEST_RATIO);
	/* the default ratio: the next automatic compaction rebalances */
	c.rebalance_ratio = RB_TEST_RATIO;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	put_range(v, k.ds.x, SKB + SKH / 2, SKH / 2, D, "s");
	st = stats(v);
	for (int i = 0; i < 300 && (st.rebalances == 0 || st.delta_postings); i++) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
		st = stats(v);
	}
	print_message("automatic: %llu compactions, %llu rebalances, max/mean %.2f\n",
		      (unsigned long long)st.compactions, (unsigned long long)st.rebalances,
		      st.cluster_imbalance);
	assert_true(st.rebalances >= 1);
	assert_true(vecfs_active(v) != g1);
	assert_int_equal(st.records, SKB + SKH);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	for (int i = 0; i < SKB + SKH; i += 191) {
		char key[16];
		snprintf(key, sizeof key, "s%d", i);
		find_own(v, k.ds.x + (size_t)i * D, key);
	}
	ds_free(&k.ds);
}

/* ---------------------------------------------------------------- steps */

/* Writes between the steps of a compaction: a new row, a delete and a
 * move each step, checking the answers as they stand. */
typedef struct stepper {
	vecfs *v;
	churned *c;
	float *fresh;   /* SW vectors for new keys w0.. */
	float *moved;   /* SW new vectors for keys k1000.. */
	int steps, puts, stop_after;
} stepper;

#define SW 40
#define COMPACT_TEST_US 50000

/* No key twice in any query's hits. */
static void keys_unique(const vecfs_results *r)
{
	for (size_t i = 0; i < r->nq; i++)
		for (size_t a = 0; a < r->count[i]; a++)
			for (size_t b = a + 1; b < r->count[i]; b++)
				assert_string_not_equal(r->hits[i][a].key, r->hits[i][b].key);
}

static int write_between(void *arg)
{
	stepper *w = arg;
	int i = w->steps++;
	if (i < SW) {
		char key[16], msg[512];
		snprintf(key, sizeof key, "w%d", i);
		assert_int_equal(put_one(w->v, key, w->fresh + i * D, D), 0);
		snprintf(key, sizeof key, "k%d", 2000 + i);
		del_key(w->v, key);
		snprintf(key, sizeof key, "k%d", 1000 + i);
		assert_int_equal(put_one(w->v, key, w->moved + i * D, D), 0);
		w->puts += 2;
		find_own(w->v, w->fresh + i * D, (snprintf(key, sizeof key, "w%d", i), key));
		find_own(w->v, w->moved + i * D, (snprintf(key, sizeof key, "k%d", 1000 + i), key));
		if (i % 10 == 0)
			assert_int_equal(vecfs_verify(w->v, msg, sizeof msg), 0);
	}
	return w->stop_after && w->steps >= w->stop_after;
}

/* A churned store (see churn()) and SW vectors to write between steps. */
static vecfs *stepper_start(void **state, stepper *w, churned *c)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	churn(v, c);
	memset(w, 0, sizeof *w);
	w->v = v;
	w->c = c;
	w->fresh = malloc(sizeof(float) * SW * D);
	w->moved = malloc(sizeof(float) * SW * D);
	assert_non_null(w->fresh);
	assert_non_null(w->moved);
	for (int i = 0; i < SW; i++) {
		ds_fresh(&c->ds, w->fresh + i * D);
		ds_fresh(&c->ds, w->moved + i * D);
	}
	return v;
}

static void stepper_end(stepper *w, churned *c)
{
	free(w->fresh);
	free(w->moved);
	free(c->moved);
	ds_free(&c->ds);
}

/* What was written between the steps is found, what was deleted is not. */
static void stepper_check(stepper *w)
{
	int n = w->steps < SW ? w->steps : SW;
	for (int i = 0; i < n; i++) {
		char key[16];
		snprintf(key, sizeof key, "w%d", i);
		find_own(w->v, w->fresh + i * D, key);
		snprintf(key, sizeof key, "k%d", 1000 + i);
		find_own(w->v, w->moved + i * D, key);
		vecfs_results *r = search1(w->v, w->c->ds.x + (size_t)(2000 + i) * D, D, 10, 0);
		snprintf(key, sizeof key, "k%d", 2000 + i);
		for (size_t h = 0; h < r->count[0]; h++)
			assert_string_not_equal(r->hits[0][h].key, key);
		keys_unique(r);
		vecfs_results_free(r);
	}
}

/* Entries in the store's change log. */
static size_t change_log_entries(vecfs *v)
{
	MDB_txn *txn;
	MDB_stat st;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(mdb_stat(txn, v->store->changes, &st), 0);
	vf_read_end(v->store, txn);
	return st.ms_entries;
}

/* A compaction in steps of one cluster, with writes between them: the
 * writes stay delta postings (the compaction folds only the changes up to
 * its first step), every answer is right at every step, and a second
 * compaction folds the rest. */
static void test_compact_in_steps(void **state)
{
	churned c;
	stepper w;
	char err[256] = "", msg[512];
	vecfs *v = stepper_start(state, &w, &c);
	uint32_t rewritten = 0;
	assert_int_equal(vf_compact_steps(v, &rewritten, 0, 1000000, write_between, &w, err,
					  sizeof err), 0);
	assert_true(w.steps >= SW); /* one cluster a step: more steps than writes */
	assert_true(rewritten > 0);
	vecfs_stats st = stats(v);
	/* each write of a step is one delta posting, kept */
	assert_int_equal(st.delta_postings, (uint64_t)w.puts);
	assert_int_equal(st.unindexed, (uint64_t)w.puts);
	assert_int_equal(st.records, N + 1000 - 300 + SW - SW);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	stepper_check(&w);
	vecfs_query_opts ann = {.k = 10};
	vecfs_results *a = search_opts(v, c.q, NQ, D, &ann);
	no_deleted(a);
	keys_unique(a);
	vecfs_results_free(a);
	/* the next one folds them and, the one generation holding every
	 * change after it, empties the change log: the SW * 3 writes made
	 * between the steps, 10 entries a step */
	assert_int_equal(change_log_entries(v), SW * 3);
	assert_int_equal(vf_compact_steps(v, NULL, COMPACT_TEST_US, 10, NULL, NULL, err,
					  sizeof err), 0);
	assert_int_equal(change_log_entries(v), 0);
	st = stats(v);
	assert_int_equal(st.delta_postings, 0);
	assert_int_equal(st.unindexed, 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	stepper_check(&w);
	stepper_end(&w, &c);
}

/* A compaction stopped between two steps (as by a crash) leaves some
 * clusters folded past the generation's blocks_seq: answers stay right,
 * and a rebalance, which compacts first, publishes a generation with
 * every row once. */
static void test_compact_interrupted(void **state)
{
	churned c;
	stepper w;
	char err[256] = "", msg[512];
	vecfs *v = stepper_start(state, &w, &c);
	w.stop_after = 12;
	assert_int_equal(vf_compact_steps(v, NULL, 0, 1000000, write_between, &w, err, sizeof err),
			 -ECANCELED);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	stepper_check(&w);
	uint64_t gen = rebalance(v, 1);
	assert_int_equal(vecfs_active(v), gen);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	stepper_check(&w);
	vecfs_stats st = stats(v);
	vecfs_cluster_info *ci;
	uint32_t nc;
	assert_int_equal(vecfs_gen_clusters(v, gen, &ci, &nc), 0);
	uint64_t postings = 0;
	for (uint32_t i = 0; i < nc; i++)
		postings += ci[i].vectors + ci[i].deltas;
	free(ci);
	/* every live row once: no posting of a row twice in the new one */
	assert_int_equal(postings, st.records);
	vecfs_query_opts ann = {.k = 10};
	vecfs_results *a = search_opts(v, c.q, NQ, D, &ann);
	no_deleted(a);
	keys_unique(a);
	vecfs_results_free(a);
	stepper_end(&w, &c);
}

/* Between the steps of a compaction that first brings 1000 rows into a
 * rolled-back generation, 100 changes a step: every row stays found while
 * the generation lacks some, and what is written meanwhile too. */
typedef struct syncer {
	vecfs *v;
	dataset *ds;
	float *fresh;
	int steps, puts;
} syncer;

static int check_between_syncs(void *arg)
{
	syncer *y = arg;
	char key[16], msg[512];
	for (int i = 2000 + y->steps % 50; i < 3000; i += 50) {
		snprintf(key, sizeof key, "a%d", i);
		find_own(y->v, y->ds->x + (size_t)i * D, key);
	}
	if (y->steps < 20) {
		snprintf(key, sizeof key, "y%d", y->steps);
		assert_int_equal(put_one(y->v, key, y->fresh + y->steps * D, D), 0);
		y->puts++;
	}
	for (int i = 0; i < y->puts; i++) {
		snprintf(key, sizeof key, "y%d", i);
		find_own(y->v, y->fresh + i * D, key);
	}
	if (y->steps++ % 4 == 0)
		assert_int_equal(vecfs_verify(y->v, msg, sizeof msg), 0);
	return 0;
}

static void test_compact_syncs_in_steps(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "", msg[512];
	dataset ds;
	set_config(v, D, VECFS_L2);
	ds_make(&ds, 9, 3000 + 20, D, 20);
	put_range(v, ds.x, 0, 2000, D, "a");
	uint64_t g1 = build(v, 1);
	build(v, 1);
	put_range(v, ds.x, 2000, 1000, D, "a");
	assert_int_equal(vecfs_activate(v, g1, err, sizeof err), 0);
	assert_int_equal(stats(v).unindexed, 1000);
	syncer y = {v, &ds, ds.x + (size_t)3000 * D, 0, 0};
	assert_int_equal(vf_compact_steps(v, NULL, 0, 100, check_between_syncs, &y, err,
					  sizeof err), 0);
	assert_true(y.steps >= 10); /* 1000 changes, 100 a step, then folding */
	/* rows written while it synced are folded by it (its first folding
	 * step fixes the last change it folds); those written later stay
	 * delta postings */
	uint64_t left = stats(v).unindexed;
	assert_true(left > 0 && left < (uint64_t)y.puts);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	check_between_syncs(&y);
	assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).unindexed, 0);
	assert_int_equal(stats(v).delta_postings, 0);
	ds_free(&ds);
}


/* A generation brought up to date in steps (a roll-back made it active
 * again) while one of its records was replaced after the step's end, the
 * replacement posted to the generation itself when it was written.  The
 * step must not post the record's newer version under the older change's
 * number: nothing would ever supersede that posting (the key found twice,
 * or a posting left behind when the record goes). */
typedef struct stop_after {
	int steps, limit;
} stop_after;

static int stop_between(void *arg)
{
	stop_after *s = arg;
	return ++s->steps >= s->limit;
}

/* ANN at x, every cluster probed: no key twice, `key` first (or absent
 * when NULL is given for a deleted key `gone`). */
static void probe_once(vecfs *v, const float *x, const char *key, const char *gone)
{
	vecfs_query_opts o = {.k = 3, .nprobe = 100000};
	vecfs_results *r = search_opts(v, x, 1, D, &o);
	for (size_t h = 0; h < r->count[0]; h++) {
		for (size_t i = 0; i < h; i++)
			if (!strcmp(r->hits[0][i].key, r->hits[0][h].key))
				fail_msg("key %s found twice", r->hits[0][h].key);
		if (gone)
			assert_string_not_equal(r->hits[0][h].key, gone);
	}
	if (key) {
		assert_true(r->count[0] > 0);
		assert_string_equal(r->hits[0][0].key, key);
	}
	vecfs_results_free(r);
}

static void expect_verify(vecfs *v)
{
	char msg[512];
	int rc = vecfs_verify(v, msg, sizeof msg);
	if (rc)
		fail_msg("%s", msg);
}

/* Two generations g1, g2 over rows a0..a1999, and three vectors far
 * apart (different clusters); key u put while g2 is active, then replaced
 * while g1 is (posted to g1 when written).  Leaves g1 active. */
static void replaced_under_g1(vecfs *v, dataset *ds, float far[3][D], uint64_t *g1,
			      uint64_t *g2)
{
	char err[256] = "";
	set_config(v, D, VECFS_L2);
	ds_make(ds, 31, 2000, D, 20);
	put_range(v, ds->x, 0, 2000, D, "a");
	*g1 = build(v, 1);
	*g2 = build(v, 1);
	for (int t = 0; t < 3; t++)
		ds_point(ds, (uint32_t)t * 7, far[t]);
	assert_int_equal(put_one(v, "u", far[0], D), 0);
	assert_int_equal(vecfs_activate(v, *g1, err, sizeof err), 0);
	assert_int_equal(put_one(v, "u", far[1], D), 0);
}

static void test_catchup_replaced_later(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	dataset ds;
	float x[3][D];
	uint64_t g1, g2;
	replaced_under_g1(v, &ds, x, &g1, &g2);
	/* g1 takes the changes it lacks one a step */
	assert_int_equal(vf_compact_steps(v, NULL, 0, 1, NULL, NULL, err, sizeof err), 0);
	expect_verify(v);
	probe_once(v, x[1], "u", NULL);
	/* and the same once g2 is active again */
	assert_int_equal(vecfs_activate(v, g2, err, sizeof err), 0);
	assert_int_equal(vf_compact_steps(v, NULL, 0, 1, NULL, NULL, err, sizeof err), 0);
	expect_verify(v);
	probe_once(v, x[1], "u", NULL);
	ds_free(&ds);
}

static void test_catchup_replaced_then_deleted(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	dataset ds;
	float x[3][D];
	uint64_t g1, g2;
	/* replaced again under g2, by a vector of another cluster */
	replaced_under_g1(v, &ds, x, &g1, &g2);
	assert_int_equal(vecfs_activate(v, g2, err, sizeof err), 0);
	assert_int_equal(put_one(v, "u", x[2], D), 0);
	assert_int_equal(vecfs_activate(v, g1, err, sizeof err), 0);
	/* one catch-up step only, then the record goes while g1 is active */
	stop_after st = {0, 1};
	assert_int_equal(vf_compact_steps(v, NULL, 0, 1, stop_between, &st, err, sizeof err),
			 -ECANCELED);
	del_key(v, "u");
	err[0] = 0;
	assert_int_equal(vf_compact_steps(v, NULL, 0, 1, NULL, NULL, err, sizeof err), 0);
	expect_verify(v);
	for (int t = 0; t < 3; t++)
		probe_once(v, x[t], NULL, "u");
	assert_int_equal(vecfs_activate(v, g2, err, sizeof err), 0);
	expect_verify(v);
	ds_free(&ds);
}

/* A rebalance whose snapshot finds active a generation that a compaction
 * left half folded (it found another generation active after its first
 * step and compacted that one): the parent's blocks hold changes past its
 * blocks_seq, and catching up from there would post them twice.  The
 * rebalance fails with EAGAIN and makes nothing; the next one compacts
 * that generation whole first and passes. */
static uint64_t other_gen;

static int activate_other(void *arg)
{
	char err[256];
	vecfs *v = arg;
	if (other_gen) {
		assert_int_equal(vecfs_activate(v, other_gen, err, sizeof err), 0);
		other_gen = 0;
	}
	return 0;
}

static void activate_other_hook(vecfs *v)
{
	activate_other(v);
}

static void test_rebalance_half_folded_parent(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	dataset ds;
	vecfs_config c;
	set_config(v, D, VECFS_L2);
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.compact_deltas = 1000000; /* no compaction but those called here */
	c.rebalance_ratio = 0;
	c.keep_generations = 3;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	ds_make(&ds, 41, 3000, D, 20);
	put_range(v, ds.x, 0, 2000, D, "a");
	uint64_t ga = build(v, 1);
	uint64_t gb = build(v, 1);
	assert_int_equal(vecfs_activate(v, ga, err, sizeof err), 0);
	put_range(v, ds.x, 2000, 1000, D, "a"); /* delta postings of ga */
	/* ga's compaction folds one cluster, then finds gb active */
	other_gen = gb;
	assert_int_equal(vf_compact_steps(v, NULL, 0, 1000000, activate_other, v, err, sizeof err),
			 0);
	assert_int_equal(vecfs_active(v), gb);
	size_t n0, n1;
	assert_int_equal(vecfs_gen_list(v, NULL, 0, &n0), 0);
	/* ga active again between the rebalance's compaction and snapshot */
	other_gen = ga;
	v->before_snapshot = activate_other_hook;
	int rc = vecfs_rebalance(v, 1, NULL, NULL, NULL, err, sizeof err);
	v->before_snapshot = NULL;
	if (rc != -EAGAIN)
		fail_msg("rebalance: %d %s", rc, err);
	assert_non_null(strstr(err, "not compacted whole"));
	assert_int_equal(vecfs_gen_list(v, NULL, 0, &n1), 0);
	assert_int_equal(n1, n0);
	expect_verify(v);
	uint64_t gen = 0;
	assert_int_equal(vecfs_rebalance(v, 1, &gen, NULL, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_active(v), gen);
	expect_verify(v);
	for (int i = 1990; i < 2010; i++) {
		char key[16];
		snprintf(key, sizeof key, "a%d", i);
		probe_once(v, ds.x + (size_t)i * D, key, NULL);
	}
	ds_free(&ds);
}


/* A function that needs a lock held checks it: vf_compact_locked() without
 * build_mu stops the program (assert) before it touches the store; with
 * build_mu held it compacts. */
static void test_lock_held_checked(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	assert_false(vf_mutex_held(&mu));
	pthread_mutex_lock(&mu);
	assert_true(vf_mutex_held(&mu));
	pthread_mutex_unlock(&mu);
	assert_false(vf_mutex_held(&mu));
#ifndef NDEBUG
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60);
		fclose(stderr); /* (the assertion's message) */
		vf_compact_locked(v, NULL, NULL, 0);
		_exit(0);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
#endif
	char err[256] = "";
	pthread_mutex_lock(&v->build_mu);
	int rc = vf_compact_locked(v, NULL, err, sizeof err);
	pthread_mutex_unlock(&v->build_mu);
	assert_true(rc == 0 || rc == -ENOENT); /* (no generation: nothing to fold) */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_compact_keeps_results, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_after_rollback, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_queries_during_compaction, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_publishes, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_automatic_compaction, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_idle_compaction, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_old_generations_retired, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_splits_skewed, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_keeps_writes, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_merges, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_copy, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_automatic_rebalance, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_in_steps, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_interrupted, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_syncs_in_steps, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_catchup_replaced_later, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_catchup_replaced_then_deleted, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_half_folded_parent, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_lock_held_checked, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
