/*
 * test_generations.c - index generations of the vecfs library: roll-back to
 * an older generation, aborted builds, activation rules, centroids and
 * cluster manifests, verify, stats counters and exclusive opening.
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
#include <ftw.h>
#include <lmdb.h> /* the damaged-page test reads the file as LMDB lays it out */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "handle.h"
#include "keys.h"
#include "record.h"
#include "store.h"
#include "testutil.h"
#include "vecfs.h"

/* ------------------------------------------------------------ generations */

static vecfs_gen_info gen_info(vecfs *v, uint64_t gen)
{
	vecfs_gen_info gi;
	memset(&gi, 0, sizeof gi);
	int rc = vecfs_gen_info_get(v, gen, &gi);
	if (rc != 0)
		print_message("vecfs_gen_info_get(%llu): %d\n",
			      (unsigned long long)gen, rc);
	assert_int_equal(rc, 0);
	assert_true(gi.id == gen);
	return gi;
}

static void activate(vecfs *v, uint64_t gen)
{
	char err[256] = "";
	int rc = vecfs_activate(v, gen, err, sizeof err);
	if (rc != 0)
		print_message("vecfs_activate(%llu): %d %s\n",
			      (unsigned long long)gen, rc, err);
	assert_int_equal(rc, 0);
	assert_true(vecfs_active(v) == gen);
}

static void set_key(char *buf, size_t cap, const char *prefix, size_t i)
{
	snprintf(buf, cap, "%s%zu", prefix, i);
}

/* ------------------------------------------------------------ 1. roll-back */

/* Query at every `step`-th live row: the row itself at rank 0, distance ~0,
 * and every hit consistent with the model.  Returns the summed explain. */
static vecfs_explain find_own_rows(vecfs *v, const dataset *ds, size_t n,
				   const unsigned char *alive, size_t step,
				   size_t start)
{
	vecfs_explain sum;
	memset(&sum, 0, sizeof sum);
	uint32_t D = ds->d;
	size_t missed = 0;
	for (size_t i = start; i < n; i += step) {
		if (!alive[i])
			continue;
		const float *q = ds->x + i * D;
		vecfs_results *r = search1(v, q, D, 5, 0);
		char key[32];
		set_key(key, sizeof key, "r", i);
		assert_true(r->count[0] > 0);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds->x, n, D, alive,
			   "r", q);
		if (strcmp(r->hits[0][0].key, key) != 0 ||
		    !near_zero(VECFS_L2, r->hits[0][0].distance, q, D)) {
			print_message("row %s: rank 0 is %s at %g (gen %llu)\n", key,
				      r->hits[0][0].key, r->hits[0][0].distance,
				      (unsigned long long)r->generation);
			missed++;
		}
		sum.uncovered_scanned += r->explain.uncovered_scanned;
		sum.delta_scanned += r->explain.delta_scanned;
		sum.stale_skipped += r->explain.stale_skipped;
		sum.clusters_probed += r->explain.clusters_probed;
		vecfs_results_free(r);
	}
	assert_int_equal(missed, 0);
	return sum;
}

/* A record that a roll-back leaves to the exact scan of uncovered rows,
 * rewritten (checksum and all) with more numbers than the store's dim: the
 * search fails with EIO, and reads nothing past the record or writes
 * nothing past its room for a vector held in bytes. */
typedef struct widen {
	vf_store *store;
	const char *key;
	uint32_t dim;
} widen;

static int widen_record(vf_txn *txn, void *arg)
{
	widen *w = arg;
	uint64_t id;
	vf_val d;
	vf_record r;
	int rc = vf_keys_get(txn, w->store, w->key, strlen(w->key), &id);
	if (rc || (rc = vf_records_get(txn, w->store, id, &d)) ||
	    (rc = vf_record_decode(d.data, d.len, &r)))
		return rc;
	float vec[64] = {0};
	for (uint32_t i = 0; i < w->dim; i++)
		vec[i] = (float)(i % 200);
	size_t len = vf_record_size(w->dim, VF_VEC_U8, r.keylen, 0);
	uint8_t *buf = malloc(len);
	char key[64];
	if (!buf || r.keylen >= sizeof key) {
		free(buf);
		return -ENOMEM;
	}
	memcpy(key, r.key, r.keylen);
	vf_record_encode(buf, r.seq, w->dim, VF_VEC_U8, vec, key, r.keylen, NULL, 0);
	rc = vf_records_put(txn, w->store, id, buf, len);
	free(buf);
	return rc;
}

static void test_uncovered_record_wrong_dim(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 600;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	float *x = malloc(sizeof(float) * N * D);
	assert_non_null(x);
	rng g = {.s = 17};
	for (size_t i = 0; i < N * D; i++)
		x[i] = (float)(rng_next(&g) % 256); /* whole numbers: held in bytes */
	put_range(v, x, 0, N / 3, D, "w");
	uint64_t ga = build(v, 1);
	put_range(v, x, N / 3, N / 3, D, "w");
	build(v, 1);
	put_range(v, x, 2 * N / 3, N / 3, D, "w"); /* posted to the second only */
	activate(v, ga); /* the last third: scanned exactly, uncovered */
	vecfs_results *r = search1(v, x + (N - 1) * D, D, 5, 0);
	assert_true(r->explain.uncovered_scanned > 0);
	assert_string_equal(r->hits[0][0].key, "w599");
	vecfs_results_free(r);
	widen w = {v->store, "w599", D + 48};
	assert_int_equal(vf_write(v->store, widen_record, &w), 0);
	vecfs_results *out = NULL;
	vecfs_query_opts o = {.k = 5};
	char err[256];
	assert_int_equal(vecfs_search(v, x, 1, D, &o, &out, err, sizeof err), -EIO);
	vecfs_results_free(out);
	free(x);
	fx_close(f);
}

static void test_rollback_finds_uncovered_rows(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t NA = 2500, NB = 800, NC = 400, N = NA + NB + NC;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 101, N, D, 24);
	unsigned char *alive = malloc(N);
	memset(alive, 1, N);

	put_range(v, ds.x, 0, NA, D, "r");
	uint64_t ga = build(v, 1);
	put_range(v, ds.x, NA, NB, D, "r");
	uint64_t gb = build(v, 1);
	assert_true(gb != ga);
	put_range(v, ds.x, NA + NB, NC, D, "r");

	/* deletes: A-era and B-era rows */
	size_t ndel = 0;
	for (size_t i = 0; i < NA + NB; i++) {
		if ((i < NA && i % 10 == 0) || (i >= NA && i % 20 == 1)) {
			char key[32];
			set_key(key, sizeof key, "r", i);
			del_key(v, key);
			alive[i] = 0;
			ndel++;
		}
	}
	/* upserts to another cluster: A-, B- and C-era rows */
	size_t nup = 0, up[200];
	float *old = malloc(200 * D * sizeof(float));
	for (size_t i = 3; i < N && nup < 200; i += 25) {
		if (!alive[i])
			continue;
		memcpy(old + nup * D, ds.x + i * D, D * sizeof(float));
		uint32_t c = (ds.label[i] + 1 + (uint32_t)(i % 7)) % ds.nc;
		ds_point(&ds, c, ds.x + i * D);
		put_range(v, ds.x, i, 1, D, "r");
		up[nup++] = i;
	}
	print_message("%zu rows, %zu deleted, %zu upserted; gens A=%llu B=%llu\n",
		      N, ndel, nup, (unsigned long long)ga,
		      (unsigned long long)gb);
	assert_int_equal(stats(v).records, N - ndel);

	/* roll back to A */
	activate(v, ga);
	vecfs_stats s = stats(v);
	print_message("after roll-back: unindexed %llu delta_postings %llu\n",
		      (unsigned long long)s.unindexed,
		      (unsigned long long)s.delta_postings);
	assert_true(s.active == ga);
	assert_true(s.unindexed > 0);

	vecfs_explain sum = find_own_rows(v, &ds, N, alive, 13, 0);
	print_message("roll-back queries: uncovered_scanned %llu delta_scanned %llu stale_skipped %llu\n",
		      (unsigned long long)sum.uncovered_scanned,
		      (unsigned long long)sum.delta_scanned,
		      (unsigned long long)sum.stale_skipped);
	assert_true(sum.uncovered_scanned > 0);

	/* every upserted row at its new place, and never with its old distance */
	for (size_t t = 0; t < nup; t++) {
		size_t i = up[t];
		char key[32];
		set_key(key, sizeof key, "r", i);
		vecfs_results *r = search1(v, ds.x + i * D, D, 5, 0);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, alive,
			   "r", ds.x + i * D);
		if (strcmp(r->hits[0][0].key, key) != 0)
			print_message("upserted %s not at rank 0 at its new place (got %s)\n",
				      key, r->hits[0][0].key);
		assert_string_equal(r->hits[0][0].key, key);
		assert_true(r->generation == ga);
		vecfs_results_free(r);
		if (t % 3)
			continue;
		r = search1(v, old + t * D, D, 10, 0);
		check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D, alive,
			   "r", old + t * D);
		vecfs_results_free(r);
	}
	/* deleted rows never come back, queried where they were */
	size_t q_at_deleted = 0;
	for (size_t i = 0; i < N; i += 7) {
		if (alive[i])
			continue;
		int exact = q_at_deleted % 5 == 4;
		vecfs_results *r = search1(v, ds.x + i * D, D, 10, exact);
		assert_int_equal(r->count[0], 10);
		if (exact)
			check_exact(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D,
				    alive, "r", ds.x + i * D, 10);
		else
			check_hits(r->hits[0], r->count[0], VECFS_L2, ds.x, N, D,
				   alive, "r", ds.x + i * D);
		vecfs_results_free(r);
		q_at_deleted++;
	}
	assert_true(q_at_deleted > 10);

	/* new rows written while the old generation is active are found too */
	float extra[16];
	ds_fresh(&ds, extra);
	assert_int_equal(put_one(v, "fresh", extra, D), 0);
	vecfs_results *r = search1(v, extra, D, 3, 0);
	assert_string_equal(r->hits[0][0].key, "fresh");
	vecfs_results_free(r);
	del_key(v, "fresh");

	/* and forward again to B: same answers */
	activate(v, gb);
	find_own_rows(v, &ds, N, alive, 29, 5);

	free(old);
	free(alive);
	ds_free(&ds);
}

/* ------------------------------------------------------------ 2. abort */

typedef struct progress_log {
	int calls;
	int bad_pct;
	int abort_at_encode;
	int aborted;
	char phases[256];
} progress_log;

static int on_progress(void *arg, const char *phase, int pct)
{
	progress_log *pl = arg;
	pl->calls++;
	if (pct < 0 || pct > 100)
		pl->bad_pct++;
	size_t len = strlen(pl->phases);
	const char *last = strrchr(pl->phases, ' ');
	last = last ? last + 1 : pl->phases;
	if (phase && strcmp(last, phase) != 0 && len + strlen(phase) + 2 < sizeof pl->phases)
		snprintf(pl->phases + len, sizeof pl->phases - len, "%s%s",
			 len ? " " : "", phase);
	if (pl->abort_at_encode &&
	    ((phase && strcmp(phase, "encode") == 0) || pl->calls >= 200)) {
		pl->aborted = 1;
		return 1;
	}
	return 0;
}

static void test_aborted_build_keeps_previous(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 2500, NQ = 8;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 202, N, D, 20);
	put_range(v, ds.x, 0, N, D, "r");

	progress_log pl;
	memset(&pl, 0, sizeof pl);
	char err[256] = "";
	uint64_t ga = 0;
	int rc = vecfs_build(v, 1, &ga, on_progress, &pl, err, sizeof err);
	if (rc != 0)
		print_message("vecfs_build: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	print_message("build A=%llu: %d progress calls, phases: %s\n",
		      (unsigned long long)ga, pl.calls, pl.phases);
	assert_true(pl.calls > 0);
	assert_int_equal(pl.bad_pct, 0);
	assert_true(vecfs_active(v) == ga);

	float *qs = malloc(NQ * D * sizeof(float));
	for (size_t i = 0; i < NQ; i++)
		ds_fresh(&ds, qs + i * D);
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	o.k = 10;
	vecfs_results *before = search_opts(v, qs, NQ, D, &o);

	memset(&pl, 0, sizeof pl);
	pl.abort_at_encode = 1;
	uint64_t gx = 0;
	err[0] = 0;
	rc = vecfs_build(v, 1, &gx, on_progress, &pl, err, sizeof err);
	print_message("aborted build: rc %d '%s', gen_out %llu, %d calls, phases: %s\n",
		      rc, err, (unsigned long long)gx, pl.calls, pl.phases);
	assert_true(pl.aborted);
	assert_int_equal(rc, -ECANCELED);
	int aborted_has_reason = err[0] != '\0';
	assert_true(vecfs_active(v) == ga);
	assert_true(stats(v).active == ga);

	vecfs_results *after = search_opts(v, qs, NQ, D, &o);
	assert_true(after->generation == ga);
	for (size_t i = 0; i < NQ; i++) {
		assert_int_equal(after->count[i], before->count[i]);
		for (size_t h = 0; h < after->count[i]; h++) {
			assert_string_equal(after->hits[i][h].key,
					    before->hits[i][h].key);
			assert_true(after->hits[i][h].distance ==
				    before->hits[i][h].distance);
		}
	}
	vecfs_results_free(after);

	uint64_t ids[16];
	size_t n = 0;
	assert_int_equal(vecfs_gen_list(v, ids, 16, &n), 0);
	assert_true(n >= 1 && n <= 16);
	int saw_a = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] == ga) {
			saw_a = 1;
			continue;
		}
		vecfs_gen_info gi = gen_info(v, ids[i]);
		print_message("listed generation %llu: state %d phase %s\n",
			      (unsigned long long)ids[i], (int)gi.state, gi.phase);
		assert_true(gi.state != VECFS_GEN_READY);
		rc = vecfs_activate(v, ids[i], err, sizeof err);
		assert_true(rc == -EINVAL || rc == -ENOENT);
		assert_true(vecfs_active(v) == ga);
	}
	assert_true(saw_a);
	if (gx != 0 && gx != ga) {
		rc = vecfs_activate(v, gx, err, sizeof err);
		assert_true(rc == -EINVAL || rc == -ENOENT);
	}
	assert_true(vecfs_active(v) == ga);

	char msg[256] = "";
	rc = vecfs_verify(v, msg, sizeof msg);
	if (rc != 0)
		print_message("verify after abort: %d %s\n", rc, msg);
	assert_int_equal(rc, 0);

	/* the store is not wedged: the next build works */
	uint64_t gc = build(v, 1);
	assert_true(gc != ga);
	assert_int_equal(gen_info(v, gc).state, VECFS_GEN_READY);
	after = search_opts(v, qs, NQ, D, &o);
	for (size_t i = 0; i < NQ; i++) {
		assert_int_equal(after->count[i], 10);
		check_hits(after->hits[i], after->count[i], VECFS_L2, ds.x, N, D,
			   NULL, "r", qs + i * D);
	}
	vecfs_results_free(after);
	vecfs_results_free(before);
	free(qs);
	ds_free(&ds);
	/* failures write a one-line reason into err */
	if (!aborted_has_reason)
		print_message("the aborted build wrote no reason into err\n");
	assert_true(aborted_has_reason);
}

/* ------------------------------------------------------------ 3. activate */

static void test_activate_rules(void **state)
{
	fixture *f = *state;
	const uint32_t D = 12;
	const size_t NA = 1500, NB = 300, N = NA + NB;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_COSINE);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	uint32_t bits_a = c.bits;
	assert_true(bits_a >= 1 && bits_a <= 8);
	dataset ds;
	ds_make(&ds, 303, N, D, 12);
	put_range(v, ds.x, 0, NA, D, "r");
	time_t t0 = time(NULL);
	uint64_t ga = build(v, 1);

	vecfs_gen_info a = gen_info(v, ga);
	assert_int_equal(a.state, VECFS_GEN_READY);
	assert_true(a.nlist > 0 && a.nlist <= NA);
	assert_int_equal(a.dim, D);
	assert_int_equal(a.metric, VECFS_COSINE);
	assert_int_equal(a.covered, NA);
	assert_int_equal(a.bits, bits_a);
	assert_true(a.parent == 0);
	assert_true(a.created + 5 >= (uint64_t)t0 && a.created <= (uint64_t)time(NULL) + 5);
	assert_true(a.build_seconds >= 0);
	assert_int_equal(a.delta_postings, 0);
	assert_int_equal(a.tombstones, 0);
	assert_string_equal(a.phase, "done");
	assert_int_equal(a.phase_pct, 100);

	/* out-of-range bits and a metric change with records: refused */
	vecfs_config bad = c;
	bad.bits = 9;
	assert_int_equal(vecfs_config_set(v, &bad, NULL, 0), -EINVAL);
	bad.bits = 0;
	assert_int_equal(vecfs_config_set(v, &bad, NULL, 0), -EINVAL);
	bad = c;
	bad.metric = VECFS_L2;
	assert_int_equal(vecfs_config_set(v, &bad, NULL, 0), -EBUSY);
	bad = c;
	bad.dim = D + 1;
	assert_int_equal(vecfs_config_set(v, &bad, NULL, 0), -EBUSY);

	put_range(v, ds.x, NA, NB, D, "r");
	c.nlist = 8;
	c.bits = bits_a == 2 ? 3 : 2;
	char err[256] = "";
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	uint64_t gb = build(v, 1);
	assert_true(gb > ga);
	vecfs_gen_info b = gen_info(v, gb);
	assert_int_equal(b.state, VECFS_GEN_READY);
	assert_int_equal(b.nlist, 8);
	assert_int_equal(b.bits, c.bits);
	assert_int_equal(b.covered, N);
	assert_true(b.parent == ga);
	assert_int_equal(b.dim, D);
	assert_int_equal(b.metric, VECFS_COSINE);

	uint64_t missing = gb + 1000;
	assert_int_equal(vecfs_activate(v, missing, err, sizeof err), -ENOENT);
	assert_int_equal(vecfs_gen_remove(v, gb), -EBUSY);
	assert_int_equal(vecfs_gen_remove(v, missing), -ENOENT);
	vecfs_gen_info gi;
	assert_int_equal(vecfs_gen_info_get(v, missing, &gi), -ENOENT);
	assert_true(vecfs_active(v) == gb);

	uint64_t ids[8];
	size_t n = 0;
	assert_int_equal(vecfs_gen_list(v, ids, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_true(ids[0] == ga && ids[1] == gb);
	n = 0;
	ids[1] = 0;
	assert_int_equal(vecfs_gen_list(v, ids, 1, &n), 0);
	assert_int_equal(n, 2);
	assert_true(ids[0] == ga);
	assert_int_equal(stats(v).generations, 2);

	activate(v, ga);
	assert_int_equal(vecfs_gen_remove(v, ga), -EBUSY);
	activate(v, gb);

	assert_int_equal(vecfs_gen_remove(v, ga), 0);
	assert_int_equal(vecfs_gen_list(v, ids, 8, &n), 0);
	assert_int_equal(n, 1);
	assert_true(ids[0] == gb);
	assert_int_equal(vecfs_gen_info_get(v, ga, &gi), -ENOENT);
	assert_int_equal(vecfs_activate(v, ga, err, sizeof err), -ENOENT);
	assert_int_equal(vecfs_gen_remove(v, ga), -ENOENT);
	float *cent = NULL;
	uint32_t nl = 0, dd = 0;
	assert_int_equal(vecfs_gen_centroids(v, ga, &cent, &nl, &dd), -ENOENT);
	vecfs_stats s = stats(v);
	assert_int_equal(s.generations, 1);
	assert_true(s.active == gb);

	/* searches go on */
	float q[12];
	ds_fresh(&ds, q);
	vecfs_results *r = search1(v, q, D, 10, 0);
	assert_int_equal(r->count[0], 10);
	assert_true(r->generation == gb);
	check_hits(r->hits[0], r->count[0], VECFS_COSINE, ds.x, N, D, NULL, "r", q);
	vecfs_results_free(r);

	/* a newer build gets a larger id than any before, removed ones included */
	uint64_t gc = build(v, 0);
	assert_true(gc > gb);
	assert_true(vecfs_active(v) == gb);
	assert_int_equal(gen_info(v, gc).state, VECFS_GEN_READY);
	assert_true(gen_info(v, gc).parent == gb);
	ds_free(&ds);
}

/* ------------------------------------------------------------ 4. clusters */

typedef struct cluster_sums {
	uint64_t vectors, deltas, tombstones, blocks;
} cluster_sums;

static cluster_sums clusters(vecfs *v, uint64_t gen, uint32_t nlist)
{
	vecfs_cluster_info *ci = NULL;
	uint32_t n = 0;
	int rc = vecfs_gen_clusters(v, gen, &ci, &n);
	assert_int_equal(rc, 0);
	assert_int_equal(n, nlist);
	assert_non_null(ci);
	unsigned char *seen = calloc(nlist, 1);
	cluster_sums s;
	memset(&s, 0, sizeof s);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(ci[i].id < nlist);
		assert_false(seen[ci[i].id]);
		seen[ci[i].id] = 1;
		s.vectors += ci[i].vectors;
		s.deltas += ci[i].deltas;
		s.tombstones += ci[i].tombstones;
		s.blocks += ci[i].blocks;
	}
	free(seen);
	free(ci);
	return s;
}

static void test_centroids_and_clusters(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 2000, ADD = 40, DEL = 15;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	vecfs_config c;
	char err[256] = "";
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.compact_deltas = 100000; /* keep deltas uncompacted for counting */
	int rc = vecfs_config_set(v, &c, err, sizeof err);
	if (rc != 0)
		print_message("compact_deltas = 100000: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	dataset ds;
	ds_make(&ds, 404, N + ADD, D, 20);
	put_range(v, ds.x, 0, N, D, "r");
	uint64_t gen = build(v, 1);
	vecfs_gen_info gi = gen_info(v, gen);
	assert_true(gi.nlist > 0);
	assert_int_equal(gi.covered, N);

	float *cent = NULL;
	uint32_t nl = 0, dd = 0;
	assert_int_equal(vecfs_gen_centroids(v, gen, &cent, &nl, &dd), 0);
	assert_non_null(cent);
	assert_int_equal(nl, gi.nlist);
	assert_int_equal(dd, D);
	size_t distinct = 0;
	for (size_t i = 0; i < (size_t)nl * dd; i++) {
		assert_true(isfinite(cent[i]));
		/* means of points drawn around centers in [-10,10] */
		assert_true(fabsf(cent[i]) < 20.0f);
	}
	for (uint32_t i = 1; i < nl; i++)
		if (memcmp(cent, cent + (size_t)i * dd, dd * sizeof(float)) != 0)
			distinct++;
	assert_true(nl == 1 || distinct > 0);
	free(cent);

	cluster_sums s = clusters(v, gen, gi.nlist);
	print_message("nlist %u: vectors %llu blocks %llu deltas %llu tombstones %llu\n",
		      gi.nlist, (unsigned long long)s.vectors,
		      (unsigned long long)s.blocks, (unsigned long long)s.deltas,
		      (unsigned long long)s.tombstones);
	assert_int_equal(s.vectors, N);
	assert_int_equal(s.deltas, 0);
	assert_int_equal(s.tombstones, 0);
	assert_true(s.blocks > 0);

	put_range(v, ds.x, N, ADD, D, "r");
	s = clusters(v, gen, gi.nlist);
	assert_int_equal(s.deltas, ADD);
	assert_int_equal(s.vectors, N + ADD);
	assert_int_equal(gen_info(v, gen).delta_postings, ADD);
	assert_int_equal(stats(v).delta_postings, ADD);

	for (size_t i = 0; i < DEL; i++) {
		char key[32];
		set_key(key, sizeof key, "r", i * 101);
		del_key(v, key);
	}
	s = clusters(v, gen, gi.nlist);
	assert_int_equal(s.tombstones, DEL);
	assert_int_equal(s.vectors, N + ADD - DEL);
	assert_int_equal(s.deltas, ADD);
	gi = gen_info(v, gen);
	assert_int_equal(gi.tombstones, DEL);
	assert_int_equal(gi.covered, N);

	vecfs_cluster_info *ci = NULL;
	uint32_t n = 0;
	assert_int_equal(vecfs_gen_clusters(v, gen + 77, &ci, &n), -ENOENT);
	assert_int_equal(vecfs_gen_centroids(v, gen + 77, &cent, &nl, &dd), -ENOENT);
	ds_free(&ds);
}

/* ------------------------------------------------------------ 5. verify */

static void expect_verify_ok(vecfs *v, const char *when)
{
	char msg[512] = "";
	int rc = vecfs_verify(v, msg, sizeof msg);
	print_message("verify (%s): %d '%s'\n", when, rc, msg);
	assert_int_equal(rc, 0);
	assert_true(strncmp(msg, "verify: ok", 10) == 0);
}

static void test_verify_healthy(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 2000;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	expect_verify_ok(v, "empty store");
	dataset ds;
	ds_make(&ds, 505, N + 200, D, 20);
	put_range(v, ds.x, 0, N, D, "r");
	expect_verify_ok(v, "records, no generation");
	uint64_t ga = build(v, 1);
	expect_verify_ok(v, "one generation");
	put_range(v, ds.x, N, 100, D, "r");
	for (size_t i = 0; i < 50; i++) {
		char key[32];
		set_key(key, sizeof key, "r", i * 7);
		del_key(v, key);
	}
	put_range(v, ds.x + 500 * D, 1, 20, D, "r"); /* upserts */
	expect_verify_ok(v, "deltas, deletes, upserts");
	build(v, 1);
	put_range(v, ds.x, N + 100, 100, D, "r");
	activate(v, ga);
	expect_verify_ok(v, "rolled back with newer rows");
	ds_free(&ds);
}

/* A damaged page of the store's file: verify names what it was reading
 * and LMDB's word for the damage, not a bare I/O error, and does not take
 * the damage for a missing record. */
static void test_verify_damaged_file(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 3000;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 707, N, D, 20);
	put_range(v, ds.x, 0, N, D, "r");
	build(v, 1);
	expect_verify_ok(v, "before the damage");
	fx_close(f);
	ds_free(&ds);

	/* the leaf page holding record id 1500: where its bytes are in the file */
	vf_store *s;
	char err[256], path[128];
	MDB_txn *txn;
	MDB_val val;
	MDB_stat st;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	assert_int_equal(vf_read_begin(s, &txn), 0);
	vf_key64 k = vf_key_u64(1500);
	assert_int_equal(mdb_get(txn, s->records, &(MDB_val){8, k.b}, &val), 0);
	assert_int_equal(mdb_env_stat(s->env, &st), 0);
	size_t rlen = val.mv_size;
	char *rec = malloc(rlen);
	assert_non_null(rec);
	memcpy(rec, val.mv_data, rlen);
	vf_read_end(s, txn);
	vf_store_close(s);
	snprintf(path, sizeof path, "%s/data.mdb", f->dir);
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	fseek(fp, 0, SEEK_END);
	long flen = ftell(fp);
	char *file = malloc((size_t)flen);
	assert_non_null(file);
	rewind(fp);
	assert_int_equal(fread(file, 1, (size_t)flen, fp), (size_t)flen);
	fclose(fp);
	const char *at = memmem(file, (size_t)flen, rec, rlen);
	assert_non_null(at);
	assert_null(memmem(at + 1, (size_t)(file + flen - at - 1), rec, rlen)); /* one copy */
	off_t page = (off_t)((at - file) / st.ms_psize * st.ms_psize);
	free(file);
	free(rec);

	/* its flags (bytes 10-11 of LMDB's page header) cleared: the page is
	 * neither a branch nor a leaf any more */
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	uint16_t zero = 0;
	assert_int_equal(pwrite(fd, &zero, 2, page + 10), 2);
	close(fd);

	/* no background walk of the records: LMDB aborts a cursor that steps
	 * onto a damaged page (verify's record reads are point lookups) */
	setenv("VECFS_NO_HINT_FILL", "1", 1);
	v = fx_open(f, NULL);
	unsetenv("VECFS_NO_HINT_FILL");
	char msg[512] = "";
	int rc = vecfs_verify(v, msg, sizeof msg);
	print_message("verify (damaged page at %lld): %d '%s'\n", (long long)page, rc, msg);
	assert_int_equal(rc, -EIO);
	assert_non_null(strstr(msg, "verify: failed reading record id "));
	assert_non_null(strstr(msg, "MDB_CORRUPTED"));
	assert_non_null(strstr(msg, "restore it from a backup"));
}

/* ------------------------------------------------------------ 6. stats */

static void test_stats_counters(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t N = 1500;
	vecfs *v = fx_open(f, NULL);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.auto_build = 0;
	assert_int_equal(vecfs_config_set(v, &c, NULL, 0), 0);

	vecfs_stats s = stats(v);
	assert_int_equal(s.records, 0);
	assert_int_equal(s.deleted, 0);
	assert_int_equal(s.generations, 0);
	assert_int_equal(s.active, 0);
	assert_int_equal(s.ingest_rows, 0);
	assert_int_equal(s.queries, 0);
	assert_int_equal(s.next_key, 0);
	assert_int_equal(s.dim, 0);
	assert_int_equal(s.delta_postings, 0);

	dataset ds;
	ds_make(&ds, 606, N + 200, D, 20);
	put_range(v, ds.x, 0, N, D, NULL);
	s = stats(v);
	assert_int_equal(s.records, N);
	assert_int_equal(s.ingest_rows, N);
	assert_int_equal(s.dim, D);
	assert_int_equal(s.metric, VECFS_L2);
	assert_int_equal(s.next_key, N);
	assert_true(s.store_bytes > 0);

	float q[4 * 16];
	for (int i = 0; i < 4; i++)
		ds_fresh(&ds, q + i * D);
	for (int i = 0; i < 3; i++)
		vecfs_results_free(search1(v, q + i * D, D, 5, i == 2));
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	o.k = 5;
	vecfs_results_free(search_opts(v, q, 4, D, &o));
	s = stats(v);
	assert_int_equal(s.queries, 7);
	assert_true(s.p50_us <= s.p99_us);

	uint64_t ga = build(v, 1);
	s = stats(v);
	assert_int_equal(s.generations, 1);
	assert_true(s.active == ga);
	assert_int_equal(s.unindexed, 0);
	assert_int_equal(s.delta_postings, 0);
	assert_int_equal(s.queries, 7);

	put_range(v, ds.x, N, 100, D, "x");
	s = stats(v);
	assert_int_equal(s.records, N + 100);
	assert_int_equal(s.ingest_rows, N + 100);
	assert_int_equal(s.unindexed, 100); /* in delta postings, not yet in blocks */
	assert_int_equal(s.delta_postings, 100);
	assert_int_equal(s.next_key, N);

	uint64_t gb = build(v, 1);
	s = stats(v);
	assert_int_equal(s.generations, 2);
	assert_true(s.active == gb);
	assert_int_equal(s.unindexed, 0);
	assert_int_equal(s.delta_postings, 0);

	put_range(v, ds.x, N + 100, 50, D, "y");
	s = stats(v);
	assert_int_equal(s.unindexed, 50);
	assert_int_equal(s.delta_postings, 50);

	activate(v, ga);
	s = stats(v);
	print_message("rolled back to %llu: unindexed %llu, delta_postings %llu\n",
		      (unsigned long long)ga, (unsigned long long)s.unindexed,
		      (unsigned long long)s.delta_postings);
	assert_true(s.active == ga);
	assert_int_equal(s.generations, 2);
	/* ga's blocks hold neither the 100 rows posted to it as deltas nor the
	 * 50 written while gb was active */
	assert_int_equal(s.unindexed, 150);
	uint64_t unindexed = s.unindexed;

	for (int i = 0; i < 10; i++) {
		char key[32];
		set_key(key, sizeof key, "", (size_t)i * 13);
		del_key(v, key);
	}
	assert_int_equal(vecfs_delete(v, "0", 1), -ENOENT);
	s = stats(v);
	assert_int_equal(s.deleted, 10);
	assert_int_equal(s.records, N + 150 - 10);
	assert_int_equal(s.unindexed, unindexed);

	activate(v, gb);
	s = stats(v);
	assert_int_equal(s.unindexed, 50); /* the y rows, in gb's deltas */

	/* an upsert: one more ingested row, no more records; an x row moves
	 * out of gb's blocks into a delta posting */
	assert_int_equal(put_one(v, "x1505", ds.x, D), 0);
	s = stats(v);
	assert_int_equal(s.records, N + 150 - 10);
	assert_int_equal(s.ingest_rows, N + 150 + 1);
	assert_int_equal(s.unindexed, 51);
	vecfs_results_free(search1(v, q, D, 5, 0));
	assert_int_equal(stats(v).queries, 8);
	ds_free(&ds);
}

/* ------------------------------------------------------------ 7. exclusive */

static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	char *b = malloc((size_t)n + 1);
	assert_non_null(b);
	rewind(fp);
	assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	*len = (size_t)n;
	return b;
}

/* A read-only handle reads a store as it is, writes nothing (every write
 * is -EROFS), opens beside a process that holds the store, and never
 * creates one. */
static void test_readonly_open(void **state)
{
	fixture *f = *state;
	const uint32_t D = 8;
	const size_t N = 500;
	char err[256] = "", path[128], key[32];
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 808, N + 1, D, 10);
	put_range(v, ds.x, 0, N, D, "r");
	uint64_t gen = build(v, 1);
	for (size_t i = 0; i < 10; i++) {
		set_key(key, sizeof key, "r", i * 3);
		del_key(v, key);
	}
	fx_close(f);
	snprintf(path, sizeof path, "%s/data.mdb", f->dir);
	size_t len0, len1;
	char *before = slurp(path, &len0);

	vecfs *ro = NULL;
	assert_int_equal(vecfs_open_readonly(f->dir, &ro, err, sizeof err), 0);
	assert_int_equal(stats(ro).records, N - 10);
	assert_int_equal(vecfs_active(ro), gen);
	for (int exact = 0; exact < 2; exact++) {
		vecfs_results *r = search1(ro, ds.x + 7 * D, D, 5, exact);
		assert_int_equal(r->count[0], 5);
		assert_string_equal(r->hits[0][0].key, "r7");
		vecfs_results_free(r);
	}
	float got[8];
	uint32_t dim = 0;
	assert_int_equal(vecfs_get(ro, "r7", 2, got, D, &dim, NULL, 0, NULL), 0);
	assert_memory_equal(got, ds.x + 7 * D, sizeof got);
	char msg[512] = "";
	assert_int_equal(vecfs_verify(ro, msg, sizeof msg), 0);
	/* every write refused, nothing changed */
	vecfs_row row = { "new", 3, ds.x + N * D, NULL, 0 };
	assert_int_equal(vecfs_put(ro, &row, 1, D, NULL, err, sizeof err), -EROFS);
	assert_int_equal(vecfs_delete(ro, "r7", 2), -EROFS);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(ro, &c), 0);
	c.k = 7;
	assert_int_equal(vecfs_config_set(ro, &c, err, sizeof err), -EROFS);
	uint64_t g2 = 0;
	assert_int_equal(vecfs_build(ro, 1, &g2, NULL, NULL, err, sizeof err), -EROFS);
	assert_int_equal(vecfs_compact(ro, NULL, err, sizeof err), -EROFS);
	assert_int_equal(vecfs_activate(ro, gen, err, sizeof err), -EROFS);
	assert_int_equal(stats(ro).records, N - 10);
	vecfs_close(ro);
	char *after = slurp(path, &len1);
	assert_int_equal(len1, len0);
	assert_memory_equal(after, before, len0);
	free(before);
	free(after);

	/* beside another process that holds the store and writes to it */
	int go[2], done[2];
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(done), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60);
		vecfs *w = NULL;
		char c1 = 0;
		if (vecfs_open(f->dir, &w, NULL, 0) || put_one(w, "new", ds.x + N * D, D) ||
		    write(go[1], "w", 1) != 1 || read(done[0], &c1, 1) != 1)
			_exit(1);
		vecfs_close(w);
		_exit(0);
	}
	char c1;
	assert_int_equal(read(go[0], &c1, 1), 1);
	assert_int_equal(vecfs_open_readonly(f->dir, &ro, err, sizeof err), 0);
	assert_int_equal(stats(ro).records, N - 9);
	assert_int_equal(vecfs_get(ro, "new", 3, got, D, &dim, NULL, 0, NULL), 0);
	vecfs_close(ro);
	assert_int_equal(write(done[1], "d", 1), 1);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(go[0]), close(go[1]), close(done[0]), close(done[1]);

	/* nothing there: an error, and no store made */
	char none[128];
	snprintf(none, sizeof none, "%s/none", f->dir);
	ro = NULL;
	assert_int_equal(vecfs_open_readonly(none, &ro, err, sizeof err), -ENOENT);
	print_message("read-only open of nothing: '%s'\n", err);
	struct stat st;
	assert_int_not_equal(stat(none, &st), 0);
	ds_free(&ds);
}

static void test_exclusive_open(void **state)
{
	fixture *f = *state;
	const uint32_t D = 4;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	float a[4] = { 1, 2, 3, 4 }, b[4] = { 4, 3, 2, 1 }, got[4];
	uint32_t dim = 0;
	assert_int_equal(put_one(v, "a", a, D), 0);

	char err[256] = "";
	vecfs *v2 = NULL;
	int rc = vecfs_open(f->dir, &v2, err, sizeof err);
	print_message("second open: %d '%s'\n", rc, err);
	if (rc == 0 && v2)
		vecfs_close(v2);
	assert_int_equal(rc, -EBUSY);

	char alt[PATH_MAX];
	snprintf(alt, sizeof alt, "%s/.", f->dir);
	v2 = NULL;
	rc = vecfs_open(alt, &v2, err, sizeof err);
	if (rc == 0 && v2)
		vecfs_close(v2);
	if (rc != -EBUSY)
		print_message("open via %s: %d\n", alt, rc);
	assert_int_equal(rc, -EBUSY);

	/* another process (a second daemon) refuses too */
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60);
		vecfs *vc = NULL;
		int crc = vecfs_open(f->dir, &vc, NULL, 0);
		_exit(crc == -EBUSY ? 0 : crc == 0 ? 2 : 1);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) != 0)
		print_message("open in a child process: exit %d (2: it succeeded)\n",
			      WEXITSTATUS(status));
	assert_int_equal(WEXITSTATUS(status), 0);

	/* the first handle is unharmed */
	assert_int_equal(put_one(v, "b", b, D), 0);
	assert_int_equal(vecfs_get(v, "a", 1, got, 4, &dim, NULL, 0, NULL), 0);
	assert_memory_equal(got, a, sizeof a);
	vecfs_results *r = search1(v, b, D, 5, 1);
	assert_int_equal(r->count[0], 2);
	assert_string_equal(r->hits[0][0].key, "b");
	vecfs_results_free(r);

	fx_close(f);
	v = fx_open(f, NULL);
	assert_int_equal(stats(v).records, 2);
	assert_int_equal(vecfs_get(v, "b", 1, got, 4, &dim, NULL, 0, NULL), 0);
	assert_memory_equal(got, b, sizeof b);
	v2 = NULL;
	rc = vecfs_open(f->dir, &v2, err, sizeof err);
	if (rc == 0 && v2)
		vecfs_close(v2);
	assert_int_equal(rc, -EBUSY);
	fx_close(f);

	/* and once closed, another process may open it */
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60);
		vecfs *vc = NULL;
		int crc = vecfs_open(f->dir, &vc, NULL, 0);
		if (crc == 0)
			vecfs_close(vc);
		_exit(crc == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rollback_finds_uncovered_rows, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_uncovered_record_wrong_dim, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_aborted_build_keeps_previous, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_activate_rules, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_centroids_and_clusters, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_verify_healthy, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_verify_damaged_file, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stats_counters, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_exclusive_open, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_readonly_open, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
