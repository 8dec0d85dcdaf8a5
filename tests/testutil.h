/*
 * testutil.h - helpers shared by the test programs: temporary stores, a
 * seeded generator, clustered data, brute-force references and checked
 * wrappers around the library calls.  The wrappers fail the running cmocka
 * test on an unexpected return code.
 */
#ifndef VF_TESTUTIL_H
#define VF_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "vecfs.h"

/* ------------------------------------------------------------ temp stores */

typedef struct fixture {
	char dir[64];
	vecfs *v;
} fixture;

/* Remove a directory tree (errors ignored). */
void rm_rf(const char *dir);
/* cmocka setup/teardown: a fresh temporary directory in a fixture, closed
 * and removed afterwards. */
int fx_setup(void **state);
int fx_teardown(void **state);
/* Open the store in f->dir/sub (sub may be NULL for f->dir itself). */
vecfs *fx_open(fixture *f, const char *sub);
void fx_close(fixture *f);

/* Set dim and metric, auto_build off. */
void set_config(vecfs *v, uint32_t dim, vecfs_metric metric);
/* Build a generation (activated when asked); returns its id. */
uint64_t build(vecfs *v, int activate);
vecfs_stats stats(vecfs *v);

/* ------------------------------------------------------------ data */

/* splitmix64 with a cached second Gaussian. */
typedef struct rng {
	uint64_t s;
	int have;
	double spare;
} rng;

uint64_t rng_next(rng *r);
/* Uniform in [0, 1). */
double rng_unif(rng *r);
/* Standard normal. */
double rng_gauss(rng *r);

/* Clustered data: C centers uniform in [-10,10]^d, points = center + N(0,1). */
typedef struct dataset {
	size_t n;
	uint32_t d, nc;
	float *centers;
	float *x;
	uint32_t *label;
	rng r;
} dataset;

void ds_point(dataset *ds, uint32_t c, float *out);
/* A fresh point from a random cluster of the same distribution. */
uint32_t ds_fresh(dataset *ds, float *out);
void ds_make(dataset *ds, uint64_t seed, size_t n, uint32_t d, uint32_t nc);
void ds_free(dataset *ds);

/* ------------------------------------------------------------ reference */

/* The metric's distance in double precision. */
double dist_ref(vecfs_metric m, const float *a, const float *b, uint32_t d);
/* Allowed |reported - reference| for a float32 implementation: 1e-4
 * relative plus room for cancellation proportional to the magnitudes. */
double dist_tol(vecfs_metric m, const float *a, const float *b, uint32_t d,
		double expect);
double sqnorm(const float *a, uint32_t d);
/* Distance ~0: a record found at its own vector. */
int near_zero(vecfs_metric m, float dist, const float *q, uint32_t d);
/* Top-k of the live rows by (distance, index); returns how many. */
size_t knn_ref(vecfs_metric m, const float *x, size_t n, uint32_t d,
	       const unsigned char *alive, const float *q, size_t k,
	       size_t *idx, double *dist);
/* Row index from a key "<prefix><decimal>", or -1. */
long key_index(const char *key, const char *prefix);

/* ------------------------------------------------------------ writes */

/* Put rows first..first+n of x with keys "<prefix><i>" (prefix NULL:
 * assigned keys), in batches. */
void put_range(vecfs *v, const float *x, size_t first, size_t n, uint32_t d,
	       const char *prefix);
int put_one(vecfs *v, const char *key, const float *vec, uint32_t d);
void del_key(vecfs *v, const char *key);

/* ------------------------------------------------------------ search */

/* The share of exact's hits, over all its queries, that ann also
 * returned for the same query (by key): recall against exact results. */
double recall_keys(const vecfs_results *ann, const vecfs_results *exact);

vecfs_results *search_opts(vecfs *v, const float *q, size_t nq, uint32_t d,
			   const vecfs_query_opts *o);
vecfs_results *search1(vecfs *v, const float *q, uint32_t d, uint32_t k,
		       int exact);
/* Every hit is a live row whose exact distance to q is reported, keys are
 * unique and in rank order. */
void check_hits(const vecfs_hit *h, size_t cnt, vecfs_metric m, const float *x,
		size_t n, uint32_t d, const unsigned char *alive,
		const char *prefix, const float *q);
/* Hits equal the brute-force top-k: same count, and at each rank a key whose
 * exact distance equals the reference distance at that rank (so keys agree
 * in order, ties aside). */
void check_exact(const vecfs_hit *h, size_t cnt, vecfs_metric m,
		 const float *x, size_t n, uint32_t d,
		 const unsigned char *alive, const char *prefix,
		 const float *q, size_t k);

#endif
