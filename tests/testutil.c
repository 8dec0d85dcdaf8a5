/*
 * testutil.c - helpers shared by the test programs: temporary stores, a
 * seeded generator, clustered data, brute-force references and checked
 * wrappers around the library calls (see testutil.h).
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
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* ------------------------------------------------------------ temp stores */

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	remove(path);
	return 0;
}

void rm_rf(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int fx_setup(void **state)
{
	fixture *f = calloc(1, sizeof *f);
	if (!f)
		return -1;
	strcpy(f->dir, "/tmp/vecfs-test-XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

int fx_teardown(void **state)
{
	fixture *f = *state;
	if (!f)
		return 0;
	if (f->v)
		vecfs_close(f->v);
	rm_rf(f->dir);
	free(f);
	return 0;
}

/* Open the store in f->dir/sub (sub may be NULL for f->dir itself). */
vecfs *fx_open(fixture *f, const char *sub)
{
	char path[PATH_MAX], err[256] = "";
	if (sub) {
		snprintf(path, sizeof path, "%s/%s", f->dir, sub);
		mkdir(path, 0700);
	} else {
		snprintf(path, sizeof path, "%s", f->dir);
	}
	vecfs *v = NULL;
	int rc = vecfs_open(path, &v, err, sizeof err);
	if (rc != 0)
		print_message("vecfs_open(%s): %d %s\n", path, rc, err);
	assert_int_equal(rc, 0);
	assert_non_null(v);
	f->v = v;
	return v;
}

void fx_close(fixture *f)
{
	if (f->v)
		vecfs_close(f->v);
	f->v = NULL;
}

void set_config(vecfs *v, uint32_t dim, vecfs_metric metric)
{
	vecfs_config c;
	char err[256] = "";
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.dim = dim;
	c.metric = metric;
	c.auto_build = 0;
	/* no background maintenance and no retirement of generations, so
	 * tests see the deltas and generations they made; the maintenance
	 * tests turn them on where they test them */
	c.compact_deltas = UINT32_MAX;
	c.rebalance_ratio = 0;
	c.keep_generations = 1000;
	int rc = vecfs_config_set(v, &c, err, sizeof err);
	if (rc != 0)
		print_message("vecfs_config_set: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
}

uint64_t build(vecfs *v, int activate)
{
	char err[256] = "";
	uint64_t gen = 0;
	int rc = vecfs_build(v, activate, &gen, NULL, NULL, err, sizeof err);
	if (rc != 0)
		print_message("vecfs_build: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	assert_true(gen != 0);
	if (activate)
		assert_true(vecfs_active(v) == gen);
	return gen;
}

vecfs_stats stats(vecfs *v)
{
	vecfs_stats s;
	memset(&s, 0, sizeof s);
	assert_int_equal(vecfs_stats_get(v, &s), 0);
	return s;
}

/* ------------------------------------------------------------ data */

uint64_t rng_next(rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

double rng_unif(rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

double rng_gauss(rng *r)
{
	if (r->have) {
		r->have = 0;
		return r->spare;
	}
	double u1 = 1.0 - rng_unif(r), u2 = rng_unif(r);
	double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
	r->spare = rad * sin(th);
	r->have = 1;
	return rad * cos(th);
}

/* Clustered data: C centers uniform in [-10,10]^d, points = center + N(0,1). */
void ds_point(dataset *ds, uint32_t c, float *out)
{
	for (uint32_t j = 0; j < ds->d; j++)
		out[j] = ds->centers[(size_t)c * ds->d + j] +
			 (float)rng_gauss(&ds->r);
}

/* A fresh point from a random cluster of the same distribution. */
uint32_t ds_fresh(dataset *ds, float *out)
{
	uint32_t c = (uint32_t)(rng_next(&ds->r) % ds->nc);
	ds_point(ds, c, out);
	return c;
}

void ds_make(dataset *ds, uint64_t seed, size_t n, uint32_t d,
	     uint32_t nc)
{
	memset(ds, 0, sizeof *ds);
	ds->n = n;
	ds->d = d;
	ds->nc = nc;
	ds->r.s = seed;
	ds->centers = malloc((size_t)nc * d * sizeof(float));
	ds->x = malloc(n * d * sizeof(float));
	ds->label = malloc(n * sizeof(uint32_t));
	assert_non_null(ds->centers);
	assert_non_null(ds->x);
	assert_non_null(ds->label);
	for (size_t i = 0; i < (size_t)nc * d; i++)
		ds->centers[i] = (float)(rng_unif(&ds->r) * 20.0 - 10.0);
	for (size_t i = 0; i < n; i++)
		ds->label[i] = ds_fresh(ds, ds->x + i * d);
}

void ds_free(dataset *ds)
{
	free(ds->centers);
	free(ds->x);
	free(ds->label);
	memset(ds, 0, sizeof *ds);
}

/* ------------------------------------------------------------ reference */

double dist_ref(vecfs_metric m, const float *a, const float *b,
		uint32_t d)
{
	double s = 0, na = 0, nb = 0;
	for (uint32_t j = 0; j < d; j++) {
		double x = a[j], y = b[j];
		switch (m) {
		case VECFS_L2: s += (x - y) * (x - y); break;
		default: s += x * y; na += x * x; nb += y * y; break;
		}
	}
	if (m == VECFS_L2)
		return s;
	if (m == VECFS_DOT)
		return -s;
	return 1.0 - s / (sqrt(na) * sqrt(nb));
}

/* Allowed |reported - reference| for a float32 implementation: 1e-4
 * relative plus room for cancellation proportional to the magnitudes. */
double dist_tol(vecfs_metric m, const float *a, const float *b,
		uint32_t d, double expect)
{
	double na = 0, nb = 0;
	for (uint32_t j = 0; j < d; j++) {
		na += (double)a[j] * a[j];
		nb += (double)b[j] * b[j];
	}
	double scale = m == VECFS_L2 ? na + nb
		     : m == VECFS_DOT ? sqrt(na * nb) : 1.0;
	return 1e-4 * fabs(expect) + 4e-6 * scale + 1e-6;
}

double sqnorm(const float *a, uint32_t d)
{
	double s = 0;
	for (uint32_t j = 0; j < d; j++)
		s += (double)a[j] * a[j];
	return s;
}

/* Distance ~0: a record found at its own vector. */
int near_zero(vecfs_metric m, float dist, const float *q, uint32_t d)
{
	double scale = m == VECFS_COSINE ? 1.0 : 1.0 + sqnorm(q, d);
	return fabs((double)dist) <= 1e-5 * scale + 1e-5;
}

/* Top-k of the live rows by (distance, index); returns how many. */
size_t knn_ref(vecfs_metric m, const float *x, size_t n, uint32_t d,
	       const unsigned char *alive, const float *q, size_t k,
	       size_t *idx, double *dist)
{
	size_t have = 0;
	for (size_t i = 0; i < n; i++) {
		if (alive && !alive[i])
			continue;
		double dd = dist_ref(m, q, x + i * d, d);
		if (have == k && dd >= dist[k - 1])
			continue;
		size_t p = have < k ? have++ : k - 1;
		while (p > 0 && dist[p - 1] > dd) {
			dist[p] = dist[p - 1];
			idx[p] = idx[p - 1];
			p--;
		}
		dist[p] = dd;
		idx[p] = i;
	}
	return have;
}

/* Row index from a key "<prefix><decimal>", or -1. */
long key_index(const char *key, const char *prefix)
{
	size_t pl = strlen(prefix);
	if (strncmp(key, prefix, pl) != 0)
		return -1;
	const char *s = key + pl;
	if (!*s)
		return -1;
	char *end;
	errno = 0;
	long i = strtol(s, &end, 10);
	if (*end || errno || i < 0)
		return -1;
	return i;
}

/* ------------------------------------------------------------ writes */

/* Put rows first..first+n of x with keys "<prefix><i>" (prefix NULL:
 * assigned keys), in batches. */
void put_range(vecfs *v, const float *x, size_t first, size_t n,
	       uint32_t d, const char *prefix)
{
	const size_t B = 2000;
	vecfs_row *rows = calloc(B, sizeof *rows);
	char (*keys)[32] = calloc(B, sizeof *keys);
	assert_non_null(rows);
	assert_non_null(keys);
	for (size_t off = 0; off < n; off += B) {
		size_t m = n - off < B ? n - off : B;
		for (size_t i = 0; i < m; i++) {
			size_t r = first + off + i;
			memset(&rows[i], 0, sizeof rows[i]);
			rows[i].vec = x + r * d;
			if (prefix) {
				snprintf(keys[i], sizeof keys[i], "%s%zu", prefix, r);
				rows[i].key = keys[i];
				rows[i].keylen = strlen(keys[i]);
			}
		}
		size_t bad = (size_t)-1;
		char err[256] = "";
		int rc = vecfs_put(v, rows, m, d, &bad, err, sizeof err);
		if (rc != 0)
			print_message("vecfs_put(rows %zu..): %d bad_row %zu %s\n",
				      first + off, rc, bad, err);
		assert_int_equal(rc, 0);
	}
	free(rows);
	free(keys);
}

int put_one(vecfs *v, const char *key, const float *vec, uint32_t d)
{
	vecfs_row row;
	memset(&row, 0, sizeof row);
	row.key = key;
	row.keylen = key ? strlen(key) : 0;
	row.vec = vec;
	char err[256] = "";
	return vecfs_put(v, &row, 1, d, NULL, err, sizeof err);
}

void del_key(vecfs *v, const char *key)
{
	int rc = vecfs_delete(v, key, strlen(key));
	if (rc != 0)
		print_message("vecfs_delete(%s): %d\n", key, rc);
	assert_int_equal(rc, 0);
}

/* ------------------------------------------------------------ search */

vecfs_results *search_opts(vecfs *v, const float *q, size_t nq,
			   uint32_t d, const vecfs_query_opts *o)
{
	vecfs_results *r = NULL;
	char err[256] = "";
	int rc = vecfs_search(v, q, nq, d, o, &r, err, sizeof err);
	if (rc != 0)
		print_message("vecfs_search: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	assert_non_null(r);
	assert_int_equal(r->nq, nq);
	assert_non_null(r->count);
	assert_non_null(r->hits);
	return r;
}

vecfs_results *search1(vecfs *v, const float *q, uint32_t d,
		       uint32_t k, int exact)
{
	vecfs_query_opts o;
	memset(&o, 0, sizeof o);
	o.k = k;
	o.exact = exact;
	return search_opts(v, q, 1, d, &o);
}

/* Every hit is a live row whose exact distance to q is reported, keys are
 * unique and in rank order. */
void check_hits(const vecfs_hit *h, size_t cnt, vecfs_metric m,
		const float *x, size_t n, uint32_t d,
		const unsigned char *alive, const char *prefix,
		const float *q)
{
	for (size_t i = 0; i < cnt; i++) {
		assert_non_null(h[i].key);
		assert_int_equal(strlen(h[i].key), h[i].keylen);
		long r = key_index(h[i].key, prefix);
		if (r < 0 || (size_t)r >= n)
			print_message("unexpected key '%s' at rank %zu\n",
				      h[i].key, i);
		assert_true(r >= 0 && (size_t)r < n);
		if (alive && !alive[r])
			print_message("deleted key '%s' returned at rank %zu\n",
				      h[i].key, i);
		assert_true(!alive || alive[r]);
		double want = dist_ref(m, q, x + (size_t)r * d, d);
		double tol = dist_tol(m, q, x + (size_t)r * d, d, want);
		if (fabs(h[i].distance - want) > tol)
			print_message("key %s rank %zu: distance %.9g, exact %.9g\n",
				      h[i].key, i, h[i].distance, want);
		assert_true(fabs(h[i].distance - want) <= tol);
		if (i > 0) {
			assert_true(h[i].distance >= h[i - 1].distance -
						     1e-6 * (1 + fabs(h[i].distance)));
			for (size_t j = 0; j < i; j++)
				if (strcmp(h[i].key, h[j].key) == 0) {
					print_message("key %s twice\n", h[i].key);
					fail();
				}
		}
	}
}

/* Hits equal the brute-force top-k: same count, and at each rank a key whose
 * exact distance equals the reference distance at that rank (so keys agree
 * in order, ties aside). */
void check_exact(const vecfs_hit *h, size_t cnt, vecfs_metric m,
		 const float *x, size_t n, uint32_t d,
		 const unsigned char *alive, const char *prefix,
		 const float *q, size_t k)
{
	size_t *idx = malloc(k * sizeof *idx);
	double *dist = malloc(k * sizeof *dist);
	assert_non_null(idx);
	assert_non_null(dist);
	size_t want = knn_ref(m, x, n, d, alive, q, k, idx, dist);
	if (cnt != want)
		print_message("got %zu hits, want %zu\n", cnt, want);
	assert_int_equal(cnt, want);
	check_hits(h, cnt, m, x, n, d, alive, prefix, q);
	for (size_t i = 0; i < cnt; i++) {
		double tol = dist_tol(m, q, x + idx[i] * d, d, dist[i]);
		if (fabs(h[i].distance - dist[i]) > tol)
			print_message("%s rank %zu: got %s %.9g, want %s%zu %.9g\n",
				      vecfs_metric_name(m), i, h[i].key,
				      h[i].distance, prefix, idx[i], dist[i]);
		assert_true(fabs(h[i].distance - dist[i]) <= tol);
	}
	free(idx);
	free(dist);
}

double recall_keys(const vecfs_results *ann, const vecfs_results *exact)
{
	size_t found = 0, want = 0;
	for (size_t i = 0; i < exact->nq; i++)
		for (size_t h = 0; h < exact->count[i]; h++, want++)
			for (size_t g = 0; g < ann->count[i]; g++)
				if (!strcmp(exact->hits[i][h].key, ann->hits[i][g].key)) {
					found++;
					break;
				}
	return want ? (double)found / (double)want : 1;
}
