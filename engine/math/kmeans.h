/*
 * engine/math/kmeans.h - k-means for IVF training and nearest-centroid search.
 */
#ifndef VF_KMEANS_H
#define VF_KMEANS_H

#include <stddef.h>
#include <stdint.h>

/* Centroids in panel layout for fast nearest-centroid search. */
typedef struct vf_cindex {
	uint32_t k, dim, npanels;
	float *panels; /* npanels * dim * VF_PANEL, padding centroids are far */
	float *norms;  /* k squared norms */
	uint16_t *half; /* the panels times 2^half_exp in binary16, or NULL */
	float half_unscale; /* 2^-half_exp */
	/* From VF_Q8_MIN_PANELS panels on (1,009 clusters), the binary16
	 * centroids again in 8 bits a coordinate, each centroid c_j scaled
	 * alone (c_j ~= q8_scale[j] * its bytes, laid out as point_panels_i8
	 * reads them, d4 = dim rounded up to a multiple of 4): a first look
	 * at every cluster's probe score with bounds
	 * (vf_cindex_probe_bounds()), or NULL.  (With fewer, scoring them all
	 * in binary16 costs less than the look: glove-100's 316 clusters.) */
	int8_t *q8;
	uint32_t d4;
	float *q8_scale, *q8_norm, *q8_err; /* |its bytes * scale|, |c_j - that| */
	int32_t *q8_sum;                    /* the sum of its bytes */
	/* over the k centroids: the largest q8_norm, q8_err and |c_j|^2 */
	float q8_nmax, q8_emax, q8_n2max;
} vf_cindex;

#define VF_Q8_MIN_PANELS 64
/* From this many panels on, assigning rows takes the first look too. */
#define VF_ASSIGN_MIN_PANELS 8

int vf_cindex_init(vf_cindex *ci, const float *centroids, uint32_t k, uint32_t dim);
void vf_cindex_free(vf_cindex *ci);
/* dots[j] = <x, c_j> for all j (npanels*VF_PANEL entries). */
void vf_cindex_dots(const vf_cindex *ci, const float *x, float *dots);
/* A binary16 copy of the panels for probing: half the bytes to read for
 * each query.  All centroids are scaled by one power of two first, so the
 * largest coordinate becomes 2^15 (no overflow, and the relative rounding
 * of every coordinate not far below it is 2^-11 at most). */
int vf_cindex_add_half(vf_cindex *ci);
/* The dots for ranking clusters: from the binary16 copy when there is
 * one (<x, rounded c_j>, unscaled exactly), else vf_cindex_dots(). */
void vf_cindex_probe_dots(const vf_cindex *ci, const float *x, float *dots);
/* The same for the panels p0..p1 alone (dots[VF_PANEL * p0 ..]); 0, or -1
 * when a sum is not finite (vf_cindex_probe_dots() then takes the float
 * panels). */
int vf_cindex_probe_panels(const vf_cindex *ci, const float *x, size_t p0, size_t p1,
			   float *dots);
/* Bounds on every cluster's probe score as vf_cindex_probe_dots() gives it
 * (score: |c_j|^2 - 2 <x, c_j>, or -<x, c_j> with `neg`), from the 8-bit
 * copy: lo[j] <= score <= hi[j] (float rounding of both included; +inf for
 * the padding), and each panel's smallest lo and hi in lmin and hmin.
 * raw: npanels * VF_PANEL of room.  0, or -1 when there is no 8-bit copy
 * or x's largest coordinate is below 1e-15 or above 1e30. */
int vf_cindex_probe_bounds(const vf_cindex *ci, const float *x, int neg, int32_t *raw,
			   float *lo, float *hi, float *lmin, float *hmin);
/* Index of the nearest centroid (l2) of each of n points; threads >= 1. */
void vf_nearest(const vf_cindex *ci, const float *pts, size_t n, uint32_t *out,
		float *dist, int threads);
/* ai for assigning points by ci's centroids: ci's float panels and norms
 * (borrowed: ci outlives ai) and, from VF_ASSIGN_MIN_PANELS panels on,
 * their 8-bit copy; 0 or -ENOMEM.  vf_cindex_assign_free() frees what is
 * ai's own. */
int vf_cindex_assign_init(vf_cindex *ai, const vf_cindex *ci);
void vf_cindex_assign_free(vf_cindex *ai);
/* vf_nearest()'s answer for each of n points, ties included, on one
 * thread, from a first look at the 8-bit copy of ci, an index made by
 * vf_cindex_assign_init(): only the panels that can hold the nearest
 * centroid are scored in float.  Without the 8-bit copy (or memory for
 * the look) it is vf_nearest(). */
void vf_nearest_bounded(const vf_cindex *ci, const float *pts, size_t n, uint32_t *out);

/* Progress/abort hook: return non-zero to stop. */
typedef int (*vf_tick_fn)(void *arg, int pct);

/* Train k centroids on n points (row-major, dim floats) with k-means++
 * seeding on a subsample, Lloyd iterations and empty-cluster repair.
 * Returns 0, -ECANCELED or -ENOMEM. */
int vf_kmeans(const float *pts, size_t n, uint32_t dim, uint32_t k, int iters,
	      uint64_t seed, int threads, float *centroids, vf_tick_fn tick,
	      void *targ);

/* The mean of n points (dim floats each) leaving out those whose norm is
 * more than VF_NORM_OUTLIER times the median norm: a few huge records do
 * not move it.  Returns 0 or -ENOMEM. */
#define VF_NORM_OUTLIER 8
int vf_robust_mean(const float *pts, size_t n, uint32_t dim, float *mean);

/* How many clusters suit n records: about sqrt(n) (see kmeans.c). */
uint32_t vf_auto_nlist(uint64_t n);
/* Rows of k-means' training sample for n records in nlist clusters of dim
 * dimensions, and its Lloyd iterations in *iters. */
uint64_t vf_train_sample(uint64_t n, uint32_t nlist, uint32_t dim, int *iters);

#endif
