/*
 * tests/test_batch.c - large atomic writes (vecfs_batch_*): rows spooled
 * into a temporary file next to the store stay invisible until the
 * commit, which applies all of them in order; an aborted or failed batch
 * leaves nothing behind.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "math/rotation.h" /* vf_padded_dim() */
#include "testutil.h"
#include "store.h"
#include "gen/gen.h" /* VF_NEAR_CHUNK */
#include "vecfs.h"

#define D 64
/* enough rows (2.9 MB) to fill a batch's write buffer, set to SPOOL
 * (spool_bytes, VECFS_BATCH_BUF by default), many times over, and to
 * span three chunks */
#define NBIG 10000
#define SPOOL (64u << 10)

static float *rows_of(size_t n, uint64_t seed)
{
	rng r = {seed, 0, 0};
	float *x = malloc(sizeof(float) * n * D);
	assert_non_null(x);
	for (size_t i = 0; i < n * D; i++)
		x[i] = (float)rng_gauss(&r);
	return x;
}

static void add_rows(vecfs_batch *b, const float *x, size_t n, const char *prefix)
{
	char err[256] = "", key[32];
	for (size_t i = 0; i < n; i++) {
		vecfs_row row = {NULL, 0, x + i * D, NULL, 0};
		if (prefix) {
			snprintf(key, sizeof key, "%s%zu", prefix, i);
			row.key = key;
			row.keylen = strlen(key);
		}
		size_t bad = 99;
		int rc = vecfs_batch_add(b, &row, NULL, 1, &bad, err, sizeof err);
		if (rc)
			print_message("add %zu: %d %s\n", i, rc, err);
		assert_int_equal(rc, 0);
	}
}

static void test_small_batch_assigns_keys(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "";
	float *x = rows_of(5, 1);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x, 5, NULL);
	assert_int_equal(vecfs_batch_rows(b), 5);
	assert_int_equal(stats(v).records, 0); /* nothing before the commit */
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).records, 5);
	for (int i = 0; i < 5; i++) {
		char key[16];
		float got[D];
		uint32_t dim = 0;
		snprintf(key, sizeof key, "%d", i);
		assert_int_equal(vecfs_get(v, key, strlen(key), got, D, &dim, NULL, 0, NULL), 0);
		assert_int_equal(dim, D);
		assert_memory_equal(got, x + i * D, sizeof got);
	}
	free(x);
}

static void test_large_batch_is_atomic(void **state)
{
	fixture *f = *state;
	/* a map of 1 MiB, which the rows (2.6 MB) fill: the commit asks for
	 * their room first, so it runs once (it used to fill the map, be
	 * aborted and run again, twice) */
	setenv("VECFS_MAPSIZE", "1048576", 1);
	vecfs *v = fx_open(f, NULL);
	unsetenv("VECFS_MAPSIZE");
	assert_int_equal(v->store->mapsize, (size_t)1 << 20);
	v->spool_bytes = SPOOL;
	char err[256] = "";
	set_config(v, D, VECFS_L2);
	float *x = rows_of(NBIG, 2), *y = rows_of(1, 3);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x, NBIG, "k");
	/* the same key again after the spooled rows: the later row wins */
	vecfs_row again = {"k7", 2, y, NULL, 0};
	assert_int_equal(vecfs_batch_add(b, &again, NULL, 1, NULL, err, sizeof err), 0);
	/* spooled rows are invisible: no record, no search hit */
	assert_int_equal(stats(v).records, 0);
	assert_int_equal(vecfs_get(v, "k0", 2, NULL, 0, &(uint32_t){0}, NULL, 0, NULL), -ENOENT);
	uint64_t redone = vf_store_writes_redone(v->store);
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), 0);
	assert_int_equal(vf_store_writes_redone(v->store), redone);
	assert_true(v->store->mapsize > (size_t)NBIG * D * sizeof(float));
	assert_int_equal(stats(v).records, NBIG);
	float got[D];
	uint32_t dim;
	assert_int_equal(vecfs_get(v, "k7", 2, got, D, &dim, NULL, 0, NULL), 0);
	assert_memory_equal(got, y, sizeof got);
	char last[32];
	int ln = snprintf(last, sizeof last, "k%d", NBIG - 1);
	assert_int_equal(vecfs_get(v, last, (size_t)ln, got, D, &dim, NULL, 0, NULL), 0);
	assert_memory_equal(got, x + (size_t)(NBIG - 1) * D, sizeof got);
	/* everything passes the consistency check */
	char msg[512];
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	free(x);
	free(y);
}

static void test_abort_and_bad_rows_leave_nothing(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	v->spool_bytes = SPOOL;
	char err[256] = "";
	set_config(v, D, VECFS_L2);
	float *x = rows_of(NBIG, 4);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x, NBIG, "a");
	/* a bad row is refused with its index; the batch stays usable */
	float bad[D] = {0};
	bad[3] = NAN;
	vecfs_row rows[2] = {{"ok", 2, x, NULL, 0}, {"nan", 3, bad, NULL, 0}};
	size_t at = 99;
	assert_int_equal(vecfs_batch_add(b, rows, NULL, 2, &at, err, sizeof err), -EINVAL);
	assert_int_equal(at, 1);
	assert_non_null(strstr(err, "NaN"));
	uint64_t before = stats(v).store_bytes;
	vecfs_batch_abort(b);
	assert_int_equal(stats(v).records, 0);
	assert_int_equal(stats(v).ingest_rows, 0);
	(void)before;
	/* the spooled rows are gone: a reopened store has none either, and a
	 * new batch's assigned keys start at 0 */
	fx_close(f);
	v = fx_open(f, NULL);
	assert_int_equal(stats(v).records, 0);
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x, 3, NULL);
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).records, 3);
	assert_int_equal(vecfs_get(v, "0", 1, NULL, 0, &(uint32_t){0}, NULL, 0, NULL), 0);
	free(x);
}

/* A store of rows k0..k1999 of `total` random rows (seed), with an active
 * generation over them; *x holds all `total` rows. */
static vecfs *built_store(fixture *f, size_t total, uint64_t seed, float **x)
{
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	*x = rows_of(total, seed);
	put_range(v, *x, 0, 2000, D, "k");
	build(v, 1);
	return v;
}

static void test_batch_with_active_generation(void **state)
{
	char err[256] = "";
	float *x;
	vecfs *v = built_store(*state, 3000, 5, &x);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x + 2000 * D, 1000, "n");
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), 0);
	/* the new rows are delta postings: an ANN query finds them at once */
	vecfs_results *r = search1(v, x + 2500 * D, D, 1, 0);
	assert_int_equal(r->count[0], 1);
	assert_string_equal(r->hits[0][0].key, "n500");
	assert_true(r->explain.delta_scanned > 0);
	vecfs_results_free(r);
	free(x);
}

/* A batch large enough to be spooled twice, into an active generation: its
 * rows are assigned a chunk at a time (nearest centroids found together),
 * so check the rows on both sides of each chunk edge, the spooled and the
 * in-memory ones, and a key given twice: every row must be in the cluster
 * of its nearest centroid, where a query probing only that one cluster
 * finds it, and the later row for a key wins. */
static void test_large_batch_into_generation(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	v->spool_bytes = SPOOL;
	char err[256] = "", key[32];
	set_config(v, D, VECFS_L2);
	float *x = rows_of(NBIG, 6), *y = rows_of(1, 7);
	put_range(v, x, 0, 2000, D, "k");
	build(v, 1);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x, NBIG, "n");
	vecfs_row again = {"n7", 2, y, NULL, 0};
	assert_int_equal(vecfs_batch_add(b, &again, NULL, 1, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).records, 2000 + NBIG);
	vecfs_query_opts o = {.k = 2, .nprobe = 1, .refine = 0, .exact = 0};
	size_t checked = 0;
	for (size_t i = 0; i < NBIG; i++) {
		size_t m = i % 4096;
		if (i == 7 || (m > 2 && m < 4093 && i % 37 && i < NBIG - 3))
			continue;
		vecfs_results *r = search_opts(v, x + i * D, 1, D, &o);
		/* the row "n<i>" and the row "k<i>" (i < 2000) share the vector */
		snprintf(key, sizeof key, "n%zu", i);
		int found = 0;
		for (size_t j = 0; j < r->count[0]; j++)
			found |= !strcmp(r->hits[0][j].key, key) && r->hits[0][j].distance == 0;
		if (!found)
			print_message("row %zu not found where its nearest centroid is\n", i);
		assert_true(found);
		vecfs_results_free(r);
		checked++;
	}
	assert_true(checked > 200);
	/* "n7" is y now: its first row left no posting behind */
	vecfs_results *r = search_opts(v, y, 1, D, &o);
	assert_string_equal(r->hits[0][0].key, "n7");
	vecfs_results_free(r);
	o.k = 3;
	r = search_opts(v, x + 7 * D, 1, D, &o);
	for (size_t j = 0; j < r->count[0]; j++)
		assert_string_not_equal(r->hits[0][j].key, "n7");
	vecfs_results_free(r);
	char msg[512];
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	free(x);
	free(y);
}

/* One key written again and again in one batch, each time next to where
 * it was (so in the same cluster): each write kills the posting before it
 * with a tombstone of the same key, and the last one written must win.  A
 * search right at an earlier version finds the key once, at its newest
 * vector, and never at a dead one. */
static void test_same_key_again_in_one_batch(void **state)
{
	char err[256] = "";
	float *x;
	vecfs *v = built_store(*state, 2000, 8, &x);
	enum { VERSIONS = 5 };
	float ver[VERSIONS][D];
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	for (int j = 0; j < VERSIONS; j++) {
		memcpy(ver[j], x + 7 * D, sizeof ver[j]);
		ver[j][0] += 0.001f * (float)(j + 1);
		vecfs_row row = {"k7", 2, ver[j], NULL, 0};
		assert_int_equal(vecfs_batch_add(b, &row, NULL, 1, NULL, err, sizeof err), 0);
	}
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).records, 2000);
	vecfs_query_opts o = {.k = 8, .nprobe = 1000, .refine = 0, .exact = 0};
	for (int j = 0; j <= VERSIONS; j++) {
		const float *q = j < VERSIONS ? ver[j] : x + 7 * D;
		vecfs_results *r = search_opts(v, q, 1, D, &o);
		int seen = 0;
		for (size_t h = 0; h < r->count[0]; h++)
			if (!strcmp(r->hits[0][h].key, "k7")) {
				seen++;
				float want = (float)dist_ref(VECFS_L2, q, ver[VERSIONS - 1], D);
				assert_true(fabsf(r->hits[0][h].distance - want) <= 1e-5f * (1 + want));
			}
		assert_int_equal(seen, 1);
		vecfs_results_free(r);
	}
	char msg[512];
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), 0);
	free(x);
}

/* Rows "y0", "y1", ... of y[0..n) (d floats each), put into a encoded
 * by the writer itself: the first ALONE a row at a time, the rest in one put
 * whose preparer is off (no_preparer: the way of a put whose preparer
 * cannot start).  *keys holds the keys the rows point to (free both). */
typedef char key32[32];
#define ALONE 64
static vecfs_row *rows_put_alone(vecfs *a, const float *y, size_t n, uint32_t d, key32 **keys)
{
	vecfs_row *rows = calloc(n, sizeof *rows);
	*keys = calloc(n, sizeof **keys);
	assert_non_null(rows);
	assert_non_null(*keys);
	for (size_t i = 0; i < n; i++) {
		snprintf((*keys)[i], sizeof (*keys)[i], "y%zu", i);
		rows[i] = (vecfs_row){(*keys)[i], strlen((*keys)[i]), y + i * d, NULL, 0};
		if (i < ALONE)
			assert_int_equal(put_one(a, (*keys)[i], y + i * d, d), 0);
	}
	char err[256] = "";
	size_t bad = 0;
	a->no_preparer = 1;
	assert_int_equal(vecfs_put(a, rows + ALONE, n - ALONE, d, &bad, err, sizeof err), 0);
	a->no_preparer = 0;
	return rows;
}

/* Rows written together get their clusters and codes found before the
 * transaction writes them, on threads of their own a few chunks ahead of
 * the writer (vf_preparer); a row written alone is encoded by the writer
 * itself.  Both ways must give the same postings: stores with the same
 * generation, one written by the writer alone (rows_put_alone), the
 * others in one put (five chunks, so the preparer's rooms are used again,
 * and a part) with one, two and five CPUs' worth of threads, answer every
 * query alike, down to the postings each pass scored.  Then rows superseded within the put
 * (the same key again later), which the preparer leaves out. */
static void test_rows_together_encode_alike(void **state)
{
	fixture *f = *state;
	char path[PATH_MAX], err[256] = "";
	static const int threads[] = {1, 2, 5};
	enum { NB = sizeof threads / sizeof threads[0] };
	vecfs *a = fx_open(f, "a"), *b[NB + 1] = {NULL};
	const size_t YN = 4 * VF_NEAR_CHUNK + 900;
	float *x = rows_of(3000, 8), *y = rows_of(YN, 9);
	for (int s = 0; s <= NB; s++) {
		snprintf(path, sizeof path, "%s/b%d", f->dir, s);
		mkdir(path, 0700);
		assert_int_equal(vecfs_open(path, &b[s], err, sizeof err), 0);
	}
	vecfs *all[NB + 2] = {a, b[0], b[1], b[2], b[3]};
	for (int s = 0; s < NB + 2; s++) {
		set_config(all[s], D, VECFS_L2);
		put_range(all[s], x, 0, 3000, D, "k");
		build(all[s], 1);
	}
	/* the same generation in all (a build is deterministic in its seed) */
	float *ca, *cb;
	uint32_t na, nb, da, db;
	assert_int_equal(vecfs_gen_centroids(a, vecfs_active(a), &ca, &na, &da), 0);
	for (int s = 0; s <= NB; s++) {
		assert_int_equal(vecfs_gen_centroids(b[s], vecfs_active(b[s]), &cb, &nb, &db), 0);
		assert_int_equal(na, nb);
		assert_memory_equal(ca, cb, sizeof(float) * na * da);
		free(cb);
	}
	free(ca);
	key32 *keys;
	vecfs_row *rows = rows_put_alone(a, y, YN, D, &keys);
	size_t bad = 0;
	for (int s = 0; s < NB; s++) {
		b[s]->threads = threads[s];
		assert_int_equal(vecfs_put(b[s], rows, YN, D, &bad, err, sizeof err), 0);
		assert_int_equal(stats(b[s]).delta_postings, YN);
	}
	assert_int_equal(stats(a).delta_postings, YN);
	/* the last store: every 97th row's key again at the end, its vector
	 * the row's own, so the store ends as a does */
	size_t extra = 0;
	for (size_t i = 0; i < YN; i += 97)
		extra++;
	vecfs_row *rows2 = calloc(YN + extra, sizeof *rows2);
	float *y2 = calloc((YN + extra) * D, sizeof *y2);
	assert_non_null(rows2);
	assert_non_null(y2);
	memcpy(y2, y, sizeof(float) * YN * D);
	for (size_t i = 0; i < YN; i++)
		rows2[i] = (vecfs_row){keys[i], strlen(keys[i]), y2 + i * D, NULL, 0};
	for (size_t i = 0; i < YN; i++)
		if (i % 97 == 0) /* superseded: its first vector is another's */
			rows2[i].vec = y2 + ((i + 1) % YN) * D;
	for (size_t i = 0, m = YN; i < YN; i += 97, m++)
		rows2[m] = (vecfs_row){keys[i], strlen(keys[i]), y2 + i * D, NULL, 0};
	b[NB]->threads = 2;
	assert_int_equal(vecfs_put(b[NB], rows2, YN + extra, D, &bad, err, sizeof err), 0);
	assert_int_equal(stats(b[NB]).delta_postings, YN);
	vecfs_query_opts o = {.k = 10, .nprobe = 4, .refine = 0, .exact = 0};
	for (size_t q = 0; q < 300; q++) {
		const float *qv = q % 2 ? y + (q * 29 % YN) * D : x + (q * 7 % 3000) * D;
		vecfs_results *ra = search_opts(a, qv, 1, D, &o);
		for (int s = 0; s <= NB; s++) {
			vecfs_results *rb = search_opts(b[s], qv, 1, D, &o);
			assert_int_equal(ra->count[0], rb->count[0]);
			for (size_t j = 0; j < ra->count[0]; j++) {
				assert_string_equal(ra->hits[0][j].key, rb->hits[0][j].key);
				assert_true(ra->hits[0][j].distance == rb->hits[0][j].distance);
			}
			assert_int_equal(ra->explain.delta_scanned, rb->explain.delta_scanned);
			assert_int_equal(ra->explain.pass2_scored, rb->explain.pass2_scored);
			assert_int_equal(ra->explain.reranked, rb->explain.reranked);
			vecfs_results_free(rb);
		}
		vecfs_results_free(ra);
	}
	for (int s = 0; s <= NB; s++)
		vecfs_close(b[s]);
	free(rows);
	free(rows2);
	free(keys);
	free(x);
	free(y);
	free(y2);
}

/* The preparer's rooms stay small at high dimensions: a chunk is 4,096
 * rows at 128 dimensions, and halves (a power of two, 256 rows at least)
 * while its room would pass 16 MiB. */
static void test_preparer_rooms_bounded(void **state)
{
	(void)state;
	assert_int_equal(vf_preparer_chunk_rows(128, 128, 4), VF_NEAR_CHUNK);
	assert_int_equal(vf_preparer_chunk_rows(8, 64, 4), VF_NEAR_CHUNK);
	static const uint32_t dims[] = {100, 784, 1024, 1536, 4096, 16384};
	for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
		uint32_t d = dims[i], pdim = vf_padded_dim(d); /* a new generation's */
		size_t rows = vf_preparer_chunk_rows(d, pdim, 4);
		size_t row = sizeof(float) * d + 4 * pdim / 8;
		assert_true(rows >= 256 && rows <= VF_NEAR_CHUNK);
		assert_int_equal(rows & (rows - 1), 0);
		assert_true(rows == 256 || rows * row <= (size_t)16 << 20);
		assert_true(rows == VF_NEAR_CHUNK || 2 * rows * row > (size_t)16 << 20);
	}
}

/* At 1,024 dimensions a chunk is 2,048 rows: a put of two chunks and a
 * part, prepared ahead, encodes like rows written one at a time. */
static void test_rows_together_high_dimension(void **state)
{
	fixture *f = *state;
	enum { HD = 1024, HX = 1500 };
	const size_t HN = 2 * 2048 + 300;
	assert_int_equal(vf_preparer_chunk_rows(HD, HD, 4), 2048);
	char path[PATH_MAX], err[256] = "";
	vecfs *a = fx_open(f, "a"), *b = NULL;
	snprintf(path, sizeof path, "%s/b", f->dir);
	mkdir(path, 0700);
	assert_int_equal(vecfs_open(path, &b, err, sizeof err), 0);
	rng r = {11, 0, 0};
	float *x = malloc(sizeof(float) * (HX + HN) * HD);
	assert_non_null(x);
	for (size_t i = 0; i < (size_t)(HX + HN) * HD; i++)
		x[i] = (float)rng_gauss(&r);
	float *y = x + (size_t)HX * HD;
	vecfs *both[2] = {a, b};
	for (int s = 0; s < 2; s++) {
		set_config(both[s], HD, VECFS_L2);
		put_range(both[s], x, 0, HX, HD, "k");
		build(both[s], 1);
	}
	key32 *keys;
	vecfs_row *rows = rows_put_alone(a, y, HN, HD, &keys);
	size_t bad = 0;
	assert_int_equal(vecfs_put(b, rows, HN, HD, &bad, err, sizeof err), 0);
	assert_int_equal(stats(b).delta_postings, HN);
	vecfs_query_opts o = {.k = 10, .nprobe = 4, .refine = 0, .exact = 0};
	for (size_t q = 0; q < 60; q++) {
		const float *qv = y + (q * 71 % HN) * HD;
		vecfs_results *ra = search_opts(a, qv, 1, HD, &o), *rb = search_opts(b, qv, 1, HD, &o);
		assert_int_equal(ra->count[0], rb->count[0]);
		for (size_t j = 0; j < ra->count[0]; j++) {
			assert_string_equal(ra->hits[0][j].key, rb->hits[0][j].key);
			assert_true(ra->hits[0][j].distance == rb->hits[0][j].distance);
		}
		assert_int_equal(ra->explain.pass2_scored, rb->explain.pass2_scored);
		vecfs_results_free(ra);
		vecfs_results_free(rb);
	}
	vecfs_close(b);
	free(rows);
	free(keys);
	free(x);
}

static void test_dimension_mismatch(void **state)
{
	fixture *f = *state;
	setenv("VECFS_MAPSIZE", "1048576", 1); /* 1 MiB: any room asked for shows */
	vecfs *v = fx_open(f, NULL);
	unsetenv("VECFS_MAPSIZE");
	char err[256] = "";
	set_config(v, D, VECFS_L2);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D + 1, 0, &b), 0);
	float x[D + 1] = {1};
	vecfs_row row = {"x", 1, x, NULL, 0};
	size_t at = 9;
	assert_int_equal(vecfs_batch_add(b, &row, NULL, 1, &at, err, sizeof err), -EINVAL);
	assert_int_equal(at, 0);
	vecfs_batch_abort(b);
	assert_int_equal(vecfs_batch_begin(v, 0, 0, &b), -EINVAL);
	/* a put refused for its rows asks no room ahead of its checks: rows of
	 * the largest dimension but not the store's, and a payload length far
	 * past any payload's (both once grew the map, the second without end) */
	size_t map = v->store->mapsize;
	float *big = calloc(VECFS_DIM_MAX, sizeof(float));
	assert_non_null(big);
	vecfs_row wide[64];
	for (int i = 0; i < 64; i++)
		wide[i] = (vecfs_row){NULL, 0, big, NULL, 0};
	assert_int_equal(vecfs_put(v, wide, 64, VECFS_DIM_MAX, NULL, err, sizeof err), -EINVAL);
	assert_int_equal(v->store->mapsize, map);
	vecfs_row huge = {"h", 1, x, "p", (size_t)1 << 62};
	assert_int_equal(vecfs_put(v, &huge, 1, D, NULL, err, sizeof err), -EINVAL);
	assert_true(v->store->mapsize < ((size_t)1 << 32));
	free(big);
}

/* Three rows in the staging table (batch 1), as earlier versions staged
 * the rows of a large write. */
static int stage_rows(vf_txn *txn, void *arg)
{
	vecfs *v = *(vecfs **)arg;
	for (uint64_t i = 0; i < 3; i++) {
		uint8_t k[16] = {0}, d[8] = {1, 2, 3, 4, 5, 6, 7, (uint8_t)i};
		k[7] = 1;
		k[15] = (uint8_t)i;
		int rc = vf_put(txn, v->store->staging, k, 16, d, 8, 0);
		if (rc)
			return rc;
	}
	return 0;
}

static size_t count_staged(vecfs *v)
{
	vf_txn *txn;
	vf_cursor *cur;
	vf_val k, d;
	size_t n = 0;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_cursor_open(txn, v->store->staging, &cur), 0);
	for (int rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT))
		n++;
	vf_cursor_close(cur);
	vf_read_end(v->store, txn);
	return n;
}
/* Tags name the rows of a failed commit: a key given twice in a
 * VECFS_BATCH_UNIQUE batch fails it (nothing committed) with both rows'
 * tags and the key; the same rows in a plain batch commit, the later row
 * winning.  A row the store refuses only at the commit (its dimension,
 * fixed meanwhile by another write) is named by its tag too. */
static void test_unique_and_tags(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	v->spool_bytes = 64; /* a buffer flushed every row or two */
	char err[256] = "";
	set_config(v, D, VECFS_L2);
	float *x = rows_of(4, 11);
	vecfs_row rows[4] = {{"a", 1, x, NULL, 0},
			     {"bb", 2, x + D, "{\"g\":1}", 7},
			     {"c", 1, x + 2 * D, NULL, 0},
			     {"bb", 2, x + 3 * D, NULL, 0}};
	uint64_t tags[4] = {10, 20, 30, 40};
	vecfs_batch *b;
	vecfs_batch_result res;
	assert_int_equal(vecfs_batch_begin(v, D, VECFS_BATCH_UNIQUE, &b), 0);
	assert_int_equal(vecfs_batch_add(b, rows, tags, 4, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_batch_rows(b), 4);
	assert_int_equal(vecfs_batch_commit(b, &res, err, sizeof err), -EINVAL);
	assert_int_equal(res.first, 20);
	assert_int_equal(res.row, 40);
	assert_int_equal(res.keylen, 2);
	assert_string_equal(res.key, "bb");
	assert_non_null(strstr(err, "key 'bb' given twice, rows 20 and 40"));
	assert_int_equal(stats(v).records, 0);

	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	assert_int_equal(vecfs_batch_add(b, rows, tags, 4, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_batch_commit(b, &res, err, sizeof err), 0);
	assert_int_equal(res.row, 0);
	assert_int_equal(stats(v).records, 3);
	float got[D];
	uint32_t dim;
	size_t plen = 99;
	assert_int_equal(vecfs_get(v, "bb", 2, got, D, &dim, NULL, 0, &plen), 0);
	assert_memory_equal(got, x + 3 * D, sizeof got);
	assert_int_equal(plen, 0);
	char pay[16];
	assert_int_equal(vecfs_get(v, "a", 1, got, D, &dim, pay, sizeof pay, &plen), 0);
	assert_memory_equal(got, x, sizeof got);

	/* a store without a dimension yet, fixed between the adds and the
	 * commit by another write: the first row of the batch is named */
	fx_close(f);
	vecfs *w = fx_open(f, "b");
	assert_int_equal(vecfs_batch_begin(w, D, 0, &b), 0);
	assert_int_equal(vecfs_batch_add(b, rows, tags, 3, NULL, err, sizeof err), 0);
	assert_int_equal(put_one(w, "other", x, D - 1), 0);
	assert_int_equal(vecfs_batch_commit(b, &res, err, sizeof err), -EINVAL);
	assert_int_equal(res.row, 10);
	assert_int_equal(stats(w).records, 1);
	free(x);
}

/* A delete batch: keys (one missing) and a filter, deleted in one commit;
 * bad keys refused as they are added; a delete batch of a filter alone. */
static void test_delete_batch(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	v->spool_bytes = 32;
	char err[256] = "", key[32];
	set_config(v, D, VECFS_L2);
	float *x = rows_of(20, 12);
	for (int i = 0; i < 20; i++) {
		snprintf(key, sizeof key, "k%d", i);
		const char *pay = i % 5 == 0 ? "{\"g\":1}" : "{\"g\":2}";
		vecfs_row r = {key, strlen(key), x + i * D, pay, 7};
		assert_int_equal(vecfs_put(v, &r, 1, D, NULL, err, sizeof err), 0);
	}
	vecfs_batch *b;
	vecfs_batch_result res;
	assert_int_equal(vecfs_batch_begin(v, D, VECFS_BATCH_DELETE, &b), -EINVAL);
	assert_int_equal(vecfs_batch_begin(v, 0, 0, &b), -EINVAL);
	assert_int_equal(vecfs_batch_begin(v, 0, VECFS_BATCH_DELETE, &b), 0);
	vecfs_row keys[4] = {{"k1", 2, NULL, NULL, 0},
			     {"k2", 2, NULL, NULL, 0},
			     {"nope", 4, NULL, NULL, 0},
			     {"k5", 2, NULL, NULL, 0}};
	assert_int_equal(vecfs_batch_add(b, keys, NULL, 4, NULL, err, sizeof err), 0);
	vecfs_row bad = {"a/b", 3, NULL, NULL, 0};
	size_t at = 9;
	assert_int_equal(vecfs_batch_add(b, &bad, NULL, 1, &at, err, sizeof err), -EINVAL);
	assert_int_equal(at, 0);
	assert_int_equal(vecfs_batch_rows(b), 4);
	assert_int_equal(vecfs_batch_filter(b, "{\"g\":1}", 7), 0);
	assert_int_equal(stats(v).records, 20); /* nothing before the commit */
	assert_int_equal(vecfs_batch_commit(b, &res, err, sizeof err), 0);
	/* k1, k2, and k0 k5 k10 k15 of the filter (k5 once) */
	assert_int_equal(res.deleted, 6);
	assert_int_equal(stats(v).records, 14);
	assert_int_equal(vecfs_get(v, "k5", 2, NULL, 0, &(uint32_t){0}, NULL, 0, NULL), -ENOENT);
	assert_int_equal(vecfs_get(v, "k3", 2, NULL, 0, &(uint32_t){0}, NULL, 0, NULL), 0);
	/* a bad filter fails the commit, nothing deleted */
	assert_int_equal(vecfs_batch_begin(v, 0, VECFS_BATCH_DELETE, &b), 0);
	assert_int_equal(vecfs_batch_add(b, keys + 3, NULL, 1, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_batch_add(b, (vecfs_row[]){{"k3", 2, NULL, NULL, 0}}, NULL, 1, NULL,
					 err, sizeof err), 0);
	assert_int_equal(vecfs_batch_filter(b, "{\"g\":", 5), 0);
	assert_int_equal(vecfs_batch_commit(b, &res, err, sizeof err), -EINVAL);
	assert_int_equal(stats(v).records, 14);
	/* a filter alone */
	assert_int_equal(vecfs_batch_begin(v, 0, VECFS_BATCH_DELETE, &b), 0);
	assert_int_equal(vecfs_batch_filter(b, "{\"g\":2}", 7), 0);
	assert_int_equal(vecfs_batch_commit(b, &res, err, sizeof err), 0);
	assert_int_equal(res.deleted, 14);
	assert_int_equal(stats(v).records, 0);
	/* a filter is for delete batches only */
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	assert_int_equal(vecfs_batch_filter(b, "{}", 2), -EINVAL);
	vecfs_batch_abort(b);
	free(x);
}

/* A delete batch takes a row's key only: rows that also carry a payload
 * (a caller's put rows handed over as they are) delete their keys, each
 * of them, and nothing else. */
static void test_delete_batch_rows_with_payload(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	v->spool_bytes = 32;
	char err[256] = "", key[32];
	set_config(v, D, VECFS_L2);
	float *x = rows_of(6, 13);
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof key, "k%d", i);
		vecfs_row r = {key, strlen(key), x + i * D, "{\"g\":1}", 7};
		assert_int_equal(vecfs_put(v, &r, 1, D, NULL, err, sizeof err), 0);
	}
	vecfs_batch *b;
	vecfs_batch_result res;
	assert_int_equal(vecfs_batch_begin(v, 0, VECFS_BATCH_DELETE, &b), 0);
	vecfs_row keys[3] = {{"k1", 2, x + D, "{\"g\":1}", 7},
			     {"k2", 2, NULL, "{\"a\":[1,2,3]}", 13},
			     {"k4", 2, NULL, NULL, 0}};
	assert_int_equal(vecfs_batch_add(b, keys, NULL, 3, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_batch_commit(b, &res, err, sizeof err), 0);
	assert_int_equal(res.deleted, 3);
	assert_int_equal(stats(v).records, 3);
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(vecfs_get(v, key, strlen(key), NULL, 0, &(uint32_t){0}, NULL, 0, NULL),
				 i == 1 || i == 2 || i == 4 ? -ENOENT : 0);
	}
	free(x);
}

static size_t names_in(const char *dir)
{
	DIR *d = opendir(dir);
	size_t n = 0;
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));)
		n++;
	closedir(d);
	return n;
}

/* The spool has no name in the store's directory while a batch runs (it
 * is unlinked); what a crash can leave (a spool file of the name it is
 * made under, rows staged in the staging table by earlier versions) is
 * removed when the store is next opened for writing, and a read-only open
 * leaves it alone. */
static void test_leftovers_removed_at_open(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	char err[256] = "", path[256];
	set_config(v, D, VECFS_L2);
	float *x = rows_of(NBIG, 13);
	size_t before = names_in(f->dir);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x, NBIG, "s");
	assert_int_equal(names_in(f->dir), before);
	vecfs_batch_abort(b);
	assert_int_equal(names_in(f->dir), before);
	/* rows in the staging table, as a crash in a batch of an earlier
	 * version left them */
	assert_int_equal(vf_write(v->store, stage_rows, &v), 0);
	assert_int_equal(count_staged(v), 3);
	fx_close(f);
	snprintf(path, sizeof path, "%s/.vecfs-spool.AbC123", f->dir);
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("rows", fp);
	fclose(fp);
	vecfs *r;
	assert_int_equal(vecfs_open_readonly(f->dir, &r, err, sizeof err), 0);
	assert_int_equal(count_staged(r), 3);
	vecfs_close(r);
	assert_int_equal(access(path, F_OK), 0);
	v = fx_open(f, NULL);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(count_staged(v), 0);
	assert_int_equal(stats(v).records, 0);
	free(x);
}

/* A write of the spool that fails (here past RLIMIT_FSIZE: EFBIG) fails
 * the add that made it, every later add and the commit, which commits
 * nothing; the store takes the next batch. */
static void test_spool_write_failure(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	v->spool_bytes = 4096;
	char err[256] = "";
	set_config(v, D, VECFS_L2);
	float *x = rows_of(NBIG, 14);
	struct rlimit old, low;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
	vecfs_batch *b;
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	low = (struct rlimit){(rlim_t)1 << 20, old.rlim_max};
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
	int rc = 0;
	size_t i;
	for (i = 0; i < NBIG && rc == 0; i++) {
		vecfs_row row = {NULL, 0, x + i * D, NULL, 0};
		rc = vecfs_batch_add(b, &row, NULL, 1, NULL, err, sizeof err);
	}
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, was);
	assert_int_equal(rc, -EFBIG);
	assert_true(i < NBIG);
	assert_non_null(strstr(err, "cannot spool the row"));
	vecfs_row row = {"late", 4, x, NULL, 0};
	assert_int_equal(vecfs_batch_add(b, &row, NULL, 1, NULL, err, sizeof err), -EFBIG);
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), -EFBIG);
	assert_int_equal(stats(v).records, 0);
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	add_rows(b, x, 3, "ok");
	assert_int_equal(vecfs_batch_commit(b, NULL, err, sizeof err), 0);
	assert_int_equal(stats(v).records, 3);
	free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_small_batch_assigns_keys, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_large_batch_is_atomic, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_abort_and_bad_rows_leave_nothing, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_batch_with_active_generation, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_large_batch_into_generation, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_same_key_again_in_one_batch, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_rows_together_encode_alike, fx_setup,
						fx_teardown),
		cmocka_unit_test(test_preparer_rooms_bounded),
		cmocka_unit_test_setup_teardown(test_rows_together_high_dimension, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_dimension_mismatch, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_unique_and_tags, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_delete_batch, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_delete_batch_rows_with_payload, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_leftovers_removed_at_open, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_spool_write_failure, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
